//! Comparing two normalised observations, and the differences that are intended.
//!
//! [`differences`] walks both JSON trees and reports every leaf that differs, with its path
//! (`deployments["web"].status.replicas`). Events are compared as sets: a line present on both
//! clusters matches whatever its counts (an event recorder may merge repeats into one event
//! with a count, or emit them apart, depending on timing), so only an event line seen on one
//! cluster alone is a difference. [`INTENDED`] lists the differences the project accepts, each
//! with its reason (docs/conformance.md repeats the table).

use std::fmt;

use serde_json::Value;

/// One leaf that differs between the clusters.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Difference {
    /// Where, e.g. `deployments["web"].status.replicas`.
    pub(crate) path: String,
    /// kube-controller-manager's Deployment controller's cluster (`None`: absent).
    pub(crate) upstream: Option<Value>,
    /// Our controller's cluster (`None`: absent).
    pub(crate) ours: Option<Value>,
}

impl fmt::Display for Difference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let show = |v: &Option<Value>| match v {
            None => "(absent)".to_owned(),
            Some(Value::String(s)) => format!("{s:?}"),
            Some(v) => v.to_string(),
        };
        write!(
            f,
            "{}\n      upstream: {}\n      ours:     {}",
            self.path,
            show(&self.upstream),
            show(&self.ours)
        )
    }
}

/// A difference the project accepts: a path pattern (`*` matches any run of characters) and
/// why.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Intended {
    /// Pattern over [`Difference::path`].
    pub(crate) path: &'static str,
    /// The reason, as the report and docs/conformance.md give it.
    pub(crate) reason: &'static str,
}

/// The intended differences. Empty means: everything observable matches, after normalisation.
pub(crate) const INTENDED: &[Intended] = &[];

/// The entry of `intended` that covers `d`, if any.
pub(crate) fn intended_for<'a>(d: &Difference, intended: &'a [Intended]) -> Option<&'a Intended> {
    intended.iter().find(|i| glob(i.path, &d.path))
}

/// Whether `text` matches `pattern`, where `*` matches any (possibly empty) run of characters.
pub(crate) fn glob(pattern: &str, text: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    if parts.len() == 1 {
        return pattern == text;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !text.starts_with(first) || text.len() < first.len() + last.len() || !text.ends_with(last) {
        return false;
    }
    let mut rest = &text[first.len()..text.len() - last.len()];
    for middle in &parts[1..parts.len() - 1] {
        match rest.find(middle) {
            Some(at) => rest = &rest[at + middle.len()..],
            None => return false,
        }
    }
    true
}

fn key_path(path: &str, key: &str) -> String {
    let plain = !key.is_empty() && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if plain {
        if path.is_empty() {
            key.to_owned()
        } else {
            format!("{path}.{key}")
        }
    } else {
        format!("{path}[{key:?}]")
    }
}

/// Every difference between `upstream` and `ours`, in path order.
pub(crate) fn differences(upstream: &Value, ours: &Value) -> Vec<Difference> {
    let mut out = Vec::new();
    walk("", upstream, ours, &mut out);
    out
}

fn walk(path: &str, a: &Value, b: &Value, out: &mut Vec<Difference>) {
    match (a, b) {
        (Value::Object(ma), Value::Object(mb)) => {
            let events = path.ends_with(".events") || path == "events";
            let mut keys: Vec<&String> = ma.keys().chain(mb.keys()).collect();
            keys.sort();
            keys.dedup();
            for k in keys {
                let p = key_path(path, k);
                match (ma.get(k), mb.get(k)) {
                    // Events: present on both sides is a match, whatever the counts.
                    (Some(_), Some(_)) if events => {}
                    (Some(x), Some(y)) => walk(&p, x, y, out),
                    (x, y) => out.push(Difference {
                        path: p,
                        upstream: x.cloned(),
                        ours: y.cloned(),
                    }),
                }
            }
        }
        (Value::Array(xa), Value::Array(xb)) if xa.len() == xb.len() => {
            for (i, (x, y)) in xa.iter().zip(xb).enumerate() {
                walk(&format!("{path}[{i}]"), x, y, out);
            }
        }
        _ if a == b => {}
        _ => out.push(Difference {
            path: path.to_owned(),
            upstream: Some(a.clone()),
            ours: Some(b.clone()),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn leaves_that_differ_are_reported_with_their_path() {
        let a = json!({"deployments": {"web": {
            "status": {"replicas": 3, "conditions": {"Available": {"status": "True"}}},
            "annotations": {"deployment.kubernetes.io/revision": "2"},
            "events": {"Normal A from x: m": 1, "Normal B from x: m": 2},
            "list": [1, 2],
        }}});
        let b = json!({"deployments": {"web": {
            "status": {"replicas": 3, "conditions": {"Available": {"status": "False"}}},
            "annotations": {"deployment.kubernetes.io/revision": "2", "extra": "1"},
            "events": {"Normal A from x: m": 5, "Normal C from x: m": 1},
            "list": [1, 2, 3],
        }}});
        assert!(differences(&a, &a).is_empty());
        let d = differences(&a, &b);
        let paths: Vec<&str> = d.iter().map(|d| d.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "deployments.web.annotations.extra",
                r#"deployments.web.events["Normal B from x: m"]"#,
                r#"deployments.web.events["Normal C from x: m"]"#,
                "deployments.web.list",
                "deployments.web.status.conditions.Available.status",
            ]
        );
        assert_eq!(d[0].upstream, None);
        assert_eq!(d[0].ours, Some(json!("1")));
        assert_eq!(d[1].ours, None);
        assert_eq!(d[4].upstream, Some(json!("True")));
        let shown = d[4].to_string();
        assert!(shown.contains("upstream: \"True\"") && shown.contains("ours:     \"False\""));
        assert!(d[0].to_string().contains("(absent)"));
    }

    #[test]
    fn intended_patterns_match_paths() {
        assert!(glob("a.*.c", "a.b.c"));
        assert!(glob("a*", "a"));
        assert!(glob(
            "*events[*ScalingReplicaSet*",
            r#"deployments.web.events["Normal ScalingReplicaSet x"]"#
        ));
        assert!(!glob("a.*.c", "a.b.d"));
        assert!(!glob("abc", "abcd"));
        assert!(!glob("ab*ba", "aba"));
        let list = [Intended {
            path: "*.generation",
            reason: "r",
        }];
        let d = Difference {
            path: "x.generation".into(),
            upstream: None,
            ours: None,
        };
        assert_eq!(intended_for(&d, &list).map(|i| i.reason), Some("r"));
        let d = Difference {
            path: "x.status".into(),
            upstream: None,
            ours: None,
        };
        assert!(intended_for(&d, &list).is_none());
        // Every listed intended difference has a reason worth reading.
        assert!(INTENDED.iter().all(|i| i.reason.len() > 20));
    }
}

//! What a user can observe of a scenario's namespace, normalised so that two clusters compare.
//!
//! From `kubectl get deployments,replicasets,pods -o json`, the Deployments' events and
//! `kubectl rollout status` / `rollout history`, [`Observation`] builds one JSON tree:
//!
//! - per Deployment: `generation`, labels, annotations (without
//!   `kubectl.kubernetes.io/last-applied-configuration`, the client's own input), finalizers,
//!   whether it is being deleted, `spec`, `status` (conditions keyed by type, their order kept
//!   in `conditionOrder`, timestamps dropped), its ReplicaSets (controller owner reference) keyed
//!   by name, its events and the two `kubectl rollout` outputs;
//! - ReplicaSets without a Deployment as controller (orphans, released ones);
//! - Pods counted by owner, phase, readiness and deletion (pod names are random).
//!
//! Uids, resourceVersions, managed fields and timestamps are left out. Generated names are
//! replaced consistently by [`Names`]: a ReplicaSet named `<deployment>-<pod-template-hash>`
//! becomes `<deployment:rsK>` and its hash `<deployment:hashK>`, K counting the ReplicaSets of
//! that prefix in the order the run first saw them (ties by revision, then creation time), so
//! the same rollout gives the same labels on both clusters whatever the hash function.
//! `kubectl.kubernetes.io/restartedAt` values become `<time>`. Events come from a watch (see
//! [`super::events`]), each version counting; an aggregated event (an event recorder's
//! `(combined from similar events): …`) counts as the message it carries.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

/// Annotation `kubectl rollout restart` sets on the pod template (a timestamp).
const RESTARTED_AT: &str = "kubectl.kubernetes.io/restartedAt";
/// Annotation `kubectl apply` keeps its input in.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";
/// The label the Deployment controller puts on its ReplicaSets and pods.
const HASH_LABEL: &str = "pod-template-hash";
/// How an event recorder prefixes the message of an aggregate of similar events.
const AGGREGATED: &str = "(combined from similar events): ";
/// The revision annotation of ReplicaSets.
const REVISION: &str = "deployment.kubernetes.io/revision";

/// The generated names and hashes one cluster has shown so far, and their stable labels.
#[derive(Debug, Default, Clone)]
pub(crate) struct Names {
    /// Generated ReplicaSet name → label.
    replica_sets: BTreeMap<String, String>,
    /// pod-template-hash value → label.
    hashes: BTreeMap<String, String>,
    /// Labels handed out per name prefix.
    counters: BTreeMap<String, usize>,
}

impl Names {
    /// Labels every generated ReplicaSet name of `replica_sets` not seen before.
    pub(crate) fn learn(&mut self, replica_sets: &[&Value]) {
        let mut fresh: Vec<(u64, String, String, String, String)> = replica_sets
            .iter()
            .filter_map(|rs| {
                let name = rs.pointer("/metadata/name")?.as_str()?;
                let hash = rs.pointer("/metadata/labels")?.get(HASH_LABEL)?.as_str()?;
                let prefix = name.strip_suffix(hash)?.strip_suffix('-')?;
                if prefix.is_empty() || self.replica_sets.contains_key(name) {
                    return None;
                }
                let revision = annotation(rs, REVISION)
                    .and_then(|r| r.parse().ok())
                    .unwrap_or(u64::MAX);
                let created = rs
                    .pointer("/metadata/creationTimestamp")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                Some((
                    revision,
                    created.to_owned(),
                    name.to_owned(),
                    prefix.to_owned(),
                    hash.to_owned(),
                ))
            })
            .collect();
        fresh.sort();
        for (_, _, name, prefix, hash) in fresh {
            let k = self.counters.entry(prefix.clone()).or_default();
            *k += 1;
            self.replica_sets.insert(name, format!("<{prefix}:rs{k}>"));
            self.hashes
                .entry(hash)
                .or_insert_with(|| format!("<{prefix}:hash{k}>"));
        }
    }

    /// `text` with every known generated name and hash replaced by its label (longest first,
    /// so a name is replaced before the hash inside it).
    pub(crate) fn apply(&self, text: &str) -> String {
        let mut pairs: Vec<(&String, &String)> =
            self.replica_sets.iter().chain(self.hashes.iter()).collect();
        pairs.sort_by_key(|(from, _)| std::cmp::Reverse(from.len()));
        let mut out = text.to_owned();
        for (from, to) in pairs {
            if out.contains(from.as_str()) {
                out = out.replace(from.as_str(), to);
            }
        }
        pod_suffixes(&out)
    }

    /// `value` with [`Names::apply`] applied to every string and object key.
    pub(crate) fn apply_value(&self, value: &Value) -> Value {
        match value {
            Value::String(s) => Value::String(self.apply(s)),
            Value::Array(items) => {
                Value::Array(items.iter().map(|v| self.apply_value(v)).collect())
            }
            Value::Object(map) => Value::Object(
                map.iter()
                    .map(|(k, v)| (self.apply(k), self.apply_value(v)))
                    .collect(),
            ),
            other => other.clone(),
        }
    }
}

/// Length of the random suffix of a pod name generated from its ReplicaSet's name.
const POD_SUFFIX_LEN: usize = 5;

/// `text` with the random suffix of every pod name generated from a labelled ReplicaSet name
/// (`<web:rs1>-x7k2p`) replaced by `<pod>`.
fn pod_suffixes(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(">-") {
        let (head, tail) = rest.split_at(at + 2);
        out.push_str(head);
        let suffix: String = tail
            .chars()
            .take_while(char::is_ascii_alphanumeric)
            .collect();
        let labelled = head
            .rfind('<')
            .is_some_and(|open| head[open..].contains(":rs"));
        if labelled && suffix.len() == POD_SUFFIX_LEN {
            out.push_str("<pod>");
            rest = &tail[POD_SUFFIX_LEN..];
        } else {
            rest = tail;
        }
    }
    out.push_str(rest);
    out
}

fn annotation<'a>(object: &'a Value, key: &str) -> Option<&'a str> {
    object.pointer("/metadata/annotations")?.get(key)?.as_str()
}

/// The controller owner reference of `object`: (kind, name).
fn controller_of(object: &Value) -> Option<(String, String)> {
    object
        .pointer("/metadata/ownerReferences")?
        .as_array()?
        .iter()
        .find(|r| r["controller"] == true)
        .map(|r| {
            (
                r["kind"].as_str().unwrap_or_default().to_owned(),
                r["name"].as_str().unwrap_or_default().to_owned(),
            )
        })
}

/// Labels, annotations (minus `drop`), finalizers and deletion of `object`'s metadata.
fn meta(object: &Value, drop: &[&str]) -> Map<String, Value> {
    let m = &object["metadata"];
    let mut out = Map::new();
    let mut annotations = m["annotations"].as_object().cloned().unwrap_or_default();
    for key in drop {
        annotations.remove(*key);
    }
    out.insert("labels".into(), m["labels"].clone());
    out.insert("annotations".into(), Value::Object(annotations));
    if let Some(f) = m.get("finalizers") {
        out.insert("finalizers".into(), f.clone());
    }
    out.insert(
        "deleting".into(),
        json!(m.get("deletionTimestamp").is_some()),
    );
    out.insert("generation".into(), m["generation"].clone());
    out
}

/// Owner references without uids.
fn owners(object: &Value) -> Value {
    let refs = object
        .pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    Value::Array(
        refs.iter()
            .map(|r| {
                json!({
                    "kind": r["kind"], "name": r["name"],
                    "controller": r["controller"], "blockOwnerDeletion": r["blockOwnerDeletion"],
                })
            })
            .collect(),
    )
}

/// `conditions` keyed by type without their timestamps, and the order of the types.
fn conditions(status: &mut Value) {
    let Some(list) = status.get("conditions").and_then(Value::as_array).cloned() else {
        return;
    };
    let mut by_type = Map::new();
    let mut order = Vec::new();
    for c in list {
        let t = c["type"].as_str().unwrap_or_default().to_owned();
        order.push(json!(t));
        by_type.insert(
            t,
            json!({"status": c["status"], "reason": c["reason"], "message": c["message"]}),
        );
    }
    status["conditions"] = Value::Object(by_type);
    status["conditionOrder"] = Value::Array(order);
}

/// A pod template with `restartedAt` values replaced.
fn template(t: &Value) -> Value {
    let mut t = t.clone();
    if let Some(a) = t
        .pointer_mut("/metadata/annotations")
        .and_then(Value::as_object_mut)
        && a.contains_key(RESTARTED_AT)
    {
        a.insert(RESTARTED_AT.into(), json!("<time>"));
    }
    t
}

fn replica_set(rs: &Value) -> Value {
    let mut out = meta(rs, &[]);
    out.insert("ownerReferences".into(), owners(rs));
    let spec = &rs["spec"];
    out.insert(
        "spec".into(),
        json!({
            "replicas": spec["replicas"], "minReadySeconds": spec["minReadySeconds"],
            "selector": spec["selector"], "template": template(&spec["template"]),
        }),
    );
    let mut status = rs["status"].clone();
    conditions(&mut status);
    out.insert("status".into(), status);
    Value::Object(out)
}

fn deployment(d: &Value) -> Value {
    let mut out = meta(d, &[LAST_APPLIED]);
    let mut spec = d["spec"].clone();
    spec["template"] = template(&spec["template"]);
    out.insert("spec".into(), spec);
    let mut status = d["status"].clone();
    conditions(&mut status);
    out.insert("status".into(), status);
    out.insert("replicaSets".into(), json!({}));
    Value::Object(out)
}

/// One cluster's normalised state of a namespace.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Observation(pub(crate) Value);

impl Observation {
    /// Builds the state from a `kubectl get deployments,replicasets,pods -o json` list, learning
    /// new generated names into `names` first.
    pub(crate) fn from_list(list: &Value, names: &mut Names) -> Observation {
        let items: Vec<&Value> = list["items"]
            .as_array()
            .map(|v| v.iter().collect())
            .unwrap_or_default();
        let of_kind =
            |k: &str| -> Vec<&Value> { items.iter().copied().filter(|i| i["kind"] == k).collect() };
        let rss = of_kind("ReplicaSet");
        names.learn(&rss);
        let mut deployments = Map::new();
        for d in of_kind("Deployment") {
            let name = d["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            deployments.insert(name, deployment(d));
        }
        let mut orphans = Map::new();
        for rs in rss {
            let name = names.apply(rs["metadata"]["name"].as_str().unwrap_or_default());
            let value = names.apply_value(&replica_set(rs));
            match controller_of(rs) {
                Some((kind, owner)) if kind == "Deployment" && deployments.contains_key(&owner) => {
                    deployments[&owner]["replicaSets"][&name] = value;
                }
                _ => {
                    orphans.insert(name, value);
                }
            }
        }
        let mut pods: BTreeMap<String, u64> = BTreeMap::new();
        for p in of_kind("Pod") {
            let owner = controller_of(p)
                .map(|(k, n)| format!("{k} {}", names.apply(&n)))
                .unwrap_or_else(|| "no owner".to_owned());
            let ready = p["status"]["conditions"]
                .as_array()
                .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready"))
                .is_some_and(|c| c["status"] == "True");
            let key = format!(
                "{owner}, {}{}{}",
                p["status"]["phase"].as_str().unwrap_or("no phase"),
                if ready { ", ready" } else { "" },
                if p["metadata"].get("deletionTimestamp").is_some() {
                    ", deleting"
                } else {
                    ""
                }
            );
            *pods.entry(key).or_default() += 1;
        }
        let deployments = names.apply_value(&Value::Object(deployments));
        Observation(json!({
            "deployments": deployments,
            "replicaSetsWithoutDeployment": orphans,
            "pods": pods,
        }))
    }

    /// Whether every Deployment's `status.observedGeneration` has caught up.
    pub(crate) fn generations_observed(&self) -> bool {
        self.0["deployments"].as_object().is_none_or(|ds| {
            ds.values()
                .all(|d| d["status"]["observedGeneration"].as_i64() >= d["generation"].as_i64())
        })
    }

    /// Names of the Deployments.
    pub(crate) fn deployment_names(&self) -> Vec<String> {
        self.0["deployments"]
            .as_object()
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default()
    }

    /// Whether Deployment `name` has condition `type` with `status` (and `reason`).
    pub(crate) fn has_condition(
        &self,
        name: &str,
        type_: &str,
        status: &str,
        reason: Option<&str>,
    ) -> bool {
        let c = &self.0["deployments"][name]["status"]["conditions"][type_];
        c["status"] == status && reason.is_none_or(|r| c["reason"] == r)
    }

    /// Adds `events` (every version of every event seen, in any order, repeats allowed) to
    /// their Deployments, as a map from `"<type> <reason> from <component>: <message>"` to the
    /// number of occurrences (an event's highest `count` under that message, summed over
    /// events; only which lines appear is compared). An aggregate's message counts as the
    /// message it carries: which messages an event recorder folds into an aggregate is random.
    pub(crate) fn add_events<'a>(
        &mut self,
        events: impl IntoIterator<Item = &'a Value>,
        names: &Names,
    ) {
        // (Deployment, line) -> event uid (or name) -> highest count.
        let mut counts: BTreeMap<(String, String), BTreeMap<String, u64>> = BTreeMap::new();
        for e in events {
            if e["involvedObject"]["kind"] != "Deployment" {
                continue;
            }
            let owner = e["involvedObject"]["name"].as_str().unwrap_or_default();
            let from = e["source"]["component"]
                .as_str()
                .filter(|s| !s.is_empty())
                .or_else(|| e["reportingComponent"].as_str())
                .unwrap_or_default();
            let message = e["message"].as_str().unwrap_or_default();
            let message = message.strip_prefix(AGGREGATED).unwrap_or(message);
            let line = names.apply(&format!(
                "{} {} from {from}: {message}",
                e["type"].as_str().unwrap_or_default(),
                e["reason"].as_str().unwrap_or_default(),
            ));
            let id = e["metadata"]["uid"]
                .as_str()
                .or_else(|| e["metadata"]["name"].as_str())
                .unwrap_or_default()
                .to_owned();
            let count = e["count"].as_u64().unwrap_or(1).max(1);
            let highest = counts
                .entry((owner.to_owned(), line))
                .or_default()
                .entry(id)
                .or_default();
            *highest = (*highest).max(count);
        }
        let mut by_deployment: BTreeMap<String, BTreeMap<String, u64>> = BTreeMap::new();
        for ((owner, line), per_event) in counts {
            by_deployment
                .entry(owner)
                .or_default()
                .insert(line, per_event.values().sum());
        }
        for (name, events) in by_deployment {
            if let Some(d) = self.0["deployments"].get_mut(&name) {
                d["events"] = json!(events);
            } else {
                self.0["eventsOfDeletedDeployments"][&name] = json!(events);
            }
        }
    }

    /// Records a `kubectl rollout <what>` result of Deployment `name`.
    pub(crate) fn add_rollout(&mut self, name: &str, what: &str, output: &str, names: &Names) {
        if let Some(d) = self.0["deployments"].get_mut(name) {
            d[format!("rollout {what}")] = json!(names.apply(output.trim_end()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rs(name: &str, hash: &str, revision: &str, owner: Option<&str>, replicas: i64) -> Value {
        let mut v = json!({
            "kind": "ReplicaSet",
            "metadata": {
                "name": name, "uid": "u-1", "resourceVersion": "77", "generation": 1,
                "creationTimestamp": "2026-01-01T00:00:00Z",
                "labels": {"app": "web", "pod-template-hash": hash},
                "annotations": {"deployment.kubernetes.io/revision": revision},
            },
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"pod-template-hash": hash}},
                     "template": {"metadata": {"labels": {"pod-template-hash": hash}}}},
            "status": {"replicas": replicas},
        });
        if let Some(o) = owner {
            v["metadata"]["ownerReferences"] =
                json!([{"kind": "Deployment", "name": o, "uid": "x", "controller": true}]);
        }
        v
    }

    fn deploy(message: &str) -> Value {
        json!({
            "kind": "Deployment",
            "metadata": {"name": "web", "generation": 2, "uid": "d",
                         "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}",
                                         "deployment.kubernetes.io/revision": "2"}},
            "spec": {"replicas": 2, "template": {"metadata": {"annotations":
                {"kubectl.kubernetes.io/restartedAt": "2026-11-26T13:00:00Z"}}}},
            "status": {"observedGeneration": 2, "conditions": [
                {"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable",
                 "lastUpdateTime": "t1", "lastTransitionTime": "t2", "message": "ok"},
                {"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable",
                 "lastUpdateTime": "t3", "message": message}]},
        })
    }

    fn list(items: Vec<Value>) -> Value {
        json!({ "items": items })
    }

    #[test]
    fn generated_names_and_hashes_get_the_same_labels_on_both_clusters() {
        // The same rollout with different hash functions.
        let up = list(vec![
            deploy("ReplicaSet \"web-7d9f8c6b5\" has successfully progressed."),
            rs("web-7d9f8c6b5", "7d9f8c6b5", "2", Some("web"), 2),
            rs("web-55c4d9bb4", "55c4d9bb4", "1", Some("web"), 0),
        ]);
        let ours = list(vec![
            deploy("ReplicaSet \"web-bx2v8\" has successfully progressed."),
            rs("web-q9zz4", "q9zz4", "1", Some("web"), 0),
            rs("web-bx2v8", "bx2v8", "2", Some("web"), 2),
        ]);
        let (mut n_up, mut n_ours) = (Names::default(), Names::default());
        let a = Observation::from_list(&up, &mut n_up);
        let b = Observation::from_list(&ours, &mut n_ours);
        assert_eq!(a, b);
        let d = &a.0["deployments"]["web"];
        let rs2 = &d["replicaSets"]["<web:rs2>"];
        assert_eq!(rs2["labels"]["pod-template-hash"], "<web:hash2>");
        assert_eq!(rs2["spec"]["replicas"], 2);
        assert_eq!(
            d["status"]["conditions"]["Progressing"]["message"],
            "ReplicaSet \"<web:rs2>\" has successfully progressed."
        );
        assert_eq!(
            d["status"]["conditionOrder"],
            json!(["Available", "Progressing"])
        );
        // Volatile fields are gone.
        let text = a.0.to_string();
        for gone in [
            "uid",
            "resourceVersion",
            "lastUpdateTime",
            "last-applied",
            "13:00:00",
        ] {
            assert!(!text.contains(gone), "{gone} in {text}");
        }
        assert_eq!(
            d["spec"]["template"]["metadata"]["annotations"][RESTARTED_AT],
            "<time>"
        );
        assert!(a.generations_observed());
        assert!(a.has_condition("web", "Progressing", "True", Some("NewReplicaSetAvailable")));
        assert!(!a.has_condition("web", "Progressing", "False", None));

        // A later ReplicaSet continues the count; an orphan keeps its label after release.
        let later = list(vec![
            rs("web-q9zz4", "q9zz4", "3", None, 0),
            rs("web-hh4k2", "hh4k2", "4", Some("web"), 1),
        ]);
        let c = Observation::from_list(&later, &mut n_ours);
        assert!(c.0["replicaSetsWithoutDeployment"]["<web:rs1>"].is_object());
        // Its owner is gone from the list, so it counts as without a Deployment too.
        assert!(c.0["replicaSetsWithoutDeployment"]["<web:rs3>"].is_object());
        assert!(c.0["deployments"].as_object().unwrap().is_empty());
    }

    #[test]
    fn events_are_attached_to_their_deployment_with_names_replaced() {
        let mut names = Names::default();
        let mut obs = Observation::from_list(
            &list(vec![
                deploy("m"),
                rs("web-abc12", "abc12", "1", Some("web"), 1),
            ]),
            &mut names,
        );
        let events = [
            json!({"involvedObject": {"kind": "Deployment", "name": "web"}, "type": "Normal",
                   "metadata": {"uid": "a"},
                   "reason": "ScalingReplicaSet", "count": 2, "source": {"component": "deployment-controller"},
                   "message": "Scaled up replica set web-abc12 from 0 to 1"}),
            // The same event seen again with a higher count, and an event of its own.
            json!({"involvedObject": {"kind": "Deployment", "name": "web"}, "type": "Normal",
                   "metadata": {"uid": "a"},
                   "reason": "ScalingReplicaSet", "count": 3, "source": {"component": "deployment-controller"},
                   "message": "Scaled up replica set web-abc12 from 0 to 1"}),
            json!({"involvedObject": {"kind": "Deployment", "name": "web"}, "type": "Normal",
                   "metadata": {"uid": "b"},
                   "reason": "ScalingReplicaSet", "reportingComponent": "deployment-controller",
                   "message": "Scaled up replica set web-abc12 from 0 to 1"}),
            json!({"involvedObject": {"kind": "ReplicaSet", "name": "web-abc12"}, "type": "Normal",
                   "reason": "SuccessfulCreate", "message": "x"}),
            json!({"involvedObject": {"kind": "Deployment", "name": "gone"}, "type": "Normal",
                   "reason": "R", "message": "m"}),
            // An aggregate seen with two messages: both count.
            json!({"involvedObject": {"kind": "Deployment", "name": "web"}, "type": "Normal",
                   "metadata": {"uid": "c"},
                   "reason": "ScalingReplicaSet", "count": 4, "source": {"component": "c"},
                   "message": "(combined from similar events): Scaled down replica set web-abc12 from 3 to 2"}),
            json!({"involvedObject": {"kind": "Deployment", "name": "web"}, "type": "Normal",
                   "metadata": {"uid": "c"},
                   "reason": "ScalingReplicaSet", "count": 5, "source": {"component": "c"},
                   "message": "(combined from similar events): Scaled down replica set web-abc12 from 2 to 1"}),
        ];
        obs.add_events(&events, &names);
        assert_eq!(
            obs.0["deployments"]["web"]["events"],
            json!({
                "Normal ScalingReplicaSet from deployment-controller: Scaled up replica set <web:rs1> from 0 to 1": 4,
                "Normal ScalingReplicaSet from c: Scaled down replica set <web:rs1> from 3 to 2": 4,
                "Normal ScalingReplicaSet from c: Scaled down replica set <web:rs1> from 2 to 1": 5,
            })
        );
        assert_eq!(
            obs.0["eventsOfDeletedDeployments"]["gone"],
            json!({"Normal R from : m": 1})
        );
        obs.add_rollout("web", "history", "REVISION\n1 web-abc12\n", &names);
        assert_eq!(
            obs.0["deployments"]["web"]["rollout history"],
            "REVISION\n1 <web:rs1>"
        );
    }

    #[test]
    fn pod_names_lose_their_random_suffix() {
        let mut names = Names::default();
        names.learn(&[&rs("web-abc12", "abc12", "1", None, 1)]);
        assert_eq!(
            names.apply("pods \"web-abc12-x7k2p\" is forbidden; web-abc12-toolong stays"),
            "pods \"<web:rs1>-<pod>\" is forbidden; <web:rs1>-toolong stays"
        );
        assert_eq!(pod_suffixes("<other>-x7k2p, a>-b"), "<other>-x7k2p, a>-b");
    }

    #[test]
    fn pods_are_counted_by_owner_and_state() {
        let mut names = Names::default();
        let pod = |owner: &str, ready: &str, deleting: bool| {
            let mut p = json!({"kind": "Pod", "metadata": {"name": format!("{owner}-zzzzz"),
                "ownerReferences": [{"kind": "ReplicaSet", "name": owner, "controller": true}]},
                "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": ready}]}});
            if deleting {
                p["metadata"]["deletionTimestamp"] = json!("t");
            }
            p
        };
        let obs = Observation::from_list(
            &list(vec![
                rs("web-abc12", "abc12", "1", None, 2),
                pod("web-abc12", "True", false),
                pod("web-abc12", "True", false),
                pod("web-abc12", "False", true),
            ]),
            &mut names,
        );
        assert_eq!(
            obs.0["pods"],
            json!({"ReplicaSet <web:rs1>, Running, ready": 2, "ReplicaSet <web:rs1>, Running, deleting": 1})
        );
    }
}

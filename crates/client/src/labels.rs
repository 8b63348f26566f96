//! Label selectors: parsing the query syntax, converting `metav1.LabelSelector`, matching.
//!
//! This is apimachinery's `labels` package: the same grammar (`a=b`, `a==b`, `a!=b`,
//! `a in (x,y)`, `a notin (x)`, `a`, `!a`, `a>1`, `a<5`, comma-separated), the same
//! `LabelSelector` conversion rules (a selector with nothing in it selects everything), and
//! the same canonical string form (requirements sorted by key, values sorted).
//!
//! ```
//! use std::collections::BTreeMap;
//! use kctrl_client::labels::Selector;
//!
//! let sel = Selector::parse("app=web, tier in (frontend,edge), !canary").unwrap();
//! let labels: BTreeMap<String, String> =
//!     [("app".into(), "web".into()), ("tier".into(), "edge".into())].into();
//! assert!(sel.matches(&labels));
//! assert_eq!(sel.to_string(), "app=web,!canary,tier in (edge,frontend)");
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

/// A selector that could not be parsed or converted; the message names the offending part.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid label selector {selector:?}: {reason}")]
pub struct SelectorError {
    /// The selector text (or a rendering of the `LabelSelector`).
    pub selector: String,
    /// What is wrong.
    pub reason: String,
}

/// The operator of one requirement.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Operator {
    /// `key=value` / `key==value`.
    Equals,
    /// `key!=value`.
    NotEquals,
    /// `key in (v1,v2)`.
    In,
    /// `key notin (v1,v2)`.
    NotIn,
    /// `key`.
    Exists,
    /// `!key`.
    DoesNotExist,
    /// `key>N` (integer comparison).
    GreaterThan,
    /// `key<N` (integer comparison).
    LessThan,
}

/// One `key op values` term of a selector.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Requirement {
    key: String,
    op: Operator,
    values: BTreeSet<String>,
}

impl Requirement {
    /// A requirement, validated as apimachinery's `NewRequirement` does.
    pub fn new(
        key: impl Into<String>,
        op: Operator,
        values: impl IntoIterator<Item = String>,
    ) -> Result<Self, String> {
        let key = key.into();
        validate_key(&key)?;
        let values: BTreeSet<String> = values.into_iter().collect();
        match op {
            Operator::In | Operator::NotIn if values.is_empty() => {
                return Err(format!(
                    "{key}: for 'in' and 'notin' operators, values set can't be empty"
                ));
            }
            Operator::Equals | Operator::NotEquals if values.len() != 1 => {
                return Err(format!(
                    "{key}: exact-match compatibility requires one single value"
                ));
            }
            Operator::Exists | Operator::DoesNotExist if !values.is_empty() => {
                return Err(format!(
                    "{key}: values set must be empty for exists and does not exist"
                ));
            }
            Operator::GreaterThan | Operator::LessThan => {
                if values.len() != 1 {
                    return Err(format!(
                        "{key}: for 'Gt', 'Lt' operators, exactly one value is required"
                    ));
                }
                for v in &values {
                    if v.parse::<i64>().is_err() {
                        return Err(format!(
                            "{key}: for 'Gt', 'Lt' operators, the value must be an integer, not {v:?}"
                        ));
                    }
                }
            }
            _ => {}
        }
        for v in &values {
            validate_value(&key, v)?;
        }
        Ok(Self { key, op, values })
    }

    /// The label key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The operator.
    pub fn operator(&self) -> Operator {
        self.op
    }

    /// The values, sorted.
    pub fn values(&self) -> impl Iterator<Item = &str> {
        self.values.iter().map(String::as_str)
    }

    /// Whether `labels` satisfy this requirement.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.matches_with(|k| labels.get(k).map(String::as_str))
    }

    /// Whether the label set that `label` looks values up in satisfies this requirement
    /// (for label sets not held in a `BTreeMap`).
    pub fn matches_with<'a>(&self, label: impl Fn(&str) -> Option<&'a str>) -> bool {
        let value = label(&self.key);
        match self.op {
            Operator::Equals | Operator::In => value.is_some_and(|v| self.values.contains(v)),
            Operator::NotEquals | Operator::NotIn => value.is_none_or(|v| !self.values.contains(v)),
            Operator::Exists => value.is_some(),
            Operator::DoesNotExist => value.is_none(),
            Operator::GreaterThan | Operator::LessThan => {
                let Some(Ok(have)) = value.map(|v| v.parse::<i64>()) else {
                    return false;
                };
                self.values
                    .iter()
                    .filter_map(|v| v.parse::<i64>().ok())
                    .all(|want| {
                        if self.op == Operator::GreaterThan {
                            have > want
                        } else {
                            have < want
                        }
                    })
            }
        }
    }
}

impl fmt::Display for Requirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let one = || self.values.iter().next().map(String::as_str).unwrap_or("");
        match self.op {
            Operator::Equals => write!(f, "{}={}", self.key, one()),
            Operator::NotEquals => write!(f, "{}!={}", self.key, one()),
            Operator::GreaterThan => write!(f, "{}>{}", self.key, one()),
            Operator::LessThan => write!(f, "{}<{}", self.key, one()),
            Operator::Exists => write!(f, "{}", self.key),
            Operator::DoesNotExist => write!(f, "!{}", self.key),
            Operator::In | Operator::NotIn => {
                let word = if self.op == Operator::In {
                    "in"
                } else {
                    "notin"
                };
                let vals: Vec<&str> = self.values.iter().map(String::as_str).collect();
                // The set holding only "" is written `(,)`: `()` would read as no values.
                let list = if vals == [""] {
                    ",".to_owned()
                } else {
                    vals.join(",")
                };
                write!(f, "{} {word} ({list})", self.key)
            }
        }
    }
}

/// A label selector: the conjunction of its requirements.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub enum Selector {
    /// Matches every label set (the empty selector).
    #[default]
    Everything,
    /// Matches nothing (a nil `LabelSelector`).
    Nothing,
    /// Matches label sets that satisfy every requirement (sorted by key).
    Requirements(Vec<Requirement>),
}

impl Selector {
    /// The selector that matches everything.
    pub fn everything() -> Self {
        Selector::Everything
    }

    /// The selector that matches nothing.
    pub fn nothing() -> Self {
        Selector::Nothing
    }

    /// Whether this selector matches every label set without looking at it.
    pub fn is_everything(&self) -> bool {
        matches!(self, Selector::Everything)
    }

    /// Whether this selector matches nothing.
    pub fn is_nothing(&self) -> bool {
        matches!(self, Selector::Nothing)
    }

    fn from_requirements(mut reqs: Vec<Requirement>) -> Self {
        if reqs.is_empty() {
            return Selector::Everything;
        }
        reqs.sort_by(|a, b| a.key.cmp(&b.key));
        Selector::Requirements(reqs)
    }

    /// A selector requiring every `key=value` of `labels` (apimachinery's `SelectorFromSet`).
    pub fn from_map(labels: &BTreeMap<String, String>) -> Result<Self, SelectorError> {
        let reqs = labels
            .iter()
            .map(|(k, v)| Requirement::new(k.clone(), Operator::Equals, [v.clone()]))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|reason| SelectorError {
                selector: format!("{labels:?}"),
                reason,
            })?;
        Ok(Self::from_requirements(reqs))
    }

    /// Converts a `metav1.LabelSelector` (apimachinery's `LabelSelectorAsSelector`): no
    /// matchLabels and no matchExpressions selects everything. A missing selector (`None` at
    /// the call site) selects nothing: use [`Selector::nothing`].
    pub fn from_label_selector(selector: &LabelSelector) -> Result<Self, SelectorError> {
        let err = |reason: String| SelectorError {
            selector: render_label_selector(selector),
            reason,
        };
        let mut reqs = Vec::new();
        for (k, v) in selector.match_labels.iter().flatten() {
            reqs.push(Requirement::new(k.clone(), Operator::Equals, [v.clone()]).map_err(err)?);
        }
        for expr in selector.match_expressions.iter().flatten() {
            let op = match expr.operator.as_str() {
                "In" => Operator::In,
                "NotIn" => Operator::NotIn,
                "Exists" => Operator::Exists,
                "DoesNotExist" => Operator::DoesNotExist,
                other => {
                    return Err(err(format!(
                        "{other:?} is not a valid label selector operator"
                    )));
                }
            };
            let values = expr.values.clone().unwrap_or_default();
            reqs.push(Requirement::new(expr.key.clone(), op, values).map_err(err)?);
        }
        Ok(Self::from_requirements(reqs))
    }

    /// Parses the query syntax. The empty string selects everything.
    pub fn parse(text: &str) -> Result<Self, SelectorError> {
        Parser::new(text)
            .parse()
            .map(Self::from_requirements)
            .map_err(|reason| SelectorError {
                selector: text.to_owned(),
                reason,
            })
    }

    /// Whether `labels` satisfy the selector.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.matches_with(|k| labels.get(k).map(String::as_str))
    }

    /// Whether the label set that `label` looks values up in satisfies the selector.
    ///
    /// ```
    /// use kctrl_client::labels::Selector;
    ///
    /// let selector = Selector::parse("app=web,tier notin (db)").unwrap();
    /// let labels = [("app", "web"), ("tier", "front")];
    /// let lookup = |k: &str| labels.iter().find(|(key, _)| *key == k).map(|(_, v)| *v);
    /// assert!(selector.matches_with(lookup));
    /// ```
    pub fn matches_with<'a>(&self, label: impl Fn(&str) -> Option<&'a str>) -> bool {
        match self {
            Selector::Everything => true,
            Selector::Nothing => false,
            Selector::Requirements(reqs) => reqs.iter().all(|r| r.matches_with(&label)),
        }
    }

    /// Whether an object's labels, read through its metadata, satisfy the selector.
    pub fn matches_meta(&self, meta: &impl crate::ObjectMetaAccess) -> bool {
        self.matches_with(|k| meta.label(k))
    }

    /// Like [`Selector::matches`] for an object's optional label map.
    pub fn matches_opt(&self, labels: Option<&BTreeMap<String, String>>) -> bool {
        static EMPTY: BTreeMap<String, String> = BTreeMap::new();
        self.matches(labels.unwrap_or(&EMPTY))
    }

    /// The requirements (empty for `Everything` and `Nothing`).
    pub fn requirements(&self) -> &[Requirement] {
        match self {
            Selector::Requirements(r) => r,
            _ => &[],
        }
    }
}

impl fmt::Display for Selector {
    /// The canonical query form; `Everything` is the empty string. `Nothing` has no query form
    /// and renders as apimachinery does, `<none>`... which no server accepts, so callers
    /// must not send it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Selector::Everything => Ok(()),
            Selector::Nothing => f.write_str("<none>"),
            Selector::Requirements(reqs) => {
                for (i, r) in reqs.iter().enumerate() {
                    if i > 0 {
                        f.write_str(",")?;
                    }
                    write!(f, "{r}")?;
                }
                Ok(())
            }
        }
    }
}

fn render_label_selector(s: &LabelSelector) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "<LabelSelector>".to_owned())
}

/// A label key: an optional DNS-subdomain prefix and `/`, then a name of at most 63
/// characters of `[A-Za-z0-9_.-]` starting and ending alphanumeric.
fn validate_key(key: &str) -> Result<(), String> {
    let (prefix, name) = match key.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if let Some(p) = prefix {
        let ok = !p.is_empty()
            && p.len() <= 253
            && p.split('.').all(|part| {
                !part.is_empty()
                    && part
                        .bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                    && !part.starts_with('-')
                    && !part.ends_with('-')
            });
        if !ok {
            return Err(format!("key {key:?}: prefix must be a DNS subdomain"));
        }
    }
    if name.is_empty() || name.len() > 63 || !is_label_token(name) {
        return Err(format!(
            "key {key:?}: name part must be 1-63 characters of [A-Za-z0-9_.-], beginning and ending with an alphanumeric character"
        ));
    }
    Ok(())
}

fn validate_value(key: &str, value: &str) -> Result<(), String> {
    if value.is_empty() {
        return Ok(());
    }
    if value.len() > 63 || !is_label_token(value) {
        return Err(format!(
            "value {value:?} of key {key}: must be at most 63 characters of [A-Za-z0-9_.-], beginning and ending with an alphanumeric character"
        ));
    }
    Ok(())
}

fn is_label_token(s: &str) -> bool {
    let b = s.as_bytes();
    b.iter()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
        && b.first().is_some_and(u8::is_ascii_alphanumeric)
        && b.last().is_some_and(u8::is_ascii_alphanumeric)
}

/// A small recursive-descent parser over the selector text.
struct Parser<'a> {
    s: &'a str,
    pos: usize,
}

impl<'a> Parser<'a> {
    fn new(s: &'a str) -> Self {
        Self { s, pos: 0 }
    }

    fn skip_ws(&mut self) {
        while self.s[self.pos..].starts_with(char::is_whitespace) {
            self.pos += self.s[self.pos..].chars().next().map_or(1, char::len_utf8);
        }
    }

    fn eat(&mut self, tok: &str) -> bool {
        self.skip_ws();
        if self.s[self.pos..].starts_with(tok) {
            self.pos += tok.len();
            true
        } else {
            false
        }
    }

    fn at_end(&mut self) -> bool {
        self.skip_ws();
        self.pos >= self.s.len()
    }

    /// A run of characters that may form a key or a value.
    fn word(&mut self) -> &'a str {
        self.skip_ws();
        let rest = &self.s[self.pos..];
        let len = rest
            .find(|c: char| c.is_whitespace() || "=!<>(),".contains(c))
            .unwrap_or(rest.len());
        self.pos += len;
        &rest[..len]
    }

    fn parse(&mut self) -> Result<Vec<Requirement>, String> {
        let mut reqs = Vec::new();
        if self.at_end() {
            return Ok(reqs);
        }
        loop {
            reqs.push(self.requirement()?);
            if self.at_end() {
                return Ok(reqs);
            }
            if !self.eat(",") {
                return Err(format!("expected ',' at position {}", self.pos));
            }
            if self.at_end() {
                return Err("a requirement is missing after the last ','".to_owned());
            }
        }
    }

    fn requirement(&mut self) -> Result<Requirement, String> {
        if self.eat("!") {
            let key = self.word();
            if key.is_empty() {
                return Err(format!("expected a key after '!' at position {}", self.pos));
            }
            return Requirement::new(key, Operator::DoesNotExist, []);
        }
        let key = self.word();
        if key.is_empty() {
            return Err(format!("expected a key at position {}", self.pos));
        }
        let op = if self.eat("==") || self.eat("=") {
            Operator::Equals
        } else if self.eat("!=") {
            Operator::NotEquals
        } else if self.eat(">") {
            Operator::GreaterThan
        } else if self.eat("<") {
            Operator::LessThan
        } else {
            let save = self.pos;
            match self.word() {
                "in" => Operator::In,
                "notin" => Operator::NotIn,
                "" => return Requirement::new(key, Operator::Exists, []),
                other => {
                    self.pos = save;
                    return Err(format!("unexpected {other:?} after key {key:?}"));
                }
            }
        };
        let values = match op {
            Operator::In | Operator::NotIn => self.value_set(key)?,
            _ => vec![self.word().to_owned()],
        };
        Requirement::new(key, op, values)
    }

    fn value_set(&mut self, key: &str) -> Result<Vec<String>, String> {
        if !self.eat("(") {
            return Err(format!("expected '(' after the operator of {key:?}"));
        }
        let mut values = Vec::new();
        if self.eat(")") {
            return Ok(values);
        }
        loop {
            values.push(self.word().to_owned());
            if self.eat(")") {
                return Ok(values);
            }
            if !self.eat(",") {
                return Err(format!("expected ',' or ')' in the values of {key:?}"));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    fn set(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    // Cases after apimachinery's TestSelectorParse / TestEverything / TestSelectorMatches.
    #[test]
    fn selector_parse_round_trips_canonical_form() {
        for (input, canonical) in [
            ("", ""),
            ("x=a", "x=a"),
            ("y=a,x=b", "x=b,y=a"),
            ("x=a,y!=b", "x=a,y!=b"),
            ("x==a", "x=a"),
            ("x=a,y!=b,z in (h,i,j)", "x=a,y!=b,z in (h,i,j)"),
            ("x notin ( h , i )", "x notin (h,i)"),
            ("x>1", "x>1"),
            ("x<7", "x<7"),
            ("!x", "!x"),
            ("x", "x"),
            (" x = a , !y ", "x=a,!y"),
            ("z,!a,m=1", "!a,m=1,z"),
            ("x=", "x="),
            ("x in (a,)", "x in (,a)"),
            ("example.com/app=web", "example.com/app=web"),
        ] {
            let sel = Selector::parse(input).unwrap_or_else(|e| panic!("{input:?}: {e}"));
            assert_eq!(sel.to_string(), canonical, "input {input:?}");
        }
    }

    // Found by the label_selector fuzz target (fuzz/regressions/label_selector/): a value set
    // of only the empty string was written `()`, which does not parse.
    #[test]
    fn only_empty_values_round_trip() {
        for input in ["mw in (,,,,,,,,,,,),!Y", "x in (,)", "x notin (,)"] {
            let sel = Selector::parse(input).unwrap();
            let canonical = sel.to_string();
            assert_eq!(
                Selector::parse(&canonical),
                Ok(sel),
                "{input:?} -> {canonical:?}"
            );
        }
        assert_eq!(Selector::parse("x in (,)").unwrap().to_string(), "x in (,)");
    }

    #[test]
    fn selector_parse_rejects_bad_input_with_a_reason() {
        for input in [
            "x=a||y=b",
            "x==a==b",
            "!x=a",
            "x<a",
            "x in ()",
            "x in a",
            ",x=a",
            "x=a,",
            "x=a b",
            "-x=a",
            "x=-a",
            "Bad_Prefix/x=a",
        ] {
            let err = Selector::parse(input).unwrap_err();
            assert_eq!(err.selector, input);
            assert!(!err.reason.is_empty());
        }
    }

    #[test]
    fn selector_matches() {
        let labels = set(&[("x", "y"), ("n", "5")]);
        for (sel, want) in [
            ("", true),
            ("x=y", true),
            ("x=z", false),
            ("x!=z", true),
            ("x!=y", false),
            ("w!=v", true),
            ("x in (y,z)", true),
            ("x notin (y,z)", false),
            ("w notin (y)", true),
            ("x", true),
            ("!x", false),
            ("!w", true),
            ("n>4", true),
            ("n>5", false),
            ("n<6", true),
            ("x>1", false),
            ("x=y,n=5", true),
            ("x=y,n=6", false),
        ] {
            assert_eq!(
                Selector::parse(sel).unwrap().matches(&labels),
                want,
                "{sel}"
            );
        }
        assert!(!Selector::nothing().matches(&labels));
        assert!(Selector::everything().matches(&BTreeMap::new()));
    }

    #[test]
    fn label_selector_as_selector() {
        // Empty selects everything.
        assert!(
            Selector::from_label_selector(&LabelSelector::default())
                .unwrap()
                .is_everything()
        );
        let ls = LabelSelector {
            match_labels: Some(set(&[("app", "web")])),
            match_expressions: Some(vec![
                LabelSelectorRequirement {
                    key: "tier".into(),
                    operator: "In".into(),
                    values: Some(vec!["b".into(), "a".into()]),
                },
                LabelSelectorRequirement {
                    key: "canary".into(),
                    operator: "DoesNotExist".into(),
                    values: None,
                },
            ]),
        };
        let sel = Selector::from_label_selector(&ls).unwrap();
        assert_eq!(sel.to_string(), "app=web,!canary,tier in (a,b)");
        assert!(sel.matches(&set(&[("app", "web"), ("tier", "a")])));
        assert!(!sel.matches(&set(&[("app", "web"), ("tier", "a"), ("canary", "1")])));

        let bad = LabelSelector {
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: "k".into(),
                operator: "Near".into(),
                values: None,
            }]),
            ..Default::default()
        };
        let err = Selector::from_label_selector(&bad).unwrap_err();
        assert!(
            err.to_string()
                .contains("\"Near\" is not a valid label selector operator"),
            "{err}"
        );
        let empty_in = LabelSelector {
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: "k".into(),
                operator: "In".into(),
                values: Some(vec![]),
            }]),
            ..Default::default()
        };
        assert!(Selector::from_label_selector(&empty_in).is_err());
    }

    #[test]
    fn from_map_requires_every_pair() {
        let sel = Selector::from_map(&set(&[("b", "2"), ("a", "1")])).unwrap();
        assert_eq!(sel.to_string(), "a=1,b=2");
        assert!(
            Selector::from_map(&BTreeMap::new())
                .unwrap()
                .is_everything()
        );
    }
}

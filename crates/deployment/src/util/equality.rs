//! Pod template equality as the controller needs it: apimachinery's *semantic* equality, with
//! the `pod-template-hash` label ignored.
//!
//! The new ReplicaSet of a Deployment is found by comparing templates, not hashes, because the
//! hash of one template changes whenever the API types gain fields. "Semantic" means what
//! `apiequality.Semantic.DeepEqual` means:
//!
//! * an empty list or map equals a missing one (k8s-openapi keeps `Some(vec![])` apart from
//!   `None`; Go's JSON round trip does not);
//! * quantities compare by value (`1Gi` = `1073741824`, `500m` = `0.5`);
//! * a struct Go embeds by value (`metadata`, `spec`, `resources`) equals its empty form.
//!
//! How: identical typed values short-cut; otherwise both sides go to JSON and are normalized —
//! empty arrays dropped, empty objects dropped where Go has a map or a value struct (the keys of
//! [`EMPTY_EQUALS_MISSING`]), quantity fields ([`QUANTITY_MAPS`], [`QUANTITY_SCALARS`]) rewritten
//! to a canonical exact value — and compared. Pointer structs (`securityContext: {}` vs none)
//! stay different, as in Go.
//!
//! Upstream: `EqualIgnoreHash` of deployment_util.go.

use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::{Map, Value};

use super::constants::DEFAULT_DEPLOYMENT_UNIQUE_LABEL_KEY;

/// JSON keys under which an empty object equals a missing one: the string and quantity maps of a
/// pod template, and the structs Go embeds by value.
pub const EMPTY_EQUALS_MISSING: &[&str] = &[
    "labels",
    "annotations",
    "matchLabels",
    "nodeSelector",
    "overhead",
    "limits",
    "requests",
    "volumeAttributes",
    "options",
    "userAnnotations",
    "metadata",
    "spec",
    "resources",
];

/// JSON keys whose value is a map of resource name → quantity.
pub const QUANTITY_MAPS: &[&str] = &["limits", "requests", "overhead"];

/// JSON keys whose value is a single quantity.
pub const QUANTITY_SCALARS: &[&str] = &["sizeLimit", "divisor"];

/// `EqualIgnoreHash`: whether two pod templates are semantically equal once the
/// `pod-template-hash` label is removed from both. Neither argument is modified.
///
/// Called for every ReplicaSet of a Deployment on each sync, so the usual answers are found
/// without copying: templates equal field by field (labels compared without the hash) are
/// equal; templates whose containers differ in number, name or image are not (no
/// normalization can make those equal). Only what is left takes the JSON path.
pub fn equal_ignore_hash(t1: &PodTemplateSpec, t2: &PodTemplateSpec) -> bool {
    if equal_ignoring_hash_label(t1, t2) {
        return true;
    }
    if containers_differ(t1, t2) {
        return false;
    }
    let mut a = t1.clone();
    let mut b = t2.clone();
    for t in [&mut a, &mut b] {
        if let Some(labels) = t.metadata.as_mut().and_then(|m| m.labels.as_mut()) {
            labels.remove(DEFAULT_DEPLOYMENT_UNIQUE_LABEL_KEY);
        }
    }
    semantic_equal(&a, &b)
}

/// Exact equality of two templates, the hash label aside.
fn equal_ignoring_hash_label(a: &PodTemplateSpec, b: &PodTemplateSpec) -> bool {
    if a.spec != b.spec {
        return false;
    }
    let empty = ObjectMeta::default();
    let (ma, mb) = (
        a.metadata.as_ref().unwrap_or(&empty),
        b.metadata.as_ref().unwrap_or(&empty),
    );
    // Every field but labels; the destructuring fails to compile if ObjectMeta gains one.
    let ObjectMeta {
        annotations,
        creation_timestamp,
        deletion_grace_period_seconds,
        deletion_timestamp,
        finalizers,
        generate_name,
        generation,
        labels: _,
        managed_fields,
        name,
        namespace,
        owner_references,
        resource_version,
        self_link,
        uid,
    } = ma;
    *annotations == mb.annotations
        && *creation_timestamp == mb.creation_timestamp
        && *deletion_grace_period_seconds == mb.deletion_grace_period_seconds
        && *deletion_timestamp == mb.deletion_timestamp
        && *finalizers == mb.finalizers
        && *generate_name == mb.generate_name
        && *generation == mb.generation
        && *managed_fields == mb.managed_fields
        && *name == mb.name
        && *namespace == mb.namespace
        && *owner_references == mb.owner_references
        && *resource_version == mb.resource_version
        && *self_link == mb.self_link
        && *uid == mb.uid
        && labels_without_hash(ma).eq(labels_without_hash(mb))
}

/// A template's labels but the hash label, in key order.
fn labels_without_hash(m: &ObjectMeta) -> impl Iterator<Item = (&String, &String)> {
    m.labels
        .iter()
        .flatten()
        .filter(|(k, _)| k.as_str() != DEFAULT_DEPLOYMENT_UNIQUE_LABEL_KEY)
}

/// Whether both templates have a spec whose containers differ in number, or in the name or
/// image of a container at the same position. Normalization keeps the order and number of
/// list items and never rewrites names or images, so such templates are never semantically
/// equal.
fn containers_differ(a: &PodTemplateSpec, b: &PodTemplateSpec) -> bool {
    let (Some(sa), Some(sb)) = (&a.spec, &b.spec) else {
        return false;
    };
    sa.containers.len() != sb.containers.len()
        || sa
            .containers
            .iter()
            .zip(&sb.containers)
            .any(|(ca, cb)| ca.name != cb.name || ca.image != cb.image)
}

/// apimachinery's semantic equality for pod templates (see the module documentation).
pub fn semantic_equal(a: &PodTemplateSpec, b: &PodTemplateSpec) -> bool {
    if a == b {
        return true;
    }
    match (serde_json::to_value(a), serde_json::to_value(b)) {
        (Ok(a), Ok(b)) => normalize(a) == normalize(b),
        _ => false,
    }
}

/// The normalized form of a JSON value (see the module documentation).
fn normalize(v: Value) -> Value {
    match v {
        // Arrays keep their order: container order is meaningful, as in Go.
        Value::Array(items) => Value::Array(items.into_iter().map(normalize).collect()),
        Value::Object(map) => Value::Object(normalize_object(map)),
        other => other,
    }
}

fn normalize_object(map: Map<String, Value>) -> Map<String, Value> {
    let mut out = Map::new();
    for (key, value) in map {
        let value = match value {
            Value::Object(m) if QUANTITY_MAPS.contains(&key.as_str()) => Value::Object(
                m.into_iter()
                    .map(|(k, q)| (k, canonical_quantity_value(q)))
                    .collect(),
            ),
            q if QUANTITY_SCALARS.contains(&key.as_str()) => canonical_quantity_value(q),
            other => normalize(other),
        };
        let empty = match &value {
            Value::Null => true,
            Value::Array(a) => a.is_empty(),
            Value::Object(o) => o.is_empty() && EMPTY_EQUALS_MISSING.contains(&key.as_str()),
            _ => false,
        };
        if !empty {
            out.insert(key, value);
        }
    }
    out
}

fn canonical_quantity_value(v: Value) -> Value {
    match &v {
        Value::String(s) => match canonical_quantity(s) {
            Some(c) => Value::String(c),
            None => v,
        },
        _ => v,
    }
}

/// A quantity's exact value as `"<sign><digits>e<exp>"` with no trailing zeros in the digits, or
/// `None` if it does not parse (or does not fit in 128 bits), in which case it compares as text.
fn canonical_quantity(s: &str) -> Option<String> {
    let (negative, rest) = match s.as_bytes().first()? {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    let number_len = rest
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(rest.len());
    let (number, suffix) = rest.split_at(number_len);
    let (int_part, frac_part) = number.split_once('.').unwrap_or((number, ""));
    if int_part.is_empty() && frac_part.is_empty() || frac_part.contains('.') {
        return None;
    }
    let (exp10, exp2) = suffix_exponents(suffix)?;
    let mut digits: u128 = 0;
    for c in int_part.bytes().chain(frac_part.bytes()) {
        digits = digits.checked_mul(10)?.checked_add(u128::from(c - b'0'))?;
    }
    let mut exp = exp10.checked_sub(i32::try_from(frac_part.len()).ok()?)?;
    digits = digits.checked_mul(1_u128.checked_shl(exp2)?)?;
    if digits == 0 {
        return Some("0".to_owned());
    }
    while digits.is_multiple_of(10) {
        digits /= 10;
        exp += 1;
    }
    Some(format!("{}{digits}e{exp}", if negative { "-" } else { "" }))
}

/// Decimal and binary exponents of a quantity suffix (`Ki` → 2¹⁰, `k` → 10³, `e3` → 10³).
fn suffix_exponents(suffix: &str) -> Option<(i32, u32)> {
    Some(match suffix {
        "" => (0, 0),
        "n" => (-9, 0),
        "u" => (-6, 0),
        "m" => (-3, 0),
        "k" => (3, 0),
        "M" => (6, 0),
        "G" => (9, 0),
        "T" => (12, 0),
        "P" => (15, 0),
        "E" => (18, 0),
        "Ki" => (0, 10),
        "Mi" => (0, 20),
        "Gi" => (0, 30),
        "Ti" => (0, 40),
        "Pi" => (0, 50),
        "Ei" => (0, 60),
        _ => {
            let exp = suffix
                .strip_prefix('e')
                .or_else(|| suffix.strip_prefix('E'))?;
            (exp.parse().ok()?, 0)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::util::testing::{generate_pod_template_spec, map};
    use std::collections::BTreeMap;

    const H: &str = DEFAULT_DEPLOYMENT_UNIQUE_LABEL_KEY;

    #[test]
    fn equal_ignore_hash_table() {
        let t = generate_pod_template_spec;
        let none = BTreeMap::new;
        let cases = [
            (
                "Same spec, same labels",
                t(
                    "foo",
                    "foo-node",
                    none(),
                    map(&[(H, "value-1"), ("something", "else")]),
                ),
                t(
                    "foo",
                    "foo-node",
                    none(),
                    map(&[(H, "value-1"), ("something", "else")]),
                ),
                true,
            ),
            (
                "Same spec, only pod-template-hash label value is different",
                t(
                    "foo",
                    "foo-node",
                    none(),
                    map(&[(H, "value-1"), ("something", "else")]),
                ),
                t(
                    "foo",
                    "foo-node",
                    none(),
                    map(&[(H, "value-2"), ("something", "else")]),
                ),
                true,
            ),
            (
                "Same spec, the former doesn't have pod-template-hash label",
                t("foo", "foo-node", none(), map(&[("something", "else")])),
                t(
                    "foo",
                    "foo-node",
                    none(),
                    map(&[(H, "value-2"), ("something", "else")]),
                ),
                true,
            ),
            (
                "Same spec, the label is different, the former doesn't have pod-template-hash label, same number of labels",
                t("foo", "foo-node", none(), map(&[("something", "else")])),
                t("foo", "foo-node", none(), map(&[(H, "value-2")])),
                false,
            ),
            (
                "Same spec, the label is different, the latter doesn't have pod-template-hash label, same number of labels",
                t("foo", "foo-node", none(), map(&[(H, "value-1")])),
                t("foo", "foo-node", none(), map(&[("something", "else")])),
                false,
            ),
            (
                "Same spec, the label is different, and the pod-template-hash label value is the same",
                t("foo", "foo-node", none(), map(&[(H, "value-1")])),
                t(
                    "foo",
                    "foo-node",
                    none(),
                    map(&[(H, "value-1"), ("something", "else")]),
                ),
                false,
            ),
            (
                "Different spec, same labels",
                t(
                    "foo",
                    "foo-node",
                    map(&[("former", "value")]),
                    map(&[(H, "value-1"), ("something", "else")]),
                ),
                t(
                    "foo",
                    "foo-node",
                    map(&[("latter", "value")]),
                    map(&[(H, "value-1"), ("something", "else")]),
                ),
                false,
            ),
            (
                "Different spec, different pod-template-hash label value",
                t(
                    "foo-1",
                    "foo-node",
                    none(),
                    map(&[(H, "value-1"), ("something", "else")]),
                ),
                t(
                    "foo-2",
                    "foo-node",
                    none(),
                    map(&[(H, "value-2"), ("something", "else")]),
                ),
                false,
            ),
            (
                "Different spec, the former doesn't have pod-template-hash label",
                t("foo-1", "foo-node-1", none(), map(&[("something", "else")])),
                t(
                    "foo-2",
                    "foo-node-2",
                    none(),
                    map(&[(H, "value-2"), ("something", "else")]),
                ),
                false,
            ),
            (
                "Different spec, different labels",
                t("foo", "foo-node-1", none(), map(&[("something", "else")])),
                t("foo", "foo-node-2", none(), map(&[("nothing", "else")])),
                false,
            ),
        ];
        for (name, former, latter, want) in cases {
            let (f0, l0) = (former.clone(), latter.clone());
            assert_eq!(equal_ignore_hash(&former, &latter), want, "{name}");
            assert_eq!(
                equal_ignore_hash(&latter, &former),
                want,
                "{name} (reverse order)"
            );
            // Upstream checks the labels are not nil-ed; here: the inputs are untouched.
            assert_eq!((former, latter), (f0, l0), "{name}: inputs modified");
        }
    }

    fn template(json: serde_json::Value) -> PodTemplateSpec {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn empty_and_missing_maps_and_lists_are_equal() {
        let a = template(serde_json::json!({
            "metadata": {"labels": {}},
            "spec": {"containers": [{"name": "c", "env": [], "resources": {}}], "nodeSelector": {}}
        }));
        let b = template(serde_json::json!({"spec": {"containers": [{"name": "c"}]}}));
        assert!(semantic_equal(&a, &b));
        assert!(equal_ignore_hash(
            &PodTemplateSpec::default(),
            &template(serde_json::json!({"metadata": {}}))
        ));
    }

    /// The short cuts of `equal_ignore_hash` agree with the plain JSON comparison on every
    /// pair drawn from templates that differ in the ways the short cuts look at (labels and
    /// the hash, container names, images and count, empty vs missing, quantity forms).
    #[test]
    fn short_cuts_agree_with_the_json_comparison() {
        let reference = |a: &PodTemplateSpec, b: &PodTemplateSpec| {
            let (mut a, mut b) = (a.clone(), b.clone());
            for t in [&mut a, &mut b] {
                if let Some(l) = t.metadata.as_mut().and_then(|m| m.labels.as_mut()) {
                    l.remove(H);
                }
            }
            semantic_equal(&a, &b)
        };
        use serde_json::json;
        let templates: Vec<PodTemplateSpec> = [
            json!({}),
            json!({"metadata": {}}),
            json!({"metadata": {"labels": {}}, "spec": {"containers": []}}),
            json!({"spec": {"containers": []}}),
            json!({"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "nginx:1"}]}}),
            json!({"metadata": {"labels": {"app": "web", H: "h1"}}, "spec": {"containers": [{"name": "c", "image": "nginx:1"}]}}),
            json!({"metadata": {"labels": {"app": "web", H: "h2"}}, "spec": {"containers": [{"name": "c", "image": "nginx:1", "env": []}]}}),
            json!({"metadata": {"labels": {"app": "web", H: "h2"}, "annotations": {}}, "spec": {"containers": [{"name": "c", "image": "nginx:1"}]}}),
            json!({"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "nginx:2"}]}}),
            json!({"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "d", "image": "nginx:1"}]}}),
            json!({"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c"}]}}),
            json!({"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "nginx:1"}, {"name": "s", "image": "side:1"}]}}),
            json!({"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "nginx:1", "resources": {"limits": {"memory": "1Gi"}}}]}}),
            json!({"metadata": {"labels": {"app": "web", H: "h3"}}, "spec": {"containers": [{"name": "c", "image": "nginx:1", "resources": {"limits": {"memory": "1073741824"}}}]}}),
            json!({"metadata": {"labels": {"app": "db"}}, "spec": {"containers": [{"name": "c", "image": "nginx:1"}]}}),
        ]
        .into_iter()
        .map(template)
        .collect();
        let mut equal_pairs = 0;
        for a in &templates {
            for b in &templates {
                let want = reference(a, b);
                assert_eq!(equal_ignore_hash(a, b), want, "{a:?} vs {b:?}");
                equal_pairs += usize::from(want);
            }
        }
        // Both answers occur beyond the diagonal, through each path.
        assert!(equal_pairs > templates.len() + 8, "{equal_pairs}");
    }

    #[test]
    fn pointer_structs_keep_empty_apart_from_missing() {
        let a = template(serde_json::json!({"spec": {"containers": [], "securityContext": {}}}));
        let b = template(serde_json::json!({"spec": {"containers": []}}));
        assert!(!semantic_equal(&a, &b));
    }

    #[test]
    fn quantities_compare_by_value() {
        let with = |mem: &str, cpu: &str| {
            template(serde_json::json!({"spec": {"containers": [{
                "name": "c",
                "resources": {"limits": {"memory": mem, "cpu": cpu}}
            }]}}))
        };
        assert!(semantic_equal(
            &with("1Gi", "500m"),
            &with("1073741824", "0.5")
        ));
        assert!(semantic_equal(&with("1k", "1"), &with("1000", "1000m")));
        assert!(semantic_equal(&with("1e3", "2"), &with("1k", "2.0")));
        assert!(!semantic_equal(&with("1Gi", "500m"), &with("1G", "500m")));
        // Quantity rules apply to quantity fields only: env values stay text.
        let env = |v: &str| {
            template(serde_json::json!({"spec": {"containers": [{
                "name": "c", "env": [{"name": "X", "value": v}]
            }]}}))
        };
        assert!(!semantic_equal(&env("1k"), &env("1000")));
    }

    #[test]
    fn canonical_quantities() {
        assert_eq!(canonical_quantity("0").as_deref(), Some("0"));
        assert_eq!(canonical_quantity("0m").as_deref(), Some("0"));
        assert_eq!(canonical_quantity("100m").as_deref(), Some("1e-1"));
        assert_eq!(canonical_quantity("1Ki").as_deref(), Some("1024e0"));
        assert_eq!(canonical_quantity("-1.50").as_deref(), Some("-15e-1"));
        assert_eq!(canonical_quantity("abc"), None);
        assert_eq!(canonical_quantity("1.2.3"), None);
        assert_eq!(canonical_quantity(""), None);
    }
}

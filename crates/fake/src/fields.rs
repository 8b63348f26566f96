//! Field paths and field sets in the API server's server-side-apply notation.
//!
//! A field set is what one entry of `metadata.managedFields` records: the fields a manager
//! owns. On the wire (`fieldsType: FieldsV1`) it is a tree of JSON objects whose keys name
//! one step each — `f:<field>` for a field of an object, `k:{"name":"web"}` for the item of
//! an associative list with those key fields, `v:"x"` for an element of a set-like list,
//! `i:3` for a list item by position — with `{}` for a member that has nothing below it and
//! `".": {}` marking a node that is itself a member and also has children. Conflicts print
//! paths as the apiserver does: `.spec.template.spec.containers[name="web"].image`.
//!
//! Here a set is a sorted set of paths (each member spelled out), which keeps the set
//! algebra of server-side apply (union, difference, "under this prefix") plain.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value};

/// One step of a path.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Element {
    /// A field of an object (a struct field or a map key): `f:<name>`.
    Field(String),
    /// An item of an associative list, by its key fields as canonical JSON (an object whose
    /// keys are sorted): `k:{"name":"web"}`.
    Key(String),
    /// An element of a set-like list, as JSON: `v:"example.com/finalizer"`.
    Value(String),
    /// A list item by position: `i:0`. Read from recorded sets; never produced here.
    Index(usize),
}

impl Element {
    /// The field of an object.
    pub(crate) fn field(name: &str) -> Self {
        Element::Field(name.to_owned())
    }

    /// The item of an associative list identified by `keys` (field name to value).
    pub(crate) fn key(keys: Map<String, Value>) -> Self {
        // serde_json's map is ordered by key, so this text is canonical.
        Element::Key(Value::Object(keys).to_string())
    }

    /// The element of a set-like list.
    pub(crate) fn value(v: &Value) -> Self {
        Element::Value(v.to_string())
    }

    /// The FieldsV1 key of this step.
    fn fields_v1_key(&self) -> String {
        match self {
            Element::Field(name) => format!("f:{name}"),
            Element::Key(keys) => format!("k:{keys}"),
            Element::Value(v) => format!("v:{v}"),
            Element::Index(i) => format!("i:{i}"),
        }
    }

    fn from_fields_v1_key(key: &str) -> Result<Self, String> {
        let bad = || format!("{key:?} is not a FieldsV1 key (f:, k:, v: or i:)");
        let (kind, rest) = key.split_once(':').ok_or_else(bad)?;
        match kind {
            "f" => Ok(Element::Field(rest.to_owned())),
            "k" => match serde_json::from_str::<Value>(rest) {
                Ok(Value::Object(keys)) => Ok(Element::key(keys)),
                _ => Err(format!(
                    "{key:?}: the key of a k: step is not a JSON object"
                )),
            },
            "v" => serde_json::from_str::<Value>(rest)
                .map(|v| Element::value(&v))
                .map_err(|_| format!("{key:?}: the value of a v: step is not JSON")),
            "i" => rest.parse().map(Element::Index).map_err(|_| bad()),
            _ => Err(bad()),
        }
    }

    /// Whether `item` (a list item) is the one this step names.
    pub(crate) fn names_item(&self, position: usize, item: &Value) -> bool {
        match self {
            Element::Field(_) => false,
            Element::Index(i) => *i == position,
            Element::Value(v) => serde_json::from_str::<Value>(v).is_ok_and(|v| v == *item),
            Element::Key(keys) => match serde_json::from_str::<Value>(keys) {
                Ok(Value::Object(keys)) => keys.iter().all(|(k, v)| item.get(k) == Some(v)),
                _ => false,
            },
        }
    }
}

/// A path from the object's root.
pub(crate) type Path = Vec<Element>;

/// A set of paths: the fields a manager owns, or those that changed.
pub(crate) type FieldSet = BTreeSet<Path>;

/// A path from field names, for the fixed paths of the apiserver's rules.
pub(crate) fn path(fields: &[&str]) -> Path {
    fields.iter().map(|f| Element::field(f)).collect()
}

/// The path as the apiserver prints it: `.spec.template.spec.containers[name="web"].image`,
/// `.metadata.finalizers[="x"]`, `.spec.args[0]`.
pub(crate) fn display(path: &[Element]) -> String {
    let mut out = String::new();
    for element in path {
        match element {
            Element::Field(name) => {
                out.push('.');
                out.push_str(name);
            }
            Element::Key(keys) => {
                let parts: Vec<String> = match serde_json::from_str::<Value>(keys) {
                    Ok(Value::Object(keys)) => {
                        keys.iter().map(|(k, v)| format!("{k}={v}")).collect()
                    }
                    _ => vec![keys.clone()],
                };
                out.push('[');
                out.push_str(&parts.join(","));
                out.push(']');
            }
            Element::Value(v) => {
                out.push_str("[=");
                out.push_str(v);
                out.push(']');
            }
            Element::Index(i) => out.push_str(&format!("[{i}]")),
        }
    }
    out
}

/// The order in which the apiserver walks a set (and lists conflicts): at each node, the
/// members that end there first, then the subtrees below, each group by step.
pub(crate) fn walk_order(a: &Path, b: &Path) -> Ordering {
    let common = a.iter().zip(b).take_while(|(x, y)| x == y).count();
    match (a.len() - common, b.len() - common) {
        (0, 0) => Ordering::Equal,
        // A prefix is a member at a node the other path descends from.
        (0, _) => Ordering::Less,
        (_, 0) => Ordering::Greater,
        (rest_a, rest_b) => {
            let (ends_a, ends_b) = (rest_a == 1, rest_b == 1);
            if ends_a != ends_b {
                // The member ending at this node comes before the other's subtree.
                if ends_a {
                    Ordering::Less
                } else {
                    Ordering::Greater
                }
            } else {
                a[common].cmp(&b[common])
            }
        }
    }
}

/// Whether `path` is `prefix` or lies under it.
pub(crate) fn is_under(path: &[Element], prefix: &[Element]) -> bool {
    path.starts_with(prefix)
}

/// `set` without every path equal to or under one of `roots` (the apiserver's recursive
/// difference, used for the fields a strategy resets).
pub(crate) fn without_subtrees(set: &FieldSet, roots: &[Path]) -> FieldSet {
    set.iter()
        .filter(|p| !roots.iter().any(|r| is_under(p, r)))
        .cloned()
        .collect()
}

/// `set` plus every field on the way to a member (`spec` for `.spec.replicas`): when a
/// manager gives up a field of an object, the apiserver treats the field holding it as
/// owned too, so an object nobody owns anything in any more goes as a whole.
pub(crate) fn with_fields_on_the_way(set: &FieldSet) -> FieldSet {
    let mut out = set.clone();
    for p in set {
        for len in 1..p.len() {
            if matches!(p[len - 1], Element::Field(_)) {
                out.insert(p[..len].to_vec());
            }
        }
    }
    out
}

/// The set as a FieldsV1 tree.
pub(crate) fn to_fields_v1(set: &FieldSet) -> Value {
    #[derive(Default)]
    struct Node {
        member: bool,
        children: BTreeMap<String, Node>,
    }
    fn value(node: &Node) -> Value {
        let mut map = Map::new();
        if node.member && !node.children.is_empty() {
            map.insert(".".to_owned(), Value::Object(Map::new()));
        }
        for (key, child) in &node.children {
            map.insert(key.clone(), value(child));
        }
        Value::Object(map)
    }
    let mut root = Node::default();
    for p in set {
        let mut node = &mut root;
        for element in p {
            node = node.children.entry(element.fields_v1_key()).or_default();
        }
        node.member = true;
    }
    value(&root)
}

/// Reads a FieldsV1 tree.
pub(crate) fn from_fields_v1(tree: &Value) -> Result<FieldSet, String> {
    fn walk(tree: &Map<String, Value>, at: &mut Path, out: &mut FieldSet) -> Result<(), String> {
        for (key, child) in tree {
            if key == "." {
                if !at.is_empty() {
                    out.insert(at.clone());
                }
                continue;
            }
            let Value::Object(child) = child else {
                return Err(format!("the value of {key:?} is not an object"));
            };
            at.push(Element::from_fields_v1_key(key)?);
            if child.is_empty() {
                out.insert(at.clone());
            } else {
                walk(child, at, out)?;
            }
            at.pop();
        }
        Ok(())
    }
    let Value::Object(tree) = tree else {
        return Err("fieldsV1 is not an object".to_owned());
    };
    let mut out = FieldSet::new();
    walk(tree, &mut Vec::new(), &mut out)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn k(keys: Value) -> Element {
        match keys {
            Value::Object(m) => Element::key(m),
            _ => unreachable!(),
        }
    }

    #[test]
    fn fields_v1_round_trips_the_apiservers_notation() {
        // As kube-apiserver 1.37 recorded an apply of a Deployment's container.
        let recorded = json!({
            "f:metadata": {"f:labels": {"f:app": {}}},
            "f:spec": {"f:replicas": {}, "f:selector": {}, "f:template": {"f:spec": {"f:containers": {
                "k:{\"name\":\"main\"}": {".": {}, "f:image": {}, "f:name": {},
                    "f:ports": {"k:{\"containerPort\":80,\"protocol\":\"TCP\"}": {
                        ".": {}, "f:containerPort": {}, "f:protocol": {}}}}}}}},
            "f:data": {".": {}, "f:x": {}},
        });
        let set = from_fields_v1(&recorded).unwrap();
        assert!(set.contains(&path(&["spec", "replicas"])));
        assert!(
            set.contains(&path(&["data"])),
            "`.` makes the node a member"
        );
        assert!(!set.contains(&path(&["spec"])));
        let container = vec![
            Element::field("spec"),
            Element::field("template"),
            Element::field("spec"),
            Element::field("containers"),
            k(json!({"name": "main"})),
        ];
        assert!(set.contains(&container));
        assert_eq!(to_fields_v1(&set), recorded);
        assert!(from_fields_v1(&json!({"x:y": {}})).is_err());
        assert!(from_fields_v1(&json!({"f:a": 1})).is_err());
    }

    #[test]
    fn paths_print_like_the_apiservers_conflicts() {
        let mut p = path(&["spec", "template", "spec", "containers"]);
        p.push(k(json!({"name": "main"})));
        p.push(Element::field("env"));
        p.push(k(json!({"name": "E"})));
        p.push(Element::field("value"));
        assert_eq!(
            display(&p),
            r#".spec.template.spec.containers[name="main"].env[name="E"].value"#
        );
        let mut ports = path(&["ports"]);
        ports.push(k(json!({"protocol": "TCP", "containerPort": 80})));
        assert_eq!(
            display(&ports),
            r#".ports[containerPort=80,protocol="TCP"]"#
        );
        let mut finalizer = path(&["metadata", "finalizers"]);
        finalizer.push(Element::value(&json!("a/b")));
        assert_eq!(display(&finalizer), r#".metadata.finalizers[="a/b"]"#);
    }

    #[test]
    fn walk_order_puts_members_before_subtrees() {
        let mut paths = [
            path(&["spec", "a", "x"]),
            path(&["spec", "b"]),
            path(&["metadata", "labels", "app"]),
            path(&["spec", "a"]),
        ];
        paths.sort_by(walk_order);
        let shown: Vec<String> = paths.iter().map(|p| display(p)).collect();
        assert_eq!(
            shown,
            [".metadata.labels.app", ".spec.a", ".spec.b", ".spec.a.x"]
        );
    }

    #[test]
    fn fields_on_the_way_and_subtrees() {
        let set: FieldSet = [path(&["spec", "template", "x"]), path(&["data", "k"])].into();
        let wide = with_fields_on_the_way(&set);
        assert!(wide.contains(&path(&["spec"])) && wide.contains(&path(&["spec", "template"])));
        assert!(wide.contains(&path(&["data"])));
        let cut = without_subtrees(&wide, &[path(&["spec"])]);
        assert_eq!(cut, [path(&["data"]), path(&["data", "k"])].into());
    }
}

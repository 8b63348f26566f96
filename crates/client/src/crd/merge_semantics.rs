//! Upstream's merge semantics for the Kubernetes types a custom resource embeds.
//!
//! Server-side apply merges a list by its `x-kubernetes-list-type` (`atomic`: replaced whole;
//! `set`: merged by value; `map`: merged by the `x-kubernetes-list-map-keys` of its items) and
//! an object by its `x-kubernetes-map-type` (`atomic` or `granular`). The API server's own
//! OpenAPI carries them for its types: a Pod's `containers` is a map keyed by `name`, so two
//! field managers each own their container. k8s-openapi's schemars schemas do not carry them,
//! and a CustomResourceDefinition without them makes every list atomic: an apply that names one
//! container would replace (or conflict over) the whole list.
//!
//! [`table::DEFINITIONS`] holds them, as upstream's OpenAPI v3 documents of the Kubernetes
//! release the local control plane runs (v1.37.2) give them, for every definition that has
//! any: written by `cargo xtask gen-merge-semantics` (xtask/gen-merge-semantics), and checked
//! by `cargo xtask test` to be what the generator writes. Definitions are named as k8s-openapi
//! names its types' schemas (`io.k8s.api.core.v1.PodSpec`), which is how the schema
//! generator finds where an embedded type sits: [`placements`] reads the `$ref`s of a schema
//! generated with definitions, then [`apply`] adds a definition's extensions to the
//! structural node at each such place.
//!
//! What is added, and only where the generated schema allows it (the API server would refuse
//! the CustomResourceDefinition otherwise); nothing already there is replaced:
//!
//! * a property's `x-kubernetes-list-type` (and for `map`, `x-kubernetes-list-map-keys`) on an
//!   array without a list type of its own: `atomic` always; `set` when the items are
//!   non-nullable scalars; `map` when the items are non-nullable objects and every key is a
//!   scalar property of them, required or with a default. A key the item type does not
//!   require gets upstream's default (`ContainerPort.protocol`: `TCP`, which the API server
//!   then fills in, as it does for a Pod) and is no longer nullable; a key without one (none in
//!   the pod template) leaves the list atomic;
//! * a property's `x-kubernetes-map-type`, and the definition's own (`LabelSelector` is
//!   `atomic`), on an object without one.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value, json};

mod table;

/// The merge semantics of one upstream definition.
#[derive(Debug)]
pub(crate) struct Definition {
    /// The definition's name in upstream's OpenAPI, k8s-openapi's schema name.
    pub(crate) name: &'static str,
    /// The definition's own `x-kubernetes-map-type`.
    pub(crate) map_type: Option<&'static str>,
    /// Its properties that have merge semantics, sorted by name.
    pub(crate) properties: &'static [Property],
}

/// The merge semantics of one property of a definition.
#[derive(Debug)]
pub(crate) struct Property {
    /// The property's JSON name.
    pub(crate) name: &'static str,
    /// `x-kubernetes-list-type`: `atomic`, `set` or `map`.
    pub(crate) list_type: Option<&'static str>,
    /// `x-kubernetes-list-map-keys` of a `map` list.
    pub(crate) map_keys: &'static [&'static str],
    /// The defaults (as JSON) of the map keys the item type does not require.
    pub(crate) key_defaults: &'static [(&'static str, &'static str)],
    /// `x-kubernetes-map-type`: `atomic` or `granular`.
    pub(crate) map_type: Option<&'static str>,
}

/// The merge semantics of the definition `name`, if upstream gives it any.
pub(crate) fn lookup(name: &str) -> Option<&'static Definition> {
    table::DEFINITIONS
        .binary_search_by(|d| d.name.cmp(name))
        .ok()
        .map(|i| &table::DEFINITIONS[i])
}

/// Where embedded upstream types sit: structural paths (`spec.template.spec`, as the schema
/// converter writes them) to the definitions found there.
pub(crate) type Placements = BTreeMap<String, BTreeSet<&'static str>>;

/// The places of the definitions with merge semantics in `root`, a schema generated with
/// definitions (`$defs`, not inlined), whose root is the field `name`.
///
/// The paths are those of the inlined schema: a `$ref` is followed in place, except to a
/// definition it is already inside of, which the inlined schema cannot inline either.
pub(crate) fn placements(root: &Value, name: &str) -> Placements {
    let defs = root.get("$defs").and_then(Value::as_object);
    let mut out = Placements::new();
    // The root's own type, named in its title.
    if let Some(def) = root.get("title").and_then(Value::as_str).and_then(lookup) {
        out.entry(name.to_owned()).or_default().insert(def.name);
    }
    walk(root, name, defs, &mut Vec::new(), &mut out);
    out
}

/// A `$ref` name with its JSON-pointer and percent escapes undone.
fn ref_name(encoded: &str) -> String {
    let bytes = encoded.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match (bytes[i], bytes.get(i + 1)) {
            (b'~', Some(b'0')) => {
                out.push(b'~');
                i += 2;
            }
            (b'~', Some(b'1')) => {
                out.push(b'/');
                i += 2;
            }
            (b'%', _) => match encoded
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
            {
                Some(b) => {
                    out.push(b);
                    i += 3;
                }
                None => {
                    out.push(b'%');
                    i += 1;
                }
            },
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn walk(
    v: &Value,
    path: &str,
    defs: Option<&Map<String, Value>>,
    stack: &mut Vec<String>,
    out: &mut Placements,
) {
    let Value::Object(o) = v else { return };
    if let Some(name) = o
        .get("$ref")
        .and_then(Value::as_str)
        .and_then(|t| t.strip_prefix("#/$defs/"))
        .map(ref_name)
        && !stack.contains(&name)
    {
        if let Some(def) = lookup(&name) {
            out.entry(path.to_owned()).or_default().insert(def.name);
        }
        if let Some(target) = defs.and_then(|d| d.get(&name)) {
            stack.push(name);
            walk(target, path, defs, stack, out);
            stack.pop();
        }
    }
    for (key, child) in o {
        match (key.as_str(), child) {
            ("properties", Value::Object(props)) => {
                for (name, schema) in props {
                    walk(schema, &format!("{path}.{name}"), defs, stack, out);
                }
            }
            ("items", Value::Array(tuple)) => {
                for schema in tuple {
                    walk(schema, &format!("{path}[*]"), defs, stack, out);
                }
            }
            ("items", schema) => walk(schema, &format!("{path}[*]"), defs, stack, out),
            ("additionalProperties", schema) => {
                walk(schema, &format!("{path}.*"), defs, stack, out);
            }
            ("allOf" | "anyOf" | "oneOf", Value::Array(alts)) => {
                for alt in alts {
                    walk(alt, path, defs, stack, out);
                }
            }
            _ => {}
        }
    }
}

const LIST_TYPE: &str = "x-kubernetes-list-type";
const MAP_KEYS: &str = "x-kubernetes-list-map-keys";
const MAP_TYPE: &str = "x-kubernetes-map-type";

fn type_of(node: &Map<String, Value>) -> Option<&str> {
    node.get("type").and_then(Value::as_str)
}

fn is_nullable(node: &Map<String, Value>) -> bool {
    super::schema::flag(node, "nullable")
}

/// Adds the merge semantics of `def` to `node`, the structural schema of that definition
/// (see the module docs for what is added where).
pub(crate) fn apply(node: &mut Map<String, Value>, def: &Definition) {
    let is_object = type_of(node) == Some("object");
    if let Some(map_type) = def.map_type
        && is_object
        && !node.contains_key(MAP_TYPE)
    {
        node.insert(MAP_TYPE.to_owned(), json!(map_type));
    }
    let Some(Value::Object(props)) = node.get_mut("properties") else {
        return;
    };
    for p in def.properties {
        let Some(Value::Object(child)) = props.get_mut(p.name) else {
            continue;
        };
        if let Some(map_type) = p.map_type
            && type_of(child) == Some("object")
            && !child.contains_key(MAP_TYPE)
        {
            child.insert(MAP_TYPE.to_owned(), json!(map_type));
        }
        let Some(list_type) = p.list_type else {
            continue;
        };
        if type_of(child) != Some("array")
            || child.contains_key(LIST_TYPE)
            || child.contains_key(MAP_KEYS)
        {
            continue;
        }
        let applied = match list_type {
            "map" => map_list(child, p),
            "set" => child
                .get("items")
                .and_then(Value::as_object)
                .is_some_and(|i| {
                    matches!(
                        type_of(i),
                        Some("string" | "integer" | "number" | "boolean")
                    ) && !is_nullable(i)
                }),
            _ => true,
        };
        if applied {
            child.insert(LIST_TYPE.to_owned(), json!(list_type));
        }
    }
}

/// Makes `list` a map list with `p`'s keys if its items allow it: non-nullable objects whose
/// keys are scalar properties, each required or defaulted (with upstream's default where the
/// item type does not require it). Whether it did.
fn map_list(list: &mut Map<String, Value>, p: &Property) -> bool {
    let Some(Value::Object(items)) = list.get_mut("items") else {
        return false;
    };
    if type_of(items) != Some("object") || is_nullable(items) {
        return false;
    }
    let required: BTreeSet<String> = items
        .get("required")
        .and_then(Value::as_array)
        .map(|r| {
            r.iter()
                .filter_map(|s| s.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    let Some(Value::Object(item_props)) = items.get_mut("properties") else {
        return false;
    };
    // Checked for every key before any is changed.
    let mut defaults = Vec::new();
    for key in p.map_keys {
        let Some(Value::Object(k)) = item_props.get(*key) else {
            return false;
        };
        let scalar = matches!(
            type_of(k),
            Some("string" | "integer" | "number" | "boolean")
        ) || super::schema::flag(k, super::schema::INT_OR_STRING);
        if !scalar {
            return false;
        }
        if required.contains(*key) || k.contains_key("default") {
            continue;
        }
        let Some(default) = p
            .key_defaults
            .iter()
            .find(|(name, _)| name == key)
            .and_then(|(_, d)| serde_json::from_str::<Value>(d).ok())
        else {
            return false;
        };
        defaults.push((*key, default));
    }
    for (key, default) in defaults {
        if let Some(Value::Object(k)) = item_props.get_mut(key) {
            k.insert("default".to_owned(), default);
        }
    }
    // A map key cannot be nullable; a required one is not an `Option`, a defaulted one takes
    // its default for a null.
    for key in p.map_keys {
        if let Some(Value::Object(k)) = item_props.get_mut(*key) {
            k.remove("nullable");
        }
    }
    list.insert(MAP_KEYS.to_owned(), json!(p.map_keys));
    true
}

#[cfg(test)]
mod tests;

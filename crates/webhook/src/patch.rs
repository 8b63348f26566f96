//! The JSON patch (RFC 6902) of a defaulting webhook: what its handler changed, as operations
//! that apply to the object exactly as the API server sent it.
//!
//! The handler works on a Rust type, which may not know every field of the object it came
//! from (a newer API version's fields, fields of another controller's). Serializing that type
//! again and sending the whole object back would drop them, a known pitfall of
//! controller-runtime's defaulter. Instead the patch is the difference between the type
//! serialized *before* the handler and *after* it, so only the fields the handler changed are
//! touched; paths are checked against the request's raw object, so an operation never names a
//! field the raw object lacks (`add` instead of `replace`, no `remove` of what is not there).
//! A field the handler set to `None`, serialized as `null`, is removed.
//!
//! Arrays are matched element by element where the handler changed elements in place, inserted
//! or removed a run of them; otherwise (see `walk_array`) the whole array is replaced, and the
//! unknown fields of its elements are lost.

use serde::Serialize;
use serde_json::Value;

/// One JSON patch operation.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "op", rename_all = "lowercase")]
pub enum PatchOperation {
    /// Adds `value` at `path` (a member, or an array element before the index).
    Add {
        /// A JSON pointer (RFC 6901).
        path: String,
        /// The new value.
        value: Value,
    },
    /// Removes the value at `path`.
    Remove {
        /// A JSON pointer (RFC 6901).
        path: String,
    },
    /// Replaces the value at `path`, which must exist.
    Replace {
        /// A JSON pointer (RFC 6901).
        path: String,
        /// The new value.
        value: Value,
    },
}

/// One reference token of a JSON pointer: `~` becomes `~0` and `/` becomes `~1` (RFC 6901).
pub fn escape_token(token: &str) -> String {
    token.replace('~', "~0").replace('/', "~1")
}

/// The operations that turn `raw` into `raw` with the changes from `before` to `after`: each
/// path where `before` and `after` differ gets `after`'s value, every other part of `raw`
/// (fields `before` does not have included) is left as it is.
///
/// `before` is the handler's type serialized before the handler ran, `after` the same after it;
/// `raw` the object as received.
pub fn diff(raw: &Value, before: &Value, after: &Value) -> Vec<PatchOperation> {
    let mut ops = Vec::new();
    walk(Some(raw), before, after, &mut String::new(), &mut ops);
    ops
}

/// Appends to `ops` what turns `raw` (the value at `path`, if any) into it with the changes
/// from `before` to `after`.
fn walk(
    raw: Option<&Value>,
    before: &Value,
    after: &Value,
    path: &mut String,
    ops: &mut Vec<PatchOperation>,
) {
    if before == after {
        return;
    }
    match (raw, before, after) {
        (Some(Value::Object(raw)), Value::Object(b), Value::Object(a)) => {
            for (key, old) in b {
                let len = path.len();
                path.push('/');
                path.push_str(&escape_token(key));
                match a.get(key) {
                    Some(new) => walk(raw.get(key), old, new, path, ops),
                    // Gone after the handler: removed where the raw object has it.
                    None if raw.contains_key(key) => {
                        ops.push(PatchOperation::Remove { path: path.clone() })
                    }
                    None => {}
                }
                path.truncate(len);
            }
            for (key, new) in a {
                if b.contains_key(key) {
                    continue;
                }
                let len = path.len();
                path.push('/');
                path.push_str(&escape_token(key));
                set(raw.get(key), new, path, ops);
                path.truncate(len);
            }
        }
        (Some(Value::Array(raw)), Value::Array(b), Value::Array(a)) if raw.len() == b.len() => {
            walk_array(raw, b, a, path, ops)
        }
        // Any other change (a scalar, a type change, a subtree the raw object lacks or
        // holds differently): `after`'s value as a whole.
        _ => set(raw, after, path, ops),
    }
}

/// Appends to `ops` what turns the array `raw` (as long as `before`) into it with the changes
/// from `before` to `after`.
///
/// Array elements have no identity but their position, so which element of `after` is which
/// element of `before` is inferred from the elements the handler left unchanged (compared as
/// the type serializes them): the longest run equal at the start and at the end. What lies
/// between is
///
/// * nothing in `after`: elements removed there (a `remove` each), or nothing in `before`:
///   elements inserted there (an `add` each); every other element keeps its raw value, the
///   fields the type does not know included;
/// * as many elements on both sides, none of which moved (no element of one side equals an
///   element of the other at another position) and none renamed (objects at one index with
///   different `name` members, the key of most Kubernetes lists: containers, volumes, env):
///   elements changed in place, each diffed with the raw element at its index;
/// * anything else (elements inserted *and* removed, reordered, or changed and moved): the
///   array is replaced by `after`'s whole, and the fields the type does not know of all its
///   elements are lost, since which raw element an element of `after` came from cannot be
///   told.
fn walk_array(
    raw: &[Value],
    before: &[Value],
    after: &[Value],
    path: &mut String,
    ops: &mut Vec<PatchOperation>,
) {
    let shortest = before.len().min(after.len());
    let prefix = before.iter().zip(after).take_while(|(b, a)| b == a).count();
    let suffix = before[prefix..]
        .iter()
        .rev()
        .zip(after[prefix..].iter().rev())
        .take(shortest - prefix)
        .take_while(|(b, a)| b == a)
        .count();
    let old = &before[prefix..before.len() - suffix];
    let new = &after[prefix..after.len() - suffix];
    if new.is_empty() {
        // Removed from the last backwards, so each index is still valid when applied.
        for i in (prefix..prefix + old.len()).rev() {
            ops.push(PatchOperation::Remove {
                path: format!("{path}/{i}"),
            });
        }
    } else if old.is_empty() {
        for (i, value) in new.iter().enumerate() {
            ops.push(PatchOperation::Add {
                path: format!("{path}/{}", prefix + i),
                value: without_nulls(value),
            });
        }
    } else if old.len() == new.len() && !moved(old, new) && !renamed(old, new) {
        for (i, (b, a)) in old.iter().zip(new).enumerate() {
            let len = path.len();
            path.push('/');
            path.push_str(&(prefix + i).to_string());
            walk(raw.get(prefix + i), b, a, path, ops);
            path.truncate(len);
        }
    } else {
        let whole = Value::Array(raw.to_vec());
        set(Some(&whole), &Value::Array(after.to_vec()), path, ops);
    }
}

/// Whether an element of `new` equals an element of `old` at another index: the handler moved
/// elements rather than changing them in place.
fn moved(old: &[Value], new: &[Value]) -> bool {
    new.iter()
        .enumerate()
        .any(|(i, n)| old.iter().enumerate().any(|(j, o)| i != j && o == n))
}

/// Whether objects at one index of `old` and `new` have different `name` members: one element
/// replaced by another rather than changed.
fn renamed(old: &[Value], new: &[Value]) -> bool {
    old.iter()
        .zip(new)
        .any(|(o, n)| match (o.get("name"), n.get("name")) {
            (Some(o), Some(n)) => o != n,
            _ => false,
        })
}

/// The operation that puts `value` at `path`, given what the raw object has there.
fn set(raw: Option<&Value>, value: &Value, path: &str, ops: &mut Vec<PatchOperation>) {
    match (raw, value) {
        // `None` serialized as null: the field goes.
        (Some(_), Value::Null) => ops.push(PatchOperation::Remove {
            path: path.to_owned(),
        }),
        (None, Value::Null) => {}
        (Some(old), new) => {
            let new = without_nulls(new);
            if *old != new {
                ops.push(PatchOperation::Replace {
                    path: path.to_owned(),
                    value: new,
                });
            }
        }
        (None, new) => ops.push(PatchOperation::Add {
            path: path.to_owned(),
            value: without_nulls(new),
        }),
    }
}

/// `value` without the object members that are `null` (serialized `None`s), at any depth: an
/// added subtree holds only what is set.
fn without_nulls(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), without_nulls(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(without_nulls).collect()),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests;

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
//! Arrays are matched element by element (by `name` where every element has a unique one,
//! by index otherwise), so edits, inserts, removals and renames keep the unknown fields of the
//! elements that stay; only a reorder (see `walk_array`) replaces the whole array, and then
//! the unknown fields of its elements are lost.

use std::collections::hash_map::DefaultHasher;
use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};

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
/// element of `before` is inferred. First the longest runs the handler left unchanged
/// (compared as the type serializes them) at the start and at the end are set aside. What lies
/// between is
///
/// * nothing in `after`: elements removed there (a `remove` each), or nothing in `before`:
///   elements inserted there (an `add` each);
/// * objects that all have a string `name` (the key of most Kubernetes lists: containers,
///   volumes, env), unique on each side: elements are matched by name. If the matched ones
///   kept their order and every one kept its index (as many elements on both sides), the
///   elements are changed in place, each diffed with the raw element at its index, so a
///   renamed element keeps its raw fields; otherwise the vanished ones are removed, the new
///   ones added at their indexes, and the matched ones diffed with their raw elements;
/// * anything else: elements changed in place at the indexes both sides have, then the ones
///   past the shorter side's end removed or added.
///
/// Every element diffed keeps the fields the type does not know. Only a reorder (matched names
/// in another order, or without names an element equal to one of the other side at another
/// index) replaces the whole array, and then those fields of all its elements are lost, since
/// which raw element an element of `after` came from cannot be told. The work is linear in the
/// number of elements (plus hashing each once).
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
    } else if let (Some(old_names), Some(new_names)) = (names(old), names(new)) {
        let old_names: HashMap<&str, usize> = old_names
            .into_iter()
            .enumerate()
            .map(|(j, name)| (name, j))
            .collect();
        // For each element of `new`, the index in `old` of the element of the same name.
        let matches: Vec<Option<usize>> = new_names
            .iter()
            .map(|name| old_names.get(name).copied())
            .collect();
        let mut last = None;
        let in_order = matches.iter().flatten().all(|&j| {
            let ok = last.is_none_or(|l| j > l);
            last = Some(j);
            ok
        });
        if !in_order {
            return replace_whole(raw, after, path, ops);
        }
        let in_place = old.len() == new.len()
            && matches
                .iter()
                .enumerate()
                .all(|(i, j)| j.is_none_or(|j| j == i));
        if in_place {
            diff_in_place(raw, old, new, prefix, path, ops);
            return;
        }
        let kept: HashSet<usize> = matches.iter().flatten().copied().collect();
        // Removed from the last backwards, then added in ascending order: the matched elements
        // keep their relative order, so after the adds up to an index everything before it
        // is in its final place.
        for j in (0..old.len()).rev().filter(|j| !kept.contains(j)) {
            ops.push(PatchOperation::Remove {
                path: format!("{path}/{}", prefix + j),
            });
        }
        for (i, value) in new.iter().enumerate() {
            if matches[i].is_none() {
                ops.push(PatchOperation::Add {
                    path: format!("{path}/{}", prefix + i),
                    value: without_nulls(value),
                });
            }
        }
        // The matched ones, at their final indexes, each with the raw element it came from.
        for (i, j) in matches.iter().enumerate() {
            if let Some(j) = *j {
                let len = path.len();
                path.push('/');
                path.push_str(&(prefix + i).to_string());
                walk(raw.get(prefix + j), &old[j], &new[i], path, ops);
                path.truncate(len);
            }
        }
    } else if moved(old, new) {
        replace_whole(raw, after, path, ops);
    } else {
        let common = old.len().min(new.len());
        diff_in_place(raw, &old[..common], &new[..common], prefix, path, ops);
        for j in (common..old.len()).rev() {
            ops.push(PatchOperation::Remove {
                path: format!("{path}/{}", prefix + j),
            });
        }
        for (i, value) in new.iter().enumerate().skip(common) {
            ops.push(PatchOperation::Add {
                path: format!("{path}/{}", prefix + i),
                value: without_nulls(value),
            });
        }
    }
}

/// Appends to `ops` the changes from `old` to `new` (as long) element by element, each diffed
/// with the raw element at its index (`offset` plus its index in `old`).
fn diff_in_place(
    raw: &[Value],
    old: &[Value],
    new: &[Value],
    offset: usize,
    path: &mut String,
    ops: &mut Vec<PatchOperation>,
) {
    for (i, (b, a)) in old.iter().zip(new).enumerate() {
        let len = path.len();
        path.push('/');
        path.push_str(&(offset + i).to_string());
        walk(raw.get(offset + i), b, a, path, ops);
        path.truncate(len);
    }
}

/// Replaces the array `raw` at `path` by `after` as a whole.
fn replace_whole(raw: &[Value], after: &[Value], path: &str, ops: &mut Vec<PatchOperation>) {
    let whole = Value::Array(raw.to_vec());
    set(Some(&whole), &Value::Array(after.to_vec()), path, ops);
}

/// The `name` members of `items` in order, if every element is an
/// object with a string `name` and no two share one; `None` otherwise.
fn names(items: &[Value]) -> Option<Vec<&str>> {
    let mut seen = HashSet::with_capacity(items.len());
    items
        .iter()
        .map(|item| {
            let name = item.get("name")?.as_str()?;
            seen.insert(name).then_some(name)
        })
        .collect()
}

/// Whether an element of `new` equals an element of `old` at another index: the handler moved
/// elements rather than changing them in place.
///
/// Elements are looked up by a hash of their content, and at most two candidates of one hash
/// are compared, so the work stays linear even for long lists of equal elements.
fn moved(old: &[Value], new: &[Value]) -> bool {
    let mut by_hash: HashMap<u64, Vec<usize>> = HashMap::with_capacity(old.len());
    for (j, o) in old.iter().enumerate() {
        by_hash.entry(content_hash(o)).or_default().push(j);
    }
    new.iter().enumerate().any(|(i, n)| {
        by_hash.get(&content_hash(n)).is_some_and(|candidates| {
            candidates
                .iter()
                .filter(|&&j| j != i)
                .take(2)
                .any(|&j| old[j] == *n)
        })
    })
}

/// A hash of `value` consistent with its equality (object members hashed in key order).
fn content_hash(value: &Value) -> u64 {
    fn feed(value: &Value, h: &mut DefaultHasher) {
        match value {
            Value::Null => 0u8.hash(h),
            Value::Bool(b) => (1u8, b).hash(h),
            Value::Number(n) => (2u8, n.to_string()).hash(h),
            Value::String(s) => (3u8, s).hash(h),
            Value::Array(items) => {
                (4u8, items.len()).hash(h);
                for item in items {
                    feed(item, h);
                }
            }
            Value::Object(map) => {
                (5u8, map.len()).hash(h);
                let mut keys: Vec<&String> = map.keys().collect();
                keys.sort_unstable();
                for key in keys {
                    key.hash(h);
                    feed(&map[key], h);
                }
            }
        }
    }
    let mut h = DefaultHasher::new();
    feed(value, &mut h);
    h.finish()
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

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
            let common = b.len().min(a.len());
            for i in 0..common {
                let len = path.len();
                path.push('/');
                path.push_str(&i.to_string());
                walk(raw.get(i), &b[i], &a[i], path, ops);
                path.truncate(len);
            }
            // Removed from the end backwards, so each index is still valid when applied.
            for i in (common..b.len()).rev() {
                ops.push(PatchOperation::Remove {
                    path: format!("{path}/{i}"),
                });
            }
            for (i, value) in a.iter().enumerate().skip(common) {
                ops.push(PatchOperation::Add {
                    path: format!("{path}/{i}"),
                    value: without_nulls(value),
                });
            }
        }
        // Any other change (a scalar, a type change, a subtree the raw object lacks or
        // holds differently): `after`'s value as a whole.
        _ => set(raw, after, path, ops),
    }
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

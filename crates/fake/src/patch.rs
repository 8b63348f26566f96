//! JSON merge patch (RFC 7386), a strategic merge patch for the fields controllers patch, and
//! JSON patch (RFC 6902).

use serde_json::{Map, Value};

/// RFC 7386: objects merge recursively, `null` deletes, anything else replaces.
pub(crate) fn merge(target: &mut Value, patch: &Value) {
    let Value::Object(p) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let Value::Object(t) = target else { return };
    for (k, v) in p {
        if v.is_null() {
            t.remove(k);
        } else {
            merge(t.entry(k.clone()).or_insert(Value::Null), v);
        }
    }
}

/// How a list field merges under a strategic merge patch.
enum ListStrategy {
    /// No patch strategy: the patch's list replaces the object's.
    Replace,
    /// `patchStrategy: merge` of objects identified by this key.
    MergeByKey(&'static str),
    /// `patchStrategy: merge` of primitives (a set union keeping order), e.g. finalizers.
    MergePrimitives,
}

/// The patch strategy of the list at `path` (map keys from the root, list indices omitted),
/// for the built-in fields controllers commonly patch.
fn list_strategy(path: &[String]) -> ListStrategy {
    let last = path.last().map(String::as_str).unwrap_or("");
    let parent = path.len().checked_sub(2).map(|i| path[i].as_str());
    match (parent, last) {
        (Some("metadata"), "ownerReferences") => ListStrategy::MergeByKey("uid"),
        (Some("metadata"), "finalizers") => ListStrategy::MergePrimitives,
        (_, "containers" | "initContainers" | "ephemeralContainers") => {
            ListStrategy::MergeByKey("name")
        }
        (Some("containers" | "initContainers" | "ephemeralContainers"), "ports") => {
            ListStrategy::MergeByKey("containerPort")
        }
        (Some("spec"), "ports") if path.len() == 2 => ListStrategy::MergeByKey("port"),
        (_, "volumes" | "env" | "imagePullSecrets" | "resourceClaims") => {
            ListStrategy::MergeByKey("name")
        }
        (_, "volumeMounts") => ListStrategy::MergeByKey("mountPath"),
        (_, "volumeDevices") => ListStrategy::MergeByKey("devicePath"),
        (_, "hostAliases") => ListStrategy::MergeByKey("ip"),
        (_, "topologySpreadConstraints") => ListStrategy::MergeByKey("topologyKey"),
        (_, "conditions") => ListStrategy::MergeByKey("type"),
        (Some("status"), "addresses") => ListStrategy::MergeByKey("type"),
        _ => ListStrategy::Replace,
    }
}

/// Applies a strategic merge patch. Maps merge (`null` deletes), `$patch: replace|delete`
/// directives on maps and list items are honoured, lists merge by their merge key where the
/// built-in type declares one, `$deleteFromPrimitiveList/<field>` removes primitives,
/// `$setElementOrder/<field>` and `$retainKeys` are accepted and ignored.
pub(crate) fn strategic(target: &mut Value, patch: &Value) -> Result<(), String> {
    strategic_at(target, patch, &mut Vec::new())
}

fn strategic_at(target: &mut Value, patch: &Value, path: &mut Vec<String>) -> Result<(), String> {
    let Value::Object(p) = patch else {
        *target = patch.clone();
        return Ok(());
    };
    match p.get("$patch").and_then(Value::as_str) {
        Some("replace") => {
            let mut m = p.clone();
            m.remove("$patch");
            *target = Value::Object(m);
            return Ok(());
        }
        Some("delete") => {
            *target = Value::Object(Map::new());
            return Ok(());
        }
        Some(other) => return Err(format!("unknown patch type: {other:?} in map: {p:?}")),
        None => {}
    }
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let Value::Object(t) = target else {
        return Ok(());
    };
    for (k, v) in p {
        if k == "$retainKeys" || k.starts_with("$setElementOrder/") {
            continue;
        }
        if let Some(field) = k.strip_prefix("$deleteFromPrimitiveList/") {
            if let (Some(Value::Array(items)), Value::Array(remove)) = (t.get_mut(field), v) {
                items.retain(|i| !remove.contains(i));
            }
            continue;
        }
        if v.is_null() {
            t.remove(k);
            continue;
        }
        if let Value::Object(vm) = v
            && vm.get("$patch").and_then(Value::as_str) == Some("delete")
        {
            t.remove(k);
            continue;
        }
        path.push(k.clone());
        let slot = t.entry(k.clone()).or_insert(Value::Null);
        let res = match v {
            Value::Array(items) => merge_list(slot, items, path),
            Value::Object(_) => strategic_at(slot, v, path),
            _ => {
                *slot = v.clone();
                Ok(())
            }
        };
        path.pop();
        res?;
    }
    Ok(())
}

fn merge_list(slot: &mut Value, items: &[Value], path: &mut Vec<String>) -> Result<(), String> {
    let strategy = list_strategy(path);
    if items
        .iter()
        .any(|i| i.get("$patch").and_then(Value::as_str) == Some("replace"))
    {
        *slot = Value::Array(
            items
                .iter()
                .filter(|i| i.get("$patch").is_none())
                .cloned()
                .collect(),
        );
        return Ok(());
    }
    match strategy {
        ListStrategy::Replace => {
            *slot = Value::Array(items.to_vec());
        }
        ListStrategy::MergePrimitives => {
            if !slot.is_array() {
                *slot = Value::Array(Vec::new());
            }
            let Value::Array(cur) = slot else {
                return Ok(());
            };
            for i in items {
                if !cur.contains(i) {
                    cur.push(i.clone());
                }
            }
        }
        ListStrategy::MergeByKey(key) => {
            if !slot.is_array() {
                *slot = Value::Array(Vec::new());
            }
            let Value::Array(cur) = slot else {
                return Ok(());
            };
            for item in items {
                let Some(id) = item.get(key) else {
                    return Err(format!(
                        "map: {item} does not contain declared merge key: {key}"
                    ));
                };
                let pos = cur.iter().position(|c| c.get(key) == Some(id));
                if item.get("$patch").and_then(Value::as_str) == Some("delete") {
                    cur.retain(|c| c.get(key) != Some(id));
                    continue;
                }
                match pos {
                    Some(i) => strategic_at(&mut cur[i], item, path)?,
                    None => {
                        let mut fresh = Value::Null;
                        strategic_at(&mut fresh, item, path)?;
                        cur.push(fresh);
                    }
                }
            }
        }
    }
    Ok(())
}

/// Applies an RFC 6902 JSON patch (`add`, `remove`, `replace`, `move`, `copy`, `test`) to
/// `target`, as the fake's `patch` with [`Patch::Json`](kctrl_client::Patch) does: an error
/// names the operation that could not apply (a path that does not exist where the RFC
/// requires one, an index past the end, a failed `test`).
pub fn json_patch(target: &mut Value, ops: &Value) -> Result<(), String> {
    let Value::Array(ops) = ops else {
        return Err("a JSON patch must be an array of operations".to_owned());
    };
    for op in ops {
        let name = op
            .get("op")
            .and_then(Value::as_str)
            .ok_or_else(|| format!("operation {op} has no \"op\""))?;
        let path = op
            .get("path")
            .and_then(Value::as_str)
            .ok_or_else(|| format!("operation {op} has no \"path\""))?;
        let value = || {
            op.get("value")
                .cloned()
                .ok_or_else(|| format!("operation {name} at {path} has no \"value\""))
        };
        let from = || {
            op.get("from")
                .and_then(Value::as_str)
                .ok_or_else(|| format!("operation {name} at {path} has no \"from\""))
        };
        match name {
            "add" => add(target, path, value()?)?,
            "remove" => {
                remove(target, path)?;
            }
            "replace" => {
                remove(target, path)?;
                add(target, path, value()?)?;
            }
            "move" => {
                let v = remove(target, from()?)?;
                add(target, path, v)?;
            }
            "copy" => {
                let v = target
                    .pointer(from()?)
                    .cloned()
                    .ok_or_else(|| format!("copy from {}: path not found", from().unwrap_or("")))?;
                add(target, path, v)?;
            }
            "test" => {
                if target.pointer(path) != Some(&value()?) {
                    return Err(format!("testing value {path} failed: test failed"));
                }
            }
            other => return Err(format!("unexpected kind: {other}")),
        }
    }
    Ok(())
}

fn unescape(token: &str) -> String {
    token.replace("~1", "/").replace("~0", "~")
}

fn split(path: &str) -> Result<(String, String), String> {
    let idx = path
        .rfind('/')
        .ok_or_else(|| format!("invalid JSON pointer {path:?}"))?;
    Ok((path[..idx].to_owned(), unescape(&path[idx + 1..])))
}

fn add(target: &mut Value, path: &str, value: Value) -> Result<(), String> {
    if path.is_empty() {
        *target = value;
        return Ok(());
    }
    let (parent, last) = split(path)?;
    match target.pointer_mut(&parent) {
        Some(Value::Object(m)) => {
            m.insert(last, value);
            Ok(())
        }
        Some(Value::Array(a)) => {
            let i = if last == "-" {
                a.len()
            } else {
                last.parse::<usize>()
                    .ok()
                    .filter(|i| *i <= a.len())
                    .ok_or_else(|| {
                        format!("add operation does not apply: doc is missing path: {path}")
                    })?
            };
            a.insert(i, value);
            Ok(())
        }
        _ => Err(format!(
            "add operation does not apply: doc is missing path: {path:?}"
        )),
    }
}

fn remove(target: &mut Value, path: &str) -> Result<Value, String> {
    let (parent, last) = split(path)?;
    let missing = || format!("remove operation does not apply: doc is missing path: {path:?}");
    match target.pointer_mut(&parent) {
        Some(Value::Object(m)) => m.remove(&last).ok_or_else(missing),
        Some(Value::Array(a)) => match last.parse::<usize>() {
            Ok(i) if i < a.len() => Ok(a.remove(i)),
            _ => Err(missing()),
        },
        _ => Err(missing()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn strategic_owner_references_merge_and_delete_by_uid() {
        let mut obj = json!({"metadata": {"ownerReferences": [{"uid": "a", "name": "x"}]}});
        strategic(
            &mut obj,
            &json!({"metadata": {"ownerReferences": [{"uid": "b", "name": "y"}]}}),
        )
        .unwrap();
        assert_eq!(
            obj["metadata"]["ownerReferences"].as_array().unwrap().len(),
            2
        );
        strategic(
            &mut obj,
            &json!({"metadata": {"ownerReferences": [{"$patch": "delete", "uid": "a"}]}}),
        )
        .unwrap();
        assert_eq!(
            obj["metadata"]["ownerReferences"],
            json!([{"uid": "b", "name": "y"}])
        );
    }

    #[test]
    fn strategic_containers_merge_by_name_and_maps_null_delete() {
        let mut obj = json!({"metadata": {"labels": {"a": "1", "b": "2"}},
            "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "v1"}, {"name": "d", "image": "x"}]}}}});
        strategic(
            &mut obj,
            &json!({"metadata": {"labels": {"a": null, "c": "3"}},
                "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "v2"}]}}}}),
        )
        .unwrap();
        assert_eq!(obj["metadata"]["labels"], json!({"b": "2", "c": "3"}));
        let cs = &obj["spec"]["template"]["spec"]["containers"];
        assert_eq!(cs[0], json!({"name": "c", "image": "v2"}));
        assert_eq!(cs[1]["name"], "d");
    }

    #[test]
    fn json_patch_ops() {
        let mut obj = json!({"a": {"b": [1, 2]}, "c": 1});
        json_patch(
            &mut obj,
            &json!([
                {"op": "test", "path": "/c", "value": 1},
                {"op": "add", "path": "/a/b/-", "value": 3},
                {"op": "replace", "path": "/c", "value": 2},
                {"op": "remove", "path": "/a/b/0"},
                {"op": "add", "path": "/d~1e", "value": true}
            ]),
        )
        .unwrap();
        assert_eq!(obj, json!({"a": {"b": [2, 3]}, "c": 2, "d/e": true}));
        assert!(json_patch(&mut obj, &json!([{"op": "test", "path": "/c", "value": 9}])).is_err());
    }

    #[test]
    fn merge_patch_null_deletes_and_lists_replace() {
        let mut obj = json!({"a": {"b": 1, "c": [1, 2]}});
        merge(&mut obj, &json!({"a": {"b": null, "c": [3]}}));
        assert_eq!(obj, json!({"a": {"c": [3]}}));
    }
}

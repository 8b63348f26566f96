use serde_json::json;

use super::*;

/// Applies `ops` to `doc` as the API server does (RFC 6902 `add`, `remove`, `replace`), failing
/// on a path that does not exist where the RFC requires one.
fn apply(doc: &mut Value, ops: &[PatchOperation]) -> Result<(), String> {
    fn unescape(token: &str) -> String {
        token.replace("~1", "/").replace("~0", "~")
    }
    fn parent<'a>(doc: &'a mut Value, path: &str) -> Result<(&'a mut Value, String), String> {
        let mut tokens: Vec<String> = path.split('/').skip(1).map(unescape).collect();
        let last = tokens.pop().ok_or_else(|| format!("empty path {path:?}"))?;
        let mut node = doc;
        for t in tokens {
            node = match node {
                Value::Object(m) => m.get_mut(&t),
                Value::Array(a) => t.parse::<usize>().ok().and_then(|i| a.get_mut(i)),
                _ => None,
            }
            .ok_or_else(|| format!("{path}: no {t:?}"))?;
        }
        Ok((node, last))
    }
    for op in ops {
        match op {
            PatchOperation::Add { path, value } => match parent(doc, path)? {
                (Value::Object(m), key) => {
                    m.insert(key, value.clone());
                }
                (Value::Array(a), key) => {
                    let i = if key == "-" {
                        a.len()
                    } else {
                        key.parse().map_err(|_| format!("{path}: index"))?
                    };
                    if i > a.len() {
                        return Err(format!("{path}: index past the end"));
                    }
                    a.insert(i, value.clone());
                }
                _ => return Err(format!("{path}: parent is not a container")),
            },
            PatchOperation::Remove { path } => match parent(doc, path)? {
                (Value::Object(m), key) => {
                    m.remove(&key)
                        .ok_or_else(|| format!("{path}: nothing to remove"))?;
                }
                (Value::Array(a), key) => {
                    let i: usize = key.parse().map_err(|_| format!("{path}: index"))?;
                    if i >= a.len() {
                        return Err(format!("{path}: nothing to remove"));
                    }
                    a.remove(i);
                }
                _ => return Err(format!("{path}: parent is not a container")),
            },
            PatchOperation::Replace { path, value } => match parent(doc, path)? {
                (Value::Object(m), key) => {
                    *m.get_mut(&key)
                        .ok_or_else(|| format!("{path}: nothing to replace"))? = value.clone();
                }
                (Value::Array(a), key) => {
                    let i: usize = key.parse().map_err(|_| format!("{path}: index"))?;
                    *a.get_mut(i)
                        .ok_or_else(|| format!("{path}: nothing to replace"))? = value.clone();
                }
                _ => return Err(format!("{path}: parent is not a container")),
            },
        }
    }
    Ok(())
}

/// Diffs, applies to `raw`, and checks the result is `expected`.
fn round_trip(raw: Value, before: Value, after: Value, expected: Value) -> Vec<PatchOperation> {
    let ops = diff(&raw, &before, &after);
    let mut patched = raw.clone();
    apply(&mut patched, &ops).unwrap_or_else(|e| panic!("applying {ops:?}: {e}"));
    assert_eq!(patched, expected, "ops: {ops:?}");
    ops
}

#[test]
fn pointers_escape_tilde_and_slash() {
    assert_eq!(escape_token("a/b~c"), "a~1b~0c");
    assert_eq!(escape_token("~1"), "~01");
    let raw = json!({"metadata": {"annotations": {"example.com/a~b": "1"}}});
    let after = json!({"metadata": {"annotations": {"example.com/a~b": "2"}}});
    let ops = round_trip(raw.clone(), raw, after.clone(), after);
    assert_eq!(
        ops,
        [PatchOperation::Replace {
            path: "/metadata/annotations/example.com~1a~0b".into(),
            value: json!("2")
        }]
    );
}

#[test]
fn unchanged_objects_give_no_operations() {
    let v = json!({"spec": {"a": [1, 2, {"b": null}]}});
    assert!(diff(&v, &v, &v).is_empty());
}

#[test]
fn fields_unknown_to_the_type_are_kept() {
    // The raw object has `spec.future` and `status`, which the Rust type does not know; the
    // handler sets `spec.suspend`.
    let raw = json!({"apiVersion": "v1", "spec": {"schedule": "* * * * *", "future": {"x": 1}}, "status": {"active": []}});
    let before = json!({"apiVersion": "v1", "spec": {"schedule": "* * * * *", "suspend": null}});
    let after = json!({"apiVersion": "v1", "spec": {"schedule": "* * * * *", "suspend": false}});
    let ops = round_trip(
        raw,
        before,
        after,
        json!({"apiVersion": "v1", "spec": {"schedule": "* * * * *", "future": {"x": 1}, "suspend": false}, "status": {"active": []}}),
    );
    // An `add`: the raw object has no `suspend` (the type serialized its None as null).
    assert_eq!(
        ops,
        [PatchOperation::Add {
            path: "/spec/suspend".into(),
            value: json!(false)
        }]
    );
}

#[test]
fn subtrees_missing_from_the_raw_object_are_added_without_nulls() {
    let raw = json!({"metadata": {"name": "a"}});
    let before = json!({"metadata": {"name": "a"}, "spec": {"limits": null}});
    let after =
        json!({"metadata": {"name": "a"}, "spec": {"limits": {"cpu": "1", "memory": null}}});
    round_trip(
        raw,
        before,
        after,
        json!({"metadata": {"name": "a"}, "spec": {"limits": {"cpu": "1"}}}),
    );
}

#[test]
fn fields_set_to_none_are_removed() {
    let raw = json!({"spec": {"a": 1, "b": 2}});
    let before = raw.clone();
    let after = json!({"spec": {"a": null}});
    let ops = round_trip(raw, before, after, json!({"spec": {}}));
    assert_eq!(
        ops,
        [
            PatchOperation::Remove {
                path: "/spec/a".into()
            },
            PatchOperation::Remove {
                path: "/spec/b".into()
            }
        ]
    );
}

#[test]
fn arrays_grow_shrink_and_change_in_place() {
    let raw = json!({"l": [{"n": 1, "x": "kept"}, {"n": 2}, {"n": 3}]});
    let before = json!({"l": [{"n": 1}, {"n": 2}, {"n": 3}]});
    // Changed in place: each element diffed with its raw one.
    let after = json!({"l": [{"n": 1}, {"n": 20}, {"n": 3}]});
    round_trip(
        raw.clone(),
        before.clone(),
        after,
        json!({"l": [{"n": 1, "x": "kept"}, {"n": 20}, {"n": 3}]}),
    );
    // Three elements become one unlike any of them: which is which cannot be told, the array
    // is replaced.
    let after = json!({"l": [{"n": 10}]});
    round_trip(
        raw.clone(),
        before.clone(),
        after,
        json!({"l": [{"n": 10}]}),
    );
    let after = json!({"l": [{"n": 1}, {"n": 2}, {"n": 3}, {"n": 4, "z": null}, 5]});
    let ops = round_trip(
        raw,
        before,
        after,
        json!({"l": [{"n": 1, "x": "kept"}, {"n": 2}, {"n": 3}, {"n": 4}, 5]}),
    );
    assert_eq!(ops.len(), 2);
}

#[test]
fn type_changes_and_raw_arrays_of_another_length_replace_the_whole_value() {
    let raw = json!({"a": [1, 2, 3], "b": "s"});
    let before = json!({"a": [1, 2], "b": "s"});
    let after = json!({"a": [1, 9], "b": {"o": 1}});
    round_trip(raw, before, after.clone(), after);
}

#[test]
fn round_trips_on_generated_objects() {
    // Every pair of a small set of shapes: the patch applied to `before` gives `after`
    // (nulls in `after` meaning absence).
    let shapes = [
        json!({}),
        json!({"a": 1}),
        json!({"a": null, "b": [1, {"c": "~/"}]}),
        json!({"a": {"x/y": [true, false]}, "b": []}),
        json!({"a": "1", "b": [1, {"c": "~/", "d": 2}, 3], "e~": {"f": {}}}),
        json!({"b": [{"c": null}]}),
    ];
    for before in &shapes {
        for after in &shapes {
            let raw = without_nulls(before);
            let ops = diff(&raw, before, after);
            let mut patched = raw.clone();
            apply(&mut patched, &ops)
                .unwrap_or_else(|e| panic!("{before} -> {after}: {ops:?}: {e}"));
            assert_eq!(
                patched,
                without_nulls(after),
                "{before} -> {after}: {ops:?}"
            );
        }
    }
}

#[test]
fn an_element_prepended_leaves_the_unknown_fields_with_their_elements() {
    let raw = json!({"c": [{"name": "a", "unknown": "A"}, {"name": "b", "unknown": "B"}]});
    let before = json!({"c": [{"name": "a"}, {"name": "b"}]});
    let after = json!({"c": [{"name": "side"}, {"name": "a"}, {"name": "b"}]});
    let ops = round_trip(
        raw.clone(),
        before.clone(),
        after,
        json!({"c": [{"name": "side"}, {"name": "a", "unknown": "A"}, {"name": "b", "unknown": "B"}]}),
    );
    assert_eq!(
        ops,
        [PatchOperation::Add {
            path: "/c/0".into(),
            value: json!({"name": "side"})
        }]
    );
    // Removing the first one removes it, not the last.
    let after = json!({"c": [{"name": "b"}]});
    round_trip(
        raw,
        before,
        after,
        json!({"c": [{"name": "b", "unknown": "B"}]}),
    );
}

/// A small deterministic generator (xorshift64*), so a failure is reproducible from its seed.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 33) as usize % n.max(1)
    }
}

#[test]
fn unknown_fields_stay_with_their_element_through_random_edits() {
    // Elements are typed `{"name", "value"}` (names unique, so an element's identity is its
    // name); the raw object adds `unknown: "U-<name>"` to each, which the type does not know.
    let typed = |name: usize, value: usize| json!({"name": format!("e{name}"), "value": value});
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut next_name = 1000;
    for round in 0..5000 {
        let len = rng.below(6);
        let before: Vec<Value> = (0..len).map(|i| typed(i, rng.below(3))).collect();
        let mut after = before.clone();
        // 0: insert a run, 1: remove a run, 2: change values in place, 3: two of those.
        let edit = rng.below(4);
        let edits = if edit == 3 {
            vec![rng.below(3), rng.below(3)]
        } else {
            vec![edit]
        };
        for e in &edits {
            match e {
                0 => {
                    let at = rng.below(after.len() + 1);
                    for _ in 0..1 + rng.below(3) {
                        next_name += 1;
                        after.insert(at, typed(next_name, rng.below(3)));
                    }
                }
                1 if !after.is_empty() => {
                    let at = rng.below(after.len());
                    let n = 1 + rng.below(after.len() - at);
                    after.drain(at..at + n);
                }
                _ => {
                    for item in after.iter_mut() {
                        if rng.below(2) == 0 {
                            item["value"] = json!(rng.below(3) + 10);
                        }
                    }
                }
            }
        }
        let raw_items: Vec<Value> = before
            .iter()
            .map(|b| {
                let mut r = b.clone();
                r["unknown"] = json!(format!("U-{}", b["name"].as_str().unwrap()));
                r
            })
            .collect();
        let raw = json!({"spec": {"items": raw_items}});
        let ops = diff(
            &raw,
            &json!({"spec": {"items": before}}),
            &json!({"spec": {"items": after}}),
        );
        let mut patched = raw.clone();
        apply(&mut patched, &ops)
            .unwrap_or_else(|e| panic!("round {round}: {before:?} -> {after:?}: {ops:?}: {e}"));
        let items = patched["spec"]["items"].as_array().unwrap();
        assert_eq!(items.len(), after.len(), "round {round}: {ops:?}");
        let mut kept = 0;
        for (got, want) in items.iter().zip(&after) {
            let name = want["name"].as_str().unwrap();
            assert_eq!(got["name"], want["name"], "round {round}: {ops:?}");
            assert_eq!(got["value"], want["value"], "round {round}: {ops:?}");
            if let Some(u) = got.get("unknown") {
                assert_eq!(
                    u,
                    &json!(format!("U-{name}")),
                    "round {round}: {before:?} -> {after:?}: {ops:?} moved an unknown field"
                );
                kept += 1;
            }
        }
        // A single insert, remove or change in place keeps every surviving element's unknown
        // fields; only a replaced array (two kinds of edit at once) may lose them.
        let survivors = after
            .iter()
            .filter(|a| before.iter().any(|b| b["name"] == a["name"]))
            .count();
        if edits.len() == 1 {
            assert_eq!(
                kept, survivors,
                "round {round}: {before:?} -> {after:?}: {ops:?} lost unknown fields"
            );
        }
    }
}

use serde_json::json;

use super::*;

/// Applies `ops` to `doc` with kctrl-fake's RFC 6902 implementation (its JSON-patch endpoint),
/// failing on a path that does not exist where the RFC requires one.
fn apply(doc: &mut Value, ops: &[PatchOperation]) -> Result<(), String> {
    let ops = serde_json::to_value(ops).map_err(|e| e.to_string())?;
    kctrl_fake::json_patch(doc, &ops)
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
    // Three elements become one unlike any of them, no names to match them by: the first is
    // changed in place (keeping its unknown field), the others removed from the end.
    let after = json!({"l": [{"n": 10}]});
    round_trip(
        raw.clone(),
        before.clone(),
        after,
        json!({"l": [{"n": 10, "x": "kept"}]}),
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
        // 0: insert a run, 1: remove a run, 2: change values in place, 3: a change in place
        // and an insert or a remove, 4: an insert and a remove, 5: any two of 0..=2.
        let edits = match rng.below(6) {
            3 => vec![2, rng.below(2)],
            4 => vec![0, 1],
            5 => vec![rng.below(3), rng.below(3)],
            e => vec![e],
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
        // Every element that stays keeps its own unknown field. A new element has none, unless
        // both an insert and a remove happened: an element removed and another inserted at its
        // index is indistinguishable from one renamed in place, which keeps its raw fields.
        let inserted_and_removed = edits.contains(&0) && edits.contains(&1);
        for (got, want) in items.iter().zip(&after) {
            let name = want["name"].as_str().unwrap();
            assert_eq!(got["name"], want["name"], "round {round}: {ops:?}");
            assert_eq!(got["value"], want["value"], "round {round}: {ops:?}");
            if before.iter().any(|b| b["name"] == want["name"]) {
                assert_eq!(
                    got.get("unknown"),
                    Some(&json!(format!("U-{name}"))),
                    "round {round}: {before:?} -> {after:?}: {ops:?} lost or moved an unknown field"
                );
            } else if !inserted_and_removed {
                assert_eq!(
                    got.get("unknown"),
                    None,
                    "round {round}: {before:?} -> {after:?}: {ops:?} gave a new element an unknown field"
                );
            }
        }
    }
}

/// `{"name": <name>, "image": "img"}` as the type serializes it, and as the raw object has it
/// with a field the type does not know.
fn container(name: &str) -> (Value, Value) {
    let typed = json!({"name": name, "image": "img"});
    let mut raw = typed.clone();
    raw["unknownField"] = json!(format!("U-{name}"));
    (typed, raw)
}

#[test]
fn an_element_edited_and_another_appended_keep_the_unknown_fields() {
    let (c0, c0_raw) = container("c0");
    let raw = json!({"containers": [c0_raw.clone()]});
    let before = json!({"containers": [c0.clone()]});
    let mut c0_env = c0.clone();
    c0_env["env"] = json!([{"name": "A", "value": "1"}]);
    let after = json!({"containers": [c0_env, {"name": "sidecar", "image": "side", "env": null}]});
    let mut expected_c0 = c0_raw;
    expected_c0["env"] = json!([{"name": "A", "value": "1"}]);
    round_trip(
        raw,
        before,
        after,
        json!({"containers": [expected_c0, {"name": "sidecar", "image": "side"}]}),
    );
}

#[test]
fn an_element_edited_and_the_last_removed_keep_the_unknown_fields() {
    let (a, a_raw) = container("a");
    let (b, b_raw) = container("b");
    let raw = json!({"containers": [a_raw.clone(), b_raw]});
    let before = json!({"containers": [a.clone(), b]});
    let mut a2 = a;
    a2["image"] = json!("img:2");
    let mut expected = a_raw;
    expected["image"] = json!("img:2");
    round_trip(
        raw,
        before,
        json!({"containers": [a2]}),
        json!({"containers": [expected]}),
    );
}

#[test]
fn edits_inserts_and_removes_by_name_keep_the_unknown_fields() {
    // a, b, c, d -> x, b', d, y: a and c removed, x and y added, b edited, d kept (and moved
    // from index 3 to 2 by the removals, so no suffix is equal).
    let (a, a_raw) = container("a");
    let (b, b_raw) = container("b");
    let (c, c_raw) = container("c");
    let (d, d_raw) = container("d");
    let raw = json!({"l": [a_raw, b_raw.clone(), c_raw, d_raw.clone()]});
    let before = json!({"l": [a, b.clone(), c, d.clone()]});
    let mut b2 = b;
    b2["image"] = json!("img:2");
    let x = json!({"name": "x", "image": "x"});
    let y = json!({"name": "y", "image": "y"});
    let mut b2_raw = b_raw;
    b2_raw["image"] = json!("img:2");
    round_trip(
        raw,
        before,
        json!({"l": [x.clone(), b2, d, y.clone()]}),
        json!({"l": [x, b2_raw, d_raw, y]}),
    );
}

#[test]
fn an_element_renamed_in_place_keeps_its_unknown_fields() {
    let (a, a_raw) = container("a");
    let (b, b_raw) = container("b");
    let raw = json!({"l": [a_raw, b_raw.clone()]});
    let before = json!({"l": [a, b.clone()]});
    let renamed = json!({"name": "a2", "image": "img"});
    let mut expected = raw["l"][0].clone();
    expected["name"] = json!("a2");
    let ops = round_trip(
        raw,
        before,
        json!({"l": [renamed, b]}),
        json!({"l": [expected, b_raw]}),
    );
    assert_eq!(
        ops,
        [PatchOperation::Replace {
            path: "/l/0/name".into(),
            value: json!("a2")
        }]
    );
}

#[test]
fn reordered_elements_replace_the_array() {
    // Named: b and a swapped (and one edited, so no prefix or suffix is equal).
    let (a, a_raw) = container("a");
    let (b, b_raw) = container("b");
    let raw = json!({"l": [a_raw, b_raw]});
    let before = json!({"l": [a.clone(), b.clone()]});
    let mut a2 = a;
    a2["image"] = json!("img:2");
    let after = json!({"l": [b, a2]});
    round_trip(raw, before, after.clone(), after);
    // Unnamed: an element moved to another index.
    let raw = json!({"l": [{"n": 1, "u": 1}, {"n": 2, "u": 2}, {"n": 3}]});
    let before = json!({"l": [{"n": 1}, {"n": 2}, {"n": 3}]});
    let after = json!({"l": [{"n": 2}, {"n": 1}, {"n": 4}, {"n": 5}]});
    round_trip(raw, before, after.clone(), after);
}

#[test]
fn ten_thousand_elements_edited_and_appended_keep_the_unknown_fields() {
    const N: usize = 10_000;
    let (typed, raw): (Vec<Value>, Vec<Value>) =
        (0..N).map(|i| container(&format!("c{i}"))).unzip();
    // Named: every element edited, one appended.
    let mut after = typed.clone();
    let mut expected = raw.clone();
    for (a, e) in after.iter_mut().zip(expected.iter_mut()) {
        a["image"] = json!("img:2");
        e["image"] = json!("img:2");
    }
    after.push(json!({"name": "sidecar", "image": "side"}));
    expected.push(json!({"name": "sidecar", "image": "side"}));
    let ops = round_trip(
        json!({"l": raw}),
        json!({"l": typed}),
        json!({"l": after}),
        json!({"l": expected}),
    );
    assert_eq!(ops.len(), N + 1);
    // Unnamed: every element edited in place, as many on both sides.
    let raw: Vec<Value> = (0..N).map(|i| json!({"v": i, "u": i})).collect();
    let before: Vec<Value> = (0..N).map(|i| json!({"v": i})).collect();
    let after: Vec<Value> = (0..N).map(|i| json!({"v": i + N})).collect();
    let expected: Vec<Value> = (0..N).map(|i| json!({"v": i + N, "u": i})).collect();
    round_trip(
        json!({"l": raw}),
        json!({"l": before}),
        json!({"l": after}),
        json!({"l": expected}),
    );
    // Unnamed and all equal, the worst case for telling moved elements apart: the first and
    // the last edited. Each unchanged element equals one at another index of the other side,
    // which reads as a move: the array is replaced, in bounded time.
    let before: Vec<Value> = (0..N).map(|_| json!({"v": 0})).collect();
    let mut after = before.clone();
    after[0]["v"] = json!(1);
    after[N - 1]["v"] = json!(1);
    round_trip(
        json!({"l": before}),
        json!({"l": before}),
        json!({"l": after}),
        json!({"l": after}),
    );
}

//! `label_selector`: [`Selector::parse`] on arbitrary text.
//!
//! Properties:
//! * parsing never panics; a rejection names the input and gives a reason;
//! * the canonical form (`Display`) of a parsed selector parses back to an equal selector, and
//!   is a fixed point (rendering that again gives the same text);
//! * whitespace around operators and commas does not change the result;
//! * every requirement is one that [`Requirement::new`] accepts as it is;
//! * matching agrees with a direct reading of the grammar's meaning, on label sets built
//!   from the selector's own keys and values.

use std::collections::BTreeMap;

use kctrl_client::labels::{Operator, Requirement, Selector};

/// The property function.
pub fn check(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let selector = match Selector::parse(text) {
        Ok(s) => s,
        Err(e) => {
            assert_eq!(e.selector, text, "the error names another input");
            assert!(!e.reason.is_empty(), "rejected {text:?} without a reason");
            return;
        }
    };
    assert!(!selector.is_nothing(), "{text:?} parsed to Nothing");

    let canonical = selector.to_string();
    let again = Selector::parse(&canonical)
        .unwrap_or_else(|e| panic!("canonical form {canonical:?} of {text:?} does not parse: {e}"));
    assert_eq!(
        again, selector,
        "{text:?} -> {canonical:?} parses differently"
    );
    assert_eq!(
        again.to_string(),
        canonical,
        "canonical form is not a fixed point"
    );

    let spaced = canonical.replace(',', " , ");
    assert_eq!(
        Selector::parse(&spaced).ok().as_ref(),
        Some(&selector),
        "{spaced:?} (spaced {canonical:?}) parses differently"
    );

    let reqs = selector.requirements();
    assert!(
        reqs.windows(2).all(|w| w[0].key() <= w[1].key()),
        "requirements of {text:?} are not sorted by key"
    );
    for r in reqs {
        let rebuilt = Requirement::new(
            r.key(),
            r.operator(),
            r.values().map(str::to_owned).collect::<Vec<_>>(),
        )
        .unwrap_or_else(|e| panic!("requirement {r} of {text:?} is invalid: {e}"));
        assert_eq!(&rebuilt, r);
    }

    for labels in label_sets(reqs) {
        let want = reqs.iter().all(|r| reference_matches(r, &labels));
        assert_eq!(
            selector.matches(&labels),
            want,
            "{text:?} on {labels:?}: matches() disagrees with the reference"
        );
    }
}

/// What a requirement means, read off the grammar: written independently of the library.
fn reference_matches(r: &Requirement, labels: &BTreeMap<String, String>) -> bool {
    let have = labels.get(r.key()).map(String::as_str);
    let values: Vec<&str> = r.values().collect();
    match r.operator() {
        Operator::Equals | Operator::In => have.is_some_and(|h| values.contains(&h)),
        Operator::NotEquals | Operator::NotIn => !have.is_some_and(|h| values.contains(&h)),
        Operator::Exists => have.is_some(),
        Operator::DoesNotExist => have.is_none(),
        Operator::GreaterThan | Operator::LessThan => {
            let (Some(Ok(h)), [v]) = (have.map(str::parse::<i64>), values.as_slice()) else {
                return false;
            };
            let v: i64 = v.parse().expect("validated integer");
            if r.operator() == Operator::GreaterThan {
                h > v
            } else {
                h < v
            }
        }
    }
}

/// Label sets that exercise every requirement: empty, each value of each key, numbers around
/// the bounds of comparisons, and a value no requirement names.
fn label_sets(reqs: &[Requirement]) -> Vec<BTreeMap<String, String>> {
    let mut candidates: Vec<(String, Vec<String>)> = Vec::new();
    for r in reqs {
        let mut vals: Vec<String> = r.values().map(str::to_owned).collect();
        for v in r.values() {
            if let Ok(n) = v.parse::<i64>() {
                vals.extend([n.saturating_sub(1), n.saturating_add(1)].map(|m| m.to_string()));
            }
        }
        vals.push("zz-unnamed".to_owned());
        candidates.push((r.key().to_owned(), vals));
    }
    let mut sets = vec![BTreeMap::new()];
    // One label set per choice index, so each value of each key shows up at least once
    // alongside values of the other keys.
    let rounds = candidates.iter().map(|(_, v)| v.len()).max().unwrap_or(0);
    for i in 0..rounds {
        let set: BTreeMap<String, String> = candidates
            .iter()
            .map(|(k, vals)| (k.clone(), vals[i % vals.len()].clone()))
            .collect();
        let mut partial = set.clone();
        if let Some((k, _)) = candidates.get(i % candidates.len().max(1)) {
            partial.remove(k);
        }
        sets.push(set);
        sets.push(partial);
    }
    sets
}

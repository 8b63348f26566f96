//! Label-map and selector helpers for stamping the `pod-template-hash` on a new ReplicaSet's
//! labels, template and selector (and stripping it on rollback).
//!
//! An empty key is a no-op everywhere, as upstream. "Clone" variants leave their input untouched.
//!
//! Upstream: `pkg/util/labels/labels.go`.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

/// `CloneAndAddLabel`: a copy of `labels` with `key=value` (the input itself for an empty key).
pub fn clone_and_add_label(
    labels: Option<&BTreeMap<String, String>>,
    key: &str,
    value: &str,
) -> Option<BTreeMap<String, String>> {
    if key.is_empty() {
        return labels.cloned();
    }
    let mut out = labels.cloned().unwrap_or_default();
    out.insert(key.to_owned(), value.to_owned());
    Some(out)
}

/// `CloneAndRemoveLabel`: a copy of `labels` without `key` (the input itself for an empty key).
pub fn clone_and_remove_label(
    labels: Option<&BTreeMap<String, String>>,
    key: &str,
) -> Option<BTreeMap<String, String>> {
    if key.is_empty() {
        return labels.cloned();
    }
    let mut out = labels.cloned().unwrap_or_default();
    out.remove(key);
    Some(out)
}

/// `AddLabel`: sets `key=value` in `labels`, creating the map if needed.
pub fn add_label(labels: &mut Option<BTreeMap<String, String>>, key: &str, value: &str) {
    if key.is_empty() {
        return;
    }
    labels
        .get_or_insert_default()
        .insert(key.to_owned(), value.to_owned());
}

/// `CloneSelectorAndAddLabel`: a copy of `selector` whose `matchLabels` also require
/// `key=value` (match expressions copied unchanged).
pub fn clone_selector_and_add_label(
    selector: &LabelSelector,
    key: &str,
    value: &str,
) -> LabelSelector {
    let mut out = selector.clone();
    add_label_to_selector(&mut out, key, value);
    out
}

/// `AddLabelToSelector`: makes `selector` also require `key=value`.
pub fn add_label_to_selector(selector: &mut LabelSelector, key: &str, value: &str) {
    add_label(&mut selector.match_labels, key, value);
}

/// `SelectorHasLabel`: whether `selector.matchLabels[key]` is set to a non-empty value.
pub fn selector_has_label(selector: &LabelSelector, key: &str) -> bool {
    selector
        .match_labels
        .as_ref()
        .and_then(|m| m.get(key))
        .is_some_and(|v| !v.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::util::testing::map;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    #[test]
    fn clone_and_add_leaves_input_alone() {
        let labels = map(&[("app", "web")]);
        let out = clone_and_add_label(Some(&labels), "pod-template-hash", "abc");
        assert_eq!(
            out,
            Some(map(&[("app", "web"), ("pod-template-hash", "abc")]))
        );
        assert_eq!(labels, map(&[("app", "web")]));
        assert_eq!(
            clone_and_add_label(None, "k", "v"),
            Some(map(&[("k", "v")]))
        );
        assert_eq!(clone_and_add_label(None, "", "v"), None);
    }

    #[test]
    fn clone_and_remove() {
        let labels = map(&[("app", "web"), ("pod-template-hash", "abc")]);
        assert_eq!(
            clone_and_remove_label(Some(&labels), "pod-template-hash"),
            Some(map(&[("app", "web")]))
        );
        assert_eq!(
            clone_and_remove_label(Some(&labels), "").as_ref(),
            Some(&labels)
        );
    }

    #[test]
    fn selector_gets_the_label_and_keeps_expressions() {
        let selector = LabelSelector {
            match_labels: None,
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: "tier".into(),
                operator: "In".into(),
                values: Some(vec!["a".into()]),
            }]),
        };
        let out = clone_selector_and_add_label(&selector, "pod-template-hash", "abc");
        assert_eq!(out.match_labels, Some(map(&[("pod-template-hash", "abc")])));
        assert_eq!(out.match_expressions, selector.match_expressions);
        assert!(selector.match_labels.is_none(), "input untouched");
        assert!(selector_has_label(&out, "pod-template-hash"));
        assert!(!selector_has_label(&selector, "pod-template-hash"));
        let unchanged = clone_selector_and_add_label(&selector, "", "x");
        assert_eq!(unchanged, selector);
    }
}

//! The annotations a Deployment and its ReplicaSets talk through.
//!
//! * Revisions: every ReplicaSet records the rollout sequence number it was new for
//!   (`deployment.kubernetes.io/revision`); one re-used by a rollback keeps its earlier numbers in
//!   `revision-history`, bounded in characters. The Deployment mirrors its newest revision.
//! * Replica annotations: `desired-replicas` and `max-replicas` record the Deployment's size when a
//!   ReplicaSet was last scaled, so that proportional scaling and saturation checks can tell a
//!   scaling event from a rollout.
//! * Copying: user annotations flow Deployment → new ReplicaSet (and back on rollback), except the
//!   controller's own keys and kubectl's last-applied configuration.
//!
//! Upstream: the annotation half of `pkg/controller/deployment/util/deployment_util.go`.

use std::borrow::Borrow;
use std::collections::BTreeMap;
use std::num::ParseIntError;

use k8s_openapi::Metadata;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::constants::{
    ANNOTATIONS_TO_SKIP, DESIRED_REPLICAS_ANNOTATION, MAX_REPLICAS_ANNOTATION, REVISION_ANNOTATION,
    REVISION_HISTORY_ANNOTATION,
};
use super::fence::max_surge;
use super::fields::{annotation, deployment_replicas};

/// A revision annotation that is not a base-10 int64.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid revision {value:?}: {source}")]
pub struct RevisionError {
    /// The annotation's value.
    pub value: String,
    /// Why it does not parse.
    #[source]
    pub source: ParseIntError,
}

/// A replica-count annotation that is not a non-negative int32 in decimal.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AnnotationIntError {
    /// Not an unsigned decimal number (signs, spaces, letters, empty).
    #[error("annotation {key}: parsing {value:?}: invalid syntax")]
    Syntax {
        /// The annotation key.
        key: String,
        /// The offending value.
        value: String,
    },
    /// A number above `i32::MAX`.
    #[error("annotation {key}: value {value} is out of range (higher than {max})", max = i32::MAX)]
    Range {
        /// The annotation key.
        key: String,
        /// The offending value.
        value: String,
    },
}

/// `Revision(obj)`: the object's revision annotation; missing → 0, unparsable → error.
pub fn revision<T: Metadata<Ty = ObjectMeta>>(obj: &T) -> Result<i64, RevisionError> {
    match annotation(obj.metadata().annotations.as_ref(), REVISION_ANNOTATION) {
        None => Ok(0),
        Some(v) => parse_revision(v),
    }
}

/// Go's `strconv.ParseInt(v, 10, 64)` (optional sign, decimal digits).
fn parse_revision(v: &str) -> Result<i64, RevisionError> {
    v.parse::<i64>().map_err(|source| RevisionError {
        value: v.to_owned(),
        source,
    })
}

/// `SetDeploymentRevision`: sets the Deployment's revision annotation; whether it changed.
pub fn set_deployment_revision(d: &mut Deployment, revision: &str) -> bool {
    let annotations = d.metadata.annotations.get_or_insert_default();
    if annotations.get(REVISION_ANNOTATION).map(String::as_str) == Some(revision) {
        return false;
    }
    annotations.insert(REVISION_ANNOTATION.to_owned(), revision.to_owned());
    true
}

/// Revisions of `rss` that parse; the others are logged and skipped, as upstream does.
fn parsed_revisions<R: Borrow<ReplicaSet>>(rss: &[R]) -> impl Iterator<Item = i64> + '_ {
    rss.iter().filter_map(|rs| match revision(rs.borrow()) {
        Ok(v) => Some(v),
        Err(err) => {
            tracing::debug!(
                replica_set = rs.borrow().metadata.name.as_deref().unwrap_or(""),
                %err,
                "couldn't parse revision for replica set, skipping it when reconciling revisions"
            );
            None
        }
    })
}

/// `MaxRevision`: the highest parsable revision among `rss` (0 if none).
pub fn max_revision<R: Borrow<ReplicaSet>>(rss: &[R]) -> i64 {
    parsed_revisions(rss).fold(0, i64::max)
}

/// `LastRevision`: the second-highest revision (the one before the current). Two ReplicaSets
/// sharing the top revision make it the answer, as upstream's scan does.
pub fn last_revision<R: Borrow<ReplicaSet>>(rss: &[R]) -> i64 {
    let (mut max, mut sec_max) = (0_i64, 0_i64);
    for v in parsed_revisions(rss) {
        if v >= max {
            sec_max = max;
            max = v;
        } else if v > sec_max {
            sec_max = v;
        }
    }
    sec_max
}

/// Whether `key` is one of the annotations never copied between Deployment and ReplicaSet.
pub fn skip_copy_annotation(key: &str) -> bool {
    ANNOTATIONS_TO_SKIP.contains(&key)
}

/// Copies the Deployment's copyable annotations onto the ReplicaSet (ReplicaSet-only
/// annotations are kept); whether anything changed.
fn copy_deployment_annotations_to_replica_set(d: &Deployment, rs: &mut ReplicaSet) -> bool {
    let rs_annotations = rs.metadata.annotations.get_or_insert_default();
    let mut changed = false;
    for (k, v) in d.metadata.annotations.iter().flatten() {
        if skip_copy_annotation(k) || rs_annotations.get(k) == Some(v) {
            continue;
        }
        rs_annotations.insert(k.clone(), v.clone());
        changed = true;
    }
    changed
}

/// `SetNewReplicaSetAnnotations`: brings the new ReplicaSet's annotations up to date — copies the
/// Deployment's annotations, raises its revision to `new_revision` (never lowers it), keeps the
/// revision it held before in `revision-history` (at most `rev_history_limit_in_chars`
/// characters, oldest entries dropped first) and, for a ReplicaSet about to be created
/// (`!exists`), records the replica annotations. Returns whether the annotations changed.
///
/// As upstream, an unparsable current or new revision makes it return `false` even when the
/// copy step already changed something.
pub fn set_new_replica_set_annotations(
    d: &Deployment,
    new_rs: &mut ReplicaSet,
    new_revision: &str,
    exists: bool,
    rev_history_limit_in_chars: usize,
) -> bool {
    let mut changed = copy_deployment_annotations_to_replica_set(d, new_rs);
    let annotations = new_rs.metadata.annotations.get_or_insert_default();
    let old_revision = annotations.get(REVISION_ANNOTATION).cloned();
    let old_revision_int = match old_revision.as_deref().map(parse_revision) {
        None => 0,
        Some(Ok(v)) => v,
        // An empty value counts as 0; anything else unparsable stops here.
        Some(Err(_)) if old_revision.as_deref() == Some("") => 0,
        Some(Err(err)) => {
            tracing::info!(%err, "updating replica set revision: old revision is not an integer");
            return false;
        }
    };
    let new_revision_int = match parse_revision(new_revision) {
        Ok(v) => v,
        Err(err) => {
            tracing::info!(%err, "updating replica set revision: new revision is not an integer");
            return false;
        }
    };
    if old_revision_int < new_revision_int {
        annotations.insert(REVISION_ANNOTATION.to_owned(), new_revision.to_owned());
        changed = true;
    }
    // The ReplicaSet already had a revision and got a newer one: it is being re-used (rollback);
    // remember the old revision.
    if let Some(old) = old_revision.filter(|_| old_revision_int < new_revision_int) {
        append_revision_history(annotations, &old, rev_history_limit_in_chars);
    }
    if !exists {
        let desired = deployment_replicas(d);
        if set_replicas_annotations(new_rs, desired, desired.wrapping_add(max_surge(d))) {
            changed = true;
        }
    }
    changed
}

/// Appends `old` to the comma-separated revision history, dropping the oldest entries until the
/// result fits in `limit` characters (not appending at all if even that fails).
fn append_revision_history(annotations: &mut BTreeMap<String, String>, old: &str, limit: usize) {
    let history = annotations
        .get(REVISION_HISTORY_ANNOTATION)
        .cloned()
        .unwrap_or_default();
    let entries: Vec<&str> = history.split(',').collect();
    if entries[0].is_empty() {
        annotations.insert(REVISION_HISTORY_ANNOTATION.to_owned(), old.to_owned());
        return;
    }
    let mut total_len = history.len() + old.len() + 1;
    let mut start = 0;
    while total_len > limit && start < entries.len() {
        total_len -= entries[start].len() + 1;
        start += 1;
    }
    if total_len <= limit {
        let mut kept = entries[start..].to_vec();
        kept.push(old);
        annotations.insert(REVISION_HISTORY_ANNOTATION.to_owned(), kept.join(","));
    } else {
        tracing::info!(
            revision_history_limit = limit,
            "not appending revision: revision history length limit reached"
        );
    }
}

/// `SetDeploymentAnnotationsTo`: on rollback, the Deployment's annotations become its own
/// skip-listed ones plus the rollback target's copyable ones.
pub fn set_deployment_annotations_to(d: &mut Deployment, rollback_to_rs: &ReplicaSet) {
    let mut annotations: BTreeMap<String, String> = d
        .metadata
        .annotations
        .iter()
        .flatten()
        .filter(|(k, _)| skip_copy_annotation(k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    for (k, v) in rollback_to_rs.metadata.annotations.iter().flatten() {
        if !skip_copy_annotation(k) {
            annotations.insert(k.clone(), v.clone());
        }
    }
    d.metadata.annotations = Some(annotations);
}

/// `getNonNegativeInt32FromAnnotation`: `Ok(None)` when the annotation is missing, the value when
/// it is an unsigned decimal ≤ `i32::MAX` (Go's `ParseUint(v, 10, 32)` plus a range check).
pub fn get_non_negative_int32_from_annotation(
    rs: &ReplicaSet,
    key: &str,
) -> Result<Option<i32>, AnnotationIntError> {
    let Some(value) = annotation(rs.metadata.annotations.as_ref(), key) else {
        return Ok(None);
    };
    if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
        return Err(AnnotationIntError::Syntax {
            key: key.to_owned(),
            value: value.to_owned(),
        });
    }
    match value
        .parse::<u64>()
        .ok()
        .and_then(|v| i32::try_from(v).ok())
    {
        Some(v) => Ok(Some(v)),
        None => Err(AnnotationIntError::Range {
            key: key.to_owned(),
            value: value.to_owned(),
        }),
    }
}

/// `getNonNegativeInt32FromAnnotationVerbose`: like
/// [`get_non_negative_int32_from_annotation`], invalid values logged and read as missing.
pub fn get_non_negative_int32_from_annotation_verbose(rs: &ReplicaSet, key: &str) -> Option<i32> {
    get_non_negative_int32_from_annotation(rs, key).unwrap_or_else(|err| {
        tracing::debug!(
            replica_set = rs.metadata.name.as_deref().unwrap_or(""),
            %err,
            "could not convert the annotation value for the replica set"
        );
        None
    })
}

/// `GetDesiredReplicasAnnotation`: the ReplicaSet's `desired-replicas`, if present and valid.
pub fn get_desired_replicas_annotation(rs: &ReplicaSet) -> Option<i32> {
    get_non_negative_int32_from_annotation_verbose(rs, DESIRED_REPLICAS_ANNOTATION)
}

/// `getMaxReplicasAnnotation`: the ReplicaSet's `max-replicas`, if present and valid.
pub fn get_max_replicas_annotation(rs: &ReplicaSet) -> Option<i32> {
    get_non_negative_int32_from_annotation_verbose(rs, MAX_REPLICAS_ANNOTATION)
}

/// `SetReplicasAnnotations`: records `desired` and `max` on the ReplicaSet; whether it changed.
pub fn set_replicas_annotations(rs: &mut ReplicaSet, desired: i32, max: i32) -> bool {
    let annotations = rs.metadata.annotations.get_or_insert_default();
    let mut changed = false;
    for (key, value) in [
        (DESIRED_REPLICAS_ANNOTATION, desired.to_string()),
        (MAX_REPLICAS_ANNOTATION, max.to_string()),
    ] {
        if annotations.get(key) != Some(&value) {
            annotations.insert(key.to_owned(), value);
            changed = true;
        }
    }
    changed
}

/// `ReplicasAnnotationsNeedUpdate`: whether [`set_replicas_annotations`] would change anything
/// (always true without an annotation map).
pub fn replicas_annotations_need_update(rs: &ReplicaSet, desired: i32, max: i32) -> bool {
    let Some(annotations) = rs.metadata.annotations.as_ref() else {
        return true;
    };
    annotations.get(DESIRED_REPLICAS_ANNOTATION) != Some(&desired.to_string())
        || annotations.get(MAX_REPLICAS_ANNOTATION) != Some(&max.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::util::replicas::is_saturated;
    use crate::util::testing::{generate_deployment, generate_rs, map, set_rs_replicas};
    use k8s_openapi::api::apps::v1::{ReplicaSetSpec, ReplicaSetStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

    #[test]
    fn get_non_negative_int32_from_annotation_table() {
        let max_i32 = i32::MAX.to_string();
        let max_i32_plus_1 = (i32::MAX as u64 + 1).to_string();
        let max_u32_plus_1 = (u32::MAX as u64 + 1).to_string();
        // (name, annotations, value, valid, error substring)
        type Case<'a> = (
            &'a str,
            Option<BTreeMap<String, String>>,
            i32,
            bool,
            &'a str,
        );
        let cases: Vec<Case<'_>> = vec![
            ("invalid empty", None, 0, false, ""),
            (
                "invalid",
                Some(map(&[("test", "invalid"), ("foo", "2")])),
                0,
                false,
                "invalid syntax",
            ),
            (
                "invalid negative ",
                Some(map(&[("test", "-1"), ("foo", "2")])),
                0,
                false,
                "invalid syntax",
            ),
            (
                "valid zero",
                Some(map(&[("test", "0"), ("foo", "2")])),
                0,
                true,
                "",
            ),
            (
                "valid",
                Some(map(&[("test", "13"), ("foo", "2")])),
                13,
                true,
                "",
            ),
            (
                "valid max",
                Some(map(&[("test", &max_i32), ("foo", "2")])),
                i32::MAX,
                true,
                "",
            ),
            (
                "invalid max out of range",
                Some(map(&[("test", &max_i32_plus_1), ("foo", "2")])),
                0,
                false,
                "out of range",
            ),
            (
                "invalid max out of range 2",
                Some(map(&[("test", &max_u32_plus_1), ("foo", "2")])),
                0,
                false,
                "out of range",
            ),
        ];
        for (name, annotations, want_value, want_valid, want_err) in cases {
            let mut rs = generate_rs(&generate_deployment("nginx"));
            rs.metadata.annotations = annotations;
            let got = get_non_negative_int32_from_annotation(&rs, "test");
            let (value, valid) = match &got {
                Ok(Some(v)) => (*v, true),
                _ => (0, false),
            };
            assert_eq!((value, valid), (want_value, want_valid), "{name}");
            match (&got, want_err) {
                (Err(err), want) => assert!(
                    !want.is_empty() && err.to_string().contains(want),
                    "{name}: unexpected error {err}, want {want:?}"
                ),
                (Ok(_), want) => assert!(want.is_empty(), "{name}: expected error {want}"),
            }
            let verbose = get_non_negative_int32_from_annotation_verbose(&rs, "test");
            assert_eq!(
                (verbose.unwrap_or(0), verbose.is_some()),
                (want_value, want_valid),
                "{name} (verbose)"
            );
        }
    }

    #[test]
    fn annotation_utils() {
        let mut d = generate_deployment("nginx");
        let mut rs = generate_rs(&d);
        d.metadata
            .annotations
            .get_or_insert_default()
            .insert(REVISION_ANNOTATION.to_owned(), "1".to_owned());

        // SetNewReplicaSetAnnotations: revisions 11..=20, history limited to 5 characters.
        for i in 10..20 {
            let next = (i + 1).to_string();
            set_new_replica_set_annotations(&d, &mut rs, &next, true, 5);
            let annotations = rs.metadata.annotations.as_ref().unwrap();
            if i >= 12 {
                assert_eq!(
                    annotations.get(REVISION_HISTORY_ANNOTATION),
                    Some(&format!("{},{}", i - 1, i)),
                    "revision history at {i}"
                );
            }
            assert_eq!(annotations.get(REVISION_ANNOTATION), Some(&next));
        }

        // SetReplicasAnnotations.
        assert!(set_replicas_annotations(&mut rs, 10, 11));
        let annotations = rs.metadata.annotations.as_ref().unwrap();
        assert_eq!(annotations[DESIRED_REPLICAS_ANNOTATION], "10");
        assert_eq!(annotations[MAX_REPLICAS_ANNOTATION], "11");

        // IsSaturated.
        rs.metadata
            .annotations
            .as_mut()
            .unwrap()
            .insert(DESIRED_REPLICAS_ANNOTATION.to_owned(), "1".to_owned());
        rs.status = Some(ReplicaSetStatus {
            available_replicas: Some(1),
            ..Default::default()
        });
        set_rs_replicas(&mut rs, 1);
        assert!(is_saturated(&d, Some(&rs)));
    }

    #[test]
    fn replicas_annotations_need_update_table() {
        let rs = |annotations: Option<BTreeMap<String, String>>| ReplicaSet {
            metadata: ObjectMeta {
                name: Some("hello".into()),
                namespace: Some("test".into()),
                annotations,
                ..Default::default()
            },
            spec: ReplicaSetSpec {
                selector: LabelSelector {
                    match_labels: Some(map(&[("foo", "bar")])),
                    ..Default::default()
                },
                ..Default::default()
            },
            status: None,
        };
        let cases = [
            ("test Annotations nil", rs(None), true),
            (
                "test desiredReplicas update",
                rs(Some(map(&[
                    (DESIRED_REPLICAS_ANNOTATION, "8"),
                    (MAX_REPLICAS_ANNOTATION, "20"),
                ]))),
                true,
            ),
            (
                "test maxReplicas update",
                rs(Some(map(&[
                    (DESIRED_REPLICAS_ANNOTATION, "10"),
                    (MAX_REPLICAS_ANNOTATION, "16"),
                ]))),
                true,
            ),
            (
                "test needn't update",
                rs(Some(map(&[
                    (DESIRED_REPLICAS_ANNOTATION, "10"),
                    (MAX_REPLICAS_ANNOTATION, "20"),
                ]))),
                false,
            ),
        ];
        for (name, rs, want) in cases {
            assert_eq!(
                replicas_annotations_need_update(&rs, 10, 20),
                want,
                "{name}"
            );
        }
    }

    // Beyond upstream's tables: the edges of the helpers above.

    #[test]
    fn revision_missing_is_zero_and_garbage_is_an_error() {
        let mut rs = generate_rs(&generate_deployment("nginx"));
        assert_eq!(revision(&rs), Ok(0));
        rs.metadata.annotations = Some(map(&[(REVISION_ANNOTATION, "x1")]));
        let err = revision(&rs).unwrap_err();
        assert_eq!(err.value, "x1");
        assert!(err.to_string().contains("\"x1\""), "{err}");
    }

    #[test]
    fn max_and_last_revision_skip_unparsable() {
        let d = generate_deployment("nginx");
        let with_rev = |rev: &str| {
            let mut rs = generate_rs(&d);
            rs.metadata.annotations = Some(map(&[(REVISION_ANNOTATION, rev)]));
            rs
        };
        let rss = vec![with_rev("3"), with_rev("bad"), with_rev("7"), with_rev("5")];
        assert_eq!(max_revision(&rss), 7);
        assert_eq!(last_revision(&rss), 5);
        // Two ReplicaSets sharing the top revision: the "second max" is that revision.
        let twins = vec![with_rev("4"), with_rev("4")];
        assert_eq!(last_revision(&twins), 4);
        assert_eq!(max_revision::<ReplicaSet>(&[]), 0);
    }

    #[test]
    fn new_rs_annotations_copy_skip_list_and_replica_annotations() {
        let mut d = generate_deployment("nginx");
        d.metadata.annotations = Some(map(&[
            ("team", "a"),
            (REVISION_ANNOTATION, "9"),
            (
                super::super::constants::LAST_APPLIED_CONFIG_ANNOTATION,
                "{}",
            ),
        ]));
        let mut rs = generate_rs(&d);
        rs.metadata.annotations = Some(map(&[("rs-only", "x")]));
        assert!(set_new_replica_set_annotations(
            &d, &mut rs, "2", false, 100
        ));
        let got = rs.metadata.annotations.clone().unwrap();
        // Non-rolling strategy: max surge 0, so max-replicas == desired.
        let want = map(&[
            ("team", "a"),
            ("rs-only", "x"),
            (REVISION_ANNOTATION, "2"),
            (DESIRED_REPLICAS_ANNOTATION, "1"),
            (MAX_REPLICAS_ANNOTATION, "1"),
        ]);
        assert_eq!(got, want);
        // Nothing left to change; a lower revision is never written.
        assert!(!set_new_replica_set_annotations(
            &d, &mut rs, "1", false, 100
        ));
        // An unparsable new revision reports no change even though a copy happened.
        d.metadata
            .annotations
            .as_mut()
            .unwrap()
            .insert("team".into(), "b".into());
        assert!(!set_new_replica_set_annotations(
            &d, &mut rs, "x", true, 100
        ));
        assert_eq!(rs.metadata.annotations.as_ref().unwrap()["team"], "b");
    }

    #[test]
    fn deployment_annotations_follow_rollback_target() {
        let mut d = generate_deployment("nginx");
        d.metadata.annotations = Some(map(&[("team", "a"), (REVISION_ANNOTATION, "4")]));
        let mut rs = generate_rs(&d);
        rs.metadata.annotations = Some(map(&[("image", "old"), (REVISION_ANNOTATION, "2")]));
        set_deployment_annotations_to(&mut d, &rs);
        assert_eq!(
            d.metadata.annotations.unwrap(),
            map(&[("image", "old"), (REVISION_ANNOTATION, "4")])
        );
    }

    #[test]
    fn deployment_revision_set_once() {
        let mut d = generate_deployment("nginx");
        d.metadata.annotations = None;
        assert!(set_deployment_revision(&mut d, "3"));
        assert!(!set_deployment_revision(&mut d, "3"));
        assert_eq!(revision(&d), Ok(3));
    }
}

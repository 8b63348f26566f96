//! Decisions shared by every strategy (upstream's sync.go): the [`ScaleAction`] that all
//! strategies emit instead of calling `scaleReplicaSet`, the Deployment status computed from its
//! ReplicaSets ([`calculate_status`]), and proportional scaling of a resized Deployment
//! ([`scale`]).
//!
//! Nothing here writes: the controller applies a [`ScaleAction`] with one full ReplicaSet Update
//! (stamping the desired/max replica annotations, as `scaleReplicaSet` does) and records the
//! `ScalingReplicaSet` event when the size changed.

use std::borrow::Borrow;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentStatus, ReplicaSet};
use k8s_openapi::jiff::Timestamp;

use crate::util::constants::{
    CONDITION_FALSE, CONDITION_TRUE, DEPLOYMENT_AVAILABLE, MINIMUM_REPLICAS_AVAILABLE,
    MINIMUM_REPLICAS_UNAVAILABLE,
};
use crate::util::fields::{deployment_replicas, rs_replicas};
use crate::util::{
    filter_active_replica_sets, find_active_or_latest, get_actual_replica_count_for_replica_sets,
    get_available_replica_count_for_replica_sets, get_ready_replica_count_for_replica_sets,
    get_replica_count_for_replica_sets, get_replica_set_proportion,
    get_terminating_replica_count_for_replica_sets, is_rolling_update, is_saturated, max_surge,
    max_unavailable, new_deployment_condition, set_deployment_condition,
};

/// One intended `scaleReplicaSet(rs, to, ..)` call: set ReplicaSet `name`'s `spec.replicas` from
/// `from` to `to`.
///
/// The applier writes when the size differs **or** the replica annotations need refreshing
/// (`ReplicasAnnotationsNeedUpdate`); strategies only emit actions whose size changes, while
/// [`scale`] emits one per active ReplicaSet (upstream's `forceUpdate = true`). Several actions
/// may name the same ReplicaSet (e.g. a cleanup then a scale-down): apply them in order, each on
/// the result of the previous write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScaleAction {
    /// The ReplicaSet's name (its namespace is the Deployment's).
    pub name: String,
    /// `spec.replicas` the decision was made from.
    pub from: i32,
    /// `spec.replicas` to write.
    pub to: i32,
}

impl ScaleAction {
    /// Scales `rs` from its current size to `to`.
    pub fn new(rs: &ReplicaSet, to: i32) -> Self {
        Self {
            name: rs.metadata.name.clone().unwrap_or_default(),
            from: rs_replicas(rs),
            to,
        }
    }

    /// `"up"` or `"down"`, as in the `ScalingReplicaSet` event ("Scaled up replica set X from A
    /// to B"); `None` when the size does not change.
    pub fn direction(&self) -> Option<&'static str> {
        match self.to.cmp(&self.from) {
            std::cmp::Ordering::Greater => Some("up"),
            std::cmp::Ordering::Less => Some("down"),
            std::cmp::Ordering::Equal => None,
        }
    }
}

/// Go's `omitempty` for an `int32` status field: 0 is absent.
fn non_zero<T: Default + PartialEq>(n: T) -> Option<T> {
    (n != T::default()).then_some(n)
}

/// `calculateStatus`: the Deployment status its ReplicaSets describe, with the Available
/// condition updated (other conditions are kept as they are).
///
/// Zero counters are `None`, as the API server returns them (Go's `omitempty`), so the result
/// compares equal to an unchanged status read back from the API.
pub fn calculate_status<R: Borrow<ReplicaSet>>(
    all_rss: &[R],
    new_rs: Option<&ReplicaSet>,
    d: &Deployment,
    now: Timestamp,
) -> DeploymentStatus {
    let available = get_available_replica_count_for_replica_sets(all_rss);
    let total = get_replica_count_for_replica_sets(all_rss);
    let unavailable = (total - available).max(0);
    let current = d.status.as_ref();
    let mut status = DeploymentStatus {
        observed_generation: non_zero(d.metadata.generation.unwrap_or(0)),
        replicas: non_zero(get_actual_replica_count_for_replica_sets(all_rss)),
        updated_replicas: non_zero(
            new_rs.map_or(0, |rs| get_actual_replica_count_for_replica_sets(&[rs])),
        ),
        ready_replicas: non_zero(get_ready_replica_count_for_replica_sets(all_rss)),
        available_replicas: non_zero(available),
        unavailable_replicas: non_zero(unavailable),
        collision_count: current.and_then(|s| s.collision_count),
        terminating_replicas: get_terminating_replica_count_for_replica_sets(all_rss),
        conditions: current
            .and_then(|s| s.conditions.clone())
            .filter(|c| !c.is_empty()),
    };
    let condition = if available >= deployment_replicas(d) - max_unavailable(d) {
        new_deployment_condition(
            DEPLOYMENT_AVAILABLE,
            CONDITION_TRUE,
            MINIMUM_REPLICAS_AVAILABLE,
            "Deployment has minimum availability.",
            now,
        )
    } else {
        new_deployment_condition(
            DEPLOYMENT_AVAILABLE,
            CONDITION_FALSE,
            MINIMUM_REPLICAS_UNAVAILABLE,
            "Deployment does not have minimum availability.",
            now,
        )
    };
    set_deployment_condition(&mut status, condition);
    status
}

/// `scale`: the writes that bring a resized Deployment's ReplicaSets to its new size.
///
/// * One active (or the latest) ReplicaSet: resize it to `spec.replicas` (nothing if it already
///   has that size).
/// * A saturated new ReplicaSet: every active old ReplicaSet goes to 0.
/// * Rolling update with several active ReplicaSets: spread `replicas + maxSurge − Σ sizes` over
///   them in proportion to their size (largest first; ties newest first when growing, oldest
///   first when shrinking), the rounding leftover going to the first one (never below 0). Every
///   active ReplicaSet gets an action, even an unchanged one (`forceUpdate`), so its annotations
///   are refreshed; the applier stops at the first failed write.
/// * Recreate with several active ReplicaSets: nothing.
pub fn scale<R: Borrow<ReplicaSet>>(
    d: &Deployment,
    new_rs: Option<&ReplicaSet>,
    old_rss: &[R],
) -> Vec<ScaleAction> {
    let replicas = deployment_replicas(d);
    let old_rss: Vec<&ReplicaSet> = old_rss.iter().map(Borrow::borrow).collect();
    let mut sorted_old = old_rss.clone();
    if let Some(rs) = find_active_or_latest(new_rs.as_ref(), &mut sorted_old) {
        if rs_replicas(rs) == replicas {
            return Vec::new();
        }
        return vec![ScaleAction::new(rs, replicas)];
    }
    if is_saturated(d, new_rs) {
        return filter_active_replica_sets(&old_rss)
            .iter()
            .map(|rs| ScaleAction::new(rs, 0))
            .collect();
    }
    if !is_rolling_update(d) {
        return Vec::new();
    }
    let mut all = old_rss;
    all.extend(new_rs);
    let mut all = filter_active_replica_sets(&all);
    let sum = get_replica_count_for_replica_sets(&all);
    let allowed = if replicas > 0 {
        replicas + max_surge(d)
    } else {
        0
    };
    let to_add = allowed - sum;
    if to_add > 0 {
        crate::util::sort::sort_by_size_newer(&mut all);
    } else {
        crate::util::sort::sort_by_size_older(&mut all);
    }
    let mut added = 0;
    let mut sizes: Vec<i32> = all
        .iter()
        .map(|rs| {
            let size = rs_replicas(rs);
            if to_add == 0 {
                return size;
            }
            let proportion = get_replica_set_proportion(Some(rs), d, to_add, added);
            added += proportion;
            size + proportion
        })
        .collect();
    if let Some(first) = sizes.first_mut()
        && to_add != 0
    {
        *first = (*first + to_add - added).max(0);
    }
    all.iter()
        .zip(sizes.drain(..))
        .map(|(rs, size)| ScaleAction::new(rs, size))
        .collect()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

    use super::*;
    use crate::fixtures::{map, new_deployment, rs, ts};
    use crate::util::set_replicas_annotations;
    use kctrl_client::versioned::Versioned;

    fn d(replicas: i32, surge: Option<i32>, unavailable: Option<i32>) -> Deployment {
        new_deployment(
            "foo",
            replicas,
            None,
            surge.map(IntOrString::Int),
            unavailable.map(IntOrString::Int),
            None,
        )
    }

    struct Case {
        name: &'static str,
        deployment: Deployment,
        old_deployment: Deployment,
        new_rs: Option<ReplicaSet>,
        old_rss: Vec<ReplicaSet>,
        expected_new: Option<i32>,
        expected_old: Vec<i32>,
        wasnt_updated: &'static [&'static str],
        desired_replicas_annotations: &'static [(&'static str, i32)],
    }

    #[test]
    fn scale() {
        let new_ts = Some(ts("2016-05-20T02:00:00Z"));
        let old_ts = Some(ts("2016-05-20T01:00:00Z"));
        let older_ts = Some(ts("2016-05-20T00:00:00Z"));
        let new = |name: &str, n: i32| Some(rs(name, n, None, new_ts));
        let old = |name: &str, n: i32| rs(name, n, None, old_ts);
        let older = |name: &str, n: i32| rs(name, n, None, older_ts);
        let case =
            |name, deployment, old_deployment, new_rs, old_rss, expected_new, expected_old| Case {
                name,
                deployment,
                old_deployment,
                new_rs,
                old_rss,
                expected_new,
                expected_old,
                wasnt_updated: &[],
                desired_replicas_annotations: &[],
            };
        let mut updated_template =
            new_deployment("foo", 14, None, None, None, Some(map(&[("foo", "bar")])));
        updated_template
            .spec
            .get_mut()
            .template
            .metadata
            .as_mut()
            .unwrap()
            .labels
            .as_mut()
            .unwrap()
            .insert("another".into(), "label".into());
        let mut broken = rs("foo-v2", 2, None, new_ts);
        broken.status.get_or_insert_default().available_replicas = Some(0);
        let cases = vec![
            case(
                "normal scaling event: 10 -> 12",
                d(12, None, None),
                d(10, None, None),
                new("foo-v1", 10),
                vec![],
                Some(12),
                vec![],
            ),
            case(
                "normal scaling event: 10 -> 5",
                d(5, None, None),
                d(10, None, None),
                new("foo-v1", 10),
                vec![],
                Some(5),
                vec![],
            ),
            case(
                "proportional scaling: 5 -> 10",
                d(10, None, None),
                d(5, None, None),
                new("foo-v2", 2),
                vec![old("foo-v1", 3)],
                Some(4),
                vec![6],
            ),
            case(
                "proportional scaling: 5 -> 3",
                d(3, None, None),
                d(5, None, None),
                new("foo-v2", 2),
                vec![old("foo-v1", 3)],
                Some(1),
                vec![2],
            ),
            case(
                "proportional scaling: 9 -> 4",
                d(4, None, None),
                d(9, None, None),
                new("foo-v2", 8),
                vec![old("foo-v1", 1)],
                Some(4),
                vec![0],
            ),
            case(
                "proportional scaling: 7 -> 10",
                d(10, None, None),
                d(7, None, None),
                new("foo-v3", 2),
                vec![old("foo-v2", 3), older("foo-v1", 2)],
                Some(3),
                vec![4, 3],
            ),
            case(
                "proportional scaling: 13 -> 8",
                d(8, None, None),
                d(13, None, None),
                new("foo-v3", 2),
                vec![old("foo-v2", 8), older("foo-v1", 3)],
                Some(1),
                vec![5, 2],
            ),
            case(
                "leftover distribution: 3 -> 4",
                d(4, None, None),
                d(3, None, None),
                new("foo-v3", 1),
                vec![old("foo-v2", 1), older("foo-v1", 1)],
                Some(2),
                vec![1, 1],
            ),
            case(
                "leftover distribution: 3 -> 2",
                d(2, None, None),
                d(3, None, None),
                new("foo-v3", 1),
                vec![old("foo-v2", 1), older("foo-v1", 1)],
                Some(1),
                vec![1, 0],
            ),
            case(
                "proportional scaling (no new rs): 4 -> 5",
                d(5, None, None),
                d(4, None, None),
                None,
                vec![old("foo-v2", 2), older("foo-v1", 2)],
                None,
                vec![3, 2],
            ),
            case(
                "proportional scaling: 6 -> 0",
                d(0, None, None),
                d(6, None, None),
                new("foo-v3", 3),
                vec![old("foo-v2", 2), older("foo-v1", 1)],
                Some(0),
                vec![0, 0],
            ),
            Case {
                wasnt_updated: &["foo-v2", "foo-v1"],
                ..case(
                    "proportional scaling: 0 -> 6",
                    d(6, None, None),
                    d(6, None, None),
                    new("foo-v3", 0),
                    vec![old("foo-v2", 0), older("foo-v1", 0)],
                    Some(6),
                    vec![0, 0],
                )
            },
            Case {
                wasnt_updated: &["foo-v3", "foo-v1"],
                desired_replicas_annotations: &[("foo-v2", 3)],
                ..case(
                    "failed rs update",
                    d(5, None, None),
                    d(5, None, None),
                    new("foo-v3", 2),
                    vec![old("foo-v2", 1), older("foo-v1", 1)],
                    Some(2),
                    vec![2, 1],
                )
            },
            case(
                "deployment with surge pods",
                d(20, Some(2), None),
                d(10, Some(2), None),
                new("foo-v2", 6),
                vec![old("foo-v1", 6)],
                Some(11),
                vec![11],
            ),
            case(
                "change both surge and size",
                d(50, Some(6), None),
                d(10, Some(3), None),
                new("foo-v2", 5),
                vec![old("foo-v1", 8)],
                Some(22),
                vec![34],
            ),
            case(
                "change both size and template",
                updated_template,
                new_deployment("foo", 10, None, None, None, Some(map(&[("foo", "bar")]))),
                None,
                vec![rs("foo-v2", 7, None, new_ts), old("foo-v1", 3)],
                None,
                vec![10, 4],
            ),
            case(
                "saturated but broken new replica set does not affect old pods",
                d(2, Some(1), Some(1)),
                d(2, Some(1), Some(1)),
                Some(broken),
                vec![old("foo-v1", 1)],
                Some(2),
                vec![1],
            ),
        ];
        assert_eq!(cases.len(), 17);
        for mut c in cases {
            let annotations: BTreeMap<&str, i32> =
                c.desired_replicas_annotations.iter().copied().collect();
            let old_replicas = deployment_replicas(&c.old_deployment);
            let old_surge = max_surge(&c.old_deployment);
            for rs in c.new_rs.iter_mut().chain(c.old_rss.iter_mut()) {
                let name = rs.metadata.name.clone().unwrap();
                let desired = annotations
                    .get(name.as_str())
                    .copied()
                    .unwrap_or(old_replicas);
                set_replicas_annotations(rs, desired, desired + old_surge);
            }
            let actions = super::scale(&c.deployment, c.new_rs.as_ref(), &c.old_rss);
            let mut sizes: BTreeMap<String, i32> = c
                .new_rs
                .iter()
                .chain(&c.old_rss)
                .map(|rs| (rs.metadata.name.clone().unwrap(), rs_replicas(rs)))
                .collect();
            for a in &actions {
                if !c.wasnt_updated.contains(&a.name.as_str()) {
                    sizes.insert(a.name.clone(), a.to);
                }
            }
            if let (Some(expected), Some(new_rs)) = (c.expected_new, &c.new_rs) {
                assert_eq!(
                    sizes[new_rs.metadata.name.as_deref().unwrap()],
                    expected,
                    "{}: new",
                    c.name
                );
            }
            assert_eq!(c.expected_old.len(), c.old_rss.len(), "{}", c.name);
            for (rs, expected) in c.old_rss.iter().zip(&c.expected_old) {
                let name = rs.metadata.name.as_deref().unwrap();
                assert_eq!(
                    sizes[name], *expected,
                    "{}: old {name} ({actions:?})",
                    c.name
                );
            }
        }
    }

    #[test]
    fn scale_forces_every_active_replica_set() {
        // Proportional scaling writes unchanged ReplicaSets too (annotation refresh).
        let mut new_rs = rs("foo-v3", 1, None, Some(ts("2016-05-20T02:00:00Z")));
        let mut v2 = rs("foo-v2", 1, None, Some(ts("2016-05-20T01:00:00Z")));
        let mut v1 = rs("foo-v1", 1, None, Some(ts("2016-05-20T00:00:00Z")));
        for rs in [&mut new_rs, &mut v2, &mut v1] {
            set_replicas_annotations(rs, 3, 3);
        }
        let actions = super::scale(&d(4, None, None), Some(&new_rs), &[v2, v1]);
        let got: Vec<(&str, i32, i32)> = actions
            .iter()
            .map(|a| (a.name.as_str(), a.from, a.to))
            .collect();
        assert_eq!(got, [("foo-v3", 1, 2), ("foo-v2", 1, 1), ("foo-v1", 1, 1)]);
        assert_eq!(actions[0].direction(), Some("up"));
        assert_eq!(actions[1].direction(), None);
    }

    #[test]
    fn calculate_status_counts_and_availability() {
        let now = ts("2017-02-15T18:49:00Z");
        let mut deployment = d(3, Some(1), Some(1));
        deployment.metadata.generation = Some(4);
        let mut a = rs("a", 2, None, None);
        a.status = Some(k8s_openapi::api::apps::v1::ReplicaSetStatus {
            replicas: 2,
            ready_replicas: Some(2),
            available_replicas: Some(1),
            ..Default::default()
        });
        let b = rs("b", 1, None, None);
        let status = calculate_status(&[a.clone(), b], Some(&a), &deployment, now);
        assert_eq!(status.observed_generation, Some(4));
        assert_eq!(status.replicas, Some(2));
        assert_eq!(status.updated_replicas, Some(2));
        assert_eq!(status.ready_replicas, Some(2));
        assert_eq!(status.available_replicas, Some(1));
        assert_eq!(status.unavailable_replicas, Some(2));
        let available =
            crate::util::get_deployment_condition(&status, DEPLOYMENT_AVAILABLE).unwrap();
        // 1 available < 3 - 1.
        assert_eq!(
            available.reason.as_deref(),
            Some(MINIMUM_REPLICAS_UNAVAILABLE)
        );
    }
}

//! The RollingUpdate strategy's decisions (upstream's rolling.go), as pure functions returning
//! the [`ScaleAction`]s to perform, so the upstream tables drive them without an API.
//!
//! A pass moves in one direction only: if the new ReplicaSet must change size
//! ([`reconcile_new_replica_set`]) that is the whole pass; otherwise old ReplicaSets shrink
//! ([`reconcile_old_replica_sets`]): unhealthy replicas first, then healthy ones as far as
//! `maxUnavailable` allows. [`plan_rolling`] encodes that choice.

use std::borrow::Borrow;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use kctrl_client::versioned::Versioned;

use crate::sync::ScaleAction;
use crate::util::ReplicaSetRef;
use crate::util::fields::{deployment_replicas, rs_available_replicas, rs_replicas};
use crate::util::sort::sort_by_creation_timestamp;
use crate::util::{
    NewReplicasError, get_available_replica_count_for_replica_sets,
    get_replica_count_for_replica_sets, max_unavailable, new_rs_new_replicas,
};

/// Upstream's guard against a "scale-down" that would grow a ReplicaSet (an old ReplicaSet
/// reporting more available replicas than it wants). Planning stops there.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{context}, got invalid request to scale down {namespace}/{name} {from} -> {to}")]
pub struct InvalidScaleDown {
    /// Which step refused ("when cleaning up unhealthy replicas" / "when scaling down old RS").
    pub context: &'static str,
    /// The ReplicaSet's namespace.
    pub namespace: String,
    /// The ReplicaSet's name.
    pub name: String,
    /// Its current size.
    pub from: i32,
    /// The size the step computed.
    pub to: i32,
}

impl InvalidScaleDown {
    fn new(context: &'static str, rs: &ReplicaSet, to: i32) -> Self {
        Self {
            context,
            namespace: rs.metadata.namespace.clone().unwrap_or_default(),
            name: rs.metadata.name.clone().unwrap_or_default(),
            from: rs_replicas(rs),
            to,
        }
    }
}

/// The scale-downs one step decided, in order, and how many replicas they remove in total.
/// When `error` is set, the step stopped there: the actions before it are still performed (as
/// upstream wrote them before failing) and the step reports failure.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ScaleDown {
    /// The writes, in order.
    pub actions: Vec<ScaleAction>,
    /// Replicas removed by `actions`.
    pub count: i32,
    /// Why planning stopped early, if it did.
    pub error: Option<InvalidScaleDown>,
}

/// `reconcileNewReplicaSet`: the new ReplicaSet shrinks to `spec.replicas` if above it, else
/// grows to what `maxSurge` allows (`NewRSNewReplicas`). `None` when its size is already right.
pub fn reconcile_new_replica_set<R: Borrow<ReplicaSet>>(
    all_rss: &[R],
    new_rs: &ReplicaSet,
    d: &Deployment,
) -> Result<Option<ScaleAction>, NewReplicasError> {
    let replicas = deployment_replicas(d);
    let current = rs_replicas(new_rs);
    let target = if current == replicas {
        return Ok(None);
    } else if current > replicas {
        replicas
    } else {
        new_rs_new_replicas(d, all_rss, new_rs)?
    };
    Ok((target != current).then(|| ScaleAction::new(new_rs, target)))
}

/// What [`reconcile_old_replica_sets`] decided: a cleanup of unhealthy replicas followed by a
/// scale-down of healthy ones.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OldReplicaSetsPlan {
    /// `cleanupUnhealthyReplicas`' writes.
    pub cleanup: ScaleDown,
    /// `scaleDownOldReplicaSetsForRollingUpdate`'s writes (empty when the cleanup failed).
    pub scale_down: ScaleDown,
}

impl OldReplicaSetsPlan {
    /// Every write, in the order upstream performs them.
    pub fn actions(&self) -> impl Iterator<Item = &ScaleAction> {
        self.cleanup.actions.iter().chain(&self.scale_down.actions)
    }

    /// `reconcileOldReplicaSets`' result if every write succeeds: something was scaled down.
    /// Upstream swallows errors of either step and then reports `false`, so a planned
    /// [`InvalidScaleDown`] (or, at apply time, a failed write) means "not scaled", no error.
    pub fn scaled(&self) -> bool {
        self.cleanup.error.is_none()
            && self.scale_down.error.is_none()
            && self.cleanup.count + self.scale_down.count > 0
    }
}

/// `reconcileOldReplicaSets`: how far the old (active) ReplicaSets may shrink without the
/// Deployment dropping below `replicas − maxUnavailable` available pods, counting the new
/// ReplicaSet's not-yet-available pods as already missing.
pub fn reconcile_old_replica_sets<R: ReplicaSetRef>(
    all_rss: &[R],
    old_rss: &[R],
    new_rs: &R,
    d: &Deployment,
) -> OldReplicaSetsPlan {
    if get_replica_count_for_replica_sets(old_rss) == 0 {
        return OldReplicaSetsPlan::default();
    }
    let all_pods = get_replica_count_for_replica_sets(all_rss);
    let min_available = deployment_replicas(d) - max_unavailable(d);
    let new_rs_unavailable = rs_replicas(new_rs.borrow()) - rs_available_replicas(new_rs.borrow());
    let max_scaled_down = all_pods - min_available - new_rs_unavailable;
    if max_scaled_down <= 0 {
        return OldReplicaSetsPlan::default();
    }
    let mut old = old_rss.to_vec();
    let cleanup = cleanup_unhealthy_replicas(&mut old, max_scaled_down);
    if cleanup.error.is_some() {
        return OldReplicaSetsPlan {
            cleanup,
            scale_down: ScaleDown::default(),
        };
    }
    let mut all = old.clone();
    all.push(new_rs.clone());
    let scale_down = scale_down_old_replica_sets_for_rolling_update(&all, &mut old, d);
    OldReplicaSetsPlan {
        cleanup,
        scale_down,
    }
}

/// `cleanupUnhealthyReplicas`: removes up to `max_cleanup_count` unavailable replicas from the
/// old ReplicaSets, oldest first. Sorts `old_rss` oldest first and updates their sizes in place,
/// as upstream replaces them with the written objects.
pub fn cleanup_unhealthy_replicas<R: ReplicaSetRef>(
    old_rss: &mut [R],
    max_cleanup_count: i32,
) -> ScaleDown {
    sort_by_creation_timestamp(old_rss);
    let mut out = ScaleDown::default();
    for shared in old_rss.iter_mut() {
        if out.count >= max_cleanup_count {
            break;
        }
        let rs: &ReplicaSet = (*shared).borrow();
        let size = rs_replicas(rs);
        let available = rs_available_replicas(rs);
        if size == 0 || size == available {
            continue;
        }
        let count = (max_cleanup_count - out.count).min(size - available);
        let to = size - count;
        if to > size {
            out.error = Some(InvalidScaleDown::new(
                "when cleaning up unhealthy replicas",
                rs,
                to,
            ));
            return out;
        }
        out.actions.push(ScaleAction::new(rs, to));
        out.count += count;
        shared.make_mut().spec.get_mut().replicas = Some(to);
    }
    out
}

/// `scaleDownOldReplicaSetsForRollingUpdate`: removes healthy old replicas, oldest ReplicaSet
/// first, while the available pods of `all_rss` stay above `replicas − maxUnavailable`. Sorts
/// `old_rss` oldest first in place.
pub fn scale_down_old_replica_sets_for_rolling_update<R: Borrow<ReplicaSet>>(
    all_rss: &[R],
    old_rss: &mut [R],
    d: &Deployment,
) -> ScaleDown {
    let min_available = deployment_replicas(d) - max_unavailable(d);
    let available = get_available_replica_count_for_replica_sets(all_rss);
    let mut out = ScaleDown::default();
    if available <= min_available {
        return out;
    }
    sort_by_creation_timestamp(old_rss);
    let total = available - min_available;
    for rs in old_rss.iter().map(Borrow::borrow) {
        if out.count >= total {
            break;
        }
        let size = rs_replicas(rs);
        if size == 0 {
            continue;
        }
        let count = size.min(total - out.count);
        let to = size - count;
        if to > size {
            out.error = Some(InvalidScaleDown::new("when scaling down old RS", rs, to));
            return out;
        }
        out.actions.push(ScaleAction::new(rs, to));
        out.count += count;
    }
    out
}

/// One RollingUpdate pass (`rolloutRolling` steps 2–3), given the new ReplicaSet (already
/// created) and the active old ones.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RollingPlan {
    /// Resize the new ReplicaSet, then sync the rollout status: nothing else this pass.
    ScaleNew(ScaleAction),
    /// Perform the old ReplicaSets' writes (possibly none). If [`OldReplicaSetsPlan::scaled`]
    /// and every write succeeded, sync the rollout status; otherwise clean up history when the
    /// Deployment is complete (by its current status), then sync the rollout status.
    ScaleOld(OldReplicaSetsPlan),
}

/// `rolloutRolling`'s choice between growing the new ReplicaSet and shrinking old ones.
/// `all_rss` is every ReplicaSet (old and new), `active_old_rss` the old ones with pods wanted.
pub fn plan_rolling<R: ReplicaSetRef>(
    all_rss: &[R],
    active_old_rss: &[R],
    new_rs: &R,
    d: &Deployment,
) -> Result<RollingPlan, NewReplicasError> {
    if let Some(action) = reconcile_new_replica_set(all_rss, new_rs.borrow(), d)? {
        return Ok(RollingPlan::ScaleNew(action));
    }
    Ok(RollingPlan::ScaleOld(reconcile_old_replica_sets(
        all_rss,
        active_old_rss,
        new_rs,
        d,
    )))
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

    use super::*;
    use crate::fixtures::{map, new_deployment, rs};

    fn int(n: i32) -> IntOrString {
        IntOrString::Int(n)
    }

    fn with_available(mut rs: ReplicaSet, available: i32) -> ReplicaSet {
        rs.status.get_or_insert_default().available_replicas = Some(available);
        rs
    }

    /// (name, deploymentReplicas, maxSurge, oldReplicas, newReplicas, expected new size)
    type NewCase = (&'static str, i32, i32, i32, i32, Option<i32>);

    #[test]
    fn reconcile_new_replica_set() {
        let cases: [NewCase; 5] = [
            (
                "should not scale up when old replica set is fully saturated",
                10,
                0,
                10,
                0,
                None,
            ),
            (
                "should scale up according to the maxSurge when old replica set is fully saturated",
                10,
                2,
                10,
                0,
                Some(2),
            ),
            (
                "should scale up according to the maxSurge",
                10,
                2,
                5,
                0,
                Some(7),
            ),
            (
                "should not scale when maxSurge is fully saturated",
                10,
                2,
                10,
                2,
                None,
            ),
            (
                "should scale down when there are replicas above maxSurge",
                10,
                2,
                2,
                11,
                Some(10),
            ),
        ];
        for (name, replicas, surge, old, new, expected) in cases {
            let new_rs = rs("foo-v2", new, None, None);
            let old_rs = rs("foo-v2", old, None, None);
            let all = [new_rs.clone(), old_rs];
            let d = new_deployment(
                "foo",
                replicas,
                None,
                Some(int(surge)),
                Some(int(0)),
                Some(map(&[("foo", "bar")])),
            );
            let got = super::reconcile_new_replica_set(&all, &new_rs, &d).unwrap();
            assert_eq!(got.map(|a| a.to), expected, "{name}");
        }
    }

    #[test]
    fn reconcile_old_replica_sets() {
        // (deploymentReplicas, maxUnavailable, oldReplicas, newReplicas, readyOld, readyNew,
        //  scaleExpected, expectedOldReplicas)
        let cases = [
            (10, 0, 10, 0, 10, 0, true, 9),
            (10, 2, 10, 0, 10, 0, true, 8),
            // unhealthy replicas of old replica sets are cleaned up
            (10, 2, 10, 0, 8, 0, true, 8),
            // one unhealthy replica cleaned up, one ready pod scaled down
            (10, 2, 10, 0, 9, 0, true, 8),
            // the new RS's unavailable pods stop any further old scale-down
            (10, 2, 8, 2, 8, 0, false, 8),
        ];
        for (i, (replicas, unavailable, old, new, ready_old, ready_new, scale, expected_old)) in
            cases.into_iter().enumerate()
        {
            let new_sel = map(&[("foo", "new")]);
            let new_rs = with_available(rs("foo-new", new, Some(new_sel.clone()), None), ready_new);
            let old_rs = with_available(
                rs("foo-old", old, Some(map(&[("foo", "old")])), None),
                ready_old,
            );
            let old_rss = [old_rs.clone()];
            let all = [old_rs, new_rs.clone()];
            let d = new_deployment(
                "foo",
                replicas,
                None,
                Some(int(0)),
                Some(int(unavailable)),
                Some(new_sel),
            );
            let plan = super::reconcile_old_replica_sets(&all, &old_rss, &new_rs, &d);
            assert_eq!(plan.scaled(), scale, "scenario {i}: {plan:?}");
            // Upstream only documents expectedOldReplicas; here the final size is checked too.
            let last = plan.actions().last().map_or(old, |a| a.to);
            assert_eq!(last, expected_old, "scenario {i}: {plan:?}");
        }
    }

    #[test]
    fn reconcile_old_replica_sets_cleans_up_then_scales_down_the_same_rs() {
        // Scenario 4 in detail: one write per step, each from the previous one's result.
        let new_sel = map(&[("foo", "new")]);
        let new_rs = rs("foo-new", 0, Some(new_sel.clone()), None);
        let old_rs = with_available(rs("foo-old", 10, None, None), 9);
        let d = new_deployment("foo", 10, None, Some(int(0)), Some(int(2)), Some(new_sel));
        let plan = super::reconcile_old_replica_sets(
            &[old_rs.clone(), new_rs.clone()],
            &[old_rs],
            &new_rs,
            &d,
        );
        let steps: Vec<(i32, i32)> = plan.actions().map(|a| (a.from, a.to)).collect();
        assert_eq!(steps, [(10, 9), (9, 8)]);
        assert_eq!((plan.cleanup.count, plan.scale_down.count), (1, 1));
    }

    #[test]
    fn cleanup_unhealthy_replicas() {
        // (oldReplicas, readyPods, unHealthyPods, maxCleanupCount, cleanupCountExpected)
        let cases = [
            (10, 8, 2, 1, 1),
            (10, 8, 2, 3, 2),
            (10, 8, 2, 0, 0),
            (10, 10, 0, 3, 0),
        ];
        for (i, (old, ready, _unhealthy, max, expected)) in cases.into_iter().enumerate() {
            let mut old_rss = [with_available(rs("foo-v2", old, None, None), ready)];
            let out = super::cleanup_unhealthy_replicas(&mut old_rss, max);
            assert_eq!(out.error, None, "scenario {i}");
            assert_eq!(out.count, expected, "scenario {i}");
            assert_eq!(out.actions.len(), usize::from(expected > 0), "scenario {i}");
            assert_eq!(
                super::rs_replicas(&old_rss[0]),
                old - expected,
                "scenario {i}"
            );
        }
    }

    #[test]
    fn cleanup_unhealthy_replicas_refuses_to_grow() {
        let mut old_rss = [with_available(rs("foo-v2", 5, None, None), 7)];
        let out = super::cleanup_unhealthy_replicas(&mut old_rss, 3);
        let err = out.error.expect("guard");
        assert_eq!(
            err.to_string(),
            "when cleaning up unhealthy replicas, got invalid request to scale down default/foo-v2 5 -> 7"
        );
        assert!(out.actions.is_empty());
    }

    #[test]
    fn scale_down_old_replica_sets_for_rolling_update() {
        // (deploymentReplicas, maxUnavailable, readyPods, oldReplicas, expectedOldReplicas)
        let cases = [
            (10, 0, 10, 10, Some(9)),
            (10, 2, 10, 10, Some(8)),
            (10, 2, 8, 10, None),
            (10, 2, 10, 0, None),
            (10, 2, 1, 10, None),
        ];
        for (i, (replicas, unavailable, ready, old, expected)) in cases.into_iter().enumerate() {
            let old_rs = with_available(rs("foo-v2", old, None, None), ready);
            let all = [old_rs.clone()];
            let mut old_rss = [old_rs];
            let d = new_deployment(
                "foo",
                replicas,
                None,
                Some(int(0)),
                Some(int(unavailable)),
                Some(map(&[("foo", "bar")])),
            );
            let out = super::scale_down_old_replica_sets_for_rolling_update(&all, &mut old_rss, &d);
            assert_eq!(out.error, None, "scenario {i}");
            let writes: Vec<i32> = out.actions.iter().map(|a| a.to).collect();
            assert_eq!(writes, Vec::from_iter(expected), "scenario {i}");
            assert_eq!(out.count > 0, expected.is_some(), "scenario {i}");
        }
    }

    #[test]
    fn plan_rolling_never_scales_both_ways() {
        // New RS can grow by the surge: that is the whole pass even though old could shrink.
        let new_rs = rs("foo-new", 0, None, None);
        let old_rs = with_available(rs("foo-old", 10, None, None), 10);
        let d = new_deployment("foo", 10, None, Some(int(2)), Some(int(2)), None);
        let all = [old_rs.clone(), new_rs.clone()];
        let plan = plan_rolling(&all, std::slice::from_ref(&old_rs), &new_rs, &d).unwrap();
        assert_eq!(
            plan,
            RollingPlan::ScaleNew(ScaleAction {
                name: "foo-new".into(),
                from: 0,
                to: 2
            })
        );
        // Surge used up: old shrinks by maxUnavailable.
        let new_rs = rs("foo-new", 2, None, None);
        let all = [old_rs.clone(), new_rs.clone()];
        let RollingPlan::ScaleOld(old) = plan_rolling(&all, &[old_rs], &new_rs, &d).unwrap() else {
            panic!("expected an old scale-down");
        };
        assert!(old.scaled());
        assert_eq!(old.actions().map(|a| a.to).collect::<Vec<_>>(), [8]);
    }
}

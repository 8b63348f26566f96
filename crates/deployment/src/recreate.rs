//! The Recreate strategy's decisions (upstream's recreate.go): kill every old pod before the new
//! ReplicaSet gets any. A pass either scales old ReplicaSets down, or waits while old pods are
//! still around (any phase but Failed/Succeeded, terminating ones included), or brings the new
//! ReplicaSet (created if missing) to full size. [`plan_recreate`] makes that choice.

use std::borrow::Borrow;
use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};

use crate::pod_view::PodView;
use crate::sync::ScaleAction;
use crate::util::fields::{deployment_replicas, rs_replicas};
use crate::util::{filter_active_replica_sets, get_actual_replica_count_for_replica_sets};

/// `scaleDownOldReplicaSetsForRecreate`: every old ReplicaSet that wants pods goes to 0.
pub fn scale_down_old_replica_sets_for_recreate<R: Borrow<ReplicaSet>>(
    old_rss: &[R],
) -> Vec<ScaleAction> {
    old_rss
        .iter()
        .map(Borrow::borrow)
        .filter(|rs| rs_replicas(rs) != 0)
        .map(|rs| ScaleAction::new(rs, 0))
        .collect()
}

/// `oldPodsRunning`: old ReplicaSets still report pods, or a pod owned by anything but the new
/// ReplicaSet (`pod_map` is keyed by owner UID) is not yet Failed or Succeeded — Pending,
/// Running, Unknown and phase-less pods count, even while terminating.
pub fn old_pods_running<R: Borrow<ReplicaSet>, P: Borrow<PodView>>(
    new_rs: Option<&ReplicaSet>,
    old_rss: &[R],
    pod_map: &BTreeMap<String, Vec<P>>,
) -> bool {
    if get_actual_replica_count_for_replica_sets(old_rss) > 0 {
        return true;
    }
    let new_uid = new_rs.and_then(|rs| rs.metadata.uid.as_deref());
    pod_map
        .iter()
        .filter(|(uid, _)| Some(uid.as_str()) != new_uid)
        .flat_map(|(_, pods)| pods)
        .any(|pod| !pod.borrow().is_terminal())
}

/// One Recreate pass (`rolloutRecreate` steps 2–5). Every variant ends with a rollout-status
/// sync.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RecreatePlan {
    /// Scale these old ReplicaSets to 0 (stop at the first failed write and return its error).
    ScaleDownOld(Vec<ScaleAction>),
    /// Old pods are still running: do nothing until they are gone (the pod-delete handler
    /// requeues the Deployment).
    WaitForOldPods,
    /// Create the new ReplicaSet if there is none (it is created at `replicas`), and scale it to
    /// `replicas` if it differs; then clean up history if the Deployment's current status is
    /// complete.
    ScaleUpNew {
        /// `spec.replicas` of the Deployment.
        replicas: i32,
        /// The write for an existing new ReplicaSet of another size.
        action: Option<ScaleAction>,
    },
}

/// `rolloutRecreate`'s decision. `new_rs` is the existing new ReplicaSet (never created before
/// the old pods are gone), `old_rss` all old ReplicaSets.
pub fn plan_recreate<R: Borrow<ReplicaSet> + Clone, P: Borrow<PodView>>(
    d: &Deployment,
    new_rs: Option<&ReplicaSet>,
    old_rss: &[R],
    pod_map: &BTreeMap<String, Vec<P>>,
) -> RecreatePlan {
    let scale_down = scale_down_old_replica_sets_for_recreate(&filter_active_replica_sets(old_rss));
    if !scale_down.is_empty() {
        return RecreatePlan::ScaleDownOld(scale_down);
    }
    if old_pods_running(new_rs, old_rss, pod_map) {
        return RecreatePlan::WaitForOldPods;
    }
    let replicas = deployment_replicas(d);
    RecreatePlan::ScaleUpNew {
        replicas,
        action: new_rs
            .filter(|rs| rs_replicas(rs) != replicas)
            .map(|rs| ScaleAction::new(rs, replicas)),
    }
}

#[cfg(test)]
mod tests {
    use crate::pod_view::PodViewStatus;

    use super::*;
    use crate::fixtures::{map, new_deployment, rs};

    fn pod(phase: Option<&str>) -> PodView {
        PodView {
            status: Some(PodViewStatus {
                phase: phase.map(str::to_owned),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn rs_with_uid(uid: &str) -> ReplicaSet {
        let mut rs = rs(&format!("foo-{uid}"), 0, Some(map(&[("foo", "bar")])), None);
        rs.metadata.uid = Some(uid.to_owned());
        rs
    }

    fn new_rs_with_status(name: &str, spec: i32, status: i32) -> ReplicaSet {
        let mut rs = rs(name, spec, None, None);
        rs.status.get_or_insert_default().replicas = status;
        rs
    }

    #[test]
    fn scale_down_old_replica_sets() {
        let d = new_deployment("foo", 3, None, None, None, Some(map(&[("foo", "bar")])));
        for sizes in [vec![3]] {
            let old: Vec<ReplicaSet> = sizes
                .iter()
                .enumerate()
                .map(|(n, &size)| rs(&format!("foo-{n}"), size, None, None))
                .collect();
            let actions = scale_down_old_replica_sets_for_recreate(&old);
            assert_eq!(actions.len(), old.len());
            for (action, rs) in actions.iter().zip(&old) {
                assert_eq!(action, &ScaleAction::new(rs, 0));
            }
            assert!(matches!(
                plan_recreate::<ReplicaSet, PodView>(&d, None, &old, &BTreeMap::new()),
                RecreatePlan::ScaleDownOld(a) if a == actions
            ));
        }
    }

    /// (name, oldRSs, podMap, hasOldPodsRunning)
    type Case = (
        &'static str,
        Vec<ReplicaSet>,
        BTreeMap<String, Vec<PodView>>,
        bool,
    );

    #[test]
    fn old_pods_running() {
        let zero = || vec![new_rs_with_status("rs-1", 0, 0)];
        let pods = |entries: &[(&str, &[Option<&str>])]| -> BTreeMap<String, Vec<PodView>> {
            entries
                .iter()
                .map(|(uid, phases)| ((*uid).to_owned(), phases.iter().map(|p| pod(*p)).collect()))
                .collect()
        };
        let cases: Vec<Case> = vec![
            ("no old RSs", vec![], BTreeMap::new(), false),
            (
                "old RSs with running pods",
                vec![rs_with_uid("some-uid"), rs_with_uid("other-uid")],
                pods(&[("some-uid", &[None, None]), ("other-uid", &[None, None])]),
                true,
            ),
            (
                "old RSs without pods but with non-zero status replicas",
                vec![new_rs_with_status("rs-1", 0, 1)],
                BTreeMap::new(),
                true,
            ),
            (
                "old RSs without pods or non-zero status replicas",
                zero(),
                BTreeMap::new(),
                false,
            ),
            (
                "old RSs with zero status replicas but pods in terminal state are present",
                zero(),
                pods(&[("uid-1", &[Some("Failed"), Some("Succeeded")])]),
                false,
            ),
            (
                "old RSs with zero status replicas but pod in unknown phase present",
                zero(),
                pods(&[("uid-1", &[Some("Unknown")])]),
                true,
            ),
            (
                "old RSs with zero status replicas with pending pod present",
                zero(),
                pods(&[("uid-1", &[Some("Pending")])]),
                true,
            ),
            (
                "old RSs with zero status replicas with running pod present",
                zero(),
                pods(&[("uid-1", &[Some("Running")])]),
                true,
            ),
            (
                "old RSs with zero status replicas but pods in terminal state and pending are present",
                zero(),
                pods(&[
                    ("uid-1", &[Some("Failed"), Some("Succeeded")]),
                    ("uid-2", &[]),
                    ("uid-3", &[Some("Pending")]),
                ]),
                true,
            ),
        ];
        for (name, old, pod_map, expected) in cases {
            assert_eq!(
                super::old_pods_running(None, &old, &pod_map),
                expected,
                "{name}"
            );
        }
    }

    #[test]
    fn new_replica_set_pods_do_not_block() {
        let mut new_rs = rs("foo-new", 0, None, None);
        new_rs.metadata.uid = Some("new-uid".into());
        let pod_map = BTreeMap::from([("new-uid".to_owned(), vec![pod(Some("Running"))])]);
        let old = [new_rs_with_status("rs-1", 0, 0)];
        assert!(!super::old_pods_running(Some(&new_rs), &old, &pod_map));
        assert!(super::old_pods_running(None, &old, &pod_map));
    }

    #[test]
    fn plan_recreate_waits_then_scales_up() {
        let d = new_deployment("foo", 3, None, None, None, None);
        let old = [new_rs_with_status("rs-1", 0, 1)];
        let none: BTreeMap<String, Vec<PodView>> = BTreeMap::new();
        assert_eq!(
            plan_recreate(&d, None, &old, &none),
            RecreatePlan::WaitForOldPods
        );
        let old = [new_rs_with_status("rs-1", 0, 0)];
        assert_eq!(
            plan_recreate(&d, None, &old, &none),
            RecreatePlan::ScaleUpNew {
                replicas: 3,
                action: None
            }
        );
        let new_rs = rs("foo-new", 1, None, None);
        assert_eq!(
            plan_recreate(&d, Some(&new_rs), &old, &none),
            RecreatePlan::ScaleUpNew {
                replicas: 3,
                action: Some(ScaleAction {
                    name: "foo-new".into(),
                    from: 1,
                    to: 3
                })
            }
        );
    }
}

//! Rollout state from a Deployment and the status the controller is about to write: complete,
//! progressing, timed out; and the spec's "infinite" sentinels.
//!
//! `progressDeadlineSeconds` and `revisionHistoryLimit` equal to `i32::MAX` mean "no deadline"
//! and "keep everything", exactly like leaving them unset. The clock is a parameter.
//!
//! Upstream: `DeploymentComplete`, `DeploymentProgressing`, `DeploymentTimedOut`,
//! `HasProgressDeadline`, `HasRevisionHistoryLimit` of deployment_util.go.

use k8s_openapi::api::apps::v1::{Deployment, DeploymentStatus};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kctrl_client::versioned::Versioned;

use super::conditions::get_deployment_condition;
use super::constants::{DEPLOYMENT_PROGRESSING, NEW_RS_AVAILABLE_REASON, TIMED_OUT_REASON};
use super::fields::{counts, deployment_replicas};

/// `DeploymentComplete`: every desired replica is updated and available, no old pods remain, and
/// the status describes the current generation.
pub fn deployment_complete(d: &Deployment, new_status: &DeploymentStatus) -> bool {
    let replicas = deployment_replicas(d);
    let s = counts(new_status);
    s.updated == replicas
        && s.replicas == replicas
        && s.available == replicas
        && s.observed_generation >= d.metadata.generation.unwrap_or(0)
}

/// `DeploymentProgressing`: compared with the Deployment's current status, the new status has
/// more updated pods, fewer old pods, more ready pods or more available pods.
pub fn deployment_progressing(d: &Deployment, new_status: &DeploymentStatus) -> bool {
    let old = d.status.as_ref().map(counts).unwrap_or_default();
    let new = counts(new_status);
    new.updated > old.updated
        || (new.replicas - new.updated) < (old.replicas - old.updated)
        || new.ready > old.ready
        || new.available > old.available
}

/// `DeploymentTimedOut`: the Progressing condition of `new_status` reports no progress for longer
/// than `progressDeadlineSeconds` before `now` (strictly), or already says the deadline passed.
/// No deadline, no Progressing condition, or a completed rollout → not timed out.
pub fn deployment_timed_out(d: &Deployment, new_status: &DeploymentStatus, now: Timestamp) -> bool {
    if !has_progress_deadline(d) {
        return false;
    }
    let Some(condition) = get_deployment_condition(new_status, DEPLOYMENT_PROGRESSING) else {
        return false;
    };
    match condition.reason.as_deref() {
        Some(NEW_RS_AVAILABLE_REASON) => return false,
        Some(TIMED_OUT_REASON) => return true,
        _ => {}
    }
    let deadline = d
        .spec
        .get()
        .and_then(|s| s.progress_deadline_seconds)
        .unwrap_or(0);
    // A missing lastUpdateTime is Go's zero time: long ago.
    let timed_out = match &condition.last_update_time {
        None => true,
        Some(from) => from
            .0
            .checked_add(SignedDuration::from_secs(i64::from(deadline)))
            .is_ok_and(|until| until < now),
    };
    tracing::trace!(
        deployment = d.metadata.name.as_deref().unwrap_or(""),
        timed_out,
        %now,
        "deployment timed out from last progress check"
    );
    timed_out
}

/// `HasProgressDeadline`: `progressDeadlineSeconds` is set and not `i32::MAX`.
pub fn has_progress_deadline(d: &Deployment) -> bool {
    d.spec
        .get()
        .and_then(|s| s.progress_deadline_seconds)
        .is_some_and(|v| v != i32::MAX)
}

/// `HasRevisionHistoryLimit`: `revisionHistoryLimit` is set and not `i32::MAX`.
pub fn has_revision_history_limit(d: &Deployment) -> bool {
    d.spec
        .get()
        .and_then(|s| s.revision_history_limit)
        .is_some_and(|v| v != i32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::util::constants::{CONDITION_TRUE, ROLLING_UPDATE_DEPLOYMENT_STRATEGY_TYPE};
    use k8s_openapi::api::apps::v1::{
        DeploymentCondition, DeploymentSpec, DeploymentStrategy, RollingUpdateDeployment,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

    fn status(current: i32, updated: i32, ready: i32, available: i32) -> DeploymentStatus {
        DeploymentStatus {
            replicas: Some(current),
            updated_replicas: Some(updated),
            ready_replicas: Some(ready),
            available_replicas: Some(available),
            ..Default::default()
        }
    }

    #[test]
    fn deployment_complete_table() {
        let deployment = |desired, current, updated, available, unavailable, surge| Deployment {
            spec: DeploymentSpec {
                replicas: Some(desired),
                strategy: Some(DeploymentStrategy {
                    type_: Some(ROLLING_UPDATE_DEPLOYMENT_STRATEGY_TYPE.into()),
                    rolling_update: Some(RollingUpdateDeployment {
                        max_unavailable: Some(IntOrString::Int(unavailable)),
                        max_surge: Some(IntOrString::Int(surge)),
                    }),
                }),
                ..Default::default()
            },
            status: Some(DeploymentStatus {
                replicas: Some(current),
                updated_replicas: Some(updated),
                available_replicas: Some(available),
                ..Default::default()
            }),
            ..Default::default()
        };
        let cases = [
            (
                "not complete: min but not all pods become available",
                deployment(5, 5, 5, 4, 1, 0),
                false,
            ),
            (
                "not complete: min availability is not honored",
                deployment(5, 5, 5, 3, 1, 0),
                false,
            ),
            ("complete", deployment(5, 5, 5, 5, 0, 0), true),
            (
                "not complete: all pods are available but not updated",
                deployment(5, 5, 4, 5, 0, 0),
                false,
            ),
            (
                "not complete: still running old pods",
                deployment(1, 2, 1, 1, 0, 1),
                false,
            ),
            (
                "not complete: one replica deployment never comes up",
                deployment(1, 1, 1, 0, 1, 1),
                false,
            ),
        ];
        for (name, d, want) in cases {
            assert_eq!(
                deployment_complete(&d, d.status.as_ref().unwrap()),
                want,
                "{name}"
            );
        }
    }

    #[test]
    fn complete_requires_observed_generation() {
        let mut d = Deployment {
            spec: DeploymentSpec {
                replicas: Some(2),
                ..Default::default()
            },
            ..Default::default()
        };
        d.metadata.generation = Some(3);
        let mut s = status(2, 2, 2, 2);
        s.observed_generation = Some(2);
        assert!(!deployment_complete(&d, &s));
        s.observed_generation = Some(3);
        assert!(deployment_complete(&d, &s));
    }

    #[test]
    fn deployment_progressing_table() {
        let deployment = |c, u, r, a| Deployment {
            status: Some(status(c, u, r, a)),
            ..Default::default()
        };
        let cases = [
            (
                "progressing: updated pods",
                deployment(10, 4, 4, 4),
                status(10, 6, 4, 4),
                true,
            ),
            (
                "not progressing",
                deployment(10, 4, 4, 4),
                status(10, 4, 4, 4),
                false,
            ),
            (
                "progressing: old pods removed",
                deployment(10, 4, 6, 6),
                status(8, 4, 6, 6),
                true,
            ),
            (
                "not progressing: less new pods",
                deployment(10, 7, 3, 3),
                status(10, 6, 3, 3),
                false,
            ),
            (
                "progressing: less overall but more new pods",
                deployment(10, 4, 7, 7),
                status(8, 8, 5, 5),
                true,
            ),
            (
                "progressing: more ready pods",
                deployment(10, 10, 9, 8),
                status(10, 10, 10, 8),
                true,
            ),
            (
                "progressing: more available pods",
                deployment(10, 10, 10, 9),
                status(10, 10, 10, 10),
                true,
            ),
        ];
        for (name, d, new_status, want) in cases {
            assert_eq!(deployment_progressing(&d, &new_status), want, "{name}");
        }
    }

    /// 2016-01-01 00:min:sec UTC.
    fn time(min: i64, sec: i64) -> Timestamp {
        "2016-01-01T00:00:00Z".parse::<Timestamp>().unwrap()
            + SignedDuration::from_secs(min * 60 + sec)
    }

    #[test]
    fn deployment_timed_out_table() {
        let deployment = |reason: &str, pds: Option<i32>, from: Option<Timestamp>| Deployment {
            spec: DeploymentSpec {
                progress_deadline_seconds: pds,
                ..Default::default()
            },
            status: Some(DeploymentStatus {
                conditions: Some(vec![DeploymentCondition {
                    type_: DEPLOYMENT_PROGRESSING.to_owned().into(),
                    status: CONDITION_TRUE.to_owned().into(),
                    reason: Some(reason.into()),
                    last_update_time: from.map(Time),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        };
        let cases = [
            (
                "nil progressDeadlineSeconds specified - no timeout",
                deployment("", None, Some(time(1, 9))),
                time(1, 20),
                false,
            ),
            (
                "infinite progressDeadlineSeconds specified - no timeout",
                deployment("", Some(i32::MAX), Some(time(1, 9))),
                time(1, 20),
                false,
            ),
            (
                "progressDeadlineSeconds: 10s, now - started => 00:01:20 - 00:01:09 => 11s",
                deployment("", Some(10), Some(time(1, 9))),
                time(1, 20),
                true,
            ),
            (
                "progressDeadlineSeconds: 10s, now - started => 00:01:20 - 00:01:11 => 9s",
                deployment("", Some(10), Some(time(1, 11))),
                time(1, 20),
                false,
            ),
            (
                "previous status was a complete deployment",
                deployment(NEW_RS_AVAILABLE_REASON, None, None),
                Timestamp::UNIX_EPOCH,
                false,
            ),
        ];
        for (name, d, now, want) in cases {
            assert_eq!(
                deployment_timed_out(&d, d.status.as_ref().unwrap(), now),
                want,
                "{name}"
            );
        }
    }

    #[test]
    fn timed_out_edges() {
        let d = |reason: &str, from: Timestamp| Deployment {
            spec: DeploymentSpec {
                progress_deadline_seconds: Some(10),
                ..Default::default()
            },
            status: Some(DeploymentStatus {
                conditions: Some(vec![DeploymentCondition {
                    type_: DEPLOYMENT_PROGRESSING.to_owned().into(),
                    status: CONDITION_TRUE.to_owned().into(),
                    reason: Some(reason.into()),
                    last_update_time: Some(Time(from)),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        };
        // Exactly at the deadline is not yet past it.
        let at = d("", time(1, 10));
        assert!(!deployment_timed_out(
            &at,
            at.status.as_ref().unwrap(),
            time(1, 20)
        ));
        // An earlier ProgressDeadlineExceeded stays timed out whatever the clock says.
        let done = d(TIMED_OUT_REASON, time(1, 19));
        assert!(deployment_timed_out(
            &done,
            done.status.as_ref().unwrap(),
            time(1, 20)
        ));
        // No Progressing condition: nothing to measure from.
        assert!(!deployment_timed_out(
            &at,
            &DeploymentStatus::default(),
            time(9, 0)
        ));
    }

    #[test]
    fn infinite_sentinels() {
        let d = |pds, rhl| Deployment {
            spec: DeploymentSpec {
                progress_deadline_seconds: pds,
                revision_history_limit: rhl,
                ..Default::default()
            },
            ..Default::default()
        };
        assert!(!has_progress_deadline(&d(None, None)));
        assert!(!has_progress_deadline(&d(Some(i32::MAX), None)));
        assert!(has_progress_deadline(&d(Some(600), None)));
        assert!(!has_revision_history_limit(&d(None, None)));
        assert!(!has_revision_history_limit(&d(None, Some(i32::MAX))));
        assert!(has_revision_history_limit(&d(None, Some(0))));
    }
}

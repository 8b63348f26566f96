//! Rollout status (upstream's progress.go): the status a strategy pass ends with — counters,
//! Available, and, with a progress deadline, the Progressing condition (NewReplicaSetAvailable /
//! ReplicaSetUpdated / ProgressDeadlineExceeded) and ReplicaFailure copied from the
//! ReplicaSets — plus when to look again at a rollout that may time out.
//!
//! Pure: the clock is the `now` parameter, and the result says whether to write the status
//! ([`RolloutStatus::Update`]) or how to requeue ([`Requeue`]).

use std::borrow::Borrow;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentCondition, DeploymentStatus, ReplicaSet};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kctrl_client::versioned::{Text, Versioned};

use crate::sync::calculate_status;
use crate::util::constants::{
    CONDITION_FALSE, CONDITION_TRUE, DEPLOYMENT_PROGRESSING, DEPLOYMENT_REPLICA_FAILURE,
    NEW_RS_AVAILABLE_REASON, REPLICA_SET_UPDATED_REASON, TIMED_OUT_REASON,
};
use crate::util::{
    deployment_complete, deployment_progressing, deployment_timed_out, get_deployment_condition,
    has_progress_deadline, new_deployment_condition, remove_deployment_condition,
    replica_set_to_deployment_condition, set_deployment_condition,
};

/// What `syncRolloutStatus` does with the status it computed.
#[derive(Clone, Debug, PartialEq)]
pub enum RolloutStatus {
    /// The status changed: write it with UpdateStatus.
    Update(DeploymentStatus),
    /// Nothing changed; requeue as said ([`requeue_stuck_deployment`]).
    Unchanged(Requeue),
}

/// When to look at a Deployment again to notice a missed progress deadline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Requeue {
    /// No deadline to watch (upstream's `-1`).
    Never,
    /// The deadline is (almost) here: requeue rate-limited now (upstream's `0`).
    Now,
    /// The deadline is this far away; upstream enqueues after this plus one second
    /// ([`Requeue::delay`]).
    After(SignedDuration),
}

impl Requeue {
    /// The enqueue delay: `None` for [`Requeue::Never`], zero for [`Requeue::Now`] (rate-limited),
    /// else the time to the deadline plus one second.
    pub fn delay(self) -> Option<SignedDuration> {
        match self {
            Self::Never => None,
            Self::Now => Some(SignedDuration::ZERO),
            Self::After(after) => Some(after.saturating_add(SignedDuration::from_secs(1))),
        }
    }
}

/// `syncRolloutStatus`: the status after this pass. `all_rss` includes `new_rs`.
pub fn sync_rollout_status<R: Borrow<ReplicaSet>>(
    all_rss: &[R],
    new_rs: Option<&ReplicaSet>,
    d: &Deployment,
    now: Timestamp,
) -> RolloutStatus {
    let new_status = rollout_status(all_rss, new_rs, d, now);
    let current = d.status.clone().unwrap_or_default();
    if current == new_status {
        RolloutStatus::Unchanged(requeue_stuck_deployment(d, &new_status, now))
    } else {
        RolloutStatus::Update(new_status)
    }
}

/// The status `syncRolloutStatus` computes, whether or not it differs from the current one.
pub fn rollout_status<R: Borrow<ReplicaSet>>(
    all_rss: &[R],
    new_rs: Option<&ReplicaSet>,
    d: &Deployment,
    now: Timestamp,
) -> DeploymentStatus {
    let mut new_status = calculate_status(all_rss, new_rs, d, now);
    let has_deadline = has_progress_deadline(d);
    if !has_deadline {
        remove_deployment_condition(&mut new_status, DEPLOYMENT_PROGRESSING);
    }
    let current = d.status.clone().unwrap_or_default();
    let current_cond = get_deployment_condition(&current, DEPLOYMENT_PROGRESSING);
    let is_complete = new_status.replicas == new_status.updated_replicas
        && current_cond.is_some_and(|c| c.reason.as_deref() == Some(NEW_RS_AVAILABLE_REASON));
    if has_deadline && !is_complete {
        let d_name = d.metadata.name.as_deref().unwrap_or("");
        let subject = match new_rs {
            Some(rs) => format!("ReplicaSet {:?}", rs.metadata.name.as_deref().unwrap_or("")),
            None => format!("Deployment {d_name:?}"),
        };
        if deployment_complete(d, &new_status) {
            let condition = new_deployment_condition(
                DEPLOYMENT_PROGRESSING,
                CONDITION_TRUE,
                NEW_RS_AVAILABLE_REASON,
                &format!("{subject} has successfully progressed."),
                now,
            );
            set_deployment_condition(&mut new_status, condition);
        } else if deployment_progressing(d, &new_status) {
            let mut condition = new_deployment_condition(
                DEPLOYMENT_PROGRESSING,
                CONDITION_TRUE,
                REPLICA_SET_UPDATED_REASON,
                &format!("{subject} is progressing."),
                now,
            );
            if let Some(cur) = current_cond {
                if cur.status.text() == CONDITION_TRUE {
                    condition.last_transition_time = cur.last_transition_time.clone();
                }
                // Remove first so lastUpdateTime is refreshed even with the same reason.
                remove_deployment_condition(&mut new_status, DEPLOYMENT_PROGRESSING);
            }
            set_deployment_condition(&mut new_status, condition);
        } else if deployment_timed_out(d, &new_status, now) {
            let condition = new_deployment_condition(
                DEPLOYMENT_PROGRESSING,
                CONDITION_FALSE,
                TIMED_OUT_REASON,
                &format!("{subject} has timed out progressing."),
                now,
            );
            set_deployment_condition(&mut new_status, condition);
        }
    }
    match replica_failures(all_rss, new_rs).into_iter().next() {
        Some(failure) => set_deployment_condition(&mut new_status, failure),
        None => remove_deployment_condition(&mut new_status, DEPLOYMENT_REPLICA_FAILURE),
    }
    new_status
}

/// `getReplicaFailures`: the new ReplicaSet's ReplicaFailure conditions, or else every
/// ReplicaSet's, as Deployment conditions.
fn replica_failures<R: Borrow<ReplicaSet>>(
    all_rss: &[R],
    new_rs: Option<&ReplicaSet>,
) -> Vec<DeploymentCondition> {
    let of = |rs: &ReplicaSet| -> Vec<DeploymentCondition> {
        rs.status
            .iter()
            .flat_map(|s| s.conditions.iter().flatten())
            .filter(|c| c.type_.text() == DEPLOYMENT_REPLICA_FAILURE)
            .map(replica_set_to_deployment_condition)
            .collect()
    };
    let from_new = new_rs.map(of).unwrap_or_default();
    if !from_new.is_empty() {
        return from_new;
    }
    all_rss.iter().flat_map(|rs| of(rs.borrow())).collect()
}

/// `requeueStuckDeployment`: how long until a progressing Deployment's deadline passes, so it is
/// looked at again then. [`Requeue::Never`] without a deadline, without a Progressing condition,
/// when `new_status` is complete, or when the deadline already passed.
pub fn requeue_stuck_deployment(
    d: &Deployment,
    new_status: &DeploymentStatus,
    now: Timestamp,
) -> Requeue {
    let current = d.status.clone().unwrap_or_default();
    let Some(cond) = get_deployment_condition(&current, DEPLOYMENT_PROGRESSING) else {
        return Requeue::Never;
    };
    if !has_progress_deadline(d)
        || deployment_complete(d, new_status)
        || cond.reason.as_deref() == Some(TIMED_OUT_REASON)
    {
        return Requeue::Never;
    }
    let pds = d
        .spec
        .get()
        .and_then(|s| s.progress_deadline_seconds)
        .unwrap_or(0);
    // A missing lastUpdateTime is Go's zero time: the deadline is long gone.
    let after = cond.last_update_time.as_ref().map(|t| {
        now.duration_until(t.0)
            .saturating_add(SignedDuration::from_secs(i64::from(pds)))
    });
    match after {
        Some(after) if after >= SignedDuration::from_secs(1) => Requeue::After(after),
        _ => Requeue::Now,
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use super::*;
    use crate::fixtures::{current_deployment, new_rs_with_available, ts};

    fn progressing(status: &str, reason: &str, at: Option<Timestamp>) -> DeploymentCondition {
        DeploymentCondition {
            type_: DEPLOYMENT_PROGRESSING.to_owned().into(),
            status: status.to_owned().into(),
            reason: Some(reason.to_owned()).filter(|r| !r.is_empty()),
            last_update_time: at.map(Time),
            last_transition_time: at.map(Time),
            message: None,
        }
    }

    fn status(replicas: i32, updated: i32, available: i32) -> DeploymentStatus {
        let non_zero = |n: i32| (n != 0).then_some(n);
        DeploymentStatus {
            replicas: non_zero(replicas),
            updated_replicas: non_zero(updated),
            available_replicas: non_zero(available),
            ..Default::default()
        }
    }

    #[test]
    fn requeue_stuck_deployment() {
        let pds = Some(60);
        let infinite = Some(i32::MAX);
        let failed = || vec![progressing(CONDITION_FALSE, TIMED_OUT_REASON, None)];
        let stuck = || {
            let mut c = progressing(CONDITION_TRUE, "", None);
            c.last_update_time = Some(Time(ts("2017-02-15T18:49:00Z")));
            vec![c]
        };
        let default_now = ts("2017-02-15T18:49:00Z");
        let cases = [
            (
                "nil progressDeadlineSeconds specified",
                current_deployment(None, 4, 3, 3, 2, vec![]),
                status(3, 3, 2),
                None,
                Requeue::Never,
            ),
            (
                "infinite progressDeadlineSeconds specified",
                current_deployment(infinite, 4, 3, 3, 2, vec![]),
                status(3, 3, 2),
                None,
                Requeue::Never,
            ),
            (
                "no progressing condition found",
                current_deployment(pds, 4, 3, 3, 2, vec![]),
                status(3, 3, 2),
                None,
                Requeue::Never,
            ),
            (
                "complete deployment does not need to be requeued",
                current_deployment(pds, 3, 3, 3, 3, vec![]),
                status(3, 3, 3),
                None,
                Requeue::Never,
            ),
            (
                "already failed deployment does not need to be requeued",
                current_deployment(pds, 3, 3, 3, 0, failed()),
                status(3, 3, 0),
                None,
                Requeue::Never,
            ),
            (
                "stuck deployment - 30s",
                current_deployment(pds, 3, 3, 3, 1, stuck()),
                status(3, 3, 1),
                Some("2017-02-15T18:49:30Z"),
                Requeue::After(SignedDuration::from_secs(30)),
            ),
            (
                "stuck deployment - 1s",
                current_deployment(pds, 3, 3, 3, 1, stuck()),
                status(3, 3, 1),
                Some("2017-02-15T18:49:59Z"),
                Requeue::After(SignedDuration::from_secs(1)),
            ),
            (
                "failed deployment - less than a second => now",
                current_deployment(pds, 3, 3, 3, 1, stuck()),
                status(3, 3, 1),
                Some("2017-02-15T18:49:59.000000001Z"),
                Requeue::Now,
            ),
            (
                "failed deployment - now",
                current_deployment(pds, 3, 3, 3, 1, stuck()),
                status(3, 3, 1),
                Some("2017-02-15T18:50:00Z"),
                Requeue::Now,
            ),
            (
                "failed deployment - 1s after deadline",
                current_deployment(pds, 3, 3, 3, 1, stuck()),
                status(3, 3, 1),
                Some("2017-02-15T18:50:01Z"),
                Requeue::Now,
            ),
            (
                "failed deployment - 60s after deadline",
                current_deployment(pds, 3, 3, 3, 1, stuck()),
                status(3, 3, 1),
                Some("2017-02-15T18:51:00Z"),
                Requeue::Now,
            ),
        ];
        for (name, d, new_status, now, expected) in cases {
            let now = now.map_or(default_now, ts);
            assert_eq!(
                super::requeue_stuck_deployment(&d, &new_status, now),
                expected,
                "{name}"
            );
        }
    }

    #[test]
    fn requeue_delay_adds_a_second() {
        assert_eq!(Requeue::Never.delay(), None);
        assert_eq!(Requeue::Now.delay(), Some(SignedDuration::ZERO));
        assert_eq!(
            Requeue::After(SignedDuration::from_secs(30)).delay(),
            Some(SignedDuration::from_secs(31))
        );
    }

    /// Which timestamps of the resulting Progressing condition must still be the test time.
    #[derive(Clone, Copy)]
    enum Kept {
        Nothing,
        Transition,
        Both,
    }

    #[test]
    fn sync_rollout_status() {
        let pds = Some(60);
        let test_time = ts("2017-02-15T18:49:00Z");
        // Upstream leaves its package clock at the previous test's 18:51:00.
        let now = ts("2017-02-15T18:51:00Z");
        let failed_timed_out = || progressing(CONDITION_FALSE, TIMED_OUT_REASON, None);
        let new_rs_available =
            || progressing(CONDITION_TRUE, NEW_RS_AVAILABLE_REASON, Some(test_time));
        let replica_set_updated =
            || progressing(CONDITION_TRUE, REPLICA_SET_UPDATED_REASON, Some(test_time));
        let bar = || new_rs_with_available("bar", 0, 1, 1);
        let foo_322 = || Some(new_rs_with_available("foo", 3, 2, 2));
        let foo_333 = || Some(new_rs_with_available("foo", 3, 3, 3));
        type Case = (
            &'static str,
            Deployment,
            Vec<ReplicaSet>,
            Option<ReplicaSet>,
            Option<(&'static str, &'static str)>,
            Kept,
        );
        let cases: Vec<Case> = vec![
            (
                "General: remove Progressing condition and do not estimate progress if deployment has no Progress Deadline",
                current_deployment(None, 3, 2, 2, 2, vec![replica_set_updated()]),
                vec![bar()],
                foo_322(),
                None,
                Kept::Nothing,
            ),
            (
                "General: do not estimate progress of deployment with only one active ReplicaSet",
                current_deployment(pds, 3, 3, 3, 3, vec![new_rs_available()]),
                vec![new_rs_with_available("bar", 3, 3, 3)],
                None,
                Some((CONDITION_TRUE, NEW_RS_AVAILABLE_REASON)),
                Kept::Both,
            ),
            (
                "DeploymentProgressing: dont update lastTransitionTime if deployment already has Progressing=True",
                current_deployment(pds, 3, 2, 2, 2, vec![replica_set_updated()]),
                vec![bar()],
                foo_322(),
                Some((CONDITION_TRUE, REPLICA_SET_UPDATED_REASON)),
                Kept::Transition,
            ),
            (
                "DeploymentProgressing: update everything if deployment has Progressing=False",
                current_deployment(pds, 3, 2, 2, 2, vec![failed_timed_out()]),
                vec![bar()],
                foo_322(),
                Some((CONDITION_TRUE, REPLICA_SET_UPDATED_REASON)),
                Kept::Nothing,
            ),
            (
                "DeploymentProgressing: create Progressing condition if it does not exist",
                current_deployment(pds, 3, 2, 2, 2, vec![]),
                vec![bar()],
                foo_322(),
                Some((CONDITION_TRUE, REPLICA_SET_UPDATED_REASON)),
                Kept::Nothing,
            ),
            (
                "DeploymentComplete: dont update lastTransitionTime if deployment already has Progressing=True",
                current_deployment(pds, 3, 3, 3, 3, vec![replica_set_updated()]),
                vec![],
                foo_333(),
                Some((CONDITION_TRUE, NEW_RS_AVAILABLE_REASON)),
                Kept::Transition,
            ),
            (
                "DeploymentComplete: update everything if deployment has Progressing=False",
                current_deployment(pds, 3, 3, 3, 3, vec![failed_timed_out()]),
                vec![],
                foo_333(),
                Some((CONDITION_TRUE, NEW_RS_AVAILABLE_REASON)),
                Kept::Nothing,
            ),
            (
                "DeploymentComplete: create Progressing condition if it does not exist",
                current_deployment(pds, 3, 3, 3, 3, vec![]),
                vec![],
                foo_333(),
                Some((CONDITION_TRUE, NEW_RS_AVAILABLE_REASON)),
                Kept::Nothing,
            ),
            (
                "DeploymentComplete: defend against NPE when newRS=nil",
                current_deployment(pds, 0, 3, 3, 3, vec![replica_set_updated()]),
                vec![new_rs_with_available("foo", 0, 0, 0)],
                None,
                Some((CONDITION_TRUE, NEW_RS_AVAILABLE_REASON)),
                Kept::Nothing,
            ),
            (
                "DeploymentTimedOut: update status if rollout exceeds Progress Deadline",
                current_deployment(pds, 3, 2, 2, 2, vec![replica_set_updated()]),
                vec![],
                foo_322(),
                Some((CONDITION_FALSE, TIMED_OUT_REASON)),
                Kept::Nothing,
            ),
            (
                "DeploymentTimedOut: do not update status if deployment has existing timedOut condition",
                current_deployment(pds, 3, 2, 2, 2, vec![failed_timed_out()]),
                vec![],
                foo_322(),
                Some((CONDITION_FALSE, TIMED_OUT_REASON)),
                Kept::Both,
            ),
        ];
        for (name, d, mut all_rss, new_rs, expected, kept) in cases {
            all_rss.extend(new_rs.clone());
            let result = rollout_status(&all_rss, new_rs.as_ref(), &d, now);
            let cond = get_deployment_condition(&result, DEPLOYMENT_PROGRESSING);
            let Some((want_status, want_reason)) = expected else {
                assert!(cond.is_none(), "{name}: {cond:?}");
                continue;
            };
            let cond = cond.unwrap_or_else(|| panic!("{name}: no Progressing condition"));
            assert_eq!(
                (cond.status.text(), cond.reason.as_deref().unwrap_or("")),
                (want_status, want_reason),
                "{name}"
            );
            let before =
                get_deployment_condition(d.status.as_ref().unwrap(), DEPLOYMENT_PROGRESSING);
            match kept {
                Kept::Nothing => {}
                Kept::Transition => {
                    assert_eq!(cond.last_transition_time, Some(Time(test_time)), "{name}");
                    assert_eq!(cond.last_update_time, Some(Time(now)), "{name}");
                }
                Kept::Both => assert_eq!(Some(cond), before, "{name}"),
            }
        }
    }

    #[test]
    fn sync_rollout_status_messages_and_replica_failure() {
        let now = ts("2017-02-15T18:51:00Z");
        let d = current_deployment(Some(60), 3, 2, 2, 2, vec![]);
        let mut foo = new_rs_with_available("foo", 3, 2, 2);
        let failure = k8s_openapi::api::apps::v1::ReplicaSetCondition {
            type_: DEPLOYMENT_REPLICA_FAILURE.to_owned().into(),
            status: CONDITION_TRUE.to_owned().into(),
            reason: Some("FailedCreate".to_owned()),
            message: Some("quota".to_owned()),
            last_transition_time: Some(Time(ts("2017-02-15T18:40:00Z"))),
        };
        foo.status.as_mut().unwrap().conditions = Some(vec![failure]);
        let all = [new_rs_with_available("bar", 0, 1, 1), foo.clone()];
        let RolloutStatus::Update(status) = super::sync_rollout_status(&all, Some(&foo), &d, now)
        else {
            panic!("status must change");
        };
        let p = get_deployment_condition(&status, DEPLOYMENT_PROGRESSING).unwrap();
        assert_eq!(
            p.message.as_deref(),
            Some("ReplicaSet \"foo\" is progressing.")
        );
        let f = get_deployment_condition(&status, DEPLOYMENT_REPLICA_FAILURE).unwrap();
        assert_eq!(f.reason.as_deref(), Some("FailedCreate"));
        assert_eq!(f.last_update_time, Some(Time(ts("2017-02-15T18:40:00Z"))));
        let a = get_deployment_condition(&status, "Available").unwrap();
        assert_eq!(a.reason.as_deref(), Some("MinimumReplicasAvailable"));

        // Written back, the same pass changes nothing and asks for a requeue at the deadline.
        let mut d = d;
        d.status = Some(status);
        let later = ts("2017-02-15T18:51:30Z");
        assert_eq!(
            super::sync_rollout_status(&all, Some(&foo), &d, later),
            RolloutStatus::Unchanged(Requeue::After(SignedDuration::from_secs(30)))
        );
    }
}

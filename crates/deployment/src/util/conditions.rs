//! Deployment status conditions: building, reading, setting and removing them.
//!
//! Setting a condition whose status and reason are unchanged is a no-op — timestamps included —
//! so repeated syncs do not churn the status; a changed reason with the same status keeps the
//! original `lastTransitionTime`. (The rollout code deliberately removes and re-adds Progressing
//! to refresh `lastUpdateTime`.) The clock is a parameter: callers pass "now".
//!
//! Upstream: the condition helpers of deployment_util.go.

use k8s_openapi::api::apps::v1::{DeploymentCondition, DeploymentStatus, ReplicaSetCondition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kctrl_client::versioned::Text;

/// `""` → `None`, as Go's `omitempty` would serialize it.
fn non_empty(s: &str) -> Option<String> {
    (!s.is_empty()).then(|| s.to_owned())
}

/// `NewDeploymentCondition`: a condition whose update and transition times are both `now`.
pub fn new_deployment_condition(
    type_: &str,
    status: &str,
    reason: &str,
    message: &str,
    now: Timestamp,
) -> DeploymentCondition {
    DeploymentCondition {
        type_: type_.to_owned().into(),
        status: status.to_owned().into(),
        last_update_time: Some(Time(now)),
        last_transition_time: Some(Time(now)),
        reason: non_empty(reason),
        message: non_empty(message),
    }
}

/// `GetDeploymentCondition`: the first condition of `type_`, if any.
pub fn get_deployment_condition<'a>(
    status: &'a DeploymentStatus,
    type_: &str,
) -> Option<&'a DeploymentCondition> {
    status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_.text() == type_)
}

/// `SetDeploymentCondition`: puts `condition` in the status (replacing every condition of its
/// type, appended last) unless one with the same status and reason is already there.
pub fn set_deployment_condition(status: &mut DeploymentStatus, mut condition: DeploymentCondition) {
    if let Some(current) = get_deployment_condition(status, condition.type_.text()) {
        if current.status == condition.status
            && current.reason.as_deref().unwrap_or("") == condition.reason.as_deref().unwrap_or("")
        {
            return;
        }
        if current.status == condition.status {
            condition.last_transition_time = current.last_transition_time.clone();
        }
    }
    remove_deployment_condition(status, condition.type_.text());
    status.conditions.get_or_insert_default().push(condition);
}

/// `RemoveDeploymentCondition`: drops every condition of `type_` (no conditions left → `None`,
/// like Go's nil slice).
pub fn remove_deployment_condition(status: &mut DeploymentStatus, type_: &str) {
    if let Some(conditions) = status.conditions.as_mut() {
        conditions.retain(|c| c.type_.text() != type_);
        if conditions.is_empty() {
            status.conditions = None;
        }
    }
}

/// `ReplicaSetToDeploymentCondition`: promotes a ReplicaSet condition (e.g. ReplicaFailure) to
/// the Deployment; both times are the ReplicaSet condition's transition time.
pub fn replica_set_to_deployment_condition(cond: &ReplicaSetCondition) -> DeploymentCondition {
    DeploymentCondition {
        type_: cond.type_.clone(),
        status: cond.status.clone(),
        last_transition_time: cond.last_transition_time.clone(),
        last_update_time: cond.last_transition_time.clone(),
        reason: cond.reason.clone(),
        message: cond.message.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::util::constants::{
        CONDITION_FALSE, CONDITION_TRUE, DEPLOYMENT_AVAILABLE, DEPLOYMENT_PROGRESSING,
        DEPLOYMENT_REPLICA_FAILURE,
    };

    fn cond(type_: &str, status: &str, reason: &str) -> DeploymentCondition {
        DeploymentCondition {
            type_: type_.to_owned().into(),
            status: status.to_owned().into(),
            reason: Some(reason.into()),
            ..Default::default()
        }
    }
    fn cond_progressing() -> DeploymentCondition {
        cond(DEPLOYMENT_PROGRESSING, CONDITION_FALSE, "ForSomeReason")
    }
    fn cond_progressing2() -> DeploymentCondition {
        cond(DEPLOYMENT_PROGRESSING, CONDITION_TRUE, "BecauseItIs")
    }
    fn cond_available() -> DeploymentCondition {
        cond(DEPLOYMENT_AVAILABLE, CONDITION_TRUE, "AwesomeController")
    }
    fn with(conditions: Vec<DeploymentCondition>) -> DeploymentStatus {
        DeploymentStatus {
            conditions: Some(conditions),
            ..Default::default()
        }
    }
    fn status() -> DeploymentStatus {
        with(vec![cond_progressing(), cond_available()])
    }

    #[test]
    fn get_condition() {
        let cases = [
            ("condition exists", DEPLOYMENT_AVAILABLE, true),
            (
                "condition does not exist",
                DEPLOYMENT_REPLICA_FAILURE,
                false,
            ),
        ];
        for (name, type_, want) in cases {
            assert_eq!(
                get_deployment_condition(&status(), type_).is_some(),
                want,
                "{name}"
            );
        }
    }

    #[test]
    fn set_condition() {
        let cases = [
            (
                "set for the first time",
                DeploymentStatus::default(),
                cond_available(),
                with(vec![cond_available()]),
            ),
            (
                "simple set",
                with(vec![cond_progressing()]),
                cond_available(),
                status(),
            ),
            (
                "overwrite",
                with(vec![cond_progressing()]),
                cond_progressing2(),
                with(vec![cond_progressing2()]),
            ),
        ];
        for (name, mut status, cond, want) in cases {
            set_deployment_condition(&mut status, cond);
            assert_eq!(status, want, "{name}");
        }
    }

    #[test]
    fn remove_condition() {
        let cases = [
            (
                "remove from empty status",
                DeploymentStatus::default(),
                DEPLOYMENT_PROGRESSING,
                DeploymentStatus::default(),
            ),
            (
                "simple remove",
                with(vec![cond_progressing()]),
                DEPLOYMENT_PROGRESSING,
                DeploymentStatus::default(),
            ),
            (
                "doesn't remove anything",
                status(),
                DEPLOYMENT_REPLICA_FAILURE,
                status(),
            ),
        ];
        for (name, mut status, type_, want) in cases {
            remove_deployment_condition(&mut status, type_);
            assert_eq!(status, want, "{name}");
        }
    }

    // Beyond upstream's tables: the timestamp rules of SetDeploymentCondition.

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_second(secs).unwrap()
    }

    #[test]
    fn same_status_and_reason_leaves_timestamps_alone() {
        let mut status = DeploymentStatus::default();
        set_deployment_condition(
            &mut status,
            new_deployment_condition(DEPLOYMENT_PROGRESSING, CONDITION_TRUE, "R", "m1", at(10)),
        );
        set_deployment_condition(
            &mut status,
            new_deployment_condition(DEPLOYMENT_PROGRESSING, CONDITION_TRUE, "R", "m2", at(20)),
        );
        let c = get_deployment_condition(&status, DEPLOYMENT_PROGRESSING).unwrap();
        assert_eq!(c.last_update_time, Some(Time(at(10))));
        assert_eq!(c.message.as_deref(), Some("m1"));
    }

    #[test]
    fn same_status_new_reason_keeps_transition_time() {
        let mut status = with(vec![cond_available()]);
        set_deployment_condition(
            &mut status,
            new_deployment_condition(DEPLOYMENT_PROGRESSING, CONDITION_TRUE, "A", "", at(10)),
        );
        set_deployment_condition(
            &mut status,
            new_deployment_condition(DEPLOYMENT_PROGRESSING, CONDITION_TRUE, "B", "", at(20)),
        );
        let conditions = status.conditions.as_ref().unwrap();
        assert_eq!(conditions.len(), 2);
        let c = &conditions[1];
        assert_eq!(c.reason.as_deref(), Some("B"));
        assert_eq!(c.last_transition_time, Some(Time(at(10))));
        assert_eq!(c.last_update_time, Some(Time(at(20))));
        // A status change moves the transition time.
        set_deployment_condition(
            &mut status,
            new_deployment_condition(DEPLOYMENT_PROGRESSING, CONDITION_FALSE, "B", "", at(30)),
        );
        let c = get_deployment_condition(&status, DEPLOYMENT_PROGRESSING).unwrap();
        assert_eq!(c.last_transition_time, Some(Time(at(30))));
    }

    #[test]
    fn replica_set_condition_promotion_uses_transition_time_twice() {
        let rs_cond = ReplicaSetCondition {
            type_: DEPLOYMENT_REPLICA_FAILURE.to_owned().into(),
            status: CONDITION_TRUE.to_owned().into(),
            last_transition_time: Some(Time(at(5))),
            reason: Some("FailedCreate".into()),
            message: Some("quota".into()),
        };
        let c = replica_set_to_deployment_condition(&rs_cond);
        assert_eq!(c.last_update_time, Some(Time(at(5))));
        assert_eq!(c.last_transition_time, Some(Time(at(5))));
        assert_eq!(c.reason.as_deref(), Some("FailedCreate"));
    }
}

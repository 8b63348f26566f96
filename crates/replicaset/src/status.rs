//! A ReplicaSet's status: computing it from its Pods (upstream's `calculateStatus`), its
//! conditions, and writing it with one retry (`updateReplicaSetStatus`).

use std::future::Future;
use std::sync::Arc;

use k8s_openapi::api::apps::v1::{ReplicaSet, ReplicaSetCondition, ReplicaSetStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kctrl_client::labels::Selector;
use kctrl_client::versioned::{Text, Versioned};
use tracing::debug;

use crate::pod_view::PodView;
use crate::ranking::is_pod_available;

/// The condition type a ReplicaSet carries while creating or deleting Pods fails.
pub(crate) const REPLICA_FAILURE: &str = "ReplicaFailure";

/// How many times a refused status update is retried after reading the ReplicaSet again
/// (upstream's `statusUpdateRetries`).
pub(crate) const STATUS_UPDATE_RETRIES: usize = 1;

/// The condition of type `type_` in `status`, if any (`GetCondition`).
pub(crate) fn get_condition<'a>(
    status: &'a ReplicaSetStatus,
    type_: &str,
) -> Option<&'a ReplicaSetCondition> {
    status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_.text() == type_)
}

/// Adds `condition`, replacing one of its type, unless one of its type with the same status
/// and reason is there already (`SetCondition`).
pub(crate) fn set_condition(status: &mut ReplicaSetStatus, condition: ReplicaSetCondition) {
    let type_ = condition.type_.text().to_owned();
    if let Some(current) = get_condition(status, &type_)
        && current.status == condition.status
        && current.reason == condition.reason
    {
        return;
    }
    remove_condition(status, &type_);
    status
        .conditions
        .get_or_insert_with(Vec::new)
        .push(condition);
}

/// Removes the conditions of type `type_` (`RemoveCondition`); no conditions left is none.
pub(crate) fn remove_condition(status: &mut ReplicaSetStatus, type_: &str) {
    let kept: Vec<ReplicaSetCondition> = status
        .conditions
        .take()
        .into_iter()
        .flatten()
        .filter(|c| c.type_.text() != type_)
        .collect();
    status.conditions = (!kept.is_empty()).then_some(kept);
}

/// A condition with its transition time `now` (`NewReplicaSetCondition`).
pub(crate) fn new_condition(
    type_: &str,
    status: &str,
    reason: &str,
    message: &str,
    now: Timestamp,
) -> ReplicaSetCondition {
    ReplicaSetCondition {
        type_: type_.to_owned().into(),
        status: status.to_owned().into(),
        last_transition_time: Some(Time(now)),
        reason: non_empty(reason),
        message: non_empty(message),
    }
}

fn non_empty(s: &str) -> Option<String> {
    (!s.is_empty()).then(|| s.to_owned())
}

/// An `int32` status field as the API server serialises it: zero is omitted.
fn count(n: usize) -> Option<i32> {
    let n = i32::try_from(n).unwrap_or(i32::MAX);
    (n != 0).then_some(n)
}

/// The spec's replicas (1 when unset, the API server's default).
pub(crate) fn spec_replicas(rs: &ReplicaSet) -> i32 {
    rs.spec.get().and_then(|s| s.replicas).unwrap_or(1)
}

fn min_ready_seconds(rs: &ReplicaSet) -> i32 {
    rs.spec.get().and_then(|s| s.min_ready_seconds).unwrap_or(0)
}

/// The status `rs` should have given its active Pods and its terminating ones (`None`: not
/// counted, the `terminatingReplicas` field stays unset), and the error, if any, of this
/// sync's creates or deletes (`calculateStatus`). The `ReplicaFailure` condition appears with
/// that error (reason `FailedCreate` when Pods were missing, `FailedDelete` when there were too
/// many) and goes once a sync succeeds. `observedGeneration` is left to the write.
pub(crate) fn calculate_status(
    rs: &ReplicaSet,
    active: &[Arc<PodView>],
    terminating: Option<&[Arc<PodView>]>,
    manage_error: Option<&str>,
    now: Timestamp,
) -> ReplicaSetStatus {
    let mut status = rs.status.clone().unwrap_or_default();
    let template_labels = rs
        .spec
        .get()
        .and_then(|s| s.template.as_ref())
        .and_then(|t| t.metadata.as_ref())
        .and_then(|m| m.labels.clone())
        .unwrap_or_default();
    // A selector of every template label (no labels: matches everything).
    let template = Selector::from_map(&template_labels).unwrap_or_else(|_| Selector::nothing());
    let min_ready = min_ready_seconds(rs);
    let (mut fully_labeled, mut ready, mut available) = (0, 0, 0);
    for pod in active {
        if template.matches_meta(&pod.metadata) {
            fully_labeled += 1;
        }
        if pod.is_ready() {
            ready += 1;
            if is_pod_available(pod, min_ready, now) {
                available += 1;
            }
        }
    }
    let failing = get_condition(&status, REPLICA_FAILURE).is_some();
    match manage_error {
        Some(message) if !failing => {
            let diff = active.len() as i64 - i64::from(spec_replicas(rs));
            let reason = match diff {
                d if d < 0 => "FailedCreate",
                d if d > 0 => "FailedDelete",
                _ => "",
            };
            set_condition(
                &mut status,
                new_condition(REPLICA_FAILURE, "True", reason, message, now),
            );
        }
        None if failing => remove_condition(&mut status, REPLICA_FAILURE),
        _ => {}
    }
    status.replicas = i32::try_from(active.len()).unwrap_or(i32::MAX);
    status.fully_labeled_replicas = count(fully_labeled);
    status.ready_replicas = count(ready);
    status.available_replicas = count(available);
    status.terminating_replicas = terminating.map(|t| i32::try_from(t.len()).unwrap_or(i32::MAX));
    status
}

/// Whether `rs`'s status already is `new` and its generation observed: no write needed.
///
/// A cached status without `terminatingReplicas` agrees with any count: an API server whose
/// DeploymentReplicaSetTerminatingReplicas gate is off drops the field, so a write for it
/// alone would be sent again on every sync. The count goes out with the next write of
/// anything else.
pub(crate) fn status_up_to_date(rs: &ReplicaSet, new: &ReplicaSetStatus) -> bool {
    let cur = rs.status.clone().unwrap_or_default();
    let n = |v: Option<i32>| v.unwrap_or(0);
    cur.replicas == new.replicas
        && n(cur.fully_labeled_replicas) == n(new.fully_labeled_replicas)
        && n(cur.ready_replicas) == n(new.ready_replicas)
        && n(cur.available_replicas) == n(new.available_replicas)
        && (cur.terminating_replicas.is_none()
            || cur.terminating_replicas == new.terminating_replicas)
        && rs.metadata.generation.unwrap_or(0) == cur.observed_generation.unwrap_or(0)
        && cur.conditions.as_deref().unwrap_or_default()
            == new.conditions.as_deref().unwrap_or_default()
}

/// Writes `new` as `rs`'s status, with `observedGeneration` set to the generation acted on
/// (`updateReplicaSetStatus`): nothing is sent when the status is already that; a refused
/// update is retried [`STATUS_UPDATE_RETRIES`] time(s) on the ReplicaSet read again with
/// `get` (whose failure is returned instead). Returns the ReplicaSet as written (or as it
/// was, when nothing was sent).
pub(crate) async fn update_replica_set_status<U, UF, G, GF>(
    rs: &ReplicaSet,
    mut new: ReplicaSetStatus,
    update: U,
    get: G,
) -> Result<ReplicaSet, kctrl_client::Error>
where
    U: Fn(ReplicaSet) -> UF,
    UF: Future<Output = Result<ReplicaSet, kctrl_client::Error>>,
    G: Fn() -> GF,
    GF: Future<Output = Result<ReplicaSet, kctrl_client::Error>>,
{
    if status_up_to_date(rs, &new) {
        return Ok(rs.clone());
    }
    new.observed_generation = rs.metadata.generation;
    let mut current = rs.clone();
    let mut attempt = 0;
    loop {
        let old = current.status.clone().unwrap_or_default();
        debug!(
            namespace = current.metadata.namespace.as_deref().unwrap_or(""),
            name = current.metadata.name.as_deref().unwrap_or(""),
            replicas = %format!("{}->{} (need {})", old.replicas, new.replicas, spec_replicas(&current)),
            fully_labeled_replicas = %format!("{}->{}", old.fully_labeled_replicas.unwrap_or(0), new.fully_labeled_replicas.unwrap_or(0)),
            ready_replicas = %format!("{}->{}", old.ready_replicas.unwrap_or(0), new.ready_replicas.unwrap_or(0)),
            available_replicas = %format!("{}->{}", old.available_replicas.unwrap_or(0), new.available_replicas.unwrap_or(0)),
            terminating_replicas = %format!("{}->{}", fmt_opt(old.terminating_replicas), fmt_opt(new.terminating_replicas)),
            observed_generation = %format!("{}->{}", old.observed_generation.unwrap_or(0), new.observed_generation.unwrap_or(0)),
            "updating status for ReplicaSet"
        );
        current.status = Some(new.clone());
        let err = match update(current).await {
            Ok(written) => return Ok(written),
            Err(err) => err,
        };
        if attempt >= STATUS_UPDATE_RETRIES {
            return Err(err);
        }
        attempt += 1;
        current = get().await?;
    }
}

fn fmt_opt(v: Option<i32>) -> String {
    v.map_or_else(|| "nil".to_owned(), |v| v.to_string())
}

//! Reading the optional fields of k8s-openapi's Deployment and ReplicaSet the way Go reads them.
//!
//! k8s-openapi models almost every field as `Option`; upstream reads Go zero values (and
//! dereferences `spec.replicas`, which the API server always defaults). Every helper of this
//! module reads through these few functions, so the defaulting rules are stated once:
//!
//! * `spec.replicas` missing → `1`, the API server's default for both kinds (Go would panic);
//! * counters, generations and strategy fields missing → Go's zero value (`0`, `""`).

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{
    Deployment, DeploymentStatus, ReplicaSet, RollingUpdateDeployment,
};
use kctrl_client::versioned::Versioned;

/// The API server's default for `spec.replicas` of Deployments and ReplicaSets.
pub const DEFAULT_REPLICAS: i32 = 1;

/// `*(d.Spec.Replicas)`: the Deployment's desired replica count.
pub fn deployment_replicas(d: &Deployment) -> i32 {
    d.spec
        .get()
        .and_then(|s| s.replicas)
        .unwrap_or(DEFAULT_REPLICAS)
}

/// `*(rs.Spec.Replicas)`: the ReplicaSet's desired replica count.
pub fn rs_replicas(rs: &ReplicaSet) -> i32 {
    rs.spec
        .get()
        .and_then(|s| s.replicas)
        .unwrap_or(DEFAULT_REPLICAS)
}

/// The ReplicaSet's `status.replicas` (0 without a status).
pub fn rs_status_replicas(rs: &ReplicaSet) -> i32 {
    rs.status.as_ref().map_or(0, |s| s.replicas)
}

/// The ReplicaSet's `status.readyReplicas`.
pub fn rs_ready_replicas(rs: &ReplicaSet) -> i32 {
    rs.status
        .as_ref()
        .and_then(|s| s.ready_replicas)
        .unwrap_or(0)
}

/// The ReplicaSet's `status.availableReplicas`.
pub fn rs_available_replicas(rs: &ReplicaSet) -> i32 {
    rs.status
        .as_ref()
        .and_then(|s| s.available_replicas)
        .unwrap_or(0)
}

/// The Deployment's `spec.strategy.type` (`""` when unset, as in Go).
pub fn strategy_type(d: &Deployment) -> &str {
    d.spec
        .get()
        .and_then(|s| s.strategy.as_ref())
        .and_then(|s| s.type_.as_deref())
        .unwrap_or("")
}

/// The Deployment's `spec.strategy.rollingUpdate`, if any.
pub fn rolling_update(d: &Deployment) -> Option<&RollingUpdateDeployment> {
    d.spec
        .get()
        .and_then(|s| s.strategy.as_ref())
        .and_then(|s| s.rolling_update.as_ref())
}

/// The Deployment's status, or an empty one.
pub fn deployment_status(d: &Deployment) -> DeploymentStatus {
    d.status.clone().unwrap_or_default()
}

/// Counters of a [`DeploymentStatus`] read as Go reads them (missing → 0).
pub(crate) fn counts(s: &DeploymentStatus) -> StatusCounts {
    StatusCounts {
        replicas: s.replicas.unwrap_or(0),
        updated: s.updated_replicas.unwrap_or(0),
        ready: s.ready_replicas.unwrap_or(0),
        available: s.available_replicas.unwrap_or(0),
        observed_generation: s.observed_generation.unwrap_or(0),
    }
}

/// The counters of a Deployment status that rollout decisions compare.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct StatusCounts {
    pub(crate) replicas: i32,
    pub(crate) updated: i32,
    pub(crate) ready: i32,
    pub(crate) available: i32,
    pub(crate) observed_generation: i64,
}

/// An object's annotation, if present.
pub(crate) fn annotation<'a>(
    annotations: Option<&'a BTreeMap<String, String>>,
    key: &str,
) -> Option<&'a str> {
    annotations.and_then(|a| a.get(key)).map(String::as_str)
}

//! Pure helpers of the Deployment controller (upstream's `pkg/controller/deployment/util`, plus
//! the ReplicaSet helpers it borrows from `controller_utils.go` and `pkg/util/labels`).
//!
//! Nothing here talks to the API: every function reads and writes k8s-openapi values, and the
//! clock is a parameter, so the rollout arithmetic is driven by table tests ported from
//! upstream's `deployment_util_test.go` and `hash_test.go`. Read top-down:
//!
//! | module | concept |
//! |---|---|
//! | [`constants`] | label/annotation keys, condition types and reasons, event reasons |
//! | [`fields`] | reading k8s-openapi's optional fields with Go's defaults |
//! | [`annotations`] | revisions, revision history, replica annotations, annotation copying |
//! | [`conditions`] | Deployment status conditions |
//! | [`fence`] | maxSurge / maxUnavailable resolution |
//! | [`replicas`] | replica sums, new-RS size, saturation, proportional scaling |
//! | [`rollout`] | complete / progressing / timed out, "infinite" sentinels |
//! | [`equality`] | semantic pod-template equality ignoring the hash label |
//! | [`sort`] | ReplicaSet orders (creation, size, revision) |
//! | [`finders`] | new / old / active ReplicaSets, owning Deployments |
//! | [`hash`] | the pod-template-hash |
//! | [`labels`] | label and selector cloning |
//! | [`naming`] | ReplicaSet names |
//!
//! The most used items are re-exported here.
//!
//! ```
//! use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec, DeploymentStrategy,
//!     RollingUpdateDeployment};
//! use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
//! use kctrl_client::versioned::Versioned;
//! use kctrl_deployment::util::{max_surge, max_unavailable, resolve_fenceposts};
//!
//! // 25% of 10: surge rounds up, unavailability rounds down.
//! let pct = IntOrString::String("25%".into());
//! assert_eq!(resolve_fenceposts(Some(&pct), Some(&pct), 10), Ok((3, 2)));
//!
//! let d = Deployment {
//!     spec: Versioned::from_value(DeploymentSpec {
//!         replicas: Some(10),
//!         strategy: Some(DeploymentStrategy {
//!             type_: Some("RollingUpdate".into()),
//!             rolling_update: Some(RollingUpdateDeployment {
//!                 max_surge: Some(pct.clone()),
//!                 max_unavailable: Some(pct),
//!             }),
//!         }),
//!         ..Default::default()
//!     }),
//!     ..Default::default()
//! };
//! assert_eq!((max_surge(&d), max_unavailable(&d)), (3, 2));
//! ```

pub mod annotations;
pub mod conditions;
pub mod constants;
pub mod equality;
pub mod fence;
pub mod fields;
pub mod finders;
pub mod hash;
pub mod labels;
pub mod naming;
pub mod replicas;
pub mod rollout;
pub mod sort;

#[cfg(test)]
mod testing;

pub use annotations::{
    AnnotationIntError, RevisionError, get_desired_replicas_annotation,
    get_max_replicas_annotation, last_revision, max_revision, replicas_annotations_need_update,
    revision, set_deployment_annotations_to, set_deployment_revision,
    set_new_replica_set_annotations, set_replicas_annotations,
};
pub use conditions::{
    get_deployment_condition, new_deployment_condition, remove_deployment_condition,
    replica_set_to_deployment_condition, set_deployment_condition,
};
pub use equality::equal_ignore_hash;
pub use fence::{
    IntOrPercentError, is_rolling_update, max_surge, max_unavailable, min_available,
    resolve_fenceposts,
};
pub use finders::{
    NoDeploymentsError, filter_active_replica_sets, find_active_or_latest, find_new_replica_set,
    find_old_replica_sets, get_deployments_for_replica_set, set_from_replica_set_template,
};
pub use hash::compute_hash;
pub use naming::generate_replica_set_name;
pub use replicas::{
    NewReplicasError, get_actual_replica_count_for_replica_sets,
    get_available_replica_count_for_replica_sets, get_ready_replica_count_for_replica_sets,
    get_replica_count_for_replica_sets, get_replica_set_proportion,
    get_terminating_replica_count_for_replica_sets, is_saturated, new_rs_new_replicas,
};
pub use rollout::{
    deployment_complete, deployment_progressing, deployment_timed_out, has_progress_deadline,
    has_revision_history_limit,
};

use std::borrow::Borrow;
use std::sync::Arc;

use k8s_openapi::api::apps::v1::ReplicaSet;

/// A ReplicaSet as a sync passes it around: owned (the ported table tests build them), or shared
/// with the informer's cache (`Arc<ReplicaSet>`, what the controller holds). Upstream's sync
/// works on pointers into its cache and deep-copies a ReplicaSet only before changing it; the
/// shared form does the same, so a sync copies no ReplicaSet it only reads.
pub trait ReplicaSetRef: Borrow<ReplicaSet> + Clone {
    /// The ReplicaSet, to change: copied first if it is shared.
    fn make_mut(&mut self) -> &mut ReplicaSet;
}

impl ReplicaSetRef for ReplicaSet {
    fn make_mut(&mut self) -> &mut ReplicaSet {
        self
    }
}

impl ReplicaSetRef for Arc<ReplicaSet> {
    fn make_mut(&mut self) -> &mut ReplicaSet {
        Arc::make_mut(self)
    }
}

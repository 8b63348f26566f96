//! The Deployment controller's vocabulary: label and annotation keys, strategy types,
//! condition types and reasons, event reasons.
//!
//! These strings are the controller's contract with the API (and with kubectl, which reads the
//! same annotations and conditions), so they are spelled exactly as kube-controller-manager
//! 1.37 spells them (unchanged since 1.36) and live in one place.

/// Group, version and kind of the objects this controller owns ReplicaSets for.
pub const CONTROLLER_API_VERSION: &str = "apps/v1";
/// Kind of the controlling object (`apps/v1, Kind=Deployment`).
pub const CONTROLLER_KIND: &str = "Deployment";
/// Event source component.
pub const EVENT_SOURCE_COMPONENT: &str = "deployment-controller";
/// Name of the work queue (and of its metrics).
pub const WORK_QUEUE_NAME: &str = "deployment";
/// How many times a Deployment is retried before it is dropped from the queue.
pub const MAX_RETRIES: u32 = 15;

/// Label added to a ReplicaSet, its selector and its pod template so that sibling ReplicaSets of
/// one Deployment never select each other's pods (`apps.DefaultDeploymentUniqueLabelKey`).
pub const DEFAULT_DEPLOYMENT_UNIQUE_LABEL_KEY: &str = "pod-template-hash";

/// Rollout sequence number of a ReplicaSet (decimal int64); the Deployment carries its newest.
pub const REVISION_ANNOTATION: &str = "deployment.kubernetes.io/revision";
/// Comma-separated earlier revisions a re-used ReplicaSet served (e.g. after a rollback).
pub const REVISION_HISTORY_ANNOTATION: &str = "deployment.kubernetes.io/revision-history";
/// `.spec.replicas` of the Deployment when the ReplicaSet was last scaled by the controller.
pub const DESIRED_REPLICAS_ANNOTATION: &str = "deployment.kubernetes.io/desired-replicas";
/// `.spec.replicas + maxSurge` of the Deployment when the ReplicaSet was last scaled; the base of
/// proportional scaling.
pub const MAX_REPLICAS_ANNOTATION: &str = "deployment.kubernetes.io/max-replicas";
/// Deprecated rollback request on a Deployment (`apps.DeprecatedRollbackTo`): the revision to roll
/// back to, `"0"` meaning the previous one.
pub const DEPRECATED_ROLLBACK_TO: &str = "deprecated.deployment.rollback.to";
/// kubectl's client-side-apply annotation (`v1.LastAppliedConfigAnnotation`).
pub const LAST_APPLIED_CONFIG_ANNOTATION: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Annotations never copied from a Deployment to its ReplicaSets (nor back on rollback).
pub const ANNOTATIONS_TO_SKIP: [&str; 6] = [
    LAST_APPLIED_CONFIG_ANNOTATION,
    REVISION_ANNOTATION,
    REVISION_HISTORY_ANNOTATION,
    DESIRED_REPLICAS_ANNOTATION,
    MAX_REPLICAS_ANNOTATION,
    DEPRECATED_ROLLBACK_TO,
];

/// Strategy type: old pods are replaced gradually.
pub const ROLLING_UPDATE_DEPLOYMENT_STRATEGY_TYPE: &str = "RollingUpdate";
/// Strategy type: all old pods are killed before new ones are created.
pub const RECREATE_DEPLOYMENT_STRATEGY_TYPE: &str = "Recreate";

/// Condition type: the Deployment has at least its minimum of available pods.
pub const DEPLOYMENT_AVAILABLE: &str = "Available";
/// Condition type: the rollout is making progress (or has finished, or timed out).
pub const DEPLOYMENT_PROGRESSING: &str = "Progressing";
/// Condition type: a ReplicaSet failed to create or delete pods (copied from the ReplicaSet).
pub const DEPLOYMENT_REPLICA_FAILURE: &str = "ReplicaFailure";

/// Condition status `True`.
pub const CONDITION_TRUE: &str = "True";
/// Condition status `False`.
pub const CONDITION_FALSE: &str = "False";
/// Condition status `Unknown`.
pub const CONDITION_UNKNOWN: &str = "Unknown";

/// Progressing reason: one of the Deployment's ReplicaSets was updated by the rollout.
pub const REPLICA_SET_UPDATED_REASON: &str = "ReplicaSetUpdated";
/// Progressing reason (and Warning event reason): the new ReplicaSet could not be created.
pub const FAILED_RS_CREATE_REASON: &str = "ReplicaSetCreateError";
/// Progressing reason: a new ReplicaSet was created.
pub const NEW_REPLICA_SET_REASON: &str = "NewReplicaSetCreated";
/// Progressing reason: an existing ReplicaSet matching the template was adopted as the new one.
pub const FOUND_NEW_RS_REASON: &str = "FoundNewReplicaSet";
/// Progressing reason: the new ReplicaSet is available; the rollout is complete.
pub const NEW_RS_AVAILABLE_REASON: &str = "NewReplicaSetAvailable";
/// Progressing reason: no progress within `progressDeadlineSeconds`.
pub const TIMED_OUT_REASON: &str = "ProgressDeadlineExceeded";
/// Progressing reason: the Deployment is paused (no progress is estimated meanwhile).
pub const PAUSED_DEPLOY_REASON: &str = "DeploymentPaused";
/// Progressing reason: the Deployment was resumed (restarts the progress clock).
pub const RESUMED_DEPLOY_REASON: &str = "DeploymentResumed";

/// Available reason: at least `replicas - maxUnavailable` pods are available.
pub const MINIMUM_REPLICAS_AVAILABLE: &str = "MinimumReplicasAvailable";
/// Available reason: fewer than `replicas - maxUnavailable` pods are available.
pub const MINIMUM_REPLICAS_UNAVAILABLE: &str = "MinimumReplicasUnavailable";

/// Normal event reason: a ReplicaSet was scaled.
pub const SCALING_REPLICA_SET_EVENT: &str = "ScalingReplicaSet";
/// Warning event reason: the Deployment has an empty selector (it would select everything).
pub const SELECTING_ALL_EVENT: &str = "SelectingAll";
/// Normal event reason: a rollback was performed.
pub const ROLLBACK_DONE: &str = "DeploymentRollback";
/// Warning event reason: the requested rollback revision does not exist.
pub const ROLLBACK_REVISION_NOT_FOUND: &str = "DeploymentRollbackRevisionNotFound";
/// Warning event reason: the rollback target has the current template.
pub const ROLLBACK_TEMPLATE_UNCHANGED: &str = "DeploymentRollbackTemplateUnchanged";

/// Longest valid object name (`validation.DNS1123SubdomainMaxLength`).
pub const DNS1123_SUBDOMAIN_MAX_LENGTH: usize = 253;
/// Separator between the Deployment name and the template hash in a ReplicaSet name.
pub const REPLICA_SET_NAME_SEPARATOR: &str = "-";

//! Test fixtures shared by the strategy tests: ports of upstream's `rs`, `newDeployment`,
//! `currentDeployment` and `newRSWithAvailable` helpers (deployment_controller_test.go,
//! progress_test.go).

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{
    Deployment, DeploymentCondition, DeploymentSpec, DeploymentStatus, DeploymentStrategy,
    ReplicaSet, ReplicaSetSpec, ReplicaSetStatus, RollingUpdateDeployment,
};
use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::Timestamp;
use kctrl_client::versioned::Versioned;
use kctrl_controller_ref::Owner;

/// A string map from pairs.
pub(crate) fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// A UTC timestamp from its RFC 3339 form.
pub(crate) fn ts(s: &str) -> Timestamp {
    s.parse().unwrap()
}

/// `rs(name, replicas, selector, timestamp)`: namespace default, empty template.
pub(crate) fn rs(
    name: &str,
    replicas: i32,
    selector: Option<BTreeMap<String, String>>,
    created: Option<Timestamp>,
) -> ReplicaSet {
    ReplicaSet {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some("default".to_owned()),
            creation_timestamp: created.map(Time),
            ..Default::default()
        },
        spec: ReplicaSetSpec {
            replicas: Some(replicas),
            selector: LabelSelector {
                match_labels: selector,
                ..Default::default()
            },
            template: Some(PodTemplateSpec::default()),
            ..Default::default()
        },
        status: None,
    }
}

/// `newRSWithAvailable(name, spec, status, available)`.
pub(crate) fn new_rs_with_available(
    name: &str,
    spec: i32,
    status: i32,
    available: i32,
) -> ReplicaSet {
    let mut rs = rs(name, spec, None, None);
    rs.status = Some(ReplicaSetStatus {
        replicas: status,
        available_replicas: Some(available),
        ..Default::default()
    });
    rs
}

/// `newDeployment(name, replicas, revisionHistoryLimit, maxSurge, maxUnavailable, selector)`:
/// RollingUpdate with both fenceposts 0 unless given.
pub(crate) fn new_deployment(
    name: &str,
    replicas: i32,
    revision_history_limit: Option<i32>,
    max_surge: Option<IntOrString>,
    max_unavailable: Option<IntOrString>,
    selector: Option<BTreeMap<String, String>>,
) -> Deployment {
    Deployment {
        metadata: ObjectMeta {
            uid: Some(format!("uid-{name}")),
            name: Some(name.to_owned()),
            namespace: Some("default".to_owned()),
            annotations: Some(BTreeMap::new()),
            ..Default::default()
        },
        spec: DeploymentSpec {
            strategy: Some(DeploymentStrategy {
                type_: Some("RollingUpdate".to_owned()),
                rolling_update: Some(RollingUpdateDeployment {
                    max_surge: Some(max_surge.unwrap_or(IntOrString::Int(0))),
                    max_unavailable: Some(max_unavailable.unwrap_or(IntOrString::Int(0))),
                }),
            }),
            replicas: Some(replicas),
            selector: LabelSelector {
                match_labels: selector.clone(),
                ..Default::default()
            },
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: selector,
                    ..Default::default()
                }),
                spec: Some(PodSpec {
                    containers: vec![Container {
                        image: Some("foo/bar".to_owned()),
                        ..Default::default()
                    }],
                    ..Default::default()
                }),
            },
            revision_history_limit,
            ..Default::default()
        },
        status: None,
    }
}

/// `currentDeployment(pds, replicas, statusReplicas, updated, available, conditions)`: named
/// progress-test, Recreate strategy.
pub(crate) fn current_deployment(
    pds: Option<i32>,
    replicas: i32,
    status_replicas: i32,
    updated: i32,
    available: i32,
    conditions: Vec<DeploymentCondition>,
) -> Deployment {
    let non_zero = |n: i32| (n != 0).then_some(n);
    Deployment {
        metadata: ObjectMeta {
            name: Some("progress-test".to_owned()),
            ..Default::default()
        },
        spec: DeploymentSpec {
            progress_deadline_seconds: pds,
            replicas: Some(replicas),
            strategy: Some(DeploymentStrategy {
                type_: Some("Recreate".to_owned()),
                rolling_update: None,
            }),
            ..Default::default()
        },
        status: Some(DeploymentStatus {
            replicas: non_zero(status_replicas),
            updated_replicas: non_zero(updated),
            available_replicas: non_zero(available),
            conditions: (!conditions.is_empty()).then_some(conditions),
            ..Default::default()
        }),
    }
}

/// `generatePodFromRS(rs)`: a pod in `default` with the ReplicaSet's selector labels, owned by it.
pub(crate) fn pod_from_rs(rs: &ReplicaSet) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(format!("{}-pod", rs.metadata.name.as_deref().unwrap())),
            namespace: Some("default".to_owned()),
            labels: rs.spec.get().unwrap().selector.match_labels.clone(),
            owner_references: Some(vec![Owner::of(rs).controller_ref()]),
            ..Default::default()
        },
        ..Default::default()
    }
}

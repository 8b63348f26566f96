//! Test fixtures shared by the util tests: ports of upstream's `generateDeployment`,
//! `generateRS` and `generatePodTemplateSpec` from deployment_util_test.go.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec, ReplicaSet, ReplicaSetSpec};
use k8s_openapi::api::core::v1::{Container, PodSecurityContext, PodSpec, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use kctrl_client::versioned::Versioned;

static NEXT: AtomicU64 = AtomicU64::new(1);

/// A unique number per call (stands in for upstream's random UIDs and generated names).
fn unique() -> u64 {
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// A string map from pairs.
pub(crate) fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// `generateDeployment(image)`: one replica, labels `name=image`, one container.
pub(crate) fn generate_deployment(image: &str) -> Deployment {
    let labels = map(&[("name", image)]);
    Deployment {
        metadata: ObjectMeta {
            name: Some(image.to_owned()),
            annotations: Some(BTreeMap::new()),
            ..Default::default()
        },
        spec: DeploymentSpec {
            replicas: Some(1),
            selector: LabelSelector {
                match_labels: Some(labels.clone()),
                ..Default::default()
            },
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels),
                    ..Default::default()
                }),
                spec: Some(PodSpec {
                    containers: vec![Container {
                        name: image.to_owned(),
                        image: Some(image.to_owned()),
                        image_pull_policy: Some("Always".to_owned()),
                        termination_message_path: Some("/dev/termination-log".to_owned()),
                        ..Default::default()
                    }],
                    dns_policy: Some("ClusterFirst".to_owned()),
                    termination_grace_period_seconds: Some(30),
                    restart_policy: Some("Always".to_owned()),
                    security_context: Some(PodSecurityContext::default()),
                    enable_service_links: Some(true),
                    ..Default::default()
                }),
            },
            ..Default::default()
        },
        status: None,
    }
}

/// `generateRS(d)`: a ReplicaSet with d's template, owned by d, 0 replicas.
///
/// Go's fixture shares one label map between the ReplicaSet's metadata and its template; tests
/// that change one must change both here.
pub(crate) fn generate_rs(d: &Deployment) -> ReplicaSet {
    let n = unique();
    let template = d.spec.get().unwrap().template.clone();
    let labels = template.metadata.as_ref().and_then(|m| m.labels.clone());
    let d_name = d.metadata.name.clone().unwrap_or_default();
    ReplicaSet {
        metadata: ObjectMeta {
            uid: Some(format!("uid-{n}")),
            name: Some(format!("{d_name}{n:05}")),
            labels: labels.clone(),
            owner_references: Some(vec![OwnerReference {
                api_version: "apps/v1".to_owned(),
                kind: "Deployment".to_owned(),
                name: d_name,
                uid: d.metadata.uid.clone().unwrap_or_default(),
                controller: Some(true),
                ..Default::default()
            }]),
            ..Default::default()
        },
        spec: ReplicaSetSpec {
            replicas: Some(0),
            template: Some(template),
            selector: LabelSelector {
                match_labels: labels,
                ..Default::default()
            },
            ..Default::default()
        },
        status: None,
    }
}

/// `generatePodTemplateSpec(name, nodeName, annotations, labels)`.
pub(crate) fn generate_pod_template_spec(
    name: &str,
    node_name: &str,
    annotations: BTreeMap<String, String>,
    labels: BTreeMap<String, String>,
) -> PodTemplateSpec {
    PodTemplateSpec {
        metadata: Some(ObjectMeta {
            name: Some(name.to_owned()),
            annotations: Some(annotations),
            labels: Some(labels),
            ..Default::default()
        }),
        spec: Some(PodSpec {
            node_name: Some(node_name.to_owned()),
            ..Default::default()
        }),
    }
}

/// Sets a label on both the ReplicaSet and its template (Go's fixture aliases the two maps).
pub(crate) fn set_rs_label(rs: &mut ReplicaSet, key: &str, value: &str) {
    rs.metadata
        .labels
        .get_or_insert_default()
        .insert(key.to_owned(), value.to_owned());
    let template = rs.spec.get_mut().template.as_mut().unwrap();
    template
        .metadata
        .get_or_insert_default()
        .labels
        .get_or_insert_default()
        .insert(key.to_owned(), value.to_owned());
}

/// Sets `spec.replicas` of a ReplicaSet.
pub(crate) fn set_rs_replicas(rs: &mut ReplicaSet, replicas: i32) {
    rs.spec.get_mut().replicas = Some(replicas);
}

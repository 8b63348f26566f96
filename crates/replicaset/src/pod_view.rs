//! What the ReplicaSet controller reads of a Pod, and the Pod cache's controller index.
//!
//! The controller creates Pods from the template and deletes them by name; it never reads a
//! Pod in full. Its Pod informer caches a [`PodView`]: the decoder keeps the fields below and
//! skips the rest of the spec and status and `managedFields` while parsing. The compiler
//! enforces that the logic reads nothing else, since it has no other Pod type to read.
//!
//! | field | read by (upstream) |
//! |---|---|
//! | `metadata` (labels, ownerReferences, deletionTimestamp, uid, creationTimestamp) | claims, `FilterActivePods`, handlers, keys |
//! | `metadata.annotations["controller.kubernetes.io/pod-deletion-cost"]` | `ActivePodsWithRanks` (rule 4) |
//! | `spec.nodeName` | `ActivePodsWithRanks` (rules 1 and 5) |
//! | `spec.initContainers[].name`, `.restartPolicy` | `maxContainerRestarts` (sidecars) |
//! | `status.phase` | `IsPodActive`, `IsPodTerminating`, ranking rule 2 |
//! | `status.conditions` (Ready, its lastTransitionTime) | readiness, availability, ranking rules 3 and 6 |
//! | `status.containerStatuses[].restartCount` | ranking rule 7 |
//! | `status.initContainerStatuses[].name`, `.restartCount` | ranking rule 7 (sidecars) |

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Pod, PodCondition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use kctrl_informer::IndexFn;
use serde::Deserialize;

/// A Pod as the ReplicaSet controller reads it (see the [module docs](self) for why each field
/// is here). Decoded straight from a Pod's JSON; `managedFields` are skipped.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct PodView {
    /// The Pod's metadata, without `managedFields`.
    #[serde(
        default,
        deserialize_with = "kctrl_client::metadata_without_managed_fields"
    )]
    pub metadata: ObjectMeta,
    /// The part of the spec the controller reads.
    #[serde(default)]
    pub spec: Option<PodViewSpec>,
    /// The part of the status the controller reads.
    #[serde(default)]
    pub status: Option<PodViewStatus>,
}

/// The part of a Pod's spec the controller reads.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodViewSpec {
    /// `spec.nodeName`: the node the Pod is bound to, if any.
    #[serde(default)]
    pub node_name: Option<String>,
    /// `spec.initContainers`, by name and restart policy (sidecars restart `Always`).
    #[serde(default)]
    pub init_containers: Vec<ContainerView>,
}

/// An init container's name and restart policy.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerView {
    /// The container's name.
    #[serde(default)]
    pub name: String,
    /// `Always` for a sidecar.
    #[serde(default)]
    pub restart_policy: Option<String>,
}

/// The part of a Pod's status the controller reads.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodViewStatus {
    /// `status.phase`: Pending, Running, Succeeded, Failed or Unknown.
    #[serde(default)]
    pub phase: Option<String>,
    /// `status.conditions`.
    #[serde(default)]
    pub conditions: Vec<PodCondition>,
    /// `status.containerStatuses`, by name and restart count.
    #[serde(default)]
    pub container_statuses: Vec<ContainerStatusView>,
    /// `status.initContainerStatuses`, by name and restart count.
    #[serde(default)]
    pub init_container_statuses: Vec<ContainerStatusView>,
}

/// A container's name and restart count.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerStatusView {
    /// The container's name.
    #[serde(default)]
    pub name: String,
    /// How often the container restarted.
    #[serde(default)]
    pub restart_count: i32,
}

kctrl_client::resource_view!(PodView => Pod);

impl From<&Pod> for PodView {
    fn from(pod: &Pod) -> Self {
        Self {
            metadata: ObjectMeta {
                managed_fields: None,
                ..pod.metadata.clone()
            },
            spec: pod.spec.as_ref().map(|s| PodViewSpec {
                node_name: s.node_name.clone(),
                init_containers: s
                    .init_containers
                    .iter()
                    .flatten()
                    .map(|c| ContainerView {
                        name: c.name.clone(),
                        restart_policy: c.restart_policy.clone(),
                    })
                    .collect(),
            }),
            status: pod.status.as_ref().map(|s| {
                let statuses = |list: Option<&Vec<k8s_openapi::api::core::v1::ContainerStatus>>| {
                    list.into_iter()
                        .flatten()
                        .map(|c| ContainerStatusView {
                            name: c.name.clone(),
                            restart_count: c.restart_count,
                        })
                        .collect()
                };
                PodViewStatus {
                    phase: s.phase.clone(),
                    conditions: s.conditions.clone().unwrap_or_default(),
                    container_statuses: statuses(s.container_statuses.as_ref()),
                    init_container_statuses: statuses(s.init_container_statuses.as_ref()),
                }
            }),
        }
    }
}

impl PodView {
    /// `namespace/name`, upstream's `PodKey`.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace(), self.name())
    }

    /// The Pod's namespace ("" if unset).
    pub fn namespace(&self) -> &str {
        self.metadata.namespace.as_deref().unwrap_or("")
    }

    /// The Pod's name ("" if unset).
    pub fn name(&self) -> &str {
        self.metadata.name.as_deref().unwrap_or("")
    }

    /// The Pod's UID ("" if unset).
    pub fn uid(&self) -> &str {
        self.metadata.uid.as_deref().unwrap_or("")
    }

    /// The Pod's labels.
    pub fn labels(&self) -> Option<&BTreeMap<String, String>> {
        self.metadata.labels.as_ref()
    }

    /// The Pod's phase ("" if not reported).
    pub fn phase(&self) -> &str {
        self.status
            .as_ref()
            .and_then(|s| s.phase.as_deref())
            .unwrap_or("")
    }

    /// The node the Pod is bound to ("" if unscheduled).
    pub fn node_name(&self) -> &str {
        self.spec
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .unwrap_or("")
    }

    /// The Pod's Ready condition, if reported (`GetPodReadyCondition`).
    pub fn ready_condition(&self) -> Option<&PodCondition> {
        self.status
            .as_ref()?
            .conditions
            .iter()
            .find(|c| c.type_ == "Ready")
    }

    /// Whether the Pod's Ready condition is True (`podutil.IsPodReady`).
    pub fn is_ready(&self) -> bool {
        self.ready_condition().is_some_and(|c| c.status == "True")
    }

    /// When the Ready condition last turned True, for a ready Pod (upstream's `podReadyTime`;
    /// `None` stands for the zero time).
    pub fn ready_time(&self) -> Option<&Time> {
        if !self.is_ready() {
            return None;
        }
        self.status
            .as_ref()?
            .conditions
            .iter()
            .find(|c| c.type_ == "Ready" && c.status == "True")
            .and_then(|c| c.last_transition_time.as_ref())
    }

    /// Whether the Pod has neither succeeded nor failed and is not being deleted
    /// (`IsPodActive`).
    pub fn is_active(&self) -> bool {
        !self.is_terminal() && self.metadata.deletion_timestamp.is_none()
    }

    /// Whether the Pod's phase is Succeeded or Failed (`podutil.IsPodTerminal`).
    pub fn is_terminal(&self) -> bool {
        matches!(self.phase(), "Succeeded" | "Failed")
    }

    /// Whether the Pod is being deleted and not yet terminal (`IsPodTerminating`).
    pub fn is_terminating(&self) -> bool {
        !self.is_terminal() && self.metadata.deletion_timestamp.is_some()
    }

    /// The highest restart count of the regular containers and of the sidecars (init
    /// containers restarting `Always`): upstream's `maxContainerRestarts`.
    pub fn max_container_restarts(&self) -> (i32, i32) {
        let Some(status) = &self.status else {
            return (0, 0);
        };
        let regular = status
            .container_statuses
            .iter()
            .map(|c| c.restart_count)
            .fold(0, i32::max);
        let sidecars: Vec<&str> = self
            .spec
            .iter()
            .flat_map(|s| &s.init_containers)
            .filter(|c| c.restart_policy.as_deref() == Some("Always"))
            .map(|c| c.name.as_str())
            .collect();
        let sidecar = status
            .init_container_statuses
            .iter()
            .filter(|c| sidecars.contains(&c.name.as_str()))
            .map(|c| c.restart_count)
            .fold(0, i32::max);
        (regular, sidecar)
    }

    /// The Pod's controller reference, if any.
    pub fn controller_ref(&self) -> Option<&OwnerReference> {
        kctrl_controller_ref::get_controller_of(&self.metadata)
    }
}

/// Name of the Pod cache's index by controller (upstream's `podController` index): a Pod with
/// a controller reference is indexed under `namespace/Kind/name/uid`, an orphan under its
/// namespace, so a ReplicaSet finds its own Pods and the orphans it may adopt without scanning.
pub const POD_CONTROLLER_INDEX: &str = "podController";

/// The index value of a Pod controlled by `owner` in `namespace`, or of the orphans of
/// `namespace` (`PodControllerIndexKey`).
pub fn pod_controller_index_key(namespace: &str, owner: Option<(&str, &str, &str)>) -> String {
    match owner {
        None => namespace.to_owned(),
        Some((kind, name, uid)) => format!("{namespace}/{kind}/{name}/{uid}"),
    }
}

/// The index function of [`POD_CONTROLLER_INDEX`].
pub fn pod_controller_index() -> IndexFn<PodView> {
    Arc::new(|pod: &PodView| {
        let owner = pod
            .controller_ref()
            .map(|r| (r.kind.as_str(), r.name.as_str(), r.uid.as_str()));
        vec![pod_controller_index_key(pod.namespace(), owner)]
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const POD: &str = r#"{
      "apiVersion": "v1", "kind": "Pod",
      "metadata": {
        "name": "web-x2x9z", "generateName": "web-", "namespace": "prod",
        "uid": "pod-uid", "resourceVersion": "4711",
        "creationTimestamp": "2026-11-24T01:00:00Z",
        "labels": {"app": "web"},
        "annotations": {"controller.kubernetes.io/pod-deletion-cost": "10"},
        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web",
          "uid": "rs-uid", "controller": true, "blockOwnerDeletion": true}],
        "managedFields": [{"manager": "kube-controller-manager", "operation": "Update"}]
      },
      "spec": {"nodeName": "node-a",
        "initContainers": [{"name": "proxy", "image": "envoy", "restartPolicy": "Always"},
                           {"name": "setup", "image": "busybox"}],
        "containers": [{"name": "web", "image": "nginx:1.27"}]},
      "status": {"phase": "Running", "podIP": "10.0.0.7",
        "conditions": [{"type": "Ready", "status": "True",
          "lastTransitionTime": "2026-11-24T01:00:30Z"}],
        "initContainerStatuses": [
          {"name": "proxy", "ready": true, "restartCount": 4, "image": "envoy", "imageID": ""},
          {"name": "setup", "ready": true, "restartCount": 9, "image": "busybox", "imageID": ""}],
        "containerStatuses": [{"name": "web", "ready": true, "restartCount": 2,
          "image": "nginx:1.27", "imageID": ""}]}
    }"#;

    #[test]
    fn the_view_carries_every_field_the_controller_reads() {
        let view: PodView = serde_json::from_str(POD).unwrap();
        let full: Pod = serde_json::from_str(POD).unwrap();
        assert_eq!(view, PodView::from(&full));
        assert!(view.metadata.managed_fields.is_none());
        assert_eq!(view.key(), "prod/web-x2x9z");
        assert_eq!(view.node_name(), "node-a");
        assert_eq!(view.phase(), "Running");
        assert!(view.is_ready() && view.is_active() && !view.is_terminating());
        assert_eq!(
            view.ready_time().map(|t| t.0.to_string()).as_deref(),
            Some("2026-11-24T01:00:30Z")
        );
        // The sidecar's restarts count as sidecar restarts; the plain init container's not.
        assert_eq!(view.max_container_restarts(), (2, 4));
    }

    #[test]
    fn the_controller_index_keys_owned_pods_and_orphans() {
        let view: PodView = serde_json::from_str(POD).unwrap();
        assert_eq!(
            pod_controller_index()(&view),
            vec!["prod/ReplicaSet/web/rs-uid".to_owned()]
        );
        let mut orphan = view.clone();
        orphan.metadata.owner_references = None;
        assert_eq!(pod_controller_index()(&orphan), vec!["prod".to_owned()]);
    }

    #[test]
    fn terminal_and_terminating_pods() {
        let mut view: PodView = serde_json::from_str(POD).unwrap();
        view.metadata.deletion_timestamp = view.metadata.creation_timestamp.clone();
        assert!(!view.is_active() && view.is_terminating());
        view.status.as_mut().unwrap().phase = Some("Failed".into());
        assert!(!view.is_active() && !view.is_terminating() && view.is_terminal());
        let bare: PodView = serde_json::from_str(r#"{"kind":"Pod"}"#).unwrap();
        assert!(bare.is_active() && !bare.is_ready());
        assert_eq!(bare.max_container_restarts(), (0, 0));
    }
}

//! What the workload controllers read of a Pod: one view, shared by the Deployment and
//! ReplicaSet controllers, so a process that runs both caches each Pod once.
//!
//! Neither controller reads a Pod in full: the ReplicaSet controller creates Pods from its
//! template and deletes them by name, the Deployment controller never writes Pods at all. Their
//! Pod informer caches a [`PodView`]: the decoder keeps the fields below and steps over the
//! rest of the spec and status and `managedFields`, which are most of a Pod's size. An
//! informer factory keeps one informer per Rust type, so the two controllers share one Pod
//! watch and one cache only if they read the same type: this one. The compiler enforces that
//! their logic reads nothing else, since they have no other Pod type to read.
//!
//! | field | read by (upstream) |
//! |---|---|
//! | `metadata` (labels, ownerReferences, deletionTimestamp, uid, creationTimestamp) | claims, `FilterActivePods`, handlers, cache keys and indexes, `getPodMapForDeployment` |
//! | `metadata.annotations["controller.kubernetes.io/pod-deletion-cost"]` | ReplicaSet: `ActivePodsWithRanks` (rule 4) |
//! | `spec.nodeName` | ReplicaSet: `ActivePodsWithRanks` (rules 1 and 5) |
//! | `spec.initContainers[].name`, `.restartPolicy` | ReplicaSet: `maxContainerRestarts` (sidecars) |
//! | `status.phase` | ReplicaSet: `IsPodActive`, `IsPodTerminating`, ranking rule 2; Deployment: `oldPodsRunning` (Recreate) |
//! | `status.conditions` of type Ready (`type`, `status`, `lastTransitionTime`) | ReplicaSet: readiness, availability, ranking rules 3 and 6 |
//! | `status.containerStatuses[].name`, `.restartCount` | ReplicaSet: ranking rule 7 |
//! | `status.initContainerStatuses[].name`, `.restartCount` | ReplicaSet: ranking rule 7 (sidecars) |
//!
//! The rest of `metadata` (finalizers, the other annotations, generation...) is kept as well,
//! without `managedFields`, in kctrl-client's [`CompactObjectMeta`]: a cache holds more Pods
//! than anything else, and that layout takes a third of the heap k8s-openapi's `ObjectMeta`
//! does (labels in one sorted slice instead of a B-tree node of over 500 bytes; namespace,
//! label pairs and owner references shared by the Pods that carry the same): on the benchmark's
//! Pods 282 bytes of heap per Pod instead of 886 (docs/benchmarks/replicaset.md). Of the
//! conditions only the Ready ones are kept, and of each only the three fields above.
//!
//! The view decodes from JSON and from protobuf ([`FromProtobuf`]) to the same value, and
//! [`From<&Pod>`](PodView::from) gives that value too. With protobuf (kube-controller-manager's
//! encoding, and deployment-controller's default), the skipped spec and status fields are
//! stepped over by their length instead of being scanned byte by byte.

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kctrl_client::protobuf::{FromProtobuf, MessageReader, ProtobufError, non_empty, push};
use kctrl_client::{CompactObjectMeta, CompactOwnerReference, ObjectMetaAccess, StringMap};
use serde::{Deserialize, Deserializer};

/// The condition type readiness is read from.
const READY: &str = "Ready";

/// A Pod as the Deployment and ReplicaSet controllers read it (see the [module docs](self) for
/// why each field is here). Decoded straight from a Pod's JSON or protobuf; `managedFields`
/// are skipped.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct PodView {
    /// The Pod's metadata, without `managedFields`, in the compact layout of a cache (see the
    /// [module docs](self)); [`CompactObjectMeta::to_object_meta`] gives k8s-openapi's type
    /// and `CompactObjectMeta::from(&ObjectMeta)` the other way.
    #[serde(
        default,
        deserialize_with = "kctrl_client::metadata_without_managed_fields"
    )]
    pub metadata: CompactObjectMeta,
    /// The part of the spec the controllers read.
    #[serde(default)]
    pub spec: Option<PodViewSpec>,
    /// The part of the status the controllers read.
    #[serde(default)]
    pub status: Option<PodViewStatus>,
}

/// The part of a Pod's spec the controllers read.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodViewSpec {
    /// `spec.nodeName`: the node the Pod is bound to, if any.
    #[serde(default)]
    pub node_name: Option<String>,
    /// `spec.initContainers`, by name and restart policy (sidecars restart `Always`).
    #[serde(default, deserialize_with = "list")]
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

/// The part of a Pod's status the controllers read.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodViewStatus {
    /// `status.phase`: Pending, Running, Succeeded, Failed or Unknown.
    #[serde(default)]
    pub phase: Option<String>,
    /// `status.conditions`, the Ready ones only (the only type the controllers read).
    #[serde(default, deserialize_with = "ready_conditions")]
    pub conditions: Vec<PodConditionView>,
    /// `status.containerStatuses`, by name and restart count.
    #[serde(default, deserialize_with = "list")]
    pub container_statuses: Vec<ContainerStatusView>,
    /// `status.initContainerStatuses`, by name and restart count.
    #[serde(default, deserialize_with = "list")]
    pub init_container_statuses: Vec<ContainerStatusView>,
}

/// A Pod condition's type, status and last transition.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodConditionView {
    /// The condition's type (`Ready`).
    #[serde(default, rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    #[serde(default)]
    pub status: String,
    /// When the status last changed.
    #[serde(default)]
    pub last_transition_time: Option<Time>,
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

kctrl_client::resource_view!(PodView => Pod, metadata: CompactObjectMeta);

/// A JSON list that may be `null` (as k8s-openapi's types accept it), held at its length (it
/// is cached as long as the Pod exists).
fn list<'de, D, T>(deserializer: D) -> Result<Vec<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    let mut list = Option::<Vec<T>>::deserialize(deserializer)?.unwrap_or_default();
    list.shrink_to_fit();
    Ok(list)
}

/// The Ready conditions of a JSON list of conditions.
fn ready_conditions<'de, D>(deserializer: D) -> Result<Vec<PodConditionView>, D::Error>
where
    D: Deserializer<'de>,
{
    let mut conditions: Vec<PodConditionView> = list(deserializer)?;
    conditions.retain(|c| c.type_ == READY);
    conditions.shrink_to_fit();
    Ok(conditions)
}

impl From<&Pod> for PodView {
    fn from(pod: &Pod) -> Self {
        Self {
            metadata: CompactObjectMeta::from(&pod.metadata).without_managed_fields(),
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
                    conditions: s
                        .conditions
                        .iter()
                        .flatten()
                        .filter(|c| c.type_ == READY)
                        .map(|c| PodConditionView {
                            type_: c.type_.clone(),
                            status: c.status.clone(),
                            last_transition_time: c.last_transition_time.clone(),
                        })
                        .collect(),
                    container_statuses: statuses(s.container_statuses.as_ref()),
                    init_container_statuses: statuses(s.init_container_statuses.as_ref()),
                }
            }),
        }
    }
}

/// Reads a `Pod` message (fields numbered as in upstream's `k8s.io/api/core/v1/generated.proto`):
/// `metadata` (1) through the generated `ObjectMeta` decoder; of the spec (2) `nodeName` (10)
/// and `initContainers` (20: `name` 1, `restartPolicy` 24); of the status (3) `phase` (1),
/// `conditions` (2: `type` 1, `status` 2, `lastTransitionTime` 4), `containerStatuses` (8) and
/// `initContainerStatuses` (10) (`name` 1, `restartCount` 5). Every other field is stepped
/// over unread.
impl FromProtobuf for PodView {
    fn from_protobuf(message: &[u8]) -> Result<Self, ProtobufError> {
        let mut pod = MessageReader::new(message, "Pod");
        let mut view = PodView::default();
        // The generated decoder fills k8s-openapi's ObjectMeta (skipping managedFields), which
        // is then laid out compactly; the ObjectMeta is dropped right away.
        let mut metadata = None;
        while let Some((field, wire)) = pod.next_field()? {
            match field {
                1 => pod.object_meta(wire, metadata.get_or_insert_with(ObjectMeta::default))?,
                2 => {
                    let spec = view.spec.get_or_insert_with(Default::default);
                    read_spec(pod.message(wire)?, spec)?;
                }
                3 => {
                    let status = view.status.get_or_insert_with(Default::default);
                    read_status(pod.message(wire)?, status)?;
                }
                _ => pod.skip(wire)?,
            }
        }
        if let Some(metadata) = metadata {
            view.metadata = CompactObjectMeta::from(&metadata);
        }
        Ok(view)
    }
}

/// `PodSpec`: `nodeName`, `initContainers`.
fn read_spec(mut spec: MessageReader<'_>, view: &mut PodViewSpec) -> Result<(), ProtobufError> {
    while let Some((field, wire)) = spec.next_field()? {
        match field {
            10 => view.node_name = non_empty(Some(spec.string(wire)?)),
            20 => {
                let mut container = spec.message(wire)?;
                let mut c = ContainerView::default();
                while let Some((field, wire)) = container.next_field()? {
                    match field {
                        1 => c.name = container.string(wire)?,
                        24 => c.restart_policy = Some(container.string(wire)?),
                        _ => container.skip(wire)?,
                    }
                }
                push(&mut view.init_containers, c);
            }
            _ => spec.skip(wire)?,
        }
    }
    Ok(())
}

/// `PodStatus`: `phase`, the Ready `conditions`, the container statuses' restart counts.
fn read_status(
    mut status: MessageReader<'_>,
    view: &mut PodViewStatus,
) -> Result<(), ProtobufError> {
    while let Some((field, wire)) = status.next_field()? {
        match field {
            1 => view.phase = non_empty(Some(status.string(wire)?)),
            2 => {
                let mut condition = status.message(wire)?;
                let mut c = PodConditionView::default();
                while let Some((field, wire)) = condition.next_field()? {
                    match field {
                        1 => c.type_ = condition.string(wire)?,
                        2 => c.status = condition.string(wire)?,
                        4 => c.last_transition_time = condition.time(wire)?,
                        _ => condition.skip(wire)?,
                    }
                }
                if c.type_ == READY {
                    push(&mut view.conditions, c);
                }
            }
            8 => push(
                &mut view.container_statuses,
                read_container_status(status.message(wire)?)?,
            ),
            10 => push(
                &mut view.init_container_statuses,
                read_container_status(status.message(wire)?)?,
            ),
            _ => status.skip(wire)?,
        }
    }
    Ok(())
}

/// `ContainerStatus`: `name`, `restartCount`.
fn read_container_status(
    mut status: MessageReader<'_>,
) -> Result<ContainerStatusView, ProtobufError> {
    let mut c = ContainerStatusView::default();
    while let Some((field, wire)) = status.next_field()? {
        match field {
            1 => c.name = status.string(wire)?,
            5 => c.restart_count = status.int32(wire)?,
            _ => status.skip(wire)?,
        }
    }
    Ok(c)
}

impl PodView {
    /// `namespace/name`, upstream's `PodKey`.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace(), self.name())
    }

    /// The Pod's namespace ("" if unset).
    pub fn namespace(&self) -> &str {
        ObjectMetaAccess::namespace(&self.metadata).unwrap_or("")
    }

    /// The Pod's name ("" if unset).
    pub fn name(&self) -> &str {
        ObjectMetaAccess::name(&self.metadata).unwrap_or("")
    }

    /// The Pod's UID ("" if unset).
    pub fn uid(&self) -> &str {
        self.metadata.uid().unwrap_or("")
    }

    /// The Pod's labels.
    pub fn labels(&self) -> &StringMap {
        self.metadata.labels()
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
    pub fn ready_condition(&self) -> Option<&PodConditionView> {
        self.status
            .as_ref()?
            .conditions
            .iter()
            .find(|c| c.type_ == READY)
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
            .find(|c| c.type_ == READY && c.status == "True")
            .and_then(|c| c.last_transition_time.as_ref())
    }

    /// Whether the Pod has neither succeeded nor failed and is not being deleted
    /// (`IsPodActive`).
    pub fn is_active(&self) -> bool {
        !self.is_terminal() && self.metadata.deletion_timestamp().is_none()
    }

    /// Whether the Pod's phase is Succeeded or Failed (`podutil.IsPodTerminal`).
    pub fn is_terminal(&self) -> bool {
        matches!(self.phase(), "Succeeded" | "Failed")
    }

    /// Whether the Pod is being deleted and not yet terminal (`IsPodTerminating`).
    pub fn is_terminating(&self) -> bool {
        !self.is_terminal() && self.metadata.deletion_timestamp().is_some()
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
    pub fn controller_ref(&self) -> Option<&CompactOwnerReference> {
        self.metadata.controller_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A Pod with every field the controllers read set, and much that they do not.
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
        "conditions": [
          {"type": "PodScheduled", "status": "True",
           "lastTransitionTime": "2026-11-24T01:00:01Z"},
          {"type": "Ready", "status": "True", "reason": "", "lastProbeTime": null,
           "lastTransitionTime": "2026-11-24T01:00:30Z"}],
        "initContainerStatuses": [
          {"name": "proxy", "ready": true, "restartCount": 4, "image": "envoy", "imageID": ""},
          {"name": "setup", "ready": true, "restartCount": 9, "image": "busybox", "imageID": ""}],
        "containerStatuses": [{"name": "web", "ready": true, "restartCount": 2,
          "image": "nginx:1.27", "imageID": ""}]}
    }"#;

    /// A terminating Pod (finalizer, owner reference, labels, annotations, Running and Ready,
    /// managedFields) as a real kube-apiserver 1.36 sent it in JSON and in protobuf.
    const REAL_JSON: &str = include_str!("../testdata/pod-terminating.json");
    const REAL_PROTOBUF: &[u8] = include_bytes!("../testdata/pod-terminating.pb");

    #[test]
    fn the_view_carries_every_field_the_controllers_read() {
        let view: PodView = serde_json::from_str(POD).unwrap();
        let full: Pod = serde_json::from_str(POD).unwrap();
        assert_eq!(view, PodView::from(&full));
        assert!(view.metadata.managed_fields().is_empty());
        assert_eq!(view.metadata.labels().to_btree_map(), full.metadata.labels);
        assert_eq!(
            view.metadata.annotations().to_btree_map(),
            full.metadata.annotations
        );
        assert_eq!(view.metadata.resource_version(), Some("4711"));
        // Everything but managedFields is kept.
        assert_eq!(
            view.metadata.to_object_meta(),
            ObjectMeta {
                managed_fields: None,
                ..full.metadata.clone()
            }
        );
        assert_eq!(view.key(), "prod/web-x2x9z");
        assert_eq!(view.uid(), "pod-uid");
        assert_eq!(view.controller_ref().unwrap().uid(), "rs-uid");
        assert_eq!(view.node_name(), "node-a");
        assert_eq!(view.phase(), "Running");
        assert!(view.is_ready() && view.is_active() && !view.is_terminating());
        assert_eq!(
            view.ready_time().map(|t| t.0.to_string()).as_deref(),
            Some("2026-11-24T01:00:30Z")
        );
        // Only the Ready condition is kept.
        assert_eq!(view.status.as_ref().unwrap().conditions.len(), 1);
        // The sidecar's restarts count as sidecar restarts; the plain init container's not.
        assert_eq!(view.max_container_restarts(), (2, 4));
    }

    #[test]
    fn managed_fields_are_stepped_over_unread_and_json_lists_sized_exactly() {
        // An entry no decoder would accept: skipped, not checked.
        let pod = POD.replace(
            r#""operation": "Update"}"#,
            r#""operation": "Update", "time": "not a time", "fieldsV1": 7}"#,
        );
        assert_ne!(pod, POD);
        let view: PodView = serde_json::from_str(&pod).unwrap();
        assert_eq!(view, serde_json::from_str::<PodView>(POD).unwrap());
        assert!(view.metadata.managed_fields().is_empty());
        // Two conditions decoded, one kept; each list at its length.
        let status = view.status.as_ref().unwrap();
        assert_eq!(status.conditions.capacity(), 1);
        assert_eq!(status.init_container_statuses.capacity(), 2);
        assert_eq!(status.container_statuses.capacity(), 1);
    }

    #[test]
    fn the_view_from_protobuf_equals_the_view_from_json() {
        let json: PodView = serde_json::from_str(REAL_JSON).unwrap();
        let pb: PodView = kctrl_client::protobuf::from_enveloped(REAL_PROTOBUF).unwrap();
        assert_eq!(pb, json);
        // The fixture really carries what the comparison is meant to cover.
        let m = &pb.metadata;
        assert!(m.deletion_timestamp().is_some() && m.deletion_grace_period_seconds().is_some());
        assert!(m.owner_references()[0].controller() == Some(true));
        assert!(m.finalizers().next().is_some());
        assert!(!m.labels().is_empty() && !m.annotations().is_empty());
        assert!(m.creation_timestamp().is_some() && m.generation().is_some());
        assert!(m.managed_fields().is_empty());
        assert_eq!(pb.phase(), "Running");
        assert_eq!(pb.node_name(), "kwok-node-0");
        assert!(pb.is_ready() && pb.ready_time().is_some() && pb.is_terminating());
        let status = pb.status.as_ref().unwrap();
        assert_eq!(status.container_statuses.len(), 1);
        // Cached for the Pod's lifetime: the lists are held at their length, not with the
        // spare room of `Vec::push`.
        assert_eq!(status.container_statuses.capacity(), 1);
        assert_eq!(status.conditions.capacity(), status.conditions.len());
        assert_eq!(status.container_statuses[0].name, "web");
        // And matches the full Pod's JSON decoding, field for field.
        let full: Pod = serde_json::from_str(REAL_JSON).unwrap();
        assert_eq!(pb, PodView::from(&full));
    }

    #[test]
    fn a_truncated_protobuf_pod_is_an_error_not_a_partial_view() {
        let cut = &REAL_PROTOBUF[..REAL_PROTOBUF.len() / 2];
        assert!(kctrl_client::protobuf::from_enveloped::<PodView>(cut).is_err());
    }

    #[test]
    fn protobuf_fields_the_view_keeps_and_those_it_steps_over() {
        // metadata {name: "p"}
        let mut message = b"\x0a\x03\x0a\x01p".to_vec();
        // spec {nodeName (10): "n", hostname (16): "h",
        //       initContainers (20): {name: "s", image (2): "i", restartPolicy (24): "Always"}}
        message.extend_from_slice(b"\x12\x19\x52\x01n\x82\x01\x01h");
        message.extend_from_slice(b"\xa2\x01\x0f\x0a\x01s\x12\x01i\xc2\x01\x06Always");
        // status {phase: "", podIP (6): "ip",
        //         conditions (2): {type: "Ready", status: "False", reason (5): "x"},
        //         conditions (2): {type: "Initialized", status: "True"},
        //         containerStatuses (8): {name: "c", ready (4): true, restartCount (5): 3}}
        let status: &[u8] = b"\x0a\x00\x32\x02ip\
            \x12\x11\x0a\x05Ready\x12\x05False\x2a\x01x\
            \x12\x13\x0a\x0bInitialized\x12\x04True\
            \x42\x07\x0a\x01c\x20\x01\x28\x03";
        message.push(0x1a);
        message.push(status.len() as u8);
        message.extend_from_slice(status);

        let view = PodView::from_protobuf(&message).unwrap();
        assert_eq!(view.name(), "p");
        assert_eq!(
            view.spec,
            Some(PodViewSpec {
                node_name: Some("n".into()),
                init_containers: vec![ContainerView {
                    name: "s".into(),
                    restart_policy: Some("Always".into()),
                }],
            })
        );
        // An empty phase is no phase; only the Ready condition is kept.
        assert_eq!(
            view.status,
            Some(PodViewStatus {
                phase: None,
                conditions: vec![PodConditionView {
                    type_: "Ready".into(),
                    status: "False".into(),
                    last_transition_time: None,
                }],
                container_statuses: vec![ContainerStatusView {
                    name: "c".into(),
                    restart_count: 3,
                }],
                init_container_statuses: Vec::new(),
            })
        );
        let err = PodView::from_protobuf(&message[..message.len() - 1]).unwrap_err();
        assert!(err.to_string().contains("Pod"), "{err}");
    }

    #[test]
    fn terminal_and_terminating_pods() {
        let mut view: PodView = serde_json::from_str(POD).unwrap();
        view.metadata
            .edit(|m| m.deletion_timestamp = m.creation_timestamp.clone());
        assert!(!view.is_active() && view.is_terminating());
        view.status.as_mut().unwrap().phase = Some("Failed".into());
        assert!(!view.is_active() && !view.is_terminating() && view.is_terminal());
    }

    #[test]
    fn a_pod_without_status_or_metadata_decodes() {
        let bare: PodView = serde_json::from_str(r#"{"kind":"Pod"}"#).unwrap();
        assert_eq!(bare.metadata, CompactObjectMeta::default());
        assert_eq!(bare.phase(), "");
        assert!(bare.is_active() && !bare.is_ready() && !bare.is_terminal());
        assert_eq!(bare.max_container_restarts(), (0, 0));
        let nulls: PodView = serde_json::from_str(
            r#"{"spec": {"initContainers": null},
                "status": {"conditions": null, "containerStatuses": null}}"#,
        )
        .unwrap();
        assert_eq!(nulls.status, Some(PodViewStatus::default()));
        assert_eq!(
            nulls,
            PodView::from(
                &serde_json::from_str::<Pod>(r#"{"spec": {"containers": []}, "status": {}}"#)
                    .unwrap()
            )
        );
    }
}

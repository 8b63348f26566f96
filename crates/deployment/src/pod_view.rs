//! What the controller reads of a Pod, and the Pod cache's owner index.
//!
//! The Deployment controller never writes Pods and reads only a few of their fields, so its Pod
//! informer caches a [`PodView`] instead of a whole `Pod`: the decoder skips the spec, most of
//! the status and `managedFields` while parsing, which is most of a Pod's size. The fields kept
//! are exactly those the controller's logic reads (upstream's Deployment controller reads the
//! same ones); the compiler enforces it, since the controller has no other Pod type to read.
//!
//! | field | read by |
//! |---|---|
//! | `metadata.namespace`, `metadata.name` | cache keys, logs |
//! | `metadata.ownerReferences` (controller) | `getPodMapForDeployment` (Recreate rollouts), `getDeploymentForPod` (pod deletion) |
//! | `metadata.uid`, `metadata.resourceVersion` | identity and cache bookkeeping |
//! | `metadata.deletionTimestamp` | terminating pods still count as running for Recreate |
//! | `status.phase` | `oldPodsRunning` (Recreate waits for pods not yet Failed or Succeeded) |
//!
//! The rest of `metadata` (labels, annotations, timestamps) is kept as well: it is small, and
//! keeps the view a faithful subset of the Pod for anyone reading the cache.
//!
//! The view decodes from JSON and from protobuf ([`FromProtobuf`]), to the same value. With
//! protobuf (the binary's default, as kube-controller-manager's), the skipped spec and status
//! fields are stepped over by their length instead of being scanned byte by byte.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kctrl_client::protobuf::{FromProtobuf, MessageReader, ProtobufError, non_empty};
use kctrl_informer::IndexFn;
use serde::Deserialize;

/// A Pod as the Deployment controller reads it (see the [module docs](self) for why each field
/// is here). Decoded straight from a Pod's JSON; `managedFields` are skipped.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct PodView {
    /// The Pod's metadata, without `managedFields`.
    #[serde(
        default,
        deserialize_with = "kctrl_client::metadata_without_managed_fields"
    )]
    pub metadata: ObjectMeta,
    /// The part of the status the controller reads.
    #[serde(default)]
    pub status: Option<PodViewStatus>,
}

/// The part of a Pod's status the controller reads.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct PodViewStatus {
    /// `status.phase`: Pending, Running, Succeeded, Failed or Unknown.
    #[serde(default)]
    pub phase: Option<String>,
}

kctrl_client::resource_view!(PodView => Pod);

impl PodView {
    /// The Pod's phase, if reported.
    pub fn phase(&self) -> Option<&str> {
        self.status.as_ref().and_then(|s| s.phase.as_deref())
    }
}

/// Reads a `Pod` message (fields numbered as in upstream's `k8s.io/api/core/v1/generated.proto`):
/// `metadata` (1) through the generated `ObjectMeta` decoder, `status.phase` (3.1); the spec (2)
/// and the rest of the status are stepped over unread.
impl FromProtobuf for PodView {
    fn from_protobuf(message: &[u8]) -> Result<Self, ProtobufError> {
        let mut pod = MessageReader::new(message, "Pod");
        let mut view = PodView::default();
        while let Some((field, wire)) = pod.next_field()? {
            match field {
                1 => pod.object_meta(wire, &mut view.metadata)?,
                3 => {
                    let mut status = pod.message(wire)?;
                    let view_status = view.status.get_or_insert_with(Default::default);
                    while let Some((field, wire)) = status.next_field()? {
                        match field {
                            1 => view_status.phase = non_empty(Some(status.string(wire)?)),
                            _ => status.skip(wire)?,
                        }
                    }
                }
                _ => pod.skip(wire)?,
            }
        }
        Ok(view)
    }
}

impl From<&Pod> for PodView {
    fn from(pod: &Pod) -> Self {
        Self {
            metadata: ObjectMeta {
                managed_fields: None,
                ..pod.metadata.clone()
            },
            status: pod.status.as_ref().map(|s| PodViewStatus {
                phase: s.phase.clone(),
            }),
        }
    }
}

/// Name of the Pod cache's index by the UID of each Pod's controller (its controlling owner
/// reference), which maps a ReplicaSet to its Pods without scanning the cache.
pub const CONTROLLER_UID_INDEX: &str = "controller-uid";

/// The index function of [`CONTROLLER_UID_INDEX`].
pub fn controller_uid_index() -> IndexFn<PodView> {
    Arc::new(|pod: &PodView| {
        kctrl_controller_ref::get_controller_of(&pod.metadata)
            .map(|owner| vec![owner.uid.clone()])
            .unwrap_or_default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A Pod as a kubelet and the API server report it, with every field the controller
    /// reads set, and much that it does not.
    const POD: &str = r#"{
      "apiVersion": "v1", "kind": "Pod",
      "metadata": {
        "name": "web-7d4b9c-x2x9z", "generateName": "web-7d4b9c-", "namespace": "prod",
        "uid": "pod-uid", "resourceVersion": "4711",
        "creationTimestamp": "2026-11-24T01:00:00Z",
        "deletionTimestamp": "2026-11-24T02:00:00Z", "deletionGracePeriodSeconds": 30,
        "labels": {"app": "web", "pod-template-hash": "7d4b9c"},
        "annotations": {"kubectl.kubernetes.io/restartedAt": "2026-11-24T00:59:00Z"},
        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-7d4b9c",
          "uid": "rs-uid", "controller": true, "blockOwnerDeletion": true}],
        "managedFields": [{"manager": "kube-controller-manager", "operation": "Update",
          "apiVersion": "v1", "fieldsType": "FieldsV1",
          "fieldsV1": {"f:metadata": {"f:labels": {".": {}, "f:app": {}}}}}]
      },
      "spec": {"containers": [{"name": "web", "image": "nginx:1.27",
        "ports": [{"containerPort": 80}]}], "nodeName": "kwok-node-0"},
      "status": {"phase": "Running", "podIP": "10.0.0.7",
        "conditions": [{"type": "Ready", "status": "True"}],
        "containerStatuses": [{"name": "web", "ready": true, "restartCount": 0,
          "image": "nginx:1.27", "imageID": "", "state": {"running": {}}}]}
    }"#;

    /// The same terminating Pod (finalizer, owner reference, labels, annotations, Running,
    /// managedFields) as a real kube-apiserver 1.36 sent it in JSON and in protobuf.
    const REAL_JSON: &str = include_str!("../testdata/pod-terminating.json");
    const REAL_PROTOBUF: &[u8] = include_bytes!("../testdata/pod-terminating.pb");

    #[test]
    fn the_view_from_protobuf_equals_the_view_from_json() {
        let json: PodView = serde_json::from_str(REAL_JSON).unwrap();
        let pb: PodView = kctrl_client::protobuf::from_enveloped(REAL_PROTOBUF).unwrap();
        assert_eq!(pb, json);
        // The fixture really carries what the comparison is meant to cover.
        let m = &pb.metadata;
        assert!(m.deletion_timestamp.is_some() && m.deletion_grace_period_seconds.is_some());
        assert!(m.owner_references.as_ref().unwrap()[0].controller == Some(true));
        assert!(m.finalizers.is_some() && m.labels.is_some() && m.annotations.is_some());
        assert!(m.creation_timestamp.is_some() && m.generation.is_some());
        assert_eq!(pb.phase(), Some("Running"));
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
    fn the_view_carries_every_field_the_controller_reads() {
        let view: PodView = serde_json::from_str(POD).unwrap();
        let full: Pod = serde_json::from_str(POD).unwrap();
        let m = &view.metadata;
        assert_eq!(m.name.as_deref(), Some("web-7d4b9c-x2x9z"));
        assert_eq!(m.namespace.as_deref(), Some("prod"));
        assert_eq!(m.uid.as_deref(), Some("pod-uid"));
        assert_eq!(m.resource_version.as_deref(), Some("4711"));
        assert_eq!(m.labels, full.metadata.labels);
        assert_eq!(m.owner_references, full.metadata.owner_references);
        assert_eq!(m.deletion_timestamp, full.metadata.deletion_timestamp);
        assert_eq!(view.phase(), Some("Running"));
        // Everything in metadata but managedFields is kept, so From<&Pod> and decoding agree.
        assert!(m.managed_fields.is_none());
        assert_eq!(view, PodView::from(&full));
    }

    #[test]
    fn the_owner_index_names_the_controller_only() {
        let view: PodView = serde_json::from_str(POD).unwrap();
        assert_eq!(controller_uid_index()(&view), vec!["rs-uid".to_owned()]);
        let mut orphan = view.clone();
        orphan.metadata.owner_references.as_mut().unwrap()[0].controller = Some(false);
        assert!(controller_uid_index()(&orphan).is_empty());
    }

    #[test]
    fn protobuf_fields_the_view_does_not_keep_are_stepped_over() {
        // metadata {name: "p"}, spec {nodeName (10): "n"}, status {phase: "", podIP (6): "ip"}
        let message = b"\x0a\x03\x0a\x01p\x12\x03\x52\x01n\x1a\x06\x0a\x00\x32\x02ip";
        let view = PodView::from_protobuf(message).unwrap();
        assert_eq!(view.metadata.name.as_deref(), Some("p"));
        // An empty status message is a status, as `"status": {}` is in JSON; an empty phase is
        // no phase.
        assert_eq!(view.status, Some(PodViewStatus { phase: None }));
        let err = PodView::from_protobuf(&message[..message.len() - 1]).unwrap_err();
        assert!(err.to_string().contains("Pod"), "{err}");
    }

    #[test]
    fn a_pod_without_status_or_metadata_decodes() {
        let view: PodView = serde_json::from_str(r#"{"kind":"Pod"}"#).unwrap();
        assert_eq!(view.phase(), None);
        assert_eq!(view.metadata, ObjectMeta::default());
    }
}

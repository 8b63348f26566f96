//! What the controller reads of a Pod, and the Pod cache's owner index.
//!
//! The Deployment controller never writes Pods and reads few of their fields (their
//! controller reference, to map Pods to ReplicaSets, and their phase, for Recreate rollouts),
//! so its Pod informer caches a view instead of a whole `Pod`: kctrl-controller-ref's
//! [`PodView`], the view it shares with the ReplicaSet controller, so that a process running
//! both watches and caches each Pod once. Its module docs list the fields kept and which rule
//! of which controller reads each; it decodes from JSON and from protobuf to the same value.
//!
//! This module re-exports the view and adds the index the controller looks Pods up by.

use std::sync::Arc;

use kctrl_informer::IndexFn;

pub use kctrl_controller_ref::pod_view::{
    ContainerStatusView, ContainerView, PodConditionView, PodView, PodViewSpec, PodViewStatus,
};

/// Name of the Pod cache's index by the UID of each Pod's controller (its controlling owner
/// reference), which maps a ReplicaSet to its Pods without scanning the cache.
pub const CONTROLLER_UID_INDEX: &str = "controller-uid";

/// The index function of [`CONTROLLER_UID_INDEX`].
pub fn controller_uid_index() -> IndexFn<PodView> {
    Arc::new(|pod: &PodView| {
        pod.controller_ref()
            .map(|owner| vec![owner.uid().to_owned()])
            .unwrap_or_default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A Pod controlled by the ReplicaSet `rs-uid`.
    const POD: &str = r#"{
      "metadata": {"name": "web-7d4b9c-x2x9z", "namespace": "prod",
        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-7d4b9c",
          "uid": "rs-uid", "controller": true, "blockOwnerDeletion": true}]}
    }"#;

    #[test]
    fn the_owner_index_names_the_controller_only() {
        let view: PodView = serde_json::from_str(POD).unwrap();
        assert_eq!(controller_uid_index()(&view), vec!["rs-uid".to_owned()]);
        let mut orphan = view.clone();
        orphan
            .metadata
            .edit(|m| m.owner_references.as_mut().unwrap()[0].controller = Some(false));
        assert!(controller_uid_index()(&orphan).is_empty());
    }
}

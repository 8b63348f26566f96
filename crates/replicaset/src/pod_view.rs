//! What the ReplicaSet controller reads of a Pod, and the Pod cache's controller index.
//!
//! The controller's Pod informer caches kctrl-controller-ref's [`PodView`], the view of a Pod
//! it shares with the Deployment controller (one Pod watch and cache when both run in one
//! process); its module docs list each field and which rule reads it. This module re-exports
//! it and adds the index the controller looks its Pods up by.

use std::sync::Arc;

use kctrl_informer::IndexFn;

pub use kctrl_controller_ref::pod_view::{
    ContainerStatusView, ContainerView, PodConditionView, PodView, PodViewSpec, PodViewStatus,
};

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
        let owner = pod.controller_ref().map(|r| (r.kind(), r.name(), r.uid()));
        vec![pod_controller_index_key(pod.namespace(), owner)]
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_controller_index_keys_owned_pods_and_orphans() {
        let view: PodView = serde_json::from_str(
            r#"{"metadata": {"name": "web-1", "namespace": "prod",
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                  "name": "web", "uid": "rs-uid", "controller": true}]}}"#,
        )
        .unwrap();
        assert_eq!(
            pod_controller_index()(&view),
            vec!["prod/ReplicaSet/web/rs-uid".to_owned()]
        );
        let mut orphan = view.clone();
        orphan.metadata.edit(|m| m.owner_references = None);
        assert_eq!(pod_controller_index()(&orphan), vec!["prod".to_owned()]);
        // An owner reference that is not the controller's leaves the Pod an orphan.
        let mut owned = view;
        owned
            .metadata
            .edit(|m| m.owner_references.as_mut().unwrap()[0].controller = Some(false));
        assert_eq!(pod_controller_index()(&owned), vec!["prod".to_owned()]);
    }
}

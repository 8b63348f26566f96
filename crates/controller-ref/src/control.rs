//! The writes a claim makes, behind small traits so a controller can swap them (upstream's
//! `RSControlInterface` and the patch part of `PodControlInterface`).
//!
//! The real implementations send a strategic-merge PATCH through [`kctrl_client::Api`]. Tests
//! use them unchanged on the in-memory fake API (`kctrl-fake`) and assert on the recorded
//! actions.

use std::sync::Arc;

use futures::FutureExt;
use futures::future::BoxFuture;
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::Pod;
use kctrl_client::{Api, Client, Error, Patch, PatchParams};
use serde_json::Value;

/// Patches ReplicaSets (upstream's `RSControlInterface`).
pub trait ReplicaSetControl: Send + Sync {
    /// Applies the strategic-merge patch `patch` to ReplicaSet `namespace/name`.
    fn patch_replica_set<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
        patch: Value,
    ) -> BoxFuture<'a, Result<(), Error>>;
}

/// Patches Pods (the patch part of upstream's `PodControlInterface`).
pub trait PodControl: Send + Sync {
    /// Applies the strategic-merge patch `patch` to Pod `namespace/name`.
    fn patch_pod<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
        patch: Value,
    ) -> BoxFuture<'a, Result<(), Error>>;
}

/// [`ReplicaSetControl`] through the API (upstream's `RealRSControl`).
#[derive(Clone, Debug)]
pub struct RealReplicaSetControl {
    client: Client,
}

impl RealReplicaSetControl {
    /// Writes through `client`.
    pub fn new(client: Client) -> Self {
        Self { client }
    }
}

impl ReplicaSetControl for RealReplicaSetControl {
    fn patch_replica_set<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
        patch: Value,
    ) -> BoxFuture<'a, Result<(), Error>> {
        let api = Api::<ReplicaSet>::namespaced(self.client.clone(), namespace);
        async move {
            api.patch(name, &PatchParams::default(), &Patch::Strategic(patch))
                .await
                .map(drop)
        }
        .boxed()
    }
}

/// [`PodControl`] through the API (upstream's `RealPodControl`).
#[derive(Clone, Debug)]
pub struct RealPodControl {
    client: Client,
}

impl RealPodControl {
    /// Writes through `client`.
    pub fn new(client: Client) -> Self {
        Self { client }
    }
}

impl PodControl for RealPodControl {
    fn patch_pod<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
        patch: Value,
    ) -> BoxFuture<'a, Result<(), Error>> {
        let api = Api::<Pod>::namespaced(self.client.clone(), namespace);
        async move {
            api.patch(name, &PatchParams::default(), &Patch::Strategic(patch))
                .await
                .map(drop)
        }
        .boxed()
    }
}

impl<T: ReplicaSetControl + ?Sized> ReplicaSetControl for Arc<T> {
    fn patch_replica_set<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
        patch: Value,
    ) -> BoxFuture<'a, Result<(), Error>> {
        (**self).patch_replica_set(namespace, name, patch)
    }
}

impl<T: PodControl + ?Sized> PodControl for Arc<T> {
    fn patch_pod<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
        patch: Value,
    ) -> BoxFuture<'a, Result<(), Error>> {
        (**self).patch_pod(namespace, name, patch)
    }
}

//! The sharded Deployment controller: several active replicas, each syncing the Deployments
//! of the namespaces whose hash falls in the buckets its [`ShardMember`](kctrl_shard::ShardMember) holds.
//!
//! A Deployment, its ReplicaSets and its Pods always share a namespace, so sharding by
//! namespace ([`shard_hash_of_key`]) keeps everything one sync reads and writes in one
//! shard. (The object's uid would not: a ReplicaSet's uid hashes elsewhere than its
//! Deployment's.)
//!
//! What [`DeploymentControllerRunner`](crate::wiring::DeploymentControllerRunner) does with a
//! member ([`RunnerOptions::shard`](crate::wiring::RunnerOptions::shard)):
//!
//! * before each sync a worker asks the member for a [`ReconcileGuard`] for the key's
//!   namespace hash; a key whose bucket is not active here is dropped (forgotten by the
//!   queue, counted with [`ShardMember::keys_dropped`](kctrl_shard::ShardMember::keys_dropped)) — the replica that holds the bucket
//!   syncs it;
//! * the sync runs with its guard in scope, and every write the controller sends goes
//!   through [`FencedWrites`], which refuses it unless the guard is still valid; the sync is
//!   also abandoned at once when the member stops (its Lease not renewed within the renew
//!   deadline);
//! * the member is driven by kctrl-runtime's [`Sharding`](kctrl_runtime::shard::Sharding): the
//!   informers cache the buckets the member holds or is about to hold (filtered by the API
//!   server when it has the `ShardedListAndWatch` feature gate, on the client otherwise), a
//!   bucket becomes active once the caches cover it, and then its cached Deployments are
//!   enqueued, so that nothing dropped while the bucket was another's is lost.

use std::sync::Arc;

use bytes::Bytes;
use futures::FutureExt;
use futures::future::BoxFuture;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::APIResourceList;
use k8s_openapi::apimachinery::pkg::version::Info;
use kctrl_client::sharding::hash_field;
use kctrl_client::{ApiRequest, Backend, Client, Error, WatchFrames};
use kctrl_shard::ReconcileGuard;

tokio::task_local! {
    /// The guard of the sync running on this task.
    static GUARD: Arc<ReconcileGuard>;
}

/// The hash that places a work-queue key (`namespace/name`): the 64-bit FNV-1a hash of its
/// namespace, as the API server's `object.metadata.namespace` shard selector computes it.
pub fn shard_hash_of_key(key: &str) -> u64 {
    let namespace = key.split_once('/').map_or("", |(ns, _)| ns);
    hash_field(namespace)
}

/// Runs `sync` with `guard` in scope for [`FencedWrites`].
pub(crate) async fn with_guard<F: Future>(guard: Arc<ReconcileGuard>, sync: F) -> F::Output {
    GUARD.scope(guard, sync).await
}

/// Whether a verb changes something on the server.
fn is_write(verb: &str) -> bool {
    matches!(verb, "create" | "update" | "patch" | "delete")
}

/// A backend that lets a write through only from a sync whose [`ReconcileGuard`] is still
/// valid (see [`ReconcileGuard::is_valid`]): a replica whose Lease was not renewed in time,
/// or a write outside any sync, is refused before anything is sent. Reads and watches pass.
pub struct FencedWrites {
    inner: Arc<dyn Backend>,
}

impl std::fmt::Debug for FencedWrites {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FencedWrites").finish_non_exhaustive()
    }
}

impl FencedWrites {
    /// Fences the writes sent through `inner`.
    pub fn new(inner: Arc<dyn Backend>) -> Self {
        Self { inner }
    }

    /// `client` with its writes fenced.
    pub fn client(client: &Client) -> Client {
        Client::from_arc(
            Arc::new(Self::new(client.backend().clone())),
            client.default_namespace(),
        )
    }

    /// Why `request` may not be sent now, if it may not.
    fn refusal(request: &ApiRequest) -> Option<Error> {
        if !is_write(request.verb()) {
            return None;
        }
        let what = || {
            format!(
                "{} {}{}",
                request.verb(),
                request.resource.plural,
                request
                    .namespace
                    .as_deref()
                    .map(|ns| format!(" in namespace {ns}"))
                    .unwrap_or_default()
            )
        };
        match GUARD.try_with(|g| g.check()) {
            Ok(Ok(())) => None,
            Ok(Err(lost)) => Some(Error::InvalidRequest(format!(
                "{} refused: shard bucket {} is no longer held by this replica (its Lease was \
                 not renewed in time); another replica may own the object now",
                what(),
                lost.bucket
            ))),
            Err(_) => Some(Error::InvalidRequest(format!(
                "{} refused: a sharded controller writes only from a sync holding its shard's \
                 guard",
                what()
            ))),
        }
    }
}

impl Backend for FencedWrites {
    fn call(&self, request: ApiRequest) -> BoxFuture<'_, Result<Bytes, Error>> {
        if let Some(refused) = Self::refusal(&request) {
            return futures::future::ready(Err(refused)).boxed();
        }
        self.inner.call(request)
    }

    fn watch(&self, request: ApiRequest) -> BoxFuture<'_, Result<WatchFrames, Error>> {
        self.inner.watch(request)
    }

    fn server_version(&self) -> BoxFuture<'_, Result<Info, Error>> {
        self.inner.server_version()
    }

    fn api_resources<'a>(
        &'a self,
        group_version: &'a str,
    ) -> BoxFuture<'a, Result<APIResourceList, Error>> {
        self.inner.api_resources(group_version)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_hash_by_their_namespace() {
        assert_eq!(shard_hash_of_key("web/a"), hash_field("web"));
        assert_eq!(shard_hash_of_key("web/b"), shard_hash_of_key("web/a"));
        assert_ne!(shard_hash_of_key("db/a"), shard_hash_of_key("web/a"));
        // A cluster-scoped key has the empty namespace.
        assert_eq!(shard_hash_of_key("x"), hash_field(""));
    }
}

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

/// How often a write waiting to be sent (for a rate-limiter token, or a retry) checks that
/// its guard is still valid.
const RECHECK: std::time::Duration = std::time::Duration::from_millis(100);

/// A backend that lets a write through only from a sync whose [`ReconcileGuard`] is still
/// valid (see [`ReconcileGuard::is_valid`]): a replica whose Lease was not renewed in time,
/// or a write outside any sync, is refused before anything is sent. Reads and watches pass.
///
/// A write that waits inside the client (for a token of its rate limiter, or before a
/// retry) checks its guard again every 100 ms, and first thing when the process resumes
/// after being stopped (a SIGSTOP, a paused VM): its own timer fires in the same turn as
/// the wait's, and is polled first. A write already on the wire cannot be recalled.
pub struct FencedWrites {
    inner: Arc<dyn Backend>,
}

impl std::fmt::Debug for FencedWrites {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FencedWrites").finish_non_exhaustive()
    }
}

/// What a refused write says: the verb, the resource and the namespace.
fn describe(request: &ApiRequest) -> String {
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
}

fn lost_error(what: &str, lost: kctrl_shard::Lost) -> Error {
    Error::InvalidRequest(format!(
        "{what} refused: shard bucket {} is no longer held by this replica (its Lease was not \
         renewed in time); another replica may own the object now",
        lost.bucket
    ))
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
}

impl Backend for FencedWrites {
    fn call(&self, request: ApiRequest) -> BoxFuture<'_, Result<Bytes, Error>> {
        if !is_write(request.verb()) {
            return self.inner.call(request);
        }
        let what = describe(&request);
        let guard = match GUARD.try_with(Arc::clone) {
            Ok(guard) => guard,
            Err(_) => {
                return futures::future::ready(Err(Error::InvalidRequest(format!(
                    "{what} refused: a sharded controller writes only from a sync holding its \
                     shard's guard"
                ))))
                .boxed();
            }
        };
        if let Err(lost) = guard.check() {
            return futures::future::ready(Err(lost_error(&what, lost))).boxed();
        }
        let call = self.inner.call(request);
        async move {
            tokio::pin!(call);
            loop {
                tokio::select! {
                    biased;
                    () = tokio::time::sleep(RECHECK) => {
                        if let Err(lost) = guard.check() {
                            return Err(lost_error(&what, lost));
                        }
                    }
                    result = &mut call => return result,
                }
            }
        }
        .boxed()
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

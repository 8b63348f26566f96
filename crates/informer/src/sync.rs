//! Waiting for caches to fill (client-go's `WaitForNamedCacheSync` and `WaitFor`).
//!
//! Nothing polls: each [`HasSynced`] exposes a future that resolves when it syncs, or as
//! soon as it no longer can (an informer stopped before syncing, a removed handler), and
//! [`wait_for_cache_sync`] awaits them all or the cancellation, whichever comes first.

use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use tokio_util::sync::CancellationToken;

/// Something that becomes synced once: a [`SharedInformer`](crate::SharedInformer) (its
/// initial list is in the store) or a [`HandlerRegistration`](crate::HandlerRegistration)
/// (that, and the handler has been called for each object of it).
pub trait HasSynced: Send + Sync {
    /// Whether it has synced.
    fn has_synced(&self) -> bool;

    /// Resolves to true once synced, or to false as soon as it never can be: an informer
    /// stopped (cancelled, its `run` future dropped, or failed) or dropped before it synced; a
    /// registration removed, or its informer stopped, before its initial list reached the
    /// handler.
    fn synced(&self) -> BoxFuture<'_, bool>;
}

/// Waits until every one of `informers` has synced; logs "Waiting for caches to sync for
/// `name`" and then "Caches are synced for `name`". Returns false if `cancel` fires first
/// or one of them can no longer sync (it returns then, without waiting for the others).
///
/// ```no_run
/// # async fn demo(pods: kctrl_informer::SharedInformer<k8s_openapi::api::core::v1::Pod>,
/// #               cancel: tokio_util::sync::CancellationToken) {
/// use kctrl_informer::wait_for_cache_sync;
///
/// if !wait_for_cache_sync("pod-controller", &cancel, &[&pods]).await {
///     return; // shutting down
/// }
/// # }
/// ```
pub async fn wait_for_cache_sync(
    name: &str,
    cancel: &CancellationToken,
    informers: &[&dyn HasSynced],
) -> bool {
    tracing::info!(controller = name, "Waiting for caches to sync for {name}");
    let mut pending: FuturesUnordered<_> = informers.iter().map(|i| i.synced()).collect();
    // The first that can no longer sync ends the wait: the others need not be waited for.
    let all = async {
        while let Some(ok) = pending.next().await {
            if !ok {
                return false;
            }
        }
        true
    };
    let synced = tokio::select! {
        synced = all => synced,
        () = cancel.cancelled() => false,
    };
    if synced {
        tracing::info!(controller = name, "Caches are synced for {name}");
    } else {
        tracing::error!(controller = name, "Unable to sync caches for {name}");
    }
    synced
}

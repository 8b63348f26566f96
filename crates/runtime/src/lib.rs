//! A controller runtime over kctrl's shared informers and rate-limited work queue.
//!
//! A controller of resource `K` in a few lines, the shape kube-runtime's users know, on
//! client-go's machinery:
//!
//! ```no_run
//! use std::sync::Arc;
//! use std::time::Duration;
//! use k8s_openapi::api::apps::v1::Deployment;
//! use k8s_openapi::api::core::v1::ConfigMap;
//! use kctrl_informer::SharedInformerFactory;
//! use kctrl_runtime::{Action, Controller, Predicate};
//!
//! #[derive(Debug, thiserror::Error)]
//! enum Error {
//!     #[error(transparent)]
//!     Api(#[from] kctrl_client::Error),
//! }
//!
//! async fn reconcile(d: Arc<Deployment>, client: Arc<kctrl_client::Client>) -> Result<Action, Error> {
//!     // Read from the caches, write through `client`, e.g. with server-side apply.
//!     # let _ = (d, client);
//!     Ok(Action::await_change())
//! }
//!
//! # async fn demo(client: kctrl_client::Client) -> Result<(), Box<dyn std::error::Error>> {
//! let factory = SharedInformerFactory::new(client.clone(), Duration::from_secs(10 * 3600));
//! Controller::<Deployment>::new(&factory)
//!     .owns::<ConfigMap>()
//!     .with_predicate(Predicate::generation_changed())
//!     .workers(4)
//!     .run(
//!         reconcile,
//!         |_d, _err, _ctx| Action::rate_limited(),
//!         Arc::new(client),
//!         kctrl_runtime::shutdown_on_signal(),
//!     )
//!     .await?;
//! factory.shutdown().await;
//! # Ok(()) }
//! ```
//!
//! What it gives beyond the brevity:
//!
//! - **One cache per resource per process.** Informers come from the
//!   [`SharedInformerFactory`](kctrl_informer::SharedInformerFactory): two controllers that
//!   both read ConfigMaps share one list and one watch.
//! - **client-go's queue.** One key is never reconciled by two workers at once; a key
//!   enqueued during its reconcile runs once more after it; failures back off per key
//!   (exponential, 5 ms to 1000 s) under an overall token bucket; the `workqueue_*` metrics.
//! - **Priority lanes.** Keys from initial lists and resyncs wait behind live changes, so a
//!   restart's backlog does not delay what a user just did.
//! - **Panics contained.** A panicking reconcile or error policy fails its key (logged,
//!   counted in `controller_runtime_reconcile_panics_total`, retried rate-limited); the
//!   worker lives on.
//! - **Reads its own writes.** A reconcile records its writes on
//!   [`Controller::own_writes`]; the key is not reconciled again until the caches show them
//!   (creates, updates, applies and deletes; checked live after 30 s, and each record expires
//!   after 5 minutes as client-go's expectations do), so it does not act on the state before
//!   its own write ([`own_writes`]; Kubernetes' stale-controller mitigation, which the other
//!   runtimes lack).
//! - **Leader election that never overlaps.** [`Controller::run_leader_elected`] releases
//!   the Lease only after the workers have stopped; a lost Lease stops the controller at
//!   once (its reconciles in flight abandoned); a controller that stops stops leading.
//! - **Sharded controllers.** [`Controller::sharded`]: replicas find each other through
//!   Leases (`kctrl-shard`), split the objects by the hash of their namespace or UID, and
//!   each caches and reconciles only its range; a range changes hands only once its
//!   reconciles in flight have ended, and a replica that cannot renew stops before its Lease
//!   can expire ([`shard`]).
//! - **Metadata-only informers** for owned and watched resources
//!   ([`Controller::owns_metadata`], [`Controller::watches_metadata`]).
//! - **A bounded shutdown.** On cancel no new key is taken and the reconciles in flight
//!   finish, for at most [`Controller::shutdown_timeout`] (30 s by default, as
//!   controller-runtime's `GracefulShutdownTimeout`); past it they are aborted (a warning
//!   says so) and `run` returns. A reconcile that blocks its thread cannot be aborted: if the
//!   workers have not stopped [`SHUTDOWN_ABORT_GRACE`](controller::SHUTDOWN_ABORT_GRACE) (1 s)
//!   after the abort, they are left running and `run` returns [`RunError::ReconcilesStuck`]:
//!   the process should exit. Dropping the `run` future stops its workers and their reconciles
//!   too, and shuts the queue down, also before the caches have synced. The informers are the
//!   factory's, shared by its controllers: they run until
//!   [`SharedInformerFactory::shutdown`](kctrl_informer::SharedInformerFactory::shutdown), as a
//!   controller-runtime manager's caches do.
//!
//! | controller-runtime | kube-runtime | here |
//! |---|---|---|
//! | `builder.ControllerManagedBy(mgr).For(&Foo{})` | `Controller::new(api, cfg)` | [`Controller::new`]`(&factory)` |
//! | `.Named("foo")` | — (the reconciler's name in `Config`) | [`Controller::named`]`(&factory, "foo")` |
//! | `.Owns(&Deployment{})` | `.owns(api, cfg)` | [`Controller::owns`] |
//! | `.Owns(&Deployment{}, builder.OnlyMetadata)` | `.owns_stream(metadata_watcher(..))` | [`Controller::owns_metadata`] |
//! | `.Watches(obj, handler.EnqueueRequestsFromMapFunc(f))` | `.watches(api, cfg, f)` | [`Controller::watches`] |
//! | `.For(&Foo{}, builder.WithPredicates(predicate.GenerationChangedPredicate{}))` | `.predicate_filter(predicates::generation)` | [`Controller::with_predicate`] (the primary's updates only; `.WithEventFilter`, which filters every watch, has no counterpart) |
//! | `MaxConcurrentReconciles` | `Config::concurrency` | [`Controller::workers`] |
//! | `Reconcile(ctx, req) (Result, error)` | `reconcile(Arc<K>, Arc<Ctx>)` | the same as kube-runtime |
//! | `Result{RequeueAfter: d}` | `Action::requeue(d)` | [`Action::requeue`] |
//! | `mgr.Start(ctrl.SetupSignalHandler())` | `.shutdown_on_signal()` | [`shutdown_on_signal`] |
//! | `GracefulShutdownTimeout` in the manager's options (30 s) | — | [`Controller::shutdown_timeout`] (30 s) |
//! | `controller_runtime_reconcile_*` | — | [`metrics::ControllerMetrics`] |
//! | `LeaderElection: true` in the manager's options | — | [`Controller::run_leader_elected`] |
//! | — (sharding by hand: label selectors per replica) | — | [`Controller::sharded`] |
//! | `controllerutil.AddFinalizer` / `RemoveFinalizer` around cleanup | `finalizer::finalizer` | [`finalizer::finalizer`] |
//! | `mgr.GetFieldIndexer().IndexField(ctx, &Job{}, key, f)`, then `List(ctx, &jobs, client.MatchingFields{key: v})` | — | [`Controller::index`]`::<Job>(key, f)`, then [`Controller::cache`]`::<Job>().by_index(key, v)`; a controller's owned objects: [`index::controlled_by`] |
//! | `meta.SetStatusCondition` and friends (apimachinery) | — | [`conditions::set_status_condition`] and the rest of [`conditions`] |
//! | a reconciler test on the fake client, `envtest` | a reconcile called against a mocked client (`tower_test::mock`) | `kctrl_harness::TestHarness` on `kctrl_fake::FakeApi` (waits, events, a paused clock, a clean stop); `kctrl-testenv` |
//!
//! A guide from an empty crate to a tested controller of a custom resource:
//! `docs/writing-a-controller.md` in the kctrl repository.

#![forbid(unsafe_code)]

pub mod action;
pub mod conditions;
pub mod controller;
pub mod finalizer;
mod handlers;
pub mod index;
mod leader;
pub mod metrics;
pub mod own_writes;
pub mod predicate;
pub mod shard;

pub use action::Action;
pub use controller::{Controller, Object, RunError, Watched};
pub use handlers::OwnerRefs;
pub use own_writes::OwnWrites;
pub use predicate::Predicate;
pub use shard::Sharding;

use tokio_util::sync::CancellationToken;

/// A token cancelled on the first SIGTERM or SIGINT (Ctrl-C), for
/// [`Controller::run`]. A second signal exits the process at once with status 1, as
/// controller-runtime's signal handler does, for a shutdown that hangs.
///
/// Must be called inside a tokio runtime.
pub fn shutdown_on_signal() -> CancellationToken {
    let token = CancellationToken::new();
    let cancel = token.clone();
    tokio::spawn(async move {
        wait_for_signal().await;
        tracing::info!("signal received: shutting down");
        cancel.cancel();
        wait_for_signal().await;
        tracing::warn!("second signal received: exiting now");
        std::process::exit(1);
    });
    token
}

#[cfg(unix)]
async fn wait_for_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
        }
        Err(err) => {
            tracing::warn!(%err, "cannot listen for SIGTERM; only Ctrl-C stops the controller");
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

#[cfg(not(unix))]
async fn wait_for_signal() {
    let _ = tokio::signal::ctrl_c().await;
}

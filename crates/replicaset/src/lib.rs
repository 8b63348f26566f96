//! The Kubernetes ReplicaSet controller, with kube-controller-manager 1.37's observable
//! behaviour (upstream's `pkg/controller/replicaset`), on kctrl-runtime.
//!
//! ```no_run
//! use std::sync::Arc;
//! use std::time::Duration;
//! use kctrl_events::{EventBroadcaster, EventSource};
//! use kctrl_informer::SharedInformerFactory;
//! use kctrl_replicaset::{EVENT_SOURCE_COMPONENT, Options, ReplicaSetController};
//!
//! # async fn demo(client: kctrl_client::Client) -> Result<(), Box<dyn std::error::Error>> {
//! let factory = SharedInformerFactory::new(client.clone(), Duration::from_secs(12 * 3600));
//! let events = EventBroadcaster::new();
//! let recorder = Arc::new(events.new_recorder(EventSource::new(EVENT_SOURCE_COMPONENT)));
//! let controller = ReplicaSetController::new(&factory, client, recorder, Options::default());
//! controller.run(kctrl_runtime::shutdown_on_signal()).await?;
//! factory.shutdown().await;
//! # Ok(()) }
//! ```
//!
//! # What a sync does
//!
//! For one ReplicaSet: list its Pods and the orphans of its namespace from the Pod cache
//! (indexed by controller), keep the active ones (neither Succeeded nor Failed, not being
//! deleted), claim them (adopt matching orphans, release the Pods it controls that its
//! selector no longer matches; through kctrl-controller-ref's `ControllerRefManager`), then,
//! unless its expectations wait or it is being deleted, create the missing Pods in slow-start
//! batches (1, 2, 4, ... up to the burst, 500) or delete the surplus, chosen by upstream's
//! ranking (see `ranking.rs`). Finally it writes the status (`replicas`,
//! `fullyLabeledReplicas`, `readyReplicas`, `availableReplicas`, `terminatingReplicas`,
//! `observedGeneration`, the `ReplicaFailure` condition while creates or deletes fail), with
//! one retry on a fresh read, and looks again when a ready Pod's `minReadySeconds` passes.
//! Events: `SuccessfulCreate` ("Created pod: NAME"), `FailedCreate` ("Error creating: ERR"),
//! `SuccessfulDelete` ("Deleted pod: NAME"), `FailedDelete` ("Error deleting: ERR").
//!
//! # Reading its own writes: expectations and own writes, as upstream 1.37
//!
//! kube-controller-manager 1.37 guards a ReplicaSet against acting on a Pod cache that does
//! not show its last creates and deletes in two ways, and so does this crate:
//!
//! - **Expectations** (upstream's `UIDTrackingControllerExpectations`, 5 minute TTL; our
//!   `expectations.rs`): before creating `n` Pods the ReplicaSet expects `n` additions, before
//!   deleting it expects the deletion of exactly those Pods; the Pod handlers count them off
//!   as the informer reports them (a Pod marked for deletion counts as deleted, once), and a
//!   failed write counts off at once. While they wait, a sync still writes the status but
//!   creates and deletes nothing. They are kept because they are the only guard *between*
//!   the creates of one sync and the add events of those Pods that knows how many are in
//!   flight, and because upstream's unit tests pin their behaviour down case by case.
//!   Each entry carries the UID of the ReplicaSet that set it: kctrl-runtime does not sync a
//!   key whose object is gone (upstream's sync of such a key deletes its expectations), so a
//!   ReplicaSet deleted while its sync was in flight could otherwise leave expectations that
//!   hold one created again under the same name for 5 minutes. An entry of another UID counts
//!   as none, and a sync that finds its ReplicaSet gone from the cache after creating or
//!   deleting drops what it set.
//! - **Own writes** (upstream's `StaleControllerConsistencyReplicaSet` consistency store,
//!   beta and on by default since 1.36): the Pod creates, the adoption and release patches
//!   and the status writes that succeeded are recorded in kctrl-runtime's
//!   [`OwnWrites`](kctrl_runtime::OwnWrites), and the runtime does not sync the ReplicaSet
//!   again until its caches show them (each object, or the cache's resourceVersion past the
//!   write's; checked live after 30 s, dropped after 5 minutes). A failed Pod write is never
//!   recorded, as upstream: a create has no name to look for yet, and settling a patch of
//!   unknown outcome would take a `get` on Pods, which upstream's replicaset-controller role
//!   does not grant. Upstream compares only each cache's last resourceVersion with the newest
//!   write; the per-object check is stricter and never earlier. Upstream counts these skips
//!   in `replicaset_controller_stale_sync_skips_total`; the runtime does not tell which cache
//!   was behind, so that series is not exported.
//!
//! # ReplicationControllers: not handled
//!
//! Upstream runs the same code for ReplicationControllers by converting each
//! ReplicationController to a ReplicaSet and back on the way in and out of its informers,
//! listers and client (`pkg/controller/replication/conversion.go`), which Go's interfaces
//! make cheap. Here the sync reads `ReplicaSet` from a typed cache and writes through a typed
//! `Api<ReplicaSet>`; serving ReplicationControllers would take a converting cache, a
//! converting client for the status writes and a second controller name, queue and event
//! source: a crate of its own, for a resource Kubernetes keeps only for compatibility. It is
//! left out on purpose.

#![forbid(unsafe_code)]

mod controller;
mod expectations;
pub mod metrics;
pub mod pod_view;
mod ranking;
mod status;
mod wiring;

pub use controller::{BURST_REPLICAS, ManageError, SyncError};
pub use metrics::ReplicaSetMetrics;
pub use pod_view::PodView;
pub use wiring::{
    CONTROLLER_NAME, DEFAULT_CONCURRENT_SYNCS, EVENT_SOURCE_COMPONENT, Options,
    ReplicaSetController,
};

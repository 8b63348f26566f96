//! [`Controller`]: the builder, and the workers that run reconciles.

use std::any::Any;
use std::error::Error as StdError;
use std::fmt;
use std::future::Future;
use std::marker::PhantomData;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::{ListableResource, Metadata, Resource};
use kctrl_client::PartialObjectMetadata;
use kctrl_informer::{
    Delivery, HandlerOptions, HandlerRegistration, HasSynced, IndexFn, InformerError, ObjectKey,
    SharedInformerFactory, Store, split_key, wait_for_cache_sync,
};
use kctrl_workqueue::{
    MetricsProvider, QueueConfig, RateLimitingQueue, default_controller_rate_limiter,
};
use serde::de::DeserializeOwned;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};

use crate::action::{Action, Next};
use crate::handlers::{MappedHandler, NoEvents, OwnedHandler, PrimaryHandler, PrimaryKind};
use crate::metrics::{ControllerMetrics, ReconcileResult};
use crate::own_writes::{OwnWrites, Readiness};
use crate::predicate::Predicate;
use crate::shard::{Begin, GateCell, ShardGate, Sharding, ShardingError};

/// Why [`Controller::run`] could not run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunError {
    /// Registering a handler on an informer failed (the informer was stopped).
    #[error("controller {controller}: registering an informer handler: {source}")]
    Informer {
        /// The controller's name.
        controller: String,
        /// What the informer said.
        #[source]
        source: InformerError,
    },
    /// An [`index`](Controller::index) could not be added: its name is taken on that cache
    /// (by this controller or another of the factory), or the informer was stopped.
    #[error("controller {controller}: index {index:?} on {resource}: {source}")]
    Index {
        /// The controller's name.
        controller: String,
        /// The kind of the cache.
        resource: &'static str,
        /// The index's name.
        index: String,
        /// What the informer said.
        #[source]
        source: InformerError,
    },
    /// Cancelled (or an informer stopped) before every cache had synced; no reconcile ran.
    #[error("controller {controller}: stopped before the caches synced")]
    CachesNotSynced {
        /// The controller's name.
        controller: String,
    },
    /// The leader election's configuration was refused
    /// ([`run_leader_elected`](Controller::run_leader_elected)).
    #[error("controller {controller}: leader election: {source}")]
    LeaderElection {
        /// The controller's name.
        controller: String,
        /// What is wrong with it.
        #[source]
        source: kctrl_leader_election::ConfigError,
    },
    /// One of the factory's informers stopped on its own (a panic it could not contain): its
    /// cache no longer follows the server. The controller has stopped; the process should
    /// exit and start again.
    #[error("controller {controller}: {source}")]
    InformerFailed {
        /// The controller's name.
        controller: String,
        /// Which informer, and why.
        #[source]
        source: kctrl_informer::InformerFailure,
    },
    /// The Lease could not be renewed in time: another replica may lead now. The controller
    /// has stopped; the process should exit and start again, as kube-controller-manager does.
    #[error("controller {controller}: leader election lost")]
    LeadershipLost {
        /// The controller's name.
        controller: String,
    },
    /// The shutdown timed out and `stuck` workers did not stop when aborted within
    /// [`SHUTDOWN_ABORT_GRACE`]: their reconciles block their thread (blocking I/O, a
    /// `std::sync::Mutex`, a loop that never yields), which an abort cannot interrupt. They
    /// were left running, detached: they may still write. The process should exit with
    /// `std::process::exit`: returning from `#[tokio::main]` would not end it, as a Tokio
    /// runtime's drop waits for its worker threads, blocked ones included.
    /// [`run_leader_elected`](Controller::run_leader_elected) stops renewing the Lease then
    /// but does not release it, so no other replica takes over before it expires.
    #[error(
        "controller {controller}: {stuck} reconcile(s) did not stop when aborted after the shutdown timeout (they block their thread); left running: exit the process"
    )]
    ReconcilesStuck {
        /// The controller's name.
        controller: String,
        /// How many workers were still running.
        stuck: usize,
    },
    /// The leader election handed over no leadership and ended (its leading callback was
    /// dropped): the controller never ran.
    #[error("controller {controller}: the leader election ended without ever leading")]
    ElectionEnded {
        /// The controller's name.
        controller: String,
    },
    /// A sharded controller is set up wrongly ([`Controller::sharded`]): nothing ran.
    #[error("controller {controller}: {source}")]
    Sharding {
        /// The controller's name.
        controller: String,
        /// The mistake.
        #[source]
        source: ShardingError,
    },
    /// The shard member stopped on its own (its Lease could not be renewed within the renew
    /// deadline, or was lost): other replicas may take its buckets over once its Lease
    /// expires, so the controller stopped at once, its reconciles in flight abandoned. Also
    /// returned, after a clean stop of the workers, when the member failed while leaving.
    /// The process should exit and start again, as after a lost leader election.
    #[error("controller {controller}: shard membership lost: {source}")]
    ShardLost {
        /// The controller's name.
        controller: String,
        /// Why the member stopped.
        #[source]
        source: kctrl_shard::RunError,
    },
}

/// A resource a [`Controller`] can reconcile or watch: a typed Kubernetes object with full
/// metadata (every k8s-openapi type, and every `#[derive(CustomResource)]` type).
pub trait Object:
    Resource<Scope: 'static>
    + ListableResource
    + Metadata<Ty = ObjectMeta>
    + DeserializeOwned
    + Clone
    + Send
    + Sync
    + 'static
{
}

impl<K> Object for K where
    K: Resource<Scope: 'static>
        + ListableResource
        + Metadata<Ty = ObjectMeta>
        + DeserializeOwned
        + Clone
        + Send
        + Sync
        + 'static
{
}

/// What a [`Controller`] can watch, own or read the cache of: an [`Object`], the metadata
/// alone of one ([`PartialObjectMetadata`]), or a view of one whose metadata is kctrl-client's
/// [`CompactObjectMeta`](kctrl_client::CompactObjectMeta) (kctrl-controller-ref's `PodView`).
/// Implemented for every type that qualifies.
pub trait Watched:
    Resource<Scope: 'static>
    + ListableResource
    + Metadata<Ty: kctrl_client::ObjectMetaAccess + crate::handlers::OwnerRefs>
    + DeserializeOwned
    + Clone
    + Send
    + Sync
    + 'static
{
}

impl<K> Watched for K where
    K: Resource<Scope: 'static>
        + ListableResource
        + Metadata<Ty: kctrl_client::ObjectMetaAccess + crate::handlers::OwnerRefs>
        + DeserializeOwned
        + Clone
        + Send
        + Sync
        + 'static
{
}

/// A controller of resource `K`: which events enqueue which keys, how many workers reconcile
/// them, and the loop that runs until cancelled.
///
/// Informers come from the [`SharedInformerFactory`] given to [`new`](Self::new), so the
/// controllers of one process share one cache (and one watch) per resource. The work queue is
/// client-go's rate-limited queue: one key is never reconciled by two workers at once, a key
/// enqueued while it is being reconciled runs once more afterwards, and a failing key backs
/// off exponentially.
///
/// ```no_run
/// use std::sync::Arc;
/// use std::time::Duration;
/// use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
/// use kctrl_informer::SharedInformerFactory;
/// use kctrl_runtime::{Action, Controller};
///
/// #[derive(Debug, thiserror::Error)]
/// #[error("{0}")]
/// struct Error(String);
///
/// async fn reconcile(d: Arc<Deployment>, _ctx: Arc<()>) -> Result<Action, Error> {
///     println!("reconciling {:?}", d.metadata.name);
///     Ok(Action::requeue(Duration::from_secs(300)))
/// }
///
/// # async fn demo(client: kctrl_client::Client) -> Result<(), Box<dyn std::error::Error>> {
/// let factory = SharedInformerFactory::new(client, Duration::from_secs(10 * 3600));
/// Controller::<Deployment>::new(&factory)
///     .owns::<ReplicaSet>()
///     .run(reconcile, |_d, _err, _ctx| Action::rate_limited(), Arc::new(()), kctrl_runtime::shutdown_on_signal())
///     .await?;
/// factory.shutdown().await;
/// # Ok(()) }
/// ```
pub struct Controller<K: Object> {
    name: String,
    factory: SharedInformerFactory,
    queue: RateLimitingQueue<ObjectKey>,
    store: Store<K>,
    registrations: Result<Vec<HandlerRegistration>, InformerError>,
    predicates: Vec<Predicate<K>>,
    workers: usize,
    max_retries: Option<usize>,
    shutdown_timeout: Duration,
    metrics: Option<ControllerMetrics>,
    own_writes: OwnWrites,
    /// Set by [`sharded`](Self::sharded); `Err` once it was called twice.
    sharding: Option<Result<Sharding, ShardingError>>,
    /// The sharded controller's gate, shared with the handlers (registered before or after
    /// [`sharded`](Self::sharded)).
    gate: GateCell,
    /// The kinds owned or watched besides `K`.
    related: Vec<&'static str>,
    /// The first index that could not be added: (kind, index name, why).
    index_error: Option<(&'static str, String, InformerError)>,
    _k: PhantomData<fn() -> K>,
}

/// How long [`Controller::run`] waits for the reconciles in flight once cancelled, unless
/// [`Controller::shutdown_timeout`] says otherwise: controller-runtime's default
/// `GracefulShutdownTimeout`.
pub const DEFAULT_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(30);

/// How long [`Controller::run`] waits, once the shutdown timeout elapsed and it aborted the
/// reconciles in flight, for them to stop. An abort takes effect at a reconcile's next
/// `.await`: one that blocks its thread does not stop, and `run` then returns
/// [`RunError::ReconcilesStuck`] instead of waiting for it.
pub const SHUTDOWN_ABORT_GRACE: Duration = Duration::from_secs(1);

impl<K: Object> fmt::Debug for Controller<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Controller")
            .field("name", &self.name)
            .field("workers", &self.workers)
            .field("max_retries", &self.max_retries)
            .field("shutdown_timeout", &self.shutdown_timeout)
            .finish_non_exhaustive()
    }
}

/// Handlers call the informer's callbacks on the runtime: they only push keys.
const ON_RUNTIME: HandlerOptions = HandlerOptions {
    resync_period: None,
    delivery: Delivery::Runtime,
};

impl<K: Object> Controller<K> {
    /// A controller of `K` named after its kind in lower case (the name of its queue, its
    /// metrics and its logs), with one worker. Must be called inside a tokio runtime.
    pub fn new(factory: &SharedInformerFactory) -> Self {
        Self::with_queue(
            factory,
            K::KIND.to_ascii_lowercase(),
            default_controller_rate_limiter(),
            None,
        )
    }

    /// Like [`new`](Self::new), under `name` (its queue's, its metrics' and its logs' name,
    /// and the source component of its [`event_recorder`](Self::event_recorder)), with the
    /// default rate limiter. An empty name is the kind's, as with [`new`](Self::new).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// use std::time::Duration;
    ///
    /// use k8s_openapi::api::apps::v1::Deployment;
    /// use kctrl_informer::SharedInformerFactory;
    /// use kctrl_runtime::Controller;
    ///
    /// let client = kctrl_fake::FakeApi::new().client();
    /// let factory = SharedInformerFactory::new(client, Duration::from_secs(3600));
    /// let controller = Controller::<Deployment>::named(&factory, "rollout-watcher");
    /// assert_eq!(controller.name(), "rollout-watcher");
    /// # }
    /// ```
    pub fn named(factory: &SharedInformerFactory, name: impl Into<String>) -> Self {
        let name = name.into();
        if name.is_empty() {
            // As controller-runtime does without a name: the kind's.
            return Self::new(factory);
        }
        Self::with_queue(factory, name, default_controller_rate_limiter(), None)
    }

    /// Like [`new`](Self::new), with a name, a rate limiter of your choice (e.g.
    /// [`kctrl_workqueue::ItemExponentialFailureRateLimiter`] alone, without the overall
    /// bucket) and the work queue's metrics (`workqueue_*{name="<name>"}`, e.g. from a
    /// [`kctrl_workqueue::PrometheusMetricsProvider`] shared by the
    /// process's queues).
    pub fn with_queue(
        factory: &SharedInformerFactory,
        name: impl Into<String>,
        limiter: impl kctrl_workqueue::RateLimiter<ObjectKey> + 'static,
        queue_metrics: Option<Arc<dyn MetricsProvider>>,
    ) -> Self {
        let name = name.into();
        let mut config = QueueConfig::new().name(&name);
        if let Some(provider) = queue_metrics {
            config = config.shared_metrics_provider(provider);
        }
        let queue = RateLimitingQueue::with_config(limiter, config);
        let informer = factory.informer::<K>();
        let controller = Controller {
            name,
            factory: factory.clone(),
            queue,
            store: informer.store().clone(),
            registrations: Ok(Vec::new()),
            predicates: Vec::new(),
            workers: 1,
            max_retries: None,
            shutdown_timeout: DEFAULT_SHUTDOWN_TIMEOUT,
            metrics: None,
            own_writes: OwnWrites::new(),
            sharding: None,
            gate: GateCell::default(),
            related: Vec::new(),
            index_error: None,
            _k: PhantomData,
        };
        controller.track::<K>();
        controller
    }

    /// Compares the writes of `C` recorded in [`own_writes`](Self::own_writes) with `C`'s
    /// shared cache.
    fn track<C: Watched>(&self) {
        let client = self.factory.client().clone();
        let namespaced = kctrl_client::ResourceRef::of::<C>().is_namespaced();
        self.own_writes.track(
            self.factory.informer::<C>().store().clone(),
            move |namespace| {
                if namespaced {
                    kctrl_client::Api::namespaced(client.clone(), namespace)
                } else {
                    kctrl_client::Api::all(client.clone())
                }
            },
        );
    }

    fn register<C: Watched>(&mut self, handler: impl kctrl_informer::ResourceEventHandler<C>) {
        if let Ok(regs) = &mut self.registrations {
            match self
                .factory
                .informer::<C>()
                .add_event_handler_with_options(handler, ON_RUNTIME)
            {
                Ok(r) => regs.push(r),
                Err(e) => self.registrations = Err(e),
            }
        }
    }

    /// Also reconcile `K` when an object of kind `C` that it controls changes (an owner
    /// reference with `controller: true` to `K`'s group and kind), deletions included.
    ///
    /// [`index::controlled_by`](crate::index::controlled_by)`(&controller.cache::<C>(), &obj)`
    /// then returns the objects a reconciled `obj` controls (add
    /// [`index::by_controller_uid`](crate::index::by_controller_uid) as an
    /// [`index`](Self::index) for a lookup instead of a scan of `obj`'s namespace).
    pub fn owns<C: Watched>(mut self) -> Self {
        let handler = OwnedHandler {
            queue: self.queue.clone(),
            primary: PrimaryKind::of::<K>(),
            shard: self.gate.clone(),
        };
        self.related.push(C::KIND);
        self.register::<C>(handler);
        self.track::<C>();
        self
    }

    /// Adds index `name` to the shared cache of `C` (any resource: owned, watched, `K` itself,
    /// or one the reconcile only reads): `index_fn` returns the values an object is found
    /// under, and a reconcile queries them with
    /// [`cache::<C>()`](Self::cache)[`.by_index(name, value)`](kctrl_informer::Store::by_index)
    /// (controller-runtime's `IndexField` and `MatchingFields`). The controller waits for
    /// `C`'s cache before its first reconcile. An index name already taken on that cache (by
    /// this controller or another of the factory) makes [`run`](Self::run) fail with
    /// [`RunError::Index`] naming it; [`CONTROLLER_UID_INDEX`](crate::index::CONTROLLER_UID_INDEX)
    /// is the exception, being always [`by_controller_uid`](crate::index::by_controller_uid):
    /// every controller of the factory may declare it, and the first one adds it.
    ///
    /// `C`'s cache follows a [sharded](Self::sharded) controller's shard as the caches of
    /// what it owns and watches do: refused with sharding by UID (another replica caches
    /// what `C`'s UIDs place elsewhere); with sharding by namespace, a cluster-scoped `C` is
    /// cached only by the replica holding the empty namespace's bucket.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// use std::time::Duration;
    ///
    /// use k8s_openapi::api::apps::v1::Deployment;
    /// use k8s_openapi::api::core::v1::ConfigMap;
    /// use kctrl_informer::SharedInformerFactory;
    /// use kctrl_runtime::Controller;
    ///
    /// let client = kctrl_fake::FakeApi::new().client();
    /// let factory = SharedInformerFactory::new(client, Duration::from_secs(3600));
    /// // ConfigMaps by the Deployment their `app` label names.
    /// let controller = Controller::<Deployment>::new(&factory).index::<ConfigMap>("by-app", |cm| {
    ///     cm.metadata.labels.iter().flatten().filter(|(k, _)| *k == "app").map(|(_, v)| v.clone()).collect()
    /// });
    /// let configmaps = controller.cache::<ConfigMap>();
    /// // In the reconcile of Deployment `web`: configmaps.by_index("by-app", "web")
    /// assert!(configmaps.by_index("by-app", "web").unwrap().is_empty());
    /// # }
    /// ```
    pub fn index<C: Watched>(
        mut self,
        name: impl Into<String>,
        index_fn: impl Fn(&C) -> Vec<String> + Send + Sync + 'static,
    ) -> Self {
        let name = name.into();
        // The shared name always indexes by controller UID, whichever controller adds it, and
        // a second declaration is no conflict (checked by the store itself: no race between
        // controllers declared on two threads).
        let shared = name == crate::index::CONTROLLER_UID_INDEX;
        let index_fn: IndexFn<C> = if shared {
            Arc::new(crate::index::by_controller_uid::<C>)
        } else {
            Arc::new(index_fn)
        };
        if self.index_error.is_none() {
            match self
                .factory
                .informer::<C>()
                .add_indexers([(name.clone(), index_fn)])
            {
                Err(InformerError::Store(kctrl_informer::StoreError::IndexConflict(_)))
                    if shared => {}
                Err(e) => self.index_error = Some((C::KIND, name, e)),
                Ok(()) => {}
            }
        }
        if std::any::TypeId::of::<C>() != std::any::TypeId::of::<K>() {
            self.related.push(C::KIND);
        }
        // A handler that does nothing, for the controller to wait for this cache.
        self.register::<C>(NoEvents);
        self
    }

    /// The factory's shared cache of full `C` objects, the one [`owns`](Self::owns),
    /// [`watches`](Self::watches) and [`index`](Self::index) use: keep it in the reconcile's
    /// context to read `C` (and query its indexes) without a request.
    ///
    /// The controller waits for this cache only if it owns, watches or indexes `C`: declare
    /// one of them, or the reconcile may read it before it has synced. For a `C` declared with
    /// [`owns_metadata`](Self::owns_metadata) or [`watches_metadata`](Self::watches_metadata),
    /// ask for `cache::<PartialObjectMetadata<C>>()`: `cache::<C>()` starts a second informer,
    /// of full objects.
    pub fn cache<C: Watched>(&self) -> Store<C> {
        self.factory.informer::<C>().store().clone()
    }

    /// Like [`owns`](Self::owns), from a metadata-only informer of `C`
    /// ([`SharedInformerFactory::metadata_informer`]): the API server sends only each object's
    /// metadata, and the cache holds [`PartialObjectMetadata<C>`](PartialObjectMetadata), a
    /// fraction of the memory of full objects. For owned objects a reconcile never reads in
    /// full (it writes them with server-side apply, or reads them live). Writes of `C`
    /// recorded in [`own_writes`](Self::own_writes) are compared with this cache.
    pub fn owns_metadata<C: Object>(mut self) -> Self {
        let handler = OwnedHandler {
            queue: self.queue.clone(),
            primary: PrimaryKind::of::<K>(),
            shard: self.gate.clone(),
        };
        self.related.push(C::KIND);
        self.register::<PartialObjectMetadata<C>>(handler);
        self.track::<PartialObjectMetadata<C>>();
        self
    }

    /// Like [`watches`](Self::watches), from a metadata-only informer of `W`: `map` gets each
    /// object's metadata alone.
    pub fn watches_metadata<W: Object>(
        mut self,
        map: impl Fn(&PartialObjectMetadata<W>) -> Vec<ObjectKey> + Send + Sync + 'static,
    ) -> Self {
        let handler = MappedHandler {
            queue: self.queue.clone(),
            map: Arc::new(map),
            shard: self.gate.clone(),
        };
        self.related.push(W::KIND);
        self.register::<PartialObjectMetadata<W>>(handler);
        self.track::<PartialObjectMetadata<W>>();
        self
    }

    /// Also reconcile the `K` keys (`namespace/name`, or `name` if `K` is cluster-scoped;
    /// see [`kctrl_informer::key_for`]) that `map` returns for an object of kind `W` that
    /// changed. On an update both the old and the new state are mapped.
    pub fn watches<W: Watched>(
        mut self,
        map: impl Fn(&W) -> Vec<ObjectKey> + Send + Sync + 'static,
    ) -> Self {
        let handler = MappedHandler {
            queue: self.queue.clone(),
            map: Arc::new(map),
            shard: self.gate.clone(),
        };
        self.related.push(W::KIND);
        self.register::<W>(handler);
        self.track::<W>();
        self
    }

    /// Also register `handler`, a handler of your own, on the informer of `W` (`W` may be `K`
    /// itself): for rules a mapping function cannot express, such as enqueueing a key after a
    /// delay or keeping bookkeeping of its own as the events arrive (the ReplicaSet
    /// controller's expectations). It enqueues through [`queue`](Self::queue). As for
    /// [`watches`](Self::watches), the controller waits for `W`'s cache before its first
    /// reconcile and compares the writes of `W` recorded in [`own_writes`](Self::own_writes)
    /// with it.
    pub fn watches_with<W: Watched>(
        mut self,
        handler: impl kctrl_informer::ResourceEventHandler<W>,
    ) -> Self {
        self.register::<W>(handler);
        self.track::<W>();
        self
    }

    /// Only updates of `K` that pass `predicate` enqueue it (all predicates given must pass;
    /// combine alternatives with [`Predicate::or`]).
    ///
    /// The predicates filter the primary resource's updates only, as controller-runtime's
    /// `For(&K{}, builder.WithPredicates(p))` does: creations of `K` always enqueue, and so
    /// do the events of what the controller [`owns`](Self::owns) or
    /// [`watches`](Self::watches) (a status change of an owned object is not filtered out by
    /// [`Predicate::generation_changed`]). controller-runtime's `WithEventFilter`, which
    /// filters every watch's events, has no counterpart: filter a watched resource's events
    /// in its [`watches`](Self::watches) mapping function.
    pub fn with_predicate(mut self, predicate: Predicate<K>) -> Self {
        self.predicates.push(predicate);
        self
    }

    /// How many reconciles run at once (at least 1; one key is never in two at once).
    pub fn workers(mut self, workers: usize) -> Self {
        self.workers = workers.max(1);
        self
    }

    /// After this many rate-limited retries in a row, a key is dropped until an event
    /// enqueues it again (the Deployment controller's 15). Default: retried for ever.
    pub fn max_retries(mut self, retries: usize) -> Self {
        self.max_retries = Some(retries);
        self
    }

    /// How long [`run`](Self::run) waits, once cancelled, for the reconciles in flight
    /// (controller-runtime's `GracefulShutdownTimeout`; default
    /// [`DEFAULT_SHUTDOWN_TIMEOUT`], 30 s). Past it the reconciles still running are
    /// abandoned (their futures are dropped at their next await point, which is logged) and
    /// `run` returns; a reconcile that blocks its thread and has not stopped
    /// [`SHUTDOWN_ABORT_GRACE`] later is left running and `run` returns
    /// [`RunError::ReconcilesStuck`]. [`Duration::ZERO`] abandons them at once;
    /// [`Duration::MAX`] waits for them without limit.
    pub fn shutdown_timeout(mut self, timeout: Duration) -> Self {
        self.shutdown_timeout = timeout;
        self
    }

    /// Record the reconcile metrics ([`crate::metrics`]).
    pub fn metrics(mut self, metrics: ControllerMetrics) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// Reconcile only the objects of the shard `sharding`'s member holds: the controller's
    /// replicas, each with a member of one group, split the objects between them (see
    /// [`crate::shard`]). The factory given to [`new`](Self::new) must have been built with
    /// [`sharding.scope()`](Sharding::scope) as its shard scope; [`run`](Self::run) checks
    /// it, and that a controller sharded by UID neither owns nor watches other resources
    /// ([`RunError::Sharding`] names the mistake).
    ///
    /// Then [`run`](Self::run) also runs the member, once the caches synced:
    ///
    /// - An object is enqueued, and reconciled, only while its bucket is active here; the
    ///   reconcile holds the bucket's [`ReconcileGuard`](kctrl_shard::ReconcileGuard), so a
    ///   bucket handed to another replica is released only once its reconciles here have
    ///   ended. A key whose bucket is no longer active when a worker takes it is dropped
    ///   (forgotten, and counted with [`ShardMember::keys_dropped`](kctrl_shard::ShardMember::keys_dropped)).
    /// - When a bucket becomes active (its objects cached first), its cached objects are
    ///   enqueued, in the queue's low lane.
    /// - On `cancel`, the workers stop as usual, and the member drains and releases its
    ///   buckets (once the reconciles in flight have ended) and deletes its Lease before
    ///   `run` returns.
    /// - If the member stops on its own (its Lease not renewed within the renew deadline, or
    ///   lost), the controller stops at once, its reconciles in flight abandoned as after a
    ///   lost leader election, and `run` returns [`RunError::ShardLost`]: the process should
    ///   exit and start again.
    /// - On [`RunError::ReconcilesStuck`], the member stops renewing without releasing: its
    ///   buckets move once its Lease has expired.
    pub fn sharded(mut self, sharding: Sharding) -> Self {
        if self.sharding.is_some() {
            self.sharding = Some(Err(ShardingError::ShardedTwice));
            return self;
        }
        // The handlers registered so far hold the cell: they filter from now on.
        let _ = self.gate.set(sharding.gate());
        self.sharding = Some(Ok(sharding));
        self
    }

    /// The controller's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The cache of `K` the reconciles read from.
    pub fn store(&self) -> &Store<K> {
        &self.store
    }

    /// The writes of this controller's reconciles that its caches may not show yet: record
    /// each write with [`OwnWrites::record`] (keep the handle in the reconcile's context), and
    /// a key is not reconciled again until the caches of `K` and of every resource it
    /// [`owns`](Self::owns) or [`watches`](Self::watches) show that key's writes (bounded; see
    /// [`crate::own_writes`]). Without records it costs nothing.
    pub fn own_writes(&self) -> OwnWrites {
        self.own_writes.clone()
    }

    /// A recorder of Events whose source component is this controller's name (as
    /// kube-controller-manager's controllers name theirs), sending through `broadcaster`.
    pub fn event_recorder(
        &self,
        broadcaster: &kctrl_events::EventBroadcaster,
    ) -> kctrl_events::Recorder {
        broadcaster.new_recorder(kctrl_events::EventSource::new(self.name.clone()))
    }

    /// The work queue, e.g. to enqueue a key by hand.
    pub fn queue(&self) -> &RateLimitingQueue<ObjectKey> {
        &self.queue
    }

    /// Runs until `cancel` fires: starts the factory's informers, waits for the caches,
    /// then reconciles keys with the configured number of workers.
    ///
    /// `reconcile` gets the cached object (a key whose object is gone from the cache is
    /// skipped: cleanup that must run belongs in a finalizer). Its [`Action`]
    /// says what happens next; on success the key's failures are forgotten, unless it asks for
    /// [`Action::rate_limited`], which backs off per key as a failure does. On an error,
    /// `error_policy` decides ([`Action::rate_limited`] is client-go's usual answer). The
    /// runtime logs every failed reconcile itself, before calling the error policy (a
    /// `reconcile failed` warning with the controller, namespace, name, the key's retries so
    /// far and the error), and counts it (`controller_runtime_reconcile_errors_total` with
    /// [`metrics`](Self::metrics)): the error policy need not log it again. A
    /// panicking reconcile or error policy is caught, logged, counted
    /// (`controller_runtime_reconcile_panics_total`) and its key retried rate-limited; the
    /// worker lives on.
    ///
    /// On `cancel` the workers take no new key, the reconciles in flight finish (their keys
    /// stay queued for whoever runs next), and this returns. Waiting for the reconciles in
    /// flight is bounded by [`shutdown_timeout`](Self::shutdown_timeout) (30 s by default):
    /// past it they are aborted (a warning says so when reconciles were in flight), and this
    /// returns once they have stopped. An abort takes effect at a reconcile's next `.await`;
    /// one that blocks its thread (blocking I/O, a `std::sync::Mutex`, a loop that never
    /// yields) cannot be stopped: if workers are still running [`SHUTDOWN_ABORT_GRACE`] (1 s)
    /// after the abort, they are left running, detached, and this returns
    /// [`RunError::ReconcilesStuck`] without waiting for them; the process should then exit.
    ///
    /// The informers are the factory's, shared with its other controllers: those this starts
    /// keep running until the factory's [`shutdown`](SharedInformerFactory::shutdown), which
    /// stops them and waits for them (call it once the controllers have returned). Informers
    /// someone else already started with [`SharedInformerFactory::start`] run under that
    /// caller's token: cancelling it stops them sooner (the controller's caches then stop
    /// following the server). If one of them fails (stops on a panic it could not contain),
    /// before or after the caches synced, the controller stops the same way and returns
    /// [`RunError::InformerFailed`]. On a factory that has shut down, this returns an error
    /// ([`RunError::Informer`] or [`RunError::CachesNotSynced`]) rather than waiting.
    ///
    /// The workers belong to this future: dropping it (e.g. a `select!` whose other branch
    /// won) stops them too, with the reconciles they were running, and shuts the queue down
    /// (also while it still waits for the caches to sync).
    pub async fn run<Ctx, E, R, Fut, P>(
        self,
        reconcile: R,
        error_policy: P,
        ctx: Arc<Ctx>,
        cancel: CancellationToken,
    ) -> Result<(), RunError>
    where
        Ctx: Send + Sync + 'static,
        E: StdError + Send + 'static,
        R: Fn(Arc<K>, Arc<Ctx>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Action, E>> + Send + 'static,
        P: Fn(Arc<K>, &E, Arc<Ctx>) -> Action + Send + Sync + 'static,
    {
        self.run_until(
            reconcile,
            error_policy,
            ctx,
            cancel,
            CancellationToken::new(),
        )
        .await
    }

    /// [`run`](Self::run), where `abandon` (fired with or after `cancel`) ends the wait for
    /// the reconciles in flight before the shutdown timeout: they are abandoned at once.
    pub(crate) async fn run_until<Ctx, E, R, Fut, P>(
        mut self,
        reconcile: R,
        error_policy: P,
        ctx: Arc<Ctx>,
        cancel: CancellationToken,
        abandon: CancellationToken,
    ) -> Result<(), RunError>
    where
        Ctx: Send + Sync + 'static,
        E: StdError + Send + 'static,
        R: Fn(Arc<K>, Arc<Ctx>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Action, E>> + Send + 'static,
        P: Fn(Arc<K>, &E, Arc<Ctx>) -> Action + Send + Sync + 'static,
    {
        let sharding = match self.sharding.take().transpose() {
            Ok(sharding) => sharding,
            Err(source) => {
                return Err(RunError::Sharding {
                    controller: self.name.clone(),
                    source,
                });
            }
        };
        if let Some(sharding) = &sharding {
            sharding
                .prepare(&self.factory, &self.related)
                .map_err(|source| RunError::Sharding {
                    controller: self.name.clone(),
                    source,
                })?;
        }
        let primary = PrimaryHandler {
            queue: self.queue.clone(),
            predicates: std::mem::take(&mut self.predicates),
            own_writes: self.own_writes.clone(),
            shard: self.gate.clone(),
        };
        self.register::<K>(primary);
        if let Some((resource, index, source)) = self.index_error.take() {
            return Err(RunError::Index {
                controller: self.name.clone(),
                resource,
                index,
                source,
            });
        }
        let registrations =
            std::mem::replace(&mut self.registrations, Ok(Vec::new())).map_err(|source| {
                RunError::Informer {
                    controller: self.name.clone(),
                    source,
                }
            })?;
        // Dropping this future shuts the queue down, also while it waits for the caches; and
        // it drops the workers' set, which aborts the workers (and the reconciles they run).
        let _shut_queue = ShutQueueOnDrop(self.queue.clone());
        info!(controller = %self.name, workers = self.workers, "starting controller");
        // Shared with the factory's other controllers: they run until the factory shuts down.
        self.factory.start_until_shutdown();
        let synced: Vec<&dyn HasSynced> =
            registrations.iter().map(|r| r as &dyn HasSynced).collect();
        if !wait_for_cache_sync(&self.name, &cancel, &synced).await {
            // An informer that failed before it synced ends the wait too: say so.
            if let Some(source) = self.factory.failure() {
                error!(controller = %self.name, failure = %source, "an informer failed before the caches synced");
                return Err(RunError::InformerFailed {
                    controller: self.name.clone(),
                    source,
                });
            }
            return Err(RunError::CachesNotSynced {
                controller: self.name.clone(),
            });
        }
        if let Some(m) = &self.metrics {
            m.workers(&self.name, self.workers);
        }
        let shared = Arc::new(Shared {
            name: self.name.clone(),
            queue: self.queue.clone(),
            store: self.store.clone(),
            reconcile,
            error_policy,
            ctx,
            max_retries: self.max_retries,
            metrics: self.metrics.clone(),
            own_writes: self.own_writes.clone(),
            in_flight: AtomicUsize::new(0),
            shard: sharding.as_ref().map(Sharding::gate),
        });
        // The member joins its group once the caches can follow its scope; its run (with the
        // scope bridge and the activations) is polled by this future until it ends.
        let leave = CancellationToken::new();
        let mut membership: Pin<Box<dyn Future<Output = ShardOutcome> + Send>> = match &sharding {
            Some(sharding) => {
                let sharding = sharding.clone();
                let (leave, queue, store) = (leave.clone(), self.queue.clone(), self.store.clone());
                Box::pin(async move { Some(sharding.drive(leave, queue, store).await) })
            }
            None => Box::pin(std::future::pending()),
        };
        let mut member_ended: ShardOutcome = None;
        let stop = cancel.child_token();
        let mut workers = JoinSet::new();
        for _ in 0..self.workers {
            workers.spawn(worker(shared.clone(), stop.clone()));
        }
        let failure = tokio::select! {
            () = cancel.cancelled() => None,
            failure = self.factory.failed() => Some(failure),
            ended = &mut membership => {
                member_ended = ended;
                None
            }
        };
        if let Some(failure) = &failure {
            error!(controller = %self.name, %failure, "an informer failed: its cache is frozen; stopping");
        }
        // The member stopped on its own (it cannot have left: `leave` has not fired).
        let mut shard_lost = member_ended.is_some();
        if shard_lost {
            error!(controller = %self.name,
                "the shard member stopped: another replica may take its buckets; stopping at once");
        }
        stop.cancel();
        leave.cancel();
        info!(controller = %self.name, timeout = ?self.shutdown_timeout,
            "shutting down controller: no new reconciles; waiting for those in flight");
        self.queue.shut_down();
        // The member keeps renewing while the reconciles in flight finish; it stopping
        // (failing) abandons them at once.
        let finished = {
            let drained =
                tokio::time::timeout(self.shutdown_timeout, drain(&mut workers, &self.name));
            tokio::pin!(drained);
            loop {
                tokio::select! {
                    finished = &mut drained => break finished.is_ok(),
                    () = abandon.cancelled() => break false,
                    () = std::future::ready(()), if shard_lost => break false,
                    ended = &mut membership, if member_ended.is_none() => {
                        shard_lost = matches!(ended, Some(Err(_)));
                        member_ended = ended;
                    }
                }
            }
        };
        if !finished {
            let in_flight = shared.in_flight.load(Ordering::Acquire);
            if in_flight > 0 {
                let reason = if abandon.is_cancelled() {
                    "leadership lost"
                } else if shard_lost {
                    "shard membership lost"
                } else {
                    "shutdown timeout elapsed"
                };
                warn!(controller = %self.name, timeout = ?self.shutdown_timeout,
                    busy_workers = in_flight,
                    "{reason}: abandoning the reconciles in flight");
            }
            workers.abort_all();
            let stopped =
                tokio::time::timeout(SHUTDOWN_ABORT_GRACE, drain(&mut workers, &self.name))
                    .await
                    .is_ok();
            if !stopped {
                let stuck = workers.len();
                error!(controller = %self.name, stuck, grace = ?SHUTDOWN_ABORT_GRACE,
                    "reconciles did not stop when aborted: they block their thread; leaving them running");
                workers.detach_all();
                // Dropping the membership stops the member's renewals without releasing
                // its buckets: they move once its Lease has expired.
                drop(membership);
                return Err(RunError::ReconcilesStuck {
                    controller: self.name.clone(),
                    stuck,
                });
            }
        }
        // The reconciles have ended: the member releases its buckets and leaves.
        if member_ended.is_none() && sharding.is_some() {
            member_ended = membership.await;
        }
        drop(registrations);
        if let Some(Err(source)) = member_ended {
            return Err(RunError::ShardLost {
                controller: self.name.clone(),
                source,
            });
        }
        match failure {
            Some(source) => Err(RunError::InformerFailed {
                controller: self.name.clone(),
                source,
            }),
            None => Ok(()),
        }
    }
}

/// How a sharded controller's member ended: `None` while it runs (or without sharding).
type ShardOutcome = Option<Result<(), kctrl_shard::RunError>>;

/// Waits for every worker of `workers` to end; logs those that panicked.
async fn drain(workers: &mut JoinSet<()>, name: &str) {
    while let Some(ended) = workers.join_next().await {
        if let Err(err) = ended
            && !err.is_cancelled()
        {
            error!(controller = %name, %err, "worker ended abnormally");
        }
    }
}

/// Shuts the work queue down when dropped: the workers of a dropped
/// [`run`](Controller::run) future are gone.
struct ShutQueueOnDrop(RateLimitingQueue<ObjectKey>);

impl Drop for ShutQueueOnDrop {
    fn drop(&mut self) {
        self.0.shut_down();
    }
}

/// Marks a worker busy in the metrics and in the count of reconciles in flight for as long
/// as it lives (also when a shutdown abandons its reconcile).
struct Busy<'a> {
    metrics: Option<&'a ControllerMetrics>,
    name: &'a str,
    in_flight: &'a AtomicUsize,
}

impl<'a> Busy<'a> {
    fn new(
        metrics: Option<&'a ControllerMetrics>,
        name: &'a str,
        in_flight: &'a AtomicUsize,
    ) -> Self {
        if let Some(m) = metrics {
            m.worker_busy(name, true);
        }
        in_flight.fetch_add(1, Ordering::AcqRel);
        Busy {
            metrics,
            name,
            in_flight,
        }
    }
}

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        self.in_flight.fetch_sub(1, Ordering::AcqRel);
        if let Some(m) = self.metrics {
            m.worker_busy(self.name, false);
        }
    }
}

/// A future whose panic is caught and returned, so that it fails its key instead of
/// unwinding the worker; it runs inside the worker's task, so a worker that stops drops it.
struct CatchUnwind<F>(Pin<Box<F>>);

impl<F: Future> Future for CatchUnwind<F> {
    type Output = Result<F::Output, Box<dyn Any + Send>>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let fut = self.get_mut().0.as_mut();
        match std::panic::catch_unwind(AssertUnwindSafe(|| fut.poll(cx))) {
            Ok(Poll::Ready(out)) => Poll::Ready(Ok(out)),
            Ok(Poll::Pending) => Poll::Pending,
            Err(payload) => Poll::Ready(Err(payload)),
        }
    }
}

/// The message of a panic, when it has one.
fn panic_message(payload: &(dyn Any + Send)) -> &str {
    payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("a panic without a message")
}

/// What every worker of one controller shares.
struct Shared<K, Ctx, R, P> {
    name: String,
    queue: RateLimitingQueue<ObjectKey>,
    store: Store<K>,
    reconcile: R,
    error_policy: P,
    ctx: Arc<Ctx>,
    max_retries: Option<usize>,
    metrics: Option<ControllerMetrics>,
    own_writes: OwnWrites,
    /// How many workers are processing a key.
    in_flight: AtomicUsize,
    /// Sharded: which keys this replica may reconcile now.
    shard: Option<ShardGate>,
}

async fn worker<K, Ctx, E, R, Fut, P>(shared: Arc<Shared<K, Ctx, R, P>>, stop: CancellationToken)
where
    K: Object,
    Ctx: Send + Sync + 'static,
    E: StdError + Send + 'static,
    R: Fn(Arc<K>, Arc<Ctx>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Action, E>> + Send + 'static,
    P: Fn(Arc<K>, &E, Arc<Ctx>) -> Action + Send + Sync + 'static,
{
    loop {
        let next = tokio::select! {
            biased;
            () = stop.cancelled() => None,
            key = shared.queue.get() => key,
        };
        let Some(key) = next else { break };
        let busy = Busy::new(shared.metrics.as_ref(), &shared.name, &shared.in_flight);
        process(&shared, &key).await;
        drop(busy);
        shared.queue.done(&key);
    }
}

/// Reconciles one key and files it according to the outcome.
async fn process<K, Ctx, E, R, Fut, P>(shared: &Shared<K, Ctx, R, P>, key: &ObjectKey)
where
    K: Object,
    Ctx: Send + Sync + 'static,
    E: StdError + Send + 'static,
    R: Fn(Arc<K>, Arc<Ctx>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Action, E>> + Send + 'static,
    P: Fn(Arc<K>, &E, Arc<Ctx>) -> Action + Send + Sync + 'static,
{
    let (namespace, name) = match split_key(key) {
        Ok((ns, name)) => (ns.unwrap_or(""), name),
        Err(err) => {
            error!(controller = %shared.name, %err, "dropping a key that is not namespace/name");
            shared.queue.forget(key);
            return;
        }
    };
    // Sharded: the key's bucket must be active here, and stays so (at least draining) while
    // the guard lives: its release waits for this reconcile.
    let mut guard = match &shared.shard {
        None => None,
        Some(gate) => match gate.begin(key, namespace, &shared.store) {
            Begin::Go(guard) => Some(guard),
            Begin::NotCached => {
                debug!(controller = %shared.name, namespace, name, "gone from the cache; nothing to reconcile");
                shared.own_writes.forget(key);
                shared.queue.forget(key);
                return;
            }
            Begin::Dropped => {
                drop_key(shared, gate, key, namespace, name);
                return;
            }
            Begin::Later => {
                debug!(controller = %shared.name, namespace, name,
                    "the shard member's renewal is late: the key waits");
                shared.queue.add_rate_limited(key.clone());
                return;
            }
        },
    };
    // The own-writes check comes first: the cache may move while it waits (a live read),
    // and the reconcile gets the object as cached after it.
    if shared.store.get(key).is_some() {
        match shared.own_writes.ensure_ready(key).await {
            Ok(Readiness::Ready) => {}
            Ok(Readiness::Behind { retry_in }) => {
                debug!(controller = %shared.name, namespace, name, ?retry_in,
                    "the caches do not show this key's own writes yet; their events enqueue it again");
                shared.queue.add_after(key.clone(), retry_in);
                return;
            }
            Err(err) => {
                warn!(controller = %shared.name, namespace, name, error = %err,
                    "checking the caches against this key's own writes failed");
                shared.queue.add_rate_limited(key.clone());
                // Retried rate-limited, and at the latest when the records expire: then the
                // key acts on the caches.
                if let Some(expires_in) = shared.own_writes.expires_in(key) {
                    shared.queue.add_after(key.clone(), expires_in);
                }
                return;
            }
        }
    }
    let Some(obj) = shared.store.get(key) else {
        debug!(controller = %shared.name, namespace, name, "gone from the cache; nothing to reconcile");
        shared.own_writes.forget(key);
        shared.queue.forget(key);
        return;
    };
    // Sharded by UID, the object may have been replaced (another UID) while the own-writes
    // check waited: its bucket decides.
    if let (Some(gate), Some(held)) = (&shared.shard, &guard)
        && !gate.covers(held, obj.metadata())
    {
        guard = gate.member.try_begin(gate.hash_of(obj.metadata()));
        if guard.is_none() {
            drop_key(shared, gate, key, namespace, name);
            return;
        }
    }
    let started = Instant::now();
    // A panic fails this key instead of the worker.
    let reconciled = std::panic::catch_unwind(AssertUnwindSafe(|| {
        (shared.reconcile)(obj.clone(), shared.ctx.clone())
    }));
    let outcome = match reconciled {
        Ok(fut) => CatchUnwind(Box::pin(fut)).await,
        Err(payload) => Err(payload),
    };
    let (action, result, panicked) = match outcome {
        Ok(Ok(action)) => {
            // The key's failures are forgotten below, unless the reconcile asks for a
            // rate-limited requeue (controller-runtime's `Requeue: true`): that backs off.
            let result = match action.next() {
                Next::AwaitChange => ReconcileResult::Success,
                Next::After(_) => ReconcileResult::RequeueAfter,
                Next::RateLimited => ReconcileResult::Requeue,
            };
            (action, result, false)
        }
        Ok(Err(err)) => {
            let retries = shared.queue.num_requeues(key);
            warn!(controller = %shared.name, namespace, name, retries, error = %err, "reconcile failed");
            let decided = std::panic::catch_unwind(AssertUnwindSafe(|| {
                (shared.error_policy)(obj, &err, shared.ctx.clone())
            }));
            match decided {
                Ok(action) => (action, ReconcileResult::Error, false),
                Err(payload) => {
                    error!(controller = %shared.name, namespace, name, error = %err,
                        panic = panic_message(payload.as_ref()),
                        "the error policy panicked; retrying the key rate-limited");
                    (Action::rate_limited(), ReconcileResult::Error, true)
                }
            }
        }
        Err(payload) => {
            error!(controller = %shared.name, namespace, name,
                panic = panic_message(payload.as_ref()), "reconcile panicked");
            (Action::rate_limited(), ReconcileResult::Error, true)
        }
    };
    if let Some(m) = &shared.metrics {
        m.reconciled(&shared.name, result, started.elapsed(), panicked);
    }
    match action.next() {
        Next::AwaitChange => shared.queue.forget(key),
        Next::After(after) => {
            shared.queue.forget(key);
            shared.queue.add_after(key.clone(), after);
        }
        Next::RateLimited => {
            let retries = shared.queue.num_requeues(key);
            match shared.max_retries {
                Some(max) if retries >= max && result == ReconcileResult::Error => {
                    warn!(controller = %shared.name, namespace, name, retries,
                        "dropping the key out of the queue after too many retries");
                    shared.queue.forget(key);
                }
                _ => shared.queue.add_rate_limited(key.clone()),
            }
        }
    }
}

/// Forgets a key whose bucket is not active here, and counts it.
fn drop_key<K, Ctx, R, P>(
    shared: &Shared<K, Ctx, R, P>,
    gate: &ShardGate,
    key: &ObjectKey,
    namespace: &str,
    name: &str,
) {
    debug!(controller = %shared.name, namespace, name,
        "its shard bucket is not active on this replica: dropped");
    shared.own_writes.forget(key);
    shared.queue.forget(key);
    gate.member.keys_dropped(1);
}

#[cfg(test)]
#[path = "process_tests.rs"]
mod process_tests;

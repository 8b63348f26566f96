//! [`SharedInformer`]: one reflector, one cache, many handlers (client-go's
//! `sharedIndexInformer`).
//!
//! ```text
//! ListerWatcher ─▶ Reflector ─▶ Fifo ─▶ controller::apply ─▶ Store
//!                                              └─▶ Processor ─▶ listener ─▶ handler (×N)
//! ```
//!
//! Deltas are applied and their notifications queued under one lock (`block_deltas`); a
//! handler added while the informer runs takes the same lock to replay the cache to itself,
//! so it sees every object exactly once: either in its replay or as a later event.

use kctrl_client::ObjectMetaAccess;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;
use k8s_openapi::{ListableResource, Metadata};
use tokio::runtime::Handle;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::contain::{PanicCounter, contain, panic_message};
use crate::controller;
use crate::delta::Delta;
use crate::fifo::{Fifo, Transform};
use crate::handler::ResourceEventHandler;
use crate::list_watch::ListerWatcher;
use crate::lister::Lister;
use crate::metrics::{GaugeMetric, HistogramMetric, InformerMetrics};
pub use crate::processor::Delivery;
use crate::processor::{
    Listener, ListenerShared, MINIMUM_RESYNC_PERIOD, Notification, Processor, SyncState,
    determine_resync_period,
};
use crate::reflector::{Reflector, ReflectorOptions, WatchErrorHandler};
use crate::shard::ShardFiltering;
use crate::store::{IndexFn, Store, StoreError};
use crate::sync::HasSynced;

/// Errors from configuring a [`SharedInformer`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum InformerError {
    /// A handler was added after the informer stopped.
    #[error("handler {handler} was not added to shared informer because it has stopped already")]
    Stopped {
        /// The handler's type name.
        handler: &'static str,
    },
    /// A setting that only applies before [`SharedInformer::run`] was changed after it.
    #[error("informer has already started")]
    AlreadyStarted,
    /// Indexers were added after the informer stopped.
    #[error("indexer was not added because the informer has stopped already")]
    IndexersAfterStop,
    /// The store refused the indexers (e.g. a name is taken).
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Why a [`SharedInformer`] stopped on its own: code it ran panicked where the panic could
/// not be contained to one object (a [`ListerWatcher`] of yours, say). Its cache no longer
/// follows the server; see [`SharedInformer::failure`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("shared informer {informer} stopped: a panic unwound its task: {panic}")]
pub struct InformerFailure {
    /// The informer's name.
    pub informer: String,
    /// The panic's message.
    pub panic: String,
}

/// How a [`SharedInformer`] is built (client-go's `SharedIndexInformerOptions`).
pub struct SharedInformerOptions<K> {
    /// Default resync period of handlers added without one, and the initial resync check
    /// period. Zero: the informer never resyncs.
    pub resync_period: Duration,
    /// Extra indexes, besides the built-in `namespace` index.
    pub indexers: Vec<(String, IndexFn<K>)>,
    /// Applied to every object before it is cached (e.g. to drop `managedFields`). The
    /// reflector applies it as soon as an object is decoded, so the initial list is never
    /// accumulated untransformed; each object is transformed exactly once. What happens to an
    /// object it panics on: see [`SharedInformer::set_transform`].
    pub transform: Option<Transform<K>>,
    /// Name in logs; empty: the resource's kind.
    pub name: String,
    /// Reflector knobs. `name`, `resync_period` and `should_resync` are set by the informer;
    /// `watch_error_handler` is kept unless [`SharedInformer::set_watch_error_handler`] is
    /// called.
    pub reflector: ReflectorOptions,
    /// Publish client-go's `informer_*` series for this informer (client-go's `Identifier`
    /// and `InformerMetricsProvider`); `None`: no metrics, at no cost. See
    /// [`metrics`](crate::metrics).
    pub metrics: Option<InformerMetrics>,
}

impl<K> Default for SharedInformerOptions<K> {
    fn default() -> Self {
        Self {
            resync_period: Duration::ZERO,
            indexers: Vec::new(),
            transform: None,
            name: String::new(),
            reflector: ReflectorOptions::default(),
            metrics: None,
        }
    }
}

impl<K> std::fmt::Debug for SharedInformerOptions<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedInformerOptions")
            .field("resync_period", &self.resync_period)
            .field(
                "indexers",
                &self.indexers.iter().map(|(n, _)| n).collect::<Vec<_>>(),
            )
            .field("transform", &self.transform.is_some())
            .field("name", &self.name)
            .field("reflector", &self.reflector)
            .field("metrics", &self.metrics)
            .finish()
    }
}

/// How a handler is added (client-go's `HandlerOptions`), for
/// [`SharedInformer::add_event_handler_with_options`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HandlerOptions {
    /// How often every cached object is re-delivered to this handler as an update; `None`:
    /// the informer's default.
    pub resync_period: Option<Duration>,
    /// Where the handler is called: the blocking pool (default) or the runtime.
    pub delivery: Delivery,
}

/// The handle of one handler added to a [`SharedInformer`] (client-go's
/// `ResourceEventHandlerRegistration`). Cheap to clone.
#[derive(Clone)]
pub struct HandlerRegistration {
    shared: Arc<ListenerShared>,
}

impl std::fmt::Debug for HandlerRegistration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HandlerRegistration")
            .field("id", &self.shared.id)
            .field("handler", &self.shared.name)
            .finish()
    }
}

impl HandlerRegistration {
    /// Whether the informer has synced **and** this handler has been called for every object
    /// of the initial list (or, for a handler added late, of the cache replay).
    pub fn has_synced(&self) -> bool {
        self.shared.has_synced()
    }

    /// Resolves once [`has_synced`](Self::has_synced) holds (false if it never can).
    pub async fn synced(&self) -> bool {
        self.shared.synced().await
    }

    /// The resync period in effect for this handler (zero: never), after the adjustments to
    /// the informer's resync check period.
    pub fn resync_period(&self) -> Duration {
        self.shared.resync_period()
    }

    /// How many notifications this handler panicked on. Each such notification was logged
    /// and skipped: the handler is not called with it again.
    pub fn handler_panics(&self) -> u64 {
        self.shared.panics()
    }
}

impl HasSynced for HandlerRegistration {
    fn has_synced(&self) -> bool {
        self.shared.has_synced()
    }

    fn synced(&self) -> BoxFuture<'_, bool> {
        Box::pin(self.shared.synced())
    }
}

struct State<K> {
    started: bool,
    stopped: bool,
    /// Set when a panic stopped the informer.
    failure: Option<InformerFailure>,
    resync_check_period: Duration,
    transform: Option<Transform<K>>,
    watch_error_handler: Option<WatchErrorHandler>,
    reflector_options: ReflectorOptions,
    reflector: Option<Reflector<K>>,
}

struct Inner<K> {
    name: String,
    lw: Arc<dyn ListerWatcher<K>>,
    store: Store<K>,
    processor: Arc<Processor<K>>,
    default_handler_resync: Duration,
    /// Held while deltas are applied and their notifications queued, and while a late
    /// handler replays the cache: the two never interleave.
    block_deltas: Mutex<()>,
    /// Lock order: `state`, then `block_deltas`.
    state: Mutex<State<K>>,
    /// Whether the initial list has been applied to the store (or never will be).
    synced: watch::Sender<SyncState>,
    /// Notifications any handler panicked on, and the metrics sinks' panics. The store's
    /// index-function panics and the reflector's are counted by them.
    handler_panics: PanicCounter,
    /// `informer_queued_items`, handed to the queue when the informer starts.
    queued_items: Option<Arc<dyn GaugeMetric>>,
    /// `informer_processing_latency_seconds`.
    processing_latency: Option<Arc<dyn HistogramMetric>>,
    /// `kctrl_informer_shard_client_filtering`, for an informer following a shard scope.
    shard_client_filtering: Option<Arc<dyn GaugeMetric>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A cache of one resource kept current by list and watch, shared by any number of event
/// handlers (client-go's `SharedIndexInformer`). Cheap to clone; clones share everything.
///
/// Add handlers with [`add_event_handler`](Self::add_event_handler) (before or after
/// starting), start it with [`run`](Self::run) or [`start`](Self::start), wait with
/// [`wait_for_cache_sync`](crate::wait_for_cache_sync), read through [`lister`](Self::lister)
/// or [`store`](Self::store).
pub struct SharedInformer<K> {
    inner: Arc<Inner<K>>,
}

impl<K> Clone for SharedInformer<K> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
        }
    }
}

impl<K> std::fmt::Debug for SharedInformer<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedInformer")
            .field("name", &self.inner.name)
            .finish_non_exhaustive()
    }
}

impl<K> SharedInformer<K>
where
    K: ListableResource + Metadata<Ty: ObjectMetaAccess> + Clone + Send + Sync + 'static,
{
    /// An informer over `lister_watcher`; nothing happens until [`run`](Self::run).
    pub fn new(lister_watcher: impl ListerWatcher<K>, options: SharedInformerOptions<K>) -> Self {
        Self::from_arc(Arc::new(lister_watcher), options)
    }

    /// [`new`](Self::new) with a shared lister-watcher.
    pub fn from_arc(
        lister_watcher: Arc<dyn ListerWatcher<K>>,
        options: SharedInformerOptions<K>,
    ) -> Self {
        let name = if options.name.is_empty() {
            K::KIND.to_owned()
        } else {
            options.name
        };
        let mut store = Store::with_indexers(options.indexers);
        let (mut queued_items, mut processing_latency) = (None, None);
        let mut shard_client_filtering = None;
        let sharded =
            options.reflector.shard_scope.is_some() || lister_watcher.shard_scope().is_some();
        let handler_panics = PanicCounter::default();
        if let Some(InformerMetrics { id, provider }) = &options.metrics {
            // Sinks are called on the informer's task: a panic in one is contained per call.
            let guard = |metric| -> Arc<dyn GaugeMetric> {
                Arc::new(Contained {
                    metric,
                    informer: name.clone(),
                    panics: handler_panics.clone(),
                })
            };
            store = store.with_resource_version_metric(guard(
                provider.new_store_resource_version_metric(id),
            ));
            queued_items = Some(guard(provider.new_queued_items_metric(id)));
            if sharded {
                shard_client_filtering =
                    Some(guard(provider.new_shard_client_filtering_metric(id)));
            }
            processing_latency = Some(Arc::new(Contained {
                metric: provider.new_processing_latency_metric(id),
                informer: name.clone(),
                panics: handler_panics.clone(),
            }) as Arc<dyn HistogramMetric>);
        }
        Self {
            inner: Arc::new(Inner {
                name,
                lw: lister_watcher,
                store,
                processor: Arc::new(Processor::new()),
                default_handler_resync: options.resync_period,
                block_deltas: Mutex::new(()),
                state: Mutex::new(State {
                    started: false,
                    stopped: false,
                    failure: None,
                    resync_check_period: options.resync_period,
                    transform: options.transform,
                    watch_error_handler: None,
                    reflector_options: options.reflector,
                    reflector: None,
                }),
                synced: watch::Sender::new(SyncState::Pending),
                handler_panics,
                queued_items,
                processing_latency,
                shard_client_filtering,
            }),
        }
    }

    /// The informer's name in logs.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// How many panics of code it calls were caught, each logged and contained to one
    /// object or call (see the crate's guarantees): notifications its handlers panicked on
    /// (over all handlers ever added), objects its transform or an index function panicked
    /// on, and calls of its watch error handler and metrics sinks that panicked.
    pub fn handler_panics(&self) -> u64 {
        let st = lock(&self.inner.state);
        let reflector = st.reflector.as_ref().map_or(0, Reflector::contained_panics);
        self.inner
            .handler_panics
            .load(std::sync::atomic::Ordering::Relaxed)
            + self.inner.store.index_panics()
            + reflector
    }

    /// Adds a handler with the informer's default resync period; see
    /// [`add_event_handler_with_resync`](Self::add_event_handler_with_resync).
    pub fn add_event_handler(
        &self,
        handler: impl ResourceEventHandler<K>,
    ) -> Result<HandlerRegistration, InformerError> {
        self.add_event_handler_with_options(handler, HandlerOptions::default())
    }

    /// Adds a handler that also wants every cached object re-delivered as an update every
    /// `resync_period`; see [`add_event_handler_with_options`](Self::add_event_handler_with_options).
    pub fn add_event_handler_with_resync<H: ResourceEventHandler<K>>(
        &self,
        handler: H,
        resync_period: Duration,
    ) -> Result<HandlerRegistration, InformerError> {
        self.add_event_handler_with_options(
            handler,
            HandlerOptions {
                resync_period: Some(resync_period),
                ..HandlerOptions::default()
            },
        )
    }

    /// Adds a handler (client-go's `AddEventHandlerWithOptions`). With a resync period in
    /// `options`, the handler also wants every cached object re-delivered as an update that
    /// often (zero: never; below 1 s: 1 s); without one, the informer's default applies.
    ///
    /// Before the informer starts, a period shorter than the informer's resync check period
    /// lowers the check period (and re-derives every handler's period); after, it is raised
    /// to the check period. An informer created with a zero period never resyncs.
    ///
    /// A handler added while the informer runs is first called with `on_add(obj, true)` for
    /// every cached object, then receives the events that follow, none lost or repeated.
    /// Fails once the informer has stopped.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # use k8s_openapi::api::core::v1::ConfigMap;
    /// # let client = kctrl_fake::FakeApi::new().client();
    /// use kctrl_client::Api;
    /// use kctrl_informer::{
    ///     Delivery, EventHandlerFns, HandlerOptions, ListWatch, SharedInformer,
    ///     SharedInformerOptions,
    /// };
    ///
    /// let informer = SharedInformer::new(
    ///     ListWatch::new(Api::<ConfigMap>::namespaced(client, "default")),
    ///     SharedInformerOptions::default(),
    /// );
    /// // A handler that returns at once may run on the runtime's own threads.
    /// informer.add_event_handler_with_options(
    ///     EventHandlerFns::new().on_add(|cm: &std::sync::Arc<ConfigMap>, _initial| {
    ///         println!("{:?}", cm.metadata.name);
    ///     }),
    ///     HandlerOptions {
    ///         delivery: Delivery::Runtime,
    ///         ..HandlerOptions::default()
    ///     },
    /// )?;
    /// # Ok(()) }
    /// ```
    pub fn add_event_handler_with_options<H: ResourceEventHandler<K>>(
        &self,
        handler: H,
        options: HandlerOptions,
    ) -> Result<HandlerRegistration, InformerError> {
        let inner = &*self.inner;
        let resync_period = options
            .resync_period
            .unwrap_or(inner.default_handler_resync);
        let mut st = lock(&inner.state);
        if st.stopped {
            return Err(InformerError::Stopped {
                handler: std::any::type_name::<H>(),
            });
        }
        let mut requested = resync_period;
        if !requested.is_zero() {
            if requested < MINIMUM_RESYNC_PERIOD {
                tracing::info!(
                    informer = %inner.name,
                    ?requested,
                    "resync period too small, raised to the minimum of 1s"
                );
                requested = MINIMUM_RESYNC_PERIOD;
            }
            if requested < st.resync_check_period {
                if st.started {
                    tracing::info!(
                        informer = %inner.name,
                        ?requested,
                        resync_check_period = ?st.resync_check_period,
                        "the informer has started: resync period raised to its resync check period"
                    );
                    requested = st.resync_check_period;
                } else {
                    st.resync_check_period = requested;
                    inner.processor.resync_check_period_changed(requested);
                }
            }
        }
        let effective = determine_resync_period(requested, st.resync_check_period);
        let listener = Listener::new(
            handler,
            options.delivery,
            requested,
            effective,
            Instant::now(),
            inner.synced.subscribe(),
            inner.handler_panics.clone(),
        );
        let registration = HandlerRegistration {
            shared: listener.shared.clone(),
        };
        if !st.started {
            inner.processor.add_listener(listener);
            return Ok(registration);
        }
        // Join a running informer: no delta is applied while the cache is replayed.
        let _blocked = lock(&inner.block_deltas);
        inner.processor.add_listener(listener.clone());
        for obj in inner.store.list() {
            listener.add(Notification::Add {
                obj,
                is_in_initial_list: true,
            });
        }
        Ok(registration)
    }

    /// Removes a handler. Idempotent; a registration of another informer is ignored.
    /// Asynchronous: the notification the handler is processing completes, queued ones are
    /// dropped. Returns whether the handler was registered here.
    pub fn remove_event_handler(&self, registration: &HandlerRegistration) -> bool {
        let _st = lock(&self.inner.state);
        let _blocked = lock(&self.inner.block_deltas);
        self.inner.processor.remove_listener(registration.shared.id)
    }

    /// Whether `registration` is a handler currently registered with this informer.
    pub fn is_registered(&self, registration: &HandlerRegistration) -> bool {
        self.inner.processor.contains(registration.shared.id)
    }

    /// Number of registered handlers.
    pub fn handler_count(&self) -> usize {
        self.inner.processor.len()
    }

    /// The informer's resync check period: how often the reflector asks whether a handler is
    /// due for a resync (the smallest handler period requested before start).
    pub fn resync_check_period(&self) -> Duration {
        lock(&self.inner.state).resync_check_period
    }

    /// Adds indexes to the cache (existing objects are indexed). Fails once stopped.
    pub fn add_indexers(
        &self,
        indexers: impl IntoIterator<Item = (String, IndexFn<K>)>,
    ) -> Result<(), InformerError> {
        let st = lock(&self.inner.state);
        if st.stopped {
            return Err(InformerError::IndexersAfterStop);
        }
        self.inner.store.add_indexers(indexers)?;
        Ok(())
    }

    /// Sets the function applied to every object before it is cached (by the reflector, as
    /// soon as the object is decoded). Fails once started. If it panics on an object, the
    /// panic is caught, logged and counted ([`handler_panics`](Self::handler_panics)) and
    /// the object is skipped:
    ///
    /// * an ADDED object is not cached and no handler is told; if it is then deleted before
    ///   any later event of it was admitted, that deletion reaches no handler either;
    /// * a modification is not applied: the cache keeps the previous state;
    /// * in a relist (a list, or a streaming list's initial events), the object still exists:
    ///   the cache keeps what it holds for it (nothing if it was never cached) and no
    ///   deletion is inferred for it;
    /// * a deletion applies with the object as the server sent it.
    ///
    /// A deletion of an object the cache does not hold for any other reason still reaches
    /// the handlers, as in client-go.
    pub fn set_transform(&self, transform: Transform<K>) -> Result<(), InformerError> {
        let mut st = lock(&self.inner.state);
        if st.started {
            return Err(InformerError::AlreadyStarted);
        }
        st.transform = Some(transform);
        Ok(())
    }

    /// Sets the function told of each failed list-and-watch round (the default logs it).
    /// Fails once started. A panic in it is caught, logged and counted.
    pub fn set_watch_error_handler(
        &self,
        handler: impl Fn(&kctrl_client::Error) + Send + Sync + 'static,
    ) -> Result<(), InformerError> {
        let mut st = lock(&self.inner.state);
        if st.started {
            return Err(InformerError::AlreadyStarted);
        }
        st.watch_error_handler = Some(Arc::new(handler));
        Ok(())
    }

    /// The cache. Read-only by convention: writing to it would desynchronise it from the
    /// handlers' view.
    pub fn store(&self) -> &Store<K> {
        &self.inner.store
    }

    /// A lister over the cache.
    pub fn lister(&self) -> Lister<K> {
        Lister::new(self.inner.store.clone())
    }

    /// Whether the initial list has been applied to the cache. Stays true when the informer
    /// is stopped afterwards, except by a [`failure`](Self::failure): then it turns false.
    pub fn has_synced(&self) -> bool {
        *self.inner.synced.borrow() == SyncState::Synced
    }

    /// Resolves to true once [`has_synced`](Self::has_synced) holds, or to false once it
    /// never can: the informer stopped (cancelled, its `run` future dropped, or a
    /// [`failure`](Self::failure)) before it synced.
    pub async fn synced(&self) -> bool {
        let mut rx = self.inner.synced.subscribe();
        rx.wait_for(|s| *s != SyncState::Pending)
            .await
            .is_ok_and(|s| *s == SyncState::Synced)
    }

    /// Why the informer stopped on its own, if it did: a panic its task could not contain
    /// (one in a [`ListerWatcher`] of yours, say). It is then [stopped](Self::is_stopped),
    /// not [synced](Self::has_synced), and its cache is frozen. `None` while it runs and
    /// after an ordinary stop.
    pub fn failure(&self) -> Option<InformerFailure> {
        lock(&self.inner.state).failure.clone()
    }

    /// Resolves once the informer has stopped, with its [`failure`](Self::failure) if a panic
    /// stopped it. Never resolves for an informer that is never run.
    pub async fn stopped(&self) -> Option<InformerFailure> {
        let mut rx = self.inner.synced.subscribe();
        loop {
            {
                let st = lock(&self.inner.state);
                if st.stopped {
                    return st.failure.clone();
                }
            }
            // Every stop moves the sync state or leaves it Synced; wait for a change, or,
            // once synced, for the end (the sender lives as long as the informer).
            if rx.changed().await.is_err() {
                return self.failure();
            }
        }
    }

    /// The resourceVersion the reflector last synced to; empty before the first list.
    pub fn last_sync_resource_version(&self) -> String {
        lock(&self.inner.state)
            .reflector
            .as_ref()
            .map(Reflector::last_sync_resource_version)
            .unwrap_or_default()
    }

    /// How the informer applies its shard selector (see [`ShardScope`](crate::ShardScope));
    /// [`Unsharded`](ShardFiltering::Unsharded) before it has listed.
    pub fn shard_filtering(&self) -> ShardFiltering {
        lock(&self.inner.state)
            .reflector
            .as_ref()
            .map_or(ShardFiltering::Unsharded, Reflector::shard_filtering)
    }

    /// Whether [`run`](Self::run) has been called.
    pub fn has_started(&self) -> bool {
        lock(&self.inner.state).started
    }

    /// Whether the informer ran and has stopped (no handler can be added any more): it was
    /// cancelled, its [`run`](Self::run) future was dropped, or a [`failure`](Self::failure)
    /// stopped it. Also true for an informer of a [factory](crate::SharedInformerFactory)
    /// that shut down before starting it: it never runs.
    pub fn is_stopped(&self) -> bool {
        lock(&self.inner.state).stopped
    }

    /// Stops an informer that never started (its factory shut down first): it will never
    /// run, sync waiters get false, and handlers are refused. Does nothing once started.
    pub(crate) fn stop_unstarted(&self) {
        {
            let mut st = lock(&self.inner.state);
            if st.started || st.stopped {
                return;
            }
            // Under the same lock as the check: a concurrent `run` then does not start.
            st.stopped = true;
        }
        self.inner.mark_stopped(None);
        self.inner.processor.close_all();
    }

    /// Spawns [`run`](Self::run) on the current tokio runtime. The informer counts as
    /// started when this returns.
    pub fn start(&self, cancel: CancellationToken) -> JoinHandle<()> {
        let me = self.clone();
        // Armed before the task is spawned: a task aborted before it first runs (or a runtime
        // shutting down) still leaves the informer visibly stopped.
        let prepared = self
            .prepare()
            .map(|p| (p, StopOnDrop::armed(self.inner.clone())));
        tokio::spawn(async move {
            if let Some((prepared, on_drop)) = prepared {
                me.run_prepared(prepared, on_drop, cancel).await;
            }
        })
    }

    /// Lists, watches and notifies handlers until `cancel` fires; then stops the handlers
    /// (waiting for the notifications being delivered) and returns. Runs once: a second call
    /// logs a warning and returns at once.
    ///
    /// Panics of code the informer calls are contained per object where they can be
    /// (handlers, the transform, index functions, the watch error handler, metrics sinks).
    /// Any other panic (in a [`ListerWatcher`] of yours, say) stops the informer visibly: it
    /// is logged, [`failure`](Self::failure) says why, [`is_stopped`](Self::is_stopped)
    /// turns true, [`has_synced`](Self::has_synced) false, and sync waiters get false.
    /// Dropping this future stops the informer the same way, without a failure.
    pub async fn run(&self, cancel: CancellationToken) {
        if let Some(prepared) = self.prepare() {
            let on_drop = StopOnDrop::armed(self.inner.clone());
            self.run_prepared(prepared, on_drop, cancel).await;
        }
    }

    /// Marks the informer started and builds its queue and reflector; `None` if it had
    /// already started. Must be called within a tokio runtime.
    fn prepare(&self) -> Option<(Fifo<K>, Reflector<K>)> {
        let inner = &*self.inner;
        let mut st = lock(&inner.state);
        if st.stopped && !st.started {
            tracing::warn!(
                informer = %inner.name,
                "the shared informer was stopped before it started (its factory shut down); it does not run"
            );
            return None;
        }
        if st.started {
            tracing::warn!(
                informer = %inner.name,
                "the shared informer has already started; it runs only once"
            );
            return None;
        }
        st.started = true;
        // The reflector transforms each object as it is decoded, so nothing untransformed is
        // accumulated during the initial list; the queue must not transform again.
        let fifo = Fifo::with_queued_items_metric(None, inner.queued_items.clone());
        let mut options = st.reflector_options.clone();
        if options.name.is_empty() {
            options.name = inner.name.clone();
        }
        options.resync_period = st.resync_check_period;
        if inner.shard_client_filtering.is_some() {
            options
                .shard_client_filtering_metric
                .clone_from(&inner.shard_client_filtering);
        }
        let processor = inner.processor.clone();
        options.should_resync = Some(Arc::new(move || processor.should_resync(Instant::now())));
        if let Some(h) = st.watch_error_handler.clone() {
            options.watch_error_handler = Some(h);
        }
        let reflector = Reflector::with_transform(
            inner.lw.clone(),
            Arc::new(fifo.clone()),
            options,
            st.transform.clone(),
        );
        st.reflector = Some(reflector.clone());
        inner.processor.run(Handle::current());
        Some((fifo, reflector))
    }

    async fn run_prepared(
        &self,
        (fifo, reflector): (Fifo<K>, Reflector<K>),
        mut on_drop: StopOnDrop<K>,
        cancel: CancellationToken,
    ) {
        let inner = &*self.inner;
        let close_on_cancel = async {
            cancel.cancelled().await;
            fifo.close();
        };
        let mark_synced = async {
            if fifo.synced().await {
                inner.synced.send_if_modified(|s| {
                    let pending = *s == SyncState::Pending;
                    if pending {
                        *s = SyncState::Synced;
                    }
                    pending
                });
            }
        };
        let process = controller::process_loop(&fifo, |deltas, initial| {
            self.handle_deltas(deltas, initial);
        });
        let work = async {
            tokio::join!(
                reflector.run(cancel.clone()),
                close_on_cancel,
                mark_synced,
                process
            );
        };
        let failure = match std::panic::AssertUnwindSafe(work).catch_unwind().await {
            Ok(()) => None,
            Err(payload) => {
                let failure = InformerFailure {
                    informer: inner.name.clone(),
                    panic: panic_message(payload.as_ref()),
                };
                tracing::error!(
                    informer = %inner.name,
                    panic = %failure.panic,
                    "a panic stopped the shared informer: its cache no longer follows the server"
                );
                Some(failure)
            }
        };
        on_drop.inner = None;
        inner.mark_stopped(failure);
        inner.processor.stop().await;
    }

    fn handle_deltas(&self, deltas: Vec<Delta<K>>, is_in_initial_list: bool) {
        let inner = &*self.inner;
        // client-go times the queue's process callback: apply, then hand to the listeners.
        let started = inner.processing_latency.as_ref().map(|_| Instant::now());
        {
            let _blocked = lock(&inner.block_deltas);
            for n in controller::apply(&inner.store, deltas, is_in_initial_list) {
                inner.processor.distribute(&n, controller::is_resync(&n));
            }
        }
        if let (Some(histogram), Some(started)) = (&inner.processing_latency, started) {
            histogram.observe(started.elapsed().as_secs_f64());
        }
    }
}

/// Marks the informer stopped if its `run` future is dropped before it returns, so that it
/// does not look running, and closes its handlers (without waiting for them).
struct StopOnDrop<K: Send + Sync + 'static> {
    inner: Option<Arc<Inner<K>>>,
}

impl<K: Send + Sync + 'static> StopOnDrop<K> {
    fn armed(inner: Arc<Inner<K>>) -> Self {
        Self { inner: Some(inner) }
    }
}

impl<K: Send + Sync + 'static> Drop for StopOnDrop<K> {
    fn drop(&mut self) {
        if let Some(inner) = self.inner.take() {
            tracing::info!(informer = %inner.name, "the shared informer's run was dropped; it has stopped");
            inner.mark_stopped(None);
            inner.processor.close_all();
        }
    }
}

impl<K> Inner<K> {
    /// Records the stop (and its failure): no handler can be added any more, and whoever
    /// waits for the sync learns whether it happened.
    fn mark_stopped(&self, failure: Option<InformerFailure>) {
        let mut st = lock(&self.state);
        st.stopped = true;
        let failed = failure.is_some();
        if failed {
            st.failure = failure;
        }
        drop(st);
        // Waiters are woken even if the state stays `Synced`: `stopped()` looks at `stopped`.
        self.synced.send_modify(|s| {
            *s = match (*s, failed) {
                (_, true) => SyncState::Failed,
                (SyncState::Pending, false) => SyncState::Stopped,
                (other, false) => other,
            };
        });
    }
}

/// A metrics sink of the informer's whose panics are caught, logged and counted per call.
struct Contained<M: ?Sized> {
    metric: Arc<M>,
    informer: String,
    panics: PanicCounter,
}

impl<M: ?Sized> Contained<M> {
    fn call(&self, f: impl FnOnce(&M)) {
        if let Err(panic) = contain(&self.panics, || f(&self.metric)) {
            tracing::error!(informer = %self.informer, %panic, "an informer metrics sink panicked; the value was not recorded");
        }
    }
}

impl GaugeMetric for Contained<dyn GaugeMetric> {
    fn set(&self, value: f64) {
        self.call(|m| m.set(value));
    }
}

impl HistogramMetric for Contained<dyn HistogramMetric> {
    fn observe(&self, value: f64) {
        self.call(|m| m.observe(value));
    }
}

impl<K> HasSynced for SharedInformer<K>
where
    K: ListableResource + Metadata<Ty: ObjectMetaAccess> + Clone + Send + Sync + 'static,
{
    fn has_synced(&self) -> bool {
        SharedInformer::has_synced(self)
    }

    fn synced(&self) -> BoxFuture<'_, bool> {
        Box::pin(SharedInformer::synced(self))
    }
}

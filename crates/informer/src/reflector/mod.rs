//! The reflector (client-go's `Reflector`): keeps a [`ReflectorStore`] in step with the API
//! server by listing once and then watching, relisting only when it must.
//!
//! One round of [`Reflector::list_and_watch`]:
//!
//! 1. **Get the whole state.** Either a *streaming list* (a watch with
//!    `sendInitialEvents=true`: ADDED events up to a bookmark annotated
//!    `k8s.io/initial-events-end`, whose stream then simply continues), or a (paged) *list*.
//!    The result goes to [`ReflectorStore::replace`] at the list's resourceVersion.
//! 2. **Watch from there**, applying events to the store, re-opening the watch where the last
//!    one ended when it times out, and periodically asking the store to resync.
//! 3. Return when the watch can't be resumed (e.g. 410 Expired); [`Reflector::run`] backs off
//!    and starts the next round, which relists from the last resourceVersion seen.
//!
//! A reflector built with [`Reflector::with_transform`] applies its [`Transform`] to every
//! object as soon as it is decoded (list pages, a streaming list's initial events, watch
//! events), so the initial state is never held untransformed (as client-go applies the
//! informer's transformer in its watch-list temporary store).
//!
//! Every object is then re-packed once (a clone, which allocates each `Vec` and `String` at
//! exactly its length, where decoding left the spare capacity of doubling growth) and moved
//! into the `Arc` it will be cached in; from there on only pointers are collected, queued and
//! stored. On the benchmark's Pods this is a fifth less heap per object, and the initial list
//! never holds a second copy of its objects. [`ReflectorOptions::compact_objects`] turns the
//! re-packing off where it does not pay (objects already built at their size).
//!
//! Which resourceVersion a request uses matters for the API server's load:
//!
//! | request                         | resourceVersion                        | paging         |
//! |---------------------------------|----------------------------------------|----------------|
//! | first list                      | `"0"` (any cached data)                | 500 per page   |
//! | relist                          | last synced                            | off            |
//! | after 410 / "too large" on list | `""` (consistent read)                 | as before      |
//! | watch                           | last synced (+ bookmarks, 5–10 min timeout) | –         |
//! | streaming list                  | last synced or `""`, `NotOlderThan`    | –              |

mod backoff;
mod errors;
mod pager;

use kctrl_client::ObjectMetaAccess;
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::fmt;
use std::pin::{Pin, pin};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::{ListableResource, Metadata};
use kctrl_client::{Error, ResourceVersionMatch, ShardSelector, WatchEvent, WatchParams};
use tokio::time::{Instant, Sleep, sleep_until};
use tokio_util::sync::CancellationToken;

pub use backoff::BackoffOptions;

use crate::contain::{PanicCounter, contain};
use crate::delta::ReflectorStore;
use crate::fifo::Transform;
use crate::keys::{ObjectKey, key_of};
use crate::list_watch::{EventStream, ListerWatcher};
use crate::metrics::GaugeMetric;
use crate::processor::FAR_FUTURE_SECS;
use crate::shard::{Reshard, ScopeMember, ScopeState, ShardFiltering, ShardScope};
use backoff::{Backoff, RetryWithDeadline};
use errors::{
    is_expired, is_internal_error, is_too_large_resource_version, is_watch_error_retriable,
};

/// Decides, each time the resync timer fires, whether to resync (client-go's `ShouldResync`).
pub type ShouldResyncFn = Arc<dyn Fn() -> bool + Send + Sync>;

/// Receives the error of each failed list-and-watch round, before the reflector backs off.
pub type WatchErrorHandler = Arc<dyn Fn(&Error) + Send + Sync>;

/// The shortest watch timeout the reflector asks for; smaller settings are ignored.
pub const MIN_WATCH_TIMEOUT: Duration = Duration::from_secs(5 * 60);

/// A watch that ends sooner than this without a single event counts as failed.
const VERY_SHORT_WATCH: Duration = Duration::from_secs(1);

/// How often a streaming list still waiting for its end bookmark is reported.
const INITIAL_EVENTS_WARNING_INTERVAL: Duration = Duration::from_secs(10);

/// Internal errors on a watch stop being retried after a minute without one.
const INTERNAL_ERROR_RESET: Duration = Duration::from_secs(60);

/// How a [`Reflector`] behaves (client-go's `ReflectorOptions` plus its public knobs).
#[derive(Clone)]
pub struct ReflectorOptions {
    /// Name in logs. Empty: the caller's `file:line`.
    pub name: String,
    /// How often to call [`ReflectorStore::resync`]; zero never.
    pub resync_period: Duration,
    /// Consulted when the resync timer fires; `None` always resyncs.
    pub should_resync: Option<ShouldResyncFn>,
    /// List page size. `None`: 500 for lists at resourceVersion `""` or `"0"`, unpaged for
    /// relists at a given resourceVersion (so the watch cache can serve them).
    pub page_size: Option<u32>,
    /// The watch timeout is uniformly random in `[min, 2 × min]`; values below 5 minutes are
    /// raised to 5 minutes.
    pub min_watch_timeout: Duration,
    /// Start each round with a streaming list (WatchList). When it fails (the server cannot
    /// stream or rejects `sendInitialEvents`, say an older apiserver during a rolling upgrade)
    /// that round lists instead, and the next round tries a streaming list again, as
    /// client-go's reflector does.
    pub use_watch_list: bool,
    /// Called with each failed round's error; `None` logs it (expired at debug, others at
    /// warn). A panic in it is caught, logged and counted, and the reflector goes on.
    pub watch_error_handler: Option<WatchErrorHandler>,
    /// Backoff between rounds and on rejected watches.
    pub backoff: BackoffOptions,
    /// How long internal errors (500) ending a watch are retried by re-watching before the
    /// reflector relists; zero relists at once (client-go's `MaxInternalErrorRetryDuration`).
    pub max_internal_error_retry_duration: Duration,
    /// Re-pack every decoded object before caching it (a clone, which sizes each `Vec` to
    /// its length; see the [module docs](self)). Default on. It pays for objects decoded
    /// from JSON with lists in them (a fifth of a full Pod's heap); it does not for objects
    /// built at their exact size (views decoded from protobuf) nor for few large ones, where
    /// the copy costs more time than the bytes are worth: on the Deployment controller's
    /// ReplicaSets and Deployments it saved about 300 of 7,500 bytes an object (4%) for 2.8%
    /// of the controller's instructions (docs/benchmarks/controller.md).
    pub compact_objects: bool,
    /// The shard scope to follow (see [`ShardScope`]); `None` takes the lister-watcher's
    /// ([`ListerWatcher::shard_scope`]), if any.
    pub shard_scope: Option<ShardScope>,
    /// Set to 1 while the reflector filters on the client because the server ignored its
    /// shard selector, else 0 (`kctrl_informer_shard_client_filtering`).
    pub shard_client_filtering_metric: Option<Arc<dyn GaugeMetric>>,
}

impl Default for ReflectorOptions {
    fn default() -> Self {
        Self {
            name: String::new(),
            resync_period: Duration::ZERO,
            should_resync: None,
            page_size: None,
            min_watch_timeout: MIN_WATCH_TIMEOUT,
            use_watch_list: true,
            watch_error_handler: None,
            backoff: BackoffOptions::default(),
            max_internal_error_retry_duration: Duration::ZERO,
            compact_objects: true,
            shard_scope: None,
            shard_client_filtering_metric: None,
        }
    }
}

impl fmt::Debug for ReflectorOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReflectorOptions")
            .field("name", &self.name)
            .field("resync_period", &self.resync_period)
            .field(
                "should_resync",
                &self.should_resync.as_ref().map(|_| "<fn>"),
            )
            .field("page_size", &self.page_size)
            .field("min_watch_timeout", &self.min_watch_timeout)
            .field("use_watch_list", &self.use_watch_list)
            .field(
                "watch_error_handler",
                &self.watch_error_handler.as_ref().map(|_| "<fn>"),
            )
            .field("backoff", &self.backoff)
            .field(
                "max_internal_error_retry_duration",
                &self.max_internal_error_retry_duration,
            )
            .field("compact_objects", &self.compact_objects)
            .field("shard_scope", &self.shard_scope)
            .finish_non_exhaustive()
    }
}

/// Lists and watches one resource into a [`ReflectorStore`]. Cheap to clone: clones share
/// state, so one clone can [`run`](Reflector::run) while another reads
/// [`last_sync_resource_version`](Reflector::last_sync_resource_version).
pub struct Reflector<K> {
    inner: Arc<Inner<K>>,
}

impl<K> Clone for Reflector<K> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
        }
    }
}

impl<K> fmt::Debug for Reflector<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Reflector")
            .field("name", &self.inner.name)
            .field("type", &self.inner.type_description)
            .field(
                "last_sync_resource_version",
                &self
                    .inner
                    .rv
                    .lock()
                    .map(|s| s.last_sync.clone())
                    .unwrap_or_default(),
            )
            .finish_non_exhaustive()
    }
}

struct Inner<K> {
    name: String,
    type_description: String,
    lw: Arc<dyn ListerWatcher<K>>,
    store: Arc<dyn ReflectorStore<K>>,
    resync_period: Duration,
    should_resync: Option<ShouldResyncFn>,
    page_size: Option<u32>,
    min_watch_timeout: Duration,
    use_watch_list: bool,
    watch_error_handler: Option<WatchErrorHandler>,
    backoff: Backoff,
    max_internal_error_retry_duration: Duration,
    compact_objects: bool,
    transform: Option<Transform<K>>,
    /// Panics of the transform and the watch error handler, caught.
    panics: PanicCounter,
    rv: Mutex<RvState>,
    /// Membership of the shard scope followed, if any.
    shard: Option<ScopeMember>,
    /// `kctrl_informer_shard_client_filtering`.
    shard_metric: Option<Arc<dyn GaugeMetric>>,
    /// The warning about a server ignoring the shard selector was logged.
    shard_warned: AtomicBool,
}

#[derive(Default)]
struct RvState {
    /// The resourceVersion the store is known to be current to.
    last_sync: String,
    /// The last list or streaming list found `last_sync` gone or too new: read consistently.
    unavailable: bool,
    /// Keys whose ADDED event the transform panicked on (never given to the store) and
    /// that no later event admitted: their DELETED is not passed on, as nothing of them was
    /// ever cached or told to a handler.
    skipped_adds: HashSet<ObjectKey>,
    /// The first list (at "0") came back in pages: the watch cache is off, keep paging.
    paginated_result: bool,
    /// The shard scope's state the store reflects (`None` before the first list, or
    /// without a scope): watches are opened with its selector.
    shard_applied: Option<ScopeState>,
    /// After changes of the shard selector that listed the ranges they gained, each at its
    /// resourceVersion R: (those ranges, R), one per change the watch has not yet passed.
    /// Watch events of their objects at or below R are already in the store and are
    /// dropped; an entry is cleared once the watch passes its R. A second change made before
    /// the watch passed the first one's R keeps the first entry: the watch restarts from
    /// before it, and would otherwise deliver again what the first list holds.
    gained: Vec<(ShardSelector, u64)>,
    /// How the shard selector is applied.
    filtering: Option<ShardFiltering>,
}

/// Logs with the reflector's name and resource as fields.
macro_rules! log {
    ($level:ident, $inner:expr, $($rest:tt)+) => {
        tracing::$level!(
            reflector = %$inner.name,
            kind = %$inner.type_description,
            $($rest)+
        )
    };
}

impl<K> Reflector<K>
where
    K: ListableResource + Metadata<Ty: ObjectMetaAccess> + Clone + Send + Sync + 'static,
{
    /// A reflector that fills `store` from `lister_watcher`. Nothing happens until
    /// [`run`](Reflector::run) (or [`list_and_watch`](Reflector::list_and_watch)).
    #[track_caller]
    pub fn new(
        lister_watcher: Arc<dyn ListerWatcher<K>>,
        store: Arc<dyn ReflectorStore<K>>,
        options: ReflectorOptions,
    ) -> Self {
        Self::with_transform(lister_watcher, store, options, None)
    }

    /// Like [`new`](Reflector::new), but `transform`, if any, is applied to every listed or
    /// watched object as soon as it is decoded, before it is collected (list pages, a
    /// streaming list's initial events) or handed to `store`. The store then receives only
    /// transformed objects, so it should not transform them again (a [`Fifo`](crate::Fifo)
    /// fed by such a reflector is built with `Fifo::new(None)`). This is how
    /// [`SharedInformer`](crate::SharedInformer) applies its transform.
    #[track_caller]
    pub fn with_transform(
        lister_watcher: Arc<dyn ListerWatcher<K>>,
        store: Arc<dyn ReflectorStore<K>>,
        options: ReflectorOptions,
        transform: Option<Transform<K>>,
    ) -> Self {
        let lister_watcher_scope = lister_watcher.shard_scope();
        let name = if options.name.is_empty() {
            let at = std::panic::Location::caller();
            format!("{}:{}", at.file(), at.line())
        } else {
            options.name
        };
        let type_description = if K::KIND.is_empty() {
            // A resource named at run time (`DynamicObject`): the name says which.
            format!("dynamic objects of {name}")
        } else if K::GROUP.is_empty() {
            format!("{}/{}", K::VERSION, K::KIND)
        } else {
            format!("{}/{}, Kind={}", K::GROUP, K::VERSION, K::KIND)
        };
        Self {
            inner: Arc::new(Inner {
                name,
                type_description,
                lw: lister_watcher.clone(),
                store,
                resync_period: options.resync_period,
                should_resync: options.should_resync,
                page_size: options.page_size.filter(|n| *n > 0),
                min_watch_timeout: options.min_watch_timeout.max(MIN_WATCH_TIMEOUT),
                use_watch_list: options.use_watch_list,
                watch_error_handler: options.watch_error_handler,
                backoff: Backoff::new(options.backoff),
                max_internal_error_retry_duration: options.max_internal_error_retry_duration,
                compact_objects: options.compact_objects,
                transform,
                panics: PanicCounter::default(),
                rv: Mutex::new(RvState::default()),
                shard: options
                    .shard_scope
                    .or_else(|| lister_watcher_scope.clone())
                    .map(|scope| scope.register()),
                shard_metric: options.shard_client_filtering_metric,
                shard_warned: AtomicBool::new(false),
            }),
        }
    }

    /// The reflector's name, as it appears in logs.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The resource reflected, e.g. `v1/Pod` or `apps/v1, Kind=Deployment`.
    pub fn type_description(&self) -> &str {
        &self.inner.type_description
    }

    /// The resourceVersion the store was last synced to by a list, streaming list or watch
    /// event; empty before the first sync.
    pub fn last_sync_resource_version(&self) -> String {
        self.inner.state().last_sync.clone()
    }

    /// Whether each round starts with a streaming list ([`ReflectorOptions::use_watch_list`];
    /// a round whose streaming list fails lists instead, and the next one streams again).
    pub fn uses_watch_list(&self) -> bool {
        self.inner.use_watch_list
    }

    /// How the reflector applies its shard selector: [`ShardFiltering::Unsharded`] without
    /// a shard scope (or one selecting everything) and before the first list.
    pub fn shard_filtering(&self) -> ShardFiltering {
        self.inner
            .state()
            .filtering
            .unwrap_or(ShardFiltering::Unsharded)
    }

    /// How many panics of the transform or the watch error handler were caught: each
    /// skipped one object (or one report), was logged at error level, and the reflector
    /// went on.
    pub fn contained_panics(&self) -> u64 {
        self.inner.panics.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Runs [`list_and_watch`](Reflector::list_and_watch) rounds until `cancel` fires,
    /// reporting each round's error to the watch error handler and backing off between
    /// rounds (800 ms doubling to 30 s, with jitter; reset after 2 healthy minutes).
    pub async fn run(&self, cancel: CancellationToken) {
        let inner = &*self.inner;
        log!(debug, inner, resync_period = ?inner.resync_period, "starting reflector");
        while !cancel.is_cancelled() {
            if let Err(err) = inner.list_and_watch(&cancel).await {
                inner.report(&err);
            }
            let delay = inner.backoff.next_delay();
            if !pause(delay, &cancel, &mut Resync::off(), || {}).await {
                break;
            }
        }
        log!(debug, inner, "stopping reflector");
    }

    /// One round: get the whole state (streaming list or list) into the store, then watch
    /// until the watch can't be resumed or `cancel` fires. Returns the error that ended the
    /// round before any watch was running (a failed list or a rejected watch); errors ending
    /// a running watch are logged and end the round without error, as in client-go.
    pub async fn list_and_watch(&self, cancel: &CancellationToken) -> Result<(), Error> {
        self.inner.list_and_watch(cancel).await
    }
}

impl<K> Inner<K>
where
    K: ListableResource + Metadata<Ty: ObjectMetaAccess> + Clone + Send + Sync + 'static,
{
    fn state(&self) -> MutexGuard<'_, RvState> {
        self.rv.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Turns a freshly decoded object into what the store receives: transformed (if a
    /// transform is set), re-packed without spare capacity (unless the options say not to),
    /// and moved into its final `Arc`. `Err` with the object's key if the transform panicked
    /// on it: the panic was caught, logged and counted, and the object is skipped.
    fn admit(&self, obj: K) -> Result<Arc<K>, ObjectKey> {
        self.admit_as(obj, false)
    }

    /// [`admit`](Self::admit); `deleting` says the object is a deleted one's final state,
    /// which is applied untransformed when the transform panics.
    fn admit_as(&self, obj: K, deleting: bool) -> Result<Arc<K>, ObjectKey> {
        let obj = match &self.transform {
            Some(t) => {
                // Taken before the object moves into the transform, to say which one failed.
                let (namespace, name) = {
                    let meta = obj.metadata();
                    (
                        meta.namespace().unwrap_or_default().to_owned(),
                        meta.name().unwrap_or_default().to_owned(),
                    )
                };
                match contain(&self.panics, || t(obj)) {
                    Ok(obj) => obj,
                    Err(panic) if deleting => {
                        log!(error, self, %namespace, %name, %panic,
                            "the transform panicked on a deleted object; the deletion is applied with the object as the server sent it");
                        return Err(String::new());
                    }
                    Err(panic) => {
                        log!(error, self, %namespace, %name, %panic,
                            "the transform panicked; the object is skipped (not cached, no handler told)");
                        let key = if namespace.is_empty() {
                            name
                        } else {
                            format!("{namespace}/{name}")
                        };
                        return Err(key);
                    }
                }
            }
            None => obj,
        };
        Ok(self.pack(obj))
    }

    /// Re-packs (see [`admit`](Self::admit)) and moves into an `Arc`.
    fn pack(&self, obj: K) -> Arc<K> {
        if self.compact_objects {
            Arc::new(compact(obj))
        } else {
            Arc::new(obj)
        }
    }

    /// [`admit`](Self::admit) for the final state of a deleted object: if the transform
    /// panics on it, the deletion still applies, with the object as the server sent it (a
    /// skipped deletion would leave the object cached for ever).
    fn admit_deleted(&self, obj: K) -> Arc<K> {
        if self.transform.is_none() {
            return self.pack(obj);
        }
        let untransformed = obj.clone();
        self.admit_as(obj, true)
            .unwrap_or_else(|_| self.pack(untransformed))
    }

    fn set_last_sync(&self, rv: String) {
        self.state().last_sync = rv;
    }

    fn set_unavailable(&self, unavailable: bool) {
        self.state().unavailable = unavailable;
    }

    /// The resourceVersion to list at: a consistent read after the last one was unavailable,
    /// else "0" at first (any cached data will do), else the last synced one.
    fn relist_resource_version(&self) -> String {
        let st = self.state();
        if st.unavailable {
            String::new()
        } else if st.last_sync.is_empty() {
            "0".to_owned()
        } else {
            st.last_sync.clone()
        }
    }

    /// The resourceVersion to start a streaming list at.
    fn rewatch_resource_version(&self) -> String {
        let st = self.state();
        if st.unavailable {
            String::new()
        } else {
            st.last_sync.clone()
        }
    }

    fn report(&self, err: &Error) {
        match &self.watch_error_handler {
            Some(handler) => {
                if let Err(panic) = contain(&self.panics, || handler(err)) {
                    log!(error, self, %err, %panic, "the watch error handler panicked on this error");
                }
            }
            None if is_expired(err) => log!(debug, self, %err, "watch closed"),
            None => log!(warn, self, %err, "failed to list and watch"),
        }
    }

    /// A watch timeout uniformly random in `[min, 2 × min]`, in seconds.
    fn watch_timeout_seconds(&self) -> u32 {
        let min = self.min_watch_timeout.as_secs_f64();
        let secs = min + fastrand::f64() * min;
        u32::try_from(secs as u64).unwrap_or(u32::MAX)
    }

    async fn list_and_watch(&self, cancel: &CancellationToken) -> Result<(), Error> {
        log!(trace, self, "listing and watching");
        let mut stream = None;
        if self.use_watch_list {
            match self.watch_list(cancel).await {
                Ok(None) => return Ok(()),
                Ok(Some(s)) => stream = Some(s),
                // Whatever the error (a server that cannot stream, or one rejecting the
                // parameters), this round lists; the next one streams again (client-go).
                Err(end) => {
                    log!(debug, self, err = %end, "the streaming list failed (expected if the server does not support it); listing instead");
                }
            }
        }
        if stream.is_none() && !self.list(cancel).await? {
            return Ok(());
        }
        log!(debug, self, "caches populated");
        self.watch(stream, cancel).await
    }

    /// Lists (in pages) and replaces the store's content. `Ok(false)` if cancelled.
    async fn list(&self, cancel: &CancellationToken) -> Result<bool, Error> {
        let target = self.shard_target();
        let shard = target.as_ref().and_then(|t| t.selector.as_ref());
        let rv = self.relist_resource_version();
        let page_size = match self.page_size {
            Some(n) => n,
            None if self.state().paginated_result => pager::DEFAULT_PAGE_SIZE,
            // Unpaged, so the watch cache can serve it rather than etcd.
            None if !rv.is_empty() && rv != "0" => 0,
            None => pager::DEFAULT_PAGE_SIZE,
        };
        let listing = async {
            let admit = |o| self.admit(o);
            match pager::list_all(&*self.lw, &rv, page_size, shard, &admit).await {
                Err(e) if is_expired(&e) || is_too_large_resource_version(&e) => {
                    log!(debug, self, err = %e, resource_version = %rv, "list resourceVersion unavailable; listing consistently");
                    self.set_unavailable(true);
                    pager::list_all(
                        &*self.lw,
                        &self.relist_resource_version(),
                        page_size,
                        shard,
                        &admit,
                    )
                    .await
                }
                other => other,
            }
        };
        let listed = tokio::select! {
            biased;
            _ = cancel.cancelled() => return Ok(false),
            listed = listing => listed?,
        };
        {
            let mut st = self.state();
            if rv == "0" && listed.paginated {
                st.paginated_result = true;
            }
            st.unavailable = false;
        }
        log!(debug, self, items = listed.items.len(), resource_version = %listed.resource_version, "listed");
        self.note_list_filtering(target.as_ref(), listed.server_filtered);
        self.state().skipped_adds.clear();
        self.store.replace_keeping(
            listed.items,
            listed.skipped,
            listed.resource_version.clone(),
        );
        self.set_last_sync(listed.resource_version);
        self.acknowledge_full_list(target);
        Ok(true)
    }

    /// The shard scope's state now, if the reflector follows one.
    fn shard_target(&self) -> Option<ScopeState> {
        self.shard.as_ref().map(ScopeMember::current)
    }

    /// Records how a list's shard selector was applied (`server_filtered` as the pager
    /// reports it).
    fn note_list_filtering(&self, target: Option<&ScopeState>, server_filtered: Option<bool>) {
        match (target, server_filtered) {
            (None, _) => {}
            (Some(_), None) => self.note_filtering(ShardFiltering::Unsharded, None),
            (Some(t), Some(true)) => {
                self.note_filtering(ShardFiltering::Server, t.selector.as_ref())
            }
            (Some(t), Some(false)) => {
                self.note_filtering(ShardFiltering::Client, t.selector.as_ref())
            }
        }
    }

    /// Records how the shard selector is applied, in the metric and, the first time the
    /// server is found ignoring it, in a warning.
    fn note_filtering(&self, filtering: ShardFiltering, selector: Option<&ShardSelector>) {
        let previous = self.state().filtering.replace(filtering);
        if let Some(metric) = &self.shard_metric {
            metric.set(if filtering == ShardFiltering::Client {
                1.0
            } else {
                0.0
            });
        }
        if filtering == ShardFiltering::Client && previous != Some(ShardFiltering::Client) {
            let selector = selector.map(ToString::to_string).unwrap_or_default();
            if !self
                .shard_warned
                .swap(true, std::sync::atomic::Ordering::Relaxed)
            {
                log!(warn, self, %selector,
                    "kube-apiserver ignored the shard selector and sends every object; the informer keeps only its shard's (filtering on the client). Enable the ShardedListAndWatch feature gate on kube-apiserver (--feature-gates=ShardedListAndWatch=true, alpha in 1.36 and 1.37) so that only this shard's objects are sent");
            } else {
                log!(debug, self, %selector, "the server ignores the shard selector again; filtering on the client");
            }
        }
    }

    /// After a full (streaming) list with `target`'s selector: the store reflects it. The
    /// scope's generation counts as applied once the store has taken the list in.
    fn acknowledge_full_list(&self, target: Option<ScopeState>) {
        self.state().gained.clear();
        self.acknowledge(target);
    }

    /// The store reflects `target`'s selector (already, or once it has taken in what was
    /// handed to it): its generation counts as applied once the store has taken in a marker
    /// queued behind that.
    fn acknowledge(&self, target: Option<ScopeState>) {
        let (Some(member), Some(target)) = (&self.shard, target) else {
            return;
        };
        self.state().shard_applied = Some(target.clone());
        // A change that keeps everything and adds nothing: it only carries the token
        // through the queue, behind the list.
        let marker = Reshard {
            keep: None,
            objects: Vec::new(),
            applied: member.token(target.generation),
        };
        if let Err(marker) = self.store.reshard(marker) {
            marker.applied.done();
        }
    }

    /// Whether the shard scope changed since the store last took it in.
    fn shard_pending(&self) -> bool {
        let Some(member) = &self.shard else {
            return false;
        };
        let applied = self.state().shard_applied.as_ref().map(|a| a.generation);
        applied.is_some_and(|g| g != member.current().generation)
    }

    /// Follows a change of the shard scope while watching (the watch is stopped, at the last
    /// synced resourceVersion Y): objects outside the new selector leave the store (handlers
    /// see them deleted), the ranges gained are listed with a consistent read (at R) and
    /// their objects added, and the next watch, from Y with the whole new selector, drops
    /// the events of the gained ranges' objects at or below R, which the list already holds.
    /// Objects that stay are not listed again. When that cannot be done exactly (a
    /// resourceVersion that is not a number, a store that cannot apply such a change), the
    /// whole new selection is listed and replaces the store's content instead. `Ok(false)`
    /// if cancelled.
    async fn reshard(&self, cancel: &CancellationToken) -> Result<bool, Error> {
        let Some(member) = &self.shard else {
            return Ok(true);
        };
        let target = member.current();
        let Some(applied) = self.state().shard_applied.clone() else {
            // Nothing listed yet: the next list takes the scope as it is.
            return Ok(true);
        };
        if applied.selector == target.selector {
            // Set back to what the store holds: nothing to change, but the watch restarts
            // from where it stopped, so the ranges an earlier change listed still drop the
            // events that list holds.
            self.acknowledge(Some(target));
            return Ok(true);
        }
        let gained = match (&applied.selector, &target.selector) {
            // Everything was cached: nothing to gain.
            (None, _) => None,
            (Some(old), None) => ShardSelector::full(old.field()).difference(old),
            (Some(old), Some(new)) => new.difference(old),
        };
        let describe = |s: &Option<ShardSelector>| {
            s.as_ref()
                .map_or_else(|| "everything".to_owned(), ToString::to_string)
        };
        log!(info, self,
            from = %describe(&applied.selector),
            to = %describe(&target.selector),
            gained = %describe(&gained),
            "shard selector changed");
        let keep = target.selector.clone();
        let last_sync = self.last_sync_resource_version_string();
        let Some(gained) = gained else {
            let change = Reshard {
                keep,
                objects: Vec::new(),
                applied: member.token(target.generation),
            };
            if self.store.reshard(change).is_err() {
                return self
                    .relist_for_shard(cancel, "the store cannot drop objects in place")
                    .await;
            }
            let mut st = self.state();
            st.shard_applied = Some(target);
            return Ok(true);
        };
        let Some(y) = numeric_resource_version(&last_sync) else {
            return self
                .relist_for_shard(cancel, "the last resourceVersion is not a number")
                .await;
        };
        let listing = async {
            let admit = |o| self.admit(o);
            pager::list_all(
                &*self.lw,
                "",
                self.page_size.unwrap_or(pager::DEFAULT_PAGE_SIZE),
                Some(&gained),
                &admit,
            )
            .await
        };
        let listed = tokio::select! {
            biased;
            _ = cancel.cancelled() => return Ok(false),
            listed = listing => listed?,
        };
        self.note_list_filtering(
            Some(&ScopeState {
                generation: target.generation,
                selector: Some(gained.clone()),
            }),
            listed.server_filtered,
        );
        let r = match numeric_resource_version(&listed.resource_version) {
            Some(r) if r >= y => r,
            _ => {
                return self
                    .relist_for_shard(
                        cancel,
                        "the list of the ranges gained is not at a numeric resourceVersion at or after the watch's",
                    )
                    .await;
            }
        };
        log!(debug, self, items = listed.items.len(), resource_version = %listed.resource_version, "listed the ranges gained");
        let change = Reshard {
            keep,
            objects: listed.items,
            applied: member.token(target.generation),
        };
        if self.store.reshard(change).is_err() {
            return self
                .relist_for_shard(cancel, "the store cannot apply a shard change in place")
                .await;
        }
        let mut st = self.state();
        st.shard_applied = Some(target);
        st.gained.push((gained, r));
        Ok(true)
    }

    /// Follows a shard change by listing the whole new selection (see
    /// [`reshard`](Self::reshard)).
    async fn relist_for_shard(&self, cancel: &CancellationToken, why: &str) -> Result<bool, Error> {
        log!(debug, self, why, "relisting to follow the shard selector");
        self.list(cancel).await
    }

    /// A streaming list: collect the initial events until the end bookmark, replace the
    /// store's content, and hand back the stream to keep watching. `Ok(None)` if cancelled.
    async fn watch_list(
        &self,
        cancel: &CancellationToken,
    ) -> Result<Option<EventStream<K>>, WatchEnd> {
        loop {
            if cancel.is_cancelled() {
                return Ok(None);
            }
            let target = self.shard_target();
            let selector = target.as_ref().and_then(|t| t.selector.clone());
            let params = WatchParams {
                resource_version: Some(self.rewatch_resource_version()).filter(|rv| !rv.is_empty()),
                resource_version_match: Some(ResourceVersionMatch::NotOlderThan),
                allow_watch_bookmarks: true,
                send_initial_events: true,
                timeout_seconds: Some(self.watch_timeout_seconds()),
                shard_selector: selector.clone(),
                ..WatchParams::default()
            };
            let start = Instant::now();
            let opened = tokio::select! {
                biased;
                _ = cancel.cancelled() => return Ok(None),
                opened = self.lw.watch(&params) => opened,
            };
            let mut stream = match opened {
                Ok(stream) => stream,
                Err(e) => {
                    if self.retry_watch_list(&e, cancel).await {
                        continue;
                    }
                    return Err(WatchEnd::Failed(e));
                }
            };
            let mut initial = BTreeMap::new();
            let mut skipped = BTreeSet::new();
            let mut resource_version = String::new();
            let mut shard = WatchShard::new(selector.clone(), Vec::new());
            let end = self
                .handle_watch(
                    &mut stream,
                    &mut Sink::Initial(&mut initial, &mut skipped),
                    start,
                    true,
                    &mut shard,
                    |rv, past_added| {
                        if past_added {
                            resource_version = rv;
                        }
                    },
                    cancel,
                    &mut Resync::off(),
                )
                .await;
            match end {
                WatchEnd::Stopped => return Ok(None),
                WatchEnd::InitialEventsEnd => {
                    log!(debug, self, items = initial.len(), %resource_version, "streamed the initial events");
                    self.set_unavailable(false);
                    // A streaming list cannot say whether the server filtered: only an
                    // object outside the selector shows it did not.
                    if let Some(t) = &target {
                        let filtering = match (&t.selector, shard.foreign) {
                            (None, _) => Some(ShardFiltering::Unsharded),
                            (Some(_), true) => Some(ShardFiltering::Client),
                            (Some(_), false) if self.state().filtering.is_none() => {
                                Some(ShardFiltering::Server)
                            }
                            (Some(_), false) => None,
                        };
                        if let Some(f) = filtering {
                            self.note_filtering(f, t.selector.as_ref());
                        }
                    }
                    self.state().skipped_adds.clear();
                    self.store.replace_keeping(
                        initial.into_values().collect(),
                        skipped.into_iter().collect(),
                        resource_version.clone(),
                    );
                    self.set_last_sync(resource_version);
                    self.acknowledge_full_list(target);
                    return Ok(Some(stream));
                }
                // Ended before the end bookmark: start over with a new streaming list.
                WatchEnd::Closed => continue,
                WatchEnd::Failed(e) => {
                    drop(stream);
                    if self.retry_watch_list(&e, cancel).await {
                        continue;
                    }
                    return Err(WatchEnd::Failed(e));
                }
                WatchEnd::VeryShort => return Err(WatchEnd::VeryShort),
                // Not returned while collecting the initial events (no scope change is
                // awaited then); starting over would be right anyway.
                WatchEnd::ShardChanged => continue,
            }
        }
    }

    /// Whether a streaming list failing with `err` should be retried (after backing off for
    /// a busy server; at once with a consistent read for an unavailable resourceVersion,
    /// unless the failed request was a consistent read already).
    async fn retry_watch_list(&self, err: &Error, cancel: &CancellationToken) -> bool {
        if is_watch_error_retriable(err) {
            log!(debug, self, %err, "streaming list failed; backing off");
            let delay = self.backoff.next_delay();
            return pause(delay, cancel, &mut Resync::off(), || {}).await;
        }
        if is_expired(err) || is_too_large_resource_version(err) {
            // Retried at once with a consistent read (client-go). A consistent read refused
            // the same way is not retried: that would spin without a pause (and, with a
            // lister-watcher that answers at once, never yield); the round falls back to a
            // list instead.
            let was_consistent = self.rewatch_resource_version().is_empty();
            self.set_unavailable(true);
            return !was_consistent;
        }
        false
    }

    /// Watches from the last synced resourceVersion (or keeps consuming `stream`, a streaming
    /// list's), re-opening the watch where it ended, while resyncing the store on schedule.
    async fn watch(
        &self,
        mut stream: Option<EventStream<K>>,
        cancel: &CancellationToken,
    ) -> Result<(), Error> {
        let mut resync = Resync::every(self.resync_period);
        let mut internal_errors =
            RetryWithDeadline::new(self.max_internal_error_retry_duration, INTERNAL_ERROR_RESET);
        let do_resync = || self.resync();
        loop {
            if cancel.is_cancelled() {
                return Ok(());
            }
            let start = Instant::now();
            // A stream handed over is past its initial events; a watch started at ""/"0"
            // begins with synthetic ADDED events in no particular order.
            let mut propagate_rv_from_start = true;
            if stream.is_none() && self.shard_pending() && !self.reshard(cancel).await? {
                return Ok(());
            }
            let (selector, gained) = {
                let st = self.state();
                (
                    st.shard_applied.as_ref().and_then(|a| a.selector.clone()),
                    st.gained.clone(),
                )
            };
            let mut shard = WatchShard::new(selector.clone(), gained);
            if let (Some(member), Some(applied)) =
                (&self.shard, self.state().shard_applied.as_ref())
            {
                shard.change = Some(Box::pin(member.changed_from(applied.generation)));
            }
            let mut events = match stream.take() {
                Some(s) => s,
                None => {
                    let rv = self.last_sync_resource_version_string();
                    propagate_rv_from_start = !(rv.is_empty() || rv == "0");
                    let params = WatchParams {
                        resource_version: Some(rv).filter(|rv| !rv.is_empty()),
                        allow_watch_bookmarks: true,
                        timeout_seconds: Some(self.watch_timeout_seconds()),
                        shard_selector: selector,
                        ..WatchParams::default()
                    };
                    let opened = tokio::select! {
                        biased;
                        _ = cancel.cancelled() => return Ok(()),
                        opened = self.lw.watch(&params) => opened,
                    };
                    match opened {
                        Ok(s) => s,
                        Err(e) if is_watch_error_retriable(&e) => {
                            log!(debug, self, err = %e, "watch failed; backing off");
                            let delay = self.backoff.next_delay();
                            if !pause(delay, cancel, &mut resync, do_resync).await {
                                return Ok(());
                            }
                            continue;
                        }
                        Err(e) => return Err(e),
                    }
                }
            };
            let end = self
                .handle_watch(
                    &mut events,
                    &mut Sink::Store(&*self.store),
                    start,
                    false,
                    &mut shard,
                    |rv, past_added| {
                        if propagate_rv_from_start || past_added {
                            self.set_last_sync(rv);
                        }
                    },
                    cancel,
                    &mut resync,
                )
                .await;
            drop(events);
            self.state().gained = std::mem::take(&mut shard.gained);
            internal_errors.after(matches!(&end, WatchEnd::Failed(e) if is_internal_error(e)));
            match end {
                WatchEnd::Stopped => return Ok(()),
                // Stopped at the last synced resourceVersion; the next pass follows the
                // change and watches again from there.
                WatchEnd::ShardChanged => continue,
                WatchEnd::Closed | WatchEnd::InitialEventsEnd => continue,
                WatchEnd::Failed(e) if is_expired(&e) => {
                    // Relist at the last resourceVersion: a list at it returns data at least
                    // as new, so there is no need for a consistent read yet.
                    log!(debug, self, err = %e, "watch closed");
                    return Ok(());
                }
                WatchEnd::Failed(e) if e.is_too_many_requests() => {
                    log!(debug, self, "watch returned 429; backing off");
                    let delay = self.backoff.next_delay();
                    if !pause(delay, cancel, &mut resync, do_resync).await {
                        return Ok(());
                    }
                }
                WatchEnd::Failed(e) if is_internal_error(&e) && internal_errors.should_retry() => {
                    log!(debug, self, err = %e, "retrying watch after internal error");
                }
                other => {
                    log!(warn, self, err = %other, "watch ended with error");
                    return Ok(());
                }
            }
        }
    }

    /// Whether a watch event of `obj` at `rv` reaches the store: not when the object is
    /// outside the watch's shard selector (the server ignored it), nor when it belongs to
    /// the ranges a shard change listed at a resourceVersion at or after `rv`.
    fn shard_admits(&self, shard: &mut WatchShard, obj: &K, rv: &str) -> bool {
        if let Some(selector) = &shard.selector
            && !selector.matches(obj.metadata())
        {
            if !shard.foreign {
                shard.foreign = true;
                // While watching into the store the server is known to ignore the selector
                // now; a streaming list reports it when its initial events end.
                if shard.change.is_some() {
                    self.note_filtering(ShardFiltering::Client, Some(selector));
                }
            }
            return false;
        }
        if let Some(n) = numeric_resource_version(rv)
            && shard
                .gained
                .iter()
                .any(|(gained, listed_at)| n <= *listed_at && gained.matches(obj.metadata()))
        {
            return false;
        }
        true
    }

    fn last_sync_resource_version_string(&self) -> String {
        self.state().last_sync.clone()
    }

    fn resync(&self) {
        if self.should_resync.as_ref().is_none_or(|f| f()) {
            log!(trace, self, "forcing resync");
            self.store.resync();
        }
    }

    /// Consumes one watch stream into `sink` until it ends, fails, `cancel` fires, or (with
    /// `exit_on_initial_events_end`) the bookmark ending a streaming list's initial events
    /// arrives; the stream is then left open for the caller.
    #[allow(clippy::too_many_arguments, reason = "one internal call site per mode")]
    async fn handle_watch(
        &self,
        stream: &mut EventStream<K>,
        sink: &mut Sink<'_, K>,
        start: Instant,
        exit_on_initial_events_end: bool,
        shard: &mut WatchShard,
        mut set_resource_version: impl FnMut(String, bool),
        cancel: &CancellationToken,
        resync: &mut Resync,
    ) -> WatchEnd {
        let mut events = 0usize;
        let mut past_added = false;
        // Made once, not per event: a fresh cancellation future or sleep in every pass of the
        // loop would register with the token or the timer wheel and leave it again per event.
        let mut cancelled = pin!(cancel.cancelled());
        // The warning about a slow initial-events bookmark, while one is awaited. The timer
        // is not moved on per event: when it fires, it checks when the last event came and,
        // if that was within the interval, waits for the rest of it instead of warning.
        let mut warn_timer = exit_on_initial_events_end
            .then(|| Box::pin(sleep_until(start + INITIAL_EVENTS_WARNING_INTERVAL)));
        let mut last_event: Option<Instant> = None;
        loop {
            let next = tokio::select! {
                biased;
                _ = &mut cancelled => return WatchEnd::Stopped,
                _ = resync.tick() => { self.resync(); continue; }
                _ = wait_change(&mut shard.change) => return WatchEnd::ShardChanged,
                _ = wait_on(&mut warn_timer) => {
                    let now = Instant::now();
                    if let Some(at) = last_event
                        && now < at + INITIAL_EVENTS_WARNING_INTERVAL
                    {
                        rearm(&mut warn_timer, at + INITIAL_EVENTS_WARNING_INTERVAL);
                        continue;
                    }
                    // As client-go's initial-events-end bookmark ticker words it: nothing
                    // arrived yet, or nothing for a whole interval since the last event.
                    match last_event {
                        None => log!(warn, self, waited = ?start.elapsed(), "awaiting the bookmark ending the initial events; no events received yet"),
                        Some(at) => log!(warn, self, events, since_last_event = ?at.elapsed(), "still awaiting the bookmark ending the initial events"),
                    }
                    rearm(&mut warn_timer, now + INITIAL_EVENTS_WARNING_INTERVAL);
                    continue;
                }
                next = stream.next() => next,
            };
            let event = match next {
                None => break,
                Some(Err(e)) if e.is_transport() => {
                    log!(debug, self, err = %e, "watch connection ended");
                    break;
                }
                Some(Err(e)) => return WatchEnd::Failed(e),
                Some(Ok(event)) => event,
            };
            let mut initial_events_end = false;
            let rv = match event {
                WatchEvent::Added(obj) => {
                    let rv = resource_version_of(&obj);
                    if self.shard_admits(shard, &obj, &rv) {
                        match self.admit(obj) {
                            Ok(obj) => sink.add(self, obj),
                            Err(key) => sink.skipped_add(self, key),
                        }
                    }
                    rv
                }
                WatchEvent::Modified(obj) => {
                    past_added = true;
                    let rv = resource_version_of(&obj);
                    // Skipped, the cache keeps the previous state.
                    if self.shard_admits(shard, &obj, &rv)
                        && let Ok(obj) = self.admit(obj)
                    {
                        sink.update(self, obj);
                    }
                    rv
                }
                WatchEvent::Deleted(obj) => {
                    past_added = true;
                    let rv = resource_version_of(&obj);
                    if self.shard_admits(shard, &obj, &rv) {
                        sink.delete(self, self.admit_deleted(obj));
                    }
                    rv
                }
                WatchEvent::Bookmark(bookmark) if bookmark.resource_version.is_empty() => {
                    // Nothing to resume from: keep the last synced version (client-go
                    // ignores such a bookmark too) and tell the store nothing.
                    log!(debug, self, "ignoring a bookmark without a resourceVersion");
                    continue;
                }
                WatchEvent::Bookmark(bookmark) => {
                    past_added = true;
                    initial_events_end = bookmark.is_initial_events_end();
                    sink.bookmark(bookmark.resource_version.clone());
                    bookmark.resource_version
                }
                WatchEvent::Error(e) => return WatchEnd::Failed(Error::from(e)),
            };
            shard.passed(&rv);
            set_resource_version(rv, past_added);
            events += 1;
            if exit_on_initial_events_end && initial_events_end {
                return WatchEnd::InitialEventsEnd;
            }
            if warn_timer.is_some() {
                last_event = Some(Instant::now());
            }
        }
        if events == 0 && start.elapsed() < VERY_SHORT_WATCH {
            return WatchEnd::VeryShort;
        }
        log!(trace, self, events, "watch closed");
        WatchEnd::Closed
    }
}

/// The shard side of consuming one watch stream.
struct WatchShard {
    /// The selector the watch was opened with: events of other objects are dropped (a
    /// server without the feature gate sends them).
    selector: Option<ShardSelector>,
    /// Ranges gained by a shard change and the resourceVersion they were listed at (see
    /// `RvState::gained`).
    gained: Vec<(ShardSelector, u64)>,
    /// An event of an object outside `selector` arrived.
    foreign: bool,
    /// Completes when the shard scope changes (only while watching into the store).
    change: Option<Pin<Box<dyn std::future::Future<Output = ()> + Send>>>,
}

impl WatchShard {
    fn new(selector: Option<ShardSelector>, gained: Vec<(ShardSelector, u64)>) -> Self {
        Self {
            selector,
            gained,
            foreign: false,
            change: None,
        }
    }

    /// The watch reached `rv`: once past a gained ranges' list, nothing more of it is
    /// dropped (a resourceVersion that is not a number cannot be ordered: all are cleared).
    fn passed(&mut self, rv: &str) {
        match numeric_resource_version(rv) {
            Some(n) => self.gained.retain(|(_, listed_at)| n <= *listed_at),
            None => self.gained.clear(),
        }
    }
}

/// Waits for `change` to complete, or forever when there is none.
async fn wait_change(change: &mut Option<Pin<Box<dyn std::future::Future<Output = ()> + Send>>>) {
    match change {
        Some(c) => c.as_mut().await,
        None => std::future::pending().await,
    }
}

/// A resourceVersion as a number, if it is one (etcd's revisions are; the API only promises
/// an opaque string).
fn numeric_resource_version(rv: &str) -> Option<u64> {
    rv.parse().ok()
}

/// How consuming one watch stream ended.
#[derive(Debug)]
enum WatchEnd {
    /// Cancelled.
    Stopped,
    /// The server ended the stream (timeout): resume from the last resourceVersion.
    Closed,
    /// The bookmark ending a streaming list's initial events arrived; the stream is open.
    InitialEventsEnd,
    /// An ERROR event, or an undecodable one.
    Failed(Error),
    /// Closed within a second without any event: something is wrong with the server.
    VeryShort,
    /// The shard scope changed; the watch was stopped to follow it.
    ShardChanged,
}

impl fmt::Display for WatchEnd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WatchEnd::Stopped => f.write_str("stop requested"),
            WatchEnd::Closed => f.write_str("watch closed"),
            WatchEnd::InitialEventsEnd => f.write_str("initial events ended"),
            WatchEnd::Failed(e) => e.fmt(f),
            WatchEnd::VeryShort => f.write_str(
                "very short watch: the watch closed within a second without receiving any event",
            ),
            WatchEnd::ShardChanged => f.write_str("the shard selector changed"),
        }
    }
}

/// Where watch events go: the reflector's store, or the initial state a streaming list is
/// collecting (keyed, so updates and deletes during the stream apply).
///
/// The initial state also collects the keys whose events the transform panicked on and that
/// no later event admitted: the store keeps what it holds for them.
enum Sink<'a, K> {
    Store(&'a dyn ReflectorStore<K>),
    Initial(
        &'a mut BTreeMap<ObjectKey, Arc<K>>,
        &'a mut BTreeSet<ObjectKey>,
    ),
}

impl<K> Sink<'_, K>
where
    K: ListableResource + Metadata<Ty: ObjectMetaAccess> + Clone + Send + Sync + 'static,
{
    fn add(&mut self, reflector: &Inner<K>, obj: Arc<K>) {
        match self {
            Sink::Store(s) => {
                reflector.state().skipped_adds.remove(&key_of(obj.as_ref()));
                s.add(obj);
            }
            Sink::Initial(m, skipped) => {
                let key = key_of(obj.as_ref());
                skipped.remove(&key);
                m.insert(key, obj);
            }
        }
    }

    /// An ADDED the transform panicked on (nothing was given to the store).
    fn skipped_add(&mut self, reflector: &Inner<K>, key: ObjectKey) {
        match self {
            Sink::Store(_) => {
                reflector.state().skipped_adds.insert(key);
            }
            Sink::Initial(m, skipped) => {
                if !m.contains_key(&key) {
                    skipped.insert(key);
                }
            }
        }
    }

    fn update(&mut self, reflector: &Inner<K>, obj: Arc<K>) {
        match self {
            Sink::Store(s) => {
                reflector.state().skipped_adds.remove(&key_of(obj.as_ref()));
                s.update(obj);
            }
            Sink::Initial(m, skipped) => {
                let key = key_of(obj.as_ref());
                skipped.remove(&key);
                m.insert(key, obj);
            }
        }
    }

    fn delete(&mut self, reflector: &Inner<K>, obj: Arc<K>) {
        match self {
            Sink::Store(s) => {
                let key = key_of(obj.as_ref());
                if reflector.state().skipped_adds.remove(&key) {
                    log!(debug, reflector, key = %key,
                        "deletion of an object whose addition was skipped; no handler told");
                    return;
                }
                s.delete(obj);
            }
            Sink::Initial(m, skipped) => {
                let key = key_of(obj.as_ref());
                skipped.remove(&key);
                m.remove(&key);
            }
        }
    }

    fn bookmark(&mut self, resource_version: String) {
        match self {
            Sink::Store(s) => s.bookmark(resource_version),
            Sink::Initial(..) => {}
        }
    }
}

/// A copy of `obj` holding no spare capacity, replacing it.
///
/// Decoding grows each `Vec` by doubling (the decoder does not know an array's length up
/// front), so a decoded object carries unused capacity in every list it has; cloning
/// allocates each `Vec` and `String` at exactly its length. On a typical Pod this saves about
/// a fifth of its heap for the cost of one copy at ingestion (reads still never copy).
fn compact<K: Clone>(obj: K) -> K {
    obj.clone()
}

fn resource_version_of<K: Metadata<Ty: ObjectMetaAccess>>(obj: &K) -> String {
    obj.metadata()
        .resource_version()
        .unwrap_or_default()
        .to_owned()
}

/// The resync timer: fires every period (never when the period is zero). It keeps one timer
/// registered for its whole life: the watch loop polls it once per event, and a timer made
/// anew per event would be registered and removed again each time.
struct Resync {
    period: Duration,
    timer: Option<Pin<Box<Sleep>>>,
}

impl Resync {
    fn every(period: Duration) -> Self {
        Self {
            period,
            timer: (!period.is_zero())
                .then(|| Box::pin(sleep_until(after(Instant::now(), period)))),
        }
    }

    fn off() -> Self {
        Self::every(Duration::ZERO)
    }

    /// Completes when the timer fires, and re-arms it. Dropping the future before it
    /// completes leaves the timer armed.
    async fn tick(&mut self) {
        wait_on(&mut self.timer).await;
        rearm(&mut self.timer, after(Instant::now(), self.period));
    }
}

/// `delay` after `now`; a delay too long to add to an instant (`Duration::MAX`) is about 30
/// years, which is never for a process.
fn after(now: Instant, delay: Duration) -> Instant {
    now.checked_add(delay)
        .unwrap_or_else(|| now + Duration::from_secs(FAR_FUTURE_SECS))
}

/// Waits for `timer` to fire, or forever when there is none.
async fn wait_on(timer: &mut Option<Pin<Box<Sleep>>>) {
    match timer {
        Some(t) => t.as_mut().await,
        None => std::future::pending().await,
    }
}

/// Moves `timer` (if any) to fire at `at`.
fn rearm(timer: &mut Option<Pin<Box<Sleep>>>, at: Instant) {
    if let Some(t) = timer {
        t.as_mut().reset(at);
    }
}

/// Sleeps for `delay`, resyncing on schedule meanwhile; false if cancelled.
async fn pause(
    delay: Duration,
    cancel: &CancellationToken,
    resync: &mut Resync,
    mut on_resync: impl FnMut(),
) -> bool {
    let until = after(Instant::now(), delay);
    loop {
        tokio::select! {
            biased;
            _ = cancel.cancelled() => return false,
            _ = sleep_until(until) => return true,
            _ = resync.tick() => on_resync(),
        }
    }
}

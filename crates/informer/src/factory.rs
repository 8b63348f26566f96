//! [`SharedInformerFactory`]: one [`SharedInformer`] per resource type for a whole process
//! (client-go's `informers.SharedInformerFactory`).
//!
//! Every controller asks the factory for the informers it needs; asking twice for the same
//! type returns the same informer, so a process lists and watches each resource once however
//! many controllers use it. Informers are keyed by Rust type ([`TypeId`]), the way
//! client-go keys them by Go type.

use kctrl_client::ObjectMetaAccess;
use std::any::{Any, TypeId};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures::future::{BoxFuture, join_all};
use k8s_openapi::{ListableResource, Metadata, Resource};
use kctrl_client::protobuf::{Decoder, FromProtobuf};
use kctrl_client::{Api, Client, DynamicObject, ListParams, PartialObjectMetadata, ResourceRef};
use serde::de::DeserializeOwned;

use crate::shard::ShardScope;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::fifo::Transform;
use crate::list_watch::{ListWatch, TweakParams};
use crate::lister::Lister;
use crate::metrics::{InformerId, InformerMetrics, InformerMetricsProvider};
use crate::reflector::ReflectorOptions;
use crate::shared_informer::{InformerFailure, SharedInformer, SharedInformerOptions};
use crate::sync::HasSynced;

/// The type-erased side of a factory's informer: what `start` and `wait_for_cache_sync`
/// need without knowing the object type.
trait Managed: HasSynced {
    fn start(&self, cancel: CancellationToken) -> JoinHandle<()>;
    fn handler_panics(&self) -> u64;
    fn failure(&self) -> Option<InformerFailure>;
    fn stopped(&self) -> BoxFuture<'_, Option<InformerFailure>>;
    fn stop_unstarted(&self);
}

impl<K> Managed for SharedInformer<K>
where
    K: ListableResource + Metadata<Ty: ObjectMetaAccess> + Clone + Send + Sync + 'static,
{
    fn start(&self, cancel: CancellationToken) -> JoinHandle<()> {
        SharedInformer::start(self, cancel)
    }

    fn handler_panics(&self) -> u64 {
        SharedInformer::handler_panics(self)
    }

    fn failure(&self) -> Option<InformerFailure> {
        SharedInformer::failure(self)
    }

    fn stopped(&self) -> BoxFuture<'_, Option<InformerFailure>> {
        Box::pin(SharedInformer::stopped(self))
    }

    fn stop_unstarted(&self) {
        SharedInformer::stop_unstarted(self);
    }
}

/// What a factory keys its informers by.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum InformerKey {
    /// A compile-time type: one informer per Rust type.
    Type(TypeId),
    /// A resource named at run time (`DynamicObject`s): group, version, plural.
    Resource(String, String, String),
}

impl InformerKey {
    fn of_resource(r: &ResourceRef) -> Self {
        Self::Resource(
            r.group.to_string(),
            r.version.to_string(),
            r.plural.to_string(),
        )
    }
}

struct Entry {
    /// The `SharedInformer<K>`, for typed access.
    informer: Box<dyn Any + Send + Sync>,
    managed: Arc<dyn Managed>,
    type_name: &'static str,
    /// The resource of a dynamic informer.
    resource: Option<ResourceRef>,
    started: bool,
}

#[derive(Default)]
struct State {
    informers: HashMap<InformerKey, Entry>,
    shutting_down: bool,
}

struct Inner {
    client: Client,
    default_resync: Duration,
    namespace: Option<String>,
    tweak: Option<TweakParams>,
    custom_resync: HashMap<TypeId, Duration>,
    /// `Transform<K>` per type.
    transforms: HashMap<TypeId, Box<dyn Any + Send + Sync>>,
    /// `Decoder<K>` per type whose informer asks for protobuf.
    protobuf: HashMap<TypeId, Box<dyn Any + Send + Sync>>,
    reflector: ReflectorOptions,
    trim_managed_fields: bool,
    metrics: Option<NamedMetrics>,
    state: Mutex<State>,
    /// Cancelled by [`SharedInformerFactory::shutdown`]: every informer runs until then at
    /// the latest.
    stop: CancellationToken,
    /// The first failure of one of its informers.
    failed: watch::Sender<Option<InformerFailure>>,
    /// How many started informers have not finished stopping (their tasks have not ended).
    running: watch::Sender<usize>,
}

impl Inner {
    /// Records `failure` as the factory's, unless one was recorded first.
    fn publish_failure(&self, failure: InformerFailure) {
        self.failed.send_if_modified(|first| {
            let none = first.is_none();
            if none {
                *first = Some(failure);
            }
            none
        });
    }

    /// Adds an informer to the factory; after [`SharedInformerFactory::shutdown`] it is
    /// stopped at once (it will never run: it never syncs and refuses handlers).
    fn insert(&self, st: &mut State, key: InformerKey, entry: Entry) {
        if st.shutting_down {
            tracing::warn!(
                informer = entry.type_name,
                "an informer was asked of a factory that has shut down; it is stopped and will never sync"
            );
            entry.managed.stop_unstarted();
        }
        st.informers.insert(key, entry);
    }
}

/// Counts a started informer's task as running until dropped.
struct RunningGuard(watch::Sender<usize>);

impl Drop for RunningGuard {
    fn drop(&mut self) {
        self.0.send_modify(|n| *n = n.saturating_sub(1));
    }
}

/// A factory's informer name and metrics provider (client-go's `WithInformerName`).
#[derive(Clone)]
pub(crate) struct NamedMetrics {
    pub(crate) name: String,
    pub(crate) provider: Arc<dyn InformerMetricsProvider>,
    /// The resources whose series are taken, by this factory's informers: a second informer
    /// of one resource (a view, metadata only) publishes nothing, as client-go does for a
    /// duplicate registration.
    pub(crate) reserved: Arc<Mutex<HashSet<(String, String, String)>>>,
}

impl NamedMetrics {
    pub(crate) fn new(name: String, provider: Arc<dyn InformerMetricsProvider>) -> Self {
        Self {
            name,
            provider,
            reserved: Arc::default(),
        }
    }

    /// The metrics of a new informer over `resource`, or `None` if another informer of this
    /// name already publishes that resource's series.
    pub(crate) fn reserve(&self, resource: &ResourceRef) -> Option<InformerMetrics> {
        let id = InformerId::new(self.name.clone(), resource);
        let fresh = lock(&self.reserved).insert((
            id.group.clone(),
            id.version.clone(),
            id.resource.clone(),
        ));
        if !fresh {
            tracing::error!(
                informer_name = %self.name,
                group = %id.group,
                version = %id.version,
                resource = %id.resource,
                "duplicate informer registration: metrics will not be published"
            );
            return None;
        }
        Some(InformerMetrics::new(id, self.provider.clone()))
    }
}

/// Hands out one shared informer per resource type, and starts, syncs and stops them
/// together. Cheap to clone; clones share the informers.
///
/// ```no_run
/// # async fn demo(client: kctrl_client::Client) {
/// use std::time::Duration;
/// use k8s_openapi::api::apps::v1::Deployment;
/// use kctrl_informer::SharedInformerFactory;
/// use tokio_util::sync::CancellationToken;
///
/// let factory = SharedInformerFactory::builder(client, Duration::from_secs(600))
///     .namespace("prod")
///     .tweak_list_params(|p| p.label_selector = Some("team=web".into()))
///     .build();
/// let deployments = factory.lister::<Deployment>();
/// let cancel = CancellationToken::new();
/// factory.start(&cancel);
/// factory.wait_for_cache_sync(&cancel).await;
/// let web = deployments.get("prod", "web");
/// # let _ = web;
/// cancel.cancel();
/// factory.shutdown().await;
/// # }
/// ```
#[derive(Clone)]
pub struct SharedInformerFactory {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for SharedInformerFactory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedInformerFactory")
            .field("default_resync", &self.inner.default_resync)
            .field("namespace", &self.inner.namespace)
            .finish_non_exhaustive()
    }
}

/// Options of a [`SharedInformerFactory`] (client-go's `SharedInformerOption`s).
pub struct SharedInformerFactoryBuilder {
    client: Client,
    default_resync: Duration,
    namespace: Option<String>,
    tweak: Option<TweakParams>,
    custom_resync: HashMap<TypeId, Duration>,
    transforms: HashMap<TypeId, Box<dyn Any + Send + Sync>>,
    protobuf: HashMap<TypeId, Box<dyn Any + Send + Sync>>,
    reflector: ReflectorOptions,
    trim_managed_fields: bool,
    metrics: Option<NamedMetrics>,
    shard_scope: Option<ShardScope>,
}

impl std::fmt::Debug for SharedInformerFactoryBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedInformerFactoryBuilder")
            .field("default_resync", &self.default_resync)
            .field("namespace", &self.namespace)
            .finish_non_exhaustive()
    }
}

impl SharedInformerFactoryBuilder {
    /// Only objects in `namespace` (client-go's `WithNamespace`); cluster-scoped resources
    /// are unaffected.
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = Some(namespace.into()).filter(|n: &String| !n.is_empty());
        self
    }

    /// Adjusts every list and watch call of every informer, e.g. to set a label selector
    /// (client-go's `WithTweakListOptions`).
    pub fn tweak_list_params(
        mut self,
        f: impl Fn(&mut ListParams) + Send + Sync + 'static,
    ) -> Self {
        self.tweak = Some(Arc::new(f));
        self
    }

    /// A resync period for the informer of `K` instead of the default (client-go's
    /// `WithCustomResyncConfig`).
    pub fn custom_resync<K: 'static>(mut self, period: Duration) -> Self {
        self.custom_resync.insert(TypeId::of::<K>(), period);
        self
    }

    /// A transform for the objects of `K`, applied before they are cached (client-go's
    /// `WithTransform`, per type here).
    pub fn transform<K: 'static>(mut self, transform: Transform<K>) -> Self {
        self.transforms
            .insert(TypeId::of::<K>(), Box::new(transform));
        self
    }

    /// Every informer decodes its objects without `metadata.managedFields` (see
    /// [`Api::without_managed_fields`]): kube-controller-manager's factories drop them with a
    /// transform, for memory; here they are skipped while parsing, which also saves the time
    /// to build them. Cached objects then carry `managed_fields: None`.
    ///
    /// ```no_run
    /// # fn demo(client: kctrl_client::Client) {
    /// use std::time::Duration;
    /// use k8s_openapi::api::apps::v1::ReplicaSet;
    /// use kctrl_informer::SharedInformerFactory;
    ///
    /// let factory = SharedInformerFactory::builder(client, Duration::ZERO)
    ///     .without_managed_fields()
    ///     .build();
    /// let replica_sets = factory.lister::<ReplicaSet>();
    /// # let _ = replica_sets;
    /// # }
    /// ```
    pub fn without_managed_fields(mut self) -> Self {
        self.trim_managed_fields = true;
        self
    }

    /// The informer of `K` lists and watches in protobuf, decoded by `K`'s
    /// [`FromProtobuf`] (see [`Api::protobuf`]): for views of built-in resources, whose
    /// skipped fields then cost almost nothing to decode. Answers in JSON (custom resources,
    /// a fake) are still decoded from JSON.
    pub fn protobuf<K: FromProtobuf + 'static>(mut self) -> Self {
        let decoder: Decoder<K> = K::from_protobuf;
        self.protobuf.insert(TypeId::of::<K>(), Box::new(decoder));
        self
    }

    /// Names the factory's informers `name` (client-go's `WithInformerName`) and publishes
    /// their `informer_*` series through `provider`, labelled with `name` and each
    /// informer's resource (see [`metrics`](crate::metrics)). Without this call the
    /// informers publish nothing. Only the first informer per resource publishes: a view or
    /// metadata-only informer of a resource that already has one does not. Use a name for
    /// one factory only: unlike client-go's `NewInformerName`, names are not reserved
    /// process-wide, and two factories of one name over the same resource and provider would
    /// write the same series.
    ///
    /// ```
    /// use std::time::Duration;
    /// use k8s_openapi::api::apps::v1::Deployment;
    /// use kctrl_informer::SharedInformerFactory;
    /// use kctrl_informer::prometheus::PrometheusInformerMetrics;
    /// use prometheus_client::registry::Registry;
    ///
    /// let mut registry = Registry::default();
    /// let fake = kctrl_fake::FakeApi::new();
    /// let factory = SharedInformerFactory::builder(fake.client(), Duration::ZERO)
    ///     .metrics("my-controller", PrometheusInformerMetrics::new(&mut registry))
    ///     .build();
    /// let _deployments = factory.informer::<Deployment>();
    /// let mut text = String::new();
    /// prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    /// assert!(text.contains(
    ///     r#"informer_queued_items{name="my-controller",group="apps",version="v1",resource="deployments"} 0"#
    /// ));
    /// ```
    pub fn metrics(
        mut self,
        name: impl Into<String>,
        provider: impl InformerMetricsProvider + 'static,
    ) -> Self {
        self.metrics = Some(NamedMetrics::new(name.into(), Arc::new(provider)));
        self
    }

    /// Every informer of the factory (typed, metadata-only and dynamic) caches only the
    /// objects `scope` selects, and follows it when it changes (see [`ShardScope`]). Needs
    /// the `ShardedListAndWatch` feature gate on kube-apiserver for the server to filter;
    /// without it the informers filter on the client. Takes precedence over the
    /// [`shard_scope`](ReflectorOptions::shard_scope) of
    /// [`reflector_options`](Self::reflector_options).
    pub fn shard_scope(mut self, scope: ShardScope) -> Self {
        self.shard_scope = Some(scope);
        self
    }

    /// Reflector knobs for every informer (e.g. turning streaming lists off).
    pub fn reflector_options(mut self, options: ReflectorOptions) -> Self {
        self.reflector = options;
        self
    }

    /// A factory of informers over resources named at run time, with these options
    /// (client-go's `NewFilteredDynamicSharedInformerFactory`). Per-type options
    /// ([`custom_resync`](Self::custom_resync), [`transform`](Self::transform)) apply to all
    /// of its informers when given for [`DynamicObject`].
    pub fn build_dynamic(self) -> DynamicSharedInformerFactory {
        DynamicSharedInformerFactory {
            factory: self.build(),
        }
    }

    /// The factory.
    pub fn build(mut self) -> SharedInformerFactory {
        if let Some(scope) = self.shard_scope.take() {
            self.reflector.shard_scope = Some(scope);
        }
        SharedInformerFactory {
            inner: Arc::new(Inner {
                client: self.client,
                default_resync: self.default_resync,
                namespace: self.namespace,
                tweak: self.tweak,
                custom_resync: self.custom_resync,
                transforms: self.transforms,
                protobuf: self.protobuf,
                reflector: self.reflector,
                trim_managed_fields: self.trim_managed_fields,
                metrics: self.metrics,
                state: Mutex::new(State::default()),
                stop: CancellationToken::new(),
                failed: watch::Sender::new(None),
                running: watch::Sender::new(0),
            }),
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl SharedInformerFactory {
    /// A factory over `client` whose informers resync every `default_resync` (zero: never)
    /// (client-go's `NewSharedInformerFactory`).
    pub fn new(client: Client, default_resync: Duration) -> Self {
        Self::builder(client, default_resync).build()
    }

    /// A factory with options (client-go's `NewSharedInformerFactoryWithOptions`).
    pub fn builder(client: Client, default_resync: Duration) -> SharedInformerFactoryBuilder {
        SharedInformerFactoryBuilder {
            client,
            default_resync,
            namespace: None,
            tweak: None,
            custom_resync: HashMap::new(),
            transforms: HashMap::new(),
            protobuf: HashMap::new(),
            reflector: ReflectorOptions::default(),
            shard_scope: None,
            trim_managed_fields: false,
            metrics: None,
        }
    }

    /// The client the informers list and watch through.
    pub fn client(&self) -> &Client {
        &self.inner.client
    }

    /// The shard scope every informer of the factory follows
    /// ([`SharedInformerFactoryBuilder::shard_scope`], or the
    /// [`shard_scope`](ReflectorOptions::shard_scope) of its reflector options), if any.
    ///
    /// ```
    /// use std::time::Duration;
    /// use kctrl_informer::{ShardScope, SharedInformerFactory};
    ///
    /// let fake = kctrl_fake::FakeApi::new();
    /// let scope = ShardScope::new(None);
    /// let factory = SharedInformerFactory::builder(fake.client(), Duration::ZERO)
    ///     .shard_scope(scope.clone())
    ///     .build();
    /// assert!(factory.shard_scope().is_some_and(|s| s.same_scope(&scope)));
    /// // Another scope, even one selecting the same, is not the factory's.
    /// assert!(!factory.shard_scope().unwrap().same_scope(&ShardScope::new(None)));
    /// assert!(SharedInformerFactory::new(fake.client(), Duration::ZERO).shard_scope().is_none());
    /// ```
    pub fn shard_scope(&self) -> Option<&ShardScope> {
        self.inner.reflector.shard_scope.as_ref()
    }

    /// The protobuf decoder the builder was given for `K`
    /// ([`SharedInformerFactoryBuilder::protobuf`]), if any: for writes of the same type to
    /// ask for and decode protobuf answers as its informer does
    /// ([`Api::with_protobuf_decoder`](kctrl_client::Api::with_protobuf_decoder)).
    pub fn protobuf_decoder<K: 'static>(&self) -> Option<Decoder<K>> {
        self.inner
            .protobuf
            .get(&TypeId::of::<K>())
            .and_then(|d| d.downcast_ref::<Decoder<K>>())
            .copied()
    }

    /// The shared informer of `K`, created on first use with the `namespace` index (client-go's
    /// `InformerFor`, `Core().V1().Pods().Informer()`). Informers created after
    /// [`start`](Self::start) run from the next `start`.
    pub fn informer<K>(&self) -> SharedInformer<K>
    where
        K: Resource
            + ListableResource
            + Metadata<Ty: ObjectMetaAccess>
            + DeserializeOwned
            + Clone
            + Send
            + Sync
            + 'static,
        K::Scope: 'static,
    {
        let id = InformerKey::Type(TypeId::of::<K>());
        let mut st = lock(&self.inner.state);
        if let Some(entry) = st.informers.get(&id) {
            return entry
                .informer
                .downcast_ref::<SharedInformer<K>>()
                .expect("the informer stored under K's TypeId is a SharedInformer<K>")
                .clone();
        }
        let informer = self.new_informer::<K>();
        self.inner.insert(
            &mut st,
            id,
            Entry {
                informer: Box::new(informer.clone()),
                managed: Arc::new(informer.clone()),
                type_name: std::any::type_name::<K>(),
                resource: None,
                started: false,
            },
        );
        informer
    }

    fn new_informer<K>(&self) -> SharedInformer<K>
    where
        K: Resource
            + ListableResource
            + Metadata<Ty: ObjectMetaAccess>
            + DeserializeOwned
            + Clone
            + Send
            + Sync
            + 'static,
        K::Scope: 'static,
    {
        let inner = &*self.inner;
        let api = match &inner.namespace {
            Some(ns) => Api::<K>::namespaced(inner.client.clone(), ns.clone()),
            None => Api::<K>::all(inner.client.clone()),
        };
        self.informer_over(api, String::new())
    }

    /// An informer with the factory's settings over `api`, named `name` in logs (empty: the
    /// kind).
    fn informer_over<K>(&self, mut api: Api<K>, name: String) -> SharedInformer<K>
    where
        K: Resource
            + ListableResource
            + Metadata<Ty: ObjectMetaAccess>
            + DeserializeOwned
            + Clone
            + Send
            + Sync
            + 'static,
        K::Scope: 'static,
    {
        let inner = &*self.inner;
        let resource = api.resource().clone();
        if inner.trim_managed_fields {
            api = api.without_managed_fields();
        }
        let id = TypeId::of::<K>();
        if let Some(decoder) = self.protobuf_decoder::<K>() {
            api = api.with_protobuf_decoder(decoder);
        }
        let mut lw = ListWatch::new(api);
        if let Some(tweak) = inner.tweak.clone() {
            lw = lw.tweak(move |p| tweak(p));
        }
        let transform = inner
            .transforms
            .get(&id)
            .and_then(|t| t.downcast_ref::<Transform<K>>())
            .cloned();
        SharedInformer::new(
            lw,
            SharedInformerOptions {
                resync_period: inner
                    .custom_resync
                    .get(&id)
                    .copied()
                    .unwrap_or(inner.default_resync),
                transform,
                reflector: inner.reflector.clone(),
                metrics: inner.metrics.as_ref().and_then(|m| m.reserve(&resource)),
                name,
                ..SharedInformerOptions::default()
            },
        )
    }

    /// A lister over the cache of `K`'s shared informer.
    pub fn lister<K>(&self) -> Lister<K>
    where
        K: Resource
            + ListableResource
            + Metadata<Ty: ObjectMetaAccess>
            + DeserializeOwned
            + Clone
            + Send
            + Sync
            + 'static,
        K::Scope: 'static,
    {
        self.informer::<K>().lister()
    }

    /// The shared informer of `K`'s metadata alone (client-go's `metadatainformer`): the API
    /// server sends `PartialObjectMetadata` for list and watch, so nothing but `metadata` is
    /// transferred, decoded or cached. It is a separate informer from [`informer::<K>`]
    /// (another cache, another watch), started, synced and shut down with the others.
    ///
    /// [`informer::<K>`]: Self::informer
    pub fn metadata_informer<K>(&self) -> SharedInformer<PartialObjectMetadata<K>>
    where
        K: ListableResource + Send + Sync + 'static,
        K::Scope: 'static,
    {
        self.informer::<PartialObjectMetadata<K>>()
    }

    /// A lister over the cache of [`metadata_informer::<K>`](Self::metadata_informer).
    pub fn metadata_lister<K>(&self) -> Lister<PartialObjectMetadata<K>>
    where
        K: ListableResource + Send + Sync + 'static,
        K::Scope: 'static,
    {
        self.metadata_informer::<K>().lister()
    }

    /// Starts every informer not started yet, on the current tokio runtime; returns at once.
    /// They run until `cancel` fires or the factory is [shut down](Self::shutdown), whichever
    /// comes first. Does nothing after [`shutdown`](Self::shutdown).
    ///
    /// Informers are shared: the first `start` starts every informer created so far, for
    /// every controller using them. To tie their life to the factory rather than to one
    /// caller's token (several controllers, each stopping on its own), use
    /// [`start_until_shutdown`](Self::start_until_shutdown).
    pub fn start(&self, cancel: &CancellationToken) {
        let run = self.inner.stop.child_token();
        let mut st = lock(&self.inner.state);
        if st.shutting_down {
            tracing::warn!(
                "start called on an informer factory that has shut down; nothing starts"
            );
            return;
        }
        if !self.start_locked(&mut st, &run) {
            return;
        }
        // Ends with the informers: when `cancel` fires (stopping them) or at shutdown.
        let cancel = cancel.clone();
        drop(tokio::spawn(async move {
            tokio::select! {
                () = cancel.cancelled() => run.cancel(),
                () = run.cancelled() => {}
            }
        }));
    }

    /// Starts every informer not started yet, on the current tokio runtime, to run until
    /// the factory is [shut down](Self::shutdown); returns at once. Does nothing after
    /// `shutdown`. This is how [`kctrl-runtime`]'s controllers start the informers they share:
    /// one controller stopping does not stop the caches the others read.
    ///
    /// [`kctrl-runtime`]: https://docs.rs/kctrl-runtime
    pub fn start_until_shutdown(&self) {
        let mut st = lock(&self.inner.state);
        if st.shutting_down {
            tracing::warn!(
                "start_until_shutdown called on an informer factory that has shut down; nothing starts"
            );
        } else {
            let run = self.inner.stop.clone();
            self.start_locked(&mut st, &run);
        }
    }

    /// Starts the informers not started yet under `run`; false if there were none.
    fn start_locked(&self, st: &mut State, run: &CancellationToken) -> bool {
        let mut started = false;
        for entry in st.informers.values_mut().filter(|e| !e.started) {
            entry.started = true;
            started = true;
            let informer = entry.managed.clone();
            let task = informer.start(run.clone());
            let inner = self.inner.clone();
            self.inner.running.send_modify(|n| *n += 1);
            let running = RunningGuard(self.inner.running.clone());
            // Records a failure as soon as the informer stops on it (not once its handlers'
            // deliveries in flight are over, which a blocked handler may delay for ever),
            // then waits for its task to end.
            drop(tokio::spawn(async move {
                let _running = running;
                let mut task = task;
                let ended = tokio::select! {
                    failure = informer.stopped() => {
                        if let Some(failure) = failure {
                            inner.publish_failure(failure);
                        }
                        (&mut task).await
                    }
                    // Ends at once if the informer was already run by someone else.
                    ended = &mut task => {
                        if let Some(failure) = informer.failure() {
                            inner.publish_failure(failure);
                        }
                        ended
                    }
                };
                if let Err(e) = ended
                    && e.is_panic()
                {
                    tracing::error!(error = %e, "a shared informer task panicked");
                }
            }));
        }
        started
    }

    /// The first failure of one of the factory's informers, if any stopped on its own (see
    /// [`SharedInformer::failure`]): its cache no longer follows the server. Answers as soon
    /// as the informer has recorded its failure.
    pub fn failure(&self) -> Option<InformerFailure> {
        if let Some(failure) = self.inner.failed.borrow().clone() {
            return Some(failure);
        }
        let failure = lock(&self.inner.state)
            .informers
            .values()
            .find_map(|e| e.managed.failure())?;
        self.inner.publish_failure(failure);
        self.inner.failed.borrow().clone()
    }

    /// Resolves with the first failure of one of the factory's informers (see
    /// [`failure`](Self::failure)); pending for as long as none fails. A controller waits on
    /// it next to its cancellation, to stop rather than work on a frozen cache.
    pub async fn failed(&self) -> InformerFailure {
        let mut rx = self.inner.failed.subscribe();
        loop {
            if let Some(failure) = rx.borrow_and_update().clone() {
                return failure;
            }
            if rx.changed().await.is_err() {
                // Unreachable: the sender lives in the factory, which `self` holds.
                return std::future::pending().await;
            }
        }
    }

    /// Waits until every started informer has synced or `cancel` fires; returns whether each
    /// synced, keyed by Rust type name (e.g. `k8s_openapi::api::core::v1::Pod`).
    pub async fn wait_for_cache_sync(
        &self,
        cancel: &CancellationToken,
    ) -> HashMap<&'static str, bool> {
        self.wait_for_started(cancel)
            .await
            .into_iter()
            .map(|(type_name, _, synced)| (type_name, synced))
            .collect()
    }

    /// Waits for every started informer; returns each one's type name, resource (dynamic
    /// informers) and whether it synced.
    async fn wait_for_started(
        &self,
        cancel: &CancellationToken,
    ) -> Vec<(&'static str, Option<ResourceRef>, bool)> {
        let started: Vec<(&'static str, Option<ResourceRef>, Arc<dyn Managed>)> =
            lock(&self.inner.state)
                .informers
                .values()
                .filter(|e| e.started)
                .map(|e| (e.type_name, e.resource.clone(), e.managed.clone()))
                .collect();
        let waits = started.into_iter().map(|(name, resource, informer)| {
            let wait: BoxFuture<'_, (&'static str, Option<ResourceRef>, bool)> =
                Box::pin(async move {
                    let synced = tokio::select! {
                        synced = informer.synced() => synced,
                        () = cancel.cancelled() => informer.has_synced(),
                    };
                    (name, resource, synced)
                });
            wait
        });
        join_all(waits).await
    }

    /// The shared informer of `resource`'s [`DynamicObject`]s, created on first use (keyed
    /// by group, version and plural).
    fn dynamic_informer(&self, resource: &ResourceRef) -> SharedInformer<DynamicObject> {
        let key = InformerKey::of_resource(resource);
        let mut st = lock(&self.inner.state);
        if let Some(entry) = st.informers.get(&key) {
            return entry
                .informer
                .downcast_ref::<SharedInformer<DynamicObject>>()
                .expect("a resource key holds a SharedInformer<DynamicObject>")
                .clone();
        }
        let inner = &*self.inner;
        let api = match &inner.namespace {
            Some(ns) => Api::namespaced_dynamic(inner.client.clone(), ns.clone(), resource),
            None => Api::all_dynamic(inner.client.clone(), resource),
        };
        let informer = self.informer_over(api, resource.qualified_name());
        self.inner.insert(
            &mut st,
            key,
            Entry {
                informer: Box::new(informer.clone()),
                managed: Arc::new(informer.clone()),
                type_name: std::any::type_name::<DynamicObject>(),
                resource: Some(resource.clone()),
                started: false,
            },
        );
        informer
    }

    /// How many notifications the handlers of this factory's informers panicked on, in
    /// total. Each was logged and skipped; export it as a metric to notice them.
    pub fn handler_panics(&self) -> u64 {
        lock(&self.inner.state)
            .informers
            .values()
            .map(|e| e.managed.handler_panics())
            .sum()
    }

    /// Stops every informer (whatever token started it), waits for their tasks to end, and
    /// makes later `start` calls do nothing (client-go's `Shutdown`, which only waits for the
    /// informers the callers' stop channels stop; here the factory stops them itself, as
    /// controller-runtime's manager stops its caches).
    ///
    /// Informers never started are stopped too: they never sync, and adding a handler to
    /// them fails (so does adding one to an informer first asked for after the shutdown),
    /// so a controller set up on a shut-down factory gets an error instead of waiting for
    /// caches that never fill. Every call waits, also one made while another is waiting.
    pub async fn shutdown(&self) {
        {
            let mut st = lock(&self.inner.state);
            st.shutting_down = true;
            for entry in st.informers.values().filter(|e| !e.started) {
                entry.managed.stop_unstarted();
            }
        }
        self.inner.stop.cancel();
        let mut running = self.inner.running.subscribe();
        // The sender lives in the factory, which `self` holds.
        let _ = running.wait_for(|n| *n == 0).await;
    }
}

/// One shared informer of [`DynamicObject`]s per resource named at run time (client-go's
/// `dynamicinformer.DynamicSharedInformerFactory`): informers are keyed by group, version and
/// plural, and otherwise behave as a [`SharedInformerFactory`]'s (same options, reflector,
/// cache, handlers, listers, metrics). Cheap to clone; clones share the informers.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use std::time::Duration;
/// use kctrl_client::{Api, DynamicObject, PostParams, ResourceRef, Scope};
/// use kctrl_informer::DynamicSharedInformerFactory;
/// use serde_json::json;
/// use tokio_util::sync::CancellationToken;
///
/// let fake = kctrl_fake::FakeApi::new();
/// // A custom resource without a Rust type: addressed by group/version/resource (+ kind, scope).
/// let crontabs = ResourceRef::new("stable.example.com", "v1", "crontabs", "CronTab", Scope::Namespaced);
/// // The fake serves it once registered (a real server once its CustomResourceDefinition is).
/// fake.register(kctrl_fake::ResourceSpec::new(crontabs.clone()));
/// let mut tab = DynamicObject::new("nightly", &crontabs);
/// tab.data.insert("spec".into(), json!({"cronSpec": "0 3 * * *"}));
/// Api::<DynamicObject>::namespaced_dynamic(fake.client(), "default", &crontabs)
///     .create(&PostParams::default(), &tab)
///     .await?;
///
/// let factory = DynamicSharedInformerFactory::new(fake.client(), Duration::ZERO);
/// let lister = factory.lister(&crontabs);
/// let cancel = CancellationToken::new();
/// factory.start(&cancel);
/// assert_eq!(factory.wait_for_cache_sync(&cancel).await[&crontabs], true);
///
/// let cached = lister.get("default", "nightly").expect("cached");
/// assert_eq!(cached.kind, "CronTab");
/// assert_eq!(cached.data["spec"]["cronSpec"], "0 3 * * *");
/// cancel.cancel();
/// factory.shutdown().await;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct DynamicSharedInformerFactory {
    factory: SharedInformerFactory,
}

impl DynamicSharedInformerFactory {
    /// A factory over `client` whose informers resync every `default_resync` (zero: never)
    /// (client-go's `NewDynamicSharedInformerFactory`). For options (namespace, list tweaks,
    /// metrics, ...) use [`SharedInformerFactory::builder`] and
    /// [`build_dynamic`](SharedInformerFactoryBuilder::build_dynamic).
    pub fn new(client: Client, default_resync: Duration) -> Self {
        SharedInformerFactory::builder(client, default_resync).build_dynamic()
    }

    /// The shared informer of `resource`, created on first use with the `namespace` index
    /// (client-go's `ForResource(gvr).Informer()`). `resource`'s kind and scope are taken
    /// from its first use; informers created after [`start`](Self::start) run from the next
    /// `start`.
    pub fn for_resource(&self, resource: &ResourceRef) -> SharedInformer<DynamicObject> {
        self.factory.dynamic_informer(resource)
    }

    /// A lister over the cache of `resource`'s informer (client-go's
    /// `ForResource(gvr).Lister()`).
    pub fn lister(&self, resource: &ResourceRef) -> Lister<DynamicObject> {
        self.for_resource(resource).lister()
    }

    /// Starts every informer not started yet; see [`SharedInformerFactory::start`].
    pub fn start(&self, cancel: &CancellationToken) {
        self.factory.start(cancel);
    }

    /// Starts every informer not started yet, to run until the factory is shut down; see
    /// [`SharedInformerFactory::start_until_shutdown`].
    pub fn start_until_shutdown(&self) {
        self.factory.start_until_shutdown();
    }

    /// The first failure of one of its informers; see [`SharedInformerFactory::failure`].
    pub fn failure(&self) -> Option<InformerFailure> {
        self.factory.failure()
    }

    /// Resolves with the first failure of one of its informers; see
    /// [`SharedInformerFactory::failed`].
    pub async fn failed(&self) -> InformerFailure {
        self.factory.failed().await
    }

    /// Waits until every started informer has synced or `cancel` fires; returns whether each
    /// synced, keyed by resource (client-go returns a map by GroupVersionResource).
    pub async fn wait_for_cache_sync(
        &self,
        cancel: &CancellationToken,
    ) -> HashMap<ResourceRef, bool> {
        self.factory
            .wait_for_started(cancel)
            .await
            .into_iter()
            .filter_map(|(_, resource, synced)| Some((resource?, synced)))
            .collect()
    }

    /// How many notifications the handlers of this factory's informers panicked on.
    pub fn handler_panics(&self) -> u64 {
        self.factory.handler_panics()
    }

    /// Stops every informer and waits for their tasks to end; see
    /// [`SharedInformerFactory::shutdown`].
    pub async fn shutdown(&self) {
        self.factory.shutdown().await;
    }
}

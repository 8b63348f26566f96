//! The informer cache of client-go's `tools/cache`, for Rust controllers.
//!
//! One object's path from the wire to a handler, file by file:
//!
//! ```text
//! list_watch ─▶ reflector ─▶ fifo ─▶ controller ─▶ store (indexer) ─▶ shared_informer ─▶ handlers
//!                                                                     └▶ lister
//! ```
//!
//! A controller rarely touches the first stages. It asks a [`SharedInformerFactory`] for the
//! [`SharedInformer`] of each resource it needs (one per type per process, however many
//! controllers share it), registers a [`ResourceEventHandler`] that turns notifications into
//! work-queue keys, starts the factory, waits for the caches with
//! [`wait_for_cache_sync`], and then reads objects from a [`Lister`] while processing keys.
//!
//! ```no_run
//! use std::time::Duration;
//!
//! use k8s_openapi::api::apps::v1::Deployment;
//! use kctrl_informer::{EventHandlerFns, SharedInformerFactory, key_of, wait_for_cache_sync};
//! use kctrl_workqueue::{RateLimitingQueue, default_controller_rate_limiter};
//! use tokio_util::sync::CancellationToken;
//!
//! # async fn demo(client: kctrl_client::Client) -> Result<(), Box<dyn std::error::Error>> {
//! let factory = SharedInformerFactory::new(client, Duration::from_secs(10 * 60));
//! let deployments = factory.informer::<Deployment>();
//! let lister = factory.lister::<Deployment>();
//!
//! // Handlers only enqueue keys; the work happens in workers reading the cache.
//! let queue = RateLimitingQueue::<String>::new(default_controller_rate_limiter());
//! let (on_add, on_update, on_delete) = (queue.clone(), queue.clone(), queue.clone());
//! let registration = deployments.add_event_handler(
//!     EventHandlerFns::new()
//!         .on_add(move |d: &std::sync::Arc<Deployment>, _initial| on_add.add(key_of(d.as_ref())))
//!         .on_update(move |_old, new| on_update.add(key_of(new.as_ref())))
//!         .on_delete(move |deleted| on_delete.add(key_of(deleted.object().as_ref()))),
//! )?;
//!
//! let cancel = CancellationToken::new();
//! factory.start(&cancel);
//! if !wait_for_cache_sync("deployment-controller", &cancel, &[&registration]).await {
//!     return Ok(()); // cancelled before the caches filled
//! }
//!
//! while let Some(key) = queue.get().await {
//!     let (ns, name) = key.split_once('/').unwrap_or(("", &key));
//!     match lister.get(ns, name) {
//!         Some(d) => println!("sync {key}: {:?} replicas", d.spec.replicas),
//!         None => println!("{key} was deleted"),
//!     }
//!     queue.forget(&key);
//!     queue.done(&key);
//! }
//! cancel.cancel();
//! factory.shutdown().await;
//! # Ok(()) }
//! ```
//!
//! Guarantees worth knowing:
//!
//! * Each handler has its own unbounded buffer, drained by one job on tokio's blocking pool:
//!   a slow handler delays only itself (and grows its buffer).
//! * A panic in a handler is caught, logged (error level, with the panic message) and
//!   counted, and **that notification is dropped**: the handler is not called with it again,
//!   and no later event replays it (a resync, if configured, eventually re-delivers the
//!   object as an update). The handler keeps receiving the notifications that follow. The
//!   counts are [`HandlerRegistration::handler_panics`] (one handler),
//!   [`SharedInformer::handler_panics`] and [`SharedInformerFactory::handler_panics`]; export
//!   one as a metric, as the deployment-controller binary does.
//! * Other code of yours that the informer runs on its own task is contained per object the
//!   same way (caught, logged, counted in [`SharedInformer::handler_panics`]): a
//!   [`Transform`] that panics skips that object (a deletion still applies); an index
//!   function that panics leaves that object out of that index (the store stays
//!   consistent); a panicking watch error handler or metrics sink loses that one call.
//! * Any other panic on the informer's task (in a [`ListerWatcher`] of yours, say), or its
//!   `run` future being dropped, stops the informer **visibly**: [`SharedInformer::is_stopped`]
//!   turns true, sync waiters get false, no handler can be added, and a panic is kept in
//!   [`SharedInformer::failure`] and reported by [`SharedInformerFactory::failed`] (a
//!   kctrl-runtime controller then stops with an error).
//! * [`SharedInformer::synced`] and [`HandlerRegistration::synced`] resolve to false as soon
//!   as they can no longer sync: the informer stopped first (a resource that is never served,
//!   and a deadline), or the handler was removed before its initial list reached it.
//! * A factory's informers run until [`SharedInformerFactory::shutdown`], which stops them
//!   whatever token started them (or until that token fires):
//!   [`SharedInformerFactory::start_until_shutdown`] ties them to the factory alone, so one
//!   controller returning does not stop the caches others read.
//! * The store is written before handlers are told, so a handler never sees an object the
//!   cache does not yet have.
//! * A handler added to a running informer first gets `on_add(obj, true)` for every cached
//!   object, then the events that follow — none lost, none repeated. Its
//!   [`HandlerRegistration::has_synced`] turns true only once those replays were delivered.
//! * An update that does not change the resourceVersion (a periodic resync, or a relist of
//!   an unchanged object) goes only to handlers whose resync period is due.
//! * A relist that finds objects gone reports them as [`DeletedObject::FinalStateUnknown`].
//!
//! ## Caching only what you read
//!
//! Every informer here is generic over the cached type, so it can hold less than whole
//! objects, with the same reflector, store, handlers, listers and factory:
//!
//! * **A typed view**: a struct of yours with the fields you read, declared the view of a
//!   resource with [`kctrl_client::resource_view!`]. The server sends whole objects; the
//!   decoder skips the fields the view does not name while it parses, so they cost neither
//!   time nor memory. `factory.informer::<MyPodView>()` works as for `Pod`. The
//!   Deployment controller caches its Pods this way.
//! * **Metadata only**: [`SharedInformerFactory::metadata_informer::<K>()`](SharedInformerFactory::metadata_informer)
//!   caches [`kctrl_client::PartialObjectMetadata<K>`]; the API server sends nothing but
//!   `metadata` (client-go's `metadatainformer`), kept whole in a
//!   [`kctrl_client::CompactObjectMeta`]: labels and annotations in sorted slices,
//!   `managedFields` as the JSON text the server sent, and the strings that objects share
//!   (the field sets of one ReplicaSet's Pods, say) held once.
//!
//! The machinery reads metadata through [`kctrl_client::ObjectMetaAccess`] (name, namespace,
//! resourceVersion, labels), which k8s-openapi's `ObjectMeta` and `CompactObjectMeta` both
//! implement, so a cached type may carry either.
//!
//! Both are read-only (they do not implement `Serialize`), so a view can never be written back
//! over the object it came from.
//!
//! The opposite case, a resource with no Rust type at all (a custom resource found at run
//! time), is a [`DynamicSharedInformerFactory`]: its informers cache
//! [`kctrl_client::DynamicObject`]s (metadata typed, everything else JSON), keyed by the
//! resource's group, version and plural (client-go's `dynamicinformer`).
//!
//! ## Metrics
//!
//! Name a factory's informers ([`SharedInformerFactoryBuilder::metrics`]) and they publish
//! client-go's `informer_queued_items`, `informer_processing_latency_seconds` and
//! `informer_store_resource_version`; unnamed informers publish nothing and pay nothing. See
//! [`metrics`] and [`prometheus::PrometheusInformerMetrics`].
//!
//! ## Why there is no mutation detector
//!
//! client-go can check at run time that nobody modified an object taken from the cache,
//! because Go pointers allow it. Here the cache hands out `Arc<K>`, which gives only shared
//! references: changing a cached object does not compile, so the check has nothing to catch.
//! To change an object, clone it (`(*obj).clone()`) and change the copy.
//!
//! ```compile_fail
//! # fn demo(lister: kctrl_informer::Lister<k8s_openapi::api::core::v1::Pod>) {
//! let pod = lister.get("default", "web").unwrap();
//! pod.metadata.labels = None; // error: cannot assign through an `Arc`
//! # }
//! ```
//!
//! | client-go                                            | kctrl-informer                                       |
//! |------------------------------------------------------|------------------------------------------------------|
//! | `informers.NewSharedInformerFactory(client, resync)` | [`SharedInformerFactory::new`]                       |
//! | `NewSharedInformerFactoryWithOptions(WithNamespace, WithTweakListOptions, …)` | [`SharedInformerFactory::builder`] |
//! | `factory.Core().V1().Pods().Informer()`              | [`SharedInformerFactory::informer::<Pod>()`](SharedInformerFactory::informer) |
//! | `factory.Core().V1().Pods().Lister()`                | [`SharedInformerFactory::lister::<Pod>()`](SharedInformerFactory::lister) |
//! | `factory.Start(stop)` / `WaitForCacheSync` / `Shutdown` | [`start`](SharedInformerFactory::start) (or [`start_until_shutdown`](SharedInformerFactory::start_until_shutdown)) / [`wait_for_cache_sync`](SharedInformerFactory::wait_for_cache_sync) / [`shutdown`](SharedInformerFactory::shutdown) (which also stops the informers) |
//! | `SharedIndexInformer`                                | [`SharedInformer`]                                   |
//! | `NewSharedIndexInformerWithOptions(lw, obj, opts)`   | [`SharedInformer::new`] with [`SharedInformerOptions`] |
//! | `AddEventHandler` / `AddEventHandlerWithResyncPeriod` | [`add_event_handler`](SharedInformer::add_event_handler) / [`add_event_handler_with_resync`](SharedInformer::add_event_handler_with_resync) |
//! | `AddEventHandlerWithOptions` (`HandlerOptions`) | [`add_event_handler_with_options`](SharedInformer::add_event_handler_with_options) ([`HandlerOptions`]; its [`Delivery`] has no client-go counterpart) |
//! | `RemoveEventHandler(reg)`                            | [`SharedInformer::remove_event_handler`]             |
//! | `ResourceEventHandlerRegistration.HasSynced()`       | [`HandlerRegistration::has_synced`]                  |
//! | `informer.HasSynced()` / `InformerSynced`            | [`SharedInformer::has_synced`] / [`HasSynced`]       |
//! | `cache.WaitForNamedCacheSync(name, stop, …)`         | [`wait_for_cache_sync`]                              |
//! | `informer.Run(stop)`                                 | [`SharedInformer::run`] / [`SharedInformer::start`]  |
//! | `GetStore()` / `GetIndexer()`                        | [`SharedInformer::store`]                            |
//! | `AddIndexers` / `ByIndex`                            | [`SharedInformer::add_indexers`] / [`Store::by_index`] |
//! | `SetTransform` / `SetWatchErrorHandler`              | [`SharedInformer::set_transform`] / [`SharedInformer::set_watch_error_handler`] |
//! | `LastSyncResourceVersion()` / `IsStopped()`          | [`SharedInformer::last_sync_resource_version`] / [`SharedInformer::is_stopped`] |
//! | `ResourceEventHandler{OnAdd, OnUpdate, OnDelete}`    | [`ResourceEventHandler`]                             |
//! | `ResourceEventHandlerDetailedFuncs`                  | [`EventHandlerFns`]                                  |
//! | `FilteringResourceEventHandler`                      | [`FilteringHandler`]                                 |
//! | `DeletedFinalStateUnknown{Key, Obj}`                 | [`DeletedObject::FinalStateUnknown`]                 |
//! | `Lister().Pods(ns).Get(name)`                        | [`Lister::get`]`(ns, name)` or [`Lister::namespaced`]`(ns).get(name)` |
//! | `Lister().List(selector)`                            | [`Lister::list`]                                     |
//! | `MetaNamespaceKeyFunc` / `SplitMetaNamespaceKey`     | [`key_of`] / [`split_key`]                           |
//! | `meta.Accessor(obj)` / `metav1.Object` (what caches read) | [`kctrl_client::ObjectMetaAccess`]              |
//! | `NewListWatchFromClient` / `NewFilteredListWatchFromClient` | [`ListWatch::new`] (+ `labels`, `fields`, `tweak`) |
//! | `NewReflectorWithOptions` / `RealFIFO`               | [`Reflector::new`] / [`Fifo`]                        |
//! | `metadatainformer.NewSharedInformerFactory(…).ForResource(gvr)` | [`SharedInformerFactory::metadata_informer::<K>()`](SharedInformerFactory::metadata_informer) |
//! | `dynamicinformer.NewDynamicSharedInformerFactory(client, resync)` / `NewFilteredDynamicSharedInformerFactory` | [`DynamicSharedInformerFactory::new`] / [`SharedInformerFactory::builder`]`(…).`[`build_dynamic`](SharedInformerFactoryBuilder::build_dynamic)`()` |
//! | `dynamicFactory.ForResource(gvr).Informer()` / `.Lister()` | [`DynamicSharedInformerFactory::for_resource`] / [`DynamicSharedInformerFactory::lister`] (objects are [`kctrl_client::DynamicObject`]) |
//! | `cache.NewInformerName(name)` + `WithInformerName` + `SetInformerMetricsProvider` | [`SharedInformerFactoryBuilder::metrics`] (or [`SharedInformerOptions::metrics`]); see [`metrics`] |
//! | component-base's `informer_*` Prometheus series | [`prometheus::PrometheusInformerMetrics`] |
//! | `cache.TransformStripManagedFields()` / `WithTransform(trim)` | [`SharedInformerFactoryBuilder::without_managed_fields`] (skipped while decoding), a view with [`kctrl_client::metadata_without_managed_fields`], or a [`Transform`] |
//! | `rest.Config.ContentType = "application/vnd.kubernetes.protobuf"` (kube-controller-manager's informers) | [`SharedInformerFactoryBuilder::protobuf`] for a type implementing [`kctrl_client::protobuf::FromProtobuf`] (a view, a whole Deployment or ReplicaSet) |

pub mod delta;
pub mod keys;
pub mod list_watch;
pub mod store;

pub use delta::{DeletedObject, Delta, ReflectorStore};
pub use keys::{ObjectKey, key_of};
pub use list_watch::ListerWatcher;
pub use store::Store;

pub mod handler;
mod processor;

pub use handler::{EventHandlerFns, FilteringHandler, ResourceEventHandler};

pub mod fifo;
pub mod lister;

pub use fifo::{Fifo, Transform};
pub use keys::{KeyError, key_for, split_key};
pub use lister::{Lister, NamespacedLister};
pub use store::{IndexFn, ReplaceDiff, StoreError, StoreTxn};
pub mod reflector;
pub mod shard;
pub use list_watch::{EventStream, ListWatch};
pub use reflector::{BackoffOptions, Reflector, ReflectorOptions};
pub use shard::{Reshard, ShardApplied, ShardFiltering, ShardScope};

mod contain;
mod controller;
pub mod shared_informer;
pub mod sync;

pub use shared_informer::{
    Delivery, HandlerOptions, HandlerRegistration, InformerError, InformerFailure, SharedInformer,
    SharedInformerOptions,
};
pub use sync::{HasSynced, wait_for_cache_sync};
pub mod factory;
pub mod metrics;
pub mod prometheus;

pub use factory::{
    DynamicSharedInformerFactory, SharedInformerFactory, SharedInformerFactoryBuilder,
};

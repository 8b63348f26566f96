//! The controller's wiring (upstream's `deployment_controller.go` outside `syncDeployment`):
//! which Deployment keys the informer notifications enqueue, and the workers that take keys
//! from the work queue, call [`DeploymentController::sync_deployment`] and handle its result.
//!
//! The handler rules are pure functions over the caches ([`keys_for_replica_set_add`],
//! [`keys_for_replica_set_update`], [`keys_for_replica_set_delete`], [`deployment_for_pod`]
//! and [`key_for_pod_delete`]), so upstream's handler tests drive them directly;
//! [`EnqueueHandlers`] adapts them to [`ResourceEventHandler`]s, and
//! [`DeploymentControllerRunner`] puts informers, handlers, queue and workers together.
//!
//! ```no_run
//! # use std::sync::Arc;
//! # use std::time::Duration;
//! use kctrl_deployment::events::RecordingEventRecorder;
//! use kctrl_deployment::wiring::DeploymentControllerRunner;
//! use kctrl_informer::SharedInformerFactory;
//! use tokio_util::sync::CancellationToken;
//!
//! # async fn demo(client: kctrl_client::Client) -> Result<(), Box<dyn std::error::Error>> {
//! let factory = SharedInformerFactory::new(client.clone(), Duration::from_secs(12 * 3600));
//! let recorder = Arc::new(RecordingEventRecorder::new());
//! let runner = DeploymentControllerRunner::new(client, &factory, recorder)?;
//! let cancel = CancellationToken::new();
//! // Returns once `cancel` fires and the in-flight syncs have finished.
//! runner.run(5, &cancel).await?;
//! factory.shutdown().await;
//! # Ok(()) }
//! ```

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::FutureExt;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kctrl_client::Client;
use kctrl_client::sharding::ShardField;
use kctrl_controller_ref::get_controller_of;
use kctrl_informer::{
    DeletedObject, Delivery, HandlerOptions, HandlerRegistration, InformerError,
    ResourceEventHandler, SharedInformerFactory, Store, key_of, wait_for_cache_sync,
};
use kctrl_runtime::shard::{Sharding, ShardingError};
use kctrl_shard::{ReconcileGuard, ShardMember};
use kctrl_workqueue::{
    MetricsProvider, Priority, QueueConfig, RateLimitingQueue, default_controller_rate_limiter,
};
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};

use crate::controller::{DeploymentController, SyncError};
use crate::events::EventRecorder;
use crate::pod_view::PodView;
use crate::progress::Requeue;
use crate::sharding::{FencedWrites, shard_hash_of_key, with_guard};
use crate::util::constants::RECREATE_DEPLOYMENT_STRATEGY_TYPE;
use crate::util::fields::strategy_type;
use crate::util::get_deployments_for_replica_set;

/// The work queue's name (its metrics carry it) and the name caches are awaited under.
pub const QUEUE_NAME: &str = "deployment";

/// How many times a failing key is retried (rate-limited) before it is dropped until the next
/// event about it (upstream's `maxRetries`).
pub const MAX_RETRIES: usize = 15;

/// `resolveControllerRef`: the Deployment `controller_ref` names in `namespace`, if the ref's
/// kind is `Deployment` and the cached Deployment of that name has the ref's uid.
pub fn resolve_controller_ref(
    deployments: &Store<Deployment>,
    namespace: &str,
    controller_ref: &OwnerReference,
) -> Option<Arc<Deployment>> {
    if controller_ref.kind != "Deployment" {
        return None;
    }
    let d = deployments.get_namespaced(namespace, &controller_ref.name)?;
    (d.metadata.uid.as_deref() == Some(controller_ref.uid.as_str())).then_some(d)
}

fn namespace_of(rs: &ReplicaSet) -> &str {
    rs.metadata.namespace.as_deref().unwrap_or("")
}

/// The keys of the cached Deployments whose selector matches `rs`'s labels
/// (`getDeploymentsForReplicaSet`; nothing when none match or `rs` has no labels).
fn keys_of_matching_deployments(deployments: &Store<Deployment>, rs: &ReplicaSet) -> Vec<String> {
    let candidates = crate::controller::in_namespace(deployments, namespace_of(rs));
    let found = get_deployments_for_replica_set(&candidates, rs).unwrap_or_default();
    if found.len() > 1 {
        debug!(
            namespace = namespace_of(rs),
            name = rs.metadata.name.as_deref().unwrap_or(""),
            count = found.len(),
            "user error! more than one deployment is selecting replica set"
        );
    }
    found.iter().map(|d| key_of(d.as_ref())).collect()
}

/// `addReplicaSet`: a ReplicaSet being deleted is handled as a delete; one with a controller
/// reference wakes its (resolvable) owner; an orphan wakes every Deployment selecting it, so
/// they can try to adopt it.
pub fn keys_for_replica_set_add(deployments: &Store<Deployment>, rs: &ReplicaSet) -> Vec<String> {
    if rs.metadata.deletion_timestamp.is_some() {
        return keys_for_deleted_replica_set(deployments, rs);
    }
    if let Some(controller_ref) = get_controller_of(&rs.metadata) {
        return resolve_controller_ref(deployments, namespace_of(rs), controller_ref)
            .map(|d| vec![key_of(d.as_ref())])
            .unwrap_or_default();
    }
    keys_of_matching_deployments(deployments, rs)
}

/// `updateReplicaSet`: nothing for a resync (same resourceVersion). A changed controller
/// reference wakes the old owner; a controlled ReplicaSet wakes its owner; an orphan whose
/// labels or controller reference changed wakes every Deployment selecting it.
pub fn keys_for_replica_set_update(
    deployments: &Store<Deployment>,
    old: &ReplicaSet,
    cur: &ReplicaSet,
) -> Vec<String> {
    if cur.metadata.resource_version == old.metadata.resource_version {
        return Vec::new();
    }
    let mut keys = Vec::new();
    let cur_ref = get_controller_of(&cur.metadata);
    let old_ref = get_controller_of(&old.metadata);
    let controller_ref_changed = cur_ref != old_ref;
    if controller_ref_changed
        && let Some(old_ref) = old_ref
        && let Some(d) = resolve_controller_ref(deployments, namespace_of(old), old_ref)
    {
        keys.push(key_of(d.as_ref()));
    }
    if let Some(cur_ref) = cur_ref {
        if let Some(d) = resolve_controller_ref(deployments, namespace_of(cur), cur_ref) {
            keys.push(key_of(d.as_ref()));
        }
        return keys;
    }
    if cur.metadata.labels != old.metadata.labels || controller_ref_changed {
        keys.extend(keys_of_matching_deployments(deployments, cur));
    }
    keys
}

/// `deleteReplicaSet`: an orphan wakes nobody; a controlled ReplicaSet wakes its (resolvable)
/// owner. Deletions found by a relist are handled alike, from the last known state.
pub fn keys_for_replica_set_delete(
    deployments: &Store<Deployment>,
    deleted: &DeletedObject<ReplicaSet>,
) -> Vec<String> {
    keys_for_deleted_replica_set(deployments, deleted.object())
}

fn keys_for_deleted_replica_set(deployments: &Store<Deployment>, rs: &ReplicaSet) -> Vec<String> {
    let Some(controller_ref) = get_controller_of(&rs.metadata) else {
        return Vec::new();
    };
    resolve_controller_ref(deployments, namespace_of(rs), controller_ref)
        .map(|d| vec![key_of(d.as_ref())])
        .unwrap_or_default()
}

/// `getDeploymentForPod`: the Deployment controlling the cached ReplicaSet (same name and uid)
/// that controls `pod`, if any.
pub fn deployment_for_pod(
    deployments: &Store<Deployment>,
    replica_sets: &Store<ReplicaSet>,
    pod: &PodView,
) -> Option<Arc<Deployment>> {
    let pod_ref = pod.controller_ref()?;
    if pod_ref.kind() != "ReplicaSet" {
        return None;
    }
    let namespace = pod.namespace();
    let rs = replica_sets.get_namespaced(namespace, pod_ref.name())?;
    if rs.metadata.uid.as_deref() != Some(pod_ref.uid()) {
        debug!(
            namespace,
            name = pod_ref.name(),
            pod = pod.name(),
            "cannot get replicaset for pod"
        );
        return None;
    }
    let rs_ref = get_controller_of(&rs.metadata)?;
    resolve_controller_ref(deployments, namespace_of(&rs), rs_ref)
}

/// `deletePod`: the key of the Deployment to wake for a deleted Pod, found through the cached
/// ReplicaSet controlling it: only a Recreate Deployment's (it waits for its old Pods to be
/// gone), on every deletion. As upstream since v1.37.2; v1.36.5 first listed the Deployment's
/// ReplicaSets from the API and woke it only once none of them had a Pod left.
pub fn key_for_pod_delete(
    deployments: &Store<Deployment>,
    replica_sets: &Store<ReplicaSet>,
    deleted: &DeletedObject<PodView>,
) -> Option<String> {
    let pod = deleted.object();
    let d = deployment_for_pod(deployments, replica_sets, pod)?;
    debug!(
        namespace = pod.namespace(),
        name = pod.name(),
        "pod deleted"
    );
    (strategy_type(&d) == RECREATE_DEPLOYMENT_STRATEGY_TYPE).then(|| key_of(d.as_ref()))
}

/// The work-queue lane of an informer add: the flood of adds from the initial list goes to the
/// low lane, so that after a restart with thousands of Deployments a change a user makes
/// meanwhile (a live event, high lane) is synced first.
pub fn lane_for_add(is_in_initial_list: bool) -> Priority {
    if is_in_initial_list {
        Priority::Low
    } else {
        Priority::High
    }
}

/// The lane of an informer update: a resync (same resourceVersion: nothing changed) is routine
/// work for the low lane; a real change is a live event.
pub fn lane_for_update(old: &Deployment, cur: &Deployment) -> Priority {
    if old.metadata.resource_version == cur.metadata.resource_version {
        Priority::Low
    } else {
        Priority::High
    }
}

/// The informer handlers of the controller: each notification becomes the Deployment keys
/// the rules above name, added to the queue. Registered (in an [`Arc`]) on the Deployment,
/// ReplicaSet and Pod informers; every rule reads only the caches.
#[derive(Clone)]
pub struct EnqueueHandlers {
    queue: RateLimitingQueue<String>,
    deployments: Store<Deployment>,
    replica_sets: Store<ReplicaSet>,
    /// Keys go to the lane their event calls for; false: all to the high lane.
    lanes: bool,
    /// Sharded: only keys whose namespace's bucket is active on this member are queued.
    shard: Option<ShardMember>,
}

impl std::fmt::Debug for EnqueueHandlers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EnqueueHandlers").finish_non_exhaustive()
    }
}

impl EnqueueHandlers {
    /// Handlers adding to `queue`, reading the given caches.
    pub fn new(
        queue: RateLimitingQueue<String>,
        deployments: Store<Deployment>,
        replica_sets: Store<ReplicaSet>,
    ) -> Self {
        Self {
            queue,
            deployments,
            replica_sets,
            lanes: true,
            shard: None,
        }
    }

    /// Queue only the keys whose namespace hashes into a bucket active on `member`: the
    /// caches also cover the buckets still syncing or draining here, whose keys are not
    /// this replica's to sync. A bucket that becomes active has its cached Deployments
    /// queued then, so nothing dropped here is missed.
    pub fn with_shard(mut self, member: ShardMember) -> Self {
        self.shard = Some(member);
        self
    }

    /// Whether keys go to the lane their event calls for (the default) or all to the high
    /// lane, first come first served.
    pub fn with_priority_lanes(mut self, lanes: bool) -> Self {
        self.lanes = lanes;
        self
    }

    /// The lane a key goes to: `wanted`, or the high lane when lanes are off.
    fn lane(&self, wanted: Priority) -> Priority {
        if self.lanes { wanted } else { Priority::High }
    }

    /// Queues `key` in `lane` (the high lane when lanes are off), unless it belongs to
    /// another shard.
    fn add(&self, key: String, lane: Priority) {
        if let Some(member) = &self.shard
            && !member.holds(shard_hash_of_key(&key))
        {
            return;
        }
        self.queue.add_with_priority(key, self.lane(lane));
    }

    fn enqueue_all(&self, keys: Vec<String>) {
        for key in keys {
            self.add(key, Priority::High);
        }
    }
}

impl ResourceEventHandler<Deployment> for EnqueueHandlers {
    fn on_add(&self, d: &Arc<Deployment>, is_in_initial_list: bool) {
        debug!(
            namespace = d.metadata.namespace.as_deref().unwrap_or(""),
            name = d.metadata.name.as_deref().unwrap_or(""),
            "adding deployment"
        );
        self.add(key_of(d.as_ref()), lane_for_add(is_in_initial_list));
    }

    fn on_update(&self, old: &Arc<Deployment>, cur: &Arc<Deployment>) {
        debug!(
            namespace = cur.metadata.namespace.as_deref().unwrap_or(""),
            name = cur.metadata.name.as_deref().unwrap_or(""),
            "updating deployment"
        );
        self.add(key_of(cur.as_ref()), lane_for_update(old, cur));
    }

    fn on_delete(&self, deleted: &DeletedObject<Deployment>) {
        let d = deleted.object();
        debug!(
            namespace = d.metadata.namespace.as_deref().unwrap_or(""),
            name = d.metadata.name.as_deref().unwrap_or(""),
            "deleting deployment"
        );
        self.add(key_of(d.as_ref()), Priority::High);
    }
}

impl ResourceEventHandler<ReplicaSet> for EnqueueHandlers {
    fn on_add(&self, rs: &Arc<ReplicaSet>, is_in_initial_list: bool) {
        let lane = lane_for_add(is_in_initial_list);
        for key in keys_for_replica_set_add(&self.deployments, rs) {
            self.add(key, lane);
        }
    }

    fn on_update(&self, old: &Arc<ReplicaSet>, cur: &Arc<ReplicaSet>) {
        self.enqueue_all(keys_for_replica_set_update(&self.deployments, old, cur));
    }

    fn on_delete(&self, deleted: &DeletedObject<ReplicaSet>) {
        self.enqueue_all(keys_for_replica_set_delete(&self.deployments, deleted));
    }
}

impl ResourceEventHandler<PodView> for EnqueueHandlers {
    fn on_add(&self, _pod: &Arc<PodView>, _is_in_initial_list: bool) {}

    fn on_update(&self, _old: &Arc<PodView>, _cur: &Arc<PodView>) {}

    fn on_delete(&self, deleted: &DeletedObject<PodView>) {
        if let Some(key) = key_for_pod_delete(&self.deployments, &self.replica_sets, deleted) {
            self.add(key, Priority::High);
        }
    }
}

/// Why [`DeploymentControllerRunner::run`] returned early.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunError {
    /// The caches did not sync (cancelled first, or an informer stopped).
    #[error("caches for {QUEUE_NAME} did not sync")]
    CachesNotSynced,
    /// Sharded: the runner's set-up is wrong (its factory does not follow the `Sharding`'s
    /// scope, or the `Sharding` already ran); nothing ran.
    #[error(transparent)]
    Sharding(#[from] ShardingError),
    /// Sharded: the shard member stopped on its own (its Lease could not be renewed within
    /// the renew deadline, or was changed by someone else), or failed while leaving. Other
    /// replicas take its buckets over once its Lease has expired; the process should exit
    /// and start again, as after a lost leader election.
    #[error("shard membership lost: {0}")]
    ShardLost(#[source] kctrl_shard::RunError),
    /// Sharded by another field than the namespace: a Deployment's ReplicaSets and Pods
    /// would be cached by other replicas than the one syncing it.
    #[error(
        "the Deployment controller shards by namespace only: a Deployment's ReplicaSets and Pods \
         have UIDs of their own, which hash into other shards; build the Sharding with \
         ShardField::Namespace"
    )]
    NotByNamespace,
}

/// Called after each sync with how long it took and whether it succeeded.
pub type SyncObserver = Arc<dyn Fn(Duration, bool) + Send + Sync>;

/// Optional instrumentation of a [`DeploymentControllerRunner`].
#[derive(Clone, Default)]
pub struct RunnerOptions {
    /// Receives the `deployment` work queue's metrics (client-go's `workqueue_*` series).
    pub queue_metrics: Option<Arc<dyn MetricsProvider>>,
    /// Told the duration and success of every sync.
    pub sync_observer: Option<SyncObserver>,
    /// Queue every key in the high lane, first come first served, as kube-controller-manager
    /// does (see [`lane_for_add`] for what the lanes are for).
    pub single_lane: bool,
    /// Sync only the Deployments whose namespace hashes into a bucket the member of this
    /// [`Sharding`] (by namespace) holds active, cache only those buckets, and write only
    /// while holding them (see [`crate::sharding`]). The factory must have been built with
    /// [`Sharding::scope`] as its shard scope. The member is run by
    /// [`DeploymentControllerRunner::run`]; do not run it yourself.
    pub shard: Option<Sharding>,
}

impl std::fmt::Debug for RunnerOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunnerOptions")
            .field("queue_metrics", &self.queue_metrics.is_some())
            .field("sync_observer", &self.sync_observer.is_some())
            .field("single_lane", &self.single_lane)
            .field("shard", &self.shard)
            .finish()
    }
}

/// The running controller: the Deployment, ReplicaSet and Pod informers of a
/// [`SharedInformerFactory`] with [`EnqueueHandlers`] registered, the `deployment` work queue
/// (with [`default_controller_rate_limiter`]) and the [`DeploymentController`] its workers call.
pub struct DeploymentControllerRunner {
    factory: SharedInformerFactory,
    controller: Arc<DeploymentController>,
    queue: RateLimitingQueue<String>,
    registrations: Vec<HandlerRegistration>,
    sync_observer: Option<SyncObserver>,
    caches_synced: Arc<AtomicBool>,
    shard: Option<Sharding>,
    deployments: Store<Deployment>,
}

impl std::fmt::Debug for DeploymentControllerRunner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeploymentControllerRunner")
            .field("controller", &self.controller)
            .finish_non_exhaustive()
    }
}

impl DeploymentControllerRunner {
    /// Creates the informers (from `factory`), the queue and the handlers. Must be called
    /// inside a tokio runtime.
    pub fn new(
        client: Client,
        factory: &SharedInformerFactory,
        recorder: Arc<dyn EventRecorder>,
    ) -> Result<Self, InformerError> {
        Self::with_options(client, factory, recorder, RunnerOptions::default())
    }

    /// Like [`new`](Self::new), with metrics and a sync observer.
    pub fn with_options(
        client: Client,
        factory: &SharedInformerFactory,
        recorder: Arc<dyn EventRecorder>,
        options: RunnerOptions,
    ) -> Result<Self, InformerError> {
        let d_informer = factory.informer::<Deployment>();
        let rs_informer = factory.informer::<ReplicaSet>();
        let pod_informer = factory.informer::<PodView>();
        let mut queue_config = QueueConfig::new().name(QUEUE_NAME);
        if let Some(metrics) = options.queue_metrics {
            queue_config = queue_config.shared_metrics_provider(metrics);
        }
        let queue = RateLimitingQueue::with_config(default_controller_rate_limiter(), queue_config);
        let mut handlers = EnqueueHandlers::new(
            queue.clone(),
            d_informer.store().clone(),
            rs_informer.store().clone(),
        )
        .with_priority_lanes(!options.single_lane);
        if let Some(sharding) = &options.shard {
            handlers = handlers.with_shard(sharding.member().clone());
        }
        let handlers = Arc::new(handlers);
        // Single lane: the Deployments of a bucket that becomes active queue in the high lane
        // too.
        let shard = match (options.shard, options.single_lane) {
            (Some(sharding), true) => Some(sharding.with_activation_priority(Priority::High)),
            (shard, _) => shard,
        };
        // The handlers only look at the caches and add keys to the queue: they never block,
        // so they run on the runtime rather than waking a blocking-pool thread for every
        // burst of events.
        let on_runtime = HandlerOptions {
            delivery: Delivery::Runtime,
            ..HandlerOptions::default()
        };
        let registrations = vec![
            d_informer.add_event_handler_with_options(handlers.clone(), on_runtime)?,
            rs_informer.add_event_handler_with_options(handlers.clone(), on_runtime)?,
            pod_informer.add_event_handler_with_options(handlers, on_runtime)?,
        ];
        // A sharded replica writes only from a sync holding its bucket.
        let client = match &shard {
            Some(_) => FencedWrites::client(&client),
            None => client,
        };
        // Writes talk the encoding the informers read.
        let controller = Arc::new(
            DeploymentController::new(
                client,
                d_informer.store().clone(),
                rs_informer.store().clone(),
                pod_informer.store().clone(),
                recorder,
            )
            .with_protobuf_writes(
                factory.protobuf_decoder::<ReplicaSet>(),
                factory.protobuf_decoder::<Deployment>(),
            ),
        );
        Ok(Self {
            factory: factory.clone(),
            controller,
            queue,
            registrations,
            sync_observer: options.sync_observer,
            caches_synced: Arc::new(AtomicBool::new(false)),
            shard,
            deployments: d_informer.store().clone(),
        })
    }

    /// Whether [`run`](Self::run) has seen the Deployment, ReplicaSet and Pod caches synced
    /// (and started its workers).
    pub fn caches_synced(&self) -> bool {
        self.caches_synced.load(Ordering::Acquire)
    }

    /// A flag that turns true when the caches have synced, for health endpoints that outlive
    /// a borrow of the runner.
    pub fn caches_synced_flag(&self) -> Arc<AtomicBool> {
        self.caches_synced.clone()
    }

    /// The work queue (e.g. to enqueue a key by hand, or to watch its length).
    pub fn queue(&self) -> &RateLimitingQueue<String> {
        &self.queue
    }

    /// The sync logic the workers call.
    pub fn controller(&self) -> &Arc<DeploymentController> {
        &self.controller
    }

    /// The shard member the workers ask before each sync, when sharded.
    pub fn shard(&self) -> Option<&ShardMember> {
        self.shard.as_ref().map(Sharding::member)
    }

    /// `Run(workers)`: starts the factory's informers, waits for the caches, runs `workers`
    /// workers until `cancel` fires, then stops taking keys (keys still queued are not
    /// synced), lets the syncs in flight finish and returns.
    ///
    /// The informers this call starts are not stopped by `cancel`: they keep the caches
    /// current under the syncs still in flight and stop when this returns. Informers of the
    /// factory started earlier by someone else keep their own lifetime. Call the factory's
    /// [`shutdown`](SharedInformerFactory::shutdown) afterwards to wait for them.
    ///
    /// Sharded ([`RunnerOptions::shard`]), the member joins its group once the caches have
    /// synced and runs until this returns ([`Sharding::drive`]): the caches follow the
    /// buckets it holds, the workers sync only the keys whose bucket is active on it (the
    /// others are dropped and counted), and the cached Deployments of every bucket that
    /// becomes active are enqueued. On `cancel` the member starts leaving at once: a bucket
    /// with no sync in flight is released (another replica can take it over) right away, one
    /// with a sync in flight once that sync has finished; the member deletes its Lease
    /// before this returns. If the member stops on its own (its Lease not renewed within the renew
    /// deadline, or lost), the syncs in flight are abandoned at once and this returns
    /// [`RunError::ShardLost`]: the process should exit, as after a lost leader election.
    pub async fn run(&self, workers: usize, cancel: &CancellationToken) -> Result<(), RunError> {
        if let Some(sharding) = &self.shard {
            if sharding.field() != ShardField::Namespace {
                return Err(RunError::NotByNamespace);
            }
            sharding.prepare(&self.factory, &["ReplicaSet", "Pod"])?;
        }
        info!(controller = QUEUE_NAME, "starting controller");
        let informers = CancellationToken::new();
        let _stop_informers = informers.clone().drop_guard();
        self.factory.start(&informers);
        let synced: Vec<&dyn kctrl_informer::HasSynced> = self
            .registrations
            .iter()
            .map(|r| r as &dyn kctrl_informer::HasSynced)
            .collect();
        if !wait_for_cache_sync(QUEUE_NAME, cancel, &synced).await {
            self.queue.shut_down();
            return Err(RunError::CachesNotSynced);
        }
        self.caches_synced.store(true, Ordering::Release);
        // Told to leave on `cancel`.
        let leave = CancellationToken::new();
        let mut membership = match &self.shard {
            Some(sharding) => {
                let sharding = sharding.clone();
                let (leave, deployments, queue) =
                    (leave.clone(), self.deployments.clone(), self.queue.clone());
                async move { Some(sharding.drive(leave, queue, deployments).await) }.boxed()
            }
            None => std::future::pending().boxed(),
        };
        let stop = cancel.child_token();
        let tasks: Vec<_> = (0..workers.max(1))
            .map(|_| {
                tokio::spawn(worker(
                    self.controller.clone(),
                    self.queue.clone(),
                    self.sync_observer.clone(),
                    self.shard.as_ref().map(|s| s.member().clone()),
                    stop.clone(),
                ))
            })
            .collect();
        let mut member_ended = tokio::select! {
            () = cancel.cancelled() => None,
            ended = &mut membership => ended,
        };
        if member_ended.is_some() {
            // The syncs in flight were abandoned when the member stopped (see `worker`).
            error!(
                controller = QUEUE_NAME,
                "the shard member stopped: another replica may take its buckets over; stopping"
            );
        }
        // No new syncs; sharded, the member drains and releases its buckets, each as soon
        // as its last sync in flight has ended (it waits for their guards).
        stop.cancel();
        leave.cancel();
        info!(
            controller = QUEUE_NAME,
            "shutting down controller: no new syncs; waiting for those in flight"
        );
        // Not a drain: the keys still queued are left for the next leader (or the replica
        // that takes the bucket over).
        self.queue.shut_down();
        let workers_done = async {
            for task in tasks {
                if let Err(err) = task.await {
                    error!(%err, "deployment worker ended abnormally");
                }
            }
        };
        if member_ended.is_none() {
            // The member keeps renewing while the syncs in flight finish; if it stops
            // meanwhile, the syncs are abandoned (their guards report lost).
            tokio::pin!(workers_done);
            tokio::select! {
                () = &mut workers_done => {}
                ended = &mut membership => {
                    member_ended = ended;
                    workers_done.await;
                }
            }
            if member_ended.is_none() && self.shard.is_some() {
                // The syncs have ended: the member releases what it still holds and leaves.
                member_ended = membership.await;
            }
        } else {
            workers_done.await;
        }
        // The member ends well only once told to leave, after `cancel`.
        match member_ended {
            Some(Err(source)) => Err(RunError::ShardLost(source)),
            _ => Ok(()),
        }
    }
}

/// One worker: takes keys until `stop` fires or the queue shuts down; a sync it started
/// runs to its end. Sharded, a key whose bucket is not active on `shard` is dropped.
async fn worker(
    controller: Arc<DeploymentController>,
    queue: RateLimitingQueue<String>,
    observer: Option<SyncObserver>,
    shard: Option<ShardMember>,
    stop: CancellationToken,
) {
    loop {
        let next = tokio::select! {
            biased;
            () = stop.cancelled() => None,
            key = queue.get() => key,
        };
        let Some(key) = next else {
            break;
        };
        let fence = match &shard {
            None => None,
            Some(member) => match shard_guard(member, &key) {
                Some(fence) => Some(fence),
                None if member.holds(shard_hash_of_key(&key)) => {
                    // Active, but the Lease's renewal is late: the member either stops (and
                    // the process with it) or carries on, and then the key is still due.
                    queue.add_rate_limited(key.clone());
                    queue.done(&key);
                    continue;
                }
                None => {
                    debug!(
                        key,
                        bucket = member.bucket_of(shard_hash_of_key(&key)),
                        "not in a shard bucket active on this replica; dropped"
                    );
                    member.keys_dropped(1);
                    queue.forget(&key);
                    queue.done(&key);
                    continue;
                }
            },
        };
        let started = tokio::time::Instant::now();
        let ok = process_key(&controller, &queue, &key, fence).await;
        if let Some(observe) = &observer {
            observe(started.elapsed(), ok);
        }
        queue.done(&key);
    }
}

/// A sync's hold on its shard bucket: the guard, and the member's token that fires when it
/// stops reconciling.
type Fence = (Arc<ReconcileGuard>, CancellationToken);

/// The guard for syncing `key` on `member`, or `None` when the key's bucket is not active
/// there (or the member's renewal is late).
fn shard_guard(member: &ShardMember, key: &str) -> Option<Fence> {
    member
        .try_begin(shard_hash_of_key(key))
        .map(|guard| (Arc::new(guard), member.stopped()))
}

/// How a finished sync leaves its key (`handleErr` plus the requeue of stuck rollouts).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyDisposition {
    /// Synced; come back after this long (`enqueueAfter`), or never.
    Done(Option<Duration>),
    /// Synced; come back soon, rate-limited (`enqueueRateLimited`: the deadline is now).
    DoneRequeueRateLimited,
    /// Failed; retry rate-limited.
    Retry,
    /// Failed for the last time, or for a terminating namespace: forget it.
    Drop,
}

/// Decides what happens to a key after a sync, given how often it was retried already.
pub fn disposition(result: &Result<Requeue, SyncError>, num_requeues: usize) -> KeyDisposition {
    match result {
        Ok(Requeue::Never) => KeyDisposition::Done(None),
        Ok(Requeue::Now) => KeyDisposition::DoneRequeueRateLimited,
        Ok(requeue @ Requeue::After(_)) => KeyDisposition::Done(
            requeue
                .delay()
                .and_then(|d| Duration::try_from(d).ok())
                .or(Some(Duration::ZERO)),
        ),
        Err(err) if err.is_namespace_terminating() => KeyDisposition::Drop,
        // The bucket is another replica's now (or will be): it syncs the key.
        Err(SyncError::ShardLost(_)) => KeyDisposition::Drop,
        Err(_) if num_requeues < MAX_RETRIES => KeyDisposition::Retry,
        Err(_) => KeyDisposition::Drop,
    }
}

/// Syncs one key and files it according to the result; returns whether the sync succeeded.
async fn process_key(
    controller: &Arc<DeploymentController>,
    queue: &RateLimitingQueue<String>,
    key: &String,
    fence: Option<Fence>,
) -> bool {
    let controller = controller.clone();
    process_key_with(queue, key, fence, move |namespace, name| async move {
        controller
            .sync_deployment(&namespace, &name)
            .await
            .map(|outcome| outcome.requeue)
    })
    .await
}

/// [`process_key`] with the sync given: runs `sync(namespace, name)` in a task of its own
/// and files the key according to the result. A panic counts as a failed sync: retried
/// rate-limited, and dropped after [`MAX_RETRIES`] like any error.
///
/// With a `fence` (sharded), the sync runs with the guard in scope (its writes are refused
/// once the guard is invalid) and is abandoned as soon as the member stops; a sync that ends
/// with its guard invalid is dropped, whatever its result: its bucket is another replica's.
async fn process_key_with<F, Fut>(
    queue: &RateLimitingQueue<String>,
    key: &String,
    fence: Option<Fence>,
    sync: F,
) -> bool
where
    F: FnOnce(String, String) -> Fut,
    Fut: std::future::Future<Output = Result<Requeue, SyncError>> + Send + 'static,
{
    let (namespace, name) = key.split_once('/').unwrap_or(("", key.as_str()));
    let sync = sync(namespace.to_owned(), name.to_owned());
    let guard = fence.as_ref().map(|(guard, _)| guard.clone());
    // A task of its own, so a panicking sync fails this key instead of the worker.
    let task = match fence {
        None => tokio::spawn(sync.boxed()),
        Some((guard, stopped)) => {
            let bucket = guard.bucket();
            tokio::spawn(with_guard(guard, async move {
                tokio::select! {
                    biased;
                    () = stopped.cancelled() => Err(SyncError::ShardLost(kctrl_shard::Lost { bucket })),
                    result = sync => result,
                }
            }).boxed())
        }
    };
    let result = match task.await {
        Ok(result) => result,
        Err(join_err) => {
            let retries = queue.num_requeues(key);
            if retries < MAX_RETRIES {
                error!(namespace, name, %join_err, retries, "syncing deployment panicked");
                queue.add_rate_limited(key.clone());
            } else {
                error!(namespace, name, %join_err, retries,
                    "syncing deployment panicked; dropping deployment out of the queue");
                queue.forget(key);
            }
            return false;
        }
    };
    // Held until the sync's task has ended: the bucket is released only after its writes.
    let result = match guard {
        Some(guard) if !guard.is_valid() => {
            if let Err(err) = &result
                && !matches!(err, SyncError::ShardLost(_))
            {
                debug!(namespace, name, %err, "sync failed after losing its shard bucket");
            }
            Err(SyncError::ShardLost(kctrl_shard::Lost {
                bucket: guard.bucket(),
            }))
        }
        _ => result,
    };
    let ok = result.is_ok();
    let retries = queue.num_requeues(key);
    match disposition(&result, retries) {
        KeyDisposition::Done(after) => {
            queue.forget(key);
            if let Some(after) = after {
                queue.add_after(key.clone(), after);
            }
        }
        KeyDisposition::DoneRequeueRateLimited => {
            // Upstream enqueues rate-limited during the sync, then forgets the key's failures.
            queue.add_rate_limited(key.clone());
            queue.forget(key);
        }
        KeyDisposition::Retry => {
            if let Err(err) = &result {
                info!(namespace, name, %err, retries, "error syncing deployment");
            }
            queue.add_rate_limited(key.clone());
        }
        KeyDisposition::Drop => {
            if let Err(err) = &result {
                if err.is_namespace_terminating() {
                    debug!(namespace, name, %err, "namespace is terminating; not retrying");
                } else if matches!(err, SyncError::ShardLost(_)) {
                    warn!(namespace, name, %err, "shard bucket lost during the sync; dropping the key");
                } else {
                    warn!(namespace, name, %err, "dropping deployment out of the queue");
                }
            }
            queue.forget(key);
        }
    }
    ok
}

#[cfg(test)]
#[path = "wiring_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "wiring_lanes_tests.rs"]
mod lanes_tests;

#[cfg(test)]
#[path = "wiring_shard_tests.rs"]
mod shard_tests;

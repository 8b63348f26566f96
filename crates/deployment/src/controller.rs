//! The sync of one Deployment (upstream's `syncDeployment` and the API-writing halves of
//! sync.go, rolling.go, recreate.go and progress.go): read the Deployment and its ReplicaSets
//! and Pods from caches, take the pure decisions of [`crate::sync`], [`crate::rolling`],
//! [`crate::recreate`] and [`crate::progress`], and apply them through the API.
//!
//! Reads come from [`Store`]s the caller fills: in the controller binary, the stores of the
//! shared informers; in tests, stores seeded directly (so the cache can disagree with the API,
//! as in upstream's tests). Writes go through a [`Client`]; events to an [`EventRecorder`].
//! The informer handlers and the work queue are not here.
//!
//! Writes, as upstream performs them: ReplicaSet create (POST), ReplicaSet scaling and
//! annotation refreshes (full PUT with the cached resourceVersion), adoption / release
//! (strategic-merge PATCH, via [`ControllerRefManager`]), history cleanup (DELETE), the
//! Deployment's status (PUT on `/status`) and the rollback (full Deployment PUT).

use std::borrow::Borrow;
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::Arc;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, ReplicaSetSpec};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kctrl_client::clock::{Clock, FnClock, SystemClock};
use kctrl_client::labels::{Selector, SelectorError};
use kctrl_client::protobuf::Decoder;
use kctrl_client::versioned::Versioned;
use kctrl_client::{Api, Client, DeleteParams, ObjectMetaAccess, PostParams};
use kctrl_controller_ref::{
    CanAdopt, ClaimError, ControllerRefManager, Owner, RealReplicaSetControl,
};
use kctrl_informer::{IndexFn, Store};
use tracing::{debug, info};

use crate::events::{EventRecorder, EventType};
use crate::pod_view::{CONTROLLER_UID_INDEX, PodView, controller_uid_index};
use crate::progress::{self, Requeue, RolloutStatus};
use crate::recreate::{RecreatePlan, plan_recreate};
use crate::rolling::{RollingPlan, plan_rolling};
use crate::sync::{ScaleAction, calculate_status, scale};
use crate::util::constants::{
    CONDITION_FALSE, CONDITION_TRUE, CONDITION_UNKNOWN, DEFAULT_DEPLOYMENT_UNIQUE_LABEL_KEY,
    DEPLOYMENT_PROGRESSING, FAILED_RS_CREATE_REASON, FOUND_NEW_RS_REASON, NEW_REPLICA_SET_REASON,
    PAUSED_DEPLOY_REASON, RECREATE_DEPLOYMENT_STRATEGY_TYPE, RESUMED_DEPLOY_REASON,
    REVISION_ANNOTATION, ROLLING_UPDATE_DEPLOYMENT_STRATEGY_TYPE, SCALING_REPLICA_SET_EVENT,
    SELECTING_ALL_EVENT, TIMED_OUT_REASON,
};
use crate::util::fields::{deployment_replicas, rs_replicas, strategy_type};
use crate::util::labels::{add_label, clone_selector_and_add_label};
use crate::util::sort::sort_by_revision;
use crate::util::{
    NewReplicasError, compute_hash, deployment_complete, equal_ignore_hash,
    filter_active_replica_sets, find_new_replica_set, find_old_replica_sets,
    generate_replica_set_name, get_deployment_condition, get_desired_replicas_annotation,
    has_progress_deadline, has_revision_history_limit, max_revision, max_surge,
    new_deployment_condition, new_rs_new_replicas, replicas_annotations_need_update,
    set_deployment_condition, set_deployment_revision, set_new_replica_set_annotations,
    set_replicas_annotations,
};
use kctrl_runtime::own_writes::{Check, OwnWrites, Readiness, Target};

/// Upstream's limit on the `revision-history` annotation of a ReplicaSet.
const REVISION_HISTORY_LIMIT_IN_CHARS: usize = 2000;

/// Why a sync failed; the caller retries the key (rate-limited).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SyncError {
    /// `spec.selector` does not convert to a label selector.
    #[error("deployment {namespace}/{name} has invalid label selector: {source}")]
    InvalidSelector {
        /// The Deployment's namespace.
        namespace: String,
        /// The Deployment's name.
        name: String,
        /// Why the selector is invalid.
        #[source]
        source: SelectorError,
    },
    /// Adopting or releasing ReplicaSets failed (the owner recheck refused, or a patch failed).
    #[error(transparent)]
    Claim(#[from] ClaimError<ReplicaSet>),
    /// An API call failed.
    #[error(transparent)]
    Api(#[from] kctrl_client::Error),
    /// The new ReplicaSet's size could not be computed (bad maxSurge, unknown strategy).
    #[error(transparent)]
    NewReplicas(#[from] NewReplicasError),
    /// A create answered AlreadyExists but the ReplicaSet is not in the cache (yet).
    #[error("replicaset {namespace}/{name} not found in the cache")]
    NotInCache {
        /// The ReplicaSet's namespace.
        namespace: String,
        /// The ReplicaSet's name.
        name: String,
    },
    /// `spec.strategy.type` is neither Recreate nor RollingUpdate.
    #[error("unexpected deployment strategy type: {0}")]
    UnexpectedStrategy(String),
    /// Sharded: this replica stopped holding the Deployment's shard bucket during the sync
    /// (its Lease was not renewed in time); the sync was abandoned and the key is another
    /// replica's.
    #[error(transparent)]
    ShardLost(#[from] kctrl_shard::Lost),
}

impl SyncError {
    /// Whether the API refused because the namespace is being terminated (upstream forgets
    /// such keys instead of retrying).
    pub fn is_namespace_terminating(&self) -> bool {
        match self {
            SyncError::Api(e) => has_namespace_terminating_cause(e),
            _ => false,
        }
    }
}

fn has_namespace_terminating_cause(e: &kctrl_client::Error) -> bool {
    e.status()
        .and_then(|s| s.details.as_ref())
        .and_then(|d| d.causes.as_ref())
        .is_some_and(|causes| {
            causes
                .iter()
                .any(|c| c.reason.as_deref() == Some("NamespaceTerminating"))
        })
}

/// What a successful sync asks of the caller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SyncOutcome {
    /// When to look at the Deployment again to notice a missed progress deadline
    /// ([`Requeue::delay`] gives the enqueue delay).
    pub requeue: Requeue,
}

impl SyncOutcome {
    /// Nothing more to do.
    pub const DONE: SyncOutcome = SyncOutcome {
        requeue: Requeue::Never,
    };
}

/// The Deployment controller's sync logic: caches to read, a client to write, a recorder for
/// events, a clock.
///
/// ```
/// # use std::sync::Arc;
/// use kctrl_deployment::controller::DeploymentController;
/// use kctrl_deployment::events::RecordingEventRecorder;
/// use kctrl_informer::Store;
///
/// # fn demo(client: kctrl_client::Client) {
/// let recorder = Arc::new(RecordingEventRecorder::new());
/// let dc = DeploymentController::new(client, Store::new(), Store::new(), Store::new(), recorder)
///     .with_clock(|| "2026-01-01T00:00:00Z".parse().unwrap());
/// // dc.sync_deployment("default", "web").await
/// # let _ = dc; }
/// ```
pub struct DeploymentController {
    client: Client,
    deployments: Store<Deployment>,
    replica_sets: Store<ReplicaSet>,
    pods: Store<PodView>,
    recorder: Arc<dyn EventRecorder>,
    /// Where the current time comes from; [`Self::now`] rounds it down to whole seconds, as
    /// `metav1.Now()` is once serialised.
    clock: Arc<dyn Clock>,
    /// Per Deployment key, this controller's own writes of the Deployment that its cache may
    /// not show yet (see [`cache_predates_own_write`](Self::cache_predates_own_write)).
    d_writes: OwnWrites,
    /// Per Deployment key, this controller's ReplicaSet writes that the ReplicaSet cache may
    /// not show yet: the runtime's read-your-own-writes table ([`kctrl_runtime::own_writes`]),
    /// see [`replica_set_cache_behind`](Self::replica_set_cache_behind).
    rs_writes: OwnWrites,
    /// Decoders of protobuf answers to ReplicaSet writes, when writes talk protobuf.
    rs_protobuf: Option<Decoder<ReplicaSet>>,
    /// Decoders of protobuf answers to Deployment writes, likewise.
    d_protobuf: Option<Decoder<Deployment>>,
}

impl fmt::Debug for DeploymentController {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeploymentController")
            .field("client", &self.client)
            .finish_non_exhaustive()
    }
}

impl DeploymentController {
    /// A controller reading the given caches (filled by informers, or seeded by tests) and
    /// writing through `client`. The clock is the system clock; see [`Self::with_clock`].
    pub fn new(
        client: Client,
        deployments: Store<Deployment>,
        replica_sets: Store<ReplicaSet>,
        pods: Store<PodView>,
        recorder: Arc<dyn EventRecorder>,
    ) -> Self {
        // Pods are looked up by their controller's UID, ReplicaSets by what a claim reads; a
        // store shared with an informer that already has an index keeps it.
        ensure_index(&pods, CONTROLLER_UID_INDEX, controller_uid_index(), "pods");
        ensure_index(
            &replica_sets,
            CLAIM_CANDIDATES_INDEX,
            claim_candidates_index(),
            "ReplicaSets",
        );
        let d_writes = OwnWrites::new();
        d_writes.track(deployments.clone(), {
            let client = client.clone();
            move |ns| Api::namespaced(client.clone(), ns).without_managed_fields()
        });
        let dc = Self {
            client,
            deployments,
            replica_sets,
            pods,
            recorder,
            clock: Arc::new(SystemClock),
            d_writes,
            rs_writes: OwnWrites::new(),
            rs_protobuf: None,
            d_protobuf: None,
        };
        dc.track_replica_sets();
        dc
    }

    /// Compares the recorded ReplicaSet writes with the ReplicaSet cache, reading them live
    /// as the controller's other ReplicaSet requests do.
    fn track_replica_sets(&self) {
        let client = self.client.clone();
        let protobuf = self.rs_protobuf;
        self.rs_writes
            .track(self.replica_sets.clone(), move |namespace| {
                replica_sets_api(&client, protobuf, namespace)
            });
    }

    /// Talks protobuf for ReplicaSet and Deployment writes, as kube-controller-manager does:
    /// objects are sent in protobuf, and answers asked for in protobuf and decoded with these
    /// decoders (those the informers use, as
    /// [`SharedInformerFactory::protobuf_decoder`](kctrl_informer::SharedInformerFactory::protobuf_decoder)
    /// gives them); `None` keeps that type's writes JSON. Status updates of Deployments read
    /// only the new resourceVersion of their answer, from JSON, either way.
    pub fn with_protobuf_writes(
        mut self,
        replica_sets: Option<Decoder<ReplicaSet>>,
        deployments: Option<Decoder<Deployment>>,
    ) -> Self {
        self.rs_protobuf = replica_sets;
        self.d_protobuf = deployments;
        self.track_replica_sets();
        self
    }

    /// Remembers that a write of `d` replaced `replaced` (the resourceVersion it was sent with)
    /// with the version `d` now carries.
    pub(crate) fn note_own_write(&self, d: &Deployment, replaced: Option<String>) {
        let namespace = d.metadata.namespace.as_deref().unwrap_or("");
        let name = d.metadata.name.as_deref().unwrap_or("");
        let Some(replaced) = replaced else { return };
        self.d_writes.record_outcome(
            &kctrl_informer::key_for(Some(namespace), name),
            &Target::of::<Deployment>(namespace, name),
            Some(&replaced),
            Ok(d.metadata.resource_version.as_deref()),
        );
    }

    /// Whether the cached Deployment `key` is a version one of this controller's own writes
    /// already replaced: its informer has not delivered that write yet. A sync from it would
    /// compute from stale state and its status write would be refused with a conflict (a
    /// wasted request and a rate-limited retry); the write's own update event is on its way
    /// and queues the Deployment again. Forgets the key once the cache has caught up; after
    /// the runtime's bound ([`kctrl_runtime::own_writes::DEFAULT_VERIFY_AFTER`]) without the
    /// event, the sync acts (a stale write is then refused as a conflict and retried).
    fn cache_predates_own_write(&self, key: &str) -> bool {
        matches!(self.d_writes.check(key), Check::Behind { .. })
    }

    /// Whether the ReplicaSet cache is behind one of this controller's own writes of
    /// Deployment `namespace/name`'s ReplicaSets (`key`, computed once by the sync): `Some(how
    /// long until the records are due for a live read)` when the sync must not act on it,
    /// `None` when it may.
    ///
    /// Reads the cache only, except for a ReplicaSet whose last write got no answer while the
    /// cache still holds the version it was sent against, or whose record has waited longer
    /// than [`VERIFY_AFTER`](crate::replica_set_writes::VERIFY_AFTER): that one is read live
    /// (one GET) to tell whether the cache is behind. A failed read fails the sync, which is
    /// retried.
    async fn replica_set_cache_behind(
        &self,
        key: &str,
    ) -> Result<Option<std::time::Duration>, SyncError> {
        Ok(match self.rs_writes.ensure_ready(key).await? {
            Readiness::Ready => None,
            Readiness::Behind { retry_in } => Some(retry_in),
        })
    }

    /// Records the outcome of a write of ReplicaSet `rs` for Deployment `d` (see
    /// [`crate::replica_set_writes`]): `sent` is the resourceVersion it was sent with (`None`
    /// for a create).
    fn note_replica_set_write(
        &self,
        d: &Deployment,
        rs: &str,
        sent: Option<&str>,
        result: Result<&ReplicaSet, &kctrl_client::Error>,
    ) {
        let namespace = d.metadata.namespace.as_deref().unwrap_or("");
        let name = d.metadata.name.as_deref().unwrap_or("");
        self.rs_writes.record_outcome(
            &kctrl_informer::key_for(Some(namespace), name),
            &Target::of::<ReplicaSet>(namespace, rs),
            sent,
            result.map(|written| written.metadata.resource_version.as_deref()),
        );
    }

    /// Updates ReplicaSet `rs` of Deployment `d` (a full PUT with its resourceVersion) and
    /// records the write for [`replica_set_cache_behind`](Self::replica_set_cache_behind).
    async fn update_replica_set(
        &self,
        d: &Deployment,
        rs: &ReplicaSet,
    ) -> Result<ReplicaSet, kctrl_client::Error> {
        let namespace = rs.metadata.namespace.clone().unwrap_or_default();
        let result = self
            .replica_sets_api(&namespace)
            .update(&PostParams::default(), rs)
            .await;
        self.note_replica_set_write(
            d,
            rs.metadata.name.as_deref().unwrap_or(""),
            rs.metadata.resource_version.as_deref(),
            result.as_ref(),
        );
        result
    }

    /// Replaces the clock with `clock`, called for the current time (a shared
    /// [`kctrl_client::clock`] clock is passed as `move || clock.now()`).
    pub fn with_clock(mut self, clock: impl Fn() -> Timestamp + Send + Sync + 'static) -> Self {
        self.clock = Arc::new(FnClock::new(clock));
        self
    }

    /// The current time, rounded down to whole seconds.
    fn now(&self) -> Timestamp {
        let t = self.clock.now();
        Timestamp::from_second(t.as_second()).unwrap_or(t)
    }

    /// Deployments in `namespace`. Answers are decoded without managedFields, which the
    /// controller never reads (nor do the informers keep them in the binary).
    pub(crate) fn deployments_api(&self, namespace: &str) -> Api<Deployment> {
        let api = Api::namespaced(self.client.clone(), namespace).without_managed_fields();
        match self.d_protobuf {
            Some(decoder) => api.with_protobuf_decoder(decoder).protobuf_bodies(),
            None => api,
        }
    }

    /// ReplicaSets in `namespace`, decoded as [`deployments_api`](Self::deployments_api).
    fn replica_sets_api(&self, namespace: &str) -> Api<ReplicaSet> {
        replica_sets_api(&self.client, self.rs_protobuf, namespace)
    }

    /// Records an event about `d`.
    pub(crate) fn event(&self, d: &Deployment, type_: EventType, reason: &str, message: &str) {
        let object = ObjectReference {
            api_version: Some("apps/v1".to_owned()),
            kind: Some("Deployment".to_owned()),
            namespace: d.metadata.namespace.clone(),
            name: d.metadata.name.clone(),
            uid: d.metadata.uid.clone(),
            resource_version: d.metadata.resource_version.clone(),
            ..Default::default()
        };
        self.recorder.event(&object, type_, reason, message);
    }

    /// `syncDeployment`: brings Deployment `namespace/name` one step closer to its spec.
    pub async fn sync_deployment(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<SyncOutcome, SyncError> {
        debug!(namespace, name, "started syncing deployment");
        let key = kctrl_informer::key_for(Some(namespace), name);
        let Some(cached) = self.deployments.get_namespaced(namespace, name) else {
            debug!(namespace, name, "deployment has been deleted");
            self.d_writes.forget(&key);
            self.rs_writes.forget(&key);
            return Ok(SyncOutcome::DONE);
        };
        if self.cache_predates_own_write(&key) {
            debug!(
                namespace,
                name,
                "the cache has not seen this controller's last write yet; its update event will queue the deployment again"
            );
            return Ok(SyncOutcome::DONE);
        }
        // A Deployment being deleted only gets its status synced: nothing is sized or created,
        // so it need not wait for the cache (and a foreground deletion removing a ReplicaSet
        // we had just created would otherwise hold its status for VERIFY_AFTER).
        if cached.metadata.deletion_timestamp.is_none()
            && let Some(retry_in) = self.replica_set_cache_behind(&key).await?
        {
            debug!(
                namespace,
                name,
                ?retry_in,
                "the replica set cache has not seen this controller's last replica set writes yet; their events will queue the deployment again"
            );
            let after = SignedDuration::try_from(retry_in).unwrap_or(SignedDuration::MAX);
            return Ok(SyncOutcome {
                requeue: Requeue::After(after),
            });
        }
        let mut d = (*cached).clone();
        let selector = d.spec.get().map(|s| &s.selector);
        if selector.is_none_or(|s| *s == LabelSelector::default()) {
            self.event(
                &d,
                EventType::Warning,
                SELECTING_ALL_EVENT,
                "This deployment is selecting all pods. A non-empty selector is required.",
            );
            let generation = d.metadata.generation.unwrap_or(0);
            let status = d.status.get_or_insert_default();
            if status.observed_generation.unwrap_or(0) < generation {
                status.observed_generation = Some(generation);
                if let Err(err) = self.update_status(&mut d).await {
                    debug!(namespace, name, %err, "failed to update observedGeneration");
                }
            }
            return Ok(SyncOutcome::DONE);
        }

        let mut rs_list = self.get_replica_sets_for_deployment(&d).await?;

        if d.metadata.deletion_timestamp.is_some() {
            self.sync_status_only(&mut d, &mut rs_list).await?;
            return Ok(SyncOutcome::DONE);
        }

        self.check_paused_conditions(&mut d).await?;

        if d.spec.get().and_then(|s| s.paused) == Some(true) {
            self.sync(&mut d, &mut rs_list).await?;
            return Ok(SyncOutcome::DONE);
        }

        if crate::rollback::get_rollback_to(&d).is_some() {
            self.rollback(&mut d, &mut rs_list).await?;
            return Ok(SyncOutcome::DONE);
        }

        if self.is_scaling_event(&mut d, &mut rs_list).await? {
            self.sync(&mut d, &mut rs_list).await?;
            return Ok(SyncOutcome::DONE);
        }

        match strategy_type(&d) {
            RECREATE_DEPLOYMENT_STRATEGY_TYPE => {
                // Only Recreate reads the Pods (to wait until no old one runs), and only now:
                // as upstream since v1.37.2, after the paused-condition write and the scaling
                // check, so Pods deleted meanwhile are already gone from the map.
                let pod_map = self.get_pod_map_for_deployment(&rs_list);
                self.rollout_recreate(&mut d, &mut rs_list, &pod_map).await
            }
            ROLLING_UPDATE_DEPLOYMENT_STRATEGY_TYPE => {
                self.rollout_rolling(&mut d, &mut rs_list).await
            }
            other => Err(SyncError::UnexpectedStrategy(other.to_owned())),
        }
    }

    /// `getReplicaSetsForDeployment`: the ReplicaSets of the namespace (from the cache) claimed
    /// for `d` — matching orphans adopted (after one uncached recheck of `d`), owned ones that
    /// no longer match released. Only `d`'s own and the namespace's orphans are examined
    /// ([`CLAIM_CANDIDATES_INDEX`]); upstream hands the claim the whole namespace, with the
    /// same outcome.
    pub async fn get_replica_sets_for_deployment(
        &self,
        d: &Deployment,
    ) -> Result<Vec<Arc<ReplicaSet>>, SyncError> {
        let namespace = d.metadata.namespace.clone().unwrap_or_default();
        let label_selector = d.spec.get().map(|s| s.selector.clone()).unwrap_or_default();
        let selector = Selector::from_label_selector(&label_selector).map_err(|source| {
            SyncError::InvalidSelector {
                namespace: namespace.clone(),
                name: d.metadata.name.clone().unwrap_or_default(),
                source,
            }
        })?;
        let candidates = claim_candidates(&self.replica_sets, d, &namespace);
        let owner = Owner::of(d);
        let can_adopt = CanAdopt::recheck_owner(self.deployments_api(&namespace), &owner);
        let manager = ControllerRefManager::new(
            RealReplicaSetControl::new(self.client.clone()),
            owner,
            selector,
            can_adopt,
        );
        Ok(manager.claim_replica_sets(&candidates).await?)
    }

    /// `getPodMapForDeployment`: the Pods controlled by each ReplicaSet, keyed by the
    /// ReplicaSet's uid (every ReplicaSet has an entry; inactive pods included). Read from the
    /// Pod cache, so it cannot fail; [`sync_deployment`](Self::sync_deployment) builds it for
    /// Recreate rollouts only.
    pub fn get_pod_map_for_deployment<R: Borrow<ReplicaSet>>(
        &self,
        rs_list: &[R],
    ) -> BTreeMap<String, Vec<Arc<PodView>>> {
        let mut map: BTreeMap<String, Vec<Arc<PodView>>> = BTreeMap::new();
        for rs in rs_list.iter().map(Borrow::borrow) {
            let uid = rs.metadata.uid.clone().unwrap_or_default();
            // The owner index answers without scanning the cache; a UID names one object, but
            // the namespace is checked as well, as a lookup by namespace would.
            let pods = match self.pods.by_index(CONTROLLER_UID_INDEX, &uid) {
                Ok(pods) => pods,
                Err(_) => self.pods.list(),
            };
            let owned = pods.into_iter().filter(|pod| {
                ObjectMetaAccess::namespace(&pod.metadata) == rs.metadata.namespace.as_deref()
                    && pod.controller_ref().is_some_and(|owner| owner.uid() == uid)
            });
            map.entry(uid.clone()).or_default().extend(owned);
        }
        map
    }

    /// UpdateStatus of `d`. On success the working copy takes the new resourceVersion, so
    /// the next write of this sync is not refused as stale.
    pub(crate) async fn update_status(
        &self,
        d: &mut Deployment,
    ) -> Result<(), kctrl_client::Error> {
        let namespace = d.metadata.namespace.clone().unwrap_or_default();
        // Only the new resourceVersion of the answer is used (and only it is read).
        let version = self
            .deployments_api(&namespace)
            .update_status_version(&PostParams::default(), d)
            .await?;
        let replaced = d.metadata.resource_version.replace(version);
        self.note_own_write(d, replaced);
        Ok(())
    }

    /// `checkPausedConditions`: with a progress deadline, records Progressing=Unknown
    /// DeploymentPaused / DeploymentResumed when `spec.paused` changed (never over a timeout).
    async fn check_paused_conditions(&self, d: &mut Deployment) -> Result<(), SyncError> {
        if !has_progress_deadline(d) {
            return Ok(());
        }
        let status = d.status.clone().unwrap_or_default();
        let reason = get_deployment_condition(&status, DEPLOYMENT_PROGRESSING)
            .and_then(|c| c.reason.clone());
        if reason.as_deref() == Some(TIMED_OUT_REASON) {
            return Ok(());
        }
        let paused_cond_exists = reason.as_deref() == Some(PAUSED_DEPLOY_REASON);
        let paused = d.spec.get().and_then(|s| s.paused) == Some(true);
        let (reason, message) = if paused && !paused_cond_exists {
            (PAUSED_DEPLOY_REASON, "Deployment is paused")
        } else if !paused && paused_cond_exists {
            (RESUMED_DEPLOY_REASON, "Deployment is resumed")
        } else {
            return Ok(());
        };
        let condition = new_deployment_condition(
            DEPLOYMENT_PROGRESSING,
            CONDITION_UNKNOWN,
            reason,
            message,
            self.now(),
        );
        set_deployment_condition(d.status.get_or_insert_default(), condition);
        self.update_status(d).await?;
        Ok(())
    }

    /// `syncStatusOnly`: the status from the existing ReplicaSets; nothing is created or scaled.
    async fn sync_status_only(
        &self,
        d: &mut Deployment,
        rs_list: &mut Vec<Arc<ReplicaSet>>,
    ) -> Result<(), SyncError> {
        let (new_rs, old_rss) = self
            .get_all_replica_sets_and_sync_revision(d, rs_list, false)
            .await?;
        let mut all = old_rss;
        all.extend(new_rs.clone());
        self.sync_deployment_status(&all, new_rs.as_deref(), d)
            .await
    }

    /// `sync`: proportional scaling (paused Deployments and scaling events), history cleanup
    /// while paused, then the status.
    async fn sync(
        &self,
        d: &mut Deployment,
        rs_list: &mut Vec<Arc<ReplicaSet>>,
    ) -> Result<(), SyncError> {
        let (new_rs, old_rss) = self
            .get_all_replica_sets_and_sync_revision(d, rs_list, false)
            .await?;
        let mut all = old_rss.clone();
        all.extend(new_rs.clone());
        let mut latest = by_name(&all);
        for action in scale(d, new_rs.as_deref(), &old_rss) {
            // `scale` emits one action per active ReplicaSet when scaling proportionally
            // (upstream's forceUpdate); its other actions all change the size.
            self.apply_scale(d, &mut latest, &action, true).await?;
        }
        if d.spec.get().and_then(|s| s.paused) == Some(true)
            && crate::rollback::get_rollback_to(d).is_none()
        {
            self.cleanup_deployment(&old_rss, d).await?;
        }
        self.sync_deployment_status(&all, new_rs.as_deref(), d)
            .await
    }

    /// `isScalingEvent`: an active ReplicaSet's desired-replicas annotation differs from
    /// `spec.replicas`.
    async fn is_scaling_event(
        &self,
        d: &mut Deployment,
        rs_list: &mut Vec<Arc<ReplicaSet>>,
    ) -> Result<bool, SyncError> {
        let (new_rs, old_rss) = self
            .get_all_replica_sets_and_sync_revision(d, rs_list, false)
            .await?;
        let mut all = old_rss;
        all.extend(new_rs);
        let replicas = deployment_replicas(d);
        Ok(filter_active_replica_sets(&all)
            .iter()
            .filter_map(|rs| get_desired_replicas_annotation(rs))
            .any(|desired| desired != replicas))
    }

    /// `rolloutRolling`: create the new ReplicaSet if needed, then either grow it or shrink
    /// old ones; clean up history when complete; sync the rollout status.
    async fn rollout_rolling(
        &self,
        d: &mut Deployment,
        rs_list: &mut Vec<Arc<ReplicaSet>>,
    ) -> Result<SyncOutcome, SyncError> {
        let (new_rs, old_rss) = self
            .get_all_replica_sets_and_sync_revision(d, rs_list, true)
            .await?;
        let mut all = old_rss.clone();
        all.extend(new_rs.clone());
        let Some(new) = new_rs.as_ref() else {
            return self.sync_rollout_status(&all, None, d).await;
        };
        let mut latest = by_name(&all);
        match plan_rolling(&all, &filter_active_replica_sets(&old_rss), new, d)? {
            RollingPlan::ScaleNew(action) => {
                self.apply_scale(d, &mut latest, &action, false).await?;
                return self.sync_rollout_status(&all, Some(&**new), d).await;
            }
            RollingPlan::ScaleOld(plan) => {
                let mut written = true;
                for action in plan.actions() {
                    if let Err(err) = self.apply_scale(d, &mut latest, action, false).await {
                        // Upstream swallows these errors: not scaled, carry on.
                        debug!(
                            namespace = d.metadata.namespace.as_deref().unwrap_or(""),
                            name = d.metadata.name.as_deref().unwrap_or(""),
                            %err,
                            "scaling down old replica sets failed"
                        );
                        written = false;
                        break;
                    }
                }
                if written && plan.scaled() {
                    return self.sync_rollout_status(&all, Some(&**new), d).await;
                }
            }
        }
        if deployment_complete(d, &d.status.clone().unwrap_or_default()) {
            self.cleanup_deployment(&old_rss, d).await?;
        }
        self.sync_rollout_status(&all, Some(&**new), d).await
    }

    /// `rolloutRecreate`: scale every old ReplicaSet down, wait for their pods to be gone,
    /// then create / scale up the new one; clean up history when complete; sync the rollout
    /// status.
    async fn rollout_recreate(
        &self,
        d: &mut Deployment,
        rs_list: &mut Vec<Arc<ReplicaSet>>,
        pod_map: &BTreeMap<String, Vec<Arc<PodView>>>,
    ) -> Result<SyncOutcome, SyncError> {
        let (new_rs, old_rss) = self
            .get_all_replica_sets_and_sync_revision(d, rs_list, false)
            .await?;
        let mut all = old_rss.clone();
        all.extend(new_rs.clone());
        match plan_recreate(d, new_rs.as_deref(), &old_rss, pod_map) {
            RecreatePlan::ScaleDownOld(actions) => {
                let mut latest = by_name(&all);
                for action in &actions {
                    self.apply_scale(d, &mut latest, action, false).await?;
                }
                self.sync_rollout_status(&all, new_rs.as_deref(), d).await
            }
            RecreatePlan::WaitForOldPods => {
                self.sync_rollout_status(&all, new_rs.as_deref(), d).await
            }
            RecreatePlan::ScaleUpNew { replicas, .. } => {
                let (new_rs, old_rss) = match new_rs {
                    Some(rs) => (Some(rs), old_rss),
                    None => {
                        self.get_all_replica_sets_and_sync_revision(d, rs_list, true)
                            .await?
                    }
                };
                let mut all = old_rss.clone();
                all.extend(new_rs.clone());
                if let Some(new) = &new_rs {
                    self.scale_replica_set(new, replicas, d, false).await?;
                }
                if deployment_complete(d, &d.status.clone().unwrap_or_default()) {
                    self.cleanup_deployment(&old_rss, d).await?;
                }
                self.sync_rollout_status(&all, new_rs.as_deref(), d).await
            }
        }
    }

    /// `getAllReplicaSetsAndSyncRevision` → `(new, all old)`. An updated or created new
    /// ReplicaSet replaces its cached copy in `rs_list`, so later steps of the sync write on
    /// top of it.
    pub(crate) async fn get_all_replica_sets_and_sync_revision(
        &self,
        d: &mut Deployment,
        rs_list: &mut Vec<Arc<ReplicaSet>>,
        create: bool,
    ) -> Result<(Option<Arc<ReplicaSet>>, Vec<Arc<ReplicaSet>>), SyncError> {
        // Sorted as a copy of the list (of pointers): `rs_list` keeps its order.
        let (_, all_old) = find_old_replica_sets(d, &mut rs_list.clone());
        let new_rs = self
            .get_new_replica_set(d, rs_list, &all_old, create)
            .await?;
        if let Some(rs) = &new_rs {
            match rs_list
                .iter_mut()
                .find(|cached| cached.metadata.uid == rs.metadata.uid)
            {
                Some(cached) => *cached = rs.clone(),
                None => rs_list.push(rs.clone()),
            }
        }
        Ok((new_rs, all_old))
    }

    /// `getNewReplicaSet`: the ReplicaSet running `d`'s template, its annotations brought up
    /// to date and the Deployment's revision synced; created (when `create`) if missing.
    async fn get_new_replica_set(
        &self,
        d: &mut Deployment,
        rs_list: &[Arc<ReplicaSet>],
        old_rss: &[Arc<ReplicaSet>],
        create: bool,
    ) -> Result<Option<Arc<ReplicaSet>>, SyncError> {
        let namespace = d.metadata.namespace.clone().unwrap_or_default();
        let d_name = d.metadata.name.clone().unwrap_or_default();
        let existing = find_new_replica_set(d, &mut rs_list.to_vec());
        let new_revision = (max_revision(old_rss) + 1).to_string();
        let min_ready_seconds = d.spec.get().and_then(|s| s.min_ready_seconds);

        if let Some(existing) = existing {
            // Copied before it is changed, as upstream deep-copies the cached object here.
            let mut rs = (*existing).clone();
            let annotations_updated = set_new_replica_set_annotations(
                d,
                &mut rs,
                &new_revision,
                true,
                REVISION_HISTORY_LIMIT_IN_CHARS,
            );
            let spec = rs.spec.get_mut();
            let min_ready_changed =
                spec.min_ready_seconds.unwrap_or(0) != min_ready_seconds.unwrap_or(0);
            if annotations_updated || min_ready_changed {
                spec.min_ready_seconds = min_ready_seconds;
                let updated = self.update_replica_set(d, &rs).await?;
                return Ok(Some(Arc::new(updated)));
            }
            let rs_revision = rs
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(REVISION_ANNOTATION))
                .cloned()
                .unwrap_or_default();
            let mut needs_update = set_deployment_revision(d, &rs_revision);
            let has_progressing = d
                .status
                .as_ref()
                .is_some_and(|s| get_deployment_condition(s, DEPLOYMENT_PROGRESSING).is_some());
            if has_progress_deadline(d) && !has_progressing {
                let condition = new_deployment_condition(
                    DEPLOYMENT_PROGRESSING,
                    CONDITION_TRUE,
                    FOUND_NEW_RS_REASON,
                    &format!(
                        "Found new replica set {:?}",
                        rs.metadata.name.as_deref().unwrap_or("")
                    ),
                    self.now(),
                );
                set_deployment_condition(d.status.get_or_insert_default(), condition);
                needs_update = true;
            }
            if needs_update {
                self.update_status(d).await?;
            }
            return Ok(Some(Arc::new(rs)));
        }
        if !create {
            return Ok(None);
        }

        let spec = d.spec.clone().into_value().unwrap_or_default();
        let collision_count = d.status.as_ref().and_then(|s| s.collision_count);
        let mut template = spec.template.clone();
        let hash = compute_hash(&template, collision_count);
        let template_meta = template.metadata.get_or_insert_default();
        add_label(
            &mut template_meta.labels,
            DEFAULT_DEPLOYMENT_UNIQUE_LABEL_KEY,
            &hash,
        );
        let labels = template_meta.labels.clone();
        let selector = clone_selector_and_add_label(
            &spec.selector,
            DEFAULT_DEPLOYMENT_UNIQUE_LABEL_KEY,
            &hash,
        );
        let rs_name = generate_replica_set_name(&d_name, &hash);
        let mut new_rs = ReplicaSet {
            metadata: ObjectMeta {
                name: Some(rs_name.clone()),
                namespace: Some(namespace.clone()),
                owner_references: Some(vec![Owner::of(d).controller_ref()]),
                labels,
                ..Default::default()
            },
            spec: Versioned::from_value(ReplicaSetSpec {
                replicas: Some(0),
                min_ready_seconds,
                selector,
                template: Some(template),
            }),
            status: None,
        };
        let mut all: Vec<&ReplicaSet> = old_rss.iter().map(|rs| &**rs).collect();
        all.push(&new_rs);
        let new_replicas = new_rs_new_replicas(d, &all, &new_rs)?;
        new_rs.spec.get_mut().replicas = Some(new_replicas);
        set_new_replica_set_annotations(
            d,
            &mut new_rs,
            &new_revision,
            false,
            REVISION_HISTORY_LIMIT_IN_CHARS,
        );

        let result = self
            .replica_sets_api(&namespace)
            .create(&PostParams::default(), &new_rs)
            .await;
        self.note_replica_set_write(d, &rs_name, None, result.as_ref());
        let (created, already_exists) = match result {
            Ok(created) => (Arc::new(created), false),
            Err(err) if err.is_already_exists() => {
                let Some(cached) = self.replica_sets.get_namespaced(&namespace, &rs_name) else {
                    return Err(SyncError::NotInCache {
                        namespace,
                        name: rs_name,
                    });
                };
                let controlled = kctrl_controller_ref::get_controller_of(&cached.metadata)
                    .is_some_and(|r| Some(&r.uid) == d.metadata.uid.as_ref());
                let cached_template = cached
                    .spec
                    .get()
                    .and_then(|s| s.template.clone())
                    .unwrap_or_default();
                if controlled && equal_ignore_hash(&cached_template, &spec.template) {
                    (cached, true)
                } else {
                    // A hash collision: bump collisionCount so the next sync hashes anew.
                    let status = d.status.get_or_insert_default();
                    status.collision_count = Some(status.collision_count.unwrap_or(0) + 1);
                    let count = status.collision_count;
                    if self.update_status(d).await.is_ok() {
                        info!(
                            namespace,
                            name = d_name,
                            collision_count = count,
                            "found a hash collision for deployment, bumped collisionCount to resolve it"
                        );
                    }
                    return Err(err.into());
                }
            }
            Err(err) if has_namespace_terminating_cause(&err) => return Err(err.into()),
            Err(err) => {
                let message = format!("Failed to create new replica set {rs_name:?}: {err}");
                if has_progress_deadline(d) {
                    let condition = new_deployment_condition(
                        DEPLOYMENT_PROGRESSING,
                        CONDITION_FALSE,
                        FAILED_RS_CREATE_REASON,
                        &message,
                        self.now(),
                    );
                    set_deployment_condition(d.status.get_or_insert_default(), condition);
                    let _ = self.update_status(d).await;
                }
                self.event(d, EventType::Warning, FAILED_RS_CREATE_REASON, &message);
                return Err(err.into());
            }
        };
        if !already_exists && new_replicas > 0 {
            self.event(
                d,
                EventType::Normal,
                SCALING_REPLICA_SET_EVENT,
                &format!("Scaled up replica set {rs_name} from 0 to {new_replicas}"),
            );
        }
        let mut needs_update = set_deployment_revision(d, &new_revision);
        if !already_exists && has_progress_deadline(d) {
            let condition = new_deployment_condition(
                DEPLOYMENT_PROGRESSING,
                CONDITION_TRUE,
                NEW_REPLICA_SET_REASON,
                &format!("Created new replica set {rs_name:?}"),
                self.now(),
            );
            set_deployment_condition(d.status.get_or_insert_default(), condition);
            needs_update = true;
        }
        if needs_update {
            self.update_status(d).await?;
        }
        Ok(Some(created))
    }

    /// Applies one [`ScaleAction`] to the latest version of its ReplicaSet in `latest`.
    async fn apply_scale(
        &self,
        d: &Deployment,
        latest: &mut HashMap<String, Arc<ReplicaSet>>,
        action: &ScaleAction,
        force: bool,
    ) -> Result<(), SyncError> {
        let Some(rs) = latest.get(&action.name) else {
            return Ok(());
        };
        let (_, updated) = self.scale_replica_set(rs, action.to, d, force).await?;
        latest.insert(action.name.clone(), updated);
        Ok(())
    }

    /// `scaleReplicaSet`: a full Update setting `spec.replicas` to `new_scale` and the
    /// desired/max-replicas annotations, when the size or the annotations need it (or
    /// `force`); records `ScalingReplicaSet` when the size changed. Returns whether it scaled
    /// and the ReplicaSet as written (or as given).
    pub(crate) async fn scale_replica_set(
        &self,
        rs: &Arc<ReplicaSet>,
        new_scale: i32,
        d: &Deployment,
        force: bool,
    ) -> Result<(bool, Arc<ReplicaSet>), SyncError> {
        let old_scale = rs_replicas(rs);
        if !force && old_scale == new_scale {
            return Ok((false, rs.clone()));
        }
        let desired = deployment_replicas(d);
        let max = desired + max_surge(d);
        let size_needs_update = old_scale != new_scale;
        if !size_needs_update && !replicas_annotations_need_update(rs, desired, max) {
            return Ok((false, rs.clone()));
        }
        let mut copy = (**rs).clone();
        copy.spec.get_mut().replicas = Some(new_scale);
        set_replicas_annotations(&mut copy, desired, max);
        let updated = self.update_replica_set(d, &copy).await?;
        if size_needs_update {
            let direction = if old_scale < new_scale { "up" } else { "down" };
            self.event(
                d,
                EventType::Normal,
                SCALING_REPLICA_SET_EVENT,
                &format!(
                    "Scaled {direction} replica set {} from {old_scale} to {new_scale}",
                    updated.metadata.name.as_deref().unwrap_or("")
                ),
            );
        }
        Ok((size_needs_update, Arc::new(updated)))
    }

    /// `cleanupDeployment`: deletes the oldest old ReplicaSets beyond `revisionHistoryLimit`
    /// (lowest revision first), skipping those with replicas, not yet observed by the
    /// ReplicaSet controller, or being deleted (a skipped one still uses its slot).
    pub(crate) async fn cleanup_deployment(
        &self,
        old_rss: &[Arc<ReplicaSet>],
        d: &Deployment,
    ) -> Result<(), SyncError> {
        if !has_revision_history_limit(d) {
            return Ok(());
        }
        let limit = d
            .spec
            .get()
            .and_then(|s| s.revision_history_limit)
            .unwrap_or(0);
        let mut cleanable: Vec<&ReplicaSet> = old_rss
            .iter()
            .map(|rs| &**rs)
            .filter(|rs| rs.metadata.deletion_timestamp.is_none())
            .collect();
        let diff = i64::try_from(cleanable.len()).unwrap_or(i64::MAX) - i64::from(limit);
        if diff <= 0 {
            return Ok(());
        }
        sort_by_revision(&mut cleanable);
        debug!(
            namespace = d.metadata.namespace.as_deref().unwrap_or(""),
            name = d.metadata.name.as_deref().unwrap_or(""),
            "looking to cleanup old replica sets for deployment"
        );
        for rs in cleanable
            .into_iter()
            .take(usize::try_from(diff).unwrap_or(0))
        {
            let status = rs.status.clone().unwrap_or_default();
            if status.replicas != 0
                || rs_replicas(rs) != 0
                || rs.metadata.generation.unwrap_or(0) > status.observed_generation.unwrap_or(0)
                || rs.metadata.deletion_timestamp.is_some()
            {
                continue;
            }
            let namespace = rs.metadata.namespace.clone().unwrap_or_default();
            let name = rs.metadata.name.clone().unwrap_or_default();
            debug!(
                namespace,
                name, "trying to cleanup replica set for deployment"
            );
            match self
                .replica_sets_api(&namespace)
                .delete(&name, &DeleteParams::default())
                .await
            {
                Ok(_) => {}
                Err(err) if err.is_not_found() => {}
                Err(err) => return Err(err.into()),
            }
        }
        Ok(())
    }

    /// `syncDeploymentStatus`: writes the status `calculateStatus` computes, if it changed.
    async fn sync_deployment_status(
        &self,
        all_rss: &[Arc<ReplicaSet>],
        new_rs: Option<&ReplicaSet>,
        d: &mut Deployment,
    ) -> Result<(), SyncError> {
        let new_status = calculate_status(all_rss, new_rs, d, self.now());
        if d.status.clone().unwrap_or_default() == new_status {
            return Ok(());
        }
        d.status = Some(new_status);
        self.update_status(d).await?;
        Ok(())
    }

    /// `syncRolloutStatus`: writes the rollout status if it changed, else says when to look
    /// again for a progress deadline.
    async fn sync_rollout_status(
        &self,
        all_rss: &[Arc<ReplicaSet>],
        new_rs: Option<&ReplicaSet>,
        d: &mut Deployment,
    ) -> Result<SyncOutcome, SyncError> {
        match progress::sync_rollout_status(all_rss, new_rs, d, self.now()) {
            RolloutStatus::Update(status) => {
                d.status = Some(status);
                self.update_status(d).await?;
                Ok(SyncOutcome::DONE)
            }
            RolloutStatus::Unchanged(requeue) => Ok(SyncOutcome { requeue }),
        }
    }
}

/// Whether a failed write may nonetheless have been applied: no answer was read (connection
/// failure, timeout), the answer could not be read, or the server reported a failure that
/// does not rule it out (5xx, among them 504 "may still be processing"). A 4xx answer means
/// the write was refused.
/// ReplicaSets in `namespace` through `client`, in protobuf when a decoder is given.
fn replica_sets_api(
    client: &Client,
    protobuf: Option<Decoder<ReplicaSet>>,
    namespace: &str,
) -> Api<ReplicaSet> {
    let api = Api::namespaced(client.clone(), namespace).without_managed_fields();
    match protobuf {
        Some(decoder) => api.with_protobuf_decoder(decoder).protobuf_bodies(),
        None => api,
    }
}

/// The cached objects of `namespace`, through the store's namespace index (upstream's
/// namespaced lister): a sync reads its own namespace, never the whole cache.
pub(crate) fn in_namespace<K>(store: &Store<K>, namespace: &str) -> Vec<Arc<K>>
where
    K: k8s_openapi::Metadata<Ty = ObjectMeta> + Send + Sync + 'static,
{
    kctrl_informer::lister::list_all_by_namespace(store, namespace, &Selector::everything())
}

/// Adds an index to `store` unless it has one of that name; without it, the lookups that use
/// it fall back to scanning.
fn ensure_index<K>(store: &Store<K>, name: &str, index: IndexFn<K>, what: &str)
where
    K: k8s_openapi::Metadata<Ty: ObjectMetaAccess> + Send + Sync + 'static,
{
    if let Err(err) = store.add_indexers([(name.to_owned(), index)])
        && !matches!(err, kctrl_informer::StoreError::IndexConflict(_))
    {
        debug!(%err, index = name, "adding the index of {what} failed; they will be scanned");
    }
}

/// The index of ReplicaSets by what a claim needs: the UID of the controller, or, for a
/// ReplicaSet without one, `orphans/<namespace>` (a UID never holds a `/`).
pub const CLAIM_CANDIDATES_INDEX: &str = "claim-candidates";

/// The orphan key of `namespace` in [`CLAIM_CANDIDATES_INDEX`].
fn orphans_of(namespace: &str) -> String {
    format!("orphans/{namespace}")
}

/// The index function of [`CLAIM_CANDIDATES_INDEX`].
pub fn claim_candidates_index() -> IndexFn<ReplicaSet> {
    Arc::new(|rs: &ReplicaSet| {
        vec![
            match kctrl_controller_ref::get_controller_of(&rs.metadata) {
                Some(owner) => owner.uid.clone(),
                None => orphans_of(rs.metadata.namespace.as_deref().unwrap_or_default()),
            },
        ]
    })
}

/// The ReplicaSets a claim for `d` can act on: those `d` controls and the orphans of its
/// namespace. Upstream hands the claim every ReplicaSet of the namespace, but a claim never
/// touches one controlled by another object, so the outcome is the same without a scan that
/// grows with the namespace. Falls back to that scan if the store lacks the index.
fn claim_candidates(
    store: &Store<ReplicaSet>,
    d: &Deployment,
    namespace: &str,
) -> Vec<Arc<ReplicaSet>> {
    let uid = d.metadata.uid.as_deref().unwrap_or_default();
    let owned = if uid.is_empty() {
        Ok(Vec::new())
    } else {
        store.by_index(CLAIM_CANDIDATES_INDEX, uid)
    };
    let orphans = store.by_index(CLAIM_CANDIDATES_INDEX, &orphans_of(namespace));
    match (owned, orphans) {
        (Ok(owned), Ok(orphans)) => owned
            .into_iter()
            // A UID names one object; the namespace is checked as a namespaced list would.
            .filter(|rs| rs.metadata.namespace.as_deref().unwrap_or_default() == namespace)
            .chain(orphans)
            .collect(),
        _ => in_namespace(store, namespace),
    }
}

/// The ReplicaSets by name, to apply [`ScaleAction`]s on their latest versions.
fn by_name(rss: &[Arc<ReplicaSet>]) -> HashMap<String, Arc<ReplicaSet>> {
    rss.iter()
        .map(|rs| (rs.metadata.name.clone().unwrap_or_default(), rs.clone()))
        .collect()
}

#[cfg(test)]
#[path = "controller_tests.rs"]
mod tests;

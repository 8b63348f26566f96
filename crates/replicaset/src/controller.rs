//! The sync of one ReplicaSet (upstream's `syncReplicaSet`, `manageReplicas` and
//! `claimPods`), and which ReplicaSets the informer notifications wake (`addPod`,
//! `updatePod`, `deletePod`, `updateRS`, `deleteRS`).
//!
//! Reads come from [`Store`]s: in production the shared informers' caches, in tests stores
//! seeded directly (so the cache can disagree with the API, as in upstream's tests). Writes go
//! through a [`Client`]: Pod creates (POST, from the template, with the ReplicaSet as
//! controller), Pod deletes (DELETE), adoption and release (strategic-merge PATCH, via
//! [`ControllerRefManager`]) and the status (PUT on `/status`). Events go to an
//! [`EventRecorder`].

use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use futures::future::{BoxFuture, join_all};
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::jiff::Timestamp;
use kctrl_client::CompactOwnerReference;
use kctrl_client::clock::{Clock, SystemClock};
use kctrl_client::labels::Selector;
use kctrl_client::versioned::Versioned;
use kctrl_client::{Api, Client, DeleteParams, ObjectMetaAccess, Patch, PatchParams, PostParams};
use kctrl_controller_ref::{CanAdopt, ClaimError, ControllerRefManager, Owner, PodControl};
use kctrl_events::{EventRecorder, EventType, object_reference};
use kctrl_informer::lister::list_all_by_namespace;
use kctrl_informer::{IndexFn, Store, key_of};
use kctrl_runtime::OwnWrites;
use serde_json::Value;
use tracing::{debug, error, info};

use crate::expectations::Expectations;
use crate::metrics::ReplicaSetMetrics;
use crate::pod_view::{
    POD_CONTROLLER_INDEX, PodView, pod_controller_index, pod_controller_index_key,
};
use crate::ranking::{min_next_availability_check, pods_to_delete};
use crate::status::{calculate_status, spec_replicas, update_replica_set_status};

/// The kind the controller manages, as Pods' controller references name it.
pub(crate) const KIND: &str = "ReplicaSet";

/// The apiVersion of the controller references it writes.
pub(crate) const API_VERSION: &str = "apps/v1";

/// How many Pods one sync creates or deletes at most (upstream's `BurstReplicas`, the
/// default of kube-controller-manager).
pub const BURST_REPLICAS: usize = 500;

/// The size of the first batch of creates (upstream's `SlowStartInitialBatchSize`).
pub(crate) const SLOW_START_INITIAL_BATCH_SIZE: usize = 1;

/// Name of the ReplicaSet cache's index by the UID of each ReplicaSet's controller
/// (upstream's `controllerUIDIndex`), to find the ReplicaSets sharing an owner.
pub(crate) const CONTROLLER_UID_INDEX: &str = "controllerUID";

/// Event reasons, as upstream's (`FailedCreatePodReason` and its siblings).
pub(crate) mod reasons {
    /// A Pod could not be created.
    pub(crate) const FAILED_CREATE: &str = "FailedCreate";
    /// A Pod was created.
    pub(crate) const SUCCESSFUL_CREATE: &str = "SuccessfulCreate";
    /// A Pod could not be deleted.
    pub(crate) const FAILED_DELETE: &str = "FailedDelete";
    /// A Pod was deleted.
    pub(crate) const SUCCESSFUL_DELETE: &str = "SuccessfulDelete";
}

/// Why creating or deleting Pods failed; its text is the `ReplicaFailure` condition's message.
/// A client error reads as its last attempt's, without the client's account of its retries.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ManageError {
    /// A create was refused (e.g. by a quota); the text is the API server's.
    #[error("{}", last_attempt(.0))]
    Create(kctrl_client::Error),
    /// The template has no labels: the Pods could never be selected.
    #[error("unable to create pods, no labels")]
    NoLabels,
    /// A delete failed.
    #[error("unable to delete pods: {}", last_attempt(.0))]
    Delete(kctrl_client::Error),
}

/// The error of the last attempt of a request kctrl-client retried, without the client's
/// account of the retries ("(after N attempts)", the previous attempt's error): Events and
/// conditions carry what the API server said, as client-go, which returns the last
/// attempt's error as is, reports it.
pub(crate) fn last_attempt(err: &kctrl_client::Error) -> &kctrl_client::Error {
    match err {
        kctrl_client::Error::Retried { last, .. } => last_attempt(last),
        other => other,
    }
}

/// Why a sync failed; the key is retried rate-limited.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SyncError {
    /// The ReplicaSet's metadata lacks what its Pods are looked up by.
    #[error("{0}")]
    Owner(&'static str),
    /// Adopting or releasing Pods failed.
    #[error(transparent)]
    Claim(#[from] ClaimError<PodView>),
    /// Creating or deleting Pods failed (the status, with its `ReplicaFailure` condition, was
    /// written).
    #[error(transparent)]
    Manage(#[from] ManageError),
    /// Writing the status (or reading the ReplicaSet again to retry it) failed.
    #[error(transparent)]
    Status(#[from] kctrl_client::Error),
}

/// What a successful sync asks for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct SyncOutcome {
    /// Look again after this long: Pods ready but not yet available for `minReadySeconds`.
    pub(crate) requeue_after: Option<Duration>,
}

/// A key to enqueue, now or after a delay.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Enqueue {
    pub(crate) key: String,
    pub(crate) after: Option<Duration>,
}

impl Enqueue {
    fn now(key: String) -> Self {
        Self { key, after: None }
    }
}

/// The ReplicaSet controller's logic: the caches it reads, the client it writes through, its
/// expectations and its record of its own writes.
pub(crate) struct ReplicaSetSync {
    client: Client,
    replica_sets: Store<ReplicaSet>,
    pods: Store<PodView>,
    recorder: Arc<dyn EventRecorder>,
    pub(crate) expectations: Arc<Expectations>,
    own_writes: OwnWrites,
    burst_replicas: usize,
    clock: Arc<dyn Clock>,
    metrics: Option<ReplicaSetMetrics>,
}

impl fmt::Debug for ReplicaSetSync {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReplicaSetSync")
            .field("burst_replicas", &self.burst_replicas)
            .finish_non_exhaustive()
    }
}

/// Adds an index to `store` unless it has one of that name.
fn ensure_index<K>(store: &Store<K>, name: &str, index: IndexFn<K>)
where
    K: k8s_openapi::Metadata<Ty: kctrl_client::ObjectMetaAccess> + Send + Sync + 'static,
{
    if let Err(err) = store.add_indexers([(name.to_owned(), index)])
        && !matches!(err, kctrl_informer::StoreError::IndexConflict(_))
    {
        error!(%err, index = name, "cannot index the cache; lookups scan it instead");
    }
}

/// The index function of [`CONTROLLER_UID_INDEX`].
fn controller_uid_index() -> IndexFn<ReplicaSet> {
    Arc::new(|rs: &ReplicaSet| {
        kctrl_controller_ref::get_controller_of(&rs.metadata)
            .map(|r| vec![r.uid.clone()])
            .unwrap_or_default()
    })
}

fn ns_of(meta: &ObjectMeta) -> &str {
    meta.namespace.as_deref().unwrap_or("")
}

fn name_of(meta: &ObjectMeta) -> &str {
    meta.name.as_deref().unwrap_or("")
}

/// The selector of `rs`, or why it has none.
fn selector_of(rs: &ReplicaSet) -> Result<Selector, kctrl_client::labels::SelectorError> {
    Selector::from_label_selector(
        &rs.spec
            .get()
            .map(|s| s.selector.clone())
            .unwrap_or_default(),
    )
}

/// `getPodsPrefix`: `name-`, or the bare name when that is not a valid generateName.
fn pods_prefix(name: &str) -> String {
    let prefix = format!("{name}-");
    // A generated name adds 5 characters and must be a DNS subdomain of at most 253.
    let valid = prefix.len() <= 253 - 5
        && prefix
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
        && prefix
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
    if valid { prefix } else { name.to_owned() }
}

/// The Pod a ReplicaSet creates (`GetPodFromTemplate`): the template's labels, annotations,
/// finalizers and spec, `generateName` from the ReplicaSet's name, and the controller
/// reference.
pub(crate) fn pod_from_template(rs: &ReplicaSet, controller_ref: OwnerReference) -> Pod {
    let template = rs
        .spec
        .get()
        .and_then(|s| s.template.clone())
        .unwrap_or_default();
    let meta = template.metadata.unwrap_or_default();
    Pod {
        metadata: ObjectMeta {
            labels: meta.labels,
            annotations: meta.annotations,
            finalizers: meta.finalizers,
            generate_name: Some(pods_prefix(name_of(&rs.metadata))),
            owner_references: Some(vec![controller_ref]),
            ..Default::default()
        },
        spec: template.spec,
        status: None,
    }
}

/// The controller reference of `rs` (`metav1.NewControllerRef`).
pub(crate) fn controller_ref(rs: &ReplicaSet) -> OwnerReference {
    Owner::from_meta(&rs.metadata, API_VERSION, KIND).controller_ref()
}

/// Whether the API refused because the namespace is being terminated.
pub(crate) fn is_namespace_terminating(err: &kctrl_client::Error) -> bool {
    err.status()
        .and_then(|s| s.details.as_ref())
        .and_then(|d| d.causes.as_ref())
        .is_some_and(|causes| {
            causes
                .iter()
                .any(|c| c.reason.as_deref() == Some("NamespaceTerminating"))
        })
}

/// Calls `f` `count` times, in batches of 1, 2, 4, ... (starting at `initial`) run
/// concurrently; after a batch with a failure, the remaining calls are skipped. Returns how
/// many calls succeeded and the first error (upstream's `slowStartBatch`).
pub(crate) async fn slow_start_batch<F, Fut, E>(
    count: usize,
    initial: usize,
    f: F,
) -> (usize, Option<E>)
where
    F: Fn() -> Fut,
    Fut: Future<Output = Result<(), E>>,
{
    let mut remaining = count;
    let mut successes = 0;
    let mut batch = remaining.min(initial);
    while batch > 0 {
        let results = join_all((0..batch).map(|_| f())).await;
        let mut errors = results.into_iter().filter_map(Result::err);
        let first = errors.next();
        let failed = usize::from(first.is_some()) + errors.count();
        successes += batch - failed;
        if first.is_some() {
            return (successes, first);
        }
        remaining -= batch;
        batch = (2 * batch).min(remaining);
    }
    (successes, None)
}

/// Adoption and release patches, recorded as this ReplicaSet's own writes when applied.
///
/// A failed patch is not recorded, whatever its outcome (upstream records the Pod writes that
/// succeeded only): one of unknown outcome would take a live read of the Pod to settle, and
/// `get` on Pods is not among the verbs of kube-controller-manager's replicaset-controller
/// role (list, watch, patch, create, delete), so the key would wait for the record to expire.
/// A patch that failed but was applied after all shows up as a Pod update, which enqueues the
/// ReplicaSet.
struct RecordedPodPatches {
    client: Client,
    own_writes: OwnWrites,
    key: String,
}

impl PodControl for RecordedPodPatches {
    fn patch_pod<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
        patch: Value,
    ) -> BoxFuture<'a, Result<(), kctrl_client::Error>> {
        let api = Api::<Pod>::namespaced(self.client.clone(), namespace);
        async move {
            let result = api
                .patch(name, &PatchParams::default(), &Patch::Strategic(patch))
                .await;
            if result.is_ok() {
                let sent = Pod {
                    metadata: ObjectMeta {
                        namespace: Some(namespace.to_owned()),
                        name: Some(name.to_owned()),
                        ..Default::default()
                    },
                    ..Default::default()
                };
                self.own_writes.record_for_key(&self.key, &sent, &result);
            }
            result.map(drop)
        }
        .boxed()
    }
}

impl ReplicaSetSync {
    /// Logic reading `replica_sets` and `pods` and writing through `client`; `own_writes`
    /// receives the writes the caches must show before the next sync of a key.
    pub(crate) fn new(
        client: Client,
        replica_sets: Store<ReplicaSet>,
        pods: Store<PodView>,
        recorder: Arc<dyn EventRecorder>,
        own_writes: OwnWrites,
        burst_replicas: usize,
    ) -> Self {
        ensure_index(&pods, POD_CONTROLLER_INDEX, pod_controller_index());
        ensure_index(&replica_sets, CONTROLLER_UID_INDEX, controller_uid_index());
        Self {
            client,
            replica_sets,
            pods,
            recorder,
            expectations: Arc::new(Expectations::new()),
            own_writes,
            burst_replicas,
            clock: Arc::new(SystemClock),
            metrics: None,
        }
    }

    /// The same, observing `metrics`.
    pub(crate) fn with_metrics(mut self, metrics: Option<ReplicaSetMetrics>) -> Self {
        self.metrics = metrics;
        self
    }

    fn now(&self) -> Timestamp {
        self.clock.now()
    }

    fn event(&self, rs: &ReplicaSet, type_: EventType, reason: &str, message: &str) {
        self.recorder
            .event(&object_reference(rs), type_, reason, message);
    }

    // ---- lookups ----

    /// `resolveControllerRef`: the cached ReplicaSet `controller_ref` names in `namespace`,
    /// if the reference is to a ReplicaSet and the cached one has its UID.
    pub(crate) fn resolve_controller_ref(
        &self,
        namespace: &str,
        controller_ref: &CompactOwnerReference,
    ) -> Option<Arc<ReplicaSet>> {
        if controller_ref.kind() != KIND {
            return None;
        }
        let rs = self
            .replica_sets
            .get_namespaced(namespace, controller_ref.name())?;
        (rs.metadata.uid.as_deref() == Some(controller_ref.uid())).then_some(rs)
    }

    /// `getPodReplicaSets`: the cached ReplicaSets of the Pod's namespace whose selector (valid
    /// and not empty) matches its labels; none for a Pod without labels.
    pub(crate) fn pod_replica_sets(&self, pod: &PodView) -> Vec<Arc<ReplicaSet>> {
        let labels = pod.labels();
        if labels.is_empty() {
            return Vec::new();
        }
        let found: Vec<Arc<ReplicaSet>> =
            list_all_by_namespace(&self.replica_sets, pod.namespace(), &Selector::everything())
                .into_iter()
                .filter(|rs| ns_of(&rs.metadata) == pod.namespace())
                .filter(|rs| {
                    selector_of(rs)
                        .is_ok_and(|s| !s.is_everything() && s.matches_meta(&pod.metadata))
                })
                .collect();
        if found.len() > 1 {
            error!(
                namespace = pod.namespace(),
                pod = pod.name(),
                labels = ?labels,
                "user error! more than one ReplicaSet is selecting pods with labels"
            );
        }
        found
    }

    /// `getReplicaSetsWithSameController`: the cached ReplicaSets whose controller is `rs`'s
    /// (`rs` included); none when `rs` has no controller.
    pub(crate) fn replica_sets_with_same_controller(
        &self,
        rs: &ReplicaSet,
    ) -> Vec<Arc<ReplicaSet>> {
        let Some(controller) = kctrl_controller_ref::get_controller_of(&rs.metadata) else {
            error!(
                namespace = ns_of(&rs.metadata),
                name = name_of(&rs.metadata),
                "ReplicaSet has no controller"
            );
            return Vec::new();
        };
        match self
            .replica_sets
            .by_index(CONTROLLER_UID_INDEX, &controller.uid)
        {
            Ok(found) => found,
            Err(_) => self
                .replica_sets
                .list()
                .into_iter()
                .filter(|other| {
                    kctrl_controller_ref::get_controller_of(&other.metadata)
                        .is_some_and(|r| r.uid == controller.uid)
                })
                .collect(),
        }
    }

    /// `getIndirectlyRelatedPods`: the Pods selected by the ReplicaSets that share `rs`'s
    /// controller, each Pod once.
    pub(crate) fn indirectly_related_pods(&self, rs: &ReplicaSet) -> Vec<Arc<PodView>> {
        let mut seen = HashSet::new();
        let mut related = Vec::new();
        for other in self.replica_sets_with_same_controller(rs) {
            let Ok(selector) = selector_of(&other) else {
                continue;
            };
            for pod in list_all_by_namespace(&self.pods, ns_of(&other.metadata), &selector) {
                if seen.insert(pod.uid().to_owned()) {
                    related.push(pod);
                }
            }
        }
        debug!(
            namespace = ns_of(&rs.metadata),
            name = name_of(&rs.metadata),
            pods = related.len(),
            "found related pods"
        );
        related
    }

    /// `FilterPodsByOwner` with orphans: the cached Pods `rs` controls, and the orphans of
    /// its namespace.
    pub(crate) fn pods_by_owner(&self, rs: &ReplicaSet) -> Result<Vec<Arc<PodView>>, SyncError> {
        let meta = &rs.metadata;
        let (namespace, name, uid) = (
            ns_of(meta),
            name_of(meta),
            meta.uid.as_deref().unwrap_or(""),
        );
        if namespace.is_empty() {
            return Err(SyncError::Owner("no owner namespace provided"));
        }
        if name.is_empty() {
            return Err(SyncError::Owner("no owner name provided"));
        }
        if uid.is_empty() {
            return Err(SyncError::Owner("no owner uid provided"));
        }
        let keys = [
            pod_controller_index_key(namespace, Some((KIND, name, uid))),
            pod_controller_index_key(namespace, None),
        ];
        let mut pods = Vec::new();
        for key in keys {
            match self.pods.by_index(POD_CONTROLLER_INDEX, &key) {
                Ok(found) => pods.extend(found),
                Err(_) => pods.extend(
                    self.pods
                        .list()
                        .into_iter()
                        .filter(|p| pod_controller_index()(p).first() == Some(&key)),
                ),
            }
        }
        Ok(pods)
    }

    // ---- the sync ----

    /// Syncs the ReplicaSet `namespace/name` (upstream's `syncReplicaSet`): claims its Pods,
    /// creates or deletes Pods towards `spec.replicas` when its expectations allow, and
    /// writes its status.
    pub(crate) async fn sync_replica_set(&self, key: &str) -> Result<SyncOutcome, SyncError> {
        let started = tokio::time::Instant::now();
        let result = self.sync_inner(key).await;
        debug!(key, duration = ?started.elapsed(), "finished syncing ReplicaSet");
        result
    }

    async fn sync_inner(&self, key: &str) -> Result<SyncOutcome, SyncError> {
        let Some(rs) = self.replica_sets.get(key) else {
            debug!(key, "ReplicaSet deleted");
            self.expectations.delete(key);
            return Ok(SyncOutcome::default());
        };
        let rs_uid = rs.metadata.uid.as_deref().unwrap_or("");
        let needs_sync = self.expectations.satisfied(key, rs_uid);
        let selector = match selector_of(&rs) {
            Ok(selector) => selector,
            Err(err) => {
                error!(key, %err, "error converting pod selector to selector for ReplicaSet");
                return Ok(SyncOutcome::default());
            }
        };
        let all_pods = self.pods_by_owner(&rs)?;
        let all_active: Vec<Arc<PodView>> =
            all_pods.iter().filter(|p| p.is_active()).cloned().collect();
        let active = self.claim_pods(&rs, key, &selector, &all_active).await?;
        // terminatingReplicas (DeploymentReplicaSetTerminatingReplicas, on by default in 1.37):
        // the Pods being deleted that the ReplicaSet controls and selects.
        let terminating: Vec<Arc<PodView>> = all_pods
            .iter()
            .filter(|p| p.is_terminating())
            .filter(|p| p.controller_ref().is_some_and(|r| r.uid() == rs_uid))
            .filter(|p| selector.matches_meta(&p.metadata))
            .cloned()
            .collect();

        let mut manage_error = None;
        if needs_sync && rs.metadata.deletion_timestamp.is_none() {
            manage_error = self.manage_replicas(&active, &rs, key).await.err();
            // Deleted (or replaced) while this sync ran: its delete handler may have cleared
            // the expectations before manage_replicas set them, and the runtime does not sync
            // a gone key again. Nothing will observe them: drop them.
            let cached_uid = self
                .replica_sets
                .get(key)
                .and_then(|c| c.metadata.uid.clone());
            if cached_uid.as_deref() != Some(rs_uid) {
                debug!(
                    key,
                    "ReplicaSet deleted while syncing; dropping its expectations"
                );
                self.expectations.delete_of(key, rs_uid);
            }
        }
        let now = self.now();
        let status = calculate_status(
            &rs,
            &active,
            Some(&terminating),
            manage_error.as_ref().map(ToString::to_string).as_deref(),
            now,
        );
        // The answer is read for its spec and status only.
        let api = Api::<ReplicaSet>::namespaced(self.client.clone(), ns_of(&rs.metadata))
            .without_managed_fields();
        let name = name_of(&rs.metadata).to_owned();
        let updated = update_replica_set_status(
            &rs,
            status,
            |candidate| {
                let api = api.clone();
                async move {
                    let result = api.update_status(&PostParams::default(), &candidate).await;
                    self.own_writes.record_for_key(key, &candidate, &result);
                    result
                }
            },
            || api.get(&name),
        )
        .await?;
        if let Some(err) = manage_error {
            return Err(err.into());
        }
        let min_ready = updated
            .spec
            .get()
            .and_then(|s| s.min_ready_seconds)
            .unwrap_or(0);
        let st = updated.status.clone().unwrap_or_default();
        let mut requeue_after = None;
        if min_ready > 0 && st.ready_replicas.unwrap_or(0) != st.available_replicas.unwrap_or(0) {
            requeue_after = Some(
                min_next_availability_check(&active, min_ready, now, self.now())
                    .unwrap_or(Duration::from_secs(min_ready as u64)),
            );
        }
        Ok(SyncOutcome { requeue_after })
    }

    /// `claimPods`: adopts the matching orphans (after an uncached read of the ReplicaSet
    /// confirms it is still there, the same object, and not being deleted), releases the Pods
    /// it controls that no longer match, and returns those it controls afterwards.
    async fn claim_pods(
        &self,
        rs: &ReplicaSet,
        key: &str,
        selector: &Selector,
        pods: &[Arc<PodView>],
    ) -> Result<Vec<Arc<PodView>>, ClaimError<PodView>> {
        let owner = Owner::from_meta(&rs.metadata, API_VERSION, KIND);
        let api = Api::<ReplicaSet>::namespaced(self.client.clone(), ns_of(&rs.metadata));
        let control = RecordedPodPatches {
            client: self.client.clone(),
            own_writes: self.own_writes.clone(),
            key: key.to_owned(),
        };
        let manager = ControllerRefManager::new(
            control,
            owner.clone(),
            selector.clone(),
            CanAdopt::recheck_owner(api, &owner),
        );
        manager.claim_pods(pods).await
    }

    /// `manageReplicas`: creates the missing Pods in slow-start batches, or deletes the
    /// surplus chosen by [`pods_to_delete`], at most the burst either way, setting the
    /// expectations first.
    async fn manage_replicas(
        &self,
        active: &[Arc<PodView>],
        rs: &ReplicaSet,
        key: &str,
    ) -> Result<(), ManageError> {
        let wanted = i64::from(spec_replicas(rs));
        let diff = active.len() as i64 - wanted;
        let (namespace, name) = (ns_of(&rs.metadata), name_of(&rs.metadata));
        let uid = rs.metadata.uid.as_deref().unwrap_or("");
        if diff < 0 {
            let count = usize::try_from(-diff)
                .unwrap_or(usize::MAX)
                .min(self.burst_replicas);
            self.expectations.expect_creations(key, uid, count);
            info!(
                namespace,
                name,
                need = wanted,
                creating = count,
                "too few replicas"
            );
            let pod = pod_from_template(rs, controller_ref(rs));
            let (created, err) = slow_start_batch(count, SLOW_START_INITIAL_BATCH_SIZE, || {
                self.create_pod(rs, key, &pod)
            })
            .await;
            let skipped = count - created;
            if skipped > 0 {
                info!(
                    namespace,
                    name,
                    skipped,
                    "slow-start failure. Skipping creation of pods, decrementing expectations"
                );
                for _ in 0..skipped {
                    self.expectations.creation_observed(key, uid);
                }
            }
            return err.map_or(Ok(()), Err);
        }
        if diff > 0 {
            let count = usize::try_from(diff)
                .unwrap_or(usize::MAX)
                .min(self.burst_replicas);
            info!(
                namespace,
                name,
                need = wanted,
                deleting = count,
                "too many replicas"
            );
            let related = self.indirectly_related_pods(rs);
            let (doomed, ratios) = pods_to_delete(active, &related, count, self.now());
            if let Some(m) = &self.metrics {
                for ratio in ratios {
                    m.observe_deletion_age_ratio(ratio);
                }
            }
            // Expected before the deletes are sent, so each counts once, whether seen as an
            // update setting the deletionTimestamp or as the deletion.
            self.expectations
                .expect_deletions(key, uid, doomed.iter().map(|p| p.key()));
            let results = join_all(doomed.iter().map(|pod| self.delete_pod(rs, key, pod))).await;
            return results
                .into_iter()
                .find_map(Result::err)
                .map_or(Ok(()), Err);
        }
        Ok(())
    }

    /// One create (`RealPodControl.CreatePods`); a refusal because the namespace is being
    /// terminated counts as done (every create would fail).
    ///
    /// Only a create that succeeded is recorded as an own write (as upstream records them). A
    /// failed one, even of unknown outcome (a 500 from a failing admission webhook, a
    /// timeout), has only a generateName: no name to find in the cache or to read live, so
    /// its record would hold the key, status updates included, for the whole bound. The
    /// expectations count it as not created (lowered at once); should it have been created
    /// after all, its add event enqueues the ReplicaSet, whose next sync counts it.
    async fn create_pod(&self, rs: &ReplicaSet, key: &str, pod: &Pod) -> Result<(), ManageError> {
        if pod.metadata.labels.as_ref().is_none_or(BTreeMap::is_empty) {
            return Err(ManageError::NoLabels);
        }
        let namespace = ns_of(&rs.metadata);
        // Of the answer only the metadata is read (its name for the event, its version for
        // the own-writes table): the Pod's spec and managedFields are parsed past, not built.
        let api = Api::<Pod>::namespaced(self.client.clone(), namespace).without_managed_fields();
        let mut sent = pod.clone();
        sent.metadata.namespace = Some(namespace.to_owned());
        let result = api.create_metadata(&PostParams::default(), &sent).await;
        if result.is_ok() {
            self.own_writes.record_for_key(key, &sent, &result);
        }
        match result {
            Ok(created) => {
                let pod_name = created.metadata.name().unwrap_or("");
                debug!(
                    namespace,
                    name = name_of(&rs.metadata),
                    pod = pod_name,
                    "controller created pod"
                );
                self.event(
                    rs,
                    EventType::Normal,
                    reasons::SUCCESSFUL_CREATE,
                    &format!("Created pod: {pod_name}"),
                );
                Ok(())
            }
            Err(err) if is_namespace_terminating(&err) => Ok(()),
            Err(err) => {
                self.event(
                    rs,
                    EventType::Warning,
                    reasons::FAILED_CREATE,
                    &format!("Error creating: {}", last_attempt(&err)),
                );
                Err(ManageError::Create(err))
            }
        }
    }

    /// One delete (`RealPodControl.DeletePod`); a failed delete will never be observed, so it
    /// lowers the expectations at once. A Pod already gone is no error.
    async fn delete_pod(
        &self,
        rs: &ReplicaSet,
        key: &str,
        pod: &PodView,
    ) -> Result<(), ManageError> {
        let namespace = ns_of(&rs.metadata);
        // The answer (the Pod being deleted) is not read: its managedFields are not built.
        let api = Api::<Pod>::namespaced(self.client.clone(), namespace).without_managed_fields();
        info!(
            namespace,
            controller = name_of(&rs.metadata),
            pod = pod.name(),
            "deleting pod"
        );
        match api.delete(pod.name(), &DeleteParams::default()).await {
            Ok(_) => {
                self.event(
                    rs,
                    EventType::Normal,
                    reasons::SUCCESSFUL_DELETE,
                    &format!("Deleted pod: {}", pod.name()),
                );
                Ok(())
            }
            Err(err) => {
                let uid = rs.metadata.uid.as_deref().unwrap_or("");
                self.expectations.deletion_observed(key, uid, &pod.key());
                if err.is_not_found() {
                    debug!(namespace, pod = pod.name(), "pod has already been deleted");
                    return Ok(());
                }
                info!(
                    namespace,
                    pod = pod.name(),
                    name = name_of(&rs.metadata),
                    "failed to delete pod, decremented expectations"
                );
                self.event(
                    rs,
                    EventType::Warning,
                    reasons::FAILED_DELETE,
                    &format!("Error deleting: {}", last_attempt(&err)),
                );
                Err(ManageError::Delete(err))
            }
        }
    }

    // ---- informer notifications ----

    /// `updateRS`: a ReplicaSet recreated under the same name (another UID) first clears the
    /// old one's expectations. (Every update enqueues the ReplicaSet, a resync too, so that a
    /// ReplicaSet whose creates failed retries: the runtime's own handler does that.)
    pub(crate) fn on_replica_set_update(&self, old: &ReplicaSet, cur: &ReplicaSet) {
        if old.metadata.uid != cur.metadata.uid {
            self.on_replica_set_delete(old);
        }
        if spec_replicas(old) != spec_replicas(cur) {
            debug!(
                namespace = ns_of(&cur.metadata),
                name = name_of(&cur.metadata),
                old_replicas = spec_replicas(old),
                new_replicas = spec_replicas(cur),
                "ReplicaSet updated. Desired pod count change."
            );
        }
    }

    /// `deleteRS`: the ReplicaSet's expectations go (a new one of that name starts clean),
    /// and its key is synced (which finds it gone).
    pub(crate) fn on_replica_set_delete(&self, rs: &ReplicaSet) -> Vec<Enqueue> {
        let key = key_of(rs);
        debug!(
            namespace = ns_of(&rs.metadata),
            name = name_of(&rs.metadata),
            "deleting ReplicaSet"
        );
        self.expectations.delete(&key);
        vec![Enqueue::now(key)]
    }

    /// `addPod`: a Pod already being deleted counts as a deletion; a controlled Pod is a
    /// creation its (resolvable) ReplicaSet observed; an orphan wakes every ReplicaSet
    /// selecting it, to adopt it.
    pub(crate) fn on_pod_add(&self, pod: &PodView) -> Vec<Enqueue> {
        if pod.metadata.deletion_timestamp().is_some() {
            // A restart may list a Pod already being deleted: not a creation.
            return self.on_pod_delete(pod);
        }
        if let Some(controller) = pod.controller_ref() {
            let Some(rs) = self.resolve_controller_ref(pod.namespace(), controller) else {
                return Vec::new();
            };
            let key = key_of(rs.as_ref());
            debug!(namespace = pod.namespace(), pod = pod.name(), "pod created");
            self.expectations.creation_observed(&key, controller.uid());
            return vec![Enqueue::now(key)];
        }
        let found = self.pod_replica_sets(pod);
        if !found.is_empty() {
            debug!(
                namespace = pod.namespace(),
                pod = pod.name(),
                "orphan pod created"
            );
        }
        found
            .iter()
            .map(|rs| Enqueue::now(key_of(rs.as_ref())))
            .collect()
    }

    /// `updatePod`: nothing for a resync; a Pod marked for deletion counts as deleted (for
    /// its labels now and before); a changed controller reference wakes the old owner; a
    /// controlled Pod wakes its owner (and, when it just became ready under a
    /// `minReadySeconds`, again once that has passed); an orphan whose labels or reference
    /// changed wakes every ReplicaSet selecting it.
    pub(crate) fn on_pod_update(&self, old: &PodView, cur: &PodView) -> Vec<Enqueue> {
        if cur.metadata.resource_version() == old.metadata.resource_version() {
            return Vec::new();
        }
        let labels_changed = cur.metadata.labels() != old.metadata.labels();
        if cur.metadata.deletion_timestamp().is_some() {
            let mut keys = self.on_pod_delete(cur);
            if labels_changed {
                keys.extend(self.on_pod_delete(old));
            }
            return keys;
        }
        let mut keys = Vec::new();
        let (cur_ref, old_ref) = (cur.controller_ref(), old.controller_ref());
        let ref_changed = cur_ref != old_ref;
        if ref_changed
            && let Some(old_ref) = old_ref
            && let Some(rs) = self.resolve_controller_ref(old.namespace(), old_ref)
        {
            keys.push(Enqueue::now(key_of(rs.as_ref())));
        }
        if let Some(cur_ref) = cur_ref {
            let Some(rs) = self.resolve_controller_ref(cur.namespace(), cur_ref) else {
                return keys;
            };
            let key = key_of(rs.as_ref());
            keys.push(Enqueue::now(key.clone()));
            let min_ready = rs.spec.get().and_then(|s| s.min_ready_seconds).unwrap_or(0);
            if !old.is_ready() && cur.is_ready() && min_ready > 0 {
                debug!(
                    namespace = cur.namespace(),
                    pod = cur.name(),
                    min_ready,
                    "pod will be enqueued after a while for availability check"
                );
                keys.push(Enqueue {
                    key,
                    after: Some(Duration::from_secs(min_ready as u64)),
                });
            }
            return keys;
        }
        if labels_changed || ref_changed {
            keys.extend(
                self.pod_replica_sets(cur)
                    .iter()
                    .map(|rs| Enqueue::now(key_of(rs.as_ref()))),
            );
        }
        keys
    }

    /// `deletePod`: the (resolvable) controller of the Pod observed its deletion, and syncs;
    /// an orphan's deletion wakes nobody. Tombstones are handled from their last known state.
    pub(crate) fn on_pod_delete(&self, pod: &PodView) -> Vec<Enqueue> {
        let Some(controller) = pod.controller_ref() else {
            return Vec::new();
        };
        let Some(rs) = self.resolve_controller_ref(pod.namespace(), controller) else {
            return Vec::new();
        };
        let key = key_of(rs.as_ref());
        debug!(namespace = pod.namespace(), pod = pod.name(),
            deletion_timestamp = ?pod.metadata.deletion_timestamp(), "pod deleted");
        self.expectations
            .deletion_observed(&key, controller.uid(), &pod.key());
        vec![Enqueue::now(key)]
    }
}

#[cfg(test)]
#[path = "controller_tests.rs"]
mod tests;

//! Ports of upstream's handler tests (deployment_controller_test.go: the pod-deletion,
//! add/update/delete ReplicaSet scenarios) against the pure enqueue rules, plus the
//! disposition of sync results and a wiring test of the running controller on the fake API.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, ReplicaSetSpec};
use k8s_openapi::api::core::v1::Pod;
use kctrl_client::versioned::Versioned;

use crate::pod_view::PodView;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::SignedDuration;
use kctrl_client::{Api, PostParams};
use kctrl_controller_ref::{Owner, get_controller_of};
use kctrl_fake::FakeApi;
use kctrl_informer::{
    DeletedObject, Delivery, HandlerOptions, SharedInformerFactory, Store, wait_for_cache_sync,
};
use tokio_util::sync::CancellationToken;

use super::*;
use crate::events::RecordingEventRecorder;
use crate::fixtures::{map, new_deployment, pod_from_rs};

fn foo_bar() -> BTreeMap<String, String> {
    map(&[("foo", "bar")])
}

fn deployment(name: &str, selector: BTreeMap<String, String>) -> Deployment {
    new_deployment(name, 1, None, None, None, Some(selector))
}

fn recreate(mut d: Deployment) -> Deployment {
    let strategy = d.spec.get_mut().strategy.as_mut().unwrap();
    strategy.type_ = Some("Recreate".to_owned());
    strategy.rolling_update = None;
    d
}

/// `newReplicaSet(d, name, replicas)`: controlled by `d`, labelled with `d`'s selector.
fn new_replica_set(d: &Deployment, name: &str, replicas: i32) -> ReplicaSet {
    let spec = d.spec.clone().into_value().unwrap();
    ReplicaSet {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some("default".to_owned()),
            uid: Some(format!("uid-{name}")),
            resource_version: Some("1".to_owned()),
            labels: spec.selector.match_labels.clone(),
            owner_references: Some(vec![Owner::of(d).controller_ref()]),
            ..Default::default()
        },
        spec: ReplicaSetSpec {
            replicas: Some(replicas),
            selector: spec.selector.clone(),
            template: Some(spec.template.clone()),
            ..Default::default()
        },
        status: None,
    }
}

fn store_of<K>(objects: &[&K]) -> Store<K>
where
    K: Clone + k8s_openapi::Metadata<Ty = ObjectMeta> + Send + Sync + 'static,
{
    let store = Store::new();
    for o in objects {
        store.insert(Arc::new((*o).clone()));
    }
    store
}

fn set(keys: Vec<String>) -> BTreeSet<String> {
    keys.into_iter().collect()
}

fn keys(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|n| format!("default/{n}")).collect()
}

fn bump(rs: &ReplicaSet, rv: &str) -> ReplicaSet {
    let mut rs = rs.clone();
    rs.metadata.resource_version = Some(rv.to_owned());
    rs
}

/// Two Deployments selecting `foo=bar`, each with a ReplicaSet.
fn two_deployments() -> (Deployment, Deployment, ReplicaSet, ReplicaSet) {
    let d1 = deployment("d1", foo_bar());
    let d2 = deployment("d2", foo_bar());
    let rs1 = new_replica_set(&d1, "rs1", 1);
    let rs2 = new_replica_set(&d2, "rs2", 1);
    (d1, d2, rs1, rs2)
}

#[test]
fn add_replica_set() {
    let (d1, d2, rs1, rs2) = two_deployments();
    let ds = store_of(&[&d1, &d2]);
    assert_eq!(keys_for_replica_set_add(&ds, &rs1), ["default/d1"]);
    assert_eq!(keys_for_replica_set_add(&ds, &rs2), ["default/d2"]);
}

#[test]
fn add_replica_set_orphan() {
    let (d1, d2, _, _) = two_deployments();
    let d3 = deployment("d3", map(&[("foo", "notbar")]));
    let mut rs = new_replica_set(&d1, "rs1", 1);
    rs.metadata.owner_references = None;
    let ds = store_of(&[&d1, &d2, &d3]);
    assert_eq!(set(keys_for_replica_set_add(&ds, &rs)), keys(&["d1", "d2"]));
}

#[test]
fn add_replica_set_being_deleted_is_a_delete() {
    let (d1, d2, rs1, _) = two_deployments();
    let ds = store_of(&[&d1, &d2]);
    let mut orphan = rs1.clone();
    orphan.metadata.owner_references = None;
    orphan.metadata.deletion_timestamp =
        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            "2026-01-01T00:00:00Z".parse().unwrap(),
        ));
    // An orphan being deleted wakes nobody (an orphan add would wake d1 and d2).
    assert!(keys_for_replica_set_add(&ds, &orphan).is_empty());
}

#[test]
fn add_replica_set_with_unresolvable_owner() {
    let (d1, d2, mut rs1, _) = two_deployments();
    // The name resolves, the uid does not: not d1's ReplicaSet after all.
    rs1.metadata.owner_references.as_mut().unwrap()[0].uid = "other".to_owned();
    let ds = store_of(&[&d1, &d2]);
    assert!(keys_for_replica_set_add(&ds, &rs1).is_empty());
}

#[test]
fn update_replica_set() {
    let (d1, d2, rs1, rs2) = two_deployments();
    let ds = store_of(&[&d1, &d2]);
    assert_eq!(
        set(keys_for_replica_set_update(&ds, &rs1, &bump(&rs1, "2"))),
        keys(&["d1"])
    );
    assert_eq!(
        set(keys_for_replica_set_update(&ds, &rs2, &bump(&rs2, "2"))),
        keys(&["d2"])
    );
    // A resync (same resourceVersion) enqueues nothing.
    assert!(keys_for_replica_set_update(&ds, &rs1, &rs1).is_empty());
}

#[test]
fn update_replica_set_orphan_with_new_labels() {
    let (d1, d2, _, _) = two_deployments();
    let ds = store_of(&[&d1, &d2]);
    let mut prev = new_replica_set(&d1, "rs", 1);
    prev.metadata.owner_references = None;
    prev.metadata.labels = Some(map(&[("foo", "notbar")]));
    let mut next = bump(&prev, "2");
    next.metadata.labels = Some(foo_bar());
    assert_eq!(
        set(keys_for_replica_set_update(&ds, &prev, &next)),
        keys(&["d1", "d2"])
    );
    // Unchanged labels on an orphan: nothing.
    assert!(keys_for_replica_set_update(&ds, &next, &bump(&next, "3")).is_empty());
}

#[test]
fn update_replica_set_change_controller_ref() {
    let (d1, d2, _, _) = two_deployments();
    let ds = store_of(&[&d1, &d2]);
    let next = bump(&new_replica_set(&d1, "rs", 1), "2");
    let mut prev = next.clone();
    prev.metadata.resource_version = Some("1".to_owned());
    prev.metadata.owner_references = Some(vec![Owner::of(&d2).controller_ref()]);
    assert_eq!(
        set(keys_for_replica_set_update(&ds, &prev, &next)),
        keys(&["d1", "d2"])
    );
}

#[test]
fn update_replica_set_release() {
    let (d1, d2, _, _) = two_deployments();
    let ds = store_of(&[&d1, &d2]);
    let prev = new_replica_set(&d1, "rs", 1);
    let mut next = bump(&prev, "2");
    next.metadata.owner_references = None;
    assert_eq!(
        set(keys_for_replica_set_update(&ds, &prev, &next)),
        keys(&["d1", "d2"])
    );
}

#[test]
fn delete_replica_set() {
    let (d1, d2, rs1, rs2) = two_deployments();
    let ds = store_of(&[&d1, &d2]);
    let deleted = DeletedObject::Known(Arc::new(rs1.clone()));
    assert_eq!(keys_for_replica_set_delete(&ds, &deleted), ["default/d1"]);
    // A tombstone from a relist is handled alike.
    let tombstone = DeletedObject::FinalStateUnknown {
        key: "default/rs2".to_owned(),
        last_known: Arc::new(rs2),
    };
    assert_eq!(keys_for_replica_set_delete(&ds, &tombstone), ["default/d2"]);
}

#[test]
fn delete_replica_set_orphan() {
    let (d1, d2, mut rs, _) = two_deployments();
    rs.metadata.owner_references = None;
    let ds = store_of(&[&d1, &d2]);
    assert!(keys_for_replica_set_delete(&ds, &DeletedObject::Known(Arc::new(rs))).is_empty());
}

/// The caches the pod-deletion rule reads: `foo` and the given ReplicaSets.
struct PodFixture {
    deployments: Store<Deployment>,
    replica_sets: Store<ReplicaSet>,
}

impl PodFixture {
    fn new(foo: &Deployment, rss: &[&ReplicaSet]) -> Self {
        Self {
            deployments: store_of(&[foo]),
            replica_sets: store_of(rss),
        }
    }

    fn delete_pod(&self, pod: &Pod) -> Option<String> {
        key_for_pod_delete(
            &self.deployments,
            &self.replica_sets,
            &DeletedObject::Known(Arc::new(PodView::from(pod))),
        )
    }
}

/// Upstream's `TestPodDeletionEnqueuesRecreateDeployment` table (v1.37.2): the Recreate
/// Deployment `foo`, its ReplicaSet `foo-1` and that ReplicaSet's Pod, and in one case a
/// sibling Pod, in the fake API behind real informers with [`EnqueueHandlers`] on the Pod
/// informer. Deleting the Pod through the API enqueues `foo` whether or not a Pod is left.
#[tokio::test(start_paused = true)]
async fn pod_deletion_enqueues_recreate_deployment() {
    for (case, other_pods) in [
        ("last pod deleted", false),
        ("pod with siblings deleted", true),
    ] {
        let fake = FakeApi::new();
        let foo = recreate(deployment("foo", foo_bar()));
        let rs = new_replica_set(&foo, "foo-1", 1);
        let pod = pod_from_rs(&rs);
        fake.add(&foo).unwrap();
        fake.add(&rs).unwrap();
        fake.add(&pod).unwrap();
        if other_pods {
            let mut sibling = pod_from_rs(&rs);
            sibling.metadata.name = Some("foo-2".to_owned());
            fake.add(&sibling).unwrap();
        }
        let factory = SharedInformerFactory::new(fake.client(), Duration::ZERO);
        let queue = test_queue();
        let handlers = EnqueueHandlers::new(
            queue.clone(),
            factory.informer::<Deployment>().store().clone(),
            factory.informer::<ReplicaSet>().store().clone(),
        );
        let pods = factory.informer::<PodView>();
        let on_runtime = HandlerOptions {
            delivery: Delivery::Runtime,
            ..HandlerOptions::default()
        };
        let registration = pods
            .add_event_handler_with_options(handlers, on_runtime)
            .unwrap();
        let stop = CancellationToken::new();
        factory.start(&stop);
        assert!(
            wait_for_cache_sync(case, &stop, &[&registration]).await,
            "{case}"
        );
        assert!(
            factory
                .wait_for_cache_sync(&stop)
                .await
                .values()
                .all(|s| *s),
            "{case}"
        );
        assert_eq!(pods.store().len(), if other_pods { 2 } else { 1 }, "{case}");

        Api::<Pod>::namespaced(fake.client(), "default")
            .delete(pod.metadata.name.as_deref().unwrap(), &Default::default())
            .await
            .unwrap();

        let key = tokio::time::timeout(Duration::from_secs(30), queue.get()).await;
        assert_eq!(
            key.ok().flatten().as_deref(),
            Some("default/foo"),
            "{case}: expected foo to be queued after the pod deletion"
        );
        stop.cancel();
        factory.shutdown().await;
    }
}

/// Not upstream: the same deletion for a RollingUpdate Deployment enqueues nothing.
#[test]
fn pod_deletion_of_a_rolling_update_deployment_enqueues_nothing() {
    let foo = deployment("foo", foo_bar());
    let rs = new_replica_set(&foo, "foo-1", 1);
    let f = PodFixture::new(&foo, &[&rs]);
    assert_eq!(f.delete_pod(&pod_from_rs(&rs)), None);
    let foo = recreate(foo);
    let f = PodFixture::new(&foo, &[&rs]);
    assert_eq!(
        f.delete_pod(&pod_from_rs(&rs)).as_deref(),
        Some("default/foo")
    );
}

#[test]
fn pod_deletion_partial_replica_set_ownership_enqueue_recreate_deployment() {
    let foo = recreate(deployment("foo", foo_bar()));
    let rs1 = new_replica_set(&foo, "foo-1", 1);
    let mut rs2 = new_replica_set(&foo, "foo-2", 2);
    rs2.metadata.owner_references = None;
    let pod = pod_from_rs(&rs1);
    let f = PodFixture::new(&foo, &[&rs1, &rs2]);
    assert_eq!(f.delete_pod(&pod).as_deref(), Some("default/foo"));
}

#[test]
fn dispositions() {
    assert_eq!(
        disposition(&Ok(Requeue::Never), 3),
        KeyDisposition::Done(None)
    );
    assert_eq!(
        disposition(&Ok(Requeue::Now), 0),
        KeyDisposition::DoneRequeueRateLimited
    );
    assert_eq!(
        disposition(&Ok(Requeue::After(SignedDuration::from_secs(10))), 0),
        KeyDisposition::Done(Some(Duration::from_secs(11)))
    );
    let err = || Err(SyncError::UnexpectedStrategy("Bogus".to_owned()));
    assert_eq!(disposition(&err(), 0), KeyDisposition::Retry);
    assert_eq!(disposition(&err(), MAX_RETRIES - 1), KeyDisposition::Retry);
    assert_eq!(disposition(&err(), MAX_RETRIES), KeyDisposition::Drop);
}

/// Waits (real clock) until `cond` holds, at most `deadline`.
async fn wait_until(deadline: Duration, mut cond: impl FnMut() -> bool) -> bool {
    tokio::time::timeout(deadline, async {
        while !cond() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .is_ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn running_controller_creates_the_replica_set() {
    let fake = FakeApi::new();
    let factory = SharedInformerFactory::new(fake.client(), Duration::ZERO);
    let recorder = Arc::new(RecordingEventRecorder::new());
    let runner = Arc::new(
        DeploymentControllerRunner::new(fake.client(), &factory, recorder.clone()).unwrap(),
    );
    let cancel = CancellationToken::new();
    let run = tokio::spawn({
        let (runner, cancel) = (runner.clone(), cancel.clone());
        async move { runner.run(2, &cancel).await }
    });

    let mut web = deployment("web", map(&[("app", "web")]));
    web.metadata.uid = None;
    web.spec.get_mut().replicas = Some(3);
    let created = Api::<Deployment>::namespaced(fake.client(), "default")
        .create(&PostParams::default(), &web)
        .await
        .unwrap();
    let uid = created.metadata.uid.clone().unwrap();

    let owned_rs = || {
        fake.objects::<ReplicaSet>().into_iter().find(|rs| {
            get_controller_of(&rs.metadata).is_some_and(|r| r.uid == uid)
                && rs.spec.get().and_then(|s| s.replicas) == Some(3)
        })
    };
    assert!(
        wait_until(Duration::from_secs(20), || owned_rs().is_some()).await,
        "no ReplicaSet of 3 replicas owned by web; actions: {:?}",
        fake.actions()
            .iter()
            .map(|a| format!("{} {}", a.verb(), a.resource().plural))
            .collect::<Vec<_>>()
    );
    // The status tells of the new ReplicaSet too (observedGeneration caught up).
    assert!(
        wait_until(Duration::from_secs(20), || {
            fake.object::<Deployment>(Some("default"), "web")
                .and_then(|d| d.status)
                .and_then(|s| s.observed_generation)
                == Some(1)
        })
        .await
    );
    assert!(
        recorder
            .strings()
            .iter()
            .any(|e| e.starts_with("Normal ScalingReplicaSet")),
        "{:?}",
        recorder.strings()
    );

    cancel.cancel();
    tokio::time::timeout(Duration::from_secs(20), run)
        .await
        .expect("run returns after cancel")
        .unwrap()
        .unwrap();
    assert!(runner.queue().shutting_down());
    factory.shutdown().await;
}

fn test_queue() -> RateLimitingQueue<String> {
    RateLimitingQueue::with_config(
        default_controller_rate_limiter(),
        QueueConfig::new().name("test"),
    )
}

async fn panicking_sync(_: String, _: String) -> Result<Requeue, SyncError> {
    panic!("a sync that panics on purpose")
}

async fn failing_sync(_: String, _: String) -> Result<Requeue, SyncError> {
    Err(SyncError::UnexpectedStrategy("Bogus".to_owned()))
}

// A panicking sync is filed as a failing one: rate-limited retries, each counted, and the
// key dropped once MAX_RETRIES retries have failed.
#[tokio::test(start_paused = true)]
async fn a_panicking_sync_counts_toward_the_retry_limit_like_an_error() {
    let key = "default/web".to_owned();
    let panics = test_queue();
    let errors = test_queue();
    for attempt in 1..=MAX_RETRIES {
        assert!(!process_key_with(&panics, &key, None, panicking_sync).await);
        assert!(!process_key_with(&errors, &key, None, failing_sync).await);
        assert_eq!(panics.num_requeues(&key), attempt);
        assert_eq!(errors.num_requeues(&key), attempt);
    }
    assert!(!process_key_with(&panics, &key, None, panicking_sync).await);
    assert!(!process_key_with(&errors, &key, None, failing_sync).await);
    assert_eq!(errors.num_requeues(&key), 0, "an error is dropped");
    assert_eq!(panics.num_requeues(&key), 0, "a panic is dropped alike");
}

// SIGTERM semantics of run(): no new keys are taken once `cancel` fires (a key still queued
// is not synced), the sync in flight finishes, and the informers keep the caches current
// until it has.
#[tokio::test(flavor = "multi_thread", worker_threads = 3)]
async fn cancel_stops_taking_keys_and_keeps_informers_until_in_flight_syncs_end() {
    use std::sync::Mutex;
    use std::sync::mpsc;

    let fake = FakeApi::new();
    let (entered_tx, entered_rx) = mpsc::channel::<String>();
    let (gate_tx, gate_rx) = mpsc::channel::<()>();
    let gate_rx = Mutex::new(gate_rx);
    let entered_tx = Mutex::new(entered_tx);
    // The first ReplicaSet creation (web's sync) blocks until the gate opens.
    fake.prepend_reactor("create", "replicasets", move |a| {
        let owner = a
            .object_as::<ReplicaSet>()
            .and_then(|rs| get_controller_of(&rs.metadata).map(|r| r.name.clone()))
            .unwrap_or_default();
        let _ = entered_tx.lock().unwrap().send(owner.clone());
        if owner == "web" {
            let _ = gate_rx
                .lock()
                .unwrap()
                .recv_timeout(Duration::from_secs(30));
        }
        kctrl_fake::Reaction::Continue
    });
    let factory = SharedInformerFactory::new(fake.client(), Duration::ZERO);
    let recorder = Arc::new(RecordingEventRecorder::new());
    let runner = Arc::new(
        DeploymentControllerRunner::new(fake.client(), &factory, recorder.clone()).unwrap(),
    );
    let pods = factory.informer::<Pod>().store().clone();
    let cancel = CancellationToken::new();
    let run = tokio::spawn({
        let (runner, cancel) = (runner.clone(), cancel.clone());
        async move { runner.run(1, &cancel).await }
    });
    let api = Api::<Deployment>::namespaced(fake.client(), "default");
    let mut web = deployment("web", map(&[("app", "web")]));
    web.metadata.uid = None;
    api.create(&PostParams::default(), &web).await.unwrap();
    let entered = tokio::task::spawn_blocking(move || {
        let first = entered_rx.recv_timeout(Duration::from_secs(20));
        (first, entered_rx)
    })
    .await
    .unwrap();
    let (first, entered_rx) = entered;
    assert_eq!(first.as_deref(), Ok("web"), "web's sync never started");

    // web's sync is in flight; "other" waits in the queue behind it (one worker).
    let mut other = deployment("other", map(&[("app", "other")]));
    other.metadata.uid = None;
    api.create(&PostParams::default(), &other).await.unwrap();
    assert!(wait_until(Duration::from_secs(20), || runner.queue().len() == 1).await);
    cancel.cancel();

    // The informers still run under the sync in flight: a new Pod reaches the cache.
    let pod = Pod {
        metadata: ObjectMeta {
            name: Some("late".to_owned()),
            namespace: Some("default".to_owned()),
            ..Default::default()
        },
        ..Default::default()
    };
    Api::<Pod>::namespaced(fake.client(), "default")
        .create(&PostParams::default(), &pod)
        .await
        .unwrap();
    assert!(
        wait_until(Duration::from_secs(20), || pods
            .get_namespaced("default", "late")
            .is_some())
        .await,
        "the Pod cache froze while a sync was in flight"
    );
    assert!(!run.is_finished(), "run returned before its sync finished");

    gate_tx.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(20), run)
        .await
        .expect("run returns once the sync in flight ends")
        .unwrap()
        .unwrap();
    factory.shutdown().await;
    // web's ReplicaSet was written; "other" was never synced.
    assert!(
        fake.objects::<ReplicaSet>()
            .iter()
            .any(|rs| { get_controller_of(&rs.metadata).is_some_and(|r| r.name == "web") })
    );
    let later: Vec<String> = entered_rx.try_iter().collect();
    assert!(later.iter().all(|owner| owner != "other"), "{later:?}");
    assert!(
        !fake
            .objects::<ReplicaSet>()
            .iter()
            .any(|rs| { get_controller_of(&rs.metadata).is_some_and(|r| r.name == "other") }),
        "a queued key was synced after cancel"
    );
}

//! Ports of upstream's `replica_set_test.go` and `replica_set_utils_test.go`, on the in-memory
//! fake API. The caches are seeded directly, so they can disagree with the API as in
//! upstream's tests; upstream's `FakePodControl` counts become counts of the fake's actions.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use k8s_openapi::api::apps::v1::{ReplicaSet, ReplicaSetCondition, ReplicaSetSpec, ReplicaSetStatus};
use k8s_openapi::api::core::v1::{Container, PodCondition, PodSpec, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference, Time};
use k8s_openapi::jiff::Timestamp;
use kctrl_events::RecordingEventRecorder;
use kctrl_fake::{FakeApi, Reaction, errors};
use kctrl_informer::Store;
use kctrl_runtime::OwnWrites;

use super::*;
use crate::pod_view::{PodViewSpec, PodViewStatus};
use crate::ranking::pods_to_delete;
use crate::status::{
    REPLICA_FAILURE, calculate_status, get_condition, remove_condition, set_condition,
};

static NEXT_UID: AtomicUsize = AtomicUsize::new(1);

fn uid() -> String {
    format!("uid-{}", NEXT_UID.fetch_add(1, Ordering::Relaxed))
}

fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

fn owner_ref(uid: &str, kind: &str, name: &str) -> OwnerReference {
    OwnerReference {
        uid: uid.to_owned(),
        api_version: "apps/v1".to_owned(),
        kind: kind.to_owned(),
        name: name.to_owned(),
        controller: Some(true),
        ..Default::default()
    }
}

/// `newReplicaSet(replicas, selectorMap)`: `default/foobar`, controlled by uid `123`.
fn new_replica_set(replicas: i32, selector: BTreeMap<String, String>) -> ReplicaSet {
    ReplicaSet {
        metadata: ObjectMeta {
            uid: Some(uid()),
            name: Some("foobar".into()),
            namespace: Some("default".into()),
            owner_references: Some(vec![OwnerReference {
                uid: "123".into(),
                controller: Some(true),
                ..Default::default()
            }]),
            resource_version: Some("18".into()),
            ..Default::default()
        },
        spec: ReplicaSetSpec {
            replicas: Some(replicas),
            selector: LabelSelector {
                match_labels: Some(selector),
                ..Default::default()
            },
            template: Some(PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(map(&[("name", "foo"), ("type", "production")])),
                    ..Default::default()
                }),
                spec: Some(PodSpec {
                    containers: vec![Container {
                        name: "foo".into(),
                        image: Some("foo/bar".into()),
                        ..Default::default()
                    }],
                    restart_policy: Some("Always".into()),
                    dns_policy: Some("Default".into()),
                    node_selector: Some(map(&[("baz", "blah")])),
                    ..Default::default()
                }),
            }),
            ..Default::default()
        },
        status: None,
    }
}

fn ready(status: &str, since: Option<Timestamp>) -> PodCondition {
    PodCondition {
        type_: "Ready".into(),
        status: status.into(),
        last_transition_time: since.map(Time),
        ..Default::default()
    }
}

/// `newPod(name, rs, phase, lastTransitionTime, properlyOwned)`: a Running Pod is Ready.
fn new_pod(
    name: &str,
    rs: &ReplicaSet,
    phase: &str,
    last_transition: Option<Timestamp>,
    properly_owned: bool,
) -> PodView {
    let conditions = if phase == "Running" {
        vec![ready("True", last_transition)]
    } else {
        Vec::new()
    };
    let owner = if properly_owned {
        owner_ref(
            rs.metadata.uid.as_deref().unwrap(),
            "ReplicaSet",
            rs.metadata.name.as_deref().unwrap(),
        )
    } else {
        OwnerReference::default()
    };
    PodView {
        metadata: ObjectMeta {
            uid: Some(uid()),
            name: Some(name.into()),
            namespace: rs.metadata.namespace.clone(),
            labels: rs.spec.selector.match_labels.clone(),
            owner_references: Some(vec![owner]),
            ..Default::default()
        },
        spec: None,
        status: Some(PodViewStatus {
            phase: Some(phase.into()),
            conditions,
            ..Default::default()
        }),
    }
}

/// `newPodList(store, count, phase, labels, rs, name)`: controlled by `rs`.
fn new_pod_list(
    store: Option<&Store<PodView>>,
    count: usize,
    phase: &str,
    labels: &BTreeMap<String, String>,
    rs: &ReplicaSet,
    name: &str,
) -> Vec<PodView> {
    (0..count)
        .map(|i| {
            let mut pod = new_pod(&format!("{name}{i}"), rs, phase, None, false);
            pod.metadata.labels = Some(labels.clone());
            pod.metadata.owner_references = Some(vec![owner_ref(
                rs.metadata.uid.as_deref().unwrap(),
                "ReplicaSet",
                rs.metadata.name.as_deref().unwrap(),
            )]);
            if let Some(store) = store {
                store.insert(Arc::new(pod.clone()));
            }
            pod
        })
        .collect()
}

fn key(rs: &ReplicaSet) -> String {
    key_of(rs)
}

/// The controller under test, its caches and the fake API behind its client.
struct Harness {
    fake: FakeApi,
    rss: Store<ReplicaSet>,
    pods: Store<PodView>,
    recorder: Arc<RecordingEventRecorder>,
    sync: ReplicaSetSync,
    /// Creates refused by [`Harness::create_limit`] (upstream's FakePodControl does not count
    /// them as creates).
    over_limit: Arc<AtomicUsize>,
}

impl Harness {
    /// `testNewReplicaSetControllerFromClient` with the given burst. Status writes are
    /// accepted as sent (as upstream's fake server does), unless a test says otherwise.
    fn new(burst: usize) -> Self {
        let fake = FakeApi::new();
        let rss = Store::new();
        let pods = Store::new();
        let recorder = Arc::new(RecordingEventRecorder::new());
        let sync = ReplicaSetSync::new(
            fake.client(),
            rss.clone(),
            pods.clone(),
            recorder.clone(),
            OwnWrites::new(),
            burst,
        );
        Self {
            fake,
            rss,
            pods,
            recorder,
            sync,
            over_limit: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// Pod creates past the first `limit` fail (upstream's `CreateLimit`).
    fn create_limit(&self, limit: usize) {
        let calls = AtomicUsize::new(0);
        let over = self.over_limit.clone();
        self.fake.prepend_reactor("create", "pods", move |_| {
            let n = calls.fetch_add(1, Ordering::SeqCst) + 1;
            if n > limit {
                over.fetch_add(1, Ordering::SeqCst);
                Reaction::Error(errors::internal_error(&format!(
                    "not creating pod, limit {limit} already reached (create call {n})"
                )))
            } else {
                Reaction::Continue
            }
        });
    }

    /// Every Pod create, delete and patch fails (upstream's FakePodControl `Err`).
    fn fail_pod_writes(&self) {
        for verb in ["create", "delete", "patch"] {
            self.fake.prepend_reactor(verb, "pods", |_| {
                Reaction::Error(errors::internal_error("fake Error"))
            });
        }
    }

    fn accept_status_writes(&self) {
        self.fake.prepend_reactor("update", "replicasets", |a| {
            if a.subresource() == Some("status") {
                Reaction::Respond(a.object().unwrap())
            } else {
                Reaction::Continue
            }
        });
    }

    /// Pod deletes succeed whether or not the fake holds the Pod (the caches are seeded
    /// directly, as upstream's FakePodControl deletes anything).
    fn accept_pod_deletes(&self) {
        self.fake.prepend_reactor("delete", "pods", |_| {
            Reaction::Respond(serde_json::json!({
                "apiVersion": "v1", "kind": "Status", "status": "Success"
            }))
        });
    }

    fn add_rs(&self, rs: &ReplicaSet) {
        self.rss.insert(Arc::new(rs.clone()));
    }

    fn add_pod(&self, pod: &PodView) {
        self.pods.insert(Arc::new(pod.clone()));
    }

    fn count(&self, verb: &str, resource: &str, subresource: Option<&str>) -> usize {
        self.fake
            .actions()
            .iter()
            .filter(|a| a.matches(verb, resource) && a.subresource() == subresource)
            .count()
    }

    /// `validateSyncReplicaSet`: creates, deletes and patches of Pods, since the last clear.
    fn pod_writes(&self) -> (usize, usize, usize) {
        let created = self
            .fake
            .actions()
            .iter()
            .filter(|a| a.matches("create", "pods"))
            .count()
            - self.over_limit.load(Ordering::Relaxed);
        (
            created,
            self.count("delete", "pods", None),
            self.count("patch", "pods", None),
        )
    }

    fn clear(&self) {
        self.fake.clear_actions();
        self.over_limit.store(0, Ordering::Relaxed);
    }
}

fn foo_bar() -> BTreeMap<String, String> {
    map(&[("foo", "bar")])
}

#[tokio::test]
async fn test_sync_replica_set_does_nothing() {
    let h = Harness::new(BURST_REPLICAS);
    // 2 running pods, a controller with 2 replicas: the sync is a no-op.
    let rs = new_replica_set(2, foo_bar());
    h.add_rs(&rs);
    new_pod_list(Some(&h.pods), 2, "Running", &foo_bar(), &rs, "pod");
    let _ = h.sync.sync_replica_set(&key(&rs)).await;
    assert_eq!(h.pod_writes(), (0, 0, 0));
}

#[tokio::test]
async fn test_delete_final_state_unknown() {
    let h = Harness::new(BURST_REPLICAS);
    let rs = new_replica_set(1, foo_bar());
    h.add_rs(&rs);
    let pods = new_pod_list(None, 1, "Running", &foo_bar(), &rs, "pod");
    // A tombstone's last known state wakes the ReplicaSet controlling it.
    let tombstone = kctrl_informer::DeletedObject::FinalStateUnknown {
        key: "foo".into(),
        last_known: Arc::new(pods[0].clone()),
    };
    assert_eq!(
        h.sync.on_pod_delete(tombstone.object()),
        vec![Enqueue::now(key(&rs))]
    );
}

/// Told to create 100 replicas under a limit of 10 creates (like a quota), the sync does not
/// make 100 create calls.
#[tokio::test]
async fn test_sync_replica_set_create_failures() {
    let h = Harness::new(BURST_REPLICAS);
    let limit = 10;
    h.create_limit(limit);
    let rs = new_replica_set(limit as i32 * 10, foo_bar());
    h.add_rs(&rs);
    let _ = h.sync.sync_replica_set(&key(&rs)).await;
    assert_eq!(h.pod_writes(), (limit, 0, 0));
    let mut expected_limit = 0;
    let mut pass = 0;
    while expected_limit <= limit {
        expected_limit += SLOW_START_INITIAL_BATCH_SIZE << pass;
        pass += 1;
    }
    let calls = h.count("create", "pods", None);
    assert!(calls <= expected_limit, "{calls} create calls, expected <= {expected_limit}");
    // The refusals are reported as upstream's are.
    let events = h.recorder.strings();
    assert!(events.iter().any(|e| e.starts_with("Warning FailedCreate Error creating: ")));
    assert_eq!(
        events.iter().filter(|e| e.starts_with("Normal SuccessfulCreate Created pod: foobar-")).count(),
        limit
    );
}

#[tokio::test]
async fn test_sync_replica_set_dormancy() {
    let h = Harness::new(BURST_REPLICAS);
    h.accept_status_writes();
    let mut rs = new_replica_set(2, foo_bar());
    new_pod_list(Some(&h.pods), 1, "Running", &foo_bar(), &rs, "pod");
    let status_puts = || h.count("update", "replicasets", Some("status"));

    // Creates a replica and sets expectations.
    rs.status = Some(ReplicaSetStatus {
        replicas: 1,
        ready_replicas: Some(1),
        available_replicas: Some(1),
        terminating_replicas: Some(0),
        ..Default::default()
    });
    h.add_rs(&rs);
    let _ = h.sync.sync_replica_set(&key(&rs)).await;
    assert_eq!(h.pod_writes(), (1, 0, 0));

    // Expectations prevent replicas but not an update of the status.
    rs.status = Some(ReplicaSetStatus {
        terminating_replicas: Some(0),
        ..Default::default()
    });
    h.add_rs(&rs);
    let puts = status_puts();
    h.clear();
    let _ = h.sync.sync_replica_set(&key(&rs)).await;
    assert_eq!(h.pod_writes(), (0, 0, 0));
    let puts = puts + status_puts();

    // Lowering the expectations leads to a sync that creates a replica, but the create
    // fails, which leaves the expectations at 0, 0.
    h.sync.expectations.creation_observed(&key(&rs));
    rs.status = Some(ReplicaSetStatus {
        replicas: 1,
        ready_replicas: Some(1),
        available_replicas: Some(1),
        terminating_replicas: Some(0),
        ..Default::default()
    });
    h.add_rs(&rs);
    h.clear();
    h.fail_pod_writes();
    let _ = h.sync.sync_replica_set(&key(&rs)).await;
    assert_eq!(h.pod_writes(), (1, 0, 0));
    let puts = puts + status_puts();

    // This replica needs no lowering of the expectations, since the previous create failed.
    h.fake.clear_reactors();
    h.accept_status_writes();
    h.clear();
    let _ = h.sync.sync_replica_set(&key(&rs)).await;
    assert_eq!(h.pod_writes(), (1, 0, 0));
    let puts = puts + status_puts();

    // 2 PUTs of the status during the dormancy window.
    assert_eq!(puts, 2);
}

#[tokio::test]
async fn test_get_replica_sets_with_same_controller() {
    let h = Harness::new(BURST_REPLICAS);
    let named = |name: &str, selector: &str, owner: Option<&str>| {
        let mut rs = new_replica_set(1, map(&[("foo", selector)]));
        rs.metadata.name = Some(name.into());
        if let Some(owner) = owner {
            rs.metadata.owner_references.as_mut().unwrap()[0].uid = owner.into();
        }
        rs
    };
    let some = named("rs1", "bar", None);
    let related = named("rs2", "baz", None);
    let unrelated = named("rs3", "quux", Some("456"));
    let mut pending_deletion = named("rs4", "xyzzy", Some("789"));
    pending_deletion.metadata.deletion_timestamp = Some(Time(Timestamp::now()));
    let cases: [(&str, Vec<&ReplicaSet>, &ReplicaSet, Vec<&str>); 3] = [
        (
            "expect to get back a ReplicaSet that is pending deletion",
            vec![&pending_deletion, &unrelated],
            &pending_deletion,
            vec!["rs4"],
        ),
        (
            "expect to get back only the given ReplicaSet if there is no related ReplicaSet",
            vec![&some, &unrelated],
            &some,
            vec!["rs1"],
        ),
        (
            "expect to get back the given ReplicaSet as well as any related ReplicaSet but not an unrelated ReplicaSet",
            vec![&some, &related, &unrelated],
            &some,
            vec!["rs1", "rs2"],
        ),
    ];
    for (name, rss, rs, expected) in cases {
        for r in rss {
            h.add_rs(r);
        }
        let mut got: Vec<String> = h
            .sync
            .replica_sets_with_same_controller(rs)
            .iter()
            .map(|r| r.metadata.name.clone().unwrap())
            .collect();
        got.sort();
        assert_eq!(got, expected, "{name}");
    }
}

#[tokio::test]
async fn test_pod_controller_lookup() {
    let h = Harness::new(BURST_REPLICAS);
    let rs = |name: &str, ns: Option<&str>, selector: Option<BTreeMap<String, String>>| ReplicaSet {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: ns.map(str::to_owned),
            ..Default::default()
        },
        spec: ReplicaSetSpec {
            selector: LabelSelector {
                match_labels: selector,
                ..Default::default()
            },
            ..Default::default()
        },
        status: None,
    };
    let pod = |name: &str, ns: &str, labels: Option<BTreeMap<String, String>>| PodView {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(ns.into()),
            labels,
            ..Default::default()
        },
        ..Default::default()
    };
    let cases = [
        // Pods without labels match no ReplicaSet.
        (vec![rs("basic", None, None)], pod("foo1", "", None), ""),
        // Matching labels, not namespace.
        (vec![rs("foo", None, Some(foo_bar()))], pod("foo2", "ns", Some(foo_bar())), ""),
        // Matching namespace and labels: the ReplicaSet.
        (vec![rs("bar", Some("ns"), Some(foo_bar()))], pod("foo3", "ns", Some(foo_bar())), "bar"),
    ];
    for (rss, pod, want) in cases {
        for r in &rss {
            h.add_rs(r);
        }
        let found = h.sync.pod_replica_sets(&pod);
        if want.is_empty() {
            assert!(found.is_empty(), "{}: {found:?}", pod.name());
        } else {
            assert_eq!(found.len(), 1, "{}", pod.name());
            assert_eq!(found[0].metadata.name.as_deref(), Some(want));
        }
    }
}

#[tokio::test]
async fn test_related_pods_lookup() {
    let named = |name: &str, selector: &str, owner: Option<&str>| {
        let mut rs = new_replica_set(1, map(&[("foo", selector)]));
        rs.metadata.name = Some(name.into());
        if let Some(owner) = owner {
            rs.metadata.owner_references.as_mut().unwrap()[0].uid = owner.into();
        }
        rs
    };
    let some = named("foo1", "bar", None);
    let related = named("foo2", "baz", None);
    let unrelated = named("bar1", "quux", Some("456"));
    let mut pending_deletion = named("foo3", "xyzzy", Some("789"));
    pending_deletion.metadata.deletion_timestamp = Some(Time(Timestamp::now()));
    let pod1 = new_pod("pod1", &some, "Running", None, true);
    let pod2 = new_pod("pod2", &some, "Running", None, true);
    let pod3 = new_pod("pod3", &related, "Running", None, true);
    let pod4 = new_pod("pod4", &unrelated, "Running", None, true);
    let pending_pod = new_pod("pod", &pending_deletion, "Running", None, true);
    let h = Harness::new(BURST_REPLICAS);
    let cases: [(&str, Vec<&ReplicaSet>, Vec<&PodView>, &ReplicaSet, Vec<&str>); 3] = [
        (
            "expect to get a pod even if its owning ReplicaSet is pending deletion",
            vec![&pending_deletion, &unrelated],
            vec![&pending_pod],
            &pending_deletion,
            vec!["pod"],
        ),
        (
            "expect to get only the ReplicaSet's own pods if there is no related ReplicaSet",
            vec![&some, &unrelated],
            vec![&pod1, &pod2, &pod4],
            &some,
            vec!["pod1", "pod2"],
        ),
        (
            "expect to get own pods as well as any related ReplicaSet's but not an unrelated ReplicaSet's",
            vec![&some, &related, &unrelated],
            vec![&pod1, &pod2, &pod3, &pod4],
            &some,
            vec!["pod1", "pod2", "pod3"],
        ),
    ];
    for (name, rss, pods, rs, expected) in cases {
        for r in rss {
            h.add_rs(r);
        }
        for pod in pods {
            h.add_pod(pod);
            h.sync.on_pod_add(pod);
        }
        let mut got: Vec<String> = h
            .sync
            .indirectly_related_pods(rs)
            .iter()
            .map(|p| p.name().to_owned())
            .collect();
        got.sort();
        assert_eq!(got, expected, "{name}");
    }
}

#[tokio::test]
async fn test_update_pods() {
    let h = Harness::new(BURST_REPLICAS);
    let labels1 = foo_bar();
    let rs1 = new_replica_set(1, labels1.clone());
    h.add_rs(&rs1);
    let labels2 = map(&[("bar", "foo")]);
    let mut rs2 = rs1.clone();
    rs2.spec.selector.match_labels = Some(labels2.clone());
    rs2.metadata.name = Some("barfoo".into());
    h.add_rs(&rs2);
    let ref1 = owner_ref(rs1.metadata.uid.as_deref().unwrap(), "ReplicaSet", "foobar");
    let ref2 = owner_ref(rs2.metadata.uid.as_deref().unwrap(), "ReplicaSet", "barfoo");
    let names = |keys: Vec<Enqueue>| {
        let mut names: Vec<String> = keys.into_iter().map(|e| e.key).collect();
        names.sort();
        names.dedup();
        names
    };
    let base = || {
        let mut pod = new_pod_list(Some(&h.pods), 1, "Running", &labels1, &rs1, "pod").remove(0);
        pod.metadata.resource_version = Some("1".into());
        pod
    };

    // Case 1: a Pod with a controller reference; its labels change: its owner syncs.
    let mut pod1 = base();
    pod1.metadata.owner_references = Some(vec![ref1.clone()]);
    let mut pod2 = pod1.clone();
    pod2.metadata.labels = Some(labels2.clone());
    pod2.metadata.resource_version = Some("2".into());
    assert_eq!(names(h.sync.on_pod_update(&pod1, &pod2)), ["default/foobar"]);

    // Case 2: the controller reference goes (an orphan): the ReplicaSet matching its labels
    // syncs (the old owner is rs2, which the labels match too).
    let mut pod1 = base();
    pod1.metadata.labels = Some(labels2.clone());
    pod1.metadata.owner_references = Some(vec![ref2.clone()]);
    let mut pod2 = pod1.clone();
    pod2.metadata.owner_references = None;
    pod2.metadata.resource_version = Some("2".into());
    assert_eq!(names(h.sync.on_pod_update(&pod1, &pod2)), ["default/barfoo"]);

    // Case 3: the controller reference goes: the former owner and the ReplicaSet matching
    // its labels sync.
    let mut pod1 = base();
    pod1.metadata.labels = Some(labels2.clone());
    pod1.metadata.owner_references = Some(vec![ref1.clone()]);
    let mut pod2 = pod1.clone();
    pod2.metadata.owner_references = None;
    pod2.metadata.resource_version = Some("2".into());
    assert_eq!(
        names(h.sync.on_pod_update(&pod1, &pod2)),
        ["default/barfoo", "default/foobar"]
    );

    // Case 4: the controller reference stays, the labels change: the owner syncs.
    let mut pod1 = base();
    pod1.metadata.owner_references = Some(vec![ref2.clone()]);
    let mut pod2 = pod1.clone();
    pod2.metadata.labels = Some(labels2.clone());
    pod2.metadata.resource_version = Some("2".into());
    assert_eq!(names(h.sync.on_pod_update(&pod1, &pod2)), ["default/barfoo"]);

    // A resync (same resourceVersion) wakes nobody.
    assert!(h.sync.on_pod_update(&pod1, &pod1).is_empty());
}

/// A failed status write fails the sync, so the runtime requeues the key rate-limited.
#[tokio::test]
async fn test_controller_update_requeue() {
    let h = Harness::new(BURST_REPLICAS);
    let mut rs = new_replica_set(1, foo_bar());
    h.fake.prepend_reactor("update", "replicasets", |a| {
        if a.subresource() == Some("status") {
            Reaction::Error(errors::internal_error("failed to update status"))
        } else {
            Reaction::Continue
        }
    });
    h.fake.prepend_reactor("get", "replicasets", |a| {
        Reaction::Respond(serde_json::json!({
            "apiVersion": "apps/v1", "kind": "ReplicaSet",
            "metadata": {"name": a.name().unwrap(), "namespace": "default", "resourceVersion": "19"},
            "spec": {"selector": {}}
        }))
    });
    rs.status = Some(ReplicaSetStatus {
        replicas: 2,
        ..Default::default()
    });
    h.add_rs(&rs);
    new_pod_list(Some(&h.pods), 1, "Running", &foo_bar(), &rs, "pod");
    let err = h.sync.sync_replica_set(&key(&rs)).await.unwrap_err();
    assert!(matches!(err, SyncError::Status(_)), "{err}");
    assert!(err.to_string().contains("failed to update status"), "{err}");
}

#[tokio::test]
async fn test_controller_update_status_with_failure() {
    let rs = new_replica_set(1, foo_bar());
    let gets = AtomicUsize::new(0);
    let updates = std::sync::Mutex::new(Vec::new());
    let new = ReplicaSetStatus {
        replicas: 10,
        ..Default::default()
    };
    let result = crate::status::update_replica_set_status(
        &rs,
        new,
        |candidate| {
            updates.lock().unwrap().push(candidate.status.clone().unwrap().replicas);
            async { Err(kctrl_fake::errors::internal_error("fake error")) }
        },
        || {
            gets.fetch_add(1, Ordering::SeqCst);
            let rs = rs.clone();
            async move { Ok(rs) }
        },
    )
    .await;
    assert!(result.is_err(), "expected an update error");
    // One get, two updates: both with the new replicas even though the get returned 1.
    assert_eq!(gets.load(Ordering::SeqCst), 1);
    assert_eq!(*updates.lock().unwrap(), [10, 10]);
}

/// Sizes the ReplicaSet up to `num_replicas`, then down to 0, `burst` at a time: each sync
/// creates or deletes at most the burst, and waits until the informer has reported all of
/// them (the expectations).
async fn do_test_controller_burst_replicas(burst: usize, num_replicas: usize) {
    let h = Harness::new(burst);
    h.accept_status_writes();
    h.accept_pod_deletes();
    let mut rs = new_replica_set(num_replicas as i32, foo_bar());
    let rs_key = key(&rs);
    let mut pods = new_pod_list(None, num_replicas, "Pending", &foo_bar(), &rs, "pod");
    for replicas in [num_replicas, 0] {
        rs.spec.replicas = Some(replicas as i32);
        h.add_rs(&rs);
        let mut i = 0;
        while i < num_replicas {
            h.clear();
            let _ = h.sync.sync_replica_set(&rs_key).await;
            let active = h.pods.len();
            let expected;
            if replicas != 0 {
                // The Pods in flight, created by the sync, which now waits for them all.
                expected = (replicas - active).min(burst);
                assert_eq!(h.pod_writes(), (expected, 0, 0));
                // Watch events for all but one of them: none wakes the controller.
                for pod in &pods[..expected - 1] {
                    h.add_pod(pod);
                    h.sync.on_pod_add(pod);
                }
                let exp = h.sync.expectations.get(&rs_key).expect("expectations for rs");
                assert_eq!(exp.add, 1, "{exp:?}");
            } else {
                expected = (active - replicas).min(burst);
                assert_eq!(h.pod_writes(), (0, expected, 0));
                // Delete exactly the Pods the ReplicaSet waits for, all but one, to check
                // that the last one is expected exactly once.
                let mut doomed: Vec<String> = h
                    .sync
                    .expectations
                    .deletion_keys(&rs_key)
                    .unwrap()
                    .into_iter()
                    .collect();
                doomed.sort();
                for pod_key in &doomed[1..] {
                    let pod = h.pods.get(pod_key).unwrap();
                    h.pods.remove(pod_key);
                    h.sync.on_pod_delete(&pod);
                }
                let exp = h.sync.expectations.get(&rs_key).unwrap();
                assert_eq!(exp.del, 1, "{exp:?}");
            }

            // The ReplicaSet takes no action meanwhile.
            h.clear();
            let _ = h.sync.sync_replica_set(&rs_key).await;
            assert_eq!(h.pod_writes(), (0, 0, 0));

            // The last add or delete lowers the expectations to 0.
            if replicas != 0 {
                let last = &pods[expected - 1];
                h.add_pod(last);
                h.sync.on_pod_add(last);
            } else {
                let left = h.sync.expectations.deletion_keys(&rs_key).unwrap();
                assert_eq!(left.len(), 1, "waiting on unexpected number of deletes");
                let pod_key = left.into_iter().next().unwrap();
                let pod = h.pods.get(&pod_key).unwrap();
                h.pods.remove(&pod_key);
                h.sync.on_pod_delete(&pod);
            }
            pods.drain(..expected);
            i += burst;
        }
        // The right number of replicas.
        assert_eq!(h.pods.len(), replicas, "active pods");
        pods = new_pod_list(None, replicas, "Running", &foo_bar(), &rs, "pod");
    }
}

#[tokio::test]
async fn test_controller_burst_replicas() {
    do_test_controller_burst_replicas(5, 30).await;
    do_test_controller_burst_replicas(5, 12).await;
    do_test_controller_burst_replicas(3, 2).await;
}

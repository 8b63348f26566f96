//! Ports of upstream's `replica_set_test.go` and `replica_set_utils_test.go`, on the in-memory
//! fake API. The caches are seeded directly, so they can disagree with the API as in
//! upstream's tests; upstream's `FakePodControl` counts become counts of the fake's actions.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use k8s_openapi::api::apps::v1::{
    ReplicaSet, ReplicaSetCondition, ReplicaSetSpec, ReplicaSetStatus,
};
use k8s_openapi::api::core::v1::{Container, PodSpec, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    LabelSelector, ObjectMeta, OwnerReference, Time,
};
use k8s_openapi::jiff::Timestamp;
use kctrl_client::CompactObjectMeta;
use kctrl_events::RecordingEventRecorder;
use kctrl_fake::{FakeApi, Reaction, errors};
use kctrl_informer::Store;
use kctrl_runtime::OwnWrites;

use super::*;
use crate::pod_view::{PodConditionView, PodViewSpec, PodViewStatus};
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

fn ready(status: &str, since: Option<Timestamp>) -> PodConditionView {
    PodConditionView {
        type_: "Ready".into(),
        status: status.into(),
        last_transition_time: since.map(Time),
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
        metadata: CompactObjectMeta::from(&ObjectMeta {
            uid: Some(uid()),
            name: Some(name.into()),
            namespace: rs.metadata.namespace.clone(),
            labels: rs.spec.selector.match_labels.clone(),
            owner_references: Some(vec![owner]),
            ..Default::default()
        }),
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
            pod.metadata.edit(|m| m.labels = Some(labels.clone()));
            pod.metadata.edit(|m| {
                m.owner_references = Some(vec![owner_ref(
                    rs.metadata.uid.as_deref().unwrap(),
                    "ReplicaSet",
                    rs.metadata.name.as_deref().unwrap(),
                )]);
            });
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
    /// The record of the sync's own writes (tracking nothing unless built with
    /// [`Harness::tracking_own_writes`]).
    own_writes: OwnWrites,
    /// Creates refused by [`Harness::create_limit`] (upstream's FakePodControl does not count
    /// them as creates).
    over_limit: Arc<AtomicUsize>,
}

impl Harness {
    /// `testNewReplicaSetControllerFromClient` with the given burst. Status writes are
    /// accepted as sent (as upstream's fake server does), unless a test says otherwise.
    fn new(burst: usize) -> Self {
        Self::build(burst, false)
    }

    /// The same, its own writes compared with the Pod and ReplicaSet caches as the running
    /// controller's are, so that what a sync records can be checked.
    fn tracking_own_writes(burst: usize) -> Self {
        Self::build(burst, true)
    }

    fn build(burst: usize, track: bool) -> Self {
        let fake = FakeApi::new();
        let rss = Store::new();
        let pods = Store::new();
        let recorder = Arc::new(RecordingEventRecorder::new());
        let own_writes = OwnWrites::new();
        if track {
            let client = fake.client();
            own_writes.track(pods.clone(), move |ns| {
                Api::<PodView>::namespaced(client.clone(), ns)
            });
            let client = fake.client();
            own_writes.track(rss.clone(), move |ns| {
                Api::<ReplicaSet>::namespaced(client.clone(), ns)
            });
        }
        let sync = ReplicaSetSync::new(
            fake.client(),
            rss.clone(),
            pods.clone(),
            recorder.clone(),
            own_writes.clone(),
            burst,
        );
        Self {
            fake,
            rss,
            pods,
            recorder,
            sync,
            own_writes,
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
    assert!(
        calls <= expected_limit,
        "{calls} create calls, expected <= {expected_limit}"
    );
    // The refusals are reported as upstream's are.
    let events = h.recorder.strings();
    assert!(
        events
            .iter()
            .any(|e| e.starts_with("Warning FailedCreate Error creating: "))
    );
    assert_eq!(
        events
            .iter()
            .filter(|e| e.starts_with("Normal SuccessfulCreate Created pod: foobar-"))
            .count(),
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
    h.sync
        .expectations
        .creation_observed(&key(&rs), rs.metadata.uid.as_deref().unwrap());
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
    let rs =
        |name: &str, ns: Option<&str>, selector: Option<BTreeMap<String, String>>| ReplicaSet {
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
        metadata: CompactObjectMeta::from(&ObjectMeta {
            name: Some(name.into()),
            namespace: Some(ns.into()),
            labels,
            ..Default::default()
        }),
        ..Default::default()
    };
    let cases = [
        // Pods without labels match no ReplicaSet.
        (vec![rs("basic", None, None)], pod("foo1", "", None), ""),
        // Matching labels, not namespace.
        (
            vec![rs("foo", None, Some(foo_bar()))],
            pod("foo2", "ns", Some(foo_bar())),
            "",
        ),
        // Matching namespace and labels: the ReplicaSet.
        (
            vec![rs("bar", Some("ns"), Some(foo_bar()))],
            pod("foo3", "ns", Some(foo_bar())),
            "bar",
        ),
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
    /// (name, ReplicaSets in the cache, Pods in the cache, the ReplicaSet, expected Pods)
    type Case<'a> = (
        &'a str,
        Vec<&'a ReplicaSet>,
        Vec<&'a PodView>,
        &'a ReplicaSet,
        Vec<&'a str>,
    );
    let cases: [Case<'_>; 3] = [
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
        pod.metadata.edit(|m| m.resource_version = Some("1".into()));
        pod
    };

    // Case 1: a Pod with a controller reference; its labels change: its owner syncs.
    let mut pod1 = base();
    pod1.metadata
        .edit(|m| m.owner_references = Some(vec![ref1.clone()]));
    let mut pod2 = pod1.clone();
    pod2.metadata.edit(|m| m.labels = Some(labels2.clone()));
    pod2.metadata
        .edit(|m| m.resource_version = Some("2".into()));
    assert_eq!(
        names(h.sync.on_pod_update(&pod1, &pod2)),
        ["default/foobar"]
    );

    // Case 2: the controller reference goes (an orphan): the ReplicaSet matching its labels
    // syncs (the old owner is rs2, which the labels match too).
    let mut pod1 = base();
    pod1.metadata.edit(|m| m.labels = Some(labels2.clone()));
    pod1.metadata
        .edit(|m| m.owner_references = Some(vec![ref2.clone()]));
    let mut pod2 = pod1.clone();
    pod2.metadata.edit(|m| m.owner_references = None);
    pod2.metadata
        .edit(|m| m.resource_version = Some("2".into()));
    assert_eq!(
        names(h.sync.on_pod_update(&pod1, &pod2)),
        ["default/barfoo"]
    );

    // Case 3: the controller reference goes: the former owner and the ReplicaSet matching
    // its labels sync.
    let mut pod1 = base();
    pod1.metadata.edit(|m| m.labels = Some(labels2.clone()));
    pod1.metadata
        .edit(|m| m.owner_references = Some(vec![ref1.clone()]));
    let mut pod2 = pod1.clone();
    pod2.metadata.edit(|m| m.owner_references = None);
    pod2.metadata
        .edit(|m| m.resource_version = Some("2".into()));
    assert_eq!(
        names(h.sync.on_pod_update(&pod1, &pod2)),
        ["default/barfoo", "default/foobar"]
    );

    // Case 4: the controller reference stays, the labels change: the owner syncs.
    let mut pod1 = base();
    pod1.metadata
        .edit(|m| m.owner_references = Some(vec![ref2.clone()]));
    let mut pod2 = pod1.clone();
    pod2.metadata.edit(|m| m.labels = Some(labels2.clone()));
    pod2.metadata
        .edit(|m| m.resource_version = Some("2".into()));
    assert_eq!(
        names(h.sync.on_pod_update(&pod1, &pod2)),
        ["default/barfoo"]
    );

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
            updates
                .lock()
                .unwrap()
                .push(candidate.status.clone().unwrap().replicas);
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
                let exp = h
                    .sync
                    .expectations
                    .get(&rs_key)
                    .expect("expectations for rs");
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

/// The expectations are checked before the Pods are listed, so a Pod added in between is
/// counted (upstream injects the Pod from inside the expectations check; here the order of
/// the two reads in the sync is what the test pins down: a Pod in the cache when the
/// expectations are found satisfied is seen by the same sync).
#[tokio::test]
async fn test_rs_sync_expectations() {
    let h = Harness::new(2);
    h.accept_status_writes();
    let rs = new_replica_set(2, foo_bar());
    h.add_rs(&rs);
    let pods = new_pod_list(None, 2, "Pending", &foo_bar(), &rs, "pod");
    h.add_pod(&pods[0]);
    // Expectations satisfied by the very Pod the sync then finds.
    h.sync
        .expectations
        .expect_creations(&key(&rs), rs.metadata.uid.as_deref().unwrap(), 1);
    h.add_pod(&pods[1]);
    h.sync.on_pod_add(&pods[1]);
    let _ = h.sync.sync_replica_set(&key(&rs)).await;
    assert_eq!(h.pod_writes(), (0, 0, 0));
}

#[tokio::test]
async fn test_delete_controller_and_expectations() {
    let h = Harness::new(10);
    h.accept_status_writes();
    let rs = new_replica_set(1, foo_bar());
    h.add_rs(&rs);
    let rs_key = key(&rs);
    // Sets expectations for the ReplicaSet.
    let _ = h.sync.sync_replica_set(&rs_key).await;
    assert_eq!(h.pod_writes(), (1, 0, 0));
    h.clear();
    assert!(
        h.sync.expectations.get(&rs_key).is_some(),
        "no expectations found"
    );

    h.rss.remove(&rs_key);
    h.sync.on_replica_set_delete(&rs);
    let _ = h.sync.sync_replica_set(&rs_key).await;
    assert!(
        h.sync.expectations.get(&rs_key).is_none(),
        "expectations of a deleted ReplicaSet"
    );
    // A concurrent add lowering them now has no effect, since the ReplicaSet is gone.
    h.sync
        .expectations
        .creation_observed(&rs_key, rs.metadata.uid.as_deref().unwrap());
    h.pods.replace(Vec::new(), "0".into());
    let _ = h.sync.sync_replica_set(&rs_key).await;
    assert_eq!(h.pod_writes(), (0, 0, 0));
}

/// A ReplicaSet deleted and created again under the same name starts with fresh
/// expectations: the delete clears them, the recreation (another UID) clears what the old one
/// left, and the new one's first sync sets its own.
#[tokio::test]
async fn test_expectations_on_recreate() {
    let h = Harness::new(100);
    h.accept_status_writes();
    let old = new_replica_set(1, foo_bar());
    let rs_key = key(&old);
    h.add_rs(&old);
    let _ = h.sync.sync_replica_set(&rs_key).await;
    assert_eq!(h.pod_writes(), (1, 0, 0));
    h.clear();
    let exp = h.sync.expectations.get(&rs_key).expect("expectations");
    assert!(
        !exp.fulfilled(),
        "expectations fulfilled before the Pod was seen"
    );

    h.rss.remove(&rs_key);
    h.sync.on_replica_set_delete(&old);
    assert!(
        h.sync.expectations.get(&rs_key).is_none(),
        "expectations left after the delete"
    );

    let mut new = old.clone();
    new.metadata.uid = Some(uid());
    assert_ne!(new.metadata.uid, old.metadata.uid);
    // Seen as an update with another UID (the informer missed the deletion).
    h.sync
        .expectations
        .expect_creations(&rs_key, old.metadata.uid.as_deref().unwrap(), 1);
    h.sync.on_replica_set_update(&old, &new);
    assert!(
        h.sync.expectations.get(&rs_key).is_none(),
        "old expectations kept"
    );
    h.add_rs(&new);
    let _ = h.sync.sync_replica_set(&rs_key).await;
    let exp = h
        .sync
        .expectations
        .get(&rs_key)
        .expect("expectations of the new ReplicaSet");
    assert!(!exp.fulfilled());
    assert_eq!(h.pod_writes(), (1, 0, 0));
}

/// A ReplicaSet deleted while its sync is in flight (after the sync read it from the cache,
/// before it set its expectations), then created again under the same name: the old sync
/// raises its expectations after the delete handler cleared them, and the runtime never
/// syncs the gone key again to drop them. They must not hold the new ReplicaSet back: its
/// first sync creates its Pods at once.
#[tokio::test]
async fn test_expectations_of_a_replica_set_deleted_mid_sync() {
    let old = new_replica_set(2, foo_bar());
    let h = setup_manager_with_gc_enabled(&old);
    let old = h.rss.get(&key(&old)).unwrap();
    let rs_key = key(&old);
    // An orphan to adopt: the ReplicaSet is deleted while the adoption patch is in flight.
    let mut orphan = new_pod("orphan", &old, "Running", None, false);
    orphan.metadata.edit(|m| m.owner_references = None);
    h.add_pod(&orphan);
    let (rss, expectations, deleted) = (h.rss.clone(), h.sync.expectations.clone(), old.clone());
    h.fake.prepend_reactor("patch", "pods", move |_| {
        // What the informer does with the deletion: the cache drops the ReplicaSet, then the
        // delete handler runs (`on_replica_set_delete`: the expectations of the key go).
        rss.remove(&key(&deleted));
        expectations.delete(&key(&deleted));
        // The orphan is not in the fake API: the adoption finds it gone and skips it.
        Reaction::Continue
    });
    let _ = h.sync.sync_replica_set(&rs_key).await;
    assert_eq!(h.pod_writes(), (2, 0, 1), "the old sync's creates");
    assert!(h.rss.get(&rs_key).is_none());
    assert!(
        h.sync.expectations.get(&rs_key).is_none(),
        "the gone ReplicaSet's expectations are kept"
    );
    h.clear();

    // Created again under the same name (another UID), first seen as an add.
    let mut new = (*old).clone();
    new.metadata.uid = Some(uid());
    h.add_rs(&new);
    h.pods.replace(Vec::new(), "0".into());
    let _ = h.sync.sync_replica_set(&rs_key).await;
    assert_eq!(
        h.pod_writes(),
        (2, 0, 0),
        "the new ReplicaSet was held back by the old one's expectations"
    );
}

/// An API server with the DeploymentReplicaSetTerminatingReplicas gate off drops
/// `status.terminatingReplicas`: the cached status never has it. A sync whose status differs
/// only by that field writes nothing (else every sync would PUT the same status again).
#[tokio::test]
async fn test_no_status_write_for_a_dropped_terminating_replicas() {
    let h = Harness::new(BURST_REPLICAS);
    h.accept_status_writes();
    let mut rs = new_replica_set(2, foo_bar());
    rs.metadata.generation = Some(3);
    rs.status = Some(ReplicaSetStatus {
        replicas: 2,
        ready_replicas: Some(2),
        available_replicas: Some(2),
        observed_generation: Some(3),
        terminating_replicas: None,
        ..Default::default()
    });
    h.add_rs(&rs);
    new_pod_list(Some(&h.pods), 2, "Running", &foo_bar(), &rs, "pod");
    h.sync.sync_replica_set(&key(&rs)).await.unwrap();
    assert_eq!(h.pod_writes(), (0, 0, 0));
    assert_eq!(h.count("update", "replicasets", Some("status")), 0);

    // A real change is written, terminatingReplicas with it.
    let mut terminating = new_pod_list(None, 1, "Running", &foo_bar(), &rs, "gone").remove(0);
    terminating
        .metadata
        .edit(|m| m.deletion_timestamp = Some(Time(Timestamp::now())));
    h.add_pod(&terminating);
    rs.spec.replicas = Some(3);
    rs.metadata.generation = Some(4);
    h.add_rs(&rs);
    h.sync.sync_replica_set(&key(&rs)).await.unwrap();
    let written: Vec<ReplicaSet> = h
        .fake
        .actions()
        .iter()
        .filter(|a| a.matches("update", "replicasets"))
        .filter_map(|a| a.object_as())
        .collect();
    assert_eq!(written.len(), 1);
    assert_eq!(
        written[0].status.as_ref().unwrap().terminating_replicas,
        Some(1)
    );
}

/// The client's error after it retried (`Retried`: "MSG (after N attempts) - error from a
/// previous attempt: ..."). client-go hands back the last attempt's error as is.
fn retried(last: kctrl_client::Error) -> kctrl_client::Error {
    kctrl_client::Error::Retried {
        attempts: 3,
        last: Box::new(last),
        previous: Some(Box::new(errors::too_many_requests(1))),
    }
}

/// FailedCreate and FailedDelete events and the ReplicaFailure condition carry the API
/// server's message as client-go reports it, without the client's retry account.
#[tokio::test]
async fn test_failure_messages_are_the_api_errors_own() {
    let denied = "admission webhook \"pods.example.com\" denied the request";
    let failure_message = |h: &Harness| {
        let updates: Vec<ReplicaSet> = h
            .fake
            .actions()
            .iter()
            .filter(|a| a.matches("update", "replicasets"))
            .filter_map(|a| a.object_as())
            .collect();
        let status = updates.last().expect("a status update").status.clone();
        get_condition(&status.unwrap(), REPLICA_FAILURE)
            .and_then(|c| c.message.clone())
            .unwrap_or_default()
    };

    let h = Harness::new(BURST_REPLICAS);
    h.accept_status_writes();
    h.fake.prepend_reactor("create", "pods", move |_| {
        Reaction::Error(retried(errors::internal_error(denied)))
    });
    let rs = new_replica_set(1, foo_bar());
    h.add_rs(&rs);
    let err = h.sync.sync_replica_set(&key(&rs)).await.unwrap_err();
    let message = format!("Internal error occurred: {denied}");
    assert_eq!(err.to_string(), message);
    assert_eq!(
        h.recorder.strings(),
        vec![format!("Warning FailedCreate Error creating: {message}")]
    );
    assert_eq!(failure_message(&h), message);

    let h = Harness::new(BURST_REPLICAS);
    h.accept_status_writes();
    h.fake.prepend_reactor("delete", "pods", move |_| {
        Reaction::Error(retried(errors::internal_error("etcd is sad")))
    });
    let rs = new_replica_set(0, foo_bar());
    h.add_rs(&rs);
    new_pod_list(Some(&h.pods), 1, "Running", &foo_bar(), &rs, "pod");
    let err = h.sync.sync_replica_set(&key(&rs)).await.unwrap_err();
    let message = "Internal error occurred: etcd is sad";
    assert_eq!(err.to_string(), format!("unable to delete pods: {message}"));
    assert_eq!(
        h.recorder.strings(),
        vec![format!("Warning FailedDelete Error deleting: {message}")]
    );
    assert_eq!(
        failure_message(&h),
        format!("unable to delete pods: {message}")
    );
}

#[tokio::test]
async fn test_overlapping_rss() {
    let h = Harness::new(10);
    let created = Time("2014-11-30T00:00:00Z".parse().unwrap());
    let controllers: Vec<ReplicaSet> = (1..10)
        .map(|j| {
            let mut rs = new_replica_set(1, foo_bar());
            rs.metadata.creation_timestamp = Some(created.clone());
            rs.metadata.name = Some(format!("rs{j}"));
            rs
        })
        .collect();
    // Added in another order than created.
    for j in [4, 0, 8, 2, 6, 1, 7, 3, 5] {
        h.add_rs(&controllers[j]);
    }
    let rs = &controllers[3];
    let mut pod = new_pod_list(None, 1, "Pending", &foo_bar(), rs, "pod").remove(0);
    pod.metadata.edit(|m| {
        m.owner_references = Some(vec![owner_ref(
            rs.metadata.uid.as_deref().unwrap(),
            "ReplicaSet",
            rs.metadata.name.as_deref().unwrap(),
        )]);
    });
    // Only the controller of the Pod hears of it, though all nine select it.
    assert_eq!(h.sync.on_pod_add(&pod), vec![Enqueue::now(key(rs))]);
}

#[tokio::test]
async fn test_deletion_timestamp() {
    let h = Harness::new(10);
    let rs = new_replica_set(1, foo_bar());
    h.add_rs(&rs);
    let rs_key = key(&rs);
    let mut pod = new_pod_list(None, 1, "Pending", &foo_bar(), &rs, "pod").remove(0);
    pod.metadata
        .edit(|m| m.deletion_timestamp = Some(Time(Timestamp::now())));
    pod.metadata.edit(|m| m.resource_version = Some("1".into()));
    h.sync
        .expectations
        .expect_deletions(&rs_key, rs.metadata.uid.as_deref().unwrap(), [pod.key()]);

    // A Pod added with a deletion timestamp counts as deleted.
    assert_eq!(h.sync.on_pod_add(&pod), vec![Enqueue::now(rs_key.clone())]);
    assert!(h.sync.expectations.get(&rs_key).unwrap().fulfilled());

    // An update setting the deletion timestamp counts as a deletion.
    let mut old_pod = new_pod_list(None, 1, "Pending", &foo_bar(), &rs, "pod").remove(0);
    old_pod
        .metadata
        .edit(|m| m.resource_version = Some("2".into()));
    h.sync
        .expectations
        .expect_deletions(&rs_key, rs.metadata.uid.as_deref().unwrap(), [pod.key()]);
    assert_eq!(
        h.sync.on_pod_update(&old_pod, &pod),
        vec![Enqueue::now(rs_key.clone())]
    );
    assert!(h.sync.expectations.get(&rs_key).unwrap().fulfilled());

    // An update of a Pod already being deleted, not expected, leaves the expectations of
    // another Pod alone.
    let second = PodView {
        metadata: CompactObjectMeta::from(&ObjectMeta {
            namespace: Some(pod.namespace().to_owned()),
            name: Some("secondPod".into()),
            labels: pod.labels().to_btree_map(),
            owner_references: Some(vec![owner_ref(
                rs.metadata.uid.as_deref().unwrap(),
                "ReplicaSet",
                "foobar",
            )]),
            ..Default::default()
        }),
        ..Default::default()
    };
    h.sync.expectations.expect_deletions(
        &rs_key,
        rs.metadata.uid.as_deref().unwrap(),
        [second.key()],
    );
    old_pod
        .metadata
        .edit(|m| m.deletion_timestamp = Some(Time(Timestamp::now())));
    old_pod
        .metadata
        .edit(|m| m.resource_version = Some("2".into()));
    let _ = h.sync.on_pod_update(&old_pod, &pod);
    assert!(!h.sync.expectations.get(&rs_key).unwrap().fulfilled());

    // A deletion of a Pod not waited for changes nothing either.
    let _ = h.sync.on_pod_delete(&pod);
    assert!(!h.sync.expectations.get(&rs_key).unwrap().fulfilled());

    // The deletion of the Pod waited for fulfils them.
    assert_eq!(
        h.sync.on_pod_delete(&second),
        vec![Enqueue::now(rs_key.clone())]
    );
    assert!(h.sync.expectations.get(&rs_key).unwrap().fulfilled());
}

/// `setupManagerWithGCEnabled`: the ReplicaSet in the fake API (for the owner recheck of
/// adoptions) and in the cache.
fn setup_manager_with_gc_enabled(rs: &ReplicaSet) -> Harness {
    setup_manager_with_gc_enabled_in(Harness::new(BURST_REPLICAS), rs)
}

fn setup_manager_with_gc_enabled_in(h: Harness, rs: &ReplicaSet) -> Harness {
    h.accept_status_writes();
    let stored = h.fake.add(rs).unwrap();
    // The cache holds the object as the API does (same UID).
    let mut cached = rs.clone();
    cached.metadata.uid = stored.metadata.uid.clone();
    h.add_rs(&cached);
    h
}

#[tokio::test]
async fn test_do_not_patch_pod_with_other_control_ref() {
    let rs = new_replica_set(2, foo_bar());
    let h = setup_manager_with_gc_enabled(&rs);
    let rs = h.rss.get(&key(&rs)).unwrap();
    let mut pod = new_pod("pod", &rs, "Running", None, true);
    pod.metadata
        .edit(|m| m.owner_references = Some(vec![owner_ref(&uid(), "ReplicaSet", "AnotherRS")]));
    h.add_pod(&pod);
    h.sync.sync_replica_set(&key(&rs)).await.unwrap();
    // The Pod of another controller is neither adopted nor counted: two creates.
    assert_eq!(h.pod_writes(), (2, 0, 0));
}

#[tokio::test]
async fn test_patch_pod_fails() {
    let rs = new_replica_set(2, foo_bar());
    let h = setup_manager_with_gc_enabled(&rs);
    let rs = h.rss.get(&key(&rs)).unwrap();
    h.add_pod(&new_pod("pod1", &rs, "Running", None, false));
    h.add_pod(&new_pod("pod2", &rs, "Running", None, false));
    h.fail_pod_writes();
    // Both adoptions are attempted and fail; the sync fails (the runtime retries the key
    // rate-limited).
    let err = h.sync.sync_replica_set(&key(&rs)).await.unwrap_err();
    assert!(err.to_string().contains("fake Error"), "{err}");
    assert_eq!(h.pod_writes(), (0, 0, 2));
}

/// A Pod create that fails, even with an unknown outcome (a 500 from a failing admission
/// webhook, a timeout), is not recorded as an own write: sent with only a generateName, it
/// has no name to find in the cache, and its record would hold the key (status updates
/// included) for the 30 s bound. The expectations already account for it; upstream records
/// successful creates only.
#[tokio::test]
async fn test_failed_creates_are_not_own_writes() {
    let failures = [
        errors::internal_error("admission webhook \"pods.example.com\" failed"),
        kctrl_client::Error::Timeout {
            verb: "POST".into(),
            url: "https://127.0.0.1/api/v1/namespaces/default/pods".into(),
            after: Duration::from_secs(30),
        },
    ];
    for failure in failures {
        let h = Harness::tracking_own_writes(BURST_REPLICAS);
        h.accept_status_writes();
        let failure = std::sync::Mutex::new(Some(failure));
        h.fake.prepend_reactor("create", "pods", move |_| {
            match failure.lock().unwrap().take() {
                Some(err) => Reaction::Error(err),
                None => Reaction::Continue,
            }
        });
        let rs = new_replica_set(2, foo_bar());
        h.add_rs(&rs);
        let rs_key = key(&rs);
        h.sync.sync_replica_set(&rs_key).await.unwrap_err();
        assert_eq!(h.pod_writes(), (1, 0, 0), "slow start stops at the failure");
        assert!(
            h.own_writes.is_empty(),
            "a failed create was recorded: {:?}",
            h.own_writes.check(&rs_key)
        );
        assert_eq!(
            h.own_writes.check(&rs_key),
            kctrl_runtime::own_writes::Check::Current
        );

        // A create that succeeds is recorded until the cache shows its Pod.
        h.sync.sync_replica_set(&rs_key).await.unwrap();
        assert_eq!(h.count("create", "pods", None), 3);
        assert!(matches!(
            h.own_writes.check(&rs_key),
            kctrl_runtime::own_writes::Check::Behind { .. }
        ));
    }
}

/// A failed adoption (or release) patch is not recorded as an own write: it would take a
/// live GET of the Pod to settle, which upstream's replicaset-controller role does not
/// grant (pods: list, watch, patch, create, delete), so the key would wait for the records
/// to expire. Upstream records successful Pod writes only.
#[tokio::test]
async fn test_failed_patches_are_not_own_writes() {
    let rs = new_replica_set(2, foo_bar());
    let h = setup_manager_with_gc_enabled_in(Harness::tracking_own_writes(BURST_REPLICAS), &rs);
    let rs = h.rss.get(&key(&rs)).unwrap();
    let mut orphan = new_pod("pod1", &rs, "Running", None, false);
    orphan
        .metadata
        .edit(|m| m.resource_version = Some("7".into()));
    h.add_pod(&orphan);
    h.fail_pod_writes();
    h.sync.sync_replica_set(&key(&rs)).await.unwrap_err();
    assert_eq!(h.pod_writes(), (0, 0, 1));
    assert!(
        h.own_writes.is_empty(),
        "a failed patch was recorded: {:?}",
        h.own_writes.check(&key(&rs))
    );
    // Nothing to read live before the next sync: no `get pods` needed.
    assert_eq!(
        h.own_writes.check(&key(&rs)),
        kctrl_runtime::own_writes::Check::Current
    );
}

#[tokio::test]
async fn test_do_not_adopt_or_create_if_being_deleted() {
    let mut rs = new_replica_set(2, foo_bar());
    rs.metadata.deletion_timestamp = Some(Time(Timestamp::now()));
    let h = setup_manager_with_gc_enabled(&rs);
    let rs = h.rss.get(&key(&rs)).unwrap();
    h.add_pod(&new_pod("pod1", &rs, "Running", None, false));
    h.sync.sync_replica_set(&key(&rs)).await.unwrap();
    assert_eq!(h.pod_writes(), (0, 0, 0));
}

#[tokio::test]
async fn test_do_not_adopt_or_create_if_being_deleted_race() {
    // The API has the ReplicaSet marked for deletion, the cache not yet.
    let mut rs = new_replica_set(2, foo_bar());
    rs.metadata.deletion_timestamp = Some(Time(Timestamp::now()));
    let h = setup_manager_with_gc_enabled(&rs);
    let mut cached = (*h.rss.get(&key(&rs)).unwrap()).clone();
    cached.metadata.deletion_timestamp = None;
    h.add_rs(&cached);
    h.add_pod(&new_pod("pod1", &cached, "Running", None, false));
    // The uncached recheck before adopting refuses: an error, and no write.
    let err = h.sync.sync_replica_set(&key(&rs)).await;
    assert!(err.is_err(), "sync succeeded; expected an error");
    assert_eq!(h.pod_writes(), (0, 0, 0));
}

#[tokio::test]
async fn test_replica_set_availability_check() {
    let h = Harness::new(BURST_REPLICAS);
    h.accept_status_writes();
    let mut rs = new_replica_set(4, foo_bar());
    rs.spec.min_ready_seconds = Some(5);
    h.add_rs(&rs);
    let now = Timestamp::now();
    let ago = |ms: i64| now - k8s_openapi::jiff::SignedDuration::from_millis(ms);
    h.add_pod(&new_pod("foobar-1", &rs, "Pending", None, true));
    h.add_pod(&new_pod("foobar-2", &rs, "Running", Some(now), true));
    h.add_pod(&new_pod("foobar-3", &rs, "Running", Some(ago(2000)), true));
    h.add_pod(&new_pod("foobar-4", &rs, "Running", Some(ago(4300)), true));
    let outcome = h.sync.sync_replica_set(&key(&rs)).await.unwrap();
    let updates: Vec<ReplicaSet> = h
        .fake
        .actions()
        .iter()
        .filter(|a| a.matches("update", "replicasets"))
        .filter_map(|a| a.object_as())
        .collect();
    let status = updates
        .last()
        .expect("a status update")
        .status
        .clone()
        .unwrap();
    assert_eq!(status.ready_replicas, Some(3));
    assert_eq!(status.available_replicas, None, "no Pod available yet");
    // Re-queued to recompute availableReplicas when the oldest ready Pod becomes available:
    // in about 700 ms, well within 900 ms.
    let after = outcome.requeue_after.expect("a requeue");
    assert!(after <= Duration::from_millis(900), "{after:?}");
    assert!(after > Duration::ZERO, "{after:?}");
}

fn cond(type_: &str, reason: &str) -> ReplicaSetCondition {
    ReplicaSetCondition {
        type_: Some(type_.into()),
        status: Some("True".into()),
        reason: Some(reason.into()),
        ..Default::default()
    }
}

fn cond_image_pull_back_off() -> ReplicaSetCondition {
    cond("ImagePullBackOff", "NonExistentImage")
}

fn cond_replica_failure() -> ReplicaSetCondition {
    cond(REPLICA_FAILURE, "OtherFailure")
}

fn cond_replica_failure2() -> ReplicaSetCondition {
    cond(REPLICA_FAILURE, "AnotherFailure")
}

fn with_conditions(conditions: Vec<ReplicaSetCondition>) -> ReplicaSetStatus {
    ReplicaSetStatus {
        conditions: (!conditions.is_empty()).then_some(conditions),
        ..Default::default()
    }
}

#[test]
fn test_get_condition() {
    let status = with_conditions(vec![cond_replica_failure()]);
    let cases = [
        ("condition exists", REPLICA_FAILURE, true),
        ("condition does not exist", "ImagePullBackOff", false),
    ];
    for (name, type_, expected) in cases {
        assert_eq!(get_condition(&status, type_).is_some(), expected, "{name}");
    }
}

#[test]
fn test_set_condition() {
    let cases = [
        (
            "set for the first time",
            with_conditions(vec![]),
            cond_replica_failure(),
            with_conditions(vec![cond_replica_failure()]),
        ),
        (
            "simple set",
            with_conditions(vec![cond_image_pull_back_off()]),
            cond_replica_failure(),
            with_conditions(vec![cond_image_pull_back_off(), cond_replica_failure()]),
        ),
        (
            "overwrite",
            with_conditions(vec![cond_replica_failure()]),
            cond_replica_failure2(),
            with_conditions(vec![cond_replica_failure2()]),
        ),
    ];
    for (name, mut status, c, expected) in cases {
        set_condition(&mut status, c);
        assert_eq!(status, expected, "{name}");
    }
}

#[test]
fn test_remove_condition() {
    let cases = [
        (
            "remove from empty status",
            with_conditions(vec![]),
            REPLICA_FAILURE,
            with_conditions(vec![]),
        ),
        (
            "simple remove",
            with_conditions(vec![cond_replica_failure()]),
            REPLICA_FAILURE,
            with_conditions(vec![]),
        ),
        (
            "doesn't remove anything",
            with_conditions(vec![cond_replica_failure()]),
            "ImagePullBackOff",
            with_conditions(vec![cond_replica_failure()]),
        ),
    ];
    for (name, mut status, type_, expected) in cases {
        remove_condition(&mut status, type_);
        assert_eq!(status, expected, "{name}");
    }
}

#[tokio::test]
async fn test_slow_start_batch() {
    // (name, count, call limit, successes, error expected, calls)
    let cases = [
        ("callLimit = 0 (all fail)", 10, 0, 0, true, 1),
        ("callLimit = count (all succeed)", 10, 10, 10, false, 10),
        ("callLimit < count (some succeed)", 10, 5, 5, true, 7),
    ];
    for (name, count, limit, want_successes, want_err, want_calls) in cases {
        let calls = AtomicUsize::new(0);
        let (successes, err) = slow_start_batch(count, 1, || {
            let n = calls.fetch_add(1, Ordering::SeqCst) + 1;
            async move { if n > limit { Err("fake error") } else { Ok(()) } }
        })
        .await;
        assert_eq!(successes, want_successes, "{name}: successes");
        assert_eq!(err.is_some(), want_err, "{name}: error");
        assert_eq!(calls.load(Ordering::SeqCst), want_calls, "{name}: calls");
    }
}

#[test]
fn test_get_pods_to_delete() {
    let rs = new_replica_set(1, map(&[("name", "foo")]));
    let on_node = |mut pod: PodView, node: &str| {
        pod.spec = Some(PodViewSpec {
            node_name: Some(node.into()),
            ..Default::default()
        });
        pod
    };
    let with_ready = |mut pod: PodView, status: &str| {
        pod.status.as_mut().unwrap().conditions = vec![ready(status, None)];
        pod
    };
    let unscheduled_pending = Arc::new(new_pod(
        "unscheduled-pending-pod",
        &rs,
        "Pending",
        None,
        true,
    ));
    let scheduled_pending = Arc::new(on_node(
        new_pod("scheduled-pending-pod", &rs, "Pending", None, true),
        "fake-node",
    ));
    let not_ready = Arc::new(with_ready(
        on_node(
            new_pod(
                "scheduled-running-not-ready-pod",
                &rs,
                "Running",
                None,
                true,
            ),
            "fake-node",
        ),
        "False",
    ));
    let ready1 = Arc::new(with_ready(
        on_node(
            new_pod(
                "scheduled-running-ready-pod-on-node-1",
                &rs,
                "Running",
                None,
                true,
            ),
            "fake-node-1",
        ),
        "True",
    ));
    let ready2 = Arc::new(with_ready(
        on_node(
            new_pod(
                "scheduled-running-ready-pod-on-node-2",
                &rs,
                "Running",
                None,
                true,
            ),
            "fake-node-2",
        ),
        "True",
    ));
    let all = || {
        vec![
            ready1.clone(),
            ready1.clone(),
            ready2.clone(),
            not_ready.clone(),
            scheduled_pending.clone(),
            unscheduled_pending.clone(),
        ]
    };
    type Case = (
        &'static str,
        Vec<Arc<PodView>>,
        Option<Vec<Arc<PodView>>>,
        usize,
        Vec<Arc<PodView>>,
    );
    let cases: Vec<Case> = vec![
        (
            "len(pods) = 0 (i.e., diff = 0 too)",
            vec![],
            None,
            0,
            vec![],
        ),
        (
            "diff = len(pods)",
            vec![not_ready.clone(), ready1.clone()],
            None,
            2,
            vec![not_ready.clone(), ready1.clone()],
        ),
        (
            "diff < len(pods)",
            vec![ready1.clone(), not_ready.clone()],
            None,
            1,
            vec![not_ready.clone()],
        ),
        (
            "various pod phases and conditions, diff = len(pods)",
            all(),
            None,
            6,
            all(),
        ),
        (
            "various pod phases and conditions, diff = len(pods), relatedPods empty",
            all(),
            Some(vec![]),
            6,
            all(),
        ),
        (
            "scheduled vs unscheduled, diff < len(pods)",
            vec![scheduled_pending.clone(), unscheduled_pending.clone()],
            None,
            1,
            vec![unscheduled_pending.clone()],
        ),
        (
            "ready vs not-ready, diff < len(pods)",
            vec![ready1.clone(), not_ready.clone(), not_ready.clone()],
            None,
            2,
            vec![not_ready.clone(), not_ready.clone()],
        ),
        (
            "ready and colocated with another ready pod vs not colocated, diff < len(pods)",
            vec![ready1.clone(), ready2.clone()],
            Some(vec![ready1.clone(), ready2.clone(), ready2.clone()]),
            1,
            vec![ready2.clone()],
        ),
        (
            "pending vs running, diff < len(pods)",
            vec![scheduled_pending.clone(), not_ready.clone()],
            None,
            1,
            vec![scheduled_pending.clone()],
        ),
        (
            "various pod phases and conditions, diff < len(pods)",
            vec![
                ready1.clone(),
                ready2.clone(),
                not_ready.clone(),
                scheduled_pending.clone(),
                unscheduled_pending.clone(),
            ],
            None,
            3,
            vec![
                unscheduled_pending.clone(),
                scheduled_pending.clone(),
                not_ready.clone(),
            ],
        ),
    ];
    for (name, pods, related, diff, expected) in cases {
        let related = related.unwrap_or_else(|| pods.clone());
        let (got, _) = pods_to_delete(&pods, &related, diff, Timestamp::now());
        let names = |v: &[Arc<PodView>]| v.iter().map(|p| p.name().to_owned()).collect::<Vec<_>>();
        assert_eq!(names(&got), names(&expected), "{name}");
    }
}

#[test]
fn test_get_pod_keys() {
    let rs = new_replica_set(1, map(&[("name", "foo")]));
    let pod1 = new_pod("pod1", &rs, "Running", None, true);
    let pod2 = new_pod("pod2", &rs, "Running", None, true);
    let cases: [(&str, Vec<&PodView>, Vec<&str>); 2] = [
        ("len(pods) = 0 (i.e., pods = nil)", vec![], vec![]),
        (
            "len(pods) > 0",
            vec![&pod1, &pod2],
            vec!["default/pod1", "default/pod2"],
        ),
    ];
    for (name, pods, expected) in cases {
        let keys: Vec<String> = pods.iter().map(|p| p.key()).collect();
        assert_eq!(keys, expected, "{name}");
    }
}

#[test]
fn test_calculate_status() {
    let label_map = map(&[("name", "foo")]);
    let full_label_map = map(&[("name", "foo"), ("type", "production")]);
    let not_fully_labelled = new_replica_set(1, label_map);
    let fully_labelled = new_replica_set(2, full_label_map.clone());
    let long = 3600;
    let mut long_min_ready = new_replica_set(1, full_label_map);
    long_min_ready.spec.min_ready_seconds = Some(long);
    let now = Timestamp::now();
    let ago = |secs: i64| now - k8s_openapi::jiff::SignedDuration::from_secs(secs);
    let terminating = |mut pod: PodView| {
        pod.metadata
            .edit(|m| m.deletion_timestamp = Some(Time(now)));
        Arc::new(pod)
    };
    let pod = |name: &str, rs: &ReplicaSet, phase: &str, since: Option<Timestamp>| {
        Arc::new(new_pod(name, rs, phase, since, true))
    };
    let status = |replicas, fully, ready, available, terminating: Option<i32>| ReplicaSetStatus {
        replicas,
        fully_labeled_replicas: (fully != 0).then_some(fully),
        ready_replicas: (ready != 0).then_some(ready),
        available_replicas: (available != 0).then_some(available),
        terminating_replicas: terminating,
        ..Default::default()
    };
    // (name, terminating counted (the gate and the controller's feature), rs, active,
    // terminating, expected)
    type Case<'a> = (
        &'a str,
        bool,
        &'a ReplicaSet,
        Vec<Arc<PodView>>,
        Vec<Arc<PodView>>,
        ReplicaSetStatus,
    );
    let cases: Vec<Case<'_>> = vec![
        (
            "1 fully labelled pod",
            false,
            &fully_labelled,
            vec![pod("pod1", &fully_labelled, "Running", None)],
            vec![],
            status(1, 1, 1, 1, None),
        ),
        (
            "1 not fully labelled pod",
            false,
            &not_fully_labelled,
            vec![pod("pod1", &not_fully_labelled, "Running", None)],
            vec![],
            status(1, 0, 1, 1, None),
        ),
        (
            "2 fully labelled pods",
            false,
            &fully_labelled,
            vec![
                pod("pod1", &fully_labelled, "Running", None),
                pod("pod2", &fully_labelled, "Running", None),
            ],
            vec![],
            status(2, 2, 2, 2, None),
        ),
        (
            "2 fully labelled pods with DeploymentReplicaSetTerminatingReplicas",
            true,
            &fully_labelled,
            vec![
                pod("pod1", &fully_labelled, "Running", None),
                pod("pod2", &fully_labelled, "Running", None),
            ],
            vec![],
            status(2, 2, 2, 2, Some(0)),
        ),
        (
            "2 not fully labelled pods",
            false,
            &not_fully_labelled,
            vec![
                pod("pod1", &not_fully_labelled, "Running", None),
                pod("pod2", &not_fully_labelled, "Running", None),
            ],
            vec![],
            status(2, 0, 2, 2, None),
        ),
        (
            "1 fully labelled pod, 1 not fully labelled pod",
            false,
            &not_fully_labelled,
            vec![
                pod("pod1", &not_fully_labelled, "Running", None),
                pod("pod2", &fully_labelled, "Running", None),
            ],
            vec![],
            status(2, 1, 2, 2, None),
        ),
        (
            "1 non-ready pod",
            false,
            &fully_labelled,
            vec![pod("pod1", &fully_labelled, "Pending", None)],
            vec![],
            status(1, 1, 0, 0, None),
        ),
        (
            "1 ready but non-available pod",
            false,
            &long_min_ready,
            vec![pod("pod1", &long_min_ready, "Running", Some(now))],
            vec![],
            status(1, 1, 1, 0, None),
        ),
        (
            "1 available pod with minReadySeconds",
            false,
            &long_min_ready,
            vec![pod(
                "pod1",
                &long_min_ready,
                "Running",
                Some(ago(i64::from(long))),
            )],
            vec![],
            status(1, 1, 1, 1, None),
        ),
        (
            "1 available pod for a long time with minReadySeconds",
            false,
            &long_min_ready,
            vec![pod(
                "pod1",
                &long_min_ready,
                "Running",
                Some(ago(2 * i64::from(long))),
            )],
            vec![],
            status(1, 1, 1, 1, None),
        ),
        (
            "1 fully labelled pod and 1 terminating without DeploymentReplicaSetTerminatingReplicas",
            false,
            &fully_labelled,
            vec![pod("pod1", &fully_labelled, "Running", None)],
            vec![terminating(new_pod(
                "pod2",
                &fully_labelled,
                "Running",
                None,
                true,
            ))],
            status(1, 1, 1, 1, None),
        ),
        (
            "1 fully labelled pods and 2 terminating with DeploymentReplicaSetTerminatingReplicas",
            true,
            &fully_labelled,
            vec![pod("pod1", &fully_labelled, "Running", None)],
            vec![
                terminating(new_pod("pod2", &fully_labelled, "Running", None, true)),
                terminating(new_pod("pod3", &fully_labelled, "Running", None, true)),
            ],
            status(1, 1, 1, 1, Some(2)),
        ),
        // Upstream's ReplicationController case (the gate on, the controller's feature off) is
        // the case above with terminating Pods not counted: this crate has no
        // ReplicationController mode.
        (
            "1 fully labelled pods and 2 terminating with DeploymentReplicaSetTerminatingReplicas (ReplicationController)",
            false,
            &fully_labelled,
            vec![pod("pod1", &fully_labelled, "Running", None)],
            vec![
                terminating(new_pod("pod2", &fully_labelled, "Running", None, true)),
                terminating(new_pod("pod3", &fully_labelled, "Running", None, true)),
            ],
            status(1, 1, 1, 1, None),
        ),
    ];
    for (name, counted, rs, active, term, expected) in cases {
        let got = calculate_status(rs, &active, counted.then_some(&term[..]), None, now);
        assert_eq!(got, expected, "{name}");
    }
}

#[test]
fn test_calculate_status_conditions() {
    let label_map = map(&[("name", "foo")]);
    let rs = new_replica_set(2, label_map.clone());
    let mut replica_failure_rs = new_replica_set(10, label_map);
    replica_failure_rs.status = Some(ReplicaSetStatus {
        conditions: Some(vec![ReplicaSetCondition {
            type_: Some(REPLICA_FAILURE.into()),
            status: Some("True".into()),
            ..Default::default()
        }]),
        ..Default::default()
    });
    let pods = |rs: &ReplicaSet, n: usize| -> Vec<Arc<PodView>> {
        (1..=n)
            .map(|i| Arc::new(new_pod(&format!("pod{i}"), rs, "Running", None, true)))
            .collect()
    };
    let failure = |reason: Option<&str>, message: Option<&str>| ReplicaSetCondition {
        type_: Some(REPLICA_FAILURE.into()),
        status: Some("True".into()),
        reason: reason.map(str::to_owned),
        message: message.map(str::to_owned),
        last_transition_time: None,
    };
    let err = Some("fake manageReplicasErr");
    let cases = [
        (
            "manageReplicasErr != nil && failureCond == nil, diff < 0",
            &rs,
            pods(&rs, 1),
            err,
            Some(vec![failure(Some("FailedCreate"), err)]),
        ),
        (
            "manageReplicasErr != nil && failureCond == nil, diff > 0",
            &rs,
            pods(&rs, 3),
            err,
            Some(vec![failure(Some("FailedDelete"), err)]),
        ),
        (
            "manageReplicasErr == nil && failureCond != nil",
            &replica_failure_rs,
            pods(&replica_failure_rs, 1),
            None,
            None,
        ),
        (
            "manageReplicasErr != nil && failureCond != nil",
            &replica_failure_rs,
            pods(&replica_failure_rs, 1),
            err,
            Some(vec![failure(None, None)]),
        ),
        (
            "manageReplicasErr == nil && failureCond == nil",
            &rs,
            pods(&rs, 1),
            None,
            None,
        ),
    ];
    for (name, rs, active, err, expected) in cases {
        let got = calculate_status(rs, &active, None, err, Timestamp::now());
        // The transition time is the clock's; compare the rest.
        let got = got.conditions.map(|cs| {
            cs.into_iter()
                .map(|c| ReplicaSetCondition {
                    last_transition_time: None,
                    ..c
                })
                .collect::<Vec<_>>()
        });
        assert_eq!(got, expected, "{name}");
    }
}

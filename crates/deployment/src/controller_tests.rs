//! Ports of upstream's deployment_controller_test.go sync scenarios and sync_test.go's
//! cleanupDeployment tables, against the in-memory fake API. Caches are stores seeded directly,
//! so they can disagree with the API as in upstream's fixtures.
//!
//! The handler scenarios (pod deletion, ReplicaSet add/update/delete) are in `wiring_tests.rs`.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use k8s_openapi::api::apps::v1::{
    Deployment, DeploymentCondition, DeploymentStatus, DeploymentStrategy, ReplicaSet,
    ReplicaSetSpec, ReplicaSetStatus,
};
use k8s_openapi::api::core::v1::PodStatus;
use kctrl_client::versioned::{Text, Versioned};

use crate::pod_view::PodView;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, Time};
use kctrl_controller_ref::{Owner, get_controller_of};
use kctrl_fake::FakeApi;
use kctrl_informer::Store;

use super::*;
use crate::events::RecordingEventRecorder;
use crate::fixtures::{map, new_deployment, pod_from_rs, ts};
use crate::util::constants::DEPRECATED_ROLLBACK_TO;

/// Upstream's test fixture: the fake API ("f.objects"), the caches ("f.dLister", ...) and the
/// event recorder.
struct Fixture {
    fake: FakeApi,
    deployments: Store<Deployment>,
    replica_sets: Store<ReplicaSet>,
    pods: Store<PodView>,
    recorder: Arc<RecordingEventRecorder>,
}

impl Fixture {
    fn new() -> Self {
        Self {
            fake: FakeApi::new(),
            deployments: Store::new(),
            replica_sets: Store::new(),
            pods: Store::new(),
            recorder: Arc::new(RecordingEventRecorder::new()),
        }
    }

    /// Seeds the API and the cache with the same object; returns it as stored.
    fn add_deployment(&self, d: &Deployment) -> Deployment {
        let stored = self.fake.add(d).unwrap();
        self.deployments.insert(Arc::new(stored.clone()));
        stored
    }

    fn add_rs(&self, rs: &ReplicaSet) -> ReplicaSet {
        let stored = self.fake.add(rs).unwrap();
        self.replica_sets.insert(Arc::new(stored.clone()));
        stored
    }

    fn controller(&self) -> DeploymentController {
        DeploymentController::new(
            self.fake.client(),
            self.deployments.clone(),
            self.replica_sets.clone(),
            self.pods.clone(),
            self.recorder.clone(),
        )
        .with_clock(|| "2026-01-01T00:00:00.600Z".parse().unwrap())
    }

    /// The recorded actions as `verb resource[/subresource]`.
    fn actions(&self) -> Vec<String> {
        self.fake
            .actions()
            .iter()
            .map(|a| match a.subresource() {
                Some(sub) => format!("{} {}/{sub}", a.verb(), a.resource().plural),
                None => format!("{} {}", a.verb(), a.resource().plural),
            })
            .collect()
    }

    fn events(&self) -> Vec<String> {
        self.recorder.strings()
    }
}

fn foo_bar() -> BTreeMap<String, String> {
    map(&[("foo", "bar")])
}

/// `newReplicaSet(d, name, replicas)`: controlled by `d`, labels and selector from `d`'s
/// selector, `d`'s template.
fn new_replica_set(d: &Deployment, name: &str, replicas: i32) -> ReplicaSet {
    let spec = d.spec.clone().into_value().unwrap();
    ReplicaSet {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some("default".to_owned()),
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

#[tokio::test]
async fn sync_deployment_creates_replica_set() {
    let f = Fixture::new();
    let d = f.add_deployment(&new_deployment("foo", 1, None, None, None, Some(foo_bar())));

    let outcome = f
        .controller()
        .sync_deployment("default", "foo")
        .await
        .unwrap();

    assert_eq!(outcome, SyncOutcome::DONE);
    assert_eq!(
        f.actions(),
        [
            "create replicasets",
            "update deployments/status",
            "update deployments/status"
        ]
    );
    let actions = f.fake.actions();
    let created: ReplicaSet = actions[0].object_as().unwrap();
    let name = created.metadata.name.clone().unwrap();
    let hash = name.strip_prefix("foo-").unwrap();
    let labels = created.metadata.labels.clone().unwrap();
    assert_eq!(
        labels.get("pod-template-hash").map(String::as_str),
        Some(hash)
    );
    let rs_spec = created.spec.clone().into_value().unwrap();
    assert_eq!(rs_spec.replicas, Some(1));
    assert_eq!(
        rs_spec
            .selector
            .match_labels
            .unwrap()
            .get("pod-template-hash")
            .map(String::as_str),
        Some(hash)
    );
    assert_eq!(
        get_controller_of(&created.metadata).unwrap().uid,
        d.metadata.uid.clone().unwrap()
    );
    let rs_annotations = created.metadata.annotations.clone().unwrap();
    assert_eq!(
        rs_annotations.get(REVISION_ANNOTATION).map(String::as_str),
        Some("1")
    );
    assert_eq!(
        rs_annotations
            .get("deployment.kubernetes.io/desired-replicas")
            .map(String::as_str),
        Some("1")
    );
    // First status write: the revision; second: the rollout status.
    let first: Deployment = actions[1].object_as().unwrap();
    assert_eq!(
        first
            .metadata
            .annotations
            .unwrap()
            .get(REVISION_ANNOTATION)
            .map(String::as_str),
        Some("1")
    );
    let second: Deployment = actions[2].object_as().unwrap();
    let status = second.status.unwrap();
    assert_eq!(status.observed_generation, Some(1));
    let available = &status.conditions.unwrap()[0];
    assert_eq!(available.type_.text(), "Available");
    // The clock is rounded down to whole seconds.
    assert_eq!(
        available.last_update_time,
        Some(Time(ts("2026-01-01T00:00:00Z")))
    );
    assert_eq!(
        f.events(),
        [format!(
            "Normal ScalingReplicaSet Scaled up replica set {name} from 0 to 1"
        )]
    );
    assert!(
        f.fake
            .object::<ReplicaSet>(Some("default"), &name)
            .is_some()
    );
}

#[tokio::test]
async fn sync_deployment_dont_do_anything_during_deletion() {
    let f = Fixture::new();
    let mut d = new_deployment("foo", 1, None, None, None, Some(foo_bar()));
    d.metadata.deletion_timestamp = Some(Time(ts("2026-01-01T00:00:00Z")));
    f.add_deployment(&d);

    f.controller()
        .sync_deployment("default", "foo")
        .await
        .unwrap();

    assert_eq!(f.actions(), ["update deployments/status"]);
    assert!(f.events().is_empty());
}

#[tokio::test]
async fn sync_deployment_deletion_race() {
    let f = Fixture::new();
    let mut deleted = new_deployment("foo", 1, None, None, None, Some(foo_bar()));
    deleted.metadata.deletion_timestamp = Some(Time(ts("2026-01-01T00:00:00Z")));
    // The API says deleted; the cache does not.
    let mut cached = f.fake.add(&deleted).unwrap();
    cached.metadata.deletion_timestamp = None;
    f.deployments.insert(Arc::new(cached.clone()));
    // The recheck is only triggered if a matching orphan exists.
    let mut rs = new_replica_set(&cached, "rs1", 1);
    rs.metadata.owner_references = None;
    f.add_rs(&rs);

    let err = f
        .controller()
        .sync_deployment("default", "foo")
        .await
        .unwrap_err();

    assert!(matches!(err, SyncError::Claim(_)), "{err}");
    assert!(err.to_string().contains("has just been deleted"), "{err}");
    assert_eq!(f.actions(), ["get deployments"]);
}

#[tokio::test]
async fn dont_sync_deployments_with_empty_pod_selector() {
    let f = Fixture::new();
    let mut d = new_deployment("foo", 1, None, None, None, Some(foo_bar()));
    d.spec.get_mut().selector = LabelSelector::default();
    f.fake.add(&d).unwrap();
    // The cached copy has no generation, so there is no observedGeneration to sync.
    f.deployments.insert(Arc::new(d));

    let outcome = f
        .controller()
        .sync_deployment("default", "foo")
        .await
        .unwrap();

    assert_eq!(outcome, SyncOutcome::DONE);
    assert!(f.actions().is_empty(), "{:?}", f.actions());
    assert_eq!(
        f.events(),
        [
            "Warning SelectingAll This deployment is selecting all pods. A non-empty selector is \
          required."
        ]
    );
}

/// Not upstream: with a generation ahead of observedGeneration, only observedGeneration is
/// written.
#[tokio::test]
async fn empty_pod_selector_syncs_observed_generation_only() {
    let f = Fixture::new();
    let mut d = new_deployment("foo", 3, None, None, None, Some(foo_bar()));
    d.spec.get_mut().selector = LabelSelector::default();
    let stored = f.add_deployment(&d);
    f.add_rs(&new_replica_set(&stored, "foo-1", 1));

    f.controller()
        .sync_deployment("default", "foo")
        .await
        .unwrap();

    assert_eq!(f.actions(), ["update deployments/status"]);
    let written: Deployment = f.fake.actions()[0].object_as().unwrap();
    let status = written.status.unwrap();
    assert_eq!(status.observed_generation, Some(1));
    assert_eq!(status.replicas, None);
}

#[tokio::test]
async fn sync_deployment_not_found_is_done() {
    let f = Fixture::new();
    let outcome = f
        .controller()
        .sync_deployment("default", "gone")
        .await
        .unwrap();
    assert_eq!(outcome, SyncOutcome::DONE);
    assert!(f.actions().is_empty());
}

/// A Deployment at revision 2 asking for the previous revision, whose ReplicaSets selectors
/// carry the hash label.
fn reentrant_rollback_fixture(rollback_to: &str) -> (Fixture, Deployment) {
    let f = Fixture::new();
    let mut d = new_deployment("foo", 1, None, None, None, Some(foo_bar()));
    d.metadata.annotations = Some(BTreeMap::from([
        (REVISION_ANNOTATION.to_owned(), "2".to_owned()),
        (DEPRECATED_ROLLBACK_TO.to_owned(), rollback_to.to_owned()),
    ]));
    let d = f.add_deployment(&d);
    let with_hash = |mut rs: ReplicaSet, revision: &str| {
        rs.metadata.annotations = Some(BTreeMap::from([(
            REVISION_ANNOTATION.to_owned(),
            revision.to_owned(),
        )]));
        rs.spec
            .get_mut()
            .selector
            .match_labels
            .as_mut()
            .unwrap()
            .insert("pod-template-hash".to_owned(), "hash".to_owned());
        rs
    };
    let mut rs1 = with_hash(new_replica_set(&d, "deploymentrs-old", 0), "1");
    rs1.spec
        .get_mut()
        .template
        .as_mut()
        .unwrap()
        .spec
        .as_mut()
        .unwrap()
        .termination_grace_period_seconds = Some(1);
    let rs2 = with_hash(new_replica_set(&d, "deploymentrs-new", 1), "2");
    f.add_rs(&rs1);
    f.add_rs(&rs2);
    (f, d)
}

#[tokio::test]
async fn reentrant_rollback() {
    let (f, _) = reentrant_rollback_fixture("0");

    f.controller()
        .sync_deployment("default", "foo")
        .await
        .unwrap();

    // The rollback is one Deployment update; no ReplicaSet is written.
    assert_eq!(f.actions(), ["update deployments"]);
    let written: Deployment = f.fake.actions()[0].object_as().unwrap();
    assert_eq!(crate::rollback::get_rollback_to(&written), None);
    let template = written.spec.into_value().unwrap().template;
    assert_eq!(
        template.spec.unwrap().termination_grace_period_seconds,
        Some(1)
    );
    assert_eq!(
        f.events(),
        ["Normal DeploymentRollback Rolled back deployment \"foo\" to revision 1"]
    );
}

/// Not upstream: an unknown revision clears the annotation with a warning.
#[tokio::test]
async fn rollback_revision_not_found() {
    let (f, _) = reentrant_rollback_fixture("7");

    f.controller()
        .sync_deployment("default", "foo")
        .await
        .unwrap();

    assert_eq!(f.actions(), ["update deployments"]);
    let written: Deployment = f.fake.actions()[0].object_as().unwrap();
    assert_eq!(crate::rollback::get_rollback_to(&written), None);
    assert_eq!(
        written
            .spec
            .into_value()
            .unwrap()
            .template
            .spec
            .unwrap()
            .termination_grace_period_seconds,
        None
    );
    assert_eq!(
        f.events(),
        ["Warning DeploymentRollbackRevisionNotFound Unable to find the revision to rollback to."]
    );
}

/// Not upstream: rolling back to the current template only clears the annotation.
#[tokio::test]
async fn rollback_template_unchanged() {
    let (f, _) = reentrant_rollback_fixture("2");

    f.controller()
        .sync_deployment("default", "foo")
        .await
        .unwrap();

    assert_eq!(f.actions(), ["update deployments"]);
    assert_eq!(
        f.events(),
        [
            "Warning DeploymentRollbackTemplateUnchanged The rollback revision contains the same \
          template as current deployment \"foo\""
        ]
    );
}

#[tokio::test]
async fn get_replica_sets_for_deployment() {
    let f = Fixture::new();
    let d1 = f.add_deployment(&new_deployment("foo", 1, None, None, None, Some(foo_bar())));
    let d2 = f.add_deployment(&new_deployment("bar", 1, None, None, None, Some(foo_bar())));
    f.add_rs(&new_replica_set(&d1, "rs1", 1));
    f.add_rs(&new_replica_set(&d2, "rs2", 1));
    let dc = f.controller();

    for (d, want) in [(&d1, "rs1"), (&d2, "rs2")] {
        let got = dc.get_replica_sets_for_deployment(d).await.unwrap();
        let names: Vec<_> = got
            .iter()
            .map(|rs| rs.metadata.name.clone().unwrap())
            .collect();
        assert_eq!(names, [want]);
    }
    assert!(f.actions().is_empty());
}

#[tokio::test]
async fn get_replica_sets_for_deployment_adopt_release() {
    let f = Fixture::new();
    let d = f.add_deployment(&new_deployment("foo", 1, None, None, None, Some(foo_bar())));
    let mut adopt = new_replica_set(&d, "rsAdopt", 1);
    adopt.metadata.owner_references = None;
    let mut release = new_replica_set(&d, "rsRelease", 1);
    release.metadata.labels = Some(map(&[("foo", "notbar")]));
    f.add_rs(&adopt);
    f.add_rs(&release);

    let got = f
        .controller()
        .get_replica_sets_for_deployment(&d)
        .await
        .unwrap();

    let names: Vec<_> = got
        .iter()
        .map(|rs| rs.metadata.name.clone().unwrap())
        .collect();
    assert_eq!(names, ["rsAdopt"]);
    let adopted: ReplicaSet = f.fake.object(Some("default"), "rsAdopt").unwrap();
    assert_eq!(
        get_controller_of(&adopted.metadata).unwrap().uid,
        d.metadata.uid.clone().unwrap()
    );
    let released: ReplicaSet = f.fake.object(Some("default"), "rsRelease").unwrap();
    assert!(get_controller_of(&released.metadata).is_none());
    let mut actions = f.actions();
    actions.sort();
    assert_eq!(
        actions,
        ["get deployments", "patch replicasets", "patch replicasets"]
    );
}

#[tokio::test]
async fn get_pod_map_for_replica_sets() {
    let f = Fixture::new();
    let d = f.add_deployment(&new_deployment("foo", 1, None, None, None, Some(foo_bar())));
    let rs1 = f.add_rs(&new_replica_set(&d, "rs1", 1));
    let rs2 = f.add_rs(&new_replica_set(&d, "rs2", 1));
    let pod1 = pod_from_rs(&rs1);
    let pod2 = pod_from_rs(&rs2);
    let mut pod3 = pod_from_rs(&rs1);
    pod3.metadata.name = Some("pod3".to_owned());
    pod3.metadata.owner_references = None;
    let mut pod4 = pod_from_rs(&rs1);
    pod4.metadata.name = Some("pod4".to_owned());
    pod4.status = Some(PodStatus {
        phase: Some("Failed".to_owned()),
        ..Default::default()
    });
    for pod in [pod1, pod2, pod3, pod4] {
        f.pods.insert(Arc::new(PodView::from(&pod)));
    }

    let pod_map = f
        .controller()
        .get_pod_map_for_deployment(&[rs1.clone(), rs2.clone()]);

    assert_eq!(pod_map.len(), 2);
    assert_eq!(pod_map.values().map(Vec::len).sum::<usize>(), 3);
    let names = |rs: &ReplicaSet| -> BTreeSet<String> {
        pod_map[rs.metadata.uid.as_deref().unwrap()]
            .iter()
            .map(|p| p.name().to_owned())
            .collect()
    };
    assert_eq!(
        names(&rs1),
        BTreeSet::from(["rs1-pod".to_owned(), "pod4".to_owned()])
    );
    assert_eq!(names(&rs2), BTreeSet::from(["rs2-pod".to_owned()]));
}

/// `newRSWithStatus(name, spec, status, selector)`.
fn rs_with_status(name: &str, spec: i32, status: i32) -> ReplicaSet {
    ReplicaSet {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some("default".to_owned()),
            ..Default::default()
        },
        spec: ReplicaSetSpec {
            replicas: Some(spec),
            selector: LabelSelector {
                match_labels: Some(foo_bar()),
                ..Default::default()
            },
            ..Default::default()
        },
        status: Some(ReplicaSetStatus {
            replicas: status,
            ..Default::default()
        }),
    }
}

/// Runs `cleanupDeployment` on `old_rss` (also present in the API) and returns the deleted
/// names, in order.
async fn run_cleanup(old_rss: &[ReplicaSet], limit: i32) -> Vec<String> {
    let f = Fixture::new();
    let d = f.add_deployment(&new_deployment(
        "foo",
        1,
        Some(limit),
        None,
        None,
        Some(foo_bar()),
    ));
    for rs in old_rss {
        f.fake.add(rs).unwrap();
    }
    let shared: Vec<Arc<ReplicaSet>> = old_rss.iter().cloned().map(Arc::new).collect();
    f.controller()
        .cleanup_deployment(&shared, &d)
        .await
        .unwrap();
    let deleted: Vec<String> = f
        .fake
        .actions()
        .iter()
        .filter(|a| a.matches("delete", "replicasets"))
        .map(|a| a.name().unwrap())
        .collect();
    assert_eq!(
        f.actions().len(),
        deleted.len(),
        "only deletes: {:?}",
        f.actions()
    );
    deleted
}

#[tokio::test]
async fn cleanup_deployment() {
    let mut being_deleted = rs_with_status("foo-1", 0, 0);
    being_deleted.metadata.deletion_timestamp = Some(Time(ts("2026-01-01T00:00:00Z")));
    let cases: Vec<(Vec<ReplicaSet>, i32, usize)> = vec![
        (
            vec![
                rs_with_status("foo-1", 0, 0),
                rs_with_status("foo-2", 0, 0),
                rs_with_status("foo-3", 0, 0),
            ],
            1,
            2,
        ),
        (
            // Only one ReplicaSet is cleanable (no replicas wanted or running).
            vec![
                rs_with_status("foo-1", 0, 0),
                rs_with_status("foo-2", 0, 1),
                rs_with_status("foo-3", 1, 0),
                rs_with_status("foo-4", 1, 1),
            ],
            0,
            1,
        ),
        (
            vec![rs_with_status("foo-1", 0, 0), rs_with_status("foo-2", 0, 0)],
            0,
            2,
        ),
        (
            vec![rs_with_status("foo-1", 1, 1), rs_with_status("foo-2", 1, 1)],
            0,
            0,
        ),
        (vec![being_deleted], 0, 0),
        (
            // An "infinite" limit keeps everything.
            vec![
                rs_with_status("foo-1", 0, 0),
                rs_with_status("foo-2", 0, 0),
                rs_with_status("foo-3", 0, 0),
            ],
            i32::MAX,
            0,
        ),
    ];
    for (n, (old_rss, limit, expected)) in cases.into_iter().enumerate() {
        let deleted = run_cleanup(&old_rss, limit).await;
        assert_eq!(deleted.len(), expected, "case {n}: deleted {deleted:?}");
    }
}

#[tokio::test]
async fn cleanup_deployment_order() {
    let t = [
        "2026-01-01T00:00:01Z",
        "2026-01-01T00:00:02Z",
        "2026-01-01T00:00:03Z",
        "2026-01-01T00:00:04Z",
    ];
    let rs = |n: usize, replicas: i32, revision: Option<&str>| {
        let mut rs = rs_with_status(&format!("foo-{n}"), replicas, replicas);
        rs.metadata.creation_timestamp = Some(Time(ts(t[n - 1])));
        rs.metadata.annotations =
            revision.map(|r| BTreeMap::from([(REVISION_ANNOTATION.to_owned(), r.to_owned())]));
        rs
    };
    let cases: Vec<(&str, Vec<ReplicaSet>, i32, &[&str])> = vec![
        (
            "oldest revision first",
            vec![rs(1, 0, Some("1")), rs(2, 0, Some("2"))],
            1,
            &["foo-1"],
        ),
        (
            "revision, not creation time",
            vec![rs(1, 0, Some("2")), rs(2, 0, Some("1"))],
            1,
            &["foo-2"],
        ),
        (
            "no revision is revision 0",
            vec![rs(1, 0, Some("1")), rs(2, 0, None)],
            1,
            &["foo-2"],
        ),
        (
            "no revision first",
            vec![rs(1, 0, None), rs(2, 0, Some("2"))],
            1,
            &["foo-1"],
        ),
        (
            "skip a ReplicaSet with replicas",
            vec![
                rs(1, 1, Some("1")),
                rs(2, 0, Some("2")),
                rs(3, 0, Some("3")),
            ],
            1,
            &["foo-2"],
        ),
        (
            "skipped ones keep their slot",
            vec![
                rs(1, 1, Some("1")),
                rs(2, 1, Some("2")),
                rs(3, 0, Some("3")),
            ],
            1,
            &[],
        ),
        (
            "several, by revision",
            vec![
                rs(1, 0, Some("3")),
                rs(2, 0, Some("1")),
                rs(3, 0, Some("4")),
                rs(4, 0, Some("2")),
            ],
            2,
            &["foo-2", "foo-4"],
        ),
    ];
    for (name, old_rss, limit, expected) in cases {
        let deleted: BTreeSet<String> = run_cleanup(&old_rss, limit).await.into_iter().collect();
        let expected: BTreeSet<String> = expected.iter().map(|s| (*s).to_owned()).collect();
        assert_eq!(deleted, expected, "{name}");
    }
}

/// TestDeploymentController_generateReplicaSetName: the ReplicaSet `getNewReplicaSet` creates
/// has a name of at most 253 characters whose part before the last `-` is the Deployment's
/// name, cut to 242 characters (253 less the separator and a 10-character hash) only when
/// longer.
#[tokio::test]
async fn generate_replica_set_name_on_create() {
    let cases = [
        (
            "short name",
            "my-deployment".to_owned(),
            "my-deployment".to_owned(),
        ),
        ("very long name truncated", "a".repeat(250), "a".repeat(242)),
        (
            "very long name not truncated",
            "a".repeat(242),
            "a".repeat(242),
        ),
    ];
    for (case, d_name, want_portion) in cases {
        let f = Fixture::new();
        let mut d = f.add_deployment(&new_deployment(
            &d_name,
            1,
            None,
            None,
            None,
            Some(foo_bar()),
        ));

        let new_rs = f
            .controller()
            .get_new_replica_set(&mut d, &[], &[], true)
            .await
            .unwrap_or_else(|e| panic!("{case}: creating the new ReplicaSet: {e}"));

        let created: Vec<ReplicaSet> = f
            .fake
            .actions()
            .iter()
            .filter(|a| a.verb() == "create" && a.resource().plural == "replicasets")
            .filter_map(|a| a.object_as())
            .collect();
        assert_eq!(created.len(), 1, "{case}: one ReplicaSet created");
        let rs_name = created[0].metadata.name.clone().unwrap_or_default();
        assert!(
            rs_name.len() <= 253,
            "{case}: ReplicaSet name length {} > 253",
            rs_name.len()
        );
        let (portion, hash) = rs_name
            .rsplit_once('-')
            .unwrap_or_else(|| panic!("{case}: no '-' in {rs_name:?}"));
        assert_eq!(portion, want_portion, "{case}: Deployment part of the name");
        assert_eq!(
            created[0]
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(DEFAULT_DEPLOYMENT_UNIQUE_LABEL_KEY))
                .map(String::as_str),
            Some(hash),
            "{case}: the name ends in the pod-template-hash"
        );
        assert_eq!(
            new_rs.and_then(|rs| rs.metadata.name.clone()),
            Some(rs_name),
            "{case}: the created ReplicaSet is returned"
        );
    }
}

/// Not upstream: after a status write, the next write of the same sync goes out with the
/// resourceVersion that write returned (upstream keeps the one it read, so its second write
/// answers 409 and the key is retried). That is still an optimistic write: a change made by
/// someone else in between moves the resourceVersion, the write answers 409 and the change
/// survives.
#[tokio::test]
async fn status_writes_never_overwrite_a_concurrent_change() {
    use std::sync::atomic::{AtomicUsize, Ordering};

    let f = Fixture::new();
    f.add_deployment(&new_deployment("foo", 1, None, None, None, Some(foo_bar())));
    let fake = f.fake.clone();
    let writes = AtomicUsize::new(0);
    f.fake
        .prepend_reactor("update", "deployments/status", move |_| {
            if writes.fetch_add(1, Ordering::SeqCst) == 1 {
                // Someone else changes the Deployment between our two status writes.
                let mut stored: Deployment = fake.object(Some("default"), "foo").unwrap();
                stored
                    .metadata
                    .annotations
                    .get_or_insert_default()
                    .insert("concurrent".to_owned(), "change".to_owned());
                fake.add(&stored).unwrap();
            }
            kctrl_fake::Reaction::Continue
        });

    let err = f
        .controller()
        .sync_deployment("default", "foo")
        .await
        .unwrap_err();

    assert!(
        matches!(&err, SyncError::Api(e) if e.is_conflict()),
        "{err}"
    );
    assert_eq!(
        f.actions(),
        [
            "create replicasets",
            "update deployments/status",
            "update deployments/status"
        ]
    );
    let stored: Deployment = f.fake.object(Some("default"), "foo").unwrap();
    let annotations = stored.metadata.annotations.unwrap();
    assert_eq!(
        annotations.get("concurrent").map(String::as_str),
        Some("change")
    );
    // The first write (the revision) went through; the second (the rollout status) did not.
    assert_eq!(
        annotations.get(REVISION_ANNOTATION).map(String::as_str),
        Some("1")
    );
    assert_eq!(stored.status.and_then(|s| s.observed_generation), None);
}

/// Not upstream: a ReplicaSet of the generated name that is not ours is a hash collision —
/// collisionCount is bumped and the AlreadyExists error returned for a retry.
#[tokio::test]
async fn create_hash_collision_bumps_collision_count() {
    let f = Fixture::new();
    let d = f.add_deployment(&new_deployment("foo", 1, None, None, None, Some(foo_bar())));
    let template = d.spec.clone().into_value().unwrap().template;
    let name = generate_replica_set_name("foo", &compute_hash(&template, None));
    let mut squatter = rs_with_status(&name, 0, 0);
    squatter.metadata.labels = Some(map(&[("other", "x")]));
    f.add_rs(&squatter);

    let err = f
        .controller()
        .sync_deployment("default", "foo")
        .await
        .unwrap_err();

    assert!(
        matches!(&err, SyncError::Api(e) if e.is_already_exists()),
        "{err}"
    );
    assert_eq!(
        f.actions(),
        ["create replicasets", "update deployments/status"]
    );
    let written: Deployment = f.fake.actions()[1].object_as().unwrap();
    assert_eq!(written.status.unwrap().collision_count, Some(1));
    assert!(f.events().is_empty());
}

/// Not upstream (TestScale covers the arithmetic): a changed `spec.replicas` is a scaling
/// event, applied with a full ReplicaSet update, then the status.
#[tokio::test]
async fn scaling_event_scales_the_new_replica_set() {
    let f = Fixture::new();
    let mut d = new_deployment("foo", 5, None, None, None, Some(foo_bar()));
    d.metadata.annotations = Some(BTreeMap::from([(
        REVISION_ANNOTATION.to_owned(),
        "1".to_owned(),
    )]));
    let d = f.add_deployment(&d);
    let mut rs = new_replica_set(&d, "foo-1", 3);
    rs.metadata.annotations = Some(BTreeMap::from([(
        REVISION_ANNOTATION.to_owned(),
        "1".to_owned(),
    )]));
    set_replicas_annotations(&mut rs, 3, 3);
    f.add_rs(&rs);

    f.controller()
        .sync_deployment("default", "foo")
        .await
        .unwrap();

    assert_eq!(
        f.actions(),
        ["update replicasets", "update deployments/status"]
    );
    let scaled: ReplicaSet = f.fake.object(Some("default"), "foo-1").unwrap();
    assert_eq!(scaled.spec.get().unwrap().replicas, Some(5));
    assert_eq!(
        crate::util::get_desired_replicas_annotation(&scaled),
        Some(5)
    );
    assert_eq!(
        f.events(),
        ["Normal ScalingReplicaSet Scaled up replica set foo-1 from 3 to 5"]
    );
}

/// Not upstream: Recreate first scales old ReplicaSets to 0, without creating the new one.
#[tokio::test]
async fn recreate_scales_old_replica_sets_down_first() {
    let f = Fixture::new();
    let mut d = new_deployment("foo", 1, None, None, None, Some(foo_bar()));
    d.spec.get_mut().strategy = Some(k8s_openapi::api::apps::v1::DeploymentStrategy {
        type_: Some("Recreate".to_owned()),
        rolling_update: None,
    });
    let d = f.add_deployment(&d);
    let mut old = new_replica_set(&d, "foo-old", 1);
    set_container_image(&mut old, "foo/old");
    let old = f.add_rs(&old);
    f.pods.insert(Arc::new(PodView::from(&pod_from_rs(&old))));

    f.controller()
        .sync_deployment("default", "foo")
        .await
        .unwrap();

    assert_eq!(
        f.actions(),
        ["update replicasets", "update deployments/status"]
    );
    let scaled: ReplicaSet = f.fake.object(Some("default"), "foo-old").unwrap();
    assert_eq!(scaled.spec.into_value().unwrap().replicas, Some(0));
    assert_eq!(
        f.events(),
        ["Normal ScalingReplicaSet Scaled down replica set foo-old from 1 to 0"]
    );
}

/// `syncDeployment` (v1.37.2) lists a Recreate Deployment's Pods only when it is about to
/// roll out: after the paused-condition write and the scaling check, not before them. The
/// last old Pod, deleted while the sync writes the "resumed" condition, is already gone from
/// the map, so this sync creates the new ReplicaSet instead of waiting for the next one.
#[tokio::test]
async fn recreate_reads_its_pods_after_the_paused_condition_write() {
    let f = Fixture::new();
    let mut d = new_deployment("foo", 1, None, None, None, Some(foo_bar()));
    let spec = d.spec.get_mut();
    spec.strategy = Some(DeploymentStrategy {
        type_: Some("Recreate".to_owned()),
        rolling_update: None,
    });
    spec.progress_deadline_seconds = Some(600);
    // Resumed, but the Progressing condition still tells of the pause: the sync writes first.
    d.status = Some(DeploymentStatus {
        conditions: Some(vec![DeploymentCondition {
            type_: DEPLOYMENT_PROGRESSING.to_owned().into(),
            status: CONDITION_UNKNOWN.to_owned().into(),
            reason: Some(PAUSED_DEPLOY_REASON.to_owned()),
            ..Default::default()
        }]),
        ..Default::default()
    });
    let d = f.add_deployment(&d);
    let mut old = new_replica_set(&d, "foo-old", 0);
    set_container_image(&mut old, "foo/old");
    let old = f.add_rs(&old);
    let old_pod = PodView::from(&pod_from_rs(&old));
    f.pods.insert(Arc::new(old_pod.clone()));
    let pods = f.pods.clone();
    f.fake
        .prepend_reactor("update", "deployments/status", move |_| {
            // The old Pod's deletion reaches the cache while the status write is in flight.
            pods.remove_object(&old_pod);
            kctrl_fake::Reaction::Continue
        });

    f.controller()
        .sync_deployment("default", "foo")
        .await
        .unwrap();

    let actions = f.actions();
    assert_eq!(
        actions.first().map(String::as_str),
        Some("update deployments/status"),
        "{actions:?}"
    );
    assert!(
        actions.iter().any(|a| a == "create replicasets"),
        "the new ReplicaSet waited for a Pod already gone: {actions:?}"
    );
    let resumed: Deployment = f.fake.object(Some("default"), "foo").unwrap();
    let reason = get_deployment_condition(&resumed.status.unwrap(), DEPLOYMENT_PROGRESSING)
        .and_then(|c| c.reason.clone());
    assert_ne!(reason.as_deref(), Some(PAUSED_DEPLOY_REASON));
}

/// A sync from a cached Deployment that this controller's own write already replaced is
/// skipped (its status write would be refused as a conflict; the write's update event syncs
/// it again); once the cache shows the written version, syncs run again.
#[tokio::test]
async fn a_cache_behind_our_own_write_is_not_synced_from() {
    let f = Fixture::new();
    f.add_deployment(&new_deployment("foo", 1, None, None, None, Some(foo_bar())));
    let controller = f.controller();
    controller.sync_deployment("default", "foo").await.unwrap();
    let after_first = f.actions();
    assert_eq!(after_first.len(), 3, "{after_first:?}");

    // The informer has not delivered the status writes: the cache still holds the original.
    let outcome = controller.sync_deployment("default", "foo").await.unwrap();
    assert_eq!(outcome, SyncOutcome::DONE);
    assert_eq!(
        f.actions(),
        after_first,
        "nothing written from a stale cache"
    );

    // The cache catches up (the Deployment as written, its ReplicaSet), with a change made
    // by someone else meanwhile, so the next sync has something to write.
    let mut current: Deployment = f.fake.object(Some("default"), "foo").unwrap();
    current.spec.get_mut().replicas = Some(3);
    let current = kctrl_client::Api::<Deployment>::namespaced(f.fake.client(), "default")
        .update(&kctrl_client::PostParams::default(), &current)
        .await
        .unwrap();
    f.fake.clear_actions();
    f.deployments.insert(Arc::new(current));
    for rs in f.fake.objects::<ReplicaSet>() {
        f.replica_sets.insert(Arc::new(rs));
    }
    controller.sync_deployment("default", "foo").await.unwrap();
    assert!(
        f.actions()
            .iter()
            .any(|a| a.starts_with("update replicasets")),
        "a fresh cache is synced from (the scale-up is written): {:?}",
        f.actions()
    );
    assert!(controller.d_writes.len() <= 1);
}

// ---- the ReplicaSet cache behind this controller's own ReplicaSet writes ----

/// A RollingUpdate Deployment (3 replicas, maxSurge 1, maxUnavailable 0) mid-rollout: the old
/// ReplicaSet `foo-old` runs 3 available pods, the new `foo-new` (the Deployment's template)
/// has none yet, so the next sync scales `foo-new` up to 1 — the 4 pods maxSurge allows.
fn mid_rollout_fixture() -> Fixture {
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

    let f = Fixture::new();
    let mut d = new_deployment(
        "foo",
        3,
        None,
        Some(IntOrString::Int(1)),
        None,
        Some(foo_bar()),
    );
    d.metadata.annotations = Some(map(&[(REVISION_ANNOTATION, "2")]));
    let d = f.add_deployment(&d);
    let mut old = new_replica_set(&d, "foo-old", 3);
    old.metadata.annotations = Some(map(&[(REVISION_ANNOTATION, "1")]));
    set_container_image(&mut old, "foo/old");
    old.status = Some(ReplicaSetStatus {
        replicas: 3,
        ready_replicas: Some(3),
        available_replicas: Some(3),
        ..Default::default()
    });
    f.add_rs(&old);
    let mut new = new_replica_set(&d, "foo-new", 0);
    new.metadata.annotations = Some(map(&[(REVISION_ANNOTATION, "2")]));
    set_replicas_annotations(&mut new, 3, 4);
    f.add_rs(&new);
    f.fake.clear_actions();
    f
}

fn set_container_image(rs: &mut ReplicaSet, image: &str) {
    rs.spec
        .get_mut()
        .template
        .as_mut()
        .unwrap()
        .spec
        .as_mut()
        .unwrap()
        .containers[0]
        .image = Some(image.to_owned());
}

/// The user changes the Deployment's image (a new rollout); the Deployment cache shows it at
/// once, the ReplicaSet cache is left as it is.
async fn user_changes_image(f: &Fixture, image: &str) {
    let mut current: Deployment = f.fake.object(Some("default"), "foo").unwrap();
    current
        .spec
        .get_mut()
        .template
        .spec
        .as_mut()
        .unwrap()
        .containers[0]
        .image = Some(image.to_owned());
    let current = kctrl_client::Api::<Deployment>::namespaced(f.fake.client(), "default")
        .update(&kctrl_client::PostParams::default(), &current)
        .await
        .unwrap();
    f.deployments.insert(Arc::new(current));
    f.fake.clear_actions();
}

/// The ReplicaSet cache catches up with the API server.
fn replica_set_cache_catches_up(f: &Fixture) {
    for rs in f.fake.objects::<ReplicaSet>() {
        f.replica_sets.insert(Arc::new(rs));
    }
}

/// After the cache caught up, the sync's first action created the next rollout's ReplicaSet
/// at 0 replicas (the 4 pods maxSurge allows are already asked for), and no more are asked for.
fn assert_next_rollout_starts_within_surge(f: &Fixture) {
    assert_eq!(
        f.actions().first().map(String::as_str),
        Some("create replicasets"),
        "{:?}",
        f.actions()
    );
    let created: ReplicaSet = f.fake.actions()[0].object_as().unwrap();
    assert_eq!(
        crate::util::fields::rs_replicas(&created),
        0,
        "4 pods already"
    );
    assert!(pods_asked_for(f) <= 4);
}

/// Σ spec.replicas over the ReplicaSets the API server holds: the pods asked for.
fn pods_asked_for(f: &Fixture) -> i32 {
    f.fake
        .objects::<ReplicaSet>()
        .iter()
        .map(crate::util::fields::rs_replicas)
        .sum()
}

/// A transport failure after the request was sent: the connection was cut before the answer.
fn connection_cut(action: &kctrl_fake::Action) -> kctrl_client::Error {
    kctrl_client::Error::Transport {
        verb: "PUT".to_owned(),
        url: format!(
            "https://fake/apis/apps/v1/namespaces/default/replicasets/{}",
            action.name().unwrap_or_default()
        ),
        source: "connection closed before message completed".into(),
    }
}

/// Fails the update that scales `foo-new` to 1 with [`connection_cut`], once; when `apply`,
/// the API server has applied it first (the answer was lost, not the request).
fn cut_the_scale_up_of_foo_new(f: &Fixture, apply: bool) {
    use std::sync::atomic::{AtomicBool, Ordering};

    let fake = f.fake.clone();
    let done = AtomicBool::new(false);
    f.fake
        .prepend_reactor("update", "replicasets", move |action| {
            let rs: ReplicaSet = action.object_as().unwrap();
            let scale_up = rs.metadata.name.as_deref() == Some("foo-new")
                && crate::util::fields::rs_replicas(&rs) == 1;
            if !scale_up || done.swap(true, Ordering::SeqCst) {
                return kctrl_fake::Reaction::Continue;
            }
            if apply {
                fake.add(&rs).unwrap();
            }
            kctrl_fake::Reaction::Error(connection_cut(action))
        });
}

/// (a) The ReplicaSet cache lags a scale-up the API server answered. A sync from it (the user
/// started another rollout meanwhile) must not size the next ReplicaSet as if the scale-up
/// had not happened: 3 + 1 + 1 pods would exceed maxSurge. It waits for the cache; then the
/// new ReplicaSet is created at the size that respects maxSurge, with no extra request.
#[tokio::test(start_paused = true)]
async fn a_cache_behind_our_replica_set_scale_is_not_sized_from() {
    let f = mid_rollout_fixture();
    let controller = f.controller();
    controller.sync_deployment("default", "foo").await.unwrap();
    let scaled: ReplicaSet = f.fake.object(Some("default"), "foo-new").unwrap();
    assert_eq!(crate::util::fields::rs_replicas(&scaled), 1);
    assert_eq!(pods_asked_for(&f), 4);

    user_changes_image(&f, "foo/next").await;
    let outcome = controller.sync_deployment("default", "foo").await.unwrap();
    assert!(
        pods_asked_for(&f) <= 4,
        "maxSurge exceeded from a stale cache: {:?}",
        f.actions()
    );
    assert!(f.actions().is_empty(), "{:?}", f.actions());
    assert!(
        matches!(outcome.requeue, Requeue::After(_)),
        "a bounded wait: {outcome:?}"
    );

    replica_set_cache_catches_up(&f);
    controller.sync_deployment("default", "foo").await.unwrap();
    assert!(
        !f.actions().iter().any(|a| a.starts_with("get")),
        "no live read when the cache shows the write: {:?}",
        f.actions()
    );
    assert_next_rollout_starts_within_surge(&f);
}

/// (b) The scale-up of `foo-new` is applied but its answer lost (the connection was cut). The
/// next sync cannot tell from the cache; one live read shows the write was applied, so it
/// waits for the cache instead of creating the next ReplicaSet beside a stale count.
#[tokio::test(start_paused = true)]
async fn a_lost_answer_to_an_applied_scale_does_not_breach_max_surge() {
    let f = mid_rollout_fixture();
    cut_the_scale_up_of_foo_new(&f, true);
    let controller = f.controller();
    let err = controller
        .sync_deployment("default", "foo")
        .await
        .unwrap_err();
    assert!(
        matches!(&err, SyncError::Api(e) if e.is_transport()),
        "{err}"
    );
    assert_eq!(pods_asked_for(&f), 4, "applied on the server");

    user_changes_image(&f, "foo/next").await;
    let outcome = controller.sync_deployment("default", "foo").await.unwrap();
    assert!(
        pods_asked_for(&f) <= 4,
        "maxSurge exceeded from a stale cache: {:?}",
        f.actions()
    );
    assert_eq!(f.actions(), ["get replicasets"]);
    assert!(matches!(outcome.requeue, Requeue::After(_)), "{outcome:?}");

    // Retried before the cache caught up: still waiting, without reading again.
    f.fake.clear_actions();
    controller.sync_deployment("default", "foo").await.unwrap();
    assert!(f.actions().is_empty(), "{:?}", f.actions());

    replica_set_cache_catches_up(&f);
    controller.sync_deployment("default", "foo").await.unwrap();
    assert_next_rollout_starts_within_surge(&f);
}

/// (c) A write whose answer was lost but which the API server never applied must not hold
/// the Deployment: the next sync's live read shows the cache is current, and it proceeds at
/// once (here: the next rollout's ReplicaSet gets the one pod maxSurge leaves).
#[tokio::test(start_paused = true)]
async fn a_lost_write_that_was_not_applied_does_not_block_the_deployment() {
    let f = mid_rollout_fixture();
    cut_the_scale_up_of_foo_new(&f, false);
    let controller = f.controller();
    controller
        .sync_deployment("default", "foo")
        .await
        .unwrap_err();
    assert_eq!(pods_asked_for(&f), 3, "not applied");

    user_changes_image(&f, "foo/next").await;
    controller.sync_deployment("default", "foo").await.unwrap();
    let actions = f.actions();
    assert_eq!(
        actions.first().map(String::as_str),
        Some("get replicasets"),
        "the unknown outcome is checked: {actions:?}"
    );
    assert_eq!(
        actions.get(1).map(String::as_str),
        Some("create replicasets"),
        "{actions:?}"
    );
    assert_eq!(pods_asked_for(&f), 4);
}

/// Recreate: the new ReplicaSet was created at full size but the cache does not show it yet.
/// A sync for the next rollout must not start its pods beside the ones the cache does not
/// know about (old and new pods together).
#[tokio::test(start_paused = true)]
async fn recreate_does_not_start_pods_beside_a_replica_set_the_cache_lacks() {
    let f = Fixture::new();
    let mut d = new_deployment("foo", 3, None, None, None, Some(foo_bar()));
    d.spec.get_mut().strategy = Some(k8s_openapi::api::apps::v1::DeploymentStrategy {
        type_: Some("Recreate".to_owned()),
        rolling_update: None,
    });
    f.add_deployment(&d);
    let controller = f.controller();
    controller.sync_deployment("default", "foo").await.unwrap();
    assert_eq!(pods_asked_for(&f), 3);

    user_changes_image(&f, "foo/next").await;
    controller.sync_deployment("default", "foo").await.unwrap();
    assert!(
        !f.actions().iter().any(|a| a == "create replicasets"),
        "new pods beside the old ones: {:?}",
        f.actions()
    );
    assert_eq!(pods_asked_for(&f), 3);

    replica_set_cache_catches_up(&f);
    controller.sync_deployment("default", "foo").await.unwrap();
    assert_eq!(
        f.actions().first().map(String::as_str),
        Some("update replicasets"),
        "the old ReplicaSet is scaled down first: {:?}",
        f.actions()
    );
    assert_eq!(pods_asked_for(&f), 0);
}

/// A record the cache can never satisfy (the created ReplicaSet was deleted before the cache
/// saw it) holds the Deployment back for at most VERIFY_AFTER: the skipped sync asks to be
/// requeued by then, and the sync after it reads the ReplicaSet live, finds it gone and acts.
/// A deleted Deployment's records are forgotten.
#[tokio::test(start_paused = true)]
async fn an_unsatisfiable_record_is_verified_after_a_bounded_wait() {
    use kctrl_runtime::own_writes::DEFAULT_VERIFY_AFTER as VERIFY_AFTER;

    let f = Fixture::new();
    f.add_deployment(&new_deployment("foo", 1, None, None, None, Some(foo_bar())));
    let controller = f.controller();
    controller.sync_deployment("default", "foo").await.unwrap();
    let created = f.fake.objects::<ReplicaSet>()[0]
        .metadata
        .name
        .clone()
        .unwrap();
    kctrl_client::Api::<ReplicaSet>::namespaced(f.fake.client(), "default")
        .delete(&created, &kctrl_client::DeleteParams::default())
        .await
        .unwrap();
    let current: Deployment = f.fake.object(Some("default"), "foo").unwrap();
    f.deployments.insert(Arc::new(current));
    f.fake.clear_actions();

    let outcome = controller.sync_deployment("default", "foo").await.unwrap();
    assert!(f.actions().is_empty(), "{:?}", f.actions());
    let Requeue::After(after) = outcome.requeue else {
        panic!("no bounded wait: {outcome:?}");
    };
    assert!(after <= SignedDuration::try_from(VERIFY_AFTER).unwrap());

    tokio::time::advance(VERIFY_AFTER).await;
    controller.sync_deployment("default", "foo").await.unwrap();
    let actions = f.actions();
    assert_eq!(
        &actions[..2],
        ["get replicasets", "create replicasets"],
        "{actions:?}"
    );
    assert_eq!(controller.rs_writes.len(), 1);

    f.deployments.remove("default/foo");
    controller.sync_deployment("default", "foo").await.unwrap();
    assert_eq!(
        controller.rs_writes.len(),
        0,
        "forgotten with the Deployment"
    );
}

/// A Deployment being deleted only gets its status synced (nothing is sized or created), so
/// it does not wait for the cache to show the ReplicaSet it created.
#[tokio::test(start_paused = true)]
async fn a_deployment_being_deleted_does_not_wait_for_the_cache() {
    let f = Fixture::new();
    f.add_deployment(&new_deployment("foo", 1, None, None, None, Some(foo_bar())));
    let controller = f.controller();
    controller.sync_deployment("default", "foo").await.unwrap();
    let mut current: Deployment = f.fake.object(Some("default"), "foo").unwrap();
    current.metadata.deletion_timestamp = Some(Time(ts("2026-01-01T00:00:00Z")));
    f.deployments.insert(Arc::new(current));

    let outcome = controller.sync_deployment("default", "foo").await.unwrap();
    assert_eq!(outcome, SyncOutcome::DONE);
}

#[test]
fn a_sync_reads_only_its_own_namespace_from_the_cache() {
    // Upstream reads ReplicaSets through the namespaced lister; so do we, through the store's
    // namespace index, so that a sync does not touch every cached object of the cluster.
    let store: Store<ReplicaSet> = Store::new();
    for (ns, name) in [("a", "one"), ("b", "two"), ("a", "three"), ("c", "four")] {
        store.insert(Arc::new(ReplicaSet {
            metadata: ObjectMeta {
                namespace: Some(ns.to_owned()),
                name: Some(name.to_owned()),
                ..Default::default()
            },
            ..Default::default()
        }));
    }
    let names = |ns: &str| -> BTreeSet<String> {
        in_namespace(&store, ns)
            .iter()
            .map(|rs| rs.metadata.name.clone().unwrap_or_default())
            .collect()
    };
    assert_eq!(
        names("a"),
        BTreeSet::from(["one".to_owned(), "three".to_owned()])
    );
    assert_eq!(names("b"), BTreeSet::from(["two".to_owned()]));
    assert!(names("d").is_empty());
}

#[test]
fn a_claim_reads_only_its_own_and_orphan_replica_sets_through_the_index() {
    // Upstream claims over every ReplicaSet of the namespace; a claim never acts on one
    // controlled by another object, so the index hands it only the deployment's own and the
    // namespace's orphans, and follows adoptions and releases.
    let rs = |ns: &str, name: &str, controller: Option<&str>| {
        Arc::new(ReplicaSet {
            metadata: ObjectMeta {
                namespace: Some(ns.to_owned()),
                name: Some(name.to_owned()),
                owner_references: controller.map(|uid| {
                    vec![
                        k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
                            api_version: "apps/v1".to_owned(),
                            kind: "Deployment".to_owned(),
                            name: format!("owner-{uid}"),
                            uid: uid.to_owned(),
                            controller: Some(true),
                            ..Default::default()
                        },
                    ]
                }),
                ..Default::default()
            },
            ..Default::default()
        })
    };
    let d = Deployment {
        metadata: ObjectMeta {
            namespace: Some("a".to_owned()),
            name: Some("owner-u1".to_owned()),
            uid: Some("u1".to_owned()),
            ..Default::default()
        },
        ..Default::default()
    };
    let names = |store: &Store<ReplicaSet>| -> BTreeSet<String> {
        claim_candidates(store, &d, "a")
            .iter()
            .map(|rs| rs.metadata.name.clone().unwrap_or_default())
            .collect()
    };
    let set =
        |names: &[&str]| -> BTreeSet<String> { names.iter().map(|n| (*n).to_owned()).collect() };

    let store: Store<ReplicaSet> = Store::new();
    for object in [
        rs("a", "mine", Some("u1")),
        rs("a", "theirs", Some("u2")),
        rs("a", "orphan", None),
        rs("b", "orphan-elsewhere", None),
        rs("b", "mine-elsewhere", Some("u1")),
    ] {
        store.insert(object);
    }
    // Without the index: the namespace scan, as upstream's lister.
    assert_eq!(names(&store), set(&["mine", "theirs", "orphan"]));

    store
        .add_indexers([(CLAIM_CANDIDATES_INDEX.to_owned(), claim_candidates_index())])
        .unwrap();
    assert_eq!(names(&store), set(&["mine", "orphan"]));

    // Another controller adopts the orphan; ours releases its own.
    store.insert(rs("a", "orphan", Some("u2")));
    store.insert(rs("a", "mine", None));
    assert_eq!(
        names(&store),
        set(&["mine"]),
        "the released one is an orphan now"
    );
    store.remove_object(&rs("a", "mine", None));
    assert!(names(&store).is_empty());
}

//! Behaviour beyond upstream's table: the adoption guard runs at most once and only when
//! adopting, release tolerates objects that are gone or recreated, errors are collected per
//! object and name it, and the patches are byte-exact. Everything runs against the in-memory
//! fake API through the real controls.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kctrl_client::labels::Selector;
use kctrl_client::{Api, Patch};
use kctrl_controller_ref::{
    CanAdopt, CanAdoptError, ControllerRefManager, Owner, OwnershipError, RealPodControl,
    RealReplicaSetControl, adopt_patch, adopt_patch_bytes, get_controller_of, release_patch,
};
use kctrl_fake::{FakeApi, Reaction, errors};

const NS: &str = "default";
const OWNER_UID: &str = "d-uid";

fn app(value: &str) -> BTreeMap<String, String> {
    [("app".to_owned(), value.to_owned())].into()
}

fn deployment(uid: &str) -> Deployment {
    Deployment {
        metadata: ObjectMeta {
            name: Some("web".into()),
            namespace: Some(NS.into()),
            uid: Some(uid.into()),
            ..Default::default()
        },
        ..Default::default()
    }
}

fn owner() -> Owner {
    Owner::of(&deployment(OWNER_UID))
}

/// A ReplicaSet labelled `app=<label>`, controlled by the owner with `controller_uid` if any.
fn rs(name: &str, label: &str, controller_uid: Option<&str>) -> ReplicaSet {
    ReplicaSet {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(NS.into()),
            uid: Some(format!("{name}-uid")),
            labels: Some(app(label)),
            owner_references: controller_uid.map(|uid| {
                vec![
                    Owner {
                        uid: uid.into(),
                        ..owner()
                    }
                    .controller_ref(),
                ]
            }),
            ..Default::default()
        },
        ..Default::default()
    }
}

fn seed(fake: &FakeApi, sets: &[ReplicaSet]) -> Vec<Arc<ReplicaSet>> {
    sets.iter()
        .map(|s| Arc::new(fake.add(s).unwrap()))
        .collect()
}

/// A can-adopt check that counts its runs and answers `ok`.
fn counting(ok: bool) -> (CanAdopt, Arc<AtomicUsize>) {
    let calls = Arc::new(AtomicUsize::new(0));
    let c = calls.clone();
    let check = CanAdopt::new(move || async move {
        c.fetch_add(1, Ordering::SeqCst);
        if ok {
            Ok(())
        } else {
            Err(CanAdoptError::Other("owner is paused".into()))
        }
    });
    (check, calls)
}

fn manager(fake: &FakeApi, can_adopt: CanAdopt) -> ControllerRefManager<RealReplicaSetControl> {
    ControllerRefManager::new(
        RealReplicaSetControl::new(fake.client()),
        owner(),
        Selector::from_map(&app("web")).unwrap(),
        can_adopt,
    )
}

fn names(sets: &[Arc<ReplicaSet>]) -> Vec<&str> {
    sets.iter()
        .map(|s| s.metadata.name.as_deref().unwrap())
        .collect()
}

fn patched(fake: &FakeApi) -> Vec<String> {
    fake.actions()
        .iter()
        .filter(|a| a.matches("patch", "replicasets"))
        .map(|a| a.name().unwrap())
        .collect()
}

#[tokio::test]
async fn can_adopt_is_not_checked_when_nothing_is_adopted() {
    let fake = FakeApi::new();
    let sets = seed(
        &fake,
        &[
            rs("owned", "web", Some(OWNER_UID)),
            rs("released", "other", Some(OWNER_UID)),
            rs("foreign", "web", Some("other-uid")),
            rs("unmatched-orphan", "other", None),
        ],
    );
    let (can_adopt, calls) = counting(true);
    let m = manager(&fake, can_adopt);
    let claimed = m.claim_replica_sets(&sets).await.unwrap();
    assert_eq!(names(&claimed), ["owned"]);
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    assert_eq!(patched(&fake), ["released"]);
}

#[tokio::test]
async fn can_adopt_is_checked_once_for_many_adoptions() {
    let fake = FakeApi::new();
    let sets = seed(
        &fake,
        &[
            rs("a", "web", None),
            rs("b", "web", None),
            rs("c", "web", None),
        ],
    );
    let (can_adopt, calls) = counting(true);
    let m = manager(&fake, can_adopt);
    let claimed = m.claim_replica_sets(&sets).await.unwrap();
    assert_eq!(names(&claimed), ["a", "b", "c"]);
    // A second claim on the same manager (same sync) does not check again.
    let more = seed(&fake, &[rs("d", "web", None)]);
    m.claim_replica_sets(&more).await.unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert_eq!(patched(&fake), ["a", "b", "c", "d"]);
    for name in ["a", "b", "c", "d"] {
        let stored: ReplicaSet = fake.object(Some(NS), name).unwrap();
        assert_eq!(
            get_controller_of(&stored.metadata),
            Some(&owner().controller_ref())
        );
    }
}

#[tokio::test]
async fn can_adopt_refusal_fails_every_adoption_and_keeps_the_claimed_list() {
    let fake = FakeApi::new();
    let sets = seed(
        &fake,
        &[
            rs("a", "web", None),
            rs("owned", "web", Some(OWNER_UID)),
            rs("b", "web", None),
        ],
    );
    let (can_adopt, calls) = counting(false);
    let err = manager(&fake, can_adopt)
        .claim_replica_sets(&sets)
        .await
        .unwrap_err();
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert!(patched(&fake).is_empty());
    assert_eq!(names(&err.claimed), ["owned"]);
    assert_eq!(err.errors.len(), 2);
    assert!(matches!(err.errors[0], OwnershipError::CannotAdopt { .. }));
    assert_eq!(
        err.to_string(),
        "[can't adopt ReplicaSet default/a (a-uid): owner is paused, \
         can't adopt ReplicaSet default/b (b-uid): owner is paused]"
    );
}

#[tokio::test]
async fn recheck_owner_refuses_when_owner_is_gone() {
    let fake = FakeApi::new();
    let sets = seed(&fake, &[rs("a", "web", None)]);
    let api = Api::<Deployment>::namespaced(fake.client(), NS);
    let err = manager(&fake, CanAdopt::recheck_owner(api, &owner()))
        .claim_replica_sets(&sets)
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        r#"can't adopt ReplicaSet default/a (a-uid): can't recheck DeletionTimestamp: deployments.apps "web" not found"#
    );
    // Not mistaken for "the ReplicaSet is gone".
    assert!(!err.errors[0].is_not_found());
}

#[tokio::test]
async fn recheck_owner_refuses_when_owner_was_recreated() {
    let fake = FakeApi::new();
    fake.add(&deployment("new-uid")).unwrap();
    let sets = seed(&fake, &[rs("a", "web", None)]);
    let api = Api::<Deployment>::namespaced(fake.client(), NS);
    let err = manager(&fake, CanAdopt::recheck_owner(api, &owner()))
        .claim_replica_sets(&sets)
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "can't adopt ReplicaSet default/a (a-uid): can't recheck DeletionTimestamp: \
         original Deployment default/web is gone: got uid new-uid, wanted d-uid"
    );
}

#[tokio::test]
async fn recheck_owner_refuses_when_owner_is_being_deleted() {
    let fake = FakeApi::new();
    let mut d = deployment(OWNER_UID);
    d.metadata.deletion_timestamp = Some(Time("2024-05-01T10:00:00Z".parse().unwrap()));
    d.metadata.finalizers = Some(vec!["foregroundDeletion".into()]);
    fake.add(&d).unwrap();
    let sets = seed(&fake, &[rs("a", "web", None)]);
    let api = Api::<Deployment>::namespaced(fake.client(), NS);
    // The cached owner is not (yet) marked for deletion; the fresh one is.
    let err = manager(&fake, CanAdopt::recheck_owner(api, &owner()))
        .claim_replica_sets(&sets)
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "can't adopt ReplicaSet default/a (a-uid): default/web has just been deleted at \
         2024-05-01 10:00:00 +0000 UTC"
    );
}

#[tokio::test]
async fn recheck_owner_allows_the_live_owner() {
    let fake = FakeApi::new();
    fake.add(&deployment(OWNER_UID)).unwrap();
    let sets = seed(&fake, &[rs("a", "web", None), rs("b", "web", None)]);
    let api = Api::<Deployment>::namespaced(fake.client(), NS);
    let claimed = manager(&fake, CanAdopt::recheck_owner(api, &owner()))
        .claim_replica_sets(&sets)
        .await
        .unwrap();
    assert_eq!(names(&claimed), ["a", "b"]);
    let verbs: Vec<_> = fake
        .actions()
        .iter()
        .map(|a| (a.verb(), a.resource().plural.to_string()))
        .collect();
    assert_eq!(
        verbs,
        [
            ("get", "deployments".to_owned()),
            ("patch", "replicasets".to_owned()),
            ("patch", "replicasets".to_owned()),
        ]
    );
}

#[tokio::test]
async fn release_ignores_not_found() {
    let fake = FakeApi::new();
    // Listed from a stale cache: the object is no longer on the server.
    let gone = Arc::new(rs("gone", "other", Some(OWNER_UID)));
    let (can_adopt, _) = counting(true);
    let claimed = manager(&fake, can_adopt)
        .claim_replica_sets(&[gone])
        .await
        .unwrap();
    assert!(claimed.is_empty());
    assert_eq!(patched(&fake), ["gone"]);
}

#[tokio::test]
async fn release_ignores_invalid_from_a_recreated_object() {
    let fake = FakeApi::new();
    // The server holds a newer object of the same name: the uid in the patch does not match.
    let mut recreated = rs("a", "other", Some(OWNER_UID));
    recreated.metadata.uid = Some("recreated-uid".into());
    fake.add(&recreated).unwrap();
    let stale = Arc::new(rs("a", "other", Some(OWNER_UID)));
    let (can_adopt, _) = counting(true);
    let claimed = manager(&fake, can_adopt)
        .claim_replica_sets(&[stale])
        .await
        .unwrap();
    assert!(claimed.is_empty());
    assert_eq!(patched(&fake), ["a"]);
    // Nothing was written to the new object.
    let stored: ReplicaSet = fake.object(Some(NS), "a").unwrap();
    assert!(get_controller_of(&stored.metadata).is_some());
}

#[tokio::test]
async fn release_ignores_injected_not_found_and_invalid() {
    for reaction in ["not_found", "invalid"] {
        let fake = FakeApi::new();
        let sets = seed(&fake, &[rs("a", "other", Some(OWNER_UID))]);
        fake.prepend_reactor("patch", "replicasets", move |a| {
            let name = a.name().unwrap_or_default();
            Reaction::Error(match reaction {
                "not_found" => errors::not_found(a.resource(), &name),
                _ => errors::invalid(
                    "apps",
                    "ReplicaSet",
                    &name,
                    &[errors::FieldError::invalid_string(
                        "metadata.uid",
                        "a-uid",
                        "field is immutable",
                    )],
                ),
            })
        });
        let (can_adopt, _) = counting(true);
        let claimed = manager(&fake, can_adopt)
            .claim_replica_sets(&sets)
            .await
            .unwrap_or_else(|e| panic!("{reaction}: {e}"));
        assert!(claimed.is_empty(), "{reaction}");
        assert_eq!(patched(&fake), ["a"], "{reaction}");
    }
}

#[tokio::test]
async fn release_errors_propagate_and_name_object_and_owner() {
    let fake = FakeApi::new();
    let sets = seed(
        &fake,
        &[
            rs("a", "other", Some(OWNER_UID)),
            rs("owned", "web", Some(OWNER_UID)),
        ],
    );
    fake.prepend_reactor("patch", "replicasets", |_| {
        Reaction::Error(errors::internal_error("etcd is down"))
    });
    let (can_adopt, _) = counting(true);
    let err = manager(&fake, can_adopt)
        .claim_replica_sets(&sets)
        .await
        .unwrap_err();
    assert_eq!(names(&err.claimed), ["owned"]);
    let [OwnershipError::Release { source, .. }] = err.errors.as_slice() else {
        panic!("{err:?}");
    };
    assert_eq!(source.status().and_then(|s| s.code), Some(500));
    let msg = err.to_string();
    assert!(
        msg.starts_with("releasing ReplicaSet default/a from Deployment default/web: "),
        "{msg}"
    );
}

#[tokio::test]
async fn adopt_not_found_is_not_an_error() {
    let fake = FakeApi::new();
    let gone = Arc::new(rs("gone", "web", None));
    let (can_adopt, _) = counting(true);
    let claimed = manager(&fake, can_adopt)
        .claim_replica_sets(&[gone])
        .await
        .unwrap();
    assert!(claimed.is_empty());
    assert_eq!(patched(&fake), ["gone"]);
}

#[tokio::test]
async fn adopt_errors_propagate() {
    let fake = FakeApi::new();
    let sets = seed(&fake, &[rs("a", "web", None), rs("b", "web", None)]);
    fake.prepend_reactor("patch", "replicasets", |a| {
        if a.name().as_deref() == Some("a") {
            Reaction::Error(errors::conflict(
                a.resource(),
                "a",
                "the object has been modified",
            ))
        } else {
            Reaction::Continue
        }
    });
    let (can_adopt, _) = counting(true);
    let err = manager(&fake, can_adopt)
        .claim_replica_sets(&sets)
        .await
        .unwrap_err();
    assert_eq!(names(&err.claimed), ["b"]);
    let [e @ OwnershipError::Adopt { .. }] = err.errors.as_slice() else {
        panic!("{err:?}");
    };
    assert!(e.api_error().unwrap().is_conflict());
    assert!(
        e.to_string()
            .starts_with("adopting ReplicaSet default/a for Deployment default/web: "),
        "{e}"
    );
}

#[tokio::test]
async fn owner_being_deleted_keeps_what_it_owns_and_writes_nothing() {
    let fake = FakeApi::new();
    let sets = seed(
        &fake,
        &[
            rs("owned", "web", Some(OWNER_UID)),
            rs("stale", "other", Some(OWNER_UID)),
            rs("orphan", "web", None),
        ],
    );
    let mut d = deployment(OWNER_UID);
    d.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::now()));
    let (can_adopt, calls) = counting(true);
    let m = ControllerRefManager::new(
        RealReplicaSetControl::new(fake.client()),
        Owner::of(&d),
        Selector::from_map(&app("web")).unwrap(),
        can_adopt,
    );
    let claimed = m.claim_replica_sets(&sets).await.unwrap();
    assert_eq!(names(&claimed), ["owned"]);
    assert!(fake.actions().is_empty());
    assert_eq!(calls.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn adopt_and_release_bodies_are_exact() {
    let fake = FakeApi::new();
    let sets = seed(
        &fake,
        &[
            rs("orphan", "web", None),
            rs("stale", "other", Some(OWNER_UID)),
        ],
    );
    let (can_adopt, _) = counting(true);
    manager(&fake, can_adopt)
        .claim_replica_sets(&sets)
        .await
        .unwrap();

    let want_adopt = r#"{"metadata":{"ownerReferences":[{"apiVersion":"apps/v1","kind":"Deployment","name":"web","uid":"d-uid","controller":true,"blockOwnerDeletion":true}],"uid":"orphan-uid"}}"#;
    assert_eq!(
        String::from_utf8(adopt_patch_bytes(&owner(), "orphan-uid", &[])).unwrap(),
        want_adopt
    );
    let want_release =
        r#"{"metadata":{"uid":"stale-uid","ownerReferences":[{"$patch":"delete","uid":"d-uid"}]}}"#;

    let actions = fake.actions();
    let bodies: Vec<(String, &Patch)> = actions
        .iter()
        .map(|a| (a.name().unwrap(), a.patch().unwrap()))
        .collect();
    assert_eq!(bodies.len(), 2);
    for ((name, patch), want) in bodies.iter().zip([want_adopt, want_release]) {
        assert_eq!(
            patch.content_type(),
            "application/strategic-merge-patch+json"
        );
        let want: serde_json::Value = serde_json::from_str(want).unwrap();
        assert_eq!(patch.body(), &want, "{name}");
    }
    assert_eq!(
        bodies[0].1.body(),
        &adopt_patch(&owner(), "orphan-uid", &[])
    );
    assert_eq!(
        bodies[1].1.body(),
        &release_patch("stale-uid", &["d-uid"], &[])
    );

    // What the fake server made of them.
    let orphan: ReplicaSet = fake.object(Some(NS), "orphan").unwrap();
    assert_eq!(
        orphan.metadata.owner_references,
        Some(vec![owner().controller_ref()])
    );
    let stale: ReplicaSet = fake.object(Some(NS), "stale").unwrap();
    assert_eq!(stale.metadata.owner_references.unwrap_or_default(), []);
}

#[tokio::test]
async fn adopt_and_release_with_finalizers() {
    let finalizers = vec!["batch.kubernetes.io/job-tracking".to_owned()];
    let want_adopt = r#"{"metadata":{"ownerReferences":[{"apiVersion":"apps/v1","kind":"Deployment","name":"web","uid":"d-uid","controller":true,"blockOwnerDeletion":true}],"uid":"p-uid","finalizers":["batch.kubernetes.io/job-tracking"]}}"#;
    assert_eq!(
        String::from_utf8(adopt_patch_bytes(&owner(), "p-uid", &finalizers)).unwrap(),
        want_adopt
    );
}

fn pod(name: &str, label: &str) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(NS.into()),
            labels: Some(app(label)),
            ..Default::default()
        },
        ..Default::default()
    }
}

#[tokio::test]
async fn claim_pods_filtered_checks_the_filter_after_the_selector() {
    let fake = FakeApi::new();
    let pods: Vec<Arc<Pod>> = [pod("a", "web"), pod("b", "web"), pod("c", "other")]
        .iter()
        .map(|p| Arc::new(fake.add(p).unwrap()))
        .collect();
    let m = ControllerRefManager::new(
        RealPodControl::new(fake.client()),
        owner(),
        Selector::from_map(&app("web")).unwrap(),
        CanAdopt::always(),
    );
    let seen = std::sync::Mutex::new(Vec::new());
    let claimed = m
        .claim_pods_filtered(&pods, |p| {
            let name = p.metadata.name.clone().unwrap();
            seen.lock().unwrap().push(name.clone());
            name != "b"
        })
        .await
        .unwrap();
    let claimed: Vec<_> = claimed
        .iter()
        .map(|p| p.metadata.name.as_deref().unwrap())
        .collect();
    assert_eq!(claimed, ["a"]);
    assert_eq!(*seen.lock().unwrap(), ["a", "b"]);
}

#[test]
fn claims_can_run_on_a_multi_threaded_runtime() {
    fn assert_send<T: Send>(_: &T) {}
    let fake = FakeApi::new();
    let m = manager(&fake, CanAdopt::always());
    let sets: Vec<Arc<ReplicaSet>> = Vec::new();
    let fut = m.claim_replica_sets(&sets);
    assert_send(&fut);
    let pm = ControllerRefManager::new(
        RealPodControl::new(fake.client()),
        owner(),
        Selector::everything(),
        CanAdopt::always(),
    );
    let pods: Vec<Arc<Pod>> = Vec::new();
    let fut = pm.claim_pods(&pods);
    assert_send(&fut);
}

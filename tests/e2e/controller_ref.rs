//! ControllerRefManager against a real kube-apiserver: a Deployment (used only as an owner;
//! no deployment controller runs) claims ReplicaSets with zero replicas. The API server, not
//! a fake, decides what the adopt and release patches do: it stores the controllerRef,
//! removes it, and answers NotFound / Invalid for objects deleted or recreated meanwhile.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec, ReplicaSet, ReplicaSetSpec};
use k8s_openapi::api::core::v1::{ConfigMap, Container, PodSpec, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use kctrl_client::labels::Selector;
use kctrl_client::versioned::Versioned;
use kctrl_client::{Api, Client, DeleteParams, PostParams};
use kctrl_controller_ref::{
    CanAdopt, ControllerRefManager, Owner, OwnershipError, RealReplicaSetControl, get_controller_of,
};
use kctrl_e2e::{TestNamespace, require_cluster};

fn app(value: &str) -> BTreeMap<String, String> {
    [("app".to_owned(), value.to_owned())].into()
}

fn template(label: &str) -> PodTemplateSpec {
    PodTemplateSpec {
        metadata: Some(ObjectMeta {
            labels: Some(app(label)),
            ..Default::default()
        }),
        spec: Some(PodSpec {
            containers: vec![Container {
                name: "main".into(),
                image: Some("registry.k8s.io/pause:3.10".into()),
                ..Default::default()
            }],
            ..Default::default()
        }),
    }
}

fn deployment(name: &str) -> Deployment {
    Deployment {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some(app(name)),
            ..Default::default()
        },
        spec: DeploymentSpec {
            replicas: Some(0),
            selector: LabelSelector {
                match_labels: Some(app(name)),
                ..Default::default()
            },
            template: template(name),
            ..Default::default()
        },
        ..Default::default()
    }
}

/// A ReplicaSet with zero replicas labelled (and selecting) `app=<label>`.
fn replica_set(name: &str, label: &str, controller: Option<OwnerReference>) -> ReplicaSet {
    ReplicaSet {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some(app(label)),
            owner_references: controller.map(|r| vec![r]),
            ..Default::default()
        },
        spec: ReplicaSetSpec {
            replicas: Some(0),
            selector: LabelSelector {
                match_labels: Some(app(label)),
                ..Default::default()
            },
            template: Some(template(label)),
            ..Default::default()
        },
        ..Default::default()
    }
}

fn name(rs: &ReplicaSet) -> &str {
    rs.metadata.name.as_deref().unwrap_or_default()
}

fn manager(
    client: &Client,
    ns: &str,
    d: &Deployment,
) -> ControllerRefManager<RealReplicaSetControl> {
    let owner = Owner::of(d);
    let selector = Selector::from_label_selector(&d.spec.get().unwrap().selector).unwrap();
    let recheck =
        CanAdopt::recheck_owner(Api::<Deployment>::namespaced(client.clone(), ns), &owner);
    ControllerRefManager::new(
        RealReplicaSetControl::new(client.clone()),
        owner,
        selector,
        recheck,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claim_adopts_releases_and_ignores_replica_sets() {
    let cluster = require_cluster!();
    let client = cluster.admin();
    let ns = TestNamespace::create(&client, "controller-ref").await;
    let pp = PostParams::default();
    let deployments = Api::<Deployment>::namespaced(client.clone(), &ns.name);
    let sets = Api::<ReplicaSet>::namespaced(client.clone(), &ns.name);

    let d = deployments.create(&pp, &deployment("web")).await.unwrap();
    assert!(
        d.metadata.uid.is_some(),
        "the server assigns the owner's uid"
    );
    let ours = Owner::of(&d).controller_ref();

    // Another controller: a real object, so nothing treats the ReplicaSet as orphaned.
    let other = Api::<ConfigMap>::namespaced(client.clone(), &ns.name)
        .create(
            &pp,
            &ConfigMap {
                metadata: ObjectMeta {
                    name: Some("other-controller".into()),
                    ..Default::default()
                },
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let theirs = OwnerReference {
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        name: "other-controller".into(),
        uid: other.metadata.uid.clone().unwrap(),
        controller: Some(true),
        block_owner_deletion: None,
    };

    let mut listed = Vec::new();
    for rs in [
        replica_set("kept", "web", Some(ours.clone())),
        replica_set("orphan", "web", None),
        replica_set("stale", "old", Some(ours.clone())),
        replica_set("foreign", "web", Some(theirs.clone())),
        replica_set("deleted", "old", Some(ours.clone())),
        replica_set("recreated", "old", Some(ours.clone())),
    ] {
        listed.push(Arc::new(sets.create(&pp, &rs).await.unwrap()));
    }

    // The lister's copies are now stale for two of them: one deleted, one deleted and
    // recreated under the same name (new uid).
    sets.delete("deleted", &DeleteParams::default())
        .await
        .unwrap();
    sets.delete("recreated", &DeleteParams::default())
        .await
        .unwrap();
    let recreated = sets
        .create(&pp, &replica_set("recreated", "old", Some(ours.clone())))
        .await
        .unwrap();

    let claimed = manager(&client, &ns.name, &d)
        .claim_replica_sets(&listed)
        .await
        .unwrap_or_else(|e| panic!("claim: {e}"));
    let claimed: Vec<&str> = claimed.iter().map(|rs| name(rs)).collect();
    assert_eq!(claimed, ["kept", "orphan"]);

    // Adopted: the server stores our controllerRef as sent.
    let orphan = sets.get("orphan").await.unwrap();
    assert_eq!(orphan.metadata.owner_references, Some(vec![ours.clone()]));
    let stored = get_controller_of(&orphan.metadata).unwrap();
    assert_eq!(stored.controller, Some(true));
    assert_eq!(stored.block_owner_deletion, Some(true));
    assert_eq!(stored.uid, d.metadata.uid.clone().unwrap());

    // Released: the ownerReference is gone.
    let stale = sets.get("stale").await.unwrap();
    assert_eq!(stale.metadata.owner_references.unwrap_or_default(), []);

    // Ignored: still the other controller's.
    let foreign = sets.get("foreign").await.unwrap();
    assert_eq!(foreign.metadata.owner_references, Some(vec![theirs]));

    // Kept: untouched.
    let kept = sets.get("kept").await.unwrap();
    assert_eq!(kept.metadata.owner_references, Some(vec![ours.clone()]));

    // The release of the deleted one was a NotFound, and nothing recreated it.
    assert!(sets.get_opt("deleted").await.unwrap().is_none());

    // The release of the recreated one was an Invalid (uid precondition) and did not touch
    // the new object.
    let now = sets.get("recreated").await.unwrap();
    assert_eq!(now.metadata.uid, recreated.metadata.uid);
    assert_eq!(now.metadata.owner_references, Some(vec![ours]));

    ns.delete().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn adoption_is_refused_when_the_owner_is_gone() {
    let cluster = require_cluster!();
    let client = cluster.admin();
    let ns = TestNamespace::create(&client, "controller-ref-gone").await;
    let pp = PostParams::default();
    let deployments = Api::<Deployment>::namespaced(client.clone(), &ns.name);
    let sets = Api::<ReplicaSet>::namespaced(client.clone(), &ns.name);

    // The sync works on a cached Deployment that the API server no longer has.
    let d = deployments.create(&pp, &deployment("web")).await.unwrap();
    deployments
        .delete("web", &DeleteParams::default())
        .await
        .unwrap();
    let orphan = Arc::new(
        sets.create(&pp, &replica_set("orphan", "web", None))
            .await
            .unwrap(),
    );

    let err = manager(&client, &ns.name, &d)
        .claim_replica_sets(std::slice::from_ref(&orphan))
        .await
        .unwrap_err();
    assert!(err.claimed.is_empty());
    let [OwnershipError::CannotAdopt { .. }] = err.errors.as_slice() else {
        panic!("{err:?}");
    };
    assert_eq!(
        err.to_string(),
        format!(
            "can't adopt ReplicaSet {ns}/orphan ({uid}): can't recheck DeletionTimestamp: \
             deployments.apps \"web\" not found",
            ns = ns.name,
            uid = orphan.metadata.uid.as_deref().unwrap(),
        )
    );
    let stored = sets.get("orphan").await.unwrap();
    assert_eq!(stored.metadata.owner_references, None);

    ns.delete().await;
}

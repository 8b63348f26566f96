//! Indexes at the controller level on the in-memory API server: the objects a reconciled
//! object controls, one lookup away through the controller-UID index (declared by two
//! controllers of one factory); an index declared on a cache the controller only reads,
//! queried in the reconcile after that cache synced; a name taken twice, refused by name;
//! and an index by UID sharding, refused like an owned resource.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kctrl_client::{Api, PostParams};
use kctrl_fake::FakeApi;
use kctrl_informer::{SharedInformerFactory, Store};
use kctrl_runtime::index::{CONTROLLER_UID_INDEX, by_controller_uid, controlled_by};
use kctrl_runtime::{Action, Controller, RunError};
use tokio_util::sync::CancellationToken;

#[derive(Debug, thiserror::Error)]
#[error("never")]
struct Never;

fn meta(name: &str, labels: &[(&str, &str)]) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        namespace: Some("shop".into()),
        labels: Some(
            labels
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        ),
        ..Default::default()
    }
}

fn controlled(name: &str, owner: &Deployment) -> ReplicaSet {
    let mut m = meta(name, &[]);
    m.owner_references = Some(vec![OwnerReference {
        api_version: "apps/v1".into(),
        kind: "Deployment".into(),
        name: owner.metadata.name.clone().unwrap_or_default(),
        uid: owner.metadata.uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: None,
    }]);
    ReplicaSet {
        metadata: m,
        ..Default::default()
    }
}

/// What each reconcile of a Deployment found: the names, sorted.
type Seen = Arc<Mutex<BTreeMap<String, Vec<String>>>>;

struct Ctx {
    replicasets: Store<ReplicaSet>,
    configmaps: Store<ConfigMap>,
    seen: Seen,
}

async fn reconcile(d: Arc<Deployment>, ctx: Arc<Ctx>) -> Result<Action, Never> {
    let name = d.metadata.name.clone().unwrap_or_default();
    let mut found: Vec<String> = controlled_by(&ctx.replicasets, d.as_ref())
        .iter()
        .map(|rs| format!("rs/{}", rs.metadata.name.as_deref().unwrap_or_default()))
        .collect();
    found.extend(
        ctx.configmaps
            .by_index("by-app", &name)
            .expect("the index was declared")
            .iter()
            .map(|cm| format!("cm/{}", cm.metadata.name.as_deref().unwrap_or_default())),
    );
    found.sort();
    ctx.seen.lock().unwrap().insert(name, found);
    Ok(Action::await_change())
}

fn by_app(cm: &ConfigMap) -> Vec<String> {
    cm.metadata
        .labels
        .iter()
        .flatten()
        .filter(|(k, _)| *k == "app")
        .map(|(_, v)| v.clone())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconcile_finds_what_it_controls_and_what_an_index_says() {
    let fake = FakeApi::new();
    let client = fake.client();
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "shop");
    let replicasets: Api<ReplicaSet> = Api::namespaced(client.clone(), "shop");
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), "shop");
    let pp = PostParams::default();
    let create_deployment = async |name: &str| {
        let d = Deployment {
            metadata: meta(name, &[]),
            ..Default::default()
        };
        deployments.create(&pp, &d).await.unwrap()
    };
    let web = create_deployment("web").await;
    let api = create_deployment("api").await;
    for rs in [
        controlled("web-1", &web),
        controlled("web-2", &web),
        controlled("api-1", &api),
    ] {
        replicasets.create(&pp, &rs).await.unwrap();
    }
    // Not controlled: an owner reference without `controller: true`, and none.
    let mut shared = controlled("shared", &web);
    shared.metadata.owner_references.as_mut().unwrap()[0].controller = None;
    replicasets.create(&pp, &shared).await.unwrap();
    replicasets
        .create(
            &pp,
            &ReplicaSet {
                metadata: meta("stray", &[]),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    for (name, app) in [
        ("web-settings", "web"),
        ("web-flags", "web"),
        ("api-settings", "api"),
    ] {
        let cm = ConfigMap {
            metadata: meta(name, &[("app", app)]),
            ..Default::default()
        };
        configmaps.create(&pp, &cm).await.unwrap();
    }

    let factory = SharedInformerFactory::new(client, Duration::from_secs(3600));
    let controller = Controller::<Deployment>::new(&factory)
        .owns::<ReplicaSet>()
        .index::<ReplicaSet>(CONTROLLER_UID_INDEX, by_controller_uid)
        // ConfigMaps are only read: the index makes the controller wait for their cache.
        .index::<ConfigMap>("by-app", by_app);
    let ctx = Arc::new(Ctx {
        replicasets: controller.cache::<ReplicaSet>(),
        configmaps: controller.cache::<ConfigMap>(),
        seen: Seen::default(),
    });
    assert!(
        ctx.replicasets
            .index_names()
            .iter()
            .any(|n| n == CONTROLLER_UID_INDEX)
    );
    let cancel = CancellationToken::new();
    let task = tokio::spawn(controller.run(
        reconcile,
        |_d, _e: &Never, _ctx| Action::rate_limited(),
        ctx.clone(),
        cancel.clone(),
    ));
    let expected = BTreeMap::from([
        (
            "api".to_owned(),
            vec!["cm/api-settings".to_owned(), "rs/api-1".to_owned()],
        ),
        (
            "web".to_owned(),
            vec![
                "cm/web-flags".to_owned(),
                "cm/web-settings".to_owned(),
                "rs/web-1".to_owned(),
                "rs/web-2".to_owned(),
            ],
        ),
    ]);
    for _ in 0..500 {
        if *ctx.seen.lock().unwrap() == expected {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(*ctx.seen.lock().unwrap(), expected);
    cancel.cancel();
    task.await.unwrap().unwrap();
    factory.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_index_name_taken_twice_is_refused_by_name() {
    let fake = FakeApi::new();
    let factory = SharedInformerFactory::new(fake.client(), Duration::from_secs(3600));
    // The controller-UID index: declared by both, added once.
    let _first = Controller::<Deployment>::new(&factory)
        .owns::<ReplicaSet>()
        .index::<ReplicaSet>(CONTROLLER_UID_INDEX, by_controller_uid);
    let second = Controller::<Deployment>::named(&factory, "second")
        .owns::<ReplicaSet>()
        .index::<ReplicaSet>(CONTROLLER_UID_INDEX, by_controller_uid)
        .index::<ConfigMap>("by-app", by_app)
        .index::<ConfigMap>("by-app", by_app);
    let err = second
        .run(
            |_d, _ctx: Arc<()>| async { Ok::<_, Never>(Action::await_change()) },
            |_d, _e: &Never, _ctx| Action::rate_limited(),
            Arc::new(()),
            CancellationToken::new(),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&err, RunError::Index { resource: "ConfigMap", index, .. } if index == "by-app"),
        "{err:?}"
    );
    let message = err.to_string();
    assert!(
        message.contains("second") && message.contains("by-app") && message.contains("ConfigMap"),
        "{message}"
    );
    factory.shutdown().await;
}

#[tokio::test]
async fn without_the_index_a_scan_of_the_namespace_finds_the_same() {
    let web = Deployment {
        metadata: ObjectMeta {
            uid: Some("u-web".into()),
            ..meta("web", &[])
        },
        ..Default::default()
    };
    let mut elsewhere = controlled("web-elsewhere", &web);
    elsewhere.metadata.namespace = Some("other".into());
    let plain: Store<ReplicaSet> = Store::new();
    let indexed: Store<ReplicaSet> = Store::new();
    indexed
        .add_indexers([(
            CONTROLLER_UID_INDEX.to_owned(),
            Arc::new(by_controller_uid::<ReplicaSet>) as kctrl_informer::IndexFn<ReplicaSet>,
        )])
        .unwrap();
    for rs in [
        controlled("web-1", &web),
        elsewhere,
        ReplicaSet {
            metadata: meta("stray", &[]),
            ..Default::default()
        },
    ] {
        plain.insert(Arc::new(rs.clone()));
        indexed.insert(Arc::new(rs));
    }
    let names = |found: Vec<Arc<ReplicaSet>>| -> Vec<String> {
        let mut n: Vec<String> = found
            .iter()
            .filter_map(|r| r.metadata.name.clone())
            .collect();
        n.sort();
        n
    };
    // Both stay in the owner's namespace (a controller reference across namespaces is not
    // valid).
    assert_eq!(names(controlled_by(&plain, &web)), ["web-1"]);
    assert_eq!(names(controlled_by(&indexed, &web)), ["web-1"]);
}

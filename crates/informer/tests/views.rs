//! A typed view and a metadata-only informer behave exactly as the full type's informer:
//! the same notifications, in the same order, through live events, a cut watch, a 410 after
//! compaction with the relist that follows (deletions reported as final state unknown), on
//! the in-memory API server, which encodes and decodes every object as JSON.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    FieldsV1, ManagedFieldsEntry, ObjectMeta, OwnerReference,
};
use kctrl_client::{Api, DeleteParams, ObjectMetaAccess, PartialObjectMetadata, PostParams};
use kctrl_fake::FakeApi;
use kctrl_informer::{
    DeletedObject, EventHandlerFns, ListWatch, SharedInformer, SharedInformerFactory,
    SharedInformerOptions,
};
use serde::Deserialize;
use tokio_util::sync::CancellationToken;

/// What a Deployment controller reads of a Pod.
#[derive(Clone, Debug, Deserialize)]
struct PodView {
    #[serde(deserialize_with = "kctrl_client::metadata_without_managed_fields")]
    metadata: ObjectMeta,
    #[serde(default)]
    status: Option<PodStatusView>,
}

#[derive(Clone, Debug, Deserialize)]
struct PodStatusView {
    phase: Option<String>,
}

kctrl_client::resource_view!(PodView => Pod);

/// Every notification a handler received, one line each: `ADD ns/name rv`, `UPDATE ...`,
/// `DELETE ...`, or `DELETE? ...` for a deletion a relist inferred.
#[derive(Clone, Default)]
struct Journal(Arc<Mutex<Vec<String>>>);

impl Journal {
    fn entries(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }

    fn handler<K>(&self) -> EventHandlerFns<K>
    where
        K: k8s_openapi::Metadata<Ty: ObjectMetaAccess> + Send + Sync + 'static,
    {
        fn line(tag: &str, m: &impl ObjectMetaAccess) -> String {
            format!(
                "{tag} {}/{} {}",
                m.namespace().unwrap_or_default(),
                m.name().unwrap_or_default(),
                m.resource_version().unwrap_or_default()
            )
        }
        let (a, u, d) = (self.0.clone(), self.0.clone(), self.0.clone());
        EventHandlerFns::new()
            .on_add(move |o: &Arc<K>, _| a.lock().unwrap().push(line("ADD", o.metadata())))
            .on_update(move |_, n: &Arc<K>| u.lock().unwrap().push(line("UPDATE", n.metadata())))
            .on_delete(move |o: &DeletedObject<K>| {
                let tag = if o.is_final_state_unknown() {
                    "DELETE?"
                } else {
                    "DELETE"
                };
                d.lock().unwrap().push(line(tag, o.object().metadata()))
            })
    }
}

fn pod(name: &str, phase: &str) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some("ns".to_owned()),
            labels: Some(BTreeMap::from([("app".to_owned(), "web".to_owned())])),
            owner_references: Some(vec![OwnerReference {
                api_version: "apps/v1".to_owned(),
                kind: "ReplicaSet".to_owned(),
                name: "web-abc".to_owned(),
                uid: "rs-uid".to_owned(),
                controller: Some(true),
                block_owner_deletion: Some(true),
            }]),
            managed_fields: Some(vec![ManagedFieldsEntry {
                manager: Some("kube-controller-manager".to_owned()),
                operation: Some("Update".to_owned()),
                fields_type: Some("FieldsV1".to_owned()),
                fields_v1: Some(FieldsV1(
                    serde_json::json!({"f:metadata": {"f:labels": {}}}),
                )),
                ..Default::default()
            }]),
            ..Default::default()
        },
        spec: Some(PodSpec {
            containers: vec![Container {
                name: "c".to_owned(),
                image: Some("registry.k8s.io/pause:3.10".to_owned()),
                ..Default::default()
            }],
            ..Default::default()
        }),
        status: Some(PodStatus {
            phase: Some(phase.to_owned()),
            ..Default::default()
        }),
    }
}

/// Waits (on the paused clock) until `done` holds, or fails after a minute of virtual time.
async fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    for _ in 0..6000 {
        if done() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("timed out waiting for {what}");
}

#[tokio::test(start_paused = true)]
async fn views_and_metadata_informers_see_what_the_full_informer_sees() {
    let fake = FakeApi::new();
    for i in 0..3 {
        fake.add(&pod(&format!("p{i}"), "Pending")).unwrap();
    }
    let client = fake.client();
    let full = SharedInformer::new(
        ListWatch::new(Api::<Pod>::all(client.clone())),
        SharedInformerOptions::default(),
    );
    let view = SharedInformer::new(
        ListWatch::new(Api::<PodView>::all(client.clone())),
        SharedInformerOptions::default(),
    );
    let meta = SharedInformer::new(
        ListWatch::new(Api::<PartialObjectMetadata<Pod>>::all(client.clone())),
        SharedInformerOptions::default(),
    );
    let (jf, jv, jm) = (Journal::default(), Journal::default(), Journal::default());
    full.add_event_handler(jf.handler()).unwrap();
    view.add_event_handler(jv.handler()).unwrap();
    meta.add_event_handler(jm.handler()).unwrap();
    let cancel = CancellationToken::new();
    let tasks = [
        tokio::spawn({
            let (i, c) = (full.clone(), cancel.clone());
            async move { i.run(c).await }
        }),
        tokio::spawn({
            let (i, c) = (view.clone(), cancel.clone());
            async move { i.run(c).await }
        }),
        tokio::spawn({
            let (i, c) = (meta.clone(), cancel.clone());
            async move { i.run(c).await }
        }),
    ];
    eventually("the three caches to sync and watch", || {
        full.has_synced() && view.has_synced() && meta.has_synced() && fake.watcher_count() == 3
    })
    .await;

    // Live events.
    let pods = Api::<Pod>::namespaced(client.clone(), "ns");
    let mut p1 = pods.get("p1").await.unwrap();
    p1.status.as_mut().unwrap().phase = Some("Running".to_owned());
    pods.update_status(&PostParams::default(), &p1)
        .await
        .unwrap();
    pods.delete("p2", &DeleteParams::default()).await.unwrap();
    pods.create(&PostParams::default(), &pod("p3", "Pending"))
        .await
        .unwrap();
    eventually("the live events", || jm.entries().len() == 6).await;

    // Watches cut; while disconnected p0 goes away and p4 comes; the history is compacted,
    // so resuming gets 410 and each informer must relist.
    fake.close_watches();
    pods.delete("p0", &DeleteParams::default()).await.unwrap();
    pods.create(&PostParams::default(), &pod("p4", "Pending"))
        .await
        .unwrap();
    fake.compact(fake.resource_version());
    eventually("the relist", || {
        [&jf, &jv, &jm].iter().all(|j| {
            let e = j.entries();
            e.iter().any(|l| l.starts_with("DELETE? ns/p0 "))
                && e.iter().any(|l| l.starts_with("ADD ns/p4 "))
        })
    })
    .await;
    // The relist also re-reports the survivors; let every handler catch up.
    eventually("the same journal everywhere", || {
        let f = jf.entries();
        f == jv.entries() && f == jm.entries()
    })
    .await;

    let journal = jf.entries();
    assert!(journal[..3].iter().all(|l| l.starts_with("ADD ns/p")));
    assert!(journal.iter().any(|l| l.starts_with("UPDATE ns/p1 ")));
    assert!(journal.iter().any(|l| l.starts_with("DELETE ns/p2 ")));
    assert!(journal.iter().any(|l| l.starts_with("ADD ns/p3 ")));

    // What each cache holds: the view has the phase and no managedFields; the metadata
    // informer keeps metadata as the server sent it; all three agree on the keys.
    let keys = |mut k: Vec<String>| {
        k.sort();
        k
    };
    assert_eq!(
        keys(full.store().list_keys()),
        vec!["ns/p1", "ns/p3", "ns/p4"]
    );
    assert_eq!(
        keys(view.store().list_keys()),
        keys(full.store().list_keys())
    );
    assert_eq!(
        keys(meta.store().list_keys()),
        keys(full.store().list_keys())
    );
    let v1 = view.store().get("ns/p1").unwrap();
    assert_eq!(
        v1.status.as_ref().unwrap().phase.as_deref(),
        Some("Running")
    );
    assert!(v1.metadata.managed_fields.is_none());
    assert_eq!(
        v1.metadata.owner_references.as_ref().unwrap()[0].name,
        "web-abc"
    );
    // The metadata informer holds every field of the full object's metadata.
    let m1 = meta.store().get("ns/p1").unwrap();
    assert_eq!(
        m1.metadata.to_object_meta(),
        full.store().get("ns/p1").unwrap().metadata
    );
    assert!(!m1.metadata.managed_fields().is_empty());

    cancel.cancel();
    for t in tasks {
        t.await.unwrap();
    }
}

#[tokio::test(start_paused = true)]
async fn the_factory_serves_a_metadata_informer_beside_the_full_one() {
    let fake = FakeApi::new();
    fake.add(&pod("a", "Running")).unwrap();
    let factory = SharedInformerFactory::new(fake.client(), Duration::ZERO);
    let full = factory.informer::<Pod>();
    let meta = factory.metadata_informer::<Pod>();
    let lister = factory.metadata_lister::<Pod>();
    let cancel = CancellationToken::new();
    factory.start(&cancel);
    let synced = factory.wait_for_cache_sync(&cancel).await;
    assert_eq!(synced.len(), 2, "two informers: {synced:?}");
    assert!(synced.values().all(|s| *s));
    assert!(full.has_synced() && meta.has_synced());
    let a = lister.get("ns", "a").unwrap();
    assert_eq!(a.metadata.labels().get("app"), Some("web"));
    // The metadata informer's requests asked for PartialObjectMetadata, the full one's did
    // not (list or streaming watch, whichever the reflector used).
    let asked: Vec<_> = fake
        .actions()
        .iter()
        .map(|a| a.request().representation)
        .collect();
    assert!(!asked.is_empty());
    let partial = asked
        .iter()
        .filter(|r| **r == kctrl_client::Representation::PartialObjectMetadata)
        .count();
    assert_eq!(
        partial * 2,
        asked.len(),
        "half the requests each: {asked:?}"
    );
    cancel.cancel();
    factory.shutdown().await;
}

//! Dynamic informers (client-go's `dynamicinformer`): `DynamicObject`s of a resource named at
//! run time, over the fake API server — a built-in resource (ConfigMaps) and a custom
//! resource — seeing adds, updates, deletes and a relist, on tokio's paused clock.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use kctrl_client::{
    Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams, ResourceRef,
    Scope,
};
use kctrl_fake::{FakeApi, Reaction, ResourceSpec, errors};
use kctrl_informer::{
    DeletedObject, DynamicSharedInformerFactory, EventHandlerFns, SharedInformerFactory,
};
use serde_json::json;
use tokio_util::sync::CancellationToken;

type Log = Arc<Mutex<Vec<String>>>;

/// A handler logging `verb:name:resourceVersion` (`delete?` for a relist's
/// final-state-unknown deletion).
fn recorder(log: &Log) -> EventHandlerFns<DynamicObject> {
    let (a, u, d) = (log.clone(), log.clone(), log.clone());
    let id = |o: &DynamicObject| {
        format!(
            "{}:{}",
            o.metadata.name.as_deref().unwrap_or_default(),
            o.metadata.resource_version.as_deref().unwrap_or_default()
        )
    };
    EventHandlerFns::new()
        .on_add(move |o: &Arc<DynamicObject>, _| a.lock().unwrap().push(format!("add:{}", id(o))))
        .on_update(move |_, n| u.lock().unwrap().push(format!("update:{}", id(n))))
        .on_delete(move |del| {
            let verb = match del {
                DeletedObject::Known(_) => "delete",
                DeletedObject::FinalStateUnknown { .. } => "delete?",
            };
            d.lock()
                .unwrap()
                .push(format!("{verb}:{}", id(del.object())));
        })
}

/// Waits (on the paused clock) until the log has `n` entries; returns them.
async fn wait_for(log: &Log, n: usize) -> Vec<String> {
    for _ in 0..6000 {
        if log.lock().unwrap().len() >= n {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    let got = log.lock().unwrap().clone();
    assert_eq!(got.len(), n, "{got:?}");
    got
}

fn rv(o: &DynamicObject) -> String {
    o.metadata.resource_version.clone().unwrap_or_default()
}

/// Adds, updates, deletes, then a relist that finds one object gone and one new, for any
/// resource whose objects carry a `data` or `spec` map.
async fn exercise(fake: &FakeApi, resource: &ResourceRef, body_field: &str) {
    let api = Api::<DynamicObject>::namespaced_dynamic(fake.client(), "default", resource);
    let object = |name: &str, value: &str| {
        let mut o = DynamicObject::new(name, resource);
        o.data.insert(body_field.into(), json!({ "value": value }));
        o
    };
    let a = api
        .create(&PostParams::default(), &object("a", "1"))
        .await
        .unwrap();

    let factory = DynamicSharedInformerFactory::new(fake.client(), Duration::ZERO);
    let informer = factory.for_resource(resource);
    assert_eq!(informer.name(), resource.qualified_name());
    let log: Log = Arc::default();
    informer.add_event_handler(recorder(&log)).unwrap();
    let cancel = CancellationToken::new();
    factory.start(&cancel);
    let synced = factory.wait_for_cache_sync(&cancel).await;
    assert_eq!(synced.get(resource), Some(&true), "{synced:?}");
    assert_eq!(wait_for(&log, 1).await, [format!("add:a:{}", rv(&a))]);

    // Cached objects are whole: type, metadata and the rest.
    let cached = factory.lister(resource).get("default", "a").unwrap();
    assert_eq!(cached.api_version, resource.api_version());
    assert_eq!(cached.kind, resource.kind);
    assert_eq!(cached.data[body_field]["value"], "1");

    // Watch: add, update (a merge patch), delete.
    let b = api
        .create(&PostParams::default(), &object("b", "1"))
        .await
        .unwrap();
    let patch = Patch::Merge(json!({ body_field: { "value": "2" } }));
    let a2 = api
        .patch("a", &PatchParams::default(), &patch)
        .await
        .unwrap();
    api.delete("b", &DeleteParams::default()).await.unwrap();
    let got = wait_for(&log, 4).await;
    assert_eq!(got[1], format!("add:b:{}", rv(&b)));
    assert_eq!(got[2], format!("update:a:{}", rv(&a2)));
    assert!(got[3].starts_with("delete:b:"), "{got:?}");
    let cached = factory.lister(resource).get("default", "a").unwrap();
    assert_eq!(cached.data[body_field]["value"], "2");
    assert!(factory.lister(resource).get("default", "b").is_none());

    // A relist: every watch is refused with 410 Expired (as after a compaction), the open
    // one is dropped, and meanwhile "a" is deleted and "c" created: only a relist sees them.
    fake.prepend_reactor("watch", &resource.plural, |_| {
        Reaction::Error(errors::expired("too old resource version"))
    });
    fake.close_watches();
    let lists_before = list_calls(fake, resource);
    let c = api
        .create(&PostParams::default(), &object("c", "1"))
        .await
        .unwrap();
    api.delete("a", &DeleteParams::default()).await.unwrap();
    let got = wait_for(&log, 6).await;
    let mut relist: Vec<_> = got[4..].to_vec();
    relist.sort();
    assert_eq!(
        relist,
        [
            format!("add:c:{}", rv(&c)),
            format!("delete?:a:{}", rv(&a2)),
        ]
    );
    assert!(list_calls(fake, resource) > lists_before, "relisted");
    let names: Vec<_> = factory
        .lister(resource)
        .list(&Default::default())
        .iter()
        .map(|o| o.metadata.name.clone().unwrap())
        .collect();
    assert_eq!(names, ["c"]);
    fake.clear_reactors();

    cancel.cancel();
    factory.shutdown().await;
}

fn list_calls(fake: &FakeApi, resource: &ResourceRef) -> usize {
    fake.actions()
        .iter()
        .filter(|a| a.verb() == "list" && a.resource().plural == resource.plural)
        .count()
}

#[tokio::test(start_paused = true)]
async fn dynamic_informer_over_configmaps() {
    let fake = FakeApi::new();
    let configmaps = ResourceRef::new("", "v1", "configmaps", "ConfigMap", Scope::Namespaced);
    exercise(&fake, &configmaps, "data").await;
}

#[tokio::test(start_paused = true)]
async fn dynamic_informer_over_a_custom_resource() {
    let fake = FakeApi::new();
    let crontabs = ResourceRef::new(
        "stable.example.com",
        "v1",
        "crontabs",
        "CronTab",
        Scope::Namespaced,
    );
    fake.register(ResourceSpec::new(crontabs.clone()));
    exercise(&fake, &crontabs, "spec").await;
}

#[tokio::test(start_paused = true)]
async fn one_informer_per_resource_and_typed_api_is_refused() {
    let fake = FakeApi::new();
    let configmaps = ResourceRef::new("", "v1", "configmaps", "ConfigMap", Scope::Namespaced);
    let secrets = ResourceRef::new("", "v1", "secrets", "Secret", Scope::Namespaced);
    let factory = SharedInformerFactory::builder(fake.client(), Duration::ZERO)
        .namespace("prod")
        .build_dynamic();
    let a = factory.for_resource(&configmaps);
    let b = factory.for_resource(&configmaps);
    a.add_event_handler(EventHandlerFns::new()).unwrap();
    assert_eq!(b.handler_count(), 1, "the same informer");
    assert_eq!(factory.for_resource(&secrets).handler_count(), 0);

    // The namespace option applies: only prod's objects are listed.
    for ns in ["prod", "dev"] {
        let mut cm = DynamicObject::new("x", &configmaps);
        cm.metadata.namespace = Some(ns.into());
        Api::<DynamicObject>::namespaced_dynamic(fake.client(), ns, &configmaps)
            .create(&PostParams::default(), &cm)
            .await
            .unwrap();
    }
    let cancel = CancellationToken::new();
    factory.start(&cancel);
    let synced = factory.wait_for_cache_sync(&cancel).await;
    assert_eq!(synced.len(), 2);
    assert!(synced.values().all(|s| *s));
    let keys = a.store().list_keys();
    assert_eq!(keys, ["prod/x"]);
    cancel.cancel();
    factory.shutdown().await;

    // An Api<DynamicObject> built the typed way has no resource to address.
    let typed = Api::<DynamicObject>::all(fake.client());
    let err = typed.list(&ListParams::default()).await.unwrap_err();
    assert!(err.to_string().contains("namespaced_dynamic"), "{err}");
    assert!(typed.get_opt("x").await.is_err());
}

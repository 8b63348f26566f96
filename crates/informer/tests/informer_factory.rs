//! `SharedInformerFactory` over the in-memory fake API (client-go's `informers/factory.go`
//! behaviour: one informer per type, namespace and list-option restrictions, start of
//! not-yet-started informers only, sync map, shutdown).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kctrl_client::{Api, PostParams};
use kctrl_fake::FakeApi;
use kctrl_informer::{EventHandlerFns, ReflectorOptions, SharedInformerFactory, Transform};
use tokio_util::sync::CancellationToken;

fn pod(ns: &str, name: &str, app: &str) -> Pod {
    Pod {
        metadata: ObjectMeta {
            namespace: Some(ns.to_owned()),
            name: Some(name.to_owned()),
            labels: Some(BTreeMap::from([("app".to_owned(), app.to_owned())])),
            ..Default::default()
        },
        ..Default::default()
    }
}

fn names(pods: Vec<Arc<Pod>>) -> Vec<String> {
    let mut v: Vec<_> = pods
        .iter()
        .map(|p| kctrl_informer::key_of(p.as_ref()))
        .collect();
    v.sort();
    v
}

fn no_watch_list() -> ReflectorOptions {
    ReflectorOptions {
        use_watch_list: false,
        ..Default::default()
    }
}

#[tokio::test]
async fn one_informer_per_type() {
    let fake = FakeApi::new();
    let factory = SharedInformerFactory::new(fake.client(), Duration::ZERO);
    let a = factory.informer::<Pod>();
    let b = factory.informer::<Pod>();
    a.add_event_handler(EventHandlerFns::new()).unwrap();
    assert_eq!(b.handler_count(), 1, "the same informer is returned");
    assert_eq!(factory.informer::<ConfigMap>().handler_count(), 0);
    assert!(
        a.store().by_index("namespace", "x").is_ok(),
        "the namespace index is there by default"
    );
}

#[tokio::test(start_paused = true)]
async fn namespace_and_tweak_restrict_the_cache() {
    let fake = FakeApi::new();
    for (ns, name, app) in [("a", "p1", "web"), ("a", "p2", "db"), ("b", "p3", "web")] {
        fake.add(&pod(ns, name, app)).unwrap();
    }
    let factory = SharedInformerFactory::builder(fake.client(), Duration::ZERO)
        .namespace("a")
        .tweak_list_params(|p| p.label_selector = Some("app=web".to_owned()))
        .reflector_options(no_watch_list())
        .build();
    let lister = factory.lister::<Pod>();
    let added = Arc::new(Mutex::new(Vec::new()));
    {
        let added = added.clone();
        factory
            .informer::<Pod>()
            .add_event_handler(EventHandlerFns::new().on_add(move |p: &Arc<Pod>, _| {
                added
                    .lock()
                    .unwrap()
                    .push(kctrl_informer::key_of(p.as_ref()));
            }))
            .unwrap();
    }
    let cancel = CancellationToken::new();
    factory.start(&cancel);
    let synced = factory.wait_for_cache_sync(&cancel).await;
    assert_eq!(
        synced,
        [(std::any::type_name::<Pod>(), true)].into_iter().collect()
    );
    assert_eq!(names(lister.store().list()), ["a/p1"]);
    assert!(lister.get("a", "p1").is_some());

    // A new matching object in the namespace arrives by watch; others never do.
    let pods = Api::<Pod>::all(fake.client());
    for (ns, name, app) in [("a", "p4", "web"), ("a", "p5", "db"), ("b", "p6", "web")] {
        pods.create(&PostParams::default(), &pod(ns, name, app))
            .await
            .unwrap();
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(names(lister.store().list()), ["a/p1", "a/p4"]);
    assert_eq!(*added.lock().unwrap(), ["a/p1", "a/p4"]);

    cancel.cancel();
    factory.shutdown().await;
    assert!(factory.informer::<Pod>().is_stopped());
}

#[tokio::test(start_paused = true)]
async fn start_starts_only_new_informers_and_nothing_after_shutdown() {
    let fake = FakeApi::new();
    let factory = SharedInformerFactory::builder(fake.client(), Duration::from_secs(30))
        .custom_resync::<ConfigMap>(Duration::from_secs(5))
        .reflector_options(no_watch_list())
        .build();
    let pods = factory.informer::<Pod>();
    let cancel = CancellationToken::new();
    factory.start(&cancel);
    assert!(pods.has_started());
    assert_eq!(pods.resync_check_period(), Duration::from_secs(30));

    // Created after start: runs from the next start; already running ones are untouched.
    let config_maps = factory.informer::<ConfigMap>();
    assert_eq!(config_maps.resync_check_period(), Duration::from_secs(5));
    assert!(!config_maps.has_started());
    factory.start(&cancel);
    assert!(config_maps.has_started());
    let synced = factory.wait_for_cache_sync(&cancel).await;
    assert_eq!(synced.len(), 2);
    assert!(synced.values().all(|s| *s));

    cancel.cancel();
    factory.shutdown().await;
    assert!(pods.is_stopped() && config_maps.is_stopped());

    // After shutdown, start does nothing.
    factory.start(&CancellationToken::new());
    assert!(
        factory
            .wait_for_cache_sync(&CancellationToken::new())
            .await
            .values()
            .all(|s| *s)
    );
}

#[tokio::test(start_paused = true)]
async fn transform_applies_per_type() {
    let fake = FakeApi::new();
    fake.add(&pod("a", "p1", "web")).unwrap();
    let strip: Transform<Pod> = Arc::new(|mut p: Pod| {
        p.metadata.labels = None;
        p.metadata.managed_fields = None;
        p
    });
    let factory = SharedInformerFactory::builder(fake.client(), Duration::ZERO)
        .transform::<Pod>(strip)
        .reflector_options(no_watch_list())
        .build();
    let lister = factory.lister::<Pod>();
    let cancel = CancellationToken::new();
    factory.start(&cancel);
    assert!(
        factory
            .wait_for_cache_sync(&cancel)
            .await
            .values()
            .all(|s| *s)
    );
    assert_eq!(lister.get("a", "p1").unwrap().metadata.labels, None);
    cancel.cancel();
    factory.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn wait_for_cache_sync_reports_unsynced_on_cancel() {
    let fake = FakeApi::new();
    // Every list fails: the informer never syncs.
    fake.prepend_reactor("list", "pods", |_| {
        kctrl_fake::Reaction::Error(kctrl_fake::errors::internal_error("boom"))
    });
    let factory = SharedInformerFactory::builder(fake.client(), Duration::ZERO)
        .reflector_options(no_watch_list())
        .build();
    factory.informer::<Pod>();
    let run = CancellationToken::new();
    factory.start(&run);
    let wait = CancellationToken::new();
    let waiter = {
        let (factory, wait) = (factory.clone(), wait.clone());
        tokio::spawn(async move { factory.wait_for_cache_sync(&wait).await })
    };
    tokio::time::sleep(Duration::from_secs(10)).await;
    wait.cancel();
    let synced = waiter.await.unwrap();
    assert_eq!(
        synced,
        [(std::any::type_name::<Pod>(), false)]
            .into_iter()
            .collect()
    );
    run.cancel();
    factory.shutdown().await;
}

// `without_managed_fields`: every informer of the factory (full and metadata-only) caches
// objects without managedFields, through the initial list and through watch events; a
// factory without it keeps them.
#[tokio::test(start_paused = true)]
async fn without_managed_fields_applies_to_every_informer_and_event() {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;
    let with_fields = |name: &str| {
        let mut p = pod("a", name, "web");
        p.metadata.managed_fields = Some(vec![ManagedFieldsEntry {
            manager: Some("kubectl".to_owned()),
            operation: Some("Update".to_owned()),
            ..Default::default()
        }]);
        p
    };
    for trim in [false, true] {
        let fake = FakeApi::new();
        fake.add(&with_fields("listed")).unwrap();
        let mut builder = SharedInformerFactory::builder(fake.client(), Duration::ZERO)
            .reflector_options(no_watch_list());
        if trim {
            builder = builder.without_managed_fields();
        }
        let factory = builder.build();
        let lister = factory.lister::<Pod>();
        let metadata = factory.metadata_lister::<Pod>();
        let cancel = CancellationToken::new();
        factory.start(&cancel);
        factory.wait_for_cache_sync(&cancel).await;
        Api::<Pod>::all(fake.client())
            .create(&PostParams::default(), &with_fields("watched"))
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        for name in ["listed", "watched"] {
            let full = lister.get("a", name).expect("cached");
            assert_eq!(full.metadata.managed_fields.is_some(), !trim, "{name}");
            assert_eq!(full.metadata.labels.as_ref().unwrap()["app"], "web");
            let meta = metadata.get("a", name).expect("cached");
            assert_eq!(!meta.metadata.managed_fields().is_empty(), !trim, "{name}");
        }
        cancel.cancel();
        factory.shutdown().await;
    }
}

/// The factory owns its informers' lifetime: `shutdown` stops them even if the token they
/// were started with never fires, and `start_until_shutdown` ties them to the factory alone.
#[tokio::test(start_paused = true)]
async fn shutdown_stops_informers_whatever_token_started_them() {
    let fake = FakeApi::new();
    let factory = SharedInformerFactory::builder(fake.client(), Duration::ZERO)
        .reflector_options(no_watch_list())
        .build();
    let pods = factory.informer::<Pod>();
    let never = CancellationToken::new();
    factory.start(&never);
    let config_maps = factory.informer::<ConfigMap>();
    factory.start_until_shutdown();
    assert!(config_maps.has_started());
    let synced = factory.wait_for_cache_sync(&never).await;
    assert!(synced.values().all(|s| *s), "{synced:?}");
    tokio::time::timeout(Duration::from_secs(60), factory.shutdown())
        .await
        .expect("shutdown stops the informers");
    assert!(pods.is_stopped() && config_maps.is_stopped());
    assert_eq!(factory.failure(), None);
}

/// A token given to `start` still stops the informers it started, and only those.
#[tokio::test(start_paused = true)]
async fn start_token_stops_only_its_informers() {
    let fake = FakeApi::new();
    let factory = SharedInformerFactory::builder(fake.client(), Duration::ZERO)
        .reflector_options(no_watch_list())
        .build();
    let pods = factory.informer::<Pod>();
    let first = CancellationToken::new();
    factory.start(&first);
    let config_maps = factory.informer::<ConfigMap>();
    factory.start_until_shutdown();
    factory.wait_for_cache_sync(&first).await;
    first.cancel();
    tokio::time::timeout(Duration::from_secs(60), pods.stopped())
        .await
        .expect("the token stops the informer it started");
    assert!(!config_maps.is_stopped());
    factory.shutdown().await;
    assert!(config_maps.is_stopped());
}

/// An informer that a panic stopped is reported by the factory.
#[tokio::test(start_paused = true)]
async fn factory_reports_a_failed_informer() {
    let fake = FakeApi::new();
    fake.prepend_reactor("list", "pods", |_| panic!("the pods list exploded"));
    let factory = SharedInformerFactory::builder(fake.client(), Duration::ZERO)
        .reflector_options(no_watch_list())
        .build();
    let pods = factory.informer::<Pod>();
    let config_maps = factory.informer::<ConfigMap>();
    factory.start_until_shutdown();
    let failure = tokio::time::timeout(Duration::from_secs(60), factory.failed())
        .await
        .expect("the failure is reported");
    assert!(
        failure.panic.contains("the pods list exploded"),
        "{failure}"
    );
    assert_eq!(factory.failure(), Some(failure));
    assert!(pods.is_stopped() && !pods.has_synced());
    let synced = factory.wait_for_cache_sync(&CancellationToken::new()).await;
    let unsynced: Vec<_> = synced
        .iter()
        .filter(|(_, s)| !**s)
        .map(|(t, _)| *t)
        .collect();
    assert_eq!(unsynced, [std::any::type_name::<Pod>()], "{synced:?}");
    assert!(config_maps.has_synced() && !config_maps.is_stopped());
    factory.shutdown().await;
}

/// A handler whose `on_add` tells `entered` it was called, then blocks until `gate` says go
/// (or is dropped).
fn blocking_handler(
    entered: tokio::sync::mpsc::UnboundedSender<()>,
    gate: std::sync::mpsc::Receiver<()>,
) -> EventHandlerFns<ConfigMap> {
    let gate = Mutex::new(gate);
    EventHandlerFns::new().on_add(move |_, _| {
        let _ = entered.send(());
        let _ = gate.lock().unwrap_or_else(|p| p.into_inner()).recv();
    })
}

async fn config_map(fake: &FakeApi, name: &str) {
    let api: Api<ConfigMap> = Api::namespaced(fake.client(), "ns");
    api.create(
        &PostParams::default(),
        &ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                ..Default::default()
            },
            ..Default::default()
        },
    )
    .await
    .unwrap();
}

/// A failure is reported as soon as the informer stops on it, even while one of its
/// handlers is stuck in a delivery (the informer's task only ends once that returns).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failure_is_reported_while_a_handler_is_blocked() {
    let fake = FakeApi::new();
    config_map(&fake, "one").await;
    let factory = SharedInformerFactory::builder(fake.client(), Duration::ZERO)
        .reflector_options(no_watch_list())
        .build();
    let informer = factory.informer::<ConfigMap>();
    let (entered_tx, mut entered) = tokio::sync::mpsc::unbounded_channel();
    let (gate, gate_rx) = std::sync::mpsc::channel();
    informer
        .add_event_handler(blocking_handler(entered_tx, gate_rx))
        .unwrap();
    factory.start_until_shutdown();
    tokio::time::timeout(Duration::from_secs(60), entered.recv())
        .await
        .expect("the handler is called");
    // The handler is blocked now; the relist finds the list handler panicking.
    fake.prepend_reactor("list", "configmaps", |_| panic!("the list exploded"));
    fake.prepend_reactor("watch", "configmaps", |_| panic!("the watch exploded"));
    fake.close_watches();
    let failure = tokio::time::timeout(Duration::from_secs(60), factory.failed())
        .await
        .expect("the failure is reported while the handler is still blocked");
    assert!(failure.panic.contains("exploded"), "{failure}");
    gate.send(()).unwrap();
    drop(gate);
    factory.shutdown().await;
}

/// A second `shutdown` made while the first waits for the informers waits as well.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_concurrent_shutdown_waits_for_the_informers_too() {
    let fake = FakeApi::new();
    config_map(&fake, "one").await;
    let factory = SharedInformerFactory::builder(fake.client(), Duration::ZERO)
        .reflector_options(no_watch_list())
        .build();
    let informer = factory.informer::<ConfigMap>();
    let (entered_tx, mut entered) = tokio::sync::mpsc::unbounded_channel();
    let (gate, gate_rx) = std::sync::mpsc::channel();
    informer
        .add_event_handler(blocking_handler(entered_tx, gate_rx))
        .unwrap();
    factory.start_until_shutdown();
    tokio::time::timeout(Duration::from_secs(60), entered.recv())
        .await
        .expect("the handler is called");
    let first = tokio::spawn({
        let factory = factory.clone();
        async move { factory.shutdown().await }
    });
    // The informer has stopped; its task waits for the blocked delivery.
    tokio::time::timeout(Duration::from_secs(60), informer.stopped())
        .await
        .expect("the informer stops");
    let second = factory.shutdown();
    tokio::pin!(second);
    assert!(
        futures::poll!(second.as_mut()).is_pending(),
        "a second shutdown returned while a delivery was in flight"
    );
    gate.send(()).unwrap();
    drop(gate);
    second.await;
    first.await.unwrap();
}

/// Informers never started before the factory shut down are stopped: they never sync,
/// refuse handlers, and so do informers first asked for afterwards.
#[tokio::test(start_paused = true)]
async fn informers_not_started_before_shutdown_are_stopped() {
    let fake = FakeApi::new();
    let factory = SharedInformerFactory::builder(fake.client(), Duration::ZERO)
        .reflector_options(no_watch_list())
        .build();
    let pods = factory.informer::<Pod>();
    let registration = pods.add_event_handler(EventHandlerFns::new()).unwrap();
    tokio::time::timeout(Duration::from_secs(60), factory.shutdown())
        .await
        .expect("shutdown returns");
    assert!(pods.is_stopped());
    let synced = tokio::time::timeout(
        Duration::from_secs(60),
        kctrl_informer::wait_for_cache_sync("test", &CancellationToken::new(), &[&registration]),
    )
    .await
    .expect("the wait ends");
    assert!(!synced);
    assert!(pods.add_event_handler(EventHandlerFns::new()).is_err());

    let config_maps = factory.informer::<ConfigMap>();
    assert!(config_maps.is_stopped());
    assert!(
        config_maps
            .add_event_handler(EventHandlerFns::new())
            .is_err()
    );
    factory.start_until_shutdown();
    let synced = tokio::time::timeout(
        Duration::from_secs(60),
        kctrl_informer::wait_for_cache_sync("test", &CancellationToken::new(), &[&config_maps]),
    )
    .await
    .expect("the wait ends");
    assert!(!synced);
}

//! The runtime end to end on the in-memory API server: a reconcile that applies an owned
//! ConfigMap per Deployment, owned changes enqueueing the owner, errors and panics retried,
//! the retry limit, predicates, and the shutdown order.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kctrl_client::{Api, Client, DeleteParams, PatchParams, PostParams};
use kctrl_fake::FakeApi;
use kctrl_informer::SharedInformerFactory;
use kctrl_runtime::metrics::ControllerMetrics;
use kctrl_runtime::{Action, Controller, Predicate};
use prometheus_client::registry::Registry;
use tokio_util::sync::CancellationToken;

#[derive(Debug, thiserror::Error)]
enum Error {
    #[error(transparent)]
    Api(#[from] kctrl_client::Error),
    #[error("deployment {0} asks to fail")]
    Asked(String),
}

struct Ctx {
    client: Client,
    reconciles: AtomicUsize,
}

fn deployment(name: &str) -> Deployment {
    Deployment {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("shop".into()),
            ..Default::default()
        },
        ..Default::default()
    }
}

/// Applies ConfigMap `<name>-settings` controlled by the Deployment; a Deployment labelled
/// `fail` fails, one labelled `panic` panics.
async fn reconcile(d: Arc<Deployment>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    ctx.reconciles.fetch_add(1, Ordering::SeqCst);
    let name = d.metadata.name.clone().unwrap_or_default();
    let labels = d.metadata.labels.clone().unwrap_or_default();
    if labels.contains_key("fail") {
        return Err(Error::Asked(name));
    }
    assert!(
        !labels.contains_key("panic"),
        "deployment {name} asks to panic"
    );
    let owner = OwnerReference {
        api_version: "apps/v1".into(),
        kind: "Deployment".into(),
        name: name.clone(),
        uid: d.metadata.uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    };
    let cm = ConfigMap {
        metadata: ObjectMeta {
            name: Some(format!("{name}-settings")),
            owner_references: Some(vec![owner]),
            ..Default::default()
        },
        data: Some(BTreeMap::from([("owner".to_owned(), name)])),
        ..Default::default()
    };
    Api::<ConfigMap>::namespaced(ctx.client.clone(), "shop")
        .apply(&PatchParams::apply("runtime-test"), &cm)
        .await?;
    Ok(Action::await_change())
}

async fn eventually(what: &str, mut check: impl AsyncFnMut() -> bool) {
    for _ in 0..500 {
        if check().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("timed out waiting for {what}");
}

struct Running {
    cancel: CancellationToken,
    task: tokio::task::JoinHandle<Result<(), kctrl_runtime::RunError>>,
    factory: SharedInformerFactory,
}

impl Running {
    async fn stop(self) {
        self.cancel.cancel();
        self.task.await.unwrap().unwrap();
        self.factory.shutdown().await;
    }
}

fn start(
    fake: &FakeApi,
    ctx: Arc<Ctx>,
    configure: impl FnOnce(Controller<Deployment>) -> Controller<Deployment>,
) -> Running {
    let factory = SharedInformerFactory::new(fake.client(), Duration::from_secs(3600));
    let controller = configure(Controller::<Deployment>::new(&factory).owns::<ConfigMap>());
    let cancel = CancellationToken::new();
    let task = tokio::spawn(controller.run(
        reconcile,
        |_d, _err: &Error, _ctx| Action::rate_limited(),
        ctx,
        cancel.clone(),
    ));
    Running {
        cancel,
        task,
        factory,
    }
}

/// An API server holding Deployment `shop/web`, its Deployment and ConfigMap APIs, and a
/// fresh context.
async fn shop_with_web() -> (FakeApi, Api<Deployment>, Api<ConfigMap>, Arc<Ctx>) {
    let fake = FakeApi::new();
    let client = fake.client();
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "shop");
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), "shop");
    deployments
        .create(&PostParams::default(), &deployment("web"))
        .await
        .unwrap();
    let ctx = Arc::new(Ctx {
        client,
        reconciles: AtomicUsize::new(0),
    });
    (fake, deployments, configmaps, ctx)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn owned_objects_are_applied_and_restored() {
    let (fake, deployments, configmaps, ctx) = shop_with_web().await;
    let mut registry = Registry::default();
    let metrics = ControllerMetrics::new(&mut registry);
    let running = start(&fake, ctx.clone(), |c| c.workers(2).metrics(metrics));

    eventually("the ConfigMap of web", async || {
        configmaps.get("web-settings").await.is_ok()
    })
    .await;
    // Deleting the owned object enqueues its owner, which puts it back.
    configmaps
        .delete("web-settings", &DeleteParams::default())
        .await
        .unwrap();
    eventually("web-settings restored", async || {
        configmaps.get("web-settings").await.is_ok()
    })
    .await;
    // A new Deployment gets its own.
    deployments
        .create(&PostParams::default(), &deployment("api"))
        .await
        .unwrap();
    eventually("the ConfigMap of api", async || {
        configmaps.get("api-settings").await.is_ok()
    })
    .await;
    running.stop().await;

    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    assert!(
        text.contains(r#"controller_runtime_max_concurrent_reconciles{controller="deployment"} 2"#),
        "{text}"
    );
    assert!(
        text.contains(r#"controller_runtime_active_workers{controller="deployment"} 0"#),
        "{text}"
    );
    let successes = text
        .lines()
        .find(|l| {
            l.starts_with(
                r#"controller_runtime_reconcile_total{controller="deployment",result="success"}"#,
            )
        })
        .and_then(|l| l.rsplit(' ').next()?.parse::<usize>().ok())
        .unwrap();
    assert!(successes >= 3, "{text}");
    assert_eq!(successes, ctx.reconciles.load(Ordering::SeqCst));
}

/// The owned ConfigMaps from a metadata-only informer: the same owner is enqueued, and the
/// cache holds metadata alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn owned_objects_from_a_metadata_only_informer() {
    let (fake, _deployments, configmaps, ctx) = shop_with_web().await;
    let factory = SharedInformerFactory::new(fake.client(), Duration::from_secs(3600));
    let controller = Controller::<Deployment>::new(&factory).owns_metadata::<ConfigMap>();
    let cancel = CancellationToken::new();
    let task = tokio::spawn(controller.run(
        reconcile,
        |_d, _err: &Error, _ctx| Action::rate_limited(),
        ctx.clone(),
        cancel.clone(),
    ));
    let running = Running {
        cancel,
        task,
        factory: factory.clone(),
    };
    eventually("the ConfigMap of web", async || {
        configmaps.get("web-settings").await.is_ok()
    })
    .await;
    let cached = factory.metadata_informer::<ConfigMap>().store().clone();
    eventually("web-settings in the metadata cache", async || {
        cached.get("shop/web-settings").is_some()
    })
    .await;
    configmaps
        .delete("web-settings", &DeleteParams::default())
        .await
        .unwrap();
    eventually("web-settings restored", async || {
        configmaps.get("web-settings").await.is_ok()
    })
    .await;
    running.stop().await;
    assert!(ctx.reconciles.load(Ordering::SeqCst) >= 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_and_panics_retry_until_the_limit() {
    let fake = FakeApi::new();
    let client = fake.client();
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "shop");
    let mut failing = deployment("failing");
    failing.metadata.labels = Some(BTreeMap::from([("fail".into(), "yes".into())]));
    let mut panicking = deployment("panicking");
    panicking.metadata.labels = Some(BTreeMap::from([("panic".into(), "yes".into())]));
    for d in [&failing, &panicking] {
        deployments.create(&PostParams::default(), d).await.unwrap();
    }
    let ctx = Arc::new(Ctx {
        client: client.clone(),
        reconciles: AtomicUsize::new(0),
    });
    let mut registry = Registry::default();
    let metrics = ControllerMetrics::new(&mut registry);
    // Two retries each: 3 reconciles per key, then dropped. The default limiter's backoff
    // starts at 5 ms, so this takes well under a second.
    let running = start(&fake, ctx.clone(), |c| c.max_retries(2).metrics(metrics));
    eventually("3 reconciles of each", async || {
        ctx.reconciles.load(Ordering::SeqCst) >= 6
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        ctx.reconciles.load(Ordering::SeqCst),
        6,
        "dropped after the limit"
    );
    running.stop().await;
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    for line in [
        r#"controller_runtime_reconcile_errors_total{controller="deployment"} 6"#,
        r#"controller_runtime_reconcile_panics_total{controller="deployment"} 3"#,
    ] {
        assert!(text.contains(line), "{line} not in\n{text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn predicates_filter_updates_of_the_primary() {
    let (fake, deployments, configmaps, ctx) = shop_with_web().await;
    let running = start(&fake, ctx.clone(), |c| {
        c.with_predicate(Predicate::labels_changed())
    });
    eventually("the first reconcile", async || {
        configmaps.get("web-settings").await.is_ok()
    })
    .await;
    let first = ctx.reconciles.load(Ordering::SeqCst);
    // An annotation: filtered out.
    let mut d = deployments.get("web").await.unwrap();
    d.metadata.annotations = Some(BTreeMap::from([("note".into(), "x".into())]));
    let d = deployments
        .update(&PostParams::default(), &d)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(ctx.reconciles.load(Ordering::SeqCst), first);
    // A label: passes.
    let mut d = d;
    d.metadata.labels = Some(BTreeMap::from([("tier".into(), "web".into())]));
    deployments
        .update(&PostParams::default(), &d)
        .await
        .unwrap();
    eventually("a reconcile after the label", async || {
        ctx.reconciles.load(Ordering::SeqCst) > first
    })
    .await;
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_waits_for_the_reconcile_in_flight() {
    let fake = FakeApi::new();
    let client = fake.client();
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "shop");
    deployments
        .create(&PostParams::default(), &deployment("slow"))
        .await
        .unwrap();
    let started = Arc::new(tokio::sync::Notify::new());
    let finished = Arc::new(AtomicUsize::new(0));
    let factory = SharedInformerFactory::new(client, Duration::from_secs(3600));
    let cancel = CancellationToken::new();
    let (s, f) = (started.clone(), finished.clone());
    let task = tokio::spawn(Controller::<Deployment>::new(&factory).run(
        move |_d, _ctx: Arc<()>| {
            let (s, f) = (s.clone(), f.clone());
            async move {
                s.notify_one();
                tokio::time::sleep(Duration::from_millis(200)).await;
                f.fetch_add(1, Ordering::SeqCst);
                Ok::<_, Error>(Action::await_change())
            }
        },
        |_d, _e, _ctx| Action::rate_limited(),
        Arc::new(()),
        cancel.clone(),
    ));
    started.notified().await;
    cancel.cancel();
    task.await.unwrap().unwrap();
    assert_eq!(
        finished.load(Ordering::SeqCst),
        1,
        "run returned before the reconcile in flight finished"
    );
    factory.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_before_sync_is_an_error_naming_the_controller() {
    let fake = FakeApi::new();
    // Lists and watches of deployments fail: the cache cannot sync.
    for verb in ["list", "watch"] {
        fake.prepend_reactor(verb, "deployments", |_| {
            kctrl_fake::Reaction::Error(kctrl_fake::errors::internal_error("etcd is down"))
        });
    }
    let factory = SharedInformerFactory::new(fake.client(), Duration::from_secs(3600));
    let cancel = CancellationToken::new();
    let run = Controller::<Deployment>::new(&factory).run(
        |_d, _ctx: Arc<()>| async { Ok::<_, Error>(Action::await_change()) },
        |_d, _e, _ctx| Action::rate_limited(),
        Arc::new(()),
        cancel.clone(),
    );
    let task = tokio::spawn(run);
    tokio::time::sleep(Duration::from_millis(100)).await;
    cancel.cancel();
    let err = task.await.unwrap().unwrap_err();
    assert_eq!(
        err.to_string(),
        "controller deployment: stopped before the caches synced"
    );
    factory.shutdown().await;
}

/// The controller's event recorder names the controller as the events' source.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_are_recorded_under_the_controllers_name() {
    use k8s_openapi::api::core::v1::Event;
    let (fake, deployments, _configmaps, _ctx) = shop_with_web().await;
    let factory = SharedInformerFactory::new(fake.client(), Duration::from_secs(3600));
    let controller = Controller::<Deployment>::new(&factory);
    let broadcaster = kctrl_events::EventBroadcaster::new();
    broadcaster
        .start_recording_to_sink(kctrl_events::ApiEventSink::new(fake.client()))
        .unwrap();
    let recorder = controller.event_recorder(&broadcaster);
    let web = deployments.get("web").await.unwrap();
    kctrl_events::EventRecorder::event(
        &recorder,
        &kctrl_events::object_reference(&web),
        kctrl_events::EventType::Normal,
        "Synced",
        "web synced",
    );
    broadcaster.shutdown().await;
    let events = fake.objects::<Event>();
    let sources: Vec<_> = events
        .iter()
        .map(|e| e.source.as_ref().and_then(|s| s.component.clone()))
        .collect();
    assert_eq!(sources, [Some("deployment".to_owned())], "{events:?}");
}

//! The workers' lifecycle on the in-memory API server, on Tokio's paused clock: a panicking
//! error policy fails its key and the worker lives on; dropping the `run` future stops its
//! workers; the shutdown waits for the reconciles in flight only up to its timeout; the
//! predicates filter the primary's updates only.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kctrl_client::{Api, PatchParams, PostParams};
use kctrl_fake::FakeApi;
use kctrl_informer::SharedInformerFactory;
use kctrl_runtime::metrics::ControllerMetrics;
use kctrl_runtime::{Action, Controller, Predicate};
use prometheus_client::registry::Registry;
use tokio::sync::mpsc;
use tokio::time::{Instant, timeout};
use tokio_util::sync::CancellationToken;

#[derive(Debug, thiserror::Error)]
#[error("{0} fails")]
struct Failed(String);

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

async fn create(fake: &FakeApi, name: &str) -> Deployment {
    Api::<Deployment>::namespaced(fake.client(), "shop")
        .create(&PostParams::default(), &deployment(name))
        .await
        .unwrap()
}

fn name_of(d: &Deployment) -> String {
    d.metadata.name.clone().unwrap_or_default()
}

/// Far beyond anything these tests wait for; on the paused clock it passes in no real time.
const NEVER: Duration = Duration::from_secs(3600);

async fn next<T>(rx: &mut mpsc::UnboundedReceiver<T>, what: &str) -> T {
    timeout(NEVER, rx.recv())
        .await
        .unwrap_or_else(|_| panic!("timed out waiting for {what}"))
        .unwrap_or_else(|| panic!("channel closed waiting for {what}"))
}

/// Sends its name when dropped: tells the test a reconcile's future is gone.
struct OnDrop(mpsc::UnboundedSender<String>, String);

impl Drop for OnDrop {
    fn drop(&mut self) {
        let _ = self.0.send(self.1.clone());
    }
}

type Reconciling = std::pin::Pin<Box<dyn Future<Output = Result<Action, Failed>> + Send>>;

/// A reconcile that reports its start on `started`, then never finishes; its future reports
/// on `dropped` when dropped.
fn stuck(
    started: mpsc::UnboundedSender<String>,
    dropped: mpsc::UnboundedSender<String>,
) -> impl Fn(Arc<Deployment>, Arc<()>) -> Reconciling + Send + Sync + 'static {
    move |d, _ctx| {
        let started = started.clone();
        let dropped = dropped.clone();
        Box::pin(async move {
            let _guard = OnDrop(dropped, name_of(&d));
            let _ = started.send(name_of(&d));
            std::future::pending::<()>().await;
            Ok(Action::await_change())
        })
    }
}

/// An error policy that panics fails its key like a panicking reconcile: logged, counted,
/// the key retried rate-limited, and the worker (the only one) lives on to take other keys.
#[tokio::test(start_paused = true)]
async fn a_panicking_error_policy_fails_its_key_and_the_worker_lives_on() {
    let fake = FakeApi::new();
    create(&fake, "bad").await;
    let factory = SharedInformerFactory::new(fake.client(), NEVER);
    let mut registry = Registry::default();
    let metrics = ControllerMetrics::new(&mut registry);
    let (seen_tx, mut seen) = mpsc::unbounded_channel();
    let cancel = CancellationToken::new();
    let task = tokio::spawn(
        Controller::<Deployment>::new(&factory)
            .workers(1)
            .metrics(metrics)
            .run(
                move |d: Arc<Deployment>, _ctx: Arc<()>| {
                    let seen = seen_tx.clone();
                    async move {
                        let name = name_of(&d);
                        let _ = seen.send(name.clone());
                        if name == "bad" {
                            Err(Failed(name))
                        } else {
                            Ok(Action::await_change())
                        }
                    }
                },
                |_d, err: &Failed, _ctx| panic!("the error policy cannot handle: {err}"),
                Arc::new(()),
                cancel.clone(),
            ),
    );
    assert_eq!(next(&mut seen, "the first reconcile of bad").await, "bad");
    assert_eq!(
        next(&mut seen, "bad retried after the panic").await,
        "bad",
        "the key was left processing"
    );
    create(&fake, "good").await;
    loop {
        if next(&mut seen, "good reconciled by the same worker").await == "good" {
            break;
        }
    }
    cancel.cancel();
    timeout(NEVER, task).await.unwrap().unwrap().unwrap();
    factory.shutdown().await;
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    let panics = text
        .lines()
        .find(|l| {
            l.starts_with(r#"controller_runtime_reconcile_panics_total{controller="deployment"}"#)
        })
        .and_then(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .unwrap_or(0);
    assert!(panics >= 2, "{text}");
    assert!(
        text.contains(r#"controller_runtime_active_workers{controller="deployment"} 0"#),
        "{text}"
    );
}

/// Dropping the `run` future (a `select!` whose other branch won) stops its workers: the
/// reconcile in flight is dropped, and the queue is shut down so no key is taken again.
#[tokio::test(start_paused = true)]
async fn dropping_run_stops_its_workers() {
    let fake = FakeApi::new();
    create(&fake, "web").await;
    let factory = SharedInformerFactory::new(fake.client(), NEVER);
    let (started_tx, mut started) = mpsc::unbounded_channel();
    let (dropped_tx, mut dropped) = mpsc::unbounded_channel();
    let controller = Controller::<Deployment>::new(&factory);
    let queue = controller.queue().clone();
    let run = controller.run(
        stuck(started_tx, dropped_tx),
        |_d, _e, _ctx| Action::rate_limited(),
        Arc::new(()),
        CancellationToken::new(),
    );
    tokio::select! {
        result = run => panic!("run returned: {result:?}"),
        name = started.recv() => assert_eq!(name.as_deref(), Some("web")),
    }
    // `run` is dropped here.
    assert_eq!(
        next(&mut dropped, "the reconcile in flight dropped with run").await,
        "web"
    );
    assert!(queue.shutting_down());
    factory.shutdown().await;
}

/// Once cancelled, `run` waits for a reconcile in flight only up to the shutdown timeout,
/// then abandons it (its future is dropped) and returns.
#[tokio::test(start_paused = true)]
async fn the_shutdown_abandons_reconciles_after_its_timeout() {
    for (configured, expected) in [
        (None, Duration::from_secs(30)),
        (Some(Duration::from_secs(5)), Duration::from_secs(5)),
        (Some(Duration::ZERO), Duration::ZERO),
    ] {
        let fake = FakeApi::new();
        create(&fake, "slow").await;
        let factory = SharedInformerFactory::new(fake.client(), NEVER);
        let (started_tx, mut started) = mpsc::unbounded_channel();
        let (dropped_tx, mut dropped) = mpsc::unbounded_channel();
        let cancel = CancellationToken::new();
        let mut controller = Controller::<Deployment>::new(&factory);
        if let Some(t) = configured {
            controller = controller.shutdown_timeout(t);
        }
        let task = tokio::spawn(controller.run(
            stuck(started_tx, dropped_tx),
            |_d, _e, _ctx| Action::rate_limited(),
            Arc::new(()),
            cancel.clone(),
        ));
        next(&mut started, "the reconcile").await;
        cancel.cancel();
        let cancelled = Instant::now();
        timeout(NEVER, task)
            .await
            .unwrap_or_else(|_| panic!("{configured:?}: run never returned"))
            .unwrap()
            .unwrap();
        assert_eq!(cancelled.elapsed(), expected, "{configured:?}");
        assert_eq!(
            next(&mut dropped, "the abandoned reconcile dropped").await,
            "slow"
        );
        factory.shutdown().await;
    }
}

/// `with_predicate` filters the primary's updates only: an update of an owned object that
/// the predicate would refuse (a ConfigMap has no generation) still enqueues its owner.
#[tokio::test(start_paused = true)]
async fn predicates_do_not_filter_owned_objects() {
    let fake = FakeApi::new();
    let web = create(&fake, "web").await;
    let configmaps: Api<ConfigMap> = Api::namespaced(fake.client(), "shop");
    let owned = ConfigMap {
        metadata: ObjectMeta {
            name: Some("web-settings".into()),
            namespace: Some("shop".into()),
            owner_references: Some(vec![OwnerReference {
                api_version: "apps/v1".into(),
                kind: "Deployment".into(),
                name: "web".into(),
                uid: web.metadata.uid.clone().unwrap_or_default(),
                controller: Some(true),
                ..Default::default()
            }]),
            ..Default::default()
        },
        ..Default::default()
    };
    configmaps
        .create(&PostParams::default(), &owned)
        .await
        .unwrap();
    let factory = SharedInformerFactory::new(fake.client(), NEVER);
    let (seen_tx, mut seen) = mpsc::unbounded_channel();
    let cancel = CancellationToken::new();
    let task = tokio::spawn(
        Controller::<Deployment>::new(&factory)
            .owns::<ConfigMap>()
            .with_predicate(Predicate::generation_changed())
            .run(
                move |d: Arc<Deployment>, _ctx: Arc<()>| {
                    let seen = seen_tx.clone();
                    async move {
                        let _ = seen.send(name_of(&d));
                        Ok::<_, Failed>(Action::await_change())
                    }
                },
                |_d, _e, _ctx| Action::rate_limited(),
                Arc::new(()),
                cancel.clone(),
            ),
    );
    assert_eq!(next(&mut seen, "the first reconcile").await, "web");
    // The initial lists of both informers may enqueue web twice; let them settle.
    tokio::time::sleep(Duration::from_secs(60)).await;
    while seen.try_recv().is_ok() {}
    // An update of the Deployment that leaves its generation (a label): filtered out.
    let deployments: Api<Deployment> = Api::namespaced(fake.client(), "shop");
    let note =
        kctrl_client::Patch::Merge(serde_json::json!({"metadata": {"labels": {"note": "x"}}}));
    deployments
        .patch("web", &PatchParams::default(), &note)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert!(
        seen.try_recv().is_err(),
        "the predicate let the update through"
    );
    // The same kind of update of the owned ConfigMap: its owner is reconciled.
    configmaps
        .patch("web-settings", &PatchParams::default(), &note)
        .await
        .unwrap();
    assert_eq!(
        next(&mut seen, "web reconciled after its ConfigMap changed").await,
        "web"
    );
    cancel.cancel();
    timeout(NEVER, task).await.unwrap().unwrap().unwrap();
    factory.shutdown().await;
}

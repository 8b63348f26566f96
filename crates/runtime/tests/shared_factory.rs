//! Controllers sharing one informer factory: the informers are the factory's, so one
//! controller returning (its token cancelled, its Lease lost) leaves the caches the others
//! read running, until the factory shuts down.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kctrl_client::{Api, PostParams};
use kctrl_fake::FakeApi;
use kctrl_informer::SharedInformerFactory;
use kctrl_runtime::{Action, Controller, RunError};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

#[derive(Debug, thiserror::Error)]
#[error("never")]
struct Never;

type Seen = Arc<mpsc::UnboundedSender<String>>;

/// A reconcile that reports each object's name.
async fn report<K: kctrl_runtime::Object>(obj: Arc<K>, seen: Seen) -> Result<Action, Never> {
    let _ = seen.send(obj.metadata().name.clone().unwrap_or_default());
    Ok(Action::await_change())
}

fn meta(name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        namespace: Some("shop".into()),
        ..Default::default()
    }
}

async fn next(rx: &mut mpsc::UnboundedReceiver<String>, what: &str) -> String {
    tokio::time::timeout(Duration::from_secs(60), rx.recv())
        .await
        .unwrap_or_else(|_| panic!("timed out waiting for {what}"))
        .expect("the controller is running")
}

fn run<K: kctrl_runtime::Object>(
    controller: Controller<K>,
    cancel: &CancellationToken,
) -> (
    tokio::task::JoinHandle<Result<(), RunError>>,
    mpsc::UnboundedReceiver<String>,
) {
    let (tx, rx) = mpsc::unbounded_channel();
    let task = tokio::spawn(controller.run(
        report::<K>,
        |_obj, _err: &Never, _ctx| Action::rate_limited(),
        Arc::new(tx),
        cancel.clone(),
    ));
    (task, rx)
}

#[tokio::test(start_paused = true)]
async fn one_controller_returning_leaves_the_shared_informers_running() {
    let fake = FakeApi::new();
    let deployments: Api<Deployment> = Api::namespaced(fake.client(), "shop");
    let config_maps: Api<ConfigMap> = Api::namespaced(fake.client(), "shop");
    deployments
        .create(
            &PostParams::default(),
            &Deployment {
                metadata: meta("web"),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let factory = SharedInformerFactory::new(fake.client(), Duration::ZERO);
    // Both use the ConfigMap informer; the first to run starts it.
    let first = Controller::<Deployment>::new(&factory).owns::<ConfigMap>();
    let second = Controller::<ConfigMap>::new(&factory);
    let (stop_first, stop_second) = (CancellationToken::new(), CancellationToken::new());
    let (first, mut first_seen) = run(first, &stop_first);
    assert_eq!(next(&mut first_seen, "web").await, "web");
    let (second, mut second_seen) = run(second, &stop_second);

    let config_map = |name: &str| ConfigMap {
        metadata: meta(name),
        ..Default::default()
    };
    config_maps
        .create(&PostParams::default(), &config_map("one"))
        .await
        .unwrap();
    assert_eq!(next(&mut second_seen, "one").await, "one");

    // The first controller returns (say its Lease was lost): the second's cache still follows.
    stop_first.cancel();
    first.await.unwrap().unwrap();
    config_maps
        .create(&PostParams::default(), &config_map("two"))
        .await
        .unwrap();
    assert_eq!(next(&mut second_seen, "two").await, "two");
    assert!(!factory.informer::<ConfigMap>().is_stopped());

    // The last one returns; the factory's shutdown stops the informers and returns.
    stop_second.cancel();
    second.await.unwrap().unwrap();
    tokio::time::timeout(Duration::from_secs(60), factory.shutdown())
        .await
        .expect("shutdown stops the informers");
    assert!(factory.informer::<ConfigMap>().is_stopped());
    assert!(factory.informer::<Deployment>().is_stopped());
}

/// An informer that fails (a panic it could not contain) stops the controller, which says
/// so, instead of reconciling from a frozen cache.
#[tokio::test(start_paused = true)]
async fn a_failed_informer_stops_the_controller() {
    let fake = FakeApi::new();
    let config_maps: Api<ConfigMap> = Api::namespaced(fake.client(), "shop");
    config_maps
        .create(
            &PostParams::default(),
            &ConfigMap {
                metadata: meta("one"),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let factory = SharedInformerFactory::new(fake.client(), Duration::ZERO);
    let controller = Controller::<ConfigMap>::new(&factory);
    let cancel = CancellationToken::new();
    let (task, mut seen) = run(controller, &cancel);
    assert_eq!(next(&mut seen, "one").await, "one");
    // The watch ends; the relist finds the server's list handler panicking.
    fake.prepend_reactor("list", "configmaps", |_| panic!("the list exploded"));
    fake.prepend_reactor("watch", "configmaps", |_| panic!("the watch exploded"));
    fake.close_watches();
    let result = tokio::time::timeout(Duration::from_secs(600), task)
        .await
        .expect("the controller stops")
        .unwrap();
    assert!(
        matches!(&result, Err(RunError::InformerFailed { source, .. }) if source.panic.contains("exploded")),
        "{result:?}"
    );
    factory.shutdown().await;
}

/// An informer that fails before it synced stops the controller with `InformerFailed`,
/// not as if it had merely been cancelled before the caches synced.
#[tokio::test(start_paused = true)]
async fn an_informer_failing_before_it_synced_is_reported_as_failed() {
    let fake = FakeApi::new();
    fake.prepend_reactor("list", "configmaps", |_| panic!("the first list exploded"));
    fake.prepend_reactor("watch", "configmaps", |_| panic!("the watch exploded"));
    let factory = SharedInformerFactory::new(fake.client(), Duration::ZERO);
    let controller = Controller::<ConfigMap>::new(&factory);
    let (task, _seen) = run(controller, &CancellationToken::new());
    let result = tokio::time::timeout(Duration::from_secs(600), task)
        .await
        .expect("the controller stops")
        .unwrap();
    assert!(
        matches!(&result, Err(RunError::InformerFailed { source, .. }) if source.panic.contains("exploded")),
        "{result:?}"
    );
    factory.shutdown().await;
}

/// A controller run on a factory that has shut down returns an error instead of waiting
/// for caches that never fill.
#[tokio::test(start_paused = true)]
async fn a_controller_on_a_shut_down_factory_returns_an_error() {
    let fake = FakeApi::new();
    let factory = SharedInformerFactory::new(fake.client(), Duration::ZERO);
    // Set up before the shutdown, run after it.
    let before = Controller::<ConfigMap>::new(&factory);
    factory.shutdown().await;
    let after = Controller::<Deployment>::new(&factory);
    for (what, task) in [
        ("set up before", run(before, &CancellationToken::new()).0),
        ("set up after", run(after, &CancellationToken::new()).0),
    ] {
        let result = tokio::time::timeout(Duration::from_secs(600), task)
            .await
            .unwrap_or_else(|_| panic!("the controller {what} the shutdown returns"))
            .unwrap();
        assert!(result.is_err(), "{what}: {result:?}");
    }
}

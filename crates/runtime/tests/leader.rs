//! `run_leader_elected` on the in-memory API server: two replicas of one controller, one
//! reconciling; the leader's shutdown hands over to the standby; a leader that cannot renew
//! stops and says so; a bad election configuration is refused by name.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kctrl_client::{Api, PostParams};
use kctrl_fake::{FakeApi, Reaction, errors};
use kctrl_informer::SharedInformerFactory;
use kctrl_leader_election::{LeaderElectionConfig, LeaseLock};
use kctrl_runtime::{Action, Controller, RunError};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

#[derive(Debug, thiserror::Error)]
#[error("never")]
struct Never;

/// Short timing so that a takeover happens within seconds.
fn fast(config: &mut LeaderElectionConfig) {
    config.lease_duration = Duration::from_secs(2);
    config.renew_deadline = Duration::from_millis(1000);
    config.retry_period = Duration::from_millis(100);
}

struct Replica {
    reconciles: Arc<AtomicUsize>,
    cancel: CancellationToken,
    task: JoinHandle<Result<(), RunError>>,
    factory: SharedInformerFactory,
}

fn replica(fake: &FakeApi, identity: &str) -> Replica {
    let factory = SharedInformerFactory::new(fake.client(), Duration::from_secs(3600));
    let reconciles = Arc::new(AtomicUsize::new(0));
    let cancel = CancellationToken::new();
    let counter = reconciles.clone();
    let lock = LeaseLock::new(fake.client(), "kube-system", "deployments-demo", identity);
    let task = tokio::spawn(Controller::<Deployment>::new(&factory).run_leader_elected(
        lock,
        fast,
        move |_d, _ctx: Arc<()>| {
            let counter = counter.clone();
            async move {
                counter.fetch_add(1, Ordering::SeqCst);
                Ok::<_, Never>(Action::await_change())
            }
        },
        |_d, _e, _ctx| Action::rate_limited(),
        Arc::new(()),
        cancel.clone(),
    ));
    Replica {
        reconciles,
        cancel,
        task,
        factory,
    }
}

async fn eventually(what: &str, check: impl Fn() -> bool) {
    for _ in 0..1000 {
        if check() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("timed out waiting for {what}");
}

async fn create_deployment(fake: &FakeApi) {
    let d = Deployment {
        metadata: ObjectMeta {
            name: Some("web".into()),
            namespace: Some("shop".into()),
            ..Default::default()
        },
        ..Default::default()
    };
    Api::<Deployment>::namespaced(fake.client(), "shop")
        .create(&PostParams::default(), &d)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_replica_reconciles_and_hands_over_on_shutdown() {
    let fake = FakeApi::new();
    create_deployment(&fake).await;
    let a = replica(&fake, "a");
    eventually("a leads and reconciles", || {
        a.reconciles.load(Ordering::SeqCst) > 0
    })
    .await;
    let b = replica(&fake, "b");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        b.reconciles.load(Ordering::SeqCst),
        0,
        "the standby reconciled"
    );

    // a stops: its controller first, then the Lease goes, and b takes over well before the
    // 2 s lease would have expired.
    a.cancel.cancel();
    a.task.await.unwrap().unwrap();
    let handed_over = tokio::time::Instant::now();
    eventually("b reconciles", || b.reconciles.load(Ordering::SeqCst) > 0).await;
    assert!(handed_over.elapsed() < Duration::from_millis(1500));
    a.factory.shutdown().await;

    b.cancel.cancel();
    b.task.await.unwrap().unwrap();
    b.factory.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_that_cannot_renew_stops_and_says_so() {
    let fake = FakeApi::new();
    create_deployment(&fake).await;
    let a = replica(&fake, "a");
    eventually("a leads and reconciles", || {
        a.reconciles.load(Ordering::SeqCst) > 0
    })
    .await;
    // The API server refuses every write of the Lease from now on.
    fake.prepend_reactor("update", "leases", |_| {
        Reaction::Error(errors::internal_error("etcd is down"))
    });
    let err = tokio::time::timeout(Duration::from_secs(10), a.task)
        .await
        .expect("gives up within the renew deadline")
        .unwrap()
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "controller deployment: leader election lost"
    );
    a.factory.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_while_standing_by_returns_without_running() {
    let fake = FakeApi::new();
    create_deployment(&fake).await;
    let a = replica(&fake, "a");
    eventually("a leads", || a.reconciles.load(Ordering::SeqCst) > 0).await;
    let b = replica(&fake, "b");
    tokio::time::sleep(Duration::from_millis(300)).await;
    b.cancel.cancel();
    tokio::time::timeout(Duration::from_secs(5), b.task)
        .await
        .expect("a standby stops at once")
        .unwrap()
        .unwrap();
    assert_eq!(b.reconciles.load(Ordering::SeqCst), 0);
    a.cancel.cancel();
    a.task.await.unwrap().unwrap();
    a.factory.shutdown().await;
    b.factory.shutdown().await;
}

#[tokio::test]
async fn a_bad_election_configuration_is_refused_by_name() {
    let fake = FakeApi::new();
    let factory = SharedInformerFactory::new(fake.client(), Duration::from_secs(3600));
    let lock = LeaseLock::new(fake.client(), "kube-system", "x", "a");
    let err = Controller::<Deployment>::new(&factory)
        .run_leader_elected(
            lock,
            |c| c.lease_duration = Duration::from_millis(500),
            |_d, _ctx: Arc<()>| async { Ok::<_, Never>(Action::await_change()) },
            |_d, _e, _ctx| Action::rate_limited(),
            Arc::new(()),
            CancellationToken::new(),
        )
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .starts_with("controller deployment: leader election: leaseDuration must be a whole number of seconds"),
        "{err}"
    );
}

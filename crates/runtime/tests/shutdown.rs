//! The bounds of `run`'s shutdown: a reconcile that blocks its thread does not hold `run` (nor
//! the Lease of `run_leader_elected`) past the shutdown timeout; the shutdown warns of
//! abandoned reconciles only when some were in flight; dropping `run` before the caches
//! synced shuts the queue down.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kctrl_client::{Api, PostParams};
use kctrl_fake::{FakeApi, Reaction, errors};
use kctrl_informer::SharedInformerFactory;
use kctrl_leader_election::{LeaderElectionConfig, LeaseLock};
use kctrl_runtime::{Action, Controller, RunError};
use tokio::sync::mpsc;
use tokio::time::timeout;
use tokio_util::sync::CancellationToken;

#[derive(Debug, thiserror::Error)]
#[error("never")]
struct Never;

/// Far beyond anything the paused-clock tests wait for.
const NEVER: Duration = Duration::from_secs(3600);

/// On the real clock: only a guard against a test that hangs (the old behaviour); it decides
/// no outcome of a passing run, which returns about one second after the cancel.
const WATCHDOG: Duration = Duration::from_secs(20);

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

type Reconciling = std::pin::Pin<Box<dyn Future<Output = Result<Action, Never>> + Send>>;

/// A reconcile that reports its start on `started`, then blocks its thread (a `std` channel
/// receive) until the test sends on `release`'s sender: an abort cannot stop it.
fn blocking(
    started: mpsc::UnboundedSender<()>,
    release: std::sync::mpsc::Receiver<()>,
) -> impl Fn(Arc<Deployment>, Arc<()>) -> Reconciling + Send + Sync + 'static {
    let release = Arc::new(Mutex::new(release));
    move |_d: Arc<Deployment>, _ctx: Arc<()>| -> Reconciling {
        let release = release.clone();
        let started = started.clone();
        Box::pin(async move {
            let _ = started.send(());
            let _ = release.lock().unwrap().recv();
            Ok(Action::await_change())
        })
    }
}

/// A reconcile blocks its thread when the controller is cancelled: past the shutdown timeout
/// it is aborted, which cannot stop it; `run` returns `ReconcilesStuck` instead of waiting
/// for it. The test lets the reconcile go only after `run` has returned.
#[tokio::test(flavor = "multi_thread", worker_threads = 3)]
async fn a_reconcile_blocking_its_thread_does_not_hold_run_past_the_timeout() {
    let fake = FakeApi::new();
    create_deployment(&fake).await;
    let factory = SharedInformerFactory::new(fake.client(), NEVER);
    let (started_tx, mut started) = mpsc::unbounded_channel();
    let (release, release_rx) = std::sync::mpsc::channel();
    let reconcile = blocking(started_tx, release_rx);
    let cancel = CancellationToken::new();
    let task = tokio::spawn(
        Controller::<Deployment>::new(&factory)
            .shutdown_timeout(Duration::from_millis(10))
            .run(
                reconcile,
                |_d, _e, _ctx| Action::rate_limited(),
                Arc::new(()),
                cancel.clone(),
            ),
    );
    timeout(WATCHDOG, started.recv()).await.unwrap().unwrap();
    cancel.cancel();
    let returned = timeout(WATCHDOG, task).await;
    // Whatever happened, let the blocked thread go.
    let _ = release.send(());
    let err = returned
        .expect("run waits for a reconcile that blocks its thread")
        .unwrap()
        .unwrap_err();
    assert!(
        matches!(err, RunError::ReconcilesStuck { stuck: 1, .. }),
        "{err}"
    );
    factory.shutdown().await;
}

/// Under `run_leader_elected`, a reconcile stuck in its thread at shutdown: the call returns
/// `ReconcilesStuck` and does not release the Lease (another replica would take over while
/// the reconcile may still write); the renewals stopped with the call.
#[tokio::test(flavor = "multi_thread", worker_threads = 3)]
async fn a_stuck_reconcile_keeps_the_lease_unreleased() {
    let fake = FakeApi::new();
    create_deployment(&fake).await;
    let released = Arc::new(AtomicBool::new(false));
    {
        let released = released.clone();
        fake.prepend_reactor("update", "leases", move |action| {
            let lease: Lease = action.object_as().unwrap();
            if lease
                .spec
                .and_then(|s| s.holder_identity)
                .is_none_or(|h| h.is_empty())
            {
                released.store(true, Ordering::SeqCst);
            }
            Reaction::Continue
        });
    }
    let factory = SharedInformerFactory::new(fake.client(), NEVER);
    let (started_tx, mut started) = mpsc::unbounded_channel();
    let (release, release_rx) = std::sync::mpsc::channel();
    let reconcile = blocking(started_tx, release_rx);
    let cancel = CancellationToken::new();
    let lock = LeaseLock::new(fake.client(), "kube-system", "demo", "a");
    let task = tokio::spawn(
        Controller::<Deployment>::new(&factory)
            .shutdown_timeout(Duration::from_millis(10))
            .run_leader_elected(
                lock,
                |c: &mut LeaderElectionConfig| {
                    c.lease_duration = Duration::from_secs(15);
                    c.renew_deadline = Duration::from_secs(10);
                    c.retry_period = Duration::from_millis(200);
                },
                reconcile,
                |_d, _e, _ctx| Action::rate_limited(),
                Arc::new(()),
                cancel.clone(),
            ),
    );
    timeout(WATCHDOG, started.recv()).await.unwrap().unwrap();
    cancel.cancel();
    let returned = timeout(WATCHDOG, task).await;
    let released_before = released.load(Ordering::SeqCst);
    let _ = release.send(());
    let err = returned
        .expect("run_leader_elected waits for a reconcile that blocks its thread")
        .unwrap()
        .unwrap_err();
    assert!(
        matches!(err, RunError::ReconcilesStuck { stuck: 1, .. }),
        "{err}"
    );
    assert!(!released_before, "the Lease was released");
    let holder = fake
        .object::<Lease>(Some("kube-system"), "demo")
        .and_then(|l| l.spec?.holder_identity);
    assert_eq!(holder.as_deref(), Some("a"), "the Lease is left to expire");
    factory.shutdown().await;
}

/// The warnings and errors logged on this thread.
#[derive(Clone, Default)]
struct Warnings(Arc<Mutex<Vec<String>>>);

struct Message<'a>(&'a mut String);

impl tracing::field::Visit for Message<'_> {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        use std::fmt::Write;
        let _ = write!(self.0, " {}={value:?}", field.name());
    }
}

impl tracing::Subscriber for Warnings {
    fn enabled(&self, metadata: &tracing::Metadata<'_>) -> bool {
        *metadata.level() <= tracing::Level::WARN
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        let mut line = String::new();
        event.record(&mut Message(&mut line));
        self.0.lock().unwrap().push(line);
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

/// With a zero shutdown timeout, idle workers are not reported as abandoning reconciles: the
/// warning comes only when a reconcile was in flight, and counts those.
#[tokio::test(start_paused = true)]
async fn a_zero_timeout_warns_only_of_reconciles_in_flight() {
    let warnings = Warnings::default();
    let _log = tracing::subscriber::set_default(warnings.clone());
    for in_flight in [false, true] {
        warnings.0.lock().unwrap().clear();
        let fake = FakeApi::new();
        create_deployment(&fake).await;
        let factory = SharedInformerFactory::new(fake.client(), NEVER);
        let (started_tx, mut started) = mpsc::unbounded_channel();
        let cancel = CancellationToken::new();
        let task = tokio::spawn(
            Controller::<Deployment>::new(&factory)
                .workers(2)
                .shutdown_timeout(Duration::ZERO)
                .run(
                    move |_d, _ctx: Arc<()>| {
                        let started = started_tx.clone();
                        async move {
                            let _ = started.send(());
                            if in_flight {
                                std::future::pending::<()>().await;
                            }
                            Ok::<_, Never>(Action::await_change())
                        }
                    },
                    |_d, _e, _ctx| Action::rate_limited(),
                    Arc::new(()),
                    cancel.clone(),
                ),
        );
        timeout(NEVER, started.recv()).await.unwrap().unwrap();
        // On the paused clock, this returns once every task is idle: the reconcile (when it
        // finishes) is done.
        tokio::time::sleep(Duration::from_secs(1)).await;
        cancel.cancel();
        timeout(NEVER, task).await.unwrap().unwrap().unwrap();
        factory.shutdown().await;
        let logged = warnings.0.lock().unwrap().clone();
        let abandoning: Vec<&String> = logged
            .iter()
            .filter(|l| l.contains("abandoning the reconciles in flight"))
            .collect();
        if in_flight {
            assert_eq!(abandoning.len(), 1, "{logged:?}");
            assert!(abandoning[0].contains("busy_workers=1"), "{logged:?}");
        } else {
            assert!(abandoning.is_empty(), "idle workers reported: {logged:?}");
        }
    }
}

/// Dropping `run` while it waits for the caches (here: every read of Deployments, list or
/// watch, keeps failing) shuts the queue down, as it does once running.
#[tokio::test(start_paused = true)]
async fn dropping_run_before_the_caches_synced_shuts_the_queue_down() {
    let fake = FakeApi::new();
    fake.prepend_reactor("*", "deployments", |_| {
        Reaction::Error(errors::internal_error("etcd is down"))
    });
    let factory = SharedInformerFactory::new(fake.client(), NEVER);
    let controller = Controller::<Deployment>::new(&factory);
    let queue = controller.queue().clone();
    let run = controller.run(
        |_d, _ctx: Arc<()>| async { Ok::<_, Never>(Action::await_change()) },
        |_d, _e, _ctx| Action::rate_limited(),
        Arc::new(()),
        CancellationToken::new(),
    );
    let mut run = Box::pin(run);
    tokio::select! {
        result = &mut run => panic!("run returned: {result:?}"),
        () = tokio::time::sleep(Duration::from_secs(10)) => {}
    }
    assert!(!queue.shutting_down(), "the queue is open while run waits");
    drop(run);
    assert!(queue.shutting_down(), "the queue is still open");
    factory.shutdown().await;
}

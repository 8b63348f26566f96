//! `run_leader_elected` and the controller's lifecycle, on Tokio's paused clock: the Lease is
//! released only once the reconciles in flight have stopped, a lost Lease stops the
//! controller at once, and a controller whose `run` returns by itself stops leading.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kctrl_client::{Api, PostParams};
use kctrl_fake::{FakeApi, Reaction, errors};
use kctrl_informer::SharedInformerFactory;
use kctrl_leader_election::{LeaderCallbacks, LeaderElectionConfig, LeaseLock};
use kctrl_runtime::{Action, Controller, RunError};
use tokio::sync::mpsc;
use tokio::time::timeout;
use tokio_util::sync::CancellationToken;

#[derive(Debug, thiserror::Error)]
#[error("never")]
struct Never;

/// Far beyond anything these tests wait for; on the paused clock it passes in no real time.
const NEVER: Duration = Duration::from_secs(3600);

fn fast(config: &mut LeaderElectionConfig) {
    config.lease_duration = Duration::from_secs(2);
    config.renew_deadline = Duration::from_millis(1000);
    config.retry_period = Duration::from_millis(100);
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

fn holder(fake: &FakeApi) -> Option<String> {
    fake.object::<Lease>(Some("kube-system"), "demo")
        .and_then(|l| l.spec?.holder_identity)
}

/// Clears `flag` when dropped: the reconcile's future is gone.
struct ClearOnDrop(Arc<AtomicBool>);

impl Drop for ClearOnDrop {
    fn drop(&mut self) {
        self.0.store(false, Ordering::SeqCst);
    }
}

/// The leader's renewals start failing while a reconcile is in flight (one that never
/// finishes by itself). The controller stops at once (the reconcile is abandoned), and the
/// Lease is released only after that, so a standby never reconciles beside it.
#[tokio::test(start_paused = true)]
async fn a_lost_lease_stops_the_reconciles_before_it_is_released() {
    let fake = FakeApi::new();
    create_deployment(&fake).await;
    let in_flight = Arc::new(AtomicBool::new(false));
    let refuse_renewals = Arc::new(AtomicBool::new(false));
    let releases = Arc::new(AtomicUsize::new(0));
    let released_in_flight = Arc::new(AtomicUsize::new(0));
    {
        let (in_flight, refuse, releases, released_in_flight) = (
            in_flight.clone(),
            refuse_renewals.clone(),
            releases.clone(),
            released_in_flight.clone(),
        );
        fake.prepend_reactor("update", "leases", move |action| {
            let lease: Lease = action.object_as().unwrap();
            let holder = lease
                .spec
                .and_then(|s| s.holder_identity)
                .unwrap_or_default();
            if holder.is_empty() {
                releases.fetch_add(1, Ordering::SeqCst);
                if in_flight.load(Ordering::SeqCst) {
                    released_in_flight.fetch_add(1, Ordering::SeqCst);
                }
                Reaction::Continue
            } else if refuse.load(Ordering::SeqCst) {
                Reaction::Error(errors::internal_error("etcd is slow"))
            } else {
                Reaction::Continue
            }
        });
    }
    let factory = SharedInformerFactory::new(fake.client(), NEVER);
    let (started_tx, mut started) = mpsc::unbounded_channel();
    let lock = LeaseLock::new(fake.client(), "kube-system", "demo", "a");
    let flag = in_flight.clone();
    let task = tokio::spawn(Controller::<Deployment>::new(&factory).run_leader_elected(
        lock,
        fast,
        move |_d, _ctx: Arc<()>| {
            let started = started_tx.clone();
            let flag = flag.clone();
            async move {
                flag.store(true, Ordering::SeqCst);
                let _clear = ClearOnDrop(flag);
                let _ = started.send(());
                std::future::pending::<()>().await;
                Ok::<_, Never>(Action::await_change())
            }
        },
        |_d, _e, _ctx| Action::rate_limited(),
        Arc::new(()),
        CancellationToken::new(),
    ));
    timeout(NEVER, started.recv()).await.unwrap().unwrap();
    assert_eq!(holder(&fake).as_deref(), Some("a"));
    refuse_renewals.store(true, Ordering::SeqCst);
    let err = timeout(NEVER, task)
        .await
        .expect("the leader stops after losing the Lease")
        .unwrap()
        .unwrap_err();
    assert!(matches!(err, RunError::LeadershipLost { .. }), "{err}");
    assert!(
        !in_flight.load(Ordering::SeqCst),
        "the reconcile still runs"
    );
    assert_eq!(
        released_in_flight.load(Ordering::SeqCst),
        0,
        "the Lease was released while a reconcile was in flight"
    );
    assert_eq!(releases.load(Ordering::SeqCst), 1);
    assert_eq!(holder(&fake).as_deref(), Some(""));
    factory.shutdown().await;
}

/// On cancel, a reconcile in flight that outlasts the lease duration keeps the Lease
/// renewed until it is done; only then is the Lease released.
#[tokio::test(start_paused = true)]
async fn the_lease_is_renewed_while_the_shutdown_waits_and_released_after() {
    let fake = FakeApi::new();
    create_deployment(&fake).await;
    let in_flight = Arc::new(AtomicBool::new(false));
    let released_in_flight = Arc::new(AtomicUsize::new(0));
    let renewals_in_flight = Arc::new(AtomicUsize::new(0));
    {
        let (in_flight, released_in_flight, renewals_in_flight) = (
            in_flight.clone(),
            released_in_flight.clone(),
            renewals_in_flight.clone(),
        );
        fake.prepend_reactor("update", "leases", move |action| {
            let lease: Lease = action.object_as().unwrap();
            let holder = lease
                .spec
                .and_then(|s| s.holder_identity)
                .unwrap_or_default();
            if in_flight.load(Ordering::SeqCst) {
                if holder.is_empty() {
                    released_in_flight.fetch_add(1, Ordering::SeqCst);
                } else {
                    renewals_in_flight.fetch_add(1, Ordering::SeqCst);
                }
            }
            Reaction::Continue
        });
    }
    let factory = SharedInformerFactory::new(fake.client(), NEVER);
    let (started_tx, mut started) = mpsc::unbounded_channel();
    let cancel = CancellationToken::new();
    let lock = LeaseLock::new(fake.client(), "kube-system", "demo", "a");
    let flag = in_flight.clone();
    let task = tokio::spawn(Controller::<Deployment>::new(&factory).run_leader_elected(
        lock,
        fast,
        move |_d, _ctx: Arc<()>| {
            let started = started_tx.clone();
            let flag = flag.clone();
            async move {
                flag.store(true, Ordering::SeqCst);
                let _clear = ClearOnDrop(flag);
                let _ = started.send(());
                tokio::time::sleep(Duration::from_secs(5)).await;
                Ok::<_, Never>(Action::await_change())
            }
        },
        |_d, _e, _ctx| Action::rate_limited(),
        Arc::new(()),
        cancel.clone(),
    ));
    timeout(NEVER, started.recv()).await.unwrap().unwrap();
    cancel.cancel();
    timeout(NEVER, task).await.unwrap().unwrap().unwrap();
    assert!(
        renewals_in_flight.load(Ordering::SeqCst) >= 10,
        "renewed {} times while the reconcile ran",
        renewals_in_flight.load(Ordering::SeqCst)
    );
    assert_eq!(released_in_flight.load(Ordering::SeqCst), 0);
    assert_eq!(holder(&fake).as_deref(), Some(""));
    factory.shutdown().await;
}

/// A controller whose `run` returns by itself (here: its informer was stopped, so its
/// handler cannot be registered) stops leading: the election ends, the Lease is released,
/// and the error is returned, instead of renewing a Lease while reconciling nothing.
#[tokio::test(start_paused = true)]
async fn a_controller_that_returns_stops_leading() {
    let fake = FakeApi::new();
    create_deployment(&fake).await;
    let factory = SharedInformerFactory::new(fake.client(), NEVER);
    let _ = factory.informer::<Deployment>();
    let stopped = CancellationToken::new();
    factory.start(&stopped);
    stopped.cancel();
    factory.shutdown().await;

    let lock = LeaseLock::new(fake.client(), "kube-system", "demo", "a");
    let err = timeout(
        NEVER,
        Controller::<Deployment>::new(&factory).run_leader_elected(
            lock,
            fast,
            |_d, _ctx: Arc<()>| async { Ok::<_, Never>(Action::await_change()) },
            |_d, _e, _ctx| Action::rate_limited(),
            Arc::new(()),
            CancellationToken::new(),
        ),
    )
    .await
    .expect("a replica whose controller stopped keeps leading")
    .unwrap_err();
    assert!(matches!(err, RunError::Informer { .. }), "{err}");
    assert_eq!(holder(&fake).as_deref(), Some(""), "the Lease is released");
}

/// Dropping the `run_leader_elected` future stops the controller's workers (the reconcile
/// in flight is dropped) and the renewals: the Lease then expires.
#[tokio::test(start_paused = true)]
async fn dropping_the_leader_stops_its_workers_and_renewals() {
    let fake = FakeApi::new();
    create_deployment(&fake).await;
    let in_flight = Arc::new(AtomicBool::new(false));
    let renewals = Arc::new(AtomicUsize::new(0));
    {
        let renewals = renewals.clone();
        fake.prepend_reactor("update", "leases", move |_| {
            renewals.fetch_add(1, Ordering::SeqCst);
            Reaction::Continue
        });
    }
    let factory = SharedInformerFactory::new(fake.client(), NEVER);
    let (started_tx, mut started) = mpsc::unbounded_channel();
    let lock = LeaseLock::new(fake.client(), "kube-system", "demo", "a");
    let flag = in_flight.clone();
    let leader = Controller::<Deployment>::new(&factory).run_leader_elected(
        lock,
        fast,
        move |_d, _ctx: Arc<()>| {
            let started = started_tx.clone();
            let flag = flag.clone();
            async move {
                flag.store(true, Ordering::SeqCst);
                let _clear = ClearOnDrop(flag);
                let _ = started.send(());
                std::future::pending::<()>().await;
                Ok::<_, Never>(Action::await_change())
            }
        },
        |_d, _e, _ctx| Action::rate_limited(),
        Arc::new(()),
        CancellationToken::new(),
    );
    tokio::select! {
        result = leader => panic!("returned: {result:?}"),
        _ = started.recv() => {}
    }
    // Dropped. Give every task the time to notice (on the paused clock).
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        !in_flight.load(Ordering::SeqCst),
        "the reconcile still runs"
    );
    let after_drop = renewals.load(Ordering::SeqCst);
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(
        renewals.load(Ordering::SeqCst),
        after_drop,
        "still renewing"
    );
    factory.shutdown().await;
}

/// Callbacks set in `tune` are called as well, and do not keep the controller from running:
/// the controller's own start is chained onto them.
#[tokio::test(start_paused = true)]
async fn callbacks_set_in_tune_are_called_and_the_controller_still_runs() {
    let fake = FakeApi::new();
    create_deployment(&fake).await;
    let factory = SharedInformerFactory::new(fake.client(), NEVER);
    let (reconciled_tx, mut reconciled) = mpsc::unbounded_channel();
    let (user_tx, mut user) = mpsc::unbounded_channel::<String>();
    let cancel = CancellationToken::new();
    let lock = LeaseLock::new(fake.client(), "kube-system", "demo", "a");
    let task = tokio::spawn(Controller::<Deployment>::new(&factory).run_leader_elected(
        lock,
        move |c: &mut LeaderElectionConfig| {
            fast(c);
            let (started, stopped, new_leader) = (user_tx.clone(), user_tx.clone(), user_tx);
            c.callbacks = LeaderCallbacks::new(
                move |_token| {
                    let _ = started.send("started".into());
                    async {}
                },
                move || {
                    let _ = stopped.send("stopped".into());
                },
            )
            .on_new_leader(move |identity| {
                let _ = new_leader.send(format!("new leader {identity}"));
            });
        },
        move |_d, _ctx: Arc<()>| {
            let reconciled = reconciled_tx.clone();
            async move {
                let _ = reconciled.send(());
                Ok::<_, Never>(Action::await_change())
            }
        },
        |_d, _e, _ctx| Action::rate_limited(),
        Arc::new(()),
        cancel.clone(),
    ));
    timeout(NEVER, reconciled.recv())
        .await
        .unwrap()
        .expect("the controller ran");
    cancel.cancel();
    timeout(NEVER, task).await.unwrap().unwrap().unwrap();
    let mut calls = Vec::new();
    while let Ok(call) = user.try_recv() {
        calls.push(call);
    }
    for expected in ["started", "stopped", "new leader a"] {
        assert!(
            calls.iter().any(|c| c == expected),
            "{expected} missing: {calls:?}"
        );
    }
    factory.shutdown().await;
}

/// Leadership ends in the same poll in which `run` returns by itself (here the leading token
/// is cancelled before the controller's first poll, and its `run` fails at once: its
/// informer was stopped): the call reports the lost Lease, whichever it noticed first.
#[tokio::test(start_paused = true)]
async fn leadership_lost_as_run_returns_is_reported_as_lost() {
    // Which of two ready branches a `select!` takes is random: repeat.
    for _ in 0..32 {
        let fake = FakeApi::new();
        let factory = SharedInformerFactory::new(fake.client(), NEVER);
        let _ = factory.informer::<Deployment>();
        let stopped = CancellationToken::new();
        factory.start(&stopped);
        stopped.cancel();
        factory.shutdown().await;

        let lock = LeaseLock::new(fake.client(), "kube-system", "demo", "a");
        let err = timeout(
            NEVER,
            Controller::<Deployment>::new(&factory).run_leader_elected(
                lock,
                |c: &mut LeaderElectionConfig| {
                    fast(c);
                    // Leadership ends as soon as it starts.
                    c.callbacks = LeaderCallbacks::new(
                        |token: CancellationToken| {
                            token.cancel();
                            async {}
                        },
                        || {},
                    );
                },
                |_d, _ctx: Arc<()>| async { Ok::<_, Never>(Action::await_change()) },
                |_d, _e, _ctx| Action::rate_limited(),
                Arc::new(()),
                CancellationToken::new(),
            ),
        )
        .await
        .expect("returns")
        .unwrap_err();
        assert!(matches!(err, RunError::LeadershipLost { .. }), "{err}");
    }
}

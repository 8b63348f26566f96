//! Leader election against a real kube-apiserver: candidates in one process compete for one
//! Lease in a test namespace, with short timings (3 s lease, 2 s renew deadline, 0.5 s
//! retry). The API server's optimistic concurrency, not a fake, decides who wins each write.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use kctrl_client::{Api, Client};
use kctrl_e2e::{TestNamespace, require_cluster};
use kctrl_leader_election::{LeaderCallbacks, LeaderElectionConfig, LeaderElector, LeaseLock};
use tokio_util::sync::CancellationToken;

const LEASE: &str = "e2e-election";
const LEASE_DURATION: Duration = Duration::from_secs(3);

/// One candidate running its election on a task.
struct Candidate {
    id: &'static str,
    elector: LeaderElector,
    cancel: CancellationToken,
    task: tokio::task::JoinHandle<()>,
    /// When `on_started_leading` ran, and the token it got.
    started: Arc<Mutex<Option<(Instant, CancellationToken)>>>,
    stopped: Arc<AtomicUsize>,
}

impl Candidate {
    fn start(client: &Client, ns: &str, id: &'static str, release_on_cancel: bool) -> Self {
        let started = Arc::new(Mutex::new(None));
        let stopped = Arc::new(AtomicUsize::new(0));
        let callbacks = LeaderCallbacks::new(
            {
                let started = started.clone();
                move |token: CancellationToken| {
                    *started.lock().unwrap() = Some((Instant::now(), token));
                    async {}
                }
            },
            {
                let stopped = stopped.clone();
                move || {
                    stopped.fetch_add(1, Ordering::SeqCst);
                }
            },
        );
        let mut config = LeaderElectionConfig::new(callbacks);
        config.lease_duration = LEASE_DURATION;
        config.renew_deadline = Duration::from_secs(2);
        config.retry_period = Duration::from_millis(500);
        config.release_on_cancel = release_on_cancel;
        config.name = LEASE.into();
        let lock = LeaseLock::new(client.clone(), ns, LEASE, id);
        let elector = LeaderElector::new(lock, config).expect("a valid election config");
        let cancel = CancellationToken::new();
        let task = tokio::spawn({
            let elector = elector.clone();
            let cancel = cancel.clone();
            async move { elector.run(cancel).await }
        });
        Self {
            id,
            elector,
            cancel,
            task,
            started,
            stopped,
        }
    }

    fn started_at(&self) -> Option<Instant> {
        self.started.lock().unwrap().as_ref().map(|(at, _)| *at)
    }

    fn leading_scope_ended(&self) -> bool {
        self.started
            .lock()
            .unwrap()
            .as_ref()
            .is_some_and(|(_, token)| token.is_cancelled())
    }
}

async fn lease(client: &Client, ns: &str) -> Lease {
    Api::<Lease>::namespaced(client.clone(), ns)
        .get(LEASE)
        .await
        .unwrap_or_else(|e| panic!("reading lease {ns}/{LEASE}: {e}"))
}

fn holder(lease: &Lease) -> String {
    lease
        .spec
        .as_ref()
        .and_then(|s| s.holder_identity.clone())
        .unwrap_or_default()
}

async fn wait_for(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) -> Duration {
    let start = Instant::now();
    while !cond() {
        assert!(
            start.elapsed() < limit,
            "timed out after {limit:?} waiting until {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    start.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_election_one_leader_release_and_takeover() {
    let cluster = require_cluster!();
    let client = cluster.admin();
    let ns = TestNamespace::create(&client, "leader-election").await;

    // Two candidates: exactly one leads, and keeps leading.
    let a = Candidate::start(&client, &ns.name, "candidate-a", true);
    let b = Candidate::start(&client, &ns.name, "candidate-b", true);
    wait_for("one candidate leads", Duration::from_secs(10), || {
        a.started_at().is_some() || b.started_at().is_some()
    })
    .await;
    let (mut leader, mut follower) = if a.started_at().is_some() {
        (a, b)
    } else {
        (b, a)
    };
    tokio::time::sleep(2 * LEASE_DURATION).await;
    assert!(leader.elector.is_leader(), "{} lost the lease", leader.id);
    assert!(
        follower.started_at().is_none(),
        "both {} and {} lead",
        leader.id,
        follower.id
    );
    assert!(!follower.elector.is_leader());
    assert_eq!(follower.elector.get_leader(), leader.id);
    let l = lease(&client, &ns.name).await;
    assert_eq!(holder(&l), leader.id);
    let spec = l.spec.clone().unwrap_or_default();
    assert_eq!(spec.lease_duration_seconds, Some(3));
    assert_eq!(spec.lease_transitions, Some(0));

    // Cancelling the leader releases the Lease: the follower takes over well before the
    // lease duration.
    let cancelled_at = Instant::now();
    leader.cancel.cancel();
    tokio::time::timeout(Duration::from_secs(5), &mut leader.task)
        .await
        .expect("the cancelled election returns within the renew deadline")
        .expect("the election task did not panic");
    assert_eq!(leader.stopped.load(Ordering::SeqCst), 1);
    assert!(leader.leading_scope_ended());
    assert!(!leader.elector.is_leader(), "released, so no longer leader");
    wait_for(
        "the follower leads after the release",
        Duration::from_secs(10),
        || follower.started_at().is_some(),
    )
    .await;
    let took = follower.started_at().unwrap() - cancelled_at;
    assert!(
        took < LEASE_DURATION,
        "{} took {took:?} to take over a released lease",
        follower.id
    );
    let l = lease(&client, &ns.name).await;
    assert_eq!(holder(&l), follower.id);
    assert_eq!(l.spec.and_then(|s| s.lease_transitions), Some(1));

    // A third candidate; then the new leader stops renewing without releasing (its task is
    // aborted). The third takes over once the Lease has not changed for about its duration.
    let mut c = Candidate::start(&client, &ns.name, "candidate-c", false);
    tokio::time::sleep(2 * LEASE_DURATION).await;
    assert!(follower.elector.is_leader());
    assert!(
        c.started_at().is_none(),
        "c took a lease that was being renewed"
    );
    assert_eq!(c.elector.get_leader(), follower.id);
    let aborted_at = Instant::now();
    follower.task.abort();
    let _ = (&mut follower.task).await;
    assert_eq!(follower.stopped.load(Ordering::SeqCst), 1);
    assert!(follower.leading_scope_ended());
    wait_for(
        "c takes over the abandoned lease",
        Duration::from_secs(15),
        || c.started_at().is_some(),
    )
    .await;
    let took = c.started_at().unwrap() - aborted_at;
    // c's clock starts at the last change it saw. The last renewal was at most one retry
    // (0.5 s) before the abort, and the record's bytes carry whole seconds, so c may have
    // seen the last *change* up to a second before that; c sees a change up to one
    // jittered retry (1.1 s) late and notices the expiry up to 1.1 s late.
    assert!(
        took >= LEASE_DURATION - Duration::from_millis(1600)
            && took <= LEASE_DURATION + Duration::from_secs(3),
        "c took over {took:?} after the leader stopped renewing"
    );
    let l = lease(&client, &ns.name).await;
    assert_eq!(holder(&l), "candidate-c");
    assert_eq!(l.spec.and_then(|s| s.lease_transitions), Some(2));

    c.cancel.cancel();
    let _ = (&mut c.task).await;
    assert_eq!(c.stopped.load(Ordering::SeqCst), 1);
    ns.delete().await;
}

//! The elector against the in-memory API (`kctrl-fake`) on tokio's paused clock: client-go's
//! leaderelection tests ported, plus takeover, loss and cancellation scenarios.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kctrl_fake::{FakeApi, Reaction, errors};
use prometheus_client::registry::Registry;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::{
    HealthzAdaptor, LeaderCallbacks, LeaderElectionConfig, LeaderElectionRecord, LeaderElector,
    LeaderEvent, LeaderMetrics, LeaseLock, PrometheusLeaderMetrics, TokioClock,
};

const NS: &str = "foo";
const NAME: &str = "bar";
const ID: &str = "baz";

fn held_by(holder: &str, lease_duration_seconds: i32) -> LeaderElectionRecord {
    LeaderElectionRecord {
        holder_identity: holder.into(),
        lease_duration_seconds,
        ..Default::default()
    }
}

/// Seeds Lease foo/bar; `None` leaves its spec empty.
fn seed(fake: &FakeApi, record: Option<&LeaderElectionRecord>) {
    fake.add(&Lease {
        metadata: ObjectMeta {
            namespace: Some(NS.into()),
            name: Some(NAME.into()),
            ..Default::default()
        },
        spec: record.map(LeaderElectionRecord::to_lease_spec),
    })
    .expect("seeding the lease");
}

fn stored(fake: &FakeApi) -> LeaderElectionRecord {
    let lease: Lease = fake.object(Some(NS), NAME).expect("the lease exists");
    LeaderElectionRecord::from_lease_spec(&lease.spec.unwrap_or_default())
}

fn verbs(fake: &FakeApi) -> Vec<&'static str> {
    fake.actions()
        .iter()
        .filter(|a| a.resource().plural == "leases")
        .map(|a| a.verb())
        .collect()
}

/// Counts what the elector reports to its metrics.
#[derive(Default)]
struct CountingMetrics {
    on: AtomicUsize,
    off: AtomicUsize,
    slowpath: AtomicUsize,
}

impl LeaderMetrics for Arc<CountingMetrics> {
    fn leader_on(&self, _: &str) {
        self.on.fetch_add(1, Ordering::SeqCst);
    }
    fn leader_off(&self, _: &str) {
        self.off.fetch_add(1, Ordering::SeqCst);
    }
    fn slowpath_exercised(&self, _: &str) {
        self.slowpath.fetch_add(1, Ordering::SeqCst);
    }
}

/// An elector for `identity` on Lease foo/bar with everything it does observable.
struct Harness {
    elector: LeaderElector,
    events: Arc<Mutex<Vec<String>>>,
    new_leaders: mpsc::UnboundedReceiver<String>,
    started: Arc<AtomicUsize>,
    stopped: Arc<AtomicUsize>,
    leading_tokens: Arc<Mutex<Vec<CancellationToken>>>,
    metrics: Arc<CountingMetrics>,
}

impl Harness {
    fn new(fake: &FakeApi, identity: &str, tweak: impl FnOnce(&mut LeaderElectionConfig)) -> Self {
        let events = Arc::new(Mutex::new(Vec::new()));
        let sink = events.clone();
        let lock = LeaseLock::new(fake.client(), NS, NAME, identity).with_event_hook(
            move |e: LeaderEvent| {
                sink.lock()
                    .unwrap()
                    .push(format!("{} {} {}", e.event_type, e.reason, e.message));
            },
        );
        let (tx, new_leaders) = mpsc::unbounded_channel();
        let started = Arc::new(AtomicUsize::new(0));
        let stopped = Arc::new(AtomicUsize::new(0));
        let leading_tokens = Arc::new(Mutex::new(Vec::new()));
        let callbacks = LeaderCallbacks::new(
            {
                let started = started.clone();
                let tokens = leading_tokens.clone();
                move |token: CancellationToken| {
                    started.fetch_add(1, Ordering::SeqCst);
                    tokens.lock().unwrap().push(token);
                    async {}
                }
            },
            {
                let stopped = stopped.clone();
                move || {
                    stopped.fetch_add(1, Ordering::SeqCst);
                }
            },
        )
        .on_new_leader(move |l| {
            let _ = tx.send(l);
        });
        let metrics = Arc::new(CountingMetrics::default());
        let mut config = LeaderElectionConfig::new(callbacks);
        config.metrics = Arc::new(metrics.clone());
        config.clock = Arc::new(TokioClock::new());
        tweak(&mut config);
        let elector = LeaderElector::new(lock, config).expect("a valid config");
        Self {
            elector,
            events,
            new_leaders,
            started,
            stopped,
            leading_tokens,
            metrics,
        }
    }

    fn observe(&self, record: LeaderElectionRecord, time: Option<Instant>) {
        let mut observed = self.elector.observed();
        observed.raw = record.raw();
        observed.record = record;
        observed.time = time;
    }

    fn transitions(&self) -> i32 {
        self.elector.observed().record.leader_transitions
    }

    fn events(&self) -> Vec<String> {
        self.events.lock().unwrap().clone()
    }

    async fn next_reported_leader(&mut self) -> String {
        tokio::time::timeout(Duration::from_secs(5), self.new_leaders.recv())
            .await
            .expect("on_new_leader was called")
            .expect("the channel is open")
    }

    fn spawn_run(&self) -> (CancellationToken, tokio::task::JoinHandle<()>) {
        let cancel = CancellationToken::new();
        let elector = self.elector.clone();
        let token = cancel.clone();
        (
            cancel,
            tokio::spawn(async move { elector.run(token).await }),
        )
    }
}

/// Lets spawned tasks and timers run for `d` of (paused) time.
async fn wait(d: Duration) {
    tokio::time::sleep(d).await;
}

async fn wait_until(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < limit, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[derive(Clone, Copy)]
enum Seen {
    Never,
    Past,
    Future,
}

struct Case {
    name: &'static str,
    /// `None`: no Lease; `Some(None)`: a Lease with an empty spec.
    lease: Option<Option<LeaderElectionRecord>>,
    observed: LeaderElectionRecord,
    seen: Seen,
    retry_after: Option<Duration>,
    expect_success: bool,
    transition_leader: bool,
    out_holder: &'static str,
    verbs: &'static [&'static str],
}

// client-go: TestTryAcquireOrRenewLeases. "Don't acquire from led, acked object" stores a
// 10 s lease: client-go's case (no duration) only holds because its real clock moves between
// two readings, which tokio's paused clock does not.
#[tokio::test(start_paused = true)]
async fn try_acquire_or_renew_cases() {
    let cases = [
        Case {
            name: "acquire from no object",
            lease: None,
            observed: LeaderElectionRecord::default(),
            seen: Seen::Never,
            retry_after: None,
            expect_success: true,
            transition_leader: false,
            out_holder: ID,
            verbs: &["get", "create"],
        },
        Case {
            name: "acquire from object without a record",
            lease: Some(None),
            observed: LeaderElectionRecord::default(),
            seen: Seen::Never,
            retry_after: None,
            expect_success: true,
            transition_leader: true,
            out_holder: ID,
            verbs: &["get", "update"],
        },
        Case {
            name: "acquire from led object with the lease duration seconds",
            lease: Some(Some(held_by("bing", 3))),
            observed: LeaderElectionRecord::default(),
            seen: Seen::Never,
            retry_after: Some(Duration::from_secs(3)),
            expect_success: true,
            transition_leader: true,
            out_holder: ID,
            verbs: &["get", "get", "update"],
        },
        Case {
            name: "acquire from unled object",
            lease: Some(Some(LeaderElectionRecord::default())),
            observed: LeaderElectionRecord::default(),
            seen: Seen::Never,
            retry_after: None,
            expect_success: true,
            transition_leader: true,
            out_holder: ID,
            verbs: &["get", "update"],
        },
        Case {
            name: "acquire from led, unacked object",
            lease: Some(Some(held_by("bing", 0))),
            observed: held_by("bing", 0),
            seen: Seen::Past,
            retry_after: None,
            expect_success: true,
            transition_leader: true,
            out_holder: ID,
            verbs: &["get", "update"],
        },
        Case {
            name: "acquire from empty led, acked object",
            lease: Some(Some(held_by("", 0))),
            observed: LeaderElectionRecord::default(),
            seen: Seen::Future,
            retry_after: None,
            expect_success: true,
            transition_leader: true,
            out_holder: ID,
            verbs: &["get", "update"],
        },
        Case {
            name: "don't acquire from led, acked object",
            lease: Some(Some(held_by("bing", 10))),
            observed: LeaderElectionRecord::default(),
            seen: Seen::Future,
            retry_after: None,
            expect_success: false,
            transition_leader: false,
            out_holder: "bing",
            verbs: &["get"],
        },
        Case {
            name: "renew already acquired object",
            lease: Some(Some(held_by(ID, 0))),
            observed: held_by(ID, 0),
            seen: Seen::Future,
            retry_after: None,
            expect_success: true,
            transition_leader: false,
            out_holder: ID,
            verbs: &["get", "update"],
        },
    ];
    for case in cases {
        let fake = FakeApi::new();
        if let Some(record) = &case.lease {
            seed(&fake, record.as_ref());
        }
        let mut h = Harness::new(&fake, ID, |_| {});
        let time = match case.seen {
            Seen::Never => None,
            Seen::Past => Some(Instant::now()),
            Seen::Future => Some(Instant::now() + Duration::from_secs(1000 * 3600)),
        };
        h.observe(case.observed.clone(), time);
        wait(Duration::from_secs(1)).await;
        let cancel = CancellationToken::new();
        let mut ok = h.elector.try_once(&cancel).await;
        if ok != case.expect_success {
            let retry = case
                .retry_after
                .unwrap_or_else(|| panic!("{}: succeeded = {ok}", case.name));
            wait(retry).await;
            ok = h.elector.try_once(&cancel).await;
        }
        assert_eq!(ok, case.expect_success, "{}", case.name);
        assert_eq!(h.elector.get_leader(), case.out_holder, "{}", case.name);
        assert_eq!(verbs(&fake), case.verbs, "{}: API calls", case.name);
        let want_transitions = i32::from(case.transition_leader);
        assert_eq!(h.transitions(), want_transitions, "{}", case.name);
        h.elector.maybe_report_transition();
        assert_eq!(
            h.next_reported_leader().await,
            case.out_holder,
            "{}",
            case.name
        );
        assert!(h.events().is_empty(), "{}: {:?}", case.name, h.events());
        if ok {
            let lease = stored(&fake);
            assert_eq!(lease.holder_identity, ID, "{}", case.name);
            assert_eq!(lease.lease_duration_seconds, 15, "{}", case.name);
            assert_eq!(lease.leader_transitions, want_transitions, "{}", case.name);
        }
    }
}

#[tokio::test(start_paused = true)]
async fn renewal_of_our_own_lease_keeps_acquire_time_and_counts_the_slow_path() {
    let fake = FakeApi::new();
    let h = Harness::new(&fake, ID, |_| {});
    let cancel = CancellationToken::new();
    assert!(h.elector.try_once(&cancel).await);
    let acquired = stored(&fake).acquire_time;
    assert!(acquired.is_some());
    // Someone else touches the Lease: the fast path conflicts, the slow path wins.
    let api = kctrl_client::Api::<Lease>::namespaced(fake.client(), NS);
    let mut lease = api.get(NAME).await.unwrap();
    lease.metadata.labels = Some([("touched".to_owned(), "yes".to_owned())].into());
    api.update(&Default::default(), &lease).await.unwrap();
    fake.clear_actions();
    wait(Duration::from_secs(2)).await;
    assert!(h.elector.try_once(&cancel).await);
    assert_eq!(verbs(&fake), ["update", "get", "update"]);
    assert_eq!(h.metrics.slowpath.load(Ordering::SeqCst), 1);
    assert_eq!(stored(&fake).acquire_time, acquired);
    assert_eq!(stored(&fake).leader_transitions, 0);
}

// client-go: TestReleaseLeaseLeases
#[tokio::test(start_paused = true)]
async fn release_acquired_lock() {
    let fake = FakeApi::new();
    seed(&fake, Some(&held_by(ID, 0)));
    let mut h = Harness::new(&fake, ID, |_| {});
    assert!(h.elector.try_once(&CancellationToken::new()).await);
    h.elector.maybe_report_transition();
    assert_eq!(h.next_reported_leader().await, ID);

    assert!(h.elector.release().await);
    assert_eq!(h.elector.get_leader(), "");
    assert!(!h.elector.is_leader());
    assert_eq!(h.transitions(), 0);
    assert_eq!(verbs(&fake), ["get", "update", "get", "update"]);
    h.elector.maybe_report_transition();
    assert_eq!(h.next_reported_leader().await, "");
    let lease = stored(&fake);
    assert_eq!(lease.holder_identity, "");
    assert_eq!(lease.lease_duration_seconds, 1);
    assert!(lease.acquire_time.is_some() && lease.acquire_time == lease.renew_time);
    assert!(h.events().is_empty());
}

// client-go: TestReleaseMethodCallsGet
#[tokio::test(start_paused = true)]
async fn release_reads_the_lock_first() {
    let fake = FakeApi::new();
    seed(&fake, Some(&held_by(ID, 10)));
    let h = Harness::new(&fake, ID, |_| {});
    h.observe(held_by(ID, 0), Some(Instant::now()));
    assert!(h.elector.release().await);
    assert_eq!(verbs(&fake), ["get", "update"]);
    assert_eq!(stored(&fake).holder_identity, "");
}

#[tokio::test(start_paused = true)]
async fn release_of_a_missing_lease_fails_and_of_a_foreign_lease_is_a_no_op() {
    let fake = FakeApi::new();
    let h = Harness::new(&fake, ID, |_| {});
    h.observe(held_by(ID, 10), Some(Instant::now()));
    assert!(!h.elector.release().await);

    seed(&fake, Some(&held_by("other", 10)));
    h.observe(held_by("other", 10), Some(Instant::now()));
    fake.clear_actions();
    assert!(h.elector.release().await);
    assert_eq!(verbs(&fake), ["get"]);
    assert_eq!(stored(&fake).holder_identity, "other");
}

// TestReleaseRetriesOnConflict
// Another candidate takes the lease over after our last renewal (our renewals failed and
// the lease expired): the fresh read in release() shows the new holder, and release must
// leave that lease alone even though the lock's resourceVersion would let the update through.
#[tokio::test(start_paused = true)]
async fn release_after_a_takeover_leaves_the_new_holders_lease_alone() {
    let fake = FakeApi::new();
    let h = Harness::new(&fake, ID, |_| {});
    assert!(h.elector.try_once(&CancellationToken::new()).await);
    assert!(h.elector.is_leader());
    let mut lease: Lease = fake.object(Some(NS), NAME).unwrap();
    lease.spec = Some(held_by("other", 15).to_lease_spec());
    fake.add(&lease).unwrap();
    fake.clear_actions();

    assert!(h.elector.release().await);
    assert_eq!(verbs(&fake), ["get"]);
    let stored = stored(&fake);
    assert_eq!(stored.holder_identity, "other");
    assert_eq!(stored.lease_duration_seconds, 15);
    assert_eq!(h.elector.get_leader(), "other");
    assert!(!h.elector.is_leader());
}

#[tokio::test(start_paused = true)]
async fn release_retries_on_conflict() {
    let fake = FakeApi::new();
    let h = Harness::new(&fake, ID, |_| {});
    assert!(h.elector.try_once(&CancellationToken::new()).await);
    let conflicts = Arc::new(AtomicUsize::new(0));
    let n = conflicts.clone();
    fake.prepend_reactor("update", "leases", move |a| {
        if n.fetch_add(1, Ordering::SeqCst) < 2 {
            Reaction::Error(errors::stale_update_conflict(a.resource(), NAME))
        } else {
            Reaction::Continue
        }
    });
    fake.clear_actions();
    assert!(h.elector.release().await);
    assert_eq!(
        verbs(&fake),
        ["get", "update", "get", "update", "get", "update"]
    );
    assert_eq!(stored(&fake).holder_identity, "");
    assert_eq!(stored(&fake).lease_duration_seconds, 1);
}

#[tokio::test(start_paused = true)]
async fn release_stops_retrying_when_someone_else_took_over() {
    let fake = FakeApi::new();
    let h = Harness::new(&fake, ID, |_| {});
    assert!(h.elector.try_once(&CancellationToken::new()).await);
    let fake2 = fake.clone();
    fake.prepend_reactor("update", "leases", move |a| {
        let mut lease: Lease = fake2.object(Some(NS), NAME).unwrap();
        lease.spec = Some(held_by("other", 10).to_lease_spec());
        fake2.add(&lease).unwrap();
        Reaction::Error(errors::stale_update_conflict(a.resource(), NAME))
    });
    fake.clear_actions();
    assert!(h.elector.release().await);
    assert_eq!(verbs(&fake), ["get", "update", "get"]);
    assert_eq!(h.elector.get_leader(), "other");
}

// client-go v0.37.2 retries a conflicting release until the renew deadline (v0.36.5 gave up
// at the first conflict): a lock that keeps conflicting is retried that long, then left.
#[tokio::test(start_paused = true)]
async fn release_retries_conflicts_until_the_renew_deadline() {
    let fake = FakeApi::new();
    let h = Harness::new(&fake, ID, short_timing);
    assert!(h.elector.try_once(&CancellationToken::new()).await);
    fake.prepend_reactor("update", "leases", |a| {
        Reaction::Error(errors::stale_update_conflict(a.resource(), NAME))
    });
    fake.clear_actions();
    let started = Instant::now();
    assert!(!h.elector.release().await);
    let took = started.elapsed();
    assert!(
        took <= Duration::from_secs(2)
            && took >= Duration::from_secs(2) - Duration::from_millis(20),
        "gave up after {took:?}, not at the 2 s renew deadline"
    );
    let updates = verbs(&fake).iter().filter(|v| **v == "update").count();
    assert!(updates > 100, "only {updates} attempts");
    assert_eq!(stored(&fake).holder_identity, ID);
}

fn short_timing(c: &mut LeaderElectionConfig) {
    c.lease_duration = Duration::from_secs(15);
    c.renew_deadline = Duration::from_secs(2);
    c.retry_period = Duration::from_secs(1);
}

// client-go: TestReleaseOnCancellation_Leases, "release acquired lock on cancellation of
// update": the election is cancelled while a renewal's update is in flight.
#[tokio::test(start_paused = true)]
async fn release_on_cancellation_during_update() {
    let fake = FakeApi::new();
    let h = Harness::new(&fake, ID, |c| {
        short_timing(c);
        c.release_on_cancel = true;
    });
    let (cancel, run) = h.spawn_run();
    let updates = Arc::new(AtomicUsize::new(0));
    let n = updates.clone();
    let token = cancel.clone();
    fake.prepend_reactor("update", "leases", move |_| {
        let k = n.fetch_add(1, Ordering::SeqCst) + 1;
        if k == 4 {
            token.cancel();
            return Reaction::Error(errors::internal_error("context canceled"));
        }
        if k % 2 == 1 && k < 5 {
            // Every other fast-path renewal fails, so renewals also take the slow path.
            return Reaction::Error(errors::internal_error("context canceled"));
        }
        Reaction::Continue
    });
    run.await.unwrap();
    assert!(cancel.is_cancelled());
    assert_eq!(updates.load(Ordering::SeqCst), 5);
    let lease = stored(&fake);
    assert_eq!(lease.holder_identity, "");
    assert_eq!(lease.lease_duration_seconds, 1);
    assert_eq!(
        h.events(),
        [
            "Normal LeaderElection baz became leader",
            "Normal LeaderElection baz stopped leading"
        ]
    );
    assert_eq!(h.started.load(Ordering::SeqCst), 1);
    assert_eq!(h.stopped.load(Ordering::SeqCst), 1);
    assert!(h.leading_tokens.lock().unwrap()[0].is_cancelled());
}

// client-go: TestReleaseOnCancellation_Leases, "release acquired lock on cancellation of
// get".
#[tokio::test(start_paused = true)]
async fn release_on_cancellation_during_get() {
    let fake = FakeApi::new();
    let h = Harness::new(&fake, ID, |c| {
        short_timing(c);
        c.release_on_cancel = true;
    });
    let (cancel, run) = h.spawn_run();
    let gets = Arc::new(AtomicUsize::new(0));
    let n = gets.clone();
    let token = cancel.clone();
    fake.prepend_reactor("get", "leases", move |_| {
        if n.fetch_add(1, Ordering::SeqCst) + 1 == 4 {
            token.cancel();
            return Reaction::Error(errors::internal_error("context canceled"));
        }
        Reaction::Continue
    });
    let updates = AtomicUsize::new(0);
    fake.prepend_reactor("update", "leases", move |_| {
        // Every fast-path renewal fails, so each renewal reads the lock.
        if updates.fetch_add(1, Ordering::SeqCst).is_multiple_of(2) {
            return Reaction::Error(errors::internal_error("context canceled"));
        }
        Reaction::Continue
    });
    run.await.unwrap();
    assert_eq!(gets.load(Ordering::SeqCst), 5, "{:?}", verbs(&fake));
    let lease = stored(&fake);
    assert_eq!(lease.holder_identity, "");
    assert_eq!(lease.lease_duration_seconds, 1);
    assert_eq!(
        h.events(),
        [
            "Normal LeaderElection baz became leader",
            "Normal LeaderElection baz stopped leading"
        ]
    );
    assert_eq!(h.stopped.load(Ordering::SeqCst), 1);
}

// client-go: TestFastPathLeaderElection, "Exercise fast path after lock acquired".
#[tokio::test(start_paused = true)]
async fn fast_path_after_lock_acquired() {
    let fake = FakeApi::new();
    let h = Harness::new(&fake, ID, short_timing);
    let (cancel, run) = h.spawn_run();
    let updates = Arc::new(AtomicUsize::new(0));
    let n = updates.clone();
    let token = cancel.clone();
    fake.prepend_reactor("update", "leases", move |_| {
        if n.fetch_add(1, Ordering::SeqCst) + 1 == 2 {
            token.cancel();
        }
        Reaction::Continue
    });
    run.await.unwrap();
    assert_eq!(verbs(&fake), ["get", "create", "update", "update"]);
    assert_eq!(h.metrics.slowpath.load(Ordering::SeqCst), 0);
    // Not configured to release: the Lease stays ours until it expires.
    assert_eq!(stored(&fake).holder_identity, ID);
}

// client-go: TestFastPathLeaderElection, "Fallback to slow path after fast path fails".
#[tokio::test(start_paused = true)]
async fn fallback_to_slow_path_after_fast_path_fails() {
    let fake = FakeApi::new();
    let h = Harness::new(&fake, ID, short_timing);
    let (cancel, run) = h.spawn_run();
    let updates = Arc::new(AtomicUsize::new(0));
    let n = updates.clone();
    let token = cancel.clone();
    fake.prepend_reactor("update", "leases", move |a| {
        match n.fetch_add(1, Ordering::SeqCst) + 1 {
            2 => return Reaction::Error(errors::conflict(a.resource(), NAME, "fake conflict")),
            4 => token.cancel(),
            _ => {}
        }
        Reaction::Continue
    });
    run.await.unwrap();
    assert_eq!(
        verbs(&fake),
        [
            "get", "create", "update", "update", "get", "update", "update"
        ]
    );
    assert_eq!(h.metrics.slowpath.load(Ordering::SeqCst), 1);
}

// client-go: TestCheckMethodRace — here, check() while a fast renewal loop runs stays
// healthy and never blocks the election.
#[tokio::test(start_paused = true)]
async fn check_while_renewing() {
    let fake = FakeApi::new();
    let h = Harness::new(&fake, ID, |c| {
        c.lease_duration = Duration::from_secs(2);
        c.renew_deadline = Duration::from_secs(1);
        c.retry_period = Duration::from_millis(5);
    });
    let (cancel, run) = h.spawn_run();
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(2) {
        assert_eq!(h.elector.check(Duration::from_secs(1)), Ok(()));
        wait(Duration::from_millis(10)).await;
    }
    assert!(h.elector.is_leader());
    let renewals = verbs(&fake).iter().filter(|v| **v == "update").count();
    assert!(renewals > 100, "only {renewals} renewals in 2 s");
    cancel.cancel();
    run.await.unwrap();
}

// client-go: TestLeaderElectionHealthChecker
#[tokio::test(start_paused = true)]
async fn healthz_adaptor_cases() {
    let adaptor = HealthzAdaptor::new(Duration::from_secs(20));
    assert_eq!(adaptor.name(), "leaderElection");
    assert_eq!(adaptor.check(), Ok(()), "before an elector is attached");

    let fake = FakeApi::new();
    let setup = |holder: &str| {
        let h = Harness::new(&fake, "healthTest", |c| {
            c.lease_duration = Duration::from_secs(60);
            c.name = "foo".into();
        });
        h.observe(held_by(holder, 60), Some(Instant::now()));
        adaptor.set_leader_election(&h.elector);
        h
    };

    let _h = setup("healthTest");
    wait(Duration::from_secs(3600)).await;
    let err = adaptor.check().unwrap_err();
    assert_eq!(
        err.to_string(),
        "failed election to renew leadership on lease foo"
    );
    assert_eq!(err.since_last_renewal, Duration::from_secs(3600));

    let _h = setup("otherServer");
    wait(Duration::from_secs(3600)).await;
    assert_eq!(
        adaptor.check(),
        Ok(()),
        "far expired but held by another server"
    );

    let _h = setup("healthTest");
    assert_eq!(adaptor.check(), Ok(()), "not expired");

    let _h = setup("healthTest");
    wait(Duration::from_secs(61)).await;
    assert_eq!(adaptor.check(), Ok(()), "expired but inside the timeout");
    wait(Duration::from_secs(20)).await;
    assert!(adaptor.check().is_err(), "expired beyond the timeout");
}

#[tokio::test(start_paused = true)]
async fn config_watchdog_is_attached_to_the_elector() {
    let fake = FakeApi::new();
    let adaptor = HealthzAdaptor::default();
    let h = Harness::new(&fake, ID, |c| c.watchdog = Some(adaptor.clone()));
    h.observe(held_by(ID, 10), Some(Instant::now()));
    assert_eq!(adaptor.check(), Ok(()));
    wait(Duration::from_secs(35)).await;
    assert_eq!(adaptor.check(), Ok(()), "15 s lease + 20 s tolerance");
    wait(Duration::from_secs(1)).await;
    assert!(adaptor.check().is_err());
}

#[tokio::test(start_paused = true)]
async fn run_reports_metrics_and_stops_leading_when_renewals_fail() {
    let fake = FakeApi::new();
    let mut registry = Registry::default();
    let prometheus = PrometheusLeaderMetrics::new(&mut registry);
    let h = Harness::new(&fake, ID, |c| {
        c.name = "kcm".into();
        c.metrics = Arc::new(prometheus.clone());
    });
    let text = || {
        let mut s = String::new();
        prometheus_client::encoding::text::encode(&mut s, &registry).unwrap();
        s
    };
    assert!(text().contains(r#"leader_election_master_status{name="kcm"} 0"#));
    let (cancel, run) = h.spawn_run();
    wait_until("leading", Duration::from_secs(5), || h.elector.is_leader()).await;
    wait(Duration::from_millis(1)).await;
    assert!(text().contains(r#"leader_election_master_status{name="kcm"} 1"#));
    assert_eq!(h.started.load(Ordering::SeqCst), 1);

    // The API server becomes unreachable: renewals fail until the deadline passes.
    fake.prepend_reactor("*", "leases", |_| {
        Reaction::Error(errors::internal_error("etcd is down"))
    });
    let lost_at = Instant::now();
    run.await.unwrap();
    let took = lost_at.elapsed();
    assert!(
        took >= Duration::from_secs(10) && took <= Duration::from_secs(13),
        "stopped leading after {took:?}"
    );
    assert!(!cancel.is_cancelled());
    assert!(h.leading_tokens.lock().unwrap()[0].is_cancelled());
    assert_eq!(h.stopped.load(Ordering::SeqCst), 1);
    assert!(text().contains(r#"leader_election_master_status{name="kcm"} 0"#));
    assert_eq!(
        h.events(),
        [
            "Normal LeaderElection baz became leader",
            "Normal LeaderElection baz stopped leading"
        ]
    );
    // Without release the elector still believes it holds the lease, so health turns bad
    // once the lease and the tolerance have passed.
    assert!(h.elector.is_leader());
    assert_eq!(h.elector.check(Duration::from_secs(20)), Ok(()));
    wait(Duration::from_secs(30)).await;
    assert!(h.elector.check(Duration::from_secs(20)).is_err());
}

#[tokio::test(start_paused = true)]
async fn on_stopped_leading_is_called_even_without_leading() {
    let fake = FakeApi::new();
    seed(&fake, Some(&held_by("other", 15)));
    let h = Harness::new(&fake, ID, |_| {});
    let (cancel, run) = h.spawn_run();
    wait(Duration::from_secs(5)).await;
    assert!(!h.elector.is_leader());
    assert_eq!(h.elector.get_leader(), "other");
    cancel.cancel();
    run.await.unwrap();
    assert_eq!(h.started.load(Ordering::SeqCst), 0);
    assert_eq!(h.stopped.load(Ordering::SeqCst), 1);
    assert!(h.events().is_empty());
    assert_eq!(h.metrics.on.load(Ordering::SeqCst), 0);
}

#[tokio::test(start_paused = true)]
async fn aborting_the_election_ends_the_leading_scope() {
    let fake = FakeApi::new();
    let h = Harness::new(&fake, ID, |_| {});
    let (_cancel, run) = h.spawn_run();
    wait_until("leading", Duration::from_secs(5), || {
        h.started.load(Ordering::SeqCst) == 1
    })
    .await;
    run.abort();
    let _ = run.await;
    assert!(h.leading_tokens.lock().unwrap()[0].is_cancelled());
    assert_eq!(h.stopped.load(Ordering::SeqCst), 1);
}

#[tokio::test(start_paused = true)]
async fn a_candidate_takes_over_only_after_the_lease_stopped_changing_for_its_duration() {
    let fake = FakeApi::new();
    let mut a = Harness::new(&fake, "a", |c| c.lease_duration = Duration::from_secs(15));
    let mut b = Harness::new(&fake, "b", |c| c.lease_duration = Duration::from_secs(15));
    let (_ca, run_a) = a.spawn_run();
    wait_until("a leads", Duration::from_secs(5), || a.elector.is_leader()).await;
    let (cb, run_b) = b.spawn_run();
    // b sees a renewing for a minute and never takes over.
    wait(Duration::from_secs(60)).await;
    assert!(a.elector.is_leader());
    assert!(!b.elector.is_leader());
    assert_eq!(b.elector.get_leader(), "a");
    assert_eq!(b.next_reported_leader().await, "a");
    assert_eq!(a.next_reported_leader().await, "a");

    // a stops renewing without releasing.
    run_a.abort();
    let _ = run_a.await;
    let stopped_at = Instant::now();
    wait_until("b leads", Duration::from_secs(40), || b.elector.is_leader()).await;
    let took = stopped_at.elapsed();
    // b times the lease from when it saw the last change: a renewed at most 2 s before it
    // stopped (lower bound 15 − 2 s); b may see that change up to one retry (2.2 × 2 s)
    // late and notice the expiry up to one retry late (upper bound 15 + 2 × 4.4 s).
    assert!(
        took >= Duration::from_secs(13) && took <= Duration::from_millis(23_800),
        "b took over after {took:?}"
    );
    assert_eq!(b.next_reported_leader().await, "b");
    let lease = stored(&fake);
    assert_eq!(lease.holder_identity, "b");
    assert_eq!(lease.leader_transitions, 1);
    cb.cancel();
    run_b.await.unwrap();
}

//! Members against the in-memory API (`kctrl-fake`) on tokio's paused clock: the split
//! comes into force, handovers wait for drains, a member that cannot renew stops before its
//! Lease expires and only then do others take its buckets, racing claims never both win,
//! lost answers are settled, bad input is refused. A ledger of simulated reconciles checks
//! the guarantee itself: no bucket reconciled by two members at once.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;
use k8s_openapi::api::coordination::v1::Lease;
use kctrl_fake::FakeApi;
use prometheus_client::registry::Registry;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::{
    BucketSet, BucketState, KubeLeaseStore, LeaseStore, LeaseWrite, MemberLease,
    PrometheusShardMetrics, RunError, ShardConfig, ShardMember, StoreError, split,
};

const NS: &str = "shards";
const GROUP: &str = "widgets";
const LEASE: Duration = Duration::from_secs(15);
const RENEW: Duration = Duration::from_secs(10);

/// How a member's store behaves.
const UP: u8 = 0;
/// Every call hangs (a partition).
const HANG: u8 = 1;
/// Writes are applied but their answers never come back.
const LOSE_ANSWERS: u8 = 2;

/// Run once, right after the first applied update of the member's Lease that claims a
/// given bucket, before its answer returns.
type Hook = Box<dyn FnOnce() -> BoxFuture<'static, ()> + Send>;

/// The member's view of the store, with faults and a record of its last acknowledged write.
struct Faulty {
    inner: KubeLeaseStore,
    mode: Arc<AtomicU8>,
    last_ack: Arc<Mutex<Option<Instant>>>,
    after_claim: Arc<Mutex<Option<(u32, Hook)>>>,
}

impl Faulty {
    fn gate<'a, T: Send + 'a>(
        &'a self,
        write: bool,
        call: BoxFuture<'a, Result<T, StoreError>>,
    ) -> BoxFuture<'a, Result<T, StoreError>> {
        async move {
            match self.mode.load(Ordering::SeqCst) {
                HANG => futures::future::pending().await,
                LOSE_ANSWERS if write => {
                    let _ = call.await;
                    futures::future::pending().await
                }
                _ => {
                    let result = call.await;
                    if write && result.is_ok() {
                        *self.last_ack.lock().unwrap() = Some(Instant::now());
                    }
                    result
                }
            }
        }
        .boxed()
    }
}

impl LeaseStore for Faulty {
    fn list(&self) -> BoxFuture<'_, Result<Vec<MemberLease>, StoreError>> {
        self.gate(false, self.inner.list())
    }
    fn get<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<MemberLease, StoreError>> {
        self.gate(false, self.inner.get(name))
    }
    fn create<'a>(&'a self, l: &'a LeaseWrite) -> BoxFuture<'a, Result<MemberLease, StoreError>> {
        self.gate(true, self.inner.create(l))
    }
    fn update<'a>(
        &'a self,
        l: &'a LeaseWrite,
        rv: &'a str,
    ) -> BoxFuture<'a, Result<MemberLease, StoreError>> {
        let call = async move {
            let result = self.inner.update(l, rv).await;
            let hook = {
                let mut slot = self.after_claim.lock().unwrap();
                match slot.as_ref() {
                    Some((b, _)) if result.is_ok() && l.claims.contains(*b) => slot.take(),
                    _ => None,
                }
            };
            if let Some((_, hook)) = hook {
                hook().await;
            }
            result
        };
        self.gate(true, call.boxed())
    }
    fn delete<'a>(&'a self, n: &'a str, rv: &'a str) -> BoxFuture<'a, Result<(), StoreError>> {
        self.gate(true, self.inner.delete(n, rv))
    }
}

/// Who reconciles what, when: every simulated reconcile's interval, checked for overlaps
/// per bucket as it starts.
#[derive(Default)]
struct Ledger {
    /// Per bucket, the members reconciling it now, with how many reconciles each.
    running: Mutex<BTreeMap<u32, BTreeMap<String, usize>>>,
    violations: Mutex<Vec<String>>,
    reconciles: Mutex<BTreeMap<String, usize>>,
    /// Per bucket, (member, became active at, stopped being active at).
    active: Mutex<Vec<(String, u32, BucketState, Instant)>>,
}

impl Ledger {
    fn start(&self, member: &str, bucket: u32) {
        let mut running = self.running.lock().unwrap();
        let here = running.entry(bucket).or_default();
        if let Some(other) = here.iter().find(|(m, n)| m.as_str() != member && **n > 0) {
            self.violations.lock().unwrap().push(format!(
                "{member} began bucket {bucket} while {} reconciled it",
                other.0
            ));
        }
        *here.entry(member.to_owned()).or_default() += 1;
        *self
            .reconciles
            .lock()
            .unwrap()
            .entry(member.to_owned())
            .or_default() += 1;
    }

    fn end(&self, member: &str, bucket: u32) {
        let mut running = self.running.lock().unwrap();
        if let Some(n) = running.get_mut(&bucket).and_then(|h| h.get_mut(member)) {
            *n -= 1;
        }
    }

    fn assert_clean(&self) {
        let v = self.violations.lock().unwrap();
        assert!(v.is_empty(), "overlapping reconciles: {v:#?}");
    }

    /// The first time after `since` that `member` made `bucket` active.
    fn activated(&self, member: &str, bucket: u32, since: Instant) -> Option<Instant> {
        self.active
            .lock()
            .unwrap()
            .iter()
            .find(|(m, b, s, at)| {
                m == member && *b == bucket && *s == BucketState::Active && *at >= since
            })
            .map(|(.., at)| *at)
    }
}

struct Member {
    member: ShardMember,
    cancel: CancellationToken,
    task: JoinHandle<Result<(), RunError>>,
    mode: Arc<AtomicU8>,
    last_ack: Arc<Mutex<Option<Instant>>>,
    after_claim: Arc<Mutex<Option<(u32, Hook)>>>,
    workers: Vec<JoinHandle<()>>,
}

impl Member {
    fn lease_name(&self) -> String {
        self.member.lease_name().to_owned()
    }
}

fn config(identity: &str, ledger: &Arc<Ledger>) -> ShardConfig {
    let mut config = ShardConfig::new(GROUP, NS, identity);
    let ledger = ledger.clone();
    config.on_transition = Some(Arc::new(move |member: &str, bucket, state| {
        ledger
            .active
            .lock()
            .unwrap()
            .push((member.to_owned(), bucket, state, Instant::now()));
    }));
    config
}

fn start(fake: &FakeApi, config: ShardConfig, ledger: &Arc<Ledger>, workers: usize) -> Member {
    let mode = Arc::new(AtomicU8::new(UP));
    let last_ack = Arc::new(Mutex::new(None));
    let after_claim = Arc::new(Mutex::new(None));
    let store = Faulty {
        inner: KubeLeaseStore::new(fake.client(), NS, GROUP),
        mode: mode.clone(),
        last_ack: last_ack.clone(),
        after_claim: after_claim.clone(),
    };
    let member = ShardMember::with_store(Arc::new(store), config).expect("a valid config");
    let cancel = CancellationToken::new();
    let task = tokio::spawn({
        let (member, cancel) = (member.clone(), cancel.clone());
        async move { member.run(cancel).await }
    });
    let workers = (0..workers)
        .map(|i| tokio::spawn(reconciler(member.clone(), ledger.clone(), i as u64)))
        .collect();
    Member {
        member,
        cancel,
        task,
        mode,
        last_ack,
        after_claim,
        workers,
    }
}

/// A worker reconciling objects of random hashes: each reconcile takes 50 to 500 ms and
/// ends early (aborted) when the member stops, as a controller aborts its reconciles.
async fn reconciler(member: ShardMember, ledger: Arc<Ledger>, seed: u64) {
    let mut rng =
        fastrand::Rng::with_seed(seed ^ kctrl_client::sharding::hash_field(member.lease_name()));
    let identity = member.config().identity.clone();
    let stopped = member.stopped();
    loop {
        let hash = rng.u64(..);
        match member.try_begin(hash) {
            Some(guard) => {
                let bucket = guard.bucket();
                ledger.start(&identity, bucket);
                let work = Duration::from_millis(rng.u64(50..500));
                tokio::select! {
                    () = tokio::time::sleep(work) => {}
                    () = stopped.cancelled() => {}
                }
                ledger.end(&identity, bucket);
                drop(guard);
            }
            None => {
                if stopped.is_cancelled() {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(rng.u64(1..20))).await;
            }
        }
    }
}

/// Advances the paused clock in small steps until `check` holds (or panics after `limit`).
async fn until(what: &str, limit: Duration, mut check: impl FnMut() -> bool) {
    let start = Instant::now();
    while !check() {
        assert!(
            start.elapsed() < limit,
            "timed out after {limit:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn expected_split(names: &[String]) -> Vec<String> {
    let mut sorted = names.to_vec();
    sorted.sort();
    split::assign(&sorted, 64)
        .into_iter()
        .map(|i| sorted[i].clone())
        .collect()
}

/// Whether each bucket is active on exactly the member the split names, and nowhere else.
fn split_in_force(members: &[&Member]) -> bool {
    let names: Vec<String> = members.iter().map(|m| m.lease_name()).collect();
    let owners = expected_split(&names);
    (0..64u32).all(|b| {
        members
            .iter()
            .all(|m| m.member.is_active(b) == (owners[b as usize] == m.lease_name()))
    })
}

fn lease(fake: &FakeApi, name: &str) -> Option<Lease> {
    fake.object(Some(NS), name)
}

#[tokio::test(start_paused = true)]
async fn alone_a_member_takes_every_bucket_and_leaves_cleanly() {
    let fake = FakeApi::new();
    let ledger = Arc::new(Ledger::default());
    let mut registry = Registry::default();
    let metrics = PrometheusShardMetrics::new(&mut registry);
    let mut c = config("a", &ledger);
    c.metrics = Arc::new(metrics);
    let a = start(&fake, c, &ledger, 2);
    assert!(!a.member.is_ready());
    until("every bucket active", Duration::from_secs(10), || {
        a.member.active_buckets().len() == 64
    })
    .await;
    assert!(a.member.is_ready());
    let stored = lease(&fake, "widgets-a").expect("the member's lease");
    let annotations = stored.metadata.annotations.unwrap();
    assert_eq!(annotations["shard.kctrl.io/buckets"], "0-63");
    assert_eq!(annotations["shard.kctrl.io/bucket-count"], "64");
    assert_eq!(
        stored.metadata.labels.unwrap()["shard.kctrl.io/group"],
        "widgets"
    );
    assert_eq!(stored.spec.unwrap().lease_duration_seconds, Some(15));
    tokio::time::sleep(Duration::from_secs(30)).await;

    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    for want in [
        r#"shard_member_buckets{group="widgets"} 64"#,
        r#"shard_member_hash_fraction{group="widgets"} 1.0"#,
        r#"shard_member_ranges{group="widgets",ranges="0x0000000000000000-0x10000000000000000"} 1"#,
        r#"shard_handovers_total{group="widgets",direction="acquired"} 64"#,
        r#"shard_rebalance_duration_seconds_count{group="widgets"} 1"#,
        r#"shard_members{group="widgets"} 1"#,
    ] {
        assert!(text.contains(want), "{want} missing:\n{text}");
    }

    a.cancel.cancel();
    a.task.await.unwrap().expect("a graceful stop");
    assert!(lease(&fake, "widgets-a").is_none(), "the lease was deleted");
    assert!(a.member.try_begin(0).is_none());
    assert!(a.member.stopped().is_cancelled());
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    assert!(
        text.contains(r#"shard_handovers_total{group="widgets",direction="released"} 64"#),
        "{text}"
    );
    assert!(
        text.contains(r#"shard_member_ready{group="widgets"} 0"#),
        "{text}"
    );
    ledger.assert_clean();
    for w in a.workers {
        w.await.unwrap();
    }
    assert!(ledger.reconciles.lock().unwrap()["a"] > 100);
}

#[tokio::test(start_paused = true)]
async fn three_members_split_the_buckets_as_rendezvous_hashing_says() {
    let fake = FakeApi::new();
    let ledger = Arc::new(Ledger::default());
    let a = start(&fake, config("a", &ledger), &ledger, 3);
    let b = start(&fake, config("b", &ledger), &ledger, 3);
    let c = start(&fake, config("c", &ledger), &ledger, 3);
    until("the split in force", Duration::from_secs(60), || {
        split_in_force(&[&a, &b, &c])
    })
    .await;
    // It stays so.
    for _ in 0..20 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(split_in_force(&[&a, &b, &c]));
    }
    let total: usize = [&a, &b, &c]
        .iter()
        .map(|m| m.member.active_buckets().len())
        .sum();
    assert_eq!(total, 64);
    let status = a.member.status().borrow().clone();
    assert_eq!(status.members, vec!["a", "b", "c"]);
    ledger.assert_clean();
}

// With more members than buckets some members hold none: once the split is in force they are
// ready all the same (standbys), or a rolling update of the group would never finish.
#[tokio::test(start_paused = true)]
async fn members_the_split_gives_no_bucket_are_ready_once_it_is_in_force() {
    let fake = FakeApi::new();
    let ledger = Arc::new(Ledger::default());
    let members: Vec<Member> = ["a", "b", "c", "d"]
        .iter()
        .map(|name| {
            let mut c = config(name, &ledger);
            c.bucket_count = 2;
            start(&fake, c, &ledger, 1)
        })
        .collect();
    until("every member ready", Duration::from_secs(60), || {
        members.iter().all(|m| m.member.is_ready())
    })
    .await;
    let holding: Vec<usize> = members
        .iter()
        .map(|m| m.member.active_buckets().len())
        .collect();
    assert_eq!(holding.iter().sum::<usize>(), 2, "{holding:?}");
    assert!(
        holding.iter().filter(|&&n| n == 0).count() >= 2,
        "{holding:?}"
    );
    // A member that never joined is not ready.
    let late = ShardMember::new(fake.client(), {
        let mut c = ShardConfig::new(GROUP, NS, "e");
        c.bucket_count = 2;
        c
    })
    .unwrap();
    assert!(!late.is_ready());
    ledger.assert_clean();
}

#[tokio::test(start_paused = true)]
async fn a_joining_member_gets_a_bucket_only_after_its_holder_drained_it() {
    let fake = FakeApi::new();
    let ledger = Arc::new(Ledger::default());
    let a = start(&fake, config("a", &ledger), &ledger, 2);
    until("a holds everything", Duration::from_secs(10), || {
        a.member.active_buckets().len() == 64
    })
    .await;
    // A bucket the split will give to b, with a long reconcile in flight on a.
    let owners = expected_split(&["widgets-a".into(), "widgets-b".into()]);
    let moving = (0..64u32)
        .find(|&x| owners[x as usize] == "widgets-b")
        .unwrap();
    let held = a.member.try_begin_bucket(moving).expect("active on a");
    let joined = Instant::now();
    let b = start(&fake, config("b", &ledger), &ledger, 2);

    // Every other bucket of b's moves; this one waits, draining on a, for a minute.
    until("the other buckets moved", Duration::from_secs(30), || {
        (0..64u32)
            .filter(|&x| x != moving && owners[x as usize] == "widgets-b")
            .all(|x| b.member.is_active(x))
    })
    .await;
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(a.member.bucket_state(moving), BucketState::Draining);
    assert!(held.is_valid(), "a draining bucket's reconcile may finish");
    assert!(!b.member.is_active(moving));
    assert!(
        a.member.try_begin_bucket(moving).is_none(),
        "no new reconcile while draining"
    );

    let released = Instant::now();
    drop(held);
    until("b gets the drained bucket", Duration::from_secs(10), || {
        b.member.is_active(moving)
    })
    .await;
    let at = ledger.activated("b", moving, joined).unwrap();
    assert!(
        at >= released,
        "b activated bucket {moving} before a released it"
    );
    assert!(split_in_force(&[&a, &b]));
    // Every bucket that moved was active on a until it was released, and on b only after.
    let events = ledger.active.lock().unwrap().clone();
    for x in (0..64u32).filter(|&x| owners[x as usize] == "widgets-b") {
        let released_at = events
            .iter()
            .find(|(m, bk, s, _)| m == "a" && *bk == x && *s == BucketState::Idle)
            .map(|e| e.3)
            .unwrap_or_else(|| panic!("a never released bucket {x}"));
        let acquired_at = ledger.activated("b", x, joined).unwrap();
        assert!(acquired_at >= released_at, "bucket {x}");
    }
    ledger.assert_clean();
}

#[tokio::test(start_paused = true)]
async fn a_member_that_cannot_renew_stops_before_its_lease_expires_and_only_then_is_replaced() {
    let fake = FakeApi::new();
    let ledger = Arc::new(Ledger::default());
    let a = start(&fake, config("a", &ledger), &ledger, 3);
    let b = start(&fake, config("b", &ledger), &ledger, 3);
    until("the split in force", Duration::from_secs(60), || {
        split_in_force(&[&a, &b])
    })
    .await;
    let a_buckets = a.member.active_buckets();
    assert!(!a_buckets.is_empty());

    // a's API calls hang from now on.
    a.mode.store(HANG, Ordering::SeqCst);
    let cut = Instant::now();
    let stopped = a.member.stopped();
    stopped.cancelled().await;
    let stopped_at = Instant::now();
    let last_ack = a.last_ack.lock().unwrap().expect("a renewed before");
    assert!(
        stopped_at <= last_ack + RENEW,
        "a stopped {:?} after its last renewal",
        stopped_at - last_ack
    );
    assert!(a.member.active_buckets().is_empty());
    let err = a.task.await.unwrap().unwrap_err();
    assert!(matches!(err, RunError::RenewFailed { .. }), "{err}");
    assert!(
        err.to_string()
            .contains("not renewed within the renew deadline"),
        "{err}"
    );

    until("b takes everything", Duration::from_secs(60), || {
        b.member.active_buckets().len() == 64
    })
    .await;
    for x in a_buckets.iter() {
        let at = ledger.activated("b", x, cut).unwrap();
        assert!(
            at >= last_ack + LEASE,
            "b took bucket {x} {:?} after a's last renewal, before its lease expired",
            at - last_ack
        );
    }
    let cleared = lease(&fake, "widgets-a").map(|l| l.metadata.annotations.unwrap());
    if let Some(annotations) = cleared {
        assert_eq!(annotations["shard.kctrl.io/buckets"], "");
        assert_eq!(annotations["shard.kctrl.io/expired-by"], "b");
    }
    ledger.assert_clean();
}

#[tokio::test(start_paused = true)]
async fn an_aborted_member_stops_at_once_and_its_buckets_wait_for_its_lease_to_expire() {
    let fake = FakeApi::new();
    let ledger = Arc::new(Ledger::default());
    let a = start(&fake, config("a", &ledger), &ledger, 2);
    let b = start(&fake, config("b", &ledger), &ledger, 2);
    let c = start(&fake, config("c", &ledger), &ledger, 2);
    until("the split in force", Duration::from_secs(60), || {
        split_in_force(&[&a, &b, &c])
    })
    .await;
    let a_buckets = a.member.active_buckets();
    a.task.abort();
    let _ = a.task.await;
    let aborted = Instant::now();
    assert!(a.member.stopped().is_cancelled());
    assert!(a.member.active_buckets().is_empty());
    let last_ack = a.last_ack.lock().unwrap().unwrap();

    until("b and c take a's buckets", Duration::from_secs(60), || {
        split_in_force(&[&b, &c])
    })
    .await;
    for x in a_buckets.iter() {
        let taker = if b.member.is_active(x) { "b" } else { "c" };
        let at = ledger.activated(taker, x, aborted).unwrap();
        assert!(
            at >= last_ack + LEASE,
            "bucket {x} taken {:?} after",
            at - last_ack
        );
    }
    ledger.assert_clean();
}

fn ghost_write(claims: BucketSet) -> LeaseWrite {
    LeaseWrite {
        name: "widgets-ghost".into(),
        group: GROUP.into(),
        holder: "ghost".into(),
        token: "ghost-token".into(),
        bucket_count: 64,
        claims,
        lease_duration: LEASE,
        acquire_time: k8s_openapi::jiff::Timestamp::now(),
        renew_time: k8s_openapi::jiff::Timestamp::now(),
        expired_by: None,
        finalizer: true,
    }
}

/// A member kept alive by the test, claiming what it is told.
struct Ghost {
    store: KubeLeaseStore,
    lease: Arc<Mutex<MemberLease>>,
}

impl Ghost {
    async fn new(fake: &FakeApi, claims: BucketSet) -> Self {
        let store = KubeLeaseStore::new(fake.client(), NS, GROUP);
        let lease = store.create(&ghost_write(claims)).await.unwrap();
        Self {
            store,
            lease: Arc::new(Mutex::new(lease)),
        }
    }

    async fn claim(&self, claims: BucketSet) {
        let version = self.lease.lock().unwrap().resource_version.clone();
        let lease = self
            .store
            .update(&ghost_write(claims), &version)
            .await
            .unwrap();
        *self.lease.lock().unwrap() = lease;
    }

    fn claims(&self) -> BucketSet {
        self.lease.lock().unwrap().claims.clone().unwrap()
    }

    /// Renews every 2 s for `time`, keeping its claims.
    async fn renew_for(&self, time: Duration) {
        let end = Instant::now() + time;
        while Instant::now() < end {
            tokio::time::sleep(Duration::from_secs(2)).await;
            self.claim(self.claims()).await;
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_bucket_another_lease_claims_is_never_taken_until_withdrawn() {
    let fake = FakeApi::new();
    let ledger = Arc::new(Ledger::default());
    let ghost = Ghost::new(&fake, BucketSet::all(64)).await;
    let a = start(&fake, config("a", &ledger), &ledger, 1);
    let owners = expected_split(&["widgets-a".into(), "widgets-ghost".into()]);
    let wanted: BucketSet = (0..64u32)
        .filter(|&x| owners[x as usize] == "widgets-a")
        .collect();
    ghost.renew_for(Duration::from_secs(60)).await;
    assert!(
        a.member.active_buckets().is_empty(),
        "a took a claimed bucket"
    );

    // The ghost keeps one bucket the split gives a.
    let kept = wanted.iter().next().unwrap();
    ghost
        .claim(
            (0..64u32)
                .filter(|&x| !wanted.contains(x) || x == kept)
                .collect(),
        )
        .await;
    ghost.renew_for(Duration::from_secs(30)).await;
    assert_eq!(a.member.active_buckets().len(), wanted.len() - 1);
    assert_eq!(a.member.bucket_state(kept), BucketState::Idle);

    ghost
        .claim((0..64u32).filter(|&x| !wanted.contains(x)).collect())
        .await;
    until("a gets the last bucket", Duration::from_secs(5), || {
        a.member.is_active(kept)
    })
    .await;
    assert_eq!(a.member.active_buckets(), wanted);
    ledger.assert_clean();
}

#[tokio::test(start_paused = true)]
async fn a_claim_raced_by_another_is_not_confirmed_until_the_other_withdraws() {
    let fake = FakeApi::new();
    let ledger = Arc::new(Ledger::default());
    let owners = expected_split(&["widgets-a".into(), "widgets-ghost".into()]);
    let wanted: BucketSet = (0..64u32)
        .filter(|&x| owners[x as usize] == "widgets-a")
        .collect();
    let theirs: BucketSet = (0..64u32).filter(|&x| !wanted.contains(x)).collect();
    let ghost = Arc::new(Ghost::new(&fake, theirs.clone()).await);
    let contested = wanted.iter().next().unwrap();
    let a = start(&fake, config("a", &ledger), &ledger, 1);
    // The ghost claims the contested bucket right after a's claim of it is written, before
    // a reads the group again: both claims stand.
    let racer = ghost.clone();
    let mut racing = theirs.clone();
    racing.insert(contested);
    let racing_claims = racing.clone();
    *a.after_claim.lock().unwrap() = Some((
        contested,
        Box::new(move || async move { racer.claim(racing_claims).await }.boxed()),
    ));
    ghost.renew_for(Duration::from_secs(40)).await;
    assert!(a.after_claim.lock().unwrap().is_none(), "the race happened");
    assert_eq!(a.member.bucket_state(contested), BucketState::Claiming);
    assert!(!a.member.is_active(contested));
    assert_eq!(a.member.active_buckets().len(), wanted.len() - 1);
    let stored = MemberLease::from_lease(&lease(&fake, "widgets-a").unwrap()).unwrap();
    assert!(
        stored.claims.unwrap().contains(contested),
        "a's claim stands"
    );

    ghost.claim(theirs).await;
    until(
        "a gets the contested bucket",
        Duration::from_secs(5),
        || a.member.is_active(contested),
    )
    .await;
    assert_eq!(a.member.active_buckets(), wanted);
    ledger.assert_clean();
}

#[tokio::test(start_paused = true)]
async fn members_starting_together_never_overlap_and_converge() {
    let mut withdrawn = 0;
    for round in 0..5 {
        let fake = FakeApi::new();
        let ledger = Arc::new(Ledger::default());
        let names = ["p", "q", "r", "s"];
        let members: Vec<Member> = names
            .iter()
            .map(|n| start(&fake, config(&format!("{n}{round}"), &ledger), &ledger, 2))
            .collect();
        let refs: Vec<&Member> = members.iter().collect();
        until("the split in force", Duration::from_secs(120), || {
            split_in_force(&refs)
        })
        .await;
        ledger.assert_clean();
        // Claims withdrawn before they were confirmed: views differed at the start.
        let events = ledger.active.lock().unwrap().clone();
        for (i, (m, b, s, _)) in events.iter().enumerate() {
            if *s == BucketState::Idle
                && events[..i]
                    .iter()
                    .rev()
                    .find(|(m2, b2, ..)| m2 == m && b2 == b)
                    .is_some_and(|e| e.2 == BucketState::Claiming)
            {
                withdrawn += 1;
            }
        }
    }
    assert!(withdrawn > 0, "no claim was ever withdrawn: nothing raced");
}

#[tokio::test(start_paused = true)]
async fn lost_answers_delay_confirmation_until_settled() {
    let fake = FakeApi::new();
    let ledger = Arc::new(Ledger::default());
    let a = start(&fake, config("a", &ledger), &ledger, 1);
    // The create is applied but its answer lost: the member learns it from the next list.
    a.mode.store(LOSE_ANSWERS, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_secs(7)).await;
    assert!(lease(&fake, "widgets-a").is_some());
    assert!(a.member.active_buckets().is_empty());
    a.mode.store(UP, Ordering::SeqCst);
    until("a active", Duration::from_secs(20), || {
        a.member.active_buckets().len() == 64
    })
    .await;

    // A renewal applied with its answer lost: the next write conflicts, the member reads its
    // Lease, recognises its own write and carries on.
    a.mode.store(LOSE_ANSWERS, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_secs(6)).await;
    a.mode.store(UP, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_secs(20)).await;
    assert_eq!(a.member.active_buckets().len(), 64);
    assert!(!a.task.is_finished());
    ledger.assert_clean();
}

#[tokio::test(start_paused = true)]
async fn a_lease_written_by_someone_else_stops_the_member() {
    let fake = FakeApi::new();
    let ledger = Arc::new(Ledger::default());
    let a = start(&fake, config("a", &ledger), &ledger, 1);
    until("a active", Duration::from_secs(10), || a.member.is_ready()).await;
    let store = KubeLeaseStore::new(fake.client(), NS, GROUP);
    let current = store.get("widgets-a").await.unwrap();
    let mut write = LeaseWrite {
        name: "widgets-a".into(),
        group: GROUP.into(),
        holder: "a".into(),
        token: "someone-else".into(),
        bucket_count: 64,
        claims: BucketSet::new(),
        lease_duration: LEASE,
        acquire_time: k8s_openapi::jiff::Timestamp::now(),
        renew_time: k8s_openapi::jiff::Timestamp::now(),
        expired_by: None,
        finalizer: true,
    };
    write.claims = BucketSet::new();
    store
        .update(&write, &current.resource_version)
        .await
        .unwrap();
    let err = a.task.await.unwrap().unwrap_err();
    assert!(matches!(err, RunError::LeaseLost { .. }), "{err}");
    assert!(a.member.active_buckets().is_empty());
    ledger.assert_clean();
}

#[tokio::test(start_paused = true)]
async fn a_graceful_stop_hands_idle_buckets_over_at_once_and_waits_for_reconciles_in_flight() {
    let fake = FakeApi::new();
    let ledger = Arc::new(Ledger::default());
    let a = start(&fake, config("a", &ledger), &ledger, 0);
    let b = start(&fake, config("b", &ledger), &ledger, 0);
    until("the split in force", Duration::from_secs(60), || {
        split_in_force(&[&a, &b])
    })
    .await;
    let bucket = a.member.active_buckets().iter().next().unwrap();
    let guard = a.member.try_begin_bucket(bucket).unwrap();
    a.cancel.cancel();
    // a's other buckets move to b at once, not when a's last reconcile ends: a leaving
    // member is out of the split for the others as soon as it starts leaving.
    until(
        "b holds every bucket but the busy one",
        Duration::from_secs(10),
        || b.member.active_buckets().len() == 63,
    )
    .await;
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert!(!a.task.is_finished(), "a left with a reconcile in flight");
    assert!(guard.is_valid());
    assert!(!b.member.is_active(bucket));
    assert_eq!(b.member.active_buckets().len(), 63);
    drop(guard);
    until("b holds everything", Duration::from_secs(20), || {
        b.member.active_buckets().len() == 64
    })
    .await;
    a.task.await.unwrap().unwrap();
    assert!(lease(&fake, "widgets-a").is_none());
}

#[tokio::test(start_paused = true)]
async fn a_live_member_with_another_bucket_count_is_refused_at_join() {
    let fake = FakeApi::new();
    let ledger = Arc::new(Ledger::default());
    let a = start(&fake, config("a", &ledger), &ledger, 0);
    until("a active", Duration::from_secs(10), || a.member.is_ready()).await;
    let mut c = config("b", &ledger);
    c.bucket_count = 128;
    let b = start(&fake, c, &ledger, 0);
    let err = b.task.await.unwrap().unwrap_err();
    assert!(
        matches!(
            err,
            RunError::BucketCountMismatch {
                theirs: 64,
                ours: 128,
                ..
            }
        ),
        "{err}"
    );
    assert!(
        err.to_string()
            .contains("member a uses 64 buckets, this one 128"),
        "{err}"
    );
    assert!(lease(&fake, "widgets-b").is_none());
    assert_eq!(a.member.active_buckets().len(), 64);
}

#[tokio::test(start_paused = true)]
async fn a_restarted_identity_waits_for_its_predecessors_claims_to_expire() {
    let fake = FakeApi::new();
    let ledger = Arc::new(Ledger::default());
    let first = start(&fake, config("a", &ledger), &ledger, 1);
    until("a active", Duration::from_secs(10), || {
        first.member.is_ready()
    })
    .await;
    first.task.abort();
    let _ = first.task.await;
    let last_ack = first.last_ack.lock().unwrap().unwrap();
    let died = Instant::now();
    let second = start(&fake, config("a", &ledger), &ledger, 1);
    until("the new process active", Duration::from_secs(60), || {
        second.member.active_buckets().len() == 64
    })
    .await;
    let at = ledger.activated("a", 0, died).unwrap();
    assert!(
        at >= last_ack + LEASE,
        "took over {:?} after",
        at - last_ack
    );
    ledger.assert_clean();
}

#[tokio::test(start_paused = true)]
async fn members_come_and_go_and_no_bucket_is_ever_reconciled_twice() {
    let fake = FakeApi::new();
    let ledger = Arc::new(Ledger::default());
    let mut live = vec![
        start(&fake, config("m0", &ledger), &ledger, 3),
        start(&fake, config("m1", &ledger), &ledger, 3),
    ];
    let mut rng = fastrand::Rng::with_seed(7);
    for step in 2..14 {
        tokio::time::sleep(Duration::from_secs(rng.u64(1..20))).await;
        match rng.u8(0..4) {
            0 if live.len() > 1 => {
                let m = live.remove(rng.usize(..live.len()));
                m.cancel.cancel();
            }
            1 if live.len() > 1 => {
                let m = live.remove(rng.usize(..live.len()));
                m.mode.store(HANG, Ordering::SeqCst);
            }
            2 if live.len() > 1 => {
                let m = live.remove(rng.usize(..live.len()));
                m.task.abort();
            }
            _ => live.push(start(
                &fake,
                config(&format!("m{step}"), &ledger),
                &ledger,
                3,
            )),
        }
    }
    let refs: Vec<&Member> = live.iter().collect();
    until("the split in force", Duration::from_secs(120), || {
        split_in_force(&refs)
    })
    .await;
    ledger.assert_clean();
}

/// Deletes a Lease by hand (as `kubectl delete lease` does: no precondition).
async fn delete_by_hand(fake: &FakeApi, name: &str) {
    let store = KubeLeaseStore::new(fake.client(), NS, GROUP);
    let current = store.get(name).await.unwrap();
    store.delete(name, &current.resource_version).await.unwrap();
}

fn stored(fake: &FakeApi, name: &str) -> Option<MemberLease> {
    lease(fake, name).and_then(|l| MemberLease::from_lease(&l))
}

/// A Lease deleted by hand while its member holds buckets: a member joining after the
/// deletion never saw it, and must still not take those buckets while the holder may go on
/// reconciling them. The finalizer keeps the Lease, and its claims, until the holder has
/// drained and released them.
#[tokio::test(start_paused = true)]
async fn a_member_joining_after_a_lease_was_deleted_by_hand_waits_for_its_holder_to_stop() {
    let fake = FakeApi::new();
    let ledger = Arc::new(Ledger::default());
    let a = start(&fake, config("a", &ledger), &ledger, 2);
    until("a holds everything", Duration::from_secs(10), || {
        a.member.active_buckets().len() == 64
    })
    .await;
    // Right after one of a's renewals, its Lease is deleted by hand, and b starts.
    let renewed = *a.last_ack.lock().unwrap();
    until("a renews", Duration::from_secs(5), || {
        *a.last_ack.lock().unwrap() != renewed
    })
    .await;
    delete_by_hand(&fake, "widgets-a").await;
    let deleted = Instant::now();
    let held = stored(&fake, "widgets-a").expect("held by its finalizer");
    assert!(held.being_deleted && held.has_finalizer);
    assert_eq!(held.claims, Some(BucketSet::all(64)));
    let b = start(&fake, config("b", &ledger), &ledger, 2);
    let end = Instant::now() + Duration::from_secs(30);
    while Instant::now() < end {
        for x in 0..64u32 {
            assert!(
                !(a.member.is_active(x) && b.member.is_active(x)),
                "bucket {x} active on a and b at once"
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(a.task.is_finished(), "a noticed its Lease was deleted");
    let err = a.task.await.unwrap().unwrap_err();
    assert!(matches!(err, RunError::LeaseDeleted { .. }), "{err}");
    assert!(err.to_string().contains("was deleted"), "{err}");
    assert!(lease(&fake, "widgets-a").is_none(), "a let its Lease go");
    assert_eq!(b.member.active_buckets().len(), 64);
    // b took each bucket only once a had released it.
    let events = ledger.active.lock().unwrap().clone();
    for x in 0..64u32 {
        let released_at = events
            .iter()
            .find(|(m, bk, s, at)| {
                m == "a" && *bk == x && *s == BucketState::Idle && *at >= deleted
            })
            .map(|e| e.3)
            .unwrap_or_else(|| panic!("a never released bucket {x}"));
        let acquired_at = ledger.activated("b", x, deleted).unwrap();
        assert!(acquired_at >= released_at, "bucket {x}");
    }
    ledger.assert_clean();
}

#[tokio::test(start_paused = true)]
async fn a_draining_member_whose_lease_is_deleted_finishes_its_reconciles_then_lets_go() {
    let fake = FakeApi::new();
    let ledger = Arc::new(Ledger::default());
    let a = start(&fake, config("a", &ledger), &ledger, 2);
    until("a holds everything", Duration::from_secs(10), || {
        a.member.active_buckets().len() == 64
    })
    .await;
    let owners = expected_split(&["widgets-a".into(), "widgets-b".into()]);
    let moving = (0..64u32)
        .find(|&x| owners[x as usize] == "widgets-b")
        .unwrap();
    let held = a.member.try_begin_bucket(moving).expect("active on a");
    let b = start(&fake, config("b", &ledger), &ledger, 2);
    until("b's other buckets moved", Duration::from_secs(30), || {
        (0..64u32)
            .filter(|&x| x != moving && owners[x as usize] == "widgets-b")
            .all(|x| b.member.is_active(x))
    })
    .await;
    assert_eq!(a.member.bucket_state(moving), BucketState::Draining);

    let deleted = Instant::now();
    delete_by_hand(&fake, "widgets-a").await;
    // a drains and releases everything else; b, alone in the split, takes it; the bucket
    // with a reconcile in flight stays a's, claimed in its Lease being deleted, renewed past
    // the renew deadline, for as long as the reconcile runs.
    until(
        "b holds all but the draining bucket",
        Duration::from_secs(30),
        || {
            (0..64u32)
                .filter(|&x| x != moving)
                .all(|x| b.member.is_active(x))
        },
    )
    .await;
    tokio::time::sleep(RENEW + LEASE).await;
    assert!(a.member.active_buckets().is_empty());
    assert_eq!(a.member.bucket_state(moving), BucketState::Draining);
    assert!(held.is_valid(), "the reconcile in flight may finish");
    assert!(a.member.try_begin_bucket(moving).is_none());
    assert!(!b.member.is_active(moving));
    assert!(!a.task.is_finished());
    let kept = stored(&fake, "widgets-a").expect("held by its finalizer");
    assert!(kept.being_deleted);
    assert_eq!(kept.claims, Some([moving].into_iter().collect()));

    let released = Instant::now();
    drop(held);
    until("b gets the drained bucket", Duration::from_secs(10), || {
        b.member.is_active(moving)
    })
    .await;
    assert!(ledger.activated("b", moving, deleted).unwrap() >= released);
    let err = a.task.await.unwrap().unwrap_err();
    assert!(matches!(err, RunError::LeaseDeleted { .. }), "{err}");
    assert!(lease(&fake, "widgets-a").is_none());
    assert_eq!(b.member.active_buckets().len(), 64);
    ledger.assert_clean();
}

#[tokio::test(start_paused = true)]
async fn a_deleted_lease_whose_holder_died_is_cleared_when_it_expires_and_goes_away() {
    let fake = FakeApi::new();
    let ledger = Arc::new(Ledger::default());
    let a = start(&fake, config("a", &ledger), &ledger, 2);
    let b = start(&fake, config("b", &ledger), &ledger, 2);
    until("the split in force", Duration::from_secs(60), || {
        split_in_force(&[&a, &b])
    })
    .await;
    let a_buckets = a.member.active_buckets();
    a.task.abort();
    let _ = a.task.await;
    let died = Instant::now();
    let last_ack = a.last_ack.lock().unwrap().unwrap();
    delete_by_hand(&fake, "widgets-a").await;
    // Nobody lets it go for a lease duration: it stays, claims and all.
    tokio::time::sleep(LEASE - Duration::from_secs(1)).await;
    let kept = stored(&fake, "widgets-a").expect("held by its finalizer");
    assert!(kept.being_deleted && kept.claims_any());
    assert!(a_buckets.iter().all(|x| !b.member.is_active(x)));

    until("b takes everything", Duration::from_secs(60), || {
        b.member.active_buckets().len() == 64
    })
    .await;
    for x in a_buckets.iter() {
        let at = ledger.activated("b", x, died).unwrap();
        assert!(
            at >= last_ack + LEASE,
            "bucket {x} taken {:?} after",
            at - last_ack
        );
    }
    assert!(
        lease(&fake, "widgets-a").is_none(),
        "b dropped the finalizer of the expired Lease when clearing it"
    );
    ledger.assert_clean();
}

#[tokio::test(start_paused = true)]
async fn a_graceful_leave_lets_the_lease_go_and_leaves_none_behind() {
    let fake = FakeApi::new();
    let ledger = Arc::new(Ledger::default());
    let a = start(&fake, config("a", &ledger), &ledger, 2);
    let b = start(&fake, config("b", &ledger), &ledger, 2);
    until("the split in force", Duration::from_secs(60), || {
        split_in_force(&[&a, &b])
    })
    .await;
    for name in ["widgets-a", "widgets-b"] {
        let l = lease(&fake, name).unwrap();
        assert_eq!(
            l.metadata.finalizers,
            Some(vec![crate::MEMBER_FINALIZER.to_owned()]),
            "{name}"
        );
    }
    a.cancel.cancel();
    a.task.await.unwrap().expect("a graceful stop");
    assert!(lease(&fake, "widgets-a").is_none());
    until("b holds everything", Duration::from_secs(30), || {
        b.member.active_buckets().len() == 64
    })
    .await;
    b.cancel.cancel();
    b.task.await.unwrap().expect("a graceful stop");
    let store = KubeLeaseStore::new(fake.client(), NS, GROUP);
    assert_eq!(store.list().await.unwrap(), Vec::new(), "no Lease left");
    ledger.assert_clean();
}

/// A Lease written without the finalizer (by an older version) and deleted by hand goes at
/// once; the members that saw it respect its claims for a lease duration (a tombstone).
#[tokio::test(start_paused = true)]
async fn a_lease_without_the_finalizer_deleted_by_hand_is_respected_for_a_lease_duration() {
    let fake = FakeApi::new();
    let ledger = Arc::new(Ledger::default());
    let store = KubeLeaseStore::new(fake.client(), NS, GROUP);
    let mut old = ghost_write(BucketSet::all(64));
    old.finalizer = false;
    let created = store.create(&old).await.unwrap();
    assert!(!created.has_finalizer);
    let a = start(&fake, config("a", &ledger), &ledger, 1);
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(a.member.active_buckets().is_empty());
    store
        .delete("widgets-ghost", &created.resource_version)
        .await
        .unwrap();
    let deleted = Instant::now();
    assert!(lease(&fake, "widgets-ghost").is_none());
    until("a takes everything", Duration::from_secs(60), || {
        a.member.active_buckets().len() == 64
    })
    .await;
    for x in 0..64u32 {
        let at = ledger.activated("a", x, deleted).unwrap();
        assert!(
            at >= deleted + LEASE,
            "bucket {x} taken {:?} after",
            at - deleted
        );
    }
    ledger.assert_clean();
}

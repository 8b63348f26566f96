//! Sharded membership against a real kube-apiserver: three members of one group in this
//! process, with short timings (3 s lease, 2 s renew deadline, 0.5 s retry), each running
//! simulated reconciles. The API server's consistent lists and resourceVersion
//! preconditions, not a fake, decide every claim. Checked: the split covers every bucket
//! exactly once when stable; a member stopped abruptly keeps its buckets until its Lease
//! expired; a joining member gets buckets only after their holders drained them; and at no
//! instant do two members reconcile, or hold active, one bucket.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;
use k8s_openapi::api::coordination::v1::Lease;
use kctrl_client::{Api, Client, ListParams};
use kctrl_e2e::{TestNamespace, require_cluster, wait_until};
use kctrl_shard::{
    BucketSet, BucketState, KubeLeaseStore, LeaseStore, LeaseWrite, MemberLease, RunError,
    ShardConfig, ShardMember, StoreError, split,
};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

const GROUP: &str = "e2e-shard";
const LEASE: Duration = Duration::from_secs(3);

/// The store as the API server has it, remembering when the last write was acknowledged.
struct Recording {
    inner: KubeLeaseStore,
    last_ack: Arc<Mutex<Option<Instant>>>,
}

impl Recording {
    fn ack<'a, T: Send + 'a>(
        &'a self,
        call: BoxFuture<'a, Result<T, StoreError>>,
    ) -> BoxFuture<'a, Result<T, StoreError>> {
        async move {
            let result = call.await;
            if result.is_ok() {
                *self.last_ack.lock().unwrap() = Some(Instant::now());
            }
            result
        }
        .boxed()
    }
}

impl LeaseStore for Recording {
    fn list(&self) -> BoxFuture<'_, Result<Vec<MemberLease>, StoreError>> {
        self.inner.list()
    }
    fn get<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<MemberLease, StoreError>> {
        self.inner.get(name)
    }
    fn create<'a>(&'a self, l: &'a LeaseWrite) -> BoxFuture<'a, Result<MemberLease, StoreError>> {
        self.ack(self.inner.create(l))
    }
    fn update<'a>(
        &'a self,
        l: &'a LeaseWrite,
        rv: &'a str,
    ) -> BoxFuture<'a, Result<MemberLease, StoreError>> {
        self.ack(self.inner.update(l, rv))
    }
    fn delete<'a>(&'a self, n: &'a str, rv: &'a str) -> BoxFuture<'a, Result<(), StoreError>> {
        self.inner.delete(n, rv)
    }
}

/// Every bucket state change of every member, and every simulated reconcile.
#[derive(Default)]
struct Log {
    transitions: Mutex<Vec<(String, u32, BucketState, Instant)>>,
    running: Mutex<BTreeMap<u32, BTreeMap<String, usize>>>,
    violations: Mutex<Vec<String>>,
}

impl Log {
    fn begin(&self, member: &str, bucket: u32) {
        let mut running = self.running.lock().unwrap();
        let here = running.entry(bucket).or_default();
        if let Some((other, _)) = here.iter().find(|(m, n)| m.as_str() != member && **n > 0) {
            self.violations.lock().unwrap().push(format!(
                "{member} reconciled bucket {bucket} while {other} did"
            ));
        }
        *here.entry(member.to_owned()).or_default() += 1;
    }

    fn end(&self, member: &str, bucket: u32) {
        if let Some(n) = self
            .running
            .lock()
            .unwrap()
            .get_mut(&bucket)
            .and_then(|h| h.get_mut(member))
        {
            *n -= 1;
        }
    }

    /// `member` made `bucket` active at or after `since`: when, first.
    fn activated(&self, member: &str, bucket: u32, since: Instant) -> Option<Instant> {
        self.transitions
            .lock()
            .unwrap()
            .iter()
            .find(|(m, b, s, at)| {
                m == member && *b == bucket && *s == BucketState::Active && *at >= since
            })
            .map(|e| e.3)
    }

    /// Checks that no two members' active intervals of one bucket overlap; an interval
    /// runs from `Active` to the next `Releasing` or `Idle` of that member and bucket (or
    /// to now).
    fn assert_active_intervals_disjoint(&self) {
        let events = self.transitions.lock().unwrap().clone();
        let now = Instant::now();
        let mut intervals: BTreeMap<u32, Vec<(String, Instant, Instant)>> = BTreeMap::new();
        for (i, (m, b, s, at)) in events.iter().enumerate() {
            if *s != BucketState::Active {
                continue;
            }
            let end = events[i + 1..]
                .iter()
                .find(|(m2, b2, s2, _)| {
                    m2 == m && b2 == b && matches!(s2, BucketState::Releasing | BucketState::Idle)
                })
                .map_or(now, |e| e.3);
            intervals.entry(*b).or_default().push((m.clone(), *at, end));
        }
        for (b, list) in intervals {
            for (i, x) in list.iter().enumerate() {
                for y in &list[i + 1..] {
                    if x.0 != y.0 {
                        assert!(
                            x.2 <= y.1 || y.2 <= x.1,
                            "bucket {b} active on {} ({:?}..{:?}) and {} ({:?}..{:?}) at once",
                            x.0,
                            x.1,
                            x.2,
                            y.0,
                            y.1,
                            y.2
                        );
                    }
                }
            }
        }
        let v = self.violations.lock().unwrap();
        assert!(v.is_empty(), "overlapping reconciles: {v:#?}");
    }
}

struct Member {
    member: ShardMember,
    cancel: CancellationToken,
    task: JoinHandle<Result<(), RunError>>,
    last_ack: Arc<Mutex<Option<Instant>>>,
}

fn start(client: &Client, ns: &str, identity: &str, log: &Arc<Log>) -> Member {
    let mut config = ShardConfig::new(GROUP, ns, identity);
    config.lease_duration = LEASE;
    config.renew_deadline = Duration::from_secs(2);
    config.retry_period = Duration::from_millis(500);
    let hook_log = log.clone();
    config.on_transition = Some(Arc::new(move |m: &str, b, s| {
        hook_log
            .transitions
            .lock()
            .unwrap()
            .push((m.to_owned(), b, s, Instant::now()));
    }));
    let last_ack = Arc::new(Mutex::new(None));
    let store = Recording {
        inner: KubeLeaseStore::new(client.clone(), ns, GROUP),
        last_ack: last_ack.clone(),
    };
    let member = ShardMember::with_store(Arc::new(store), config).expect("a valid config");
    let cancel = CancellationToken::new();
    let task = tokio::spawn({
        let (member, cancel) = (member.clone(), cancel.clone());
        async move { member.run(cancel).await }
    });
    for seed in 0..2u64 {
        tokio::spawn(reconciler(member.clone(), log.clone(), seed));
    }
    Member {
        member,
        cancel,
        task,
        last_ack,
    }
}

/// Reconciles objects of random hashes, 10 to 100 ms each, aborted when the member stops.
async fn reconciler(member: ShardMember, log: Arc<Log>, seed: u64) {
    let mut rng =
        fastrand::Rng::with_seed(seed ^ kctrl_client::sharding::hash_field(member.lease_name()));
    let identity = member.config().identity.clone();
    let stopped = member.stopped();
    loop {
        match member.try_begin(rng.u64(..)) {
            Some(guard) => {
                log.begin(&identity, guard.bucket());
                tokio::select! {
                    () = tokio::time::sleep(Duration::from_millis(rng.u64(10..100))) => {}
                    () = stopped.cancelled() => {}
                }
                log.end(&identity, guard.bucket());
            }
            None if stopped.is_cancelled() => return,
            None => tokio::time::sleep(Duration::from_millis(5)).await,
        }
    }
}

fn owners(members: &[&Member]) -> Vec<String> {
    let mut names: Vec<String> = members
        .iter()
        .map(|m| m.member.lease_name().to_owned())
        .collect();
    names.sort();
    split::assign(&names, 64)
        .into_iter()
        .map(|i| names[i].clone())
        .collect()
}

fn in_force(members: &[&Member]) -> bool {
    let owners = owners(members);
    (0..64u32).all(|b| {
        members
            .iter()
            .all(|m| m.member.is_active(b) == (owners[b as usize] == m.member.lease_name()))
    })
}

async fn claims_in_leases(client: &Client, ns: &str) -> BTreeMap<String, BucketSet> {
    let leases = Api::<Lease>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .unwrap();
    leases
        .items
        .iter()
        .filter_map(MemberLease::from_lease)
        .map(|l| (l.name.clone(), l.claims.unwrap_or_default()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shard_members_split_hand_over_and_never_overlap() {
    let cluster = require_cluster!();
    let client = cluster.admin();
    let ns = TestNamespace::create(&client, "shard").await;
    let log = Arc::new(Log::default());

    // Three members: the split covers every bucket exactly once, and the Leases say so.
    let a = start(&client, &ns.name, "a", &log);
    let b = start(&client, &ns.name, "b", &log);
    let c = start(&client, &ns.name, "c", &log);
    wait_until(
        "the split of a, b and c in force",
        Duration::from_secs(30),
        || in_force(&[&a, &b, &c]),
    )
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(in_force(&[&a, &b, &c]), "the split did not stay");
    let claims = claims_in_leases(&client, &ns.name).await;
    let mut all = BucketSet::new();
    let mut total = 0;
    for (name, set) in &claims {
        assert!(!set.is_empty(), "{name} claims nothing");
        total += set.len();
        all.extend(set.iter());
    }
    assert_eq!((total, all.len()), (64, 64), "claims {claims:?}");

    // c stops abruptly (its task aborted, no cleanup): it stops reconciling at once, and its
    // buckets move only once its Lease has expired.
    let c_buckets = c.member.active_buckets();
    c.task.abort();
    let _ = c.task.await;
    let aborted = Instant::now();
    let c_last_renewal = c.last_ack.lock().unwrap().expect("c renewed");
    assert!(c.member.active_buckets().is_empty());
    wait_until("a and b take c's buckets", Duration::from_secs(30), || {
        in_force(&[&a, &b])
    })
    .await;
    for x in c_buckets.iter() {
        let taker = if a.member.is_active(x) { "a" } else { "b" };
        let at = log.activated(taker, x, aborted).expect("taken over");
        assert!(
            at >= c_last_renewal + LEASE,
            "bucket {x} taken by {taker} {:?} after c's last renewal, before its lease expired",
            at - c_last_renewal
        );
    }

    // d joins: each bucket it gets, it gets after its holder released it.
    let joined = Instant::now();
    let d = start(&client, &ns.name, "d", &log);
    wait_until(
        "the split of a, b and d in force",
        Duration::from_secs(30),
        || in_force(&[&a, &b, &d]),
    )
    .await;
    let events = log.transitions.lock().unwrap().clone();
    for x in d.member.active_buckets().iter() {
        let got = log.activated("d", x, joined).unwrap();
        let released = events
            .iter()
            .filter(|(m, bk, s, at)| {
                m != "d" && *bk == x && *s == BucketState::Idle && *at >= joined
            })
            .map(|e| e.3)
            .max()
            .unwrap_or_else(|| panic!("nobody released bucket {x} to d"));
        assert!(
            got >= released,
            "d activated bucket {x} before it was released"
        );
    }

    // Everyone leaves gracefully: the Leases are gone (c's, cleared when it expired, is
    // deleted by the others when it expires again).
    for m in [&a, &b, &d] {
        m.cancel.cancel();
    }
    for m in [a, b, d] {
        m.task.await.unwrap().expect("a graceful stop");
    }
    log.assert_active_intervals_disjoint();
    let left = claims_in_leases(&client, &ns.name).await;
    assert!(
        left.values().all(BucketSet::is_empty),
        "claims left behind: {left:?}"
    );
    ns.delete().await;
}

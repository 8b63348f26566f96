//! `Controller::sharded` on the in-memory API server and tokio's paused clock: replicas of a
//! ConfigMap controller sharded by namespace (4 buckets), each a member of one group. A key
//! outside the range held is dropped and counted; each replica caches and reconciles only its
//! range; a bucket that becomes active has its cached objects enqueued; a draining bucket is
//! released only once its reconcile in flight has ended; a member that stops abandons the
//! reconciles in flight; set-up mistakes are refused by name.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kctrl_client::{Api, PostParams, ShardField, hash_field};
use kctrl_fake::FakeApi;
use kctrl_informer::{ObjectKey, ShardScope, SharedInformerFactory};
use kctrl_runtime::shard::{Sharding, ShardingError};
use kctrl_runtime::{Action, Controller, RunError};
use kctrl_shard::metrics::{Handover, ShardMetrics};
use kctrl_shard::{BucketState, ShardConfig, bucket_of, split};
use kctrl_workqueue::RateLimitingQueue;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

const GROUP: &str = "configmaps";
const LEASES: &str = "kube-system";
const BUCKETS: u32 = 4;

#[derive(Debug, thiserror::Error)]
#[error("never")]
struct Never;

/// Counts the keys a member's controller dropped.
#[derive(Default)]
struct Dropped(AtomicU64);

impl ShardMetrics for Dropped {
    fn held(&self, _: &str, _: usize, _: f64, _: &str) {}
    fn members(&self, _: &str, _: usize) {}
    fn handover(&self, _: &str, _: Handover) {}
    fn keys_dropped(&self, _: &str, keys: u64) {
        self.0.fetch_add(keys, Ordering::SeqCst);
    }
    fn rebalanced(&self, _: &str, _: f64) {}
}

/// One reconcile: replica, key, started, ended.
type Reconcile = (String, String, Instant, Option<Instant>);

/// Every reconcile of every replica.
#[derive(Default)]
struct Log {
    reconciles: Mutex<Vec<Reconcile>>,
    /// Keys whose reconcile waits for `release` (once each).
    held: Mutex<Vec<String>>,
    release: Notify,
    /// A reconcile's future was dropped before it ended.
    abandoned: AtomicBool,
}

impl Log {
    fn of(&self, replica: &str) -> Vec<String> {
        let mut keys: Vec<String> = self
            .reconciles
            .lock()
            .unwrap()
            .iter()
            .filter(|(r, ..)| r == replica)
            .map(|(_, k, ..)| k.clone())
            .collect();
        keys.sort();
        keys
    }
}

/// Marks the reconcile abandoned if its future is dropped before it ends.
struct Abandoned<'a>(&'a Log, bool);

impl Drop for Abandoned<'_> {
    fn drop(&mut self) {
        if !self.1 {
            self.0.abandoned.store(true, Ordering::SeqCst);
        }
    }
}

struct Replica {
    sharding: Sharding,
    factory: SharedInformerFactory,
    queue: RateLimitingQueue<ObjectKey>,
    dropped: Arc<Dropped>,
    cancel: CancellationToken,
    task: JoinHandle<Result<(), RunError>>,
}

fn sharding(fake: &FakeApi, identity: &str, dropped: Arc<Dropped>) -> Sharding {
    let mut config = ShardConfig::new(GROUP, LEASES, identity);
    config.bucket_count = BUCKETS;
    config.metrics = dropped;
    Sharding::new(fake.client(), config, ShardField::Namespace).unwrap()
}

fn replica(fake: &FakeApi, identity: &str, log: &Arc<Log>) -> Replica {
    let dropped = Arc::new(Dropped::default());
    let sharding = sharding(fake, identity, dropped.clone());
    let factory = SharedInformerFactory::builder(fake.client(), Duration::from_secs(3600))
        .shard_scope(sharding.scope())
        .build();
    let controller = Controller::<ConfigMap>::new(&factory)
        .sharded(sharding.clone())
        .workers(2)
        .shutdown_timeout(Duration::from_secs(3600));
    let queue = controller.queue().clone();
    let cancel = CancellationToken::new();
    let (me, log) = (identity.to_owned(), log.clone());
    let task = tokio::spawn(controller.run(
        move |cm: Arc<ConfigMap>, _ctx: Arc<()>| {
            let (me, log) = (me.clone(), log.clone());
            async move {
                let key = kctrl_informer::key_of(cm.as_ref());
                let index = {
                    let mut all = log.reconciles.lock().unwrap();
                    all.push((me, key.clone(), Instant::now(), None));
                    all.len() - 1
                };
                let mut abandoned = Abandoned(&log, false);
                let hold = {
                    let mut held = log.held.lock().unwrap();
                    let at = held.iter().position(|k| *k == key);
                    at.map(|i| held.remove(i)).is_some()
                };
                if hold {
                    log.release.notified().await;
                }
                log.reconciles.lock().unwrap()[index].3 = Some(Instant::now());
                abandoned.1 = true;
                Ok::<_, Never>(Action::await_change())
            }
        },
        |_cm, _e, _ctx| Action::rate_limited(),
        Arc::new(()),
        cancel.clone(),
    ));
    Replica {
        sharding,
        factory,
        queue,
        dropped,
        cancel,
        task,
    }
}

impl Replica {
    fn holds(&self, namespace: &str) -> bool {
        self.sharding.member().owns(hash_field(namespace))
    }

    fn cached(&self) -> Vec<String> {
        let mut keys: Vec<String> = self
            .factory
            .informer::<ConfigMap>()
            .store()
            .list()
            .iter()
            .map(|cm| kctrl_informer::key_of(cm.as_ref()))
            .collect();
        keys.sort();
        keys
    }

    async fn stop(self) {
        self.cancel.cancel();
        self.task.await.unwrap().unwrap();
        self.factory.shutdown().await;
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

const NAMESPACES: [&str; 8] = ["n0", "n1", "n2", "n3", "n4", "n5", "n6", "n7"];

fn bucket(namespace: &str) -> u32 {
    bucket_of(hash_field(namespace), BUCKETS)
}

/// A namespace whose bucket the split gives to `to` once `members` (identities) run.
fn namespace_going_to(to: &str, members: &[&str]) -> &'static str {
    let leases: Vec<String> = members.iter().map(|m| format!("{GROUP}-{m}")).collect();
    let theirs = split::buckets_of(&format!("{GROUP}-{to}"), &leases, BUCKETS);
    NAMESPACES
        .into_iter()
        .find(|ns| theirs.contains(bucket(ns)))
        .expect("one of the namespaces hashes into the bucket")
}

async fn create(fake: &FakeApi, namespace: &str, name: &str) {
    let cm = ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(namespace.into()),
            ..Default::default()
        },
        ..Default::default()
    };
    Api::<ConfigMap>::namespaced(fake.client(), namespace)
        .create(&PostParams::default(), &cm)
        .await
        .unwrap();
}

/// Whether every bucket is active on exactly one of `replicas`.
fn split_in_force(replicas: &[&Replica]) -> bool {
    (0..BUCKETS).all(|b| {
        replicas
            .iter()
            .filter(|r| r.sharding.member().is_active(b))
            .count()
            == 1
    })
}

#[tokio::test(start_paused = true)]
async fn each_replica_caches_and_reconciles_its_range_and_drops_keys_outside_it() {
    let fake = FakeApi::new();
    let log = Arc::new(Log::default());
    let a = replica(&fake, "a", &log);
    let b = replica(&fake, "b", &log);
    until("the split in force", Duration::from_secs(60), || {
        split_in_force(&[&a, &b])
    })
    .await;
    assert!(a.sharding.is_ready() && b.sharding.is_ready());
    let mut all = Vec::new();
    for ns in NAMESPACES {
        create(&fake, ns, "cm").await;
        all.push(format!("{ns}/cm"));
    }
    until(
        "every ConfigMap reconciled",
        Duration::from_secs(30),
        || log.reconciles.lock().unwrap().len() >= all.len(),
    )
    .await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let (on_a, on_b) = (log.of("a"), log.of("b"));
    let range = |r: &Replica| -> Vec<String> {
        NAMESPACES
            .iter()
            .filter(|ns| r.holds(ns))
            .map(|ns| format!("{ns}/cm"))
            .collect()
    };
    assert_eq!(on_a, range(&a), "a reconciles its range, once each");
    assert_eq!(on_b, range(&b), "b reconciles its range, once each");
    assert_eq!(on_a.len() + on_b.len(), all.len());
    assert_eq!(a.cached(), on_a, "a caches only its range");
    assert_eq!(b.cached(), on_b, "b caches only its range");

    // A key of b's range enqueued on a by hand: dropped, counted, forgotten.
    let theirs = on_b
        .first()
        .expect("b holds a namespace of the eight")
        .clone();
    assert_eq!(a.dropped.0.load(Ordering::SeqCst), 0);
    a.queue.add(theirs.clone());
    until("the key dropped", Duration::from_secs(5), || {
        a.dropped.0.load(Ordering::SeqCst) == 1
    })
    .await;
    assert_eq!(log.of("a"), on_a, "a did not reconcile it");
    assert_eq!(a.queue.num_requeues(&theirs), 0);
    assert!(a.queue.is_empty());
    assert_eq!(b.dropped.0.load(Ordering::SeqCst), 0);

    a.stop().await;
    b.stop().await;
    assert!(fake.objects::<Lease>().is_empty(), "both left their group");
}

#[tokio::test(start_paused = true)]
async fn objects_there_before_the_replica_starts_are_reconciled_once() {
    let fake = FakeApi::new();
    let log = Arc::new(Log::default());
    for ns in NAMESPACES {
        create(&fake, ns, "early").await;
    }
    let a = replica(&fake, "a", &log);
    until(
        "every ConfigMap reconciled",
        Duration::from_secs(60),
        || log.reconciles.lock().unwrap().len() >= NAMESPACES.len(),
    )
    .await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let expected: Vec<String> = NAMESPACES.iter().map(|ns| format!("{ns}/early")).collect();
    assert_eq!(log.of("a"), expected, "each once");
    assert_eq!(a.sharding.member().active_buckets().len(), BUCKETS as usize);
    a.stop().await;
}

/// A bucket draining (its events no longer enqueue) that becomes active again: the
/// activation enqueues what changed meanwhile, which nothing else would.
#[tokio::test(start_paused = true)]
async fn a_bucket_that_becomes_active_again_has_its_cached_objects_enqueued() {
    let fake = FakeApi::new();
    let log = Arc::new(Log::default());
    let a = replica(&fake, "a", &log);
    until("a holds every bucket", Duration::from_secs(60), || {
        split_in_force(&[&a])
    })
    .await;
    let moving = namespace_going_to("b", &["a", "b"]);
    let moving_bucket = bucket(moving);
    log.held.lock().unwrap().push(format!("{moving}/slow"));
    create(&fake, moving, "slow").await;
    until(
        "a reconciling the slow one",
        Duration::from_secs(10),
        || !log.of("a").is_empty(),
    )
    .await;
    let b = replica(&fake, "b", &log);
    until(
        "the moving bucket draining on a",
        Duration::from_secs(60),
        || a.sharding.member().bucket_state(moving_bucket) == BucketState::Draining,
    )
    .await;
    create(&fake, moving, "meanwhile").await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(
        log.of("a"),
        [format!("{moving}/slow")],
        "not enqueued while draining"
    );
    // b leaves before it got the bucket: a wants it again.
    b.stop().await;
    until("a active on it again", Duration::from_secs(60), || {
        a.sharding.member().is_active(moving_bucket)
    })
    .await;
    until(
        "the object created meanwhile reconciled",
        Duration::from_secs(10),
        || log.of("a").contains(&format!("{moving}/meanwhile")),
    )
    .await;
    assert!(log.of("b").is_empty());
    log.release.notify_one();
    a.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_draining_bucket_is_released_only_once_its_reconcile_in_flight_ended() {
    let fake = FakeApi::new();
    let log = Arc::new(Log::default());
    let a = replica(&fake, "a", &log);
    until("a holds every bucket", Duration::from_secs(60), || {
        split_in_force(&[&a])
    })
    .await;
    let moving = namespace_going_to("b", &["a", "b"]);
    let moving_bucket = bucket(moving);
    log.held.lock().unwrap().push(format!("{moving}/slow"));
    create(&fake, moving, "slow").await;
    until(
        "a reconciling the slow one",
        Duration::from_secs(10),
        || !log.of("a").is_empty(),
    )
    .await;

    let b = replica(&fake, "b", &log);
    // b gets its other buckets; the moving one waits for a's reconcile.
    until(
        "b active on its other buckets",
        Duration::from_secs(60),
        || {
            (0..BUCKETS)
                .filter(|&x| x != moving_bucket)
                .all(|x| a.sharding.member().is_active(x) != b.sharding.member().is_active(x))
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(
        a.sharding.member().bucket_state(moving_bucket),
        BucketState::Draining
    );
    assert!(!b.sharding.member().is_active(moving_bucket));
    assert!(
        log.of("b").is_empty(),
        "b reconciled nothing of the moving bucket"
    );

    log.release.notify_one();
    let released = Instant::now();
    until(
        "b active on the moved bucket",
        Duration::from_secs(60),
        || b.sharding.member().is_active(moving_bucket),
    )
    .await;
    until(
        "b reconciles the moved object",
        Duration::from_secs(10),
        || !log.of("b").is_empty(),
    )
    .await;
    let all = log.reconciles.lock().unwrap().clone();
    let ended_on_a = all
        .iter()
        .find(|(r, ..)| r == "a")
        .and_then(|(.., end)| *end)
        .expect("a's reconcile ended");
    assert!(ended_on_a <= released);
    let started_on_b = all.iter().find(|(r, ..)| r == "b").unwrap().2;
    assert!(started_on_b >= ended_on_a, "b began after a ended");
    assert!(!log.abandoned.load(Ordering::SeqCst));
    a.stop().await;
    b.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_member_that_stops_abandons_the_reconciles_in_flight() {
    let fake = FakeApi::new();
    let log = Arc::new(Log::default());
    let a = replica(&fake, "a", &log);
    until("a holds every bucket", Duration::from_secs(60), || {
        split_in_force(&[&a])
    })
    .await;
    log.held.lock().unwrap().push("n0/stuck".into());
    create(&fake, "n0", "stuck").await;
    until("a reconciling", Duration::from_secs(10), || {
        !log.of("a").is_empty()
    })
    .await;
    // Someone else writes the member's Lease (another process with its identity, say): the
    // member cannot tell what it still holds and stops at once. (A delete would not do: the
    // Lease's finalizer keeps it while the member drains, and this reconcile never ends.)
    let leases = Api::<Lease>::namespaced(fake.client(), LEASES);
    let mut lease = leases.get(a.sharding.member().lease_name()).await.unwrap();
    lease
        .spec
        .get_or_insert_with(Default::default)
        .holder_identity = Some("intruder".into());
    leases.update(&PostParams::default(), &lease).await.unwrap();
    let err = tokio::time::timeout(Duration::from_secs(30), a.task)
        .await
        .expect("stops well before the hour-long shutdown timeout")
        .unwrap()
        .unwrap_err();
    assert!(
        matches!(
            &err,
            RunError::ShardLost {
                source: kctrl_shard::RunError::LeaseLost { .. },
                ..
            }
        ),
        "{err}"
    );
    assert!(
        log.abandoned.load(Ordering::SeqCst),
        "the reconcile was dropped"
    );
    assert!(!a.sharding.is_ready());
    a.factory.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn set_up_mistakes_are_refused_by_name() {
    let fake = FakeApi::new();
    let run = |c: Controller<ConfigMap>| {
        c.run(
            |_cm, _ctx: Arc<()>| async { Ok::<_, Never>(Action::await_change()) },
            |_cm, _e, _ctx| Action::rate_limited(),
            Arc::new(()),
            CancellationToken::new(),
        )
    };
    let mistake = |err: RunError| match err {
        RunError::Sharding { source, .. } => source,
        other => panic!("not a set-up mistake: {other}"),
    };
    let s = || sharding(&fake, "a", Arc::default());

    // A factory without a scope.
    let plain = SharedInformerFactory::new(fake.client(), Duration::ZERO);
    let err = mistake(run(Controller::new(&plain).sharded(s())).await.unwrap_err());
    assert!(matches!(err, ShardingError::FactoryNotScoped), "{err}");
    assert!(
        err.to_string().contains(".shard_scope(sharding.scope())"),
        "{err}"
    );

    // Another scope.
    let other = SharedInformerFactory::builder(fake.client(), Duration::ZERO)
        .shard_scope(ShardScope::new(None))
        .build();
    let err = mistake(run(Controller::new(&other).sharded(s())).await.unwrap_err());
    assert!(matches!(err, ShardingError::OtherScope), "{err}");

    // By UID, owning something.
    let by_uid = Sharding::new(
        fake.client(),
        ShardConfig::new(GROUP, LEASES, "u"),
        ShardField::Uid,
    )
    .unwrap();
    let factory = SharedInformerFactory::builder(fake.client(), Duration::ZERO)
        .shard_scope(by_uid.scope())
        .build();
    let c = Controller::<ConfigMap>::new(&factory)
        .owns::<Secret>()
        .sharded(by_uid.clone());
    let err = mistake(run(c).await.unwrap_err());
    assert!(
        matches!(&err, ShardingError::UidWithRelated { resources } if resources == "Secret"),
        "{err}"
    );
    assert!(err.to_string().contains("ShardField::Namespace"), "{err}");
    // By UID, indexing another resource: its cache is sharded by its own UIDs too.
    let c = Controller::<ConfigMap>::new(&factory)
        .index::<Secret>("by-x", |_| Vec::new())
        .sharded(by_uid.clone());
    let err = mistake(run(c).await.unwrap_err());
    assert!(
        matches!(&err, ShardingError::UidWithRelated { resources } if resources == "Secret"),
        "{err}"
    );

    // Twice on one controller; one Sharding for two controllers.
    let c = Controller::<ConfigMap>::new(&factory)
        .sharded(by_uid.clone())
        .sharded(by_uid.clone());
    let err = mistake(run(c).await.unwrap_err());
    assert!(matches!(err, ShardingError::ShardedTwice), "{err}");
    let cancel = CancellationToken::new();
    let first = tokio::spawn(
        Controller::<ConfigMap>::new(&factory)
            .sharded(by_uid.clone())
            .run(
                |_cm, _ctx: Arc<()>| async { Ok::<_, Never>(Action::await_change()) },
                |_cm, _e, _ctx| Action::rate_limited(),
                Arc::new(()),
                cancel.clone(),
            ),
    );
    tokio::time::sleep(Duration::from_millis(100)).await;
    let err = mistake(
        run(Controller::<ConfigMap>::new(&factory).sharded(by_uid.clone()))
            .await
            .unwrap_err(),
    );
    assert!(matches!(err, ShardingError::AlreadyUsed { .. }), "{err}");
    cancel.cancel();
    first.await.unwrap().unwrap();

    // A member built by hand without confirm_cache_scope.
    let member =
        kctrl_shard::ShardMember::new(fake.client(), ShardConfig::new(GROUP, LEASES, "m")).unwrap();
    let err = Sharding::with_member(member, ShardField::Namespace).unwrap_err();
    assert!(
        matches!(err, ShardingError::CacheScopeNotConfirmed { .. }),
        "{err}"
    );
    // A bad config is the member's error.
    let err = Sharding::new(
        fake.client(),
        ShardConfig::new("Bad_Group", LEASES, "m"),
        ShardField::Namespace,
    )
    .unwrap_err();
    assert!(matches!(err, ShardingError::Config(_)), "{err}");
}

// A controller wired by hand runs the member with `Sharding::drive`: a bucket that becomes
// active has its cached objects queued in the low lane, or in the lane
// `with_activation_priority` names (a controller serving one lane, first come first served).
#[tokio::test(start_paused = true)]
async fn drive_queues_activations_in_the_lane_asked_for() {
    use kctrl_workqueue::{Priority, default_controller_rate_limiter};
    for (asked, lane) in [
        (None, Priority::Low),
        (Some(Priority::High), Priority::High),
    ] {
        let fake = FakeApi::new();
        create(&fake, "team-a", "settings").await;
        let mut sharding = sharding(&fake, "a", Arc::new(Dropped::default()));
        if let Some(priority) = asked {
            sharding = sharding.with_activation_priority(priority);
        }
        let factory = SharedInformerFactory::builder(fake.client(), Duration::from_secs(3600))
            .shard_scope(sharding.scope())
            .build();
        let informer = factory.informer::<ConfigMap>();
        let cancel = CancellationToken::new();
        factory.start(&cancel);
        // Nobody takes from this queue: it keeps what the activation queued.
        let queue: RateLimitingQueue<ObjectKey> =
            RateLimitingQueue::new(default_controller_rate_limiter());
        let drive = tokio::spawn({
            let (sharding, cancel, queue) = (sharding.clone(), cancel.clone(), queue.clone());
            let store = informer.store().clone();
            async move { sharding.drive(cancel, queue, store).await }
        });
        until("the key queued", Duration::from_secs(60), || {
            queue.len() == 1
        })
        .await;
        assert_eq!(queue.lane_len(lane), 1, "asked {asked:?}");
        cancel.cancel();
        drive.await.unwrap().unwrap();
        factory.shutdown().await;
    }
}

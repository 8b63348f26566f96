//! The sharded runner on the fake API: replicas split the Deployments by namespace, a bucket
//! that becomes active has its cached Deployments synced, and a replica whose Lease could not
//! be renewed writes nothing more.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures::future::BoxFuture;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{APIResourceList, ObjectMeta};
use k8s_openapi::apimachinery::pkg::version::Info;
use kctrl_client::sharding::{ShardField, hash_field};
use kctrl_client::{Api, ApiRequest, Backend, Client, Error, PostParams, WatchFrames};
use kctrl_controller_ref::get_controller_of;
use kctrl_fake::FakeApi;
use kctrl_informer::SharedInformerFactory;
use kctrl_runtime::shard::Sharding;
use kctrl_shard::{PrometheusShardMetrics, ShardConfig, ShardMember};
use prometheus_client::registry::Registry;
use tokio_util::sync::CancellationToken;

use super::*;
use crate::events::RecordingEventRecorder;
use crate::fixtures::{map, new_deployment};

/// A write seen by [`Recording`]: who sent it, the verb, the resource and the namespace.
type Write = (String, &'static str, String, String);

/// A backend over the fake that notes every write it passes on, under a replica's name.
#[derive(Clone)]
struct Recording {
    replica: String,
    fake: FakeApi,
    writes: Arc<Mutex<Vec<Write>>>,
}

impl Backend for Recording {
    fn call(&self, request: ApiRequest) -> BoxFuture<'_, Result<Bytes, Error>> {
        if matches!(request.verb(), "create" | "update" | "patch" | "delete") {
            self.writes.lock().unwrap().push((
                self.replica.clone(),
                request.verb(),
                request.resource.plural.to_string(),
                request.namespace.clone().unwrap_or_default(),
            ));
        }
        self.fake.call(request)
    }

    fn watch(&self, request: ApiRequest) -> BoxFuture<'_, Result<WatchFrames, Error>> {
        self.fake.watch(request)
    }

    fn server_version(&self) -> BoxFuture<'_, Result<Info, Error>> {
        self.fake.server_version()
    }

    fn api_resources<'a>(
        &'a self,
        group_version: &'a str,
    ) -> BoxFuture<'a, Result<APIResourceList, Error>> {
        self.fake.api_resources(group_version)
    }
}

/// One sharded replica: its member (run by its runner), its runner, its factory.
struct Replica {
    member: ShardMember,
    runner: Arc<DeploymentControllerRunner>,
    factory: SharedInformerFactory,
}

fn replica(
    fake: &FakeApi,
    name: &str,
    writes: &Arc<Mutex<Vec<Write>>>,
    metrics: Option<PrometheusShardMetrics>,
) -> Replica {
    let client = Client::new(
        Recording {
            replica: name.to_owned(),
            fake: fake.clone(),
            writes: writes.clone(),
        },
        "default",
    );
    replica_with(fake, name, client, metrics)
}

/// A replica whose controller goes through `client` (its member through the fake).
fn replica_with(
    fake: &FakeApi,
    name: &str,
    client: Client,
    metrics: Option<PrometheusShardMetrics>,
) -> Replica {
    let mut config = ShardConfig::new("deployment-controller", "kube-system", name);
    if let Some(metrics) = metrics {
        config.metrics = Arc::new(metrics);
    }
    let sharding = Sharding::new(fake.client(), config, ShardField::Namespace).unwrap();
    let member = sharding.member().clone();
    let factory = SharedInformerFactory::builder(client.clone(), Duration::ZERO)
        .shard_scope(sharding.scope())
        .build();
    let options = RunnerOptions {
        shard: Some(sharding),
        ..RunnerOptions::default()
    };
    let runner = Arc::new(
        DeploymentControllerRunner::with_options(
            client,
            &factory,
            Arc::new(RecordingEventRecorder::new()),
            options,
        )
        .unwrap(),
    );
    Replica {
        member,
        runner,
        factory,
    }
}

fn spawn_runner(
    runner: &Arc<DeploymentControllerRunner>,
    cancel: &CancellationToken,
) -> tokio::task::JoinHandle<Result<(), RunError>> {
    let (runner, cancel) = (runner.clone(), cancel.clone());
    tokio::spawn(async move { runner.run(2, &cancel).await })
}

/// Fails every create and update of a Lease while the returned flag is set.
fn fail_lease_writes(fake: &FakeApi) -> Arc<std::sync::atomic::AtomicBool> {
    let fail = Arc::new(std::sync::atomic::AtomicBool::new(false));
    for verb in ["create", "update"] {
        fake.prepend_reactor(verb, "leases", {
            let fail = fail.clone();
            move |_| {
                if fail.load(std::sync::atomic::Ordering::SeqCst) {
                    kctrl_fake::Reaction::Error(Error::InvalidRequest(
                        "injected failure".to_owned(),
                    ))
                } else {
                    kctrl_fake::Reaction::Continue
                }
            }
        });
    }
    fail
}

/// The value of the first sample of `name` in the registry's text.
fn sample(registry: &Registry, name: &str) -> f64 {
    metrics_text(registry)
        .lines()
        .find(|l| l.starts_with(&format!("{name}{{")) || l.starts_with(&format!("{name} ")))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or(0.0)
}

/// Creates Deployment `name` in `namespace`.
async fn create_deployment(fake: &FakeApi, namespace: &str, name: &str) {
    let mut d = new_deployment(name, 2, None, None, None, Some(map(&[("app", name)])));
    d.metadata.uid = None;
    d.metadata.namespace = Some(namespace.to_owned());
    Api::<Deployment>::namespaced(fake.client(), namespace)
        .create(&PostParams::default(), &d)
        .await
        .unwrap();
}

/// The ReplicaSets of the fake by the name of the Deployment controlling them.
fn replica_sets_by_owner(fake: &FakeApi) -> BTreeMap<String, usize> {
    let mut owners = BTreeMap::new();
    for rs in fake.objects::<ReplicaSet>() {
        if let Some(owner) = get_controller_of(&rs.metadata) {
            *owners.entry(owner.name.clone()).or_default() += 1;
        }
    }
    owners
}

/// Waits (paused clock) until `cond` holds, at most `limit`.
async fn eventually(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + limit;
    while !cond() {
        if tokio::time::Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    true
}

fn metrics_text(registry: &Registry) -> String {
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, registry).unwrap();
    text
}

// Two replicas, eight namespaces: every Deployment gets its ReplicaSet, exactly one, and each
// write comes from the replica holding the namespace's bucket; each replica dropped the keys
// of the other's namespaces (its caches hold everything).
#[tokio::test(start_paused = true)]
async fn two_replicas_split_the_deployments_by_namespace() {
    let fake = FakeApi::new();
    let writes = Arc::new(Mutex::new(Vec::new()));
    let mut registry = Registry::default();
    let metrics = PrometheusShardMetrics::new(&mut registry);
    let a = replica(&fake, "a", &writes, Some(metrics.clone()));
    let b = replica(&fake, "b", &writes, Some(metrics));
    let cancel = CancellationToken::new();
    let runs: Vec<_> = [&a, &b]
        .iter()
        .map(|r| spawn_runner(&r.runner, &cancel))
        .collect();
    assert!(
        eventually(Duration::from_secs(120), || {
            a.member.active_buckets().len() + b.member.active_buckets().len() == 64
                && !a.member.active_buckets().is_empty()
                && !b.member.active_buckets().is_empty()
        })
        .await,
        "the split never came into force"
    );
    // The varying part is not at the end of the name: FNV-1a barely moves the top bits of
    // the hash (the bucket) for a change in the last characters, so `ns-0` … `ns-7` would all
    // fall into one bucket (see docs/operations.md).
    let namespaces: Vec<String> = (0..8).map(|i| format!("ns-{i}-web")).collect();
    for ns in &namespaces {
        create_deployment(&fake, ns, &format!("web-{ns}")).await;
    }
    assert!(
        eventually(Duration::from_secs(60), || replica_sets_by_owner(&fake)
            .len()
            == namespaces.len())
        .await,
        "not every Deployment got a ReplicaSet: {:?}",
        replica_sets_by_owner(&fake)
    );
    // Quiet for a while: nothing else is created.
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert!(
        replica_sets_by_owner(&fake).values().all(|n| *n == 1),
        "{:?}",
        replica_sets_by_owner(&fake)
    );
    let owner_of = |ns: &str| {
        if a.member.owns(hash_field(ns)) {
            "a"
        } else {
            "b"
        }
    };
    let recorded = writes.clone();
    let writes = writes.lock().unwrap().clone();
    let mut writers: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    for (replica, verb, resource, ns) in &writes {
        assert_eq!(
            replica,
            owner_of(ns),
            "{replica} wrote ({verb} {resource}) in {ns}, held by the other"
        );
        writers
            .entry(replica.as_str())
            .or_default()
            .insert(ns.clone());
    }
    let both: usize = writers.values().map(BTreeSet::len).sum();
    assert_eq!(both, namespaces.len(), "{writers:?}");
    // Both did some of the work (the 8 namespaces fall into 8 buckets; the chance that one
    // replica holds all 8 is below 1%, and the hashes are fixed, so this does not flake).
    assert_eq!(writers.len(), 2, "{writers:?}");
    // Each caches its own namespaces' Deployments only: the two stores add up to all, with
    // none in both.
    let cached = |r: &Replica| -> BTreeSet<String> {
        r.factory
            .informer::<Deployment>()
            .store()
            .list()
            .iter()
            .map(|d| d.metadata.namespace.clone().unwrap_or_default())
            .collect()
    };
    let (in_a, in_b) = (cached(&a), cached(&b));
    assert!(in_a.is_disjoint(&in_b), "{in_a:?} {in_b:?}");
    assert_eq!(
        in_a.len() + in_b.len(),
        namespaces.len(),
        "{in_a:?} {in_b:?}"
    );
    assert!(in_a.iter().all(|ns| owner_of(ns) == "a"), "{in_a:?}");
    // A key of the other's namespace reaching a worker (by hand here; a handover in real
    // life) is dropped and counted, and nothing is written for it.
    let foreign = namespaces.iter().find(|ns| owner_of(ns) == "b").unwrap();
    let before = recorded.lock().unwrap().len();
    a.runner.queue().add(format!("{foreign}/web-{foreign}"));
    assert!(
        eventually(Duration::from_secs(10), || sample(
            &registry,
            "shard_keys_dropped_total"
        ) >= 1.0)
        .await,
        "{}",
        metrics_text(&registry)
    );
    assert_eq!(
        a.runner
            .queue()
            .num_requeues(&format!("{foreign}/web-{foreign}")),
        0
    );
    assert_eq!(
        recorded.lock().unwrap().len(),
        before,
        "a wrote for b's key"
    );
    // A graceful stop: both release their buckets and delete their Leases.
    cancel.cancel();
    for run in runs {
        let ended = tokio::time::timeout(Duration::from_secs(60), run)
            .await
            .expect("the runners stop")
            .unwrap();
        assert!(ended.is_ok(), "{ended:?}");
    }
    assert!(
        fake.objects::<k8s_openapi::api::coordination::v1::Lease>()
            .is_empty(),
        "the members left their Leases behind"
    );
    for r in [&a, &b] {
        r.factory.shutdown().await;
    }
}

// While the member holds nothing its caches hold nothing (the scope selects no range); once
// its buckets become active the Deployments created before are cached and synced.
#[tokio::test(start_paused = true)]
async fn deployments_created_before_the_member_holds_a_range_are_synced_once_it_does() {
    let fake = FakeApi::new();
    // The member cannot write its Lease, so it holds nothing, until the flag is cleared.
    let leases_fail = fail_lease_writes(&fake);
    leases_fail.store(true, std::sync::atomic::Ordering::SeqCst);
    let writes = Arc::new(Mutex::new(Vec::new()));
    let mut registry = Registry::default();
    let a = replica(
        &fake,
        "a",
        &writes,
        Some(PrometheusShardMetrics::new(&mut registry)),
    );
    for i in 0..4 {
        create_deployment(&fake, &format!("ns-{i}"), &format!("web-{i}")).await;
    }
    let cancel = CancellationToken::new();
    let run = spawn_runner(&a.runner, &cancel);
    assert!(
        eventually(Duration::from_secs(30), || a.runner.caches_synced()).await,
        "the caches never synced"
    );
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(
        replica_sets_by_owner(&fake).is_empty(),
        "synced without a bucket"
    );
    assert!(writes.lock().unwrap().is_empty());
    assert!(a.member.active_buckets().is_empty());
    assert!(
        a.factory.informer::<Deployment>().store().list().is_empty(),
        "cached without holding a range"
    );
    leases_fail.store(false, std::sync::atomic::Ordering::SeqCst);
    assert!(
        eventually(Duration::from_secs(60), || replica_sets_by_owner(&fake)
            .len()
            == 4)
        .await,
        "the cached Deployments were not synced when their buckets became active: {:?}",
        replica_sets_by_owner(&fake)
    );
    cancel.cancel();
    run.await.unwrap().unwrap();
    a.factory.shutdown().await;
}

// A sharded runner whose factory does not follow the Sharding's scope would cache every
// Deployment: it refuses to run, saying how to build the factory.
#[tokio::test(start_paused = true)]
async fn a_factory_without_the_shard_scope_is_refused() {
    let fake = FakeApi::new();
    let config = ShardConfig::new("deployment-controller", "kube-system", "a");
    let sharding = Sharding::new(fake.client(), config, ShardField::Namespace).unwrap();
    let factory = SharedInformerFactory::new(fake.client(), Duration::ZERO);
    let runner = DeploymentControllerRunner::with_options(
        fake.client(),
        &factory,
        Arc::new(RecordingEventRecorder::new()),
        RunnerOptions {
            shard: Some(sharding),
            ..RunnerOptions::default()
        },
    )
    .unwrap();
    let err = runner.run(1, &CancellationToken::new()).await.unwrap_err();
    assert!(
        matches!(
            err,
            RunError::Sharding(kctrl_runtime::shard::ShardingError::FactoryNotScoped)
        ),
        "{err:?}"
    );
    assert!(
        err.to_string().contains("shard_scope(sharding.scope())"),
        "{err}"
    );
    assert!(
        fake.objects::<k8s_openapi::api::coordination::v1::Lease>()
            .is_empty()
    );
}

// A member whose renewals fail past the renew deadline stops the runner with ShardLost (the
// binary exits non-zero), without waiting for a cancel and without deleting its Lease.
#[tokio::test(start_paused = true)]
async fn a_member_that_cannot_renew_ends_the_run_with_shard_lost() {
    let fake = FakeApi::new();
    let leases_fail = fail_lease_writes(&fake);
    let writes = Arc::new(Mutex::new(Vec::new()));
    let a = replica(&fake, "a", &writes, None);
    let cancel = CancellationToken::new();
    let run = spawn_runner(&a.runner, &cancel);
    assert!(
        eventually(Duration::from_secs(60), || a.member.active_buckets().len()
            == 64)
        .await,
        "the member never held the buckets"
    );
    leases_fail.store(true, std::sync::atomic::Ordering::SeqCst);
    let ended = tokio::time::timeout(Duration::from_secs(30), run)
        .await
        .expect("the run ends within the renew deadline")
        .unwrap();
    assert!(
        matches!(
            ended,
            Err(RunError::ShardLost(
                kctrl_shard::RunError::RenewFailed { .. }
            ))
        ),
        "{ended:?}"
    );
    assert!(!cancel.is_cancelled());
    assert_eq!(
        fake.objects::<k8s_openapi::api::coordination::v1::Lease>()
            .len(),
        1,
        "the Lease is left to expire"
    );
    a.factory.shutdown().await;
}

// The write fence: outside a sync nothing is written; inside one whose member can no longer
// renew its Lease, the write is refused once the renew deadline has passed.
#[tokio::test(start_paused = true)]
async fn writes_need_a_valid_guard() {
    let fake = FakeApi::new();
    let renewals_fail = fail_lease_writes(&fake);
    let member = ShardMember::new(
        fake.client(),
        ShardConfig::new("deployment-controller", "kube-system", "a"),
    )
    .unwrap();
    let cancel = CancellationToken::new();
    let run = tokio::spawn({
        let (member, cancel) = (member.clone(), cancel.clone());
        async move { member.run(cancel).await }
    });
    assert!(
        eventually(Duration::from_secs(60), || member.active_buckets().len()
            == 64)
        .await
    );
    let fenced = crate::sharding::FencedWrites::client(&fake.client());
    let configmaps = Api::<ConfigMap>::namespaced(fenced, "ns-0");
    let cm = |name: &str| ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            ..Default::default()
        },
        ..Default::default()
    };
    let outside = configmaps
        .create(&PostParams::default(), &cm("outside"))
        .await
        .unwrap_err();
    assert!(
        outside.to_string().contains("only from a sync holding"),
        "{outside}"
    );
    // Reads pass.
    configmaps.list(&Default::default()).await.unwrap();
    let guard = Arc::new(member.try_begin(hash_field("ns-0")).unwrap());
    crate::sharding::with_guard(guard.clone(), async {
        configmaps
            .create(&PostParams::default(), &cm("inside"))
            .await
            .unwrap();
    })
    .await;
    renewals_fail.store(true, std::sync::atomic::Ordering::SeqCst);
    let stopped = member.stopped();
    tokio::time::timeout(Duration::from_secs(30), stopped.cancelled())
        .await
        .expect("the member stops within the renew deadline");
    let refused = crate::sharding::with_guard(guard.clone(), async {
        configmaps
            .create(&PostParams::default(), &cm("late"))
            .await
            .unwrap_err()
    })
    .await;
    assert!(
        refused
            .to_string()
            .contains("no longer held by this replica"),
        "{refused}"
    );
    assert!(fake.object::<ConfigMap>(Some("ns-0"), "late").is_none());
    assert!(fake.object::<ConfigMap>(Some("ns-0"), "inside").is_some());
    drop(guard);
    let ended = tokio::time::timeout(Duration::from_secs(30), run)
        .await
        .unwrap()
        .unwrap();
    assert!(ended.is_err(), "{ended:?}");
}

// A sync in flight when its member stops is abandoned and its key dropped, not retried.
#[tokio::test(start_paused = true)]
async fn a_sync_is_abandoned_when_its_member_stops() {
    let fake = FakeApi::new();
    let member = ShardMember::new(
        fake.client(),
        ShardConfig::new("deployment-controller", "kube-system", "a"),
    )
    .unwrap();
    let cancel = CancellationToken::new();
    let run = tokio::spawn({
        let (member, cancel) = (member.clone(), cancel.clone());
        async move { member.run(cancel).await }
    });
    assert!(
        eventually(Duration::from_secs(60), || member.active_buckets().len()
            == 64)
        .await
    );
    let queue = RateLimitingQueue::with_config(
        default_controller_rate_limiter(),
        QueueConfig::new().name("test"),
    );
    let key = "ns-0/web".to_owned();
    let fence = shard_guard(&member, &key).expect("held");
    // The run dropped: the member stops reconciling at once.
    run.abort();
    let _ = run.await;
    let never = |_: String, _: String| async {
        std::future::pending::<()>().await;
        Ok(crate::progress::Requeue::Never)
    };
    let ok = tokio::time::timeout(
        Duration::from_secs(5),
        process_key_with(&queue, &key, Some(fence), never),
    )
    .await
    .expect("the sync is abandoned");
    assert!(!ok);
    assert_eq!(queue.num_requeues(&key), 0, "dropped, not retried");
    assert_eq!(queue.len(), 0);
    assert!(
        shard_guard(&member, &key).is_none(),
        "a stopped member hands out guards"
    );
}

/// A backend over the fake that holds every write for `delay` before passing it on, as a
/// client's rate limiter holds a request while the process is stopped.
#[derive(Clone)]
struct Slow {
    fake: FakeApi,
    delay: Duration,
}

impl Backend for Slow {
    fn call(&self, request: ApiRequest) -> BoxFuture<'_, Result<Bytes, Error>> {
        Box::pin(async move {
            if matches!(request.verb(), "create" | "update" | "patch" | "delete") {
                tokio::time::sleep(self.delay).await;
            }
            self.fake.call(request).await
        })
    }

    fn watch(&self, request: ApiRequest) -> BoxFuture<'_, Result<WatchFrames, Error>> {
        self.fake.watch(request)
    }

    fn server_version(&self) -> BoxFuture<'_, Result<Info, Error>> {
        self.fake.server_version()
    }

    fn api_resources<'a>(
        &'a self,
        group_version: &'a str,
    ) -> BoxFuture<'a, Result<APIResourceList, Error>> {
        self.fake.api_resources(group_version)
    }
}

// A write that passed the fence while the guard was valid, and then waited inside the client
// past the member's renew deadline, is refused before it is sent, not sent late.
#[tokio::test(start_paused = true)]
async fn a_write_still_waiting_when_the_guard_lapses_is_not_sent() {
    let fake = FakeApi::new();
    let renewals_fail = fail_lease_writes(&fake);
    let member = ShardMember::new(
        fake.client(),
        ShardConfig::new("deployment-controller", "kube-system", "a"),
    )
    .unwrap();
    let cancel = CancellationToken::new();
    tokio::spawn({
        let (member, cancel) = (member.clone(), cancel.clone());
        async move { member.run(cancel).await }
    });
    assert!(
        eventually(Duration::from_secs(60), || member.active_buckets().len()
            == 64)
        .await
    );
    let slow = Client::new(
        Slow {
            fake: fake.clone(),
            delay: Duration::from_secs(60),
        },
        "default",
    );
    let configmaps =
        Api::<ConfigMap>::namespaced(crate::sharding::FencedWrites::client(&slow), "ns-0");
    let cm = ConfigMap {
        metadata: ObjectMeta {
            name: Some("late".to_owned()),
            ..Default::default()
        },
        ..Default::default()
    };
    let guard = Arc::new(member.try_begin(hash_field("ns-0")).unwrap());
    let write = tokio::spawn(crate::sharding::with_guard(guard, async move {
        configmaps.create(&PostParams::default(), &cm).await
    }));
    tokio::time::sleep(Duration::from_secs(1)).await;
    renewals_fail.store(true, std::sync::atomic::Ordering::SeqCst);
    let started = tokio::time::Instant::now();
    let refused = tokio::time::timeout(Duration::from_secs(30), write)
        .await
        .expect("refused before the write's own delay ends")
        .unwrap()
        .unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "{:?}",
        started.elapsed()
    );
    assert!(
        refused
            .to_string()
            .contains("no longer held by this replica"),
        "{refused}"
    );
    tokio::time::sleep(Duration::from_secs(120)).await;
    assert!(fake.object::<ConfigMap>(Some("ns-0"), "late").is_none());
}

// On a stop the member starts leaving at once: the buckets without a sync in flight are
// handed over right away, not after the slowest sync has ended (a slow write held every
// bucket of the replica until it finished, past the grace period); the bucket of the sync
// in flight is released once it ends.
#[tokio::test(start_paused = true)]
async fn on_a_stop_idle_buckets_are_released_before_the_syncs_in_flight_end() {
    let fake = FakeApi::new();
    let slow = Client::new(
        Slow {
            fake: fake.clone(),
            delay: Duration::from_secs(30),
        },
        "default",
    );
    let a = replica_with(&fake, "a", slow, None);
    // Each write of the sync is held for 30 s.
    let cancel = CancellationToken::new();
    let run = spawn_runner(&a.runner, &cancel);
    assert!(
        eventually(Duration::from_secs(60), || a.member.active_buckets().len()
            == 64)
        .await
    );
    create_deployment(&fake, "ns-0", "web").await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(fake.objects::<ReplicaSet>().is_empty());
    let busy = a.member.bucket_of(hash_field("ns-0"));
    cancel.cancel();
    let held = || {
        (0..64)
            .filter(|&b| a.member.bucket_state(b) != kctrl_shard::BucketState::Idle)
            .collect::<Vec<u32>>()
    };
    assert!(
        eventually(Duration::from_secs(10), || held() == [busy]).await,
        "still held 10 s after the stop: {:?}",
        held()
    );
    assert!(!run.is_finished());
    let ended = tokio::time::timeout(Duration::from_secs(600), run)
        .await
        .expect("ends once the held write is through")
        .unwrap();
    assert!(ended.is_ok(), "{ended:?}");
    assert_eq!(fake.objects::<ReplicaSet>().len(), 1);
    assert!(
        fake.objects::<k8s_openapi::api::coordination::v1::Lease>()
            .is_empty(),
        "the member left its Lease behind"
    );
    a.factory.shutdown().await;
}

// The handlers queue only the keys of buckets active on the member: an event of a namespace
// whose bucket this replica does not hold (one draining or still syncing here) is not queued,
// to be dropped by a worker later.
#[tokio::test(start_paused = true)]
async fn handlers_queue_only_the_keys_of_held_buckets() {
    use kctrl_informer::{ResourceEventHandler, Store};
    let fake = FakeApi::new();
    let holder = ShardMember::new(
        fake.client(),
        ShardConfig::new("deployment-controller", "kube-system", "a"),
    )
    .unwrap();
    tokio::spawn({
        let holder = holder.clone();
        async move { holder.run(CancellationToken::new()).await }
    });
    assert!(
        eventually(Duration::from_secs(60), || holder.active_buckets().len()
            == 64)
        .await
    );
    // Never run: holds nothing.
    let idle = ShardMember::new(
        fake.client(),
        ShardConfig::new("deployment-controller", "kube-system", "b"),
    )
    .unwrap();
    let d = Arc::new({
        let mut d = new_deployment("web", 1, None, None, None, Some(map(&[("app", "web")])));
        d.metadata.namespace = Some("ns-0".to_owned());
        d
    });
    for (member, queued) in [(holder, 1), (idle, 0)] {
        let queue = RateLimitingQueue::new(default_controller_rate_limiter());
        let handlers = EnqueueHandlers::new(
            queue.clone(),
            Store::<Deployment>::new(),
            Store::<ReplicaSet>::new(),
        )
        .with_shard(member);
        ResourceEventHandler::<Deployment>::on_add(&handlers, &d, false);
        ResourceEventHandler::<Deployment>::on_update(&handlers, &d, &d);
        assert_eq!(queue.len(), queued);
    }
}

// With a single lane (kube-controller-manager's order), the Deployments of a bucket that
// becomes active are queued in the high lane like every other key, not in the low one.
#[tokio::test]
async fn a_single_lane_runner_queues_activations_in_the_high_lane() {
    for (single_lane, lane) in [(true, Priority::High), (false, Priority::Low)] {
        let fake = FakeApi::new();
        let sharding = Sharding::new(
            fake.client(),
            ShardConfig::new("deployment-controller", "kube-system", "a"),
            ShardField::Namespace,
        )
        .unwrap();
        let factory = SharedInformerFactory::builder(fake.client(), Duration::ZERO)
            .shard_scope(sharding.scope())
            .build();
        let runner = DeploymentControllerRunner::with_options(
            fake.client(),
            &factory,
            Arc::new(RecordingEventRecorder::new()),
            RunnerOptions {
                shard: Some(sharding),
                single_lane,
                ..RunnerOptions::default()
            },
        )
        .unwrap();
        assert_eq!(
            runner.shard.as_ref().map(Sharding::activation_priority),
            Some(lane),
            "single_lane={single_lane}"
        );
    }
}

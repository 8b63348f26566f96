//! The sharded controller example (`crates/runtime/examples/sharded.rs`) against a real
//! kube-apiserver with the `ShardedListAndWatch` feature gate (a `kctrl-testenv` plane of this
//! binary's own, `KCTRL_E2E_TESTENV=1`; `cargo xtask e2e` runs it so): three replicas in this
//! process split the namespaces; every Gadget of six namespaces is reconciled, at each change,
//! by the replica holding its namespace and by no other; each replica's caches hold its range
//! alone, filtered by the server; a replica that stops hands its range over, and the new owners
//! reconcile its Gadgets only after its last reconcile ended.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use kctrl_client::crd::CustomResourceExt;
use kctrl_client::{Api, Client, ListParams, PostParams, ResourceRef, ShardField, hash_field};
use kctrl_e2e::{TestNamespace, eventually, install_crd, rand_suffix, uninstall_crd};
use kctrl_informer::{ShardFiltering, SharedInformerFactory};
use kctrl_runtime::{RunError, Sharding};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// The example, compiled into this test.
#[path = "../../crates/runtime/examples/sharded.rs"]
mod sharded;
use sharded::{Gadget, GadgetSpec, Gadgets};

const GATES: &str = "ShardedListAndWatch=true";
const TIMEOUT: Duration = Duration::from_secs(90);

struct Replica {
    identity: String,
    sharding: Sharding,
    factory: SharedInformerFactory,
    ctx: Arc<Gadgets>,
    cancel: CancellationToken,
    task: JoinHandle<Result<(), RunError>>,
}

impl Replica {
    fn start(client: &Client, lease_namespace: &str, identity: &str) -> Self {
        let sharding = sharded::sharding(client, lease_namespace, identity, None).unwrap();
        let cancel = CancellationToken::new();
        let (factory, ctx, run) = sharded::replica(client, sharding.clone(), cancel.clone());
        Replica {
            identity: identity.to_owned(),
            sharding,
            factory,
            ctx,
            cancel,
            task: tokio::spawn(run),
        }
    }

    fn holds(&self, namespace: &str) -> bool {
        self.sharding.member().owns(hash_field(namespace))
    }

    /// (key, generation) of every reconcile so far.
    fn reconciled(&self) -> Vec<(String, i64)> {
        let all = self.ctx.reconciles.lock().unwrap();
        all.iter().map(|r| (r.key.clone(), r.generation)).collect()
    }

    async fn stop(self) {
        self.cancel.cancel();
        tokio::time::timeout(TIMEOUT, self.task)
            .await
            .expect("the replica stops in time")
            .unwrap()
            .unwrap();
        self.factory.shutdown().await;
    }
}

/// Whether every bucket is active on exactly one replica.
fn split_in_force(replicas: &[Replica]) -> bool {
    let count = replicas[0].sharding.member().config().bucket_count;
    (0..count).all(|b| {
        replicas
            .iter()
            .filter(|r| r.sharding.member().is_active(b))
            .count()
            == 1
    })
}

/// Waits until every Gadget shows `generation` handled by the replica holding its namespace.
async fn all_handled(
    client: &Client,
    gadgets: &BTreeMap<String, String>,
    replicas: &[Replica],
    generation: i64,
) {
    for (key, ns) in gadgets {
        let name = key.split_once('/').unwrap().1;
        let owner = replicas
            .iter()
            .find(|r| r.holds(ns))
            .expect("some replica holds every namespace")
            .identity
            .clone();
        let api: Api<Gadget> = Api::namespaced(client.clone(), ns);
        eventually(&format!("{key} handled by {owner}"), TIMEOUT, || async {
            let g = api.get(name).await.map_err(|e| e.to_string())?;
            match g.status {
                Some(s) if s.handled_by == owner && s.observed_generation == generation => Ok(()),
                other => Err(format!("{other:?}")),
            }
        })
        .await;
        let cm = Api::<ConfigMap>::namespaced(client.clone(), ns)
            .get(&format!("{name}-gadget"))
            .await
            .unwrap();
        assert!(cm.data.unwrap().contains_key("size"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_split_the_gadgets_and_hand_a_range_over() {
    let Some(cluster) = kctrl_e2e::cluster_with_feature_gates(GATES) else {
        return;
    };
    let client = cluster.admin();
    install_crd(&client, &Gadget::crd(), &ResourceRef::of::<Gadget>()).await;
    let leases_ns = TestNamespace::create(&client, "gadget-leases").await;

    let mut replicas: Vec<Replica> = ["a", "b", "c"]
        .into_iter()
        .map(|id| Replica::start(&client, &leases_ns.name, id))
        .collect();
    // Every bucket held once is not yet the three-way split: the first two replicas may hold
    // them all before the third has joined. Each replica is ready once it is in the split.
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    while !(split_in_force(&replicas) && replicas.iter().all(|r| r.sharding.is_ready())) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the split never came into force with every replica ready: {:?}",
            replicas
                .iter()
                .map(|r| r.sharding.ready_check().err().map(|e| e.to_string()))
                .collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // Two namespaces per replica. Names differing only at their end hash close together
    // (FNV-1a): a random prefix spreads them.
    let mut namespaces: Vec<TestNamespace> = Vec::new();
    let mut per_replica = vec![0usize; replicas.len()];
    for _ in 0..10_000 {
        if per_replica.iter().all(|&n| n >= 2) {
            break;
        }
        let name = format!("{:08x}-gadgets", rand_suffix());
        let Some(i) = replicas.iter().position(|r| r.holds(&name)) else {
            continue;
        };
        if per_replica[i] < 2 {
            per_replica[i] += 1;
            namespaces.push(TestNamespace::create_named(&client, &name).await);
        }
    }
    assert_eq!(namespaces.len(), 6, "two namespaces for each replica");

    // Two Gadgets in each.
    let mut gadgets = BTreeMap::new();
    for ns in &namespaces {
        let api: Api<Gadget> = Api::namespaced(client.clone(), &ns.name);
        for name in ["g1", "g2"] {
            api.create(
                &PostParams::default(),
                &Gadget::new(name, GadgetSpec { size: 1 }),
            )
            .await
            .unwrap();
            gadgets.insert(format!("{}/{name}", ns.name), ns.name.clone());
        }
    }
    all_handled(&client, &gadgets, &replicas, 1).await;

    // A change of each (a new generation) reaches its owner alone.
    for (key, ns) in &gadgets {
        let name = key.split_once('/').unwrap().1;
        let api: Api<Gadget> = Api::namespaced(client.clone(), ns);
        let mut g = api.get(name).await.unwrap();
        g.spec.size = 2;
        api.update(&PostParams::default(), &g).await.unwrap();
    }
    all_handled(&client, &gadgets, &replicas, 2).await;
    // Each (Gadget, generation) was reconciled by its owner, and by no other replica.
    for r in &replicas {
        for (key, generation) in r.reconciled() {
            let Some(ns) = gadgets.get(&key) else {
                continue;
            };
            assert!(
                r.holds(ns),
                "{} reconciled {key} outside its range",
                r.identity
            );
            assert!(
                (1..=2).contains(&generation),
                "{key}: generation {generation}"
            );
        }
    }
    let seen: BTreeSet<String> = replicas
        .iter()
        .flat_map(|r| r.reconciled().into_iter().map(|(k, _)| k))
        .filter(|k| gadgets.contains_key(k))
        .collect();
    assert_eq!(seen.len(), gadgets.len());

    // Each replica caches its range alone, and the server filtered it.
    for r in &replicas {
        // ConfigMaps: the list says the server filtered it. A custom resource's list has no
        // shardInfo even when the server filtered it (kube-apiserver 1.37's unstructured lists
        // do not carry it), so its informer cannot tell and filters too; the server's own
        // answer to the member's selector shows it does filter Gadgets.
        let cms = r.factory.informer::<ConfigMap>();
        assert_eq!(
            cms.shard_filtering(),
            ShardFiltering::Server,
            "{}",
            r.identity
        );
        let (selector, _) = r.sharding.member().cache_selector(ShardField::Namespace);
        let listed = Api::<Gadget>::all(client.clone())
            .list(&ListParams {
                shard_selector: selector,
                ..Default::default()
            })
            .await
            .unwrap();
        let listed_mine: BTreeSet<String> = listed
            .items
            .iter()
            .map(kctrl_informer::key_of)
            .filter(|k| gadgets.contains_key(k))
            .collect();
        let mine: BTreeSet<String> = gadgets
            .iter()
            .filter(|(_, ns)| r.holds(ns))
            .map(|(k, _)| k.clone())
            .collect();
        assert_eq!(
            listed_mine, mine,
            "the server selects {}'s Gadgets alone",
            r.identity
        );
        let informer = r.factory.informer::<Gadget>();
        let cached: Vec<_> = informer.store().list();
        for g in &cached {
            let ns = g.metadata.namespace.as_deref().unwrap();
            assert!(r.holds(ns), "{} caches {ns}'s Gadgets", r.identity);
        }
        let mine = gadgets.values().filter(|ns| r.holds(ns)).count();
        let cached_mine = cached
            .iter()
            .filter(|g| gadgets.contains_key(&kctrl_informer::key_of(g.as_ref())))
            .count();
        assert_eq!(
            cached_mine, mine,
            "{} caches all of its Gadgets",
            r.identity
        );
        for cm in r.factory.informer::<ConfigMap>().store().list() {
            let ns = cm.metadata.namespace.as_deref().unwrap();
            assert!(r.holds(ns), "{} caches {ns}'s ConfigMaps", r.identity);
        }
    }

    // c leaves: a and b take its namespaces over, each Gadget reconciled by its new owner
    // (the activation enqueues the cached Gadgets) only after c's last reconcile of it ended.
    let c = replicas.pop().unwrap();
    let c_keys: Vec<String> = gadgets
        .iter()
        .filter(|(_, ns)| c.holds(ns))
        .map(|(k, _)| k.clone())
        .collect();
    assert_eq!(c_keys.len(), 4);
    let c_ctx = c.ctx.clone();
    c.stop().await;
    let c_last_end = c_ctx
        .reconciles
        .lock()
        .unwrap()
        .iter()
        .map(|r| r.ended)
        .max()
        .unwrap();
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    while !split_in_force(&replicas) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the split never came into force"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    all_handled(&client, &gadgets, &replicas, 2).await;
    for r in &replicas {
        let all = r.ctx.reconciles.lock().unwrap().clone();
        for rec in all.iter().filter(|rec| c_keys.contains(&rec.key)) {
            assert!(
                rec.started >= c_last_end,
                "{} reconciled {} before c's last reconcile ended",
                r.identity,
                rec.key
            );
        }
    }

    for r in replicas {
        r.stop().await;
    }
    let leases = Api::<Lease>::namespaced(client.clone(), &leases_ns.name)
        .list(&ListParams::default())
        .await
        .unwrap();
    assert!(leases.items.is_empty(), "every replica deleted its Lease");
    for ns in namespaces {
        ns.delete().await;
    }
    leases_ns.delete().await;
    uninstall_crd(&client, &Gadget::crd_name()).await;
}

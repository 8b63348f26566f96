//! Informers against a real kube-apiserver: initial sync at scale, event delivery, a cut
//! connection, and a relist after etcd compaction that must surface deletions — for typed
//! objects, views (also decoded from protobuf), metadata only and dynamic objects (a run-time
//! resource) — and views decoded from protobuf equal to the same views decoded from JSON.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Container, Pod, PodSchedulingGate, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kctrl_client::protobuf::{FromProtobuf, ObjectMetaMessage};
use kctrl_client::{
    Api, DeleteParams, ListParams, ObjectMetaAccess, PartialObjectMetadata, Patch, PatchParams,
    PostParams,
};
use kctrl_deployment::pod_view::PodView;
use kctrl_e2e::{CuttableProxy, TestNamespace, require_cluster, wait_until};
use kctrl_informer::{
    DeletedObject, EventHandlerFns, ListWatch, SharedInformer, SharedInformerOptions,
};
use tokio_util::sync::CancellationToken;

/// Every notification a handler received, as `ADD name`, `UPDATE name`, `DELETE name` (or
/// `DELETE? name` for a deletion inferred by a relist).
#[derive(Clone, Default)]
struct Journal(Arc<Mutex<Vec<String>>>);

impl Journal {
    fn push(&self, s: String) {
        self.0.lock().unwrap().push(s);
    }
    fn entries(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }
    fn contains(&self, s: &str) -> bool {
        self.0.lock().unwrap().iter().any(|e| e == s)
    }
    fn handler<K>(&self) -> EventHandlerFns<K>
    where
        K: k8s_openapi::Metadata<Ty: ObjectMetaAccess> + Send + Sync + 'static,
    {
        let (a, u, d) = (self.clone(), self.clone(), self.clone());
        fn name(m: &impl ObjectMetaAccess) -> String {
            m.name().unwrap_or_default().to_owned()
        }
        EventHandlerFns::new()
            .on_add(move |o: &Arc<K>, _| a.push(format!("ADD {}", name(o.metadata()))))
            .on_update(move |_, n: &Arc<K>| u.push(format!("UPDATE {}", name(n.metadata()))))
            .on_delete(move |o: &DeletedObject<K>| {
                let tag = if o.is_final_state_unknown() {
                    "DELETE?"
                } else {
                    "DELETE"
                };
                d.push(format!("{tag} {}", name(o.object().metadata())))
            })
    }
}

fn config_map(name: &str, value: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            labels: Some(BTreeMap::from([("e2e".to_owned(), "informer".to_owned())])),
            ..Default::default()
        },
        data: Some(BTreeMap::from([("v".to_owned(), value.to_owned())])),
        ..Default::default()
    }
}

/// What an informer here caches: a full type, a view or `PartialObjectMetadata`.
trait Cached:
    k8s_openapi::Resource
    + k8s_openapi::ListableResource
    + k8s_openapi::Metadata<Ty: ObjectMetaAccess>
    + serde::de::DeserializeOwned
    + Clone
    + Send
    + Sync
    + 'static
{
}

impl<K> Cached for K where
    K: k8s_openapi::Resource
        + k8s_openapi::ListableResource
        + k8s_openapi::Metadata<Ty: ObjectMetaAccess>
        + serde::de::DeserializeOwned
        + Clone
        + Send
        + Sync
        + 'static
{
}

fn informer_for<K>(api: Api<K>) -> SharedInformer<K>
where
    K: Cached,
    K::Scope: 'static,
{
    SharedInformer::new(ListWatch::new(api), SharedInformerOptions::default())
}

fn names<K: k8s_openapi::Metadata<Ty: ObjectMetaAccess>>(objs: &[Arc<K>]) -> BTreeSet<String> {
    objs.iter()
        .map(|o| o.metadata().name().unwrap_or_default().to_owned())
        .collect()
}

async fn fresh_names(cms: &Api<ConfigMap>) -> BTreeSet<String> {
    cms.list(&ListParams {
        label_selector: Some("e2e=informer".into()),
        ..Default::default()
    })
    .await
    .unwrap()
    .items
    .iter()
    .map(|c| c.metadata.name.clone().unwrap_or_default())
    .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn informer_syncs_1000_pods() {
    let cluster = require_cluster!();
    // Creating 1,000 pods at client-go's default 5 QPS would take minutes; lift the limit.
    let client = cluster.admin_with(|c| c.qps = -1.0);
    let ns = TestNamespace::create(&client, "informer-scale").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    // A scheduling gate keeps the pods Pending and untouched by scheduler and nodes.
    let pod = |i: usize| Pod {
        metadata: ObjectMeta {
            name: Some(format!("p-{i:04}")),
            ..Default::default()
        },
        spec: Some(PodSpec {
            containers: vec![Container {
                name: "c".into(),
                image: Some("registry.k8s.io/pause:3.10".into()),
                ..Default::default()
            }],
            scheduling_gates: Some(vec![PodSchedulingGate {
                name: "kctrl.test/hold".into(),
            }]),
            ..Default::default()
        }),
        ..Default::default()
    };
    futures::stream::iter(0..1000)
        .map(|i| {
            let pods = pods.clone();
            async move { pods.create(&PostParams::default(), &pod(i)).await.unwrap() }
        })
        .buffer_unordered(32)
        .collect::<Vec<_>>()
        .await;

    let informer = informer_for(pods.clone());
    let journal = Journal::default();
    let reg = informer.add_event_handler(journal.handler()).unwrap();
    let cancel = CancellationToken::new();
    let task = informer.start(cancel.clone());
    tokio::time::timeout(Duration::from_secs(60), informer.synced())
        .await
        .expect("informer synced within 60s");
    assert!(informer.has_synced());
    assert_eq!(informer.store().len(), 1000);
    wait_until(
        "the handler's initial adds",
        Duration::from_secs(30),
        || reg.has_synced(),
    )
    .await;
    assert_eq!(journal.entries().len(), 1000, "one ADD per pod");
    let lister = informer.lister();
    assert!(lister.namespaced(&ns.name).get("p-0999").is_some());
    assert!(!informer.last_sync_resource_version().is_empty());
    cancel.cancel();
    let _ = task.await;

    // The same pods through metadata-only and view informers: the server answers in the
    // PartialObjectMetadata form (a PodList would not decode as one), the view skips the rest.
    let meta = informer_for(Api::<PartialObjectMetadata<Pod>>::namespaced(
        client.clone(),
        &ns.name,
    ));
    let view = informer_for(Api::<PodPhase>::namespaced(client.clone(), &ns.name));
    let cancel = CancellationToken::new();
    let tasks = [meta.start(cancel.clone()), view.start(cancel.clone())];
    tokio::time::timeout(Duration::from_secs(60), async {
        meta.synced().await;
        view.synced().await;
    })
    .await
    .expect("metadata and view informers synced within 60s");
    assert_eq!((meta.store().len(), view.store().len()), (1000, 1000));
    let key = format!("{}/p-0999", ns.name);
    let (m, v) = (
        meta.store().get(&key).unwrap(),
        view.store().get(&key).unwrap(),
    );
    assert!(
        !m.metadata.managed_fields().is_empty(),
        "metadata is kept whole"
    );
    assert!(v.metadata.managed_fields.is_none());
    assert_eq!(
        v.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Pending")
    );
    assert_eq!(m.metadata.uid(), v.metadata.uid.as_deref());
    // The compact form holds every field the server sent: read back in k8s-openapi's form it
    // equals a fresh GET of the (gated, unchanging) Pod, managedFields included.
    let live = pods.get("p-0999").await.unwrap();
    assert_eq!(m.metadata.to_object_meta(), live.metadata);
    cancel.cancel();
    for t in tasks {
        let _ = t.await;
    }
    ns.delete().await;
}

/// A view of Pods: metadata without managedFields, and the phase.
#[derive(Clone, Debug, serde::Deserialize)]
struct PodPhase {
    #[serde(deserialize_with = "kctrl_client::metadata_without_managed_fields")]
    metadata: ObjectMeta,
    status: Option<PodPhaseStatus>,
}

#[derive(Clone, Debug, serde::Deserialize)]
struct PodPhaseStatus {
    phase: Option<String>,
}

kctrl_client::resource_view!(PodPhase => Pod);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn informer_observes_adds_updates_and_deletes() {
    let cluster = require_cluster!();
    let client = cluster.admin();
    let ns = TestNamespace::create(&client, "informer-events").await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns.name);
    cms.create(&PostParams::default(), &config_map("before", "1"))
        .await
        .unwrap();

    let informer = informer_for(cms.clone());
    let journal = Journal::default();
    informer.add_event_handler(journal.handler()).unwrap();
    let cancel = CancellationToken::new();
    let task = informer.start(cancel.clone());
    tokio::time::timeout(Duration::from_secs(30), informer.synced())
        .await
        .expect("synced");

    cms.create(&PostParams::default(), &config_map("after", "1"))
        .await
        .unwrap();
    let mut after = cms.get("after").await.unwrap();
    after.data = Some(BTreeMap::from([("v".to_owned(), "2".to_owned())]));
    cms.update(&PostParams::default(), &after).await.unwrap();
    cms.delete("before", &DeleteParams::default())
        .await
        .unwrap();

    wait_until("all four events", Duration::from_secs(30), || {
        journal.contains("DELETE before")
    })
    .await;
    // Only this namespace's objects are watched (kube-root-ca.crt included).
    let seen: Vec<String> = journal
        .entries()
        .into_iter()
        .filter(|e| !e.ends_with("kube-root-ca.crt"))
        .collect();
    assert_eq!(
        seen,
        vec!["ADD before", "ADD after", "UPDATE after", "DELETE before"]
    );
    let cached = informer.store().get(&format!("{}/after", ns.name)).unwrap();
    assert_eq!(cached.data.as_ref().unwrap()["v"], "2");
    assert!(
        informer
            .store()
            .get(&format!("{}/before", ns.name))
            .is_none()
    );
    cancel.cancel();
    let _ = task.await;
    ns.delete().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn informer_recovers_from_a_cut_watch_without_losing_events() {
    let cluster = require_cluster!();
    let admin = cluster.admin();
    let ns = TestNamespace::create(&admin, "informer-cut").await;
    let direct: Api<ConfigMap> = Api::namespaced(admin.clone(), &ns.name);
    for i in 0..3 {
        direct
            .create(&PostParams::default(), &config_map(&format!("c-{i}"), "1"))
            .await
            .unwrap();
    }
    let proxy = CuttableProxy::start(cluster.apiserver_host_port()).await;
    let run = ProxiedInformer::<ConfigMap>::start(&cluster, &proxy, &ns.name, |api| api).await;
    let (informer, journal) = (&run.informer, &run.journal);

    // The watch connection dies; changes happen while the informer cannot see them.
    proxy.cut();
    direct
        .create(&PostParams::default(), &config_map("c-new", "1"))
        .await
        .unwrap();
    let mut c1 = direct.get("c-1").await.unwrap();
    c1.data = Some(BTreeMap::from([("v".to_owned(), "2".to_owned())]));
    direct.update(&PostParams::default(), &c1).await.unwrap();
    direct
        .delete("c-2", &DeleteParams::default())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    proxy.restore();

    wait_until("the missed changes", Duration::from_secs(60), || {
        journal.contains("ADD c-new")
            && journal.contains("UPDATE c-1")
            && (journal.contains("DELETE c-2") || journal.contains("DELETE? c-2"))
    })
    .await;
    assert_eq!(names(&informer.store().list()), fresh_names(&direct).await);
    run.stop().await;
    ns.delete().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relist_after_compaction_surfaces_deletions() {
    if let Some(k2) = relist_after_compaction::<ConfigMap>("informer-compact", |api| api).await {
        assert_eq!(k2.data.as_ref().unwrap()["v"], "2");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relist_after_compaction_surfaces_deletions_through_a_view() {
    if let Some(k2) =
        relist_after_compaction::<ConfigMapData>("informer-compact-view", |api| api).await
    {
        assert_eq!(k2.data.as_ref().unwrap()["v"], "2");
        assert!(k2.metadata.managed_fields.is_none());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relist_after_compaction_surfaces_deletions_through_metadata_only() {
    if let Some(k2) = relist_after_compaction::<PartialObjectMetadata<ConfigMap>>(
        "informer-compact-meta",
        |api| api,
    )
    .await
    {
        assert!(!k2.metadata.managed_fields().is_empty());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relist_after_compaction_surfaces_deletions_through_a_protobuf_view() {
    let before = CONFIG_MAPS_FROM_PROTOBUF.load(Ordering::Relaxed);
    if let Some(k2) = relist_after_compaction::<ConfigMapData>("informer-compact-pb", |api| {
        api.with_protobuf_decoder(config_map_from_protobuf)
    })
    .await
    {
        assert_eq!(k2.data.as_ref().unwrap()["v"], "2");
        // Lists and watch events were decoded from protobuf, not from a JSON fallback.
        assert!(CONFIG_MAPS_FROM_PROTOBUF.load(Ordering::Relaxed) - before >= 8);
    }
}

/// ConfigMaps [`config_map_from_protobuf`] decoded.
static CONFIG_MAPS_FROM_PROTOBUF: AtomicUsize = AtomicUsize::new(0);

/// The fields of upstream's `ConfigMap` message that [`ConfigMapData`] reads.
#[derive(prost::Message)]
struct ConfigMapMessage {
    #[prost(message, optional, tag = "1")]
    metadata: Option<ObjectMetaMessage>,
    #[prost(btree_map = "string, string", tag = "2")]
    data: BTreeMap<String, String>,
}

/// [`ConfigMapData`] from protobuf, counted.
fn config_map_from_protobuf(
    message: &[u8],
) -> Result<ConfigMapData, kctrl_client::protobuf::ProtobufError> {
    use prost::Message as _;
    let cm = ConfigMapMessage::decode(message)?;
    CONFIG_MAPS_FROM_PROTOBUF.fetch_add(1, Ordering::Relaxed);
    Ok(ConfigMapData {
        metadata: cm.metadata.map(Into::into).unwrap_or_default(),
        data: (!cm.data.is_empty()).then_some(cm.data),
    })
}

/// A view of ConfigMaps: metadata without managedFields, and the data.
#[derive(Clone, Debug, serde::Deserialize)]
struct ConfigMapData {
    #[serde(deserialize_with = "kctrl_client::metadata_without_managed_fields")]
    metadata: ObjectMeta,
    data: Option<BTreeMap<String, String>>,
}

kctrl_client::resource_view!(ConfigMapData => ConfigMap);

/// ConfigMaps change and disappear while the informer's connection is cut; etcd is compacted
/// past the changes, so resuming the watch gets 410 and the informer must relist, reporting
/// the deletions it missed as final state unknown. Run for the full type, a view and
/// metadata only: all must end with the same cache as a fresh list. Returns the cached `k-2`
/// (changed while cut), or `None` when the cluster cannot compact.
async fn relist_after_compaction<K>(namespace: &str, setup: fn(Api<K>) -> Api<K>) -> Option<Arc<K>>
where
    K: Cached,
    K::Scope: 'static,
{
    let cluster = require_cluster!(None);
    if cluster.compact_command.is_none() {
        eprintln!("e2e: no compaction command; skipping the relist after compaction");
        return None;
    }
    let admin = cluster.admin();
    let ns = TestNamespace::create(&admin, namespace).await;
    // ConfigMaps are served from etcd directly on the local e2e cluster, so a watch resumed
    // from a compacted revision is refused with 410 and the informer must relist.
    let direct: Api<ConfigMap> = Api::namespaced(admin.clone(), &ns.name);
    for i in 0..4 {
        direct
            .create(&PostParams::default(), &config_map(&format!("k-{i}"), "1"))
            .await
            .unwrap();
    }
    let proxy = CuttableProxy::start(cluster.apiserver_host_port()).await;
    let run = ProxiedInformer::<K>::start(&cluster, &proxy, &ns.name, setup).await;
    let (informer, journal) = (&run.informer, &run.journal);

    let k2 = change_while_cut(&cluster, &proxy, &direct, &["k-0", "k-1"]).await;

    wait_until("the relist", Duration::from_secs(90), || {
        journal.contains("DELETE? k-0") && journal.contains("DELETE? k-1")
    })
    .await;
    wait_until(
        "the store to equal a fresh list",
        Duration::from_secs(30),
        || names(&informer.store().list()).len() == 4,
    )
    .await;
    assert_eq!(names(&informer.store().list()), fresh_names(&direct).await);
    assert!(journal.contains("ADD k-new"));
    assert!(journal.contains("UPDATE k-2"));
    let cached = informer.store().get(&format!("{}/k-2", ns.name)).unwrap();
    assert_eq!(
        cached.metadata().resource_version(),
        k2.metadata.resource_version.as_deref()
    );
    run.stop().await;
    ns.delete().await;
    Some(cached)
}

/// With the informer's connection cut: deletes `deleted`, creates `k-new`, sets `k-2`'s value
/// to 2 and creates `k-last`; then compacts etcd past all of it and restores the connection,
/// so the informer's watch resumes from a compacted revision. Returns `k-2` as written.
async fn change_while_cut(
    cluster: &kctrl_e2e::Cluster,
    proxy: &CuttableProxy,
    direct: &Api<ConfigMap>,
    deleted: &[&str],
) -> ConfigMap {
    proxy.cut();
    for name in deleted {
        direct.delete(name, &DeleteParams::default()).await.unwrap();
    }
    direct
        .create(&PostParams::default(), &config_map("k-new", "1"))
        .await
        .unwrap();
    let mut k2 = direct.get("k-2").await.unwrap();
    k2.data = Some(BTreeMap::from([("v".to_owned(), "2".to_owned())]));
    let k2 = direct.update(&PostParams::default(), &k2).await.unwrap();
    // One more write so the compaction point lies strictly after every change above.
    direct
        .create(&PostParams::default(), &config_map("k-last", "1"))
        .await
        .unwrap();
    cluster.compact();
    proxy.restore();
    k2
}

/// A ConfigMap informer (label `e2e=informer`), over the full type, a view or metadata only,
/// whose connections go through a proxy the test can cut, with a journal of what its handler
/// saw; started and synced.
struct ProxiedInformer<K> {
    informer: SharedInformer<K>,
    journal: Journal,
    cancel: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl<K> ProxiedInformer<K>
where
    K: Cached,
    K::Scope: 'static,
{
    /// `setup` adjusts the informer's [`Api`] (e.g. to ask for protobuf).
    async fn start(
        cluster: &kctrl_e2e::Cluster,
        proxy: &CuttableProxy,
        namespace: &str,
        setup: fn(Api<K>) -> Api<K>,
    ) -> Self {
        let proxied: Api<K> = setup(Api::namespaced(cluster.admin_via(proxy), namespace));
        let informer = SharedInformer::new(
            ListWatch::new(proxied).labels("e2e=informer"),
            SharedInformerOptions::default(),
        );
        let journal = Journal::default();
        informer.add_event_handler(journal.handler()).unwrap();
        let cancel = CancellationToken::new();
        let task = informer.start(cancel.clone());
        tokio::time::timeout(Duration::from_secs(30), informer.synced())
            .await
            .expect("synced");
        Self {
            informer,
            journal,
            cancel,
            task,
        }
    }

    async fn stop(self) {
        self.cancel.cancel();
        let _ = self.task.await;
    }
}

/// PodViews [`pod_view_from_protobuf`] decoded.
static PODS_FROM_PROTOBUF: AtomicUsize = AtomicUsize::new(0);

/// [`PodView::from_protobuf`], counted, so the test knows protobuf was really spoken.
fn pod_view_from_protobuf(
    message: &[u8],
) -> Result<PodView, kctrl_client::protobuf::ProtobufError> {
    PODS_FROM_PROTOBUF.fetch_add(1, Ordering::Relaxed);
    PodView::from_protobuf(message)
}

/// The Deployment controller's Pod view, decoded from protobuf by one informer and from JSON
/// by another, over Pods with every field the view keeps (labels, annotations, owner
/// references, finalizers, a deletion timestamp and grace period, phases), through the
/// initial list, updates, deletions and terminations: both caches must hold equal values.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_views_from_protobuf_equal_pod_views_from_json() {
    let cluster = require_cluster!();
    let client = cluster.admin_with(|c| c.qps = -1.0);
    let ns = TestNamespace::create(&client, "informer-protobuf").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    // An owner that exists, so the garbage collector leaves the pods alone.
    let owner = Api::<ConfigMap>::namespaced(client.clone(), &ns.name)
        .create(&PostParams::default(), &config_map("owner", "1"))
        .await
        .unwrap();
    let pod = |i: usize| Pod {
        metadata: ObjectMeta {
            name: Some(format!("p-{i:02}")),
            labels: Some(BTreeMap::from([
                ("app".to_owned(), "web".to_owned()),
                ("i".to_owned(), i.to_string()),
            ])),
            annotations: i
                .is_multiple_of(2)
                .then(|| BTreeMap::from([("note".to_owned(), format!("pod {i}"))])),
            finalizers: i
                .is_multiple_of(5)
                .then(|| vec!["kctrl.test/hold".to_owned()]),
            owner_references: i.is_multiple_of(3).then(|| {
                vec![
                    k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
                        api_version: "v1".into(),
                        kind: "ConfigMap".into(),
                        name: "owner".into(),
                        uid: owner.metadata.uid.clone().unwrap(),
                        controller: Some(true),
                        block_owner_deletion: Some(false),
                    },
                ]
            }),
            ..Default::default()
        },
        spec: Some(PodSpec {
            containers: vec![Container {
                name: "c".into(),
                image: Some("registry.k8s.io/pause:3.10".into()),
                ..Default::default()
            }],
            // Unscheduled and untouched by nodes: deletions are immediate unless held.
            scheduling_gates: Some(vec![PodSchedulingGate {
                name: "kctrl.test/hold".into(),
            }]),
            ..Default::default()
        }),
        ..Default::default()
    };
    for i in 0..30 {
        pods.create(&PostParams::default(), &pod(i)).await.unwrap();
    }

    let from_pb = informer_for(
        Api::<PodView>::namespaced(client.clone(), &ns.name)
            .with_protobuf_decoder(pod_view_from_protobuf),
    );
    let from_json = informer_for(Api::<PodView>::namespaced(client.clone(), &ns.name));
    let cancel = CancellationToken::new();
    let tasks = [
        from_pb.start(cancel.clone()),
        from_json.start(cancel.clone()),
    ];
    tokio::time::timeout(Duration::from_secs(60), async {
        from_pb.synced().await;
        from_json.synced().await;
    })
    .await
    .expect("both informers synced");
    assert!(
        PODS_FROM_PROTOBUF.load(Ordering::Relaxed) >= 30,
        "the initial list was decoded from protobuf"
    );

    // Changes seen through the watches: labels and annotations, deletions (immediate, or
    // held by the finalizer with a deletion timestamp), and a new pod.
    let decoded_before_watch = PODS_FROM_PROTOBUF.load(Ordering::Relaxed);
    for i in 0..10 {
        let patch = serde_json::json!({"metadata": {"labels": {"changed": "yes"},
            "annotations": {"note": null, "other": "x"}}});
        pods.patch(
            &format!("p-{i:02}"),
            &PatchParams::default(),
            &Patch::Merge(patch),
        )
        .await
        .unwrap();
    }
    for i in 10..20 {
        pods.delete(&format!("p-{i:02}"), &DeleteParams::default())
            .await
            .unwrap();
    }
    pods.create(&PostParams::default(), &pod(30)).await.unwrap();

    let fresh = || async {
        let mut m = BTreeMap::new();
        for p in pods.list(&ListParams::default()).await.unwrap().items {
            m.insert(
                p.metadata.name.clone().unwrap(),
                p.metadata.resource_version.clone(),
            );
        }
        m
    };
    let want = fresh().await;
    let cached = |informer: &SharedInformer<PodView>| {
        informer
            .store()
            .list()
            .iter()
            .map(|p| {
                (
                    p.name().to_owned(),
                    p.metadata.resource_version().map(str::to_owned),
                )
            })
            .collect::<BTreeMap<_, _>>()
    };
    wait_until(
        "both caches to equal a fresh list",
        Duration::from_secs(30),
        || cached(&from_pb) == want && cached(&from_json) == want,
    )
    .await;
    assert!(PODS_FROM_PROTOBUF.load(Ordering::Relaxed) > decoded_before_watch);
    let mut terminating = 0;
    for json in from_json.store().list() {
        let key = format!("{}/{}", ns.name, json.name());
        let pb = from_pb.store().get(&key).unwrap();
        assert_eq!(*pb, *json, "{key}");
        if json.metadata.deletion_timestamp().is_some() {
            terminating += 1;
            assert!(json.metadata.deletion_grace_period_seconds().is_some());
        }
    }
    assert_eq!(terminating, 2, "p-10 and p-15 are held by their finalizer");
    let p00 = from_pb.store().get(&format!("{}/p-00", ns.name)).unwrap();
    assert_eq!(p00.phase(), "Pending");
    assert_eq!(p00.metadata.owner_references()[0].name(), "owner");
    assert_eq!(
        p00.metadata.finalizers().collect::<Vec<_>>(),
        ["kctrl.test/hold"]
    );
    assert!(p00.metadata.creation_timestamp().is_some());

    cancel.cancel();
    for t in tasks {
        let _ = t.await;
    }
    for name in ["p-00", "p-05", "p-10", "p-15", "p-20", "p-25", "p-30"] {
        let release = serde_json::json!({"metadata": {"finalizers": null}});
        let _ = pods
            .patch(name, &PatchParams::default(), &Patch::Merge(release))
            .await;
    }
    ns.delete().await;
}

/// A dynamic informer (client-go's `dynamicinformer`): ConfigMaps as `DynamicObject`s,
/// addressed by a run-time group/version/resource through `DynamicSharedInformerFactory`
/// (namespace and label selector from the factory's options), through a cuttable proxy. It
/// must see adds, updates and deletes as they happen, and — after a cut connection and an
/// etcd compaction — relist, reporting the deletions it missed as final state unknown.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dynamic_informer_sees_events_and_a_relist() {
    use kctrl_client::{DynamicObject, ResourceRef, Scope};
    use kctrl_informer::SharedInformerFactory;

    let cluster = require_cluster!();
    let admin = cluster.admin();
    let ns = TestNamespace::create(&admin, "informer-dynamic").await;
    let direct: Api<ConfigMap> = Api::namespaced(admin.clone(), &ns.name);
    for i in 0..4 {
        direct
            .create(&PostParams::default(), &config_map(&format!("k-{i}"), "1"))
            .await
            .unwrap();
    }
    let configmaps = ResourceRef::new("", "v1", "configmaps", "ConfigMap", Scope::Namespaced);
    let proxy = CuttableProxy::start(cluster.apiserver_host_port()).await;
    let factory = SharedInformerFactory::builder(cluster.admin_via(&proxy), Duration::ZERO)
        .namespace(&ns.name)
        .tweak_list_params(|p| p.label_selector = Some("e2e=informer".into()))
        .build_dynamic();
    let informer = factory.for_resource(&configmaps);
    let journal = Journal::default();
    informer
        .add_event_handler(journal.handler::<DynamicObject>())
        .unwrap();
    let cancel = CancellationToken::new();
    factory.start(&cancel);
    let synced = tokio::time::timeout(
        Duration::from_secs(30),
        factory.wait_for_cache_sync(&cancel),
    )
    .await
    .expect("synced");
    assert_eq!(synced.get(&configmaps), Some(&true));
    assert_eq!(names(&informer.store().list()), fresh_names(&direct).await);
    let k0 = informer.store().get(&format!("{}/k-0", ns.name)).unwrap();
    assert_eq!(
        (k0.api_version.as_str(), k0.kind.as_str()),
        ("v1", "ConfigMap")
    );
    assert_eq!(k0.data["data"]["v"], "1");

    // Live events.
    direct
        .create(&PostParams::default(), &config_map("live", "1"))
        .await
        .unwrap();
    let mut live = direct.get("live").await.unwrap();
    live.data = Some(BTreeMap::from([("v".to_owned(), "2".to_owned())]));
    direct.update(&PostParams::default(), &live).await.unwrap();
    direct
        .delete("k-3", &DeleteParams::default())
        .await
        .unwrap();
    wait_until("add, update and delete", Duration::from_secs(30), || {
        journal.contains("ADD live")
            && journal.contains("UPDATE live")
            && journal.contains("DELETE k-3")
    })
    .await;
    let cached = informer.store().get(&format!("{}/live", ns.name)).unwrap();
    assert_eq!(cached.data["data"]["v"], "2");

    if cluster.compact_command.is_none() {
        eprintln!("e2e: no compaction command; skipping the dynamic informer's relist");
    } else {
        let k2 = change_while_cut(&cluster, &proxy, &direct, &["k-0"]).await;

        wait_until("the relist", Duration::from_secs(90), || {
            journal.contains("DELETE? k-0") && journal.contains("ADD k-last")
        })
        .await;
        wait_until(
            "the store to equal a fresh list",
            Duration::from_secs(30),
            || names(&informer.store().list()).len() == 5,
        )
        .await;
        assert_eq!(names(&informer.store().list()), fresh_names(&direct).await);
        assert!(journal.contains("ADD k-new"));
        assert!(journal.contains("UPDATE k-2"));
        let cached = informer.store().get(&format!("{}/k-2", ns.name)).unwrap();
        assert_eq!(
            cached.metadata.resource_version,
            k2.metadata.resource_version
        );
        assert_eq!(cached.data["data"]["v"], "2");
    }
    cancel.cancel();
    factory.shutdown().await;
    ns.delete().await;
}

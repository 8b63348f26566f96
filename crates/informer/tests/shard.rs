//! Informers following a shard scope, against a scripted server that filters by the shard
//! selector (the `ShardedListAndWatch` feature gate on) or ignores it (gate off), on the
//! paused clock.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;
use k8s_openapi::List;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ListMeta, ObjectMeta, ShardInfo};
use kctrl_client::{
    Bookmark, Error, HashRange, INITIAL_EVENTS_END_ANNOTATION, ListParams, ShardField,
    ShardSelector, WatchEvent, WatchParams, hash_field,
};
use kctrl_informer::list_watch::{EventStream, ListerWatcher};
use kctrl_informer::metrics::{
    GaugeMetric, HistogramMetric, InformerId, InformerMetrics, InformerMetricsProvider,
};
use kctrl_informer::{
    BackoffOptions, DeletedObject, EventHandlerFns, ReflectorOptions, ShardFiltering, ShardScope,
    SharedInformer, SharedInformerOptions,
};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

type Sent = mpsc::UnboundedSender<Result<WatchEvent<ConfigMap>, Error>>;
/// Work done inside a list call, before it is answered.
type Hook = Box<dyn FnOnce(&mut State, &Server) + Send>;

/// What the scripted server holds.
#[derive(Default)]
struct State {
    rv: u64,
    objects: BTreeMap<String, ConfigMap>,
    /// Every change, for watches that start in the past.
    log: Vec<(u64, WatchEvent<ConfigMap>)>,
    /// Open watches and the selector each filters by (when the gate is on).
    watchers: Vec<(Option<ShardSelector>, Sent)>,
    lists: Vec<ListParams>,
    watches: Vec<WatchParams>,
    /// Run (once each) when the next list call arrives, before it is answered.
    before_list: Vec<Hook>,
}

/// A kube-apiserver in miniature: one namespace of ConfigMaps, lists and watches (also
/// streaming lists) that filter by the shard selector when `gate` is on.
struct Server {
    gate: bool,
    /// resourceVersions written as `rv-N` (opaque to a client).
    opaque: bool,
    state: Mutex<State>,
}

impl Server {
    fn new(gate: bool) -> Arc<Self> {
        Arc::new(Self {
            gate,
            opaque: false,
            state: Mutex::default(),
        })
    }

    fn rv(&self, n: u64) -> String {
        if self.opaque {
            format!("rv-{n}")
        } else {
            n.to_string()
        }
    }

    fn parse_rv(&self, rv: &str) -> u64 {
        rv.trim_start_matches("rv-").parse().unwrap_or(0)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap()
    }

    fn passes(&self, selector: &Option<ShardSelector>, cm: &ConfigMap) -> bool {
        !self.gate || selector.as_ref().is_none_or(|s| s.matches(&cm.metadata))
    }

    /// Creates, updates (a new data value) or deletes `name` (uid: [`uid_of`]).
    fn write(&self, st: &mut State, name: &str, delete: bool) {
        st.rv += 1;
        let rv = self.rv(st.rv);
        let event = if delete {
            let mut cm = st
                .objects
                .remove(name)
                .expect("deleting an existing object");
            cm.metadata.resource_version = Some(rv);
            WatchEvent::Deleted(cm)
        } else {
            let existed = st.objects.contains_key(name);
            let cm = st
                .objects
                .entry(name.to_owned())
                .or_insert_with(|| ConfigMap {
                    metadata: ObjectMeta {
                        name: Some(name.to_owned()),
                        namespace: Some("default".into()),
                        uid: Some(uid_of(name)),
                        ..Default::default()
                    },
                    ..Default::default()
                });
            cm.metadata.resource_version = Some(rv);
            cm.data = Some(BTreeMap::from([("rv".to_owned(), st.rv.to_string())]));
            if existed {
                WatchEvent::Modified(cm.clone())
            } else {
                WatchEvent::Added(cm.clone())
            }
        };
        let n = st.rv;
        st.log.push((n, event.clone()));
        let obj = object_of(&event).clone();
        st.watchers
            .retain(|(sel, tx)| !self.passes(sel, &obj) || tx.send(Ok(event.clone())).is_ok());
    }

    fn put(&self, name: &str) {
        let mut st = self.lock();
        self.write(&mut st, name, false);
    }

    fn delete(&self, name: &str) {
        let mut st = self.lock();
        self.write(&mut st, name, true);
    }

    fn lists(&self) -> Vec<ListParams> {
        self.lock().lists.clone()
    }

    fn watches(&self) -> Vec<WatchParams> {
        self.lock().watches.clone()
    }
}

fn object_of(event: &WatchEvent<ConfigMap>) -> &ConfigMap {
    match event {
        WatchEvent::Added(o) | WatchEvent::Modified(o) | WatchEvent::Deleted(o) => o,
        _ => unreachable!(),
    }
}

struct Fake(Arc<Server>);

impl ListerWatcher<ConfigMap> for Fake {
    fn list(&self, params: &ListParams) -> BoxFuture<'_, Result<List<ConfigMap>, Error>> {
        let server = &self.0;
        let mut st = server.lock();
        st.lists.push(params.clone());
        for hook in std::mem::take(&mut st.before_list) {
            hook(&mut st, server);
        }
        let selector = params.shard_selector.clone();
        let items = st
            .objects
            .values()
            .filter(|cm| server.passes(&selector, cm))
            .cloned()
            .collect();
        let metadata = ListMeta {
            resource_version: Some(server.rv(st.rv)),
            shard_info: selector.filter(|_| server.gate).map(|s| ShardInfo {
                selector: s.to_string(),
            }),
            ..Default::default()
        };
        async move { Ok(List { items, metadata }) }.boxed()
    }

    fn watch(&self, params: &WatchParams) -> BoxFuture<'_, Result<EventStream<ConfigMap>, Error>> {
        let server = &self.0;
        let mut st = server.lock();
        st.watches.push(params.clone());
        let (tx, rx) = mpsc::unbounded_channel();
        let selector = params.shard_selector.clone();
        if params.send_initial_events {
            for cm in st
                .objects
                .values()
                .filter(|cm| server.passes(&selector, cm))
            {
                tx.send(Ok(WatchEvent::Added(cm.clone()))).unwrap();
            }
            tx.send(Ok(WatchEvent::Bookmark(Bookmark {
                resource_version: server.rv(st.rv),
                annotations: BTreeMap::from([(
                    INITIAL_EVENTS_END_ANNOTATION.to_owned(),
                    "true".to_owned(),
                )]),
            })))
            .unwrap();
        } else {
            let from = server.parse_rv(params.resource_version.as_deref().unwrap_or("0"));
            for (n, event) in &st.log {
                if *n > from && server.passes(&selector, object_of(event)) {
                    tx.send(Ok(event.clone())).unwrap();
                }
            }
        }
        st.watchers.push((selector, tx));
        let stream: EventStream<ConfigMap> =
            Box::pin(futures::stream::unfold(rx, |mut rx| async move {
                rx.recv().await.map(|item| (item, rx))
            }));
        async move { Ok(stream) }.boxed()
    }
}

/// The recorded gauge of `kctrl_informer_shard_client_filtering`.
#[derive(Default)]
struct Gauge(Mutex<Option<f64>>);

impl GaugeMetric for Gauge {
    fn set(&self, value: f64) {
        *self.0.lock().unwrap() = Some(value);
    }
}

struct NoHistogram;
impl HistogramMetric for NoHistogram {
    fn observe(&self, _: f64) {}
}

#[derive(Default)]
struct Provider {
    shard: Arc<Gauge>,
}

impl InformerMetricsProvider for Provider {
    fn new_queued_items_metric(&self, _: &InformerId) -> Arc<dyn GaugeMetric> {
        Arc::new(Gauge::default())
    }
    fn new_processing_latency_metric(&self, _: &InformerId) -> Arc<dyn HistogramMetric> {
        Arc::new(NoHistogram)
    }
    fn new_store_resource_version_metric(&self, _: &InformerId) -> Arc<dyn GaugeMetric> {
        Arc::new(Gauge::default())
    }
    fn new_shard_client_filtering_metric(&self, _: &InformerId) -> Arc<dyn GaugeMetric> {
        self.shard.clone()
    }
}

fn low() -> ShardSelector {
    ShardSelector::new(ShardField::Uid, [HashRange::new(0, 1 << 63).unwrap()]).unwrap()
}

fn high() -> ShardSelector {
    ShardSelector::new(ShardField::Uid, [HashRange::new(1 << 63, 1 << 64).unwrap()]).unwrap()
}

fn full() -> ShardSelector {
    ShardSelector::full(ShardField::Uid)
}

/// The uid of `name`'s object: it starts with digits that differ from name to name, as a
/// UUID's do (FNV-1a's top bits hardly depend on a string's last bytes, so uids differing
/// only at their end would all land in one half).
fn uid_of(name: &str) -> String {
    format!(
        "{:016x}-{name}",
        hash_field(name).wrapping_mul(0x9e37_79b9_7f4a_7c15)
    )
}

/// Whether `name`'s object hashes into `selector`.
fn in_range(selector: &ShardSelector, name: &str) -> bool {
    selector.matches_hash(hash_field(&uid_of(name)))
}

const NAMES: usize = 24;

fn names() -> Vec<String> {
    (0..NAMES).map(|i| format!("cm-{i:02}")).collect()
}

fn names_in(selector: &ShardSelector) -> Vec<String> {
    names()
        .into_iter()
        .filter(|n| in_range(selector, n))
        .collect()
}

struct Running {
    informer: SharedInformer<ConfigMap>,
    events: Arc<Mutex<Vec<String>>>,
    gauge: Arc<Gauge>,
    cancel: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl Running {
    fn cached(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .informer
            .store()
            .list()
            .iter()
            .map(|cm| cm.metadata.name.clone().unwrap())
            .collect();
        names.sort();
        names
    }

    fn take_events(&self) -> Vec<String> {
        std::mem::take(&mut *self.events.lock().unwrap())
    }

    async fn stop(self) {
        self.cancel.cancel();
        self.task.await.unwrap();
    }
}

/// A server holding the objects of [`names`], and a started, synced informer following
/// `scope` over it.
async fn start(server: &Arc<Server>, scope: &ShardScope, watch_list: bool) -> Running {
    if server.lock().objects.is_empty() {
        for n in names() {
            server.put(&n);
        }
    }
    let provider = Arc::new(Provider::default());
    let gauge = provider.shard.clone();
    let informer = SharedInformer::new(
        Fake(server.clone()),
        SharedInformerOptions {
            reflector: ReflectorOptions {
                name: "sharded".into(),
                use_watch_list: watch_list,
                shard_scope: Some(scope.clone()),
                backoff: BackoffOptions {
                    jitter: 0.0,
                    ..Default::default()
                },
                ..Default::default()
            },
            metrics: Some(InformerMetrics::new(
                InformerId::new("test", &kctrl_client::ResourceRef::of::<ConfigMap>()),
                provider,
            )),
            ..Default::default()
        },
    );
    let events = Arc::new(Mutex::new(Vec::new()));
    let record = |kind: &'static str| {
        let events = events.clone();
        move |cm: &ConfigMap| {
            events
                .lock()
                .unwrap()
                .push(format!("{kind} {}", cm.metadata.name.as_deref().unwrap()));
        }
    };
    let (add, update, delete) = (record("add"), record("update"), record("delete"));
    informer
        .add_event_handler(
            EventHandlerFns::new()
                .on_add(move |cm, _| add(cm))
                .on_update(move |_, cm| update(cm))
                .on_delete(move |d: &DeletedObject<ConfigMap>| {
                    assert!(
                        d.is_final_state_unknown(),
                        "an object leaving the shard is not seen deleted by a watch"
                    );
                    delete(d.object())
                }),
        )
        .unwrap();
    let cancel = CancellationToken::new();
    let task = tokio::spawn({
        let informer = informer.clone();
        let cancel = cancel.clone();
        async move { informer.run(cancel).await }
    });
    assert!(informer.synced().await);
    settle().await;
    let running = Running {
        informer,
        events,
        gauge,
        cancel,
        task,
    };
    running.take_events();
    running
}

/// Lets every task run until nothing is left to do.
async fn settle() {
    for _ in 0..5 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

fn events_of(kind: &str, names: &[String]) -> Vec<String> {
    sorted(names.iter().map(|n| format!("{kind} {n}")).collect())
}

#[tokio::test(start_paused = true)]
async fn the_server_filters_when_it_can() {
    let server = Server::new(true);
    let scope = ShardScope::new(Some(low()));
    let inf = start(&server, &scope, false).await;
    assert_eq!(inf.cached(), names_in(&low()));
    assert_eq!(inf.informer.shard_filtering(), ShardFiltering::Server);
    assert_eq!(*inf.gauge.0.lock().unwrap(), Some(0.0));
    assert_eq!(server.lists()[0].shard_selector, Some(low()));
    assert_eq!(server.watches()[0].shard_selector, Some(low()));
    assert_eq!(scope.applied_generation(), Some(1));
    inf.stop().await;
    assert_eq!(scope.informers(), 0, "a stopped informer leaves the scope");
}

async fn client_filtering(watch_list: bool) {
    let server = Server::new(false);
    let scope = ShardScope::new(Some(low()));
    let inf = start(&server, &scope, watch_list).await;
    assert!(
        names_in(&low()).len() < NAMES && !names_in(&low()).is_empty(),
        "both halves hold objects"
    );
    assert_eq!(inf.cached(), names_in(&low()), "only the shard is cached");
    assert_eq!(inf.informer.shard_filtering(), ShardFiltering::Client);
    assert_eq!(*inf.gauge.0.lock().unwrap(), Some(1.0));
    // The selector was sent all the same.
    if watch_list {
        assert_eq!(server.watches()[0].shard_selector, Some(low()));
        assert!(server.lists().is_empty());
    } else {
        assert_eq!(server.lists()[0].shard_selector, Some(low()));
    }
    // Watch events of the other half are dropped as well.
    let (mine, other) = (&names_in(&low())[0], &names_in(&high())[0]);
    server.put(mine);
    server.put(other);
    server.delete(other);
    server.put("new-object");
    settle().await;
    let mut want = vec![format!("update {mine}")];
    if in_range(&low(), "new-object") {
        want.push("add new-object".into());
    }
    assert_eq!(sorted(inf.take_events()), sorted(want));
    inf.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_server_ignoring_the_selector_is_filtered_on_the_client() {
    client_filtering(false).await;
}

#[tokio::test(start_paused = true)]
async fn a_streaming_list_ignoring_the_selector_is_filtered_on_the_client() {
    client_filtering(true).await;
}

async fn shrink(gate: bool) {
    let server = Server::new(gate);
    let scope = ShardScope::new(Some(full()));
    let inf = start(&server, &scope, false).await;
    assert_eq!(inf.cached().len(), NAMES);
    let generation = scope.set(Some(low()));
    assert_eq!(generation, 2);
    scope.applied(generation).await;
    assert_eq!(inf.cached(), names_in(&low()));
    settle().await;
    // Objects of the half given up reach handlers as deletions; the others are not touched.
    assert_eq!(inf.take_events(), events_of("delete", &names_in(&high())));
    // Nothing was listed again; the watch was reopened with the smaller selector where the
    // last one stopped.
    assert_eq!(server.lists().len(), 1);
    let watches = server.watches();
    assert_eq!(watches.len(), 2);
    assert_eq!(watches[1].shard_selector, Some(low()));
    assert_eq!(watches[1].resource_version, watches[0].resource_version);
    // And events of the half given up are no longer applied.
    server.put(&names_in(&high())[0]);
    server.put(&names_in(&low())[0]);
    settle().await;
    assert_eq!(
        inf.take_events(),
        [format!("update {}", names_in(&low())[0])]
    );
    inf.stop().await;
}

#[tokio::test(start_paused = true)]
async fn shrinking_the_scope_deletes_what_leaves_it() {
    shrink(true).await;
}

#[tokio::test(start_paused = true)]
async fn shrinking_the_scope_without_server_filtering() {
    shrink(false).await;
}

async fn grow(gate: bool) {
    let server = Server::new(gate);
    let scope = ShardScope::new(Some(low()));
    let inf = start(&server, &scope, false).await;
    assert_eq!(inf.cached(), names_in(&low()));
    let generation = scope.set(Some(full()));
    scope.applied(generation).await;
    // The cache holds the whole resource once the generation is applied.
    assert_eq!(inf.cached().len(), NAMES);
    settle().await;
    // Only the objects gained are added; the ones kept are neither listed nor re-added.
    assert_eq!(inf.take_events(), events_of("add", &names_in(&high())));
    let lists = server.lists();
    assert_eq!(lists.len(), 2);
    assert_eq!(
        lists[1].shard_selector,
        Some(high()),
        "only the gained half"
    );
    assert_eq!(lists[1].resource_version, None, "a consistent read");
    let watches = server.watches();
    assert_eq!(watches.len(), 2);
    assert_eq!(watches[1].shard_selector, Some(full()));
    assert_eq!(watches[1].resource_version, watches[0].resource_version);
    assert_eq!(
        inf.informer.shard_filtering(),
        if gate {
            ShardFiltering::Server
        } else {
            ShardFiltering::Client
        }
    );
    inf.stop().await;
}

#[tokio::test(start_paused = true)]
async fn growing_the_scope_adds_only_what_enters_it() {
    grow(true).await;
}

#[tokio::test(start_paused = true)]
async fn growing_the_scope_without_server_filtering() {
    grow(false).await;
}

#[tokio::test(start_paused = true)]
async fn events_racing_a_change_are_applied_once() {
    let server = Server::new(true);
    let scope = ShardScope::new(Some(low()));
    let inf = start(&server, &scope, false).await;
    let kept = names_in(&low());
    let gained = names_in(&high());
    // Between the watch's stop and the list of the gained half, and so delivered again by
    // the watch restarted from where it stopped: a kept object changes, a gained one changes,
    // another gained one is deleted, and a new one is created in each half.
    let (new_low, new_high) = {
        let mut low_name = None;
        let mut high_name = None;
        for i in 0.. {
            let n = format!("new-{i}");
            if in_range(&low(), &n) {
                low_name.get_or_insert(n);
            } else {
                high_name.get_or_insert(n);
            }
            if low_name.is_some() && high_name.is_some() {
                break;
            }
        }
        (low_name.unwrap(), high_name.unwrap())
    };
    {
        let (k, g0, g1, nl, nh) = (
            kept[0].clone(),
            gained[0].clone(),
            gained[1].clone(),
            new_low.clone(),
            new_high.clone(),
        );
        server.lock().before_list.push(Box::new(move |st, server| {
            server.write(st, &k, false);
            server.write(st, &g0, false);
            server.write(st, &g1, true);
            server.write(st, &nl, false);
            server.write(st, &nh, false);
        }));
    }
    let generation = scope.set(Some(full()));
    scope.applied(generation).await;
    settle().await;
    // After the list: a gained object changes again.
    server.put(&gained[0]);
    settle().await;

    let mut want: Vec<String> = gained[2..].iter().map(|n| format!("add {n}")).collect();
    // Listed (its change before the list included), then changed once more.
    want.push(format!("add {}", gained[0]));
    want.push(format!("update {}", gained[0]));
    // Created before the list: listed, and its ADDED from the watch dropped.
    want.push(format!("add {new_high}"));
    // Kept objects' events come from the restarted watch, once.
    want.push(format!("update {}", kept[0]));
    want.push(format!("add {new_low}"));
    assert_eq!(sorted(inf.take_events()), sorted(want));

    let mut all = names();
    all.retain(|n| n != &gained[1]);
    all.extend([new_low, new_high]);
    assert_eq!(inf.cached(), sorted(all));
    // Every cached object is at the server's state.
    {
        let st = server.lock();
        for cm in inf.informer.store().list() {
            let name = cm.metadata.name.as_deref().unwrap();
            assert_eq!(cm.data, st.objects[name].data, "{name}");
        }
    }
    inf.stop().await;
}

#[tokio::test(start_paused = true)]
async fn opaque_resource_versions_relist_the_new_selection() {
    let server = Arc::new(Server {
        gate: true,
        opaque: true,
        state: Mutex::default(),
    });
    let scope = ShardScope::new(Some(low()));
    let inf = start(&server, &scope, false).await;
    let generation = scope.set(Some(high()));
    scope.applied(generation).await;
    settle().await;
    assert_eq!(inf.cached(), names_in(&high()));
    // A list of the gained ranges cannot be ordered against the watch: the whole new
    // selection is listed and replaces the cache (handlers see the low half deleted, the
    // high half added).
    let lists = server.lists();
    assert_eq!(
        lists.len(),
        2,
        "the initial list, then the whole new selection"
    );
    assert_eq!(lists[1].shard_selector, Some(high()));
    let events = sorted(inf.take_events());
    let mut want = events_of("delete", &names_in(&low()));
    want.extend(events_of("add", &names_in(&high())));
    assert_eq!(events, sorted(want));
    inf.stop().await;
}

#[tokio::test(start_paused = true)]
async fn dropping_the_selector_caches_everything() {
    let server = Server::new(true);
    let scope = ShardScope::new(Some(high()));
    let inf = start(&server, &scope, true).await;
    assert_eq!(inf.cached(), names_in(&high()));
    let generation = scope.set(None);
    scope.applied(generation).await;
    settle().await;
    assert_eq!(inf.cached().len(), NAMES);
    assert_eq!(inf.take_events(), events_of("add", &names_in(&low())));
    assert_eq!(server.lists().last().unwrap().shard_selector, Some(low()));
    assert_eq!(server.watches().last().unwrap().shard_selector, None);
    inf.stop().await;
}

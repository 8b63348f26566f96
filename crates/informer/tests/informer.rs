//! Shared informer behaviour, ported from client-go's `shared_informer_test.go` and
//! `controller_test.go` (test names in snake_case), over a scripted API source.
//!
//! Time-dependent tests run on tokio's paused clock: the clock only moves when every task
//! is idle and no handler is running, so "wait a bit, then check nothing else arrived" is
//! deterministic.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::{Pod, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ListMeta, ObjectMeta, Status};
use kctrl_client::{ApiError, Error, ListParams, WatchEvent, WatchParams};
use kctrl_informer::list_watch::EventStream;
use kctrl_informer::{
    DeletedObject, EventHandlerFns, FilteringHandler, HasSynced, InformerError, ListerWatcher,
    ReflectorOptions, ResourceEventHandler, SharedInformer, SharedInformerOptions, Transform,
    wait_for_cache_sync,
};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

// ---------------------------------------------------------------------------------------
// A scripted API source (client-go's FakeControllerSource).

type WatchTx = mpsc::UnboundedSender<Result<WatchEvent<Pod>, Error>>;

#[derive(Default)]
struct SourceState {
    objects: BTreeMap<String, Pod>,
    rv: u64,
    /// Broadcast events, for watches that resume from an older resourceVersion.
    history: Vec<(u64, WatchEvent<Pod>)>,
    /// Watches from before this resourceVersion get 410 Expired.
    compacted: u64,
    watchers: Vec<WatchTx>,
    list_error: Option<String>,
    lists: usize,
}

/// An in-memory resource: changes bump a resourceVersion and go to open watches.
#[derive(Clone, Default)]
struct Source {
    st: Arc<Mutex<SourceState>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn key(p: &Pod) -> String {
    kctrl_informer::key_of(p)
}

enum Change {
    Add,
    Modify,
    Delete,
}

impl Source {
    fn add(&self, p: Pod) {
        self.change(p, Change::Add, true);
    }
    fn modify(&self, p: Pod) {
        self.change(p, Change::Modify, true);
    }
    fn delete(&self, p: Pod) {
        self.change(p, Change::Delete, true);
    }
    /// Changes the state without telling open watches: seen only by a relist.
    fn add_drop_watch(&self, p: Pod) {
        self.change(p, Change::Add, false);
    }
    fn modify_drop_watch(&self, p: Pod) {
        self.change(p, Change::Modify, false);
    }

    fn change(&self, mut p: Pod, change: Change, broadcast: bool) {
        let mut st = lock(&self.st);
        st.rv += 1;
        let rv = st.rv;
        p.metadata.resource_version = Some(rv.to_string());
        let k = key(&p);
        let event = match change {
            Change::Add => {
                st.objects.insert(k, p.clone());
                WatchEvent::Added(p)
            }
            Change::Modify => {
                st.objects.insert(k, p.clone());
                WatchEvent::Modified(p)
            }
            Change::Delete => {
                st.objects.remove(&k);
                WatchEvent::Deleted(p)
            }
        };
        if broadcast {
            st.watchers.retain(|w| w.send(Ok(event.clone())).is_ok());
            st.history.push((rv, event));
        }
    }

    /// Ends every watch and forgets the history, so the reflector must relist
    /// (a connection loss followed by compaction).
    fn reset_watch(&self) {
        let mut st = lock(&self.st);
        st.watchers.clear();
        st.compacted = st.rv;
        st.history.clear();
    }

    fn set_list_error(&self, msg: &str) {
        lock(&self.st).list_error = Some(msg.to_owned());
    }

    fn lists(&self) -> usize {
        lock(&self.st).lists
    }
}

fn expired() -> Error {
    Error::Api(Box::new(ApiError::from_status(
        410,
        Status {
            code: Some(410),
            reason: Some("Expired".to_owned()),
            message: Some("too old resource version".to_owned()),
            ..Default::default()
        },
    )))
}

impl ListerWatcher<Pod> for Source {
    fn list(&self, _: &ListParams) -> BoxFuture<'_, Result<k8s_openapi::List<Pod>, Error>> {
        let mut st = lock(&self.st);
        st.lists += 1;
        let result = match &st.list_error {
            Some(msg) => Err(Error::InvalidRequest(msg.clone())),
            None => Ok(k8s_openapi::List {
                items: st.objects.values().cloned().collect(),
                metadata: ListMeta {
                    resource_version: Some(st.rv.to_string()),
                    ..Default::default()
                },
            }),
        };
        futures::future::ready(result).boxed()
    }

    fn watch(&self, params: &WatchParams) -> BoxFuture<'_, Result<EventStream<Pod>, Error>> {
        let mut st = lock(&self.st);
        let from: u64 = params
            .resource_version
            .as_deref()
            .and_then(|rv| rv.parse().ok())
            .unwrap_or(0);
        if from < st.compacted {
            return futures::future::ready(Err(expired())).boxed();
        }
        let (tx, rx) = mpsc::unbounded_channel();
        if from == 0 {
            for p in st.objects.values() {
                let _ = tx.send(Ok(WatchEvent::Added(p.clone())));
            }
        } else {
            for (_, e) in st.history.iter().filter(|(rv, _)| *rv > from) {
                let _ = tx.send(Ok(e.clone()));
            }
        }
        st.watchers.push(tx);
        let stream =
            futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|e| (e, rx)) });
        futures::future::ready(Ok(Box::pin(stream) as EventStream<Pod>)).boxed()
    }
}

// ---------------------------------------------------------------------------------------
// Helpers.

fn pod(name: &str) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            ..Default::default()
        },
        ..Default::default()
    }
}

fn labelled(name: &str, labels: &[(&str, &str)]) -> Pod {
    let mut p = pod(name);
    p.metadata.labels = Some(
        labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
    );
    p
}

fn name(p: &Pod) -> String {
    p.metadata.name.clone().unwrap_or_default()
}

fn options(resync: Duration) -> SharedInformerOptions<Pod> {
    SharedInformerOptions {
        resync_period: resync,
        reflector: ReflectorOptions {
            use_watch_list: false,
            ..Default::default()
        },
        ..Default::default()
    }
}

fn informer(source: &Source, resync: Duration) -> SharedInformer<Pod> {
    SharedInformer::new(source.clone(), options(resync))
}

const SECOND: Duration = Duration::from_secs(1);

/// Lets every task and handler finish what is pending (the paused clock only moves when
/// everything is idle).
async fn settle() {
    tokio::time::sleep(Duration::from_millis(10)).await;
}

/// client-go's `testListener`: records the names of added and updated objects, and every
/// event as `verb:name`.
#[derive(Default)]
struct TestListener {
    names: Mutex<Vec<String>>,
    events: Mutex<Vec<String>>,
    changed: watch::Sender<usize>,
}

impl TestListener {
    fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    fn record(&self, verb: &str, obj: &Pod, named: bool) {
        if named {
            lock(&self.names).push(name(obj));
        }
        lock(&self.events).push(format!("{verb}:{}", name(obj)));
        self.changed.send_modify(|n| *n += 1);
    }

    fn names(&self) -> BTreeSet<String> {
        lock(&self.names).iter().cloned().collect()
    }

    fn events(&self) -> Vec<String> {
        lock(&self.events).clone()
    }

    /// Events sorted (a resync delivers the cache in no particular order).
    fn sorted_events(&self) -> Vec<String> {
        let mut e = self.events();
        e.sort();
        e
    }

    fn reset(&self) {
        lock(&self.names).clear();
        lock(&self.events).clear();
    }

    /// Waits until the set of received names is `expected`, then makes sure nothing else
    /// arrives (client-go's `ok()`).
    async fn expect(&self, who: &str, expected: &[&str]) {
        let expected: BTreeSet<String> = expected.iter().map(|s| (*s).to_owned()).collect();
        self.wait_until(who, |l| l.names() == expected).await;
        settle().await;
        assert_eq!(self.names(), expected, "{who}: stragglers arrived");
    }

    async fn wait_until(&self, who: &str, cond: impl Fn(&Self) -> bool) {
        let mut rx = self.changed.subscribe();
        let reached = tokio::time::timeout(Duration::from_secs(60), async {
            while !cond(self) {
                rx.changed().await.expect("sender alive");
            }
        })
        .await;
        assert!(
            reached.is_ok(),
            "{who}: condition not reached; got names {:?}, events {:?}",
            self.names(),
            self.events()
        );
    }
}

impl ResourceEventHandler<Pod> for TestListener {
    fn on_add(&self, obj: &Arc<Pod>, _: bool) {
        self.record("add", obj, true);
    }
    fn on_update(&self, _: &Arc<Pod>, new: &Arc<Pod>) {
        self.record("update", new, true);
    }
    fn on_delete(&self, obj: &DeletedObject<Pod>) {
        self.record("delete", obj.object(), false);
    }
}

/// Runs an informer until dropped, then waits for it to stop.
struct Running {
    cancel: CancellationToken,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Running {
    fn start(informer: &SharedInformer<Pod>) -> Self {
        let cancel = CancellationToken::new();
        let task = Some(informer.start(cancel.clone()));
        Self { cancel, task }
    }

    async fn stop(mut self) {
        self.cancel.cancel();
        if let Some(t) = self.task.take() {
            t.await.expect("informer task");
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

async fn synced(informer: &SharedInformer<Pod>) {
    let cancel = CancellationToken::new();
    let ok = tokio::time::timeout(
        Duration::from_secs(60),
        wait_for_cache_sync("test", &cancel, &[informer]),
    )
    .await;
    assert_eq!(ok.ok(), Some(true), "informer did not sync");
}

// ---------------------------------------------------------------------------------------
// shared_informer_test.go

fn label_keys(p: &Pod) -> Vec<String> {
    p.metadata
        .labels
        .iter()
        .flat_map(|l| l.keys().cloned())
        .collect()
}

fn sorted_names(pods: Vec<Arc<Pod>>) -> Vec<String> {
    let mut v: Vec<_> = pods.iter().map(|p| name(p)).collect();
    v.sort();
    v
}

#[tokio::test(start_paused = true)]
async fn test_indexer() {
    let source = Source::default();
    source.add(labelled("pod1", &[("a", "a-val"), ("b", "b-val1")]));
    source.add(labelled("pod2", &[("b", "b-val2")]));
    let informer = informer(&source, SECOND);
    informer
        .add_indexers([("labels".to_owned(), Arc::new(label_keys) as _)])
        .unwrap();
    let running = Running::start(&informer);
    synced(&informer).await;

    let by = |index: &str| sorted_names(informer.store().by_index(index, "a").unwrap());
    assert_eq!(by("labels"), ["pod1"]);

    // Adding an item later is fine as well.
    source.add(labelled("pod3", &[("a", "a-val2")]));
    settle().await;
    assert_eq!(by("labels"), ["pod1", "pod3"]);

    // Adding an index later is also fine, and immediately available.
    informer
        .add_indexers([("labels-again".to_owned(), Arc::new(label_keys) as _)])
        .unwrap();
    assert_eq!(by("labels-again"), ["pod1", "pod3"]);
    for index in ["labels", "labels-again"] {
        assert_eq!(
            informer.store().list_index_func_values(index).unwrap(),
            ["a", "b"]
        );
    }
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn test_listener_resync_periods() {
    let start = Instant::now();
    let source = Source::default();
    source.add(pod("pod1"));
    source.add(pod("pod2"));
    let informer = informer(&source, SECOND);

    let listener1 = TestListener::new(); // never resyncs
    let listener2 = TestListener::new(); // every 2 s
    let listener3 = TestListener::new(); // every 3 s
    informer
        .add_event_handler_with_resync(listener1.clone(), Duration::ZERO)
        .unwrap();
    informer
        .add_event_handler_with_resync(listener2.clone(), 2 * SECOND)
        .unwrap();
    informer
        .add_event_handler_with_resync(listener3.clone(), 3 * SECOND)
        .unwrap();
    let listeners = [&listener1, &listener2, &listener3];
    let running = Running::start(&informer);

    // Every listener gets the initial list at the start time.
    settle().await;
    for (i, l) in listeners.iter().enumerate() {
        assert_eq!(
            l.names(),
            ["pod1", "pod2"].map(String::from).into(),
            "listener{}",
            i + 1
        );
        l.reset();
    }

    // At 2 s only listener2 resyncs.
    tokio::time::sleep_until(start + 2 * SECOND + Duration::from_millis(100)).await;
    assert_eq!(listener2.sorted_events(), ["update:pod1", "update:pod2"]);
    assert!(listener1.events().is_empty(), "listener1 should not resync");
    assert!(
        listener3.events().is_empty(),
        "listener3 should not resync yet"
    );
    for l in listeners {
        l.reset();
    }

    // At 3 s only listener3 resyncs.
    tokio::time::sleep_until(start + 3 * SECOND + Duration::from_millis(100)).await;
    assert_eq!(listener3.sorted_events(), ["update:pod1", "update:pod2"]);
    assert!(listener1.events().is_empty(), "listener1 should not resync");
    assert!(
        listener2.events().is_empty(),
        "listener2 resyncs again only at 4 s"
    );
    running.stop().await;
}

#[tokio::test]
async fn test_resync_check_period() {
    let source = Source::default();
    let informer = informer(&source, 12 * 3600 * SECOND);
    let minute = 60 * SECOND;

    let h1 = informer
        .add_event_handler_with_resync(TestListener::new(), Duration::ZERO)
        .unwrap();
    assert_eq!(informer.resync_check_period(), 12 * 3600 * SECOND);
    assert_eq!(h1.resync_period(), Duration::ZERO);

    let h2 = informer
        .add_event_handler_with_resync(TestListener::new(), minute)
        .unwrap();
    assert_eq!(informer.resync_check_period(), minute);
    assert_eq!(h1.resync_period(), Duration::ZERO);
    assert_eq!(h2.resync_period(), minute);

    let h3 = informer
        .add_event_handler_with_resync(TestListener::new(), 55 * SECOND)
        .unwrap();
    assert_eq!(informer.resync_check_period(), 55 * SECOND);
    assert_eq!(h1.resync_period(), Duration::ZERO);
    assert_eq!(h2.resync_period(), minute);
    assert_eq!(h3.resync_period(), 55 * SECOND);

    let h4 = informer
        .add_event_handler_with_resync(TestListener::new(), 5 * SECOND)
        .unwrap();
    assert_eq!(informer.resync_check_period(), 5 * SECOND);
    assert_eq!(h1.resync_period(), Duration::ZERO);
    assert_eq!(h2.resync_period(), minute);
    assert_eq!(h3.resync_period(), 55 * SECOND);
    assert_eq!(h4.resync_period(), 5 * SECOND);

    // Below the 1 s minimum: raised to 1 s.
    let h5 = informer
        .add_event_handler_with_resync(TestListener::new(), Duration::from_millis(10))
        .unwrap();
    assert_eq!(h5.resync_period(), SECOND);
    assert_eq!(informer.resync_check_period(), SECOND);
}

#[tokio::test(start_paused = true)]
async fn resync_period_after_start_is_raised_to_the_check_period() {
    let source = Source::default();
    let informer = informer(&source, 10 * SECOND);
    let running = Running::start(&informer);
    synced(&informer).await;
    let h = informer
        .add_event_handler_with_resync(TestListener::new(), 2 * SECOND)
        .unwrap();
    assert_eq!(h.resync_period(), 10 * SECOND);
    assert_eq!(informer.resync_check_period(), 10 * SECOND);
    running.stop().await;

    // An informer created with zero never resyncs, whatever handlers ask for.
    let informer = self::informer(&source, Duration::ZERO);
    let h = informer
        .add_event_handler_with_resync(TestListener::new(), 5 * SECOND)
        .unwrap();
    assert_eq!(h.resync_period(), Duration::ZERO);
}

/// Adding a handler concurrently with `run` must neither deadlock nor lose the handler.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_shared_informer_initialization_race() {
    for _ in 0..20 {
        let source = Source::default();
        source.add(pod("pod1"));
        let informer = informer(&source, SECOND);
        let listener = TestListener::new();
        let adder = {
            let informer = informer.clone();
            let listener = listener.clone();
            std::thread::spawn(move || informer.add_event_handler(listener).unwrap())
        };
        let running = Running::start(&informer);
        let reg = adder.join().unwrap();
        assert!(
            tokio::time::timeout(Duration::from_secs(10), reg.synced())
                .await
                .unwrap()
        );
        assert_eq!(listener.events(), ["add:pod1"]);
        running.stop().await;
    }
}

/// A watch that is lost while objects change: after the relist, a handler without resync
/// sees only what changed; a resyncing one also sees the unchanged object.
#[tokio::test(start_paused = true)]
async fn test_shared_informer_watch_disruption() {
    let start = Instant::now();
    let source = Source::default();
    source.add(pod("pod1"));
    source.add(pod("pod2"));
    let informer = informer(&source, SECOND);
    let no_resync = TestListener::new();
    let resync = TestListener::new();
    informer
        .add_event_handler_with_resync(no_resync.clone(), Duration::ZERO)
        .unwrap();
    informer
        .add_event_handler_with_resync(resync.clone(), SECOND)
        .unwrap();
    let running = Running::start(&informer);
    no_resync.expect("no_resync", &["pod1", "pod2"]).await;
    resync.expect("resync", &["pod1", "pod2"]).await;

    // Add pod3 and bump pod2 without telling the watch: only a relist sees them.
    let pod2 = lock(&source.st).objects["pod2"].clone();
    source.add_drop_watch(pod("pod3"));
    source.modify_drop_watch(pod2);
    no_resync.expect("no_resync", &["pod1", "pod2"]).await;
    resync.expect("resync", &["pod1", "pod2"]).await;
    no_resync.reset();
    resync.reset();

    // The resync at 1 s marks `resync` as resyncing and `no_resync` as not.
    tokio::time::sleep_until(start + SECOND + Duration::from_millis(100)).await;
    assert!(no_resync.events().is_empty());
    assert_eq!(resync.sorted_events(), ["update:pod1", "update:pod2"]);
    let lists = source.lists();

    // Lose the watch; the reflector relists.
    source.reset_watch();
    no_resync
        .wait_until("no_resync", |l| l.names().contains("pod3"))
        .await;
    assert!(source.lists() > lists, "the reflector relisted");
    no_resync.expect("no_resync", &["pod2", "pod3"]).await;
    resync.expect("resync", &["pod1", "pod2", "pod3"]).await;
    assert_eq!(
        no_resync.events(),
        ["update:pod2", "add:pod3"],
        "the unchanged pod1 is not re-delivered to a handler that does not resync"
    );
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn test_shared_informer_error_handling() {
    let source = Source::default();
    source.add(pod("pod1"));
    source.set_list_error("Access Denied");
    let informer = informer(&source, SECOND);
    let (tx, mut rx) = mpsc::unbounded_channel();
    informer
        .set_watch_error_handler(move |e| {
            let _ = tx.send(e.to_string());
        })
        .unwrap();
    let running = Running::start(&informer);
    let err = tokio::time::timeout(SECOND, rx.recv())
        .await
        .expect("the error handler was called")
        .unwrap();
    assert!(err.contains("Access Denied"), "{err}");
    assert!(!informer.has_synced());
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn test_shared_informer_transformer() {
    let source = Source::default();
    source.add(pod("pod1"));
    source.add(pod("pod2"));
    let informer = informer(&source, SECOND);
    let upper: Transform<Pod> = Arc::new(|mut p: Pod| {
        p.metadata.name = p.metadata.name.map(|n| n.to_uppercase());
        p
    });
    informer.set_transform(upper).unwrap();
    let listener = TestListener::new();
    informer.add_event_handler(listener.clone()).unwrap();
    let running = Running::start(&informer);
    listener.expect("transformer", &["POD1", "POD2"]).await;
    running.stop().await;
}

#[tokio::test]
async fn test_shared_informer_remove_handler() {
    let source = Source::default();
    source.add(pod("pod1"));
    let informer = informer(&source, SECOND);
    let h1 = informer.add_event_handler(EventHandlerFns::new()).unwrap();
    let h2 = informer.add_event_handler(EventHandlerFns::new()).unwrap();
    assert_eq!(informer.handler_count(), 2);
    assert!(informer.remove_event_handler(&h2));
    assert_eq!(informer.handler_count(), 1);
    assert!(informer.remove_event_handler(&h1));
    assert_eq!(informer.handler_count(), 0);
}

#[tokio::test]
async fn test_shared_informer_remove_foreign_handler() {
    let source = Source::default();
    source.add(pod("pod1"));
    let informer = informer(&source, SECOND);
    let informer2 = self::informer(&Source::default(), SECOND);
    let h1 = informer.add_event_handler(EventHandlerFns::new()).unwrap();
    let h2 = informer.add_event_handler(EventHandlerFns::new()).unwrap();
    assert_eq!(
        (informer.handler_count(), informer2.handler_count()),
        (2, 0)
    );

    assert!(!informer2.is_registered(&h1));
    assert!(!informer2.is_registered(&h2));
    assert!(
        !informer2.remove_event_handler(&h1),
        "foreign handle: no-op"
    );
    assert_eq!(
        (informer.handler_count(), informer2.handler_count()),
        (2, 0)
    );
    assert!(informer.is_registered(&h1));
    assert!(informer.is_registered(&h2));

    assert!(informer.remove_event_handler(&h2));
    assert_eq!(informer.handler_count(), 1);
    assert!(informer.remove_event_handler(&h1));
    assert_eq!(informer.handler_count(), 0);
}

#[tokio::test]
async fn test_shared_informer_multiple_registration() {
    let source = Source::default();
    source.add(pod("pod1"));
    let informer = informer(&source, SECOND);
    let handler = Arc::new(EventHandlerFns::<Pod>::new());
    let reg1 = informer.add_event_handler(handler.clone()).unwrap();
    assert!(informer.is_registered(&reg1));
    let reg2 = informer.add_event_handler(handler).unwrap();
    assert!(informer.is_registered(&reg2));
    assert_eq!(informer.handler_count(), 2);

    assert!(informer.remove_event_handler(&reg1));
    assert!(!informer.is_registered(&reg1));
    assert!(
        informer.is_registered(&reg2),
        "removing one registration keeps the other"
    );
    assert_eq!(informer.handler_count(), 1);

    assert!(informer.remove_event_handler(&reg2));
    assert!(!informer.is_registered(&reg2));
    assert_eq!(informer.handler_count(), 0);
}

#[tokio::test]
async fn test_removing_removed_shared_informer() {
    let source = Source::default();
    let informer = informer(&source, SECOND);
    let reg = informer.add_event_handler(EventHandlerFns::new()).unwrap();
    assert!(informer.remove_event_handler(&reg));
    assert!(!informer.is_registered(&reg));
    assert!(
        !informer.remove_event_handler(&reg),
        "second removal is a no-op"
    );
    assert!(!informer.is_registered(&reg));
}

#[tokio::test(start_paused = true)]
async fn test_state_shared_informer() {
    let source = Source::default();
    source.add(pod("pod1"));
    let informer = informer(&source, SECOND);
    let listener = TestListener::new();
    informer
        .add_event_handler_with_resync(listener.clone(), Duration::ZERO)
        .unwrap();
    assert!(!informer.has_started());
    assert!(!informer.is_stopped());

    let running = Running::start(&informer);
    listener.expect("listener", &["pod1"]).await;
    assert!(informer.has_started());
    assert!(!informer.is_stopped());

    running.stop().await;
    assert!(informer.is_stopped());
    assert!(informer.has_started());

    // Running again is a no-op.
    tokio::time::timeout(SECOND, informer.run(CancellationToken::new()))
        .await
        .expect("a second run returns at once");
}

#[tokio::test(start_paused = true)]
async fn test_add_on_stopped_shared_informer() {
    let source = Source::default();
    source.add(pod("pod1"));
    let informer = informer(&source, SECOND);
    Running::start(&informer).stop().await;
    assert!(informer.is_stopped());
    let err = informer
        .add_event_handler_with_resync(TestListener::new(), Duration::ZERO)
        .unwrap_err();
    assert!(matches!(err, InformerError::Stopped { .. }));
    assert!(
        err.to_string()
            .ends_with("was not added to shared informer because it has stopped already"),
        "{err}"
    );
}

#[tokio::test(start_paused = true)]
async fn test_remove_on_stopped_shared_informer() {
    let source = Source::default();
    source.add(pod("pod1"));
    let informer = informer(&source, SECOND);
    let reg = informer
        .add_event_handler_with_resync(TestListener::new(), Duration::ZERO)
        .unwrap();
    Running::start(&informer).stop().await;
    assert!(informer.is_stopped());
    // Handlers are released on stop; removing is a harmless no-op.
    informer.remove_event_handler(&reg);
    assert!(!informer.is_registered(&reg));
}

#[tokio::test(start_paused = true)]
async fn test_remove_while_active() {
    let source = Source::default();
    let informer = informer(&source, Duration::ZERO);
    let listener = TestListener::new();
    let reg = informer.add_event_handler(listener.clone()).unwrap();
    let running = Running::start(&informer);
    source.add(pod("pod1"));
    listener.expect("listener", &["pod1"]).await;

    informer.remove_event_handler(&reg);
    assert!(!informer.is_registered(&reg));
    source.add(pod("pod2"));
    listener.expect("listener", &["pod1"]).await;
    running.stop().await;
}

/// A gate handlers wait at while it is closed.
struct Gate {
    open: Mutex<bool>,
    cv: std::sync::Condvar,
}

impl Gate {
    fn new(open: bool) -> Arc<Self> {
        Arc::new(Self {
            open: Mutex::new(open),
            cv: std::sync::Condvar::new(),
        })
    }
    fn set(&self, open: bool) {
        *lock(&self.open) = open;
        self.cv.notify_all();
    }
    fn pass(&self) {
        let mut open = lock(&self.open);
        while !*open {
            open = self.cv.wait(open).unwrap_or_else(|p| p.into_inner());
        }
    }
}

#[tokio::test(start_paused = true)]
async fn test_add_while_active() {
    let source = Source::default();
    let informer = informer(&source, Duration::ZERO);
    let listener1 = TestListener::new();
    let handle1 = informer.add_event_handler(listener1.clone()).unwrap();
    assert!(!handle1.has_synced(), "synced before run");

    let running = Running::start(&informer);
    source.add(pod("pod1"));
    listener1.expect("listener1", &["pod1"]).await;
    assert!(
        tokio::time::timeout(SECOND, handle1.synced())
            .await
            .unwrap()
    );
    assert!(handle1.has_synced());

    // listener2 blocks in its handler until the gate opens: observe it before it syncs.
    let gate = Gate::new(true);
    let listener2 = TestListener::new();
    let handler2 = {
        let (gate, listener2) = (gate.clone(), listener2.clone());
        EventHandlerFns::new().on_add(move |obj, initial| {
            gate.pass();
            listener2.record(if initial { "initial" } else { "add" }, obj, true);
        })
    };
    gate.set(false);
    let handle2 = informer.add_event_handler(handler2).unwrap();
    assert!(!handle2.has_synced(), "synced before processing anything");
    gate.set(true);

    source.add(pod("pod2"));
    listener2.expect("listener2", &["pod1", "pod2"]).await;
    assert_eq!(listener2.events(), ["initial:pod1", "add:pod2"]);
    assert!(handle2.has_synced(), "not synced even after processing");
    assert!(informer.is_registered(&handle1));
    assert!(informer.is_registered(&handle2));
    listener1.expect("listener1", &["pod1", "pod2"]).await;
    running.stop().await;
}

/// A late handler joining while events flow sees every object exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn late_handler_misses_and_repeats_nothing() {
    let source = Source::default();
    let informer = informer(&source, Duration::ZERO);
    let running = Running::start(&informer);
    synced(&informer).await;
    let producer = {
        let source = source.clone();
        std::thread::spawn(move || {
            for i in 0..2000 {
                source.add(pod(&format!("pod{i}")));
            }
        })
    };
    let late = TestListener::new();
    let reg = informer.add_event_handler(late.clone()).unwrap();
    producer.join().unwrap();
    late.wait_until("late", |l| l.events().len() >= 2000).await;
    settle().await;
    let events = late.events();
    assert_eq!(events.len(), 2000, "no duplicates");
    assert_eq!(late.names().len(), 2000, "no losses");
    assert!(reg.has_synced());
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn test_event_panics() {
    let source = Source::default();
    let num_pods = 5;
    for i in 1..=num_pods {
        source.add(pod(&format!("pod{i}")));
    }
    let informer = informer(&source, SECOND);
    let calls = Arc::new(AtomicUsize::new(0));
    let panicking = |calls: Arc<AtomicUsize>| {
        EventHandlerFns::<Pod>::new().on_add(move |_, _| {
            calls.fetch_add(1, Ordering::SeqCst);
            panic!("fake panic");
        })
    };
    let h1 = informer
        .add_event_handler(panicking(calls.clone()))
        .unwrap();
    let h2 = informer
        .add_event_handler(panicking(calls.clone()))
        .unwrap();
    let healthy = TestListener::new();
    informer.add_event_handler(healthy.clone()).unwrap();
    let running = Running::start(&informer);
    synced(&informer).await;

    // Every notification reached both panicking handlers; they count as synced (the
    // handler was called), unlike client-go where a panic on the initial list blocks it.
    let cancel = CancellationToken::new();
    assert!(wait_for_cache_sync("panics", &cancel, &[&h1, &h2]).await);
    assert_eq!(calls.load(Ordering::SeqCst), 2 * num_pods);

    // The informer keeps working.
    source.add(pod("pod6"));
    healthy
        .expect("healthy", &["pod1", "pod2", "pod3", "pod4", "pod5", "pod6"])
        .await;
    assert_eq!(calls.load(Ordering::SeqCst), 2 * num_pods + 2);
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn slow_handler_does_not_stall_others() {
    let source = Source::default();
    let informer = informer(&source, Duration::ZERO);
    let gate = Gate::new(true);
    let slow = TestListener::new();
    let handler = {
        let (gate, slow) = (gate.clone(), slow.clone());
        EventHandlerFns::new().on_add(move |obj, _| {
            gate.pass();
            slow.record("add", obj, true);
        })
    };
    informer.add_event_handler(handler).unwrap();
    let fast = TestListener::new();
    informer.add_event_handler(fast.clone()).unwrap();
    let running = Running::start(&informer);
    synced(&informer).await;

    gate.set(false);
    for i in 0..100 {
        source.add(pod(&format!("pod{i}")));
    }
    fast.wait_until("fast", |l| l.events().len() == 100).await;
    assert!(slow.events().is_empty(), "the slow handler is still stuck");
    gate.set(true);
    slow.wait_until("slow", |l| l.events().len() == 100).await;
    let expected: Vec<String> = (0..100).map(|i| format!("add:pod{i}")).collect();
    assert_eq!(slow.events(), expected, "in order, none lost");
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn registration_synced_waits_for_its_initial_list() {
    let source = Source::default();
    for i in 0..10 {
        source.add(pod(&format!("pod{i}")));
    }
    let informer = informer(&source, Duration::ZERO);
    let gate = Gate::new(true);
    let handler = {
        let gate = gate.clone();
        EventHandlerFns::<Pod>::new().on_add(move |_, _| gate.pass())
    };
    let reg = informer.add_event_handler(handler).unwrap();
    gate.set(false);
    let running = Running::start(&informer);
    synced(&informer).await;
    assert!(informer.has_synced());
    assert!(
        !reg.has_synced(),
        "the handler has not received its initial list yet"
    );
    gate.set(true);
    assert!(tokio::time::timeout(SECOND, reg.synced()).await.unwrap());
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn wait_for_cache_sync_returns_false_on_cancel() {
    let source = Source::default();
    source.set_list_error("nope");
    let informer = informer(&source, Duration::ZERO);
    let running = Running::start(&informer);
    let cancel = CancellationToken::new();
    let waiter = {
        let (cancel, informer) = (cancel.clone(), informer.clone());
        tokio::spawn(async move { wait_for_cache_sync("x", &cancel, &[&informer]).await })
    };
    tokio::time::sleep(5 * SECOND).await;
    assert!(!waiter.is_finished());
    cancel.cancel();
    assert!(!waiter.await.unwrap());
    assert!(!HasSynced::has_synced(&informer));
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn filtering_handler_translates_updates() {
    let source = Source::default();
    let informer = informer(&source, Duration::ZERO);
    let inner = TestListener::new();
    let is_web = |p: &Pod| {
        p.metadata
            .labels
            .as_ref()
            .is_some_and(|l| l.get("app").is_some_and(|v| v == "web"))
    };
    informer
        .add_event_handler(FilteringHandler::new(is_web, inner.clone()))
        .unwrap();
    let running = Running::start(&informer);
    synced(&informer).await;
    source.add(pod("a")); // filtered out
    source.modify(labelled("a", &[("app", "web")])); // enters → add
    source.modify(labelled("a", &[("app", "web"), ("x", "y")])); // stays → update
    source.modify(pod("a")); // leaves → delete
    source.modify(labelled("a", &[("app", "db")])); // still out → nothing
    settle().await;
    assert_eq!(inner.events(), ["add:a", "update:a", "delete:a"]);
    running.stop().await;
}

// ---------------------------------------------------------------------------------------
// controller_test.go

/// Many concurrent writers; the informer ends up with the source's state, and every key's
/// event sequence is consistent (no update or delete before an add).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_hammer_controller() {
    let source = Source::default();
    let informer = informer(&source, Duration::from_millis(100));
    let history: Arc<Mutex<BTreeMap<String, Vec<&'static str>>>> = Arc::default();
    let record = |verb: &'static str| {
        let history = history.clone();
        move |p: &Pod| lock(&history).entry(key(p)).or_default().push(verb)
    };
    let (add, update, delete) = (record("add"), record("update"), record("delete"));
    informer
        .add_event_handler(
            EventHandlerFns::new()
                .on_add(move |p, _| add(p))
                .on_update(move |_, p| update(p))
                .on_delete(move |d| delete(d.object())),
        )
        .unwrap();
    assert!(!informer.has_synced());
    let running = Running::start(&informer);
    synced(&informer).await;

    let writers: Vec<_> = (0..3)
        .map(|t| {
            let source = source.clone();
            std::thread::spawn(move || {
                let mut current: Vec<String> = Vec::new();
                for i in 0..100 {
                    if current.is_empty() || fastrand::u8(0..3) == 1 {
                        let name = format!("t{t}-{i}");
                        current.push(name.clone());
                        source.add(pod(&name));
                        continue;
                    }
                    let idx = fastrand::usize(..current.len());
                    if fastrand::bool() {
                        source.modify(pod(&current[idx]));
                    } else {
                        source.delete(pod(&current.swap_remove(idx)));
                    }
                }
            })
        })
        .collect();
    for w in writers {
        w.join().unwrap();
    }
    let want: BTreeSet<String> = lock(&source.st).objects.keys().cloned().collect();
    // Handlers run after the store is written, so wait for both views to converge before
    // stopping: stopping drops notifications still queued for a listener.
    let handler_view = || -> BTreeSet<String> {
        lock(&history)
            .iter()
            .filter(|(_, events)| events.last().is_some_and(|e| *e != "delete"))
            .map(|(k, _)| k.clone())
            .collect()
    };
    let reached = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            let have: BTreeSet<String> = informer.store().list_keys().into_iter().collect();
            if have == want && handler_view() == want {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert!(
        reached.is_ok(),
        "store or handlers did not converge to the source"
    );
    running.stop().await;

    for (key, events) in lock(&history).iter() {
        let mut present = false;
        for e in events {
            match *e {
                "add" => {
                    assert!(!present, "{key}: add while present: {events:?}");
                    present = true;
                }
                "update" => assert!(present, "{key}: update while absent: {events:?}"),
                "delete" => {
                    assert!(present, "{key}: delete while absent: {events:?}");
                    present = false;
                }
                _ => unreachable!(),
            }
        }
        assert_eq!(present, want.contains(key), "{key}: {events:?}");
    }
}

/// Handlers see only allowed transitions, and deleting from a handler works.
#[tokio::test(start_paused = true)]
async fn test_update() {
    let source = Source::default();
    let informer = informer(&source, Duration::ZERO);
    let check = |p: &Pod| {
        p.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("check").cloned())
            .unwrap_or_default()
    };
    let is_final = |p: &Pod| {
        p.metadata
            .labels
            .as_ref()
            .is_some_and(|l| l.contains_key("final"))
    };
    let bad = Arc::new(Mutex::new(Vec::<String>::new()));
    let deleted = TestListener::new();
    let handler = {
        let (source, bad, deleted) = (source.clone(), bad.clone(), deleted.clone());
        EventHandlerFns::<Pod>::new()
            .on_update(move |old, new| {
                let pair = (check(old), check(new));
                let allowed = matches!(
                    (pair.0.as_str(), pair.1.as_str()),
                    ("from", "to") | ("to", "to") | ("from", "from")
                );
                if !allowed {
                    lock(&bad).push(format!("{} {pair:?}", name(new)));
                }
                if is_final(new) {
                    source.delete((**new).clone());
                }
            })
            .on_delete(move |d| deleted.record("delete", d.object(), true))
    };
    informer.add_event_handler(handler).unwrap();
    let running = Running::start(&informer);
    synced(&informer).await;

    let writers: Vec<_> = (0..3)
        .map(|i| {
            let source = source.clone();
            tokio::spawn(async move {
                let name = format!("a-{i}");
                source.add(labelled(&name, &[("check", "from")]));
                source.modify(labelled(&name, &[("check", "to"), ("final", "true")]));
            })
        })
        .collect();
    for w in writers {
        w.await.unwrap();
    }
    deleted.expect("deletes", &["a-0", "a-1", "a-2"]).await;
    assert!(lock(&bad).is_empty(), "bad transitions: {:?}", lock(&bad));
    running.stop().await;
}

/// The transform applies before objects are cached and before handlers see them.
#[tokio::test(start_paused = true)]
async fn test_transforming_informer() {
    let make = |name: &str, generation: &str| {
        let mut p = labelled(name, &[("generation", generation)]);
        p.metadata.namespace = Some("namespace".to_owned());
        p.spec = Some(PodSpec {
            hostname: Some("hostname".to_owned()),
            subdomain: Some("subdomain".to_owned()),
            ..Default::default()
        });
        p
    };
    let expected = |name: &str, generation: &str| {
        let mut p = make(name, generation);
        let spec = p.spec.as_mut().unwrap();
        spec.hostname = Some("new-hostname".to_owned());
        spec.subdomain = None;
        spec.node_name = Some("nodename".to_owned());
        p
    };
    let transform: Transform<Pod> = Arc::new(|mut p: Pod| {
        let spec = p.spec.get_or_insert_with(Default::default);
        spec.hostname = Some("new-hostname".to_owned());
        spec.subdomain = None;
        spec.node_name = Some("nodename".to_owned());
        p.metadata.resource_version = None; // simplifies comparisons
        p
    });

    let source = Source::default();
    source.add(make("pod1", "1"));
    source.modify(make("pod1", "2"));
    let informer = SharedInformer::new(
        source.clone(),
        SharedInformerOptions {
            transform: Some(transform),
            ..options(Duration::ZERO)
        },
    );
    type Event = (&'static str, Option<Pod>, Option<Pod>);
    let (tx, mut rx) = mpsc::unbounded_channel::<Event>();
    let (t1, t2, t3) = (tx.clone(), tx.clone(), tx);
    informer
        .add_event_handler(
            EventHandlerFns::new()
                .on_add(move |p: &Arc<Pod>, _| {
                    let _ = t1.send(("add", None, Some((**p).clone())));
                })
                .on_update(move |o, n| {
                    let _ = t2.send(("update", Some((**o).clone()), Some((**n).clone())));
                })
                .on_delete(move |d| {
                    let _ = t3.send(("delete", Some((**d.object()).clone()), None));
                }),
        )
        .unwrap();
    let mut next = async || {
        tokio::time::timeout(Duration::from_secs(30), rx.recv())
            .await
            .expect("an event")
            .unwrap()
    };
    let verify_store = |want: Vec<Pod>| {
        let mut have: Vec<Pod> = informer
            .store()
            .list()
            .iter()
            .map(|p| (**p).clone())
            .collect();
        have.sort_by_key(key);
        assert_eq!(have, want);
    };
    let running = Running::start(&informer);

    assert_eq!(next().await, ("add", None, Some(expected("pod1", "2"))));
    verify_store(vec![expected("pod1", "2")]);

    source.add(make("pod2", "1"));
    assert_eq!(next().await, ("add", None, Some(expected("pod2", "1"))));
    verify_store(vec![expected("pod1", "2"), expected("pod2", "1")]);

    source.add(make("pod3", "1"));
    assert_eq!(next().await, ("add", None, Some(expected("pod3", "1"))));

    source.modify(make("pod2", "2"));
    assert_eq!(
        next().await,
        (
            "update",
            Some(expected("pod2", "1")),
            Some(expected("pod2", "2"))
        )
    );

    source.delete(make("pod1", "2"));
    assert_eq!(next().await, ("delete", Some(expected("pod1", "2")), None));
    verify_store(vec![expected("pod2", "2"), expected("pod3", "1")]);
    running.stop().await;
}

/// client-go `TestReplaceEvents` through a whole informer: a relist after a lost watch
/// yields tombstones for vanished objects, updates for kept ones and adds for new ones.
#[tokio::test(start_paused = true)]
async fn test_replace_events() {
    let source = Source::default();
    source.add(pod("pod-1"));
    source.add(labelled("pod-2", &[("ver", "1")]));
    source.add(pod("pod-3"));
    let informer = informer(&source, Duration::ZERO);
    let tombstones = Arc::new(Mutex::new(Vec::new()));
    let listener = TestListener::new();
    let handler = {
        let (tombstones, listener) = (tombstones.clone(), listener.clone());
        EventHandlerFns::<Pod>::new()
            .on_add({
                let listener = listener.clone();
                move |p, _| listener.record("add", p, true)
            })
            .on_update({
                let listener = listener.clone();
                move |_, p| listener.record("update", p, true)
            })
            .on_delete({
                let listener = listener.clone();
                move |d| {
                    if let DeletedObject::FinalStateUnknown { key, last_known } = d {
                        lock(&tombstones).push((key.clone(), name(last_known)));
                    }
                    listener.record("delete", d.object(), false);
                }
            })
    };
    informer.add_event_handler(handler).unwrap();
    let running = Running::start(&informer);
    listener
        .expect("initial", &["pod-1", "pod-2", "pod-3"])
        .await;
    listener.reset();

    // While the watch is lost: pod-3 deleted, pod-1 and pod-2 changed, pod-4 created.
    let mut state = lock(&source.st).objects.clone();
    source.change(state.remove("pod-3").unwrap(), Change::Delete, false);
    source.modify_drop_watch(state.remove("pod-1").unwrap());
    source.modify_drop_watch(labelled("pod-2", &[("ver", "2")]));
    source.add_drop_watch(pod("pod-4"));
    source.reset_watch();

    listener
        .wait_until("relist", |l| l.events().len() == 4)
        .await;
    assert_eq!(
        listener.events(),
        ["delete:pod-3", "update:pod-1", "update:pod-2", "add:pod-4"]
    );
    assert_eq!(
        *lock(&tombstones),
        [("pod-3".to_owned(), "pod-3".to_owned())]
    );
    assert_eq!(
        sorted_names(informer.store().list()),
        ["pod-1", "pod-2", "pod-4"]
    );
    assert_eq!(
        informer.store().resource_version(),
        lock(&source.st).rv.to_string()
    );
    assert_eq!(
        informer.last_sync_resource_version(),
        lock(&source.st).rv.to_string()
    );
    running.stop().await;
}

/// Many threads adding and removing handlers while events flow and the informer stops:
/// nothing deadlocks or panics, and adding fails only with `Stopped` at the end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_shared_informer_handler_abuse() {
    let source = Source::default();
    let informer = informer(&source, SECOND);
    let running = Running::start(&informer);
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let workers: Vec<_> = (0..8)
        .map(|_| {
            let (informer, stop) = (informer.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut handles = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    if fastrand::bool() {
                        let handler = EventHandlerFns::<Pod>::new()
                            .on_add(|_, _| {})
                            .on_update(|_, _| {})
                            .on_delete(|_| {});
                        match informer.add_event_handler_with_resync(handler, SECOND) {
                            Ok(h) => handles.push(h),
                            Err(InformerError::Stopped { .. }) => return,
                            Err(e) => panic!("unexpected error: {e}"),
                        }
                    } else if !handles.is_empty() {
                        let h = handles.swap_remove(fastrand::usize(..handles.len()));
                        informer.remove_event_handler(&h);
                    }
                }
            })
        })
        .collect();
    let mut names: Vec<String> = Vec::new();
    for i in 0..3000 {
        if names.is_empty() || fastrand::u8(0..3) == 0 {
            names.push(format!("pod{i}"));
            source.add(pod(names.last().unwrap()));
        } else if fastrand::bool() {
            source.modify(pod(&names[fastrand::usize(..names.len())]));
        } else {
            let n = names.swap_remove(fastrand::usize(..names.len()));
            source.delete(pod(&n));
        }
    }
    // Stop the informer first, to exercise contention while it closes.
    running.stop().await;
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.join().unwrap();
    }
    assert!(informer.is_stopped());
    assert_eq!(
        informer.handler_count(),
        0,
        "a stopped informer keeps no handlers"
    );
}

// ---------------------------------------------------------------------------------------
// The remaining shared_informer_test.go ports.
//
// client-go 1.36 has no tests named `RemoveEventHandler_*`; its handler-removal tests
// (TestSharedInformerRemoveHandler, …RemoveForeignHandler, …MultipleRegistration,
// TestRemovingRemovedSharedInformer, TestRemoveOnStoppedSharedInformer,
// TestRemoveWhileActive) are ported above.

/// A source whose first list answers only after a delay (a slow start).
#[derive(Clone)]
struct SlowFirstList {
    source: Source,
    delay: Duration,
    listed: Arc<AtomicUsize>,
}

impl ListerWatcher<Pod> for SlowFirstList {
    fn list(&self, p: &ListParams) -> BoxFuture<'_, Result<k8s_openapi::List<Pod>, Error>> {
        let first = self.listed.fetch_add(1, Ordering::SeqCst) == 0;
        let delay = if first { self.delay } else { Duration::ZERO };
        let p = p.clone();
        async move {
            tokio::time::sleep(delay).await;
            self.source.list(&p).await
        }
        .boxed()
    }

    fn watch(&self, p: &WatchParams) -> BoxFuture<'_, Result<EventStream<Pod>, Error>> {
        self.source.watch(p)
    }
}

/// client-go `TestListenerResyncPeriodsDelayed`: there the processor's start is delayed
/// past the first notification (it used to deadlock). Here the processor starts before the
/// reflector does, so that order cannot happen; the delay that can — the first list
/// answering a second late — must neither block delivery nor move the resync times, which
/// count from the start (listener2 at 2 s, listener3 at 3 s, listener1 never).
#[tokio::test(start_paused = true)]
async fn test_listener_resync_periods_delayed() {
    let start = Instant::now();
    let source = Source::default();
    source.add(pod("pod1"));
    source.add(pod("pod2"));
    let slow = SlowFirstList {
        source: source.clone(),
        delay: SECOND,
        listed: Arc::default(),
    };
    let informer = SharedInformer::new(slow, options(SECOND));
    let listeners = [
        TestListener::new(),
        TestListener::new(),
        TestListener::new(),
    ];
    for (l, period) in listeners.iter().zip([0, 2, 3]) {
        informer
            .add_event_handler_with_resync(l.clone(), period * SECOND)
            .unwrap();
    }
    let running = Running::start(&informer);

    // The initial list arrives after the startup delay, at every listener.
    tokio::time::sleep_until(start + SECOND + Duration::from_millis(100)).await;
    for (i, l) in listeners.iter().enumerate() {
        assert_eq!(
            l.sorted_events(),
            ["add:pod1", "add:pod2"],
            "listener{}",
            i + 1
        );
        l.reset();
    }

    // At 2 s only listener2 resyncs.
    tokio::time::sleep_until(start + 2 * SECOND + Duration::from_millis(100)).await;
    assert_eq!(listeners[1].sorted_events(), ["update:pod1", "update:pod2"]);
    assert!(listeners[0].events().is_empty(), "listener1 never resyncs");
    assert!(listeners[2].events().is_empty(), "listener3 resyncs at 3 s");
    listeners.iter().for_each(|l| l.reset());

    // At 3 s only listener3 resyncs.
    tokio::time::sleep_until(start + 3 * SECOND + Duration::from_millis(100)).await;
    assert_eq!(listeners[2].sorted_events(), ["update:pod1", "update:pod2"]);
    assert!(listeners[0].events().is_empty(), "listener1 never resyncs");
    assert!(
        listeners[1].events().is_empty(),
        "listener2 resyncs again at 4 s"
    );
    running.stop().await;
}

/// client-go `TestSharedInformerStartRace`: setting the transform and the watch error
/// handler from another thread while the informer starts must be safe. Here each setting
/// either lands before the start or is refused with `AlreadyStarted`, never half-applied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_shared_informer_start_race() {
    let source = Source::default();
    source.add(pod("pod1"));
    let informer = informer(&source, SECOND);
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let setter = std::thread::spawn({
        let (informer, stop) = (informer.clone(), stop.clone());
        move || {
            let (mut accepted, mut refused) = (0usize, 0usize);
            // Runs until told to stop and having met the started informer at least once.
            while !(stop.load(Ordering::SeqCst) && refused > 0) {
                let t: Transform<Pod> = Arc::new(|p| p);
                let results = [
                    informer.set_transform(t),
                    informer.set_watch_error_handler(|_| {}),
                ];
                for r in results {
                    match r {
                        Ok(()) => accepted += 1,
                        Err(InformerError::AlreadyStarted) => refused += 1,
                        Err(e) => panic!("unexpected {e}"),
                    }
                }
                // Once refused, always refused.
                if refused > 0 {
                    assert!(informer.has_started());
                }
                std::thread::yield_now();
            }
            (accepted, refused)
        }
    });
    let running = Running::start(&informer);
    synced(&informer).await;
    stop.store(true, Ordering::SeqCst);
    let (accepted, refused) = setter.join().expect("setter thread");
    assert!(refused > 0, "settings after the start are refused");
    assert!(accepted + refused >= 2);
    running.stop().await;
}

/// client-go `TestShutdown`: an informer stops cleanly whether its handler was added before
/// the run, after it synced, or the informer never ran; removing the handler afterwards is
/// harmless.
#[tokio::test(start_paused = true)]
async fn test_shutdown() {
    #[derive(Debug, Clone, Copy)]
    enum When {
        BeforeRun,
        AfterSync,
        NoRun,
    }
    for when in [When::BeforeRun, When::AfterSync, When::NoRun] {
        let source = Source::default();
        source.add(pod("pod1"));
        let informer = informer(&source, SECOND);
        let add = |informer: &SharedInformer<Pod>| {
            informer
                .add_event_handler(EventHandlerFns::new().on_add(|_: &Arc<Pod>, _| {}))
                .unwrap_or_else(|e| panic!("{when:?}: {e}"))
        };
        let reg = match when {
            When::BeforeRun => {
                let reg = add(&informer);
                let running = Running::start(&informer);
                synced(&informer).await;
                running.stop().await;
                reg
            }
            When::AfterSync => {
                let running = Running::start(&informer);
                synced(&informer).await;
                let reg = add(&informer);
                assert!(informer.remove_event_handler(&reg), "{when:?}");
                running.stop().await;
                reg
            }
            // Nothing runs, so nothing has to stop.
            When::NoRun => add(&informer),
        };
        informer.remove_event_handler(&reg);
        assert!(!informer.is_registered(&reg), "{when:?}");
        assert_eq!(informer.handler_count(), 0, "{when:?}");
        assert_eq!(
            informer.is_stopped(),
            !matches!(when, When::NoRun),
            "{when:?}"
        );
    }
}

// ---------------------------------------------------------------------------------------
// Panics in code the informer runs, and how an informer stops.

/// The pod's node, unwrapped as a careless index function would.
fn node_of(p: &Pod) -> Vec<String> {
    vec![p.spec.as_ref().unwrap().node_name.clone().unwrap()]
}

fn on_node(name: &str, node: &str) -> Pod {
    let mut p = pod(name);
    p.spec = Some(PodSpec {
        node_name: Some(node.to_owned()),
        ..Default::default()
    });
    p
}

/// Waits (on the paused clock) until `cond` holds; fails after a minute.
async fn until(what: &str, cond: impl Fn() -> bool) {
    let reached = tokio::time::timeout(Duration::from_secs(60), async {
        while !cond() {
            settle().await;
        }
    })
    .await;
    assert!(reached.is_ok(), "timed out waiting until {what}");
}

/// An index function that panics on one object (a Pod without `spec.nodeName`) leaves
/// that object out of its index: the informer syncs, keeps following the server, and the
/// index stays consistent as the object changes.
#[tokio::test(start_paused = true)]
async fn index_function_panic_skips_the_object_in_that_index() {
    let source = Source::default();
    source.add(on_node("scheduled", "n1"));
    source.add(pod("pending"));
    let informer = informer(&source, Duration::ZERO);
    informer
        .add_indexers([("node".to_owned(), Arc::new(node_of) as _)])
        .unwrap();
    let listener = TestListener::new();
    informer.add_event_handler(listener.clone()).unwrap();
    let running = Running::start(&informer);
    synced(&informer).await;
    listener.expect("initial", &["pending", "scheduled"]).await;
    let on = |node: &str| sorted_names(informer.store().by_index("node", node).unwrap());
    assert_eq!(on("n1"), ["scheduled"]);
    assert_eq!(informer.store().len(), 2);

    // Later events are still applied, and the index follows them.
    source.add(on_node("later", "n2"));
    source.modify(on_node("pending", "n1"));
    source.delete(on_node("scheduled", "n1"));
    listener
        .wait_until("events", |l| {
            l.events().contains(&"delete:scheduled".to_owned())
        })
        .await;
    assert_eq!(on("n1"), ["pending"]);
    assert_eq!(on("n2"), ["later"]);
    assert_eq!(
        informer.store().list_index_func_values("node").unwrap(),
        ["n1", "n2"]
    );
    assert!(!informer.is_stopped());
    running.stop().await;
}

/// A transform that panics on an object skips that object; the informer goes on.
#[tokio::test(start_paused = true)]
async fn transform_panic_skips_the_object() {
    let source = Source::default();
    source.add(pod("good"));
    source.add(labelled("bad", &[("explode", "")]));
    let informer = informer(&source, Duration::ZERO);
    let explode: Transform<Pod> = Arc::new(|p: Pod| {
        let labels = p.metadata.labels.as_ref();
        assert!(
            !labels.is_some_and(|l| l.contains_key("explode")),
            "explode"
        );
        p
    });
    informer.set_transform(explode).unwrap();
    let listener = TestListener::new();
    informer.add_event_handler(listener.clone()).unwrap();
    let running = Running::start(&informer);
    synced(&informer).await;
    listener.expect("initial", &["good"]).await;

    source.add(pod("later"));
    listener.expect("later", &["good", "later"]).await;
    // A modification it panics on is skipped; a deletion applies anyway.
    source.modify(labelled("good", &[("explode", "")]));
    source.delete(labelled("good", &[("explode", "")]));
    listener
        .wait_until("delete", |l| l.events().contains(&"delete:good".to_owned()))
        .await;
    assert_eq!(sorted_names(informer.store().list()), ["later"]);
    assert!(!informer.is_stopped());
    running.stop().await;
}

fn exploding_transform() -> Transform<Pod> {
    Arc::new(|p: Pod| {
        let labels = p.metadata.labels.as_ref();
        assert!(
            !labels.is_some_and(|l| l.contains_key("explode")),
            "explode"
        );
        p
    })
}

/// A relist whose transform panics on a listed object keeps the cached object (it still
/// exists): no handler is told it was deleted.
#[tokio::test(start_paused = true)]
async fn transform_panic_during_a_relist_keeps_the_cached_object() {
    let source = Source::default();
    source.add(pod("p"));
    let informer = informer(&source, Duration::ZERO);
    informer.set_transform(exploding_transform()).unwrap();
    let listener = TestListener::new();
    informer.add_event_handler(listener.clone()).unwrap();
    let running = Running::start(&informer);
    synced(&informer).await;
    listener.expect("initial", &["p"]).await;

    // The modification is skipped: the cache keeps the first state.
    source.modify(labelled("p", &[("explode", "")]));
    settle().await;
    // A relist (the watch history is gone) lists the modified state, which the transform
    // panics on again.
    source.modify_drop_watch(labelled("p", &[("explode", ""), ("again", "")]));
    source.reset_watch();
    until("relisted", || source.lists() >= 2).await;
    settle().await;
    assert_eq!(sorted_names(informer.store().list()), ["p"]);
    assert!(
        !listener.events().contains(&"delete:p".to_owned()),
        "events: {:?}",
        listener.events()
    );

    assert!(!informer.is_stopped());
    running.stop().await;
}

/// An object whose ADDED the transform panicked on (so no handler heard of it) and which is
/// then deleted reaches no handler at all.
#[tokio::test(start_paused = true)]
async fn deletion_of_an_object_whose_addition_was_skipped_reaches_no_handler() {
    let source = Source::default();
    source.add(pod("p"));
    let informer = informer(&source, Duration::ZERO);
    informer.set_transform(exploding_transform()).unwrap();
    let listener = TestListener::new();
    informer.add_event_handler(listener.clone()).unwrap();
    let running = Running::start(&informer);
    synced(&informer).await;
    listener.expect("initial", &["p"]).await;

    source.add(labelled("q", &[("explode", "")]));
    source.delete(labelled("q", &[("explode", "")]));
    source.add(pod("r"));
    listener
        .wait_until("r", |l| l.events().contains(&"add:r".to_owned()))
        .await;
    settle().await;
    assert_eq!(listener.events(), ["add:p", "add:r"]);
    assert_eq!(sorted_names(informer.store().list()), ["p", "r"]);
    assert!(!informer.is_stopped());
    running.stop().await;
}

/// A deletion of an object the informer never cached (and whose addition was not skipped)
/// still reaches the handlers, as client-go delivers it.
#[tokio::test(start_paused = true)]
async fn deletion_of_an_unknown_object_still_reaches_handlers() {
    let source = Source::default();
    let informer = informer(&source, Duration::ZERO);
    let listener = TestListener::new();
    informer.add_event_handler(listener.clone()).unwrap();
    let running = Running::start(&informer);
    synced(&informer).await;
    source.delete(pod("ghost"));
    listener
        .wait_until("delete", |l| l.events() == ["delete:ghost"])
        .await;
    running.stop().await;
}

/// A watch error handler that panics does not stop the reflector: it retries.
#[tokio::test(start_paused = true)]
async fn watch_error_handler_panic_does_not_stop_the_informer() {
    let source = Source::default();
    source.add(pod("pod1"));
    source.set_list_error("Access Denied");
    let informer = informer(&source, Duration::ZERO);
    informer
        .set_watch_error_handler(|e| panic!("handler failed on {e}"))
        .unwrap();
    let running = Running::start(&informer);
    until("the list is retried", || source.lists() >= 3).await;
    lock(&source.st).list_error = None;
    synced(&informer).await;
    assert!(!informer.is_stopped());
    running.stop().await;
}

/// A metrics sink that panics does not stop the informer.
#[tokio::test(start_paused = true)]
async fn metrics_sink_panic_does_not_stop_the_informer() {
    use kctrl_informer::metrics::{
        GaugeMetric, HistogramMetric, InformerId, InformerMetrics, InformerMetricsProvider,
    };
    struct Explodes;
    impl GaugeMetric for Explodes {
        fn set(&self, _: f64) {
            panic!("gauge");
        }
    }
    impl HistogramMetric for Explodes {
        fn observe(&self, _: f64) {
            panic!("histogram");
        }
    }
    struct Provider;
    impl InformerMetricsProvider for Provider {
        fn new_queued_items_metric(&self, _: &InformerId) -> Arc<dyn GaugeMetric> {
            Arc::new(Explodes)
        }
        fn new_processing_latency_metric(&self, _: &InformerId) -> Arc<dyn HistogramMetric> {
            Arc::new(Explodes)
        }
        fn new_store_resource_version_metric(&self, _: &InformerId) -> Arc<dyn GaugeMetric> {
            Arc::new(Explodes)
        }
    }
    let source = Source::default();
    source.add(pod("pod1"));
    let id = InformerId::new("test", &kctrl_client::ResourceRef::of::<Pod>());
    let informer = SharedInformer::new(
        source.clone(),
        SharedInformerOptions {
            metrics: Some(InformerMetrics::new(id, Arc::new(Provider))),
            ..options(Duration::ZERO)
        },
    );
    let listener = TestListener::new();
    informer.add_event_handler(listener.clone()).unwrap();
    let running = Running::start(&informer);
    synced(&informer).await;
    source.add(pod("pod2"));
    listener.expect("events", &["pod1", "pod2"]).await;
    assert!(!informer.is_stopped());
    running.stop().await;
}

/// A lister-watcher whose list panics: nothing can contain that.
#[derive(Clone)]
struct PanickingList;

impl ListerWatcher<Pod> for PanickingList {
    fn list(&self, _: &ListParams) -> BoxFuture<'_, Result<k8s_openapi::List<Pod>, Error>> {
        async { panic!("the list exploded") }.boxed()
    }

    fn watch(&self, _: &WatchParams) -> BoxFuture<'_, Result<EventStream<Pod>, Error>> {
        futures::future::pending().boxed()
    }
}

/// A lister-watcher whose list never answers.
#[derive(Clone)]
struct Hanging;

impl ListerWatcher<Pod> for Hanging {
    fn list(&self, _: &ListParams) -> BoxFuture<'_, Result<k8s_openapi::List<Pod>, Error>> {
        futures::future::pending().boxed()
    }

    fn watch(&self, _: &WatchParams) -> BoxFuture<'_, Result<EventStream<Pod>, Error>> {
        futures::future::pending().boxed()
    }
}

/// A panic the informer cannot contain stops it visibly: stopped, not synced, sync waiters
/// answered false, no handler accepted, and the failure says why.
#[tokio::test(start_paused = true)]
async fn uncontained_panic_stops_the_informer_visibly() {
    let informer = SharedInformer::new(PanickingList, options(Duration::ZERO));
    let registration = informer.add_event_handler(TestListener::new()).unwrap();
    let task = informer.start(CancellationToken::new());
    let synced = tokio::time::timeout(Duration::from_secs(60), informer.synced()).await;
    assert_eq!(synced.ok(), Some(false), "sync waiters are answered");
    let registration_synced =
        tokio::time::timeout(Duration::from_secs(60), registration.synced()).await;
    assert_eq!(registration_synced.ok(), Some(false));
    until("the informer is stopped", || informer.is_stopped()).await;
    assert!(!informer.has_synced());
    let failure = informer.failure().expect("the failure is kept");
    assert!(failure.panic.contains("the list exploded"), "{failure}");
    assert_eq!(informer.stopped().await, Some(failure));
    assert!(informer.add_event_handler(TestListener::new()).is_err());
    tokio::time::timeout(Duration::from_secs(60), task)
        .await
        .expect("the informer task ends")
        .expect("the panic does not escape the task");
}

/// Dropping a running informer's `run` future stops it visibly.
#[tokio::test(start_paused = true)]
async fn dropped_run_future_stops_the_informer() {
    // Dropped before the sync: sync waiters get false.
    let hanging = SharedInformer::new(Hanging, options(Duration::ZERO));
    let registration = hanging.add_event_handler(TestListener::new()).unwrap();
    let run = tokio::time::timeout(SECOND, hanging.run(CancellationToken::new())).await;
    assert!(run.is_err(), "the run was cut short");
    assert!(hanging.is_stopped());
    let answer = tokio::time::timeout(Duration::from_secs(60), hanging.synced()).await;
    assert_eq!(answer.ok(), Some(false));
    let registration_synced =
        tokio::time::timeout(Duration::from_secs(60), registration.synced()).await;
    assert_eq!(registration_synced.ok(), Some(false));
    assert!(hanging.add_event_handler(TestListener::new()).is_err());

    // Dropped after the sync: stopped, still synced.
    let source = Source::default();
    source.add(pod("pod1"));
    let informer = informer(&source, Duration::ZERO);
    tokio::select! {
        () = informer.run(CancellationToken::new()) => unreachable!("runs until dropped"),
        () = synced(&informer) => {}
    }
    assert!(informer.is_stopped());
    assert!(informer.has_synced());
    assert!(informer.add_event_handler(TestListener::new()).is_err());
}

/// An informer stopped before it synced answers its sync waiters with false.
#[tokio::test(start_paused = true)]
async fn synced_is_false_when_stopped_before_syncing() {
    let source = Source::default();
    source.set_list_error("the resource is not served (its CRD is not installed)");
    let informer = informer(&source, Duration::ZERO);
    let registration = informer.add_event_handler(TestListener::new()).unwrap();
    let cancel = CancellationToken::new();
    let task = informer.start(cancel.clone());
    until("the list was tried", || source.lists() >= 1).await;
    cancel.cancel();
    task.await.unwrap();
    let synced = tokio::time::timeout(Duration::from_secs(60), informer.synced()).await;
    assert_eq!(synced.ok(), Some(false));
    let registration_synced =
        tokio::time::timeout(Duration::from_secs(60), registration.synced()).await;
    assert_eq!(registration_synced.ok(), Some(false));
    // So does a wait started with a deadline that has not passed.
    let never = CancellationToken::new();
    let waited = tokio::time::timeout(
        Duration::from_secs(60),
        wait_for_cache_sync("test", &never, &[&informer]),
    )
    .await;
    assert_eq!(waited.ok(), Some(false));
}

/// A registration removed before its initial replay was delivered never syncs: its
/// `synced()` says so instead of waiting for ever.
#[tokio::test(start_paused = true)]
async fn removed_registration_synced_is_false() {
    let source = Source::default();
    for i in 0..3 {
        source.add(pod(&format!("pod{i}")));
    }
    let informer = informer(&source, Duration::ZERO);
    let running = Running::start(&informer);
    synced(&informer).await;
    // On this single-threaded runtime the replay's delivery task cannot run before the
    // handler is removed: nothing of the replay is delivered.
    let registration = informer
        .add_event_handler_with_options(
            TestListener::new(),
            kctrl_informer::HandlerOptions {
                delivery: kctrl_informer::Delivery::Runtime,
                ..Default::default()
            },
        )
        .unwrap();
    assert!(informer.remove_event_handler(&registration));
    let synced = tokio::time::timeout(Duration::from_secs(60), registration.synced()).await;
    assert_eq!(synced.ok(), Some(false));
    assert!(!registration.has_synced());
    running.stop().await;
}

/// A resync period of `Duration::MAX` means "never", for the informer and for a handler.
#[tokio::test(start_paused = true)]
async fn resync_period_of_duration_max_never_resyncs() {
    let source = Source::default();
    source.add(pod("pod1"));
    let informer = informer(&source, Duration::MAX);
    let default = TestListener::new();
    informer.add_event_handler(default.clone()).unwrap();
    let late = TestListener::new();
    informer
        .add_event_handler_with_resync(late.clone(), Duration::MAX)
        .unwrap();
    let running = Running::start(&informer);
    synced(&informer).await;
    default.expect("default", &["pod1"]).await;
    late.expect("late", &["pod1"]).await;
    tokio::time::sleep(Duration::from_secs(24 * 3600)).await;
    assert_eq!(default.events(), ["add:pod1"]);
    assert_eq!(late.events(), ["add:pod1"]);
    running.stop().await;
}

/// A backoff delay of `Duration::MAX` (a reflector told to wait "for ever" after a failed
/// round) waits until cancelled instead of panicking.
#[tokio::test(start_paused = true)]
async fn backoff_of_duration_max_waits_until_cancelled() {
    let source = Source::default();
    source.set_list_error("Access Denied");
    let informer = SharedInformer::new(
        source.clone(),
        SharedInformerOptions {
            reflector: ReflectorOptions {
                use_watch_list: false,
                backoff: kctrl_informer::BackoffOptions {
                    initial: Duration::MAX,
                    ..Default::default()
                },
                ..Default::default()
            },
            ..Default::default()
        },
    );
    let cancel = CancellationToken::new();
    let task = informer.start(cancel.clone());
    until("the list was tried", || source.lists() >= 1).await;
    tokio::time::sleep(Duration::from_secs(3600)).await;
    assert_eq!(source.lists(), 1, "no retry before the (endless) delay");
    assert!(!informer.is_stopped());
    cancel.cancel();
    task.await.expect("the informer task ends without a panic");
    assert!(informer.is_stopped());
}

/// `wait_for_cache_sync` returns false as soon as one informer can no longer sync, without
/// waiting for the others (which may never sync either).
#[tokio::test(start_paused = true)]
async fn wait_for_cache_sync_returns_when_one_can_no_longer_sync() {
    let failed = SharedInformer::new(PanickingList, options(Duration::ZERO));
    let hanging = SharedInformer::new(Hanging, options(Duration::ZERO));
    let cancel = CancellationToken::new();
    let _failed = failed.start(cancel.clone());
    let _hanging = hanging.start(cancel.clone());
    let waited = tokio::time::timeout(
        Duration::from_secs(60),
        wait_for_cache_sync("test", &cancel, &[&hanging, &failed]),
    )
    .await;
    assert_eq!(waited.ok(), Some(false));
    cancel.cancel();
}

/// An informer whose task is aborted (before or while it runs) is stopped too.
#[tokio::test(start_paused = true)]
async fn aborted_informer_task_stops_the_informer() {
    for first_poll in [false, true] {
        let informer = SharedInformer::new(Hanging, options(Duration::ZERO));
        let task = informer.start(CancellationToken::new());
        if first_poll {
            settle().await;
        }
        task.abort();
        assert!(task.await.unwrap_err().is_cancelled());
        assert!(informer.is_stopped(), "first poll: {first_poll}");
        let synced = tokio::time::timeout(Duration::from_secs(60), informer.synced()).await;
        assert_eq!(synced.ok(), Some(false), "first poll: {first_poll}");
    }
}

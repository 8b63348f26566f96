//! Scripted fakes for the reflector tests: a `ListerWatcher` that records its calls and
//! answers from closures, channel-backed watch streams, and a recording `ReflectorStore`.

#![allow(dead_code, unreachable_pub)]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;
use k8s_openapi::List;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ListMeta, ObjectMeta, Status};
use kctrl_client::{ApiError, Bookmark, Error, INITIAL_EVENTS_END_ANNOTATION, ListParams};
use kctrl_client::{WatchEvent, WatchParams};
use kctrl_informer::list_watch::{EventStream, ListerWatcher};
use kctrl_informer::{BackoffOptions, ReflectorOptions, ReflectorStore};
use tokio::sync::mpsc;

pub fn pod(name: &str, rv: &str) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            resource_version: Some(rv.into()).filter(|s: &String| !s.is_empty()),
            ..Default::default()
        },
        ..Default::default()
    }
}

pub fn pods(range: std::ops::Range<usize>) -> Vec<Pod> {
    range
        .map(|i| pod(&format!("pod-{i}"), &i.to_string()))
        .collect()
}

pub fn pod_list(rv: &str, continue_: Option<&str>, items: Vec<Pod>) -> List<Pod> {
    List {
        items,
        metadata: ListMeta {
            resource_version: Some(rv.into()),
            continue_: continue_.map(Into::into),
            ..Default::default()
        },
    }
}

pub fn api_error(code: u16, reason: &str, message: &str) -> Error {
    ApiError::from_status(
        code,
        Status {
            code: Some(code.into()),
            reason: Some(reason.into()),
            message: Some(message.into()),
            status: Some("Failure".into()),
            ..Default::default()
        },
    )
    .into()
}

pub fn expired(message: &str) -> Error {
    api_error(410, "Expired", message)
}

pub fn too_many_requests() -> Error {
    api_error(429, "TooManyRequests", "too many requests")
}

pub fn internal_error() -> ApiError {
    match api_error(500, "InternalError", "etcdserver: no leader") {
        Error::Api(e) => *e,
        _ => unreachable!(),
    }
}

pub fn connection_refused() -> Error {
    Error::Transport {
        verb: "GET".into(),
        url: "https://127.0.0.1:6443/api/v1/pods?watch=1".into(),
        source: Box::new(std::io::Error::from(std::io::ErrorKind::ConnectionRefused)),
    }
}

/// Options for tests: a name, no WatchList unless asked, and a backoff without jitter
/// (800 ms, 1.6 s, 3.2 s, ...) so elapsed times are exact on the paused clock.
pub fn options(use_watch_list: bool) -> ReflectorOptions {
    ReflectorOptions {
        name: "test-reflector".into(),
        use_watch_list,
        backoff: BackoffOptions {
            jitter: 0.0,
            ..Default::default()
        },
        ..Default::default()
    }
}

/// The producing end of a scripted watch. Dropping it ends the stream.
#[derive(Clone)]
pub struct FakeWatcher {
    tx: mpsc::Sender<Result<WatchEvent<Pod>, Error>>,
}

const WATCH_BUFFER: usize = 64;

/// A watch stream fed by the returned [`FakeWatcher`].
pub fn fake_watch() -> (FakeWatcher, EventStream<Pod>) {
    let (tx, rx) = mpsc::channel(WATCH_BUFFER);
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    });
    (FakeWatcher { tx }, Box::pin(stream))
}

/// A watch stream that has already ended.
pub fn closed_watch() -> EventStream<Pod> {
    Box::pin(futures::stream::empty())
}

/// A watch stream that yields the given events, then ends.
pub fn watch_of(events: Vec<WatchEvent<Pod>>) -> EventStream<Pod> {
    Box::pin(futures::stream::iter(events.into_iter().map(Ok)))
}

pub fn end_bookmark(rv: &str, value: &str) -> WatchEvent<Pod> {
    WatchEvent::Bookmark(Bookmark {
        resource_version: rv.into(),
        annotations: BTreeMap::from([(INITIAL_EVENTS_END_ANNOTATION.into(), value.into())]),
    })
}

impl FakeWatcher {
    pub fn send(&self, event: WatchEvent<Pod>) {
        self.tx
            .try_send(Ok(event))
            .expect("watch buffer full or closed");
    }
    pub fn add(&self, p: Pod) {
        self.send(WatchEvent::Added(p));
    }
    pub fn modify(&self, p: Pod) {
        self.send(WatchEvent::Modified(p));
    }
    pub fn delete(&self, p: Pod) {
        self.send(WatchEvent::Deleted(p));
    }
    pub fn bookmark(&self, rv: &str) {
        self.send(WatchEvent::Bookmark(Bookmark {
            resource_version: rv.into(),
            annotations: BTreeMap::new(),
        }));
    }
    pub fn error(&self, e: ApiError) {
        self.send(WatchEvent::Error(e));
    }
    /// Whether the consumer dropped the stream.
    pub fn is_closed(&self) -> bool {
        self.tx.is_closed()
    }
    /// Waits until the consumer has taken (and, the reflector being synchronous between
    /// reads, processed) every event sent so far, or dropped the stream.
    pub async fn drained(&self) {
        while self.tx.capacity() < WATCH_BUFFER && !self.tx.is_closed() {
            tokio::task::yield_now().await;
        }
    }
}

/// One recorded call.
#[derive(Clone, Debug, PartialEq)]
pub enum Call {
    List(ListParams),
    Watch(WatchParams),
}

type ListFn = Box<dyn FnMut(&ListParams) -> Result<List<Pod>, Error> + Send>;
type WatchFn = Box<dyn FnMut(&WatchParams) -> Result<EventStream<Pod>, Error> + Send>;
type DelayFn = Box<dyn FnMut(usize) -> Duration + Send>;

/// A `ListerWatcher` answering from closures and recording every call.
pub struct ScriptedLw {
    calls: Mutex<Vec<Call>>,
    list: Mutex<ListFn>,
    watch: Mutex<WatchFn>,
    watch_delay: Mutex<Option<DelayFn>>,
}

impl ScriptedLw {
    pub fn new(
        list: impl FnMut(&ListParams) -> Result<List<Pod>, Error> + Send + 'static,
        watch: impl FnMut(&WatchParams) -> Result<EventStream<Pod>, Error> + Send + 'static,
    ) -> Arc<Self> {
        Arc::new(Self {
            calls: Mutex::new(Vec::new()),
            list: Mutex::new(Box::new(list)),
            watch: Mutex::new(Box::new(watch)),
            watch_delay: Mutex::new(None),
        })
    }

    /// Makes the n-th watch call (1-based) take this long to answer.
    pub fn set_watch_delay(&self, f: impl FnMut(usize) -> Duration + Send + 'static) {
        *self.watch_delay.lock().unwrap() = Some(Box::new(f));
    }

    pub fn calls(&self) -> Vec<Call> {
        self.calls.lock().unwrap().clone()
    }

    pub fn lists(&self) -> Vec<ListParams> {
        self.calls()
            .into_iter()
            .filter_map(|c| match c {
                Call::List(p) => Some(p),
                Call::Watch(_) => None,
            })
            .collect()
    }

    pub fn watches(&self) -> Vec<WatchParams> {
        self.calls()
            .into_iter()
            .filter_map(|c| match c {
                Call::Watch(p) => Some(p),
                Call::List(_) => None,
            })
            .collect()
    }

    /// The resourceVersions of the list calls, `""` for none.
    pub fn list_rvs(&self) -> Vec<String> {
        self.lists()
            .into_iter()
            .map(|p| p.resource_version.unwrap_or_default())
            .collect()
    }
}

impl ListerWatcher<Pod> for ScriptedLw {
    fn list(&self, params: &ListParams) -> BoxFuture<'_, Result<List<Pod>, Error>> {
        self.calls.lock().unwrap().push(Call::List(params.clone()));
        let result = (self.list.lock().unwrap())(params);
        async move { result }.boxed()
    }

    fn watch(&self, params: &WatchParams) -> BoxFuture<'_, Result<EventStream<Pod>, Error>> {
        let n = {
            let mut calls = self.calls.lock().unwrap();
            calls.push(Call::Watch(params.clone()));
            calls.iter().filter(|c| matches!(c, Call::Watch(_))).count()
        };
        let delay = self
            .watch_delay
            .lock()
            .unwrap()
            .as_mut()
            .map_or(Duration::ZERO, |f| f(n));
        let result = (self.watch.lock().unwrap())(params);
        async move {
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            result
        }
        .boxed()
    }
}

/// What the reflector did to the store.
#[derive(Clone, Debug, PartialEq)]
pub enum Op {
    Add(String, String),
    Update(String, String),
    Delete(String, String),
    Replace(Vec<(String, String)>, String),
    Resync,
    Bookmark(String),
}

fn name_rv(p: &Pod) -> (String, String) {
    (
        p.metadata.name.clone().unwrap_or_default(),
        p.metadata.resource_version.clone().unwrap_or_default(),
    )
}

type Hook = Box<dyn FnMut(&Op) + Send>;
type Probe = Box<dyn Fn() -> String + Send + Sync>;

/// A keyed store that records every operation.
#[derive(Default)]
pub struct RecordingStore {
    ops: Mutex<Vec<Op>>,
    items: Mutex<BTreeMap<String, Pod>>,
    hook: Mutex<Option<Hook>>,
    probe: Mutex<Option<Probe>>,
    probed: Mutex<Vec<String>>,
    changed: tokio::sync::Notify,
}

impl RecordingStore {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Runs `f` after each operation is recorded.
    pub fn on_op(&self, f: impl FnMut(&Op) + Send + 'static) {
        *self.hook.lock().unwrap() = Some(Box::new(f));
    }

    /// Calls `f` at each operation and records its answer (e.g. the reflector's RV).
    pub fn probe(&self, f: impl Fn() -> String + Send + Sync + 'static) {
        *self.probe.lock().unwrap() = Some(Box::new(f));
    }

    pub fn probed(&self) -> Vec<String> {
        self.probed.lock().unwrap().clone()
    }

    pub fn ops(&self) -> Vec<Op> {
        self.ops.lock().unwrap().clone()
    }

    /// `(name, resourceVersion)` of every stored pod, by name.
    pub fn items(&self) -> Vec<(String, String)> {
        self.items.lock().unwrap().values().map(name_rv).collect()
    }

    pub fn get(&self, name: &str) -> Option<Pod> {
        self.items.lock().unwrap().get(name).cloned()
    }

    /// Looks at a stored item in place (a clone would not show its allocations).
    pub fn inspect<R>(&self, name: &str, f: impl FnOnce(&Pod) -> R) -> Option<R> {
        self.items.lock().unwrap().get(name).map(f)
    }

    pub fn len(&self) -> usize {
        self.items.lock().unwrap().len()
    }

    /// Waits until at least `n` operations were recorded.
    pub async fn wait_ops(&self, n: usize) {
        loop {
            let notified = self.changed.notified();
            if self.ops.lock().unwrap().len() >= n {
                return;
            }
            notified.await;
        }
    }

    fn record(&self, op: Op) {
        if let Some(p) = &*self.probe.lock().unwrap() {
            self.probed.lock().unwrap().push(p());
        }
        self.ops.lock().unwrap().push(op.clone());
        if let Some(h) = &mut *self.hook.lock().unwrap() {
            h(&op);
        }
        self.changed.notify_waiters();
    }

    fn key(p: &Pod) -> String {
        p.metadata.name.clone().unwrap_or_default()
    }
}

impl ReflectorStore<Pod> for RecordingStore {
    fn add(&self, obj: Arc<Pod>) {
        let obj = Arc::unwrap_or_clone(obj);
        let (n, rv) = name_rv(&obj);
        self.items.lock().unwrap().insert(Self::key(&obj), obj);
        self.record(Op::Add(n, rv));
    }
    fn update(&self, obj: Arc<Pod>) {
        let obj = Arc::unwrap_or_clone(obj);
        let (n, rv) = name_rv(&obj);
        self.items.lock().unwrap().insert(Self::key(&obj), obj);
        self.record(Op::Update(n, rv));
    }
    fn delete(&self, obj: Arc<Pod>) {
        let (n, rv) = name_rv(&obj);
        self.items.lock().unwrap().remove(&Self::key(&obj));
        self.record(Op::Delete(n, rv));
    }
    fn replace(&self, objects: Vec<Arc<Pod>>, resource_version: String) {
        let objects: Vec<Pod> = objects.into_iter().map(Arc::unwrap_or_clone).collect();
        let listed = objects.iter().map(name_rv).collect();
        *self.items.lock().unwrap() = objects.into_iter().map(|p| (Self::key(&p), p)).collect();
        self.record(Op::Replace(listed, resource_version));
    }
    fn resync(&self) {
        self.record(Op::Resync);
    }
    fn bookmark(&self, resource_version: String) {
        self.record(Op::Bookmark(resource_version));
    }
}

pub fn pairs(v: &[(&str, &str)]) -> Vec<(String, String)> {
    v.iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
}

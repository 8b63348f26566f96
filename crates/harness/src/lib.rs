//! A test harness for controllers: a kctrl-runtime controller against kctrl-fake's in-memory
//! API server, waits on the objects it writes and the events it records, and a clean stop.
//!
//! [`TestHarness`] holds a [`FakeApi`], a [`SharedInformerFactory`] on it and an
//! [`EventBroadcaster`] whose events it keeps. [`start`](TestHarness::start) runs a
//! [`Controller`] built on [`factory`](TestHarness::factory) in a task;
//! [`wait_until`](TestHarness::wait_until) polls a condition on the fake's objects and the
//! recorded events until it holds, failing after a timeout with the last state the condition
//! saw; [`stop`](TestHarness::stop) cancels the controllers, waits for them, shuts the
//! informers and the broadcaster down, and reports a controller that failed. A reconcile
//! that panics is caught by the controller (which retries its key), so nothing else would
//! show it: the harness notes each panic ([`panics`](TestHarness::panics)), a timed-out wait
//! lists them, and `stop` fails with [`HarnessError::Panicked`].
//!
//! Everything waits on Tokio's clock: under `#[tokio::test(start_paused = true)]` (Tokio's
//! `test-util` feature) time only moves when every task is idle, and then jumps to the next
//! timer, so a reconcile's `Action::requeue(Duration::from_secs(300))` runs at once in real
//! time and the timeout is virtual too.
//!
//! ```
//! use std::collections::BTreeMap;
//! use std::sync::Arc;
//! use std::sync::atomic::{AtomicU32, Ordering};
//! use std::time::Duration;
//! use k8s_openapi::api::apps::v1::Deployment;
//! use k8s_openapi::api::core::v1::ConfigMap;
//! use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
//! use kctrl_client::{Api, Client, PatchParams, PostParams};
//! use kctrl_events::{EventRecorder, EventType, Recorder};
//! use kctrl_harness::TestHarness;
//! use kctrl_runtime::{Action, Controller};
//!
//! struct Ctx { client: Client, recorder: Recorder, checks: AtomicU32 }
//!
//! // Writes how often it checked a Deployment into ConfigMap `<name>-checks`, records an
//! // event, and checks again in five minutes.
//! async fn reconcile(d: Arc<Deployment>, ctx: Arc<Ctx>) -> Result<Action, kctrl_client::Error> {
//!     let n = ctx.checks.fetch_add(1, Ordering::SeqCst) + 1;
//!     let name = d.metadata.name.clone().unwrap_or_default();
//!     let cm = ConfigMap {
//!         metadata: ObjectMeta { name: Some(format!("{name}-checks")), ..Default::default() },
//!         data: Some(BTreeMap::from([("checks".to_owned(), n.to_string())])),
//!         ..Default::default()
//!     };
//!     Api::<ConfigMap>::namespaced(ctx.client.clone(), "default")
//!         .apply(&PatchParams::apply("checker"), &cm).await?;
//!     ctx.recorder.event(&kctrl_events::object_reference(&*d), EventType::Normal, "Checked", &format!("check {n}"));
//!     Ok(Action::requeue(Duration::from_secs(300)))
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # tokio::time::pause();
//! // In a #[tokio::test(start_paused = true)]:
//! // The timeout is on the same clock as the requeues.
//! let mut harness = TestHarness::new()?.timeout(Duration::from_secs(3600));
//! let controller = Controller::<Deployment>::new(harness.factory());
//! let ctx = Ctx { client: harness.client(), recorder: harness.event_recorder(&controller), checks: AtomicU32::new(0) };
//! harness.start(controller, reconcile, |_d, _err, _ctx| Action::rate_limited(), Arc::new(ctx));
//!
//! let web = Deployment {
//!     metadata: ObjectMeta { name: Some("web".into()), namespace: Some("default".into()), ..Default::default() },
//!     ..Default::default()
//! };
//! Api::<Deployment>::namespaced(harness.client(), "default").create(&PostParams::default(), &web).await?;
//!
//! // Three checks: the first at once, two more after 5 and 10 minutes of (paused) time.
//! harness
//!     .wait_for_object::<ConfigMap>(Some("default"), "web-checks", "three checks", |cm| {
//!         cm.data.as_ref().is_some_and(|d| d["checks"] == "3")
//!     })
//!     .await?;
//! harness
//!     .wait_until("three Checked events", |h| {
//!         let n = h.events().iter().filter(|e| e.reason == "Checked").count();
//!         if n >= 3 { Ok(()) } else { Err(format!("{n} Checked events")) }
//!     })
//!     .await?;
//! harness.stop().await?;
//! # Ok(()) }
//! ```

#![forbid(unsafe_code)]

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use k8s_openapi::Resource;
use k8s_openapi::api::core::v1::Event;
use kctrl_client::Client;
use kctrl_events::{EventBroadcaster, EventType, EventWatcher, RecordedEvent, Recorder};
use kctrl_fake::FakeApi;
use kctrl_informer::SharedInformerFactory;
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use kctrl_runtime::{Action, Controller, Object, RunError};

/// How long [`TestHarness::wait_until`] waits by default (on Tokio's clock, and at most as
/// long in real time).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// How soon [`TestHarness::wait_until`] checks its condition again after the fake's objects
/// or the recorded events changed (on Tokio's clock).
pub const POLL_INTERVAL: Duration = Duration::from_millis(10);

/// How long the interval between checks grows while nothing changes (doubling from
/// [`POLL_INTERVAL`]): on a paused clock, each check is a step of time, so fewer steps
/// through a long requeue.
pub const MAX_POLL_INTERVAL: Duration = Duration::from_millis(250);

/// What went wrong in a [`TestHarness`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HarnessError {
    /// The event broadcaster's watcher could not start (no Tokio runtime).
    #[error(
        "the harness's event watcher could not start ({0}); create the harness inside a Tokio runtime, e.g. in a #[tokio::test]"
    )]
    Events(#[from] kctrl_events::Error),
    /// The condition did not hold within the timeout.
    #[error(
        "timed out after {after:?} waiting for {what}; last seen: {last_seen}; events recorded: {events}{}{}",
        panics_note(.panics),
        dropped_note(*.dropped_events)
    )]
    Timeout {
        /// What was waited for.
        what: String,
        /// The timeout.
        after: Duration,
        /// What the condition said the last time it was checked.
        last_seen: String,
        /// The events recorded so far, as `<type> <reason> <message>`, or `none`.
        events: String,
        /// The reconciles (and error policies) that panicked so far, as `<controller>:
        /// <namespace>/<name>: <panic message>`: the controller catches a panic, logs it and
        /// retries the key, so a wait sees only that nothing happens.
        panics: Vec<String>,
        /// Events the broadcaster dropped ([`EventBroadcaster::dropped_events`]): missing
        /// from `events`.
        dropped_events: u64,
    },
    /// Reconciles of a controller panicked (at [`TestHarness::stop`]); the controller itself
    /// caught them, retried the keys and ended cleanly.
    #[error("{} reconcile(s) of controller {controller} panicked: {}", .panics.len(), .panics.join("; "))]
    Panicked {
        /// The controller's name.
        controller: String,
        /// Each panic, as `<namespace>/<name>: <panic message>`.
        panics: Vec<String>,
    },
    /// A controller returned while the test still expected it to run.
    #[error("controller {controller} stopped while waiting for {what}: {outcome}")]
    Stopped {
        /// The controller's name.
        controller: String,
        /// What was waited for.
        what: String,
        /// How it ended: its error, or that it returned without one.
        outcome: String,
    },
    /// A controller returned an error (at [`TestHarness::stop`]).
    #[error("controller {controller} failed: {source}")]
    Run {
        /// The controller's name.
        controller: String,
        /// Its error.
        #[source]
        source: Box<RunError>,
    },
    /// A controller's task panicked or was aborted.
    #[error("the task of controller {controller} did not finish: {reason}")]
    Task {
        /// The controller's name.
        controller: String,
        /// The panic or the abort.
        reason: String,
    },
}

/// The end of a [`HarnessError::Timeout`]'s message about panics.
fn panics_note(panics: &[String]) -> String {
    if panics.is_empty() {
        String::new()
    } else {
        format!("; reconciles panicked: {}", panics.join("; "))
    }
}

/// The end of a [`HarnessError::Timeout`]'s message about dropped events.
fn dropped_note(dropped: u64) -> String {
    if dropped == 0 {
        String::new()
    } else {
        format!("; {dropped} events dropped by the broadcaster (not in the list)")
    }
}

/// How often a wait wakes up in real time, whatever Tokio's clock does.
const REAL_TICK: Duration = Duration::from_millis(50);

/// Wakes a wait every [`REAL_TICK`] of real time, from a thread of its own, until dropped:
/// a paused Tokio clock does not advance while the runtime is busy, so no Tokio timer would.
struct RealTicker {
    notify: Arc<Notify>,
    stop: Arc<AtomicBool>,
}

impl RealTicker {
    fn start() -> Self {
        let notify = Arc::new(Notify::new());
        let stop = Arc::new(AtomicBool::new(false));
        let (n, s) = (notify.clone(), stop.clone());
        // Without the thread (none can be started) a wait only follows Tokio's clock.
        let _ = std::thread::Builder::new()
            .name("kctrl-harness-tick".into())
            .spawn(move || {
                while !s.load(Ordering::Relaxed) {
                    std::thread::sleep(REAL_TICK);
                    n.notify_one();
                }
            });
        Self { notify, stop }
    }

    async fn tick(&self) {
        self.notify.notified().await;
    }
}

impl Drop for RealTicker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// A controller's task and, once it has returned, how.
struct Running {
    name: String,
    /// Until [`TestHarness::stop`] has joined it (a stop cut short leaves it here, for
    /// [`Drop`] to abort).
    task: Option<JoinHandle<()>>,
    outcome: Arc<Mutex<Option<Result<(), RunError>>>>,
    /// The reconciles and error policies that panicked, as `<namespace>/<name>: <message>`.
    panics: Arc<Mutex<Vec<String>>>,
}

/// The message of a panic's payload.
fn panic_message(payload: &(dyn std::any::Any + Send)) -> &str {
    payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("a panic without a message")
}

/// Runs `f`; should it panic, records the panic in `panics` (under `key`) and panics on
/// with the same payload, for the controller to catch as it does any reconcile's.
fn noting_panics<T>(panics: &Mutex<Vec<String>>, key: &str, f: impl FnOnce() -> T) -> T {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(v) => v,
        Err(payload) => {
            panics
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(format!("{key}: {}", panic_message(payload.as_ref())));
            std::panic::resume_unwind(payload)
        }
    }
}

/// A reconcile's future whose panics are recorded (see [`noting_panics`]).
struct NotingPanics<F> {
    inner: Pin<Box<F>>,
    panics: Arc<Mutex<Vec<String>>>,
    key: String,
}

impl<F: Future> Future for NotingPanics<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = &mut *self;
        let inner = &mut this.inner;
        noting_panics(&this.panics, &this.key, || inner.as_mut().poll(cx))
    }
}

/// `namespace/name` of an object, or `name` for a cluster-scoped one.
fn key_of<K: Object>(obj: &K) -> String {
    let meta = obj.metadata();
    let name = meta.name.as_deref().unwrap_or_default();
    match meta.namespace.as_deref() {
        Some(ns) => format!("{ns}/{name}"),
        None => name.to_owned(),
    }
}

/// Controllers on an in-memory API server, for tests; see the [module docs](self).
pub struct TestHarness {
    fake: FakeApi,
    factory: SharedInformerFactory,
    broadcaster: EventBroadcaster,
    watcher: EventWatcher,
    events: Arc<Mutex<Vec<Event>>>,
    cancel: CancellationToken,
    running: Vec<Running>,
    timeout: Duration,
    stopped: bool,
}

impl fmt::Debug for TestHarness {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TestHarness")
            .field("fake", &self.fake)
            .field(
                "controllers",
                &self.running.iter().map(|r| &r.name).collect::<Vec<_>>(),
            )
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl TestHarness {
    /// A harness on an empty [`FakeApi`]. Needs a Tokio runtime (its event watcher is a task).
    pub fn new() -> Result<Self, HarnessError> {
        Self::with_fake(FakeApi::new())
    }

    /// A harness on `fake`, e.g. one with custom resources registered or objects seeded.
    pub fn with_fake(fake: FakeApi) -> Result<Self, HarnessError> {
        // Never resyncs during a test: a resync would enqueue every key at the period.
        let factory = SharedInformerFactory::new(fake.client(), Duration::ZERO);
        let broadcaster = EventBroadcaster::new();
        let events = Arc::new(Mutex::new(Vec::new()));
        let sink = events.clone();
        let watcher = broadcaster.start_event_watcher(move |e: &Event| {
            sink.lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(e.clone());
        })?;
        Ok(Self {
            fake,
            factory,
            broadcaster,
            watcher,
            events,
            cancel: CancellationToken::new(),
            running: Vec::new(),
            timeout: DEFAULT_TIMEOUT,
            stopped: false,
        })
    }

    /// The same harness waiting at most `timeout` in [`wait_until`](Self::wait_until)
    /// ([`Duration::MAX`]: without limit).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The in-memory API server.
    pub fn fake(&self) -> &FakeApi {
        &self.fake
    }

    /// A client on the fake (default namespace `default`), for the test's own writes and for
    /// the reconciles' context.
    pub fn client(&self) -> Client {
        self.fake.client()
    }

    /// The informer factory to build controllers on (no periodic resync).
    pub fn factory(&self) -> &SharedInformerFactory {
        &self.factory
    }

    /// The broadcaster whose events [`events`](Self::events) returns.
    pub fn broadcaster(&self) -> &EventBroadcaster {
        &self.broadcaster
    }

    /// A recorder for `controller`'s reconciles (its source is the controller's name), whose
    /// events [`events`](Self::events) returns.
    pub fn event_recorder<K: Object>(&self, controller: &Controller<K>) -> Recorder {
        controller.event_recorder(&self.broadcaster)
    }

    /// The events recorded so far, in the order the broadcaster delivered them, each as
    /// recorded (aggregation and spam filtering belong to the sink that writes events to the
    /// API, which the harness does not run).
    pub fn events(&self) -> Vec<RecordedEvent> {
        self.events
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|e| RecordedEvent {
                object: e.involved_object.clone(),
                type_: if e.type_.as_deref() == Some("Warning") {
                    EventType::Warning
                } else {
                    EventType::Normal
                },
                reason: e.reason.clone().unwrap_or_default(),
                message: e.message.clone().unwrap_or_default(),
            })
            .collect()
    }

    /// Runs `controller` in a task until [`stop`](Self::stop), with the arguments of
    /// [`Controller::run`]. Build it on [`factory`](Self::factory).
    ///
    /// A reconcile or error policy that panics is caught by the controller (logged, the key
    /// retried rate-limited); the harness notes each such panic, which a
    /// [`wait_until`](Self::wait_until) timing out reports and makes
    /// [`stop`](Self::stop) fail with [`HarnessError::Panicked`].
    pub fn start<K, Ctx, E, R, Fut, P>(
        &mut self,
        controller: Controller<K>,
        reconcile: R,
        error_policy: P,
        ctx: Arc<Ctx>,
    ) where
        K: Object,
        Ctx: Send + Sync + 'static,
        E: std::error::Error + Send + 'static,
        R: Fn(Arc<K>, Arc<Ctx>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Action, E>> + Send + 'static,
        P: Fn(Arc<K>, &E, Arc<Ctx>) -> Action + Send + Sync + 'static,
    {
        let name = controller.name().to_owned();
        let outcome = Arc::new(Mutex::new(None));
        let slot = outcome.clone();
        let panics = Arc::new(Mutex::new(Vec::new()));
        let (in_reconcile, in_policy) = (panics.clone(), panics.clone());
        let reconcile = move |obj: Arc<K>, ctx: Arc<Ctx>| {
            let key = key_of(&*obj);
            let fut = noting_panics(&in_reconcile, &key, || reconcile(obj, ctx));
            NotingPanics {
                inner: Box::pin(fut),
                panics: in_reconcile.clone(),
                key,
            }
        };
        let error_policy = move |obj: Arc<K>, err: &E, ctx: Arc<Ctx>| {
            let key = format!("{} (error policy)", key_of(&*obj));
            noting_panics(&in_policy, &key, || error_policy(obj, err, ctx))
        };
        let run = controller.run(reconcile, error_policy, ctx, self.cancel.child_token());
        let task = tokio::spawn(async move {
            let result = run.await;
            *slot.lock().unwrap_or_else(|p| p.into_inner()) = Some(result);
        });
        self.running.push(Running {
            name,
            task: Some(task),
            outcome,
            panics,
        });
    }

    /// Waits until `check` returns `Ok`, checking at once and then every [`POLL_INTERVAL`] of
    /// Tokio's clock (up to [`MAX_POLL_INTERVAL`] while nothing changes), for at most the
    /// harness's timeout on Tokio's clock and as long in real time (a paused clock does not
    /// advance while a controller keeps the runtime busy, e.g. one that reconciles its own
    /// writes in a loop). `check` gets the harness (its
    /// [`fake`](Self::fake)'s objects, its [`events`](Self::events)); its `Err` describes what
    /// it saw instead, which the timeout error shows with the events recorded. Fails at once
    /// if a controller started here has returned.
    pub async fn wait_until<T>(
        &self,
        what: &str,
        mut check: impl FnMut(&Self) -> Result<T, String>,
    ) -> Result<T, HarnessError> {
        // `None`: a timeout too large for a point in time, no deadline.
        let deadline = tokio::time::Instant::now().checked_add(self.timeout);
        // A controller that never idles (one that reconciles its own writes in a loop) keeps
        // a paused clock from advancing: the same timeout in real time ends that wait too.
        let real_deadline = std::time::Instant::now().checked_add(self.timeout);
        let ticker = RealTicker::start();
        let mut interval = POLL_INTERVAL;
        let mut seen = self.change_marker();
        loop {
            let last_seen = match check(self) {
                Ok(v) => return Ok(v),
                Err(seen) => seen,
            };
            if let Some(stopped) = self.stopped_controller(what) {
                return Err(stopped);
            }
            let passed = deadline.is_some_and(|d| tokio::time::Instant::now() >= d)
                || real_deadline.is_some_and(|d| std::time::Instant::now() >= d);
            if passed {
                let events = self.events();
                return Err(HarnessError::Timeout {
                    what: what.to_owned(),
                    after: self.timeout,
                    last_seen,
                    events: if events.is_empty() {
                        "none".to_owned()
                    } else {
                        events
                            .iter()
                            .map(ToString::to_string)
                            .collect::<Vec<_>>()
                            .join(", ")
                    },
                    panics: self.panics(),
                    dropped_events: self.broadcaster.dropped_events(),
                });
            }
            // Whichever comes first: the poll interval on Tokio's clock, or a tick of real
            // time (the only one that comes while a paused clock stands still).
            tokio::select! {
                () = tokio::time::sleep(interval) => {}
                () = ticker.tick() => {}
            }
            let now = self.change_marker();
            interval = if now == seen {
                (interval * 2).min(MAX_POLL_INTERVAL)
            } else {
                POLL_INTERVAL
            };
            seen = now;
        }
    }

    /// The reconciles and error policies of the controllers started here that panicked so
    /// far, as `<controller>: <namespace>/<name>: <panic message>`.
    pub fn panics(&self) -> Vec<String> {
        self.running
            .iter()
            .flat_map(|r| {
                let panics = r.panics.lock().unwrap_or_else(|p| p.into_inner());
                panics
                    .iter()
                    .map(|p| format!("{}: {p}", r.name))
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    /// What changes when the fake's objects or the recorded events do.
    fn change_marker(&self) -> (u64, usize) {
        let events = self.events.lock().unwrap_or_else(|p| p.into_inner()).len();
        (self.fake.resource_version(), events)
    }

    /// Waits until the object `namespace`/`name` of `K` exists on the fake and `condition`
    /// holds for it; returns it. On timeout the error shows the object as last seen (JSON),
    /// or that it did not exist.
    pub async fn wait_for_object<K>(
        &self,
        namespace: Option<&str>,
        name: &str,
        what: &str,
        mut condition: impl FnMut(&K) -> bool,
    ) -> Result<K, HarnessError>
    where
        K: Resource + Serialize + DeserializeOwned,
        K::Scope: 'static,
    {
        let key = match namespace {
            Some(ns) => format!("{} {ns}/{name}", K::KIND),
            None => format!("{} {name}", K::KIND),
        };
        let what = format!("{what} ({key})");
        self.wait_until(&what, |h| match h.fake.object::<K>(namespace, name) {
            Some(obj) if condition(&obj) => Ok(obj),
            Some(obj) => Err(serde_json::to_string(&obj)
                .unwrap_or_else(|e| format!("{key}, which does not serialize: {e}"))),
            None => Err(format!("no {key}")),
        })
        .await
    }

    /// A controller started here that has returned, as the error a wait reports.
    fn stopped_controller(&self, what: &str) -> Option<HarnessError> {
        self.running.iter().find_map(|r| {
            let outcome = r.outcome.lock().unwrap_or_else(|p| p.into_inner());
            let finished = r.task.as_ref().is_some_and(JoinHandle::is_finished);
            let outcome = match outcome.as_ref() {
                Some(Ok(())) => "it returned".to_owned(),
                Some(Err(e)) => e.to_string(),
                None if finished => "its task panicked".to_owned(),
                None => return None,
            };
            Some(HarnessError::Stopped {
                controller: r.name.clone(),
                what: what.to_owned(),
                outcome,
            })
        })
    }

    /// Stops every controller started here (as on a shutdown signal: the reconciles in
    /// flight finish, within each controller's shutdown timeout) and waits for them, then
    /// shuts the informers and the event broadcaster down and waits for their tasks. Returns
    /// the first controller's error, if one failed, or [`HarnessError::Panicked`] if one's
    /// reconciles panicked. Call it at the end of every test: a harness dropped without it
    /// only cancels and aborts what it can (see [`Drop`]); so is one whose `stop` is cut
    /// short (a timeout around it): the controllers still running are aborted.
    pub async fn stop(mut self) -> Result<(), HarnessError> {
        self.cancel.cancel();
        let mut first_error = None;
        for r in &mut self.running {
            // Awaited in place: should this future be dropped, Drop still finds the task.
            let Some(task) = r.task.as_mut() else {
                continue;
            };
            let joined = task.await;
            r.task = None;
            let outcome = r.outcome.lock().unwrap_or_else(|p| p.into_inner()).take();
            let error = match (joined, outcome) {
                (Ok(()), Some(Ok(()))) => None,
                (Ok(()), Some(Err(source))) => Some(HarnessError::Run {
                    controller: r.name.clone(),
                    source: Box::new(source),
                }),
                (Ok(()), None) => Some(HarnessError::Task {
                    controller: r.name.clone(),
                    reason: "it ended without an outcome".to_owned(),
                }),
                (Err(e), _) => Some(HarnessError::Task {
                    controller: r.name.clone(),
                    reason: e.to_string(),
                }),
            };
            let panics = r.panics.lock().unwrap_or_else(|p| p.into_inner()).clone();
            let error = error.or_else(|| {
                (!panics.is_empty()).then(|| HarnessError::Panicked {
                    controller: r.name.clone(),
                    panics,
                })
            });
            if first_error.is_none() {
                first_error = error;
            }
        }
        self.factory.shutdown().await;
        self.watcher.stop();
        self.broadcaster.shutdown().await;
        // Only now: a stop cut short before this point leaves Drop to abort what runs.
        self.stopped = true;
        match first_error {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

impl Drop for TestHarness {
    /// Without [`stop`](TestHarness::stop) (a test that failed early), or with a stop cut
    /// short: cancels the controllers and aborts the tasks still running; the informers and
    /// the event watcher end with the test's runtime.
    fn drop(&mut self) {
        if !self.stopped {
            self.cancel.cancel();
            for r in &self.running {
                if let Some(task) = &r.task {
                    task.abort();
                }
            }
        }
    }
}

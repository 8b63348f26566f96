//! A test harness for controllers: a kctrl-runtime controller against kctrl-fake's in-memory
//! API server, waits on the objects it writes and the events it records, and a clean stop.
//!
//! [`TestHarness`] holds a [`FakeApi`], a [`SharedInformerFactory`] on it and an
//! [`EventBroadcaster`] whose events it keeps. [`start`](TestHarness::start) runs a
//! [`Controller`] built on [`factory`](TestHarness::factory) in a task;
//! [`wait_until`](TestHarness::wait_until) polls a condition on the fake's objects and the
//! recorded events until it holds, failing after a timeout with the last state the condition
//! saw; [`stop`](TestHarness::stop) cancels the controllers, waits for them, shuts the
//! informers and the broadcaster down, and reports a controller that failed.
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
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
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
        "timed out after {after:?} waiting for {what}; last seen: {last_seen}; events recorded: {events}"
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
    task: Option<JoinHandle<()>>,
    outcome: Arc<Mutex<Option<Result<(), RunError>>>>,
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

    /// The same harness waiting at most `timeout` in [`wait_until`](Self::wait_until).
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
        let run = controller.run(reconcile, error_policy, ctx, self.cancel.child_token());
        let task = tokio::spawn(async move {
            let result = run.await;
            *slot.lock().unwrap_or_else(|p| p.into_inner()) = Some(result);
        });
        self.running.push(Running {
            name,
            task: Some(task),
            outcome,
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
        let deadline = tokio::time::Instant::now() + self.timeout;
        // A controller that never idles (one that reconciles its own writes in a loop) keeps
        // a paused clock from advancing: the same timeout in real time ends that wait too.
        let real_deadline = std::time::Instant::now() + self.timeout;
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
            if tokio::time::Instant::now() >= deadline || std::time::Instant::now() >= real_deadline
            {
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
    /// the first controller's error, if one failed. Call it at the end of every test: a
    /// harness dropped without it only cancels and aborts what it can (see [`Drop`]).
    pub async fn stop(mut self) -> Result<(), HarnessError> {
        self.stopped = true;
        self.cancel.cancel();
        let mut first_error = None;
        for r in &mut self.running {
            let Some(task) = r.task.take() else { continue };
            let joined = task.await;
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
            if first_error.is_none() {
                first_error = error;
            }
        }
        self.factory.shutdown().await;
        self.watcher.stop();
        self.broadcaster.shutdown().await;
        match first_error {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

impl Drop for TestHarness {
    /// Without [`stop`](TestHarness::stop) (a test that failed early): cancels the
    /// controllers and aborts their tasks; the informers and the event watcher end with the
    /// test's runtime.
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

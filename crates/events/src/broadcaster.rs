//! The event broadcaster: recorders publish into it without ever waiting, and each watcher —
//! a sink writer, a logger, any handler — receives every event on its own bounded queue,
//! processed by its own task (client-go's `EventBroadcaster` over `watch.Broadcaster` with
//! `DropIfChannelFull`).
//!
//! ```text
//! Recorder::event ──try_send──▶ [queue 1000] ──▶ task: correlate ─▶ EventSink (API)
//!        (never blocks)    └──▶ [queue 1000] ──▶ task: tracing log
//! ```
//!
//! A full queue drops the event for that watcher, counts it
//! ([`EventBroadcaster::dropped_events`]) and logs it: a slow API server never slows the
//! controller's syncs.

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Event, ObjectReference};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use tracing::Level;

use crate::correlator::{CorrelatorOptions, EventCorrelator};
use crate::error::Error;
use crate::event::{EventSource, make_event};
use crate::recorder::{EventRecorder, EventType};
use crate::sink::{DEFAULT_SLEEP_DURATION, EventSink, SinkWriter};
use crate::{Clock, SystemClock};

/// How many events each watcher's queue holds before new ones are dropped
/// (`maxQueuedEvents`).
pub const MAX_QUEUED_EVENTS: usize = 1000;

/// Broadcaster settings (client-go's `BroadcasterOption`s).
#[derive(Clone, Debug)]
pub struct BroadcasterOptions {
    /// Correlator settings for every sink started with
    /// [`EventBroadcaster::start_recording_to_sink`] (`WithCorrelatorOptions`).
    pub correlator: CorrelatorOptions,
    /// The pause between tries of a failed write (`WithSleepDuration`); default 10 s.
    pub sleep_duration: Duration,
    /// Capacity of each watcher's queue; default [`MAX_QUEUED_EVENTS`]. Must be at least 1.
    pub queue_length: usize,
    /// When given, cancelling this token shuts the broadcaster down, as [`EventBroadcaster::shutdown`]
    /// does without waiting (`WithContext`).
    pub cancellation: Option<CancellationToken>,
}

impl Default for BroadcasterOptions {
    fn default() -> Self {
        Self {
            correlator: CorrelatorOptions::default(),
            sleep_duration: DEFAULT_SLEEP_DURATION,
            queue_length: MAX_QUEUED_EVENTS,
            cancellation: None,
        }
    }
}

/// Receives events from recorders and fans them out to watchers: sinks, loggers, handlers.
/// Cheap to clone; clones share the same watchers.
#[derive(Clone)]
pub struct EventBroadcaster {
    shared: Arc<Shared>,
}

struct Shared {
    options: BroadcasterOptions,
    /// Cancelled on shutdown; watcher tasks then drain their queues and stop.
    cancel: CancellationToken,
    state: Mutex<State>,
    dropped: AtomicU64,
}

#[derive(Default)]
struct State {
    next_id: u64,
    watchers: Vec<Slot>,
    /// One receiver per watcher task ever started, to wait for them on shutdown.
    running: Vec<watch::Receiver<()>>,
}

struct Slot {
    id: u64,
    tx: mpsc::Sender<Arc<Event>>,
}

impl fmt::Debug for EventBroadcaster {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EventBroadcaster")
            .field("watchers", &self.shared.lock().watchers.len())
            .field("dropped_events", &self.dropped_events())
            .field("shut_down", &self.is_shut_down())
            .finish()
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues `event` for every watcher without waiting; a full queue drops it.
    fn publish(&self, event: Event) -> Result<(), Error> {
        let event = Arc::new(event);
        let state = self.lock();
        if self.cancel.is_cancelled() {
            return Err(Error::ShutDown);
        }
        for slot in &state.watchers {
            match slot.tx.try_send(event.clone()) {
                Ok(()) => {}
                Err(mpsc::error::TrySendError::Full(_)) => {
                    let total = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
                    tracing::error!(
                        namespace = event.metadata.namespace.as_deref().unwrap_or(""),
                        name = event.involved_object.name.as_deref().unwrap_or(""),
                        reason = event.reason.as_deref().unwrap_or(""),
                        message = event.message.as_deref().unwrap_or(""),
                        dropped_total = total,
                        "unable to record event: too many queued events, dropped event"
                    );
                }
                // The watcher's task has ended (its handler panicked); nothing to deliver to.
                Err(mpsc::error::TrySendError::Closed(_)) => {}
            }
        }
        Ok(())
    }
}

impl Default for EventBroadcaster {
    fn default() -> Self {
        Self::new()
    }
}

impl EventBroadcaster {
    /// A broadcaster with client-go's defaults (`record.NewBroadcaster()`).
    pub fn new() -> Self {
        Self::build(BroadcasterOptions::default())
    }

    /// A broadcaster with these options; out-of-range options are named in the error.
    pub fn with_options(options: BroadcasterOptions) -> Result<Self, Error> {
        options.correlator.validate()?;
        if options.queue_length == 0 {
            return Err(Error::InvalidOption {
                option: "BroadcasterOptions::queue_length",
                reason: "a watcher queue must hold at least one event".to_owned(),
            });
        }
        Ok(Self::build(options))
    }

    fn build(options: BroadcasterOptions) -> Self {
        let cancel = match &options.cancellation {
            Some(parent) => parent.child_token(),
            None => CancellationToken::new(),
        };
        Self {
            shared: Arc::new(Shared {
                options,
                cancel,
                state: Mutex::new(State::default()),
                dropped: AtomicU64::new(0),
            }),
        }
    }

    /// A recorder publishing events from `source` into this broadcaster (`NewRecorder`).
    pub fn new_recorder(&self, source: EventSource) -> Recorder {
        Recorder {
            shared: self.shared.clone(),
            source: Arc::new(source),
            clock: Arc::new(SystemClock),
        }
    }

    /// How many event deliveries were dropped because a watcher's queue was full (an event
    /// dropped for two watchers counts twice).
    pub fn dropped_events(&self) -> u64 {
        self.shared.dropped.load(Ordering::Relaxed)
    }

    /// Whether [`shutdown`](Self::shutdown) was called or the cancellation token given in the
    /// options was cancelled.
    pub fn is_shut_down(&self) -> bool {
        self.shared.cancel.is_cancelled()
    }

    /// Writes every event to `sink` through a fresh [`EventCorrelator`], on a task of its own
    /// (`StartRecordingToSink`). Must be called within a Tokio runtime.
    pub fn start_recording_to_sink<S: EventSink>(&self, sink: S) -> Result<EventWatcher, Error> {
        let writer = SinkWriter {
            sink,
            correlator: EventCorrelator::with_options(self.shared.options.correlator.clone())?,
            sleep: self.shared.options.sleep_duration,
            cancel: self.shared.cancel.clone(),
        };
        self.start(SinkHandler(writer))
    }

    /// Calls `handler` with every event, on a task of its own (`StartEventWatcher`). Must be
    /// called within a Tokio runtime.
    pub fn start_event_watcher<F>(&self, handler: F) -> Result<EventWatcher, Error>
    where
        F: FnMut(&Event) + Send + 'static,
    {
        self.start(FnHandler(handler))
    }

    /// Logs every event through `tracing` at `level`, with its object, type, reason and
    /// message (`StartStructuredLogging`; kube-controller-manager's Deployment controller
    /// logs at klog level 3, i.e. DEBUG).
    pub fn start_logging(&self, level: Level) -> Result<EventWatcher, Error> {
        self.start_event_watcher(move |e| log_event(level, e))
    }

    fn start<H: Handler>(&self, handler: H) -> Result<EventWatcher, Error> {
        let runtime =
            tokio::runtime::Handle::try_current().map_err(|e| Error::NoRuntime(e.to_string()))?;
        let (tx, rx) = mpsc::channel(self.shared.options.queue_length);
        let (done_tx, done_rx) = watch::channel(());
        let id = {
            let mut state = self.shared.lock();
            if self.shared.cancel.is_cancelled() {
                return Err(Error::ShutDown);
            }
            let id = state.next_id;
            state.next_id += 1;
            state.watchers.push(Slot { id, tx });
            // Forget watchers that have finished.
            state.running.retain(|r| r.has_changed().is_ok());
            state.running.push(done_rx.clone());
            id
        };
        runtime.spawn(run_watcher(
            rx,
            handler,
            self.shared.cancel.clone(),
            done_tx,
        ));
        Ok(EventWatcher {
            id,
            shared: self.shared.clone(),
            done: done_rx,
        })
    }

    /// Shuts down (`Shutdown`): recorders' events are refused from now on, watchers stop
    /// taking new events, and each event already queued gets one more try (no retry sleeps).
    /// Returns when every watcher task has finished. To bound the wait, wrap it in
    /// `tokio::time::timeout`.
    pub async fn shutdown(&self) {
        let running = {
            let mut state = self.shared.lock();
            self.shared.cancel.cancel();
            state.watchers.clear();
            std::mem::take(&mut state.running)
        };
        for done in running {
            wait_done(done).await;
        }
    }
}

async fn wait_done(mut done: watch::Receiver<()>) {
    // The sender is never written to: `changed` fails once the task has dropped it.
    while done.changed().await.is_ok() {}
}

/// A running watcher: a sink writer, logger or handler task (client-go's `watch.Interface`
/// returned by the `Start*` methods). Dropping the handle leaves the watcher running until
/// [`stop`](Self::stop) or [`EventBroadcaster::shutdown`].
#[derive(Debug)]
pub struct EventWatcher {
    id: u64,
    shared: Arc<Shared>,
    done: watch::Receiver<()>,
}

impl fmt::Debug for Shared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Shared").finish_non_exhaustive()
    }
}

impl EventWatcher {
    /// Stops delivering new events to this watcher; the ones already queued are still
    /// handled, then its task ends.
    pub fn stop(&self) {
        self.shared.lock().watchers.retain(|s| s.id != self.id);
    }

    /// Waits until this watcher's task has ended (after [`stop`](Self::stop) or
    /// [`EventBroadcaster::shutdown`]).
    pub async fn stopped(&self) {
        wait_done(self.done.clone()).await;
    }

    /// Whether this watcher's task has ended.
    pub fn is_stopped(&self) -> bool {
        self.done.has_changed().is_err()
    }
}

/// What a watcher task does with each event.
trait Handler: Send + 'static {
    fn handle(&mut self, event: Arc<Event>) -> impl Future<Output = ()> + Send;
}

struct FnHandler<F>(F);

impl<F: FnMut(&Event) + Send + 'static> Handler for FnHandler<F> {
    fn handle(&mut self, event: Arc<Event>) -> impl Future<Output = ()> + Send {
        (self.0)(&event);
        std::future::ready(())
    }
}

struct SinkHandler<S>(SinkWriter<S>);

impl<S: EventSink> Handler for SinkHandler<S> {
    async fn handle(&mut self, event: Arc<Event>) {
        self.0.record(&event).await;
    }
}

async fn run_watcher<H: Handler>(
    mut rx: mpsc::Receiver<Arc<Event>>,
    mut handler: H,
    cancel: CancellationToken,
    _done: watch::Sender<()>,
) {
    loop {
        tokio::select! {
            biased;
            event = rx.recv() => match event {
                Some(event) => handler.handle(event).await,
                None => return,
            },
            () = cancel.cancelled() => break,
        }
    }
    // Shut down: take no more events, handle the ones already queued.
    rx.close();
    while let Some(event) = rx.recv().await {
        handler.handle(event).await;
    }
}

fn log_event(level: Level, e: &Event) {
    let o = &e.involved_object;
    let namespace = o.namespace.as_deref().unwrap_or("");
    let name = o.name.as_deref().unwrap_or("");
    let field_path = o.field_path.as_deref().unwrap_or("");
    let kind = o.kind.as_deref().unwrap_or("");
    let api_version = o.api_version.as_deref().unwrap_or("");
    let type_ = e.type_.as_deref().unwrap_or("");
    let reason = e.reason.as_deref().unwrap_or("");
    let message = e.message.as_deref().unwrap_or("");
    macro_rules! emit {
        ($lvl:expr) => {
            tracing::event!(
                $lvl,
                namespace,
                name,
                field_path,
                kind,
                api_version,
                r#type = type_,
                reason,
                message,
                "Event occurred"
            )
        };
    }
    match level {
        Level::ERROR => emit!(Level::ERROR),
        Level::WARN => emit!(Level::WARN),
        Level::INFO => emit!(Level::INFO),
        Level::DEBUG => emit!(Level::DEBUG),
        _ => emit!(Level::TRACE),
    }
}

/// Records events into an [`EventBroadcaster`] for one [`EventSource`] (client-go's
/// recorder from `NewRecorder`). Cheap to clone; never blocks.
#[derive(Clone)]
pub struct Recorder {
    shared: Arc<Shared>,
    source: Arc<EventSource>,
    clock: Arc<dyn Clock>,
}

impl fmt::Debug for Recorder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Recorder")
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

impl Recorder {
    /// The same recorder reading event timestamps from `clock` (for tests).
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// The source this recorder reports as.
    pub fn source(&self) -> &EventSource {
        &self.source
    }

    /// Records an event carrying `annotations` (`AnnotatedEventf`).
    pub fn annotated_event(
        &self,
        object: &ObjectReference,
        annotations: BTreeMap<String, String>,
        type_: EventType,
        reason: &str,
        message: &str,
    ) {
        self.generate(object, Some(annotations), type_, reason, message);
    }

    fn generate(
        &self,
        object: &ObjectReference,
        annotations: Option<BTreeMap<String, String>>,
        type_: EventType,
        reason: &str,
        message: &str,
    ) {
        let event = make_event(
            object,
            annotations,
            type_,
            reason,
            message,
            &self.source,
            self.clock.now(),
        );
        if let Err(e) = self.shared.publish(event) {
            tracing::error!(
                namespace = object.namespace.as_deref().unwrap_or(""),
                name = object.name.as_deref().unwrap_or(""),
                reason,
                error = %e,
                "unable to record event (will not retry)"
            );
        }
    }
}

impl EventRecorder for Recorder {
    fn event(&self, object: &ObjectReference, type_: EventType, reason: &str, message: &str) {
        self.generate(object, None, type_, reason, message);
    }
}

#[cfg(test)]
#[path = "broadcaster_tests.rs"]
mod tests;

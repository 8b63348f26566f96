//! Recording core/v1 Events the way client-go's `tools/record` does: controllers call a
//! non-blocking [`EventRecorder`]; an [`EventBroadcaster`] fans events out to watchers; a sink
//! writer correlates them — aggregating similar ones, counting repeats, filtering spam — and
//! writes them to the API with retries.
//!
//! The data path, in file order:
//!
//! ```text
//! recorder.rs   EventRecorder::event(object, type, reason, message)
//! event.rs        └─ builds the Event: <name>.<hex nanos>, namespace, count 1, source
//! broadcaster.rs  └─ queues it (1000 per watcher, dropped when full — never blocks)
//! correlator.rs      └─ per sink: aggregate ─▶ de-duplicate ─▶ spam filter
//! sink.rs               └─ EventSink: create, or patch a repeat; retry 12 × 10 s
//! ```
//!
//! # Example
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use k8s_openapi::api::apps::v1::Deployment;
//! use k8s_openapi::api::core::v1::Event;
//! use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
//! use kctrl_events::{
//!     ApiEventSink, EventBroadcaster, EventRecorder, EventSource, EventType, object_reference,
//! };
//!
//! let fake = kctrl_fake::FakeApi::new(); // or a real kctrl_client::Client
//! let broadcaster = EventBroadcaster::new();
//! broadcaster.start_recording_to_sink(ApiEventSink::new(fake.client()))?;
//! broadcaster.start_logging(tracing::Level::DEBUG)?;
//! let recorder = broadcaster.new_recorder(EventSource::new("deployment-controller"));
//!
//! let web = Deployment {
//!     metadata: ObjectMeta {
//!         name: Some("web".into()),
//!         namespace: Some("prod".into()),
//!         ..Default::default()
//!     },
//!     ..Default::default()
//! };
//! let scaled = "Scaled up replica set web-5d4f8 from 0 to 3";
//! recorder.event(&object_reference(&web), EventType::Normal, "ScalingReplicaSet", scaled);
//! recorder.event(&object_reference(&web), EventType::Normal, "ScalingReplicaSet", scaled);
//!
//! // Shutting down writes what is queued, then stops the tasks.
//! broadcaster.shutdown().await;
//! let events = fake.objects::<Event>();
//! assert_eq!(events.len(), 1, "the repeat patched the first event");
//! assert_eq!(events[0].count, Some(2));
//! assert_eq!(events[0].reason.as_deref(), Some("ScalingReplicaSet"));
//! assert_eq!(events[0].reporting_component.as_deref(), Some("deployment-controller"));
//! # Ok(()) }
//! ```
//!
//! # client-go names
//!
//! | client-go `tools/record`                          | kctrl-events                                  |
//! |---------------------------------------------------|-----------------------------------------------|
//! | `record.NewBroadcaster()`                         | [`EventBroadcaster::new`]                     |
//! | `WithCorrelatorOptions`, `WithSleepDuration`, `WithContext` | [`BroadcasterOptions`] fields, [`EventBroadcaster::with_options`] |
//! | `NewRecorder(scheme, v1.EventSource{Component})`  | [`EventBroadcaster::new_recorder`]`(`[`EventSource::new`]`(..))` |
//! | `EventRecorder.Event` / `Eventf`                  | [`EventRecorderExt::event_for`] on the object, [`EventRecorder::event`] on a reference (with `format!`) |
//! | `AnnotatedEventf`                                 | [`Recorder::annotated_event`]                 |
//! | `v1.EventTypeNormal` / `v1.EventTypeWarning`      | [`EventType::Normal`] / [`EventType::Warning`] |
//! | `reference.GetReference(scheme, obj)`             | [`object_reference`]                          |
//! | `StartRecordingToSink(&v1core.EventSinkImpl{..})` | [`EventBroadcaster::start_recording_to_sink`]`(`[`ApiEventSink::new`]`(client))` |
//! | `StartStructuredLogging(v)` / `StartLogging`      | [`EventBroadcaster::start_logging`]`(level)`  |
//! | `StartEventWatcher(func(*v1.Event))`              | [`EventBroadcaster::start_event_watcher`]     |
//! | `watch.Interface.Stop()`                          | [`EventWatcher::stop`]                        |
//! | `Shutdown()`                                      | [`EventBroadcaster::shutdown`]`().await`      |
//! | `EventSink{Create, Patch}`                        | [`EventSink`]                                 |
//! | `EventCorrelator`, `NewEventCorrelatorWithOptions` | [`EventCorrelator`], [`EventCorrelator::with_options`] |
//! | `EventCorrelate` / `UpdateState`                  | [`EventCorrelator::correlate`] / [`EventCorrelator::update_state`] |
//! | `CorrelatorOptions`                               | [`CorrelatorOptions`]                         |
//! | `EventAggregatorByReasonFunc` / `...MessageFunc`  | [`aggregate_by_reason`] / [`aggregate_by_reason_message`] |
//! | `util.GenerateEventName`                          | [`generate_event_name`]                       |
//! | `record.FakeRecorder`                             | [`RecordingEventRecorder`]                    |
//! | `clock.PassiveClock`, `testing.FakeClock`, `SimpleIntervalClock` | [`Clock`], [`FakeClock`], [`IntervalClock`] (from [`kctrl_client::clock`]) |
//!
//! # Differences from client-go
//!
//! * Event types are an enum, so an invalid type cannot be recorded (client-go checks the
//!   string and drops the event); [`EventType::from_str`](std::str::FromStr) checks strings.
//! * Recorders take an `ObjectReference` ([`object_reference`] builds one) instead of any
//!   object plus a scheme.
//! * Every watcher has its own queue of [`MAX_QUEUED_EVENTS`], filled directly by the
//!   recorder; client-go has one shared incoming queue of that size in front of the
//!   per-watcher ones. Either way a full queue drops events and never blocks the caller;
//!   here every dropped delivery is counted in [`EventBroadcaster::dropped_events`].
//! * [`EventBroadcaster::shutdown`] lets each queued event have one more try and waits for
//!   the watcher tasks to end.
//! * When the aggregation threshold is reached, client-go forgets an arbitrary message of the
//!   group; this crate forgets the newest one, so the outcome does not depend on hash order.

#![forbid(unsafe_code)]

mod broadcaster;
mod correlator;
mod error;
mod event;
mod lru;
mod recorder;
mod sink;
#[cfg(test)]
mod test_support;

pub use broadcaster::{
    BroadcasterOptions, EventBroadcaster, EventWatcher, MAX_QUEUED_EVENTS, Recorder,
};
pub use correlator::{
    AGGREGATE_MESSAGE_PREFIX, AggregatorKeyFn, AggregatorMessageFn, Correlation, CorrelatorOptions,
    DEFAULT_AGGREGATE_INTERVAL, DEFAULT_AGGREGATE_MAX_EVENTS, DEFAULT_LRU_CACHE_SIZE,
    DEFAULT_SPAM_BURST, DEFAULT_SPAM_QPS, EventCorrelator, SpamKeyFn, aggregate_by_reason,
    aggregate_by_reason_message, event_key, spam_key,
};
pub use error::Error;
pub use event::{
    DEFAULT_NAMESPACE, EventSource, generate_event_name, is_dns_subdomain, object_reference,
};
/// The clocks the pipeline reads event timestamps and windows from, shared with the rest of
/// kctrl ([`kctrl_client::clock`]); re-exported here so `kctrl_events::Clock` keeps working.
pub use kctrl_client::clock::{Clock, FakeClock, IntervalClock, SystemClock};
pub use recorder::{
    EventRecorder, EventRecorderExt, EventType, RecordedEvent, RecordingEventRecorder,
    TracingEventRecorder,
};
pub use sink::{
    ApiEventSink, DEFAULT_SLEEP_DURATION, EventSink, MAX_TRIES_PER_EVENT,
    NAMESPACE_TERMINATING_CAUSE, SinkError,
};

//! Events the controller records on Deployments, behind a small trait: the real recorder (an
//! events pipeline writing to the API) comes later; [`RecordingEventRecorder`] keeps them in
//! memory for tests (client-go's `record.FakeRecorder`).

use std::fmt;
use std::sync::Mutex;

use k8s_openapi::api::core::v1::ObjectReference;

/// An event's type (`v1.EventTypeNormal` / `v1.EventTypeWarning`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    /// Something expected happened.
    Normal,
    /// Something went wrong or needs attention.
    Warning,
}

impl fmt::Display for EventType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        })
    }
}

/// Records events about an object (client-go's `record.EventRecorder.Event`).
pub trait EventRecorder: Send + Sync {
    /// Records one event about `object`.
    fn event(&self, object: &ObjectReference, type_: EventType, reason: &str, message: &str);
}

/// One recorded event.
#[derive(Clone, Debug, PartialEq)]
pub struct RecordedEvent {
    /// The object the event is about.
    pub object: ObjectReference,
    /// Normal or Warning.
    pub type_: EventType,
    /// The machine-readable reason, e.g. `ScalingReplicaSet`.
    pub reason: String,
    /// The human-readable message.
    pub message: String,
}

impl fmt::Display for RecordedEvent {
    /// `"<type> <reason> <message>"`, as client-go's `FakeRecorder` formats events.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {} {}", self.type_, self.reason, self.message)
    }
}

/// An [`EventRecorder`] that keeps every event in memory, in order.
#[derive(Debug, Default)]
pub struct RecordingEventRecorder {
    events: Mutex<Vec<RecordedEvent>>,
}

impl RecordingEventRecorder {
    /// An empty recorder.
    pub fn new() -> Self {
        Self::default()
    }

    /// The events recorded so far.
    pub fn events(&self) -> Vec<RecordedEvent> {
        self.events
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The events as `"<type> <reason> <message>"` strings.
    pub fn strings(&self) -> Vec<String> {
        self.events().iter().map(ToString::to_string).collect()
    }
}

impl EventRecorder for RecordingEventRecorder {
    fn event(&self, object: &ObjectReference, type_: EventType, reason: &str, message: &str) {
        self.events
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(RecordedEvent {
                object: object.clone(),
                type_,
                reason: reason.to_owned(),
                message: message.to_owned(),
            });
    }
}

/// An [`EventRecorder`] that only logs each event through `tracing` (Normal at INFO, Warning
/// at WARN, with the object's namespace and name): a stand-in until events are written to
/// the API.
#[derive(Debug, Default)]
pub struct TracingEventRecorder;

impl EventRecorder for TracingEventRecorder {
    fn event(&self, object: &ObjectReference, type_: EventType, reason: &str, message: &str) {
        let namespace = object.namespace.as_deref().unwrap_or("");
        let name = object.name.as_deref().unwrap_or("");
        let kind = object.kind.as_deref().unwrap_or("");
        match type_ {
            EventType::Normal => {
                tracing::info!(namespace, name, kind, reason, "event: {message}");
            }
            EventType::Warning => {
                tracing::warn!(namespace, name, kind, reason, "event: {message}");
            }
        }
    }
}

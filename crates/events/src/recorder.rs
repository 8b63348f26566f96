//! The recording API a controller calls: [`EventRecorder`] and its event types, plus two
//! recorders that need no broadcaster — [`RecordingEventRecorder`] keeps events in memory for
//! tests, [`TracingEventRecorder`] only logs them.
//!
//! The recorder that writes Event objects to the API is [`crate::Recorder`], made by
//! [`crate::EventBroadcaster::new_recorder`].

use std::fmt;
use std::str::FromStr;
use std::sync::Mutex;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::{Metadata, Resource};

use crate::error::Error;

/// An event's type: `Normal` or `Warning`, the only two core/v1 defines.
///
/// client-go takes the type as a string and drops events whose type is neither; here the
/// enum makes any other type unrepresentable, so a recorded event is valid by construction.
/// Strings from outside (flags, configuration) are checked by [`EventType::from_str`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EventType {
    /// Something expected happened.
    Normal,
    /// Something went wrong or needs attention.
    Warning,
}

impl EventType {
    /// The type as the API spells it: `"Normal"` or `"Warning"`.
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

impl fmt::Display for EventType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for EventType {
    type Err = Error;

    /// Parses `"Normal"` or `"Warning"` (exact case, as the API compares them); anything else
    /// is [`Error::InvalidEventType`].
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "Normal" => Ok(EventType::Normal),
            "Warning" => Ok(EventType::Warning),
            other => Err(Error::InvalidEventType(other.to_owned())),
        }
    }
}

/// Records events about an object (client-go's `record.EventRecorder.Event`).
///
/// Implementations must not block: controllers call this from their sync loops.
pub trait EventRecorder: Send + Sync {
    /// Records one event about `object`.
    fn event(&self, object: &ObjectReference, type_: EventType, reason: &str, message: &str);
}

/// Recording an event about an object itself rather than a reference to it, as client-go's
/// `EventRecorder.Event(object, ...)` takes the object: the reference is built with
/// [`object_reference`](crate::object_reference). Implemented for every [`EventRecorder`],
/// `dyn EventRecorder` included.
///
/// ```
/// use k8s_openapi::api::apps::v1::Deployment;
/// use kctrl_events::{EventRecorderExt, EventType, RecordingEventRecorder};
///
/// let recorder = RecordingEventRecorder::new();
/// let mut d = Deployment::default();
/// d.metadata.name = Some("web".into());
/// d.metadata.namespace = Some("default".into());
/// recorder.event_for(&d, EventType::Normal, "Synced", "Deployment synced");
/// assert_eq!(recorder.strings(), ["Normal Synced Deployment synced"]);
/// assert_eq!(recorder.events()[0].object.kind.as_deref(), Some("Deployment"));
/// ```
pub trait EventRecorderExt: EventRecorder {
    /// Records one event about `obj` (its apiVersion, kind, namespace, name, uid and
    /// resourceVersion as the event's involved object).
    fn event_for<K>(&self, obj: &K, type_: EventType, reason: &str, message: &str)
    where
        K: Resource + Metadata<Ty = ObjectMeta>,
    {
        self.event(&crate::object_reference(obj), type_, reason, message);
    }
}

impl<R: EventRecorder + ?Sized> EventRecorderExt for R {}

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

/// An [`EventRecorder`] that keeps every event in memory, in order (client-go's
/// `record.FakeRecorder`).
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
/// at WARN, with the object's namespace and name); nothing is written to the API.
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_type_round_trips_and_rejects_unknown_types() {
        for t in [EventType::Normal, EventType::Warning] {
            assert_eq!(t.as_str().parse::<EventType>().unwrap(), t);
        }
        let err = "Info".parse::<EventType>().unwrap_err();
        assert!(matches!(&err, Error::InvalidEventType(t) if t == "Info"));
        assert!(err.to_string().contains("\"Info\""), "{err}");
        // The API compares types case-sensitively.
        assert!("normal".parse::<EventType>().is_err());
    }

    #[test]
    fn recording_recorder_keeps_events_in_order() {
        let r = RecordingEventRecorder::new();
        let obj = ObjectReference {
            name: Some("web".into()),
            ..Default::default()
        };
        r.event(&obj, EventType::Normal, "ScalingReplicaSet", "Scaled up");
        r.event(&obj, EventType::Warning, "SelectingAll", "bad selector");
        assert_eq!(
            r.strings(),
            [
                "Normal ScalingReplicaSet Scaled up",
                "Warning SelectingAll bad selector"
            ]
        );
        assert_eq!(r.events()[1].object, obj);
    }
}

//! Helpers shared by the unit tests: event fixtures and the field-by-field comparison the
//! upstream tests use.

use std::collections::HashMap;
use std::sync::Mutex;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::Value;
use tokio::sync::mpsc;

use crate::correlator::event_key;
use crate::sink::{EventSink, SinkError};

pub(crate) fn object_ref(kind: &str, name: &str, namespace: &str) -> ObjectReference {
    ObjectReference {
        kind: Some(kind.into()),
        name: Some(name.into()),
        namespace: Some(namespace.into()),
        uid: Some("C934D34AFB20242".into()),
        api_version: Some("version".into()),
        field_path: Some("spec.containers{mycontainer}".into()),
        ..Default::default()
    }
}

pub(crate) fn make_event(reason: &str, message: &str, object: ObjectReference) -> Event {
    let now = Time(Timestamp::now());
    Event {
        reason: Some(reason.into()),
        message: Some(message.into()),
        involved_object: object,
        source: Some(EventSource {
            component: Some("kubelet".into()),
            host: Some("kublet.node1".into()),
        }),
        count: Some(1),
        first_timestamp: Some(now.clone()),
        last_timestamp: Some(now),
        type_: Some("Normal".into()),
        ..Default::default()
    }
}

pub(crate) fn with_count(mut e: Event, count: i32) -> Event {
    e.count = Some(count);
    e
}

/// Compares `actual` with `expected` as upstream's `validateEvent`: timestamps must be set,
/// equal for a single occurrence and different for a repeat; the name must start with the
/// expected one; every other field must match exactly (the reporting component is not
/// compared).
pub(crate) fn validate_event(what: &str, actual: &Event, expected: &Event) {
    let first = actual.first_timestamp.clone();
    let last = actual.last_timestamp.clone();
    assert!(
        first.is_some() && last.is_some(),
        "{what}: timestamps not set: {actual:?}"
    );
    let count = expected.count.unwrap_or(0);
    if first == last {
        assert!(
            count <= 1,
            "{what}: first and last timestamps must differ for a repeated event: {actual:?}"
        );
    } else {
        assert!(
            count != 1,
            "{what}: first and last timestamps must be equal for a single event: {actual:?}"
        );
    }
    let name = actual.metadata.name.clone().unwrap_or_default();
    let prefix = expected.metadata.name.clone().unwrap_or_default();
    assert!(
        name.starts_with(&prefix),
        "{what}: name {name:?} does not start with {prefix:?}"
    );
    let mut normalized = actual.clone();
    normalized.first_timestamp = expected.first_timestamp.clone();
    normalized.last_timestamp = expected.last_timestamp.clone();
    normalized.reporting_component = expected.reporting_component.clone();
    normalized.metadata.name = expected.metadata.name.clone();
    assert_eq!(&normalized, expected, "{what}");
}

type CreateFn = Box<dyn Fn(&Event) -> Result<Event, SinkError> + Send + Sync>;
type PatchFn = Box<dyn Fn(&Event, &Value) -> Result<Event, SinkError> + Send + Sync>;

/// A sink answering from closures (upstream's `testEventSink`); by default every write
/// succeeds and returns the event as given.
pub(crate) struct FnSink {
    pub(crate) create: CreateFn,
    pub(crate) patch: PatchFn,
}

impl Default for FnSink {
    fn default() -> Self {
        Self {
            create: Box::new(|e| Ok(e.clone())),
            patch: Box::new(|e, _| Ok(e.clone())),
        }
    }
}

impl EventSink for FnSink {
    async fn create(&self, event: &Event) -> Result<Event, SinkError> {
        (self.create)(event)
    }

    async fn patch(&self, event: &Event, patch: &Value) -> Result<Event, SinkError> {
        (self.patch)(event, patch)
    }
}

/// What a [`MemorySink`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Op {
    Created,
    Patched,
}

/// A sink storing events in memory by their correlation key and reporting each write on a
/// channel (upstream's `OnCreateFactory` / `OnPatchFactory`). Patches are applied to the
/// stored copy key by key, which is what a strategic merge does with the scalar fields the
/// correlator patches.
pub(crate) struct MemorySink {
    stored: Mutex<HashMap<String, Event>>,
    writes: mpsc::UnboundedSender<(Op, Event)>,
}

impl MemorySink {
    pub(crate) fn new() -> (Self, mpsc::UnboundedReceiver<(Op, Event)>) {
        let (writes, rx) = mpsc::unbounded_channel();
        (
            Self {
                stored: Mutex::new(HashMap::new()),
                writes,
            },
            rx,
        )
    }
}

impl EventSink for MemorySink {
    async fn create(&self, event: &Event) -> Result<Event, SinkError> {
        self.stored
            .lock()
            .unwrap()
            .insert(event_key(event), event.clone());
        let _ = self.writes.send((Op::Created, event.clone()));
        Ok(event.clone())
    }

    async fn patch(&self, event: &Event, patch: &Value) -> Result<Event, SinkError> {
        let stored = self.stored.lock().unwrap().get(&event_key(event)).cloned();
        let Some(stored) = stored else {
            return Err(SinkError::Failed("no such event in the test sink".into()));
        };
        let mut doc = serde_json::to_value(&stored).unwrap();
        for (k, v) in patch.as_object().expect("patch is an object") {
            doc[k] = v.clone();
        }
        let patched: Event = serde_json::from_value(doc).unwrap();
        let _ = self.writes.send((Op::Patched, patched.clone()));
        Ok(patched)
    }
}

//! Events the controller records on Deployments. The recording API lives in
//! [`kctrl_events`]; it is re-exported here so the controller's modules and its users keep
//! one path. The controller takes any [`EventRecorder`]: in production a
//! [`kctrl_events::Recorder`] from an [`kctrl_events::EventBroadcaster`] writing Event objects
//! to the API, in tests a [`RecordingEventRecorder`].

pub use kctrl_events::{
    EventRecorder, EventType, RecordedEvent, RecordingEventRecorder, TracingEventRecorder,
};

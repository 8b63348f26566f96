//! Where events end up: the [`EventSink`] trait, its implementation over the API
//! ([`ApiEventSink`]), and the writer that takes each broadcast event through the correlator
//! to the sink with client-go's retry policy (`recordToSink`).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Event;
use kctrl_client::{Api, ApiError, Client, Patch, PatchParams, PostParams};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::correlator::{Correlation, EventCorrelator};

/// How many times one event is tried before it is given up (`maxTriesPerEvent`).
pub const MAX_TRIES_PER_EVENT: u32 = 12;
/// The pause between tries (`defaultSleepDuration`); the first pause is a random fraction of
/// it, so that many clients do not retry in step after an outage.
pub const DEFAULT_SLEEP_DURATION: Duration = Duration::from_secs(10);

/// The `Status` cause type the API server gives when an object is created in a namespace
/// being deleted.
pub const NAMESPACE_TERMINATING_CAUSE: &str = "NamespaceTerminating";

/// Why a sink could not store an event. The writer retries only [`SinkError::Failed`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SinkError {
    /// The API server answered with a failure `Status`; the same request would be rejected
    /// again, so it is not retried.
    #[error("the API server rejected the event: {0}")]
    Rejected(Box<ApiError>),
    /// The request could not be built from the event (for example, it has no namespace); it
    /// is not retried.
    #[error("cannot build the request for the event: {0}")]
    InvalidRequest(String),
    /// Anything else — transport failures, timeouts, unreadable answers: retried.
    #[error("writing the event failed: {0}")]
    Failed(#[source] Box<dyn std::error::Error + Send + Sync>),
}

impl SinkError {
    /// Whether the server said the event does not exist (HTTP 404).
    pub fn is_not_found(&self) -> bool {
        matches!(self, SinkError::Rejected(e) if e.code == 404)
    }

    /// Whether the server said the event already exists.
    pub fn is_already_exists(&self) -> bool {
        matches!(self, SinkError::Rejected(e) if e.is_already_exists())
    }

    /// Whether the server refused because the namespace is being deleted.
    pub fn is_namespace_terminating(&self) -> bool {
        let SinkError::Rejected(e) = self else {
            return false;
        };
        e.status
            .details
            .as_ref()
            .and_then(|d| d.causes.as_ref())
            .is_some_and(|causes| {
                causes
                    .iter()
                    .any(|c| c.reason.as_deref() == Some(NAMESPACE_TERMINATING_CAUSE))
            })
    }

    /// Whether writing the event again could succeed.
    pub fn is_retryable(&self) -> bool {
        matches!(self, SinkError::Failed(_))
    }
}

impl From<kctrl_client::Error> for SinkError {
    fn from(e: kctrl_client::Error) -> Self {
        if let Some(api) = e.api_error() {
            return SinkError::Rejected(Box::new(api.clone()));
        }
        match e {
            kctrl_client::Error::InvalidRequest(msg) => SinkError::InvalidRequest(msg),
            other => SinkError::Failed(Box::new(other)),
        }
    }
}

/// Stores events (client-go's `record.EventSink`). Each call must write to the namespace in
/// the event's metadata.
pub trait EventSink: Send + Sync + 'static {
    /// Creates `event`, returning what the server stored.
    fn create(&self, event: &Event) -> impl Future<Output = Result<Event, SinkError>> + Send;

    /// Applies the strategic-merge `patch` to the existing event named in `event`'s metadata,
    /// returning what the server stored.
    fn patch(
        &self,
        event: &Event,
        patch: &Value,
    ) -> impl Future<Output = Result<Event, SinkError>> + Send;
}

impl<S: EventSink> EventSink for Arc<S> {
    fn create(&self, event: &Event) -> impl Future<Output = Result<Event, SinkError>> + Send {
        (**self).create(event)
    }

    fn patch(
        &self,
        event: &Event,
        patch: &Value,
    ) -> impl Future<Output = Result<Event, SinkError>> + Send {
        (**self).patch(event, patch)
    }
}

/// An [`EventSink`] writing core/v1 Events through a [`Client`] (client-go's
/// `v1core.EventSinkImpl` over `CoreV1().Events("")`): creates with POST and repeats with a
/// strategic-merge PATCH, each in the event's own namespace.
#[derive(Clone, Debug)]
pub struct ApiEventSink {
    client: Client,
}

impl ApiEventSink {
    /// A sink writing with `client`.
    pub fn new(client: Client) -> Self {
        Self { client }
    }

    fn api_for(&self, verb: &str, event: &Event) -> Result<Api<Event>, SinkError> {
        match event.metadata.namespace.as_deref() {
            Some(ns) if !ns.is_empty() => {
                // The answers are only checked, never read for managedFields.
                Ok(Api::namespaced(self.client.clone(), ns).without_managed_fields())
            }
            _ => Err(SinkError::InvalidRequest(format!(
                "{verb} event {:?}: the event has no metadata.namespace",
                event.metadata.name.as_deref().unwrap_or("")
            ))),
        }
    }
}

impl EventSink for ApiEventSink {
    async fn create(&self, event: &Event) -> Result<Event, SinkError> {
        let api = self.api_for("create", event)?;
        Ok(api.create(&PostParams::default(), event).await?)
    }

    async fn patch(&self, event: &Event, patch: &Value) -> Result<Event, SinkError> {
        let api = self.api_for("patch", event)?;
        let name = match event.metadata.name.as_deref() {
            Some(n) if !n.is_empty() => n,
            _ => {
                return Err(SinkError::InvalidRequest(
                    "patch event: the event has no metadata.name".to_owned(),
                ));
            }
        };
        Ok(api
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Strategic(patch.clone()),
            )
            .await?)
    }
}

/// Writes broadcast events to one sink: correlate, skip spam, create or patch, retry.
pub(crate) struct SinkWriter<S> {
    pub(crate) sink: S,
    pub(crate) correlator: EventCorrelator,
    pub(crate) sleep: Duration,
    pub(crate) cancel: CancellationToken,
}

impl<S: EventSink> SinkWriter<S> {
    /// Correlates `event` and writes the result, trying up to [`MAX_TRIES_PER_EVENT`] times
    /// while the failures are retryable. After shutdown (cancellation) an event gets one try.
    pub(crate) async fn record(&mut self, event: &Event) {
        let (mut event, patch) = match self.correlator.correlate(event) {
            Correlation::Skip => {
                tracing::debug!(
                    namespace = event.metadata.namespace.as_deref().unwrap_or(""),
                    name = event.metadata.name.as_deref().unwrap_or(""),
                    reason = event.reason.as_deref().unwrap_or(""),
                    "event dropped by the spam filter"
                );
                return;
            }
            Correlation::Write { event, patch } => (*event, patch),
        };
        let mut tries = 0;
        loop {
            if self.try_write(&mut event, patch.as_ref()).await {
                return;
            }
            tries += 1;
            if tries >= MAX_TRIES_PER_EVENT {
                log_event_error(&event, "unable to write event (retry limit exceeded)");
                return;
            }
            let delay = if tries == 1 {
                self.sleep.mul_f64(fastrand::f64())
            } else {
                self.sleep
            };
            if self.cancel.is_cancelled() {
                log_event_error(&event, "unable to write event (broadcaster is shut down)");
                return;
            }
            if !delay.is_zero() {
                tokio::select! {
                    () = self.cancel.cancelled() => {
                        log_event_error(&event, "unable to write event (broadcaster is shut down)");
                        return;
                    }
                    () = tokio::time::sleep(delay) => {}
                }
            }
        }
    }

    /// One write. Returns whether the event is done with (written, or rejected for good).
    async fn try_write(&mut self, event: &mut Event, patch: Option<&Value>) -> bool {
        let update_existing = event.count.unwrap_or(0) > 1;
        let mut result = None;
        if update_existing {
            let empty = Value::Object(serde_json::Map::new());
            let patched = self.sink.patch(event, patch.unwrap_or(&empty)).await;
            // The event to patch may have been deleted (events expire): create it afresh.
            if !matches!(&patched, Err(e) if e.is_not_found()) {
                result = Some(patched);
            }
        }
        let result = match result {
            Some(r) => r,
            None => {
                event.metadata.resource_version = None;
                self.sink.create(event).await
            }
        };
        let namespace = event.metadata.namespace.as_deref().unwrap_or("");
        let name = event.metadata.name.as_deref().unwrap_or("");
        match result {
            Ok(written) => {
                self.correlator.update_state(&written);
                true
            }
            Err(e) if e.is_already_exists() || e.is_namespace_terminating() => {
                tracing::debug!(namespace, name, error = %e, "server rejected event (will not retry)");
                true
            }
            Err(e @ (SinkError::Rejected(_) | SinkError::InvalidRequest(_))) => {
                tracing::error!(namespace, name, error = %e, "event not written (will not retry)");
                true
            }
            Err(e) => {
                tracing::error!(namespace, name, error = %e, "unable to write event (may retry after sleeping)");
                false
            }
        }
    }
}

fn log_event_error(event: &Event, what: &str) {
    tracing::error!(
        namespace = event.metadata.namespace.as_deref().unwrap_or(""),
        name = event.metadata.name.as_deref().unwrap_or(""),
        reason = event.reason.as_deref().unwrap_or(""),
        message = event.message.as_deref().unwrap_or(""),
        "{what}"
    );
}

#[cfg(test)]
#[path = "sink_tests.rs"]
mod tests;

//! The metrics hook of the HTTP backend: a provider trait with a no-op default.
//!
//! The methods mirror client-go's `tools/metrics` hooks and are named after the Prometheus
//! series kube-controller-manager exports, so a Prometheus provider only has to map each
//! call to its series. Label values follow client-go: `method`/`verb` is the HTTP method
//! (`GET`, `POST`, ...), `host` is the server URL's `host[:port]`, and `code` is the HTTP
//! status code, or `<error>` when no response arrived.

use std::fmt;
use std::time::Duration;

/// Receives the HTTP backend's measurements. Every method defaults to doing nothing.
///
/// ```
/// use std::sync::atomic::{AtomicU64, Ordering};
/// use kctrl_client::RestClientMetrics;
///
/// #[derive(Debug, Default)]
/// struct Attempts(AtomicU64);
///
/// impl RestClientMetrics for Attempts {
///     fn observe_request_result(&self, _code: &str, _method: &str, _host: &str) {
///         self.0.fetch_add(1, Ordering::Relaxed);
///     }
/// }
/// ```
pub trait RestClientMetrics: Send + Sync + fmt::Debug + 'static {
    /// `rest_client_requests_total{code,method,host}`: one call per attempt, retries
    /// included.
    fn observe_request_result(&self, code: &str, method: &str, host: &str) {
        let _ = (code, method, host);
    }

    /// `rest_client_request_retries_total{code,method,host}`: one call per attempt after
    /// the first, with that attempt's result.
    fn observe_request_retry(&self, code: &str, method: &str, host: &str) {
        let _ = (code, method, host);
    }

    /// `rest_client_request_duration_seconds{verb,host}`: the whole non-watch request,
    /// from the first rate-limiter wait to the final answer, retries included.
    fn observe_request_latency(&self, verb: &str, host: &str, latency: Duration) {
        let _ = (verb, host, latency);
    }

    /// `rest_client_rate_limiter_duration_seconds{verb,host}`: each wait for a token of the
    /// client-side rate limiter (not observed when limiting is disabled).
    fn observe_rate_limiter_latency(&self, verb: &str, host: &str, latency: Duration) {
        let _ = (verb, host, latency);
    }
}

/// The default provider: discards every measurement.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoopRestClientMetrics;

impl RestClientMetrics for NoopRestClientMetrics {}

/// The `code` label of an attempt: the status code, or `<error>` without a response.
pub(crate) fn code_label(status: Option<http::StatusCode>) -> String {
    match status {
        Some(s) => s.as_u16().to_string(),
        None => "<error>".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn code_label_values() {
        assert_eq!(code_label(Some(http::StatusCode::TOO_MANY_REQUESTS)), "429");
        assert_eq!(code_label(None), "<error>");
    }
}

//! A [`RestClientMetrics`] provider that records the REST client's measurements in a
//! `prometheus-client` [`Registry`], under the series names kube-controller-manager exports.
//!
//! | series | type | labels |
//! |---|---|---|
//! | `rest_client_requests_total` | counter | `code`, `method`, `host` |
//! | `rest_client_request_retries_total` | counter | `code`, `method`, `host` |
//! | `rest_client_request_duration_seconds` | histogram | `verb`, `host` |
//! | `rest_client_rate_limiter_duration_seconds` | histogram | `verb`, `host` |
//!
//! The two histograms use client-go's buckets (5 ms to 60 s).

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::RestClientMetrics;

/// Bucket bounds (seconds) of both latency histograms, as client-go's `tools/metrics`
/// registrations use them.
pub const LATENCY_BUCKETS: [f64; 12] = [
    0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0,
];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    code: String,
    method: String,
    host: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct VerbLabels {
    verb: String,
    host: String,
}

type Latencies = Family<VerbLabels, Histogram, fn() -> Histogram>;

fn latency_histogram() -> Histogram {
    Histogram::new(LATENCY_BUCKETS)
}

/// Records REST client metrics in a `prometheus-client` registry. Cheap to clone; clones share
/// their series.
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use kctrl_client::RestClientMetrics;
/// use kctrl_client::prometheus::PrometheusRestClientMetrics;
/// use prometheus_client::registry::Registry;
///
/// let mut registry = Registry::default();
/// let metrics = PrometheusRestClientMetrics::new(&mut registry);
/// // Normally the HTTP backend makes these calls: `HttpBackend::with_metrics(Arc::new(metrics))`.
/// metrics.observe_request_result("200", "GET", "127.0.0.1:6443");
/// metrics.observe_request_latency("GET", "127.0.0.1:6443", Duration::from_millis(12));
///
/// let mut text = String::new();
/// prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
/// assert!(text.contains(
///     r#"rest_client_requests_total{code="200",method="GET",host="127.0.0.1:6443"} 1"#
/// ));
/// ```
#[derive(Clone, Debug)]
pub struct PrometheusRestClientMetrics {
    requests: Family<ResultLabels, Counter>,
    retries: Family<ResultLabels, Counter>,
    request_duration: Latencies,
    rate_limiter_duration: Latencies,
}

impl PrometheusRestClientMetrics {
    /// Registers the four `rest_client_*` families in `registry`.
    pub fn new(registry: &mut Registry) -> Self {
        let metrics = Self {
            requests: Family::default(),
            retries: Family::default(),
            request_duration: Family::new_with_constructor(latency_histogram),
            rate_limiter_duration: Family::new_with_constructor(latency_histogram),
        };
        registry.register(
            "rest_client_requests",
            "Number of HTTP requests, partitioned by status code, method, and host",
            metrics.requests.clone(),
        );
        registry.register(
            "rest_client_request_retries",
            "Number of request retries, partitioned by status code, method, and host",
            metrics.retries.clone(),
        );
        registry.register(
            "rest_client_request_duration_seconds",
            "Request latency in seconds, broken down by verb and host",
            metrics.request_duration.clone(),
        );
        registry.register(
            "rest_client_rate_limiter_duration_seconds",
            "Client-side rate limiter latency in seconds, broken down by verb and host",
            metrics.rate_limiter_duration.clone(),
        );
        metrics
    }
}

fn result_labels(code: &str, method: &str, host: &str) -> ResultLabels {
    ResultLabels {
        code: code.to_owned(),
        method: method.to_owned(),
        host: host.to_owned(),
    }
}

fn verb_labels(verb: &str, host: &str) -> VerbLabels {
    VerbLabels {
        verb: verb.to_owned(),
        host: host.to_owned(),
    }
}

impl RestClientMetrics for PrometheusRestClientMetrics {
    fn observe_request_result(&self, code: &str, method: &str, host: &str) {
        self.requests
            .get_or_create(&result_labels(code, method, host))
            .inc();
    }

    fn observe_request_retry(&self, code: &str, method: &str, host: &str) {
        self.retries
            .get_or_create(&result_labels(code, method, host))
            .inc();
    }

    fn observe_request_latency(&self, verb: &str, host: &str, latency: Duration) {
        self.request_duration
            .get_or_create(&verb_labels(verb, host))
            .observe(latency.as_secs_f64());
    }

    fn observe_rate_limiter_latency(&self, verb: &str, host: &str, latency: Duration) {
        self.rate_limiter_duration
            .get_or_create(&verb_labels(verb, host))
            .observe(latency.as_secs_f64());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encode(registry: &Registry) -> String {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, registry).unwrap();
        text
    }

    #[test]
    fn every_series_is_recorded_under_its_labels() {
        let mut registry = Registry::default();
        let m = PrometheusRestClientMetrics::new(&mut registry);
        m.observe_request_result("200", "GET", "h:1");
        m.observe_request_result("200", "GET", "h:1");
        m.observe_request_result("<error>", "PUT", "h:1");
        m.observe_request_retry("503", "GET", "h:1");
        m.observe_request_latency("GET", "h:1", Duration::from_millis(30));
        m.observe_rate_limiter_latency("PUT", "h:1", Duration::from_millis(3));
        let text = encode(&registry);
        assert!(
            text.contains(r#"rest_client_requests_total{code="200",method="GET",host="h:1"} 2"#)
        );
        assert!(
            text.contains(
                r#"rest_client_requests_total{code="<error>",method="PUT",host="h:1"} 1"#
            )
        );
        assert!(text.contains(
            r#"rest_client_request_retries_total{code="503",method="GET",host="h:1"} 1"#
        ));
        // 30 ms falls in the 0.1 s bucket, not the 0.025 s one.
        assert!(text.contains(
            r#"rest_client_request_duration_seconds_bucket{le="0.025",verb="GET",host="h:1"} 0"#
        ));
        assert!(text.contains(
            r#"rest_client_request_duration_seconds_bucket{le="0.1",verb="GET",host="h:1"} 1"#
        ));
        assert!(text.contains(
            r#"rest_client_rate_limiter_duration_seconds_bucket{le="0.005",verb="PUT",host="h:1"} 1"#
        ));
    }
}

//! The webhook metrics, under controller-runtime's names, in a `prometheus-client` registry.
//!
//! | series | type | labels |
//! |---|---|---|
//! | `controller_runtime_webhook_requests_total` | counter | `webhook` (the path), `code` (the HTTP status code) |
//! | `controller_runtime_webhook_latency_seconds` | histogram | `webhook` |
//! | `controller_runtime_webhook_requests_in_flight` | gauge | `webhook` |
//! | `controller_runtime_webhook_panics_total` | counter | none (admission handlers that panicked) |
//! | `controller_runtime_conversion_webhook_panics_total` | counter | none (conversions that panicked) |
//!
//! The histogram has Prometheus' default buckets, as controller-runtime's.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// Prometheus' default buckets (seconds), controller-runtime's for the webhook latency.
pub const LATENCY_BUCKETS: [f64; 11] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WebhookLabel {
    webhook: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CodeLabels {
    webhook: String,
    code: String,
}

fn latency_histogram() -> Histogram {
    Histogram::new(LATENCY_BUCKETS)
}

/// The webhook series of a server. Cheap to clone; clones share their series.
///
/// ```
/// use kctrl_webhook::metrics::WebhookMetrics;
/// use prometheus_client::registry::Registry;
///
/// let mut registry = Registry::default();
/// let metrics = WebhookMetrics::new(&mut registry);
/// // Give `metrics` to `ServerBuilder::metrics`, serve the registry where your metrics are.
/// # let _ = metrics;
/// ```
#[derive(Clone, Debug)]
pub struct WebhookMetrics {
    total: Family<CodeLabels, Counter>,
    latency: Family<WebhookLabel, Histogram, fn() -> Histogram>,
    in_flight: Family<WebhookLabel, Gauge>,
    panics: Counter,
    conversion_panics: Counter,
}

impl WebhookMetrics {
    /// Registers the series in `registry` (names without a prefix).
    pub fn new(registry: &mut Registry) -> Self {
        let m = WebhookMetrics {
            total: Family::default(),
            latency: Family::new_with_constructor(latency_histogram),
            in_flight: Family::default(),
            panics: Counter::default(),
            conversion_panics: Counter::default(),
        };
        registry.register(
            "controller_runtime_webhook_requests",
            "Total number of admission requests by HTTP status code.",
            m.total.clone(),
        );
        registry.register(
            "controller_runtime_webhook_latency_seconds",
            "Histogram of the latency of processing admission requests",
            m.latency.clone(),
        );
        registry.register(
            "controller_runtime_webhook_requests_in_flight",
            "Current number of admission requests being served.",
            m.in_flight.clone(),
        );
        registry.register(
            "controller_runtime_webhook_panics",
            "Total number of webhook panics",
            m.panics.clone(),
        );
        registry.register(
            "controller_runtime_conversion_webhook_panics",
            "Total number of conversion webhook panics",
            m.conversion_panics.clone(),
        );
        m
    }

    /// An admission handler panicked.
    pub(crate) fn panicked(&self) {
        self.panics.inc();
    }

    /// A conversion panicked.
    pub(crate) fn conversion_panicked(&self) {
        self.conversion_panics.inc();
    }

    /// How many admission handlers panicked (for tests and probes).
    pub fn panics(&self) -> u64 {
        self.panics.get()
    }

    /// How many conversions panicked (for tests and probes).
    pub fn conversion_panics(&self) -> u64 {
        self.conversion_panics.get()
    }

    /// A request to `webhook` starts; the guard counts it in flight until dropped, when it
    /// records the latency.
    pub(crate) fn start(&self, webhook: &str) -> InFlight {
        let label = WebhookLabel {
            webhook: webhook.to_owned(),
        };
        self.in_flight.get_or_create(&label).inc();
        InFlight {
            metrics: self.clone(),
            label,
            started: std::time::Instant::now(),
        }
    }

    /// A request to `webhook` was answered with `code`.
    pub(crate) fn answered(&self, webhook: &str, code: u16) {
        self.total
            .get_or_create(&CodeLabels {
                webhook: webhook.to_owned(),
                code: code.to_string(),
            })
            .inc();
    }

    /// The count of requests to `webhook` answered with `code` (for tests and probes).
    pub fn requests(&self, webhook: &str, code: u16) -> u64 {
        self.total
            .get_or_create(&CodeLabels {
                webhook: webhook.to_owned(),
                code: code.to_string(),
            })
            .get()
    }
}

/// A request being served (see [`WebhookMetrics::start`]).
pub(crate) struct InFlight {
    metrics: WebhookMetrics,
    label: WebhookLabel,
    started: std::time::Instant,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.metrics.in_flight.get_or_create(&self.label).dec();
        self.metrics
            .latency
            .get_or_create(&self.label)
            .observe(self.started.elapsed().as_secs_f64());
    }
}

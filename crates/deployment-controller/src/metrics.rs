//! The process's Prometheus registry: the REST client's `rest_client_*` series, the work
//! queue's `workqueue_*` series (queue `deployment`), the informers' `informer_*` series
//! (named [`INFORMER_NAME`], as kube-controller-manager names its informers), the leader
//! election gauges, `deployment_controller_sync_duration_seconds` and
//! `informer_handler_panics_total`.

use std::sync::Arc;
use std::time::Duration;

use kctrl_client::prometheus::PrometheusRestClientMetrics;
use kctrl_deployment::wiring::SyncObserver;
use kctrl_informer::prometheus::PrometheusInformerMetrics;
use kctrl_workqueue::PrometheusMetricsProvider;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// The `result` label of the sync histogram.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SyncResult {
    result: &'static str,
}

fn sync_histogram() -> Histogram {
    // 1 ms … ~16 s.
    Histogram::new(exponential_buckets(0.001, 2.0, 15))
}

/// The `name` label of the informers' `informer_*` series: kube-controller-manager's
/// informer name, so the series match the ones it exports for the same resources.
pub(crate) const INFORMER_NAME: &str = "kube-controller-manager";

/// The metric sources the controller is built with.
pub(crate) struct Metrics {
    /// For the HTTP backend.
    pub(crate) rest_client: PrometheusRestClientMetrics,
    /// For the `deployment` work queue.
    pub(crate) workqueue: PrometheusMetricsProvider,
    /// For the workers.
    pub(crate) sync_observer: SyncObserver,
    /// For the informer factory (`informer_queued_items`, `informer_processing_latency_seconds`,
    /// `informer_store_resource_version`).
    pub(crate) informers: PrometheusInformerMetrics,
}

/// Registers the REST client, work queue, informer and sync series in `registry`.
pub(crate) fn register(registry: &mut Registry) -> Metrics {
    let rest_client = PrometheusRestClientMetrics::new(registry);
    let workqueue = PrometheusMetricsProvider::new(registry);
    let informers = PrometheusInformerMetrics::new(registry);
    let syncs: Family<SyncResult, Histogram, fn() -> Histogram> =
        Family::new_with_constructor(sync_histogram);
    registry.register(
        "deployment_controller_sync_duration_seconds",
        "How long syncing one Deployment took, by result (success or error)",
        syncs.clone(),
    );
    let sync_observer: SyncObserver = Arc::new(move |took: Duration, ok: bool| {
        let result = if ok { "success" } else { "error" };
        syncs
            .get_or_create(&SyncResult { result })
            .observe(took.as_secs_f64());
    });
    Metrics {
        rest_client,
        workqueue,
        sync_observer,
        informers,
    }
}

/// Reads a count kept elsewhere (the informers') at each scrape.
type CountSource = Box<dyn Fn() -> u64 + Send + Sync>;

/// `informer_handler_panics_total`: the panics of user code the informers contained, each
/// logged: event handlers (the notification dropped), index functions, transforms, watch
/// error handlers and metrics sinks.
struct HandlerPanics(CountSource);

impl std::fmt::Debug for HandlerPanics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("HandlerPanics").finish_non_exhaustive()
    }
}

impl Collector for HandlerPanics {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let counter = ConstCounter::new((self.0)());
        let metric = encoder.encode_descriptor(
            "informer_handler_panics",
            "Panics of event handlers, index functions, transforms, watch error handlers and metrics sinks that the informers contained",
            None,
            counter.metric_type(),
        )?;
        counter.encode(metric)
    }
}

/// Registers `informer_handler_panics_total`, read from `count` at each scrape (the
/// informer factory's [`handler_panics`](kctrl_informer::SharedInformerFactory::handler_panics)).
pub(crate) fn register_handler_panics(
    registry: &mut Registry,
    count: impl Fn() -> u64 + Send + Sync + 'static,
) {
    registry.register_collector(Box::new(HandlerPanics(Box::new(count))));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handler_panics_are_exported() {
        let count = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let mut registry = Registry::default();
        let source = count.clone();
        register_handler_panics(&mut registry, move || {
            source.load(std::sync::atomic::Ordering::Relaxed)
        });
        count.store(3, std::sync::atomic::Ordering::Relaxed);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(text.contains("informer_handler_panics_total 3"), "{text}");
        assert!(
            text.contains("# TYPE informer_handler_panics counter"),
            "{text}"
        );
    }

    #[test]
    fn sync_durations_are_recorded_by_result() {
        let mut registry = Registry::default();
        let metrics = register(&mut registry);
        (metrics.sync_observer)(Duration::from_millis(3), true);
        (metrics.sync_observer)(Duration::from_millis(3), false);
        (metrics.sync_observer)(Duration::from_millis(3), true);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(
            text.contains(
                r#"deployment_controller_sync_duration_seconds_count{result="success"} 2"#
            ),
            "{text}"
        );
        assert!(
            text.contains(r#"deployment_controller_sync_duration_seconds_count{result="error"} 1"#),
            "{text}"
        );
    }
}

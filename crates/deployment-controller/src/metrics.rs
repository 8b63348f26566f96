//! The process's Prometheus registry: the REST client's `rest_client_*` series, the work
//! queue's `workqueue_*` series (queue `deployment`), the leader election gauges, and
//! `deployment_controller_sync_duration_seconds`.

use std::sync::Arc;
use std::time::Duration;

use kctrl_client::prometheus::PrometheusRestClientMetrics;
use kctrl_deployment::wiring::SyncObserver;
use kctrl_workqueue::PrometheusMetricsProvider;
use prometheus_client::encoding::EncodeLabelSet;
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

/// The metric sources the controller is built with.
pub(crate) struct Metrics {
    /// For the HTTP backend.
    pub(crate) rest_client: PrometheusRestClientMetrics,
    /// For the `deployment` work queue.
    pub(crate) workqueue: PrometheusMetricsProvider,
    /// For the workers.
    pub(crate) sync_observer: SyncObserver,
}

/// Registers the REST client, work queue and sync series in `registry`.
pub(crate) fn register(registry: &mut Registry) -> Metrics {
    let rest_client = PrometheusRestClientMetrics::new(registry);
    let workqueue = PrometheusMetricsProvider::new(registry);
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
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

//! A [`MetricsProvider`] that registers client-go's workqueue metric families in a
//! `prometheus-client` [`Registry`], labelled by queue name.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use super::{CounterMetric, GaugeMetric, HistogramMetric, MetricsProvider, SettableGaugeMetric};
use crate::queue::Priority;

/// The `name` label every workqueue metric carries.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct QueueName {
    name: String,
}

/// The labels of the per-lane series: the queue's name and the lane (`high` or `low`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct QueueLane {
    name: String,
    lane: String,
}

type SecondsGauge = Gauge<f64, AtomicU64>;
type Histograms = Family<QueueName, Histogram, fn() -> Histogram>;

/// Buckets of the two duration histograms: 1 µs, 10 µs, … 1000 s (ten buckets). Written out
/// rather than multiplied, so that the bounds are exact decimals.
const DURATION_BUCKETS: [f64; 10] = [1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0, 10.0, 100.0, 1000.0];

fn duration_histogram() -> Histogram {
    Histogram::new(DURATION_BUCKETS)
}

/// Records queue metrics in a `prometheus-client` registry.
///
/// Registers, under the prefix `workqueue`: `workqueue_depth`, `workqueue_adds_total`,
/// `workqueue_queue_duration_seconds`, `workqueue_work_duration_seconds`,
/// `workqueue_unfinished_work_seconds`, `workqueue_longest_running_processor_seconds` and
/// `workqueue_retries_total`, each with a `name` label, and the priority-lane series
/// `workqueue_lane_depth`, `workqueue_lane_adds_total`, `workqueue_lane_queue_duration_seconds`
/// (labelled `name` and `lane`) and `workqueue_lane_rises_total`. Create one provider per registry and
/// clone it into every queue's config; queues with the same name share their series.
///
/// ```
/// use kctrl_workqueue::{PrometheusMetricsProvider, Queue, QueueConfig};
/// use prometheus_client::registry::Registry;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let mut registry = Registry::default();
/// let metrics = PrometheusMetricsProvider::new(&mut registry);
/// let queue = Queue::with_config(
///     QueueConfig::new().name("deployments").metrics_provider(metrics.clone()),
/// );
/// queue.add("default/web".to_string());
///
/// let mut text = String::new();
/// prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
/// assert!(text.contains(r#"workqueue_adds_total{name="deployments"} 1"#));
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct PrometheusMetricsProvider {
    depth: Family<QueueName, Gauge>,
    adds: Family<QueueName, Counter>,
    latency: Histograms,
    work_duration: Histograms,
    unfinished_work_seconds: Family<QueueName, SecondsGauge>,
    longest_running_processor_seconds: Family<QueueName, SecondsGauge>,
    retries: Family<QueueName, Counter>,
    lane_depth: Family<QueueLane, Gauge>,
    lane_adds: Family<QueueLane, Counter>,
    lane_latency: Family<QueueLane, Histogram, fn() -> Histogram>,
    lane_rises: Family<QueueName, Counter>,
}

impl PrometheusMetricsProvider {
    /// Registers the workqueue metric families in `registry`.
    pub fn new(registry: &mut Registry) -> Self {
        let provider = Self {
            depth: Family::default(),
            adds: Family::default(),
            latency: Family::new_with_constructor(duration_histogram),
            work_duration: Family::new_with_constructor(duration_histogram),
            unfinished_work_seconds: Family::default(),
            longest_running_processor_seconds: Family::default(),
            retries: Family::default(),
            lane_depth: Family::default(),
            lane_adds: Family::default(),
            lane_latency: Family::new_with_constructor(duration_histogram),
            lane_rises: Family::default(),
        };
        let registry = registry.sub_registry_with_prefix("workqueue");
        registry.register(
            "depth",
            "Number of items waiting in the work queue",
            provider.depth.clone(),
        );
        registry.register(
            "adds",
            "Items added to the work queue, not counting adds collapsed into a waiting item",
            provider.adds.clone(),
        );
        registry.register(
            "queue_duration_seconds",
            "Seconds an item waited in the work queue before a worker got it",
            provider.latency.clone(),
        );
        registry.register(
            "work_duration_seconds",
            "Seconds a worker spent on an item, from get to done",
            provider.work_duration.clone(),
        );
        registry.register(
            "unfinished_work_seconds",
            "Seconds of work in progress not yet counted by work_duration_seconds; \
             a steady rise points at stuck workers",
            provider.unfinished_work_seconds.clone(),
        );
        registry.register(
            "longest_running_processor_seconds",
            "Seconds the longest-running worker has spent on its current item",
            provider.longest_running_processor_seconds.clone(),
        );
        registry.register(
            "retries",
            "Delayed re-adds (add_after, add_rate_limited) handled by the work queue",
            provider.retries.clone(),
        );
        registry.register(
            "lane_depth",
            "Number of items waiting in one priority lane of the work queue",
            provider.lane_depth.clone(),
        );
        registry.register(
            "lane_adds",
            "Items added to one priority lane, not counting adds collapsed into a waiting item",
            provider.lane_adds.clone(),
        );
        registry.register(
            "lane_queue_duration_seconds",
            "Seconds an item waited before a worker got it, by the lane it was served from",
            provider.lane_latency.clone(),
        );
        registry.register(
            "lane_rises",
            "Waiting items moved from the low to the high lane by a high-priority add",
            provider.lane_rises.clone(),
        );
        provider
    }
}

fn lane_label(name: &str, lane: Priority) -> QueueLane {
    QueueLane {
        name: name.to_owned(),
        lane: lane.as_str().to_owned(),
    }
}

fn label(name: &str) -> QueueName {
    QueueName {
        name: name.to_owned(),
    }
}

impl MetricsProvider for PrometheusMetricsProvider {
    fn new_depth_metric(&self, name: &str) -> Arc<dyn GaugeMetric> {
        Arc::new(self.depth.get_or_create(&label(name)).clone())
    }
    fn new_adds_metric(&self, name: &str) -> Arc<dyn CounterMetric> {
        Arc::new(self.adds.get_or_create(&label(name)).clone())
    }
    fn new_latency_metric(&self, name: &str) -> Arc<dyn HistogramMetric> {
        Arc::new(self.latency.get_or_create(&label(name)).clone())
    }
    fn new_work_duration_metric(&self, name: &str) -> Arc<dyn HistogramMetric> {
        Arc::new(self.work_duration.get_or_create(&label(name)).clone())
    }
    fn new_unfinished_work_seconds_metric(&self, name: &str) -> Arc<dyn SettableGaugeMetric> {
        Arc::new(
            self.unfinished_work_seconds
                .get_or_create(&label(name))
                .clone(),
        )
    }
    fn new_longest_running_processor_seconds_metric(
        &self,
        name: &str,
    ) -> Arc<dyn SettableGaugeMetric> {
        Arc::new(
            self.longest_running_processor_seconds
                .get_or_create(&label(name))
                .clone(),
        )
    }
    fn new_retries_metric(&self, name: &str) -> Arc<dyn CounterMetric> {
        Arc::new(self.retries.get_or_create(&label(name)).clone())
    }
    fn new_lane_depth_metric(&self, name: &str, lane: Priority) -> Arc<dyn GaugeMetric> {
        Arc::new(
            self.lane_depth
                .get_or_create(&lane_label(name, lane))
                .clone(),
        )
    }
    fn new_lane_adds_metric(&self, name: &str, lane: Priority) -> Arc<dyn CounterMetric> {
        Arc::new(
            self.lane_adds
                .get_or_create(&lane_label(name, lane))
                .clone(),
        )
    }
    fn new_lane_latency_metric(&self, name: &str, lane: Priority) -> Arc<dyn HistogramMetric> {
        Arc::new(
            self.lane_latency
                .get_or_create(&lane_label(name, lane))
                .clone(),
        )
    }
    fn new_lane_rises_metric(&self, name: &str) -> Arc<dyn CounterMetric> {
        Arc::new(self.lane_rises.get_or_create(&label(name)).clone())
    }
}

impl GaugeMetric for Gauge {
    fn inc(&self) {
        Gauge::inc(self);
    }
    fn dec(&self) {
        Gauge::dec(self);
    }
}

impl SettableGaugeMetric for SecondsGauge {
    fn set(&self, value: f64) {
        Gauge::set(self, value);
    }
}

impl CounterMetric for Counter {
    fn inc(&self) {
        Counter::inc(self);
    }
}

impl HistogramMetric for Histogram {
    fn observe(&self, value: f64) {
        Histogram::observe(self, value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DelayingQueue, QueueConfig};

    #[tokio::test(start_paused = true)]
    async fn registers_client_go_names_labelled_by_queue() {
        let mut registry = Registry::default();
        let provider = PrometheusMetricsProvider::new(&mut registry);
        let queue = DelayingQueue::with_config(
            QueueConfig::new()
                .name("pods")
                .metrics_provider(provider.clone()),
        );
        queue.add("a");
        queue.add_after("b", std::time::Duration::from_secs(1));
        let item = queue.get().await.unwrap();
        queue.done(&item);

        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        for expected in [
            r#"workqueue_depth{name="pods"} 0"#,
            r#"workqueue_adds_total{name="pods"} 1"#,
            r#"workqueue_queue_duration_seconds_count{name="pods"} 1"#,
            r#"workqueue_work_duration_seconds_count{name="pods"} 1"#,
            r#"workqueue_unfinished_work_seconds{name="pods"} 0"#,
            r#"workqueue_longest_running_processor_seconds{name="pods"} 0"#,
            r#"workqueue_retries_total{name="pods"} 1"#,
            r#"workqueue_queue_duration_seconds_bucket{le="0.000001",name="pods"} 1"#,
            r#"workqueue_queue_duration_seconds_bucket{le="0.00001",name="pods"} 1"#,
            r#"workqueue_queue_duration_seconds_bucket{le="1000.0",name="pods"} 1"#,
        ] {
            assert!(text.contains(expected), "missing {expected} in\n{text}");
        }
        queue.shut_down();
    }

    #[tokio::test(start_paused = true)]
    async fn lane_series_carry_the_lane_label() {
        let mut registry = Registry::default();
        let provider = PrometheusMetricsProvider::new(&mut registry);
        let queue = crate::Queue::with_config(
            QueueConfig::new()
                .name("deployments")
                .metrics_provider(provider.clone()),
        );
        queue.add_with_priority("listed-1", Priority::Low);
        queue.add_with_priority("listed-2", Priority::Low);
        queue.add_with_priority("listed-3", Priority::Low);
        queue.add("listed-2"); // rises
        queue.add("live");
        tokio::time::sleep(std::time::Duration::from_secs(2)).await;
        for _ in 0..2 {
            let item = queue.get().await.unwrap();
            assert!(item == "listed-2" || item == "live", "high lane first");
            queue.done(&item);
        }
        tokio::time::sleep(std::time::Duration::from_secs(10)).await;
        let item = queue.get().await.unwrap();
        queue.done(&item);

        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        for expected in [
            r#"workqueue_depth{name="deployments"} 1"#,
            r#"workqueue_lane_depth{name="deployments",lane="high"} 0"#,
            r#"workqueue_lane_depth{name="deployments",lane="low"} 1"#,
            r#"workqueue_lane_adds_total{name="deployments",lane="low"} 3"#,
            r#"workqueue_lane_adds_total{name="deployments",lane="high"} 1"#,
            r#"workqueue_lane_rises_total{name="deployments"} 1"#,
            r#"workqueue_lane_queue_duration_seconds_count{name="deployments",lane="high"} 2"#,
            r#"workqueue_lane_queue_duration_seconds_sum{name="deployments",lane="high"} 4.0"#,
            r#"workqueue_lane_queue_duration_seconds_count{name="deployments",lane="low"} 1"#,
            r#"workqueue_lane_queue_duration_seconds_sum{name="deployments",lane="low"} 12.0"#,
        ] {
            assert!(text.contains(expected), "missing {expected} in\n{text}");
        }
        queue.shut_down();
    }
}

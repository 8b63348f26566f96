//! Port of `metrics_test.go`, on Tokio's paused clock instead of a fake clock.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use kctrl_workqueue::{
    CounterMetric, GaugeMetric, HistogramMetric, MetricsProvider, Queue, QueueConfig,
    SettableGaugeMetric,
};
use tokio::time::advance;

use crate::{eventually, settle};

/// One metric of any kind, remembering what was done to it.
#[derive(Default)]
struct TestMetric {
    state: Mutex<Recorded>,
}

#[derive(Default, Clone, Copy)]
struct Recorded {
    inc: i64,
    dec: i64,
    set: f64,
    set_calls: usize,
    observed_value: f64,
    observed_count: usize,
}

impl TestMetric {
    fn recorded(&self) -> Recorded {
        *self.state.lock().unwrap()
    }
    fn gauge_value(&self) -> f64 {
        let recorded = self.recorded();
        if recorded.set != 0.0 {
            recorded.set
        } else {
            (recorded.inc - recorded.dec) as f64
        }
    }
    fn observation_value(&self) -> f64 {
        self.recorded().observed_value
    }
    fn observation_count(&self) -> usize {
        self.recorded().observed_count
    }
    fn set_calls(&self) -> usize {
        self.recorded().set_calls
    }
}

impl GaugeMetric for TestMetric {
    fn inc(&self) {
        self.state.lock().unwrap().inc += 1;
    }
    fn dec(&self) {
        self.state.lock().unwrap().dec += 1;
    }
}
impl CounterMetric for TestMetric {
    fn inc(&self) {
        self.state.lock().unwrap().inc += 1;
    }
}
impl SettableGaugeMetric for TestMetric {
    fn set(&self, value: f64) {
        let mut state = self.state.lock().unwrap();
        state.set = value;
        state.set_calls += 1;
    }
}
impl HistogramMetric for TestMetric {
    fn observe(&self, value: f64) {
        let mut state = self.state.lock().unwrap();
        state.observed_value = value;
        state.observed_count += 1;
    }
}

#[derive(Default)]
struct TestMetricsProvider {
    depth: Arc<TestMetric>,
    adds: Arc<TestMetric>,
    latency: Arc<TestMetric>,
    duration: Arc<TestMetric>,
    unfinished: Arc<TestMetric>,
    longest: Arc<TestMetric>,
    retries: Arc<TestMetric>,
}

impl MetricsProvider for TestMetricsProvider {
    fn new_depth_metric(&self, _name: &str) -> Arc<dyn GaugeMetric> {
        self.depth.clone()
    }
    fn new_adds_metric(&self, _name: &str) -> Arc<dyn CounterMetric> {
        self.adds.clone()
    }
    fn new_latency_metric(&self, _name: &str) -> Arc<dyn HistogramMetric> {
        self.latency.clone()
    }
    fn new_work_duration_metric(&self, _name: &str) -> Arc<dyn HistogramMetric> {
        self.duration.clone()
    }
    fn new_unfinished_work_seconds_metric(&self, _name: &str) -> Arc<dyn SettableGaugeMetric> {
        self.unfinished.clone()
    }
    fn new_longest_running_processor_seconds_metric(
        &self,
        _name: &str,
    ) -> Arc<dyn SettableGaugeMetric> {
        self.longest.clone()
    }
    fn new_retries_metric(&self, _name: &str) -> Arc<dyn CounterMetric> {
        self.retries.clone()
    }
}

fn metered_queue(provider: &Arc<TestMetricsProvider>) -> Queue<&'static str> {
    Queue::with_config(
        QueueConfig::new()
            .name("test")
            .metrics_provider(Arc::clone(provider))
            .unfinished_work_update_period(Duration::from_millis(1)),
    )
}

#[tokio::test(start_paused = true)]
async fn test_metric_shutdown() {
    let provider = Arc::new(TestMetricsProvider::default());
    let queue = metered_queue(&provider);

    advance(Duration::from_millis(1)).await;
    eventually("the unfinished-work gauge is updated", || {
        provider.unfinished.set_calls() == 1
    })
    .await;
    queue.shut_down();

    advance(Duration::from_secs(3600)).await;
    settle().await;
    assert_eq!(
        provider.unfinished.set_calls(),
        1,
        "unexpected update after shutdown was called"
    );
}

#[tokio::test(start_paused = true)]
async fn test_metrics() {
    let provider = Arc::new(TestMetricsProvider::default());
    let queue = metered_queue(&provider);

    queue.add("foo");
    assert_eq!(provider.adds.gauge_value(), 1.0);
    assert_eq!(provider.depth.gauge_value(), 1.0);

    advance(Duration::from_micros(50)).await;

    let item = queue.get().await.unwrap();
    assert_eq!(item, "foo");
    assert_eq!(provider.latency.observation_value(), 5e-05);
    assert_eq!(provider.latency.observation_count(), 1);

    // Add it back while processing; repeated adds collapse into one.
    for _ in 0..5 {
        queue.add(item);
    }
    assert_eq!(provider.adds.gauge_value(), 2.0);
    // One thing remains in the queue.
    assert_eq!(provider.depth.gauge_value(), 1.0);

    advance(Duration::from_micros(25)).await;

    queue.done(&item);
    assert_eq!(provider.duration.observation_value(), 2.5e-05);
    assert_eq!(provider.duration.observation_count(), 1);
    assert_eq!(provider.depth.gauge_value(), 1.0);

    // It is back on the queue.
    let item = queue.get().await.unwrap();
    assert_eq!(item, "foo");
    assert_eq!(provider.latency.observation_value(), 2.5e-05);
    assert_eq!(provider.latency.observation_count(), 2);

    advance(Duration::from_millis(1)).await;
    eventually("the unfinished-work gauges are updated", || {
        provider.unfinished.set_calls() > 0 && provider.longest.set_calls() > 0
    })
    .await;
    assert_eq!(provider.unfinished.gauge_value(), 0.001);
    assert_eq!(provider.longest.gauge_value(), 0.001);

    queue.done(&item);
    assert_eq!(provider.duration.observation_value(), 0.001);
    assert_eq!(provider.duration.observation_count(), 2);
    queue.shut_down();
}

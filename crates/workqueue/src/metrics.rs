//! Queue metrics: a provider trait that creates one small metric handle per queue, a no-op
//! provider, and the queue-side bookkeeping that feeds them.
//!
//! The meanings follow client-go's workqueue metrics exactly (names as registered by
//! [`PrometheusMetricsProvider`]):
//!
//! | metric | kind | meaning |
//! |---|---|---|
//! | `workqueue_depth` | gauge | items marked dirty and not yet handed out (+1 per effective add, −1 per get) |
//! | `workqueue_adds_total` | counter | adds that were not collapsed into a waiting item |
//! | `workqueue_queue_duration_seconds` | histogram | time from the first add (since the last get) to get |
//! | `workqueue_work_duration_seconds` | histogram | time from get to done |
//! | `workqueue_unfinished_work_seconds` | gauge | sum of the ages of all items being processed, refreshed periodically |
//! | `workqueue_longest_running_processor_seconds` | gauge | age of the oldest item being processed, refreshed periodically |
//! | `workqueue_retries_total` | counter | calls to `add_after` (and so `add_rate_limited`) |
//!
//! Priority lanes ([`Priority`](crate::Priority)) have no client-go counterpart; their series
//! carry a `lane` label (`high` or `low`) next to `name`:
//!
//! | metric | kind | meaning |
//! |---|---|---|
//! | `workqueue_lane_depth` | gauge | items marked dirty in this lane and not yet handed out (the lanes sum to `workqueue_depth`) |
//! | `workqueue_lane_adds_total` | counter | adds that were not collapsed, by the lane they were added to |
//! | `workqueue_lane_queue_duration_seconds` | histogram | time from the first add to get, by the lane the item was served from |
//! | `workqueue_lane_rises_total` | counter | dirty items moved from the low to the high lane by a high-priority add (no `lane` label) |
//!
//! Metrics are recorded only for queues that have a name and a provider. There is no global
//! provider: pass one in [`QueueConfig::metrics_provider`](crate::QueueConfig::metrics_provider).

use std::collections::HashMap;
use std::sync::Arc;

use foldhash::fast::RandomState;
use tokio::time::Instant;

use crate::queue::{Item, Priority};

mod prometheus;

pub use prometheus::PrometheusMetricsProvider;

/// A gauge moved up and down by one.
pub trait GaugeMetric: Send + Sync {
    /// Adds one.
    fn inc(&self);
    /// Subtracts one.
    fn dec(&self);
}

/// A gauge set to an absolute value.
pub trait SettableGaugeMetric: Send + Sync {
    /// Sets the value.
    fn set(&self, value: f64);
}

/// A monotonically increasing counter.
pub trait CounterMetric: Send + Sync {
    /// Adds one.
    fn inc(&self);
}

/// A distribution of observed values (seconds, for the queue's durations).
pub trait HistogramMetric: Send + Sync {
    /// Records one observation.
    fn observe(&self, value: f64);
}

/// Creates the metric handles of one queue; `name` is the queue's name, to be used as a label.
///
/// Called once per queue when it is built, never on the hot path.
pub trait MetricsProvider: Send + Sync {
    /// `workqueue_depth`.
    fn new_depth_metric(&self, name: &str) -> Arc<dyn GaugeMetric>;
    /// `workqueue_adds_total`.
    fn new_adds_metric(&self, name: &str) -> Arc<dyn CounterMetric>;
    /// `workqueue_queue_duration_seconds`.
    fn new_latency_metric(&self, name: &str) -> Arc<dyn HistogramMetric>;
    /// `workqueue_work_duration_seconds`.
    fn new_work_duration_metric(&self, name: &str) -> Arc<dyn HistogramMetric>;
    /// `workqueue_unfinished_work_seconds`.
    fn new_unfinished_work_seconds_metric(&self, name: &str) -> Arc<dyn SettableGaugeMetric>;
    /// `workqueue_longest_running_processor_seconds`.
    fn new_longest_running_processor_seconds_metric(
        &self,
        name: &str,
    ) -> Arc<dyn SettableGaugeMetric>;
    /// `workqueue_retries_total`.
    fn new_retries_metric(&self, name: &str) -> Arc<dyn CounterMetric>;
    /// `workqueue_lane_depth`. Defaults to a no-op, for providers written before lanes.
    fn new_lane_depth_metric(&self, name: &str, lane: Priority) -> Arc<dyn GaugeMetric> {
        let _ = (name, lane);
        Arc::new(NoopMetric)
    }
    /// `workqueue_lane_adds_total`. Defaults to a no-op.
    fn new_lane_adds_metric(&self, name: &str, lane: Priority) -> Arc<dyn CounterMetric> {
        let _ = (name, lane);
        Arc::new(NoopMetric)
    }
    /// `workqueue_lane_queue_duration_seconds`. Defaults to a no-op.
    fn new_lane_latency_metric(&self, name: &str, lane: Priority) -> Arc<dyn HistogramMetric> {
        let _ = (name, lane);
        Arc::new(NoopMetric)
    }
    /// `workqueue_lane_rises_total`. Defaults to a no-op.
    fn new_lane_rises_metric(&self, name: &str) -> Arc<dyn CounterMetric> {
        let _ = name;
        Arc::new(NoopMetric)
    }

    /// Whether every metric from this provider is discarded. A queue given such a provider
    /// skips its bookkeeping (timestamps per item) altogether. Defaults to `false`.
    fn is_noop(&self) -> bool {
        false
    }
}

impl<P: MetricsProvider + ?Sized> MetricsProvider for Arc<P> {
    fn new_depth_metric(&self, name: &str) -> Arc<dyn GaugeMetric> {
        (**self).new_depth_metric(name)
    }
    fn new_adds_metric(&self, name: &str) -> Arc<dyn CounterMetric> {
        (**self).new_adds_metric(name)
    }
    fn new_latency_metric(&self, name: &str) -> Arc<dyn HistogramMetric> {
        (**self).new_latency_metric(name)
    }
    fn new_work_duration_metric(&self, name: &str) -> Arc<dyn HistogramMetric> {
        (**self).new_work_duration_metric(name)
    }
    fn new_unfinished_work_seconds_metric(&self, name: &str) -> Arc<dyn SettableGaugeMetric> {
        (**self).new_unfinished_work_seconds_metric(name)
    }
    fn new_longest_running_processor_seconds_metric(
        &self,
        name: &str,
    ) -> Arc<dyn SettableGaugeMetric> {
        (**self).new_longest_running_processor_seconds_metric(name)
    }
    fn new_retries_metric(&self, name: &str) -> Arc<dyn CounterMetric> {
        (**self).new_retries_metric(name)
    }
    fn new_lane_depth_metric(&self, name: &str, lane: Priority) -> Arc<dyn GaugeMetric> {
        (**self).new_lane_depth_metric(name, lane)
    }
    fn new_lane_adds_metric(&self, name: &str, lane: Priority) -> Arc<dyn CounterMetric> {
        (**self).new_lane_adds_metric(name, lane)
    }
    fn new_lane_latency_metric(&self, name: &str, lane: Priority) -> Arc<dyn HistogramMetric> {
        (**self).new_lane_latency_metric(name, lane)
    }
    fn new_lane_rises_metric(&self, name: &str) -> Arc<dyn CounterMetric> {
        (**self).new_lane_rises_metric(name)
    }
    fn is_noop(&self) -> bool {
        (**self).is_noop()
    }
}

/// A metric that discards everything.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoopMetric;

impl GaugeMetric for NoopMetric {
    fn inc(&self) {}
    fn dec(&self) {}
}

impl SettableGaugeMetric for NoopMetric {
    fn set(&self, _value: f64) {}
}

impl CounterMetric for NoopMetric {
    fn inc(&self) {}
}

impl HistogramMetric for NoopMetric {
    fn observe(&self, _value: f64) {}
}

/// The default provider: records nothing, and tells queues to skip their bookkeeping.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoopMetricsProvider;

impl MetricsProvider for NoopMetricsProvider {
    fn new_depth_metric(&self, _name: &str) -> Arc<dyn GaugeMetric> {
        Arc::new(NoopMetric)
    }
    fn new_adds_metric(&self, _name: &str) -> Arc<dyn CounterMetric> {
        Arc::new(NoopMetric)
    }
    fn new_latency_metric(&self, _name: &str) -> Arc<dyn HistogramMetric> {
        Arc::new(NoopMetric)
    }
    fn new_work_duration_metric(&self, _name: &str) -> Arc<dyn HistogramMetric> {
        Arc::new(NoopMetric)
    }
    fn new_unfinished_work_seconds_metric(&self, _name: &str) -> Arc<dyn SettableGaugeMetric> {
        Arc::new(NoopMetric)
    }
    fn new_longest_running_processor_seconds_metric(
        &self,
        _name: &str,
    ) -> Arc<dyn SettableGaugeMetric> {
        Arc::new(NoopMetric)
    }
    fn new_retries_metric(&self, _name: &str) -> Arc<dyn CounterMetric> {
        Arc::new(NoopMetric)
    }
    fn is_noop(&self) -> bool {
        true
    }
}

/// The metric handles of one queue plus the timestamps they need. Lives inside the queue's
/// state, so every method runs under the queue's lock.
pub(crate) struct QueueMetrics<T> {
    depth: Arc<dyn GaugeMetric>,
    adds: Arc<dyn CounterMetric>,
    latency: Arc<dyn HistogramMetric>,
    work_duration: Arc<dyn HistogramMetric>,
    unfinished_work_seconds: Arc<dyn SettableGaugeMetric>,
    longest_running_processor: Arc<dyn SettableGaugeMetric>,
    /// Per lane, indexed by [`lane_index`]: depth, adds, queue duration.
    lane_depth: [Arc<dyn GaugeMetric>; 2],
    lane_adds: [Arc<dyn CounterMetric>; 2],
    lane_latency: [Arc<dyn HistogramMetric>; 2],
    lane_rises: Arc<dyn CounterMetric>,
    /// When each dirty item was first added since it was last handed out.
    added_at: HashMap<T, Instant, RandomState>,
    /// When each item being processed was handed out.
    started_at: HashMap<T, Instant, RandomState>,
}

impl<T: Item> QueueMetrics<T> {
    pub(crate) fn new(provider: &dyn MetricsProvider, name: &str) -> Self {
        Self {
            depth: provider.new_depth_metric(name),
            adds: provider.new_adds_metric(name),
            latency: provider.new_latency_metric(name),
            work_duration: provider.new_work_duration_metric(name),
            unfinished_work_seconds: provider.new_unfinished_work_seconds_metric(name),
            longest_running_processor: provider.new_longest_running_processor_seconds_metric(name),
            lane_depth: LANES.map(|lane| provider.new_lane_depth_metric(name, lane)),
            lane_adds: LANES.map(|lane| provider.new_lane_adds_metric(name, lane)),
            lane_latency: LANES.map(|lane| provider.new_lane_latency_metric(name, lane)),
            lane_rises: provider.new_lane_rises_metric(name),
            added_at: HashMap::default(),
            started_at: HashMap::default(),
        }
    }

    /// An add that marked `item` dirty, in lane `lane`.
    pub(crate) fn add(&mut self, item: &T, lane: Priority) {
        self.adds.inc();
        self.depth.inc();
        self.lane_adds[lane_index(lane)].inc();
        self.lane_depth[lane_index(lane)].inc();
        if !self.added_at.contains_key(item) {
            self.added_at.insert(item.clone(), Instant::now());
        }
    }

    /// A dirty item moved from the low to the high lane.
    pub(crate) fn rise(&mut self) {
        self.lane_rises.inc();
        self.lane_depth[lane_index(Priority::Low)].dec();
        self.lane_depth[lane_index(Priority::High)].inc();
    }

    /// `item` was handed to a worker from lane `lane`.
    pub(crate) fn get(&mut self, item: &T, lane: Priority) {
        let now = Instant::now();
        self.depth.dec();
        self.lane_depth[lane_index(lane)].dec();
        self.started_at.insert(item.clone(), now);
        if let Some(added) = self.added_at.remove(item) {
            let waited = now.saturating_duration_since(added).as_secs_f64();
            self.latency.observe(waited);
            self.lane_latency[lane_index(lane)].observe(waited);
        }
    }

    /// A worker finished `item`.
    pub(crate) fn done(&mut self, item: &T) {
        if let Some(started) = self.started_at.remove(item) {
            self.work_duration.observe(
                Instant::now()
                    .saturating_duration_since(started)
                    .as_secs_f64(),
            );
        }
    }

    /// Recomputes the two gauges about items still being processed.
    pub(crate) fn update_unfinished_work(&self) {
        let now = Instant::now();
        let mut total = 0.0;
        let mut oldest: f64 = 0.0;
        for started in self.started_at.values() {
            let age = now.saturating_duration_since(*started).as_secs_f64();
            total += age;
            oldest = oldest.max(age);
        }
        self.unfinished_work_seconds.set(total);
        self.longest_running_processor.set(oldest);
    }
}

/// The lanes, in the order of [`lane_index`].
const LANES: [Priority; 2] = [Priority::High, Priority::Low];

fn lane_index(lane: Priority) -> usize {
    match lane {
        Priority::High => 0,
        Priority::Low => 1,
    }
}

/// The retry counter of a delaying queue, present only when metrics are on.
pub(crate) type RetriesMetric = Option<Arc<dyn CounterMetric>>;

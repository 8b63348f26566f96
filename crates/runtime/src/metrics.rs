//! The reconcile metrics, under controller-runtime's names, in a `prometheus-client`
//! registry.
//!
//! | series | type | labels |
//! |---|---|---|
//! | `controller_runtime_reconcile_total` | counter | `controller`, `result` (`success`, `error`, `requeue`, `requeue_after`) |
//! | `controller_runtime_reconcile_errors_total` | counter | `controller` |
//! | `controller_runtime_reconcile_panics_total` | counter | `controller` |
//! | `controller_runtime_reconcile_time_seconds` | histogram | `controller` |
//! | `controller_runtime_max_concurrent_reconciles` | gauge | `controller` |
//! | `controller_runtime_active_workers` | gauge | `controller` |
//!
//! One [`ControllerMetrics`] serves every controller of a process: each series carries the
//! controller's name. The work queue's own metrics (`workqueue_*`, with `name` the
//! controller's) come from [`kctrl_workqueue`]'s provider, given to
//! [`Controller::with_queue`](crate::Controller::with_queue).

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// Bucket bounds (seconds) of `controller_runtime_reconcile_time_seconds`, controller-runtime's.
pub const RECONCILE_TIME_BUCKETS: [f64; 40] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9,
    1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 15.0, 20.0,
    25.0, 30.0, 40.0, 50.0, 60.0,
];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ControllerLabel {
    controller: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    controller: String,
    result: &'static str,
}

/// How a reconcile ended, as `controller_runtime_reconcile_total` counts it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReconcileResult {
    /// Done; the key waits for the next change.
    Success,
    /// The reconcile failed (or panicked).
    Error,
    /// Done; the key comes back rate-limited.
    Requeue,
    /// Done; the key comes back after a delay.
    RequeueAfter,
}

impl ReconcileResult {
    /// The `result` label.
    pub fn as_str(self) -> &'static str {
        match self {
            ReconcileResult::Success => "success",
            ReconcileResult::Error => "error",
            ReconcileResult::Requeue => "requeue",
            ReconcileResult::RequeueAfter => "requeue_after",
        }
    }
}

type Histograms = Family<ControllerLabel, Histogram, fn() -> Histogram>;

fn reconcile_histogram() -> Histogram {
    Histogram::new(RECONCILE_TIME_BUCKETS)
}

/// The reconcile series of every controller of a process. Cheap to clone; clones share
/// their series.
///
/// ```
/// use kctrl_runtime::metrics::ControllerMetrics;
/// use prometheus_client::registry::Registry;
///
/// let mut registry = Registry::default();
/// let metrics = ControllerMetrics::new(&mut registry);
/// // Give `metrics.clone()` to each `Controller::metrics`; serve the registry's encoding.
/// # let _ = metrics;
/// ```
#[derive(Clone, Debug)]
pub struct ControllerMetrics {
    total: Family<ResultLabels, Counter>,
    errors: Family<ControllerLabel, Counter>,
    panics: Family<ControllerLabel, Counter>,
    time: Histograms,
    max_concurrent: Family<ControllerLabel, Gauge>,
    active: Family<ControllerLabel, Gauge>,
}

impl ControllerMetrics {
    /// Registers the series in `registry` (names without a prefix).
    pub fn new(registry: &mut Registry) -> Self {
        let m = ControllerMetrics {
            total: Family::default(),
            errors: Family::default(),
            panics: Family::default(),
            time: Family::new_with_constructor(reconcile_histogram),
            max_concurrent: Family::default(),
            active: Family::default(),
        };
        registry.register(
            "controller_runtime_reconcile",
            "Total number of reconciliations per controller",
            m.total.clone(),
        );
        registry.register(
            "controller_runtime_reconcile_errors",
            "Total number of reconciliation errors per controller",
            m.errors.clone(),
        );
        registry.register(
            "controller_runtime_reconcile_panics",
            "Total number of reconciliation panics per controller",
            m.panics.clone(),
        );
        registry.register(
            "controller_runtime_reconcile_time_seconds",
            "Length of time per reconciliation per controller",
            m.time.clone(),
        );
        registry.register(
            "controller_runtime_max_concurrent_reconciles",
            "Maximum number of concurrent reconciles per controller",
            m.max_concurrent.clone(),
        );
        registry.register(
            "controller_runtime_active_workers",
            "Number of currently used workers per controller",
            m.active.clone(),
        );
        m
    }

    fn label(controller: &str) -> ControllerLabel {
        ControllerLabel {
            controller: controller.to_owned(),
        }
    }

    pub(crate) fn workers(&self, controller: &str, workers: usize) {
        self.max_concurrent
            .get_or_create(&Self::label(controller))
            .set(i64::try_from(workers).unwrap_or(i64::MAX));
    }

    pub(crate) fn worker_busy(&self, controller: &str, busy: bool) {
        let g = self.active.get_or_create(&Self::label(controller));
        if busy {
            g.inc();
        } else {
            g.dec();
        }
    }

    pub(crate) fn reconciled(
        &self,
        controller: &str,
        result: ReconcileResult,
        took: Duration,
        panicked: bool,
    ) {
        let label = Self::label(controller);
        self.total
            .get_or_create(&ResultLabels {
                controller: controller.to_owned(),
                result: result.as_str(),
            })
            .inc();
        if result == ReconcileResult::Error {
            self.errors.get_or_create(&label).inc();
        }
        if panicked {
            self.panics.get_or_create(&label).inc();
        }
        self.time.get_or_create(&label).observe(took.as_secs_f64());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::encoding::text::encode;

    #[test]
    fn series_carry_controller_runtime_names() {
        let mut registry = Registry::default();
        let m = ControllerMetrics::new(&mut registry);
        m.workers("foo", 2);
        m.worker_busy("foo", true);
        m.reconciled(
            "foo",
            ReconcileResult::Success,
            Duration::from_millis(3),
            false,
        );
        m.reconciled(
            "foo",
            ReconcileResult::Error,
            Duration::from_millis(30),
            true,
        );
        let mut text = String::new();
        encode(&mut text, &registry).unwrap();
        for line in [
            r#"controller_runtime_reconcile_total{controller="foo",result="success"} 1"#,
            r#"controller_runtime_reconcile_total{controller="foo",result="error"} 1"#,
            r#"controller_runtime_reconcile_errors_total{controller="foo"} 1"#,
            r#"controller_runtime_reconcile_panics_total{controller="foo"} 1"#,
            r#"controller_runtime_reconcile_time_seconds_count{controller="foo"} 2"#,
            r#"controller_runtime_reconcile_time_seconds_bucket{le="0.005",controller="foo"} 1"#,
            r#"controller_runtime_max_concurrent_reconciles{controller="foo"} 2"#,
            r#"controller_runtime_active_workers{controller="foo"} 1"#,
        ] {
            assert!(text.contains(line), "{line} not in\n{text}");
        }
    }
}

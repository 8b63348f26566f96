//! The ReplicaSet controller's own metrics, under kube-controller-manager's names (its
//! `pkg/controller/replicaset/metrics`). The runtime adds the `controller_runtime_*` reconcile
//! metrics and the work queue the `workqueue_*` ones.

use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// The controller's metrics, registered in a [`Registry`].
#[derive(Clone, Debug)]
pub struct ReplicaSetMetrics {
    sorting_deletion_age_ratio: Histogram,
}

impl ReplicaSetMetrics {
    /// Registers the series in `registry`:
    /// `replicaset_controller_sorting_deletion_age_ratio`, a histogram (buckets 0.25 to 8,
    /// doubling) of the age of each ready Pod chosen for deletion over the age of the youngest
    /// ready Pod, observed when a scale-down had to choose (below 2 when the ranking works).
    pub fn new(registry: &mut Registry) -> Self {
        let m = Self {
            sorting_deletion_age_ratio: Histogram::new(exponential_buckets(0.25, 2.0, 6)),
        };
        registry.register(
            "replicaset_controller_sorting_deletion_age_ratio",
            "For each ready Pod a scale-down deletes, its age divided by the age of the youngest ready Pod at that moment; values under 2 mean the ranking prefers young Pods as intended.",
            m.sorting_deletion_age_ratio.clone(),
        );
        m
    }

    pub(crate) fn observe_deletion_age_ratio(&self, ratio: f64) {
        self.sorting_deletion_age_ratio.observe(ratio);
    }
}

//! Informer metrics: client-go's `informer_*` series for informers that were given a name.
//!
//! client-go 1.36 (`tools/cache`, registered by component-base) publishes three series per
//! informer, labelled `name`, `group`, `version` and `resource`:
//!
//! | series | kind | meaning |
//! |---|---|---|
//! | `informer_queued_items` | gauge | deltas waiting in the informer's queue (set after every push and pop) |
//! | `informer_processing_latency_seconds` | histogram | time to apply one popped batch to the cache and hand its notifications to the handlers' buffers (buckets 1 ms … 10 s) |
//! | `informer_store_resource_version` | gauge | the cache's resourceVersion, its 15 least significant digits as a number (a non-numeric one leaves the gauge as it was) |
//!
//! An informer following a [`ShardScope`](crate::ShardScope) has one more, kctrl's own:
//! `kctrl_informer_shard_client_filtering` (gauge, same labels), 1 while it filters on the
//! client because kube-apiserver ignores its shard selector, 0 while the server filters.
//!
//! As in client-go they are **opt-in**: only an informer built with an [`InformerMetrics`]
//! (its [`InformerId`] — a name plus the resource — and an [`InformerMetricsProvider`])
//! records anything. An informer without one keeps no clock readings and sets no gauges; its
//! queue and cache carry an empty `Option` and nothing else.
//!
//! The usual way is a factory with a name
//! ([`SharedInformerFactoryBuilder::metrics`](crate::SharedInformerFactoryBuilder::metrics)),
//! which names each informer it creates after its resource, and only the first informer per
//! resource (client-go publishes nothing for a duplicate `(name, resource)` registration). For
//! Prometheus use [`PrometheusInformerMetrics`](crate::prometheus::PrometheusInformerMetrics).
//!
//! There is no global provider (client-go's `SetInformerMetricsProvider`): pass one where the
//! informer or factory is built, as `kctrl-workqueue` does for queues.

use std::fmt;
use std::sync::Arc;

use kctrl_client::ResourceRef;

/// A gauge set to an absolute value.
pub trait GaugeMetric: Send + Sync {
    /// Sets the value.
    fn set(&self, value: f64);
}

/// A distribution of observed values (seconds, for the processing latency).
pub trait HistogramMetric: Send + Sync {
    /// Records one observation.
    fn observe(&self, value: f64);
}

/// Who an informer's series belong to: the informer's name (client-go's `InformerName`,
/// e.g. `kube-controller-manager`) and its resource (group, version, plural).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct InformerId {
    /// The `name` label.
    pub name: String,
    /// The `group` label; empty for the core group.
    pub group: String,
    /// The `version` label.
    pub version: String,
    /// The `resource` label (the plural, e.g. `deployments`).
    pub resource: String,
}

impl InformerId {
    /// The id of an informer called `name` over `resource`.
    ///
    /// ```
    /// use k8s_openapi::api::apps::v1::Deployment;
    /// use kctrl_client::ResourceRef;
    /// use kctrl_informer::metrics::InformerId;
    ///
    /// let id = InformerId::new("kube-controller-manager", &ResourceRef::of::<Deployment>());
    /// assert_eq!((id.group.as_str(), id.version.as_str()), ("apps", "v1"));
    /// assert_eq!(id.resource, "deployments");
    /// ```
    pub fn new(name: impl Into<String>, resource: &ResourceRef) -> Self {
        Self {
            name: name.into(),
            group: resource.group.to_string(),
            version: resource.version.to_string(),
            resource: resource.plural.to_string(),
        }
    }
}

/// Creates the metric handles of one informer (client-go's `InformerMetricsProvider`).
/// Called once per informer when it is built, never on the hot path.
pub trait InformerMetricsProvider: Send + Sync {
    /// `informer_queued_items`.
    fn new_queued_items_metric(&self, id: &InformerId) -> Arc<dyn GaugeMetric>;
    /// `informer_processing_latency_seconds`.
    fn new_processing_latency_metric(&self, id: &InformerId) -> Arc<dyn HistogramMetric>;
    /// `informer_store_resource_version`.
    fn new_store_resource_version_metric(&self, id: &InformerId) -> Arc<dyn GaugeMetric>;
    /// `kctrl_informer_shard_client_filtering` (kctrl's own; client-go has no sharded
    /// informers): 1 while an informer following a shard scope filters on the client
    /// because kube-apiserver ignores its selector (no `ShardedListAndWatch` feature gate),
    /// 0 while the server filters. Only informers with a shard scope get it. The default
    /// records nothing.
    fn new_shard_client_filtering_metric(&self, id: &InformerId) -> Arc<dyn GaugeMetric> {
        let _ = id;
        Arc::new(NoGauge)
    }
}

/// A gauge that records nothing.
struct NoGauge;

impl GaugeMetric for NoGauge {
    fn set(&self, _: f64) {}
}

impl<P: InformerMetricsProvider + ?Sized> InformerMetricsProvider for Arc<P> {
    fn new_queued_items_metric(&self, id: &InformerId) -> Arc<dyn GaugeMetric> {
        (**self).new_queued_items_metric(id)
    }
    fn new_processing_latency_metric(&self, id: &InformerId) -> Arc<dyn HistogramMetric> {
        (**self).new_processing_latency_metric(id)
    }
    fn new_store_resource_version_metric(&self, id: &InformerId) -> Arc<dyn GaugeMetric> {
        (**self).new_store_resource_version_metric(id)
    }
    fn new_shard_client_filtering_metric(&self, id: &InformerId) -> Arc<dyn GaugeMetric> {
        (**self).new_shard_client_filtering_metric(id)
    }
}

/// What an informer needs to publish its metrics: who it is and where the series go.
#[derive(Clone)]
pub struct InformerMetrics {
    /// The labels of its series.
    pub id: InformerId,
    /// Creates the series.
    pub provider: Arc<dyn InformerMetricsProvider>,
}

impl fmt::Debug for InformerMetrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InformerMetrics")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

impl InformerMetrics {
    /// Metrics for the informer `id`, created by `provider`.
    pub fn new(id: InformerId, provider: Arc<dyn InformerMetricsProvider>) -> Self {
        Self { id, provider }
    }
}

/// The value `informer_store_resource_version` shows for `resource_version`: its last 15
/// digits as a number (so it stays exact in a float), `0` for an empty one, `None` for one
/// that is not a number (the gauge then keeps its value).
///
/// ```
/// use kctrl_informer::metrics::resource_version_metric_value;
///
/// assert_eq!(resource_version_metric_value("12345"), Some(12345.0));
/// assert_eq!(resource_version_metric_value(""), Some(0.0));
/// assert_eq!(resource_version_metric_value("98765432109876543210"), Some(109876543210.0 + 432e12));
/// assert_eq!(resource_version_metric_value("abc"), None);
/// ```
pub fn resource_version_metric_value(resource_version: &str) -> Option<f64> {
    if resource_version.is_empty() {
        return Some(0.0);
    }
    let tail = match resource_version.len().checked_sub(15) {
        Some(start) if resource_version.is_char_boundary(start) => &resource_version[start..],
        Some(_) => return None,
        None => resource_version,
    };
    // i64 as client-go parses it (a sign is accepted; the value stays below 2^53).
    tail.parse::<i64>().ok().map(|v| v as f64)
}

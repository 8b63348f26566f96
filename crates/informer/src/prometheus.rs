//! An [`InformerMetricsProvider`] that records client-go's informer series in a
//! `prometheus-client` [`Registry`], under the names, help texts, labels and buckets that
//! component-base registers them with (so dashboards written for kube-controller-manager
//! read them unchanged):
//!
//! | series | type | labels |
//! |---|---|---|
//! | `informer_queued_items` | gauge | `name`, `group`, `version`, `resource` |
//! | `informer_processing_latency_seconds` | histogram ([`PROCESSING_LATENCY_BUCKETS`]) | `name`, `group`, `version`, `resource` |
//! | `informer_store_resource_version` | gauge | `name`, `group`, `version`, `resource` |
//! | `kctrl_informer_shard_client_filtering` (kctrl's own, informers with a shard scope only) | gauge | `name`, `group`, `version`, `resource` |

use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::metrics::{GaugeMetric, HistogramMetric, InformerId, InformerMetricsProvider};

/// Bucket bounds (seconds) of `informer_processing_latency_seconds`, as component-base
/// registers it.
pub const PROCESSING_LATENCY_BUCKETS: [f64; 12] = [
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Labels {
    name: String,
    group: String,
    version: String,
    resource: String,
}

impl From<&InformerId> for Labels {
    fn from(id: &InformerId) -> Self {
        Self {
            name: id.name.clone(),
            group: id.group.clone(),
            version: id.version.clone(),
            resource: id.resource.clone(),
        }
    }
}

type FloatGauge = Gauge<f64, AtomicU64>;

fn latency_histogram() -> Histogram {
    Histogram::new(PROCESSING_LATENCY_BUCKETS)
}

/// Records informer metrics in a `prometheus-client` registry. Cheap to clone; clones share
/// their series. Create one per registry and give it to every named informer or factory.
///
/// ```
/// use std::sync::Arc;
/// use k8s_openapi::api::core::v1::ConfigMap;
/// use kctrl_client::ResourceRef;
/// use kctrl_informer::metrics::{InformerId, InformerMetricsProvider};
/// use kctrl_informer::prometheus::PrometheusInformerMetrics;
/// use prometheus_client::registry::Registry;
///
/// let mut registry = Registry::default();
/// let metrics = PrometheusInformerMetrics::new(&mut registry);
/// // Normally an informer makes these calls (see `SharedInformerFactoryBuilder::metrics`).
/// let id = InformerId::new("my-controller", &ResourceRef::of::<ConfigMap>());
/// metrics.new_store_resource_version_metric(&id).set(1234.0);
///
/// let mut text = String::new();
/// prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
/// assert!(text.contains(
///     r#"informer_store_resource_version{name="my-controller",group="",version="v1",resource="configmaps"} 1234"#
/// ));
/// ```
#[derive(Clone, Debug)]
pub struct PrometheusInformerMetrics {
    queued_items: Family<Labels, FloatGauge>,
    processing_latency: Family<Labels, Histogram, fn() -> Histogram>,
    store_resource_version: Family<Labels, FloatGauge>,
    shard_client_filtering: Family<Labels, FloatGauge>,
}

impl PrometheusInformerMetrics {
    /// Registers the three `informer_*` families and `kctrl_informer_shard_client_filtering`
    /// in `registry`.
    pub fn new(registry: &mut Registry) -> Self {
        let this = Self {
            queued_items: Family::default(),
            processing_latency: Family::new_with_constructor(latency_histogram),
            store_resource_version: Family::default(),
            shard_client_filtering: Family::default(),
        };
        registry.register(
            "informer_queued_items",
            "Number of items currently queued in the FIFO.",
            this.queued_items.clone(),
        );
        registry.register(
            "informer_processing_latency_seconds",
            "Time taken to process events after popping from the queue.",
            this.processing_latency.clone(),
        );
        registry.register(
            "informer_store_resource_version",
            "The 15 least significant digits of the resource version of the store.",
            this.store_resource_version.clone(),
        );
        registry.register(
            "kctrl_informer_shard_client_filtering",
            "1 while the informer filters by its shard selector on the client because \
             kube-apiserver ignores it (enable the ShardedListAndWatch feature gate), 0 while \
             the server filters.",
            this.shard_client_filtering.clone(),
        );
        this
    }
}

struct GaugeHandle(FloatGauge);

impl GaugeMetric for GaugeHandle {
    fn set(&self, value: f64) {
        self.0.set(value);
    }
}

struct HistogramHandle(Histogram);

impl HistogramMetric for HistogramHandle {
    fn observe(&self, value: f64) {
        self.0.observe(value);
    }
}

impl InformerMetricsProvider for PrometheusInformerMetrics {
    fn new_queued_items_metric(&self, id: &InformerId) -> Arc<dyn GaugeMetric> {
        Arc::new(GaugeHandle(
            self.queued_items.get_or_create(&id.into()).clone(),
        ))
    }

    fn new_processing_latency_metric(&self, id: &InformerId) -> Arc<dyn HistogramMetric> {
        Arc::new(HistogramHandle(
            self.processing_latency.get_or_create(&id.into()).clone(),
        ))
    }

    fn new_store_resource_version_metric(&self, id: &InformerId) -> Arc<dyn GaugeMetric> {
        Arc::new(GaugeHandle(
            self.store_resource_version
                .get_or_create(&id.into())
                .clone(),
        ))
    }

    fn new_shard_client_filtering_metric(&self, id: &InformerId) -> Arc<dyn GaugeMetric> {
        Arc::new(GaugeHandle(
            self.shard_client_filtering
                .get_or_create(&id.into())
                .clone(),
        ))
    }
}

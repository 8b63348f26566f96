//! Election metrics: a small trait the elector reports to, a no-op default, and a
//! `prometheus-client` implementation with client-go's (component-base's) metric names.
//!
//! | metric | kind | meaning |
//! |---|---|---|
//! | `leader_election_master_status{name}` | gauge | 1 while this process leads the election `name`, 0 otherwise |
//! | `leader_election_slowpath_total{name}` | counter | renewals that had to read the lock first because the optimistic update from the cached lease failed |

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// What an elector reports; `name` is the election's
/// [`name`](crate::LeaderElectionConfig::name).
pub trait LeaderMetrics: Send + Sync + 'static {
    /// This process now leads.
    fn leader_on(&self, name: &str);
    /// This process does not lead (also reported when the elector is built).
    fn leader_off(&self, name: &str);
    /// A renewal took the slow path (a get before the update).
    fn slowpath_exercised(&self, name: &str);
}

/// Discards every metric (the default).
#[derive(Clone, Copy, Debug, Default)]
pub struct NoopLeaderMetrics;

impl LeaderMetrics for NoopLeaderMetrics {
    fn leader_on(&self, _name: &str) {}
    fn leader_off(&self, _name: &str) {}
    fn slowpath_exercised(&self, _name: &str) {}
}

/// The `name` label of both metrics.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LeaseName {
    name: String,
}

fn label(name: &str) -> LeaseName {
    LeaseName {
        name: name.to_owned(),
    }
}

/// Records election metrics in a `prometheus-client` registry. Create one per registry
/// and clone it into every elector's config.
///
/// ```
/// use kctrl_leader_election::{LeaderMetrics, PrometheusLeaderMetrics};
/// use prometheus_client::registry::Registry;
///
/// let mut registry = Registry::default();
/// let metrics = PrometheusLeaderMetrics::new(&mut registry);
/// metrics.leader_on("kube-controller-manager");
///
/// let mut text = String::new();
/// prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
/// assert!(text.contains(r#"leader_election_master_status{name="kube-controller-manager"} 1"#));
/// ```
#[derive(Clone, Debug)]
pub struct PrometheusLeaderMetrics {
    master_status: Family<LeaseName, Gauge>,
    slowpath: Family<LeaseName, Counter>,
}

impl PrometheusLeaderMetrics {
    /// Registers `leader_election_master_status` and `leader_election_slowpath_total` in
    /// `registry`.
    pub fn new(registry: &mut Registry) -> Self {
        let metrics = Self {
            master_status: Family::default(),
            slowpath: Family::default(),
        };
        let registry = registry.sub_registry_with_prefix("leader_election");
        registry.register(
            "master_status",
            "1 while this process holds the lease of the election named by the name label, \
             0 while it stands by",
            metrics.master_status.clone(),
        );
        registry.register(
            "slowpath",
            "Lease renewals that had to read the lease first because the optimistic update \
             from the cached copy failed",
            metrics.slowpath.clone(),
        );
        metrics
    }
}

impl LeaderMetrics for PrometheusLeaderMetrics {
    fn leader_on(&self, name: &str) {
        self.master_status.get_or_create(&label(name)).set(1);
    }

    fn leader_off(&self, name: &str) {
        self.master_status.get_or_create(&label(name)).set(0);
    }

    fn slowpath_exercised(&self, name: &str) {
        self.slowpath.get_or_create(&label(name)).inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encode(registry: &Registry) -> String {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, registry).unwrap();
        text
    }

    #[test]
    fn gauge_follows_leadership_and_counter_counts_slow_paths() {
        let mut registry = Registry::default();
        let metrics = PrometheusLeaderMetrics::new(&mut registry);
        metrics.leader_off("a");
        metrics.leader_on("b");
        metrics.slowpath_exercised("b");
        metrics.slowpath_exercised("b");
        let text = encode(&registry);
        assert!(
            text.contains(r#"leader_election_master_status{name="a"} 0"#),
            "{text}"
        );
        assert!(
            text.contains(r#"leader_election_master_status{name="b"} 1"#),
            "{text}"
        );
        assert!(
            text.contains(r#"leader_election_slowpath_total{name="b"} 2"#),
            "{text}"
        );
        assert!(
            text.contains("# TYPE leader_election_master_status gauge"),
            "{text}"
        );
        assert!(
            text.contains("# TYPE leader_election_slowpath counter"),
            "{text}"
        );
        metrics.leader_off("b");
        assert!(encode(&registry).contains(r#"leader_election_master_status{name="b"} 0"#));
    }
}

//! Shard metrics: a small trait a member reports to, a no-op default, and a
//! `prometheus-client` implementation. Every metric has the label `group`.
//!
//! | metric | kind | meaning |
//! |---|---|---|
//! | `shard_member_buckets{group}` | gauge | buckets this member holds active |
//! | `shard_member_hash_fraction{group}` | gauge | the share of the hash space they cover, 0 to 1 |
//! | `shard_member_ranges{group, ranges}` | gauge | 1, its `ranges` label the held hash ranges (`0x…-0x…`, comma-separated); the previous series is removed at each change |
//! | `shard_members{group}` | gauge | live members this member sees, itself included |
//! | `shard_member_ready{group}` | gauge | 1 while it is ready: joined, and reconciling at least one bucket or holding every bucket the split gives it (none, when there are more members than the bucket count allows for) |
//! | `shard_handovers_total{group, direction}` | counter | buckets `acquired` (became active), `released` (drained and handed back) and `lost` (dropped at once when the Lease could not be renewed) |
//! | `shard_keys_dropped_total{group}` | counter | keys a controller dropped because their bucket was not active here (another member reconciles them) |
//! | `shard_rebalance_duration_seconds{group}` | histogram | from a change of the members this member sees to its part of the new split being in force |

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

/// Which way a bucket changed hands, for [`ShardMetrics::handover`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Handover {
    /// The bucket became active here.
    Acquired,
    /// The bucket was drained and released.
    Released,
    /// The bucket was dropped without a drain: the Lease could not be renewed.
    Lost,
}

impl Handover {
    fn as_str(self) -> &'static str {
        match self {
            Handover::Acquired => "acquired",
            Handover::Released => "released",
            Handover::Lost => "lost",
        }
    }
}

/// What a member reports; `group` is its [`ShardConfig::group`](crate::ShardConfig::group).
pub trait ShardMetrics: Send + Sync + 'static {
    /// The member now holds `buckets` active buckets covering `fraction` of the hash space,
    /// as `ranges` (`0x…-0x…`, comma-separated).
    fn held(&self, group: &str, buckets: usize, fraction: f64, ranges: &str);
    /// The member sees `members` live members, itself included.
    fn members(&self, group: &str, members: usize);
    /// The member is ready ([`ShardMember::is_ready`](crate::ShardMember::is_ready)) or
    /// not. Called at every change of its state; the default does nothing.
    fn ready(&self, group: &str, ready: bool) {
        let _ = (group, ready);
    }
    /// One bucket changed hands.
    fn handover(&self, group: &str, direction: Handover);
    /// `keys` keys were dropped because their bucket was not active.
    fn keys_dropped(&self, group: &str, keys: u64);
    /// The split took `seconds` to come into force after the members changed.
    fn rebalanced(&self, group: &str, seconds: f64);
}

/// Discards every metric (the default).
#[derive(Clone, Copy, Debug, Default)]
pub struct NoopShardMetrics;

impl ShardMetrics for NoopShardMetrics {
    fn held(&self, _: &str, _: usize, _: f64, _: &str) {}
    fn members(&self, _: &str, _: usize) {}
    fn handover(&self, _: &str, _: Handover) {}
    fn keys_dropped(&self, _: &str, _: u64) {}
    fn rebalanced(&self, _: &str, _: f64) {}
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct GroupLabel {
    group: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RangesLabel {
    group: String,
    ranges: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DirectionLabel {
    group: String,
    direction: String,
}

fn group(group: &str) -> GroupLabel {
    GroupLabel {
        group: group.to_owned(),
    }
}

/// Records shard metrics in a `prometheus-client` registry. One per registry; clone it into
/// every member's config.
///
/// ```
/// use kctrl_shard::{PrometheusShardMetrics, ShardMetrics};
/// use prometheus_client::registry::Registry;
///
/// let mut registry = Registry::default();
/// let metrics = PrometheusShardMetrics::new(&mut registry);
/// metrics.held("widgets", 32, 0.5, "0x0000000000000000-0x8000000000000000");
/// metrics.ready("widgets", true);
///
/// let mut text = String::new();
/// prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
/// assert!(text.contains(r#"shard_member_buckets{group="widgets"} 32"#));
/// assert!(text.contains(r#"shard_member_ready{group="widgets"} 1"#));
/// ```
#[derive(Clone, Debug)]
pub struct PrometheusShardMetrics {
    buckets: Family<GroupLabel, Gauge>,
    fraction: Family<GroupLabel, Gauge<f64, AtomicU64>>,
    ranges: Family<RangesLabel, Gauge>,
    /// The `ranges` series set per group, to remove it at the next change.
    current_ranges: Arc<Mutex<Vec<RangesLabel>>>,
    members: Family<GroupLabel, Gauge>,
    ready: Family<GroupLabel, Gauge>,
    handovers: Family<DirectionLabel, Counter>,
    dropped: Family<GroupLabel, Counter>,
    rebalance: Family<GroupLabel, Histogram>,
}

impl PrometheusShardMetrics {
    /// Registers the `shard_*` metrics in `registry`.
    pub fn new(registry: &mut Registry) -> Self {
        let metrics = Self {
            buckets: Family::default(),
            fraction: Family::default(),
            ranges: Family::default(),
            current_ranges: Arc::default(),
            members: Family::default(),
            ready: Family::default(),
            handovers: Family::default(),
            dropped: Family::default(),
            rebalance: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.25, 2.0, 10))
            }),
        };
        let r = registry.sub_registry_with_prefix("shard");
        r.register(
            "member_buckets",
            "Buckets of the hash space this member holds active",
            metrics.buckets.clone(),
        );
        r.register(
            "member_hash_fraction",
            "Share of the hash space this member holds active, 0 to 1",
            metrics.fraction.clone(),
        );
        r.register(
            "member_ranges",
            "1, with the hash ranges this member holds active in the ranges label",
            metrics.ranges.clone(),
        );
        r.register(
            "members",
            "Live members of the group this member sees, itself included",
            metrics.members.clone(),
        );
        r.register(
            "member_ready",
            "1 while this member is ready: joined, holding what the split gives it",
            metrics.ready.clone(),
        );
        r.register(
            "handovers",
            "Buckets acquired, released after a drain, or lost when the lease could not be renewed",
            metrics.handovers.clone(),
        );
        r.register(
            "keys_dropped",
            "Keys dropped because their bucket was not active on this member",
            metrics.dropped.clone(),
        );
        r.register(
            "rebalance_duration_seconds",
            "Time from a change of the members to this member's part of the new split being in force",
            metrics.rebalance.clone(),
        );
        metrics
    }
}

impl ShardMetrics for PrometheusShardMetrics {
    fn held(&self, g: &str, buckets: usize, fraction: f64, ranges: &str) {
        self.buckets
            .get_or_create(&group(g))
            .set(i64::try_from(buckets).unwrap_or(i64::MAX));
        self.fraction.get_or_create(&group(g)).set(fraction);
        let label = RangesLabel {
            group: g.to_owned(),
            ranges: ranges.to_owned(),
        };
        let mut current = self
            .current_ranges
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        current.retain(|old| {
            if old.group == g && *old != label {
                self.ranges.remove(old);
                false
            } else {
                true
            }
        });
        if !current.contains(&label) {
            current.push(label.clone());
        }
        self.ranges.get_or_create(&label).set(1);
    }

    fn ready(&self, g: &str, ready: bool) {
        self.ready.get_or_create(&group(g)).set(i64::from(ready));
    }

    fn members(&self, g: &str, members: usize) {
        self.members
            .get_or_create(&group(g))
            .set(i64::try_from(members).unwrap_or(i64::MAX));
    }

    fn handover(&self, g: &str, direction: Handover) {
        self.handovers
            .get_or_create(&DirectionLabel {
                group: g.to_owned(),
                direction: direction.as_str().to_owned(),
            })
            .inc();
    }

    fn keys_dropped(&self, g: &str, keys: u64) {
        self.dropped.get_or_create(&group(g)).inc_by(keys);
    }

    fn rebalanced(&self, g: &str, seconds: f64) {
        self.rebalance.get_or_create(&group(g)).observe(seconds);
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
    fn every_metric_is_recorded_under_its_name() {
        let mut registry = Registry::default();
        let m = PrometheusShardMetrics::new(&mut registry);
        m.held("g", 2, 0.25, "0x0-0x1");
        m.held("g", 1, 0.125, "0x0-0x2");
        m.members("g", 3);
        m.ready("g", true);
        m.handover("g", Handover::Acquired);
        m.handover("g", Handover::Lost);
        m.keys_dropped("g", 5);
        m.rebalanced("g", 1.5);
        let text = encode(&registry);
        for want in [
            r#"shard_member_buckets{group="g"} 1"#,
            r#"shard_member_hash_fraction{group="g"} 0.125"#,
            r#"shard_member_ranges{group="g",ranges="0x0-0x2"} 1"#,
            r#"shard_members{group="g"} 3"#,
            r#"shard_member_ready{group="g"} 1"#,
            r#"shard_handovers_total{group="g",direction="acquired"} 1"#,
            r#"shard_handovers_total{group="g",direction="lost"} 1"#,
            r#"shard_keys_dropped_total{group="g"} 5"#,
            r#"shard_rebalance_duration_seconds_count{group="g"} 1"#,
        ] {
            assert!(text.contains(want), "{want} missing from\n{text}");
        }
        assert!(
            !text.contains("0x0-0x1"),
            "the old ranges series stayed:\n{text}"
        );
        m.ready("g", false);
        assert!(encode(&registry).contains(r#"shard_member_ready{group="g"} 0"#));
    }
}

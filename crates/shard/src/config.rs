//! [`ShardConfig`]: who the member is, which group it belongs to, how the hash space is cut
//! and how its Lease is timed; validated before anything runs.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use kctrl_client::clock::{Clock, SystemClock};

use crate::buckets::{DEFAULT_BUCKET_COUNT, MAX_BUCKET_COUNT};
use crate::error::ConfigError;
use crate::member::BucketState;
use crate::metrics::{NoopShardMetrics, ShardMetrics};

/// Default lease duration, as leader election's.
pub const DEFAULT_LEASE_DURATION: Duration = Duration::from_secs(15);
/// Default renew deadline, as leader election's.
pub const DEFAULT_RENEW_DEADLINE: Duration = Duration::from_secs(10);
/// Default retry period, as leader election's.
pub const DEFAULT_RETRY_PERIOD: Duration = Duration::from_secs(2);

/// Called at each bucket state change, with the member's identity, the bucket and its new
/// state, synchronously while the change is made (keep it short; it must not call back into
/// the member).
pub type TransitionHook = Arc<dyn Fn(&str, u32, BucketState) + Send + Sync>;

/// One member of a shard group: the group, its Lease, the buckets and the timing.
///
/// ```
/// use kctrl_shard::ShardConfig;
/// let config = ShardConfig::new("widgets", "kube-system", "widgets-7d9f-x2k4q");
/// assert_eq!(config.lease_name(), "widgets-widgets-7d9f-x2k4q");
/// assert_eq!(config.bucket_count, 64);
/// assert!(config.validate().is_ok());
/// ```
#[derive(Clone)]
pub struct ShardConfig {
    /// The group: the replicas of one controller. Names the Leases (`<group>-<identity>`)
    /// and is their `shard.kctrl.io/group` label. A DNS-1123 label.
    pub group: String,
    /// The namespace of the group's Leases.
    pub namespace: String,
    /// This member's identity, unique in the group (the pod name is the usual choice).
    pub identity: String,
    /// How many buckets the hash space is cut into: a power of two from 1 to
    /// [`MAX_BUCKET_COUNT`](crate::MAX_BUCKET_COUNT), the same for every member (64).
    /// More buckets balance the load better between members; each is a unit of handover.
    pub bucket_count: u32,
    /// How long others wait, after they last saw this member's Lease change, before they
    /// take its buckets over (15 s). A whole number of seconds.
    pub lease_duration: Duration,
    /// How long this member keeps trying to renew its Lease before it stops reconciling
    /// (10 s). Must be below `lease_duration`: the difference is the safety margin for
    /// clock rate differences and for stopping the reconciles in flight.
    pub renew_deadline: Duration,
    /// How often the member renews and looks at the group (2 s).
    pub retry_period: Duration,
    /// Whether a bucket becomes active only once the caches confirm they cover it
    /// ([`ShardMember::confirm_cache_scope`](crate::ShardMember::confirm_cache_scope)).
    /// Off (the default) for caches that hold every object whatever the scope.
    pub confirm_cache_scope: bool,
    /// Where the member's metrics go ([`NoopShardMetrics`] by default).
    pub metrics: Arc<dyn ShardMetrics>,
    /// The wall clock the Lease's renew time is written with ([`SystemClock`] by default).
    /// Liveness is never judged with it, only with the monotonic clock.
    pub clock: Arc<dyn Clock>,
    /// Called at each bucket state change (none by default).
    pub on_transition: Option<TransitionHook>,
}

impl fmt::Debug for ShardConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ShardConfig")
            .field("group", &self.group)
            .field("namespace", &self.namespace)
            .field("identity", &self.identity)
            .field("bucket_count", &self.bucket_count)
            .field("lease_duration", &self.lease_duration)
            .field("renew_deadline", &self.renew_deadline)
            .field("retry_period", &self.retry_period)
            .field("confirm_cache_scope", &self.confirm_cache_scope)
            .finish_non_exhaustive()
    }
}

impl ShardConfig {
    /// Member `identity` of `group`, its Lease in `namespace`, with the defaults: 64
    /// buckets, 15 s lease, 10 s renew deadline, 2 s retry period, no metrics.
    pub fn new(
        group: impl Into<String>,
        namespace: impl Into<String>,
        identity: impl Into<String>,
    ) -> Self {
        Self {
            group: group.into(),
            namespace: namespace.into(),
            identity: identity.into(),
            bucket_count: DEFAULT_BUCKET_COUNT,
            lease_duration: DEFAULT_LEASE_DURATION,
            renew_deadline: DEFAULT_RENEW_DEADLINE,
            retry_period: DEFAULT_RETRY_PERIOD,
            confirm_cache_scope: false,
            metrics: Arc::new(NoopShardMetrics),
            clock: Arc::new(SystemClock),
            on_transition: None,
        }
    }

    /// This member's Lease: `<group>-<identity>`.
    pub fn lease_name(&self) -> String {
        format!("{}-{}", self.group, self.identity)
    }

    /// Checks everything a member needs: the group a DNS-1123 label, the Lease name a
    /// DNS-1123 subdomain, a namespace, the bucket count a power of two in range, and
    /// `lease_duration > renew_deadline > 1.2 × retry_period`, all positive, the lease
    /// duration in whole seconds.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if let Err(why) = check_label(&self.group) {
            return Err(ConfigError::InvalidGroup {
                group: self.group.clone(),
                why,
            });
        }
        let lease = self.lease_name();
        if let Err(why) = check_identity(&self.identity).and_then(|()| check_subdomain(&lease)) {
            return Err(ConfigError::InvalidIdentity {
                identity: self.identity.clone(),
                lease,
                why,
            });
        }
        if self.namespace.is_empty() {
            return Err(ConfigError::EmptyNamespace);
        }
        if !self.bucket_count.is_power_of_two() || self.bucket_count > MAX_BUCKET_COUNT {
            return Err(ConfigError::InvalidBucketCount {
                count: self.bucket_count,
                max: MAX_BUCKET_COUNT,
            });
        }
        if self.lease_duration.is_zero() || self.lease_duration.subsec_nanos() != 0 {
            return Err(ConfigError::InvalidLeaseDuration {
                lease_duration: self.lease_duration,
            });
        }
        if self.renew_deadline.is_zero() {
            return Err(ConfigError::Zero {
                what: "renew deadline",
            });
        }
        if self.retry_period.is_zero() {
            return Err(ConfigError::Zero {
                what: "retry period",
            });
        }
        if self.lease_duration <= self.renew_deadline {
            return Err(ConfigError::LeaseDurationNotAboveRenewDeadline {
                lease_duration: self.lease_duration,
                renew_deadline: self.renew_deadline,
            });
        }
        if self.renew_deadline <= self.retry_period.mul_f64(1.2) {
            return Err(ConfigError::RenewDeadlineNotAboveRetryPeriod {
                renew_deadline: self.renew_deadline,
                retry_period: self.retry_period,
            });
        }
        Ok(())
    }

    /// How long one Lease call may take: half the renew deadline, so a hung call leaves
    /// time for a retry before the deadline.
    pub(crate) fn call_timeout(&self) -> Duration {
        self.renew_deadline / 2
    }
}

fn is_alnum(c: u8) -> bool {
    c.is_ascii_lowercase() || c.is_ascii_digit()
}

/// A DNS-1123 label: 1 to 63 of `[a-z0-9-]`, alphanumeric at both ends.
fn check_label(s: &str) -> Result<(), &'static str> {
    let b = s.as_bytes();
    if b.is_empty() {
        return Err("it is empty");
    }
    if b.len() > 63 {
        return Err("it is longer than 63 characters");
    }
    if !b.iter().all(|&c| is_alnum(c) || c == b'-') {
        return Err("it has a character other than a lowercase letter, a digit or '-'");
    }
    if !is_alnum(b[0]) || !is_alnum(b[b.len() - 1]) {
        return Err("it does not start and end with a lowercase letter or digit");
    }
    Ok(())
}

fn check_identity(s: &str) -> Result<(), &'static str> {
    if s.is_empty() {
        return Err("it is empty");
    }
    Ok(())
}

/// A DNS-1123 subdomain: at most 253 characters, dot-separated DNS-1123 labels.
fn check_subdomain(s: &str) -> Result<(), &'static str> {
    if s.len() > 253 {
        return Err("the Lease name would be longer than 253 characters");
    }
    for label in s.split('.') {
        let b = label.as_bytes();
        if b.is_empty() {
            return Err("it has an empty part between dots");
        }
        if !b.iter().all(|&c| is_alnum(c) || c == b'-') {
            return Err("it has a character other than a lowercase letter, a digit, '-' or '.'");
        }
        if !is_alnum(b[0]) || !is_alnum(b[b.len() - 1]) {
            return Err("a part between dots does not start and end with a letter or digit");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> ShardConfig {
        ShardConfig::new("widgets", "default", "replica-0")
    }

    #[test]
    fn the_defaults_are_valid_and_leader_election_timed() {
        let c = config();
        assert_eq!(c.validate(), Ok(()));
        assert_eq!(c.bucket_count, 64);
        assert_eq!(
            (c.lease_duration, c.renew_deadline, c.retry_period),
            (
                Duration::from_secs(15),
                Duration::from_secs(10),
                Duration::from_secs(2)
            )
        );
        assert_eq!(c.call_timeout(), Duration::from_secs(5));
    }

    #[test]
    fn bad_groups_and_identities_are_named() {
        for group in [
            "",
            "Widgets",
            "-widgets",
            "widgets-",
            "wid_gets",
            "a.b",
            &"g".repeat(64),
        ] {
            let mut c = config();
            c.group = group.to_owned();
            let err = c.validate().unwrap_err();
            assert!(
                matches!(err, ConfigError::InvalidGroup { .. }),
                "{group}: {err}"
            );
            assert!(err.to_string().contains("is not valid"), "{err}");
        }
        for identity in ["", "Pod-1", "pod_1", "pod-", "a..b", &"p".repeat(250)] {
            let mut c = config();
            c.identity = identity.to_owned();
            let err = c.validate().unwrap_err();
            assert!(
                matches!(err, ConfigError::InvalidIdentity { .. }),
                "{identity}: {err}"
            );
        }
        let mut c = config();
        c.identity = "web-7d9f.zone-a".into();
        assert_eq!(c.validate(), Ok(()));
        c.namespace.clear();
        assert_eq!(c.validate(), Err(ConfigError::EmptyNamespace));
    }

    #[test]
    fn bucket_counts_must_be_powers_of_two_in_range() {
        for count in [0, 3, 48, 8192] {
            let mut c = config();
            c.bucket_count = count;
            let err = c.validate().unwrap_err();
            assert_eq!(
                err,
                ConfigError::InvalidBucketCount { count, max: 4096 },
                "{count}"
            );
        }
        for count in [1, 2, 64, 4096] {
            let mut c = config();
            c.bucket_count = count;
            assert_eq!(c.validate(), Ok(()));
        }
    }

    #[test]
    fn each_timing_rule_has_its_error() {
        let mut c = config();
        c.renew_deadline = Duration::from_secs(15);
        let err = c.validate().unwrap_err();
        assert_eq!(
            err,
            ConfigError::LeaseDurationNotAboveRenewDeadline {
                lease_duration: Duration::from_secs(15),
                renew_deadline: Duration::from_secs(15),
            }
        );
        assert!(
            err.to_string()
                .contains("must be greater than renew deadline")
        );

        let mut c = config();
        c.renew_deadline = Duration::from_millis(2400);
        assert!(matches!(
            c.validate(),
            Err(ConfigError::RenewDeadlineNotAboveRetryPeriod { .. })
        ));

        let mut c = config();
        c.lease_duration = Duration::from_millis(15_500);
        assert!(matches!(
            c.validate(),
            Err(ConfigError::InvalidLeaseDuration { .. })
        ));

        let mut c = config();
        c.retry_period = Duration::ZERO;
        assert_eq!(
            c.validate(),
            Err(ConfigError::Zero {
                what: "retry period"
            })
        );
        let mut c = config();
        c.renew_deadline = Duration::ZERO;
        assert_eq!(
            c.validate(),
            Err(ConfigError::Zero {
                what: "renew deadline"
            })
        );
    }
}

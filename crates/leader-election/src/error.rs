//! The crate's typed errors: invalid configuration, lock failures, lock types, health.

use std::time::Duration;

/// A [`LeaderElectionConfig`](crate::LeaderElectionConfig) that cannot work; the messages are
/// client-go's, followed by the offending values.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// `lease_duration` is zero.
    #[error("leaseDuration must be greater than zero")]
    LeaseDurationZero,
    /// `lease_duration` is not a whole number of seconds: a Lease stores its duration in
    /// whole seconds, so anything else would be written truncated (500 ms as 0).
    #[error(
        "leaseDuration must be a whole number of seconds, at least 1s, because the Lease \
         records it in seconds (leaseDuration {lease_duration:?})"
    )]
    LeaseDurationNotWholeSeconds {
        /// The configured lease duration.
        lease_duration: Duration,
    },
    /// `renew_deadline` is zero.
    #[error("renewDeadline must be greater than zero")]
    RenewDeadlineZero,
    /// `retry_period` is zero.
    #[error("retryPeriod must be greater than zero")]
    RetryPeriodZero,
    /// Other candidates could take the lock over before the leader gives up renewing it.
    #[error(
        "leaseDuration must be greater than renewDeadline \
         (leaseDuration {lease_duration:?}, renewDeadline {renew_deadline:?})"
    )]
    LeaseDurationNotAboveRenewDeadline {
        /// The configured lease duration.
        lease_duration: Duration,
        /// The configured renew deadline.
        renew_deadline: Duration,
    },
    /// A jittered retry could land after the renew deadline.
    #[error(
        "renewDeadline must be greater than retryPeriod*JitterFactor \
         (renewDeadline {renew_deadline:?}, retryPeriod {retry_period:?}, JitterFactor 1.2)"
    )]
    RenewDeadlineNotAboveJitteredRetry {
        /// The configured renew deadline.
        renew_deadline: Duration,
        /// The configured retry period.
        retry_period: Duration,
    },
    /// The lock has no identity to write as holder.
    #[error("Lock identity is empty")]
    EmptyIdentity,
}

/// A failed lock operation.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LockError {
    /// The API call failed (classify with [`LockError::is_not_found`] and friends).
    #[error(transparent)]
    Api(#[from] kctrl_client::Error),
    /// An update before any get or create: the lock has no object to update.
    #[error("lease {lock} not initialized, call get or create first")]
    NotInitialized {
        /// The lock, `namespace/name`.
        lock: String,
    },
    /// The operation did not finish in time (the renew deadline or the election's
    /// cancellation cut it short).
    #[error("{operation} of lock {lock} did not finish: {why}")]
    Interrupted {
        /// `get`, `create` or `update`.
        operation: &'static str,
        /// The lock, `namespace/name`.
        lock: String,
        /// `cancelled` or `renew deadline exceeded`.
        why: &'static str,
    },
    /// A failure of a custom lock.
    #[error(transparent)]
    Other(Box<dyn std::error::Error + Send + Sync>),
}

impl LockError {
    /// The lock object does not exist.
    pub fn is_not_found(&self) -> bool {
        matches!(self, LockError::Api(e) if e.is_not_found())
    }

    /// The lock object changed since it was read (optimistic concurrency failure).
    pub fn is_conflict(&self) -> bool {
        matches!(self, LockError::Api(e) if e.is_conflict())
    }
}

/// A lock type other than `leases` (client-go's `resourcelock.New`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LockTypeError {
    /// `endpoints`, `configmaps` or `endpointsleases` / `configmapsleases`: no longer
    /// supported.
    #[error("{lock_type} lock is removed, migrate to leases")]
    Removed {
        /// The requested lock type.
        lock_type: String,
    },
    /// Not a lock type at all.
    #[error("Invalid lock-type {lock_type}")]
    Invalid {
        /// The requested lock type.
        lock_type: String,
    },
}

/// The health check's verdict when this process leads but has not renewed in time.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("failed election to renew leadership on lease {name}")]
pub struct HealthError {
    /// The election's [`name`](crate::LeaderElectionConfig::name).
    pub name: String,
    /// Time since the record was last observed to change.
    pub since_last_renewal: Duration,
}

//! The crate's typed errors: a configuration that cannot work, a Lease store call that
//! failed, and why a member's [`run`](crate::ShardMember::run) ended.

use std::time::Duration;

/// A [`ShardConfig`](crate::ShardConfig) that cannot work.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The group names the Leases (`<group>-<identity>`) and labels them, so it must be a
    /// DNS-1123 label.
    #[error(
        "shard group {group:?} is not valid: {why}; use at most 63 lowercase letters, digits \
         and '-', starting and ending with a letter or digit (it prefixes the Lease names \
         and is their label value)"
    )]
    InvalidGroup {
        /// The group.
        group: String,
        /// What is wrong with it.
        why: &'static str,
    },
    /// The identity is the rest of the Lease name, so `<group>-<identity>` must be a
    /// DNS-1123 subdomain.
    #[error(
        "shard member identity {identity:?} is not valid: {why}; use lowercase letters, \
         digits, '-' and '.' (a pod name is fine), so that the Lease name \
         {lease:?} is a valid object name"
    )]
    InvalidIdentity {
        /// The identity.
        identity: String,
        /// The Lease name it makes.
        lease: String,
        /// What is wrong with it.
        why: &'static str,
    },
    /// The Leases' namespace is empty.
    #[error("the shard group's namespace is empty; name the namespace its Leases live in")]
    EmptyNamespace,
    /// The bucket count is not a power of two within range.
    #[error(
        "bucket count {count} is not valid: it must be a power of two from 1 to {max} \
         (every member of a group must use the same)"
    )]
    InvalidBucketCount {
        /// The configured count.
        count: u32,
        /// The largest accepted.
        max: u32,
    },
    /// `lease_duration` is zero or not a whole number of seconds.
    #[error(
        "lease duration {lease_duration:?} is not valid: it must be a whole number of \
         seconds, at least 1s, because the Lease records it in seconds"
    )]
    InvalidLeaseDuration {
        /// The configured lease duration.
        lease_duration: Duration,
    },
    /// A renew deadline or retry period of zero.
    #[error("{what} must be greater than zero")]
    Zero {
        /// `renew deadline` or `retry period`.
        what: &'static str,
    },
    /// Others could take a member's buckets over before it stops reconciling them.
    #[error(
        "lease duration must be greater than renew deadline (lease duration \
         {lease_duration:?}, renew deadline {renew_deadline:?}): a member that cannot renew \
         stops reconciling at the renew deadline, and the others take its buckets over a \
         lease duration after its last renewal"
    )]
    LeaseDurationNotAboveRenewDeadline {
        /// The configured lease duration.
        lease_duration: Duration,
        /// The configured renew deadline.
        renew_deadline: Duration,
    },
    /// A renewal could not be retried at least once before the deadline.
    #[error(
        "renew deadline must be greater than retry period × 1.2 (renew deadline \
         {renew_deadline:?}, retry period {retry_period:?})"
    )]
    RenewDeadlineNotAboveRetryPeriod {
        /// The configured renew deadline.
        renew_deadline: Duration,
        /// The configured retry period.
        retry_period: Duration,
    },
}

/// A failed call of a [`LeaseStore`](crate::LeaseStore).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The Lease changed since the version the call was conditioned on.
    #[error("lease {name}: conflict: it changed since it was read")]
    Conflict {
        /// The Lease.
        name: String,
    },
    /// The Lease does not exist.
    #[error("lease {name} not found")]
    NotFound {
        /// The Lease.
        name: String,
    },
    /// A create found the Lease already there.
    #[error("lease {name} already exists")]
    AlreadyExists {
        /// The Lease.
        name: String,
    },
    /// Any other failure of the API call. Its outcome is unknown: a write may or may not
    /// have been applied.
    #[error(transparent)]
    Api(#[from] kctrl_client::Error),
    /// The call did not finish in time. A write may or may not have been applied.
    #[error("{operation} did not finish within {timeout:?}")]
    Timeout {
        /// `list`, `get`, `create`, `update` or `delete`.
        operation: &'static str,
        /// The bound.
        timeout: Duration,
    },
    /// A failure of a custom store; its outcome is unknown.
    #[error(transparent)]
    Other(Box<dyn std::error::Error + Send + Sync>),
}

impl StoreError {
    /// Whether the call certainly changed nothing (a conflict, a missing or an existing
    /// Lease): every other failure may hide a write that was applied.
    pub fn is_definite(&self) -> bool {
        matches!(
            self,
            StoreError::Conflict { .. }
                | StoreError::NotFound { .. }
                | StoreError::AlreadyExists { .. }
        )
    }
}

/// Why [`ShardMember::run`](crate::ShardMember::run) ended with an error. Except for
/// [`AlreadyRunning`](Self::AlreadyRunning), the member has stopped reconciling (every
/// [`ReconcileGuard`](crate::ReconcileGuard) reports lost) and the process should exit and
/// start again, as a controller that lost its leader election does.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunError {
    /// Another member of the group counts buckets differently; their claims could not be
    /// compared.
    #[error(
        "shard group {group}: member {member} uses {theirs} buckets, this one {ours}; every \
         member of a group must use the same bucket count (roll the change out by stopping \
         the old members first, or use a new group name)"
    )]
    BucketCountMismatch {
        /// The group.
        group: String,
        /// The other member's identity (its Lease's holder).
        member: String,
        /// Its bucket count.
        theirs: u32,
        /// Ours.
        ours: u32,
    },
    /// No renewal of the member's Lease succeeded within the renew deadline: others may
    /// take its buckets over once the Lease expires, so it stopped reconciling at once.
    #[error(
        "shard group {group}: lease {lease} not renewed within the renew deadline \
         ({renew_deadline:?}); stopped reconciling"
    )]
    RenewFailed {
        /// The group.
        group: String,
        /// The member's Lease.
        lease: String,
        /// The deadline.
        renew_deadline: Duration,
    },
    /// The member's Lease was deleted or written by someone else: another member judged it
    /// expired, or a person or another process with the same identity touched it. It
    /// stopped reconciling at once.
    #[error("shard group {group}: lease {lease} lost: {why}; stopped reconciling")]
    LeaseLost {
        /// The group.
        group: String,
        /// The member's Lease.
        lease: String,
        /// What happened.
        why: &'static str,
    },
    /// [`run`](crate::ShardMember::run) was called while another call runs, or after one
    /// ended: a member runs once.
    #[error("shard member {identity} of group {group} already ran; build a new member")]
    AlreadyRunning {
        /// The group.
        group: String,
        /// The member's identity.
        identity: String,
    },
}

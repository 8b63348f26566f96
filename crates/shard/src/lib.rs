//! Sharded controllers: several active replicas of one controller, each reconciling a part
//! of the objects, found through Leases, with handovers that never let two replicas
//! reconcile one object at once.
//!
//! The objects are split by the 64-bit FNV-1a hash of a shard key (their uid or their
//! namespace), the hash the API server can filter list and watch by (KEP-5866
//! `shardSelector`). The hash space is cut into a fixed number of buckets (64 by default, a
//! power of two: bucket = the hash's top bits), and the buckets are split between the live
//! members of the group by rendezvous hashing ([`split`]), which moves only the buckets it
//! must when a member joins or leaves.
//!
//! # Using it
//!
//! Build a [`ShardMember`] from a [`ShardConfig`] (group, namespace of the Leases, identity)
//! and [`run`](ShardMember::run) it beside the controller. For each object to reconcile, ask
//! [`try_begin`](ShardMember::try_begin) with the hash of its shard key: `Some(guard)` when
//! its bucket is active here — hold the guard during the reconcile, and check
//! [`is_valid`](ReconcileGuard::is_valid) before each write — `None` when it is not (skip
//! it; count it with [`keys_dropped`](ShardMember::keys_dropped)). When buckets become
//! active ([`activations`](ShardMember::activations)), enqueue the cached objects in them.
//! [`cache_scope`](ShardMember::cache_scope) gives the buckets the caches must cover, for a
//! server-side shard selector. `kctrl-runtime`'s `Controller::sharded` does all of this.
//!
//! ```
//! use kctrl_shard::{ShardConfig, ShardMember};
//! use tokio_util::sync::CancellationToken;
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() {
//! let fake = kctrl_fake::FakeApi::new(); // a real cluster's `Client` works the same
//! let a = ShardMember::new(fake.client(), ShardConfig::new("widgets", "default", "a")).unwrap();
//! let b = ShardMember::new(fake.client(), ShardConfig::new("widgets", "default", "b")).unwrap();
//! let cancel = CancellationToken::new();
//! for m in [&a, &b] {
//!     let (m, cancel) = (m.clone(), cancel.clone());
//!     tokio::spawn(async move { m.run(cancel).await });
//! }
//! // Wait until the split is in force: every bucket active on exactly one member.
//! while a.active_buckets().len() + b.active_buckets().len() < 64 {
//!     tokio::time::sleep(std::time::Duration::from_millis(200)).await;
//! }
//! let hash = 0xdead_beef_0000_0000;
//! assert!(a.owns(hash) != b.owns(hash));
//! # }
//! ```
//!
//! # The protocol
//!
//! Every member keeps one Lease, `<group>-<identity>`, labelled with the group, and renews
//! it every retry period (2 s) as leader election does. Its annotations list the buckets it
//! **claims** and its bucket count, and carry a random token drawn by the process; it is
//! created with the finalizer [`MEMBER_FINALIZER`] (`shard.kctrl.io/member`). Each
//! round a member reads all the group's Leases with a consistent (quorum) list, and moves
//! each bucket a step through `Idle → Claiming → Syncing → Active → Draining → Releasing →
//! Idle` ([`BucketState`]):
//!
//! * **Claiming**: the split gives the bucket to this member and no other Lease claims any
//!   of its hashes; the claim is written into the member's Lease.
//! * **Syncing**: a list *sent after that write was acknowledged* shows the member's Lease
//!   exactly as written, claiming the bucket, and no other Lease claiming any of it. The
//!   caches are widened to the bucket.
//! * **Active**: the caches cover it (at once without a shard selector); guards are handed
//!   out, and the controller enqueues the bucket's cached objects.
//! * **Draining**: the split no longer gives it here: no new guards (keys are dropped and
//!   counted); the reconciles in flight finish. Wanted again, it goes back to Active.
//! * **Releasing**: no reconcile is left; the Lease is written without the bucket. Once
//!   that write is acknowledged the bucket is Idle, and others may claim it.
//!
//! A member that sees another's Lease unchanged (same resourceVersion) for that Lease's
//! duration, measured on its own monotonic clock from when it first saw that version,
//! clears that Lease's claims with a write conditioned on that version, which also drops
//! its finalizer (so a Lease being deleted goes away then). A graceful stop drains and
//! releases every bucket, then writes the Lease without its finalizer and deletes it.
//!
//! A Lease deleted by someone else (`kubectl delete`, its namespace being deleted) is only
//! marked deleted (`deletionTimestamp`) while its finalizer is on: it stays listed, claims
//! and all, and the others respect its claims and judge its expiry as any other's (they
//! leave it out of the split, so that they take its buckets as soon as they are released).
//! Its member, seeing the mark, drains and releases every bucket as in a graceful stop,
//! renewing the Lease meanwhile, then writes it without its finalizer — it goes away — and
//! its run ends with [`RunError::LeaseDeleted`].
//!
//! # Why two members never reconcile one object at once
//!
//! Reconciling needs an Active (or Draining) bucket, and a bucket stays claimed in its
//! member's Lease from before it is confirmed until after its last reconcile has ended
//! (every write of the Lease lists every bucket from Claiming to Draining). So take members
//! A and B reconciling objects of one bucket at once, and say A's claim was written (its
//! write applied) before B's. B's confirming list was sent after B's claim was applied, so
//! after A's, and A's claim was still there — it leaves only once A has drained — unless
//! A's claims were cleared as expired. Either way B would have seen A's claim and not
//! confirmed. Two members that claim at once both wait (whoever the split does not favour
//! in its own view withdraws); neither is confirmed while the other's claim stands.
//!
//! Claims are cleared by others only when they are expired, and that is safe because the
//! holder has stopped by then: a member may reconcile only until *the send time of its last
//! acknowledged renewal + renew deadline* (10 s) on its own clock, and stops at once (the
//! guards report lost, [`stopped`](ShardMember::stopped) fires) when that passes. The
//! renewal was applied after it was sent, and another member first saw the resulting
//! version after it was applied; it clears the claims only a lease duration (15 s) after
//! that, with a write conditioned on that version — which fails if any later renewal was
//! applied. The lease duration minus the renew deadline (5 s) is the margin for clock rate
//! differences and for aborting the reconciles in flight. A member never trusts another's
//! clock: timestamps in Leases are for humans.
//!
//! A Lease cannot leave the store while it claims buckets: its finalizer is removed only by
//! a write that also empties its claims — its member's after draining, or another's after
//! it expired — so a member joining at any time, even after a Lease was deleted, lists
//! every claim that stands. (A member that never saw a Lease cannot know its claims any
//! other way; this is why a deletion must not make them vanish.)
//!
//! Writes whose answer is lost (a timeout) are treated as maybe applied: no claim is
//! confirmed, and no release counted, until a later write or read settles it; a Lease that
//! changed under a member in any other way (written by someone else, or gone without the
//! member letting it go) stops it at once with [`RunError::LeaseLost`]. A restarted process
//! with the same identity draws a new token, so it treats its predecessor's Lease as
//! another's: if that claims buckets, it waits for it to expire.
//!
//! Leases written by an older version carry no finalizer; they are read and respected the
//! same. Deleted by hand, such a Lease disappears at once: the members that saw it keep
//! its last claims as a tombstone for a lease duration (its holder stops by then), but a
//! member that starts after the deletion never saw them — the gap the finalizer closes.
//! Removing the finalizer by hand from a Lease that claims buckets opens the same gap.
//!
//! The protocol relies on the store's consistent reads and conditional writes (the API
//! server's quorum lists and resourceVersion preconditions) and its finalizers, on
//! reconciles stopping when their guard is invalid, and on writes made by a reconcile being
//! done before its guard is dropped.
//!
//! # Permissions
//!
//! A member needs, on `coordination.k8s.io` `leases` in the group's namespace: `list` (with
//! a label selector), `get`, `create`, `update` and `delete`. Adding and removing the
//! finalizer are parts of the `create` and `update` writes of the whole Lease, so `update`
//! on `leases` covers them: no other verb (no `patch`) is needed for it.
//!
//! # Bad input
//!
//! A group or identity that does not make a valid Lease name, a bucket count that is not a
//! power of two, and lease timings where the renew deadline is not below the lease
//! duration are refused when the member is built ([`ConfigError`]). A live member of the
//! group with another bucket count makes a joining member's run fail with
//! [`RunError::BucketCountMismatch`]; a running member leaves such a member out of the
//! split but respects its claims, converted to hash ranges.
//!
//! # Metrics
//!
//! [`PrometheusShardMetrics`]: the hash ranges held, handovers, keys dropped, the time from
//! a member change to the new split being in force; see [`metrics`]. Ready means joined
//! and holding what the split gives it, which may be nothing when the group has more
//! members than its buckets go round ([`ShardMember::is_ready`]).

#![forbid(unsafe_code)]

mod buckets;
mod config;
mod error;
mod lease;
mod member;
pub mod metrics;
mod run;
pub mod split;

#[cfg(test)]
mod member_tests;

pub use buckets::{
    BucketSet, DEFAULT_BUCKET_COUNT, HASH_SPACE_END, MAX_BUCKET_COUNT, ParseBucketsError,
    bucket_of, bucket_range,
};
pub use config::{
    DEFAULT_LEASE_DURATION, DEFAULT_RENEW_DEADLINE, DEFAULT_RETRY_PERIOD, ShardConfig,
    TransitionHook,
};
pub use error::{ConfigError, RunError, StoreError};
pub use lease::{
    BUCKET_COUNT_ANNOTATION, BUCKETS_ANNOTATION, EXPIRED_BY_ANNOTATION, GROUP_LABEL,
    KubeLeaseStore, LeaseStore, LeaseWrite, MEMBER_FINALIZER, MemberLease, TOKEN_ANNOTATION,
};
pub use member::{Activations, BucketState, Lost, ReconcileGuard, ShardMember, ShardStatus};
pub use metrics::{Handover, NoopShardMetrics, PrometheusShardMetrics, ShardMetrics};

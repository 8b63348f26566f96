//! [`ShardMember`]: the handle a controller holds. It says which buckets are active here,
//! hands out a [`ReconcileGuard`] per reconcile of an active bucket (and counts them, so a
//! bucket is released only once its reconciles have ended), publishes the member's
//! [`ShardStatus`], and [`run`](ShardMember::run)s the membership (`run.rs`).

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use kctrl_client::Client;
use kctrl_client::sharding::{ShardField, ShardSelector};
use tokio::sync::{Notify, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::buckets::{BucketSet, bucket_of};
use crate::config::ShardConfig;
use crate::error::{ConfigError, RunError};
use crate::lease::{KubeLeaseStore, LeaseStore};
use crate::metrics::Handover;

/// Where a bucket stands on one member.
///
/// `Idle → Claiming → Syncing → Active → Draining → Releasing → Idle`, with two shortcuts:
/// a claim that is no longer wanted goes back to `Idle`, and a draining bucket that is
/// wanted again becomes `Active` again (its claim never left the Lease).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BucketState {
    /// Not claimed.
    Idle,
    /// Claimed in the Lease (or about to be), not yet confirmed as this member's alone.
    Claiming,
    /// Confirmed: the caches are being widened to cover it.
    Syncing,
    /// Reconciled here: [`ShardMember::try_begin`] hands out guards for it.
    Active,
    /// No longer wanted: no new guards; waiting for the reconciles in flight to end.
    Draining,
    /// Drained; the Lease is being written without it.
    Releasing,
}

impl BucketState {
    /// Whether the member's Lease must claim a bucket in this state.
    pub(crate) fn claimed(self) -> bool {
        matches!(
            self,
            BucketState::Claiming
                | BucketState::Syncing
                | BucketState::Active
                | BucketState::Draining
        )
    }

    /// Whether the caches must cover a bucket in this state.
    pub(crate) fn scoped(self) -> bool {
        matches!(
            self,
            BucketState::Syncing | BucketState::Active | BucketState::Draining
        )
    }
}

/// What a member is doing, as published on [`ShardMember::status`].
#[derive(Clone, Debug, PartialEq)]
pub struct ShardStatus {
    /// The buckets reconciled here.
    pub active: BucketSet,
    /// The buckets the caches must cover (active, draining, and confirmed but not yet
    /// active).
    pub scope: BucketSet,
    /// Bumped at every change of `scope`; confirm it with
    /// [`ShardMember::confirm_cache_scope`].
    pub scope_generation: u64,
    /// Per bucket, how many times it became active here: a bucket whose count moved became
    /// active (again) and its cached objects must be enqueued.
    pub activations: Arc<[u64]>,
    /// The live members this member sees (Lease holders), itself included, sorted.
    pub members: Vec<String>,
    /// The member stopped: it no longer reconciles anything.
    pub stopped: bool,
}

pub(crate) struct Slot {
    pub(crate) state: BucketState,
    pub(crate) in_flight: u32,
    pub(crate) activations: u64,
    /// The scope generation that first covered it (for `Syncing`).
    pub(crate) scope_generation: u64,
}

pub(crate) struct State {
    pub(crate) slots: Vec<Slot>,
    /// Reconciling is allowed until then: the send time of the last confirmed renewal plus
    /// the renew deadline. `None` before the first.
    pub(crate) valid_until: Option<Instant>,
    pub(crate) stopped: bool,
    pub(crate) scope: BucketSet,
    pub(crate) scope_generation: u64,
    pub(crate) scope_confirmed: u64,
    pub(crate) members: Vec<String>,
    /// The last round found every bucket where the split wants it (and the member is not
    /// leaving).
    pub(crate) in_force: bool,
}

impl State {
    pub(crate) fn in_state(&self, state: BucketState) -> BucketSet {
        self.slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.state == state)
            .filter_map(|(b, _)| u32::try_from(b).ok())
            .collect()
    }

    fn may_reconcile(&self, now: Instant) -> bool {
        !self.stopped && self.valid_until.is_some_and(|t| now < t)
    }

    /// See [`ShardMember::is_ready`]; without the renew deadline (for the metric).
    fn ready(&self) -> bool {
        !self.stopped
            && self.valid_until.is_some()
            && (self.in_force || self.slots.iter().any(|s| s.state == BucketState::Active))
    }
}

pub(crate) struct Shared {
    pub(crate) config: ShardConfig,
    pub(crate) lease_name: String,
    pub(crate) token: String,
    pub(crate) store: Arc<dyn LeaseStore>,
    state: Mutex<State>,
    /// Wakes the run loop: a draining bucket's last reconcile ended, or the caches confirmed
    /// a scope.
    pub(crate) wake: Notify,
    /// Cancelled when the member stops reconciling.
    pub(crate) stopped: CancellationToken,
    status: watch::Sender<ShardStatus>,
    pub(crate) ran: AtomicBool,
}

impl Shared {
    pub(crate) fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Moves `bucket` to `to` (the caller holds the lock), telling the hook.
    pub(crate) fn set(&self, state: &mut State, bucket: u32, to: BucketState) {
        let Some(slot) = state.slots.get_mut(bucket as usize) else {
            return;
        };
        if slot.state == to {
            return;
        }
        slot.state = to;
        if to == BucketState::Active {
            slot.activations += 1;
        }
        if let Some(hook) = &self.config.on_transition {
            hook(&self.config.identity, bucket, to);
        }
    }

    /// Recomputes the scope from the states; a change bumps its generation.
    pub(crate) fn rescope(&self, state: &mut State) {
        let scope: BucketSet = state
            .slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.state.scoped())
            .filter_map(|(b, _)| u32::try_from(b).ok())
            .collect();
        if scope != state.scope {
            state.scope = scope;
            state.scope_generation += 1;
            if !self.config.confirm_cache_scope {
                state.scope_confirmed = state.scope_generation;
            }
        }
    }

    /// Publishes the status and the held-range metrics.
    pub(crate) fn publish(&self, state: &State) {
        let active = state.in_state(BucketState::Active);
        let count = self.config.bucket_count;
        let ranges = active
            .ranges(count)
            .iter()
            .map(|(s, e)| format!("{s:#018x}-{e:#x}"))
            .collect::<Vec<_>>()
            .join(",");
        self.config.metrics.held(
            &self.config.group,
            active.len(),
            active.fraction(count),
            &ranges,
        );
        self.config.metrics.ready(&self.config.group, state.ready());
        let status = ShardStatus {
            active,
            scope: state.scope.clone(),
            scope_generation: state.scope_generation,
            activations: state.slots.iter().map(|s| s.activations).collect(),
            members: state.members.clone(),
            stopped: state.stopped,
        };
        self.status.send_if_modified(|old| {
            if *old == status {
                false
            } else {
                *old = status;
                true
            }
        });
    }

    /// Stops all reconciling at once: every bucket is dropped (counted as lost if it was
    /// held), guards report lost, the `stopped` token fires.
    pub(crate) fn stop(&self, lost: bool) {
        let mut state = self.state();
        state.stopped = true;
        for b in 0..self.config.bucket_count {
            let held = state
                .slots
                .get(b as usize)
                .is_some_and(|s| s.state.scoped());
            if held && lost {
                self.config
                    .metrics
                    .handover(&self.config.group, Handover::Lost);
            }
            self.set(&mut state, b, BucketState::Idle);
        }
        self.rescope(&mut state);
        self.publish(&state);
        drop(state);
        self.stopped.cancel();
    }
}

/// One member of a shard group: the handle a controller reconciles through. Cheap to
/// clone; clones share the member. See the [crate documentation](crate) for the protocol.
///
/// ```
/// use kctrl_shard::{ShardConfig, ShardMember};
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let fake = kctrl_fake::FakeApi::new();
/// let member = ShardMember::new(fake.client(), ShardConfig::new("widgets", "default", "replica-0"))
///     .expect("a valid config");
/// let cancel = tokio_util::sync::CancellationToken::new();
/// let run = tokio::spawn({
///     let (member, cancel) = (member.clone(), cancel.clone());
///     async move { member.run(cancel).await }
/// });
/// // Alone in its group, the member gets every bucket.
/// while member.active_buckets().len() < 64 {
///     tokio::time::sleep(std::time::Duration::from_millis(100)).await;
/// }
/// let hash = 0x1234_5678_9abc_def0;
/// let guard = member.try_begin(hash).expect("every bucket is active here");
/// // ... reconcile the object, checking `guard.is_valid()` before each write ...
/// assert!(guard.is_valid());
/// drop(guard);
///
/// cancel.cancel(); // drains, releases every bucket, deletes the Lease
/// run.await.unwrap().unwrap();
/// assert!(member.try_begin(hash).is_none());
/// # }
/// ```
#[derive(Clone)]
pub struct ShardMember {
    pub(crate) shared: Arc<Shared>,
}

impl fmt::Debug for ShardMember {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ShardMember")
            .field("group", &self.shared.config.group)
            .field("identity", &self.shared.config.identity)
            .field("lease", &self.shared.lease_name)
            .finish_non_exhaustive()
    }
}

impl ShardMember {
    /// A member keeping its Lease in the API server `client` talks to, after validating
    /// `config` ([`ShardConfig::validate`]).
    pub fn new(client: Client, config: ShardConfig) -> Result<Self, ConfigError> {
        let store = KubeLeaseStore::new(client, config.namespace.clone(), config.group.clone());
        Self::with_store(Arc::new(store), config)
    }

    /// A member keeping its Lease in `store`.
    pub fn with_store(
        store: Arc<dyn LeaseStore>,
        config: ShardConfig,
    ) -> Result<Self, ConfigError> {
        config.validate()?;
        let count = config.bucket_count as usize;
        let slots = (0..count)
            .map(|_| Slot {
                state: BucketState::Idle,
                in_flight: 0,
                activations: 0,
                scope_generation: 0,
            })
            .collect();
        let (status, _) = watch::channel(ShardStatus {
            active: BucketSet::new(),
            scope: BucketSet::new(),
            scope_generation: 0,
            activations: vec![0; count].into(),
            members: Vec::new(),
            stopped: false,
        });
        let token = format!("{:016x}{:016x}", fastrand::u64(..), fastrand::u64(..));
        Ok(Self {
            shared: Arc::new(Shared {
                lease_name: config.lease_name(),
                config,
                token,
                store,
                state: Mutex::new(State {
                    slots,
                    valid_until: None,
                    stopped: false,
                    scope: BucketSet::new(),
                    scope_generation: 0,
                    scope_confirmed: 0,
                    members: Vec::new(),
                    in_force: false,
                }),
                wake: Notify::new(),
                stopped: CancellationToken::new(),
                status,
                ran: AtomicBool::new(false),
            }),
        })
    }

    /// The member's configuration.
    pub fn config(&self) -> &ShardConfig {
        &self.shared.config
    }

    /// The member's Lease name.
    pub fn lease_name(&self) -> &str {
        &self.shared.lease_name
    }

    /// The bucket `hash` falls in.
    pub fn bucket_of(&self, hash: u64) -> u32 {
        bucket_of(hash, self.shared.config.bucket_count)
    }

    /// A guard for one reconcile of an object whose shard-key hash is `hash`, if its bucket
    /// is active here; `None` otherwise (the object is another member's, or its bucket is
    /// moving): skip the object and count it with [`keys_dropped`](Self::keys_dropped).
    /// Hold the guard for the whole reconcile: a bucket is released only once its guards
    /// have all been dropped.
    pub fn try_begin(&self, hash: u64) -> Option<ReconcileGuard> {
        self.try_begin_bucket(self.bucket_of(hash))
    }

    /// [`try_begin`](Self::try_begin) by bucket.
    pub fn try_begin_bucket(&self, bucket: u32) -> Option<ReconcileGuard> {
        let mut state = self.shared.state();
        if !state.may_reconcile(Instant::now()) {
            return None;
        }
        let slot = state.slots.get_mut(bucket as usize)?;
        if slot.state != BucketState::Active {
            return None;
        }
        slot.in_flight += 1;
        Some(ReconcileGuard {
            shared: self.shared.clone(),
            bucket,
        })
    }

    /// Whether `hash`'s bucket is active here now.
    pub fn owns(&self, hash: u64) -> bool {
        self.is_active(self.bucket_of(hash))
    }

    /// Whether `hash`'s bucket is in the `Active` state here, whether or not the Lease was
    /// renewed within the renew deadline: what an informer handler asks before queueing a
    /// key. A renewal late but answered keeps the member going with its buckets active, and
    /// a key dropped in that gap would never be queued again; a key queued while the member
    /// is about to stop costs nothing (the worker asks [`try_begin`](Self::try_begin)).
    pub fn holds(&self, hash: u64) -> bool {
        let state = self.shared.state();
        !state.stopped
            && state
                .slots
                .get(self.bucket_of(hash) as usize)
                .is_some_and(|s| s.state == BucketState::Active)
    }

    /// Whether `bucket` is active here now.
    pub fn is_active(&self, bucket: u32) -> bool {
        let state = self.shared.state();
        state.may_reconcile(Instant::now())
            && state
                .slots
                .get(bucket as usize)
                .is_some_and(|s| s.state == BucketState::Active)
    }

    /// The buckets active here now.
    pub fn active_buckets(&self) -> BucketSet {
        let state = self.shared.state();
        if !state.may_reconcile(Instant::now()) {
            return BucketSet::new();
        }
        state.in_state(BucketState::Active)
    }

    /// The state of `bucket` here (`Idle` for a bucket beyond the count).
    pub fn bucket_state(&self, bucket: u32) -> BucketState {
        self.shared
            .state()
            .slots
            .get(bucket as usize)
            .map_or(BucketState::Idle, |s| s.state)
    }

    /// Ready: the member has joined (its Lease renewed within the renew deadline) and
    /// either reconciles at least one bucket or holds every bucket the split gives it.
    /// The latter may be none at all: with more members than the bucket count allows for,
    /// rendezvous hashing leaves some members without a bucket, and they are ready as
    /// standbys (one takes buckets over once a member leaves: its Lease marked for
    /// deletion, or expired).
    pub fn is_ready(&self) -> bool {
        let state = self.shared.state();
        state.may_reconcile(Instant::now()) && state.ready()
    }

    /// The member's status, updated at every change.
    pub fn status(&self) -> watch::Receiver<ShardStatus> {
        self.shared.status.subscribe()
    }

    /// Buckets as they become active, for a controller to enqueue their cached objects.
    pub fn activations(&self) -> Activations {
        Activations {
            rx: self.status(),
            seen: vec![0; self.shared.config.bucket_count as usize],
        }
    }

    /// The buckets the caches must cover now, with the scope's generation: list and watch
    /// with a selector of [`BucketSet::ranges`], then
    /// [`confirm_cache_scope`](Self::confirm_cache_scope) with the generation.
    pub fn cache_scope(&self) -> (BucketSet, u64) {
        let state = self.shared.state();
        (state.scope.clone(), state.scope_generation)
    }

    /// [`cache_scope`](Self::cache_scope) as a shard selector on `field`, for the informers'
    /// list and watch; `None` while the scope is empty (nothing to cache).
    pub fn cache_selector(&self, field: ShardField) -> (Option<ShardSelector>, u64) {
        let (scope, generation) = self.cache_scope();
        (
            scope.selector(field, self.shared.config.bucket_count),
            generation,
        )
    }

    /// The caches now cover the scope of `generation` (see
    /// [`ShardConfig::confirm_cache_scope`]): buckets waiting for it may become active.
    pub fn confirm_cache_scope(&self, generation: u64) {
        let mut state = self.shared.state();
        if generation > state.scope_confirmed && generation <= state.scope_generation {
            state.scope_confirmed = generation;
            drop(state);
            self.shared.wake.notify_one();
        }
    }

    /// Counts `keys` keys a controller dropped because their bucket was not active here.
    pub fn keys_dropped(&self, keys: u64) {
        if keys > 0 {
            self.shared
                .config
                .metrics
                .keys_dropped(&self.shared.config.group, keys);
        }
    }

    /// A token cancelled when this member stops reconciling: its run ended (whatever the
    /// reason, its future dropped included) or its Lease could not be renewed. A controller
    /// aborts its reconciles in flight when it fires unexpectedly.
    pub fn stopped(&self) -> CancellationToken {
        self.shared.stopped.clone()
    }

    /// Runs the membership until `cancel` fires (then drains and releases every bucket,
    /// lets the Lease go — drops its finalizer and deletes it — and returns `Ok`), until
    /// someone deletes the Lease (then does the same and returns
    /// [`RunError::LeaseDeleted`]), or until the member loses its Lease (then stops
    /// reconciling at once and returns the error). See the [crate documentation](crate).
    /// A member runs once; dropping this future stops its reconciling at once (its Lease
    /// is left to expire).
    pub async fn run(&self, cancel: CancellationToken) -> Result<(), RunError> {
        if self.shared.ran.swap(true, Ordering::SeqCst) {
            return Err(RunError::AlreadyRunning {
                group: self.shared.config.group.clone(),
                identity: self.shared.config.identity.clone(),
            });
        }
        crate::run::Runner::new(self.shared.clone())
            .run(cancel)
            .await
    }
}

/// One reconcile of an object in an active bucket, from
/// [`ShardMember::try_begin`]. Dropping it ends the reconcile; a draining bucket is
/// released once its last guard is dropped.
pub struct ReconcileGuard {
    shared: Arc<Shared>,
    bucket: u32,
}

impl fmt::Debug for ReconcileGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReconcileGuard")
            .field("bucket", &self.bucket)
            .field("valid", &self.is_valid())
            .finish()
    }
}

/// The member stopped reconciling: its Lease may be another's now.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("shard bucket {bucket} is no longer held by this member; stop the reconcile")]
pub struct Lost {
    /// The bucket.
    pub bucket: u32,
}

impl ReconcileGuard {
    /// The bucket.
    pub fn bucket(&self) -> u32 {
        self.bucket
    }

    /// Whether the member still holds the bucket (active or draining, its Lease renewed
    /// within the renew deadline). Check before each write; once `false` it stays `false`.
    pub fn is_valid(&self) -> bool {
        let state = self.shared.state();
        state.may_reconcile(Instant::now())
            && state
                .slots
                .get(self.bucket as usize)
                .is_some_and(|s| matches!(s.state, BucketState::Active | BucketState::Draining))
    }

    /// [`is_valid`](Self::is_valid) as a `Result`, for `?` before a write.
    pub fn check(&self) -> Result<(), Lost> {
        if self.is_valid() {
            Ok(())
        } else {
            Err(Lost {
                bucket: self.bucket,
            })
        }
    }
}

impl Drop for ReconcileGuard {
    fn drop(&mut self) {
        let mut state = self.shared.state();
        if let Some(slot) = state.slots.get_mut(self.bucket as usize) {
            slot.in_flight = slot.in_flight.saturating_sub(1);
            if slot.in_flight == 0 && slot.state == BucketState::Draining {
                drop(state);
                self.shared.wake.notify_one();
            }
        }
    }
}

/// Buckets as they become active on a member, from [`ShardMember::activations`].
#[derive(Debug)]
pub struct Activations {
    rx: watch::Receiver<ShardStatus>,
    seen: Vec<u64>,
}

impl Activations {
    /// Waits for buckets that became active since the last call (the first call: since the
    /// member was built) and are still active, and returns them; `None` once the member has
    /// stopped.
    pub async fn next(&mut self) -> Option<BucketSet> {
        loop {
            {
                let status = self.rx.borrow_and_update();
                if status.stopped {
                    return None;
                }
                let fresh: BucketSet = status
                    .activations
                    .iter()
                    .zip(self.seen.iter_mut())
                    .enumerate()
                    .filter_map(|(b, (&now, seen))| {
                        let moved = now != *seen;
                        *seen = now;
                        let b = u32::try_from(b).ok()?;
                        (moved && status.active.contains(b)).then_some(b)
                    })
                    .collect();
                if !fresh.is_empty() {
                    return Some(fresh);
                }
            }
            if self.rx.changed().await.is_err() {
                return None;
            }
        }
    }
}

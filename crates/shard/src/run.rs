//! The membership loop behind [`ShardMember::run`](crate::ShardMember::run): join, then
//! every retry period (sooner when something is waiting) read the group's Leases, clear
//! the claims of expired members, move each bucket one step towards the split, and write
//! the member's Lease (which renews it). The safety argument is in the crate docs.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::buckets::{BucketSet, bucket_range};
use crate::error::{RunError, StoreError};
use crate::lease::{LeaseWrite, MemberLease};
use crate::member::{BucketState, Shared};
use crate::metrics::Handover;
use crate::split;

/// A Lease as this member last read it, and when (local monotonic time) it first read
/// that version.
struct Observed {
    lease: MemberLease,
    first_seen: Instant,
}

/// The claims of a Lease that disappeared without this member deleting it, respected
/// until its holder must have stopped.
struct Tombstone {
    lease: MemberLease,
    until: Instant,
}

enum Flow {
    /// Run another round; `soon` when a claim waits to be confirmed.
    Continue { soon: bool },
    /// Left the group.
    Left,
}

/// Stops the member's reconciling when the run ends or its future is dropped.
struct StopOnExit {
    shared: Arc<Shared>,
    graceful: bool,
}

impl Drop for StopOnExit {
    fn drop(&mut self) {
        self.shared.stop(!self.graceful);
    }
}

pub(crate) struct Runner {
    shared: Arc<Shared>,
    observed: HashMap<String, Observed>,
    tombstones: Vec<Tombstone>,
    /// Our Lease as last confirmed written (or adopted).
    mine: Option<MemberLease>,
    /// Writes to our Lease whose outcome is unknown, all conditioned on `mine`'s version.
    uncertain: Vec<LeaseWrite>,
    acquire_time: Timestamp,
    /// Draining every bucket: the run was cancelled, or our Lease is being deleted.
    leaving: bool,
    /// The run was cancelled: a graceful leave.
    cancelled: bool,
    /// Our Lease is being deleted (someone deleted it; its finalizer holds it).
    evicted: bool,
    /// Everything released, the write of our Lease without its finalizer was sent.
    unfinalizing: bool,
    /// The delete of our Lease was sent while leaving.
    deleting: bool,
    /// The members of the last split (Lease names).
    members: Vec<String>,
    rebalance_since: Option<Instant>,
    warned: HashSet<String>,
}

async fn sleep_until_opt(deadline: Option<Instant>) {
    match deadline {
        Some(t) => tokio::time::sleep_until(t).await,
        None => std::future::pending().await,
    }
}

impl Runner {
    pub(crate) fn new(shared: Arc<Shared>) -> Self {
        let acquire_time = shared.config.clock.now();
        Self {
            shared,
            observed: HashMap::new(),
            tombstones: Vec::new(),
            mine: None,
            uncertain: Vec::new(),
            acquire_time,
            leaving: false,
            cancelled: false,
            evicted: false,
            unfinalizing: false,
            deleting: false,
            members: Vec::new(),
            rebalance_since: None,
            warned: HashSet::new(),
        }
    }

    fn group(&self) -> &str {
        &self.shared.config.group
    }

    fn identity(&self) -> &str {
        &self.shared.config.identity
    }

    fn lease_name(&self) -> &str {
        &self.shared.lease_name
    }

    pub(crate) async fn run(mut self, cancel: CancellationToken) -> Result<(), RunError> {
        let mut exit = StopOnExit {
            shared: self.shared.clone(),
            graceful: false,
        };
        let result = self.run_inner(&cancel).await;
        match &result {
            Ok(()) => {
                info!(group = %self.group(), identity = %self.identity(), "left the shard group");
                exit.graceful = true;
            }
            Err(err @ RunError::LeaseDeleted { .. }) => {
                warn!(group = %self.group(), identity = %self.identity(), error = %err,
                    "left the shard group because its lease was deleted");
            }
            Err(err) => {
                warn!(group = %self.group(), identity = %self.identity(), error = %err,
                    "stopped reconciling every bucket at once");
            }
        }
        drop(exit);
        result
    }

    async fn run_inner(&mut self, cancel: &CancellationToken) -> Result<(), RunError> {
        info!(group = %self.group(), identity = %self.identity(), lease = %self.lease_name(),
            namespace = %self.shared.config.namespace, "joining the shard group");
        if !self.join(cancel).await? {
            return Ok(());
        }
        let retry = self.shared.config.retry_period;
        loop {
            if cancel.is_cancelled() && !self.cancelled {
                if !self.leaving {
                    info!(group = %self.group(), identity = %self.identity(),
                        "leaving the shard group: draining every bucket");
                }
                self.cancelled = true;
                self.leaving = true;
            }
            if self.cancelled {
                self.announce_leave().await?;
            }
            self.check_deadline()?;
            let soon = match self.round().await? {
                Flow::Left => return Ok(()),
                Flow::Continue { soon } => soon,
            };
            let pause = if soon { retry / 8 } else { retry };
            tokio::select! {
                () = tokio::time::sleep(pause) => {}
                () = self.shared.wake.notified() => {}
                () = cancel.cancelled(), if !self.leaving => {}
                () = sleep_until_opt(self.deadline()) => {}
            }
        }
    }

    fn deadline(&self) -> Option<Instant> {
        self.shared.state().valid_until
    }

    fn renew_failed(&self) -> RunError {
        RunError::RenewFailed {
            group: self.group().to_owned(),
            lease: self.lease_name().to_owned(),
            renew_deadline: self.shared.config.renew_deadline,
        }
    }

    fn lost(&self, why: &'static str) -> RunError {
        RunError::LeaseLost {
            group: self.group().to_owned(),
            lease: self.lease_name().to_owned(),
            why,
        }
    }

    /// Everything released and the Lease let go: a graceful leave, or the end of a run
    /// whose Lease was deleted.
    fn left(&self) -> Result<Flow, RunError> {
        if self.cancelled {
            Ok(Flow::Left)
        } else {
            Err(RunError::LeaseDeleted {
                group: self.group().to_owned(),
                lease: self.lease_name().to_owned(),
            })
        }
    }

    /// Whether our writes keep [`MEMBER_FINALIZER`](crate::MEMBER_FINALIZER) on our Lease:
    /// until everything is released, except on a Lease being deleted without it (a
    /// finalizer cannot be added then).
    fn keeps_finalizer(&self) -> bool {
        !self.unfinalizing
            && self
                .mine
                .as_ref()
                .is_none_or(|m| !m.being_deleted || m.has_finalizer)
    }

    fn check_deadline(&self) -> Result<(), RunError> {
        match self.deadline() {
            Some(t) if Instant::now() >= t => Err(self.renew_failed()),
            _ => Ok(()),
        }
    }

    /// One store call, bounded by the call timeout; the renew deadline passing first ends
    /// the run.
    async fn call<T>(
        &self,
        operation: &'static str,
        call: impl Future<Output = Result<T, StoreError>>,
    ) -> Result<Result<T, StoreError>, RunError> {
        let timeout = self.shared.config.call_timeout();
        tokio::select! {
            biased;
            r = tokio::time::timeout(timeout, call) => {
                Ok(r.unwrap_or(Err(StoreError::Timeout { operation, timeout })))
            }
            () = sleep_until_opt(self.deadline()) => Err(self.renew_failed()),
        }
    }

    fn write(&self, claims: BucketSet) -> LeaseWrite {
        let config = &self.shared.config;
        LeaseWrite {
            name: self.lease_name().to_owned(),
            group: config.group.clone(),
            holder: config.identity.clone(),
            token: self.shared.token.clone(),
            bucket_count: config.bucket_count,
            claims,
            lease_duration: config.lease_duration,
            acquire_time: self.acquire_time,
            renew_time: config.clock.now(),
            expired_by: None,
            finalizer: self.keeps_finalizer(),
        }
    }

    fn duration_of(&self, lease: &MemberLease) -> Duration {
        lease
            .lease_duration
            .unwrap_or(self.shared.config.lease_duration)
    }

    fn expired(&self, o: &Observed, now: Instant) -> bool {
        o.first_seen + self.duration_of(&o.lease) <= now
    }

    /// Records a consistent list received at `now`: a new resourceVersion restarts a Lease's
    /// clock; a Lease that vanished leaves its claims as a tombstone.
    fn observe(&mut self, leases: Vec<MemberLease>, now: Instant) {
        let mut seen = HashSet::new();
        for lease in leases {
            seen.insert(lease.name.clone());
            match self.observed.get_mut(&lease.name) {
                Some(o) if o.lease.resource_version == lease.resource_version => o.lease = lease,
                Some(o) => {
                    o.lease = lease;
                    o.first_seen = now;
                }
                None => {
                    self.observed.insert(
                        lease.name.clone(),
                        Observed {
                            lease,
                            first_seen: now,
                        },
                    );
                }
            }
        }
        let gone: Vec<String> = self
            .observed
            .keys()
            .filter(|name| !seen.contains(*name))
            .cloned()
            .collect();
        for name in gone {
            let Some(o) = self.observed.remove(&name) else {
                continue;
            };
            let finalized = o.lease.being_deleted && o.lease.has_finalizer;
            if name != self.lease_name() && o.lease.claims_any() && !finalized {
                // Deleted while it claimed buckets, as far as this member saw (not by a
                // member that found it expired: those clear the claims first). Its holder
                // stops at the latest a renew deadline after its last renewal, which came
                // before this deletion. A Lease last seen being deleted, held by our
                // finalizer, went away only once a write emptied its claims and dropped
                // the finalizer: nothing to respect. One without the finalizer (an older
                // version's) or last seen before its deletion leaves a tombstone.
                warn!(group = %self.group(), lease = %name, claims = ?o.lease.claimed_ranges(),
                    "a member's lease was deleted while it claimed buckets; they stay taken until it would have expired");
                let until = now + self.duration_of(&o.lease);
                self.tombstones.push(Tombstone {
                    lease: o.lease,
                    until,
                });
            }
        }
        self.tombstones.retain(|t| t.until > now);
    }

    /// Clears the claims of every other Lease found expired (a conditional write: it fails
    /// if the holder renewed meanwhile), dropping its finalizer too (a Lease being deleted
    /// then goes away), and deletes expired Leases that claim nothing and carry no
    /// finalizer of ours.
    async fn expire_others(&mut self, now: Instant) -> Result<(), RunError> {
        let expired: Vec<(String, MemberLease)> = self
            .observed
            .iter()
            .filter(|(name, o)| {
                (name.as_str() != self.lease_name() || o.lease.token != self.shared.token)
                    && self.expired(o, now)
            })
            .map(|(name, o)| (name.clone(), o.lease.clone()))
            .collect();
        for (name, lease) in expired {
            if lease.claims_any() || lease.has_finalizer {
                self.clear(&name, &lease).await?;
            } else if lease.being_deleted {
                // Held by someone else's finalizer: theirs to remove.
            } else {
                let result = self
                    .call(
                        "delete",
                        self.shared.store.delete(&name, &lease.resource_version),
                    )
                    .await?;
                match result {
                    Ok(()) | Err(StoreError::NotFound { .. }) => {
                        debug!(group = %self.group(), lease = %name, "deleted an expired lease that claimed nothing");
                        self.observed.remove(&name);
                    }
                    Err(e) => {
                        debug!(group = %self.group(), lease = %name, error = %e,
                            "deleting an expired lease failed");
                    }
                }
            }
        }
        Ok(())
    }

    /// Writes another process's Lease `lease` with no claims, no token and without our
    /// finalizer (so that, being deleted, it goes away), conditioned on its version: for an
    /// expired Lease, or a previous run's Lease that claims nothing.
    async fn clear(&mut self, name: &str, lease: &MemberLease) -> Result<(), RunError> {
        let wall = self.shared.config.clock.now();
        let write = LeaseWrite {
            name: name.to_owned(),
            group: self.group().to_owned(),
            holder: lease.holder.clone(),
            token: String::new(),
            bucket_count: lease
                .bucket_count
                .unwrap_or(self.shared.config.bucket_count),
            claims: BucketSet::new(),
            lease_duration: self.duration_of(lease),
            acquire_time: lease.renew_time.unwrap_or(wall),
            renew_time: wall,
            expired_by: Some(self.identity().to_owned()),
            finalizer: false,
        };
        let result = self
            .call(
                "update",
                self.shared.store.update(&write, &lease.resource_version),
            )
            .await?;
        match result {
            Ok(cleared) => {
                info!(group = %self.group(), lease = %name, holder = %lease.holder,
                    claims = ?lease.claimed_ranges(), deleted = lease.being_deleted,
                    "member expired: cleared its claims");
                self.observed.insert(
                    name.to_owned(),
                    Observed {
                        lease: cleared,
                        first_seen: Instant::now(),
                    },
                );
            }
            Err(e) if e.is_definite() => {
                debug!(group = %self.group(), lease = %name, error = %e,
                    "the expired lease changed; looking again next round");
            }
            Err(e) => {
                warn!(group = %self.group(), lease = %name, error = %e,
                    "clearing an expired member's claims failed");
            }
        }
        Ok(())
    }

    /// Until the member's Lease exists (created by this process), or `cancel`: `false`
    /// when cancelled first.
    async fn join(&mut self, cancel: &CancellationToken) -> Result<bool, RunError> {
        let retry = self.shared.config.retry_period;
        let mine = self.lease_name().to_owned();
        let ours = self.shared.config.bucket_count;
        loop {
            if cancel.is_cancelled() {
                return Ok(false);
            }
            match self.call("list", self.shared.store.list()).await? {
                Err(e) => {
                    warn!(group = %self.group(), error = %e, "listing the group's leases failed");
                }
                Ok(leases) => {
                    let now = Instant::now();
                    self.observe(leases, now);
                    for (name, o) in &self.observed {
                        let live = !self.expired(o, now)
                            && !o.lease.token.is_empty()
                            && !o.lease.being_deleted;
                        if let Some(theirs) = o.lease.bucket_count
                            && live
                            && *name != mine
                            && theirs != ours
                        {
                            return Err(RunError::BucketCountMismatch {
                                group: self.group().to_owned(),
                                member: o.lease.holder.clone(),
                                theirs,
                                ours,
                            });
                        }
                    }
                    self.expire_others(now).await?;
                    match self.observed.get(&mine).map(|o| o.lease.clone()) {
                        None => {
                            let write = self.write(BucketSet::new());
                            let send = Instant::now();
                            match self
                                .call("create", self.shared.store.create(&write))
                                .await?
                            {
                                Ok(created) => {
                                    self.confirmed(created, &write, send);
                                    info!(group = %self.group(), identity = %self.identity(),
                                        lease = %mine, "joined the shard group");
                                    return Ok(true);
                                }
                                Err(e) if e.is_definite() => {
                                    debug!(group = %self.group(), error = %e, "creating the lease failed");
                                }
                                Err(e) => {
                                    warn!(group = %self.group(), error = %e, "creating the lease failed; it may exist");
                                    self.uncertain.push(write);
                                }
                            }
                        }
                        Some(lease)
                            if lease.token == self.shared.token
                                && self.uncertain.iter().any(|w| w.matches(&lease)) =>
                        {
                            // A create whose answer was lost went through.
                            self.mine = Some(lease);
                            self.uncertain.clear();
                            info!(group = %self.group(), identity = %self.identity(),
                                lease = %mine, "joined the shard group");
                            return Ok(true);
                        }
                        Some(lease) if !lease.claims_any() && lease.has_finalizer => {
                            // Ours by name, written by another process (a previous run), and
                            // claiming nothing: nothing can overlap. Drop its finalizer (if it
                            // is being deleted, it goes away), then delete it.
                            self.clear(&mine, &lease).await?;
                            if self
                                .observed
                                .get(&mine)
                                .is_some_and(|o| !o.lease.has_finalizer)
                            {
                                continue;
                            }
                        }
                        Some(lease) if !lease.claims_any() && lease.being_deleted => {
                            // Held by someone else's finalizer: wait for them.
                        }
                        Some(lease) if !lease.claims_any() => {
                            // Ours by name, written by another process (a previous run), and
                            // claiming nothing: nothing can overlap; replace it.
                            let result = self
                                .call(
                                    "delete",
                                    self.shared.store.delete(&mine, &lease.resource_version),
                                )
                                .await?;
                            if let Ok(()) | Err(StoreError::NotFound { .. }) = result {
                                self.observed.remove(&mine);
                                continue;
                            }
                        }
                        Some(lease) => {
                            if self.warned.insert(mine.clone()) {
                                warn!(group = %self.group(), lease = %mine, holder = %lease.holder,
                                    "the lease of this identity belongs to another process (a previous run, or a duplicate) and claims buckets; waiting for it to expire");
                            }
                        }
                    }
                }
            }
            tokio::select! {
                () = tokio::time::sleep(retry) => {}
                () = cancel.cancelled() => {}
            }
        }
    }

    /// Our write `write`, sent at `send`, was applied and returned `lease`.
    fn confirmed(&mut self, lease: MemberLease, write: &LeaseWrite, send: Instant) {
        // A write that left the resourceVersion alone changed nothing others can see: it
        // does not count as a renewal.
        let renewed = self
            .mine
            .as_ref()
            .is_none_or(|m| m.resource_version != lease.resource_version);
        self.mine = Some(lease);
        self.uncertain.clear();
        let mut state = self.shared.state();
        if renewed {
            state.valid_until = Some(send + self.shared.config.renew_deadline);
        }
        self.released(&mut state, &write.claims);
    }

    /// Releasing buckets that the Lease, as now known to be stored, no longer claims.
    fn released(&self, state: &mut crate::member::State, stored: &BucketSet) {
        for b in state.in_state(BucketState::Releasing).iter() {
            if !stored.contains(b) {
                self.shared.set(state, b, BucketState::Idle);
                self.shared
                    .config
                    .metrics
                    .handover(&self.shared.config.group, Handover::Released);
                debug!(group = %self.shared.config.group, identity = %self.shared.config.identity,
                    bucket = b, "released");
            }
        }
    }

    /// Checks our Lease in the list just observed: `Ok(true)` when it is exactly what we
    /// last wrote, so the claims it shows are confirmed.
    fn check_mine(&mut self) -> Result<bool, RunError> {
        let Some(listed) = self
            .observed
            .get(self.lease_name())
            .map(|o| o.lease.clone())
        else {
            return Err(self.lost("it is gone: deleted, and its finalizer removed by someone else"));
        };
        if listed.token != self.shared.token {
            return Err(self.lost(
                "another process wrote it (a member found it expired, or a process with the same identity took it)",
            ));
        }
        let current = self.mine.as_ref().map(|m| m.resource_version.as_str());
        if current == Some(listed.resource_version.as_str()) {
            return Ok(self.uncertain.is_empty());
        }
        if self.uncertain.iter().any(|w| w.matches(&listed)) {
            self.adopt(listed);
            return Ok(false);
        }
        if self.mine.as_ref().is_some_and(|m| listed.is_deletion_of(m)) {
            self.deleted(listed);
            return Ok(false);
        }
        Err(self.lost("someone else wrote it"))
    }

    /// Our Lease, as we last wrote it, was deleted since: the writes conditioned on its
    /// previous version can no longer apply.
    fn deleted(&mut self, lease: MemberLease) {
        self.mine = Some(lease);
        self.uncertain.clear();
    }

    /// Notices that our Lease is being deleted: from now on, drain and release every
    /// bucket, then let the Lease go.
    fn notice_deletion(&mut self) {
        if !self.evicted && self.mine.as_ref().is_some_and(|m| m.being_deleted) {
            self.evicted = true;
            self.leaving = true;
            if !self.cancelled {
                warn!(group = %self.group(), identity = %self.identity(), lease = %self.lease_name(),
                    "this member's lease is being deleted: draining and releasing every bucket, then letting the lease go and stopping");
            }
        }
    }

    /// On a graceful leave, deletes our Lease while its finalizer keeps it (with its
    /// claims): a Lease being deleted is no live member, so the others leave us out of the
    /// split at once and take each bucket as soon as we release it, rather than once our
    /// Lease is gone after the slowest reconcile. Without the finalizer the delete would
    /// take the claims with it, so nothing is sent then (the others wait for our Lease to
    /// go). A failed delete is tried again next round.
    async fn announce_leave(&mut self) -> Result<(), RunError> {
        let Some(mine) = self.mine.clone() else {
            return Ok(());
        };
        if self.deleting
            || self.unfinalizing
            || !mine.has_finalizer
            || mine.being_deleted
            || !self.uncertain.is_empty()
        {
            return Ok(());
        }
        let name = self.lease_name().to_owned();
        self.deleting = true;
        match self
            .call(
                "delete",
                self.shared.store.delete(&name, &mine.resource_version),
            )
            .await?
        {
            Ok(()) => info!(group = %self.group(), identity = %self.identity(), lease = %name,
                "leaving: the lease is being deleted, its finalizer keeps it until every bucket is released"),
            Err(e) => {
                debug!(group = %self.group(), error = %e,
                    "marking the lease for deletion failed; trying again next round");
                self.deleting = false;
            }
        }
        Ok(())
    }

    /// One of our uncertain writes is what the store holds.
    fn adopt(&mut self, lease: MemberLease) {
        let stored = lease.claims.clone().unwrap_or_default();
        self.mine = Some(lease);
        self.uncertain.clear();
        let mut state = self.shared.state();
        self.released(&mut state, &stored);
    }

    /// The Lease names of the live members with our bucket count, ours included unless
    /// leaving, sorted; and their holders.
    fn members(&mut self, now: Instant) -> (Vec<String>, Vec<String>) {
        let ours = self.shared.config.bucket_count;
        let mut names = Vec::new();
        let mut holders = Vec::new();
        let mut mismatched = Vec::new();
        for (name, o) in &self.observed {
            if name == self.lease_name() {
                continue;
            }
            let live = !self.expired(o, now)
                && !o.lease.token.is_empty()
                && o.lease.expired_by.is_none()
                && !o.lease.holder.is_empty()
                && !o.lease.being_deleted;
            if !live {
                continue;
            }
            if o.lease.bucket_count != Some(ours) {
                mismatched.push((name.clone(), o.lease.bucket_count));
                continue;
            }
            names.push(name.clone());
            holders.push(o.lease.holder.clone());
        }
        for (name, theirs) in mismatched {
            if self.warned.insert(name.clone()) {
                warn!(group = %self.group(), lease = %name, theirs = ?theirs, ours,
                    "a member uses another bucket count: left out of the split (its claims are still respected); every member of a group must use the same");
            }
        }
        if !self.leaving {
            names.push(self.lease_name().to_owned());
            holders.push(self.identity().to_owned());
        }
        names.sort();
        holders.sort();
        (names, holders)
    }

    /// Whether another Lease (or a tombstone) claims part of `bucket`.
    fn blocked(&self, bucket: u32) -> bool {
        let (start, end) = bucket_range(bucket, self.shared.config.bucket_count);
        self.observed
            .iter()
            .filter(|(name, _)| name.as_str() != self.lease_name())
            .any(|(_, o)| o.lease.claims_range(start, end))
            || self
                .tombstones
                .iter()
                .any(|t| t.lease.claims_range(start, end))
    }

    /// Moves every bucket one step towards `desired`; returns the claims to write.
    fn step(
        &self,
        desired: &BucketSet,
        verified: bool,
        fresh: bool,
        holders: Vec<String>,
    ) -> BucketSet {
        let count = self.shared.config.bucket_count;
        let confirmed_claims = match (verified, self.mine.as_ref()) {
            (true, Some(m)) => m.claims.clone().unwrap_or_default(),
            _ => BucketSet::new(),
        };
        let blocked: Vec<bool> = (0..count).map(|b| self.blocked(b)).collect();

        let shared = self.shared.clone();
        let mut state = shared.state();
        state.members = holders;
        let mut entered_syncing = Vec::new();
        for b in 0..count {
            let want = desired.contains(b);
            let slot = &state.slots[b as usize];
            let (current, in_flight) = (slot.state, slot.in_flight);
            let free = !blocked[b as usize];
            let next = match current {
                BucketState::Idle if want && fresh && free => BucketState::Claiming,
                BucketState::Claiming if !want => BucketState::Idle,
                BucketState::Claiming if confirmed_claims.contains(b) && free => {
                    entered_syncing.push(b);
                    BucketState::Syncing
                }
                BucketState::Syncing | BucketState::Active if !want => BucketState::Draining,
                BucketState::Draining if want => {
                    // Its claim never left the Lease: it may become active again.
                    if state.scope_confirmed >= slot.scope_generation {
                        BucketState::Active
                    } else {
                        BucketState::Syncing
                    }
                }
                BucketState::Draining if in_flight == 0 => BucketState::Releasing,
                other => other,
            };
            if next != current {
                if next == BucketState::Active {
                    shared
                        .config
                        .metrics
                        .handover(&shared.config.group, Handover::Acquired);
                }
                shared.set(&mut state, b, next);
            }
        }
        shared.rescope(&mut state);
        let generation = state.scope_generation;
        for b in entered_syncing {
            state.slots[b as usize].scope_generation = generation;
        }
        for b in state.in_state(BucketState::Syncing).iter() {
            if state.scope_confirmed >= state.slots[b as usize].scope_generation {
                shared
                    .config
                    .metrics
                    .handover(&shared.config.group, Handover::Acquired);
                shared.set(&mut state, b, BucketState::Active);
                debug!(group = %shared.config.group, identity = %shared.config.identity,
                    bucket = b, "active");
            }
        }
        let claims: BucketSet = (0..count)
            .filter(|&b| state.slots[b as usize].state.claimed())
            .collect();
        shared.publish(&state);

        claims
    }

    /// Whether every bucket is where `desired` wants it, and whether all are idle.
    fn in_force(&self, desired: &BucketSet) -> (bool, bool) {
        let count = self.shared.config.bucket_count;
        let mut state = self.shared.state();
        let in_force = (0..count).all(|b| {
            let s = state.slots[b as usize].state;
            if desired.contains(b) {
                s == BucketState::Active
            } else {
                s == BucketState::Idle
            }
        });
        let all_idle = state.slots.iter().all(|s| s.state == BucketState::Idle);
        state.in_force = in_force && !self.leaving;
        self.shared.publish(&state);
        (in_force, all_idle)
    }

    async fn round(&mut self) -> Result<Flow, RunError> {
        let listed = self.call("list", self.shared.store.list()).await?;
        let now = Instant::now();
        let fresh = match listed {
            Ok(leases) => {
                self.observe(leases, now);
                true
            }
            Err(e) => {
                warn!(group = %self.group(), identity = %self.identity(), error = %e,
                    "listing the group's leases failed");
                false
            }
        };
        let mut verified = false;
        if fresh {
            let gone = !self.observed.contains_key(self.lease_name());
            if gone && (self.deleting || self.unfinalizing) {
                // Everything was released before the Lease was let go.
                return self.left();
            }
            verified = self.check_mine()?;
            self.notice_deletion();
            self.expire_others(now).await?;
        }
        let count = self.shared.config.bucket_count;
        let (members, holders) = self.members(now);
        if members != self.members {
            self.shared
                .config
                .metrics
                .members(self.group(), holders.len());
            if self.rebalance_since.is_none() {
                self.rebalance_since = Some(now);
            }
            info!(group = %self.group(), identity = %self.identity(), members = ?holders,
                "the group's members changed");
            self.members = members;
        }
        let desired = split::buckets_of(self.lease_name(), &self.members, count);
        let claims = self.step(&desired, verified, fresh, holders);
        let previous = self
            .mine
            .as_ref()
            .and_then(|m| m.claims.clone())
            .unwrap_or_default();
        let claims_added = claims.iter().any(|b| !previous.contains(b));
        let Some(version) = self.mine.as_ref().map(|m| m.resource_version.clone()) else {
            return Err(self.lost("it was never written"));
        };
        let write = self.write(claims);
        let send = Instant::now();
        match self
            .call("update", self.shared.store.update(&write, &version))
            .await?
        {
            Ok(lease) => self.confirmed(lease, &write, send),
            Err(StoreError::Conflict { .. }) => self.resolve_conflict().await?,
            Err(StoreError::NotFound { .. }) => {
                return Err(
                    self.lost("it is gone: deleted, and its finalizer removed by someone else")
                );
            }
            Err(e) => {
                warn!(group = %self.group(), identity = %self.identity(), error = %e,
                    "renewing the lease failed");
                self.uncertain.push(write);
            }
        }

        let (in_force, all_idle) = self.in_force(&desired);
        if in_force && let Some(since) = self.rebalance_since.take() {
            let took = since.elapsed();
            info!(group = %self.group(), identity = %self.identity(), took = ?took,
                buckets = %desired, "the split is in force");
            self.shared
                .config
                .metrics
                .rebalanced(self.group(), took.as_secs_f64());
        }

        if self.leaving && all_idle && self.uncertain.is_empty() {
            let stored_empty = self
                .mine
                .as_ref()
                .is_some_and(|m| m.claims.as_ref().is_some_and(BucketSet::is_empty));
            if stored_empty {
                return self.let_go().await;
            }
        }
        Ok(Flow::Continue { soon: claims_added })
    }

    /// Everything is released and the Lease says so: writes it without its finalizer
    /// (a Lease being deleted then goes away), then deletes it unless it is gone.
    async fn let_go(&mut self) -> Result<Flow, RunError> {
        let again = Ok(Flow::Continue { soon: false });
        let Some(mine) = self.mine.clone() else {
            return self.left();
        };
        if mine.has_finalizer {
            self.unfinalizing = true;
            let write = self.write(BucketSet::new());
            let send = Instant::now();
            match self
                .call(
                    "update",
                    self.shared.store.update(&write, &mine.resource_version),
                )
                .await?
            {
                Ok(lease) => self.confirmed(lease, &write, send),
                Err(StoreError::Conflict { .. }) => {
                    self.resolve_conflict().await?;
                    return again;
                }
                Err(StoreError::NotFound { .. }) => return self.left(),
                Err(e) => {
                    warn!(group = %self.group(), error = %e,
                        "writing the lease without its finalizer failed");
                    self.uncertain.push(write);
                    return again;
                }
            }
        }
        if self.mine.as_ref().is_some_and(|m| m.being_deleted) {
            // Gone, or held only by someone else's finalizer.
            return self.left();
        }
        let Some(version) = self.mine.as_ref().map(|m| m.resource_version.clone()) else {
            return self.left();
        };
        let name = self.lease_name().to_owned();
        self.deleting = true;
        match self
            .call("delete", self.shared.store.delete(&name, &version))
            .await?
        {
            Ok(()) | Err(StoreError::NotFound { .. }) => self.left(),
            Err(e) => {
                warn!(group = %self.group(), error = %e, "deleting the lease failed");
                again
            }
        }
    }

    /// A conditional write of our Lease met a newer version: it is ours only if it is one
    /// of our writes whose answer was lost.
    async fn resolve_conflict(&mut self) -> Result<(), RunError> {
        let name = self.lease_name().to_owned();
        match self.call("get", self.shared.store.get(&name)).await? {
            Ok(lease)
                if lease.token == self.shared.token
                    && self.uncertain.iter().any(|w| w.matches(&lease)) =>
            {
                self.adopt(lease);
                self.notice_deletion();
                Ok(())
            }
            Ok(lease) if self.mine.as_ref().is_some_and(|m| lease.is_deletion_of(m)) => {
                self.deleted(lease);
                self.notice_deletion();
                Ok(())
            }
            Ok(_) => Err(self.lost("someone else wrote it")),
            Err(StoreError::NotFound { .. }) => {
                Err(self.lost("it is gone: deleted, and its finalizer removed by someone else"))
            }
            Err(e) => {
                warn!(group = %self.group(), error = %e, "reading the lease after a conflict failed");
                Ok(())
            }
        }
    }
}

//! The election loop: acquire the lock, renew it while leading, stop (and optionally release)
//! when renewal fails or the election is cancelled.
//!
//! Validity of somebody else's lease is judged only with this process's monotonic clock:
//! the elector remembers when it last saw the record's bytes change (the *observed time*)
//! and considers the lease held until `observed time + leaseDurationSeconds`. Timestamps
//! written by other machines are never compared with local time.

use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use kctrl_client::clock::Clock;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::config::{JITTER_FACTOR, LeaderCallbacks, LeaderElectionConfig};
use crate::error::{ConfigError, HealthError, LockError};
use crate::lock::ResourceLock;
use crate::metrics::LeaderMetrics;
use crate::record::{self, LeaderElectionRecord};

/// The pause before a release that met a conflict reads the lock again (client-go retries at
/// once; the pause keeps a conflict storm from becoming a hot loop of requests).
const RELEASE_CONFLICT_PAUSE: Duration = Duration::from_millis(10);

/// Runs one candidate's side of an election (client-go's `LeaderElector`). Cheap to clone;
/// clones share state, so one clone can [`run`](Self::run) while others answer
/// [`is_leader`](Self::is_leader), [`get_leader`](Self::get_leader) and
/// [`check`](Self::check).
#[derive(Clone)]
pub struct LeaderElector {
    inner: Arc<Inner>,
}

struct Inner {
    lock: Arc<dyn ResourceLock>,
    /// The lock's namespace and name, for log fields.
    namespace: String,
    name: String,
    lease_duration: Duration,
    renew_deadline: Duration,
    retry_period: Duration,
    release_on_cancel: bool,
    election: String,
    callbacks: LeaderCallbacks,
    metrics: Arc<dyn LeaderMetrics>,
    clock: Arc<dyn Clock>,
    observed: Mutex<Observed>,
}

/// What the elector last saw of the record, and when.
#[derive(Default)]
pub(crate) struct Observed {
    pub(crate) record: LeaderElectionRecord,
    /// The raw bytes of the last record read from the lock.
    pub(crate) raw: Vec<u8>,
    /// Local time of the last observed change; `None` before the first.
    pub(crate) time: Option<Instant>,
    /// The holder last reported to `on_new_leader`.
    reported_leader: String,
}

impl fmt::Debug for LeaderElector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaderElector")
            .field("lock", &self.inner.lock.describe())
            .field("identity", &self.identity())
            .field("leader", &self.get_leader())
            .finish_non_exhaustive()
    }
}

/// How long a lock call may take: until the election is cancelled and, when renewing or
/// releasing, until the deadline.
struct Bound<'a> {
    cancel: &'a CancellationToken,
    deadline: Option<Instant>,
}

/// Calls `on_stopped_leading` when [`LeaderElector::run`] returns or is dropped.
struct StoppedGuard(LeaderCallbacks);

impl Drop for StoppedGuard {
    fn drop(&mut self) {
        (self.0.on_stopped_leading)();
    }
}

impl LeaderElector {
    /// An elector for the candidate `lock.identity()`, after validating the config (see
    /// [`LeaderElectionConfig::validate`]). Reports "not leader" to the metrics, and attaches
    /// the config's `watchdog`, if any.
    pub fn new(lock: impl ResourceLock, config: LeaderElectionConfig) -> Result<Self, ConfigError> {
        Self::with_shared_lock(Arc::new(lock), config)
    }

    /// [`LeaderElector::new`] with a lock shared with other code.
    pub fn with_shared_lock(
        lock: Arc<dyn ResourceLock>,
        config: LeaderElectionConfig,
    ) -> Result<Self, ConfigError> {
        config.validate(lock.identity())?;
        let describe = lock.describe();
        let (namespace, name) = describe
            .split_once('/')
            .map(|(ns, n)| (ns.to_owned(), n.to_owned()))
            .unwrap_or_else(|| (String::new(), describe.clone()));
        let LeaderElectionConfig {
            lease_duration,
            renew_deadline,
            retry_period,
            release_on_cancel,
            name: election,
            callbacks,
            watchdog,
            metrics,
            clock,
        } = config;
        metrics.leader_off(&election);
        let elector = Self {
            inner: Arc::new(Inner {
                lock,
                namespace,
                name,
                lease_duration,
                renew_deadline,
                retry_period,
                release_on_cancel,
                election,
                callbacks,
                metrics,
                clock,
                observed: Mutex::new(Observed::default()),
            }),
        };
        if let Some(w) = watchdog {
            w.set_leader_election(&elector);
        }
        Ok(elector)
    }

    /// This candidate's identity.
    pub fn identity(&self) -> &str {
        self.inner.lock.identity()
    }

    /// The holder last observed; empty when nobody holds the lock or nothing was read yet.
    pub fn get_leader(&self) -> String {
        self.observed().record.holder_identity.clone()
    }

    /// Whether the last observed holder is this candidate. Stays true after leadership is
    /// lost without release until the elector observes otherwise — which is what
    /// [`check`](Self::check) relies on.
    pub fn is_leader(&self) -> bool {
        self.observed().record.holder_identity == self.identity()
    }

    /// `Err` when this candidate leads and its record was last observed to change more than
    /// lease duration + `max_tolerable_expired_lease` ago.
    pub fn check(&self, max_tolerable_expired_lease: Duration) -> Result<(), HealthError> {
        let observed = self.observed();
        if observed.record.holder_identity != self.identity() {
            return Ok(());
        }
        let since = observed.time.map_or(Duration::MAX, |t| t.elapsed());
        if since
            > self
                .inner
                .lease_duration
                .saturating_add(max_tolerable_expired_lease)
        {
            return Err(HealthError {
                name: self.inner.election.clone(),
                since_last_renewal: since,
            });
        }
        Ok(())
    }

    /// Runs the election until `cancel` fires or leadership is lost, then returns.
    ///
    /// Tries to acquire the lock every retry period (jittered up to ×2.2). Once acquired:
    /// records a `became leader` event, spawns `on_started_leading` with a token that is
    /// cancelled when leadership ends, and renews every retry period; a renewal that has not
    /// succeeded within the renew deadline ends leadership. Then releases the lock if
    /// configured and records `stopped leading`. `on_stopped_leading` is always called when
    /// this future completes or is dropped, even if this candidate never led.
    ///
    /// An elector is not meant to run twice at once; build one per election.
    pub async fn run(&self, cancel: CancellationToken) {
        let _stopped = StoppedGuard(self.inner.callbacks.clone());
        if !self.acquire(&cancel).await {
            return;
        }
        let leading = cancel.child_token();
        // Ends the leading scope also when this future is dropped mid-renewal.
        let _leading_scope = leading.clone().drop_guard();
        tokio::spawn((self.inner.callbacks.on_started_leading)(leading.clone()));
        self.renew(&cancel, &leading).await;
    }

    async fn acquire(&self, cancel: &CancellationToken) -> bool {
        let inner = &self.inner;
        tracing::info!(namespace = %inner.namespace, name = %inner.name, identity = %self.identity(),
            "attempting to acquire leader lease");
        loop {
            if cancel.is_cancelled() {
                return false;
            }
            let bound = Bound {
                cancel,
                deadline: None,
            };
            let acquired = self.try_acquire_or_renew(&bound).await;
            self.maybe_report_transition();
            if acquired {
                inner.lock.record_event("became leader");
                inner.metrics.leader_on(&inner.election);
                tracing::info!(namespace = %inner.namespace, name = %inner.name, identity = %self.identity(),
                    "successfully acquired lease");
                return true;
            }
            tracing::debug!(namespace = %inner.namespace, name = %inner.name, "failed to acquire lease");
            let wait = inner
                .retry_period
                .mul_f64(1.0 + fastrand::f64() * JITTER_FACTOR);
            tokio::select! {
                _ = cancel.cancelled() => return false,
                _ = tokio::time::sleep(wait) => {}
            }
        }
    }

    async fn renew(&self, cancel: &CancellationToken, leading: &CancellationToken) {
        let inner = &self.inner;
        loop {
            if cancel.is_cancelled() {
                break;
            }
            let deadline = Instant::now() + inner.renew_deadline;
            let renewed = self.renew_until(cancel, deadline).await;
            self.maybe_report_transition();
            if !renewed {
                tracing::info!(namespace = %inner.namespace, name = %inner.name, identity = %self.identity(),
                    cancelled = cancel.is_cancelled(), "failed to renew lease");
                break;
            }
            tracing::trace!(namespace = %inner.namespace, name = %inner.name, "renewed lease");
            tokio::select! {
                _ = cancel.cancelled() => break,
                _ = tokio::time::sleep(inner.retry_period) => {}
            }
        }
        inner.metrics.leader_off(&inner.election);
        leading.cancel();
        if inner.release_on_cancel {
            self.release().await;
        }
        inner.lock.record_event("stopped leading");
    }

    /// Retries a renewal every retry period until one succeeds (`true`), the deadline
    /// passes or the election is cancelled (`false`).
    async fn renew_until(&self, cancel: &CancellationToken, deadline: Instant) -> bool {
        loop {
            if cancel.is_cancelled() {
                return false;
            }
            let bound = Bound {
                cancel,
                deadline: Some(deadline),
            };
            if self.try_acquire_or_renew(&bound).await {
                return true;
            }
            let next = Instant::now() + self.inner.retry_period;
            tokio::select! {
                _ = cancel.cancelled() => return false,
                _ = tokio::time::sleep_until(next.min(deadline)) => {}
            }
            if Instant::now() >= deadline {
                return false;
            }
        }
    }

    /// One attempt to take or keep the lock; `true` when this candidate holds it afterwards.
    async fn try_acquire_or_renew(&self, bound: &Bound<'_>) -> bool {
        let inner = &self.inner;
        let now = Instant::now();
        let wall = record::to_micros(inner.clock.now());
        let mut desired = LeaderElectionRecord {
            holder_identity: self.identity().to_owned(),
            lease_duration_seconds: i32::try_from(inner.lease_duration.as_secs())
                .unwrap_or(i32::MAX),
            acquire_time: Some(wall),
            renew_time: Some(wall),
            ..Default::default()
        };

        // Fast path: we lead and nothing says otherwise; write over the cached lease.
        if self.is_leader() && self.is_lease_valid(now) {
            let previous = self.observed().record.clone();
            desired.acquire_time = previous.acquire_time;
            desired.leader_transitions = previous.leader_transitions;
            match bounded(
                bound,
                "update",
                &self.describe(),
                inner.lock.update(desired.clone()),
            )
            .await
            {
                Ok(()) => {
                    self.set_observed(desired);
                    return true;
                }
                Err(e) => {
                    tracing::debug!(namespace = %inner.namespace, name = %inner.name, error = %e,
                        "optimistic lease update failed, falling back to a read");
                }
            }
        }

        let (current, raw) = match bounded(bound, "get", &self.describe(), inner.lock.get()).await {
            Ok(found) => found,
            Err(e) if e.is_not_found() => {
                let created = bounded(
                    bound,
                    "create",
                    &self.describe(),
                    inner.lock.create(desired.clone()),
                )
                .await;
                return match created {
                    Ok(()) => {
                        self.set_observed(desired);
                        true
                    }
                    Err(e) => {
                        tracing::error!(namespace = %inner.namespace, name = %inner.name, error = %e,
                            "error initially creating lease lock");
                        false
                    }
                };
            }
            Err(e) => {
                tracing::error!(namespace = %inner.namespace, name = %inner.name, error = %e,
                    "error retrieving lease lock");
                return false;
            }
        };

        {
            let mut observed = self.observed();
            if observed.raw != raw {
                observed.record = current.clone();
                observed.time = Some(Instant::now());
                observed.raw = raw;
            }
        }
        if !current.holder_identity.is_empty() && self.is_lease_valid(now) && !self.is_leader() {
            tracing::debug!(namespace = %inner.namespace, name = %inner.name,
                holder = %current.holder_identity, "lease is held and has not yet expired");
            return false;
        }

        if self.is_leader() {
            desired.acquire_time = current.acquire_time;
            desired.leader_transitions = current.leader_transitions;
            inner.metrics.slowpath_exercised(&inner.election);
        } else {
            desired.leader_transitions = current.leader_transitions.saturating_add(1);
        }
        match bounded(
            bound,
            "update",
            &self.describe(),
            inner.lock.update(desired.clone()),
        )
        .await
        {
            Ok(()) => {
                self.set_observed(desired);
                true
            }
            Err(e) => {
                tracing::error!(namespace = %inner.namespace, name = %inner.name, error = %e,
                    "failed to update lease");
                false
            }
        }
    }

    /// Gives the lock up: empty holder, a one-second lease, same transition count. Bounded by
    /// the renew deadline; a conflicting write (e.g. after a renewal that the cancellation cut
    /// short but the API server still applied) is re-read and retried until that deadline, as
    /// client-go does since v0.37.2, unless someone else holds the lock by then. `true` when
    /// the lock is no longer ours.
    ///
    /// [`run`](Self::run) calls this itself with
    /// [`release_on_cancel`](crate::LeaderElectionConfig::release_on_cancel), as soon as
    /// leadership ends. A caller whose leading work may outlive its token (e.g. work that
    /// finishes what is in flight) runs without it and calls this once `run` has returned
    /// and that work has stopped, so a successor never overlaps with it. Writes only if the
    /// lock, read afresh, still names this candidate.
    pub async fn release(&self) -> bool {
        let inner = &self.inner;
        let never = CancellationToken::new();
        let bound = Bound {
            cancel: &never,
            deadline: Some(Instant::now() + inner.renew_deadline),
        };
        let mut current = match bounded(&bound, "get", &self.describe(), inner.lock.get()).await {
            Ok((record, _)) => record,
            Err(e) if e.is_not_found() => {
                tracing::info!(namespace = %inner.namespace, name = %inner.name, "lease lock not found");
                return false;
            }
            Err(e) => {
                tracing::error!(namespace = %inner.namespace, name = %inner.name, error = %e,
                    "error retrieving resource lock");
                return false;
            }
        };
        // Decide on the record just read, not on the one observed before: another candidate
        // may have taken the lock over since our last renewal, and the lock now carries that
        // record's resourceVersion, so an update would blank the new holder's lease.
        if current.holder_identity != self.identity() {
            tracing::info!(namespace = %inner.namespace, name = %inner.name,
                holder = %current.holder_identity, "lease is no longer ours; not releasing it");
            self.set_observed(current);
            return true;
        }
        loop {
            let now = record::to_micros(inner.clock.now());
            let released = LeaderElectionRecord {
                leader_transitions: current.leader_transitions,
                lease_duration_seconds: 1,
                renew_time: Some(now),
                acquire_time: Some(now),
                ..Default::default()
            };
            match bounded(
                &bound,
                "update",
                &self.describe(),
                inner.lock.update(released.clone()),
            )
            .await
            {
                Ok(()) => {
                    self.set_observed(released);
                    tracing::info!(namespace = %inner.namespace, name = %inner.name, identity = %self.identity(),
                        "released lease");
                    return true;
                }
                Err(e) if e.is_conflict() => {
                    tracing::debug!(namespace = %inner.namespace, name = %inner.name, error = %e,
                        "conflict releasing lease, re-reading it");
                    if bound
                        .deadline
                        .is_some_and(|d| Instant::now() + RELEASE_CONFLICT_PAUSE >= d)
                    {
                        return false;
                    }
                    tokio::time::sleep(RELEASE_CONFLICT_PAUSE).await;
                    match bounded(&bound, "get", &self.describe(), inner.lock.get()).await {
                        Ok((fresh, _)) if fresh.holder_identity != self.identity() => {
                            self.set_observed(fresh);
                            return true;
                        }
                        Ok((fresh, _)) => current = fresh,
                        Err(e) => {
                            tracing::error!(namespace = %inner.namespace, name = %inner.name, error = %e,
                                "error retrieving resource lock");
                            return false;
                        }
                    }
                }
                Err(e) => {
                    tracing::error!(namespace = %inner.namespace, name = %inner.name, error = %e,
                        "failed to release lease");
                    return false;
                }
            }
        }
    }

    /// Tells `on_new_leader` (on a task of its own) when the observed holder changed since
    /// the last report.
    pub(crate) fn maybe_report_transition(&self) {
        let holder = {
            let mut observed = self.observed();
            if observed.record.holder_identity == observed.reported_leader {
                return;
            }
            observed.reported_leader = observed.record.holder_identity.clone();
            observed.reported_leader.clone()
        };
        if let Some(f) = self.inner.callbacks.on_new_leader.clone() {
            tokio::spawn(async move { f(holder) });
        }
    }

    fn is_lease_valid(&self, now: Instant) -> bool {
        let observed = self.observed();
        let seconds = u64::try_from(observed.record.lease_duration_seconds).unwrap_or(0);
        observed
            .time
            .is_some_and(|t| t + Duration::from_secs(seconds) > now)
    }

    fn set_observed(&self, record: LeaderElectionRecord) {
        let mut observed = self.observed();
        observed.record = record;
        observed.time = Some(Instant::now());
    }

    pub(crate) fn observed(&self) -> MutexGuard<'_, Observed> {
        self.inner
            .observed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    fn describe(&self) -> String {
        self.inner.lock.describe()
    }
}

/// Awaits a lock call unless the election is cancelled or the deadline passes first.
async fn bounded<T>(
    bound: &Bound<'_>,
    operation: &'static str,
    lock: &str,
    call: impl Future<Output = Result<T, LockError>>,
) -> Result<T, LockError> {
    let interrupted = |why| LockError::Interrupted {
        operation,
        lock: lock.to_owned(),
        why,
    };
    // A call is not even started once the election is cancelled or the deadline passed, as
    // a done context fails a client-go request at once.
    if bound.cancel.is_cancelled() {
        return Err(interrupted("cancelled"));
    }
    if bound.deadline.is_some_and(|d| Instant::now() >= d) {
        return Err(interrupted("renew deadline exceeded"));
    }
    let deadline = async {
        match bound.deadline {
            Some(d) => tokio::time::sleep_until(d).await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        biased;
        result = call => result,
        _ = bound.cancel.cancelled() => Err(interrupted("cancelled")),
        _ = deadline => Err(interrupted("renew deadline exceeded")),
    }
}

#[cfg(test)]
impl LeaderElector {
    /// Test access: one attempt bounded only by `cancel`.
    pub(crate) async fn try_once(&self, cancel: &CancellationToken) -> bool {
        self.try_acquire_or_renew(&Bound {
            cancel,
            deadline: None,
        })
        .await
    }
}

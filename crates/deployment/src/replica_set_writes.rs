//! The controller's own ReplicaSet writes that its ReplicaSet cache may not show yet.
//!
//! A sync sizes ReplicaSets from the informer cache. Right after this controller scaled,
//! re-annotated or created a ReplicaSet, the cache can still hold the version before that
//! write (for milliseconds normally; for seconds when the watch is slow or cut), and a sync
//! from it would size the *other* ReplicaSets as if the write had not happened: a new
//! ReplicaSet created next to a stale count can exceed `maxSurge`, a Recreate rollout can start
//! new pods while the pods of a ReplicaSet the cache does not know yet still run. Writes of the
//! same ReplicaSet are safe (the stale resourceVersion makes them conflict); the decisions about
//! the others are not.
//!
//! [`ReplicaSetWrites`] remembers, per Deployment, what each such write tells about the cache:
//!
//! * an **update** the API server answered replaced the resourceVersion it was sent with: a
//!   cache still holding that version is behind;
//! * a **create** it answered made a ReplicaSet exist: a cache without it is behind;
//! * a write whose **outcome is unknown** (no answer: connection cut, timeout; or an answer
//!   that could not be read) may or may not have been applied. While the cache still holds the
//!   version it was sent with (or, for a create, no ReplicaSet), only the API server can tell:
//!   [`Check::Verify`] asks the caller for one live read, whose answer [`resolve`] records
//!   (applied: the cache is behind; not applied: it is current).
//!
//! A record goes away as soon as the cache shows a version the record does not know as stale
//! (the write itself, or anything after it), when the Deployment is deleted, or when a live read
//! shows the cache is current. A record the cache has not caught up with after
//! [`VERIFY_AFTER`] is checked by a live read, so a record that could never be satisfied (a
//! created ReplicaSet deleted again before the cache saw it) does not hold the Deployment back
//! for longer than that.
//!
//! The table is pure bookkeeping: no I/O, the time is passed in. In a fault-free run it costs
//! no API request: records are only created from answers the controller receives anyway, and
//! resolved by reading the cache; live reads happen only after a lost answer or a cache more
//! than [`VERIFY_AFTER`] behind.
//!
//! [`resolve`]: ReplicaSetWrites::resolve

use std::collections::HashMap;
use std::time::Duration;

use tokio::time::Instant;

/// How long a sync waits for the cache to show one of this controller's own ReplicaSet writes
/// before it asks the API server whether the cache is really behind.
pub(crate) const VERIFY_AFTER: Duration = Duration::from_secs(30);

/// A write whose answer was lost: it may or may not have been applied.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Unknown {
    /// An update sent with this resourceVersion.
    Update(String),
    /// A create.
    Create,
}

/// What this controller's writes of one ReplicaSet tell about the cache.
#[derive(Clone, Debug)]
struct Pending {
    /// resourceVersions that an applied write of ours replaced: a cache holding one is behind.
    replaced: Vec<String>,
    /// We created the ReplicaSet: a cache without it is behind.
    created: bool,
    /// The last write's outcome is unknown.
    unknown: Option<Unknown>,
    /// When the last write was answered (or failed).
    since: Instant,
}

impl Pending {
    fn new(now: Instant) -> Self {
        Self {
            replaced: Vec::new(),
            created: false,
            unknown: None,
            since: now,
        }
    }

    /// Whether a cache holding `cached` (the ReplicaSet's resourceVersion, `None` when the
    /// cache has no such ReplicaSet) is known to be behind our writes.
    fn known_behind(&self, cached: Option<&str>) -> bool {
        match cached {
            None => self.created,
            Some(rv) => self.replaced.iter().any(|r| r == rv),
        }
    }

    /// Whether only a live read can tell whether the write of unknown outcome was applied:
    /// the cache holds what the write was sent against.
    fn needs_live_read(&self, cached: Option<&str>) -> bool {
        match (&self.unknown, cached) {
            (Some(Unknown::Update(sent)), Some(rv)) => sent == rv,
            (Some(Unknown::Create), None) => true,
            _ => false,
        }
    }
}

/// What a sync may do, given the cache.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Check {
    /// The cache shows every write of this controller to the Deployment's ReplicaSets: act.
    Current,
    /// The cache is behind at least one of them: do not act on it. The ReplicaSet's event
    /// queues the Deployment again when the cache catches up; `retry_in` is when to look again
    /// if no event comes (when the oldest record becomes due for a live read).
    Behind {
        /// How long until a record becomes due for a live read.
        retry_in: Duration,
    },
    /// Only the API server can tell for these ReplicaSets (by name): read each live and
    /// [`ReplicaSetWrites::resolve`] it, then check again.
    Verify(Vec<String>),
}

/// How a live read answered, for [`ReplicaSetWrites::resolve`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Live<'a> {
    /// The ReplicaSet exists at this resourceVersion.
    At(&'a str),
    /// No such ReplicaSet.
    NotFound,
}

/// Per Deployment key (`namespace/name`), per ReplicaSet name: the records described in the
/// [module documentation](self).
#[derive(Debug, Default)]
pub(crate) struct ReplicaSetWrites {
    by_deployment: HashMap<String, HashMap<String, Pending>>,
}

impl ReplicaSetWrites {
    fn entry(&mut self, deployment: &str, rs: &str, now: Instant) -> &mut Pending {
        let pending = self
            .by_deployment
            .entry(deployment.to_owned())
            .or_default()
            .entry(rs.to_owned())
            .or_insert_with(|| Pending::new(now));
        pending.since = now;
        pending
    }

    /// An update of `rs` sent with `sent` was applied and answered with `written`. A write
    /// that did not change the resourceVersion (nothing changed on the server) leaves no
    /// record: no event will come for it.
    pub(crate) fn applied(
        &mut self,
        deployment: &str,
        rs: &str,
        sent: Option<&str>,
        written: Option<&str>,
        now: Instant,
    ) {
        let Some(sent) = sent else { return };
        if written == Some(sent) {
            return;
        }
        let pending = self.entry(deployment, rs, now);
        pending.unknown = None;
        if !pending.replaced.iter().any(|r| r == sent) {
            pending.replaced.push(sent.to_owned());
        }
    }

    /// `rs` was created (the API server answered).
    pub(crate) fn created(&mut self, deployment: &str, rs: &str, now: Instant) {
        let pending = self.entry(deployment, rs, now);
        pending.unknown = None;
        pending.created = true;
    }

    /// An update of `rs` sent with `sent` got no readable answer.
    pub(crate) fn update_unknown(
        &mut self,
        deployment: &str,
        rs: &str,
        sent: Option<&str>,
        now: Instant,
    ) {
        let Some(sent) = sent else { return };
        self.entry(deployment, rs, now).unknown = Some(Unknown::Update(sent.to_owned()));
    }

    /// A create of `rs` got no readable answer.
    pub(crate) fn create_unknown(&mut self, deployment: &str, rs: &str, now: Instant) {
        self.entry(deployment, rs, now).unknown = Some(Unknown::Create);
    }

    /// Forgets everything about `deployment` (it was deleted).
    pub(crate) fn forget(&mut self, deployment: &str) {
        self.by_deployment.remove(deployment);
    }

    /// Whether anything is remembered about `deployment`.
    #[cfg(test)]
    pub(crate) fn is_tracking(&self, deployment: &str) -> bool {
        self.by_deployment.contains_key(deployment)
    }

    /// How many ReplicaSets have records, over all Deployments.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.by_deployment.values().map(HashMap::len).sum()
    }

    /// Compares the records of `deployment` with the cache (`cached(name)`: the cached
    /// ReplicaSet's resourceVersion, `None` when it is not cached) and forgets those the cache
    /// has caught up with.
    pub(crate) fn check(
        &mut self,
        deployment: &str,
        cached: impl Fn(&str) -> Option<String>,
        now: Instant,
    ) -> Check {
        let Some(records) = self.by_deployment.get_mut(deployment) else {
            return Check::Current;
        };
        let mut verify = Vec::new();
        let mut retry_in: Option<Duration> = None;
        records.retain(|name, pending| {
            let rv = cached(name);
            let rv = rv.as_deref();
            let behind = pending.known_behind(rv);
            if !behind && pending.needs_live_read(rv) {
                verify.push(name.clone());
                return true;
            }
            if !behind {
                return false;
            }
            let waited = now.saturating_duration_since(pending.since);
            if waited >= VERIFY_AFTER {
                verify.push(name.clone());
            } else {
                let left = VERIFY_AFTER - waited;
                retry_in = Some(retry_in.map_or(left, |r| r.min(left)));
            }
            true
        });
        if records.is_empty() {
            self.by_deployment.remove(deployment);
        }
        if !verify.is_empty() {
            verify.sort();
            return Check::Verify(verify);
        }
        match retry_in {
            Some(retry_in) => Check::Behind { retry_in },
            None => Check::Current,
        }
    }

    /// Records the live read of `rs` that a [`Check::Verify`] asked for; `cached` is the
    /// cached resourceVersion as the check saw it. Afterwards a check does not ask for `rs`
    /// again before [`VERIFY_AFTER`].
    pub(crate) fn resolve(
        &mut self,
        deployment: &str,
        rs: &str,
        cached: Option<&str>,
        live: Live<'_>,
        now: Instant,
    ) {
        let Some(records) = self.by_deployment.get_mut(deployment) else {
            return;
        };
        let Some(pending) = records.get_mut(rs) else {
            return;
        };
        let cache_current = match live {
            // The ReplicaSet is gone: nothing of ours can be waited for (the cache drops it
            // with the deletion's event).
            Live::NotFound => true,
            Live::At(live_rv) => cached == Some(live_rv),
        };
        if cache_current {
            // Either the write of unknown outcome was not applied, or every write of ours is
            // already in the cache's version (or the ReplicaSet was deleted meanwhile).
            records.remove(rs);
        } else {
            // The server holds a newer version than the cache: the write of unknown outcome
            // was applied (or someone else wrote since). Either way the cache's version (or
            // its lack of the ReplicaSet) is behind: wait for it, again for VERIFY_AFTER.
            pending.unknown = None;
            match cached {
                Some(rv) if !pending.replaced.iter().any(|r| r == rv) => {
                    pending.replaced.push(rv.to_owned());
                }
                Some(_) => {}
                None => pending.created = true,
            }
            pending.since = now;
        }
        if records.is_empty() {
            self.by_deployment.remove(deployment);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const D: &str = "default/web";

    fn cache<'a>(entries: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| {
            entries
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, rv)| (*rv).to_owned())
        }
    }

    #[test]
    fn an_applied_update_holds_until_the_cache_moves_past_the_replaced_version() {
        let now = Instant::now();
        let mut w = ReplicaSetWrites::default();
        w.applied(D, "web-a", Some("10"), Some("11"), now);
        assert_eq!(
            w.check(D, cache(&[("web-a", "10")]), now + Duration::from_secs(1)),
            Check::Behind {
                retry_in: VERIFY_AFTER - Duration::from_secs(1)
            }
        );
        assert_eq!(w.check(D, cache(&[("web-a", "11")]), now), Check::Current);
        assert!(!w.is_tracking(D), "caught up: forgotten");
    }

    #[test]
    fn a_chain_of_writes_in_one_sync_is_behind_at_every_replaced_version() {
        let now = Instant::now();
        let mut w = ReplicaSetWrites::default();
        w.applied(D, "web-a", Some("10"), Some("11"), now);
        w.applied(D, "web-a", Some("11"), Some("12"), now);
        for rv in ["10", "11"] {
            assert!(matches!(
                w.check(D, cache(&[("web-a", rv)]), now),
                Check::Behind { .. }
            ));
        }
        // Someone else's later write counts as caught up too.
        assert_eq!(w.check(D, cache(&[("web-a", "15")]), now), Check::Current);
    }

    #[test]
    fn a_no_op_update_leaves_no_record() {
        let now = Instant::now();
        let mut w = ReplicaSetWrites::default();
        w.applied(D, "web-a", Some("10"), Some("10"), now);
        assert!(!w.is_tracking(D));
    }

    #[test]
    fn a_create_holds_until_the_cache_has_the_replica_set() {
        let now = Instant::now();
        let mut w = ReplicaSetWrites::default();
        w.created(D, "web-b", now);
        assert!(matches!(w.check(D, cache(&[]), now), Check::Behind { .. }));
        assert_eq!(w.check(D, cache(&[("web-b", "3")]), now), Check::Current);
        assert_eq!(w.len(), 0);
    }

    #[test]
    fn an_unknown_update_is_verified_only_while_the_cache_holds_the_version_it_was_sent_with() {
        let now = Instant::now();
        let mut w = ReplicaSetWrites::default();
        w.update_unknown(D, "web-a", Some("10"), now);
        assert_eq!(
            w.check(D, cache(&[("web-a", "10")]), now),
            Check::Verify(vec!["web-a".to_owned()])
        );
        // The cache moved on: whatever happened, it is newer than what the write was sent with.
        assert_eq!(w.check(D, cache(&[("web-a", "12")]), now), Check::Current);
    }

    #[test]
    fn a_live_read_tells_applied_from_not_applied() {
        let now = Instant::now();
        let mut w = ReplicaSetWrites::default();
        w.update_unknown(D, "web-a", Some("10"), now);
        w.resolve(D, "web-a", Some("10"), Live::At("11"), now);
        assert!(matches!(
            w.check(D, cache(&[("web-a", "10")]), now),
            Check::Behind { .. }
        ));
        assert_eq!(w.check(D, cache(&[("web-a", "11")]), now), Check::Current);

        w.update_unknown(D, "web-a", Some("11"), now);
        w.resolve(D, "web-a", Some("11"), Live::At("11"), now);
        assert!(!w.is_tracking(D), "not applied: the cache is current");
        assert_eq!(w.check(D, cache(&[("web-a", "11")]), now), Check::Current);
    }

    #[test]
    fn an_unknown_create_is_verified_while_the_cache_has_no_such_replica_set() {
        let now = Instant::now();
        let mut w = ReplicaSetWrites::default();
        w.create_unknown(D, "web-b", now);
        assert_eq!(
            w.check(D, cache(&[]), now),
            Check::Verify(vec!["web-b".to_owned()])
        );
        w.resolve(D, "web-b", None, Live::At("7"), now);
        assert!(matches!(w.check(D, cache(&[]), now), Check::Behind { .. }));
        w.resolve(D, "web-b", None, Live::NotFound, now);
        assert_eq!(w.check(D, cache(&[]), now), Check::Current);
    }

    #[test]
    fn a_record_the_cache_never_satisfies_is_verified_after_the_bound() {
        let now = Instant::now();
        let mut w = ReplicaSetWrites::default();
        w.created(D, "web-b", now);
        let later = now + VERIFY_AFTER;
        assert_eq!(
            w.check(D, cache(&[]), later),
            Check::Verify(vec!["web-b".to_owned()])
        );
        // Still on the server, still not in the cache: wait again, for the same bound.
        w.resolve(D, "web-b", None, Live::At("7"), later);
        assert_eq!(
            w.check(D, cache(&[]), later),
            Check::Behind {
                retry_in: VERIFY_AFTER
            }
        );
        // Deleted before the cache saw it: forgotten.
        w.resolve(D, "web-b", None, Live::NotFound, later + VERIFY_AFTER);
        assert!(!w.is_tracking(D));
    }

    #[test]
    fn records_are_per_deployment_and_forgotten_with_it() {
        let now = Instant::now();
        let mut w = ReplicaSetWrites::default();
        w.created(D, "web-b", now);
        w.created("default/api", "api-b", now);
        assert_eq!(w.check("default/other", cache(&[]), now), Check::Current);
        w.forget(D);
        assert!(!w.is_tracking(D));
        assert_eq!(w.len(), 1);
    }
}

//! Expectations: the Pod creations and deletions a ReplicaSet waits to see in its Pod cache
//! before it creates or deletes again (kube-controller-manager's `ControllerExpectations`
//! wrapped in `UIDTrackingControllerExpectations`).
//!
//! A sync that creates `n` Pods expects `n` additions; one that deletes Pods expects the
//! deletion of exactly those Pods (by `namespace/name`), so that a Pod seen first with a
//! `deletionTimestamp` and then deleted counts once. The Pod handlers lower the counts as the
//! informer reports the Pods; a failed create or delete lowers them at once (its Pod will never
//! be reported). Until the counts reach zero, or [`EXPECTATIONS_TIMEOUT`] (5 minutes) passes
//! since they were set, a sync updates the status but does not create or delete: its Pod cache
//! may not show its previous writes yet.
//!
//! The time is Tokio's ([`tokio::time::Instant`]), so tests drive the expiry with a paused
//! clock.

use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::time::Instant;
use tracing::{debug, error};

/// How long expectations hold a ReplicaSet at most (upstream's `ExpectationsTimeout`): past
/// it, a sync acts on its caches whatever they show.
pub(crate) const EXPECTATIONS_TIMEOUT: Duration = Duration::from_secs(5 * 60);

/// The creations and deletions one ReplicaSet waits for (upstream's `ControlleeExpectations`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Controllee {
    /// Creations still to observe.
    pub(crate) add: i64,
    /// Deletions still to observe.
    pub(crate) del: i64,
    /// When these expectations were set.
    pub(crate) timestamp: Instant,
}

impl Controllee {
    /// Whether every expected creation and deletion was observed.
    pub(crate) fn fulfilled(&self) -> bool {
        self.add <= 0 && self.del <= 0
    }

    fn expired(&self, now: Instant) -> bool {
        now.saturating_duration_since(self.timestamp) > EXPECTATIONS_TIMEOUT
    }
}

#[derive(Debug, Default)]
struct Tables {
    counts: HashMap<String, Controllee>,
    /// The keys of the Pods each ReplicaSet expects to see deleted.
    deletions: HashMap<String, HashSet<String>>,
}

/// Per ReplicaSet key, the Pod creations and deletions it waits for (see the [module
/// docs](self)).
#[derive(Debug, Default)]
pub(crate) struct Expectations {
    tables: Mutex<Tables>,
}

impl Expectations {
    /// No expectations.
    pub(crate) fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, Tables> {
        self.tables.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The expectations of `key`, if set (`GetExpectations`).
    pub(crate) fn get(&self, key: &str) -> Option<Controllee> {
        self.lock().counts.get(key).copied()
    }

    /// The Pod keys `key` still expects to see deleted (`GetUIDs`).
    #[cfg(test)]
    pub(crate) fn deletion_keys(&self, key: &str) -> Option<HashSet<String>> {
        self.lock().deletions.get(key).cloned()
    }

    /// Whether `key` may create and delete: its expectations are fulfilled, expired, or were
    /// never set (`SatisfiedExpectations`).
    pub(crate) fn satisfied(&self, key: &str) -> bool {
        let Some(exp) = self.get(key) else {
            debug!(
                key,
                "controller either never recorded expectations, or the ttl expired"
            );
            return true;
        };
        if exp.fulfilled() {
            debug!(key, add = exp.add, del = exp.del, "expectations fulfilled");
            true
        } else if exp.expired(Instant::now()) {
            debug!(key, add = exp.add, del = exp.del, "expectations expired");
            true
        } else {
            debug!(
                key,
                add = exp.add,
                del = exp.del,
                "controller still waiting on expectations"
            );
            false
        }
    }

    /// Replaces the counts of `key` (`SetExpectations`); the deletion keys stay.
    fn set(&self, key: &str, add: i64, del: i64) {
        self.lock().counts.insert(
            key.to_owned(),
            Controllee {
                add,
                del,
                timestamp: Instant::now(),
            },
        );
    }

    /// `key` is about to create `adds` Pods (`ExpectCreations`).
    pub(crate) fn expect_creations(&self, key: &str, adds: usize) {
        self.set(key, count(adds), 0);
    }

    /// `key` is about to delete the Pods `pod_keys` (`ExpectDeletions` of the UID-tracking
    /// expectations).
    pub(crate) fn expect_deletions(&self, key: &str, pod_keys: impl IntoIterator<Item = String>) {
        let keys: HashSet<String> = pod_keys.into_iter().collect();
        let dels = keys.len();
        let mut tables = self.lock();
        if let Some(existing) = tables.deletions.get(key)
            && !existing.is_empty()
        {
            error!(key, existing = ?existing, "clobbering existing delete keys");
        }
        tables.deletions.insert(key.to_owned(), keys);
        tables.counts.insert(
            key.to_owned(),
            Controllee {
                add: 0,
                del: count(dels),
                timestamp: Instant::now(),
            },
        );
    }

    /// Lowers the counts of `key`, if it has expectations (`LowerExpectations`).
    pub(crate) fn lower(&self, key: &str, add: i64, del: i64) {
        if let Some(exp) = self.lock().counts.get_mut(key) {
            exp.add -= add;
            exp.del -= del;
            debug!(key, add = exp.add, del = exp.del, "lowered expectations");
        }
    }

    /// One creation of `key` was observed, or will never be (`CreationObserved`).
    pub(crate) fn creation_observed(&self, key: &str) {
        self.lower(key, 1, 0);
    }

    /// The deletion of Pod `pod_key` was observed, or will never be: counted once, and only if
    /// `key` expected it (`DeletionObserved` of the UID-tracking expectations).
    pub(crate) fn deletion_observed(&self, key: &str, pod_key: &str) {
        let mut tables = self.lock();
        let expected = tables
            .deletions
            .get_mut(key)
            .is_some_and(|keys| keys.remove(pod_key));
        if expected {
            debug!(key, pod = pod_key, "controller received delete for pod");
            if let Some(exp) = tables.counts.get_mut(key) {
                exp.del -= 1;
            }
        }
    }

    /// Forgets everything about `key` (`DeleteExpectations`): its ReplicaSet is gone, or was
    /// recreated under the same name.
    pub(crate) fn delete(&self, key: &str) {
        let mut tables = self.lock();
        tables.counts.remove(key);
        tables.deletions.remove(key);
    }
}

fn count(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn expectations_are_satisfied_when_observed_or_expired() {
        let e = Expectations::new();
        assert!(e.satisfied("ns/rs"), "never set");
        e.expect_creations("ns/rs", 2);
        assert!(!e.satisfied("ns/rs"));
        e.creation_observed("ns/rs");
        assert!(!e.satisfied("ns/rs"));
        e.creation_observed("ns/rs");
        assert!(e.satisfied("ns/rs"));

        e.expect_creations("ns/rs", 1);
        tokio::time::advance(EXPECTATIONS_TIMEOUT).await;
        assert!(!e.satisfied("ns/rs"), "not yet past the timeout");
        tokio::time::advance(Duration::from_millis(1)).await;
        assert!(e.satisfied("ns/rs"), "expired");
    }

    #[tokio::test(start_paused = true)]
    async fn a_deletion_counts_once_and_only_if_expected() {
        let e = Expectations::new();
        e.expect_deletions("ns/rs", ["ns/a".to_owned(), "ns/b".to_owned()]);
        assert_eq!(e.get("ns/rs").map(|c| c.del), Some(2));
        e.deletion_observed("ns/rs", "ns/a");
        e.deletion_observed("ns/rs", "ns/a");
        e.deletion_observed("ns/rs", "ns/other");
        assert_eq!(e.get("ns/rs").map(|c| c.del), Some(1));
        assert!(!e.satisfied("ns/rs"));
        e.deletion_observed("ns/rs", "ns/b");
        assert!(e.satisfied("ns/rs"));
        assert_eq!(e.deletion_keys("ns/rs"), Some(HashSet::new()));
        e.delete("ns/rs");
        assert!(e.get("ns/rs").is_none() && e.deletion_keys("ns/rs").is_none());
    }
}

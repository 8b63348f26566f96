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
//! Each entry belongs to one ReplicaSet, by UID, not only by key: a ReplicaSet deleted while
//! its sync was in flight may get its expectations raised after the delete handler cleared
//! them, and kctrl-runtime does not sync a key whose object is gone (where upstream's sync
//! deletes such leftovers). An entry of another UID is as good as none for the ReplicaSet
//! created again under that name.
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

/// The expectations of one key.
#[derive(Debug)]
struct Entry {
    /// The UID of the ReplicaSet that set them.
    uid: String,
    counts: Controllee,
    /// The keys of the Pods it expects to see deleted.
    deletions: HashSet<String>,
}

/// Per ReplicaSet key, the Pod creations and deletions it waits for (see the [module
/// docs](self)).
#[derive(Debug, Default)]
pub(crate) struct Expectations {
    entries: Mutex<HashMap<String, Entry>>,
}

impl Expectations {
    /// No expectations.
    pub(crate) fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Entry>> {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The expectations of `key`, if set, whichever ReplicaSet set them (`GetExpectations`).
    #[cfg(test)]
    pub(crate) fn get(&self, key: &str) -> Option<Controllee> {
        self.lock().get(key).map(|e| e.counts)
    }

    /// The UID of the ReplicaSet whose expectations `key` holds.
    #[cfg(test)]
    pub(crate) fn owner(&self, key: &str) -> Option<String> {
        self.lock().get(key).map(|e| e.uid.clone())
    }

    /// The Pod keys `key` still expects to see deleted (`GetUIDs`).
    #[cfg(test)]
    pub(crate) fn deletion_keys(&self, key: &str) -> Option<HashSet<String>> {
        self.lock().get(key).map(|e| e.deletions.clone())
    }

    /// Whether the ReplicaSet `key` of UID `uid` may create and delete: its expectations are
    /// fulfilled, expired, or were never set; expectations another ReplicaSet of that name
    /// left are dropped (`SatisfiedExpectations`).
    pub(crate) fn satisfied(&self, key: &str, uid: &str) -> bool {
        let mut entries = self.lock();
        let Some(entry) = entries.get(key) else {
            debug!(
                key,
                "controller either never recorded expectations, or the ttl expired"
            );
            return true;
        };
        if entry.uid != uid {
            debug!(
                key,
                uid,
                other = entry.uid,
                "dropping the expectations of a ReplicaSet of that name that is gone"
            );
            entries.remove(key);
            return true;
        }
        let exp = entry.counts;
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

    /// The entry of `key` for `uid`: a fresh one when there is none or it is another
    /// ReplicaSet's.
    fn entry<'a>(entries: &'a mut HashMap<String, Entry>, key: &str, uid: &str) -> &'a mut Entry {
        let fresh = || Entry {
            uid: uid.to_owned(),
            counts: Controllee {
                add: 0,
                del: 0,
                timestamp: Instant::now(),
            },
            deletions: HashSet::new(),
        };
        let entry = entries.entry(key.to_owned()).or_insert_with(fresh);
        if entry.uid != uid {
            *entry = fresh();
        }
        entry
    }

    /// The ReplicaSet `key` of UID `uid` is about to create `adds` Pods (`ExpectCreations`);
    /// the deletion keys it still expects stay.
    pub(crate) fn expect_creations(&self, key: &str, uid: &str, adds: usize) {
        let mut entries = self.lock();
        Self::entry(&mut entries, key, uid).counts = Controllee {
            add: count(adds),
            del: 0,
            timestamp: Instant::now(),
        };
    }

    /// The ReplicaSet `key` of UID `uid` is about to delete the Pods `pod_keys`
    /// (`ExpectDeletions` of the UID-tracking expectations).
    pub(crate) fn expect_deletions(
        &self,
        key: &str,
        uid: &str,
        pod_keys: impl IntoIterator<Item = String>,
    ) {
        let keys: HashSet<String> = pod_keys.into_iter().collect();
        let dels = keys.len();
        let mut entries = self.lock();
        let entry = Self::entry(&mut entries, key, uid);
        if !entry.deletions.is_empty() {
            error!(key, existing = ?entry.deletions, "clobbering existing delete keys");
        }
        entry.deletions = keys;
        entry.counts = Controllee {
            add: 0,
            del: count(dels),
            timestamp: Instant::now(),
        };
    }

    /// Lowers the counts of `key`, if the ReplicaSet of UID `uid` has expectations there
    /// (`LowerExpectations`).
    pub(crate) fn lower(&self, key: &str, uid: &str, add: i64, del: i64) {
        if let Some(entry) = self.lock().get_mut(key).filter(|e| e.uid == uid) {
            let exp = &mut entry.counts;
            exp.add -= add;
            exp.del -= del;
            debug!(key, add = exp.add, del = exp.del, "lowered expectations");
        }
    }

    /// One creation of the ReplicaSet `key` of UID `uid` was observed, or will never be
    /// (`CreationObserved`).
    pub(crate) fn creation_observed(&self, key: &str, uid: &str) {
        self.lower(key, uid, 1, 0);
    }

    /// The deletion of Pod `pod_key` was observed, or will never be: counted once, and only if
    /// the ReplicaSet `key` of UID `uid` expected it (`DeletionObserved` of the UID-tracking
    /// expectations).
    pub(crate) fn deletion_observed(&self, key: &str, uid: &str, pod_key: &str) {
        let mut entries = self.lock();
        let Some(entry) = entries.get_mut(key).filter(|e| e.uid == uid) else {
            return;
        };
        if entry.deletions.remove(pod_key) {
            debug!(key, pod = pod_key, "controller received delete for pod");
            entry.counts.del -= 1;
        }
    }

    /// Forgets everything about `key` (`DeleteExpectations`): its ReplicaSet is gone, or was
    /// recreated under the same name.
    pub(crate) fn delete(&self, key: &str) {
        self.lock().remove(key);
    }

    /// Forgets the expectations of `key` if the ReplicaSet of UID `uid` set them: that
    /// ReplicaSet is gone.
    pub(crate) fn delete_of(&self, key: &str, uid: &str) {
        let mut entries = self.lock();
        if entries.get(key).is_some_and(|e| e.uid == uid) {
            entries.remove(key);
        }
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
        assert!(e.satisfied("ns/rs", "u1"), "never set");
        e.expect_creations("ns/rs", "u1", 2);
        assert!(!e.satisfied("ns/rs", "u1"));
        e.creation_observed("ns/rs", "u1");
        assert!(!e.satisfied("ns/rs", "u1"));
        e.creation_observed("ns/rs", "u1");
        assert!(e.satisfied("ns/rs", "u1"));

        e.expect_creations("ns/rs", "u1", 1);
        tokio::time::advance(EXPECTATIONS_TIMEOUT).await;
        assert!(!e.satisfied("ns/rs", "u1"), "not yet past the timeout");
        tokio::time::advance(Duration::from_millis(1)).await;
        assert!(e.satisfied("ns/rs", "u1"), "expired");
    }

    #[tokio::test(start_paused = true)]
    async fn a_deletion_counts_once_and_only_if_expected() {
        let e = Expectations::new();
        e.expect_deletions("ns/rs", "u1", ["ns/a".to_owned(), "ns/b".to_owned()]);
        assert_eq!(e.get("ns/rs").map(|c| c.del), Some(2));
        e.deletion_observed("ns/rs", "u1", "ns/a");
        e.deletion_observed("ns/rs", "u1", "ns/a");
        e.deletion_observed("ns/rs", "u1", "ns/other");
        e.deletion_observed("ns/rs", "u2", "ns/b");
        assert_eq!(e.get("ns/rs").map(|c| c.del), Some(1));
        assert!(!e.satisfied("ns/rs", "u1"));
        e.deletion_observed("ns/rs", "u1", "ns/b");
        assert!(e.satisfied("ns/rs", "u1"));
        assert_eq!(e.deletion_keys("ns/rs"), Some(HashSet::new()));
        e.delete("ns/rs");
        assert!(e.get("ns/rs").is_none() && e.deletion_keys("ns/rs").is_none());
    }

    /// Expectations belong to the ReplicaSet that set them: another one of that name (a new
    /// UID) neither waits on them nor lowers them, and setting its own replaces them whole.
    #[tokio::test(start_paused = true)]
    async fn expectations_of_another_uid_are_as_good_as_none() {
        let e = Expectations::new();
        e.expect_deletions("ns/rs", "old", ["ns/a".to_owned()]);
        e.expect_creations("ns/rs", "old", 3);
        assert_eq!(e.deletion_keys("ns/rs").map(|k| k.len()), Some(1), "kept");
        e.creation_observed("ns/rs", "new");
        assert_eq!(
            e.get("ns/rs").map(|c| c.add),
            Some(3),
            "lowered by another UID"
        );
        assert!(!e.satisfied("ns/rs", "old"));
        assert!(
            e.satisfied("ns/rs", "new"),
            "the old UID's expectations hold the new"
        );
        assert!(
            e.get("ns/rs").is_none(),
            "the old UID's expectations are dropped"
        );

        e.expect_deletions("ns/rs", "old", ["ns/a".to_owned()]);
        e.expect_creations("ns/rs", "new", 1);
        assert_eq!(e.owner("ns/rs").as_deref(), Some("new"));
        assert_eq!(
            e.deletion_keys("ns/rs"),
            Some(HashSet::new()),
            "the old deletions"
        );
        e.delete_of("ns/rs", "old");
        assert!(e.get("ns/rs").is_some(), "deleted for another UID");
        e.delete_of("ns/rs", "new");
        assert!(e.get("ns/rs").is_none());
    }
}

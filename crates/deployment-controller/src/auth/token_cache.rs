//! Cached answers of the reviews.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use super::UserInfo;

/// At most this many answers are cached per cache; past it, answers are not cached until
/// entries expire (so a flood of distinct tokens cannot grow the process).
const CACHE_CAPACITY: usize = 4096;

/// Answers kept for a while, keyed by string.
pub(super) struct TtlCache<V> {
    entries: Mutex<HashMap<String, (V, Instant)>>,
}

impl<V: Clone> TtlCache<V> {
    pub(super) fn new() -> Self {
        Self {
            entries: Mutex::new(HashMap::new()),
        }
    }

    pub(super) fn get(&self, key: &str) -> Option<V> {
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        match entries.get(key) {
            Some((value, expires)) if *expires > Instant::now() => Some(value.clone()),
            Some(_) => {
                entries.remove(key);
                None
            }
            None => None,
        }
    }

    pub(super) fn put(&self, key: String, value: V, ttl: Duration) {
        if ttl.is_zero() {
            return;
        }
        let now = Instant::now();
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        if entries.len() >= CACHE_CAPACITY {
            entries.retain(|_, (_, expires)| *expires > now);
            if entries.len() >= CACHE_CAPACITY {
                return;
            }
        }
        entries.insert(key, (value, now + ttl));
    }
}

/// A cached TokenReview answer: the user, or "not authenticated" (without an error).
#[derive(Clone)]
pub(super) enum TokenOutcome {
    User(UserInfo),
    NotAuthenticated,
}

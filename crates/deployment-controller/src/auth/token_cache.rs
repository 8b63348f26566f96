//! Cached answers of the reviews, as upstream's cached token authenticator keeps them.
//!
//! - Entries are keyed by an HMAC-SHA-256 of what was reviewed, under a key drawn at random
//!   when the process starts: 32 bytes per entry whatever the token's size, and no token
//!   (nor anything a token could be recovered from without the key) is kept in memory.
//! - A bearer token longer than [`MAX_TOKEN_BYTES`] is never reviewed (the gate refuses it
//!   first), so a flood of junk headers costs neither memory nor TokenReviews.
//! - Requests that present one token while its review is under way wait for that review
//!   instead of each creating their own ([`TokenCache::review`], a single flight).

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ring::hmac;
use tokio::sync::OnceCell;
use tokio::time::Instant;

use super::{AuthError, UserInfo};

/// The longest bearer token the gate sends to a TokenReview. ServiceAccount tokens and the
/// OIDC tokens of common identity providers are a few KiB; a longer token is refused
/// (401) without a review.
pub(crate) const MAX_TOKEN_BYTES: usize = 16 * 1024;

/// At most this many answers are cached per cache; past it, answers are not cached until
/// entries expire (so a flood of distinct tokens cannot grow the process).
pub(super) const CACHE_CAPACITY: usize = 4096;

/// The key of a cached answer: a keyed hash of what was reviewed.
pub(super) type CacheKey = [u8; 32];

/// Hashes what the caches are keyed by, under a random per-process key.
pub(super) struct KeyHasher {
    key: hmac::Key,
}

impl KeyHasher {
    /// A hasher with a fresh random key.
    pub(super) fn new() -> Self {
        let rng = ring::rand::SystemRandom::new();
        let key = hmac::Key::generate(hmac::HMAC_SHA256, &rng).unwrap_or_else(|_| {
            // The system's random source failed (it does not on supported systems): a key
            // from the process's non-cryptographic generator still keeps the entries small
            // and distinct.
            tracing::warn!("the system random source failed; the token cache key is weaker");
            let bytes: Vec<u8> = (0..32).map(|_| fastrand::u8(..)).collect();
            hmac::Key::new(hmac::HMAC_SHA256, &bytes)
        });
        Self { key }
    }

    /// The key of `parts` (each length-prefixed, so no two sequences of parts collide by
    /// concatenation).
    pub(super) fn key(&self, parts: &[&[u8]]) -> CacheKey {
        let mut context = hmac::Context::with_key(&self.key);
        for part in parts {
            context.update(&(part.len() as u64).to_be_bytes());
            context.update(part);
        }
        let mut key = [0u8; 32];
        key.copy_from_slice(context.sign().as_ref());
        key
    }
}

/// Answers kept for a while, keyed by [`CacheKey`].
pub(super) struct TtlCache<V> {
    entries: Mutex<HashMap<CacheKey, (V, Instant)>>,
}

impl<V: Clone> TtlCache<V> {
    pub(super) fn new() -> Self {
        Self {
            entries: Mutex::new(HashMap::new()),
        }
    }

    pub(super) fn get(&self, key: &CacheKey) -> Option<V> {
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

    pub(super) fn put(&self, key: CacheKey, value: V, ttl: Duration) {
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

    /// How many answers are held (expired ones included until they are looked at).
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.entries.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
}

/// A TokenReview's answer: the user, or "not authenticated" (without an error).
#[derive(Clone, Debug)]
pub(super) enum TokenOutcome {
    User(UserInfo),
    NotAuthenticated,
}

/// What every request waiting on one review receives.
type Shared = Result<TokenOutcome, Arc<AuthError>>;

/// The reviews under way, by token key.
type InFlight = Mutex<HashMap<CacheKey, Arc<OnceCell<Shared>>>>;

/// TokenReview answers, cached for `ttl` (both authenticated and not, as upstream's
/// delegated authenticator; a review that failed is not cached), and shared by the requests
/// that wait on one review.
pub(super) struct TokenCache {
    hasher: KeyHasher,
    answers: TtlCache<TokenOutcome>,
    in_flight: InFlight,
    ttl: Duration,
}

impl TokenCache {
    /// A cache keeping answers for `ttl` (zero: not at all; reviews are still shared).
    pub(super) fn new(ttl: Duration) -> Self {
        Self {
            hasher: KeyHasher::new(),
            answers: TtlCache::new(),
            in_flight: Mutex::new(HashMap::new()),
            ttl,
        }
    }

    /// The key of `token`.
    pub(super) fn key(&self, token: &str) -> CacheKey {
        self.hasher.key(&[token.as_bytes()])
    }

    /// The cached answer for `key`, if any.
    pub(super) fn cached(&self, key: &CacheKey) -> Option<TokenOutcome> {
        self.answers.get(key)
    }

    /// The answer for `key`: the review under way for it if there is one, else `review`
    /// (whose answer is cached, unless it failed). If the request running the review goes
    /// away, one of those waiting runs its own.
    pub(super) async fn review<F, Fut>(
        &self,
        key: CacheKey,
        review: F,
    ) -> Result<TokenOutcome, AuthError>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<TokenOutcome, AuthError>>,
    {
        let flight = {
            let mut in_flight = self.in_flight.lock().unwrap_or_else(|p| p.into_inner());
            Flight {
                in_flight: &self.in_flight,
                key,
                cell: in_flight.entry(key).or_default().clone(),
            }
        };
        let shared = flight
            .cell
            .get_or_init(|| async {
                // An answer cached by a review that ended while this one was being set up.
                if let Some(outcome) = self.answers.get(&key) {
                    return Ok(outcome);
                }
                let outcome = review().await.map_err(Arc::new)?;
                self.answers.put(key, outcome.clone(), self.ttl);
                Ok(outcome)
            })
            .await;
        // Once answered, later requests go to the cache (or, after a failure, review anew).
        {
            let mut in_flight = self.in_flight.lock().unwrap_or_else(|p| p.into_inner());
            if in_flight
                .get(&key)
                .is_some_and(|c| Arc::ptr_eq(c, &flight.cell))
            {
                in_flight.remove(&key);
            }
        }
        shared.clone().map_err(AuthError::Shared)
    }

    /// The number of cached answers.
    #[cfg(test)]
    pub(super) fn cached_answers(&self) -> usize {
        self.answers.len()
    }

    /// The number of reviews under way.
    #[cfg(test)]
    pub(super) fn reviews_in_flight(&self) -> usize {
        self.in_flight
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .len()
    }
}

/// One request's place in a review under way. When the last request waiting on a review
/// goes away without an answer (its connection closed), the review's entry is taken out of
/// the in-flight map, so abandoned reviews do not pile up.
struct Flight<'a> {
    in_flight: &'a InFlight,
    key: CacheKey,
    cell: Arc<OnceCell<Shared>>,
}

impl Drop for Flight<'_> {
    fn drop(&mut self) {
        let mut in_flight = self.in_flight.lock().unwrap_or_else(|p| p.into_inner());
        // Held by the map and by this request only: nobody else waits on it.
        if let Some(cell) = in_flight.get(&self.key)
            && Arc::ptr_eq(cell, &self.cell)
            && Arc::strong_count(cell) == 2
        {
            in_flight.remove(&self.key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(name: &str) -> TokenOutcome {
        TokenOutcome::User(UserInfo {
            name: name.to_owned(),
            uid: String::new(),
            groups: Vec::new(),
            extra: Default::default(),
        })
    }

    #[test]
    fn keys_are_keyed_hashes_of_length_prefixed_parts() {
        let hasher = KeyHasher::new();
        let token = "t".repeat(MAX_TOKEN_BYTES);
        let key = hasher.key(&[token.as_bytes()]);
        assert_eq!(key, hasher.key(&[token.as_bytes()]));
        assert_ne!(key, hasher.key(&[b"t"]));
        assert_ne!(hasher.key(&[b"ab", b"c"]), hasher.key(&[b"a", b"bc"]));
        // Another process (another random key) hashes the same token differently.
        assert_ne!(key, KeyHasher::new().key(&[token.as_bytes()]));
    }

    // A request whose review is abandoned (its connection closed mid-review) leaves no
    // entry behind; a later request reviews the token again.
    #[tokio::test(start_paused = true)]
    async fn an_abandoned_review_leaves_nothing_behind() {
        let cache = TokenCache::new(Duration::from_secs(10));
        let key = cache.key("token");
        let abandoned = tokio::time::timeout(
            Duration::from_secs(1),
            cache.review(key, std::future::pending),
        )
        .await;
        assert!(abandoned.is_err());
        assert_eq!(cache.reviews_in_flight(), 0);
        let outcome = cache
            .review(key, || async { Ok(user("alice")) })
            .await
            .unwrap();
        assert!(matches!(outcome, TokenOutcome::User(u) if u.name == "alice"));
        assert_eq!(cache.reviews_in_flight(), 0);
        assert!(cache.cached(&key).is_some());
        assert_eq!(cache.cached_answers(), 1);
    }

    // A failed review is handed to every request that waited on it, and not cached.
    #[tokio::test(start_paused = true)]
    async fn a_failed_review_is_shared_and_not_cached() {
        let cache = Arc::new(TokenCache::new(Duration::from_secs(10)));
        let key = cache.key("token");
        let release = Arc::new(tokio::sync::Notify::new());
        let waiters: Vec<_> = (0..3)
            .map(|_| {
                let (cache, release) = (cache.clone(), release.clone());
                tokio::spawn(async move {
                    cache
                        .review(key, || async move {
                            release.notified().await;
                            Err(AuthError::InvalidToken)
                        })
                        .await
                })
            })
            .collect();
        tokio::time::sleep(Duration::from_secs(1)).await;
        release.notify_one();
        for waiter in waiters {
            let err = waiter.await.unwrap().unwrap_err();
            assert_eq!(err.to_string(), "invalid bearer token");
        }
        assert!(cache.cached(&key).is_none());
        assert_eq!(cache.reviews_in_flight(), 0);
    }
}

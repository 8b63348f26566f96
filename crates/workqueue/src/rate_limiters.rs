//! Rate limiters: how long an item should wait before it is retried.
//!
//! Each limiter is a small type implementing [`RateLimiter`]. Per-item limiters count failures
//! per item (until [`forget`](RateLimiter::forget)); the [`BucketRateLimiter`] limits all items
//! together; [`MaxOfRateLimiter`] and [`WithMaxWaitRateLimiter`] combine others.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use foldhash::fast::RandomState;
use tokio::time::Instant;

use crate::queue::Item;

/// Decides how long an item waits before it is added again.
///
/// Implementations use interior mutability; they are shared by every handle of a queue.
pub trait RateLimiter<T>: Send + Sync {
    /// Records one more failure of `item` and returns how long it should wait.
    fn when(&self, item: &T) -> Duration;
    /// Stops tracking `item` (it succeeded, or was given up on). The next `when` starts over.
    fn forget(&self, item: &T);
    /// How many failures of `item` are being tracked.
    fn num_requeues(&self, item: &T) -> usize;
}

impl<T, R: RateLimiter<T> + ?Sized> RateLimiter<T> for Box<R> {
    fn when(&self, item: &T) -> Duration {
        (**self).when(item)
    }
    fn forget(&self, item: &T) {
        (**self).forget(item);
    }
    fn num_requeues(&self, item: &T) -> usize {
        (**self).num_requeues(item)
    }
}

impl<T, R: RateLimiter<T> + ?Sized> RateLimiter<T> for Arc<R> {
    fn when(&self, item: &T) -> Duration {
        (**self).when(item)
    }
    fn forget(&self, item: &T) {
        (**self).forget(item);
    }
    fn num_requeues(&self, item: &T) -> usize {
        (**self).num_requeues(item)
    }
}

/// The rate limiter client-go's controllers use by default: the larger of a per-item exponential
/// backoff (5 ms doubling up to 1000 s) and an overall token bucket (10 per second, burst 100).
pub fn default_controller_rate_limiter<T: Item>() -> MaxOfRateLimiter<T> {
    MaxOfRateLimiter::new(vec![
        Box::new(ItemExponentialFailureRateLimiter::new(
            Duration::from_millis(5),
            Duration::from_secs(1000),
        )),
        Box::new(BucketRateLimiter::new(10.0, 100)),
    ])
}

/// A per-item exponential backoff from 1 ms up to 1000 s, with no overall limit.
pub fn default_item_based_rate_limiter<T: Item>() -> ItemExponentialFailureRateLimiter<T> {
    ItemExponentialFailureRateLimiter::new(Duration::from_millis(1), Duration::from_secs(1000))
}

/// Failure counts per item, shared by the per-item limiters.
struct Failures<T> {
    counts: Mutex<HashMap<T, usize, RandomState>>,
}

impl<T: Item> Failures<T> {
    fn new() -> Self {
        Self {
            counts: Mutex::new(HashMap::default()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<T, usize, RandomState>> {
        self.counts.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Increments the count of `item`, returning the count before.
    fn record(&self, item: &T) -> usize {
        let mut counts = self.lock();
        if let Some(count) = counts.get_mut(item) {
            let before = *count;
            *count = before.saturating_add(1);
            before
        } else {
            counts.insert(item.clone(), 1);
            0
        }
    }

    fn get(&self, item: &T) -> usize {
        self.lock().get(item).copied().unwrap_or(0)
    }

    fn forget(&self, item: &T) {
        self.lock().remove(item);
    }
}

/// Waits `base · 2^failures` for an item, capped at `max`: the n-th consecutive call for an item
/// returns `base · 2^(n-1)`.
pub struct ItemExponentialFailureRateLimiter<T> {
    failures: Failures<T>,
    base: Duration,
    max: Duration,
}

impl<T: Item> ItemExponentialFailureRateLimiter<T> {
    /// Backoff starting at `base` and doubling up to `max`.
    pub fn new(base: Duration, max: Duration) -> Self {
        Self {
            failures: Failures::new(),
            base,
            max,
        }
    }
}

/// `base · 2^exponent`, or `max` if that is larger or does not fit.
fn exponential_backoff(base: Duration, exponent: usize, max: Duration) -> Duration {
    let factor = u32::try_from(exponent)
        .ok()
        .and_then(|exponent| 1u128.checked_shl(exponent));
    let nanos = factor.and_then(|factor| base.as_nanos().checked_mul(factor));
    match nanos {
        Some(nanos) if nanos < max.as_nanos() => {
            // Below `max`, so it fits a Duration.
            let secs = (nanos / 1_000_000_000) as u64;
            let subsec = (nanos % 1_000_000_000) as u32;
            Duration::new(secs, subsec)
        }
        _ => max,
    }
}

impl<T: Item> RateLimiter<T> for ItemExponentialFailureRateLimiter<T> {
    fn when(&self, item: &T) -> Duration {
        let exponent = self.failures.record(item);
        exponential_backoff(self.base, exponent, self.max)
    }
    fn forget(&self, item: &T) {
        self.failures.forget(item);
    }
    fn num_requeues(&self, item: &T) -> usize {
        self.failures.get(item)
    }
}

impl<T> fmt::Debug for ItemExponentialFailureRateLimiter<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ItemExponentialFailureRateLimiter")
            .field("base", &self.base)
            .field("max", &self.max)
            .finish_non_exhaustive()
    }
}

/// Waits `fast` for an item's first `max_fast_attempts` failures, then `slow`.
pub struct ItemFastSlowRateLimiter<T> {
    failures: Failures<T>,
    fast: Duration,
    slow: Duration,
    max_fast_attempts: usize,
}

impl<T: Item> ItemFastSlowRateLimiter<T> {
    /// `fast` for the first `max_fast_attempts` failures of an item, `slow` after that.
    pub fn new(fast: Duration, slow: Duration, max_fast_attempts: usize) -> Self {
        Self {
            failures: Failures::new(),
            fast,
            slow,
            max_fast_attempts,
        }
    }
}

impl<T: Item> RateLimiter<T> for ItemFastSlowRateLimiter<T> {
    fn when(&self, item: &T) -> Duration {
        let attempts = self.failures.record(item).saturating_add(1);
        if attempts <= self.max_fast_attempts {
            self.fast
        } else {
            self.slow
        }
    }
    fn forget(&self, item: &T) {
        self.failures.forget(item);
    }
    fn num_requeues(&self, item: &T) -> usize {
        self.failures.get(item)
    }
}

impl<T> fmt::Debug for ItemFastSlowRateLimiter<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ItemFastSlowRateLimiter")
            .field("fast", &self.fast)
            .field("slow", &self.slow)
            .field("max_fast_attempts", &self.max_fast_attempts)
            .finish_non_exhaustive()
    }
}

/// A token bucket over all items: `qps` tokens per second, holding at most `burst`, full at
/// the start.
///
/// Every [`when`](RateLimiter::when) takes a token, borrowing from the future when the bucket is
/// empty, and returns how long until that token exists. So a thousand calls at once get
/// increasing waits, and the bucket never lets more than `qps` items through per second on
/// average. Forget and requeue counts do not apply (always 0).
///
/// (This is a reservation, which `governor`'s limiters cannot express: they only answer "may I
/// go now?" without taking a token on "no". The arithmetic is the generic cell-rate algorithm:
/// one instant, the time at which the bucket would be full again.)
#[derive(Debug)]
pub struct BucketRateLimiter {
    /// Time for one token to be added; `None` when the rate is unlimited.
    interval: Option<Duration>,
    /// Time to fill the whole bucket (`burst · interval`).
    capacity: Duration,
    /// When the bucket will be full again, given the tokens taken so far.
    full_at: Mutex<Option<Instant>>,
}

impl BucketRateLimiter {
    /// A bucket of `burst` tokens refilled at `qps` per second. An infinite `qps` never waits;
    /// a `qps` of zero or less never refills (once the burst is spent, waits are practically
    /// forever).
    pub fn new(qps: f64, burst: u32) -> Self {
        let interval = if qps.is_infinite() && qps > 0.0 {
            None
        } else if qps > 0.0 {
            Some(Duration::try_from_secs_f64(1.0 / qps).unwrap_or(FOREVER))
        } else {
            Some(FOREVER)
        };
        let capacity = interval
            .map(|interval| interval.saturating_mul(burst))
            .unwrap_or_default();
        Self {
            interval,
            capacity,
            full_at: Mutex::new(None),
        }
    }
}

/// Stands in for "never" without overflowing clock arithmetic.
const FOREVER: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

impl<T> RateLimiter<T> for BucketRateLimiter {
    fn when(&self, _item: &T) -> Duration {
        let Some(interval) = self.interval else {
            return Duration::ZERO;
        };
        let now = Instant::now();
        let mut full_at = self.full_at.lock().unwrap_or_else(PoisonError::into_inner);
        // Taking one token pushes "full again" one interval further out.
        let start = full_at.map_or(now, |full_at| full_at.max(now));
        let new_full_at = start.checked_add(interval).unwrap_or(start);
        *full_at = Some(new_full_at);
        // The token exists once the bucket is at most `capacity` away from full.
        new_full_at
            .saturating_duration_since(now)
            .saturating_sub(self.capacity)
    }
    fn forget(&self, _item: &T) {}
    fn num_requeues(&self, _item: &T) -> usize {
        0
    }
}

/// Asks every limiter (each records the failure) and returns the longest wait.
pub struct MaxOfRateLimiter<T> {
    limiters: Vec<Box<dyn RateLimiter<T>>>,
}

impl<T: Item> MaxOfRateLimiter<T> {
    /// Combines `limiters`.
    pub fn new(limiters: Vec<Box<dyn RateLimiter<T>>>) -> Self {
        Self { limiters }
    }
}

impl<T: Item> RateLimiter<T> for MaxOfRateLimiter<T> {
    fn when(&self, item: &T) -> Duration {
        // Every limiter must see the failure, so no short-circuiting.
        self.limiters
            .iter()
            .map(|limiter| limiter.when(item))
            .fold(Duration::ZERO, Duration::max)
    }
    fn forget(&self, item: &T) {
        for limiter in &self.limiters {
            limiter.forget(item);
        }
    }
    fn num_requeues(&self, item: &T) -> usize {
        self.limiters
            .iter()
            .map(|limiter| limiter.num_requeues(item))
            .max()
            .unwrap_or(0)
    }
}

impl<T> fmt::Debug for MaxOfRateLimiter<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MaxOfRateLimiter")
            .field("limiters", &self.limiters.len())
            .finish()
    }
}

/// Caps another limiter's wait at `max_delay`.
#[derive(Debug)]
pub struct WithMaxWaitRateLimiter<L> {
    limiter: L,
    max_delay: Duration,
}

impl<L> WithMaxWaitRateLimiter<L> {
    /// Wraps `limiter`, never waiting longer than `max_delay`.
    pub fn new(limiter: L, max_delay: Duration) -> Self {
        Self { limiter, max_delay }
    }
}

impl<T, L: RateLimiter<T>> RateLimiter<T> for WithMaxWaitRateLimiter<L> {
    fn when(&self, item: &T) -> Duration {
        self.limiter.when(item).min(self.max_delay)
    }
    fn forget(&self, item: &T) {
        self.limiter.forget(item);
    }
    fn num_requeues(&self, item: &T) -> usize {
        self.limiter.num_requeues(item)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_is_exact_below_the_cap_and_capped_above() {
        let max = Duration::from_secs(1000);
        let base = Duration::from_millis(5);
        assert_eq!(exponential_backoff(base, 0, max), base);
        assert_eq!(exponential_backoff(base, 17, max), base * (1 << 17));
        assert_eq!(exponential_backoff(base, 18, max), max);
        assert_eq!(exponential_backoff(base, 200, max), max);
        assert_eq!(exponential_backoff(base, usize::MAX, max), max);
        // A 1 ns base still doubles exactly well past 2^32.
        assert_eq!(
            exponential_backoff(Duration::from_nanos(1), 40, Duration::MAX),
            Duration::from_nanos(1 << 40)
        );
    }
}

#[cfg(test)]
mod bucket_tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[tokio::test(start_paused = true)]
    async fn every_call_takes_a_token_even_when_it_must_wait() {
        let bucket = BucketRateLimiter::new(10.0, 100);
        for _ in 0..100 {
            assert_eq!(RateLimiter::<u8>::when(&bucket, &0), Duration::ZERO);
        }
        assert_eq!(RateLimiter::<u8>::when(&bucket, &0), 100 * MS);
        assert_eq!(RateLimiter::<u8>::when(&bucket, &0), 200 * MS);
        // A second later ten tokens are back, but two were already borrowed.
        tokio::time::advance(Duration::from_secs(1)).await;
        for _ in 0..8 {
            assert_eq!(RateLimiter::<u8>::when(&bucket, &0), Duration::ZERO);
        }
        assert_eq!(RateLimiter::<u8>::when(&bucket, &0), 100 * MS);
        assert_eq!(RateLimiter::<u8>::num_requeues(&bucket, &0), 0);
    }

    #[test]
    fn an_unlimited_bucket_never_waits() {
        let bucket = BucketRateLimiter::new(f64::INFINITY, 0);
        for _ in 0..1_000 {
            assert_eq!(RateLimiter::<u8>::when(&bucket, &0), Duration::ZERO);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_default_controller_limiter_is_per_item_backoff_and_an_overall_bucket() {
        let limiter = default_controller_rate_limiter::<u32>();
        assert_eq!(limiter.when(&1), 5 * MS);
        assert_eq!(limiter.when(&1), 10 * MS);
        assert_eq!(limiter.num_requeues(&1), 2);
        // 98 more distinct items use up the burst of 100 ...
        for item in 2..100 {
            assert_eq!(limiter.when(&item), 5 * MS);
        }
        // ... so the bucket (100 ms per token) now outweighs a first failure's 5 ms.
        assert_eq!(limiter.when(&1000), 100 * MS);
        limiter.forget(&1);
        assert_eq!(limiter.num_requeues(&1), 0);
    }

    #[test]
    fn the_default_backoff_caps_at_the_nineteenth_failure() {
        let limiter = ItemExponentialFailureRateLimiter::new(5 * MS, Duration::from_secs(1000));
        let waits: Vec<Duration> = (0..20).map(|_| limiter.when(&"x")).collect();
        assert_eq!(waits[17], 5 * MS * (1 << 17)); // 655.36 s
        assert_eq!(waits[18], Duration::from_secs(1000));
        assert_eq!(waits[19], Duration::from_secs(1000));

        let item_based = default_item_based_rate_limiter::<&str>();
        assert_eq!(item_based.when(&"y"), MS);
        assert_eq!(item_based.when(&"y"), 2 * MS);
    }
}

//! Port of `default_rate_limiters_test.go`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use kctrl_workqueue::{
    ItemExponentialFailureRateLimiter, ItemFastSlowRateLimiter, MaxOfRateLimiter, RateLimiter,
    WithMaxWaitRateLimiter,
};

const MS: Duration = Duration::from_millis(1);

#[test]
fn test_item_exponential_failure_rate_limiter() {
    let limiter = ItemExponentialFailureRateLimiter::new(MS, Duration::from_secs(1));

    for expected in [1, 2, 4, 8, 16] {
        assert_eq!(limiter.when(&"one"), expected * MS);
    }
    assert_eq!(limiter.num_requeues(&"one"), 5);

    assert_eq!(limiter.when(&"two"), MS);
    assert_eq!(limiter.when(&"two"), 2 * MS);
    assert_eq!(limiter.num_requeues(&"two"), 2);

    limiter.forget(&"one");
    assert_eq!(limiter.num_requeues(&"one"), 0);
    assert_eq!(limiter.when(&"one"), MS);
}

#[test]
fn test_item_exponential_failure_rate_limiter_over_flow() {
    let limiter = ItemExponentialFailureRateLimiter::new(MS, Duration::from_secs(1000));
    for _ in 0..5 {
        limiter.when(&"one");
    }
    assert_eq!(limiter.when(&"one"), 32 * MS);

    for _ in 0..1000 {
        limiter.when(&"overflow1");
    }
    assert_eq!(limiter.when(&"overflow1"), Duration::from_secs(1000));

    let minute = Duration::from_secs(60);
    let limiter = ItemExponentialFailureRateLimiter::new(minute, 1000 * 60 * minute);
    for _ in 0..2 {
        limiter.when(&"two");
    }
    assert_eq!(limiter.when(&"two"), 4 * minute);

    for _ in 0..1000 {
        limiter.when(&"overflow2");
    }
    assert_eq!(limiter.when(&"overflow2"), 1000 * 60 * minute);
}

#[test]
fn test_item_fast_slow_rate_limiter() {
    let limiter = ItemFastSlowRateLimiter::new(5 * MS, Duration::from_secs(10), 3);

    for expected in [
        5 * MS,
        5 * MS,
        5 * MS,
        Duration::from_secs(10),
        Duration::from_secs(10),
    ] {
        assert_eq!(limiter.when(&"one"), expected);
    }
    assert_eq!(limiter.num_requeues(&"one"), 5);

    assert_eq!(limiter.when(&"two"), 5 * MS);
    assert_eq!(limiter.when(&"two"), 5 * MS);
    assert_eq!(limiter.num_requeues(&"two"), 2);

    limiter.forget(&"one");
    assert_eq!(limiter.num_requeues(&"one"), 0);
    assert_eq!(limiter.when(&"one"), 5 * MS);
}

#[test]
fn test_max_of_rate_limiter() {
    let limiter = MaxOfRateLimiter::new(vec![
        Box::new(ItemFastSlowRateLimiter::new(
            5 * MS,
            Duration::from_secs(3),
            3,
        )),
        Box::new(ItemExponentialFailureRateLimiter::new(
            MS,
            Duration::from_secs(1),
        )),
    ]);

    for expected in [
        5 * MS,
        5 * MS,
        5 * MS,
        Duration::from_secs(3),
        Duration::from_secs(3),
    ] {
        assert_eq!(limiter.when(&"one"), expected);
    }
    assert_eq!(limiter.num_requeues(&"one"), 5);

    assert_eq!(limiter.when(&"two"), 5 * MS);
    assert_eq!(limiter.when(&"two"), 5 * MS);
    assert_eq!(limiter.num_requeues(&"two"), 2);

    limiter.forget(&"one");
    assert_eq!(limiter.num_requeues(&"one"), 0);
    assert_eq!(limiter.when(&"one"), 5 * MS);
}

/// Returns `base` for the first `threshold` calls (any item), then `max`.
struct StepRateLimiter {
    count: AtomicUsize,
    threshold: usize,
    base: Duration,
    max: Duration,
}

impl RateLimiter<usize> for StepRateLimiter {
    fn when(&self, _item: &usize) -> Duration {
        let count = self.count.fetch_add(1, Ordering::Relaxed) + 1;
        if count <= self.threshold {
            self.base
        } else {
            self.max
        }
    }
    fn forget(&self, _item: &usize) {}
    fn num_requeues(&self, _item: &usize) -> usize {
        0
    }
}

#[test]
fn test_with_max_wait_rate_limiter() {
    let step = StepRateLimiter {
        count: AtomicUsize::new(0),
        threshold: 100,
        base: 5 * MS,
        max: Duration::from_secs(1000),
    };
    let limiter = WithMaxWaitRateLimiter::new(step, Duration::from_secs(500));
    for i in 0..100 {
        assert_eq!(limiter.when(&i), 5 * MS);
    }
    for i in 100..200 {
        assert_eq!(limiter.when(&i), Duration::from_secs(500));
    }
}

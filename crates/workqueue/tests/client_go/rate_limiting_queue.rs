//! Port of `rate_limiting_queue_test.go`. Upstream reads each entry's ready time off the
//! delaying queue's channel; here the paused clock shows when each entry becomes ready: not a
//! microsecond before `now + expected`, and at that instant.

use std::time::Duration;

use kctrl_workqueue::{ItemExponentialFailureRateLimiter, RateLimitingQueue};
use tokio::time::advance;

use crate::{eventually, settle};

const MS: Duration = Duration::from_millis(1);
const US: Duration = Duration::from_micros(1);

/// Asserts that `item`, just rate-limited, becomes ready exactly `expected` from now.
async fn assert_ready_after(
    queue: &RateLimitingQueue<&'static str>,
    item: &str,
    expected: Duration,
) {
    advance(expected - US).await;
    settle().await;
    assert_eq!(queue.len(), 0, "{item} ready before {expected:?}");
    advance(US).await;
    eventually("the item is ready", || queue.len() == 1).await;
    let got = queue.get().await.unwrap();
    assert_eq!(got, item);
    queue.done(&got);
}

#[tokio::test(start_paused = true)]
async fn test_rate_limiting_queue() {
    let limiter = ItemExponentialFailureRateLimiter::new(MS, Duration::from_secs(1));
    let queue = RateLimitingQueue::new(limiter);

    queue.add_rate_limited("one");
    assert_ready_after(&queue, "one", MS).await;
    queue.add_rate_limited("one");
    assert_ready_after(&queue, "one", 2 * MS).await;
    assert_eq!(queue.num_requeues(&"one"), 2);

    queue.add_rate_limited("two");
    assert_ready_after(&queue, "two", MS).await;
    queue.add_rate_limited("two");
    assert_ready_after(&queue, "two", 2 * MS).await;

    queue.forget(&"one");
    assert_eq!(queue.num_requeues(&"one"), 0);
    queue.add_rate_limited("one");
    assert_ready_after(&queue, "one", MS).await;
}

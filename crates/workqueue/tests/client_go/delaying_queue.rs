//! Port of `delaying_queue_test.go`, on Tokio's paused clock instead of a fake clock.

use std::time::Duration;

use kctrl_workqueue::DelayingQueue;
use tokio::time::advance;

use crate::{eventually, settle};

const MS: Duration = Duration::from_millis(1);

#[tokio::test(start_paused = true)]
async fn test_simple_queue() {
    let queue = DelayingQueue::new();
    queue.add_after("foo", 50 * MS);
    settle().await;
    assert_eq!(queue.len(), 0, "should not have added");

    advance(60 * MS).await;
    eventually("foo is added", || queue.len() == 1).await;
    let item = queue.get().await.unwrap();
    queue.done(&item);

    // Step past the next heartbeat: nothing spurious shows up.
    advance(Duration::from_secs(10)).await;
    settle().await;
    assert_eq!(queue.len(), 0, "should not have added");
}

#[tokio::test(start_paused = true)]
async fn test_deduping() {
    let queue = DelayingQueue::new();

    queue.add_after("foo", 50 * MS);
    queue.add_after("foo", 70 * MS);
    settle().await;
    assert_eq!(queue.len(), 0, "should not have added");

    // Past the first deadline: added once.
    advance(60 * MS).await;
    eventually("foo is added", || queue.len() == 1).await;
    let item = queue.get().await.unwrap();
    queue.done(&item);

    // Past the second (ignored) deadline: nothing more.
    advance(20 * MS).await;
    settle().await;
    assert_eq!(queue.len(), 0, "should not have added");

    // Again, but this time the later call is the earlier deadline and wins.
    queue.add_after("foo", 50 * MS);
    queue.add_after("foo", 30 * MS);
    settle().await;
    assert_eq!(queue.len(), 0, "should not have added");

    advance(40 * MS).await;
    eventually("foo is added", || queue.len() == 1).await;
    let item = queue.get().await.unwrap();
    queue.done(&item);

    advance(20 * MS).await;
    settle().await;
    assert_eq!(queue.len(), 0, "should not have added");
}

#[tokio::test(start_paused = true)]
async fn test_add_two_fire_early() {
    let queue = DelayingQueue::new();
    queue.add_after("foo", Duration::from_secs(1));
    queue.add_after("bar", 50 * MS);
    settle().await;
    assert_eq!(queue.len(), 0, "should not have added");

    advance(60 * MS).await;
    eventually("bar is added", || queue.len() == 1).await;
    assert_eq!(queue.get().await, Some("bar"));

    queue.add_after("baz", Duration::from_secs(2));

    advance(Duration::from_secs(1)).await;
    eventually("foo is added", || queue.len() == 1).await;
    assert_eq!(queue.get().await, Some("foo"));

    advance(Duration::from_secs(2)).await;
    eventually("baz is added", || queue.len() == 1).await;
    assert_eq!(queue.get().await, Some("baz"));
}

#[tokio::test(start_paused = true)]
async fn test_copy_shifting() {
    let queue = DelayingQueue::new();
    queue.add_after("foo", Duration::from_secs(1));
    queue.add_after("bar", 500 * MS);
    queue.add_after("baz", 250 * MS);
    settle().await;
    assert_eq!(queue.len(), 0, "should not have added");

    advance(Duration::from_secs(2)).await;
    eventually("all three are added", || queue.len() == 3).await;
    assert_eq!(queue.get().await, Some("baz"));
    assert_eq!(queue.get().await, Some("bar"));
    assert_eq!(queue.get().await, Some("foo"));
}

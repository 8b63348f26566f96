//! Port of `queue_test.go`.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kctrl_workqueue::{Fifo, Queue, QueueConfig, QueueOrder};

use crate::settle;

/// A FIFO that records which items were touched.
struct TraceOrder {
    fifo: Fifo<&'static str>,
    touched: Arc<Mutex<HashSet<&'static str>>>,
}

impl QueueOrder<&'static str> for TraceOrder {
    fn touch(&mut self, item: &&'static str) {
        self.fifo.touch(item);
        self.touched.lock().unwrap().insert(item);
    }
    fn push(&mut self, item: &'static str) {
        self.fifo.push(item);
    }
    fn len(&self) -> usize {
        self.fifo.len()
    }
    fn pop(&mut self) -> Option<&'static str> {
        self.fifo.pop()
    }
}

fn traced_queue() -> (Queue<&'static str>, Arc<Mutex<HashSet<&'static str>>>) {
    let touched = Arc::new(Mutex::new(HashSet::new()));
    let order = TraceOrder {
        fifo: Fifo::default(),
        touched: Arc::clone(&touched),
    };
    (Queue::with_config(QueueConfig::new().order(order)), touched)
}

const AFTER_SHUTDOWN: &str = "added after shutdown!";

#[derive(Clone, Copy, Debug)]
enum ShutDown {
    Immediately,
    WithDrain,
}

async fn shut_down(queue: &Queue<String>, how: ShutDown) {
    match how {
        ShutDown::Immediately => queue.shut_down(),
        ShutDown::WithDrain => queue.shut_down_with_drain().await,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn test_basic() {
    for how in [ShutDown::Immediately, ShutDown::WithDrain] {
        let queue = Queue::<String>::new();
        let producers: Vec<_> = (0..50)
            .map(|i| {
                let queue = queue.clone();
                tokio::spawn(async move {
                    for _ in 0..50 {
                        queue.add(i.to_string());
                        tokio::time::sleep(Duration::from_millis(1)).await;
                    }
                })
            })
            .collect();
        let consumers: Vec<_> = (0..10)
            .map(|_| {
                let queue = queue.clone();
                tokio::spawn(async move {
                    while let Some(item) = queue.get().await {
                        assert_ne!(item, AFTER_SHUTDOWN, "got an item added after shutdown");
                        tokio::time::sleep(Duration::from_millis(3)).await;
                        queue.done(&item);
                    }
                })
            })
            .collect();
        for producer in producers {
            producer.await.unwrap();
        }
        shut_down(&queue, how).await;
        queue.add(AFTER_SHUTDOWN.to_string());
        for consumer in consumers {
            consumer.await.unwrap();
        }
        assert_eq!(queue.len(), 0, "{how:?}: queue should be empty");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn test_add_while_processing() {
    for how in [ShutDown::Immediately, ShutDown::WithDrain] {
        let queue = Queue::<String>::new();
        let producers: Vec<_> = (0..50)
            .map(|i| {
                let queue = queue.clone();
                tokio::spawn(async move { queue.add(i.to_string()) })
            })
            .collect();
        let consumers: Vec<_> = (0..10)
            .map(|_| {
                let queue = queue.clone();
                tokio::spawn(async move {
                    // Each worker re-adds each item it sees the first time, while processing it.
                    let mut counters = std::collections::HashMap::<String, u32>::new();
                    while let Some(item) = queue.get().await {
                        let count = counters.entry(item.clone()).or_default();
                        *count += 1;
                        if *count < 2 {
                            queue.add(item.clone());
                        }
                        queue.done(&item);
                    }
                })
            })
            .collect();
        for producer in producers {
            producer.await.unwrap();
        }
        shut_down(&queue, how).await;
        for consumer in consumers {
            consumer.await.unwrap();
        }
        assert_eq!(queue.len(), 0, "{how:?}: queue should be empty");
    }
}

#[test]
fn test_len() {
    let queue = Queue::new();
    queue.add("foo");
    assert_eq!(queue.len(), 1);
    queue.add("bar");
    assert_eq!(queue.len(), 2);
    queue.add("foo"); // must not grow the queue
    assert_eq!(queue.len(), 2);
}

#[tokio::test]
async fn test_reinsert() {
    let queue = Queue::new();
    queue.add("foo");

    let item = queue.get().await.unwrap();
    assert_eq!(item, "foo");
    // Add it back while processing, then finish.
    queue.add(item);
    queue.done(&item);

    // It is back on the queue.
    let item = queue.get().await.unwrap();
    assert_eq!(item, "foo");
    queue.done(&item);
    assert_eq!(queue.len(), 0);
}

#[tokio::test]
async fn test_collapse() {
    let (queue, touched) = traced_queue();
    queue.add("bar");
    queue.add("bar");

    let item = queue.get().await.unwrap();
    assert_eq!(item, "bar");
    queue.done(&item);

    assert_eq!(queue.len(), 0);
    assert!(
        touched.lock().unwrap().contains("bar"),
        "bar should be touched"
    );
}

#[tokio::test(start_paused = true)]
async fn test_collapse_while_processing() {
    let (queue, touched) = traced_queue();
    queue.add("foo");

    let item = queue.get().await.unwrap();
    assert_eq!(item, "foo");

    // Add the same item twice while it is processing.
    queue.add("foo");
    queue.add("foo");

    // Another worker must not get it before the first one is done.
    let worker = tokio::spawn({
        let queue = queue.clone();
        async move {
            let item = queue.get().await.unwrap();
            assert_eq!(item, "foo");
            queue.done(&item);
        }
    });
    settle().await;
    assert!(
        !worker.is_finished(),
        "worker should be blocked until we are done"
    );
    queue.done(&"foo");

    worker.await.unwrap();
    assert_eq!(queue.len(), 0);
    assert!(
        !touched.lock().unwrap().contains("foo"),
        "an item being processed must not be touched"
    );
}

#[tokio::test(start_paused = true)]
async fn test_queue_drainage_using_shut_down_with_drain() {
    let queue = Queue::new();
    queue.add("foo");
    queue.add("bar");
    let first = queue.get().await.unwrap();
    let second = queue.get().await.unwrap();

    let drain = tokio::spawn({
        let queue = queue.clone();
        async move { queue.shut_down_with_drain().await }
    });
    // Get returns the shutdown signal once the drain has started.
    assert_eq!(queue.get().await, None);
    settle().await;
    assert!(
        !drain.is_finished(),
        "drain must wait for items in progress"
    );

    queue.done(&first);
    settle().await;
    assert!(
        !drain.is_finished(),
        "drain must wait for the second item too"
    );
    queue.done(&second);
    drain.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn test_no_queue_drainage_using_shut_down() {
    let queue = Queue::new();
    queue.add("foo");
    queue.add("bar");
    let _first = queue.get().await.unwrap();
    let _second = queue.get().await.unwrap();

    // Returns at once although neither item is done.
    queue.shut_down();
    assert!(queue.shutting_down());
    assert_eq!(queue.get().await, None);
}

#[tokio::test(start_paused = true)]
async fn test_force_queue_shutdown_using_shut_down() {
    let queue = Queue::new();
    queue.add("foo");
    queue.add("bar");
    let _first = queue.get().await.unwrap();
    let _second = queue.get().await.unwrap();

    let drain = tokio::spawn({
        let queue = queue.clone();
        async move { queue.shut_down_with_drain().await }
    });
    assert_eq!(queue.get().await, None);
    settle().await;
    assert!(!drain.is_finished());

    // A second signal forces the shutdown without any item being done.
    queue.shut_down();
    tokio::time::timeout(Duration::from_secs(10), drain)
        .await
        .expect("shut_down must release shut_down_with_drain")
        .unwrap();
}

#[tokio::test(start_paused = true)]
async fn test_queue_drainage_using_shut_down_with_drain_with_dirty_item() {
    let queue = Queue::new();
    queue.add("foo");
    let gotten = queue.get().await.unwrap();
    queue.add("foo");

    let drain = tokio::spawn({
        let queue = queue.clone();
        async move { queue.shut_down_with_drain().await }
    });
    // The drain has started: nothing is queued ("foo" is dirty but processing).
    assert_eq!(queue.get().await, None);

    // Finishing puts the dirty item back, and it is handed out despite the shutdown.
    queue.done(&gotten);
    let again = queue.get().await;
    assert_eq!(again, Some("foo"), "should not have been shut down yet");
    settle().await;
    assert!(
        !drain.is_finished(),
        "the re-queued item is being processed"
    );
    queue.done(&"foo");

    assert_eq!(queue.get().await, None, "should be shut down now");
    drain.await.unwrap();
}

#[tokio::test]
async fn test_garbage_collection() {
    let object = Arc::new(String::from("hello"));
    let weak = Arc::downgrade(&object);
    let queue = Queue::new();

    queue.add(Arc::clone(&object));
    assert!(
        Arc::strong_count(&object) > 1,
        "the queue holds the item while queued"
    );
    let item = queue.get().await.unwrap();
    queue.done(&item);
    drop(item);
    drop(object);

    assert!(
        weak.upgrade().is_none(),
        "the queue kept a reference to an item it no longer needs"
    );
    drop(queue);
}

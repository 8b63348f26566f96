//! A queue that can add an item later: a min-heap of `(ready time, item)` and a waiting loop
//! that moves items into the [`Queue`] when their time comes.
//!
//! `add_after` pushes straight into the heap under a short lock (client-go hands entries to its
//! loop through a 1000-slot channel instead) and wakes the loop only when the new entry is the
//! earliest. The loop is a Tokio task: it sleeps with `tokio::time` until the earliest ready time
//! (so tests can drive it with Tokio's paused clock), helped by an [`Alarm`] for sub-millisecond
//! precision, and never longer than [`MAX_WAIT`].

use std::collections::hash_map::Entry as MapEntry;
use std::collections::{BinaryHeap, HashMap};
use std::fmt;
use std::ops::Deref;
use std::pin::pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use foldhash::fast::RandomState;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::alarm::Alarm;
use crate::metrics::RetriesMetric;
use crate::queue::{Item, Queue, QueueConfig};

/// Longest the waiting loop sleeps without looking at the heap, as insurance.
pub const MAX_WAIT: Duration = Duration::from_secs(10);

/// A [`Queue`] that can also add items after a delay. Cloning is cheap; clones share the queue.
///
/// It dereferences to its [`Queue`], so every queue method (`add`, `get`, `done`, `len`,
/// `shut_down`, ...) is called on it directly; this type adds [`add_after`](Self::add_after).
/// Items waiting for their delay are not in the queue yet: [`len`](Queue::len) does not count
/// them, and shutting down drops them and stops the waiting loop.
///
/// ```
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// use std::time::Duration;
/// use kctrl_workqueue::DelayingQueue;
///
/// let queue = DelayingQueue::new();
/// queue.add_after("default/web", Duration::from_secs(5));
/// assert_eq!(queue.len(), 0);
/// // With a paused clock, Tokio jumps to the next timer while we wait.
/// assert_eq!(queue.get().await, Some("default/web"));
/// # }
/// ```
pub struct DelayingQueue<T> {
    queue: Queue<T>,
    delay: Arc<Delay<T>>,
}

impl<T> Clone for DelayingQueue<T> {
    fn clone(&self) -> Self {
        Self {
            queue: self.queue.clone(),
            delay: Arc::clone(&self.delay),
        }
    }
}

impl<T> fmt::Debug for DelayingQueue<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DelayingQueue")
            .field("queue", &self.queue)
            .field("waiting", &self.delay.lock().by_item.len())
            .finish()
    }
}

/// State shared by the handles; the waiting loop holds it weakly so that dropping the last
/// handle stops the loop.
struct Delay<T> {
    waiting: Mutex<Waiting<T>>,
    /// Wakes the waiting loop: a new earliest entry, or the last handle going away.
    wake_loop: Arc<Notify>,
    retries: RetriesMetric,
}

impl<T> Drop for Delay<T> {
    fn drop(&mut self) {
        self.wake_loop.notify_one();
    }
}

impl<T> Delay<T> {
    fn lock(&self) -> MutexGuard<'_, Waiting<T>> {
        self.waiting.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Items waiting for their ready time.
struct Waiting<T> {
    /// Earliest first. An entry is stale when `by_item` no longer holds its id (the item was
    /// moved earlier, or already added); stale entries are skipped and occasionally purged.
    heap: BinaryHeap<Waiter<T>>,
    /// Each waiting item's ready time and the id of its live heap entry.
    by_item: HashMap<T, (Instant, u64), RandomState>,
    next_id: u64,
}

struct Waiter<T> {
    ready_at: Instant,
    id: u64,
    item: T,
}

impl<T> PartialEq for Waiter<T> {
    fn eq(&self, other: &Self) -> bool {
        self.id == other.id
    }
}
impl<T> Eq for Waiter<T> {}
impl<T> PartialOrd for Waiter<T> {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl<T> Ord for Waiter<T> {
    /// Reversed, so that `BinaryHeap` (a max-heap) pops the earliest ready time first, and among
    /// equal times the entry added first.
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (other.ready_at, other.id).cmp(&(self.ready_at, self.id))
    }
}

impl<T: Item> Waiting<T> {
    fn new() -> Self {
        Self {
            heap: BinaryHeap::new(),
            by_item: HashMap::default(),
            next_id: 0,
        }
    }

    /// Schedules `item` at `ready_at`. An item already waiting keeps the earlier of its two
    /// ready times. Returns whether the schedule's earliest time changed.
    fn insert(&mut self, item: T, ready_at: Instant) -> bool {
        let id = self.next_id;
        let item = match self.by_item.entry(item) {
            MapEntry::Occupied(mut entry) => {
                if entry.get().0 <= ready_at {
                    return false;
                }
                entry.insert((ready_at, id));
                entry.key().clone()
            }
            MapEntry::Vacant(entry) => {
                let item = entry.key().clone();
                entry.insert((ready_at, id));
                item
            }
        };
        self.next_id += 1;
        let earliest = self.heap.peek().is_none_or(|head| ready_at < head.ready_at);
        self.heap.push(Waiter { ready_at, id, item });
        if self.heap.len() > 64 && self.heap.len() > 2 * self.by_item.len() {
            let by_item = &self.by_item;
            self.heap.retain(|waiter| {
                by_item
                    .get(&waiter.item)
                    .is_some_and(|&(_, id)| id == waiter.id)
            });
        }
        earliest
    }

    /// Moves every item whose time has come into `due`; returns the next ready time.
    fn pop_ready(&mut self, now: Instant, due: &mut Vec<T>) -> Option<Instant> {
        while let Some(head) = self.heap.peek() {
            let live = self
                .by_item
                .get(&head.item)
                .is_some_and(|&(_, id)| id == head.id);
            if live && head.ready_at > now {
                return Some(head.ready_at);
            }
            let Some(waiter) = self.heap.pop() else { break };
            if live {
                self.by_item.remove(&waiter.item);
                due.push(waiter.item);
            }
        }
        None
    }
}

impl<T: Item> Default for DelayingQueue<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: Item> DelayingQueue<T> {
    /// An unnamed FIFO delaying queue without metrics.
    ///
    /// # Panics
    ///
    /// Outside a Tokio runtime: the waiting loop is a Tokio task.
    pub fn new() -> Self {
        Self::with_config(QueueConfig::default())
    }

    /// A delaying queue built from `config`; with metrics on, it also counts
    /// `workqueue_retries_total`.
    ///
    /// # Panics
    ///
    /// Outside a Tokio runtime: the waiting loop is a Tokio task.
    pub fn with_config(config: QueueConfig<T>) -> Self {
        let retries = if config.has_metrics() {
            config
                .metrics_provider
                .as_deref()
                .map(|provider| provider.new_retries_metric(&config.name))
        } else {
            None
        };
        let queue = Queue::with_config(config);
        let wake_loop = Arc::new(Notify::new());
        let delay = Arc::new(Delay {
            waiting: Mutex::new(Waiting::new()),
            wake_loop: Arc::clone(&wake_loop),
            retries,
        });
        tokio::spawn(waiting_loop(
            queue.clone(),
            Arc::downgrade(&delay),
            wake_loop,
        ));
        Self { queue, delay }
    }

    /// Adds `item` once `delay` has passed.
    ///
    /// A zero delay adds at once. If the item is already waiting, the earlier of the two ready
    /// times wins. Ignored after shutdown; items still waiting at shutdown are dropped. Each call
    /// counts one retry in the metrics.
    pub fn add_after(&self, item: T, delay: Duration) {
        if self.queue.shutting_down() {
            return;
        }
        if let Some(retries) = &self.delay.retries {
            retries.inc();
        }
        if delay.is_zero() {
            self.queue.add(item);
            return;
        }
        let now = Instant::now();
        // A delay too long for the clock (e.g. `Duration::MAX`) means "practically never".
        let ready_at = now
            .checked_add(delay)
            .unwrap_or_else(|| now + Duration::from_secs(100 * 365 * 24 * 3600));
        let earliest = self.delay.lock().insert(item, ready_at);
        if earliest {
            self.delay.wake_loop.notify_one();
        }
    }

    /// The queue underneath, sharing all state with this handle. The same as dereferencing
    /// (`&*delaying`), spelled out.
    pub fn as_queue(&self) -> &Queue<T> {
        &self.queue
    }
}

/// Every [`Queue`] method works on a delaying queue as it is, acting on the queue underneath.
impl<T> Deref for DelayingQueue<T> {
    type Target = Queue<T>;

    fn deref(&self) -> &Queue<T> {
        &self.queue
    }
}

/// Moves items into `queue` as they become ready, until the queue shuts down or every handle is
/// dropped.
async fn waiting_loop<T: Item>(queue: Queue<T>, delay: Weak<Delay<T>>, wake: Arc<Notify>) {
    let alarm = Alarm::new();
    let mut due = Vec::new();
    let mut sleep = pin!(tokio::time::sleep(MAX_WAIT));
    let mut closed = pin!(queue.closed());
    loop {
        let now = Instant::now();
        let next = {
            let Some(delay) = delay.upgrade() else { return };
            let mut waiting = delay.lock();
            waiting.pop_ready(now, &mut due)
        };
        if !due.is_empty() {
            queue.add_all(&mut due);
        }
        let heartbeat = now + MAX_WAIT;
        match next {
            Some(ready_at) => {
                sleep.as_mut().reset(ready_at.min(heartbeat));
                alarm.arm(ready_at);
            }
            None => {
                sleep.as_mut().reset(heartbeat);
                alarm.disarm();
            }
        }
        tokio::select! {
            biased;
            () = &mut closed => return,
            () = wake.notified() => {}
            () = alarm.fired() => {}
            () = &mut sleep => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::metrics::{CounterMetric, NoopMetricsProvider};
    use crate::{GaugeMetric, HistogramMetric, MetricsProvider, SettableGaugeMetric};

    async fn settle() {
        for _ in 0..50 {
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_zero_delay_adds_at_once() {
        let queue = DelayingQueue::new();
        queue.add_after("now", Duration::ZERO);
        assert_eq!(queue.len(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn delayed_items_are_dropped_at_shut_down() {
        let queue = DelayingQueue::new();
        queue.add_after("later", Duration::from_millis(10));
        queue.shut_down();
        queue.add_after("ignored", Duration::ZERO);
        tokio::time::advance(Duration::from_secs(1)).await;
        settle().await;
        assert_eq!(queue.get().await, None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_huge_delay_does_not_overflow_the_clock() {
        let queue = DelayingQueue::new();
        queue.add_after("never", Duration::MAX);
        queue.add_after("soon", Duration::from_millis(1));
        assert_eq!(queue.get().await, Some("soon"));
    }

    #[tokio::test(start_paused = true)]
    async fn dropping_every_handle_stops_the_waiting_loop() {
        let item = Arc::new("waiting".to_string());
        let weak = Arc::downgrade(&item);
        let queue = DelayingQueue::new();
        queue.add_after(item, Duration::from_secs(60));
        drop(queue);
        settle().await;
        assert!(
            weak.upgrade().is_none(),
            "the loop must exit and drop what was waiting"
        );
    }

    #[test]
    fn moving_items_earlier_leaves_no_garbage_behind() {
        let mut waiting = Waiting::new();
        let start = Instant::now();
        for step in (1..=1_000u64).rev() {
            waiting.insert("item", start + Duration::from_millis(step));
        }
        assert_eq!(waiting.by_item.len(), 1);
        assert!(
            waiting.heap.len() <= 130,
            "stale entries pile up: {}",
            waiting.heap.len()
        );
        let mut due = Vec::new();
        let next = waiting.pop_ready(start, &mut due);
        assert_eq!(next, Some(start + Duration::from_millis(1)));
        assert_eq!(
            waiting.pop_ready(start + Duration::from_secs(2), &mut due),
            None
        );
        assert_eq!(due, ["item"]);
        assert!(
            waiting.heap.is_empty(),
            "stale entries are skipped and dropped"
        );
    }

    /// Counts `workqueue_retries_total`; every other metric is discarded.
    #[derive(Default)]
    struct Retries(Arc<std::sync::atomic::AtomicUsize>);

    impl CounterMetric for Retries {
        fn inc(&self) {
            self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }

    impl MetricsProvider for Retries {
        fn new_depth_metric(&self, name: &str) -> Arc<dyn GaugeMetric> {
            NoopMetricsProvider.new_depth_metric(name)
        }
        fn new_adds_metric(&self, name: &str) -> Arc<dyn CounterMetric> {
            NoopMetricsProvider.new_adds_metric(name)
        }
        fn new_latency_metric(&self, name: &str) -> Arc<dyn HistogramMetric> {
            NoopMetricsProvider.new_latency_metric(name)
        }
        fn new_work_duration_metric(&self, name: &str) -> Arc<dyn HistogramMetric> {
            NoopMetricsProvider.new_work_duration_metric(name)
        }
        fn new_unfinished_work_seconds_metric(&self, name: &str) -> Arc<dyn SettableGaugeMetric> {
            NoopMetricsProvider.new_unfinished_work_seconds_metric(name)
        }
        fn new_longest_running_processor_seconds_metric(
            &self,
            name: &str,
        ) -> Arc<dyn SettableGaugeMetric> {
            NoopMetricsProvider.new_longest_running_processor_seconds_metric(name)
        }
        fn new_retries_metric(&self, _name: &str) -> Arc<dyn CounterMetric> {
            Arc::new(Retries(Arc::clone(&self.0)))
        }
    }

    #[tokio::test(start_paused = true)]
    async fn every_add_after_counts_a_retry_until_shut_down() {
        let provider = Retries::default();
        let count = Arc::clone(&provider.0);
        let queue =
            DelayingQueue::with_config(QueueConfig::new().name("q").metrics_provider(provider));
        queue.add_after("a", Duration::ZERO);
        queue.add_after("b", Duration::from_secs(1));
        queue.add_after("b", Duration::from_secs(2)); // ignored as later, still a retry
        assert_eq!(count.load(std::sync::atomic::Ordering::Relaxed), 3);
        queue.shut_down();
        queue.add_after("c", Duration::ZERO);
        assert_eq!(count.load(std::sync::atomic::Ordering::Relaxed), 3);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn on_the_real_clock_items_are_ready_on_time_not_early() {
        let queue = DelayingQueue::new();
        let delay = Duration::from_millis(3);
        let start = Instant::now();
        queue.add_after("x", delay);
        let item = tokio::time::timeout(Duration::from_secs(5), queue.get())
            .await
            .expect("the item must become ready");
        assert_eq!(item, Some("x"));
        assert!(start.elapsed() >= delay, "ready before its time");
    }
}

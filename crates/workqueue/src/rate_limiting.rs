//! A [`DelayingQueue`] that asks a [`RateLimiter`] how long to delay a retry: the queue
//! controllers use. It adds three methods; everything else is the delaying queue's.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::delaying::DelayingQueue;
use crate::queue::{Item, Priority, Queue, QueueConfig};
use crate::rate_limiters::RateLimiter;

/// A delaying queue with per-item retry backoff. Cloning is cheap; clones share the queue and
/// the rate limiter.
///
/// The usual worker loop: on success [`forget`](Self::forget) the item, on failure
/// [`add_rate_limited`](Self::add_rate_limited) it; either way call [`done`](Self::done).
pub struct RateLimitingQueue<T> {
    queue: DelayingQueue<T>,
    limiter: Arc<dyn RateLimiter<T>>,
}

impl<T> Clone for RateLimitingQueue<T> {
    fn clone(&self) -> Self {
        Self {
            queue: self.queue.clone(),
            limiter: Arc::clone(&self.limiter),
        }
    }
}

impl<T> fmt::Debug for RateLimitingQueue<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimitingQueue")
            .field("queue", &self.queue)
            .finish_non_exhaustive()
    }
}

impl<T: Item> RateLimitingQueue<T> {
    /// An unnamed FIFO queue without metrics, retrying with `limiter`.
    ///
    /// # Panics
    ///
    /// Outside a Tokio runtime (see [`DelayingQueue::new`]).
    pub fn new(limiter: impl RateLimiter<T> + 'static) -> Self {
        Self::with_config(limiter, QueueConfig::default())
    }

    /// A queue built from `config`, retrying with `limiter`.
    ///
    /// # Panics
    ///
    /// Outside a Tokio runtime (see [`DelayingQueue::new`]).
    pub fn with_config(limiter: impl RateLimiter<T> + 'static, config: QueueConfig<T>) -> Self {
        Self::from_delaying_queue(DelayingQueue::with_config(config), limiter)
    }

    /// Puts a rate limiter on an existing delaying queue.
    pub fn from_delaying_queue(
        queue: DelayingQueue<T>,
        limiter: impl RateLimiter<T> + 'static,
    ) -> Self {
        Self {
            queue,
            limiter: Arc::new(limiter),
        }
    }

    /// Adds `item` after the delay the rate limiter chooses (which counts it as a failure).
    pub fn add_rate_limited(&self, item: T) {
        let delay = self.limiter.when(&item);
        self.queue.add_after(item, delay);
    }

    /// Tells the rate limiter to stop tracking `item`. It does not remove the item from the
    /// queue; call [`done`](Self::done) as usual.
    pub fn forget(&self, item: &T) {
        self.limiter.forget(item);
    }

    /// How many times `item` has been rate-limited since it was last forgotten.
    pub fn num_requeues(&self, item: &T) -> usize {
        self.limiter.num_requeues(item)
    }

    /// The delaying queue underneath, sharing all state with this handle.
    pub fn as_delaying_queue(&self) -> &DelayingQueue<T> {
        &self.queue
    }

    /// The plain queue underneath, sharing all state with this handle.
    pub fn as_queue(&self) -> &Queue<T> {
        self.queue.as_queue()
    }

    /// See [`DelayingQueue::add_after`].
    pub fn add_after(&self, item: T, delay: Duration) {
        self.queue.add_after(item, delay);
    }

    /// See [`Queue::add`].
    pub fn add(&self, item: T) {
        self.queue.add(item);
    }

    /// See [`Queue::add_ref`].
    pub fn add_ref(&self, item: &T) {
        self.queue.add_ref(item);
    }

    /// See [`Queue::add_with_priority`].
    pub fn add_with_priority(&self, item: T, priority: Priority) {
        self.queue.add_with_priority(item, priority);
    }

    /// See [`Queue::len`].
    pub fn len(&self) -> usize {
        self.queue.len()
    }

    /// See [`Queue::is_empty`].
    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// See [`Queue::get`].
    pub async fn get(&self) -> Option<T> {
        self.queue.get().await
    }

    /// See [`Queue::done`].
    pub fn done(&self, item: &T) {
        self.queue.done(item);
    }

    /// See [`DelayingQueue::shut_down`].
    pub fn shut_down(&self) {
        self.queue.shut_down();
    }

    /// See [`DelayingQueue::shut_down_with_drain`].
    pub async fn shut_down_with_drain(&self) {
        self.queue.shut_down_with_drain().await;
    }

    /// See [`Queue::shutting_down`].
    pub fn shutting_down(&self) -> bool {
        self.queue.shutting_down()
    }
}

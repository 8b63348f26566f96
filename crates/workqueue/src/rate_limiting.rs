//! A [`DelayingQueue`] that asks a [`RateLimiter`] how long to delay a retry: the queue
//! controllers use. It adds three methods; everything else is the delaying queue's.

use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

use crate::delaying::DelayingQueue;
use crate::queue::{Item, Queue, QueueConfig};
use crate::rate_limiters::RateLimiter;

/// A delaying queue with per-item retry backoff. Cloning is cheap; clones share the queue and
/// the rate limiter.
///
/// It dereferences to its [`DelayingQueue`], and that to its [`Queue`], so their methods
/// (`add`, `add_after`, `get`, `done`, `len`, `shut_down`, ...) are called on it directly; this
/// type adds [`add_rate_limited`](Self::add_rate_limited), [`forget`](Self::forget) and
/// [`num_requeues`](Self::num_requeues).
///
/// The usual worker loop: on success [`forget`](Self::forget) the item, on failure
/// [`add_rate_limited`](Self::add_rate_limited) it; either way call [`done`](Queue::done).
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
    /// queue; call [`done`](Queue::done) as usual.
    pub fn forget(&self, item: &T) {
        self.limiter.forget(item);
    }

    /// How many times `item` has been rate-limited since it was last forgotten.
    pub fn num_requeues(&self, item: &T) -> usize {
        self.limiter.num_requeues(item)
    }

    /// The delaying queue underneath, sharing all state with this handle (also reached by
    /// dereferencing).
    pub fn as_delaying_queue(&self) -> &DelayingQueue<T> {
        &self.queue
    }

    /// The plain queue underneath, sharing all state with this handle (also reached by
    /// dereferencing twice).
    pub fn as_queue(&self) -> &Queue<T> {
        self.queue.as_queue()
    }
}

/// Every [`DelayingQueue`] method, and through it every [`Queue`] method, works on a
/// rate-limiting queue as it is: `add_after`, `add`, `get`, `done`, `len`, `shut_down` and the
/// rest act on the queues underneath.
impl<T> Deref for RateLimitingQueue<T> {
    type Target = DelayingQueue<T>;

    fn deref(&self) -> &DelayingQueue<T> {
        &self.queue
    }
}

//! A rate-limited work queue for Kubernetes controllers, with the semantics of client-go's
//! `util/workqueue`, generic over the item type and built for async Rust.
//!
//! A controller's event handlers [`add`](Queue::add) object keys; a few workers
//! [`get`](Queue::get) a key, reconcile it and call [`done`](Queue::done). The queue guarantees:
//!
//! - **Stingy**: a key added many times before a worker gets it is handed out once.
//! - **Never concurrent**: a key is never handed to two workers at once. A key added while it is
//!   being processed is handed out again after `done`.
//! - **Fair**: keys are handed out in the order they were first added.
//! - **Graceful shutdown**: after `shut_down`, workers still get what was queued, then `None`.
//!
//! On top of [`Queue`], [`DelayingQueue`] adds items after a delay, and [`RateLimitingQueue`]
//! picks the delay of a retry with a [`RateLimiter`] (per-item exponential backoff plus an overall
//! token bucket, by default). Each layer dereferences to the one below, so `add`, `get`, `done`
//! and the other queue methods are called on any of the three alike. [`parallelize_until`] runs many independent pieces of work on a few
//! workers. Metrics follow client-go's names and meanings ([`PrometheusMetricsProvider`]).
//!
//! # Example: a controller's worker loop
//!
//! ```
//! use kctrl_workqueue::{RateLimitingQueue, default_controller_rate_limiter};
//!
//! async fn reconcile(key: &str) -> Result<(), String> {
//!     if key.ends_with("broken") { Err("not yet".into()) } else { Ok(()) }
//! }
//!
//! async fn worker(queue: RateLimitingQueue<String>) {
//!     while let Some(key) = queue.get().await {
//!         match reconcile(&key).await {
//!             Ok(()) => queue.forget(&key),
//!             // Retry with backoff, a bounded number of times.
//!             Err(_) if queue.num_requeues(&key) < 5 => queue.add_rate_limited(key.clone()),
//!             Err(_) => queue.forget(&key),
//!         }
//!         queue.done(&key);
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() {
//! let queue = RateLimitingQueue::new(default_controller_rate_limiter());
//! let workers: Vec<_> = (0..2).map(|_| tokio::spawn(worker(queue.clone()))).collect();
//!
//! // Event handlers add keys.
//! queue.add("default/web".to_string());
//! queue.add("default/broken".to_string());
//!
//! // Let the broken key be retried five times (5, 10, 20, 40, 80 ms of backoff).
//! tokio::time::sleep(std::time::Duration::from_secs(1)).await;
//! assert_eq!(queue.num_requeues(&"default/broken".to_string()), 0, "given up and forgotten");
//!
//! // Stop taking new keys, wait for keys in progress, then the workers see `None`.
//! queue.shut_down_with_drain().await;
//! for worker in workers {
//!     worker.await.unwrap();
//! }
//! # }
//! ```
//!
//! # Priority lanes
//!
//! client-go has one lane; this queue has two. [`Queue::add_with_priority`] with
//! [`Priority::Low`] queues an item in the low lane, meant for the flood of adds from an
//! informer's initial list or a resync; [`Queue::add`] (and `Priority::High`) is for live
//! events. `get` serves the high lane first; while both lanes wait, every [`LOW_LANE_TURN`]-th
//! get serves the low lane, so it is never starved. Within a lane, items are handed out in the
//! order they were queued. A waiting item added again with high priority moves up; an item added
//! while being processed is queued at `done` in the highest lane it was added with; an item whose
//! [`add_after`](DelayingQueue::add_after) delay ends goes to the high lane. Everything
//! else (collapsing, never concurrent, shutdown) is the same in both lanes, which live under the
//! queue's one lock. Lanes have their own metrics (`workqueue_lane_*`, see [`MetricsProvider`]).
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! use kctrl_workqueue::{Priority, Queue};
//!
//! let queue = Queue::new();
//! for name in ["a", "b", "c"] {
//!     queue.add_with_priority(format!("default/{name}"), Priority::Low); // initial list
//! }
//! queue.add("default/changed".to_string()); // a live event
//! assert_eq!(queue.get().await.as_deref(), Some("default/changed"));
//! assert_eq!(queue.get().await.as_deref(), Some("default/a"));
//! # }
//! ```
//!
//! # Async design
//!
//! `add`, `done`, `add_after`, `add_rate_limited` and `shut_down` are plain functions that never
//! block for long (a short mutex section), so event handlers can call them from anywhere. Only
//! waiting is `async`: [`Queue::get`] and [`Queue::shut_down_with_drain`]. Queues are handles
//! (an `Arc` inside): clone one per task. [`DelayingQueue`] and [`RateLimitingQueue`] run a small
//! Tokio task, so they must be created inside a Tokio runtime; all timing uses `tokio::time`, so
//! tests can run on Tokio's paused clock.
//!
//! # client-go names
//!
//! | client-go | here |
//! |---|---|
//! | `TypedInterface[T]`, `NewTyped`, `NewTypedWithConfig` | [`Queue<T>`], [`Queue::new`], [`Queue::with_config`] |
//! | `TypedQueueConfig{Name, MetricsProvider, Queue}` | [`QueueConfig`] (`name`, `metrics_provider`, `order`) |
//! | `Queue[T]` (`Touch`, `Push`, `Len`, `Pop`), `DefaultQueue` | [`QueueOrder`] (`touch`, `push`, `len`, `pop`), [`Fifo`] |
//! | `Add` | [`add`](Queue::add); also [`add_ref`](Queue::add_ref), which clones only what it keeps |
//! | (none; controller-runtime's priority queue is the nearest) | [`add_with_priority`](Queue::add_with_priority), [`Priority`], [`lane_len`](Queue::lane_len) |
//! | `Len` | [`len`](Queue::len) |
//! | `Get` → `(item, shutdown)` | [`get`](Queue::get)`.await` → `Option<T>` (`None` = shut down) |
//! | `Done` | [`done`](Queue::done) |
//! | `ShutDown` | [`shut_down`](Queue::shut_down) |
//! | `ShutDownWithDrain` | [`shut_down_with_drain`](Queue::shut_down_with_drain)`.await` |
//! | `ShuttingDown` | [`shutting_down`](Queue::shutting_down) |
//! | `TypedDelayingInterface[T]`, `NewTypedDelayingQueue(WithConfig)` | [`DelayingQueue<T>`], [`DelayingQueue::new`], [`DelayingQueue::with_config`] |
//! | `AddAfter` | [`add_after`](DelayingQueue::add_after) |
//! | `TypedRateLimitingInterface[T]`, `NewTypedRateLimitingQueue(WithConfig)` | [`RateLimitingQueue<T>`], [`RateLimitingQueue::new`], [`RateLimitingQueue::with_config`] |
//! | `AddRateLimited` | [`add_rate_limited`](RateLimitingQueue::add_rate_limited) |
//! | `Forget` | [`forget`](RateLimitingQueue::forget) |
//! | `NumRequeues` | [`num_requeues`](RateLimitingQueue::num_requeues) |
//! | `TypedRateLimiter[T]` (`When`, `Forget`, `NumRequeues`) | [`RateLimiter<T>`] (`when`, `forget`, `num_requeues`) |
//! | `DefaultTypedControllerRateLimiter` | [`default_controller_rate_limiter`] |
//! | `DefaultTypedItemBasedRateLimiter` | [`default_item_based_rate_limiter`] |
//! | `NewTypedItemExponentialFailureRateLimiter` | [`ItemExponentialFailureRateLimiter::new`] |
//! | `NewTypedItemFastSlowRateLimiter` | [`ItemFastSlowRateLimiter::new`] |
//! | `TypedBucketRateLimiter{rate.NewLimiter(qps, burst)}` | [`BucketRateLimiter::new`]`(qps, burst)` |
//! | `NewTypedMaxOfRateLimiter` | [`MaxOfRateLimiter::new`] |
//! | `NewTypedWithMaxWaitRateLimiter` | [`WithMaxWaitRateLimiter::new`] |
//! | `MetricsProvider`, `noopMetricsProvider` | [`MetricsProvider`], [`NoopMetricsProvider`] |
//! | `GaugeMetric`, `SettableGaugeMetric`, `CounterMetric`, `HistogramMetric` | [`GaugeMetric`], [`SettableGaugeMetric`], [`CounterMetric`], [`HistogramMetric`] |
//! | component-base `workqueue` Prometheus metrics | [`PrometheusMetricsProvider`] |
//! | `SetProvider` (global) | none: pass a provider in [`QueueConfig::metrics_provider`] |
//! | `ParallelizeUntil(ctx, workers, pieces, fn, WithChunkSize(n))` | [`parallelize_until`]`(&cancel, workers, pieces, n, fn).await` |
//!
//! Differences worth knowing: `get` is `async` and returns `Option`; `done`, `forget` and
//! `num_requeues` borrow the item; delays are [`Duration`](std::time::Duration)s, so "negative"
//! delays do not exist (zero adds at once); `done` for an item that is not being processed does
//! nothing.

mod alarm;
mod delaying;
mod metrics;
mod parallelize;
mod queue;
mod rate_limiters;
mod rate_limiting;

pub use delaying::{DelayingQueue, MAX_WAIT};
pub use metrics::{
    CounterMetric, GaugeMetric, HistogramMetric, MetricsProvider, NoopMetric, NoopMetricsProvider,
    PrometheusMetricsProvider, SettableGaugeMetric,
};
pub use parallelize::parallelize_until;
pub use queue::{
    DEFAULT_UNFINISHED_WORK_UPDATE_PERIOD, Fifo, Item, LOW_LANE_TURN, Priority, Queue, QueueConfig,
    QueueOrder,
};
pub use rate_limiters::{
    BucketRateLimiter, ItemExponentialFailureRateLimiter, ItemFastSlowRateLimiter,
    MaxOfRateLimiter, RateLimiter, WithMaxWaitRateLimiter, default_controller_rate_limiter,
    default_item_based_rate_limiter,
};
pub use rate_limiting::RateLimitingQueue;

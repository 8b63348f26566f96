//! The work queue: a set of dirty items, a set of items being processed, and the order in which
//! dirty items are handed to workers.
//!
//! This is the bottom layer; [`DelayingQueue`](crate::DelayingQueue) and
//! [`RateLimitingQueue`](crate::RateLimitingQueue) wrap it. The rules it keeps:
//!
//! - **Stingy**: an item is queued at most once. Adding an item that is already waiting does
//!   nothing (except [`QueueOrder::touch`]).
//! - **Never concurrent**: an item handed out by [`Queue::get`] is not handed out again until the
//!   worker calls [`Queue::done`]. If it is added meanwhile, it is queued again at `done`.
//! - **Fair**: by default, items are handed out in the order they were first added ([`Fifo`]),
//!   in two [`Priority`] lanes: the high lane first, the low lane never starved.
//! - **Graceful shutdown**: after [`Queue::shut_down`], adds are ignored, but `get` keeps handing
//!   out what is already queued and returns `None` only once the queue is empty.
//!
//! All state sits behind one mutex, held only for a few hash-map and deque operations (the two
//! lanes are two ring buffers inside it); the only `await` point is an idle `get`, which parks on
//! a [`Notify`] until an add wakes exactly one parked getter. The mutex is `parking_lot`'s: when
//! its holder has been descheduled, a waiting thread spins briefly and then yields its CPU
//! before it sleeps, which keeps a busy 2-CPU machine from stalling half of a Tokio runtime in
//! the kernel (see docs/benchmarks/workqueue.md).

use std::collections::VecDeque;
use std::fmt;
use std::hash::{BuildHasher, Hash};
use std::pin::pin;
use std::sync::{Arc, Weak};
use std::time::Duration;

use foldhash::fast::RandomState;
use hashbrown::HashTable;
use hashbrown::hash_table::Entry as HashEntry;
use parking_lot::{Mutex, MutexGuard};
use tokio::sync::Notify;
use tokio::time::{Instant, MissedTickBehavior};

use crate::metrics::{MetricsProvider, QueueMetrics};

/// What a queue needs from its items: cheap cloning, equality and hashing.
///
/// Implemented for every type that qualifies. Kubernetes controllers usually queue object keys
/// (`"namespace/name"`); `Arc<str>` or a small struct of `Arc<str>`s makes clones cheap.
pub trait Item: Clone + Eq + Hash + Send + 'static {}

impl<T: Clone + Eq + Hash + Send + 'static> Item for T {}

/// The order in which a [`Queue`] hands out waiting items.
///
/// The queue guarantees that an item is pushed at most once until it is popped, so an
/// implementation never has to deduplicate. Methods are called with the queue's lock held: keep
/// them short. A custom order replaces the built-in lanes and sees every item, whatever its
/// [`Priority`]. The default is [`Fifo`].
pub trait QueueOrder<T>: Send {
    /// Called when an item that is already waiting is added again. An ordering that supports
    /// priorities can use it to move the item; FIFO ignores it.
    fn touch(&mut self, item: &T);
    /// Appends an item that is not in the order yet.
    fn push(&mut self, item: T);
    /// Number of waiting items.
    fn len(&self) -> usize;
    /// Whether no item is waiting.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Removes and returns the next item, or `None` when empty.
    fn pop(&mut self) -> Option<T>;
}

/// First in, first out: items are handed out in the order they were first added.
///
/// A popped item is moved out of the ring buffer, so the queue keeps no reference to it.
#[derive(Debug)]
pub struct Fifo<T> {
    items: VecDeque<T>,
}

impl<T> Default for Fifo<T> {
    fn default() -> Self {
        Self {
            items: VecDeque::new(),
        }
    }
}

impl<T: Send> QueueOrder<T> for Fifo<T> {
    fn touch(&mut self, _item: &T) {}

    fn push(&mut self, item: T) {
        self.items.push_back(item);
    }

    fn len(&self) -> usize {
        self.items.len()
    }

    fn pop(&mut self) -> Option<T> {
        self.items.pop_front()
    }
}

/// Options for a queue, built with chained setters; `QueueConfig::default()` gives an unnamed
/// FIFO queue without metrics.
///
/// The same config builds a [`Queue`], a [`DelayingQueue`](crate::DelayingQueue) or a
/// [`RateLimitingQueue`](crate::RateLimitingQueue).
pub struct QueueConfig<T> {
    pub(crate) name: String,
    pub(crate) metrics_provider: Option<Arc<dyn MetricsProvider>>,
    pub(crate) order: Option<Box<dyn QueueOrder<T>>>,
    pub(crate) unfinished_work_update_period: Duration,
}

/// How often the unfinished-work gauges are refreshed unless configured otherwise.
pub const DEFAULT_UNFINISHED_WORK_UPDATE_PERIOD: Duration = Duration::from_millis(500);

impl<T> Default for QueueConfig<T> {
    fn default() -> Self {
        Self {
            name: String::new(),
            metrics_provider: None,
            order: None,
            unfinished_work_update_period: DEFAULT_UNFINISHED_WORK_UPDATE_PERIOD,
        }
    }
}

impl<T: Item> QueueConfig<T> {
    /// The default config: unnamed, FIFO, no metrics.
    pub fn new() -> Self {
        Self::default()
    }

    /// Names the queue. Metrics are recorded only for named queues that also have a
    /// [`metrics_provider`](Self::metrics_provider); the name becomes the `name` label.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// Where the queue's metrics go. There is no global provider: a queue without one records
    /// nothing.
    pub fn metrics_provider(mut self, provider: impl MetricsProvider + 'static) -> Self {
        self.metrics_provider = Some(Arc::new(provider));
        self
    }

    /// Like [`metrics_provider`](Self::metrics_provider), for a provider already shared
    /// behind an `Arc` (e.g. one chosen at run time).
    pub fn shared_metrics_provider(mut self, provider: Arc<dyn MetricsProvider>) -> Self {
        self.metrics_provider = Some(provider);
        self
    }

    /// Replaces the FIFO order, e.g. with a priority order.
    pub fn order(mut self, order: impl QueueOrder<T> + 'static) -> Self {
        self.order = Some(Box::new(order));
        self
    }

    /// How often the unfinished-work and longest-running-processor gauges are refreshed
    /// (default [`DEFAULT_UNFINISHED_WORK_UPDATE_PERIOD`], 500 ms). Only used with metrics.
    pub fn unfinished_work_update_period(mut self, period: Duration) -> Self {
        self.unfinished_work_update_period = period;
        self
    }

    /// Whether this config turns metrics on.
    pub(crate) fn has_metrics(&self) -> bool {
        !self.name.is_empty()
            && self
                .metrics_provider
                .as_ref()
                .is_some_and(|provider| !provider.is_noop())
    }
}

impl<T> fmt::Debug for QueueConfig<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QueueConfig")
            .field("name", &self.name)
            .field("metrics", &self.metrics_provider.is_some())
            .field("custom_order", &self.order.is_some())
            .field(
                "unfinished_work_update_period",
                &self.unfinished_work_update_period,
            )
            .finish()
    }
}

/// The lane an add puts an item in; see [`Queue::add_with_priority`].
///
/// Live events belong in the high lane; the flood of adds from an informer's initial list or a
/// periodic resync belongs in the low lane, so that a change a user just made does not wait
/// behind thousands of keys that only need a routine look.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Priority {
    /// Bulk work: initial list, resync. Served after the high lane, but never starved: see
    /// [`LOW_LANE_TURN`].
    Low,
    /// Live events; what [`Queue::add`] uses.
    #[default]
    High,
}

impl Priority {
    /// `"high"` or `"low"`, as used in the `lane` metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Priority::High => "high",
            Priority::Low => "low",
        }
    }
}

/// While both lanes have items waiting, every `LOW_LANE_TURN`-th get serves the low lane first:
/// the low lane keeps at least a fifth of the throughput, so initial-list work still progresses
/// under a steady stream of live events, and a live event waits behind at most one low item per
/// four high ones.
pub const LOW_LANE_TURN: u64 = 5;

/// A work queue handle. Cloning is cheap and every clone is the same queue, so hand one to each
/// producer and worker.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use kctrl_workqueue::Queue;
///
/// let queue = Queue::new();
/// queue.add("default/web");
/// queue.add("default/web"); // already waiting: collapsed
/// assert_eq!(queue.len(), 1);
///
/// let item = queue.get().await.unwrap();
/// // ... reconcile `item` ...
/// queue.done(&item);
///
/// queue.shut_down();
/// assert_eq!(queue.get().await, None);
/// # }
/// ```
pub struct Queue<T> {
    shared: Arc<Shared<T>>,
}

impl<T> Clone for Queue<T> {
    fn clone(&self) -> Self {
        Self {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<T> fmt::Debug for Queue<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.shared.lock();
        f.debug_struct("Queue")
            .field("len", &state.order.len())
            .field("processing", &state.processing)
            .field("shutting_down", &state.shutting_down)
            .finish_non_exhaustive()
    }
}

struct Shared<T> {
    state: Mutex<State<T>>,
    /// Hashes items before the lock is taken, so the critical sections only probe.
    hasher: RandomState,
    /// Parked getters wait here; an add that queues an item wakes one.
    getters: Notify,
    /// `shut_down_with_drain` waits here for the processing set to empty.
    drained: Notify,
    /// Woken once at shutdown, for the layers above (the delaying queue's loop).
    closed: Notify,
}

/// Per-item flags. An item has a slot while it is dirty (needs processing), processing (handed
/// out, not done yet), or both. `HIGH` is the lane of a dirty item (unset: the low lane).
const DIRTY: u8 = 1;
const PROCESSING: u8 = 2;
const HIGH: u8 = 4;

fn lane_bit(priority: Priority) -> u8 {
    match priority {
        Priority::High => HIGH,
        Priority::Low => 0,
    }
}

fn lane_of(mark: u8) -> Priority {
    if mark & HIGH != 0 {
        Priority::High
    } else {
        Priority::Low
    }
}

/// One item known to the queue, with its hash (so the table never rehashes an item).
struct Slot<T> {
    item: T,
    hash: u64,
    mark: u8,
    /// The ticket of the item's live entry in the low lane (meaningful only while it waits
    /// there); sits in what would otherwise be padding.
    low_ticket: u32,
}

struct State<T> {
    order: Order<T>,
    /// client-go keeps two sets (`dirty` and `processing`); one table of flags needs a single
    /// probe per operation. Invariant: every waiting item has a slot marked `DIRTY` without
    /// `PROCESSING`, and exactly one live entry in `order` (in its lane).
    slots: HashTable<Slot<T>>,
    processing: usize,
    shutting_down: bool,
    drain: bool,
    /// Getters parked (or about to park) on `Shared::getters` that no add has woken yet. Lets an
    /// add skip the notification when nobody waits; it may overcount after a cancelled `get`,
    /// which costs a spurious wake-up, never a lost one.
    parked_getters: usize,
    metrics: Option<Box<QueueMetrics<T>>>,
}

/// The built-in lanes are matched directly, keeping each item's hash, so the common case needs
/// neither dynamic dispatch nor rehashing.
enum Order<T> {
    Lanes(Lanes<T>),
    Custom(Box<dyn QueueOrder<T>>),
}

/// The two built-in FIFOs.
///
/// High entries are always live: an item leaves the high lane only by being popped. A low entry
/// goes stale when its item rises to the high lane; it stays in the ring buffer (removing it
/// would be a linear search) and is recognised when popped because its ticket no longer matches
/// the slot's `low_ticket`. Tickets count low pushes (wrapping): a stale entry could only be
/// mistaken for a live one after 2^32 later pushes, all still queued behind it.
struct Lanes<T> {
    high: VecDeque<(T, u64)>,
    low: VecDeque<(T, u64, u32)>,
    /// Stale entries in `low`, so lengths stay exact.
    stale_low: usize,
    /// The ticket of the next low push.
    next_ticket: u32,
    /// Gets that found both lanes waiting, to give the low lane its turn.
    turns: u64,
}

/// An entry popped from the order: the item, its hash and, from the low lane, its ticket.
struct Popped<T> {
    item: T,
    hash: u64,
    low_ticket: Option<u32>,
}

impl<T: Item> Lanes<T> {
    fn new() -> Self {
        Self {
            high: VecDeque::new(),
            low: VecDeque::new(),
            stale_low: 0,
            next_ticket: 0,
            turns: 0,
        }
    }

    fn low_len(&self) -> usize {
        self.low.len() - self.stale_low
    }

    /// Queues an item in the high lane.
    fn push_high(&mut self, item: T, hash: u64) {
        self.high.push_back((item, hash));
    }

    /// Queues an item in the low lane; returns the ticket to keep in its slot.
    fn push_low(&mut self, item: T, hash: u64) -> u32 {
        let ticket = self.next_ticket;
        self.next_ticket = ticket.wrapping_add(1);
        self.low.push_back((item, hash, ticket));
        ticket
    }

    /// The next entry: high first, but every [`LOW_LANE_TURN`]-th pop while both lanes wait
    /// takes the low lane's. May return a stale low entry, which the caller skips.
    #[inline]
    fn pop(&mut self) -> Option<Popped<T>> {
        if self.low.is_empty() {
            // The common case (no bulk work queued) pays one comparison for the lanes.
            let (item, hash) = self.high.pop_front()?;
            return Some(Popped {
                item,
                hash,
                low_ticket: None,
            });
        }
        self.pop_either()
    }

    fn pop_either(&mut self) -> Option<Popped<T>> {
        let low_first = match (self.high.is_empty(), self.low_len() == 0) {
            (_, true) => false,
            (true, false) => true,
            (false, false) => {
                self.turns = self.turns.wrapping_add(1);
                self.turns.is_multiple_of(LOW_LANE_TURN)
            }
        };
        if !low_first && let Some((item, hash)) = self.high.pop_front() {
            return Some(Popped {
                item,
                hash,
                low_ticket: None,
            });
        }
        self.low.pop_front().map(|(item, hash, ticket)| Popped {
            item,
            hash,
            low_ticket: Some(ticket),
        })
    }
}

impl<T: Item> Order<T> {
    /// The next entry, or `None` when nothing waits.
    fn pop(&mut self, hasher: &RandomState) -> Option<Popped<T>> {
        match self {
            Order::Lanes(lanes) => lanes.pop(),
            Order::Custom(order) => order.pop().map(|item| {
                let hash = hasher.hash_one(&item);
                Popped {
                    item,
                    hash,
                    low_ticket: None,
                }
            }),
        }
    }
}

impl<T> Order<T> {
    /// Number of waiting items.
    fn len(&self) -> usize {
        match self {
            Order::Lanes(lanes) => lanes.high.len() + lanes.low.len() - lanes.stale_low,
            Order::Custom(order) => order.len(),
        }
    }

    /// Number of items waiting in one lane; 0 with a custom order.
    fn lane_len(&self, priority: Priority) -> usize {
        match (self, priority) {
            (Order::Lanes(lanes), Priority::High) => lanes.high.len(),
            (Order::Lanes(lanes), Priority::Low) => lanes.low.len() - lanes.stale_low,
            (Order::Custom(_), _) => 0,
        }
    }
}

/// What an add did, for the caller to finish outside the lock.
struct Added<T> {
    wake_getter: bool,
    /// The item, when the queue did not keep it (dropped after unlocking).
    rejected: Option<T>,
}

/// What a done did, for the caller to finish outside the lock.
struct Finished<T> {
    wake_getter: bool,
    wake_drain: bool,
    /// The queue's copy of the item, when it forgot the item (dropped after unlocking).
    released: Option<T>,
}

/// An item handed to `add`: owned, or borrowed and cloned only if the queue keeps it.
enum Incoming<'a, T> {
    Owned(T),
    Borrowed(&'a T),
}

impl<T: Clone> Incoming<'_, T> {
    fn get(&self) -> &T {
        match self {
            Incoming::Owned(item) => item,
            Incoming::Borrowed(item) => item,
        }
    }

    fn into_owned(self) -> T {
        match self {
            Incoming::Owned(item) => item,
            Incoming::Borrowed(item) => item.clone(),
        }
    }

    /// The owned item, to be dropped after unlocking.
    fn into_rejected(self) -> Option<T> {
        match self {
            Incoming::Owned(item) => Some(item),
            Incoming::Borrowed(_) => None,
        }
    }
}

impl<T: Item> State<T> {
    /// Marks `item` dirty and queues it in the lane of `priority` unless it is already queued or
    /// being processed; a waiting item added with a higher priority moves to the high lane.
    fn add(&mut self, item: Incoming<'_, T>, hash: u64, priority: Priority) -> Added<T> {
        if self.shutting_down {
            return Added {
                wake_getter: false,
                rejected: item.into_rejected(),
            };
        }
        match self
            .slots
            .entry(hash, |slot| slot.item == *item.get(), |slot| slot.hash)
        {
            HashEntry::Occupied(mut entry) => {
                let slot = entry.get_mut();
                if slot.mark & DIRTY == 0 {
                    // Being processed and not dirty yet: `done` will queue it again.
                    slot.mark |= DIRTY | lane_bit(priority);
                    if let Some(metrics) = &mut self.metrics {
                        metrics.add(&slot.item, priority);
                    }
                } else if priority == Priority::High && slot.mark & HIGH == 0 {
                    slot.mark |= HIGH;
                    if let Some(metrics) = &mut self.metrics {
                        metrics.rise();
                    }
                    // Dirty while processing: `done` queues it in the raised lane. Waiting:
                    // move it now (the low entry goes stale).
                    if slot.mark & PROCESSING == 0 {
                        match &mut self.order {
                            Order::Lanes(lanes) => {
                                lanes.stale_low += 1;
                                lanes.push_high(slot.item.clone(), hash);
                            }
                            Order::Custom(order) => order.touch(&slot.item),
                        }
                    }
                } else if slot.mark & PROCESSING == 0
                    && let Order::Custom(order) = &mut self.order
                {
                    order.touch(&slot.item);
                }
                Added {
                    wake_getter: false,
                    rejected: item.into_rejected(),
                }
            }
            HashEntry::Vacant(entry) => {
                let item = item.into_owned();
                if let Some(metrics) = &mut self.metrics {
                    metrics.add(&item, priority);
                }
                let mut low_ticket = 0;
                match &mut self.order {
                    Order::Lanes(lanes) => match priority {
                        Priority::High => lanes.push_high(item.clone(), hash),
                        Priority::Low => low_ticket = lanes.push_low(item.clone(), hash),
                    },
                    Order::Custom(order) => order.push(item.clone()),
                }
                entry.insert(Slot {
                    item,
                    hash,
                    mark: DIRTY | lane_bit(priority),
                    low_ticket,
                });
                Added {
                    wake_getter: self.wake_one_getter(),
                    rejected: None,
                }
            }
        }
    }

    /// Pops the next item and moves it from dirty to processing.
    fn take_next(&mut self, hasher: &RandomState) -> Option<T> {
        loop {
            let popped = self.order.pop(hasher)?;
            let slot = self
                .slots
                .find_mut(popped.hash, |slot| slot.item == popped.item);
            if let Some(ticket) = popped.low_ticket {
                let live = slot.as_ref().is_some_and(|slot| {
                    slot.mark & (DIRTY | PROCESSING | HIGH) == DIRTY && slot.low_ticket == ticket
                });
                if !live {
                    // Its item rose to the high lane (and may have been handed out and queued
                    // again since): skip it.
                    if let Order::Lanes(lanes) = &mut self.order {
                        lanes.stale_low -= 1;
                    }
                    continue;
                }
            }
            let mut served = Priority::High;
            if let Some(slot) = slot {
                served = lane_of(slot.mark);
                slot.mark = PROCESSING;
            }
            self.processing += 1;
            if let Some(metrics) = &mut self.metrics {
                metrics.get(&popped.item, served);
            }
            return Some(popped.item);
        }
    }

    /// Ends processing of `item`; queues it again if it was added meanwhile, in the highest
    /// lane it was added with.
    fn done(&mut self, item: &T, hash: u64) -> Finished<T> {
        let mut finished = Finished {
            wake_getter: false,
            wake_drain: false,
            released: None,
        };
        let Ok(mut entry) = self.slots.find_entry(hash, |slot| slot.item == *item) else {
            return finished;
        };
        let slot = entry.get_mut();
        if slot.mark & PROCESSING == 0 {
            // Not handed out (or already done): nothing to finish.
            return finished;
        }
        self.processing -= 1;
        if let Some(metrics) = &mut self.metrics {
            metrics.done(item);
        }
        if slot.mark & DIRTY != 0 {
            slot.mark &= !PROCESSING;
            match &mut self.order {
                Order::Lanes(lanes) => match lane_of(slot.mark) {
                    Priority::High => lanes.push_high(slot.item.clone(), hash),
                    Priority::Low => {
                        slot.low_ticket = lanes.push_low(slot.item.clone(), hash);
                    }
                },
                Order::Custom(order) => order.push(slot.item.clone()),
            }
            finished.wake_getter = self.wake_one_getter();
        } else {
            finished.released = Some(entry.remove().0.item);
        }
        finished.wake_drain = self.processing == 0 && self.drain;
        finished
    }

    fn wake_one_getter(&mut self) -> bool {
        if self.parked_getters == 0 {
            return false;
        }
        self.parked_getters -= 1;
        true
    }
}

impl<T: Item> Default for Queue<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: Item> Queue<T> {
    /// An unnamed FIFO queue without metrics. Needs no Tokio runtime to construct.
    pub fn new() -> Self {
        Self::build(QueueConfig::default())
    }

    /// A queue built from `config`.
    ///
    /// # Panics
    ///
    /// If the config turns metrics on (a name and a provider) and this is called outside a Tokio
    /// runtime: the unfinished-work gauges are refreshed by a background task.
    pub fn with_config(config: QueueConfig<T>) -> Self {
        Self::build(config)
    }

    fn build(config: QueueConfig<T>) -> Self {
        let metrics = if config.has_metrics() {
            config
                .metrics_provider
                .as_deref()
                .map(|provider| Box::new(QueueMetrics::new(provider, &config.name)))
        } else {
            None
        };
        let with_metrics = metrics.is_some();
        let order = match config.order {
            Some(order) => Order::Custom(order),
            None => Order::Lanes(Lanes::new()),
        };
        let shared = Arc::new(Shared {
            hasher: RandomState::default(),
            state: Mutex::new(State {
                order,
                slots: HashTable::new(),
                processing: 0,
                shutting_down: false,
                drain: false,
                parked_getters: 0,
                metrics,
            }),
            getters: Notify::new(),
            drained: Notify::new(),
            closed: Notify::new(),
        });
        if with_metrics {
            spawn_unfinished_work_updates(
                Arc::downgrade(&shared),
                config.unfinished_work_update_period,
            );
        }
        Self { shared }
    }

    /// Marks `item` as needing processing, in the high lane.
    ///
    /// If it is already waiting, nothing changes (except that an item waiting in the low lane
    /// moves up to the high lane). If a worker is processing it, it is queued again when that
    /// worker calls [`done`](Self::done). After shutdown, adds are ignored.
    pub fn add(&self, item: T) {
        self.add_with_priority(item, Priority::High);
    }

    /// Marks `item` as needing processing, in the given lane.
    ///
    /// [`get`](Self::get) serves the high lane first, but while both lanes have items waiting,
    /// one get in [`LOW_LANE_TURN`] serves the low lane, so neither starves; within a lane,
    /// items are handed out in the order they were queued. Collapsing, the never-concurrent rule
    /// and re-queueing at `done` work exactly as with [`add`](Self::add), across lanes: an item
    /// is waiting at most once, in one lane. Adding a waiting item with a higher priority moves
    /// it to the back of the high lane; a lower priority never moves it down. An item added
    /// while being processed is queued at `done` in the highest lane it was added with
    /// meanwhile. A [custom order](QueueConfig::order) ignores lanes.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// use kctrl_workqueue::{Priority, Queue};
    ///
    /// let queue = Queue::new();
    /// queue.add_with_priority("default/listed", Priority::Low);
    /// queue.add("default/changed");
    /// assert_eq!(queue.lane_len(Priority::Low), 1);
    /// assert_eq!(queue.get().await, Some("default/changed"));
    /// assert_eq!(queue.get().await, Some("default/listed"));
    /// # }
    /// ```
    pub fn add_with_priority(&self, item: T, priority: Priority) {
        let hash = self.shared.hasher.hash_one(&item);
        self.add_hashed(Incoming::Owned(item), hash, priority);
    }

    /// Like [`add`](Self::add), but borrows the item and clones it only if the queue keeps it:
    /// adding an item that is already waiting or being processed clones nothing. Handy when the
    /// caller keeps its own copy of the key (with `Arc<str>` keys it saves two reference-count
    /// updates per collapsed add).
    pub fn add_ref(&self, item: &T) {
        let hash = self.shared.hasher.hash_one(item);
        self.add_hashed(Incoming::Borrowed(item), hash, Priority::High);
    }

    fn add_hashed(&self, item: Incoming<'_, T>, hash: u64, priority: Priority) {
        let added = self.shared.lock().add(item, hash, priority);
        if added.wake_getter {
            self.shared.getters.notify_one();
        }
        drop(added.rejected);
    }

    /// Adds several items, taking the lock once.
    pub(crate) fn add_all(&self, items: &mut Vec<T>) {
        let hasher = &self.shared.hasher;
        let hashes: Vec<u64> = items.iter().map(|item| hasher.hash_one(item)).collect();
        let mut rejected = Vec::new();
        let mut wake = 0;
        {
            let mut state = self.shared.lock();
            for (item, hash) in items.drain(..).zip(hashes) {
                let added = state.add(Incoming::Owned(item), hash, Priority::High);
                wake += usize::from(added.wake_getter);
                rejected.extend(added.rejected);
            }
        }
        for _ in 0..wake {
            self.shared.getters.notify_one();
        }
    }

    /// Number of items waiting to be handed out (not counting items being processed).
    /// Informational only: it may change as soon as it is read.
    pub fn len(&self) -> usize {
        self.shared.lock().order.len()
    }

    /// Whether no item is waiting to be handed out.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Number of items waiting in one lane; 0 with a [custom order](QueueConfig::order). The
    /// lanes sum to [`len`](Self::len). Informational only.
    pub fn lane_len(&self, priority: Priority) -> usize {
        self.shared.lock().order.lane_len(priority)
    }

    /// Waits for the next item and marks it as being processed.
    ///
    /// Returns `None` once the queue is shut down *and* empty: items queued before shutdown are
    /// still handed out. Call [`done`](Self::done) when finished with the item.
    ///
    /// Cancel-safe: an item is taken only in the poll that returns it.
    pub async fn get(&self) -> Option<T> {
        let shared = &*self.shared;
        // Fast path: an item is waiting; no need to touch the wake-up machinery.
        if let Some(item) = shared.lock().take_next(&shared.hasher) {
            return Some(item);
        }
        loop {
            let mut parked = pin!(shared.getters.notified());
            {
                let mut state = shared.lock();
                if let Some(item) = state.take_next(&shared.hasher) {
                    return Some(item);
                }
                if state.shutting_down {
                    return None;
                }
                // Register before releasing the lock, so an add that follows cannot miss us.
                parked.as_mut().enable();
                state.parked_getters += 1;
            }
            parked.await;
        }
    }

    /// Marks `item` as no longer being processed. If it was added while being processed, it is
    /// queued again now. Calling it for an item that is not being processed does nothing.
    pub fn done(&self, item: &T) {
        let hash = self.shared.hasher.hash_one(item);
        let finished = self.shared.lock().done(item, hash);
        if finished.wake_getter {
            self.shared.getters.notify_one();
        }
        if finished.wake_drain {
            self.shared.drained.notify_waiters();
        }
        drop(finished.released);
    }

    /// Stops accepting items. Workers keep getting the items already queued, then `None`.
    /// Does not wait for anything; idempotent. Also releases a pending
    /// [`shut_down_with_drain`](Self::shut_down_with_drain).
    pub fn shut_down(&self) {
        self.close(false);
    }

    /// Like [`shut_down`](Self::shut_down), then waits until no item is being processed.
    ///
    /// Workers must call [`done`](Self::done) for every item they got, or this waits forever; a
    /// later [`shut_down`](Self::shut_down) stops the wait. Items added while being processed are
    /// still queued again by `done` and handed out.
    pub async fn shut_down_with_drain(&self) {
        self.close(true);
        let shared = &*self.shared;
        loop {
            let mut drained = pin!(shared.drained.notified());
            {
                let state = shared.lock();
                if state.processing == 0 || !state.drain {
                    return;
                }
                drained.as_mut().enable();
            }
            drained.await;
        }
    }

    /// Whether [`shut_down`](Self::shut_down) or
    /// [`shut_down_with_drain`](Self::shut_down_with_drain) was called.
    pub fn shutting_down(&self) -> bool {
        self.shared.lock().shutting_down
    }

    /// Completes once the queue is shutting down.
    pub(crate) async fn closed(&self) {
        loop {
            let mut closed = pin!(self.shared.closed.notified());
            closed.as_mut().enable();
            if self.shutting_down() {
                return;
            }
            closed.await;
        }
    }

    fn close(&self, drain: bool) {
        {
            let mut state = self.shared.lock();
            state.shutting_down = true;
            state.drain = drain;
            state.parked_getters = 0;
        }
        self.shared.getters.notify_waiters();
        self.shared.closed.notify_waiters();
        if !drain {
            self.shared.drained.notify_waiters();
        }
    }
}

impl<T> Shared<T> {
    fn lock(&self) -> MutexGuard<'_, State<T>> {
        // A panic in a user-supplied order or metric must not wedge every later call: this lock
        // does not poison, and the state is updated in small steps that leave it consistent.
        self.state.lock()
    }
}

/// Refreshes the unfinished-work gauges every `period` until the queue shuts down or is dropped.
fn spawn_unfinished_work_updates<T: Item>(shared: Weak<Shared<T>>, period: Duration) {
    let first = Instant::now() + period;
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval_at(first, period);
        ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            let Some(shared) = shared.upgrade() else {
                return;
            };
            let state = shared.lock();
            if state.shutting_down {
                return;
            }
            if let Some(metrics) = &state.metrics {
                metrics.update_unfinished_work();
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::sync::Mutex as StdMutex;

    use super::*;

    #[tokio::test]
    async fn get_hands_out_queued_items_after_shut_down_then_none() {
        let queue = Queue::new();
        queue.add(1);
        queue.add(2);
        queue.shut_down();
        queue.add(3); // ignored
        assert_eq!(queue.len(), 2);
        assert_eq!(queue.get().await, Some(1));
        assert_eq!(queue.get().await, Some(2));
        assert_eq!(queue.get().await, None);
        assert_eq!(queue.get().await, None, "stays shut down");
    }

    #[tokio::test]
    async fn add_ref_clones_only_what_the_queue_keeps() {
        let key = Arc::new("default/web".to_string());
        let queue = Queue::new();
        queue.add_ref(&key);
        let kept = Arc::strong_count(&key);
        assert!(kept > 1, "a new item is cloned into the queue");
        queue.add_ref(&key);
        assert_eq!(
            Arc::strong_count(&key),
            kept,
            "a collapsed add clones nothing"
        );
        assert_eq!(queue.len(), 1);

        let item = queue.get().await.unwrap();
        queue.add_ref(&key); // while processing: marked dirty, nothing cloned
        queue.done(&item);
        assert_eq!(queue.get().await, Some(key.clone()), "queued again at done");
    }

    #[tokio::test]
    async fn done_for_an_item_not_being_processed_does_nothing() {
        let queue = Queue::new();
        queue.done(&"never-added");
        queue.add("a");
        queue.done(&"a"); // queued, not processing: must not queue it twice
        assert_eq!(queue.len(), 1);
        let item = queue.get().await.unwrap();
        queue.done(&item);
        queue.done(&item); // second done is a no-op
        assert_eq!(queue.len(), 0);
        queue.shut_down();
        assert_eq!(queue.get().await, None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_cancelled_get_does_not_swallow_a_wake_up() {
        let queue = Queue::<u32>::new();
        let cancelled = tokio::spawn({
            let queue = queue.clone();
            async move { queue.get().await }
        });
        let waiting = tokio::spawn({
            let queue = queue.clone();
            async move { queue.get().await }
        });
        tokio::task::yield_now().await;
        cancelled.abort();
        assert!(cancelled.await.unwrap_err().is_cancelled());

        queue.add(7);
        let got = tokio::time::timeout(Duration::from_secs(1), waiting)
            .await
            .expect("the remaining getter must be woken")
            .unwrap();
        assert_eq!(got, Some(7));
    }

    #[tokio::test(start_paused = true)]
    async fn shut_down_with_drain_returns_at_once_when_idle() {
        let queue = Queue::<u32>::new();
        queue.add(1);
        tokio::time::timeout(Duration::from_secs(1), queue.shut_down_with_drain())
            .await
            .expect("nothing is being processed");
        // The queued item is still handed out.
        assert_eq!(queue.get().await, Some(1));
    }

    /// A last-in-first-out order, to show that the order is pluggable.
    #[derive(Default)]
    struct Lifo(Vec<u32>);

    impl QueueOrder<u32> for Lifo {
        fn touch(&mut self, _item: &u32) {}
        fn push(&mut self, item: u32) {
            self.0.push(item);
        }
        fn len(&self) -> usize {
            self.0.len()
        }
        fn pop(&mut self) -> Option<u32> {
            self.0.pop()
        }
    }

    #[tokio::test]
    async fn a_custom_order_decides_what_comes_next() {
        let queue = Queue::with_config(QueueConfig::new().order(Lifo::default()));
        for item in [1, 2, 3] {
            queue.add(item);
        }
        queue.add(2); // collapsed, still once
        let mut got = Vec::new();
        while !queue.is_empty() {
            let item = queue.get().await.unwrap();
            queue.done(&item);
            got.push(item);
        }
        assert_eq!(got, [3, 2, 1]);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn an_item_is_never_processed_by_two_workers_at_once() {
        let queue = Queue::<u32>::new();
        let in_progress = Arc::new(StdMutex::new(HashSet::new()));
        let workers: Vec<_> = (0..8)
            .map(|_| {
                let queue = queue.clone();
                let in_progress = Arc::clone(&in_progress);
                tokio::spawn(async move {
                    let mut processed = 0u32;
                    while let Some(item) = queue.get().await {
                        assert!(
                            in_progress.lock().unwrap().insert(item),
                            "{item} handed out twice"
                        );
                        tokio::task::yield_now().await;
                        // Re-adding while processing must not hand it to someone else now.
                        queue.add(item);
                        in_progress.lock().unwrap().remove(&item);
                        queue.done(&item);
                        processed += 1;
                        if processed > 2_000 {
                            break;
                        }
                    }
                })
            })
            .collect();
        let producers: Vec<_> = (0..4)
            .map(|p| {
                let queue = queue.clone();
                tokio::spawn(async move {
                    for i in 0..5_000u32 {
                        queue.add((i * 4 + p) % 64);
                        if i % 16 == 0 {
                            tokio::task::yield_now().await;
                        }
                    }
                })
            })
            .collect();
        for producer in producers {
            producer.await.unwrap();
        }
        queue.shut_down();
        for worker in workers {
            worker.await.unwrap();
        }
    }

    async fn drain_all<T: Item>(queue: &Queue<T>) -> Vec<T> {
        let mut got = Vec::new();
        while !queue.is_empty() {
            let item = queue.get().await.unwrap();
            queue.done(&item);
            got.push(item);
        }
        got
    }

    #[tokio::test]
    async fn the_high_lane_is_served_first_and_the_low_lane_gets_its_turn() {
        let queue = Queue::new();
        for item in 0..4 {
            queue.add_with_priority(100 + item, Priority::Low);
        }
        for item in 0..10 {
            queue.add(item);
        }
        assert_eq!(queue.lane_len(Priority::High), 10);
        assert_eq!(queue.lane_len(Priority::Low), 4);
        let got = drain_all(&queue).await;
        // Every LOW_LANE_TURN-th get while both lanes wait serves the low lane.
        assert_eq!(
            got,
            [0, 1, 2, 3, 100, 4, 5, 6, 7, 101, 8, 9, 102, 103],
            "four high, one low, ...; then the rest of the low lane"
        );
    }

    #[tokio::test]
    async fn a_low_lane_alone_is_served_in_order() {
        let queue = Queue::new();
        for item in [3, 1, 2] {
            queue.add_with_priority(item, Priority::Low);
        }
        assert_eq!(drain_all(&queue).await, [3, 1, 2]);
    }

    #[tokio::test]
    async fn a_waiting_item_rises_to_the_high_lane_and_is_handed_out_once() {
        let queue = Queue::new();
        for item in 0..8 {
            queue.add_with_priority(item, Priority::Low);
        }
        queue.add(5); // rises
        queue.add(5); // already high: collapsed
        queue.add_with_priority(5, Priority::Low); // never moves down
        assert_eq!(queue.len(), 8, "still one entry per item");
        let got = drain_all(&queue).await;
        assert_eq!(got[0], 5, "the raised item comes first");
        assert_eq!(got.iter().filter(|&&item| item == 5).count(), 1);
        assert_eq!(got.len(), 8);
        assert_eq!(queue.len(), 0, "the stale low entry is not counted");
        queue.shut_down();
        assert_eq!(queue.get().await, None);
    }

    #[tokio::test]
    async fn an_item_re_added_high_while_processing_is_requeued_high_at_done() {
        let queue = Queue::new();
        queue.add_with_priority("a", Priority::Low);
        let a = queue.get().await.unwrap();
        for item in ["b", "c", "d", "e", "f"] {
            queue.add_with_priority(item, Priority::Low);
        }
        queue.add_with_priority("a", Priority::Low);
        queue.add("a"); // the lane it goes back to rises too
        assert_eq!(queue.len(), 5, "not queued while processing");
        queue.done(&a);
        assert_eq!(queue.lane_len(Priority::High), 1);
        assert_eq!(queue.get().await, Some("a"), "high lane first");
    }

    #[tokio::test]
    async fn an_item_re_added_low_while_processing_is_requeued_low_at_done() {
        let queue = Queue::new();
        queue.add("a");
        let a = queue.get().await.unwrap();
        queue.add_with_priority("a", Priority::Low);
        queue.done(&a);
        assert_eq!(queue.lane_len(Priority::Low), 1);
        assert_eq!(queue.lane_len(Priority::High), 0);
    }

    #[tokio::test]
    async fn a_custom_order_sees_every_lane() {
        let queue = Queue::with_config(QueueConfig::new().order(Lifo::default()));
        queue.add_with_priority(1, Priority::Low);
        queue.add(2);
        queue.add_with_priority(3, Priority::Low);
        queue.add(1); // rise: a touch for the custom order, no second entry
        assert_eq!(queue.len(), 3);
        assert_eq!(drain_all(&queue).await, [3, 2, 1]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_parked_getter_is_woken_by_a_low_lane_add() {
        let queue = Queue::<u32>::new();
        let getter = tokio::spawn({
            let queue = queue.clone();
            async move { queue.get().await }
        });
        tokio::task::yield_now().await;
        queue.add_with_priority(9, Priority::Low);
        let got = tokio::time::timeout(Duration::from_secs(1), getter)
            .await
            .expect("woken")
            .unwrap();
        assert_eq!(got, Some(9));
    }

    #[tokio::test(start_paused = true)]
    async fn shut_down_with_drain_waits_for_items_in_either_lane() {
        let queue = Queue::new();
        queue.add_with_priority(1, Priority::Low);
        queue.add(2);
        let first = queue.get().await.unwrap();
        let drain = tokio::spawn({
            let queue = queue.clone();
            async move { queue.shut_down_with_drain().await }
        });
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert!(!drain.is_finished(), "an item is being processed");
        queue.add(first); // ignored after shutdown
        queue.done(&first);
        tokio::time::timeout(Duration::from_secs(1), drain)
            .await
            .expect("drained")
            .unwrap();
        let second = queue.get().await.unwrap();
        assert_ne!(second, first, "the other lane's item is still handed out");
        queue.done(&second);
        assert_eq!(queue.get().await, None);
    }

    #[tokio::test]
    async fn lane_lengths_stay_exact_and_fifo_holds_after_a_rise() {
        let queue = Queue::new();
        for item in [1, 2, 3] {
            queue.add_with_priority(item, Priority::Low);
        }
        queue.add(1); // rises; its low entry goes stale
        assert_eq!(queue.lane_len(Priority::High), 1);
        assert_eq!(queue.lane_len(Priority::Low), 2);
        assert_eq!(queue.len(), 3);
        let one = queue.get().await.unwrap();
        assert_eq!(one, 1);
        queue.done(&one);
        // Queued low again behind 2 and 3: the stale entry ahead of them must not serve it.
        queue.add_with_priority(1, Priority::Low);
        queue.add_with_priority(4, Priority::Low);
        assert_eq!(queue.lane_len(Priority::Low), 4);
        assert_eq!(drain_all(&queue).await, [2, 3, 1, 4]);
        assert_eq!(queue.len(), 0);
    }

    #[tokio::test]
    async fn a_stale_entry_does_not_serve_an_item_that_is_processing() {
        let queue = Queue::new();
        queue.add_with_priority("a", Priority::Low);
        queue.add("a"); // rises; stale low entry
        let a = queue.get().await.unwrap();
        queue.add_with_priority("a", Priority::Low); // dirty while processing
        assert_eq!(queue.len(), 0, "only the stale entry is left");
        queue.shut_down();
        assert_eq!(queue.get().await, None, "the stale entry is skipped");
        queue.done(&a);
        assert_eq!(queue.get().await, Some("a"), "queued again at done");
    }
}

//! The in-order queue between the reflector and the cache: client-go's `RealFIFO` in
//! atomic mode (the 1.36 default).
//!
//! Every event is queued as its own [`Delta`] and delivered once, in arrival order; nothing
//! is collapsed per key. A relist is one [`Delta::ReplacedAll`], a resync one
//! [`Delta::SyncAll`], a bookmark one [`Delta::Bookmark`]: the consumer diffs them against
//! its [`Store`](crate::Store).
//!
//! The queue also answers "has the initial list been processed?" ([`Fifo::has_synced`],
//! [`Fifo::synced`]): a delta counts as processed only once the consumer's callback
//! returned, so a cache is never reported synced while it is still being filled.

use kctrl_client::ObjectMetaAccess;
use std::collections::{HashSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use k8s_openapi::Metadata;
use tokio::sync::{Notify, watch};

use crate::delta::{Delta, ReflectorStore};
use crate::keys::ObjectKey;
use crate::metrics::GaugeMetric;
use crate::shard::Reshard;

/// A function applied to every incoming object before it is queued (client-go's
/// `TransformFunc`), e.g. to drop `managedFields` and save memory.
pub type Transform<K> = Arc<dyn Fn(K) -> K + Send + Sync>;

/// How many deltas [`Fifo::pop_batch`] takes at most in client-go (`defaultBatchSize`).
pub const DEFAULT_BATCH_SIZE: usize = 1000;

/// What `synced()` waiters watch.
#[derive(Debug, Clone, Copy, Default)]
struct Status {
    synced: bool,
    closed: bool,
}

struct State<K> {
    items: VecDeque<Delta<K>>,
    closed: bool,
    /// An add/update/delete or the first replace arrived.
    populated: bool,
    /// Deltas of the initial population (everything up to and including the first
    /// replace) not yet processed.
    initial_population_count: usize,
    synced: bool,
}

struct Shared<K> {
    state: Mutex<State<K>>,
    /// Signalled when an item is queued or the queue is closed.
    changed: Notify,
    status: watch::Sender<Status>,
    transform: Option<Transform<K>>,
    /// `informer_queued_items`, set to the queue's length after every push and pop.
    queued_items: Option<Arc<dyn GaugeMetric>>,
}

/// The in-order delta queue (client-go's `RealFIFO`). Cheap to clone; clones share the
/// queue. Producers are the [`ReflectorStore`] methods; the consumer (one task) calls
/// [`pop`](Self::pop) or [`pop_batch`](Self::pop_batch).
pub struct Fifo<K> {
    shared: Arc<Shared<K>>,
}

impl<K> Clone for Fifo<K> {
    fn clone(&self) -> Self {
        Self {
            shared: self.shared.clone(),
        }
    }
}

impl<K> std::fmt::Debug for Fifo<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let st = self.shared.lock();
        f.debug_struct("Fifo")
            .field("len", &st.items.len())
            .field("closed", &st.closed)
            .field("synced", &st.synced)
            .finish_non_exhaustive()
    }
}

impl<K> Default for Fifo<K> {
    fn default() -> Self {
        Self::new(None)
    }
}

/// Which sync bookkeeping a push does.
#[derive(Clone, Copy, PartialEq, Eq)]
enum PushKind {
    /// add/update/delete: the queue counts as populated (synced if nothing is pending).
    Event,
    /// A replace: the first one fixes the initial population.
    Replace,
    /// Resync, bookmark: no effect on sync.
    Other,
}

impl<K> Shared<K> {
    fn lock(&self) -> MutexGuard<'_, State<K>> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Marks the queue synced once populated and the initial population is processed.
    fn check_synced(&self, st: &mut State<K>) {
        if st.populated && st.initial_population_count == 0 && !st.synced {
            st.synced = true;
            self.status.send_modify(|s| s.synced = true);
        }
    }

    fn push(&self, delta: Delta<K>, kind: PushKind) {
        let mut st = self.lock();
        if kind == PushKind::Event {
            st.populated = true;
            self.check_synced(&mut st);
        }
        st.items.push_back(delta);
        if kind == PushKind::Replace && !st.populated {
            st.populated = true;
            st.initial_population_count = st.items.len();
            self.check_synced(&mut st);
        }
        self.publish_len(&st);
        drop(st);
        self.changed.notify_waiters();
    }

    /// Sets `informer_queued_items`, if the queue has it.
    fn publish_len(&self, st: &State<K>) {
        if let Some(gauge) = &self.queued_items {
            gauge.set(st.items.len() as f64);
        }
    }

    /// Waits until the queue has an item (then runs `take` under the lock) or is closed
    /// and empty (`None`).
    async fn take<T>(&self, take: impl FnOnce(&mut State<K>) -> T) -> Option<T> {
        let mut take = Some(take);
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            // Register before looking, so a push between the look and the await wakes us.
            notified.as_mut().enable();
            {
                let mut st = self.lock();
                if !st.items.is_empty() {
                    let take = take.take().expect("take runs once");
                    let taken = take(&mut st);
                    self.publish_len(&st);
                    return Some(taken);
                }
                if st.closed {
                    return None;
                }
            }
            notified.await;
        }
    }
}

/// Counts popped deltas as processed when dropped (after the consumer's callback, even
/// if it panicked — as client-go's deferred decrement).
struct Processed<'a, K> {
    shared: &'a Shared<K>,
    count: usize,
}

impl<K> Drop for Processed<'_, K> {
    fn drop(&mut self) {
        let mut st = self.shared.lock();
        if st.initial_population_count > 0 {
            st.initial_population_count = st.initial_population_count.saturating_sub(self.count);
            self.shared.check_synced(&mut st);
        }
    }
}

impl<K> Fifo<K> {
    /// An empty queue; `transform`, if any, is applied to every incoming object (also each
    /// object of a replace) before it is queued. A queue fed by a reflector that already
    /// transforms ([`Reflector::with_transform`](crate::Reflector::with_transform), as
    /// [`SharedInformer`](crate::SharedInformer) does) should be built with `None`.
    pub fn new(transform: Option<Transform<K>>) -> Self {
        Self::with_queued_items_metric(transform, None)
    }

    /// [`new`](Self::new), and the queue sets `queued_items` (client-go's
    /// `informer_queued_items`) to its length after every push and pop.
    pub fn with_queued_items_metric(
        transform: Option<Transform<K>>,
        queued_items: Option<Arc<dyn GaugeMetric>>,
    ) -> Self {
        Self {
            shared: Arc::new(Shared {
                state: Mutex::new(State {
                    items: VecDeque::new(),
                    closed: false,
                    populated: false,
                    initial_population_count: 0,
                    synced: false,
                }),
                changed: Notify::new(),
                status: watch::Sender::new(Status::default()),
                transform,
                queued_items,
            }),
        }
    }

    /// Applies the transform, if any, to an incoming object: in place when the queue holds
    /// the only reference (as a reflector's objects are), else to a copy.
    fn transform_shared(&self, obj: Arc<K>) -> Arc<K>
    where
        K: Clone,
    {
        match &self.shared.transform {
            Some(t) => Arc::new(t(Arc::unwrap_or_clone(obj))),
            None => obj,
        }
    }

    /// Waits for the next delta and calls `process(delta, is_in_initial_list)` with it;
    /// returns `process`'s result, or `None` once the queue is closed and empty.
    ///
    /// `is_in_initial_list` is `!has_synced()` at pop time. The delta counts as processed
    /// (for [`has_synced`](Self::has_synced)) only after `process` returns. `process` runs
    /// without the queue's lock, so producers are never blocked by handlers. Meant for a
    /// single consumer: with several, deltas could be processed out of order.
    /// Cancel-safe: a dropped `pop` takes nothing from the queue.
    pub async fn pop<R>(&self, process: impl FnOnce(Delta<K>, bool) -> R) -> Option<R> {
        let (delta, initial) = self
            .shared
            .take(|st| {
                let delta = st.items.pop_front().expect("queue not empty");
                (delta, !st.synced)
            })
            .await?;
        let _processed = Processed {
            shared: &self.shared,
            count: 1,
        };
        Some(process(delta, initial))
    }

    /// Closes the queue: pops still drain what is queued, then return `None`.
    pub fn close(&self) {
        let mut st = self.shared.lock();
        st.closed = true;
        drop(st);
        self.shared.status.send_modify(|s| s.closed = true);
        self.shared.changed.notify_waiters();
    }

    /// Whether [`close`](Self::close) was called.
    pub fn is_closed(&self) -> bool {
        self.shared.lock().closed
    }

    /// Number of queued deltas.
    pub fn len(&self) -> usize {
        self.shared.lock().items.len()
    }

    /// Whether no delta is queued.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether the initial state has been delivered: an add, update or delete arrived
    /// before any replace, or the first replace (and everything queued before it) has been
    /// popped and processed.
    pub fn has_synced(&self) -> bool {
        self.shared.lock().synced
    }

    /// Waits until [`has_synced`](Self::has_synced); returns `true` then, or `false` if the
    /// queue is closed first.
    pub async fn synced(&self) -> bool {
        let mut rx = self.shared.status.subscribe();
        match rx.wait_for(|s| s.synced || s.closed).await {
            Ok(s) => s.synced,
            Err(_) => false, // unreachable: `self` holds the sender
        }
    }
}

impl<K> Fifo<K>
where
    K: Metadata<Ty: ObjectMetaAccess>,
{
    /// Waits for deltas and calls `process(batch, is_in_initial_list)` with up to `max`
    /// consecutive ones (client-go's `PopBatch`, for applying them to a store in one
    /// [`transaction`](crate::Store::transaction)); returns `process`'s result, or `None`
    /// once the queue is closed and empty.
    ///
    /// A batch holds only adds, updates and deletes of distinct objects, and never crosses
    /// the end of the initial population; a [`Delta::ReplacedAll`], [`Delta::SyncAll`] or
    /// [`Delta::Bookmark`] comes alone. So a batch is never empty, and its deltas all have
    /// the same `is_in_initial_list`. Otherwise as [`pop`](Self::pop).
    pub async fn pop_batch<R>(
        &self,
        max: usize,
        process: impl FnOnce(Vec<Delta<K>>, bool) -> R,
    ) -> Option<R> {
        let (batch, initial) = self
            .shared
            .take(|st| {
                let n = batch_len(st, max);
                (st.items.drain(..n).collect::<Vec<_>>(), !st.synced)
            })
            .await?;
        let _processed = Processed {
            shared: &self.shared,
            count: batch.len(),
        };
        Some(process(batch, initial))
    }
}

/// How many deltas from the front of a non-empty queue form the next batch.
fn batch_len<K: Metadata<Ty: ObjectMetaAccess>>(st: &State<K>, max: usize) -> usize {
    let mut limit = max.max(1).min(st.items.len());
    if st.initial_population_count > 0 {
        limit = limit.min(st.initial_population_count);
    }
    // foldhash: std's SipHash is slower, and its resistance to chosen keys is not needed by
    // a set that lives for one call.
    let mut seen: HashSet<(&str, &str), foldhash::fast::RandomState> =
        HashSet::with_capacity_and_hasher(limit, Default::default());
    for (i, delta) in st.items.iter().take(limit).enumerate() {
        let obj = match delta {
            Delta::Added(o) | Delta::Updated(o) | Delta::Deleted(o) => o,
            // Processed alone; ends a batch.
            Delta::ReplacedAll { .. }
            | Delta::Resharded(_)
            | Delta::SyncAll
            | Delta::Bookmark(_) => {
                return i.max(1);
            }
        };
        let meta = obj.metadata();
        let id = (
            meta.namespace().unwrap_or_default(),
            meta.name().unwrap_or_default(),
        );
        if !seen.insert(id) {
            return i; // a second delta for one object ends the batch (i ≥ 1 here)
        }
    }
    limit
}

impl<K> ReflectorStore<K> for Fifo<K>
where
    K: Clone + Send + Sync + 'static,
{
    fn add(&self, obj: Arc<K>) {
        let obj = self.transform_shared(obj);
        self.shared.push(Delta::Added(obj), PushKind::Event);
    }

    fn update(&self, obj: Arc<K>) {
        let obj = self.transform_shared(obj);
        self.shared.push(Delta::Updated(obj), PushKind::Event);
    }

    fn delete(&self, obj: Arc<K>) {
        let obj = self.transform_shared(obj);
        self.shared.push(Delta::Deleted(obj), PushKind::Event);
    }

    fn replace(&self, objects: Vec<Arc<K>>, resource_version: String) {
        self.replace_keeping(objects, Vec::new(), resource_version);
    }

    fn replace_keeping(
        &self,
        objects: Vec<Arc<K>>,
        kept: Vec<ObjectKey>,
        resource_version: String,
    ) {
        let objects = if self.shared.transform.is_some() {
            objects
                .into_iter()
                .map(|o| self.transform_shared(o))
                .collect()
        } else {
            objects
        };
        self.shared.push(
            Delta::ReplacedAll {
                objects,
                resource_version,
                kept,
            },
            PushKind::Replace,
        );
    }

    fn reshard(&self, mut change: Reshard<K>) -> Result<(), Reshard<K>> {
        if self.shared.transform.is_some() {
            change.objects = std::mem::take(&mut change.objects)
                .into_iter()
                .map(|o| self.transform_shared(o))
                .collect();
        }
        self.shared.push(Delta::Resharded(change), PushKind::Other);
        Ok(())
    }

    fn resync(&self) {
        self.shared.push(Delta::SyncAll, PushKind::Other);
    }

    fn bookmark(&self, resource_version: String) {
        self.shared
            .push(Delta::Bookmark(resource_version), PushKind::Other);
    }
}

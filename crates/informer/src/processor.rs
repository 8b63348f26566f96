//! Fan-out of notifications to the handlers of one shared informer (client-go's
//! `sharedProcessor` and `processorListener`).
//!
//! Each handler gets a [`Listener`]: an unbounded buffer and a drain job that calls the handler
//! sequentially. Adding a notification never waits, so a slow handler only grows its own
//! buffer and never stalls the informer or the other handlers. Where the drain job runs is the
//! handler's [`Delivery`]: by default on tokio's blocking pool, because handlers are
//! synchronous functions and one that blocks for a while must not block a runtime worker; a
//! handler that only enqueues keys can ask to run as a task on the runtime instead, which saves
//! a hand-off to another thread (a futex wake and two context switches) per burst of events.
//!
//! The processor also owns the per-handler resync bookkeeping: which listeners are due for a
//! resync (and so receive resync updates) is decided each time the reflector asks
//! [`Processor::should_resync`].

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::runtime::Handle;
use tokio::sync::{Notify, watch};
use tokio::time::Instant;

use crate::contain::contain;
use crate::delta::DeletedObject;
use crate::handler::ResourceEventHandler;

/// Requested resync periods below this are raised to it (client-go's `minimumResyncPeriod`).
pub(crate) const MINIMUM_RESYNC_PERIOD: Duration = Duration::from_secs(1);

/// Notifications a [`Delivery::Runtime`] drain task delivers before it yields to the other
/// tasks of its worker thread.
const RUNTIME_BATCH: usize = 64;

/// Where a handler is called.
///
/// Either way a handler is called sequentially, one notification at a time, in order, and a
/// slow handler delays only itself.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Delivery {
    /// On tokio's blocking pool: the handler may block (take a contended lock, do a little
    /// I/O) without stalling the runtime. The default, and what client-go's per-handler
    /// goroutines amount to.
    #[default]
    BlockingPool,
    /// As a task on the runtime that runs the informer, yielding every few notifications. For
    /// handlers that return at once, such as ones that only add keys to a workqueue: no thread
    /// is woken to deliver a notification. A handler that blocks here blocks a runtime worker.
    Runtime,
}

/// One notification for one handler.
pub(crate) enum Notification<K> {
    Add {
        obj: Arc<K>,
        is_in_initial_list: bool,
    },
    Update {
        old: Arc<K>,
        new: Arc<K>,
    },
    Delete(DeletedObject<K>),
}

impl<K> Clone for Notification<K> {
    fn clone(&self) -> Self {
        match self {
            Notification::Add {
                obj,
                is_in_initial_list,
            } => Notification::Add {
                obj: obj.clone(),
                is_in_initial_list: *is_in_initial_list,
            },
            Notification::Update { old, new } => Notification::Update {
                old: old.clone(),
                new: new.clone(),
            },
            Notification::Delete(d) => Notification::Delete(d.clone()),
        }
    }
}

impl<K> Notification<K> {
    fn is_initial_add(&self) -> bool {
        matches!(
            self,
            Notification::Add {
                is_in_initial_list: true,
                ..
            }
        )
    }
}

/// Where an informer is on its way to a synced cache; what a handler's sync follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SyncState {
    /// Running (or not started yet); the initial list is not in the store yet.
    Pending,
    /// The initial list is in the store. Stays so when the informer is stopped afterwards.
    Synced,
    /// Stopped (cancelled, or its `run` future dropped) before it synced: it never will.
    Stopped,
    /// Stopped because code it ran panicked where the panic could not be contained: its
    /// cache no longer follows the server, so it counts as not synced.
    Failed,
}

/// The initial-list adds queued for one handler and not yet delivered, and whether the
/// handler was removed (or the informer stopped): then the rest never will be.
#[derive(Clone, Copy, Debug, Default)]
struct PendingInitial {
    count: usize,
    closed: bool,
    /// Closed while the informer had not synced yet, or with initial-list adds undelivered:
    /// the handler never got the whole initial list, so it never counts as synced.
    closed_unsynced: bool,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// When a resync `period` after `now` is due; a period too long to add to an instant
/// (`Duration::MAX`) is due in about 30 years, which is never for a process.
pub(crate) fn resync_due(now: Instant, period: Duration) -> Instant {
    now.checked_add(period)
        .unwrap_or_else(|| now + Duration::from_secs(FAR_FUTURE_SECS))
}

/// About 30 years, in seconds: "never" for a deadline that must still be an instant.
pub(crate) const FAR_FUTURE_SECS: u64 = 86_400 * 365 * 30;

/// The effective resync period of a handler that asked for `desired` on an informer that
/// checks every `check` (client-go's `determineResyncPeriod`).
pub(crate) fn determine_resync_period(desired: Duration, check: Duration) -> Duration {
    if desired.is_zero() {
        return desired;
    }
    if check.is_zero() {
        tracing::info!(
            ?desired,
            "the requested resync period is ignored: this shared informer does not resync"
        );
        return Duration::ZERO;
    }
    if desired < check {
        tracing::info!(
            ?desired,
            resync_check_period = ?check,
            "the requested resync period is raised to the informer's resync check period"
        );
        return check;
    }
    desired
}

struct Resync {
    /// What the handler asked for (after the 1 s minimum).
    requested: Duration,
    /// What is used: `requested` adjusted to the informer's check period; zero = never.
    period: Duration,
    next: Instant,
}

/// The part of a listener a [`HandlerRegistration`](crate::HandlerRegistration) keeps: it does
/// not depend on the object type.
pub(crate) struct ListenerShared {
    pub(crate) id: u64,
    pub(crate) name: &'static str,
    /// Initial-list adds queued but not yet delivered to the handler.
    pending_initial: watch::Sender<PendingInitial>,
    /// The informer's sync.
    upstream: watch::Receiver<SyncState>,
    resync: Mutex<Resync>,
    /// Notifications this handler panicked on (each one skipped).
    panics: AtomicU64,
    /// The same, summed over the informer's handlers.
    informer_panics: Arc<AtomicU64>,
}

impl ListenerShared {
    /// Informer synced and every initial-list add delivered to this handler.
    pub(crate) fn has_synced(&self) -> bool {
        let pending = *self.pending_initial.borrow();
        *self.upstream.borrow() == SyncState::Synced
            && pending.count == 0
            && !pending.closed_unsynced
    }

    /// Resolves to true once [`has_synced`](Self::has_synced) holds, or false if it never can
    /// (the informer stopped or failed before it synced, or is gone; the handler was removed,
    /// or the informer stopped, before every initial-list add reached it).
    pub(crate) async fn synced(&self) -> bool {
        let mut upstream = self.upstream.clone();
        let mut pending = self.pending_initial.subscribe();
        // The informer's sync and this handler's removal, whichever comes first.
        loop {
            if pending.borrow_and_update().closed_unsynced {
                return false;
            }
            match *upstream.borrow_and_update() {
                SyncState::Synced => break,
                SyncState::Pending => {}
                SyncState::Stopped | SyncState::Failed => return false,
            }
            tokio::select! {
                changed = upstream.changed() => {
                    if changed.is_err() {
                        // The informer is gone: it can only have synced before.
                        return *upstream.borrow() == SyncState::Synced
                            && !pending.borrow().closed_unsynced
                            && self.pending_initial.borrow().count == 0;
                    }
                }
                // The sender lives in `self`: this never fails while `self` is borrowed.
                _ = pending.changed() => {}
            }
        }
        // Once the informer has synced, initial-list adds are only ever queued before a
        // registration is handed out, so the counter only goes down from here.
        pending
            .wait_for(|p| p.count == 0 || p.closed)
            .await
            .is_ok_and(|p| p.count == 0 && !p.closed_unsynced)
    }

    pub(crate) fn resync_period(&self) -> Duration {
        lock(&self.resync).period
    }

    /// How many notifications this handler panicked on.
    pub(crate) fn panics(&self) -> u64 {
        self.panics.load(Ordering::Relaxed)
    }

    fn should_resync(&self, now: Instant) -> bool {
        let r = lock(&self.resync);
        !r.period.is_zero() && now >= r.next
    }

    fn determine_next_resync(&self, now: Instant) {
        let mut r = lock(&self.resync);
        r.next = resync_due(now, r.period);
    }

    fn set_check_period(&self, check: Duration) {
        let mut r = lock(&self.resync);
        r.period = determine_resync_period(r.requested, check);
    }
}

struct Buffer<K> {
    items: VecDeque<Notification<K>>,
    /// Set once the processor runs: where drain jobs are spawned.
    runtime: Option<Handle>,
    /// A drain job is running (at most one: the handler is called sequentially).
    draining: bool,
    /// Removed or the informer stopped: notifications are dropped.
    stopped: bool,
}

/// One handler with its own unbounded buffer.
pub(crate) struct Listener<K> {
    pub(crate) shared: Arc<ListenerShared>,
    handler: Box<dyn ResourceEventHandler<K>>,
    delivery: Delivery,
    buffer: Mutex<Buffer<K>>,
    /// Signalled when a drain job ends.
    idle: Notify,
}

static NEXT_LISTENER_ID: AtomicU64 = AtomicU64::new(1);

impl<K: Send + Sync + 'static> Listener<K> {
    pub(crate) fn new<H: ResourceEventHandler<K>>(
        handler: H,
        delivery: Delivery,
        requested_resync: Duration,
        resync: Duration,
        now: Instant,
        upstream: watch::Receiver<SyncState>,
        informer_panics: Arc<AtomicU64>,
    ) -> Arc<Self> {
        Arc::new(Self {
            shared: Arc::new(ListenerShared {
                id: NEXT_LISTENER_ID.fetch_add(1, Ordering::Relaxed),
                name: std::any::type_name::<H>(),
                pending_initial: watch::Sender::new(PendingInitial::default()),
                upstream,
                resync: Mutex::new(Resync {
                    requested: requested_resync,
                    period: resync,
                    next: resync_due(now, resync),
                }),
                panics: AtomicU64::new(0),
                informer_panics,
            }),
            handler: Box::new(handler),
            delivery,
            buffer: Mutex::new(Buffer {
                items: VecDeque::new(),
                runtime: None,
                draining: false,
                stopped: false,
            }),
            idle: Notify::new(),
        })
    }

    /// Queues a notification; never blocks.
    pub(crate) fn add(self: &Arc<Self>, n: Notification<K>) {
        let mut buf = lock(&self.buffer);
        if buf.stopped {
            return;
        }
        if n.is_initial_add() {
            // Nobody waits for the count to rise: wake no one.
            self.shared.pending_initial.send_if_modified(|p| {
                p.count += 1;
                false
            });
        }
        buf.items.push_back(n);
        self.spawn_drain_locked(&mut buf);
    }

    /// Starts delivering on `runtime`.
    fn start(self: &Arc<Self>, runtime: Handle) {
        let mut buf = lock(&self.buffer);
        buf.runtime = Some(runtime);
        self.spawn_drain_locked(&mut buf);
    }

    fn spawn_drain_locked(self: &Arc<Self>, buf: &mut Buffer<K>) {
        if buf.draining || buf.stopped || buf.items.is_empty() {
            return;
        }
        if let Some(rt) = &buf.runtime {
            buf.draining = true;
            let me = self.clone();
            // The handles are deliberately dropped: `stop` waits through `idle`.
            match self.delivery {
                Delivery::BlockingPool => drop(rt.spawn_blocking(move || me.drain(usize::MAX))),
                Delivery::Runtime => drop(rt.spawn(async move {
                    while !me.drain(RUNTIME_BATCH) {
                        tokio::task::yield_now().await;
                    }
                })),
            }
        }
    }

    /// Delivers up to `limit` queued notifications. Returns true once the buffer is empty (the
    /// drain job is over), false when `limit` was reached first (the job goes on).
    fn drain(&self, limit: usize) -> bool {
        for _ in 0..limit {
            let next = {
                let mut buf = lock(&self.buffer);
                match buf.items.pop_front() {
                    Some(n) if !buf.stopped => n,
                    _ => {
                        buf.draining = false;
                        drop(buf);
                        self.idle.notify_waiters();
                        return true;
                    }
                }
            };
            self.deliver(next);
        }
        false
    }

    fn deliver(&self, n: Notification<K>) {
        let initial = n.is_initial_add();
        let outcome = contain(&self.shared.panics, || match &n {
            Notification::Add {
                obj,
                is_in_initial_list,
            } => self.handler.on_add(obj, *is_in_initial_list),
            Notification::Update { old, new } => self.handler.on_update(old, new),
            Notification::Delete(d) => self.handler.on_delete(d),
        });
        if let Err(msg) = outcome {
            self.shared.informer_panics.fetch_add(1, Ordering::Relaxed);
            tracing::error!(
                handler = self.shared.name,
                panic = %msg,
                "Observed a panic in an event handler; the notification was skipped"
            );
        }
        if initial {
            // Counted as delivered even when the handler panicked: the handler was called.
            // Waiters only care about zero: wake them then, not once per initial add (thousands
            // at start-up).
            self.shared.pending_initial.send_if_modified(|p| {
                p.count = p.count.saturating_sub(1);
                p.count == 0
            });
        }
    }

    /// Drops queued notifications; the one being delivered, if any, still completes.
    fn close(&self) {
        let mut buf = lock(&self.buffer);
        buf.stopped = true;
        buf.items.clear();
        drop(buf);
        // The initial adds still queued will never be delivered: wake whoever waits. Closed
        // before the informer synced, the handler never gets the initial list at all.
        let synced = *self.shared.upstream.borrow() == SyncState::Synced;
        self.shared.pending_initial.send_modify(|p| {
            p.closed = true;
            if !synced || p.count > 0 {
                p.closed_unsynced = true;
            }
        });
    }

    /// Closes and waits for the notification being delivered, if any.
    async fn stop(&self) {
        self.close();
        loop {
            let idle = self.idle.notified();
            tokio::pin!(idle);
            idle.as_mut().enable();
            if !lock(&self.buffer).draining {
                return;
            }
            idle.await;
        }
    }

    /// Notifications queued and not yet taken by the handler.
    #[cfg(test)]
    fn pending(&self) -> usize {
        lock(&self.buffer).items.len()
    }
}

struct Entry<K> {
    listener: Arc<Listener<K>>,
    /// Due for a resync: receives resync updates (unchanged resourceVersion).
    syncing: bool,
}

struct ProcessorState<K> {
    listeners: Vec<Entry<K>>,
    runtime: Option<Handle>,
}

/// The listeners of one informer.
pub(crate) struct Processor<K> {
    state: Mutex<ProcessorState<K>>,
}

impl<K: Send + Sync + 'static> Processor<K> {
    pub(crate) fn new() -> Self {
        Self {
            state: Mutex::new(ProcessorState {
                listeners: Vec::new(),
                runtime: None,
            }),
        }
    }

    /// Registers a listener (started at once if the processor runs).
    pub(crate) fn add_listener(&self, listener: Arc<Listener<K>>) {
        let mut st = lock(&self.state);
        if let Some(rt) = &st.runtime {
            listener.start(rt.clone());
        }
        st.listeners.push(Entry {
            listener,
            syncing: true,
        });
    }

    /// Unregisters and closes the listener `id`; false if it is not registered here.
    pub(crate) fn remove_listener(&self, id: u64) -> bool {
        let mut st = lock(&self.state);
        let Some(pos) = st.listeners.iter().position(|e| e.listener.shared.id == id) else {
            return false;
        };
        let entry = st.listeners.remove(pos);
        entry.listener.close();
        true
    }

    pub(crate) fn contains(&self, id: u64) -> bool {
        lock(&self.state)
            .listeners
            .iter()
            .any(|e| e.listener.shared.id == id)
    }

    pub(crate) fn len(&self) -> usize {
        lock(&self.state).listeners.len()
    }

    /// Queues `n` for every listener, or, for a resync (`sync`), only for those due.
    pub(crate) fn distribute(&self, n: &Notification<K>, sync: bool) {
        let st = lock(&self.state);
        for e in &st.listeners {
            if !sync || e.syncing {
                e.listener.add(n.clone());
            }
        }
    }

    /// Whether any listener is due for a resync; marks which ones are (client-go's
    /// `shouldResync`, the reflector's `should_resync`).
    pub(crate) fn should_resync(&self, now: Instant) -> bool {
        let mut st = lock(&self.state);
        let mut any = false;
        for e in &mut st.listeners {
            e.syncing = e.listener.shared.should_resync(now);
            if e.syncing {
                any = true;
                e.listener.shared.determine_next_resync(now);
            }
        }
        any
    }

    /// Re-derives every listener's period after the informer's check period changed.
    pub(crate) fn resync_check_period_changed(&self, check: Duration) {
        for e in &lock(&self.state).listeners {
            e.listener.shared.set_check_period(check);
        }
    }

    /// Starts delivering to every listener, now and as they are added.
    pub(crate) fn run(&self, runtime: Handle) {
        let mut st = lock(&self.state);
        for e in &st.listeners {
            e.listener.start(runtime.clone());
        }
        st.runtime = Some(runtime);
    }

    /// Closes every listener and forgets them, without waiting for the deliveries in flight
    /// (for a stop that cannot wait: an informer's `run` future dropped).
    pub(crate) fn close_all(&self) {
        let listeners: Vec<_> = {
            let mut st = lock(&self.state);
            st.runtime = None;
            st.listeners.drain(..).map(|e| e.listener).collect()
        };
        for l in &listeners {
            l.close();
        }
    }

    /// Closes every listener, forgets them, and waits for the deliveries in flight.
    pub(crate) async fn stop(&self) {
        let listeners: Vec<_> = {
            let mut st = lock(&self.state);
            st.runtime = None;
            st.listeners.drain(..).map(|e| e.listener).collect()
        };
        for l in &listeners {
            l.close();
        }
        for l in &listeners {
            l.stop().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;

    use super::*;
    use crate::handler::EventHandlerFns;

    fn upstream(synced: bool) -> (watch::Sender<SyncState>, watch::Receiver<SyncState>) {
        let state = if synced {
            SyncState::Synced
        } else {
            SyncState::Pending
        };
        let (tx, rx) = watch::channel(state);
        (tx, rx)
    }

    fn add(n: u32, initial: bool) -> Notification<u32> {
        Notification::Add {
            obj: Arc::new(n),
            is_in_initial_list: initial,
        }
    }

    #[test]
    fn determine_resync_period_follows_client_go() {
        let s = Duration::from_secs;
        assert_eq!(determine_resync_period(s(0), s(5)), s(0));
        assert_eq!(determine_resync_period(s(3), s(0)), s(0));
        assert_eq!(determine_resync_period(s(3), s(5)), s(5));
        assert_eq!(determine_resync_period(s(7), s(5)), s(7));
    }

    /// On the runtime, delivery is in order, and a long buffer is delivered in batches
    /// between which the worker's other tasks run.
    #[tokio::test(flavor = "current_thread")]
    async fn runtime_delivery_is_in_order_and_yields_between_batches() {
        let delivered = Arc::new(Mutex::new(Vec::new()));
        let sink = delivered.clone();
        let h = EventHandlerFns::<u32>::new().on_add(move |o, _| lock(&sink).push(**o));
        let (_up, up_rx) = upstream(true);
        let l = Listener::new(
            h,
            Delivery::Runtime,
            Duration::ZERO,
            Duration::ZERO,
            Instant::now(),
            up_rx,
            Arc::default(),
        );
        let total = 3 * RUNTIME_BATCH as u32 + 5;
        for i in 0..total {
            l.add(add(i, false));
        }
        l.start(Handle::current());
        // Spawned after the drain task on this single thread: it runs when the drain task
        // yields, which it must do after its first batch.
        let seen = delivered.clone();
        let probe = tokio::spawn(async move { lock(&seen).len() });
        assert_eq!(probe.await.unwrap(), RUNTIME_BATCH);
        loop {
            if lock(&delivered).len() == total as usize {
                break;
            }
            tokio::task::yield_now().await;
        }
        assert_eq!(*lock(&delivered), (0..total).collect::<Vec<_>>());
        l.stop().await;
        l.add(add(total, false));
        tokio::task::yield_now().await;
        assert_eq!(lock(&delivered).len(), total as usize, "nothing after stop");
    }

    #[tokio::test]
    async fn listener_delivers_in_order_and_buffers_before_start() {
        let (tx, rx) = mpsc::channel();
        let tx = Mutex::new(tx);
        let h = EventHandlerFns::<u32>::new().on_add(move |o, _| {
            let _ = lock(&tx).send(**o);
        });
        let (_up, up_rx) = upstream(true);
        let l = Listener::new(
            h,
            Delivery::BlockingPool,
            Duration::ZERO,
            Duration::ZERO,
            Instant::now(),
            up_rx,
            Arc::default(),
        );
        for i in 0..100 {
            l.add(add(i, false));
        }
        assert_eq!(l.pending(), 100, "nothing is delivered before start");
        l.start(Handle::current());
        let got: Vec<u32> = tokio::task::spawn_blocking(move || rx.iter().take(100).collect())
            .await
            .unwrap();
        assert_eq!(got, (0..100).collect::<Vec<_>>());
        l.stop().await;
    }

    #[tokio::test]
    async fn initial_adds_count_until_delivered() {
        let (gate_tx, gate_rx) = mpsc::channel::<()>();
        let gate_rx = Mutex::new(gate_rx);
        let h = EventHandlerFns::<u32>::new().on_add(move |_, _| {
            let _ = lock(&gate_rx).recv();
        });
        let (up, up_rx) = upstream(false);
        let l = Listener::new(
            h,
            Delivery::BlockingPool,
            Duration::ZERO,
            Duration::ZERO,
            Instant::now(),
            up_rx,
            Arc::default(),
        );
        l.add(add(1, true));
        l.add(add(2, true));
        l.start(Handle::current());
        assert!(!l.shared.has_synced());
        up.send_replace(SyncState::Synced);
        assert!(!l.shared.has_synced(), "initial adds not delivered yet");
        gate_tx.send(()).unwrap();
        gate_tx.send(()).unwrap();
        assert!(l.shared.synced().await);
        assert!(l.shared.has_synced());
        l.stop().await;
    }

    /// A handler removed before its informer synced never got the initial list: it must not
    /// count as synced once the informer syncs.
    #[tokio::test]
    async fn handler_removed_before_the_informer_synced_is_never_synced() {
        let p = Processor::<u32>::new();
        let (up, up_rx) = upstream(false);
        let l = Listener::new(
            EventHandlerFns::new(),
            Delivery::Runtime,
            Duration::ZERO,
            Duration::ZERO,
            Instant::now(),
            up_rx,
            Arc::default(),
        );
        p.add_listener(l.clone());
        p.run(Handle::current());
        let shared = l.shared.clone();
        let waiter = tokio::spawn(async move { shared.synced().await });
        tokio::task::yield_now().await;
        assert!(p.remove_listener(l.shared.id));
        // The informer syncs after the removal; the removed handler got nothing of its list.
        up.send_replace(SyncState::Synced);
        assert!(!waiter.await.unwrap(), "synced() must answer false");
        assert!(!l.shared.has_synced());
        assert!(!l.shared.synced().await);
    }

    /// A handler removed after its informer synced and its initial list was delivered stays
    /// synced.
    #[tokio::test]
    async fn handler_removed_after_it_synced_stays_synced() {
        let p = Processor::<u32>::new();
        let (up, up_rx) = upstream(false);
        let l = Listener::new(
            EventHandlerFns::new(),
            Delivery::Runtime,
            Duration::ZERO,
            Duration::ZERO,
            Instant::now(),
            up_rx,
            Arc::default(),
        );
        p.add_listener(l.clone());
        p.run(Handle::current());
        p.distribute(&add(1, true), false);
        up.send_replace(SyncState::Synced);
        assert!(l.shared.synced().await);
        assert!(p.remove_listener(l.shared.id));
        assert!(l.shared.has_synced());
        assert!(l.shared.synced().await);
    }

    #[tokio::test]
    async fn panicking_handler_skips_the_notification() {
        let (tx, rx) = mpsc::channel();
        let tx = Mutex::new(tx);
        let h = EventHandlerFns::<u32>::new().on_add(move |o, _| {
            if **o == 2 {
                panic!("fake panic");
            }
            let _ = lock(&tx).send(**o);
        });
        let (_up, up_rx) = upstream(true);
        let informer_panics = Arc::new(AtomicU64::new(0));
        let l = Listener::new(
            h,
            Delivery::BlockingPool,
            Duration::ZERO,
            Duration::ZERO,
            Instant::now(),
            up_rx,
            informer_panics.clone(),
        );
        l.start(Handle::current());
        for i in 1..=3 {
            l.add(add(i, true));
        }
        assert!(l.shared.synced().await, "a panicking handler still syncs");
        let got: Vec<u32> = rx.try_iter().collect();
        assert_eq!(got, vec![1, 3]);
        assert_eq!(l.shared.panics(), 1);
        assert_eq!(informer_panics.load(Ordering::Relaxed), 1);
        l.add(add(2, false));
        l.add(add(4, false));
        // Delivered in order: once 4 arrived, the second panic has been counted.
        assert_eq!(rx.recv_timeout(Duration::from_secs(10)), Ok(4));
        l.stop().await;
        assert_eq!(l.shared.panics(), 2);
        assert_eq!(informer_panics.load(Ordering::Relaxed), 2);
    }

    #[tokio::test]
    async fn resync_notifications_reach_only_due_listeners() {
        let p = Processor::<u32>::new();
        let now = Instant::now();
        let s = Duration::from_secs;
        let (_up, up_rx) = upstream(true);
        let never = Listener::new(
            EventHandlerFns::new(),
            Delivery::BlockingPool,
            s(0),
            s(0),
            now,
            up_rx.clone(),
            Arc::default(),
        );
        let every2 = Listener::new(
            EventHandlerFns::new(),
            Delivery::Runtime,
            s(2),
            s(2),
            now,
            up_rx,
            Arc::default(),
        );
        p.add_listener(never.clone());
        p.add_listener(every2.clone());
        assert!(!p.should_resync(now + s(1)));
        p.distribute(&add(1, false), true);
        assert_eq!((never.pending(), every2.pending()), (0, 0));
        assert!(p.should_resync(now + s(2)));
        p.distribute(&add(1, false), true);
        p.distribute(&add(2, false), false);
        assert_eq!((never.pending(), every2.pending()), (1, 2));
        assert!(
            !p.should_resync(now + s(3)),
            "next resync is 2 s after the last"
        );
        assert!(p.should_resync(now + s(4)));
    }
}

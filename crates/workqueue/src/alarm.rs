//! Sub-millisecond wake-ups for the delaying queue's waiting loop.
//!
//! Tokio's timer wheel ticks once per millisecond and rounds deadlines up, so a Tokio sleep ends
//! anywhere from 0 to about 2 ms after its deadline. A delayed item should become ready much
//! closer to its time than that. An [`Alarm`] asks one process-wide thread, which sleeps on a
//! condition variable with a nanosecond timeout, to wake a task at a deadline.
//!
//! An alarm is only a hint that makes the waiting loop look again: the loop still arms a Tokio
//! sleep for the same deadline and always decides what is due with Tokio's clock. So correctness
//! never depends on this thread (if it cannot be started, alarms do nothing), and tests on
//! Tokio's paused clock keep working: a wake-up that arrives by the wall clock while the paused
//! clock says "not yet" is just a spurious look.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::future::poll_fn;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, PoisonError, Weak};
use std::task::{Poll, Waker};
use std::time::Instant as StdInstant;

use tokio::time::Instant;

/// One task's alarm: at most one deadline at a time.
pub(crate) struct Alarm {
    slot: Arc<Mutex<Slot>>,
}

#[derive(Default)]
struct Slot {
    /// The deadline the alarm thread should fire at, if armed.
    deadline: Option<StdInstant>,
    /// The deadline that fired last. Re-arming it would fire again at once: on a paused Tokio
    /// clock the waiting loop may still be early by Tokio's reckoning, and must then rely on its
    /// Tokio sleep instead of spinning.
    fired_at: Option<StdInstant>,
    fired: bool,
    waker: Option<Waker>,
}

impl Alarm {
    pub(crate) fn new() -> Self {
        Self {
            slot: Arc::new(Mutex::new(Slot::default())),
        }
    }

    /// Arms the alarm for `deadline`, replacing any earlier deadline.
    pub(crate) fn arm(&self, deadline: Instant) {
        let deadline = deadline.into_std();
        {
            let mut slot = lock(&self.slot);
            if slot.deadline == Some(deadline) || slot.fired_at == Some(deadline) {
                return;
            }
            slot.deadline = Some(deadline);
            slot.fired = false;
        }
        if let Some(service) = service() {
            service.schedule(deadline, Arc::downgrade(&self.slot));
        }
    }

    /// Cancels the pending deadline, if any.
    pub(crate) fn disarm(&self) {
        let mut slot = lock(&self.slot);
        slot.deadline = None;
        slot.fired = false;
    }

    /// Completes when the armed deadline has passed (by the wall clock).
    pub(crate) async fn fired(&self) {
        poll_fn(|cx| {
            let mut slot = lock(&self.slot);
            if slot.fired {
                slot.fired = false;
                return Poll::Ready(());
            }
            match &slot.waker {
                Some(waker) if waker.will_wake(cx.waker()) => {}
                _ => slot.waker = Some(cx.waker().clone()),
            }
            Poll::Pending
        })
        .await;
    }
}

/// The process-wide alarm thread's schedule.
struct Service {
    state: Mutex<Schedule>,
    changed: Condvar,
}

struct Schedule {
    /// Pending deadlines, earliest first. Re-arming leaves the old entry behind; an entry whose
    /// slot no longer holds its deadline is skipped when it comes up.
    heap: BinaryHeap<Reverse<Entry>>,
    /// Heap size that triggers dropping stale entries early.
    compact_at: usize,
}

struct Entry {
    at: StdInstant,
    slot: Weak<Mutex<Slot>>,
}

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        self.at == other.at
    }
}
impl Eq for Entry {}
impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Entry {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.at.cmp(&other.at)
    }
}

impl Entry {
    /// Whether the slot still waits for this deadline.
    fn is_live(&self) -> bool {
        self.slot
            .upgrade()
            .is_some_and(|slot| lock(&slot).deadline == Some(self.at))
    }

    /// Marks the slot fired (if it still waits for this deadline) and returns its waker.
    fn fire(self) -> Option<Waker> {
        let slot = self.slot.upgrade()?;
        let mut slot = lock(&slot);
        if slot.deadline != Some(self.at) {
            return None;
        }
        slot.deadline = None;
        slot.fired_at = Some(self.at);
        slot.fired = true;
        slot.waker.take()
    }
}

const MIN_COMPACT_AT: usize = 1024;

/// The alarm thread, started on first use; `None` if the thread could not be spawned.
fn service() -> Option<&'static Service> {
    static SERVICE: OnceLock<Option<&'static Service>> = OnceLock::new();
    *SERVICE.get_or_init(|| {
        let service: &'static Service = Box::leak(Box::new(Service {
            state: Mutex::new(Schedule {
                heap: BinaryHeap::new(),
                compact_at: MIN_COMPACT_AT,
            }),
            changed: Condvar::new(),
        }));
        std::thread::Builder::new()
            .name("kctrl-workqueue-alarm".into())
            .spawn(move || service.run())
            .ok()
            .map(|_| service)
    })
}

impl Service {
    fn schedule(&self, at: StdInstant, slot: Weak<Mutex<Slot>>) {
        let mut schedule = lock(&self.state);
        let earliest = schedule
            .heap
            .peek()
            .is_none_or(|Reverse(head)| at < head.at);
        schedule.heap.push(Reverse(Entry { at, slot }));
        if schedule.heap.len() >= schedule.compact_at {
            schedule.heap.retain(|Reverse(entry)| entry.is_live());
            schedule.compact_at = (schedule.heap.len() * 2).max(MIN_COMPACT_AT);
        }
        drop(schedule);
        if earliest {
            self.changed.notify_one();
        }
    }

    fn run(&self) -> ! {
        let mut due = Vec::new();
        let mut schedule = lock(&self.state);
        loop {
            let now = StdInstant::now();
            while schedule
                .heap
                .peek()
                .is_some_and(|Reverse(head)| head.at <= now)
            {
                if let Some(Reverse(entry)) = schedule.heap.pop() {
                    due.push(entry);
                }
            }
            if !due.is_empty() {
                drop(schedule);
                for entry in due.drain(..) {
                    if let Some(waker) = entry.fire() {
                        waker.wake();
                    }
                }
                schedule = lock(&self.state);
                continue;
            }
            schedule = match schedule.heap.peek() {
                None => self
                    .changed
                    .wait(schedule)
                    .unwrap_or_else(PoisonError::into_inner),
                Some(Reverse(head)) => {
                    let timeout = head.at.saturating_duration_since(now);
                    self.changed
                        .wait_timeout(schedule, timeout)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0
                }
            };
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

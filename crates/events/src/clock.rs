//! Where the pipeline reads the time: an injectable [`Clock`], so event timestamps, the
//! aggregation window and the spam filter's token refill can be driven by tests.
//!
//! This is wall-clock time (events carry timestamps); retry sleeps use Tokio's timer instead,
//! which tests pause with `start_paused`.

use std::fmt;
use std::sync::Mutex;
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};

/// A source of the current wall-clock time (client-go's `clock.PassiveClock`).
pub trait Clock: Send + Sync + fmt::Debug {
    /// The current time.
    fn now(&self) -> Timestamp;
}

/// The system's real-time clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        Timestamp::now()
    }
}

/// A clock that stands still until told to move (client-go's `testing.FakeClock`).
#[derive(Debug)]
pub struct FakeClock {
    now: Mutex<Timestamp>,
}

impl FakeClock {
    /// A clock reading `start`.
    pub fn new(start: Timestamp) -> Self {
        Self {
            now: Mutex::new(start),
        }
    }

    /// Moves the clock forward by `by` (saturating at the largest representable time).
    pub fn step(&self, by: Duration) {
        let mut now = self.now.lock().unwrap_or_else(|e| e.into_inner());
        *now = add(*now, by);
    }

    /// Sets the clock to `to`.
    pub fn set(&self, to: Timestamp) {
        *self.now.lock().unwrap_or_else(|e| e.into_inner()) = to;
    }
}

impl Clock for FakeClock {
    fn now(&self) -> Timestamp {
        *self.now.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A clock that moves forward by a fixed interval every time it is read, then returns the new
/// time (client-go's `testing.SimpleIntervalClock`): each reading is one "tick" later.
#[derive(Debug)]
pub struct IntervalClock {
    now: Mutex<Timestamp>,
    interval: Duration,
}

impl IntervalClock {
    /// A clock starting at `start` that advances `interval` per reading.
    pub fn new(start: Timestamp, interval: Duration) -> Self {
        Self {
            now: Mutex::new(start),
            interval,
        }
    }
}

impl Clock for IntervalClock {
    fn now(&self) -> Timestamp {
        let mut now = self.now.lock().unwrap_or_else(|e| e.into_inner());
        *now = add(*now, self.interval);
        *now
    }
}

/// `t + by`, saturating at the largest representable time.
pub(crate) fn add(t: Timestamp, by: Duration) -> Timestamp {
    SignedDuration::try_from(by)
        .ok()
        .and_then(|d| t.checked_add(d).ok())
        .unwrap_or(Timestamp::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fake_clock_moves_only_when_stepped() {
        let start = Timestamp::from_second(1_000).unwrap();
        let c = FakeClock::new(start);
        assert_eq!(c.now(), start);
        assert_eq!(c.now(), start);
        c.step(Duration::from_secs(5));
        assert_eq!(c.now().as_second(), 1_005);
        c.set(start);
        assert_eq!(c.now(), start);
    }

    #[test]
    fn interval_clock_ticks_on_every_reading() {
        let c = IntervalClock::new(Timestamp::from_second(0).unwrap(), Duration::from_secs(2));
        assert_eq!(c.now().as_second(), 2);
        assert_eq!(c.now().as_second(), 4);
    }

    #[test]
    fn adding_saturates_instead_of_panicking() {
        assert_eq!(add(Timestamp::MAX, Duration::from_secs(1)), Timestamp::MAX);
        assert_eq!(add(Timestamp::MIN, Duration::MAX), Timestamp::MAX);
    }
}

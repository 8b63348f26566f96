//! Where controllers read the wall-clock time: one injectable [`Clock`] for everything that
//! writes a time into an object (event timestamps, Lease `renewTime`, Deployment conditions)
//! or measures against one (event aggregation windows, the spam filter's refill).
//!
//! [`SystemClock`] is the real clock. Tests pick one that moves only when they say so:
//! [`FakeClock`] (stepped or set by hand), [`IntervalClock`] (one tick per reading),
//! [`TokioClock`] (follows Tokio's clock, so a paused runtime drives it) or [`FnClock`] (any
//! closure). Sleeps and timeouts are not read from here: they use `tokio::time`, which tests
//! pause with `start_paused`.
//!
//! | client-go | here |
//! |---|---|
//! | `clock.PassiveClock`, `clock.RealClock` | [`Clock`], [`SystemClock`] |
//! | `testing.FakeClock` (`Step`, `SetTime`) | [`FakeClock`] ([`step`](FakeClock::step), [`set`](FakeClock::set)) |
//! | `testing.SimpleIntervalClock` | [`IntervalClock`] |
//!
//! ```
//! use std::sync::Arc;
//! use std::time::Duration;
//! use kctrl_client::clock::{Clock, FakeClock};
//! use kctrl_client::k8s_openapi::jiff::Timestamp;
//!
//! let start: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
//! let fake = Arc::new(FakeClock::new(start));
//! let clock: Arc<dyn Clock> = fake.clone(); // what a component under test is given
//! fake.step(Duration::from_secs(90));
//! assert_eq!(clock.now().to_string(), "2026-01-01T00:01:30Z");
//! ```

use std::fmt;
use std::sync::Mutex;
use std::time::Duration;

use k8s_openapi::jiff::{SignedDuration, Timestamp};

/// A source of the current wall-clock time (client-go's `clock.PassiveClock`).
///
/// Shared as `Arc<dyn Clock>`; `Debug` so that the components holding one can print it.
pub trait Clock: Send + Sync + fmt::Debug {
    /// The current time.
    fn now(&self) -> Timestamp;
}

/// The system's real-time clock, the default everywhere.
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

/// A wall clock that starts at the system time when created and then advances with Tokio's
/// clock: with a paused runtime (`#[tokio::test(start_paused = true)]`), two readings taken
/// seconds apart in test time are seconds apart, though no real time passed.
#[derive(Clone, Copy, Debug)]
pub struct TokioClock {
    wall: Timestamp,
    start: tokio::time::Instant,
}

impl TokioClock {
    /// A clock anchored at the current system time and Tokio instant.
    ///
    /// Reading Tokio's clock needs no runtime, but only a paused runtime's clock stands still.
    pub fn new() -> Self {
        Self {
            wall: Timestamp::now(),
            start: tokio::time::Instant::now(),
        }
    }
}

impl Default for TokioClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for TokioClock {
    fn now(&self) -> Timestamp {
        add(self.wall, self.start.elapsed())
    }
}

/// A clock reading a closure: `FnClock::new(|| "2026-01-01T00:00:00Z".parse().unwrap())` for a
/// fixed time, or any other source.
#[derive(Clone, Copy)]
pub struct FnClock<F>(F);

impl<F> FnClock<F>
where
    F: Fn() -> Timestamp + Send + Sync,
{
    /// A clock whose every reading calls `now`.
    pub fn new(now: F) -> Self {
        Self(now)
    }
}

impl<F> fmt::Debug for FnClock<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FnClock").finish_non_exhaustive()
    }
}

impl<F> Clock for FnClock<F>
where
    F: Fn() -> Timestamp + Send + Sync,
{
    fn now(&self) -> Timestamp {
        (self.0)()
    }
}

/// `t + by`, saturating at the largest representable time.
fn add(t: Timestamp, by: Duration) -> Timestamp {
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
        let c = FakeClock::new(Timestamp::MAX);
        c.step(Duration::from_secs(1));
        assert_eq!(c.now(), Timestamp::MAX);
    }

    #[tokio::test(start_paused = true)]
    async fn tokio_clock_follows_a_paused_runtime() {
        let c = TokioClock::new();
        let first = c.now();
        assert_eq!(c.now(), first, "a paused runtime's clock stands still");
        tokio::time::advance(Duration::from_secs(7)).await;
        assert_eq!(c.now().duration_since(first), SignedDuration::from_secs(7));
    }

    #[test]
    fn fn_clock_reads_its_closure() {
        let t: Timestamp = "2026-01-01T00:00:00.600Z".parse().unwrap();
        let c: &dyn Clock = &FnClock::new(move || t);
        assert_eq!(c.now(), t);
        assert_eq!(format!("{c:?}"), "FnClock { .. }");
    }

    #[test]
    fn the_system_clock_is_the_system_time() {
        let before = Timestamp::now();
        let read = SystemClock.now();
        assert!(before <= read && read <= Timestamp::now());
    }
}

//! The reflector's pacing: an exponential backoff that resets after a healthy spell, and the
//! bounded retry window for internal watch errors (client-go's `RetryWithDeadline`).

use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// How the reflector backs off between failed list-and-watch rounds and rejected watches.
///
/// Each delay is `current × (1 + jitter × r)` with `r` uniform in `[0, 1)`; `current` starts at
/// `initial`, grows by `factor` per delay up to `cap`, and goes back to `initial` once no delay
/// was asked for during `reset_after`.
#[derive(Clone, Debug, PartialEq)]
pub struct BackoffOptions {
    /// The first delay (800 ms).
    pub initial: Duration,
    /// Growth per delay (2.0).
    pub factor: f64,
    /// Random extra, as a fraction of the delay (1.0: up to twice the delay).
    pub jitter: f64,
    /// The largest delay before jitter (30 s).
    pub cap: Duration,
    /// A spell without delays after which the backoff starts over (2 min).
    pub reset_after: Duration,
}

impl Default for BackoffOptions {
    fn default() -> Self {
        Self {
            initial: Duration::from_millis(800),
            factor: 2.0,
            jitter: 1.0,
            cap: Duration::from_secs(30),
            reset_after: Duration::from_secs(120),
        }
    }
}

/// The shared backoff state of one reflector (the run loop and watch retries use the same).
#[derive(Debug)]
pub(crate) struct Backoff {
    options: BackoffOptions,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    current: Duration,
    last: Option<Instant>,
}

impl Backoff {
    pub(crate) fn new(options: BackoffOptions) -> Self {
        Self {
            state: Mutex::new(State {
                current: options.initial,
                last: None,
            }),
            options,
        }
    }

    /// The next delay, advancing the backoff.
    pub(crate) fn next_delay(&self) -> Duration {
        let now = Instant::now();
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if st
            .last
            .is_some_and(|last| now.duration_since(last) > self.options.reset_after)
        {
            st.current = self.options.initial;
        }
        st.last = Some(now);
        let base = st.current;
        let grown = scale(base, self.options.factor.max(1.0));
        st.current = if self.options.cap.is_zero() {
            grown
        } else {
            grown.min(self.options.cap)
        };
        if self.options.jitter > 0.0 {
            base.saturating_add(scale(base, self.options.jitter * fastrand::f64()))
        } else {
            base
        }
    }
}

/// `d × factor`, saturating at `Duration::MAX` (where `mul_f64` would panic).
fn scale(d: Duration, factor: f64) -> Duration {
    Duration::try_from_secs_f64(d.as_secs_f64() * factor).unwrap_or(Duration::MAX)
}

/// Allows retrying an error kind for at most `max_duration` since its first occurrence; the
/// window starts over when `reset_after` passes between two occurrences.
#[derive(Debug)]
pub(crate) struct RetryWithDeadline {
    max_duration: Duration,
    reset_after: Duration,
    first: Option<Instant>,
    last: Option<Instant>,
}

impl RetryWithDeadline {
    pub(crate) fn new(max_duration: Duration, reset_after: Duration) -> Self {
        Self {
            max_duration,
            reset_after,
            first: None,
            last: None,
        }
    }

    /// Records the outcome of one attempt; only retryable errors count.
    pub(crate) fn after(&mut self, retryable: bool) {
        if !retryable {
            return;
        }
        let now = Instant::now();
        if self
            .last
            .is_none_or(|last| now.duration_since(last) >= self.reset_after)
        {
            self.first = None;
            self.last = None;
        }
        self.first.get_or_insert(now);
        self.last = Some(now);
    }

    /// Whether another retry fits in the window.
    pub(crate) fn should_retry(&mut self) -> bool {
        if self.max_duration.is_zero() {
            return false;
        }
        let within = self
            .first
            .is_none_or(|first| Instant::now().duration_since(first) <= self.max_duration);
        if !within {
            self.first = None;
            self.last = None;
        }
        within
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_jitter() -> BackoffOptions {
        BackoffOptions {
            jitter: 0.0,
            ..Default::default()
        }
    }

    #[tokio::test(start_paused = true)]
    async fn grows_to_the_cap_then_flattens() {
        let b = Backoff::new(no_jitter());
        let got: Vec<_> = (0..8).map(|_| b.next_delay().as_millis()).collect();
        assert_eq!(got, [800, 1600, 3200, 6400, 12800, 25600, 30000, 30000]);
    }

    #[tokio::test(start_paused = true)]
    async fn resets_after_a_healthy_spell() {
        let b = Backoff::new(no_jitter());
        b.next_delay();
        b.next_delay();
        tokio::time::advance(Duration::from_secs(119)).await;
        assert_eq!(b.next_delay(), Duration::from_millis(3200));
        tokio::time::advance(Duration::from_secs(121)).await;
        assert_eq!(b.next_delay(), Duration::from_millis(800));
    }

    #[tokio::test(start_paused = true)]
    async fn jitter_stays_within_one_extra_delay() {
        let b = Backoff::new(BackoffOptions::default());
        for base in [800u64, 1600, 3200] {
            let d = b.next_delay();
            assert!(
                d >= Duration::from_millis(base) && d < Duration::from_millis(2 * base),
                "{d:?}"
            );
        }
    }

    /// Delays too long to multiply saturate instead of panicking.
    #[tokio::test(start_paused = true)]
    async fn huge_delays_saturate() {
        let b = Backoff::new(BackoffOptions {
            initial: Duration::MAX,
            cap: Duration::ZERO,
            ..Default::default()
        });
        assert_eq!(b.next_delay(), Duration::MAX);
        assert_eq!(b.next_delay(), Duration::MAX);
    }

    #[test]
    fn retry_window_off_when_zero() {
        let mut r = RetryWithDeadline::new(Duration::ZERO, Duration::from_secs(60));
        r.after(true);
        assert!(!r.should_retry());
    }
}

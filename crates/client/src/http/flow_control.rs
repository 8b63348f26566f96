//! Client-side flow control: one token bucket per backend, shared by every request and retry.
//!
//! This is client-go's `flowcontrol.NewTokenBucketRateLimiter(qps, burst)` built on
//! governor's GCRA limiter, which behaves as a token bucket that starts full with `burst`
//! tokens and refills at `qps` per second. [`Throttle`] adds what `Request.tryThrottle` does
//! around the wait: a log line when a request had to wait, and the
//! `rest_client_rate_limiter_duration_seconds` observation.
//!
//! This limiter protects the API server from one client; it is not the server's API Priority
//! and Fairness, which may still reject with 429 (handled by the retry policy).

use std::fmt;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use governor::clock::{Clock, MonotonicClock};
use governor::middleware::NoOpMiddleware;
use governor::state::{InMemoryState, NotKeyed};
use governor::{Quota, RateLimiter};

use super::metrics::RestClientMetrics;
use crate::error::Error;

/// client-go's `DefaultQPS`: used when the configured QPS is zero.
pub(crate) const DEFAULT_QPS: f32 = 5.0;
/// client-go's `DefaultBurst`: used when the configured burst is zero.
pub(crate) const DEFAULT_BURST: u32 = 10;

/// Waits longer than this are logged at debug level (client-go: V(3)).
const LONG_THROTTLE_LATENCY: Duration = Duration::from_millis(50);
/// Waits longer than this are logged at info level, at most once a second (client-go: V(2)
/// through a throttled logger).
const EXTRA_LONG_THROTTLE_LATENCY: Duration = Duration::from_secs(1);
const INFO_LOG_INTERVAL: Duration = Duration::from_secs(1);

/// The QPS and burst a limiter is built with, after client-go's defaulting; `None` when
/// limiting is disabled (negative QPS).
pub(crate) fn effective_limits(qps: f32, burst: u32) -> Option<(f32, u32)> {
    let qps = if qps == 0.0 || qps.is_nan() {
        DEFAULT_QPS
    } else {
        qps
    };
    let burst = if burst == 0 { DEFAULT_BURST } else { burst };
    (qps > 0.0).then_some((qps, burst))
}

/// Whether a limiter can be built for `qps` and `burst` (after [`effective_limits`]): the
/// limiter counts in `u64` nanoseconds, so one token's period times the burst must fit.
/// A QPS of 1e-30 (a period of 3e22 years) does not.
pub(crate) fn check_limits(qps: f32, burst: u32) -> Result<(), Error> {
    let Some((q, b)) = effective_limits(qps, burst) else {
        return Ok(());
    };
    let refill_nanos = 1e9 / f64::from(q) * f64::from(b.max(1));
    // Strictly below u64::MAX, with room for the limiter's own additions.
    if refill_nanos.is_finite() && refill_nanos < (u64::MAX / 2) as f64 {
        Ok(())
    } else {
        Err(Error::InvalidRateLimit { qps, burst: b })
    }
}

/// A token bucket: `burst` tokens at the start, refilled at `qps` tokens per second.
pub(crate) struct TokenBucket<C: Clock = MonotonicClock> {
    limiter: RateLimiter<NotKeyed, InMemoryState, C, NoOpMiddleware<C::Instant>>,
    clock: C,
    qps: f32,
    burst: u32,
}

impl<C: Clock> fmt::Debug for TokenBucket<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TokenBucket")
            .field("qps", &self.qps)
            .field("burst", &self.burst)
            .finish_non_exhaustive()
    }
}

/// The requested token cannot be had before the caller's deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct WouldExceedDeadline {
    /// How long the token is away.
    pub(crate) wait: Duration,
}

impl TokenBucket {
    /// A bucket on the monotonic clock (the one `Instant` and tokio timers use, so waits
    /// measured by callers agree with the limiter's arithmetic).
    pub(crate) fn new(qps: f32, burst: u32) -> Self {
        Self::with_clock(qps, burst, MonotonicClock)
    }
}

impl<C: Clock + Clone> TokenBucket<C> {
    /// A bucket on `clock`; tests pass governor's fake clock.
    ///
    /// `qps` should be positive and `burst` non-zero (see [`effective_limits`]) and pass
    /// [`check_limits`]; other values are clamped to the nearest limiter that can be built
    /// (never a panic).
    pub(crate) fn with_clock(qps: f32, burst: u32, clock: C) -> Self {
        let burst_nz = NonZeroU32::new(burst).unwrap_or(NonZeroU32::MIN);
        // The limiter multiplies the period by the burst in u64 nanoseconds.
        let max_period = Duration::from_nanos(u64::MAX / 2 / u64::from(burst_nz.get()));
        // f64 keeps the period exact enough that qps = 1/1.031425 does not drift
        // (client-go's TestRatePrecisionBug).
        let period = Duration::try_from_secs_f64(1.0 / f64::from(qps))
            .unwrap_or(max_period)
            .clamp(Duration::from_nanos(1), max_period);
        let quota = Quota::with_period(period)
            .expect("period is non-zero")
            .allow_burst(burst_nz);
        Self {
            limiter: RateLimiter::direct_with_clock(quota, clock.clone()),
            clock,
            qps,
            burst,
        }
    }

    /// Takes a token if one is available now.
    #[cfg(test)]
    pub(crate) fn try_accept(&self) -> bool {
        self.limiter.check().is_ok()
    }

    /// Takes a token if one is available now, else says how long until one is.
    pub(crate) fn try_accept_or_wait_time(&self) -> Result<(), Duration> {
        self.limiter
            .check()
            .map_err(|not_until| not_until.wait_time_from(self.clock.now()))
    }

    /// Waits for a token and returns how long that took. Gives up at once, without taking
    /// a token, if the token is due after `deadline` (client-go's `Wait(ctx)` with a
    /// context deadline).
    pub(crate) async fn wait(
        &self,
        deadline: Option<tokio::time::Instant>,
    ) -> Result<Duration, WouldExceedDeadline> {
        let start = Instant::now();
        loop {
            match self.try_accept_or_wait_time() {
                Ok(()) => return Ok(start.elapsed()),
                Err(wait) => {
                    let wake = tokio::time::Instant::now() + wait;
                    if deadline.is_some_and(|d| wake > d) {
                        return Err(WouldExceedDeadline { wait });
                    }
                    // Several waiters may wake for the same token; the losers see the
                    // next token's time and sleep again.
                    tokio::time::sleep_until(wake).await;
                }
            }
        }
    }
}

/// The throttling step of a request: waits for a token, then logs and records the wait.
#[derive(Debug)]
pub(crate) struct Throttle {
    bucket: Option<TokenBucket>,
    /// Milliseconds since `epoch` of the last info-level log, for rate-limiting that log.
    last_info_log_ms: AtomicU64,
    epoch: Instant,
    metrics: Arc<dyn RestClientMetrics>,
    host: String,
}

/// Why a request is waiting, for the log line.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ThrottleContext<'a> {
    /// HTTP method.
    pub(crate) method: &'a str,
    /// Full URL.
    pub(crate) url: &'a str,
    /// The retry reason when this wait precedes a retry.
    pub(crate) retry_reason: Option<&'a str>,
}

impl Throttle {
    pub(crate) fn new(
        qps: f32,
        burst: u32,
        metrics: Arc<dyn RestClientMetrics>,
        host: String,
    ) -> Self {
        Self {
            bucket: effective_limits(qps, burst).map(|(q, b)| TokenBucket::new(q, b)),
            last_info_log_ms: AtomicU64::new(0),
            epoch: Instant::now(),
            metrics,
            host,
        }
    }

    pub(crate) fn set_metrics(&mut self, metrics: Arc<dyn RestClientMetrics>) {
        self.metrics = metrics;
    }

    /// The limiter's QPS and burst, or `None` when limiting is disabled.
    pub(crate) fn limits(&self) -> Option<(f32, u32)> {
        self.bucket.as_ref().map(|b| (b.qps, b.burst))
    }

    /// Waits for a token (no-op when limiting is disabled).
    pub(crate) async fn wait(
        &self,
        cx: ThrottleContext<'_>,
        deadline: Option<tokio::time::Instant>,
    ) -> Result<(), WouldExceedDeadline> {
        let Some(bucket) = &self.bucket else {
            return Ok(());
        };
        let waited = bucket.wait(deadline).await?;
        if waited > LONG_THROTTLE_LATENCY {
            let reason = cx.retry_reason.unwrap_or(
                "client-side rate limit (this client's QPS/burst, not the server's priority and fairness)",
            );
            let delay_ms = u64::try_from(waited.as_millis()).unwrap_or(u64::MAX);
            if waited > EXTRA_LONG_THROTTLE_LATENCY && self.info_log_allowed() {
                tracing::info!(
                    delay_ms,
                    reason,
                    verb = cx.method,
                    url = cx.url,
                    "waited before sending request"
                );
            } else {
                tracing::debug!(
                    delay_ms,
                    reason,
                    verb = cx.method,
                    url = cx.url,
                    "waited before sending request"
                );
            }
        }
        self.metrics
            .observe_rate_limiter_latency(cx.method, &self.host, waited);
        Ok(())
    }

    /// At most one info-level throttling line per [`INFO_LOG_INTERVAL`] per backend, so a
    /// saturated client does not flood its logs.
    fn info_log_allowed(&self) -> bool {
        let now = u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX);
        let interval = INFO_LOG_INTERVAL.as_millis() as u64;
        let last = self.last_info_log_ms.load(Ordering::Relaxed);
        if last != 0 && now.saturating_sub(last) < interval {
            return false;
        }
        self.last_info_log_ms
            .compare_exchange(last, now.max(1), Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use governor::clock::FakeRelativeClock;

    use super::*;

    #[test]
    fn defaults_follow_client_go() {
        assert_eq!(effective_limits(0.0, 0), Some((5.0, 10)));
        assert_eq!(effective_limits(20.0, 0), Some((20.0, 10)));
        assert_eq!(effective_limits(0.0, 3), Some((5.0, 3)));
        assert_eq!(effective_limits(-1.0, 100), None);
        assert_eq!(effective_limits(50.0, 100), Some((50.0, 100)));
    }

    #[test]
    fn tiny_qps_is_refused_and_never_panics() {
        assert!(matches!(
            check_limits(1e-30, 10),
            Err(Error::InvalidRateLimit { burst: 10, .. })
        ));
        // The burst counts too: one token per 1000 s is fine for a small bucket only.
        assert!(check_limits(1e-3, 10).is_ok());
        assert!(check_limits(1e-3, u32::MAX).is_err());
        // Defaulted and disabled limits are always fine.
        assert!(check_limits(0.0, 0).is_ok());
        assert!(check_limits(-1.0, u32::MAX).is_ok());
        assert!(check_limits(f32::MAX, u32::MAX).is_ok());
        // Built anyway (a caller that skipped the check): clamped, not a panic.
        for (qps, burst) in [(1e-30, 10), (f32::MIN_POSITIVE, u32::MAX), (1e-3, u32::MAX)] {
            let r = TokenBucket::with_clock(qps, burst, FakeRelativeClock::default());
            assert!(r.try_accept());
        }
    }

    // client-go flowcontrol TestBasicThrottle.
    #[test]
    fn basic_throttle() {
        let r = TokenBucket::with_clock(1.0, 3, FakeRelativeClock::default());
        for _ in 0..3 {
            assert!(r.try_accept(), "unexpected false accept");
        }
        assert!(!r.try_accept(), "unexpected true accept");
    }

    // client-go flowcontrol TestIncrementThrottle, on a fake clock instead of a 2s sleep.
    #[test]
    fn increment_throttle() {
        let clock = FakeRelativeClock::default();
        let r = TokenBucket::with_clock(1.0, 1, clock.clone());
        assert!(r.try_accept(), "unexpected false accept");
        assert!(!r.try_accept(), "unexpected true accept");
        clock.advance(Duration::from_secs(2));
        assert!(r.try_accept(), "unexpected false accept");
    }

    // client-go flowcontrol TestRatePrecisionBug: a QPS that is not a round number must not
    // accumulate rounding error.
    #[test]
    fn rate_precision_bug() {
        let qps = 1.0 / 1.031_425_f32;
        let clock = FakeRelativeClock::default();
        let tb = TokenBucket::with_clock(qps, 1, clock.clone());
        for i in 0..60 {
            assert!(tb.try_accept(), "failed after {} seconds", i * 2);
            clock.advance(Duration::from_secs(2));
        }
    }

    #[test]
    fn wait_time_is_reported_on_fake_clock() {
        let clock = FakeRelativeClock::default();
        let tb = TokenBucket::with_clock(10.0, 5, clock.clone());
        for _ in 0..5 {
            assert_eq!(tb.try_accept_or_wait_time(), Ok(()));
        }
        assert_eq!(
            tb.try_accept_or_wait_time(),
            Err(Duration::from_millis(100))
        );
        clock.advance(Duration::from_millis(40));
        assert_eq!(tb.try_accept_or_wait_time(), Err(Duration::from_millis(60)));
        clock.advance(Duration::from_millis(60));
        assert_eq!(tb.try_accept_or_wait_time(), Ok(()));
    }

    // client-go flowcontrol TestThrottle: 16 tokens at 10 QPS with burst 5 take at least 1s.
    // Real time: only a lower bound is asserted.
    #[tokio::test]
    async fn throttle() {
        let r = TokenBucket::new(10.0, 5);
        let start = Instant::now();
        for _ in 0..16 {
            r.wait(None).await.unwrap();
        }
        let took = start.elapsed();
        assert!(
            took >= Duration::from_millis(1000),
            "rate limit was not respected, finished too early: {took:?}"
        );
    }

    // client-go flowcontrol TestMultithreadedThrottling: 10 tasks share one bucket; 100
    // tokens beyond the first at 100 QPS take at least a second.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn multithreaded_throttling() {
        let r = Arc::new(TokenBucket::new(100.0, 1));
        let taken = Arc::new(AtomicUsize::new(0));
        let start = Instant::now();
        r.wait(None).await.unwrap();
        let tasks: Vec<_> = (0..10)
            .map(|_| {
                let r = r.clone();
                let taken = taken.clone();
                tokio::spawn(async move {
                    loop {
                        r.wait(None).await.unwrap();
                        if taken.fetch_add(1, Ordering::SeqCst) >= 100 {
                            return;
                        }
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
        let took = start.elapsed();
        assert!(
            took >= Duration::from_millis(990),
            "expected it to take at least 1 second to get 100 tokens, took {took:?}"
        );
    }

    // client-go flowcontrol TestWait: a wait that cannot finish before the deadline fails
    // at once instead of sleeping.
    #[tokio::test]
    async fn wait() {
        let r = TokenBucket::new(0.0001, 1);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(1);
        assert!(
            r.wait(Some(deadline)).await.is_ok(),
            "unexpected wait failure"
        );
        let deadline = tokio::time::Instant::now() + Duration::from_secs(1);
        let err = r
            .wait(Some(deadline))
            .await
            .expect_err("unexpected wait success");
        assert!(err.wait > Duration::from_secs(1000), "{err:?}");
    }

    #[tokio::test]
    async fn disabled_limiter_never_waits() {
        let t = Throttle::new(
            -1.0,
            0,
            Arc::new(super::super::metrics::NoopRestClientMetrics),
            "h".into(),
        );
        assert_eq!(t.limits(), None);
        let cx = ThrottleContext {
            method: "GET",
            url: "http://h/",
            retry_reason: None,
        };
        for _ in 0..1000 {
            t.wait(cx, None).await.unwrap();
        }
    }

    #[test]
    fn info_log_is_rate_limited() {
        let t = Throttle::new(
            1.0,
            1,
            Arc::new(super::super::metrics::NoopRestClientMetrics),
            "h".into(),
        );
        assert!(t.info_log_allowed());
        assert!(!t.info_log_allowed());
    }
}

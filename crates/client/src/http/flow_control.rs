//! Client-side flow control: one token bucket per backend, shared by every request and retry.
//!
//! This is client-go's `flowcontrol.NewTokenBucketRateLimiter(qps, burst)`: a bucket that
//! starts full with `burst` tokens and refills at `qps` per second, and whose `Wait` is a
//! *reservation* (golang.org/x/time/rate's `Limiter.Wait`): a caller takes the next token
//! whether or not it exists yet and sleeps once, until it does. Waiters are therefore served in
//! the order they asked, and a request never waits longer than the tokens promised before it
//! take to refill. [`Throttle`] adds what `Request.tryThrottle` does around the wait: a log
//! line when a request had to wait, and the `rest_client_rate_limiter_duration_seconds`
//! observation.
//!
//! (An earlier version polled governor's limiter, which only answers "may I go now?": every
//! waiter woke for each new token and all but one went back to sleep, so under saturation
//! a request could lose to later ones again and again — waits of two minutes at 20 QPS were
//! seen — and each token cost a wake-up per waiter. The arithmetic here is the generic
//! cell-rate algorithm, as in the workqueue's `BucketRateLimiter`.)
//!
//! This limiter protects the API server from one client; it is not the server's API Priority
//! and Fairness, which may still reject with 429 (handled by the retry policy).

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

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

/// The longest time the bucket's arithmetic handles: one token's interval times the burst
/// must stay below it. A QPS of 1e-30 (an interval of 3e22 years) does not.
const MAX_SPAN: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// Whether a limiter can be built for `qps` and `burst` (after [`effective_limits`]): one
/// token's interval times the burst must fit in a century ([`MAX_SPAN`]), so that the
/// bucket's clock arithmetic cannot overflow.
pub(crate) fn check_limits(qps: f32, burst: u32) -> Result<(), Error> {
    let Some((q, b)) = effective_limits(qps, burst) else {
        return Ok(());
    };
    let refill_secs = 1.0 / f64::from(q) * f64::from(b.max(1));
    if refill_secs.is_finite() && refill_secs < MAX_SPAN.as_secs_f64() {
        Ok(())
    } else {
        Err(Error::InvalidRateLimit { qps, burst: b })
    }
}

/// A token bucket: `burst` tokens at the start, refilled at `qps` tokens per second.
///
/// The state is one instant, `full_at`: when the bucket would be full again given every token
/// taken or promised so far. Taking a token pushes it one interval further out; the token
/// exists once `full_at` is at most `burst` intervals away.
pub(crate) struct TokenBucket {
    /// Time for one token to be added.
    interval: Duration,
    /// Time to refill the whole bucket (`burst · interval`).
    capacity: Duration,
    /// `None` until the first token is taken (a full bucket).
    full_at: Mutex<Option<Instant>>,
    qps: f32,
    burst: u32,
}

impl fmt::Debug for TokenBucket {
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

/// A token promised to one caller: it exists at `ready`. Dropped before then (the caller was
/// cancelled), it is handed back if no later token has been promised meanwhile.
struct Reservation<'a> {
    bucket: &'a TokenBucket,
    ready: Instant,
    /// `full_at` as this reservation left it.
    full_at: Instant,
    kept: bool,
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        if self.kept || self.ready <= Instant::now() {
            return;
        }
        let mut full_at = self.bucket.lock();
        // Only the latest promise can be taken back without moving the ones after it
        // (x/time/rate restores in the same situation).
        if *full_at == Some(self.full_at) {
            *full_at = self.full_at.checked_sub(self.bucket.interval);
        }
    }
}

impl TokenBucket {
    /// A bucket of `burst` tokens refilled at `qps` per second.
    ///
    /// `qps` should be positive and `burst` non-zero (see [`effective_limits`]) and pass
    /// [`check_limits`]; other values are clamped to the nearest bucket that can be built
    /// (never a panic).
    pub(crate) fn new(qps: f32, burst: u32) -> Self {
        let burst_nz = burst.max(1);
        let max_interval = MAX_SPAN / burst_nz;
        // f64 keeps the interval exact enough that qps = 1/1.031425 does not drift
        // (client-go's TestRatePrecisionBug).
        let interval = Duration::try_from_secs_f64(1.0 / f64::from(qps))
            .unwrap_or(max_interval)
            .clamp(Duration::from_nanos(1), max_interval);
        Self {
            interval,
            capacity: interval * burst_nz,
            full_at: Mutex::new(None),
            qps,
            burst,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Instant>> {
        // The state is one instant, written whole: a panic elsewhere cannot leave it torn.
        self.full_at.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Promises the next token unless it exists only after `deadline`.
    fn reserve(&self, deadline: Option<Instant>) -> Result<Reservation<'_>, WouldExceedDeadline> {
        let now = Instant::now();
        let mut full_at = self.lock();
        let from = full_at.map_or(now, |f| f.max(now));
        let new_full_at = from + self.interval;
        // The token exists once the bucket is at most `capacity` from full.
        let ready = new_full_at
            .checked_sub(self.capacity)
            .map_or(now, |r| r.max(now));
        if deadline.is_some_and(|d| ready > d) {
            return Err(WouldExceedDeadline { wait: ready - now });
        }
        *full_at = Some(new_full_at);
        Ok(Reservation {
            bucket: self,
            ready,
            full_at: new_full_at,
            kept: false,
        })
    }

    /// Takes a token if one is available now, else says how long until one is (and takes
    /// nothing).
    #[cfg(test)]
    pub(crate) fn try_accept_or_wait_time(&self) -> Result<(), Duration> {
        let mut r = self.reserve(Some(Instant::now())).map_err(|e| e.wait)?;
        r.kept = true;
        Ok(())
    }

    /// Takes a token if one is available now.
    #[cfg(test)]
    pub(crate) fn try_accept(&self) -> bool {
        self.try_accept_or_wait_time().is_ok()
    }

    /// Waits for a token and returns how long that took. Gives up at once, without taking
    /// a token, if the token is due after `deadline` (client-go's `Wait(ctx)` with a
    /// context deadline). Callers are served in the order they call; a caller dropped while
    /// waiting hands its token back when no later caller has been promised one.
    pub(crate) async fn wait(
        &self,
        deadline: Option<Instant>,
    ) -> Result<Duration, WouldExceedDeadline> {
        let start = Instant::now();
        let mut reservation = self.reserve(deadline)?;
        if reservation.ready > start {
            tokio::time::sleep_until(reservation.ready).await;
        }
        reservation.kept = true;
        Ok(start.elapsed())
    }
}

/// The throttling step of a request: waits for a token, then logs and records the wait.
#[derive(Debug)]
pub(crate) struct Throttle {
    bucket: Option<TokenBucket>,
    /// Milliseconds since `epoch` of the last info-level log, for rate-limiting that log.
    last_info_log_ms: AtomicU64,
    epoch: std::time::Instant,
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
            epoch: std::time::Instant::now(),
            metrics,
            host,
        }
    }

    /// A throttle with the same limits, metrics and host, and a full token bucket of its own.
    pub(crate) fn with_own_bucket(&self) -> Self {
        Self {
            bucket: self.limits().map(|(q, b)| TokenBucket::new(q, b)),
            last_info_log_ms: AtomicU64::new(0),
            epoch: std::time::Instant::now(),
            metrics: self.metrics.clone(),
            host: self.host.clone(),
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

    use super::*;

    #[test]
    fn defaults_follow_client_go() {
        assert_eq!(effective_limits(0.0, 0), Some((5.0, 10)));
        assert_eq!(effective_limits(20.0, 0), Some((20.0, 10)));
        assert_eq!(effective_limits(0.0, 3), Some((5.0, 3)));
        assert_eq!(effective_limits(-1.0, 100), None);
        assert_eq!(effective_limits(50.0, 100), Some((50.0, 100)));
    }

    #[tokio::test(start_paused = true)]
    async fn tiny_qps_is_refused_and_never_panics() {
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
            let r = TokenBucket::new(qps, burst);
            assert!(r.try_accept());
            let _ = r.try_accept_or_wait_time();
        }
    }

    // client-go flowcontrol TestBasicThrottle.
    #[tokio::test(start_paused = true)]
    async fn basic_throttle() {
        let r = TokenBucket::new(1.0, 3);
        for _ in 0..3 {
            assert!(r.try_accept(), "unexpected false accept");
        }
        assert!(!r.try_accept(), "unexpected true accept");
    }

    // client-go flowcontrol TestIncrementThrottle, on the paused clock instead of a 2s sleep.
    #[tokio::test(start_paused = true)]
    async fn increment_throttle() {
        let r = TokenBucket::new(1.0, 1);
        assert!(r.try_accept(), "unexpected false accept");
        assert!(!r.try_accept(), "unexpected true accept");
        tokio::time::advance(Duration::from_secs(2)).await;
        assert!(r.try_accept(), "unexpected false accept");
    }

    // client-go flowcontrol TestRatePrecisionBug: a QPS that is not a round number must not
    // accumulate rounding error.
    #[tokio::test(start_paused = true)]
    async fn rate_precision_bug() {
        let qps = 1.0 / 1.031_425_f32;
        let tb = TokenBucket::new(qps, 1);
        for i in 0..60 {
            assert!(tb.try_accept(), "failed after {} seconds", i * 2);
            tokio::time::advance(Duration::from_secs(2)).await;
        }
    }

    #[tokio::test(start_paused = true)]
    async fn wait_time_is_reported() {
        let tb = TokenBucket::new(10.0, 5);
        for _ in 0..5 {
            assert_eq!(tb.try_accept_or_wait_time(), Ok(()));
        }
        assert_eq!(
            tb.try_accept_or_wait_time(),
            Err(Duration::from_millis(100))
        );
        tokio::time::advance(Duration::from_millis(40)).await;
        assert_eq!(tb.try_accept_or_wait_time(), Err(Duration::from_millis(60)));
        tokio::time::advance(Duration::from_millis(60)).await;
        assert_eq!(tb.try_accept_or_wait_time(), Ok(()));
    }

    // The reservation: waiters are served in the order they asked, each one interval after
    // the one before, and nobody is overtaken by a later caller (the polling limiter this
    // replaced let a waiter lose every token to later ones).
    #[tokio::test(start_paused = true)]
    async fn waiters_are_served_in_order_one_interval_apart() {
        let r = Arc::new(TokenBucket::new(10.0, 2));
        let start = Instant::now();
        let served = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        for i in 0..20u64 {
            let r = r.clone();
            let served = served.clone();
            tasks.push(tokio::spawn(async move {
                let asked = Instant::now() - start;
                r.wait(None).await.unwrap();
                served
                    .lock()
                    .unwrap()
                    .push((i, asked, Instant::now() - start));
            }));
            // Let the caller ask, then the next one a little later.
            tokio::task::yield_now().await;
            tokio::time::advance(Duration::from_millis(1)).await;
        }
        for t in tasks {
            t.await.unwrap();
        }
        let served = served.lock().unwrap().clone();
        let order: Vec<u64> = served.iter().map(|(i, _, _)| *i).collect();
        assert_eq!(order, (0..20).collect::<Vec<_>>(), "served out of order");
        // Two tokens at once (the burst), then one per 100 ms: caller i gets its token at
        // (i - 1) × 100 ms, or when it asked if that is later.
        for (i, asked, at) in &served {
            assert_eq!(*asked, Duration::from_millis(*i), "caller {i} asked late");
            let due = Duration::from_millis(100 * i.saturating_sub(1)).max(*asked);
            assert_eq!(*at, due, "caller {i}");
        }
    }

    // A caller cancelled while waiting hands its token back when it was the last one promised,
    // so the next caller does not wait for a token nobody used.
    #[tokio::test(start_paused = true)]
    async fn a_cancelled_waiter_returns_its_token() {
        let r = TokenBucket::new(10.0, 1);
        assert!(r.try_accept());
        // Promised the token due in 100 ms, then cancelled after 10 ms.
        let cancelled = tokio::time::timeout(Duration::from_millis(10), r.wait(None)).await;
        assert!(cancelled.is_err());
        // The next token is still the one due 100 ms after the first.
        assert_eq!(r.try_accept_or_wait_time(), Err(Duration::from_millis(90)));
    }

    // A deadline that the token cannot meet fails at once and takes nothing.
    #[tokio::test(start_paused = true)]
    async fn a_missed_deadline_takes_no_token() {
        let r = TokenBucket::new(1.0, 1);
        assert!(r.try_accept());
        let asked = Instant::now();
        let err = r
            .wait(Some(asked + Duration::from_millis(500)))
            .await
            .unwrap_err();
        assert_eq!(err.wait, Duration::from_secs(1));
        assert_eq!(asked.elapsed(), Duration::ZERO, "it waited");
        // Nothing was taken: the next token is still due one second after the first.
        assert_eq!(r.try_accept_or_wait_time(), Err(Duration::from_secs(1)));
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

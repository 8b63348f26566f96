//! How an election is timed and what it calls: [`LeaderElectionConfig`] and
//! [`LeaderCallbacks`], with client-go's defaults and validation.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;
use kctrl_client::clock::{Clock, SystemClock};
use tokio_util::sync::CancellationToken;

use crate::error::ConfigError;
use crate::healthz::HealthzAdaptor;
use crate::metrics::{LeaderMetrics, NoopLeaderMetrics};

/// Default lease duration (component-base's recommended leader election configuration).
pub const DEFAULT_LEASE_DURATION: Duration = Duration::from_secs(15);
/// Default renew deadline.
pub const DEFAULT_RENEW_DEADLINE: Duration = Duration::from_secs(10);
/// Default retry period.
pub const DEFAULT_RETRY_PERIOD: Duration = Duration::from_secs(2);
/// Retry waits are stretched by up to this factor of the retry period (client-go's
/// `JitterFactor`).
pub const JITTER_FACTOR: f64 = 1.2;

type StartedFn = dyn Fn(CancellationToken) -> BoxFuture<'static, ()> + Send + Sync;
type StoppedFn = dyn Fn() + Send + Sync;
type NewLeaderFn = dyn Fn(String) + Send + Sync;

/// What the elector calls as leadership changes (client-go's `LeaderCallbacks`).
#[derive(Clone)]
pub struct LeaderCallbacks {
    pub(crate) on_started_leading: Arc<StartedFn>,
    pub(crate) on_stopped_leading: Arc<StoppedFn>,
    pub(crate) on_new_leader: Option<Arc<NewLeaderFn>>,
}

impl fmt::Debug for LeaderCallbacks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaderCallbacks")
            .field("on_new_leader", &self.on_new_leader.is_some())
            .finish_non_exhaustive()
    }
}

impl LeaderCallbacks {
    /// `on_started_leading` is spawned as a task when this process becomes leader; its
    /// token is cancelled when leadership ends (or the election is cancelled), and the work
    /// it runs must stop then. `on_stopped_leading` is called once when
    /// [`LeaderElector::run`](crate::LeaderElector::run) ends — returned or dropped — whether
    /// or not this process ever led.
    pub fn new<S, Fut, T>(on_started_leading: S, on_stopped_leading: T) -> Self
    where
        S: Fn(CancellationToken) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
        T: Fn() + Send + Sync + 'static,
    {
        Self {
            on_started_leading: Arc::new(move |token| on_started_leading(token).boxed()),
            on_stopped_leading: Arc::new(on_stopped_leading),
            on_new_leader: None,
        }
    }

    /// These callbacks, with `first` called (synchronously, with the leading token) before
    /// `on_started_leading` each time this process becomes leader. For code that must
    /// learn of leadership whatever callbacks its user configured.
    pub fn also_on_started_leading(
        mut self,
        first: impl Fn(CancellationToken) + Send + Sync + 'static,
    ) -> Self {
        let then = self.on_started_leading.clone();
        self.on_started_leading = Arc::new(move |token: CancellationToken| {
            first(token.clone());
            then(token)
        });
        self
    }

    /// Called, on a task of its own, with the holder's identity each time the observed
    /// holder changes (including the first observation, and this process itself).
    pub fn on_new_leader(mut self, f: impl Fn(String) + Send + Sync + 'static) -> Self {
        self.on_new_leader = Some(Arc::new(f));
        self
    }
}

/// The election's timing and hooks (client-go's `LeaderElectionConfig`; the lock is given to
/// [`LeaderElector::new`](crate::LeaderElector::new)).
///
/// Candidates wait [`lease_duration`](Self::lease_duration) after the record last changed
/// before taking over; the leader keeps renewing every
/// [`retry_period`](Self::retry_period) and gives up when a renewal has not succeeded within
/// [`renew_deadline`](Self::renew_deadline).
#[derive(Clone)]
pub struct LeaderElectionConfig {
    /// How long others wait before taking over a lock that stopped changing (15 s). A
    /// whole number of seconds, at least one: the Lease records it in seconds.
    pub lease_duration: Duration,
    /// How long the leader keeps retrying a renewal before it stops leading (10 s).
    pub renew_deadline: Duration,
    /// The wait between attempts to acquire or renew (2 s, jittered up to ×2.2 while
    /// acquiring).
    pub retry_period: Duration,
    /// Release the lock (empty holder, 1 s lease) when leadership ends — the election was
    /// cancelled, or (as in client-go) renewal failed and the lock is still ours — so
    /// another candidate can take over at once. Only safe when the leading work stops as
    /// soon as its token is cancelled; otherwise leave it off and call
    /// [`LeaderElector::release`](crate::LeaderElector::release) once that work has stopped.
    pub release_on_cancel: bool,
    /// The election's name, used in health errors and as the metrics' `name` label.
    pub name: String,
    /// The hooks.
    pub callbacks: LeaderCallbacks,
    /// A health check to point at the elector once it is built.
    pub watchdog: Option<HealthzAdaptor>,
    /// Where election metrics go ([`NoopLeaderMetrics`] by default).
    pub metrics: Arc<dyn LeaderMetrics>,
    /// The wall clock the elector stamps records with (`acquireTime`, `renewTime`;
    /// [`SystemClock`] by default). Validity is never judged with it: that uses Tokio's
    /// monotonic clock.
    pub clock: Arc<dyn Clock>,
}

impl fmt::Debug for LeaderElectionConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaderElectionConfig")
            .field("lease_duration", &self.lease_duration)
            .field("renew_deadline", &self.renew_deadline)
            .field("retry_period", &self.retry_period)
            .field("release_on_cancel", &self.release_on_cancel)
            .field("name", &self.name)
            .field("callbacks", &self.callbacks)
            .field("watchdog", &self.watchdog)
            .finish_non_exhaustive()
    }
}

impl LeaderElectionConfig {
    /// The default timing (15 s / 10 s / 2 s), no release on cancel, no name, no metrics.
    pub fn new(callbacks: LeaderCallbacks) -> Self {
        Self {
            lease_duration: DEFAULT_LEASE_DURATION,
            renew_deadline: DEFAULT_RENEW_DEADLINE,
            retry_period: DEFAULT_RETRY_PERIOD,
            release_on_cancel: false,
            name: String::new(),
            callbacks,
            watchdog: None,
            metrics: Arc::new(NoopLeaderMetrics),
            clock: Arc::new(SystemClock),
        }
    }

    /// Checks the timing and the lock identity the elector would run with: every duration
    /// positive, `lease_duration` a whole number of seconds (the Lease stores seconds),
    /// `lease_duration > renew_deadline > 1.2 × retry_period`, identity non-empty.
    pub fn validate(&self, identity: &str) -> Result<(), ConfigError> {
        if self.lease_duration.is_zero() {
            return Err(ConfigError::LeaseDurationZero);
        }
        if self.lease_duration.subsec_nanos() != 0 {
            return Err(ConfigError::LeaseDurationNotWholeSeconds {
                lease_duration: self.lease_duration,
            });
        }
        if self.renew_deadline.is_zero() {
            return Err(ConfigError::RenewDeadlineZero);
        }
        if self.retry_period.is_zero() {
            return Err(ConfigError::RetryPeriodZero);
        }
        if self.lease_duration <= self.renew_deadline {
            return Err(ConfigError::LeaseDurationNotAboveRenewDeadline {
                lease_duration: self.lease_duration,
                renew_deadline: self.renew_deadline,
            });
        }
        if self.renew_deadline <= self.retry_period.mul_f64(JITTER_FACTOR) {
            return Err(ConfigError::RenewDeadlineNotAboveJitteredRetry {
                renew_deadline: self.renew_deadline,
                retry_period: self.retry_period,
            });
        }
        if identity.is_empty() {
            return Err(ConfigError::EmptyIdentity);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> LeaderElectionConfig {
        let mut c = LeaderElectionConfig::new(LeaderCallbacks::new(|_| async {}, || {}));
        c.lease_duration = Duration::from_secs(15);
        c.renew_deadline = Duration::from_secs(2);
        c.retry_period = Duration::from_secs(1);
        c.release_on_cancel = true;
        c
    }

    // client-go: TestLeaderElectionConfigValidation
    #[test]
    fn valid_config_and_empty_identity() {
        assert_eq!(config().validate("baz"), Ok(()));
        let err = config().validate("").unwrap_err();
        assert_eq!(err, ConfigError::EmptyIdentity);
        assert_eq!(err.to_string(), "Lock identity is empty");
    }

    #[test]
    fn defaults_are_component_base_recommendations() {
        let c = LeaderElectionConfig::new(LeaderCallbacks::new(|_| async {}, || {}));
        assert_eq!(c.lease_duration, Duration::from_secs(15));
        assert_eq!(c.renew_deadline, Duration::from_secs(10));
        assert_eq!(c.retry_period, Duration::from_secs(2));
        assert!(!c.release_on_cancel);
        assert_eq!(c.validate("me"), Ok(()));
    }

    #[test]
    fn each_timing_rule_has_its_error() {
        type Tweak = fn(&mut LeaderElectionConfig);
        let cases: [(Tweak, ConfigError, &str); 5] = [
            (
                |c| c.lease_duration = Duration::ZERO,
                ConfigError::LeaseDurationZero,
                "leaseDuration must be greater than zero",
            ),
            (
                |c| c.renew_deadline = Duration::ZERO,
                ConfigError::RenewDeadlineZero,
                "renewDeadline must be greater than zero",
            ),
            (
                |c| c.retry_period = Duration::ZERO,
                ConfigError::RetryPeriodZero,
                "retryPeriod must be greater than zero",
            ),
            (
                |c| c.renew_deadline = Duration::from_secs(15),
                ConfigError::LeaseDurationNotAboveRenewDeadline {
                    lease_duration: Duration::from_secs(15),
                    renew_deadline: Duration::from_secs(15),
                },
                "leaseDuration must be greater than renewDeadline \
                 (leaseDuration 15s, renewDeadline 15s)",
            ),
            (
                // 1.2 × 1 s = 1.2 s is not below 1.2 s.
                |c| c.renew_deadline = Duration::from_millis(1200),
                ConfigError::RenewDeadlineNotAboveJitteredRetry {
                    renew_deadline: Duration::from_millis(1200),
                    retry_period: Duration::from_secs(1),
                },
                "renewDeadline must be greater than retryPeriod*JitterFactor \
                 (renewDeadline 1.2s, retryPeriod 1s, JitterFactor 1.2)",
            ),
        ];
        for (tweak, want, message) in cases {
            let mut c = config();
            tweak(&mut c);
            let err = c.validate("baz").unwrap_err();
            assert_eq!(err, want);
            assert_eq!(err.to_string(), message);
        }
        let mut c = config();
        c.renew_deadline = Duration::from_millis(1201);
        assert_eq!(c.validate("baz"), Ok(()));
    }

    #[test]
    fn lease_durations_must_be_whole_seconds() {
        for lease_duration in [Duration::from_millis(500), Duration::from_millis(15_500)] {
            let mut c = config();
            c.lease_duration = lease_duration;
            c.renew_deadline = Duration::from_millis(300);
            c.retry_period = Duration::from_millis(100);
            let err = c.validate("baz").unwrap_err();
            assert_eq!(
                err,
                ConfigError::LeaseDurationNotWholeSeconds { lease_duration },
                "{lease_duration:?}"
            );
            assert!(
                err.to_string()
                    .contains("whole number of seconds, at least 1s"),
                "{err}"
            );
        }
    }
}

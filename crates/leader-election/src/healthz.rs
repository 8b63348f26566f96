//! A health check that fails when this process leads but has stopped renewing its lease:
//! a stuck leader should be restarted so another candidate can take over.

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::elector::LeaderElector;
use crate::error::HealthError;

/// The name the check is registered under (client-go's `HealthzAdaptor.Name()`).
pub const HEALTHZ_NAME: &str = "leaderElection";

/// The tolerance kube-controller-manager and kube-scheduler use: how long past the lease
/// duration a leader may go without renewing before it is reported unhealthy.
pub const DEFAULT_HEALTHZ_TIMEOUT: Duration = Duration::from_secs(20);

/// The leader election health check (client-go's `HealthzAdaptor`). Cheap to clone; clones
/// share the elector they check.
///
/// Healthy while no elector is attached, while this process does not lead, and while it
/// leads and last saw its record change no longer than lease duration + timeout ago.
///
/// ```
/// use kctrl_leader_election::HealthzAdaptor;
///
/// let healthz = HealthzAdaptor::default(); // 20 s tolerance
/// assert_eq!(healthz.name(), "leaderElection");
/// assert!(healthz.check().is_ok()); // no elector attached yet
/// ```
#[derive(Clone)]
pub struct HealthzAdaptor {
    elector: Arc<Mutex<Option<LeaderElector>>>,
    timeout: Duration,
}

impl Default for HealthzAdaptor {
    fn default() -> Self {
        Self::new(DEFAULT_HEALTHZ_TIMEOUT)
    }
}

impl fmt::Debug for HealthzAdaptor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HealthzAdaptor")
            .field("timeout", &self.timeout)
            .field("attached", &self.slot().is_some())
            .finish()
    }
}

impl HealthzAdaptor {
    /// A check tolerating `timeout` past the lease duration.
    pub fn new(timeout: Duration) -> Self {
        Self {
            elector: Arc::new(Mutex::new(None)),
            timeout,
        }
    }

    /// [`HEALTHZ_NAME`].
    pub fn name(&self) -> &'static str {
        HEALTHZ_NAME
    }

    /// The tolerance past the lease duration.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Attaches the elector to check ([`LeaderElector::new`] does this for the config's
    /// `watchdog`).
    pub fn set_leader_election(&self, elector: &LeaderElector) {
        *self.slot() = Some(elector.clone());
    }

    /// The verdict: `Err` when the attached elector leads and its renewal is overdue.
    pub fn check(&self) -> Result<(), HealthError> {
        let elector = self.slot().clone();
        match elector {
            None => Ok(()),
            Some(e) => e.check(self.timeout),
        }
    }

    fn slot(&self) -> std::sync::MutexGuard<'_, Option<LeaderElector>> {
        self.elector.lock().unwrap_or_else(|e| e.into_inner())
    }
}

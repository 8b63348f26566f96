//! Leader election on `coordination.k8s.io/v1` Leases, with client-go's semantics: several
//! replicas of a controller run, one leads, the others take over when it stops renewing.
//!
//! The pieces, in the order they build on each other:
//!
//! * [`LeaderElectionRecord`] — who holds the lock and for how long, mapped onto a
//!   [`LeaseSpec`](k8s_openapi::api::coordination::v1::LeaseSpec).
//! * [`ResourceLock`] — where the record lives; [`LeaseLock`] keeps it in a Lease through
//!   [`kctrl_client`], with optimistic concurrency on the Lease's resourceVersion.
//! * [`LeaderElectionConfig`] and [`LeaderCallbacks`] — timing (15 s lease, 10 s renew
//!   deadline, 2 s retry by default) and what to call when leadership changes.
//! * [`LeaderElector`] — the loop: acquire, renew, stop, release.
//! * [`HealthzAdaptor`] and [`PrometheusLeaderMetrics`] — health check and metrics.
//!
//! # How it decides
//!
//! A candidate may take the lock when it is unheld, or when the record has not changed for
//! `leaseDurationSeconds` **as measured by the candidate's own clock** since it last saw the
//! record change; timestamps written by other machines are never trusted. The leader renews
//! every retry period, first by writing over the Lease it already has (no read), falling back
//! to read-then-write when that fails (counted by `leader_election_slowpath_total`). If no
//! renewal succeeds within the renew deadline it stops leading: the token handed to
//! `on_started_leading` is cancelled, and with `release_on_cancel` the Lease is handed back
//! (empty holder, one-second lease) so another candidate takes over at once.
//!
//! # Example
//!
//! ```
//! use std::sync::Arc;
//! use std::sync::atomic::{AtomicBool, Ordering};
//! use std::time::Duration;
//!
//! use k8s_openapi::api::coordination::v1::Lease;
//! use kctrl_leader_election::{
//!     HealthzAdaptor, LeaderCallbacks, LeaderElectionConfig, LeaderElector, LeaseLock,
//! };
//! use tokio_util::sync::CancellationToken;
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() {
//! let fake = kctrl_fake::FakeApi::new(); // a real cluster's `Client` works the same
//! let lock = LeaseLock::new(fake.client(), "kube-system", "my-controller", "replica-1");
//!
//! let led = Arc::new(AtomicBool::new(false));
//! let callbacks = LeaderCallbacks::new(
//!     {
//!         let led = led.clone();
//!         move |leading: CancellationToken| {
//!             let led = led.clone();
//!             async move {
//!                 led.store(true, Ordering::SeqCst);
//!                 // Run the controller here until `leading` is cancelled.
//!                 leading.cancelled().await;
//!             }
//!         }
//!     },
//!     || println!("stopped leading"),
//! )
//! .on_new_leader(|identity| println!("new leader: {identity}"));
//!
//! let healthz = HealthzAdaptor::default();
//! let mut config = LeaderElectionConfig::new(callbacks);
//! config.name = "my-controller".into();
//! config.release_on_cancel = true;
//! config.watchdog = Some(healthz.clone());
//! let elector = LeaderElector::new(lock, config).expect("a valid config");
//!
//! let cancel = CancellationToken::new();
//! let election = tokio::spawn({
//!     let elector = elector.clone();
//!     let cancel = cancel.clone();
//!     async move { elector.run(cancel).await }
//! });
//!
//! tokio::time::sleep(Duration::from_secs(1)).await;
//! assert!(elector.is_leader());
//! assert!(led.load(Ordering::SeqCst));
//! assert!(healthz.check().is_ok());
//!
//! cancel.cancel();
//! election.await.unwrap();
//! // Released: nobody holds the Lease any more.
//! let lease: Lease = fake.object(Some("kube-system"), "my-controller").unwrap();
//! assert_eq!(lease.spec.unwrap().holder_identity.as_deref(), Some(""));
//! # }
//! ```
//!
//! # client-go names
//!
//! | client-go (`tools/leaderelection`) | kctrl-leader-election |
//! |---|---|
//! | `resourcelock.LeaderElectionRecord` | [`LeaderElectionRecord`] |
//! | `LeaseSpecToLeaderElectionRecord`, `LeaderElectionRecordToLeaseSpec` | [`LeaderElectionRecord::from_lease_spec`], [`LeaderElectionRecord::to_lease_spec`] |
//! | `resourcelock.Interface` (`Get`, `Create`, `Update`, `RecordEvent`, `Identity`, `Describe`) | [`ResourceLock`] (`get`, `create`, `update`, `record_event`, `identity`, `describe`) |
//! | `resourcelock.LeaseLock`, `resourcelock.New("leases", ...)` | [`LeaseLock::new`], [`LeaseLock::for_lock_type`] |
//! | `resourcelock.NewFromKubeconfig` (client timeout, User-Agent) | [`lock_client_config`] + [`LeaseLock::new`] |
//! | `LeaseLock.Labels` | [`LeaseLock::with_labels`] |
//! | `ResourceLockConfig.EventRecorder` | [`LeaseLock::with_event_hook`] ([`EventHook`], [`LeaderEvent`]) |
//! | `LeaderElectionConfig` | [`LeaderElectionConfig`] (the lock is passed to [`LeaderElector::new`]) |
//! | `LeaderCallbacks{OnStartedLeading, OnStoppedLeading, OnNewLeader}` | [`LeaderCallbacks::new`], [`LeaderCallbacks::on_new_leader`]; the `context.Context` is a [`CancellationToken`](tokio_util::sync::CancellationToken) |
//! | `NewLeaderElector` | [`LeaderElector::new`] (errors: [`ConfigError`]) |
//! | `Run(ctx)`, `RunOrDie` | [`LeaderElector::run`] |
//! | `IsLeader`, `GetLeader`, `Check` | [`LeaderElector::is_leader`], [`LeaderElector::get_leader`], [`LeaderElector::check`] |
//! | `NewLeaderHealthzAdaptor(timeout)`, `SetLeaderElection`, `Check(req)` | [`HealthzAdaptor::new`], [`HealthzAdaptor::set_leader_election`], [`HealthzAdaptor::check`] |
//! | `SetProvider(MetricsProvider)` / component-base metrics | [`LeaderElectionConfig::metrics`] with [`PrometheusLeaderMetrics`] |
//! | `JitterFactor` | [`JITTER_FACTOR`] |
//!
//! Coordinated leader election (`LeaseCandidate` objects, `Coordinated: true`) is not
//! implemented.

#![forbid(unsafe_code)]

mod config;
mod elector;
mod error;
mod healthz;
mod lock;
mod metrics;
mod record;

#[cfg(test)]
mod elector_tests;

pub use config::{
    DEFAULT_LEASE_DURATION, DEFAULT_RENEW_DEADLINE, DEFAULT_RETRY_PERIOD, JITTER_FACTOR,
    LeaderCallbacks, LeaderElectionConfig,
};
pub use elector::LeaderElector;
pub use error::{ConfigError, HealthError, LockError, LockTypeError};
pub use healthz::{DEFAULT_HEALTHZ_TIMEOUT, HEALTHZ_NAME, HealthzAdaptor};
/// The wall clock the elector stamps records with: [`kctrl_client::clock::Clock`] under the
/// name this crate has always used for it.
pub use kctrl_client::clock::Clock as WallClock;
/// The clocks for [`LeaderElectionConfig::clock`], shared with the rest of kctrl
/// ([`kctrl_client::clock`]); re-exported here so these paths keep working.
pub use kctrl_client::clock::{SystemClock, TokioClock};
pub use lock::{
    EVENT_REASON, EventHook, LEASES_LOCK_TYPE, LeaderEvent, LeaseLock, ResourceLock,
    lock_client_config,
};
pub use metrics::{LeaderMetrics, NoopLeaderMetrics, PrometheusLeaderMetrics};
pub use record::LeaderElectionRecord;

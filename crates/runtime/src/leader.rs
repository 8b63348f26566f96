//! [`Controller::run_leader_elected`]: several replicas, one reconciling.

use std::error::Error as StdError;
use std::future::Future;
use std::sync::{Arc, Mutex};

use kctrl_leader_election::{LeaderCallbacks, LeaderElectionConfig, LeaderElector, LeaseLock};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use crate::action::Action;
use crate::controller::{Controller, Object, RunError};

impl<K: Object> Controller<K> {
    /// [`run`](Self::run), but only while this process holds the Lease `lock` names: the
    /// informers start and reconciles run only once leadership is acquired.
    ///
    /// `tune` adjusts the election (timing, metrics, a health check); the defaults are
    /// client-go's (15 s lease, 10 s renew deadline, 2 s retry), the election named after the
    /// controller, and the Lease released on the way out so a standby takes over at once
    /// ([`release_on_cancel`](LeaderElectionConfig::release_on_cancel); set it to `false`
    /// to let the Lease expire instead).
    ///
    /// The Lease is released only once the workers have stopped, never while a reconcile
    /// is in flight, and it is renewed until then:
    ///
    /// - On `cancel`, the controller stops first (no new key; the reconciles in flight
    ///   finish, within the [`shutdown_timeout`](Self::shutdown_timeout)), then the
    ///   election stops and the Lease is released. This returns `Ok`.
    /// - If leadership is lost (the Lease could not be renewed within the renew deadline),
    ///   the controller takes no new key and the reconciles in flight are abandoned at once
    ///   (their futures dropped), as controller-runtime skips its graceful shutdown then; a
    ///   standby may take over a lease duration after the last renewal. This returns
    ///   [`RunError::LeadershipLost`]; like kube-controller-manager, a process should then
    ///   exit and start afresh.
    /// - If the controller's [`run`](Self::run) returns by itself (an error), this replica
    ///   stops leading (stops renewing, releases the Lease) and returns that error.
    /// - If the shutdown leaves reconciles running because they block their thread
    ///   ([`RunError::ReconcilesStuck`], whether the shutdown came from `cancel` or a lost
    ///   Lease), this replica stops renewing but does not release the Lease: it expires a
    ///   lease duration after the last renewal, and no standby takes over before then. The
    ///   error is returned; the process should exit, which stops those reconciles.
    ///
    /// Callbacks set in `tune` ([`LeaderElectionConfig::callbacks`]) are called as well; the
    /// controller's own start is chained onto them. If the election drops its callbacks
    /// without ever leading, this returns [`RunError::ElectionEnded`].
    ///
    /// Dropping this future stops the workers and the renewals (the Lease then expires).
    pub async fn run_leader_elected<Ctx, E, R, Fut, P>(
        self,
        lock: LeaseLock,
        tune: impl FnOnce(&mut LeaderElectionConfig),
        reconcile: R,
        error_policy: P,
        ctx: Arc<Ctx>,
        cancel: CancellationToken,
    ) -> Result<(), RunError>
    where
        Ctx: Send + Sync + 'static,
        E: StdError + Send + 'static,
        R: Fn(Arc<K>, Arc<Ctx>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Action, E>> + Send + 'static,
        P: Fn(Arc<K>, &E, Arc<Ctx>) -> Action + Send + Sync + 'static,
    {
        let name = self.name().to_owned();
        // The elector hands over the leading scope; the controller runs in this future.
        let (lead_tx, mut lead_rx) = oneshot::channel::<CancellationToken>();
        let lead_tx = Arc::new(Mutex::new(Some(lead_tx)));
        let started = move |leading: CancellationToken| {
            if let Some(tx) = lead_tx.lock().unwrap_or_else(|e| e.into_inner()).take() {
                let _ = tx.send(leading);
            }
        };
        let mut config = LeaderElectionConfig::new(LeaderCallbacks::new(|_| async {}, || {}));
        config.name = name.clone();
        config.release_on_cancel = true;
        tune(&mut config);
        // Chained after `tune`, so callbacks the user set there are called too and cannot
        // replace the one that starts the controller.
        config.callbacks = config.callbacks.clone().also_on_started_leading(started);
        // The elector would release as soon as leadership ends, reconciles in flight or not:
        // the release is done here, once the workers have stopped.
        let release = std::mem::replace(&mut config.release_on_cancel, false);
        let elector =
            LeaderElector::new(lock, config).map_err(|source| RunError::LeaderElection {
                controller: name.clone(),
                source,
            })?;
        let stop_election = CancellationToken::new();
        let election = elector.run(stop_election.clone());
        tokio::pin!(election);
        let mut election_ended = false;
        let mut channel_closed = false;

        let leading = tokio::select! {
            () = cancel.cancelled() => None,
            () = &mut election => {
                election_ended = true;
                None
            }
            token = &mut lead_rx => match token {
                Ok(token) => Some(token),
                Err(_) => {
                    channel_closed = true;
                    None
                }
            },
        };
        let Some(leading) = leading else {
            stop_election.cancel();
            if !election_ended {
                election.await;
            }
            // Leadership may have been acquired just as this stood down; nothing ran.
            if release && elector.is_leader() {
                elector.release().await;
            }
            if channel_closed {
                warn!(controller = %name, "the leader election dropped its leading callback without leading");
                return Err(RunError::ElectionEnded { controller: name });
            }
            return Ok(());
        };

        info!(controller = %name, "leading: starting the controller");
        let stop_controller = CancellationToken::new();
        let abandon = CancellationToken::new();
        let run = self.run_until(
            reconcile,
            error_policy,
            ctx,
            stop_controller.clone(),
            abandon.clone(),
        );
        tokio::pin!(run);
        let mut lost = false;
        // The election keeps renewing while the controller runs and while it shuts down.
        let result = loop {
            tokio::select! {
                result = &mut run => break result,
                () = &mut election, if !election_ended => {
                    election_ended = true;
                    lost = true;
                }
                () = leading.cancelled(), if !lost => lost = true,
                () = cancel.cancelled(), if !stop_controller.is_cancelled() => {
                    info!(controller = %name, "shutting down: the Lease is kept until the controller has stopped");
                    stop_controller.cancel();
                }
            }
            if lost && !abandon.is_cancelled() {
                warn!(controller = %name, "leader election lost: stopping the controller at once");
                stop_controller.cancel();
                abandon.cancel();
            }
        };
        // Leadership may have ended in the same poll in which `run` returned.
        if leading.is_cancelled() {
            lost = true;
        }
        // Reconciles that block their thread were left running: the Lease must not be handed
        // to another replica while they may still write. Stop renewing; let it expire.
        let stuck = matches!(result, Err(RunError::ReconcilesStuck { .. }));
        // The workers have stopped (or are stuck): now leadership may end.
        stop_election.cancel();
        if !election_ended {
            election.await;
        }
        if release && !stuck {
            elector.release().await;
        }
        if stuck {
            error!(controller = %name, "reconciles are stuck: stopped renewing the Lease without releasing it; the process should exit");
            return result;
        }
        if lost {
            warn!(controller = %name, "leader election lost");
            return Err(RunError::LeadershipLost { controller: name });
        }
        match result {
            Err(err) => {
                warn!(controller = %name, error = %err, "the controller stopped: no longer leading");
                Err(err)
            }
            Ok(()) => {
                info!(controller = %name, released = release, "stopped; no longer leading");
                Ok(())
            }
        }
    }
}

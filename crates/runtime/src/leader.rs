//! [`Controller::run_leader_elected`]: several replicas, one reconciling.

use std::error::Error as StdError;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use kctrl_leader_election::{LeaderCallbacks, LeaderElectionConfig, LeaderElector, LeaseLock};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::action::Action;
use crate::controller::{Controller, Object, RunError};

type RunFuture = Pin<Box<dyn Future<Output = Result<(), RunError>> + Send>>;

impl<K: Object> Controller<K> {
    /// [`run`](Self::run), but only while this process holds the Lease `lock` names: the
    /// informers start and reconciles run only once leadership is acquired.
    ///
    /// `tune` adjusts the election (timing, metrics, a health check); the defaults are
    /// client-go's (15 s lease, 10 s renew deadline, 2 s retry), the election named after the
    /// controller, and the Lease released on the way out so a standby takes over at once.
    ///
    /// On `cancel`, the controller stops first (no new key, the reconciles in flight finish)
    /// and only then is the Lease released: two replicas never reconcile at once. If
    /// leadership is lost (the Lease could not be renewed within the renew deadline), the
    /// controller stops the same way and this returns [`RunError::LeadershipLost`]; like
    /// kube-controller-manager, a process should then exit and start afresh.
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
        let stop_controller = CancellationToken::new();
        let run: RunFuture =
            Box::pin(self.run(reconcile, error_policy, ctx, stop_controller.clone()));
        let (done_tx, done_rx) = oneshot::channel();
        let slot = Arc::new(Mutex::new(Some((run, done_tx))));
        let started = {
            let slot = slot.clone();
            let stop_controller = stop_controller.clone();
            move |leading: CancellationToken| {
                let taken = slot.lock().unwrap_or_else(|e| e.into_inner()).take();
                let stop_controller = stop_controller.clone();
                async move {
                    // Leadership is acquired once per election: a second call has nothing to run.
                    let Some((run, done)) = taken else { return };
                    let relay = tokio::spawn(async move {
                        leading.cancelled().await;
                        stop_controller.cancel();
                    });
                    let result = run.await;
                    relay.abort();
                    let _ = done.send(result);
                }
            }
        };
        let mut config = LeaderElectionConfig::new(LeaderCallbacks::new(started, || {}));
        config.name = name.clone();
        config.release_on_cancel = true;
        tune(&mut config);
        let elector =
            LeaderElector::new(lock, config).map_err(|source| RunError::LeaderElection {
                controller: name.clone(),
                source,
            })?;
        let stop_election = CancellationToken::new();
        let mut election = tokio::spawn({
            let elector = elector.clone();
            let stop_election = stop_election.clone();
            async move { elector.run(stop_election).await }
        });
        let mut election_ended = false;
        tokio::select! {
            () = cancel.cancelled() => {}
            _ = &mut election => election_ended = true,
        }
        // Stop the controller before the Lease goes, and wait for it if it ever started.
        stop_controller.cancel();
        let never_started = slot
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
            .is_some();
        let result = if never_started {
            None
        } else {
            done_rx.await.ok()
        };
        stop_election.cancel();
        if !election_ended {
            let _ = election.await;
        }
        match result {
            Some(Err(err)) => Err(err),
            _ if election_ended && !cancel.is_cancelled() => {
                warn!(controller = %name, "leader election lost");
                Err(RunError::LeadershipLost { controller: name })
            }
            _ => {
                info!(controller = %name, "stopped; the Lease is released");
                Ok(())
            }
        }
    }
}

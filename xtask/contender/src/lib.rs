//! xtask's contender layer: a Deployment controller, ours or upstream's, as one type
//! ([`Contender`]) and one supervisor ([`supervisor::ControllerProcess`]), with what every
//! activity that runs one needs around it:
//!
//! - [`supervisor`]: build our binary, start either contender, wait for its caches to sync, stop
//!   it (one grace period, [`supervisor::STOP_GRACE`]), kill it, detach it;
//! - [`fresh`]: the Deployment controllers running against a cluster, the check that exactly
//!   the expected one runs, and the one routine that starts a cluster afresh (leftover
//!   controllers stopped, the cluster restarted, a reaper for a Ctrl-C);
//! - [`rbac`]: deploy/'s RBAC for our controller's identity;
//! - [`probe`]: free ports, HTTPS GETs of the controllers' endpoints, CPU time of a process;
//! - [`parse`]: the text formats read from them (`/proc`, Prometheus, the audit log, logs);
//! - [`audit`]: the apiserver's audit events one by one, with objects and timestamps;
//! - [`args`]: `--kube-version`, the option of every command that starts a cluster.
//!
//! It depends on the local control plane (`kctrl-cluster`) and on no library crate of kctrl:
//! editing one does not rebuild this layer.

pub mod args;
pub mod audit;
pub mod fresh;
pub mod parse;
pub mod probe;
pub mod rbac;
pub mod supervisor;

/// Identity our controller runs as (the cluster's controller kubeconfig, deploy/'s RBAC).
pub const OURS_USER: &str = "system:serviceaccount:kube-system:kctrl-deployment-controller";
/// Identity of kube-controller-manager's Deployment controller with
/// `--use-service-account-credentials` (the cluster's own kube-controller-manager never runs it).
pub const UPSTREAM_USER: &str = "system:serviceaccount:kube-system:deployment-controller";

/// Identity of kube-controller-manager's ReplicaSet controller with
/// `--use-service-account-credentials`.
pub const UPSTREAM_REPLICASET_USER: &str =
    "system:serviceaccount:kube-system:replicaset-controller";

/// The deployment-controller's argument that runs its ReplicaSet controller too (off by
/// default); the cluster's kube-controller-manager must then run none.
pub const WITH_REPLICASET_CONTROLLER: &str = "--controllers=*,replicaset-controller";

/// The Deployment controller under test or measured: ours or upstream's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, clap::ValueEnum)]
pub enum Contender {
    /// Our `deployment-controller`, kube-controller-manager's disabled.
    Ours,
    /// kube-controller-manager's own Deployment controller; ours does not run.
    Upstream,
}

impl Contender {
    /// Both, ours first.
    pub const BOTH: [Contender; 2] = [Contender::Ours, Contender::Upstream];

    /// `ours` or `upstream`: in file names, labels and tables.
    pub fn slug(self) -> &'static str {
        match self {
            Contender::Ours => "ours",
            Contender::Upstream => "upstream",
        }
    }

    /// Who runs the Deployments, for messages.
    pub fn describe(self) -> &'static str {
        match self {
            Contender::Ours => "our deployment-controller",
            Contender::Upstream => "kube-controller-manager's Deployment controller",
        }
    }

    /// The user the apiserver (and its audit log) sees it as.
    pub fn user(self) -> &'static str {
        match self {
            Contender::Ours => OURS_USER,
            Contender::Upstream => UPSTREAM_USER,
        }
    }

    /// Order of round `round` of a comparison: ours first in even rounds, upstream first in odd
    /// ones.
    pub fn order(round: usize) -> [Contender; 2] {
        if round.is_multiple_of(2) {
            [Contender::Ours, Contender::Upstream]
        } else {
            [Contender::Upstream, Contender::Ours]
        }
    }

    /// Whether `log` (its output) says its Deployment controller's caches are synced.
    pub fn synced(self, log: &str) -> bool {
        match self {
            Contender::Ours => log.contains(supervisor::SYNCED_MARKER),
            Contender::Upstream => parse::kcm_deployment_synced(log),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_order_and_synced() {
        assert_eq!(Contender::Ours.slug(), "ours");
        assert_eq!(Contender::Upstream.user(), UPSTREAM_USER);
        assert_eq!(Contender::order(0), Contender::BOTH);
        assert_eq!(Contender::order(1), [Contender::Upstream, Contender::Ours]);
        assert!(Contender::Ours.synced("I Caches are synced for deployment"));
        assert!(!Contender::Ours.synced("starting"));
        assert!(Contender::Upstream.synced("\"Caches are synced for deployment\""));
    }
}

//! Which controllers `bench controller` measures (`--controllers`): the Deployment controller,
//! the ReplicaSet controller, or the pair in one process. What is not measured runs in the
//! cluster's own kube-controller-manager, the same for both sides.

use kctrl_cluster::process::Workload;
use xtask_contender::{OURS_USER, UPSTREAM_REPLICASET_USER, UPSTREAM_USER};

use super::Side;

/// The controllers under measurement.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Measured {
    /// The Deployment controller; the cluster's kube-controller-manager runs the ReplicaSet
    /// controller.
    #[default]
    Deployment,
    /// The ReplicaSet controller (ours: `--controllers=replicaset-controller`); the cluster's
    /// kube-controller-manager runs the Deployment controller.
    Replicaset,
    /// Both in one process (ours: `--controllers=*,replicaset-controller`; upstream: one
    /// kube-controller-manager running the two); the cluster's runs neither.
    Pair,
}

impl Measured {
    /// The controllers of the workload chain the sides run.
    pub(super) fn kinds(self) -> &'static [Workload] {
        match self {
            Measured::Deployment => &[Workload::Deployment],
            Measured::Replicaset => &[Workload::ReplicaSet],
            Measured::Pair => &[Workload::Deployment, Workload::ReplicaSet],
        }
    }

    /// Whether the cluster's own kube-controller-manager runs the Deployment controller and
    /// the ReplicaSet controller: whichever is not measured.
    pub(super) fn cluster_runs(self) -> (bool, bool) {
        (
            !self.kinds().contains(&Workload::Deployment),
            !self.kinds().contains(&Workload::ReplicaSet),
        )
    }

    /// The `--controllers` flag of each side's process.
    pub(super) fn controllers_flag(self, side: Side) -> &'static str {
        match (self, side) {
            (Measured::Deployment, Side::Ours) => "--controllers=*",
            (Measured::Deployment, Side::Upstream) => "--controllers=deployment-controller",
            (Measured::Replicaset, _) => "--controllers=replicaset-controller",
            (Measured::Pair, Side::Ours) => xtask_contender::WITH_REPLICASET_CONTROLLER,
            (Measured::Pair, Side::Upstream) => {
                "--controllers=deployment-controller,replicaset-controller"
            }
        }
    }

    /// The concurrency flags of the measured controllers (kube-controller-manager's defaults,
    /// set explicitly on both sides).
    pub(super) fn concurrency_flags(self) -> Vec<&'static str> {
        self.kinds()
            .iter()
            .map(|kind| match kind {
                Workload::Deployment => "--concurrent-deployment-syncs=5",
                Workload::ReplicaSet => "--concurrent-replicaset-syncs=5",
            })
            .collect()
    }

    /// The users the apiserver sees a side's measured controllers as: ours runs every
    /// controller under one identity, kube-controller-manager (with
    /// `--use-service-account-credentials`) each under its own.
    pub(super) fn users(self, side: Side) -> Vec<&'static str> {
        match side {
            Side::Ours => vec![OURS_USER],
            Side::Upstream => self
                .kinds()
                .iter()
                .map(|kind| match kind {
                    Workload::Deployment => UPSTREAM_USER,
                    Workload::ReplicaSet => UPSTREAM_REPLICASET_USER,
                })
                .collect(),
        }
    }

    /// Whether `log` (since the spawn) says every measured controller's caches are synced.
    pub(super) fn synced(self, side: Side, log: &str) -> bool {
        self.kinds().iter().all(|kind| {
            let name = match kind {
                Workload::Deployment => "deployment",
                Workload::ReplicaSet => "replicaset",
            };
            match side {
                Side::Ours => log.contains(&format!("Caches are synced for {name}")),
                Side::Upstream => xtask_contender::parse::kcm_controller_synced(log, name),
            }
        })
    }

    /// The file under docs/benchmarks/ a full run writes.
    pub(super) fn doc(self) -> &'static str {
        match self {
            Measured::Deployment => "docs/benchmarks/controller.md",
            Measured::Replicaset => "docs/benchmarks/replicaset.md",
            Measured::Pair => "docs/benchmarks/controller-pair.md",
        }
    }

    /// The comparison, as the report's title says it.
    pub(super) fn title(self) -> &'static str {
        match self {
            Measured::Deployment => {
                "deployment-controller beside kube-controller-manager's Deployment controller"
            }
            Measured::Replicaset => "Our ReplicaSet controller beside kube-controller-manager's",
            Measured::Pair => {
                "Our Deployment and ReplicaSet controllers (one process) beside \
                 kube-controller-manager's two"
            }
        }
    }

    /// The command line that writes the report.
    pub(super) fn command(self) -> &'static str {
        match self {
            Measured::Deployment => "cargo xtask bench controller",
            Measured::Replicaset => "cargo xtask bench controller --controllers replicaset",
            Measured::Pair => "cargo xtask bench controller --controllers pair",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_each_side_and_the_cluster_run() {
        assert_eq!(Measured::Deployment.cluster_runs(), (false, true));
        assert_eq!(Measured::Replicaset.cluster_runs(), (true, false));
        assert_eq!(Measured::Pair.cluster_runs(), (false, false));
        let ours = |m: Measured| {
            vec![
                "/t/deployment-controller".to_owned(),
                m.controllers_flag(Side::Ours).to_owned(),
            ]
        };
        let kcm = |m: Measured| {
            vec![
                "/c/kube-controller-manager".to_owned(),
                m.controllers_flag(Side::Upstream).to_owned(),
            ]
        };
        for m in [Measured::Deployment, Measured::Replicaset, Measured::Pair] {
            for kind in [Workload::Deployment, Workload::ReplicaSet] {
                let expected = m.kinds().contains(&kind);
                assert_eq!(
                    kctrl_cluster::process::runs_controller(&ours(m), kind),
                    expected,
                    "{m:?} {kind:?} ours"
                );
                assert_eq!(
                    kctrl_cluster::process::runs_controller(&kcm(m), kind),
                    expected,
                    "{m:?} {kind:?} upstream"
                );
            }
        }
        assert_eq!(
            Measured::Pair.users(Side::Upstream),
            [UPSTREAM_USER, UPSTREAM_REPLICASET_USER]
        );
        assert_eq!(Measured::Replicaset.users(Side::Ours), [OURS_USER]);
    }

    #[test]
    fn synced_when_every_measured_controller_is() {
        let ours = "INFO Caches are synced for deployment\n";
        assert!(Measured::Deployment.synced(Side::Ours, ours));
        assert!(!Measured::Pair.synced(Side::Ours, ours));
        assert!(Measured::Pair.synced(
            Side::Ours,
            &format!("{ours}INFO Caches are synced for replicaset\n")
        ));
        assert!(!Measured::Replicaset.synced(
            Side::Upstream,
            "I1 x] \"Caches are synced\" controller=\"deployment\"\n"
        ));
        assert!(Measured::Replicaset.synced(
            Side::Upstream,
            "I1 x] \"Caches are synced\" controller=\"replicaset\"\n"
        ));
    }
}

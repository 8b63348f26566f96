//! `cargo xtask bench <target>`: benchmarks that run our crates side by side with the upstream Go
//! code they reimplement, and write the comparison to docs/benchmarks/.

pub(crate) mod controller;
mod informer;
mod runtime;
mod shard;
mod workqueue;

/// Arguments of `cargo xtask bench`.
#[derive(clap::Args)]
pub(crate) struct BenchArgs {
    #[command(subcommand)]
    target: Target,
}

#[derive(clap::Subcommand)]
enum Target {
    /// kctrl-workqueue against client-go's util/workqueue: throughput, add_after cost, timer
    /// lateness. Writes docs/benchmarks/workqueue.md.
    Workqueue(workqueue::WorkqueueArgs),
    /// The Rust side of `bench workqueue`, run as a release build by that command.
    #[command(hide = true)]
    WorkqueuePeer(workqueue::peer::PeerArgs),
    /// kctrl-informer against client-go's SharedInformer and kube-rs's reflector on a local
    /// control plane: time to synced, RSS, bytes per object, update events/s. Writes
    /// docs/benchmarks/informer.md.
    Informer(informer::InformerArgs),
    /// The kctrl side of `bench informer`, run as a release build by that command.
    #[command(hide = true)]
    InformerPeer(informer::peer::PeerArgs),
    /// Our deployment-controller against kube-controller-manager's Deployment controller on a
    /// local control plane, alternating, each alone: wall time, per-Deployment completion, CPU,
    /// RSS and API requests for create / rollout / scale / delete, and time to synced at rest.
    /// Writes docs/benchmarks/controller.md.
    Controller(controller::ControllerArgs),
    /// How long a user's change waits while our deployment-controller works through its
    /// initial sync, with and without priority lanes, beside kube-controller-manager's.
    /// Writes docs/benchmarks/lanes.md.
    Lanes(controller::lanes::LanesArgs),
    /// kctrl-runtime's Controller against kube-runtime's (kube 5.0.0) on a local control
    /// plane, alternating: a custom resource whose reconcile applies an owned ConfigMap and
    /// its status; wall time, throughput, CPU, RSS and API requests. Writes
    /// docs/benchmarks/runtime.md.
    Runtime(runtime::RuntimeArgs),
    /// Our deployment-controller as one replica beside three shards of it
    /// (`--shard-by=namespace`) at the same per-replica client limits, on a local control
    /// plane with the ShardedListAndWatch gate on (or off): time to ready, list bytes, a
    /// rollout of every Deployment, per-replica RSS and CPU, the handover after a kill.
    /// Writes docs/benchmarks/shard.md.
    Shard(shard::ShardArgs),
}

pub(crate) fn run(args: BenchArgs) -> anyhow::Result<()> {
    match args.target {
        Target::Workqueue(args) => workqueue::run(args),
        Target::WorkqueuePeer(args) => workqueue::peer::run(args),
        Target::Informer(args) => informer::run(args),
        Target::InformerPeer(args) => informer::peer::run(args),
        Target::Controller(args) => controller::run(args),
        Target::Lanes(args) => controller::lanes::run(args),
        Target::Runtime(args) => runtime::run(args),
        Target::Shard(args) => shard::run(args),
    }
}

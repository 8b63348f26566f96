//! `cargo xtask bench <target>`: benchmarks that run our crates side by side with the upstream Go
//! code they reimplement, and write the comparison to docs/benchmarks/.

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
}

pub(crate) fn run(args: BenchArgs) -> anyhow::Result<()> {
    match args.target {
        Target::Workqueue(args) => workqueue::run(args),
        Target::WorkqueuePeer(args) => workqueue::peer::run(args),
    }
}

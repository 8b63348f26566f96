//! `cargo xtask kind …`: what `cargo xtask e2e --cluster kind` needs on a machine without a
//! running container engine or a registry: the engine itself ([`engine`], with its runtime
//! wrapper [`runc_wrapper`]).

pub(crate) mod engine;
pub(crate) mod runc_wrapper;

use anyhow::Result;

/// Arguments of `cargo xtask kind`.
#[derive(clap::Args)]
pub(crate) struct KindArgs {
    #[command(subcommand)]
    command: KindCommand,
}

#[derive(clap::Subcommand)]
enum KindCommand {
    /// A Docker daemon for kind where none runs but one can (root, Debian's docker.io).
    #[command(subcommand)]
    Engine(engine::EngineCommand),
}

/// Runs `cargo xtask kind …`.
pub(crate) fn run(args: KindArgs) -> Result<()> {
    match args.command {
        KindCommand::Engine(cmd) => engine::run(cmd),
    }
}

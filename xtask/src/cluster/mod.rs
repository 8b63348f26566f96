//! `cargo xtask cluster <up|down|status|env>`.

/// Arguments of `cargo xtask cluster`.
#[derive(clap::Args)]
pub(crate) struct ClusterArgs {}

pub(crate) fn run(_args: ClusterArgs) -> anyhow::Result<()> {
    anyhow::bail!("the local cluster is not implemented yet")
}

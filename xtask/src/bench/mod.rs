//! `cargo xtask bench <target>`.

/// Arguments of `cargo xtask bench`.
#[derive(clap::Args)]
pub(crate) struct BenchArgs {}

pub(crate) fn run(_args: BenchArgs) -> anyhow::Result<()> {
    anyhow::bail!("no benchmark targets yet")
}

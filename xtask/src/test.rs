//! `cargo xtask test`: the project's whole test suite, as README.md and CI run it.
//!
//! Unit, wire-level and doc tests of every crate, then the end-to-end suite against the local
//! control plane (`cargo xtask e2e`, which builds the control plane on first use).

use std::process::Command;

use anyhow::{Context, bail};

/// Arguments of `cargo xtask test`.
#[derive(clap::Args)]
pub(crate) struct TestArgs {
    /// Skip the end-to-end suite (no Go toolchain or control plane needed).
    #[arg(long)]
    no_e2e: bool,
    /// End-to-end options.
    #[command(flatten)]
    e2e: crate::e2e::E2eArgs,
}

pub(crate) fn run(args: TestArgs) -> anyhow::Result<()> {
    // The e2e crate runs once, below, against a cluster.
    cargo(&[
        "test",
        "--workspace",
        "--exclude",
        "kctrl-e2e",
        "--all-targets",
    ])?;
    cargo(&["test", "--workspace", "--exclude", "kctrl-e2e", "--doc"])?;
    if args.no_e2e {
        eprintln!("==> --no-e2e: skipping the end-to-end suite");
        return Ok(());
    }
    crate::e2e::run(args.e2e)
}

/// Runs `cargo <args>` with the same toolchain that runs xtask, failing on a non-zero exit.
pub(crate) fn cargo(args: &[&str]) -> anyhow::Result<()> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    eprintln!("==> cargo {}", args.join(" "));
    let status = Command::new(&cargo)
        .args(args)
        .status()
        .with_context(|| format!("running {cargo}"))?;
    if !status.success() {
        bail!("cargo {} failed ({status})", args.join(" "));
    }
    Ok(())
}

//! `cargo xtask test`: the project's whole test suite, as README.md and CI run it.
//!
//! Unit, wire-level and doc tests of every crate. The end-to-end suite against a real
//! control plane joins here when `cargo xtask e2e` exists.

use std::process::Command;

use anyhow::{Context, bail};

/// Arguments of `cargo xtask test`.
#[derive(clap::Args)]
pub(crate) struct TestArgs {}

pub(crate) fn run(_args: TestArgs) -> anyhow::Result<()> {
    cargo(&["test", "--workspace", "--all-targets"])?;
    cargo(&["test", "--workspace", "--doc"])?;
    Ok(())
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

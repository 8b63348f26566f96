//! The tests of `kctrl-testenv` that start control planes of their own, run by `cargo xtask
//! e2e` on the local cluster once the suite's cluster is torn down.

use std::process::Command;

use anyhow::{Context, Result, bail};
use kctrl_cluster::versions::{KUBE_VERSION_ENV, Release};

/// The variable that turns on the tests of `kctrl-testenv` that start control planes.
const TESTENV_RUN_ENV: &str = "KCTRL_TESTENV_E2E";

/// `cargo test -p kctrl-testenv --tests -- <test_args…>` with its real-plane tests turned on:
/// they start planes of their own (etcd, kube-apiserver, and in one test every component) from
/// the cache of `release`, which the local cluster has just used.
pub(super) fn run(release: &Release, test_args: &[String]) -> Result<()> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    eprintln!(
        "==> {TESTENV_RUN_ENV}=1 {KUBE_VERSION_ENV}={} cargo test -p kctrl-testenv --tests -- {}",
        release.kubernetes,
        test_args.join(" ")
    );
    let status = Command::new(&cargo)
        .args(["test", "-p", "kctrl-testenv", "--tests", "--"])
        .args(test_args)
        .env(TESTENV_RUN_ENV, "1")
        .env(KUBE_VERSION_ENV, release.kubernetes)
        .status()
        .with_context(|| format!("running {cargo}"))?;
    if !status.success() {
        bail!("kctrl-testenv's tests failed ({status})");
    }
    Ok(())
}

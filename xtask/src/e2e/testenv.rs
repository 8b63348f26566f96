//! The tests that start control planes of their own, run by `cargo xtask e2e` on the local
//! cluster once the suite's cluster is torn down: those of `kctrl-testenv`, and the targets
//! of `kctrl-e2e` that need a kube-apiserver set up otherwise than the suite's cluster
//! ([`super::suite::OWN_PLANE_TEST_TARGETS`]).

use std::process::Command;

use anyhow::{Context, Result, bail};
use kctrl_cluster::versions::{KUBE_VERSION_ENV, Release};

/// The variable that turns on the tests of `kctrl-testenv` that start control planes.
const TESTENV_RUN_ENV: &str = "KCTRL_TESTENV_E2E";

/// The variable that has each `kctrl-e2e` test binary start a plane of its own.
const E2E_TESTENV_ENV: &str = "KCTRL_E2E_TESTENV";

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

/// `cargo test -p kctrl-e2e --test <t>… -- <test_args…>` for `targets`, each binary on a
/// `kctrl-testenv` plane of its own from the cache of `release` (`KCTRL_E2E_TESTENV=1`, and
/// no `KCTRL_E2E_KUBECONFIG`: the suite's cluster is gone). Nothing to run is a success.
pub(super) fn run_own_planes(
    release: &Release,
    targets: &[String],
    test_args: &[String],
) -> Result<()> {
    if targets.is_empty() {
        return Ok(());
    }
    let selection = super::selection(&[], targets);
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    eprintln!(
        "==> {E2E_TESTENV_ENV}=1 {KUBE_VERSION_ENV}={} cargo test -p kctrl-e2e {} -- {}",
        release.kubernetes,
        selection.join(" "),
        test_args.join(" ")
    );
    let status = Command::new(&cargo)
        .args(["test", "-p", "kctrl-e2e"])
        .args(&selection)
        .arg("--")
        .args(test_args)
        .env(E2E_TESTENV_ENV, "1")
        .env(KUBE_VERSION_ENV, release.kubernetes)
        .env_remove("KCTRL_E2E_KUBECONFIG")
        .status()
        .with_context(|| format!("running {cargo}"))?;
    if !status.success() {
        bail!("the e2e targets on planes of their own failed ({status})");
    }
    Ok(())
}

//! `cargo xtask test`: the project's whole test suite, as README.md and CI run it.
//!
//! Unit, wire-level and doc tests of every crate (kctrl-fuzz's replay every fuzz seed and
//! regression through the targets' properties), then the library crates against the oldest
//! Kubernetes release k8s-openapi supports and a consumer crate that selects the newest
//! (`cargo xtask api-versions`, about 6 minutes cold; `--no-api-versions` skips it), optionally a short coverage-guided run of each
//! fuzz target (`--fuzz-seconds`), then a check that the generated protobuf decoders are
//! current (`cargo xtask gen-protobuf --check`), then the end-to-end suite against the local control plane
//! (`cargo xtask e2e`, which builds the control plane on first use), then a check that the
//! table of upstream's list and map merge semantics is current (`cargo xtask
//! gen-merge-semantics --check`, from the control plane's k8s.io/kubernetes module), then upstream's
//! `[sig-apps] Deployment` e2e specs against our controller (`cargo xtask conformance`, which
//! builds upstream's e2e test binary on first use and our controller in release mode;
//! about 8 minutes on a cold cache, 2 warm, see docs/conformance.md), then the quick subset
//! of the differential runs against kube-controller-manager's Deployment controller
//! (`cargo xtask diff --quick`, 4 to 5½ minutes, cold or warm; `--no-diff` skips it).
//!
//! After the end-to-end suite, the short chaos profile (`cargo xtask chaos --profile short`:
//! faults on the local control plane during rollouts, invariants checked throughout; see
//! docs/reliability.md), then the sharded one (`cargo xtask chaos --profile sharded`: three
//! replicas sharded by namespace, a replica killed, one added, one stopped past its Lease,
//! the audit log checked; once with kube-apiserver's ShardedListAndWatch gate on, once off,
//! about 4 minutes each); `--no-chaos` skips both.
//!
//! The fuzz run is off by default: its instrumented release build costs about 15 CPU-minutes
//! from a cold cache (about 8 minutes on 2 idle cores), which CI, starting from a fresh clone,
//! would pay on every run for a few seconds of fuzzing. See docs/reliability.md.

use std::process::Command;

use anyhow::{Context, bail};

/// Arguments of `cargo xtask test`.
#[derive(clap::Args)]
pub(crate) struct TestArgs {
    /// Skip the end-to-end suite, the chaos run and the conformance specs (no Go toolchain or
    /// control plane needed).
    #[arg(long)]
    no_e2e: bool,
    /// Skip upstream's Deployment conformance specs (`cargo xtask conformance`).
    #[arg(long)]
    no_conformance: bool,
    /// Skip the quick differential run against upstream's Deployment controller
    /// (`cargo xtask diff --quick`).
    #[arg(long)]
    no_diff: bool,
    /// Skip the chaos runs (`cargo xtask chaos --profile short` and `--profile sharded`).
    #[arg(long)]
    no_chaos: bool,
    /// Skip the library crates' build against the oldest Kubernetes release and the
    /// consumer crate (`cargo xtask api-versions`).
    #[arg(long)]
    no_api_versions: bool,
    /// Also fuzz each target for this many seconds (`cargo xtask fuzz`); 0, the default,
    /// skips it (the unit tests still replay every seed and regression).
    #[arg(long, default_value_t = 0, value_name = "SECONDS")]
    fuzz_seconds: u64,
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
    if args.no_api_versions {
        eprintln!("==> --no-api-versions: skipping the Kubernetes release checks");
    } else {
        crate::api_versions::run(crate::api_versions::ApiVersionsArgs::default())?;
    }
    if args.fuzz_seconds > 0 {
        crate::fuzz::run(crate::fuzz::FuzzArgs {
            targets: Vec::new(),
            seconds: args.fuzz_seconds,
        })?;
    }
    if args.no_e2e {
        eprintln!("==> --no-e2e: skipping the end-to-end suite");
        return Ok(());
    }
    // The checked-in protobuf decoders must be what the generator writes from the targeted
    // release's Go types (needs Go, as the end-to-end suite does).
    crate::gen_protobuf(&crate::GenProtobufArgs { check: true })?;
    // One release for every cluster of the run (`--kube-version`, see the e2e options).
    let release = args.e2e.kube.release;
    crate::e2e::run(args.e2e)?;
    // The checked-in merge-semantics table must be what the generator writes from upstream's
    // OpenAPI documents (k8s.io/kubernetes in the Go module cache, which the control plane's
    // build above has fetched when it ran v1.37).
    crate::gen_merge_semantics(&crate::GenMergeSemanticsArgs { check: true })?;
    if args.no_chaos {
        eprintln!("==> --no-chaos: skipping the chaos runs");
    } else {
        crate::chaos::run(crate::chaos::ChaosArgs::ci(release))?;
        crate::chaos::run(crate::chaos::ChaosArgs::sharded(release))?;
    }
    if args.no_conformance {
        eprintln!("==> --no-conformance: skipping upstream's Deployment specs");
    } else {
        for suite in [
            crate::conformance::Suite::Deployment,
            crate::conformance::Suite::Replicaset,
        ] {
            crate::conformance::run(crate::conformance::ConformanceArgs::ours(suite, release))?;
        }
    }
    if args.no_diff {
        eprintln!("==> --no-diff: skipping the differential run");
        return Ok(());
    }
    crate::diff::run(crate::diff::DiffArgs::quick(release))
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

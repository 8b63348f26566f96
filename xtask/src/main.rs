//! `cargo xtask`: the project's automation (local cluster, end-to-end tests, benchmarks).

use clap::{Parser, Subcommand};

mod api_versions;
mod bench;
mod chaos;
mod cluster;
mod conformance;
mod demo;
mod diff;
mod e2e;
mod fuzz;
mod kind;
#[cfg(test)]
mod kind_deploy_tests;
mod kube;
#[cfg(test)]
mod layers;
mod test;

#[derive(Parser)]
#[command(name = "cargo xtask", about = "Project automation for kctrl")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// The library crates against every Kubernetes release k8s-openapi supports, and a crate
    /// outside the workspace that depends on them as a user's crate does.
    ApiVersions(api_versions::ApiVersionsArgs),
    /// Benchmarks run side by side with their upstream anchors.
    Bench(bench::BenchArgs),
    /// Faults (apiserver kills and stops, compaction, controller kills, conflicts, a slow
    /// apiserver) during rollouts on the local control plane, invariants checked throughout.
    Chaos(chaos::ChaosArgs),
    /// The local Kubernetes control plane built from upstream's Go modules.
    Cluster(cluster::ClusterArgs),
    /// Upstream's `[sig-apps] Deployment` e2e specs against the local control plane, with our
    /// Deployment controller or kube-controller-manager's (`--controller upstream`).
    Conformance(conformance::ConformanceArgs),
    /// The same scenarios on two clusters, upstream's Deployment controller and ours, and the
    /// differences a user could observe.
    Diff(diff::DiffArgs),
    /// Local cluster + our deployment-controller + a live rolling update, drawn as an SVG.
    Demo(demo::DemoArgs),
    /// The end-to-end suite against a real cluster.
    E2e(e2e::E2eArgs),
    /// Builds the fuzz targets in fuzz/ with libFuzzer and runs each for a while.
    Fuzz(fuzz::FuzzArgs),
    /// kind without a running engine or a registry: the container engine, images.
    Kind(kind::KindArgs),
    /// Writes the protobuf decoders of whole Deployments and ReplicaSets from the Go types
    /// of the targeted Kubernetes release and k8s-openapi's Rust types.
    GenProtobuf(GenProtobufArgs),
    /// Writes the table of upstream's list and map merge semantics (from the OpenAPI v3
    /// documents of the targeted Kubernetes release) that CRD schemas of embedded Kubernetes
    /// types carry.
    GenMergeSemantics(GenMergeSemanticsArgs),
    /// The whole test suite, as README.md and CI run it.
    Test(test::TestArgs),
}

/// The repository's root (the workspace, one level above xtask/).
pub(crate) fn workspace_root() -> std::path::PathBuf {
    let manifest_dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest_dir.parent().unwrap_or(manifest_dir).to_path_buf()
}

/// Arguments of `cargo xtask gen-protobuf`.
#[derive(clap::Args)]
pub(crate) struct GenProtobufArgs {
    /// Compare with the file in the tree instead of writing it; fail if they differ.
    #[arg(long)]
    pub(crate) check: bool,
}

/// Runs the generator, a package of its own (xtask/gen-protobuf) that builds without the
/// workspace's crates.
pub(crate) fn gen_protobuf(args: &GenProtobufArgs) -> anyhow::Result<()> {
    let mut cmd = std::process::Command::new(env!("CARGO"));
    cmd.args(["run", "-q", "-p", "xtask-gen-protobuf", "--"]);
    if args.check {
        cmd.arg("--check");
    }
    let status = cmd.status()?;
    anyhow::ensure!(status.success(), "xtask-gen-protobuf failed ({status})");
    Ok(())
}

/// Arguments of `cargo xtask gen-merge-semantics`.
#[derive(clap::Args)]
pub(crate) struct GenMergeSemanticsArgs {
    /// Compare with the file in the tree instead of writing it; fail if they differ.
    #[arg(long)]
    pub(crate) check: bool,
}

/// The Kubernetes release whose OpenAPI documents the merge-semantics table is made from (the
/// generator's `MODULE`; the local control plane's default release).
const MERGE_SEMANTICS_RELEASE: &str = "v1.37.2";

/// Runs the merge-semantics generator, a package of its own (xtask/gen-merge-semantics) that
/// builds without the workspace's crates. It reads k8s.io/kubernetes from the Go module cache;
/// when the module is not there, the local control plane's build of that release resolves it
/// first (as `cargo xtask cluster build` does; a no-op when the binaries are cached).
pub(crate) fn gen_merge_semantics(args: &GenMergeSemanticsArgs) -> anyhow::Result<()> {
    use anyhow::Context as _;
    let out = std::process::Command::new("go")
        .args(["env", "GOMODCACHE"])
        .output()
        .context("running `go env GOMODCACHE`")?;
    let module = std::path::PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
        .join(format!("k8s.io/kubernetes@{MERGE_SEMANTICS_RELEASE}"));
    if !module.join("api/openapi-spec/v3").is_dir() {
        let release = kctrl_cluster::versions::Release::exact(MERGE_SEMANTICS_RELEASE)
            .context("the merge-semantics release is not a supported one")?;
        eprintln!(
            "==> k8s.io/kubernetes@{MERGE_SEMANTICS_RELEASE} is not in the Go module cache: \
             building the local control plane of that release resolves it"
        );
        let cache = kctrl_cluster::toolchain::Cache::locate(release)?;
        kctrl_cluster::toolchain::ensure_built(&cache)?;
    }
    let mut cmd = std::process::Command::new(env!("CARGO"));
    cmd.args(["run", "-q", "-p", "xtask-gen-merge-semantics", "--"]);
    if args.check {
        cmd.arg("--check");
    }
    let status = cmd.status()?;
    anyhow::ensure!(
        status.success(),
        "xtask-gen-merge-semantics failed ({status})"
    );
    Ok(())
}

fn main() -> anyhow::Result<()> {
    // dockerd runs a copy of this binary as its OCI runtime (see kind::runc_wrapper).
    if kind::runc_wrapper::invoked_as_wrapper() {
        kind::runc_wrapper::main();
    }
    match Cli::parse().command {
        Command::ApiVersions(args) => api_versions::run(args),
        Command::Bench(args) => bench::run(args),
        Command::Chaos(args) => chaos::run(args),
        Command::Cluster(args) => cluster::run(args),
        Command::Conformance(args) => conformance::run(args),
        Command::Demo(args) => demo::run(args),
        Command::Diff(args) => diff::run(args),
        Command::E2e(args) => e2e::run(args),
        Command::Fuzz(args) => fuzz::run(args),
        Command::Kind(args) => kind::run(args),
        Command::GenProtobuf(args) => gen_protobuf(&args),
        Command::GenMergeSemantics(args) => gen_merge_semantics(&args),
        Command::Test(args) => test::run(args),
    }
}

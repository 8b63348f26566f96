//! `cargo xtask cluster <up|down|status|env|compact|build|kind-plan>`: a real Kubernetes
//! control plane on loopback, built from upstream's Go modules (see docs/local-cluster.md), of
//! one of the supported releases ([`versions::RELEASES`]; `up`, `build` and `kind-plan` take
//! `--kube-version`, the other commands act on whatever release the cluster runs).
//!
//! The layers themselves (toolchain, versions, PKI, etcd, the control plane, kind, processes,
//! KWOK stages) are the `kctrl-cluster` crate; this module is only the command line over them,
//! plus [`KubeVersionArg`], the `--kube-version` option of every command that starts a plane.

use std::path::PathBuf;

use anyhow::Result;

use kctrl_cluster::kind;
use kctrl_cluster::plane::{self, Layout, Liveness, UpOptions};
use kctrl_cluster::toolchain::{self, Cache, fmt_duration};
use xtask_contender::args::KubeVersionArg;

/// Arguments of `cargo xtask cluster`.
#[derive(clap::Args)]
pub(crate) struct ClusterArgs {
    /// Name of the cluster; several can run side by side (state in target/kctrl-cluster/<name>).
    #[arg(long, global = true, env = "KCTRL_CLUSTER_NAME", default_value = "dev")]
    name: String,
    #[command(subcommand)]
    command: ClusterCommand,
}

#[derive(clap::Subcommand)]
enum ClusterCommand {
    /// Build the binaries (once, cached) and start the cluster; waits for /readyz, Ready nodes
    /// and the default ServiceAccount. A no-op if the cluster already runs.
    Up {
        /// Number of fake (KWOK) nodes.
        #[arg(long, default_value_t = 3)]
        nodes: usize,
        /// Extra kube-apiserver flag, e.g. `--apiserver-arg=--watch-cache=false` (repeatable).
        #[arg(
            long = "apiserver-arg",
            value_name = "FLAG",
            allow_hyphen_values = true
        )]
        apiserver_args: Vec<String>,
        /// kube-apiserver feature gates, e.g. `--feature-gates ShardedListAndWatch=true`
        /// (`Name=true|false`, comma-separated or repeated).
        #[arg(long = "feature-gates", value_name = "GATES")]
        feature_gates: Vec<String>,
        /// The release to run.
        #[command(flatten)]
        kube: KubeVersionArg,
        /// Also run our deployment-controller (the dev build) against the cluster, as its
        /// own identity with deploy/'s RBAC, so that Deployments roll out and become
        /// available; `down` stops it. Refused if a Deployment controller already runs.
        #[arg(long)]
        deployment_controller: bool,
        /// Run our controllers for both Deployments and ReplicaSets: kube-controller-manager
        /// without its ReplicaSet controller (nor its Deployment controller), and our
        /// deployment-controller (implies `--deployment-controller`) started with
        /// `--controllers=*,replicaset-controller`. A running cluster started without this
        /// option is refused (stop it first).
        #[arg(long)]
        own_replicaset_controller: bool,
    },
    /// Stop every process of the cluster (also after a crash) and remove its runtime state;
    /// logs are kept.
    Down,
    /// Report each component, the apiserver, the nodes and the binary cache. Exits non-zero
    /// unless the cluster is fully up.
    Status,
    /// Print `export …` lines for the running cluster: eval "$(cargo xtask cluster env)".
    Env,
    /// Compact etcd at its current revision (watches from older resourceVersions then get 410).
    Compact,
    /// Only build (or check) the cached binaries of one release.
    Build {
        /// The release to build.
        #[command(flatten)]
        kube: KubeVersionArg,
    },
    /// Print the kind configuration and commands of `cargo xtask e2e --cluster kind`.
    KindPlan {
        /// Where the configuration would be written.
        #[arg(long, default_value = "target/kctrl-kind/kind.yaml")]
        config_path: PathBuf,
        /// The release of the node image.
        #[command(flatten)]
        kube: KubeVersionArg,
    },
}

pub(crate) fn run(args: ClusterArgs) -> Result<()> {
    let name = args.name;
    match args.command {
        ClusterCommand::Up {
            nodes,
            apiserver_args,
            feature_gates,
            kube,
            deployment_controller,
            own_replicaset_controller,
        } => {
            let info = plane::ensure_up(&UpOptions {
                name: name.clone(),
                nodes,
                apiserver_args,
                feature_gates,
                scheduler_args: Vec::new(),
                controller_manager_args: Vec::new(),
                deployment_controller: false,
                replicaset_controller: !own_replicaset_controller,
                release: kube.release,
            })?;
            eprintln!(
                "  apiserver:  {} ({})",
                info.apiserver_url, info.kubernetes_version
            );
            eprintln!("  admin:      {}", info.admin_kubeconfig.display());
            eprintln!(
                "  controller: {} ({}; authenticated, no RBAC grants)",
                info.controller_kubeconfig.display(),
                plane::CONTROLLER_SA_NAME
            );
            eprintln!("  etcd:       {}", info.etcd_endpoint);
            eprintln!("  logs:       {}", info.dir.join("logs").display());
            if deployment_controller || own_replicaset_controller {
                let pid = attach_deployment_controller(&name, &info, own_replicaset_controller)?;
                let which = if own_replicaset_controller {
                    "ours, Deployments and ReplicaSets"
                } else {
                    "ours"
                };
                eprintln!("  deployment-controller: pid {pid} ({which}; `cluster down` stops it)");
            }
            eprintln!("use it with: eval \"$(cargo xtask cluster env --name {name})\"");
            Ok(())
        }
        ClusterCommand::Down => down(&name),
        ClusterCommand::Status => status(&name),
        ClusterCommand::Env => {
            let info = plane::running_info(&name)?.ok_or_else(|| plane::not_running(&name))?;
            for (key, value) in info.env_vars() {
                println!("export {key}={}", shell_quote(&value));
            }
            Ok(())
        }
        ClusterCommand::Compact => {
            let revision = plane::compact(&name)?;
            println!("compacted etcd of cluster '{name}' at revision {revision}");
            Ok(())
        }
        ClusterCommand::Build { kube } => {
            let cache = Cache::locate(kube.release)?;
            let built = toolchain::ensure_built(&cache)?;
            if built.is_empty() {
                println!(
                    "all binaries of Kubernetes {} are cached in {}",
                    kube.release.kubernetes,
                    cache.bin_dir().display()
                );
            }
            for (binary, took) in built {
                println!("{:<24} {}", binary.file_name(), fmt_duration(took));
            }
            Ok(())
        }
        ClusterCommand::KindPlan { config_path, kube } => {
            let cluster = kind::KindCluster::new(&format!("kctrl-{name}"), kube.release);
            println!(
                "# kind {}+ (needs Docker or Podman), Kubernetes {} nodes; {}:",
                kube.release.kind,
                kube.release.minor_name(),
                config_path.display()
            );
            print!("{}", cluster.config());
            println!("# commands:");
            for cmd in cluster.plan(&config_path) {
                println!("{}", cmd.join(" "));
            }
            Ok(())
        }
    }
}

/// Name of the attached controller's pid file (see [`Layout::attached_pid_file`]).
const ATTACHED_CONTROLLER: &str = "deployment-controller";

use xtask_contender::WITH_REPLICASET_CONTROLLER;

/// Starts our deployment-controller against the running cluster `name`, detached, recorded as
/// attached to the cluster; returns its pid. With `replicaset`, it runs its ReplicaSet
/// controller too ([`WITH_REPLICASET_CONTROLLER`]; the cluster's kube-controller-manager must
/// run none). A no-op if it already runs; refused if another Deployment controller does (two
/// would fight over the same Deployments).
fn attach_deployment_controller(
    name: &str,
    info: &plane::ClusterInfo,
    replicaset: bool,
) -> Result<u32> {
    let pid_file = Layout::new(name).attached_pid_file(ATTACHED_CONTROLLER);
    if let Some(rec) = kctrl_cluster::process::read_pid_file(&pid_file).filter(|r| r.is_running()) {
        eprintln!("  our deployment-controller already runs (pid {})", rec.pid);
        return Ok(rec.pid);
    }
    let others = xtask_contender::fresh::deployment_controllers(&info.dir);
    if let Some((pid, cmd)) = others.first() {
        anyhow::bail!(
            "cluster '{name}' already runs a Deployment controller (pid {pid}: {cmd}); \
             one per cluster, or they fight over the same Deployments: stop it first"
        );
    }
    let binary = xtask_contender::supervisor::build()?;
    xtask_contender::rbac::grant_deploy_rbac(&info.kubectl, &info.admin_kubeconfig)?;
    let log = info.dir.join("logs").join("deployment-controller.log");
    let mut args = vec!["--secure-port", "0"];
    if replicaset {
        args.push(WITH_REPLICASET_CONTROLLER);
    }
    let process =
        xtask_contender::supervisor::start(&binary, &info.controller_kubeconfig, &log, &args)?;
    Ok(process.detach(&pid_file)?.pid)
}

/// Stops cluster `name` (see [`xtask_contender::fresh::down`]).
pub(crate) fn down(name: &str) -> Result<()> {
    xtask_contender::fresh::down(name)
}

fn status(name: &str) -> Result<()> {
    let report = plane::status(name)?;
    let layout = Layout::new(name);
    println!("cluster '{name}' ({})", layout.dir.display());
    match &report.versions {
        Some(versions) => println!("  release: {versions}"),
        None => println!("  release: - (no state file: never started, or stopped)"),
    }
    for c in &report.components {
        let state = match c.liveness {
            Liveness::Running(pid) => format!("running (pid {pid})"),
            Liveness::Stale(pid) => {
                format!("not running (stale pid file: pid {pid} is gone or not ours)")
            }
            Liveness::Absent => "not running".to_owned(),
        };
        let port = match c.port {
            Some(p) => format!(
                "127.0.0.1:{p}{}",
                if c.listening { "" } else { " (closed)" }
            ),
            None => "-".to_owned(),
        };
        println!(
            "  {:<24} {:<48} {:<24} {}",
            c.component.name(),
            state,
            port,
            layout.log(c.component).display()
        );
    }
    if let Some(info) = &report.info {
        println!(
            "  apiserver {} {}",
            info.apiserver_url,
            if report.apiserver_ready {
                "ready"
            } else {
                "NOT ready"
            }
        );
        if let Some((ready, total)) = report.nodes {
            println!("  nodes: {ready}/{total} Ready");
        }
    }
    for (version, dir, built) in &report.caches {
        println!(
            "  binaries of {version}: {} ({})",
            dir.display(),
            if *built { "built" } else { "not (fully) built" }
        );
    }
    if !report.healthy() {
        anyhow::bail!("cluster '{name}' is not (fully) running");
    }
    Ok(())
}

/// Single-quotes `s` for POSIX shells.
fn shell_quote(s: &str) -> String {
    if !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"/._-:,=+@".contains(&b))
    {
        s.to_owned()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotes_for_the_shell() {
        assert_eq!(shell_quote("/a/b.kubeconfig"), "/a/b.kubeconfig");
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
        assert_eq!(shell_quote(""), "''");
    }

    #[test]
    fn cli_parses() {
        use clap::Parser;
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            cluster: ClusterArgs,
        }
        let cli = Cli::try_parse_from(["x", "up", "--name", "e2e", "--nodes", "2"]).unwrap();
        assert_eq!(cli.cluster.name, "e2e");
        assert!(matches!(
            cli.cluster.command,
            ClusterCommand::Up { nodes: 2, ref apiserver_args, .. } if apiserver_args.is_empty()
        ));
        let cli =
            Cli::try_parse_from(["x", "up", "--apiserver-arg", "--watch-cache=false"]).unwrap();
        assert!(matches!(
            cli.cluster.command,
            ClusterCommand::Up { ref apiserver_args, .. } if apiserver_args == &["--watch-cache=false"]
        ));
        let cli = Cli::try_parse_from([
            "x",
            "up",
            "--feature-gates",
            "ShardedListAndWatch=true",
            "--feature-gates=A=false,B=true",
        ])
        .unwrap();
        assert!(matches!(
            cli.cluster.command,
            ClusterCommand::Up { ref feature_gates, .. }
                if feature_gates == &["ShardedListAndWatch=true", "A=false,B=true"]
        ));
        let cli = Cli::try_parse_from(["x", "up", "--own-replicaset-controller"]).unwrap();
        assert!(matches!(
            cli.cluster.command,
            ClusterCommand::Up {
                own_replicaset_controller: true,
                deployment_controller: false,
                ..
            }
        ));
        let cli = Cli::try_parse_from(["x", "--name", "a", "env"]).unwrap();
        assert_eq!(cli.cluster.name, "a");
        // The release: on `up`, `build` and `kind-plan`; the others act on what runs.
        let release = |args: &[&str]| match Cli::try_parse_from(args).unwrap().cluster.command {
            ClusterCommand::Up { kube, .. }
            | ClusterCommand::Build { kube }
            | ClusterCommand::KindPlan { kube, .. } => kube.release.kubernetes,
            _ => unreachable!("{args:?}"),
        };
        assert_eq!(release(&["x", "up", "--kube-version", "1.36"]), "v1.36.5");
        assert_eq!(
            release(&["x", "build", "--kube-version", "v1.37.2"]),
            "v1.37.2"
        );
        assert_eq!(
            release(&["x", "kind-plan", "--kube-version=1.36.5"]),
            "v1.36.5"
        );
        assert!(Cli::try_parse_from(["x", "up", "--kube-version", "1.38"]).is_err());
        assert!(Cli::try_parse_from(["x", "down", "--kube-version", "1.36"]).is_err());
    }
}

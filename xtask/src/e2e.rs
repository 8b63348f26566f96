//! `cargo xtask e2e [--cluster local|kind|existing] [--keep]`: the end-to-end suite in
//! `tests/` against a real cluster.
//!
//! All three cluster kinds share one path: obtain a cluster, describe it to the suite through
//! environment variables (see `kctrl-e2e`), run `cargo test -p kctrl-e2e` in two phases, tear
//! down. First the test targets that must not see a deployment controller (all but
//! [`CONTROLLER_TEST_TARGETS`]); then our `deployment-controller` is started against the cluster
//! (out of cluster; on the local cluster as its own identity with exactly `deploy/`'s RBAC), the targets that need it run, and it is stopped
//! (also when they fail).
//!
//! On the local cluster, once it is torn down, the tests of `kctrl-testenv` run too (with
//! `KCTRL_TESTENV_E2E=1`), then the targets of `kctrl-e2e` that need a kube-apiserver set up
//! otherwise than the suite's cluster ([`suite::OWN_PLANE_TEST_TARGETS`], e.g. `sharding_gate`
//! with the `ShardedListAndWatch` feature gate; `KCTRL_E2E_TESTENV=1`): they start control
//! planes of their own from the same cached build. Against kind or an existing cluster those
//! targets do not run (a line says so).
//!
//! * `local` (default): the control plane of `cargo xtask cluster`, built from upstream's Go
//!   modules, with the apiserver's watch cache disabled for ConfigMaps only so compaction tests
//!   can observe 410 Gone from etcd (every other resource is cached as in a real cluster).
//! * `kind`: a kind cluster whose controller-manager runs without its deployment controller.
//!   Needs `kind` and a container engine (Docker or Podman). By default our controller runs
//!   *in* the cluster, as users run it: the image is built from `deploy/Containerfile`, loaded
//!   into the nodes, `deploy/` is applied and bootstrapped (see `cluster::kind`), and the
//!   targets that need the controller run once a pod of its Deployment holds the lease; its
//!   logs are collected afterwards, and the in-cluster scenarios of [`scenarios`] follow
//!   (leader kill, SIGTERM, the controller updating itself, token rotation, the sharded
//!   variant with a replica killed, RBAC, `/metrics`; `--no-scenarios` skips them,
//!   `--no-suite` runs only them). kube-apiserver runs with the `ShardedListAndWatch` feature
//!   gate. `--controller host` runs it out of cluster instead, as for the other kinds.
//! * `existing`: whatever `$KUBECONFIG` points at, used as it is.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use self::suite::*;
use kctrl_cluster::kind::{self, Engine, InClusterController, KindCluster};
use kctrl_cluster::plane::{self, Layout, UpOptions};
use xtask_contender::args::KubeVersionArg;

mod scenarios;
mod scenarios_auth;
mod scenarios_leader;
mod scenarios_sharded;
mod scenarios_token;
mod suite;
mod testenv;

/// Arguments of `cargo xtask e2e`.
#[derive(clap::Args)]
pub(crate) struct E2eArgs {
    /// Which cluster to run against.
    #[arg(long, value_enum, default_value_t = ClusterKind::Local)]
    cluster: ClusterKind,
    /// Leave the cluster running afterwards (local and kind).
    #[arg(long)]
    keep: bool,
    /// Name of the local or kind cluster.
    #[arg(long, default_value = "e2e")]
    name: String,
    /// Where our deployment-controller runs: `in-cluster` (kind only, its default: the image
    /// from deploy/Containerfile, installed with deploy/) or `host` (a local process; the
    /// default of the other clusters).
    #[arg(long, value_enum)]
    controller: Option<ControllerPlacement>,
    /// Kubernetes release of the local control plane, or of kind's node image (`existing`
    /// runs whatever it runs).
    #[command(flatten)]
    pub(crate) kube: KubeVersionArg,
    /// Skip the in-cluster scenarios that follow the suite on kind (leader kill, SIGTERM,
    /// the controller updating itself, token rotation, RBAC, probes, /metrics; see
    /// `e2e/scenarios.rs`).
    #[arg(long, conflicts_with = "scenario")]
    no_scenarios: bool,
    /// On kind with the in-cluster controller: skip the suite's test targets, install the
    /// controller from deploy/ and run only the in-cluster scenarios.
    #[arg(long, conflicts_with = "no_scenarios")]
    no_suite: bool,
    /// Run only these in-cluster scenarios (repeatable; default: all). The rbac and probes
    /// checks over the whole run always follow.
    #[arg(long, value_enum)]
    scenario: Vec<scenarios::Name>,
    /// Arguments passed to the test binaries (e.g. a test name filter).
    #[arg(last = true)]
    test_args: Vec<String>,
}

/// Where the suite runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum ClusterKind {
    /// The local control plane built from upstream's Go modules.
    Local,
    /// A kind cluster (needs kind and a container engine).
    Kind,
    /// The cluster `$KUBECONFIG` points at.
    Existing,
}

/// Where our deployment-controller runs during the suite.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum ControllerPlacement {
    /// A process on this machine, out of cluster.
    Host,
    /// Pods in the cluster, from deploy/ and the image (kind only).
    InCluster,
}

/// What the suite needs to know about the cluster under test.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Target {
    kubeconfig: PathBuf,
    controller_kubeconfig: Option<PathBuf>,
    compact_command: Option<String>,
    controller_log: Option<PathBuf>,
}

impl Target {
    /// The environment the `kctrl-e2e` crate reads.
    pub(crate) fn env_vars(&self) -> Vec<(&'static str, String)> {
        let mut vars = vec![(
            "KCTRL_E2E_KUBECONFIG",
            self.kubeconfig.display().to_string(),
        )];
        if let Some(p) = &self.controller_kubeconfig {
            vars.push(("KCTRL_E2E_CONTROLLER_KUBECONFIG", p.display().to_string()));
        }
        if let Some(c) = &self.compact_command {
            vars.push(("KCTRL_E2E_COMPACT_COMMAND", c.clone()));
        }
        if let Some(l) = &self.controller_log {
            vars.push((
                "KCTRL_E2E_DEPLOYMENT_CONTROLLER_LOG",
                l.display().to_string(),
            ));
        }
        vars
    }
}

/// kube-apiserver flags of the local e2e cluster.
pub(crate) const LOCAL_APISERVER_ARGS: &[&str] = &["--watch-cache-sizes=configmaps#0"];

/// The `deployment-controller` executable this run built, for the suite's own processes.
static CONTROLLER_BINARY: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();

/// kubectl of the local cluster's release, for tests that drive kubectl.
static KUBECTL: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();

/// The variable naming that executable (read by `kctrl-e2e`'s `process` module).
const CONTROLLER_BINARY_ENV: &str = "KCTRL_E2E_CONTROLLER_BINARY";

pub(crate) fn run(args: E2eArgs) -> Result<()> {
    if args.cluster != ClusterKind::Kind && args.controller == Some(ControllerPlacement::InCluster)
    {
        bail!(
            "--controller in-cluster needs --cluster kind (it loads the image into kind's nodes)"
        );
    }
    if args.no_suite
        && (args.cluster != ClusterKind::Kind || args.controller == Some(ControllerPlacement::Host))
    {
        bail!(
            "--no-suite runs only the in-cluster scenarios: it needs --cluster kind with the \
             controller in the cluster"
        );
    }
    // Build first: a compile error should not cost a cluster start.
    let controller = xtask_contender::supervisor::build()?;
    // Tests that start controller processes of their own (tests/e2e/production.rs) run it.
    let _ = CONTROLLER_BINARY.set(controller.clone());
    match args.cluster {
        ClusterKind::Local => {
            let info = plane::ensure_up(&UpOptions {
                name: args.name.clone(),
                nodes: 3,
                apiserver_args: LOCAL_APISERVER_ARGS.iter().map(|s| s.to_string()).collect(),
                feature_gates: Vec::new(),
                scheduler_args: Vec::new(),
                controller_manager_args: Vec::new(),
                deployment_controller: false,
                replicaset_controller: true,
                release: args.kube.release,
            })?;
            let _ = KUBECTL.set(info.kubectl.clone());
            let xtask = std::env::current_exe().context("locating the xtask binary")?;
            let target = Target {
                kubeconfig: info.admin_kubeconfig.clone(),
                controller_kubeconfig: Some(info.controller_kubeconfig.clone()),
                compact_command: Some(compact_command(&xtask, &args.name)),
                controller_log: Some(Layout::new(&args.name).logs().join(CONTROLLER_LOG)),
            };
            let result = run_suite_with_controller(&controller, &target, &args.test_args);
            let suite = finish(result, args.keep, || {
                xtask_contender::fresh::down(&args.name)
            });
            // After the teardown, so that no more than one plane of the suite runs at a time.
            let testenv = testenv::run(args.kube.release, &args.test_args);
            let own = own_plane_targets(&test_targets_of_manifest()?);
            let own =
                testenv::run_own_planes(args.kube.release, &own, &controller, &args.test_args);
            [
                ("kctrl-testenv's tests", testenv),
                ("the e2e targets on planes of their own", own),
            ]
            .into_iter()
            .fold(suite, |result, (what, r)| match (result, r) {
                (Err(e), Err(e2)) => {
                    eprintln!("==> {what} failed too: {e2:#}");
                    Err(e)
                }
                (r1, r2) => r1.and(r2),
            })
        }
        ClusterKind::Existing => {
            note_own_plane_targets_skipped();
            let Some(kubeconfig) = std::env::var_os("KUBECONFIG") else {
                bail!("--cluster existing uses $KUBECONFIG, which is not set");
            };
            let kubeconfig = PathBuf::from(kubeconfig);
            if kubeconfig.to_string_lossy().contains(':') {
                bail!(
                    "--cluster existing needs $KUBECONFIG to name one file, not a list: {}",
                    kubeconfig.display()
                );
            }
            let log = Path::new("target/kctrl-existing")
                .join(&args.name)
                .join(CONTROLLER_LOG);
            run_suite_with_controller(
                &controller,
                &Target {
                    kubeconfig,
                    controller_kubeconfig: None,
                    compact_command: None,
                    controller_log: Some(log),
                },
                &args.test_args,
            )
        }
        ClusterKind::Kind => {
            note_own_plane_targets_skipped();
            let release = args.kube.release;
            // kind, the node image and (offline) the controller image are built here; see
            // xtask/src/kind/.
            let name = crate::kind::cluster_name(&args.name);
            let cluster = KindCluster::new(&name, release);
            crate::kind::require_engine()?;
            let engine = container_engine()?;
            let dir = crate::kind::cluster_dir(&name);
            std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
            let kubeconfig = dir.join("kubeconfig");
            let in_cluster = match args.controller.unwrap_or(ControllerPlacement::InCluster) {
                ControllerPlacement::Host => None,
                ControllerPlacement::InCluster => {
                    let kubectl = kubectl_program();
                    require_command(
                        &[kubectl.as_str(), "version", "--client"],
                        "the in-cluster controller is installed with kubectl (or set \
                         KCTRL_KUBECTL); `--controller host` runs it out of cluster instead",
                    )?;
                    let ctl =
                        InClusterController::new(&cluster, engine, &crate::workspace_root(), &dir)
                            .with_kubeconfig(&kubeconfig)
                            .with_kubectl(&kubectl);
                    // Like the binary above, before any cluster exists.
                    crate::kind::controller_image(&ctl.build_image_command())?;
                    Some(ctl)
                }
            };
            let created = crate::kind::e2e_cluster(&name, release)?;
            let result = (|| {
                match &in_cluster {
                    Some(ctl) => {
                        for cmd in ctl.load_image_commands() {
                            run_command(&crate::kind::with_our_kind(cmd, &created.kind))?;
                        }
                        let suite = if args.no_suite {
                            eprintln!("==> --no-suite: the suite's test targets are skipped");
                            install_in_cluster_or_diagnose(ctl)
                        } else {
                            run_suite_with_in_cluster_controller(
                                ctl,
                                &Target {
                                    kubeconfig: kubeconfig.clone(),
                                    controller_kubeconfig: None,
                                    compact_command: None,
                                    controller_log: Some(ctl.log_path()),
                                },
                                &args.test_args,
                            )
                        };
                        if args.no_scenarios {
                            return suite;
                        }
                        let scenarios = in_cluster_scenarios(ctl, &created, &dir, &args.scenario);
                        match (suite, scenarios) {
                            (Err(e), Err(e2)) => {
                                eprintln!("==> the in-cluster scenarios failed too: {e2:#}");
                                Err(e)
                            }
                            (r1, r2) => r1.and(r2),
                        }
                    }
                    // Out of cluster, against the kind kubeconfig.
                    None => run_suite_with_controller(
                        &controller,
                        &Target {
                            kubeconfig: kubeconfig.clone(),
                            controller_kubeconfig: None,
                            compact_command: None,
                            controller_log: Some(dir.join(CONTROLLER_LOG)),
                        },
                        &args.test_args,
                    ),
                }
            })();
            finish(result, args.keep, || created.delete())
        }
    }
}

/// How long the Deployment's pods may take to get the lease once the bootstrap Pod is gone: the
/// lease duration (15 s) and retry period (2 s) of a lease that was not released, with margin.
const HANDOVER_TIMEOUT: Duration = Duration::from_secs(60);

/// The kubectl to run: `$KCTRL_KUBECTL` (which `cargo xtask cluster env` exports), else the
/// one on `PATH`.
fn kubectl_program() -> String {
    std::env::var("KCTRL_KUBECTL")
        .ok()
        .filter(|k| !k.is_empty())
        .unwrap_or_else(|| "kubectl".to_owned())
}

/// Docker if its daemon answers, else Podman.
fn container_engine() -> Result<Engine> {
    let answers = |engine: Engine| {
        Command::new(engine.program())
            .arg("version")
            .output()
            .is_ok_and(|out| out.status.success())
    };
    [Engine::Docker, Engine::Podman]
        .into_iter()
        .find(|e| answers(*e))
        .context(
            "kind needs a container engine: neither `docker version` nor `podman version` \
             succeeded",
        )
}

/// The test targets of `kctrl-e2e`.
fn test_targets_of_manifest() -> Result<Vec<String>> {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/Cargo.toml");
    let text = std::fs::read_to_string(&manifest)
        .with_context(|| format!("reading {}", manifest.display()))?;
    Ok(test_targets(&text))
}

/// The test targets of `kctrl-e2e` that run against the suite's cluster, split into
/// (without the controller, with it).
fn suite_targets() -> Result<(Vec<String>, Vec<String>)> {
    Ok(split_targets(&test_targets_of_manifest()?))
}

/// Says which targets a run against a cluster other than the local one leaves out.
fn note_own_plane_targets_skipped() {
    if let Ok(targets) = test_targets_of_manifest() {
        let own = own_plane_targets(&targets);
        if !own.is_empty() {
            eprintln!(
                "==> not run here: {} (each needs a kube-apiserver of its own with other \
                 settings; `cargo xtask e2e --cluster local` runs them)",
                own.join(", ")
            );
        }
    }
}

/// `--test <t>` for each target, after `first`.
fn selection(first: &[&str], targets: &[String]) -> Vec<String> {
    first
        .iter()
        .map(|s| (*s).to_owned())
        .chain(
            targets
                .iter()
                .flat_map(|t| ["--test".to_owned(), t.clone()]),
        )
        .collect()
}

/// The suite with our controller running in the kind cluster: first the targets that must not
/// see a deployment controller, then the controller is installed from `deploy/` (applied,
/// bootstrapped, rolled out, its lease handed over to its own pods), the targets that need it
/// run, and its pods' logs are written to the target's log file (also when something failed).
/// The controller is left running; tearing the cluster down removes it.
fn run_suite_with_in_cluster_controller(
    ctl: &InClusterController,
    target: &Target,
    test_args: &[String],
) -> Result<()> {
    let (without, with) = suite_targets()?;
    let bare = Target {
        controller_log: None,
        ..target.clone()
    };
    let first = run_suite(&bare, &selection(&["--lib"], &without), test_args);
    if with.is_empty() {
        return first;
    }
    let second = install_in_cluster_or_diagnose(ctl)
        .and_then(|()| run_suite(target, &selection(&[], &with), test_args));
    match collect_logs(ctl) {
        Ok(()) => eprintln!(
            "==> deployment-controller log: {}",
            ctl.log_path().display()
        ),
        Err(e) => eprintln!("==> collecting the deployment-controller's logs failed: {e:#}"),
    }
    match (first, second) {
        (Err(e), Err(e2)) => {
            eprintln!("==> the tests with the controller failed too: {e2:#}");
            Err(e)
        }
        (r1, r2) => r1.and(r2),
    }
}

/// [`install_in_cluster`]; when it fails, the Deployment, its pods and their events are
/// shown.
fn install_in_cluster_or_diagnose(ctl: &InClusterController) -> Result<()> {
    install_in_cluster(ctl)
        .inspect_err(|_| {
            for cmd in ctl.diagnostics_commands() {
                if let Err(d) = run_command(&cmd) {
                    eprintln!("==> {d:#}");
                }
            }
        })
        .context("installing the deployment-controller in the cluster")
}

/// Applies `deploy/`, bootstraps the controller, waits for its rollout, removes the bootstrap
/// Pod and waits until one of the Deployment's pods leads.
fn install_in_cluster(ctl: &InClusterController) -> Result<()> {
    run_command(&ctl.apply_command())?;
    run_command(&ctl.bootstrap_command())?;
    run_command(&ctl.rollout_status_command())?;
    run_command(&ctl.remove_bootstrap_command())?;
    let command = ctl.lease_holder_command();
    eprintln!(
        "==> waiting up to {}s for a pod of deployment/{} to hold the lease: {}",
        HANDOVER_TIMEOUT.as_secs(),
        kind::CONTROLLER_NAME,
        command.join(" ")
    );
    let deadline = Instant::now() + HANDOVER_TIMEOUT;
    let mut holder = String::new();
    loop {
        // A failed read (e.g. a transient API error) is retried like an unsuitable holder.
        if let Ok(out) = output_of(&command) {
            holder = String::from_utf8_lossy(&out).trim().to_owned();
            if kind::held_by_deployment_pod(&holder) {
                eprintln!("==> leader: {holder}");
                return Ok(());
            }
        }
        if Instant::now() >= deadline {
            bail!(
                "after {}s the lease {}/{} is held by {:?}, not by a pod of the Deployment",
                HANDOVER_TIMEOUT.as_secs(),
                kind::CONTROLLER_NAMESPACE,
                kind::CONTROLLER_NAME,
                holder
            );
        }
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// The scenarios of `e2e/scenarios.rs`, once a pod of the controller's Deployment leads.
fn in_cluster_scenarios(
    ctl: &InClusterController,
    cluster: &crate::kind::cluster::Cluster,
    dir: &Path,
    only: &[scenarios::Name],
) -> Result<()> {
    let holder = output_of(&ctl.lease_holder_command()).unwrap_or_default();
    if !kind::held_by_deployment_pod(&String::from_utf8_lossy(&holder)) {
        bail!("the in-cluster scenarios need the controller installed and leading; it is not");
    }
    eprintln!("==> in-cluster scenarios");
    scenarios::run(
        &scenarios::Kube {
            cluster: cluster.clone(),
            logs: dir.join("scenario-logs"),
        },
        only,
    )
}

/// Writes the logs of the controller's pods to the target's log file.
fn collect_logs(ctl: &InClusterController) -> Result<()> {
    let logs = output_of(&ctl.logs_command())?;
    let path = ctl.log_path();
    std::fs::write(&path, logs).with_context(|| format!("writing {}", path.display()))
}

/// Fails with `hint` unless `argv` runs and succeeds.
fn require_command(argv: &[&str], hint: &str) -> Result<()> {
    let (program, args) = argv.split_first().context("empty command")?;
    match Command::new(program).args(args).output() {
        Ok(out) if out.status.success() => Ok(()),
        Ok(out) => bail!(
            "`{}` failed: {}; {hint}",
            argv.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ),
        Err(e) => bail!("{program} is not usable ({e}); {hint}"),
    }
}

/// Tears down (unless `keep`) and returns the suite's result; a teardown failure is
/// reported but never hides a test failure.
fn finish(result: Result<()>, keep: bool, teardown: impl FnOnce() -> Result<()>) -> Result<()> {
    if keep {
        eprintln!("==> --keep: leaving the cluster running");
        return result;
    }
    if let Err(e) = teardown() {
        eprintln!("==> teardown failed: {e:#}");
        if result.is_ok() {
            return Err(e);
        }
    }
    result
}

/// The shell command the suite runs to compact the local cluster's etcd.
fn compact_command(xtask: &Path, name: &str) -> String {
    format!(
        "{} cluster compact --name {}",
        shell_quote(&xtask.display().to_string()),
        shell_quote(name)
    )
}

fn shell_quote(s: &str) -> String {
    if s.bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"/._-+=:".contains(&b))
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
    fn target_env_names_match_the_suite() {
        let t = Target {
            kubeconfig: "/k/admin".into(),
            controller_kubeconfig: Some("/k/ctrl".into()),
            compact_command: Some("x cluster compact --name e2e".into()),
            controller_log: Some("/l/deployment-controller.log".into()),
        };
        assert_eq!(
            t.env_vars(),
            vec![
                ("KCTRL_E2E_KUBECONFIG", "/k/admin".to_owned()),
                ("KCTRL_E2E_CONTROLLER_KUBECONFIG", "/k/ctrl".to_owned()),
                (
                    "KCTRL_E2E_COMPACT_COMMAND",
                    "x cluster compact --name e2e".to_owned()
                ),
                (
                    "KCTRL_E2E_DEPLOYMENT_CONTROLLER_LOG",
                    "/l/deployment-controller.log".to_owned()
                ),
            ]
        );
        let bare = Target {
            kubeconfig: "/k".into(),
            controller_kubeconfig: None,
            compact_command: None,
            controller_log: None,
        };
        assert_eq!(bare.env_vars().len(), 1);
    }

    #[test]
    fn compact_command_quotes_paths() {
        assert_eq!(
            compact_command(Path::new("/t/debug/xtask"), "e2e"),
            "/t/debug/xtask cluster compact --name e2e"
        );
        assert_eq!(
            compact_command(Path::new("/my dir/xtask"), "e2e"),
            "'/my dir/xtask' cluster compact --name e2e"
        );
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
    }

    #[test]
    fn a_failed_controller_stop_never_hides_a_test_failure() {
        let log = Path::new("/l");
        let r = combine(
            Err(anyhow::anyhow!("tests failed")),
            Err(anyhow::anyhow!("x")),
            log,
        );
        assert_eq!(r.unwrap_err().to_string(), "tests failed");
        let r = combine(Ok(()), Err(anyhow::anyhow!("exit 1")), log);
        assert!(format!("{:#}", r.unwrap_err()).contains("exit 1"));
        assert!(combine(Ok(()), Ok(()), log).is_ok());
    }

    #[test]
    fn test_targets_are_read_from_the_manifest_and_split() {
        let manifest = r#"[package]
name = "kctrl-e2e"

[dependencies]
name = { path = "x" }

[[test]]
name = "client"
path = "e2e/client.rs"

[[test]]
path = "e2e/deployment.rs"
name = "deployment"

[lints]
workspace = true
"#;
        let targets = test_targets(manifest);
        assert_eq!(targets, ["client", "deployment"]);
        assert_eq!(
            split_targets(&targets),
            (vec!["client".to_owned()], vec!["deployment".to_owned()])
        );
        // Targets on planes of their own run in neither phase.
        let targets = [
            "client".to_owned(),
            "sharding_gate".to_owned(),
            "replicaset".to_owned(),
            "deployment".to_owned(),
            "both_controllers".to_owned(),
        ];
        assert_eq!(
            split_targets(&targets),
            (vec!["client".to_owned()], vec!["deployment".to_owned()])
        );
        assert_eq!(
            own_plane_targets(&targets),
            ["sharding_gate", "replicaset", "both_controllers"]
        );
        // The real manifest: every controller target exists.
        let real = std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/Cargo.toml"),
        )
        .unwrap();
        let real = test_targets(&real);
        for t in CONTROLLER_TEST_TARGETS.iter().chain(OWN_PLANE_TEST_TARGETS) {
            assert!(real.iter().any(|r| r == t), "{t} in {real:?}");
        }
    }

    #[test]
    fn selection_lists_each_target() {
        let targets = ["client".to_owned(), "informer".to_owned()];
        assert_eq!(
            selection(&["--lib"], &targets),
            ["--lib", "--test", "client", "--test", "informer"]
        );
        assert!(selection(&[], &[]).is_empty());
    }

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        e2e: E2eArgs,
    }

    fn parse(args: &[&str]) -> E2eArgs {
        use clap::Parser;
        Cli::try_parse_from(std::iter::once("e2e").chain(args.iter().copied()))
            .unwrap()
            .e2e
    }

    #[test]
    fn controller_placement_is_parsed() {
        let a = parse(&["--cluster", "kind"]);
        assert_eq!((a.cluster, a.controller), (ClusterKind::Kind, None));
        let a = parse(&["--cluster", "kind", "--controller", "host", "--", "scale"]);
        assert_eq!(a.controller, Some(ControllerPlacement::Host));
        assert_eq!(a.test_args, ["scale"]);
        let a = parse(&["--controller", "in-cluster"]);
        assert_eq!(a.controller, Some(ControllerPlacement::InCluster));
        let a = parse(&["--kube-version", "1.36", "--", "scale"]);
        assert_eq!(a.kube.release.kubernetes, "v1.36.5");
        assert_eq!(a.test_args, ["scale"]);
    }

    #[test]
    fn no_suite_is_parsed_and_needs_the_in_cluster_controller() {
        let a = parse(&["--cluster", "kind", "--no-suite", "--scenario", "sharded"]);
        assert!(a.no_suite);
        assert_eq!(a.scenario, [scenarios::Name::Sharded]);
        use clap::Parser;
        assert!(
            Cli::try_parse_from(["e2e", "--no-suite", "--no-scenarios"]).is_err(),
            "--no-suite with --no-scenarios would run nothing"
        );
        for args in [
            &["--no-suite"][..],
            &["--cluster", "kind", "--controller", "host", "--no-suite"][..],
        ] {
            let err = run(parse(args)).unwrap_err().to_string();
            assert!(
                err.contains("--no-suite runs only the in-cluster scenarios"),
                "{err}"
            );
        }
    }

    #[test]
    fn in_cluster_needs_kind() {
        // Refused before anything is built or started.
        for cluster in ["local", "existing"] {
            let err = run(parse(&["--cluster", cluster, "--controller", "in-cluster"]))
                .unwrap_err()
                .to_string();
            assert!(err.contains("needs --cluster kind"), "{err}");
        }
    }

    #[test]
    fn teardown_never_hides_a_test_failure() {
        let r = finish(Err(anyhow::anyhow!("tests failed")), false, || {
            Err(anyhow::anyhow!("teardown failed"))
        });
        assert_eq!(r.unwrap_err().to_string(), "tests failed");
        let r = finish(Ok(()), false, || Err(anyhow::anyhow!("teardown failed")));
        assert_eq!(r.unwrap_err().to_string(), "teardown failed");
        let mut torn_down = false;
        finish(Ok(()), true, || {
            torn_down = true;
            Ok(())
        })
        .unwrap();
        assert!(!torn_down, "--keep must not tear down");
    }
}

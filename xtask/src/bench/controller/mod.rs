//! `cargo xtask bench controller`: our deployment-controller beside kube-controller-manager's
//! Deployment controller, on one local control plane (`cargo xtask cluster`).
//!
//! The two controllers take turns, each alone against the cluster: ours is `deployment-controller`
//! as shipped (the `dist` profile); upstream's is a second kube-controller-manager from the cached build
//! running only `--controllers=deployment-controller`. Both run with leader election off, QPS 20,
//! burst 30 and 5 concurrent syncs (kube-controller-manager's defaults), each as its own
//! ServiceAccount (ours with `deploy/`'s RBAC, upstream's through
//! `--use-service-account-credentials` as `kube-system:deployment-controller`), so the
//! apiserver's audit log attributes every request to one of them. The cluster's own
//! kube-controller-manager runs with the Deployment controller disabled; before a controller
//! starts, every process of the cluster is checked for a running Deployment controller.
//!
//! Per round and size N, in a fresh namespace: (a) N Deployments x 4 replicas created until
//! complete, (b) every template changed until rolled out, (c) a second template change with every
//! Deployment scaled to 8 replicas while it rolls, (d) the namespace deleted until gone. Then (e),
//! with M Deployments x 4 Pods at rest: time from process start to caches synced and to the
//! first write for a template changed while no controller ran, and steady RSS. Parsing lives in
//! [`parse`], tables and the markdown in [`report`].

pub(crate) mod lanes;
pub(crate) mod parse;
mod report;

use std::fs;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::Namespace;
use kctrl_client::versioned::Versioned;
use kctrl_client::{Api, Client, DeleteParams, ListParams, Patch, PatchParams, PostParams};

use self::parse::{Counts, CpuTicks, Memory, RolloutState};
use crate::cluster::KubeVersionArg;
use kctrl_cluster::plane::{self, ClusterInfo, Component, Layout, UpOptions};
use kctrl_cluster::process::{self, ProcRecord};
use kctrl_cluster::toolchain::Cache;
use kctrl_cluster::versions::{Binary, Release};

/// Replicas of every benchmark Deployment.
const REPLICAS: i32 = 4;
/// Namespace prefix of the benchmark's workloads.
const NAMESPACE_PREFIX: &str = "kctrl-bench-ctl";
/// Concurrent requests of the driver's create and patch loads (its client is not throttled).
const CONCURRENCY: usize = 16;
/// Identity our controller runs as (the cluster's controller kubeconfig).
const OURS_USER: &str = "system:serviceaccount:kube-system:kctrl-deployment-controller";
/// Identity of kube-controller-manager's Deployment controller with
/// `--use-service-account-credentials` (the cluster's own kube-controller-manager never runs it).
const UPSTREAM_USER: &str = "system:serviceaccount:kube-system:deployment-controller";
/// Time after a phase's last completion before the closing readings, so trailing status writes
/// count in the phase and the steady RSS is read at rest.
const TAIL: Duration = Duration::from_secs(3);
/// Grace period between SIGTERM and SIGKILL when stopping a controller.
const STOP_GRACE: Duration = Duration::from_secs(15);
/// Client QPS / burst of the controllers (kube-controller-manager's defaults).
const QPS: (u32, u32) = (20, 30);
/// Client QPS / burst of our controller while it prepares the at-rest namespace (not measured).
const SETUP_QPS: (u32, u32) = (400, 600);
/// Client QPS / burst of the cluster's kube-controller-manager (ReplicaSet controller, garbage
/// collector, namespace controller): high enough that the Deployment controller is the
/// bottleneck of every phase, for both sides alike.
const CLUSTER_KCM_QPS: (u32, u32) = (200, 400);

/// Arguments of `cargo xtask bench controller`.
#[derive(clap::Args)]
pub(crate) struct ControllerArgs {
    /// Deployments per round of phases a-d, comma-separated (default 100,500; 10 with --quick).
    #[arg(long, value_delimiter = ',')]
    deployments: Vec<usize>,
    /// Deployments (x 4 Pods) in the cluster for the at-rest phase e (default 2000; 40 with
    /// --quick); 0 skips phase e.
    #[arg(long)]
    at_rest: Option<usize>,
    /// Rounds; each runs both controllers once per size, alternating which goes first (default
    /// 3; 1 with --quick).
    #[arg(long)]
    rounds: Option<usize>,
    /// Seconds between the first write and the steady RSS reading of phase e.
    #[arg(long, default_value_t = 20)]
    settle_secs: u64,
    /// Give up when a phase takes longer than this many seconds.
    #[arg(long, default_value_t = 1800)]
    phase_timeout_secs: u64,
    /// Small sizes and one round: a smoke run, not numbers to publish.
    #[arg(long)]
    quick: bool,
    /// Phases of each round to measure, comma-separated letters (default a,b,c,d; a,b,c with
    /// --callgrind). The namespace of a round is deleted unmeasured when d is left out. A
    /// subset is not written to the docs.
    #[arg(long, value_delimiter = ',')]
    phases: Vec<String>,
    /// Profile ours instead: phases a-c under `valgrind --tool=callgrind` (one round, ours only,
    /// no doc), one output part per phase (`.1` startup, `.2` phase a, ...); prints where. With --ours-binary, profiles that binary (to
    /// compare the instruction counts of two builds, which machine load does not change).
    #[arg(long)]
    callgrind: bool,
    /// Cluster name (see `cargo xtask cluster`); a running cluster of that name is restarted.
    #[arg(long, default_value = "bench-controller")]
    name: String,
    /// Leave the cluster running at the end.
    #[arg(long)]
    keep: bool,
    /// Do not rewrite docs/benchmarks/controller.md.
    #[arg(long)]
    no_doc: bool,
    /// Run this binary as ours instead of the workspace's `dist` build (an A/B experiment
    /// between two builds of ours, each measured against upstream; implies --no-doc).
    #[arg(long)]
    ours_binary: Option<PathBuf>,
    /// `KEY=VALUE` set in our controller's environment only (repeatable; e.g.
    /// `DISABLE_HTTP2=1` or an `LD_PRELOAD`ed allocator; implies --no-doc).
    #[arg(long = "ours-env", value_name = "KEY=VALUE")]
    ours_env: Vec<String>,
    /// Kubernetes release of the cluster and of the kube-controller-manager compared with.
    #[command(flatten)]
    kube: KubeVersionArg,
}

/// The two Deployment controllers compared.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Side {
    /// Our `deployment-controller` (the `dist` profile).
    Ours,
    /// kube-controller-manager with only its deployment-controller.
    Upstream,
}

impl Side {
    const BOTH: [Side; 2] = [Side::Ours, Side::Upstream];

    fn slug(self) -> &'static str {
        match self {
            Side::Ours => "ours",
            Side::Upstream => "upstream",
        }
    }

    fn user(self) -> &'static str {
        match self {
            Side::Ours => OURS_USER,
            Side::Upstream => UPSTREAM_USER,
        }
    }

    /// Order of round `round`: ours first in even rounds, upstream first in odd ones.
    fn order(round: usize) -> [Side; 2] {
        if round.is_multiple_of(2) {
            [Side::Ours, Side::Upstream]
        } else {
            [Side::Upstream, Side::Ours]
        }
    }
}

/// The measured workloads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Phase {
    /// (a) N Deployments created until complete.
    Create,
    /// (b) every template changed until rolled out.
    Rollout,
    /// (c) a second template change, every Deployment scaled x2 mid-rollout.
    ScaleMidRollout,
    /// (d) the namespace deleted until gone.
    Delete,
    /// (e) a fresh process with M Deployments at rest.
    AtRest,
}

impl Phase {
    /// The phases of one round, in order.
    pub(super) const ROUND: [Phase; 4] = [
        Phase::Create,
        Phase::Rollout,
        Phase::ScaleMidRollout,
        Phase::Delete,
    ];

    /// The phase's name in file names and tool arguments.
    pub(super) fn slug(self) -> &'static str {
        match self {
            Phase::Create => "phase-a-create",
            Phase::Rollout => "phase-b-rollout",
            Phase::ScaleMidRollout => "phase-c-scale",
            Phase::Delete => "phase-d-delete",
            Phase::AtRest => "phase-e-at-rest",
        }
    }

    /// The phase's name in reports.
    pub(super) fn title(self) -> &'static str {
        match self {
            Phase::Create => "(a) create",
            Phase::Rollout => "(b) rollout",
            Phase::ScaleMidRollout => "(c) scale x2 mid-rollout",
            Phase::Delete => "(d) namespace deletion",
            Phase::AtRest => "(e) at rest",
        }
    }
}

/// What one phase of one controller measured.
#[derive(Clone, Debug)]
pub(super) struct PhaseRun {
    pub(super) side: Side,
    pub(super) round: usize,
    /// N (phases a-d) or M (phase e).
    pub(super) size: usize,
    pub(super) phase: Phase,
    /// Seconds from the phase's first driver request to its end condition.
    pub(super) wall: f64,
    /// Per-Deployment completion p50, seconds from the phase start (phases a-c).
    pub(super) p50: Option<f64>,
    /// Per-Deployment completion p99, seconds from the phase start (phases a-c).
    pub(super) p99: Option<f64>,
    /// Controller CPU-seconds (utime + stime) over the phase (phase e: since process start).
    pub(super) cpu: f64,
    /// The kernel's part of `cpu` (stime): system calls, wake-ups, page faults.
    pub(super) cpu_system: f64,
    /// VmHWM over the phase (reset at its start) or since process start (phase e).
    pub(super) peak_rss: u64,
    /// VmRSS at the end of the phase.
    pub(super) steady_rss: u64,
    /// The controller's own `rest_client_requests_total` by method.
    pub(super) client: Counts,
    /// The apiserver's audit log for the controller's user, by verb and resource.
    pub(super) audit: Counts,
    /// `apiserver_request_total` delta (every client) by verb and resource.
    pub(super) apiserver: Counts,
    /// Phase e: seconds from process start to caches synced.
    pub(super) synced: Option<f64>,
    /// Phase e: seconds from process start to the changed Deployment's new ReplicaSet.
    pub(super) first_write: Option<f64>,
}

/// Everything the measurement needs.
struct Env {
    ours: PathBuf,
    /// `KEY=VALUE` pairs for our controller's environment (`--ours-env`).
    ours_env: Vec<String>,
    kcm: PathBuf,
    info: ClusterInfo,
    /// `target/kctrl-bench-controller`: logs, audit policy and log, callgrind output.
    dir: PathBuf,
    audit_log: PathBuf,
    ticks_per_second: u64,
    callgrind: bool,
    /// The phases of each round, in order.
    phases: Vec<Phase>,
    phase_timeout: Duration,
    peak_reset_works: std::sync::atomic::AtomicBool,
    /// KWOK nodes of the cluster.
    nodes: usize,
}

fn target_dir(root: &Path) -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), PathBuf::from)
}

/// Audit policy: metadata of every request of the two controller identities, nothing else.
fn audit_policy() -> String {
    format!(
        "apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived, ResponseStarted]
rules:
- level: Metadata
  users: [\"{OURS_USER}\", \"{UPSTREAM_USER}\"]
- level: None
"
    )
}

pub(crate) fn run(args: ControllerArgs) -> Result<()> {
    let root = crate::workspace_root();
    let sizes = if !args.deployments.is_empty() {
        args.deployments.clone()
    } else if args.quick || args.callgrind {
        vec![if args.callgrind { 20 } else { 10 }]
    } else {
        vec![100, 500]
    };
    if sizes.contains(&0) {
        bail!("--deployments: sizes must be positive");
    }
    let at_rest = if args.callgrind {
        0
    } else {
        args.at_rest.unwrap_or(if args.quick { 40 } else { 2000 })
    };
    let rounds = if args.callgrind {
        1
    } else {
        args.rounds.unwrap_or(if args.quick { 1 } else { 3 }).max(1)
    };
    if args.callgrind && !command_works("valgrind", &["--version"]) {
        bail!("--callgrind needs valgrind on PATH");
    }
    if let Some(bad) = args.ours_env.iter().find(|kv| !kv.contains('=')) {
        bail!("--ours-env {bad:?}: expected KEY=VALUE");
    }
    let phases = round_phases(&args.phases, args.callgrind)?;
    let subset = phases != Phase::ROUND;
    let variant = args.ours_binary.is_some() || !args.ours_env.is_empty();
    if !args.ours_env.is_empty() && args.callgrind {
        // valgrind would profile the `env` wrapper, not the controller.
        bail!("--callgrind profiles the controller binary itself: drop --ours-env");
    }

    // Room for every Pod: a KWOK node takes 110. Phase c peaks at 8 replicas plus surge; the
    // at-rest Pods come after the last round's namespace is gone.
    let pods =
        (at_rest * REPLICAS as usize + 10).max(sizes.iter().max().copied().unwrap_or(0) * 10) + 100;
    let mut env = prepare(
        &args.name,
        pods,
        args.keep,
        args.callgrind,
        Duration::from_secs(args.phase_timeout_secs),
        args.ours_binary.as_deref(),
        args.kube.release,
    )?;
    env.ours_env = args.ours_env.clone();
    env.phases = phases;
    let nodes = env.nodes;
    let machine = report::Machine::detect(&env.info.kubernetes_version);
    let mut runs = Vec::new();
    let result = (|| -> Result<()> {
        crate::e2e::grant_deploy_rbac(&env.info.kubectl, &env.info.admin_kubeconfig)?;
        check_cluster_kcm(&env)?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()?;
        runtime.block_on(measure(
            &env,
            &sizes,
            at_rest,
            rounds,
            args.settle_secs,
            &mut runs,
        ))
    })();
    let machine = machine.finish();
    if !args.keep {
        eprintln!(
            "stopping cluster '{}' (use --keep to leave it running)",
            args.name
        );
        if let Err(e) = crate::cluster::down(&args.name) {
            eprintln!("  stopping the cluster failed: {e:#}");
        }
    }
    if args.callgrind {
        result?;
        eprintln!(
            "callgrind output in {}: callgrind_annotate --inclusive=yes <file>",
            env.dir.display()
        );
        return Ok(());
    }
    let settings = report::Settings {
        sizes,
        at_rest,
        rounds,
        settle_secs: args.settle_secs,
        quick: args.quick,
        nodes,
        peak_reset: env
            .peak_reset_works
            .load(std::sync::atomic::Ordering::Relaxed),
        cluster_kcm_qps: CLUSTER_KCM_QPS,
        incomplete: result.as_ref().err().map(|e| format!("{e:#}")),
    };
    if runs.is_empty() {
        return result;
    }
    let text = report::text(&runs, &settings);
    println!("{text}");
    if variant {
        eprintln!("(not written to the docs: ours ran as a variant, --ours-binary/--ours-env)");
    } else if subset {
        eprintln!("(not written to the docs: a subset of the phases, --phases)");
    } else if !args.no_doc {
        let doc = root.join("docs/benchmarks/controller.md");
        fs::create_dir_all(doc.parent().expect("has a parent"))?;
        let existing = fs::read_to_string(&doc).unwrap_or_default();
        fs::write(
            &doc,
            report::markdown(&runs, &settings, &machine, &existing),
        )
        .with_context(|| format!("writing {}", doc.display()))?;
        eprintln!("wrote {}", doc.display());
    }
    result
}

/// Builds our binary (`dist` profile) unless `ours_binary` names one, starts cluster `name`
/// afresh on `release` (audit log of the two controller identities on, KWOK nodes for `pods`
/// Pods) and returns what the measurements need.
fn prepare(
    name: &str,
    pods: usize,
    keep: bool,
    callgrind: bool,
    phase_timeout: Duration,
    ours_binary: Option<&Path>,
    release: &'static Release,
) -> Result<Env> {
    let ours = match ours_binary {
        Some(binary) => fs::canonicalize(binary)
            .with_context(|| format!("--ours-binary {}", binary.display()))?,
        None => crate::controller_process::build_dist()?,
    };
    let cache = Cache::locate(release)?;
    let missing = cache.missing();
    if !missing.is_empty() {
        bail!(
            "the control-plane binaries of Kubernetes {} are not built yet ({} missing): run \
             `cargo xtask cluster build --kube-version {}`",
            release.kubernetes,
            missing.len(),
            release.minor_name()
        );
    }
    let kcm = cache.binary(Binary::KubeControllerManager);

    let dir = target_dir(&crate::workspace_root()).join("kctrl-bench-controller");
    fs::create_dir_all(dir.join("logs"))?;
    let policy = dir.join("audit-policy.yaml");
    fs::write(&policy, audit_policy())?;
    let audit_log = dir.join("audit.log");
    let _ = fs::remove_file(&audit_log);

    let nodes = pods.div_ceil(110).max(3);
    eprintln!("starting cluster '{name}' with {nodes} KWOK nodes…");
    // A cluster of this name from an earlier run lacks this run's audit log: start afresh,
    // without the controllers an interrupted run may have left (they lead their own process
    // groups, so a Ctrl-C of xtask does not reach them).
    let leftovers = crate::controller_process::deployment_controllers(&Layout::new(name).dir);
    if !leftovers.is_empty() {
        eprintln!("stopping Deployment controllers left by an earlier run: {leftovers:?}");
        let pids: Vec<u32> = leftovers.iter().map(|(pid, _)| *pid).collect();
        process::stop_all(&[], &pids, STOP_GRACE)?;
    }
    crate::cluster::down(name)?;
    let up = plane::ensure_up(&UpOptions {
        name: name.to_owned(),
        nodes,
        apiserver_args: vec![
            format!("--audit-policy-file={}", policy.display()),
            format!("--audit-log-path={}", audit_log.display()),
            "--audit-log-format=json".into(),
            "--audit-log-maxsize=0".into(),
        ],
        controller_manager_args: vec![
            format!("--kube-api-qps={}", CLUSTER_KCM_QPS.0),
            format!("--kube-api-burst={}", CLUSTER_KCM_QPS.1),
        ],
        deployment_controller: false,
        release,
    });
    let info = match up {
        Ok(info) => info,
        Err(e) => {
            // A half-started cluster is stopped too (its logs are kept).
            if !keep {
                let _ = crate::cluster::down(name);
            }
            return Err(e);
        }
    };
    Ok(Env {
        ours,
        ours_env: Vec::new(),
        kcm,
        info,
        dir,
        audit_log,
        ticks_per_second: clock_ticks(),
        callgrind,
        phases: Phase::ROUND.to_vec(),
        phase_timeout,
        peak_reset_works: std::sync::atomic::AtomicBool::new(true),
        nodes,
    })
}

/// The driver's client: the cluster's admin, not rate limited.
fn admin_client(env: &Env) -> Result<Client> {
    let mut config = kctrl_config::Config::from_flags(
        Some(&env.info.admin_kubeconfig),
        None,
        &Default::default(),
    )
    .context("loading the admin kubeconfig")?;
    config.qps = -1.0;
    Ok(Client::try_from_config(config)?)
}

fn command_works(program: &str, args: &[&str]) -> bool {
    Command::new(program)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// CPU time process `pid` has used so far (`/proc/<pid>/stat`).
pub(crate) fn process_cpu(pid: u32) -> Result<parse::CpuTicks> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("reading /proc/{pid}/stat"))?;
    parse::parse_stat(&stat)
}

/// `getconf CLK_TCK` (100 on Linux unless told otherwise).
pub(crate) fn clock_ticks() -> u64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .unwrap_or(100)
}

/// The cluster's kube-controller-manager must run, without the Deployment controller.
fn check_cluster_kcm(env: &Env) -> Result<()> {
    let layout = Layout::new(&env.info.name);
    let record = process::read_pid_file(&layout.pid_file(Component::ControllerManager))
        .ok_or_else(|| anyhow!("the cluster's kube-controller-manager has no pid file"))?;
    let args = process::cmdline(record.pid);
    if args.is_empty() {
        bail!(
            "the cluster's kube-controller-manager (pid {}) is not running",
            record.pid
        );
    }
    if kctrl_cluster::process::runs_deployment_controller(&args) {
        bail!(
            "the cluster's kube-controller-manager runs the Deployment controller: {}",
            args.join(" ")
        );
    }
    Ok(())
}

fn ensure_no_deployment_controller(env: &Env) -> Result<()> {
    let running = crate::controller_process::deployment_controllers(&env.info.dir);
    if !running.is_empty() {
        bail!(
            "a Deployment controller already runs against cluster '{}': {running:?}",
            env.info.name
        );
    }
    Ok(())
}

/// A running controller process.
struct Controller {
    side: Side,
    child: Child,
    record: ProcRecord,
    log: PathBuf,
    port: u16,
    /// Just before the spawn.
    spawned: Instant,
}

pub(crate) fn free_port() -> Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// Starts one side (after checking that no Deployment controller runs) with client QPS/burst
/// `qps`. `tag` names its log.
fn start(env: &Env, side: Side, tag: &str, qps: (u32, u32)) -> Result<Controller> {
    start_with(env, side, tag, qps, &[])
}

/// [`start`] with `extra` flags after the common ones.
fn start_with(
    env: &Env,
    side: Side,
    tag: &str,
    qps: (u32, u32),
    extra: &[&str],
) -> Result<Controller> {
    ensure_no_deployment_controller(env)?;
    let port = free_port()?;
    let log = env
        .dir
        .join("logs")
        .join(format!("{}-{tag}.log", side.slug()));
    let _ = fs::remove_file(&log);
    let common = [
        "--leader-elect=false".to_owned(),
        "--concurrent-deployment-syncs=5".to_owned(),
        format!("--kube-api-qps={}", qps.0),
        format!("--kube-api-burst={}", qps.1),
        "--bind-address=127.0.0.1".to_owned(),
        format!("--secure-port={port}"),
    ];
    let (binary, mut args) = match side {
        Side::Ours => (
            env.ours.clone(),
            vec![
                format!("--kubeconfig={}", env.info.controller_kubeconfig.display()),
                // Scraped without a token, as kube-controller-manager is (upstream_args).
                format!(
                    "--authorization-always-allow-paths={}",
                    crate::controller_process::ALWAYS_ALLOW_PATHS
                ),
            ],
        ),
        Side::Upstream => (
            env.kcm.clone(),
            crate::controller_process::upstream_args(&env.info.controller_manager_kubeconfig()),
        ),
    };
    args.extend(common);
    args.extend(extra.iter().map(|a| (*a).to_owned()));
    let (binary, args) = if side == Side::Ours && !env.ours_env.is_empty() {
        // `env` execs the controller, so the process id stays the controller's.
        let mut wrapped = env.ours_env.clone();
        wrapped.push(binary.display().to_string());
        wrapped.extend(args);
        (PathBuf::from("env"), wrapped)
    } else {
        (binary, args)
    };
    let (binary, args) = if env.callgrind && side == Side::Ours {
        let mut wrapped = vec![
            "--tool=callgrind".to_owned(),
            format!(
                "--callgrind-out-file={}",
                env.dir.join(format!("callgrind.out.{tag}")).display()
            ),
            binary.display().to_string(),
        ];
        wrapped.extend(args);
        (PathBuf::from("valgrind"), wrapped)
    } else {
        (binary, args)
    };
    let pid_file = log.with_extension("pid");
    eprintln!(
        "==> starting {} ({} {})",
        side.slug(),
        binary.display(),
        args.join(" ")
    );
    let spawned = Instant::now();
    let (child, record) = process::spawn(&binary, &args, &log, &pid_file)?;
    Ok(Controller {
        side,
        child,
        record,
        log,
        port,
        spawned,
    })
}

impl Controller {
    fn pid(&self) -> u32 {
        self.record.pid
    }

    fn exited(&mut self) -> Option<String> {
        match self.child.try_wait() {
            Ok(Some(status)) => Some(format!(
                "{} exited ({status}); log {}:\n{}",
                self.side.slug(),
                self.log.display(),
                process::tail(&self.log, 30)
            )),
            _ => None,
        }
    }

    /// Whether the log says the Deployment controller's caches are synced.
    fn synced(&self) -> bool {
        let text = crate::controller_process::log_since(&self.log, 0);
        match self.side {
            Side::Ours => text.contains(crate::controller_process::SYNCED_MARKER),
            Side::Upstream => parse::kcm_deployment_synced(&text),
        }
    }

    /// Waits for caches synced; returns seconds since the spawn.
    async fn wait_synced(&mut self, timeout: Duration) -> Result<f64> {
        loop {
            if self.synced() {
                return Ok(self.spawned.elapsed().as_secs_f64());
            }
            if let Some(why) = self.exited() {
                bail!(why);
            }
            if self.spawned.elapsed() > timeout {
                bail!(
                    "{} did not sync its caches within {timeout:?}; log {}",
                    self.side.slug(),
                    self.log.display()
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Under `--callgrind`, closes the profile's current part as `<out>.<n>` named `part`
    /// (`callgrind_control --dump`), so each phase reads on its own.
    fn dump_profile(&self, env: &Env, part: &str) -> Result<()> {
        if !env.callgrind || self.side != Side::Ours {
            return Ok(());
        }
        let out = std::process::Command::new("callgrind_control")
            .arg(format!("--dump={part}"))
            .arg(self.pid().to_string())
            .output()
            .context("running callgrind_control")?;
        // It exits 0 even when vgdb refuses its arguments: read what it said too.
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        if !out.status.success() || said.contains("error") {
            bail!(
                "callgrind_control --dump={part} {} failed ({}): {said}",
                self.pid(),
                out.status
            );
        }
        Ok(())
    }

    fn usage(&self) -> Result<(CpuTicks, Memory)> {
        let pid = self.pid();
        let status = fs::read_to_string(format!("/proc/{pid}/status"))
            .with_context(|| format!("reading /proc/{pid}/status"))?;
        Ok((process_cpu(pid)?, parse::parse_status(&status)?))
    }

    /// Resets VmHWM to the current RSS (`/proc/<pid>/clear_refs`, Linux 4.0+).
    fn reset_peak(&self, env: &Env) {
        if fs::write(format!("/proc/{}/clear_refs", self.pid()), "5").is_err() {
            env.peak_reset_works
                .store(false, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// The process's `rest_client_requests_total` by method.
    fn client_requests(&self) -> Result<Counts> {
        let url = format!("https://127.0.0.1:{}/metrics", self.port);
        let text = curl(&url)?;
        let samples = parse::parse_samples(&text, "rest_client_requests_total")?;
        Ok(parse::sum_by(&samples, &["method"], |_| true))
    }

    /// SIGTERM (SIGKILL after the grace period); verifies the process is gone.
    fn stop(mut self, env: &Env) -> Result<()> {
        eprintln!("==> stopping {} (pid {})", self.side.slug(), self.pid());
        if self.child.try_wait()?.is_none() {
            // valgrind writes its profile at exit: give it time.
            let grace = if env.callgrind {
                Duration::from_secs(300)
            } else {
                STOP_GRACE
            };
            process::stop_all(&[self.record], &[], grace)?;
        }
        self.child.wait()?;
        let _ = fs::remove_file(self.log.with_extension("pid"));
        if Path::new(&format!("/proc/{}", self.pid())).exists() {
            bail!("{} (pid {}) is still there", self.side.slug(), self.pid());
        }
        ensure_no_deployment_controller(env)
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = process::stop_all(&[self.record], &[], Duration::from_secs(5));
            let _ = self.child.wait();
        }
    }
}

/// GET over HTTPS with curl, certificate unchecked (the controllers' are self-signed).
pub(crate) fn curl(url: &str) -> Result<String> {
    let out = Command::new("curl")
        .args(["-sSfk", "--max-time", "30", url])
        .output()
        .context("running curl")?;
    if !out.status.success() {
        bail!(
            "curl {url} failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The apiserver's `apiserver_request_total` for the workload resources.
fn apiserver_requests(env: &Env) -> Result<Counts> {
    let out = Command::new(&env.info.kubectl)
        .arg("--kubeconfig")
        .arg(&env.info.admin_kubeconfig)
        .args(["get", "--raw", "/metrics"])
        .output()
        .context("running kubectl get --raw /metrics")?;
    if !out.status.success() {
        bail!(
            "kubectl get --raw /metrics failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    parse::apiserver_requests(&String::from_utf8_lossy(&out.stdout))
}

fn audit_len(env: &Env) -> u64 {
    fs::metadata(&env.audit_log).map(|m| m.len()).unwrap_or(0)
}

/// The audit counts of `user` from byte `from` on.
fn audit_since(env: &Env, from: u64, user: &str) -> Result<Counts> {
    use std::io::{Read, Seek, SeekFrom};
    let mut file = fs::File::open(&env.audit_log)
        .with_context(|| format!("opening {}", env.audit_log.display()))?;
    file.seek(SeekFrom::Start(from))?;
    let mut text = String::new();
    file.read_to_string(&mut text)?;
    Ok(parse::tally_audit(&text, user)?.0)
}

/// Readings at a phase boundary.
struct Probe {
    cpu: CpuTicks,
    /// `None` when the controller's /metrics could not be read (reported, not fatal).
    client: Option<Counts>,
    apiserver: Counts,
    audit_offset: u64,
}

fn probe(env: &Env, c: &Controller) -> Result<Probe> {
    Ok(Probe {
        cpu: c.usage()?.0,
        client: c
            .client_requests()
            .map_err(|e| eprintln!("  warning: {} /metrics: {e:#}", c.side.slug()))
            .ok(),
        apiserver: apiserver_requests(env)?,
        audit_offset: audit_len(env),
    })
}

async fn measure(
    env: &Env,
    sizes: &[usize],
    at_rest: usize,
    rounds: usize,
    settle_secs: u64,
    runs: &mut Vec<PhaseRun>,
) -> Result<()> {
    let client = admin_client(env)?;
    let sides: Vec<Side> = if env.callgrind {
        vec![Side::Ours]
    } else {
        Side::BOTH.to_vec()
    };
    for round in 0..rounds {
        for &n in sizes {
            for side in Side::order(round) {
                if !sides.contains(&side) {
                    continue;
                }
                eprintln!(
                    "round {}/{rounds}, {n} Deployments: {}",
                    round + 1,
                    side.slug()
                );
                let done = run_round(env, &client, side, round, n).await?;
                for r in &done {
                    eprintln!(
                        "  {:<26} wall {:>6.1} s  p50 {:>6.1} s  cpu {:>6.2} s  peak {:>4} MiB  writes {:>5}",
                        r.phase.title(),
                        r.wall,
                        r.p50.unwrap_or(f64::NAN),
                        r.cpu,
                        r.peak_rss >> 20,
                        parse::writes(&r.audit)
                    );
                }
                runs.extend(done);
            }
        }
    }
    if at_rest > 0 {
        measure_at_rest(env, &client, at_rest, rounds, settle_secs, runs).await?;
    }
    Ok(())
}

/// Phases a-d for one side in a fresh namespace.
async fn run_round(
    env: &Env,
    client: &Client,
    side: Side,
    round: usize,
    n: usize,
) -> Result<Vec<PhaseRun>> {
    let namespace = format!("{NAMESPACE_PREFIX}-{n}-r{round}-{}", side.slug());
    crate::bench::ensure_namespace(client, &namespace, &[]).await?;
    let mut controller = start(env, side, &format!("{n}-r{round}"), QPS)?;
    let sync_timeout = if env.callgrind { 900 } else { 120 };
    controller
        .wait_synced(Duration::from_secs(sync_timeout))
        .await?;
    let api = Api::<Deployment>::namespaced(client.clone(), &namespace);
    let mut runs = Vec::new();
    controller.dump_profile(env, "startup")?;
    for &phase in &env.phases {
        controller.reset_peak(env);
        let before = probe(env, &controller)?;
        let started = Instant::now();
        // Each phase's writes, then the replicas every Deployment must reach (none: deletion).
        let target = match phase {
            Phase::Create => {
                concurrently(n, {
                    let api = api.clone();
                    move |i| {
                        let api = api.clone();
                        async move {
                            api.create(&PostParams::default(), &deployment(i)?)
                                .await
                                .with_context(|| format!("creating {}", name(i)))?;
                            Ok(())
                        }
                    }
                })
                .await?;
                Some(REPLICAS)
            }
            Phase::Rollout => {
                patch_all(&api, n, image_patch("b")).await?;
                Some(REPLICAS)
            }
            Phase::ScaleMidRollout => {
                patch_all(&api, n, image_patch("c")).await?;
                wait_observed(&api, n.div_ceil(2), started, env.phase_timeout).await?;
                patch_all(
                    &api,
                    n,
                    serde_json::json!({"spec": {"replicas": REPLICAS * 2}}),
                )
                .await?;
                Some(REPLICAS * 2)
            }
            Phase::Delete => {
                delete_namespace(client, &namespace, env.phase_timeout).await?;
                None
            }
            Phase::AtRest => unreachable!("phase e runs in measure_at_rest"),
        };
        let completions = match target {
            Some(replicas) => {
                wait_complete(
                    &api,
                    n,
                    replicas,
                    started,
                    env.phase_timeout,
                    &mut controller,
                )
                .await?
            }
            None => vec![started.elapsed().as_secs_f64()],
        };
        let wall = completions.iter().copied().fold(0.0, f64::max);
        tokio::time::sleep(TAIL).await;
        if let Some(why) = controller.exited() {
            bail!(why);
        }
        let after = probe(env, &controller)?;
        let (_, memory) = controller.usage()?;
        controller.dump_profile(env, phase.slug())?;
        let per_deployment = phase != Phase::Delete;
        runs.push(PhaseRun {
            side,
            round,
            size: n,
            phase,
            wall,
            p50: per_deployment
                .then(|| parse::percentile(&completions, 50.0))
                .flatten(),
            p99: per_deployment
                .then(|| parse::percentile(&completions, 99.0))
                .flatten(),
            cpu: after.cpu.since(before.cpu).seconds(env.ticks_per_second),
            cpu_system: after
                .cpu
                .since(before.cpu)
                .system_seconds(env.ticks_per_second),
            peak_rss: memory.peak,
            steady_rss: memory.rss,
            client: match (&before.client, &after.client) {
                (Some(b), Some(a)) => parse::delta(b, a),
                _ => Counts::new(),
            },
            audit: audit_since(env, before.audit_offset, side.user())?,
            apiserver: parse::delta(&before.apiserver, &after.apiserver),
            synced: None,
            first_write: None,
        });
    }
    controller.stop(env)?;
    if !env.phases.contains(&Phase::Delete) {
        // The next round starts from the same cluster: this one's objects go, unmeasured.
        delete_namespace(client, &namespace, env.phase_timeout).await?;
    }
    Ok(runs)
}

/// The phases `--phases` names (`a`-`d`), in round order; all four by default, a-c under
/// `--callgrind`.
fn round_phases(letters: &[String], callgrind: bool) -> Result<Vec<Phase>> {
    if letters.is_empty() {
        let all = Phase::ROUND.to_vec();
        return Ok(if callgrind { all[..3].to_vec() } else { all });
    }
    let mut phases = Vec::new();
    for letter in letters {
        let phase = match letter.trim() {
            "a" => Phase::Create,
            "b" => Phase::Rollout,
            "c" => Phase::ScaleMidRollout,
            "d" => Phase::Delete,
            other => bail!("--phases: unknown phase {other:?} (expected a, b, c or d)"),
        };
        if !phases.contains(&phase) {
            phases.push(phase);
        }
    }
    phases.sort();
    if phases.iter().any(|p| *p != Phase::Create) && !phases.contains(&Phase::Create) {
        bail!("--phases: every phase works on the Deployments phase a creates; include a");
    }
    Ok(phases)
}

/// Phase e: M Deployments at rest; per round and side a fresh process after one template was
/// changed while no controller ran.
async fn measure_at_rest(
    env: &Env,
    client: &Client,
    m: usize,
    rounds: usize,
    settle_secs: u64,
    runs: &mut Vec<PhaseRun>,
) -> Result<()> {
    let namespace = format!("{NAMESPACE_PREFIX}-rest-{m}");
    crate::bench::ensure_namespace(client, &namespace, &[]).await?;
    let api = Api::<Deployment>::namespaced(client.clone(), &namespace);
    eprintln!(
        "preparing {m} Deployments x {REPLICAS} at rest in {namespace} (ours, QPS {SETUP_QPS:?})…"
    );
    let mut setup = start(env, Side::Ours, &format!("rest-{m}-setup"), SETUP_QPS)?;
    setup.wait_synced(Duration::from_secs(120)).await?;
    let started = Instant::now();
    concurrently(m, {
        let api = api.clone();
        move |i| {
            let api = api.clone();
            async move {
                match api.create(&PostParams::default(), &deployment(i)?).await {
                    Ok(_) => Ok(()),
                    Err(e) if e.is_already_exists() => Ok(()),
                    Err(e) => Err(anyhow!("creating {}: {e}", name(i))),
                }
            }
        }
    })
    .await?;
    let timeout = env.phase_timeout.max(Duration::from_secs(3600));
    wait_complete(&api, m, REPLICAS, started, timeout, &mut setup).await?;
    eprintln!(
        "  {m} Deployments complete after {:.0} s",
        started.elapsed().as_secs_f64()
    );
    setup.stop(env)?;

    let replica_sets = Api::<ReplicaSet>::namespaced(client.clone(), &namespace);
    for round in 0..rounds {
        for side in Side::order(round) {
            let index = (round * 2 + side as usize) % m;
            let target = name(index);
            let selector = ListParams {
                label_selector: Some(format!("app={target}")),
                ..Default::default()
            };
            let before_sets = replica_sets.list(&selector).await?.items.len();
            // The template changes while no controller runs: the first write of the new process
            // is the new ReplicaSet.
            api.patch(
                &target,
                &PatchParams::default(),
                &Patch::Merge(image_patch(&format!("rest-{round}-{}", side.slug()))),
            )
            .await
            .with_context(|| format!("patching {target}"))?;
            eprintln!(
                "at rest, round {}/{rounds}: {} ({target} changed)",
                round + 1,
                side.slug()
            );
            let audit_from = audit_len(env);
            let api_before = apiserver_requests(env)?;
            let mut c = start(env, side, &format!("rest-{m}-r{round}"), QPS)?;
            let (mut synced, mut first_write) = (None, None);
            while synced.is_none() || first_write.is_none() {
                if synced.is_none() && c.synced() {
                    synced = Some(c.spawned.elapsed().as_secs_f64());
                }
                if first_write.is_none() {
                    let now = c.spawned.elapsed().as_secs_f64();
                    if replica_sets.list(&selector).await?.items.len() > before_sets {
                        first_write = Some(now);
                    }
                }
                if let Some(why) = c.exited() {
                    bail!(why);
                }
                if c.spawned.elapsed() > Duration::from_secs(600) {
                    bail!(
                        "{}: no caches synced or no new ReplicaSet for {target} within 600 s",
                        side.slug()
                    );
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            tokio::time::sleep(Duration::from_secs(settle_secs)).await;
            let (cpu, memory) = c.usage()?;
            let client_requests = c
                .client_requests()
                .map_err(|e| eprintln!("  warning: {} /metrics: {e:#}", side.slug()))
                .unwrap_or_default();
            let api_after = apiserver_requests(env)?;
            let wall = c.spawned.elapsed().as_secs_f64();
            runs.push(PhaseRun {
                side,
                round,
                size: m,
                phase: Phase::AtRest,
                wall,
                p50: None,
                p99: None,
                cpu: cpu.seconds(env.ticks_per_second),
                cpu_system: cpu.system_seconds(env.ticks_per_second),
                peak_rss: memory.peak,
                steady_rss: memory.rss,
                client: client_requests,
                audit: audit_since(env, audit_from, side.user())?,
                apiserver: parse::delta(&api_before, &api_after),
                synced,
                first_write,
            });
            eprintln!(
                "  synced {:.2} s, first write {:.2} s, steady RSS {} MiB, peak {} MiB, cpu {:.2} s",
                synced.unwrap_or(f64::NAN),
                first_write.unwrap_or(f64::NAN),
                memory.rss >> 20,
                memory.peak >> 20,
                cpu.seconds(env.ticks_per_second)
            );
            c.stop(env)?;
        }
    }
    Ok(())
}

fn name(i: usize) -> String {
    format!("d-{i:04}")
}

fn deployment(i: usize) -> Result<Deployment> {
    deployment_with(i, REPLICAS)
}

/// Deployment `i` with `replicas` replicas.
fn deployment_with(i: usize, replicas: i32) -> Result<Deployment> {
    let name = name(i);
    Ok(serde_json::from_value(serde_json::json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "app", "image": "registry.k8s.io/pause:a"}]},
            },
        },
    }))?)
}

fn image_patch(tag: &str) -> serde_json::Value {
    serde_json::json!({"spec": {"template": {"spec": {"containers": [
        {"name": "app", "image": format!("registry.k8s.io/pause:{tag}")}
    ]}}}})
}

async fn delete_namespace(client: &Client, name: &str, timeout: Duration) -> Result<()> {
    let api = Api::<Namespace>::all(client.clone());
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => {}
        Err(e) if e.is_not_found() => return Ok(()),
        Err(e) => bail!("deleting namespace {name}: {e}"),
    }
    let started = Instant::now();
    loop {
        match api.get(name).await {
            Err(e) if e.is_not_found() => return Ok(()),
            _ => {}
        }
        if started.elapsed() > timeout {
            bail!("namespace {name} still exists {timeout:?} after its deletion");
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

async fn patch_all(api: &Api<Deployment>, n: usize, patch: serde_json::Value) -> Result<()> {
    let patch = Arc::new(Patch::Merge(patch));
    let api = api.clone();
    concurrently(n, move |i| {
        let (api, patch) = (api.clone(), patch.clone());
        async move {
            api.patch(&name(i), &PatchParams::default(), &patch)
                .await
                .with_context(|| format!("patching {}", name(i)))?;
            Ok(())
        }
    })
    .await
}

/// How often the driver lists the Deployments while it waits.
fn poll_interval(n: usize) -> Duration {
    if n > 200 {
        Duration::from_millis(500)
    } else {
        Duration::from_millis(250)
    }
}

fn rollout_state(d: &Deployment) -> RolloutState {
    let status = d.status.clone().unwrap_or_default();
    RolloutState {
        generation: d.metadata.generation.unwrap_or(0),
        observed_generation: status.observed_generation.unwrap_or(0),
        spec_replicas: d.spec.get().and_then(|s| s.replicas).unwrap_or(1),
        replicas: status.replicas.unwrap_or(0),
        updated: status.updated_replicas.unwrap_or(0),
        available: status.available_replicas.unwrap_or(0),
    }
}

/// Waits until all `n` Deployments are complete at `want` replicas; returns each one's
/// completion time in seconds since `started` (as first seen by the driver).
async fn wait_complete(
    api: &Api<Deployment>,
    n: usize,
    want: i32,
    started: Instant,
    timeout: Duration,
    controller: &mut Controller,
) -> Result<Vec<f64>> {
    let mut done: std::collections::BTreeMap<String, f64> = Default::default();
    let mut last_report = Instant::now();
    loop {
        let list = api.list(&ListParams::default()).await?;
        let now = started.elapsed().as_secs_f64();
        for d in &list.items {
            let key = d.metadata.name.clone().unwrap_or_default();
            if !done.contains_key(&key) && rollout_state(d).complete(want) {
                done.insert(key, now);
            }
        }
        if done.len() >= n {
            return Ok(done.into_values().collect());
        }
        if let Some(why) = controller.exited() {
            bail!(why);
        }
        if started.elapsed() > timeout {
            bail!(
                "only {}/{n} Deployments complete at {want} replicas after {timeout:?}",
                done.len()
            );
        }
        if last_report.elapsed() > Duration::from_secs(30) {
            eprintln!("  {}/{n} complete after {now:.0} s", done.len());
            last_report = Instant::now();
        }
        tokio::time::sleep(poll_interval(n)).await;
    }
}

/// Waits until at least `count` Deployments have observed their latest generation.
async fn wait_observed(
    api: &Api<Deployment>,
    count: usize,
    started: Instant,
    timeout: Duration,
) -> Result<()> {
    loop {
        let list = api.list(&ListParams::default()).await?;
        let observed = list
            .items
            .iter()
            .filter(|d| {
                let s = rollout_state(d);
                s.observed_generation >= s.generation
            })
            .count();
        if observed >= count {
            return Ok(());
        }
        if started.elapsed() > timeout {
            bail!(
                "only {observed}/{count} Deployments observed the template change after {timeout:?}"
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Runs `f(0..count)` with [`CONCURRENCY`] requests in flight.
async fn concurrently<F, Fut>(count: usize, f: F) -> Result<()>
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<()>> + Send + 'static,
{
    let next = Arc::new(AtomicUsize::new(0));
    let f = Arc::new(f);
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..CONCURRENCY.min(count.max(1)) {
        let (next, f) = (next.clone(), f.clone());
        workers.spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= count {
                    return Ok::<(), anyhow::Error>(());
                }
                f(i).await?;
            }
        });
    }
    while let Some(joined) = workers.join_next().await {
        if let Err(e) = joined.map_err(anyhow::Error::from).and_then(|r| r) {
            workers.abort_all();
            return Err(e);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn audit_policy_records_only_the_two_controller_identities() {
        let policy: serde_yaml_ng::Value = serde_yaml_ng::from_str(&audit_policy()).unwrap();
        assert_eq!(policy["kind"], "Policy");
        assert_eq!(policy["apiVersion"], "audit.k8s.io/v1");
        let rules = policy["rules"].as_sequence().unwrap();
        assert_eq!(rules.len(), 2);
        assert_eq!(rules[0]["level"], "Metadata");
        let users: Vec<&str> = rules[0]["users"]
            .as_sequence()
            .unwrap()
            .iter()
            .map(|u| u.as_str().unwrap())
            .collect();
        assert_eq!(users, [OURS_USER, UPSTREAM_USER]);
        assert_eq!(rules[1]["level"], "None");
        let omitted = policy["omitStages"].as_sequence().unwrap();
        assert!(omitted.iter().any(|s| s == "ResponseStarted"));
    }

    #[test]
    fn sides_alternate_by_round() {
        assert_eq!(Side::order(0), [Side::Ours, Side::Upstream]);
        assert_eq!(Side::order(1), [Side::Upstream, Side::Ours]);
        assert_eq!(Side::order(2), [Side::Ours, Side::Upstream]);
    }

    #[test]
    fn phases_are_named_by_letter_and_kept_in_round_order() {
        let letters = |s: &str| s.split(',').map(str::to_owned).collect::<Vec<_>>();
        assert_eq!(round_phases(&[], false).unwrap(), Phase::ROUND.to_vec());
        assert_eq!(round_phases(&[], true).unwrap(), Phase::ROUND[..3].to_vec());
        assert_eq!(
            round_phases(&letters("c,a,a"), false).unwrap(),
            [Phase::Create, Phase::ScaleMidRollout]
        );
        let unknown = round_phases(&letters("a,e"), false).unwrap_err();
        assert!(unknown.to_string().contains("\"e\""), "{unknown}");
        let without_a = round_phases(&letters("b"), false).unwrap_err();
        assert!(without_a.to_string().contains("include a"), "{without_a}");
    }

    #[test]
    fn arguments_parse() {
        use clap::Parser;
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            args: ControllerArgs,
        }
        let cli = Cli::try_parse_from([
            "x",
            "--deployments",
            "100,500",
            "--at-rest",
            "0",
            "--rounds",
            "2",
        ])
        .unwrap();
        assert_eq!(cli.args.deployments, [100, 500]);
        assert_eq!(cli.args.at_rest, Some(0));
        assert_eq!(cli.args.rounds, Some(2));
        assert_eq!(cli.args.name, "bench-controller");
        assert!(Cli::try_parse_from(["x", "--deployments", "many"]).is_err());
    }

    #[test]
    fn workload_objects() {
        let d = deployment(7).unwrap();
        assert_eq!(d.metadata.name.as_deref(), Some("d-0007"));
        let spec = d.spec.into_value().unwrap();
        assert_eq!(spec.replicas, Some(REPLICAS));
        assert_eq!(
            spec.selector.match_labels.unwrap()["app"],
            "d-0007".to_string()
        );
        let patch = image_patch("b");
        assert_eq!(
            patch["spec"]["template"]["spec"]["containers"][0]["image"],
            "registry.k8s.io/pause:b"
        );
    }

    /// An environment whose "cluster" is a scratch directory and whose controller is `ours`.
    fn scratch_env(name: &str, ours: &str) -> (PathBuf, Env) {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!(
            "kctrl-bench-controller-{name}-{}",
            std::process::id()
        ));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(dir.join("bin")).unwrap();
        fs::create_dir_all(dir.join("bench/logs")).unwrap();
        let binary = dir.join("bin/deployment-controller");
        fs::write(&binary, format!("#!/bin/sh\n{ours}\n")).unwrap();
        fs::set_permissions(&binary, fs::Permissions::from_mode(0o755)).unwrap();
        let cluster = dir.join("cluster");
        let env = Env {
            ours: binary,
            ours_env: Vec::new(),
            kcm: PathBuf::from("/nonexistent/kube-controller-manager"),
            info: ClusterInfo {
                name: name.to_owned(),
                dir: cluster.clone(),
                admin_kubeconfig: cluster.join("kubeconfig/admin.kubeconfig"),
                controller_kubeconfig: cluster.join("kubeconfig/deployment-controller.kubeconfig"),
                apiserver_url: "https://127.0.0.1:1".into(),
                etcd_endpoint: "http://127.0.0.1:2".into(),
                kubectl: PathBuf::from("kubectl"),
                kubernetes_version: "v1.36.5".into(),
            },
            dir: dir.join("bench"),
            audit_log: dir.join("bench/audit.log"),
            ticks_per_second: 100,
            callgrind: false,
            phases: Phase::ROUND.to_vec(),
            phase_timeout: Duration::from_secs(10),
            peak_reset_works: std::sync::atomic::AtomicBool::new(true),
            nodes: 3,
        };
        (dir, env)
    }

    #[test]
    fn a_second_controller_is_refused_and_a_stopped_one_is_gone() {
        let (dir, env) = scratch_env(
            "alone",
            "trap 'exit 0' TERM\necho 'INFO Caches are synced for deployment'\nwhile :; do sleep 0.1; done",
        );
        ensure_no_deployment_controller(&env).unwrap();
        let mut first = start(&env, Side::Ours, "t1", QPS).unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let synced = runtime
            .block_on(first.wait_synced(Duration::from_secs(10)))
            .unwrap();
        assert!(synced < 10.0);
        let log = fs::read_to_string(&first.log).unwrap_or_default();
        assert!(log.contains("Caches are synced"), "{log}");
        // The process is found by its command line (it names the cluster's kubeconfig).
        let running = crate::controller_process::deployment_controllers(&env.info.dir);
        assert_eq!(running.len(), 1, "{running:?}");
        assert_eq!(running[0].0, first.pid());
        let err = start(&env, Side::Ours, "t2", QPS)
            .err()
            .expect("a second controller must be refused")
            .to_string();
        assert!(err.contains("already runs"), "{err}");
        let (cpu, memory) = first.usage().unwrap();
        assert!(memory.rss > 0 && memory.peak >= memory.rss);
        assert!(cpu.seconds(100) >= 0.0);
        first.reset_peak(&env);
        let pid = first.pid();
        first.stop(&env).unwrap();
        assert!(!Path::new(&format!("/proc/{pid}")).exists());
        ensure_no_deployment_controller(&env).unwrap();
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_controller_that_exits_before_syncing_is_an_error_naming_its_log() {
        let (dir, env) = scratch_env("early", "echo 'cannot reach the API server'; exit 1");
        let mut c = start(&env, Side::Ours, "t", QPS).unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let err = runtime
            .block_on(c.wait_synced(Duration::from_secs(10)))
            .unwrap_err()
            .to_string();
        assert!(err.contains("exited"), "{err}");
        assert!(err.contains("cannot reach the API server"), "{err}");
        c.stop(&env).unwrap();
        fs::remove_dir_all(&dir).unwrap();
    }
}

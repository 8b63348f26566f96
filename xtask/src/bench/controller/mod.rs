//! `cargo xtask bench controller`: our deployment-controller beside kube-controller-manager's
//! Deployment controller, on one local control plane (`cargo xtask cluster`).
//!
//! The two controllers take turns, each alone against the cluster: ours is `deployment-controller`
//! as shipped (the `dist` profile); upstream's is a second kube-controller-manager from the cached build
//! running only `--controllers=deployment-controller`. Both run with leader election off, QPS 20,
//! burst 30 (`--qps`) and 5 concurrent syncs (kube-controller-manager's defaults), each as its own
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
//!
//! `--scale` is the same measurement where the controller, not the client's rate limit, sets
//! the pace and the caches dominate the process: both controllers and the cluster's own
//! components at client limits no phase reaches, 300 Deployments x 5 Pods through phases
//! a-c, a Recreate (f) and d, and phase e at several sizes up to 5,000-node density, built one
//! on top of the other (docs/benchmarks/scale.md).

pub(crate) mod lanes;
mod measure;
mod measured;
pub(super) mod report;
mod running;
pub(super) mod workload;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use kctrl_client::Client;
use kctrl_cluster::plane::{ClusterInfo, Component, Layout, UpOptions};
use kctrl_cluster::process;
use kctrl_cluster::toolchain::Cache;
use kctrl_cluster::versions::{Binary, Release};
use xtask_contender::args::KubeVersionArg;
use xtask_contender::fresh::{self, Fresh};
use xtask_contender::parse::Counts;
use xtask_contender::{OURS_USER, UPSTREAM_REPLICASET_USER, UPSTREAM_USER};

use self::measure::{measure, round_phases};
pub(crate) use self::measured::Measured;
#[cfg(test)]
use self::running::{ensure_no_deployment_controller, start};
#[cfg(test)]
use self::workload::{deployment, image_patch};

/// The side of the comparison: ours or upstream, the contender layer's one type.
pub(super) use xtask_contender::Contender as Side;

/// Replicas of every benchmark Deployment unless `--replicas` says otherwise.
const REPLICAS: i32 = 4;
/// Deployments per namespace of phase e (its sizes reach tens of thousands; a cluster of that
/// size spreads them over hundreds of namespaces).
const AT_REST_PER_NAMESPACE: usize = 100;
/// Namespace prefix of the benchmark's workloads.
const NAMESPACE_PREFIX: &str = "kctrl-bench-ctl";
/// Concurrent requests of the driver's create and patch loads (its client is not throttled).
const CONCURRENCY: usize = 16;
/// Time after a phase's last completion before the closing readings, so trailing status writes
/// count in the phase and the steady RSS is read at rest.
const TAIL: Duration = Duration::from_secs(3);
/// Client QPS / burst of the controllers (kube-controller-manager's defaults).
const QPS: (u32, u32) = (20, 30);
/// Client QPS / burst of our controller while it prepares the at-rest namespaces (not measured).
const SETUP_QPS: (u32, u32) = (2000, 4000);

/// The client QPS / burst of phase e's set-up when the measured controllers run at `qps`:
/// [`SETUP_QPS`], or `qps` where that is higher.
fn setup_qps(qps: (u32, u32)) -> (u32, u32) {
    (SETUP_QPS.0.max(qps.0), SETUP_QPS.1.max(qps.1))
}
/// Client QPS / burst of the cluster's kube-controller-manager (ReplicaSet controller, garbage
/// collector, namespace controller): high enough that the Deployment controller is the
/// bottleneck of every phase, for both sides alike.
const CLUSTER_KCM_QPS: (u32, u32) = (200, 400);
/// `--scale`'s client QPS / burst of both controllers measured and of the cluster's
/// kube-controller-manager and kube-scheduler: limits none of them reaches (KWOK's client has
/// no limit).
const SCALE_QPS: (u32, u32) = (5000, 10000);
/// `--scale`'s phase e sizes (Deployments x 5 Pods): 30,000 is 150,000 Pods, the Pods of
/// Kubernetes' 5,000-node scalability envelope.
const SCALE_AT_REST: [usize; 3] = [3000, 10000, 30000];
/// `--scale`'s N of phases a-d and f (x 5 Pods). The issue asks for 1,000; on this 2-core
/// machine the rolling update (b) of 1,000 x 5 alone took one side over 8 minutes with every
/// core busy with the control plane, so the default is what two rounds of both sides fit in
/// about half an hour.
const SCALE_DEPLOYMENTS: usize = 300;
/// `--scale`'s phases of each round.
const SCALE_PHASES: [&str; 5] = ["a", "b", "c", "f", "d"];

/// Arguments of `cargo xtask bench controller`.
#[derive(clap::Args)]
pub(crate) struct ControllerArgs {
    /// Deployments per round of phases a-d, comma-separated (default 100,500; 10 with --quick).
    #[arg(long, value_delimiter = ',')]
    deployments: Vec<usize>,
    /// Deployments (x --replicas Pods) in the cluster for the at-rest phase e, comma-separated and
    /// ascending; each size is built on the one before (default 2000; 40 with --quick;
    /// 3000,10000,30000 with --scale); 0 skips phase e.
    #[arg(long, value_delimiter = ',')]
    at_rest: Vec<usize>,
    /// Replicas of every Deployment (default 4; 5 with --scale).
    #[arg(long)]
    replicas: Option<i32>,
    /// Client QPS,burst of both controllers measured (default 20,30: kube-controller-manager's
    /// defaults; 5000,10000 with --scale).
    #[arg(long, value_delimiter = ',')]
    qps: Vec<u32>,
    /// Client QPS,burst of the cluster's kube-controller-manager and kube-scheduler (default
    /// 200,400; 5000,10000 with --scale).
    #[arg(long, value_delimiter = ',')]
    cluster_qps: Vec<u32>,
    /// The measurement of issue [scale]: the controllers' and the cluster's client limits out
    /// of the way, 300 Deployments x 5 Pods through phases a, b, c, f (Recreate) and d, two
    /// rounds, phase e at 3,000, 10,000 and 30,000 Deployments; writes
    /// docs/benchmarks/scale.md. Explicit options override each part (and keep the run out of
    /// the docs).
    #[arg(long)]
    scale: bool,
    /// Rounds; each runs both controllers once per size, alternating which goes first (default
    /// 3; 1 with --quick).
    #[arg(long)]
    rounds: Option<usize>,
    /// Seconds between phase e's first write and idle and its steady RSS reading.
    #[arg(long, default_value_t = 20)]
    settle_secs: u64,
    /// Give up when a phase takes longer than this many seconds.
    #[arg(long, default_value_t = 1800)]
    phase_timeout_secs: u64,
    /// Small sizes and one round: a smoke run, not numbers to publish.
    #[arg(long)]
    quick: bool,
    /// Phases of each round to measure, comma-separated letters: a create, b rollout, c scale
    /// x2 mid-rollout, f Recreate, d namespace deletion (default a,b,c,d; a,b,c,f,d with
    /// --scale; a,b,c with --callgrind); `e` alone measures only phase e. The namespace of a
    /// round is deleted unmeasured when d is left out. A subset is not written to the docs.
    #[arg(long, value_delimiter = ',')]
    phases: Vec<String>,
    /// Profile ours instead: phases a-c under `valgrind --tool=callgrind` (one round, ours only,
    /// no doc), one output part per phase (`.1` startup, `.2` phase a, ...); prints where. With --ours-binary, profiles that binary (to
    /// compare the instruction counts of two builds, which machine load does not change).
    #[arg(long)]
    callgrind: bool,
    /// The controllers measured: `deployment` (the cluster's kube-controller-manager runs the
    /// ReplicaSet controller), `replicaset` (it runs the Deployment controller) or `pair` (both
    /// in one process of each side; it runs neither). Writes docs/benchmarks/controller.md,
    /// replicaset.md or controller-pair.md.
    #[arg(long = "controllers", value_enum, default_value_t = Measured::Deployment)]
    measured: Measured,
    /// Cluster name (see `cargo xtask cluster`); a running cluster of that name is restarted.
    #[arg(long, default_value = "bench-controller")]
    name: String,
    /// Leave the cluster running at the end.
    #[arg(long)]
    keep: bool,
    /// Do not rewrite the report (docs/benchmarks/controller.md, replicaset.md,
    /// controller-pair.md or, with --scale, scale.md).
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

/// The measured workloads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Phase {
    /// (a) N Deployments created until complete.
    Create,
    /// (b) every template changed until rolled out.
    Rollout,
    /// (c) a second template change, every Deployment scaled x2 mid-rollout.
    ScaleMidRollout,
    /// (f) the strategy changed to Recreate with a third template change.
    Recreate,
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
            Phase::Recreate => "phase-f-recreate",
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
            Phase::Recreate => "(f) Recreate",
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
    /// Phase e: seconds from process start to the first second without work (after caches
    /// synced and the first write: less than [`IDLE_CPU_SHARE`] of a core for
    /// [`IDLE_WINDOW`]), and the CPU-seconds spent until then.
    pub(super) idle: Option<(f64, f64)>,
    /// Phase e: resident set of kube-apiserver and etcd at the end (the cluster's, for scale).
    pub(super) cluster_rss: Option<(u64, u64)>,
    /// Phases a-d and f: the share of the machine's CPU time (all cores) that was busy over
    /// the phase, whoever used it; near 1 the control plane's CPU, not a controller, set the
    /// pace.
    pub(super) machine_busy: Option<f64>,
}

/// Phase e's idle detection: the controller is idle once its CPU use stays below this share
/// of one core for [`IDLE_WINDOW`], read from `/proc` (scraping its metrics would cost the
/// measured process work of its own).
pub(super) const IDLE_CPU_SHARE: f64 = 0.05;
/// See [`IDLE_CPU_SHARE`].
pub(super) const IDLE_WINDOW: Duration = Duration::from_secs(1);

/// Everything the measurement needs.
struct Env {
    /// The controllers measured.
    measured: Measured,
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
    /// Replicas of every Deployment.
    replicas: i32,
    /// Client QPS / burst of the controllers measured.
    qps: (u32, u32),
}

fn target_dir(root: &Path) -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), PathBuf::from)
}

/// Audit policy: metadata of every request of the controller identities, nothing else.
fn audit_policy() -> String {
    format!(
        "apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived, ResponseStarted]
rules:
- level: Metadata
  users: [\"{OURS_USER}\", \"{UPSTREAM_USER}\", \"{UPSTREAM_REPLICASET_USER}\"]
- level: None
"
    )
}

pub(crate) fn run(args: ControllerArgs) -> Result<()> {
    let root = crate::workspace_root();
    let scale = args.scale && !args.quick;
    if args.scale && (args.quick || args.callgrind) {
        bail!("--scale is a full measurement: drop --quick and --callgrind");
    }
    let phase_letters: Vec<String> = if args.phases.is_empty() && scale {
        SCALE_PHASES.map(str::to_owned).to_vec()
    } else {
        args.phases.clone()
    };
    let only_at_rest = phase_letters.len() == 1 && phase_letters[0].trim() == "e";
    let sizes = if only_at_rest {
        Vec::new()
    } else if !args.deployments.is_empty() {
        args.deployments.clone()
    } else if args.quick || args.callgrind {
        vec![if args.callgrind { 20 } else { 10 }]
    } else if scale {
        vec![SCALE_DEPLOYMENTS]
    } else {
        vec![100, 500]
    };
    if sizes.contains(&0) {
        bail!("--deployments: sizes must be positive");
    }
    let at_rest: Vec<usize> = if args.callgrind {
        Vec::new()
    } else if !args.at_rest.is_empty() {
        args.at_rest.iter().copied().filter(|&m| m > 0).collect()
    } else if args.quick {
        vec![40]
    } else if scale {
        SCALE_AT_REST.to_vec()
    } else {
        vec![2000]
    };
    if at_rest.windows(2).any(|w| w[0] >= w[1]) {
        bail!("--at-rest {at_rest:?}: sizes must be ascending (each is built on the one before)");
    }
    if only_at_rest && at_rest.is_empty() {
        bail!("--phases e measures phase e only: give it a size (--at-rest)");
    }
    let replicas = args.replicas.unwrap_or(if scale { 5 } else { REPLICAS });
    if !(1..=100).contains(&replicas) {
        bail!("--replicas {replicas}: expected 1 to 100");
    }
    let pair = |flag: &str, given: &[u32], default: (u32, u32)| -> Result<(u32, u32)> {
        match given {
            [] => Ok(default),
            [qps, burst] if *qps > 0 && burst >= qps => Ok((*qps, *burst)),
            _ => bail!(
                "{flag} {given:?}: expected QPS,BURST with 0 < QPS <= BURST (e.g. {},{})",
                default.0,
                default.1
            ),
        }
    };
    let qps = pair("--qps", &args.qps, if scale { SCALE_QPS } else { QPS })?;
    let cluster_qps = pair(
        "--cluster-qps",
        &args.cluster_qps,
        if scale { SCALE_QPS } else { CLUSTER_KCM_QPS },
    )?;
    let rounds = if args.callgrind {
        1
    } else {
        args.rounds
            .unwrap_or(if args.quick {
                1
            } else if scale {
                2
            } else {
                3
            })
            .max(1)
    };
    if args.callgrind && !command_works("valgrind", &["--version"]) {
        bail!("--callgrind needs valgrind on PATH");
    }
    if let Some(bad) = args.ours_env.iter().find(|kv| !kv.contains('=')) {
        bail!("--ours-env {bad:?}: expected KEY=VALUE");
    }
    let phases = if only_at_rest {
        Vec::new()
    } else {
        round_phases(&phase_letters, args.callgrind)?
    };
    // What keeps the run out of the docs (their figures are for the documented settings).
    let unpublished = if args.ours_binary.is_some() || !args.ours_env.is_empty() {
        Some("ours ran as a variant, --ours-binary/--ours-env")
    } else if scale
        && (phases != round_phases(&SCALE_PHASES.map(str::to_owned), false)?
            || args.measured != Measured::Deployment
            || !args.deployments.is_empty()
            || !args.at_rest.is_empty()
            || args.rounds.is_some()
            || args.replicas.is_some()
            || !args.qps.is_empty()
            || !args.cluster_qps.is_empty())
    {
        Some(
            "--scale with settings of its own (phases, sizes, rounds, replicas, QPS or controllers)",
        )
    } else if !scale && phases != Phase::ROUND {
        Some("other phases than a,b,c,d (--phases)")
    } else {
        None
    };
    if !args.ours_env.is_empty() && args.callgrind {
        // valgrind would profile the `env` wrapper, not the controller.
        bail!("--callgrind profiles the controller binary itself: drop --ours-env");
    }

    // Under --scale phase e and phases a-f each get a cluster of their own, with the KWOK
    // nodes that stage needs: the 1,365 nodes of 150,000 Pods (their leases, the scheduler
    // filtering them) would otherwise load the machine during the rollouts. Phase e, the
    // figures the issue is about, comes first.
    let stages: Vec<(Vec<usize>, Vec<usize>)> = if scale && !sizes.is_empty() && !at_rest.is_empty()
    {
        vec![(Vec::new(), at_rest.clone()), (sizes.clone(), Vec::new())]
    } else {
        vec![(sizes.clone(), at_rest.clone())]
    };
    let mut results = measure::Results::default();
    let mut nodes = Vec::new();
    let mut machine = None;
    let mut peak_reset = true;
    let mut result = Ok(());
    let doc = (unpublished.is_none() && !args.no_doc).then(|| {
        root.join(if scale {
            "docs/benchmarks/scale.md"
        } else {
            args.measured.doc()
        })
    });
    // One binary for every stage, built before the first (a stage can last an hour, and the
    // workspace may change meanwhile).
    let ours = resolve_ours(args.ours_binary.as_deref())?;
    // What every report of this run says; each write fills in what it has measured so far.
    let base = report::Settings {
        sizes: sizes.clone(),
        at_rest: at_rest.clone(),
        rounds,
        settle_secs: args.settle_secs,
        quick: args.quick,
        nodes: Vec::new(),
        peak_reset: true,
        cluster_kcm_qps: cluster_qps,
        qps,
        replicas,
        scale,
        setups: Vec::new(),
        measured: args.measured,
        incomplete: None,
    };
    let mut errors: Vec<String> = Vec::new();
    for (i, (stage_sizes, stage_at_rest)) in stages.iter().enumerate() {
        // Each stage's cluster keeps its own logs.
        let name = if stages.len() > 1 && !stage_at_rest.is_empty() {
            format!("{}-rest", args.name)
        } else {
            args.name.clone()
        };
        let pods = pods_needed(stage_sizes, stage_at_rest, replicas);
        let prepared = prepare(
            &name,
            pods,
            args.keep,
            args.callgrind,
            Duration::from_secs(args.phase_timeout_secs),
            ours.clone(),
            (args.kube.release, args.measured, cluster_qps),
        );
        let mut env = match prepared {
            Ok(env) => env,
            Err(e) => {
                // The next stage (its own cluster) may still measure.
                errors.push(format!("{e:#}"));
                result = Err(e);
                continue;
            }
        };
        env.ours_env = args.ours_env.clone();
        env.phases = phases.clone();
        env.replicas = replicas;
        env.qps = qps;
        nodes.push(env.nodes);
        machine.get_or_insert_with(|| report::Machine::detect(&env.info.kubernetes_version));
        // What is measured so far is written after each size of phase e, in case the rest does
        // not finish (150,000 Pods take this machine over an hour to build); the end of the run
        // writes the report again.
        let peak_reset_so_far = peak_reset;
        let peak_reset_works = &env.peak_reset_works;
        let mut after_size = |m: usize, so_far: &measure::Results| {
            let (Some(doc), Some(machine)) = (&doc, &machine) else {
                return;
            };
            let settings = report::Settings {
                nodes: nodes.clone(),
                peak_reset: peak_reset_so_far
                    && peak_reset_works.load(std::sync::atomic::Ordering::Relaxed),
                setups: so_far.setups.clone(),
                incomplete: Some(format!(
                    "in progress: written after phase e at {m} Deployments while the run went on \
                     to the rest, whose end rewrites this report (if this line is still here, \
                     the run stopped before its end)"
                )),
                ..base.clone()
            };
            if let Err(e) = write_report(doc, &so_far.runs, &settings, &machine.clone().finish()) {
                eprintln!("  warning: writing the report so far: {e:#}");
            }
        };
        result = (|| -> Result<()> {
            xtask_contender::rbac::grant_deploy_rbac(
                &env.info.kubectl,
                &env.info.admin_kubeconfig,
            )?;
            check_cluster_kcm(&env)?;
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()?;
            runtime.block_on(measure(
                &env,
                stage_sizes,
                stage_at_rest,
                rounds,
                args.settle_secs,
                &mut results,
                &mut after_size,
            ))
        })();
        peak_reset &= env
            .peak_reset_works
            .load(std::sync::atomic::Ordering::Relaxed);
        // --keep keeps the last stage's cluster only: an earlier one left running (phase e's
        // 1,365 nodes and 150,000 Pods) would load the machine while the next is measured.
        let last = i + 1 == stages.len();
        xtask_contender::fresh::down_unless_kept(&name, args.keep && last);
        if args.callgrind {
            result?;
            eprintln!(
                "callgrind output in {}: callgrind_annotate --inclusive=yes <file>",
                env.dir.display()
            );
            return Ok(());
        }
        if let Err(e) = &result {
            // The next stage (its own cluster) may still measure.
            errors.push(format!("{e:#}"));
        }
    }
    if let Some(first) = errors.first() {
        result = Err(anyhow!("{first}"));
    }
    let Some(machine) = machine else {
        return result;
    };
    let measure::Results { runs, setups } = results;
    let machine = machine.finish();
    let settings = report::Settings {
        nodes,
        peak_reset,
        setups,
        incomplete: (!errors.is_empty()).then(|| errors.join("; then ")),
        ..base
    };
    if runs.is_empty() {
        return result;
    }
    let text = report::text(&runs, &settings);
    println!("{text}");
    if let Some(why) = unpublished {
        eprintln!("(not written to the docs: {why})");
    } else if let Some(doc) = &doc {
        write_report(doc, &runs, &settings, &machine)?;
    }
    result
}

/// Writes the report to `doc`, keeping its hand-written part.
fn write_report(
    doc: &Path,
    runs: &[PhaseRun],
    settings: &report::Settings,
    machine: &report::Machine,
) -> Result<()> {
    fs::create_dir_all(doc.parent().expect("has a parent"))?;
    let existing = fs::read_to_string(doc).unwrap_or_default();
    fs::write(doc, report::markdown(runs, settings, machine, &existing))
        .with_context(|| format!("writing {}", doc.display()))?;
    eprintln!("wrote {}", doc.display());
    Ok(())
}

/// Pods the cluster must have room for: phase c peaks at twice the replicas plus a quarter
/// surge (rounded up), every Deployment of the largest size at once; phase e's Pods come after
/// the last round's namespace is gone. A little headroom on top.
fn pods_needed(sizes: &[usize], at_rest: &[usize], replicas: i32) -> usize {
    let replicas = replicas.max(1) as usize;
    let peak_per_deployment = 2 * replicas + (2 * replicas).div_ceil(4);
    let rounds = sizes.iter().max().copied().unwrap_or(0) * peak_per_deployment;
    let rest = at_rest.last().copied().unwrap_or(0) * replicas + 10;
    rounds.max(rest) + 100
}

/// Our binary: `binary` (`--ours-binary`) or the workspace's `dist` build, built now.
fn resolve_ours(binary: Option<&Path>) -> Result<PathBuf> {
    match binary {
        Some(binary) => {
            fs::canonicalize(binary).with_context(|| format!("--ours-binary {}", binary.display()))
        }
        None => xtask_contender::supervisor::build_dist(),
    }
}

/// Starts cluster `name` afresh on `release` (audit log of the controller identities on, KWOK
/// nodes for `pods` Pods, the cluster's kube-controller-manager without the `measured`
/// controllers) and returns what the measurements need, with `ours` as our binary.
fn prepare(
    name: &str,
    pods: usize,
    keep: bool,
    callgrind: bool,
    phase_timeout: Duration,
    ours: PathBuf,
    (release, measured, cluster_qps): (&'static Release, Measured, (u32, u32)),
) -> Result<Env> {
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
    // groups, so a Ctrl-C of xtask does not reach them). A half-started cluster is stopped
    // too (its logs are kept), unless --keep.
    let cluster = fresh::start(
        &UpOptions {
            feature_gates: Vec::new(),
            name: name.to_owned(),
            nodes,
            apiserver_args: vec![
                format!("--audit-policy-file={}", policy.display()),
                format!("--audit-log-path={}", audit_log.display()),
                "--audit-log-format=json".into(),
                "--audit-log-maxsize=0".into(),
            ],
            // Binding Pods must not set the pace either.
            scheduler_args: vec![
                format!("--kube-api-qps={}", cluster_qps.0),
                format!("--kube-api-burst={}", cluster_qps.1),
            ],
            controller_manager_args: vec![
                format!("--kube-api-qps={}", cluster_qps.0),
                format!("--kube-api-burst={}", cluster_qps.1),
                // KWOK renews 1,365 nodes' Leases on a machine busy building 150,000 Pods and
                // falls behind: with the default 50 s the node lifecycle controller marked nodes
                // NotReady (3,484 times in one setup) and evicted their Pods, which the
                // ReplicaSet controller then made again. Fake nodes never fail.
                "--node-monitor-grace-period=1h".into(),
            ],
            deployment_controller: measured.cluster_runs().0,
            replicaset_controller: measured.cluster_runs().1,
            release,
        },
        Fresh {
            reaper_pid_file: None,
            keep_on_failure: keep,
        },
    )?;
    let info = cluster.info.clone();
    cluster.dismiss();
    Ok(Env {
        measured,
        ours,
        ours_env: Vec::new(),
        kcm,
        info,
        dir,
        audit_log,
        ticks_per_second: xtask_contender::probe::clock_ticks(),
        callgrind,
        phases: Phase::ROUND.to_vec(),
        phase_timeout,
        peak_reset_works: std::sync::atomic::AtomicBool::new(true),
        nodes,
        replicas: REPLICAS,
        qps: QPS,
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

/// The cluster's kube-controller-manager must run, without the measured controllers.
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
    for &kind in env.measured.kinds() {
        if process::runs_controller(&args, kind) {
            bail!(
                "the cluster's kube-controller-manager runs the {kind:?} controller measured: {}",
                args.join(" ")
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;

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

/// Replicas of every benchmark Deployment.
const REPLICAS: i32 = 4;
/// Namespace prefix of the benchmark's workloads.
const NAMESPACE_PREFIX: &str = "kctrl-bench-ctl";
/// Concurrent requests of the driver's create and patch loads (its client is not throttled).
const CONCURRENCY: usize = 16;
/// Time after a phase's last completion before the closing readings, so trailing status writes
/// count in the phase and the steady RSS is read at rest.
const TAIL: Duration = Duration::from_secs(3);
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
        (args.kube.release, args.measured),
    )?;
    env.ours_env = args.ours_env.clone();
    env.phases = phases;
    let nodes = env.nodes;
    let machine = report::Machine::detect(&env.info.kubernetes_version);
    let mut runs = Vec::new();
    let result = (|| -> Result<()> {
        xtask_contender::rbac::grant_deploy_rbac(&env.info.kubectl, &env.info.admin_kubeconfig)?;
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
    xtask_contender::fresh::down_unless_kept(&args.name, args.keep);
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
        measured: args.measured,
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
        let doc = root.join(args.measured.doc());
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
/// afresh on `release` (audit log of the controller identities on, KWOK nodes for `pods`
/// Pods, the cluster's kube-controller-manager without the `measured` controllers) and returns
/// what the measurements need.
fn prepare(
    name: &str,
    pods: usize,
    keep: bool,
    callgrind: bool,
    phase_timeout: Duration,
    ours_binary: Option<&Path>,
    (release, measured): (&'static Release, Measured),
) -> Result<Env> {
    let ours = match ours_binary {
        Some(binary) => fs::canonicalize(binary)
            .with_context(|| format!("--ours-binary {}", binary.display()))?,
        None => xtask_contender::supervisor::build_dist()?,
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
            controller_manager_args: vec![
                format!("--kube-api-qps={}", CLUSTER_KCM_QPS.0),
                format!("--kube-api-burst={}", CLUSTER_KCM_QPS.1),
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
mod tests {
    use super::*;
    use kctrl_client::versioned::Versioned;

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
        assert_eq!(users, [OURS_USER, UPSTREAM_USER, UPSTREAM_REPLICASET_USER]);
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
            measured: Measured::Deployment,
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
        let running = xtask_contender::fresh::deployment_controllers(&env.info.dir);
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

//! `cargo xtask chaos [--profile short|long]`: faults injected into the local control plane
//! while our Deployment controller rolls Deployments out, with invariants checked throughout by
//! an independent watch.
//!
//! The run brings up a fresh cluster whose apiserver has its watch cache off (so an etcd
//! compaction reaches watches as 410 Gone) and whose kube-controller-manager tolerates long
//! apiserver outages before declaring nodes unhealthy (the faults target the apiserver, not
//! the nodes: without this, the node lifecycle controller would mark pods unready after a long
//! stop, an availability drop no Deployment controller can prevent). Our controller runs as
//! its own identity with `deploy/`'s RBAC, without leader election (a single instance; losing
//! a lease during an outage would end it by design, which is not what is tested here), with
//! `--debug-cache-endpoint`, and talks to the apiserver through a loopback fault proxy
//! (`proxy.rs`). It runs our ReplicaSet controller too (`--controllers=*,replicaset-controller`;
//! the cluster's kube-controller-manager then runs none), so the faults hit both; with
//! `--replicaset-controller upstream` kube-controller-manager's manages the Pods instead,
//! reached by the apiserver faults only, to compare the two under the same schedule. The
//! independent watch (`watch.rs`) talks to the apiserver directly and feeds the checker
//! (`invariants.rs`).
//!
//! Phases, each during rollouts (a rollout is started whenever none is in progress, by
//! changing an annotation of every pod template), each followed by a wait until every
//! Deployment has converged (the time is reported):
//!
//! 1. kill -9 the apiserver at random moments, restarting it with the same flags each time;
//! 2. SIGSTOP the apiserver for longer than the client's watch health checks (HTTP/2 ping
//!    after 30 s of silence, failed after 15 s more), then SIGCONT;
//! 3. compact etcd, then sever the controller's connections so its watches resume from a
//!    compacted resourceVersion (410, relist);
//! 4. kill -9 the controller and start it again;
//! 5. a conflict storm: writers updating the Deployments' labels and spec
//!    (`revisionHistoryLimit`, `progressDeadlineSeconds`; never replicas, strategy or template,
//!    whose changes would move the bounds under the checker) with read-modify-write updates;
//! 6. a slow apiserver: the proxy delays every chunk the apiserver sends and sometimes cuts a
//!    connection mid-chunk.
//!
//! At the end: the checker's violations; every Deployment converged; the controller never
//! exited unless killed and its log has no panic; its caches equal a fresh list (the
//! `/debug/cache` listing of keys and resourceVersions against a list from the apiserver,
//! for the run's namespaces); and it stops cleanly on SIGTERM. The report is printed and
//! written to `target/chaos/<profile>/report.md`.

mod faults;
pub(crate) mod invariants;
mod proxy;
mod run;
mod shard_audit;
mod sharded;
mod watch;

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::fs;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kctrl_client::versioned::Versioned;
use kctrl_client::{Api, Client, ListParams, Patch, PatchParams, PostParams};
use kctrl_config::Config;
use tokio_util::sync::CancellationToken;

use kctrl_cluster::plane::{self, ClusterInfo, Component, UpOptions};
use kctrl_cluster::process;
use kctrl_cluster::toolchain::fmt_duration;
use kctrl_cluster::versions::Release;
use xtask_contender::args::KubeVersionArg;
use xtask_contender::fresh::{self, Fresh};
use xtask_contender::probe::{curl, free_port};
use xtask_contender::supervisor::{self, ControllerProcess};

use self::invariants::Checker;
use self::proxy::{FaultProxy, Mode};
use self::watch::{DEPLOYMENT_LABEL, RUN_LABEL, WatchStats};

/// Arguments of `cargo xtask chaos`.
#[derive(clap::Args)]
pub(crate) struct ChaosArgs {
    /// `short` (CI: a few Deployments, a few faults of each kind), `long` (100 Deployments,
    /// 20 apiserver kills, 10 controller kills; by hand) or `sharded` (3 replicas sharded by
    /// namespace, 300 Deployments; a replica killed, one added, one stopped past its Lease;
    /// the audit log checked).
    #[arg(long, value_enum, default_value_t = Profile::Short)]
    pub(crate) profile: Profile,
    /// `sharded` profile: run with kube-apiserver's ShardedListAndWatch gate on, off
    /// (client-side filtering), or both, one fresh cluster each.
    #[arg(long, value_enum, default_value_t = crate::kube::Gate::Both)]
    pub(crate) gate: crate::kube::Gate,
    /// Cluster name (default `chaos-<profile>`); the cluster is started afresh.
    #[arg(long)]
    pub(crate) name: Option<String>,
    /// Leave the cluster running afterwards.
    #[arg(long)]
    pub(crate) keep: bool,
    /// Seed of the fault schedule (default: from the clock; printed, so a run can be repeated).
    #[arg(long)]
    pub(crate) seed: Option<u64>,
    /// Chance per chunk that the slow phase cuts a connection, in thousandths (default: the
    /// profile's, 20 short, 30 long).
    #[arg(long, value_name = "PER_MILLE")]
    pub(crate) slow_truncate_per_mille: Option<u32>,
    /// Which ReplicaSet controller manages the Pods (`short` and `long`): ours, in the
    /// controller's process behind the fault proxy, or kube-controller-manager's (reached by
    /// the apiserver faults only), to compare the same faults against upstream's.
    #[arg(long, value_enum, default_value_t = ReplicaSetController::Ours)]
    pub(crate) replicaset_controller: ReplicaSetController,
    /// Kubernetes release of the local control plane.
    #[command(flatten)]
    pub(crate) kube: KubeVersionArg,
}

/// Whose ReplicaSet controller a chaos run uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum ReplicaSetController {
    /// Ours (`--controllers=*,replicaset-controller`), in the process under test.
    Ours,
    /// kube-controller-manager's.
    Upstream,
}

impl ReplicaSetController {
    fn describe(self) -> &'static str {
        match self {
            ReplicaSetController::Ours => {
                "ours (in the controller's process, behind the fault proxy)"
            }
            ReplicaSetController::Upstream => {
                "kube-controller-manager's (apiserver faults only: not behind the proxy, not killed)"
            }
        }
    }
}

impl ChaosArgs {
    /// The short profile with defaults, on `release`.
    pub(crate) fn short(release: &'static Release) -> ChaosArgs {
        ChaosArgs {
            profile: Profile::Short,
            gate: crate::kube::Gate::Both,
            name: None,
            keep: false,
            seed: None,
            slow_truncate_per_mille: None,
            replicaset_controller: ReplicaSetController::Ours,
            kube: KubeVersionArg { release },
        }
    }

    /// The short profile as `cargo xtask test` runs it, at the profile's own settings: the
    /// slow phase cuts one chunk for certain, then 2 % per chunk. (It cut none while a cut
    /// answer to a ReplicaSet write could lead to a surge breach; the controller now waits for
    /// its cache to show such writes, see docs/reliability.md.)
    pub(crate) fn ci(release: &'static Release) -> ChaosArgs {
        ChaosArgs::short(release)
    }

    /// The sharded profile as `cargo xtask test` runs it: the gate on, then off.
    pub(crate) fn sharded(release: &'static Release) -> ChaosArgs {
        ChaosArgs {
            profile: Profile::Sharded,
            gate: crate::kube::Gate::Both,
            ..ChaosArgs::short(release)
        }
    }
}

/// How much of everything.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Profile {
    /// A few Deployments and a few faults of each kind (CI).
    Short,
    /// The full numbers (by hand).
    Long,
    /// Sharded replicas (see `sharded.rs`); its own scenario.
    Sharded,
}

impl Profile {
    fn slug(self) -> &'static str {
        match self {
            Profile::Short => "short",
            Profile::Long => "long",
            Profile::Sharded => "sharded",
        }
    }
}

/// The sizes of one profile.
#[derive(Clone, Debug)]
struct Plan {
    /// Deployments, spread over `namespaces`.
    deployments: usize,
    namespaces: usize,
    /// Replicas of each.
    replicas: i32,
    /// Every n-th Deployment uses the Recreate strategy (the others RollingUpdate with
    /// maxSurge 1, maxUnavailable 1).
    recreate_every: usize,
    /// How long new pods stay unready (`kctrl.dev/ready-after`), so rollouts last.
    ready_after: &'static str,
    apiserver_kills: usize,
    stops: usize,
    stop_for: Duration,
    compactions: usize,
    controller_kills: usize,
    storm_writers: usize,
    storm_for: Duration,
    slow_for: Duration,
    /// Chance per chunk that the slow proxy cuts the connection, in thousandths.
    truncate_per_mille: u32,
    /// The longest wait for convergence after a phase.
    converge_timeout: Duration,
    /// The gap before each fault is uniformly random in this range (seconds).
    gap: (u64, u64),
}

impl Plan {
    fn of(profile: Profile) -> Plan {
        match profile {
            // Not used: the sharded profile has its own plan (`sharded.rs`).
            Profile::Sharded => Plan::of(Profile::Short),
            Profile::Short => Plan {
                deployments: 6,
                namespaces: 2,
                replicas: 3,
                recreate_every: 3,
                ready_after: "4s",
                apiserver_kills: 3,
                stops: 1,
                stop_for: Duration::from_secs(50),
                compactions: 3,
                controller_kills: 2,
                storm_writers: 2,
                storm_for: Duration::from_secs(12),
                slow_for: Duration::from_secs(12),
                truncate_per_mille: 20,
                converge_timeout: Duration::from_secs(180),
                gap: (1, 3),
            },
            Profile::Long => Plan {
                deployments: 100,
                namespaces: 10,
                replicas: 3,
                recreate_every: 5,
                ready_after: "5s",
                apiserver_kills: 20,
                stops: 2,
                stop_for: Duration::from_secs(60),
                compactions: 5,
                controller_kills: 10,
                storm_writers: 4,
                storm_for: Duration::from_secs(60),
                slow_for: Duration::from_secs(60),
                truncate_per_mille: 30,
                converge_timeout: Duration::from_secs(600),
                gap: (2, 12),
            },
        }
    }
}

/// kube-apiserver flags of the chaos cluster: no watch cache, so compaction reaches watches.
const APISERVER_ARGS: &[&str] = &["--watch-cache=false"];
/// kube-controller-manager flags of the chaos cluster: nodes are not declared unhealthy during
/// the apiserver outages (see the module documentation).
const CONTROLLER_MANAGER_ARGS: &[&str] = &["--node-monitor-grace-period=10m"];
/// The controller's log filter: info, plus the reflectors' debug lines (a 410 is logged there).
const CONTROLLER_RUST_LOG: &str = "info,kctrl_informer::reflector=debug";

/// What one phase did.
#[derive(Clone, Debug)]
struct PhaseOutcome {
    name: &'static str,
    injected: usize,
    detail: String,
    violations: usize,
    converged_after: Duration,
    took: Duration,
}

/// The result of a run.
#[derive(Debug)]
struct Report {
    profile: Profile,
    /// Whose ReplicaSet controller ran.
    replicaset_controller: ReplicaSetController,
    /// The release the cluster ran.
    kubernetes: String,
    seed: u64,
    deployments: usize,
    replicas: i32,
    initial_rollout: Duration,
    phases: Vec<PhaseOutcome>,
    rollouts: usize,
    /// Faults injected at a chosen moment, and how many of them hit a rollout in progress.
    faults: (usize, usize),
    violations: Vec<String>,
    events: u64,
    watch: String,
    /// The Pod-side checks' figures ([`Checker::pod_summary`]).
    pod_checks: String,
    problems: Vec<String>,
    cache: String,
    took: Duration,
}

impl Report {
    fn render(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "chaos run, profile {} (seed {}), Kubernetes {}: {} Deployments x {} replicas, {} \
             rollouts, {}",
            self.profile.slug(),
            self.seed,
            self.kubernetes,
            self.deployments,
            self.replicas,
            self.rollouts,
            fmt_duration(self.took)
        );
        let _ = writeln!(
            out,
            "ReplicaSet controller: {}",
            self.replicaset_controller.describe()
        );
        let _ = writeln!(
            out,
            "initial rollout converged in {}; {} of {} timed faults hit a rollout in progress",
            fmt_duration(self.initial_rollout),
            self.faults.1,
            self.faults.0
        );
        let _ = writeln!(out);
        let mut t = xtask_report::markdown::Table::new()
            .left("fault")
            .right("injected")
            .left("what happened")
            .right("violations")
            .right("converged after the last fault")
            .right("phase took");
        for p in &self.phases {
            t.row([
                p.name.to_owned(),
                p.injected.to_string(),
                p.detail.clone(),
                p.violations.to_string(),
                fmt_duration(p.converged_after),
                fmt_duration(p.took),
            ]);
        }
        out.push_str(&t.markdown());
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "independent watch: {} events checked; {}",
            self.events, self.watch
        );
        let _ = writeln!(out, "Pod checks: {}", self.pod_checks);
        let _ = writeln!(out, "caches: {}", self.cache);
        let _ = writeln!(out, "invariant violations: {}", self.violations.len());
        for v in &self.violations {
            let _ = writeln!(out, "  {v}");
        }
        let survived = self.phases.len()
            - self
                .phases
                .iter()
                .filter(|p| p.violations > 0)
                .count()
                .min(self.phases.len());
        let _ = writeln!(
            out,
            "faults survived: {survived}/{} kinds, {} faults injected",
            self.phases.len(),
            self.phases.iter().map(|p| p.injected).sum::<usize>()
        );
        if self.problems.is_empty() {
            let _ = writeln!(out, "problems: none");
        } else {
            let _ = writeln!(out, "problems:");
            for p in &self.problems {
                let _ = writeln!(out, "  {p}");
            }
        }
        out
    }

    fn passed(&self) -> bool {
        self.violations.is_empty() && self.problems.is_empty()
    }
}

pub(crate) fn run(args: ChaosArgs) -> Result<()> {
    if args.profile == Profile::Sharded {
        return sharded::run(&args);
    }
    let mut plan = Plan::of(args.profile);
    if let Some(rate) = args.slow_truncate_per_mille {
        plan.truncate_per_mille = rate.min(1000);
    }
    let name = args
        .name
        .clone()
        .unwrap_or_else(|| format!("chaos-{}", args.profile.slug()));
    plane::validate_name(&name)?;
    let seed = args.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1)
    });
    eprintln!(
        "==> chaos, profile {} (seed {seed}), cluster '{name}', Kubernetes {}",
        args.profile.slug(),
        args.kube.release.kubernetes
    );
    let started = Instant::now();
    // Build first: a compile error should not cost a cluster start.
    let binary = supervisor::build()?;
    let out_dir = plane::target_dir().join("chaos").join(args.profile.slug());
    fs::create_dir_all(&out_dir).with_context(|| format!("creating {}", out_dir.display()))?;
    let log = out_dir.join("deployment-controller.log");
    let _ = fs::remove_file(&log);

    let cluster = fresh::start(
        &UpOptions {
            name: name.clone(),
            nodes: 3,
            apiserver_args: APISERVER_ARGS.iter().map(|s| s.to_string()).collect(),
            feature_gates: Vec::new(),
            scheduler_args: Vec::new(),
            controller_manager_args: CONTROLLER_MANAGER_ARGS
                .iter()
                .map(|s| s.to_string())
                .collect(),
            deployment_controller: false,
            replicaset_controller: args.replicaset_controller == ReplicaSetController::Upstream,
            release: args.kube.release,
        },
        Fresh {
            reaper_pid_file: Some(&log.with_extension("pid")),
            keep_on_failure: false,
        },
    )?;
    let info = cluster.info.clone();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("building the tokio runtime")?;
    let result = runtime.block_on(async {
        let ours = args.replicaset_controller == ReplicaSetController::Ours;
        let mut run = Run::start(&plan, &name, &info, &binary, &log, seed, ours).await?;
        let outcome = run.all_phases().await;
        run.finish(outcome).await
    });
    runtime.shutdown_timeout(Duration::from_secs(5));
    let down = if args.keep {
        eprintln!("==> --keep: cluster '{name}' left running");
        cluster.dismiss();
        Ok(())
    } else {
        cluster.down()
    };
    let mut report = result?;
    down?;
    report.profile = args.profile;
    report.replicaset_controller = args.replicaset_controller;
    report.kubernetes = info.kubernetes_version.clone();
    report.took = started.elapsed();
    let text = report.render();
    print!("{text}");
    let path = out_dir.join("report.md");
    fs::write(&path, &text).with_context(|| format!("writing {}", path.display()))?;
    eprintln!(
        "==> report: {}; controller log: {}",
        path.display(),
        log.display()
    );
    if !report.passed() {
        bail!(
            "chaos run failed: {} invariant violation(s), {} problem(s)",
            report.violations.len(),
            report.problems.len()
        );
    }
    Ok(())
}

/// A client of `kubeconfig`, with room for the run's own traffic (100 patches per rollout
/// of the long profile; client-go's default 5 QPS would make each take 20 s).
fn client(kubeconfig: &Path) -> Result<Client> {
    let mut config = Config::from_flags(Some(kubeconfig), None, &Default::default())
        .with_context(|| format!("loading {}", kubeconfig.display()))?;
    config.qps = 100.0;
    config.burst = 200;
    Client::try_from_config(config).context("building the API client")
}

/// The Deployments of `all` that have not converged ([`complete`]), each described with its
/// generations and replica counts, for the error naming what did not converge.
fn pending(all: &[Deployment]) -> Vec<String> {
    all.iter()
        .filter(|d| !complete(d))
        .map(|d| {
            let st = d.status.clone().unwrap_or_default();
            format!(
                "{}/{} (generation {} observed {}, updated {} ready {} available {})",
                d.metadata.namespace.as_deref().unwrap_or(""),
                d.metadata.name.as_deref().unwrap_or(""),
                d.metadata.generation.unwrap_or(0),
                st.observed_generation.unwrap_or(0),
                st.updated_replicas.unwrap_or(0),
                st.ready_replicas.unwrap_or(0),
                st.available_replicas.unwrap_or(0)
            )
        })
        .collect()
}

/// Whether a Deployment has rolled out completely (upstream's `DeploymentComplete`, plus no
/// surplus pods): its controller saw the latest spec, and every replica is updated and
/// available.
fn complete(d: &Deployment) -> bool {
    let want = d.spec.get().and_then(|s| s.replicas).unwrap_or(1);
    let Some(st) = d.status.as_ref() else {
        return false;
    };
    st.observed_generation.unwrap_or(0) >= d.metadata.generation.unwrap_or(0)
        && st.updated_replicas.unwrap_or(0) == want
        && st.replicas.unwrap_or(0) == want
        && st.available_replicas.unwrap_or(0) == want
}

/// Lines of the controller's log that report a panic.
fn panic_lines(log: &str) -> Vec<String> {
    log.lines()
        .filter(|l| l.contains("panicked") || l.contains("Observed a panic"))
        .map(|l| l.chars().take(300).collect())
        .collect()
}

/// Lines of the controller's log where a reflector's watch (or the list before it) failed.
fn watch_failures(log: &str) -> u64 {
    log.lines()
        .filter(|l| {
            l.contains("watch connection ended")
                || l.contains("watch ended with error")
                || l.contains("failed to list and watch")
        })
        .count() as u64
}

/// Lines of the controller's log where a reflector's watch got 410 Gone (and relisted).
fn gone_lines(log: &str) -> usize {
    log.lines()
        .filter(|l| {
            l.contains("watch closed")
                && (l.contains("410") || l.contains("Expired") || l.contains("too old"))
        })
        .count()
}

/// The sum of the controller's `rest_client_requests_total` samples with `code="<code>"`.
fn requests_with_code(metrics: &str, code: &str) -> u64 {
    let label = format!("code=\"{code}\"");
    metrics
        .lines()
        .filter(|l| l.starts_with("rest_client_requests_total{") && l.contains(&label))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

/// The differences between two sorted listings, at most `max` of them.
fn listing_diff(cached: &BTreeSet<String>, fresh: &BTreeSet<String>, max: usize) -> Vec<String> {
    cached
        .difference(fresh)
        .map(|l| format!("only cached: {l}"))
        .chain(
            fresh
                .difference(cached)
                .map(|l| format!("only listed: {l}")),
        )
        .take(max)
        .collect()
}

/// One chaos run in progress.
struct Run<'a> {
    plan: &'a Plan,
    name: &'a str,
    info: &'a ClusterInfo,
    binary: &'a Path,
    log: &'a Path,
    seed: u64,
    rng: fastrand::Rng,
    admin: Client,
    run_id: String,
    proxy: FaultProxy,
    kubeconfig: PathBuf,
    metrics_port: u16,
    controller: Option<ControllerProcess>,
    /// Whether our controller runs our ReplicaSet controller too.
    ours_replicaset: bool,
    controller_kills: usize,
    checker: Arc<Mutex<Checker>>,
    watch_stats: Arc<WatchStats>,
    cancel: CancellationToken,
    watch_tasks: Vec<tokio::task::JoinHandle<()>>,
    /// `namespace/name` of every Deployment.
    deployments: Vec<(String, String)>,
    rollouts: usize,
    problems: Vec<String>,
    initial_rollout: Duration,
    /// Faults injected, and how many of them while at least one Deployment was rolling.
    faults: (usize, usize),
    /// The phases done so far.
    phases: Vec<PhaseOutcome>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_report_is_rendered_as_before() {
        let phase = |name, injected, violations, secs: u64| PhaseOutcome {
            name,
            injected,
            detail: format!("{injected} restarts, all recovered"),
            violations,
            converged_after: Duration::from_millis(1500 * secs),
            took: Duration::from_secs(10 * secs),
        };
        let report = Report {
            profile: Profile::Short,
            replicaset_controller: ReplicaSetController::Ours,
            kubernetes: "v1.37.2".into(),
            seed: 42,
            deployments: 6,
            replicas: 3,
            initial_rollout: Duration::from_secs(12),
            phases: vec![
                phase("apiserver kill", 2, 0, 1),
                phase("etcd compaction", 3, 1, 2),
            ],
            rollouts: 9,
            faults: (5, 4),
            violations: vec!["web-1: 4 ready, more than 3 + 1 surge".into()],
            events: 1234,
            watch: "no gaps".into(),
            pod_checks: "replicaset-pods: 12 ReplicaSets judged".into(),
            problems: Vec::new(),
            cache: "consistent".into(),
            took: Duration::from_secs(95),
        };
        xtask_report::golden::check(
            &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/chaos/golden/report.txt"),
            &report.render(),
        );
    }

    #[test]
    fn log_scans_find_panics_and_gone_watches() {
        let log = "\
2026-01-01T00:00:00Z INFO started
thread 'tokio-runtime-worker' panicked at crates/x.rs:1:2:
2026-01-01T00:00:01Z ERROR Observed a panic in an event handler; the notification was skipped
2026-01-01T00:00:02Z DEBUG kctrl_informer::reflector: watch closed err=410 Gone: too old resource version
2026-01-01T00:00:03Z DEBUG kctrl_informer::reflector: watch closed err=Expired
2026-01-01T00:00:04Z DEBUG kctrl_informer::reflector: watch closed
";
        assert_eq!(panic_lines(log).len(), 2);
        assert_eq!(gone_lines(log), 2);
        assert_eq!(watch_failures(log), 0);
        assert_eq!(
            watch_failures(
                "DEBUG r: watch connection ended err=x\nWARN r: failed to list and watch\n"
            ),
            2
        );
        assert!(panic_lines("INFO all good\n").is_empty());
    }

    #[test]
    fn conflicts_are_summed_from_the_metrics() {
        let m = "\
# HELP rest_client_requests_total x
rest_client_requests_total{code=\"200\",method=\"GET\",host=\"h\"} 10
rest_client_requests_total{code=\"409\",method=\"PUT\",host=\"h\"} 3
rest_client_requests_total{code=\"409\",method=\"PATCH\",host=\"h\"} 2
";
        assert_eq!(requests_with_code(m, "409"), 5);
        assert_eq!(requests_with_code(m, "500"), 0);
    }

    #[test]
    fn complete_needs_the_latest_generation_and_every_replica() {
        let d = |generation: i64,
                 observed: i64,
                 updated: i32,
                 available: i32,
                 total: i32|
         -> Deployment {
            serde_json::from_value(serde_json::json!({
                "metadata": {"generation": generation},
                "spec": {"replicas": 3, "selector": {}, "template": {}},
                "status": {"observedGeneration": observed, "updatedReplicas": updated,
                           "availableReplicas": available, "replicas": total}
            }))
            .unwrap()
        };
        assert!(complete(&d(2, 2, 3, 3, 3)));
        assert!(!complete(&d(3, 2, 3, 3, 3)));
        assert!(!complete(&d(2, 2, 2, 3, 3)));
        assert!(!complete(&d(2, 2, 3, 2, 3)));
        assert!(!complete(&d(2, 2, 3, 3, 4)));
    }

    #[test]
    fn listing_differences_name_both_sides() {
        let a: BTreeSet<String> = ["pods a/x 1", "pods a/y 2"].map(String::from).into();
        let b: BTreeSet<String> = ["pods a/x 1", "pods a/y 3"].map(String::from).into();
        assert_eq!(
            listing_diff(&a, &b, 10),
            ["only cached: pods a/y 2", "only listed: pods a/y 3"]
        );
        assert!(listing_diff(&a, &a, 10).is_empty());
    }

    #[test]
    fn cli_parses() {
        use clap::Parser;
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            chaos: ChaosArgs,
        }
        let cli = Cli::try_parse_from([
            "x",
            "--profile",
            "long",
            "--seed",
            "7",
            "--slow-truncate-per-mille",
            "100",
        ])
        .unwrap();
        assert_eq!(cli.chaos.profile, Profile::Long);
        assert_eq!(cli.chaos.seed, Some(7));
        assert_eq!(cli.chaos.slow_truncate_per_mille, Some(100));
        let cli = Cli::try_parse_from(["x"]).unwrap();
        assert_eq!(cli.chaos.profile, Profile::Short);
        assert_eq!(cli.chaos.gate, crate::kube::Gate::Both);
        assert_eq!(cli.chaos.replicaset_controller, ReplicaSetController::Ours);
        let cli = Cli::try_parse_from(["x", "--replicaset-controller", "upstream"]).unwrap();
        assert_eq!(
            cli.chaos.replicaset_controller,
            ReplicaSetController::Upstream
        );
        let cli = Cli::try_parse_from(["x", "--profile", "sharded", "--gate", "off"]).unwrap();
        assert_eq!(cli.chaos.profile, Profile::Sharded);
        assert_eq!(cli.chaos.gate, crate::kube::Gate::Off);
        assert!(Plan::of(Profile::Long).deployments == 100);
        assert!(Plan::of(Profile::Long).apiserver_kills == 20);
        assert!(Plan::of(Profile::Long).controller_kills == 10);
    }
}

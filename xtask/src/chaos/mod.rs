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
//! (`proxy.rs`). The independent watch (`watch.rs`) talks to the apiserver directly and feeds
//! the checker (`invariants.rs`).
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

pub(crate) mod invariants;
mod proxy;
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
use xtask_contender::supervisor::{self as controller_process, ControllerProcess};

use self::invariants::Checker;
use self::proxy::{FaultProxy, Mode};
use self::watch::{DEPLOYMENT_LABEL, RUN_LABEL, WatchStats};

/// Arguments of `cargo xtask chaos`.
#[derive(clap::Args)]
pub(crate) struct ChaosArgs {
    /// `short` (CI: a few Deployments, a few faults of each kind) or `long` (100 Deployments,
    /// 20 apiserver kills, 10 controller kills; by hand).
    #[arg(long, value_enum, default_value_t = Profile::Short)]
    pub(crate) profile: Profile,
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
    /// Kubernetes release of the local control plane.
    #[command(flatten)]
    pub(crate) kube: KubeVersionArg,
}

impl ChaosArgs {
    /// The short profile with defaults, on `release`.
    pub(crate) fn short(release: &'static Release) -> ChaosArgs {
        ChaosArgs {
            profile: Profile::Short,
            name: None,
            keep: false,
            seed: None,
            slow_truncate_per_mille: None,
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
}

/// How much of everything.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Profile {
    /// A few Deployments and a few faults of each kind (CI).
    Short,
    /// The full numbers (by hand).
    Long,
}

impl Profile {
    fn slug(self) -> &'static str {
        match self {
            Profile::Short => "short",
            Profile::Long => "long",
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
            "initial rollout converged in {}; {} of {} timed faults hit a rollout in progress",
            fmt_duration(self.initial_rollout),
            self.faults.1,
            self.faults.0
        );
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "| fault | injected | what happened | violations | converged after the last fault | phase took |"
        );
        let _ = writeln!(out, "|---|---:|---|---:|---:|---:|");
        for p in &self.phases {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} | {} |",
                p.name,
                p.injected,
                p.detail,
                p.violations,
                fmt_duration(p.converged_after),
                fmt_duration(p.took)
            );
        }
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "independent watch: {} events checked; {}",
            self.events, self.watch
        );
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
    let binary = controller_process::build()?;
    let out_dir = plane::target_dir().join("chaos").join(args.profile.slug());
    fs::create_dir_all(&out_dir).with_context(|| format!("creating {}", out_dir.display()))?;
    let log = out_dir.join("deployment-controller.log");
    let _ = fs::remove_file(&log);

    let cluster = fresh::start(
        &UpOptions {
            name: name.clone(),
            nodes: 3,
            apiserver_args: APISERVER_ARGS.iter().map(|s| s.to_string()).collect(),
            controller_manager_args: CONTROLLER_MANAGER_ARGS
                .iter()
                .map(|s| s.to_string())
                .collect(),
            deployment_controller: false,
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
        let mut run = Run::start(&plan, &name, &info, &binary, &log, seed).await?;
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

impl<'a> Run<'a> {
    async fn start(
        plan: &'a Plan,
        name: &'a str,
        info: &'a ClusterInfo,
        binary: &'a Path,
        log: &'a Path,
        seed: u64,
    ) -> Result<Run<'a>> {
        tokio::task::block_in_place(|| {
            xtask_contender::rbac::grant_deploy_rbac(&info.kubectl, &info.admin_kubeconfig)
        })?;
        let admin = client(&info.admin_kubeconfig)?;
        let upstream = SocketAddr::from(([127, 0, 0, 1], plane::apiserver_port(name)?));
        let proxy = FaultProxy::start(upstream).await?;
        // The controller's kubeconfig, pointed at the proxy; kept in the cluster's directory so
        // the check for Deployment controllers of this cluster sees the process.
        let original = fs::read_to_string(&info.controller_kubeconfig)
            .with_context(|| format!("reading {}", info.controller_kubeconfig.display()))?;
        if !original.contains(&info.apiserver_url) {
            bail!(
                "{} does not name {}",
                info.controller_kubeconfig.display(),
                info.apiserver_url
            );
        }
        let kubeconfig = info
            .dir
            .join("kubeconfig")
            .join("chaos-controller.kubeconfig");
        fs::write(
            &kubeconfig,
            original.replace(&info.apiserver_url, &format!("https://{}", proxy.addr())),
        )?;
        let run_id = format!("{:x}", seed & 0xffff_ffff);
        let checker = Arc::new(Mutex::new(Checker::default()));
        let watch_stats = Arc::new(WatchStats::default());
        let cancel = CancellationToken::new();
        let watch_tasks = watch::start(
            admin.clone(),
            &run_id,
            checker.clone(),
            watch_stats.clone(),
            cancel.clone(),
        )
        .await;
        let mut run = Run {
            plan,
            name,
            info,
            binary,
            log,
            seed,
            rng: fastrand::Rng::with_seed(seed),
            admin,
            run_id,
            proxy,
            kubeconfig,
            metrics_port: free_port()?,
            controller: None,
            controller_kills: 0,
            checker,
            watch_stats,
            cancel,
            watch_tasks,
            deployments: Vec::new(),
            rollouts: 0,
            problems: Vec::new(),
            initial_rollout: Duration::ZERO,
            faults: (0, 0),
            phases: Vec::new(),
        };
        run.start_controller()?;
        Ok(run)
    }

    /// Starts our controller (through the proxy) and checks it is the cluster's only one.
    fn start_controller(&mut self) -> Result<()> {
        let port = self.metrics_port.to_string();
        // /metrics and /debug/cache are read without a token.
        let open_paths = format!(
            "--authorization-always-allow-paths={},/debug/cache",
            controller_process::ALWAYS_ALLOW_PATHS
        );
        let c = tokio::task::block_in_place(|| {
            controller_process::start_with_env(
                self.binary,
                &self.kubeconfig,
                self.log,
                &[
                    "--leader-elect=false",
                    "--secure-port",
                    &port,
                    "--debug-cache-endpoint",
                    &open_paths,
                ],
                &[("RUST_LOG", CONTROLLER_RUST_LOG)],
            )
        })?;
        let pid = c.pid();
        self.controller = Some(c);
        let found = fresh::deployment_controllers(&self.info.dir);
        let pids: Vec<u32> = found.iter().map(|(p, _)| *p).collect();
        if pids != [pid] {
            bail!(
                "expected our controller (pid {pid}) as the only Deployment controller, found {found:?}"
            );
        }
        Ok(())
    }

    /// Fails if the controller exited without being killed.
    fn check_controller(&mut self) -> Result<()> {
        if let Some(c) = self.controller.as_mut()
            && let Some(status) = c.exited()?
        {
            bail!(
                "the deployment-controller exited on its own ({status}); log {}:\n{}",
                self.log.display(),
                process::tail(self.log, 30)
            );
        }
        Ok(())
    }

    fn violations(&self) -> usize {
        self.checker
            .lock()
            .expect("checker lock")
            .violations()
            .len()
    }

    /// Waits a random gap before a fault, then notes whether a rollout is in progress.
    async fn pause(&mut self) -> Result<()> {
        let (lo, hi) = self.plan.gap;
        let ms = self.rng.u64(lo * 1000..=hi * 1000);
        tokio::time::sleep(Duration::from_millis(ms)).await;
        let rolling = self
            .list_deployments()
            .await?
            .iter()
            .filter(|d| !complete(d))
            .count();
        self.faults.0 += 1;
        if rolling > 0 {
            self.faults.1 += 1;
        }
        Ok(())
    }

    fn deployment_api(&self, ns: &str) -> Api<Deployment> {
        Api::namespaced(self.admin.clone(), ns)
    }

    /// Creates the namespaces and Deployments.
    async fn create(&mut self) -> Result<()> {
        let pp = PostParams {
            field_manager: Some("kctrl-chaos".to_owned()),
            ..Default::default()
        };
        let namespaces: Api<Namespace> = Api::all(self.admin.clone());
        for n in 0..self.plan.namespaces {
            let ns: Namespace = serde_json::from_value(serde_json::json!({
                "metadata": {"name": format!("chaos-{}-{n}", self.run_id), "labels": {RUN_LABEL: self.run_id}}
            }))?;
            namespaces.create(&pp, &ns).await?;
        }
        for i in 0..self.plan.deployments {
            let ns = format!("chaos-{}-{}", self.run_id, i % self.plan.namespaces);
            let name = format!("d{i:03}");
            let recreate = (i + 1) % self.plan.recreate_every == 0;
            let strategy = if recreate {
                serde_json::json!({"type": "Recreate"})
            } else {
                serde_json::json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 1}})
            };
            let d: Deployment = serde_json::from_value(serde_json::json!({
                "metadata": {"name": name, "labels": {RUN_LABEL: self.run_id}},
                "spec": {
                    "replicas": self.plan.replicas,
                    "strategy": strategy,
                    "selector": {"matchLabels": {"app": name, RUN_LABEL: self.run_id}},
                    "template": {
                        "metadata": {
                            "labels": {"app": name, RUN_LABEL: self.run_id, DEPLOYMENT_LABEL: name},
                            "annotations": {"kctrl.dev/ready-after": self.plan.ready_after, "chaos.kctrl.dev/wave": "0"}
                        },
                        "spec": {
                            "containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10"}],
                            "terminationGracePeriodSeconds": 0
                        }
                    }
                }
            }))?;
            self.deployment_api(&ns).create(&pp, &d).await?;
            self.deployments.push((ns, name));
        }
        Ok(())
    }

    /// Lists the run's Deployments, retrying while the apiserver is unreachable.
    async fn list_deployments(&self) -> Result<Vec<Deployment>> {
        let api: Api<Deployment> = Api::all(self.admin.clone());
        let params = ListParams {
            label_selector: Some(format!("{RUN_LABEL}={}", self.run_id)),
            ..Default::default()
        };
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            match api.list(&params).await {
                Ok(l) => return Ok(l.items),
                Err(e) if Instant::now() > deadline => {
                    return Err(e).context("listing the Deployments");
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(500)).await,
            }
        }
    }

    /// Starts a rollout of every Deployment (a new pod-template annotation).
    async fn roll(&mut self) -> Result<()> {
        self.rollouts += 1;
        let wave = self.rollouts.to_string();
        let patch = Patch::Merge(serde_json::json!({
            "spec": {"template": {"metadata": {"annotations": {"chaos.kctrl.dev/wave": wave}}}}
        }));
        for (ns, name) in self.deployments.clone() {
            let api = self.deployment_api(&ns);
            let mut tries = 0;
            loop {
                match api.patch(&name, &PatchParams::default(), &patch).await {
                    Ok(_) => break,
                    Err(e) if tries >= 20 => {
                        return Err(e).with_context(|| format!("patching {ns}/{name}"));
                    }
                    Err(_) => {
                        tries += 1;
                        tokio::time::sleep(Duration::from_millis(500)).await;
                    }
                }
            }
        }
        Ok(())
    }

    /// Starts a rollout unless one is in progress.
    async fn ensure_rolling(&mut self) -> Result<()> {
        if self.list_deployments().await?.iter().all(complete) {
            self.roll().await?;
        }
        Ok(())
    }

    /// Waits until every Deployment has converged; returns how long that took.
    async fn converge(&mut self) -> Result<Duration> {
        let t0 = Instant::now();
        loop {
            self.check_controller()?;
            let all = self.list_deployments().await?;
            let pending: Vec<String> = all
                .iter()
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
                .collect();
            if pending.is_empty() && all.len() == self.deployments.len() {
                return Ok(t0.elapsed());
            }
            if t0.elapsed() > self.plan.converge_timeout {
                bail!(
                    "{} of {} Deployments did not converge within {}: {}",
                    pending.len(),
                    self.deployments.len(),
                    fmt_duration(self.plan.converge_timeout),
                    pending.into_iter().take(10).collect::<Vec<_>>().join("; ")
                );
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// Runs every phase; the first error ends the run (the cluster is then torn down).
    async fn all_phases(&mut self) -> Result<()> {
        self.create().await?;
        self.initial_rollout = self.converge().await?;
        eprintln!(
            "==> {} Deployments created and available in {}",
            self.deployments.len(),
            fmt_duration(self.initial_rollout)
        );
        let p = self.apiserver_kills().await?;
        self.phases.push(p);
        let p = self.apiserver_stops().await?;
        self.phases.push(p);
        let p = self.compactions().await?;
        self.phases.push(p);
        let p = self.controller_kills().await?;
        self.phases.push(p);
        let p = self.conflict_storm().await?;
        self.phases.push(p);
        let p = self.slow_apiserver().await?;
        self.phases.push(p);
        Ok(())
    }

    /// Wraps a phase: counts its violations, waits for convergence, reports.
    async fn finish_phase(
        &mut self,
        name: &'static str,
        injected: usize,
        detail: String,
        t0: Instant,
        violations_before: usize,
    ) -> Result<PhaseOutcome> {
        let converged_after = self
            .converge()
            .await
            .with_context(|| format!("after the phase '{name}'"))?;
        let outcome = PhaseOutcome {
            name,
            injected,
            detail,
            violations: self.violations() - violations_before,
            converged_after,
            took: t0.elapsed(),
        };
        eprintln!(
            "==> phase '{name}': {} injected, {}; {} violation(s); converged {} after the last fault",
            outcome.injected,
            outcome.detail,
            outcome.violations,
            fmt_duration(outcome.converged_after)
        );
        Ok(outcome)
    }

    async fn apiserver_kills(&mut self) -> Result<PhaseOutcome> {
        let (t0, v0) = (Instant::now(), self.violations());
        let mut restarts = Vec::new();
        for i in 0..self.plan.apiserver_kills {
            self.ensure_rolling().await?;
            self.pause().await?;
            eprintln!(
                "==> kill -9 kube-apiserver ({}/{})",
                i + 1,
                self.plan.apiserver_kills
            );
            let took = tokio::task::block_in_place(|| {
                plane::kill_and_restart(self.name, Component::Apiserver)
            })?;
            restarts.push(took);
            self.check_controller()?;
        }
        let longest = restarts.iter().max().copied().unwrap_or_default();
        let detail = format!(
            "restarted each time; back to /readyz in {} at most",
            fmt_duration(longest)
        );
        self.finish_phase("kill -9 kube-apiserver", restarts.len(), detail, t0, v0)
            .await
    }

    async fn apiserver_stops(&mut self) -> Result<PhaseOutcome> {
        let (t0, v0) = (Instant::now(), self.violations());
        // Whether the clients notice the dead connections while the apiserver is stopped
        // (their HTTP/2 health check), or only once it runs again.
        let (mut noticed_by_controller, mut noticed_by_watch, mut reconnects) = (0, 0, 0);
        for i in 0..self.plan.stops {
            self.ensure_rolling().await?;
            self.pause().await?;
            eprintln!(
                "==> SIGSTOP kube-apiserver for {} ({}/{})",
                fmt_duration(self.plan.stop_for),
                i + 1,
                self.plan.stops
            );
            let offset = fs::metadata(self.log).map(|m| m.len()).unwrap_or(0);
            let watch_ends = || {
                self.watch_stats.broken.load(Ordering::Relaxed)
                    + self.watch_stats.ended.load(Ordering::Relaxed)
            };
            let (ends, connections) = (
                watch_ends(),
                self.proxy.stats.connections.load(Ordering::Relaxed),
            );
            plane::signal_component(self.name, Component::Apiserver, "STOP")?;
            tokio::time::sleep(self.plan.stop_for).await;
            noticed_by_controller +=
                watch_failures(&controller_process::log_since(self.log, offset));
            noticed_by_watch += watch_ends() - ends;
            reconnects += self.proxy.stats.connections.load(Ordering::Relaxed) - connections;
            plane::signal_component(self.name, Component::Apiserver, "CONT")?;
            self.check_controller()?;
        }
        let detail = format!(
            "{} each, then SIGCONT; while stopped, the controller opened {reconnects} new \
             connections (its HTTP/2 health check gave up on the old ones; nothing else closes \
             a connection to a stopped server) and its reflectors logged {noticed_by_controller} \
             watch failures; {noticed_by_watch} watches of the independent watch ended",
            fmt_duration(self.plan.stop_for)
        );
        if reconnects == 0 {
            self.problems.push(
                "the controller kept its connections to the stopped apiserver: its HTTP/2 \
                 health check never gave up on them"
                    .to_owned(),
            );
        }
        self.finish_phase("SIGSTOP kube-apiserver", self.plan.stops, detail, t0, v0)
            .await
    }

    async fn compactions(&mut self) -> Result<PhaseOutcome> {
        let (t0, v0) = (Instant::now(), self.violations());
        let gone_before = gone_lines(&fs::read_to_string(self.log).unwrap_or_default());
        let severed_before = self.proxy.stats.severed.load(Ordering::Relaxed);
        for i in 0..self.plan.compactions {
            self.ensure_rolling().await?;
            self.pause().await?;
            let rev = tokio::task::block_in_place(|| plane::compact(self.name))?;
            eprintln!(
                "==> compacted etcd at revision {rev}; severing the controller's connections ({}/{})",
                i + 1,
                self.plan.compactions
            );
            self.proxy.sever_all();
            self.check_controller()?;
        }
        let outcome = self
            .finish_phase(
                "etcd compaction mid-watch (watch cache off)",
                self.plan.compactions,
                String::new(),
                t0,
                v0,
            )
            .await?;
        let gone = gone_lines(&fs::read_to_string(self.log).unwrap_or_default()) - gone_before;
        let severed = self.proxy.stats.severed.load(Ordering::Relaxed) - severed_before;
        // Not a failure: whether a refused watch is logged depends on the reflector's path
        // (see docs/reliability.md), and the relist's correctness is what the convergence and
        // cache checks test.
        let gone = if gone == 0 {
            "no watch refused with 410 Gone was logged (any relist was quiet)".to_owned()
        } else {
            format!(
                "its reflectors logged {gone} watches refused with 410 Gone, each followed by a relist (a lower bound, see docs/reliability.md)"
            )
        };
        Ok(PhaseOutcome {
            detail: format!(
                "each followed by severing the controller's connections ({severed} in all); {gone}"
            ),
            ..outcome
        })
    }

    async fn controller_kills(&mut self) -> Result<PhaseOutcome> {
        let (t0, v0) = (Instant::now(), self.violations());
        let mut longest = Duration::ZERO;
        for i in 0..self.plan.controller_kills {
            self.ensure_rolling().await?;
            self.pause().await?;
            eprintln!(
                "==> kill -9 the deployment-controller ({}/{})",
                i + 1,
                self.plan.controller_kills
            );
            if let Some(c) = self.controller.take() {
                c.kill()?;
                self.controller_kills += 1;
            }
            let t = Instant::now();
            self.start_controller()?;
            longest = longest.max(t.elapsed());
        }
        let detail = format!(
            "restarted each time; caches synced again in {} at most",
            fmt_duration(longest)
        );
        self.finish_phase(
            "kill -9 the controller",
            self.plan.controller_kills,
            detail,
            t0,
            v0,
        )
        .await
    }

    async fn conflict_storm(&mut self) -> Result<PhaseOutcome> {
        let (t0, v0) = (Instant::now(), self.violations());
        let metrics_url = format!("https://127.0.0.1:{}/metrics", self.metrics_port);
        let conflicts_before = tokio::task::block_in_place(|| curl(&metrics_url))
            .map(|m| requests_with_code(&m, "409"))
            .unwrap_or(0);
        self.ensure_rolling().await?;
        let writes = Arc::new(AtomicU64::new(0));
        let conflicts = Arc::new(AtomicU64::new(0));
        let deadline = tokio::time::Instant::now() + self.plan.storm_for;
        let mut writers = Vec::new();
        for w in 0..self.plan.storm_writers {
            let (admin, targets) = (self.admin.clone(), self.deployments.clone());
            let (writes, conflicts) = (writes.clone(), conflicts.clone());
            let rng = fastrand::Rng::with_seed(self.seed.wrapping_add(w as u64 + 1));
            writers.push(tokio::spawn(storm_writer(
                admin, targets, rng, deadline, writes, conflicts,
            )));
        }
        // A second rollout in the middle of the storm.
        tokio::time::sleep(self.plan.storm_for / 2).await;
        self.roll().await?;
        for w in writers {
            w.await.context("a storm writer panicked")??;
        }
        self.check_controller()?;
        let outcome = self
            .finish_phase(
                "conflict storm",
                self.plan.storm_writers,
                String::new(),
                t0,
                v0,
            )
            .await?;
        let controller_conflicts = tokio::task::block_in_place(|| curl(&metrics_url))
            .map(|m| requests_with_code(&m, "409"))
            .unwrap_or(0)
            .saturating_sub(conflicts_before);
        Ok(PhaseOutcome {
            detail: format!(
                "writers for {}: {} label/spec updates, {} of their own conflicts; the controller got {} conflicts (409)",
                fmt_duration(self.plan.storm_for),
                writes.load(Ordering::Relaxed),
                conflicts.load(Ordering::Relaxed),
                controller_conflicts
            ),
            ..outcome
        })
    }

    async fn slow_apiserver(&mut self) -> Result<PhaseOutcome> {
        let (t0, v0) = (Instant::now(), self.violations());
        let before = (
            self.proxy.stats.delayed.load(Ordering::Relaxed),
            self.proxy.stats.truncated.load(Ordering::Relaxed),
        );
        self.ensure_rolling().await?;
        self.proxy.set_mode(Mode::Slow {
            max_delay: Duration::from_millis(300),
            truncate_per_mille: self.plan.truncate_per_mille,
        });
        let cuts = self.plan.truncate_per_mille > 0;
        if cuts {
            self.proxy.cut_next();
        }
        tokio::time::sleep(self.plan.slow_for / 2).await;
        self.roll().await?;
        tokio::time::sleep(self.plan.slow_for / 2).await;
        self.proxy.set_mode(Mode::Pass);
        self.check_controller()?;
        let delayed = self.proxy.stats.delayed.load(Ordering::Relaxed) - before.0;
        let truncated = self.proxy.stats.truncated.load(Ordering::Relaxed) - before.1;
        let detail = format!(
            "for {}: {delayed} chunks delayed by up to 300 ms, {truncated} connections cut mid-chunk",
            fmt_duration(self.plan.slow_for)
        );
        if truncated == 0 && cuts {
            self.problems
                .push("the slow apiserver phase truncated nothing (nothing tested)".to_owned());
        }
        self.finish_phase("slow apiserver (proxy)", 1, detail, t0, v0)
            .await
    }

    /// The `/debug/cache` listing of the run's namespaces against a fresh list.
    async fn compare_caches(&self) -> Result<Option<Vec<String>>> {
        let prefix = format!("chaos-{}-", self.run_id);
        let url = format!("https://127.0.0.1:{}/debug/cache", self.metrics_port);
        let cached: BTreeSet<String> = tokio::task::block_in_place(|| curl(&url))?
            .lines()
            .filter(|l| {
                l.split(' ')
                    .nth(1)
                    .is_some_and(|key| key.starts_with(&prefix))
            })
            .map(str::to_owned)
            .collect();
        let mut fresh = BTreeSet::new();
        let params = ListParams::default();
        for n in 0..self.plan.namespaces {
            let ns = format!("{prefix}{n}");
            let line = |r: &str, m: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta| {
                format!(
                    "{r} {ns}/{} {}",
                    m.name.as_deref().unwrap_or(""),
                    m.resource_version.as_deref().unwrap_or("")
                )
            };
            for d in Api::<Deployment>::namespaced(self.admin.clone(), &ns)
                .list(&params)
                .await?
                .items
            {
                fresh.insert(line("deployments", &d.metadata));
            }
            for rs in Api::<ReplicaSet>::namespaced(self.admin.clone(), &ns)
                .list(&params)
                .await?
                .items
            {
                fresh.insert(line("replicasets", &rs.metadata));
            }
            for p in Api::<Pod>::namespaced(self.admin.clone(), &ns)
                .list(&params)
                .await?
                .items
            {
                fresh.insert(line("pods", &p.metadata));
            }
        }
        if cached == fresh {
            return Ok(None);
        }
        Ok(Some(listing_diff(&cached, &fresh, 10)))
    }

    /// Final checks, controller stop, watch stop; the report.
    async fn finish(mut self, outcome: Result<()>) -> Result<Report> {
        if let Err(e) = outcome {
            self.problems.push(format!("{e:#}"));
        }
        let phases = std::mem::take(&mut self.phases);
        // Caches: equal to a fresh list once the cluster is quiet (a few seconds for the last
        // events to arrive).
        let mut cache = String::from("not compared (the controller is not running)");
        if self.controller.is_some() && self.check_controller().is_ok() {
            let deadline = Instant::now() + Duration::from_secs(30);
            loop {
                match self.compare_caches().await {
                    Ok(None) => {
                        cache = "equal to a fresh list (keys and resourceVersions of the run's Deployments, ReplicaSets and Pods)".to_owned();
                        break;
                    }
                    Ok(Some(diff)) if Instant::now() > deadline => {
                        cache = format!("DIFFER from a fresh list: {}", diff.join("; "));
                        self.problems.push(cache.clone());
                        break;
                    }
                    Err(e) if Instant::now() > deadline => {
                        cache = format!("could not be compared: {e:#}");
                        self.problems.push(cache.clone());
                        break;
                    }
                    _ => tokio::time::sleep(Duration::from_secs(1)).await,
                }
            }
        }
        if let Err(e) = self.check_controller() {
            self.problems.push(format!("{e:#}"));
        }
        if let Some(c) = self.controller.take() {
            let pid = c.pid();
            if let Err(e) = tokio::task::block_in_place(|| c.stop()) {
                self.problems.push(format!(
                    "the controller did not stop cleanly on SIGTERM: {e:#}"
                ));
            }
            if fresh::deployment_controllers(&self.info.dir)
                .iter()
                .any(|(p, _)| *p == pid)
            {
                self.problems
                    .push(format!("the controller (pid {pid}) still runs after stop"));
            }
        }
        let log = fs::read_to_string(self.log).unwrap_or_default();
        for line in panic_lines(&log) {
            self.problems
                .push(format!("panic in the controller's log: {line}"));
        }
        self.cancel.cancel();
        for t in self.watch_tasks.drain(..) {
            let _ = t.await;
        }
        let checker = self.checker.lock().expect("checker lock");
        let s = &self.watch_stats;
        Ok(Report {
            profile: Profile::Short,
            kubernetes: String::new(),
            seed: self.seed,
            deployments: self.deployments.len(),
            replicas: self.plan.replicas,
            initial_rollout: self.initial_rollout,
            phases,
            rollouts: self.rollouts,
            faults: self.faults,
            violations: checker.violations().iter().map(|v| v.to_string()).collect(),
            events: checker.events(),
            watch: format!(
                "{} lists, {} watches broken, {} of them by 410 Gone; controller killed {} times by the run, never exited otherwise",
                s.lists.load(Ordering::Relaxed),
                s.broken.load(Ordering::Relaxed),
                s.gone.load(Ordering::Relaxed),
                self.controller_kills
            ),
            problems: std::mem::take(&mut self.problems),
            cache,
            took: Duration::ZERO,
        })
    }
}

/// One writer of the conflict storm: read-modify-write updates of random Deployments' labels
/// and spec until `deadline`. Counts successful writes and conflicts; other errors (the
/// apiserver being busy) are retried.
async fn storm_writer(
    admin: Client,
    targets: Vec<(String, String)>,
    mut rng: fastrand::Rng,
    deadline: tokio::time::Instant,
    writes: Arc<AtomicU64>,
    conflicts: Arc<AtomicU64>,
) -> Result<()> {
    let pp = PostParams {
        field_manager: Some("kctrl-chaos-storm".to_owned()),
        ..Default::default()
    };
    while tokio::time::Instant::now() < deadline {
        let (ns, name) = &targets[rng.usize(..targets.len())];
        let api: Api<Deployment> = Api::namespaced(admin.clone(), ns);
        let Ok(mut d) = api.get(name).await else {
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        };
        let n = rng.u32(0..1000);
        d.metadata
            .labels
            .get_or_insert_with(Default::default)
            .insert("chaos.kctrl.dev/storm".to_owned(), n.to_string());
        let spec = d.spec.get_mut();
        spec.revision_history_limit = Some(2 + (n % 8) as i32);
        spec.progress_deadline_seconds = Some(600 + (n % 60) as i32);
        // A little time between read and write, as a real client would take.
        tokio::time::sleep(Duration::from_millis(rng.u64(0..100))).await;
        match api.update(&pp, &d).await {
            Ok(_) => {
                writes.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) if e.is_conflict() => {
                conflicts.fetch_add(1, Ordering::Relaxed);
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert!(Plan::of(Profile::Long).deployments == 100);
        assert!(Plan::of(Profile::Long).apiserver_kills == 20);
        assert!(Plan::of(Profile::Long).controller_kills == 10);
    }
}

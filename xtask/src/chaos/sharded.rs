//! `cargo xtask chaos --profile sharded`: replicas of our Deployment controller sharded by
//! namespace (`--shard-by=namespace`) on the local control plane, once with kube-apiserver's
//! `ShardedListAndWatch` feature gate on (the apiserver filters each replica's lists and
//! watches) and once with it off (each replica filters on its side).
//!
//! Each run: a fresh cluster whose apiserver writes an audit log (`kctrl_cluster::audit`:
//! Metadata for writes of Deployments, ReplicaSets and Pods, the bodies of Lease writes);
//! 3 replicas with `deploy/`'s RBAC and `deploy/sharded/`'s, each started and stopped by its
//! pid; 300 Deployments in 30 namespaces named `<6 random characters>-shard` (the apiserver's
//! hash moves only its low bits for a change at the end of a name, see docs/operations.md),
//! and the check that they fall into several buckets held by every replica. Then:
//!
//! 1. every Deployment rolls out; each replica's caches (`/debug/cache`) hold only its range:
//!    the replicas' listings are disjoint and add up to a fresh list of the run's objects;
//! 2. during a rollout, `kill -9` one replica: the time until the survivors hold every bucket
//!    (the handover) and until every Deployment has converged;
//! 3. during a rollout, a fourth replica joins: the time until it holds its share;
//! 4. during a rollout, `SIGSTOP` one replica past its Lease (lease duration + 10 s), then
//!    `SIGCONT`: the others take its buckets over once its Lease expired, and it exits
//!    non-zero when it finds its Lease lost;
//! 5. the caches again, no Deployment with two ReplicaSets of one pod-template-hash, no lost
//!    update (`observedGeneration == generation` everywhere), every replica left stopped by
//!    SIGTERM with status 0 and gone, no panic in any log;
//! 6. the audit check (`shard_audit.rs`): every write by a replica falls within its hold of
//!    the object's bucket, and no two replicas hold a bucket at once.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

use kctrl_client::sharding::hash_field;
use kctrl_cluster::audit::{AuditLog, controller_writes_policy};
use kctrl_shard::bucket_of;

use super::shard_audit::{self, ShardAudit};
use super::*;

/// The shard group of the replicas (the binary's default `--shard-group`).
const GROUP: &str = "deployment-controller";
/// Where their Leases live (the default `--shard-lease-namespace`).
const LEASE_NAMESPACE: &str = "kube-system";
/// The member's bucket count.
const BUCKETS: u32 = kctrl_shard::DEFAULT_BUCKET_COUNT;
/// The member Leases' duration (the binary's default `--leader-elect-lease-duration`).
const LEASE_DURATION: Duration = Duration::from_secs(15);
/// The label of the run's objects.
const SHARD_RUN_LABEL: &str = "chaos.kctrl.dev/sharded-run";

/// Whether the apiserver filters by shard: which runs to make.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Gate {
    /// `ShardedListAndWatch=true` only.
    On,
    /// `ShardedListAndWatch=false` only (client-side filtering).
    Off,
    /// One run with the gate on, then one with it off.
    Both,
}

impl Gate {
    fn settings(self) -> Vec<bool> {
        match self {
            Gate::On => vec![true],
            Gate::Off => vec![false],
            Gate::Both => vec![true, false],
        }
    }
}

/// The sizes of the sharded profile.
#[derive(Clone, Debug)]
struct ShardPlan {
    replicas: usize,
    namespaces: usize,
    deployments: usize,
    /// Pods per Deployment.
    pod_replicas: i32,
    ready_after: &'static str,
    /// How long the stopped replica stays stopped: past its Lease.
    stop_for: Duration,
    converge_timeout: Duration,
}

impl ShardPlan {
    fn new() -> ShardPlan {
        ShardPlan {
            replicas: 3,
            namespaces: 30,
            deployments: 300,
            pod_replicas: 1,
            ready_after: "2s",
            stop_for: LEASE_DURATION + Duration::from_secs(10),
            converge_timeout: Duration::from_secs(240),
        }
    }
}

/// One replica process.
struct Replica {
    /// `r0`, `r1`…: its log is `replica-<n>.log`.
    label: String,
    port: u16,
    log: PathBuf,
    pid: u32,
    /// Its member identity (from its log).
    identity: String,
    /// `None` once killed, stopped or exited.
    process: Option<ControllerProcess>,
    /// What happened to it.
    fate: &'static str,
}

/// What one gate setting's run found.
#[derive(Debug, Default)]
struct GateReport {
    gate: bool,
    deployments: usize,
    namespaces: usize,
    /// Distinct buckets the namespaces fall into.
    buckets: usize,
    split: Duration,
    initial_rollout: Duration,
    /// Per fault: name, detail, handover (or rebalance) time, convergence time.
    faults: Vec<(String, String, Duration, Duration)>,
    caches: Vec<String>,
    audit: String,
    violations: Vec<String>,
    problems: Vec<String>,
    took: Duration,
}

impl GateReport {
    fn render(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "### ShardedListAndWatch {}: {} Deployments in {} namespaces ({} buckets), {}",
            if self.gate { "on" } else { "off" },
            self.deployments,
            self.namespaces,
            self.buckets,
            fmt_duration(self.took)
        );
        let _ = writeln!(
            out,
            "split in force {} after the replicas started; initial rollout converged in {}",
            fmt_duration(self.split),
            fmt_duration(self.initial_rollout)
        );
        let _ = writeln!(out);
        let mut t = xtask_report::markdown::Table::new()
            .left("fault")
            .left("what happened")
            .right("buckets covered again after")
            .right("converged after");
        for (name, detail, handover, converged) in &self.faults {
            t.row([
                name.clone(),
                detail.clone(),
                fmt_duration(*handover),
                fmt_duration(*converged),
            ]);
        }
        out.push_str(&t.markdown());
        let _ = writeln!(out);
        for c in &self.caches {
            let _ = writeln!(out, "caches: {c}");
        }
        let _ = writeln!(out, "audit: {}", self.audit);
        let _ = writeln!(out, "violations: {}", self.violations.len());
        for v in self.violations.iter().take(20) {
            let _ = writeln!(out, "  {v}");
        }
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

/// The sharded profile: one run per gate setting.
pub(super) fn run(args: &ChaosArgs) -> Result<()> {
    let started = Instant::now();
    let seed = args.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1)
    });
    eprintln!(
        "==> chaos, profile sharded (seed {seed}), Kubernetes {}",
        args.kube.release.kubernetes
    );
    let binary = supervisor::build()?;
    let out_root = plane::target_dir().join("chaos").join("sharded");
    let mut reports = Vec::new();
    for (i, gate) in args.gate.settings().into_iter().enumerate() {
        let setting = if gate { "gate-on" } else { "gate-off" };
        let name = match &args.name {
            Some(n) => format!("{n}-{setting}"),
            None => format!("chaos-sharded-{setting}"),
        };
        plane::validate_name(&name)?;
        let out_dir = out_root.join(setting);
        fs::create_dir_all(&out_dir).with_context(|| format!("creating {}", out_dir.display()))?;
        let report = one_setting(
            args,
            &name,
            gate,
            &binary,
            &out_dir,
            seed.wrapping_add(i as u64),
        )?;
        print!("{}", report.render());
        reports.push(report);
    }
    let mut text = format!(
        "chaos run, profile sharded (seed {seed}), Kubernetes {}, {}\n\n",
        args.kube.release.kubernetes,
        fmt_duration(started.elapsed())
    );
    for r in &reports {
        text.push_str(&r.render());
        text.push('\n');
    }
    let path = out_root.join("report.md");
    fs::write(&path, &text).with_context(|| format!("writing {}", path.display()))?;
    eprintln!(
        "==> report: {}; replica logs and audit logs under {}",
        path.display(),
        out_root.display()
    );
    let failed: Vec<&GateReport> = reports.iter().filter(|r| !r.passed()).collect();
    if !failed.is_empty() {
        bail!(
            "sharded chaos run failed: {} violation(s), {} problem(s)",
            failed.iter().map(|r| r.violations.len()).sum::<usize>(),
            failed.iter().map(|r| r.problems.len()).sum::<usize>()
        );
    }
    Ok(())
}

/// One fresh cluster with the gate `gate`, the whole scenario, the cluster torn down.
fn one_setting(
    args: &ChaosArgs,
    name: &str,
    gate: bool,
    binary: &Path,
    out_dir: &Path,
    seed: u64,
) -> Result<GateReport> {
    let started = Instant::now();
    let plan = ShardPlan::new();
    let audit = AuditLog::new(out_dir.join("audit"));
    audit.prepare(&controller_writes_policy(LEASE_NAMESPACE))?;
    for i in 0..plan.replicas + 1 {
        let _ = fs::remove_file(out_dir.join(format!("replica-{i}.log")));
    }
    eprintln!(
        "==> cluster '{name}', ShardedListAndWatch={gate}, audit log {}",
        audit.log_path().display()
    );
    let reaper_pid = out_dir.join("replica-0.pid");
    let cluster = fresh::start(
        &UpOptions {
            name: name.to_owned(),
            nodes: 3,
            apiserver_args: audit.apiserver_args(),
            feature_gates: vec![format!("ShardedListAndWatch={gate}")],
            // Room for creating and deleting a Pod per Deployment and rollout.
            controller_manager_args: vec![
                "--kube-api-qps=100".to_owned(),
                "--kube-api-burst=200".to_owned(),
            ],
            deployment_controller: false,
            release: args.kube.release,
        },
        Fresh {
            reaper_pid_file: Some(&reaper_pid),
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
        let mut run = ShardedRun::new(&plan, &info, binary, out_dir, seed, gate)?;
        let outcome = run.scenario().await;
        run.finish(outcome, &audit).await
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
    report.took = started.elapsed();
    Ok(report)
}

/// `curl` with a short bound, for endpoints that may not answer (a stopped replica).
fn curl_quick(url: &str) -> Result<String> {
    let out = Command::new("curl")
        .args(["-sSfk", "--max-time", "3", url])
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

/// The value of `shard_member_buckets` in a replica's metrics.
fn held_buckets(metrics: &str) -> Option<usize> {
    metrics
        .lines()
        .find(|l| l.starts_with("shard_member_buckets{"))
        .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .map(|v| v as usize)
}

/// The member identity a replica logged when it joined (`lease=<group>-<identity>`).
fn logged_identity(log: &str) -> Option<String> {
    let line = log
        .lines()
        .find(|l| l.contains("joining the shard group"))?;
    let at = line.find("lease=")? + "lease=".len();
    let value: String = line[at..]
        .trim_start_matches('"')
        .chars()
        .take_while(|c| !c.is_whitespace() && *c != '"')
        .collect();
    value.strip_prefix(&format!("{GROUP}-")).map(str::to_owned)
}

/// Namespace names of the run: six random lowercase letters and digits, then `-shard`; the
/// part that varies comes first, so their hashes spread over the buckets.
fn namespace_names(rng: &mut fastrand::Rng, n: usize) -> Vec<String> {
    let mut names = BTreeSet::new();
    while names.len() < n {
        let prefix: String = (0..6)
            .map(|_| {
                let c = rng.u8(0..36);
                char::from(if c < 26 { b'a' + c } else { b'0' + c - 26 })
            })
            .collect();
        names.insert(format!("{prefix}-shard"));
    }
    names.into_iter().collect()
}

/// Whether process `pid` is gone (no such process, or a zombie of another).
fn gone(pid: u32) -> bool {
    !Path::new(&format!("/proc/{pid}")).exists()
        || fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|s| s.contains(") Z "))
            .unwrap_or(true)
}

struct ShardedRun<'a> {
    plan: &'a ShardPlan,
    info: &'a ClusterInfo,
    binary: &'a Path,
    out_dir: &'a Path,
    rng: fastrand::Rng,
    run_id: String,
    admin: Client,
    replicas: Vec<Replica>,
    namespaces: Vec<String>,
    deployments: Vec<(String, String)>,
    waves: usize,
    report: GateReport,
}

impl<'a> ShardedRun<'a> {
    fn new(
        plan: &'a ShardPlan,
        info: &'a ClusterInfo,
        binary: &'a Path,
        out_dir: &'a Path,
        seed: u64,
        gate: bool,
    ) -> Result<ShardedRun<'a>> {
        Ok(ShardedRun {
            plan,
            info,
            binary,
            out_dir,
            rng: fastrand::Rng::with_seed(seed),
            run_id: format!("{:x}", seed & 0xffff_ffff),
            admin: client(&info.admin_kubeconfig)?,
            replicas: Vec::new(),
            namespaces: Vec::new(),
            deployments: Vec::new(),
            waves: 0,
            report: GateReport {
                gate,
                ..GateReport::default()
            },
        })
    }

    async fn scenario(&mut self) -> Result<()> {
        tokio::task::block_in_place(|| self.grant_rbac())?;
        let t0 = Instant::now();
        for _ in 0..self.plan.replicas {
            self.start_replica()?;
        }
        self.wait_covered(None, Duration::from_secs(120)).await?;
        self.report.split = t0.elapsed();
        eprintln!(
            "==> {} replicas hold every bucket, {} after they started",
            self.plan.replicas,
            fmt_duration(self.report.split)
        );
        self.create().await?;
        self.report.initial_rollout = self.converge().await?;
        eprintln!(
            "==> {} Deployments rolled out in {}",
            self.deployments.len(),
            fmt_duration(self.report.initial_rollout)
        );
        let caches = self.check_caches("after the initial rollout").await?;
        self.report.caches.push(caches);

        // 1. kill -9 one replica during a rollout.
        self.roll().await?;
        self.pause().await;
        let victim = self.pick_live();
        let (label, pid) = (
            self.replicas[victim].label.clone(),
            self.replicas[victim].pid,
        );
        eprintln!("==> kill -9 replica {label} (pid {pid})");
        let t = Instant::now();
        if let Some(p) = self.replicas[victim].process.take() {
            p.kill()?;
        }
        self.replicas[victim].fate = "killed (SIGKILL)";
        if !gone(pid) {
            self.report.problems.push(format!(
                "replica {label} (pid {pid}) still runs after kill -9"
            ));
        }
        let handover = self.wait_covered(None, Duration::from_secs(90)).await?;
        let converged = self.converge().await?;
        eprintln!(
            "==> survivors hold every bucket {} after the kill; converged after {}",
            fmt_duration(handover),
            fmt_duration(converged)
        );
        debug_assert!(t.elapsed() >= handover);
        self.report.faults.push((
            "kill -9 a replica".to_owned(),
            format!(
                "{label} killed during a rollout; its buckets taken over once its Lease expired"
            ),
            handover,
            converged,
        ));

        // 2. A replica joins during a rollout.
        self.roll().await?;
        self.pause().await;
        let t = Instant::now();
        let added = self.start_replica()?;
        let started_in = t.elapsed();
        let rebalance = self
            .wait_covered(Some(added), Duration::from_secs(90))
            .await?;
        let converged = self.converge().await?;
        let label = self.replicas[added].label.clone();
        eprintln!(
            "==> replica {label} holds its share {} after its start; converged after {}",
            fmt_duration(rebalance),
            fmt_duration(converged)
        );
        self.report.faults.push((
            "add a replica".to_owned(),
            format!(
                "{label} started during a rollout (caches synced in {}), took its share from the others",
                fmt_duration(started_in)
            ),
            rebalance,
            converged,
        ));

        // 3. SIGSTOP one past its Lease, then SIGCONT.
        self.roll().await?;
        self.pause().await;
        let stopped = self.pick_live();
        let (label, pid) = (
            self.replicas[stopped].label.clone(),
            self.replicas[stopped].pid,
        );
        eprintln!(
            "==> SIGSTOP replica {label} (pid {pid}) for {}",
            fmt_duration(self.plan.stop_for)
        );
        let t = Instant::now();
        signal(pid, "STOP")?;
        self.replicas[stopped].fate = "stopped past its Lease";
        let takeover = self.wait_covered_without(stopped, self.plan.stop_for).await;
        let remaining = self.plan.stop_for.saturating_sub(t.elapsed());
        tokio::time::sleep(remaining).await;
        eprintln!("==> SIGCONT replica {label}");
        signal(pid, "CONT")?;
        let exited = self.wait_exit(stopped, Duration::from_secs(30)).await?;
        let converged = self.converge().await?;
        let detail = match &exited {
            Some(status) if !status.success() => {
                self.replicas[stopped].fate = "exited non-zero after SIGCONT (lease lost)";
                format!(
                    "{label} stopped {}, others took its buckets over; after SIGCONT it exited \
                     with {status}",
                    fmt_duration(self.plan.stop_for)
                )
            }
            Some(status) => {
                self.report.problems.push(format!(
                    "replica {label} exited with {status} after SIGCONT, expected a failure \
                     (its Lease was lost)"
                ));
                format!("{label} exited with {status}")
            }
            None => {
                self.report.problems.push(format!(
                    "replica {label} still runs 30 s after SIGCONT although its Lease expired"
                ));
                format!("{label} kept running")
            }
        };
        match takeover {
            Some(takeover) => self.report.faults.push((
                "SIGSTOP a replica past its Lease".to_owned(),
                detail,
                takeover,
                converged,
            )),
            None => {
                self.report.problems.push(format!(
                    "the others did not hold every bucket within {} of stopping {label}",
                    fmt_duration(self.plan.stop_for)
                ));
                self.report.faults.push((
                    "SIGSTOP a replica past its Lease".to_owned(),
                    detail,
                    self.plan.stop_for,
                    converged,
                ));
            }
        }
        let caches = self.check_caches("after the faults").await?;
        self.report.caches.push(caches);
        self.check_replica_sets_and_generations().await?;
        Ok(())
    }

    fn grant_rbac(&self) -> Result<()> {
        xtask_contender::rbac::grant_deploy_rbac(&self.info.kubectl, &self.info.admin_kubeconfig)?;
        let sharded = xtask_contender::rbac::deploy_dir().join("sharded");
        let mut argv = vec![
            self.info.kubectl.display().to_string(),
            "--kubeconfig".to_owned(),
            self.info.admin_kubeconfig.display().to_string(),
            "apply".to_owned(),
        ];
        for file in ["role-shard-members.yaml", "rolebinding-shard-members.yaml"] {
            argv.push("-f".to_owned());
            argv.push(sharded.join(file).display().to_string());
        }
        xtask_contender::rbac::run_command(&argv)
    }

    /// Starts one more replica and waits for its caches and its join; its index.
    fn start_replica(&mut self) -> Result<usize> {
        let index = self.replicas.len();
        let port = free_port()?;
        let log = self.out_dir.join(format!("replica-{index}.log"));
        let open_paths = format!(
            "--authorization-always-allow-paths={},/debug/cache",
            supervisor::ALWAYS_ALLOW_PATHS
        );
        let port_arg = port.to_string();
        let process = tokio::task::block_in_place(|| {
            supervisor::start_with_env(
                self.binary,
                &self.info.controller_kubeconfig,
                &log,
                &[
                    "--shard-by=namespace",
                    "--secure-port",
                    &port_arg,
                    "--debug-cache-endpoint",
                    &open_paths,
                ],
                &[("RUST_LOG", "info")],
            )
        })?;
        let pid = process.pid();
        let deadline = Instant::now() + Duration::from_secs(30);
        let identity = loop {
            if let Some(id) = logged_identity(&fs::read_to_string(&log).unwrap_or_default()) {
                break id;
            }
            if Instant::now() > deadline {
                bail!(
                    "replica {index} (pid {pid}) never logged joining the shard group; log {}:\n{}",
                    log.display(),
                    process::tail(&log, 30)
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        eprintln!("==> replica r{index}: pid {pid}, port {port}, identity {identity}");
        self.replicas.push(Replica {
            label: format!("r{index}"),
            port,
            log,
            pid,
            identity,
            process: Some(process),
            fate: "stopped by SIGTERM at the end",
        });
        self.check_controllers()?;
        Ok(index)
    }

    /// The live replicas are exactly the cluster's Deployment controllers.
    fn check_controllers(&self) -> Result<()> {
        let found: BTreeSet<u32> = fresh::deployment_controllers(&self.info.dir)
            .iter()
            .map(|(p, _)| *p)
            .collect();
        let ours: BTreeSet<u32> = self
            .replicas
            .iter()
            .filter(|r| r.process.is_some())
            .map(|r| r.pid)
            .collect();
        if found != ours {
            bail!(
                "expected our replicas {ours:?} as the cluster's Deployment controllers, found {found:?}"
            );
        }
        Ok(())
    }

    fn live(&self) -> Vec<usize> {
        (0..self.replicas.len())
            .filter(|&i| self.replicas[i].process.is_some())
            .collect()
    }

    fn pick_live(&mut self) -> usize {
        let live = self.live();
        live[self.rng.usize(0..live.len())]
    }

    /// Fails if a replica exited on its own.
    fn check_exits(&mut self) -> Result<()> {
        for r in &mut self.replicas {
            if let Some(p) = r.process.as_mut()
                && let Some(status) = p.exited()?
            {
                bail!(
                    "replica {} exited on its own ({status}); log {}:\n{}",
                    r.label,
                    r.log.display(),
                    process::tail(&r.log, 30)
                );
            }
        }
        Ok(())
    }

    /// Buckets held by each of `replicas` (`None` for one that did not answer).
    fn held(&self, replicas: &[usize]) -> Vec<Option<usize>> {
        replicas
            .iter()
            .map(|&i| {
                let url = format!("https://127.0.0.1:{}/metrics", self.replicas[i].port);
                curl_quick(&url).ok().and_then(|m| held_buckets(&m))
            })
            .collect()
    }

    /// Waits until the live replicas together hold every bucket, each at least one (and
    /// `joiner`, if given, among them); how long that took.
    async fn wait_covered(&mut self, joiner: Option<usize>, limit: Duration) -> Result<Duration> {
        let t0 = Instant::now();
        loop {
            self.check_exits()?;
            let live = self.live();
            let held = tokio::task::block_in_place(|| self.held(&live));
            let total: usize = held.iter().flatten().sum();
            let each = held.iter().all(|h| h.is_some_and(|n| n > 0));
            let joined = joiner.is_none_or(|j| live.contains(&j));
            if total == BUCKETS as usize && each && joined {
                return Ok(t0.elapsed());
            }
            if t0.elapsed() > limit {
                bail!(
                    "the replicas did not hold every bucket within {}: {:?}",
                    fmt_duration(limit),
                    live.iter()
                        .zip(&held)
                        .map(|(i, h)| format!("{}: {h:?}", self.replicas[*i].label))
                        .collect::<Vec<_>>()
                );
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// While `stopped` is stopped: the time until the others hold every bucket, `None` if
    /// they do not within `limit`.
    async fn wait_covered_without(&self, stopped: usize, limit: Duration) -> Option<Duration> {
        let t0 = Instant::now();
        let others: Vec<usize> = self.live().into_iter().filter(|&i| i != stopped).collect();
        while t0.elapsed() < limit {
            let held = tokio::task::block_in_place(|| self.held(&others));
            if held.iter().flatten().sum::<usize>() == BUCKETS as usize {
                return Some(t0.elapsed());
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        None
    }

    /// Waits up to `limit` for replica `i` to exit; its status.
    async fn wait_exit(
        &mut self,
        i: usize,
        limit: Duration,
    ) -> Result<Option<std::process::ExitStatus>> {
        let t0 = Instant::now();
        loop {
            let Some(p) = self.replicas[i].process.as_mut() else {
                return Ok(None);
            };
            if let Some(status) = p.exited()? {
                let pid = self.replicas[i].pid;
                self.replicas[i].process = None;
                if !gone(pid) {
                    self.report
                        .problems
                        .push(format!("replica pid {pid} still present after it exited"));
                }
                return Ok(Some(status));
            }
            if t0.elapsed() > limit {
                return Ok(None);
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// A short random pause, so a fault lands while the rollout's writes are under way.
    async fn pause(&mut self) {
        let ms = self.rng.u64(500..=2500);
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }

    async fn create(&mut self) -> Result<()> {
        let pp = PostParams {
            field_manager: Some("kctrl-chaos".to_owned()),
            ..Default::default()
        };
        self.namespaces = namespace_names(&mut self.rng, self.plan.namespaces);
        let buckets: BTreeSet<u32> = self
            .namespaces
            .iter()
            .map(|ns| bucket_of(hash_field(ns), BUCKETS))
            .collect();
        self.report.namespaces = self.namespaces.len();
        self.report.buckets = buckets.len();
        if buckets.len() < self.plan.namespaces / 2 {
            self.report.problems.push(format!(
                "the {} namespaces fall into only {} buckets",
                self.namespaces.len(),
                buckets.len()
            ));
        }
        let namespaces: Api<Namespace> = Api::all(self.admin.clone());
        for ns in &self.namespaces {
            let n: Namespace = serde_json::from_value(serde_json::json!({
                "metadata": {"name": ns, "labels": {SHARD_RUN_LABEL: self.run_id}}
            }))?;
            namespaces.create(&pp, &n).await?;
        }
        for i in 0..self.plan.deployments {
            let ns = self.namespaces[i % self.namespaces.len()].clone();
            let name = format!("d{i:03}");
            let d: Deployment = serde_json::from_value(serde_json::json!({
                "metadata": {"name": name, "labels": {SHARD_RUN_LABEL: self.run_id}},
                "spec": {
                    "replicas": self.plan.pod_replicas,
                    "selector": {"matchLabels": {"app": name}},
                    "template": {
                        "metadata": {
                            "labels": {"app": name},
                            "annotations": {"kctrl.dev/ready-after": self.plan.ready_after, "chaos.kctrl.dev/wave": "0"}
                        },
                        "spec": {
                            "containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10"}],
                            "terminationGracePeriodSeconds": 0
                        }
                    }
                }
            }))?;
            Api::<Deployment>::namespaced(self.admin.clone(), &ns)
                .create(&pp, &d)
                .await?;
            self.deployments.push((ns, name));
        }
        Ok(())
    }

    async fn list_deployments(&self) -> Result<Vec<Deployment>> {
        let params = ListParams {
            label_selector: Some(format!("{SHARD_RUN_LABEL}={}", self.run_id)),
            ..Default::default()
        };
        Ok(Api::<Deployment>::all(self.admin.clone())
            .list(&params)
            .await
            .context("listing the Deployments")?
            .items)
    }

    /// A rollout of every Deployment (a new pod-template annotation).
    async fn roll(&mut self) -> Result<()> {
        self.waves += 1;
        eprintln!("==> rollout wave {}", self.waves);
        let patch = Patch::Merge(serde_json::json!({
            "spec": {"template": {"metadata": {"annotations": {"chaos.kctrl.dev/wave": self.waves.to_string()}}}}
        }));
        use futures::StreamExt as _;
        let admin = self.admin.clone();
        let patch = &patch;
        let results: Vec<Result<()>> = futures::stream::iter(self.deployments.clone())
            .map(|(ns, name)| {
                let api = Api::<Deployment>::namespaced(admin.clone(), &ns);
                async move {
                    api.patch(&name, &PatchParams::default(), patch)
                        .await
                        .map(|_| ())
                        .with_context(|| format!("patching {ns}/{name}"))
                }
            })
            .buffer_unordered(20)
            .collect()
            .await;
        for r in results {
            r?;
        }
        Ok(())
    }

    async fn converge(&mut self) -> Result<Duration> {
        let t0 = Instant::now();
        loop {
            self.check_exits()?;
            let all = self.list_deployments().await?;
            let pending: Vec<String> = all
                .iter()
                .filter(|d| !complete(d))
                .map(|d| {
                    let st = d.status.clone().unwrap_or_default();
                    format!(
                        "{}/{} (generation {} observed {}, updated {} available {})",
                        d.metadata.namespace.as_deref().unwrap_or(""),
                        d.metadata.name.as_deref().unwrap_or(""),
                        d.metadata.generation.unwrap_or(0),
                        st.observed_generation.unwrap_or(0),
                        st.updated_replicas.unwrap_or(0),
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

    /// The run's objects as a fresh list sees them: `resource namespace/name resourceVersion`.
    async fn fresh_listing(&self) -> Result<BTreeSet<String>> {
        let mut fresh = BTreeSet::new();
        let params = ListParams::default();
        for ns in &self.namespaces {
            let line = |r: &str, m: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta| {
                format!(
                    "{r} {ns}/{} {}",
                    m.name.as_deref().unwrap_or(""),
                    m.resource_version.as_deref().unwrap_or("")
                )
            };
            for d in Api::<Deployment>::namespaced(self.admin.clone(), ns)
                .list(&params)
                .await?
                .items
            {
                fresh.insert(line("deployments", &d.metadata));
            }
            for rs in Api::<ReplicaSet>::namespaced(self.admin.clone(), ns)
                .list(&params)
                .await?
                .items
            {
                fresh.insert(line("replicasets", &rs.metadata));
            }
            for p in Api::<Pod>::namespaced(self.admin.clone(), ns)
                .list(&params)
                .await?
                .items
            {
                fresh.insert(line("pods", &p.metadata));
            }
        }
        Ok(fresh)
    }

    /// Each live replica's cache listing of the run's namespaces.
    fn cached(&self) -> Result<Vec<(String, BTreeSet<String>)>> {
        let run_namespaces: BTreeSet<&str> = self.namespaces.iter().map(String::as_str).collect();
        self.live()
            .into_iter()
            .map(|i| {
                let r = &self.replicas[i];
                let url = format!("https://127.0.0.1:{}/debug/cache", r.port);
                let lines = curl(&url)?
                    .lines()
                    .filter(|l| {
                        l.split(' ')
                            .nth(1)
                            .and_then(|key| key.split_once('/'))
                            .is_some_and(|(ns, _)| run_namespaces.contains(ns))
                    })
                    .map(str::to_owned)
                    .collect();
                Ok((r.label.clone(), lines))
            })
            .collect()
    }

    /// The replicas' caches hold disjoint parts that add up to a fresh list; a summary.
    async fn check_caches(&mut self, when: &str) -> Result<String> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let cached = tokio::task::block_in_place(|| self.cached())?;
            let fresh = self.fresh_listing().await?;
            let mut union = BTreeSet::new();
            let mut twice = Vec::new();
            for (label, lines) in &cached {
                for l in lines {
                    if !union.insert(l.clone()) {
                        twice.push(format!("{label}: {l}"));
                    }
                }
            }
            let counts = cached
                .iter()
                .map(|(label, lines)| {
                    let of = |r: &str| lines.iter().filter(|l| l.starts_with(r)).count();
                    let namespaces: BTreeSet<&str> = lines
                        .iter()
                        .filter_map(|l| l.split(' ').nth(1)?.split_once('/').map(|(ns, _)| ns))
                        .collect();
                    format!(
                        "{label} {} namespaces, {} Deployments, {} ReplicaSets, {} Pods",
                        namespaces.len(),
                        of("deployments "),
                        of("replicasets "),
                        of("pods ")
                    )
                })
                .collect::<Vec<_>>()
                .join("; ");
            if twice.is_empty() && union == fresh {
                let empty: Vec<&String> = cached
                    .iter()
                    .filter(|(_, lines)| lines.is_empty())
                    .map(|(label, _)| label)
                    .collect();
                if !empty.is_empty() {
                    self.report.problems.push(format!(
                        "{when}: replicas {empty:?} cache none of the run's namespaces: the split \
                         did not spread them"
                    ));
                }
                return Ok(format!(
                    "{when}: {} objects, each in exactly one replica's caches ({counts})",
                    fresh.len()
                ));
            }
            if Instant::now() > deadline {
                let diff = listing_diff(&union, &fresh, 10);
                let text = format!(
                    "{when}: the replicas' caches are not a partition of a fresh list: {} in two \
                     caches ({}); {}",
                    twice.len(),
                    twice.iter().take(5).cloned().collect::<Vec<_>>().join(", "),
                    diff.join("; ")
                );
                self.report.problems.push(text.clone());
                return Ok(text);
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }

    /// No Deployment has two ReplicaSets of one pod-template-hash; every Deployment's
    /// status is of its latest generation.
    async fn check_replica_sets_and_generations(&mut self) -> Result<()> {
        let mut seen: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
        for ns in &self.namespaces {
            for rs in Api::<ReplicaSet>::namespaced(self.admin.clone(), ns)
                .list(&ListParams::default())
                .await?
                .items
            {
                let Some(owner) = rs
                    .metadata
                    .owner_references
                    .as_ref()
                    .and_then(|o| o.iter().find(|o| o.controller == Some(true)))
                else {
                    continue;
                };
                let hash = rs
                    .metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get("pod-template-hash"))
                    .cloned()
                    .unwrap_or_default();
                seen.entry((format!("{ns}/{}", owner.uid), hash))
                    .or_default()
                    .push(rs.metadata.name.clone().unwrap_or_default());
            }
        }
        for ((owner, hash), names) in &seen {
            if names.len() > 1 {
                self.report.violations.push(format!(
                    "duplicate ReplicaSets of Deployment {owner} with pod-template-hash {hash}: {names:?}"
                ));
            }
        }
        for d in self.list_deployments().await? {
            let generation = d.metadata.generation.unwrap_or(0);
            let observed = d
                .status
                .as_ref()
                .and_then(|s| s.observed_generation)
                .unwrap_or(0);
            if observed != generation {
                self.report.violations.push(format!(
                    "lost update: {}/{} has generation {generation}, status of {observed}",
                    d.metadata.namespace.as_deref().unwrap_or(""),
                    d.metadata.name.as_deref().unwrap_or("")
                ));
            }
        }
        Ok(())
    }

    /// Stops the live replicas (SIGTERM, status 0 expected), checks every pid is gone and
    /// the logs have no panic, reads the audit log; the report.
    async fn finish(mut self, outcome: Result<()>, audit: &AuditLog) -> Result<GateReport> {
        if let Err(e) = outcome {
            self.report.problems.push(format!("{e:#}"));
        }
        let _ = self
            .check_exits()
            .map_err(|e| self.report.problems.push(format!("{e:#}")));
        for r in &mut self.replicas {
            let Some(p) = r.process.take() else {
                continue;
            };
            if let Err(e) = tokio::task::block_in_place(|| p.stop()) {
                self.report.problems.push(format!(
                    "replica {} did not stop cleanly on SIGTERM: {e:#}",
                    r.label
                ));
            }
        }
        for r in &self.replicas {
            if !gone(r.pid) {
                self.report.problems.push(format!(
                    "replica {} (pid {}) still runs after it was {}",
                    r.label, r.pid, r.fate
                ));
            }
            let log = fs::read_to_string(&r.log).unwrap_or_default();
            for line in panic_lines(&log) {
                self.report
                    .problems
                    .push(format!("panic in replica {}'s log: {line}", r.label));
            }
        }
        if !fresh::deployment_controllers(&self.info.dir).is_empty() {
            self.report.problems.push(format!(
                "Deployment controllers still run against the cluster: {:?}",
                fresh::deployment_controllers(&self.info.dir)
            ));
        }
        self.report.deployments = self.deployments.len();
        let text = fs::read_to_string(audit.log_path())
            .with_context(|| format!("reading {}", audit.log_path().display()))?;
        let (events, unreadable) = crate::audit::parse(&text);
        let checked: ShardAudit = shard_audit::check(&events, GROUP, LEASE_NAMESPACE, BUCKETS);
        let identities: BTreeMap<&str, &str> = self
            .replicas
            .iter()
            .map(|r| (r.identity.as_str(), r.label.as_str()))
            .collect();
        let mut summary = checked.summary();
        for (id, label) in &identities {
            summary = summary.replace(id, label);
        }
        if unreadable > 0 {
            self.report.problems.push(format!(
                "{unreadable} lines of the audit log could not be read"
            ));
        }
        if checked.lease_writes == 0 || checked.writes.is_empty() {
            self.report.problems.push(format!(
                "the audit log shows no Lease claims or no controller writes: {summary}"
            ));
        }
        for v in &checked.violations {
            let mut v = v.clone();
            for (id, label) in &identities {
                v = v.replace(id, label);
            }
            self.report.violations.push(format!("audit: {v}"));
        }
        self.report.audit = format!(
            "{} events; {summary}; replicas: {}",
            events.len(),
            self.replicas
                .iter()
                .map(|r| format!("{} {}", r.label, r.fate))
                .collect::<Vec<_>>()
                .join(", ")
        );
        Ok(self.report)
    }
}

/// `kill -<signal> <pid>` of one of our replicas.
fn signal(pid: u32, signal: &str) -> Result<()> {
    let status = Command::new("kill")
        .args([&format!("-{signal}"), "--", &pid.to_string()])
        .status()
        .context("running kill")?;
    if !status.success() {
        bail!("kill -{signal} {pid} failed ({status})");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identities_are_read_from_the_join_line() {
        let quoted = "2026-11-29T10:00:00Z  INFO deployment_controller: sharded by namespace: joining the shard group group=deployment-controller namespace=kube-system lease=\"deployment-controller-host-0f8f\"";
        assert_eq!(logged_identity(quoted).as_deref(), Some("host-0f8f"));
        let bare = "INFO x: sharded by namespace: joining the shard group lease=deployment-controller-h-1 other=2";
        assert_eq!(logged_identity(bare).as_deref(), Some("h-1"));
        assert_eq!(logged_identity("INFO nothing here"), None);
    }

    #[test]
    fn held_buckets_are_read_from_the_metrics() {
        let m = "# HELP shard_member_buckets x\nshard_member_buckets{group=\"deployment-controller\"} 21\n";
        assert_eq!(held_buckets(m), Some(21));
        assert_eq!(held_buckets("other 1\n"), None);
    }

    #[test]
    fn namespace_names_vary_first_and_spread_over_the_buckets() {
        let mut rng = fastrand::Rng::with_seed(7);
        let names = namespace_names(&mut rng, 30);
        assert_eq!(names.len(), 30);
        assert!(names.iter().all(|n| n.len() == 12 && n.ends_with("-shard")));
        let buckets: BTreeSet<u32> = names
            .iter()
            .map(|n| bucket_of(hash_field(n), BUCKETS))
            .collect();
        assert!(buckets.len() >= 15, "{} buckets", buckets.len());
        // Names that differ only at their end land in one bucket.
        let tails: BTreeSet<u32> = (0..30)
            .map(|i| bucket_of(hash_field(&format!("ns-{i:02}")), BUCKETS))
            .collect();
        assert_eq!(tails.len(), 1, "{tails:?}");
    }
}

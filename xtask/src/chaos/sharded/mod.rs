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
//!
//! The Pods are kube-controller-manager's ReplicaSet controller's here, whatever
//! `--replicaset-controller` says: our binary refuses `--shard-by` together with its
//! ReplicaSet controller, and this scenario is about the sharded Deployment controller (the
//! `short` and `long` profiles run ours).

use crate::kube::namespace_names;
use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

use kctrl_client::sharding::hash_field;
use kctrl_cluster::audit::{AuditLog, controller_writes_policy};
use kctrl_shard::bucket_of;

use super::*;

mod checks;
mod scenario;

/// The shard group of the replicas (the binary's default `--shard-group`).
const GROUP: &str = "deployment-controller";
/// Where their Leases live: deploy/sharded/'s namespace (`--shard-lease-namespace`).
const LEASE_NAMESPACE: &str = "kctrl-shards";
/// The member's bucket count.
const BUCKETS: u32 = kctrl_shard::DEFAULT_BUCKET_COUNT;
/// The member Leases' duration (the binary's default `--leader-elect-lease-duration`).
const LEASE_DURATION: Duration = Duration::from_secs(15);
/// What a replica's informer logs when kube-apiserver ignores its shard selector.
const IGNORED_SELECTOR: &str = "kube-apiserver ignored the shard selector";
/// The label of the run's objects.
const SHARD_RUN_LABEL: &str = "chaos.kctrl.dev/sharded-run";

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
    /// Who filtered the replicas' lists and watches.
    filtering: String,
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
        let _ = writeln!(out, "filtering: {}", self.filtering);
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
            // 110 Pods each: room for a Pod per Deployment and its surge during a rollout.
            nodes: 6,
            apiserver_args: audit.apiserver_args(),
            feature_gates: vec![format!("ShardedListAndWatch={gate}")],
            // Room for creating and deleting a Pod per Deployment and rollout.
            scheduler_args: Vec::new(),
            controller_manager_args: vec![
                "--kube-api-qps=100".to_owned(),
                "--kube-api-burst=200".to_owned(),
            ],
            deployment_controller: false,
            replicaset_controller: true,
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

//! `cargo xtask bench shard`: our Deployment controller as one replica beside three shards
//! of it (`--shard-by=namespace`), on one local control plane with kube-apiserver's
//! `ShardedListAndWatch` gate on (and, with `--gate off|both`, off: client-side filtering).
//!
//! Every replica, single or shard, has the same client limits (QPS 20, burst 30, 5 concurrent
//! syncs): the question is what three replicas at the per-replica budget of one buy. The
//! cluster's kube-controller-manager (ReplicaSet controller, garbage collector) and
//! kube-scheduler run with raised limits (QPS 200, burst 400) so that neither is what a
//! rollout waits for.
//!
//! Set-up, unmeasured: D Deployments x R replicas in N namespaces whose names vary at their
//! start (FNV-1a moves only the low bits of the hash for a change at the end of a name, so
//! `ns-01`, `ns-02`... would all land in one bucket), rolled out by one replica with raised
//! limits. Then per round, the two sides take turns (the order alternates), each alone:
//! 1. start (one process, or three at once) until ready: caches synced, and for the shards
//!    each seeing all three members, each ready (`shard_member_ready`) and every one of the
//!    64 buckets active on one of them;
//!    and the bytes kube-apiserver wrote to reach it (below);
//! 2. a rollout (a template change) of every Deployment, or with `--rollout N` of the first N
//!    (one per namespace before a second in any), until all are complete;
//! 3. per-replica peak RSS (VmHWM since start) and CPU-seconds since start;
//! 4. shards only: `kill -9` of one shard, then the time until the two others hold all 64
//!    buckets (the handover, bounded below by the 15 s lease duration);
//! 5. every process stopped and checked gone.
//!
//! Bytes to ready: kube-apiserver's own count of what it wrote for Deployments, ReplicaSets
//! and Pods, on watches (`apiserver_watch_events_sizes_sum`, every event of a list streamed
//! through a watch included, which is how our informers list; uncompressed, and our client
//! asks for no compression) and in LIST responses (`apiserver_response_sizes_sum`), from
//! before the spawn to ready. The counters are the whole server's: each side starts only once
//! they stood still for 2 s (the previous rollout's Pods gone), and a write to those resources
//! between the spawn and ready (which every watcher of them is then sent) is counted from
//! `apiserver_request_total` and shown beside the figure. /proc/<pid>/io would not do: it does
//! not count socket reads made with recv(2).

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Namespace;
use kctrl_client::{Api, Client, ListParams, Patch, PatchParams, PostParams};
use kctrl_cluster::plane::{ClusterInfo, UpOptions};
use xtask_contender::args::KubeVersionArg;
use xtask_contender::fresh::{self, Fresh};
use xtask_contender::parse;
use xtask_contender::probe::{curl, free_port, process_cpu};
use xtask_contender::supervisor::{self, ControllerProcess, Launch};
use xtask_contender::{Contender, rbac};

use xtask_report::machine::Machine;

use self::report::{markdown, report};
use self::traffic::{Traffic, apiserver_traffic, quiet_traffic};
use crate::kube::rollout_state;

mod report;
mod traffic;
use crate::kube::{Gate, namespace_names};

/// Shards of the sharded side.
const SHARDS: usize = 3;
/// The member Leases' namespace: deploy/sharded/'s.
const LEASE_NAMESPACE: &str = "kctrl-shards";
/// Buckets of the group (the binary's default).
const BUCKETS: usize = 64;
/// Client QPS / burst of every replica measured (kube-controller-manager's defaults).
const QPS: (u32, u32) = (20, 30);
/// Client QPS / burst of the one replica that rolls the set-up out (not measured).
const SETUP_QPS: (u32, u32) = (400, 600);
/// Requests the driver keeps in flight while it creates or changes the Deployments.
const DRIVER_CONCURRENCY: usize = 16;
/// Client QPS / burst of the cluster's kube-controller-manager: out of the way.
const CLUSTER_KCM_QPS: (u32, u32) = (200, 400);

/// Arguments of `cargo xtask bench shard`.
#[derive(clap::Args)]
pub(crate) struct ShardArgs {
    /// Deployments in the cluster (default 300; 30 with --quick).
    #[arg(long)]
    deployments: Option<usize>,
    /// Deployments each rollout changes: the first N, spread over the namespaces (default:
    /// all). At the density of issue [scale] a rollout of all at QPS 20 takes most of an hour.
    #[arg(long)]
    rollout: Option<usize>,
    /// Pods per Deployment.
    #[arg(long, default_value_t = 4)]
    replicas: i32,
    /// Namespaces the Deployments are spread over (default 30; 6 with --quick).
    #[arg(long)]
    namespaces: Option<usize>,
    /// Rounds; each runs both sides once, alternating which goes first (default 2; 1 with
    /// --quick).
    #[arg(long)]
    rounds: Option<usize>,
    /// kube-apiserver's ShardedListAndWatch gate: `on`, `off` (the shards filter on their
    /// side) or `both` (a cluster each).
    #[arg(long, value_enum, default_value = "on")]
    gate: Gate,
    /// Small sizes and one round: a smoke run, not numbers to publish (not written to the
    /// docs).
    #[arg(long)]
    quick: bool,
    /// Give up when a step takes longer than this many seconds.
    #[arg(long, default_value_t = 1800)]
    step_timeout_secs: u64,
    /// Cluster name (see `cargo xtask cluster`); `-on`/`-off` is appended.
    #[arg(long, default_value = "bench-shard")]
    name: String,
    /// Leave the cluster running at the end.
    #[arg(long)]
    keep: bool,
    /// Do not rewrite docs/benchmarks/shard.md.
    #[arg(long)]
    no_doc: bool,
    /// Kubernetes release of the cluster.
    #[command(flatten)]
    kube: KubeVersionArg,
}

/// One side of the comparison.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Side {
    /// One replica, no sharding (leader election off).
    Single,
    /// [`SHARDS`] replicas with `--shard-by=namespace`.
    Sharded,
}

impl Side {
    fn replicas(self) -> usize {
        match self {
            Side::Single => 1,
            Side::Sharded => SHARDS,
        }
    }

    fn title(self) -> String {
        match self {
            Side::Single => "1 replica".to_owned(),
            Side::Sharded => format!("{SHARDS} shards"),
        }
    }

    /// The order of round `round`: the single replica first in even rounds.
    fn order(round: usize) -> [Side; 2] {
        if round.is_multiple_of(2) {
            [Side::Single, Side::Sharded]
        } else {
            [Side::Sharded, Side::Single]
        }
    }
}

/// What one side measured in one round.
#[derive(Clone, Debug)]
struct Run {
    gate: bool,
    side: Side,
    /// Seconds from the spawn to ready (synced; sharded: all buckets active).
    ready: f64,
    /// Seconds from the first template change to every Deployment complete.
    rollout: f64,
    /// Per replica: VmHWM, bytes.
    peak_rss: Vec<f64>,
    /// Per replica: CPU-seconds since the spawn (start-up and rollout).
    cpu: Vec<f64>,
    /// Sharded: seconds from the kill to the two others holding every bucket.
    handover: Option<f64>,
    /// Bytes kube-apiserver wrote for the workload resources (watch events and LIST
    /// responses) from before the spawn to ready, all replicas together.
    bytes_to_ready: f64,
    /// Writes to those resources by any client from before the spawn to ready: each was sent
    /// to every watcher of its resource, counted in `bytes_to_ready` too (0 in a clean run).
    writes_to_ready: f64,
}

impl Run {
    fn max_peak_rss(&self) -> f64 {
        self.peak_rss.iter().copied().fold(0.0, f64::max)
    }

    fn max_cpu(&self) -> f64 {
        self.cpu.iter().copied().fold(0.0, f64::max)
    }
}

/// The cluster and what the measurement needs of it.
struct Env<'a> {
    info: ClusterInfo,
    binary: &'a Path,
    admin: Client,
    dir: PathBuf,
    ticks: u64,
    timeout: Duration,
    /// (namespace, name) of every Deployment.
    deployments: Vec<(String, String)>,
    /// Deployments a rollout changes (the first of `deployments`).
    rollout: usize,
    replicas: i32,
}

pub(crate) fn run(args: ShardArgs) -> Result<()> {
    let deployments = args
        .deployments
        .unwrap_or(if args.quick { 30 } else { 300 });
    let namespaces = args.namespaces.unwrap_or(if args.quick { 6 } else { 30 });
    let rounds = args.rounds.unwrap_or(if args.quick { 1 } else { 2 }).max(1);
    if deployments == 0 || namespaces == 0 || args.replicas <= 0 {
        bail!("--deployments, --namespaces and --replicas must be positive");
    }
    if namespaces > deployments {
        bail!("--namespaces {namespaces}: more than the {deployments} Deployments");
    }
    let rollout = args.rollout.unwrap_or(deployments);
    if rollout == 0 || rollout > deployments {
        bail!("--rollout {rollout}: give 1 to the {deployments} Deployments");
    }
    let binary = supervisor::build_dist()?;
    let machine = Machine::detect(args.kube.release.kubernetes);
    let dir = crate::workspace_root().join("target/kctrl-bench-shard");
    fs::create_dir_all(&dir)?;
    let mut runs = Vec::new();
    let mut result = Ok(());
    for gate in args.gate.settings() {
        let name = format!("{}-{}", args.name, if gate { "on" } else { "off" });
        let outcome = one_cluster(
            &args,
            &name,
            gate,
            &binary,
            &dir,
            (deployments, namespaces, rounds, rollout),
            &mut runs,
        );
        fresh::down_unless_kept(&name, args.keep);
        if let Err(e) = outcome {
            result = Err(e);
            break;
        }
    }
    let machine = machine.finish();
    if runs.is_empty() {
        return result;
    }
    let settings = format!(
        "{deployments} Deployments x {} Pods in {namespaces} namespaces, {rounds} round(s), \
         each rollout changing {rolled}; every replica QPS {}/burst {}, 5 concurrent syncs",
        args.replicas,
        QPS.0,
        QPS.1,
        rolled = if rollout == deployments {
            "all".to_owned()
        } else {
            format!("{rollout} (one per namespace first)")
        }
    );
    let tables = report(&runs, (rollout, deployments));
    println!("{settings}\n\n{tables}");
    if let Err(e) = &result {
        eprintln!("(incomplete: {e:#}; not written to the docs)");
    } else if args.quick {
        eprintln!("(a --quick run: not written to the docs)");
    } else if !args.no_doc {
        let doc = crate::workspace_root().join("docs/benchmarks/shard.md");
        let existing = fs::read_to_string(&doc).unwrap_or_default();
        fs::write(&doc, markdown(&settings, &tables, &machine, &existing))
            .with_context(|| format!("writing {}", doc.display()))?;
        eprintln!("wrote {}", doc.display());
    }
    result
}

/// One cluster with the gate `gate`: the set-up, then `rounds` rounds of both sides.
fn one_cluster(
    args: &ShardArgs,
    name: &str,
    gate: bool,
    binary: &Path,
    dir: &Path,
    (deployments, namespaces, rounds, rollout): (usize, usize, usize, usize),
    runs: &mut Vec<Run>,
) -> Result<()> {
    let pods = deployments * args.replicas as usize * 2 + 100;
    let nodes = pods.div_ceil(110).max(3);
    eprintln!("==> cluster '{name}': ShardedListAndWatch={gate}, {nodes} KWOK nodes");
    let cluster = fresh::start(
        &UpOptions {
            name: name.to_owned(),
            nodes,
            apiserver_args: Vec::new(),
            feature_gates: vec![format!("ShardedListAndWatch={gate}")],
            // Binding the set-up's Pods (15,000 at 3,000 Deployments x 5) at kube-scheduler's
            // default QPS 50 would set its pace, and a rollout's too.
            scheduler_args: vec![
                format!("--kube-api-qps={}", CLUSTER_KCM_QPS.0),
                format!("--kube-api-burst={}", CLUSTER_KCM_QPS.1),
            ],
            controller_manager_args: vec![
                format!("--kube-api-qps={}", CLUSTER_KCM_QPS.0),
                format!("--kube-api-burst={}", CLUSTER_KCM_QPS.1),
            ],
            deployment_controller: false,
            replicaset_controller: true,
            release: args.kube.release,
        },
        Fresh {
            reaper_pid_file: None,
            keep_on_failure: args.keep,
        },
    )?;
    let info = cluster.info.clone();
    cluster.dismiss();
    rbac::grant_sharded_rbac(&info.kubectl, &info.admin_kubeconfig)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let mut env = Env {
            admin: admin_client(&info)?,
            info,
            binary,
            dir: dir.join(if gate { "gate-on" } else { "gate-off" }),
            ticks: xtask_contender::probe::clock_ticks(),
            timeout: Duration::from_secs(args.step_timeout_secs),
            deployments: Vec::new(),
            rollout,
            replicas: args.replicas,
        };
        fs::create_dir_all(&env.dir)?;
        set_up(&mut env, deployments, namespaces).await?;
        for round in 0..rounds {
            for side in Side::order(round) {
                eprintln!("==> round {}, {}", round + 1, side.title());
                let run = measure(&env, gate, side, &format!("r{round}")).await?;
                eprintln!(
                    "    ready {:.1} s ({:.1} MiB sent), rollout {:.1} s, peak RSS {:.0} MiB, CPU {:.1} s{}",
                    run.ready,
                    run.bytes_to_ready / 1048576.0,
                    run.rollout,
                    run.max_peak_rss() / 1048576.0,
                    run.max_cpu(),
                    run.handover
                        .map(|h| format!(", handover {h:.1} s"))
                        .unwrap_or_default()
                );
                runs.push(run);
            }
        }
        Ok(())
    })
}

/// The driver's client: the cluster's admin, not rate limited.
fn admin_client(info: &ClusterInfo) -> Result<Client> {
    let mut config =
        kctrl_config::Config::from_flags(Some(&info.admin_kubeconfig), None, &Default::default())
            .context("loading the admin kubeconfig")?;
    config.qps = -1.0;
    Ok(Client::try_from_config(config)?)
}

/// Creates the namespaces and Deployments and rolls them out with one replica of raised
/// limits; records them in `env`.
async fn set_up(env: &mut Env<'_>, deployments: usize, namespaces: usize) -> Result<()> {
    let started = Instant::now();
    let mut rng = fastrand::Rng::with_seed(5866);
    let names = namespace_names(&mut rng, namespaces);
    let ns_api = Api::<Namespace>::all(env.admin.clone());
    for ns in &names {
        let object: Namespace =
            serde_json::from_value(serde_json::json!({"metadata": {"name": ns}}))?;
        ns_api.create(&PostParams::default(), &object).await?;
    }
    env.deployments = (0..deployments)
        .map(|i| (names[i % names.len()].clone(), format!("d-{i:04}")))
        .collect();
    let (admin, all, replicas) = (env.admin.clone(), env.deployments.clone(), env.replicas);
    for_each(deployments, move |i| {
        let (admin, (ns, name)) = (admin.clone(), all[i].clone());
        async move {
            let d: Deployment = serde_json::from_value(serde_json::json!({
                "metadata": {"name": name, "namespace": ns, "labels": {"app": name}},
                "spec": {
                    "replicas": replicas,
                    "selector": {"matchLabels": {"app": name}},
                    "template": {
                        "metadata": {"labels": {"app": name}},
                        "spec": {"containers": [{"name": "app", "image": "registry.k8s.io/pause:a"}]},
                    },
                },
            }))?;
            Api::<Deployment>::namespaced(admin, &ns)
                .create(&PostParams::default(), &d)
                .await
                .with_context(|| format!("creating Deployment {ns}/{name}"))?;
            Ok(())
        }
    })
    .await?;
    let mut setup = spawn(env, "setup", None, SETUP_QPS)?;
    let rolled = wait_complete(env, Instant::now(), &mut [&mut setup]).await;
    stop_all(vec![setup])?;
    rolled?;
    eprintln!(
        "==> set-up: {deployments} Deployments x {} Pods in {namespaces} namespaces complete in {:.0} s",
        env.replicas,
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// A replica of ours: its process and the port of its /metrics.
struct Replica {
    process: ControllerProcess,
    port: u16,
}

/// Starts one replica (`shard`: its index among the shards), logging to `<tag>.log`.
fn spawn(env: &Env<'_>, tag: &str, shard: Option<usize>, qps: (u32, u32)) -> Result<Replica> {
    let port = free_port()?;
    let mut args = vec![
        format!("--kubeconfig={}", env.info.controller_kubeconfig.display()),
        format!(
            "--authorization-always-allow-paths={}",
            supervisor::ALWAYS_ALLOW_PATHS
        ),
        "--concurrent-deployment-syncs=5".to_owned(),
        format!("--kube-api-qps={}", qps.0),
        format!("--kube-api-burst={}", qps.1),
        "--bind-address=127.0.0.1".to_owned(),
        format!("--secure-port={port}"),
    ];
    let tag = match shard {
        Some(i) => {
            args.push("--shard-by=namespace".to_owned());
            args.push(format!("--shard-lease-namespace={LEASE_NAMESPACE}"));
            format!("{tag}-shard-{i}")
        }
        None => {
            args.push("--leader-elect=false".to_owned());
            tag.to_owned()
        }
    };
    let log = env.dir.join(format!("{tag}.log"));
    let _ = fs::remove_file(&log);
    let process = ControllerProcess::spawn(&Launch {
        binary: env.binary,
        args: &args,
        env: &[],
        log: &log,
        contender: Contender::Ours,
        label: &format!("deployment-controller {tag}"),
    })?;
    Ok(Replica { process, port })
}

/// SIGTERM to each (SIGKILL after the grace period); checks that each is gone.
fn stop_all(replicas: Vec<Replica>) -> Result<()> {
    let mut first = Ok(());
    for r in replicas {
        let pid = r.process.pid();
        let stopped = r.process.stop_within(supervisor::STOP_GRACE).map(|_| ());
        if Path::new(&format!("/proc/{pid}")).exists() && !zombie(pid) {
            stopped.and(Err(anyhow::anyhow!("pid {pid} is still there")))?;
        } else if first.is_ok() {
            first = stopped;
        }
    }
    first
}

fn zombie(pid: u32) -> bool {
    fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| s.contains(") Z "))
}

/// The value of `shard_member_buckets` a replica reports, `None` if unreadable.
fn held_buckets(r: &Replica) -> Option<usize> {
    member_gauges(r).map(|g| g.buckets)
}

/// A replica's shard gauges, from one scrape of its /metrics.
struct MemberGauges {
    /// `shard_members`: live members it sees, itself included.
    members: usize,
    /// `shard_member_ready`: 1 while ready.
    ready: usize,
    /// `shard_member_buckets`: buckets it holds active.
    buckets: usize,
}

/// [`MemberGauges`] of replica `r`, `None` if its /metrics is unreadable or lacks one.
fn member_gauges(r: &Replica) -> Option<MemberGauges> {
    let text = curl(&format!("https://127.0.0.1:{}/metrics", r.port)).ok()?;
    let gauge = |name: &str| {
        parse::parse_samples(&text, name)
            .ok()?
            .first()
            .map(|s| s.value as usize)
    };
    Some(MemberGauges {
        members: gauge("shard_members")?,
        ready: gauge("shard_member_ready")?,
        buckets: gauge("shard_member_buckets")?,
    })
}

/// Fails with the exit message of the first replica that exited.
fn check_alive(replicas: &mut [&mut Replica]) -> Result<()> {
    for r in replicas.iter_mut() {
        if let Some(why) = r.process.exit_message() {
            bail!(why);
        }
    }
    Ok(())
}

/// Waits until every Deployment is complete; fails if a replica exits.
async fn wait_complete(
    env: &Env<'_>,
    started: Instant,
    replicas: &mut [&mut Replica],
) -> Result<f64> {
    let all = Api::<Deployment>::all(env.admin.clone());
    let n = env.deployments.len();
    let mut last_report = Instant::now();
    loop {
        let list = all.list(&ListParams::default()).await?;
        let done = list
            .items
            .iter()
            .filter(|d| rollout_state(d).complete(env.replicas))
            .count();
        if done >= n {
            return Ok(started.elapsed().as_secs_f64());
        }
        check_alive(replicas)?;
        if started.elapsed() > env.timeout {
            bail!(
                "only {done}/{n} Deployments complete after {:?}",
                env.timeout
            );
        }
        if last_report.elapsed() > Duration::from_secs(30) {
            eprintln!(
                "    {done}/{n} complete after {:.0} s",
                started.elapsed().as_secs_f64()
            );
            last_report = Instant::now();
        }
        tokio::time::sleep(poll_interval(n)).await;
    }
}

/// How often [`wait_complete`] lists every Deployment: every 500 ms up to 1,000 of them, then
/// half a second more per 1,000 (a LIST of 3,000 full Deployments twice a second would load
/// the apiserver the measured replicas share).
fn poll_interval(deployments: usize) -> Duration {
    Duration::from_millis(500 * deployments.div_ceil(1000).max(1) as u64)
}

/// Waits until `replicas` are ready: synced, and sharded, holding every bucket between them.
async fn wait_ready(env: &Env<'_>, side: Side, replicas: &mut [Replica]) -> Result<f64> {
    let spawned = replicas
        .iter()
        .map(|r| r.process.spawned_at())
        .min()
        .unwrap_or_else(Instant::now);
    loop {
        let synced = replicas.iter().all(|r| r.process.synced());
        let ready = synced
            && match side {
                Side::Single => true,
                Side::Sharded => {
                    let gauges: Option<Vec<MemberGauges>> =
                        replicas.iter().map(member_gauges).collect();
                    gauges.is_some_and(|g| {
                        g.iter().all(|m| m.members == SHARDS && m.ready == 1)
                            && g.iter().map(|m| m.buckets).sum::<usize>() == BUCKETS
                    })
                }
            };
        if ready {
            return Ok(spawned.elapsed().as_secs_f64());
        }
        let mut refs: Vec<&mut Replica> = replicas.iter_mut().collect();
        check_alive(&mut refs)?;
        if spawned.elapsed() > env.timeout {
            bail!("{} not ready after {:?}", side.title(), env.timeout);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Runs `f(i)` for `i in 0..count`, [`DRIVER_CONCURRENCY`] at a time; the first error ends
/// it.
async fn for_each<F, Fut>(count: usize, f: F) -> Result<()>
where
    F: Fn(usize) -> Fut,
    Fut: std::future::Future<Output = Result<()>>,
{
    use futures::StreamExt;
    let mut results = futures::stream::iter(0..count)
        .map(f)
        .buffer_unordered(DRIVER_CONCURRENCY);
    while let Some(result) = results.next().await {
        result?;
    }
    Ok(())
}

/// Changes the template of the first `env.rollout` Deployments (unthrottled).
async fn roll_all(env: &Env<'_>, tag: &str) -> Result<()> {
    let patch = serde_json::json!({"spec": {"template": {"metadata": {"annotations": {
        "bench.kctrl.io/round": tag
    }}}}});
    let (admin, all) = (env.admin.clone(), env.deployments.clone());
    let patch = std::sync::Arc::new(Patch::Merge(patch));
    for_each(env.rollout, move |i| {
        let (admin, (ns, name), patch) = (admin.clone(), all[i].clone(), patch.clone());
        async move {
            Api::<Deployment>::namespaced(admin, &ns)
                .patch(&name, &PatchParams::default(), &patch)
                .await
                .with_context(|| format!("patching Deployment {ns}/{name}"))?;
            Ok(())
        }
    })
    .await
}

/// One side, once: start, ready, rollout, readings, (sharded) a kill and its handover, stop.
async fn measure(env: &Env<'_>, gate: bool, side: Side, round: &str) -> Result<Run> {
    xtask_contender::fresh::ensure_none(&env.info)?;
    let tag = format!(
        "{round}-{}",
        if side == Side::Single {
            "single"
        } else {
            "sharded"
        }
    );
    let before = quiet_traffic(&env.info).await?;
    let mut replicas = Vec::new();
    for i in 0..side.replicas() {
        let shard = (side == Side::Sharded).then_some(i);
        match spawn(env, &tag, shard, QPS) {
            Ok(r) => replicas.push(r),
            Err(e) => {
                stop_all(replicas)?;
                return Err(e);
            }
        }
    }
    let result = measure_running(env, (gate, before), side, &tag, &mut replicas).await;
    let stopped = stop_all(replicas);
    let run = result?;
    stopped?;
    Ok(run)
}

async fn measure_running(
    env: &Env<'_>,
    (gate, before): (bool, Traffic),
    side: Side,
    tag: &str,
    replicas: &mut Vec<Replica>,
) -> Result<Run> {
    let ready = wait_ready(env, side, replicas).await?;
    let after = apiserver_traffic(&env.info)?;
    let (bytes_to_ready, writes_to_ready) =
        (after.bytes - before.bytes, after.writes - before.writes);
    if writes_to_ready > 0.0 {
        eprintln!(
            "    note: {writes_to_ready} write(s) to Deployments, ReplicaSets or Pods before ready; \
             what they sent every watcher is in the bytes"
        );
    }
    let started = Instant::now();
    roll_all(env, tag).await?;
    let mut refs: Vec<&mut Replica> = replicas.iter_mut().collect();
    let rollout = wait_complete(env, started, &mut refs).await?;
    let mut peak_rss = Vec::new();
    let mut cpu = Vec::new();
    for r in replicas.iter() {
        let pid = r.process.pid();
        let status = fs::read_to_string(format!("/proc/{pid}/status"))
            .with_context(|| format!("reading /proc/{pid}/status"))?;
        peak_rss.push(parse::parse_status(&status)?.peak as f64);
        cpu.push(process_cpu(pid)?.seconds(env.ticks));
    }
    let handover = match side {
        Side::Single => None,
        Side::Sharded => Some(kill_one(replicas).await?),
    };
    Ok(Run {
        gate,
        side,
        ready,
        rollout,
        peak_rss,
        cpu,
        handover,
        bytes_to_ready,
        writes_to_ready,
    })
}

/// `kill -9` of the first shard; seconds until the others hold every bucket.
async fn kill_one(replicas: &mut Vec<Replica>) -> Result<f64> {
    let victim = replicas.remove(0);
    let pid = victim.process.pid();
    let killed = Instant::now();
    victim.process.kill()?;
    eprintln!("    killed shard pid {pid} (SIGKILL)");
    loop {
        let held: Vec<Option<usize>> = replicas.iter().map(held_buckets).collect();
        if held.iter().flatten().sum::<usize>() == BUCKETS {
            return Ok(killed.elapsed().as_secs_f64());
        }
        let mut refs: Vec<&mut Replica> = replicas.iter_mut().collect();
        check_alive(&mut refs)?;
        if killed.elapsed() > Duration::from_secs(120) {
            bail!("after a kill, the other shards hold {held:?} of {BUCKETS} buckets after 120 s");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sides_alternate_by_round() {
        assert_eq!(Side::order(0), [Side::Single, Side::Sharded]);
        assert_eq!(Side::order(1), [Side::Sharded, Side::Single]);
    }

    #[test]
    fn arguments_parse() {
        use clap::Parser;
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            args: ShardArgs,
        }
        let cli = Cli::try_parse_from(["x", "--deployments", "90", "--gate", "both"]).unwrap();
        assert_eq!(cli.args.deployments, Some(90));
        assert_eq!(cli.args.gate, Gate::Both);
        assert_eq!(cli.args.name, "bench-shard");
        assert!(Cli::try_parse_from(["x", "--gate", "maybe"]).is_err());
        let cli = Cli::try_parse_from(["x", "--rollout", "300"]).unwrap();
        assert_eq!(cli.args.rollout, Some(300));
    }

    #[test]
    fn large_sets_are_polled_less_often() {
        assert_eq!(poll_interval(300), Duration::from_millis(500));
        assert_eq!(poll_interval(1000), Duration::from_millis(500));
        assert_eq!(poll_interval(3000), Duration::from_millis(1500));
    }
}

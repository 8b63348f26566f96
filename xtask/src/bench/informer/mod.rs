//! `cargo xtask bench informer`: kctrl-informer against client-go's SharedInformer and kube-rs's
//! watcher + reflector store, all against one local control plane (`cargo xtask cluster`).
//!
//! Three peer programs watch the pods of one namespace and print JSON lines ([`Line`]): the Go
//! one in bench/informer-go (client-go pinned in its go.mod), the kube-rs one in
//! bench/informer-kube-rs (its own Cargo project and lock file), and ours, [`peer`], a hidden
//! subcommand of a release build of xtask itself. The driver creates the pods once per size
//! (gated with a scheduling gate so nothing else touches them), runs every peer in both
//! variants (dropping managedFields, or not) several times in rotating order, generates the
//! same update burst for each run, and reports medians with [`report`].

pub(crate) mod peer;
mod programs;
mod report;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kctrl_client::{Api, Client, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde::Deserialize;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{ChildStdout, Command};

use self::programs::*;
use kctrl_cluster::plane::{self, Component, Layout, UpOptions};
use xtask_contender::args::KubeVersionArg;

/// Label every benchmark pod carries.
const POD_LABEL: &str = "kctrl.bench/informer";
/// The scheduling gate that keeps the pods Pending and untouched by the scheduler and kwok.
const SCHEDULING_GATE: &str = "kctrl.bench/hold";
/// Concurrent requests of the driver's create and patch loads.
const CONCURRENCY: usize = 48;
/// Default of `--settle-ms`.
const DEFAULT_SETTLE_MS: u64 = 5000;
/// Namespace of the 0-pod baseline runs.
const EMPTY_NAMESPACE: &str = "kctrl-bench-informer-empty";

/// What a peer caches: the objects as listed, without `metadata.managedFields`, a typed view
/// (kctrl only) or metadata alone.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Variant {
    /// A transform drops `metadata.managedFields` before caching.
    Transform,
    /// Objects are cached as received.
    None,
    /// kctrl only: the Deployment and ReplicaSet controllers' `PodView` (metadata without
    /// managedFields, node name, phase, Ready conditions, restart counts); the decoder skips
    /// the rest. client-go and kube-rs have no
    /// typed views.
    View,
    /// kctrl only: the same view decoded from protobuf (`Api::protobuf`), as the
    /// deployment-controller binary reads Pods by default.
    ViewProtobuf,
    /// `PartialObjectMetadata` from the API server: client-go's metadatainformer, kube-rs's
    /// metadata_watcher, kctrl's metadata informer.
    Metadata,
    /// The same without `metadata.managedFields`, as kube-controller-manager runs its metadata
    /// informers: a transform in client-go and kube-rs, skipped while decoding in kctrl
    /// (`Api::without_managed_fields`).
    MetadataTransform,
}

impl Variant {
    const ALL: [Variant; 6] = [
        Variant::None,
        Variant::Transform,
        Variant::View,
        Variant::ViewProtobuf,
        Variant::Metadata,
        Variant::MetadataTransform,
    ];

    fn arg(self) -> &'static str {
        match self {
            Variant::Transform => "transform",
            Variant::None => "none",
            Variant::View => "view",
            Variant::ViewProtobuf => "view-protobuf",
            Variant::Metadata => "metadata",
            Variant::MetadataTransform => "metadata-transform",
        }
    }
}

/// The three programs compared.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Impl {
    Kctrl,
    /// client-go as it comes: its typed Pod client asks for protobuf.
    ClientGo,
    /// client-go told to speak JSON, the wire format of the two Rust programs.
    ClientGoJson,
    KubeRs,
}

impl Impl {
    const ALL: [Impl; 4] = [
        Impl::Kctrl,
        Impl::ClientGo,
        Impl::ClientGoJson,
        Impl::KubeRs,
    ];

    fn name(self) -> &'static str {
        match self {
            Impl::Kctrl => "kctrl",
            Impl::ClientGo => "client-go",
            Impl::ClientGoJson => "client-go (JSON)",
            Impl::KubeRs => "kube-rs",
        }
    }

    /// The name as a label value (the update burst's label records which run wrote it).
    fn slug(self) -> &'static str {
        match self {
            Impl::Kctrl => "kctrl",
            Impl::ClientGo => "client-go",
            Impl::ClientGoJson => "client-go-json",
            Impl::KubeRs => "kube-rs",
        }
    }

    /// Whether the program runs `variant`: views exist only in kctrl; client-go's metadata
    /// client always asks for protobuf, so the JSON column has no metadata run.
    fn supports(self, variant: Variant) -> bool {
        match variant {
            Variant::None | Variant::Transform => true,
            Variant::View | Variant::ViewProtobuf => self == Impl::Kctrl,
            Variant::Metadata | Variant::MetadataTransform => self != Impl::ClientGoJson,
        }
    }

    /// Arguments after the common protocol's six.
    fn extra_args(self) -> &'static [&'static str] {
        match self {
            Impl::ClientGo => &["protobuf"],
            Impl::ClientGoJson => &["json"],
            Impl::Kctrl | Impl::KubeRs => &[],
        }
    }
}

/// Arguments of `cargo xtask bench informer`.
#[derive(clap::Args)]
pub(crate) struct InformerArgs {
    /// Pod counts to measure, comma-separated (default 10000,50000; 1000,2000 with --quick).
    #[arg(long, value_delimiter = ',')]
    pods: Vec<usize>,
    /// Runs of each program and variant per size (default 3, or 1 with --quick).
    #[arg(long)]
    reps: Option<usize>,
    /// Pods patched in each run's update burst (default: all pods, at most 5000).
    #[arg(long)]
    updates: Option<usize>,
    /// Milliseconds between a peer's sync and its steady RSS reading.
    #[arg(long, default_value_t = DEFAULT_SETTLE_MS)]
    settle_ms: u64,
    /// Small sizes and one repetition: a smoke run, not numbers to publish.
    #[arg(long)]
    quick: bool,
    /// Cluster name (see `cargo xtask cluster`).
    #[arg(long, default_value = "bench")]
    name: String,
    /// Leave the cluster (and the last size's pods) running at the end.
    #[arg(long)]
    keep: bool,
    /// Do not rewrite docs/benchmarks/informer.md.
    #[arg(long)]
    no_doc: bool,
    /// Only these variants, comma-separated (default: all). A partial run prints its tables
    /// but leaves docs/benchmarks/informer.md alone.
    #[arg(long, value_enum, value_delimiter = ',')]
    variants: Vec<Variant>,
    /// Kubernetes release of the cluster.
    #[command(flatten)]
    kube: KubeVersionArg,
}

/// One JSON line of a peer.
#[derive(Deserialize, Debug, Default, Clone)]
struct Line {
    event: String,
    #[serde(default)]
    sync_ms: f64,
    #[serde(default)]
    objects: usize,
    #[serde(default)]
    rss_bytes: u64,
    #[serde(default)]
    hwm_bytes: u64,
    #[serde(default)]
    updates: u64,
    #[serde(default)]
    events_per_sec: f64,
}

/// What one run of one peer measured.
#[derive(Clone, Debug)]
pub(super) struct Run {
    implementation: Impl,
    variant: Variant,
    /// 0 for the baseline runs in the empty namespace.
    pods: usize,
    sync_ms: f64,
    /// VmHWM at the steady reading (peak of list + sync + settle).
    peak_rss: u64,
    /// VmRSS after the settle time.
    steady_rss: u64,
    /// The peer's CPU-seconds (user + system) from its start to synced.
    client_cpu_s: f64,
    /// The apiserver's CPU-seconds from the peer's start to synced (NaN when unknown).
    apiserver_cpu_s: f64,
    /// Handler update events per second during the burst (0 when there was no burst).
    events_per_sec: f64,
    /// Update events the handler counted.
    events: u64,
    /// Rate at which the driver's patches completed during this run's burst.
    patches_per_sec: f64,
}

/// Paths of the three peer programs.
struct Peers {
    kctrl: PathBuf,
    client_go: PathBuf,
    kube_rs: PathBuf,
}

impl Peers {
    fn command(&self, implementation: Impl) -> Command {
        match implementation {
            Impl::Kctrl => {
                let mut c = Command::new(&self.kctrl);
                c.args(["bench", "informer-peer"]);
                c
            }
            Impl::ClientGo | Impl::ClientGoJson => Command::new(&self.client_go),
            Impl::KubeRs => Command::new(&self.kube_rs),
        }
    }
}

fn target_dir(root: &Path) -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), PathBuf::from)
}

pub(crate) fn run(args: InformerArgs) -> Result<()> {
    let root = crate::workspace_root();
    let target = target_dir(&root);
    let sizes = if !args.pods.is_empty() {
        args.pods.clone()
    } else if args.quick {
        vec![1_000, 2_000]
    } else {
        vec![10_000, 50_000]
    };
    if sizes.contains(&0) {
        bail!("--pods: sizes must be positive (the 0-pod baseline is always measured)");
    }
    let reps = args.reps.unwrap_or(if args.quick { 1 } else { 3 }).max(1);

    let go_version = go_version()?;
    let cargo = cargo_program()?;
    eprintln!("building the client-go peer ({go_version})…");
    let client_go = build_go_peer(&root, &target)?;
    eprintln!("building the kube-rs peer (release, own lock file)…");
    let kube_rs = build_kube_rs_peer(&root, &target, &cargo)?;
    eprintln!("building the kctrl peer (release xtask)…");
    let kctrl = build_rust_peer(&root, &target, &cargo)?;
    let peers = Peers {
        kctrl,
        client_go,
        kube_rs,
    };

    eprintln!("starting cluster '{}'…", args.name);
    let info = plane::ensure_up(&UpOptions {
        feature_gates: Vec::new(),
        name: args.name.clone(),
        nodes: 1,
        apiserver_args: Vec::new(),
        scheduler_args: Vec::new(),
        controller_manager_args: Vec::new(),
        deployment_controller: false,
        replicaset_controller: true,
        release: args.kube.release,
    })?;
    let machine = report::Machine::detect(&root, go_version, &info.kubernetes_version)?;
    let kubeconfig = info.admin_kubeconfig.clone();

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let probe = CpuProbe {
        apiserver_pid: kctrl_cluster::process::read_pid_file(
            &Layout::new(&args.name).pid_file(Component::Apiserver),
        )
        .map(|r| r.pid),
        ticks_per_second: xtask_contender::probe::clock_ticks(),
    };
    let result = runtime.block_on(measure(&peers, &kubeconfig, &sizes, reps, &args, &probe));
    xtask_contender::fresh::down_unless_kept(&args.name, args.keep);
    let runs = result?;

    let table = report::summarize(&runs, &sizes);
    println!("{}", report::text_table(&table));
    if !args.variants.is_empty() {
        eprintln!("a run of some variants only: docs/benchmarks/informer.md left as it is");
    } else if !args.no_doc {
        let doc = root.join("docs/benchmarks/informer.md");
        std::fs::create_dir_all(doc.parent().expect("has a parent"))?;
        let settings = report::Settings {
            sizes: sizes.clone(),
            reps,
            quick: args.quick,
            settle_ms: args.settle_ms,
            updates: args.updates,
        };
        std::fs::write(&doc, report::markdown(&table, &machine, &settings))
            .with_context(|| format!("writing {}", doc.display()))?;
        eprintln!("wrote {}", doc.display());
    }
    Ok(())
}

async fn measure(
    peers: &Peers,
    kubeconfig: &Path,
    sizes: &[usize],
    reps: usize,
    args: &InformerArgs,
    probe: &CpuProbe,
) -> Result<Vec<Run>> {
    let mut config = kctrl_config::Config::from_flags(Some(kubeconfig), None, &Default::default())
        .context("loading the admin kubeconfig")?;
    config.qps = -1.0;
    let client = Client::try_from_config(config)?;
    let mut runs = Vec::new();

    // Baseline: the same programs with nothing to cache.
    crate::kube::ensure_namespace(&client, EMPTY_NAMESPACE, &[(POD_LABEL, "true")]).await?;
    for rep in 0..reps {
        for (implementation, variant) in rotation(rep, &args.variants) {
            eprintln!(
                "baseline {}/{reps}: {} ({}), 0 pods",
                rep + 1,
                implementation.name(),
                variant.arg()
            );
            let run = run_peer(
                peers,
                &client,
                kubeconfig,
                EMPTY_NAMESPACE,
                0,
                0,
                (implementation, variant),
                args.settle_ms,
                "",
                probe,
            )
            .await?;
            runs.push(run);
        }
    }

    for (index, &pods) in sizes.iter().enumerate() {
        let namespace = format!("kctrl-bench-informer-{pods}");
        crate::kube::ensure_namespace(&client, &namespace, &[(POD_LABEL, "true")]).await?;
        create_pods(&client, &namespace, pods).await?;
        let updates = args.updates.unwrap_or(5_000).min(pods);
        for rep in 0..reps {
            for (implementation, variant) in rotation(rep, &args.variants) {
                eprintln!(
                    "{pods} pods, repetition {}/{reps}: {} ({}), burst of {updates} updates",
                    rep + 1,
                    implementation.name(),
                    variant.arg()
                );
                let tag = format!("{rep}-{}-{}", implementation.slug(), variant.arg());
                let run = run_peer(
                    peers,
                    &client,
                    kubeconfig,
                    &namespace,
                    pods,
                    updates,
                    (implementation, variant),
                    args.settle_ms,
                    &tag,
                    probe,
                )
                .await?;
                eprintln!(
                    "  synced in {:.0} ms, peak {} MiB, steady {} MiB, {:.0} events/s (driver patched at {:.0}/s)",
                    run.sync_ms,
                    run.peak_rss >> 20,
                    run.steady_rss >> 20,
                    run.events_per_sec,
                    run.patches_per_sec
                );
                runs.push(run);
            }
        }
        let last = index + 1 == sizes.len();
        // The last size's namespace goes with the cluster, or stays with --keep.
        if !last {
            delete_namespace(&client, &namespace, true).await?;
        }
    }
    Ok(runs)
}

/// Every (program, variant) once, the program order rotated by repetition so that no program
/// always runs first or right after the pods were written. `only` restricts the variants
/// (empty: all).
fn rotation(rep: usize, only: &[Variant]) -> Vec<(Impl, Variant)> {
    let mut order = Vec::new();
    for variant in Variant::ALL {
        if !only.is_empty() && !only.contains(&variant) {
            continue;
        }
        for i in 0..Impl::ALL.len() {
            let implementation = Impl::ALL[(i + rep) % Impl::ALL.len()];
            if implementation.supports(variant) {
                order.push((implementation, variant));
            }
        }
    }
    if rep % 2 == 1 {
        order.reverse();
    }
    order
}

async fn delete_namespace(client: &Client, name: &str, wait: bool) -> Result<()> {
    let api = Api::<Namespace>::all(client.clone());
    eprintln!("deleting namespace {name}…");
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => {}
        Err(e) if e.is_not_found() => return Ok(()),
        Err(e) => bail!("deleting namespace {name}: {e}"),
    }
    if !wait {
        return Ok(());
    }
    let started = Instant::now();
    let pods = Api::<Pod>::namespaced(client.clone(), name);
    loop {
        match api.get(name).await {
            Err(e) if e.is_not_found() => break,
            _ => {}
        }
        if started.elapsed() > Duration::from_secs(900) {
            bail!("namespace {name} still exists 15 minutes after its deletion");
        }
        let left = pods
            .list(&ListParams {
                limit: Some(1),
                ..Default::default()
            })
            .await
            .ok()
            .and_then(|l| l.metadata.remaining_item_count.map(|n| n + 1))
            .unwrap_or(0);
        eprintln!(
            "  waiting for namespace {name} to go ({:.0} s, ~{left} pods left)",
            started.elapsed().as_secs_f64()
        );
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
    Ok(())
}

fn pod(namespace: &str, index: usize) -> Result<Pod> {
    Ok(serde_json::from_value(serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod_name(index),
            "namespace": namespace,
            "labels": {
                POD_LABEL: "true",
                "app.kubernetes.io/name": "bench",
                "pod-template-hash": "5d8f7c9b4",
            },
            "annotations": {"kctrl.bench/note": "created by cargo xtask bench informer"},
        },
        "spec": {
            "schedulingGates": [{"name": SCHEDULING_GATE}],
            "containers": [{
                "name": "app",
                "image": "registry.k8s.io/pause:3.10",
                "args": ["--port=8080", "--verbose"],
                "ports": [{"name": "http", "containerPort": 8080}],
                "env": [{"name": "MODE", "value": "bench"}, {"name": "INDEX", "value": index.to_string()}],
                "resources": {
                    "requests": {"cpu": "10m", "memory": "16Mi"},
                    "limits": {"memory": "32Mi"},
                },
                "readinessProbe": {"httpGet": {"path": "/healthz", "port": 8080}},
            }],
        },
    }))?)
}

fn pod_name(index: usize) -> String {
    format!("bench-{index:06}")
}

/// Runs `f(i)` for `i in 0..count` with [`CONCURRENCY`] requests in flight, printing progress.
async fn concurrently<F, Fut>(what: &str, count: usize, f: F) -> Result<Duration>
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<()>> + Send + 'static,
{
    let next = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicUsize::new(0));
    let f = Arc::new(f);
    let started = Instant::now();
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..CONCURRENCY.min(count.max(1)) {
        let (next, done, f) = (next.clone(), done.clone(), f.clone());
        workers.spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= count {
                    return Ok::<(), anyhow::Error>(());
                }
                f(i).await?;
                done.fetch_add(1, Ordering::Relaxed);
            }
        });
    }
    let progress = !what.is_empty();
    let mut tick = tokio::time::interval(Duration::from_secs(10));
    tick.tick().await;
    loop {
        tokio::select! {
            joined = workers.join_next() => match joined {
                None => break,
                Some(result) => {
                    if let Err(e) = result.map_err(anyhow::Error::from).and_then(|r| r) {
                        workers.abort_all();
                        return Err(e);
                    }
                }
            },
            _ = tick.tick(), if progress => {
                let n = done.load(Ordering::Relaxed);
                eprintln!(
                    "  {what}: {n}/{count} ({:.0}/s)",
                    n as f64 / started.elapsed().as_secs_f64()
                );
            }
        }
    }
    Ok(started.elapsed())
}

async fn create_pods(client: &Client, namespace: &str, count: usize) -> Result<()> {
    let api = Api::<Pod>::namespaced(client.clone(), namespace);
    let existing = count_pods(&api).await?;
    if existing == count {
        eprintln!("namespace {namespace} already holds {count} pods");
        return Ok(());
    }
    if existing != 0 {
        bail!("namespace {namespace} holds {existing} pods, not 0 or {count}: delete it and rerun");
    }
    eprintln!("creating {count} pods in {namespace}…");
    let ns = namespace.to_string();
    let elapsed = concurrently("created", count, move |i| {
        let api = api.clone();
        let ns = ns.clone();
        async move {
            let pod = pod(&ns, i)?;
            let mut attempt = 0;
            loop {
                match api.create(&PostParams::default(), &pod).await {
                    Ok(_) => return Ok(()),
                    Err(e) if e.is_already_exists() => return Ok(()),
                    // The namespace's default ServiceAccount may not exist yet (admission
                    // refuses pods until it does), and a loaded apiserver may time out.
                    Err(e) if attempt < 60 => {
                        attempt += 1;
                        if attempt == 1 && i == 0 {
                            eprintln!("  create failed ({e}); retrying");
                        }
                        tokio::time::sleep(Duration::from_millis(500)).await;
                    }
                    Err(e) => bail!("creating pod {}: {e}", pod_name(i)),
                }
            }
        }
    })
    .await?;
    eprintln!(
        "created {count} pods in {:.1} s ({:.0}/s)",
        elapsed.as_secs_f64(),
        count as f64 / elapsed.as_secs_f64()
    );
    let listed = count_pods(&Api::<Pod>::namespaced(client.clone(), namespace)).await?;
    if listed != count {
        bail!("namespace {namespace} holds {listed} pods after creating {count}");
    }
    Ok(())
}

async fn count_pods(api: &Api<Pod>) -> Result<usize> {
    let list = api
        .list(&ListParams {
            limit: Some(1),
            ..Default::default()
        })
        .await
        .context("listing pods")?;
    Ok(list.items.len() + list.metadata.remaining_item_count.unwrap_or(0).max(0) as usize)
}

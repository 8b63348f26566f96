//! `cargo xtask bench runtime`: kctrl-runtime's `Controller` beside kube-runtime's (kube 5.0.0),
//! alternating, each alone against one local control plane (`cargo xtask cluster`).
//!
//! Both peers reconcile the same custom resource, [`Widget`] (its CRD generated from our
//! derive and installed by the driver), in one namespace: each reconcile server-side-applies one
//! ConfigMap the Widget controls and then the Widget's status (`observedGeneration`), field
//! manager `kctrl-bench-runtime`, forced; both run [`DEFAULT_CONCURRENCY`] reconciles at once
//! (kube-runtime's default is unbounded, ours one), without client-side rate limits or resyncs.
//! Ours is bench/runtime-kctrl (package kctrl-bench-runtime, a workspace member built in
//! release); kube-rs's is bench/runtime-kube-rs, its own Cargo project and lock file.
//!
//! Per run, in a fresh namespace (the previous one deleted and gone first, so that no run shares
//! the apiserver with another's garbage): the driver creates N Widgets, starts the peer and
//! waits until every Widget is converged (status shows its generation, its ConfigMap holds its
//! revision); then changes every Widget's spec and waits again. It reads the peer's CPU-seconds
//! (`/proc/PID/stat`) and peak RSS (`VmHWM`) before telling it to stop, and counts the peer's
//! API requests in the apiserver's audit log by user agent. Tables in [`report`].

mod report;

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kctrl_client::crd::CustomResourceExt;
use kctrl_client::{Api, Client, ListParams, Patch, PatchParams, PostParams};
use kctrl_informer::{SharedInformerFactory, Store};
use serde::Deserialize;
use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::{ChildStdout, Command};

use kctrl_bench_runtime::{Configuration, Widget, WidgetSpec};
use kctrl_cluster::plane::{self, UpOptions};
use xtask_contender::args::KubeVersionArg;

/// Label of the benchmark's namespaces.
const NAMESPACE_LABEL: &str = "kctrl.bench/runtime";
/// Reconciles at once in both peers (default of `--concurrency`).
const DEFAULT_CONCURRENCY: usize = 16;
/// Requests in flight of the driver's creates and changes.
const DRIVER_CONCURRENCY: usize = 32;
/// The driver's user agent (its requests are not counted).
const DRIVER_USER_AGENT: &str = "kctrl-bench-runtime/driver";
/// The kube-rs peer's user agent (bench/runtime-kube-rs sets it).
const KUBE_RS_USER_AGENT: &str = "kctrl-bench-runtime/kube-rs";

/// Widgets per run unless `--objects` says otherwise.
const DEFAULT_OBJECTS: usize = 1_000;

/// Arguments of `cargo xtask bench runtime`.
#[derive(clap::Args)]
pub(crate) struct RuntimeArgs {
    /// Runs of each peer (default 3, or 1 with --quick).
    #[arg(long)]
    reps: Option<usize>,
    /// Widgets per run (default 1000, or 200 with --quick).
    #[arg(long)]
    objects: Option<usize>,
    /// Reconciles at once, the same in both peers.
    #[arg(long, default_value_t = DEFAULT_CONCURRENCY)]
    concurrency: usize,
    /// Seconds a phase may take before the run fails.
    #[arg(long, default_value_t = 600)]
    timeout_s: u64,
    /// Small size and one repetition: a smoke run, not numbers to publish (no report written).
    #[arg(long)]
    quick: bool,
    /// Cluster name (see `cargo xtask cluster`); started afresh with an audit log.
    #[arg(long, default_value = "bench-runtime")]
    name: String,
    /// Leave the cluster running at the end.
    #[arg(long)]
    keep: bool,
    /// How both peers build their controllers: `defaults` (each library as it comes; writes
    /// docs/benchmarks/runtime.md) or `lean` (the same caches on both sides, as documented for
    /// a controller that reads little: managedFields dropped, owned ConfigMaps cached as
    /// metadata only; writes docs/benchmarks/runtime-lean.md).
    #[arg(long, default_value = "defaults", value_parser = parse_configuration)]
    configuration: Configuration,
    /// Do not rewrite the report (docs/benchmarks/runtime.md or runtime-lean.md; with
    /// `--objects` other than 1000, runtime-<objects>.md or runtime-lean-<objects>.md).
    #[arg(long)]
    no_doc: bool,
    /// Kubernetes release of the cluster.
    #[command(flatten)]
    kube: KubeVersionArg,
}

fn parse_configuration(s: &str) -> Result<Configuration> {
    s.parse()
}

/// The two controllers compared.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Side {
    Kctrl,
    KubeRs,
}

impl Side {
    pub(super) fn name(self) -> &'static str {
        match self {
            Side::Kctrl => "kctrl-runtime",
            Side::KubeRs => "kube-runtime",
        }
    }

    fn slug(self) -> &'static str {
        match self {
            Side::Kctrl => "kctrl",
            Side::KubeRs => "kube-rs",
        }
    }

    fn user_agent(self) -> &'static str {
        match self {
            Side::Kctrl => kctrl_bench_runtime::USER_AGENT,
            Side::KubeRs => KUBE_RS_USER_AGENT,
        }
    }
}

/// What one run of one peer measured.
#[derive(Clone, Debug)]
pub(super) struct Run {
    pub(super) side: Side,
    pub(super) rep: usize,
    pub(super) objects: usize,
    /// Seconds from starting the peer to every Widget converged.
    pub(super) create_s: f64,
    /// Seconds from the first change to every Widget converged again.
    pub(super) change_s: f64,
    /// Seconds the driver took to send the changes.
    pub(super) patch_s: f64,
    /// Reconciles the peer ran, and how many of them failed.
    pub(super) reconciles: u64,
    pub(super) failures: u64,
    /// The peer's CPU-seconds (user + system) at the first convergence and at the end.
    pub(super) cpu_create_s: f64,
    pub(super) cpu_s: f64,
    /// VmHWM at the end.
    pub(super) peak_rss: u64,
    /// Of the resident set at the end (caches full), the anonymous part (heap, stacks) and
    /// the file-backed part (the binary and libraries mapped), in bytes.
    pub(super) rss_anon: u64,
    pub(super) rss_file: u64,
    /// The peer's requests in the audit log, by `verb resource[/subresource]`.
    pub(super) requests: BTreeMap<String, f64>,
}

/// One JSON line of a peer.
#[derive(Deserialize, Debug)]
struct Line {
    event: String,
    #[serde(default)]
    reconciles: u64,
    #[serde(default)]
    failures: u64,
}

fn target_dir(root: &Path) -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), PathBuf::from)
}

/// Audit policy: metadata of the requests of `system:masters` (the admin kubeconfig both peers
/// and the driver use; they differ by user agent), nothing else.
const AUDIT_POLICY: &str = "apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived, ResponseStarted]
rules:
- level: Metadata
  userGroups: [\"system:masters\"]
- level: None
";

pub(crate) fn run(args: RuntimeArgs) -> Result<()> {
    let root = crate::workspace_root();
    let target = target_dir(&root);
    let reps = args.reps.unwrap_or(if args.quick { 1 } else { 3 }).max(1);
    let objects = args
        .objects
        .unwrap_or(if args.quick { 200 } else { DEFAULT_OBJECTS })
        .max(1);
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    eprintln!("building the kube-rs peer (release, own lock file)…");
    let kube_rs = build_kube_rs_peer(&root, &target, &cargo)?;
    eprintln!("building the kctrl peer (release bench/runtime-kctrl)…");
    let kctrl = build_kctrl_peer(&root, &target, &cargo)?;

    let dir = target.join("kctrl-bench-runtime");
    fs::create_dir_all(&dir)?;
    let policy = dir.join("audit-policy.yaml");
    fs::write(&policy, AUDIT_POLICY)?;
    let audit_log = dir.join("audit.log");
    let _ = fs::remove_file(&audit_log);
    eprintln!("starting cluster '{}' afresh (audit log on)…", args.name);
    xtask_contender::fresh::down(&args.name)?;
    let up = plane::ensure_up(&UpOptions {
        feature_gates: Vec::new(),
        name: args.name.clone(),
        nodes: 1,
        apiserver_args: vec![
            format!("--audit-policy-file={}", policy.display()),
            format!("--audit-log-path={}", audit_log.display()),
            "--audit-log-format=json".into(),
            "--audit-log-maxsize=0".into(),
        ],
        scheduler_args: Vec::new(),
        // The garbage collector removes each run's ConfigMaps when its namespace goes: at the
        // default 20 QPS that alone would take 17 minutes at 20,000 objects.
        controller_manager_args: vec![
            format!("--kube-api-qps={}", CLUSTER_KCM_QPS.0),
            format!("--kube-api-burst={}", CLUSTER_KCM_QPS.1),
        ],
        deployment_controller: false,
        replicaset_controller: true,
        release: args.kube.release,
    });
    let info = match up {
        Ok(info) => info,
        Err(e) => {
            if !args.keep {
                let _ = xtask_contender::fresh::down(&args.name);
            }
            return Err(e);
        }
    };
    let machine = report::Machine::detect(&info.kubernetes_version);
    let env = Env {
        kctrl,
        kube_rs,
        kubeconfig: info.admin_kubeconfig.clone(),
        audit_log,
        objects,
        reps,
        concurrency: args.concurrency.max(1),
        configuration: args.configuration,
        timeout: Duration::from_secs(args.timeout_s),
        ticks_per_second: xtask_contender::probe::clock_ticks(),
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let result = runtime.block_on(measure(&env));
    if !args.keep {
        eprintln!(
            "stopping cluster '{}' (use --keep to leave it running)",
            args.name
        );
        if let Err(e) = xtask_contender::fresh::down(&args.name) {
            eprintln!("  stopping the cluster failed: {e:#}");
        }
    }
    let runs = result?;
    let settings = report::Settings {
        objects,
        reps,
        concurrency: env.concurrency,
        quick: args.quick,
        configuration: args.configuration,
    };
    let summary = report::summarize(&runs, args.configuration);
    println!("{}", report::text_table(&summary));
    if args.quick {
        eprintln!("(not written to the docs: a --quick smoke run)");
    } else if !args.no_doc {
        let doc = root.join(doc_path(args.configuration, objects));
        fs::write(&doc, report::markdown(&summary, &runs, &machine, &settings))
            .with_context(|| format!("writing {}", doc.display()))?;
        eprintln!("wrote {}", doc.display());
    }
    Ok(())
}

/// Client QPS / burst of the cluster's kube-controller-manager (its garbage collector deletes
/// the ConfigMaps of every finished run).
const CLUSTER_KCM_QPS: (u32, u32) = (500, 1000);

/// The report of `configuration` at `objects` Widgets per run: runtime.md or runtime-lean.md at
/// the default 1,000, runtime-<objects>.md or runtime-lean-<objects>.md at any other size, so
/// the reports of several sizes stand side by side.
fn doc_path(configuration: Configuration, objects: usize) -> String {
    let stem = match configuration {
        Configuration::Defaults => "runtime",
        Configuration::Lean => "runtime-lean",
    };
    if objects == DEFAULT_OBJECTS {
        format!("docs/benchmarks/{stem}.md")
    } else {
        format!("docs/benchmarks/{stem}-{objects}.md")
    }
}

/// What the measurements need.
struct Env {
    kctrl: PathBuf,
    kube_rs: PathBuf,
    kubeconfig: PathBuf,
    audit_log: PathBuf,
    objects: usize,
    reps: usize,
    concurrency: usize,
    configuration: Configuration,
    timeout: Duration,
    ticks_per_second: u64,
}

impl Env {
    fn command(&self, side: Side) -> Command {
        match side {
            Side::Kctrl => Command::new(&self.kctrl),
            Side::KubeRs => Command::new(&self.kube_rs),
        }
    }

    /// CPU-seconds `pid` has used so far.
    fn cpu_of(&self, pid: u32) -> Result<f64> {
        // Shared helper of `bench controller` (xtask layer restructuring re-points this use).
        Ok(xtask_contender::probe::process_cpu(pid)?.seconds(self.ticks_per_second))
    }
}

async fn measure(env: &Env) -> Result<Vec<Run>> {
    let mut config =
        kctrl_config::Config::from_flags(Some(&env.kubeconfig), None, &Default::default())
            .context("loading the admin kubeconfig")?;
    config.qps = -1.0;
    config.user_agent = Some(DRIVER_USER_AGENT.to_owned());
    let client = Client::try_from_config(config)?;
    install_crd(&client).await?;
    let mut runs = Vec::new();
    for rep in 0..env.reps {
        // Alternate which side goes first.
        let order = if rep % 2 == 0 {
            [Side::Kctrl, Side::KubeRs]
        } else {
            [Side::KubeRs, Side::Kctrl]
        };
        for side in order {
            eprintln!(
                "repetition {}/{}: {}, {} Widgets",
                rep + 1,
                env.reps,
                side.name(),
                env.objects
            );
            let run = run_once(env, &client, side, rep).await?;
            eprintln!(
                "  created: {:.2} s, changed: {:.2} s (driver sent the changes in {:.2} s), \
                 {} reconciles, {:.2} CPU-s, peak {} MiB, {} requests",
                run.create_s,
                run.change_s,
                run.patch_s,
                run.reconciles,
                run.cpu_s,
                run.peak_rss >> 20,
                run.requests.values().sum::<f64>()
            );
            runs.push(run);
        }
    }
    Ok(runs)
}

/// Creates (or replaces) the Widget CRD and waits until Widgets can be listed.
async fn install_crd(client: &Client) -> Result<()> {
    let crd = Widget::try_crd().map_err(|e| anyhow!("the Widget CRD: {e}"))?;
    let api = Api::<CustomResourceDefinition>::all(client.clone());
    match api.create(&PostParams::default(), &crd).await {
        Ok(_) => {}
        Err(e) if e.is_already_exists() => {}
        Err(e) => bail!("creating the Widget CRD: {e}"),
    }
    let widgets = Api::<Widget>::all(client.clone());
    let started = Instant::now();
    loop {
        if widgets
            .list(&ListParams {
                limit: Some(1),
                ..Default::default()
            })
            .await
            .is_ok()
        {
            return Ok(());
        }
        if started.elapsed() > Duration::from_secs(60) {
            bail!("Widgets cannot be listed 60 s after creating their CRD");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn widget_name(index: usize) -> String {
    format!("widget-{index:05}")
}

fn new_widget(index: usize) -> Widget {
    let mut widget = Widget::new(
        widget_name(index),
        WidgetSpec {
            revision: 1,
            payload: format!("payload of widget {index}"),
        },
    );
    widget.metadata.labels = Some([("kctrl.bench/index".to_owned(), index.to_string())].into());
    widget
}

/// Runs `f(i)` for `i in 0..count` with [`DRIVER_CONCURRENCY`] in flight.
async fn concurrently<F, Fut>(count: usize, f: F) -> Result<Duration>
where
    F: Fn(usize) -> Fut,
    Fut: std::future::Future<Output = Result<()>>,
{
    let started = Instant::now();
    futures::stream::iter(0..count)
        .map(f)
        .buffer_unordered(DRIVER_CONCURRENCY)
        .try_collect::<Vec<()>>()
        .await?;
    Ok(started.elapsed())
}

/// How many Widgets of `namespace` are at `revision` and converged: the status shows the
/// Widget's generation and its ConfigMap holds the revision.
fn converged(widgets: &Store<Widget>, config_maps: &Store<ConfigMap>, revision: i64) -> usize {
    let want = revision.to_string();
    widgets
        .list()
        .iter()
        .filter(|w| {
            w.spec.revision == revision
                && w.status
                    .as_ref()
                    .is_some_and(|s| Some(s.observed_generation) == w.metadata.generation)
                && w.metadata
                    .namespace
                    .as_deref()
                    .zip(w.metadata.name.as_deref())
                    .and_then(|(ns, name)| config_maps.get_namespaced(ns, name))
                    .is_some_and(|cm| {
                        cm.data.as_ref().and_then(|d| d.get("revision")) == Some(&want)
                    })
        })
        .count()
}

/// Waits until `want` Widgets are converged at `revision`; the seconds since `since`.
async fn wait_converged(
    widgets: &Store<Widget>,
    config_maps: &Store<ConfigMap>,
    revision: i64,
    want: usize,
    since: Instant,
    timeout: Duration,
) -> Result<f64> {
    let mut last_report = Instant::now();
    loop {
        let done = converged(widgets, config_maps, revision);
        if done >= want {
            return Ok(since.elapsed().as_secs_f64());
        }
        if since.elapsed() > timeout {
            bail!("{done}/{want} Widgets converged after {timeout:?}");
        }
        if last_report.elapsed() > Duration::from_secs(10) {
            eprintln!("  {done}/{want} converged");
            last_report = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn next_line(lines: &mut Lines<BufReader<ChildStdout>>, want: &str) -> Result<Line> {
    loop {
        let line = tokio::time::timeout(Duration::from_secs(120), lines.next_line())
            .await
            .map_err(|_| anyhow!("no `{want}` line from the peer within 2 minutes"))??
            .ok_or_else(|| anyhow!("the peer exited before its `{want}` line"))?;
        let Ok(parsed) = serde_json::from_str::<Line>(&line) else {
            eprintln!("  peer: {line}");
            continue;
        };
        if parsed.event == want {
            return Ok(parsed);
        }
        bail!("expected a `{want}` line from the peer, got {line}");
    }
}

/// The memory of `pid` from /proc/PID/status: peak RSS (`VmHWM`) and the resident set now
/// by kind (`RssAnon`: heap and stacks; `RssFile`: the binary and libraries), in bytes.
struct Memory {
    peak: u64,
    anon: u64,
    file: u64,
}

fn memory(pid: u32) -> Result<Memory> {
    let status = fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("reading /proc/{pid}/status"))?;
    status_memory(&status).with_context(|| format!("in /proc/{pid}/status"))
}

fn status_memory(status: &str) -> Result<Memory> {
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .and_then(|v| v.trim().strip_suffix("kB")?.trim().parse::<u64>().ok())
            .map(|kb| kb * 1024)
            .ok_or_else(|| anyhow!("no {name} in kB"))
    };
    Ok(Memory {
        peak: field("VmHWM")?,
        anon: field("RssAnon")?,
        file: field("RssFile")?,
    })
}

/// Requests with user agent `agent` in the JSON audit log `text`, keyed
/// `verb resource[/subresource]` (one `ResponseComplete` event per request).
fn tally_audit(text: &str, agent: &str) -> BTreeMap<String, f64> {
    let mut counts = BTreeMap::new();
    for line in text.lines() {
        // Cheap filter first: most lines are other clients'.
        if !line.contains(agent) {
            continue;
        }
        let Ok(event) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        if event["stage"] != "ResponseComplete" || event["userAgent"] != agent {
            continue;
        }
        let verb = event["verb"].as_str().unwrap_or("?");
        let resource = event["objectRef"]["resource"].as_str().unwrap_or("-");
        let key = match event["objectRef"]["subresource"].as_str() {
            Some(sub) if !sub.is_empty() => format!("{verb} {resource}/{sub}"),
            _ => format!("{verb} {resource}"),
        };
        *counts.entry(key).or_default() += 1.0;
    }
    counts
}

fn audit_len(path: &Path) -> u64 {
    fs::metadata(path).map(|m| m.len()).unwrap_or(0)
}

fn audit_since(path: &Path, from: u64, agent: &str) -> Result<BTreeMap<String, f64>> {
    use std::io::{Read, Seek, SeekFrom};
    let mut file = fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    file.seek(SeekFrom::Start(from))?;
    let mut text = String::new();
    file.read_to_string(&mut text)?;
    Ok(tally_audit(&text, agent))
}

async fn run_once(env: &Env, client: &Client, side: Side, rep: usize) -> Result<Run> {
    let namespace = format!("kctrl-bench-runtime-{rep}-{}", side.slug());
    crate::kube::delete_namespace(client, &namespace, Duration::from_secs(600)).await?;
    crate::kube::ensure_namespace(client, &namespace, &[(NAMESPACE_LABEL, "true")]).await?;
    let widgets = Api::<Widget>::namespaced(client.clone(), &namespace);
    let created = concurrently(env.objects, |i| {
        let widgets = widgets.clone();
        async move {
            let widget = new_widget(i);
            let mut attempt = 0;
            loop {
                match widgets.create(&PostParams::default(), &widget).await {
                    Ok(_) => return Ok(()),
                    Err(e) if e.is_already_exists() => return Ok(()),
                    Err(e) if attempt < 20 => {
                        attempt += 1;
                        if attempt == 1 && i == 0 {
                            eprintln!("  create failed ({e}); retrying");
                        }
                        tokio::time::sleep(Duration::from_millis(250)).await;
                    }
                    Err(e) => bail!("creating {}: {e}", widget_name(i)),
                }
            }
        }
    })
    .await?;
    eprintln!(
        "  created {} Widgets in {:.1} s",
        env.objects,
        created.as_secs_f64()
    );

    // The driver's own view: an informer of each kind in the namespace.
    let factory = SharedInformerFactory::builder(client.clone(), Duration::ZERO)
        .namespace(&namespace)
        .build();
    let widget_store = factory.informer::<Widget>().store().clone();
    let cm_store = factory.informer::<ConfigMap>().store().clone();
    let stop_informers = tokio_util::sync::CancellationToken::new();
    factory.start(&stop_informers);
    let synced = factory.informer::<Widget>();
    let cms = factory.informer::<ConfigMap>();
    if !(synced.synced().await && cms.synced().await) {
        bail!("the driver's informers did not sync");
    }
    // Let the apiserver and the driver's informers settle after the creates.
    tokio::time::sleep(Duration::from_secs(2)).await;

    let audit_from = audit_len(&env.audit_log);
    let mut command = env.command(side);
    command
        .arg(&env.kubeconfig)
        .arg(&namespace)
        .arg(env.concurrency.to_string())
        .arg(env.configuration.as_str())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true);
    let started = Instant::now();
    let mut child = command
        .spawn()
        .with_context(|| format!("starting the {} peer", side.name()))?;
    let pid = child.id().ok_or_else(|| anyhow!("the peer has no pid"))?;
    let stdin = child.stdin.take().expect("piped");
    let mut lines = BufReader::new(child.stdout.take().expect("piped")).lines();
    next_line(&mut lines, "started").await?;
    let create_s = wait_converged(
        &widget_store,
        &cm_store,
        1,
        env.objects,
        started,
        env.timeout,
    )
    .await?;
    let cpu_create_s = env.cpu_of(pid)?;

    // The change: every Widget's revision bumped, so its generation and its ConfigMap change.
    let change_started = Instant::now();
    let patch = Patch::Merge(serde_json::json!({"spec": {"revision": 2}}));
    let patch_d = concurrently(env.objects, |i| {
        let (widgets, patch) = (widgets.clone(), &patch);
        async move {
            widgets
                .patch(&widget_name(i), &PatchParams::default(), patch)
                .await
                .with_context(|| format!("changing {}", widget_name(i)))?;
            Ok(())
        }
    })
    .await?;
    let change_s = wait_converged(
        &widget_store,
        &cm_store,
        2,
        env.objects,
        change_started,
        env.timeout,
    )
    .await?;
    let cpu_s = env.cpu_of(pid)?;
    let memory = memory(pid)?;
    eprintln!(
        "  {} rep {rep}: VmHWM {} MiB, RssAnon {} MiB, RssFile {} MiB",
        side.name(),
        memory.peak >> 20,
        memory.anon >> 20,
        memory.file >> 20
    );

    drop(stdin);
    let done = next_line(&mut lines, "done").await?;
    match tokio::time::timeout(Duration::from_secs(30), child.wait()).await {
        Ok(status) => {
            let status = status?;
            if !status.success() {
                bail!("the {} peer failed ({status})", side.name());
            }
        }
        Err(_) => {
            eprintln!("  the {} peer did not exit; killing it", side.name());
            child.kill().await?;
        }
    }
    stop_informers.cancel();
    factory.shutdown().await;
    // Closed watches reach the audit log when the apiserver notices.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let requests = audit_since(&env.audit_log, audit_from, side.user_agent())?;
    crate::kube::delete_namespace(client, &namespace, Duration::from_secs(600)).await?;
    Ok(Run {
        side,
        rep,
        objects: env.objects,
        create_s,
        change_s,
        patch_s: patch_d.as_secs_f64(),
        reconciles: done.reconciles,
        failures: done.failures,
        cpu_create_s,
        cpu_s,
        peak_rss: memory.peak,
        rss_anon: memory.anon,
        rss_file: memory.file,
        requests,
    })
}

/// `nice -n 10 <program>`: builds share the machine with other work.
fn niced(program: &str) -> std::process::Command {
    let mut command = std::process::Command::new("nice");
    command.args(["-n", "10", program]);
    command
}

fn build_kube_rs_peer(root: &Path, target: &Path, cargo: &str) -> Result<PathBuf> {
    let target_dir = target.join("bench-kube-rs");
    let status = niced(cargo)
        .args([
            "build",
            "--release",
            "--quiet",
            "--locked",
            "--manifest-path",
        ])
        .arg(root.join("bench/runtime-kube-rs/Cargo.toml"))
        .arg("--target-dir")
        .arg(&target_dir)
        .current_dir(root)
        .status()
        .context("running cargo build")?;
    if !status.success() {
        bail!("release build of bench/runtime-kube-rs failed ({status})");
    }
    Ok(target_dir.join("release").join("runtime-kube-rs"))
}

fn build_kctrl_peer(root: &Path, target: &Path, cargo: &str) -> Result<PathBuf> {
    let status = niced(cargo)
        .args(["build", "--release", "--quiet", "-p", "kctrl-bench-runtime"])
        .current_dir(root)
        .status()
        .context("running cargo build")?;
    if !status.success() {
        bail!("release build of bench/runtime-kctrl failed ({status})");
    }
    Ok(target.join("release").join(format!(
        "kctrl-bench-runtime{}",
        std::env::consts::EXE_SUFFIX
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_is_read_from_proc_status_in_bytes() {
        let status = "Name:\tpeer\nVmHWM:\t   51200 kB\nVmRSS:\t   40960 kB\n\
                      RssAnon:\t   30720 kB\nRssFile:\t   10240 kB\nRssShmem:\t       0 kB\n";
        let m = status_memory(status).unwrap();
        assert_eq!((m.peak >> 20, m.anon >> 20, m.file >> 20), (50, 30, 10));
        // A kernel without the split says which field is missing.
        let err = status_memory("VmHWM:\t1 kB\n").err().unwrap();
        assert!(err.to_string().contains("RssAnon"), "{err}");
    }

    #[test]
    fn reports_of_other_sizes_get_their_own_file() {
        assert_eq!(
            doc_path(Configuration::Defaults, DEFAULT_OBJECTS),
            "docs/benchmarks/runtime.md"
        );
        assert_eq!(
            doc_path(Configuration::Lean, DEFAULT_OBJECTS),
            "docs/benchmarks/runtime-lean.md"
        );
        assert_eq!(
            doc_path(Configuration::Defaults, 20_000),
            "docs/benchmarks/runtime-20000.md"
        );
        assert_eq!(
            doc_path(Configuration::Lean, 5_000),
            "docs/benchmarks/runtime-lean-5000.md"
        );
    }
}

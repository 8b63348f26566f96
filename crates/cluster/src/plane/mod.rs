//! Starting, inspecting and stopping one local control plane: etcd, kube-apiserver,
//! kube-controller-manager (deployment controller disabled), kube-scheduler and the KWOK
//! controller, each a detached process supervised through pid files (see `process.rs`).
//!
//! Everything of cluster `<name>` lives in `target/kctrl-cluster/<name>/`:
//! `state.json` (ports, the release it runs and the cache its binaries come from), `pki/`,
//! `kubeconfig/`, `etcd-data/`, `manifests/`, `run/<component>.pid` and
//! `logs/<component>.log`. Commands on a running cluster (status, env, down, restarts) take the
//! release from `state.json`, whatever release a new `up` would choose.

use std::fs;
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use serde::{Deserialize, Serialize};

use crate::etcd;
use crate::pki::{self, Identity, Pki};
use crate::process::{self, ProcRecord};
use crate::stages;
use crate::toolchain::{Cache, fmt_duration};
use crate::versions::{Binary, Release, supported_list};

/// Namespace of the controller's identity.
pub const CONTROLLER_SA_NAMESPACE: &str = "kube-system";
/// Name of the controller's ServiceAccount. Deliberately *not* `deployment-controller`: the
/// apiserver's bootstrap RBAC policy binds `kube-system:deployment-controller` to
/// `system:controller:deployment-controller`, which would hide gaps in our own RBAC manifest.
pub const CONTROLLER_SA_NAME: &str = "kctrl-deployment-controller";

/// The cluster administrator (`system:masters`).
const ADMIN: Identity = Identity {
    file: "admin",
    user: "kctrl-admin",
    groups: &["system:masters"],
};
/// Our Deployment controller: a ServiceAccount identity with no RBAC grants yet.
const CONTROLLER: Identity = Identity {
    file: "deployment-controller",
    user: "system:serviceaccount:kube-system:kctrl-deployment-controller",
    groups: &[
        "system:serviceaccounts",
        "system:serviceaccounts:kube-system",
    ],
};
const KCM: Identity = Identity {
    file: "kube-controller-manager",
    user: "system:kube-controller-manager",
    groups: &[],
};
const SCHEDULER: Identity = Identity {
    file: "kube-scheduler",
    user: "system:kube-scheduler",
    groups: &[],
};
/// KWOK updates node and pod status, leases and events of fake nodes: full rights, as kwokctl does.
const KWOK: Identity = Identity {
    file: "kwok-controller",
    user: "kwok-controller",
    groups: &["system:masters"],
};
const IDENTITIES: [Identity; 5] = [ADMIN, CONTROLLER, KCM, SCHEDULER, KWOK];

/// Service CIDR (the serving certificate carries its first address, 10.0.0.1).
const SERVICE_CIDR: &str = "10.0.0.0/24";
/// Pod IPs handed out by KWOK.
const POD_CIDR: &str = "10.244.0.0/16";
/// Annotation KWOK manages nodes by.
const KWOK_NODE_ANNOTATION: &str = "kwok.x-k8s.io/node";

/// The processes of a cluster, in start order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Component {
    /// etcd.
    Etcd,
    /// kube-apiserver.
    Apiserver,
    /// kube-controller-manager.
    ControllerManager,
    /// kube-scheduler.
    Scheduler,
    /// KWOK controller.
    Kwok,
}

impl Component {
    /// Start order.
    pub const ALL: [Component; 5] = [
        Component::Etcd,
        Component::Apiserver,
        Component::ControllerManager,
        Component::Scheduler,
        Component::Kwok,
    ];

    /// Name used for the log and pid files.
    pub fn name(self) -> &'static str {
        match self {
            Component::Etcd => "etcd",
            Component::Apiserver => "kube-apiserver",
            Component::ControllerManager => "kube-controller-manager",
            Component::Scheduler => "kube-scheduler",
            Component::Kwok => "kwok-controller",
        }
    }

    /// The binary it runs.
    pub fn binary(self) -> Binary {
        match self {
            Component::Etcd => Binary::Etcd,
            Component::Apiserver => Binary::KubeApiserver,
            Component::ControllerManager => Binary::KubeControllerManager,
            Component::Scheduler => Binary::KubeScheduler,
            Component::Kwok => Binary::Kwok,
        }
    }

    fn port(self, p: &Ports) -> u16 {
        match self {
            Component::Etcd => p.etcd_client,
            Component::Apiserver => p.apiserver,
            Component::ControllerManager => p.controller_manager,
            Component::Scheduler => p.scheduler,
            Component::Kwok => p.kwok,
        }
    }
}

/// Loopback ports of one cluster, picked by a free-port probe at `up` and kept in the state file.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub struct Ports {
    /// etcd clients (and its HTTP gateway).
    pub etcd_client: u16,
    /// etcd peers (single member, loopback).
    pub etcd_peer: u16,
    /// kube-apiserver HTTPS.
    pub apiserver: u16,
    /// kube-controller-manager HTTPS (health, metrics).
    pub controller_manager: u16,
    /// kube-scheduler HTTPS (health, metrics).
    pub scheduler: u16,
    /// KWOK's server (kubelet-like endpoints, metrics).
    pub kwok: u16,
}

impl Ports {
    /// Asks the kernel for six distinct free loopback ports (all listeners are held until every
    /// port is chosen, so they differ; another process could still grab one before we bind it,
    /// in which case the component fails to start and says so).
    fn allocate() -> Result<Ports> {
        let listeners: Vec<TcpListener> = (0..6)
            .map(|_| TcpListener::bind("127.0.0.1:0"))
            .collect::<std::io::Result<_>>()?;
        let p: Vec<u16> = listeners
            .iter()
            .map(|l| l.local_addr().map(|a| a.port()))
            .collect::<std::io::Result<_>>()?;
        Ok(Ports {
            etcd_client: p[0],
            etcd_peer: p[1],
            apiserver: p[2],
            controller_manager: p[3],
            scheduler: p[4],
            kwok: p[5],
        })
    }
}

/// Contents of `state.json`.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct State {
    name: String,
    /// The release it runs (`v1.37.2`, see [`Release::exact`]).
    kubernetes: String,
    etcd: String,
    kwok: String,
    /// The release's cache directory, which the processes run their binaries from.
    cache_dir: PathBuf,
    nodes: usize,
    #[serde(default)]
    apiserver_args: Vec<String>,
    /// kube-apiserver's feature gates (`Name=true`), as [`UpOptions::feature_gates`].
    #[serde(default)]
    feature_gates: Vec<String>,
    #[serde(default)]
    controller_manager_args: Vec<String>,
    /// Extra kube-scheduler flags, as [`UpOptions::scheduler_args`].
    #[serde(default)]
    scheduler_args: Vec<String>,
    /// kube-controller-manager runs its Deployment controller (see [`UpOptions`]).
    #[serde(default)]
    deployment_controller: bool,
    /// kube-controller-manager runs its ReplicaSet controller (see [`UpOptions`]); states
    /// written before the option existed are of planes that run it.
    #[serde(default = "yes")]
    replicaset_controller: bool,
    ports: Ports,
    started_at: String,
}

/// `true`, the serde default of options that used to be always on.
fn yes() -> bool {
    true
}

/// File name prefix of [`Layout::attached_pid_file`]s.
const ATTACHED_PREFIX: &str = "attached-";

/// Files and directories of one cluster.
#[derive(Clone, Debug)]
pub struct Layout {
    /// `target/kctrl-cluster/<name>`.
    pub dir: PathBuf,
}

impl Layout {
    /// Layout of cluster `name` under the workspace's target directory.
    pub fn new(name: &str) -> Layout {
        Layout {
            dir: target_dir().join("kctrl-cluster").join(name),
        }
    }
    /// Layout of a plane in directory `dir`, wherever it is (for [`start_in`]).
    pub fn at(dir: impl Into<PathBuf>) -> Layout {
        Layout { dir: dir.into() }
    }
    fn state(&self) -> PathBuf {
        self.dir.join("state.json")
    }
    /// Component logs.
    pub fn logs(&self) -> PathBuf {
        self.dir.join("logs")
    }
    /// Log of one component.
    pub fn log(&self, c: Component) -> PathBuf {
        self.logs().join(format!("{}.log", c.name()))
    }
    fn run(&self) -> PathBuf {
        self.dir.join("run")
    }
    /// The records of the processes attached to the cluster.
    fn attached(&self) -> Vec<(PathBuf, Option<process::ProcRecord>)> {
        let Ok(entries) = fs::read_dir(self.run()) else {
            return Vec::new();
        };
        entries
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with(ATTACHED_PREFIX) && n.ends_with(".pid"))
            })
            .map(|p| {
                let rec = process::read_pid_file(&p);
                (p, rec)
            })
            .collect()
    }
    /// Pid file of a process attached to the cluster by its user (e.g. xtask's
    /// `cluster up --deployment-controller`): [`stop`] stops it first, before the components.
    pub fn attached_pid_file(&self, name: &str) -> PathBuf {
        self.run().join(format!("{ATTACHED_PREFIX}{name}.pid"))
    }
    /// Pid file of one component (`<pid> <starttime>`, see `process.rs`).
    pub fn pid_file(&self, c: Component) -> PathBuf {
        process::pid_file(&self.run(), c.name())
    }
    fn pki(&self) -> PathBuf {
        self.dir.join("pki")
    }
    /// Kubeconfig of one identity.
    fn kubeconfig(&self, id: &Identity) -> PathBuf {
        self.dir
            .join("kubeconfig")
            .join(format!("{}.kubeconfig", id.file))
    }
    fn manifests(&self) -> PathBuf {
        self.dir.join("manifests")
    }
    /// Our KWOK stage files (see `stages.rs`), written at every start.
    fn kwok_stages(&self) -> PathBuf {
        self.manifests().join("kwok-stages")
    }
}

/// The kctrl workspace's target directory (`$CARGO_TARGET_DIR` or `<workspace>/target`), where
/// the named clusters of `cargo xtask cluster` live. Meaningful in a kctrl checkout only (this
/// crate sits at `crates/cluster` of the workspace); a plane elsewhere is started with
/// [`Layout::at`].
pub fn target_dir() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("kctrl-cluster is at crates/cluster of the workspace")
        .to_path_buf();
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(t) if Path::new(&t).is_absolute() => PathBuf::from(t),
        Some(t) => root.join(t),
        None => root.join("target"),
    }
}

/// What tests and tools need to use a running cluster.
#[derive(Clone, Debug)]
pub struct ClusterInfo {
    /// Cluster name (`--name`).
    pub name: String,
    /// `target/kctrl-cluster/<name>`.
    pub dir: PathBuf,
    /// Kubeconfig of `kctrl-admin` (`system:masters`).
    pub admin_kubeconfig: PathBuf,
    /// Kubeconfig of the controller identity
    /// (`system:serviceaccount:kube-system:kctrl-deployment-controller`, no grants yet).
    pub controller_kubeconfig: PathBuf,
    /// `https://127.0.0.1:<port>`.
    pub apiserver_url: String,
    /// `http://127.0.0.1:<port>` (etcd client URL; v3 JSON gateway for compaction).
    pub etcd_endpoint: String,
    /// kubectl of the same release.
    pub kubectl: PathBuf,
    /// Server version, e.g. `v1.36.5`.
    pub kubernetes_version: String,
}

impl ClusterInfo {
    fn from_state(layout: &Layout, state: &State) -> ClusterInfo {
        ClusterInfo {
            name: state.name.clone(),
            dir: layout.dir.clone(),
            admin_kubeconfig: layout.kubeconfig(&ADMIN),
            controller_kubeconfig: layout.kubeconfig(&CONTROLLER),
            apiserver_url: format!("https://127.0.0.1:{}", state.ports.apiserver),
            etcd_endpoint: format!("http://127.0.0.1:{}", state.ports.etcd_client),
            kubectl: Cache::binary_in(&state.cache_dir, Binary::Kubectl),
            kubernetes_version: state.kubernetes.clone(),
        }
    }

    /// Kubeconfig of kube-controller-manager's identity (`system:kube-controller-manager`).
    pub fn controller_manager_kubeconfig(&self) -> PathBuf {
        Layout {
            dir: self.dir.clone(),
        }
        .kubeconfig(&KCM)
    }

    /// Environment variables for tests, in `export` order.
    pub fn env_vars(&self) -> Vec<(&'static str, String)> {
        let p = |p: &Path| p.display().to_string();
        vec![
            ("KUBECONFIG", p(&self.admin_kubeconfig)),
            ("KCTRL_CLUSTER_NAME", self.name.clone()),
            ("KCTRL_ADMIN_KUBECONFIG", p(&self.admin_kubeconfig)),
            (
                "KCTRL_CONTROLLER_KUBECONFIG",
                p(&self.controller_kubeconfig),
            ),
            ("KCTRL_CONTROLLER_USER", CONTROLLER.user.to_owned()),
            ("KCTRL_APISERVER", self.apiserver_url.clone()),
            ("KCTRL_ETCD_ENDPOINT", self.etcd_endpoint.clone()),
            ("KCTRL_KUBECTL", p(&self.kubectl)),
            ("KCTRL_K8S_VERSION", self.kubernetes_version.clone()),
        ]
    }
}

/// kubectl of the same release, as one identity.
struct Kubectl {
    bin: PathBuf,
    kubeconfig: PathBuf,
}

impl Kubectl {
    fn output(&self, args: &[&str], stdin: Option<&str>) -> Result<std::process::Output> {
        let mut cmd = Command::new(&self.bin);
        cmd.arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .arg("--request-timeout=10s")
            .args(args);
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        cmd.stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        });
        let mut child = cmd
            .spawn()
            .with_context(|| format!("running {}", self.bin.display()))?;
        if let Some(input) = stdin {
            use std::io::Write as _;
            child
                .stdin
                .take()
                .expect("piped stdin")
                .write_all(input.as_bytes())?;
        }
        Ok(child.wait_with_output()?)
    }

    /// Runs kubectl; stdout on success, an error with stderr otherwise.
    fn run(&self, args: &[&str], stdin: Option<&str>) -> Result<String> {
        let out = self.output(args, stdin)?;
        if !out.status.success() {
            bail!(
                "kubectl {} failed: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    fn ok(&self, args: &[&str]) -> bool {
        self.output(args, None).is_ok_and(|o| o.status.success())
    }
}

fn read_state(layout: &Layout) -> Option<State> {
    serde_json::from_str(&fs::read_to_string(layout.state()).ok()?).ok()
}

/// The cache cluster `name` runs its binaries from, with its release (from its state file).
/// A release this xtask no longer supports is an error that says how to get rid of the cluster.
fn state_cache(name: &str, state: &State) -> Result<Cache> {
    let release = Release::exact(&state.kubernetes).ok_or_else(|| {
        anyhow!(
            "cluster '{name}' runs Kubernetes {}, which this xtask does not support (supported: \
             {}); stop it with `cargo xtask cluster down --name {name}`",
            state.kubernetes,
            supported_list()
        )
    })?;
    Ok(Cache {
        root: state.cache_dir.clone(),
        release,
    })
}

/// The cache directories whose binaries a process of a cluster may run: the one its state file
/// names (whichever release that was) and, for a cluster whose state file is lost, those of
/// every supported release.
fn cache_roots(state: Option<&State>) -> Vec<PathBuf> {
    let mut roots: Vec<PathBuf> = state.map(|s| s.cache_dir.clone()).into_iter().collect();
    for cache in Cache::all().unwrap_or_default() {
        if !roots.contains(&cache.root) {
            roots.push(cache.root);
        }
    }
    roots
}

/// Liveness of one component according to its pid file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Liveness {
    /// Recorded process is ours and running.
    Running(u32),
    /// A pid file exists but its process is gone or is not ours (recycled pid).
    Stale(u32),
    /// No (readable) pid file.
    Absent,
}

/// Liveness of component `c`, counted as running only if it runs its binary from one of the
/// cache directories `roots`.
fn liveness(layout: &Layout, roots: &[PathBuf], c: Component) -> Liveness {
    match process::read_pid_file(&layout.pid_file(c)) {
        Some(rec)
            if roots
                .iter()
                .any(|r| rec.is_ours_and_running(&Cache::binary_in(r, c.binary()))) =>
        {
            Liveness::Running(rec.pid)
        }
        Some(rec) => Liveness::Stale(rec.pid),
        None => Liveness::Absent,
    }
}

fn port_open(port: u16) -> bool {
    TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_millis(300)).is_ok()
}

/// Options of `up`.
#[derive(Clone, Debug)]
pub struct UpOptions {
    /// Cluster name (directory and kubeconfig names; several clusters can run side by side).
    pub name: String,
    /// Number of KWOK nodes.
    pub nodes: usize,
    /// Extra kube-apiserver flags (`--flag=value`), appended after ours (later flags win).
    pub apiserver_args: Vec<String>,
    /// kube-apiserver feature gates, each `Name=true` or `Name=false` (several may be joined
    /// with commas, as on the command line), e.g. `ShardedListAndWatch=true` for server-side
    /// sharded list and watch. Sent as one `--feature-gates` flag before
    /// [`apiserver_args`](Self::apiserver_args); checked by [`feature_gates_flag`] before
    /// anything starts. Only kube-apiserver gets them: a gate another component does not
    /// know would stop it.
    pub feature_gates: Vec<String>,
    /// Extra kube-controller-manager flags, appended after ours (later flags win).
    pub controller_manager_args: Vec<String>,
    /// Extra kube-scheduler flags, appended after ours (later flags win), e.g.
    /// `--kube-api-qps=1000` so that binding Pods never sets the pace of a benchmark.
    pub scheduler_args: Vec<String>,
    /// Whether kube-controller-manager runs its own Deployment controller (upstream's, as a
    /// baseline). Off by default: ours replaces it, and the two must never run together.
    pub deployment_controller: bool,
    /// Whether kube-controller-manager runs its own ReplicaSet controller. On in every plane
    /// but those where ours runs instead (`cargo xtask cluster up --own-replicaset-controller`,
    /// the ReplicaSet controller's end-to-end tests); the two must never run together.
    pub replicaset_controller: bool,
    /// The Kubernetes release to run (`--kube-version`).
    pub release: &'static Release,
}

/// Starts a plane of `components` in `layout` from the binaries of `cache`, which must be
/// built (see [`crate::toolchain::ensure_built`]): unlike [`ensure_up`] it never builds, never
/// reuses a running plane and keeps no name-based state under the workspace. Etcd and
/// kube-apiserver always run; kube-controller-manager, kube-scheduler and KWOK (with
/// `opts.nodes` fake nodes) only if listed. Whatever was left in `layout.dir` is stopped and
/// removed first; on failure, what was started is stopped again. Stop it with [`stop`].
pub fn start_in(
    layout: &Layout,
    cache: &Cache,
    opts: &UpOptions,
    components: &[Component],
) -> Result<ClusterInfo> {
    validate_name(&opts.name)?;
    feature_gates_flag(&opts.feature_gates)?;
    if components.contains(&Component::Kwok) && opts.nodes == 0 {
        bail!("KWOK needs at least one node");
    }
    let missing = cache.missing();
    if !missing.is_empty() {
        bail!(
            "the binaries of Kubernetes {} are not built in {} (missing: {})",
            cache.release.kubernetes,
            cache.root.display(),
            missing
                .iter()
                .map(|b| b.file_name())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    stop(layout)?;
    start(layout, cache, cache.release.kubernetes, opts, components).inspect_err(|_| {
        if let Err(e) = stop(layout) {
            eprintln!("  cleanup after the failed start also failed: {e:#}");
        }
    })
}

/// The executables of a plane that [`start_with`] starts: gathered from wherever they were
/// found (a directory of the user's, downloads, a release's cache) rather than one complete
/// build of a release.
#[derive(Clone, Debug)]
pub struct Binaries {
    /// A directory laid out like a release's cache: `bin/<binary>` (a file or a symlink) for
    /// etcd, kube-apiserver, kubectl and every other component that runs, and
    /// `share/kwok-stages/` when KWOK runs. Processes are recognised (when stopping) by this
    /// path, symlinks resolved, so it must outlive the plane.
    pub root: PathBuf,
    /// The release whose pinned versions (etcd, KWOK) are recorded with the plane.
    pub release: &'static Release,
    /// What kube-apiserver reports as its version (`v1.34.1`); checked against `/version`
    /// once it serves, and what [`ClusterInfo::kubernetes_version`] says.
    pub kubernetes_version: String,
}

/// [`start_in`] from [`Binaries`] gathered from several places instead of a complete build:
/// only the files the `components` need (and kubectl) must exist. Whatever was left in
/// `layout.dir` is stopped and removed first; on failure, what was started is stopped again.
/// Stop it with [`stop`].
pub fn start_with(
    layout: &Layout,
    binaries: &Binaries,
    opts: &UpOptions,
    components: &[Component],
) -> Result<ClusterInfo> {
    validate_name(&opts.name)?;
    feature_gates_flag(&opts.feature_gates)?;
    if components.contains(&Component::Kwok) && opts.nodes == 0 {
        bail!("KWOK needs at least one node");
    }
    let cache = Cache {
        root: binaries.root.clone(),
        release: binaries.release,
    };
    let mut needed: Vec<PathBuf> = components
        .iter()
        .map(|c| cache.binary(c.binary()))
        .collect();
    needed.push(cache.binary(Binary::Kubectl));
    if components.contains(&Component::Kwok) {
        needed.extend(cache.kwok_stage_files());
    }
    let absent: Vec<String> = needed
        .iter()
        .filter(|p| !p.is_file())
        .map(|p| p.display().to_string())
        .collect();
    if !absent.is_empty() {
        bail!("missing: {}", absent.join(", "));
    }
    stop(layout)?;
    start(
        layout,
        &cache,
        &binaries.kubernetes_version,
        opts,
        components,
    )
    .inspect_err(|_| {
        if let Err(e) = stop(layout) {
            eprintln!("  cleanup after the failed start also failed: {e:#}");
        }
    })
}

/// Checks a cluster name: it becomes a directory and part of kubeconfig names.
pub fn validate_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 40
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-');
    if !ok {
        bail!(
            "invalid cluster name {name:?}: use 1-40 characters of [a-z0-9-], not starting with '-'"
        );
    }
    Ok(())
}

/// The `--feature-gates` flag for `gates` (each `Name=true|false`, or several joined with
/// commas), `None` for none; an entry that is not `Name=true|false` is an error naming it.
/// A gate named twice keeps its last value, as kube-apiserver reads them.
pub fn feature_gates_flag(gates: &[String]) -> Result<Option<String>> {
    let mut out: Vec<(String, bool)> = Vec::new();
    for entry in gates.iter().flat_map(|g| g.split(',')).map(str::trim) {
        if entry.is_empty() {
            continue;
        }
        let Some((name, value)) = entry.split_once('=') else {
            bail!(
                "feature gate {entry:?} has no value: write it as Name=true or Name=false                  (e.g. ShardedListAndWatch=true)"
            );
        };
        let name = name.trim();
        if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric()) {
            bail!(
                "feature gate {entry:?}: {name:?} is not a gate name (gates are names such as                  ShardedListAndWatch, letters and digits only)"
            );
        }
        let value = match value.trim() {
            "true" => true,
            "false" => false,
            other => {
                bail!("feature gate {entry:?}: the value must be true or false, not {other:?}")
            }
        };
        out.retain(|(n, _)| n != name);
        out.push((name.to_owned(), value));
    }
    if out.is_empty() {
        return Ok(None);
    }
    let list: Vec<String> = out.iter().map(|(n, v)| format!("{n}={v}")).collect();
    Ok(Some(format!("--feature-gates={}", list.join(","))))
}

/// kube-apiserver's flags beyond ours: the feature gates, then the extra flags.
fn apiserver_extra_args(
    feature_gates: &[String],
    apiserver_args: &[String],
) -> Result<Vec<String>> {
    let mut args: Vec<String> = feature_gates_flag(feature_gates)?.into_iter().collect();
    args.extend(apiserver_args.iter().cloned());
    Ok(args)
}

/// Returns the running cluster, if every component is up and the apiserver is ready, whatever
/// release it runs ([`ClusterInfo::kubernetes_version`]). A cluster of a release this xtask
/// does not support is an error.
pub fn running_info(name: &str) -> Result<Option<ClusterInfo>> {
    validate_name(name)?;
    let layout = Layout::new(name);
    let Some(state) = read_state(&layout) else {
        return Ok(None);
    };
    let roots = [state_cache(name, &state)?.root];
    let all_up = Component::ALL
        .iter()
        .all(|c| matches!(liveness(&layout, &roots, *c), Liveness::Running(_)));
    let info = ClusterInfo::from_state(&layout, &state);
    let kubectl = Kubectl {
        bin: info.kubectl.clone(),
        kubeconfig: info.admin_kubeconfig.clone(),
    };
    Ok((all_up && kubectl.ok(&["get", "--raw", "/readyz"])).then_some(info))
}

/// Builds the binaries if needed and starts the cluster; a no-op (that says so) if it is
/// already running. A partly running cluster (e.g. after a crash) is stopped and started afresh.
pub fn ensure_up(opts: &UpOptions) -> Result<ClusterInfo> {
    validate_name(&opts.name)?;
    feature_gates_flag(&opts.feature_gates)?;
    if opts.nodes == 0 {
        bail!("--nodes must be at least 1");
    }
    let release = opts.release;
    // Before building anything: a cluster of this name running another release is not replaced.
    if let Some(info) = running_info(&opts.name)?
        && info.kubernetes_version != release.kubernetes
    {
        bail!(
            "cluster '{}' is running Kubernetes {}, not {} as asked; stop it first (`cargo xtask \
             cluster down --name {}`) or ask for its release (`--kube-version {}`)",
            opts.name,
            info.kubernetes_version,
            release.kubernetes,
            opts.name,
            info.kubernetes_version
        );
    }
    let cache = Cache::locate(release)?;
    crate::toolchain::ensure_built(&cache)?;
    if let Some(info) = running_info(&opts.name)? {
        let state = read_state(&Layout::new(&opts.name));
        let running_gates = state
            .as_ref()
            .map(|s| feature_gates_flag(&s.feature_gates))
            .transpose()?
            .flatten();
        let asked_gates = feature_gates_flag(&opts.feature_gates)?;
        if running_gates != asked_gates {
            let show = |g: &Option<String>| {
                g.as_deref().map_or("none".to_owned(), |f| {
                    f.trim_start_matches("--feature-gates=").to_owned()
                })
            };
            bail!(
                "cluster '{}' is running with kube-apiserver feature gates {}, not {} as asked; \
                 stop it first (`cargo xtask cluster down --name {}`)",
                opts.name,
                show(&running_gates),
                show(&asked_gates),
                opts.name
            );
        }
        let runs = |which: fn(&State) -> bool| state.as_ref().is_some_and(which);
        for (kind, runs_it, asked) in [
            (
                "Deployment",
                runs(|s| s.deployment_controller),
                opts.deployment_controller,
            ),
            (
                "ReplicaSet",
                runs(|s| s.replicaset_controller),
                opts.replicaset_controller,
            ),
        ] {
            if runs_it != asked {
                bail!(
                    "cluster '{}' is running, but its kube-controller-manager {} the {kind} \
                     controller; stop it first (`cargo xtask cluster down --name {}`)",
                    opts.name,
                    if runs_it { "runs" } else { "does not run" },
                    opts.name
                );
            }
        }
        eprintln!(
            "cluster '{}' is already running ({}, Kubernetes {}); nothing to do",
            opts.name, info.apiserver_url, info.kubernetes_version
        );
        return Ok(info);
    }
    let layout = Layout::new(&opts.name);
    if read_state(&layout).is_some() || layout.run().exists() {
        eprintln!(
            "cluster '{}' is not (fully) running; cleaning up its leftovers first",
            opts.name
        );
    }
    // Even without any record, a crash could have left processes behind.
    stop(&layout)?;
    let started = Instant::now();
    match start(
        &layout,
        &cache,
        cache.release.kubernetes,
        opts,
        &Component::ALL,
    ) {
        Ok(info) => {
            eprintln!(
                "cluster '{}' is up in {}: Kubernetes {}, etcd {}, kwok {}, {} KWOK node(s) Ready",
                opts.name,
                fmt_duration(started.elapsed()),
                info.kubernetes_version,
                release.etcd,
                release.kwok,
                opts.nodes
            );
            Ok(info)
        }
        Err(e) => {
            eprintln!("start-up failed; stopping what was started");
            if let Err(stop_err) = stop(&layout) {
                eprintln!("  cleanup also failed: {stop_err:#}");
            }
            Err(e)
        }
    }
}

mod ops;
mod start;
#[cfg(test)]
mod tests;

use start::{Started, args, ready_nodes, start, wait_for, with_controllers};

pub use ops::{
    ComponentStatus, StatusReport, apiserver_port, compact, kill_and_restart, not_running,
    signal_component, status, stop,
};

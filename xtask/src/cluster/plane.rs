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

use super::etcd;
use super::pki::{self, Identity, Pki};
use super::process::{self, ProcRecord};
use super::stages;
use super::toolchain::{Cache, fmt_duration};
use super::versions::{Binary, Release, supported_list};

/// Namespace of the controller's identity.
pub(crate) const CONTROLLER_SA_NAMESPACE: &str = "kube-system";
/// Name of the controller's ServiceAccount. Deliberately *not* `deployment-controller`: the
/// apiserver's bootstrap RBAC policy binds `kube-system:deployment-controller` to
/// `system:controller:deployment-controller`, which would hide gaps in our own RBAC manifest.
pub(crate) const CONTROLLER_SA_NAME: &str = "kctrl-deployment-controller";

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
pub(crate) enum Component {
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
    pub(crate) const ALL: [Component; 5] = [
        Component::Etcd,
        Component::Apiserver,
        Component::ControllerManager,
        Component::Scheduler,
        Component::Kwok,
    ];

    /// Name used for the log and pid files.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Component::Etcd => "etcd",
            Component::Apiserver => "kube-apiserver",
            Component::ControllerManager => "kube-controller-manager",
            Component::Scheduler => "kube-scheduler",
            Component::Kwok => "kwok-controller",
        }
    }

    /// The binary it runs.
    pub(crate) fn binary(self) -> Binary {
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
pub(crate) struct Ports {
    /// etcd clients (and its HTTP gateway).
    pub(crate) etcd_client: u16,
    /// etcd peers (single member, loopback).
    pub(crate) etcd_peer: u16,
    /// kube-apiserver HTTPS.
    pub(crate) apiserver: u16,
    /// kube-controller-manager HTTPS (health, metrics).
    pub(crate) controller_manager: u16,
    /// kube-scheduler HTTPS (health, metrics).
    pub(crate) scheduler: u16,
    /// KWOK's server (kubelet-like endpoints, metrics).
    pub(crate) kwok: u16,
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
    #[serde(default)]
    controller_manager_args: Vec<String>,
    /// kube-controller-manager runs its Deployment controller (see [`UpOptions`]).
    #[serde(default)]
    deployment_controller: bool,
    ports: Ports,
    started_at: String,
}

/// Files and directories of one cluster.
#[derive(Clone, Debug)]
pub(crate) struct Layout {
    /// `target/kctrl-cluster/<name>`.
    pub(crate) dir: PathBuf,
}

impl Layout {
    /// Layout of cluster `name` under the workspace's target directory.
    pub(crate) fn new(name: &str) -> Layout {
        Layout {
            dir: target_dir().join("kctrl-cluster").join(name),
        }
    }
    fn state(&self) -> PathBuf {
        self.dir.join("state.json")
    }
    /// Component logs.
    pub(crate) fn logs(&self) -> PathBuf {
        self.dir.join("logs")
    }
    /// Log of one component.
    pub(crate) fn log(&self, c: Component) -> PathBuf {
        self.logs().join(format!("{}.log", c.name()))
    }
    fn run(&self) -> PathBuf {
        self.dir.join("run")
    }
    /// Pid file of one component (`<pid> <starttime>`, see `process.rs`).
    pub(crate) fn pid_file(&self, c: Component) -> PathBuf {
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

/// The workspace's target directory (`$CARGO_TARGET_DIR` or `<workspace>/target`).
pub(crate) fn target_dir() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask is inside the workspace")
        .to_path_buf();
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(t) if Path::new(&t).is_absolute() => PathBuf::from(t),
        Some(t) => root.join(t),
        None => root.join("target"),
    }
}

/// What tests and tools need to use a running cluster.
#[derive(Clone, Debug)]
pub(crate) struct ClusterInfo {
    /// Cluster name (`--name`).
    pub(crate) name: String,
    /// `target/kctrl-cluster/<name>`.
    pub(crate) dir: PathBuf,
    /// Kubeconfig of `kctrl-admin` (`system:masters`).
    pub(crate) admin_kubeconfig: PathBuf,
    /// Kubeconfig of the controller identity
    /// (`system:serviceaccount:kube-system:kctrl-deployment-controller`, no grants yet).
    pub(crate) controller_kubeconfig: PathBuf,
    /// `https://127.0.0.1:<port>`.
    pub(crate) apiserver_url: String,
    /// `http://127.0.0.1:<port>` (etcd client URL; v3 JSON gateway for compaction).
    pub(crate) etcd_endpoint: String,
    /// kubectl of the same release.
    pub(crate) kubectl: PathBuf,
    /// Server version, e.g. `v1.36.5`.
    pub(crate) kubernetes_version: String,
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
    pub(crate) fn controller_manager_kubeconfig(&self) -> PathBuf {
        Layout {
            dir: self.dir.clone(),
        }
        .kubeconfig(&KCM)
    }

    /// Environment variables for tests, in `export` order.
    pub(crate) fn env_vars(&self) -> Vec<(&'static str, String)> {
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
pub(crate) enum Liveness {
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
pub(crate) struct UpOptions {
    /// Cluster name (directory and kubeconfig names; several clusters can run side by side).
    pub(crate) name: String,
    /// Number of KWOK nodes.
    pub(crate) nodes: usize,
    /// Extra kube-apiserver flags (`--flag=value`), appended after ours (later flags win).
    pub(crate) apiserver_args: Vec<String>,
    /// Extra kube-controller-manager flags, appended after ours (later flags win).
    pub(crate) controller_manager_args: Vec<String>,
    /// Whether kube-controller-manager runs its own Deployment controller (upstream's, as a
    /// baseline). Off by default: ours replaces it, and the two must never run together.
    pub(crate) deployment_controller: bool,
    /// The Kubernetes release to run (`--kube-version`).
    pub(crate) release: &'static Release,
}

/// Checks a cluster name: it becomes a directory and part of kubeconfig names.
pub(crate) fn validate_name(name: &str) -> Result<()> {
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

/// Returns the running cluster, if every component is up and the apiserver is ready, whatever
/// release it runs ([`ClusterInfo::kubernetes_version`]). A cluster of a release this xtask
/// does not support is an error.
pub(crate) fn running_info(name: &str) -> Result<Option<ClusterInfo>> {
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
pub(crate) fn ensure_up(opts: &UpOptions) -> Result<ClusterInfo> {
    validate_name(&opts.name)?;
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
    super::toolchain::ensure_built(&cache)?;
    if let Some(info) = running_info(&opts.name)? {
        let runs_it = read_state(&Layout::new(&opts.name)).is_some_and(|s| s.deployment_controller);
        if runs_it != opts.deployment_controller {
            bail!(
                "cluster '{}' is running, but its kube-controller-manager {} the Deployment \
                 controller; stop it first (`cargo xtask cluster down --name {}`)",
                opts.name,
                if runs_it { "runs" } else { "does not run" },
                opts.name
            );
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
    match start(&layout, &cache, opts) {
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

/// A component started by this `up`, kept to notice early exits.
struct Started {
    component: Component,
    child: Child,
    log: PathBuf,
}

fn check_alive(started: &mut [Started]) -> Result<()> {
    for s in started.iter_mut() {
        if let Some(status) = s.child.try_wait()? {
            bail!(
                "{} exited during start-up ({status}).\nLog: {}\n--- last lines ---\n{}",
                s.component.name(),
                s.log.display(),
                process::tail(&s.log, 25)
            );
        }
    }
    Ok(())
}

/// Polls `probe` until it returns true, failing early when a started component exits and on
/// `timeout` (naming `blame`'s log).
fn wait_for(
    what: &str,
    timeout: Duration,
    started: &mut [Started],
    blame: Component,
    layout: &Layout,
    mut probe: impl FnMut() -> bool,
) -> Result<()> {
    let t0 = Instant::now();
    loop {
        check_alive(started)?;
        if probe() {
            eprintln!("  {what} ({})", fmt_duration(t0.elapsed()));
            return Ok(());
        }
        if t0.elapsed() > timeout {
            let log = layout.log(blame);
            bail!(
                "timed out after {} waiting for {what}; {} may be unhealthy.\nLog: {}\n--- last lines ---\n{}",
                fmt_duration(timeout),
                blame.name(),
                log.display(),
                process::tail(&log, 25)
            );
        }
        thread::sleep(Duration::from_millis(250));
    }
}

fn start(layout: &Layout, cache: &Cache, opts: &UpOptions) -> Result<ClusterInfo> {
    let name = &opts.name;
    if layout.dir.exists() {
        fs::remove_dir_all(&layout.dir)
            .with_context(|| format!("removing {}", layout.dir.display()))?;
    }
    for d in [
        layout.logs(),
        layout.run(),
        layout.manifests(),
        layout.dir.join("kubeconfig"),
    ] {
        fs::create_dir_all(&d)?;
    }
    stages::install(&layout.kwok_stages())?;
    let ports = Ports::allocate()?;
    let pki = Pki::generate(&layout.pki(), name, &IDENTITIES)?;
    let server = format!("https://127.0.0.1:{}", ports.apiserver);
    for id in &IDENTITIES {
        fs::write(
            layout.kubeconfig(id),
            pki::kubeconfig(&pki, name, &server, id)?,
        )?;
    }
    let state = State {
        name: name.clone(),
        kubernetes: cache.release.kubernetes.to_owned(),
        etcd: cache.release.etcd.to_owned(),
        kwok: cache.release.kwok.to_owned(),
        cache_dir: cache.root.clone(),
        nodes: opts.nodes,
        apiserver_args: opts.apiserver_args.clone(),
        controller_manager_args: opts.controller_manager_args.clone(),
        deployment_controller: opts.deployment_controller,
        ports,
        started_at: super::toolchain::utc_now_rfc3339(),
    };
    // Written before anything starts, so `down` finds a half-started cluster after a crash.
    fs::write(layout.state(), serde_json::to_string_pretty(&state)?)?;
    let info = ClusterInfo::from_state(layout, &state);
    let admin = Kubectl {
        bin: info.kubectl.clone(),
        kubeconfig: info.admin_kubeconfig.clone(),
    };
    let mut started: Vec<Started> = Vec::new();
    let launch = |c: Component, started: &mut Vec<Started>| -> Result<()> {
        let mut args = args(c, layout, &pki, &ports, cache, name);
        if c == Component::Apiserver {
            args.extend(opts.apiserver_args.iter().cloned());
        }
        if c == Component::ControllerManager {
            if opts.deployment_controller {
                args = with_deployment_controller(args);
            }
            args.extend(opts.controller_manager_args.iter().cloned());
        }
        let log = layout.log(c);
        let (child, ProcRecord { pid, .. }) =
            process::spawn(&cache.binary(c.binary()), &args, &log, &layout.pid_file(c))?;
        eprintln!(
            "  started {} (pid {pid}, 127.0.0.1:{}), log: {}",
            c.name(),
            c.port(&ports),
            log.display()
        );
        started.push(Started {
            component: c,
            child,
            log,
        });
        Ok(())
    };

    launch(Component::Etcd, &mut started)?;
    let etcd_endpoint = info.etcd_endpoint.clone();
    wait_for(
        "etcd is healthy",
        Duration::from_secs(60),
        &mut started,
        Component::Etcd,
        layout,
        || etcd::healthy(&etcd_endpoint),
    )?;

    launch(Component::Apiserver, &mut started)?;
    wait_for(
        "kube-apiserver is ready (/readyz)",
        Duration::from_secs(180),
        &mut started,
        Component::Apiserver,
        layout,
        || admin.ok(&["get", "--raw", "/readyz"]),
    )?;
    let version: serde_json::Value =
        serde_json::from_str(&admin.run(&["get", "--raw", "/version"], None)?)?;
    let git_version = version["gitVersion"].as_str().unwrap_or("?").to_owned();
    if git_version != cache.release.kubernetes {
        bail!(
            "kube-apiserver reports version {git_version}, expected {} (version ldflags missing?)",
            cache.release.kubernetes
        );
    }

    for c in [
        Component::ControllerManager,
        Component::Scheduler,
        Component::Kwok,
    ] {
        launch(c, &mut started)?;
    }
    for c in [
        Component::ControllerManager,
        Component::Scheduler,
        Component::Kwok,
    ] {
        let port = c.port(&ports);
        wait_for(
            &format!("{} is serving", c.name()),
            Duration::from_secs(120),
            &mut started,
            c,
            layout,
            || port_open(port),
        )?;
    }

    let nodes = nodes_manifest(opts.nodes);
    let nodes_file = layout.manifests().join("nodes.yaml");
    fs::write(&nodes_file, &nodes)?;
    admin.run(&["apply", "-f", "-"], Some(&nodes))?;
    let identity = identity_manifest();
    fs::write(layout.manifests().join("identity.yaml"), &identity)?;
    admin.run(&["apply", "-f", "-"], Some(&identity))?;

    wait_for(
        &format!("{} KWOK node(s) are Ready", opts.nodes),
        Duration::from_secs(120),
        &mut started,
        Component::Kwok,
        layout,
        || ready_nodes(&admin).is_ok_and(|n| n >= opts.nodes),
    )?;
    wait_for(
        "the default ServiceAccount exists",
        Duration::from_secs(120),
        &mut started,
        Component::ControllerManager,
        layout,
        || {
            admin.ok(&[
                "-n",
                "default",
                "get",
                "serviceaccount",
                "default",
                "-o",
                "name",
            ])
        },
    )?;
    check_alive(&mut started)?;
    Ok(info)
}

/// Number of nodes whose Ready condition is True.
fn ready_nodes(kubectl: &Kubectl) -> Result<usize> {
    let list: serde_json::Value =
        serde_json::from_str(&kubectl.run(&["get", "nodes", "-o", "json"], None)?)?;
    let items = list["items"]
        .as_array()
        .ok_or_else(|| anyhow!("no items in node list"))?;
    Ok(items
        .iter()
        .filter(|n| {
            n["status"]["conditions"].as_array().is_some_and(|cs| {
                cs.iter()
                    .any(|c| c["type"] == "Ready" && c["status"] == "True")
            })
        })
        .count())
}

/// Command-line flags of each component.
fn args(
    c: Component,
    layout: &Layout,
    pki: &Pki,
    ports: &Ports,
    cache: &Cache,
    name: &str,
) -> Vec<String> {
    let p = |p: &Path| p.display().to_string();
    let serving = pki.serving();
    let kc = |id: &Identity| p(&layout.kubeconfig(id));
    match c {
        Component::Etcd => vec![
            format!("--name=kctrl-{name}"),
            format!("--data-dir={}", p(&layout.dir.join("etcd-data"))),
            format!(
                "--listen-client-urls=http://127.0.0.1:{}",
                ports.etcd_client
            ),
            format!(
                "--advertise-client-urls=http://127.0.0.1:{}",
                ports.etcd_client
            ),
            format!("--listen-peer-urls=http://127.0.0.1:{}", ports.etcd_peer),
            format!(
                "--initial-advertise-peer-urls=http://127.0.0.1:{}",
                ports.etcd_peer
            ),
            format!(
                "--initial-cluster=kctrl-{name}=http://127.0.0.1:{}",
                ports.etcd_peer
            ),
            "--initial-cluster-state=new".into(),
            // Throw-away test data: no fsync (much faster on shared disks).
            "--unsafe-no-fsync=true".into(),
        ],
        Component::Apiserver => vec![
            format!("--etcd-servers=http://127.0.0.1:{}", ports.etcd_client),
            "--bind-address=127.0.0.1".into(),
            // Explicit, so start-up never depends on a default route.
            "--advertise-address=127.0.0.1".into(),
            format!("--secure-port={}", ports.apiserver),
            format!("--tls-cert-file={}", p(&serving.cert)),
            format!("--tls-private-key-file={}", p(&serving.key)),
            format!("--client-ca-file={}", p(&pki.ca().cert)),
            "--authorization-mode=Node,RBAC".into(),
            format!("--service-cluster-ip-range={SERVICE_CIDR}"),
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local".into(),
            format!("--service-account-key-file={}", p(&pki.sa_pub())),
            format!("--service-account-signing-key-file={}", p(&pki.sa_key())),
            "--allow-privileged=true".into(),
            // The `kubernetes` Endpoints would point at 127.0.0.1, which validation rejects.
            "--endpoint-reconciler-type=none".into(),
            "--profiling=false".into(),
        ],
        Component::ControllerManager => vec![
            format!("--kubeconfig={}", kc(&KCM)),
            format!("--authentication-kubeconfig={}", kc(&KCM)),
            format!("--authorization-kubeconfig={}", kc(&KCM)),
            "--bind-address=127.0.0.1".into(),
            format!("--secure-port={}", ports.controller_manager),
            format!("--tls-cert-file={}", p(&serving.cert)),
            format!("--tls-private-key-file={}", p(&serving.key)),
            "--leader-elect=false".into(),
            // Everything that is on by default except the Deployment controller (ours replaces
            // it); the ReplicaSet controller and the garbage collector stay on.
            "--controllers=*,-deployment-controller".into(),
            // Each controller acts as its own ServiceAccount, as in kubeadm clusters.
            "--use-service-account-credentials=true".into(),
            format!("--service-account-private-key-file={}", p(&pki.sa_key())),
            format!("--root-ca-file={}", p(&pki.ca().cert)),
            format!("--cluster-signing-cert-file={}", p(&pki.ca().cert)),
            format!("--cluster-signing-key-file={}", p(&pki.ca().key)),
            format!("--cluster-name=kctrl-{name}"),
            "--profiling=false".into(),
        ],
        Component::Scheduler => vec![
            format!("--kubeconfig={}", kc(&SCHEDULER)),
            format!("--authentication-kubeconfig={}", kc(&SCHEDULER)),
            format!("--authorization-kubeconfig={}", kc(&SCHEDULER)),
            "--bind-address=127.0.0.1".into(),
            format!("--secure-port={}", ports.scheduler),
            format!("--tls-cert-file={}", p(&serving.cert)),
            format!("--tls-private-key-file={}", p(&serving.key)),
            "--leader-elect=false".into(),
            "--profiling=false".into(),
        ],
        Component::Kwok => vec![
            format!("--kubeconfig={}", kc(&KWOK)),
            // KWOK's node and pod-complete/pod-delete stages from the cache, then ours.
            format!(
                "--config={}",
                cache
                    .kwok_stage_files()
                    .iter()
                    .chain(&stages::paths(&layout.kwok_stages()))
                    .map(|f| p(f))
                    .collect::<Vec<_>>()
                    .join(",")
            ),
            "--manage-all-nodes=false".into(),
            format!("--manage-nodes-with-annotation-selector={KWOK_NODE_ANNOTATION}=fake"),
            "--node-ip=127.0.0.1".into(),
            format!("--node-port={}", ports.kwok),
            format!("--server-address=127.0.0.1:{}", ports.kwok),
            format!("--tls-cert-file={}", p(&serving.cert)),
            format!("--tls-private-key-file={}", p(&serving.key)),
            format!("--cidr={POD_CIDR}"),
            "--node-lease-duration-seconds=40".into(),
        ],
    }
}

/// The `--controllers` flag of kube-controller-manager with everything on by default,
/// including its own Deployment controller.
const CONTROLLERS_WITH_DEPLOYMENT: &str = "--controllers=*";

/// kube-controller-manager's flags `args` with its Deployment controller switched back on.
fn with_deployment_controller(args: Vec<String>) -> Vec<String> {
    args.into_iter()
        .map(|a| {
            if a.starts_with("--controllers=") {
                CONTROLLERS_WITH_DEPLOYMENT.to_owned()
            } else {
                a
            }
        })
        .collect()
}

/// Fake nodes managed by KWOK (our own manifest: the annotation KWOK selects on, capacity for
/// plenty of pods, no taints).
fn nodes_manifest(count: usize) -> String {
    let mut out = String::new();
    for i in 0..count {
        out.push_str(&format!(
            "---
apiVersion: v1
kind: Node
metadata:
  name: kwok-node-{i}
  annotations:
    {KWOK_NODE_ANNOTATION}: fake
    node.alpha.kubernetes.io/ttl: \"0\"
  labels:
    kubernetes.io/hostname: kwok-node-{i}
    kubernetes.io/os: linux
    kubernetes.io/arch: amd64
    type: kwok
status:
  allocatable:
    cpu: \"32\"
    memory: 256Gi
    pods: \"110\"
  capacity:
    cpu: \"32\"
    memory: 256Gi
    pods: \"110\"
"
        ));
    }
    out
}

/// The controller's ServiceAccount object (its client certificate already authenticates as
/// this ServiceAccount; the object exists so RBAC bindings and in-cluster runs can refer to it).
fn identity_manifest() -> String {
    format!(
        "apiVersion: v1
kind: ServiceAccount
metadata:
  name: {CONTROLLER_SA_NAME}
  namespace: {CONTROLLER_SA_NAMESPACE}
  labels:
    app.kubernetes.io/part-of: kctrl
"
    )
}

/// Stops every process of the cluster (pid files first, then a `/proc` scan for strays),
/// whichever release it runs, and removes its runtime state, keeping the logs. Returns the
/// number of processes stopped.
pub(crate) fn stop(layout: &Layout) -> Result<usize> {
    let roots = cache_roots(read_state(layout).as_ref());
    let mut groups = Vec::new();
    for c in Component::ALL.iter().rev() {
        let pid_file = layout.pid_file(*c);
        match process::read_pid_file(&pid_file) {
            Some(rec) if matches!(liveness(layout, &roots, *c), Liveness::Running(_)) => {
                groups.push(rec)
            }
            Some(rec) => eprintln!(
                "  ignoring stale pid file of {} (pid {} is gone or not ours)",
                c.name(),
                rec.pid
            ),
            None => {}
        }
    }
    // Only the server binaries: a user's `kubectl … -w` against this cluster is not ours to kill.
    let names: Vec<&str> = Component::ALL
        .iter()
        .map(|c| c.binary().file_name())
        .collect();
    let strays: Vec<u32> = process::find_strays(&names, &layout.dir)
        .into_iter()
        .filter(|p| !groups.iter().any(|g| g.pid == *p))
        .collect();
    if !strays.is_empty() {
        eprintln!("  found stray processes of this cluster without pid files: {strays:?}");
    }
    let stopped = process::stop_all(&groups, &strays, Duration::from_secs(15))?;
    for entry in [
        "run",
        "etcd-data",
        "state.json",
        "pki",
        "kubeconfig",
        "manifests",
    ] {
        let path = layout.dir.join(entry);
        let _ = if path.is_dir() {
            fs::remove_dir_all(&path)
        } else {
            fs::remove_file(&path)
        };
    }
    Ok(stopped)
}

/// One row of `status`.
pub(crate) struct ComponentStatus {
    /// Component.
    pub(crate) component: Component,
    /// Pid-file verdict.
    pub(crate) liveness: Liveness,
    /// Port it serves on, if the cluster has a state file.
    pub(crate) port: Option<u16>,
    /// Whether that port accepts connections.
    pub(crate) listening: bool,
}

/// Report of `status`.
pub(crate) struct StatusReport {
    /// Per component.
    pub(crate) components: Vec<ComponentStatus>,
    /// Cluster info if a state file exists.
    pub(crate) info: Option<ClusterInfo>,
    /// `/readyz` of the apiserver.
    pub(crate) apiserver_ready: bool,
    /// Ready nodes / all nodes.
    pub(crate) nodes: Option<(usize, usize)>,
    /// What the state file records the cluster runs: `Kubernetes v1.37.2, etcd v3.7.0, kwok
    /// v0.8.0`.
    pub(crate) versions: Option<String>,
    /// Per binary cache (the cluster's, or every supported release's if there is no state
    /// file): release, directory and whether every binary is built.
    pub(crate) caches: Vec<(&'static str, PathBuf, bool)>,
}

impl StatusReport {
    /// Whether the cluster is fully up.
    pub(crate) fn healthy(&self) -> bool {
        self.apiserver_ready
            && self
                .components
                .iter()
                .all(|c| matches!(c.liveness, Liveness::Running(_)) && c.listening)
    }
}

/// Inspects cluster `name` without changing anything.
pub(crate) fn status(name: &str) -> Result<StatusReport> {
    validate_name(name)?;
    let layout = Layout::new(name);
    let state = read_state(&layout);
    let info = state.as_ref().map(|s| ClusterInfo::from_state(&layout, s));
    let roots = cache_roots(state.as_ref());
    let components = Component::ALL
        .iter()
        .map(|c| {
            let port = state.as_ref().map(|s| c.port(&s.ports));
            ComponentStatus {
                component: *c,
                liveness: liveness(&layout, &roots, *c),
                port,
                listening: port.is_some_and(port_open),
            }
        })
        .collect();
    let (mut apiserver_ready, mut nodes) = (false, None);
    if let Some(info) = &info {
        let k = Kubectl {
            bin: info.kubectl.clone(),
            kubeconfig: info.admin_kubeconfig.clone(),
        };
        if info.kubectl.is_file() && k.ok(&["get", "--raw", "/readyz"]) {
            apiserver_ready = true;
            let total = k
                .run(&["get", "nodes", "-o", "name"], None)
                .map(|s| s.lines().filter(|l| !l.is_empty()).count())
                .unwrap_or(0);
            nodes = ready_nodes(&k).ok().map(|r| (r, total));
        }
    }
    let caches = match &state {
        // A release this xtask does not support has no cache to report.
        Some(s) => state_cache(name, s).into_iter().collect(),
        None => Cache::all()?,
    };
    Ok(StatusReport {
        components,
        info,
        apiserver_ready,
        nodes,
        versions: state.as_ref().map(|s| {
            format!(
                "Kubernetes {}, etcd {}, kwok {}",
                s.kubernetes, s.etcd, s.kwok
            )
        }),
        caches: caches
            .into_iter()
            .map(|c| (c.release.kubernetes, c.root.clone(), c.missing().is_empty()))
            .collect(),
    })
}

/// Kills one component of running cluster `name` with SIGKILL (no chance to clean up, as a
/// crash) and starts it again with the same flags and ports, appending to the same log.
/// Waits until it serves again (`/readyz` for the apiserver, its port for the others) and
/// returns how long the restart took. For fault injection (`cargo xtask chaos`).
pub(crate) fn kill_and_restart(name: &str, c: Component) -> Result<Duration> {
    validate_name(name)?;
    let layout = Layout::new(name);
    let state = read_state(&layout).ok_or_else(|| not_running(name))?;
    let cache = state_cache(name, &state)?;
    let binary = cache.binary(c.binary());
    let rec = process::read_pid_file(&layout.pid_file(c))
        .filter(|r| r.is_ours_and_running(&binary))
        .ok_or_else(|| anyhow!("{} of cluster '{name}' is not running", c.name()))?;
    let started = Instant::now();
    process::kill_group(rec.pid)?;
    // The leader of a multi-threaded process shows as a zombie while its other threads are
    // still exiting and holding its sockets: wait for the listener to be gone, or the new
    // process could not bind the port.
    let port = c.port(&state.ports);
    let deadline = Instant::now() + Duration::from_secs(10);
    while port_open(port) {
        if Instant::now() > deadline {
            bail!(
                "port {port} still accepts connections 10 s after {} was killed",
                c.name()
            );
        }
        thread::sleep(Duration::from_millis(20));
    }
    let pki = Pki { dir: layout.pki() };
    let mut argv = args(c, &layout, &pki, &state.ports, &cache, name);
    match c {
        Component::Apiserver => argv.extend(state.apiserver_args.iter().cloned()),
        Component::ControllerManager => {
            if state.deployment_controller {
                argv = with_deployment_controller(argv);
            }
            argv.extend(state.controller_manager_args.iter().cloned());
        }
        _ => {}
    }
    let log = layout.log(c);
    let (child, _) = process::spawn(&binary, &argv, &log, &layout.pid_file(c))?;
    let mut started_now = vec![Started {
        component: c,
        child,
        log,
    }];
    let info = ClusterInfo::from_state(&layout, &state);
    let admin = Kubectl {
        bin: info.kubectl.clone(),
        kubeconfig: info.admin_kubeconfig.clone(),
    };
    let etcd_endpoint = info.etcd_endpoint.clone();
    wait_for(
        &format!("{} serves again", c.name()),
        Duration::from_secs(180),
        &mut started_now,
        c,
        &layout,
        || match c {
            Component::Apiserver => admin.ok(&["get", "--raw", "/readyz"]),
            Component::Etcd => etcd::healthy(&etcd_endpoint),
            _ => port_open(port),
        },
    )?;
    // The component is detached (own process group, pid file) and outlives this call; a
    // thread reaps it whenever it exits, so a later kill leaves no zombie behind.
    for s in started_now {
        let mut child = s.child;
        thread::spawn(move || child.wait());
    }
    Ok(started.elapsed())
}

/// Sends `signal` (e.g. `STOP`, `CONT`) to one component of running cluster `name`.
pub(crate) fn signal_component(name: &str, c: Component, signal: &str) -> Result<()> {
    validate_name(name)?;
    let layout = Layout::new(name);
    let state = read_state(&layout).ok_or_else(|| not_running(name))?;
    let binary = Cache::binary_in(&state.cache_dir, c.binary());
    let rec = process::read_pid_file(&layout.pid_file(c))
        .filter(|r| r.is_ours_and_running(&binary))
        .ok_or_else(|| anyhow!("{} of cluster '{name}' is not running", c.name()))?;
    let status = Command::new("kill")
        .args([&format!("-{signal}"), "--", &rec.pid.to_string()])
        .status()
        .context("running kill")?;
    if !status.success() {
        bail!("kill -{signal} {} failed ({status})", rec.pid);
    }
    Ok(())
}

/// The apiserver's port of cluster `name`, from its state file.
pub(crate) fn apiserver_port(name: &str) -> Result<u16> {
    let state = read_state(&Layout::new(name)).ok_or_else(|| not_running(name))?;
    Ok(state.ports.apiserver)
}

/// Compacts the etcd of cluster `name` at its current revision.
pub(crate) fn compact(name: &str) -> Result<i64> {
    let info = running_info(name)?.ok_or_else(|| not_running(name))?;
    etcd::compact(&info.etcd_endpoint)
}

/// The error for commands that need a running cluster.
pub(crate) fn not_running(name: &str) -> anyhow::Error {
    anyhow!("cluster '{name}' is not running; start it with `cargo xtask cluster up --name {name}`")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A cluster `t` under `/x` with the cache at `/c`, for the command-line tests.
    fn fixture() -> (Layout, Pki, Cache, Ports) {
        (
            Layout {
                dir: PathBuf::from("/x/target/kctrl-cluster/t"),
            },
            Pki {
                dir: PathBuf::from("/x/pki"),
            },
            Cache {
                root: PathBuf::from("/c"),
                release: crate::cluster::versions::DEFAULT_RELEASE,
            },
            Ports {
                etcd_client: 1,
                etcd_peer: 2,
                apiserver: 3,
                controller_manager: 4,
                scheduler: 5,
                kwok: 6,
            },
        )
    }

    #[test]
    fn names_are_validated() {
        assert!(validate_name("dev").is_ok());
        assert!(validate_name("e2e-1").is_ok());
        for bad in ["", "-x", "Dev", "a/b", "a b", &"x".repeat(41)] {
            assert!(validate_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn ports_are_distinct() {
        let p = Ports::allocate().unwrap();
        let mut all = [
            p.etcd_client,
            p.etcd_peer,
            p.apiserver,
            p.controller_manager,
            p.scheduler,
            p.kwok,
        ];
        all.sort_unstable();
        assert!(all.windows(2).all(|w| w[0] != w[1]), "{all:?}");
    }

    #[test]
    fn controller_manager_runs_without_the_deployment_controller() {
        let (layout, pki, cache, ports) = fixture();
        let kcm = args(
            Component::ControllerManager,
            &layout,
            &pki,
            &ports,
            &cache,
            "t",
        );
        assert!(kcm.contains(&"--controllers=*,-deployment-controller".to_owned()));
        assert!(!crate::controller_process::runs_deployment_controller(
            &std::iter::once("kube-controller-manager".to_owned())
                .chain(kcm.iter().cloned())
                .collect::<Vec<_>>()
        ));
        // The upstream baseline: the same flags, with the Deployment controller on.
        let upstream = with_deployment_controller(kcm.clone());
        assert_eq!(upstream.len(), kcm.len());
        assert!(upstream.contains(&"--controllers=*".to_owned()));
        assert!(crate::controller_process::runs_deployment_controller(
            &std::iter::once("kube-controller-manager".to_owned())
                .chain(upstream)
                .collect::<Vec<_>>()
        ));
        let api = args(Component::Apiserver, &layout, &pki, &ports, &cache, "t");
        assert!(api.contains(&"--authorization-mode=Node,RBAC".to_owned()));
        assert!(api.contains(&"--bind-address=127.0.0.1".to_owned()));
        // Every component's command line names the cluster directory (stray detection relies on it).
        for c in Component::ALL {
            assert!(
                args(c, &layout, &pki, &ports, &cache, "t")
                    .iter()
                    .any(|a| a.contains("/x/")),
                "{c:?}"
            );
        }
    }

    #[test]
    fn kwok_reads_the_cached_node_stages_and_our_pod_stages() {
        let (layout, pki, cache, ports) = fixture();
        let kwok = args(Component::Kwok, &layout, &pki, &ports, &cache, "t");
        let configs: Vec<&str> = kwok
            .iter()
            .filter_map(|a| a.strip_prefix("--config="))
            .collect();
        assert_eq!(configs.len(), 1, "{kwok:?}");
        let files: Vec<&str> = configs[0].split(',').collect();
        let ours = "/x/target/kctrl-cluster/t/manifests/kwok-stages";
        assert_eq!(
            files,
            [
                "/c/share/kwok-stages/node-initialize.yaml",
                "/c/share/kwok-stages/node-heartbeat-with-lease.yaml",
                "/c/share/kwok-stages/pod-complete.yaml",
                "/c/share/kwok-stages/pod-delete.yaml",
                &format!("{ours}/pod-ready.yaml"),
                &format!("{ours}/pod-image-pull-error.yaml"),
                &format!("{ours}/pod-image-pull-backoff.yaml"),
                &format!("{ours}/pod-running-unready.yaml"),
                &format!("{ours}/pod-ready-after-delay.yaml"),
            ]
        );
    }

    #[test]
    fn our_stage_files_are_installed_with_their_contents() {
        let dir = std::env::temp_dir().join(format!("kctrl-stages-test-{}", std::process::id()));
        let paths = stages::install(&dir.join("kwok-stages")).unwrap();
        assert_eq!(paths.len(), stages::STAGES.len());
        for ((_, text), path) in stages::STAGES.iter().zip(&paths) {
            assert_eq!(fs::read_to_string(path).unwrap(), *text);
        }
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn node_manifest_has_the_kwok_annotation() {
        let m = nodes_manifest(3);
        assert_eq!(m.matches("kind: Node").count(), 3);
        assert_eq!(m.matches("kwok.x-k8s.io/node: fake").count(), 3);
        assert!(m.contains("name: kwok-node-2"));
    }

    /// The state file of a cluster `dev` of Kubernetes `version` with its cache at `/c`.
    fn state(version: &str) -> State {
        State {
            name: "dev".into(),
            kubernetes: version.into(),
            etcd: "v3.6.8".into(),
            kwok: "v0.8.0".into(),
            cache_dir: PathBuf::from("/c"),
            nodes: 3,
            ports: Ports {
                etcd_client: 2379,
                etcd_peer: 2380,
                apiserver: 6443,
                controller_manager: 1,
                scheduler: 2,
                kwok: 3,
            },
            started_at: String::new(),
            apiserver_args: Vec::new(),
            controller_manager_args: Vec::new(),
            deployment_controller: false,
        }
    }

    #[test]
    fn env_lists_both_kubeconfigs_the_etcd_endpoint_and_the_running_release() {
        let layout = Layout {
            dir: PathBuf::from("/t/dev"),
        };
        // Whatever release a new `up` would pick, the env describes what runs.
        let vars = ClusterInfo::from_state(&layout, &state("v1.36.5")).env_vars();
        let get = |k: &str| {
            vars.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.clone())
                .unwrap()
        };
        assert_eq!(get("KUBECONFIG"), "/t/dev/kubeconfig/admin.kubeconfig");
        assert_eq!(
            get("KCTRL_CONTROLLER_KUBECONFIG"),
            "/t/dev/kubeconfig/deployment-controller.kubeconfig"
        );
        assert_eq!(get("KCTRL_ETCD_ENDPOINT"), "http://127.0.0.1:2379");
        assert_eq!(get("KCTRL_APISERVER"), "https://127.0.0.1:6443");
        assert_eq!(get("KCTRL_K8S_VERSION"), "v1.36.5");
        assert_eq!(get("KCTRL_KUBECTL"), "/c/bin/kubectl");
    }

    #[test]
    fn a_cluster_runs_from_the_cache_its_state_file_names() {
        for r in crate::cluster::versions::RELEASES {
            let cache = state_cache("dev", &state(r.kubernetes)).unwrap();
            assert_eq!(cache.root, PathBuf::from("/c"));
            assert!(std::ptr::eq(cache.release, r));
        }
        let err = format!("{:#}", state_cache("dev", &state("v1.35.0")).unwrap_err());
        assert!(err.contains("runs Kubernetes v1.35.0"), "{err}");
        assert!(err.contains(&supported_list()), "{err}");
        assert!(err.contains("cargo xtask cluster down --name dev"), "{err}");
        // Processes are recognised by the binaries of the state's cache first, then by those of
        // every supported release (a lost state file); each directory once.
        let roots = cache_roots(Some(&state("v1.35.0")));
        assert_eq!(roots[0], PathBuf::from("/c"));
        let all = Cache::all().unwrap();
        assert_eq!(roots.len(), 1 + all.len());
        assert!(all.iter().all(|c| roots.contains(&c.root)));
        assert_eq!(cache_roots(None).len(), all.len());
    }
}

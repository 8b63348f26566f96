//! Support for the end-to-end suite: which cluster to use, clients for its identities, and
//! per-test namespaces.
//!
//! The suite runs only when `cargo xtask e2e` (or a developer) points it at a cluster with
//! [`KUBECONFIG_ENV`], or when [`TESTENV_ENV`] asks each test binary to start a control plane
//! of its own with `kctrl-testenv` (etcd, kube-apiserver, kube-controller-manager without its
//! Deployment controller, three KWOK nodes; from the cached build, stopped when the binary
//! exits): `KCTRL_E2E_TESTENV=1 cargo test -p kctrl-e2e --test runtime`.
//!
//! There, a test binary whose tests ask for [`cluster_with_deployment_controller`] (the
//! `deployment` target) gets a plane that also runs our `deployment-controller`, as
//! `cargo xtask e2e` runs it: as the controller identity with `deploy/`'s RBAC, the plane's only
//! Deployment controller, its log in [`Cluster::deployment_controller_log`]. The executable is
//! [`process::CONTROLLER_BINARY_ENV`]'s when set, else built first
//! (`cargo build -p kctrl-deployment-controller`, seconds when up to date, so never stale).
//! Every other binary's plane runs no Deployment controller, as in `cargo xtask e2e`'s first
//! phase (`controller_ref` uses Deployments as mere owners). A binary whose tests ask for
//! [`cluster_with_feature_gates`] (the `sharding_gate` target) runs only there, on a plane whose
//! kube-apiserver has those gates; `cargo xtask e2e` runs it so once its own cluster is torn
//! down. What testenv cannot give:
//! compaction ([`Cluster::compact_command`] is `None`; those tests skip).
//!
//! The suite never falls back to `$KUBECONFIG`, so a plain `cargo test`
//! cannot touch whatever cluster a developer's shell happens to point at; without either
//! variable every test returns early and the binary prints one line saying so.

use std::path::PathBuf;
use std::sync::Once;

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kctrl_client::{Api, Client, DeleteParams, PostParams, ResourceRef};

pub mod process;

/// Admin kubeconfig of the cluster under test.
pub const KUBECONFIG_ENV: &str = "KCTRL_E2E_KUBECONFIG";
/// Kubeconfig of the `deployment-controller` identity (optional).
pub const CONTROLLER_KUBECONFIG_ENV: &str = "KCTRL_E2E_CONTROLLER_KUBECONFIG";
/// Command that compacts etcd (optional; local clusters only).
pub const COMPACT_COMMAND_ENV: &str = "KCTRL_E2E_COMPACT_COMMAND";
/// Log of our deployment-controller, set when `cargo xtask e2e` runs it against the cluster.
pub const DEPLOYMENT_CONTROLLER_LOG_ENV: &str = "KCTRL_E2E_DEPLOYMENT_CONTROLLER_LOG";
/// Set (to anything) without [`KUBECONFIG_ENV`]: the test binary runs on a `kctrl-testenv`
/// control plane of its own.
pub const TESTENV_ENV: &str = "KCTRL_E2E_TESTENV";

/// The cluster the suite runs against.
#[derive(Clone, Debug)]
pub struct Cluster {
    /// Admin kubeconfig.
    pub kubeconfig: PathBuf,
    /// Kubeconfig of the deployment-controller identity, when the cluster provides one.
    pub controller_kubeconfig: Option<PathBuf>,
    /// A shell command that compacts etcd at its current revision, when available.
    pub compact_command: Option<String>,
    /// Log of our deployment-controller, when one runs against the cluster.
    pub deployment_controller_log: Option<PathBuf>,
    /// kubectl of the cluster's release: `$KCTRL_KUBECTL` (which `cargo xtask e2e` sets), or
    /// the test environment's.
    pub kubectl: Option<PathBuf>,
}

static SKIP_NOTICE: Once = Once::new();

/// The cluster from the environment, or `None` (after printing one notice per test binary).
/// Under [`TESTENV_ENV`], this test binary's plane, without a Deployment controller.
pub fn cluster() -> Option<Cluster> {
    cluster_for(false)
}

/// [`cluster`] for tests that need our deployment-controller: under [`TESTENV_ENV`], this test
/// binary's plane runs it (see the crate documentation); against [`KUBECONFIG_ENV`]'s cluster,
/// whoever set that variable started it (or not: then
/// [`Cluster::deployment_controller_log`] is `None`). All tests of one binary must ask for the
/// same kind of plane.
pub fn cluster_with_deployment_controller() -> Option<Cluster> {
    cluster_for(true)
}

/// [`cluster`] for tests that need kube-apiserver feature gates off by default, e.g.
/// `"ShardedListAndWatch=true"` (the syntax of `--feature-gates`): under [`TESTENV_ENV`], this
/// test binary's plane is started with them (also when [`KUBECONFIG_ENV`] is set, since that
/// cluster cannot be assumed to have them); without it, `None` after one notice naming the
/// gates, also when [`KUBECONFIG_ENV`] is set. `cargo xtask e2e` runs such binaries on planes of
/// their own once its cluster is gone. All tests of one binary must ask for the same gates.
pub fn cluster_with_feature_gates(gates: &'static str) -> Option<Cluster> {
    if std::env::var_os(TESTENV_ENV).is_some() {
        return Some(testenv_cluster(Plane {
            deployment_controller: false,
            feature_gates: gates,
        }));
    }
    SKIP_NOTICE.call_once(|| {
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr(),
            "e2e: these tests need kube-apiserver feature gates {gates} and run only on a plane \
             of their own: set {TESTENV_ENV}=1 (`cargo xtask e2e` does); skipping them"
        );
    });
    None
}

fn cluster_for(deployment_controller: bool) -> Option<Cluster> {
    if std::env::var_os(KUBECONFIG_ENV).is_none() && std::env::var_os(TESTENV_ENV).is_some() {
        return Some(testenv_cluster(Plane {
            deployment_controller,
            feature_gates: "",
        }));
    }
    let Some(kubeconfig) = std::env::var_os(KUBECONFIG_ENV) else {
        SKIP_NOTICE.call_once(|| {
            // Written to the real stderr: the test harness captures `eprintln!`.
            use std::io::Write;
            let _ = writeln!(
                std::io::stderr(),
                "e2e: {KUBECONFIG_ENV} is not set; skipping tests that need a real cluster \
                 (run them with `cargo xtask e2e`)"
            );
        });
        return None;
    };
    Some(Cluster {
        kubeconfig: PathBuf::from(kubeconfig),
        controller_kubeconfig: std::env::var_os(CONTROLLER_KUBECONFIG_ENV).map(PathBuf::from),
        compact_command: std::env::var(COMPACT_COMMAND_ENV).ok(),
        deployment_controller_log: std::env::var_os(DEPLOYMENT_CONTROLLER_LOG_ENV)
            .map(PathBuf::from),
        kubectl: std::env::var_os("KCTRL_KUBECTL").map(PathBuf::from),
    })
}

/// What a test binary's `kctrl-testenv` plane runs besides etcd, kube-apiserver,
/// kube-controller-manager and the KWOK nodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Plane {
    /// Our deployment-controller.
    deployment_controller: bool,
    /// kube-apiserver feature gates (`--feature-gates` syntax), empty for the defaults.
    feature_gates: &'static str,
}

/// The shared `kctrl-testenv` control plane of this test binary, started on first use, as
/// `plane` asks. Panics with the environment's own message (e.g. the command that builds the
/// binaries) when it cannot start: the variable asked for it.
fn testenv_cluster(plane: Plane) -> Cluster {
    type Started = (Plane, Result<Cluster, String>);
    static STARTED: std::sync::OnceLock<Started> = std::sync::OnceLock::new();
    let (started_as, started) = STARTED.get_or_init(|| {
        // Tests call this from their own runtimes (usually current-thread ones): start the
        // environment on a thread and runtime of its own and keep only what the tests need;
        // the environment itself lives on in kctrl-testenv's static until the process exits.
        let started = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| format!("a runtime to start the test environment: {e}"))?;
            let mut builder = kctrl_testenv::TestEnv::builder()
                .controller_manager(true)
                .kwok_nodes(3);
            if !plane.feature_gates.is_empty() {
                builder = builder.feature_gates(plane.feature_gates);
            }
            if plane.deployment_controller {
                let binary = process::controller_binary_or_build()?;
                builder = builder
                    .deployment_controller(true)
                    .deployment_controller_binary(binary);
            }
            runtime.block_on(async {
                let env = builder.shared().await.map_err(|e| e.to_string())?;
                Ok(Cluster {
                    kubeconfig: env.kubeconfig_path().to_path_buf(),
                    controller_kubeconfig: Some(env.unprivileged_kubeconfig_path().to_path_buf()),
                    compact_command: None,
                    deployment_controller_log: env
                        .deployment_controller_log()
                        .map(|p| p.to_path_buf()),
                    kubectl: Some(env.kubectl().to_path_buf()),
                })
            })
        })
        .join()
        .unwrap_or_else(|_| Err("the thread starting the test environment panicked".to_owned()));
        (plane, started)
    });
    assert_eq!(
        *started_as, plane,
        "this test binary's plane was started as {started_as:?}; its tests must all use \
         `cluster()`, all `cluster_with_deployment_controller()` or all \
         `cluster_with_feature_gates()` with the same gates"
    );
    match started {
        Ok(cluster) => cluster.clone(),
        Err(e) => panic!("{TESTENV_ENV} is set, but the test environment did not start: {e}"),
    }
}

/// Returns from the enclosing test when no cluster is configured (with the given value, in a
/// helper that returns one).
#[macro_export]
macro_rules! require_cluster {
    () => {
        match $crate::cluster() {
            Some(c) => c,
            None => return,
        }
    };
    ($skipped:expr) => {
        match $crate::cluster() {
            Some(c) => c,
            None => return $skipped,
        }
    };
}

impl Cluster {
    /// A client for the admin identity.
    pub fn admin(&self) -> Client {
        client_for(&self.kubeconfig, |_| {})
    }

    /// A client for the admin identity with a custom config tweak (QPS, timeouts, ...).
    pub fn admin_with(&self, tweak: impl FnOnce(&mut kctrl_config::Config)) -> Client {
        client_for(&self.kubeconfig, tweak)
    }

    /// kubectl: [`Cluster::kubectl`] when it exists, else the first `kubectl` on `$PATH`.
    pub fn kubectl_binary(&self) -> Option<PathBuf> {
        if let Some(p) = &self.kubectl {
            return p.is_file().then(|| p.clone());
        }
        std::env::split_paths(&std::env::var_os("PATH")?)
            .map(|dir| dir.join("kubectl"))
            .find(|p| p.is_file())
    }

    /// A client for the deployment-controller identity, if the cluster has one.
    pub fn controller(&self) -> Option<Client> {
        self.controller_kubeconfig
            .as_deref()
            .map(|p| client_for(p, |_| {}))
    }

    /// Compacts etcd at its current revision, if the cluster supports it.
    pub fn compact(&self) -> Option<()> {
        let cmd = self.compact_command.as_deref()?;
        let status = std::process::Command::new("sh")
            .args(["-c", cmd])
            .status()
            .unwrap_or_else(|e| panic!("running the compaction command {cmd:?}: {e}"));
        assert!(
            status.success(),
            "compaction command {cmd:?} failed: {status}"
        );
        Some(())
    }
}

fn client_for(
    kubeconfig: &std::path::Path,
    tweak: impl FnOnce(&mut kctrl_config::Config),
) -> Client {
    let overrides = kctrl_config::ConfigOverrides::default();
    let mut config = kctrl_config::Config::from_flags(Some(kubeconfig), None, &overrides)
        .unwrap_or_else(|e| panic!("loading {}: {e}", kubeconfig.display()));
    tweak(&mut config);
    Client::try_from_config(config).unwrap_or_else(|e| panic!("building a client: {e}"))
}

/// A namespace created for one test and deleted when dropped.
pub struct TestNamespace {
    /// The namespace's name.
    pub name: String,
    client: Client,
}

impl TestNamespace {
    /// Creates a namespace named `<prefix>-<random suffix>`.
    pub async fn create(client: &Client, prefix: &str) -> Self {
        Self::create_named(client, &format!("{prefix}-{:08x}", rand_suffix())).await
    }

    /// Creates the namespace `name` exactly (the caller makes it unique), e.g. to choose
    /// where its hash falls.
    pub async fn create_named(client: &Client, name: &str) -> Self {
        let ns = Namespace {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                ..Default::default()
            },
            ..Default::default()
        };
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &ns)
            .await
            .unwrap_or_else(|e| panic!("creating namespace {name}: {e}"));
        Self {
            name: name.to_owned(),
            client: client.clone(),
        }
    }

    /// Deletes the namespace (best effort; the cluster finishes it in the background).
    pub async fn delete(self) {
        let _ = Api::<Namespace>::all(self.client.clone())
            .delete(&self.name, &DeleteParams::default())
            .await;
    }
}

/// A random number for names unique to one run (of a test, across runs and processes).
pub fn rand_suffix() -> u32 {
    use std::hash::{BuildHasher, RandomState};
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or_default();
    // RandomState is seeded randomly per process; mix in the time for uniqueness across tests.
    RandomState::new().hash_one(nanos) as u32
}

/// A TCP proxy in front of the API server whose connections a test can cut, to simulate a
/// dropped watch or an unreachable server. TLS passes through untouched.
pub struct CuttableProxy {
    addr: std::net::SocketAddr,
    state: std::sync::Arc<ProxyState>,
    accept: tokio::task::JoinHandle<()>,
}

#[derive(Default)]
struct ProxyState {
    refusing: std::sync::atomic::AtomicBool,
    connections: std::sync::Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

impl CuttableProxy {
    /// Starts a proxy on 127.0.0.1 forwarding to `target` (`host:port`).
    pub async fn start(target: String) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("binding the proxy on loopback");
        let addr = listener.local_addr().expect("proxy address");
        let state = std::sync::Arc::new(ProxyState::default());
        let accept_state = state.clone();
        let accept = tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                if accept_state
                    .refusing
                    .load(std::sync::atomic::Ordering::SeqCst)
                {
                    drop(inbound);
                    continue;
                }
                let target = target.clone();
                let task = tokio::spawn(async move {
                    if let Ok(mut outbound) = tokio::net::TcpStream::connect(&target).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
                let mut conns = accept_state
                    .connections
                    .lock()
                    .unwrap_or_else(|p| p.into_inner());
                conns.retain(|t| !t.is_finished());
                conns.push(task);
            }
        });
        Self {
            addr,
            state,
            accept,
        }
    }

    /// The proxy's `https://127.0.0.1:<port>` URL.
    pub fn url(&self) -> String {
        format!("https://{}", self.addr)
    }

    /// Drops every open connection and refuses new ones until [`CuttableProxy::restore`].
    pub fn cut(&self) {
        self.state
            .refusing
            .store(true, std::sync::atomic::Ordering::SeqCst);
        let conns = std::mem::take(
            &mut *self
                .state
                .connections
                .lock()
                .unwrap_or_else(|p| p.into_inner()),
        );
        for c in conns {
            c.abort();
        }
    }

    /// Accepts connections again.
    pub fn restore(&self) {
        self.state
            .refusing
            .store(false, std::sync::atomic::Ordering::SeqCst);
    }
}

impl Drop for CuttableProxy {
    fn drop(&mut self) {
        self.accept.abort();
        self.cut();
    }
}

impl Cluster {
    /// An admin client whose connections go through `proxy`.
    pub fn admin_via(&self, proxy: &CuttableProxy) -> Client {
        let url = proxy.url();
        self.admin_with(|c| {
            c.server = url.parse().expect("proxy URL");
        })
    }

    /// `host:port` of the API server in the admin kubeconfig.
    pub fn apiserver_host_port(&self) -> String {
        let overrides = kctrl_config::ConfigOverrides::default();
        let config = kctrl_config::Config::from_flags(Some(&self.kubeconfig), None, &overrides)
            .unwrap_or_else(|e| panic!("loading {}: {e}", self.kubeconfig.display()));
        let host = config.server.host_str().expect("server host").to_owned();
        let port = config.server.port_or_known_default().expect("server port");
        format!("{host}:{port}")
    }
}

/// Polls the async `check` every 200 ms until it returns `Some`, and returns that value; panics
/// naming `what` (and the last value seen, via `Debug` of the `Err` side) after `timeout`.
pub async fn eventually<T, E: std::fmt::Debug, F, Fut>(
    what: &str,
    timeout: std::time::Duration,
    mut check: F,
) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, E>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        match check().await {
            Ok(v) => return v,
            Err(last) => {
                if tokio::time::Instant::now() > deadline {
                    panic!("timed out after {timeout:?} waiting for {what}; last seen: {last:?}");
                }
            }
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

/// Polls `check` every 100 ms until it returns true or `timeout` passes; panics naming `what`.
pub async fn wait_until(what: &str, timeout: std::time::Duration, mut check: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + timeout;
    while !check() {
        if tokio::time::Instant::now() > deadline {
            panic!("timed out after {timeout:?} waiting for {what}");
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// A label map from `(key, value)` pairs.
pub fn labels(pairs: &[(&str, &str)]) -> std::collections::BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// How long [`install_crd`] and [`uninstall_crd`] wait.
const CRD_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// Creates `crd` (deleting a leftover of an earlier run first) and waits until it is
/// Established and its resource is served; panics after a minute.
pub async fn install_crd(client: &Client, crd: &CustomResourceDefinition, resource: &ResourceRef) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let name = crd.metadata.name.clone().unwrap();
    uninstall_crd(client, &name).await;
    crds.create(&PostParams::default(), crd)
        .await
        .unwrap_or_else(|e| panic!("creating the CRD {name}: {e}"));
    let mut established = false;
    let deadline = tokio::time::Instant::now() + CRD_TIMEOUT;
    while !established {
        let got = crds.get(&name).await.unwrap();
        let conditions = got.status.and_then(|s| s.conditions).unwrap_or_default();
        for c in &conditions {
            assert!(
                !(c.type_ == "NonStructuralSchema" && c.status == "True"),
                "{name}: {:?}",
                c.message
            );
        }
        established = conditions
            .iter()
            .any(|c| c.type_ == "Established" && c.status == "True");
        assert!(
            tokio::time::Instant::now() < deadline,
            "{name} not Established: {conditions:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    // Established comes a moment before every apiserver handler serves the resource.
    let mut served = false;
    while !served {
        served = client.is_served(resource).await.unwrap();
        assert!(tokio::time::Instant::now() < deadline, "{name} not served");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// Deletes the CRD `name` if it exists and waits until it is gone; panics after a minute.
pub async fn uninstall_crd(client: &Client, name: &str) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    if crds.get_opt(name).await.unwrap().is_none() {
        return;
    }
    let _ = crds.delete(name, &DeleteParams::default()).await;
    let deadline = tokio::time::Instant::now() + CRD_TIMEOUT;
    while crds.get_opt(name).await.unwrap().is_some() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the CRD {name} is still there"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

//! [`TestEnv`] and its builder.

use std::path::{Path, PathBuf};
use std::process::Child;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kctrl_client::Client;
use kctrl_client::config::{Config, ConfigOverrides};
use kctrl_cluster::plane::{self, ClusterInfo, Component, Layout, UpOptions};
use kctrl_cluster::versions::{DEFAULT_RELEASE, KUBE_VERSION_ENV, Release};

use crate::Error;
use crate::assets::{self, ResolvedBinary};
use crate::reaper::{KEEP_MARKER, Reaper};

/// The cluster name of every environment (it names the etcd member and the certificates; the
/// environments differ by directory and ports).
const NAME: &str = "testenv";

/// Numbers the environments of one process, for their directories.
static NEXT: AtomicU32 = AtomicU32::new(0);

/// How to start a [`TestEnv`]; from [`TestEnv::builder`].
///
/// The default is the smallest useful plane: etcd and kube-apiserver of the release that
/// `$KCTRL_KUBE_VERSION` names (as `cargo xtask` commands take it), else the newest supported,
/// nothing else. That is enough for controllers that only read and write objects; add
/// [`controller_manager`](Self::controller_manager) for garbage collection, namespace deletion,
/// ServiceAccounts and the built-in controllers (ReplicaSets, Jobs…; never its Deployment
/// controller), [`kwok_nodes`](Self::kwok_nodes) for nodes on which pods are scheduled and
/// become Running and Ready, and [`deployment_controller`](Self::deployment_controller) for
/// kctrl's own Deployment controller.
#[derive(Clone, Debug, Default)]
pub struct TestEnvBuilder {
    /// `None`: from the environment, else the default.
    pub(crate) release: Option<&'static Release>,
    kwok_nodes: usize,
    controller_manager: bool,
    /// kube-controller-manager runs without its ReplicaSet controller.
    without_replicaset_controller: bool,
    apiserver_args: Vec<String>,
    feature_gates: Vec<String>,
    crds: Vec<CustomResourceDefinition>,
    pub(crate) build_if_missing: bool,
    /// See [`binary_assets`](Self::binary_assets) (in `assets.rs`).
    pub(crate) binary_assets: Option<PathBuf>,
    /// See [`download`](Self::download) (in `assets.rs`).
    pub(crate) download: Option<bool>,
    deployment_controller: bool,
    deployment_controller_binary: Option<PathBuf>,
}

impl TestEnvBuilder {
    /// The Kubernetes release, e.g. `"1.36"`, `"1.37.2"` or `"v1.37.2"`; one of
    /// [`kctrl_cluster::versions::RELEASES`]. An unsupported version is an error naming the
    /// supported ones. Without it: `$KCTRL_KUBE_VERSION`, else the newest.
    pub fn kube_version(mut self, version: &str) -> Result<Self, Error> {
        self.release =
            Some(Release::parse(version).map_err(|e| Error::UnsupportedVersion(format!("{e:#}")))?);
        Ok(self)
    }

    /// The release to run: as set, else from the environment, else the newest.
    pub(crate) fn release(&self) -> Result<&'static Release, Error> {
        if let Some(r) = self.release {
            return Ok(r);
        }
        match std::env::var(KUBE_VERSION_ENV) {
            Ok(v) if !v.is_empty() => Release::parse(&v)
                .map_err(|e| Error::UnsupportedVersion(format!("{e:#} (from {KUBE_VERSION_ENV})"))),
            _ => Ok(DEFAULT_RELEASE),
        }
    }

    /// `n` fake nodes run by KWOK, plus kube-scheduler to place pods on them: pods become
    /// Running and Ready at once (or fail to pull an image whose tag is `:404`, see the KWOK
    /// stages of `kctrl-cluster`). 0 (the default) runs neither. Pods need their namespace's
    /// `default` ServiceAccount, which kube-controller-manager creates: use with
    /// [`controller_manager`](Self::controller_manager).
    pub fn kwok_nodes(mut self, n: usize) -> Self {
        self.kwok_nodes = n;
        self
    }

    /// Also run kube-controller-manager, with every controller it runs by default except its
    /// Deployment controller.
    pub fn controller_manager(mut self, on: bool) -> Self {
        self.controller_manager = on;
        self
    }

    /// Whether kube-controller-manager (with [`controller_manager`](Self::controller_manager))
    /// runs its ReplicaSet controller: on by default; off for a plane on which a ReplicaSet
    /// controller of one's own (such as `kctrl-replicaset`'s) is the only one.
    pub fn controller_manager_replicaset_controller(mut self, on: bool) -> Self {
        self.without_replicaset_controller = !on;
        self
    }

    /// Also run kctrl's Deployment controller, the `deployment-controller` executable of the
    /// `kctrl-deployment-controller` package, as the plane's only Deployment controller
    /// (kube-controller-manager never runs its own, and the start fails if any other runs
    /// against the plane). For Deployments to roll out, add
    /// [`controller_manager`](Self::controller_manager) (its ReplicaSet controller creates the
    /// pods) and [`kwok_nodes`](Self::kwok_nodes) (pods become Ready).
    ///
    /// It runs as the ServiceAccount `kube-system/kctrl-deployment-controller` (the identity of
    /// [`TestEnv::unprivileged_kubeconfig_path`]) with exactly the RBAC of the repository's
    /// `deploy/` (applied at start; a copy travels with this crate), with leader election and
    /// without its HTTPS endpoints (`--secure-port 0`), logging to
    /// [`TestEnv::deployment_controller_log`]. `start` returns once its caches are synced. It is
    /// stopped first when the environment stops (drop, panic, the reaper at process exit).
    ///
    /// The executable is, in this order:
    /// 1. the path given to [`deployment_controller_binary`](Self::deployment_controller_binary);
    /// 2. the path in `$KCTRL_DEPLOYMENT_CONTROLLER` ([`DEPLOYMENT_CONTROLLER_ENV`](crate::DEPLOYMENT_CONTROLLER_ENV));
    /// 3. with [`build_if_missing`](Self::build_if_missing), in a kctrl checkout: the one
    ///    [`build_deployment_controller`](crate::build_deployment_controller) builds at every
    ///    start (`cargo build -p kctrl-deployment-controller --bin deployment-controller`,
    ///    seconds when nothing changed, so never older than the sources);
    /// 4. `target/debug/deployment-controller` of the kctrl checkout this crate was built in
    ///    (as that command leaves it; whatever its age);
    /// 5. `deployment-controller` on `$PATH` (`cargo install kctrl-deployment-controller`).
    ///
    /// Found nowhere, the start fails with [`Error::DeploymentControllerNotFound`], naming
    /// the places and the command that builds it, before anything is started.
    pub fn deployment_controller(mut self, on: bool) -> Self {
        self.deployment_controller = on;
        self
    }

    /// The `deployment-controller` executable that
    /// [`deployment_controller`](Self::deployment_controller) runs, instead of looking for it.
    pub fn deployment_controller_binary(mut self, path: impl Into<PathBuf>) -> Self {
        self.deployment_controller_binary = Some(path.into());
        self
    }

    /// An extra kube-apiserver flag (`--flag=value`), after ours (later flags win).
    pub fn apiserver_arg(mut self, flag: impl Into<String>) -> Self {
        self.apiserver_args.push(flag.into());
        self
    }

    /// kube-apiserver feature gates, `Name=true` or `Name=false` (several may be joined with
    /// commas), e.g. `ShardedListAndWatch=true` for server-side sharded list and watch;
    /// repeatable. A malformed entry fails the start with [`Error::Start`] naming it, before
    /// anything runs.
    ///
    /// ```no_run
    /// # async fn example() -> Result<(), kctrl_testenv::Error> {
    /// let env = kctrl_testenv::TestEnv::builder()
    ///     .feature_gates("ShardedListAndWatch=true")
    ///     .start()
    ///     .await?;
    /// # let _ = env; Ok(()) }
    /// ```
    pub fn feature_gates(mut self, gates: impl Into<String>) -> Self {
        self.feature_gates.push(gates.into());
        self
    }

    /// CustomResourceDefinitions to install once the plane is up; `start` returns when each is
    /// Established and served (see [`TestEnv::install_crd`]).
    pub fn crds(mut self, crds: impl IntoIterator<Item = CustomResourceDefinition>) -> Self {
        self.crds.extend(crds);
        self
    }

    /// Build the control-plane binaries that no other source has (the last of the
    /// [sources](crate#the-binaries); into the cache, from the Go module proxy;
    /// needs Go and 20 minutes or more on 2 cores; progress on stderr) instead of failing
    /// with [`Error::NotBuilt`]; with [`deployment_controller`](Self::deployment_controller),
    /// also build that in a kctrl checkout (see there).
    pub fn build_if_missing(mut self, on: bool) -> Self {
        self.build_if_missing = on;
        self
    }

    /// Starts an environment of its own, stopped when the returned value is dropped.
    pub async fn start(self) -> Result<TestEnv, Error> {
        let crds = self.crds.clone();
        let resolved = assets::resolve(assets::Inputs::from_builder(&self)?).await?;
        let env = tokio::task::spawn_blocking(move || TestEnv::start_blocking(&self, resolved))
            .await
            .map_err(|e| Error::Start(format!("the start-up task failed: {e}")))??;
        for crd in crds {
            env.install_crd(crd).await?;
        }
        Ok(env)
    }

    /// The environment shared by every test of this test binary: started by the first call,
    /// returned as it is by the later ones, stopped when the process exits.
    ///
    /// `cargo test` runs the tests of one binary on threads of one process, each
    /// `#[tokio::test]` on a runtime of its own; the environment lives in a `static` of that
    /// process, which is never dropped. The reaper process started with it (see the crate
    /// documentation) stops it and removes its directory when the process exits, whether the
    /// tests passed, failed, panicked or the binary was killed. The configuration of the first
    /// call wins; a later call asking for another one gets [`Error::SharedMismatch`]. Tests
    /// sharing it should work in namespaces of their own.
    pub async fn shared(self) -> Result<&'static TestEnv, Error> {
        /// The shared environment (or why it failed), and the configuration it was started with.
        static SHARED: OnceLock<Result<(TestEnv, String), String>> = OnceLock::new();
        /// Serialises the first start across the tests' runtimes.
        static STARTING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

        let asked = self.describe()?;
        if SHARED.get().is_none() {
            let _guard = STARTING.lock().await;
            if SHARED.get().is_none() {
                let started = self.start().await.map_err(|e| e.to_string());
                let _ = SHARED.set(started.map(|env| (env, asked.clone())));
            }
        }
        match SHARED.get().expect("set above") {
            Ok((env, running)) if *running == asked => Ok(env),
            Ok((_, running)) => Err(Error::SharedMismatch {
                running: running.clone(),
                asked,
            }),
            Err(e) => Err(Error::SharedFailed(e.clone())),
        }
    }

    /// The configuration in words, to compare shared environments and report a mismatch.
    fn describe(&self) -> Result<String, Error> {
        let crds: Vec<&str> = self
            .crds
            .iter()
            .filter_map(|c| c.metadata.name.as_deref())
            .collect();
        Ok(format!(
            "Kubernetes {} ({}), {} KWOK node(s), kube-controller-manager {}, our \
             deployment-controller {}, apiserver flags {:?}, feature gates {:?}, CRDs {:?}",
            self.release()?.kubernetes,
            assets::Inputs::from_builder(self)?.describe(),
            self.kwok_nodes,
            match (self.controller_manager, self.without_replicaset_controller) {
                (false, _) => "off",
                (true, false) => "on",
                (true, true) => "on without its ReplicaSet controller",
            },
            match (
                self.deployment_controller,
                &self.deployment_controller_binary
            ) {
                (false, _) => "off".to_owned(),
                (true, None) => "on".to_owned(),
                (true, Some(p)) => format!("on ({})", p.display()),
            },
            self.apiserver_args,
            self.feature_gates,
            crds
        ))
    }

    /// The components to run.
    pub(crate) fn components(&self) -> Vec<Component> {
        let mut c = vec![Component::Etcd, Component::Apiserver];
        if self.controller_manager {
            c.push(Component::ControllerManager);
        }
        if self.kwok_nodes > 0 {
            c.extend([Component::Scheduler, Component::Kwok]);
        }
        c
    }
}

/// A running control plane for tests: etcd and kube-apiserver on loopback (and, as configured,
/// kube-controller-manager, kube-scheduler and KWOK), in a directory and on ports of its own.
///
/// Dropping it stops every process and removes its directory (kept, with the components' logs,
/// when the drop happens during a panic, so a failed test can be investigated; the path is
/// printed). See the [crate documentation](crate) for an example.
#[derive(Debug)]
pub struct TestEnv {
    layout: Layout,
    info: ClusterInfo,
    /// `None` once stopped.
    reaper: Mutex<Option<Reaper>>,
    /// Our deployment-controller, when it runs (to reap it once the plane's stop stopped it).
    controller: Mutex<Option<Child>>,
    deployment_controller_log: Option<PathBuf>,
    started_in: Duration,
    binaries: Vec<ResolvedBinary>,
}

impl TestEnv {
    /// A builder with the defaults (etcd and kube-apiserver of the newest supported release).
    pub fn builder() -> TestEnvBuilder {
        TestEnvBuilder::default()
    }

    /// [`TestEnvBuilder::start`] with the defaults: a plane of this test's own.
    pub async fn start() -> Result<TestEnv, Error> {
        TestEnv::builder().start().await
    }

    /// [`TestEnvBuilder::shared`] with the defaults: the plane of this test binary.
    pub async fn shared() -> Result<&'static TestEnv, Error> {
        TestEnv::builder().shared().await
    }

    fn start_blocking(b: &TestEnvBuilder, resolved: assets::Resolved) -> Result<TestEnv, Error> {
        let t0 = Instant::now();
        // Before anything is started: a missing controller fails fast.
        let controller_binary = if b.deployment_controller {
            Some(crate::controller::locate(
                b.deployment_controller_binary.as_deref(),
                b.build_if_missing,
            )?)
        } else {
            None
        };
        let dir = std::env::temp_dir().join(format!(
            "kctrl-testenv-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let layout = Layout::at(&dir);
        let run_dir = layout.pid_file(Component::Etcd);
        let run_dir = run_dir.parent().expect("pid files are in a directory");
        // First, so that a crash during start-up is cleaned up too.
        let reaper = Reaper::spawn(run_dir, &dir)?;
        let opts = UpOptions {
            name: NAME.to_owned(),
            nodes: b.kwok_nodes,
            apiserver_args: b.apiserver_args.clone(),
            feature_gates: b.feature_gates.clone(),
            scheduler_args: Vec::new(),
            controller_manager_args: Vec::new(),
            // kube-controller-manager's own Deployment controller: never (ours, if any, is
            // started below as the plane's only one).
            deployment_controller: false,
            replicaset_controller: !b.without_replicaset_controller,
            release: resolved.binaries.release,
        };
        // What was started is stopped; the logs are kept for the report.
        let failed = |reaper: Reaper, e: String| {
            let _ = std::fs::write(dir.join(KEEP_MARKER), "");
            reaper.finish();
            Error::Start(format!(
                "{e}\n(logs of the components: {})",
                layout.logs().display()
            ))
        };
        let info = match plane::start_with(&layout, &resolved.binaries, &opts, &b.components()) {
            Ok(info) => info,
            // start_with stopped what it started.
            Err(e) => return Err(failed(reaper, format!("{e:#}"))),
        };
        let controller = match &controller_binary {
            Some(binary) => match crate::controller::start(&layout, &info, binary) {
                Ok(child) => Some(child),
                Err(e) => {
                    let _ = plane::stop(&layout);
                    return Err(failed(reaper, e.to_string()));
                }
            },
            None => None,
        };
        Ok(TestEnv {
            deployment_controller_log: controller
                .is_some()
                .then(|| crate::controller::log_path(&layout)),
            controller: Mutex::new(controller),
            layout,
            info,
            reaper: Mutex::new(Some(reaper)),
            started_in: t0.elapsed(),
            binaries: resolved.origins,
        })
    }

    /// A new client for the admin identity (`system:masters`).
    ///
    /// A new one per call, on purpose: a client keeps connections that belong to the Tokio
    /// runtime it first ran on, and each `#[tokio::test]` has its own, so a client must not
    /// outlive its test when the environment is shared. Building one takes a few milliseconds.
    pub fn client(&self) -> Result<Client, Error> {
        self.client_with(|_| {})
    }

    /// [`client`](Self::client) with the configuration adjusted first (QPS, timeouts, user
    /// agent…).
    pub fn client_with(&self, tweak: impl FnOnce(&mut Config)) -> Result<Client, Error> {
        let path = self.kubeconfig_path();
        let mut config = Config::from_flags(Some(path), None, &ConfigOverrides::default())
            .map_err(|source| Error::Kubeconfig {
                path: path.to_owned(),
                source: Box::new(source),
            })?;
        tweak(&mut config);
        Ok(Client::try_from_config(config)?)
    }

    /// The admin kubeconfig, for tools (kubectl) and processes the test starts.
    pub fn kubeconfig_path(&self) -> &Path {
        &self.info.admin_kubeconfig
    }

    /// A kubeconfig that authenticates as the ServiceAccount
    /// `kube-system/kctrl-deployment-controller`, with no RBAC grants: a least-privilege
    /// identity for tests of authorization.
    pub fn unprivileged_kubeconfig_path(&self) -> &Path {
        &self.info.controller_kubeconfig
    }

    /// The API server's URL, `https://127.0.0.1:<port>`.
    pub fn apiserver_url(&self) -> &str {
        &self.info.apiserver_url
    }

    /// The Kubernetes release the plane runs, e.g. `v1.37.2`.
    pub fn kubernetes_version(&self) -> &str {
        &self.info.kubernetes_version
    }

    /// kubectl of the same release (from wherever the binaries came from).
    pub fn kubectl(&self) -> &Path {
        &self.info.kubectl
    }

    /// Every binary the plane runs, with where it came from (see the
    /// [crate documentation](crate#the-binaries)).
    pub fn binaries(&self) -> &[ResolvedBinary] {
        &self.binaries
    }

    /// The log of our deployment-controller, when it runs (see
    /// [`TestEnvBuilder::deployment_controller`]): its events and decisions, for a failed test's
    /// report.
    pub fn deployment_controller_log(&self) -> Option<&Path> {
        self.deployment_controller_log.as_deref()
    }

    /// The environment's directory (PKI, kubeconfigs, etcd data, `logs/`).
    pub fn dir(&self) -> &Path {
        &self.layout.dir
    }

    /// The components' logs.
    pub fn logs_dir(&self) -> PathBuf {
        self.layout.logs()
    }

    /// How long the start took (building excluded).
    pub fn started_in(&self) -> Duration {
        self.started_in
    }

    /// Creates `crd` and waits (up to a minute) until it is Established and its resource is
    /// served, so that the next request for it does not get a 404. A CRD of that name that
    /// already exists is left as it is.
    pub async fn install_crd(&self, crd: CustomResourceDefinition) -> Result<(), Error> {
        crate::crd::install(&self.client()?, crd, Duration::from_secs(60)).await
    }

    /// Starts `server` on loopback with a certificate of its own, registers its webhooks with
    /// this environment's API server, points the conversion of those of `crds` whose kinds it
    /// converts at it (creating them if needed), and returns once the API server calls it;
    /// see [`crate::webhook`].
    pub async fn install_webhooks(
        &self,
        server: kctrl_webhook::ServerBuilder,
        crds: impl IntoIterator<Item = CustomResourceDefinition>,
    ) -> Result<crate::webhook::InstalledWebhooks, Error> {
        crate::webhook::install(&self.client()?, server, crds).await
    }

    /// Stops every process and removes the directory now; what dropping does, for callers
    /// that want it at a point of their choosing. Reports a failure to stop instead of
    /// printing it.
    pub fn stop(self) -> Result<(), Error> {
        self.stop_inner(false)
    }

    fn stop_inner(&self, keep_dir: bool) -> Result<(), Error> {
        let Some(reaper) = self.reaper.lock().unwrap_or_else(|e| e.into_inner()).take() else {
            return Ok(());
        };
        // Our deployment-controller first (an attached process), then the components.
        let stopped = plane::stop(&self.layout).map_err(|e| Error::Stop(format!("{e:#}")));
        if let Some(mut child) = self
            .controller
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        {
            // Stopped above (or gone): only reaped here.
            let _ = child.kill();
            let _ = child.wait();
        }
        if keep_dir {
            let _ = std::fs::write(self.layout.dir.join(KEEP_MARKER), "");
        }
        reaper.finish();
        stopped.map(|_| ())
    }
}

impl Drop for TestEnv {
    fn drop(&mut self) {
        let panicking = std::thread::panicking();
        if panicking {
            eprintln!(
                "kctrl-testenv: keeping {} (the components' logs are in logs/)",
                self.layout.dir.display()
            );
        }
        if let Err(e) = self.stop_inner(panicking) {
            eprintln!("kctrl-testenv: stopping the control plane: {e}");
        }
    }
}

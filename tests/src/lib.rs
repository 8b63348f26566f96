//! Support for the end-to-end suite: which cluster to use, clients for its identities, and
//! per-test namespaces.
//!
//! The suite runs only when `cargo xtask e2e` (or a developer) points it at a cluster with
//! [`KUBECONFIG_ENV`]. It never falls back to `$KUBECONFIG`, so a plain `cargo test` cannot
//! touch whatever cluster a developer's shell happens to point at; without the variable every
//! test returns early and the binary prints one line saying so.

use std::path::PathBuf;
use std::sync::Once;

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kctrl_client::{Api, Client, DeleteParams, PostParams};

/// Admin kubeconfig of the cluster under test.
pub const KUBECONFIG_ENV: &str = "KCTRL_E2E_KUBECONFIG";
/// Kubeconfig of the `deployment-controller` identity (optional).
pub const CONTROLLER_KUBECONFIG_ENV: &str = "KCTRL_E2E_CONTROLLER_KUBECONFIG";
/// Command that compacts etcd (optional; local clusters only).
pub const COMPACT_COMMAND_ENV: &str = "KCTRL_E2E_COMPACT_COMMAND";

/// The cluster the suite runs against.
#[derive(Clone, Debug)]
pub struct Cluster {
    /// Admin kubeconfig.
    pub kubeconfig: PathBuf,
    /// Kubeconfig of the deployment-controller identity, when the cluster provides one.
    pub controller_kubeconfig: Option<PathBuf>,
    /// A shell command that compacts etcd at its current revision, when available.
    pub compact_command: Option<String>,
}

static SKIP_NOTICE: Once = Once::new();

/// The cluster from the environment, or `None` (after printing one notice per test binary).
pub fn cluster() -> Option<Cluster> {
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
    })
}

/// Returns from the enclosing test when no cluster is configured.
#[macro_export]
macro_rules! require_cluster {
    () => {
        match $crate::cluster() {
            Some(c) => c,
            None => return,
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
        let name = format!("{prefix}-{:08x}", rand_suffix());
        let ns = Namespace {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                ..Default::default()
            },
            ..Default::default()
        };
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &ns)
            .await
            .unwrap_or_else(|e| panic!("creating namespace {name}: {e}"));
        Self {
            name,
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

fn rand_suffix() -> u32 {
    use std::hash::{BuildHasher, RandomState};
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or_default();
    // RandomState is seeded randomly per process; mix in the time for uniqueness across tests.
    RandomState::new().hash_one(nanos) as u32
}

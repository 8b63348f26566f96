//! The error of every fallible operation of this crate.

use std::path::PathBuf;

/// What went wrong starting or using a [`TestEnv`](crate::TestEnv).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Control-plane binaries the environment needs were found nowhere: not in the user's
    /// binaries (`TEST_ASSET_*`, `$KUBEBUILDER_ASSETS`,
    /// [`binary_assets`](crate::TestEnvBuilder::binary_assets)), not in the cache, and the
    /// environment was allowed neither to download them
    /// ([`download`](crate::TestEnvBuilder::download)) nor to build them
    /// ([`build_if_missing`](crate::TestEnvBuilder::build_if_missing)). The message names
    /// every way to provide them.
    #[error(
        "the control-plane binaries {missing} of Kubernetes {release} were found nowhere \
         (looked in: {looked_in}). Any one of these provides them: point $KUBEBUILDER_ASSETS \
         (or `TestEnv::builder().binary_assets(dir)`) at a directory holding etcd, \
         kube-apiserver and kubectl (setup-envtest's layout; kube-controller-manager, \
         kube-scheduler and kwok are not part of it), or name each file with \
         TEST_ASSET_<NAME>; allow downloading the official release binaries with \
         KCTRL_TESTENV_DOWNLOAD=1 or `TestEnv::builder().download(true)` (not kwok, which \
         publishes no checksums); build them once with `cargo xtask cluster build \
         --kube-version {release}` in a kctrl checkout (20 minutes or more on a cold cache; \
         set KCTRL_CACHE_DIR if the cache lives elsewhere than {}); or let the environment \
         build them with `TestEnv::builder().build_if_missing(true)`",
        cache.display()
    )]
    NotBuilt {
        /// The Kubernetes release asked for, e.g. `v1.37.2`.
        release: String,
        /// The cache directory of that release.
        cache: PathBuf,
        /// The binaries missing, comma-separated.
        missing: String,
        /// Where they were looked for, comma-separated.
        looked_in: String,
    },
    /// Our `deployment-controller` executable, asked for with
    /// [`TestEnvBuilder::deployment_controller`](crate::TestEnvBuilder::deployment_controller),
    /// is not where it was looked for.
    #[error(
        "our deployment-controller is not built: looked for {looked_for}; build it with \
         `{build}` in a kctrl checkout, or install it (`cargo install \
         kctrl-deployment-controller`) and put it on $PATH or name it with ${env}, or let the \
         environment build it with `TestEnv::builder().build_if_missing(true)`",
        build = crate::BUILD_COMMAND,
        env = crate::DEPLOYMENT_CONTROLLER_ENV
    )]
    DeploymentControllerNotFound {
        /// Where it was looked for, in order.
        looked_for: String,
    },
    /// The Kubernetes version asked for is not one the control plane supports.
    #[error("{0}")]
    UnsupportedVersion(String),
    /// A binary of the user's (`TEST_ASSET_*`, `$KUBEBUILDER_ASSETS`,
    /// [`binary_assets`](crate::TestEnvBuilder::binary_assets)) is unusable, or the
    /// binaries of the version it runs cannot all be found; the message says what to do.
    #[error("{0}")]
    Assets(String),
    /// A release binary or its checksum file could not be downloaded.
    #[error("downloading {url}: {reason}")]
    Download {
        /// What was being downloaded.
        url: String,
        /// Why it failed.
        reason: String,
    },
    /// A downloaded file's SHA-256 is not the published one; the file was removed and nothing
    /// was installed.
    #[error(
        "refusing the download of {url}: its SHA-256 is {actual}, but the published checksum \
         is {expected}; the file was removed. A corrupted transfer or a mirror serving other \
         files: try again, or check the mirror ($KCTRL_KUBERNETES_DOWNLOAD_URL, \
         $KCTRL_ETCD_DOWNLOAD_URL)"
    )]
    ChecksumMismatch {
        /// The file's URL.
        url: String,
        /// The digest its checksum file gives.
        expected: String,
        /// The digest of what arrived.
        actual: String,
    },
    /// Locating the cache or building the binaries into it failed.
    #[error("building the control-plane binaries: {0}")]
    Build(String),
    /// A component did not start, or the plane did not become usable.
    #[error("starting the control plane: {0}")]
    Start(String),
    /// A component did not stop (it survived SIGKILL).
    #[error("stopping the control plane: {0}")]
    Stop(String),
    /// The environment shared by this test binary could not be started by an earlier call;
    /// later calls report the same failure instead of trying again.
    #[error("the shared test environment of this test binary failed to start: {0}")]
    SharedFailed(String),
    /// [`TestEnvBuilder::shared`](crate::TestEnvBuilder::shared) was called with a configuration
    /// other than the one the shared environment runs.
    #[error(
        "the shared test environment of this test binary runs another configuration ({running}) \
         than asked ({asked}); every test of one binary must ask for the same one, or start an \
         environment of its own with `start()`"
    )]
    SharedMismatch {
        /// The configuration it runs.
        running: String,
        /// The configuration asked for.
        asked: String,
    },
    /// The environment's own directory or the process that cleans up after it could not be
    /// created.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The admin kubeconfig could not be turned into a client configuration.
    #[error("loading the kubeconfig {}: {source}", path.display())]
    Kubeconfig {
        /// The kubeconfig.
        path: PathBuf,
        /// The underlying error.
        source: Box<kctrl_client::config::ConfigError>,
    },
    /// A request to the API server failed.
    #[error(transparent)]
    Client(Box<kctrl_client::Error>),
    /// A test's webhook server could not be started or registered.
    #[error("webhooks: {0}")]
    Webhook(String),
    /// A CustomResourceDefinition was rejected, or was not Established and served in time.
    #[error("CustomResourceDefinition {name}: {reason}")]
    Crd {
        /// Its name.
        name: String,
        /// What went wrong.
        reason: String,
    },
}

impl From<kctrl_client::Error> for Error {
    fn from(e: kctrl_client::Error) -> Self {
        Error::Client(Box::new(e))
    }
}

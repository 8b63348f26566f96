//! A real Kubernetes API server for a controller's tests: etcd and kube-apiserver on loopback,
//! optionally kube-controller-manager (without its Deployment controller), KWOK's fake nodes
//! and kctrl's own Deployment controller, started from the binaries [`kctrl_cluster`] builds from upstream's Go modules, and
//! stopped when the environment is dropped, also when the test panics. What controller-runtime's
//! `envtest` is to Go controllers.
//!
//! ```no_run
//! use k8s_openapi::api::core::v1::ConfigMap;
//! use kctrl_client::{Api, PostParams};
//! use kctrl_testenv::TestEnv;
//!
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! // In a #[tokio::test]:
//! let env = TestEnv::start().await?; // etcd + kube-apiserver, ~10 s
//! let client = env.client()?;
//! let cms: Api<ConfigMap> = Api::namespaced(client, "default");
//! cms.create(&PostParams::default(), &ConfigMap::default()).await.ok();
//! // kubectl works too: env.kubectl() with --kubeconfig env.kubeconfig_path().
//! # Ok(()) }
//! // Dropping `env` stops the processes and removes its directory.
//! ```
//!
//! `crates/testenv/tests/controller.rs` in the kctrl repository is a complete example: a small
//! controller (an informer and a work queue) that creates a ConfigMap for each object of a
//! custom resource, tested against a real API server.
//!
//! # The binaries
//!
//! Each binary the plane needs (etcd, kube-apiserver and kubectl always;
//! kube-controller-manager, kube-scheduler and KWOK when asked for) comes from the first of
//! these sources that has it:
//!
//! 1. **Your binaries**, as controller-runtime's envtest finds them: the file named by
//!    `TEST_ASSET_<NAME>` ([`TEST_ASSET_ENV_PREFIX`]: `TEST_ASSET_ETCD`,
//!    `TEST_ASSET_KUBE_APISERVER`, `TEST_ASSET_KUBECTL`, and likewise
//!    `TEST_ASSET_KUBE_CONTROLLER_MANAGER`, `TEST_ASSET_KUBE_SCHEDULER`), else the directory
//!    `$KUBEBUILDER_ASSETS` ([`KUBEBUILDER_ASSETS_ENV`]), else the one given to
//!    [`TestEnvBuilder::binary_assets`]. The directory has setup-envtest's layout (`etcd`,
//!    `kube-apiserver`, `kubectl` directly in it), so the directory a Go project's CI already
//!    caches works as it is (`export KUBEBUILDER_ASSETS=$(setup-envtest use 1.37 -p path)`).
//!    A variable set but empty is an error naming it (as in envtest, a set variable is the
//!    answer, so an empty one does not fall through to the next source).
//!    When kube-apiserver comes from here, its `--version` decides the Kubernetes version of
//!    the plane (printed on stderr with where it came from): one outside 1.33–1.37, what kctrl
//!    supports, is refused with [`Error::UnsupportedVersion`] naming it, and so is one whose
//!    minor differs from the release the test asks for
//!    ([`kube_version`](TestEnvBuilder::kube_version) or `$KCTRL_KUBE_VERSION`).
//! 2. **The cache** (`~/.cache/kctrl/k8s-<version>`, or `$KCTRL_CACHE_DIR`), keyed by
//!    version: kctrl's own build of the release, or an earlier download recorded there whose
//!    SHA-256 still matches the record (a changed file is never used) and whose record names
//!    what would be downloaded now (the same URL, so the same mirror, and version: a download
//!    from another mirror or of an etcd kctrl no longer pins is downloaded again).
//! 3. **A download** of the official release binaries, only when allowed with
//!    [`TestEnvBuilder::download`] or `KCTRL_TESTENV_DOWNLOAD=1` ([`DOWNLOAD_ENV`]):
//!    Kubernetes' from `<base>/<version>/bin/linux/<arch>/<name>` (base
//!    `$KCTRL_KUBERNETES_DOWNLOAD_URL`, default [`DEFAULT_KUBERNETES_DOWNLOAD_URL`]) checked
//!    against `<name>.sha256`; etcd (the version kctrl pins with the release) from its release
//!    archive (base `$KCTRL_ETCD_DOWNLOAD_URL`, default [`DEFAULT_ETCD_DOWNLOAD_URL`]) checked
//!    against the release's `SHA256SUMS`. The variables point at a mirror. A download goes to
//!    a temporary file beside its destination, is resumed with a `Range` request after a
//!    broken transfer (or restarted when the server ignores ranges), and is made executable
//!    and renamed into place only once its digest matches; a wrong digest fails with
//!    [`Error::ChecksumMismatch`] (URL, both digests) and removes the file. Each download is
//!    recorded beside the binary (`.<name>.download`: URL, checksum file, version, archive,
//!    digest, time). A URL's user-info (`https://user:token@mirror/…`) is sent, but never
//!    shown, logged or recorded. Only published releases are downloaded (`v1.N.M`, or with
//!    `-alpha.K`, `-beta.K`, `-rc.K`), not a local build's `-dirty` or a `+k3s1`. KWOK is
//!    never downloaded: its releases publish no checksums.
//! 4. **A build** from upstream's Go modules into the cache, only with
//!    [`TestEnvBuilder::build_if_missing`] (Go on `PATH` and the Go module proxy needed, 20
//!    minutes or more on a cold cache, progress on stderr); also when a download was allowed
//!    but failed. In a kctrl checkout, `cargo xtask cluster build` fills the cache the same
//!    way. For a kube-apiserver of another patch than kctrl pins, the other components come
//!    from the pinned patch's build of the same minor when no download of the exact patch is
//!    there.
//!
//! Found nowhere, the start fails with [`Error::NotBuilt`], whose message names every way to
//! provide the missing binaries. [`TestEnv::binaries`] says where each one came from.
//!
//! Downloading is off unless asked for: a test library that reaches the network on its own
//! would surprise an offline or locked-down CI (and fail there after a wait), and it would
//! hide from a developer that each cold run depends on a third-party host; envtest likewise
//! never downloads by itself. Building is off for the same reason and its 20 minutes.
//!
//! What a user's CI caches, then, is one of: the `KUBEBUILDER_ASSETS` directory (about 200 MiB;
//! add `TEST_ASSET_KUBE_CONTROLLER_MANAGER` and friends, or the cache below, for the other
//! components), or `~/.cache/kctrl/k8s-<version>/bin` filled once by a run with
//! `KCTRL_TESTENV_DOWNLOAD=1` (keyed by the version, so switching releases fills another
//! directory). Either way no run after the first needs the network or Go.
//!
//! # Isolation
//!
//! Each environment has a directory of its own under the system's temporary directory
//! (`kctrl-testenv-<pid>-<n>`: PKI, kubeconfigs, etcd's data, the components' `logs/`) and
//! ports of its own, picked free on 127.0.0.1; every component listens on loopback only. Tests
//! running in parallel, in one test binary or several, do not collide.
//!
//! # One environment per test, or one per test binary
//!
//! [`TestEnv::start`] gives a test an environment of its own, stopped when it is dropped: the
//! simplest, and the most isolated, at the price of a start per test (about 10 seconds for
//! etcd and kube-apiserver on a loaded 2-core machine).
//!
//! [`TestEnv::shared`] starts one environment for the whole test binary on its first call and
//! returns the same one to every later call. `cargo test` runs the tests of a binary on
//! threads of one process, each `#[tokio::test]` with its own Tokio runtime, so the shared
//! environment lives in a `static` and is never dropped. Reference counting was not chosen: the
//! harness starts and finishes tests in an order of its own, so the count could fall to zero
//! between two tests and the plane would be started again and again. Instead the environment
//! is stopped when the process exits, by a small reaper process started with it: the reaper
//! waits on a pipe that only the test process holds; when that process is gone (tests done,
//! panic with `panic = "abort"`, Ctrl-C, `kill -9`), the kernel closes the pipe and the reaper
//! kills the components' process groups and removes the directory. Every environment, shared
//! or not, has one, so none outlives its test process.
//!
//! Clients are made per call of [`TestEnv::client`], never shared by the environment: a client
//! holds connections tied to the runtime it first ran on, and each test has its own runtime.
//!
//! # What runs
//!
//! | builder | components |
//! |---|---|
//! | (default) | etcd, kube-apiserver (client-certificate authentication, `Node,RBAC` authorization) |
//! | [`controller_manager(true)`](TestEnvBuilder::controller_manager) | + kube-controller-manager: ServiceAccounts, garbage collection, namespace deletion, ReplicaSets, Jobs…, never Deployments |
//! | [`kwok_nodes(n)`](TestEnvBuilder::kwok_nodes) | + kube-scheduler and KWOK with `n` Ready fake nodes on which pods run |
//! | [`deployment_controller(true)`](TestEnvBuilder::deployment_controller) | + kctrl's `deployment-controller` (a binary built from this repository, see there for how it is found), the plane's only Deployment controller, as its own identity with `deploy/`'s RBAC |
//!
//! Without kube-controller-manager, a deleted namespace stays `Terminating`, owners' dependents
//! are not garbage-collected, and namespaces other than the built-in ones have no `default`
//! ServiceAccount (so pods cannot be created in them). Without a Deployment controller,
//! Deployments get no ReplicaSets; with ours but without kube-controller-manager, ReplicaSets
//! get no pods.
//!
//! [`TestEnv::install_webhooks`] starts a test's `kctrl-webhook` server on loopback and
//! registers it with the environment's API server ([`webhook`]), as envtest's
//! `WebhookInstallOptions`.
//!
//! ```no_run
//! # async fn example() -> Result<(), kctrl_testenv::Error> {
//! // Deployments that roll out: ReplicaSets, pods on KWOK nodes, our controller.
//! let env = kctrl_testenv::TestEnv::builder()
//!     .controller_manager(true)
//!     .kwok_nodes(3)
//!     .deployment_controller(true)
//!     .start()
//!     .await?;
//! println!("controller log: {:?}", env.deployment_controller_log());
//! # Ok(()) }
//! ```

mod assets;
mod controller;
mod crd;
mod download;
mod env;
mod error;
mod reaper;
#[cfg(test)]
mod test_mirror;
pub mod webhook;

pub use assets::{
    BinarySource, DEFAULT_ETCD_DOWNLOAD_URL, DEFAULT_KUBERNETES_DOWNLOAD_URL, DOWNLOAD_ENV,
    ETCD_DOWNLOAD_URL_ENV, KUBEBUILDER_ASSETS_ENV, KUBERNETES_DOWNLOAD_URL_ENV, ResolvedBinary,
    TEST_ASSET_ENV_PREFIX,
};
pub use controller::{BUILD_COMMAND, DEPLOYMENT_CONTROLLER_ENV, build_deployment_controller};
pub use env::{TestEnv, TestEnvBuilder};
pub use error::Error;

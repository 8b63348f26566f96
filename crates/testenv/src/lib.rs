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
//! Nothing is downloaded at test time: the binaries come from the cache of
//! [`kctrl_cluster::toolchain`] (`~/.cache/kctrl/k8s-<version>`, or `$KCTRL_CACHE_DIR`). In a
//! kctrl checkout, `cargo xtask cluster build` fills it (20 minutes or more on a cold cache,
//! seconds afterwards). Without it, starting fails with [`Error::NotBuilt`], whose message
//! names that command, unless [`TestEnvBuilder::build_if_missing`] lets the test build them
//! (Go on `PATH` and the Go module proxy needed, progress on stderr).
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

mod controller;
mod crd;
mod env;
mod error;
mod reaper;
pub mod webhook;

pub use controller::{BUILD_COMMAND, DEPLOYMENT_CONTROLLER_ENV, build_deployment_controller};
pub use env::{TestEnv, TestEnvBuilder};
pub use error::Error;

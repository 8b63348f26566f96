//! How to reach and authenticate to a Kubernetes API server: kubeconfig loading and
//! resolution, in-cluster configuration, and the TLS + credentials transport (client-go's
//! `tools/clientcmd`, `rest.Config`/`rest.InClusterConfig` and `transport`).
//!
//! # The pieces, in the order they build on each other
//!
//! 1. [`kubeconfig`]: the file model ([`Kubeconfig`], clusters, users, contexts).
//! 2. [`LoadingRules`]: which files to read (`--kubeconfig`, `KUBECONFIG`, `~/.kube/config`)
//!    and how they merge (first file to define a name wins it; relative paths resolved
//!    against the defining file).
//! 3. [`KubeconfigResolver`] + [`ConfigOverrides`]: pick the context, apply flag overrides,
//!    read the referenced files, and produce a [`Config`].
//! 4. [`InClusterConfig`]: the service-account configuration of a pod.
//! 5. [`Config::infer`], [`Config::from_flags`], [`Config::from_kubeconfig`]: choose between
//!    kubeconfig and in-cluster, as client-go's `BuildConfigFromFlags` and deferred loading do.
//! 6. [`Transport`]: a rustls-backed `reqwest::Client` plus the per-request credential headers
//!    (bearer token, re-read token file, basic auth, exec plugin, impersonation).
//!
//! # Choosing a source
//!
//! | situation | use |
//! | --- | --- |
//! | a controller: in a pod or from a laptop | [`Config::infer`] |
//! | a component with `--kubeconfig` / `--master` flags | [`Config::from_flags`] |
//! | a CLI with kubectl-like flags (`--context`, `--namespace`, ...) | [`Config::from_kubeconfig`] with [`LoadingRules::from_env`] and [`ConfigOverrides`] |
//! | only in a pod | [`Config::in_cluster`] |
//! | a kubeconfig in memory | [`Config::from_kubeconfig_yaml`] or [`Kubeconfig::from_yaml`] + [`KubeconfigResolver`] |
//! | everything in code | [`Config::new`] and set the fields |
//!
//! **Credentials are only used over https**, as in client-go: when the resolved server is
//! `http://` (or a bare `host:port`), the user's token, token file, basic auth, client
//! certificate and exec plugin, and the cluster's TLS settings, are dropped.
//!
//! # Example
//!
//! ```
//! use kctrl_config::{ConfigOverrides, Kubeconfig, KubeconfigResolver, Transport};
//!
//! # fn main() -> Result<(), kctrl_config::ConfigError> {
//! let kubeconfig = Kubeconfig::from_yaml(
//!     r#"
//! apiVersion: v1
//! kind: Config
//! current-context: dev
//! clusters:
//! - name: dev
//!   cluster:
//!     server: https://127.0.0.1:6443
//!     insecure-skip-tls-verify: true
//! users:
//! - name: alice
//!   user:
//!     token: my-token
//! contexts:
//! - name: dev
//!   context: {cluster: dev, user: alice, namespace: team-a}
//! "#,
//! )?;
//!
//! // `--namespace team-b`
//! let mut overrides = ConfigOverrides::default();
//! overrides.context.namespace = "team-b".into();
//!
//! let config = KubeconfigResolver::new(kubeconfig, overrides).config()?;
//! assert_eq!(config.server.as_str(), "https://127.0.0.1:6443/");
//! assert_eq!(config.default_namespace, "team-b");
//! // Secrets never show in `Debug` output.
//! assert!(!format!("{config:?}").contains("my-token"));
//!
//! // Before each request: the client to use and the headers to attach.
//! let transport = Transport::new(&config)?;
//! let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
//! let prepared = runtime.block_on(transport.prepare())?;
//! assert_eq!(prepared.headers()["authorization"], "Bearer my-token");
//! let _request = prepared.request(http::Method::GET, config.server.join("/version").unwrap());
//! // After an HTTP 401: refresh token files / exec plugins before the next request.
//! transport.invalidate_credentials(prepared.credential());
//! # Ok(()) }
//! ```
//!
//! # client-go names
//!
//! | client-go | kctrl-config |
//! | --- | --- |
//! | `rest.Config` | [`Config`] |
//! | `rest.TLSClientConfig` | [`TlsConfig`] (+ [`ClientIdentity`]) |
//! | `rest.Config.{BearerToken, BearerTokenFile, Username/Password, ExecProvider}` | [`Auth`] |
//! | `rest.ImpersonationConfig` | [`Impersonation`] |
//! | `rest.InClusterConfig()` | [`Config::in_cluster`] / [`InClusterConfig::config`] |
//! | `rest.ErrNotInCluster` | [`ConfigError::NotInCluster`] |
//! | `clientcmd.BuildConfigFromFlags(master, kubeconfig)` | [`Config::from_flags`]`(kubeconfig, master, &overrides)` |
//! | `clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides).ClientConfig()` | [`Config::from_kubeconfig`]`(&rules, &overrides)` |
//! | `clientcmd.ClientConfigLoadingRules` | [`LoadingRules`] |
//! | `clientcmd.NewDefaultClientConfigLoadingRules()` | [`LoadingRules::from_env`] |
//! | `ClientConfigLoadingRules.Load()` / `GetLoadingPrecedence()` | [`LoadingRules::load`] / [`LoadingRules::loading_precedence`] |
//! | `clientcmd.ConfigOverrides` | [`ConfigOverrides`] |
//! | `clientcmd.ClusterDefaults` (`$KUBERNETES_MASTER` or `http://localhost:8080`) | [`ConfigOverrides::with_legacy_cluster_defaults`], [`default_server`] |
//! | `clientcmd.NewNonInteractiveClientConfig` / `DirectClientConfig` | [`KubeconfigResolver`] |
//! | `ClientConfig.ClientConfig()` / `Namespace()` / `RawConfig()` | [`KubeconfigResolver::config`] / [`namespace`](KubeconfigResolver::namespace) / [`kubeconfig`](KubeconfigResolver::kubeconfig) |
//! | `clientcmd.RESTConfigFromKubeConfig(bytes)` | [`Config::from_kubeconfig_yaml`] |
//! | `clientcmd.Load` / `LoadFromFile` | [`Kubeconfig::from_yaml`] / [`Kubeconfig::read`] |
//! | `clientcmdapi.Config` and `Cluster`, `AuthInfo`, `Context`, `ExecConfig` | [`Kubeconfig`] and [`kubeconfig::Cluster`], [`kubeconfig::AuthInfo`], [`kubeconfig::Context`], [`kubeconfig::ExecConfig`] |
//! | `clientcmd.ErrEmptyConfig` | [`ConfigError::EmptyConfig`] |
//! | `rest.HTTPClientFor` / `transport.New` | [`Transport::new`] |
//! | bearer / basic / impersonation / exec round trippers | [`Transport::prepare`], [`PreparedRequest::request`] |
//! | token source reset and exec refresh on 401 | [`Transport::invalidate_credentials`] |
//!
//! Not supported: legacy `auth-provider` plugins (gcp, azure, oidc: an error says to use an
//! exec plugin), interactive exec plugins (this client never gives a plugin a terminal),
//! exec plugin allow-lists, CA and client-certificate file rotation while running (files
//! are read once, when the configuration is resolved), and client-go's migration of
//! `~/.kube/.kubeconfig`.

pub mod auth;
mod config;
mod error;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
mod incluster;
mod infer;
pub mod kubeconfig;
mod loader;
mod proxy;
mod resolve;
mod secret;
mod tls;
mod transport;

pub use auth::{Auth, ExecApiVersion, ExecInteractiveMode, ExecProvider, Impersonation};
pub use config::{Config, redacted_url};
pub use error::{ConfigError, ExecError};
pub use incluster::{InClusterConfig, SERVICE_ACCOUNT_DIR};
pub use kubeconfig::Kubeconfig;
pub use loader::{KUBECONFIG_ENV, LoadingRules};
pub use resolve::{ConfigOverrides, KUBERNETES_MASTER_ENV, KubeconfigResolver, default_server};
pub use secret::Secret;
pub use tls::{ClientIdentity, TlsConfig};
pub use transport::{
    CONNECT_TIMEOUT, CredentialId, HTTP2_PING_TIMEOUT, HTTP2_READ_IDLE_TIMEOUT, MAX_IDLE_PER_HOST,
    PreparedRequest, TCP_KEEPALIVE, Transport, default_user_agent,
};

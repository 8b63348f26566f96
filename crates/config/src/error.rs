//! Typed errors of loading, resolving and using a configuration.
//!
//! Every error names what the user has to fix: the kubeconfig file (with line and column for
//! YAML errors), the context, cluster or user, the kubeconfig field (`users[alice].client-key`)
//! and the file it points to, or the exec plugin's command.

use std::io;
use std::path::PathBuf;
use std::time::Duration;

/// Errors building a configuration or credentials.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The HTTP client could not be built.
    #[error("building the HTTP client: {0}")]
    HttpClient(#[source] reqwest::Error),
    /// The TLS configuration is not usable.
    #[error("TLS configuration: {0}")]
    Tls(#[source] rustls::Error),

    /// A kubeconfig given explicitly (`--kubeconfig`) does not exist.
    #[error("kubeconfig {path:?} does not exist")]
    KubeconfigNotFound {
        /// The missing file.
        path: PathBuf,
    },
    /// A kubeconfig exists but could not be read (a directory, no permission, ...).
    #[error("reading kubeconfig {path:?}: {source}")]
    ReadKubeconfig {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: io::Error,
    },
    /// A kubeconfig is not valid YAML or does not match the kubeconfig schema.
    #[error("parsing kubeconfig {path:?}{}: {message}", location_suffix(*.line, *.column, .message))]
    ParseKubeconfig {
        /// The file (`<inline>` for YAML given as a string).
        path: PathBuf,
        /// 1-based line of the error, when known.
        line: Option<usize>,
        /// 1-based column of the error, when known.
        column: Option<usize>,
        /// What is wrong.
        message: String,
    },
    /// A kubeconfig lists two clusters, contexts, users or extensions with the same name.
    #[error("kubeconfig {path:?}: duplicate name {name:?} in {list}")]
    DuplicateName {
        /// The file.
        path: PathBuf,
        /// Which list: `clusters`, `contexts`, `users` or `extensions`.
        list: &'static str,
        /// The repeated name.
        name: String,
    },

    /// Nothing says which server to talk to: no current context, no `--server`, not in a cluster.
    #[error(
        "no configuration has been provided: no context with a server was found \
         (kubeconfig files searched: {searched:?}); set KUBECONFIG, pass --kubeconfig or --server"
    )]
    EmptyConfig {
        /// The kubeconfig files that were searched.
        searched: Vec<PathBuf>,
    },
    /// The context chosen by `--context` or `current-context` is not defined.
    #[error(
        "context {context:?} not found in kubeconfig (available contexts: {available:?}; files searched: {searched:?})"
    )]
    ContextNotFound {
        /// The missing context.
        context: String,
        /// The contexts that are defined.
        available: Vec<String>,
        /// The kubeconfig files that were searched.
        searched: Vec<PathBuf>,
    },
    /// The cluster named by the context (or `--cluster`) is not defined.
    #[error(
        "cluster {cluster:?} (used by context {context:?}) not found in kubeconfig \
         (available clusters: {available:?}; files searched: {searched:?})"
    )]
    ClusterNotFound {
        /// The missing cluster.
        cluster: String,
        /// The context naming it (empty when only `--cluster` did).
        context: String,
        /// The clusters that are defined.
        available: Vec<String>,
        /// The kubeconfig files that were searched.
        searched: Vec<PathBuf>,
    },
    /// The user named by the context (or `--user`) is not defined.
    #[error(
        "user {user:?} (used by context {context:?}) not found in kubeconfig \
         (available users: {available:?}; files searched: {searched:?})"
    )]
    UserNotFound {
        /// The missing user.
        user: String,
        /// The context naming it (empty when only `--user` did).
        context: String,
        /// The users that are defined.
        available: Vec<String>,
        /// The kubeconfig files that were searched.
        searched: Vec<PathBuf>,
    },
    /// The chosen cluster has no `server`.
    #[error("no server found for cluster {cluster:?}")]
    NoServer {
        /// The cluster.
        cluster: String,
    },
    /// The server is not a usable URL.
    #[error("invalid server {server:?}: {reason}")]
    InvalidServer {
        /// The server as written.
        server: String,
        /// What is wrong.
        reason: String,
    },
    /// A `proxy-url` is not an http, https or socks5 URL.
    #[error("invalid proxy-url {proxy_url:?} for cluster {cluster:?}: {reason}")]
    InvalidProxyUrl {
        /// The cluster.
        cluster: String,
        /// The proxy URL as written.
        proxy_url: String,
        /// What is wrong.
        reason: String,
    },
    /// A context's namespace is not a DNS-1123 label.
    #[error("namespace {namespace:?} for context {context:?} is not a valid DNS-1123 label")]
    InvalidNamespace {
        /// The context.
        context: String,
        /// The namespace.
        namespace: String,
    },
    /// A kubeconfig entry is inconsistent (e.g. two authentication methods, a certificate
    /// without its key, an exec plugin without a command).
    #[error("invalid configuration for {entry}: {reason}")]
    InvalidConfig {
        /// The entry, e.g. `users["alice"]`.
        entry: String,
        /// What is wrong.
        reason: String,
    },
    /// The user relies on a legacy `auth-provider` (gcp, azure, oidc); use an exec plugin.
    #[error(
        "user {user:?} uses auth-provider {name:?}, which is not supported; configure an exec credential plugin instead"
    )]
    UnsupportedAuthProvider {
        /// The user.
        user: String,
        /// The provider's name.
        name: String,
    },
    /// A file named by the configuration could not be read.
    #[error("reading {field} {path:?}: {source}")]
    ReadFile {
        /// The configuration field naming the file, e.g. `users["alice"].client-certificate`.
        field: String,
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: io::Error,
    },
    /// A certificate or key is not usable PEM.
    #[error("{what}: {reason}")]
    InvalidPem {
        /// Which data, e.g. `client key`.
        what: String,
        /// What is wrong.
        reason: String,
    },
    /// `KUBERNETES_SERVICE_HOST` / `KUBERNETES_SERVICE_PORT` are not set: not running in a pod.
    #[error(
        "unable to load in-cluster configuration, KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT must be defined"
    )]
    NotInCluster,
    /// A credential or impersonation value cannot be sent as an HTTP header.
    #[error("{what} contains characters that are not allowed in an HTTP header")]
    InvalidHeader {
        /// Which value, e.g. `impersonated user`.
        what: String,
    },
    /// An exec credential plugin failed.
    #[error(transparent)]
    Exec(#[from] ExecError),
}

/// Errors running an exec credential plugin (`users[].user.exec`).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ExecError {
    /// The plugin's executable does not exist.
    #[error(
        "exec plugin: executable {command:?} not found; it looks like a client-go credential plugin \
         that is not installed{}",
        hint_suffix(.install_hint.as_deref())
    )]
    NotFound {
        /// The command.
        command: String,
        /// The kubeconfig's `installHint`, with control characters escaped.
        install_hint: Option<String>,
    },
    /// The plugin could not be started.
    #[error("exec plugin {command:?} could not be started: {source}")]
    Spawn {
        /// The command.
        command: String,
        /// The I/O error.
        #[source]
        source: io::Error,
    },
    /// The plugin exited unsuccessfully.
    #[error("exec plugin {command:?} failed with {status}{}", stderr_suffix(.stderr))]
    Failed {
        /// The command.
        command: String,
        /// How it ended, e.g. `exit code 1`.
        status: String,
        /// Its exit code, when it exited normally.
        exit_code: Option<i32>,
        /// What it wrote to stderr, trimmed (and shortened when long).
        stderr: String,
    },
    /// The plugin did not finish in time (it is killed).
    #[error("exec plugin {command:?} did not finish within {timeout:?}")]
    Timeout {
        /// The command.
        command: String,
        /// The time limit.
        timeout: Duration,
    },
    /// The plugin's output is not a usable `ExecCredential`.
    #[error("exec plugin {command:?} returned an unusable ExecCredential: {reason}")]
    InvalidOutput {
        /// The command.
        command: String,
        /// What is wrong.
        reason: String,
    },
    /// The plugin requires a terminal (`interactiveMode: Always`); this client never has one.
    #[error(
        "exec plugin {command:?} requires interactive mode (interactiveMode: Always), \
         but this client never gives plugins a terminal"
    )]
    InteractiveRequired {
        /// The command.
        command: String,
    },
}

impl ExecError {
    /// A copy for another request waiting on the same plugin run (an I/O error is copied as
    /// its kind and message).
    pub(crate) fn duplicate(&self) -> Self {
        match self {
            Self::NotFound {
                command,
                install_hint,
            } => Self::NotFound {
                command: command.clone(),
                install_hint: install_hint.clone(),
            },
            Self::Spawn { command, source } => Self::Spawn {
                command: command.clone(),
                source: io::Error::new(source.kind(), source.to_string()),
            },
            Self::Failed {
                command,
                status,
                exit_code,
                stderr,
            } => Self::Failed {
                command: command.clone(),
                status: status.clone(),
                exit_code: *exit_code,
                stderr: stderr.clone(),
            },
            Self::Timeout { command, timeout } => Self::Timeout {
                command: command.clone(),
                timeout: *timeout,
            },
            Self::InvalidOutput { command, reason } => Self::InvalidOutput {
                command: command.clone(),
                reason: reason.clone(),
            },
            Self::InteractiveRequired { command } => Self::InteractiveRequired {
                command: command.clone(),
            },
        }
    }
}

/// ` at line L column C`, unless the message already says where.
fn location_suffix(line: Option<usize>, column: Option<usize>, message: &str) -> String {
    if message.contains(" at line ") {
        return String::new();
    }
    match (line, column) {
        (Some(l), Some(c)) => format!(" at line {l} column {c}"),
        (Some(l), None) => format!(" at line {l}"),
        _ => String::new(),
    }
}

fn hint_suffix(hint: Option<&str>) -> String {
    match hint {
        Some(h) if !h.is_empty() => format!("\n\n{h}"),
        _ => String::new(),
    }
}

fn stderr_suffix(stderr: &str) -> String {
    if stderr.is_empty() {
        String::new()
    } else {
        format!(": {stderr}")
    }
}

//! Exec credential plugins (`users[].user.exec`, `client.authentication.k8s.io/v1` and
//! `v1beta1`): a command prints an `ExecCredential` whose status holds a bearer token or a
//! client certificate and key, optionally with an expiry.
//!
//! How a plugin is run:
//! - the command gets the process environment plus the configured `env`, and
//!   `KUBERNETES_EXEC_INFO` holding an `ExecCredential` whose spec says `interactive: false`
//!   and, with `provideClusterInfo`, describes the cluster (server, TLS settings, CA data,
//!   proxy, and the cluster's `client.authentication.k8s.io/exec` extension as `config`);
//! - stdin is closed: this client never lets a plugin prompt, so `interactiveMode: Always`
//!   is an error and `IfAvailable` behaves as `Never`;
//! - it runs under `tokio::process` with a time limit ([`ExecProvider::timeout`]) and is killed
//!   when the limit passes;
//! - a failure names the command, its exit status and its trimmed stderr; a missing executable
//!   adds the kubeconfig's `installHint`.
//!
//! The credential is cached until its `expirationTimestamp` (forever when there is none),
//! compared with the wall clock as client-go does (so a laptop that slept past the expiry runs
//! the plugin again at once). After a 401, [`Transport::invalidate_credentials`](crate::Transport::invalidate_credentials)
//! marks the rejected credential; the plugin runs again only if that credential is still the
//! current one, so the 401s of requests that were already in flight with it cause no second
//! run, and the rejected credential is not used again while the new run is under way.
//!
//! A run is detached from the request that started it: only one plugin runs at a time per
//! transport, every request needing credentials waits for that run, and a request that gives
//! up (its timeout passed, its caller dropped it) does not stop the run. A plugin slower than
//! the request timeout (a cloud login taking seconds) therefore still delivers its credential
//! to the requests that follow. The run itself is bounded by [`ExecProvider::timeout`]. A
//! failed run is not cached: the next request runs the plugin again.

use std::fmt;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use crate::error::ExecError;
use crate::secret::Secret;
use crate::tls::{ClientIdentity, check_identity};

/// The cluster extension handed to exec plugins as `spec.cluster.config`.
pub const CLUSTER_EXTENSION_KEY: &str = "client.authentication.k8s.io/exec";

/// The environment variable carrying the `ExecCredential` request to the plugin.
pub const EXEC_INFO_ENV: &str = "KUBERNETES_EXEC_INFO";

/// How long a plugin may run before it is killed, unless configured otherwise. client-go has
/// no limit; a hung plugin would block every request.
pub const DEFAULT_EXEC_TIMEOUT: Duration = Duration::from_secs(60);

/// Longest stderr kept in an error message (the end is kept).
const MAX_STDERR: usize = 4096;

/// The `client.authentication.k8s.io` version a plugin speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExecApiVersion {
    /// `client.authentication.k8s.io/v1`.
    V1,
    /// `client.authentication.k8s.io/v1beta1`.
    V1Beta1,
}

impl ExecApiVersion {
    /// The `apiVersion` string.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::V1 => "client.authentication.k8s.io/v1",
            Self::V1Beta1 => "client.authentication.k8s.io/v1beta1",
        }
    }

    /// Parses an `apiVersion`; other versions (such as the removed `v1alpha1`) give `None`.
    pub fn parse(api_version: &str) -> Option<Self> {
        match api_version {
            "client.authentication.k8s.io/v1" => Some(Self::V1),
            "client.authentication.k8s.io/v1beta1" => Some(Self::V1Beta1),
            _ => None,
        }
    }
}

/// A plugin's relationship with standard input (`interactiveMode`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ExecInteractiveMode {
    /// `Never`: the plugin never reads stdin.
    #[default]
    Never,
    /// `IfAvailable`: the plugin may prompt if it can; here it never can.
    IfAvailable,
    /// `Always`: the plugin needs a terminal, which this client never gives: running it fails.
    Always,
}

impl ExecInteractiveMode {
    /// Parses `Never`, `IfAvailable` or `Always`.
    pub fn parse(mode: &str) -> Option<Self> {
        match mode {
            "Never" => Some(Self::Never),
            "IfAvailable" => Some(Self::IfAvailable),
            "Always" => Some(Self::Always),
            _ => None,
        }
    }
}

/// A resolved exec credential plugin (client-go's `rest.Config.ExecProvider`).
#[derive(Clone, Debug, PartialEq)]
pub struct ExecProvider {
    /// The executable: a path, or a name looked up in `PATH`.
    pub command: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// Environment variables added for it.
    pub env: Vec<(String, Secret<String>)>,
    /// The protocol version.
    pub api_version: ExecApiVersion,
    /// Shown when the executable is missing (control characters already escaped).
    pub install_hint: Option<String>,
    /// Describe the cluster in `KUBERNETES_EXEC_INFO`.
    pub provide_cluster_info: bool,
    /// `interactiveMode`.
    pub interactive_mode: ExecInteractiveMode,
    /// The cluster's `client.authentication.k8s.io/exec` extension, passed as
    /// `spec.cluster.config` when `provide_cluster_info` is set.
    pub cluster_config: Option<serde_json::Value>,
    /// How long the plugin may run.
    pub timeout: Duration,
}

impl ExecProvider {
    /// A plugin running `command` with no arguments, speaking `api_version`.
    pub fn new(command: impl Into<String>, api_version: ExecApiVersion) -> Self {
        Self {
            command: command.into(),
            args: Vec::new(),
            env: Vec::new(),
            api_version,
            install_hint: None,
            provide_cluster_info: false,
            interactive_mode: ExecInteractiveMode::Never,
            cluster_config: None,
            timeout: DEFAULT_EXEC_TIMEOUT,
        }
    }
}

/// The cluster as described to a plugin (`ExecCredential.spec.cluster`).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub(crate) struct ExecCluster {
    pub(crate) server: String,
    #[serde(rename = "tls-server-name", skip_serializing_if = "String::is_empty")]
    pub(crate) tls_server_name: String,
    #[serde(rename = "insecure-skip-tls-verify", skip_serializing_if = "is_false")]
    pub(crate) insecure_skip_tls_verify: bool,
    #[serde(
        rename = "certificate-authority-data",
        skip_serializing_if = "String::is_empty"
    )]
    pub(crate) certificate_authority_data: String,
    #[serde(rename = "proxy-url", skip_serializing_if = "String::is_empty")]
    pub(crate) proxy_url: String,
    #[serde(rename = "disable-compression", skip_serializing_if = "is_false")]
    pub(crate) disable_compression: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) config: Option<serde_json::Value>,
}

/// The URL without the `/` path the URL parser adds to `https://host:port`.
fn url_as_written(url: &url::Url) -> String {
    let text = url.as_str();
    if url.path() == "/" && url.query().is_none() && url.fragment().is_none() {
        text.trim_end_matches('/').to_owned()
    } else {
        text.to_owned()
    }
}

fn is_false(b: &bool) -> bool {
    !*b
}

impl ExecCluster {
    /// The description of `config`'s cluster for `provider`.
    pub(crate) fn for_config(config: &crate::Config, provider: &ExecProvider) -> Self {
        use base64::Engine as _;
        Self {
            server: url_as_written(&config.server),
            tls_server_name: config.tls.server_name.clone().unwrap_or_default(),
            insecure_skip_tls_verify: config.tls.insecure_skip_verify,
            certificate_authority_data: config
                .tls
                .ca_pem
                .as_ref()
                .map(|ca| base64::engine::general_purpose::STANDARD.encode(ca))
                .unwrap_or_default(),
            proxy_url: config
                .proxy_url
                .as_ref()
                .map(url_as_written)
                .unwrap_or_default(),
            disable_compression: config.disable_compression,
            config: provider.cluster_config.clone(),
        }
    }
}

/// Credentials obtained from one plugin run.
pub(crate) struct ExecCredentials {
    pub(crate) token: Option<Secret<String>>,
    pub(crate) identity: Option<ClientIdentity>,
    /// Increases with every run, so a client built for a certificate can be reused until the
    /// certificate changes.
    pub(crate) generation: u64,
}

impl fmt::Debug for ExecCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExecCredentials")
            .field("token", &self.token)
            .field("identity", &self.identity)
            .field("generation", &self.generation)
            .finish()
    }
}

/// Runs a plugin when needed and caches what it returned.
///
/// A run is a task of its own: requests wait for it, but a request that gives up (its timeout,
/// or its caller dropping it) does not stop it, and the next request waits for the same run
/// instead of starting another.
#[derive(Debug)]
pub(crate) struct ExecAuthenticator {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    provider: ExecProvider,
    cluster: Option<ExecCluster>,
    state: std::sync::Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// What the last successful run returned.
    current: Option<Cached>,
    /// The server answered 401 to `current`.
    rejected: bool,
    /// The run in progress, if any: it publishes its outcome once.
    running: Option<watch::Receiver<Option<RunOutcome>>>,
    /// Successful runs so far (the generation of `current`).
    runs: u64,
}

type RunOutcome = Result<Arc<ExecCredentials>, Arc<ExecError>>;

#[derive(Debug)]
struct Cached {
    credentials: Arc<ExecCredentials>,
    /// `expirationTimestamp`, on the wall clock.
    expires: Option<SystemTime>,
}

impl ExecAuthenticator {
    pub(crate) fn new(provider: ExecProvider, cluster: Option<ExecCluster>) -> Self {
        Self {
            shared: Arc::new(Shared {
                provider,
                cluster,
                state: std::sync::Mutex::new(State::default()),
            }),
        }
    }

    /// The cached credentials, or new ones from the plugin if there are none, they expired or
    /// the server rejected them.
    pub(crate) async fn credentials(&self) -> Result<Arc<ExecCredentials>, ExecError> {
        // A run abandoned by a runtime that shut down is started again once.
        for _ in 0..2 {
            let mut run = {
                let mut state = self.shared.lock();
                if let Some(cached) = &state.current
                    && !state.rejected
                    && cached.expires.is_none_or(|at| SystemTime::now() < at)
                {
                    return Ok(cached.credentials.clone());
                }
                match &state.running {
                    Some(run) if !abandoned(run) => run.clone(),
                    _ => self.start_run(&mut state),
                }
            };
            if let Ok(outcome) = run.wait_for(Option::is_some).await
                && let Some(outcome) = outcome.clone()
            {
                return outcome.map_err(|e| e.duplicate());
            }
        }
        Err(ExecError::Spawn {
            command: self.shared.provider.command.clone(),
            source: std::io::Error::other("the plugin's run was abandoned (its runtime shut down)"),
        })
    }

    /// Starts a plugin run as a task of its own; its outcome replaces the cached credentials
    /// when it succeeds.
    fn start_run(&self, state: &mut State) -> watch::Receiver<Option<RunOutcome>> {
        let (publish, run) = watch::channel(None);
        state.running = Some(run.clone());
        let shared = self.shared.clone();
        tokio::spawn(async move {
            let result = run_plugin(&shared.provider, shared.cluster.as_ref()).await;
            let outcome = {
                let mut state = shared.lock();
                state.running = None;
                match result {
                    Ok(status) => {
                        state.runs += 1;
                        let credentials = Arc::new(ExecCredentials {
                            token: status.token,
                            identity: status.identity,
                            generation: state.runs,
                        });
                        state.current = Some(Cached {
                            credentials: credentials.clone(),
                            expires: status.expires,
                        });
                        state.rejected = false;
                        Ok(credentials)
                    }
                    // The previous credentials (and whether they were rejected) stay: the
                    // next request runs the plugin again.
                    Err(e) => Err(Arc::new(e)),
                }
            };
            // Nobody may be waiting any more: the outcome is kept in the state either way.
            let _ = publish.send(Some(outcome));
        });
        run
    }

    /// The server rejected the credentials of generation `generation` (HTTP 401): unless the
    /// plugin has already replaced them, the next request runs it again. Returns whether they
    /// were the current ones.
    pub(crate) fn invalidate(&self, generation: u64) -> bool {
        let mut state = self.shared.lock();
        let current = state
            .current
            .as_ref()
            .is_some_and(|c| c.credentials.generation == generation);
        if current {
            state.rejected = true;
        }
        current
    }
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Whether a run ended without publishing an outcome (its task was dropped).
fn abandoned(run: &watch::Receiver<Option<RunOutcome>>) -> bool {
    run.has_changed().is_err() && run.borrow().is_none()
}

/// What a successful run produced.
pub(crate) struct PluginStatus {
    pub(crate) token: Option<Secret<String>>,
    pub(crate) identity: Option<ClientIdentity>,
    pub(crate) expires: Option<SystemTime>,
}

async fn run_plugin(
    provider: &ExecProvider,
    cluster: Option<&ExecCluster>,
) -> Result<PluginStatus, ExecError> {
    let command = provider.command.clone();
    if provider.interactive_mode == ExecInteractiveMode::Always {
        return Err(ExecError::InteractiveRequired { command });
    }
    let mut spec = serde_json::json!({ "interactive": false });
    if provider.provide_cluster_info
        && let Some(cluster) = cluster
    {
        spec["cluster"] = serde_json::to_value(cluster).unwrap_or_default();
    }
    let exec_info = serde_json::json!({
        "apiVersion": provider.api_version.as_str(),
        "kind": "ExecCredential",
        "spec": spec,
    });

    let mut cmd = tokio::process::Command::new(&provider.command);
    cmd.args(&provider.args)
        .envs(provider.env.iter().map(|(k, v)| (k, v.expose())))
        .env(EXEC_INFO_ENV, exec_info.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    tracing::debug!(command = %provider.command, "running exec credential plugin");
    let child = cmd.spawn().map_err(|source| {
        if source.kind() == std::io::ErrorKind::NotFound {
            ExecError::NotFound {
                command: command.clone(),
                install_hint: provider.install_hint.clone(),
            }
        } else {
            ExecError::Spawn {
                command: command.clone(),
                source,
            }
        }
    })?;
    let output = tokio::time::timeout(provider.timeout, child.wait_with_output())
        .await
        .map_err(|_| ExecError::Timeout {
            command: command.clone(),
            timeout: provider.timeout,
        })?
        .map_err(|source| ExecError::Spawn {
            command: command.clone(),
            source,
        })?;

    let stderr = trimmed_stderr(&output.stderr);
    if !output.status.success() {
        return Err(ExecError::Failed {
            command,
            status: describe_status(output.status),
            exit_code: output.status.code(),
            stderr,
        });
    }
    if !stderr.is_empty() {
        tracing::debug!(command = %provider.command, stderr = %stderr, "exec credential plugin wrote to stderr");
    }
    parse_output(&command, provider.api_version, &output.stdout)
}

#[derive(Deserialize)]
struct ExecCredentialOutput {
    #[serde(rename = "apiVersion", default)]
    api_version: String,
    #[serde(default)]
    kind: String,
    status: Option<StatusOutput>,
}

#[derive(Deserialize)]
struct StatusOutput {
    #[serde(default)]
    token: Option<Secret<String>>,
    #[serde(rename = "clientCertificateData", default)]
    client_certificate_data: Option<String>,
    #[serde(rename = "clientKeyData", default)]
    client_key_data: Option<Secret<String>>,
    #[serde(rename = "expirationTimestamp", default)]
    expiration_timestamp: Option<String>,
}

pub(crate) fn parse_output(
    command: &str,
    api_version: ExecApiVersion,
    stdout: &[u8],
) -> Result<PluginStatus, ExecError> {
    let invalid = |reason: String| ExecError::InvalidOutput {
        command: command.to_owned(),
        reason,
    };
    // serde_json's messages name positions and expectations, not the input's content.
    let out: ExecCredentialOutput =
        serde_json::from_slice(stdout).map_err(|e| invalid(format!("decoding stdout: {e}")))?;
    if out.api_version != api_version.as_str() {
        return Err(invalid(format!(
            "the plugin is configured to use API version {}, but it returned {:?}",
            api_version.as_str(),
            out.api_version
        )));
    }
    if out.kind != "ExecCredential" {
        return Err(invalid(format!(
            "expected kind ExecCredential, got {:?}",
            out.kind
        )));
    }
    let status = out
        .status
        .ok_or_else(|| invalid("no status field".to_owned()))?;
    let token = status.token.filter(|t| !t.is_empty());
    let cert = status.client_certificate_data.filter(|c| !c.is_empty());
    let key = status.client_key_data.filter(|k| !k.is_empty());
    let identity = match (cert, key) {
        (Some(cert), Some(key)) => {
            let identity = ClientIdentity {
                cert_pem: cert.into_bytes(),
                key_pem: Secret::new(key.into_inner().into_bytes()),
            };
            check_identity(&identity)
                .map_err(|e| invalid(format!("unusable client certificate/key: {e}")))?;
            Some(identity)
        }
        (None, None) => None,
        _ => {
            return Err(invalid(
                "it returned only a certificate or only a key, not both".to_owned(),
            ));
        }
    };
    if token.is_none() && identity.is_none() {
        return Err(invalid(
            "it returned neither a token nor a certificate/key pair".to_owned(),
        ));
    }
    let expires = match status.expiration_timestamp.filter(|t| !t.is_empty()) {
        Some(ts) => Some(SystemTime::from(ts.parse::<jiff::Timestamp>().map_err(
            |e| invalid(format!("invalid expirationTimestamp {ts:?}: {e}")),
        )?)),
        None => None,
    };
    Ok(PluginStatus {
        token,
        identity,
        expires,
    })
}

fn describe_status(status: std::process::ExitStatus) -> String {
    if let Some(code) = status.code() {
        return format!("exit code {code}");
    }
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt as _;
        if let Some(signal) = status.signal() {
            return format!("signal {signal}");
        }
    }
    status.to_string()
}

fn trimmed_stderr(stderr: &[u8]) -> String {
    let text = String::from_utf8_lossy(stderr);
    let text = text.trim();
    if text.len() <= MAX_STDERR {
        return text.to_owned();
    }
    let mut start = text.len() - MAX_STDERR;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    format!("...{}", &text[start..])
}

/// Escapes characters that could change a terminal's state (ANSI escape sequences, bidi and
/// other format controls) as `U+XXXX`, keeping tabs and line breaks.
pub(crate) fn clean_install_hint(hint: &str) -> String {
    let mut out = String::with_capacity(hint.len());
    for c in hint.chars() {
        if is_unsafe_char(c) {
            out.push_str(&format!("U+{:04X}", u32::from(c)));
        } else {
            out.push(c);
        }
    }
    out
}

fn is_unsafe_char(c: char) -> bool {
    let cp = u32::from(c);
    if c.is_control() {
        // Keep \t \n \v \f \r.
        return !(0x09..=0x0D).contains(&cp);
    }
    matches!(cp,
        0x00AD | 0x0600..=0x0605 | 0x061C | 0x06DD | 0x070F | 0x0890..=0x0891 | 0x08E2
        | 0x180E | 0x200B..=0x200F | 0x202A..=0x202E | 0x2060..=0x2064 | 0x2066..=0x206F
        | 0xFEFF | 0xFFF9..=0xFFFB | 0x110BD | 0x110CD | 0x13430..=0x1343F
        | 0x1BCA0..=0x1BCA3 | 0x1D173..=0x1D17A | 0xE0001 | 0xE0020..=0xE007F
        // Private use.
        | 0xE000..=0xF8FF | 0xF0000..=0xFFFFD | 0x100000..=0x10FFFD)
}

#[cfg(test)]
mod tests {
    use super::*;

    const V1: ExecApiVersion = ExecApiVersion::V1;

    #[test]
    fn parses_token_and_expiry() {
        let out = br#"{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential",
            "status":{"token":"tok","expirationTimestamp":"2030-01-02T03:04:05Z"}}"#;
        let status = parse_output("p", V1, out).unwrap();
        assert_eq!(status.token.unwrap().expose(), "tok");
        let expected: SystemTime = "2030-01-02T03:04:05Z"
            .parse::<jiff::Timestamp>()
            .unwrap()
            .into();
        assert_eq!(status.expires, Some(expected));
    }

    #[test]
    fn rejects_bad_outputs_without_echoing_secrets() {
        let cases: [(&[u8], &str); 7] = [
            (b"not json", "decoding stdout"),
            (
                br#"{"apiVersion":"client.authentication.k8s.io/v1beta1","kind":"ExecCredential","status":{"token":"secret-tok"}}"#,
                "configured to use API version",
            ),
            (
                br#"{"apiVersion":"client.authentication.k8s.io/v1","kind":"Other","status":{"token":"secret-tok"}}"#,
                "expected kind",
            ),
            (
                br#"{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential"}"#,
                "no status",
            ),
            (
                br#"{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{}}"#,
                "neither a token",
            ),
            (
                br#"{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"clientKeyData":"secret-key"}}"#,
                "only a certificate or only a key",
            ),
            (
                br#"{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"secret-tok","expirationTimestamp":"tomorrow"}}"#,
                "invalid expirationTimestamp",
            ),
        ];
        for (out, want) in cases {
            let err = parse_output("the-plugin", V1, out).err().expect("an error");
            let text = err.to_string();
            assert!(text.contains(want) && text.contains("the-plugin"), "{text}");
            assert!(!text.contains("secret-"), "{text}");
        }
    }

    #[test]
    fn stderr_is_trimmed_and_bounded() {
        assert_eq!(trimmed_stderr(b"\n  oops \n"), "oops");
        let long = "x".repeat(MAX_STDERR + 10);
        let t = trimmed_stderr(long.as_bytes());
        assert!(t.starts_with("...") && t.len() == MAX_STDERR + 3);
    }

    #[test]
    fn create_auth_config_exec_install_hint_cleanup() {
        assert_eq!(
            clean_install_hint("some install hint with \x1b[1mcontrol chars\x1b[0m\nand a newline"),
            "some install hint with U+001B[1mcontrol charsU+001B[0m\nand a newline"
        );
    }

    #[test]
    fn clean_ansi_escape_codes() {
        let cases = [
            ("plain", "plain"),
            ("tab\tcr\rff\x0c", "tab\tcr\rff\x0c"),
            ("\x1b[1mbold\x1b[0m", "U+001B[1mboldU+001B[0m"),
            ("bidi \u{202E}evil", "bidi U+202Eevil"),
            ("private \u{E000}", "private U+E000"),
            ("nul \0", "nul U+0000"),
            ("ünïcödé 日本 ✓", "ünïcödé 日本 ✓"),
        ];
        for (input, want) in cases {
            assert_eq!(clean_install_hint(input), want, "{input:?}");
        }
    }
}

//! From a (merged) kubeconfig and command-line overrides to a [`Config`] (client-go's
//! `DirectClientConfig` and `ConfigOverrides`).
//!
//! - Context: `--context` ([`ConfigOverrides::current_context`]) else `current-context`. A
//!   named context that does not exist is an error listing the contexts that do.
//! - Cluster and user: `--cluster` / `--user` else the context's. A name that does not exist
//!   is an error (client-go silently uses an empty entry, which surfaces later as "no
//!   configuration has been provided"; naming the missing entry is kinder), except a missing
//!   cluster when `--server` is given.
//! - Each entry is then overlaid with the overrides' set fields. Special cases, as in
//!   client-go: an override of `insecure-skip-tls-verify`, `certificate-authority` or
//!   `certificate-authority-data` replaces all three (so `--insecure-skip-tls-verify` drops a
//!   kubeconfig CA); an override of `server` or `tls-server-name` replaces `tls-server-name`
//!   (so `--server` drops a kubeconfig's server name); an override of a client certificate or
//!   key replaces both the file and the data field.
//! - No server at all is [`ConfigError::EmptyConfig`]; the deferred loaders then try the
//!   in-cluster configuration.
//! - **Credentials and TLS settings are applied only when the server URL is `https`**
//!   (client-go's `IsConfigTransportTLS`): for an `http://` server (or a bare `host:port`,
//!   which means http) the token, token file, basic auth, client certificate, exec plugin,
//!   CA, `tls-server-name` and `insecure-skip-tls-verify` are all dropped, so secrets never
//!   travel in clear text. Impersonation, `proxy-url` and `disable-compression` always apply.
//! - Files named by the entries (CA, client certificate and key, token file) are read here, so
//!   an unreadable file is reported with the kubeconfig field naming it.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::auth::exec::clean_install_hint;
use crate::auth::{Auth, ExecApiVersion, ExecInteractiveMode, ExecProvider, Impersonation};
use crate::config::Config;
use crate::error::ConfigError;
use crate::kubeconfig::{AuthInfo, Cluster, Context, Kubeconfig};
use crate::secret::Secret;
use crate::tls::{ClientIdentity, TlsConfig};

/// The environment variable giving the server of client-go's legacy cluster defaults.
pub const KUBERNETES_MASTER_ENV: &str = "KUBERNETES_MASTER";

/// Values that take precedence over the kubeconfig, typically from command-line flags
/// (client-go's `ConfigOverrides`). Unset (empty) fields override nothing.
///
/// ```
/// use kctrl_config::ConfigOverrides;
///
/// let mut overrides = ConfigOverrides::default();
/// overrides.current_context = "staging".into(); // --context
/// overrides.context.namespace = "team-a".into(); // --namespace
/// overrides.cluster_info.server = "https://10.0.0.1:6443".into(); // --server
/// ```
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ConfigOverrides {
    /// Overrides the user's fields (`--token`, `--client-certificate`, `--as`, ...).
    pub auth_info: AuthInfo,
    /// Applied *under* the kubeconfig's cluster (used only where it sets nothing); see
    /// [`with_legacy_cluster_defaults`](Self::with_legacy_cluster_defaults).
    pub cluster_defaults: Cluster,
    /// Overrides the cluster's fields (`--server`, `--certificate-authority`, ...).
    pub cluster_info: Cluster,
    /// Overrides the context's fields (`--cluster`, `--user`, `--namespace`).
    pub context: Context,
    /// `--context`: the context to use instead of `current-context`.
    pub current_context: String,
    /// `--request-timeout`.
    pub timeout: Option<Duration>,
}

impl ConfigOverrides {
    /// Sets client-go's legacy cluster defaults (`clientcmd.ClusterDefaults`, used by kubectl):
    /// a kubeconfig without a server then talks to [`default_server`].
    pub fn with_legacy_cluster_defaults(mut self) -> Self {
        self.cluster_defaults.server = default_server();
        self
    }
}

/// `$KUBERNETES_MASTER`, else `http://localhost:8080` (client-go's legacy default server).
pub fn default_server() -> String {
    std::env::var(KUBERNETES_MASTER_ENV)
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "http://localhost:8080".to_owned())
}

/// Resolves one context of a kubeconfig, with overrides, into a [`Config`] (client-go's
/// `DirectClientConfig`, non-interactive).
#[derive(Clone, Debug)]
pub struct KubeconfigResolver {
    kubeconfig: Kubeconfig,
    overrides: ConfigOverrides,
    searched: Vec<PathBuf>,
}

impl KubeconfigResolver {
    /// A resolver for `kubeconfig` with `overrides`.
    pub fn new(kubeconfig: Kubeconfig, overrides: ConfigOverrides) -> Self {
        Self {
            kubeconfig,
            overrides,
            searched: Vec::new(),
        }
    }

    /// Records which files the kubeconfig came from, for error messages.
    pub fn with_searched_files(mut self, files: Vec<PathBuf>) -> Self {
        self.searched = files;
        self
    }

    /// The kubeconfig as loaded, without overrides (client-go's `RawConfig`).
    pub fn kubeconfig(&self) -> &Kubeconfig {
        &self.kubeconfig
    }

    /// The overrides.
    pub fn overrides(&self) -> &ConfigOverrides {
        &self.overrides
    }

    /// The chosen context's name: `--context`, else `current-context` (may be empty).
    pub fn context_name(&self) -> &str {
        if self.overrides.current_context.is_empty() {
            &self.kubeconfig.current_context
        } else {
            &self.overrides.current_context
        }
    }

    /// The chosen context with the overrides applied.
    pub fn context(&self) -> Result<Context, ConfigError> {
        let name = self.context_name();
        let mut context = Context::default();
        if !name.is_empty() {
            match self.kubeconfig.context(name) {
                Some(c) => context = c.clone(),
                None => {
                    return Err(ConfigError::ContextNotFound {
                        context: name.to_owned(),
                        available: self
                            .kubeconfig
                            .contexts
                            .iter()
                            .map(|c| c.name.clone())
                            .collect(),
                        searched: self.searched.clone(),
                    });
                }
            }
        }
        context.overlay(&self.overrides.context);
        Ok(context)
    }

    /// The chosen user's name and entry, with the overrides applied.
    pub fn auth_info(&self) -> Result<(String, AuthInfo), ConfigError> {
        let context = self.context()?;
        let name = context.auth_info;
        let mut auth = AuthInfo::default();
        if !name.is_empty() {
            match self.kubeconfig.auth_info(&name) {
                Some(a) => auth = a.clone(),
                None => {
                    return Err(ConfigError::UserNotFound {
                        user: name,
                        context: self.context_name().to_owned(),
                        available: self
                            .kubeconfig
                            .auth_infos
                            .iter()
                            .map(|a| a.name.clone())
                            .collect(),
                        searched: self.searched.clone(),
                    });
                }
            }
        }
        let o = &self.overrides.auth_info;
        auth.overlay(o);
        // A file from the overrides also replaces inline data from the kubeconfig (and the
        // other way round); otherwise both would be set and conflict.
        if !o.client_key.as_os_str().is_empty() || !o.client_key_data.is_empty() {
            auth.client_key.clone_from(&o.client_key);
            auth.client_key_data = o.client_key_data.clone();
        }
        if !o.client_certificate.as_os_str().is_empty() || !o.client_certificate_data.is_empty() {
            auth.client_certificate.clone_from(&o.client_certificate);
            auth.client_certificate_data
                .clone_from(&o.client_certificate_data);
        }
        Ok((name, auth))
    }

    /// The chosen cluster's name and entry, with defaults and overrides applied.
    pub fn cluster(&self) -> Result<(String, Cluster), ConfigError> {
        let context = self.context()?;
        let name = context.cluster;
        let mut cluster = self.overrides.cluster_defaults.clone();
        if !name.is_empty() {
            match self.kubeconfig.cluster(&name) {
                Some(c) => cluster.overlay(c),
                // `--server` supplies what the missing entry would have.
                None if !self.overrides.cluster_info.server.is_empty() => {
                    tracing::debug!(cluster = %name, "cluster not found in kubeconfig; using --server");
                }
                None => {
                    return Err(ConfigError::ClusterNotFound {
                        cluster: name,
                        context: self.context_name().to_owned(),
                        available: self
                            .kubeconfig
                            .clusters
                            .iter()
                            .map(|c| c.name.clone())
                            .collect(),
                        searched: self.searched.clone(),
                    });
                }
            }
        }
        let o = &self.overrides.cluster_info;
        cluster.overlay(o);
        if o.insecure_skip_tls_verify
            || !o.certificate_authority.as_os_str().is_empty()
            || !o.certificate_authority_data.is_empty()
        {
            cluster.insecure_skip_tls_verify = o.insecure_skip_tls_verify;
            cluster
                .certificate_authority
                .clone_from(&o.certificate_authority);
            cluster
                .certificate_authority_data
                .clone_from(&o.certificate_authority_data);
        }
        if !o.tls_server_name.is_empty() || !o.server.is_empty() {
            cluster.tls_server_name.clone_from(&o.tls_server_name);
        }
        Ok((name, cluster))
    }

    /// The namespace to use and whether `--namespace` chose it (client-go's `Namespace`):
    /// the override, else the context's namespace, else `default`.
    pub fn namespace(&self) -> Result<(String, bool), ConfigError> {
        if !self.overrides.context.namespace.is_empty() {
            return Ok((self.overrides.context.namespace.clone(), true));
        }
        let context = self.context()?;
        if context.namespace.is_empty() {
            Ok(("default".to_owned(), false))
        } else {
            Ok((context.namespace, false))
        }
    }

    /// The resolved configuration (client-go's `ClientConfig`).
    pub fn config(&self) -> Result<Config, ConfigError> {
        let (user_name, auth) = self.auth_info()?;
        let (cluster_name, cluster) = self.cluster()?;

        if cluster.server.is_empty() {
            let unset = Cluster {
                origin: None,
                ..cluster.clone()
            } == Cluster::default();
            return Err(if cluster_name.is_empty() || unset {
                ConfigError::EmptyConfig {
                    searched: self.searched.clone(),
                }
            } else {
                ConfigError::NoServer {
                    cluster: cluster_name,
                }
            });
        }
        let server = parse_server(&cluster.server)?;
        let proxy_url = parse_proxy_url(&cluster_name, &cluster.proxy_url)?;

        let (namespace, _) = self.namespace()?;
        if !is_dns1123_label(&namespace) {
            return Err(ConfigError::InvalidNamespace {
                context: self.context_name().to_owned(),
                namespace,
            });
        }

        let mut config = Config::new(server);
        config.default_namespace = namespace;
        config.timeout = self.overrides.timeout;
        config.proxy_url = proxy_url;
        config.disable_compression = cluster.disable_compression;
        config.impersonate = impersonation(&user_name, &auth)?;

        if config.is_https() {
            config.tls = server_tls(&cluster_name, &cluster)?;
            let (credential, identity) = user_credentials(&user_name, &auth, &cluster)?;
            config.auth = credential;
            config.tls.client_identity = identity;
        } else if has_credentials(&auth) {
            tracing::debug!(
                user = %user_name,
                server = %crate::redacted_url(&config.server),
                "not sending the user's credentials to a non-https server"
            );
        }
        Ok(config)
    }
}

impl Config {
    /// The configuration of a kubeconfig given as YAML, at its `current-context` (client-go's
    /// `RESTConfigFromKubeConfig`). Relative paths in it are taken as they are.
    pub fn from_kubeconfig_yaml(yaml: &str) -> Result<Self, ConfigError> {
        KubeconfigResolver::new(Kubeconfig::from_yaml(yaml)?, ConfigOverrides::default()).config()
    }
}

/// `server` (possibly not a valid URL) with any userinfo (`user:password@`) before its host
/// replaced by `redacted@`, for error messages.
fn redact_userinfo(server: &str) -> String {
    let (scheme, rest) = match server.find("://") {
        Some(i) => server.split_at(i + 3),
        None => ("", server),
    };
    let authority = &rest[..rest.find('/').unwrap_or(rest.len())];
    match authority.rfind('@') {
        Some(at) => format!("{scheme}redacted@{}", &rest[at + 1..]),
        None => server.to_owned(),
    }
}

/// Parses a kubeconfig `server`: a URL with an http(s) scheme, or a bare `host[:port]`, which
/// means plain http as in client-go. Queries and fragments are dropped.
pub(crate) fn parse_server(server: &str) -> Result<url::Url, ConfigError> {
    let invalid = |reason: &str| ConfigError::InvalidServer {
        server: redact_userinfo(server),
        reason: reason.to_owned(),
    };
    let mut url = match url::Url::parse(server) {
        Ok(url) if url.has_host() => {
            if !matches!(url.scheme(), "http" | "https") {
                return Err(invalid("the scheme must be http or https"));
            }
            url
        }
        _ => {
            let url = url::Url::parse(&format!("http://{server}"))
                .map_err(|e| invalid(&format!("not a URL or a host:port pair ({e})")))?;
            if url.path() != "/" {
                return Err(invalid(
                    "a server without a scheme must be a host:port pair",
                ));
            }
            url
        }
    };
    url.set_query(None);
    url.set_fragment(None);
    Ok(url)
}

/// Parses a `proxy-url`: http, https and socks5 are allowed (client-go's `parseProxyURL`).
fn parse_proxy_url(cluster: &str, proxy_url: &str) -> Result<Option<url::Url>, ConfigError> {
    if proxy_url.is_empty() {
        return Ok(None);
    }
    let invalid = |reason: String| ConfigError::InvalidProxyUrl {
        cluster: cluster.to_owned(),
        proxy_url: proxy_url.to_owned(),
        reason,
    };
    let url = url::Url::parse(proxy_url).map_err(|e| invalid(e.to_string()))?;
    if !matches!(url.scheme(), "http" | "https" | "socks5") {
        return Err(invalid(format!(
            "unsupported scheme {:?}, must be http, https, or socks5",
            url.scheme()
        )));
    }
    if !url.has_host() {
        return Err(invalid("no host".to_owned()));
    }
    Ok(Some(url))
}

/// Lowercase alphanumerics and `-`, at most 63, starting and ending alphanumeric.
fn is_dns1123_label(s: &str) -> bool {
    let ok_char = |c: u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    let bytes = s.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 63
        && bytes.iter().all(|&c| ok_char(c) || c == b'-')
        && ok_char(bytes[0])
        && ok_char(bytes[bytes.len() - 1])
}

fn entry(kind: &str, name: &str) -> String {
    format!("{kind}[{name:?}]")
}

fn read_file(field: String, path: &Path) -> Result<Vec<u8>, ConfigError> {
    std::fs::read(path).map_err(|source| ConfigError::ReadFile {
        field,
        path: path.to_owned(),
        source,
    })
}

fn server_tls(name: &str, cluster: &Cluster) -> Result<TlsConfig, ConfigError> {
    let has_ca_file = !cluster.certificate_authority.as_os_str().is_empty();
    let has_ca_data = !cluster.certificate_authority_data.is_empty();
    if has_ca_file && has_ca_data {
        return Err(ConfigError::InvalidConfig {
            entry: entry("clusters", name),
            reason: "certificate-authority and certificate-authority-data are both specified"
                .to_owned(),
        });
    }
    let ca_pem = if has_ca_data {
        Some(cluster.certificate_authority_data.clone())
    } else if has_ca_file {
        Some(read_file(
            format!("{}.certificate-authority", entry("clusters", name)),
            &cluster.certificate_authority,
        )?)
    } else {
        None
    };
    if ca_pem.is_some() && cluster.insecure_skip_tls_verify {
        return Err(ConfigError::InvalidConfig {
            entry: entry("clusters", name),
            reason: "a certificate authority may not be combined with insecure-skip-tls-verify"
                .to_owned(),
        });
    }
    Ok(TlsConfig {
        ca_pem,
        server_name: Some(cluster.tls_server_name.clone()).filter(|s| !s.is_empty()),
        insecure_skip_verify: cluster.insecure_skip_tls_verify,
        client_identity: None,
    })
}

fn has_credentials(auth: &AuthInfo) -> bool {
    !auth.token.is_empty()
        || !auth.token_file.as_os_str().is_empty()
        || !auth.username.is_empty()
        || !auth.password.is_empty()
        || !auth.client_certificate.as_os_str().is_empty()
        || !auth.client_certificate_data.is_empty()
        || auth.exec.is_some()
        || auth.auth_provider.is_some()
}

fn impersonation(user: &str, auth: &AuthInfo) -> Result<Option<Impersonation>, ConfigError> {
    if auth.impersonate.is_empty() {
        if !auth.impersonate_uid.is_empty()
            || !auth.impersonate_groups.is_empty()
            || !auth.impersonate_user_extra.is_empty()
        {
            return Err(ConfigError::InvalidConfig {
                entry: entry("users", user),
                reason:
                    "as-uid, as-groups or as-user-extra requested without impersonating a user (as)"
                        .to_owned(),
            });
        }
        return Ok(None);
    }
    Ok(Some(Impersonation {
        user: auth.impersonate.clone(),
        uid: Some(auth.impersonate_uid.clone()).filter(|u| !u.is_empty()),
        groups: auth.impersonate_groups.clone(),
        extra: auth.impersonate_user_extra.clone(),
    }))
}

/// The credential and client certificate of a user, for an https server.
fn user_credentials(
    user: &str,
    auth: &AuthInfo,
    cluster: &Cluster,
) -> Result<(Auth, Option<ClientIdentity>), ConfigError> {
    let this = entry("users", user);
    let invalid = |reason: String| ConfigError::InvalidConfig {
        entry: this.clone(),
        reason,
    };
    let has_token = !auth.token.is_empty();
    let has_basic = !auth.username.is_empty() || !auth.password.is_empty();
    if has_token && has_basic {
        return Err(invalid(
            "more than one authentication method found (token, basicAuth); only one is allowed"
                .to_owned(),
        ));
    }

    let identity = client_identity(&this, auth)?;

    let credential = if has_token {
        if auth.token_file.as_os_str().is_empty() {
            Auth::BearerToken(auth.token.clone())
        } else {
            Auth::TokenFile {
                path: auth.token_file.clone(),
                token: Some(auth.token.clone()),
            }
        }
    } else if !auth.token_file.as_os_str().is_empty() {
        let bytes = read_file(format!("{this}.tokenFile"), &auth.token_file)?;
        let token = String::from_utf8_lossy(&bytes).trim().to_owned();
        Auth::TokenFile {
            path: auth.token_file.clone(),
            token: Some(Secret::new(token)).filter(|t| !t.is_empty()),
        }
    } else if has_basic {
        Auth::Basic {
            username: auth.username.clone(),
            password: auth.password.clone(),
        }
    } else {
        Auth::None
    };

    if auth.exec.is_some() && auth.auth_provider.is_some() {
        return Err(invalid(
            "auth-provider cannot be combined with an exec plugin".to_owned(),
        ));
    }
    let other_method = credential != Auth::None || identity.is_some();
    if let Some(exec) = &auth.exec {
        let provider = exec_provider(&this, exec, cluster)?;
        if other_method {
            // client-go: an explicit token, basic auth or certificate wins over the plugin.
            tracing::debug!(user = %user, "exec plugin not used: the user has another credential");
            return Ok((credential, identity));
        }
        return Ok((Auth::Exec(provider), None));
    }
    if let Some(provider) = &auth.auth_provider
        && !other_method
    {
        return Err(ConfigError::UnsupportedAuthProvider {
            user: user.to_owned(),
            name: provider.name.clone(),
        });
    }
    Ok((credential, identity))
}

fn client_identity(this: &str, auth: &AuthInfo) -> Result<Option<ClientIdentity>, ConfigError> {
    let cert_file = &auth.client_certificate;
    let key_file = &auth.client_key;
    let has_cert_file = !cert_file.as_os_str().is_empty();
    let has_key_file = !key_file.as_os_str().is_empty();
    if !has_cert_file && auth.client_certificate_data.is_empty() {
        return Ok(None);
    }
    let invalid = |reason: &str| ConfigError::InvalidConfig {
        entry: this.to_owned(),
        reason: reason.to_owned(),
    };
    if has_cert_file && !auth.client_certificate_data.is_empty() {
        return Err(invalid(
            "client-certificate and client-certificate-data are both specified",
        ));
    }
    if has_key_file && !auth.client_key_data.is_empty() {
        return Err(invalid("client-key and client-key-data are both specified"));
    }
    if !has_key_file && auth.client_key_data.is_empty() {
        return Err(invalid(
            "client-key-data or client-key must be specified to use a client certificate",
        ));
    }
    let cert_pem = if has_cert_file {
        read_file(format!("{this}.client-certificate"), cert_file)?
    } else {
        auth.client_certificate_data.clone()
    };
    let key_pem = if has_key_file {
        Secret::new(read_file(format!("{this}.client-key"), key_file)?)
    } else {
        auth.client_key_data.clone()
    };
    Ok(Some(ClientIdentity { cert_pem, key_pem }))
}

fn exec_provider(
    this: &str,
    exec: &crate::kubeconfig::ExecConfig,
    cluster: &Cluster,
) -> Result<ExecProvider, ConfigError> {
    let invalid = |reason: String| ConfigError::InvalidConfig {
        entry: format!("{this}.exec"),
        reason,
    };
    if exec.command.is_empty() {
        return Err(invalid("command must be specified".to_owned()));
    }
    let api_version = match exec.api_version.as_str() {
        "" => return Err(invalid("apiVersion must be specified".to_owned())),
        v => ExecApiVersion::parse(v).ok_or_else(|| {
            invalid(format!(
                "invalid apiVersion {v:?}: use client.authentication.k8s.io/v1 or v1beta1"
            ))
        })?,
    };
    let interactive_mode = match (exec.interactive_mode.as_str(), api_version) {
        // v1beta1 defaults to IfAvailable; v1 requires the field.
        ("", ExecApiVersion::V1Beta1) => ExecInteractiveMode::IfAvailable,
        ("", ExecApiVersion::V1) => {
            return Err(invalid("interactiveMode must be specified".to_owned()));
        }
        (mode, _) => ExecInteractiveMode::parse(mode)
            .ok_or_else(|| invalid(format!("invalid interactiveMode {mode:?}")))?,
    };
    if exec.env.iter().any(|e| e.name.is_empty()) {
        return Err(invalid("env variable name must be specified".to_owned()));
    }
    let cluster_config = cluster.exec_extension().cloned();
    let mut provider = ExecProvider::new(exec.command.clone(), api_version);
    provider.args = exec.args.clone();
    provider.env = exec
        .env
        .iter()
        .map(|e| (e.name.clone(), e.value.clone()))
        .collect();
    provider.install_hint = Some(clean_install_hint(&exec.install_hint)).filter(|h| !h.is_empty());
    provider.provide_cluster_info = exec.provide_cluster_info;
    provider.interactive_mode = interactive_mode;
    provider.cluster_config = cluster_config;
    Ok(provider)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kubeconfig::{NamedAuthInfo, NamedCluster, NamedContext};
    use std::collections::BTreeMap;

    /// client-go's createValidTestConfig: context, cluster and user "clean".
    fn valid_config() -> Kubeconfig {
        Kubeconfig {
            clusters: vec![NamedCluster {
                name: "clean".into(),
                cluster: Cluster {
                    server: "https://anything.com:8080".into(),
                    ..Cluster::default()
                },
            }],
            auth_infos: vec![NamedAuthInfo {
                name: "clean".into(),
                auth_info: AuthInfo {
                    token: Secret::from("the-token"),
                    ..AuthInfo::default()
                },
            }],
            contexts: vec![NamedContext {
                name: "clean".into(),
                context: Context {
                    cluster: "clean".into(),
                    auth_info: "clean".into(),
                    ..Context::default()
                },
            }],
            current_context: "clean".into(),
            ..Kubeconfig::default()
        }
    }

    /// client-go's createCAValidTestConfig.
    fn ca_valid_config() -> Kubeconfig {
        let mut kc = valid_config();
        kc.clusters[0].cluster.certificate_authority_data = vec![0, 0];
        kc
    }

    fn with_cluster(cluster: Cluster) -> Kubeconfig {
        let mut kc = valid_config();
        kc.clusters[0].cluster = cluster;
        kc
    }

    fn with_user(auth: AuthInfo) -> Kubeconfig {
        let mut kc = valid_config();
        kc.auth_infos[0].auth_info = auth;
        kc
    }

    fn resolve(kc: Kubeconfig, overrides: ConfigOverrides) -> Result<Config, ConfigError> {
        KubeconfigResolver::new(kc, overrides).config()
    }

    fn cluster_override(cluster: Cluster) -> ConfigOverrides {
        ConfigOverrides {
            cluster_info: cluster,
            ..ConfigOverrides::default()
        }
    }

    /// client-go's TestMergeSemantics, restated on the kubeconfig types: set scalars replace,
    /// unset ones keep the destination, lists replace whole, optional structures replace
    /// whole (zero fields included) and maps merge key by key with the source winning.
    #[test]
    fn merge_semantics() {
        // Scalars: set replaces, unset keeps.
        let mut dst = Cluster {
            server: "one".into(),
            proxy_url: "http://p".into(),
            insecure_skip_tls_verify: true,
            ..Cluster::default()
        };
        dst.overlay(&Cluster {
            server: "two".into(),
            ..Cluster::default()
        });
        assert_eq!(dst.server, "two");
        assert_eq!(dst.proxy_url, "http://p");
        assert!(dst.insecure_skip_tls_verify, "false does not override true");

        // Lists replace whole.
        let mut dst = AuthInfo {
            impersonate_groups: vec!["test3".into(), "test4".into(), "test5".into()],
            ..AuthInfo::default()
        };
        dst.overlay(&AuthInfo {
            impersonate_groups: vec!["test1".into(), "test2".into(), "test3".into()],
            ..AuthInfo::default()
        });
        assert_eq!(dst.impersonate_groups, ["test1", "test2", "test3"]);

        // Optional structures: set in src → taken whole; absent in src → kept.
        let exec_a = crate::kubeconfig::ExecConfig {
            command: "a".into(),
            provide_cluster_info: true,
            ..Default::default()
        };
        let exec_b = crate::kubeconfig::ExecConfig {
            command: "b".into(),
            provide_cluster_info: false,
            ..Default::default()
        };
        let mut dst = AuthInfo::default();
        dst.overlay(&AuthInfo {
            exec: Some(exec_a.clone()),
            ..AuthInfo::default()
        });
        assert_eq!(dst.exec.as_ref(), Some(&exec_a));
        dst.overlay(&AuthInfo::default());
        assert_eq!(dst.exec.as_ref(), Some(&exec_a));
        dst.overlay(&AuthInfo {
            exec: Some(exec_b.clone()),
            ..AuthInfo::default()
        });
        assert_eq!(
            dst.exec,
            Some(exec_b),
            "zero fields inside replace non-zero ones"
        );

        // Maps merge, the source's keys winning.
        let map = |pairs: &[(&str, i32)]| -> BTreeMap<String, Vec<String>> {
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), vec![v.to_string()]))
                .collect()
        };
        let mut dst = AuthInfo {
            impersonate_user_extra: map(&[
                ("rsc", 6543),
                ("r", 2138),
                ("gri", 1908),
                ("adg", 912),
                ("prt", 22),
            ]),
            ..AuthInfo::default()
        };
        dst.overlay(&AuthInfo {
            impersonate_user_extra: map(&[("rsc", 3711), ("r", 2138), ("gri", 1908), ("adg", 912)]),
            ..AuthInfo::default()
        });
        assert_eq!(
            dst.impersonate_user_extra,
            map(&[
                ("rsc", 3711),
                ("r", 2138),
                ("gri", 1908),
                ("adg", 912),
                ("prt", 22)
            ])
        );

        // Zero source: no-op.
        let before = with_user(AuthInfo {
            username: "u".into(),
            ..AuthInfo::default()
        })
        .auth_infos[0]
            .auth_info
            .clone();
        let mut after = before.clone();
        after.overlay(&AuthInfo::default());
        assert_eq!(after, before);
    }

    #[test]
    fn disable_compression() {
        let config = resolve(
            valid_config(),
            cluster_override(Cluster {
                disable_compression: true,
                ..Cluster::default()
            }),
        )
        .unwrap();
        assert!(config.disable_compression);
    }

    #[test]
    fn insecure_overrides_ca() {
        let config = resolve(
            ca_valid_config(),
            cluster_override(Cluster {
                insecure_skip_tls_verify: true,
                ..Cluster::default()
            }),
        )
        .unwrap();
        assert!(config.tls.insecure_skip_verify);
        assert_eq!(config.tls.ca_pem, None);
    }

    #[test]
    fn ca_overrides_ca_data() {
        let dir = tempfile::tempdir().unwrap();
        let ca_file = dir.path().join("my.ca");
        std::fs::write(&ca_file, b"ca-from-file").unwrap();
        let config = resolve(
            ca_valid_config(),
            cluster_override(Cluster {
                certificate_authority: ca_file,
                ..Cluster::default()
            }),
        )
        .unwrap();
        assert!(!config.tls.insecure_skip_verify);
        assert_eq!(config.tls.ca_pem.as_deref(), Some(&b"ca-from-file"[..]));
    }

    #[test]
    fn tls_server_name() {
        let config = resolve(
            valid_config(),
            cluster_override(Cluster {
                tls_server_name: "overridden-server-name".into(),
                ..Cluster::default()
            }),
        )
        .unwrap();
        assert_eq!(
            config.tls.server_name.as_deref(),
            Some("overridden-server-name")
        );
        assert_eq!(config.tls.ca_pem, None);
    }

    #[test]
    fn tls_server_name_clears_when_server_name_set() {
        let kc = with_cluster(Cluster {
            server: "https://anything.com:8080".into(),
            tls_server_name: "from-kubeconfig".into(),
            ..Cluster::default()
        });
        // The upstream case: an http --server (TLS settings are not applied at all).
        let config = resolve(
            kc.clone(),
            cluster_override(Cluster {
                server: "http://something".into(),
                ..Cluster::default()
            }),
        )
        .unwrap();
        assert_eq!(config.tls.server_name, None);
        // And with an https --server, where the kubeconfig's name would otherwise apply.
        let config = resolve(
            kc.clone(),
            cluster_override(Cluster {
                server: "https://something".into(),
                ..Cluster::default()
            }),
        )
        .unwrap();
        assert_eq!(config.tls.server_name, None);
        // Without a --server the kubeconfig's name stays.
        let config = resolve(kc, ConfigOverrides::default()).unwrap();
        assert_eq!(config.tls.server_name.as_deref(), Some("from-kubeconfig"));
    }

    #[test]
    fn full_impersonate_config() {
        let kc = with_user(AuthInfo {
            impersonate: "alice".into(),
            impersonate_uid: "abc123".into(),
            impersonate_groups: vec!["group-1".into()],
            impersonate_user_extra: BTreeMap::from([(
                "some-key".to_owned(),
                vec!["some-value".to_owned()],
            )]),
            ..AuthInfo::default()
        });
        let config = resolve(
            kc,
            cluster_override(Cluster {
                server: "http://something".into(),
                ..Cluster::default()
            }),
        )
        .unwrap();
        let imp = config.impersonate.unwrap();
        assert_eq!(imp.user, "alice");
        assert_eq!(imp.uid.as_deref(), Some("abc123"));
        assert_eq!(imp.groups, ["group-1"]);
        assert_eq!(imp.extra["some-key"], ["some-value"]);
    }

    #[test]
    fn impersonation_details_require_a_user() {
        let kc = with_user(AuthInfo {
            impersonate_groups: vec!["g".into()],
            ..AuthInfo::default()
        });
        let err = resolve(kc, ConfigOverrides::default()).unwrap_err();
        assert!(err.to_string().contains("users[\"clean\"]"), "{err}");
    }

    #[test]
    fn merge_context() {
        let resolver = KubeconfigResolver::new(valid_config(), ConfigOverrides::default());
        assert_eq!(resolver.namespace().unwrap(), ("default".to_owned(), false));
        let mut overrides = ConfigOverrides::default();
        overrides.context.namespace = "overridden-namespace".into();
        let resolver = KubeconfigResolver::new(valid_config(), overrides);
        assert_eq!(
            resolver.namespace().unwrap(),
            ("overridden-namespace".to_owned(), true)
        );
        assert_eq!(
            resolver.config().unwrap().default_namespace,
            "overridden-namespace"
        );
    }

    #[test]
    fn certificate_data() {
        let kc = {
            let mut kc = with_user(AuthInfo {
                client_certificate_data: b"cert-data".to_vec(),
                client_key_data: Secret::new(b"key-data".to_vec()),
                ..AuthInfo::default()
            });
            kc.clusters[0].cluster = Cluster {
                server: "https://localhost:8443".into(),
                certificate_authority_data: b"ca-data".to_vec(),
                ..Cluster::default()
            };
            kc
        };
        let config = resolve(kc, ConfigOverrides::default()).unwrap();
        assert_eq!(config.tls.ca_pem.as_deref(), Some(&b"ca-data"[..]));
        let identity = config.tls.client_identity.unwrap();
        assert_eq!(identity.cert_pem, b"cert-data");
        assert_eq!(identity.key_pem.expose(), b"key-data");
        assert_eq!(config.auth, Auth::None);
    }

    #[test]
    fn proxy_url() {
        let cases = [
            ("", false),
            ("socks5://example.com", false),
            ("https://example.com", false),
            ("http://example.com", false),
            ("socks6://example.com", true),
            ("example.com", true),
            ("chewbacca@example.com", true),
        ];
        for (proxy, expect_err) in cases {
            let kc = with_cluster(Cluster {
                server: "https://localhost:8443".into(),
                proxy_url: proxy.into(),
                ..Cluster::default()
            });
            let result = resolve(kc, ConfigOverrides::default());
            if expect_err {
                let err = result.expect_err(proxy);
                assert!(
                    matches!(err, ConfigError::InvalidProxyUrl { .. }),
                    "{proxy}: {err}"
                );
                continue;
            }
            let config = result.unwrap();
            match proxy {
                "" => assert_eq!(config.proxy_url, None),
                p => assert_eq!(config.proxy_url.unwrap().as_str().trim_end_matches('/'), p),
            }
        }
    }

    #[test]
    fn basic_auth_data() {
        let kc = with_user(AuthInfo {
            username: "myuser".into(),
            password: Secret::from("mypass"),
            ..AuthInfo::default()
        });
        let config = resolve(kc, ConfigOverrides::default()).unwrap();
        assert_eq!(
            config.auth,
            Auth::Basic {
                username: "myuser".into(),
                password: Secret::from("mypass")
            }
        );
    }

    #[test]
    fn basic_token_file() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("tokenfile");
        std::fs::write(&file, "exampletoken").unwrap();
        let kc = with_user(AuthInfo {
            token_file: file.clone(),
            ..AuthInfo::default()
        });
        let config = resolve(kc, ConfigOverrides::default()).unwrap();
        assert_eq!(
            config.auth,
            Auth::TokenFile {
                path: file,
                token: Some(Secret::from("exampletoken"))
            }
        );
    }

    #[test]
    fn precedence_token_file() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("tokenfile");
        std::fs::write(&file, "exampletoken").unwrap();
        let kc = with_user(AuthInfo {
            token: Secret::from("expected"),
            token_file: file.clone(),
            ..AuthInfo::default()
        });
        let config = resolve(kc, ConfigOverrides::default()).unwrap();
        assert_eq!(
            config.auth,
            Auth::TokenFile {
                path: file,
                token: Some(Secret::from("expected"))
            }
        );
    }

    #[test]
    fn create_clean() {
        let config = resolve(valid_config(), ConfigOverrides::default()).unwrap();
        assert_eq!(config.server.as_str(), "https://anything.com:8080/");
        assert!(!config.tls.insecure_skip_verify);
        assert_eq!(config.tls.server_name, None);
        assert_eq!(config.auth, Auth::BearerToken(Secret::from("the-token")));
    }

    #[test]
    fn create_clean_with_prefix() {
        let cases = [
            (
                "https://anything.com:8080/foo/bar",
                Ok("https://anything.com:8080/foo/bar"),
            ),
            (
                "http://anything.com:8080/foo/bar",
                Ok("http://anything.com:8080/foo/bar"),
            ),
            (
                "http://anything.com:8080/foo/bar/",
                Ok("http://anything.com:8080/foo/bar/"),
            ),
            ("http://anything.com:8080/", Ok("http://anything.com:8080/")),
            (
                "http://anything.com:8080//",
                Ok("http://anything.com:8080//"),
            ),
            (
                "https://anything.com/x?q=1#frag",
                Ok("https://anything.com/x"),
            ),
            ("anything.com:8080", Ok("http://anything.com:8080/")),
            ("anything.com", Ok("http://anything.com/")),
            ("anything", Ok("http://anything/")),
            ("10.0.0.1:6443", Ok("http://10.0.0.1:6443/")),
            ("[::1]:6443", Ok("http://[::1]:6443/")),
            // client-go rejects these when building the client; here when resolving.
            ("anything.com:8080/foo/bar", Err(())),
            ("ftp://anything.com", Err(())),
        ];
        for (server, want) in cases {
            let got = parse_server(server).map(|u| u.to_string()).map_err(|_| ());
            assert_eq!(got, want.map(str::to_owned), "{server}");
        }
        // A refused server is named in the error without its password.
        for server in ["ftp://alice:hunter2@anything.com", "alice:hunter2@host:1/x"] {
            let err = parse_server(server).unwrap_err().to_string();
            assert!(!err.contains("hunter2"), "{err}");
            assert!(err.contains("redacted@"), "{err}");
        }
        // An empty server falls back to the cluster defaults.
        let kc = with_cluster(Cluster::default());
        let overrides = ConfigOverrides {
            cluster_defaults: Cluster {
                server: "http://localhost:8080".into(),
                ..Cluster::default()
            },
            ..ConfigOverrides::default()
        };
        let config = resolve(kc, overrides).unwrap();
        assert_eq!(config.server.as_str(), "http://localhost:8080/");
    }

    #[test]
    fn create_clean_default_cluster() {
        let overrides = ConfigOverrides {
            cluster_defaults: Cluster {
                server: "http://localhost:8080".into(),
                ..Cluster::default()
            },
            ..ConfigOverrides::default()
        };
        let config = resolve(valid_config(), overrides).unwrap();
        assert_eq!(config.server.as_str(), "https://anything.com:8080/");
        assert_eq!(config.auth, Auth::BearerToken(Secret::from("the-token")));
    }

    #[test]
    fn create_missing_context() {
        let overrides = ConfigOverrides {
            current_context: "not-present".into(),
            ..ConfigOverrides::default()
        };
        let err = KubeconfigResolver::new(valid_config(), overrides)
            .with_searched_files(vec!["/home/me/.kube/config".into()])
            .config()
            .unwrap_err();
        match &err {
            ConfigError::ContextNotFound {
                context, available, ..
            } => {
                assert_eq!(context, "not-present");
                assert_eq!(available, &["clean"]);
            }
            other => panic!("unexpected {other:?}"),
        }
        let text = err.to_string();
        assert!(
            text.contains("not-present") && text.contains("clean"),
            "{text}"
        );
        assert!(text.contains("/home/me/.kube/config"), "{text}");
    }

    #[test]
    fn missing_cluster_or_user_named_by_the_context() {
        let mut kc = valid_config();
        kc.contexts[0].context.cluster = "gone".into();
        let err = resolve(kc, ConfigOverrides::default()).unwrap_err();
        assert!(
            matches!(&err, ConfigError::ClusterNotFound { cluster, context, .. }
            if cluster == "gone" && context == "clean"),
            "{err}"
        );

        let mut kc = valid_config();
        kc.contexts[0].context.auth_info = "nobody".into();
        let err = resolve(kc, ConfigOverrides::default()).unwrap_err();
        assert!(
            matches!(&err, ConfigError::UserNotFound { user, .. } if user == "nobody"),
            "{err}"
        );

        let mut overrides = ConfigOverrides::default();
        overrides.context.cluster = "other".into();
        let err = resolve(valid_config(), overrides.clone()).unwrap_err();
        assert!(matches!(err, ConfigError::ClusterNotFound { .. }));
        // With --server the missing cluster entry is not needed.
        overrides.cluster_info.server = "https://flag:6443".into();
        let config = resolve(valid_config(), overrides).unwrap();
        assert_eq!(config.server.as_str(), "https://flag:6443/");
    }

    #[test]
    fn empty_config_and_no_server() {
        let err = resolve(Kubeconfig::default(), ConfigOverrides::default()).unwrap_err();
        assert!(matches!(err, ConfigError::EmptyConfig { .. }), "{err}");
        // A --server alone is enough.
        let config = resolve(
            Kubeconfig::default(),
            cluster_override(Cluster {
                server: "https://10.1.2.3:6443".into(),
                ..Cluster::default()
            }),
        )
        .unwrap();
        assert_eq!(config.server.as_str(), "https://10.1.2.3:6443/");
        assert_eq!(config.auth, Auth::None);
        // A named cluster without a server is named.
        let kc = with_cluster(Cluster {
            insecure_skip_tls_verify: true,
            ..Cluster::default()
        });
        let err = resolve(kc, ConfigOverrides::default()).unwrap_err();
        assert!(
            matches!(&err, ConfigError::NoServer { cluster } if cluster == "clean"),
            "{err}"
        );
    }

    #[test]
    fn credentials_are_dropped_for_http_servers() {
        let mut kc = with_user(AuthInfo {
            token: Secret::from("t"),
            client_certificate_data: b"c".to_vec(),
            client_key_data: Secret::new(b"k".to_vec()),
            impersonate: "bob".into(),
            ..AuthInfo::default()
        });
        kc.clusters[0].cluster = Cluster {
            server: "http://plain:8080".into(),
            certificate_authority_data: b"ca".to_vec(),
            tls_server_name: "name".into(),
            ..Cluster::default()
        };
        let config = resolve(kc, ConfigOverrides::default()).unwrap();
        assert_eq!(config.auth, Auth::None);
        assert_eq!(config.tls, TlsConfig::default());
        assert_eq!(config.impersonate.unwrap().user, "bob");
    }

    #[test]
    fn unreadable_files_name_the_field_and_file() {
        let kc = with_user(AuthInfo {
            client_certificate: "/nonexistent/alice.crt".into(),
            client_key: "/nonexistent/alice.key".into(),
            ..AuthInfo::default()
        });
        let err = resolve(kc, ConfigOverrides::default()).unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("users[\"clean\"].client-certificate"),
            "{text}"
        );
        assert!(text.contains("/nonexistent/alice.crt"), "{text}");

        let kc = with_cluster(Cluster {
            server: "https://x".into(),
            certificate_authority: "/nonexistent/ca.crt".into(),
            ..Cluster::default()
        });
        let err = resolve(kc, ConfigOverrides::default()).unwrap_err();
        assert!(
            err.to_string()
                .contains("clusters[\"clean\"].certificate-authority"),
            "{err}"
        );

        let kc = with_user(AuthInfo {
            token_file: "/nonexistent/token".into(),
            ..AuthInfo::default()
        });
        let err = resolve(kc, ConfigOverrides::default()).unwrap_err();
        assert!(
            err.to_string().contains("users[\"clean\"].tokenFile"),
            "{err}"
        );
    }

    #[test]
    fn conflicting_user_settings_are_errors() {
        let cases = [
            AuthInfo {
                token: Secret::from("t"),
                username: "u".into(),
                ..AuthInfo::default()
            },
            AuthInfo {
                client_certificate_data: b"c".to_vec(),
                ..AuthInfo::default()
            },
            AuthInfo {
                exec: Some(crate::kubeconfig::ExecConfig {
                    command: "x".into(),
                    api_version: "client.authentication.k8s.io/v1alpha1".into(),
                    ..Default::default()
                }),
                ..AuthInfo::default()
            },
            AuthInfo {
                exec: Some(crate::kubeconfig::ExecConfig {
                    command: "x".into(),
                    api_version: "client.authentication.k8s.io/v1".into(),
                    ..Default::default()
                }),
                ..AuthInfo::default()
            },
        ];
        for auth in cases {
            let err = resolve(with_user(auth.clone()), ConfigOverrides::default()).unwrap_err();
            assert!(
                matches!(err, ConfigError::InvalidConfig { .. }),
                "{auth:?}: {err}"
            );
        }
        let err = resolve(
            with_user(AuthInfo {
                auth_provider: Some(crate::kubeconfig::AuthProviderConfig {
                    name: "gcp".into(),
                    ..Default::default()
                }),
                ..AuthInfo::default()
            }),
            ConfigOverrides::default(),
        )
        .unwrap_err();
        assert!(
            matches!(err, ConfigError::UnsupportedAuthProvider { .. }),
            "{err}"
        );
    }

    #[test]
    fn auth_config_merge() {
        let kc = Kubeconfig::from_yaml(
            r#"
apiVersion: v1
clusters:
- cluster:
    server: https://localhost:8080
    extensions:
    - name: client.authentication.k8s.io/exec
      extension:
        audience: foo
        other: bar
  name: foo-cluster
contexts:
- context:
    cluster: foo-cluster
    user: foo-user
    namespace: bar
  name: foo-context
current-context: foo-context
kind: Config
users:
- name: foo-user
  user:
    exec:
      apiVersion: client.authentication.k8s.io/v1beta1
      args:
      - arg-1
      - arg-2
      command: foo-command
      provideClusterInfo: true
      installHint: "install \u001b[1mfoo\u001b[0m"
"#,
        )
        .unwrap();
        let config = resolve(kc, ConfigOverrides::default()).unwrap();
        let Auth::Exec(provider) = config.auth else {
            panic!("expected an exec plugin, got {:?}", config.auth);
        };
        assert_eq!(provider.args, ["arg-1", "arg-2"]);
        assert!(provider.provide_cluster_info);
        assert_eq!(provider.interactive_mode, ExecInteractiveMode::IfAvailable);
        assert_eq!(
            provider.cluster_config,
            Some(serde_json::json!({"audience": "foo", "other": "bar"}))
        );
        assert_eq!(
            provider.install_hint.as_deref(),
            Some("install U+001B[1mfooU+001B[0m")
        );
        assert_eq!(config.default_namespace, "bar");
    }

    #[test]
    fn exec_is_ignored_when_another_credential_is_set() {
        let exec = crate::kubeconfig::ExecConfig {
            command: "plugin".into(),
            api_version: "client.authentication.k8s.io/v1".into(),
            interactive_mode: "Never".into(),
            ..Default::default()
        };
        let kc = with_user(AuthInfo {
            exec: Some(exec.clone()),
            ..AuthInfo::default()
        });
        let mut overrides = ConfigOverrides::default();
        overrides.auth_info.token = Secret::from("flag-token");
        let config = resolve(kc, overrides).unwrap();
        assert_eq!(config.auth, Auth::BearerToken(Secret::from("flag-token")));
    }

    #[test]
    fn client_cert_override_data() {
        let dir = tempfile::tempdir().unwrap();
        let cert = dir.path().join("c.crt");
        let key = dir.path().join("c.key");
        std::fs::write(&cert, "file-cert").unwrap();
        std::fs::write(&key, "file-key").unwrap();
        let kc = with_user(AuthInfo {
            client_certificate_data: b"data-cert".to_vec(),
            client_key_data: Secret::new(b"data-key".to_vec()),
            ..AuthInfo::default()
        });
        let mut overrides = ConfigOverrides::default();
        overrides.auth_info.client_certificate = cert;
        overrides.auth_info.client_key = key;
        let config = resolve(kc, overrides).unwrap();
        let identity = config.tls.client_identity.unwrap();
        assert_eq!(identity.cert_pem, b"file-cert");
        assert_eq!(identity.key_pem.expose(), b"file-key");
    }

    #[test]
    fn namespace_override() {
        let mut overrides = ConfigOverrides::default();
        overrides.context.namespace = "foo".into();
        let resolver = KubeconfigResolver::new(Kubeconfig::default(), overrides);
        assert_eq!(resolver.namespace().unwrap(), ("foo".to_owned(), true));
    }

    #[test]
    fn invalid_context_namespace_is_an_error() {
        let mut kc = valid_config();
        kc.contexts[0].context.namespace = "Not_A_Label".into();
        let err = resolve(kc, ConfigOverrides::default()).unwrap_err();
        assert!(matches!(err, ConfigError::InvalidNamespace { .. }), "{err}");
    }

    #[test]
    fn from_kubeconfig_yaml_uses_current_context() {
        let config = Config::from_kubeconfig_yaml(
            "clusters: [{name: c, cluster: {server: 'https://h:6443'}}]\n\
             users: [{name: u, user: {token: t}}]\n\
             contexts: [{name: x, context: {cluster: c, user: u, namespace: ns1}}]\n\
             current-context: x\n",
        )
        .unwrap();
        assert_eq!(config.server.as_str(), "https://h:6443/");
        assert_eq!(config.default_namespace, "ns1");
        assert_eq!(config.auth, Auth::BearerToken(Secret::from("t")));
    }
}

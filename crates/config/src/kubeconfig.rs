//! The kubeconfig file model: the fields of client-go's `clientcmd/api/v1` that a client needs.
//!
//! As in client-go, an empty string, `false`, an empty list or empty data means "not set";
//! this is what lets [`ConfigOverrides`](crate::ConfigOverrides) reuse these types and lets
//! merging ([`Cluster::overlay`] and friends) follow client-go's rules. `*-data` fields are
//! base64 in the file and decoded bytes here. Secrets (tokens, passwords, keys, exec plugin
//! environment values) are held in [`Secret`], so `{:?}` of a kubeconfig is safe to log.
//!
//! Parsing checks what client-go's decoder checks: YAML syntax and types (errors carry line
//! and column) and that no list defines a name twice.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Deserializer};

use crate::error::ConfigError;
use crate::secret::Secret;

/// The `name` of the pseudo-file used in errors for YAML given as a string.
pub(crate) const INLINE_SOURCE: &str = "<inline>";

/// A kubeconfig file (`kind: Config`), or the merge of several.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct Kubeconfig {
    /// `preferences`.
    #[serde(deserialize_with = "nullable")]
    pub preferences: Preferences,
    /// `clusters`: where API servers are and how to trust them.
    #[serde(deserialize_with = "nullable")]
    pub clusters: Vec<NamedCluster>,
    /// `users`: credentials (client-go calls them auth infos).
    #[serde(rename = "users", deserialize_with = "nullable")]
    pub auth_infos: Vec<NamedAuthInfo>,
    /// `contexts`: (cluster, user, namespace) triples.
    #[serde(deserialize_with = "nullable")]
    pub contexts: Vec<NamedContext>,
    /// `current-context`: the context used when none is chosen explicitly.
    #[serde(rename = "current-context", deserialize_with = "nullable")]
    pub current_context: String,
    /// `extensions`.
    #[serde(deserialize_with = "nullable")]
    pub extensions: Vec<NamedExtension>,
}

/// `preferences`.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct Preferences {
    /// `colors`.
    #[serde(deserialize_with = "nullable")]
    pub colors: bool,
    /// `extensions`.
    #[serde(deserialize_with = "nullable")]
    pub extensions: Vec<NamedExtension>,
}

/// An entry of `clusters`.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct NamedCluster {
    /// `name`.
    #[serde(deserialize_with = "nullable")]
    pub name: String,
    /// `cluster`.
    #[serde(deserialize_with = "nullable")]
    pub cluster: Cluster,
}

/// An entry of `users`.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct NamedAuthInfo {
    /// `name`.
    #[serde(deserialize_with = "nullable")]
    pub name: String,
    /// `user`.
    #[serde(rename = "user", deserialize_with = "nullable")]
    pub auth_info: AuthInfo,
}

/// An entry of `contexts`.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct NamedContext {
    /// `name`.
    #[serde(deserialize_with = "nullable")]
    pub name: String,
    /// `context`.
    #[serde(deserialize_with = "nullable")]
    pub context: Context,
}

/// An entry of an `extensions` list; the extension itself is kept as a JSON value.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct NamedExtension {
    /// `name`.
    #[serde(deserialize_with = "nullable")]
    pub name: String,
    /// `extension`, as JSON (what exec plugins receive).
    pub extension: serde_json::Value,
}

/// `clusters[].cluster`: how to reach and trust one API server.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct Cluster {
    /// `server`: the API server's URL.
    #[serde(deserialize_with = "nullable")]
    pub server: String,
    /// `tls-server-name`: the name to verify the server certificate against instead of the
    /// URL's host.
    #[serde(rename = "tls-server-name", deserialize_with = "nullable")]
    pub tls_server_name: String,
    /// `insecure-skip-tls-verify`: accept any server certificate.
    #[serde(rename = "insecure-skip-tls-verify", deserialize_with = "nullable")]
    pub insecure_skip_tls_verify: bool,
    /// `certificate-authority`: a PEM file of CA certificates.
    #[serde(rename = "certificate-authority", deserialize_with = "nullable")]
    pub certificate_authority: PathBuf,
    /// `certificate-authority-data`: PEM CA certificates (base64 in the file).
    #[serde(
        rename = "certificate-authority-data",
        deserialize_with = "base64_bytes"
    )]
    pub certificate_authority_data: Vec<u8>,
    /// `proxy-url`: an http, https or socks5 proxy for every request to this cluster.
    #[serde(rename = "proxy-url", deserialize_with = "nullable")]
    pub proxy_url: String,
    /// `disable-compression`: do not ask the server for compressed responses.
    #[serde(rename = "disable-compression", deserialize_with = "nullable")]
    pub disable_compression: bool,
    /// `extensions`; `client.authentication.k8s.io/exec` is handed to exec plugins.
    #[serde(deserialize_with = "nullable")]
    pub extensions: Vec<NamedExtension>,
    /// The file this entry came from (client-go's `LocationOfOrigin`); `None` for entries
    /// built in code or given as overrides.
    #[serde(skip)]
    pub origin: Option<PathBuf>,
}

/// `users[].user`: how to authenticate (client-go's `AuthInfo`).
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct AuthInfo {
    /// `client-certificate`: a PEM client certificate file.
    #[serde(rename = "client-certificate", deserialize_with = "nullable")]
    pub client_certificate: PathBuf,
    /// `client-certificate-data`: a PEM client certificate (base64 in the file).
    #[serde(rename = "client-certificate-data", deserialize_with = "base64_bytes")]
    pub client_certificate_data: Vec<u8>,
    /// `client-key`: a PEM private key file.
    #[serde(rename = "client-key", deserialize_with = "nullable")]
    pub client_key: PathBuf,
    /// `client-key-data`: a PEM private key (base64 in the file).
    #[serde(rename = "client-key-data", deserialize_with = "base64_secret")]
    pub client_key_data: Secret<Vec<u8>>,
    /// `token`: a bearer token.
    #[serde(deserialize_with = "nullable")]
    pub token: Secret<String>,
    /// `tokenFile`: a file holding a bearer token, re-read periodically.
    #[serde(rename = "tokenFile", deserialize_with = "nullable")]
    pub token_file: PathBuf,
    /// `as`: the user to impersonate.
    #[serde(rename = "as", deserialize_with = "nullable")]
    pub impersonate: String,
    /// `as-uid`: the UID to impersonate.
    #[serde(rename = "as-uid", deserialize_with = "nullable")]
    pub impersonate_uid: String,
    /// `as-groups`: the groups to impersonate.
    #[serde(rename = "as-groups", deserialize_with = "nullable")]
    pub impersonate_groups: Vec<String>,
    /// `as-user-extra`: extra fields of the impersonated user.
    #[serde(rename = "as-user-extra", deserialize_with = "nullable")]
    pub impersonate_user_extra: BTreeMap<String, Vec<String>>,
    /// `username` for HTTP basic authentication.
    #[serde(deserialize_with = "nullable")]
    pub username: String,
    /// `password` for HTTP basic authentication.
    #[serde(deserialize_with = "nullable")]
    pub password: Secret<String>,
    /// `auth-provider`: a legacy in-tree provider (gcp, azure, oidc); not supported here.
    #[serde(rename = "auth-provider")]
    pub auth_provider: Option<AuthProviderConfig>,
    /// `exec`: an exec credential plugin.
    pub exec: Option<ExecConfig>,
    /// `extensions`.
    #[serde(deserialize_with = "nullable")]
    pub extensions: Vec<NamedExtension>,
    /// The file this entry came from (client-go's `LocationOfOrigin`).
    #[serde(skip)]
    pub origin: Option<PathBuf>,
}

/// `contexts[].context`.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct Context {
    /// `cluster`: the name of a cluster.
    #[serde(deserialize_with = "nullable")]
    pub cluster: String,
    /// `user`: the name of a user.
    #[serde(rename = "user", deserialize_with = "nullable")]
    pub auth_info: String,
    /// `namespace`: the default namespace.
    #[serde(deserialize_with = "nullable")]
    pub namespace: String,
    /// `extensions`.
    #[serde(deserialize_with = "nullable")]
    pub extensions: Vec<NamedExtension>,
    /// The file this entry came from (client-go's `LocationOfOrigin`).
    #[serde(skip)]
    pub origin: Option<PathBuf>,
}

/// `users[].user.auth-provider`.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct AuthProviderConfig {
    /// `name`.
    #[serde(deserialize_with = "nullable")]
    pub name: String,
    /// `config` (often holds tokens).
    #[serde(deserialize_with = "nullable")]
    pub config: BTreeMap<String, Secret<String>>,
}

/// `users[].user.exec`: an exec credential plugin.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct ExecConfig {
    /// `command`: the executable; a relative path containing a `/` is resolved against the
    /// kubeconfig's directory, a bare name is looked up in `PATH`.
    #[serde(deserialize_with = "nullable")]
    pub command: String,
    /// `args`.
    #[serde(deserialize_with = "nullable")]
    pub args: Vec<String>,
    /// `env`: added to the plugin's environment.
    #[serde(deserialize_with = "nullable")]
    pub env: Vec<ExecEnvVar>,
    /// `apiVersion`: `client.authentication.k8s.io/v1` or `.../v1beta1`.
    #[serde(rename = "apiVersion", deserialize_with = "nullable")]
    pub api_version: String,
    /// `installHint`: shown when the executable is missing.
    #[serde(rename = "installHint", deserialize_with = "nullable")]
    pub install_hint: String,
    /// `provideClusterInfo`: pass the cluster's details in `KUBERNETES_EXEC_INFO`.
    #[serde(rename = "provideClusterInfo", deserialize_with = "nullable")]
    pub provide_cluster_info: bool,
    /// `interactiveMode`: `Never`, `IfAvailable` or `Always`.
    #[serde(rename = "interactiveMode", deserialize_with = "nullable")]
    pub interactive_mode: String,
}

/// `users[].user.exec.env[]`.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct ExecEnvVar {
    /// `name`.
    #[serde(deserialize_with = "nullable")]
    pub name: String,
    /// `value`.
    #[serde(deserialize_with = "nullable")]
    pub value: Secret<String>,
}

impl Kubeconfig {
    /// Parses kubeconfig YAML. Entries get no [`origin`](Cluster::origin), so relative paths
    /// stay as written. An empty document is an empty kubeconfig.
    pub fn from_yaml(yaml: &str) -> Result<Self, ConfigError> {
        Self::parse(yaml, Path::new(INLINE_SOURCE))
    }

    /// Reads and parses the kubeconfig at `path`, recording `path` as every entry's origin.
    /// Paths inside are returned as written; [`LoadingRules`](crate::LoadingRules) resolves them.
    pub fn read(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::ReadKubeconfig {
            path: path.to_owned(),
            source,
        })?;
        let mut config = Self::parse(&text, path)?;
        config.set_origin(path);
        tracing::debug!(path = %path.display(), "loaded kubeconfig");
        Ok(config)
    }

    fn parse(yaml: &str, path: &Path) -> Result<Self, ConfigError> {
        let parse_error = |e: serde_yaml_ng::Error| {
            let location = e.location();
            ConfigError::ParseKubeconfig {
                path: path.to_owned(),
                line: location.as_ref().map(|l| l.line()),
                column: location.as_ref().map(|l| l.column()),
                message: e.to_string(),
            }
        };
        // A file of only whitespace and comments is an empty kubeconfig, as in client-go.
        let value: serde_yaml_ng::Value = serde_yaml_ng::from_str(yaml).map_err(parse_error)?;
        if value.is_null() {
            return Ok(Self::default());
        }
        let config: Self = serde_yaml_ng::from_str(yaml).map_err(parse_error)?;
        config.check_unique_names(path)?;
        Ok(config)
    }

    fn check_unique_names(&self, path: &Path) -> Result<(), ConfigError> {
        fn unique<'a>(
            path: &Path,
            list: &'static str,
            names: impl Iterator<Item = &'a str>,
        ) -> Result<(), ConfigError> {
            let mut seen = HashSet::new();
            for name in names {
                if !seen.insert(name) {
                    return Err(ConfigError::DuplicateName {
                        path: path.to_owned(),
                        list,
                        name: name.to_owned(),
                    });
                }
            }
            Ok(())
        }
        unique(
            path,
            "clusters",
            self.clusters.iter().map(|c| c.name.as_str()),
        )?;
        unique(
            path,
            "contexts",
            self.contexts.iter().map(|c| c.name.as_str()),
        )?;
        unique(
            path,
            "users",
            self.auth_infos.iter().map(|c| c.name.as_str()),
        )?;
        unique(
            path,
            "extensions",
            self.extensions.iter().map(|c| c.name.as_str()),
        )?;
        Ok(())
    }

    fn set_origin(&mut self, path: &Path) {
        for c in &mut self.clusters {
            c.cluster.origin = Some(path.to_owned());
        }
        for a in &mut self.auth_infos {
            a.auth_info.origin = Some(path.to_owned());
        }
        for c in &mut self.contexts {
            c.context.origin = Some(path.to_owned());
        }
    }

    /// The cluster called `name`.
    pub fn cluster(&self, name: &str) -> Option<&Cluster> {
        self.clusters
            .iter()
            .find(|c| c.name == name)
            .map(|c| &c.cluster)
    }

    /// The user called `name`.
    pub fn auth_info(&self, name: &str) -> Option<&AuthInfo> {
        self.auth_infos
            .iter()
            .find(|a| a.name == name)
            .map(|a| &a.auth_info)
    }

    /// The context called `name`.
    pub fn context(&self, name: &str) -> Option<&Context> {
        self.contexts
            .iter()
            .find(|c| c.name == name)
            .map(|c| &c.context)
    }

    /// Whether nothing at all is defined (client-go's `IsConfigEmpty`).
    pub fn is_empty(&self) -> bool {
        self.clusters.is_empty()
            && self.auth_infos.is_empty()
            && self.contexts.is_empty()
            && self.current_context.is_empty()
            && self.extensions.is_empty()
            && self.preferences == Preferences::default()
    }
}

// ---------------------------------------------------------------------------------------------
// Overlay: client-go's field-wise merge of one entry onto another (used for overrides).

/// Applies a set value of `src` onto `self`, leaving `self` alone where `src` is unset.
pub(crate) trait Overlay {
    fn overlay(&mut self, src: &Self);
}

impl Overlay for String {
    fn overlay(&mut self, src: &Self) {
        if !src.is_empty() {
            self.clone_from(src);
        }
    }
}

impl Overlay for PathBuf {
    fn overlay(&mut self, src: &Self) {
        if !src.as_os_str().is_empty() {
            self.clone_from(src);
        }
    }
}

impl Overlay for bool {
    fn overlay(&mut self, src: &Self) {
        if *src {
            *self = true;
        }
    }
}

/// Lists (and byte data) are replaced whole when the source has any element.
impl<T: Clone> Overlay for Vec<T> {
    fn overlay(&mut self, src: &Self) {
        if !src.is_empty() {
            self.clone_from(src);
        }
    }
}

impl Overlay for Secret<String> {
    fn overlay(&mut self, src: &Self) {
        if !src.is_empty() {
            *self = src.clone();
        }
    }
}

impl Overlay for Secret<Vec<u8>> {
    fn overlay(&mut self, src: &Self) {
        if !src.is_empty() {
            *self = src.clone();
        }
    }
}

/// Optional sub-structures (`exec`, `auth-provider`) are replaced whole, zero fields included.
impl<T: Clone> Overlay for Option<T> {
    fn overlay(&mut self, src: &Self) {
        if src.is_some() {
            self.clone_from(src);
        }
    }
}

/// Maps merge key by key, the source's keys winning.
impl<V: Clone> Overlay for BTreeMap<String, V> {
    fn overlay(&mut self, src: &Self) {
        for (k, v) in src {
            self.insert(k.clone(), v.clone());
        }
    }
}

/// Named lists are maps in client-go: merged by name, the source's entries winning.
fn overlay_named(dst: &mut Vec<NamedExtension>, src: &[NamedExtension]) {
    for ext in src {
        match dst.iter_mut().find(|d| d.name == ext.name) {
            Some(d) => d.extension = ext.extension.clone(),
            None => dst.push(ext.clone()),
        }
    }
}

impl Cluster {
    /// Applies the fields `src` sets onto `self` (client-go's `merge`): set strings, `true`
    /// booleans and non-empty data replace; extensions merge by name.
    pub fn overlay(&mut self, src: &Cluster) {
        self.server.overlay(&src.server);
        self.tls_server_name.overlay(&src.tls_server_name);
        self.insecure_skip_tls_verify
            .overlay(&src.insecure_skip_tls_verify);
        self.certificate_authority
            .overlay(&src.certificate_authority);
        self.certificate_authority_data
            .overlay(&src.certificate_authority_data);
        self.proxy_url.overlay(&src.proxy_url);
        self.disable_compression.overlay(&src.disable_compression);
        overlay_named(&mut self.extensions, &src.extensions);
        self.origin.overlay(&src.origin);
    }

    /// The `client.authentication.k8s.io/exec` extension, handed to exec plugins.
    pub fn exec_extension(&self) -> Option<&serde_json::Value> {
        self.extensions
            .iter()
            .find(|e| e.name == crate::auth::exec::CLUSTER_EXTENSION_KEY)
            .map(|e| &e.extension)
    }
}

impl AuthInfo {
    /// Applies the fields `src` sets onto `self` (client-go's `merge`): set strings and data
    /// replace, lists replace when non-empty, `exec` and `auth-provider` replace whole,
    /// `as-user-extra` merges by key.
    pub fn overlay(&mut self, src: &AuthInfo) {
        self.client_certificate.overlay(&src.client_certificate);
        self.client_certificate_data
            .overlay(&src.client_certificate_data);
        self.client_key.overlay(&src.client_key);
        self.client_key_data.overlay(&src.client_key_data);
        self.token.overlay(&src.token);
        self.token_file.overlay(&src.token_file);
        self.impersonate.overlay(&src.impersonate);
        self.impersonate_uid.overlay(&src.impersonate_uid);
        self.impersonate_groups.overlay(&src.impersonate_groups);
        self.impersonate_user_extra
            .overlay(&src.impersonate_user_extra);
        self.username.overlay(&src.username);
        self.password.overlay(&src.password);
        self.auth_provider.overlay(&src.auth_provider);
        self.exec.overlay(&src.exec);
        overlay_named(&mut self.extensions, &src.extensions);
        self.origin.overlay(&src.origin);
    }
}

impl Context {
    /// Applies the fields `src` sets onto `self` (client-go's `merge`).
    pub fn overlay(&mut self, src: &Context) {
        self.cluster.overlay(&src.cluster);
        self.auth_info.overlay(&src.auth_info);
        self.namespace.overlay(&src.namespace);
        overlay_named(&mut self.extensions, &src.extensions);
        self.origin.overlay(&src.origin);
    }
}

// ---------------------------------------------------------------------------------------------
// Deserialization helpers.

/// Reads `null` (or an absent value) as the type's default, as Go's decoder does.
fn nullable<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
}

fn decode_base64<E: serde::de::Error>(text: &str) -> Result<Vec<u8>, E> {
    use base64::Engine as _;
    // Go's decoder skips line breaks inside base64; accept any ASCII whitespace.
    let compact: String = text.chars().filter(|c| !c.is_ascii_whitespace()).collect();
    base64::engine::general_purpose::STANDARD
        .decode(compact.as_bytes())
        .map_err(|e| E::custom(format_args!("invalid base64 data: {e}")))
}

fn base64_bytes<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<u8>, D::Error> {
    match Option::<String>::deserialize(deserializer)? {
        Some(text) => decode_base64(&text),
        None => Ok(Vec::new()),
    }
}

fn base64_secret<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Secret<Vec<u8>>, D::Error> {
    base64_bytes(deserializer).map(Secret::new)
}

#[cfg(test)]
mod tests {
    use super::*;

    const FULL: &str = r#"
apiVersion: v1
kind: Config
current-context: dev
preferences: {}
clusters:
- name: dev-cluster
  cluster:
    server: https://10.0.0.1:6443
    certificate-authority-data: UEhPTlkK
    tls-server-name: kubernetes
    proxy-url: socks5://proxy:1080
    disable-compression: true
    extensions:
    - name: client.authentication.k8s.io/exec
      extension:
        audience: foo
contexts:
- name: dev
  context:
    cluster: dev-cluster
    user: alice
    namespace: team-a
users:
- name: alice
  user:
    client-key-data: UEhPTlkK
    token: tok
    as: bob
    as-groups: [g1, g2]
    as-user-extra:
      scopes: [view]
    exec:
      apiVersion: client.authentication.k8s.io/v1
      command: kubelogin
      args: [get-token]
      env:
      - name: SECRET
        value: hidden
      interactiveMode: Never
- name: empty
  user: null
"#;

    #[test]
    fn parses_all_fields() {
        let kc = Kubeconfig::from_yaml(FULL).unwrap();
        assert_eq!(kc.current_context, "dev");
        let cluster = kc.cluster("dev-cluster").unwrap();
        assert_eq!(cluster.server, "https://10.0.0.1:6443");
        assert_eq!(cluster.certificate_authority_data, b"PHONY\n");
        assert_eq!(cluster.tls_server_name, "kubernetes");
        assert_eq!(cluster.proxy_url, "socks5://proxy:1080");
        assert!(cluster.disable_compression);
        assert!(cluster.exec_extension().is_some());
        let ctx = kc.context("dev").unwrap();
        assert_eq!(
            (ctx.cluster.as_str(), ctx.auth_info.as_str()),
            ("dev-cluster", "alice")
        );
        assert_eq!(ctx.namespace, "team-a");
        let alice = kc.auth_info("alice").unwrap();
        assert_eq!(alice.client_key_data.expose(), b"PHONY\n");
        assert_eq!(alice.token.expose(), "tok");
        assert_eq!(alice.impersonate_groups, ["g1", "g2"]);
        assert_eq!(alice.impersonate_user_extra["scopes"], ["view"]);
        let exec = alice.exec.as_ref().unwrap();
        assert_eq!(exec.command, "kubelogin");
        assert_eq!(exec.env[0].value.expose(), "hidden");
        assert_eq!(kc.auth_info("empty").unwrap(), &AuthInfo::default());
    }

    #[test]
    fn debug_of_a_kubeconfig_hides_secrets() {
        let kc = Kubeconfig::from_yaml(FULL).unwrap();
        let debug = format!("{kc:?}");
        assert!(!debug.contains("tok\""), "{debug}");
        assert!(!debug.contains("hidden"), "{debug}");
        assert!(debug.contains("<redacted>"));
    }

    #[test]
    fn empty_and_comment_only_documents_are_empty_configs() {
        assert!(Kubeconfig::from_yaml("").unwrap().is_empty());
        assert!(
            Kubeconfig::from_yaml("# nothing here\n")
                .unwrap()
                .is_empty()
        );
        let kc = Kubeconfig::from_yaml("clusters: null\nusers: null\ncontexts: null\n").unwrap();
        assert!(kc.is_empty());
    }

    #[test]
    fn yaml_errors_carry_line_and_column() {
        let err = Kubeconfig::from_yaml("clusters:\n- name: a\n  cluster:\n    server: [1, 2\n")
            .unwrap_err();
        match &err {
            ConfigError::ParseKubeconfig { line, column, .. } => {
                assert!(line.is_some() && column.is_some(), "{err}");
            }
            other => panic!("unexpected error {other:?}"),
        }
        assert!(err.to_string().contains("at line"), "{err}");
    }

    #[test]
    fn wrong_types_are_errors() {
        let err = Kubeconfig::from_yaml(
            "clusters:\n- name: a\n  cluster:\n    insecure-skip-tls-verify: maybe\n",
        )
        .unwrap_err();
        assert!(
            matches!(err, ConfigError::ParseKubeconfig { line: Some(4), .. }),
            "{err}"
        );
        let err = Kubeconfig::from_yaml(
            "users:\n- name: a\n  user:\n    client-key-data: '!!notbase64'\n",
        )
        .unwrap_err();
        assert!(err.to_string().contains("base64"), "{err}");
    }
}

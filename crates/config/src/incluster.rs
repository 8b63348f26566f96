//! The configuration of a process running in a pod (client-go's `rest.InClusterConfig` and
//! `inClusterClientConfig`).
//!
//! - `KUBERNETES_SERVICE_HOST` and `KUBERNETES_SERVICE_PORT` must be set, else
//!   [`ConfigError::NotInCluster`]; the server is `https://host:port` (IPv6 bracketed).
//! - The service account token (`.../serviceaccount/token`) is read now (an error if
//!   unreadable) and then re-read as it rotates ([`Auth::TokenFile`]).
//! - The CA (`.../serviceaccount/ca.crt`) is used when readable; if not, the failure is
//!   logged and the system roots apply.
//! - The namespace is `$POD_NAMESPACE`, else `.../serviceaccount/namespace`, else `default`.
//!
//! [`InClusterConfig`] holds these inputs, so tests (and unusual layouts) can point it at a
//! different directory.

use std::path::{Path, PathBuf};

use crate::auth::Auth;
use crate::config::Config;
use crate::error::ConfigError;
use crate::resolve::{ConfigOverrides, parse_server};
use crate::secret::Secret;
use crate::tls::parse_certificates;

/// Where Kubernetes mounts a pod's service account credentials.
pub const SERVICE_ACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// The inputs of the in-cluster configuration.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct InClusterConfig {
    /// `KUBERNETES_SERVICE_HOST`.
    pub service_host: Option<String>,
    /// `KUBERNETES_SERVICE_PORT`.
    pub service_port: Option<String>,
    /// `POD_NAMESPACE` (set through the downward API, if at all).
    pub pod_namespace: Option<String>,
    /// The directory holding `token`, `ca.crt` and `namespace`.
    pub service_account_dir: PathBuf,
}

impl InClusterConfig {
    /// The inputs from this process's environment and [`SERVICE_ACCOUNT_DIR`].
    pub fn from_env() -> Self {
        let var = |name| std::env::var(name).ok().filter(|v: &String| !v.is_empty());
        Self {
            service_host: var("KUBERNETES_SERVICE_HOST"),
            service_port: var("KUBERNETES_SERVICE_PORT"),
            pod_namespace: var("POD_NAMESPACE"),
            service_account_dir: PathBuf::from(SERVICE_ACCOUNT_DIR),
        }
    }

    /// The service account token file.
    pub fn token_path(&self) -> PathBuf {
        self.service_account_dir.join("token")
    }

    /// The cluster CA file.
    pub fn ca_path(&self) -> PathBuf {
        self.service_account_dir.join("ca.crt")
    }

    /// The file holding the pod's namespace.
    pub fn namespace_path(&self) -> PathBuf {
        self.service_account_dir.join("namespace")
    }

    /// Whether the in-cluster configuration can work: both service variables are set and the
    /// token file exists (client-go's `inClusterClientConfig.Possible`).
    pub fn is_possible(&self) -> bool {
        self.service_host.as_deref().is_some_and(|h| !h.is_empty())
            && self.service_port.as_deref().is_some_and(|p| !p.is_empty())
            && self.token_path().is_file()
    }

    /// The pod's namespace: `POD_NAMESPACE`, else the service account's namespace file, else
    /// `default`.
    pub fn namespace(&self) -> String {
        if let Some(ns) = self.pod_namespace.as_deref().filter(|n| !n.is_empty()) {
            return ns.to_owned();
        }
        if let Ok(text) = std::fs::read_to_string(self.namespace_path()) {
            let ns = text.trim();
            if !ns.is_empty() {
                return ns.to_owned();
            }
        }
        "default".to_owned()
    }

    /// The configuration (client-go's `rest.InClusterConfig`, plus the namespace).
    pub fn config(&self) -> Result<Config, ConfigError> {
        let (Some(host), Some(port)) = (
            self.service_host.as_deref().filter(|h| !h.is_empty()),
            self.service_port.as_deref().filter(|p| !p.is_empty()),
        ) else {
            return Err(ConfigError::NotInCluster);
        };
        let server = if host.contains(':') && !host.starts_with('[') {
            format!("https://[{host}]:{port}")
        } else {
            format!("https://{host}:{port}")
        };
        let server = parse_server(&server)?;

        let token_path = self.token_path();
        let token =
            std::fs::read_to_string(&token_path).map_err(|source| ConfigError::ReadFile {
                field: "in-cluster service account token".to_owned(),
                path: token_path.clone(),
                source,
            })?;
        let token = Some(Secret::new(token.trim().to_owned())).filter(|t| !t.is_empty());

        let mut config = Config::new(server);
        config.tls.ca_pem = read_ca(&self.ca_path());
        config.auth = Auth::TokenFile {
            path: token_path,
            token,
        };
        config.default_namespace = self.namespace();
        Ok(config)
    }

    /// The configuration with the overrides an in-cluster client honours (client-go's
    /// `inClusterClientConfig`): `--server`, `--token` / token file (replacing the service
    /// account's), `--certificate-authority`, `--namespace` and `--request-timeout`.
    pub fn config_with_overrides(
        &self,
        overrides: &ConfigOverrides,
    ) -> Result<Config, ConfigError> {
        apply_overrides(self.config()?, overrides)
    }
}

impl Config {
    /// The in-cluster configuration of this process (client-go's `rest.InClusterConfig`).
    pub fn in_cluster() -> Result<Self, ConfigError> {
        InClusterConfig::from_env().config()
    }
}

fn read_ca(path: &Path) -> Option<Vec<u8>> {
    match std::fs::read(path) {
        Ok(pem) => match parse_certificates(&pem, "in-cluster CA") {
            Ok(_) => Some(pem),
            Err(e) => {
                tracing::error!(path = %path.display(), error = %e, "expected to load the root CA from the service account, but it is not usable");
                None
            }
        },
        Err(e) => {
            tracing::error!(path = %path.display(), error = %e, "expected to load the root CA from the service account, but could not read it");
            None
        }
    }
}

/// Applies the overrides an in-cluster configuration takes.
pub(crate) fn apply_overrides(
    mut config: Config,
    overrides: &ConfigOverrides,
) -> Result<Config, ConfigError> {
    let cluster = &overrides.cluster_info;
    if !cluster.server.is_empty() {
        config.server = parse_server(&cluster.server)?;
    }
    let auth = &overrides.auth_info;
    if !auth.token.is_empty() || !auth.token_file.as_os_str().is_empty() {
        config.auth = if auth.token_file.as_os_str().is_empty() {
            Auth::BearerToken(auth.token.clone())
        } else {
            Auth::TokenFile {
                path: auth.token_file.clone(),
                token: Some(auth.token.clone()).filter(|t| !t.is_empty()),
            }
        };
    }
    if !cluster.certificate_authority.as_os_str().is_empty() {
        let path = &cluster.certificate_authority;
        config.tls.ca_pem = Some(std::fs::read(path).map_err(|source| ConfigError::ReadFile {
            field: "certificate-authority override".to_owned(),
            path: path.clone(),
            source,
        })?);
    }
    if !overrides.context.namespace.is_empty() {
        config
            .default_namespace
            .clone_from(&overrides.context.namespace);
    }
    if overrides.timeout.is_some() {
        config.timeout = overrides.timeout;
    }
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kubeconfig::{AuthInfo, Cluster};

    const CA: &[u8] = include_bytes!("../tests/fixtures/ca.crt");

    fn service_account(token: &str) -> (tempfile::TempDir, InClusterConfig) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("token"), token).unwrap();
        let icc = InClusterConfig {
            service_host: Some("10.96.0.1".into()),
            service_port: Some("443".into()),
            pod_namespace: None,
            service_account_dir: dir.path().to_owned(),
        };
        (dir, icc)
    }

    #[test]
    fn builds_from_the_service_account() {
        let (dir, icc) = service_account("sa-token\n");
        std::fs::write(dir.path().join("ca.crt"), CA).unwrap();
        std::fs::write(dir.path().join("namespace"), "kube-system\n").unwrap();
        assert!(icc.is_possible());
        let config = icc.config().unwrap();
        assert_eq!(config.server.as_str(), "https://10.96.0.1/");
        assert_eq!(config.tls.ca_pem.as_deref(), Some(CA));
        assert_eq!(
            config.auth,
            Auth::TokenFile {
                path: dir.path().join("token"),
                token: Some(Secret::from("sa-token"))
            }
        );
        assert_eq!(config.default_namespace, "kube-system");
    }

    #[test]
    fn ipv6_hosts_are_bracketed() {
        let (_dir, mut icc) = service_account("t");
        icc.service_host = Some("fd00::1".into());
        icc.service_port = Some("6443".into());
        assert_eq!(
            icc.config().unwrap().server.as_str(),
            "https://[fd00::1]:6443/"
        );
    }

    #[test]
    fn not_in_cluster_without_the_service_variables() {
        let (_dir, mut icc) = service_account("t");
        icc.service_port = None;
        assert!(!icc.is_possible());
        assert!(matches!(icc.config(), Err(ConfigError::NotInCluster)));
        icc.service_port = Some(String::new());
        assert!(matches!(icc.config(), Err(ConfigError::NotInCluster)));
    }

    #[test]
    fn unreadable_ca_is_not_fatal_but_missing_token_is() {
        let (dir, icc) = service_account("t");
        std::fs::write(dir.path().join("ca.crt"), "garbage").unwrap();
        assert_eq!(icc.config().unwrap().tls.ca_pem, None);
        std::fs::remove_file(dir.path().join("ca.crt")).unwrap();
        assert_eq!(icc.config().unwrap().tls.ca_pem, None);

        std::fs::remove_file(dir.path().join("token")).unwrap();
        assert!(!icc.is_possible());
        let err = icc.config().unwrap_err();
        assert!(err.to_string().contains("token"), "{err}");
    }

    #[test]
    fn namespace_precedence() {
        let (dir, mut icc) = service_account("t");
        assert_eq!(icc.namespace(), "default");
        std::fs::write(dir.path().join("namespace"), "from-file").unwrap();
        assert_eq!(icc.namespace(), "from-file");
        icc.pod_namespace = Some("from-env".into());
        assert_eq!(icc.namespace(), "from-env");
    }

    /// client-go's TestInClusterClientConfigPrecedence: each override replaces exactly its
    /// part of the in-cluster configuration.
    #[test]
    fn in_cluster_client_config_precedence() {
        let dir = tempfile::tempdir().unwrap();
        let override_ca = dir.path().join("ca-from-overrides.crt");
        std::fs::write(&override_ca, "override-ca").unwrap();

        let server = |s: &str| Cluster {
            server: s.into(),
            ..Cluster::default()
        };
        let ca = || Cluster {
            certificate_authority: override_ca.clone(),
            ..Cluster::default()
        };
        let server_ca = || Cluster {
            certificate_authority: override_ca.clone(),
            ..server("https://host-from-overrides.com")
        };
        let token = |t: &str, f: &str| AuthInfo {
            token: Secret::from(t),
            token_file: f.into(),
            ..AuthInfo::default()
        };
        let cases: Vec<(Cluster, AuthInfo)> = vec![
            (
                server("https://host-from-overrides.com"),
                AuthInfo::default(),
            ),
            (
                Cluster::default(),
                token("https://host-from-overrides.com", ""),
            ),
            (ca(), AuthInfo::default()),
            (
                server("https://host-from-overrides.com"),
                token("https://host-from-overrides.com", ""),
            ),
            (server_ca(), AuthInfo::default()),
            (ca(), token("https://host-from-overrides.com", "")),
            (server_ca(), token("https://host-from-overrides.com", "")),
            (
                server_ca(),
                token("token-from-override", "tokenfile-from-override"),
            ),
            (server_ca(), token("", "tokenfile-from-override")),
            (Cluster::default(), AuthInfo::default()),
        ];

        for (cluster_info, auth_info) in cases {
            let mut base = Config::new(url::Url::parse("https://host-from-cluster.com").unwrap());
            base.auth = Auth::TokenFile {
                path: "tokenfile-from-cluster".into(),
                token: Some(Secret::from("token-from-cluster")),
            };
            base.tls.ca_pem = Some(b"ca-from-cluster".to_vec());
            let overrides = ConfigOverrides {
                cluster_info: cluster_info.clone(),
                auth_info: auth_info.clone(),
                ..ConfigOverrides::default()
            };
            let config = apply_overrides(base, &overrides).unwrap();

            let mut want_server = "https://host-from-cluster.com/".to_owned();
            if !cluster_info.server.is_empty() {
                want_server = format!("{}/", cluster_info.server);
            }
            let mut want_auth = Auth::TokenFile {
                path: "tokenfile-from-cluster".into(),
                token: Some(Secret::from("token-from-cluster")),
            };
            if !auth_info.token.is_empty() || !auth_info.token_file.as_os_str().is_empty() {
                want_auth = if auth_info.token_file.as_os_str().is_empty() {
                    Auth::BearerToken(auth_info.token.clone())
                } else {
                    Auth::TokenFile {
                        path: auth_info.token_file.clone(),
                        token: Some(auth_info.token.clone()).filter(|t| !t.is_empty()),
                    }
                };
            }
            let mut want_ca = b"ca-from-cluster".to_vec();
            if !cluster_info.certificate_authority.as_os_str().is_empty() {
                want_ca = b"override-ca".to_vec();
            }
            assert_eq!(config.server.as_str(), want_server, "{cluster_info:?}");
            assert_eq!(config.auth, want_auth, "{auth_info:?}");
            assert_eq!(config.tls.ca_pem, Some(want_ca), "{cluster_info:?}");
        }
    }

    #[test]
    fn namespace_override_applies_in_cluster() {
        let (_dir, icc) = service_account("t");
        let mut overrides = ConfigOverrides::default();
        overrides.context.namespace = "foo".into();
        let config = icc.config_with_overrides(&overrides).unwrap();
        assert_eq!(config.default_namespace, "foo");
    }
}

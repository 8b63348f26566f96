//! Choosing between kubeconfig and in-cluster configuration (client-go's
//! `DeferredLoadingClientConfig` and `BuildConfigFromFlags`).
//!
//! - [`Config::from_kubeconfig`]: load the kubeconfig files, resolve the context; only if that
//!   yields no configuration at all ([`ConfigError::EmptyConfig`]) and the process runs in a
//!   pod, use the in-cluster configuration (with the overrides it honours). When the
//!   kubeconfig leaves the namespace implicit and the process runs in a pod, the pod's
//!   namespace is used.
//! - [`Config::from_flags`]: `--kubeconfig` and `--master` as cluster components take them.
//!   With neither, the in-cluster configuration is tried first; otherwise (or if that fails)
//!   the kubeconfig is loaded, `--master` overriding its server.
//!   Difference from client-go: `BuildConfigFromFlags` without `--kubeconfig` loads *no*
//!   kubeconfig file; here the default loading rules (`KUBECONFIG`, `~/.kube/config`) apply,
//!   as in kubectl and controller-runtime, so a controller run from a laptop just works.
//! - [`Config::infer`]: `from_flags` with no flags.

use std::path::Path;

use crate::config::Config;
use crate::error::ConfigError;
use crate::incluster::InClusterConfig;
use crate::loader::LoadingRules;
use crate::resolve::{ConfigOverrides, KubeconfigResolver};

impl Config {
    /// The configuration from the environment: in a pod, the in-cluster configuration; else
    /// the default kubeconfig (`KUBECONFIG`, else `~/.kube/config`) at its current context.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), kctrl_config::ConfigError> {
    /// let config = kctrl_config::Config::infer()?;
    /// println!("talking to {} in namespace {}", config.server, config.default_namespace);
    /// # Ok(()) }
    /// ```
    pub fn infer() -> Result<Self, ConfigError> {
        Self::from_flags(None, None, &ConfigOverrides::default())
    }

    /// The configuration for a component's `--kubeconfig` and `--master` flags plus other
    /// overrides (client-go's `BuildConfigFromFlags`; see the [module docs](crate#choosing-a-source)).
    pub fn from_flags(
        kubeconfig: Option<&Path>,
        master: Option<&str>,
        overrides: &ConfigOverrides,
    ) -> Result<Self, ConfigError> {
        from_flags_with(
            kubeconfig,
            master,
            overrides,
            &InClusterConfig::from_env(),
            LoadingRules::from_env,
        )
    }

    /// The configuration from kubeconfig files, falling back to in-cluster when they provide
    /// nothing (client-go's `NewNonInteractiveDeferredLoadingClientConfig(...).ClientConfig()`).
    pub fn from_kubeconfig(
        rules: &LoadingRules,
        overrides: &ConfigOverrides,
    ) -> Result<Self, ConfigError> {
        deferred(rules, overrides, &InClusterConfig::from_env())
    }
}

/// [`Config::from_flags`] with the in-cluster inputs and the default rules injected.
pub(crate) fn from_flags_with(
    kubeconfig: Option<&Path>,
    master: Option<&str>,
    overrides: &ConfigOverrides,
    in_cluster: &InClusterConfig,
    default_rules: impl FnOnce() -> LoadingRules,
) -> Result<Config, ConfigError> {
    let master = master.filter(|m| !m.is_empty());
    let kubeconfig = kubeconfig.filter(|k| !k.as_os_str().is_empty());
    if kubeconfig.is_none() && master.is_none() {
        match in_cluster.config_with_overrides(overrides) {
            Ok(config) => {
                tracing::debug!(
                    "neither --kubeconfig nor --master was given: using the in-cluster configuration"
                );
                return Ok(config);
            }
            Err(ConfigError::NotInCluster) => {}
            Err(e) => {
                tracing::warn!(error = %e, "in-cluster configuration failed; falling back to kubeconfig")
            }
        }
    }
    let rules = match kubeconfig {
        Some(path) => LoadingRules::explicit(path),
        None => default_rules(),
    };
    let mut overrides = overrides.clone();
    if let Some(master) = master {
        overrides.cluster_info.server = master.to_owned();
    }
    deferred(&rules, &overrides, in_cluster)
}

/// client-go's `DeferredLoadingClientConfig`: kubeconfig first, in-cluster if it is empty.
pub(crate) fn deferred(
    rules: &LoadingRules,
    overrides: &ConfigOverrides,
    in_cluster: &InClusterConfig,
) -> Result<Config, ConfigError> {
    let kubeconfig = rules.load()?;
    let resolver = KubeconfigResolver::new(kubeconfig, overrides.clone())
        .with_searched_files(rules.loading_precedence());
    match resolver.config() {
        Ok(mut config) => {
            let (_, overridden) = resolver.namespace()?;
            let explicit = !resolver.context()?.namespace.is_empty();
            if !overridden && !explicit && in_cluster.is_possible() {
                config.default_namespace = in_cluster.namespace();
            }
            Ok(config)
        }
        Err(ConfigError::EmptyConfig { .. }) if in_cluster.is_possible() => {
            tracing::debug!(
                "the kubeconfig defines no cluster: using the in-cluster configuration"
            );
            in_cluster.config_with_overrides(overrides)
        }
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::Auth;
    use std::path::PathBuf;

    struct Env {
        _dir: tempfile::TempDir,
        in_cluster: InClusterConfig,
        kubeconfig: PathBuf,
    }

    fn env(in_pod: bool) -> Env {
        let dir = tempfile::tempdir().unwrap();
        let sa = dir.path().join("sa");
        std::fs::create_dir(&sa).unwrap();
        std::fs::write(sa.join("token"), "sa-token").unwrap();
        std::fs::write(sa.join("namespace"), "pod-ns").unwrap();
        let kubeconfig = dir.path().join("kubeconfig");
        std::fs::write(
            &kubeconfig,
            "clusters: [{name: c, cluster: {server: 'https://from-kubeconfig:6443'}}]\n\
             users: [{name: u, user: {token: kc-token}}]\n\
             contexts: [{name: x, context: {cluster: c, user: u}}]\n\
             current-context: x\n",
        )
        .unwrap();
        let in_cluster = InClusterConfig {
            service_host: in_pod.then(|| "10.96.0.1".to_owned()),
            service_port: in_pod.then(|| "443".to_owned()),
            pod_namespace: None,
            service_account_dir: sa,
        };
        Env {
            _dir: dir,
            in_cluster,
            kubeconfig,
        }
    }

    fn no_default_files() -> LoadingRules {
        LoadingRules::default()
    }

    #[test]
    fn neither_flag_in_a_pod_uses_in_cluster() {
        let e = env(true);
        let config = from_flags_with(
            None,
            None,
            &ConfigOverrides::default(),
            &e.in_cluster,
            || LoadingRules::explicit(&e.kubeconfig),
        )
        .unwrap();
        assert_eq!(config.server.as_str(), "https://10.96.0.1/");
        assert_eq!(config.default_namespace, "pod-ns");
    }

    #[test]
    fn kubeconfig_flag_wins_over_in_cluster() {
        let e = env(true);
        let config = from_flags_with(
            Some(&e.kubeconfig),
            None,
            &ConfigOverrides::default(),
            &e.in_cluster,
            no_default_files,
        )
        .unwrap();
        assert_eq!(config.server.as_str(), "https://from-kubeconfig:6443/");
        assert_eq!(config.auth, Auth::BearerToken("kc-token".into()));
        // The context sets no namespace and we run in a pod: the pod's namespace applies.
        assert_eq!(config.default_namespace, "pod-ns");
    }

    #[test]
    fn master_overrides_the_kubeconfig_server() {
        let e = env(false);
        let config = from_flags_with(
            Some(&e.kubeconfig),
            Some("https://master:443"),
            &ConfigOverrides::default(),
            &e.in_cluster,
            no_default_files,
        )
        .unwrap();
        assert_eq!(config.server.as_str(), "https://master/");
        assert_eq!(config.auth, Auth::BearerToken("kc-token".into()));
        assert_eq!(config.default_namespace, "default");
    }

    #[test]
    fn master_alone_needs_no_kubeconfig() {
        let e = env(true);
        let config = from_flags_with(
            None,
            Some("http://127.0.0.1:8080"),
            &ConfigOverrides::default(),
            &e.in_cluster,
            no_default_files,
        )
        .unwrap();
        assert_eq!(config.server.as_str(), "http://127.0.0.1:8080/");
        assert_eq!(config.auth, Auth::None);
    }

    #[test]
    fn outside_a_pod_the_default_rules_apply() {
        let e = env(false);
        let config = from_flags_with(
            None,
            None,
            &ConfigOverrides::default(),
            &e.in_cluster,
            || LoadingRules::explicit(&e.kubeconfig),
        )
        .unwrap();
        assert_eq!(config.server.as_str(), "https://from-kubeconfig:6443/");
    }

    #[test]
    fn nothing_at_all_is_an_empty_config_error() {
        let e = env(false);
        let err = from_flags_with(
            None,
            None,
            &ConfigOverrides::default(),
            &e.in_cluster,
            no_default_files,
        )
        .unwrap_err();
        assert!(matches!(err, ConfigError::EmptyConfig { .. }), "{err}");
    }

    #[test]
    fn empty_kubeconfig_in_a_pod_falls_back_to_in_cluster() {
        let e = env(true);
        let empty = e.kubeconfig.with_file_name("empty");
        std::fs::write(&empty, "").unwrap();
        let mut overrides = ConfigOverrides::default();
        overrides.context.namespace = "flag-ns".into();
        let config = deferred(&LoadingRules::explicit(&empty), &overrides, &e.in_cluster).unwrap();
        assert_eq!(config.server.as_str(), "https://10.96.0.1/");
        assert_eq!(config.default_namespace, "flag-ns");

        // client-go's "in-cluster error returned when config is empty".
        overrides.cluster_info.certificate_authority = "/nonexistent/ca.crt".into();
        let err = deferred(&LoadingRules::explicit(&empty), &overrides, &e.in_cluster).unwrap_err();
        assert!(matches!(err, ConfigError::ReadFile { .. }), "{err}");
    }

    #[test]
    fn kubeconfig_errors_are_not_masked_by_in_cluster() {
        let e = env(true);
        let overrides = ConfigOverrides {
            current_context: "missing".into(),
            ..ConfigOverrides::default()
        };
        let err = deferred(
            &LoadingRules::explicit(&e.kubeconfig),
            &overrides,
            &e.in_cluster,
        )
        .unwrap_err();
        assert!(matches!(err, ConfigError::ContextNotFound { .. }), "{err}");
    }
}

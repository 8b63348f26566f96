//! `kubeconfig`: [`Kubeconfig::from_yaml`] on arbitrary text, then resolution of every
//! context into a [`Config`](kctrl_config::Config).
//!
//! Properties:
//! * parsing and resolving never panic (file references are cleared before resolving, so
//!   nothing is read from disk);
//! * a parsed kubeconfig defines each cluster, user, context and extension name once;
//! * merging is idempotent: a kubeconfig merged with itself, or with an empty one, is itself;
//! * `Debug` output does not depend on secret values (tokens, passwords, keys, exec
//!   environment values, auth-provider settings): replacing every secret with another value
//!   leaves the parsed kubeconfig's and every resolved configuration's `Debug` unchanged.

use std::collections::HashSet;
use std::path::PathBuf;

use kctrl_config::kubeconfig::NamedExtension;
use kctrl_config::{ConfigOverrides, Kubeconfig, KubeconfigResolver, Secret};

/// The property function.
pub fn check(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(config) = Kubeconfig::from_yaml(text) else {
        return;
    };
    assert_unique(config.clusters.iter().map(|c| c.name.as_str()), "clusters");
    assert_unique(config.auth_infos.iter().map(|c| c.name.as_str()), "users");
    assert_unique(config.contexts.iter().map(|c| c.name.as_str()), "contexts");
    assert_unique(
        config.extensions.iter().map(|c| c.name.as_str()),
        "extensions",
    );

    let once = Kubeconfig::merge([config.clone()]);
    assert_eq!(
        Kubeconfig::merge([config.clone(), config.clone()]),
        once,
        "merging with itself changed it"
    );
    assert_eq!(
        Kubeconfig::merge([Kubeconfig::default(), config.clone()]),
        once,
        "merging after an empty kubeconfig changed it"
    );
    if unique_names(&config.preferences.extensions) {
        assert_eq!(once, config, "merging alone changed it");
    }

    let mut other = config.clone();
    replace_secrets(&mut other);
    assert_eq!(
        format!("{config:?}"),
        format!("{other:?}"),
        "Debug of a kubeconfig shows a secret"
    );

    let mut contexts: Vec<String> = config.contexts.iter().map(|c| c.name.clone()).collect();
    contexts.push(String::new());
    let (mut config, mut other) = (config, other);
    clear_file_references(&mut config);
    clear_file_references(&mut other);
    for context in contexts {
        let overrides = ConfigOverrides {
            current_context: context,
            ..ConfigOverrides::default()
        };
        let resolved = KubeconfigResolver::new(config.clone(), overrides.clone()).config();
        let resolved_other = KubeconfigResolver::new(other.clone(), overrides).config();
        if let (Ok(a), Ok(b)) = (&resolved, &resolved_other) {
            assert_eq!(
                format!("{a:?}"),
                format!("{b:?}"),
                "Debug of a resolved Config shows a secret"
            );
        }
        if let Err(e) = &resolved {
            assert!(!e.to_string().is_empty());
        }
    }
}

fn assert_unique<'a>(names: impl Iterator<Item = &'a str>, list: &str) {
    let mut seen = HashSet::new();
    for name in names {
        assert!(seen.insert(name), "{list} defines {name:?} twice");
    }
}

fn unique_names(list: &[NamedExtension]) -> bool {
    let mut seen = HashSet::new();
    list.iter().all(|e| seen.insert(e.name.as_str()))
}

/// Replaces every secret with a different value of the same kind.
fn replace_secrets(config: &mut Kubeconfig) {
    fn other(s: &Secret<String>) -> Secret<String> {
        Secret::new(format!("{}-other-secret", s.expose()))
    }
    for named in &mut config.auth_infos {
        let auth = &mut named.auth_info;
        auth.token = other(&auth.token);
        auth.password = other(&auth.password);
        let mut key = auth.client_key_data.expose().clone();
        key.extend_from_slice(b"-other-key");
        auth.client_key_data = Secret::new(key);
        if let Some(provider) = &mut auth.auth_provider {
            for value in provider.config.values_mut() {
                *value = other(value);
            }
        }
        if let Some(exec) = &mut auth.exec {
            for var in &mut exec.env {
                var.value = other(&var.value);
            }
        }
    }
}

/// Clears the paths resolution would read, so the target never touches the file system.
fn clear_file_references(config: &mut Kubeconfig) {
    for named in &mut config.clusters {
        named.cluster.certificate_authority = PathBuf::new();
    }
    for named in &mut config.auth_infos {
        let auth = &mut named.auth_info;
        auth.client_certificate = PathBuf::new();
        auth.client_key = PathBuf::new();
        auth.token_file = PathBuf::new();
    }
}

//! Which kubeconfig files to read and how to merge them (client-go's
//! `ClientConfigLoadingRules`).
//!
//! - `--kubeconfig` ([`LoadingRules::explicit_path`]) loads only that file, which must exist.
//! - Otherwise `KUBECONFIG` is split on `:` (`;` on Windows) and deduplicated, or, when unset,
//!   `~/.kube/config` is used. Missing files are skipped; when every file of `KUBECONFIG` is
//!   missing a warning is logged.
//! - Merge: the first file that defines a cluster, user, context or extension name wins that
//!   name entirely (no field-level merge of same-named entries); scalars such as
//!   `current-context` come from the first file that sets them.
//! - Relative paths (`certificate-authority`, `client-certificate`, `client-key`, `tokenFile`,
//!   and an exec `command` containing a path separator) are resolved against the directory of
//!   the file that defined the entry.
//!
//! Not ported: client-go's one-off migration that copies `~/.kube/.kubeconfig` to
//! `~/.kube/config` (a library should not write into the user's home on load).

use std::collections::HashSet;
use std::ffi::OsStr;
use std::path::{Component, Path, PathBuf};

use crate::error::ConfigError;
use crate::kubeconfig::{AuthInfo, Cluster, Kubeconfig, NamedExtension};

/// The environment variable listing kubeconfig files.
pub const KUBECONFIG_ENV: &str = "KUBECONFIG";

/// Where kubeconfig files are looked for (client-go's `ClientConfigLoadingRules`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LoadingRules {
    /// `--kubeconfig`: when set, only this file is loaded, and it must exist.
    pub explicit_path: Option<PathBuf>,
    /// Files merged in order when there is no explicit path; missing ones are skipped.
    pub precedence: Vec<PathBuf>,
    /// Log a warning when every file of `precedence` is missing (set when they came from
    /// `KUBECONFIG`).
    pub warn_if_all_missing: bool,
    /// Leave relative paths inside the files as written (client-go's `DoNotResolvePaths`).
    pub do_not_resolve_paths: bool,
}

impl LoadingRules {
    /// client-go's default rules: the files of `$KUBECONFIG`, or `~/.kube/config`.
    pub fn from_env() -> Self {
        Self::from_env_values(
            std::env::var_os(KUBECONFIG_ENV).as_deref(),
            home_dir().as_deref(),
        )
    }

    /// The default rules for the given value of `KUBECONFIG` and home directory.
    pub fn from_env_values(kubeconfig_env: Option<&OsStr>, home: Option<&Path>) -> Self {
        match kubeconfig_env {
            Some(list) if !list.is_empty() => Self {
                precedence: deduplicate(std::env::split_paths(list).collect()),
                warn_if_all_missing: true,
                ..Self::default()
            },
            _ => Self {
                precedence: home
                    .map(|h| vec![h.join(".kube").join("config")])
                    .unwrap_or_default(),
                ..Self::default()
            },
        }
    }

    /// Rules that load only `path` (`--kubeconfig`).
    pub fn explicit(path: impl Into<PathBuf>) -> Self {
        Self {
            explicit_path: Some(path.into()),
            ..Self::default()
        }
    }

    /// The files that will be read, in order (client-go's `GetLoadingPrecedence`).
    pub fn loading_precedence(&self) -> Vec<PathBuf> {
        match &self.explicit_path {
            Some(path) => vec![path.clone()],
            None => self.precedence.clone(),
        }
    }

    /// Reads and merges the files. Missing files of `precedence` are skipped (an empty
    /// kubeconfig results when all are missing); an unreadable or malformed file is an error.
    pub fn load(&self) -> Result<Kubeconfig, ConfigError> {
        let files: Vec<&Path> = match &self.explicit_path {
            Some(path) => {
                if !path.exists() {
                    return Err(ConfigError::KubeconfigNotFound { path: path.clone() });
                }
                vec![path.as_path()]
            }
            None => self.precedence.iter().map(PathBuf::as_path).collect(),
        };

        let mut loaded = Vec::new();
        let mut missing = Vec::new();
        for path in files {
            if path.as_os_str().is_empty() {
                continue;
            }
            match Kubeconfig::read(path) {
                Ok(config) => loaded.push(config),
                Err(ConfigError::ReadKubeconfig { source, .. })
                    if source.kind() == std::io::ErrorKind::NotFound
                        && self.explicit_path.is_none() =>
                {
                    missing.push(path.to_owned());
                }
                Err(e) => return Err(e),
            }
        }
        if self.warn_if_all_missing && loaded.is_empty() && !missing.is_empty() {
            tracing::warn!(missing = ?missing, "config not found: none of the kubeconfig files exist");
        }

        let mut merged = merge(loaded);
        if !self.do_not_resolve_paths {
            resolve_local_paths(&mut merged);
        }
        Ok(merged)
    }
}

impl Kubeconfig {
    /// Merges kubeconfigs as [`LoadingRules::load`] does: the first to define a cluster, user,
    /// context or extension name keeps it whole; the first to set a scalar wins.
    pub fn merge(configs: impl IntoIterator<Item = Kubeconfig>) -> Kubeconfig {
        merge(configs)
    }
}

fn merge(configs: impl IntoIterator<Item = Kubeconfig>) -> Kubeconfig {
    fn add_named<T>(dst: &mut Vec<T>, src: Vec<T>, name: impl Fn(&T) -> &str) {
        for item in src {
            if !dst.iter().any(|d| name(d) == name(&item)) {
                dst.push(item);
            }
        }
    }
    let mut merged = Kubeconfig::default();
    for config in configs {
        add_named(&mut merged.clusters, config.clusters, |c| &c.name);
        add_named(&mut merged.auth_infos, config.auth_infos, |a| &a.name);
        add_named(&mut merged.contexts, config.contexts, |c| &c.name);
        add_named(&mut merged.extensions, config.extensions, |e| &e.name);
        if merged.current_context.is_empty() {
            merged.current_context = config.current_context;
        }
        merged.preferences.colors |= config.preferences.colors;
        add_named(
            &mut merged.preferences.extensions,
            config.preferences.extensions,
            |e: &NamedExtension| &e.name,
        );
    }
    merged
}

/// Makes every relative file reference absolute, against its entry's origin directory.
fn resolve_local_paths(config: &mut Kubeconfig) {
    for named in &mut config.clusters {
        resolve_cluster_paths(&mut named.cluster);
    }
    for named in &mut config.auth_infos {
        resolve_auth_info_paths(&mut named.auth_info);
    }
}

fn origin_dir(origin: Option<&Path>) -> Option<PathBuf> {
    let dir = origin?.parent()?;
    std::path::absolute(if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    })
    .ok()
}

fn resolve_cluster_paths(cluster: &mut Cluster) {
    if let Some(base) = origin_dir(cluster.origin.as_deref()) {
        resolve_path(&mut cluster.certificate_authority, &base);
    }
}

fn resolve_auth_info_paths(auth: &mut AuthInfo) {
    let Some(base) = origin_dir(auth.origin.as_deref()) else {
        return;
    };
    resolve_path(&mut auth.client_certificate, &base);
    resolve_path(&mut auth.client_key, &base);
    resolve_path(&mut auth.token_file, &base);
    if let Some(exec) = &mut auth.exec {
        // A bare command name is looked up in PATH; only path-like commands are resolved.
        if exec.command.contains(std::path::MAIN_SEPARATOR) {
            let mut command = PathBuf::from(&exec.command);
            resolve_path(&mut command, &base);
            exec.command = command.to_string_lossy().into_owned();
        }
    }
}

fn resolve_path(path: &mut PathBuf, base: &Path) {
    if !path.as_os_str().is_empty() && path.is_relative() {
        *path = clean(&base.join(&*path));
    }
}

/// Lexically normalizes a path (drops `.`, folds `..`), like Go's `filepath.Clean`.
pub(crate) fn clean(path: &Path) -> PathBuf {
    let mut out: Vec<Component<'_>> = Vec::new();
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => match out.last() {
                Some(Component::Normal(_)) => {
                    out.pop();
                }
                Some(Component::RootDir | Component::Prefix(_)) => {}
                _ => out.push(component),
            },
            other => out.push(other),
        }
    }
    if out.is_empty() {
        return PathBuf::from(".");
    }
    out.iter().collect()
}

/// Removes repeated entries, keeping the first occurrence and the order.
pub(crate) fn deduplicate<T: Clone + Eq + std::hash::Hash>(items: Vec<T>) -> Vec<T> {
    let mut seen = HashSet::new();
    items
        .into_iter()
        .filter(|i| seen.insert(i.clone()))
        .collect()
}

/// The user's home directory: `$HOME`, else the platform's notion of it.
pub(crate) fn home_dir() -> Option<PathBuf> {
    std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from)
        .or_else(std::env::home_dir)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ConfigOverrides;
    use crate::resolve::KubeconfigResolver;
    use std::fs;

    fn write(dir: &Path, name: &str, yaml: &str) -> PathBuf {
        let path = dir.join(name);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(&path, yaml).unwrap();
        path
    }

    // client-go testConfigAlfa/Bravo/Charlie/Delta/ConflictAlfa, as YAML.
    const ALFA: &str = r#"
users:
- name: red-user
  user: {token: red-token}
clusters:
- name: cow-cluster
  cluster: {server: "http://cow.org:8080"}
contexts:
- name: federal-context
  context: {user: red-user, cluster: cow-cluster, namespace: hammer-ns}
"#;
    const BRAVO: &str = r#"
users:
- name: black-user
  user: {token: black-token}
clusters:
- name: pig-cluster
  cluster: {server: "http://pig.org:8080"}
contexts:
- name: queen-anne-context
  context: {user: black-user, cluster: pig-cluster, namespace: saw-ns}
"#;
    const CONFLICT_ALFA: &str = r#"
users:
- name: red-user
  user: {token: a-different-red-token}
- name: yellow-user
  user: {token: yellow-token}
clusters:
- name: cow-cluster
  cluster: {server: "http://a-different-cow.org:8080", insecure-skip-tls-verify: true, disable-compression: true}
- name: donkey-cluster
  cluster: {server: "http://donkey.org:8080", insecure-skip-tls-verify: true, disable-compression: true}
current-context: federal-context
"#;

    #[test]
    fn conflicting_current_context() {
        let dir = tempfile::tempdir().unwrap();
        let command_line = write(dir.path(), "cmd", "current-context: any-context-value\n");
        let env_var = write(dir.path(), "env", "current-context: a-different-context\n");
        let rules = LoadingRules {
            explicit_path: Some(command_line),
            precedence: vec![env_var],
            ..LoadingRules::default()
        };
        let merged = rules.load().unwrap();
        assert_eq!(merged.current_context, "any-context-value");
    }

    #[test]
    fn first_file_wins_whole_entries_and_scalars() {
        let dir = tempfile::tempdir().unwrap();
        let a = write(dir.path(), "a", ALFA);
        let conflict = write(dir.path(), "conflict", CONFLICT_ALFA);
        let b = write(dir.path(), "b", BRAVO);
        let rules = LoadingRules {
            precedence: vec![a, conflict, b],
            ..LoadingRules::default()
        };
        let merged = rules.load().unwrap();
        // red-user and cow-cluster come from ALFA entirely (no field-level merge).
        assert_eq!(
            merged.auth_info("red-user").unwrap().token.expose(),
            "red-token"
        );
        let cow = merged.cluster("cow-cluster").unwrap();
        assert_eq!(cow.server, "http://cow.org:8080");
        assert!(!cow.insecure_skip_tls_verify && !cow.disable_compression);
        // Names defined only later are added.
        assert!(merged.auth_info("yellow-user").is_some());
        assert!(merged.cluster("donkey-cluster").is_some());
        assert!(merged.context("queen-anne-context").is_some());
        // ALFA sets no current-context, so the first file that does wins.
        assert_eq!(merged.current_context, "federal-context");
        assert_eq!(merged.clusters.len(), 3);
    }

    #[test]
    fn loading_get_loading_precedence() {
        let home = Path::new("/home/me");
        let cases: [(&str, LoadingRules, Vec<&str>); 4] = [
            (
                "default",
                LoadingRules::from_env_values(None, Some(home)),
                vec!["/home/me/.kube/config"],
            ),
            (
                "explicit",
                LoadingRules::explicit("/explicit/kubeconfig"),
                vec!["/explicit/kubeconfig"],
            ),
            (
                "envvar-single",
                LoadingRules::from_env_values(Some(OsStr::new("/env/kubeconfig")), Some(home)),
                vec!["/env/kubeconfig"],
            ),
            (
                "envvar-multiple",
                LoadingRules::from_env_values(
                    Some(OsStr::new("/env/kubeconfig:/other/kubeconfig")),
                    Some(home),
                ),
                vec!["/env/kubeconfig", "/other/kubeconfig"],
            ),
        ];
        for (name, rules, want) in cases {
            let want: Vec<PathBuf> = want.into_iter().map(PathBuf::from).collect();
            assert_eq!(rules.loading_precedence(), want, "{name}");
        }
        // An empty KUBECONFIG counts as unset, as in client-go.
        assert_eq!(
            LoadingRules::from_env_values(Some(OsStr::new("")), Some(home)).loading_precedence(),
            vec![PathBuf::from("/home/me/.kube/config")]
        );
        // Duplicates in KUBECONFIG are dropped.
        assert_eq!(
            LoadingRules::from_env_values(Some(OsStr::new("/a:/b:/a")), None).loading_precedence(),
            vec![PathBuf::from("/a"), PathBuf::from("/b")]
        );
    }

    #[test]
    fn resolve_relative_paths() {
        let config1 = r#"
users:
- name: relative-user-1
  user: {client-certificate: relative/client/cert, client-key: ../relative/client/key}
- name: absolute-user-1
  user: {client-certificate: /absolute/client/cert, client-key: /absolute/client/key}
- name: relative-cmd-1
  user: {exec: {command: ../relative/client/cmd}}
- name: absolute-cmd-1
  user: {exec: {command: /absolute/client/cmd}}
- name: PATH-cmd-1
  user: {exec: {command: cmd}}
clusters:
- name: relative-server-1
  cluster: {certificate-authority: ../relative/ca}
- name: absolute-server-1
  cluster: {certificate-authority: /absolute/ca}
"#;
        let config2 = r#"
users:
- name: relative-user-2
  user: {client-certificate: relative/client/cert2, client-key: ../relative/client/key2, tokenFile: tok}
- name: absolute-user-2
  user: {client-certificate: /absolute/client/cert2, client-key: /absolute/client/key2}
clusters:
- name: relative-server-2
  cluster: {certificate-authority: ../relative/ca2}
- name: absolute-server-2
  cluster: {certificate-authority: /absolute/ca2}
"#;
        let root = tempfile::tempdir().unwrap();
        let dir1 = std::path::absolute(root.path().join("one")).unwrap();
        let dir2 = std::path::absolute(root.path().join("two").join("nested")).unwrap();
        let file1 = write(&dir1, ".kubeconfig", config1);
        let file2 = write(&dir2, ".kubeconfig", config2);
        let merged = LoadingRules {
            precedence: vec![file1, file2],
            ..LoadingRules::default()
        }
        .load()
        .unwrap();

        let ca = |name: &str| merged.cluster(name).unwrap().certificate_authority.clone();
        assert_eq!(ca("relative-server-1"), clean(&dir1.join("../relative/ca")));
        assert_eq!(
            ca("relative-server-2"),
            clean(&dir2.join("../relative/ca2"))
        );
        assert_eq!(ca("absolute-server-1"), Path::new("/absolute/ca"));
        assert_eq!(ca("absolute-server-2"), Path::new("/absolute/ca2"));
        assert_eq!(merged.clusters.len(), 4);

        let user = |name: &str| merged.auth_info(name).unwrap().clone();
        let u = user("relative-user-1");
        assert_eq!(u.client_certificate, dir1.join("relative/client/cert"));
        assert_eq!(u.client_key, root.path().join("relative/client/key"));
        let u = user("relative-user-2");
        assert_eq!(u.client_certificate, dir2.join("relative/client/cert2"));
        assert_eq!(u.client_key, root.path().join("two/relative/client/key2"));
        assert_eq!(u.token_file, dir2.join("tok"));
        let u = user("absolute-user-1");
        assert_eq!(u.client_certificate, Path::new("/absolute/client/cert"));
        assert_eq!(u.client_key, Path::new("/absolute/client/key"));
        let u = user("absolute-user-2");
        assert_eq!(u.client_certificate, Path::new("/absolute/client/cert2"));
        assert_eq!(u.client_key, Path::new("/absolute/client/key2"));
        let cmd = |name: &str| user(name).exec.unwrap().command;
        assert_eq!(
            cmd("relative-cmd-1"),
            root.path().join("relative/client/cmd").to_string_lossy()
        );
        assert_eq!(cmd("absolute-cmd-1"), "/absolute/client/cmd");
        assert_eq!(cmd("PATH-cmd-1"), "cmd");
        assert_eq!(merged.auth_infos.len(), 7);
    }

    #[test]
    fn do_not_resolve_paths_keeps_them() {
        let dir = tempfile::tempdir().unwrap();
        let file = write(
            dir.path(),
            "config",
            "clusters:\n- name: c\n  cluster: {certificate-authority: ca.crt}\n",
        );
        let rules = LoadingRules {
            explicit_path: Some(file),
            do_not_resolve_paths: true,
            ..LoadingRules::default()
        };
        let kc = rules.load().unwrap();
        assert_eq!(
            kc.cluster("c").unwrap().certificate_authority,
            Path::new("ca.crt")
        );
    }

    #[test]
    fn deduplicate() {
        let cases = [
            (
                vec!["a", "b", "c", "d", "e", "f"],
                vec!["a", "b", "c", "d", "e", "f"],
            ),
            (
                vec!["a", "b", "c", "b", "e", "f"],
                vec!["a", "b", "c", "e", "f"],
            ),
            (vec!["a", "a", "b", "b", "c", "b"], vec!["a", "b", "c"]),
        ];
        for (src, expect) in cases {
            assert_eq!(super::deduplicate(src), expect);
        }
    }

    /// Captures what `f` logs.
    fn logs(f: impl FnOnce()) -> String {
        #[derive(Clone, Default)]
        struct Buffer(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);
        impl std::io::Write for Buffer {
            fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(buf);
                Ok(buf.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let buffer = Buffer::default();
        let writer = buffer.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .finish();
        tracing::subscriber::with_default(subscriber, f);
        let bytes = buffer.0.lock().unwrap().clone();
        String::from_utf8(bytes).unwrap()
    }

    #[test]
    fn tolerating_missing_files() {
        let rules = LoadingRules {
            precedence: vec!["bogus1".into(), "bogus2".into(), "bogus3".into()],
            warn_if_all_missing: true,
            ..LoadingRules::default()
        };
        let log = logs(|| assert!(rules.load().unwrap().is_empty()));
        assert!(
            log.contains("config not found") && log.contains("bogus1"),
            "{log}"
        );

        // Without warn_if_all_missing (the ~/.kube/config default) nothing is logged.
        let quiet = LoadingRules {
            warn_if_all_missing: false,
            ..rules
        };
        let log = logs(|| assert!(quiet.load().unwrap().is_empty()));
        assert!(!log.contains("config not found"), "{log}");
    }

    #[test]
    fn missing_files_are_skipped_among_present_ones() {
        let dir = tempfile::tempdir().unwrap();
        let a = write(dir.path(), "a", ALFA);
        let rules = LoadingRules {
            precedence: vec![dir.path().join("missing"), a],
            ..LoadingRules::default()
        };
        assert!(rules.load().unwrap().context("federal-context").is_some());
    }

    #[test]
    fn non_existent_command_line_file() {
        let err = LoadingRules::explicit("bogus_file").load().unwrap_err();
        assert!(matches!(err, ConfigError::KubeconfigNotFound { .. }));
        assert!(err.to_string().contains("bogus_file"), "{err}");
    }

    #[test]
    fn error_reading_file() {
        let dir = tempfile::tempdir().unwrap();
        let file = write(dir.path(), "bad", "bogus value");
        let err = LoadingRules::explicit(&file).load().unwrap_err();
        assert!(err.to_string().contains(&*file.to_string_lossy()), "{err}");
    }

    #[test]
    fn error_reading_non_file() {
        let dir = tempfile::tempdir().unwrap();
        for rules in [
            LoadingRules::explicit(dir.path()),
            LoadingRules {
                precedence: vec![dir.path().to_owned()],
                ..LoadingRules::default()
            },
        ] {
            let err = rules.load().unwrap_err();
            assert!(matches!(err, ConfigError::ReadKubeconfig { .. }), "{err:?}");
            assert!(
                err.to_string().contains(&*dir.path().to_string_lossy()),
                "{err}"
            );
        }
    }

    const DUPLICATE_BASE: &str = r#"
kind: Config
apiVersion: v1
clusters:
- cluster:
    api-version: v1
    server: https://kubernetes.default.svc:443
    certificate-authority: /var/run/secrets/kubernetes.io/serviceaccount/ca.crt
  name: kubeconfig-cluster
contexts:
- context:
    cluster: kubeconfig-cluster
    namespace: default
    user: kubeconfig-user
  name: kubeconfig-context
current-context: kubeconfig-context
users:
- name: kubeconfig-user
  user:
    tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token
"#;

    fn assert_duplicate(yaml: &str, want_list: &str, want_name: &str) {
        let dir = tempfile::tempdir().unwrap();
        let file = write(dir.path(), "config", yaml);
        let err = Kubeconfig::read(&file).unwrap_err();
        match &err {
            ConfigError::DuplicateName { list, name, path } => {
                assert_eq!((*list, name.as_str()), (want_list, want_name));
                assert_eq!(path, &file);
            }
            other => panic!("expected a duplicate-name error, got {other:?}"),
        }
        assert!(err.to_string().contains(want_name), "{err}");
    }

    #[test]
    fn duplicate_cluster_name() {
        let yaml = DUPLICATE_BASE.replace(
            "  name: kubeconfig-cluster\n",
            "  name: kubeconfig-cluster\n- cluster:\n    api-version: v2\n    server: https://test.example.server:443\n    certificate-authority: /var/run/secrets/test.example.io/serviceaccount/ca.crt\n  name: kubeconfig-cluster\n",
        );
        assert_duplicate(&yaml, "clusters", "kubeconfig-cluster");
    }

    #[test]
    fn duplicate_context_name() {
        let yaml = DUPLICATE_BASE.replace(
            "  name: kubeconfig-context\n",
            "  name: kubeconfig-context\n- context:\n    cluster: test-example-cluster\n    namespace: test-example\n    user: test-example-user\n  name: kubeconfig-context\n",
        );
        assert_duplicate(&yaml, "contexts", "kubeconfig-context");
    }

    #[test]
    fn duplicate_user_name() {
        let yaml = format!(
            "{DUPLICATE_BASE}- name: kubeconfig-user\n  user:\n    tokenFile: /var/run/secrets/test.example.com/serviceaccount/token\n"
        );
        assert_duplicate(&yaml, "users", "kubeconfig-user");
    }

    #[test]
    fn duplicate_extension_name() {
        let yaml = format!(
            "{DUPLICATE_BASE}extensions:\n- extension:\n    bytes: test\n  name: test-extension\n- extension:\n    bytes: some-example\n  name: test-extension\n"
        );
        assert_duplicate(&yaml, "extensions", "test-extension");
    }

    #[test]
    fn merged_kubeconfig_resolves_through_the_first_files_entries() {
        let dir = tempfile::tempdir().unwrap();
        let a = write(dir.path(), "a", ALFA);
        let conflict = write(dir.path(), "conflict", CONFLICT_ALFA);
        let kc = LoadingRules {
            precedence: vec![conflict, a],
            ..LoadingRules::default()
        }
        .load()
        .unwrap();
        let resolver = KubeconfigResolver::new(kc, ConfigOverrides::default());
        let config = resolver.config().unwrap();
        assert_eq!(config.server.as_str(), "http://a-different-cow.org:8080/");
        assert_eq!(config.default_namespace, "hammer-ns");
    }

    #[test]
    fn clean_folds_dots() {
        assert_eq!(clean(Path::new("/a/b/../c/./d")), Path::new("/a/c/d"));
        assert_eq!(clean(Path::new("/../a")), Path::new("/a"));
        assert_eq!(clean(Path::new("a/../../b")), Path::new("../b"));
        assert_eq!(clean(Path::new("./")), Path::new("."));
    }
}

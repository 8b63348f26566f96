//! Where the control-plane binaries of an environment come from, in order of preference:
//!
//! 1. a binary named by `TEST_ASSET_<NAME>` (controller-runtime envtest's per-binary
//!    override), else the directory `$KUBEBUILDER_ASSETS`, else the one given to
//!    [`TestEnvBuilder::binary_assets`] (setup-envtest's layout: `etcd`, `kube-apiserver`,
//!    `kubectl` directly in it), for the binaries they hold;
//! 2. the version-keyed cache (`~/.cache/kctrl/k8s-<version>`): a build of kctrl's, or a
//!    download recorded there whose SHA-256 still matches;
//! 3. a download of the official release binaries, verified against the published checksums,
//!    when allowed ([`TestEnvBuilder::download`], `$KCTRL_TESTENV_DOWNLOAD`);
//! 4. a build from upstream's Go modules, when allowed ([`TestEnvBuilder::build_if_missing`]).
//!
//! When kube-apiserver comes from step 1, its `--version` decides the Kubernetes version of
//! the whole plane; otherwise the release asked for (or the default) does.

use std::ops::RangeInclusive;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use kctrl_cluster::plane::Binaries;
use kctrl_cluster::toolchain::{self, BuildLock, Cache};
use kctrl_cluster::versions::{Binary, DEFAULT_RELEASE, KUBE_VERSION_ENV, RELEASES, Release};

use crate::download::{self, Record};
use crate::{Error, TestEnvBuilder};

/// The directory of binaries in setup-envtest's layout (`etcd`, `kube-apiserver`, `kubectl`
/// directly in it), as controller-runtime's envtest reads it. It wins over
/// [`TestEnvBuilder::binary_assets`], as in envtest, so that CI can point every test at
/// its cached binaries.
pub const KUBEBUILDER_ASSETS_ENV: &str = "KUBEBUILDER_ASSETS";

/// The prefix of the per-binary overrides: `TEST_ASSET_ETCD`, `TEST_ASSET_KUBE_APISERVER` and
/// `TEST_ASSET_KUBECTL` as in controller-runtime's envtest (the binary's name upper-cased, `-`
/// as `_`), and likewise `TEST_ASSET_KUBE_CONTROLLER_MANAGER` and `TEST_ASSET_KUBE_SCHEDULER`
/// for the components envtest does not run. Each names a file and wins over every directory.
pub const TEST_ASSET_ENV_PREFIX: &str = "TEST_ASSET_";

/// Allows (`1`, `true`) or forbids (`0`, `false`) downloading the release binaries that no
/// other source has, when the test did not choose with [`TestEnvBuilder::download`]. Off by
/// default.
pub const DOWNLOAD_ENV: &str = "KCTRL_TESTENV_DOWNLOAD";

/// The base URL of Kubernetes' release binaries (a mirror of
/// [`DEFAULT_KUBERNETES_DOWNLOAD_URL`]): binaries are fetched from
/// `<base>/<version>/bin/linux/<arch>/<name>`, with their digest from `<name>.sha256`.
pub const KUBERNETES_DOWNLOAD_URL_ENV: &str = "KCTRL_KUBERNETES_DOWNLOAD_URL";

/// The base URL of etcd's release archives (a mirror of [`DEFAULT_ETCD_DOWNLOAD_URL`]):
/// `<base>/<etcd version>/etcd-<etcd version>-linux-<arch>.tar.gz`, with its digest from
/// `<base>/<etcd version>/SHA256SUMS`.
pub const ETCD_DOWNLOAD_URL_ENV: &str = "KCTRL_ETCD_DOWNLOAD_URL";

/// Where Kubernetes publishes its release binaries.
pub const DEFAULT_KUBERNETES_DOWNLOAD_URL: &str = "https://dl.k8s.io/release";

/// Where etcd publishes its release archives.
pub const DEFAULT_ETCD_DOWNLOAD_URL: &str = "https://github.com/etcd-io/etcd/releases/download";

/// The Kubernetes minor versions kctrl supports (those of k8s-openapi 0.29): a kube-apiserver
/// of another one is refused.
const SUPPORTED_MINORS: RangeInclusive<u32> = 33..=37;

/// How long `kube-apiserver --version` may take.
const VERSION_TIMEOUT: Duration = Duration::from_secs(30);

/// Where one binary of an environment came from.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum BinarySource {
    /// The file a `TEST_ASSET_<NAME>` variable named.
    Override {
        /// The variable, e.g. `TEST_ASSET_KUBE_APISERVER`.
        variable: String,
    },
    /// A directory in setup-envtest's layout: `$KUBEBUILDER_ASSETS` or
    /// [`TestEnvBuilder::binary_assets`].
    Assets {
        /// The directory.
        dir: PathBuf,
    },
    /// kctrl's own build from upstream's Go modules, in the cache.
    Built,
    /// An official release binary downloaded into the cache (now or by an earlier run),
    /// whose digest still matches the published one.
    Downloaded {
        /// What was downloaded (the binary, or etcd's release archive).
        url: String,
        /// The binary's SHA-256.
        sha256: String,
    },
}

/// One binary of an environment: its name, path and where it came from
/// ([`TestEnv::binaries`](crate::TestEnv::binaries)).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ResolvedBinary {
    /// The file name, e.g. `kube-apiserver`.
    pub name: &'static str,
    /// The file that runs.
    pub path: PathBuf,
    /// Where it came from.
    pub source: BinarySource,
}

impl TestEnvBuilder {
    /// Takes etcd, kube-apiserver and kubectl (and kube-controller-manager and kube-scheduler
    /// if it has them) from `dir`, a directory in setup-envtest's layout (the binaries
    /// directly in it), as `$KUBEBUILDER_ASSETS` does; that variable, when set, wins (as in
    /// controller-runtime's envtest). See the [crate documentation](crate#the-binaries) for
    /// the order of all sources and the version check.
    pub fn binary_assets(mut self, dir: impl Into<PathBuf>) -> Self {
        self.binary_assets = Some(dir.into());
        self
    }

    /// Whether the official release binaries that no other source has may be downloaded
    /// (verified against their published SHA-256) into the cache: Kubernetes' from
    /// `$KCTRL_KUBERNETES_DOWNLOAD_URL` (default `https://dl.k8s.io/release`), etcd's from
    /// `$KCTRL_ETCD_DOWNLOAD_URL` (default etcd's GitHub releases). KWOK publishes no
    /// checksums and is never downloaded. When not called, `$KCTRL_TESTENV_DOWNLOAD` decides
    /// (`1`/`true` or `0`/`false`); without either, nothing is downloaded.
    pub fn download(mut self, on: bool) -> Self {
        self.download = Some(on);
        self
    }
}

/// Everything the resolution depends on, read from the builder and the environment once (so
/// that the resolution itself can be tested without changing the process's environment).
#[derive(Clone, Debug)]
pub(crate) struct Inputs {
    /// The release the test asked for and how (`kube_version(...)`, `$KCTRL_KUBE_VERSION`).
    pub(crate) asked: Option<(&'static Release, String)>,
    /// `TEST_ASSET_*` overrides: the binary, the variable and its path.
    pub(crate) overrides: Vec<(Binary, String, PathBuf)>,
    /// The assets directory and what named it.
    pub(crate) assets: Option<(PathBuf, String)>,
    pub(crate) download: bool,
    pub(crate) build: bool,
    pub(crate) kubernetes_url: String,
    pub(crate) etcd_url: String,
    /// The cache base (`~/.cache/kctrl`).
    pub(crate) cache_base: PathBuf,
    /// The binaries the plane needs (kubectl included).
    pub(crate) wanted: Vec<Binary>,
}

/// `kube-controller-manager` -> `TEST_ASSET_KUBE_CONTROLLER_MANAGER`.
pub(crate) fn override_variable(binary: Binary) -> String {
    format!(
        "{TEST_ASSET_ENV_PREFIX}{}",
        binary.file_name().to_ascii_uppercase().replace('-', "_")
    )
}

fn env_nonempty(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

impl Inputs {
    /// The inputs of `b`'s start, with the environment as it is now.
    pub(crate) fn from_builder(b: &TestEnvBuilder) -> Result<Inputs, Error> {
        let asked = match b.release {
            Some(r) => Some((r, format!("kube_version(\"{}\")", r.minor_name()))),
            None => match env_nonempty(KUBE_VERSION_ENV) {
                Some(_) => Some((b.release()?, format!("${KUBE_VERSION_ENV}"))),
                None => None,
            },
        };
        let mut wanted: Vec<Binary> = b.components().iter().map(|c| c.binary()).collect();
        wanted.push(Binary::Kubectl);
        let overrides = wanted
            .iter()
            .filter(|b| **b != Binary::Kwok)
            .filter_map(|b| {
                let var = override_variable(*b);
                env_nonempty(&var).map(|p| (*b, var, PathBuf::from(p)))
            })
            .collect();
        let assets = match env_nonempty(KUBEBUILDER_ASSETS_ENV) {
            Some(dir) => Some((PathBuf::from(dir), format!("${KUBEBUILDER_ASSETS_ENV}"))),
            None => b
                .binary_assets
                .clone()
                .map(|d| (d, "binary_assets(...)".to_owned())),
        };
        let download = match b.download {
            Some(on) => on,
            None => match env_nonempty(DOWNLOAD_ENV).as_deref().map(str::trim) {
                None | Some("0") | Some("false") => false,
                Some("1") | Some("true") => true,
                Some(other) => {
                    return Err(Error::Assets(format!(
                        "{DOWNLOAD_ENV}={other:?} is neither 1/true (download the release \
                         binaries) nor 0/false (do not)"
                    )));
                }
            },
        };
        let cache_base = Cache::locate(DEFAULT_RELEASE)
            .map_err(|e| Error::Build(format!("{e:#}")))?
            .root
            .parent()
            .map(Path::to_path_buf)
            .ok_or_else(|| Error::Build("the cache directory has no parent".into()))?;
        Ok(Inputs {
            asked,
            overrides,
            assets,
            download,
            build: b.build_if_missing,
            kubernetes_url: env_nonempty(KUBERNETES_DOWNLOAD_URL_ENV)
                .unwrap_or_else(|| DEFAULT_KUBERNETES_DOWNLOAD_URL.to_owned()),
            etcd_url: env_nonempty(ETCD_DOWNLOAD_URL_ENV)
                .unwrap_or_else(|| DEFAULT_ETCD_DOWNLOAD_URL.to_owned()),
            cache_base,
            wanted,
        })
    }

    /// How the configuration differs from the defaults, for comparing shared environments.
    pub(crate) fn describe(&self) -> String {
        let mut parts = Vec::new();
        for (_, var, path) in &self.overrides {
            parts.push(format!("{var}={}", path.display()));
        }
        if let Some((dir, from)) = &self.assets {
            parts.push(format!("assets {} ({from})", dir.display()));
        }
        if self.download {
            parts.push("downloads allowed".into());
        }
        if parts.is_empty() {
            "binaries from the cache".into()
        } else {
            parts.join(", ")
        }
    }
}

/// The outcome: the plane's binaries and where each came from.
#[derive(Clone, Debug)]
pub(crate) struct Resolved {
    pub(crate) binaries: Binaries,
    pub(crate) origins: Vec<ResolvedBinary>,
}

/// A Kubernetes version as `--version` prints it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct KubeVersion {
    /// `v1.34.1`.
    pub(crate) text: String,
    pub(crate) minor: u32,
}

/// Parses `Kubernetes v1.34.1` (what `kube-apiserver --version` prints).
pub(crate) fn parse_version(output: &str) -> Option<KubeVersion> {
    let text = output
        .split_whitespace()
        .find(|w| w.starts_with("v1.") || w.starts_with("v2."))?;
    let mut parts = text.trim_start_matches('v').split('.');
    let major: u32 = parts.next()?.parse().ok()?;
    let minor: u32 = parts.next()?.parse().ok()?;
    let patch = parts.next()?;
    let digits: String = patch.chars().take_while(char::is_ascii_digit).collect();
    (major == 1 && !digits.is_empty()).then(|| KubeVersion {
        text: text.to_owned(),
        minor,
    })
}

/// Runs `<binary> --version` and parses it.
fn binary_version(binary: &Path) -> Result<KubeVersion, Error> {
    binary_version_within(binary, VERSION_TIMEOUT)
}

/// [`binary_version`] with `timeout` instead of [`VERSION_TIMEOUT`].
fn binary_version_within(binary: &Path, timeout: Duration) -> Result<KubeVersion, Error> {
    let failed = |why: String| {
        Error::Assets(format!(
            "could not tell which Kubernetes version {} is: {why}",
            binary.display()
        ))
    };
    let mut child = Command::new(binary)
        .arg("--version")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| failed(format!("running it failed: {e}")))?;
    let t0 = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if t0.elapsed() > timeout => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(failed(format!("`--version` did not answer within {timeout:?}")));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => return Err(failed(e.to_string())),
        }
    }
    let out = child
        .wait_with_output()
        .map_err(|e| failed(e.to_string()))?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(failed(format!(
            "`--version` exited with {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    parse_version(&text).ok_or_else(|| {
        failed(format!(
            "`--version` printed {:?}, not `Kubernetes v1.<minor>.<patch>`",
            text.trim()
        ))
    })
}

/// The supported range in words.
fn supported_range() -> String {
    format!(
        "1.{} to 1.{}",
        SUPPORTED_MINORS.start(),
        SUPPORTED_MINORS.end()
    )
}

/// `amd64` / `arm64`: the architecture in release file names.
fn release_arch() -> Option<&'static str> {
    match std::env::consts::ARCH {
        "x86_64" => Some("amd64"),
        "aarch64" => Some("arm64"),
        _ => None,
    }
}

/// Builds `wanted` into `cache` (kctrl's build from upstream's Go modules).
pub(crate) type BuildFn = fn(&Cache, &[Binary]) -> Result<(), Error>;

/// The real build: [`toolchain::ensure_built_only`].
fn build_from_source(cache: &Cache, wanted: &[Binary]) -> Result<(), Error> {
    toolchain::ensure_built_only(cache, wanted)
        .map(drop)
        .map_err(|e| Error::Build(format!("{e:#}")))
}

/// Finds every binary the plane needs (see the module documentation); downloads or builds
/// what is missing when allowed. Blocking work runs on Tokio's blocking threads.
pub(crate) async fn resolve(inputs: Inputs) -> Result<Resolved, Error> {
    resolve_with(inputs, build_from_source).await
}

/// [`resolve`] with `build` as the build (tests give one that builds nothing).
pub(crate) async fn resolve_with(mut inputs: Inputs, build: BuildFn) -> Result<Resolved, Error> {
    // Every path below the cache ends up as a symlink's target or the plane's root, and a
    // relative one (`KCTRL_CACHE_DIR=.cache`) would point nowhere from there.
    inputs.cache_base = absolute(&inputs.cache_base)?;
    let mut origins: Vec<ResolvedBinary> = Vec::new();
    // 1. The user's binaries.
    if let Some((dir, from)) = &inputs.assets
        && !dir.is_dir()
    {
        return Err(Error::Assets(format!(
            "{from} names {}, which is not a directory: point it at a directory holding etcd, \
             kube-apiserver and kubectl (setup-envtest's layout), or unset it",
            dir.display()
        )));
    }
    for &binary in &inputs.wanted {
        if let Some((_, var, path)) = inputs.overrides.iter().find(|(b, _, _)| *b == binary) {
            if !path.is_file() {
                return Err(Error::Assets(format!(
                    "{var} names {}, which is not a file: point it at the {} binary, or unset it",
                    path.display(),
                    binary.file_name()
                )));
            }
            origins.push(ResolvedBinary {
                name: binary.file_name(),
                path: absolute(path)?,
                source: BinarySource::Override {
                    variable: var.clone(),
                },
            });
        } else if let Some((dir, _)) = &inputs.assets
            && binary != Binary::Kwok
            && dir.join(binary.file_name()).is_file()
        {
            origins.push(ResolvedBinary {
                name: binary.file_name(),
                path: absolute(&dir.join(binary.file_name()))?,
                source: BinarySource::Assets { dir: dir.clone() },
            });
        }
    }
    // 2. The version: the user's kube-apiserver's, else the release asked for.
    let user_apiserver = origins
        .iter()
        .find(|o| o.name == Binary::KubeApiserver.file_name())
        .cloned();
    let (version, release) = match &user_apiserver {
        Some(apiserver) => {
            let path = apiserver.path.clone();
            let v = tokio::task::spawn_blocking(move || binary_version(&path))
                .await
                .map_err(|e| Error::Assets(format!("the version check failed: {e}")))??;
            let from = describe_source(&apiserver.source);
            if !SUPPORTED_MINORS.contains(&v.minor) {
                return Err(Error::UnsupportedVersion(format!(
                    "kube-apiserver {} (from {from}) is Kubernetes {}, which kctrl does not \
                     support (supported: {}); use binaries of a supported release (e.g. \
                     `setup-envtest use 1.{} -p path`)",
                    apiserver.path.display(),
                    v.text,
                    supported_range(),
                    SUPPORTED_MINORS.end()
                )));
            }
            if let Some((asked, how)) = &inputs.asked
                && asked.minor != v.minor
            {
                return Err(Error::UnsupportedVersion(format!(
                    "kube-apiserver {} (from {from}) is Kubernetes {}, but the test asks for \
                     {} with {how}: use binaries of 1.{} or ask for 1.{}",
                    apiserver.path.display(),
                    v.text,
                    asked.minor_name(),
                    asked.minor,
                    v.minor
                )));
            }
            tracing::info!(
                version = %v.text,
                path = %apiserver.path.display(),
                source = %from,
                "kube-apiserver from the user's binaries"
            );
            eprintln!(
                "kctrl-testenv: Kubernetes {} (kube-apiserver {}, from {from})",
                v.text,
                apiserver.path.display()
            );
            let release = RELEASES.iter().find(|r| r.minor == v.minor);
            (v.text, release)
        }
        None => {
            let r = inputs.asked.as_ref().map_or(DEFAULT_RELEASE, |(r, _)| *r);
            (r.kubernetes.to_owned(), Some(r))
        }
    };
    // 3. The rest from the cache, downloads or a build.
    let download_root = inputs.cache_base.join(format!("k8s-{version}"));
    let build_cache = release.map(|r| Cache::under(&inputs.cache_base, r));
    let mut missing: Vec<Binary> = inputs
        .wanted
        .iter()
        .copied()
        .filter(|b| !origins.iter().any(|o| o.name == b.file_name()))
        .collect();
    if !missing.is_empty() {
        let cached = {
            let (missing, download_root, build_cache) =
                (missing.clone(), download_root.clone(), build_cache.clone());
            tokio::task::spawn_blocking(move || {
                cached(&missing, &download_root, build_cache.as_ref())
            })
            .await
            .map_err(|e| Error::Build(format!("checking the cache failed: {e}")))?
        };
        for o in cached {
            missing.retain(|b| b.file_name() != o.name);
            origins.push(o);
        }
    }
    let downloadable = |b: &Binary| match b {
        Binary::Kwok => false,
        Binary::Etcd => release.is_some(),
        _ => true,
    };
    if !missing.is_empty() && inputs.download && missing.iter().any(downloadable) {
        let to_fetch: Vec<Binary> = missing.iter().copied().filter(downloadable).collect();
        let fetched = download_all(
            &inputs,
            &version,
            release,
            &download_root,
            build_cache.as_ref(),
            &to_fetch,
        )
        .await?;
        for o in fetched {
            missing.retain(|b| b.file_name() != o.name);
            origins.push(o);
        }
    }
    if !missing.is_empty()
        && inputs.build
        && let Some(cache) = &build_cache
    {
        let (building, wanted) = (cache.clone(), missing.clone());
        tokio::task::spawn_blocking(move || build(&building, &wanted))
            .await
            .map_err(|e| Error::Build(format!("the build task failed: {e}")))??;
        for b in std::mem::take(&mut missing) {
            origins.push(ResolvedBinary {
                name: b.file_name(),
                path: cache.binary(b),
                source: BinarySource::Built,
            });
        }
    }
    if !missing.is_empty() {
        return Err(missing_error(&inputs, &version, release, &missing));
    }
    for o in &origins {
        tracing::info!(binary = o.name, path = %o.path.display(), source = %describe_source(&o.source), "binary");
    }
    // Every release (also one with a patch other than kctrl's pin) records its etcd and KWOK
    // versions as the nearest release kctrl knows.
    let release = release.unwrap_or(DEFAULT_RELEASE);
    let root = {
        let (origins, base, kwok_share) = (
            origins.clone(),
            inputs.cache_base.clone(),
            build_cache.as_ref().map(|c| c.root.join("share")),
        );
        let kwok = inputs.wanted.contains(&Binary::Kwok);
        tokio::task::spawn_blocking(move || {
            binary_root(&origins, &base, kwok.then_some(kwok_share).flatten())
        })
        .await
        .map_err(|e| Error::Build(format!("linking the binaries failed: {e}")))??
    };
    Ok(Resolved {
        binaries: Binaries {
            root,
            release,
            kubernetes_version: version,
        },
        origins,
    })
}

/// `path` made absolute (symlinks to it must work from anywhere).
fn absolute(path: &Path) -> Result<PathBuf, Error> {
    std::path::absolute(path).map_err(|source| Error::Io {
        context: format!("resolving {}", path.display()),
        source,
    })
}

/// In words, for logs and errors.
fn describe_source(source: &BinarySource) -> String {
    match source {
        BinarySource::Override { variable } => format!("${variable}"),
        BinarySource::Assets { dir } => format!("the assets directory {}", dir.display()),
        BinarySource::Built => "kctrl's build in the cache".into(),
        BinarySource::Downloaded { url, .. } => format!("a download of {url}"),
    }
}

/// The binaries among `missing` that the cache already has: built with the current recipe
/// (in `build_cache`), or downloaded (in `download_root`) with an unchanged digest. When the
/// two differ (a kube-apiserver of another patch than kctrl pins), a download of the exact
/// version is preferred to a build of the pinned patch.
fn cached(
    missing: &[Binary],
    download_root: &Path,
    build_cache: Option<&Cache>,
) -> Vec<ResolvedBinary> {
    let exact_first = build_cache.is_none_or(|c| c.root != download_root);
    let mut found = Vec::new();
    for &b in missing {
        let from_build = || {
            build_cache
                .filter(|c| c.is_built(b))
                .map(|c| ResolvedBinary {
                    name: b.file_name(),
                    path: c.binary(b),
                    source: BinarySource::Built,
                })
        };
        let from_download = || {
            let path = Cache::binary_in(download_root, b);
            download::recorded(&path).map(|record| ResolvedBinary {
                name: b.file_name(),
                path,
                source: BinarySource::Downloaded {
                    url: record.url,
                    sha256: record.sha256,
                },
            })
        };
        let hit = if exact_first {
            from_download().or_else(from_build)
        } else {
            from_build().or_else(from_download)
        };
        found.extend(hit);
    }
    found
}

/// Downloads `binaries` into `root/bin` under the cache's build lock (so that parallel test
/// binaries download each file once).
async fn download_all(
    inputs: &Inputs,
    version: &str,
    release: Option<&'static Release>,
    root: &Path,
    build_cache: Option<&Cache>,
    binaries: &[Binary],
) -> Result<Vec<ResolvedBinary>, Error> {
    let Some(arch) = release_arch() else {
        return Err(Error::Assets(format!(
            "no release binaries are published for this machine's architecture ({}); build \
             them instead (`build_if_missing(true)`)",
            std::env::consts::ARCH
        )));
    };
    if std::env::consts::OS != "linux" {
        return Err(Error::Assets(format!(
            "release binaries are downloaded for Linux only, not {}",
            std::env::consts::OS
        )));
    }
    let bin = root.join("bin");
    std::fs::create_dir_all(&bin).map_err(|source| Error::Io {
        context: format!("creating {}", bin.display()),
        source,
    })?;
    // The lock file lives in the cache directory the files go to.
    let lock_cache = Cache {
        root: root.to_path_buf(),
        release: release.unwrap_or(DEFAULT_RELEASE),
    };
    let _lock = tokio::task::spawn_blocking(move || BuildLock::acquire(&lock_cache))
        .await
        .map_err(|e| Error::Build(format!("locking the cache failed: {e}")))?
        .map_err(|e| Error::Build(format!("{e:#}")))?;
    // Another process may have fetched (or built) them while this one waited.
    let again = {
        let (binaries, root, build_cache) =
            (binaries.to_vec(), root.to_path_buf(), build_cache.cloned());
        tokio::task::spawn_blocking(move || cached(&binaries, &root, build_cache.as_ref()))
            .await
            .map_err(|e| Error::Build(format!("checking the cache failed: {e}")))?
    };
    let shared = download::client()?;
    let mut out = Vec::new();
    for &b in binaries {
        if let Some(o) = again.iter().find(|o| o.name == b.file_name()) {
            out.push(o.clone());
            continue;
        }
        let dest = Cache::binary_in(root, b);
        let t0 = Instant::now();
        let (url, checksum_url) = if b == Binary::Etcd {
            let etcd = release
                .expect("etcd is downloadable only with a release")
                .etcd;
            let base = inputs.etcd_url.trim_end_matches('/');
            let archive_name = format!("etcd-{etcd}-linux-{arch}.tar.gz");
            let url = format!("{base}/{etcd}/{archive_name}");
            let checksum_url = format!("{base}/{etcd}/SHA256SUMS");
            let client = download::client_for(&url, &shared)?;
            eprintln!("kctrl-testenv: downloading {url}");
            let digest =
                download::fetch_checksum(&client, &checksum_url, Some(&archive_name)).await?;
            let archive = root.join("downloads").join(&archive_name);
            std::fs::create_dir_all(archive.parent().expect("has a parent")).map_err(|source| {
                Error::Io {
                    context: format!("creating {}", root.join("downloads").display()),
                    source,
                }
            })?;
            download::download_verified(&client, &url, &digest, &archive, 0o644).await?;
            let member = format!("etcd-{etcd}-linux-{arch}/etcd");
            let (a, d) = (archive.clone(), dest.clone());
            let extracted =
                tokio::task::spawn_blocking(move || download::extract_member(&a, &member, &d))
                    .await
                    .map_err(|e| Error::Build(format!("extracting etcd failed: {e}")))?;
            let _ = std::fs::remove_file(&archive);
            extracted?;
            (url, checksum_url)
        } else {
            let base = inputs.kubernetes_url.trim_end_matches('/');
            let url = format!("{base}/{version}/bin/linux/{arch}/{}", b.file_name());
            let checksum_url = format!("{url}.sha256");
            let client = download::client_for(&url, &shared)?;
            eprintln!("kctrl-testenv: downloading {url}");
            let digest = download::fetch_checksum(&client, &checksum_url, None).await?;
            download::download_verified(&client, &url, &digest, &dest, 0o755).await?;
            (url, checksum_url)
        };
        let d = dest.clone();
        let sha256 = tokio::task::spawn_blocking(move || download::sha256_file(&d))
            .await
            .map_err(|e| Error::Build(format!("hashing failed: {e}")))?
            .map_err(|source| Error::Io {
                context: format!("reading {}", dest.display()),
                source,
            })?;
        let record = Record {
            url: url.clone(),
            checksum_url,
            sha256: sha256.clone(),
            downloaded_at: toolchain::utc_now_rfc3339(),
        };
        record.write(&dest)?;
        tracing::info!(binary = b.file_name(), %url, %sha256, elapsed = ?t0.elapsed(), "downloaded");
        eprintln!(
            "kctrl-testenv: {} downloaded and verified in {} (sha256 {sha256})",
            b.file_name(),
            toolchain::fmt_duration(t0.elapsed())
        );
        out.push(ResolvedBinary {
            name: b.file_name(),
            path: dest,
            source: BinarySource::Downloaded { url, sha256 },
        });
    }
    Ok(out)
}

/// The error for binaries no source had, naming every way to provide them.
fn missing_error(
    inputs: &Inputs,
    version: &str,
    release: Option<&'static Release>,
    missing: &[Binary],
) -> Error {
    let names = missing
        .iter()
        .map(|b| b.file_name())
        .collect::<Vec<_>>()
        .join(", ");
    let mut looked = Vec::new();
    if let Some((dir, from)) = &inputs.assets {
        looked.push(format!("{} ({from})", dir.display()));
    }
    looked.push(
        inputs
            .cache_base
            .join(format!("k8s-{version}"))
            .display()
            .to_string(),
    );
    match release.filter(|r| r.kubernetes == version) {
        Some(r) => Error::NotBuilt {
            release: r.kubernetes.to_owned(),
            cache: Cache::under(&inputs.cache_base, r).root,
            missing: names,
            looked_in: looked.join(", "),
        },
        None => Error::Assets(format!(
            "Kubernetes {version} (the version of the kube-apiserver given) lacks {names}, and \
             kctrl builds no {version} (looked in: {}); put {names} beside kube-apiserver (or \
             name each with {TEST_ASSET_ENV_PREFIX}<NAME>){}",
            looked.join(", "),
            if missing.contains(&Binary::Kwok) {
                format!(
                    ", or use kube-apiserver binaries of a release kctrl builds ({}), which KWOK \
                     needs",
                    RELEASES
                        .iter()
                        .map(|r| r.kubernetes)
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            } else if inputs.download {
                String::new()
            } else {
                format!(
                    ", or allow downloading the release binaries with {DOWNLOAD_ENV}=1 or \
                     `TestEnv::builder().download(true)`"
                )
            }
        )),
    }
}

/// Numbers the link directories this process makes.
static NEXT_LINK_DIR: AtomicU32 = AtomicU32::new(0);

/// The directory the plane runs its binaries from: the cache directory itself when every
/// binary is there under its own name (as `bin/<name>`), else a directory of symlinks under
/// `<cache base>/testenv-bins/<hash of the targets>/` (kept: tiny, shared by every
/// environment with the same binaries, and what the plane recognises its processes by).
fn binary_root(
    origins: &[ResolvedBinary],
    cache_base: &Path,
    kwok_share: Option<PathBuf>,
) -> Result<PathBuf, Error> {
    // `<root>/bin/<name>` for each binary, under its own name: a file of another name (a
    // `TEST_ASSET_*` naming `/x/bin/etcd-3.6`) is reached only through a link.
    let roots: Vec<Option<&Path>> = origins
        .iter()
        .map(|o| {
            if o.path.file_name()? != o.name {
                return None;
            }
            let bin = o.path.parent()?;
            (bin.file_name()? == "bin").then_some(bin.parent()?)
        })
        .collect();
    if let Some(Some(first)) = roots.first()
        && roots.iter().all(|r| *r == Some(*first))
        && kwok_share
            .as_ref()
            .is_none_or(|s| s.parent() == Some(*first))
    {
        return Ok(first.to_path_buf());
    }
    let mut links: Vec<(PathBuf, PathBuf)> = origins
        .iter()
        .map(|o| (PathBuf::from("bin").join(o.name), o.path.clone()))
        .collect();
    if let Some(share) = kwok_share {
        links.push((PathBuf::from("share"), share));
    }
    links.sort();
    let mut key = String::new();
    for (link, target) in &links {
        key.push_str(&format!("{}={}\n", link.display(), target.display()));
    }
    let parent = cache_base.join("testenv-bins");
    let dir = parent.join(format!("{:016x}", fnv1a(key.as_bytes())));
    let matches = |dir: &Path| {
        links
            .iter()
            .all(|(link, target)| std::fs::read_link(dir.join(link)).ok().as_ref() == Some(target))
    };
    if matches(&dir) {
        return Ok(dir);
    }
    let io = |context: String| move |source: std::io::Error| Error::Io { context, source };
    let tmp = parent.join(format!(
        ".{}-{}-{}.tmp",
        dir.file_name().expect("named").to_string_lossy(),
        std::process::id(),
        NEXT_LINK_DIR.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(tmp.join("bin")).map_err(io(format!("creating {}", tmp.display())))?;
    for (link, target) in &links {
        symlink(target, tmp.join(link)).map_err(io(format!(
            "linking {} to {}",
            tmp.join(link).display(),
            target.display()
        )))?;
    }
    match std::fs::rename(&tmp, &dir) {
        Ok(()) => {
            prune_dangling(&parent, &dir);
            Ok(dir)
        }
        Err(e) => {
            let _ = std::fs::remove_dir_all(&tmp);
            // Another environment made the same directory first.
            if matches(&dir) {
                Ok(dir)
            } else {
                Err(Error::Io {
                    context: format!("creating {}", dir.display()),
                    source: e,
                })
            }
        }
    }
}

/// Removes the link directories under `parent` (but `keep`) with a link that points nowhere any
/// more (its assets directory was removed, as a test's temporary one is): no plane can run
/// from them, so nothing is lost, and they would otherwise pile up.
fn prune_dangling(parent: &Path, keep: &Path) {
    let Ok(entries) = std::fs::read_dir(parent) else {
        return;
    };
    for entry in entries.flatten() {
        let dir = entry.path();
        if dir == keep || entry.file_name().to_string_lossy().starts_with('.') {
            continue;
        }
        let dangling = ["bin", "share"].iter().any(|sub| {
            let sub = dir.join(sub);
            let mut links: Vec<PathBuf> = std::fs::read_dir(&sub)
                .map(|es| es.flatten().map(|e| e.path()).collect())
                .unwrap_or_default();
            if sub.is_symlink() {
                links.push(sub);
            }
            links.iter().any(|l| std::fs::metadata(l).is_err())
        });
        if dangling {
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
}

fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

#[cfg(test)]
mod tests;

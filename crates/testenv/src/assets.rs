//! Where the control-plane binaries of an environment come from, in order of preference:
//!
//! 1. a binary named by `TEST_ASSET_<NAME>` (controller-runtime envtest's per-binary
//!    override), else the directory `$KUBEBUILDER_ASSETS`, else the one given to
//!    [`TestEnvBuilder::binary_assets`] (setup-envtest's layout: `etcd`, `kube-apiserver`,
//!    `kubectl` directly in it), for the binaries they hold;
//! 2. the version-keyed cache (`~/.cache/kctrl/k8s-<version>`): a build of kctrl's, or a
//!    download recorded there whose SHA-256 still matches and whose record names the URL and
//!    version that would be downloaded now;
//! 3. a download of the official release binaries, verified against the published checksums,
//!    when allowed ([`TestEnvBuilder::download`], `$KCTRL_TESTENV_DOWNLOAD`) and the version
//!    is a published release;
//! 4. a build from upstream's Go modules, when allowed ([`TestEnvBuilder::build_if_missing`]),
//!    also after a failed download.
//!
//! When kube-apiserver comes from step 1, its `--version` decides the Kubernetes version of
//! the whole plane; otherwise the release asked for (or the default) does.

use std::io::Read;
use std::ops::RangeInclusive;
use std::os::unix::fs::symlink;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc;
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

/// `$name` when it is set. Set but empty is an error (`what` says what it should name): as in
/// controller-runtime's envtest, a set `TEST_ASSET_*` or `KUBEBUILDER_ASSETS` wins over every
/// later source, so an empty one is a mistake to report, not a variable to skip.
fn env_set(name: &str, what: &str) -> Result<Option<String>, Error> {
    match std::env::var_os(name) {
        None => Ok(None),
        Some(v) if v.to_string_lossy().trim().is_empty() => Err(Error::Assets(format!(
            "${name} is set but empty: point it at {what}, or unset it"
        ))),
        Some(v) => Ok(Some(v.to_string_lossy().into_owned())),
    }
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
        let mut overrides = Vec::new();
        for b in wanted.iter().filter(|b| **b != Binary::Kwok) {
            let var = override_variable(*b);
            let what = format!("the {} binary", b.file_name());
            if let Some(p) = env_set(&var, &what)? {
                overrides.push((*b, var, PathBuf::from(p)));
            }
        }
        let assets_what = "a directory holding etcd, kube-apiserver and kubectl \
                           (setup-envtest's layout)";
        let assets = match env_set(KUBEBUILDER_ASSETS_ENV, assets_what)? {
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

/// Parses `Kubernetes v1.34.1` (what `kube-apiserver --version` prints). What follows
/// `v1.<minor>.<patch>` may only be a pre-release or build suffix of `[0-9A-Za-z.+-]`
/// (`-rc.1`, `-dirty`, `+k3s1`): the version names cache directories and URLs.
pub(crate) fn parse_version(output: &str) -> Option<KubeVersion> {
    let text = output
        .split_whitespace()
        .find(|w| w.starts_with("v1.") || w.starts_with("v2."))?;
    if !text
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'+' | b'-'))
    {
        return None;
    }
    let mut parts = text.trim_start_matches('v').splitn(3, '.');
    let major: u32 = parts.next()?.parse().ok()?;
    let minor: u32 = parts.next()?.parse().ok()?;
    let patch = parts.next()?;
    let digits: String = patch.chars().take_while(char::is_ascii_digit).collect();
    let suffix = &patch[digits.len()..];
    let suffix_ok = suffix.is_empty() || suffix.starts_with(['-', '+']);
    (major == 1 && !digits.is_empty() && suffix_ok).then(|| KubeVersion {
        text: text.to_owned(),
        minor,
    })
}

/// Whether `version` looks like a release Kubernetes publishes binaries of: `v1.N.M` or
/// `v1.N.M-alpha.K` / `-beta.K` / `-rc.K`. A local build's `-dirty` or a distribution's
/// `+k3s1` is not one.
pub(crate) fn is_published_release(version: &str) -> bool {
    let numeric = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let Some(rest) = version.strip_prefix("v1.") else {
        return false;
    };
    let (core, pre) = match rest.split_once('-') {
        Some((core, pre)) => (core, Some(pre)),
        None => (rest, None),
    };
    let core_ok = core
        .split_once('.')
        .is_some_and(|(minor, patch)| numeric(minor) && numeric(patch));
    let pre_ok = pre.is_none_or(|pre| {
        pre.split_once('.')
            .is_some_and(|(kind, n)| matches!(kind, "alpha" | "beta" | "rc") && numeric(n))
    });
    core_ok && pre_ok
}

/// How much of `--version`'s output is kept (the rest is read and dropped).
const MAX_VERSION_OUTPUT: usize = 64 * 1024;

/// Reads `pipe` to its end on a thread of its own (so that a child printing more than a pipe
/// holds never blocks), keeping the last [`MAX_VERSION_OUTPUT`] bytes (a wrapper's chatter
/// comes before the version).
fn read_in_background(pipe: Option<impl Read + Send + 'static>) -> mpsc::Receiver<Vec<u8>> {
    let (tx, rx) = mpsc::channel();
    match pipe {
        Some(mut pipe) => {
            std::thread::spawn(move || {
                let mut kept = Vec::new();
                let mut buf = [0u8; 8192];
                loop {
                    match pipe.read(&mut buf) {
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                        Ok(0) | Err(_) => break,
                        Ok(n) => {
                            kept.extend_from_slice(&buf[..n]);
                            if kept.len() > 2 * MAX_VERSION_OUTPUT {
                                kept.drain(..kept.len() - MAX_VERSION_OUTPUT);
                            }
                        }
                    }
                }
                if kept.len() > MAX_VERSION_OUTPUT {
                    kept.drain(..kept.len() - MAX_VERSION_OUTPUT);
                }
                let _ = tx.send(kept);
            });
        }
        None => {
            let _ = tx.send(Vec::new());
        }
    }
    rx
}

/// The end of `text`, at most 300 characters of it, for an error message.
fn tail(text: &str) -> String {
    let chars = text.chars().count();
    if chars <= 300 {
        text.to_owned()
    } else {
        format!("…{}", text.chars().skip(chars - 300).collect::<String>())
    }
}

/// Runs `<binary> --version` and parses it.
fn binary_version(binary: &Path) -> Result<KubeVersion, Error> {
    binary_version_within(binary, VERSION_TIMEOUT)
}

/// [`binary_version`] with `timeout` instead of [`VERSION_TIMEOUT`]. The binary runs in a
/// process group of its own, its output is read while it runs, and on timeout the whole
/// group is killed (a wrapper script's children too).
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
        .process_group(0)
        .spawn()
        .map_err(|e| failed(format!("running it failed: {e}")))?;
    let pgid = child.id();
    let stdout = read_in_background(child.stdout.take());
    let stderr = read_in_background(child.stderr.take());
    let t0 = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if t0.elapsed() > timeout => {
                kctrl_cluster::process::signal_group(pgid, "KILL");
                let _ = child.kill();
                let _ = child.wait();
                return Err(failed(format!(
                    "`--version` did not answer within {timeout:?}"
                )));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => {
                kctrl_cluster::process::signal_group(pgid, "KILL");
                let _ = child.kill();
                let _ = child.wait();
                return Err(failed(e.to_string()));
            }
        }
    };
    // The pipes close when the last process holding them ends; one the binary left behind
    // (still in its group) is killed rather than waited for.
    let collect = |rx: &mpsc::Receiver<Vec<u8>>| {
        rx.recv_timeout(Duration::from_secs(2)).or_else(|_| {
            kctrl_cluster::process::signal_group(pgid, "KILL");
            rx.recv_timeout(Duration::from_secs(2))
        })
    };
    let out = collect(&stdout).unwrap_or_default();
    let err = collect(&stderr).unwrap_or_default();
    let text = String::from_utf8_lossy(&out);
    if !status.success() {
        return Err(failed(format!(
            "`--version` exited with {status}: {}",
            tail(String::from_utf8_lossy(&err).trim())
        )));
    }
    parse_version(&text).ok_or_else(|| {
        failed(format!(
            "`--version` printed {:?}, not `Kubernetes v1.<minor>.<patch>`",
            tail(text.trim())
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
    let plan = DownloadPlan {
        kubernetes_url: inputs.kubernetes_url.clone(),
        etcd_url: inputs.etcd_url.clone(),
        version: version.clone(),
        etcd: release.map(|r| r.etcd),
        arch: release_arch(),
    };
    if !missing.is_empty() {
        let cached = {
            let (missing, download_root, build_cache, plan) = (
                missing.clone(),
                download_root.clone(),
                build_cache.clone(),
                plan.clone(),
            );
            tokio::task::spawn_blocking(move || {
                cached(&missing, &download_root, build_cache.as_ref(), &plan)
            })
            .await
            .map_err(|e| Error::Build(format!("checking the cache failed: {e}")))?
        };
        for o in cached {
            missing.retain(|b| b.file_name() != o.name);
            origins.push(o);
        }
    }
    // Kubernetes' binaries only of a published release (not `-dirty`, `+k3s1`); etcd's
    // archive (of the version the release pins) and never KWOK.
    let published = is_published_release(&version);
    let downloadable = |b: &Binary| match b {
        Binary::Kwok => false,
        Binary::Etcd => release.is_some(),
        _ => published,
    };
    let can_build = inputs.build && build_cache.is_some();
    if !missing.is_empty() && inputs.download {
        if !published {
            tracing::info!(%version, "not a published release; its binaries are not downloaded");
        }
        let to_fetch: Vec<Binary> = missing.iter().copied().filter(downloadable).collect();
        if !to_fetch.is_empty() {
            let mut fetched = Vec::new();
            let outcome = download_all(
                &plan,
                release,
                &download_root,
                build_cache.as_ref(),
                &to_fetch,
                &mut fetched,
            )
            .await;
            for o in fetched {
                missing.retain(|b| b.file_name() != o.name);
                origins.push(o);
            }
            match outcome {
                Ok(()) => {}
                // The build is allowed: it provides what the download did not.
                Err(e) if can_build => {
                    tracing::warn!(error = %e, "the download failed; building instead");
                    eprintln!("kctrl-testenv: {e}; building instead (build_if_missing)");
                }
                Err(e) => return Err(e),
            }
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
    plan: &DownloadPlan,
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
        // Only a download of what would be downloaded now (same mirror, version, archive).
        let from_download = || {
            let path = Cache::binary_in(download_root, b);
            let expected = plan.of(b)?.source;
            download::recorded(&path, &expected).map(|record| ResolvedBinary {
                name: b.file_name(),
                path,
                source: BinarySource::Downloaded {
                    url: record.source.url,
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

/// Where the binaries of one version would be downloaded from, as the inputs say now.
#[derive(Clone, Debug)]
pub(crate) struct DownloadPlan {
    kubernetes_url: String,
    etcd_url: String,
    /// The Kubernetes version.
    version: String,
    /// etcd's version (of the release), if known.
    etcd: Option<&'static str>,
    /// The architecture in release file names.
    arch: Option<&'static str>,
}

/// One file to download: the URLs to fetch (with any user-info, for the request only), what
/// is recorded of it, and for etcd the member of the archive that is the binary.
struct Fetch {
    url: String,
    checksum_url: String,
    source: download::Source,
    member: Option<String>,
}

impl DownloadPlan {
    /// The download of `binary`, if it can be downloaded at all (KWOK cannot; etcd only for a
    /// release kctrl knows; nothing without a release architecture).
    fn of(&self, binary: Binary) -> Option<Fetch> {
        let arch = self.arch?;
        match binary {
            Binary::Kwok => None,
            Binary::Etcd => {
                let etcd = self.etcd?;
                let base = self.etcd_url.trim_end_matches('/');
                let archive = format!("etcd-{etcd}-linux-{arch}.tar.gz");
                let url = format!("{base}/{etcd}/{archive}");
                let checksum_url = format!("{base}/{etcd}/SHA256SUMS");
                Some(Fetch {
                    source: download::Source {
                        url: download::without_userinfo(&url),
                        checksum_url: download::without_userinfo(&checksum_url),
                        version: etcd.to_owned(),
                        archive: Some(archive),
                    },
                    url,
                    checksum_url,
                    member: Some(format!("etcd-{etcd}-linux-{arch}/etcd")),
                })
            }
            _ => {
                let base = self.kubernetes_url.trim_end_matches('/');
                let url = format!(
                    "{base}/{}/bin/linux/{arch}/{}",
                    self.version,
                    binary.file_name()
                );
                let checksum_url = format!("{url}.sha256");
                Some(Fetch {
                    source: download::Source {
                        url: download::without_userinfo(&url),
                        checksum_url: download::without_userinfo(&checksum_url),
                        version: self.version.clone(),
                        archive: None,
                    },
                    url,
                    checksum_url,
                    member: None,
                })
            }
        }
    }
}

/// Warns (once per host: `warned` holds those warned about) that a download over plain HTTP
/// from another machine is verified only against a checksum that came over the same
/// unauthenticated connection. Whether it warned.
fn warn_if_plain_http(url: &str, warned: &mut Vec<String>) -> bool {
    let shown = download::without_userinfo(url);
    if !shown.starts_with("http://") || download::is_loopback(url) {
        return false;
    }
    let host = shown["http://".len()..]
        .split(['/', '?', '#'])
        .next()
        .unwrap_or_default()
        .to_owned();
    if warned.contains(&host) {
        return false;
    }
    tracing::warn!(%host, "downloading over plain HTTP: the checksum is no protection against tampering");
    eprintln!(
        "kctrl-testenv: warning: downloading from http://{host} over plain HTTP; the checksum \
         comes over the same unauthenticated connection, so it detects corruption but not \
         tampering (use an https:// mirror)"
    );
    warned.push(host);
    true
}

/// Downloads `binaries` into `root/bin` under the cache's build lock (so that parallel test
/// binaries download each file once), adding each one that arrived to `out` (also when a later
/// one fails).
async fn download_all(
    plan: &DownloadPlan,
    release: Option<&'static Release>,
    root: &Path,
    build_cache: Option<&Cache>,
    binaries: &[Binary],
    out: &mut Vec<ResolvedBinary>,
) -> Result<(), Error> {
    if plan.arch.is_none() {
        return Err(Error::Assets(format!(
            "no release binaries are published for this machine's architecture ({}); build \
             them instead (`build_if_missing(true)`)",
            std::env::consts::ARCH
        )));
    }
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
        let (binaries, root, build_cache, plan) = (
            binaries.to_vec(),
            root.to_path_buf(),
            build_cache.cloned(),
            plan.clone(),
        );
        tokio::task::spawn_blocking(move || cached(&binaries, &root, build_cache.as_ref(), &plan))
            .await
            .map_err(|e| Error::Build(format!("checking the cache failed: {e}")))?
    };
    let shared = download::client()?;
    let mut warned = Vec::new();
    for &b in binaries {
        if let Some(o) = again.iter().find(|o| o.name == b.file_name()) {
            out.push(o.clone());
            continue;
        }
        let Some(fetch) = plan.of(b) else {
            continue;
        };
        let dest = Cache::binary_in(root, b);
        let t0 = Instant::now();
        let shown = fetch.source.url.clone();
        let client = download::client_for(&fetch.url, &shared)?;
        warn_if_plain_http(&fetch.url, &mut warned);
        eprintln!("kctrl-testenv: downloading {shown}");
        match (&fetch.source.archive, &fetch.member) {
            (Some(archive_name), Some(member)) => {
                let digest =
                    download::fetch_checksum(&client, &fetch.checksum_url, Some(archive_name))
                        .await?;
                let downloads = root.join("downloads");
                std::fs::create_dir_all(&downloads).map_err(|source| Error::Io {
                    context: format!("creating {}", downloads.display()),
                    source,
                })?;
                let archive = downloads.join(archive_name);
                download::download_verified(&client, &fetch.url, &digest, &archive, 0o644).await?;
                let (a, d, m) = (archive.clone(), dest.clone(), member.clone());
                let extracted =
                    tokio::task::spawn_blocking(move || download::extract_member(&a, &m, &d))
                        .await
                        .map_err(|e| Error::Build(format!("extracting etcd failed: {e}")))?;
                let _ = std::fs::remove_file(&archive);
                extracted?;
            }
            _ => {
                let digest = download::fetch_checksum(&client, &fetch.checksum_url, None).await?;
                download::download_verified(&client, &fetch.url, &digest, &dest, 0o755).await?;
            }
        }
        let d = dest.clone();
        let sha256 = tokio::task::spawn_blocking(move || download::sha256_file(&d))
            .await
            .map_err(|e| Error::Build(format!("hashing failed: {e}")))?
            .map_err(|source| Error::Io {
                context: format!("reading {}", dest.display()),
                source,
            })?;
        let record = Record {
            source: fetch.source,
            sha256: sha256.clone(),
            downloaded_at: toolchain::utc_now_rfc3339(),
        };
        record.write(&dest)?;
        tracing::info!(binary = b.file_name(), url = %shown, %sha256, elapsed = ?t0.elapsed(), "downloaded");
        eprintln!(
            "kctrl-testenv: {} downloaded and verified in {} (sha256 {sha256})",
            b.file_name(),
            toolchain::fmt_duration(t0.elapsed())
        );
        out.push(ResolvedBinary {
            name: b.file_name(),
            path: dest,
            source: BinarySource::Downloaded { url: shown, sha256 },
        });
    }
    Ok(())
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
    if let Some(r) = release
        && r.kubernetes != version
    {
        // The pinned patch's build of the same minor, which would be used.
        looked.push(
            Cache::under(&inputs.cache_base, r)
                .root
                .display()
                .to_string(),
        );
    }
    let downloading = if missing.contains(&Binary::Kwok) {
        "kwok is never downloaded (it publishes no checksums)".to_owned()
    } else if !is_published_release(version) {
        format!("{version} is not a published release, so its binaries cannot be downloaded")
    } else if inputs.download {
        String::new()
    } else {
        format!(
            "allow downloading the {version} release binaries with {DOWNLOAD_ENV}=1 or \
             `TestEnv::builder().download(true)`"
        )
    };
    match release {
        Some(r) if r.kubernetes == version => Error::NotBuilt {
            release: r.kubernetes.to_owned(),
            cache: Cache::under(&inputs.cache_base, r).root,
            missing: names,
            looked_in: looked.join(", "),
        },
        // Another patch of a minor kctrl builds: the pinned patch's build fills in.
        Some(r) => Error::Assets(format!(
            "Kubernetes {version} (the version of the kube-apiserver given) lacks {names} \
             (looked in: {}). Any one of these provides them: put {names} beside \
             kube-apiserver (or name each with {TEST_ASSET_ENV_PREFIX}<NAME>); {}use kctrl's \
             build of {pinned}, the patch of 1.{minor} kctrl pins, by building it once with \
             `cargo xtask cluster build --kube-version {pinned}` in a kctrl checkout (set \
             KCTRL_CACHE_DIR if the cache lives elsewhere than {base}) or by letting the \
             environment build it with `TestEnv::builder().build_if_missing(true)`",
            looked.join(", "),
            if downloading.is_empty() {
                String::new()
            } else {
                format!("{downloading}; ")
            },
            pinned = r.kubernetes,
            minor = r.minor,
            base = inputs.cache_base.display(),
        )),
        None => Error::Assets(format!(
            "Kubernetes {version} (the version of the kube-apiserver given) lacks {names}, and \
             kctrl builds no release of its minor (looked in: {}); put {names} beside \
             kube-apiserver (or name each with {TEST_ASSET_ENV_PREFIX}<NAME>){}",
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
            } else if downloading.is_empty() {
                String::new()
            } else {
                format!("; {downloading}")
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
    let dir = parent.join(format!("{:016x}", kctrl_client::sharding::hash_field(&key)));
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

#[cfg(test)]
mod tests;

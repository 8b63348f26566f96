//! Where the binaries of a release are cached ([`Cache`]) and the lock that serialises builds
//! into one cache ([`BuildLock`]).

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result, anyhow};

use super::fmt_duration;
use crate::versions::{
    Binary, E2E_TEST_BINARY, KWOK_STAGE_FILES, RELEASES, Release, e2e_test_recipe,
};

/// The cache of the binaries of one release.
#[derive(Clone, Debug)]
pub struct Cache {
    /// `~/.cache/kctrl/k8s-<version>`, e.g. `~/.cache/kctrl/k8s-v1.37.2`.
    pub root: PathBuf,
    /// The release whose binaries it holds.
    pub release: &'static Release,
}

impl Cache {
    /// The cache of `release`: `k8s-<version>` below the cache base (`$KCTRL_CACHE_DIR`, else
    /// `$XDG_CACHE_HOME/kctrl`, else `~/.cache/kctrl`).
    pub fn locate(release: &'static Release) -> Result<Cache> {
        Ok(Cache::under(&Cache::base()?, release))
    }

    /// The caches of every supported release (e.g. to list them, or to recognise processes
    /// started from any of them).
    pub fn all() -> Result<Vec<Cache>> {
        let base = Cache::base()?;
        Ok(RELEASES.iter().map(|r| Cache::under(&base, r)).collect())
    }

    /// The cache of `release` inside `base`: the directory name is the cache key, so each
    /// release builds into its own directory.
    pub fn under(base: &Path, release: &'static Release) -> Cache {
        Cache {
            root: base.join(format!("k8s-{}", release.kubernetes)),
            release,
        }
    }

    /// `$KCTRL_CACHE_DIR`, else `$XDG_CACHE_HOME/kctrl`, else `$HOME/.cache/kctrl`.
    pub(super) fn base() -> Result<PathBuf> {
        Ok(if let Some(dir) = std::env::var_os("KCTRL_CACHE_DIR") {
            PathBuf::from(dir)
        } else if let Some(dir) = std::env::var_os("XDG_CACHE_HOME").filter(|d| !d.is_empty()) {
            PathBuf::from(dir).join("kctrl")
        } else {
            let home = std::env::var_os("HOME").ok_or_else(|| {
                anyhow!("neither KCTRL_CACHE_DIR, XDG_CACHE_HOME nor HOME is set")
            })?;
            PathBuf::from(home).join(".cache").join("kctrl")
        })
    }

    /// Directory holding the binaries.
    pub fn bin_dir(&self) -> PathBuf {
        self.root.join("bin")
    }

    /// Path of one binary.
    pub fn binary(&self, binary: Binary) -> PathBuf {
        Cache::binary_in(&self.root, binary)
    }

    /// Path of one binary in the cache directory `root` (of whichever release).
    pub fn binary_in(root: &Path, binary: Binary) -> PathBuf {
        root.join("bin").join(binary.file_name())
    }

    /// KWOK stage files, in the order of [`KWOK_STAGE_FILES`].
    pub fn kwok_stage_files(&self) -> Vec<PathBuf> {
        let dir = self.root.join("share").join("kwok-stages");
        KWOK_STAGE_FILES
            .iter()
            .map(|f| dir.join(Path::new(f).file_name().expect("stage file has a name")))
            .collect()
    }

    pub(super) fn recipe_file(&self, binary: Binary) -> PathBuf {
        self.recipe_file_of(binary.file_name())
    }

    pub(super) fn recipe_file_of(&self, file_name: &str) -> PathBuf {
        self.bin_dir().join(format!(".{file_name}.recipe"))
    }

    /// Upstream's e2e test binary (`cargo xtask conformance`; not part of the control plane, so
    /// not in [`Cache::missing`]).
    pub fn e2e_test(&self) -> PathBuf {
        self.bin_dir().join(E2E_TEST_BINARY)
    }

    /// Whether [`Cache::e2e_test`] is present and was built from the current recipe.
    pub fn e2e_test_is_built(&self) -> bool {
        fs::read_to_string(self.recipe_file_of(E2E_TEST_BINARY))
            .is_ok_and(|r| r.trim() == e2e_test_recipe(self.release))
            && self.e2e_test().is_file()
    }

    pub(super) fn log_dir(&self) -> PathBuf {
        self.root.join("logs")
    }

    /// Whether `binary` is present and was built from the current recipe.
    pub fn is_built(&self, binary: Binary) -> bool {
        let recipe_ok = fs::read_to_string(self.recipe_file(binary))
            .map(|r| r.trim() == binary.recipe(self.release))
            .unwrap_or(false);
        let extra_ok =
            binary != Binary::Kwok || self.kwok_stage_files().iter().all(|f| f.is_file());
        recipe_ok && extra_ok && self.binary(binary).is_file()
    }

    /// Binaries that still have to be built.
    pub fn missing(&self) -> Vec<Binary> {
        Binary::ALL
            .into_iter()
            .filter(|b| !self.is_built(*b))
            .collect()
    }

    /// Total size of the cache directory in bytes (binaries, wrappers, logs).
    pub fn size_bytes(&self) -> u64 {
        dir_size(&self.root)
    }
}

fn dir_size(path: &Path) -> u64 {
    let Ok(meta) = fs::symlink_metadata(path) else {
        return 0;
    };
    if meta.is_dir() {
        fs::read_dir(path)
            .map(|rd| rd.flatten().map(|e| dir_size(&e.path())).sum())
            .unwrap_or(0)
    } else {
        meta.len()
    }
}

/// An exclusive lock on `<cache>/.build.lock`, held while building into the cache, so that
/// concurrent xtask commands (e.g. `cluster up` in one terminal and `conformance` in another)
/// build once: the second waits, then finds the binaries built. Released on drop (and by the
/// kernel if the process dies).
pub struct BuildLock {
    _file: fs::File,
}

impl BuildLock {
    /// Takes the lock, waiting (and saying so) while another process holds it.
    pub fn acquire(cache: &Cache) -> Result<BuildLock> {
        fs::create_dir_all(&cache.root)
            .with_context(|| format!("creating {}", cache.root.display()))?;
        let path = cache.root.join(".build.lock");
        let file = fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .with_context(|| format!("opening {}", path.display()))?;
        match file.try_lock() {
            Ok(()) => {}
            Err(fs::TryLockError::WouldBlock) => {
                eprintln!(
                    "another process is building into {}; waiting for it to finish",
                    cache.root.display()
                );
                let waited = Instant::now();
                file.lock()
                    .with_context(|| format!("locking {}", path.display()))?;
                eprintln!("  … it finished after {}", fmt_duration(waited.elapsed()));
            }
            Err(fs::TryLockError::Error(e)) => {
                return Err(e).with_context(|| format!("locking {}", path.display()));
            }
        }
        Ok(BuildLock { _file: file })
    }
}

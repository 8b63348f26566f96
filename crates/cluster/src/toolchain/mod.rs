//! Building the control-plane binaries from the Go module proxy into a version-keyed cache
//! outside the repository (`~/.cache/kctrl/k8s-<version>/`, one directory per supported
//! release, so releases coexist and switching between them rebuilds nothing).
//!
//! Layout of a release's cache directory:
//! * `src/<wrapper>/go.mod`, `go.sum`: generated wrapper modules (see `versions.rs`);
//! * `bin/<binary>` plus `bin/.<binary>.recipe` (what it was built from; a mismatch rebuilds);
//! * `share/kwok-stages/*.yaml`: KWOK stage files taken from the downloaded kwok module;
//! * `logs/build-<binary>.log`, `logs/tidy-<wrapper>.log`, `build-times.txt`.

use std::collections::VecDeque;
use std::ffi::OsString;
use std::fs;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use crate::versions::{
    Binary, E2E_TEST_BINARY, KWOK_STAGE_FILES, Release, Wrapper, e2e_test_build_args,
    e2e_test_recipe,
};

/// How often a long-running Go command reports progress.
const PROGRESS_EVERY: Duration = Duration::from_secs(20);

mod cache;

pub use cache::{BuildLock, Cache};

/// The Go toolchain found on this machine.
struct Go {
    program: OsString,
    version: String,
    nice: Option<PathBuf>,
}

/// Finds `go` (or `$KCTRL_GO`) and checks it can build `release` (Go >= 1.`go_min_minor`).
fn find_go(release: &Release) -> Result<Go> {
    let program = std::env::var_os("KCTRL_GO").unwrap_or_else(|| OsString::from("go"));
    let min = release.go_min_minor;
    let install_hint = format!(
        "building the local cluster (Kubernetes {}) needs the Go toolchain (Go >= 1.{min}) and \
         access to the Go module proxy: install Go from https://go.dev/dl/ (or a distribution \
         package of Go 1.{min}+), put `go` on PATH (or set KCTRL_GO=/path/to/go), then re-run",
        release.kubernetes
    );
    let output = match Command::new(&program)
        .args(["env", "GOVERSION"])
        .env("GOTOOLCHAIN", "local")
        .output()
    {
        Ok(o) => o,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            bail!(
                "the Go toolchain was not found ({:?} is not on PATH): {install_hint}",
                program
            )
        }
        Err(e) => return Err(e).with_context(|| format!("running {program:?} env GOVERSION")),
    };
    if !output.status.success() {
        bail!(
            "`{} env GOVERSION` failed: {}\n{install_hint}",
            program.to_string_lossy(),
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    let version = String::from_utf8_lossy(&output.stdout).trim().to_owned();
    if let Some(minor) = go_minor(&version)
        && minor < min
    {
        bail!("found {version}, which is too old: {install_hint}");
    }
    Ok(Go {
        program,
        version,
        nice: which("nice"),
    })
}

/// `go1.26.8` -> 26; `None` for development builds.
fn go_minor(version: &str) -> Option<u32> {
    let rest = version.strip_prefix("go1.")?;
    rest.split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

/// Looks `name` up on PATH.
pub fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

impl Go {
    /// A `go` command run at low priority (`nice -n 10`, the machines are shared), with the
    /// settings every build here needs.
    fn command(&self, dir: &Path, no_sumdb: &[String]) -> Command {
        let mut cmd = match &self.nice {
            Some(nice) => {
                let mut c = Command::new(nice);
                c.arg("-n").arg("10").arg(&self.program);
                c
            }
            None => Command::new(&self.program),
        };
        cmd.current_dir(dir)
            // Never download another toolchain because of a `go`/`toolchain` line.
            .env("GOTOOLCHAIN", "local")
            // Upstream builds these statically.
            .env("CGO_ENABLED", "0");
        if !no_sumdb.is_empty() {
            let mut value = std::env::var("GONOSUMDB").unwrap_or_default();
            for m in no_sumdb {
                if !value.is_empty() {
                    value.push(',');
                }
                value.push_str(m);
            }
            cmd.env("GONOSUMDB", value);
        }
        cmd
    }

    fn env(&self, name: &str) -> String {
        Command::new(&self.program)
            .args(["env", name])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
            .unwrap_or_default()
    }
}

/// Outcome of a Go command run with progress reporting.
struct RunOutcome {
    success: bool,
    tail: Vec<String>,
}

/// Runs `cmd`, teeing its output into `log`, printing `label` progress every
/// [`PROGRESS_EVERY`] (with the number of output lines, i.e. packages for `go build -v`).
fn run_with_progress(
    mut cmd: Command,
    log: &Path,
    label: &str,
    unit: &str,
    started_all: Instant,
) -> Result<RunOutcome> {
    let log_file = Arc::new(Mutex::new(
        fs::File::create(log).with_context(|| format!("creating {}", log.display()))?,
    ));
    writeln!(log_file.lock().expect("log lock"), "$ {cmd:?}")?;
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting {cmd:?}"))?;
    let lines = Arc::new(Mutex::new((0usize, VecDeque::<String>::new())));
    let mut readers = Vec::new();
    let pipes: [Box<dyn Read + Send>; 2] = [
        Box::new(child.stdout.take().expect("piped stdout")),
        Box::new(child.stderr.take().expect("piped stderr")),
    ];
    for pipe in pipes {
        let (log_file, lines) = (Arc::clone(&log_file), Arc::clone(&lines));
        readers.push(thread::spawn(move || {
            for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                let _ = writeln!(log_file.lock().expect("log lock"), "{line}");
                let mut l = lines.lock().expect("lines lock");
                l.0 += 1;
                l.1.push_back(line);
                if l.1.len() > 25 {
                    l.1.pop_front();
                }
            }
        }));
    }
    let started = Instant::now();
    let mut last_report = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if last_report.elapsed() >= PROGRESS_EVERY {
            last_report = Instant::now();
            let count = lines.lock().expect("lines lock").0;
            eprintln!(
                "    … {label}: {} elapsed, {count} {unit} so far (total {})",
                fmt_duration(started.elapsed()),
                fmt_duration(started_all.elapsed())
            );
        }
        thread::sleep(Duration::from_millis(250));
    };
    for r in readers {
        let _ = r.join();
    }
    let tail = lines
        .lock()
        .expect("lines lock")
        .1
        .iter()
        .cloned()
        .collect();
    Ok(RunOutcome {
        success: status.success(),
        tail,
    })
}

/// `1h02m03s` / `4m05s` / `6.7s`.
pub fn fmt_duration(d: Duration) -> String {
    let secs = d.as_secs();
    if secs >= 3600 {
        format!("{}h{:02}m{:02}s", secs / 3600, secs / 60 % 60, secs % 60)
    } else if secs >= 60 {
        format!("{}m{:02}s", secs / 60, secs % 60)
    } else {
        format!("{:.1}s", d.as_secs_f64())
    }
}

/// A module whose checksum-database lookup answered "not found" (the proxy serves a version
/// the checksum database mirror does not list yet), parsed from `go` output such as
/// `verifying module: k8s.io/kubernetes@v1.36.5: reading https://…/lookup/…: 404 Not Found`.
/// Checksum *mismatches* (`SECURITY ERROR`) are never matched.
fn unlisted_in_sumdb(line: &str) -> Option<String> {
    if !line.contains("/lookup/") || !(line.contains("404") || line.contains("410")) {
        return None;
    }
    ["verifying module: ", "verifying go.mod: "]
        .iter()
        .find_map(|marker| {
            let rest = &line[line.find(marker)? + marker.len()..];
            let module = &rest[..rest.find('@')?];
            (!module.is_empty()).then(|| module.to_owned())
        })
}

/// Writes the wrapper's go.mod and resolves it (`go mod tidy`, which needs the module proxy).
/// Returns the modules excluded from checksum-database verification (see
/// [`unlisted_in_sumdb`]); they are remembered in `.gonosumdb` next to the go.mod.
fn prepare_wrapper(
    go: &Go,
    cache: &Cache,
    wrapper: Wrapper,
    started_all: Instant,
) -> Result<Vec<String>> {
    let dir = cache.root.join("src").join(wrapper.dir_name());
    fs::create_dir_all(&dir)?;
    let go_mod = wrapper.go_mod(cache.release);
    let files = wrapper.files(cache.release);
    // What the resolution depends on: the go.mod and the generated sources (their imports).
    let mut inputs = go_mod.clone();
    for (name, text) in &files {
        inputs.push_str(&format!("\n// {name}\n{text}"));
    }
    let go_mod_path = dir.join("go.mod");
    let go_sum_path = dir.join("go.sum");
    let no_sumdb_path = dir.join(".gonosumdb");
    let mut no_sumdb: Vec<String> = fs::read_to_string(&no_sumdb_path)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .filter(|l| !l.is_empty())
        .collect();
    let resolved_marker = dir.join(".resolved");
    if fs::read_to_string(&resolved_marker).ok().as_deref() == Some(inputs.as_str())
        && go_sum_path.is_file()
    {
        return Ok(no_sumdb);
    }
    fs::write(&go_mod_path, &go_mod)?;
    for (name, text) in &files {
        fs::write(dir.join(name), text)?;
    }
    let _ = fs::remove_file(&go_sum_path);
    let (module, version) = wrapper.upstream(cache.release);
    let log = cache
        .log_dir()
        .join(format!("tidy-{}.log", wrapper.dir_name()));
    for _ in 0..5 {
        eprintln!(
            "  resolving {module}@{version} (go mod tidy; downloads modules on a cold cache)"
        );
        let mut cmd = go.command(&dir, &no_sumdb);
        cmd.args(["mod", "tidy"]);
        let outcome = run_with_progress(
            cmd,
            &log,
            &format!("go mod tidy ({module})"),
            "lines",
            started_all,
        )?;
        if outcome.success {
            fs::write(&no_sumdb_path, no_sumdb.join("\n"))?;
            fs::write(&resolved_marker, &inputs)?;
            return Ok(no_sumdb);
        }
        let mut new: Vec<String> = outcome
            .tail
            .iter()
            .filter_map(|l| unlisted_in_sumdb(l))
            .filter(|m| !no_sumdb.contains(m))
            .collect();
        new.sort();
        new.dedup();
        if new.is_empty() {
            bail!(
                "could not fetch the Go modules for {module}@{version} (GOPROXY={}, GOSUMDB={}).\n\
                 The build needs the Go module proxy (https://proxy.golang.org or a mirror set in \
                 GOPROXY) and Go >= 1.{}; check network access and GOPROXY/GOFLAGS.\n\
                 Last output:\n  {}\nFull log: {}",
                go.env("GOPROXY"),
                go.env("GOSUMDB"),
                cache.release.go_min_minor,
                outcome.tail.join("\n  "),
                log.display()
            );
        }
        for m in new {
            eprintln!(
                "  warning: the checksum database (GOSUMDB={}) does not list {m} at the pinned \
                 version (lookup answered 404); retrying with GONOSUMDB={m} (the module still \
                 comes from GOPROXY over TLS and go.sum pins it from now on)",
                go.env("GOSUMDB")
            );
            no_sumdb.push(m);
        }
    }
    bail!(
        "go mod tidy for {module} kept failing; see {}",
        log.display()
    )
}

/// Copies the KWOK stage files out of the downloaded kwok module.
fn install_kwok_stages(go: &Go, cache: &Cache, no_sumdb: &[String]) -> Result<()> {
    let dir = cache.root.join("src").join(Wrapper::Kwok.dir_name());
    let (module, _) = Wrapper::Kwok.upstream(cache.release);
    let out = go
        .command(&dir, no_sumdb)
        .args(["list", "-m", "-f", "{{.Dir}}", module])
        .output()
        .context("go list -m sigs.k8s.io/kwok")?;
    if !out.status.success() {
        bail!(
            "go list -m {module} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let module_dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    for (rel, dest) in KWOK_STAGE_FILES.iter().zip(cache.kwok_stage_files()) {
        fs::create_dir_all(dest.parent().expect("stage dir"))?;
        fs::copy(module_dir.join(rel), &dest)
            .with_context(|| format!("copying {rel} from {}", module_dir.display()))?;
    }
    Ok(())
}

/// Builds whatever is missing from the cache. Prints progress on stderr. Returns the per-binary
/// build times (empty when everything was cached).
pub fn ensure_built(cache: &Cache) -> Result<Vec<(Binary, Duration)>> {
    ensure_built_only(cache, &Binary::ALL)
}

/// [`ensure_built`] for the binaries in `wanted` only: those of them that are missing from the
/// cache are built, the others are left as they are (a test environment that found the rest
/// elsewhere builds only what it still lacks, e.g. KWOK).
pub fn ensure_built_only(cache: &Cache, wanted: &[Binary]) -> Result<Vec<(Binary, Duration)>> {
    let missing_wanted = || -> Vec<Binary> {
        cache
            .missing()
            .into_iter()
            .filter(|b| wanted.contains(b))
            .collect()
    };
    if missing_wanted().is_empty() {
        return Ok(Vec::new());
    }
    let _lock = BuildLock::acquire(cache)?;
    // Another process may have built them while we waited.
    let missing = missing_wanted();
    if missing.is_empty() {
        return Ok(Vec::new());
    }
    let go = find_go(cache.release)?;
    fs::create_dir_all(cache.bin_dir())?;
    fs::create_dir_all(cache.log_dir())?;
    let started_all = Instant::now();
    let release = cache.release;
    eprintln!(
        "building the local control plane (Kubernetes {}, etcd {}, kwok {}) with {} into {}",
        release.kubernetes,
        release.etcd,
        release.kwok,
        go.version,
        cache.root.display()
    );
    eprintln!(
        "  to build: {} — a cold build takes tens of minutes on 2 cores; later runs reuse the cache",
        missing
            .iter()
            .map(|b| b.file_name())
            .collect::<Vec<_>>()
            .join(", ")
    );
    let build_date = utc_now_rfc3339();
    let mut times = Vec::new();
    let mut prepared: Vec<(Wrapper, Vec<String>)> = Vec::new();
    for binary in missing {
        let wrapper = binary.wrapper();
        let no_sumdb = match prepared.iter().find(|(w, _)| *w == wrapper) {
            Some((_, n)) => n.clone(),
            None => {
                let n = prepare_wrapper(&go, cache, wrapper, started_all)?;
                prepared.push((wrapper, n.clone()));
                n
            }
        };
        let started = Instant::now();
        let name = binary.file_name();
        eprintln!(
            "  [{}] building {name} ({})",
            fmt_duration(started_all.elapsed()),
            binary.package()
        );
        let tmp = cache.bin_dir().join(format!(".{name}.tmp"));
        let log = cache.log_dir().join(format!("build-{name}.log"));
        let mut cmd = go.command(&cache.root.join("src").join(wrapper.dir_name()), &no_sumdb);
        cmd.args(["build", "-v", "-trimpath"]);
        if !binary.build_tags().is_empty() {
            cmd.args(["-tags", binary.build_tags()]);
        }
        cmd.arg("-ldflags")
            .arg(binary.ldflags(release, &build_date))
            .arg("-o")
            .arg(&tmp)
            .arg(binary.package());
        let outcome = run_with_progress(cmd, &log, name, "packages compiled", started_all)?;
        if !outcome.success {
            bail!(
                "building {name} failed.\nLast output:\n  {}\nFull log: {}",
                outcome.tail.join("\n  "),
                log.display()
            );
        }
        fs::rename(&tmp, cache.binary(binary))?;
        if binary == Binary::Kwok {
            install_kwok_stages(&go, cache, &no_sumdb)?;
        }
        fs::write(cache.recipe_file(binary), binary.recipe(release))?;
        let took = started.elapsed();
        eprintln!(
            "  [{}] built {name} in {}",
            fmt_duration(started_all.elapsed()),
            fmt_duration(took)
        );
        let mut record = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(cache.root.join("build-times.txt"))?;
        writeln!(
            record,
            "{build_date} {name} {:.0}s {}",
            took.as_secs_f64(),
            go.version
        )?;
        times.push((binary, took));
    }
    eprintln!(
        "built {} binaries in {} (cache: {}, {:.1} GiB incl. wrappers/logs; Go's own caches are \
         GOMODCACHE={} and GOCACHE={})",
        times.len(),
        fmt_duration(started_all.elapsed()),
        cache.root.display(),
        cache.size_bytes() as f64 / (1u64 << 30) as f64,
        go.env("GOMODCACHE"),
        go.env("GOCACHE"),
    );
    Ok(times)
}

/// Builds upstream's e2e test binary (`go test -c` in the [`Wrapper::E2e`] module) unless the
/// cache holds one from the current recipe. Returns its path and, if it was built now, how
/// long that took. The control plane's packages are shared through GOCACHE, so this is much
/// faster after `cargo xtask cluster build`.
pub fn ensure_e2e_test_built(cache: &Cache) -> Result<(PathBuf, Option<Duration>)> {
    if cache.e2e_test_is_built() {
        return Ok((cache.e2e_test(), None));
    }
    let _lock = BuildLock::acquire(cache)?;
    if cache.e2e_test_is_built() {
        return Ok((cache.e2e_test(), None));
    }
    let go = find_go(cache.release)?;
    fs::create_dir_all(cache.bin_dir())?;
    fs::create_dir_all(cache.log_dir())?;
    let started = Instant::now();
    eprintln!(
        "building upstream's e2e test binary ({E2E_TEST_BINARY}, Kubernetes {}) with {} into \
         {} — minutes on 2 cores; later runs reuse it",
        cache.release.kubernetes,
        go.version,
        cache.bin_dir().display()
    );
    let no_sumdb = prepare_wrapper(&go, cache, Wrapper::E2e, started)?;
    let build_date = utc_now_rfc3339();
    let tmp = cache.bin_dir().join(format!(".{E2E_TEST_BINARY}.tmp"));
    let log = cache.log_dir().join(format!("build-{E2E_TEST_BINARY}.log"));
    let mut cmd = go.command(
        &cache.root.join("src").join(Wrapper::E2e.dir_name()),
        &no_sumdb,
    );
    cmd.args(e2e_test_build_args(cache.release, &build_date))
        .arg("-o")
        .arg(&tmp)
        .arg(".");
    let outcome = run_with_progress(cmd, &log, E2E_TEST_BINARY, "output lines", started)?;
    if !outcome.success {
        bail!(
            "building {E2E_TEST_BINARY} failed.\nLast output:\n  {}\nFull log: {}",
            outcome.tail.join("\n  "),
            log.display()
        );
    }
    fs::rename(&tmp, cache.e2e_test())?;
    fs::write(
        cache.recipe_file_of(E2E_TEST_BINARY),
        e2e_test_recipe(cache.release),
    )?;
    let took = started.elapsed();
    eprintln!("  built {E2E_TEST_BINARY} in {}", fmt_duration(took));
    let mut record = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(cache.root.join("build-times.txt"))?;
    writeln!(
        record,
        "{build_date} {E2E_TEST_BINARY} {:.0}s {}",
        took.as_secs_f64(),
        go.version
    )?;
    Ok((cache.e2e_test(), Some(took)))
}

/// Current UTC time as `YYYY-MM-DDTHH:MM:SSZ` (RFC 3339, whole seconds).
pub fn utc_now_rfc3339() -> String {
    format!("{:.0}", jiff::Timestamp::now())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::versions::RELEASES;

    #[test]
    fn the_build_lock_is_exclusive_and_released_on_drop() {
        let root = std::env::temp_dir().join(format!("kctrl-build-lock-{}", std::process::id()));
        let cache = Cache {
            root: root.clone(),
            release: crate::versions::DEFAULT_RELEASE,
        };
        let held = BuildLock::acquire(&cache).unwrap();
        let other = fs::OpenOptions::new()
            .write(true)
            .open(root.join(".build.lock"))
            .unwrap();
        assert!(matches!(
            other.try_lock(),
            Err(fs::TryLockError::WouldBlock)
        ));
        drop(held);
        other.try_lock().unwrap();
        other.unlock().unwrap();
        let again = BuildLock::acquire(&cache).unwrap();
        drop(again);
        fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn each_release_has_its_own_cache_and_sees_only_its_own_builds() {
        let base = std::env::temp_dir().join(format!("kctrl-cache-keys-{}", std::process::id()));
        let caches: Vec<Cache> = RELEASES.iter().map(|r| Cache::under(&base, r)).collect();
        assert_eq!(caches[0].root, base.join("k8s-v1.37.2"));
        assert_eq!(caches[1].root, base.join("k8s-v1.36.5"));
        let (new, old) = (&caches[0], &caches[1]);
        // What a complete build of one release leaves behind.
        let fake_build = |cache: &Cache, recipes_of: &Release| {
            fs::create_dir_all(cache.bin_dir()).unwrap();
            for b in Binary::ALL {
                fs::write(cache.binary(b), b"binary").unwrap();
                fs::write(cache.recipe_file(b), b.recipe(recipes_of)).unwrap();
            }
            fs::write(cache.e2e_test(), b"binary").unwrap();
            fs::write(
                cache.recipe_file_of(E2E_TEST_BINARY),
                e2e_test_recipe(recipes_of),
            )
            .unwrap();
        };
        fake_build(old, old.release);
        assert_eq!(
            old.missing(),
            [Binary::Kwok],
            "KWOK's stage files are part of it"
        );
        for f in old.kwok_stage_files() {
            fs::create_dir_all(f.parent().unwrap()).unwrap();
            fs::write(f, b"stage").unwrap();
        }
        assert!(old.missing().is_empty());
        assert!(old.e2e_test_is_built());
        // The other release's cache is untouched: switching to it builds it, and switching
        // back finds the first one still complete.
        assert_eq!(new.missing(), Binary::ALL);
        assert!(!new.e2e_test_is_built());
        // Binaries recorded with the other release's recipes do not count either (KWOK, the
        // same version in both, would, but its stage files are missing here).
        fake_build(new, old.release);
        assert_eq!(new.missing(), Binary::ALL);
        assert!(!new.e2e_test_is_built());
        fake_build(new, new.release);
        assert_eq!(new.missing(), [Binary::Kwok]);
        assert!(new.e2e_test_is_built());
        assert!(old.missing().is_empty() && old.e2e_test_is_built());
        fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn parses_go_minor() {
        assert_eq!(go_minor("go1.26.8"), Some(26));
        assert_eq!(go_minor("go1.27rc1"), Some(27));
        assert_eq!(go_minor("devel go1.28-abc"), None);
    }

    #[test]
    fn detects_modules_missing_from_the_checksum_database() {
        let line = "go: k8s.io/kubernetes/cmd/kube-apiserver: k8s.io/kubernetes@v1.36.5: verifying \
                    module: k8s.io/kubernetes@v1.36.5: reading https://proxy.golang.org/sumdb/\
                    sum.golang.org/lookup/k8s.io/kubernetes@v1.36.5: 404 Not Found";
        assert_eq!(
            unlisted_in_sumdb(line).as_deref(),
            Some("k8s.io/kubernetes")
        );
        let mismatch = "verifying k8s.io/api@v0.36.5: checksum mismatch\nSECURITY ERROR";
        assert_eq!(unlisted_in_sumdb(mismatch), None);
        assert_eq!(
            unlisted_in_sumdb("go: downloading k8s.io/api v0.36.5"),
            None
        );
    }

    #[test]
    fn formats_durations() {
        assert_eq!(fmt_duration(Duration::from_millis(6_700)), "6.7s");
        assert_eq!(fmt_duration(Duration::from_secs(245)), "4m05s");
        assert_eq!(fmt_duration(Duration::from_secs(3723)), "1h02m03s");
    }

    #[test]
    fn utc_timestamp_shape() {
        let now = utc_now_rfc3339();
        assert_eq!(now.len(), 20, "{now}");
        assert!(now.ends_with('Z') && now.as_bytes()[10] == b'T', "{now}");
        let read: jiff::Timestamp = now.parse().unwrap();
        let behind = jiff::Timestamp::now().duration_since(read);
        assert!(
            behind >= jiff::SignedDuration::ZERO && behind < jiff::SignedDuration::from_secs(5),
            "{now} is {behind:?} behind"
        );
    }
}

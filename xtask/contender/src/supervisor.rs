//! The one supervisor of the Deployment controllers xtask runs, ours and upstream's alike: build,
//! start, wait for synced, stop, kill, detach.
//!
//! The process runs in its own process group (see [`kctrl_cluster::process::spawn`]), so a
//! Ctrl-C in the terminal does not reach it directly; [`ControllerProcess::stop`] stops it
//! gracefully (SIGTERM, then SIGKILL after [`STOP_GRACE`]) and dropping a [`ControllerProcess`]
//! kills it.

use std::fs;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use kctrl_cluster::process::{self, ProcRecord};

use crate::Contender;

/// Cargo package of the binary.
const PACKAGE: &str = "kctrl-deployment-controller";
/// Name of the binary target.
const BINARY: &str = "deployment-controller";
/// What the controller logs once its informer caches are synced (`kctrl_informer`'s
/// `wait_for_cache_sync`, as client-go's `cache.WaitForNamedCacheSync`).
pub const SYNCED_MARKER: &str = "Caches are synced for";
/// How long `start` waits for the caches to sync.
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// Grace period between SIGTERM and SIGKILL when a Deployment controller is stopped (by
/// [`ControllerProcess::stop`] and by [`crate::fresh::stop_leftovers`]).
pub const STOP_GRACE: Duration = Duration::from_secs(15);
/// Lines of the log shown in error messages.
pub const TAIL_LINES: usize = 30;

/// Builds the deployment-controller binary (`cargo build -p kctrl-deployment-controller`) and
/// returns its path.
pub fn build() -> Result<PathBuf> {
    build_profile(None)
}

/// Builds the deployment-controller binary as shipped (`cargo build --profile dist`: release
/// with whole-program optimisation, as deploy/Containerfile builds it), as benchmarks run it,
/// and returns its path.
pub fn build_dist() -> Result<PathBuf> {
    build_profile(Some("dist"))
}

/// `cargo build` of the binary in `profile` (`None`: the dev profile).
fn build_profile(profile: Option<&str>) -> Result<PathBuf> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let profile: Vec<&str> = profile.map_or_else(Vec::new, |p| vec!["--profile", p]);
    eprintln!(
        "==> cargo build {}-p {PACKAGE} --bin {BINARY}",
        profile.iter().map(|a| format!("{a} ")).collect::<String>()
    );
    let mut command = Command::new(&cargo);
    for (key, _) in std::env::vars_os() {
        if key.to_str().is_some_and(set_by_cargo_run) {
            command.env_remove(&key);
        }
    }
    let out = command
        .arg("build")
        .args(&profile)
        .args([
            "-p",
            PACKAGE,
            "--bin",
            BINARY,
            "--message-format=json-render-diagnostics",
        ])
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .with_context(|| format!("running {cargo} build -p {PACKAGE}"))?;
    if !out.status.success() {
        bail!("cargo build -p {PACKAGE} failed ({})", out.status);
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    executable_from_messages(&stdout).with_context(|| {
        format!("cargo build -p {PACKAGE} succeeded but reported no `{BINARY}` executable")
    })
}

/// Whether `key` is one of the variables `cargo run` sets for the xtask process that a build
/// script may declare it depends on (ring's does, for `CARGO_MANIFEST_DIR`, `CARGO_PKG_*` and
/// `OUT_DIR`): passed on to the build, they would make cargo rebuild such a crate and
/// everything above it whenever the same binary was last built from a shell, and the other
/// way round (for the `dist` profile, half an hour on 2 cores).
fn set_by_cargo_run(key: &str) -> bool {
    key.starts_with("CARGO_PKG_")
        || key.starts_with("CARGO_MANIFEST_")
        || key.starts_with("CARGO_BIN_")
        || matches!(
            key,
            "OUT_DIR" | "CARGO_CRATE_NAME" | "CARGO_PRIMARY_PACKAGE"
        )
}

/// The path of the `deployment-controller` executable in cargo's JSON messages.
fn executable_from_messages(messages: &str) -> Option<PathBuf> {
    messages
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|m| m["reason"] == "compiler-artifact" && m["target"]["name"] == BINARY)
        .filter_map(|m| m["executable"].as_str().map(PathBuf::from))
        .next_back()
}

/// A running deployment-controller started by [`start`].
pub struct ControllerProcess {
    /// `None` once stopped (so `Drop` has nothing left to do).
    child: Option<Child>,
    record: ProcRecord,
    log: PathBuf,
    pid_file: PathBuf,
    /// Whose caches [`ControllerProcess::synced`] looks for.
    contender: Contender,
    /// The process in stop and kill messages (`the deployment-controller`, `ours`...).
    label: String,
    /// Just before the spawn.
    spawned: Instant,
    /// Size of the log before the spawn: what an earlier run appended is not read.
    log_offset: u64,
}

/// Starts `binary --kubeconfig <kubeconfig> <extra_args…>`, stdout and stderr appended to `log`,
/// and waits until it logs that its caches are synced. On failure (early exit, timeout) the
/// process is killed and the error names the log and shows its tail.
pub fn start(
    binary: &Path,
    kubeconfig: &Path,
    log: &Path,
    extra_args: &[&str],
) -> Result<ControllerProcess> {
    start_with_env(binary, kubeconfig, log, extra_args, &[])
}

/// [`start`] with extra environment variables (e.g. `RUST_LOG`).
pub fn start_with_env(
    binary: &Path,
    kubeconfig: &Path,
    log: &Path,
    extra_args: &[&str],
    env: &[(&str, &str)],
) -> Result<ControllerProcess> {
    let mut args = vec!["--kubeconfig".to_owned(), kubeconfig.display().to_string()];
    args.extend(extra_args.iter().map(|a| (*a).to_owned()));
    start_process(
        binary,
        args,
        env,
        log,
        "deployment-controller",
        Contender::Ours,
    )
}

/// Starts upstream's Deployment controller against `info`'s cluster: a second
/// kube-controller-manager (`kcm`, the cluster's cached build) running only
/// `--controllers=deployment-controller`, without leader election, as the
/// `kube-system:deployment-controller` ServiceAccount, serving on a free loopback port. Waits
/// until its Deployment controller's caches are synced. The cluster's own
/// kube-controller-manager must run without its Deployment controller.
pub fn start_upstream(
    kcm: &Path,
    info: &kctrl_cluster::plane::ClusterInfo,
    log: &Path,
) -> Result<ControllerProcess> {
    let port = crate::probe::free_port()?;
    let mut args = upstream_args(&info.controller_manager_kubeconfig());
    args.extend([
        "--leader-elect=false".to_owned(),
        "--bind-address=127.0.0.1".to_owned(),
        format!("--secure-port={port}"),
    ]);
    start_process(
        kcm,
        args,
        &[],
        log,
        "kube-controller-manager (deployment-controller only)",
        Contender::Upstream,
    )
}

/// The `--authorization-always-allow-paths` of the controllers the benchmarks and fault runs
/// start, ours and kube-controller-manager alike: their health and metrics are read without
/// a token (both would otherwise answer an anonymous `/metrics` with 403).
pub const ALWAYS_ALLOW_PATHS: &str = "/healthz,/readyz,/livez,/metrics";

/// kube-controller-manager's arguments to run only its Deployment controller, as its own
/// ServiceAccount, with `kubeconfig` (the cluster's kube-controller-manager kubeconfig).
pub fn upstream_args(kubeconfig: &Path) -> Vec<String> {
    let kc = kubeconfig.display();
    vec![
        format!("--kubeconfig={kc}"),
        format!("--authentication-kubeconfig={kc}"),
        format!("--authorization-kubeconfig={kc}"),
        format!("--authorization-always-allow-paths={ALWAYS_ALLOW_PATHS}"),
        "--controllers=deployment-controller".to_owned(),
        "--use-service-account-credentials=true".to_owned(),
        "--profiling=false".to_owned(),
    ]
}

/// Spawns `binary args…` with extra environment `env` (logging to `log`, pid file beside it)
/// and waits until the `contender`'s caches are synced by what it logged since; `what` names it
/// in messages.
fn start_process(
    binary: &Path,
    args: Vec<String>,
    env: &[(&str, &str)],
    log: &Path,
    what: &str,
    contender: Contender,
) -> Result<ControllerProcess> {
    stop_stale(binary, &log.with_extension("pid"), what)?;
    eprintln!(
        "==> starting {} {} (log: {})",
        binary.display(),
        args.join(" "),
        log.display()
    );
    let mut proc = ControllerProcess::spawn(&Launch {
        binary,
        args: &args,
        env,
        log,
        contender,
        label: "the deployment-controller",
    })?;
    let deadline = Instant::now() + START_TIMEOUT;
    loop {
        if proc.synced() {
            eprintln!("==> {what} is running (pid {})", proc.pid());
            return Ok(proc);
        }
        let exited = proc
            .exited()
            .with_context(|| format!("waiting for the {what}"))?;
        if let Some(status) = exited {
            bail!(
                "the {what} exited ({status}) before its caches synced; log {}:\n{}",
                log.display(),
                process::tail(log, TAIL_LINES)
            );
        }
        if Instant::now() > deadline {
            drop(proc);
            bail!(
                "the {what} did not sync its caches within {START_TIMEOUT:?}; log {}:\n{}",
                log.display(),
                process::tail(log, TAIL_LINES)
            );
        }
        thread::sleep(Duration::from_millis(100));
    }
}

/// What [`ControllerProcess::spawn`] starts.
pub struct Launch<'a> {
    /// The executable (or a wrapper that execs it: `env`, `valgrind`).
    pub binary: &'a Path,
    /// Its arguments.
    pub args: &'a [String],
    /// Extra environment variables.
    pub env: &'a [(&'a str, &'a str)],
    /// Where stdout and stderr are appended; the pid file is beside it (`.pid`).
    pub log: &'a Path,
    /// Whose caches [`ControllerProcess::synced`] looks for.
    pub contender: Contender,
    /// The process in stop and kill messages.
    pub label: &'a str,
}

/// Stops the `binary` an earlier run left running with `pid_file` (xtask killed before it could
/// stop it; the controller has its own process group, so a Ctrl-C does not reach it); `what`
/// names it in the message.
pub fn stop_stale(binary: &Path, pid_file: &Path, what: &str) -> Result<()> {
    if let Some(stale) = process::read_pid_file(pid_file)
        && stale.is_ours_and_running(binary)
    {
        eprintln!(
            "==> stopping a {what} left running by an earlier run (pid {})",
            stale.pid
        );
        process::stop_all(&[stale], &[], STOP_GRACE)?;
    }
    Ok(())
}

/// The log's text from byte `offset` on (empty if unreadable).
pub fn log_since(log: &Path, offset: u64) -> String {
    let mut text = Vec::new();
    if let Ok(mut f) = fs::File::open(log)
        && f.seek(SeekFrom::Start(offset)).is_ok()
    {
        let _ = f.read_to_end(&mut text);
    }
    String::from_utf8_lossy(&text).into_owned()
}

impl ControllerProcess {
    /// Spawns `launch` without waiting for anything (see [`ControllerProcess::synced`] and
    /// [`ControllerProcess::exit_message`]); the pid file is `launch.log` with extension `pid`.
    pub fn spawn(launch: &Launch<'_>) -> Result<ControllerProcess> {
        let log = launch.log;
        if let Some(dir) = log.parent().filter(|d| !d.as_os_str().is_empty()) {
            fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        // Earlier runs may have appended to the same log: look for the marker only after this point.
        let log_offset = fs::metadata(log).map(|m| m.len()).unwrap_or(0);
        let pid_file = log.with_extension("pid");
        let spawned = Instant::now();
        let (child, record) =
            process::spawn_with_env(launch.binary, launch.args, launch.env, log, &pid_file)?;
        Ok(ControllerProcess {
            child: Some(child),
            record,
            log: log.to_path_buf(),
            pid_file,
            contender: launch.contender,
            label: launch.label.to_owned(),
            spawned,
            log_offset,
        })
    }

    /// What it logged since the spawn.
    pub fn log_text(&self) -> String {
        log_since(&self.log, self.log_offset)
    }

    /// Whether its log (since the spawn) says the Deployment controller's caches are synced.
    pub fn synced(&self) -> bool {
        self.contender
            .synced(&log_since(&self.log, self.log_offset))
    }

    /// Just before the spawn.
    pub fn spawned_at(&self) -> Instant {
        self.spawned
    }

    /// Time since just before the spawn.
    pub fn since_spawn(&self) -> Duration {
        self.spawned.elapsed()
    }

    /// `Some(message)` naming the exit status, the log and its tail if it has exited.
    pub fn exit_message(&mut self) -> Option<String> {
        match self.exited() {
            Ok(Some(status)) => Some(format!(
                "{} exited ({status}); log {}:\n{}",
                self.label,
                self.log.display(),
                process::tail(&self.log, TAIL_LINES)
            )),
            _ => None,
        }
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.record.pid
    }

    /// Lets the process outlive xtask: nothing stops it when this is dropped; its record moves
    /// to `pid_file`, where whoever owns that file (e.g. `cluster down`) stops it.
    pub fn detach(mut self, pid_file: &Path) -> Result<ProcRecord> {
        let record = self.record;
        fs::write(pid_file, format!("{} {}\n", record.pid, record.start_time))
            .with_context(|| format!("writing {}", pid_file.display()))?;
        let _ = fs::remove_file(&self.pid_file);
        // Dropping the handle neither kills nor waits: the process runs on, reparented.
        drop(self.child.take());
        Ok(record)
    }

    /// Where the process logs.
    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// Its exit status, if it has exited (without waiting).
    pub fn exited(&mut self) -> Result<Option<std::process::ExitStatus>> {
        match self.child.as_mut() {
            Some(c) => c
                .try_wait()
                .context("checking on the deployment-controller"),
            None => Ok(None),
        }
    }

    /// SIGKILL, as a crash (no graceful shutdown); fails if it had exited before.
    pub fn kill(mut self) -> Result<()> {
        let Some(mut child) = self.child.take() else {
            return Ok(());
        };
        let before = child.try_wait()?;
        let _ = child.kill();
        let _ = child.wait();
        let _ = fs::remove_file(&self.pid_file);
        if let Some(status) = before {
            bail!(
                "{} had exited ({status}) before it was killed; log {}:\n{}",
                self.label,
                self.log.display(),
                process::tail(&self.log, TAIL_LINES)
            );
        }
        Ok(())
    }

    /// SIGTERM, wait up to [`STOP_GRACE`], then SIGKILL; `Ok` if it exited with status 0.
    pub fn stop(self) -> Result<()> {
        let log = self.log.clone();
        let label = self.label.clone();
        let status = self.stop_within(STOP_GRACE)?;
        if !status.success() {
            bail!(
                "{label} exited with {status}; log {}:\n{}",
                log.display(),
                process::tail(&log, TAIL_LINES)
            );
        }
        Ok(())
    }

    /// SIGTERM, wait up to `grace`, then SIGKILL; its exit status, whatever it is, once it is
    /// gone.
    pub fn stop_within(mut self, grace: Duration) -> Result<std::process::ExitStatus> {
        let Some(mut child) = self.child.take() else {
            bail!("{} was stopped before", self.label);
        };
        eprintln!("==> stopping {} (pid {})", self.label, self.record.pid);
        let stopped = if child.try_wait()?.is_none() {
            process::stop_all(&[self.record], &[], grace).map(|_| ())
        } else {
            Ok(())
        };
        let status = child
            .wait()
            .with_context(|| format!("waiting for {}", self.label))?;
        let _ = fs::remove_file(&self.pid_file);
        stopped?;
        Ok(status)
    }
}

impl Drop for ControllerProcess {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            if matches!(child.try_wait(), Ok(None)) {
                let _ = child.kill();
            }
            let _ = child.wait();
            let _ = fs::remove_file(&self.pid_file);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "kctrl-controller-process-{name}-{}",
            std::process::id()
        ));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// A stand-in for the controller: logs its arguments, then `body`.
    fn fake_binary(dir: &Path, body: &str) -> PathBuf {
        let path = dir.join("fake-controller");
        fs::write(&path, format!("#!/bin/sh\necho \"args: $*\"\n{body}\n")).unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
        path
    }

    #[test]
    fn the_variables_of_cargo_run_are_not_passed_to_the_build() {
        for key in [
            "CARGO_MANIFEST_DIR",
            "CARGO_MANIFEST_PATH",
            "CARGO_MANIFEST_LINKS",
            "CARGO_PKG_NAME",
            "CARGO_PKG_VERSION_MAJOR",
            "OUT_DIR",
            "CARGO_CRATE_NAME",
            "CARGO_BIN_NAME",
            "CARGO_PRIMARY_PACKAGE",
        ] {
            assert!(set_by_cargo_run(key), "{key}");
        }
        // The user's settings of cargo itself stay.
        for key in [
            "CARGO",
            "CARGO_HOME",
            "CARGO_TARGET_DIR",
            "CARGO_INCREMENTAL",
            "PATH",
        ] {
            assert!(!set_by_cargo_run(key), "{key}");
        }
    }

    #[test]
    fn executable_is_found_in_cargo_messages() {
        let messages = r#"{"reason":"compiler-artifact","target":{"name":"kctrl_deployment"},"executable":null}
{"reason":"compiler-artifact","target":{"name":"deployment-controller"},"executable":"/t/debug/deployment-controller"}
{"reason":"build-finished","success":true}"#;
        assert_eq!(
            executable_from_messages(messages),
            Some(PathBuf::from("/t/debug/deployment-controller"))
        );
        assert_eq!(executable_from_messages("not json\n"), None);
    }

    #[test]
    fn starts_after_sync_and_stops_gracefully() {
        let dir = scratch("graceful");
        let bin = fake_binary(
            &dir,
            "trap 'echo stopping; exit 0' TERM\necho 'INFO Caches are synced for deployment'\n\
             while :; do sleep 0.1; done",
        );
        let log = dir.join("logs/c.log");
        fs::create_dir_all(log.parent().unwrap()).unwrap();
        fs::write(&log, "Caches are synced for an earlier run\n").unwrap();
        let p = start(&bin, Path::new("/k/admin"), &log, &["--v", "2"]).unwrap();
        assert_eq!(p.log_path(), log);
        assert!(log.with_extension("pid").exists());
        p.stop().unwrap();
        let text = fs::read_to_string(&log).unwrap();
        assert!(text.contains("args: --kubeconfig /k/admin --v 2"), "{text}");
        assert!(text.contains("stopping"), "{text}");
        assert!(!log.with_extension("pid").exists());
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn early_exit_names_the_log() {
        let dir = scratch("early");
        let bin = fake_binary(&dir, "echo 'cannot reach the API server'; exit 1");
        let log = dir.join("c.log");
        let err = start(&bin, Path::new("/k"), &log, &[])
            .err()
            .expect("start must fail")
            .to_string();
        assert!(err.contains("exited"), "{err}");
        assert!(err.contains(&log.display().to_string()), "{err}");
        assert!(err.contains("cannot reach the API server"), "{err}");
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_nonzero_exit_on_stop_is_an_error_and_drop_kills() {
        let dir = scratch("nonzero");
        let bin = fake_binary(
            &dir,
            "trap 'exit 3' TERM\necho 'Caches are synced for deployment'\n\
             while :; do sleep 0.1; done",
        );
        let log = dir.join("c.log");
        let p = start(&bin, Path::new("/k"), &log, &[]).unwrap();
        assert!(p.stop().is_err());
        let p = start(&bin, Path::new("/k"), &log, &[]).unwrap();
        let pid = p.record.pid;
        drop(p);
        assert!(!Path::new(&format!("/proc/{pid}")).exists());
        fs::remove_dir_all(&dir).unwrap();
    }
}

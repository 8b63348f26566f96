//! Our `deployment-controller` binary as a supervised child process of xtask (e2e suite, demo).
//!
//! The process runs in its own process group (see [`kctrl_cluster::process::spawn`]), so a
//! Ctrl-C in the terminal does not reach it directly; [`ControllerProcess::stop`] stops it
//! gracefully (SIGTERM, then SIGKILL after 15 s) and dropping a [`ControllerProcess`] kills it.

use std::fs;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use kctrl_cluster::process::{self, ProcRecord, runs_deployment_controller};

/// Cargo package of the binary.
const PACKAGE: &str = "kctrl-deployment-controller";
/// Name of the binary target.
const BINARY: &str = "deployment-controller";
/// What the controller logs once its informer caches are synced (`kctrl_informer`'s
/// `wait_for_cache_sync`, as client-go's `cache.WaitForNamedCacheSync`).
pub(crate) const SYNCED_MARKER: &str = "Caches are synced for";
/// How long `start` waits for the caches to sync.
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// Grace period between SIGTERM and SIGKILL in `stop`.
const STOP_GRACE: Duration = Duration::from_secs(15);
/// Lines of the log shown in error messages.
const TAIL_LINES: usize = 30;

/// Builds the deployment-controller binary (`cargo build -p kctrl-deployment-controller`) and
/// returns its path.
pub(crate) fn build() -> Result<PathBuf> {
    build_profile(None)
}

/// Builds the deployment-controller binary as shipped (`cargo build --profile dist`: release
/// with whole-program optimisation, as deploy/Containerfile builds it), as benchmarks run it,
/// and returns its path.
pub(crate) fn build_dist() -> Result<PathBuf> {
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
    let out = Command::new(&cargo)
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
pub(crate) struct ControllerProcess {
    /// `None` once stopped (so `Drop` has nothing left to do).
    child: Option<Child>,
    record: ProcRecord,
    log: PathBuf,
    pid_file: PathBuf,
}

/// Starts `binary --kubeconfig <kubeconfig> <extra_args…>`, stdout and stderr appended to `log`,
/// and waits until it logs that its caches are synced. On failure (early exit, timeout) the
/// process is killed and the error names the log and shows its tail.
pub(crate) fn start(
    binary: &Path,
    kubeconfig: &Path,
    log: &Path,
    extra_args: &[&str],
) -> Result<ControllerProcess> {
    start_with_env(binary, kubeconfig, log, extra_args, &[])
}

/// [`start`] with extra environment variables (e.g. `RUST_LOG`).
pub(crate) fn start_with_env(
    binary: &Path,
    kubeconfig: &Path,
    log: &Path,
    extra_args: &[&str],
    env: &[(&str, &str)],
) -> Result<ControllerProcess> {
    let mut args = vec!["--kubeconfig".to_owned(), kubeconfig.display().to_string()];
    args.extend(extra_args.iter().map(|a| (*a).to_owned()));
    start_process(binary, args, env, log, "deployment-controller", &|text| {
        text.contains(SYNCED_MARKER)
    })
}

/// Starts upstream's Deployment controller against `info`'s cluster: a second
/// kube-controller-manager (`kcm`, the cluster's cached build) running only
/// `--controllers=deployment-controller`, without leader election, as the
/// `kube-system:deployment-controller` ServiceAccount, serving on a free loopback port. Waits
/// until its Deployment controller's caches are synced. The cluster's own
/// kube-controller-manager must run without its Deployment controller.
pub(crate) fn start_upstream(
    kcm: &Path,
    info: &kctrl_cluster::plane::ClusterInfo,
    log: &Path,
) -> Result<ControllerProcess> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
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
        &crate::bench::controller::parse::kcm_deployment_synced,
    )
}

/// The `--authorization-always-allow-paths` of the controllers the benchmarks and fault runs
/// start, ours and kube-controller-manager alike: their health and metrics are read without
/// a token (both would otherwise answer an anonymous `/metrics` with 403).
pub(crate) const ALWAYS_ALLOW_PATHS: &str = "/healthz,/readyz,/livez,/metrics";

/// kube-controller-manager's arguments to run only its Deployment controller, as its own
/// ServiceAccount, with `kubeconfig` (the cluster's kube-controller-manager kubeconfig).
pub(crate) fn upstream_args(kubeconfig: &Path) -> Vec<String> {
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
/// and waits until `synced` holds for what it logged since; `what` names it in messages.
fn start_process(
    binary: &Path,
    args: Vec<String>,
    env: &[(&str, &str)],
    log: &Path,
    what: &str,
    synced: &dyn Fn(&str) -> bool,
) -> Result<ControllerProcess> {
    if let Some(dir) = log.parent().filter(|d| !d.as_os_str().is_empty()) {
        fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    // Earlier runs may have appended to the same log: look for the marker only after this point.
    let offset = fs::metadata(log).map(|m| m.len()).unwrap_or(0);
    let pid_file = log.with_extension("pid");
    // A controller left behind by an interrupted run (xtask killed before it could stop it;
    // the controller has its own process group, so a Ctrl-C does not reach it).
    if let Some(stale) = process::read_pid_file(&pid_file)
        && stale.is_ours_and_running(binary)
    {
        eprintln!(
            "==> stopping a {what} left running by an earlier run (pid {})",
            stale.pid
        );
        process::stop_all(&[stale], &[], STOP_GRACE)?;
    }
    eprintln!(
        "==> starting {} {} (log: {})",
        binary.display(),
        args.join(" "),
        log.display()
    );
    let (child, record) = process::spawn_with_env(binary, &args, env, log, &pid_file)?;
    let mut proc = ControllerProcess {
        child: Some(child),
        record,
        log: log.to_path_buf(),
        pid_file,
    };
    let deadline = Instant::now() + START_TIMEOUT;
    loop {
        if synced(&log_since(log, offset)) {
            eprintln!("==> {what} is running (pid {})", record.pid);
            return Ok(proc);
        }
        let exited = proc
            .child
            .as_mut()
            .map(|c| c.try_wait())
            .transpose()
            .with_context(|| format!("waiting for the {what}"))?
            .flatten();
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

/// The log's text from byte `offset` on (empty if unreadable).
pub(crate) fn log_since(log: &Path, offset: u64) -> String {
    let mut text = Vec::new();
    if let Ok(mut f) = fs::File::open(log)
        && f.seek(SeekFrom::Start(offset)).is_ok()
    {
        let _ = f.read_to_end(&mut text);
    }
    String::from_utf8_lossy(&text).into_owned()
}

impl ControllerProcess {
    /// Its process id.
    pub(crate) fn pid(&self) -> u32 {
        self.record.pid
    }

    /// Lets the process outlive xtask: nothing stops it when this is dropped; its record moves
    /// to `pid_file`, where whoever owns that file (e.g. `cluster down`) stops it.
    pub(crate) fn detach(mut self, pid_file: &Path) -> Result<ProcRecord> {
        let record = self.record;
        fs::write(pid_file, format!("{} {}\n", record.pid, record.start_time))
            .with_context(|| format!("writing {}", pid_file.display()))?;
        let _ = fs::remove_file(&self.pid_file);
        // Dropping the handle neither kills nor waits: the process runs on, reparented.
        drop(self.child.take());
        Ok(record)
    }

    /// Where the process logs.
    pub(crate) fn log_path(&self) -> &Path {
        &self.log
    }

    /// Its exit status, if it has exited (without waiting).
    pub(crate) fn exited(&mut self) -> Result<Option<std::process::ExitStatus>> {
        match self.child.as_mut() {
            Some(c) => c
                .try_wait()
                .context("checking on the deployment-controller"),
            None => Ok(None),
        }
    }

    /// SIGKILL, as a crash (no graceful shutdown); fails if it had exited before.
    pub(crate) fn kill(mut self) -> Result<()> {
        let Some(mut child) = self.child.take() else {
            return Ok(());
        };
        let before = child.try_wait()?;
        let _ = child.kill();
        let _ = child.wait();
        let _ = fs::remove_file(&self.pid_file);
        if let Some(status) = before {
            bail!(
                "the deployment-controller had exited ({status}) before it was killed; log {}:\n{}",
                self.log.display(),
                process::tail(&self.log, TAIL_LINES)
            );
        }
        Ok(())
    }

    /// SIGTERM, wait up to 15 s, then SIGKILL; `Ok` if it exited with status 0.
    pub(crate) fn stop(mut self) -> Result<()> {
        let Some(mut child) = self.child.take() else {
            return Ok(());
        };
        eprintln!(
            "==> stopping the deployment-controller (pid {})",
            self.record.pid
        );
        let stopped = if child.try_wait()?.is_none() {
            process::stop_all(&[self.record], &[], STOP_GRACE).map(|_| ())
        } else {
            Ok(())
        };
        let status = child
            .wait()
            .context("waiting for the deployment-controller")?;
        let _ = fs::remove_file(&self.pid_file);
        stopped?;
        if !status.success() {
            bail!(
                "the deployment-controller exited with {status}; log {}:\n{}",
                self.log.display(),
                process::tail(&self.log, TAIL_LINES)
            );
        }
        Ok(())
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

/// Processes that run a Deployment controller against this cluster (their command line names a
/// file of the cluster's directory, e.g. its kubeconfig).
pub(crate) fn deployment_controllers(cluster_dir: &Path) -> Vec<(u32, String)> {
    let marker = cluster_dir.display().to_string();
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    let matched: Vec<(u32, String)> = entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| {
            let args = process::cmdline(pid);
            (args.iter().any(|a| a.contains(&marker)) && runs_deployment_controller(&args))
                .then(|| (pid, args.join(" ")))
        })
        .collect();
    // A child forked by a controller shows the parent's command line until it execs: it is
    // the same controller, not a second one.
    let pids: Vec<u32> = matched.iter().map(|(pid, _)| *pid).collect();
    matched
        .into_iter()
        .filter(|(pid, _)| process::parent(*pid).is_none_or(|p| !pids.contains(&p)))
        .collect()
}

/// A detached `sh` that waits for this xtask process to disappear (Ctrl-C, kill), then stops
/// the controller recorded in `controller_pid_file` (if any) and cluster `cluster`. Callers that
/// finish normally tear down themselves and kill the watcher.
pub(crate) fn spawn_reaper(cluster: &str, controller_pid_file: &Path) -> Result<Child> {
    use std::os::unix::process::CommandExt;
    let exe = std::env::current_exe().context("locating the xtask binary")?;
    Command::new("sh")
        .args([
            "-c",
            &reaper_script(std::process::id(), controller_pid_file, &exe, cluster),
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .process_group(0)
        .spawn()
        .context("starting the clean-up watcher")
}

/// The watcher's shell script (see [`spawn_reaper`]).
fn reaper_script(pid: u32, controller_pid_file: &Path, xtask: &Path, cluster: &str) -> String {
    format!(
        "while kill -0 {pid} 2>/dev/null; do sleep 0.5; done\n\
         if [ -f '{pidf}' ]; then kill \"$(cut -d' ' -f1 '{pidf}')\" 2>/dev/null; fi\n\
         exec '{exe}' cluster down --name '{cluster}'",
        pidf = controller_pid_file.display(),
        exe = xtask.display(),
    )
}

/// Kills a reaper from [`spawn_reaper`] once the caller has torn down itself.
pub(crate) fn dismiss_reaper(reaper: Option<Child>) {
    if let Some(mut r) = reaper {
        let _ = r.kill();
        let _ = r.wait();
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

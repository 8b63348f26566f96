//! Process supervision without `unsafe`: components run detached in their own process group,
//! are recorded in pid files together with their kernel start time, and are stopped by signalling
//! the whole group through `kill(1)`.
//!
//! A pid file is trusted only if `/proc/<pid>` exists, is not a zombie, has the recorded start
//! time (so a recycled pid is not mistaken for ours) and runs the recorded binary. As a safety
//! net for lost pid files, [`find_strays`] scans `/proc` for processes of a known component whose
//! command line refers to the cluster's directory.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

/// A process we started, as recorded in its pid file (`<pid> <starttime>`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProcRecord {
    /// Process id, also the process group id (each component leads its own group).
    pub pid: u32,
    /// Field 22 of `/proc/<pid>/stat` (clock ticks since boot).
    pub start_time: u64,
}

/// Parsed fields of `/proc/<pid>/stat` we care about.
struct Stat {
    state: char,
    ppid: u32,
    pgrp: u32,
    start_time: u64,
}

fn stat(pid: u32) -> Option<Stat> {
    let text = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may contain spaces: split after the last ')'.
    let rest = &text[text.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // `rest` starts at field 3 (state); field N is at index N - 3.
    Some(Stat {
        state: fields.first()?.chars().next()?,
        ppid: fields.get(1)?.parse().ok()?,
        pgrp: fields.get(2)?.parse().ok()?,
        start_time: fields.get(19)?.parse().ok()?,
    })
}

/// The parent of `pid`, if it still runs.
pub fn parent(pid: u32) -> Option<u32> {
    stat(pid).map(|s| s.ppid)
}

/// The command line of `pid` (empty for kernel threads or vanished processes).
pub fn cmdline(pid: u32) -> Vec<String> {
    fs::read(format!("/proc/{pid}/cmdline"))
        .map(|raw| {
            raw.split(|b| *b == 0)
                .filter(|a| !a.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// Whether `pid` is running (exists and is not a zombie).
fn running(pid: u32) -> bool {
    stat(pid).is_some_and(|s| s.state != 'Z' && s.state != 'X')
}

impl ProcRecord {
    /// Whether the recorded process still runs and is the one recorded (same start time:
    /// not another process that got the pid since).
    pub fn is_running(&self) -> bool {
        stat(self.pid).is_some_and(|st| {
            st.state != 'Z' && st.state != 'X' && st.start_time == self.start_time
        })
    }

    /// Whether the recorded process is still the one we started, running `binary`.
    pub fn is_ours_and_running(&self, binary: &Path) -> bool {
        let Some(st) = stat(self.pid) else {
            return false;
        };
        if st.state == 'Z' || st.state == 'X' || st.start_time != self.start_time {
            return false;
        }
        // The binary may have been replaced since (then the link ends in " (deleted)").
        let exe = fs::read_link(format!("/proc/{}/exe", self.pid)).map(|p| {
            p.to_string_lossy()
                .trim_end_matches(" (deleted)")
                .to_owned()
        });
        let expected = fs::canonicalize(binary).unwrap_or_else(|_| binary.to_path_buf());
        match exe {
            Ok(exe) => Path::new(&exe) == expected,
            // Not allowed to read the link (not our process): not ours.
            Err(_) => false,
        }
    }
}

/// Reads a pid file; `None` if it is missing or malformed.
pub fn read_pid_file(path: &Path) -> Option<ProcRecord> {
    let text = fs::read_to_string(path).ok()?;
    let mut it = text.split_whitespace();
    Some(ProcRecord {
        pid: it.next()?.parse().ok()?,
        start_time: it.next()?.parse().ok()?,
    })
}

/// How often [`spawn_with_env`] retries an exec refused with ETXTBSY (10 ms apart).
const EXEC_BUSY_TRIES: u32 = 200;

/// Starts `binary args…` detached in a new process group, stdout and stderr appended to `log`,
/// and writes `pid_file`. The returned [`Child`] lets the caller notice an early exit.
pub fn spawn(
    binary: &Path,
    args: &[String],
    log: &Path,
    pid_file: &Path,
) -> Result<(Child, ProcRecord)> {
    spawn_with_env(binary, args, &[], log, pid_file)
}

/// [`spawn`] with extra environment variables.
pub fn spawn_with_env(
    binary: &Path,
    args: &[String],
    env: &[(&str, &str)],
    log: &Path,
    pid_file: &Path,
) -> Result<(Child, ProcRecord)> {
    use std::os::unix::process::CommandExt;

    let out = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .with_context(|| format!("opening {}", log.display()))?;
    let mut tries = 0;
    let child = loop {
        let err = out.try_clone()?;
        let spawned = Command::new(binary)
            .args(args)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::from(out.try_clone()?))
            .stderr(Stdio::from(err))
            // Own process group: `down` signals the group, and a Ctrl-C in the terminal that ran
            // `up` does not reach the components.
            .process_group(0)
            .spawn();
        match spawned {
            // A file written just before (a build output, a test's script) can be held open for
            // writing by a child that another thread of this process forked in that instant,
            // until that child execs: exec then fails with ETXTBSY. It clears in microseconds.
            Err(e)
                if e.kind() == std::io::ErrorKind::ExecutableFileBusy
                    && tries < EXEC_BUSY_TRIES =>
            {
                tries += 1;
                std::thread::sleep(Duration::from_millis(10));
            }
            other => break other.with_context(|| format!("starting {}", binary.display()))?,
        }
    };
    let pid = child.id();
    let start_time = stat(pid).map(|s| s.start_time).unwrap_or(0);
    let record = ProcRecord { pid, start_time };
    fs::write(pid_file, format!("{pid} {start_time}\n"))?;
    Ok((child, record))
}

/// Sends `signal` (e.g. `TERM`, `KILL`) to process group `pgid`, falling back to the single pid.
pub fn signal_group(pgid: u32, signal: &str) {
    let group = Command::new("kill")
        .args([&format!("-{signal}"), "--", &format!("-{pgid}")])
        .stderr(Stdio::null())
        .status();
    if !group.is_ok_and(|s| s.success()) {
        let _ = Command::new("kill")
            .args([&format!("-{signal}"), "--", &pgid.to_string()])
            .stderr(Stdio::null())
            .status();
    }
}

/// Sends SIGKILL to process group `pgid` (a crash: no chance to clean up) and waits up to 10 s
/// for its leader to be gone.
pub fn kill_group(pgid: u32) -> Result<()> {
    signal_group(pgid, "KILL");
    let deadline = Instant::now() + Duration::from_secs(10);
    while running(pgid) {
        if Instant::now() > deadline {
            bail!("process {pgid} still runs 10 s after SIGKILL");
        }
        thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// Processes of the given component binaries (by file name) whose command line mentions
/// `marker_dir` (the cluster directory): leftovers whose pid file was lost.
pub fn find_strays(component_names: &[&str], marker_dir: &Path) -> Vec<u32> {
    let marker = format!("{}/", marker_dir.display());
    let me = std::process::id();
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| *pid != me && running(*pid))
        .filter(|pid| {
            let args = cmdline(*pid);
            let Some(argv0) = args.first() else {
                return false;
            };
            let base = Path::new(argv0)
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or("");
            component_names.contains(&base) && args.iter().skip(1).any(|a| a.contains(&marker))
        })
        .collect()
}

/// Stops the given process groups and stray pids: TERM, wait up to `grace`, then KILL.
/// Returns an error listing survivors.
pub fn stop_all(groups: &[ProcRecord], strays: &[u32], grace: Duration) -> Result<usize> {
    let mut pids: Vec<u32> = groups
        .iter()
        .map(|r| r.pid)
        .chain(strays.iter().copied())
        .collect();
    pids.sort_unstable();
    pids.dedup();
    // Members of our groups that are not leaders (none of the components fork today, but be
    // thorough): any live process whose pgrp is one of our group ids.
    let group_ids: Vec<u32> = groups.iter().map(|r| r.pid).collect();
    let members = |gids: &[u32]| -> Vec<u32> {
        fs::read_dir("/proc")
            .map(|rd| {
                rd.flatten()
                    .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
                    .filter(|p| stat(*p).is_some_and(|s| gids.contains(&s.pgrp)))
                    .collect()
            })
            .unwrap_or_default()
    };
    pids.extend(members(&group_ids));
    pids.sort_unstable();
    pids.dedup();
    let count = pids.iter().filter(|p| running(**p)).count();
    for g in &group_ids {
        signal_group(*g, "TERM");
    }
    for p in strays {
        signal_group(*p, "TERM");
    }
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline && pids.iter().any(|p| running(*p)) {
        thread::sleep(Duration::from_millis(100));
    }
    let survivors: Vec<u32> = pids.iter().copied().filter(|p| running(*p)).collect();
    for p in &survivors {
        signal_group(*p, "KILL");
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline && pids.iter().any(|p| running(*p)) {
        thread::sleep(Duration::from_millis(100));
    }
    let left: Vec<u32> = pids.iter().copied().filter(|p| running(*p)).collect();
    if !left.is_empty() {
        bail!("processes still running after SIGKILL: {left:?}");
    }
    Ok(count)
}

/// Last `n` lines of a log file, for error messages.
pub fn tail(path: &Path, n: usize) -> String {
    let text = fs::read(path)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// Processes that run a Deployment controller (see [`runs_deployment_controller`]) against the
/// cluster in `cluster_dir` (their command line names a file of that directory, e.g. its
/// kubeconfig), with their command lines.
pub fn deployment_controllers(cluster_dir: &Path) -> Vec<(u32, String)> {
    controllers(cluster_dir, runs_deployment_controller)
}

/// Processes that run a ReplicaSet controller (see [`runs_replicaset_controller`]) against the
/// cluster in `cluster_dir`, as [`deployment_controllers`] finds them.
pub fn replicaset_controllers(cluster_dir: &Path) -> Vec<(u32, String)> {
    controllers(cluster_dir, runs_replicaset_controller)
}

/// Processes that run the controller of `kind` against the cluster in `cluster_dir`.
pub fn controllers_of(cluster_dir: &Path, kind: Workload) -> Vec<(u32, String)> {
    match kind {
        Workload::Deployment => deployment_controllers(cluster_dir),
        Workload::ReplicaSet => replicaset_controllers(cluster_dir),
    }
}

/// The controllers of the workload chain that a process may run: kube-controller-manager's
/// Deployment and ReplicaSet controllers, or ours.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Workload {
    /// `deployment-controller` (alias `deployment`).
    Deployment,
    /// `replicaset-controller` (alias `replicaset`).
    ReplicaSet,
}

/// Whether a command line runs the controller of `kind` (see [`runs_deployment_controller`]
/// and [`runs_replicaset_controller`]).
pub fn runs_controller(args: &[String], kind: Workload) -> bool {
    match kind {
        Workload::Deployment => runs_deployment_controller(args),
        Workload::ReplicaSet => runs_replicaset_controller(args),
    }
}

/// Processes whose command line names a file of `cluster_dir` and passes `runs`.
fn controllers(cluster_dir: &Path, runs: fn(&[String]) -> bool) -> Vec<(u32, String)> {
    // With the separator: cluster `dev` must not match the files of cluster `dev-2`.
    let marker = format!("{}/", cluster_dir.display());
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    let matched: Vec<(u32, String)> = entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| {
            let args = cmdline(pid);
            (args.iter().any(|a| a.contains(&marker)) && runs(&args)).then(|| (pid, args.join(" ")))
        })
        .collect();
    // A child forked by a controller shows the parent's command line until it execs: it is
    // the same controller, not a second one.
    let pids: Vec<u32> = matched.iter().map(|(pid, _)| *pid).collect();
    matched
        .into_iter()
        .filter(|(pid, _)| parent(*pid).is_none_or(|p| !pids.contains(&p)))
        .collect()
}

/// Pid file path of a component.
pub fn pid_file(run_dir: &Path, component: &str) -> PathBuf {
    run_dir.join(format!("{component}.pid"))
}

/// Whether a command line runs a Deployment controller: our `deployment-controller` (also as
/// the program a wrapper such as valgrind runs) or a kube-controller-manager, whose
/// `--controllers` enables `deployment-controller` (alias `deployment`). Both decide as
/// kube-controller-manager does: the first entry naming the controller (`name` or `-name`)
/// wins, else `*` enables it; without the flag the default is `*`.
pub fn runs_deployment_controller(args: &[String]) -> bool {
    match program(args) {
        // Both enable it by `*`, their default.
        Program::KubeControllerManager | Program::Ours(_) => {
            enabled(args, "deployment-controller", "deployment")
        }
        Program::Other => false,
    }
}

/// Whether a command line runs a ReplicaSet controller: a kube-controller-manager whose
/// `--controllers` enables `replicaset-controller` (alias `replicaset`; `*`, the default,
/// does), or our `deployment-controller` whose `--controllers` names it (`*` does not enable
/// ours). The first entry naming the controller wins, as for [`runs_deployment_controller`].
pub fn runs_replicaset_controller(args: &[String]) -> bool {
    match program(args) {
        Program::KubeControllerManager => enabled(args, "replicaset-controller", "replicaset"),
        Program::Ours(_) => first_naming(args, "replicaset-controller", "replicaset") == Some(true),
        Program::Other => false,
    }
}

/// Which controller program a command line runs.
enum Program {
    KubeControllerManager,
    /// Our binary, at this index of the command line (after a wrapper's arguments, if any).
    Ours(usize),
    Other,
}

fn program(args: &[String]) -> Program {
    let file_name = |a: &str| {
        std::path::Path::new(a)
            .file_name()
            .map(|f| f.to_string_lossy().into_owned())
            .unwrap_or_default()
    };
    if args
        .first()
        .is_some_and(|a| file_name(a) == "kube-controller-manager")
    {
        return Program::KubeControllerManager;
    }
    match args
        .iter()
        .position(|a| !a.starts_with('-') && file_name(a) == "deployment-controller")
    {
        Some(at) => Program::Ours(at),
        None => Program::Other,
    }
}

/// The entries of every `--controllers` flag, in order (a repeated flag adds to the list), if
/// any.
fn controllers_flag(args: &[String]) -> Option<String> {
    // The program's own flags: after ours when a wrapper (valgrind, env) runs it.
    let first = match program(args) {
        Program::Ours(at) => at + 1,
        Program::KubeControllerManager | Program::Other => 1,
    };
    let mut controllers: Option<Vec<String>> = None;
    let mut it = args.iter().skip(first);
    while let Some(a) = it.next() {
        let value = if let Some(v) = a.strip_prefix("--controllers=") {
            v.to_owned()
        } else if a == "--controllers" {
            it.next().cloned().unwrap_or_default()
        } else {
            continue;
        };
        controllers.get_or_insert_default().push(value);
    }
    controllers.map(|c| c.join(","))
}

/// Whether `--controllers` (default `*`) enables controller `name` (alias `alias`) as
/// kube-controller-manager decides: the first entry naming it wins, else `*` enables it.
fn enabled(args: &[String], name: &str, alias: &str) -> bool {
    first_naming(args, name, alias).unwrap_or_else(|| {
        controllers_flag(args)
            .unwrap_or_else(|| "*".to_owned())
            .split(',')
            .any(|e| e.trim() == "*")
    })
}

/// What the first `--controllers` entry naming controller `name` (alias `alias`) says: `true`
/// for `name`, `false` for `-name`, `None` if no entry names it.
fn first_naming(args: &[String], name: &str, alias: &str) -> Option<bool> {
    let controllers = controllers_flag(args)?;
    controllers.split(',').map(str::trim).find_map(|entry| {
        let (on, bare) = match entry.strip_prefix('-') {
            Some(bare) => (false, bare),
            None => (true, entry),
        };
        (bare == name || bare == alias).then_some(on)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_process_is_recognised_and_a_recycled_pid_is_not() {
        let me = std::process::id();
        let st = stat(me).expect("own stat");
        let exe = fs::read_link("/proc/self/exe").expect("own exe");
        let rec = ProcRecord {
            pid: me,
            start_time: st.start_time,
        };
        assert!(rec.is_ours_and_running(&exe));
        let recycled = ProcRecord {
            pid: me,
            start_time: st.start_time + 1,
        };
        assert!(!recycled.is_ours_and_running(&exe));
        assert!(!rec.is_ours_and_running(Path::new("/usr/bin/some-other-binary")));
    }

    /// Threads that each write a script and start it at once: without the ETXTBSY retry, a
    /// few starts in a thousand fail on a 2-core machine ("Text file busy").
    #[test]
    fn scripts_written_and_started_from_many_threads_all_start() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("kctrl-busy-test-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        thread::scope(|s| {
            for t in 0..6 {
                let dir = &dir;
                s.spawn(move || {
                    for i in 0..150 {
                        let script = dir.join(format!("s-{t}-{i}"));
                        fs::write(&script, "#!/bin/sh\nexit 0\n").unwrap();
                        fs::set_permissions(&script, fs::Permissions::from_mode(0o755)).unwrap();
                        let log = dir.join(format!("s-{t}-{i}.log"));
                        let pid = dir.join(format!("s-{t}-{i}.pid"));
                        let (mut child, _) = spawn(&script, &[], &log, &pid)
                            .unwrap_or_else(|e| panic!("start {t}/{i}: {e:#}"));
                        assert!(child.wait().unwrap().success());
                    }
                });
            }
        });
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn malformed_pid_files_are_ignored() {
        let dir = std::env::temp_dir().join(format!("kctrl-pid-test-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let f = dir.join("x.pid");
        fs::write(&f, "garbage").unwrap();
        assert_eq!(read_pid_file(&f), None);
        fs::write(&f, "123 456\n").unwrap();
        assert_eq!(
            read_pid_file(&f),
            Some(ProcRecord {
                pid: 123,
                start_time: 456
            })
        );
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn spawned_group_is_stopped() {
        let dir = std::env::temp_dir().join(format!("kctrl-spawn-test-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let sleep = crate::toolchain::which("sleep").expect("sleep on PATH");
        let (mut child, rec) = spawn(
            &sleep,
            &["30".to_owned()],
            &dir.join("s.log"),
            &dir.join("s.pid"),
        )
        .unwrap();
        assert_eq!(read_pid_file(&dir.join("s.pid")), Some(rec));
        assert!(rec.is_ours_and_running(&fs::canonicalize(&sleep).unwrap()) || running(rec.pid));
        // Reap in the background so the zombie does not linger while stop_all polls.
        let reaper = thread::spawn(move || child.wait());
        assert_eq!(stop_all(&[rec], &[], Duration::from_secs(5)).unwrap(), 1);
        reaper.join().unwrap().unwrap();
        assert!(!running(rec.pid));
        fs::remove_dir_all(&dir).unwrap();
    }

    fn argv(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_owned).collect()
    }

    #[test]
    fn which_command_lines_run_a_deployment_controller() {
        assert!(runs_deployment_controller(&argv(
            "/t/release/deployment-controller --kubeconfig=/c/k --leader-elect=false"
        )));
        assert!(runs_deployment_controller(&argv(
            "valgrind --tool=callgrind /t/release/deployment-controller --kubeconfig=/c/k"
        )));
        assert!(runs_deployment_controller(&argv(
            "/usr/libexec/valgrind/callgrind-amd64-linux --tool=callgrind /t/deployment-controller"
        )));
        assert!(!runs_deployment_controller(&argv(
            "/t/release/xtask bench controller --name bench-controller"
        )));
        assert!(!runs_deployment_controller(&argv(
            "valgrind --tool=callgrind /usr/bin/etcd"
        )));
        let kcm = |flags: &str| {
            argv(&format!(
                "/cache/bin/kube-controller-manager --kubeconfig=/c {flags}"
            ))
        };
        assert!(runs_deployment_controller(&kcm("")), "default is *");
        assert!(runs_deployment_controller(&kcm(
            "--controllers=deployment-controller"
        )));
        assert!(runs_deployment_controller(&kcm("--controllers deployment")));
        assert!(runs_deployment_controller(&kcm("--controllers=*")));
        assert!(!runs_deployment_controller(&kcm(
            "--controllers=*,-deployment-controller"
        )));
        assert!(!runs_deployment_controller(&kcm(
            "--controllers=-deployment,*"
        )));
        assert!(!runs_deployment_controller(&kcm(
            "--controllers=replicaset-controller"
        )));
        assert!(
            runs_deployment_controller(&kcm("--controllers=deployment,-deployment")),
            "the first entry naming it wins"
        );
        assert!(!runs_deployment_controller(&argv(
            "/usr/bin/kube-scheduler --kubeconfig=/c"
        )));
        assert!(!runs_deployment_controller(&[]));
    }

    #[test]
    fn replicaset_controllers_are_recognised_as_each_program_enables_them() {
        let kcm = |flags: &str| {
            argv(&format!(
                "/cache/bin/kube-controller-manager --kubeconfig=/c {flags}"
            ))
        };
        assert!(runs_replicaset_controller(&kcm("")), "default is *");
        assert!(runs_replicaset_controller(&kcm(
            "--controllers=*,-deployment-controller"
        )));
        assert!(!runs_replicaset_controller(&kcm(
            "--controllers=*,-deployment-controller,-replicaset-controller"
        )));
        assert!(!runs_replicaset_controller(&kcm(
            "--controllers=deployment-controller"
        )));
        assert!(runs_replicaset_controller(&kcm("--controllers replicaset")));
        let ours = |flags: &str| {
            argv(&format!(
                "/t/dist/deployment-controller --kubeconfig=/c {flags}"
            ))
        };
        assert!(
            !runs_replicaset_controller(&ours("")),
            "* does not enable ours"
        );
        assert!(!runs_replicaset_controller(&ours("--controllers=*")));
        assert!(runs_replicaset_controller(&ours(
            "--controllers=*,replicaset-controller"
        )));
        assert!(
            runs_replicaset_controller(&ours("--controllers=replicaset --controllers=-replicaset")),
            "a repeated flag adds to the list; the first entry wins"
        );
        assert!(!runs_replicaset_controller(&ours(
            "--controllers=-replicaset,replicaset"
        )));
        assert!(runs_deployment_controller(&ours(
            "--controllers=*,replicaset-controller"
        )));
        assert!(!runs_replicaset_controller(&argv(
            "/usr/bin/kube-scheduler --kubeconfig=/c"
        )));
    }

    #[test]
    fn runs_controller_by_kind() {
        let rs = |s: &str| runs_controller(&argv(s), Workload::ReplicaSet);
        let deploy = |s: &str| runs_controller(&argv(s), Workload::Deployment);
        // Ours runs only the Deployment controller unless told otherwise.
        assert!(!rs("/t/dist/deployment-controller --kubeconfig=/c/k"));
        assert!(!rs("/t/dist/deployment-controller --controllers=*"));
        assert!(rs(
            "/t/dist/deployment-controller --controllers=*,replicaset-controller"
        ));
        assert!(deploy(
            "/t/dist/deployment-controller --controllers=*,replicaset-controller"
        ));
        assert!(rs("/t/dist/deployment-controller --controllers replicaset"));
        assert!(!deploy(
            "/t/dist/deployment-controller --controllers=replicaset-controller"
        ));
        assert!(!deploy(
            "/t/dist/deployment-controller --controllers=-deployment,replicaset"
        ));
        assert!(rs(
            "valgrind --tool=callgrind /t/deployment-controller --controllers=replicaset"
        ));
        // A flag of the wrapper is not one of ours.
        assert!(deploy(
            "env --controllers=replicaset /t/deployment-controller"
        ));
        // kube-controller-manager: `*` enables it.
        let kcm =
            |flags: &str| format!("/cache/bin/kube-controller-manager --kubeconfig=/c {flags}");
        assert!(rs(&kcm("")));
        assert!(rs(&kcm("--controllers=*,-deployment-controller")));
        assert!(!rs(&kcm(
            "--controllers=*,-deployment-controller,-replicaset-controller"
        )));
        assert!(!rs(&kcm("--controllers=-replicaset,*")));
        assert!(rs(&kcm("--controllers=replicaset-controller")));
        assert!(!rs(&kcm("--controllers=deployment-controller")));
        assert!(!rs("/usr/bin/kube-scheduler --kubeconfig=/c"));
    }
}

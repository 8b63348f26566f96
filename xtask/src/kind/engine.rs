//! `cargo xtask kind engine up|down|status`: a Docker daemon for kind on a machine where none
//! runs but one can (root, Debian's `docker.io`), started with what such a host needs and
//! stopped again by the same command — and only what that command started.
//!
//! What a host of the project's kind needs (see docs/local-cluster.md, "kind"):
//! * the capability bounding set lacks `CAP_SYS_RESOURCE`, so runc cannot give a privileged
//!   container (kind's nodes) the full set: dockerd gets a runtime of ours as its default,
//!   which removes that capability from the OCI spec and runs the real runc
//!   ([`super::runc_wrapper`]);
//! * nothing is routed off the machine: `--ip-forward=false --ip-masq=false --iptables=false`
//!   and no default bridge (`--bridge=none`; kind creates its own network);
//! * without a registry, dockerd's proxy points at a closed loopback port so a pull fails at
//!   once instead of after a DNS timeout (`--offline`, the default when the Docker Hub
//!   registry does not answer).
//!
//! Everything of ours lives in [`ENGINE_ROOT`] (`/var/lib/kctrl-engine`: data root, the
//! runtime's copy, log) and [`ENGINE_RUN`] (`/run/kctrl-engine`: exec root with containerd's
//! state, pid file). The daemon listens on the standard socket `/var/run/docker.sock` (so the
//! `docker` CLI and kind use it unchanged); `up` refuses when anything already answers there.

use std::fs;
use std::io::Write;
use std::net::{TcpStream, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use kctrl_cluster::process::{self, ProcRecord};

use super::runc_wrapper;

/// Persistent state of the engine we start: data root (images, containers), the runtime
/// wrapper, the daemon's log.
pub(crate) const ENGINE_ROOT: &str = "/var/lib/kctrl-engine";
/// Runtime state: dockerd's exec root (and its containerd's), our pid file.
pub(crate) const ENGINE_RUN: &str = "/run/kctrl-engine";
/// The socket the daemon serves (Docker's standard one, what the CLI and kind use).
pub(crate) const DOCKER_SOCKET: &str = "/var/run/docker.sock";
/// The runtime name registered with dockerd.
const RUNTIME_NAME: &str = "kctrl-runc";
/// A loopback port nothing listens on (discard): pulls through it fail at once.
const CLOSED_PROXY: &str = "http://127.0.0.1:9";
/// How long `up` waits for the daemon to answer.
const START_TIMEOUT: Duration = Duration::from_secs(90);
/// How long `down` waits for dockerd to stop its containers and exit before SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(60);

/// `cargo xtask kind engine …`.
#[derive(clap::Subcommand)]
pub(crate) enum EngineCommand {
    /// Install Debian's docker.io if dockerd is missing, then start dockerd for kind.
    Up {
        /// Pulls fail at once (dockerd's proxy is a closed loopback port). Default: when
        /// registry-1.docker.io:443 cannot be reached.
        #[arg(long, conflicts_with = "online")]
        offline: bool,
        /// Let dockerd pull as usual even if the registry looked unreachable.
        #[arg(long)]
        online: bool,
    },
    /// Stop the dockerd `up` started (it stops its containers first); nothing else.
    Down,
    /// Which engine answers, and whether it is ours.
    Status,
}

/// Runs one engine command.
pub(crate) fn run(cmd: EngineCommand) -> Result<()> {
    match cmd {
        EngineCommand::Up { offline, online } => {
            let offline = if offline {
                true
            } else if online {
                false
            } else {
                !registry_reachable()
            };
            let started = Instant::now();
            match up(offline)? {
                Up::AlreadyOurs(pid) => println!("our dockerd already runs (pid {pid})"),
                Up::Foreign(what) => println!(
                    "a container engine already answers ({what}); it is used as it is and \
                     `engine down` will not touch it"
                ),
                Up::Started(pid) => println!(
                    "dockerd started (pid {pid}, {}, data root {ENGINE_ROOT}/docker, log \
                     {ENGINE_ROOT}/dockerd.log) in {:.1}s",
                    if offline {
                        "offline: pulls fail at once"
                    } else {
                        "pulls allowed"
                    },
                    started.elapsed().as_secs_f64()
                ),
            }
            Ok(())
        }
        EngineCommand::Down => {
            match down()? {
                Some(n) => println!("stopped our dockerd ({n} processes)"),
                None => println!("no dockerd of ours runs; nothing stopped"),
            }
            Ok(())
        }
        EngineCommand::Status => {
            let ours = our_daemon();
            match (docker_answers(), ours) {
                (Some(v), Some(r)) => println!("ours: dockerd {v}, pid {}", r.pid),
                (Some(v), None) => println!("an engine that is not ours answers: {v}"),
                (None, Some(r)) => {
                    println!("our dockerd (pid {}) runs but does not answer yet", r.pid)
                }
                (None, None) => {
                    println!("no container engine answers (`cargo xtask kind engine up`)");
                    std::process::exit(1);
                }
            }
            Ok(())
        }
    }
}

/// What `up` found or did.
pub(crate) enum Up {
    /// Our dockerd was already running (its pid).
    AlreadyOurs(u32),
    /// Another engine answers (its description).
    Foreign(String),
    /// Started now (its pid).
    Started(u32),
}

fn pid_file() -> PathBuf {
    Path::new(ENGINE_RUN).join("dockerd.pid")
}

/// Our dockerd, if it runs (pid file and the same process).
pub(crate) fn our_daemon() -> Option<ProcRecord> {
    process::read_pid_file(&pid_file()).filter(|r| r.is_running())
}

/// `docker version`'s server version if a daemon answers on the default endpoint.
pub(crate) fn docker_answers() -> Option<String> {
    let out = Command::new("docker")
        .args(["version", "--format", "{{.Server.Version}}"])
        .stderr(Stdio::null())
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| format!("docker {}", String::from_utf8_lossy(&out.stdout).trim()))
}

/// `podman version` if Podman is usable.
pub(crate) fn podman_answers() -> Option<String> {
    let out = Command::new("podman")
        .args(["version", "--format", "{{.Version}}"])
        .stderr(Stdio::null())
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| format!("podman {}", String::from_utf8_lossy(&out.stdout).trim()))
}

/// Whether Docker Hub's registry accepts a TCP connection within 3 s.
pub(crate) fn registry_reachable() -> bool {
    let Ok(mut addrs) = "registry-1.docker.io:443".to_socket_addrs() else {
        return false;
    };
    addrs.any(|a| TcpStream::connect_timeout(&a, Duration::from_secs(3)).is_ok())
}

/// Whether we run as root (`id -u`).
fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

/// Installs `packages` from the distribution with apt-get, without letting the packages start
/// their services (a temporary `policy-rc.d` unless one exists).
pub(crate) fn apt_install(packages: &[&str]) -> Result<()> {
    if process_on_path("apt-get").is_none() {
        bail!(
            "{} is missing and this machine has no apt-get: install it with the distribution's \
             package manager",
            packages.join(", ")
        );
    }
    if !is_root() {
        bail!(
            "{} is missing: installing it needs root (run as root, or `sudo apt-get install {}`)",
            packages.join(", "),
            packages.join(" ")
        );
    }
    eprintln!(
        "installing {} from the distribution (apt-get)",
        packages.join(" ")
    );
    let policy = Path::new("/usr/sbin/policy-rc.d");
    let ours = !policy.exists();
    if ours {
        // Exit 101: "action forbidden", so postinst does not start dockerd/containerd.
        fs::write(policy, "#!/bin/sh\nexit 101\n")?;
        set_mode(policy, 0o755)?;
    }
    let result = (|| {
        let status = Command::new("apt-get")
            .args(["install", "-y", "--no-install-recommends"])
            .args(packages)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .status()
            .context("running apt-get")?;
        if !status.success() {
            let update = Command::new("apt-get").arg("update").status()?;
            let again = Command::new("apt-get")
                .args(["install", "-y", "--no-install-recommends"])
                .args(packages)
                .env("DEBIAN_FRONTEND", "noninteractive")
                .status()?;
            if !update.success() || !again.success() {
                bail!("apt-get install {} failed", packages.join(" "));
            }
        }
        Ok(())
    })();
    if ours {
        let _ = fs::remove_file(policy);
    }
    result
}

fn set_mode(path: &Path, mode: u32) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(path, fs::Permissions::from_mode(mode))
        .with_context(|| format!("chmod {mode:o} {}", path.display()))
}

/// `name` on PATH, or in the sbin directories a non-login root shell may lack.
pub(crate) fn process_on_path(name: &str) -> Option<PathBuf> {
    kctrl_cluster::toolchain::which(name).or_else(|| {
        ["/usr/sbin", "/usr/bin", "/sbin", "/usr/local/sbin"]
            .iter()
            .map(|d| Path::new(d).join(name))
            .find(|p| p.is_file())
    })
}

/// The arguments dockerd is started with (see the module docs).
pub(crate) fn dockerd_args(wrapper: &Path) -> Vec<String> {
    [
        "--host",
        &format!("unix://{DOCKER_SOCKET}"),
        "--data-root",
        &format!("{ENGINE_ROOT}/docker"),
        "--exec-root",
        &format!("{ENGINE_RUN}/exec"),
        "--pidfile",
        &format!("{ENGINE_RUN}/dockerd.own.pid"),
        "--storage-driver",
        "overlay2",
        "--ip-forward=false",
        "--ip-masq=false",
        "--iptables=false",
        "--ip6tables=false",
        "--bridge=none",
        "--add-runtime",
        &format!("{RUNTIME_NAME}={}", wrapper.display()),
        "--default-runtime",
        RUNTIME_NAME,
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect()
}

/// Starts our dockerd unless an engine already answers.
pub(crate) fn up(offline: bool) -> Result<Up> {
    if let Some(r) = our_daemon() {
        wait_for_daemon(r.pid)?;
        return Ok(Up::AlreadyOurs(r.pid));
    }
    if let Some(v) = docker_answers().or_else(podman_answers) {
        return Ok(Up::Foreign(v));
    }
    if !is_root() {
        bail!(
            "no container engine runs and starting Docker's daemon needs root: start Docker or \
             Podman yourself, or run `cargo xtask kind engine up` as root"
        );
    }
    if Path::new(DOCKER_SOCKET).exists() {
        bail!(
            "{DOCKER_SOCKET} exists but no daemon answers on it: another Docker daemon is \
             starting or died without cleaning up; stop it or remove the socket, then re-run"
        );
    }
    let needed: Vec<&str> = [("dockerd", "docker.io"), ("runc", "runc")]
        .iter()
        .filter(|(bin, _)| process_on_path(bin).is_none())
        .map(|(_, pkg)| *pkg)
        .collect();
    if !needed.is_empty() {
        apt_install(&needed)?;
    }
    let dockerd = process_on_path("dockerd").context("dockerd not found after installing")?;
    check_kernel()?;
    fs::create_dir_all(Path::new(ENGINE_ROOT).join("bin"))?;
    fs::create_dir_all(ENGINE_RUN)?;
    let wrapper = runc_wrapper::install(Path::new(ENGINE_ROOT))?;
    let log = Path::new(ENGINE_ROOT).join("dockerd.log");
    {
        let mut l = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)?;
        writeln!(
            l,
            "--- {} cargo xtask kind engine up (offline: {offline})",
            kctrl_cluster::toolchain::utc_now_rfc3339()
        )?;
    }
    let mut env: Vec<(&str, &str)> = Vec::new();
    if offline {
        for var in ["HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"] {
            env.push((var, CLOSED_PROXY));
        }
        env.push(("NO_PROXY", "localhost,127.0.0.1"));
    }
    let path = format!(
        "{}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        std::env::var("PATH").unwrap_or_default()
    );
    env.push(("PATH", &path));
    let (mut child, record) =
        process::spawn_with_env(&dockerd, &dockerd_args(&wrapper), &env, &log, &pid_file())?;
    let deadline = Instant::now() + START_TIMEOUT;
    loop {
        if let Some(status) = child.try_wait()? {
            let _ = fs::remove_file(pid_file());
            bail!(
                "dockerd exited at once ({status}); last lines of {}:\n{}",
                log.display(),
                process::tail(&log, 15)
            );
        }
        if docker_answers().is_some() {
            break;
        }
        if Instant::now() > deadline {
            let _ = stop(&record);
            bail!(
                "dockerd did not answer within {}s (stopped again); see {}:\n{}",
                START_TIMEOUT.as_secs(),
                log.display(),
                process::tail(&log, 15)
            );
        }
        std::thread::sleep(Duration::from_millis(300));
    }
    check_runtime(&record, &log)?;
    Ok(Up::Started(record.pid))
}

/// Waits until our already-running daemon answers.
fn wait_for_daemon(pid: u32) -> Result<()> {
    let deadline = Instant::now() + START_TIMEOUT;
    while docker_answers().is_none() {
        if Instant::now() > deadline {
            bail!("our dockerd (pid {pid}) runs but does not answer on {DOCKER_SOCKET}");
        }
        std::thread::sleep(Duration::from_millis(300));
    }
    Ok(())
}

/// What the host must offer: overlayfs and cgroups.
fn check_kernel() -> Result<()> {
    let fs_list = fs::read_to_string("/proc/filesystems").unwrap_or_default();
    if !fs_list.contains("overlay") {
        let _ = Command::new("modprobe").arg("overlay").status();
        if !fs::read_to_string("/proc/filesystems")
            .unwrap_or_default()
            .contains("overlay")
        {
            bail!(
                "this kernel offers no overlay filesystem (not in /proc/filesystems, modprobe \
                 overlay failed): kind's nodes need overlay2; use a kernel with CONFIG_OVERLAY_FS"
            );
        }
    }
    if !Path::new("/sys/fs/cgroup").is_dir() {
        bail!("/sys/fs/cgroup is missing: containers need cgroups mounted");
    }
    Ok(())
}

/// The daemon must run containers through our runtime (else kind's privileged nodes fail).
fn check_runtime(record: &ProcRecord, log: &Path) -> Result<()> {
    let out = Command::new("docker")
        .args(["info", "--format", "{{.DefaultRuntime}}"])
        .output()?;
    let runtime = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    if runtime != RUNTIME_NAME {
        let _ = stop(record);
        bail!(
            "dockerd's default runtime is {runtime:?}, not {RUNTIME_NAME} (stopped again); see {}",
            log.display()
        );
    }
    Ok(())
}

/// Stops our daemon: TERM to dockerd (it stops its containers and its containerd), then the
/// rest of its process group and the container shims of its exec root.
fn stop(record: &ProcRecord) -> Result<usize> {
    let exec_root = PathBuf::from(ENGINE_RUN);
    let n = process::stop_all(std::slice::from_ref(record), &[], STOP_GRACE)?;
    let strays = process::find_strays(&["containerd-shim-runc-v2", "containerd"], &exec_root);
    let m = if strays.is_empty() {
        0
    } else {
        process::stop_all(&[], &strays, Duration::from_secs(10))?
    };
    let _ = fs::remove_file(pid_file());
    Ok(n + m)
}

/// Stops our daemon if it runs; `None` when there was none.
pub(crate) fn down() -> Result<Option<usize>> {
    match our_daemon() {
        Some(r) => Ok(Some(stop(&r)?)),
        None => {
            let _ = fs::remove_file(pid_file());
            Ok(None)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dockerd_routes_nothing_and_runs_the_wrapper_by_default() {
        let args = dockerd_args(Path::new("/x/kctrl-runc"));
        for flag in [
            "--ip-forward=false",
            "--ip-masq=false",
            "--iptables=false",
            "--bridge=none",
        ] {
            assert!(args.iter().any(|a| a == flag), "{flag} missing: {args:?}");
        }
        let pos = |f: &str| args.iter().position(|a| a == f).unwrap();
        assert_eq!(args[pos("--add-runtime") + 1], "kctrl-runc=/x/kctrl-runc");
        assert_eq!(args[pos("--default-runtime") + 1], RUNTIME_NAME);
        assert_eq!(args[pos("--data-root") + 1], "/var/lib/kctrl-engine/docker");
        assert!(args[pos("--exec-root") + 1].starts_with(ENGINE_RUN));
    }
}

//! Our `deployment-controller` on a test plane: where its executable comes from, the RBAC of
//! its identity, its start (see [`TestEnvBuilder::deployment_controller`](crate::TestEnvBuilder::deployment_controller)).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use kctrl_cluster::plane::{ClusterInfo, Layout};
use kctrl_cluster::process;

use crate::Error;

/// The variable naming the `deployment-controller` executable to run, when
/// [`TestEnvBuilder::deployment_controller_binary`](crate::TestEnvBuilder::deployment_controller_binary)
/// does not.
pub const DEPLOYMENT_CONTROLLER_ENV: &str = "KCTRL_DEPLOYMENT_CONTROLLER";

/// The command that builds the executable in a kctrl checkout (into `target/debug/`).
pub const BUILD_COMMAND: &str =
    "cargo build -p kctrl-deployment-controller --bin deployment-controller";

/// The executable's file name.
const BINARY: &str = "deployment-controller";
/// Its Cargo package.
const PACKAGE: &str = "kctrl-deployment-controller";
/// The name of its pid file among the plane's attached processes (the plane's `stop` stops it
/// first, the reaper kills it with the components).
const ATTACHED: &str = "deployment-controller";
/// What it logs once its informers' caches are synced.
const SYNCED_MARKER: &str = "Caches are synced for";
/// How long the start waits for that.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// `deploy/`'s RBAC for the controller's identity (copies, checked against `deploy/` by a test,
/// so that the crate carries them when packaged): the ServiceAccount, its ClusterRole and
/// binding, leader election in `kube-system`, and the delegated authentication and
/// authorization of its endpoints.
const RBAC: &[(&str, &str)] = &[
    (
        "00-serviceaccount.yaml",
        include_str!("deploy-rbac/00-serviceaccount.yaml"),
    ),
    (
        "01-clusterrole.yaml",
        include_str!("deploy-rbac/01-clusterrole.yaml"),
    ),
    (
        "02-clusterrolebinding.yaml",
        include_str!("deploy-rbac/02-clusterrolebinding.yaml"),
    ),
    (
        "03-role-leader-election.yaml",
        include_str!("deploy-rbac/03-role-leader-election.yaml"),
    ),
    (
        "04-rolebinding-leader-election.yaml",
        include_str!("deploy-rbac/04-rolebinding-leader-election.yaml"),
    ),
    (
        "06-clusterrolebinding-auth-delegator.yaml",
        include_str!("deploy-rbac/06-clusterrolebinding-auth-delegator.yaml"),
    ),
    (
        "07-rolebinding-authentication-reader.yaml",
        include_str!("deploy-rbac/07-rolebinding-authentication-reader.yaml"),
    ),
];

/// The root of the kctrl checkout this crate was built in, if it is one (not a copy from a
/// registry): the workspace holding the controller's package.
fn checkout() -> Option<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).ancestors().nth(2)?;
    root.join("crates/deployment-controller/Cargo.toml")
        .is_file()
        .then(|| root.to_path_buf())
}

/// Where the executable is looked for, in order, after an explicit path and
/// [`DEPLOYMENT_CONTROLLER_ENV`]: the checkout's `target/debug/`, then `$PATH`.
fn candidates() -> Vec<PathBuf> {
    let mut paths = Vec::new();
    if checkout().is_some() {
        paths.push(
            kctrl_cluster::plane::target_dir()
                .join("debug")
                .join(BINARY),
        );
    }
    if let Some(path) = std::env::var_os("PATH") {
        paths.extend(std::env::split_paths(&path).map(|d| d.join(BINARY)));
    }
    paths
}

/// The executable to run: `explicit`, else [`DEPLOYMENT_CONTROLLER_ENV`], else (with `build`, in
/// a kctrl checkout) the one [`build_deployment_controller`] builds, else the first of
/// [`candidates`] that exists.
pub(crate) fn locate(explicit: Option<&Path>, build: bool) -> Result<PathBuf, Error> {
    let named = explicit
        .map(|p| {
            (
                p.to_path_buf(),
                "TestEnvBuilder::deployment_controller_binary".to_owned(),
            )
        })
        .or_else(|| {
            std::env::var_os(DEPLOYMENT_CONTROLLER_ENV)
                .filter(|v| !v.is_empty())
                .map(|v| (PathBuf::from(v), format!("${DEPLOYMENT_CONTROLLER_ENV}")))
        });
    if let Some((path, from)) = named {
        return if path.is_file() {
            Ok(path)
        } else {
            Err(Error::DeploymentControllerNotFound {
                looked_for: format!("{} (from {from})", path.display()),
            })
        };
    }
    if build && checkout().is_some() {
        return build_deployment_controller();
    }
    let candidates = candidates();
    candidates
        .iter()
        .find(|p| p.is_file())
        .cloned()
        .ok_or_else(|| Error::DeploymentControllerNotFound {
            looked_for: format!(
                "${DEPLOYMENT_CONTROLLER_ENV} (not set), {}",
                match candidates.first() {
                    Some(first) if checkout().is_some() =>
                        format!("{} and {BINARY} on $PATH", first.display()),
                    _ => format!("{BINARY} on $PATH"),
                }
            ),
        })
}

/// Builds our `deployment-controller` with [`BUILD_COMMAND`] in the kctrl checkout this crate
/// belongs to (progress on stderr; seconds when it is up to date) and returns the executable.
///
/// Cargo rebuilds whatever changed, so the executable is never older than the sources. Fails
/// with [`Error::Build`] when the crate is not in a kctrl checkout (from a registry: install
/// the binary instead and name it, see
/// [`TestEnvBuilder::deployment_controller`](crate::TestEnvBuilder::deployment_controller)), or
/// when the build fails.
pub fn build_deployment_controller() -> Result<PathBuf, Error> {
    let root = checkout().ok_or_else(|| {
        Error::Build(format!(
            "{BINARY} can only be built in a kctrl checkout; install it (`cargo install \
             {PACKAGE}`) and put it on $PATH or name it with ${DEPLOYMENT_CONTROLLER_ENV}"
        ))
    })?;
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    eprintln!("kctrl-testenv: {BUILD_COMMAND} (in {})", root.display());
    let mut command = Command::new(&cargo);
    // A test process inherits what cargo sets for the crate under test (CARGO_MANIFEST_DIR,
    // CARGO_PKG_NAME…); build scripts that track those variables (ring's) would run again, and
    // the next `cargo test` would rebuild them back. Build as from a shell.
    for (name, _) in std::env::vars_os() {
        if name.to_str().is_some_and(set_by_cargo_for_a_crate) {
            command.env_remove(&name);
        }
    }
    let status = command
        .arg("build")
        .arg("--manifest-path")
        .arg(root.join("Cargo.toml"))
        .args(["-p", PACKAGE, "--bin", BINARY])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .status()
        .map_err(|e| Error::Build(format!("running {}: {e}", Path::new(&cargo).display())))?;
    if !status.success() {
        return Err(Error::Build(format!("`{BUILD_COMMAND}` failed ({status})")));
    }
    let binary = kctrl_cluster::plane::target_dir()
        .join("debug")
        .join(BINARY);
    if !binary.is_file() {
        return Err(Error::Build(format!(
            "`{BUILD_COMMAND}` succeeded, but {} is not there",
            binary.display()
        )));
    }
    Ok(binary)
}

/// Whether cargo sets the variable `name` for the crate it builds or runs (its tests included),
/// as opposed to the user's configuration of cargo itself.
fn set_by_cargo_for_a_crate(name: &str) -> bool {
    const EXACT: &[&str] = &[
        "CARGO_MANIFEST_DIR",
        "CARGO_MANIFEST_PATH",
        "CARGO_MANIFEST_LINKS",
        "CARGO_CRATE_NAME",
        "CARGO_BIN_NAME",
        "CARGO_PRIMARY_PACKAGE",
        "CARGO_TARGET_TMPDIR",
        "CARGO_RUSTC_CURRENT_DIR",
        "OUT_DIR",
    ];
    const PREFIXES: &[&str] = &["CARGO_PKG_", "CARGO_BIN_EXE_", "CARGO_CFG_", "DEP_"];
    EXACT.contains(&name) || PREFIXES.iter().any(|p| name.starts_with(p))
}

/// The controller's log in the plane's logs.
pub(crate) fn log_path(layout: &Layout) -> PathBuf {
    layout.logs().join(format!("{BINARY}.log"))
}

/// Applies `deploy/`'s RBAC (with the plane's kubectl, as the admin), starts `binary` as the
/// controller identity with its endpoints off, recorded as a process attached to the plane,
/// and waits until its caches are synced. Refuses to start it when a Deployment controller
/// already runs against the plane, and checks that it is the only one afterwards. On failure
/// the process is killed (the caller stops the plane).
pub(crate) fn start(layout: &Layout, info: &ClusterInfo, binary: &Path) -> Result<Child, Error> {
    if let Some((pid, cmd)) = process::deployment_controllers(&layout.dir).first() {
        return Err(Error::Start(format!(
            "a Deployment controller already runs against the plane (pid {pid}: {cmd}); two \
             would fight over the same Deployments"
        )));
    }
    apply_rbac(layout, info)?;
    let log = log_path(layout);
    let args = vec![
        "--kubeconfig".to_owned(),
        info.controller_kubeconfig.display().to_string(),
        "--secure-port".to_owned(),
        "0".to_owned(),
    ];
    let (mut child, record) =
        process::spawn(binary, &args, &log, &layout.attached_pid_file(ATTACHED))
            .map_err(|e| Error::Start(format!("starting {}: {e:#}", binary.display())))?;
    let fail = |child: &mut Child, why: String| {
        let _ = process::kill_group(record.pid);
        let _ = child.wait();
        Err(Error::Start(format!(
            "{why}; its log {}:\n{}",
            log.display(),
            process::tail(&log, 30)
        )))
    };
    let deadline = Instant::now() + START_TIMEOUT;
    loop {
        if std::fs::read_to_string(&log).is_ok_and(|l| l.contains(SYNCED_MARKER)) {
            break;
        }
        match child.try_wait() {
            Ok(Some(status)) => {
                return fail(
                    &mut child,
                    format!("{BINARY} exited ({status}) before its caches synced"),
                );
            }
            Ok(None) => {}
            Err(e) => return fail(&mut child, format!("waiting for {BINARY}: {e}")),
        }
        if Instant::now() > deadline {
            return fail(
                &mut child,
                format!("{BINARY} did not sync its caches within {START_TIMEOUT:?}"),
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let running = process::deployment_controllers(&layout.dir);
    if running.len() != 1 || running[0].0 != record.pid {
        return fail(
            &mut child,
            format!(
                "expected our {BINARY} (pid {}) as the only Deployment controller of the plane, \
                 found {running:?}",
                record.pid
            ),
        );
    }
    Ok(child)
}

/// `kubectl apply` of [`RBAC`], written into the plane's directory first.
fn apply_rbac(layout: &Layout, info: &ClusterInfo) -> Result<(), Error> {
    let dir = layout.dir.join("deploy-rbac");
    let io = |context: String| move |source| Error::Io { context, source };
    std::fs::create_dir_all(&dir).map_err(io(format!("creating {}", dir.display())))?;
    let mut cmd = Command::new(&info.kubectl);
    cmd.arg("--kubeconfig")
        .arg(&info.admin_kubeconfig)
        .arg("apply");
    for (name, text) in RBAC {
        let path = dir.join(name);
        std::fs::write(&path, text).map_err(io(format!("writing {}", path.display())))?;
        cmd.arg("-f").arg(path);
    }
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(io(format!("running {}", info.kubectl.display())))?;
    if !out.status.success() {
        return Err(Error::Start(format!(
            "applying deploy/'s RBAC for {BINARY} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rbac_copies_are_deploys_files() {
        let Some(root) = checkout() else {
            return;
        };
        for (name, text) in RBAC {
            let original = std::fs::read_to_string(root.join("deploy").join(name)).unwrap();
            assert_eq!(
                *text, original,
                "crates/testenv/src/deploy-rbac/{name} differs from deploy/{name}: copy it again"
            );
        }
    }

    #[test]
    fn every_rbac_file_of_deploy_is_copied() {
        let Some(root) = checkout() else {
            return;
        };
        let mut rbac: Vec<String> = std::fs::read_dir(root.join("deploy"))
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".yaml") && n != "05-deployment.yaml")
            .collect();
        rbac.sort();
        let copied: Vec<&str> = RBAC.iter().map(|(n, _)| *n).collect();
        assert_eq!(rbac, copied);
    }

    #[test]
    fn an_explicit_path_that_does_not_exist_is_a_typed_error_naming_it() {
        let missing = Path::new("/nonexistent/deployment-controller");
        let err = locate(Some(missing), true).unwrap_err();
        assert!(
            matches!(err, Error::DeploymentControllerNotFound { .. }),
            "{err:?}"
        );
        let text = err.to_string();
        assert!(
            text.contains("/nonexistent/deployment-controller"),
            "{text}"
        );
        assert!(text.contains(BUILD_COMMAND), "{text}");
    }

    #[test]
    fn the_crate_s_variables_are_told_from_cargo_s_configuration() {
        for name in [
            "CARGO_MANIFEST_DIR",
            "CARGO_PKG_NAME",
            "CARGO_BIN_EXE_x",
            "OUT_DIR",
        ] {
            assert!(set_by_cargo_for_a_crate(name), "{name}");
        }
        for name in [
            "CARGO_HOME",
            "CARGO_TARGET_DIR",
            "CARGO_INCREMENTAL",
            "PATH",
        ] {
            assert!(!set_by_cargo_for_a_crate(name), "{name}");
        }
    }

    #[test]
    fn an_explicit_path_is_used_as_it_is() {
        let me = std::env::current_exe().unwrap();
        assert_eq!(locate(Some(&me), false).unwrap(), me);
    }
}

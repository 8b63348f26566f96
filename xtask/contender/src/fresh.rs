//! The Deployment controllers running against a cluster, the check that only the expected one
//! runs, and the one routine that starts a cluster afresh for a run: Deployment controllers an
//! earlier run left stopped, the cluster restarted, a reaper that tears it down if xtask dies.

use std::path::Path;
use std::process::{Child, Command, Stdio};

use anyhow::{Context, Result, bail};

use kctrl_cluster::plane::{self, ClusterInfo, Component, Layout, UpOptions};
use kctrl_cluster::process;

use crate::Contender;
use crate::supervisor::STOP_GRACE;

/// Processes that run a Deployment controller against a cluster (the one routine, in
/// `kctrl-cluster`, that `kctrl-testenv` uses too).
pub use kctrl_cluster::process::deployment_controllers;
/// Processes that run a ReplicaSet controller against a cluster (kube-controller-manager's,
/// or our deployment-controller's with `--controllers=…,replicaset-controller`).
pub use kctrl_cluster::process::replicaset_controllers;

/// Stops cluster `name`, whichever release it runs (no-op if nothing runs); logs are kept.
pub fn down(name: &str) -> Result<()> {
    plane::validate_name(name)?;
    let layout = Layout::new(name);
    let stopped = plane::stop(&layout)?;
    if stopped == 0 {
        eprintln!("cluster '{name}': no process was running");
    } else {
        eprintln!(
            "cluster '{name}': stopped {stopped} process(es); logs kept in {}",
            layout.logs().display()
        );
    }
    Ok(())
}

/// At the end of a benchmark: stops cluster `name` (see [`down`]; a failure is reported, not
/// returned) unless `keep`.
pub fn down_unless_kept(name: &str, keep: bool) {
    if !keep {
        eprintln!("stopping cluster '{name}' (use --keep to leave it running)");
        if let Err(e) = down(name) {
            eprintln!("  stopping the cluster failed: {e:#}");
        }
    }
}

/// Stops the Deployment and ReplicaSet controllers an earlier run left running against cluster
/// `name` (they lead their own process groups, so a Ctrl-C of xtask does not reach them); the
/// cluster's own kube-controller-manager is left to the cluster.
pub fn stop_leftovers(name: &str) -> Result<()> {
    let layout = Layout::new(name);
    let cluster_kcm = process::read_pid_file(&layout.pid_file(Component::ControllerManager))
        .map(|record| record.pid);
    let mut leftovers: Vec<(u32, String)> = Vec::new();
    let found = deployment_controllers(&layout.dir)
        .into_iter()
        .chain(process::controllers_of(
            &layout.dir,
            process::Workload::ReplicaSet,
        ));
    for found in found {
        if Some(found.0) != cluster_kcm && !leftovers.iter().any(|(pid, _)| *pid == found.0) {
            leftovers.push(found);
        }
    }
    if !leftovers.is_empty() {
        eprintln!(
            "==> stopping Deployment/ReplicaSet controllers left by an earlier run: {leftovers:?}"
        );
        let pids: Vec<u32> = leftovers.iter().map(|(pid, _)| *pid).collect();
        process::stop_all(&[], &pids, STOP_GRACE)?;
    }
    Ok(())
}

/// A cluster [`start`] started for a run, with its reaper.
pub struct FreshCluster {
    /// The running cluster.
    pub info: ClusterInfo,
    reaper: Option<Child>,
}

/// How [`start`] treats the cluster.
#[derive(Clone, Copy, Debug, Default)]
pub struct Fresh<'a> {
    /// The pid file of the Deployment controller the run will start: the reaper stops it
    /// (and the cluster) if xtask dies. `None`: no reaper.
    pub reaper_pid_file: Option<&'a Path>,
    /// Leave a cluster that failed to start as it is (`--keep`), instead of stopping it.
    pub keep_on_failure: bool,
}

/// Starts cluster `opts.name` afresh for a run: stops the Deployment controllers an earlier run
/// left ([`stop_leftovers`]), stops the cluster ([`down`]), starts it with `opts` (stopping a
/// half-started one again unless `fresh.keep_on_failure`), then starts the reaper.
pub fn start(opts: &UpOptions, fresh: Fresh<'_>) -> Result<FreshCluster> {
    stop_leftovers(&opts.name)?;
    down(&opts.name)?;
    let info = match plane::ensure_up(opts) {
        Ok(info) => info,
        Err(e) => {
            // A half-started cluster is stopped too (its logs are kept).
            if !fresh.keep_on_failure {
                let _ = down(&opts.name);
            }
            return Err(e);
        }
    };
    // From here on the cluster is ours to stop, whatever happens.
    let reaper = fresh
        .reaper_pid_file
        .and_then(|pid_file| spawn_reaper(&opts.name, pid_file).ok());
    Ok(FreshCluster { info, reaper })
}

impl FreshCluster {
    /// A cluster already running (not started by [`start`]), with a reaper that stops it and
    /// the controller of `controller_pid_file` if xtask dies (`None`: no reaper).
    pub fn adopt(info: ClusterInfo, controller_pid_file: Option<&Path>) -> FreshCluster {
        let reaper = controller_pid_file.and_then(|p| spawn_reaper(&info.name, p).ok());
        FreshCluster { info, reaper }
    }

    /// Stops the cluster (see [`down`]) and dismisses the reaper.
    pub fn down(self) -> Result<()> {
        let down = down(&self.info.name);
        self.dismiss();
        down
    }

    /// Leaves the cluster running and dismisses the reaper.
    pub fn dismiss(self) {
        dismiss_reaper(self.reaper);
    }
}

/// Checks the Deployment controllers found running against the cluster (`found`: pid and
/// command line, see [`deployment_controllers`]): exactly one, and it is the expected process
/// — kube-controller-manager `kcm_pid` for upstream, our process `ours_pid` otherwise
/// (`None`: ours is not started yet, so none may run).
pub fn check_controllers(
    contender: Contender,
    found: &[(u32, String)],
    kcm_pid: u32,
    ours_pid: Option<u32>,
) -> Result<()> {
    let expected = match (contender, ours_pid) {
        (Contender::Upstream, _) => Some(kcm_pid),
        (Contender::Ours, pid) => pid,
    };
    let pids: Vec<u32> = found.iter().map(|(pid, _)| *pid).collect();
    match expected {
        Some(pid) if pids == [pid] => Ok(()),
        None if pids.is_empty() => Ok(()),
        _ => bail!(
            "expected {} as the only Deployment controller of the cluster, found {}",
            match (contender, expected) {
                (Contender::Upstream, _) => format!("kube-controller-manager (pid {kcm_pid})"),
                (Contender::Ours, Some(pid)) => format!("our deployment-controller (pid {pid})"),
                (Contender::Ours, None) => "none yet".to_owned(),
            },
            describe_found(found)
        ),
    }
}

/// Fails if any controller of `kind` runs against cluster `info`.
pub fn ensure_none_of(info: &ClusterInfo, kind: process::Workload) -> Result<()> {
    let running = process::controllers_of(&info.dir, kind);
    if !running.is_empty() {
        bail!(
            "a {kind:?} controller already runs against cluster '{}': {running:?}",
            info.name
        );
    }
    Ok(())
}

/// Checks the ReplicaSet controllers found running against a cluster (`found`, see
/// [`replicaset_controllers`]): exactly the process `expected` (kube-controller-manager's or
/// ours), or none if `expected` is `None`.
pub fn check_replicaset_controllers(found: &[(u32, String)], expected: Option<u32>) -> Result<()> {
    let pids: Vec<u32> = found.iter().map(|(pid, _)| *pid).collect();
    match expected {
        Some(pid) if pids == [pid] => Ok(()),
        None if pids.is_empty() => Ok(()),
        _ => bail!(
            "expected {} as the ReplicaSet controller of the cluster, found {}",
            match expected {
                Some(pid) => format!("pid {pid} alone"),
                None => "none".to_owned(),
            },
            describe_found(found)
        ),
    }
}

/// Fails if any Deployment controller runs against cluster `info`.
pub fn ensure_none(info: &ClusterInfo) -> Result<()> {
    let running = deployment_controllers(&info.dir);
    if !running.is_empty() {
        bail!(
            "a Deployment controller already runs against cluster '{}': {running:?}",
            info.name
        );
    }
    Ok(())
}

/// A detached `sh` that waits for this xtask process to disappear (Ctrl-C, kill), then stops
/// the controller recorded in `controller_pid_file` (if any) and cluster `cluster`. Callers that
/// finish normally tear down themselves and kill the watcher.
pub fn spawn_reaper(cluster: &str, controller_pid_file: &Path) -> Result<Child> {
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
pub fn dismiss_reaper(reaper: Option<Child>) {
    if let Some(mut r) = reaper {
        let _ = r.kill();
        let _ = r.wait();
    }
}

/// The processes found, for an error message: `pid N: command line; …`, or `none`.
fn describe_found(found: &[(u32, String)]) -> String {
    if found.is_empty() {
        return "none".to_owned();
    }
    found
        .iter()
        .map(|(pid, cmd)| format!("pid {pid}: {cmd}"))
        .collect::<Vec<_>>()
        .join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exactly_the_chosen_controller_may_run() {
        let kcm = (10, "kube-controller-manager --controllers=*".to_owned());
        let ours = (20, "deployment-controller --kubeconfig /x".to_owned());
        // Upstream: kube-controller-manager alone.
        assert!(
            check_controllers(Contender::Upstream, std::slice::from_ref(&kcm), 10, None).is_ok()
        );
        assert!(check_controllers(Contender::Upstream, &[], 10, None).is_err());
        assert!(
            check_controllers(Contender::Upstream, &[kcm.clone(), ours.clone()], 10, None).is_err()
        );
        // Ours: none before it starts, then ours alone.
        assert!(check_controllers(Contender::Ours, &[], 10, None).is_ok());
        let err = check_controllers(Contender::Ours, std::slice::from_ref(&kcm), 10, None)
            .unwrap_err()
            .to_string();
        assert!(err.contains("none yet") && err.contains("pid 10"), "{err}");
        assert!(
            check_controllers(Contender::Ours, std::slice::from_ref(&ours), 10, Some(20)).is_ok()
        );
        assert!(check_controllers(Contender::Ours, &[kcm, ours.clone()], 10, Some(20)).is_err());
        assert!(check_controllers(Contender::Ours, &[ours], 10, Some(21)).is_err());
    }

    #[test]
    fn exactly_the_expected_replicaset_controller_may_run() {
        let kcm = (
            10,
            "kube-controller-manager --controllers=*,-deployment-controller".to_owned(),
        );
        let ours = (
            20,
            "deployment-controller --controllers=*,replicaset-controller".to_owned(),
        );
        assert!(check_replicaset_controllers(std::slice::from_ref(&kcm), Some(10)).is_ok());
        assert!(check_replicaset_controllers(&[], None).is_ok());
        assert!(check_replicaset_controllers(&[], Some(20)).is_err());
        let err = check_replicaset_controllers(&[kcm.clone(), ours.clone()], Some(20))
            .unwrap_err()
            .to_string();
        assert!(err.contains("pid 10: kube-controller-manager"), "{err}");
        assert!(check_replicaset_controllers(std::slice::from_ref(&ours), None).is_err());
    }

    #[test]
    fn the_reaper_stops_the_controller_then_the_cluster() {
        let script = reaper_script(42, Path::new("/t/c.pid"), Path::new("/t/xtask"), "dev");
        assert!(script.starts_with("while kill -0 42"), "{script}");
        assert!(script.contains("cut -d' ' -f1 '/t/c.pid'"), "{script}");
        assert!(
            script.ends_with("exec '/t/xtask' cluster down --name 'dev'"),
            "{script}"
        );
    }
}

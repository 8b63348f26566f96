//! Operations on a started plane: stopping it, its status report, fault injection (kill and
//! restart, signals) and etcd compaction.

use super::*;

/// Stops every process of the cluster (pid files first, then a `/proc` scan for strays),
/// whichever release it runs, and removes its runtime state, keeping the logs. Returns the
/// number of processes stopped.
pub fn stop(layout: &Layout) -> Result<usize> {
    let roots = cache_roots(read_state(layout).as_ref());
    let mut stopped = 0;
    // Processes attached by the cluster's user go first: a controller is stopped while the
    // API server it talks to still answers.
    let attached: Vec<_> = layout
        .attached()
        .into_iter()
        .filter_map(|(path, rec)| match rec {
            Some(rec) if rec.is_running() => Some(rec),
            _ => {
                eprintln!("  ignoring stale pid file {}", path.display());
                None
            }
        })
        .collect();
    if !attached.is_empty() {
        stopped += process::stop_all(&attached, &[], Duration::from_secs(15))?;
    }
    let mut groups = Vec::new();
    for c in Component::ALL.iter().rev() {
        let pid_file = layout.pid_file(*c);
        match process::read_pid_file(&pid_file) {
            Some(rec) if matches!(liveness(layout, &roots, *c), Liveness::Running(_)) => {
                groups.push(rec)
            }
            Some(rec) => eprintln!(
                "  ignoring stale pid file of {} (pid {} is gone or not ours)",
                c.name(),
                rec.pid
            ),
            None => {}
        }
    }
    // Only the server binaries: a user's `kubectl … -w` against this cluster is not ours to kill.
    let names: Vec<&str> = Component::ALL
        .iter()
        .map(|c| c.binary().file_name())
        .collect();
    let strays: Vec<u32> = process::find_strays(&names, &layout.dir)
        .into_iter()
        .filter(|p| !groups.iter().any(|g| g.pid == *p))
        .collect();
    if !strays.is_empty() {
        eprintln!("  found stray processes of this cluster without pid files: {strays:?}");
    }
    stopped += process::stop_all(&groups, &strays, Duration::from_secs(15))?;
    for entry in [
        "run",
        "etcd-data",
        "state.json",
        "pki",
        "kubeconfig",
        "manifests",
    ] {
        let path = layout.dir.join(entry);
        let _ = if path.is_dir() {
            fs::remove_dir_all(&path)
        } else {
            fs::remove_file(&path)
        };
    }
    Ok(stopped)
}

/// One row of `status`.
pub struct ComponentStatus {
    /// Component.
    pub component: Component,
    /// Pid-file verdict.
    pub liveness: Liveness,
    /// Port it serves on, if the cluster has a state file.
    pub port: Option<u16>,
    /// Whether that port accepts connections.
    pub listening: bool,
}

/// Report of `status`.
pub struct StatusReport {
    /// Per component.
    pub components: Vec<ComponentStatus>,
    /// Cluster info if a state file exists.
    pub info: Option<ClusterInfo>,
    /// `/readyz` of the apiserver.
    pub apiserver_ready: bool,
    /// Ready nodes / all nodes.
    pub nodes: Option<(usize, usize)>,
    /// What the state file records the cluster runs: `Kubernetes v1.37.2, etcd v3.7.0, kwok
    /// v0.8.0`.
    pub versions: Option<String>,
    /// Per binary cache (the cluster's, or every supported release's if there is no state
    /// file): release, directory and whether every binary is built.
    pub caches: Vec<(&'static str, PathBuf, bool)>,
}

impl StatusReport {
    /// Whether the cluster is fully up.
    pub fn healthy(&self) -> bool {
        self.apiserver_ready
            && self
                .components
                .iter()
                .all(|c| matches!(c.liveness, Liveness::Running(_)) && c.listening)
    }
}

/// Inspects cluster `name` without changing anything.
pub fn status(name: &str) -> Result<StatusReport> {
    validate_name(name)?;
    let layout = Layout::new(name);
    let state = read_state(&layout);
    let info = state.as_ref().map(|s| ClusterInfo::from_state(&layout, s));
    let roots = cache_roots(state.as_ref());
    let components = Component::ALL
        .iter()
        .map(|c| {
            let port = state.as_ref().map(|s| c.port(&s.ports));
            ComponentStatus {
                component: *c,
                liveness: liveness(&layout, &roots, *c),
                port,
                listening: port.is_some_and(port_open),
            }
        })
        .collect();
    let (mut apiserver_ready, mut nodes) = (false, None);
    if let Some(info) = &info {
        let k = Kubectl {
            bin: info.kubectl.clone(),
            kubeconfig: info.admin_kubeconfig.clone(),
        };
        if info.kubectl.is_file() && k.ok(&["get", "--raw", "/readyz"]) {
            apiserver_ready = true;
            let total = k
                .run(&["get", "nodes", "-o", "name"], None)
                .map(|s| s.lines().filter(|l| !l.is_empty()).count())
                .unwrap_or(0);
            nodes = ready_nodes(&k).ok().map(|r| (r, total));
        }
    }
    let caches = match &state {
        // A release this xtask does not support has no cache to report.
        Some(s) => state_cache(name, s).into_iter().collect(),
        None => Cache::all()?,
    };
    Ok(StatusReport {
        components,
        info,
        apiserver_ready,
        nodes,
        versions: state.as_ref().map(|s| {
            format!(
                "Kubernetes {}, etcd {}, kwok {}",
                s.kubernetes, s.etcd, s.kwok
            )
        }),
        caches: caches
            .into_iter()
            .map(|c| (c.release.kubernetes, c.root.clone(), c.missing().is_empty()))
            .collect(),
    })
}

/// Kills one component of running cluster `name` with SIGKILL (no chance to clean up, as a
/// crash) and starts it again with the same flags and ports, appending to the same log.
/// Waits until it serves again (`/readyz` for the apiserver, its port for the others) and
/// returns how long the restart took. For fault injection (`cargo xtask chaos`).
pub fn kill_and_restart(name: &str, c: Component) -> Result<Duration> {
    validate_name(name)?;
    let layout = Layout::new(name);
    let state = read_state(&layout).ok_or_else(|| not_running(name))?;
    let cache = state_cache(name, &state)?;
    let binary = cache.binary(c.binary());
    let rec = process::read_pid_file(&layout.pid_file(c))
        .filter(|r| r.is_ours_and_running(&binary))
        .ok_or_else(|| anyhow!("{} of cluster '{name}' is not running", c.name()))?;
    let started = Instant::now();
    process::kill_group(rec.pid)?;
    // The leader of a multi-threaded process shows as a zombie while its other threads are
    // still exiting and holding its sockets: wait for the listener to be gone, or the new
    // process could not bind the port.
    let port = c.port(&state.ports);
    let deadline = Instant::now() + Duration::from_secs(10);
    while port_open(port) {
        if Instant::now() > deadline {
            bail!(
                "port {port} still accepts connections 10 s after {} was killed",
                c.name()
            );
        }
        thread::sleep(Duration::from_millis(20));
    }
    let pki = Pki { dir: layout.pki() };
    let mut argv = args(c, &layout, &pki, &state.ports, &cache, name);
    match c {
        Component::Apiserver => argv.extend(apiserver_extra_args(
            &state.feature_gates,
            &state.apiserver_args,
        )?),
        Component::ControllerManager => {
            argv = with_controllers(
                argv,
                state.deployment_controller,
                state.replicaset_controller,
            );
            argv.extend(state.controller_manager_args.iter().cloned());
        }
        Component::Scheduler => argv.extend(state.scheduler_args.iter().cloned()),
        _ => {}
    }
    let log = layout.log(c);
    let (child, _) = process::spawn(&binary, &argv, &log, &layout.pid_file(c))?;
    let mut started_now = vec![Started {
        component: c,
        child,
        log,
    }];
    let info = ClusterInfo::from_state(&layout, &state);
    let admin = Kubectl {
        bin: info.kubectl.clone(),
        kubeconfig: info.admin_kubeconfig.clone(),
    };
    let etcd_endpoint = info.etcd_endpoint.clone();
    wait_for(
        &format!("{} serves again", c.name()),
        Duration::from_secs(180),
        &mut started_now,
        c,
        &layout,
        || match c {
            Component::Apiserver => admin.ok(&["get", "--raw", "/readyz"]),
            Component::Etcd => etcd::healthy(&etcd_endpoint),
            _ => port_open(port),
        },
    )?;
    // The component is detached (own process group, pid file) and outlives this call; a
    // thread reaps it whenever it exits, so a later kill leaves no zombie behind.
    for s in started_now {
        let mut child = s.child;
        thread::spawn(move || child.wait());
    }
    Ok(started.elapsed())
}

/// Sends `signal` (e.g. `STOP`, `CONT`) to one component of running cluster `name`.
pub fn signal_component(name: &str, c: Component, signal: &str) -> Result<()> {
    validate_name(name)?;
    let layout = Layout::new(name);
    let state = read_state(&layout).ok_or_else(|| not_running(name))?;
    let binary = Cache::binary_in(&state.cache_dir, c.binary());
    let rec = process::read_pid_file(&layout.pid_file(c))
        .filter(|r| r.is_ours_and_running(&binary))
        .ok_or_else(|| anyhow!("{} of cluster '{name}' is not running", c.name()))?;
    let status = Command::new("kill")
        .args([&format!("-{signal}"), "--", &rec.pid.to_string()])
        .status()
        .context("running kill")?;
    if !status.success() {
        bail!("kill -{signal} {} failed ({status})", rec.pid);
    }
    Ok(())
}

/// The apiserver's port of cluster `name`, from its state file.
pub fn apiserver_port(name: &str) -> Result<u16> {
    let state = read_state(&Layout::new(name)).ok_or_else(|| not_running(name))?;
    Ok(state.ports.apiserver)
}

/// Compacts the etcd of cluster `name` at its current revision.
pub fn compact(name: &str) -> Result<i64> {
    let info = running_info(name)?.ok_or_else(|| not_running(name))?;
    etcd::compact(&info.etcd_endpoint)
}

/// The error for commands that need a running cluster.
pub fn not_running(name: &str) -> anyhow::Error {
    anyhow!("cluster '{name}' is not running; start it with `cargo xtask cluster up --name {name}`")
}

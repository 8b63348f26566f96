//! The two clusters of a comparison and the Deployment controller each runs: started afresh,
//! checked to run alone, observed, stopped.

use super::*;

impl Clusters {
    /// Stops leftovers of earlier runs (Deployment controllers, clusters) and starts each
    /// cluster afresh on `release`, its kube-controller-manager without a Deployment controller;
    /// `clusters` gives each name and whether its kube-controller-manager runs its ReplicaSet
    /// controller (otherwise ours runs, see [`Side::start_ours`]).
    pub(crate) fn start(clusters: &[(&str, bool)], release: &'static Release) -> Result<Clusters> {
        let mut started = Clusters {
            infos: Vec::new(),
            started: Vec::new(),
        };
        for (name, kcm_replicasets) in clusters {
            let up = fresh::start(
                &UpOptions {
                    name: (*name).to_owned(),
                    nodes: 3,
                    apiserver_args: Vec::new(),
                    feature_gates: Vec::new(),
                    scheduler_args: Vec::new(),
                    controller_manager_args: Vec::new(),
                    deployment_controller: false,
                    replicaset_controller: *kcm_replicasets,
                    release,
                },
                Fresh {
                    reaper_pid_file: Some(&controller_pid_file(name)),
                    keep_on_failure: false,
                },
            );
            match up {
                Ok(cluster) => {
                    started.infos.push(cluster.info.clone());
                    started.started.push(cluster);
                }
                Err(e) => {
                    let _ = started.down();
                    return Err(e);
                }
            }
        }
        Ok(started)
    }

    /// Stops every cluster.
    pub(crate) fn down(self) -> Result<()> {
        let mut first_err = None;
        for cluster in self.started {
            if let Err(e) = cluster.down() {
                first_err.get_or_insert(e);
            }
        }
        first_err.map_or(Ok(()), Err)
    }

    /// Leaves the clusters running and dismisses the watchers.
    pub(crate) fn dismiss(self) {
        for cluster in self.started {
            cluster.dismiss();
        }
    }
}

impl Side {
    /// Starts upstream's Deployment controller (a second kube-controller-manager) on `info`,
    /// after checking that none runs; then checks that it alone runs. The cluster's
    /// kube-controller-manager must run its ReplicaSet controller.
    pub(crate) fn start_upstream(info: &ClusterInfo, kcm: &Path) -> Result<Side> {
        let log = controller_pid_file(&info.name).with_extension("log");
        let mut side = Side {
            controller: Contender::Upstream,
            replica_sets: ReplicaSets::ClusterKcm,
            info: info.clone(),
            process: None,
            names: Names::default(),
            events: None,
        };
        side.check_none()?;
        side.process = Some(supervisor::start_upstream(kcm, info, &log)?);
        side.check_alone()?;
        Ok(side)
    }

    /// Starts our release `deployment-controller` on `info` (with deploy/'s RBAC), after
    /// checking that none runs; then checks that it alone runs. With `replicaset` it runs our
    /// ReplicaSet controller too ([`WITH_REPLICASET_CONTROLLER`]), and the cluster's
    /// kube-controller-manager must run none; without, the cluster's must run its own.
    pub(crate) fn start_ours(info: &ClusterInfo, binary: &Path, replicaset: bool) -> Result<Side> {
        let log = controller_pid_file(&info.name).with_extension("log");
        let mut side = Side {
            controller: Contender::Ours,
            replica_sets: if replicaset {
                ReplicaSets::Ours
            } else {
                ReplicaSets::ClusterKcm
            },
            info: info.clone(),
            process: None,
            names: Names::default(),
            events: None,
        };
        side.check_none()?;
        xtask_contender::rbac::grant_deploy_rbac(&info.kubectl, &info.admin_kubeconfig)?;
        let mut args = vec!["--secure-port", "0"];
        if replicaset {
            args.push(WITH_REPLICASET_CONTROLLER);
        }
        side.process = Some(supervisor::start(
            binary,
            &info.controller_kubeconfig,
            &log,
            &args,
        )?);
        side.check_alone()?;
        Ok(side)
    }

    pub(super) fn running(&self) -> Vec<(u32, String)> {
        fresh::deployment_controllers(&self.info.dir)
    }

    /// The pid of the cluster's kube-controller-manager.
    fn cluster_kcm(&self) -> Option<u32> {
        kctrl_cluster::process::read_pid_file(
            &Layout::at(&self.info.dir).pid_file(Component::ControllerManager),
        )
        .filter(|r| r.is_running())
        .map(|r| r.pid)
    }

    /// Exactly the expected ReplicaSet controller runs: the cluster's kube-controller-manager,
    /// or ours (`ours`: our process's pid, `None` before it starts).
    fn check_replicasets(&self, ours: Option<u32>) -> Result<()> {
        let expected = match self.replica_sets {
            ReplicaSets::ClusterKcm => Some(
                self.cluster_kcm()
                    .context("the cluster's kube-controller-manager does not run")?,
            ),
            ReplicaSets::Ours => ours,
        };
        fresh::check_replicaset_controllers(
            &fresh::replicaset_controllers(&self.info.dir),
            expected,
        )
    }

    /// No Deployment controller runs against the cluster, and no ReplicaSet controller but the
    /// cluster's kube-controller-manager's if it is to run one.
    pub(crate) fn check_none(&self) -> Result<()> {
        check_controllers(Contender::Ours, &self.running(), 0, None)
            .and_then(|()| self.check_replicasets(None))
            .with_context(|| format!("cluster {}", self.info.name))
    }

    /// Exactly this side's controller runs against the cluster, by pid.
    pub(crate) fn check_alone(&self) -> Result<()> {
        let pid = self.process.as_ref().map(ControllerProcess::pid);
        let found = self.running();
        match (self.controller, pid) {
            (Contender::Upstream, Some(pid)) => {
                check_controllers(Contender::Upstream, &found, pid, None)
            }
            (_, pid) => check_controllers(Contender::Ours, &found, 0, pid),
        }
        .and_then(|()| self.check_replicasets(pid))
        .with_context(|| format!("cluster {}", self.info.name))?;
        eprintln!(
            "==> {}: the only Deployment controller is {} (pid {}); the only ReplicaSet \
             controller {}",
            self.info.name,
            self.controller_name(),
            pid.unwrap_or(0),
            match self.replica_sets {
                ReplicaSets::ClusterKcm => "the cluster's kube-controller-manager's",
                ReplicaSets::Ours => "ours",
            }
        );
        Ok(())
    }

    pub(super) fn controller_name(&self) -> &'static str {
        match self.controller {
            Contender::Upstream => "kube-controller-manager --controllers=deployment-controller",
            Contender::Ours => "our deployment-controller",
        }
    }

    /// Checks it still runs alone, stops it and checks that none is left.
    pub(crate) fn stop(mut self) -> Result<()> {
        let alone = self.check_alone();
        if let Some(p) = self.process.take() {
            let pid = p.pid();
            let stopped = p.stop();
            if self.running().iter().any(|(p, _)| *p == pid) {
                bail!(
                    "{} (pid {pid}) still runs after being stopped",
                    self.controller_name()
                );
            }
            if let Err(e) = stopped {
                // kube-controller-manager exits with SIGTERM's status; gone is what matters.
                let e = format!("{e:#}");
                eprintln!(
                    "==> stopping {}: {}",
                    self.controller_name(),
                    e.lines().next().unwrap_or_default()
                );
            }
        }
        self.check_none()?;
        alone
    }

    /// `kubectl --kubeconfig <admin> [-n ns] args…` with optional stdin: (exit code, stdout,
    /// stderr).
    pub(crate) fn kubectl_in(
        &self,
        ns: Option<&str>,
        args: &[&str],
        stdin: Option<&str>,
    ) -> Result<(i32, String, String)> {
        let mut cmd = Command::new(&self.info.kubectl);
        cmd.arg("--kubeconfig").arg(&self.info.admin_kubeconfig);
        if let Some(ns) = ns {
            cmd.args(["-n", ns]);
        }
        cmd.args(args)
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd
            .spawn()
            .with_context(|| format!("running {}", self.info.kubectl.display()))?;
        if let Some(text) = stdin {
            child
                .stdin
                .take()
                .context("kubectl stdin")?
                .write_all(text.as_bytes())?;
        }
        let out = child.wait_with_output()?;
        Ok((
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        ))
    }

    /// JSON output of `kubectl get … -o json` in `ns`.
    pub(crate) fn get_json(&self, ns: &str, what: &str) -> Result<Value> {
        let (code, out, err) = self.kubectl_in(Some(ns), &["get", what, "-o", "json"], None)?;
        if code != 0 {
            bail!(
                "{}: kubectl get {what} failed: {}",
                self.info.name,
                err.trim()
            );
        }
        serde_json::from_str(&out).with_context(|| format!("kubectl get {what}: not JSON"))
    }

    /// The structural observation (no events or rollout output).
    pub(super) fn snapshot(&mut self, ns: &str) -> Result<Observation> {
        let list = self.get_json(ns, "deployments,replicasets,pods")?;
        Ok(Observation::from_list(&list, &mut self.names))
    }

    /// The full observation: the snapshot, events, `rollout status` and `rollout history`.
    pub(super) fn observe(&mut self, ns: &str) -> Result<Observation> {
        let mut obs = self.snapshot(ns)?;
        // Every version the watch saw, and the current list in case the watch lags behind.
        let seen = self
            .events
            .as_ref()
            .map(EventWatch::seen)
            .unwrap_or_default();
        let current = self.get_json(ns, "events")?;
        let listed = current["items"].as_array().into_iter().flatten();
        obs.add_events(seen.iter().chain(listed), &self.names);
        for d in obs.deployment_names() {
            let target = format!("deployment/{d}");
            for (what, args) in [
                (
                    "status",
                    vec!["rollout", "status", &target, "--watch=false"],
                ),
                ("history", vec!["rollout", "history", &target]),
            ] {
                let (code, out, err) = self.kubectl_in(Some(ns), &args, None)?;
                let text = format!("exit {code}: {}{}", out, err);
                obs.add_rollout(&d, what, &text, &self.names);
            }
        }
        Ok(obs)
    }

    /// Runs a step's action: (exit code, normalised output).
    pub(super) fn act(&self, ns: &str, action: &Action) -> Result<Value> {
        let (code, out, err) = match action {
            Action::Kubectl(args) => {
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                self.kubectl_in(Some(ns), &args, None)?
            }
            Action::Apply(objects) => {
                let list =
                    serde_json::json!({"apiVersion": "v1", "kind": "List", "items": objects});
                self.kubectl_in(Some(ns), &["apply", "-f", "-"], Some(&list.to_string()))?
            }
        };
        Ok(serde_json::json!({
            "exit": code,
            "output": self.names.apply(format!("{out}{err}").trim_end()),
        }))
    }
}

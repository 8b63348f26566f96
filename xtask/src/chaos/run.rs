//! The run's fixture: the clients, the Deployments and their rollouts, our controller under
//! supervision, and the closing checks (caches against fresh lists, the controller's log, a
//! clean stop).

use super::*;

/// How old a `replicaset-pods` peak must be before a phase's count judges it: time for the
/// independent watch's ReplicaSet stream to show a scale-up its Pod stream has already shown
/// the Pods of (each stream is ordered, the two are not ordered with each other).
pub(super) const SETTLE_AFTER: Duration = Duration::from_secs(5);

impl<'a> Run<'a> {
    pub(super) async fn start(
        plan: &'a Plan,
        name: &'a str,
        info: &'a ClusterInfo,
        binary: &'a Path,
        log: &'a Path,
        seed: u64,
        ours_replicaset: bool,
    ) -> Result<Run<'a>> {
        tokio::task::block_in_place(|| {
            xtask_contender::rbac::grant_deploy_rbac(&info.kubectl, &info.admin_kubeconfig)
        })?;
        let admin = client(&info.admin_kubeconfig)?;
        let upstream = SocketAddr::from(([127, 0, 0, 1], plane::apiserver_port(name)?));
        let proxy = FaultProxy::start(upstream).await?;
        // The controller's kubeconfig, pointed at the proxy; kept in the cluster's directory so
        // the check for Deployment controllers of this cluster sees the process.
        let original = fs::read_to_string(&info.controller_kubeconfig)
            .with_context(|| format!("reading {}", info.controller_kubeconfig.display()))?;
        if !original.contains(&info.apiserver_url) {
            bail!(
                "{} does not name {}",
                info.controller_kubeconfig.display(),
                info.apiserver_url
            );
        }
        let kubeconfig = info
            .dir
            .join("kubeconfig")
            .join("chaos-controller.kubeconfig");
        fs::write(
            &kubeconfig,
            original.replace(&info.apiserver_url, &format!("https://{}", proxy.addr())),
        )?;
        let run_id = format!("{:x}", seed & 0xffff_ffff);
        let checker = Arc::new(Mutex::new(Checker::default()));
        let watch_stats = Arc::new(WatchStats::default());
        let cancel = CancellationToken::new();
        let watch_tasks = watch::start(
            admin.clone(),
            &run_id,
            checker.clone(),
            watch_stats.clone(),
            cancel.clone(),
        )
        .await;
        let mut run = Run {
            plan,
            name,
            info,
            binary,
            log,
            seed,
            rng: fastrand::Rng::with_seed(seed),
            admin,
            run_id,
            proxy,
            kubeconfig,
            metrics_port: free_port()?,
            controller: None,
            ours_replicaset,
            controller_kills: 0,
            checker,
            watch_stats,
            cancel,
            watch_tasks,
            deployments: Vec::new(),
            rollouts: 0,
            problems: Vec::new(),
            initial_rollout: Duration::ZERO,
            faults: (0, 0),
            phases: Vec::new(),
        };
        run.start_controller()?;
        Ok(run)
    }

    /// Starts our controller (through the proxy) and checks it is the cluster's only one.
    pub(super) fn start_controller(&mut self) -> Result<()> {
        let port = self.metrics_port.to_string();
        // /metrics and /debug/cache are read without a token.
        let open_paths = format!(
            "--authorization-always-allow-paths={},/debug/cache",
            supervisor::ALWAYS_ALLOW_PATHS
        );
        let mut args = vec![
            "--leader-elect=false",
            "--secure-port",
            &port,
            "--debug-cache-endpoint",
            &open_paths,
        ];
        if self.ours_replicaset {
            args.push(xtask_contender::WITH_REPLICASET_CONTROLLER);
        }
        let c = tokio::task::block_in_place(|| {
            supervisor::start_with_env(
                self.binary,
                &self.kubeconfig,
                self.log,
                &args,
                &[("RUST_LOG", CONTROLLER_RUST_LOG)],
            )
        })?;
        let pid = c.pid();
        self.controller = Some(c);
        let found = fresh::deployment_controllers(&self.info.dir);
        let pids: Vec<u32> = found.iter().map(|(p, _)| *p).collect();
        if pids != [pid] {
            bail!(
                "expected our controller (pid {pid}) as the only Deployment controller, found {found:?}"
            );
        }
        Ok(())
    }

    /// Fails if the controller exited without being killed.
    pub(super) fn check_controller(&mut self) -> Result<()> {
        if let Some(c) = self.controller.as_mut()
            && let Some(status) = c.exited()?
        {
            bail!(
                "the deployment-controller exited on its own ({status}); log {}:\n{}",
                self.log.display(),
                process::tail(self.log, 30)
            );
        }
        Ok(())
    }

    /// The violations so far, the `replicaset-pods` peaks reached at least [`SETTLE_AFTER`]
    /// ago judged first.
    pub(super) fn violations(&self) -> usize {
        let mut checker = self.checker.lock().expect("checker lock");
        if let Some(cutoff) = Instant::now().checked_sub(SETTLE_AFTER) {
            checker.settle(cutoff);
        }
        checker.violations().len()
    }

    /// Waits a random gap before a fault, then notes whether a rollout is in progress.
    pub(super) async fn pause(&mut self) -> Result<()> {
        let (lo, hi) = self.plan.gap;
        let ms = self.rng.u64(lo * 1000..=hi * 1000);
        tokio::time::sleep(Duration::from_millis(ms)).await;
        let rolling = self
            .list_deployments()
            .await?
            .iter()
            .filter(|d| !complete(d))
            .count();
        self.faults.0 += 1;
        if rolling > 0 {
            self.faults.1 += 1;
        }
        Ok(())
    }

    pub(super) fn deployment_api(&self, ns: &str) -> Api<Deployment> {
        Api::namespaced(self.admin.clone(), ns)
    }

    /// Creates the namespaces and Deployments.
    pub(super) async fn create(&mut self) -> Result<()> {
        let pp = PostParams {
            field_manager: Some("kctrl-chaos".to_owned()),
            ..Default::default()
        };
        let namespaces: Api<Namespace> = Api::all(self.admin.clone());
        for n in 0..self.plan.namespaces {
            let ns: Namespace = serde_json::from_value(serde_json::json!({
                "metadata": {"name": format!("chaos-{}-{n}", self.run_id), "labels": {RUN_LABEL: self.run_id}}
            }))?;
            namespaces.create(&pp, &ns).await?;
        }
        for i in 0..self.plan.deployments {
            let ns = format!("chaos-{}-{}", self.run_id, i % self.plan.namespaces);
            let name = format!("d{i:03}");
            let recreate = (i + 1) % self.plan.recreate_every == 0;
            let strategy = if recreate {
                serde_json::json!({"type": "Recreate"})
            } else {
                serde_json::json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 1}})
            };
            let d: Deployment = serde_json::from_value(serde_json::json!({
                "metadata": {"name": name, "labels": {RUN_LABEL: self.run_id}},
                "spec": {
                    "replicas": self.plan.replicas,
                    "strategy": strategy,
                    "selector": {"matchLabels": {"app": name, RUN_LABEL: self.run_id}},
                    "template": {
                        "metadata": {
                            "labels": {"app": name, RUN_LABEL: self.run_id, DEPLOYMENT_LABEL: name},
                            "annotations": {"kctrl.dev/ready-after": self.plan.ready_after, "chaos.kctrl.dev/wave": "0"}
                        },
                        "spec": {
                            "containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10"}],
                            "terminationGracePeriodSeconds": 0
                        }
                    }
                }
            }))?;
            self.deployment_api(&ns).create(&pp, &d).await?;
            self.deployments.push((ns, name));
        }
        Ok(())
    }

    /// Lists the run's Deployments, retrying while the apiserver is unreachable.
    pub(super) async fn list_deployments(&self) -> Result<Vec<Deployment>> {
        let api: Api<Deployment> = Api::all(self.admin.clone());
        let params = ListParams {
            label_selector: Some(format!("{RUN_LABEL}={}", self.run_id)),
            ..Default::default()
        };
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            match api.list(&params).await {
                Ok(l) => return Ok(l.items),
                Err(e) if Instant::now() > deadline => {
                    return Err(e).context("listing the Deployments");
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(500)).await,
            }
        }
    }

    /// Starts a rollout of every Deployment (a new pod-template annotation).
    pub(super) async fn roll(&mut self) -> Result<()> {
        self.rollouts += 1;
        let wave = self.rollouts.to_string();
        let patch = Patch::Merge(serde_json::json!({
            "spec": {"template": {"metadata": {"annotations": {"chaos.kctrl.dev/wave": wave}}}}
        }));
        for (ns, name) in self.deployments.clone() {
            let api = self.deployment_api(&ns);
            let mut tries = 0;
            loop {
                match api.patch(&name, &PatchParams::default(), &patch).await {
                    Ok(_) => break,
                    Err(e) if tries >= 20 => {
                        return Err(e).with_context(|| format!("patching {ns}/{name}"));
                    }
                    Err(_) => {
                        tries += 1;
                        tokio::time::sleep(Duration::from_millis(500)).await;
                    }
                }
            }
        }
        Ok(())
    }

    /// Starts a rollout unless one is in progress.
    pub(super) async fn ensure_rolling(&mut self) -> Result<()> {
        if self.list_deployments().await?.iter().all(complete) {
            self.roll().await?;
        }
        Ok(())
    }

    /// Waits until every Deployment has converged; returns how long that took.
    pub(super) async fn converge(&mut self) -> Result<Duration> {
        let t0 = Instant::now();
        loop {
            self.check_controller()?;
            let all = self.list_deployments().await?;
            let pending = super::pending(&all);
            if pending.is_empty() && all.len() == self.deployments.len() {
                return Ok(t0.elapsed());
            }
            if t0.elapsed() > self.plan.converge_timeout {
                bail!(
                    "{} of {} Deployments did not converge within {}: {}",
                    pending.len(),
                    self.deployments.len(),
                    fmt_duration(self.plan.converge_timeout),
                    pending.into_iter().take(10).collect::<Vec<_>>().join("; ")
                );
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// The `/debug/cache` listing of the run's namespaces against a fresh list.
    pub(super) async fn compare_caches(&self) -> Result<Option<Vec<String>>> {
        let prefix = format!("chaos-{}-", self.run_id);
        let url = format!("https://127.0.0.1:{}/debug/cache", self.metrics_port);
        let cached: BTreeSet<String> = tokio::task::block_in_place(|| curl(&url))?
            .lines()
            .filter(|l| {
                l.split(' ')
                    .nth(1)
                    .is_some_and(|key| key.starts_with(&prefix))
            })
            .map(str::to_owned)
            .collect();
        let mut fresh = BTreeSet::new();
        let params = ListParams::default();
        for n in 0..self.plan.namespaces {
            let ns = format!("{prefix}{n}");
            let line = |r: &str, m: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta| {
                format!(
                    "{r} {ns}/{} {}",
                    m.name.as_deref().unwrap_or(""),
                    m.resource_version.as_deref().unwrap_or("")
                )
            };
            for d in Api::<Deployment>::namespaced(self.admin.clone(), &ns)
                .list(&params)
                .await?
                .items
            {
                fresh.insert(line("deployments", &d.metadata));
            }
            for rs in Api::<ReplicaSet>::namespaced(self.admin.clone(), &ns)
                .list(&params)
                .await?
                .items
            {
                fresh.insert(line("replicasets", &rs.metadata));
            }
            for p in Api::<Pod>::namespaced(self.admin.clone(), &ns)
                .list(&params)
                .await?
                .items
            {
                fresh.insert(line("pods", &p.metadata));
            }
        }
        if cached == fresh {
            return Ok(None);
        }
        Ok(Some(listing_diff(&cached, &fresh, 10)))
    }

    /// Final checks, controller stop, watch stop; the report.
    pub(super) async fn finish(mut self, outcome: Result<()>) -> Result<Report> {
        if let Err(e) = outcome {
            self.problems.push(format!("{e:#}"));
        }
        let phases = std::mem::take(&mut self.phases);
        // Caches: equal to a fresh list once the cluster is quiet (a few seconds for the last
        // events to arrive).
        let mut cache = String::from("not compared (the controller is not running)");
        if self.controller.is_some() && self.check_controller().is_ok() {
            let deadline = Instant::now() + Duration::from_secs(30);
            loop {
                match self.compare_caches().await {
                    Ok(None) => {
                        cache = "equal to a fresh list (keys and resourceVersions of the run's Deployments, ReplicaSets and Pods)".to_owned();
                        break;
                    }
                    Ok(Some(diff)) if Instant::now() > deadline => {
                        cache = format!("DIFFER from a fresh list: {}", diff.join("; "));
                        self.problems.push(cache.clone());
                        break;
                    }
                    Err(e) if Instant::now() > deadline => {
                        cache = format!("could not be compared: {e:#}");
                        self.problems.push(cache.clone());
                        break;
                    }
                    _ => tokio::time::sleep(Duration::from_secs(1)).await,
                }
            }
        }
        if let Err(e) = self.check_controller() {
            self.problems.push(format!("{e:#}"));
        }
        if let Some(c) = self.controller.take() {
            let pid = c.pid();
            if let Err(e) = tokio::task::block_in_place(|| c.stop()) {
                self.problems.push(format!(
                    "the controller did not stop cleanly on SIGTERM: {e:#}"
                ));
            }
            if fresh::deployment_controllers(&self.info.dir)
                .iter()
                .any(|(p, _)| *p == pid)
            {
                self.problems
                    .push(format!("the controller (pid {pid}) still runs after stop"));
            }
        }
        let log = fs::read_to_string(self.log).unwrap_or_default();
        for line in panic_lines(&log) {
            self.problems
                .push(format!("panic in the controller's log: {line}"));
        }
        self.cancel.cancel();
        for t in self.watch_tasks.drain(..) {
            let _ = t.await;
        }
        let mut checker = self.checker.lock().expect("checker lock");
        // The cluster has been quiet since the cache comparison: every peak can be judged.
        checker.settle(Instant::now());
        let s = &self.watch_stats;
        Ok(Report {
            profile: Profile::Short,
            replicaset_controller: ReplicaSetController::Ours,
            kubernetes: String::new(),
            seed: self.seed,
            deployments: self.deployments.len(),
            replicas: self.plan.replicas,
            initial_rollout: self.initial_rollout,
            phases,
            rollouts: self.rollouts,
            faults: self.faults,
            violations: checker.violations().iter().map(|v| v.to_string()).collect(),
            events: checker.events(),
            pod_checks: checker.pod_summary(),
            watch: format!(
                "{} lists, {} watches broken, {} of them by 410 Gone; controller killed {} times by the run, never exited otherwise",
                s.lists.load(Ordering::Relaxed),
                s.broken.load(Ordering::Relaxed),
                s.gone.load(Ordering::Relaxed),
                self.controller_kills
            ),
            problems: std::mem::take(&mut self.problems),
            cache,
            took: Duration::ZERO,
        })
    }
}

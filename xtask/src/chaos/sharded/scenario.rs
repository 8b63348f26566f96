//! The sharded profile's scenario: the replicas started, the Deployments created and rolled,
//! the three faults, and the waits that time them.

use super::*;

impl<'a> ShardedRun<'a> {
    pub(super) fn new(
        plan: &'a ShardPlan,
        info: &'a ClusterInfo,
        binary: &'a Path,
        out_dir: &'a Path,
        seed: u64,
        gate: bool,
    ) -> Result<ShardedRun<'a>> {
        Ok(ShardedRun {
            plan,
            info,
            binary,
            out_dir,
            rng: fastrand::Rng::with_seed(seed),
            run_id: format!("{:x}", seed & 0xffff_ffff),
            admin: client(&info.admin_kubeconfig)?,
            replicas: Vec::new(),
            namespaces: Vec::new(),
            deployments: Vec::new(),
            waves: 0,
            report: GateReport {
                gate,
                ..GateReport::default()
            },
        })
    }

    pub(super) async fn scenario(&mut self) -> Result<()> {
        tokio::task::block_in_place(|| self.grant_rbac())?;
        let t0 = Instant::now();
        for _ in 0..self.plan.replicas {
            self.start_replica()?;
        }
        self.wait_covered(None, Duration::from_secs(120)).await?;
        self.report.split = t0.elapsed();
        eprintln!(
            "==> {} replicas hold every bucket, {} after they started",
            self.plan.replicas,
            fmt_duration(self.report.split)
        );
        self.create().await?;
        self.report.initial_rollout = self.converge().await?;
        eprintln!(
            "==> {} Deployments rolled out in {}",
            self.deployments.len(),
            fmt_duration(self.report.initial_rollout)
        );
        let caches = self.check_caches("after the initial rollout").await?;
        self.report.caches.push(caches);

        // 1. kill -9 one replica during a rollout.
        self.roll().await?;
        self.pause().await;
        let victim = self.pick_live();
        let (label, pid) = (
            self.replicas[victim].label.clone(),
            self.replicas[victim].pid,
        );
        eprintln!("==> kill -9 replica {label} (pid {pid})");
        let t = Instant::now();
        if let Some(p) = self.replicas[victim].process.take() {
            p.kill()?;
        }
        self.replicas[victim].fate = "killed (SIGKILL)";
        if !gone(pid) {
            self.report.problems.push(format!(
                "replica {label} (pid {pid}) still runs after kill -9"
            ));
        }
        let handover = self.wait_covered(None, Duration::from_secs(90)).await?;
        let converged = self.converge().await?;
        eprintln!(
            "==> survivors hold every bucket {} after the kill; converged after {}",
            fmt_duration(handover),
            fmt_duration(converged)
        );
        debug_assert!(t.elapsed() >= handover);
        self.report.faults.push((
            "kill -9 a replica".to_owned(),
            format!(
                "{label} killed during a rollout; its buckets taken over once its Lease expired"
            ),
            handover,
            converged,
        ));

        // 2. A replica joins during a rollout.
        self.roll().await?;
        self.pause().await;
        let t = Instant::now();
        let added = self.start_replica()?;
        let started_in = t.elapsed();
        let rebalance = self
            .wait_covered(Some(added), Duration::from_secs(90))
            .await?;
        let converged = self.converge().await?;
        let label = self.replicas[added].label.clone();
        eprintln!(
            "==> replica {label} holds its share {} after its start; converged after {}",
            fmt_duration(rebalance),
            fmt_duration(converged)
        );
        self.report.faults.push((
            "add a replica".to_owned(),
            format!(
                "{label} started during a rollout (caches synced in {}), took its share from the others",
                fmt_duration(started_in)
            ),
            rebalance,
            converged,
        ));

        // 3. SIGSTOP one past its Lease, then SIGCONT.
        self.roll().await?;
        self.pause().await;
        let stopped = self.pick_live();
        let (label, pid) = (
            self.replicas[stopped].label.clone(),
            self.replicas[stopped].pid,
        );
        eprintln!(
            "==> SIGSTOP replica {label} (pid {pid}) for {}",
            fmt_duration(self.plan.stop_for)
        );
        let t = Instant::now();
        signal(pid, "STOP")?;
        self.replicas[stopped].fate = "stopped past its Lease";
        let takeover = self.wait_covered_without(stopped, self.plan.stop_for).await;
        let remaining = self.plan.stop_for.saturating_sub(t.elapsed());
        tokio::time::sleep(remaining).await;
        eprintln!("==> SIGCONT replica {label}");
        signal(pid, "CONT")?;
        let exited = self.wait_exit(stopped, Duration::from_secs(30)).await?;
        let converged = self.converge().await?;
        let detail = match &exited {
            Some(status) if !status.success() => {
                self.replicas[stopped].fate = "exited non-zero after SIGCONT (lease lost)";
                format!(
                    "{label} stopped {}, others took its buckets over; after SIGCONT it exited \
                     with {status}",
                    fmt_duration(self.plan.stop_for)
                )
            }
            Some(status) => {
                self.report.problems.push(format!(
                    "replica {label} exited with {status} after SIGCONT, expected a failure \
                     (its Lease was lost)"
                ));
                format!("{label} exited with {status}")
            }
            None => {
                self.report.problems.push(format!(
                    "replica {label} still runs 30 s after SIGCONT although its Lease expired"
                ));
                format!("{label} kept running")
            }
        };
        match takeover {
            Some(takeover) => self.report.faults.push((
                "SIGSTOP a replica past its Lease".to_owned(),
                detail,
                takeover,
                converged,
            )),
            None => {
                self.report.problems.push(format!(
                    "the others did not hold every bucket within {} of stopping {label}",
                    fmt_duration(self.plan.stop_for)
                ));
                self.report.faults.push((
                    "SIGSTOP a replica past its Lease".to_owned(),
                    detail,
                    self.plan.stop_for,
                    converged,
                ));
            }
        }
        let caches = self.check_caches("after the faults").await?;
        self.report.caches.push(caches);
        self.check_replica_sets_and_generations().await?;
        Ok(())
    }

    pub(super) fn grant_rbac(&self) -> Result<()> {
        xtask_contender::rbac::grant_sharded_rbac(&self.info.kubectl, &self.info.admin_kubeconfig)
    }

    /// Starts one more replica and waits for its caches and its join; its index.
    pub(super) fn start_replica(&mut self) -> Result<usize> {
        let index = self.replicas.len();
        let port = free_port()?;
        let log = self.out_dir.join(format!("replica-{index}.log"));
        let open_paths = format!(
            "--authorization-always-allow-paths={},/debug/cache",
            supervisor::ALWAYS_ALLOW_PATHS
        );
        let port_arg = port.to_string();
        let process = tokio::task::block_in_place(|| {
            supervisor::start_with_env(
                self.binary,
                &self.info.controller_kubeconfig,
                &log,
                &[
                    "--shard-by=namespace",
                    &format!("--shard-lease-namespace={LEASE_NAMESPACE}"),
                    "--secure-port",
                    &port_arg,
                    "--debug-cache-endpoint",
                    &open_paths,
                ],
                &[("RUST_LOG", "info")],
            )
        })?;
        let pid = process.pid();
        let deadline = Instant::now() + Duration::from_secs(30);
        let identity = loop {
            if let Some(id) = logged_identity(&fs::read_to_string(&log).unwrap_or_default()) {
                break id;
            }
            if Instant::now() > deadline {
                bail!(
                    "replica {index} (pid {pid}) never logged joining the shard group; log {}:\n{}",
                    log.display(),
                    process::tail(&log, 30)
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        eprintln!("==> replica r{index}: pid {pid}, port {port}, identity {identity}");
        self.replicas.push(Replica {
            label: format!("r{index}"),
            port,
            log,
            pid,
            identity,
            process: Some(process),
            fate: "stopped by SIGTERM at the end",
        });
        self.check_controllers()?;
        Ok(index)
    }

    /// The live replicas are exactly the cluster's Deployment controllers.
    pub(super) fn check_controllers(&self) -> Result<()> {
        let found: BTreeSet<u32> = fresh::deployment_controllers(&self.info.dir)
            .iter()
            .map(|(p, _)| *p)
            .collect();
        let ours: BTreeSet<u32> = self
            .replicas
            .iter()
            .filter(|r| r.process.is_some())
            .map(|r| r.pid)
            .collect();
        if found != ours {
            bail!(
                "expected our replicas {ours:?} as the cluster's Deployment controllers, found {found:?}"
            );
        }
        Ok(())
    }

    pub(super) fn live(&self) -> Vec<usize> {
        (0..self.replicas.len())
            .filter(|&i| self.replicas[i].process.is_some())
            .collect()
    }

    pub(super) fn pick_live(&mut self) -> usize {
        let live = self.live();
        live[self.rng.usize(0..live.len())]
    }

    /// Fails if a replica exited on its own.
    pub(super) fn check_exits(&mut self) -> Result<()> {
        for r in &mut self.replicas {
            if let Some(p) = r.process.as_mut()
                && let Some(status) = p.exited()?
            {
                bail!(
                    "replica {} exited on its own ({status}); log {}:\n{}",
                    r.label,
                    r.log.display(),
                    process::tail(&r.log, 30)
                );
            }
        }
        Ok(())
    }

    /// Buckets held by each of `replicas` (`None` for one that did not answer).
    pub(super) fn held(&self, replicas: &[usize]) -> Vec<Option<usize>> {
        replicas
            .iter()
            .map(|&i| {
                let url = format!("https://127.0.0.1:{}/metrics", self.replicas[i].port);
                xtask_contender::probe::curl_within(&url, 3)
                    .ok()
                    .and_then(|m| held_buckets(&m))
            })
            .collect()
    }

    /// Waits until the live replicas together hold every bucket, each at least one (and
    /// `joiner`, if given, among them); how long that took.
    pub(super) async fn wait_covered(
        &mut self,
        joiner: Option<usize>,
        limit: Duration,
    ) -> Result<Duration> {
        let t0 = Instant::now();
        loop {
            self.check_exits()?;
            let live = self.live();
            let held = tokio::task::block_in_place(|| self.held(&live));
            let total: usize = held.iter().flatten().sum();
            let each = held.iter().all(|h| h.is_some_and(|n| n > 0));
            let joined = joiner.is_none_or(|j| live.contains(&j));
            if total == BUCKETS as usize && each && joined {
                return Ok(t0.elapsed());
            }
            if t0.elapsed() > limit {
                bail!(
                    "the replicas did not hold every bucket within {}: {:?}",
                    fmt_duration(limit),
                    live.iter()
                        .zip(&held)
                        .map(|(i, h)| format!("{}: {h:?}", self.replicas[*i].label))
                        .collect::<Vec<_>>()
                );
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// While `stopped` is stopped: the time until the others hold every bucket, `None` if
    /// they do not within `limit`.
    pub(super) async fn wait_covered_without(
        &self,
        stopped: usize,
        limit: Duration,
    ) -> Option<Duration> {
        let t0 = Instant::now();
        let others: Vec<usize> = self.live().into_iter().filter(|&i| i != stopped).collect();
        while t0.elapsed() < limit {
            let held = tokio::task::block_in_place(|| self.held(&others));
            if held.iter().flatten().sum::<usize>() == BUCKETS as usize {
                return Some(t0.elapsed());
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        None
    }

    /// Waits up to `limit` for replica `i` to exit; its status.
    pub(super) async fn wait_exit(
        &mut self,
        i: usize,
        limit: Duration,
    ) -> Result<Option<std::process::ExitStatus>> {
        let t0 = Instant::now();
        loop {
            let Some(p) = self.replicas[i].process.as_mut() else {
                return Ok(None);
            };
            if let Some(status) = p.exited()? {
                let pid = self.replicas[i].pid;
                self.replicas[i].process = None;
                if !gone(pid) {
                    self.report
                        .problems
                        .push(format!("replica pid {pid} still present after it exited"));
                }
                return Ok(Some(status));
            }
            if t0.elapsed() > limit {
                return Ok(None);
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// A short random pause, so a fault lands while the rollout's writes are under way.
    pub(super) async fn pause(&mut self) {
        let ms = self.rng.u64(500..=2500);
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }

    pub(super) async fn create(&mut self) -> Result<()> {
        let pp = PostParams {
            field_manager: Some("kctrl-chaos".to_owned()),
            ..Default::default()
        };
        self.namespaces = namespace_names(&mut self.rng, self.plan.namespaces);
        let buckets: BTreeSet<u32> = self
            .namespaces
            .iter()
            .map(|ns| bucket_of(hash_field(ns), BUCKETS))
            .collect();
        self.report.namespaces = self.namespaces.len();
        self.report.buckets = buckets.len();
        if buckets.len() < self.plan.namespaces / 2 {
            self.report.problems.push(format!(
                "the {} namespaces fall into only {} buckets",
                self.namespaces.len(),
                buckets.len()
            ));
        }
        let namespaces: Api<Namespace> = Api::all(self.admin.clone());
        for ns in &self.namespaces {
            let n: Namespace = serde_json::from_value(serde_json::json!({
                "metadata": {"name": ns, "labels": {SHARD_RUN_LABEL: self.run_id}}
            }))?;
            namespaces.create(&pp, &n).await?;
        }
        for i in 0..self.plan.deployments {
            let ns = self.namespaces[i % self.namespaces.len()].clone();
            let name = format!("d{i:03}");
            let d: Deployment = serde_json::from_value(serde_json::json!({
                "metadata": {"name": name, "labels": {SHARD_RUN_LABEL: self.run_id}},
                "spec": {
                    "replicas": self.plan.pod_replicas,
                    "selector": {"matchLabels": {"app": name}},
                    "template": {
                        "metadata": {
                            "labels": {"app": name},
                            "annotations": {"kctrl.dev/ready-after": self.plan.ready_after, "chaos.kctrl.dev/wave": "0"}
                        },
                        "spec": {
                            "containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10"}],
                            "terminationGracePeriodSeconds": 0
                        }
                    }
                }
            }))?;
            Api::<Deployment>::namespaced(self.admin.clone(), &ns)
                .create(&pp, &d)
                .await?;
            self.deployments.push((ns, name));
        }
        Ok(())
    }

    pub(super) async fn list_deployments(&self) -> Result<Vec<Deployment>> {
        let params = ListParams {
            label_selector: Some(format!("{SHARD_RUN_LABEL}={}", self.run_id)),
            ..Default::default()
        };
        Ok(Api::<Deployment>::all(self.admin.clone())
            .list(&params)
            .await
            .context("listing the Deployments")?
            .items)
    }

    /// A rollout of every Deployment (a new pod-template annotation).
    pub(super) async fn roll(&mut self) -> Result<()> {
        self.waves += 1;
        eprintln!("==> rollout wave {}", self.waves);
        let patch = Patch::Merge(serde_json::json!({
            "spec": {"template": {"metadata": {"annotations": {"chaos.kctrl.dev/wave": self.waves.to_string()}}}}
        }));
        use futures::StreamExt as _;
        let admin = self.admin.clone();
        let patch = &patch;
        let results: Vec<Result<()>> = futures::stream::iter(self.deployments.clone())
            .map(|(ns, name)| {
                let api = Api::<Deployment>::namespaced(admin.clone(), &ns);
                async move {
                    api.patch(&name, &PatchParams::default(), patch)
                        .await
                        .map(|_| ())
                        .with_context(|| format!("patching {ns}/{name}"))
                }
            })
            .buffer_unordered(20)
            .collect()
            .await;
        for r in results {
            r?;
        }
        Ok(())
    }

    pub(super) async fn converge(&mut self) -> Result<Duration> {
        let t0 = Instant::now();
        loop {
            self.check_exits()?;
            let all = self.list_deployments().await?;
            let pending = crate::chaos::pending(&all);
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
}

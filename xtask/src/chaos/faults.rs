//! The fault phases, one method each, and the conflict storm's writers.

use super::*;

impl Run<'_> {
    /// Runs every phase; the first error ends the run (the cluster is then torn down).
    pub(super) async fn all_phases(&mut self) -> Result<()> {
        self.create().await?;
        self.initial_rollout = self.converge().await?;
        eprintln!(
            "==> {} Deployments created and available in {}",
            self.deployments.len(),
            fmt_duration(self.initial_rollout)
        );
        let p = self.apiserver_kills().await?;
        self.phases.push(p);
        let p = self.apiserver_stops().await?;
        self.phases.push(p);
        let p = self.compactions().await?;
        self.phases.push(p);
        let p = self.controller_kills().await?;
        self.phases.push(p);
        let p = self.conflict_storm().await?;
        self.phases.push(p);
        let p = self.slow_apiserver().await?;
        self.phases.push(p);
        Ok(())
    }

    /// Wraps a phase: counts its violations, waits for convergence, reports.
    pub(super) async fn finish_phase(
        &mut self,
        name: &'static str,
        injected: usize,
        detail: String,
        t0: Instant,
        violations_before: usize,
    ) -> Result<PhaseOutcome> {
        let converged_after = self
            .converge()
            .await
            .with_context(|| format!("after the phase '{name}'"))?;
        // A `replicaset-pods` peak of the phase's last moments is judged only once it is
        // SETTLE_AFTER old: wait that long so it counts in this phase, not the next (or, after
        // the last phase, in the total only).
        tokio::time::sleep(super::run::SETTLE_AFTER).await;
        let outcome = PhaseOutcome {
            name,
            injected,
            detail,
            violations: self.violations() - violations_before,
            converged_after,
            took: t0.elapsed(),
        };
        eprintln!(
            "==> phase '{name}': {} injected, {}; {} violation(s); converged {} after the last fault",
            outcome.injected,
            outcome.detail,
            outcome.violations,
            fmt_duration(outcome.converged_after)
        );
        Ok(outcome)
    }

    pub(super) async fn apiserver_kills(&mut self) -> Result<PhaseOutcome> {
        let (t0, v0) = (Instant::now(), self.violations());
        let mut restarts = Vec::new();
        for i in 0..self.plan.apiserver_kills {
            self.ensure_rolling().await?;
            self.pause().await?;
            eprintln!(
                "==> kill -9 kube-apiserver ({}/{})",
                i + 1,
                self.plan.apiserver_kills
            );
            let took = tokio::task::block_in_place(|| {
                plane::kill_and_restart(self.name, Component::Apiserver)
            })?;
            restarts.push(took);
            self.check_controller()?;
        }
        let longest = restarts.iter().max().copied().unwrap_or_default();
        let detail = format!(
            "restarted each time; back to /readyz in {} at most",
            fmt_duration(longest)
        );
        self.finish_phase("kill -9 kube-apiserver", restarts.len(), detail, t0, v0)
            .await
    }

    pub(super) async fn apiserver_stops(&mut self) -> Result<PhaseOutcome> {
        let (t0, v0) = (Instant::now(), self.violations());
        // Whether the clients notice the dead connections while the apiserver is stopped
        // (their HTTP/2 health check), or only once it runs again.
        let (mut noticed_by_controller, mut noticed_by_watch, mut reconnects) = (0, 0, 0);
        for i in 0..self.plan.stops {
            self.ensure_rolling().await?;
            self.pause().await?;
            eprintln!(
                "==> SIGSTOP kube-apiserver for {} ({}/{})",
                fmt_duration(self.plan.stop_for),
                i + 1,
                self.plan.stops
            );
            let offset = fs::metadata(self.log).map(|m| m.len()).unwrap_or(0);
            let watch_ends = || {
                self.watch_stats.broken.load(Ordering::Relaxed)
                    + self.watch_stats.ended.load(Ordering::Relaxed)
            };
            let (ends, connections) = (
                watch_ends(),
                self.proxy.stats.connections.load(Ordering::Relaxed),
            );
            plane::signal_component(self.name, Component::Apiserver, "STOP")?;
            tokio::time::sleep(self.plan.stop_for).await;
            noticed_by_controller += watch_failures(&supervisor::log_since(self.log, offset));
            noticed_by_watch += watch_ends() - ends;
            reconnects += self.proxy.stats.connections.load(Ordering::Relaxed) - connections;
            plane::signal_component(self.name, Component::Apiserver, "CONT")?;
            self.check_controller()?;
        }
        let detail = format!(
            "{} each, then SIGCONT; while stopped, the controller opened {reconnects} new \
             connections (its HTTP/2 health check gave up on the old ones; nothing else closes \
             a connection to a stopped server) and its reflectors logged {noticed_by_controller} \
             watch failures; {noticed_by_watch} watches of the independent watch ended",
            fmt_duration(self.plan.stop_for)
        );
        if reconnects == 0 {
            self.problems.push(
                "the controller kept its connections to the stopped apiserver: its HTTP/2 \
                 health check never gave up on them"
                    .to_owned(),
            );
        }
        self.finish_phase("SIGSTOP kube-apiserver", self.plan.stops, detail, t0, v0)
            .await
    }

    pub(super) async fn compactions(&mut self) -> Result<PhaseOutcome> {
        let (t0, v0) = (Instant::now(), self.violations());
        let gone_before = gone_lines(&fs::read_to_string(self.log).unwrap_or_default());
        let severed_before = self.proxy.stats.severed.load(Ordering::Relaxed);
        for i in 0..self.plan.compactions {
            self.ensure_rolling().await?;
            self.pause().await?;
            let rev = tokio::task::block_in_place(|| plane::compact(self.name))?;
            eprintln!(
                "==> compacted etcd at revision {rev}; severing the controller's connections ({}/{})",
                i + 1,
                self.plan.compactions
            );
            self.proxy.sever_all();
            self.check_controller()?;
        }
        let outcome = self
            .finish_phase(
                "etcd compaction mid-watch (watch cache off)",
                self.plan.compactions,
                String::new(),
                t0,
                v0,
            )
            .await?;
        let gone = gone_lines(&fs::read_to_string(self.log).unwrap_or_default()) - gone_before;
        let severed = self.proxy.stats.severed.load(Ordering::Relaxed) - severed_before;
        // Not a failure: whether a refused watch is logged depends on the reflector's path
        // (see docs/reliability.md), and the relist's correctness is what the convergence and
        // cache checks test.
        let gone = if gone == 0 {
            "no watch refused with 410 Gone was logged (any relist was quiet)".to_owned()
        } else {
            format!(
                "its reflectors logged {gone} watches refused with 410 Gone, each followed by a relist (a lower bound, see docs/reliability.md)"
            )
        };
        Ok(PhaseOutcome {
            detail: format!(
                "each followed by severing the controller's connections ({severed} in all); {gone}"
            ),
            ..outcome
        })
    }

    pub(super) async fn controller_kills(&mut self) -> Result<PhaseOutcome> {
        let (t0, v0) = (Instant::now(), self.violations());
        let mut longest = Duration::ZERO;
        for i in 0..self.plan.controller_kills {
            self.ensure_rolling().await?;
            self.pause().await?;
            eprintln!(
                "==> kill -9 the deployment-controller ({}/{})",
                i + 1,
                self.plan.controller_kills
            );
            if let Some(c) = self.controller.take() {
                c.kill()?;
                self.controller_kills += 1;
            }
            let t = Instant::now();
            self.start_controller()?;
            longest = longest.max(t.elapsed());
        }
        let detail = format!(
            "restarted each time; caches synced again in {} at most",
            fmt_duration(longest)
        );
        self.finish_phase(
            "kill -9 the controller",
            self.plan.controller_kills,
            detail,
            t0,
            v0,
        )
        .await
    }

    pub(super) async fn conflict_storm(&mut self) -> Result<PhaseOutcome> {
        let (t0, v0) = (Instant::now(), self.violations());
        let metrics_url = format!("https://127.0.0.1:{}/metrics", self.metrics_port);
        let conflicts_before = tokio::task::block_in_place(|| curl(&metrics_url))
            .map(|m| requests_with_code(&m, "409"))
            .unwrap_or(0);
        self.ensure_rolling().await?;
        let writes = Arc::new(AtomicU64::new(0));
        let conflicts = Arc::new(AtomicU64::new(0));
        let deadline = tokio::time::Instant::now() + self.plan.storm_for;
        let mut writers = Vec::new();
        for w in 0..self.plan.storm_writers {
            let (admin, targets) = (self.admin.clone(), self.deployments.clone());
            let (writes, conflicts) = (writes.clone(), conflicts.clone());
            let rng = fastrand::Rng::with_seed(self.seed.wrapping_add(w as u64 + 1));
            writers.push(tokio::spawn(storm_writer(
                admin, targets, rng, deadline, writes, conflicts,
            )));
        }
        // A second rollout in the middle of the storm.
        tokio::time::sleep(self.plan.storm_for / 2).await;
        self.roll().await?;
        for w in writers {
            w.await.context("a storm writer panicked")??;
        }
        self.check_controller()?;
        let outcome = self
            .finish_phase(
                "conflict storm",
                self.plan.storm_writers,
                String::new(),
                t0,
                v0,
            )
            .await?;
        let controller_conflicts = tokio::task::block_in_place(|| curl(&metrics_url))
            .map(|m| requests_with_code(&m, "409"))
            .unwrap_or(0)
            .saturating_sub(conflicts_before);
        Ok(PhaseOutcome {
            detail: format!(
                "writers for {}: {} label/spec updates, {} of their own conflicts; the controller got {} conflicts (409)",
                fmt_duration(self.plan.storm_for),
                writes.load(Ordering::Relaxed),
                conflicts.load(Ordering::Relaxed),
                controller_conflicts
            ),
            ..outcome
        })
    }

    pub(super) async fn slow_apiserver(&mut self) -> Result<PhaseOutcome> {
        let (t0, v0) = (Instant::now(), self.violations());
        let before = (
            self.proxy.stats.delayed.load(Ordering::Relaxed),
            self.proxy.stats.truncated.load(Ordering::Relaxed),
        );
        self.ensure_rolling().await?;
        self.proxy.set_mode(Mode::Slow {
            max_delay: Duration::from_millis(300),
            truncate_per_mille: self.plan.truncate_per_mille,
        });
        let cuts = self.plan.truncate_per_mille > 0;
        if cuts {
            self.proxy.cut_next();
        }
        tokio::time::sleep(self.plan.slow_for / 2).await;
        self.roll().await?;
        tokio::time::sleep(self.plan.slow_for / 2).await;
        self.proxy.set_mode(Mode::Pass);
        self.check_controller()?;
        let delayed = self.proxy.stats.delayed.load(Ordering::Relaxed) - before.0;
        let truncated = self.proxy.stats.truncated.load(Ordering::Relaxed) - before.1;
        let detail = format!(
            "for {}: {delayed} chunks delayed by up to 300 ms, {truncated} connections cut mid-chunk",
            fmt_duration(self.plan.slow_for)
        );
        if truncated == 0 && cuts {
            self.problems
                .push("the slow apiserver phase truncated nothing (nothing tested)".to_owned());
        }
        self.finish_phase("slow apiserver (proxy)", 1, detail, t0, v0)
            .await
    }
}

/// One writer of the conflict storm: read-modify-write updates of random Deployments' labels
/// and spec until `deadline`. Counts successful writes and conflicts; other errors (the
/// apiserver being busy) are retried.
async fn storm_writer(
    admin: Client,
    targets: Vec<(String, String)>,
    mut rng: fastrand::Rng,
    deadline: tokio::time::Instant,
    writes: Arc<AtomicU64>,
    conflicts: Arc<AtomicU64>,
) -> Result<()> {
    let pp = PostParams {
        field_manager: Some("kctrl-chaos-storm".to_owned()),
        ..Default::default()
    };
    while tokio::time::Instant::now() < deadline {
        let (ns, name) = &targets[rng.usize(..targets.len())];
        let api: Api<Deployment> = Api::namespaced(admin.clone(), ns);
        let Ok(mut d) = api.get(name).await else {
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        };
        let n = rng.u32(0..1000);
        d.metadata
            .labels
            .get_or_insert_with(Default::default)
            .insert("chaos.kctrl.dev/storm".to_owned(), n.to_string());
        let spec = d.spec.get_mut();
        spec.revision_history_limit = Some(2 + (n % 8) as i32);
        spec.progress_deadline_seconds = Some(600 + (n % 60) as i32);
        // A little time between read and write, as a real client would take.
        tokio::time::sleep(Duration::from_millis(rng.u64(0..100))).await;
        match api.update(&pp, &d).await {
            Ok(_) => {
                writes.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) if e.is_conflict() => {
                conflicts.fetch_add(1, Ordering::Relaxed);
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
    Ok(())
}

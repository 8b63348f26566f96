//! The measurement: per round and size phases a-d (and f) for each side in a fresh namespace,
//! then phase e at rest.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::Pod;
use kctrl_client::{Api, Client, ListParams, Patch, PatchParams, PostParams};
use xtask_contender::parse::{self, Counts};

use super::running::{
    MachineCpu, apiserver_requests, audit_len, audit_since, cluster_rss, probe, start,
};
use super::workload::*;
use super::{
    AT_REST_PER_NAMESPACE, Env, IDLE_CPU_SHARE, IDLE_WINDOW, Measured, NAMESPACE_PREFIX, Phase,
    PhaseRun, Side, TAIL, admin_client,
};

/// What a run measured.
#[derive(Default)]
pub(super) struct Results {
    pub(super) runs: Vec<PhaseRun>,
    pub(super) setups: Vec<Setup>,
}

/// Called with each size of phase e once it is measured.
pub(super) type AfterSize<'a> = dyn FnMut(usize, &Results) + 'a;

/// Phase e's preparation of one size.
#[derive(Clone, Debug)]
pub(in crate::bench::controller) struct Setup {
    /// Deployments in the cluster afterwards.
    pub(in crate::bench::controller) total: usize,
    /// Deployments this size added.
    pub(in crate::bench::controller) added: usize,
    /// Seconds from the first create until every Deployment was complete.
    pub(in crate::bench::controller) seconds: f64,
}
use crate::kube::delete_namespace;

pub(super) async fn measure(
    env: &Env,
    sizes: &[usize],
    at_rest: &[usize],
    rounds: usize,
    settle_secs: u64,
    results: &mut Results,
    after_size: &mut AfterSize<'_>,
) -> Result<()> {
    let client = admin_client(env)?;
    let sides: Vec<Side> = if env.callgrind {
        vec![Side::Ours]
    } else {
        Side::BOTH.to_vec()
    };
    for round in 0..rounds {
        for &n in sizes {
            for side in Side::order(round) {
                if !sides.contains(&side) {
                    continue;
                }
                eprintln!(
                    "round {}/{rounds}, {n} Deployments: {}",
                    round + 1,
                    side.slug()
                );
                let done = run_round(env, &client, side, round, n).await?;
                for r in &done {
                    eprintln!(
                        "  {:<26} wall {:>6.1} s  p50 {:>6.1} s  cpu {:>6.2} s  peak {:>4} MiB  writes {:>5}",
                        r.phase.title(),
                        r.wall,
                        r.p50.unwrap_or(f64::NAN),
                        r.cpu,
                        r.peak_rss >> 20,
                        parse::writes(&r.audit)
                    );
                }
                results.runs.extend(done);
            }
        }
    }
    let mut built = 0;
    for &m in at_rest {
        results
            .setups
            .push(prepare_at_rest(env, &client, built, m).await?);
        built = m;
        measure_at_rest(env, &client, m, rounds, settle_secs, &mut results.runs).await?;
        after_size(m, results);
    }
    Ok(())
}

/// Phases a-d (and f) for one side in a fresh namespace.
async fn run_round(
    env: &Env,
    client: &Client,
    side: Side,
    round: usize,
    n: usize,
) -> Result<Vec<PhaseRun>> {
    let namespace = format!("{NAMESPACE_PREFIX}-{n}-r{round}-{}", side.slug());
    crate::kube::ensure_namespace(client, &namespace, &[]).await?;
    let mut controller = start(env, side, &format!("{n}-r{round}"), env.qps)?;
    let sync_timeout = if env.callgrind { 900 } else { 120 };
    controller
        .wait_synced(Duration::from_secs(sync_timeout))
        .await?;
    let api = Api::<Deployment>::namespaced(client.clone(), &namespace);
    let mut runs = Vec::new();
    controller.dump_profile(env, "startup")?;
    let mut replicas = env.replicas;
    for &phase in &env.phases {
        controller.reset_peak(env);
        let before = probe(env, &controller)?;
        let machine_before = MachineCpu::read().ok();
        let started = Instant::now();
        // Each phase's writes, then the replicas every Deployment must reach (none: deletion).
        let target = match phase {
            Phase::Create => {
                concurrently(n, {
                    let api = api.clone();
                    move |i| {
                        let api = api.clone();
                        async move {
                            api.create(&PostParams::default(), &deployment_with(i, replicas)?)
                                .await
                                .with_context(|| format!("creating {}", name(i)))?;
                            Ok(())
                        }
                    }
                })
                .await?;
                Some(replicas)
            }
            Phase::Rollout => {
                patch_all(&api, n, image_patch("b")).await?;
                Some(replicas)
            }
            Phase::ScaleMidRollout => {
                patch_all(&api, n, image_patch("c")).await?;
                wait_observed(&api, n.div_ceil(2), started, env.phase_timeout).await?;
                replicas = env.replicas * 2;
                patch_all(&api, n, serde_json::json!({"spec": {"replicas": replicas}})).await?;
                Some(replicas)
            }
            Phase::Recreate => {
                patch_all(&api, n, recreate_patch("f")).await?;
                Some(replicas)
            }
            Phase::Delete => {
                delete_namespace(client, &namespace, env.phase_timeout).await?;
                None
            }
            Phase::AtRest => unreachable!("phase e runs in measure_at_rest"),
        };
        let completions = match target {
            Some(replicas) => {
                wait_complete(
                    &api,
                    n,
                    replicas,
                    started,
                    env.phase_timeout,
                    &mut controller,
                )
                .await?
            }
            None => vec![started.elapsed().as_secs_f64()],
        };
        let wall = completions.iter().copied().fold(0.0, f64::max);
        tokio::time::sleep(TAIL).await;
        if let Some(why) = controller.exited() {
            bail!(why);
        }
        let after = probe(env, &controller)?;
        let machine_busy = machine_before
            .zip(MachineCpu::read().ok())
            .and_then(|(before, after)| after.busy_share_since(before));
        let (_, memory) = controller.usage()?;
        controller.dump_profile(env, phase.slug())?;
        let per_deployment = phase != Phase::Delete;
        runs.push(PhaseRun {
            side,
            round,
            size: n,
            phase,
            wall,
            p50: per_deployment
                .then(|| xtask_report::stats::percentile(&completions, 50.0))
                .flatten(),
            p99: per_deployment
                .then(|| xtask_report::stats::percentile(&completions, 99.0))
                .flatten(),
            cpu: after.cpu.since(before.cpu).seconds(env.ticks_per_second),
            cpu_system: after
                .cpu
                .since(before.cpu)
                .system_seconds(env.ticks_per_second),
            peak_rss: memory.peak,
            steady_rss: memory.rss,
            client: match (&before.client, &after.client) {
                (Some(b), Some(a)) => parse::delta(b, a),
                _ => Counts::new(),
            },
            audit: audit_since(env, before.audit_offset, side)?,
            apiserver: parse::delta(&before.apiserver, &after.apiserver),
            synced: None,
            first_write: None,
            idle: None,
            cluster_rss: None,
            machine_busy,
        });
    }
    controller.stop(env)?;
    if !env.phases.contains(&Phase::Delete) {
        // The next round starts from the same cluster: this one's objects go, unmeasured.
        delete_namespace(client, &namespace, env.phase_timeout).await?;
    }
    Ok(runs)
}

/// The phases `--phases` names (`a`-`d`, `f`), in round order; a-d by default, a-c under
/// `--callgrind`.
pub(super) fn round_phases(letters: &[String], callgrind: bool) -> Result<Vec<Phase>> {
    if letters.is_empty() {
        let all = Phase::ROUND.to_vec();
        return Ok(if callgrind { all[..3].to_vec() } else { all });
    }
    let mut phases = Vec::new();
    for letter in letters {
        let phase = match letter.trim() {
            "a" => Phase::Create,
            "b" => Phase::Rollout,
            "c" => Phase::ScaleMidRollout,
            "d" => Phase::Delete,
            "f" => Phase::Recreate,
            "e" => bail!("--phases: e (at rest) runs alone (`--phases e`) or after the others"),
            other => bail!("--phases: unknown phase {other:?} (expected a, b, c, f or d)"),
        };
        if !phases.contains(&phase) {
            phases.push(phase);
        }
    }
    phases.sort();
    if phases.iter().any(|p| *p != Phase::Create) && !phases.contains(&Phase::Create) {
        bail!("--phases: every phase works on the Deployments phase a creates; include a");
    }
    Ok(phases)
}

/// Phase e's namespace of Deployment `i`: [`AT_REST_PER_NAMESPACE`] to a namespace.
fn rest_namespace(i: usize) -> String {
    format!("{NAMESPACE_PREFIX}-rest-{:03}", i / AT_REST_PER_NAMESPACE)
}

/// Grows phase e's Deployments from `built` to `m` (each in [`rest_namespace`]) with ours at
/// [`super::setup_qps`], until every one of them is complete; not measured.
async fn prepare_at_rest(env: &Env, client: &Client, built: usize, m: usize) -> Result<Setup> {
    let added = m - built;
    eprintln!(
        "preparing {m} Deployments x {} at rest ({added} added)…",
        env.replicas
    );
    let namespaces: BTreeSet<String> = (built..m).map(rest_namespace).collect();
    for namespace in &namespaces {
        crate::kube::ensure_namespace(client, namespace, &[]).await?;
    }
    // Never slower than the controllers measured get.
    let setup_qps = super::setup_qps(env.qps);
    let mut setup = start(env, Side::Ours, &format!("rest-{m}-setup"), setup_qps)?;
    setup.wait_synced(Duration::from_secs(600)).await?;
    let started = Instant::now();
    let replicas = env.replicas;
    concurrently(added, {
        let client = client.clone();
        move |j| {
            let i = built + j;
            let api = Api::<Deployment>::namespaced(client.clone(), rest_namespace(i));
            async move {
                match api
                    .create(&PostParams::default(), &deployment_with(i, replicas)?)
                    .await
                {
                    Ok(_) => Ok(()),
                    Err(e) if e.is_already_exists() => Ok(()),
                    Err(e) => Err(anyhow!("creating {}: {e}", name(i))),
                }
            }
        }
    })
    .await?;
    eprintln!(
        "  {added} Deployments created in {:.0} s",
        started.elapsed().as_secs_f64()
    );
    // Generous: this machine built 15,000 Pods at 28 ms each and slowed as the cluster grew
    // (35,000 more at 42 ms each); 200 ms per Pod added.
    let pods = (added * env.replicas.max(1) as usize) as u64;
    let timeout = env
        .phase_timeout
        .max(Duration::from_secs(3600))
        .max(Duration::from_millis(pods * 200));
    wait_all_complete(client, m, env.replicas, started, timeout, &mut setup).await?;
    let seconds = started.elapsed().as_secs_f64();
    eprintln!("  {m} Deployments complete after {seconds:.0} s");
    setup.stop(env)?;
    Ok(Setup {
        total: m,
        added,
        seconds,
    })
}

/// Waits until the `m` Deployments of phase e's namespaces are complete at `want` replicas,
/// listing them in pages.
async fn wait_all_complete(
    client: &Client,
    m: usize,
    want: i32,
    started: Instant,
    timeout: Duration,
    controller: &mut super::running::Controller,
) -> Result<()> {
    let all = Api::<Deployment>::all(client.clone());
    let prefix = format!("{NAMESPACE_PREFIX}-rest-");
    let mut last_report = Instant::now();
    loop {
        let mut complete = 0;
        let mut params = ListParams {
            limit: Some(1000),
            ..Default::default()
        };
        let mut failed = None;
        loop {
            let page = match all.list(&params).await {
                Ok(page) => page,
                // An hour of setup is not lost to one failed LIST (a busy apiserver's timeout,
                // an expired continue token): the next poll lists again.
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            };
            complete += page
                .items
                .iter()
                .filter(|d| {
                    d.metadata
                        .namespace
                        .as_deref()
                        .is_some_and(|ns| ns.starts_with(&prefix))
                        && rollout_state(d).complete(want)
                })
                .count();
            match page.metadata.continue_.filter(|c| !c.is_empty()) {
                Some(token) => params.continue_token = Some(token),
                None => break,
            }
        }
        if let Some(e) = failed {
            eprintln!("  listing the Deployments failed ({e}); listing again");
        } else if complete >= m {
            return Ok(());
        }
        if let Some(why) = controller.exited() {
            bail!(why);
        }
        if started.elapsed() > timeout {
            bail!("only {complete}/{m} Deployments complete at {want} replicas after {timeout:?}");
        }
        if last_report.elapsed() > Duration::from_secs(30) {
            eprintln!(
                "  {complete}/{m} complete after {:.0} s",
                started.elapsed().as_secs_f64()
            );
            last_report = Instant::now();
        }
        // Each poll decodes all m Deployments in the driver (a debug build) on the machine the
        // cluster runs on: rarely.
        tokio::time::sleep(Duration::from_millis((m as u64).clamp(1_000, 15_000))).await;
    }
}

/// Phase e at `m` Deployments at rest: per round and side a fresh process after one template
/// was changed while no controller ran.
async fn measure_at_rest(
    env: &Env,
    client: &Client,
    m: usize,
    rounds: usize,
    settle_secs: u64,
    runs: &mut Vec<PhaseRun>,
) -> Result<()> {
    let limit = Duration::from_secs((m as u64 / 10).max(600));
    for round in 0..rounds {
        for side in Side::order(round) {
            let index = (round * 2 + side as usize) % m;
            let target = name(index);
            let namespace = rest_namespace(index);
            let api = Api::<Deployment>::namespaced(client.clone(), &namespace);
            let replica_sets = Api::<ReplicaSet>::namespaced(client.clone(), &namespace);
            let pods = Api::<Pod>::namespaced(client.clone(), &namespace);
            let selector = ListParams {
                label_selector: Some(format!("app={target}")),
                ..Default::default()
            };
            let before = written(env, &replica_sets, &pods, &selector).await?;
            // The template changes while no controller runs: the first write of the new process
            // is the new ReplicaSet.
            api.patch(
                &target,
                &PatchParams::default(),
                &Patch::Merge(image_patch(&format!("rest-{m}-{round}-{}", side.slug()))),
            )
            .await
            .with_context(|| format!("patching {target}"))?;
            eprintln!(
                "at rest, {m} Deployments, round {}/{rounds}: {} ({namespace}/{target} changed)",
                round + 1,
                side.slug()
            );
            let audit_from = audit_len(env);
            let api_before = apiserver_requests(env)?;
            let mut c = start(env, side, &format!("rest-{m}-r{round}"), env.qps)?;
            let (mut synced, mut first_write) = (None, None);
            let mut idle = IdleWatch::default();
            // A side that never goes quiet is reported as not idle rather than failing the
            // run: the wait for idle ends this long after the caches synced and the first write.
            let idle_limit = (m as f64 / 50.0).max(300.0);
            let mut eligible_at = None;
            while synced.is_none() || first_write.is_none() || idle.found.is_none() {
                if let Some(since) = eligible_at
                    && c.spawned().elapsed().as_secs_f64() - since > idle_limit
                {
                    eprintln!(
                        "  {} did not go idle within {idle_limit:.0} s of its first write",
                        side.slug()
                    );
                    break;
                }
                let now = c.spawned().elapsed().as_secs_f64();
                if synced.is_none() && c.synced() {
                    synced = Some(now);
                }
                if first_write.is_none() {
                    let now_written = written(env, &replica_sets, &pods, &selector).await?;
                    if now_written.difference(&before).next().is_some() {
                        first_write = Some(now);
                    }
                }
                if let Some(why) = c.exited() {
                    bail!(why);
                }
                let cpu = xtask_contender::probe::process_cpu(c.pid())?;
                let eligible = synced.is_some() && first_write.is_some();
                let at = c.spawned().elapsed().as_secs_f64();
                if eligible {
                    eligible_at.get_or_insert(at);
                }
                idle.sample(at, cpu.seconds(env.ticks_per_second), eligible);
                if eligible_at.is_none() && c.spawned().elapsed() > limit {
                    bail!(
                        "{}: caches synced {synced:?} s, new ReplicaSet for {target} {first_write:?} \
                         s, idle {:?}: not all within {limit:?}",
                        side.slug(),
                        idle.found
                    );
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            tokio::time::sleep(Duration::from_secs(settle_secs)).await;
            let (cpu, memory) = c.usage()?;
            let client_requests = c
                .client_requests()
                .map_err(|e| eprintln!("  warning: {} /metrics: {e:#}", side.slug()))
                .unwrap_or_default();
            let api_after = apiserver_requests(env)?;
            let wall = c.spawned().elapsed().as_secs_f64();
            let cluster = cluster_rss(env)
                .map_err(|e| eprintln!("  warning: the cluster's RSS: {e:#}"))
                .ok();
            runs.push(PhaseRun {
                side,
                round,
                size: m,
                phase: Phase::AtRest,
                wall,
                p50: None,
                p99: None,
                cpu: cpu.seconds(env.ticks_per_second),
                cpu_system: cpu.system_seconds(env.ticks_per_second),
                peak_rss: memory.peak,
                steady_rss: memory.rss,
                client: client_requests,
                audit: audit_since(env, audit_from, side)?,
                apiserver: parse::delta(&api_before, &api_after),
                synced,
                first_write,
                idle: idle.found,
                cluster_rss: cluster,
                machine_busy: None,
            });
            eprintln!(
                "  synced {:.2} s, first write {:.2} s, idle {:.2} s at {:.2} CPU-s, steady RSS \
                 {} MiB, peak {} MiB, cpu {:.2} s",
                synced.unwrap_or(f64::NAN),
                first_write.unwrap_or(f64::NAN),
                idle.found.map_or(f64::NAN, |(at, _)| at),
                idle.found.map_or(f64::NAN, |(_, cpu)| cpu),
                memory.rss >> 20,
                memory.peak >> 20,
                cpu.seconds(env.ticks_per_second)
            );
            c.stop(env)?;
        }
    }
    Ok(())
}

/// Finds the first [`IDLE_WINDOW`] in which a process used less than [`IDLE_CPU_SHARE`] of a
/// core, from samples of (seconds since spawn, CPU-seconds) taken every few milliseconds.
#[derive(Default)]
struct IdleWatch {
    /// Samples since the process became eligible (see [`IdleWatch::sample`]).
    samples: std::collections::VecDeque<(f64, f64)>,
    /// The window's start: seconds since spawn and CPU-seconds spent until then.
    found: Option<(f64, f64)>,
}

impl IdleWatch {
    /// Adds a sample; `eligible` says whether the window may start here (caches synced and the
    /// first write seen: before that an idle second is waiting, not done).
    fn sample(&mut self, at: f64, cpu: f64, eligible: bool) {
        if self.found.is_some() {
            return;
        }
        if !eligible {
            self.samples.clear();
            return;
        }
        self.samples.push_back((at, cpu));
        let window = IDLE_WINDOW.as_secs_f64();
        // The latest sample at least a window back is the candidate start.
        while self.samples.len() >= 2 && at - self.samples[1].0 >= window {
            self.samples.pop_front();
        }
        if let Some(&(start, start_cpu)) = self.samples.front()
            && at - start >= window
            && cpu - start_cpu < IDLE_CPU_SHARE * (at - start)
        {
            self.found = Some((start, start_cpu));
        }
    }
}

/// What the first write of a freshly started side makes visible, for the Deployment `selector`
/// selects: the uids of its ReplicaSets (the Deployment controller's first write is the new
/// one), or, when only the ReplicaSet controller is measured (the cluster's Deployment
/// controller made the new ReplicaSet already), of its Pods: a uid not there before is the
/// first create, whether or not a deletion of an old Pod came first.
async fn written(
    env: &Env,
    replica_sets: &Api<ReplicaSet>,
    pods: &Api<Pod>,
    selector: &ListParams,
) -> Result<BTreeSet<String>> {
    let uids = |items: Vec<Option<String>>| items.into_iter().flatten().collect();
    Ok(if env.measured == Measured::Replicaset {
        uids(
            pods.list(selector)
                .await?
                .items
                .into_iter()
                .map(|p| p.metadata.uid)
                .collect(),
        )
    } else {
        uids(
            replica_sets
                .list(selector)
                .await?
                .items
                .into_iter()
                .map(|rs| rs.metadata.uid)
                .collect(),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Samples every 100 ms of a process that uses `rate` of a core until `busy_until`, then
    /// nothing; eligible from `eligible_from`.
    fn watch(rate: f64, busy_until: f64, eligible_from: f64) -> Option<(f64, f64)> {
        let mut idle = IdleWatch::default();
        for tenth in 0..100 {
            let at = f64::from(tenth) / 10.0;
            let cpu = rate * at.min(busy_until);
            idle.sample(at, cpu, at >= eligible_from);
        }
        idle.found
    }

    #[test]
    fn idle_is_the_start_of_the_first_quiet_second_after_eligibility() {
        let (at, cpu) = watch(1.0, 3.0, 1.0).unwrap();
        assert!((at - 3.0).abs() < 0.01, "{at}");
        assert!((cpu - 3.0).abs() < 0.01, "{cpu}");
        // Quiet before the caches synced does not count: the window starts at eligibility.
        let (at, _) = watch(0.0, 0.0, 2.0).unwrap();
        assert!((at - 2.0).abs() < 0.01, "{at}");
        // Busy at a tenth of a core throughout: never idle.
        assert_eq!(watch(0.1, 100.0, 0.0), None);
        // Just under the threshold counts as idle.
        assert!(watch(IDLE_CPU_SHARE * 0.5, 100.0, 0.0).is_some());
    }

    #[test]
    fn rest_namespaces_hold_a_hundred_deployments_each() {
        assert_eq!(rest_namespace(0), format!("{NAMESPACE_PREFIX}-rest-000"));
        assert_eq!(rest_namespace(99), format!("{NAMESPACE_PREFIX}-rest-000"));
        assert_eq!(rest_namespace(100), format!("{NAMESPACE_PREFIX}-rest-001"));
        assert_eq!(
            rest_namespace(29_999),
            format!("{NAMESPACE_PREFIX}-rest-299")
        );
    }
}

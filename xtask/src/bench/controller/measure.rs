//! The measurement: per round and size phases a-d for each side in a fresh namespace, then
//! phase e at rest.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::Pod;
use kctrl_client::{Api, Client, ListParams, Patch, PatchParams, PostParams};
use xtask_contender::parse::{self, Counts};

use super::running::{apiserver_requests, audit_len, audit_since, probe, start};
use super::workload::*;
use super::{
    Env, Measured, NAMESPACE_PREFIX, Phase, PhaseRun, QPS, REPLICAS, SETUP_QPS, Side, TAIL,
    admin_client,
};
use crate::kube::delete_namespace;

pub(super) async fn measure(
    env: &Env,
    sizes: &[usize],
    at_rest: usize,
    rounds: usize,
    settle_secs: u64,
    runs: &mut Vec<PhaseRun>,
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
                runs.extend(done);
            }
        }
    }
    if at_rest > 0 {
        measure_at_rest(env, &client, at_rest, rounds, settle_secs, runs).await?;
    }
    Ok(())
}

/// Phases a-d for one side in a fresh namespace.
async fn run_round(
    env: &Env,
    client: &Client,
    side: Side,
    round: usize,
    n: usize,
) -> Result<Vec<PhaseRun>> {
    let namespace = format!("{NAMESPACE_PREFIX}-{n}-r{round}-{}", side.slug());
    crate::kube::ensure_namespace(client, &namespace, &[]).await?;
    let mut controller = start(env, side, &format!("{n}-r{round}"), QPS)?;
    let sync_timeout = if env.callgrind { 900 } else { 120 };
    controller
        .wait_synced(Duration::from_secs(sync_timeout))
        .await?;
    let api = Api::<Deployment>::namespaced(client.clone(), &namespace);
    let mut runs = Vec::new();
    controller.dump_profile(env, "startup")?;
    for &phase in &env.phases {
        controller.reset_peak(env);
        let before = probe(env, &controller)?;
        let started = Instant::now();
        // Each phase's writes, then the replicas every Deployment must reach (none: deletion).
        let target = match phase {
            Phase::Create => {
                concurrently(n, {
                    let api = api.clone();
                    move |i| {
                        let api = api.clone();
                        async move {
                            api.create(&PostParams::default(), &deployment(i)?)
                                .await
                                .with_context(|| format!("creating {}", name(i)))?;
                            Ok(())
                        }
                    }
                })
                .await?;
                Some(REPLICAS)
            }
            Phase::Rollout => {
                patch_all(&api, n, image_patch("b")).await?;
                Some(REPLICAS)
            }
            Phase::ScaleMidRollout => {
                patch_all(&api, n, image_patch("c")).await?;
                wait_observed(&api, n.div_ceil(2), started, env.phase_timeout).await?;
                patch_all(
                    &api,
                    n,
                    serde_json::json!({"spec": {"replicas": REPLICAS * 2}}),
                )
                .await?;
                Some(REPLICAS * 2)
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
        });
    }
    controller.stop(env)?;
    if !env.phases.contains(&Phase::Delete) {
        // The next round starts from the same cluster: this one's objects go, unmeasured.
        delete_namespace(client, &namespace, env.phase_timeout).await?;
    }
    Ok(runs)
}

/// The phases `--phases` names (`a`-`d`), in round order; all four by default, a-c under
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
            other => bail!("--phases: unknown phase {other:?} (expected a, b, c or d)"),
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

/// Phase e: M Deployments at rest; per round and side a fresh process after one template was
/// changed while no controller ran.
async fn measure_at_rest(
    env: &Env,
    client: &Client,
    m: usize,
    rounds: usize,
    settle_secs: u64,
    runs: &mut Vec<PhaseRun>,
) -> Result<()> {
    let namespace = format!("{NAMESPACE_PREFIX}-rest-{m}");
    crate::kube::ensure_namespace(client, &namespace, &[]).await?;
    let api = Api::<Deployment>::namespaced(client.clone(), &namespace);
    eprintln!(
        "preparing {m} Deployments x {REPLICAS} at rest in {namespace} (ours, QPS {SETUP_QPS:?})…"
    );
    let mut setup = start(env, Side::Ours, &format!("rest-{m}-setup"), SETUP_QPS)?;
    setup.wait_synced(Duration::from_secs(120)).await?;
    let started = Instant::now();
    concurrently(m, {
        let api = api.clone();
        move |i| {
            let api = api.clone();
            async move {
                match api.create(&PostParams::default(), &deployment(i)?).await {
                    Ok(_) => Ok(()),
                    Err(e) if e.is_already_exists() => Ok(()),
                    Err(e) => Err(anyhow!("creating {}: {e}", name(i))),
                }
            }
        }
    })
    .await?;
    let timeout = env.phase_timeout.max(Duration::from_secs(3600));
    wait_complete(&api, m, REPLICAS, started, timeout, &mut setup).await?;
    eprintln!(
        "  {m} Deployments complete after {:.0} s",
        started.elapsed().as_secs_f64()
    );
    setup.stop(env)?;

    let replica_sets = Api::<ReplicaSet>::namespaced(client.clone(), &namespace);
    let pods = Api::<Pod>::namespaced(client.clone(), &namespace);
    for round in 0..rounds {
        for side in Side::order(round) {
            let index = (round * 2 + side as usize) % m;
            let target = name(index);
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
                &Patch::Merge(image_patch(&format!("rest-{round}-{}", side.slug()))),
            )
            .await
            .with_context(|| format!("patching {target}"))?;
            eprintln!(
                "at rest, round {}/{rounds}: {} ({target} changed)",
                round + 1,
                side.slug()
            );
            let audit_from = audit_len(env);
            let api_before = apiserver_requests(env)?;
            let mut c = start(env, side, &format!("rest-{m}-r{round}"), QPS)?;
            let (mut synced, mut first_write) = (None, None);
            while synced.is_none() || first_write.is_none() {
                if synced.is_none() && c.synced() {
                    synced = Some(c.spawned().elapsed().as_secs_f64());
                }
                if first_write.is_none() {
                    let now = c.spawned().elapsed().as_secs_f64();
                    let now_written = written(env, &replica_sets, &pods, &selector).await?;
                    if now_written.difference(&before).next().is_some() {
                        first_write = Some(now);
                    }
                }
                if let Some(why) = c.exited() {
                    bail!(why);
                }
                if c.spawned().elapsed() > Duration::from_secs(600) {
                    bail!(
                        "{}: no caches synced or no new ReplicaSet for {target} within 600 s",
                        side.slug()
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
            });
            eprintln!(
                "  synced {:.2} s, first write {:.2} s, steady RSS {} MiB, peak {} MiB, cpu {:.2} s",
                synced.unwrap_or(f64::NAN),
                first_write.unwrap_or(f64::NAN),
                memory.rss >> 20,
                memory.peak >> 20,
                cpu.seconds(env.ticks_per_second)
            );
            c.stop(env)?;
        }
    }
    Ok(())
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

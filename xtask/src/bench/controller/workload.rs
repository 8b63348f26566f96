//! The benchmark's workload: its Deployments, the driver's writes and the waits for the
//! controller under test.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use k8s_openapi::api::apps::v1::Deployment;
use kctrl_client::{Api, ListParams, Patch, PatchParams};

use super::CONCURRENCY;
#[cfg(test)]
use super::REPLICAS;
use super::running::Controller;
#[cfg(test)]
use crate::kube::RolloutState;
pub(super) use crate::kube::rollout_state;

pub(super) fn name(i: usize) -> String {
    format!("d-{i:04}")
}

#[cfg(test)]
pub(super) fn deployment(i: usize) -> Result<Deployment> {
    deployment_with(i, REPLICAS)
}

/// Deployment `i` with `replicas` replicas.
pub(super) fn deployment_with(i: usize, replicas: i32) -> Result<Deployment> {
    let name = name(i);
    Ok(serde_json::from_value(serde_json::json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "app", "image": "registry.k8s.io/pause:a"}]},
            },
        },
    }))?)
}

pub(super) fn image_patch(tag: &str) -> serde_json::Value {
    serde_json::json!({"spec": {"template": {"spec": {"containers": [
        {"name": "app", "image": format!("registry.k8s.io/pause:{tag}")}
    ]}}}})
}

/// A template change with the strategy switched to Recreate (`rollingUpdate` must go with it).
pub(super) fn recreate_patch(tag: &str) -> serde_json::Value {
    let mut patch = image_patch(tag);
    patch["spec"]["strategy"] = serde_json::json!({"type": "Recreate", "rollingUpdate": null});
    patch
}

pub(super) async fn patch_all(
    api: &Api<Deployment>,
    n: usize,
    patch: serde_json::Value,
) -> Result<()> {
    let patch = Arc::new(Patch::Merge(patch));
    let api = api.clone();
    concurrently(n, move |i| {
        let (api, patch) = (api.clone(), patch.clone());
        async move {
            api.patch(&name(i), &PatchParams::default(), &patch)
                .await
                .with_context(|| format!("patching {}", name(i)))?;
            Ok(())
        }
    })
    .await
}

/// How often the driver lists the Deployments while it waits.
pub(super) fn poll_interval(n: usize) -> Duration {
    if n >= 1000 {
        // Decoding the list costs the driver (a debug build) CPU the controllers share.
        Duration::from_secs(1)
    } else if n > 200 {
        Duration::from_millis(500)
    } else {
        Duration::from_millis(250)
    }
}

/// Waits until all `n` Deployments are complete at `want` replicas; returns each one's
/// completion time in seconds since `started` (as first seen by the driver).
pub(super) async fn wait_complete(
    api: &Api<Deployment>,
    n: usize,
    want: i32,
    started: Instant,
    timeout: Duration,
    controller: &mut Controller,
) -> Result<Vec<f64>> {
    let mut done: std::collections::BTreeMap<String, f64> = Default::default();
    let mut last_report = Instant::now();
    loop {
        let list = api.list(&ListParams::default()).await?;
        let now = started.elapsed().as_secs_f64();
        for d in &list.items {
            let key = d.metadata.name.clone().unwrap_or_default();
            if !done.contains_key(&key) && rollout_state(d).complete(want) {
                done.insert(key, now);
            }
        }
        if done.len() >= n {
            return Ok(done.into_values().collect());
        }
        if let Some(why) = controller.exited() {
            bail!(why);
        }
        if started.elapsed() > timeout {
            bail!(
                "only {}/{n} Deployments complete at {want} replicas after {timeout:?}",
                done.len()
            );
        }
        if last_report.elapsed() > Duration::from_secs(30) {
            eprintln!("  {}/{n} complete after {now:.0} s", done.len());
            last_report = Instant::now();
        }
        tokio::time::sleep(poll_interval(n)).await;
    }
}

/// Waits until at least `count` Deployments have observed their latest generation.
pub(super) async fn wait_observed(
    api: &Api<Deployment>,
    count: usize,
    started: Instant,
    timeout: Duration,
) -> Result<()> {
    loop {
        let list = api.list(&ListParams::default()).await?;
        let observed = list
            .items
            .iter()
            .filter(|d| {
                let s = rollout_state(d);
                s.observed_generation >= s.generation
            })
            .count();
        if observed >= count {
            return Ok(());
        }
        if started.elapsed() > timeout {
            bail!(
                "only {observed}/{count} Deployments observed the template change after {timeout:?}"
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Runs `f(0..count)` with [`CONCURRENCY`] requests in flight.
pub(super) async fn concurrently<F, Fut>(count: usize, f: F) -> Result<()>
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<()>> + Send + 'static,
{
    let next = Arc::new(AtomicUsize::new(0));
    let f = Arc::new(f);
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..CONCURRENCY.min(count.max(1)) {
        let (next, f) = (next.clone(), f.clone());
        workers.spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= count {
                    return Ok::<(), anyhow::Error>(());
                }
                f(i).await?;
            }
        });
    }
    while let Some(joined) = workers.join_next().await {
        if let Err(e) = joined.map_err(anyhow::Error::from).and_then(|r| r) {
            workers.abort_all();
            return Err(e);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recreate_patch_switches_the_strategy_and_the_image() {
        let patch = recreate_patch("f");
        assert_eq!(patch["spec"]["strategy"]["type"], "Recreate");
        assert!(patch["spec"]["strategy"]["rollingUpdate"].is_null());
        assert_eq!(
            patch["spec"]["template"]["spec"]["containers"][0]["image"],
            "registry.k8s.io/pause:f"
        );
    }

    #[test]
    fn rollout_completion() {
        let done = RolloutState {
            generation: 3,
            observed_generation: 3,
            spec_replicas: 4,
            replicas: 4,
            updated: 4,
            available: 4,
        };
        assert!(done.complete(4));
        assert!(!done.complete(8), "scaled but not yet observed at 8");
        assert!(
            !RolloutState {
                observed_generation: 2,
                ..done
            }
            .complete(4),
            "the latest spec is not observed yet"
        );
        assert!(
            !RolloutState {
                replicas: 5,
                ..done
            }
            .complete(4),
            "an old replica is still there"
        );
        assert!(!RolloutState { updated: 3, ..done }.complete(4));
        assert!(
            !RolloutState {
                available: 3,
                ..done
            }
            .complete(4)
        );
    }
}

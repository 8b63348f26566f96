//! The leader scenarios of [`super::scenarios`]: `kill-9` (the leader's process killed),
//! `sigterm` (the leader's pod deleted) and `self-update` (the controller rolls out its own new
//! image).

use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use kctrl_cluster::kind::{CONTROLLER_IMAGE, CONTROLLER_NAME};

use super::scenarios::{CONTAINER, Kube, rollout_workload};

/// `kill-9`: see [`super::scenarios`].
pub(super) fn kill_leader(
    kube: &Kube,
    (lease, renew, _): (Duration, Duration, Duration),
) -> Result<String> {
    let leader = kube.settled(CONTROLLER_IMAGE)?;
    let identity = kube.holder().context("the Lease's holder")?;
    let pod = kube
        .pods()?
        .into_iter()
        .find(|p| p.name == leader)
        .context("the leader's pod")?;
    let uid = kube.pod_uid(&leader)?;
    kube.save_logs(&leader);
    // The pod's process inside its node, found by the pod's cgroup (cgroupfs or systemd names).
    let script = format!(
        "n=0; for p in $(pgrep -f /usr/local/bin/{CONTAINER}); do \
         if grep -q -e {uid} -e {uid_} /proc/$p/cgroup; then kill -9 $p && n=$((n+1)); fi; done; \
         test $n -ge 1",
        uid_ = uid.replace('-', "_")
    );
    let started = Instant::now();
    super::run_command(&[
        "docker".into(),
        "exec".into(),
        pod.node.clone(),
        "sh".into(),
        "-c".into(),
        script,
    ])
    .with_context(|| format!("kill -9 of {leader}'s process on {}", pod.node))?;
    let limit = lease + renew;
    // Another process: the standby, or the killed pod's container restarted by its kubelet
    // (same pod, a new identity), whichever retries first once the Lease has expired.
    let (new, _) = kube.until(
        limit + Duration::from_secs(5),
        "takeover after kill -9",
        || kube.holder().filter(|h| *h != identity),
    )?;
    let who = if new.split('_').next() == Some(leader.as_str()) {
        "the killed pod's restarted container"
    } else {
        "the standby"
    };
    let takeover = started.elapsed();
    ensure!(
        takeover <= limit,
        "{new} took the Lease {:.1}s after the kill, beyond leaseDuration + renewDeadline = {}s",
        takeover.as_secs_f64(),
        limit.as_secs()
    );
    // The killed container restarts in place and becomes the standby.
    let settling = Instant::now();
    kube.settled(CONTROLLER_IMAGE)?;
    let settle = settling.elapsed();
    let rollout = rollout_workload(kube, "after-kill")?;
    Ok(format!(
        "{new} ({who}) took over {:.1}s after kill -9 of {leader} (limit leaseDuration + \
         renewDeadline = {}s); both Ready again after {:.1}s; a new Deployment rolled out in {:.1}s",
        takeover.as_secs_f64(),
        limit.as_secs(),
        settle.as_secs_f64(),
        rollout.as_secs_f64()
    ))
}

/// `sigterm`: see [`super::scenarios`].
pub(super) fn sigterm_leader(
    kube: &Kube,
    (lease, _, retry): (Duration, Duration, Duration),
    grace: Duration,
) -> Result<String> {
    let leader = kube.settled(CONTROLLER_IMAGE)?;
    kube.save_logs(&leader);
    let started = Instant::now();
    kube.sys(&["delete", "pod", &leader, "--wait=false"])?;
    // Poll the pod's container state until the pod is gone; the lease holder meanwhile.
    let mut exited: Option<(Duration, String)> = None;
    let mut gone = None;
    let mut takeover = None;
    while started.elapsed() < grace + Duration::from_secs(30)
        && (gone.is_none() || takeover.is_none())
    {
        if gone.is_none() {
            match kube.sys(&[
                "get",
                "pod",
                &leader,
                "--ignore-not-found",
                "-o",
                "jsonpath={.status.containerStatuses[0].state.terminated.exitCode} {.status.containerStatuses[0].state.terminated.finishedAt}",
            ]) {
                Ok(out) if out.trim().is_empty() && exited.is_some() => gone = Some(started.elapsed()),
                Ok(out) if out.trim().is_empty() => {
                    // Either still running or already gone: tell them apart.
                    let exists = kube
                        .sys(&["get", "pod", &leader, "--ignore-not-found", "-o", "name"])
                        .map(|o| !o.trim().is_empty())
                        .unwrap_or(true);
                    if !exists {
                        gone = Some(started.elapsed());
                    }
                }
                Ok(out) => {
                    if exited.is_none() {
                        exited = Some((started.elapsed(), out.trim().to_owned()));
                    }
                }
                Err(_) => {}
            }
        }
        if takeover.is_none()
            && let Some(l) = kube.leader().filter(|l| *l != leader)
        {
            takeover = Some((started.elapsed(), l));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let gone = gone.context("the deleted leader's pod did not go away")?;
    let (takeover, new) = takeover.context("no other pod took the Lease")?;
    // The container's exit: seen in its status, else bounded by the pod's removal.
    let exit = exited.as_ref().map_or(gone, |(t, _)| *t);
    let status = exited.as_ref().map_or(
        "(exit not observed before the pod was removed)".to_owned(),
        |(_, s)| format!("exit code and finishedAt: {s}"),
    );
    ensure!(
        exit < grace / 2,
        "the container exited {:.1}s after the deletion, not well within the grace period of {}s; \
         {status}",
        exit.as_secs_f64(),
        grace.as_secs()
    );
    if let Some((_, s)) = &exited {
        let code = s.split_whitespace().next().unwrap_or("");
        ensure!(
            code == "0",
            "the container exited with {code} on SIGTERM ({s})"
        );
    }
    // A released lease is taken at the standby's next retry; an expired one only after
    // leaseDuration.
    ensure!(
        takeover < lease,
        "{new} took the Lease {:.1}s after the deletion: not released (leaseDuration {}s)",
        takeover.as_secs_f64(),
        lease.as_secs()
    );
    let settling = Instant::now();
    kube.settled_without(CONTROLLER_IMAGE, std::slice::from_ref(&leader))?;
    let settle = settling.elapsed();
    Ok(format!(
        "{leader} deleted: container exited within {:.1}s ({status}; grace {}s), pod gone after \
         {:.1}s, {new} took the released Lease after {:.1}s (leaseDuration {}s, retry {}s); two \
         Ready pods again (the replacement included) {:.1}s later",
        exit.as_secs_f64(),
        grace.as_secs(),
        gone.as_secs_f64(),
        takeover.as_secs_f64(),
        lease.as_secs(),
        retry.as_secs(),
        settle.as_secs_f64()
    ))
}

/// `self-update`: see [`super::scenarios`].
pub(super) fn self_update(kube: &Kube) -> Result<String> {
    kube.settled(CONTROLLER_IMAGE)?;
    let (repo, _) = CONTROLLER_IMAGE
        .rsplit_once(':')
        .context("controller image tag")?;
    let tag = format!(
        "{repo}:self-update-{}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0)
    );
    super::run_command(&[
        "docker".into(),
        "tag".into(),
        CONTROLLER_IMAGE.into(),
        tag.clone(),
    ])?;
    let loaded = Instant::now();
    let load = super::run_command(&[
        kube.cluster.kind.display().to_string(),
        "load".into(),
        "docker-image".into(),
        tag.clone(),
        "--name".into(),
        kube.cluster.name.clone(),
    ]);
    let load_took = loaded.elapsed();
    let result = load.and_then(|()| {
        kube.save_all_logs()?;
        let started = Instant::now();
        kube.sys(&[
            "set",
            "image",
            &format!("deployment/{CONTROLLER_NAME}"),
            &format!("{CONTAINER}={tag}"),
        ])?;
        let leader = kube.await_own_rollout(&tag)?;
        let took = started.elapsed();
        let status = kube.sys(&[
            "get",
            "deployment",
            CONTROLLER_NAME,
            "-o",
            "jsonpath={.status.updatedReplicas}/{.status.readyReplicas}/{.status.replicas} observedGeneration={.status.observedGeneration} generation={.metadata.generation}",
        ])?;
        Ok(format!(
            "{tag} loaded in {:.1}s; our controller rolled out its own Deployment in {:.1}s \
             (updated/ready/total {}), {leader} of the new pods leads",
            load_took.as_secs_f64(),
            took.as_secs_f64(),
            status.trim()
        ))
    });
    let _ = std::process::Command::new("docker")
        .args(["rmi", &tag])
        .stdout(std::process::Stdio::null())
        .status();
    result
}

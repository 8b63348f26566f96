//! What only a real cluster shows about our controller running in it, checked after the suite
//! by `cargo xtask e2e --cluster kind` (controller installed from `deploy/`, two replicas, one
//! leading):
//!
//! * `metrics`: a pod scrapes `/metrics` with its own service-account token: 200 with the
//!   controller's metrics when its account may `get` the non-resource URL, 403 when not
//!   ([`super::scenarios_auth`]);
//! * `kill-9`: the leading pod's process is killed (`kill -9` inside its node, through the
//!   engine); the standby acquires the Lease within leaseDuration + renewDeadline, and a
//!   Deployment created afterwards rolls out;
//! * `sigterm`: the leading pod is deleted normally; its container exits well within
//!   terminationGracePeriodSeconds and releases the Lease, so the standby takes over at once
//!   (before the lease could have expired);
//! * `self-update`: our image under a new tag is loaded into the nodes and set as the
//!   controller Deployment's image; our controller rolls out its own Deployment to completion,
//!   both new pods Ready, one of them holding the Lease;
//! * `token-rotation`: the controller's pods get a 10-minute projected service-account token,
//!   which their kubelet rotates; the leader keeps the Lease past the old tokens' expiry and a
//!   Deployment still rolls out afterwards ([`super::scenarios_token`]);
//! * `rbac`: no request of the controller was forbidden in any controller pod's log (the
//!   logs of every pod are collected before it goes away);
//! * `probes`: the pods are probed on `/healthz` (liveness) and `/readyz` (readiness) by their
//!   kubelet, and no liveness probe failed during the run.
//!
//! Each prints one `scenario <name>: ok|FAILED …` line with its measured timings.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use kctrl_cluster::kind::{CONTROLLER_IMAGE, CONTROLLER_NAME, CONTROLLER_NAMESPACE};
use kctrl_cluster::kind::{CONTROLLER_POD_SELECTOR, held_by_deployment_pod};

use super::{scenarios_auth, scenarios_token};

/// The container of our Deployment's pods.
pub(super) const CONTAINER: &str = "deployment-controller";
/// How long the controller may take to be back at two Ready pods with a leader.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(240);
/// The namespaces of the workloads the scenarios roll out start with this.
const WORKLOAD_NAMESPACE_PREFIX: &str = "kctrl-scenario-";

/// kubectl against the kind cluster, plus the commands the scenarios run through the engine.
pub(super) struct Kube {
    /// The cluster: its kubectl and kubeconfig, kind's binary and the name (`kind load`).
    pub(super) cluster: crate::kind::cluster::Cluster,
    /// A directory with every controller pod's log (`<pod>.log`), saved before the pod goes
    /// away and again at the end.
    pub(super) logs: PathBuf,
}

impl Kube {
    /// `kubectl args…`, stdout returned.
    pub(super) fn get(&self, args: &[&str]) -> Result<String> {
        self.cluster.kubectl(args)
    }

    /// `kubectl -n kube-system args…`.
    pub(super) fn sys(&self, args: &[&str]) -> Result<String> {
        let mut a = vec!["-n", CONTROLLER_NAMESPACE];
        a.extend_from_slice(args);
        self.get(&a)
    }

    /// `kubectl apply -f -` of `manifest`.
    pub(super) fn apply(&self, manifest: &str) -> Result<()> {
        use std::io::Write;
        let mut child = std::process::Command::new(&self.cluster.kubectl)
            .arg(format!(
                "--kubeconfig={}",
                self.cluster.kubeconfig.display()
            ))
            .args(["apply", "-f", "-"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .spawn()
            .context("kubectl apply")?;
        child
            .stdin
            .take()
            .context("stdin")?
            .write_all(manifest.as_bytes())?;
        let status = child.wait()?;
        ensure!(status.success(), "kubectl apply failed ({status})");
        Ok(())
    }

    /// The pod holding our Lease (`None` while released or unreadable).
    fn leader(&self) -> Option<String> {
        self.holder()
            .map(|h| h.split('_').next().unwrap_or("").to_owned())
    }

    /// The Lease's full holder identity (`<pod>_<process suffix>`), if a Deployment pod holds it.
    pub(super) fn holder(&self) -> Option<String> {
        let holder = self
            .sys(&[
                "get",
                "lease",
                CONTROLLER_NAME,
                "-o",
                "jsonpath={.spec.holderIdentity}",
            ])
            .ok()?;
        held_by_deployment_pod(&holder).then(|| holder.trim().to_owned())
    }

    /// Whether the Deployment's status shows the rollout of `image` complete: two replicas,
    /// all updated, ready and available, its latest generation observed.
    fn deployment_complete(&self, image: &str) -> bool {
        self.sys(&[
            "get",
            "deployment",
            CONTROLLER_NAME,
            "-o",
            "jsonpath={.spec.template.spec.containers[0].image} {.status.replicas} {.status.updatedReplicas} {.status.readyReplicas} {.status.availableReplicas} {.status.observedGeneration} {.metadata.generation}",
        ])
        .is_ok_and(|out| {
            let f: Vec<&str> = out.split_whitespace().collect();
            f.len() == 7 && f[0] == image && f[1..5].iter().all(|n| *n == "2") && f[5] == f[6]
        })
    }

    /// The controller's pods: (name, Ready, image, node, IP) of each.
    pub(super) fn pods(&self) -> Result<Vec<PodRow>> {
        let out = self.sys(&[
            "get",
            "pods",
            "-l",
            CONTROLLER_POD_SELECTOR,
            "-o",
            "jsonpath={range .items[*]}{.metadata.name}|{.status.conditions[?(@.type==\"Ready\")].status}|{.spec.containers[0].image}|{.spec.nodeName}|{.status.podIP}|{.metadata.deletionTimestamp}{\"\\n\"}{end}",
        ])?;
        Ok(out.lines().filter_map(PodRow::parse).collect())
    }

    /// Saves the logs of `pod` (and of its previous container, if it restarted) as
    /// `<logs>/<pod>.log`, replacing what an earlier save of the same pod wrote.
    pub(super) fn save_logs(&self, pod: &str) {
        let mut text = String::new();
        for previous in [true, false] {
            let mut args = vec!["logs", pod, "-c", CONTAINER, "--tail=-1"];
            if previous {
                args.push("--previous");
            }
            if let Ok(out) = self.sys(&args) {
                let _ = writeln!(
                    text,
                    "===== {pod}{} =====\n{out}",
                    if previous { " (previous)" } else { "" }
                );
            }
        }
        if text.is_empty() {
            return;
        }
        let path = self.logs.join(format!("{pod}.log"));
        if let Err(e) =
            std::fs::create_dir_all(&self.logs).and_then(|()| std::fs::write(&path, text))
        {
            eprintln!("==> saving the logs of {pod}: {e}");
        }
    }

    /// Waits until the Deployment has two updated, Ready pods (and no others) and one of them
    /// holds the Lease; returns the leader.
    pub(super) fn settled(&self, image: &str) -> Result<String> {
        self.settled_without(image, &[])
    }

    /// [`Kube::settled`], with none of the pods `gone` among the two.
    fn settled_without(&self, image: &str, gone: &[String]) -> Result<String> {
        let deadline = Instant::now() + SETTLE_TIMEOUT;
        loop {
            let pods = self.pods().unwrap_or_default();
            let good = pods.len() == 2
                && pods.iter().all(|p| {
                    p.ready && p.image == image && !p.terminating && !gone.contains(&p.name)
                })
                && self.deployment_complete(image);
            if good
                && let Some(l) = self.leader()
                && pods.iter().any(|p| p.name == l)
            {
                return Ok(l);
            }
            if Instant::now() > deadline {
                bail!(
                    "after {}s the controller has not settled (2 Ready pods of {image}, one \
                     leading): pods {pods:?}, leader {:?}",
                    SETTLE_TIMEOUT.as_secs(),
                    self.leader()
                );
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    /// Polls until `check` returns `Some`, at most `limit`; returns the value and the time.
    fn until<T>(
        &self,
        limit: Duration,
        what: &str,
        mut check: impl FnMut() -> Option<T>,
    ) -> Result<(T, Duration)> {
        let started = Instant::now();
        loop {
            if let Some(v) = check() {
                return Ok((v, started.elapsed()));
            }
            if started.elapsed() > limit {
                bail!("{what}: not within {:.1}s", limit.as_secs_f64());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// One controller pod, as [`Kube::pods`] lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct PodRow {
    pub(super) name: String,
    pub(super) ready: bool,
    pub(super) image: String,
    pub(super) node: String,
    pub(super) ip: String,
    pub(super) terminating: bool,
}

impl PodRow {
    fn parse(line: &str) -> Option<PodRow> {
        let f: Vec<&str> = line.trim().split('|').map(str::trim).collect();
        let field = |i: usize| f.get(i).copied().unwrap_or("").to_owned();
        let name = field(0);
        if name.is_empty() {
            return None;
        }
        Some(PodRow {
            name,
            ready: field(1) == "True",
            image: field(2),
            node: field(3),
            ip: field(4),
            terminating: !field(5).is_empty(),
        })
    }
}

/// The leader-election timing of `deploy/05-deployment.yaml`'s flags (the controller's
/// defaults where the manifest sets none): (leaseDuration, renewDeadline, retryPeriod).
pub(super) fn lease_timing(manifest: &str) -> (Duration, Duration, Duration) {
    let flag = |name: &str, default: u64| {
        manifest
            .lines()
            .filter_map(|l| l.trim().trim_start_matches("- ").split_once('='))
            .find(|(k, _)| k.trim() == name)
            .and_then(|(_, v)| v.trim().trim_matches('"').strip_suffix('s')?.parse().ok())
            .map_or(Duration::from_secs(default), Duration::from_secs)
    };
    (
        flag("--leader-elect-lease-duration", 15),
        flag("--leader-elect-renew-deadline", 10),
        flag("--leader-elect-retry-period", 2),
    )
}

/// One scenario: its summary line (timings) or why it failed.
type Scenario<'a> = Box<dyn Fn() -> Result<String> + 'a>;

/// Runs every scenario (each one after the controller has settled again) and fails naming
/// those that failed.
pub(super) fn run(kube: &Kube) -> Result<()> {
    let manifest =
        std::fs::read_to_string(crate::workspace_root().join("deploy/05-deployment.yaml"))
            .context("reading deploy/05-deployment.yaml")?;
    let timing = lease_timing(&manifest);
    let grace = manifest
        .lines()
        .find_map(|l| l.trim().strip_prefix("terminationGracePeriodSeconds:"))
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map_or(Duration::from_secs(30), Duration::from_secs);
    let _ = std::fs::remove_dir_all(&kube.logs);
    // The pods the suite ran against.
    for p in kube.pods()? {
        kube.save_logs(&p.name);
    }
    let scenarios: Vec<(&str, Scenario<'_>)> = vec![
        ("metrics", Box::new(|| scenarios_auth::metrics(kube))),
        ("kill-9", Box::new(|| kill_leader(kube, timing))),
        ("sigterm", Box::new(|| sigterm_leader(kube, timing, grace))),
        ("self-update", Box::new(|| self_update(kube))),
        (
            "token-rotation",
            Box::new(|| scenarios_token::token_rotation(kube)),
        ),
    ];
    let mut failed = Vec::new();
    for (name, scenario) in scenarios {
        let started = Instant::now();
        match scenario() {
            Ok(summary) => eprintln!(
                "scenario {name}: ok in {:.1}s: {summary}",
                started.elapsed().as_secs_f64()
            ),
            Err(e) => {
                eprintln!(
                    "scenario {name}: FAILED after {:.1}s: {e:#}",
                    started.elapsed().as_secs_f64()
                );
                failed.push(name);
            }
        }
    }
    for p in kube.pods().unwrap_or_default() {
        kube.save_logs(&p.name);
    }
    let checks: Vec<(&str, Scenario<'_>)> = vec![
        ("rbac", Box::new(|| scenarios_auth::rbac(kube))),
        ("probes", Box::new(|| probes(kube))),
    ];
    for (name, check) in checks {
        match check() {
            Ok(summary) => eprintln!("scenario {name}: ok: {summary}"),
            Err(e) => {
                eprintln!("scenario {name}: FAILED: {e:#}");
                failed.push(name);
            }
        }
    }
    eprintln!(
        "==> the controller pods' logs of the scenarios: {}",
        kube.logs.display()
    );
    if !failed.is_empty() {
        bail!("in-cluster scenarios failed: {}", failed.join(", "));
    }
    Ok(())
}

/// `probes`: see the module docs.
fn probes(kube: &Kube) -> Result<String> {
    let pods = kube.sys(&[
        "get",
        "pods",
        "-l",
        CONTROLLER_POD_SELECTOR,
        "-o",
        "jsonpath={range .items[*]}{.metadata.name}|{.spec.containers[0].livenessProbe.httpGet.path}|{.spec.containers[0].readinessProbe.httpGet.path}|{.status.containerStatuses[0].restartCount}{\"\\n\"}{end}",
    ])?;
    let mut restarts = 0;
    let mut count = 0;
    for line in pods.lines().filter(|l| !l.trim().is_empty()) {
        let f: Vec<&str> = line.split('|').collect();
        ensure!(
            f.len() == 4 && f[1] == "/healthz" && f[2] == "/readyz",
            "pod {} is not probed on /healthz (liveness) and /readyz (readiness): {line}",
            f[0]
        );
        restarts += f[3].trim().parse::<u32>().unwrap_or(0);
        count += 1;
    }
    ensure!(count > 0, "no controller pod");
    let events = kube.sys(&[
        "get",
        "events",
        "--field-selector",
        "reason=Unhealthy,involvedObject.kind=Pod",
        "-o",
        "jsonpath={range .items[*]}{.involvedObject.name}|{.count}|{.message}{\"\\n\"}{end}",
    ])?;
    let (liveness, readiness) = unhealthy_events(&events);
    ensure!(
        liveness.is_empty(),
        "the kubelet's liveness probe of /healthz failed on controller pods: {}",
        liveness.join("; ")
    );
    Ok(format!(
        "{count} pods probed on /healthz and /readyz over HTTPS: no liveness failure, {readiness} \
         readiness failure(s) (while starting), {restarts} restart(s) of the current pods"
    ))
}

/// The `Unhealthy` events (`name|count|message` lines) of the controller's pods: the liveness
/// failures and how many readiness failures there were.
fn unhealthy_events(lines: &str) -> (Vec<String>, u32) {
    let mut liveness = Vec::new();
    let mut readiness = 0;
    for line in lines.lines() {
        let mut f = line.splitn(3, '|');
        let (name, count, message) = (
            f.next().unwrap_or(""),
            f.next().unwrap_or(""),
            f.next().unwrap_or(""),
        );
        if !name.starts_with(&format!("{CONTROLLER_NAME}-")) {
            continue;
        }
        let count = count.trim().parse::<u32>().unwrap_or(1);
        if message.starts_with("Liveness") {
            liveness.push(format!("{name} ({count}x): {message}"));
        } else if message.starts_with("Readiness") {
            readiness += count;
        }
    }
    (liveness, readiness)
}

/// `kill-9`: see the module docs.
fn kill_leader(kube: &Kube, (lease, renew, _): (Duration, Duration, Duration)) -> Result<String> {
    let leader = kube.settled(CONTROLLER_IMAGE)?;
    let identity = kube.holder().context("the Lease's holder")?;
    let pod = kube
        .pods()?
        .into_iter()
        .find(|p| p.name == leader)
        .context("the leader's pod")?;
    let uid = kube.sys(&["get", "pod", &leader, "-o", "jsonpath={.metadata.uid}"])?;
    let uid = uid.trim();
    ensure!(!uid.is_empty(), "pod {leader} has no uid");
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

/// A two-replica Deployment `name`, created now in a namespace of its own
/// (`kctrl-scenario-<name>`, deleted afterwards), rolls out; returns how long that took.
pub(super) fn rollout_workload(kube: &Kube, name: &str) -> Result<Duration> {
    let namespace = format!("{WORKLOAD_NAMESPACE_PREFIX}{name}");
    let started = Instant::now();
    kube.apply(&format!(
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {namespace}\n---\n\
         apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {name}\n  namespace: {namespace}\n\
         spec:\n  replicas: 2\n  selector:\n    matchLabels:\n      app: {name}\n  template:\n    \
         metadata:\n      labels:\n        app: {name}\n    spec:\n      terminationGracePeriodSeconds: 0\n      \
         containers:\n      - name: app\n        image: registry.k8s.io/pause:3.10\n"
    ))?;
    kube.get(&[
        "-n",
        &namespace,
        "rollout",
        "status",
        &format!("deployment/{name}"),
        "--timeout=180s",
    ])?;
    let took = started.elapsed();
    kube.get(&["delete", "namespace", &namespace, "--wait=false"])?;
    Ok(took)
}

/// `sigterm`: see the module docs.
fn sigterm_leader(
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

/// `self-update`: see the module docs.
fn self_update(kube: &Kube) -> Result<String> {
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
        for p in kube.pods()? {
            kube.save_logs(&p.name);
        }
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

impl Kube {
    /// The image of the controller Deployment's container.
    pub(super) fn current_image(&self) -> Result<String> {
        let image = self.sys(&[
            "get",
            "deployment",
            CONTROLLER_NAME,
            "-o",
            "jsonpath={.spec.template.spec.containers[0].image}",
        ])?;
        let image = image.trim();
        ensure!(
            !image.is_empty(),
            "deployment/{CONTROLLER_NAME} names no image"
        );
        Ok(image.to_owned())
    }

    /// What [`Kube::save_logs`] saved of `pod`.
    pub(super) fn saved_log(&self, pod: &str) -> Result<String> {
        let path = self.logs.join(format!("{pod}.log"));
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))
    }

    /// After a change to the controller's own Deployment (pods of `image`): waits until our
    /// controller has rolled it out (two Ready pods of the new template, one leading), saving
    /// the logs of the old pods while they terminate; returns the leader.
    pub(super) fn await_own_rollout(&self, image: &str) -> Result<String> {
        let deadline = Instant::now() + SETTLE_TIMEOUT;
        loop {
            let pods = self.pods().unwrap_or_default();
            for p in pods.iter().filter(|p| p.terminating) {
                self.save_logs(&p.name);
            }
            if let Ok(l) = self.settled_now(image, &pods) {
                return Ok(l);
            }
            if Instant::now() > deadline {
                bail!(
                    "after {}s the rollout of deployment/{CONTROLLER_NAME} ({image}) has not \
                     completed: pods {pods:?}, leader {:?}",
                    SETTLE_TIMEOUT.as_secs(),
                    self.leader()
                );
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    /// [`Kube::settled`]'s condition on `pods`, without waiting.
    fn settled_now(&self, image: &str, pods: &[PodRow]) -> Result<String> {
        let good = pods.len() == 2
            && pods
                .iter()
                .all(|p| p.ready && p.image == image && !p.terminating)
            && self.deployment_complete(image);
        ensure!(good, "not settled: {pods:?}");
        let l = self.leader().context("no leader")?;
        ensure!(pods.iter().any(|p| p.name == l), "{l} leads, not a new pod");
        Ok(l)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lease_timing_comes_from_the_flags_or_the_defaults() {
        let real =
            std::fs::read_to_string(crate::workspace_root().join("deploy/05-deployment.yaml"))
                .unwrap();
        let (l, r, p) = lease_timing(&real);
        assert!(r < l && p < r, "{l:?} {r:?} {p:?}");
        let set = "args:\n- --leader-elect-lease-duration=30s\n        - --leader-elect-renew-deadline=20s\n";
        assert_eq!(
            lease_timing(set),
            (
                Duration::from_secs(30),
                Duration::from_secs(20),
                Duration::from_secs(2)
            )
        );
    }

    #[test]
    fn unhealthy_events_of_the_controller_pods_are_told_apart() {
        let events = "kctrl-deployment-controller-5d8f-abcde|3|Readiness probe failed: Get \"https://10.244.1.5:10257/readyz\": connection refused\n\
                      kctrl-deployment-controller-5d8f-fghij||Liveness probe failed: HTTP probe failed with statuscode: 500\n\
                      other-app-1|9|Liveness probe failed: x\n";
        let (liveness, readiness) = unhealthy_events(events);
        assert_eq!(readiness, 3);
        assert_eq!(liveness.len(), 1, "{liveness:?}");
        assert!(liveness[0].starts_with("kctrl-deployment-controller-5d8f-fghij (1x)"));
    }

    #[test]
    fn pod_rows_are_parsed() {
        let r = PodRow::parse(
            "kctrl-x-1|True|kctrl/deployment-controller:dev|kctrl-kind-e2e-worker|10.244.1.5|",
        )
        .unwrap();
        assert!(r.ready && !r.terminating);
        assert_eq!(r.node, "kctrl-kind-e2e-worker");
        assert_eq!(r.ip, "10.244.1.5");
        let t = PodRow::parse("kctrl-x-2|False|img|node|10.0.0.1|2026-11-28T17:00:00Z").unwrap();
        assert!(!t.ready && t.terminating);
        let pending = PodRow::parse("kctrl-x-3||img|||").unwrap();
        assert!(!pending.ready && pending.ip.is_empty());
        assert!(PodRow::parse("").is_none());
    }
}

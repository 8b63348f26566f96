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
//! * `sharded` (last: it replaces the installed controller): the controller is switched to
//!   the sharded variant of `deploy/sharded/` (three replicas, kube-apiserver with the
//!   `ShardedListAndWatch` gate); their member Leases must split the 64 buckets, 12
//!   Deployments in 6 namespaces roll out; one replica's pod is force-deleted and every
//!   Deployment rolled out again at once: the live members must claim all 64 buckets again
//!   within the lease duration plus 10 s (the handover time is printed), every Deployment must
//!   converge with one ReplicaSet per template revision, and three live members must split
//!   the buckets again ([`super::scenarios_sharded`]);
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
use kctrl_cluster::kind::{CONTROLLER_NAME, CONTROLLER_NAMESPACE};
use kctrl_cluster::kind::{CONTROLLER_POD_SELECTOR, held_by_deployment_pod};

use super::{scenarios_auth, scenarios_leader, scenarios_sharded, scenarios_token};

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
    pub(super) fn leader(&self) -> Option<String> {
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
    pub(super) fn deployment_complete(&self, image: &str) -> bool {
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
    pub(super) fn settled_without(&self, image: &str, gone: &[String]) -> Result<String> {
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
    pub(super) fn until<T>(
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

/// The scenarios `--scenario` selects from, in the order they run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Name {
    /// `/metrics` scraped with and without the right to it.
    Metrics,
    /// The leader's process killed.
    #[value(name = "kill-9")]
    Kill9,
    /// The leader's pod deleted.
    Sigterm,
    /// The controller rolls out its own new image.
    SelfUpdate,
    /// A 10-minute token rotated under the controller (about 12 minutes).
    TokenRotation,
    /// The sharded variant installed, one of its three replicas force-deleted during
    /// rollouts (last: it replaces the leader-elected controller).
    Sharded,
}

/// One scenario: its summary line (timings) or why it failed.
type Scenario<'a> = Box<dyn Fn() -> Result<String> + 'a>;

/// Runs every scenario (each one after the controller has settled again) and fails naming
/// those that failed.
pub(super) fn run(kube: &Kube, only: &[Name]) -> Result<()> {
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
    kube.save_all_logs()?;
    let scenarios: Vec<(Name, Scenario<'_>)> = vec![
        (Name::Metrics, Box::new(|| scenarios_auth::metrics(kube))),
        (
            Name::Kill9,
            Box::new(|| scenarios_leader::kill_leader(kube, timing)),
        ),
        (
            Name::Sigterm,
            Box::new(|| scenarios_leader::sigterm_leader(kube, timing, grace)),
        ),
        (
            Name::SelfUpdate,
            Box::new(|| scenarios_leader::self_update(kube)),
        ),
        (
            Name::TokenRotation,
            Box::new(|| scenarios_token::token_rotation(kube)),
        ),
        (Name::Sharded, Box::new(|| scenarios_sharded::sharded(kube))),
    ];
    let mut failed = Vec::new();
    for (name, scenario) in scenarios
        .into_iter()
        .filter(|(n, _)| only.is_empty() || only.contains(n))
    {
        let name = name.label();
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
    // Best effort: the checks below say what is missing.
    let _ = kube.save_all_logs();
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

impl Name {
    /// The name `--scenario` takes and the `scenario <name>:` lines print.
    fn label(self) -> &'static str {
        match self {
            Name::Metrics => "metrics",
            Name::Kill9 => "kill-9",
            Name::Sigterm => "sigterm",
            Name::SelfUpdate => "self-update",
            Name::TokenRotation => "token-rotation",
            Name::Sharded => "sharded",
        }
    }
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

    /// [`Kube::save_logs`] of every controller pod there is now.
    pub(super) fn save_all_logs(&self) -> Result<()> {
        for p in self.pods()? {
            self.save_logs(&p.name);
        }
        Ok(())
    }

    /// The UID of pod `pod` (in the controller's namespace).
    pub(super) fn pod_uid(&self, pod: &str) -> Result<String> {
        let uid = self.sys(&["get", "pod", pod, "-o", "jsonpath={.metadata.uid}"])?;
        let uid = uid.trim();
        ensure!(!uid.is_empty(), "pod {pod} has no uid");
        Ok(uid.to_owned())
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
    pub(super) fn settled_now(&self, image: &str, pods: &[PodRow]) -> Result<String> {
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
    fn scenario_labels_are_the_names_the_flag_takes() {
        use clap::ValueEnum;
        for n in Name::value_variants() {
            let flag = n.to_possible_value().unwrap();
            assert_eq!(flag.get_name(), n.label());
        }
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

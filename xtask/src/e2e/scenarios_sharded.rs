//! The `sharded` scenario of [`super::scenarios`], the last of them (it replaces the
//! installed controller): the leader-elected controller of `deploy/` is switched to the
//! sharded variant of `deploy/sharded/` as docs/operations.md ("Installing the sharded
//! variant") describes, three replicas split the 64 buckets between them, Deployments in
//! namespaces spread over the buckets roll out; then one replica's pod is force-deleted
//! (`kubectl delete pod --grace-period=0 --force`), every Deployment is rolled out again at
//! once, and the survivors must take the lost buckets over within the lease duration plus a
//! margin, every Deployment must converge with one ReplicaSet per template revision, and the
//! member Leases must split the buckets again between three live replicas. kube-apiserver
//! runs with the `ShardedListAndWatch` gate (`kctrl_cluster::kind::KIND_FEATURE_GATES`), so
//! no replica may log that the server ignored its shard selector.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use kctrl_client::sharding::hash_field;
use kctrl_cluster::kind::{
    CONTROLLER_NAME, SHARD_BUCKETS_ANNOTATION, SHARD_GROUP, SHARD_GROUP_LABEL,
    SHARD_LEASE_NAMESPACE, SHARDED_BOOTSTRAP_MANIFEST, SHARDED_MANIFESTS,
};
use kctrl_shard::{BucketSet, DEFAULT_BUCKET_COUNT, EXPIRED_BY_ANNOTATION, bucket_of};
use serde_json::Value;

use super::scenarios::{Kube, lease_timing};

/// Replicas of `deploy/sharded/deployment.yaml`.
const REPLICAS: usize = 3;
/// Namespaces of the workload, and Deployments in each.
const NAMESPACES: usize = 6;
const DEPLOYMENTS_PER_NAMESPACE: usize = 2;
/// The label on the workload's namespaces and Deployments (value [`WORKLOAD_VALUE`]).
const WORKLOAD_LABEL: &str = "kctrl.io/e2e-scenario";
const WORKLOAD_VALUE: &str = "sharded";
/// The pod-template annotation whose value is the template revision the scenario wrote.
const REVISION_ANNOTATION: &str = "kctrl.io/e2e-revision";
/// The selector of the sharded Deployment's pods (not the bootstrap Pod's).
const MEMBER_POD_SELECTOR: &str =
    "app.kubernetes.io/name=kctrl-deployment-controller,app.kubernetes.io/component=controller";
/// What a replica logs when kube-apiserver ignores its shard selector (no feature gate).
const SELECTOR_IGNORED: &str = "ignored the shard selector";
/// How long the installation's steps (the old pods gone, the split in force) may take.
const INSTALL_TIMEOUT: Duration = Duration::from_secs(240);
/// How long the workload may take to roll out (first and second time).
const CONVERGE_TIMEOUT: Duration = Duration::from_secs(240);
/// Beyond the lease duration: the survivors' next round, their claims confirmed.
const HANDOVER_MARGIN: Duration = Duration::from_secs(10);

/// One member Lease of the group, as listed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct MemberLease {
    /// The Lease's name (`<group>-<identity>`).
    pub(super) name: String,
    /// `spec.holderIdentity`: `<pod name>-<UUID>`.
    pub(super) holder: String,
    /// The claimed buckets, or the annotation's text when it cannot be read.
    pub(super) claims: Result<BucketSet, String>,
    /// Another member found the Lease expired and cleared it.
    pub(super) expired_by: Option<String>,
    /// `deletionTimestamp` is set.
    pub(super) being_deleted: bool,
}

/// The group's Leases from `kubectl get lease -o json`.
pub(super) fn parse_members(json: &str) -> Result<Vec<MemberLease>> {
    let list: Value = serde_json::from_str(json).context("parsing the member Lease list")?;
    let items = list["items"]
        .as_array()
        .context("the member Lease list has no items")?;
    let mut out = Vec::new();
    for item in items {
        let meta = &item["metadata"];
        let text = |v: &Value| v.as_str().unwrap_or("").to_owned();
        let annotation = |key: &str| meta["annotations"][key].as_str().map(str::to_owned);
        let buckets = annotation(SHARD_BUCKETS_ANNOTATION).unwrap_or_default();
        out.push(MemberLease {
            name: text(&meta["name"]),
            holder: text(&item["spec"]["holderIdentity"]),
            claims: buckets.parse::<BucketSet>().map_err(|_| buckets.clone()),
            expired_by: annotation(EXPIRED_BY_ANNOTATION).filter(|e| !e.is_empty()),
            being_deleted: meta["deletionTimestamp"].is_string(),
        });
    }
    Ok(out)
}

/// The pod among `pods` whose process holds `holder` (`<pod name>-<UUID>`).
pub(super) fn pod_of<'a>(holder: &str, pods: &'a [String]) -> Option<&'a String> {
    pods.iter().find(|pod| {
        holder
            .strip_prefix(pod.as_str())
            .and_then(|rest| rest.strip_prefix('-'))
            .is_some_and(|uuid| {
                uuid.len() == 36 && uuid.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-')
            })
    })
}

/// How the member Leases split the buckets, judged against the pods that run.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Split {
    /// Leases of running pods not cleared or being deleted, with their pod and claims.
    pub(super) live: BTreeMap<String, (String, BucketSet)>,
    /// Leases of pods that are gone, or cleared, or being deleted, that still claim buckets.
    pub(super) stale_claims: BTreeMap<String, BucketSet>,
    /// Leases whose buckets annotation cannot be read, with its text.
    pub(super) unreadable: BTreeMap<String, String>,
    /// Buckets no live Lease claims.
    pub(super) missing: BucketSet,
    /// Buckets claimed by more than one Lease, with those Leases.
    pub(super) overlaps: BTreeMap<u32, Vec<String>>,
}

impl Split {
    /// The split of `members` with `pods` running.
    pub(super) fn of(members: &[MemberLease], pods: &[String]) -> Split {
        let mut split = Split::default();
        let mut claimants: BTreeMap<u32, Vec<String>> = BTreeMap::new();
        for m in members {
            let claims = match &m.claims {
                Ok(c) => c.clone(),
                Err(text) => {
                    split.unreadable.insert(m.name.clone(), text.clone());
                    continue;
                }
            };
            for b in claims.iter() {
                claimants.entry(b).or_default().push(m.name.clone());
            }
            let pod =
                pod_of(&m.holder, pods).filter(|_| m.expired_by.is_none() && !m.being_deleted);
            match pod {
                Some(pod) => {
                    split.live.insert(m.name.clone(), (pod.clone(), claims));
                }
                None if !claims.is_empty() => {
                    split.stale_claims.insert(m.name.clone(), claims);
                }
                None => {}
            }
        }
        split.missing = (0..DEFAULT_BUCKET_COUNT)
            .filter(|b| !split.live.values().any(|(_, c)| c.contains(*b)))
            .collect();
        split.overlaps = claimants.into_iter().filter(|(_, l)| l.len() > 1).collect();
        split
    }

    /// Every bucket claimed by exactly one live member, and nothing by anyone else.
    pub(super) fn covered(&self) -> bool {
        self.missing.is_empty()
            && self.overlaps.is_empty()
            && self.stale_claims.is_empty()
            && self.unreadable.is_empty()
    }

    /// [`Split::covered`], by exactly `replicas` live members, one per pod.
    pub(super) fn complete(&self, replicas: usize) -> bool {
        let pods: BTreeSet<&String> = self.live.values().map(|(p, _)| p).collect();
        self.covered() && self.live.len() == replicas && pods.len() == replicas
    }

    /// The live member holding `bucket`, by its pod.
    pub(super) fn holder_of(&self, bucket: u32) -> Option<&str> {
        self.live
            .values()
            .find(|(_, c)| c.contains(bucket))
            .map(|(p, _)| p.as_str())
    }

    /// One line per member and per fault.
    pub(super) fn describe(&self) -> String {
        let mut out = String::new();
        for (lease, (pod, claims)) in &self.live {
            let _ = write!(
                out,
                "[{pod}: buckets {claims:?} ({} of them), Lease {lease}] ",
                claims.len()
            );
        }
        if !self.missing.is_empty() {
            let _ = write!(out, "[buckets {} claimed by no live member] ", self.missing);
        }
        for (bucket, leases) in &self.overlaps {
            let _ = write!(
                out,
                "[bucket {bucket} claimed by {}] ",
                leases.join(" and ")
            );
        }
        for (lease, claims) in &self.stale_claims {
            let _ = write!(
                out,
                "[Lease {lease} of no running member still claims buckets {claims}] "
            );
        }
        for (lease, text) in &self.unreadable {
            let _ = write!(
                out,
                "[Lease {lease}: unreadable buckets annotation {text:?}] "
            );
        }
        if out.is_empty() {
            out.push_str("no member Lease");
        }
        out.trim_end().to_owned()
    }
}

/// One Deployment of the workload, as listed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct DeploymentRow {
    pub(super) namespace: String,
    pub(super) name: String,
    pub(super) uid: String,
    /// Whether its status shows its latest template rolled out completely.
    pub(super) complete: bool,
    /// The status in short, for messages.
    pub(super) status: String,
}

/// The workload's Deployments from `kubectl get deployment -o json`.
pub(super) fn parse_deployments(json: &str) -> Result<Vec<DeploymentRow>> {
    let list: Value = serde_json::from_str(json).context("parsing the Deployment list")?;
    let items = list["items"]
        .as_array()
        .context("the Deployment list has no items")?;
    Ok(items
        .iter()
        .map(|d| {
            let n = |v: &Value| v.as_i64().unwrap_or(0);
            let (spec, status) = (&d["spec"], &d["status"]);
            let want = spec["replicas"].as_i64().unwrap_or(1);
            let generation = n(&d["metadata"]["generation"]);
            let observed = n(&status["observedGeneration"]);
            let (total, updated, available) = (
                n(&status["replicas"]),
                n(&status["updatedReplicas"]),
                n(&status["availableReplicas"]),
            );
            DeploymentRow {
                namespace: d["metadata"]["namespace"].as_str().unwrap_or("").to_owned(),
                name: d["metadata"]["name"].as_str().unwrap_or("").to_owned(),
                uid: d["metadata"]["uid"].as_str().unwrap_or("").to_owned(),
                complete: observed == generation
                    && total == want
                    && updated == want
                    && available == want,
                status: format!(
                    "generation {generation} observed {observed}, replicas {total} updated \
                     {updated} available {available} of {want}"
                ),
            }
        })
        .collect())
}

/// The ReplicaSets of each Deployment (by owner uid): their template revisions
/// ([`REVISION_ANNOTATION`]) and names, from `kubectl get replicaset -o json`.
pub(super) fn replica_sets_by_owner(json: &str) -> Result<BTreeMap<String, Vec<(String, String)>>> {
    let list: Value = serde_json::from_str(json).context("parsing the ReplicaSet list")?;
    let items = list["items"]
        .as_array()
        .context("the ReplicaSet list has no items")?;
    let mut out: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
    for rs in items {
        let Some(owner) = rs["metadata"]["ownerReferences"]
            .as_array()
            .and_then(|o| o.iter().find(|r| r["controller"] == true))
            .and_then(|r| r["uid"].as_str())
        else {
            continue;
        };
        let revision = rs["spec"]["template"]["metadata"]["annotations"][REVISION_ANNOTATION]
            .as_str()
            .unwrap_or("")
            .to_owned();
        let name = rs["metadata"]["name"].as_str().unwrap_or("").to_owned();
        out.entry(owner.to_owned())
            .or_default()
            .push((revision, name));
    }
    Ok(out)
}

/// What is wrong with the ReplicaSets of a Deployment whose templates went through
/// `revisions`: `None` when there is exactly one ReplicaSet per revision and no other.
pub(super) fn replica_set_fault(sets: &[(String, String)], revisions: &[String]) -> Option<String> {
    let mut by_revision: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (revision, name) in sets {
        by_revision.entry(revision).or_default().push(name);
    }
    let mut faults = Vec::new();
    for r in revisions {
        match by_revision.get(r.as_str()).map(Vec::len).unwrap_or(0) {
            1 => {}
            0 => faults.push(format!("no ReplicaSet of revision {r}")),
            _ => faults.push(format!(
                "{} ReplicaSets of revision {r}: {}",
                by_revision[r.as_str()].len(),
                by_revision[r.as_str()].join(", ")
            )),
        }
    }
    for (r, names) in &by_revision {
        if !revisions.iter().any(|x| x == r) {
            faults.push(format!(
                "ReplicaSets of no revision written ({r:?}): {}",
                names.join(", ")
            ));
        }
    }
    (!faults.is_empty()).then(|| faults.join("; "))
}

/// The workload: `DEPLOYMENTS_PER_NAMESPACE` Deployments in each namespace, their template
/// annotated with `revision`, as one manifest with the namespaces.
fn workload_manifest(namespaces: &[String], revision: u32) -> String {
    let mut out = String::new();
    for ns in namespaces {
        let _ = write!(
            out,
            "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {ns}\n  labels:\n    \
             {WORKLOAD_LABEL}: {WORKLOAD_VALUE}\n---\n"
        );
        for i in 0..DEPLOYMENTS_PER_NAMESPACE {
            let name = format!("app-{i}");
            let _ = write!(
                out,
                "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {name}\n  \
                 namespace: {ns}\n  labels:\n    {WORKLOAD_LABEL}: {WORKLOAD_VALUE}\nspec:\n  \
                 replicas: 2\n  selector:\n    matchLabels:\n      app: {name}\n  strategy:\n    \
                 rollingUpdate:\n      maxSurge: 1\n      maxUnavailable: 0\n  template:\n    \
                 metadata:\n      labels:\n        app: {name}\n      annotations:\n        \
                 {REVISION_ANNOTATION}: \"{revision}\"\n    spec:\n      \
                 terminationGracePeriodSeconds: 0\n      containers:\n      - name: app\n        \
                 image: registry.k8s.io/pause:3.10\n---\n"
            );
        }
    }
    out
}

impl Kube {
    /// The group's member Leases.
    fn members(&self) -> Result<Vec<MemberLease>> {
        let json = self.get(&[
            "-n",
            SHARD_LEASE_NAMESPACE,
            "get",
            "lease",
            "-l",
            &format!("{SHARD_GROUP_LABEL}={SHARD_GROUP}"),
            "-o",
            "json",
        ])?;
        parse_members(&json)
    }

    /// The sharded Deployment's pods that run and are not being deleted.
    fn member_pods(&self) -> Result<Vec<String>> {
        let out = self.sys(&[
            "get",
            "pods",
            "-l",
            MEMBER_POD_SELECTOR,
            "-o",
            "jsonpath={range .items[*]}{.metadata.name}|{.status.phase}|{.metadata.deletionTimestamp}{\"\\n\"}{end}",
        ])?;
        Ok(out
            .lines()
            .filter_map(|l| {
                let f: Vec<&str> = l.trim().split('|').collect();
                (f.len() == 3 && f[1] == "Running" && f[2].is_empty()).then(|| f[0].to_owned())
            })
            .collect())
    }

    /// The split as it stands.
    fn split(&self) -> Result<Split> {
        let pods = self.member_pods()?;
        Ok(Split::of(&self.members()?, &pods))
    }

    /// Polls the split until `done` holds, at most `limit`; fails with the last split.
    fn await_split(
        &self,
        limit: Duration,
        what: &str,
        done: impl Fn(&Split) -> bool,
    ) -> Result<(Split, Duration)> {
        let started = Instant::now();
        loop {
            let last = match self.split() {
                Ok(s) if done(&s) => return Ok((s, started.elapsed())),
                other => other,
            };
            if started.elapsed() > limit {
                let last = match last {
                    Ok(s) => s.describe(),
                    Err(e) => format!("unreadable: {e:#}"),
                };
                bail!(
                    "{what}: not within {}s; member Leases: {last}",
                    limit.as_secs()
                );
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// The workload's Deployments.
    fn workload(&self) -> Result<Vec<DeploymentRow>> {
        let json = self.get(&[
            "get",
            "deployment",
            "-A",
            "-l",
            &format!("{WORKLOAD_LABEL}={WORKLOAD_VALUE}"),
            "-o",
            "json",
        ])?;
        parse_deployments(&json)
    }

    /// Waits until every Deployment of the workload has rolled out `revisions`' last one, with
    /// one ReplicaSet per revision; fails naming each that has not, with its namespace's
    /// bucket and the member holding it.
    fn await_workload(&self, namespaces: &[String], revisions: &[String]) -> Result<Duration> {
        let started = Instant::now();
        let expected = namespaces.len() * DEPLOYMENTS_PER_NAMESPACE;
        loop {
            let pending = self.workload_pending(expected, revisions);
            match pending {
                Ok(p) if p.is_empty() => return Ok(started.elapsed()),
                _ if started.elapsed() <= CONVERGE_TIMEOUT => {
                    std::thread::sleep(Duration::from_millis(500));
                }
                Ok(p) => {
                    let split = self.split().ok();
                    let lines: Vec<String> = p
                        .iter()
                        .map(|(ns, line)| {
                            let bucket = bucket_of(hash_field(ns), DEFAULT_BUCKET_COUNT);
                            let holder = split
                                .as_ref()
                                .and_then(|s| s.holder_of(bucket))
                                .unwrap_or("no live member");
                            format!("{line} (bucket {bucket}, held by {holder})")
                        })
                        .collect();
                    bail!(
                        "after {}s {} of {expected} Deployments have not converged on revision \
                         {}: {}",
                        CONVERGE_TIMEOUT.as_secs(),
                        p.len(),
                        revisions.last().map_or("", String::as_str),
                        lines.join("; ")
                    );
                }
                Err(e) => bail!(
                    "after {}s the workload could not be read: {e:#}",
                    CONVERGE_TIMEOUT.as_secs()
                ),
            }
        }
    }

    /// The Deployments not yet converged (namespace, description).
    fn workload_pending(
        &self,
        expected: usize,
        revisions: &[String],
    ) -> Result<Vec<(String, String)>> {
        let rows = self.workload()?;
        ensure!(
            rows.len() == expected,
            "{} Deployments of the workload listed, not {expected}",
            rows.len()
        );
        let sets = replica_sets_by_owner(&self.get(&[
            "get",
            "replicaset",
            "-A",
            "-l",
            "app in (app-0,app-1)",
            "-o",
            "json",
        ])?)?;
        let mut pending = Vec::new();
        for d in rows {
            let owned = sets.get(&d.uid).map(Vec::as_slice).unwrap_or(&[]);
            let fault = replica_set_fault(owned, revisions);
            if !d.complete || fault.is_some() {
                pending.push((
                    d.namespace.clone(),
                    format!(
                        "{}/{}: {}{}",
                        d.namespace,
                        d.name,
                        d.status,
                        fault.map(|f| format!(", {f}")).unwrap_or_default()
                    ),
                ));
            }
        }
        Ok(pending)
    }
}

/// `sharded`: see the module docs.
pub(super) fn sharded(kube: &Kube) -> Result<String> {
    let root = crate::workspace_root();
    let manifest = std::fs::read_to_string(root.join("deploy/sharded/deployment.yaml"))
        .context("reading deploy/sharded/deployment.yaml")?;
    let (lease, _, _) = lease_timing(&manifest);
    let mut rng = fastrand::Rng::new();
    let namespaces = crate::kube::namespace_names(&mut rng, NAMESPACES);
    let result = install(kube)
        .and_then(|(install, split)| workload_and_kill(kube, &namespaces, lease, install, &split));
    let cleanup = cleanup(kube, &namespaces);
    match (result, cleanup) {
        (Ok(summary), Ok(())) => Ok(summary),
        (Ok(_), Err(e)) => Err(e),
        (Err(e), Ok(())) => Err(e),
        (Err(e), Err(e2)) => {
            eprintln!("==> cleaning up after the sharded scenario failed too: {e2:#}");
            Err(e)
        }
    }
}

/// Switches from `deploy/` to `deploy/sharded/` and waits until three replicas split the
/// buckets; returns how long that took and the split.
fn install(kube: &Kube) -> Result<(Duration, Split)> {
    let started = Instant::now();
    let root = crate::workspace_root();
    let path = |m: &str| root.join(m).display().to_string();
    kube.save_all_logs()?;
    // The Namespace, Role and RoleBinding of the member Leases.
    for m in &SHARDED_MANIFESTS[..3] {
        kube.get(&["apply", "-f", &path(m)])
            .with_context(|| format!("applying {m}"))?;
    }
    // The leader scales its own Deployment to 0; its pods stop (and release the Lease).
    kube.sys(&[
        "scale",
        &format!("deployment/{CONTROLLER_NAME}"),
        "--replicas=0",
    ])?;
    kube.until(
        INSTALL_TIMEOUT,
        "the leader-elected pods gone after scaling to 0",
        || {
            let pods = kube.pods().ok()?;
            for p in &pods {
                kube.save_logs(&p.name);
            }
            pods.is_empty().then_some(())
        },
    )?;
    for m in &SHARDED_MANIFESTS[3..] {
        kube.get(&["apply", "-f", &path(m)])
            .with_context(|| format!("applying {m}"))?;
    }
    kube.sys(&[
        "rollout",
        "status",
        &format!("deployment/{CONTROLLER_NAME}"),
        "--timeout=5m",
    ])
    .context("the sharded Deployment's rollout (by the bootstrap Pod)")?;
    kube.save_all_logs()?;
    kube.get(&[
        "delete",
        "-f",
        &path(SHARDED_BOOTSTRAP_MANIFEST),
        "--wait=true",
    ])
    .context("deleting the bootstrap Pod")?;
    let (split, _) = kube.await_split(
        INSTALL_TIMEOUT,
        "three replicas splitting the 64 buckets after the bootstrap Pod left",
        |s| s.complete(REPLICAS),
    )?;
    Ok((started.elapsed(), split))
}

/// The workload, the kill, the second rollout and the checks; returns the summary.
fn workload_and_kill(
    kube: &Kube,
    namespaces: &[String],
    lease: Duration,
    install: Duration,
    split: &Split,
) -> Result<String> {
    let buckets: BTreeMap<&String, u32> = namespaces
        .iter()
        .map(|ns| (ns, bucket_of(hash_field(ns), DEFAULT_BUCKET_COUNT)))
        .collect();
    // The replica holding most of the workload's namespaces is killed.
    let mut load: BTreeMap<&str, Vec<&String>> = BTreeMap::new();
    for (ns, b) in &buckets {
        let holder = split
            .holder_of(*b)
            .with_context(|| format!("no member holds bucket {b} (namespace {ns})"))?;
        load.entry(holder).or_default().push(ns);
    }
    let placement = load
        .iter()
        .map(|(pod, ns)| format!("{pod}: {}", ns.len()))
        .collect::<Vec<_>>()
        .join(", ");
    let (victim, victim_namespaces) = load
        .iter()
        .max_by_key(|(_, ns)| ns.len())
        .map(|(p, ns)| ((*p).to_owned(), ns.len()))
        .context("no member")?;
    let (victim_lease, victim_buckets) = split
        .live
        .iter()
        .find(|(_, (pod, _))| *pod == victim)
        .map(|(l, (_, c))| (l.clone(), c.clone()))
        .context("the victim's Lease")?;

    let revisions = vec!["1".to_owned()];
    kube.apply(&workload_manifest(namespaces, 1))?;
    let first = kube
        .await_workload(namespaces, &revisions)
        .context("the first rollout")?;

    kube.save_logs(&victim);
    let killed = Instant::now();
    kube.sys(&["delete", "pod", &victim, "--grace-period=0", "--force"])
        .with_context(|| format!("force-deleting {victim}"))?;
    // At once: every Deployment rolls out a new template while the buckets change hands.
    let revisions = vec!["1".to_owned(), "2".to_owned()];
    kube.apply(&workload_manifest(namespaces, 2))?;
    let limit = lease + HANDOVER_MARGIN;
    let (after_kill, handover) = kube
        .await_split(
            limit,
            &format!(
                "the buckets {victim_buckets} of {victim} (Lease {victim_lease}) taken over by \
                 live members"
            ),
            |s| s.covered() && !s.live.contains_key(&victim_lease),
        )
        .context("handover after the kill")?;
    let took_over: Vec<String> = after_kill
        .live
        .values()
        .map(|(pod, c)| format!("{pod} {c}"))
        .collect();
    kube.await_workload(namespaces, &revisions)
        .context("the rollout started right after the kill")?;
    let converged = killed.elapsed();
    let (final_split, _) = kube.await_split(
        INSTALL_TIMEOUT,
        "three live replicas splitting the 64 buckets again after the kill",
        |s| s.complete(REPLICAS),
    )?;
    let victim_lease_now = kube.members()?.into_iter().find(|m| m.name == victim_lease);
    let fate = match victim_lease_now {
        None => "removed".to_owned(),
        Some(m) => match (&m.claims, &m.expired_by) {
            (Ok(c), Some(by)) if c.is_empty() => format!("cleared as expired by {by}"),
            (Ok(c), None) if c.is_empty() => "released".to_owned(),
            _ => bail!(
                "the killed member's Lease {victim_lease} still claims {:?}; member Leases: {}",
                m.claims,
                final_split.describe()
            ),
        },
    };
    if fate != "removed" {
        // Cleared, its finalizer gone with its claims: nothing of the killed member is left.
        kube.get(&[
            "-n",
            SHARD_LEASE_NAMESPACE,
            "delete",
            "lease",
            &victim_lease,
            "--ignore-not-found",
        ])?;
    }
    ensure!(
        !final_split.live.values().any(|(p, _)| *p == victim),
        "the force-deleted pod {victim} still counts as a member: {}",
        final_split.describe()
    );
    // With the gate on, the server filters: no replica fell back to filtering on its side.
    let mut ignored = Vec::new();
    for (pod, _) in final_split.live.values() {
        kube.save_logs(pod);
        if kube.saved_log(pod)?.contains(SELECTOR_IGNORED) {
            ignored.push(pod.clone());
        }
    }
    ensure!(
        ignored.is_empty(),
        "kube-apiserver ignored the shard selector of {} (is the ShardedListAndWatch gate on?)",
        ignored.join(", ")
    );
    let spread: BTreeSet<u32> = buckets.values().copied().collect();
    Ok(format!(
        "installed from deploy/sharded/ in {:.1}s (3 replicas, 64 buckets split {}); {} \
         Deployments in {} namespaces ({} buckets; namespaces per replica: {placement}) rolled \
         out in {:.1}s; {victim} (buckets {victim_buckets}, {victim_namespaces} of the \
         namespaces) force-deleted, every Deployment rolled out again at once: handover (all \
         64 buckets claimed by live members: {}) {:.1}s after the kill (limit leaseDuration \
         {}s + {}s), its Lease {fate}; all Deployments converged on the new template {:.1}s \
         after the kill, one ReplicaSet per template revision; 3 live members again: {}",
        install.as_secs_f64(),
        split
            .live
            .values()
            .map(|(_, c)| c.len().to_string())
            .collect::<Vec<_>>()
            .join("/"),
        namespaces.len() * DEPLOYMENTS_PER_NAMESPACE,
        namespaces.len(),
        spread.len(),
        first.as_secs_f64(),
        took_over.join(", "),
        handover.as_secs_f64(),
        lease.as_secs(),
        HANDOVER_MARGIN.as_secs(),
        converged.as_secs_f64(),
        final_split.describe()
    ))
}

/// Deletes the workload's namespaces and waits until they are gone.
fn cleanup(kube: &Kube, namespaces: &[String]) -> Result<()> {
    let existing: Vec<&String> = namespaces
        .iter()
        .filter(|ns| {
            kube.get(&["get", "namespace", ns, "--ignore-not-found", "-o", "name"])
                .is_ok_and(|o| !o.trim().is_empty())
        })
        .collect();
    if existing.is_empty() {
        return Ok(());
    }
    let mut args = vec!["delete", "namespace", "--wait=false"];
    args.extend(existing.iter().map(|s| s.as_str()));
    kube.get(&args)?;
    kube.until(
        CONVERGE_TIMEOUT,
        "the workload's namespaces deleted",
        || {
            let left = kube
                .get(&[
                    "get",
                    "namespace",
                    "-l",
                    &format!("{WORKLOAD_LABEL}={WORKLOAD_VALUE}"),
                    "-o",
                    "name",
                ])
                .ok()?;
            left.trim().is_empty().then_some(())
        },
    )
    .with_context(|| {
        format!(
            "namespaces {} still there",
            existing
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )
    })?;
    Ok(())
}

#[cfg(test)]
#[path = "scenarios_sharded_tests.rs"]
mod tests;

//! The sharded profile's checks: the replicas' caches against a fresh list, ReplicaSets and
//! generations, the replicas' stop, their logs and the audit check.

use super::super::shard_audit::{self, ShardAudit};
use super::*;

impl ShardedRun<'_> {
    /// The run's objects as a fresh list sees them: `resource namespace/name resourceVersion`.
    pub(super) async fn fresh_listing(&self) -> Result<BTreeSet<String>> {
        let mut fresh = BTreeSet::new();
        let params = ListParams::default();
        for ns in &self.namespaces {
            let line = |r: &str, m: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta| {
                format!(
                    "{r} {ns}/{} {}",
                    m.name.as_deref().unwrap_or(""),
                    m.resource_version.as_deref().unwrap_or("")
                )
            };
            for d in Api::<Deployment>::namespaced(self.admin.clone(), ns)
                .list(&params)
                .await?
                .items
            {
                fresh.insert(line("deployments", &d.metadata));
            }
            for rs in Api::<ReplicaSet>::namespaced(self.admin.clone(), ns)
                .list(&params)
                .await?
                .items
            {
                fresh.insert(line("replicasets", &rs.metadata));
            }
            for p in Api::<Pod>::namespaced(self.admin.clone(), ns)
                .list(&params)
                .await?
                .items
            {
                fresh.insert(line("pods", &p.metadata));
            }
        }
        Ok(fresh)
    }

    /// Each live replica's cache listing of the run's namespaces.
    pub(super) fn cached(&self) -> Result<Vec<(String, BTreeSet<String>)>> {
        let run_namespaces: BTreeSet<&str> = self.namespaces.iter().map(String::as_str).collect();
        self.live()
            .into_iter()
            .map(|i| {
                let r = &self.replicas[i];
                let url = format!("https://127.0.0.1:{}/debug/cache", r.port);
                let lines = curl(&url)?
                    .lines()
                    .filter(|l| {
                        l.split(' ')
                            .nth(1)
                            .and_then(|key| key.split_once('/'))
                            .is_some_and(|(ns, _)| run_namespaces.contains(ns))
                    })
                    .map(str::to_owned)
                    .collect();
                Ok((r.label.clone(), lines))
            })
            .collect()
    }

    /// The replicas' caches hold disjoint parts that add up to a fresh list; a summary.
    pub(super) async fn check_caches(&mut self, when: &str) -> Result<String> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let cached = tokio::task::block_in_place(|| self.cached())?;
            let fresh = self.fresh_listing().await?;
            let mut union = BTreeSet::new();
            let mut twice = Vec::new();
            for (label, lines) in &cached {
                for l in lines {
                    if !union.insert(l.clone()) {
                        twice.push(format!("{label}: {l}"));
                    }
                }
            }
            let counts = cached
                .iter()
                .map(|(label, lines)| {
                    let of = |r: &str| lines.iter().filter(|l| l.starts_with(r)).count();
                    let namespaces: BTreeSet<&str> = lines
                        .iter()
                        .filter_map(|l| l.split(' ').nth(1)?.split_once('/').map(|(ns, _)| ns))
                        .collect();
                    format!(
                        "{label} {} namespaces, {} Deployments, {} ReplicaSets, {} Pods",
                        namespaces.len(),
                        of("deployments "),
                        of("replicasets "),
                        of("pods ")
                    )
                })
                .collect::<Vec<_>>()
                .join("; ");
            if twice.is_empty() && union == fresh {
                let empty: Vec<&String> = cached
                    .iter()
                    .filter(|(_, lines)| lines.is_empty())
                    .map(|(label, _)| label)
                    .collect();
                if !empty.is_empty() {
                    self.report.problems.push(format!(
                        "{when}: replicas {empty:?} cache none of the run's namespaces: the split \
                         did not spread them"
                    ));
                }
                return Ok(format!(
                    "{when}: {} objects, each in exactly one replica's caches ({counts})",
                    fresh.len()
                ));
            }
            if Instant::now() > deadline {
                let diff = listing_diff(&union, &fresh, 10);
                let text = format!(
                    "{when}: the replicas' caches are not a partition of a fresh list: {} in two \
                     caches ({}); {}",
                    twice.len(),
                    twice.iter().take(5).cloned().collect::<Vec<_>>().join(", "),
                    diff.join("; ")
                );
                self.report.problems.push(text.clone());
                return Ok(text);
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }

    /// No Deployment has two ReplicaSets of one pod-template-hash; every Deployment's
    /// status is of its latest generation.
    pub(super) async fn check_replica_sets_and_generations(&mut self) -> Result<()> {
        let mut seen: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
        for ns in &self.namespaces {
            for rs in Api::<ReplicaSet>::namespaced(self.admin.clone(), ns)
                .list(&ListParams::default())
                .await?
                .items
            {
                let Some(owner) = rs
                    .metadata
                    .owner_references
                    .as_ref()
                    .and_then(|o| o.iter().find(|o| o.controller == Some(true)))
                else {
                    continue;
                };
                let hash = rs
                    .metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get("pod-template-hash"))
                    .cloned()
                    .unwrap_or_default();
                seen.entry((format!("{ns}/{}", owner.uid), hash))
                    .or_default()
                    .push(rs.metadata.name.clone().unwrap_or_default());
            }
        }
        for ((owner, hash), names) in &seen {
            if names.len() > 1 {
                self.report.violations.push(format!(
                    "duplicate ReplicaSets of Deployment {owner} with pod-template-hash {hash}: {names:?}"
                ));
            }
        }
        for d in self.list_deployments().await? {
            let generation = d.metadata.generation.unwrap_or(0);
            let observed = d
                .status
                .as_ref()
                .and_then(|s| s.observed_generation)
                .unwrap_or(0);
            if observed != generation {
                self.report.violations.push(format!(
                    "lost update: {}/{} has generation {generation}, status of {observed}",
                    d.metadata.namespace.as_deref().unwrap_or(""),
                    d.metadata.name.as_deref().unwrap_or("")
                ));
            }
        }
        Ok(())
    }

    /// Stops the live replicas (SIGTERM, status 0 expected), checks every pid is gone and
    /// the logs have no panic, reads the audit log; the report.
    pub(super) async fn finish(
        mut self,
        outcome: Result<()>,
        audit: &AuditLog,
    ) -> Result<GateReport> {
        if let Err(e) = outcome {
            self.report.problems.push(format!("{e:#}"));
        }
        let _ = self
            .check_exits()
            .map_err(|e| self.report.problems.push(format!("{e:#}")));
        for r in &mut self.replicas {
            let Some(p) = r.process.take() else {
                continue;
            };
            if let Err(e) = tokio::task::block_in_place(|| p.stop()) {
                self.report.problems.push(format!(
                    "replica {} did not stop cleanly on SIGTERM: {e:#}",
                    r.label
                ));
            }
        }
        // Who filtered: the apiserver with the gate on (no replica warns that it was ignored),
        // every replica itself with the gate off.
        let warned: Vec<&str> = self
            .replicas
            .iter()
            .filter(|r| {
                fs::read_to_string(&r.log)
                    .unwrap_or_default()
                    .contains(IGNORED_SELECTOR)
            })
            .map(|r| r.label.as_str())
            .collect();
        let gate = self.report.gate;
        self.report.filtering = match (gate, warned.len()) {
            (true, 0) => {
                "by kube-apiserver (no replica found its shard selector ignored)".to_owned()
            }
            (false, n) if n == self.replicas.len() => {
                "by each replica (every one found its shard selector ignored and filtered itself)"
                    .to_owned()
            }
            _ => {
                let text = format!(
                    "ShardedListAndWatch={gate}, yet replicas {warned:?} of {} found their shard \
                     selector ignored",
                    self.replicas.len()
                );
                self.report.problems.push(text.clone());
                text
            }
        };
        for r in &self.replicas {
            if !gone(r.pid) {
                self.report.problems.push(format!(
                    "replica {} (pid {}) still runs after it was {}",
                    r.label, r.pid, r.fate
                ));
            }
            let log = fs::read_to_string(&r.log).unwrap_or_default();
            for line in panic_lines(&log) {
                self.report
                    .problems
                    .push(format!("panic in replica {}'s log: {line}", r.label));
            }
        }
        if !fresh::deployment_controllers(&self.info.dir).is_empty() {
            self.report.problems.push(format!(
                "Deployment controllers still run against the cluster: {:?}",
                fresh::deployment_controllers(&self.info.dir)
            ));
        }
        self.report.deployments = self.deployments.len();
        let text = fs::read_to_string(audit.log_path())
            .with_context(|| format!("reading {}", audit.log_path().display()))?;
        let (events, unreadable) = xtask_contender::audit::parse(&text);
        let checked: ShardAudit = shard_audit::check(&events, GROUP, LEASE_NAMESPACE, BUCKETS);
        let identities: BTreeMap<&str, &str> = self
            .replicas
            .iter()
            .map(|r| (r.identity.as_str(), r.label.as_str()))
            .collect();
        let mut summary = checked.summary();
        for (id, label) in &identities {
            summary = summary.replace(id, label);
        }
        if unreadable > 0 {
            self.report.problems.push(format!(
                "{unreadable} lines of the audit log could not be read"
            ));
        }
        if checked.lease_writes == 0 || checked.writes.is_empty() {
            self.report.problems.push(format!(
                "the audit log shows no Lease claims or no controller writes: {summary}"
            ));
        }
        for v in &checked.violations {
            let mut v = v.clone();
            for (id, label) in &identities {
                v = v.replace(id, label);
            }
            self.report.violations.push(format!("audit: {v}"));
        }
        self.report.audit = format!(
            "{} events; {summary}; replicas: {}",
            events.len(),
            self.replicas
                .iter()
                .map(|r| format!("{} {}", r.label, r.fate))
                .collect::<Vec<_>>()
                .join(", ")
        );
        Ok(self.report)
    }
}

//! The audit check of the sharded profile: from the apiserver's audit log alone, did two
//! replicas ever write objects of one shard bucket at once?
//!
//! The member Leases' writes are logged with their bodies (`RequestResponse`), so the
//! claims can be read back: a replica **holds** a bucket from the completion of the Lease
//! write that first claims it to the reception of the write that drops it (its own release,
//! another member clearing it as expired, or the Lease's deletion). Then:
//!
//! * every successful write of a Deployment, ReplicaSet or Pod by a replica (told apart by
//!   the shard identity in its User-Agent) must fall within a hold, by that replica, of the
//!   bucket of the object's namespace: received after the hold began, completed before it
//!   ended;
//! * two holds of one bucket by different replicas must not overlap, except when the earlier
//!   one was ended by another member (it expired); then all of the expired replica's writes
//!   in that bucket must come before the first write of the replica that overlapped it.
//!
//! The hold's bounds are taken conservatively (a claim counts from its answer, a release from
//! its request), so a write that the protocol orders after a claim and before a release is
//! within them by the apiserver's own clock.

use std::collections::BTreeMap;

use k8s_openapi::api::coordination::v1::Lease;
use kctrl_client::sharding::hash_field;
use kctrl_shard::{BucketSet, MemberLease, bucket_of};

use xtask_contender::audit::{AuditEvent, Timestamp};

/// The user our controller runs as on the local plane (`deploy/`'s ServiceAccount).
const CONTROLLER_USER: &str = "system:serviceaccount:kube-system:kctrl-deployment-controller";

/// The identity a sharded replica puts in its User-Agent: `… (shard <identity>)…`.
pub(crate) fn identity_of(user_agent: &str) -> Option<&str> {
    let rest = &user_agent[user_agent.find("(shard ")? + "(shard ".len()..];
    let id = &rest[..rest.find(')')?];
    (!id.is_empty()).then_some(id)
}

/// One replica's hold of one bucket.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Hold {
    pub(crate) holder: String,
    pub(crate) bucket: u32,
    pub(crate) start: Timestamp,
    /// `None`: still held at the end of the log.
    pub(crate) end: Option<Timestamp>,
    /// Ended by another member's write (its claims cleared as expired).
    pub(crate) expired: bool,
}

impl Hold {
    fn covers(&self, e: &AuditEvent) -> bool {
        self.start <= e.received && self.end.is_none_or(|end| e.completed <= end)
    }

    fn overlaps(&self, other: &Hold) -> bool {
        let before = |a: &Hold, b: &Hold| a.end.is_some_and(|end| end <= b.start);
        !before(self, other) && !before(other, self)
    }
}

/// What the check found.
#[derive(Debug, Default)]
pub(crate) struct ShardAudit {
    /// Successful writes of the group's Leases.
    pub(crate) lease_writes: usize,
    /// Holds read from them.
    pub(crate) holds: Vec<Hold>,
    /// Successful controller writes (Deployments, ReplicaSets, Pods), by replica identity.
    pub(crate) writes: BTreeMap<String, usize>,
    /// Controller writes the apiserver refused (conflicts and the like): nothing written.
    pub(crate) failed_writes: usize,
    /// Everything that breaks the rules of the module documentation.
    pub(crate) violations: Vec<String>,
}

impl ShardAudit {
    /// Buckets that passed from one replica to another (consecutive holds by different
    /// replicas).
    pub(crate) fn handovers(&self) -> usize {
        let mut by_bucket: BTreeMap<u32, Vec<&Hold>> = BTreeMap::new();
        for h in &self.holds {
            by_bucket.entry(h.bucket).or_default().push(h);
        }
        by_bucket
            .values_mut()
            .map(|holds| {
                holds.sort_by_key(|h| h.start);
                holds
                    .windows(2)
                    .filter(|w| w[0].holder != w[1].holder)
                    .count()
            })
            .sum()
    }

    /// Holds ended by another member (expired).
    pub(crate) fn expiries(&self) -> usize {
        self.holds.iter().filter(|h| h.expired).count()
    }

    /// One line for the report.
    pub(crate) fn summary(&self) -> String {
        let total: usize = self.writes.values().sum();
        format!(
            "{} Lease writes read, {} holds of {} buckets, {} handovers ({} after an expiry); \
             {total} controller writes by {} replicas ({}), {} refused by the apiserver; {} \
             violation(s)",
            self.lease_writes,
            self.holds.len(),
            self.holds
                .iter()
                .map(|h| h.bucket)
                .collect::<std::collections::BTreeSet<_>>()
                .len(),
            self.handovers(),
            self.expiries(),
            self.writes.len(),
            self.writes
                .iter()
                .map(|(id, n)| format!("{id}: {n}"))
                .collect::<Vec<_>>()
                .join(", "),
            self.failed_writes,
            self.violations.len()
        )
    }
}

fn fmt_time(t: Timestamp) -> String {
    t.to_string()
}

/// Checks `events` for the Leases of shard `group` in `lease_namespace` (members' Leases are
/// `<group>-<identity>`) with `bucket_count` buckets.
pub(crate) fn check(
    events: &[AuditEvent],
    group: &str,
    lease_namespace: &str,
    bucket_count: u32,
) -> ShardAudit {
    let mut audit = ShardAudit::default();
    let prefix = format!("{group}-");
    // The group's Lease writes, per Lease, in the order they were applied.
    let mut leases: BTreeMap<&str, Vec<&AuditEvent>> = BTreeMap::new();
    for e in events {
        if e.group == "coordination.k8s.io"
            && e.resource == "leases"
            && e.namespace == lease_namespace
            && e.name.starts_with(&prefix)
            && e.is_write()
            && e.succeeded()
        {
            leases.entry(e.name.as_str()).or_default().push(e);
        }
    }
    for (name, writes) in &mut leases {
        writes.sort_by_key(|e| e.completed);
        let owner = &name[prefix.len()..];
        let mut claimed = BucketSet::new();
        let mut open: BTreeMap<u32, Hold> = BTreeMap::new();
        for e in writes.iter() {
            audit.lease_writes += 1;
            // A member leaving deletes its Lease first, while the finalizer keeps it: the
            // answer is the Lease, marked for deletion, its claims still held. A delete that
            // removed the Lease answers with a Status: nothing is held any more.
            let kept = e.verb == "delete"
                && e.response
                    .as_ref()
                    .and_then(|body| serde_json::from_value::<Lease>(body.clone()).ok())
                    .is_some_and(|l| {
                        l.metadata.deletion_timestamp.is_some()
                            && l.metadata
                                .finalizers
                                .as_ref()
                                .is_some_and(|f| !f.is_empty())
                    });
            let now = if e.verb == "delete" && !kept {
                BucketSet::new()
            } else {
                match e
                    .response
                    .as_ref()
                    .and_then(|body| serde_json::from_value::<Lease>(body.clone()).ok())
                    .as_ref()
                    .and_then(MemberLease::from_lease)
                {
                    Some(lease) => match (&lease.claims, lease.bucket_count) {
                        (Some(claims), Some(count)) if count == bucket_count => claims.clone(),
                        (Some(claims), None) if claims.is_empty() => BucketSet::new(),
                        _ => {
                            audit.violations.push(format!(
                                "lease {name} written at {} with claims that cannot be read \
                                 ({:?} of {:?} buckets)",
                                fmt_time(e.completed),
                                lease.claims,
                                lease.bucket_count
                            ));
                            BucketSet::all(bucket_count)
                        }
                    },
                    None => {
                        audit.violations.push(format!(
                            "lease {name}: the {} at {} has no readable body in the audit log \
                             (is the policy's level RequestResponse?)",
                            e.verb,
                            fmt_time(e.completed)
                        ));
                        claimed.clone()
                    }
                }
            };
            let by_other = identity_of(&e.user_agent).is_some_and(|id| id != owner);
            for bucket in claimed.iter().filter(|b| !now.contains(*b)) {
                if let Some(mut hold) = open.remove(&bucket) {
                    hold.end = Some(e.received);
                    hold.expired = by_other;
                    audit.holds.push(hold);
                }
            }
            for bucket in now.iter().filter(|b| !claimed.contains(*b)) {
                open.insert(
                    bucket,
                    Hold {
                        holder: owner.to_owned(),
                        bucket,
                        start: e.completed,
                        end: None,
                        expired: false,
                    },
                );
            }
            claimed = now;
        }
        audit.holds.extend(open.into_values());
    }
    let mut holds_of: BTreeMap<(u32, &str), Vec<&Hold>> = BTreeMap::new();
    for h in &audit.holds {
        holds_of
            .entry((h.bucket, h.holder.as_str()))
            .or_default()
            .push(h);
    }
    // Controller writes, each within a hold of its bucket by its writer.
    let mut writes_of: BTreeMap<(u32, String), Vec<&AuditEvent>> = BTreeMap::new();
    for e in events {
        let controlled = (e.group == "apps"
            && matches!(e.resource.as_str(), "deployments" | "replicasets"))
            || (e.group.is_empty() && e.resource == "pods");
        if !controlled || !e.is_write() {
            continue;
        }
        let Some(id) = identity_of(&e.user_agent) else {
            if e.user_agent.starts_with("deployment-controller/") || e.username == CONTROLLER_USER {
                audit.violations.push(format!(
                    "{} {} at {} by a deployment-controller without a shard identity ({})",
                    e.verb,
                    e.object(),
                    fmt_time(e.received),
                    e.user_agent
                ));
            }
            continue;
        };
        if !e.succeeded() {
            audit.failed_writes += 1;
            continue;
        }
        *audit.writes.entry(id.to_owned()).or_default() += 1;
        let bucket = bucket_of(hash_field(&e.namespace), bucket_count);
        let held = holds_of
            .get(&(bucket, id))
            .is_some_and(|holds| holds.iter().any(|h| h.covers(e)));
        if !held {
            audit.violations.push(format!(
                "{id} wrote ({} {}) from {} to {} outside its holds of bucket {bucket}: {}",
                e.verb,
                e.object(),
                fmt_time(e.received),
                fmt_time(e.completed),
                describe_holds(holds_of.get(&(bucket, id)))
            ));
        }
        writes_of
            .entry((bucket, id.to_owned()))
            .or_default()
            .push(e);
    }
    // Holds of one bucket by two replicas at once.
    let mut by_bucket: BTreeMap<u32, Vec<&Hold>> = BTreeMap::new();
    for h in &audit.holds {
        by_bucket.entry(h.bucket).or_default().push(h);
    }
    for (bucket, holds) in &by_bucket {
        for (i, a) in holds.iter().enumerate() {
            for b in &holds[i + 1..] {
                if a.holder == b.holder || !a.overlaps(b) {
                    continue;
                }
                let (early, late) = if a.start <= b.start { (a, b) } else { (b, a) };
                if !early.expired {
                    audit.violations.push(format!(
                        "bucket {bucket} held by {} ({} to {}) and {} ({} to {}) at once",
                        early.holder,
                        fmt_time(early.start),
                        early.end.map_or("the end".to_owned(), fmt_time),
                        late.holder,
                        fmt_time(late.start),
                        late.end.map_or("the end".to_owned(), fmt_time),
                    ));
                    continue;
                }
                let last_early = writes_of
                    .get(&(*bucket, early.holder.clone()))
                    .and_then(|w| w.iter().map(|e| e.completed).max());
                let first_late = writes_of
                    .get(&(*bucket, late.holder.clone()))
                    .and_then(|w| {
                        w.iter()
                            .map(|e| e.received)
                            .filter(|t| *t >= late.start)
                            .min()
                    });
                if let (Some(last), Some(first)) = (last_early, first_late)
                    && last >= first
                {
                    audit.violations.push(format!(
                        "bucket {bucket}: {} (expired) wrote until {}, after {} first wrote at {}",
                        early.holder,
                        fmt_time(last),
                        late.holder,
                        fmt_time(first)
                    ));
                }
            }
        }
    }
    audit.holds.sort_by_key(|h| (h.bucket, h.start));
    audit
}

fn describe_holds(holds: Option<&Vec<&Hold>>) -> String {
    match holds {
        None => "it never held it".to_owned(),
        Some(holds) => holds
            .iter()
            .map(|h| {
                format!(
                    "{} to {}",
                    fmt_time(h.start),
                    h.end.map_or("the end".to_owned(), fmt_time)
                )
            })
            .collect::<Vec<_>>()
            .join(", "),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GROUP: &str = "deployment-controller";
    const NS: &str = "kube-system";

    fn t(seconds: f64) -> Timestamp {
        Timestamp::from_microsecond(1_800_000_000_000_000 + (seconds * 1e6) as i64).unwrap()
    }

    fn ua(id: &str) -> String {
        format!("deployment-controller/0.1.0 (shard {id})")
    }

    /// A write of the Lease of `owner` by `writer` claiming `buckets`, received at `at` and
    /// answered 10 ms later.
    fn lease(owner: &str, writer: &str, buckets: &str, at: f64, rv: u32) -> AuditEvent {
        let body = serde_json::json!({
            "metadata": {"name": format!("{GROUP}-{owner}"), "namespace": NS,
                "resourceVersion": rv.to_string(),
                "annotations": {"shard.kctrl.io/buckets": buckets, "shard.kctrl.io/bucket-count": "64"}},
            "spec": {"holderIdentity": owner}
        });
        AuditEvent {
            verb: "update".into(),
            user_agent: format!("{} shard-member", ua(writer)),
            username: String::new(),
            group: "coordination.k8s.io".into(),
            resource: "leases".into(),
            subresource: String::new(),
            namespace: NS.into(),
            name: format!("{GROUP}-{owner}"),
            code: 200,
            received: t(at),
            completed: t(at + 0.01),
            response: Some(body),
        }
    }

    /// A write by `who` of a ReplicaSet in `namespace`, received at `at`.
    fn write(who: &str, namespace: &str, at: f64) -> AuditEvent {
        AuditEvent {
            verb: "create".into(),
            user_agent: ua(who),
            username: String::new(),
            group: "apps".into(),
            resource: "replicasets".into(),
            subresource: String::new(),
            namespace: namespace.into(),
            name: "web-1".into(),
            code: 201,
            received: t(at),
            completed: t(at + 0.01),
            response: None,
        }
    }

    fn bucket(namespace: &str) -> u32 {
        bucket_of(hash_field(namespace), 64)
    }

    #[test]
    fn identities_are_read_from_the_user_agent() {
        assert_eq!(identity_of(&ua("host-1")), Some("host-1"));
        assert_eq!(
            identity_of("deployment-controller/0.1.0 (shard host-1) shard-member"),
            Some("host-1")
        );
        assert_eq!(identity_of("deployment-controller/0.1.0"), None);
        assert_eq!(identity_of("x (shard )"), None);
    }

    // A leaving member marks its Lease for deletion first (its finalizer keeps it) and keeps
    // reconciling the bucket it still claims; the Lease goes only once that is released.
    #[test]
    fn a_delete_kept_by_the_finalizer_keeps_the_claims() {
        let ns = "ab3kx-shard";
        let b = bucket(ns);
        let mut marked = lease("a", "a", &b.to_string(), 2.0, 2);
        marked.verb = "delete".into();
        let body = marked.response.as_mut().unwrap();
        body["metadata"]["deletionTimestamp"] = "2027-01-15T08:00:02Z".into();
        body["metadata"]["finalizers"] = serde_json::json!(["shard.kctrl.io/member"]);
        let mut gone = lease("a", "a", "", 6.0, 4);
        gone.verb = "delete".into();
        gone.response = Some(serde_json::json!({"kind": "Status", "status": "Success"}));
        let events = vec![
            lease("a", "a", &b.to_string(), 0.0, 1),
            marked,
            write("a", ns, 3.0),
            lease("a", "a", "", 5.0, 3),
            gone,
            lease("b", "b", &b.to_string(), 7.0, 5),
            write("b", ns, 8.0),
        ];
        let audit = check(&events, GROUP, NS, 64);
        assert!(audit.violations.is_empty(), "{:?}", audit.violations);
        assert_eq!(audit.handovers(), 1);
    }

    #[test]
    fn writes_within_holds_and_a_clean_handover_pass() {
        let ns = "ab3kx-shard";
        let b = bucket(ns);
        let events = vec![
            lease("a", "a", &b.to_string(), 0.0, 1),
            write("a", ns, 1.0),
            // a releases, then b claims.
            lease("a", "a", "", 5.0, 2),
            lease("b", "b", &b.to_string(), 6.0, 3),
            write("b", ns, 7.0),
        ];
        let audit = check(&events, GROUP, NS, 64);
        assert!(audit.violations.is_empty(), "{:?}", audit.violations);
        assert_eq!(audit.lease_writes, 3);
        assert_eq!(audit.holds.len(), 2);
        assert_eq!(audit.handovers(), 1);
        assert_eq!(audit.expiries(), 0);
        assert_eq!(audit.writes["a"], 1);
        assert_eq!(audit.writes["b"], 1);
    }

    #[test]
    fn a_write_outside_the_writers_hold_is_a_violation() {
        let ns = "ab3kx-shard";
        let b = bucket(ns);
        let events = vec![
            lease("a", "a", &b.to_string(), 0.0, 1),
            lease("a", "a", "", 5.0, 2),
            // After the release.
            write("a", ns, 5.5),
            // Never held.
            write("b", ns, 1.0),
        ];
        let audit = check(&events, GROUP, NS, 64);
        assert_eq!(audit.violations.len(), 2, "{:?}", audit.violations);
        assert!(
            audit.violations[0].contains("a wrote"),
            "{:?}",
            audit.violations
        );
        assert!(
            audit.violations[1].contains("never held"),
            "{:?}",
            audit.violations
        );
    }

    #[test]
    fn overlapping_holds_are_a_violation_unless_expired_and_ordered() {
        let ns = "ab3kx-shard";
        let b = bucket(ns).to_string();
        // b claims while a still holds: a breach.
        let overlapping = vec![
            lease("a", "a", &b, 0.0, 1),
            lease("b", "b", &b, 2.0, 2),
            lease("a", "a", "", 5.0, 3),
        ];
        let audit = check(&overlapping, GROUP, NS, 64);
        assert_eq!(audit.violations.len(), 1, "{:?}", audit.violations);
        assert!(audit.violations[0].contains("at once"));
        // a expired (its claims cleared by b), b claimed before the clearing was applied:
        // allowed while a's writes all came before b's first.
        let expired = |a_writes_at: f64| {
            vec![
                lease("a", "a", &b, 0.0, 1),
                write("a", ns, a_writes_at),
                lease("b", "b", &b, 20.0, 2),
                write("b", ns, 20.2),
                lease("a", "b", "", 21.0, 3),
            ]
        };
        let ok = check(&expired(1.0), GROUP, NS, 64);
        assert!(ok.violations.is_empty(), "{:?}", ok.violations);
        assert_eq!(ok.expiries(), 1);
        let late = check(&expired(20.5), GROUP, NS, 64);
        assert!(
            late.violations
                .iter()
                .any(|v| v.contains("(expired) wrote until")),
            "{:?}",
            late.violations
        );
    }

    #[test]
    fn a_controller_write_without_an_identity_is_a_violation() {
        let mut e = write("a", "x", 1.0);
        e.user_agent = "deployment-controller/0.1.0".into();
        let audit = check(&[e], GROUP, NS, 64);
        assert_eq!(audit.violations.len(), 1);
        let mut e = write("a", "x", 1.0);
        e.user_agent = "curl/8".into();
        e.username = CONTROLLER_USER.into();
        assert_eq!(check(&[e], GROUP, NS, 64).violations.len(), 1);
        // Others' writes (kube-controller-manager creating Pods) are not ours to check.
        let mut kcm = write("a", "x", 1.0);
        kcm.user_agent = "kube-controller-manager/v1.37.2".into();
        assert!(check(&[kcm], GROUP, NS, 64).violations.is_empty());
    }
}

//! The invariants `cargo xtask chaos` checks at every observed event, on a model of the
//! Deployments, ReplicaSets and Pods under test that the independent watch keeps (see
//! `watch.rs`). The model is plain data, so the checker is unit-tested with synthetic event
//! sequences.
//!
//! What is checked, per Deployment (identified by UID, so a re-created Deployment starts over):
//!
//! * **one ReplicaSet per template**: no two ReplicaSets controlled by the Deployment have equal
//!   pod templates once the `pod-template-hash` label is set aside;
//! * **maxSurge** (RollingUpdate): `total <= replicas + maxSurge`, where `total` is the sum of
//!   `spec.replicas` over the Deployment's ReplicaSets — the pods the controller has asked
//!   for, as upstream's e2e check (`checkRollingUpdateStatus`, "total pods created") counts;
//! * **maxUnavailable** (RollingUpdate): `available >= replicas - maxUnavailable`, where
//!   `available` is the sum of `status.availableReplicas` over the same ReplicaSets (upstream
//!   reads the Deployment's `status.availableReplicas`, which the controller writes as that
//!   sum; reading the ReplicaSets does not depend on the controller's own status writes). The
//!   bound holds only once it was reached: a new Deployment starts with nothing available, so
//!   it is checked from the first observed moment the Deployment had that many available on;
//! * **Recreate**: never pods of two templates at once: the live pods (phase neither
//!   `Succeeded` nor `Failed`, terminating ones included, as the controller's own
//!   "old pods running" test counts them) of the Deployment carry a single `pod-template-hash`.
//!
//! Every value a check reads comes from one resource's stream (ReplicaSets for the first three,
//! Pods for the fourth), whose events are ordered by the store's revision, so each checked
//! state is one that existed. The Deployment's side (replicas, strategy, UID) is read from the
//! Deployment stream; the chaos run never changes those fields while it runs, so a lagging
//! Deployment stream cannot make a check read bounds from another moment. A relist replaces a
//! whole resource's state at once and is checked only when complete ([`Checker::replace`]),
//! so an outage of the watch cannot produce a mix of old and new objects.
//!
//! A violation is counted once per episode: when a Deployment enters the violating state, not
//! again for every event while it stays there.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

/// The label the Deployment controller adds to the ReplicaSets and Pods it creates.
pub(crate) const POD_TEMPLATE_HASH: &str = "pod-template-hash";

/// The strategy of a Deployment, with RollingUpdate's bounds resolved against its replicas.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Strategy {
    /// Kill every old pod before creating new ones.
    Recreate,
    /// Replace pods gradually within these bounds.
    Rolling {
        /// Pods allowed above `replicas`.
        max_surge: i32,
        /// Pods allowed to be unavailable below `replicas`.
        max_unavailable: i32,
    },
}

/// A `maxSurge`/`maxUnavailable` value: a count or a percentage of the replicas.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum IntOrPercent {
    /// An absolute count.
    Int(i32),
    /// A percentage (`"25%"`).
    Percent(i32),
}

impl IntOrPercent {
    /// Reads the API's representation (a number or a `"N%"` string).
    pub(crate) fn from_json(v: &serde_json::Value) -> Option<IntOrPercent> {
        if let Some(i) = v.as_i64() {
            return i32::try_from(i).ok().map(IntOrPercent::Int);
        }
        let s = v.as_str()?;
        match s.strip_suffix('%') {
            Some(p) => p.parse().ok().map(IntOrPercent::Percent),
            None => s.parse().ok().map(IntOrPercent::Int),
        }
    }

    fn scaled(&self, total: i32, round_up: bool) -> i32 {
        match *self {
            IntOrPercent::Int(i) => i,
            IntOrPercent::Percent(p) => {
                let num = i64::from(p) * i64::from(total);
                let v = if round_up {
                    (num + 99).div_euclid(100)
                } else {
                    num.div_euclid(100)
                };
                i32::try_from(v).unwrap_or(i32::MAX)
            }
        }
    }
}

impl Strategy {
    /// RollingUpdate's bounds for `replicas`, as the API documents them: a surge percentage
    /// rounds up, an unavailability percentage down, and both zero mean one unavailable.
    pub(crate) fn rolling(
        max_surge: &IntOrPercent,
        max_unavailable: &IntOrPercent,
        replicas: i32,
    ) -> Strategy {
        let surge = max_surge.scaled(replicas, true);
        let mut unavailable = max_unavailable.scaled(replicas, false);
        if surge == 0 && unavailable == 0 {
            unavailable = 1;
        }
        Strategy::Rolling {
            max_surge: surge,
            max_unavailable: unavailable,
        }
    }
}

/// What the checker needs of a Deployment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct DeploymentView {
    /// Namespace.
    pub(crate) namespace: String,
    /// Name.
    pub(crate) name: String,
    /// UID (ReplicaSets name their controller by it).
    pub(crate) uid: String,
    /// `spec.replicas`.
    pub(crate) replicas: i32,
    /// `spec.strategy`, resolved.
    pub(crate) strategy: Strategy,
}

/// What the checker needs of a ReplicaSet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ReplicaSetView {
    /// Namespace.
    pub(crate) namespace: String,
    /// Name.
    pub(crate) name: String,
    /// UID of its controller (owner reference with `controller: true`), if any.
    pub(crate) controller_uid: Option<String>,
    /// `spec.template` without the `pod-template-hash` label, as canonical JSON.
    pub(crate) template: String,
    /// `spec.replicas`.
    pub(crate) replicas: i32,
    /// `status.availableReplicas`.
    pub(crate) available: i32,
}

/// What the checker needs of a Pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct PodView {
    /// Namespace.
    pub(crate) namespace: String,
    /// Name.
    pub(crate) name: String,
    /// The Deployment it belongs to, by the label the chaos run puts on every template.
    pub(crate) deployment: Option<String>,
    /// Its `pod-template-hash` label.
    pub(crate) hash: Option<String>,
    /// Phase neither `Succeeded` nor `Failed` (terminating pods included).
    pub(crate) live: bool,
}

/// Which invariant a violation breaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Invariant {
    /// Two ReplicaSets of one Deployment with equal templates.
    DuplicateTemplate,
    /// More pods asked for than `replicas + maxSurge`.
    MaxSurge,
    /// Fewer available than `replicas - maxUnavailable`.
    MaxUnavailable,
    /// Pods of two templates of a Recreate Deployment at once.
    RecreateOverlap,
}

impl fmt::Display for Invariant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Invariant::DuplicateTemplate => "duplicate-template",
            Invariant::MaxSurge => "max-surge",
            Invariant::MaxUnavailable => "max-unavailable",
            Invariant::RecreateOverlap => "recreate-overlap",
        })
    }
}

/// One violation episode.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Violation {
    /// The invariant.
    pub(crate) invariant: Invariant,
    /// `namespace/name` of the Deployment.
    pub(crate) deployment: String,
    /// The numbers or names that show it.
    pub(crate) detail: String,
    /// The number of the event (counting from 1) after which it was seen.
    pub(crate) event: u64,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} of {} after event {}: {}",
            self.invariant, self.deployment, self.event, self.detail
        )
    }
}

type Key = (String, String);

/// The model and the checks (see the module documentation).
#[derive(Default)]
pub(crate) struct Checker {
    deployments: BTreeMap<Key, DeploymentView>,
    replica_sets: BTreeMap<Key, ReplicaSetView>,
    pods: BTreeMap<Key, PodView>,
    /// Deployments (by UID) whose maxUnavailable bound has been reached once.
    armed: BTreeSet<String>,
    /// Episodes in progress: (Deployment UID, invariant).
    open: BTreeSet<(String, Invariant)>,
    violations: Vec<Violation>,
    events: u64,
}

/// One observed change.
#[derive(Clone, Debug)]
pub(crate) enum Change {
    /// A Deployment was added or changed.
    Deployment(DeploymentView),
    /// A Deployment was deleted.
    DeploymentDeleted(String, String),
    /// A ReplicaSet was added or changed.
    ReplicaSet(ReplicaSetView),
    /// A ReplicaSet was deleted.
    ReplicaSetDeleted(String, String),
    /// A Pod was added or changed.
    Pod(PodView),
    /// A Pod was deleted.
    PodDeleted(String, String),
    /// A relist of Deployments: the whole state.
    Deployments(Vec<DeploymentView>),
    /// A relist of ReplicaSets.
    ReplicaSets(Vec<ReplicaSetView>),
    /// A relist of Pods.
    Pods(Vec<PodView>),
}

impl Checker {
    /// Applies one change, then checks every Deployment it can affect.
    pub(crate) fn apply(&mut self, change: Change) {
        self.events += 1;
        match change {
            Change::Deployment(d) => {
                let key = (d.namespace.clone(), d.name.clone());
                self.deployments.insert(key.clone(), d);
                self.check(&key);
            }
            Change::DeploymentDeleted(ns, name) => {
                self.deployments.remove(&(ns, name));
            }
            Change::ReplicaSet(rs) => {
                let owner = rs.controller_uid.clone();
                self.replica_sets
                    .insert((rs.namespace.clone(), rs.name.clone()), rs);
                self.check_owner(owner.as_deref());
            }
            Change::ReplicaSetDeleted(ns, name) => {
                let owner = self
                    .replica_sets
                    .remove(&(ns, name))
                    .and_then(|rs| rs.controller_uid);
                self.check_owner(owner.as_deref());
            }
            Change::Pod(p) => {
                let key = p.deployment.clone().map(|d| (p.namespace.clone(), d));
                self.pods.insert((p.namespace.clone(), p.name.clone()), p);
                if let Some(key) = key {
                    self.check(&key);
                }
            }
            Change::PodDeleted(ns, name) => {
                if let Some(p) = self.pods.remove(&(ns, name))
                    && let Some(d) = p.deployment
                {
                    self.check(&(p.namespace, d));
                }
            }
            Change::Deployments(all) => {
                self.deployments = all
                    .into_iter()
                    .map(|d| ((d.namespace.clone(), d.name.clone()), d))
                    .collect();
                self.check_all();
            }
            Change::ReplicaSets(all) => {
                self.replica_sets = all
                    .into_iter()
                    .map(|r| ((r.namespace.clone(), r.name.clone()), r))
                    .collect();
                self.check_all();
            }
            Change::Pods(all) => {
                self.pods = all
                    .into_iter()
                    .map(|p| ((p.namespace.clone(), p.name.clone()), p))
                    .collect();
                self.check_all();
            }
        }
    }

    /// The violations seen so far.
    pub(crate) fn violations(&self) -> &[Violation] {
        &self.violations
    }

    /// The number of changes applied.
    pub(crate) fn events(&self) -> u64 {
        self.events
    }

    fn check_all(&mut self) {
        let keys: Vec<Key> = self.deployments.keys().cloned().collect();
        for k in keys {
            self.check(&k);
        }
    }

    fn check_owner(&mut self, uid: Option<&str>) {
        let Some(uid) = uid else { return };
        let key = self
            .deployments
            .iter()
            .find(|(_, d)| d.uid == uid)
            .map(|(k, _)| k.clone());
        if let Some(key) = key {
            self.check(&key);
        }
    }

    fn check(&mut self, key: &Key) {
        let Some(d) = self.deployments.get(key).cloned() else {
            return;
        };
        let owned: Vec<&ReplicaSetView> = self
            .replica_sets
            .values()
            .filter(|rs| rs.namespace == d.namespace && rs.controller_uid.as_ref() == Some(&d.uid))
            .collect();
        let mut found: Vec<(Invariant, Option<String>)> = Vec::new();

        let mut duplicate = None;
        for (i, a) in owned.iter().enumerate() {
            if let Some(b) = owned[i + 1..].iter().find(|b| b.template == a.template) {
                duplicate = Some(format!("ReplicaSets {} and {}", a.name, b.name));
                break;
            }
        }
        found.push((Invariant::DuplicateTemplate, duplicate));

        let total: i32 = owned.iter().map(|rs| rs.replicas).sum();
        let available: i32 = owned.iter().map(|rs| rs.available).sum();
        let describe = || {
            owned
                .iter()
                .map(|rs| format!("{}={}/{}", rs.name, rs.replicas, rs.available))
                .collect::<Vec<_>>()
                .join(", ")
        };
        match d.strategy {
            Strategy::Rolling {
                max_surge,
                max_unavailable,
            } => {
                let surge = (total > d.replicas + max_surge).then(|| {
                    format!(
                        "total {total} > replicas {} + maxSurge {max_surge} (replicas/available: {})",
                        d.replicas,
                        describe()
                    )
                });
                found.push((Invariant::MaxSurge, surge));
                let min = d.replicas - max_unavailable;
                let unavailable = if available >= min {
                    self.armed.insert(d.uid.clone());
                    None
                } else if self.armed.contains(&d.uid) {
                    Some(format!(
                        "available {available} < replicas {} - maxUnavailable {max_unavailable} \
                         (replicas/available: {})",
                        d.replicas,
                        describe()
                    ))
                } else {
                    None
                };
                found.push((Invariant::MaxUnavailable, unavailable));
            }
            Strategy::Recreate => {
                let hashes: BTreeSet<&str> = self
                    .pods
                    .values()
                    .filter(|p| {
                        p.live
                            && p.namespace == d.namespace
                            && p.deployment.as_deref() == Some(d.name.as_str())
                    })
                    .map(|p| p.hash.as_deref().unwrap_or(""))
                    .collect();
                let overlap = (hashes.len() > 1).then(|| {
                    format!(
                        "live pods of templates {}",
                        hashes.into_iter().collect::<Vec<_>>().join(", ")
                    )
                });
                found.push((Invariant::RecreateOverlap, overlap));
            }
        }

        let deployment = format!("{}/{}", d.namespace, d.name);
        for (invariant, detail) in found {
            let episode = (d.uid.clone(), invariant);
            match detail {
                Some(detail) => {
                    if self.open.insert(episode) {
                        self.violations.push(Violation {
                            invariant,
                            deployment: deployment.clone(),
                            detail,
                            event: self.events,
                        });
                    }
                }
                None => {
                    self.open.remove(&episode);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NS: &str = "chaos-0";

    fn rolling(name: &str, replicas: i32, surge: i32, unavailable: i32) -> Change {
        Change::Deployment(DeploymentView {
            namespace: NS.into(),
            name: name.into(),
            uid: format!("uid-{name}"),
            replicas,
            strategy: Strategy::rolling(
                &IntOrPercent::Int(surge),
                &IntOrPercent::Int(unavailable),
                replicas,
            ),
        })
    }

    fn recreate(name: &str, replicas: i32) -> Change {
        Change::Deployment(DeploymentView {
            namespace: NS.into(),
            name: name.into(),
            uid: format!("uid-{name}"),
            replicas,
            strategy: Strategy::Recreate,
        })
    }

    fn rs(deploy: &str, hash: &str, replicas: i32, available: i32) -> ReplicaSetView {
        ReplicaSetView {
            namespace: NS.into(),
            name: format!("{deploy}-{hash}"),
            controller_uid: Some(format!("uid-{deploy}")),
            template: format!("{{\"image\":\"{hash}\"}}"),
            replicas,
            available,
        }
    }

    fn pod(deploy: &str, hash: &str, i: u32, live: bool) -> Change {
        Change::Pod(PodView {
            namespace: NS.into(),
            name: format!("{deploy}-{hash}-{i}"),
            deployment: Some(deploy.into()),
            hash: Some(hash.into()),
            live,
        })
    }

    fn run(changes: Vec<Change>) -> Vec<Violation> {
        let mut c = Checker::default();
        for ch in changes {
            c.apply(ch);
        }
        c.violations().to_vec()
    }

    fn kinds(v: &[Violation]) -> Vec<Invariant> {
        v.iter().map(|v| v.invariant).collect()
    }

    /// A rolling update of 3 replicas, maxSurge 1, maxUnavailable 1, done by the book.
    fn good_rollout() -> Vec<Change> {
        vec![
            rolling("web", 3, 1, 1),
            Change::ReplicaSet(rs("web", "a", 3, 0)),
            Change::ReplicaSet(rs("web", "a", 3, 3)),
            // Rollout: new RS up by surge + unavailable headroom, old down by 1.
            Change::ReplicaSet(rs("web", "b", 1, 0)),
            Change::ReplicaSet(rs("web", "a", 2, 3)),
            Change::ReplicaSet(rs("web", "a", 2, 2)),
            Change::ReplicaSet(rs("web", "b", 2, 0)),
            Change::ReplicaSet(rs("web", "b", 2, 2)),
            Change::ReplicaSet(rs("web", "a", 0, 2)),
            Change::ReplicaSet(rs("web", "a", 0, 0)),
            Change::ReplicaSet(rs("web", "b", 3, 2)),
            Change::ReplicaSet(rs("web", "b", 3, 3)),
        ]
    }

    #[test]
    fn a_rollout_within_bounds_passes() {
        assert_eq!(run(good_rollout()), []);
    }

    #[test]
    fn surge_beyond_max_surge_is_flagged_once_per_episode() {
        let mut changes = good_rollout();
        // The new RS asks for 2 while the old still asks for 3: 5 > 3 + 1.
        changes.insert(4, Change::ReplicaSet(rs("web", "b", 2, 0)));
        changes.insert(5, Change::ReplicaSet(rs("web", "b", 2, 1)));
        let v = run(changes);
        assert_eq!(kinds(&v), [Invariant::MaxSurge], "{v:?}");
        assert_eq!(v[0].deployment, "chaos-0/web");
        assert_eq!(v[0].event, 5);
        assert!(v[0].detail.contains("total 5 > replicas 3 + maxSurge 1"));
    }

    #[test]
    fn availability_below_the_bound_is_flagged_after_it_was_reached() {
        let v = run(vec![
            rolling("web", 4, 1, 1),
            // Nothing available at creation: not a violation.
            Change::ReplicaSet(rs("web", "a", 4, 0)),
            Change::ReplicaSet(rs("web", "a", 4, 2)),
            Change::ReplicaSet(rs("web", "a", 4, 4)),
            // The old RS is scaled down by 2 while the new one has nothing available: 2 < 3.
            Change::ReplicaSet(rs("web", "b", 1, 0)),
            Change::ReplicaSet(rs("web", "a", 2, 2)),
            Change::ReplicaSet(rs("web", "b", 1, 1)),
            // Back to 3 (ends the episode), then down again: a second episode.
            Change::ReplicaSet(rs("web", "a", 1, 1)),
        ]);
        assert_eq!(
            kinds(&v),
            [Invariant::MaxUnavailable, Invariant::MaxUnavailable]
        );
        assert_eq!(v[0].event, 6);
        assert_eq!(v[1].event, 8);
    }

    #[test]
    fn equal_templates_are_flagged() {
        let mut twin = rs("web", "b", 1, 0);
        twin.template = rs("web", "a", 0, 0).template;
        let v = run(vec![
            rolling("web", 3, 1, 1),
            Change::ReplicaSet(rs("web", "a", 3, 3)),
            Change::ReplicaSet(twin),
        ]);
        assert_eq!(kinds(&v), [Invariant::DuplicateTemplate]);
        assert!(v[0].detail.contains("web-a and web-b"), "{}", v[0].detail);
    }

    #[test]
    fn replica_sets_of_other_deployments_do_not_count() {
        let mut foreign = rs("db", "a", 3, 3);
        foreign.template = rs("web", "a", 0, 0).template;
        let mut orphan = rs("web", "c", 9, 0);
        orphan.controller_uid = None;
        let v = run(vec![
            rolling("web", 3, 1, 1),
            rolling("db", 3, 1, 1),
            Change::ReplicaSet(rs("web", "a", 3, 3)),
            Change::ReplicaSet(foreign),
            Change::ReplicaSet(orphan),
        ]);
        assert_eq!(v, []);
    }

    #[test]
    fn a_relist_is_checked_whole_not_object_by_object() {
        // Before the outage: old RS at 3. After it: old at 0, new at 3. Applied one object at a
        // time in the wrong order the intermediate view would be 6 > 4; as one replacement it
        // is fine.
        let v = run(vec![
            rolling("web", 3, 1, 1),
            Change::ReplicaSet(rs("web", "a", 3, 3)),
            Change::ReplicaSets(vec![rs("web", "a", 0, 0), rs("web", "b", 3, 3)]),
        ]);
        assert_eq!(v, []);
        // A relist whose state does break a bound is flagged.
        let v = run(vec![
            rolling("web", 3, 1, 1),
            Change::ReplicaSets(vec![rs("web", "a", 3, 3), rs("web", "b", 3, 0)]),
        ]);
        assert_eq!(kinds(&v), [Invariant::MaxSurge]);
    }

    #[test]
    fn recreate_with_old_and_new_pods_at_once_is_flagged() {
        let v = run(vec![
            recreate("job", 2),
            pod("job", "a", 0, true),
            pod("job", "a", 1, true),
            // Old pods terminating (still live) when a new one appears.
            pod("job", "b", 0, true),
        ]);
        assert_eq!(kinds(&v), [Invariant::RecreateOverlap]);
        assert!(v[0].detail.contains("a, b"), "{}", v[0].detail);
    }

    #[test]
    fn recreate_done_right_passes() {
        let v = run(vec![
            recreate("job", 2),
            pod("job", "a", 0, true),
            pod("job", "a", 1, true),
            Change::PodDeleted(NS.into(), "job-a-0".into()),
            // A finished old pod does not count.
            pod("job", "a", 1, false),
            pod("job", "b", 0, true),
            pod("job", "b", 1, true),
            Change::PodDeleted(NS.into(), "job-a-1".into()),
        ]);
        assert_eq!(v, []);
        // Recreate has no surge or availability bounds.
        let v = run(vec![
            recreate("job", 2),
            Change::ReplicaSet(rs("job", "a", 2, 2)),
            Change::ReplicaSet(rs("job", "a", 0, 0)),
            Change::ReplicaSet(rs("job", "b", 2, 0)),
        ]);
        assert_eq!(v, []);
    }

    #[test]
    fn a_recreated_deployment_is_a_new_one() {
        let mut again = rolling("web", 3, 1, 1);
        if let Change::Deployment(d) = &mut again {
            d.uid = "uid-web-2".into();
        }
        let mut fresh = rs("web", "b", 3, 0);
        fresh.controller_uid = Some("uid-web-2".into());
        let v = run(vec![
            rolling("web", 3, 1, 1),
            Change::ReplicaSet(rs("web", "a", 3, 3)),
            Change::DeploymentDeleted(NS.into(), "web".into()),
            Change::ReplicaSetDeleted(NS.into(), "web-a".into()),
            again,
            // The new Deployment has not reached its bound yet: nothing available is fine.
            Change::ReplicaSet(fresh),
        ]);
        assert_eq!(v, []);
    }

    #[test]
    fn bounds_are_resolved_like_the_api() {
        let p = |s: &str| IntOrPercent::from_json(&serde_json::json!(s)).unwrap();
        assert_eq!(
            Strategy::rolling(&p("25%"), &p("25%"), 10),
            Strategy::Rolling {
                max_surge: 3,
                max_unavailable: 2
            }
        );
        assert_eq!(
            Strategy::rolling(&IntOrPercent::Int(0), &p("0%"), 10),
            Strategy::Rolling {
                max_surge: 0,
                max_unavailable: 1
            }
        );
        assert_eq!(
            IntOrPercent::from_json(&serde_json::json!(2)),
            Some(IntOrPercent::Int(2))
        );
        assert_eq!(IntOrPercent::from_json(&serde_json::json!("x%")), None);
    }
}

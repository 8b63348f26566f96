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
//! And per Pod and ReplicaSet (`pods.rs`), for the ReplicaSet controller (ours or
//! kube-controller-manager's):
//!
//! * **replicaset-pods**: a ReplicaSet never controls more active Pods at once (not being
//!   deleted, phase neither `Succeeded` nor `Failed`, as the ReplicaSet controller counts)
//!   than the highest `spec.replicas` it ever had. This, not "a Deployment's Pods never
//!   exceed `replicas + maxSurge`", is the bound the controllers keep: the Deployment
//!   controller bounds the *sum of the ReplicaSets' `spec.replicas`* and scales the new
//!   ReplicaSet up as soon as the old one's spec went down, while the Pods of the two are
//!   deleted and created by separate syncs of the ReplicaSet controller, in either order, and
//!   a deleted Pod of a `terminationGracePeriodSeconds: 0` template still takes a moment to
//!   go. So a Deployment may transiently have `replicas + maxSurge + 1` active Pods (or more,
//!   one per ReplicaSet scaled down in the same step) with every controller correct; the
//!   report counts those episodes for information. What a correct ReplicaSet controller never
//!   does is create Pods beyond what one ReplicaSet asked for: its expectations hold further
//!   creates until the creates in flight are seen. A duplicate create (a sync acting on a
//!   cache that misses its own creates, or expectations lowered too early) breaks it when it
//!   takes the ReplicaSet above its highest spec: one made at the ReplicaSet's final size
//!   (every Recreate, the last step of a rolling scale-up, any scale of a ReplicaSet that only
//!   grows once). A duplicate at an intermediate step of a rolling scale-up (spec 1 of 3)
//!   stays within the later peak and is not caught: catching it needs the spec of the moment,
//!   by the two streams' revisions, which the check does not compare. The
//!   check reads two streams, so it is lag-proof by construction: the Pod stream gives each
//!   ReplicaSet's peak of active Pods (a state that existed), the ReplicaSet stream its peak
//!   `spec.replicas`; they are compared only once the Pod peak is a few seconds old (time for
//!   a lagging ReplicaSet stream to show the scale-up that preceded those Pods; see
//!   [`Checker::settle`]) and at the end of the run. A ReplicaSet the ReplicaSet stream never
//!   showed (created and deleted within a relist gap) is not judged. One case breaks it
//!   without a wrong decision: a Pod create whose answer was lost (a connection cut after the
//!   apiserver committed it) counts as failed, so the next sync may create once more; the
//!   chaos run's slow phase cuts connections of our controller only, so a violation there is
//!   to be read against that (kube-controller-manager does the same on a lost answer).
//! * **pod-owner**: no Pod is owned by two ReplicaSets: its controller owner reference never
//!   changes from one ReplicaSet to another without an event showing it an orphan in between
//!   (a release, then an adoption), and it never has two controller references (the API
//!   server rejects that; checked all the same). Read from the Pod stream alone, keyed by Pod
//!   UID; across a relist, where an orphan state may have gone unseen, the owners start over.
//!
//! Every value a check reads comes from one resource's stream (ReplicaSets for the first three,
//! Pods for the fourth and pod-owner; replicaset-pods compares two peaks, as said), whose events are ordered by the store's revision, so each checked
//! state is one that existed. The Deployment's side (replicas, strategy, UID) is read from the
//! Deployment stream; the chaos run never changes those fields while it runs, so a lagging
//! Deployment stream cannot make a check read bounds from another moment. A relist replaces a
//! whole resource's state at once and is checked only when complete ([`Checker::replace`]),
//! so an outage of the watch cannot produce a mix of old and new objects.
//!
//! A violation is counted once per episode: when a Deployment enters the violating state, not
//! again for every event while it stays there.

mod pods;
#[cfg(test)]
mod tests;

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
    /// UID.
    pub(crate) uid: String,
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
    /// UID.
    pub(crate) uid: String,
    /// UIDs of its owner references with `controller: true` (the API allows one at most).
    pub(crate) controllers: Vec<String>,
    /// Marked for deletion (`deletionTimestamp` set).
    pub(crate) terminating: bool,
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
    /// More active Pods controlled by a ReplicaSet than it ever asked for.
    ReplicaSetPods,
    /// A Pod's controller moved between ReplicaSets without an orphan state between, or two
    /// controllers at once.
    PodOwner,
}

impl fmt::Display for Invariant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Invariant::DuplicateTemplate => "duplicate-template",
            Invariant::MaxSurge => "max-surge",
            Invariant::MaxUnavailable => "max-unavailable",
            Invariant::RecreateOverlap => "recreate-overlap",
            Invariant::ReplicaSetPods => "replicaset-pods",
            Invariant::PodOwner => "pod-owner",
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
    /// The Pod side (`pods.rs`).
    pod_checks: pods::PodChecks,
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
                self.observe_replica_set(&rs);
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
                self.observe_pod_owner(&p);
                let counted = p.controllers.first().cloned();
                self.pods.insert((p.namespace.clone(), p.name.clone()), p);
                if let Some(key) = key {
                    self.check(&key);
                    self.count_deployment_pods(&key);
                }
                self.count_replica_set_pods(counted.as_deref());
            }
            Change::PodDeleted(ns, name) => {
                if let Some(p) = self.pods.remove(&(ns, name)) {
                    self.forget_pod(&p);
                    if let Some(d) = p.deployment {
                        self.check(&(p.namespace, d));
                    }
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
                for rs in &all {
                    self.observe_replica_set(rs);
                }
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
                self.relisted_pods();
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

    /// Records a violation unless its episode (`id`, `invariant`) is already open.
    fn flag(
        &mut self,
        id: &str,
        invariant: Invariant,
        subject: String,
        detail: String,
        event: u64,
    ) {
        if self.open.insert((id.to_owned(), invariant)) {
            self.violations.push(Violation {
                invariant,
                deployment: subject,
                detail,
                event,
            });
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

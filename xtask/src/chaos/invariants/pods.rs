//! The Pod-side checks: what the ReplicaSet controller does with the Pods (see the parent
//! module's documentation for why each bound is the one checked).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use super::{Checker, Invariant, Key, PodView, ReplicaSetView, Strategy};

/// The highest counts seen of one ReplicaSet (by UID).
#[derive(Clone, Debug)]
struct Peak {
    /// `namespace/name`.
    name: String,
    /// The highest `spec.replicas` seen in the ReplicaSet stream; `None` until the stream
    /// has shown the ReplicaSet (its Pods may arrive first).
    spec: Option<i32>,
    /// The most active Pods controlled by it at once, in the Pod stream.
    pods: i32,
    /// The event after which `pods` was reached, and when.
    pods_event: u64,
    pods_at: Option<Instant>,
}

/// State of the Pod-side checks.
#[derive(Default)]
pub(super) struct PodChecks {
    /// Each known Pod's (by UID) controller at its last event.
    owner: BTreeMap<String, Option<String>>,
    /// Peaks of each ReplicaSet ever seen (kept after its deletion).
    peaks: BTreeMap<String, Peak>,
    /// Controller changes seen (an orphan adopted, a Pod released).
    owner_changes: u64,
    /// Pods ever followed.
    pods_seen: BTreeSet<String>,
    /// Informational: Deployments (by UID) whose active Pods are now above
    /// `replicas + maxSurge`, episodes of that, and the largest excess.
    above_surge: BTreeSet<String>,
    above_surge_episodes: u64,
    above_surge_most: i32,
    /// The first such episode: `namespace/name` of the Deployment and the event.
    above_surge_first: Option<(String, u64)>,
}

/// Whether a Pod counts as active for a ReplicaSet: running or about to (phase neither
/// `Succeeded` nor `Failed`) and not being deleted, as the ReplicaSet controller counts.
fn active(p: &PodView) -> bool {
    p.live && !p.terminating
}

impl Checker {
    /// Notes a ReplicaSet's `spec.replicas` for its peak.
    pub(super) fn observe_replica_set(&mut self, rs: &ReplicaSetView) {
        let name = format!("{}/{}", rs.namespace, rs.name);
        let peak = self.peak(&rs.uid, &name);
        // Its Pods may have come first, named by UID only.
        peak.name = name;
        peak.spec = Some(peak.spec.map_or(rs.replicas, |s| s.max(rs.replicas)));
    }

    fn peak(&mut self, uid: &str, name: &str) -> &mut Peak {
        self.pod_checks
            .peaks
            .entry(uid.to_owned())
            .or_insert_with(|| Peak {
                name: name.to_owned(),
                spec: None,
                pods: 0,
                pods_event: 0,
                pods_at: None,
            })
    }

    /// The `pod-owner` check of one Pod event, before the model takes it.
    pub(super) fn observe_pod_owner(&mut self, p: &PodView) {
        let subject = format!("{}/{}", p.namespace, p.name);
        self.pod_checks.pods_seen.insert(p.uid.clone());
        if p.controllers.len() > 1 {
            let detail = format!("controllers {}", p.controllers.join(" and "));
            self.flag(&p.uid, Invariant::PodOwner, subject, detail, self.events);
            return;
        }
        let now = p.controllers.first().cloned();
        let before = self.pod_checks.owner.insert(p.uid.clone(), now.clone());
        match (before, now) {
            // The first event of this Pod: nothing to compare.
            (None, _) => {}
            (Some(Some(a)), Some(b)) if a != b => {
                let detail = format!("controller moved from {a} to {b} without an orphan state");
                self.flag(&p.uid, Invariant::PodOwner, subject, detail, self.events);
            }
            // An adoption or a release.
            (Some(Some(_)), None) | (Some(None), Some(_)) => self.pod_checks.owner_changes += 1,
            _ => {}
        }
    }

    /// A Pod is gone: forget its owner (a Pod of the same name is another UID).
    pub(super) fn forget_pod(&mut self, p: &PodView) {
        self.pod_checks.owner.remove(&p.uid);
    }

    /// After a relist of Pods: owners restart from the list (a change hidden in the gap may
    /// have gone through an orphan state, unseen, so it is not judged), peaks are counted on
    /// the listed state.
    pub(super) fn relisted_pods(&mut self) {
        let owners: BTreeMap<String, Option<String>> = self
            .pods
            .values()
            .map(|p| (p.uid.clone(), p.controllers.first().cloned()))
            .collect();
        for p in self.pods.values() {
            self.pod_checks.pods_seen.insert(p.uid.clone());
        }
        self.pod_checks.owner = owners;
        let replica_sets: BTreeSet<String> = self
            .pods
            .values()
            .filter_map(|p| p.controllers.first().cloned())
            .collect();
        for rs in replica_sets {
            self.count_replica_set_pods(Some(&rs));
        }
        let deployments: BTreeSet<Key> = self
            .pods
            .values()
            .filter_map(|p| Some((p.namespace.clone(), p.deployment.clone()?)))
            .collect();
        for d in deployments {
            self.count_deployment_pods(&d);
        }
    }

    /// Counts the active Pods controlled by ReplicaSet `uid` and raises its peak.
    pub(super) fn count_replica_set_pods(&mut self, uid: Option<&str>) {
        let Some(uid) = uid else { return };
        let mut namespace = String::new();
        let count = self
            .pods
            .values()
            .filter(|p| active(p) && p.controllers.first().map(String::as_str) == Some(uid))
            .inspect(|p| namespace.clone_from(&p.namespace))
            .count();
        let count = i32::try_from(count).unwrap_or(i32::MAX);
        let event = self.events;
        let peak = self.peak(uid, &format!("{namespace}/(ReplicaSet {uid})"));
        if count > peak.pods {
            peak.pods = count;
            peak.pods_event = event;
            peak.pods_at = Some(Instant::now());
        }
    }

    /// The informational count of a Deployment's active Pods above `replicas + maxSurge`.
    pub(super) fn count_deployment_pods(&mut self, key: &Key) {
        let Some(d) = self.deployments.get(key) else {
            return;
        };
        let Strategy::Rolling { max_surge, .. } = d.strategy else {
            return;
        };
        let count = self
            .pods
            .values()
            .filter(|p| {
                active(p)
                    && !p.controllers.is_empty()
                    && p.namespace == d.namespace
                    && p.deployment.as_deref() == Some(d.name.as_str())
            })
            .count();
        let over = i32::try_from(count).unwrap_or(i32::MAX) - d.replicas - max_surge;
        let uid = d.uid.clone();
        let name = format!("{}/{}", d.namespace, d.name);
        let event = self.events;
        let c = &mut self.pod_checks;
        if over > 0 {
            c.above_surge_most = c.above_surge_most.max(over);
            if c.above_surge.insert(uid) {
                c.above_surge_episodes += 1;
                c.above_surge_first.get_or_insert((name, event));
            }
        } else {
            c.above_surge.remove(&uid);
        }
    }

    /// The `replicaset-pods` check: flags each ReplicaSet whose most active Pods at once
    /// exceeded the highest `spec.replicas` it ever had, once the peak was reached at or
    /// before `cutoff` (so the ReplicaSet stream, which may lag the Pod stream, has had time
    /// to show a scale-up that came before those Pods). ReplicaSets the ReplicaSet stream
    /// never showed are not judged.
    pub(crate) fn settle(&mut self, cutoff: Instant) {
        let due: Vec<(String, Peak)> = self
            .pod_checks
            .peaks
            .iter()
            .filter(|(_, p)| {
                p.spec.is_some_and(|s| p.pods > s) && p.pods_at.is_some_and(|t| t <= cutoff)
            })
            .map(|(u, p)| (u.clone(), p.clone()))
            .collect();
        for (uid, p) in due {
            let detail = format!(
                "{} active Pods at once, more than the highest spec.replicas it had, {}",
                p.pods,
                p.spec.unwrap_or(0)
            );
            self.flag(
                &uid,
                Invariant::ReplicaSetPods,
                p.name,
                detail,
                p.pods_event,
            );
        }
    }

    /// One line on the Pod-side checks for the report.
    pub(crate) fn pod_summary(&self) -> String {
        let c = &self.pod_checks;
        let judged = c.peaks.values().filter(|p| p.spec.is_some()).count();
        let most_pods = c.peaks.values().map(|p| p.pods).max().unwrap_or(0);
        let most_spec = c.peaks.values().filter_map(|p| p.spec).max().unwrap_or(0);
        format!(
            "replicaset-pods: {judged} ReplicaSets judged, at most {most_pods} active Pods of one \
             at once (highest spec.replicas {most_spec}); pod-owner: {} Pods followed, {} \
             adoptions or releases; a Deployment's active Pods above replicas + maxSurge (not an \
             invariant, see the checker's docs): {} episodes, at most +{}{}",
            c.pods_seen.len(),
            c.owner_changes,
            c.above_surge_episodes,
            c.above_surge_most,
            c.above_surge_first
                .as_ref()
                .map(|(d, e)| format!(" (the first of {d} after event {e})"))
                .unwrap_or_default()
        )
    }
}

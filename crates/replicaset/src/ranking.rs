//! Which Pods go first when a ReplicaSet scales down (upstream's `ActivePodsWithRanks`,
//! `getPodsToDelete` and `getPodsRankedByRelatedPodsOnSameNode`), and when a ready Pod
//! becomes available (`IsPodAvailable`, `FindMinNextPodAvailabilityCheck`). Pure functions.
//!
//! The Pods deleted first are, rule by rule (the first rule that tells two Pods apart decides):
//!
//! 1. unassigned (no node) before assigned;
//! 2. Pending before Unknown before Running;
//! 3. not ready before ready;
//! 4. lower `controller.kubernetes.io/pod-deletion-cost` before higher;
//! 5. more active related Pods (of ReplicaSets with the same owner) on the same node before
//!    fewer;
//! 6. ready for less time before ready for longer, the times compared in powers-of-two
//!    buckets of their age (same bucket: by UID);
//! 7. more container restarts before fewer (regular containers, then sidecars);
//! 8. newer before older (no creation time first), in the same buckets.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use crate::pod_view::PodView;

/// The annotation whose integer value orders Pods for deletion (lower first).
pub(crate) const POD_DELETION_COST_ANNOTATION: &str = "controller.kubernetes.io/pod-deletion-cost";

/// A Pod's deletion cost: the annotation's value, 0 when absent or not a valid 32-bit decimal
/// integer (no `+` sign, no leading zeros), as upstream's `GetDeletionCostFromPodAnnotations`.
pub(crate) fn deletion_cost(pod: &PodView) -> i32 {
    let Some(value) = pod.metadata.annotations().get(POD_DELETION_COST_ANNOTATION) else {
        return 0;
    };
    // A `+` sign or a leading zero is refused; a `-` sign is not (even with zeros after it).
    let valid_first = value.starts_with('-')
        || value == "0"
        || value
            .as_bytes()
            .first()
            .is_some_and(|b| (b'1'..=b'9').contains(b));
    if !valid_first {
        return 0;
    }
    value.parse::<i32>().unwrap_or(0)
}

/// Phase order of rule 2; any other phase counts as Pending (Go's missing map entry).
fn phase_ordinal(phase: &str) -> u8 {
    match phase {
        "Unknown" => 1,
        "Running" => 2,
        _ => 0,
    }
}

/// The power-of-two bucket of `now - t` in nanoseconds; -1 when `t` is not in the past.
fn log_rank(t: &Timestamp, now: &Timestamp) -> i64 {
    let nanos = now.duration_since(*t).as_nanos();
    if nanos > 0 {
        // Truncation as Go's int64(math.Log2(float64(d))).
        (nanos as f64).log2() as i64
    } else {
        -1
    }
}

/// `t1` after `t2`, a missing time counting as after any time (`afterOrZero`).
fn after_or_zero(t1: Option<&Time>, t2: Option<&Time>) -> bool {
    match (t1, t2) {
        (None, _) => true,
        (Some(_), None) => false,
        (Some(a), Some(b)) => a.0 > b.0,
    }
}

/// Pods to rank, each with its rank (active related Pods on its node), as upstream's
/// `ActivePodsWithRanks`; `now` is the reference for the time buckets (`None`: compare times
/// as they are).
#[derive(Clone, Debug)]
pub(crate) struct RankedPods {
    /// The Pods.
    pub(crate) pods: Vec<Arc<PodView>>,
    /// `rank[i]` belongs to `pods[i]`.
    pub(crate) rank: Vec<usize>,
    /// The reference time of the logarithmic comparisons.
    pub(crate) now: Option<Timestamp>,
}

impl RankedPods {
    /// Sorts the Pods (and their ranks) so those to delete first come first. A merge sort
    /// that trusts the comparison without checking it: the bucketed rules are not always a
    /// strict order (a tie broken by UID in one rule, by a later rule in another), where a
    /// checking sort could refuse.
    pub(crate) fn sort(&mut self) {
        let mut items: Vec<(Arc<PodView>, usize)> =
            self.pods.drain(..).zip(self.rank.drain(..)).collect();
        let now = self.now;
        merge_sort(&mut items, &|a: &(Arc<PodView>, usize), b| {
            less(&a.0, a.1, &b.0, b.1, now.as_ref())
        });
        for (pod, rank) in items {
            self.pods.push(pod);
            self.rank.push(rank);
        }
    }
}

fn less(pi: &PodView, ri: usize, pj: &PodView, rj: usize, now: Option<&Timestamp>) -> bool {
    // 1. Unassigned before assigned.
    let (ni, nj) = (pi.node_name(), pj.node_name());
    if ni != nj && (ni.is_empty() || nj.is_empty()) {
        return ni.is_empty();
    }
    // 2. Pending < Unknown < Running.
    let (oi, oj) = (phase_ordinal(pi.phase()), phase_ordinal(pj.phase()));
    if oi != oj {
        return oi < oj;
    }
    // 3. Not ready before ready.
    let (readyi, readyj) = (pi.is_ready(), pj.is_ready());
    if readyi != readyj {
        return !readyi;
    }
    // 4. Lower deletion cost first.
    let (ci, cj) = (deletion_cost(pi), deletion_cost(pj));
    if ci != cj {
        return ci < cj;
    }
    // 5. More related Pods on the same node first.
    if ri != rj {
        return ri > rj;
    }
    // 6. Ready for less time first.
    if readyi && readyj {
        let (ti, tj) = (pi.ready_time(), pj.ready_time());
        if ti.map(|t| t.0) != tj.map(|t| t.0) {
            match (now, ti, tj) {
                (Some(now), Some(a), Some(b)) => {
                    let diff = log_rank(&a.0, now) - log_rank(&b.0, now);
                    if diff == 0 {
                        return pi.uid() < pj.uid();
                    }
                    return diff < 0;
                }
                _ => return after_or_zero(ti, tj),
            }
        }
    }
    // 7. More restarts first.
    let ((regi, sidei), (regj, sidej)) = (pi.max_container_restarts(), pj.max_container_restarts());
    if regi != regj {
        return regi > regj;
    }
    if sidei != sidej {
        return sidei > sidej;
    }
    // 8. Newer first, a missing creation time first of all.
    let (ti, tj) = (
        pi.metadata.creation_timestamp(),
        pj.metadata.creation_timestamp(),
    );
    if ti.map(|t| t.0) != tj.map(|t| t.0) {
        return match (now, ti, tj) {
            (Some(now), Some(a), Some(b)) => {
                let diff = log_rank(&a.0, now) - log_rank(&b.0, now);
                if diff == 0 {
                    pi.uid() < pj.uid()
                } else {
                    diff < 0
                }
            }
            _ => after_or_zero(ti, tj),
        };
    }
    false
}

/// A stable merge sort by `less`, which it never checks for consistency.
fn merge_sort<T: Clone>(items: &mut [T], less: &dyn Fn(&T, &T) -> bool) {
    let n = items.len();
    if n < 2 {
        return;
    }
    let mid = n / 2;
    merge_sort(&mut items[..mid], less);
    merge_sort(&mut items[mid..], less);
    let left = items[..mid].to_vec();
    let right = items[mid..].to_vec();
    let (mut i, mut j) = (0, 0);
    for slot in items.iter_mut() {
        // Take from the right only when it is strictly before the left: stable.
        let take_right = j < right.len() && (i >= left.len() || less(&right[j], &left[i]));
        if take_right {
            *slot = right[j].clone();
            j += 1;
        } else {
            *slot = left[i].clone();
            i += 1;
        }
    }
}

/// `podsToRank` with each Pod's rank: how many active Pods of `related` share its node
/// (`getPodsRankedByRelatedPodsOnSameNode`).
pub(crate) fn rank_by_related_pods_on_same_node(
    pods: &[Arc<PodView>],
    related: &[Arc<PodView>],
    now: Timestamp,
) -> RankedPods {
    let mut on_node: HashMap<&str, usize> = HashMap::new();
    for pod in related.iter().filter(|p| p.is_active()) {
        *on_node.entry(pod.node_name()).or_default() += 1;
    }
    RankedPods {
        pods: pods.to_vec(),
        rank: pods
            .iter()
            .map(|p| on_node.get(p.node_name()).copied().unwrap_or(0))
            .collect(),
        now: Some(now),
    }
}

/// The `diff` Pods of `pods` to delete first, given the Pods of the ReplicaSets related to
/// this one (`getPodsToDelete`). Also returns, for each chosen ready Pod, the ratio of its
/// age to the youngest ready Pod's (the `sorting_deletion_age_ratio` observations), which is
/// computed only when a choice was made (fewer to delete than there are Pods).
pub(crate) fn pods_to_delete(
    pods: &[Arc<PodView>],
    related: &[Arc<PodView>],
    diff: usize,
    now: Timestamp,
) -> (Vec<Arc<PodView>>, Vec<f64>) {
    if diff >= pods.len() {
        return (pods.to_vec(), Vec::new());
    }
    let mut ranked = rank_by_related_pods_on_same_node(pods, related, now);
    ranked.sort();
    let ratios = deletion_age_ratios(&ranked.pods, diff, now);
    ranked.pods.truncate(diff);
    (ranked.pods, ratios)
}

/// Upstream's `reportSortingDeletionAgeRatioMetric`: for each ready Pod among the first
/// `diff`, its age over the youngest ready Pod's age, both in whole milliseconds, divided as
/// integers (as upstream does). A youngest age of 0 ms gives no observation.
fn deletion_age_ratios(sorted: &[Arc<PodView>], diff: usize, now: Timestamp) -> Vec<f64> {
    let age_ms = |pod: &PodView| {
        let created = pod
            .metadata
            .creation_timestamp()
            .map_or(Timestamp::UNIX_EPOCH, |t| t.0);
        now.duration_since(created).as_millis() as i64
    };
    let Some(youngest) = sorted
        .iter()
        .filter(|p| p.is_ready())
        .filter_map(|p| p.metadata.creation_timestamp().map(|_| age_ms(p)))
        .min()
    else {
        return Vec::new();
    };
    if youngest == 0 {
        return Vec::new();
    }
    sorted[..diff]
        .iter()
        .filter(|p| p.is_ready())
        .map(|p| (age_ms(p) / youngest) as f64)
        .collect()
}

/// Whether `pod` is available: ready, and for at least `min_ready_seconds` by `now`
/// (`podutil.IsPodAvailable`).
pub(crate) fn is_pod_available(pod: &PodView, min_ready_seconds: i32, now: Timestamp) -> bool {
    if !pod.is_ready() {
        return false;
    }
    if min_ready_seconds == 0 {
        return true;
    }
    pod.ready_condition()
        .and_then(|c| c.last_transition_time.as_ref())
        .is_some_and(|t| {
            t.0.checked_add(Duration::from_secs(min_ready_seconds.max(0) as u64))
                .is_ok_and(|ready_at| ready_at <= now)
        })
}

/// How long until `pod` becomes available, if it is ready but not yet for
/// `min_ready_seconds` (`nextPodAvailabilityCheck`).
fn next_availability_check(
    pod: &PodView,
    min_ready_seconds: i32,
    now: Timestamp,
) -> Option<Duration> {
    if !pod.is_ready() || min_ready_seconds <= 0 {
        return None;
    }
    let since = pod.ready_condition()?.last_transition_time.as_ref()?;
    let at = since
        .0
        .checked_add(Duration::from_secs(min_ready_seconds as u64))
        .ok()?;
    let left = now.duration_until(at);
    (left.is_positive())
        .then(|| Duration::try_from(left).ok())
        .flatten()
}

/// When to look again so the Pods that are ready but not yet available are counted once they
/// are (`FindMinNextPodAvailabilityCheck`): the soonest of them as of `evaluated` (when the
/// status was computed), recomputed as of `now`; zero if that moment has passed meanwhile.
pub(crate) fn min_next_availability_check(
    pods: &[Arc<PodView>],
    min_ready_seconds: i32,
    evaluated: Timestamp,
    now: Timestamp,
) -> Option<Duration> {
    let mut first: Option<(Duration, &PodView)> = None;
    for pod in pods {
        if let Some(next) = next_availability_check(pod, min_ready_seconds, evaluated)
            && first.is_none_or(|(d, _)| next < d)
        {
            first = Some((next, pod));
        }
    }
    let (_, pod) = first?;
    Some(next_availability_check(pod, min_ready_seconds, now).unwrap_or(Duration::ZERO))
}

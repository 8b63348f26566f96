//! Replica arithmetic over a Deployment's ReplicaSets: sums of their counters, the size of the
//! new ReplicaSet during a rollout, saturation, and proportional scaling.
//!
//! Proportional scaling: when a Deployment is resized mid-rollout, every active ReplicaSet grows
//! or shrinks by its share. A ReplicaSet's share is its size times `new max / old max`, where the
//! old max comes from its `max-replicas` annotation (falling back to the Deployment's current
//! status size since 1.32, and to no change at all if that is 0 too), rounded half away from zero.
//!
//! Upstream: the replica-count helpers of deployment_util.go (`GetReplicaCountForReplicaSets` …
//! `GetReplicaSetProportion`, `getReplicaSetFraction`, `NewRSNewReplicas`, `IsSaturated`).

use std::borrow::Borrow;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};

use super::annotations::get_max_replicas_annotation;
use super::constants::{
    DESIRED_REPLICAS_ANNOTATION, RECREATE_DEPLOYMENT_STRATEGY_TYPE,
    ROLLING_UPDATE_DEPLOYMENT_STRATEGY_TYPE,
};
use super::fence::{IntOrPercentError, max_surge, scaled_value_from_int_or_percent};
use super::fields::{
    annotation, deployment_replicas, rolling_update, rs_available_replicas, rs_ready_replicas,
    rs_replicas, rs_status_replicas, strategy_type,
};

/// Why the new ReplicaSet's size cannot be computed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NewReplicasError {
    /// The rolling update's `maxSurge` is missing or invalid.
    #[error("resolving maxSurge: {0}")]
    MaxSurge(#[from] IntOrPercentError),
    /// A strategy type other than RollingUpdate or Recreate.
    #[error("deployment type {0:?} isn't supported")]
    UnsupportedStrategy(String),
}

/// `GetReplicaCountForReplicaSets`: Σ `spec.replicas`.
pub fn get_replica_count_for_replica_sets<R: Borrow<ReplicaSet>>(rss: &[R]) -> i32 {
    rss.iter()
        .map(|rs| rs_replicas(rs.borrow()))
        .fold(0, i32::wrapping_add)
}

/// `GetActualReplicaCountForReplicaSets`: Σ `status.replicas`.
pub fn get_actual_replica_count_for_replica_sets<R: Borrow<ReplicaSet>>(rss: &[R]) -> i32 {
    rss.iter()
        .map(|rs| rs_status_replicas(rs.borrow()))
        .fold(0, i32::wrapping_add)
}

/// `GetReadyReplicaCountForReplicaSets`: Σ `status.readyReplicas`.
pub fn get_ready_replica_count_for_replica_sets<R: Borrow<ReplicaSet>>(rss: &[R]) -> i32 {
    rss.iter()
        .map(|rs| rs_ready_replicas(rs.borrow()))
        .fold(0, i32::wrapping_add)
}

/// `GetAvailableReplicaCountForReplicaSets`: Σ `status.availableReplicas`.
pub fn get_available_replica_count_for_replica_sets<R: Borrow<ReplicaSet>>(rss: &[R]) -> i32 {
    rss.iter()
        .map(|rs| rs_available_replicas(rs.borrow()))
        .fold(0, i32::wrapping_add)
}

/// `GetTerminatingReplicaCountForReplicaSets` (1.33+): Σ `status.terminatingReplicas`, or `None`
/// (unknown) when a ReplicaSet the ReplicaSet controller has already synced
/// (`observedGeneration > 0`) does not report it. Never-synced ReplicaSets count 0.
pub fn get_terminating_replica_count_for_replica_sets<R: Borrow<ReplicaSet>>(
    rss: &[R],
) -> Option<i32> {
    let mut total = 0_i32;
    for rs in rss {
        let status = rs.borrow().status.as_ref();
        let observed = status.and_then(|s| s.observed_generation).unwrap_or(0);
        match status.and_then(|s| s.terminating_replicas) {
            Some(n) => total = total.wrapping_add(n),
            None if observed == 0 => {}
            None => return None,
        }
    }
    Some(total)
}

/// `NewRSNewReplicas`: the size the new ReplicaSet should have now. Rolling update: grow by what
/// `replicas + maxSurge` (raw maxSurge, rounded up) leaves over `all_rss`, never beyond the
/// desired count; Recreate: the desired count at once.
pub fn new_rs_new_replicas<R: Borrow<ReplicaSet>>(
    d: &Deployment,
    all_rss: &[R],
    new_rs: &ReplicaSet,
) -> Result<i32, NewReplicasError> {
    let replicas = deployment_replicas(d);
    match strategy_type(d) {
        ROLLING_UPDATE_DEPLOYMENT_STRATEGY_TYPE => {
            let surge = rolling_update(d)
                .and_then(|r| r.max_surge.as_ref())
                .ok_or(IntOrPercentError::Nil)?;
            let surge = scaled_value_from_int_or_percent(surge, replicas, true)? as i32;
            let current = get_replica_count_for_replica_sets(all_rss);
            let max_total = replicas.wrapping_add(surge);
            let new_replicas = rs_replicas(new_rs);
            if current >= max_total {
                return Ok(new_replicas);
            }
            let scale_up = (max_total - current).min(replicas - new_replicas);
            Ok(new_replicas + scale_up)
        }
        RECREATE_DEPLOYMENT_STRATEGY_TYPE => Ok(replicas),
        other => Err(NewReplicasError::UnsupportedStrategy(other.to_owned())),
    }
}

/// `IsSaturated`: the ReplicaSet owns all desired replicas — its size, its `desired-replicas`
/// annotation and its available count all equal the Deployment's `spec.replicas`.
pub fn is_saturated(d: &Deployment, rs: Option<&ReplicaSet>) -> bool {
    let Some(rs) = rs else {
        return false;
    };
    // Go's strconv.Atoi then int32(..) (truncating), not the non-negative parser.
    let Some(desired) = annotation(
        rs.metadata.annotations.as_ref(),
        DESIRED_REPLICAS_ANNOTATION,
    )
    .and_then(|v| v.parse::<i64>().ok()) else {
        return false;
    };
    let replicas = deployment_replicas(d);
    rs_replicas(rs) == replicas
        && desired as i32 == replicas
        && rs_available_replicas(rs) == replicas
}

/// `GetReplicaSetProportion`: how many replicas `rs` gains (or loses) when the Deployment adds
/// `to_add` replicas of which `added` were already handed out — its fraction, clamped to what is
/// left to hand out.
pub fn get_replica_set_proportion(
    rs: Option<&ReplicaSet>,
    d: &Deployment,
    to_add: i32,
    added: i32,
) -> i32 {
    let Some(rs) = rs else {
        return 0;
    };
    if rs_replicas(rs) == 0 || to_add == 0 || to_add == added {
        return 0;
    }
    let fraction = get_replica_set_fraction(rs, d);
    let allowed = to_add - added;
    if to_add > 0 {
        fraction.min(allowed)
    } else {
        fraction.max(allowed)
    }
}

/// `getReplicaSetFraction`: `round(size · (replicas + maxSurge) / max-replicas) − size`; scaling to
/// 0 removes the whole ReplicaSet. Missing or 0 `max-replicas` falls back to `status.replicas`;
/// if that is 0 too the ReplicaSet is left alone (1.32's division-by-zero guard).
pub fn get_replica_set_fraction(rs: &ReplicaSet, d: &Deployment) -> i32 {
    let size = rs_replicas(rs);
    let replicas = deployment_replicas(d);
    if replicas == 0 {
        return -size;
    }
    let max_now = replicas.wrapping_add(max_surge(d));
    let max_before = match get_max_replicas_annotation(rs) {
        Some(n) if n != 0 => n,
        _ => {
            let status_replicas = d.status.as_ref().and_then(|s| s.replicas).unwrap_or(0);
            if status_replicas == 0 {
                return 0;
            }
            status_replicas
        }
    };
    // Go multiplies in int32 before converting to float64.
    let new_size = f64::from(size.wrapping_mul(max_now)) / f64::from(max_before);
    // math.Round rounds half away from zero, as f64::round does.
    (new_size.round() as i32).wrapping_sub(size)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::util::constants::MAX_REPLICAS_ANNOTATION;
    use crate::util::testing::{generate_deployment, generate_rs, map, set_rs_replicas};
    use k8s_openapi::api::apps::v1::{
        DeploymentStatus, DeploymentStrategy, ReplicaSetStatus, RollingUpdateDeployment,
    };
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    use kctrl_client::versioned::Versioned;
    use std::collections::BTreeMap;

    fn rs_with(name: &str, observed: i64, spec: i32, status: i32, term: Option<i32>) -> ReplicaSet {
        let mut rs = generate_rs(&generate_deployment(name));
        set_rs_replicas(&mut rs, spec);
        rs.status = Some(ReplicaSetStatus {
            observed_generation: Some(observed),
            replicas: status,
            terminating_replicas: term,
            ..Default::default()
        });
        rs
    }

    #[test]
    fn get_replica_count_for_replica_sets_table() {
        let rs1 = rs_with("foo-rs", 1, 1, 2, Some(3));
        // Upstream's fixture sets rs1's observedGeneration twice and leaves rs2's at 0.
        let rs2 = rs_with("bar-rs", 0, 2, 3, Some(1));
        let rs3 = rs_with("unsynced-rs", 0, 3, 0, None);
        let rs4 = rs_with("dropped-rs", 1, 1, 1, None);
        type Case<'a> = (&'a str, Vec<&'a ReplicaSet>, i32, i32, Option<i32>);
        let cases: [Case<'_>; 6] = [
            ("scaling down rs1", vec![&rs1], 1, 2, Some(3)),
            ("scaling down rs1 and rs2", vec![&rs1, &rs2], 3, 5, Some(4)),
            ("scaling up rs3", vec![&rs3], 3, 0, Some(0)),
            (
                "scaling down rs1 and rs2 and scaling up rs3",
                vec![&rs1, &rs2, &rs3],
                6,
                5,
                Some(4),
            ),
            (
                "invalid/unknown terminating status for rs4",
                vec![&rs4],
                1,
                1,
                None,
            ),
            (
                "invalid/unknown terminating status for rs4 with rs1, rs2 and rs3",
                vec![&rs1, &rs2, &rs3, &rs4],
                7,
                6,
                None,
            ),
        ];
        for (name, sets, count, actual, terminating) in cases {
            assert_eq!(get_replica_count_for_replica_sets(&sets), count, "{name}");
            assert_eq!(
                get_actual_replica_count_for_replica_sets(&sets),
                actual,
                "{name}"
            );
            assert_eq!(
                get_terminating_replica_count_for_replica_sets(&sets),
                terminating,
                "{name}"
            );
        }
    }

    #[test]
    fn ready_and_available_sums() {
        let mut a = rs_with("a", 1, 1, 1, Some(0));
        let mut b = rs_with("b", 1, 1, 1, Some(0));
        a.status.as_mut().unwrap().ready_replicas = Some(2);
        a.status.as_mut().unwrap().available_replicas = Some(1);
        b.status.as_mut().unwrap().ready_replicas = Some(3);
        let sets = [a, b];
        assert_eq!(get_ready_replica_count_for_replica_sets(&sets), 5);
        assert_eq!(get_available_replica_count_for_replica_sets(&sets), 1);
    }

    fn with_strategy(d: &mut Deployment, type_: &str, surge: IntOrString, unavailable: i32) {
        d.spec.get_mut().strategy = Some(DeploymentStrategy {
            type_: Some(type_.to_owned()),
            rolling_update: Some(RollingUpdateDeployment {
                max_surge: Some(surge),
                max_unavailable: Some(IntOrString::Int(unavailable)),
            }),
        });
    }

    #[test]
    fn new_rs_new_replicas_table() {
        let cases = [
            (
                "can not scale up - to newRSReplicas",
                ROLLING_UPDATE_DEPLOYMENT_STRATEGY_TYPE,
                1,
                5,
                1,
                5,
            ),
            (
                "scale up - to depReplicas",
                ROLLING_UPDATE_DEPLOYMENT_STRATEGY_TYPE,
                6,
                2,
                10,
                6,
            ),
            (
                "recreate - to depReplicas",
                RECREATE_DEPLOYMENT_STRATEGY_TYPE,
                3,
                1,
                1,
                3,
            ),
        ];
        let mut d = generate_deployment("nginx");
        let mut new_rc = generate_rs(&d);
        let mut rs5 = generate_rs(&d);
        set_rs_replicas(&mut rs5, 5);
        for (name, type_, dep_replicas, new_rs_replicas, surge, want) in cases {
            d.spec.get_mut().replicas = Some(dep_replicas);
            with_strategy(&mut d, type_, IntOrString::Int(surge), 1);
            set_rs_replicas(&mut new_rc, new_rs_replicas);
            let got = new_rs_new_replicas(&d, &[&rs5], &new_rc);
            assert_eq!(got, Ok(want), "{name}");
        }
    }

    #[test]
    fn new_rs_new_replicas_errors() {
        let mut d = generate_deployment("nginx");
        let rs = generate_rs(&d);
        with_strategy(&mut d, "Canary", IntOrString::Int(1), 1);
        assert_eq!(
            new_rs_new_replicas::<ReplicaSet>(&d, &[], &rs),
            Err(NewReplicasError::UnsupportedStrategy("Canary".into()))
        );
        with_strategy(
            &mut d,
            ROLLING_UPDATE_DEPLOYMENT_STRATEGY_TYPE,
            IntOrString::String("x".into()),
            1,
        );
        let err = new_rs_new_replicas::<ReplicaSet>(&d, &[], &rs).unwrap_err();
        assert!(err.to_string().contains("\"x\""), "{err}");
    }

    #[test]
    fn get_replica_set_fraction_table() {
        let max = |v: &str| Some(map(&[(MAX_REPLICAS_ANNOTATION, v)]));
        // (name, d replicas, d status replicas, maxSurge, rs replicas, rs annotations, fraction)
        type Case = (
            &'static str,
            i32,
            i32,
            i32,
            i32,
            Option<BTreeMap<String, String>>,
            i32,
        );
        let cases: [Case; 9] = [
            (
                "empty deployment always scales to 0",
                0,
                0,
                0,
                10,
                None,
                -10,
            ),
            (
                "unsynced deployment does not scale when max-replicas annotation is missing (removed by a 3rd party)",
                10,
                0,
                0,
                5,
                None,
                0,
            ),
            (
                "unsynced deployment does not scale when max-replicas annotation is incorrectly set to 0 (by a 3rd party)",
                10,
                0,
                0,
                5,
                max("0"),
                0,
            ),
            (
                "scale up by 1/5 should increase RS replicas by 1/5 when max-replicas annotation is missing (removed by a 3rd party)",
                120,
                100,
                0,
                50,
                None,
                10,
            ),
            (
                "scale up by 1/5 should increase RS replicas by 1/5 when max-replicas annotation is incorrectly set to 0 (by a 3rd party)",
                120,
                100,
                0,
                50,
                max("0"),
                10,
            ),
            (
                "scale up by 1/5 should increase RS replicas by 1/5",
                120,
                0,
                0,
                50,
                max("100"),
                10,
            ),
            (
                "scale up with maxSurge by 1/5 should increase RS replicas approximately by 1/5",
                120,
                0,
                10,
                50,
                max("110"),
                9,
            ),
            (
                "scale down by 1/6 should decrease RS replicas by 1/6",
                10,
                0,
                0,
                6,
                max("12"),
                -1,
            ),
            (
                "scale down with maxSurge by 1/6 should decrease RS replicas approximately by 1/6",
                100,
                0,
                10,
                50,
                max("130"),
                -8,
            ),
        ];
        for (name, replicas, status_replicas, surge, rs_replicas, annotations, want) in cases {
            let mut d = generate_deployment("nginx");
            d.status = Some(DeploymentStatus {
                replicas: Some(status_replicas),
                ..Default::default()
            });
            d.spec.get_mut().replicas = Some(replicas);
            with_strategy(
                &mut d,
                ROLLING_UPDATE_DEPLOYMENT_STRATEGY_TYPE,
                IntOrString::Int(surge),
                1,
            );
            let mut rs = generate_rs(&d);
            rs.metadata.annotations = annotations;
            set_rs_replicas(&mut rs, rs_replicas);
            assert_eq!(get_replica_set_fraction(&rs, &d), want, "{name}");
        }
    }

    #[test]
    fn proportion_is_clamped_to_what_is_left() {
        let mut d = generate_deployment("nginx");
        d.spec.get_mut().replicas = Some(120);
        with_strategy(
            &mut d,
            ROLLING_UPDATE_DEPLOYMENT_STRATEGY_TYPE,
            IntOrString::Int(0),
            1,
        );
        let mut rs = generate_rs(&d);
        rs.metadata.annotations = Some(map(&[(MAX_REPLICAS_ANNOTATION, "100")]));
        set_rs_replicas(&mut rs, 50);
        // Fraction is +10; only 4 are left to hand out.
        assert_eq!(get_replica_set_proportion(Some(&rs), &d, 20, 16), 4);
        assert_eq!(get_replica_set_proportion(Some(&rs), &d, 20, 0), 10);
        assert_eq!(get_replica_set_proportion(Some(&rs), &d, 20, 20), 0);
        assert_eq!(get_replica_set_proportion(None, &d, 20, 0), 0);
        // Scaling down: fraction −20 (50·60/100 − 50) is clamped to the −10 left to remove.
        d.spec.get_mut().replicas = Some(60);
        assert_eq!(get_replica_set_proportion(Some(&rs), &d, -40, -30), -10);
    }

    #[test]
    fn fraction_rounds_half_away_from_zero() {
        let mut d = generate_deployment("nginx");
        d.spec.get_mut().replicas = Some(3);
        let mut rs = generate_rs(&d);
        // 1 · 3 / 2 = 1.5 → 2; fraction +1 (Recreate: no surge).
        rs.metadata.annotations = Some(map(&[(MAX_REPLICAS_ANNOTATION, "2")]));
        set_rs_replicas(&mut rs, 1);
        assert_eq!(get_replica_set_fraction(&rs, &d), 1);
    }

    #[test]
    fn saturation_needs_all_three() {
        let d = generate_deployment("nginx"); // 1 replica
        let mut rs = generate_rs(&d);
        set_rs_replicas(&mut rs, 1);
        rs.status = Some(ReplicaSetStatus {
            available_replicas: Some(1),
            ..Default::default()
        });
        assert!(!is_saturated(&d, Some(&rs)), "no desired annotation");
        rs.metadata.annotations = Some(map(&[(DESIRED_REPLICAS_ANNOTATION, "1")]));
        assert!(is_saturated(&d, Some(&rs)));
        rs.status.as_mut().unwrap().available_replicas = Some(0);
        assert!(!is_saturated(&d, Some(&rs)), "not available");
        assert!(!is_saturated(&d, None));
    }
}

//! Rolling-update fenceposts: how many pods above (`maxSurge`) and below (`maxUnavailable`) the
//! desired count a rollout may go.
//!
//! Both limits are int-or-percent. Percentages of the desired count round **up** for surge and
//! **down** for unavailability; if both end at zero, unavailability becomes 1 so that a rollout
//! can always make progress (validation forbids explicit 0/0, but rounding can produce it).
//!
//! Upstream: `ResolveFenceposts`, `MaxUnavailable`, `MinAvailable`, `MaxSurge`, `IsRollingUpdate`
//! of deployment_util.go, and apimachinery's `intstr.GetScaledValueFromIntOrPercent`.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::constants::ROLLING_UPDATE_DEPLOYMENT_STRATEGY_TYPE;
use super::fields::{deployment_replicas, rolling_update, strategy_type};

/// An int-or-percent that cannot be resolved to a number.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum IntOrPercentError {
    /// The field is not set (only reported where upstream requires it, e.g. new-RS sizing).
    #[error("invalid value for IntOrString: nil value")]
    Nil,
    /// A string without the `%` suffix.
    #[error("invalid value for IntOrString {value:?}: string is not a percentage")]
    NotAPercentage {
        /// The offending value.
        value: String,
    },
    /// `N%` where `N` is not an integer.
    #[error("invalid value for IntOrString {value:?}: percentage is not an integer")]
    InvalidPercentage {
        /// The offending value.
        value: String,
    },
}

/// `intstr.GetScaledValueFromIntOrPercent`: an integer as is, or `N%` of `total` rounded up
/// (`round_up`) or down.
pub fn scaled_value_from_int_or_percent(
    value: &IntOrString,
    total: i32,
    round_up: bool,
) -> Result<i64, IntOrPercentError> {
    match value {
        IntOrString::Int(i) => Ok(i64::from(*i)),
        IntOrString::String(s) => {
            let Some(number) = s.strip_suffix('%') else {
                return Err(IntOrPercentError::NotAPercentage { value: s.clone() });
            };
            // Go's strconv.Atoi: optional sign, decimal digits.
            let percent: i64 = number
                .parse()
                .map_err(|_| IntOrPercentError::InvalidPercentage { value: s.clone() })?;
            let scaled = percent as f64 * f64::from(total) / 100.0;
            Ok(if round_up {
                scaled.ceil()
            } else {
                scaled.floor()
            } as i64)
        }
    }
}

/// `ResolveFenceposts(maxSurge, maxUnavailable, desired)` → `(surge, unavailable)`. A missing
/// value counts as 0; both zero → unavailable 1. Any invalid value → error (callers that ignore it
/// read `(0, 0)`, as upstream does).
pub fn resolve_fenceposts(
    max_surge: Option<&IntOrString>,
    max_unavailable: Option<&IntOrString>,
    desired: i32,
) -> Result<(i32, i32), IntOrPercentError> {
    let zero = IntOrString::Int(0);
    let surge = scaled_value_from_int_or_percent(max_surge.unwrap_or(&zero), desired, true)?;
    let unavailable =
        scaled_value_from_int_or_percent(max_unavailable.unwrap_or(&zero), desired, false)?;
    // Go converts the resolved ints with int32(..): truncation, never a panic.
    let (surge, mut unavailable) = (surge as i32, unavailable as i32);
    if surge == 0 && unavailable == 0 {
        unavailable = 1;
    }
    Ok((surge, unavailable))
}

/// `IsRollingUpdate`: `spec.strategy.type == "RollingUpdate"` (an unset type is not, as in Go;
/// the API server always sets it).
pub fn is_rolling_update(d: &Deployment) -> bool {
    strategy_type(d) == ROLLING_UPDATE_DEPLOYMENT_STRATEGY_TYPE
}

/// The resolved fenceposts of a rolling Deployment, `(0, 0)` if they do not resolve.
fn fenceposts(d: &Deployment) -> (i32, i32) {
    let ru = rolling_update(d);
    resolve_fenceposts(
        ru.and_then(|r| r.max_surge.as_ref()),
        ru.and_then(|r| r.max_unavailable.as_ref()),
        deployment_replicas(d),
    )
    .unwrap_or((0, 0))
}

/// `MaxUnavailable`: how many of the desired pods may be unavailable during a rolling update,
/// capped at the desired count; 0 for other strategies or 0 replicas.
pub fn max_unavailable(d: &Deployment) -> i32 {
    let replicas = deployment_replicas(d);
    if !is_rolling_update(d) || replicas == 0 {
        return 0;
    }
    fenceposts(d).1.min(replicas)
}

/// `MinAvailable`: `replicas - MaxUnavailable` for rolling updates, else 0.
pub fn min_available(d: &Deployment) -> i32 {
    if !is_rolling_update(d) {
        return 0;
    }
    deployment_replicas(d) - max_unavailable(d)
}

/// `MaxSurge`: how many pods above the desired count a rolling update may create; 0 otherwise.
pub fn max_surge(d: &Deployment) -> i32 {
    if !is_rolling_update(d) {
        return 0;
    }
    fenceposts(d).0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::util::constants::RECREATE_DEPLOYMENT_STRATEGY_TYPE;
    use k8s_openapi::api::apps::v1::{DeploymentSpec, DeploymentStrategy, RollingUpdateDeployment};

    fn s(v: &str) -> IntOrString {
        IntOrString::String(v.to_owned())
    }

    #[test]
    fn resolve_fenceposts_table() {
        // (maxSurge, maxUnavailable, desired, surge, unavailable, error)
        type Case = (
            Option<&'static str>,
            Option<&'static str>,
            i32,
            i32,
            i32,
            bool,
        );
        let cases: [Case; 7] = [
            (Some("0%"), Some("0%"), 0, 0, 1, false),
            (Some("39%"), Some("39%"), 10, 4, 3, false),
            (Some("oops"), Some("39%"), 10, 0, 0, true),
            (Some("55%"), Some("urg"), 10, 0, 0, true),
            (None, Some("39%"), 10, 0, 3, false),
            (Some("39%"), None, 10, 4, 0, false),
            (None, None, 10, 0, 1, false),
        ];
        for (num, (surge, unavail, desired, want_surge, want_unavail, want_err)) in
            cases.into_iter().enumerate()
        {
            let (surge, unavail) = (surge.map(s), unavail.map(s));
            let got = resolve_fenceposts(surge.as_ref(), unavail.as_ref(), desired);
            assert_eq!(got.is_err(), want_err, "#{num}: {got:?}");
            assert_eq!(got.unwrap_or((0, 0)), (want_surge, want_unavail), "#{num}");
        }
    }

    #[test]
    fn resolve_fenceposts_errors_name_the_value() {
        let err = resolve_fenceposts(Some(&s("oops")), None, 10).unwrap_err();
        assert!(err.to_string().contains("\"oops\""), "{err}");
        let err = resolve_fenceposts(None, Some(&s("1.5%")), 10).unwrap_err();
        assert!(err.to_string().contains("\"1.5%\""), "{err}");
    }

    fn rolling(replicas: Option<i32>, surge: IntOrString, unavailable: IntOrString) -> Deployment {
        Deployment {
            spec: DeploymentSpec {
                replicas,
                strategy: Some(DeploymentStrategy {
                    type_: Some(ROLLING_UPDATE_DEPLOYMENT_STRATEGY_TYPE.into()),
                    rolling_update: Some(RollingUpdateDeployment {
                        max_surge: Some(surge),
                        max_unavailable: Some(unavailable),
                    }),
                }),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    fn recreate(replicas: Option<i32>) -> Deployment {
        Deployment {
            spec: DeploymentSpec {
                replicas,
                strategy: Some(DeploymentStrategy {
                    type_: Some(RECREATE_DEPLOYMENT_STRATEGY_TYPE.into()),
                    rolling_update: None,
                }),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[test]
    fn max_unavailable_table() {
        let d = |replicas, unavailable| rolling(Some(replicas), IntOrString::Int(1), unavailable);
        let cases = [
            (
                "maxUnavailable less than replicas",
                d(10, IntOrString::Int(5)),
                5,
            ),
            (
                "maxUnavailable equal replicas",
                d(10, IntOrString::Int(10)),
                10,
            ),
            (
                "maxUnavailable greater than replicas",
                d(5, IntOrString::Int(10)),
                5,
            ),
            (
                "maxUnavailable with replicas is 0",
                d(0, IntOrString::Int(10)),
                0,
            ),
            (
                "maxUnavailable with Recreate deployment strategy",
                recreate(None),
                0,
            ),
            (
                "maxUnavailable less than replicas with percents",
                d(10, s("50%")),
                5,
            ),
            (
                "maxUnavailable equal replicas with percents",
                d(10, s("100%")),
                10,
            ),
            (
                "maxUnavailable greater than replicas with percents",
                d(5, s("100%")),
                5,
            ),
        ];
        for (name, d, want) in cases {
            assert_eq!(max_unavailable(&d), want, "{name}");
        }
    }

    #[test]
    fn min_available_table() {
        let d = |replicas, unavailable| rolling(Some(replicas), IntOrString::Int(1), unavailable);
        let cases = [
            (
                "replicas greater than maxUnavailable",
                d(10, IntOrString::Int(5)),
                5,
            ),
            (
                "replicas equal maxUnavailable",
                d(10, IntOrString::Int(10)),
                0,
            ),
            (
                "replicas less than maxUnavailable",
                d(5, IntOrString::Int(10)),
                0,
            ),
            ("replicas is 0", d(0, IntOrString::Int(10)), 0),
            (
                "minAvailable with Recreate deployment strategy",
                recreate(Some(10)),
                0,
            ),
            (
                "replicas greater than maxUnavailable with percents",
                d(10, s("60%")),
                4,
            ),
            (
                "replicas equal maxUnavailable with percents",
                d(10, s("100%")),
                0,
            ),
            (
                "replicas less than maxUnavailable with percents",
                d(5, s("100%")),
                0,
            ),
        ];
        for (name, d, want) in cases {
            assert_eq!(min_available(&d), want, "{name}");
        }
    }

    #[test]
    fn max_surge_rounds_up_and_ignores_errors() {
        assert_eq!(max_surge(&rolling(Some(10), s("25%"), s("25%"))), 3);
        assert_eq!(max_surge(&rolling(Some(10), s("bad"), s("25%"))), 0);
        assert_eq!(max_surge(&recreate(Some(10))), 0);
        // 25% of 10 rounds down for unavailability.
        assert_eq!(max_unavailable(&rolling(Some(10), s("25%"), s("25%"))), 2);
    }
}

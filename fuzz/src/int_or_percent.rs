//! `int_or_percent`: `maxSurge` / `maxUnavailable` string values through
//! [`scaled_value_from_int_or_percent`] and [`resolve_fenceposts`].
//!
//! Properties, for several desired replica counts and both roundings:
//! * never panics;
//! * a value without `%` is refused as "not a percentage", and a `N%` is accepted exactly when
//!   `N` is what Go's `strconv.Atoi` reads (optional sign, ASCII digits, 64-bit range);
//! * an accepted percentage resolves to the exact rational `N * total / 100` rounded up or
//!   down, whenever Go's float arithmetic is exact (`|N * total| < 2^53`), and is monotonic in
//!   the rounding (up >= down);
//! * `resolve_fenceposts` never yields `(0, 0)`, and otherwise returns the two scaled values
//!   (truncated to 32 bits as Go does).

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kctrl_deployment::util::fence::{
    IntOrPercentError, resolve_fenceposts, scaled_value_from_int_or_percent,
};

const TOTALS: [i32; 9] = [0, 1, 3, 10, 100, 1_000_003, -7, i32::MAX, i32::MIN];

/// The property function.
pub fn check(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let value = IntOrString::String(text.to_owned());
    let atoi = text.strip_suffix('%').map(go_atoi);
    for total in TOTALS {
        let down = scaled_value_from_int_or_percent(&value, total, false);
        let up = scaled_value_from_int_or_percent(&value, total, true);
        for (got, round_up) in [(&down, false), (&up, true)] {
            match (atoi, got) {
                (None, Err(IntOrPercentError::NotAPercentage { value })) => {
                    assert_eq!(value, text);
                }
                (Some(None), Err(IntOrPercentError::InvalidPercentage { value })) => {
                    assert_eq!(value, text);
                }
                (Some(Some(percent)), Ok(v)) => {
                    let product = i128::from(percent) * i128::from(total);
                    if product.unsigned_abs() < 1 << 53 {
                        let exact = if round_up {
                            div_ceil(product, 100)
                        } else {
                            product.div_euclid(100)
                        };
                        assert_eq!(
                            i128::from(*v),
                            exact,
                            "{text:?} of {total}, rounding {}",
                            if round_up { "up" } else { "down" }
                        );
                    }
                }
                (want, got) => {
                    panic!("{text:?} of {total}: Atoi reads {want:?}, but the result is {got:?}")
                }
            }
        }
        if let (Ok(d), Ok(u)) = (&down, &up) {
            assert!(
                u >= d,
                "{text:?} of {total}: rounding up gave less than down"
            );
        }

        match resolve_fenceposts(Some(&value), Some(&value), total) {
            Ok((surge, unavailable)) => {
                assert_ne!((surge, unavailable), (0, 0), "{text:?} of {total}");
                let (u, d) = (*up.as_ref().expect("resolved"), *down.as_ref().expect("ok"));
                assert_eq!(surge, u as i32, "{text:?} of {total}: surge");
                if (u as i32, d as i32) != (0, 0) {
                    assert_eq!(unavailable, d as i32, "{text:?} of {total}: unavailable");
                } else {
                    assert_eq!(unavailable, 1, "{text:?} of {total}: unavailable");
                }
            }
            Err(e) => assert!(down.is_err(), "{text:?} of {total}: {e}"),
        }
    }
    // An integer in its int form is taken as it is.
    if let Ok(n) = text.parse::<i32>() {
        let int = IntOrString::Int(n);
        for total in TOTALS {
            assert_eq!(
                scaled_value_from_int_or_percent(&int, total, true),
                Ok(i64::from(n))
            );
        }
    }
}

/// Go's `strconv.Atoi` on a 64-bit platform: `Some(None)` for a syntax or range error.
fn go_atoi(s: &str) -> Option<i64> {
    let digits = s.strip_prefix(['+', '-']).unwrap_or(s);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let magnitude = digits.bytes().try_fold(0i128, |acc, b| {
        let next = acc * 10 + i128::from(b - b'0');
        (next <= 1 << 63).then_some(next)
    })?;
    let signed = if s.starts_with('-') {
        -magnitude
    } else {
        magnitude
    };
    i64::try_from(signed).ok()
}

fn div_ceil(a: i128, b: i128) -> i128 {
    -((-a).div_euclid(b))
}

//! Go `time.Duration` flag values (`15s`, `1m30s`, `250ms`), read as kube-controller-manager
//! reads its duration flags.

use std::time::Duration;

/// Go's limit: `time.Duration` is an `int64` of nanoseconds (about 292 years).
const MAX_NANOS: u64 = i64::MAX as u64;

/// Parses a Go `time.Duration` string: a sequence of decimal numbers, each with an optional
/// fraction and a unit (`ns`, `us`, `µs`, `ms`, `s`, `m`, `h`), e.g. `15s`, `1m30s`, `1.5h`,
/// `250ms`; `0` alone is also accepted. Negative durations are refused.
///
/// The value is the one Go's `time.ParseDuration` reads, to the nanosecond: whole numbers
/// in integer nanoseconds, a fraction scaled in floating point as Go does (fraction digits
/// past 63 bits are ignored), and anything above Go's limit of 2^63 - 1 ns is refused.
pub fn parse_go_duration(text: &str) -> Result<Duration, String> {
    let invalid = || format!("invalid duration {text:?} (expected e.g. 15s, 1m30s, 250ms)");
    if text.starts_with('-') {
        return Err(invalid());
    }
    let mut rest = text.strip_prefix('+').unwrap_or(text);
    if rest == "0" {
        return Ok(Duration::ZERO);
    }
    if rest.is_empty() {
        return Err(invalid());
    }
    let mut total: u64 = 0;
    while !rest.is_empty() {
        let int_len = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        let (int_digits, after) = rest.split_at(int_len);
        let whole = leading_int(int_digits).ok_or_else(|| format!("{}: too long", invalid()))?;
        let (fraction, scale, after, has_fraction) = match after.strip_prefix('.') {
            Some(after_dot) => {
                let len = after_dot
                    .find(|c: char| !c.is_ascii_digit())
                    .unwrap_or(after_dot.len());
                let (fraction, scale) = leading_fraction(&after_dot[..len]);
                (fraction, scale, &after_dot[len..], len > 0)
            }
            None => (0, 1.0, after, false),
        };
        if int_digits.is_empty() && !has_fraction {
            return Err(invalid());
        }
        let unit_len = after
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(after.len());
        let nanos_per_unit: u64 = match &after[..unit_len] {
            "ns" => 1,
            "us" | "\u{b5}s" | "\u{3bc}s" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            "" => return Err(format!("{}: missing unit", invalid())),
            unit => return Err(format!("{}: unknown unit {unit:?}", invalid())),
        };
        rest = &after[unit_len..];
        let too_long = || {
            format!(
                "{}: longer than Go's limit of 2562047h47m16.854775807s",
                invalid()
            )
        };
        let mut value = whole
            .checked_mul(nanos_per_unit)
            .filter(|v| *v <= MAX_NANOS)
            .ok_or_else(too_long)?;
        if fraction > 0 {
            // Go scales the fraction in float64: nanosecond-accurate for fractions of an hour.
            value += (fraction as f64 * (nanos_per_unit as f64 / scale)) as u64;
        }
        total = total
            .checked_add(value)
            .filter(|t| *t <= MAX_NANOS)
            .ok_or_else(too_long)?;
    }
    Ok(Duration::from_nanos(total))
}

/// A run of decimal digits as a number; `None` past 2^63 (Go's `leadingInt` overflow).
fn leading_int(digits: &str) -> Option<u64> {
    digits.bytes().try_fold(0u64, |acc, b| {
        acc.checked_mul(10)
            .and_then(|x| x.checked_add(u64::from(b - b'0')))
            .filter(|x| *x <= 1 << 63)
    })
}

/// The digits after a decimal point as `(numerator, 10^digits kept)`: digits that would
/// take the numerator past 63 bits are ignored (Go's `leadingFraction`).
fn leading_fraction(digits: &str) -> (u64, f64) {
    let (mut x, mut scale) = (0u64, 1.0);
    for b in digits.bytes() {
        match x
            .checked_mul(10)
            .and_then(|x| x.checked_add(u64::from(b - b'0')))
            .filter(|y| *y <= 1 << 63)
        {
            Some(y) => {
                x = y;
                scale *= 10.0;
            }
            None => break,
        }
    }
    (x, scale)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations() {
        let cases = [
            ("15s", Duration::from_secs(15)),
            ("1m30s", Duration::from_secs(90)),
            ("1.5h", Duration::from_secs(5400)),
            ("250ms", Duration::from_millis(250)),
            ("10us", Duration::from_micros(10)),
            ("10µs", Duration::from_micros(10)),
            ("7ns", Duration::from_nanos(7)),
            ("0", Duration::ZERO),
            ("+2s", Duration::from_secs(2)),
            ("1h2m3s", Duration::from_secs(3723)),
        ];
        for (text, want) in cases {
            let got = parse_go_duration(text).unwrap();
            let diff = got.abs_diff(want);
            assert!(
                diff < Duration::from_nanos(2),
                "{text}: {got:?} != {want:?}"
            );
        }
        for bad in ["", "15", "s", "-1s", "1.2.3s", "5d", "1m30", ".s", "+"] {
            let err = parse_go_duration(bad).unwrap_err();
            assert!(err.contains(&format!("{bad:?}")), "{bad}: {err}");
        }
    }
}

#[cfg(test)]
mod exactness_tests {
    use super::*;

    // Found by the `go_duration` fuzz target (fuzz/regressions/go_duration/): the value was
    // summed in f64 seconds, so long values lost nanoseconds and values past Go's limit were
    // accepted.
    #[test]
    fn values_are_exact_to_the_nanosecond_up_to_gos_limit() {
        assert_eq!(
            parse_go_duration("2562047h47m16.854775807s"),
            Ok(Duration::from_nanos(i64::MAX as u64))
        );
        assert_eq!(
            parse_go_duration("9223372036854775807ns"),
            Ok(Duration::from_nanos(i64::MAX as u64))
        );
        assert_eq!(
            parse_go_duration("1h0.000000001s"),
            Ok(Duration::from_nanos(3_600_000_000_001))
        );
        assert_eq!(parse_go_duration("0.3s"), Ok(Duration::from_millis(300)));
        assert_eq!(parse_go_duration("1.s"), Ok(Duration::from_secs(1)));
        assert_eq!(parse_go_duration(".5s"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_go_duration("+0"), Ok(Duration::ZERO));
        for too_long in [
            "2562047h47m16.854775808s",
            "9223372036854775808ns",
            "2562048h",
            "99999999999999999999s",
        ] {
            let err = parse_go_duration(too_long).unwrap_err();
            assert!(err.contains(too_long), "{err}");
        }
        // Digits of a fraction past what 63 bits hold are ignored, as Go does.
        assert_eq!(
            parse_go_duration("0.1234567891234567891234h"),
            Ok(Duration::from_nanos(444_444_440_844))
        );
    }
}

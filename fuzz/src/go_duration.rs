//! `go_duration`: the `--leader-elect-*` duration flags' parser on arbitrary text.
//!
//! Properties:
//! * never panics;
//! * negative durations are refused;
//! * it accepts exactly what Go's `time.ParseDuration` accepts (apart from negatives), and
//!   reads the same value: compared with an exact rational reading of the text, which may
//!   differ from Go's by at most 1 ns per component, as Go computes fractions in float64;
//! * a parsed duration printed the way Go's `Duration.String` prints it (`1h2m3.5s`) and as
//!   whole nanoseconds parses back to exactly the same duration;
//! * concatenating two durations adds them: `parse(a + b) = parse(a) + parse(b)`.

use std::time::Duration;

use kctrl_deployment_controller::duration::parse_go_duration;

/// The property function.
pub fn check(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let got = parse_go_duration(text);
    if let Err(e) = &got {
        assert!(
            e.contains(&format!("{text:?}")),
            "error {e:?} does not name the input"
        );
    }
    if text.starts_with('-') {
        assert!(got.is_err(), "accepted negative {text:?}");
    } else {
        match (reference(text), &got) {
            (Reference::Invalid, Ok(d)) => {
                panic!("{text:?}: Go refuses it, but it parsed as {d:?}")
            }
            (Reference::Nanos { ns, components }, got) => {
                let tolerance = i128::from(components);
                let max = i128::from(i64::MAX);
                match got {
                    Ok(d) => {
                        let d = i128::try_from(d.as_nanos()).expect("fits");
                        assert!(
                            (d - ns).abs() <= tolerance,
                            "{text:?}: parsed {d} ns, exactly {ns} ns"
                        );
                    }
                    // Within the rounding slack of Go's limit either answer is Go's.
                    Err(e) => assert!(ns > max - tolerance, "{text:?} ({ns} ns): {e}"),
                }
            }
            (Reference::Invalid, Err(_)) => {}
        }
    }

    let Ok(d) = got else {
        return;
    };
    for printed in [go_string(d), format!("{}ns", d.as_nanos())] {
        assert_eq!(
            parse_go_duration(&printed),
            Ok(d),
            "{text:?} = {d:?} printed as {printed:?}"
        );
    }

    // Additivity, splitting the text after each unit.
    for (i, _) in text.match_indices(|c: char| c.is_ascii_alphabetic() || c == 'µ' || c == 'μ') {
        let cut = i + text[i..].chars().next().map_or(1, char::len_utf8);
        let (a, b) = text.split_at(cut);
        if b.is_empty() || !b.starts_with(|c: char| c.is_ascii_digit() || c == '.') {
            continue;
        }
        if let (Ok(x), Ok(y)) = (parse_go_duration(a), parse_go_duration(b))
            && a != "0"
            && b != "0"
            && (x + y).as_nanos() <= i64::MAX as u128
        {
            assert_eq!(Ok(x + y), got, "{text:?} split as {a:?} + {b:?}");
        }
    }
}

/// What Go's `time.ParseDuration` reads, computed exactly.
#[derive(Debug)]
enum Reference {
    Invalid,
    /// The exact value and how many number+unit components it has.
    Nanos {
        ns: i128,
        components: u32,
    },
}

fn reference(text: &str) -> Reference {
    let unsigned = text.strip_prefix(['+', '-']).unwrap_or(text);
    if unsigned == "0" {
        return Reference::Nanos {
            ns: 0,
            components: 0,
        };
    }
    if unsigned.is_empty() {
        return Reference::Invalid;
    }
    let mut rest = unsigned;
    let (mut total, mut components) = (0i128, 0u32);
    while !rest.is_empty() {
        let int_len = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        let (int, after) = rest.split_at(int_len);
        let (frac, after) = match after.strip_prefix('.') {
            Some(a) => {
                let n = a.find(|c: char| !c.is_ascii_digit()).unwrap_or(a.len());
                a.split_at(n)
            }
            None => ("", after),
        };
        if int.is_empty() && frac.is_empty() {
            return Reference::Invalid;
        }
        let unit_len = after
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(after.len());
        let (unit, after) = after.split_at(unit_len);
        let unit: i128 = match unit {
            "ns" => 1,
            "us" | "\u{b5}s" | "\u{3bc}s" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            _ => return Reference::Invalid,
        };
        // Go refuses an integer part above 2^63 before looking at the unit.
        let Some(int) = digits_value(int) else {
            return Reference::Invalid;
        };
        let mut value = int * unit;
        // Go keeps at most the fraction digits that fit in 63 bits; the rest are ignored.
        let frac = &frac[..frac.len().min(18)];
        if let Some(f) = digits_value(frac) {
            value += f * unit / 10i128.pow(frac.len() as u32);
        }
        total += value;
        components += 1;
        if int * unit > 1 << 63 || total > 1 << 64 {
            return Reference::Invalid;
        }
        rest = after;
    }
    if total > i128::from(i64::MAX) + i128::from(components) {
        return Reference::Invalid;
    }
    Reference::Nanos {
        ns: total,
        components,
    }
}

/// A run of ASCII digits as a number, `None` above 2^63 (where Go gives up).
fn digits_value(digits: &str) -> Option<i128> {
    let mut x: i128 = 0;
    for b in digits.bytes() {
        x = x * 10 + i128::from(b - b'0');
        if x > 1 << 63 {
            return None;
        }
    }
    Some(x)
}

/// Go's `Duration.String` for a non-negative duration: `0s`, `1.5µs`, `250ms`, `1h2m3.5s`.
fn go_string(d: Duration) -> String {
    let ns = d.as_nanos();
    if ns == 0 {
        return "0s".to_owned();
    }
    let fraction = |value: u128, digits: u32| {
        let scale = 10u128.pow(digits);
        let (whole, frac) = (value / scale, value % scale);
        if frac == 0 {
            whole.to_string()
        } else {
            let f = format!("{frac:0width$}", width = digits as usize);
            format!("{whole}.{}", f.trim_end_matches('0'))
        }
    };
    if ns < 1_000 {
        return format!("{ns}ns");
    }
    if ns < 1_000_000 {
        return format!("{}\u{b5}s", fraction(ns, 3));
    }
    if ns < 1_000_000_000 {
        return format!("{}ms", fraction(ns, 6));
    }
    let (h, rem) = (ns / 3_600_000_000_000, ns % 3_600_000_000_000);
    let (m, rem) = (rem / 60_000_000_000, rem % 60_000_000_000);
    let s = format!("{}s", fraction(rem, 9));
    match (h, m) {
        (0, 0) => s,
        (0, m) => format!("{m}m{s}"),
        (h, m) => format!("{h}h{m}m{s}"),
    }
}

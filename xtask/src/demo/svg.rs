//! The demo's timeline picture: ReplicaSet sizes and Deployment conditions over time, as a
//! self-contained SVG document written by hand (no drawing dependency).
//!
//! [`render`] is pure: a [`Timeline`] in, SVG text out.

use std::fmt::Write as _;

/// One observation of a ReplicaSet (written whenever any of its counts changed).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct RsSample {
    /// Seconds since the start of the recording.
    pub(crate) t: f64,
    /// ReplicaSet name.
    pub(crate) rs: String,
    /// `spec.replicas`.
    pub(crate) spec: i32,
    /// `status.readyReplicas`.
    pub(crate) ready: i32,
    /// `status.availableReplicas`.
    pub(crate) available: i32,
}

/// A change of one Deployment condition (type, status or reason).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct ConditionChange {
    /// Seconds since the start of the recording.
    pub(crate) t: f64,
    /// `Available` or `Progressing` (other types get their own band too).
    pub(crate) kind: String,
    /// `True`, `False` or `Unknown`.
    pub(crate) status: String,
    /// The condition's reason, e.g. `NewReplicaSetAvailable`.
    pub(crate) reason: String,
}

/// A moment worth a vertical line, e.g. "image → pause:3.9".
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Marker {
    /// Seconds since the start of the recording.
    pub(crate) t: f64,
    /// Short text drawn next to the line.
    pub(crate) label: String,
}

/// Everything the picture shows.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Timeline {
    /// Title drawn at the top.
    pub(crate) title: String,
    /// A smaller line under the title.
    pub(crate) subtitle: String,
    /// ReplicaSet samples in time order.
    pub(crate) samples: Vec<RsSample>,
    /// Legend text per ReplicaSet (e.g. its image); ReplicaSets missing here use their name.
    pub(crate) rs_labels: Vec<(String, String)>,
    /// Condition changes in time order.
    pub(crate) conditions: Vec<ConditionChange>,
    /// Vertical markers.
    pub(crate) markers: Vec<Marker>,
    /// Where the time axis ends (seconds); at least the last sample's time is used.
    pub(crate) end: f64,
}

const WIDTH: f64 = 1000.0;
const LEFT: f64 = 100.0;
const RIGHT: f64 = 760.0;
const TOP: f64 = 90.0;
const BOTTOM: f64 = 360.0;
const BAND_TOP: f64 = 415.0;
const BAND_HEIGHT: f64 = 22.0;
const BAND_GAP: f64 = 34.0;
const COLORS: [&str; 6] = [
    "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b",
];

/// Escapes text for SVG content and attribute values.
fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A "nice" tick step (1, 2 or 5 × 10^n) giving about `target` ticks over `span`.
fn nice_step(span: f64, target: f64) -> f64 {
    if span <= 0.0 || !span.is_finite() {
        return 1.0;
    }
    let raw = span / target;
    let mag = 10f64.powf(raw.log10().floor());
    let norm = raw / mag;
    let nice = if norm <= 1.0 {
        1.0
    } else if norm <= 2.0 {
        2.0
    } else if norm <= 5.0 {
        5.0
    } else {
        10.0
    };
    nice * mag
}

/// Formats a tick value without a trailing `.0`.
fn fmt_num(v: f64) -> String {
    if (v - v.round()).abs() < 1e-9 {
        format!("{}", v.round() as i64)
    } else {
        format!("{v:.1}")
    }
}

/// ReplicaSet names in order of first appearance.
fn rs_order(samples: &[RsSample]) -> Vec<&str> {
    let mut names: Vec<&str> = Vec::new();
    for s in samples {
        if !names.contains(&s.rs.as_str()) {
            names.push(&s.rs);
        }
    }
    names
}

/// Condition types in order of first appearance, `Available` and `Progressing` first.
fn condition_kinds(conditions: &[ConditionChange]) -> Vec<&str> {
    let mut kinds: Vec<&str> = Vec::new();
    for k in ["Available", "Progressing"] {
        if conditions.iter().any(|c| c.kind == k) {
            kinds.push(k);
        }
    }
    for c in conditions {
        if !kinds.contains(&c.kind.as_str()) {
            kinds.push(&c.kind);
        }
    }
    kinds
}

fn status_color(status: &str) -> &'static str {
    match status {
        "True" => "#b7e4b0",
        "False" => "#f4b6b6",
        _ => "#dddddd",
    }
}

/// Renders `timeline` as an SVG document: one step line per ReplicaSet for `spec.replicas`
/// (solid) and one for `availableReplicas` (dashed), time on the x axis, a band per Deployment
/// condition coloured by status with the reason at each change, and vertical markers.
pub(crate) fn render(timeline: &Timeline) -> String {
    let last_t = timeline
        .samples
        .iter()
        .map(|s| s.t)
        .chain(timeline.conditions.iter().map(|c| c.t))
        .chain(timeline.markers.iter().map(|m| m.t))
        .fold(0.0f64, f64::max);
    let end = timeline.end.max(last_t).max(1.0);
    let max_y = timeline
        .samples
        .iter()
        .map(|s| s.spec.max(s.ready).max(s.available))
        .max()
        .unwrap_or(0)
        .max(1);
    let y_top = f64::from(max_y) + 1.0;
    let x = |t: f64| LEFT + (t.clamp(0.0, end) / end) * (RIGHT - LEFT);
    let y = |v: i32| BOTTOM - (f64::from(v) / y_top) * (BOTTOM - TOP);
    let kinds = condition_kinds(&timeline.conditions);
    let height = BAND_TOP + BAND_GAP * kinds.len() as f64 + 16.0;

    let mut out = String::new();
    let _ = writeln!(
        out,
        r##"<?xml version="1.0" encoding="UTF-8"?>
<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="sans-serif" font-size="12">
<rect x="0" y="0" width="{WIDTH}" height="{height}" fill="white"/>
<text x="{LEFT}" y="26" font-size="16" font-weight="bold">{}</text>
<text x="{LEFT}" y="46" fill="#444444">{}</text>"##,
        esc(&timeline.title),
        esc(&timeline.subtitle)
    );

    // Grid, ticks and axes.
    let y_step = nice_step(y_top, 6.0).max(1.0);
    let mut v = 0.0;
    while v <= y_top + 1e-9 {
        let py = BOTTOM - (v / y_top) * (BOTTOM - TOP);
        let _ = writeln!(
            out,
            r##"<line x1="{LEFT}" y1="{py:.1}" x2="{RIGHT}" y2="{py:.1}" stroke="#eeeeee"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
            LEFT - 6.0,
            py + 4.0,
            fmt_num(v)
        );
        v += y_step;
    }
    let t_step = nice_step(end, 10.0);
    let axis_bottom = BAND_TOP + BAND_GAP * kinds.len() as f64 - (BAND_GAP - BAND_HEIGHT);
    let mut t = 0.0;
    while t <= end + 1e-9 {
        let px = x(t);
        let _ = writeln!(
            out,
            r##"<line x1="{px:.1}" y1="{TOP}" x2="{px:.1}" y2="{:.1}" stroke="#eeeeee"/><text x="{px:.1}" y="{:.1}" text-anchor="middle">{}</text>"##,
            axis_bottom.max(BOTTOM),
            BOTTOM + 16.0,
            fmt_num(t)
        );
        t += t_step;
    }
    let _ = writeln!(
        out,
        r##"<line class="axis" x1="{LEFT}" y1="{BOTTOM}" x2="{RIGHT}" y2="{BOTTOM}" stroke="black"/>
<line class="axis" x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{BOTTOM}" stroke="black"/>
<text class="axis-label" x="{:.1}" y="{:.1}" text-anchor="middle">time since start (s)</text>
<text class="axis-label" x="18" y="{:.1}" text-anchor="middle" transform="rotate(-90 18 {:.1})">replicas</text>"##,
        (LEFT + RIGHT) / 2.0,
        BOTTOM + 34.0,
        (TOP + BOTTOM) / 2.0,
        (TOP + BOTTOM) / 2.0,
    );

    // Markers, labelled above the plot (a second row when close to the previous label).
    let mut last_label: Option<(f64, usize)> = None;
    for m in &timeline.markers {
        let px = x(m.t);
        let row = match last_label {
            Some((prev, row)) if px - prev < 7.0 * m.label.chars().count() as f64 => 1 - row,
            _ => 0,
        };
        last_label = Some((px, row));
        let _ = writeln!(
            out,
            r##"<line class="marker" x1="{px:.1}" y1="{:.1}" x2="{px:.1}" y2="{:.1}" stroke="#555555" stroke-dasharray="2,3"/><text x="{:.1}" y="{:.1}" fill="#333333">{}</text>"##,
            TOP - 8.0 - 14.0 * row as f64,
            axis_bottom.max(BOTTOM),
            px + 3.0,
            TOP - 10.0 - 14.0 * row as f64,
            esc(&m.label)
        );
    }

    // One step line per ReplicaSet and count.
    let names = rs_order(&timeline.samples);
    for (i, name) in names.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        for (what, dash, width) in [("replicas", "", 2.5), ("available", "6,4", 1.5)] {
            let mut points: Vec<(f64, f64)> = Vec::new();
            for s in timeline.samples.iter().filter(|s| s.rs == *name) {
                let v = if what == "replicas" {
                    s.spec
                } else {
                    s.available
                };
                let (px, py) = (x(s.t), y(v));
                if let Some(&(_, prev_y)) = points.last() {
                    points.push((px, prev_y));
                }
                points.push((px, py));
            }
            if let Some(&(_, last_y)) = points.last() {
                points.push((x(end), last_y));
            }
            let pts: Vec<String> = points
                .iter()
                .map(|(px, py)| format!("{px:.1},{py:.1}"))
                .collect();
            let dash_attr = if dash.is_empty() {
                String::new()
            } else {
                format!(r#" stroke-dasharray="{dash}""#)
            };
            let _ = writeln!(
                out,
                r#"<polyline class="rs" data-rs="{}" data-series="{what}" fill="none" stroke="{color}" stroke-width="{width}"{dash_attr} points="{}"/>"#,
                esc(name),
                pts.join(" ")
            );
        }
    }

    // Condition bands.
    for (row, kind) in kinds.iter().enumerate() {
        let top = BAND_TOP + BAND_GAP * row as f64;
        let _ = writeln!(
            out,
            r##"<text x="{:.1}" y="{:.1}" text-anchor="end">{}</text><rect x="{LEFT}" y="{top:.1}" width="{:.1}" height="{BAND_HEIGHT}" fill="#f7f7f7" stroke="#cccccc"/>"##,
            LEFT - 6.0,
            top + BAND_HEIGHT / 2.0 + 4.0,
            esc(kind),
            RIGHT - LEFT
        );
        let changes: Vec<&ConditionChange> = timeline
            .conditions
            .iter()
            .filter(|c| c.kind == *kind)
            .collect();
        for (j, c) in changes.iter().enumerate() {
            let x0 = x(c.t);
            let x1 = changes.get(j + 1).map_or(x(end), |n| x(n.t));
            let _ = writeln!(
                out,
                r##"<rect class="condition" x="{x0:.1}" y="{top:.1}" width="{:.1}" height="{BAND_HEIGHT}" fill="{}"><title>{}={} ({}) at {:.2}s</title></rect><line x1="{x0:.1}" y1="{top:.1}" x2="{x0:.1}" y2="{:.1}" stroke="#333333"/>"##,
                (x1 - x0).max(0.0),
                status_color(&c.status),
                esc(kind),
                esc(&c.status),
                esc(&c.reason),
                c.t,
                top + BAND_HEIGHT,
            );
            // The reason, where it fits (about 5.2 px per character at 10 px); the tooltip
            // has it always.
            let text = format!("{} {}", c.status, c.reason);
            if x1 - x0 >= 6.0 + 5.2 * text.chars().count() as f64 {
                let _ = writeln!(
                    out,
                    r#"<text x="{:.1}" y="{:.1}" font-size="10">{}</text>"#,
                    x0 + 3.0,
                    top + BAND_HEIGHT / 2.0 + 4.0,
                    esc(&text)
                );
            }
        }
    }
    if kinds.is_empty() && names.is_empty() {
        let _ = writeln!(
            out,
            r##"<text x="{:.1}" y="{:.1}" text-anchor="middle" fill="#888888">no samples recorded</text>"##,
            (LEFT + RIGHT) / 2.0,
            (TOP + BOTTOM) / 2.0
        );
    }

    // Legend.
    let lx = RIGHT + 20.0;
    let mut ly = TOP + 4.0;
    let _ = writeln!(
        out,
        r#"<g class="legend"><text x="{lx}" y="{ly:.1}" font-weight="bold">ReplicaSets</text>"#
    );
    for (i, name) in names.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let label = timeline
            .rs_labels
            .iter()
            .find(|(n, _)| n == name)
            .map_or(name.to_string(), |(_, l)| l.clone());
        ly += 20.0;
        let _ = writeln!(
            out,
            r#"<text x="{lx}" y="{ly:.1}" fill="{color}">{}</text>"#,
            esc(&label)
        );
        ly += 16.0;
        let _ = writeln!(
            out,
            r#"<line x1="{lx}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="{color}" stroke-width="2.5"/><text x="{:.1}" y="{ly:.1}">replicas (spec)</text>"#,
            ly - 4.0,
            lx + 24.0,
            ly - 4.0,
            lx + 30.0
        );
        ly += 16.0;
        let _ = writeln!(
            out,
            r#"<line x1="{lx}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="{color}" stroke-width="1.5" stroke-dasharray="6,4"/><text x="{:.1}" y="{ly:.1}">available</text>"#,
            ly - 4.0,
            lx + 24.0,
            ly - 4.0,
            lx + 30.0
        );
    }
    if !kinds.is_empty() {
        ly += 28.0;
        let _ = writeln!(
            out,
            r#"<text x="{lx}" y="{ly:.1}" font-weight="bold">Conditions</text>"#
        );
        for (status, text) in [("True", "True"), ("False", "False"), ("Unknown", "Unknown")] {
            ly += 18.0;
            let _ = writeln!(
                out,
                r##"<rect x="{lx}" y="{:.1}" width="24" height="12" fill="{}" stroke="#cccccc"/><text x="{:.1}" y="{ly:.1}">{text}</text>"##,
                ly - 10.0,
                status_color(status),
                lx + 30.0
            );
        }
    }
    out.push_str("</g>\n</svg>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(t: f64, rs: &str, spec: i32, available: i32) -> RsSample {
        RsSample {
            t,
            rs: rs.to_owned(),
            spec,
            ready: available,
            available,
        }
    }

    fn timeline() -> Timeline {
        Timeline {
            title: "web <rollout> & more".to_owned(),
            subtitle: "6 replicas".to_owned(),
            samples: vec![
                sample(0.0, "web-a", 6, 0),
                sample(1.0, "web-a", 6, 6),
                sample(2.0, "web-b", 2, 0),
                sample(2.0, "web-a", 5, 5),
                sample(4.0, "web-b", 6, 6),
                sample(5.0, "web-a", 0, 0),
            ],
            rs_labels: vec![("web-a".to_owned(), "web-a (pause:3.10)".to_owned())],
            conditions: vec![
                ConditionChange {
                    t: 0.1,
                    kind: "Progressing".to_owned(),
                    status: "True".to_owned(),
                    reason: "NewReplicaSetCreated".to_owned(),
                },
                ConditionChange {
                    t: 0.2,
                    kind: "Available".to_owned(),
                    status: "False".to_owned(),
                    reason: "MinimumReplicasUnavailable".to_owned(),
                },
                ConditionChange {
                    t: 1.0,
                    kind: "Available".to_owned(),
                    status: "True".to_owned(),
                    reason: "MinimumReplicasAvailable".to_owned(),
                },
            ],
            markers: vec![Marker {
                t: 2.0,
                label: "image → pause:3.9".to_owned(),
            }],
            end: 6.0,
        }
    }

    /// Every `<tag` is closed by `</tag>` or `/>`, in order (a small well-formedness check).
    fn assert_balanced(svg: &str) {
        let mut stack: Vec<String> = Vec::new();
        let mut rest = svg;
        while let Some(start) = rest.find('<') {
            let end = rest[start..].find('>').expect("unterminated tag") + start;
            let tag = &rest[start + 1..end];
            rest = &rest[end + 1..];
            if tag.starts_with('?') || tag.starts_with('!') {
                continue;
            }
            if let Some(name) = tag.strip_prefix('/') {
                assert_eq!(stack.pop().as_deref(), Some(name), "mismatched </{name}>");
            } else if !tag.ends_with('/') {
                let name = tag.split_whitespace().next().unwrap().to_owned();
                stack.push(name);
            }
        }
        assert!(stack.is_empty(), "unclosed: {stack:?}");
    }

    fn polylines(svg: &str) -> Vec<&str> {
        svg.lines().filter(|l| l.starts_with("<polyline")).collect()
    }

    #[test]
    fn document_is_balanced_and_escaped() {
        let svg = render(&timeline());
        assert!(svg.starts_with("<?xml"));
        assert!(svg.contains("<svg xmlns=\"http://www.w3.org/2000/svg\""));
        assert!(svg.trim_end().ends_with("</svg>"));
        assert_balanced(&svg);
        assert!(svg.contains("web &lt;rollout&gt; &amp; more"));
        assert!(!svg.contains("<rollout>"));
    }

    #[test]
    fn one_replicas_and_one_available_line_per_replicaset() {
        let svg = render(&timeline());
        let lines = polylines(&svg);
        assert_eq!(lines.len(), 4, "{lines:#?}");
        for rs in ["web-a", "web-b"] {
            for series in ["replicas", "available"] {
                let needle = format!("data-rs=\"{rs}\" data-series=\"{series}\"");
                assert_eq!(lines.iter().filter(|l| l.contains(&needle)).count(), 1);
            }
        }
        assert!(svg.contains("web-a (pause:3.10)"));
        assert!(
            svg.contains(">web-b<"),
            "unlabelled RS falls back to its name"
        );
    }

    #[test]
    fn axes_are_labelled_and_conditions_drawn() {
        let svg = render(&timeline());
        assert!(svg.contains("time since start (s)"));
        assert!(svg.contains(">replicas</text>"));
        assert!(svg.contains(">Available</text>"));
        assert!(svg.contains(">Progressing</text>"));
        assert!(svg.contains("MinimumReplicasAvailable"));
        assert_eq!(svg.matches("class=\"condition\"").count(), 3);
        assert!(svg.contains("image → pause:3.9"));
    }

    #[test]
    fn time_scale_is_monotone_step_line() {
        let svg = render(&timeline());
        for line in polylines(&svg) {
            let points = line.split("points=\"").nth(1).unwrap();
            let points = points.trim_end_matches("\"/>");
            let xs: Vec<f64> = points
                .split(' ')
                .map(|p| p.split(',').next().unwrap().parse().unwrap())
                .collect();
            assert!(xs.windows(2).all(|w| w[0] <= w[1]), "{xs:?}");
            assert!(xs.iter().all(|&x| (LEFT..=RIGHT).contains(&x)), "{xs:?}");
            // The last point is at the end of the axis.
            assert!((xs.last().unwrap() - RIGHT).abs() < 0.05);
        }
    }

    #[test]
    fn empty_input_still_renders_a_document() {
        let svg = render(&Timeline::default());
        assert_balanced(&svg);
        assert!(polylines(&svg).is_empty());
        assert!(svg.contains("no samples recorded"));
        assert!(svg.contains("time since start (s)"));
        assert!(!svg.contains("NaN") && !svg.contains("inf"));
    }

    #[test]
    fn nice_steps() {
        assert_eq!(nice_step(10.0, 10.0), 1.0);
        assert_eq!(nice_step(37.0, 10.0), 5.0);
        assert_eq!(nice_step(0.0, 10.0), 1.0);
        assert_eq!(fmt_num(2.0), "2");
        assert_eq!(fmt_num(0.5), "0.5");
    }
}

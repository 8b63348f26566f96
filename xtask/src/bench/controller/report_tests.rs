//! Unit tests of `bench controller`'s report: medians, targets, golden tables.

use super::*;

fn run(side: Side, round: usize, wall: f64, cpu: f64, writes: f64) -> PhaseRun {
    PhaseRun {
        side,
        round,
        size: 10,
        phase: Phase::Create,
        wall,
        p50: Some(wall / 2.0),
        p99: Some(wall),
        cpu,
        cpu_system: cpu / 4.0,
        peak_rss: 30 << 20,
        steady_rss: 20 << 20,
        client: [("PUT".to_string(), writes)].into(),
        audit: [
            ("update deployments/status".to_string(), writes),
            ("list pods".to_string(), 1.0),
        ]
        .into(),
        apiserver: Counts::new(),
        synced: None,
        first_write: None,
        idle: None,
        cluster_rss: None,
        machine_busy: Some(0.5),
    }
}

fn settings() -> Settings {
    Settings {
        sizes: vec![10],
        at_rest: Vec::new(),
        qps: (20, 30),
        replicas: 4,
        scale: false,
        setups: Vec::new(),
        rounds: 3,
        settle_secs: 20,
        quick: false,
        nodes: vec![3],
        peak_reset: true,
        cluster_kcm_qps: (200, 400),
        measured: Measured::Deployment,
        incomplete: None,
    }
}

#[test]
fn spreads_ratios_and_verdicts() {
    let s = Spread::of(&[3.0, 1.0, 2.0]).unwrap();
    assert_eq!((s.median, s.min, s.max), (2.0, 1.0, 3.0));
    assert_eq!(Spread::of(&[]), None);
    let u = Spread::of(&[4.0]).unwrap();
    assert_eq!(ratio(Some(s), Some(u)), Some(0.5));
    assert_eq!(ratio(Some(s), None), None);
    assert_eq!(verdict(Some(0.5), 0.5), "met");
    assert_eq!(verdict(Some(0.51), 0.5), "**not met**");
    assert_eq!(verdict(None, 0.5), "-");
    assert_eq!(fmt_spread(Some(s), 1), "2.0 (1.0–3.0)");
    assert_eq!(fmt_spread(Some(u), 1), "4.0");
}

#[test]
fn markdown_has_medians_targets_and_keeps_the_hand_written_part() {
    let runs = vec![
        run(Side::Ours, 0, 10.0, 1.0, 100.0),
        run(Side::Ours, 1, 12.0, 3.0, 110.0),
        run(Side::Ours, 2, 11.0, 2.0, 90.0),
        run(Side::Upstream, 0, 10.0, 4.0, 100.0),
        run(Side::Upstream, 1, 10.0, 4.0, 100.0),
        run(Side::Upstream, 2, 10.0, 4.0, 100.0),
    ];
    let machine = Machine::detect("v1.36.5").finish();
    let existing = format!("# old\nold numbers\n{KEEP_MARKER}\n## Profile\nfinding\n");
    let md = markdown(&runs, &settings(), &machine, &existing);
    assert!(
        md.contains("| CPU-seconds | 2.00 (1.00–3.00) | 4.00 | 0.50 | <= 0.5: met |"),
        "{md}"
    );
    assert!(
        md.contains("| of which in the kernel (stime) | 0.50 (0.25–0.75) | 1.00 | 0.50 |  |"),
        "{md}"
    );
    assert!(
        md.contains("| wall time (s) | 11.0 (10.0–12.0) | 10.0 | 1.10 | <= 1: **not met** |"),
        "{md}"
    );
    assert!(
        md.contains("| update deployments/status | 100 | 100 |"),
        "{md}"
    );
    assert!(md.ends_with("## Profile\nfinding\n"), "{md}");
    assert!(!md.contains("old numbers"));
    assert_eq!(md.matches(KEEP_MARKER).count(), 1);
    let fresh = markdown(&runs, &settings(), &machine, "");
    assert!(fresh.trim_end().ends_with(KEEP_MARKER));
}

#[test]
fn the_tables_are_rendered_as_before() {
    let mut runs = Vec::new();
    for (i, side) in [Side::Ours, Side::Upstream].into_iter().enumerate() {
        for round in 0..2 {
            let k = (i + 1) as f64 + round as f64 / 4.0;
            runs.push(run(side, round, 10.0 * k, 1.5 * k, 100.0 * k));
            let mut at_rest = run(side, round, 3.0 * k, 0.5 * k, 2.0);
            at_rest.phase = Phase::AtRest;
            at_rest.size = 50;
            at_rest.synced = Some(1.25 * k);
            at_rest.first_write = Some(1.5 * k);
            at_rest.idle = Some((2.0 * k, 0.4 * k));
            at_rest.cluster_rss = Some((900 << 20, 120 << 20));
            at_rest.apiserver = [("list pods".to_string(), 3.0)].into();
            runs.push(at_rest);
        }
    }
    let machine = Machine::sample();
    let mut settings = settings();
    settings.at_rest = vec![50];
    settings.setups = vec![Setup {
        total: 50,
        added: 50,
        seconds: 12.5,
    }];
    let golden = |name: &str| {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("src/bench/controller/golden")
            .join(name)
    };
    xtask_report::golden::check(&golden("text.txt"), &text(&runs, &settings));
    xtask_report::golden::check(
        &golden("controller.md"),
        &markdown(&runs, &settings, &machine, ""),
    );
}

#[test]
fn scale_takes_the_issues_targets() {
    let targets = |phase, scale| -> Vec<(&'static str, f64)> {
        metrics(phase, scale)
            .into_iter()
            .filter_map(|m| Some((m.name, m.target?)))
            .collect()
    };
    assert_eq!(
        targets(Phase::Rollout, true),
        [("wall time (s)", 0.8), ("writes (audit log)", 1.0)]
    );
    assert_eq!(
        targets(Phase::AtRest, true),
        [
            ("time to caches synced (s)", 0.5),
            ("CPU-seconds to idle", 0.5),
            ("peak RSS (MiB)", 0.25),
            ("writes (audit log)", 1.0)
        ]
    );
    assert_eq!(
        targets(Phase::AtRest, false),
        [
            ("time to caches synced (s)", 1.0),
            ("CPU-seconds since start", 0.5),
            ("peak RSS (MiB)", 0.3),
            ("writes (audit log)", 1.0)
        ]
    );
}

#[test]
fn scale_runs_name_phase_e_cluster_first_and_count_a_side_never_idle_as_not_met() {
    let mut settings = settings();
    settings.scale = true;
    settings.nodes = vec![1365, 37];
    let mut runs = Vec::new();
    for (side, idle) in [(Side::Ours, None), (Side::Upstream, Some((2.0, 1.0)))] {
        for round in 0..2 {
            let mut r = run(side, round, 3.0, 0.5, 2.0);
            r.phase = Phase::AtRest;
            r.size = 50;
            r.synced = Some(1.0);
            r.first_write = Some(1.0);
            r.idle = idle;
            runs.push(r);
        }
    }
    let md = markdown(&runs, &settings, &Machine::sample(), "");
    assert!(
        md.contains("1365 KWOK nodes of 110 Pods each for phase e, then a fresh cluster with 37"),
        "{md}"
    );
    assert!(
        md.contains("| CPU-seconds to idle | - | 1.00 | inf | <= 0.5: **not met** |"),
        "{md}"
    );
}

#[test]
fn a_long_reason_is_cut_to_one_short_line() {
    assert_eq!(incomplete_reason("a `b`\nc"), "a 'b' c");
    let long = format!(
        "ours exited; log x.log:\n{}received SIGTERM; stopped",
        "WARN é\n".repeat(500)
    );
    let cut = incomplete_reason(&long);
    assert_eq!(cut.chars().count(), REASON_CHARS + 3);
    assert!(cut.starts_with("ours exited; log x.log:"), "{cut}");
    assert!(cut.ends_with("received SIGTERM; stopped"), "{cut}");
    assert!(cut.contains(" … ") && !cut.contains('\n'), "{cut}");
}

#[test]
fn kept_part_is_what_follows_the_marker() {
    assert_eq!(kept_part("no marker"), None);
    assert_eq!(kept_part(&format!("a\n{KEEP_MARKER}\nb\n")), Some("b\n"));
}

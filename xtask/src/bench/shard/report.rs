//! The tables and the markdown of `cargo xtask bench shard`.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use xtask_report::machine::Machine;
use xtask_report::markdown::{Table, fixed};
use xtask_report::stats::{Spread, ratio_of_medians};

use super::{Run, Side};

/// A quantity's spread over the rounds of one gate and side.
fn spread(
    runs: &[Run],
    gate: bool,
    side: Side,
    get: impl Fn(&Run) -> Option<f64>,
) -> Option<Spread> {
    let values: Vec<f64> = runs
        .iter()
        .filter(|r| r.gate == gate && r.side == side)
        .filter_map(get)
        .collect();
    Spread::of(&values)
}

/// One table per gate setting: each quantity's median (range) per side, the ratio and the
/// target. `(rolled, deployments)`: how many of the Deployments each rollout changed; the
/// rollout's target (three times the client budget, at most 0.4x the time) applies only to a
/// rollout of all, since a few can land on one shard.
pub(super) fn report(runs: &[Run], (rolled, deployments): (usize, usize)) -> String {
    let gates: BTreeSet<bool> = runs.iter().map(|r| r.gate).collect();
    let mut out = String::new();
    type Get = fn(&Run) -> Option<f64>;
    let (rollout_row, rollout_target) = if rolled == deployments {
        ("rollout of every Deployment (s)".to_owned(), Some(0.4))
    } else {
        (format!("rollout of {rolled} Deployments (s)"), None)
    };
    let rows: [(&str, Get, usize, Option<f64>); 7] = [
        ("ready (s)", |r| Some(r.ready), 1, None),
        (
            "sent by kube-apiserver to ready, all replicas (MiB)",
            |r| Some(r.bytes_to_ready / 1048576.0),
            1,
            None,
        ),
        (
            "writes to the workload by anyone before ready",
            |r| Some(r.writes_to_ready),
            0,
            None,
        ),
        (&rollout_row, |r| Some(r.rollout), 1, rollout_target),
        (
            "peak RSS per replica, largest (MiB)",
            |r| Some(r.max_peak_rss() / 1048576.0),
            1,
            Some(0.4),
        ),
        (
            "CPU-seconds per replica, largest",
            |r| Some(r.max_cpu()),
            2,
            None,
        ),
        (
            "CPU-seconds, all replicas",
            |r| Some(r.cpu.iter().sum()),
            2,
            None,
        ),
    ];
    for gate in gates.iter().rev() {
        let _ = writeln!(
            out,
            "### ShardedListAndWatch {}\n",
            if *gate {
                "on"
            } else {
                "off (client-side filtering)"
            }
        );
        let mut t = Table::new()
            .left("")
            .right(Side::Single.title())
            .right(Side::Sharded.title())
            .right("ratio")
            .left("target");
        for (name, get, decimals, target) in rows {
            let single = spread(runs, *gate, Side::Single, get);
            let sharded = spread(runs, *gate, Side::Sharded, get);
            let ratio = ratio_of_medians(sharded, single);
            let verdict = match (target, ratio) {
                (Some(t), Some(r)) => format!(
                    "<= {} {}",
                    fixed(t, 1),
                    if r <= t { "met" } else { "**not met**" }
                ),
                _ => String::new(),
            };
            t.row([
                name.to_owned(),
                Spread::display(single, decimals),
                Spread::display(sharded, decimals),
                ratio.map(|r| fixed(r, 2)).unwrap_or_else(|| "-".into()),
                verdict,
            ]);
        }
        let handover = spread(runs, *gate, Side::Sharded, |r| r.handover);
        let met = handover.is_some_and(|h| h.max <= 20.0);
        t.row([
            "handover after kill -9 (s)".to_owned(),
            "-".to_owned(),
            Spread::display(handover, 1),
            "-".to_owned(),
            format!(
                "<= 20 (lease 15 s + 5 s) {}",
                if met { "met" } else { "**not met**" }
            ),
        ]);
        out.push_str(&t.markdown());
        out.push('\n');
    }
    out
}

/// The line after which docs/benchmarks/shard.md is written by hand; a new run keeps it.
const KEEP_MARKER: &str =
    "<!-- Written by hand from here on; `cargo xtask bench shard` keeps this part. -->";

pub(super) fn markdown(settings: &str, tables: &str, machine: &Machine, existing: &str) -> String {
    let kept = existing.find(KEEP_MARKER).map_or_else(
        || format!("{KEEP_MARKER}\n"),
        |at| existing[at..].to_owned(),
    );
    format!(
        "# Benchmark: one replica beside three shards\n\n\
         Written by `cargo xtask bench shard` ({started}); see `xtask/src/bench/shard/mod.rs` for \
         what each step does. {settings}. Each cell: the median over the rounds, the range in \
         parentheses; ratio = shards / single replica.\n\n{tables}\n## Machine\n\n{machine}\n{kept}",
        started = machine.started(),
        machine = machine.table(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(gate: bool, side: Side, ready: f64, rollout: f64, rss_mib: f64) -> Run {
        Run {
            gate,
            side,
            ready,
            rollout,
            peak_rss: vec![rss_mib * 1048576.0; side.replicas()],
            cpu: vec![1.5; side.replicas()],
            handover: (side == Side::Sharded).then_some(18.5),
            bytes_to_ready: 2.0 * 1048576.0,
            writes_to_ready: 0.0,
        }
    }

    #[test]
    fn the_report_gives_ratios_and_verdicts_per_gate() {
        let runs = vec![
            run(true, Side::Single, 4.0, 100.0, 100.0),
            run(true, Side::Sharded, 6.0, 35.0, 30.0),
            run(true, Side::Single, 4.0, 110.0, 100.0),
            run(true, Side::Sharded, 6.0, 45.0, 50.0),
        ];
        let text = report(&runs, (300, 300));
        assert!(text.contains("### ShardedListAndWatch on"), "{text}");
        assert!(!text.contains("off"), "{text}");
        // Rollout: 40 / 105.
        assert!(
            text.contains(
                "| rollout of every Deployment (s) | 105.0 (100.0–110.0) | 40.0 (35.0–45.0) | 0.38 | <= 0.4 met |"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "| sent by kube-apiserver to ready, all replicas (MiB) | 2.0 | 2.0 | 1.00 |  |"
            ),
            "{text}"
        );
        // A rollout of some: no target.
        let some = report(&runs, (30, 300));
        assert!(
            some.contains("| rollout of 30 Deployments (s) | 105.0 (100.0–110.0) | 40.0 (35.0–45.0) | 0.38 |  |"),
            "{some}"
        );
        // RSS: 40 / 100 = 0.40, met at the bound.
        assert!(text.contains("| 0.40 | <= 0.4 met |"), "{text}");
        assert!(
            text.contains("18.5 | - | <= 20 (lease 15 s + 5 s) met |"),
            "{text}"
        );
    }

    #[test]
    fn a_rerun_keeps_the_hand_written_part() {
        let machine = Machine::sample();
        let first = markdown("s", "t", &machine, "");
        assert!(first.ends_with(&format!("{KEEP_MARKER}\n")), "{first}");
        let edited = format!("{first}Analysis by hand.\n");
        let second = markdown("s2", "t2", &machine, &edited);
        assert!(second.contains("Analysis by hand."), "{second}");
        assert!(second.contains("s2"), "{second}");
    }
}

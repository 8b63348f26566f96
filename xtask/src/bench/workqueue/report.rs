//! Medians, the comparison table, and docs/benchmarks/workqueue.md.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::Result;

use super::{LATENESS_ITEMS, LATENESS_SPREAD, Measurement, TOTAL_ADDS, WORK_ROUNDS};
use xtask_report::machine::{self, command_output};
use xtask_report::markdown::Table;

/// What a row is held to.
#[derive(Clone, Copy)]
pub(super) enum Goal {
    /// ours / client-go at least this (higher is better).
    RatioAtLeast(f64),
    /// ours / client-go at most this (lower is better).
    RatioAtMost(f64),
    /// ours at most this, in the row's unit.
    ValueAtMost(f64),
    /// Reported only.
    None,
}

impl Goal {
    fn describe(self, unit: &str) -> String {
        match self {
            Goal::RatioAtLeast(ratio) => format!("≥ {ratio:.1}×"),
            Goal::RatioAtMost(ratio) => format!("≤ {ratio}×"),
            Goal::ValueAtMost(value) => format!("≤ {value} {unit}"),
            Goal::None => "—".into(),
        }
    }
}

/// One line of the comparison: medians over the repetitions.
pub(super) struct Row {
    pub(super) workload: String,
    pub(super) unit: &'static str,
    pub(super) client_go: f64,
    pub(super) kctrl: f64,
    /// Each run's value, in repetition order (run i of both programs ran back to back).
    pub(super) client_go_runs: Vec<f64>,
    pub(super) kctrl_runs: Vec<f64>,
    pub(super) goal: Goal,
    /// Throughput rows must also reach this ratio in every single run (no slow mode).
    pub(super) every_run_at_least: Option<f64>,
    /// Items actually processed per round (throughput rows): collapsing depends on timing.
    pub(super) processed: Option<(f64, f64)>,
    /// kctrl with producers calling `add_ref(&key)` (throughput rows), for reference.
    pub(super) kctrl_add_ref: Option<f64>,
    /// kctrl with `&'static str` items instead of `Arc<str>` (throughput rows), for reference.
    pub(super) kctrl_static_str: Option<f64>,
}

impl Row {
    pub(super) fn ratio(&self) -> f64 {
        self.kctrl / self.client_go
    }

    /// kctrl / client-go of each repetition.
    pub(super) fn run_ratios(&self) -> Vec<f64> {
        self.client_go_runs
            .iter()
            .zip(&self.kctrl_runs)
            .map(|(go, ours)| ours / go)
            .collect()
    }

    /// (lowest, highest) per-run ratio.
    pub(super) fn ratio_range(&self) -> (f64, f64) {
        xtask_report::stats::min_max(&self.run_ratios())
    }

    fn every_run_met(&self) -> bool {
        self.every_run_at_least
            .is_none_or(|min| self.ratio_range().0 >= min)
    }

    pub(super) fn met(&self) -> Option<bool> {
        match self.goal {
            Goal::RatioAtLeast(min) => Some(self.ratio() >= min && self.every_run_met()),
            Goal::RatioAtMost(max) => Some(self.ratio() <= max),
            Goal::ValueAtMost(max) => Some(self.kctrl <= max),
            Goal::None => None,
        }
    }

    fn verdict(&self) -> &'static str {
        match self.met() {
            Some(true) => "yes",
            Some(false) => "**no**",
            None => "",
        }
    }
}

/// The median of `values`; NaN for none.
fn median(values: Vec<f64>) -> f64 {
    xtask_report::stats::median_or_nan(&values)
}

fn keys_label(keys: usize, adds: usize) -> String {
    let short = |n: usize| match n {
        n if n >= 1_000 && n % 1_000 == 0 => format!("{}k", n / 1_000),
        n => n.to_string(),
    };
    if keys == adds {
        format!("{} distinct keys", short(keys))
    } else {
        format!("{} adds over {} keys", short(adds), short(keys))
    }
}

/// Medians per workload and implementation, in a fixed row order.
pub(super) fn summarize(measurements: &[Measurement]) -> Vec<Row> {
    let pick = |implementation: &str,
                filter: &dyn Fn(&Measurement) -> bool,
                value: &dyn Fn(&Measurement) -> f64| {
        median(
            measurements
                .iter()
                .filter(|m| m.implementation == implementation && filter(m))
                .map(value)
                .collect(),
        )
    };
    let runs = |implementation: &str,
                filter: &dyn Fn(&Measurement) -> bool,
                value: &dyn Fn(&Measurement) -> f64| {
        measurements
            .iter()
            .filter(|m| m.implementation == implementation && filter(m))
            .map(value)
            .collect::<Vec<f64>>()
    };
    let mut rows = Vec::new();
    for (producers, consumers) in super::THREAD_MIXES {
        for (keys, adds) in super::KEY_MIXES {
            let same_shape = move |m: &Measurement| {
                m.producers == producers
                    && m.consumers == consumers
                    && m.keys == keys
                    && m.adds == adds
            };
            let filter = move |m: &Measurement| m.workload == "throughput" && same_shape(m);
            let static_str =
                move |m: &Measurement| m.workload == "throughput_static_str" && same_shape(m);
            let add_ref =
                move |m: &Measurement| m.workload == "throughput_add_ref" && same_shape(m);
            let per_round = |m: &Measurement| m.processed as f64 / m.rounds.max(1) as f64;
            // Uncontended rows ≥ 2×, contended distinct-key rows ≥ 1.5×, contended
            // duplication rows ≥ 1×; every row ≥ 1× in every run.
            let goal = if producers == 1 && consumers == 1 {
                2.0
            } else if keys == adds {
                1.5
            } else {
                1.0
            };
            rows.push(Row {
                workload: format!(
                    "add+get+done, {producers}P/{consumers}C, {}",
                    keys_label(keys, adds)
                ),
                unit: "M adds/s",
                client_go: pick("client-go", &filter, &|m| m.ops_per_sec / 1e6),
                kctrl: pick("kctrl", &filter, &|m| m.ops_per_sec / 1e6),
                client_go_runs: runs("client-go", &filter, &|m| m.ops_per_sec / 1e6),
                kctrl_runs: runs("kctrl", &filter, &|m| m.ops_per_sec / 1e6),
                goal: Goal::RatioAtLeast(goal),
                every_run_at_least: Some(1.0),
                processed: Some((
                    pick("client-go", &filter, &per_round),
                    pick("kctrl", &filter, &per_round),
                )),
                kctrl_add_ref: Some(pick("kctrl", &add_ref, &|m| m.ops_per_sec / 1e6)),
                kctrl_static_str: Some(pick("kctrl", &static_str, &|m| m.ops_per_sec / 1e6)),
            });
        }
    }
    let controller = |m: &Measurement| m.workload == "controller";
    let (producers, consumers, keys, adds, _) = super::CONTROLLER_SHAPE;
    rows.push(Row {
        workload: format!(
            "controller shape: {producers}P/{consumers}C, {}, producers await between adds, \
             consumers work per item",
            keys_label(keys, adds)
        ),
        unit: "M adds/s",
        client_go: pick("client-go", &controller, &|m| m.ops_per_sec / 1e6),
        kctrl: pick("kctrl", &controller, &|m| m.ops_per_sec / 1e6),
        client_go_runs: runs("client-go", &controller, &|m| m.ops_per_sec / 1e6),
        kctrl_runs: runs("kctrl", &controller, &|m| m.ops_per_sec / 1e6),
        goal: Goal::RatioAtLeast(1.0),
        every_run_at_least: Some(1.0),
        processed: Some((
            pick("client-go", &controller, &|m| {
                m.processed as f64 / m.rounds.max(1) as f64
            }),
            pick("kctrl", &controller, &|m| {
                m.processed as f64 / m.rounds.max(1) as f64
            }),
        )),
        kctrl_add_ref: None,
        kctrl_static_str: None,
    });
    let add_after = |m: &Measurement| m.workload == "add_after";
    rows.push(Row {
        workload: "add_after, random delays ≤ 10 min".into(),
        unit: "ns/op",
        client_go: pick("client-go", &add_after, &|m| m.ns_per_op),
        kctrl: pick("kctrl", &add_after, &|m| m.ns_per_op),
        client_go_runs: runs("client-go", &add_after, &|m| m.ns_per_op),
        kctrl_runs: runs("kctrl", &add_after, &|m| m.ns_per_op),
        every_run_at_least: None,
        goal: Goal::RatioAtMost(0.5),
        processed: None,
        kctrl_add_ref: None,
        kctrl_static_str: None,
    });
    let lateness = |m: &Measurement| m.workload == "timer_lateness";
    rows.push(Row {
        workload: "timer lateness p50".into(),
        unit: "µs",
        client_go: pick("client-go", &lateness, &|m| m.p50_ns as f64 / 1e3),
        kctrl: pick("kctrl", &lateness, &|m| m.p50_ns as f64 / 1e3),
        client_go_runs: runs("client-go", &lateness, &|m| m.p50_ns as f64 / 1e3),
        kctrl_runs: runs("kctrl", &lateness, &|m| m.p50_ns as f64 / 1e3),
        every_run_at_least: None,
        goal: Goal::None,
        processed: None,
        kctrl_add_ref: None,
        kctrl_static_str: None,
    });
    rows.push(Row {
        workload: "timer lateness p99".into(),
        unit: "µs",
        client_go: pick("client-go", &lateness, &|m| m.p99_ns as f64 / 1e3),
        kctrl: pick("kctrl", &lateness, &|m| m.p99_ns as f64 / 1e3),
        client_go_runs: runs("client-go", &lateness, &|m| m.p99_ns as f64 / 1e3),
        kctrl_runs: runs("kctrl", &lateness, &|m| m.p99_ns as f64 / 1e3),
        every_run_at_least: None,
        goal: Goal::ValueAtMost(1000.0),
        processed: None,
        kctrl_add_ref: None,
        kctrl_static_str: None,
    });
    rows
}

fn fmt_value(value: f64) -> String {
    if value >= 100.0 {
        format!("{value:.0}")
    } else if value >= 10.0 {
        format!("{value:.1}")
    } else {
        format!("{value:.2}")
    }
}

/// The table printed on the terminal.
pub(super) fn text_table(rows: &[Row]) -> String {
    let mut t = Table::new()
        .left("workload")
        .width(46)
        .right("client-go")
        .width(10)
        .right("kctrl")
        .width(10)
        .right("unit")
        .width(10)
        .right("ratio")
        .width(8)
        .left("target")
        .width(10)
        .gap(2)
        .left("met")
        .width(4)
        .right("add_ref")
        .width(12);
    for row in rows {
        t.row([
            row.workload.clone(),
            fmt_value(row.client_go),
            fmt_value(row.kctrl),
            row.unit.to_owned(),
            format!("{:.2}×", row.ratio()),
            row.goal.describe(row.unit),
            row.verdict().trim_matches('*').to_owned(),
            row.kctrl_add_ref.map(fmt_value).unwrap_or_default(),
        ]);
    }
    t.text()
}

/// Facts about the machine, for the report.
pub(super) struct Machine {
    cpus: usize,
    cpu_model: String,
    os: String,
    rustc: String,
    go: String,
    client_go: String,
    date: String,
    load_average: String,
}

impl Machine {
    pub(super) fn detect(root: &Path, go: String) -> Result<Self> {
        let cpu_model = machine::cpu_model();
        let go_mod = std::fs::read_to_string(root.join("bench/workqueue-go/go.mod"))?;
        let client_go = go_mod
            .lines()
            .find_map(|line| {
                let line = line.trim();
                line.strip_prefix("require ")
                    .unwrap_or(line)
                    .strip_prefix("k8s.io/client-go ")
            })
            .map(|version| {
                version
                    .split_whitespace()
                    .next()
                    .unwrap_or(version)
                    .to_string()
            })
            .unwrap_or_else(|| "unknown".into());
        Ok(Self {
            cpus: std::thread::available_parallelism().map_or(0, |n| n.get()),
            cpu_model,
            os: command_output("uname", &["-sr"]),
            rustc: command_output("rustc", &["--version"]),
            go,
            client_go,
            date: command_output("date", &["-u", "+%Y-%m-%d"]),
            load_average: machine::load_average(),
        })
    }
}

/// docs/benchmarks/workqueue.md.
pub(super) fn markdown(
    rows: &[Row],
    machine: &Machine,
    loads: &[String],
    reps: usize,
    quick: bool,
    background: usize,
) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# Benchmark: kctrl-workqueue vs client-go workqueue{}\n",
        if background > 0 { ", busy machine" } else { "" }
    );
    let _ = writeln!(
        out,
        "Generated by `cargo xtask bench workqueue{}{}` on {}. Do not edit by hand; rerun the command.\n",
        if quick { " --quick" } else { "" },
        if background > 0 {
            format!(" --background {background}")
        } else {
            String::new()
        },
        machine.date
    );
    if background > 0 {
        let _ = writeln!(
            out,
            "> **Busy machine**: {background} busy-looping processes at the lowest priority (`nice 19`) ran throughout, so no CPU ever idled; each program still got nearly all the CPU time it asked for. The same workloads on a quiet machine: [workqueue.md](workqueue.md).\n"
        );
    }
    if quick {
        let _ = writeln!(
            out,
            "> **Quick run**: workloads are 10× smaller and there are fewer repetitions; these numbers are a smoke test, not a result.\n"
        );
    }
    let _ = writeln!(out, "## Results\n");
    let _ = writeln!(
        out,
        "Medians of {reps} alternating runs of each program, with the spread (lowest–highest run) \
         in brackets. Ratio = kctrl / client-go of the medians; *per-run ratios* pairs run i of \
         each program (they ran back to back) and gives the lowest and highest. A throughput row \
         meets its target only if the median ratio reaches it **and** every run is ≥ 1.0×.\n"
    );
    let mut results = Table::new()
        .left("workload")
        .left("unit")
        .right("client-go")
        .right("kctrl")
        .right("ratio")
        .right("per-run ratios")
        .left("target")
        .left("met");
    let spread = |values: &[f64]| {
        let low = values.iter().copied().fold(f64::INFINITY, f64::min);
        let high = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        format!("[{}–{}]", fmt_value(low), fmt_value(high))
    };
    for row in rows {
        let (low, high) = row.ratio_range();
        results.row([
            row.workload.clone(),
            row.unit.to_owned(),
            format!(
                "{} {}",
                fmt_value(row.client_go),
                spread(&row.client_go_runs)
            ),
            format!("{} {}", fmt_value(row.kctrl), spread(&row.kctrl_runs)),
            format!("{:.2}×", row.ratio()),
            format!("{low:.2}–{high:.2}×"),
            format!(
                "{}{}",
                row.goal.describe(row.unit),
                if row.every_run_at_least.is_some() {
                    ", each run ≥ 1×"
                } else {
                    ""
                }
            ),
            row.verdict().to_owned(),
        ]);
    }
    out.push_str(&results.markdown());
    let _ = writeln!(
        out,
        "\nMore about the throughput rows. *Processed*: items handed out per round (adds of a key \
         that is already waiting collapse, so a queue whose consumers keep up processes *more* items \
         for the same adds). *add_ref*: the same workload with producers calling \
         `queue.add_ref(&key)`, which clones a key only when the queue keeps it. *&'static str*: \
         `add` with items that, like Go strings, need no reference counting. Both are for \
         reference; the results above use `add(key.clone())` with `Arc<str>` keys, the direct \
         counterpart of client-go's `Add(key)`.\n"
    );
    let mut throughput = Table::new()
        .left("workload")
        .right("processed, client-go")
        .right("processed, kctrl")
        .right("kctrl add_ref, M adds/s")
        .right("vs client-go")
        .right("kctrl `&'static str`, M adds/s")
        .right("vs client-go");
    for row in rows {
        if let (Some((go, ours)), Some(add_ref), Some(static_str)) =
            (row.processed, row.kctrl_add_ref, row.kctrl_static_str)
        {
            throughput.row([
                row.workload.clone(),
                format!("{go:.0}"),
                format!("{ours:.0}"),
                fmt_value(add_ref),
                format!("{:.2}×", add_ref / row.client_go),
                fmt_value(static_str),
                format!("{:.2}×", static_str / row.client_go),
            ]);
        }
    }
    out.push_str(&throughput.markdown());
    let missed: Vec<&Row> = rows.iter().filter(|row| row.met() == Some(false)).collect();
    let _ = writeln!(out, "\n## Targets\n");
    if missed.is_empty() {
        let _ = writeln!(out, "All targets met in this run.");
    } else {
        for row in missed {
            let by = match row.goal {
                Goal::RatioAtLeast(min) => format!(
                    "median {:.2}×, runs {:.2}–{:.2}×, instead of ≥ {min}× (and every run ≥ 1×)",
                    row.ratio(),
                    row.ratio_range().0,
                    row.ratio_range().1
                ),
                Goal::RatioAtMost(max) => format!("{:.2}× instead of ≤ {max}×", row.ratio()),
                Goal::ValueAtMost(max) => {
                    format!(
                        "{} {} instead of ≤ {max} {}",
                        fmt_value(row.kctrl),
                        row.unit,
                        row.unit
                    )
                }
                Goal::None => continue,
            };
            let _ = writeln!(out, "- Missed: {}: {by}.", row.workload);
        }
        let _ = writeln!(out, "\nSee *Analysis* below for why.");
    }
    let _ = writeln!(out, "\n## Machine\n");
    let _ = writeln!(out, "- CPUs: {} ({})", machine.cpus, machine.cpu_model);
    let _ = writeln!(out, "- OS: {}", machine.os);
    let _ = writeln!(
        out,
        "- Rust: {} (release profile), Tokio multi-thread runtime with {} workers",
        machine.rustc, machine.cpus
    );
    let _ = writeln!(
        out,
        "- Go: {}, k8s.io/client-go {} (GOMAXPROCS = {})",
        machine.go, machine.client_go, machine.cpus
    );
    let _ = writeln!(
        out,
        "- The machine is shared: other builds may run at the same time (load average at the start of the run: {}). The two programs alternate, so such noise hits both.",
        machine.load_average
    );
    let _ = writeln!(
        out,
        "- Load average (1, 5, 15 min) at the start of each program's run: {}.",
        loads.join("; ")
    );
    out.push_str(&method_section());
    out.push_str(super::ANALYSIS);
    out
}

fn method_section() -> String {
    format!(
        "\n## Method\n\n\
Two programs run identical workloads and print JSON lines: `bench/workqueue-go` (client-go's \
`util/workqueue`, typed `string` items) and the hidden `cargo xtask bench workqueue-peer` in a \
release build of xtask (kctrl-workqueue, `Arc<str>` items: both are immutable shared strings). \
The driver runs them alternately and takes the median of each number. Keys look like \
`namespace-N/object-M`. Neither queue has metrics (unnamed queues), as in client-go's own benchmarks.\n\n\
- **add+get+done throughput**: a fresh queue per round; C consumer tasks/goroutines loop \
  `get` → `done` until the queue reports shutdown; P producers add items `i = p, p+P, …` with key \
  `i mod keys`; when the producers finish the queue is shut down and the consumers drain it. Rounds \
  repeat until {TOTAL_ADDS} adds in total; the number is adds per second of wall time including \
  task start-up and the drain. \"1k/100k distinct keys\" rounds add each key once; \"100k adds over \
  100 keys\" is heavy duplication, where most adds collapse into an item already waiting.\n\
- **controller shape**: like add+get+done, but each producer yields to the scheduler after every \
  add (`tokio::task::yield_now().await` / `runtime.Gosched()`), as informer handlers await their \
  next event, and each consumer hashes the key ({WORK_ROUNDS} FNV-1a passes, identical code in \
  both peers) before `done`, a stand-in for a little reconcile work. {CONTROLLER_TOTAL} adds in \
  rounds of {CONTROLLER_ADDS} over {CONTROLLER_KEYS} keys.\n\
- **add_after cost**: 200,000 `add_after` calls on distinct keys with random delays in (0, 10 min] \
  (none fires), like client-go's `BenchmarkDelayingQueue_AddAfter`; total time / calls.\n\
- **timer lateness**: {LATENESS_ITEMS} distinct keys added with `add_after` and delays of \
  1 ms + uniform [0, {} ms); one consumer records, for each item, the time from its ready time \
  (taken just before the call) to when `get` returned it. p50 and p99 over all items of a run.\n",
        LATENESS_SPREAD.as_millis(),
        CONTROLLER_TOTAL = super::CONTROLLER_SHAPE.4,
        CONTROLLER_ADDS = super::CONTROLLER_SHAPE.3,
        CONTROLLER_KEYS = super::CONTROLLER_SHAPE.2,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(workload: &str, unit: &'static str, go: f64, ours: f64, goal: Goal) -> Row {
        Row {
            workload: workload.to_owned(),
            unit,
            client_go: go,
            kctrl: ours,
            client_go_runs: vec![go * 0.9, go, go * 1.1],
            kctrl_runs: vec![ours * 0.95, ours, ours * 1.2],
            goal,
            every_run_at_least: None,
            processed: None,
            kctrl_add_ref: None,
            kctrl_static_str: None,
        }
    }

    fn rows() -> Vec<Row> {
        let mut throughput = row(
            "add+get+done, 2P/2C, 1k distinct keys",
            "M adds/s",
            3.2,
            3.5,
            Goal::RatioAtLeast(1.0),
        );
        throughput.every_run_at_least = Some(1.0);
        throughput.processed = Some((1000.0, 998.0));
        throughput.kctrl_add_ref = Some(3.61);
        throughput.kctrl_static_str = Some(4.02);
        vec![
            throughput,
            row(
                "add_after cost",
                "µs/call",
                1.5,
                0.7,
                Goal::RatioAtMost(0.5),
            ),
            row(
                "timer lateness p99",
                "ms",
                2.0,
                1.25,
                Goal::ValueAtMost(2.0),
            ),
            row("timer lateness p50", "ms", 0.5, 123.4, Goal::None),
        ]
    }

    fn golden(name: &str) -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("src/bench/workqueue/golden")
            .join(name)
    }

    #[test]
    fn the_tables_are_rendered_as_before() {
        let rows = rows();
        xtask_report::golden::check(&golden("text.txt"), &text_table(&rows));
        let machine = Machine {
            cpus: 2,
            cpu_model: "Test CPU".into(),
            os: "Linux 6.1".into(),
            rustc: "rustc 1.90.0".into(),
            go: "go1.25".into(),
            client_go: "v0.37.2".into(),
            date: "2026-11-28".into(),
            load_average: "0.50 0.40 0.30".into(),
        };
        let loads = ["client-go: 0.5".to_owned(), "kctrl: 0.6".to_owned()];
        let md = markdown(&rows, &machine, &loads, 3, false, 0);
        // Up to the method and the analysis, which are prose.
        let tables = md.split("\n## Method").next().unwrap();
        xtask_report::golden::check(&golden("workqueue.md"), tables);
    }
}

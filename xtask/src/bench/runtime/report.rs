//! Tables of `cargo xtask bench runtime`: medians with min–max per side, the ratio
//! kctrl-runtime / kube-runtime and the targets, for the terminal and for
//! docs/benchmarks/runtime.md.

use std::fmt::Write as _;

use super::{Run, Side};
use xtask_report::markdown::Table;

/// What the run was asked to do (for the markdown).
pub(super) struct Settings {
    pub(super) objects: usize,
    pub(super) reps: usize,
    pub(super) concurrency: usize,
    pub(super) quick: bool,
    /// How both peers build their controllers.
    pub(super) configuration: kctrl_bench_runtime::Configuration,
}

/// The machine facts of the markdown.
pub(super) struct Machine {
    cpus: usize,
    cpu_model: String,
    memory: String,
    os: String,
    rustc: String,
    kubernetes: String,
    date: String,
}

impl Machine {
    pub(super) fn detect(kubernetes: &str) -> Self {
        use xtask_report::machine::{command_output, cpu_model, memory};
        Machine {
            cpus: std::thread::available_parallelism().map_or(0, |n| n.get()),
            cpu_model: cpu_model(),
            memory: memory(),
            os: command_output("uname", &["-sr"]),
            rustc: command_output("rustc", &["--version"]),
            kubernetes: kubernetes.to_owned(),
            date: command_output("date", &["-u", "+%Y-%m-%d %H:%M UTC"]),
        }
    }
}

/// Which way is better, and the target for ours / kube-runtime's.
#[derive(Clone, Copy)]
enum Target {
    /// Higher is better; ratio at least this.
    AtLeast(f64),
    /// Lower is better; ratio at most this.
    AtMost(f64),
    /// Reported only.
    None,
}

/// One metric over the runs of both sides.
pub(super) struct Row {
    name: &'static str,
    unit: &'static str,
    target: Target,
    /// Per side: (median, min, max).
    kctrl: (f64, f64, f64),
    kube_rs: (f64, f64, f64),
}

impl Row {
    fn ratio(&self) -> f64 {
        self.kctrl.0 / self.kube_rs.0
    }

    fn verdict(&self) -> &'static str {
        let ratio = self.ratio();
        match self.target {
            Target::AtLeast(t) if ratio >= t => "met",
            Target::AtMost(t) if ratio <= t => "met",
            Target::AtLeast(_) | Target::AtMost(_) => "**missed**",
            Target::None => "",
        }
    }

    fn target_text(&self) -> String {
        match self.target {
            Target::AtLeast(t) => format!(">= {t:.1}x"),
            Target::AtMost(t) => format!("<= {t:.1}x"),
            Target::None => String::new(),
        }
    }
}

/// (median, min, max); NaN for no values.
fn stats(mut values: Vec<f64>) -> (f64, f64, f64) {
    values.retain(|v| v.is_finite());
    if values.is_empty() {
        return (f64::NAN, f64::NAN, f64::NAN);
    }
    values.sort_by(f64::total_cmp);
    let n = values.len();
    let median = if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    };
    (median, values[0], values[n - 1])
}

fn is_write(key: &str) -> bool {
    matches!(
        key.split(' ').next().unwrap_or(""),
        "create" | "update" | "patch" | "delete" | "deletecollection"
    )
}

/// The metrics of the table, in order. The memory targets depend on the configuration: in
/// `defaults` ours keeps a listable cache of the ConfigMaps that kube-runtime does not keep,
/// so its whole peak is held to 1.0x; in `lean` the anonymous memory (what the caches cost) is
/// held to 0.7x, both caching the same objects: the Widgets and the ConfigMaps' metadata.
pub(super) fn summarize(
    runs: &[Run],
    configuration: kctrl_bench_runtime::Configuration,
) -> Vec<Row> {
    type Metric = (&'static str, &'static str, Target, fn(&Run) -> f64);
    const MIB: f64 = 1024.0 * 1024.0;
    let lean = configuration == kctrl_bench_runtime::Configuration::Lean;
    let (peak_target, anon_target) = if lean {
        (Target::None, Target::AtMost(0.7))
    } else {
        (Target::AtMost(1.0), Target::None)
    };
    let total = |r: &Run| r.create_s + r.change_s;
    let metrics: [Metric; 16] = [
        (
            "create: wall time to all converged",
            "s",
            Target::AtMost(1.0),
            |r| r.create_s,
        ),
        (
            "create: objects converged per second",
            "1/s",
            Target::AtLeast(1.0),
            |r| r.objects as f64 / r.create_s,
        ),
        (
            "change: wall time to all converged",
            "s",
            Target::AtMost(1.0),
            |r| r.change_s,
        ),
        (
            "change: objects converged per second",
            "1/s",
            Target::AtLeast(1.0),
            |r| r.objects as f64 / r.change_s,
        ),
        ("reconciles run", "", Target::None, |r| r.reconciles as f64),
        (
            "reconciles per second (create + change)",
            "1/s",
            Target::None,
            |r| r.reconciles as f64 / (r.create_s + r.change_s),
        ),
        ("CPU-seconds (create + change)", "s", Target::None, |r| {
            r.cpu_s
        }),
        (
            "CPU-ms per converged object change",
            "ms",
            Target::AtMost(0.7),
            |r| 1000.0 * r.cpu_s / (2 * r.objects) as f64,
        ),
        ("CPU-ms per reconcile run", "ms", Target::None, |r| {
            1000.0 * r.cpu_s / r.reconciles.max(1) as f64
        }),
        ("peak RSS (VmHWM)", "MiB", peak_target, |r| {
            r.peak_rss as f64 / MIB
        }),
        (
            "RSS anonymous at the end (heap, stacks)",
            "MiB",
            anon_target,
            |r| r.rss_anon as f64 / MIB,
        ),
        (
            "RSS file-backed at the end (binary, libraries)",
            "MiB",
            Target::None,
            |r| r.rss_file as f64 / MIB,
        ),
        (
            "anonymous memory per Widget at the end",
            "KiB",
            Target::None,
            |r| r.rss_anon as f64 / 1024.0 / r.objects.max(1) as f64,
        ),
        ("API requests", "", Target::None, |r| {
            r.requests.values().sum()
        }),
        ("API writes", "", Target::None, |r| {
            r.requests
                .iter()
                .filter(|(k, _)| is_write(k))
                .map(|(_, v)| v)
                .sum()
        }),
        ("failed reconciles", "", Target::None, |r| r.failures as f64),
    ];
    let mut rows: Vec<Row> = metrics
        .iter()
        .map(|&(name, unit, target, f)| {
            let of = |side: Side| {
                stats(
                    runs.iter()
                        .filter(|r| r.side == side)
                        .map(f)
                        .collect::<Vec<_>>(),
                )
            };
            Row {
                name,
                unit,
                target,
                kctrl: of(Side::Kctrl),
                kube_rs: of(Side::KubeRs),
            }
        })
        .collect();
    // Total wall time after the two phases.
    let of = |side: Side| {
        stats(
            runs.iter()
                .filter(|r| r.side == side)
                .map(total)
                .collect::<Vec<_>>(),
        )
    };
    rows.insert(
        4,
        Row {
            name: "create + change: wall time",
            unit: "s",
            target: Target::AtMost(1.0),
            kctrl: of(Side::Kctrl),
            kube_rs: of(Side::KubeRs),
        },
    );
    rows
}

fn number(v: f64) -> String {
    if !v.is_finite() {
        "–".into()
    } else if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

fn cell((median, min, max): (f64, f64, f64)) -> String {
    if min == max {
        number(median)
    } else {
        format!("{} ({}–{})", number(median), number(min), number(max))
    }
}

fn ratio_text(ratio: f64) -> String {
    if ratio.is_finite() {
        format!("{ratio:.2}x")
    } else {
        "–".into()
    }
}

fn label(row: &Row) -> String {
    if row.unit.is_empty() {
        row.name.to_owned()
    } else {
        format!("{} ({})", row.name, row.unit)
    }
}

/// The results: one line per metric, the verdict as markdown (`**missed**`) or plain.
fn results(rows: &[Row], plain: bool) -> Table {
    let mut t = Table::new()
        .left("metric")
        .width(48)
        .right("kctrl-runtime")
        .width(24)
        .right("kube-runtime")
        .width(24)
        .right("ratio")
        .width(7)
        .right("target")
        .width(8)
        .left("")
        .width(0);
    for row in rows {
        let verdict = row.verdict();
        t.row([
            label(row),
            cell(row.kctrl),
            cell(row.kube_rs),
            ratio_text(row.ratio()),
            row.target_text(),
            if plain {
                verdict.trim_matches('*')
            } else {
                verdict
            }
            .to_owned(),
        ]);
    }
    t
}

/// The summary for the terminal.
pub(super) fn text_table(rows: &[Row]) -> String {
    results(rows, true).text()
}

/// Median count per `verb resource` of each side.
fn request_rows(runs: &[Run]) -> Vec<(String, f64, f64)> {
    let keys: std::collections::BTreeSet<&String> =
        runs.iter().flat_map(|r| r.requests.keys()).collect();
    keys.into_iter()
        .map(|key| {
            let of = |side: Side| {
                stats(
                    runs.iter()
                        .filter(|r| r.side == side)
                        .map(|r| r.requests.get(key).copied().unwrap_or(0.0))
                        .collect(),
                )
                .0
            };
            (key.clone(), of(Side::Kctrl), of(Side::KubeRs))
        })
        .collect()
}

/// docs/benchmarks/runtime.md.
pub(super) fn markdown(rows: &[Row], runs: &[Run], machine: &Machine, s: &Settings) -> String {
    let mut out = String::new();
    let quick = if s.quick { " --quick" } else { "" };
    let lean = s.configuration == kctrl_bench_runtime::Configuration::Lean;
    let _ = writeln!(
        out,
        "# kctrl-runtime's Controller beside kube-runtime's{}\n\n\
         Generated by `cargo xtask bench runtime{quick} --configuration {} --reps {} --objects {} \
         --concurrency {}` on {}; do not edit by hand.{}\n",
        if lean { ", both lean" } else { "" },
        s.configuration.as_str(),
        s.reps,
        s.objects,
        s.concurrency,
        machine.date,
        if s.quick {
            " A `--quick` smoke run: small and one repetition, not numbers to publish."
        } else {
            ""
        }
    );
    let _ = writeln!(
        out,
        "## What runs\n\n\
         Two controllers of one custom resource, `Widget` (`bench.kctrl.dev/v1`, its CRD \
         generated from the derive in `bench/runtime-kctrl/src/lib.rs`), take turns against \
         one local control plane (`cargo xtask cluster`), each alone: kctrl-runtime's \
         `Controller` (`bench/runtime-kctrl`, a release build of its own) and kube-runtime's \
         `Controller` from kube 5.0.0 (`bench/runtime-kube-rs`, its own lock file, release \
         build). Each reconcile server-side-applies one ConfigMap the Widget controls \
         (controller owner reference) and then the Widget's status (`observedGeneration`), \
         field manager `kctrl-bench-runtime`, forced. Both watch Widgets and the ConfigMaps \
         of the namespace (`owns`), run {} reconciles at once (kube-runtime's \
         `Config::concurrency`, kctrl-runtime's `workers`; kube-runtime's default is \
         unbounded, ours one), have no client-side rate limit and no resync, and react to \
         every event (no predicates), so both also run the no-op reconciles their own status \
         and ConfigMap writes trigger.\n\n\
         Per run, in a fresh namespace (the previous run's deleted and gone first, so that no \
         run shares the apiserver with another's garbage collection): the driver creates {} \
         Widgets, starts the peer and waits until every Widget is converged (its status shows \
         its generation and its ConfigMap holds its revision, seen by the driver's own \
         informers); then it changes every Widget's spec (a merge patch, {} in flight) and \
         waits again. The order alternates by repetition. CPU-seconds (`/proc/PID/stat`, \
         user + system, from the peer's start), peak RSS (`VmHWM`) and the resident set by kind \
         (`RssAnon`: heap and stacks, where the caches live; `RssFile`: the binary and \
         libraries mapped; `/proc/PID/status`) are read before the peer is told to stop, with \
         every Widget converged and cached; API requests are the peer's in the apiserver's audit log (by user \
         agent), watches included. Medians with min–max over {} runs per side; ratio = \
         kctrl-runtime / kube-runtime of the medians. \"Per converged object change\" divides \
         by the {} Widget generations converged (created + changed), independent of how many \
         reconciles a runtime needs for them.\n",
        s.concurrency,
        s.objects,
        super::DRIVER_CONCURRENCY,
        s.reps,
        2 * s.objects
    );
    // The other configuration's report of the same size.
    let sibling = super::doc_path(
        if lean {
            kctrl_bench_runtime::Configuration::Defaults
        } else {
            kctrl_bench_runtime::Configuration::Lean
        },
        s.objects,
    );
    let configuration = if lean {
        "Configuration `lean`: both sides keep the same caches, the Widgets and the owned \
         ConfigMaps' metadata, both without managedFields, each as its library's \
         documentation recommends for a controller that reads little. kctrl: the factory's \
         informers and the reconcile's two `Api`s skip managedFields while decoding \
         (`without_managed_fields`, as kube-controller-manager trims them from its \
         informers), and the ConfigMaps are cached as metadata only (`owns_metadata`). kube-rs (feature `unstable-runtime`): the Widgets' \
         managedFields are cleared before they reach the store (`watcher(..).modify(..)` \
         reflected into the store `Controller::for_stream` reads), and the ConfigMaps are \
         watched as metadata only (`owns_stream` of a watcher on \
         `Api<PartialObjectMeta<ConfigMap>>`), their managedFields cleared and the metadata \
         kept in a reflector's store, so that both sides cache the same objects (kctrl's \
         `owns_metadata` keeps that listable cache; kube-runtime's `owns_stream` alone keeps \
         none); kube has no way to skip the answers' managedFields. Each library as it comes:"
    } else {
        "Configuration `defaults`: each library as it comes: `Controller::new(..).owns(..)` \
         on both sides. kube-runtime's `owns` keeps no cache of the ConfigMaps (their events \
         only trigger reconciles); kctrl-runtime's keeps a full informer cache of them, which a \
         reconcile can list. Both keep the objects' managedFields. Both as their documentation \
         recommends for a controller that reads little:"
    };
    let _ = writeln!(out, "{configuration} {sibling}.\n");
    let _ = writeln!(out, "## Results\n");
    out.push_str(&results(rows, false).markdown());
    let _ = writeln!(
        out,
        "\nThe targets: throughput and wall time >= 1.0x kube-runtime (for wall time: ours / \
         theirs <= 1.0), CPU per converged object change <= 0.7x, {}.\n",
        if lean {
            "anonymous memory <= 0.7x (both caching the Widgets and the ConfigMaps' metadata)"
        } else {
            "peak RSS <= 1.0x (although ours caches the ConfigMaps and kube-runtime does not)"
        }
    );
    let _ = writeln!(out, "### API requests by verb and resource (medians)\n");
    let mut requests = Table::new()
        .left("request")
        .right("kctrl-runtime")
        .right("kube-runtime");
    for (key, ours, theirs) in request_rows(runs) {
        requests.row([key, format!("{ours:.0}"), format!("{theirs:.0}")]);
    }
    out.push_str(&requests.markdown());
    let _ = writeln!(out, "\n### Every run\n");
    let mut every = Table::new()
        .right("#")
        .left("controller")
        .right("create (s)")
        .right("change (s)")
        .right("driver's changes sent (s)")
        .right("reconciles")
        .right("CPU-s at create")
        .right("CPU-s")
        .right("peak RSS (MiB)")
        .right("RSS anon / file at the end (MiB)")
        .right("requests");
    for r in runs {
        every.row([
            (r.rep + 1).to_string(),
            r.side.name().to_owned(),
            format!("{:.2}", r.create_s),
            format!("{:.2}", r.change_s),
            format!("{:.2}", r.patch_s),
            r.reconciles.to_string(),
            format!("{:.2}", r.cpu_create_s),
            format!("{:.2}", r.cpu_s),
            format!("{:.1}", r.peak_rss as f64 / (1024.0 * 1024.0)),
            format!(
                "{:.1} / {:.1}",
                r.rss_anon as f64 / (1024.0 * 1024.0),
                r.rss_file as f64 / (1024.0 * 1024.0)
            ),
            format!("{:.0}", r.requests.values().sum::<f64>()),
        ]);
    }
    out.push_str(&every.markdown());
    let _ = writeln!(
        out,
        "\n## Machine\n\n\
         - CPU: {} x {}\n- Memory: {}\n- OS: {}\n- {}\n- Kubernetes {} (local control plane, \
         one KWOK node), driver and peers on the same machine\n",
        machine.cpus,
        machine.cpu_model,
        machine.memory,
        machine.os,
        machine.rustc,
        machine.kubernetes
    );
    out
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    /// Two runs per side, with a missed and a met target and a side without writes.
    fn runs() -> Vec<Run> {
        let run = |side: Side, rep: usize, create_s: f64, cpu_s: f64, rss_mib: u64| Run {
            side,
            rep,
            objects: 100,
            create_s,
            change_s: create_s / 2.0,
            patch_s: 0.25 * (rep + 1) as f64,
            reconciles: 400 + rep as u64,
            failures: 0,
            cpu_create_s: cpu_s / 3.0,
            cpu_s,
            peak_rss: rss_mib * 1024 * 1024,
            rss_anon: (rss_mib - 12) * 1024 * 1024,
            rss_file: 10 * 1024 * 1024,
            requests: BTreeMap::from([
                ("create configmaps".to_owned(), 100.0),
                ("get widgets".to_owned(), 3.0 + rep as f64),
                ("patch widgets/status".to_owned(), 200.0 + rep as f64),
            ]),
        };
        vec![
            run(Side::Kctrl, 0, 4.5, 1.2, 30),
            run(Side::KubeRs, 0, 5.0, 2.0, 40),
            run(Side::KubeRs, 1, 5.5, 2.2, 42),
            run(Side::Kctrl, 1, 4.0, 1.0, 31),
        ]
    }

    fn golden(name: &str) -> std::path::PathBuf {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("src/bench/runtime/golden")
            .join(name)
    }

    #[test]
    fn the_tables_are_rendered_as_before() {
        let runs = runs();
        let rows = summarize(&runs, kctrl_bench_runtime::Configuration::Defaults);
        xtask_report::golden::check(&golden("text.txt"), &text_table(&rows));
        let machine = Machine {
            cpus: 2,
            cpu_model: "Test CPU".into(),
            memory: "4 GiB".into(),
            os: "Linux 6.1".into(),
            rustc: "rustc 1.90.0".into(),
            kubernetes: "v1.37.2".into(),
            date: "2026-11-28 12:00 UTC".into(),
        };
        for (configuration, file) in [
            (kctrl_bench_runtime::Configuration::Defaults, "runtime.md"),
            (kctrl_bench_runtime::Configuration::Lean, "runtime-lean.md"),
        ] {
            let settings = Settings {
                objects: 100,
                reps: 2,
                concurrency: 4,
                quick: false,
                configuration,
            };
            xtask_report::golden::check(
                &golden(file),
                &markdown(&summarize(&runs, configuration), &runs, &machine, &settings),
            );
        }
    }
}

//! Medians, spreads, ratios, targets and the markdown of `cargo xtask bench controller`.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use super::measure::Setup;
use super::{Measured, Phase, PhaseRun, Side};
use xtask_contender::parse::{self, Counts};
pub(super) use xtask_report::machine::Machine;
use xtask_report::markdown::Table;
pub(super) use xtask_report::stats::Spread;

/// The line after which docs/benchmarks/controller.md is written by hand (analysis, profile);
/// a new run keeps everything from it on.
pub(super) const KEEP_MARKER: &str =
    "<!-- Written by hand from here on; `cargo xtask bench controller` keeps this part. -->";

/// How the run was configured.
#[derive(Clone)]
pub(super) struct Settings {
    pub(super) sizes: Vec<usize>,
    /// Phase e's sizes, ascending.
    pub(super) at_rest: Vec<usize>,
    pub(super) rounds: usize,
    pub(super) settle_secs: u64,
    pub(super) quick: bool,
    /// KWOK nodes of each cluster the run started, in order (`--scale`: one for phase e, then
    /// a fresh one for phases a-d and f).
    pub(super) nodes: Vec<usize>,
    /// Whether VmHWM could be reset per phase (`/proc/<pid>/clear_refs`).
    pub(super) peak_reset: bool,
    pub(super) cluster_kcm_qps: (u32, u32),
    /// Client QPS / burst of the controllers measured.
    pub(super) qps: (u32, u32),
    /// Replicas of every Deployment.
    pub(super) replicas: i32,
    /// `--scale`: the targets at scale instead of the defaults'.
    pub(super) scale: bool,
    /// Phase e's preparation per size: Deployments added, seconds until all complete.
    pub(super) setups: Vec<Setup>,
    /// The controllers measured.
    pub(super) measured: Measured,
    /// Why the run stopped early, if it did (the report then holds what was measured).
    pub(super) incomplete: Option<String>,
}

/// One row of a phase's table.
struct Metric {
    name: &'static str,
    get: fn(&PhaseRun) -> Option<f64>,
    decimals: usize,
    /// The target for ours / upstream, if there is one.
    target: Option<f64>,
}

const MIB: f64 = 1024.0 * 1024.0;

fn total(c: &Counts) -> f64 {
    c.values().sum()
}

/// The rows of `phase`'s table; `scale` takes the targets of issue [scale] (phases a-d and f:
/// wall time <= 0.8x with writes <= 1.0x; at rest: synced and CPU to idle <= 0.5x, peak RSS
/// <= 0.25x) instead of the defaults'.
fn metrics(phase: Phase, scale: bool) -> Vec<Metric> {
    let mut out = Vec::new();
    let unless_scale = |t: f64| (!scale).then_some(t);
    if phase == Phase::AtRest {
        out.push(Metric {
            name: "time to caches synced (s)",
            get: |r| r.synced,
            decimals: 2,
            target: Some(if scale { 0.5 } else { 1.0 }),
        });
        out.push(Metric {
            name: "time to first write (s)",
            get: |r| r.first_write,
            decimals: 2,
            target: None,
        });
        out.push(Metric {
            name: "time to idle (s)",
            // inf: not idle within the give-up time (a median with it is not met).
            get: |r| Some(r.idle.map_or(f64::INFINITY, |(at, _)| at)),
            decimals: 2,
            target: None,
        });
        out.push(Metric {
            name: "CPU-seconds to idle",
            get: |r| Some(r.idle.map_or(f64::INFINITY, |(_, cpu)| cpu)),
            decimals: 2,
            target: scale.then_some(0.5),
        });
    } else {
        out.push(Metric {
            name: "wall time (s)",
            get: |r| Some(r.wall),
            decimals: 1,
            target: Some(if scale { 0.8 } else { 1.0 }),
        });
        if phase != Phase::Delete {
            out.push(Metric {
                name: "per-Deployment completion p50 (s)",
                get: |r| r.p50,
                decimals: 1,
                target: None,
            });
            out.push(Metric {
                name: "per-Deployment completion p99 (s)",
                get: |r| r.p99,
                decimals: 1,
                target: None,
            });
        }
    }
    out.push(Metric {
        name: if phase == Phase::AtRest {
            "CPU-seconds since start"
        } else {
            "CPU-seconds"
        },
        get: |r| Some(r.cpu),
        decimals: 2,
        target: unless_scale(0.5),
    });
    out.push(Metric {
        name: "of which in the kernel (stime)",
        get: |r| Some(r.cpu_system),
        decimals: 2,
        target: None,
    });
    out.push(Metric {
        name: "peak RSS (MiB)",
        get: |r| Some(r.peak_rss as f64 / MIB),
        decimals: 1,
        target: match (phase == Phase::AtRest, scale) {
            (true, true) => Some(0.25),
            (false, true) => None,
            (_, false) => Some(0.3),
        },
    });
    out.push(Metric {
        name: "steady RSS (MiB)",
        get: |r| Some(r.steady_rss as f64 / MIB),
        decimals: 1,
        target: None,
    });
    out.push(Metric {
        name: "writes (audit log)",
        get: |r| Some(parse::writes(&r.audit)),
        decimals: 0,
        target: Some(1.0),
    });
    out.push(Metric {
        name: "all requests (audit log)",
        get: |r| Some(total(&r.audit)),
        decimals: 0,
        target: None,
    });
    out.push(Metric {
        name: "requests (own client metrics)",
        get: |r| Some(total(&r.client)),
        decimals: 0,
        target: None,
    });
    if phase != Phase::AtRest {
        out.push(Metric {
            name: "machine CPU busy (share of all cores)",
            get: |r| r.machine_busy,
            decimals: 2,
            target: None,
        });
    }
    if phase == Phase::AtRest {
        out.push(Metric {
            name: "kube-apiserver RSS at the end (MiB)",
            get: |r| r.cluster_rss.map(|(apiserver, _)| apiserver as f64 / MIB),
            decimals: 0,
            target: None,
        });
        out.push(Metric {
            name: "etcd RSS at the end (MiB)",
            get: |r| r.cluster_rss.map(|(_, etcd)| etcd as f64 / MIB),
            decimals: 0,
            target: None,
        });
    }
    out
}

fn select(runs: &[PhaseRun], side: Side, size: usize, phase: Phase) -> Vec<&PhaseRun> {
    runs.iter()
        .filter(|r| r.side == side && r.size == size && r.phase == phase)
        .collect()
}

fn spread_of(runs: &[&PhaseRun], get: fn(&PhaseRun) -> Option<f64>) -> Option<Spread> {
    let values: Vec<f64> = runs.iter().filter_map(|r| get(r)).collect();
    Spread::of(&values)
}

fn fmt(v: f64, decimals: usize) -> String {
    xtask_report::markdown::fixed(v, decimals)
}

fn fmt_spread(s: Option<Spread>, decimals: usize) -> String {
    Spread::display(s, decimals)
}

/// Ours / upstream of the medians.
fn ratio(ours: Option<Spread>, upstream: Option<Spread>) -> Option<f64> {
    xtask_report::stats::ratio_of_medians(ours, upstream)
}

/// "met" / "**not met**" for a ratio against a target (ratios must be at most the target).
pub(super) fn verdict(ratio: Option<f64>, target: f64) -> &'static str {
    match ratio {
        None => "-",
        Some(r) if r <= target => "met",
        Some(_) => "**not met**",
    }
}

/// The groups (size, phase) present in the runs, in order.
fn groups(runs: &[PhaseRun]) -> Vec<(usize, Phase)> {
    let set: BTreeSet<(Phase, usize)> = runs.iter().map(|r| (r.phase, r.size)).collect();
    let mut out: Vec<(usize, Phase)> = set.into_iter().map(|(p, s)| (s, p)).collect();
    out.sort_by_key(|(s, p)| (*p == Phase::AtRest, *s, *p));
    out
}

fn heading(size: usize, phase: Phase, replicas: i32) -> String {
    if phase == Phase::AtRest {
        format!("{}: {size} Deployments x {replicas} Pods", phase.title())
    } else {
        format!("{}: N = {size}", phase.title())
    }
}

/// A short plain-text summary for the terminal.
pub(super) fn text(runs: &[PhaseRun], settings: &Settings) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "bench controller: sizes {:?}, at rest {:?}, {} round(s); median (min–max), ours / upstream",
        settings.sizes, settings.at_rest, settings.rounds
    );
    for (size, phase) in groups(runs) {
        let _ = writeln!(out, "\n{}", heading(size, phase, settings.replicas));
        let (o, u) = (
            select(runs, Side::Ours, size, phase),
            select(runs, Side::Upstream, size, phase),
        );
        let mut t = Table::new()
            .indent(2)
            .left("")
            .width(36)
            .right("")
            .width(22)
            .right("")
            .width(22)
            .right("")
            .width(6)
            .left("")
            .width(0);
        for m in metrics(phase, settings.scale) {
            let (so, su) = (spread_of(&o, m.get), spread_of(&u, m.get));
            let r = ratio(so, su);
            t.row([
                m.name.to_owned(),
                fmt_spread(so, m.decimals),
                fmt_spread(su, m.decimals),
                r.map_or("-".into(), |r| format!("{r:.2}")),
                m.target
                    .map(|t| format!("target <= {t}: {}", verdict(r, t)))
                    .unwrap_or_default(),
            ]);
        }
        // No titles, no header line: the metrics follow the group's heading.
        out.push_str(&t.text());
    }
    out
}

/// Median per key over runs of one side (keys missing in a run count as 0).
fn median_counts(runs: &[&PhaseRun], get: fn(&PhaseRun) -> &Counts) -> Counts {
    let keys: BTreeSet<&String> = runs.iter().flat_map(|r| get(r).keys()).collect();
    keys.into_iter()
        .map(|k| {
            let values: Vec<f64> = runs
                .iter()
                .map(|r| get(r).get(k).copied().unwrap_or(0.0))
                .collect();
            (
                k.clone(),
                xtask_report::stats::median(&values).unwrap_or(0.0),
            )
        })
        .collect()
}

fn counts_table(
    out: &mut String,
    title: &str,
    runs: &[PhaseRun],
    size: usize,
    phase: Phase,
    get: fn(&PhaseRun) -> &Counts,
) {
    let o = median_counts(&select(runs, Side::Ours, size, phase), get);
    let u = median_counts(&select(runs, Side::Upstream, size, phase), get);
    let keys: BTreeSet<&String> = o.keys().chain(u.keys()).collect();
    if keys.is_empty() {
        return;
    }
    let _ = writeln!(out, "\n{title}\n");
    let mut t = Table::new().left("request").right("ours").right("upstream");
    for k in keys {
        t.row([
            k.clone(),
            fmt(o.get(k).copied().unwrap_or(0.0), 0),
            fmt(u.get(k).copied().unwrap_or(0.0), 0),
        ]);
    }
    out.push_str(&t.markdown());
}

/// The whole report (docs/benchmarks/controller.md and its siblings); the hand-written part of `existing` (from
/// [`KEEP_MARKER`] on) is kept.
pub(super) fn markdown(
    runs: &[PhaseRun],
    settings: &Settings,
    machine: &Machine,
    existing: &str,
) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "# {}\n", settings.measured.title());
    let _ = writeln!(
        out,
        "Written by `{}{}` on {} (finished {}). Each cell: median \
         over {} round(s) (min–max); ratio = ours / upstream of the medians.{}\n",
        settings.measured.command(),
        if settings.quick {
            " --quick"
        } else if settings.scale {
            " --scale"
        } else {
            ""
        },
        machine.started(),
        machine.finished(),
        settings.rounds,
        if settings.quick {
            " **A --quick smoke run: not numbers to publish.**"
        } else {
            ""
        }
    );

    if let Some(why) = &settings.incomplete {
        let _ = writeln!(
            out,
            "**Incomplete run**: it stopped with `{}`; the tables hold what was measured before.\n",
            incomplete_reason(why)
        );
    }

    // Targets first.
    let _ = writeln!(out, "## Targets (ours / upstream)\n");
    let mut targets = Table::new()
        .left("workload")
        .left("measure")
        .right("ratio")
        .right("target")
        .left("");
    for (size, phase) in groups(runs) {
        let (o, u) = (
            select(runs, Side::Ours, size, phase),
            select(runs, Side::Upstream, size, phase),
        );
        for m in metrics(phase, settings.scale) {
            let Some(target) = m.target else { continue };
            let r = ratio(spread_of(&o, m.get), spread_of(&u, m.get));
            targets.row([
                heading(size, phase, settings.replicas),
                m.name.to_owned(),
                r.map_or("-".into(), |r| format!("{r:.2}")),
                format!("<= {target}"),
                verdict(r, target).to_owned(),
            ]);
        }
    }
    out.push_str(&targets.markdown());

    let _ = writeln!(out, "\n## Results\n");
    for (size, phase) in groups(runs) {
        let _ = writeln!(out, "### {}\n", heading(size, phase, settings.replicas));
        let (o, u) = (
            select(runs, Side::Ours, size, phase),
            select(runs, Side::Upstream, size, phase),
        );
        let mut t = Table::new()
            .left("measure")
            .right("ours")
            .right("upstream")
            .right("ratio")
            .left("target");
        for m in metrics(phase, settings.scale) {
            let (so, su) = (spread_of(&o, m.get), spread_of(&u, m.get));
            let r = ratio(so, su);
            t.row([
                m.name.to_owned(),
                fmt_spread(so, m.decimals),
                fmt_spread(su, m.decimals),
                r.map_or("-".into(), |r| format!("{r:.2}")),
                m.target
                    .map(|t| format!("<= {t}: {}", verdict(r, t)))
                    .unwrap_or_default(),
            ]);
        }
        out.push_str(&t.markdown());
        counts_table(
            &mut out,
            "Requests of the controller's identity (apiserver audit log), medians:",
            runs,
            size,
            phase,
            |r| &r.audit,
        );
        counts_table(
            &mut out,
            "The controller's own `rest_client_requests_total` by method, medians:",
            runs,
            size,
            phase,
            |r| &r.client,
        );
        counts_table(
            &mut out,
            "`apiserver_request_total` delta for deployments, replicasets, pods and events \
             (every client: includes the driver, the ReplicaSet controller, the scheduler, \
             KWOK), medians:",
            runs,
            size,
            phase,
            |r| &r.apiserver,
        );
        let _ = writeln!(out);
    }

    let _ = writeln!(out, "## Every run\n");
    let mut every = Table::new()
        .left("workload")
        .right("round")
        .left("controller")
        .right("wall (s)")
        .right("synced (s)")
        .right("CPU-s")
        .right("peak RSS (MiB)")
        .right("steady RSS (MiB)")
        .right("writes");
    let mut ordered: Vec<&PhaseRun> = runs.iter().collect();
    ordered.sort_by_key(|r| (r.phase == Phase::AtRest, r.size, r.phase, r.round, r.side));
    for r in ordered {
        every.row([
            heading(r.size, r.phase, settings.replicas),
            (r.round + 1).to_string(),
            r.side.slug().to_owned(),
            fmt(r.wall, 1),
            r.synced.map_or("-".into(), |s| fmt(s, 2)),
            fmt(r.cpu, 2),
            fmt(r.peak_rss as f64 / MIB, 1),
            fmt(r.steady_rss as f64 / MIB, 1),
            fmt(parse::writes(&r.audit), 0),
        ]);
    }
    out.push_str(&every.markdown());

    let _ = writeln!(out, "\n## Machine\n");
    out.push_str(&machine.table());
    let _ = writeln!(
        out,
        "\nThe machine is shared with other builds and tests while the benchmark runs: the load \
         above comes partly from them, and absolute times are noisy; the side-by-side ratios of \
         alternating rounds are what to read."
    );

    let _ = writeln!(out, "\n## Method\n");
    let setup = super::setup_qps(settings.qps);
    let _ = write!(
        out,
        "{sides}\
- Per round and N, each controller in a fresh process and a fresh namespace (order alternating \
by round): (a) N Deployments x {replicas} replicas (RollingUpdate 25%/25%) created, until each is \
complete (observedGeneration >= generation, replicas = updated = available = spec); (b) every \
image changed; (c) every image changed again and, once half of the Deployments observed that \
change, every Deployment scaled to {doubled}; (f, when measured) the strategy changed to Recreate \
with a third image; (d) the namespace deleted, until it is gone. Completion \
times are seen by the driver listing the Deployments every 250 ms (500 ms above 200, 1 s from \
1,000). Machine CPU busy: the share of all cores' time /proc/stat counts as neither idle nor \
iowait (steal included) over the phase (every process: near 1, the machine, not a controller, \
set the pace).\n\
- (e) at {m} Deployments x {replicas} Pods, {per_namespace} per namespace, each size built on \
the one before by ours at QPS {setup_q} / burst {setup_b} with the cluster's components as above (not \
measured; times under Setup); per round \
and controller one Deployment's image is changed while no controller runs, then the controller \
starts: time from spawn to its caches-synced log line (ours: `Caches are synced for`; upstream: \
`\"Caches are synced\" controller=\"deployment\"`, `controller=\"replicaset\"`), to the \
{first_write}, polled every 20 ms, and to idle: the first {window} s after both in which it used \
less than {idle_share}% of a core (read from /proc at each 20 ms poll, so that it costs \
the measured process nothing); CPU-seconds to idle are those spent until that window began; \
`-` when a side was not idle within max(300 s, M/50 s) of both (counted as never: ratio \
`inf`, not met; RSS is then read at that point). \
RSS {settle} s after the first write and idle; the cluster's kube-apiserver and etcd RSS then too.\n\
- CPU-seconds: utime + stime of /proc/<pid>/stat over the phase (phase e: since start), \
including a 3 s tail after the last completion. Peak RSS: VmHWM, {reset}; steady RSS: VmRSS at \
the end of the phase. Writes: create/update/patch/delete requests of the controller's user in \
the apiserver's audit log (Metadata level for the controller identities only).\n",
        sides = sides_method(settings, machine),
        first_write = if settings.measured == super::Measured::Replicaset {
            "first Pod created for the changed Deployment (a uid not listed before the change; \
             the cluster's Deployment controller made the new ReplicaSet while no ReplicaSet \
             controller ran)"
        } else {
            "changed Deployment's new ReplicaSet (its first write)"
        },
        m = settings
            .at_rest
            .iter()
            .map(usize::to_string)
            .collect::<Vec<_>>()
            .join(", "),
        replicas = settings.replicas,
        doubled = settings.replicas * 2,
        per_namespace = super::AT_REST_PER_NAMESPACE,
        setup_q = setup.0,
        setup_b = setup.1,
        window = super::IDLE_WINDOW.as_secs_f64(),
        idle_share = super::IDLE_CPU_SHARE * 100.0,
        settle = settings.settle_secs,
        reset = if settings.peak_reset {
            "reset at the start of each phase through /proc/<pid>/clear_refs"
        } else {
            "since process start (resetting it through /proc/<pid>/clear_refs failed)"
        },
    );

    if !settings.setups.is_empty() {
        let _ = writeln!(out, "\n## Setup of phase e\n");
        let mut t = Table::new()
            .right("Deployments")
            .right("Pods")
            .right("added")
            .right("until all complete (s)")
            .right("objects per second");
        for setup in &settings.setups {
            t.row([
                setup.total.to_string(),
                (setup.total * settings.replicas as usize).to_string(),
                setup.added.to_string(),
                fmt(setup.seconds, 0),
                fmt(
                    (setup.added * (2 + settings.replicas as usize)) as f64
                        / setup.seconds.max(0.001),
                    0,
                ),
            ]);
        }
        out.push_str(&t.markdown());
        let _ = writeln!(
            out,
            "\nObjects per second count the Deployments, ReplicaSets and Pods added; each also \
             has its status written (KWOK marks every Pod running and ready)."
        );
    }

    let _ = writeln!(out, "\n{KEEP_MARKER}");
    if let Some(kept) = kept_part(existing) {
        out.push_str(kept);
    } else {
        out.push('\n');
    }
    out
}

/// `why` a run stopped, on one line and at most about [`REASON_CHARS`] characters: its start
/// (what exited, which log) and its end (an exited controller's last lines say why); the log
/// file it names holds the rest.
fn incomplete_reason(why: &str) -> String {
    let line = why.replace('`', "'").replace('\n', " ");
    let chars: Vec<char> = line.chars().collect();
    if chars.len() <= REASON_CHARS {
        return line;
    }
    let head: String = chars[..REASON_HEAD].iter().collect();
    let tail: String = chars[chars.len() - (REASON_CHARS - REASON_HEAD)..]
        .iter()
        .collect();
    format!("{head} … {tail}")
}

/// See [`incomplete_reason`].
const REASON_CHARS: usize = 400;
/// The part of [`REASON_CHARS`] taken from the start.
const REASON_HEAD: usize = 150;

/// The hand-written part of an earlier report: everything after [`KEEP_MARKER`].
pub(super) fn kept_part(existing: &str) -> Option<&str> {
    let at = existing.find(KEEP_MARKER)?;
    Some(&existing[at + KEEP_MARKER.len()..]).map(|s| s.strip_prefix('\n').unwrap_or(s))
}

/// The first bullets of the method: the cluster and what each side runs.
fn sides_method(settings: &Settings, machine: &Machine) -> String {
    use super::Measured;
    let (cluster_runs, upstream, identity, ours) = match settings.measured {
        Measured::Deployment => (
            "`--controllers=*,-deployment-controller`",
            "`--controllers=deployment-controller`",
            "`kube-system:deployment-controller`",
            "its defaults (the Deployment controller only)",
        ),
        Measured::Replicaset => (
            "`--controllers=*,-replicaset-controller`",
            "`--controllers=replicaset-controller`",
            "`kube-system:replicaset-controller`",
            "`--controllers=replicaset-controller`",
        ),
        Measured::Pair => (
            "`--controllers=*,-deployment-controller,-replicaset-controller`",
            "`--controllers=deployment-controller,replicaset-controller`",
            "`kube-system:deployment-controller` and `kube-system:replicaset-controller`",
            "`--controllers=*,replicaset-controller` (one process, one shared informer factory)",
        ),
    };
    let syncs = settings.measured.concurrency_flags().join(" ");
    format!(
        "- Local control plane (`cargo xtask cluster`, {nodes}), the cluster's own \
kube-controller-manager with {cluster_runs}, client QPS {kq} / burst {kb} (so that the \
controllers not measured, garbage collector and namespace controller are not the bottleneck) \
and `--node-monitor-grace-period=1h` (KWOK nodes whose Leases fall behind on a loaded machine \
are not called NotReady and emptied). \
Before a measured controller starts, every process with the cluster's files on its command line \
is checked: none may run it; after it stops, its pid must be gone.\n\
- upstream: a second kube-controller-manager ({k8s}) with only {upstream}, `--leader-elect=false`, \
`--use-service-account-credentials` (it acts as {identity}); ours: `deployment-controller` as \
shipped (profile `dist`: release with whole-program optimisation; default features, so mimalloc \
as the allocator; one runtime thread, its default) with {ours}, as \
`kube-system:kctrl-deployment-controller` with deploy/'s RBAC, `--leader-elect=false`. Both: \
`--kube-api-qps={q} --kube-api-burst={b} {syncs}`. kube-scheduler at the cluster's \
kube-controller-manager's QPS; KWOK's client has no limit.\n",
        q = settings.qps.0,
        b = settings.qps.1,
        nodes = match settings.nodes.as_slice() {
            [rest, rounds] if settings.scale => format!(
                "{rest} KWOK nodes of 110 Pods each for phase e, then a fresh cluster with \
                 {rounds} for phases a-d and f"
            ),
            nodes => format!(
                "{} KWOK nodes",
                nodes
                    .iter()
                    .map(usize::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        },
        kq = settings.cluster_kcm_qps.0,
        kb = settings.cluster_kcm_qps.1,
        k8s = machine.kubernetes(),
    )
}

#[cfg(test)]
#[path = "report_tests.rs"]
mod tests;

//! `cargo xtask diff [--scenario NAME…] [--keep]`: differential runs of our Deployment controller
//! against kube-controller-manager's.
//!
//! Two fresh local clusters side by side (`diff-up`, `diff-ours`; distinct loopback ports), each
//! with its kube-controller-manager running without the Deployment controller. On `diff-up` a
//! second kube-controller-manager runs only `--controllers=deployment-controller` (as
//! `cargo xtask bench controller` runs it) and the cluster's kube-controller-manager runs the
//! ReplicaSet controller; on `diff-ours` our release `deployment-controller` runs both
//! controllers (`--controllers=*,replicaset-controller`) and the cluster's
//! kube-controller-manager neither, so the whole chain Deployment → ReplicaSet → Pod is
//! compared (`--upstream-replicasets` keeps kube-controller-manager's ReplicaSet controller on
//! both clusters and compares the Deployment controllers alone). Before the scenarios, and
//! after, each cluster is checked by process id to run exactly that one Deployment controller
//! and that one ReplicaSet controller.
//!
//! Every scenario of `tests/diff/scenarios` (see [`scenario`]) runs in a namespace of its own on
//! both clusters, step by step in lockstep: the step's action on both, then both settle, then
//! [`observe`] reads what a user can see on each and [`compare`] lists the differences. The
//! report goes to `target/diff/report.md`, each side's observation of each step to
//! `target/diff/<scenario>/`; the exit status is non-zero if a difference is not listed in
//! [`compare::INTENDED`] or a scenario could not run. A scenario that differs runs again
//! (`--retries`), and only differences every run shows count: the intermediate steps of a
//! rolling update depend on when each controller sees pods become ready. `--quick` runs the
//! subset [`QUICK`] that `cargo xtask test` runs; `--switch N` instead measures what a switch
//! between the two controllers costs (see [`switch`]).

mod compare;
mod events;
mod observe;
mod scenario;
mod side;
mod switch;

use std::fmt::Write as _;
use std::fs;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::Value;

use self::compare::{Difference, INTENDED, Intended};
use self::events::EventWatch;
use self::observe::{Names, Observation};
use self::scenario::{Action, Scenario, Step};
use kctrl_cluster::plane::{self, ClusterInfo, Component, Layout, UpOptions};
use kctrl_cluster::toolchain::{Cache, fmt_duration};
use kctrl_cluster::versions::{Binary, Release};
use xtask_contender::args::KubeVersionArg;
use xtask_contender::fresh::{self, Fresh, FreshCluster, check_controllers};
use xtask_contender::supervisor::{self, ControllerProcess};
use xtask_contender::{Contender, WITH_REPLICASET_CONTROLLER};

/// Default prefix of the two clusters' names: `diff-up` runs upstream's Deployment controller,
/// `diff-ours` ours.
const CLUSTER_PREFIX: &str = "diff";
/// Poll interval while settling.
const POLL: Duration = Duration::from_millis(400);
/// A step that has not settled after this long fails its scenario.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(120);

/// Arguments of `cargo xtask diff`.
#[derive(clap::Args)]
pub(crate) struct DiffArgs {
    /// Run only these scenarios (file name without `.yaml`, with or without its number);
    /// repeatable. Default: all of tests/diff/scenarios.
    #[arg(long = "scenario", value_name = "NAME")]
    scenarios: Vec<String>,
    /// Run only the quick subset ([`QUICK`]) that `cargo xtask test` runs.
    #[arg(long, conflicts_with = "scenarios")]
    quick: bool,
    /// Run kube-controller-manager's ReplicaSet controller on both clusters (compare the
    /// Deployment controllers alone); by default ours runs on `<PREFIX>-ours`.
    #[arg(long)]
    upstream_replicasets: bool,
    /// Run this deployment-controller binary instead of building the release one.
    #[arg(long, value_name = "PATH")]
    binary: Option<PathBuf>,
    /// Leave both clusters (and the scenarios' namespaces) running at the end for inspection;
    /// the Deployment controllers are stopped either way.
    #[arg(long)]
    keep: bool,
    /// Run a scenario that shows unintended differences up to this many more times; a
    /// difference that does not show in every run is reported as timing-dependent, not as a
    /// failure.
    #[arg(long, default_value_t = 2, value_name = "N")]
    retries: usize,
    /// Instead of the scenarios: measure a switch between the controllers with this many
    /// Deployments (ReplicaSets created and deleted, pods replaced; see docs/conformance.md).
    #[arg(long, value_name = "N")]
    switch: Option<usize>,
    /// Prefix of the two clusters' names: `<PREFIX>-up` (upstream's controller) and
    /// `<PREFIX>-ours`, so that runs side by side do not share a cluster name.
    #[arg(long, default_value = CLUSTER_PREFIX, value_name = "PREFIX")]
    name_prefix: String,
    /// Kubernetes release of both clusters (and of the kube-controller-manager compared with).
    #[command(flatten)]
    kube: KubeVersionArg,
}

/// The subset `cargo xtask test` runs (`--quick`): rollouts, undo, a stuck rollout scaled,
/// Recreate, adoption, release with a name collision, orphaning and foreground deletion, and of
/// the bare ReplicaSets the deletion order of a scale-down and a released pod — about 5
/// minutes on a warm machine.
pub(crate) const QUICK: &[&str] = &[
    "02-image-change",
    "03-rollout-undo",
    "07-scale-mid-rollout",
    "09-recreate",
    "12-orphan-adoption",
    "13-release",
    "16-delete-orphan",
    "17-delete-foreground",
    "24-rs-scale-down-order",
    "26-rs-release",
];

impl DiffArgs {
    /// The quick subset on `release`, clusters stopped at the end (what `cargo xtask test`
    /// runs).
    pub(crate) fn quick(release: &'static Release) -> DiffArgs {
        DiffArgs {
            scenarios: Vec::new(),
            quick: true,
            upstream_replicasets: false,
            binary: None,
            keep: false,
            retries: 2,
            switch: None,
            name_prefix: CLUSTER_PREFIX.to_owned(),
            kube: KubeVersionArg { release },
        }
    }
}

/// Where the scenario files live.
fn scenario_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/diff/scenarios")
}

/// Output directory: `target/diff`.
fn out_dir() -> PathBuf {
    plane::target_dir().join("diff")
}

pub(crate) fn run(args: DiffArgs) -> Result<()> {
    if let Some(n) = args.switch {
        return switch::run(n, args.keep, args.kube.release);
    }
    // Parse everything before anything starts: a typo should not cost two clusters.
    let only: Vec<String> = if args.quick {
        QUICK.iter().map(|s| (*s).to_owned()).collect()
    } else {
        args.scenarios.clone()
    };
    let scenarios = scenario::load_selected(&scenario_dir(), &only)?;
    let started = Instant::now();
    let ours_binary = match &args.binary {
        Some(path) => path.clone(),
        None => supervisor::build_dist()?,
    };
    let release = args.kube.release;
    let cache = Cache::locate(release)?;
    kctrl_cluster::toolchain::ensure_built(&cache)?;
    let kcm = cache.binary(Binary::KubeControllerManager);
    let out = out_dir();
    let _ = fs::remove_dir_all(&out);
    fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;

    let upstream_cluster = format!("{}-up", args.name_prefix);
    let ours_cluster = format!("{}-ours", args.name_prefix);
    let ours_replicasets = !args.upstream_replicasets;
    let clusters = Clusters::start(
        &[
            (upstream_cluster.as_str(), true),
            (ours_cluster.as_str(), !ours_replicasets),
        ],
        release,
    )?;
    let result = (|| -> Result<Vec<ScenarioReport>> {
        let up = Side::start_upstream(&clusters.infos[0], &kcm)?;
        let ours = Side::start_ours(&clusters.infos[1], &ours_binary, ours_replicasets)?;
        let mut sides = [up, ours];
        let mut reports = Vec::new();
        for s in &scenarios {
            let t = Instant::now();
            eprintln!("==> scenario {}: {}", s.name, s.description);
            let mut report = run_scenario(s, &mut sides, &out.join(&s.name));
            while report.error.is_none() && report.unintended() > 0 && report.runs <= args.retries {
                let run = report.runs + 1;
                eprintln!(
                    "==> scenario {}: {} difference(s); run {run} to tell behaviour from timing",
                    s.name,
                    report.unintended()
                );
                let again = run_scenario(s, &mut sides, &out.join(format!("{}-run{run}", s.name)));
                report.keep_recurring(&again);
            }
            eprintln!(
                "==> scenario {} done in {} ({})",
                s.name,
                fmt_duration(t.elapsed()),
                report.verdict()
            );
            reports.push(report);
            if !args.keep {
                for side in &sides {
                    let _ = side.kubectl_in(
                        None,
                        &["delete", "namespace", &namespace(s), "--wait=false"],
                        None,
                    );
                }
            }
        }
        let [up, ours] = sides;
        up.stop()?;
        ours.stop()?;
        Ok(reports)
    })();
    let down = if args.keep {
        eprintln!(
            "==> --keep: clusters {upstream_cluster} and {ours_cluster} stay up \
             (`cargo xtask cluster env --name …`; `cargo xtask cluster down --name …`)"
        );
        clusters.dismiss();
        Ok(())
    } else {
        clusters.down()
    };
    let reports = result?;
    down?;
    let text = render(&reports, release, ours_replicasets, started.elapsed());
    let path = out.join("report.md");
    fs::write(&path, &text).with_context(|| format!("writing {}", path.display()))?;
    print!("{text}");
    eprintln!("==> report: {}", path.display());
    let bad: Vec<&ScenarioReport> = reports.iter().filter(|r| !r.ok()).collect();
    if !bad.is_empty() {
        bail!(
            "{} of {} scenario(s) differ beyond the intended differences or failed: {}",
            bad.len(),
            reports.len(),
            bad.iter()
                .map(|r| r.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    Ok(())
}

/// Fresh clusters, stopped again by [`Clusters::down`] (or, on Ctrl-C, by watcher processes).
pub(crate) struct Clusters {
    /// The clusters, in the order of the names given.
    pub(crate) infos: Vec<ClusterInfo>,
    started: Vec<FreshCluster>,
}

/// The pid file of the Deployment controller xtask runs against cluster `name` (its log's,
/// see [`supervisor::start`]), which the Ctrl-C watcher stops.
fn controller_pid_file(name: &str) -> PathBuf {
    out_dir().join(format!("{name}-controller.pid"))
}

/// Who runs a cluster's ReplicaSet controller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ReplicaSets {
    /// The cluster's kube-controller-manager.
    ClusterKcm,
    /// Our deployment-controller ([`WITH_REPLICASET_CONTROLLER`]).
    Ours,
}

/// One cluster of the pair and its Deployment controller.
pub(crate) struct Side {
    /// Which controller runs.
    pub(crate) controller: Contender,
    /// Who runs the ReplicaSet controller.
    pub(crate) replica_sets: ReplicaSets,
    /// The cluster.
    pub(crate) info: ClusterInfo,
    /// The running Deployment controller.
    pub(crate) process: Option<ControllerProcess>,
    /// Generated names seen in the current scenario.
    names: Names,
    /// The watch on the current scenario's events.
    events: Option<EventWatch>,
}

/// The namespace of a scenario.
fn namespace(s: &Scenario) -> String {
    format!("diff-{}", s.name)
}

/// What one step showed.
#[derive(Debug)]
struct StepReport {
    name: String,
    /// Differences with the intended entry that covers each, if any.
    differences: Vec<(Difference, Option<&'static Intended>)>,
    /// Differences of the first run that a later run of the scenario did not show (timing).
    timing: Vec<Difference>,
    /// Seconds until both clusters settled.
    settle: f64,
}

/// What one scenario showed.
#[derive(Debug)]
struct ScenarioReport {
    name: String,
    description: String,
    steps: Vec<StepReport>,
    /// Why it stopped early, if it did.
    error: Option<String>,
    seconds: f64,
    /// How many times it ran (see `--retries`).
    runs: usize,
}

impl ScenarioReport {
    fn unintended(&self) -> usize {
        self.steps
            .iter()
            .flat_map(|s| &s.differences)
            .filter(|(_, i)| i.is_none())
            .count()
    }

    /// Keeps as differences only those that `again` (a later run) shows too, at the same step
    /// and path with the same two values; the others move to the step's timing-dependent list.
    /// A failed later run keeps everything and records its error.
    fn keep_recurring(&mut self, again: &ScenarioReport) {
        self.runs += 1;
        self.seconds += again.seconds;
        if let Some(e) = &again.error {
            self.error = Some(format!("run {}: {e}", self.runs));
            return;
        }
        for (i, step) in self.steps.iter_mut().enumerate() {
            let later: Vec<&Difference> = again
                .steps
                .get(i)
                .map(|s| s.differences.iter().map(|(d, _)| d).collect())
                .unwrap_or_default();
            let (keep, drop): (Vec<_>, Vec<_>) = std::mem::take(&mut step.differences)
                .into_iter()
                .partition(|(d, intended)| intended.is_some() || later.contains(&d));
            step.differences = keep;
            step.timing.extend(drop.into_iter().map(|(d, _)| d));
        }
    }

    fn ok(&self) -> bool {
        self.error.is_none() && self.unintended() == 0
    }

    fn verdict(&self) -> String {
        let intended = self
            .steps
            .iter()
            .flat_map(|s| &s.differences)
            .filter(|(_, i)| i.is_some())
            .count();
        let verdict = match (&self.error, self.unintended()) {
            (Some(e), _) => format!("FAILED: {e}"),
            (None, 0) if intended == 0 => "same".to_owned(),
            (None, 0) => format!("same but for {intended} intended difference(s)"),
            (None, n) => format!("{n} difference(s)"),
        };
        let timing: usize = self.steps.iter().map(|s| s.timing.len()).sum();
        if timing == 0 {
            verdict
        } else {
            format!(
                "{verdict}; {timing} timing-dependent (not in all of {} runs)",
                self.runs
            )
        }
    }
}

fn run_scenario(s: &Scenario, sides: &mut [Side; 2], out: &Path) -> ScenarioReport {
    let started = Instant::now();
    let mut report = ScenarioReport {
        name: s.name.clone(),
        description: s.description.clone(),
        steps: Vec::new(),
        error: None,
        seconds: 0.0,
        runs: 1,
    };
    if let Err(e) = run_steps(s, sides, out, &mut report) {
        report.error = Some(format!("{e:#}"));
    }
    report.seconds = started.elapsed().as_secs_f64();
    report
}

fn run_steps(
    s: &Scenario,
    sides: &mut [Side; 2],
    out: &Path,
    report: &mut ScenarioReport,
) -> Result<()> {
    let ns = namespace(s);
    let dir = out;
    fs::create_dir_all(dir)?;
    for side in sides.iter_mut() {
        side.names = Names::default();
        side.events = None;
        let _ = side.kubectl_in(None, &["delete", "namespace", &ns, "--wait=true"], None);
        let (code, _, err) = side.kubectl_in(None, &["create", "namespace", &ns], None)?;
        if code != 0 {
            bail!(
                "{}: creating namespace {ns}: {}",
                side.info.name,
                err.trim()
            );
        }
        side.events = Some(EventWatch::start(
            side.info.kubectl.clone(),
            side.info.admin_kubeconfig.clone(),
            &ns,
        )?);
    }
    // Pods cannot be created before the namespace's default ServiceAccount exists.
    let deadline = Instant::now() + Duration::from_secs(30);
    for side in sides.iter() {
        while side
            .kubectl_in(Some(&ns), &["get", "serviceaccount", "default"], None)?
            .0
            != 0
        {
            if Instant::now() > deadline {
                bail!(
                    "{}: no default ServiceAccount in {ns} after 30s",
                    side.info.name
                );
            }
            thread::sleep(POLL);
        }
    }
    for (i, step) in s.steps.iter().enumerate() {
        eprintln!("==>   step {i}: {}", step.name);
        let mut actions = Vec::new();
        for side in sides.iter() {
            actions.push(side.act(&ns, &step.action)?);
        }
        let t = Instant::now();
        settle(step, sides, &ns).with_context(|| format!("step {i} ({})", step.name))?;
        let settle_secs = t.elapsed().as_secs_f64();
        let mut observed = Vec::new();
        for (side, action) in sides.iter_mut().zip(actions) {
            let mut obs = side.observe(&ns)?;
            obs.0["action"] = action;
            let file = dir.join(format!("{i:02}-{}.json", side.controller.slug()));
            fs::write(&file, serde_json::to_string_pretty(&obs.0)?)?;
            observed.push(obs);
        }
        let differences = compare::differences(&observed[0].0, &observed[1].0)
            .into_iter()
            .map(|d| {
                let intended = compare::intended_for(&d, INTENDED);
                (d, intended)
            })
            .collect();
        report.steps.push(StepReport {
            name: step.name.clone(),
            differences,
            timing: Vec::new(),
            settle: settle_secs,
        });
    }
    Ok(())
}

/// Waits for the step's condition (if any) on both clusters, then until both have caught up
/// with every Deployment's and ReplicaSet's generation and showed the same snapshot for the quiet period.
fn settle(step: &Step, sides: &mut [Side; 2], ns: &str) -> Result<()> {
    if let Some(w) = &step.wait {
        let deadline = Instant::now() + w.timeout;
        for side in sides.iter_mut() {
            loop {
                let obs = side.snapshot(ns)?;
                if obs.has_condition(
                    w.replica_set,
                    &w.object,
                    &w.condition,
                    &w.status,
                    w.reason.as_deref(),
                ) {
                    break;
                }
                if Instant::now() > deadline {
                    bail!(
                        "{}: {} {} has no condition {}={}{} after {:?}; it shows {}",
                        side.controller.slug(),
                        if w.replica_set {
                            "ReplicaSet"
                        } else {
                            "Deployment"
                        },
                        w.object,
                        w.condition,
                        w.status,
                        w.reason
                            .as_deref()
                            .map(|r| format!(" ({r})"))
                            .unwrap_or_default(),
                        w.timeout,
                        obs.object(w.replica_set, &w.object)["status"]["conditions"]
                    );
                }
                thread::sleep(POLL);
            }
        }
    }
    let started = Instant::now();
    let mut last: [Option<(Observation, Instant)>; 2] = [None, None];
    loop {
        let mut quiet = true;
        for (side, last) in sides.iter_mut().zip(last.iter_mut()) {
            let obs = side.snapshot(ns)?;
            let caught_up = obs.generations_observed();
            match last {
                Some((prev, since)) if *prev == obs => {
                    quiet &= caught_up && since.elapsed() >= step.quiet;
                }
                _ => {
                    *last = Some((obs, Instant::now()));
                    quiet = false;
                }
            }
        }
        if quiet {
            return Ok(());
        }
        if started.elapsed() > SETTLE_TIMEOUT {
            bail!("the clusters did not settle within {SETTLE_TIMEOUT:?}");
        }
        thread::sleep(POLL);
    }
}

/// The report: per scenario and step, the differences (intended ones with their reason).
fn render(
    reports: &[ScenarioReport],
    release: &Release,
    ours_replicasets: bool,
    took: Duration,
) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# Differential run: upstream's {} vs ours\n\n\
         Kubernetes {} (both clusters and kube-controller-manager).\n",
        if ours_replicasets {
            "Deployment and ReplicaSet controllers"
        } else {
            "Deployment controller (kube-controller-manager's ReplicaSet controller on both)"
        },
        release.kubernetes
    );
    let failed = reports.iter().filter(|r| !r.ok()).count();
    let _ = writeln!(
        out,
        "{} scenario(s), {} step(s), {} with unintended differences or failures; {}.\n",
        reports.len(),
        reports.iter().map(|r| r.steps.len()).sum::<usize>(),
        failed,
        fmt_duration(took)
    );
    let mut t = xtask_report::markdown::Table::new()
        .left("scenario")
        .left("steps")
        .left("result")
        .left("time");
    for r in reports {
        t.row([
            r.name.clone(),
            r.steps.len().to_string(),
            r.verdict()
                .replace('|', "/")
                .lines()
                .next()
                .unwrap_or("")
                .to_owned(),
            format!("{:.0}s", r.seconds),
        ]);
    }
    out.push_str(&t.markdown());
    for r in reports {
        let _ = writeln!(out, "\n## {}\n\n{}\n", r.name, r.description);
        for (i, s) in r.steps.iter().enumerate() {
            let _ = write!(
                out,
                "- step {i} ({}), settled in {:.1}s: ",
                s.name, s.settle
            );
            if s.differences.is_empty() && s.timing.is_empty() {
                let _ = writeln!(out, "same");
                continue;
            }
            let _ = writeln!(
                out,
                "{} difference(s), {} timing-dependent",
                s.differences.len(),
                s.timing.len()
            );
            for (d, intended) in &s.differences {
                let _ = writeln!(out, "  - {d}");
                if let Some(i) = intended {
                    let _ = writeln!(out, "      intended: {}", i.reason);
                }
            }
            for d in &s.timing {
                let _ = writeln!(out, "  - timing-dependent (absent from a later run): {d}");
            }
        }
        if let Some(e) = &r.error {
            let _ = writeln!(out, "- FAILED: {e}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_report_lists_differences_and_marks_intended_ones() {
        static REASON: Intended = Intended {
            path: "*.x",
            reason: "because the docs say so",
        };
        let d = |path: &str| Difference {
            path: path.to_owned(),
            upstream: Some(serde_json::json!(1)),
            ours: Some(serde_json::json!(2)),
        };
        let reports = vec![
            ScenarioReport {
                name: "01-a".into(),
                description: "A.".into(),
                steps: vec![StepReport {
                    name: "create".into(),
                    differences: vec![],
                    timing: vec![],
                    settle: 1.0,
                }],
                error: None,
                seconds: 3.0,
                runs: 1,
            },
            ScenarioReport {
                name: "02-b".into(),
                description: "B.".into(),
                steps: vec![StepReport {
                    name: "scale".into(),
                    differences: vec![(d("a.x"), Some(&REASON)), (d("a.y"), None)],
                    timing: vec![],
                    settle: 2.0,
                }],
                error: Some("boom".into()),
                seconds: 4.0,
                runs: 1,
            },
        ];
        assert!(reports[0].ok());
        assert!(!reports[1].ok());
        assert_eq!(reports[1].unintended(), 1);
        let text = render(
            &reports,
            kctrl_cluster::versions::DEFAULT_RELEASE,
            true,
            Duration::from_secs(7),
        );
        assert!(
            text.contains("\nKubernetes v1.37.2 (both clusters and kube-controller-manager).\n"),
            "{text}"
        );
        assert!(
            text.starts_with(
                "# Differential run: upstream's Deployment and ReplicaSet controllers vs ours"
            ),
            "{text}"
        );
        assert!(
            text.contains("2 scenario(s), 2 step(s), 1 with unintended"),
            "{text}"
        );
        let from = text.find("| scenario |").unwrap();
        let to = from + text[from..].find("\n\n").unwrap() + 1;
        xtask_report::golden::check(
            &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/diff/golden/scenarios.md"),
            &text[from..to],
        );
        assert!(text.contains("| 01-a | 1 | same | 3s |"), "{text}");
        assert!(text.contains("| 02-b | 1 | FAILED: boom | 4s |"), "{text}");
        assert!(
            text.contains("- step 0 (scale), settled in 2.0s: 2 difference(s)"),
            "{text}"
        );
        assert!(text.contains("intended: because the docs say so"), "{text}");
        assert!(text.contains("upstream: 1\n      ours:     2"), "{text}");
    }

    #[test]
    fn only_differences_that_recur_count() {
        let d = |path: &str| Difference {
            path: path.to_owned(),
            upstream: Some(serde_json::json!(1)),
            ours: None,
        };
        let report = |paths: &[&str]| ScenarioReport {
            name: "05-x".into(),
            description: "X.".into(),
            steps: vec![StepReport {
                name: "s".into(),
                differences: paths.iter().map(|p| (d(p), None)).collect(),
                timing: vec![],
                settle: 1.0,
            }],
            error: None,
            seconds: 1.0,
            runs: 1,
        };
        // The same path with other values is another difference: timing, not behaviour.
        let mut flipped = report(&["a"]);
        let mut other = report(&["a"]);
        other.steps[0].differences[0].0.ours = Some(serde_json::json!(3));
        flipped.keep_recurring(&other);
        assert!(flipped.ok());

        let mut first = report(&["a", "b"]);
        first.keep_recurring(&report(&["b", "c"]));
        assert_eq!(first.runs, 2);
        assert_eq!(first.unintended(), 1);
        assert_eq!(first.steps[0].differences[0].0.path, "b");
        assert_eq!(first.steps[0].timing[0].path, "a");
        assert!(
            first
                .verdict()
                .contains("1 timing-dependent (not in all of 2 runs)")
        );
        // A third run without "b": nothing left, the scenario passes.
        first.keep_recurring(&report(&[]));
        assert!(first.ok());
        assert_eq!(first.steps[0].timing.len(), 2);
        // A later run that fails keeps the differences and fails the scenario.
        let mut again = report(&["a"]);
        let mut failed = report(&[]);
        failed.error = Some("settle".into());
        again.keep_recurring(&failed);
        assert!(!again.ok());
        assert!(again.error.as_deref().unwrap().contains("run 2: settle"));
    }

    #[test]
    fn cli_parses() {
        use clap::Parser;
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            args: DiffArgs,
        }
        let cli =
            Cli::try_parse_from(["x", "--scenario", "a", "--scenario", "02-b", "--keep"]).unwrap();
        assert_eq!(cli.args.scenarios, ["a", "02-b"]);
        assert!(cli.args.keep);
        assert!(!cli.args.upstream_replicasets);
        assert_eq!(cli.args.switch, None);
        assert_eq!(cli.args.retries, 2);
        let cli = Cli::try_parse_from(["x", "--switch", "50"]).unwrap();
        assert_eq!(cli.args.switch, Some(50));
        let old = kctrl_cluster::versions::Release::exact("v1.36.5").unwrap();
        let quick = DiffArgs::quick(old);
        assert!(quick.quick && !quick.keep && quick.switch.is_none());
        assert!(std::ptr::eq(quick.kube.release, old));
        let cli = Cli::try_parse_from(["x", "--quick", "--kube-version", "v1.36.5"]).unwrap();
        assert!(std::ptr::eq(cli.args.kube.release, old));
        assert!(Cli::try_parse_from(["x", "--quick", "--scenario", "a"]).is_err());
        // Every scenario of the quick subset exists.
        let found = scenario::load_selected(
            &scenario_dir(),
            &QUICK.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>(),
        )
        .unwrap();
        assert_eq!(found.len(), QUICK.len());
    }
}

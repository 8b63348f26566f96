//! `cargo xtask conformance [--controller ours|upstream] [--suite deployment|replicaset]`:
//! upstream's `[sig-apps] Deployment` (or `[sig-apps] ReplicaSet`) e2e specs against the local
//! control plane, with our controller or, as a baseline, kube-controller-manager's own.
//!
//! 1. Builds (once per release, cached beside the control plane in
//!    `~/.cache/kctrl/k8s-<version>/bin`) upstream's e2e test binary `e2e.test` of the selected
//!    Kubernetes release (`--kube-version`) from the Go module proxy: a generated wrapper module
//!    (the control plane's `require`/`replace` lines plus one `_test.go` linking the e2e
//!    framework with the `apps` specs; see `cluster::versions`), built with `go test -c` by
//!    `cluster::toolchain`. The specs are that release's, so they run against the same
//!    release's control plane.
//! 2. Starts a dedicated local cluster (`--name`, default `conformance`) whose
//!    kube-controller-manager runs without its Deployment controller (`ours`: our release
//!    `deployment-controller` then runs as its own identity with `deploy/`'s RBAC) or with it
//!    (`upstream`: ours does not run). Before and after the specs it checks by process id that
//!    exactly the chosen Deployment controller runs against the cluster. With `--suite
//!    replicaset` the ReplicaSet controller is the one under test: ours runs both
//!    (`--controllers=*,replicaset-controller`) and kube-controller-manager neither, or
//!    kube-controller-manager both.
//! 3. Runs `e2e.test` focused on `[sig-apps] Deployment`, minus [`SKIPS`] (each with its reason),
//!    writes Ginkgo's JUnit report to `target/conformance/<version>/<controller>/junit.xml`, prints
//!    passed / failed / skipped per spec, and tears everything down — also on failure and, through
//!    a watcher process, on Ctrl-C.

use std::fmt::Write as _;
use std::fs;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Instant;

use anyhow::{Context, Result, bail};

use kctrl_cluster::plane::{self, ClusterInfo, Component, Layout, UpOptions};
use kctrl_cluster::process;
use kctrl_cluster::toolchain::{self, Cache, fmt_duration};
use kctrl_cluster::versions::Release;
use xtask_contender::Contender;
use xtask_contender::args::KubeVersionArg;
use xtask_contender::fresh::{self, Fresh, check_controllers};
use xtask_contender::supervisor::{self, ControllerProcess};
use xtask_report::junit::{self, Outcome, TestCase};

/// Arguments of `cargo xtask conformance`.
#[derive(clap::Args)]
pub(crate) struct ConformanceArgs {
    /// Which Deployment controller runs the specs: ours, or kube-controller-manager's own (the
    /// baseline).
    #[arg(long, value_enum, default_value_t = Contender::Ours)]
    controller: Contender,
    /// Which specs: upstream's `[sig-apps] Deployment` or `[sig-apps] ReplicaSet` ones.
    #[arg(long, value_enum, default_value_t = Suite::Deployment)]
    suite: Suite,
    /// Name of the local cluster (started afresh, stopped at the end).
    #[arg(long, default_value = "conformance")]
    name: String,
    /// Only build (or check) the control plane and the e2e test binary.
    #[arg(long)]
    build_only: bool,
    /// Kubernetes release of the control plane and of the specs.
    #[command(flatten)]
    kube: KubeVersionArg,
}

impl ConformanceArgs {
    /// Our controller on `suite`, the default cluster name and `release` (what `cargo xtask
    /// test` runs).
    pub(crate) fn ours(suite: Suite, release: &'static Release) -> ConformanceArgs {
        ConformanceArgs {
            controller: Contender::Ours,
            suite,
            name: "conformance".to_owned(),
            build_only: false,
            kube: KubeVersionArg { release },
        }
    }
}

/// The specs run: the describe block of upstream's `test/e2e/apps` they come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Suite {
    /// `[sig-apps] Deployment`: our Deployment controller under test.
    Deployment,
    /// `[sig-apps] ReplicaSet`: our ReplicaSet controller under test (with our Deployment
    /// controller beside it, as `--controllers=*,replicaset-controller` runs them).
    Replicaset,
}

impl Suite {
    /// The text every spec of the suite starts with.
    pub(crate) fn prefix(self) -> &'static str {
        match self {
            Suite::Deployment => "[sig-apps] Deployment ",
            Suite::Replicaset => "[sig-apps] ReplicaSet ",
        }
    }

    /// `--ginkgo.focus`: the prefix, escaped.
    pub(crate) fn focus(self) -> String {
        regex_escape(self.prefix())
    }

    /// Extra arguments of our binary.
    fn our_args(self) -> &'static [&'static str] {
        match self {
            Suite::Deployment => &[],
            Suite::Replicaset => &["--controllers=*,replicaset-controller"],
        }
    }
}

/// A class of specs left out, as a literal piece of spec text, with the reason.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Skip {
    /// Text that occurs in the names of the skipped specs (matched literally).
    pub(crate) text: &'static str,
    /// Why the local cluster cannot run them.
    pub(crate) reason: &'static str,
}

/// What is not run, and why: only specs that need a cloud provider or a feature gate that is off
/// by default. Everything else in a [`Suite`] must pass.
pub(crate) const SKIPS: &[Skip] = &[
    Skip {
        // 1.37 appends ` [Provider:aws,azure,gce]` to this text; the literal still matches.
        text: "should not disrupt a cloud load-balancer's connectivity during rollout",
        reason: "needs a cloud provider (aws, azure, gce or gke) with LoadBalancer Services and \
                 at least 3 schedulable nodes carrying real traffic; with --provider=skeleton the \
                 spec would only skip itself",
    },
    Skip {
        text: "should serve a basic image on each replica with a public image",
        reason: "checks each Pod's HTTP answer through the API server's Pod proxy: the local \
                 cluster's KWOK nodes run no containers and its API server refuses to proxy to \
                 their Pods (`resolve_deny`); fails the same with kube-controller-manager's \
                 ReplicaSet controller (ReplicaSet suite)",
    },
    Skip {
        text: "[Alpha]",
        reason: "needs an alpha feature gate, off by default in the local cluster (none of the \
                 Deployment specs of v1.36.5 or v1.37.2 is tagged so; kept for future versions)",
    },
    Skip {
        text: "[Feature:OffByDefault]",
        reason: "needs a feature gate that is off by default (beta or alpha); the local cluster \
                 runs with default gates (none of the Deployment specs of v1.36.5 or v1.37.2 is \
                 tagged so)",
    },
];

/// `--ginkgo.skip`: the [`SKIPS`] texts as one alternation of escaped literals (Go RE2 syntax).
pub(crate) fn skip_regex() -> String {
    SKIPS
        .iter()
        .map(|s| regex_escape(s.text))
        .collect::<Vec<_>>()
        .join("|")
}

/// Escapes RE2 metacharacters so `text` matches literally.
fn regex_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if r"\.+*?()|[]{}^$".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// The skip that leaves out a spec named `name`, if any.
pub(crate) fn skip_for(name: &str) -> Option<&'static Skip> {
    SKIPS.iter().find(|s| name.contains(s.text))
}

/// Whether a JUnit test case is one of the focused specs of `suite`.
fn is_focused(case: &TestCase, suite: Suite) -> bool {
    case.node_type() == "It" && case.text().starts_with(suite.prefix())
}

/// Command-line arguments of `e2e.test`.
pub(crate) fn e2e_args(
    suite: Suite,
    kubeconfig: &Path,
    kubectl: &Path,
    junit: &Path,
) -> Vec<String> {
    vec![
        format!("--kubeconfig={}", kubeconfig.display()),
        // No cloud: specs that need one skip themselves or are in SKIPS.
        "--provider=skeleton".to_owned(),
        format!("--kubectl-path={}", kubectl.display()),
        format!("--ginkgo.focus={}", suite.focus()),
        format!("--ginkgo.skip={}", skip_regex()),
        format!("--ginkgo.junit-report={}", junit.display()),
        "--ginkgo.no-color".to_owned(),
        // Far above the ~2 minutes they take; a hung spec fails instead of blocking CI.
        "--ginkgo.timeout=30m".to_owned(),
    ]
}

/// The per-spec result of a run.
#[derive(Debug, PartialEq)]
pub(crate) struct Summary {
    /// The suite run.
    pub(crate) suite: Suite,
    /// The focused specs, sorted by their text.
    pub(crate) specs: Vec<TestCase>,
    /// Suite-level nodes (BeforeSuite, AfterSuite, reporting) that did not pass.
    pub(crate) suite_failures: Vec<TestCase>,
}

impl Summary {
    /// Picks the focused specs and the failed suite nodes out of a report's test cases.
    pub(crate) fn from_cases(suite: Suite, cases: Vec<TestCase>) -> Summary {
        let mut specs = Vec::new();
        let mut suite_failures = Vec::new();
        for case in cases {
            if is_focused(&case, suite) {
                specs.push(case);
            } else if case.node_type() != "It" && case.outcome() == Outcome::Failed {
                suite_failures.push(case);
            }
        }
        // Ginkgo randomises the order; sort by text so runs compare line by line.
        specs.sort_by(|a, b| a.text().cmp(b.text()));
        Summary {
            suite,
            specs,
            suite_failures,
        }
    }

    fn count(&self, outcome: Outcome) -> usize {
        self.specs.iter().filter(|s| s.outcome() == outcome).count()
    }

    /// Problems that make the run a failure: failed specs or suite nodes, no spec at all, a
    /// focused spec left out although no [`SKIPS`] entry covers it.
    pub(crate) fn problems(&self) -> Vec<String> {
        let mut out = Vec::new();
        // After an interrupt Ginkgo reports the specs it did not reach as filtered out.
        let interrupted = self
            .specs
            .iter()
            .any(|s| matches!(s.status.as_str(), "interrupted" | "aborted"));
        if self.specs.is_empty() {
            out.push(format!(
                "the report holds no `{}` spec",
                self.suite.prefix().trim_end()
            ));
        }
        for s in &self.specs {
            match s.outcome() {
                Outcome::Failed => out.push(format!("{} ({})", s.text(), s.status)),
                Outcome::Skipped if s.filtered_out() && skip_for(&s.name).is_none() => {
                    out.push(if interrupted {
                        format!("{} did not run (the run was interrupted)", s.text())
                    } else {
                        format!(
                            "{} was left out, but no skip-list entry covers it",
                            s.text()
                        )
                    })
                }
                _ => {}
            }
        }
        for s in &self.suite_failures {
            out.push(format!("suite node {} ({})", s.name, s.status));
        }
        out
    }

    /// The human-readable result of a run of Kubernetes `kubernetes`'s specs: one line per
    /// spec, then the totals.
    pub(crate) fn render(&self, controller: Contender, kubernetes: &str) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "{}specs of Kubernetes {kubernetes} with {}:",
            self.suite.prefix(),
            match (self.suite, controller) {
                (Suite::Replicaset, Contender::Ours) =>
                    "our ReplicaSet controller (deployment-controller --controllers=*,replicaset-controller)",
                (Suite::Replicaset, Contender::Upstream) =>
                    "kube-controller-manager's ReplicaSet controller",
                (Suite::Deployment, _) => controller.describe(),
            }
        );
        for s in &self.specs {
            let verdict = match s.outcome() {
                Outcome::Passed => "PASS",
                Outcome::Failed => "FAIL",
                Outcome::Skipped => "SKIP",
            };
            let text = s.text().trim_start_matches(self.suite.prefix());
            let _ = writeln!(out, "  {verdict}  {:>6.1}s  {text}", s.time);
            match s.outcome() {
                Outcome::Failed => {
                    let first = s.message.as_deref().unwrap_or("").lines().next();
                    let _ = writeln!(out, "                 {}", first.unwrap_or("(no message)"));
                }
                Outcome::Skipped => {
                    let why = match (s.filtered_out(), skip_for(&s.name)) {
                        (true, Some(skip)) => format!("skip list: {}", skip.reason),
                        (true, None) => "left out by the filters (not in the skip list!)".into(),
                        (false, _) => s.message.clone().unwrap_or_default(),
                    };
                    let _ = writeln!(out, "                 {why}");
                }
                Outcome::Passed => {}
            }
        }
        for s in &self.suite_failures {
            let _ = writeln!(out, "  FAIL  suite node {} ({})", s.name, s.status);
        }
        let _ = writeln!(
            out,
            "passed {}, failed {}, skipped {} (of {} specs)",
            self.count(Outcome::Passed),
            self.count(Outcome::Failed),
            self.count(Outcome::Skipped),
            self.specs.len()
        );
        out
    }
}

pub(crate) fn run(args: ConformanceArgs) -> Result<()> {
    let started = Instant::now();
    plane::validate_name(&args.name)?;
    // Build everything first: a compile error should not cost a cluster start.
    let ours = match args.controller {
        Contender::Ours => Some(supervisor::build_dist()?),
        Contender::Upstream => None,
    };
    let release = args.kube.release;
    let cache = Cache::locate(release)?;
    toolchain::ensure_built(&cache)?;
    let (e2e_test, built) = toolchain::ensure_e2e_test_built(&cache)?;
    match built {
        Some(took) => eprintln!("==> built {} in {}", e2e_test.display(), fmt_duration(took)),
        None => eprintln!("==> {} is cached", e2e_test.display()),
    }
    if args.build_only {
        return Ok(());
    }

    let out_dir = out_dir(release, args.suite, args.controller);
    fs::create_dir_all(&out_dir).with_context(|| format!("creating {}", out_dir.display()))?;
    let junit_path = out_dir.join("junit.xml");
    let _ = fs::remove_file(&junit_path);
    let controller_log = out_dir.join("deployment-controller.log");
    let _ = fs::remove_file(&controller_log);

    // Start afresh: without Deployment controllers an interrupted run may have left (they lead
    // their own process groups) and without a cluster of this name in the other mode.
    let cluster = fresh::start(
        &UpOptions {
            name: args.name.clone(),
            nodes: 3,
            apiserver_args: Vec::new(),
            feature_gates: Vec::new(),
            scheduler_args: Vec::new(),
            controller_manager_args: Vec::new(),
            deployment_controller: args.controller == Contender::Upstream,
            replicaset_controller: args.suite == Suite::Deployment
                || args.controller == Contender::Upstream,
            release,
        },
        Fresh {
            reaper_pid_file: Some(&controller_log.with_extension("pid")),
            keep_on_failure: false,
        },
    )?;
    let info = cluster.info.clone();
    let result = with_cluster(
        &args,
        &info,
        ours.as_deref(),
        &e2e_test,
        &junit_path,
        &controller_log,
    );
    let down = cluster.down();
    eprintln!(
        "==> conformance run of Kubernetes {} with {} took {} (report: {})",
        release.kubernetes,
        args.controller.describe(),
        fmt_duration(started.elapsed()),
        junit_path.display()
    );
    let summary = result?;
    down?;
    let problems = summary.problems();
    if !problems.is_empty() {
        bail!(
            "{} problem(s) with {}:\n  {}",
            problems.len(),
            args.controller.describe(),
            problems.join("\n  ")
        );
    }
    Ok(())
}

/// Where a run keeps its JUnit report, `e2e.test`'s output and our controller's log:
/// `target/conformance/<version>/<ours|upstream>/` for the Deployment specs,
/// `…/replicaset-<ours|upstream>/` for the ReplicaSet ones, so runs of different releases and
/// suites do not overwrite each other.
pub(crate) fn out_dir(
    release: &Release,
    suite: Suite,
    controller: Contender,
) -> std::path::PathBuf {
    let leaf = match suite {
        Suite::Deployment => controller.slug().to_owned(),
        Suite::Replicaset => format!("replicaset-{}", controller.slug()),
    };
    plane::target_dir()
        .join("conformance")
        .join(release.kubernetes)
        .join(leaf)
}

/// Starts our controller if it is the one under test, runs the specs, stops it; checks the
/// Deployment controllers before, during and after. Prints and returns the summary.
fn with_cluster(
    args: &ConformanceArgs,
    info: &ClusterInfo,
    ours: Option<&Path>,
    e2e_test: &Path,
    junit_path: &Path,
    controller_log: &Path,
) -> Result<Summary> {
    let layout = Layout::new(&info.name);
    let kcm_pid = process::read_pid_file(&layout.pid_file(Component::ControllerManager))
        .map(|r| r.pid)
        .context("the cluster's kube-controller-manager has no pid file")?;
    let running = || fresh::deployment_controllers(&info.dir);
    check_controllers(args.controller, &running(), kcm_pid, None)?;
    let controller: Option<ControllerProcess> = match ours {
        Some(binary) => {
            xtask_contender::rbac::grant_deploy_rbac(&info.kubectl, &info.admin_kubeconfig)?;
            let mut extra = vec!["--secure-port", "0"];
            extra.extend(args.suite.our_args());
            let c = supervisor::start(binary, &info.controller_kubeconfig, controller_log, &extra)?;
            Some(c)
        }
        None => None,
    };
    let ours_pid = controller.as_ref().map(ControllerProcess::pid);
    check_controllers(args.controller, &running(), kcm_pid, ours_pid)?;
    eprintln!(
        "==> Deployment controller under test: {}",
        match ours_pid {
            Some(pid) => format!(
                "ours (pid {pid}); kube-controller-manager (pid {kcm_pid}) runs without its own"
            ),
            None => format!("kube-controller-manager's own (pid {kcm_pid}); ours is not running"),
        }
    );

    let e2e_log = junit_path.with_file_name("e2e.log");
    let argv = e2e_args(
        args.suite,
        &info.admin_kubeconfig,
        &info.kubectl,
        junit_path,
    );
    let ran = run_e2e(e2e_test, &argv, &e2e_log);
    // Still exactly one controller at the end (nothing else started meanwhile).
    let still_alone = check_controllers(args.controller, &running(), kcm_pid, ours_pid);
    if let Some(c) = controller {
        let pid = c.pid();
        let stopped = c.stop();
        if fresh::deployment_controllers(&info.dir)
            .iter()
            .any(|(p, _)| *p == pid)
        {
            bail!("our deployment-controller (pid {pid}) is still running after being stopped");
        }
        if let Err(e) = stopped {
            eprintln!("==> stopping the deployment-controller: {e:#}");
        }
        eprintln!(
            "==> deployment-controller log: {}",
            controller_log.display()
        );
    }
    still_alone?;
    let exit = ran?;
    let xml = fs::read_to_string(junit_path).with_context(|| {
        format!(
            "e2e.test ({exit}) wrote no JUnit report {}; see {}",
            junit_path.display(),
            e2e_log.display()
        )
    })?;
    let summary = Summary::from_cases(args.suite, junit::parse(&xml)?);
    print!(
        "{}",
        summary.render(args.controller, &info.kubernetes_version)
    );
    println!(
        "JUnit report: {}  e2e output: {}",
        junit_path.display(),
        e2e_log.display()
    );
    if !exit.success() && summary.problems().is_empty() {
        bail!(
            "e2e.test exited with {exit} although every spec passed; see {}",
            e2e_log.display()
        );
    }
    Ok(summary)
}

/// Runs `e2e.test argv…`, its output shown and copied to `log`. Returns its exit status.
fn run_e2e(binary: &Path, argv: &[String], log: &Path) -> Result<std::process::ExitStatus> {
    eprintln!("==> {} {}", binary.display(), argv.join(" "));
    let log_file = Arc::new(Mutex::new(
        fs::File::create(log).with_context(|| format!("creating {}", log.display()))?,
    ));
    let started = Instant::now();
    let mut child = Command::new(binary)
        .args(argv)
        .current_dir(log.parent().unwrap_or(Path::new(".")))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting {}", binary.display()))?;
    let pipes: [Box<dyn Read + Send>; 2] = [
        Box::new(child.stdout.take().expect("piped stdout")),
        Box::new(child.stderr.take().expect("piped stderr")),
    ];
    let readers: Vec<_> = pipes
        .into_iter()
        .map(|pipe| {
            let log_file = Arc::clone(&log_file);
            thread::spawn(move || {
                for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                    let _ = writeln!(log_file.lock().expect("log lock"), "{line}");
                    eprintln!("{line}");
                }
            })
        })
        .collect();
    let status = child.wait().context("waiting for e2e.test")?;
    for r in readers {
        let _ = r.join();
    }
    eprintln!(
        "==> e2e.test finished in {} ({status})",
        fmt_duration(started.elapsed())
    );
    Ok(status)
}

#[cfg(test)]
mod tests;

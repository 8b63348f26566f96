//! The suite's runs: which test targets need our controller, running them against a target with it started and stopped around them, and the commands they take.

use super::*;

/// File name of our controller's log.
pub(super) const CONTROLLER_LOG: &str = "deployment-controller.log";

/// Starts our deployment-controller against the target (as the controller identity bound to
/// deploy/'s RBAC on the local cluster), runs the suite, and stops the controller whatever
/// the suite's outcome.
pub(super) fn run_suite_with_controller(
    binary: &Path,
    target: &Target,
    test_args: &[String],
) -> Result<()> {
    let log = target
        .controller_log
        .as_deref()
        .context("no controller log path")?;
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/Cargo.toml");
    let text = std::fs::read_to_string(&manifest)
        .with_context(|| format!("reading {}", manifest.display()))?;
    let (without, with) = split_targets(&test_targets(&text));
    // First the tests that must not see a deployment controller (controller_ref uses
    // Deployments as mere owners of ReplicaSets it claims itself).
    let bare = Target {
        controller_log: None,
        ..target.clone()
    };
    let mut selection = vec!["--lib".to_owned()];
    selection.extend(
        without
            .iter()
            .flat_map(|t| ["--test".to_owned(), t.clone()]),
    );
    let first = run_suite(&bare, &selection, test_args);
    if with.is_empty() {
        return first;
    }
    // The controller runs as its own identity with exactly deploy/'s RBAC when the cluster
    // has one (local), else with the target's kubeconfig.
    let kubeconfig = match (&target.controller_kubeconfig, KUBECTL.get()) {
        (Some(identity), Some(kubectl)) => {
            xtask_contender::rbac::grant_deploy_rbac(kubectl, &target.kubeconfig)?;
            identity.clone()
        }
        _ => target.kubeconfig.clone(),
    };
    // No endpoints: several e2e runs may share the machine (tests/e2e/production.rs covers
    // them with processes of its own).
    let controller =
        xtask_contender::supervisor::start(binary, &kubeconfig, log, &["--secure-port", "0"])?;
    let selection: Vec<String> = with
        .iter()
        .flat_map(|t| ["--test".to_owned(), t.clone()])
        .collect();
    let second = run_suite(target, &selection, test_args);
    let log = controller.log_path().to_path_buf();
    let stopped = controller.stop();
    let second = combine(second, stopped, &log);
    match (first, second) {
        (Err(e), Err(e2)) => {
            eprintln!("==> the tests with the controller failed too: {e2:#}");
            Err(e)
        }
        (r1, r2) => r1.and(r2),
    }
}

/// Test targets of `kctrl-e2e` that need our deployment-controller running. All others run
/// before it starts, with no deployment controller in the cluster.
pub(super) const CONTROLLER_TEST_TARGETS: &[&str] = &["deployment"];

/// Names of the `[[test]]` targets in a Cargo manifest.
pub(super) fn test_targets(manifest: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut in_test = false;
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            in_test = line == "[[test]]";
        } else if in_test
            && let Some((key, value)) = line.split_once('=')
            && key.trim() == "name"
        {
            names.push(value.trim().trim_matches('"').to_owned());
        }
    }
    names
}

/// Test targets of `kctrl-e2e` that need a kube-apiserver set up otherwise than the suite's
/// cluster (feature gates off by default: `sharding_gate` needs `ShardedListAndWatch`). Each
/// starts a `kctrl-testenv` plane of its own (`KCTRL_E2E_TESTENV=1`); on the local cluster
/// they run once it is torn down ([`super::testenv::run_own_planes`]), elsewhere not at all.
pub(super) const OWN_PLANE_TEST_TARGETS: &[&str] = &["sharding_gate"];

/// Splits the test targets that run against the suite's cluster into (without the
/// controller, with it); [`OWN_PLANE_TEST_TARGETS`] are in neither.
pub(super) fn split_targets(targets: &[String]) -> (Vec<String>, Vec<String>) {
    targets
        .iter()
        .filter(|t| !OWN_PLANE_TEST_TARGETS.contains(&t.as_str()))
        .cloned()
        .partition(|t| !CONTROLLER_TEST_TARGETS.contains(&t.as_str()))
}

/// The test targets among `targets` that run on planes of their own
/// ([`OWN_PLANE_TEST_TARGETS`]).
pub(super) fn own_plane_targets(targets: &[String]) -> Vec<String> {
    targets
        .iter()
        .filter(|t| OWN_PLANE_TEST_TARGETS.contains(&t.as_str()))
        .cloned()
        .collect()
}

/// The suite's result, unless it passed and stopping the controller failed (a failed stop
/// never hides a test failure, but is reported).
pub(super) fn combine(suite: Result<()>, stopped: Result<()>, log: &Path) -> Result<()> {
    match (suite, stopped) {
        (Ok(()), Ok(())) => Ok(()),
        (Err(e), Ok(())) => {
            eprintln!("==> deployment-controller log: {}", log.display());
            Err(e)
        }
        (Ok(()), Err(e)) => Err(e.context("stopping the deployment-controller")),
        (Err(e), Err(stop)) => {
            eprintln!("==> stopping the deployment-controller failed too: {stop:#}");
            eprintln!("==> deployment-controller log: {}", log.display());
            Err(e)
        }
    }
}

/// `cargo test -p kctrl-e2e <selection…> -- <test_args…>` against `target`.
pub(super) fn run_suite(target: &Target, selection: &[String], test_args: &[String]) -> Result<()> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let mut cmd = Command::new(&cargo);
    cmd.args(["test", "-p", "kctrl-e2e"])
        .args(selection)
        .arg("--")
        .args(test_args);
    for (k, v) in target.env_vars() {
        eprintln!("==> {k}={v}");
        cmd.env(k, v);
    }
    if let Some(kubectl) = KUBECTL.get() {
        eprintln!("==> KCTRL_KUBECTL={}", kubectl.display());
        cmd.env("KCTRL_KUBECTL", kubectl);
    }
    if let Some(binary) = CONTROLLER_BINARY.get() {
        eprintln!("==> {CONTROLLER_BINARY_ENV}={}", binary.display());
        cmd.env(CONTROLLER_BINARY_ENV, binary);
    }
    eprintln!(
        "==> cargo test -p kctrl-e2e {} -- {}",
        selection.join(" "),
        test_args.join(" ")
    );
    let status = cmd.status().with_context(|| format!("running {cargo}"))?;
    if !status.success() {
        bail!("the e2e suite failed ({status})");
    }
    Ok(())
}

pub(super) fn run_command(argv: &[String]) -> Result<()> {
    xtask_contender::rbac::run_command(argv)
}

pub(super) fn output_of(argv: &[String]) -> Result<Vec<u8>> {
    let (program, args) = argv.split_first().context("empty command")?;
    let out = Command::new(program)
        .args(args)
        .output()
        .with_context(|| format!("running {program}"))?;
    if !out.status.success() {
        bail!(
            "{} failed ({}): {}",
            argv.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(out.stdout)
}

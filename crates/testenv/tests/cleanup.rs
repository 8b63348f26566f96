//! Nothing outlives a test: a test that panics leaves no process behind (and keeps the logs),
//! and a test process that exits without dropping its environment (the shared one lives in a
//! `static`) has it stopped and removed by the reaper.
//!
//! Each case runs in a child process of this test binary (the same test, selected by
//! `--exact`, with [`CHILD_ENV`] naming the case), which the parent then inspects. Like
//! `controller.rs`, these start real processes and run only with `KCTRL_TESTENV_E2E` set.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Node;
use kctrl_client::{Api, ListParams};
use kctrl_testenv::TestEnv;

const RUN_ENV: &str = "KCTRL_TESTENV_E2E";
/// Set in the child: which case it plays.
const CHILD_ENV: &str = "KCTRL_TESTENV_CLEANUP_CHILD";

fn enabled(test: &str) -> bool {
    if std::env::var_os(RUN_ENV).is_some() {
        return true;
    }
    let _ = writeln!(
        std::io::stderr(),
        "kctrl-testenv: {test} skipped: {RUN_ENV} is not set (`cargo xtask e2e` runs it)"
    );
    false
}

/// Runs test `name` of this binary in a child process playing `case`; returns its success and
/// the environment directory it printed.
fn run_child(name: &str, case: &str) -> (bool, PathBuf, String) {
    let out = Command::new(std::env::current_exe().unwrap())
        .args([name, "--exact", "--nocapture"])
        .env(CHILD_ENV, case)
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    let dir = text
        .lines()
        .find_map(|l| l.strip_prefix("ENV_DIR="))
        .unwrap_or_else(|| panic!("the child printed no ENV_DIR:\n{text}"));
    (out.status.success(), PathBuf::from(dir), text)
}

/// Processes whose command line mentions `dir`.
fn processes_of(dir: &Path) -> Vec<String> {
    let marker = dir.display().to_string();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().parse::<u32>().is_ok())
        .filter_map(|e| {
            let raw = std::fs::read(e.path().join("cmdline")).ok()?;
            let cmd = String::from_utf8_lossy(&raw).replace('\0', " ");
            cmd.contains(&marker).then_some(cmd)
        })
        .collect()
}

fn announce(dir: &Path) {
    let mut out = std::io::stdout();
    let _ = writeln!(out, "ENV_DIR={}", dir.display());
    let _ = out.flush();
}

#[tokio::test]
async fn a_panicking_test_stops_its_environment_and_keeps_the_logs() {
    const NAME: &str = "a_panicking_test_stops_its_environment_and_keeps_the_logs";
    if std::env::var(CHILD_ENV).as_deref() == Ok("panic") {
        let env = TestEnv::start().await.unwrap_or_else(|e| panic!("{e}"));
        announce(env.dir());
        panic!("a failing assertion in a test");
    }
    if !enabled(NAME) {
        return;
    }
    let (ok, dir, text) = run_child(NAME, "panic");
    assert!(!ok, "the child should have failed:\n{text}");
    assert!(text.contains("a failing assertion in a test"), "{text}");
    assert!(text.contains("kctrl-testenv: keeping"), "{text}");
    let leftovers = processes_of(&dir);
    assert!(leftovers.is_empty(), "still running: {leftovers:?}");
    // Kept for investigation, logs included.
    assert!(dir.join("logs").join("kube-apiserver.log").is_file());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
async fn an_exiting_test_process_has_its_shared_environment_removed() {
    const NAME: &str = "an_exiting_test_process_has_its_shared_environment_removed";
    if std::env::var(CHILD_ENV).as_deref() == Ok("exit") {
        // Every component, to check the selection end to end as well.
        let env = TestEnv::builder()
            .controller_manager(true)
            .kwok_nodes(2)
            .shared()
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let nodes = Api::<Node>::all(env.client().unwrap())
            .list(&ListParams::default())
            .await
            .unwrap();
        assert_eq!(nodes.items.len(), 2);
        announce(env.dir());
        // No drop, no unwinding: as when the harness exits with the static still alive.
        std::process::exit(0);
    }
    if !enabled(NAME) {
        return;
    }
    let (ok, dir, text) = run_child(NAME, "exit");
    assert!(ok, "{text}");
    // The reaper acts once the process is gone; give it a moment.
    let deadline = Instant::now() + Duration::from_secs(20);
    while (dir.exists() || !processes_of(&dir).is_empty()) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(processes_of(&dir).is_empty(), "{:?}", processes_of(&dir));
    assert!(!dir.exists(), "{} is still there", dir.display());
}

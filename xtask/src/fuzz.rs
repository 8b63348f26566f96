//! `cargo xtask fuzz`: builds the fuzz targets of `fuzz/` with libFuzzer and coverage
//! instrumentation, runs each for a while, and reports executions and crashes per target.
//!
//! How the build is made, and why no extra tool is installed: cargo-fuzz is a wrapper that
//! sets `RUSTFLAGS` and calls `cargo build`; its default AddressSanitizer needs the nightly-only
//! `-Zsanitizer`, and with `--sanitizer none` what remains are stable `-C` flags (sanitizer
//! coverage through `-Cpasses=sancov-module` and `-Cllvm-args`) plus `--cfg fuzzing`. This
//! command sets exactly those flags itself, so it works on the stable toolchain of a fresh
//! machine with nothing to install: libFuzzer comes from the `libfuzzer-sys` crate (crates.io,
//! pinned in Cargo.lock) and is compiled by its build script with the system C++ compiler.
//! Our crates forbid `unsafe`, which is what AddressSanitizer mainly guards; the properties
//! of each target (see `fuzz/src/`) are the oracle.
//!
//! Layout under `target/fuzz/` (its own target directory, so the instrumented build never
//! invalidates ordinary ones): `corpus/<target>/` grows across runs, `artifacts/<target>/`
//! receives crashing inputs, `logs/<target>.log` is libFuzzer's output. Seeds are read from
//! `fuzz/seeds/<target>/` and `fuzz/regressions/<target>/`, dictionaries from
//! `fuzz/dicts/<target>.dict`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{Context, bail};

/// The fuzz targets, as named in fuzz/Cargo.toml.
pub(crate) const TARGETS: &[&str] = &[
    "label_selector",
    "int_or_percent",
    "watch_framer",
    "watch_event",
    "status",
    "kubeconfig",
    "exec_credential",
    "go_duration",
    "object_meta",
    "protobuf_objects",
];

/// cargo-fuzz's instrumentation, minus the sanitizer: 8-bit edge counters, the PC table
/// libFuzzer needs to report coverage, and comparison tracing so it can solve `x == "..."`.
const RUSTFLAGS: &[&str] = &[
    "--cfg",
    "fuzzing",
    "-Cpasses=sancov-module",
    "-Cllvm-args=-sanitizer-coverage-level=4",
    "-Cllvm-args=-sanitizer-coverage-inline-8bit-counters",
    "-Cllvm-args=-sanitizer-coverage-pc-table",
    "-Cllvm-args=-sanitizer-coverage-trace-compares",
    "-Cdebug-assertions",
    "-Coverflow-checks",
];

/// Arguments of `cargo xtask fuzz`.
#[derive(clap::Args, Clone, Debug)]
pub(crate) struct FuzzArgs {
    /// Run only this target (repeatable); all targets by default.
    #[arg(long = "target", value_name = "TARGET", value_parser = clap::builder::PossibleValuesParser::new(TARGETS))]
    pub(crate) targets: Vec<String>,
    /// How long to fuzz each target, in seconds.
    #[arg(long, default_value_t = 60)]
    pub(crate) seconds: u64,
}

/// What one target's run measured.
struct Report {
    target: String,
    seconds: f64,
    executions: u64,
    coverage: Option<u64>,
    corpus: usize,
    crashes: Vec<PathBuf>,
}

/// The table of the targets' runs, for the terminal.
fn summary(reports: &[Report]) -> String {
    let mut t = xtask_report::markdown::Table::new()
        .left("target")
        .width(16)
        .right("seconds")
        .width(8)
        .right("executions")
        .width(12)
        .right("exec/s")
        .width(10)
        .right("cov")
        .width(8)
        .right("corpus")
        .width(8)
        .right("crashes")
        .width(8);
    for r in reports {
        t.row([
            r.target.clone(),
            format!("{:.0}", r.seconds),
            r.executions.to_string(),
            format!("{:.0}", r.executions as f64 / r.seconds.max(1e-3)),
            r.coverage.map_or("-".to_owned(), |c| c.to_string()),
            r.corpus.to_string(),
            r.crashes.len().to_string(),
        ]);
    }
    t.text()
}

pub(crate) fn run(args: FuzzArgs) -> anyhow::Result<()> {
    let root = crate::workspace_root();
    let targets: Vec<String> = if args.targets.is_empty() {
        TARGETS.iter().map(|t| (*t).to_owned()).collect()
    } else {
        args.targets.clone()
    };
    let fuzz_dir = root.join("target").join("fuzz");
    let triple = host_triple()?;

    let started = Instant::now();
    build(&root, &fuzz_dir, &triple, &targets)?;
    eprintln!(
        "==> fuzz targets built in {:.0} s",
        started.elapsed().as_secs_f64()
    );

    let mut reports = Vec::new();
    for target in &targets {
        let binary = fuzz_dir.join(&triple).join("release").join(target);
        reports.push(run_target(&root, &fuzz_dir, &binary, target, args.seconds)?);
    }

    println!();
    print!("{}", summary(&reports));
    let crashed: Vec<&Report> = reports.iter().filter(|r| !r.crashes.is_empty()).collect();
    if crashed.is_empty() {
        println!("no crashes");
        return Ok(());
    }
    for r in &crashed {
        for c in &r.crashes {
            println!(
                "crash in {}: {} (replay: cargo run -p kctrl-fuzz --bin {} -- {})",
                r.target,
                c.display(),
                r.target,
                c.display()
            );
        }
    }
    bail!(
        "{} target(s) crashed; add each input under fuzz/regressions/<target>/ with a fix",
        crashed.len()
    )
}

/// Builds the instrumented target binaries.
fn build(root: &Path, fuzz_dir: &Path, triple: &str, targets: &[String]) -> anyhow::Result<()> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let mut cmd = Command::new(&cargo);
    cmd.current_dir(root)
        .args(["build", "--release", "-p", "kctrl-fuzz", "--target", triple])
        .arg("--target-dir")
        .arg(fuzz_dir)
        .env("RUSTFLAGS", RUSTFLAGS.join(" "))
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env_remove("RUSTC_WORKSPACE_WRAPPER");
    for t in targets {
        cmd.args(["--bin", t]);
    }
    eprintln!(
        "==> building fuzz targets (RUSTFLAGS={})",
        RUSTFLAGS.join(" ")
    );
    let status = cmd.status().with_context(|| format!("running {cargo}"))?;
    if !status.success() {
        bail!("building the fuzz targets failed ({status})");
    }
    Ok(())
}

/// Runs one target for `seconds` and reads libFuzzer's final statistics.
fn run_target(
    root: &Path,
    fuzz_dir: &Path,
    binary: &Path,
    target: &str,
    seconds: u64,
) -> anyhow::Result<Report> {
    let corpus = fuzz_dir.join("corpus").join(target);
    let artifacts = fuzz_dir.join("artifacts").join(target);
    let logs = fuzz_dir.join("logs");
    for dir in [&corpus, &artifacts, &logs] {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let before = artifact_files(&artifacts)?;
    let log_path = logs.join(format!("{target}.log"));
    let log = std::fs::File::create(&log_path)
        .with_context(|| format!("creating {}", log_path.display()))?;

    let mut cmd = Command::new(binary);
    cmd.arg(format!("-max_total_time={seconds}"))
        .arg("-print_final_stats=1")
        .arg("-timeout=10")
        .arg("-rss_limit_mb=2048")
        .arg(format!("-artifact_prefix={}/", artifacts.display()));
    let dict = root
        .join("fuzz")
        .join("dicts")
        .join(format!("{target}.dict"));
    if dict.is_file() {
        cmd.arg(format!("-dict={}", dict.display()));
    }
    cmd.arg(&corpus);
    for inputs in ["seeds", "regressions"] {
        let dir = root.join("fuzz").join(inputs).join(target);
        if dir.is_dir() {
            cmd.arg(dir);
        }
    }
    eprintln!(
        "==> fuzzing {target} for {seconds} s (log: {})",
        log_path.display()
    );
    let started = Instant::now();
    let status = cmd
        .stdout(log.try_clone()?)
        .stderr(log)
        .stdin(Stdio::null())
        .status()
        .with_context(|| format!("running {}", binary.display()))?;
    let elapsed = started.elapsed().as_secs_f64();

    let text = std::fs::read_to_string(&log_path).unwrap_or_default();
    let executions = stat(&text, "stat::number_of_executed_units:").unwrap_or(0);
    let coverage = text
        .lines()
        .rev()
        .find_map(|l| l.split(" cov: ").nth(1))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok());
    let mut crashes: Vec<PathBuf> = artifact_files(&artifacts)?
        .into_iter()
        .filter(|f| !before.contains(f))
        .collect();
    if !status.success() && crashes.is_empty() {
        // libFuzzer failed without writing an input (e.g. a crash while loading the corpus).
        crashes.push(log_path.clone());
    }
    if !crashes.is_empty() {
        let tail: Vec<&str> = text.lines().rev().take(30).collect();
        eprintln!("--- {target}: last lines of {}", log_path.display());
        for line in tail.into_iter().rev() {
            eprintln!("{line}");
        }
    }
    Ok(Report {
        target: target.to_owned(),
        seconds: elapsed,
        executions,
        coverage,
        corpus: std::fs::read_dir(&corpus).map(|d| d.count()).unwrap_or(0),
        crashes,
    })
}

fn stat(text: &str, key: &str) -> Option<u64> {
    text.lines()
        .rev()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.trim().parse().ok())
}

fn artifact_files(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        files.push(entry?.path());
    }
    Ok(files)
}

/// The triple rustc builds for by default; the build names it so `RUSTFLAGS` reach only
/// the target binaries, not build scripts and proc macros.
fn host_triple() -> anyhow::Result<String> {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".to_owned());
    let out = Command::new(&rustc)
        .arg("-vV")
        .output()
        .with_context(|| format!("running {rustc} -vV"))?;
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("host: "))
        .map(str::to_owned)
        .context("rustc -vV printed no host triple")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_is_rendered_as_before() {
        let reports = [
            Report {
                target: "deployment_sync".into(),
                seconds: 30.2,
                executions: 123_456,
                coverage: Some(2048),
                corpus: 310,
                crashes: Vec::new(),
            },
            Report {
                target: "a_target_with_a_long_name".into(),
                seconds: 0.0,
                executions: 0,
                coverage: None,
                corpus: 0,
                crashes: vec![PathBuf::from("crash-1")],
            },
        ];
        xtask_report::golden::check(
            &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/fuzz/golden/summary.txt"),
            &summary(&reports),
        );
    }
}

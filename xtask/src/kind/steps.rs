//! Running the long commands of the kind path: output to a log file, a progress line every
//! 20 s, the log's tail in the error.

use std::fs;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use kctrl_cluster::process;
use kctrl_cluster::toolchain::fmt_duration;

/// How often a long step reports that it is still running.
const PROGRESS_EVERY: Duration = Duration::from_secs(20);

/// Runs `cmd` with stdout and stderr appended to `log`, printing `label` progress lines while
/// it runs; fails with the log's last lines.
pub(crate) fn run_logged(mut cmd: Command, log: &Path, label: &str) -> Result<Duration> {
    if let Some(dir) = log.parent() {
        fs::create_dir_all(dir)?;
    }
    let out = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .with_context(|| format!("opening {}", log.display()))?;
    use std::io::Write;
    writeln!(&out, "$ {cmd:?}")?;
    let started = Instant::now();
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(out)
        .spawn()
        .with_context(|| format!("starting {label}: {cmd:?}"))?;
    let mut last = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait()? {
            break s;
        }
        if last.elapsed() >= PROGRESS_EVERY {
            last = Instant::now();
            eprintln!("    … {label}: {} so far", fmt_duration(started.elapsed()));
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    if !status.success() {
        bail!(
            "{label} failed ({status}); last lines of {}:\n{}",
            log.display(),
            process::tail(log, 20)
        );
    }
    Ok(started.elapsed())
}

/// Runs `argv` and returns its stdout; fails with its stderr.
pub(crate) fn output(argv: &[&str]) -> Result<String> {
    let out = Command::new(argv[0])
        .args(&argv[1..])
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running {}", argv.join(" ")))?;
    if !out.status.success() {
        bail!(
            "`{}` failed ({}): {}",
            argv.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Runs `argv`, its output passed through; fails on a non-zero exit.
pub(crate) fn run(argv: &[&str]) -> Result<()> {
    let status = Command::new(argv[0])
        .args(&argv[1..])
        .stdin(Stdio::null())
        .status()
        .with_context(|| format!("running {}", argv.join(" ")))?;
    if !status.success() {
        bail!("`{}` failed ({status})", argv.join(" "));
    }
    Ok(())
}

/// A 64-bit FNV-1a hash of `text`, as 16 hex digits (cache keys of images).
pub(crate) fn fnv_hex(text: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.as_bytes() {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{h:016x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cache_key_changes_with_any_input() {
        assert_eq!(fnv_hex(""), "cbf29ce484222325");
        assert_ne!(fnv_hex("kubelet v1.37.2"), fnv_hex("kubelet v1.36.5"));
        assert_eq!(fnv_hex("a"), fnv_hex("a"));
    }

    #[test]
    fn a_failed_step_reports_its_log() {
        let log = std::env::temp_dir().join(format!("kctrl-steps-{}.log", std::process::id()));
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "echo the-reason; exit 3"]);
        let err = run_logged(cmd, &log, "failing step")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("failing step failed") && err.contains("the-reason"),
            "{err}"
        );
        let mut ok = Command::new("sh");
        ok.args(["-c", "echo fine"]);
        run_logged(ok, &log, "ok step").unwrap();
        std::fs::remove_file(&log).unwrap();
    }
}

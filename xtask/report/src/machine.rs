//! What the benchmark reports say of the machine they measured on.

use std::process::Command;

use crate::markdown::Table;

/// The CPU's `model name` in /proc/cpuinfo, or `unknown`.
pub fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find(|line| line.starts_with("model name"))
                .and_then(|line| line.split(':').nth(1))
                .map(|model| model.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into())
}

/// `MemTotal` of /proc/meminfo in GiB with one decimal (`15.6 GiB`), or `unknown`.
pub fn memory() -> String {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find_map(|line| line.strip_prefix("MemTotal:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        })
        .map_or_else(
            || "unknown".into(),
            |kb| format!("{:.1} GiB", kb / 1024.0 / 1024.0),
        )
}

/// The three load averages of /proc/loadavg (`0.52 0.61 0.70`), or `unknown`.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|load| {
            load.split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_else(|_| "unknown".into())
}

/// What `program args…` prints, trimmed, or `unknown` if it cannot run or fails (for the
/// machine facts of the reports).
pub fn command_output(program: &str, args: &[&str]) -> String {
    Command::new(program)
        .args(args)
        .output()
        .ok()
        .filter(|out| out.status.success())
        .map(|out| String::from_utf8_lossy(&out.stdout).trim().to_string())
        .unwrap_or_else(|| "unknown".into())
}

/// The machine and its load.
#[derive(Clone, Debug)]
pub struct Machine {
    cpus: usize,
    cpu_model: String,
    memory: String,
    kernel: String,
    rustc: String,
    kubernetes: String,
    commit: String,
    started: String,
    load_start: String,
    finished: String,
    load_end: String,
}

fn now() -> String {
    command_output("date", &["-u", "+%Y-%m-%d %H:%M UTC"])
}

impl Machine {
    /// Reads the machine at the start of the run.
    pub fn detect(kubernetes: &str) -> Machine {
        let cpu_model = cpu_model();
        let memory = memory();
        Machine {
            cpus: std::thread::available_parallelism().map_or(0, |n| n.get()),
            cpu_model,
            memory,
            kernel: command_output("uname", &["-sr"]),
            rustc: command_output("rustc", &["--version"]),
            kubernetes: kubernetes.to_owned(),
            commit: command_output("git", &["rev-parse", "--short", "HEAD"]),
            started: now(),
            load_start: load_average(),
            finished: String::new(),
            load_end: String::new(),
        }
    }

    /// The machine as a markdown table.
    pub fn table(&self) -> String {
        let mut t = Table::new().left("").left("");
        t.row([
            "CPU".to_owned(),
            format!("{} x {}", self.cpus, self.cpu_model),
        ])
        .row(["memory", self.memory.as_str()])
        .row(["kernel", self.kernel.as_str()])
        .row(["rustc", self.rustc.as_str()])
        .row(["Kubernetes", self.kubernetes.as_str()])
        .row(["commit", self.commit.as_str()])
        .row([
            "load average (1, 5, 15 min)".to_owned(),
            format!(
                "{} at the start, {} at the end",
                self.load_start, self.load_end
            ),
        ]);
        t.markdown()
    }

    /// When the run started.
    pub fn started(&self) -> &str {
        &self.started
    }

    /// When the run finished (empty before [`finish`](Self::finish)).
    pub fn finished(&self) -> &str {
        &self.finished
    }

    /// The Kubernetes version measured against.
    pub fn kubernetes(&self) -> &str {
        &self.kubernetes
    }

    /// Records the end of the run.
    pub fn finish(mut self) -> Machine {
        self.finished = now();
        self.load_end = load_average();
        self
    }
}

impl Machine {
    /// A machine of fixed facts, for the golden tests of the reports.
    pub fn sample() -> Machine {
        Machine {
            cpus: 2,
            cpu_model: "Test CPU".into(),
            memory: "4 GiB".into(),
            kernel: "Linux 6.1".into(),
            rustc: "rustc 1.90.0".into(),
            kubernetes: "v1.37.2".into(),
            commit: "abc1234".into(),
            started: "2026-11-28 12:00 UTC".into(),
            load_start: "0.50 0.40 0.30".into(),
            finished: "2026-11-28 12:30 UTC".into(),
            load_end: "1.00 0.80 0.60".into(),
        }
    }
}

//! Probes of running processes: free loopback ports, HTTPS GETs of the controllers' endpoints,
//! CPU time.

use std::net::TcpListener;
use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::parse::{self, CpuTicks};

/// A loopback port free right now (for a controller's `--secure-port`).
pub fn free_port() -> Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// GET over HTTPS with curl, certificate unchecked (the controllers' are self-signed).
pub fn curl(url: &str) -> Result<String> {
    curl_within(url, 30)
}

/// [`curl`] given up after `seconds` (for an endpoint that may not answer, e.g. a stopped
/// process's).
pub fn curl_within(url: &str, seconds: u32) -> Result<String> {
    stdout_of(
        Command::new("curl").args(["-sSfk", "--max-time", &seconds.to_string(), url]),
        &format!("curl {url}"),
    )
}

/// kube-apiserver's own /metrics (Prometheus text), read with the cluster's `kubectl` as its
/// admin.
pub fn apiserver_metrics(info: &kctrl_cluster::plane::ClusterInfo) -> Result<String> {
    stdout_of(
        Command::new(&info.kubectl)
            .arg("--kubeconfig")
            .arg(&info.admin_kubeconfig)
            .args(["get", "--raw", "/metrics"]),
        "kubectl get --raw /metrics",
    )
}

/// Runs `command` and returns its standard output; fails naming `what` with its standard error
/// if it could not run or exited unsuccessfully.
fn stdout_of(command: &mut Command, what: &str) -> Result<String> {
    let out = command
        .output()
        .with_context(|| format!("running {what}"))?;
    if !out.status.success() {
        bail!(
            "{what} failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// CPU time process `pid` has used so far (`/proc/<pid>/stat`).
pub fn process_cpu(pid: u32) -> Result<CpuTicks> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("reading /proc/{pid}/stat"))?;
    parse::parse_stat(&stat)
}

/// `getconf CLK_TCK` (100 on Linux unless told otherwise).
pub fn clock_ticks() -> u64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .unwrap_or(100)
}

//! The three programs compared (the Go peer, kube-rs's, ours): built, run one measurement at a time, and read.

use super::*;

pub(super) async fn next_line(
    lines: &mut Lines<BufReader<ChildStdout>>,
    want: &str,
) -> Result<Line> {
    loop {
        let line = tokio::time::timeout(Duration::from_secs(900), lines.next_line())
            .await
            .map_err(|_| anyhow!("no `{want}` line from the peer within 15 minutes"))??
            .ok_or_else(|| anyhow!("the peer exited before its `{want}` line"))?;
        let Ok(parsed) = serde_json::from_str::<Line>(&line) else {
            eprintln!("  peer: {line}");
            continue;
        };
        if parsed.event == want {
            return Ok(parsed);
        }
        bail!("expected a `{want}` line from the peer, got {line}");
    }
}

/// Reads CPU time from `/proc`: a peer's, and the cluster's apiserver's.
pub(super) struct CpuProbe {
    pub(super) apiserver_pid: Option<u32>,
    pub(super) ticks_per_second: u64,
}

impl CpuProbe {
    /// CPU-seconds (user + system) `pid` has used so far.
    fn cpu_of(&self, pid: u32) -> Option<f64> {
        xtask_contender::probe::process_cpu(pid)
            .ok()
            .map(|t| t.seconds(self.ticks_per_second))
    }

    fn apiserver_cpu(&self) -> Option<f64> {
        self.apiserver_pid.and_then(|pid| self.cpu_of(pid))
    }
}

#[allow(clippy::too_many_arguments)]
pub(super) async fn run_peer(
    peers: &Peers,
    client: &Client,
    kubeconfig: &Path,
    namespace: &str,
    pods: usize,
    updates: usize,
    (implementation, variant): (Impl, Variant),
    settle_ms: u64,
    tag: &str,
    probe: &CpuProbe,
) -> Result<Run> {
    let apiserver_before = probe.apiserver_cpu();
    let mut command = peers.command(implementation);
    command
        .arg(kubeconfig)
        .arg(namespace)
        .arg(pods.to_string())
        .arg(variant.arg())
        .arg(updates.to_string())
        .arg(settle_ms.to_string())
        .args(implementation.extra_args())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true);
    let mut child = command
        .spawn()
        .with_context(|| format!("starting the {} peer", implementation.name()))?;
    let mut stdin = child.stdin.take().expect("piped");
    let mut lines = BufReader::new(child.stdout.take().expect("piped")).lines();

    let synced = next_line(&mut lines, "synced").await?;
    let client_cpu_s = child
        .id()
        .and_then(|pid| probe.cpu_of(pid))
        .unwrap_or(f64::NAN);
    let apiserver_cpu_s = match (apiserver_before, probe.apiserver_cpu()) {
        (Some(before), Some(after)) => after - before,
        _ => f64::NAN,
    };
    if synced.objects != pods {
        bail!(
            "{} synced {} objects, expected {pods}",
            implementation.name(),
            synced.objects
        );
    }
    let steady = next_line(&mut lines, "steady").await?;
    stdin.write_all(b"go\n").await?;
    stdin.flush().await?;

    let (mut events_per_sec, mut events, mut patches_per_sec) = (0.0, 0, 0.0);
    if updates > 0 {
        next_line(&mut lines, "counting").await?;
        let api = Api::<Pod>::namespaced(client.clone(), namespace);
        let patch = Arc::new(Patch::Merge(serde_json::json!({
            "metadata": {"labels": {"kctrl.bench/burst": tag}}
        })));
        let elapsed = concurrently("", updates, move |i| {
            let (api, patch) = (api.clone(), patch.clone());
            async move {
                api.patch(&pod_name(i), &PatchParams::default(), &patch)
                    .await
                    .with_context(|| format!("patching pod {}", pod_name(i)))?;
                Ok(())
            }
        })
        .await?;
        patches_per_sec = updates as f64 / elapsed.as_secs_f64();
        let burst = next_line(&mut lines, "burst").await?;
        if burst.updates != updates as u64 {
            bail!(
                "{} counted {} update events, expected {updates}",
                implementation.name(),
                burst.updates
            );
        }
        events_per_sec = burst.events_per_sec;
        events = burst.updates;
    }
    drop(stdin);
    match tokio::time::timeout(Duration::from_secs(30), child.wait()).await {
        Ok(status) => {
            let status = status?;
            if !status.success() {
                bail!("the {} peer failed ({status})", implementation.name());
            }
        }
        Err(_) => {
            eprintln!(
                "  the {} peer did not exit; killing it",
                implementation.name()
            );
            child.kill().await?;
        }
    }
    Ok(Run {
        implementation,
        variant,
        pods,
        sync_ms: synced.sync_ms,
        peak_rss: steady.hwm_bytes.max(synced.hwm_bytes),
        steady_rss: steady.rss_bytes,
        client_cpu_s,
        apiserver_cpu_s,
        events_per_sec,
        events,
        patches_per_sec,
    })
}

pub(super) fn go_version() -> Result<String> {
    let output = std::process::Command::new("go")
        .arg("version")
        .output()
        .map_err(|error| {
            anyhow!(
                "`go` was not found on PATH ({error}). The client-go side of this benchmark is a \
                 Go program (bench/informer-go); install Go 1.26 or newer and retry."
            )
        })?;
    if !output.status.success() {
        bail!(
            "`go version` failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&output.stdout).trim().to_string())
}

pub(super) fn cargo_program() -> Result<String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    match std::process::Command::new(&cargo).arg("--version").output() {
        Ok(out) if out.status.success() => Ok(cargo),
        Ok(out) => bail!(
            "`{cargo} --version` failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ),
        Err(error) => bail!(
            "`{cargo}` was not found ({error}). The kctrl and kube-rs peers are Rust programs \
             built with cargo; install a Rust toolchain (rustup) and retry."
        ),
    }
}

/// `nice -n 10 <program>` where `nice` exists: builds share the machine with other work.
pub(super) fn niced(program: &str) -> std::process::Command {
    if std::process::Command::new("nice")
        .arg("true")
        .output()
        .is_ok_and(|out| out.status.success())
    {
        let mut command = std::process::Command::new("nice");
        command.args(["-n", "10", program]);
        command
    } else {
        std::process::Command::new(program)
    }
}

pub(super) fn build_go_peer(root: &Path, target: &Path) -> Result<PathBuf> {
    let out = target.join("bench").join("informer-go");
    let status = niced("go")
        .args(["build", "-trimpath", "-o"])
        .arg(&out)
        .arg(".")
        .env("GOTOOLCHAIN", "local")
        .current_dir(root.join("bench/informer-go"))
        .status()
        .context("running go build")?;
    if !status.success() {
        bail!("go build of bench/informer-go failed ({status})");
    }
    Ok(out)
}

pub(super) fn build_kube_rs_peer(root: &Path, target: &Path, cargo: &str) -> Result<PathBuf> {
    let target_dir = target.join("bench-kube-rs");
    let status = niced(cargo)
        .args([
            "build",
            "--release",
            "--quiet",
            "--locked",
            "--manifest-path",
        ])
        .arg(root.join("bench/informer-kube-rs/Cargo.toml"))
        .arg("--target-dir")
        .arg(&target_dir)
        .current_dir(root)
        .status()
        .context("running cargo build")?;
    if !status.success() {
        bail!("release build of bench/informer-kube-rs failed ({status})");
    }
    let built = target_dir.join("release").join("informer-kube-rs");
    let out = target.join("bench").join("informer-kube-rs");
    std::fs::create_dir_all(target.join("bench"))?;
    std::fs::copy(&built, &out)
        .with_context(|| format!("copying {} to {}", built.display(), out.display()))?;
    Ok(out)
}

pub(super) fn build_rust_peer(root: &Path, target: &Path, cargo: &str) -> Result<PathBuf> {
    let status = niced(cargo)
        .args(["build", "--release", "--quiet", "-p", "xtask"])
        .current_dir(root)
        .status()
        .context("running cargo build")?;
    if !status.success() {
        bail!("release build of xtask failed ({status})");
    }
    Ok(target
        .join("release")
        .join(format!("xtask{}", std::env::consts::EXE_SUFFIX)))
}

//! The controllers `bench controller` measures: one side at a time started through the
//! contender layer's supervisor, with what a phase reads of it (CPU, memory, its own request
//! counts, the apiserver's and the audit log's).

use std::fs;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use xtask_contender::parse::{self, Counts, CpuTicks, Memory};
use xtask_contender::probe::{curl, free_port, process_cpu};
use xtask_contender::supervisor::{self, ControllerProcess, Launch};

use super::{Env, Side};

/// No controller of the kinds measured may run against the cluster (outside the cluster's own
/// kube-controller-manager, which runs the others).
pub(super) fn ensure_no_deployment_controller(env: &Env) -> Result<()> {
    for &kind in env.measured.kinds() {
        xtask_contender::fresh::ensure_none_of(&env.info, kind)?;
    }
    Ok(())
}

/// A running controller process, one side of the comparison.
pub(super) struct Controller {
    pub(super) side: Side,
    measured: super::Measured,
    process: ControllerProcess,
    pub(super) log: PathBuf,
    port: u16,
}

/// Starts one side (after checking that no Deployment controller runs) with client QPS/burst
/// `qps`. `tag` names its log.
pub(super) fn start(env: &Env, side: Side, tag: &str, qps: (u32, u32)) -> Result<Controller> {
    start_with(env, side, tag, qps, &[])
}

/// [`start`] with `extra` flags after the common ones.
pub(super) fn start_with(
    env: &Env,
    side: Side,
    tag: &str,
    qps: (u32, u32),
    extra: &[&str],
) -> Result<Controller> {
    ensure_no_deployment_controller(env)?;
    let port = free_port()?;
    let log = env
        .dir
        .join("logs")
        .join(format!("{}-{tag}.log", side.slug()));
    let _ = fs::remove_file(&log);
    let mut common = vec![
        env.measured.controllers_flag(side).to_owned(),
        "--leader-elect=false".to_owned(),
        format!("--kube-api-qps={}", qps.0),
        format!("--kube-api-burst={}", qps.1),
        "--bind-address=127.0.0.1".to_owned(),
        format!("--secure-port={port}"),
    ];
    common.extend(
        env.measured
            .concurrency_flags()
            .iter()
            .map(|f| (*f).to_owned()),
    );
    let (binary, mut args) = match side {
        Side::Ours => (
            env.ours.clone(),
            vec![
                format!("--kubeconfig={}", env.info.controller_kubeconfig.display()),
                // Scraped without a token, as kube-controller-manager is (upstream_args).
                format!(
                    "--authorization-always-allow-paths={}",
                    supervisor::ALWAYS_ALLOW_PATHS
                ),
            ],
        ),
        Side::Upstream => {
            // The measured controllers' flag replaces the Deployment controller's.
            let mut args = supervisor::upstream_args(&env.info.controller_manager_kubeconfig());
            args.retain(|a| !a.starts_with("--controllers"));
            (env.kcm.clone(), args)
        }
    };
    args.extend(common);
    args.extend(extra.iter().map(|a| (*a).to_owned()));
    let (binary, args) = if side == Side::Ours && !env.ours_env.is_empty() {
        // `env` execs the controller, so the process id stays the controller's.
        let mut wrapped = env.ours_env.clone();
        wrapped.push(binary.display().to_string());
        wrapped.extend(args);
        (PathBuf::from("env"), wrapped)
    } else {
        (binary, args)
    };
    let (binary, args) = if env.callgrind && side == Side::Ours {
        let mut wrapped = vec![
            "--tool=callgrind".to_owned(),
            format!(
                "--callgrind-out-file={}",
                env.dir.join(format!("callgrind.out.{tag}")).display()
            ),
            binary.display().to_string(),
        ];
        wrapped.extend(args);
        (PathBuf::from("valgrind"), wrapped)
    } else {
        (binary, args)
    };
    eprintln!(
        "==> starting {} ({} {})",
        side.slug(),
        binary.display(),
        args.join(" ")
    );
    let process = ControllerProcess::spawn(&Launch {
        binary: &binary,
        args: &args,
        env: &[],
        log: &log,
        contender: side,
        label: side.slug(),
    })?;
    Ok(Controller {
        side,
        measured: env.measured,
        process,
        log,
        port,
    })
}

impl Controller {
    pub(super) fn pid(&self) -> u32 {
        self.process.pid()
    }

    /// Just before the spawn.
    pub(super) fn spawned(&self) -> Instant {
        self.process.spawned_at()
    }

    /// Whether the log says the caches of every measured controller are synced.
    pub(super) fn synced(&self) -> bool {
        self.measured.synced(self.side, &self.process.log_text())
    }

    /// `Some(why)` once the process has exited.
    pub(super) fn exited(&mut self) -> Option<String> {
        self.process.exit_message()
    }

    /// Waits for caches synced; returns seconds since the spawn.
    pub(super) async fn wait_synced(&mut self, timeout: Duration) -> Result<f64> {
        loop {
            if self.synced() {
                return Ok(self.process.since_spawn().as_secs_f64());
            }
            if let Some(why) = self.exited() {
                bail!(why);
            }
            if self.process.since_spawn() > timeout {
                bail!(
                    "{} did not sync its caches within {timeout:?}; log {}",
                    self.side.slug(),
                    self.log.display()
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Under `--callgrind`, closes the profile's current part as `<out>.<n>` named `part`
    /// (`callgrind_control --dump`), so each phase reads on its own.
    pub(super) fn dump_profile(&self, env: &Env, part: &str) -> Result<()> {
        if !env.callgrind || self.side != Side::Ours {
            return Ok(());
        }
        let out = Command::new("callgrind_control")
            .arg(format!("--dump={part}"))
            .arg(self.pid().to_string())
            .output()
            .context("running callgrind_control")?;
        // It exits 0 even when vgdb refuses its arguments: read what it said too.
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        if !out.status.success() || said.contains("error") {
            bail!(
                "callgrind_control --dump={part} {} failed ({}): {said}",
                self.pid(),
                out.status
            );
        }
        Ok(())
    }

    pub(super) fn usage(&self) -> Result<(CpuTicks, Memory)> {
        let pid = self.pid();
        let status = fs::read_to_string(format!("/proc/{pid}/status"))
            .with_context(|| format!("reading /proc/{pid}/status"))?;
        Ok((process_cpu(pid)?, parse::parse_status(&status)?))
    }

    /// Resets VmHWM to the current RSS (`/proc/<pid>/clear_refs`, Linux 4.0+).
    pub(super) fn reset_peak(&self, env: &Env) {
        if fs::write(format!("/proc/{}/clear_refs", self.pid()), "5").is_err() {
            env.peak_reset_works
                .store(false, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// The process's `rest_client_requests_total` by method.
    pub(super) fn client_requests(&self) -> Result<Counts> {
        let url = format!("https://127.0.0.1:{}/metrics", self.port);
        let text = curl(&url)?;
        let samples = parse::parse_samples(&text, "rest_client_requests_total")?;
        Ok(parse::sum_by(&samples, &["method"], |_| true))
    }

    /// SIGTERM (SIGKILL after the grace period); verifies the process is gone.
    pub(super) fn stop(self, env: &Env) -> Result<()> {
        let pid = self.pid();
        // valgrind writes its profile at exit: give it time.
        let grace = if env.callgrind {
            Duration::from_secs(300)
        } else {
            supervisor::STOP_GRACE
        };
        self.process.stop_within(grace)?;
        if std::path::Path::new(&format!("/proc/{pid}")).exists() {
            bail!("{} (pid {pid}) is still there", self.side.slug());
        }
        ensure_no_deployment_controller(env)
    }
}

/// The apiserver's `apiserver_request_total` for the workload resources.
pub(super) fn apiserver_requests(env: &Env) -> Result<Counts> {
    parse::apiserver_requests(&xtask_contender::probe::apiserver_metrics(&env.info)?)
}

/// The resident set (VmRSS) of the cluster's kube-apiserver and etcd.
pub(super) fn cluster_rss(env: &Env) -> Result<(u64, u64)> {
    use kctrl_cluster::plane::{Component, Layout};
    let layout = Layout::new(&env.info.name);
    let rss = |component: Component| -> Result<u64> {
        let record = kctrl_cluster::process::read_pid_file(&layout.pid_file(component))
            .with_context(|| format!("the cluster's {} has no pid file", component.name()))?;
        let status =
            fs::read_to_string(format!("/proc/{}/status", record.pid)).with_context(|| {
                format!(
                    "reading the status of {} ({})",
                    component.name(),
                    record.pid
                )
            })?;
        Ok(parse::parse_status(&status)?.rss)
    };
    Ok((rss(Component::Apiserver)?, rss(Component::Etcd)?))
}

/// The machine's CPU time from the first line of `/proc/stat`, in clock ticks.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct MachineCpu {
    busy: u64,
    total: u64,
}

impl MachineCpu {
    pub(super) fn read() -> Result<MachineCpu> {
        MachineCpu::parse(&fs::read_to_string("/proc/stat").context("reading /proc/stat")?)
    }

    /// The `cpu` line: user nice system idle iowait irq softirq steal ...; idle and iowait
    /// are not busy, guest time is already counted in user.
    fn parse(stat: &str) -> Result<MachineCpu> {
        let line = stat
            .lines()
            .find(|l| l.starts_with("cpu "))
            .context("/proc/stat has no cpu line")?;
        let fields: Vec<u64> = line
            .split_whitespace()
            .skip(1)
            .take(8)
            .map(str::parse)
            .collect::<Result<_, _>>()
            .with_context(|| format!("parsing /proc/stat's {line:?}"))?;
        if fields.len() < 5 {
            bail!(
                "/proc/stat's cpu line has {} fields: {line:?}",
                fields.len()
            );
        }
        let total: u64 = fields.iter().sum();
        Ok(MachineCpu {
            busy: total - fields[3] - fields[4],
            total,
        })
    }

    /// The busy share of the CPU time since `earlier` (0 to 1), `None` if no time passed.
    pub(super) fn busy_share_since(self, earlier: MachineCpu) -> Option<f64> {
        let total = self.total.checked_sub(earlier.total).filter(|t| *t > 0)?;
        let busy = self.busy.saturating_sub(earlier.busy);
        Some(busy as f64 / total as f64)
    }
}

pub(super) fn audit_len(env: &Env) -> u64 {
    fs::metadata(&env.audit_log).map(|m| m.len()).unwrap_or(0)
}

/// The audit counts of `side`'s measured controllers from byte `from` on.
pub(super) fn audit_since(env: &Env, from: u64, side: Side) -> Result<Counts> {
    use std::io::{Read, Seek, SeekFrom};
    let mut file = fs::File::open(&env.audit_log)
        .with_context(|| format!("opening {}", env.audit_log.display()))?;
    file.seek(SeekFrom::Start(from))?;
    let mut text = String::new();
    file.read_to_string(&mut text)?;
    let mut counts = Counts::new();
    for user in env.measured.users(side) {
        for (key, n) in parse::tally_audit(&text, user)?.0 {
            *counts.entry(key).or_default() += n;
        }
    }
    Ok(counts)
}

/// Readings at a phase boundary.
pub(super) struct Probe {
    pub(super) cpu: CpuTicks,
    /// `None` when the controller's /metrics could not be read (reported, not fatal).
    pub(super) client: Option<Counts>,
    pub(super) apiserver: Counts,
    pub(super) audit_offset: u64,
}

pub(super) fn probe(env: &Env, c: &Controller) -> Result<Probe> {
    Ok(Probe {
        cpu: c.usage()?.0,
        client: c
            .client_requests()
            .map_err(|e| eprintln!("  warning: {} /metrics: {e:#}", c.side.slug()))
            .ok(),
        apiserver: apiserver_requests(env)?,
        audit_offset: audit_len(env),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn machine_cpu_counts_everything_but_idle_and_iowait_as_busy() {
        let before = MachineCpu::parse("cpu  100 0 50 800 50 0 0 0 0 0\ncpu0 1 2 3 4 5\n").unwrap();
        let after = MachineCpu::parse("cpu  250 0 100 850 50 0 0 0 0 0\n").unwrap();
        assert_eq!(after.busy_share_since(before), Some(0.8));
        assert_eq!(after.busy_share_since(after), None);
        assert!(MachineCpu::parse("intr 1 2\n").is_err());
        assert!(MachineCpu::parse("cpu  1 x 3 4 5\n").is_err());
    }
}

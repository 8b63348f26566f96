//! The text formats `bench controller` reads: `/proc/<pid>/stat` and `/proc/<pid>/status`, the
//! Prometheus text exposition (the controllers' and the apiserver's `/metrics`), the
//! apiserver's JSON audit log, and the small statistics over them.

use std::collections::BTreeMap;

use anyhow::{Context, Result, anyhow, bail};

/// CPU time of a process: `utime` and `stime` of `/proc/<pid>/stat`, in clock ticks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuTicks {
    /// `utime`: time in user mode.
    pub user: u64,
    /// `stime`: time in kernel mode.
    pub system: u64,
}

impl CpuTicks {
    /// User plus system time in seconds, at `ticks_per_second` (`getconf CLK_TCK`).
    pub fn seconds(self, ticks_per_second: u64) -> f64 {
        (self.user + self.system) as f64 / ticks_per_second.max(1) as f64
    }

    /// System time alone in seconds, at `ticks_per_second`.
    pub fn system_seconds(self, ticks_per_second: u64) -> f64 {
        self.system as f64 / ticks_per_second.max(1) as f64
    }

    /// Time spent since `earlier` (saturating: the counters never go back for one process).
    pub fn since(self, earlier: CpuTicks) -> CpuTicks {
        CpuTicks {
            user: self.user.saturating_sub(earlier.user),
            system: self.system.saturating_sub(earlier.system),
        }
    }
}

/// Parses `utime` (field 14) and `stime` (field 15) of a `/proc/<pid>/stat` line. The command
/// name (field 2) is in parentheses and may itself contain spaces and parentheses, so the
/// fields are counted from the last `)`.
pub fn parse_stat(text: &str) -> Result<CpuTicks> {
    let close = text
        .rfind(')')
        .ok_or_else(|| anyhow!("no `)` closing the command name in {text:?}"))?;
    // After the `)`, field 3 (state) comes first: field N is at index N - 3.
    let fields: Vec<&str> = text[close + 1..].split_whitespace().collect();
    let field = |n: usize| -> Result<u64> {
        let raw = fields
            .get(n - 3)
            .ok_or_else(|| anyhow!("/proc stat line has no field {n}: {text:?}"))?;
        raw.parse()
            .with_context(|| format!("field {n} of a /proc stat line is not a number: {raw:?}"))
    };
    Ok(CpuTicks {
        user: field(14)?,
        system: field(15)?,
    })
}

/// Resident memory of a process from `/proc/<pid>/status`, in bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Memory {
    /// `VmRSS`: resident now.
    pub rss: u64,
    /// `VmHWM`: the peak resident set since start (or since the last reset through
    /// `/proc/<pid>/clear_refs`).
    pub peak: u64,
}

/// Parses `VmRSS` and `VmHWM` (given in kB) of `/proc/<pid>/status`.
pub fn parse_status(text: &str) -> Result<Memory> {
    let kib = |key: &str| -> Result<u64> {
        let line = text
            .lines()
            .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
            .ok_or_else(|| anyhow!("/proc status has no {key} line"))?;
        let number = line.trim().trim_end_matches("kB").trim();
        number
            .parse::<u64>()
            .with_context(|| format!("{key} of /proc status is not a number of kB: {line:?}"))
    };
    Ok(Memory {
        rss: kib("VmRSS")? * 1024,
        peak: kib("VmHWM")? * 1024,
    })
}

/// One sample of the Prometheus text format: its labels and value.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    /// Its labels, by name.
    pub labels: BTreeMap<String, String>,
    /// Its value.
    pub value: f64,
}

/// The samples of series `name` in a Prometheus (or OpenMetrics) text exposition. Comment and
/// `# EOF` lines and other series are skipped; a malformed sample line of `name` is an error.
pub fn parse_samples(text: &str, name: &str) -> Result<Vec<Sample>> {
    let mut samples = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let Some(rest) = line.strip_prefix(name) else {
            continue;
        };
        // Another series that merely starts with `name` (e.g. `name_created`).
        if !(rest.starts_with('{') || rest.starts_with(' ') || rest.starts_with('\t')) {
            continue;
        }
        let (labels, rest) = if let Some(inner) = rest.strip_prefix('{') {
            parse_labels(inner).with_context(|| format!("in sample {line:?}"))?
        } else {
            (BTreeMap::new(), rest)
        };
        let value = rest
            .split_whitespace()
            .next()
            .ok_or_else(|| anyhow!("sample without a value: {line:?}"))?;
        let value = match value {
            "+Inf" => f64::INFINITY,
            "-Inf" => f64::NEG_INFINITY,
            v => v
                .parse::<f64>()
                .with_context(|| format!("sample value is not a number: {line:?}"))?,
        };
        samples.push(Sample { labels, value });
    }
    Ok(samples)
}

/// Parses `a="x",b="y"}` (after the opening brace); returns the labels and the text after `}`.
fn parse_labels(mut text: &str) -> Result<(BTreeMap<String, String>, &str)> {
    let mut labels = BTreeMap::new();
    loop {
        text = text.trim_start_matches([' ', ',']);
        if let Some(rest) = text.strip_prefix('}') {
            return Ok((labels, rest));
        }
        let eq = text
            .find('=')
            .ok_or_else(|| anyhow!("label without `=` in {text:?}"))?;
        let key = text[..eq].trim().to_owned();
        let rest = text[eq + 1..]
            .strip_prefix('"')
            .ok_or_else(|| anyhow!("value of label {key} is not quoted"))?;
        let mut value = String::new();
        let mut chars = rest.char_indices();
        let end = loop {
            match chars.next() {
                None => bail!("unterminated value of label {key}"),
                Some((i, '"')) => break i,
                Some((_, '\\')) => match chars.next() {
                    Some((_, 'n')) => value.push('\n'),
                    Some((_, c)) => value.push(c),
                    None => bail!("unterminated escape in label {key}"),
                },
                Some((_, c)) => value.push(c),
            }
        };
        labels.insert(key, value);
        text = &rest[end + 1..];
    }
}

/// Request counts keyed by a label combination, e.g. `"PUT"` or `"update replicasets/status"`.
pub type Counts = BTreeMap<String, f64>;

/// Sums samples by the values of `keys` (joined by a space; a missing label counts as empty),
/// keeping only samples for which `keep` is true.
pub fn sum_by(samples: &[Sample], keys: &[&str], keep: impl Fn(&Sample) -> bool) -> Counts {
    let mut out = Counts::new();
    for s in samples.iter().filter(|s| keep(s)) {
        let key = keys
            .iter()
            .map(|k| s.labels.get(*k).map_or("", String::as_str))
            .collect::<Vec<_>>()
            .join(" ");
        *out.entry(key).or_default() += s.value;
    }
    out
}

/// `after - before` per key; keys that did not change are dropped.
pub fn delta(before: &Counts, after: &Counts) -> Counts {
    after
        .iter()
        .map(|(k, v)| (k.clone(), v - before.get(k).copied().unwrap_or(0.0)))
        .filter(|(_, d)| *d != 0.0)
        .collect()
}

/// The apiserver's `apiserver_request_total` summed by `verb` and `resource[/subresource]`
/// (over codes, scopes and versions), for the resources a Deployment controller touches.
pub fn apiserver_requests(text: &str) -> Result<Counts> {
    let samples = parse_samples(text, "apiserver_request_total")?;
    let mut out = Counts::new();
    for s in &samples {
        let label = |k: &str| s.labels.get(k).map_or("", String::as_str);
        let resource = label("resource");
        if !matches!(resource, "deployments" | "replicasets" | "pods" | "events") {
            continue;
        }
        let key = match label("subresource") {
            "" => format!("{} {resource}", label("verb")),
            sub => format!("{} {resource}/{sub}", label("verb")),
        };
        *out.entry(key).or_default() += s.value;
    }
    Ok(out)
}

/// Whether an audit/apiserver verb writes (changes stored state).
pub fn is_write(verb: &str) -> bool {
    matches!(
        verb.to_ascii_lowercase().as_str(),
        "create" | "update" | "patch" | "delete" | "deletecollection" | "post" | "put"
    )
}

/// Requests of one user in an apiserver JSON audit log, keyed `verb resource[/subresource]`.
/// Only `ResponseComplete` events count (one per request). Returns the counts and the number of
/// bytes consumed: a last line without its newline (still being written) is left for later.
pub fn tally_audit(text: &str, user: &str) -> Result<(Counts, usize)> {
    let mut counts = Counts::new();
    let mut consumed = 0;
    for line in text.split_inclusive('\n') {
        if !line.ends_with('\n') {
            break;
        }
        consumed += line.len();
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let event: serde_json::Value = serde_json::from_str(line)
            .with_context(|| format!("audit log line is not JSON: {line:.200}"))?;
        if event["stage"] != "ResponseComplete" || event["user"]["username"] != user {
            continue;
        }
        let verb = event["verb"].as_str().unwrap_or("?");
        let resource = event["objectRef"]["resource"].as_str().unwrap_or("-");
        let key = match event["objectRef"]["subresource"].as_str() {
            Some(sub) if !sub.is_empty() => format!("{verb} {resource}/{sub}"),
            _ => format!("{verb} {resource}"),
        };
        *counts.entry(key).or_default() += 1.0;
    }
    Ok((counts, consumed))
}

/// The sum of the counts whose key starts with a write verb.
pub fn writes(counts: &Counts) -> f64 {
    counts
        .iter()
        .filter(|(k, _)| is_write(k.split(' ').next().unwrap_or("")))
        .map(|(_, v)| v)
        .sum()
}

/// Whether a kube-controller-manager log says the Deployment controller's caches are synced.
///
/// In 1.36 the controller waits with the context kube-controller-manager runs it with, so its
/// lines are a bare `"Waiting for caches to sync"` / `"Caches are synced"` pair with no
/// key/value pairs, and so are the serving stack's (its client-CA and request-header
/// controllers start three such waits just before the Deployment controller). A bare synced
/// line therefore does not say whose caches synced; the Deployment controller's have once
/// its `"Starting controller" controller="deployment"` line is in the log and every bare wait
/// has its synced line. If a serving-stack cache synced after the controller's, that reads
/// the later time (an upper bound; in the runs so far they synced within ~0.1 s of start,
/// before the Deployment controller's). Named forms (`logger="deployment-controller"`,
/// `controller="deployment"`, `Caches are synced for deployment`) count at once.
pub fn kcm_deployment_synced(log: &str) -> bool {
    kcm_controller_synced(log, "deployment")
}

/// [`kcm_deployment_synced`] for the kube-controller-manager controller `name` (`deployment`,
/// `replicaset`): its `"Starting controller"` line names it with `controller="name"` or
/// `name="name"` (the ReplicaSet controller's form), its logger is `name-controller`.
pub fn kcm_controller_synced(log: &str, name: &str) -> bool {
    const SYNCED: &str = "\"Caches are synced\"";
    const WAITING: &str = "\"Waiting for caches to sync\"";
    const STARTING: &str = "\"Starting controller\"";
    fn after<'l>(l: &'l str, message: &str) -> Option<&'l str> {
        l.find(message).map(|at| l[at + message.len()..].trim())
    }
    let logger = format!("logger=\"{name}-controller\"");
    let by_controller = format!("controller=\"{name}\"");
    let by_name = format!("name=\"{name}\"");
    let named = |rest: &str| rest.contains(&logger) || rest.contains(&by_controller);
    let synced_for = format!("Caches are synced for {name}");
    let (mut started, mut waits, mut synced) = (false, 0usize, 0usize);
    for l in log.lines() {
        if l.contains(&synced_for) {
            return true;
        }
        if let Some(rest) = after(l, SYNCED) {
            if rest.is_empty() {
                synced += 1;
            } else if named(rest) {
                return true;
            }
        } else if let Some(rest) = after(l, WAITING) {
            if rest.is_empty() {
                waits += 1;
            }
        } else if let Some(rest) = after(l, STARTING)
            && (rest.contains(&by_controller) || rest.contains(&by_name))
        {
            started = true;
        }
    }
    started && waits > 0 && synced >= waits
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_counted_after_the_last_parenthesis() {
        // The command name holds a space and a parenthesis; utime 1234, stime 567.
        let line = "4242 (deploy (x) ctl) S 1 4242 4242 0 -1 4194560 9000 0 12 0 1234 567 0 0 20 0 \
                    7 0 99887 123456789 2000 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0";
        let ticks = parse_stat(line).unwrap();
        assert_eq!(
            ticks,
            CpuTicks {
                user: 1234,
                system: 567
            }
        );
        assert!((ticks.seconds(100) - 18.01).abs() < 1e-9);
        let later = CpuTicks {
            user: 1300,
            system: 600,
        };
        assert_eq!(
            later.since(ticks),
            CpuTicks {
                user: 66,
                system: 33
            }
        );
    }

    #[test]
    fn a_truncated_stat_line_is_an_error() {
        assert!(parse_stat("4242 (x) S 1 2 3").is_err());
        assert!(parse_stat("no parenthesis at all").is_err());
        let bad = "1 (x) S 1 1 1 0 -1 0 0 0 0 0 lots 5 0 0";
        let err = parse_stat(bad).unwrap_err().to_string();
        assert!(err.contains("field 14"), "{err}");
    }

    #[test]
    fn status_gives_rss_and_peak_in_bytes() {
        let text = "Name:\tdeployment-cont\nVmPeak:\t  900000 kB\nVmHWM:\t   35000 kB\nVmRSS:\t   30000 kB\nThreads:\t3\n";
        let m = parse_status(text).unwrap();
        assert_eq!(m.rss, 30000 * 1024);
        assert_eq!(m.peak, 35000 * 1024);
        let err = parse_status("VmRSS:\t1 kB\n").unwrap_err().to_string();
        assert!(err.contains("VmHWM"), "{err}");
    }

    #[test]
    fn prometheus_samples_with_labels_escapes_and_timestamps() {
        let text = r#"# HELP rest_client_requests_total Number of HTTP requests
# TYPE rest_client_requests_total counter
rest_client_requests_total{code="200",host="127.0.0.1:6443",method="GET"} 12
rest_client_requests_total{code="201",host="127.0.0.1:6443",method="POST"} 3 1700000000000
rest_client_requests_total{code="409",host="a\"b\\c",method="PUT",} 2.5e1
rest_client_requests_total_created{code="200"} 1.7e9
rest_client_requests_totalx 1
rest_client_request_duration_seconds_bucket{le="+Inf"} 9
# EOF
"#;
        let samples = parse_samples(text, "rest_client_requests_total").unwrap();
        assert_eq!(samples.len(), 3);
        assert_eq!(samples[0].labels["method"], "GET");
        assert_eq!(samples[1].value, 3.0);
        assert_eq!(samples[2].labels["host"], r#"a"b\c"#);
        assert_eq!(samples[2].value, 25.0);
        let by_method = sum_by(&samples, &["method"], |_| true);
        assert_eq!(by_method["PUT"], 25.0);
        let ok = sum_by(&samples, &["method", "code"], |s| s.labels["code"] != "409");
        assert_eq!(ok.len(), 2);
        assert_eq!(ok["POST 201"], 3.0);
        let unlabelled = parse_samples("up 1\n", "up").unwrap();
        assert!(unlabelled[0].labels.is_empty());
        let inf = parse_samples(text, "rest_client_request_duration_seconds_bucket").unwrap();
        assert_eq!(inf[0].labels["le"], "+Inf");
    }

    #[test]
    fn malformed_samples_are_errors() {
        assert!(parse_samples("m{a=\"1\" 3\n", "m").is_err());
        assert!(parse_samples("m{a=1} 3\n", "m").is_err());
        assert!(parse_samples("m{a=\"1\"} three\n", "m").is_err());
        assert!(parse_samples("m{a=\"1\"}\n", "m").is_err());
    }

    #[test]
    fn deltas_keep_what_changed() {
        let before: Counts = [("GET".into(), 10.0), ("PUT".into(), 4.0)].into();
        let after: Counts = [
            ("GET".into(), 10.0),
            ("PUT".into(), 9.0),
            ("POST".into(), 2.0),
        ]
        .into();
        let d = delta(&before, &after);
        assert_eq!(d.len(), 2);
        assert_eq!(d["PUT"], 5.0);
        assert_eq!(d["POST"], 2.0);
        assert_eq!(
            writes(&[("update x".into(), 5.0), ("list x".into(), 9.0)].into()),
            5.0
        );
    }

    #[test]
    fn apiserver_requests_by_verb_and_subresource() {
        let text = r#"apiserver_request_total{code="200",component="apiserver",dry_run="",group="apps",resource="deployments",scope="resource",subresource="status",verb="UPDATE",version="v1"} 7
apiserver_request_total{code="409",component="apiserver",dry_run="",group="apps",resource="deployments",scope="resource",subresource="status",verb="UPDATE",version="v1"} 2
apiserver_request_total{code="201",component="apiserver",dry_run="",group="apps",resource="replicasets",scope="resource",subresource="",verb="POST",version="v1"} 4
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="nodes",scope="resource",subresource="",verb="PATCH",version="v1"} 99
"#;
        let counts = apiserver_requests(text).unwrap();
        assert_eq!(counts["UPDATE deployments/status"], 9.0);
        assert_eq!(counts["POST replicasets"], 4.0);
        assert!(!counts.keys().any(|k| k.contains("nodes")));
        assert_eq!(writes(&counts), 13.0);
    }

    #[test]
    fn audit_log_counts_one_user_and_leaves_a_partial_line() {
        let ours = "system:serviceaccount:kube-system:kctrl-deployment-controller";
        let log = format!(
            "{}\n{}\n{}\n{}\n{}",
            r#"{"stage":"ResponseComplete","verb":"update","user":{"username":"USER"},"objectRef":{"resource":"deployments","subresource":"status"}}"#.replace("USER", ours),
            r#"{"stage":"ResponseComplete","verb":"create","user":{"username":"USER"},"objectRef":{"resource":"replicasets"}}"#.replace("USER", ours),
            r#"{"stage":"ResponseStarted","verb":"watch","user":{"username":"USER"},"objectRef":{"resource":"pods"}}"#.replace("USER", ours),
            r#"{"stage":"ResponseComplete","verb":"update","user":{"username":"someone-else"},"objectRef":{"resource":"replicasets"}}"#,
            r#"{"stage":"ResponseComplete","verb":"create","user":{"usern"#,
        );
        let (counts, consumed) = tally_audit(&log, ours).unwrap();
        assert_eq!(counts.len(), 2);
        assert_eq!(counts["update deployments/status"], 1.0);
        assert_eq!(counts["create replicasets"], 1.0);
        assert_eq!(consumed, log.rfind('\n').unwrap() + 1);
        assert!(tally_audit("not json\n", ours).is_err());
    }

    #[test]
    fn kcm_sync_line() {
        let log = "I1124 01:00:00.1 1 shared_informer.go:350] \"Waiting for caches to sync\" logger=\"deployment-controller\"\n";
        assert!(!kcm_deployment_synced(log));
        let other = "I1124 01:00:00.2 1 shared_informer.go:357] \"Caches are synced\" controller=\"replicaset\"\n";
        assert!(!kcm_deployment_synced(&format!("{log}{other}")));
        let serving = "I1124 01:00:00.2 1 shared_informer.go:388] \"Caches are synced\" controller=\"RequestHeaderAuthRequestController\"\n";
        assert!(!kcm_deployment_synced(&format!("{log}{other}{serving}")));
        let synced = "I1124 01:00:00.3 1 shared_informer.go:409] \"Caches are synced\" logger=\"deployment-controller\"\n";
        assert!(kcm_deployment_synced(&format!(
            "{log}{other}{serving}{synced}"
        )));
        assert!(kcm_deployment_synced(
            "I1124 x] \"Caches are synced\" controller=\"deployment\"\n"
        ));
        assert!(kcm_deployment_synced(
            "I0101 x] Caches are synced for deployment\n"
        ));
        let bare_wait =
            "I1124 01:00:00.1 1 shared_informer.go:402] \"Waiting for caches to sync\"\n";
        let starting = "I1124 01:00:00.1 1 deployment_controller.go:180] \"Starting controller\" controller=\"deployment\"\n";
        let bare = "I1124 01:00:00.4 1 shared_informer.go:409] \"Caches are synced\"\n";
        assert!(!kcm_deployment_synced(&format!(
            "{starting}{bare_wait}{serving}"
        )));
        assert!(kcm_deployment_synced(&format!(
            "{starting}{bare_wait}{serving}{bare}"
        )));
        // 1.36: three bare waits of the serving stack, then the controller's; the first three
        // bare synced lines are theirs.
        let head = format!("{bare_wait}{bare_wait}{bare_wait}{starting}{bare_wait}");
        assert!(!kcm_deployment_synced(&head));
        assert!(!kcm_deployment_synced(&format!("{head}{bare}{bare}{bare}")));
        assert!(kcm_deployment_synced(&format!(
            "{head}{bare}{bare}{bare}{bare}"
        )));
        // The serving stack synced before the controller started waiting: not yet.
        assert!(!kcm_deployment_synced(&format!(
            "{bare_wait}{bare_wait}{bare}{bare}"
        )));
    }

    #[test]
    fn kcm_replicaset_sync_line() {
        let rs = |log: &str| kcm_controller_synced(log, "replicaset");
        let bare_wait = "I1 x] \"Waiting for caches to sync\"\n";
        let bare = "I1 x] \"Caches are synced\"\n";
        // The ReplicaSet controller names itself with `name=`.
        let starting = "I1 replica_set.go:285] \"Starting controller\" name=\"replicaset\"\n";
        let deployment = "I1 x] \"Starting controller\" controller=\"deployment\"\n";
        assert!(!rs(&format!("{deployment}{bare_wait}{bare}")));
        assert!(!rs(&format!("{starting}{bare_wait}")));
        assert!(rs(&format!("{starting}{bare_wait}{bare}")));
        assert!(rs(
            "I1 x] \"Caches are synced\" controller=\"replicaset\"\n"
        ));
        assert!(!rs(
            "I1 x] \"Caches are synced\" controller=\"deployment\"\n"
        ));
        assert!(rs(
            "INFO Caches are synced for replicaset controller=\"replicaset\"\n"
        ));
    }
}

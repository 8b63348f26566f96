//! The authorization scenarios of [`super::scenarios`]: `/metrics` scraped from inside the
//! cluster with and without the right to it, and no forbidden request of the controller.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use kctrl_cluster::kind::CONTROLLER_IMAGE;

use super::scenarios::Kube;

/// Namespace of the scraping pods and their service accounts.
const NAMESPACE: &str = "kctrl-scrape";
/// The ClusterRole (and its binding) granting `get` on `/metrics`.
const METRICS_ROLE: &str = "kctrl-scenario:metrics-reader";
/// The controller's secure port (deploy/'s `--secure-port`).
const PORT: u16 = 10257;
/// A metric every running controller exports.
const METRIC: &str = "workqueue_adds_total";

/// The shell script of a scraping pod: the response's status line, then how many lines name
/// [`METRIC`].
fn scrape_script(ip: &str) -> String {
    format!(
        "t=$(cat /var/run/secrets/kubernetes.io/serviceaccount/token); \
         printf 'GET /metrics HTTP/1.1\\r\\nHost: {ip}\\r\\nAuthorization: Bearer %s\\r\\nConnection: close\\r\\n\\r\\n' \"$t\" \
         | timeout 30 openssl s_client -connect {ip}:{PORT} -quiet 2>/dev/null > /tmp/out; \
         head -1 /tmp/out; echo metric-lines $(grep -c '^{METRIC}' /tmp/out)"
    )
}

/// The objects of the scenario: two service accounts, one bound to [`METRICS_ROLE`], and a
/// scraping pod for each (on `image`, which has a shell and openssl).
fn manifest(image: &str, ip: &str) -> String {
    let script = serde_json::to_string(&scrape_script(ip)).unwrap_or_default();
    let mut m = format!(
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {NAMESPACE}\n---\n\
         apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  name: {METRICS_ROLE}\n\
         rules:\n- nonResourceURLs: [\"/metrics\"]\n  verbs: [\"get\"]\n---\n\
         apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata:\n  name: {METRICS_ROLE}\n\
         roleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: ClusterRole\n  name: {METRICS_ROLE}\n\
         subjects:\n- kind: ServiceAccount\n  name: allowed\n  namespace: {NAMESPACE}\n"
    );
    for sa in ["allowed", "denied"] {
        m.push_str(&format!(
            "---\napiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: {sa}\n  namespace: {NAMESPACE}\n\
             ---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: scrape-{sa}\n  namespace: {NAMESPACE}\n\
             spec:\n  serviceAccountName: {sa}\n  restartPolicy: Never\n  terminationGracePeriodSeconds: 0\n\
             \x20 containers:\n  - name: scrape\n    image: {image}\n    imagePullPolicy: IfNotPresent\n\
             \x20   command: [\"/bin/bash\", \"-c\", {script}]\n"
        ));
    }
    m
}

/// `metrics`: see [`super::scenarios`].
pub(super) fn metrics(kube: &Kube) -> Result<String> {
    // The leader's address (both pods serve /metrics).
    let deadline = Instant::now() + Duration::from_secs(120);
    let ip = loop {
        let pods = kube.pods()?;
        if let Some(p) = pods
            .iter()
            .find(|p| p.ready && !p.ip.is_empty() && p.image == CONTROLLER_IMAGE)
        {
            break p.ip.clone();
        }
        ensure!(
            Instant::now() < deadline,
            "no Ready controller pod: {pods:?}"
        );
        std::thread::sleep(Duration::from_secs(1));
    };
    // kube-proxy's image: Debian with bash and openssl, already on every node.
    let image = kube.get(&[
        "-n",
        "kube-system",
        "get",
        "daemonset",
        "kube-proxy",
        "-o",
        "jsonpath={.spec.template.spec.containers[0].image}",
    ])?;
    let started = Instant::now();
    kube.apply(&manifest(image.trim(), &ip))?;
    let result = (|| -> Result<String> {
        let mut out = Vec::new();
        for sa in ["allowed", "denied"] {
            let pod = format!("scrape-{sa}");
            let deadline = Instant::now() + Duration::from_secs(120);
            loop {
                let phase = kube.get(&[
                    "-n",
                    NAMESPACE,
                    "get",
                    "pod",
                    &pod,
                    "-o",
                    "jsonpath={.status.phase}",
                ])?;
                match phase.trim() {
                    "Succeeded" => break,
                    "Failed" => bail!(
                        "{pod} failed: {}",
                        kube.get(&["-n", NAMESPACE, "logs", &pod])
                            .unwrap_or_default()
                    ),
                    _ if Instant::now() > deadline => bail!("{pod} still {phase:?} after 120s"),
                    _ => std::thread::sleep(Duration::from_millis(500)),
                }
            }
            out.push(kube.get(&["-n", NAMESPACE, "logs", &pod])?);
        }
        let took = started.elapsed();
        let (allowed, denied) = (parse(&out[0]), parse(&out[1]));
        ensure!(
            allowed.0 == Some(200) && allowed.1 > 0,
            "with get on /metrics: expected 200 and {METRIC}, got {:?}",
            out[0].trim()
        );
        ensure!(
            denied.0 == Some(403),
            "without the binding: expected 403, got {:?}",
            out[1].trim()
        );
        Ok(format!(
            "{ip}:{PORT}/metrics from pods with their own tokens: bound 200 ({} lines of {METRIC}), \
             unbound 403; both scrapes done {:.1}s after the pods were created",
            allowed.1,
            took.as_secs_f64()
        ))
    })();
    let _ = kube.get(&["delete", "namespace", NAMESPACE, "--wait=false"]);
    let _ = kube.get(&[
        "delete",
        "clusterrolebinding,clusterrole",
        METRICS_ROLE,
        "--ignore-not-found",
    ]);
    result
}

/// A scraping pod's output: (HTTP status, lines naming [`METRIC`]).
fn parse(out: &str) -> (Option<u16>, usize) {
    let status = out
        .lines()
        .find(|l| l.starts_with("HTTP/"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|c| c.parse().ok());
    let count = out
        .lines()
        .find_map(|l| l.strip_prefix("metric-lines "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0);
    (status, count)
}

/// The lines of a controller log that tell of a forbidden request, except those of writes
/// into a namespace being deleted (a 403 of admission, not of authorization, which every
/// controller meets when namespaces go away under it).
pub(super) fn forbidden_lines(log: &str) -> Vec<&str> {
    status_lines(log, "forbidden", "403")
        .into_iter()
        .filter(|l| !l.contains(NAMESPACE_TERMINATING))
        .collect()
}

/// What the apiserver says of a create in a namespace being deleted.
const NAMESPACE_TERMINATING: &str = "because it is being terminated";

/// The lines of a controller log that tell of an HTTP status: those containing `word`
/// (lowercase, matched case-insensitively) or `code` standing alone (not inside a number such
/// as a resourceVersion or a duration).
pub(super) fn status_lines<'a>(log: &'a str, word: &str, code: &str) -> Vec<&'a str> {
    log.lines()
        .filter(|l| {
            let lower = l.to_ascii_lowercase();
            lower.contains(word)
                || lower.match_indices(code).any(|(i, _)| {
                    let before = lower[..i].chars().next_back();
                    let after = lower[i + code.len()..].chars().next();
                    let delimiter = |c: Option<char>| {
                        c.is_none_or(|c| matches!(c, ' ' | '=' | ':' | '(' | ')' | '"' | ','))
                    };
                    delimiter(before) && delimiter(after)
                })
        })
        .collect()
}

/// `rbac`: see [`super::scenarios`].
pub(super) fn rbac(kube: &Kube) -> Result<String> {
    let mut log = String::new();
    let mut pods = 0;
    for entry in
        std::fs::read_dir(&kube.logs).with_context(|| format!("reading {}", kube.logs.display()))?
    {
        log.push_str(&std::fs::read_to_string(entry?.path())?);
        pods += 1;
    }
    ensure!(pods > 0, "no controller pod's log was collected");
    let containers = log.lines().filter(|l| l.starts_with("===== ")).count();
    let found = forbidden_lines(&log);
    if !found.is_empty() {
        bail!(
            "{} forbidden request(s) in the controller's logs, e.g.:\n{}",
            found.len(),
            found.iter().take(5).copied().collect::<Vec<_>>().join("\n")
        );
    }
    let audit = Audit::of(&kube.cluster.audit_log()?);
    ensure!(
        audit.requests > 0,
        "the apiserver's audit log has no request of {SERVICE_ACCOUNT}: is auditing on?"
    );
    for (what, events) in [
        ("forbidden (403)", &audit.forbidden),
        ("unauthenticated (401)", &audit.unauthenticated),
    ] {
        if !events.is_empty() {
            bail!(
                "{} {what} request(s) in the apiserver's audit log, e.g.:\n{}",
                events.len(),
                events
                    .iter()
                    .take(5)
                    .cloned()
                    .collect::<Vec<_>>()
                    .join("\n")
            );
        }
    }
    Ok(format!(
        "{} log lines of {containers} containers of {pods} controller pods, no forbidden (403) \
         request; the apiserver audited {} requests of {SERVICE_ACCOUNT}: none denied by \
         authorization ({} answered 403 by admission: namespace being deleted), and no \
         unauthenticated request on its Lease",
        log.lines().count(),
        audit.requests,
        audit.admission_403
    ))
}

/// The controller's service account, as the apiserver names its user.
const SERVICE_ACCOUNT: &str = "system:serviceaccount:kube-system:kctrl-deployment-controller";

/// What the apiserver's audit log (see `kind::cluster::audit_policy`) says of the controller.
#[derive(Debug, Default)]
struct Audit {
    /// Requests made as [`SERVICE_ACCOUNT`].
    requests: usize,
    /// Those the authorizer denied (audit annotation `authorization.k8s.io/decision: forbid`).
    forbidden: Vec<String>,
    /// Those authorized but answered 403 by admission (a create in a namespace being deleted).
    admission_403: usize,
    /// Requests answered 401 (their user is unknown; the policy logs them on the Lease).
    unauthenticated: Vec<String>,
}

impl Audit {
    /// Reads the audit events (JSON lines; other lines are skipped).
    fn of(log: &str) -> Audit {
        let mut audit = Audit::default();
        for event in log
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        {
            let code = event["responseStatus"]["code"].as_u64();
            let what = || {
                format!(
                    "{} {} -> {} ({})",
                    event["verb"].as_str().unwrap_or("?"),
                    event["requestURI"].as_str().unwrap_or("?"),
                    code.unwrap_or(0),
                    event["user"]["username"].as_str().unwrap_or("no user")
                )
            };
            if code == Some(401) {
                audit.unauthenticated.push(what());
            }
            if event["user"]["username"].as_str() == Some(SERVICE_ACCOUNT) {
                audit.requests += 1;
                let decision = event["annotations"]["authorization.k8s.io/decision"].as_str();
                if decision == Some("forbid") {
                    audit.forbidden.push(what());
                } else if code == Some(403) {
                    audit.admission_403 += 1;
                }
            }
        }
        audit
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forbidden_requests_are_found_and_numbers_are_not() {
        let log = "I1128 list pods: 403 Forbidden\n\
                   E1128 leases.coordination.k8s.io \"x\" is forbidden: User cannot update\n\
                   status=403 reason\n\
                   E1128 replicasets.apps \"web-1\" is forbidden: unable to create new content in namespace t because it is being terminated\n\
                   I1128 resourceVersion=14035 synced 0.403s\n\
                   I1128 all fine";
        assert_eq!(forbidden_lines(log).len(), 3);
    }

    #[test]
    fn unauthenticated_requests_are_found_and_numbers_are_not() {
        let log = "E1128 watch pods: 401 Unauthorized\n\
                   W1128 status=401 retrying with a fresh token\n\
                   I1128 resourceVersion=40123 synced 0.401s\n\
                   I1128 all fine";
        assert_eq!(status_lines(log, "unauthorized", "401").len(), 2);
    }

    #[test]
    fn audit_events_count_the_controllers_requests_and_its_rejections() {
        let sa = SERVICE_ACCOUNT;
        let log = format!(
            "{{\"verb\":\"update\",\"requestURI\":\"/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/kctrl-deployment-controller\",\"user\":{{\"username\":\"{sa}\"}},\"responseStatus\":{{\"code\":200}}}}\n\
             {{\"verb\":\"list\",\"requestURI\":\"/api/v1/secrets\",\"user\":{{\"username\":\"{sa}\"}},\"responseStatus\":{{\"code\":403}},\"annotations\":{{\"authorization.k8s.io/decision\":\"forbid\"}}}}\n\
             {{\"verb\":\"create\",\"requestURI\":\"/apis/apps/v1/namespaces/gone/replicasets\",\"user\":{{\"username\":\"{sa}\"}},\"responseStatus\":{{\"code\":403}},\"annotations\":{{\"authorization.k8s.io/decision\":\"allow\"}}}}\n\
             {{\"verb\":\"get\",\"requestURI\":\"/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/kctrl-deployment-controller\",\"user\":{{}},\"responseStatus\":{{\"code\":401}}}}\n\
             {{\"verb\":\"get\",\"requestURI\":\"/api\",\"user\":{{\"username\":\"kubernetes-admin\"}},\"responseStatus\":{{\"code\":403}}}}\n\
             not json\n"
        );
        let a = Audit::of(&log);
        assert_eq!(a.requests, 3);
        assert_eq!(a.admission_403, 1);
        assert_eq!(
            a.forbidden,
            vec![format!("list /api/v1/secrets -> 403 ({sa})")]
        );
        assert_eq!(a.unauthenticated.len(), 1, "{a:?}");
        assert!(a.unauthenticated[0].ends_with("-> 401 (no user)"), "{a:?}");
    }

    #[test]
    fn scrape_outputs_are_parsed() {
        assert_eq!(parse("HTTP/1.1 200 OK\r\nmetric-lines 4\n"), (Some(200), 4));
        assert_eq!(
            parse("HTTP/1.1 403 Forbidden\nmetric-lines 0\n"),
            (Some(403), 0)
        );
        assert_eq!(parse("metric-lines 0\n"), (None, 0));
    }

    #[test]
    fn the_manifest_binds_only_the_allowed_account() {
        let m = manifest("registry.k8s.io/kube-proxy:v1.37.2", "10.244.1.2");
        assert_eq!(m.matches("kind: Pod\n").count(), 2);
        assert!(
            m.contains("subjects:\n- kind: ServiceAccount\n  name: allowed\n"),
            "{m}"
        );
        assert!(
            !m.contains("name: denied\n  namespace: kctrl-scrape\n---\napiVersion: rbac"),
            "{m}"
        );
        assert!(m.contains("10.244.1.2:10257"), "{m}");
    }
}

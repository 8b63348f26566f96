//! The `token-rotation` scenario of [`super::scenarios`]: the controller keeps working with a
//! service-account token its kubelet rotates under it.
//!
//! The default projected token of a pod asks for 3607 s, which the apiserver quietly extends to
//! a year, so nothing would rotate within a run. The scenario therefore gives the controller's
//! Deployment a projected token of [`TTL`] seconds (the least the API accepts) mounted where
//! the default one goes, lets our controller roll out its own Deployment, and then waits, on
//! every controller pod:
//!
//! 1. until the kubelet has written a new token into the pod's volume (it refreshes a token at
//!    80 % of its lifetime, on its next sync of the pod);
//! 2. until the first token has expired, and the apiserver's leeway for expired tokens
//!    ([`LEEWAY`]) has passed too.
//!
//! Meanwhile the Lease must stay with the same holder (the leader renews it every retry
//! period: a request that fails authentication would cost it the Lease). Afterwards the Lease
//! must still be renewed, and the apiserver's audit log must show the leader's last renewal
//! authenticated by the rotated token (its `jti`); a new Deployment must roll out, and no
//! controller log may show a request rejected as unauthenticated (401).

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail, ensure};
use base64::Engine as _;
use kctrl_cluster::kind::{CONTROLLER_NAME, CONTROLLER_NAMESPACE};

use super::scenarios::{CONTAINER, Kube, PodRow};

/// The token's requested lifetime: the API's minimum for a projected token.
const TTL: u64 = 600;
/// How long after its `exp` the apiserver still accepts a service-account token.
const LEEWAY: Duration = Duration::from_secs(60);
/// Extra time past [`LEEWAY`] before the checks that the old token is no longer needed.
const MARGIN: Duration = Duration::from_secs(20);
/// The projected volume that replaces the default token mount.
const VOLUME: &str = "kctrl-short-lived-token";
/// Where the in-cluster configuration reads the token, CA and namespace.
const MOUNT: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
/// How often the tokens and the Lease are read while waiting.
const POLL: Duration = Duration::from_secs(5);

/// The strategic-merge patch that gives the controller's pods a [`TTL`]-second token.
fn patch() -> String {
    serde_json::json!({
        "spec": {"template": {"spec": {
            "automountServiceAccountToken": false,
            "volumes": [{
                "name": VOLUME,
                "projected": {"sources": [
                    {"serviceAccountToken": {"path": "token", "expirationSeconds": TTL}},
                    {"configMap": {"name": "kube-root-ca.crt",
                                   "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                    {"downwardAPI": {"items": [{"path": "namespace",
                        "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}
                ]}
            }],
            "containers": [{
                "name": CONTAINER,
                "volumeMounts": [{"name": VOLUME, "mountPath": MOUNT, "readOnly": true}]
            }]
        }}}
    })
    .to_string()
}

/// The claims of a service-account token the scenario looks at.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Claims {
    /// Issued at (Unix seconds).
    iat: u64,
    /// Expires at (Unix seconds).
    exp: u64,
    /// The token's id: the apiserver records `JTI=<jti>` as the credential of each request
    /// it authenticates with the token (audit events' `user.extra`).
    jti: String,
}

impl Claims {
    /// The `iat`, `exp` and `jti` claims of a JWT (its payload is not verified: the
    /// apiserver does that when the controller uses the token).
    fn of(token: &str) -> Result<Claims> {
        let payload = token
            .trim()
            .split('.')
            .nth(1)
            .context("the token is not a JWT (no payload part)")?;
        let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(payload.trim_end_matches('='))
            .context("the token's payload is not base64url")?;
        let json: serde_json::Value =
            serde_json::from_slice(&bytes).context("the token's payload is not JSON")?;
        let claim = |name: &str| {
            json.get(name)
                .and_then(serde_json::Value::as_u64)
                .with_context(|| format!("the token has no numeric `{name}` claim"))
        };
        Ok(Claims {
            iat: claim("iat")?,
            exp: claim("exp")?,
            jti: json
                .get("jti")
                .and_then(serde_json::Value::as_str)
                .context("the token has no `jti` claim")?
                .to_owned(),
        })
    }
}

/// One controller pod's token as its kubelet wrote it.
struct PodToken {
    pod: String,
    node: String,
    uid: String,
    first: Claims,
    first_token: String,
    /// When a different token was first seen (Unix seconds) and its claims.
    rotated: Option<(u64, Claims)>,
}

impl PodToken {
    /// The token in the pod's projected volume, read inside its node through the engine.
    ///
    /// Through `..data/token`, the kubelet's current generation of the volume: the `token`
    /// link beside it belongs to the pod's user in a sticky, world-writable directory, which
    /// `fs.protected_symlinks` forbids root to follow.
    fn read(node: &str, uid: &str) -> Result<String> {
        let path = format!(
            "/var/lib/kubelet/pods/{uid}/volumes/kubernetes.io~projected/{VOLUME}/..data/token"
        );
        let out = super::output_of(&[
            "docker".into(),
            "exec".into(),
            node.into(),
            "cat".into(),
            path,
        ])?;
        Ok(String::from_utf8_lossy(&out).trim().to_owned())
    }
}

/// Unix seconds now.
fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// `token-rotation`: see the module docs.
pub(super) fn token_rotation(kube: &Kube) -> Result<String> {
    let image = kube.current_image()?;
    kube.settled(&image)?;
    kube.save_all_logs()?;
    let started = Instant::now();
    kube.sys(&[
        "patch",
        "deployment",
        CONTROLLER_NAME,
        "--type=strategic",
        "-p",
        &patch(),
    ])?;
    let leader = kube.await_own_rollout(&image)?;
    let rolled = started.elapsed();

    let pods: Vec<PodRow> = kube.pods()?;
    let mut tokens = Vec::new();
    for p in &pods {
        let uid = kube.pod_uid(&p.name)?;
        let token = PodToken::read(&p.node, &uid).with_context(|| {
            format!("reading the {VOLUME} token of pod {} on {}", p.name, p.node)
        })?;
        let first = Claims::of(&token)?;
        ensure!(
            first.exp.saturating_sub(first.iat) == TTL,
            "pod {}'s token lives {} s, not the {TTL} s asked for (iat {}, exp {})",
            p.name,
            first.exp.saturating_sub(first.iat),
            first.iat,
            first.exp
        );
        tokens.push(PodToken {
            pod: p.name.clone(),
            node: p.node.clone(),
            uid,
            first,
            first_token: token,
            rotated: None,
        });
    }
    let holder = kube
        .holder()
        .context("no pod of the Deployment holds the Lease")?;
    let last_exp = tokens.iter().map(|t| t.first.exp).max().unwrap_or(0);
    let until = last_exp + (LEEWAY + MARGIN).as_secs();
    eprintln!(
        "==> token-rotation: {} pods with {TTL}s tokens, rolled out in {:.1}s; waiting {}s, \
         until the first tokens have expired plus the apiserver's {}s leeway",
        tokens.len(),
        rolled.as_secs_f64(),
        until.saturating_sub(unix_now()),
        LEEWAY.as_secs()
    );
    let mut last_report = Instant::now();
    while unix_now() < until {
        for t in tokens.iter_mut().filter(|t| t.rotated.is_none()) {
            if let Ok(token) = PodToken::read(&t.node, &t.uid)
                && !token.is_empty()
                && token != t.first_token
            {
                let claims = Claims::of(&token)?;
                eprintln!(
                    "==> token-rotation: {}'s token rotated {}s after it was issued",
                    t.pod,
                    unix_now().saturating_sub(t.first.iat)
                );
                t.rotated = Some((unix_now(), claims));
            }
        }
        // A failed read is retried; another holder is a failure.
        if let Some(h) = kube.holder()
            && h != holder
        {
            bail!(
                "the Lease moved from {holder} to {h} while the tokens rotated ({}s into the wait)",
                started.elapsed().as_secs()
            );
        }
        if last_report.elapsed() > Duration::from_secs(120) {
            eprintln!(
                "==> token-rotation: {}s to go",
                until.saturating_sub(unix_now())
            );
            last_report = Instant::now();
        }
        std::thread::sleep(POLL);
    }
    for t in &tokens {
        let Some((at, new)) = &t.rotated else {
            bail!(
                "pod {}'s token (issued {}, expired {}) was not replaced by its kubelet",
                t.pod,
                t.first.iat,
                t.first.exp
            );
        };
        ensure!(
            *at <= t.first.exp && new.iat > t.first.iat,
            "pod {}'s token was replaced only at {at} (it expired at {}), by one issued at {}",
            t.pod,
            t.first.exp,
            new.iat
        );
    }
    // Every token the pods started with is now rejected; the leader must still renew.
    let renewed = lease_renewed(kube, &holder)?;
    // And it renews with the new token: the audit log names the credential of each request.
    let leader_pod = holder.split('_').next().unwrap_or("");
    let leader_token = tokens
        .iter()
        .find(|t| t.pod == leader_pod)
        .with_context(|| format!("{leader_pod}, the Lease's holder, is not one of the pods"))?;
    let renewed_with = last_lease_credential(&kube.cluster.audit_log()?, leader_pod)
        .with_context(|| format!("no renewal of the Lease by {leader_pod} in the audit log"))?;
    let (_, rotated) = leader_token.rotated.as_ref().context("rotated above")?;
    ensure!(
        renewed_with == format!("JTI={}", rotated.jti),
        "{leader_pod} last renewed the Lease with credential {renewed_with}, not with its rotated \
         token (JTI={}; its first token was JTI={})",
        rotated.jti,
        leader_token.first.jti
    );
    let rollout = super::scenarios::rollout_workload(kube, "after-rotation")?;
    let mut unauthorized = Vec::new();
    for t in &tokens {
        kube.save_logs(&t.pod);
        let log = kube.saved_log(&t.pod)?;
        unauthorized.extend(
            super::scenarios_auth::status_lines(&log, "unauthorized", "401")
                .into_iter()
                .map(|l| format!("{}: {l}", t.pod)),
        );
    }
    if !unauthorized.is_empty() {
        bail!(
            "{} request(s) rejected as unauthenticated in the controller's logs, e.g.:\n{}",
            unauthorized.len(),
            unauthorized
                .iter()
                .take(5)
                .cloned()
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
    let ages: Vec<String> = tokens
        .iter()
        .filter_map(|t| {
            let (at, _) = t.rotated.as_ref()?;
            Some(format!("{} {}s", t.pod, at.saturating_sub(t.first.iat)))
        })
        .collect();
    Ok(format!(
        "{TTL}s tokens rolled out in {:.1}s ({leader} leading); rotated by the kubelet after \
         {}; {holder} kept the Lease past every first token's expiry + {}s leeway and renewed \
         it {renewed:.1}s later, authenticated by its rotated token ({renewed_with} in the \
         audit log); a new Deployment then rolled out in {:.1}s; no 401 in the logs",
        rolled.as_secs_f64(),
        ages.join(", "),
        LEEWAY.as_secs(),
        rollout.as_secs_f64()
    ))
}

/// The credential (`JTI=<token id>`) of the last update of the controller's Lease that `pod`
/// made, according to the apiserver's audit log.
fn last_lease_credential(audit_log: &str, pod: &str) -> Option<String> {
    let lease = format!("/namespaces/{CONTROLLER_NAMESPACE}/leases/{CONTROLLER_NAME}");
    audit_log
        .lines()
        .rev()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|e| {
            e["verb"] == "update"
                && e["requestURI"]
                    .as_str()
                    .is_some_and(|u| u.ends_with(&lease))
                && e["responseStatus"]["code"] == 200
                && e["user"]["extra"]["authentication.kubernetes.io/pod-name"][0] == pod
        })
        .find_map(|e| {
            e["user"]["extra"]["authentication.kubernetes.io/credential-id"][0]
                .as_str()
                .map(str::to_owned)
        })
}

/// Waits for the Lease's renewTime to change while `holder` holds it; returns the time taken.
fn lease_renewed(kube: &Kube, holder: &str) -> Result<f64> {
    let read = || {
        kube.sys(&[
            "get",
            "lease",
            CONTROLLER_NAME,
            "-o",
            "jsonpath={.spec.holderIdentity} {.spec.renewTime}",
        ])
    };
    let first = read()?;
    let started = Instant::now();
    let limit = Duration::from_secs(30);
    loop {
        let now = read()?;
        let mut f = now.split_whitespace();
        let who = f.next().unwrap_or("");
        ensure!(
            who == holder,
            "the Lease {CONTROLLER_NAMESPACE}/{CONTROLLER_NAME} is held by {who:?}, not {holder}"
        );
        if now.trim() != first.trim() {
            return Ok(started.elapsed().as_secs_f64());
        }
        ensure!(
            started.elapsed() < limit,
            "{holder} did not renew the Lease within {}s after the first tokens expired ({})",
            limit.as_secs(),
            now.trim()
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn jwt(payload: &str) -> String {
        let enc = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        format!(
            "{}.{}.signature",
            enc.encode(r#"{"alg":"RS256"}"#),
            enc.encode(payload)
        )
    }

    #[test]
    fn claims_are_read_from_the_payload() {
        let t = jwt(
            r#"{"aud":["x"],"exp":1800000600,"iat":1800000000,"jti":"7d1c","sub":"system:serviceaccount:a:b"}"#,
        );
        assert_eq!(
            Claims::of(&t).unwrap(),
            Claims {
                iat: 1_800_000_000,
                exp: 1_800_000_600,
                jti: "7d1c".into()
            }
        );
    }

    #[test]
    fn tokens_that_are_not_jwts_are_errors_not_panics() {
        for bad in ["", "abc", "a.!!!.c", &jwt("not json"), &jwt(r#"{"iat":1}"#)] {
            assert!(Claims::of(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_last_lease_renewal_of_the_pod_names_its_credential() {
        let event = |pod: &str, jti: &str, code: u16, verb: &str| {
            serde_json::json!({
                "verb": verb,
                "requestURI": "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/kctrl-deployment-controller",
                "responseStatus": {"code": code},
                "user": {"username": "system:serviceaccount:kube-system:kctrl-deployment-controller",
                         "extra": {"authentication.kubernetes.io/pod-name": [pod],
                                   "authentication.kubernetes.io/credential-id": [format!("JTI={jti}")]}}
            })
            .to_string()
        };
        let log = [
            event("a", "old", 200, "update"),
            event("a", "new", 200, "update"),
            event("b", "other", 200, "update"),
            event("a", "newer", 200, "get"),
            event("a", "failed", 409, "update"),
            "garbage".to_owned(),
        ]
        .join("\n");
        assert_eq!(last_lease_credential(&log, "a").as_deref(), Some("JTI=new"));
        assert_eq!(last_lease_credential(&log, "c"), None);
    }

    #[test]
    fn the_patch_mounts_a_short_lived_token_where_the_default_goes() {
        let p: serde_json::Value = serde_json::from_str(&patch()).unwrap();
        let spec = &p["spec"]["template"]["spec"];
        assert_eq!(spec["automountServiceAccountToken"], false);
        let sources = &spec["volumes"][0]["projected"]["sources"];
        assert_eq!(sources[0]["serviceAccountToken"]["expirationSeconds"], TTL);
        assert_eq!(sources[1]["configMap"]["items"][0]["path"], "ca.crt");
        assert_eq!(sources[2]["downwardAPI"]["items"][0]["path"], "namespace");
        let mount = &spec["containers"][0]["volumeMounts"][0];
        assert_eq!(mount["mountPath"], MOUNT);
        assert_eq!(mount["name"], VOLUME);
        assert_eq!(spec["containers"][0]["name"], CONTAINER);
    }
}

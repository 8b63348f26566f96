//! The controller's endpoints against the real API server: delegated authentication
//! (TokenReview) and authorization (SubjectAccessReview) with real ServiceAccount tokens from
//! the TokenRequest API, answered as kube-controller-manager answers them:
//!
//! | caller | `/metrics` | `/healthz` |
//! |---|---|---|
//! | token allowed `get` on the non-resource URL /metrics | 200 | 200 |
//! | valid token without that right | 403 | 200 |
//! | token the API server does not authenticate | 401 | 401 |
//! | no token (`system:anonymous`) | 403 | 200 |
//! | any, while the review API server is unreachable | 401 with a token, 500 without | 200 without a token |
//! | client certificate of the cluster's client CA (the admin's) | 200 | 200 |
//!
//! The review clients run as the controller identity with `deploy/`'s auth-delegator binding.
//! The controller processes are standbys on a Lease another holder keeps for an hour, so they
//! serve their endpoints but never reconcile: the test adds no Deployment controller to the
//! cluster.

use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, PolicyRule, RoleBinding, RoleRef, Subject,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kctrl_client::{Api, DeleteParams, PostParams};
use kctrl_e2e::process::ControllerProcess;
use kctrl_e2e::{TestNamespace, eventually, require_cluster};

const TIMEOUT: Duration = Duration::from_secs(60);

fn named(name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_owned()),
        ..ObjectMeta::default()
    }
}

/// The kubectl of the local control plane (`cargo xtask cluster env` exports it), else the
/// one on the PATH.
fn kubectl() -> PathBuf {
    std::env::var_os("KCTRL_KUBECTL").map_or_else(|| PathBuf::from("kubectl"), PathBuf::from)
}

/// A token of ServiceAccount `namespace/name` from the TokenRequest API.
async fn token_of(admin_kubeconfig: &Path, namespace: &str, name: &str) -> String {
    let out = tokio::process::Command::new(kubectl())
        .arg("--kubeconfig")
        .arg(admin_kubeconfig)
        .args(["-n", namespace, "create", "token", name, "--duration=1h"])
        .output()
        .await
        .unwrap_or_else(|e| panic!("running {}: {e}", kubectl().display()));
    assert!(
        out.status.success(),
        "kubectl create token {namespace}/{name}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .expect("a token is text")
        .trim()
        .to_owned()
}

/// `kubeconfig` with every `server:` pointing at a port nothing listens on.
fn unreachable_copy(kubeconfig: &Path, dir: &Path) -> PathBuf {
    let text = std::fs::read_to_string(kubeconfig)
        .unwrap_or_else(|e| panic!("reading {}: {e}", kubeconfig.display()));
    let moved: Vec<String> = text
        .lines()
        .map(|line| match line.split_once("server:") {
            Some((indent, _)) if indent.trim().is_empty() => {
                format!("{indent}server: https://127.0.0.1:1")
            }
            _ => line.to_owned(),
        })
        .collect();
    assert!(
        moved.iter().any(|l| l.contains("https://127.0.0.1:1")),
        "no server in {}",
        kubeconfig.display()
    );
    let path = dir.join("unreachable.kubeconfig");
    std::fs::write(&path, moved.join("\n")).expect("writing the kubeconfig");
    path
}

fn deploy_file<T: serde::de::DeserializeOwned>(file: &str) -> T {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../deploy")
        .join(file);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    serde_yaml_ng::from_str(&text).unwrap_or_else(|e| panic!("parsing {}: {e}", path.display()))
}

/// Creates `binding`, or leaves the existing one of the same name.
async fn ensure_binding(api: &Api<ClusterRoleBinding>, binding: &ClusterRoleBinding) {
    if let Err(e) = api.create(&PostParams::default(), binding).await {
        assert!(e.is_already_exists(), "creating {binding:?}: {e}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpoints_answer_as_kube_controller_manager() {
    let cluster = require_cluster!();
    let Some(identity) = cluster.controller_kubeconfig.clone() else {
        eprintln!("e2e: the cluster has no deployment-controller identity; skipping");
        return;
    };
    let admin = cluster.admin();
    let bindings = Api::<ClusterRoleBinding>::all(admin.clone());
    ensure_binding(
        &bindings,
        &deploy_file("06-clusterrolebinding-auth-delegator.yaml"),
    )
    .await;
    let reader_binding: RoleBinding = deploy_file("07-rolebinding-authentication-reader.yaml");
    let reader_ns = reader_binding
        .metadata
        .namespace
        .clone()
        .expect("the reader RoleBinding is namespaced");
    if let Err(e) = Api::<RoleBinding>::namespaced(admin.clone(), &reader_ns)
        .create(&PostParams::default(), &reader_binding)
        .await
    {
        assert!(e.is_already_exists(), "creating {reader_binding:?}: {e}");
    }

    let ns = TestNamespace::create(&admin, "endpoints-auth").await;
    let accounts = Api::<ServiceAccount>::namespaced(admin.clone(), &ns.name);
    for name in ["reader", "nobody"] {
        accounts
            .create(
                &PostParams::default(),
                &ServiceAccount {
                    metadata: named(name),
                    ..ServiceAccount::default()
                },
            )
            .await
            .unwrap_or_else(|e| panic!("creating ServiceAccount {name}: {e}"));
    }
    // What a Prometheus needs: get on the non-resource URL /metrics.
    let role_name = format!("kctrl-e2e:{}:metrics-reader", ns.name);
    let roles = Api::<ClusterRole>::all(admin.clone());
    roles
        .create(
            &PostParams::default(),
            &ClusterRole {
                metadata: named(&role_name),
                rules: Some(vec![PolicyRule {
                    non_resource_urls: Some(vec!["/metrics".to_owned()]),
                    verbs: vec!["get".to_owned()],
                    ..PolicyRule::default()
                }]),
                ..ClusterRole::default()
            },
        )
        .await
        .expect("creating the metrics ClusterRole");
    bindings
        .create(
            &PostParams::default(),
            &ClusterRoleBinding {
                metadata: named(&role_name),
                role_ref: RoleRef {
                    api_group: Some("rbac.authorization.k8s.io".to_owned()),
                    kind: "ClusterRole".to_owned(),
                    name: role_name.clone(),
                },
                subjects: Some(vec![Subject {
                    kind: "ServiceAccount".to_owned(),
                    name: "reader".to_owned(),
                    namespace: Some(ns.name.clone()),
                    ..Subject::default()
                }]),
            },
        )
        .await
        .expect("binding the metrics ClusterRole");
    let reader = token_of(&cluster.kubeconfig, &ns.name, "reader").await;
    let nobody = token_of(&cluster.kubeconfig, &ns.name, "nobody").await;

    // A Lease someone else holds for an hour: our processes stay standbys.
    let now = MicroTime(k8s_openapi::jiff::Timestamp::now());
    Api::<Lease>::namespaced(admin.clone(), &ns.name)
        .create(
            &PostParams::default(),
            &Lease {
                metadata: named("held"),
                spec: Some(LeaseSpec {
                    holder_identity: Some("someone-else".to_owned()),
                    lease_duration_seconds: Some(3600),
                    acquire_time: Some(now.clone()),
                    renew_time: Some(now),
                    ..LeaseSpec::default()
                }),
            },
        )
        .await
        .expect("creating the held Lease");
    let standby = [
        "--leader-elect-resource-namespace",
        ns.name.as_str(),
        "--leader-elect-resource-name",
        "held",
    ];
    let identity_arg = identity.display().to_string();
    let mut args = standby.to_vec();
    args.extend([
        "--authentication-kubeconfig",
        &identity_arg,
        "--authorization-kubeconfig",
        &identity_arg,
        // kube-controller-manager's default, spelled out (the harness would add /metrics).
        "--authorization-always-allow-paths=/healthz,/readyz,/livez",
    ]);
    let mut c = ControllerProcess::start("endpoints-auth", &cluster.kubeconfig, &args).await;

    // Allowed: 200 with the metrics, once RBAC has seen the new binding (a denial in between
    // is cached for 10 s, hence the generous bound).
    let text = eventually(
        "the reader's token to be allowed /metrics",
        TIMEOUT,
        || async {
            match c.get_as("/metrics", Some(&reader)).await {
                Ok((200, text)) => Ok(text),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    assert!(
        text.contains("apiserver_delegated_authz_request_total{code=\"201\"}"),
        "{text}"
    );
    assert!(
        text.contains("apiserver_delegated_authn_request_total{code=\"201\"}"),
        "{text}"
    );

    let expect = |what: &str, got: (u16, String), code: u16, message: &str| {
        assert_eq!(got.0, code, "{what}: {}", got.1);
        assert!(got.1.contains(message), "{what}: {}", got.1);
    };
    let get = |path: &'static str, token: Option<&str>| {
        let token = token.map(str::to_owned);
        let c = &c;
        async move {
            c.get_as(path, token.as_deref())
                .await
                .unwrap_or_else(|e| panic!("GET {path}: {e}"))
        }
    };
    let nobody_user = format!("system:serviceaccount:{}:nobody", ns.name);
    expect(
        "a valid token without the right",
        get("/metrics", Some(&nobody)).await,
        403,
        &format!(r#""message":"forbidden: User \"{nobody_user}\" cannot get path \"/metrics\"""#),
    );
    expect(
        "an invalid token",
        get("/metrics", Some("not-a-token")).await,
        401,
        r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"Unauthorized","reason":"Unauthorized","code":401}"#,
    );
    expect(
        "no token",
        get("/metrics", None).await,
        403,
        r#""message":"forbidden: User \"system:anonymous\" cannot get path \"/metrics\"""#,
    );
    expect(
        "/healthz without a token",
        get("/healthz", None).await,
        200,
        "ok",
    );
    expect(
        "/healthz with a valid token",
        get("/healthz", Some(&nobody)).await,
        200,
        "ok",
    );
    expect(
        "/healthz with an invalid token",
        get("/healthz", Some("not-a-token")).await,
        401,
        "Unauthorized",
    );
    expect(
        "/debug/cache (not served, still authorized first)",
        get("/debug/cache", Some(&reader)).await,
        403,
        "cannot get path \\\"/debug/cache\\\"",
    );

    // A client certificate of the cluster's client CA (the admin's, when its kubeconfig has
    // one): the CA was looked up in kube-system/extension-apiserver-authentication, and the
    // subject authenticated (the admin is in system:masters, or allowed everything by RBAC).
    let admin_config = kctrl_config::Config::from_flags(
        Some(&cluster.kubeconfig),
        None,
        &kctrl_config::ConfigOverrides::default(),
    )
    .expect("the admin kubeconfig");
    if let Some(identity) = &admin_config.tls.client_identity {
        let (code, body) = c
            .get_with_certificate("/metrics", &identity.cert_pem, identity.key_pem.expose())
            .await
            .expect("GET /metrics with the admin's certificate");
        assert_eq!(code, 200, "{body}");
    } else {
        eprintln!("e2e: the admin kubeconfig has no client certificate; skipping that case");
    }

    // Revoking the right takes effect once the cached allowance (10 s) expires.
    bindings
        .delete(&role_name, &DeleteParams::default())
        .await
        .expect("deleting the metrics ClusterRoleBinding");
    eventually(
        "the reader's token to be forbidden after the binding is gone",
        TIMEOUT,
        || async {
            match c.get_as("/metrics", Some(&reader)).await {
                Ok((403, _)) => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;

    // The review API server unreachable: nothing gets through, the probes still answer.
    let dir = tempfile::tempdir().expect("a temporary directory");
    let unreachable = unreachable_copy(&identity, dir.path())
        .display()
        .to_string();
    let mut args = standby.to_vec();
    args.extend([
        "--authentication-kubeconfig",
        &unreachable,
        "--authorization-kubeconfig",
        &unreachable,
        "--authorization-always-allow-paths=/healthz,/readyz,/livez",
    ]);
    let mut d = ControllerProcess::start("endpoints-unreachable", &cluster.kubeconfig, &args).await;
    let (code, body) = d
        .get_as("/metrics", Some(&reader))
        .await
        .expect("GET /metrics");
    assert_eq!(code, 401, "{body}");
    let (code, body) = d.get("/metrics").await.expect("GET /metrics");
    assert_eq!(code, 500, "{body}");
    assert!(
        body.starts_with("Internal Server Error: \"/metrics\": creating a SubjectAccessReview"),
        "{body}"
    );
    let (code, body) = d.get("/healthz").await.expect("GET /healthz");
    assert_eq!((code, body.as_str()), (200, "ok"));

    for p in [&mut c, &mut d] {
        let status = p.terminate(Duration::from_secs(30)).await;
        assert!(status.success(), "{} exited with {status}", p.name);
    }
    let _ = roles.delete(&role_name, &DeleteParams::default()).await;
    ns.delete().await;
}

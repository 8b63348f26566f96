//! Credentials from an exec plugin through `HttpBackend`: the plugin's run is not bound to
//! the request that started it, and a 401 renews the credential once.

use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kctrl_client::config::{Auth, ExecApiVersion, ExecProvider, Secret};
use kctrl_client::{Api, Error, HttpBackend};
use serde_json::json;

use crate::client;
use crate::server::{Reply, TestServer};

/// A plugin (a shell script in `dir`) answering with the token `run-<n>` for its n-th run,
/// once the file `gate` exists in `dir`.
fn gated_plugin(dir: &Path) -> ExecProvider {
    let script = dir.join("plugin.sh");
    std::fs::write(
        &script,
        r#"set -eu
n=$(cat "$DIR/runs" 2>/dev/null || echo 0); n=$((n + 1)); echo $n > "$DIR/runs"
while [ ! -e "$DIR/gate" ]; do sleep 0.01; done
printf '{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"run-%s"}}' $n
"#,
    )
    .unwrap();
    let mut provider = ExecProvider::new("sh", ExecApiVersion::V1);
    provider.args = vec![script.to_string_lossy().into_owned()];
    provider.env = vec![(
        "DIR".to_owned(),
        Secret::new(dir.to_string_lossy().into_owned()),
    )];
    provider
}

fn pod() -> Reply {
    Reply::json(
        200,
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}}),
    )
}

// A plugin slower than the request timeout (a cloud login taking seconds): the first request
// times out, the plugin's run goes on, and the next request uses what it produced.
// (Real time: the 1 s timeout.)
#[tokio::test]
async fn a_plugin_slower_than_the_request_timeout_still_delivers() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start([pod()]).await;
    let mut config = server.config();
    config.qps = -1.0;
    config.timeout = Some(Duration::from_secs(1));
    config.auth = Auth::Exec(gated_plugin(dir.path()));
    let pods: Api<Pod> = Api::namespaced(client(HttpBackend::new(config).unwrap()), "ns");

    let err = pods.get("p").await.unwrap_err();
    assert!(matches!(err, Error::Timeout { .. }), "{err:?}");
    std::fs::write(dir.path().join("gate"), "").unwrap();
    pods.get("p").await.unwrap();
    assert_eq!(
        server.single_request().header("authorization"),
        Some("Bearer run-1")
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("runs"))
            .unwrap()
            .trim(),
        "1"
    );
}

// A 401 renews the plugin's credential once; the request after it carries the new one.
#[tokio::test]
async fn a_401_runs_the_plugin_again_once() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("gate"), "").unwrap();
    let server =
        TestServer::start([Reply::status(401, "Unauthorized", "Unauthorized"), pod()]).await;
    let mut config = server.config();
    config.qps = -1.0;
    config.auth = Auth::Exec(gated_plugin(dir.path()));
    let pods: Api<Pod> = Api::namespaced(client(HttpBackend::new(config).unwrap()), "ns");

    let err = pods.get("p").await.unwrap_err();
    assert!(err.to_string().contains("Unauthorized"), "{err}");
    pods.get("p").await.unwrap();
    let seen: Vec<_> = server
        .requests()
        .iter()
        .map(|r| r.header("authorization").unwrap_or("").to_owned())
        .collect();
    assert_eq!(seen, ["Bearer run-1", "Bearer run-2"]);
}

//! Discovery: `/version` and group/version resource lists.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kctrl_client::{Backend, ResourceRef};
use serde_json::json;

use crate::server::{Reply, TestServer};
use crate::{client, unlimited};

fn version_json() -> serde_json::Value {
    json!({
        "major": "1", "minor": "36", "gitVersion": "v1.36.0", "gitCommit": "abc123",
        "gitTreeState": "clean", "buildDate": "2026-04-01T00:00:00Z", "goVersion": "go1.25.0",
        "compiler": "gc", "platform": "linux/amd64"
    })
}

fn resources_json(group_version: &str, name: &str, kind: &str) -> serde_json::Value {
    json!({
        "kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version,
        "resources": [{"name": name, "singularName": "", "namespaced": true, "kind": kind, "verbs": ["get", "list", "watch"]}]
    })
}

#[tokio::test]
async fn server_version() {
    let server = TestServer::start_with_prefix([Reply::json(200, version_json())], "/proxy").await;
    let info = client(unlimited(&server)).server_version().await.unwrap();
    assert_eq!(info.git_version, "v1.36.0");
    assert_eq!(info.minor, "36");
    let r = server.single_request();
    assert_eq!(r.method, "GET");
    assert_eq!(r.path_and_query(), "/proxy/version");
    assert_eq!(r.header("accept"), Some("application/json"));
}

#[tokio::test]
async fn api_resources_per_group_version() {
    let server = TestServer::start([
        Reply::json(200, resources_json("v1", "pods", "Pod")),
        Reply::json(200, resources_json("apps/v1", "deployments", "Deployment")),
    ])
    .await;
    let backend = unlimited(&server);
    let core = backend.api_resources("v1").await.unwrap();
    assert_eq!(core.group_version, "v1");
    assert_eq!(core.resources[0].name, "pods");
    let apps = backend.api_resources("apps/v1").await.unwrap();
    assert_eq!(apps.resources[0].kind, "Deployment");
    let paths: Vec<String> = server.requests().iter().map(|r| r.path.clone()).collect();
    assert_eq!(paths, ["/api/v1", "/apis/apps/v1"]);
}

#[tokio::test]
async fn unserved_group_version_is_not_found() {
    let server = TestServer::start([
        Reply::text(404, "404 page not found"),
        Reply::text(404, "404 page not found"),
        Reply::json(200, resources_json("v1", "pods", "Pod")),
    ])
    .await;
    let backend = unlimited(&server);
    let err = backend.api_resources("example.com/v1").await.unwrap_err();
    assert!(err.is_not_found(), "{err:?}");
    let client = client(backend);
    assert!(
        !client
            .is_served(&ResourceRef::of::<Deployment>())
            .await
            .unwrap()
    );
    assert!(client.is_served(&ResourceRef::of::<Pod>()).await.unwrap());
}

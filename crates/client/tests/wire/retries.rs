//! client-go's retry rules on the wire: Retry-After, retryable transport failures,
//! exhaustion and error wrapping.

use std::time::{Duration, Instant};

use bytes::Bytes;
use k8s_openapi::api::core::v1::Pod;
use kctrl_client::{
    Api, ApiRequest, Backend, DeleteParams, Error, HttpBackend, Operation, Patch, PatchParams,
    PostParams, ResourceRef,
};
use serde_json::json;

use crate::server::{AfterChunks, RawReply, RawServer, Reply, TestServer};
use crate::{client, recorded, unlimited};

fn pod_json() -> serde_json::Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ns"}})
}

fn pod_request(operation: Operation) -> ApiRequest {
    ApiRequest::new(ResourceRef::of::<Pod>(), Some("ns".into()), None, operation)
}

fn get_p() -> ApiRequest {
    pod_request(Operation::Get { name: "p".into() })
}

fn create(body: Bytes) -> ApiRequest {
    pod_request(Operation::Create {
        body,
        params: PostParams::default(),
    })
}

fn retry_after(code: u16, seconds: &str) -> Reply {
    Reply::status(code, "", &format!("HTTP {code}, try again")).header("retry-after", seconds)
}

// Port of client-go TestCheckRetryHandles429And5xx: a POST retried through 429, 500, 501
// and 504 sends its complete body every time.
#[tokio::test]
async fn check_retry_handles_429_and_5xx() {
    let server = TestServer::start([
        retry_after(429, "0"),
        retry_after(500, "0"),
        retry_after(501, "0"),
        retry_after(504, "0"),
        Reply::json(201, pod_json()),
    ])
    .await;
    let mut config = server.config();
    config.qps = -1.0;
    let (backend, metrics) = recorded(config);
    let body = Bytes::from("abcd".repeat(1000));
    backend.call(create(body.clone())).await.unwrap();

    let requests = server.requests();
    assert_eq!(requests.len(), 5);
    for r in &requests {
        assert_eq!(r.method, "POST");
        assert_eq!(r.body, body, "retry did not send a complete body");
    }
    assert_eq!(metrics.result_codes(), ["429", "500", "501", "504", "201"]);
    assert_eq!(metrics.retry_codes(), ["500", "501", "504", "201"]);
}

#[tokio::test]
async fn retry_after_delay_is_honoured() {
    let server = TestServer::start([retry_after(429, "1"), Reply::json(200, pod_json())]).await;
    let pods: Api<Pod> = Api::namespaced(client(unlimited(&server)), "ns");
    let start = Instant::now();
    pods.get("p").await.unwrap();
    let took = start.elapsed();
    assert!(took >= Duration::from_secs(1), "retried after {took:?}");
    assert_eq!(server.requests().len(), 2);
}

#[tokio::test]
async fn server_error_without_retry_after_is_not_retried() {
    let server = TestServer::start([
        Reply::status(500, "InternalError", "etcd leader changed"),
        Reply::json(200, pod_json()),
    ])
    .await;
    let pods: Api<Pod> = Api::namespaced(client(unlimited(&server)), "ns");
    let err = pods.get("p").await.unwrap_err();
    assert!(matches!(err, Error::Api(_)), "not wrapped: {err:?}");
    assert_eq!(err.api_error().unwrap().code, 500);
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn exhausted_retries_return_the_wrapped_error() {
    let server = TestServer::start([]).await;
    server.set_fallback(retry_after(503, "0"));
    let mut config = server.config();
    config.qps = -1.0;
    let (backend, metrics) = recorded(config);
    let pods: Api<Pod> = Api::namespaced(client(backend.with_max_retries(3)), "ns");
    let err = pods.get("p").await.unwrap_err();

    assert_eq!(server.requests().len(), 4, "1 attempt + 3 retries");
    match &err {
        Error::Retried { attempts, last, .. } => {
            assert_eq!(*attempts, 4);
            assert_eq!(last.api_error().unwrap().code, 503);
        }
        other => panic!("expected a retried error, got {other:?}"),
    }
    // Classifiers and the Status look through the wrapper.
    assert_eq!(err.status().unwrap().code, Some(503));
    assert!(err.to_string().contains("after 4 attempts"), "{err}");
    assert_eq!(metrics.result_codes(), ["503"; 4]);
    assert_eq!(metrics.retry_codes(), ["503"; 3]);
}

#[tokio::test]
async fn default_max_retries_is_ten() {
    let server = TestServer::start([]).await;
    server.set_fallback(retry_after(429, "0"));
    let pods: Api<Pod> = Api::namespaced(client(unlimited(&server)), "ns");
    let err = pods.get("p").await.unwrap_err();
    assert!(err.is_too_many_requests(), "{err:?}");
    assert_eq!(server.requests().len(), 11);
}

// Port of client-go TestRequestMaxRetries.
#[tokio::test]
async fn request_max_retries() {
    for (max_retries, expect_error) in [(0, true), (1, false), (2, false)] {
        let server = TestServer::start([retry_after(429, "0"), Reply::json(200, pod_json())]).await;
        let backend = unlimited(&server).with_max_retries(max_retries);
        let result = backend.call(get_p()).await;
        assert_eq!(
            result.is_err(),
            expect_error,
            "max_retries {max_retries}: {result:?}"
        );
    }
}

// Port of client-go TestRetryableConditions, response rows: 429/503 with Retry-After are
// retried for every verb; 5xx or 429 without it, and 3xx with it, are not.
#[tokio::test]
async fn retryable_conditions() {
    let operations = || {
        vec![
            get_p(),
            create(Bytes::from_static(b"{}")),
            pod_request(Operation::Update {
                name: "p".into(),
                body: Bytes::from_static(b"{}"),
                params: PostParams::default(),
            }),
            pod_request(Operation::Patch {
                name: "p".into(),
                patch: Patch::Merge(json!({})),
                params: PatchParams::default(),
            }),
            pod_request(Operation::Delete {
                name: "p".into(),
                params: DeleteParams::default(),
            }),
        ]
    };
    type Case = (&'static str, fn() -> Reply, bool);
    let cases: [Case; 5] = [
        ("{429, Retry-After}", || retry_after(429, "0"), true),
        ("{503, Retry-After}", || retry_after(503, "0"), true),
        (
            "5xx without Retry-After",
            || Reply::text(500, "boom"),
            false,
        ),
        (
            "429 without Retry-After",
            || Reply::text(429, "slow down"),
            false,
        ),
        (
            "{3xx, Retry-After}",
            || Reply::text(301, "moved").header("retry-after", "0"),
            false,
        ),
    ];
    for (name, reply, retried) in cases {
        for op in operations() {
            let verb = op.verb();
            let server = TestServer::start([]).await;
            server.set_fallback(reply());
            let backend = unlimited(&server).with_max_retries(2);
            let _ = backend.call(op).await;
            let attempts = server.requests().len();
            let want = if retried { 3 } else { 1 };
            assert_eq!(attempts, want, "{name} / {verb}");
        }
    }
}

#[tokio::test]
async fn get_dropped_before_response_is_retried() {
    let server = TestServer::start([Reply::Drop, Reply::json(200, pod_json())]).await;
    let mut config = server.config();
    config.qps = -1.0;
    let (backend, metrics) = recorded(config);
    let pods: Api<Pod> = Api::namespaced(client(backend), "ns");
    pods.get("p").await.unwrap();
    assert_eq!(server.requests().len(), 2);
    assert_eq!(metrics.result_codes(), ["<error>", "200"]);
    assert_eq!(metrics.retry_codes(), ["200"]);
}

#[tokio::test]
async fn get_dropped_mid_response_is_retried() {
    let server = TestServer::start([
        Reply::Chunks {
            status: 200,
            headers: vec![("content-type", "application/json".into())],
            chunks: vec![Bytes::from_static(br#"{"apiVersion":"v1","kind":"Po"#)],
            then: AfterChunks::Abort,
        },
        Reply::json(200, pod_json()),
    ])
    .await;
    let pods: Api<Pod> = Api::namespaced(client(unlimited(&server)), "ns");
    let pod = pods.get("p").await.unwrap();
    assert_eq!(pod.metadata.name.as_deref(), Some("p"));
    assert_eq!(server.requests().len(), 2);
}

#[tokio::test]
async fn post_dropped_before_response_is_not_retried() {
    let server = TestServer::start([Reply::Drop, Reply::json(201, pod_json())]).await;
    let backend = unlimited(&server);
    let err = backend
        .call(create(Bytes::from_static(b"{}")))
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::Transport { ref verb, .. } if verb == "POST"),
        "{err:?}"
    );
    assert_eq!(server.requests().len(), 1);
    assert_eq!(server.unused_replies(), 1);
}

#[tokio::test]
async fn post_dropped_mid_response_is_not_retried() {
    let server = TestServer::start([
        Reply::Chunks {
            status: 201,
            headers: vec![("content-type", "application/json".into())],
            chunks: vec![Bytes::from_static(b"{\"kind\":")],
            then: AfterChunks::Abort,
        },
        Reply::json(201, pod_json()),
    ])
    .await;
    let err = unlimited(&server)
        .call(create(Bytes::from_static(b"{}")))
        .await
        .unwrap_err();
    assert!(err.is_transport(), "{err:?}");
    assert_eq!(server.requests().len(), 1);
}

// Port of client-go TestConnectionResetByPeerIsRetried: two resets, then success.
#[tokio::test]
async fn connection_reset_by_peer_is_retried() {
    const OK: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{}";
    let server =
        RawServer::start(vec![RawReply::Reset, RawReply::Reset, RawReply::Bytes(OK)]).await;
    let mut config = kctrl_client::config::Config::new(server.url());
    config.qps = -1.0;
    let backend = HttpBackend::new(config).unwrap();
    let body = backend.call(get_p()).await.unwrap();
    assert_eq!(&body[..], b"{}");
    assert_eq!(server.connections(), 3);
}

// After a retried transport failure and a different final error, both are reported
// (client-go's WrapPreviousError).
#[tokio::test]
async fn final_error_carries_the_previous_attempts_error() {
    let server = TestServer::start([
        Reply::Drop,
        Reply::status(500, "InternalError", "etcd leader changed"),
    ])
    .await;
    let err = unlimited(&server).call(get_p()).await.unwrap_err();
    match &err {
        Error::Retried {
            attempts,
            last,
            previous,
        } => {
            assert_eq!(*attempts, 2);
            assert_eq!(last.api_error().unwrap().code, 500);
            assert!(
                matches!(previous.as_deref(), Some(Error::Transport { .. })),
                "{previous:?}"
            );
        }
        other => panic!("expected a retried error, got {other:?}"),
    }
    let msg = err.to_string();
    assert!(
        msg.starts_with(
            "etcd leader changed (after 2 attempts) - error from a previous attempt: GET http://"
        ),
        "{msg}"
    );
}

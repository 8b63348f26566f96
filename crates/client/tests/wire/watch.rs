//! Watches on the wire: framing, content types, error responses, retries, stream ends.

use std::time::Duration;

use bytes::Bytes;
use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::Pod;
use kctrl_client::{Api, Error, WatchEvent, WatchParams};
use serde_json::json;

use crate::server::{AfterChunks, Reply, TestServer, status_json};
use crate::{client, unlimited};

fn pod(name: &str, rv: &str) -> serde_json::Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "ns", "resourceVersion": rv}})
}

fn event(kind: &str, object: serde_json::Value) -> serde_json::Value {
    json!({"type": kind, "object": object})
}

/// ADDED first, MODIFIED second, DELETED last (client-go TestWatch's table).
fn table() -> Vec<serde_json::Value> {
    vec![
        event("ADDED", pod("first", "1")),
        event("MODIFIED", pod("second", "2")),
        event("DELETED", pod("last", "3")),
    ]
}

fn summary(e: &WatchEvent<Pod>) -> String {
    let name = |p: &Pod| p.metadata.name.clone().unwrap_or_default();
    match e {
        WatchEvent::Added(p) => format!("ADDED {}", name(p)),
        WatchEvent::Modified(p) => format!("MODIFIED {}", name(p)),
        WatchEvent::Deleted(p) => format!("DELETED {}", name(p)),
        WatchEvent::Bookmark(b) => format!("BOOKMARK {}", b.resource_version),
        WatchEvent::Error(e) => format!("ERROR {} {}", e.code, e.reason()),
    }
}

/// Collects a whole watch, failing the test instead of hanging if it never ends.
async fn collect(
    stream: impl Stream<Item = Result<WatchEvent<Pod>, Error>>,
) -> Vec<Result<String, String>> {
    tokio::time::timeout(
        Duration::from_secs(30),
        stream
            .map(|r| r.map(|e| summary(&e)).map_err(|e| e.to_string()))
            .collect::<Vec<_>>(),
    )
    .await
    .expect("the watch stream did not end")
}

fn ok(items: &[&str]) -> Vec<Result<String, String>> {
    items.iter().map(|s| Ok((*s).to_owned())).collect()
}

const TABLE: [&str; 3] = ["ADDED first", "MODIFIED second", "DELETED last"];

// Port of client-go TestWatch: without and with retries before the watch opens.
#[tokio::test]
async fn watch() {
    for max_retries in [0, 3] {
        let mut replies: Vec<Reply> = (0..max_retries)
            .map(|_| Reply::text(429, "slow down").header("retry-after", "0"))
            .collect();
        replies.push(Reply::watch(&table()));
        let server = TestServer::start(replies).await;
        let backend = unlimited(&server).with_max_retries(max_retries);
        let pods: Api<Pod> = Api::namespaced(client(backend), "ns");
        let events = pods.watch(&WatchParams::default()).await.unwrap();
        assert_eq!(
            collect(events).await,
            ok(&TABLE),
            "max_retries {max_retries}"
        );
        assert_eq!(server.requests().len(), max_retries as usize + 1);
    }
}

// Port of client-go TestWatchNonDefaultContentType: JSON with or without stream=watch.
#[tokio::test]
async fn watch_non_default_content_type() {
    for content_type in [
        "application/json;stream=watch",
        "application/json; charset=utf-8",
    ] {
        let server =
            TestServer::start([Reply::watch(&table()).header("content-type", content_type)]).await;
        let pods: Api<Pod> = Api::namespaced(client(unlimited(&server)), "ns");
        let events = pods.watch(&WatchParams::default()).await.unwrap();
        assert_eq!(collect(events).await, ok(&TABLE), "{content_type}");
    }
}

// Port of client-go TestWatchUnknownContentType.
#[tokio::test]
async fn watch_unknown_content_type() {
    for content_type in ["foobar", "application/vnd.kubernetes.protobuf;stream=watch"] {
        let server =
            TestServer::start([Reply::watch(&table()).header("content-type", content_type)]).await;
        let pods: Api<Pod> = Api::namespaced(client(unlimited(&server)), "ns");
        let err = match pods.watch(&WatchParams::default()).await {
            Ok(_) => panic!("expected to fail for content type {content_type}"),
            Err(e) => e,
        };
        assert!(err.to_string().contains(content_type), "{err}");
    }
}

#[tokio::test]
async fn several_events_in_one_chunk() {
    let mut chunk = Vec::new();
    for e in table() {
        chunk.extend(serde_json::to_vec(&e).unwrap());
        chunk.push(b'\n');
    }
    let server = TestServer::start([Reply::Chunks {
        status: 200,
        headers: vec![("content-type", "application/json".into())],
        chunks: vec![Bytes::from(chunk)],
        then: AfterChunks::End,
    }])
    .await;
    let pods: Api<Pod> = Api::namespaced(client(unlimited(&server)), "ns");
    let events = pods.watch(&WatchParams::default()).await.unwrap();
    assert_eq!(collect(events).await, ok(&TABLE));
}

#[tokio::test]
async fn one_event_split_byte_by_byte() {
    let mut all = Vec::new();
    for e in table() {
        all.extend(serde_json::to_vec(&e).unwrap());
        all.push(b'\n');
    }
    let server = TestServer::start([Reply::Chunks {
        status: 200,
        headers: vec![("content-type", "application/json".into())],
        chunks: all.iter().map(|b| Bytes::copy_from_slice(&[*b])).collect(),
        then: AfterChunks::End,
    }])
    .await;
    let pods: Api<Pod> = Api::namespaced(client(unlimited(&server)), "ns");
    let events = pods.watch(&WatchParams::default()).await.unwrap();
    assert_eq!(collect(events).await, ok(&TABLE));
}

#[tokio::test]
async fn bookmark_and_error_events() {
    let server = TestServer::start([Reply::watch(&[
        event("ADDED", pod("a", "5")),
        event(
            "BOOKMARK",
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"resourceVersion": "12", "annotations": {"k8s.io/initial-events-end": "true"}}}),
        ),
        event(
            "ERROR",
            status_json(410, "Expired", "too old resource version: 5 (20)"),
        ),
    ])])
    .await;
    let pods: Api<Pod> = Api::namespaced(client(unlimited(&server)), "ns");
    let mut events = pods.watch(&WatchParams::default()).await.unwrap().boxed();
    assert!(matches!(
        events.next().await,
        Some(Ok(WatchEvent::Added(_)))
    ));
    match events.next().await {
        Some(Ok(WatchEvent::Bookmark(b))) => {
            assert_eq!(b.resource_version, "12");
            assert!(b.is_initial_events_end());
        }
        other => panic!("expected a bookmark, got {other:?}"),
    }
    match events.next().await {
        Some(Ok(WatchEvent::Error(e))) => {
            assert_eq!(e.code, 410);
            assert!(e.is_gone());
            assert_eq!(e.message(), "too old resource version: 5 (20)");
        }
        other => panic!("expected an ERROR event, got {other:?}"),
    }
    assert!(events.next().await.is_none());
}

#[tokio::test]
async fn non_200_watch_is_the_status_error() {
    let server = TestServer::start([Reply::status(
        410,
        "Expired",
        "too old resource version: 1 (20)",
    )])
    .await;
    let pods: Api<Pod> = Api::namespaced(client(unlimited(&server)), "ns");
    let err = match pods
        .watch(&WatchParams {
            resource_version: Some("1".into()),
            ..Default::default()
        })
        .await
    {
        Ok(_) => panic!("expected an error"),
        Err(e) => e,
    };
    assert!(err.is_gone(), "{err:?}");
    assert_eq!(err.to_string(), "too old resource version: 1 (20)");
    assert_eq!(server.requests().len(), 1);
}

// Port of client-go TestRequestWatch's response rows.
#[tokio::test]
async fn request_watch() {
    // "server returns forbidden with json content"
    let server = TestServer::start([Reply::status(403, "Forbidden", "pods is forbidden")]).await;
    let pods: Api<Pod> = Api::namespaced(client(unlimited(&server)), "ns");
    let err = pods.watch(&WatchParams::default()).await.err().unwrap();
    assert!(err.is_forbidden());
    assert_eq!(err.to_string(), "pods is forbidden");

    // "server returns forbidden without content"
    let server = TestServer::start([Reply::text(403, "")]).await;
    let pods: Api<Pod> = Api::namespaced(client(unlimited(&server)), "ns");
    let err = pods.watch(&WatchParams::default()).await.err().unwrap();
    assert!(err.is_forbidden(), "{err:?}");

    // "server returns unauthorized"
    let server = TestServer::start([Reply::status(401, "Unauthorized", "Unauthorized")]).await;
    let pods: Api<Pod> = Api::namespaced(client(unlimited(&server)), "ns");
    let err = pods.watch(&WatchParams::default()).await.err().unwrap();
    assert!(err.is_unauthorized());

    // "max retries 2, server always returns a response with Retry-After header"
    let server = TestServer::start([]).await;
    server.set_fallback(Reply::status(500, "InternalError", "busy").header("retry-after", "0"));
    let pods: Api<Pod> = Api::namespaced(client(unlimited(&server).with_max_retries(2)), "ns");
    let err = pods.watch(&WatchParams::default()).await.err().unwrap();
    assert_eq!(err.api_error().unwrap().code, 500);
    assert!(matches!(err, Error::Retried { attempts: 3, .. }), "{err:?}");
    assert_eq!(server.requests().len(), 3);
}

// client-go TestRequestWatch "max retries, server always returns EOF error": when the
// retries of a retryable connection failure run out, the watch is empty, not an error.
#[tokio::test]
async fn exhausted_connection_retries_give_an_empty_watch() {
    let server = TestServer::start([]).await;
    server.set_fallback(Reply::Drop);
    let pods: Api<Pod> = Api::namespaced(client(unlimited(&server).with_max_retries(1)), "ns");
    let events = pods.watch(&WatchParams::default()).await.unwrap();
    assert_eq!(collect(events).await, ok(&[]));
    assert_eq!(server.requests().len(), 2);
}

#[tokio::test]
async fn dropped_connection_is_retried_for_watch() {
    let server = TestServer::start([Reply::Drop, Reply::watch(&table())]).await;
    let pods: Api<Pod> = Api::namespaced(client(unlimited(&server)), "ns");
    let events = pods.watch(&WatchParams::default()).await.unwrap();
    assert_eq!(collect(events).await, ok(&TABLE));
    assert_eq!(server.requests().len(), 2);
}

#[tokio::test]
async fn connection_cut_mid_stream_ends_the_watch_quietly() {
    let mut first = serde_json::to_vec(&table()[0]).unwrap();
    first.push(b'\n');
    let server = TestServer::start([Reply::Chunks {
        status: 200,
        headers: vec![("content-type", "application/json".into())],
        chunks: vec![Bytes::from(first), Bytes::from_static(br#"{"type":"MODIF"#)],
        then: AfterChunks::Abort,
    }])
    .await;
    let pods: Api<Pod> = Api::namespaced(client(unlimited(&server)), "ns");
    let events = pods.watch(&WatchParams::default()).await.unwrap();
    assert_eq!(collect(events).await, ok(&["ADDED first"]));
}

#[tokio::test]
async fn undecodable_event_is_an_error_item() {
    let server = TestServer::start([Reply::watch(&[
        event("ADDED", pod("a", "1")),
        json!({"type": "CHANGED", "object": {}}),
    ])])
    .await;
    let pods: Api<Pod> = Api::namespaced(client(unlimited(&server)), "ns");
    let got = collect(pods.watch(&WatchParams::default()).await.unwrap()).await;
    assert_eq!(got[0], Ok("ADDED a".to_owned()));
    assert!(got[1].as_ref().unwrap_err().contains("CHANGED"), "{got:?}");
}

// The client deadline (server timeout + 5s) ends a watch whose server stops talking.
// (Real time: 6 s.)
#[tokio::test]
async fn client_deadline_ends_a_silent_watch() {
    let mut first = serde_json::to_vec(&table()[0]).unwrap();
    first.push(b'\n');
    let server = TestServer::start([Reply::Chunks {
        status: 200,
        headers: vec![("content-type", "application/json".into())],
        chunks: vec![Bytes::from(first)],
        then: AfterChunks::Hang,
    }])
    .await;
    let pods: Api<Pod> = Api::namespaced(client(unlimited(&server)), "ns");
    let events = pods
        .watch(&WatchParams {
            timeout_seconds: Some(1),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(collect(events).await, ok(&["ADDED first"]));
}

// Config.timeout is for non-watch requests only.
#[tokio::test]
async fn request_timeout_does_not_cut_watches() {
    let mut first = serde_json::to_vec(&table()[0]).unwrap();
    first.push(b'\n');
    let server = TestServer::start([Reply::Chunks {
        status: 200,
        headers: vec![("content-type", "application/json".into())],
        chunks: vec![Bytes::from(first)],
        then: AfterChunks::Hang,
    }])
    .await;
    let mut config = server.config();
    config.timeout = Some(Duration::from_millis(50));
    let pods: Api<Pod> = Api::namespaced(
        client(kctrl_client::HttpBackend::new(config).unwrap()),
        "ns",
    );
    let mut events = pods.watch(&WatchParams::default()).await.unwrap().boxed();
    assert!(matches!(
        events.next().await,
        Some(Ok(WatchEvent::Added(_)))
    ));
    // Well past the request timeout the stream is still open (no item, no end).
    let next = tokio::time::timeout(Duration::from_millis(500), events.next()).await;
    assert!(next.is_err(), "the watch ended or yielded: {next:?}");
}

/// A pod as the API server sends it, with server-side-apply bookkeeping.
fn pod_with_managed_fields(name: &str, rv: &str) -> serde_json::Value {
    let mut p = pod(name, rv);
    p["metadata"]["managedFields"] = json!([{
        "manager": "kubectl", "operation": "Update", "apiVersion": "v1",
        "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {"f:labels": {"f:app": {}}}}
    }]);
    p["metadata"]["labels"] = json!({"app": "web"});
    p
}

// `without_managed_fields` applies to every decoding path of a handle: get, list, watch
// (object after and before the type), and the answer to a write; other fields are intact.
#[tokio::test]
async fn without_managed_fields_skips_them_on_every_path() {
    use kctrl_client::{ListParams, PostParams};
    let object_first = json!({"object": pod_with_managed_fields("b", "3"), "type": "MODIFIED"});
    let replies = |_: ()| {
        vec![
            Reply::json(200, pod_with_managed_fields("a", "1")),
            Reply::json(
                200,
                json!({"apiVersion": "v1", "kind": "PodList", "metadata": {"resourceVersion": "2"},
                       "items": [pod_with_managed_fields("a", "1"), pod_with_managed_fields("b", "2")]}),
            ),
            Reply::watch(&[
                event("ADDED", pod_with_managed_fields("a", "1")),
                object_first.clone(),
            ]),
            Reply::json(200, pod_with_managed_fields("a", "4")),
        ]
    };
    for trim in [false, true] {
        let server = TestServer::start(replies(())).await;
        let mut pods: Api<Pod> = Api::namespaced(client(unlimited(&server)), "ns");
        if trim {
            pods = pods.without_managed_fields();
        }
        assert_eq!(pods.skips_managed_fields(), trim);
        let mut seen: Vec<Pod> = vec![pods.get("a").await.unwrap()];
        seen.extend(pods.list(&ListParams::default()).await.unwrap().items);
        let events: Vec<_> = pods
            .watch(&WatchParams::default())
            .await
            .unwrap()
            .collect()
            .await;
        for e in events {
            match e.unwrap() {
                WatchEvent::Added(p) | WatchEvent::Modified(p) => seen.push(p),
                other => panic!("unexpected {other:?}"),
            }
        }
        let mut written = pod("a", "1");
        written["metadata"]["namespace"] = json!("ns");
        let written: Pod = serde_json::from_value(written).unwrap();
        seen.push(pods.update(&PostParams::default(), &written).await.unwrap());
        assert_eq!(seen.len(), 6);
        for p in &seen {
            assert_eq!(p.metadata.managed_fields.is_some(), !trim, "{p:?}");
            assert_eq!(p.metadata.labels.as_ref().unwrap()["app"], "web");
        }
    }
}

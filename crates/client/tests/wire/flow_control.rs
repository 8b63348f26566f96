//! The client-side rate limiter on the wire. Real time, lower bounds only.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kctrl_client::{Api, WatchParams};
use serde_json::json;

use crate::server::{MetricEvent, Reply, TestServer};
use crate::{client, recorded};

fn pod_reply() -> Reply {
    Reply::json(
        200,
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}}),
    )
}

#[tokio::test]
async fn qps_and_burst_limit_requests() {
    const QPS: f32 = 10.0;
    const BURST: u32 = 2;
    const N: u32 = 6;
    let server = TestServer::start([]).await;
    server.set_fallback(pod_reply());
    let mut config = server.config();
    config.qps = QPS;
    config.burst = BURST;
    let (backend, metrics) = recorded(config);
    let pods: Api<Pod> = Api::namespaced(client(backend), "ns");
    let start = Instant::now();
    for _ in 0..N {
        pods.get("p").await.unwrap();
    }
    let took = start.elapsed();
    // N requests need N - BURST refills at QPS per second.
    let min = Duration::from_secs_f32((N - BURST) as f32 / QPS);
    assert!(
        took >= min,
        "{N} requests took {took:?}, expected at least {min:?}"
    );
    assert_eq!(metrics.rate_limiter_waits().len(), N as usize);
    // The requests after the burst waited for their tokens.
    assert!(metrics.rate_limiter_waits()[N as usize - 1] > Duration::from_millis(50));
}

#[tokio::test]
async fn limiter_is_shared_by_concurrent_requests() {
    const QPS: f32 = 20.0;
    const BURST: u32 = 2;
    const N: u32 = 8;
    let server = TestServer::start([]).await;
    server.set_fallback(pod_reply());
    let mut config = server.config();
    config.qps = QPS;
    config.burst = BURST;
    let client = kctrl_client::Client::try_from_config(config).unwrap();
    let start = Instant::now();
    let calls = (0..N).map(|_| {
        let pods: Api<Pod> = Api::namespaced(client.clone(), "ns");
        async move { pods.get("p").await.unwrap() }
    });
    futures::future::join_all(calls).await;
    let took = start.elapsed();
    let min = Duration::from_secs_f32((N - BURST) as f32 / QPS);
    assert!(
        took >= min,
        "{N} requests took {took:?}, expected at least {min:?}"
    );
}

#[tokio::test]
async fn negative_qps_disables_the_limiter() {
    let server = TestServer::start([]).await;
    server.set_fallback(pod_reply());
    let mut config = server.config();
    config.qps = -1.0;
    config.burst = 1;
    let (backend, metrics) = recorded(config);
    assert_eq!(backend.rate_limit(), None);
    let pods: Api<Pod> = Api::namespaced(client(backend), "ns");
    for _ in 0..20 {
        pods.get("p").await.unwrap();
    }
    assert!(metrics.rate_limiter_waits().is_empty());
    assert_eq!(metrics.result_codes().len(), 20);
}

#[tokio::test]
async fn watch_is_not_rate_limited_on_first_attempt() {
    let server = TestServer::start([pod_reply(), Reply::watch(&[])]).await;
    let mut config = server.config();
    // One token, then one every 100 s.
    config.qps = 0.01;
    config.burst = 1;
    let (backend, metrics) = recorded(config);
    let pods: Api<Pod> = Api::namespaced(client(backend), "ns");
    pods.get("p").await.unwrap();
    let opened = tokio::time::timeout(Duration::from_secs(30), pods.watch(&WatchParams::default()))
        .await
        .expect("the watch waited for a rate-limiter token");
    assert!(opened.is_ok());
    assert_eq!(
        metrics.rate_limiter_waits().len(),
        1,
        "only the GET took a token"
    );
}

#[tokio::test]
async fn retries_wait_for_tokens_watches_included() {
    let server = TestServer::start([
        Reply::text(429, "slow down").header("retry-after", "0"),
        Reply::text(429, "slow down").header("retry-after", "0"),
        pod_reply(),
        Reply::text(429, "slow down").header("retry-after", "0"),
        Reply::watch(&[]),
    ])
    .await;
    let (backend, metrics) = recorded(server.config());
    let pods: Api<Pod> = Api::namespaced(client(backend), "ns");
    pods.get("p").await.unwrap();
    assert_eq!(
        metrics.rate_limiter_waits().len(),
        3,
        "first attempt + 2 retries"
    );
    let _events = pods.watch(&WatchParams::default()).await.unwrap();
    assert_eq!(
        metrics.rate_limiter_waits().len(),
        4,
        "the watch's retry took a token"
    );
}

#[tokio::test]
async fn metric_labels() {
    let server = TestServer::start([pod_reply()]).await;
    let host = format!(
        "{}:{}",
        server.url().host_str().unwrap(),
        server.url().port().unwrap()
    );
    let (backend, metrics) = recorded(server.config());
    let pods: Api<Pod> = Api::namespaced(client(backend), "ns");
    pods.get("p").await.unwrap();
    let events = metrics.events();
    assert!(
        matches!(&events[0], MetricEvent::RateLimiter { verb, host: h, .. } if verb == "GET" && *h == host),
        "{events:?}"
    );
    assert_eq!(
        events[1],
        MetricEvent::Result {
            code: "200".into(),
            method: "GET".into(),
            host: host.clone()
        }
    );
    assert_eq!(
        events[2],
        MetricEvent::Latency {
            verb: "GET".into(),
            host
        }
    );
    assert_eq!(events.len(), 3);
}

/// kube-controller-manager's client per controller: a named sibling spends a token bucket of
/// its own, and its user agent names it.
#[tokio::test]
async fn a_named_sibling_waits_on_a_bucket_of_its_own() {
    let server = TestServer::start([]).await;
    server.set_fallback(pod_reply());
    let mut config = server.config();
    // One token, then one more every 100 s.
    config.qps = 0.01;
    config.burst = 1;
    config.user_agent = Some("controller-manager/1.0".to_owned());
    let root = kctrl_client::HttpBackend::new(config).unwrap();
    let sibling = root.named_sibling("replicaset-controller").unwrap();
    let root_pods: Api<Pod> = Api::namespaced(client(root), "ns");
    let sibling_pods: Api<Pod> = Api::namespaced(client(sibling), "ns");

    root_pods.get("p").await.unwrap();
    // On the root's bucket this would wait 100 s.
    tokio::time::timeout(Duration::from_secs(30), sibling_pods.get("p"))
        .await
        .expect("the sibling waited on the root's empty bucket")
        .unwrap();
    // The root's bucket is still empty.
    assert!(
        tokio::time::timeout(Duration::from_millis(300), root_pods.get("p"))
            .await
            .is_err(),
        "the root's second request did not wait for a token"
    );
    let agents: Vec<String> = server
        .requests()
        .iter()
        .map(|r| r.header("user-agent").unwrap_or_default().to_owned())
        .collect();
    assert_eq!(
        agents,
        [
            "controller-manager/1.0",
            "controller-manager/1.0/replicaset-controller"
        ]
    );
}

#[tokio::test]
async fn a_sibling_name_that_cannot_be_a_header_is_refused() {
    let server = TestServer::start([]).await;
    let root = kctrl_client::HttpBackend::new(server.config()).unwrap();
    let err = root.named_sibling("bad\nname").unwrap_err();
    assert!(err.to_string().contains("\"bad\\nname\""), "{err}");
}

//! Failure responses decoded into `Error`, transport failures and timeouts.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kctrl_client::{Api, Error};

use crate::server::{Reply, TestServer};
use crate::{client, unlimited};

#[tokio::test]
async fn status_bodies_are_decoded() {
    type Check = fn(&Error) -> bool;
    let cases: [(u16, &str, &str, Check); 7] = [
        (
            404,
            "NotFound",
            r#"pods "p" not found"#,
            Error::is_not_found,
        ),
        (
            409,
            "Conflict",
            "the object has been modified",
            Error::is_conflict,
        ),
        (
            409,
            "AlreadyExists",
            r#"pods "p" already exists"#,
            Error::is_already_exists,
        ),
        (
            410,
            "Expired",
            "too old resource version: 1 (20)",
            Error::is_gone,
        ),
        (
            422,
            "Invalid",
            "spec.containers: Required value",
            Error::is_invalid,
        ),
        (
            403,
            "Forbidden",
            r#"pods "p" is forbidden: User "x" cannot get"#,
            Error::is_forbidden,
        ),
        // 429 without Retry-After: final, not retried.
        (
            429,
            "TooManyRequests",
            "too many requests",
            Error::is_too_many_requests,
        ),
    ];
    for (code, reason, message, check) in cases {
        let server = TestServer::start([Reply::status(code, reason, message)]).await;
        let pods: Api<Pod> = Api::namespaced(client(unlimited(&server)), "ns");
        let err = pods.get("p").await.unwrap_err();
        assert!(check(&err), "{code} {reason}: {err:?}");
        let api = err.api_error().expect("an API error");
        assert_eq!(api.code, code);
        assert_eq!(api.reason(), reason);
        assert_eq!(err.to_string(), message);
        assert_eq!(server.requests().len(), 1, "{code} must not be retried");
    }
}

#[tokio::test]
async fn non_status_body_is_reported_with_the_code() {
    let server = TestServer::start([Reply::text(502, "<html>Bad Gateway</html>")]).await;
    let pods: Api<Pod> = Api::namespaced(client(unlimited(&server)), "ns");
    let err = pods.get("p").await.unwrap_err();
    let api = err.api_error().unwrap();
    assert_eq!(api.code, 502);
    assert!(err.to_string().contains("HTTP 502"), "{err}");
    assert!(err.to_string().contains("Bad Gateway"), "{err}");
    assert!(!err.is_not_found());
}

#[tokio::test]
async fn an_undecodable_success_body_names_the_request() {
    let server =
        TestServer::start([Reply::text(200, "{\"kind\": \"Pod\", \"metadata\": 7}")]).await;
    let pods: Api<Pod> = Api::namespaced(client(unlimited(&server)), "ns");
    let err = pods.get("p").await.unwrap_err();
    assert!(matches!(err, Error::Decode { .. }), "{err:?}");
    assert!(
        err.to_string().contains(r#"GET pods "p" in "ns" response"#),
        "{err}"
    );
}

#[tokio::test]
async fn bare_404_is_not_found() {
    let server = TestServer::start([Reply::text(404, "404 page not found")]).await;
    let pods: Api<Pod> = Api::namespaced(client(unlimited(&server)), "ns");
    assert!(pods.get("p").await.unwrap_err().is_not_found());
    let server = TestServer::start([Reply::text(404, "404 page not found")]).await;
    let pods: Api<Pod> = Api::namespaced(client(unlimited(&server)), "ns");
    assert_eq!(pods.get_opt("p").await.unwrap(), None);
}

#[tokio::test]
async fn a_404_for_an_unserved_resource_names_it() {
    use kctrl_client::{DynamicObject, ListParams, ResourceRef, Scope, WatchParams};
    let foos = ResourceRef::new(
        "samplecontroller.k8s.io",
        "v1alpha1",
        "foos",
        "Foo",
        Scope::Namespaced,
    );
    let expected = "foos.samplecontroller.k8s.io: the server has no such resource - is its \
                    CustomResourceDefinition installed?";
    // kube-apiserver's answer for a group it does not serve: text, no Status.
    let server = TestServer::start([
        Reply::text(404, "404 page not found"),
        Reply::text(404, "404 page not found"),
    ])
    .await;
    let api = Api::<DynamicObject>::namespaced_dynamic(client(unlimited(&server)), "ns", &foos);
    let err = api.list(&ListParams::default()).await.unwrap_err();
    assert!(err.is_not_found(), "{err:?}");
    assert_eq!(
        err.to_string(),
        format!("{expected} (the server responded with HTTP 404: 404 page not found)")
    );
    let err = api.watch(&WatchParams::default()).await.err().unwrap();
    assert!(err.to_string().starts_with(expected), "{err}");
    // Its answer for a group it serves, without this resource: a generic Status.
    let server = TestServer::start([Reply::status(
        404,
        "NotFound",
        "the server could not find the requested resource",
    )])
    .await;
    let api = Api::<DynamicObject>::namespaced_dynamic(client(unlimited(&server)), "ns", &foos);
    let err = api.list(&ListParams::default()).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("{expected} (the server could not find the requested resource)")
    );
    // A missing object is still just that.
    let server = TestServer::start([Reply::json(
        404,
        serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
            "reason": "NotFound", "code": 404,
            "message": "foos.samplecontroller.k8s.io \"a\" not found",
            "details": {"name": "a", "group": "samplecontroller.k8s.io", "kind": "foos"}}),
    )])
    .await;
    let api = Api::<DynamicObject>::namespaced_dynamic(client(unlimited(&server)), "ns", &foos);
    let err = api.get("a").await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "foos.samplecontroller.k8s.io \"a\" not found"
    );
}

#[tokio::test]
async fn unauthorized_is_returned_not_retried() {
    let server = TestServer::start([
        Reply::status(401, "Unauthorized", "Unauthorized"),
        Reply::json(
            200,
            serde_json::json!({"kind": "Pod", "apiVersion": "v1", "metadata": {"name": "p"}}),
        ),
    ])
    .await;
    let pods: Api<Pod> = Api::namespaced(client(unlimited(&server)), "ns");
    let err = pods.get("p").await.unwrap_err();
    assert!(err.is_unauthorized(), "{err:?}");
    assert_eq!(server.requests().len(), 1);
    // The next call goes out again (with refreshed credentials, once the transport has any).
    pods.get("p").await.unwrap();
}

#[tokio::test]
async fn transport_errors_do_not_print_a_password_in_the_server_url() {
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let config =
        kctrl_client::config::Config::new(format!("http://alice:hunter2@{addr}").parse().unwrap());
    let backend = kctrl_client::HttpBackend::new(config).unwrap();
    assert!(!format!("{backend:?}").contains("hunter2"));
    let pods: Api<Pod> = Api::namespaced(client(backend), "ns");
    let err = pods.get("p").await.unwrap_err();
    for text in [err.to_string(), format!("{err:?}")] {
        assert!(!text.contains("hunter2"), "{text}");
    }
    match &err {
        Error::Transport { url, .. } => {
            assert_eq!(
                url,
                &format!("http://alice:redacted@{addr}/api/v1/namespaces/ns/pods/p")
            );
        }
        other => panic!("expected a transport error, got {other:?}"),
    }
}

#[tokio::test]
async fn connection_refused_is_a_transport_error_naming_the_url() {
    // Bind and release a port so nothing listens on it.
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let config = kctrl_client::config::Config::new(format!("http://{addr}").parse().unwrap());
    let pods: Api<Pod> = Api::namespaced(
        client(kctrl_client::HttpBackend::new(config).unwrap()),
        "ns",
    );
    let err = pods.get("p").await.unwrap_err();
    match &err {
        Error::Transport { verb, url, .. } => {
            assert_eq!(verb, "GET");
            assert_eq!(url, &format!("http://{addr}/api/v1/namespaces/ns/pods/p"));
        }
        other => panic!("expected a transport error, got {other:?}"),
    }
    assert!(err.is_transport());
}

#[tokio::test]
async fn request_timeout() {
    let server = TestServer::start([Reply::Hang]).await;
    let mut config = server.config();
    config.timeout = Some(Duration::from_millis(300));
    let pods: Api<Pod> = Api::namespaced(
        client(kctrl_client::HttpBackend::new(config).unwrap()),
        "ns",
    );
    let err = pods.get("p").await.unwrap_err();
    match &err {
        Error::Timeout { verb, url, after } => {
            assert_eq!(verb, "GET");
            assert!(url.ends_with("/api/v1/namespaces/ns/pods/p"), "{url}");
            assert_eq!(*after, Duration::from_millis(300));
        }
        other => panic!("expected a timeout, got {other:?}"),
    }
    assert!(err.is_transport());
}

// A timeout too large to be a deadline (`Duration::MAX`) means no deadline: the request is
// sent and answered instead of panicking while computing its deadline.
#[tokio::test]
async fn a_huge_request_timeout_means_no_deadline() {
    let server = TestServer::start([Reply::json(
        200,
        serde_json::json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}}),
    )])
    .await;
    let mut config = server.config();
    config.timeout = Some(Duration::MAX);
    let pods: Api<Pod> = Api::namespaced(
        client(kctrl_client::HttpBackend::new(config).unwrap()),
        "ns",
    );
    let pod = pods.get("p").await.unwrap();
    assert_eq!(pod.metadata.name.as_deref(), Some("p"));
}

#[tokio::test]
async fn timeout_bounds_retries_too() {
    let server = TestServer::start([]).await;
    server
        .set_fallback(Reply::status(503, "ServiceUnavailable", "busy").header("retry-after", "1"));
    let mut config = server.config();
    config.qps = -1.0;
    config.timeout = Some(Duration::from_millis(1500));
    let pods: Api<Pod> = Api::namespaced(
        client(kctrl_client::HttpBackend::new(config).unwrap()),
        "ns",
    );
    let err = pods.get("p").await.unwrap_err();
    match &err {
        Error::Retried { last, previous, .. } => {
            assert!(matches!(**last, Error::Timeout { .. }), "{last:?}");
            assert!(
                previous.as_ref().is_some_and(|p| p.status().is_some()),
                "{previous:?}"
            );
        }
        other => panic!("expected a timeout after retries, got {other:?}"),
    }
    assert!(err.is_transport());
    assert!(
        err.to_string()
            .contains("error from a previous attempt: busy"),
        "{err}"
    );
}

#[tokio::test]
async fn timeout_during_a_retry_delay_keeps_the_servers_error() {
    let server = TestServer::start([
        Reply::status(503, "ServiceUnavailable", "busy").header("retry-after", "30")
    ])
    .await;
    let mut config = server.config();
    config.timeout = Some(Duration::from_millis(300));
    let pods: Api<Pod> = Api::namespaced(
        client(kctrl_client::HttpBackend::new(config).unwrap()),
        "ns",
    );
    let err = pods.get("p").await.unwrap_err();
    match &err {
        Error::Retried {
            attempts: 1,
            last,
            previous: Some(previous),
        } => {
            assert!(matches!(**last, Error::Timeout { .. }), "{last:?}");
            assert_eq!(previous.status().unwrap().code, Some(503));
        }
        other => panic!("expected a timeout with the 503 as context, got {other:?}"),
    }
    assert!(
        err.to_string()
            .contains("(after 1 attempt) - error from a previous attempt: busy"),
        "{err}"
    );
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn oversized_bodies_fail_with_the_limit_named() {
    use crate::server::AfterChunks;
    use bytes::Bytes;

    // A successful body announced larger than the limit.
    let big = "x".repeat(2048);
    let server = TestServer::start([Reply::text(200, &big)]).await;
    let backend = unlimited(&server).with_max_body_size(1024);
    let pods: Api<Pod> = Api::namespaced(client(backend), "ns");
    let err = pods.get("p").await.unwrap_err();
    match &err {
        Error::BodyTooLarge { what, limit } => {
            assert_eq!(*limit, 1024);
            assert!(what.contains("HTTP 200 response to GET"), "{what}");
        }
        other => panic!("expected BodyTooLarge, got {other:?}"),
    }
    assert!(
        err.to_string().contains("exceeds the limit of 1024 bytes"),
        "{err}"
    );

    // A chunked body that never ends: reading stops at the limit instead of forever.
    let server = TestServer::start([Reply::Chunks {
        status: 200,
        headers: vec![("content-type", "application/json".to_owned())],
        chunks: vec![Bytes::from(vec![b' '; 700]), Bytes::from(vec![b' '; 700])],
        then: AfterChunks::Hang,
    }])
    .await;
    let backend = unlimited(&server).with_max_body_size(1024);
    let pods: Api<Pod> = Api::namespaced(client(backend), "ns");
    let err = tokio::time::timeout(Duration::from_secs(30), pods.get("p"))
        .await
        .expect("the read stops at the limit")
        .unwrap_err();
    assert!(
        matches!(err, Error::BodyTooLarge { limit: 1024, .. }),
        "{err:?}"
    );

    // A failure body over 1 MiB.
    let huge = "y".repeat(kctrl_client::MAX_ERROR_BODY_SIZE + 1);
    let server = TestServer::start([Reply::text(500, &huge)]).await;
    let pods: Api<Pod> = Api::namespaced(client(unlimited(&server)), "ns");
    let err = pods.get("p").await.unwrap_err();
    match &err {
        Error::BodyTooLarge { what, limit } => {
            assert_eq!(*limit, kctrl_client::MAX_ERROR_BODY_SIZE);
            assert!(what.contains("HTTP 500"), "{what}");
        }
        other => panic!("expected BodyTooLarge, got {other:?}"),
    }

    // Bodies at the limit, in one piece or several, are read whole.
    let server = TestServer::start([Reply::Chunks {
        status: 200,
        headers: vec![("content-type", "application/json".to_owned())],
        chunks: vec![
            Bytes::from_static(br#"{"kind": "Pod", "apiVersion": "v1", "#),
            Bytes::from_static(br#""metadata": {"name": "p"}}"#),
        ],
        then: AfterChunks::End,
    }])
    .await;
    let backend = unlimited(&server).with_max_body_size(62);
    let pods: Api<Pod> = Api::namespaced(client(backend), "ns");
    assert_eq!(
        pods.get("p").await.unwrap().metadata.name.as_deref(),
        Some("p")
    );
}

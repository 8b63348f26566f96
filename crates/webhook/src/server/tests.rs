use std::net::Ipv4Addr;

use k8s_openapi::api::core::v1::ConfigMap;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::*;
use crate::admission::{Defaulter, Validator, Warnings};
use crate::denial::Denied;
use crate::review::AdmissionRequest;
use crate::review::{AdmissionReview, ConversionReview};

struct Labeller;

impl Defaulter<ConfigMap> for Labeller {
    async fn set_defaults(&self, _: &AdmissionRequest, cm: &mut ConfigMap) -> Result<(), Denied> {
        cm.data
            .get_or_insert_with(Default::default)
            .insert("defaulted".into(), "yes".into());
        Ok(())
    }
}

struct NoFoo;

impl Validator<ConfigMap> for NoFoo {
    async fn validate_create(
        &self,
        _: &AdmissionRequest,
        cm: &ConfigMap,
    ) -> Result<Warnings, Denied> {
        if cm.data.as_ref().is_some_and(|d| d.contains_key("foo")) {
            return Err(Denied::forbidden("foo is not welcome"));
        }
        Ok(Vec::new())
    }
    async fn validate_update(
        &self,
        r: &AdmissionRequest,
        _: &ConfigMap,
        new: &ConfigMap,
    ) -> Result<Warnings, Denied> {
        self.validate_create(r, new).await
    }
}

/// A self-signed certificate for 127.0.0.1, as (cert PEM, key PEM).
fn identity(cn: &str) -> (String, String) {
    let mut params = rcgen::CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
    params
        .subject_alt_names
        .push(rcgen::SanType::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST)));
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, cn);
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = params.self_signed(&key).unwrap();
    (cert.pem(), key.serialize_pem())
}

async fn start(builder: ServerBuilder) -> (RunningServer, CancellationToken) {
    let cancel = CancellationToken::new();
    let server = builder
        .host(IpAddr::V4(Ipv4Addr::LOCALHOST))
        .port(0)
        .build()
        .unwrap();
    (server.start(cancel.clone()).await.unwrap(), cancel)
}

fn pem_server() -> (ServerBuilder, String) {
    let (cert, key) = identity("webhook");
    let b = WebhookServer::builder()
        .webhook(crate::Webhook::defaulting::<ConfigMap, _>(Labeller))
        .webhook(crate::Webhook::validating::<ConfigMap, _>(NoFoo))
        .tls_pem(cert.clone(), key);
    (b, cert)
}

/// Opens a TLS connection trusting `trusted` (PEM certificates); returns it and the server's
/// certificate.
async fn connect(
    addr: SocketAddr,
    trusted: &[&str],
) -> std::io::Result<(
    tokio_rustls::client::TlsStream<tokio::net::TcpStream>,
    CertificateDer<'static>,
)> {
    let mut roots = rustls::RootCertStore::empty();
    for pem in trusted {
        roots
            .add(CertificateDer::from_pem_slice(pem.as_bytes()).unwrap())
            .unwrap();
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let tcp = tokio::net::TcpStream::connect(addr).await?;
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(ServerName::IpAddress(Ipv4Addr::LOCALHOST.into()), tcp)
        .await?;
    let peer = tls.get_ref().1.peer_certificates().unwrap()[0]
        .clone()
        .into_owned();
    Ok((tls, peer))
}

/// One HTTP/1.1 request; the status and body of the answer.
async fn call(
    addr: SocketAddr,
    ca: &str,
    method: &str,
    path: &str,
    content_type: &str,
    body: &[u8],
) -> (u16, String) {
    let (mut tls, _) = connect(addr, &[ca]).await.unwrap();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    tls.write_all(head.as_bytes()).await.unwrap();
    tls.write_all(body).await.unwrap();
    let mut answer = Vec::new();
    let _ = tls.read_to_end(&mut answer).await;
    let answer = String::from_utf8_lossy(&answer).into_owned();
    let status = answer[9..12].parse().unwrap();
    let body = answer
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (status, body)
}

fn review(operation: &str, data: serde_json::Value) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "5f3c1d92-1f37-4c4a-9b1e-5b2c8d0e7a61",
            "kind": {"group": "", "version": "v1", "kind": "ConfigMap"},
            "resource": {"group": "", "version": "v1", "resource": "configmaps"},
            "name": "cm", "namespace": "default", "operation": operation,
            "userInfo": {"username": "admin"},
            "object": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}, "data": data},
        },
    }))
    .unwrap()
}

#[tokio::test]
async fn admission_reviews_are_answered_with_the_uid_over_https() {
    let (b, ca) = pem_server();
    let (running, cancel) = start(b).await;
    let addr = running.local_addr();
    let (status, body) = call(
        addr,
        &ca,
        "POST",
        "/mutate--v1-configmap",
        "application/json",
        &review("CREATE", json!({"a": "1"})),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let answer: AdmissionReview = serde_json::from_str(&body).unwrap();
    let response = answer.response.unwrap();
    assert_eq!(
        (answer.api_version.as_str(), answer.kind.as_str()),
        ("admission.k8s.io/v1", "AdmissionReview")
    );
    assert_eq!(response.uid, "5f3c1d92-1f37-4c4a-9b1e-5b2c8d0e7a61");
    assert!(response.allowed);
    assert_eq!(
        response.patch.as_deref(),
        Some("W3sib3AiOiJhZGQiLCJwYXRoIjoiL2RhdGEvZGVmYXVsdGVkIiwidmFsdWUiOiJ5ZXMifV0=")
    );

    let (status, body) = call(
        addr,
        &ca,
        "POST",
        "/validate--v1-configmap",
        "application/json",
        &review("CREATE", json!({"foo": "1"})),
    )
    .await;
    assert_eq!(status, 200);
    let response = serde_json::from_str::<AdmissionReview>(&body)
        .unwrap()
        .response
        .unwrap();
    assert!(!response.allowed);
    assert_eq!(
        response.status.unwrap().message.as_deref(),
        Some("foo is not welcome")
    );

    // The request counters, by path and HTTP code.
    assert_eq!(running.metrics().requests("/mutate--v1-configmap", 200), 1);
    let (status, metrics) = call(addr, &ca, "GET", "/metrics", "text/plain", b"").await;
    assert_eq!(status, 200);
    assert!(metrics.contains("controller_runtime_webhook_requests_total{webhook=\"/validate--v1-configmap\",code=\"200\"} 1"), "{metrics}");
    assert!(
        metrics.contains(
            "controller_runtime_webhook_requests_in_flight{webhook=\"/validate--v1-configmap\"} 0"
        ),
        "{metrics}"
    );
    assert!(
        metrics.contains(
            "controller_runtime_webhook_latency_seconds_count{webhook=\"/mutate--v1-configmap\"} 1"
        ),
        "{metrics}"
    );
    for probe in ["/healthz", "/readyz"] {
        assert_eq!(
            call(addr, &ca, "GET", probe, "text/plain", b"").await,
            (200, "ok".to_owned())
        );
    }
    cancel.cancel();
    running.stopped().await;
}

#[tokio::test]
async fn bad_requests_get_400_with_a_message() {
    let (b, ca) = pem_server();
    let (running, cancel) = start(b.max_body_bytes(64 * 1024)).await;
    let addr = running.local_addr();
    let path = "/validate--v1-configmap";
    let cases: [(&str, &[u8], &str); 6] = [
        ("application/json", b"{not json", "decoding the AdmissionReview: "),
        ("text/plain", b"{}", "the content type is \"text/plain\"; webhooks take application/json"),
        ("application/json", b"", "the request body is empty"),
        ("application/json", br#"{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}"#, "the AdmissionReview has no request"),
        ("application/json", br#"{"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview", "request": null}"#, "expected an AdmissionReview of admission.k8s.io/v1, got kind \"AdmissionReview\" of apiVersion \"admission.k8s.io/v1beta1\""),
        ("application/json", br#"{"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview"}"#, "expected an AdmissionReview of admission.k8s.io/v1, got kind \"ConversionReview\""),
    ];
    for (content_type, body, expected) in cases {
        let (status, text) = call(addr, &ca, "POST", path, content_type, body).await;
        assert_eq!(status, 400, "{text}");
        assert!(
            text.starts_with(expected),
            "{text:?} does not start with {expected:?}"
        );
    }
    let big = vec![b' '; 65 * 1024];
    assert_eq!(
        call(addr, &ca, "POST", path, "application/json", &big)
            .await
            .0,
        413
    );
    let (status, text) = call(addr, &ca, "POST", "/nowhere", "application/json", b"{}").await;
    assert_eq!(status, 404);
    assert!(
        text.contains("/mutate--v1-configmap, /validate--v1-configmap"),
        "{text}"
    );
    assert_eq!(
        call(addr, &ca, "GET", path, "application/json", b"")
            .await
            .0,
        405
    );
    // No conversions registered: /convert is not served.
    assert_eq!(
        call(addr, &ca, "POST", "/convert", "application/json", b"{}").await,
        (
            404,
            "/convert not found: this server converts no kind\n".to_owned()
        )
    );
    assert_eq!(running.metrics().requests(path, 400), 6);
    cancel.cancel();
    running.stopped().await;
}

#[tokio::test]
async fn the_next_handshake_sees_a_rotated_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let first = identity("first");
    std::fs::write(dir.path().join("tls.crt"), &first.0).unwrap();
    std::fs::write(dir.path().join("tls.key"), &first.1).unwrap();
    let builder = WebhookServer::builder()
        .webhook(crate::Webhook::validating::<ConfigMap, _>(NoFoo))
        .cert_dir(dir.path())
        // Not polled during the test: the reload is triggered below.
        .cert_poll_interval(Duration::from_secs(3600));
    let (running, cancel) = start(builder).await;
    let addr = running.local_addr();
    let (_, seen) = connect(addr, &[&first.0]).await.unwrap();
    assert_eq!(
        seen,
        CertificateDer::from_pem_slice(first.0.as_bytes()).unwrap()
    );

    let second = identity("second");
    std::fs::write(dir.path().join("tls.crt"), &second.0).unwrap();
    std::fs::write(dir.path().join("tls.key"), &second.1).unwrap();
    assert!(running.certificates().reload().unwrap());
    let (_, seen) = connect(addr, &[&first.0, &second.0]).await.unwrap();
    assert_eq!(
        seen,
        CertificateDer::from_pem_slice(second.0.as_bytes()).unwrap()
    );
    // A client trusting only the old certificate no longer connects.
    assert!(connect(addr, &[&first.0]).await.is_err());

    // A bad pair keeps the second one.
    std::fs::write(dir.path().join("tls.key"), &first.1).unwrap();
    assert!(running.certificates().reload().is_err());
    let (_, seen) = connect(addr, &[&second.0]).await.unwrap();
    assert_eq!(
        seen,
        CertificateDer::from_pem_slice(second.0.as_bytes()).unwrap()
    );
    cancel.cancel();
    running.stopped().await;
}

#[tokio::test]
async fn cancellation_stops_listening_and_the_server_returns() {
    let (b, ca) = pem_server();
    let (running, cancel) = start(b).await;
    let addr = running.local_addr();
    // An idle open connection does not hold the shutdown back past its graceful close.
    let (idle, _) = connect(addr, &[&ca]).await.unwrap();
    cancel.cancel();
    tokio::time::timeout(Duration::from_secs(20), running.stopped())
        .await
        .expect("stopped");
    drop(idle);
    assert!(
        tokio::net::TcpStream::connect(addr).await.is_err(),
        "still listening"
    );
}

#[test]
fn registration_mistakes_are_reported_together() {
    let (cert, key) = identity("x");
    let err = WebhookServer::builder()
        .webhook(crate::Webhook::validating::<ConfigMap, _>(NoFoo))
        .webhook(crate::Webhook::validating::<ConfigMap, _>(NoFoo).name("other.kb.io"))
        .webhook(crate::Webhook::defaulting::<ConfigMap, _>(Labeller).path("healthz"))
        .tls_pem(cert, key)
        .build()
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(
            "webhooks vconfigmap-v1.kb.io and other.kb.io are both at /validate--v1-configmap"
        ),
        "{err}"
    );
    assert!(err.contains("does not start with '/'"), "{err}");
    let err = WebhookServer::builder()
        .cert_dir("/nonexistent/certs")
        .build()
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("reading /nonexistent/certs/tls.crt"),
        "{err}"
    );
}

#[test]
fn two_webhooks_of_one_type_with_one_name_are_refused() {
    let (cert, key) = identity("x");
    let err = WebhookServer::builder()
        .webhook(crate::Webhook::validating::<ConfigMap, _>(NoFoo))
        .webhook(crate::Webhook::validating::<ConfigMap, _>(NoFoo).path("/validate-again"))
        .tls_pem(cert.clone(), key.clone())
        .build()
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(
            "the webhooks at /validate--v1-configmap and /validate-again are both named \
             vconfigmap-v1.kb.io in the ValidatingWebhookConfiguration"
        ) && err.contains(".name(...)"),
        "{err}"
    );
    // One name in each configuration is fine, and so are two names in one.
    WebhookServer::builder()
        .webhook(crate::Webhook::validating::<ConfigMap, _>(NoFoo).name("same.kb.io"))
        .webhook(crate::Webhook::defaulting::<ConfigMap, _>(Labeller).name("same.kb.io"))
        .webhook(
            crate::Webhook::validating::<ConfigMap, _>(NoFoo)
                .path("/validate-again")
                .name("again.kb.io"),
        )
        .tls_pem(cert, key)
        .build()
        .unwrap();
}

#[test]
fn a_zero_cert_poll_interval_is_refused() {
    let (cert, key) = identity("x");
    let err = WebhookServer::builder()
        .cert_poll_interval(Duration::ZERO)
        .tls_pem(cert.clone(), key.clone())
        .build()
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("the certificate poll interval is zero")
            && err.contains(".cert_poll_interval(...)"),
        "{err}"
    );
    WebhookServer::builder()
        .cert_poll_interval(Duration::from_millis(1))
        .tls_pem(cert, key)
        .build()
        .unwrap();
}

#[tokio::test]
async fn conversion_reviews_of_the_api_server_are_converted() {
    let (cert, key) = identity("convert");
    let builder = WebhookServer::builder()
        .conversion(
            crate::Conversion::<crate::test_widgets::v2::Widget>::new()
                .spoke::<crate::test_widgets::v1::Widget>(),
        )
        .tls_pem(cert.clone(), key);
    let (running, cancel) = start(builder).await;
    let addr = running.local_addr();
    for (body, expected) in [
        (
            include_str!("../review/testdata/conversion-to-v2.json"),
            json!({"width": 3, "height": 4}),
        ),
        (
            include_str!("../review/testdata/conversion-to-v1.json"),
            json!({"size": "30x40"}),
        ),
    ] {
        let (status, answer) = call(
            addr,
            &cert,
            "POST",
            "/convert",
            "application/json",
            body.as_bytes(),
        )
        .await;
        assert_eq!(status, 200, "{answer}");
        let answer: ConversionReview = serde_json::from_str(&answer).unwrap();
        let request: serde_json::Value = serde_json::from_str(body).unwrap();
        let response = answer.response.unwrap();
        assert_eq!(response.uid, request["request"]["uid"].as_str().unwrap());
        assert_eq!(response.result.status.as_deref(), Some("Success"));
        let converted = &response.converted_objects[0];
        assert_eq!(converted["spec"], expected);
        assert_eq!(
            converted["apiVersion"],
            request["request"]["desiredAPIVersion"]
        );
        // Metadata as it came.
        assert_eq!(
            converted["metadata"],
            request["request"]["objects"][0]["metadata"]
        );
    }
    let (status, text) = call(
        addr,
        &cert,
        "POST",
        "/convert",
        "application/json",
        br#"{"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview"}"#,
    )
    .await;
    assert_eq!(
        (status, text.as_str()),
        (400, "the ConversionReview has no request\n")
    );
    cancel.cancel();
    running.stopped().await;
}

struct Panics;

impl Validator<ConfigMap> for Panics {
    async fn validate_create(
        &self,
        _: &AdmissionRequest,
        _: &ConfigMap,
    ) -> Result<Warnings, Denied> {
        panic!("a bug in the handler")
    }
    async fn validate_update(
        &self,
        _: &AdmissionRequest,
        _: &ConfigMap,
        _: &ConfigMap,
    ) -> Result<Warnings, Denied> {
        Ok(Vec::new())
    }
}

#[tokio::test]
async fn a_panicking_handler_refuses_with_500_and_the_server_goes_on() {
    let (cert, key) = identity("panics");
    let builder = WebhookServer::builder()
        .webhook(crate::Webhook::validating::<ConfigMap, _>(Panics))
        .tls_pem(cert.clone(), key);
    let (running, cancel) = start(builder).await;
    let addr = running.local_addr();
    for _ in 0..2 {
        let (status, body) = call(
            addr,
            &cert,
            "POST",
            "/validate--v1-configmap",
            "application/json",
            &review("CREATE", json!({})),
        )
        .await;
        assert_eq!(status, 200);
        let response = serde_json::from_str::<AdmissionReview>(&body)
            .unwrap()
            .response
            .unwrap();
        assert!(!response.allowed);
        assert_eq!(response.uid, "5f3c1d92-1f37-4c4a-9b1e-5b2c8d0e7a61");
        let status = response.status.unwrap();
        assert_eq!(status.code, Some(500));
        assert_eq!(
            status.message.as_deref(),
            Some("the webhook's handler panicked: a bug in the handler")
        );
    }
    assert_eq!(running.metrics().panics(), 2);
    let (status, metrics) = call(addr, &cert, "GET", "/metrics", "text/plain", b"").await;
    assert_eq!(status, 200);
    assert!(
        metrics.contains("\ncontroller_runtime_webhook_panics_total 2\n")
            && metrics.contains("\ncontroller_runtime_conversion_webhook_panics_total 0\n"),
        "{metrics}"
    );
    cancel.cancel();
    running.stopped().await;
}

/// A v1 Widget whose conversion to the hub panics.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
struct PanickyV1 {
    metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
}

impl k8s_openapi::Resource for PanickyV1 {
    const API_VERSION: &'static str = "webhook.kctrl.dev/v1";
    const GROUP: &'static str = "webhook.kctrl.dev";
    const KIND: &'static str = "Widget";
    const VERSION: &'static str = "v1";
    const URL_PATH_SEGMENT: &'static str = "widgets";
    type Scope = k8s_openapi::NamespaceResourceScope;
}

impl crate::Spoke<crate::test_widgets::v2::Widget> for PanickyV1 {
    fn to_hub(self) -> Result<crate::test_widgets::v2::Widget, crate::ConversionError> {
        panic!("a bug in the conversion")
    }
    fn from_hub(_: crate::test_widgets::v2::Widget) -> Result<Self, crate::ConversionError> {
        panic!("a bug in the conversion")
    }
}

#[tokio::test]
async fn a_panicking_conversion_fails_the_review_and_is_counted() {
    let (cert, key) = identity("panics");
    let builder = WebhookServer::builder()
        .conversion(
            crate::Conversion::<crate::test_widgets::v2::Widget>::new().spoke::<PanickyV1>(),
        )
        .tls_pem(cert.clone(), key);
    let (running, cancel) = start(builder).await;
    let addr = running.local_addr();
    let (status, answer) = call(
        addr,
        &cert,
        "POST",
        "/convert",
        "application/json",
        include_str!("../review/testdata/conversion-to-v2.json").as_bytes(),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    let response = serde_json::from_str::<ConversionReview>(&answer)
        .unwrap()
        .response
        .unwrap();
    assert_eq!(response.result.status.as_deref(), Some("Failure"));
    assert_eq!(running.metrics().conversion_panics(), 1);
    assert_eq!(running.metrics().panics(), 0);
    cancel.cancel();
    running.stopped().await;
}

/// A server with `headers` as the header timeout and `idle` as the idle timeout; its address,
/// CA and cancellation.
async fn limited(headers: Duration, idle: Duration) -> (RunningServer, String, CancellationToken) {
    let (builder, ca) = pem_server();
    let (server, cancel) = start(
        builder
            .connection_timeouts(Duration::from_secs(5), headers)
            .idle_timeout(idle),
    )
    .await;
    (server, ca, cancel)
}

/// Reads `tls` until the server closes it, at most `bound`; how long that took, or `None`
/// if it stayed open.
async fn closed_within(
    tls: &mut tokio_rustls::client::TlsStream<tokio::net::TcpStream>,
    bound: Duration,
) -> Option<Duration> {
    let started = std::time::Instant::now();
    let mut sink = Vec::new();
    match tokio::time::timeout(bound, tls.read_to_end(&mut sink)).await {
        Ok(_) => Some(started.elapsed()),
        Err(_) => None,
    }
}

/// Each way of holding a connection without a request: it is closed after the header timeout
/// (300 ms here; the bound of 5 s only keeps a failing test from hanging).
#[tokio::test]
async fn connections_without_a_request_are_closed_after_the_header_timeout() {
    let timeout = Duration::from_millis(300);
    let (server, ca, cancel) = limited(timeout, Duration::from_secs(60)).await;
    let addr = server.local_addr();
    let rows: [(&str, &[u8]); 3] = [
        ("nothing sent", b""),
        (
            "an HTTP/2 preface only",
            b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
        ),
        (
            "partial HTTP/1 headers",
            b"POST /convert HTTP/1.1\r\nHost: 127.0.0.1\r\n",
        ),
    ];
    // Each row on its own connection, at once; every row's outcome is reported.
    let outcomes = futures::future::join_all(rows.into_iter().map(|(row, sent)| {
        let ca = ca.clone();
        async move {
            let (mut tls, _) = connect(addr, &[&ca]).await.unwrap();
            tls.write_all(sent).await.unwrap();
            tls.flush().await.unwrap();
            (row, closed_within(&mut tls, Duration::from_secs(5)).await)
        }
    }))
    .await;
    let wrong: Vec<String> = outcomes
        .iter()
        .filter_map(|(row, took)| match took {
            None => Some(format!("{row}: still open after 5 s")),
            Some(t) if *t < timeout / 2 => {
                Some(format!("{row}: closed after {t:?}, before the timeout"))
            }
            Some(_) => None,
        })
        .collect();
    assert!(wrong.is_empty(), "{wrong:?}");
    cancel.cancel();
    server.stopped().await;
}

#[tokio::test]
async fn an_idle_keep_alive_connection_is_closed_after_the_idle_timeout() {
    let idle = Duration::from_millis(300);
    // The header timeout is long: what closes the connection is the idle timeout.
    let (server, ca, cancel) = limited(Duration::from_secs(30), idle).await;
    let (mut tls, _) = connect(server.local_addr(), &[&ca]).await.unwrap();
    tls.write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .await
        .unwrap();
    // The answer (`ok`, with its length), the connection kept alive.
    let mut answer = Vec::new();
    while !answer.ends_with(b"\r\n\r\nok") {
        let mut chunk = [0u8; 512];
        let n = tls.read(&mut chunk).await.unwrap();
        assert!(
            n > 0,
            "closed before answering: {}",
            String::from_utf8_lossy(&answer)
        );
        answer.extend_from_slice(&chunk[..n]);
    }
    assert!(
        answer.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&answer)
    );
    let took = closed_within(&mut tls, Duration::from_secs(5))
        .await
        .expect("the idle connection is still open after 5 s");
    assert!(
        took >= idle / 2,
        "closed after {took:?}, before the idle timeout"
    );
    cancel.cancel();
    server.stopped().await;
}

#[tokio::test]
async fn connections_past_the_cap_wait_until_one_ends() {
    let (builder, ca) = pem_server();
    let (server, cancel) = start(builder.max_connections(1)).await;
    let addr = server.local_addr();
    let (first, _) = connect(addr, &[&ca]).await.unwrap();
    // The second is not accepted (its handshake gets no answer) while the first is open.
    let second = tokio::time::timeout(Duration::from_millis(500), connect(addr, &[&ca])).await;
    assert!(
        second.is_err(),
        "a second connection was served past the cap of 1"
    );
    drop(first);
    let third = tokio::time::timeout(Duration::from_secs(5), connect(addr, &[&ca]))
        .await
        .expect("no connection served after the first ended");
    third.unwrap();
    cancel.cancel();
    server.stopped().await;
}

#[test]
fn zero_limits_are_refused() {
    let (cert, key) = identity("x");
    let err = WebhookServer::builder()
        .idle_timeout(Duration::ZERO)
        .http2_keep_alive(Duration::from_secs(1), Duration::ZERO)
        .max_connections(0)
        .tls_pem(cert, key)
        .build()
        .unwrap_err()
        .to_string();
    for wanted in [
        "the idle timeout is zero",
        "the HTTP/2 keep-alive timeout is zero",
        "max_connections is zero",
    ] {
        assert!(err.contains(wanted), "{wanted}: {err}");
    }
}

/// Reads HTTP/2 frames from `tls` until a PING acknowledgement; false if the connection
/// ends first.
async fn ping_acknowledged(
    tls: &mut tokio_rustls::client::TlsStream<tokio::net::TcpStream>,
) -> bool {
    loop {
        let mut header = [0u8; 9];
        if tls.read_exact(&mut header).await.is_err() {
            return false;
        }
        let len =
            usize::from(header[0]) << 16 | usize::from(header[1]) << 8 | usize::from(header[2]);
        let mut payload = vec![0u8; len];
        if tls.read_exact(&mut payload).await.is_err() {
            return false;
        }
        // PING (type 6) with the ACK flag.
        if header[3] == 6 && header[4] & 1 == 1 {
            return true;
        }
    }
}

/// Every duration at `Duration::MAX` (never, in effect): requests are served as usual, over
/// HTTP/1 (a second request on the connection once the first ended) and HTTP/2, with no
/// overflow in the connection's deadlines.
#[tokio::test]
async fn durations_of_duration_max_serve_requests_normally() {
    let (builder, ca) = pem_server();
    let (server, cancel) = start(
        builder
            .connection_timeouts(Duration::MAX, Duration::MAX)
            .idle_timeout(Duration::MAX)
            .http2_keep_alive(Duration::MAX, Duration::MAX)
            .request_timeout(Duration::MAX)
            .cert_poll_interval(Duration::MAX)
            .shutdown_timeout(Duration::MAX),
    )
    .await;
    let addr = server.local_addr();

    let (mut tls, _) = connect(addr, &[&ca]).await.unwrap();
    for round in ["first", "second"] {
        tls.write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            .await
            .unwrap();
        let mut answer = Vec::new();
        while !answer.ends_with(b"\r\n\r\nok") {
            let mut chunk = [0u8; 512];
            let n = tokio::time::timeout(Duration::from_secs(5), tls.read(&mut chunk))
                .await
                .unwrap_or_else(|_| panic!("{round} request: no answer within 5 s"))
                .unwrap_or(0);
            assert!(
                n > 0,
                "{round} request: closed before answering: {:?}",
                String::from_utf8_lossy(&answer)
            );
            answer.extend_from_slice(&chunk[..n]);
        }
        assert!(
            answer.starts_with(b"HTTP/1.1 200"),
            "{round} request: {}",
            String::from_utf8_lossy(&answer)
        );
    }

    // HTTP/2: the preface, empty SETTINGS, then a PING the server must acknowledge.
    let (mut tls, _) = connect(addr, &[&ca]).await.unwrap();
    let mut frames = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    frames.extend_from_slice(&[0, 0, 0, 4, 0, 0, 0, 0, 0]);
    frames.extend_from_slice(&[0, 0, 8, 6, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8]);
    tls.write_all(&frames).await.unwrap();
    tls.flush().await.unwrap();
    let acked = tokio::time::timeout(Duration::from_secs(5), ping_acknowledged(&mut tls))
        .await
        .expect("no HTTP/2 PING acknowledgement within 5 s");
    assert!(
        acked,
        "the HTTP/2 connection ended before acknowledging the PING"
    );

    cancel.cancel();
    drop(tls);
    tokio::time::timeout(Duration::from_secs(5), server.stopped())
        .await
        .expect("the server did not stop within 5 s");
}

#[test]
fn more_connections_than_a_semaphore_counts_are_refused() {
    let (cert, key) = identity("x");
    let err = WebhookServer::builder()
        .max_connections(usize::MAX)
        .tls_pem(cert.clone(), key.clone())
        .build()
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(&format!("max_connections is {}", usize::MAX))
            && err.contains(&format!("at most {MAX_CONNECTIONS}")),
        "{err}"
    );
    // The limit itself is accepted.
    WebhookServer::builder()
        .max_connections(MAX_CONNECTIONS)
        .tls_pem(cert, key)
        .build()
        .unwrap();
}

#[tokio::test]
async fn the_largest_connection_cap_serves_requests() {
    let (builder, ca) = pem_server();
    let (server, cancel) = start(builder.max_connections(MAX_CONNECTIONS)).await;
    let (status, body) = call(
        server.local_addr(),
        &ca,
        "GET",
        "/healthz",
        "text/plain",
        b"",
    )
    .await;
    assert_eq!((status, body.as_str()), (200, "ok"));
    cancel.cancel();
    server.stopped().await;
}

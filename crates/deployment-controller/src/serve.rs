//! The HTTPS endpoints: `/healthz`, `/livez`, `/readyz` and `/metrics`.
//!
//! Health endpoints run named checks and answer `200 ok`, or `500` listing each check as
//! `[+]name ok` / `[-]name failed: reason` (with `?verbose`, the list is printed on success
//! too), as kube-controller-manager's do. `/metrics` is the Prometheus registry in the
//! OpenMetrics text format.
//!
//! TLS: the certificate and key given with `--tls-cert-file` / `--tls-private-key-file`, or
//! else a self-signed certificate generated in memory at start (for `localhost`, the loopback
//! addresses, the bind address and the host name). Nothing here is authenticated: unlike
//! kube-controller-manager, the endpoints do not delegate authentication to the API server,
//! so restrict who can reach the port (bind address, network policy).

use std::convert::Infallible;
use std::fmt::Write as _;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, Result};
use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use prometheus_client::registry::Registry;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

/// A named health check: `Ok` when healthy, `Err(reason)` otherwise.
pub(crate) type Check = Arc<dyn Fn() -> Result<(), String> + Send + Sync>;

/// What the endpoints report.
#[derive(Clone)]
pub(crate) struct Endpoints {
    /// Checks of `/healthz` (besides `ping`).
    pub(crate) healthz: Vec<(&'static str, Check)>,
    /// Checks of `/readyz` (besides `ping`).
    pub(crate) readyz: Vec<(&'static str, Check)>,
    /// The metrics `/metrics` encodes.
    pub(crate) registry: Arc<Registry>,
}

/// One health endpoint's answer: status and body.
fn health(checks: &[(&'static str, Check)], verbose: bool, what: &str) -> (StatusCode, String) {
    let mut lines = String::from("[+]ping ok\n");
    let mut failed = Vec::new();
    for (name, check) in checks {
        match check() {
            Ok(()) => {
                let _ = writeln!(lines, "[+]{name} ok");
            }
            Err(reason) => {
                let _ = writeln!(lines, "[-]{name} failed: {reason}");
                failed.push(*name);
            }
        }
    }
    if failed.is_empty() {
        if verbose {
            let _ = writeln!(lines, "{what} check passed");
            (StatusCode::OK, lines)
        } else {
            (StatusCode::OK, "ok".to_owned())
        }
    } else {
        warn!(endpoint = what, checks = ?failed, "{what} check failed");
        let _ = writeln!(lines, "{what} check failed");
        (StatusCode::INTERNAL_SERVER_ERROR, lines)
    }
}

/// Answers one request.
pub(crate) fn respond(
    endpoints: &Endpoints,
    method: &Method,
    path: &str,
    query: Option<&str>,
) -> Response<Full<Bytes>> {
    let verbose = query.is_some_and(|q| {
        q.split('&')
            .any(|p| p == "verbose" || p.starts_with("verbose="))
    });
    let text = |status: StatusCode, body: String, content_type: &'static str| {
        let mut response = Response::new(Full::new(Bytes::from(body)));
        *response.status_mut() = status;
        response.headers_mut().insert(
            hyper::header::CONTENT_TYPE,
            hyper::header::HeaderValue::from_static(content_type),
        );
        response.headers_mut().insert(
            hyper::header::CACHE_CONTROL,
            hyper::header::HeaderValue::from_static("no-store"),
        );
        response
    };
    const PLAIN: &str = "text/plain; charset=utf-8";
    if method != Method::GET && method != Method::HEAD {
        return text(
            StatusCode::METHOD_NOT_ALLOWED,
            "only GET and HEAD\n".to_owned(),
            PLAIN,
        );
    }
    match path {
        "/healthz" => {
            let (status, body) = health(&endpoints.healthz, verbose, "healthz");
            text(status, body, PLAIN)
        }
        "/livez" => {
            let (status, body) = health(&[], verbose, "livez");
            text(status, body, PLAIN)
        }
        "/readyz" => {
            let (status, body) = health(&endpoints.readyz, verbose, "readyz");
            text(status, body, PLAIN)
        }
        "/metrics" => {
            let mut body = String::new();
            match prometheus_client::encoding::text::encode(&mut body, &endpoints.registry) {
                Ok(()) => text(
                    StatusCode::OK,
                    body,
                    "application/openmetrics-text; version=1.0.0; charset=utf-8",
                ),
                Err(e) => text(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    format!("encoding metrics: {e}\n"),
                    PLAIN,
                ),
            }
        }
        _ => text(
            StatusCode::NOT_FOUND,
            format!("{path} not found; try /healthz, /livez, /readyz or /metrics\n"),
            PLAIN,
        ),
    }
}

/// The certificate chain and key to serve with.
pub(crate) fn load_or_generate_identity(
    cert_file: Option<&Path>,
    key_file: Option<&Path>,
    bind_address: IpAddr,
) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)> {
    if let (Some(cert_file), Some(key_file)) = (cert_file, key_file) {
        let chain = CertificateDer::pem_file_iter(cert_file)
            .with_context(|| format!("reading --tls-cert-file {}", cert_file.display()))?
            .collect::<Result<Vec<_>, _>>()
            .with_context(|| format!("parsing --tls-cert-file {}", cert_file.display()))?;
        if chain.is_empty() {
            anyhow::bail!(
                "--tls-cert-file {} holds no PEM certificate",
                cert_file.display()
            );
        }
        let key = PrivateKeyDer::from_pem_file(key_file).with_context(|| {
            format!(
                "reading a PEM private key from --tls-private-key-file {}",
                key_file.display()
            )
        })?;
        return Ok((chain, key));
    }
    let mut names = vec![
        "localhost".to_owned(),
        "127.0.0.1".to_owned(),
        "::1".to_owned(),
    ];
    if !bind_address.is_unspecified() && !bind_address.is_loopback() {
        names.push(bind_address.to_string());
    }
    if let Ok(host) = std::fs::read_to_string("/proc/sys/kernel/hostname") {
        let host = host.trim();
        if !host.is_empty() && !names.iter().any(|n| n == host) {
            names.push(host.to_owned());
        }
    }
    let certified = rcgen::generate_simple_self_signed(names)
        .context("generating a self-signed serving certificate")?;
    let key = PrivateKeyDer::try_from(certified.signing_key.serialize_der())
        .map_err(|e| anyhow::anyhow!("encoding the generated key: {e}"))?;
    Ok((vec![certified.cert.der().clone()], key))
}

/// Binds `address` and serves `endpoints` over TLS until `cancel` fires. Returns once the
/// listener is bound (binding errors are returned); serving continues in a task.
pub(crate) async fn start(
    address: SocketAddr,
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
    endpoints: Endpoints,
    cancel: CancellationToken,
) -> Result<SocketAddr> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut tls = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("choosing TLS versions")?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .context("the serving certificate and key do not form a usable pair")?;
    tls.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let acceptor = TlsAcceptor::from(Arc::new(tls));
    let listener = TcpListener::bind(address)
        .await
        .with_context(|| format!("binding {address} (--bind-address, --secure-port)"))?;
    let local = listener.local_addr().context("reading the bound address")?;
    info!(address = %local, "serving /healthz, /livez, /readyz and /metrics over HTTPS");
    let endpoints = Arc::new(endpoints);
    tokio::spawn(async move {
        loop {
            let (stream, peer) = tokio::select! {
                () = cancel.cancelled() => break,
                accepted = listener.accept() => match accepted {
                    Ok(pair) => pair,
                    Err(e) => {
                        warn!(%e, "accepting a connection failed");
                        continue;
                    }
                },
            };
            let acceptor = acceptor.clone();
            let endpoints = endpoints.clone();
            tokio::spawn(async move {
                let tls = match acceptor.accept(stream).await {
                    Ok(tls) => tls,
                    Err(e) => {
                        debug!(%peer, %e, "TLS handshake failed");
                        return;
                    }
                };
                let service = hyper::service::service_fn(move |request: Request<Incoming>| {
                    let response = respond(
                        &endpoints,
                        request.method(),
                        request.uri().path(),
                        request.uri().query(),
                    );
                    async move { Ok::<_, Infallible>(response) }
                });
                if let Err(e) = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(tls), service)
                    .await
                {
                    debug!(%peer, %e, "connection ended with an error");
                }
            });
        }
    });
    Ok(local)
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    fn endpoints(healthy: bool) -> Endpoints {
        let mut registry = Registry::default();
        let counter: prometheus_client::metrics::counter::Counter = Default::default();
        counter.inc();
        registry.register("demo_things", "Things.", counter);
        let leader: Check = Arc::new(move || {
            if healthy {
                Ok(())
            } else {
                Err("lease renewal overdue by 21s".to_owned())
            }
        });
        Endpoints {
            healthz: vec![("leaderElection", leader)],
            readyz: vec![("caches-synced", Arc::new(|| Err("not yet".to_owned())))],
            registry: Arc::new(registry),
        }
    }

    async fn body(response: Response<Full<Bytes>>) -> (StatusCode, String) {
        let status = response.status();
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        (status, String::from_utf8(bytes.to_vec()).unwrap())
    }

    #[tokio::test]
    async fn healthz_ok_and_failed() {
        let (status, text) = body(respond(&endpoints(true), &Method::GET, "/healthz", None)).await;
        assert_eq!((status, text.as_str()), (StatusCode::OK, "ok"));
        let (status, text) = body(respond(
            &endpoints(true),
            &Method::GET,
            "/healthz",
            Some("verbose"),
        ))
        .await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(
            text,
            "[+]ping ok\n[+]leaderElection ok\nhealthz check passed\n"
        );
        let (status, text) = body(respond(&endpoints(false), &Method::GET, "/healthz", None)).await;
        assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(
            text,
            "[+]ping ok\n[-]leaderElection failed: lease renewal overdue by 21s\nhealthz check failed\n"
        );
        // /livez does not depend on the lease.
        let (status, _) = body(respond(&endpoints(false), &Method::GET, "/livez", None)).await;
        assert_eq!(status, StatusCode::OK);
        let (status, text) = body(respond(&endpoints(true), &Method::GET, "/readyz", None)).await;
        assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
        assert!(text.contains("[-]caches-synced failed: not yet"), "{text}");
    }

    #[tokio::test]
    async fn metrics_and_unknown_paths() {
        let (status, text) = body(respond(&endpoints(true), &Method::GET, "/metrics", None)).await;
        assert_eq!(status, StatusCode::OK);
        assert!(text.contains("demo_things_total 1"), "{text}");
        let (status, text) = body(respond(&endpoints(true), &Method::GET, "/nope", None)).await;
        assert_eq!(status, StatusCode::NOT_FOUND);
        assert!(text.contains("/nope"));
        let (status, _) = body(respond(&endpoints(true), &Method::POST, "/healthz", None)).await;
        assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    }

    #[test]
    fn self_signed_identity_is_generated_and_files_are_checked() {
        let (chain, _key) =
            load_or_generate_identity(None, None, "0.0.0.0".parse().unwrap()).unwrap();
        assert_eq!(chain.len(), 1);
        let dir = tempfile::tempdir().unwrap();
        let cert = dir.path().join("tls.crt");
        let key = dir.path().join("tls.key");
        std::fs::write(&cert, "not pem").unwrap();
        std::fs::write(&key, "not pem").unwrap();
        let err = load_or_generate_identity(Some(&cert), Some(&key), "127.0.0.1".parse().unwrap())
            .unwrap_err();
        assert!(format!("{err:#}").contains("tls.crt"), "{err:#}");
    }
}

//! The HTTPS endpoints: `/healthz`, `/livez`, `/readyz` and `/metrics`, and with
//! `--debug-cache-endpoint` also `/debug/cache`.
//!
//! Health endpoints run named checks and answer `200 ok`, or `500` listing each check as
//! `[+]name ok` / `[-]name failed: reason` (with `?verbose`, the list is printed on success
//! too), as kube-controller-manager's do. `/metrics` is the Prometheus registry in the
//! OpenMetrics text format. `/debug/cache` (off unless `--debug-cache-endpoint` is given,
//! since it names objects) lists the key and resourceVersion of every object in the
//! informer caches, so fault-injection tests can compare the caches with a fresh list.
//!
//! TLS: the certificate and key given with `--tls-cert-file` / `--tls-private-key-file`, or
//! else a self-signed certificate generated in memory at start (for `localhost`, the loopback
//! addresses, the bind address and the host name).
//!
//! Every request passes the [`Gate`] first, as kube-controller-manager's
//! filters: delegated authentication (client certificates of the client CA, which the
//! TLS server then asks for, and bearer tokens reviewed by the API server) and
//! authorization (SubjectAccessReviews for non-resource URLs; `/healthz`, `/readyz` and `/livez`
//! open to anyone by default), so an unauthorized caller gets 401, 403 or 500 and never the
//! endpoint's answer.
//!
//! Exhaustion limits ([`Limits`]): a connection must finish its TLS handshake within 10 s
//! and send each request's headers within 10 s (an idle keep-alive connection is closed
//! after as long); HTTP/2 connections are pinged every 30 s and closed when a ping goes
//! unanswered for 10 s. At most 128 connections are served at once: further ones are not
//! accepted until one ends, and wait in the kernel's accept queue (so a flood of idle or
//! half-open connections delays a probe by at most the timeouts above, and never starves the
//! process). At most half of them may wait on reviews ([`ReviewBudget`]): past that, a
//! request that needs a review is answered 429 at once, so a slow API server cannot hold every
//! connection and the kubelet's probes (no credentials, no review) are still answered. A
//! failed `accept` (e.g. out of file descriptors) pauses the loop for 100 ms instead of
//! spinning.
//!
//! With a client CA, each new connection's TLS configuration asks for a certificate naming
//! the CAs of that moment (they are reloaded, see [`ClientCa`](crate::auth::ClientCa)).

use std::convert::Infallible;
use std::fmt::Write as _;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use prometheus_client::registry::Registry;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::auth::{Gate, ReviewBudget};

/// A named health check: `Ok` when healthy, `Err(reason)` otherwise.
pub(crate) type Check = Arc<dyn Fn() -> Result<(), String> + Send + Sync>;

/// The body of `/debug/cache`: one line `<resource> <namespace>/<name> <resourceVersion>` per
/// cached object, sorted.
pub(crate) type CacheDump = Arc<dyn Fn() -> String + Send + Sync>;

/// What the endpoints report.
#[derive(Clone)]
pub(crate) struct Endpoints {
    /// Checks of `/healthz` (besides `ping`).
    pub(crate) healthz: Vec<(&'static str, Check)>,
    /// Checks of `/readyz` (besides `ping`).
    pub(crate) readyz: Vec<(&'static str, Check)>,
    /// The metrics `/metrics` encodes.
    pub(crate) registry: Arc<Registry>,
    /// The listing `/debug/cache` serves; `None` leaves the path unserved (404).
    pub(crate) cache_dump: Option<CacheDump>,
    /// Authenticates and authorizes each request before it is answered.
    pub(crate) gate: Arc<Gate>,
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
        "/debug/cache" if endpoints.cache_dump.is_some() => {
            let dump = endpoints
                .cache_dump
                .as_ref()
                .map(|f| f())
                .unwrap_or_default();
            text(StatusCode::OK, dump, PLAIN)
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

/// The limits that keep many slow, idle or half-open connections from exhausting the
/// endpoints.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Limits {
    /// Connections served at once; more wait to be accepted.
    pub(crate) max_connections: usize,
    /// From accept to the end of the TLS handshake.
    pub(crate) tls_handshake_timeout: Duration,
    /// For the headers of each HTTP/1 request, idle keep-alive time included.
    pub(crate) header_read_timeout: Duration,
    /// The interval of HTTP/2 keep-alive pings, and how long one may go unanswered.
    pub(crate) http2_keep_alive: (Duration, Duration),
    /// The pause after a failed `accept`.
    pub(crate) accept_error_pause: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_connections: 128,
            tls_handshake_timeout: Duration::from_secs(10),
            header_read_timeout: Duration::from_secs(10),
            http2_keep_alive: (Duration::from_secs(30), Duration::from_secs(10)),
            accept_error_pause: Duration::from_millis(100),
        }
    }
}

/// The TLS server configuration of each new connection: with a client CA, it asks for a
/// client certificate naming the CAs of that moment, and is rebuilt when they change.
struct TlsConfigs {
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
    gate: Arc<Gate>,
    /// The configuration last built, and the client CA generation it was built for.
    current: std::sync::Mutex<(u64, Arc<rustls::ServerConfig>)>,
}

impl TlsConfigs {
    fn new(
        chain: Vec<CertificateDer<'static>>,
        key: PrivateKeyDer<'static>,
        gate: Arc<Gate>,
    ) -> Result<Self> {
        let (generation, verifier) = gate.client_ca().map_or((0, None), |ca| ca.tls_verifier());
        let config = Self::build(&chain, &key, verifier)?;
        Ok(Self {
            chain,
            key,
            gate,
            current: std::sync::Mutex::new((generation, config)),
        })
    }

    fn build(
        chain: &[CertificateDer<'static>],
        key: &PrivateKeyDer<'static>,
        client_verifier: Option<Arc<dyn rustls::server::danger::ClientCertVerifier>>,
    ) -> Result<Arc<rustls::ServerConfig>> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let tls = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .context("choosing TLS versions")?;
        // With a client CA a client certificate is asked for (not required).
        let tls = match client_verifier {
            Some(verifier) => tls.with_client_cert_verifier(verifier),
            None => tls.with_no_client_auth(),
        };
        let mut tls = tls
            .with_single_cert(chain.to_vec(), key.clone_key())
            .context("the serving certificate and key do not form a usable pair")?;
        tls.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(Arc::new(tls))
    }

    /// The acceptor of a new connection.
    fn acceptor(&self) -> Result<TlsAcceptor> {
        let mut current = self.current.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(ca) = self.gate.client_ca() {
            let (generation, verifier) = ca.tls_verifier();
            if generation != current.0 {
                *current = (generation, Self::build(&self.chain, &self.key, verifier)?);
            }
        }
        Ok(TlsAcceptor::from(current.1.clone()))
    }
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
    start_with_limits(address, chain, key, endpoints, cancel, Limits::default()).await
}

/// [`start`] with explicit [`Limits`].
pub(crate) async fn start_with_limits(
    address: SocketAddr,
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
    endpoints: Endpoints,
    cancel: CancellationToken,
    limits: Limits,
) -> Result<SocketAddr> {
    let tls = Arc::new(TlsConfigs::new(chain, key, endpoints.gate.clone())?);
    let listener = TcpListener::bind(address)
        .await
        .with_context(|| format!("binding {address} (--bind-address, --secure-port)"))?;
    let local = listener.local_addr().context("reading the bound address")?;
    info!(address = %local, "serving /healthz, /livez, /readyz and /metrics over HTTPS");
    let endpoints = Arc::new(endpoints);
    // The protocol is the one ALPN chose (no sniffing of the first bytes, which would wait
    // without a timeout): HTTP/1.1 with its header timeout, or HTTP/2 with keep-alive pings.
    let mut http1 = hyper::server::conn::http1::Builder::new();
    http1
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout);
    let mut http2 = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
    http2
        .timer(TokioTimer::new())
        .keep_alive_interval(limits.http2_keep_alive.0)
        .keep_alive_timeout(limits.http2_keep_alive.1);
    let http = Arc::new((http1, http2));
    let permits = Arc::new(tokio::sync::Semaphore::new(limits.max_connections.max(1)));
    // Half the connections at most may wait on reviews; the others stay free for requests
    // that need none (the kubelet's probes).
    let review_budget = ReviewBudget::new(limits.max_connections / 2);
    tokio::spawn(async move {
        loop {
            // A free slot first: at the cap, new connections wait in the accept queue.
            let permit = tokio::select! {
                () = cancel.cancelled() => break,
                permit = permits.clone().acquire_owned() => match permit {
                    Ok(permit) => permit,
                    Err(_) => break,
                },
            };
            let (stream, peer) = tokio::select! {
                () = cancel.cancelled() => break,
                accepted = listener.accept() => match accepted {
                    Ok(pair) => pair,
                    Err(e) => {
                        warn!(%e, "accepting a connection failed");
                        drop(permit);
                        tokio::select! {
                            () = cancel.cancelled() => break,
                            () = tokio::time::sleep(limits.accept_error_pause) => continue,
                        }
                    }
                },
            };
            let acceptor = match tls.acceptor() {
                Ok(acceptor) => acceptor,
                Err(e) => {
                    warn!(%peer, error = %format!("{e:#}"), "no TLS configuration for the connection");
                    continue;
                }
            };
            let endpoints = endpoints.clone();
            let http = http.clone();
            let review_budget = review_budget.clone();
            tokio::spawn(async move {
                let _permit = permit;
                let tls = match tokio::time::timeout(
                    limits.tls_handshake_timeout,
                    acceptor.accept(stream),
                )
                .await
                {
                    Ok(Ok(tls)) => tls,
                    Ok(Err(e)) => {
                        debug!(%peer, %e, "TLS handshake failed");
                        return;
                    }
                    Err(_) => {
                        debug!(%peer, timeout = ?limits.tls_handshake_timeout, "TLS handshake timed out");
                        return;
                    }
                };
                // The client certificate chain, if the client presented one.
                let chain: Arc<[CertificateDer<'static>]> = tls
                    .get_ref()
                    .1
                    .peer_certificates()
                    .map(|c| c.iter().map(|c| c.clone().into_owned()).collect())
                    .unwrap_or_else(|| Arc::from(Vec::new()));
                let service = hyper::service::service_fn(move |request: Request<Incoming>| {
                    let endpoints = endpoints.clone();
                    let chain = chain.clone();
                    let review_budget = review_budget.clone();
                    async move {
                        let (method, uri) = (request.method(), request.uri());
                        let admitted = endpoints
                            .gate
                            .admit(method, uri, request.headers(), &chain, &review_budget)
                            .await;
                        let response = match admitted {
                            Ok(_) => respond(&endpoints, method, uri.path(), uri.query()),
                            Err(refused) => refused,
                        };
                        Ok::<_, Infallible>(response)
                    }
                });
                let h2 = tls.get_ref().1.alpn_protocol() == Some(b"h2".as_slice());
                let io = TokioIo::new(tls);
                let served = if h2 {
                    http.1.serve_connection(io, service).await
                } else {
                    http.0.serve_connection(io, service).await
                };
                if let Err(e) = served {
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
            cache_dump: None,
            gate: Arc::new(gate_without_reviews(&["/healthz", "/readyz", "/livez"])),
        }
    }

    /// A gate with no API server to ask (as outside a cluster without the kubeconfig flags).
    fn gate_without_reviews(always_allow: &[&str]) -> Gate {
        let paths: Vec<String> = always_allow.iter().map(|p| (*p).to_owned()).collect();
        Gate::new(
            crate::auth::GateOptions {
                review_tokens: false,
                review_access: false,
                token_cache_ttl: Duration::ZERO,
                authorized_ttl: Duration::ZERO,
                unauthorized_ttl: Duration::ZERO,
                always_allow: crate::auth::AlwaysAllowPaths::parse(&paths).unwrap(),
                client_certificates: None,
            },
            Arc::new(crate::auth::ApiReviews::new(None, None, Default::default())),
        )
    }

    // Over HTTPS, the gate answers before the endpoint: /metrics is forbidden to anonymous
    // callers unless an always-allowed path.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_gate_guards_every_path_over_https() {
        let (chain, key) =
            load_or_generate_identity(None, None, "127.0.0.1".parse().unwrap()).unwrap();
        let cancel = CancellationToken::new();
        let addr = start(
            "127.0.0.1:0".parse().unwrap(),
            chain.clone(),
            key.clone_key(),
            endpoints(true),
            cancel.clone(),
        )
        .await
        .unwrap();
        let answer = https_get(addr, &chain, "/metrics").await.unwrap();
        assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
        assert!(
            answer.contains(r#"User \"system:anonymous\" cannot get path \"/metrics\""#),
            "{answer}"
        );
        let answer = https_get(addr, &chain, "/healthz").await.unwrap();
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        let mut open = endpoints(true);
        open.gate = Arc::new(gate_without_reviews(&["/healthz", "/metrics"]));
        let addr = start(
            "127.0.0.1:0".parse().unwrap(),
            chain.clone(),
            key,
            open,
            cancel.clone(),
        )
        .await
        .unwrap();
        let answer = https_get(addr, &chain, "/metrics").await.unwrap();
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert!(answer.contains("demo_things_total 1"), "{answer}");
        let answer = https_get(addr, &chain, "/livez").await.unwrap();
        assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
        cancel.cancel();
    }

    async fn body(response: Response<Full<Bytes>>) -> (StatusCode, String) {
        let status = response.status();
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        (status, String::from_utf8(bytes.to_vec()).unwrap())
    }

    #[tokio::test]
    async fn debug_cache_is_served_only_when_enabled() {
        let (status, _) = body(respond(
            &endpoints(true),
            &Method::GET,
            "/debug/cache",
            None,
        ))
        .await;
        assert_eq!(status, StatusCode::NOT_FOUND);
        let mut with = endpoints(true);
        with.cache_dump = Some(Arc::new(|| "deployments a/b 7\n".to_owned()));
        let (status, text) = body(respond(&with, &Method::GET, "/debug/cache", None)).await;
        assert_eq!(
            (status, text.as_str()),
            (StatusCode::OK, "deployments a/b 7\n")
        );
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

    type ClientTls = tokio_rustls::client::TlsStream<tokio::net::TcpStream>;

    /// A TLS connection trusting `chain` (the generated certificate names `localhost`).
    async fn tls_connect(
        addr: SocketAddr,
        chain: &[CertificateDer<'static>],
    ) -> std::io::Result<ClientTls> {
        tls_connect_as(addr, chain, None).await
    }

    /// A client certificate chain and its key.
    type ClientIdentity = (Vec<CertificateDer<'static>>, PrivateKeyDer<'static>);

    /// [`tls_connect`], presenting `identity` when asked for a client certificate.
    async fn tls_connect_as(
        addr: SocketAddr,
        chain: &[CertificateDer<'static>],
        identity: Option<ClientIdentity>,
    ) -> std::io::Result<ClientTls> {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(chain[0].clone()).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots);
        let config = match identity {
            Some((certs, key)) => config.with_client_auth_cert(certs, key).unwrap(),
            None => config.with_no_client_auth(),
        };
        let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
        let tcp = tokio::net::TcpStream::connect(addr).await?;
        let name = rustls_pki_types::ServerName::try_from("localhost").unwrap();
        connector.connect(name, tcp).await
    }

    /// `GET path` over HTTP/1.1; the raw response.
    async fn https_get(
        addr: SocketAddr,
        chain: &[CertificateDer<'static>],
        path: &str,
    ) -> std::io::Result<String> {
        https_get_as(addr, chain, path, None).await
    }

    /// [`https_get`] presenting a client certificate.
    async fn https_get_as(
        addr: SocketAddr,
        chain: &[CertificateDer<'static>],
        path: &str,
        identity: Option<ClientIdentity>,
    ) -> std::io::Result<String> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut tls = tls_connect_as(addr, chain, identity).await?;
        tls.write_all(
            format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
                .as_bytes(),
        )
        .await?;
        let mut out = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            match tls.read(&mut buf).await {
                Ok(0) => break,
                Ok(n) => out.extend_from_slice(&buf[..n]),
                // A close without close_notify still ends the response.
                Err(e) if !out.is_empty() && e.kind() == std::io::ErrorKind::UnexpectedEof => {
                    break;
                }
                Err(e) => return Err(e),
            }
        }
        Ok(String::from_utf8_lossy(&out).into_owned())
    }

    /// Whether the server closes `conn` (EOF or an error) within `limit`.
    async fn closed_by_server(
        conn: &mut (impl tokio::io::AsyncRead + Unpin),
        limit: Duration,
    ) -> bool {
        use tokio::io::AsyncReadExt;
        let mut buf = [0u8; 64];
        loop {
            match tokio::time::timeout(limit, conn.read(&mut buf)).await {
                Err(_) => return false,
                Ok(Ok(0) | Err(_)) => return true,
                Ok(Ok(_)) => continue,
            }
        }
    }

    // Many more half-open connections (TCP connected, no ClientHello) than the cap, and an
    // idle one past its handshake: the server closes them on their timeouts, and /healthz
    // still answers meanwhile.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn idle_and_half_open_connections_do_not_exhaust_the_endpoints() {
        let (chain, key) =
            load_or_generate_identity(None, None, "127.0.0.1".parse().unwrap()).unwrap();
        let limits = Limits {
            max_connections: 8,
            tls_handshake_timeout: Duration::from_millis(300),
            header_read_timeout: Duration::from_millis(300),
            ..Limits::default()
        };
        let cancel = CancellationToken::new();
        let addr = start_with_limits(
            "127.0.0.1:0".parse().unwrap(),
            chain.clone(),
            key,
            endpoints(true),
            cancel.clone(),
            limits,
        )
        .await
        .unwrap();
        let mut half_open = Vec::new();
        for _ in 0..3 * limits.max_connections {
            half_open.push(tokio::net::TcpStream::connect(addr).await.unwrap());
        }
        let answer =
            tokio::time::timeout(Duration::from_secs(20), https_get(addr, &chain, "/healthz"))
                .await
                .expect("/healthz answered despite the half-open connections")
                .unwrap();
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert!(answer.ends_with("\r\n\r\nok"), "{answer}");
        for conn in &mut half_open {
            assert!(
                closed_by_server(conn, Duration::from_secs(20)).await,
                "a half-open connection was never closed"
            );
        }
        // Past the handshake, never sending a request: closed after the header timeout.
        let mut idle = tls_connect(addr, &chain).await.unwrap();
        assert!(
            closed_by_server(&mut idle, Duration::from_secs(20)).await,
            "an idle connection was never closed"
        );
        let answer = https_get(addr, &chain, "/livez").await.unwrap();
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        cancel.cancel();
    }

    /// An API server that takes every TokenReview and never answers it; each review started is
    /// announced on `started`.
    struct HangingReviews {
        started: tokio::sync::mpsc::UnboundedSender<()>,
    }

    impl crate::auth::Reviews for HangingReviews {
        fn token_review(
            &self,
            _token: String,
        ) -> futures::future::BoxFuture<
            '_,
            Result<
                Option<k8s_openapi::api::authentication::v1::TokenReviewStatus>,
                kctrl_client::Error,
            >,
        > {
            let _ = self.started.send(());
            Box::pin(std::future::pending())
        }

        fn access_review(
            &self,
            _spec: k8s_openapi::api::authorization::v1::SubjectAccessReviewSpec,
        ) -> futures::future::BoxFuture<
            '_,
            Result<
                Option<k8s_openapi::api::authorization::v1::SubjectAccessReviewStatus>,
                kctrl_client::Error,
            >,
        > {
            let _ = self.started.send(());
            Box::pin(std::future::pending())
        }
    }

    // The API server never answers a review, and every connection the server takes sends a
    // token: the kubelet's probes (no credentials, always-allowed paths) still answer at once
    // rather than after the reviews time out.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn probes_answer_while_reviews_hang() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (chain, key) =
            load_or_generate_identity(None, None, "127.0.0.1".parse().unwrap()).unwrap();
        let (started, mut reviews_started) = tokio::sync::mpsc::unbounded_channel();
        let mut hung = endpoints(true);
        hung.readyz.clear();
        hung.gate = Arc::new(Gate::new(
            crate::auth::GateOptions {
                review_tokens: true,
                review_access: true,
                token_cache_ttl: Duration::from_secs(10),
                authorized_ttl: Duration::from_secs(10),
                unauthorized_ttl: Duration::from_secs(10),
                always_allow: crate::auth::AlwaysAllowPaths::parse(&[
                    "/healthz".to_owned(),
                    "/readyz".to_owned(),
                    "/livez".to_owned(),
                ])
                .unwrap(),
                client_certificates: None,
            },
            Arc::new(HangingReviews { started }),
        ));
        let limits = Limits {
            max_connections: 4,
            ..Limits::default()
        };
        let cancel = CancellationToken::new();
        let addr = start_with_limits(
            "127.0.0.1:0".parse().unwrap(),
            chain.clone(),
            key,
            hung,
            cancel.clone(),
            limits,
        )
        .await
        .unwrap();
        // As many token-bearing requests as connections: each either waits on its review
        // or is turned away at once; the ones waiting stay open.
        let mut waiting = Vec::new();
        for n in 0..limits.max_connections {
            let mut conn = tls_connect(addr, &chain).await.unwrap();
            conn.write_all(
                format!(
                    "GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\
                     Authorization: Bearer token-{n}\r\n\r\n"
                )
                .as_bytes(),
            )
            .await
            .unwrap();
            let mut buf = [0u8; 1024];
            tokio::select! {
                _ = reviews_started.recv() => waiting.push(conn),
                read = conn.read(&mut buf) => {
                    let answer = String::from_utf8_lossy(&buf[..read.unwrap()]).into_owned();
                    assert!(answer.starts_with("HTTP/1.1 429"), "{answer}");
                    assert!(answer.contains("retry-after: 1"), "{answer}");
                }
            }
        }
        assert!(!waiting.is_empty());
        for path in ["/healthz", "/readyz", "/livez"] {
            let answer =
                tokio::time::timeout(Duration::from_secs(5), https_get(addr, &chain, path))
                    .await
                    .unwrap_or_else(|_| panic!("{path} did not answer while the reviews hang"))
                    .unwrap();
            assert!(answer.starts_with("HTTP/1.1 200"), "{path}: {answer}");
        }
        cancel.cancel();
    }

    /// A CA: its certificate and what signs with it.
    fn test_ca(
        name: &str,
    ) -> (
        CertificateDer<'static>,
        rcgen::Issuer<'static, rcgen::KeyPair>,
    ) {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        (cert.der().clone(), rcgen::Issuer::new(params, key))
    }

    /// A client certificate of `ca` for `cn` in organization `org`.
    fn client_certificate(
        ca: &rcgen::Issuer<'static, rcgen::KeyPair>,
        cn: &str,
        org: Option<&str>,
    ) -> ClientIdentity {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name = rcgen::DistinguishedName::new();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, cn);
        if let Some(org) = org {
            params
                .distinguished_name
                .push(rcgen::DnType::OrganizationName, org);
        }
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, ca).unwrap();
        (
            vec![cert.der().clone()],
            PrivateKeyDer::try_from(key.serialize_der()).unwrap(),
        )
    }

    // With --client-ca-file, a certificate of that CA authenticates its CN and O (here
    // system:masters, allowed without a review); another CA's answers 401 even on /healthz;
    // without a certificate the caller is anonymous.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn client_certificates_of_the_client_ca_authenticate() {
        let (ca_cert, ca) = test_ca("client CA");
        let (_, other_ca) = test_ca("another CA");
        let (chain, key) =
            load_or_generate_identity(None, None, "127.0.0.1".parse().unwrap()).unwrap();
        let mut open = endpoints(true);
        let mut gate_options = crate::auth::GateOptions {
            review_tokens: false,
            review_access: false,
            token_cache_ttl: Duration::ZERO,
            authorized_ttl: Duration::ZERO,
            unauthorized_ttl: Duration::ZERO,
            always_allow: crate::auth::AlwaysAllowPaths::parse(&["/healthz".to_owned()]).unwrap(),
            client_certificates: None,
        };
        gate_options.client_certificates = Some(crate::auth::ClientCa::fixed(
            crate::auth::ClientCertificates::from_certificates(vec![ca_cert]).unwrap(),
        ));
        open.gate = Arc::new(Gate::new(
            gate_options,
            Arc::new(crate::auth::ApiReviews::new(None, None, Default::default())),
        ));
        let cancel = CancellationToken::new();
        let addr = start(
            "127.0.0.1:0".parse().unwrap(),
            chain.clone(),
            key,
            open,
            cancel.clone(),
        )
        .await
        .unwrap();
        let get = |path: &'static str, identity: Option<ClientIdentity>| {
            let chain = chain.clone();
            async move { https_get_as(addr, &chain, path, identity).await.unwrap() }
        };
        let admin = get(
            "/metrics",
            Some(client_certificate(&ca, "alice", Some("system:masters"))),
        )
        .await;
        assert!(admin.starts_with("HTTP/1.1 200"), "{admin}");
        assert!(admin.contains("demo_things_total 1"), "{admin}");
        let bob = get("/metrics", Some(client_certificate(&ca, "bob", None))).await;
        assert!(bob.starts_with("HTTP/1.1 403"), "{bob}");
        assert!(bob.contains(r#"User \"bob\" cannot get path"#), "{bob}");
        let stranger = client_certificate(&other_ca, "mallory", Some("system:masters"));
        let refused = get("/metrics", Some(stranger)).await;
        assert!(refused.starts_with("HTTP/1.1 401"), "{refused}");
        let stranger = client_certificate(&other_ca, "mallory", Some("system:masters"));
        let refused = get("/healthz", Some(stranger)).await;
        assert!(refused.starts_with("HTTP/1.1 401"), "{refused}");
        let anonymous = get("/metrics", None).await;
        assert!(anonymous.starts_with("HTTP/1.1 403"), "{anonymous}");
        assert!(anonymous.contains("system:anonymous"), "{anonymous}");
        let health = get("/healthz", None).await;
        assert!(health.starts_with("HTTP/1.1 200"), "{health}");
        cancel.cancel();
    }

    // The client CA could not be read at start (no ConfigMap yet): connections are not asked
    // for a certificate. Once the CA is read, new connections are asked for one and it
    // authenticates.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_client_ca_read_after_start_is_used_by_new_connections() {
        use k8s_openapi::api::core::v1::ConfigMap;
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let ca_pem = params.self_signed(&ca_key).unwrap().pem();
        let ca = rcgen::Issuer::new(params, ca_key);
        let fake = kctrl_fake::FakeApi::new();
        let client_ca = crate::auth::ClientCa::from_configmap(fake.client()).await;
        let (chain, key) =
            load_or_generate_identity(None, None, "127.0.0.1".parse().unwrap()).unwrap();
        let mut open = endpoints(true);
        open.gate = Arc::new(Gate::new(
            crate::auth::GateOptions {
                review_tokens: false,
                review_access: false,
                token_cache_ttl: Duration::ZERO,
                authorized_ttl: Duration::ZERO,
                unauthorized_ttl: Duration::ZERO,
                always_allow: crate::auth::AlwaysAllowPaths::parse(&["/healthz".to_owned()])
                    .unwrap(),
                client_certificates: Some(client_ca.clone()),
            },
            Arc::new(crate::auth::ApiReviews::new(None, None, Default::default())),
        ));
        let cancel = CancellationToken::new();
        let addr = start(
            "127.0.0.1:0".parse().unwrap(),
            chain.clone(),
            key,
            open,
            cancel.clone(),
        )
        .await
        .unwrap();
        let admin = || Some(client_certificate(&ca, "alice", Some("system:masters")));
        let before = https_get_as(addr, &chain, "/metrics", admin())
            .await
            .unwrap();
        assert!(before.starts_with("HTTP/1.1 403"), "{before}");
        assert!(before.contains("system:anonymous"), "{before}");
        let (namespace, name, key) = crate::auth::AUTHENTICATION_CONFIGMAP;
        fake.add(&ConfigMap {
            metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                name: Some(name.to_owned()),
                namespace: Some(namespace.to_owned()),
                ..Default::default()
            },
            data: Some([(key.to_owned(), ca_pem)].into()),
            ..Default::default()
        })
        .unwrap();
        assert!(client_ca.reload().await.unwrap());
        let after = https_get_as(addr, &chain, "/metrics", admin())
            .await
            .unwrap();
        assert!(after.starts_with("HTTP/1.1 200"), "{after}");
        cancel.cancel();
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

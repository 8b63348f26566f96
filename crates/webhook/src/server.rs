//! The HTTPS server the API server calls: admission webhooks at their paths, conversions at
//! `/convert`, `/healthz`, `/readyz` and `/metrics` beside them (controller-runtime's
//! `webhook.Server`).
//!
//! * TLS: `tls.crt` and `tls.key` in a certificate directory (controller-runtime's defaults:
//!   `<temp dir>/k8s-webhook-server/serving-certs`, port 9443), reloaded when they change
//!   ([`CertWatcher`]); or an identity in memory.
//! * Limits: a TLS handshake within 10 s; the first request's headers within 10 s of it, for
//!   the whole connection (whatever the client sends or not: nothing, an HTTP/2 preface alone,
//!   part of an HTTP/1 request), then each HTTP/1 request's headers within 10 s; a body of at
//!   most 7 MiB (controller-runtime's); an answer within 30 s (the API server waits at most
//!   30 s). A connection with no request in progress for 120 s is closed, HTTP/2 connections
//!   are pinged every 30 s and closed when a ping goes unanswered for 10 s, and at most 128
//!   connections are served at once (more wait in the kernel's accept queue until one ends).
//!   Every duration may be as long as `Duration::MAX` (beyond about 30 years: never); the
//!   connection cap may be at most [`MAX_CONNECTIONS`].
//! * A request that is not a review (not JSON, another kind or version, no `request`) is
//!   answered `400 Bad Request` with a message saying what is wrong; `413` for a body too
//!   large; `404` for an unknown path.
//! * Shutdown: when the [`CancellationToken`] fires the listener closes, connections finish
//!   the requests they have (HTTP/2 `GOAWAY`, HTTP/1 `Connection: close`) for up to
//!   [`shutdown_timeout`](ServerBuilder::shutdown_timeout), and [`RunningServer::stopped`]
//!   returns.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use http::Request;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::Error;
use crate::certwatcher::CertWatcher;
use crate::configuration::{self, ClientConfig};
use crate::conversion::{Conversion, Converters};
use crate::metrics::WebhookMetrics;
use crate::webhook::{Webhook, WebhookType};

/// controller-runtime's default port.
pub const DEFAULT_PORT: u16 = 9443;
/// The certificate's file name in the certificate directory.
pub const DEFAULT_CERT_NAME: &str = "tls.crt";
/// The key's file name in the certificate directory.
pub const DEFAULT_KEY_NAME: &str = "tls.key";
/// The path of conversions.
pub const CONVERSION_PATH: &str = "/convert";
/// The largest request body accepted (controller-runtime's: 7 MiB).
pub const MAX_BODY_BYTES: usize = 7 * 1024 * 1024;
/// The most connections [`ServerBuilder::max_connections`] accepts (tokio's semaphore limit).
pub const MAX_CONNECTIONS: usize = tokio::sync::Semaphore::MAX_PERMITS;

/// A span that stands for "never": about 30 years (tokio's own far future). Longer durations
/// (up to `Duration::MAX`) are cut to it where a clock's instant is computed from them, since
/// adding them to an instant overflows.
const NEVER: Duration = Duration::from_secs(30 * 365 * 24 * 60 * 60);

/// `duration`, at most [`NEVER`]: what is handed to hyper and tokio's interval, which add
/// it to an instant unchecked.
fn capped(duration: Duration) -> Duration {
    duration.min(NEVER)
}

/// `start + duration`, or an instant [`NEVER`] away when that overflows (no deadline, in
/// effect).
fn deadline_after(start: tokio::time::Instant, duration: Duration) -> tokio::time::Instant {
    start.checked_add(duration).unwrap_or_else(|| start + NEVER)
}

/// controller-runtime's default certificate directory: `<temp dir>/k8s-webhook-server/serving-certs`.
pub fn default_cert_dir() -> PathBuf {
    std::env::temp_dir()
        .join("k8s-webhook-server")
        .join("serving-certs")
}

/// Where the serving identity comes from.
#[derive(Clone, Debug)]
enum Tls {
    Dir {
        dir: PathBuf,
        cert_name: String,
        key_name: String,
    },
    Pem {
        cert: Vec<u8>,
        key: Vec<u8>,
    },
}

/// Builds a [`WebhookServer`]; from [`WebhookServer::builder`].
#[derive(Debug)]
pub struct ServerBuilder {
    webhooks: Vec<Webhook>,
    conversions: Converters,
    host: IpAddr,
    port: u16,
    tls: Tls,
    cert_poll_interval: Duration,
    max_body_bytes: usize,
    request_timeout: Duration,
    handshake_timeout: Duration,
    header_read_timeout: Duration,
    idle_timeout: Duration,
    http2_keep_alive: (Duration, Duration),
    max_connections: usize,
    shutdown_timeout: Duration,
    metrics: Option<WebhookMetrics>,
    metrics_registry: Option<Arc<Registry>>,
}

impl Default for ServerBuilder {
    fn default() -> Self {
        ServerBuilder {
            webhooks: Vec::new(),
            conversions: Converters::default(),
            host: IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            port: DEFAULT_PORT,
            tls: Tls::Dir {
                dir: default_cert_dir(),
                cert_name: DEFAULT_CERT_NAME.to_owned(),
                key_name: DEFAULT_KEY_NAME.to_owned(),
            },
            cert_poll_interval: Duration::from_secs(10),
            max_body_bytes: MAX_BODY_BYTES,
            request_timeout: Duration::from_secs(30),
            handshake_timeout: Duration::from_secs(10),
            header_read_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(120),
            http2_keep_alive: (Duration::from_secs(30), Duration::from_secs(10)),
            max_connections: 128,
            shutdown_timeout: Duration::from_secs(30),
            metrics: None,
            metrics_registry: None,
        }
    }
}

impl ServerBuilder {
    /// Serves `webhook` (at its path).
    pub fn webhook(mut self, webhook: Webhook) -> Self {
        self.webhooks.push(webhook);
        self
    }

    /// Serves the conversions of `conversion`'s kind at `/convert`.
    pub fn conversion<H>(mut self, conversion: Conversion<H>) -> Self
    where
        H: k8s_openapi::Resource + serde::Serialize + serde::de::DeserializeOwned + 'static,
    {
        self.conversions.add(conversion.erase());
        self
    }

    /// The address to listen on (all interfaces by default).
    pub fn host(mut self, host: IpAddr) -> Self {
        self.host = host;
        self
    }

    /// The port, 9443 by default; 0 picks a free one ([`RunningServer::local_addr`] says which).
    pub fn port(mut self, port: u16) -> Self {
        self.port = port;
        self
    }

    /// Read `tls.crt` and `tls.key` from `dir` (and reload them when they change).
    pub fn cert_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        let dir = dir.into();
        self.tls = match self.tls {
            Tls::Dir {
                cert_name,
                key_name,
                ..
            } => Tls::Dir {
                dir,
                cert_name,
                key_name,
            },
            Tls::Pem { .. } => Tls::Dir {
                dir,
                cert_name: DEFAULT_CERT_NAME.to_owned(),
                key_name: DEFAULT_KEY_NAME.to_owned(),
            },
        };
        self
    }

    /// Other file names in the certificate directory than `tls.crt` and `tls.key`.
    pub fn cert_names(mut self, cert_name: impl Into<String>, key_name: impl Into<String>) -> Self {
        let dir = match self.tls {
            Tls::Dir { dir, .. } => dir,
            Tls::Pem { .. } => default_cert_dir(),
        };
        self.tls = Tls::Dir {
            dir,
            cert_name: cert_name.into(),
            key_name: key_name.into(),
        };
        self
    }

    /// Serve with this certificate chain and key (PEM) instead of files; never reloaded.
    pub fn tls_pem(mut self, cert_pem: impl Into<Vec<u8>>, key_pem: impl Into<Vec<u8>>) -> Self {
        self.tls = Tls::Pem {
            cert: cert_pem.into(),
            key: key_pem.into(),
        };
        self
    }

    /// How often the certificate files are checked for changes (10 s by default); zero is
    /// refused by [`build`](Self::build).
    pub fn cert_poll_interval(mut self, interval: Duration) -> Self {
        self.cert_poll_interval = interval;
        self
    }

    /// The largest request body accepted (7 MiB by default); larger ones get `413`.
    pub fn max_body_bytes(mut self, bytes: usize) -> Self {
        self.max_body_bytes = bytes;
        self
    }

    /// How long reading a request's body and answering it may take (30 s by default).
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// How long a connection's TLS handshake, and reading a request's headers, may take
    /// (10 s each by default). The first request's headers must arrive within `headers` of
    /// the handshake whatever the protocol, or the connection is closed.
    pub fn connection_timeouts(mut self, handshake: Duration, headers: Duration) -> Self {
        self.handshake_timeout = handshake;
        self.header_read_timeout = headers;
        self
    }

    /// How long a connection may stay open with no request in progress (120 s by default,
    /// longer than the 90 s after which Go clients, the API server among them, drop idle
    /// connections themselves); it is then shut down gracefully. Like every duration of the
    /// builder, it may be as long as `Duration::MAX`: anything beyond about 30 years means
    /// never.
    pub fn idle_timeout(mut self, timeout: Duration) -> Self {
        self.idle_timeout = timeout;
        self
    }

    /// How often an HTTP/2 connection is pinged, and how long a ping may go unanswered
    /// before the connection is closed (30 s and 10 s by default).
    pub fn http2_keep_alive(mut self, interval: Duration, timeout: Duration) -> Self {
        self.http2_keep_alive = (interval, timeout);
        self
    }

    /// How many connections are served at once (128 by default); further ones wait in the
    /// kernel's accept queue until one ends. Zero, or more than [`MAX_CONNECTIONS`], is
    /// refused by [`build`](Self::build).
    pub fn max_connections(mut self, connections: usize) -> Self {
        self.max_connections = connections;
        self
    }

    /// How long open connections may take to finish after the cancellation (30 s by default).
    pub fn shutdown_timeout(mut self, timeout: Duration) -> Self {
        self.shutdown_timeout = timeout;
        self
    }

    /// Record the request metrics in `metrics` (registered in a registry of yours) instead
    /// of the server's own registry; `/metrics` then serves nothing unless
    /// [`serve_metrics`](Self::serve_metrics) gives it a registry.
    pub fn metrics(mut self, metrics: WebhookMetrics) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// Serve `registry` at `/metrics`.
    pub fn serve_metrics(mut self, registry: Arc<Registry>) -> Self {
        self.metrics_registry = Some(registry);
        self
    }

    /// Checks the registrations and loads the serving certificate.
    pub fn build(self) -> Result<WebhookServer, Error> {
        let mut problems = Vec::new();
        if self.cert_poll_interval.is_zero() {
            problems.push(
                "the certificate poll interval is zero; give .cert_poll_interval(...) a positive \
                 duration (10 s by default)"
                    .to_owned(),
            );
        }
        for (what, value) in [
            ("TLS handshake timeout", self.handshake_timeout),
            ("header read timeout", self.header_read_timeout),
            ("idle timeout", self.idle_timeout),
            ("HTTP/2 keep-alive interval", self.http2_keep_alive.0),
            ("HTTP/2 keep-alive timeout", self.http2_keep_alive.1),
            ("request timeout", self.request_timeout),
        ] {
            if value.is_zero() {
                problems.push(format!(
                    "the {what} is zero; give it a positive duration (see the ServerBuilder method setting it)"
                ));
            }
        }
        if self.max_connections == 0 {
            problems.push(
                "max_connections is zero, which would serve no connection; give \
                 .max_connections(...) at least 1 (128 by default)"
                    .to_owned(),
            );
        }
        if self.max_connections > MAX_CONNECTIONS {
            problems.push(format!(
                "max_connections is {}, more than the {MAX_CONNECTIONS} connections a server \
                 can count; give .max_connections(...) at most {MAX_CONNECTIONS} (128 by default)",
                self.max_connections
            ));
        }
        let mut paths: BTreeMap<&str, &Webhook> = BTreeMap::new();
        // The API server refuses a configuration whose webhooks share a name; the names are
        // per configuration, so per type.
        let mut names: std::collections::HashMap<(WebhookType, &str), &Webhook> =
            std::collections::HashMap::new();
        for w in &self.webhooks {
            if let Some(other) = names.insert((w.type_, &w.name), w) {
                let config = match w.type_ {
                    WebhookType::Mutating => "MutatingWebhookConfiguration",
                    WebhookType::Validating => "ValidatingWebhookConfiguration",
                };
                problems.push(format!(
                    "the webhooks at {} and {} are both named {} in the {config}, which the API \
                     server refuses; give one another name with .name(...)",
                    other.path, w.path, w.name
                ));
            }
            if !w.path.starts_with('/') {
                problems.push(format!(
                    "the path {:?} of webhook {} does not start with '/'",
                    w.path, w.name
                ));
            }
            if matches!(
                w.path.as_str(),
                "/healthz" | "/readyz" | "/metrics" | CONVERSION_PATH
            ) {
                problems.push(format!(
                    "the path {} of webhook {} is reserved",
                    w.path, w.name
                ));
            }
            if let Some(other) = paths.insert(&w.path, w) {
                problems.push(format!(
                    "webhooks {} and {} are both at {}; give one another path with .path(...)",
                    other.name, w.name, w.path
                ));
            }
        }
        let mut kinds = Vec::new();
        for c in self.conversions.kinds() {
            problems.extend(c.errors().iter().cloned());
            if kinds.contains(&(c.group(), c.kind())) {
                problems.push(format!(
                    "the conversions of {}.{} are registered twice",
                    c.kind(),
                    c.group()
                ));
            }
            kinds.push((c.group(), c.kind()));
        }
        if !problems.is_empty() {
            return Err(Error::Registration(problems.join("; ")));
        }
        let certs = match &self.tls {
            Tls::Dir {
                dir,
                cert_name,
                key_name,
            } => CertWatcher::from_files(dir.join(cert_name), dir.join(key_name))?,
            Tls::Pem { cert, key } => CertWatcher::from_pem(cert, key)?,
        };
        let (metrics, registry) = match (self.metrics, self.metrics_registry) {
            (Some(m), r) => (m, r),
            (None, r) => {
                let mut registry = Registry::default();
                let m = WebhookMetrics::new(&mut registry);
                (m, Some(r.unwrap_or_else(|| Arc::new(registry))))
            }
        };
        Ok(WebhookServer {
            webhooks: self.webhooks,
            conversions: self.conversions,
            address: SocketAddr::new(self.host, self.port),
            certs: Arc::new(certs),
            cert_poll_interval: self.cert_poll_interval,
            max_body_bytes: self.max_body_bytes,
            request_timeout: self.request_timeout,
            handshake_timeout: self.handshake_timeout,
            header_read_timeout: self.header_read_timeout,
            limits: ConnectionLimits {
                idle_timeout: self.idle_timeout,
                http2_keep_alive: self.http2_keep_alive,
                max_connections: self.max_connections,
            },
            shutdown_timeout: self.shutdown_timeout,
            metrics,
            registry,
        })
    }
}

/// A webhook server, built and ready to [`start`](Self::start). It also makes the
/// configurations that register its webhooks with the API server.
#[derive(Debug)]
pub struct WebhookServer {
    webhooks: Vec<Webhook>,
    conversions: Converters,
    address: SocketAddr,
    certs: Arc<CertWatcher>,
    cert_poll_interval: Duration,
    max_body_bytes: usize,
    request_timeout: Duration,
    handshake_timeout: Duration,
    header_read_timeout: Duration,
    limits: ConnectionLimits,
    shutdown_timeout: Duration,
    metrics: WebhookMetrics,
    registry: Option<Arc<Registry>>,
}

/// The limits of connections besides the handshake and header timeouts.
#[derive(Clone, Copy, Debug)]
struct ConnectionLimits {
    idle_timeout: Duration,
    http2_keep_alive: (Duration, Duration),
    max_connections: usize,
}

/// The requests of one connection in progress, and when the last one ended, for the idle
/// timeout.
#[derive(Debug)]
struct Activity {
    in_flight: std::sync::atomic::AtomicUsize,
    /// Whether a request's headers ever arrived.
    seen: std::sync::atomic::AtomicBool,
    /// When the last request ended (or the connection started).
    last: std::sync::Mutex<tokio::time::Instant>,
    /// Woken when a request ends, so the connection's deadline is computed again.
    changed: tokio::sync::Notify,
}

impl Activity {
    fn new() -> Self {
        Activity {
            in_flight: 0.into(),
            seen: false.into(),
            last: std::sync::Mutex::new(tokio::time::Instant::now()),
            changed: tokio::sync::Notify::new(),
        }
    }

    /// A request arrived; it is in progress until the guard drops.
    fn begin(self: &Arc<Self>) -> RequestGuard {
        self.seen.store(true, std::sync::atomic::Ordering::SeqCst);
        self.in_flight
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        RequestGuard(self.clone())
    }

    /// When the connection becomes idle too long, if no request is in progress.
    fn idle_deadline(&self, idle_timeout: Duration) -> Option<tokio::time::Instant> {
        (self.in_flight.load(std::sync::atomic::Ordering::SeqCst) == 0).then(|| {
            deadline_after(
                *self.last.lock().unwrap_or_else(|e| e.into_inner()),
                idle_timeout,
            )
        })
    }
}

/// A request in progress (see [`Activity::begin`]).
struct RequestGuard(Arc<Activity>);

impl Drop for RequestGuard {
    fn drop(&mut self) {
        *self.0.last.lock().unwrap_or_else(|e| e.into_inner()) = tokio::time::Instant::now();
        self.0
            .in_flight
            .fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
        self.0.changed.notify_one();
    }
}

/// A started server; see [`WebhookServer::start`].
#[derive(Debug)]
pub struct RunningServer {
    local_addr: SocketAddr,
    metrics: WebhookMetrics,
    certs: Arc<CertWatcher>,
    task: tokio::task::JoinHandle<()>,
}

impl RunningServer {
    /// The address it listens on (with the port picked when 0 was asked for).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Its request metrics.
    pub fn metrics(&self) -> &WebhookMetrics {
        &self.metrics
    }

    /// Its serving identity.
    pub fn certificates(&self) -> &Arc<CertWatcher> {
        &self.certs
    }

    /// Waits until it has stopped: the cancellation fired and the connections finished (or
    /// the shutdown timeout passed).
    pub async fn stopped(self) {
        let _ = self.task.await;
    }
}

/// What every connection's requests need.
struct State {
    /// The admission webhooks by path.
    admission: BTreeMap<String, Webhook>,
    conversions: Converters,
    metrics: WebhookMetrics,
    /// Served at `/metrics`, if any.
    registry: Option<Arc<Registry>>,
    max_body_bytes: usize,
    request_timeout: Duration,
}

impl WebhookServer {
    /// A builder with controller-runtime's defaults (port 9443, `tls.crt`/`tls.key` in
    /// [`default_cert_dir`]).
    pub fn builder() -> ServerBuilder {
        ServerBuilder::default()
    }

    /// The admission webhooks it serves.
    pub fn webhooks(&self) -> &[Webhook] {
        &self.webhooks
    }

    /// The `(group, kind)` of each kind it converts.
    pub fn converted_kinds(&self) -> Vec<(&'static str, &'static str)> {
        self.conversions
            .kinds()
            .iter()
            .map(|c| (c.group(), c.kind()))
            .collect()
    }

    /// The `MutatingWebhookConfiguration` named `name` registering its mutating webhooks,
    /// called as `client` says; `None` if it has none.
    pub fn mutating_configuration(
        &self,
        name: &str,
        client: &ClientConfig,
    ) -> Option<k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration> {
        self.webhooks
            .iter()
            .any(|w| w.type_ == WebhookType::Mutating)
            .then(|| configuration::mutating(name, &self.webhooks, client))
    }

    /// The `ValidatingWebhookConfiguration` named `name` registering its validating
    /// webhooks, called as `client` says; `None` if it has none.
    pub fn validating_configuration(
        &self,
        name: &str,
        client: &ClientConfig,
    ) -> Option<k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration> {
        self.webhooks
            .iter()
            .any(|w| w.type_ == WebhookType::Validating)
            .then(|| configuration::validating(name, &self.webhooks, client))
    }

    /// The request metrics.
    pub fn metrics(&self) -> &WebhookMetrics {
        &self.metrics
    }

    /// Binds the address and serves until `cancel` fires. Returns once listening (a bind
    /// failure is returned); serving goes on in a task. The server stays usable for its
    /// configurations (with the port now known, [`RunningServer::local_addr`]).
    pub async fn start(&self, cancel: CancellationToken) -> Result<RunningServer, Error> {
        let listener = TcpListener::bind(self.address)
            .await
            .map_err(|source| Error::Bind {
                address: self.address,
                source,
            })?;
        let local_addr = listener.local_addr().map_err(|source| Error::Bind {
            address: self.address,
            source,
        })?;
        let mut tls = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::Tls(e.to_string()))?
        .with_no_client_auth()
        .with_cert_resolver(self.certs.clone());
        tls.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        let acceptor = TlsAcceptor::from(Arc::new(tls));
        tokio::spawn(
            self.certs
                .clone()
                .watch(capped(self.cert_poll_interval), cancel.child_token()),
        );
        let state = Arc::new(State {
            admission: self
                .webhooks
                .iter()
                .map(|w| (w.path.clone(), w.clone()))
                .collect(),
            conversions: self.conversions.clone(),
            metrics: self.metrics.clone(),
            registry: self.registry.clone(),
            max_body_bytes: self.max_body_bytes,
            request_timeout: self.request_timeout,
        });
        let mut http = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
        http.http1()
            .timer(TokioTimer::new())
            .header_read_timeout(capped(self.header_read_timeout));
        http.http2()
            .timer(TokioTimer::new())
            .keep_alive_interval(capped(self.limits.http2_keep_alive.0))
            .keep_alive_timeout(capped(self.limits.http2_keep_alive.1));
        let http = Arc::new(http);
        let paths: Vec<&str> = self.webhooks.iter().map(|w| w.path.as_str()).collect();
        info!(
            address = %local_addr,
            webhooks = ?paths,
            conversions = !self.conversions.is_empty(),
            "serving webhooks over HTTPS"
        );
        let (handshake_timeout, header_timeout, shutdown_timeout, limits) = (
            self.handshake_timeout,
            self.header_read_timeout,
            self.shutdown_timeout,
            self.limits,
        );
        let permits = Arc::new(tokio::sync::Semaphore::new(limits.max_connections));
        let task = tokio::spawn(async move {
            let mut connections = JoinSet::new();
            loop {
                // Reap finished connections, so the set only holds open ones.
                while connections.try_join_next().is_some() {}
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
                                () = tokio::time::sleep(Duration::from_millis(100)) => continue,
                            }
                        }
                    },
                };
                let (acceptor, state, http, cancel) = (
                    acceptor.clone(),
                    state.clone(),
                    http.clone(),
                    cancel.clone(),
                );
                connections.spawn(async move {
                    let _permit = permit;
                    let tls = match tokio::time::timeout(handshake_timeout, acceptor.accept(stream))
                        .await
                    {
                        Ok(Ok(tls)) => tls,
                        Ok(Err(e)) => {
                            debug!(%peer, %e, "TLS handshake failed");
                            return;
                        }
                        Err(_) => {
                            debug!(%peer, "TLS handshake timed out");
                            return;
                        }
                    };
                    let activity = Arc::new(Activity::new());
                    let requests = activity.clone();
                    let service = hyper::service::service_fn(move |request: Request<Incoming>| {
                        let state = state.clone();
                        let guard = requests.begin();
                        async move {
                            let answer = answer::route(&state, request).await;
                            drop(guard);
                            Ok::<_, Infallible>(answer)
                        }
                    });
                    let connection = http.serve_connection(TokioIo::new(tls), service);
                    tokio::pin!(connection);
                    // Until the first request's headers, the whole connection has the header
                    // timeout (hyper's protocol detection and HTTP/2 have none); then it is
                    // closed once idle for the idle timeout.
                    let first_request =
                        deadline_after(tokio::time::Instant::now(), header_timeout);
                    loop {
                        let seen = activity.seen.load(std::sync::atomic::Ordering::SeqCst);
                        let deadline = if seen {
                            activity.idle_deadline(limits.idle_timeout)
                        } else {
                            Some(first_request)
                        };
                        // With a request in progress, the deadline is looked at again
                        // after a while (the request timeout bounds it).
                        let wake = deadline.unwrap_or_else(|| {
                            deadline_after(tokio::time::Instant::now(), limits.idle_timeout)
                        });
                        tokio::select! {
                            () = activity.changed.notified() => {}
                            served = connection.as_mut() => {
                                if let Err(e) = served {
                                    debug!(%peer, %e, "connection ended with an error");
                                }
                                return;
                            }
                            () = cancel.cancelled() => {
                                connection.as_mut().graceful_shutdown();
                                let _ = connection.await;
                                return;
                            }
                            () = tokio::time::sleep_until(wake) => {
                                let now = tokio::time::Instant::now();
                                if !activity.seen.load(std::sync::atomic::Ordering::SeqCst) {
                                    debug!(%peer, timeout = ?header_timeout, "no request within the header timeout; closing the connection");
                                    return;
                                }
                                if activity.idle_deadline(limits.idle_timeout).is_some_and(|d| d <= now) {
                                    debug!(%peer, timeout = ?limits.idle_timeout, "connection idle; closing it");
                                    connection.as_mut().graceful_shutdown();
                                    // A client that does not take the hint is cut off.
                                    let _ = tokio::time::timeout(header_timeout, connection.as_mut()).await;
                                    return;
                                }
                            }
                        }
                    }
                });
            }
            drop(listener);
            let drained = tokio::time::timeout(shutdown_timeout, async {
                while connections.join_next().await.is_some() {}
            })
            .await;
            if drained.is_err() {
                warn!(open = connections.len(), timeout = ?shutdown_timeout, "connections still open at the end of the shutdown; closing them");
                connections.abort_all();
            }
            info!("webhook server stopped");
        });
        Ok(RunningServer {
            local_addr,
            metrics: self.metrics.clone(),
            certs: self.certs.clone(),
            task,
        })
    }
}

mod answer;

#[cfg(test)]
mod tests;

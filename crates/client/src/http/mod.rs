//! [`HttpBackend`]: the [`Backend`] that talks to a real API server (client-go's `rest`
//! package).
//!
//! One request goes through these steps, each in its own file:
//!
//! ```text
//! ApiRequest ─url.rs─▶ method, URL, body
//!   ─flow_control.rs─▶ wait for a rate-limiter token (not for a watch's first attempt)
//!   ─────────────────▶ send (auth headers from kctrl_config::Transport)
//!   ─retry.rs────────▶ 429/5xx + Retry-After, or a retryable transport failure? sleep, token, again
//!   ─response.rs─────▶ 2xx: the body │ otherwise: the decoded Status error
//!   ─framing.rs──────▶ watch: the body cut into one frame per event
//! ```
//!
//! `metrics.rs` is the measurement hook; `discovery.rs` serves `/version` and group/version
//! resource lists over the same path.
//!
//! Only JSON is spoken (`Accept: application/json`); protobuf is out of scope.

mod discovery;
mod flow_control;
pub(crate) mod framing;
mod metrics;
pub(crate) mod response;
mod retry;
mod url;

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt};
use http::header::{ACCEPT, CONTENT_TYPE, USER_AGENT};
use http::{HeaderMap, HeaderValue, Method, StatusCode};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::APIResourceList;
use k8s_openapi::apimachinery::pkg::version::Info;
use kctrl_config::{Config, ConfigError, Transport, redacted_url};

use self::flow_control::{Throttle, ThrottleContext};
use self::framing::{DEFAULT_MAX_FRAME_SIZE, ErrorChain, watch_frames};
use self::metrics::code_label;
pub use self::metrics::{NoopRestClientMetrics, RestClientMetrics};
use self::response::{JSON, check_watch_content_type, error_from_response};
pub use self::retry::MAX_RETRY_AFTER;
use self::retry::{
    AttemptResult, DEFAULT_MAX_RETRIES, RequestKind, Retrier, RetryAfter, TransportFailure,
};
use crate::api::Client;
use crate::backend::{Backend, WatchFrames};
use crate::error::{ApiError, Error};
use crate::request::{ApiRequest, Operation};
use crate::resource::ResourceRef;

/// How much of a response that will be retried is read, so its connection can be reused
/// (client-go reads 2 KiB too); the rest is dropped with the connection.
const RETRIED_BODY_SLURP: usize = 2 << 10;

/// The default limit on a successful (non-watch) response body: 1 GiB. A list larger than
/// that should be read in pages (`limit`/`continue`, as informers do); the limit keeps a
/// broken or hostile server from growing the process without bound.
pub const DEFAULT_MAX_BODY_SIZE: usize = 1 << 30;

/// The limit on a failure response's body: 1 MiB. A `Status` is a few hundred bytes; the
/// API server truncates long messages well below this.
pub const MAX_ERROR_BODY_SIZE: usize = 1 << 20;

/// The HTTP [`Backend`]: one API server, one connection pool, one client-side rate limiter
/// (a [`named_sibling`](Self::named_sibling) shares the pool and has a limiter of its own).
///
/// Built from a [`Config`]; usually through [`Client::try_from_config`].
///
/// * **Flow control**: a token bucket with the config's QPS and burst (zero means
///   client-go's defaults 5 and 10; a negative QPS disables it) is shared by every request
///   and retry of this backend. A watch's first attempt does not wait for it.
/// * **Retries**: up to [`HttpBackend::max_retries`] (default 10) after a 429 or 5xx that
///   carries an integer `Retry-After`, or after a transport failure a retry can cure (reads
///   and watches only; writes never). The error after the last attempt is
///   [`Error::Retried`].
/// * **Timeouts**: `Config::timeout` bounds a whole non-watch request, retries included,
///   from the moment it got its first rate-limiter token (so throttling alone never times a
///   request out); it fails with [`Error::Timeout`]. Zero, and a duration too large to be a
///   point in time (such as `Duration::MAX`), mean no timeout. A watch is bounded only by
///   [`WatchParams::client_deadline`](crate::WatchParams::client_deadline), after which its
///   stream just ends.
/// * **Errors**: a failure response becomes [`Error::Api`] with the server's decoded
///   `Status`; a 401 also tells the transport to refresh its credentials before the next
///   request. Errors and logs name the method and URL, never credentials (a password in
///   the server URL's userinfo is printed as `redacted`).
///
/// ```no_run
/// # async fn demo() -> Result<(), kctrl_client::Error> {
/// use kctrl_client::{Client, HttpBackend, config::Config};
///
/// let config = Config::new("https://127.0.0.1:6443".parse().unwrap());
/// let backend = HttpBackend::new(config)?.with_max_retries(3);
/// let client = Client::new(backend, "default");
/// println!("{}", client.server_version().await?.git_version);
/// # Ok(()) }
/// ```
pub struct HttpBackend {
    base: ::url::Url,
    /// `host[:port]` of the server, the `host` metric label.
    host: String,
    transport: Transport,
    throttle: Throttle,
    metrics: Arc<dyn RestClientMetrics>,
    max_retries: u32,
    timeout: Option<Duration>,
    user_agent: HeaderValue,
    max_frame_size: usize,
    max_body_size: usize,
}

impl fmt::Debug for HttpBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The transport holds credentials: never print it.
        f.debug_struct("HttpBackend")
            .field("server", &redacted_url(&self.base))
            .field("rate_limit", &self.throttle.limits())
            .field("max_retries", &self.max_retries)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl HttpBackend {
    /// A backend for `config`'s server, with its TLS and credentials.
    pub fn new(config: Config) -> Result<Self, Error> {
        let mut base = config.server.clone();
        if !matches!(base.scheme(), "http" | "https") || base.cannot_be_a_base() {
            return Err(Error::InvalidRequest(format!(
                "server URL {} must be an http:// or https:// URL",
                redacted_url(&base)
            )));
        }
        base.set_query(None);
        base.set_fragment(None);
        let host = match (base.host_str(), base.port()) {
            (Some(h), Some(p)) => format!("{h}:{p}"),
            (Some(h), None) => h.to_owned(),
            (None, _) => "none".to_owned(),
        };
        let user_agent = match &config.user_agent {
            Some(ua) => HeaderValue::from_str(ua).map_err(|_| {
                Error::InvalidRequest(format!("user agent {ua:?} is not a valid header value"))
            })?,
            None => HeaderValue::from_str(&default_user_agent())
                .expect("the default user agent is ASCII"),
        };
        flow_control::check_limits(config.qps, config.burst)?;
        let transport = Transport::new(&config)?;
        let metrics: Arc<dyn RestClientMetrics> = Arc::new(NoopRestClientMetrics);
        let throttle = Throttle::new(config.qps, config.burst, metrics.clone(), host.clone());
        tracing::debug!(
            server = %redacted_url(&base),
            rate_limit = ?throttle.limits(),
            timeout = ?config.timeout,
            "created HTTP backend"
        );
        Ok(Self {
            base,
            host,
            transport,
            throttle,
            metrics,
            max_retries: DEFAULT_MAX_RETRIES,
            timeout: config.timeout.filter(|t| !t.is_zero()),
            user_agent,
            max_frame_size: DEFAULT_MAX_FRAME_SIZE,
            max_body_size: DEFAULT_MAX_BODY_SIZE,
        })
    }

    /// Sets how many times a request may be retried after its first attempt (client-go's
    /// `Request.MaxRetries`; default 10). Zero disables retries.
    pub fn with_max_retries(mut self, max_retries: u32) -> Self {
        self.max_retries = max_retries;
        self
    }

    /// Sets the largest successful (non-watch) response body read, in bytes (default
    /// [`DEFAULT_MAX_BODY_SIZE`], 1 GiB); a larger one fails the request with
    /// [`Error::BodyTooLarge`]. Failure bodies are limited to [`MAX_ERROR_BODY_SIZE`] (or
    /// this, if smaller); watch events have their own per-event limit.
    pub fn with_max_body_size(mut self, bytes: usize) -> Self {
        self.max_body_size = bytes;
        self
    }

    /// Sends measurements to `metrics` instead of discarding them.
    pub fn with_metrics(mut self, metrics: Arc<dyn RestClientMetrics>) -> Self {
        self.throttle.set_metrics(metrics.clone());
        self.metrics = metrics;
        self
    }

    /// Another backend to this one's server, over its connections and with its credentials,
    /// whose requests wait on a token bucket of their own (same QPS and burst) and carry
    /// `name` appended to the user agent (`<user agent>/<name>`).
    ///
    /// This is how kube-controller-manager gives each of its controllers a client: one
    /// configuration, one client per controller named after it, so controllers in one
    /// process never wait on each other's rate limit, and the API server's audit log tells
    /// their requests apart. Retries, timeout, body limits and metrics are this backend's.
    /// Fails if `name` cannot be part of a header value.
    ///
    /// ```no_run
    /// # fn demo() -> Result<(), kctrl_client::Error> {
    /// use kctrl_client::{Client, HttpBackend, config::Config};
    ///
    /// let mut config = Config::new("https://127.0.0.1:6443".parse().unwrap());
    /// config.qps = 20.0;
    /// config.burst = 30;
    /// let root = HttpBackend::new(config)?;
    /// // Each controller spends up to 20 QPS of its own.
    /// let deployments = Client::new(root.named_sibling("deployment-controller")?, "default");
    /// let replica_sets = Client::new(root.named_sibling("replicaset-controller")?, "default");
    /// # Ok(()) }
    /// ```
    pub fn named_sibling(&self, name: &str) -> Result<Self, Error> {
        let agent = [self.user_agent.as_bytes(), b"/", name.as_bytes()].concat();
        let user_agent = HeaderValue::from_bytes(&agent).map_err(|_| {
            Error::InvalidRequest(format!(
                "client name {name:?} cannot be part of a user agent (a header value)"
            ))
        })?;
        Ok(Self {
            base: self.base.clone(),
            host: self.host.clone(),
            transport: self.transport.clone(),
            throttle: self.throttle.with_own_bucket(),
            metrics: self.metrics.clone(),
            max_retries: self.max_retries,
            timeout: self.timeout,
            user_agent,
            max_frame_size: self.max_frame_size,
            max_body_size: self.max_body_size,
        })
    }

    /// Whether a backend can be built with this QPS and burst (as [`HttpBackend::new`]
    /// checks): [`Error::InvalidRateLimit`] when the QPS is too small for the limiter.
    pub fn check_rate_limit(qps: f32, burst: u32) -> Result<(), Error> {
        flow_control::check_limits(qps, burst)
    }

    /// The `User-Agent` this backend's requests carry, if it is visible ASCII (`None` for
    /// one with other characters, which are sent as given all the same).
    pub fn user_agent(&self) -> Option<&str> {
        self.user_agent.to_str().ok()
    }

    /// The server's base URL.
    pub fn server(&self) -> &::url::Url {
        &self.base
    }

    /// How many retries may follow a request's first attempt.
    pub fn max_retries(&self) -> u32 {
        self.max_retries
    }

    /// The client-side rate limit as `(qps, burst)` after defaulting, or `None` if disabled.
    pub fn rate_limit(&self) -> Option<(f32, u32)> {
        self.throttle.limits()
    }

    /// Method, URL and body of an API call.
    fn prepare(&self, req: &ApiRequest) -> Result<Prepared, Error> {
        let url = url::request_url(&self.base, req)?;
        // An object body is JSON, or protobuf (`Api::protobuf_bodies`), which starts with
        // bytes no JSON text starts with.
        let json_body = |body: &Bytes| {
            let content_type = if crate::protobuf::is_protobuf(body) {
                crate::protobuf::PROTOBUF
            } else {
                JSON
            };
            Some((body.clone(), content_type))
        };
        let (method, body, kind) = match &req.operation {
            Operation::Get { .. } | Operation::List(_) => (Method::GET, None, RequestKind::Read),
            Operation::Watch(_) => (Method::GET, None, RequestKind::Watch),
            Operation::Create { body, .. } => (Method::POST, json_body(body), RequestKind::Write),
            Operation::Update { body, .. } => (Method::PUT, json_body(body), RequestKind::Write),
            Operation::Patch { patch, .. } => {
                let body = serde_json::to_vec(patch.body()).map_err(|source| Error::Decode {
                    what: "patch body".to_owned(),
                    source,
                })?;
                (
                    Method::PATCH,
                    Some((Bytes::from(body), patch.content_type())),
                    RequestKind::Write,
                )
            }
            Operation::Delete { params, .. } => {
                let body =
                    serde_json::to_vec(&params.to_body()).map_err(|source| Error::Decode {
                        what: "DeleteOptions body".to_owned(),
                        source,
                    })?;
                (
                    Method::DELETE,
                    Some((Bytes::from(body), JSON)),
                    RequestKind::Write,
                )
            }
        };
        let mut prepared = Prepared::new(method, url, body, kind);
        prepared.accept = crate::metadata::accept_header(req.representation, req.wire, req.verb());
        prepared.drop_managed_fields = req.drop_managed_fields;
        prepared.resource = Some(req.resource.clone());
        Ok(prepared)
    }

    /// Sends one attempt.
    async fn send(&self, p: &Prepared) -> Result<reqwest::Response, SendError> {
        let auth = self.transport.prepare().await.map_err(SendError::Config)?;
        let mut headers = HeaderMap::with_capacity(3);
        headers.insert(ACCEPT, HeaderValue::from_static(p.accept));
        headers.insert(USER_AGENT, self.user_agent.clone());
        if let Some((_, content_type)) = &p.body {
            headers.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
        }
        let mut builder = auth
            .request(p.method.clone(), p.url.clone())
            .headers(headers);
        if let Some((body, _)) = &p.body {
            builder = builder.body(body.clone());
        }
        let resp = builder.send().await.map_err(SendError::Transport)?;
        if resp.status() == StatusCode::UNAUTHORIZED {
            // Cached credentials (exec plugin, token file) may have expired: they are renewed
            // unless the 401 is about credentials already replaced.
            self.transport.invalidate_credentials(auth.credential());
        }
        Ok(resp)
    }

    /// Runs a non-watch request to completion: throttling, retries, timeout, metrics.
    async fn execute(&self, p: Prepared) -> Result<Bytes, Error> {
        let start = Instant::now();
        // The first token is taken before the timeout starts: a throttled client should
        // not time out requests it has not sent yet (as in client-go).
        // (Without a deadline the wait cannot fail.)
        self.throttle
            .wait(p.throttle_context(None), None)
            .await
            .map_err(|_| p.timeout_error(Duration::ZERO))?;
        // A timeout too large to be a point in time (`Duration::MAX`) is no deadline.
        let deadline = self
            .timeout
            .and_then(|t| tokio::time::Instant::now().checked_add(t));
        let mut state = RetryState::new(self.max_retries, self.timeout);
        let result = match deadline {
            Some(d) => {
                match tokio::time::timeout_at(d, self.attempts(&p, &mut state, deadline)).await {
                    Ok(r) => r,
                    Err(_) => Err(p.timeout_error(state.bound)),
                }
            }
            None => self.attempts(&p, &mut state, None).await,
        };
        self.metrics
            .observe_request_latency(p.method.as_str(), &self.host, start.elapsed());
        result.map_err(|e| state.finish(e))
    }

    /// The attempt loop of [`execute`](Self::execute).
    async fn attempts(
        &self,
        p: &Prepared,
        st: &mut RetryState,
        deadline: Option<tokio::time::Instant>,
    ) -> Result<Bytes, Error> {
        loop {
            self.before_attempt(p, st, deadline).await?;
            let started = Instant::now();
            let resp = match self.send(p).await {
                Ok(resp) => resp,
                Err(SendError::Config(e)) => return Err(e.into()),
                Err(SendError::Transport(e)) => {
                    self.after_attempt(p, st, None, started);
                    self.on_transport_error(p, st, e)?;
                    continue;
                }
            };
            let status = resp.status();
            self.after_attempt(p, st, Some(status), started);
            if status.is_success() {
                match read_limited(resp, self.max_body_size).await {
                    Ok(body) => return Ok(body),
                    Err(ReadError::TooLarge) => {
                        return Err(p.body_too_large(status, self.max_body_size));
                    }
                    Err(ReadError::Transport(e)) => {
                        // The connection failed mid-body: for a GET this is as retryable
                        // as a failure before the response.
                        self.on_transport_error(p, st, e)?;
                        continue;
                    }
                }
            }
            self.on_error_response(p, st, resp).await?;
        }
    }

    /// Before each attempt: a retry first sleeps its Retry-After delay, then takes a
    /// rate-limiter token. Counts the attempt.
    async fn before_attempt(
        &self,
        p: &Prepared,
        st: &mut RetryState,
        deadline: Option<tokio::time::Instant>,
    ) -> Result<(), Error> {
        let Some(retry) = st.pending.take() else {
            st.attempts += 1;
            return Ok(());
        };
        tokio::time::sleep(retry.wait).await;
        self.throttle
            .wait(p.throttle_context(Some(&retry.reason)), deadline)
            .await
            .map_err(|_| p.timeout_error(st.bound))?;
        tracing::debug!(
            verb = %p.method,
            url = %p.url_str,
            attempt = st.attempts + 1,
            delay_ms = u64::try_from(retry.wait.as_millis()).unwrap_or(u64::MAX),
            reason = %retry.reason,
            "retrying request"
        );
        st.attempts += 1;
        Ok(())
    }

    /// Logs and counts a finished attempt.
    fn after_attempt(
        &self,
        p: &Prepared,
        st: &RetryState,
        status: Option<StatusCode>,
        started: Instant,
    ) {
        let code = code_label(status);
        self.metrics
            .observe_request_result(&code, p.method.as_str(), &self.host);
        if st.attempts > 1 {
            self.metrics
                .observe_request_retry(&code, p.method.as_str(), &self.host);
        }
        tracing::debug!(
            verb = %p.method,
            url = %p.url_str,
            status = %code,
            attempt = st.attempts,
            elapsed_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
            "HTTP request"
        );
    }

    /// A transport failure: schedule a retry (returns `Ok`) or give up (returns the error).
    fn on_transport_error(
        &self,
        p: &Prepared,
        st: &mut RetryState,
        e: reqwest::Error,
    ) -> Result<(), Error> {
        // The URL is in our own messages already.
        let e = e.without_url();
        let failure = TransportFailure::classify(&e);
        let retryable = failure.retryable_for(p.kind);
        let message = ErrorChain(&e).to_string();
        let decision = st.retrier.is_next_retry(&AttemptResult::TransportError {
            retryable,
            message: &message,
        });
        let err = p.transport_error(e);
        match decision {
            Some(retry) => {
                st.retry(retry, err);
                Ok(())
            }
            None => {
                if retryable {
                    st.exhausted_retryable = true;
                }
                tracing::debug!(verb = %p.method, url = %p.url_str, error = %message, "request failed");
                Err(err)
            }
        }
    }

    /// A non-2xx response: schedule a retry (returns `Ok`) or return its Status error.
    async fn on_error_response(
        &self,
        p: &Prepared,
        st: &mut RetryState,
        mut resp: reqwest::Response,
    ) -> Result<(), Error> {
        let status = resp.status();
        let headers = std::mem::take(resp.headers_mut());
        if let Some(retry) = st.retrier.is_next_retry(&AttemptResult::Response {
            status,
            headers: &headers,
        }) {
            let body = slurp(resp, RETRIED_BODY_SLURP).await;
            st.retry(retry, error_from_response(status, &headers, &body).into());
            return Ok(());
        }
        let limit = MAX_ERROR_BODY_SIZE.min(self.max_body_size);
        match read_limited(resp, limit).await {
            Ok(body) => {
                let mut err = error_from_response(status, &headers, &body);
                if let Some(resource) = &p.resource
                    && err.means_resource_not_served()
                {
                    err = ApiError::resource_not_served(resource, err.message());
                }
                Err(err.into())
            }
            Err(ReadError::TooLarge) => Err(p.body_too_large(status, limit)),
            Err(ReadError::Transport(e)) => Err(p.transport_error(e)),
        }
    }

    /// Opens a watch: like [`execute`](Self::execute), but the first attempt is not
    /// throttled, timeouts and the EOF family are retryable, and success is a stream.
    async fn open_watch(
        &self,
        p: Prepared,
        client_deadline: Option<Duration>,
    ) -> Result<WatchFrames, Error> {
        let deadline = client_deadline.and_then(|d| tokio::time::Instant::now().checked_add(d));
        let mut state = RetryState::new(self.max_retries, client_deadline);
        let result = match deadline {
            Some(d) => {
                match tokio::time::timeout_at(d, self.watch_attempts(&p, &mut state, deadline))
                    .await
                {
                    Ok(r) => r,
                    Err(_) => Err(p.timeout_error(state.bound)),
                }
            }
            None => self.watch_attempts(&p, &mut state, None).await,
        };
        match result {
            Ok(frames) => Ok(frames),
            Err(e) if state.exhausted_retryable => {
                // client-go returns an empty watch here: the caller re-watches from where it
                // was instead of treating a flaky connection as a failed watch.
                tracing::info!(
                    url = %p.url_str,
                    attempts = state.attempts,
                    error = %ErrorChain(&e),
                    "watch could not be opened after retrying; returning an empty watch"
                );
                Ok(futures::stream::empty().boxed())
            }
            Err(e) => Err(state.finish(e)),
        }
    }

    async fn watch_attempts(
        &self,
        p: &Prepared,
        st: &mut RetryState,
        deadline: Option<tokio::time::Instant>,
    ) -> Result<WatchFrames, Error> {
        loop {
            // Only retries wait for a token: watches are long-lived and their first
            // attempt is not rate-limited (client-go).
            self.before_attempt(p, st, deadline).await?;
            let started = Instant::now();
            let resp = match self.send(p).await {
                Ok(resp) => resp,
                Err(SendError::Config(e)) => return Err(e.into()),
                Err(SendError::Transport(e)) => {
                    self.after_attempt(p, st, None, started);
                    self.on_transport_error(p, st, e)?;
                    continue;
                }
            };
            let status = resp.status();
            self.after_attempt(p, st, Some(status), started);
            if status.is_success() {
                let protobuf_asked = p.accept.starts_with(crate::protobuf::PROTOBUF);
                let format =
                    check_watch_content_type(resp.headers(), protobuf_asked).map_err(|msg| {
                        Error::Decode {
                            what: format!("watch stream of {} {}", p.method, p.url_str),
                            source: serde::de::Error::custom(msg),
                        }
                    })?;
                let frames = watch_frames(
                    resp.bytes_stream(),
                    format,
                    p.drop_managed_fields,
                    self.max_frame_size,
                    p.method.as_str(),
                    &p.url_str,
                );
                return Ok(match deadline {
                    Some(d) => frames.take_until(tokio::time::sleep_until(d)).boxed(),
                    None => frames.boxed(),
                });
            }
            self.on_error_response(p, st, resp).await?;
        }
    }
}

impl Backend for HttpBackend {
    fn call(&self, request: ApiRequest) -> BoxFuture<'_, Result<Bytes, Error>> {
        async move {
            if let Operation::Watch(_) = request.operation {
                return Err(Error::InvalidRequest(
                    "a watch must be opened with Backend::watch".to_owned(),
                ));
            }
            let p = self.prepare(&request)?;
            self.execute(p).await
        }
        .boxed()
    }

    fn watch(&self, request: ApiRequest) -> BoxFuture<'_, Result<WatchFrames, Error>> {
        async move {
            let Operation::Watch(params) = &request.operation else {
                return Err(Error::InvalidRequest(format!(
                    "Backend::watch needs a watch request, got {}",
                    request.verb()
                )));
            };
            let deadline = params.client_deadline();
            let p = self.prepare(&request)?;
            self.open_watch(p, deadline).await
        }
        .boxed()
    }

    fn server_version(&self) -> BoxFuture<'_, Result<Info, Error>> {
        discovery::server_version(self).boxed()
    }

    fn api_resources<'a>(
        &'a self,
        group_version: &'a str,
    ) -> BoxFuture<'a, Result<APIResourceList, Error>> {
        discovery::api_resources(self, group_version).boxed()
    }
}

impl Client {
    /// A client for the server `config` describes, over an [`HttpBackend`]; the default
    /// namespace comes from the config.
    pub fn try_from_config(config: Config) -> Result<Client, Error> {
        let namespace = config.default_namespace.clone();
        Ok(Client::new(HttpBackend::new(config)?, namespace))
    }
}

/// `kctrl/<version> (<os>/<arch>)`, with Go's names for the common architectures so server
/// logs read like client-go's.
fn default_user_agent() -> String {
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    };
    format!(
        "kctrl/{} ({}/{arch})",
        env!("CARGO_PKG_VERSION"),
        std::env::consts::OS
    )
}

/// One request ready to send, possibly several times.
struct Prepared {
    method: Method,
    url: ::url::Url,
    /// `url` as a string, for errors and logs (a password in it redacted).
    url_str: String,
    body: Option<(Bytes, &'static str)>,
    kind: RequestKind,
    /// The `Accept` header: JSON, or JSON as `PartialObjectMetadata`.
    accept: &'static str,
    /// Watch frames come out without `object.metadata.managedFields`.
    drop_managed_fields: bool,
    /// The resource an API call is about (none for discovery): a 404 saying the server does
    /// not serve it at all names it.
    resource: Option<ResourceRef>,
}

impl Prepared {
    fn new(
        method: Method,
        url: ::url::Url,
        body: Option<(Bytes, &'static str)>,
        kind: RequestKind,
    ) -> Self {
        Self {
            url_str: redacted_url(&url),
            method,
            url,
            body,
            kind,
            accept: JSON,
            drop_managed_fields: false,
            resource: None,
        }
    }

    fn throttle_context<'a>(&'a self, retry_reason: Option<&'a str>) -> ThrottleContext<'a> {
        ThrottleContext {
            method: self.method.as_str(),
            url: &self.url_str,
            retry_reason,
        }
    }

    fn transport_error(&self, e: reqwest::Error) -> Error {
        Error::Transport {
            verb: self.method.to_string(),
            url: self.url_str.clone(),
            // The URL is already in our message.
            source: Box::new(e.without_url()),
        }
    }

    fn body_too_large(&self, status: StatusCode, limit: usize) -> Error {
        Error::BodyTooLarge {
            what: format!(
                "body of the HTTP {} response to {} {}",
                status.as_u16(),
                self.method,
                self.url_str
            ),
            limit,
        }
    }

    fn timeout_error(&self, after: Duration) -> Error {
        Error::Timeout {
            verb: self.method.to_string(),
            url: self.url_str.clone(),
            after,
        }
    }
}

/// Why an attempt got no response.
enum SendError {
    /// The transport could not produce credentials: not retried.
    Config(ConfigError),
    /// The HTTP exchange failed.
    Transport(reqwest::Error),
}

/// The retry bookkeeping of one request.
struct RetryState {
    retrier: Retrier,
    /// Attempts started so far.
    attempts: u32,
    /// The retry scheduled by the last failure.
    pending: Option<RetryAfter>,
    /// The error of the most recent retried attempt, for context on the final error.
    previous: Option<Error>,
    /// The final failure was retryable but the retries ran out.
    exhausted_retryable: bool,
    /// The time bound of the whole request, for timeout errors.
    bound: Duration,
}

impl RetryState {
    fn new(max_retries: u32, bound: Option<Duration>) -> Self {
        Self {
            bound: bound.unwrap_or_default(),
            retrier: Retrier::new(max_retries),
            attempts: 0,
            pending: None,
            previous: None,
            exhausted_retryable: false,
        }
    }

    fn retry(&mut self, retry: RetryAfter, err: Error) {
        tracing::debug!(reason = %retry.reason, error = %ErrorChain(&err), "attempt failed; will retry");
        self.pending = Some(retry);
        self.previous = Some(err);
    }

    /// The error to return: the last one, wrapped with the attempt count and the previous
    /// attempt's error once a retry was scheduled.
    fn finish(self, last: Error) -> Error {
        if self.attempts <= 1 && self.previous.is_none() {
            return last;
        }
        let previous = self
            .previous
            .filter(|p| p.to_string() != last.to_string())
            .map(Box::new);
        Error::Retried {
            attempts: self.attempts,
            last: Box::new(last),
            previous,
        }
    }
}

/// Why [`read_limited`] returned no body.
enum ReadError {
    /// The body is longer than the limit.
    TooLarge,
    /// The connection failed mid-body.
    Transport(reqwest::Error),
}

/// Reads a whole body of at most `limit` bytes; stops reading as soon as the body (or its
/// announced length) exceeds the limit.
async fn read_limited(mut resp: reqwest::Response, limit: usize) -> Result<Bytes, ReadError> {
    let announced = resp.content_length();
    if announced.is_some_and(|n| n > limit as u64) {
        return Err(ReadError::TooLarge);
    }
    let mut first: Option<Bytes> = None;
    let mut body: Vec<u8> = Vec::new();
    while let Some(chunk) = resp.chunk().await.map_err(ReadError::Transport)? {
        let read = first.as_ref().map_or(0, Bytes::len) + body.len();
        if read + chunk.len() > limit {
            return Err(ReadError::TooLarge);
        }
        // A body in one chunk (the common case) is returned without a copy.
        match first.take() {
            None if body.is_empty() => first = Some(chunk),
            Some(f) => {
                let capacity = announced.map_or(0, |n| usize::try_from(n).unwrap_or(0));
                body.reserve(capacity.max(f.len() + chunk.len()));
                body.extend_from_slice(&f);
                body.extend_from_slice(&chunk);
            }
            None => body.extend_from_slice(&chunk),
        }
    }
    Ok(match first {
        Some(f) => f,
        None => Bytes::from(body),
    })
}

/// Reads up to `limit` bytes of a body that will be discarded.
async fn slurp(mut resp: reqwest::Response, limit: usize) -> Vec<u8> {
    let mut body = Vec::new();
    while body.len() < limit {
        match resp.chunk().await {
            Ok(Some(chunk)) => body.extend_from_slice(&chunk),
            Ok(None) | Err(_) => break,
        }
    }
    body
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_user_agent_names_crate_and_platform() {
        let ua = default_user_agent();
        assert!(
            ua.starts_with(&format!("kctrl/{} (", env!("CARGO_PKG_VERSION"))),
            "{ua}"
        );
        assert!(ua.contains(std::env::consts::OS), "{ua}");
    }

    #[test]
    fn a_sibling_keeps_a_user_agent_that_is_not_ascii() {
        let mut config = Config::new("http://127.0.0.1:1/".parse().unwrap());
        config.user_agent = Some("contrôleur/1.0".to_owned());
        let root = HttpBackend::new(config).unwrap();
        let sibling = root.named_sibling("ré").unwrap();
        assert_eq!(
            sibling.user_agent.as_bytes(),
            "contrôleur/1.0/ré".as_bytes()
        );
        assert_eq!(sibling.user_agent(), None);
        let ascii = HttpBackend::new(Config::new("http://127.0.0.1:1/".parse().unwrap()))
            .unwrap()
            .named_sibling("x")
            .unwrap();
        assert_eq!(
            ascii.user_agent(),
            Some(&*format!("{}/x", default_user_agent()))
        );
    }

    #[test]
    fn new_rejects_non_http_servers() {
        let config = Config::new("ftp://example.com".parse().unwrap());
        assert!(matches!(
            HttpBackend::new(config),
            Err(Error::InvalidRequest(_))
        ));
    }

    #[test]
    fn new_applies_client_go_defaults() {
        let mut config = Config::new("http://127.0.0.1:1/".parse().unwrap());
        let b = HttpBackend::new(config.clone()).unwrap();
        assert_eq!(b.rate_limit(), Some((5.0, 10)));
        assert_eq!(b.max_retries(), 10);
        assert_eq!(b.host, "127.0.0.1:1");
        config.qps = -1.0;
        assert_eq!(HttpBackend::new(config).unwrap().rate_limit(), None);
    }

    #[test]
    fn new_refuses_a_rate_limit_it_cannot_build() {
        let mut config = Config::new("http://127.0.0.1:1/".parse().unwrap());
        config.qps = 1e-30;
        let err = HttpBackend::new(config).unwrap_err();
        assert!(
            matches!(err, Error::InvalidRateLimit { burst: 10, .. }),
            "{err:?}"
        );
        assert!(err.to_string().contains("QPS 1e-30 with burst 10"), "{err}");
    }

    #[test]
    fn passwords_in_the_server_url_are_not_printed() {
        let config = Config::new("https://alice:hunter2@127.0.0.1:1/".parse().unwrap());
        let b = HttpBackend::new(config).unwrap();
        let debug = format!("{b:?}");
        assert!(!debug.contains("hunter2"), "{debug}");
        assert!(debug.contains("alice:redacted@127.0.0.1:1"), "{debug}");
    }

    #[test]
    fn retry_state_wraps_only_after_retries() {
        let st = RetryState::new(3, None);
        let e = st.finish(Error::InvalidRequest("x".into()));
        assert!(matches!(e, Error::InvalidRequest(_)));

        // A retry was scheduled but never sent (e.g. the timeout hit during its delay).
        let mut st = RetryState::new(3, None);
        st.attempts = 1;
        st.previous = Some(Error::InvalidRequest("503".into()));
        match st.finish(Error::InvalidRequest("timeout".into())) {
            Error::Retried {
                attempts: 1,
                previous: Some(_),
                ..
            } => {}
            other => panic!("{other:?}"),
        }

        let mut st = RetryState::new(3, None);
        st.attempts = 2;
        st.previous = Some(Error::InvalidRequest("x".into()));
        // Same message as the previous attempt: no "previous" part.
        match st.finish(Error::InvalidRequest("x".into())) {
            Error::Retried {
                attempts: 2,
                previous: None,
                ..
            } => {}
            other => panic!("{other:?}"),
        }
    }
}

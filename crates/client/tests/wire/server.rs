//! A scripted HTTP/1.1 server on 127.0.0.1 that records every request and answers with
//! the next scripted [`Reply`]: full bodies, streamed chunks, dropped connections or no
//! answer at all.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::io;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use http::{HeaderMap, HeaderName, HeaderValue, Request, Response, StatusCode};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use kctrl_client::RestClientMetrics;
use kctrl_client::config::Config;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// What the server does with one request.
#[derive(Clone, Debug)]
pub(crate) enum Reply {
    /// A complete response.
    Full {
        status: u16,
        headers: Vec<(&'static str, String)>,
        body: Bytes,
    },
    /// A chunked response: each chunk is written and flushed on its own, then `then`.
    Chunks {
        status: u16,
        headers: Vec<(&'static str, String)>,
        chunks: Vec<Bytes>,
        then: AfterChunks,
    },
    /// Close the connection without answering.
    Drop,
    /// Never answer.
    Hang,
}

/// How a chunked response ends.
#[derive(Clone, Copy, Debug)]
pub(crate) enum AfterChunks {
    /// The body ends cleanly.
    End,
    /// The connection is cut mid-body.
    Abort,
    /// The body stays open forever.
    Hang,
}

impl Reply {
    /// A JSON response.
    pub(crate) fn json(status: u16, body: serde_json::Value) -> Self {
        Reply::Full {
            status,
            headers: vec![("content-type", "application/json".to_owned())],
            body: Bytes::from(serde_json::to_vec(&body).unwrap()),
        }
    }

    /// A plain-text response.
    pub(crate) fn text(status: u16, body: &str) -> Self {
        Reply::Full {
            status,
            headers: vec![("content-type", "text/plain".to_owned())],
            body: Bytes::from(body.to_owned()),
        }
    }

    /// A failure `Status` as the API server sends it.
    pub(crate) fn status(code: u16, reason: &str, message: &str) -> Self {
        Reply::json(code, status_json(code, reason, message))
    }

    /// A watch response: one chunk per event, each ending in a newline, then a clean end.
    pub(crate) fn watch(events: &[serde_json::Value]) -> Self {
        Reply::Chunks {
            status: 200,
            headers: vec![("content-type", "application/json".to_owned())],
            chunks: events
                .iter()
                .map(|e| {
                    let mut v = serde_json::to_vec(e).unwrap();
                    v.push(b'\n');
                    Bytes::from(v)
                })
                .collect(),
            then: AfterChunks::End,
        }
    }

    /// Adds a response header.
    pub(crate) fn header(mut self, name: &'static str, value: &str) -> Self {
        match &mut self {
            Reply::Full { headers, .. } | Reply::Chunks { headers, .. } => {
                headers.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
                headers.push((name, value.to_owned()));
            }
            Reply::Drop | Reply::Hang => panic!("no headers on {self:?}"),
        }
        self
    }
}

/// A `Status` object.
pub(crate) fn status_json(code: u16, reason: &str, message: &str) -> serde_json::Value {
    serde_json::json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    })
}

/// One request as the server saw it.
#[derive(Clone, Debug)]
pub(crate) struct Recorded {
    pub(crate) method: String,
    pub(crate) path: String,
    pub(crate) query: Option<String>,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Bytes,
}

impl Recorded {
    /// `path?query` as sent (still percent-encoded).
    pub(crate) fn path_and_query(&self) -> String {
        match &self.query {
            Some(q) => format!("{}?{q}", self.path),
            None => self.path.clone(),
        }
    }

    /// A header as a string, if present.
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// The body as JSON.
    pub(crate) fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap()
    }
}

#[derive(Default)]
struct State {
    script: Mutex<VecDeque<Reply>>,
    fallback: Mutex<Option<Reply>>,
    requests: Mutex<Vec<Recorded>>,
}

/// The server. Stops accepting when dropped.
pub(crate) struct TestServer {
    url: url::Url,
    state: Arc<State>,
    accept: JoinHandle<()>,
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

impl TestServer {
    /// Starts a server on an ephemeral port that answers with `replies`, in order.
    pub(crate) async fn start(replies: impl IntoIterator<Item = Reply>) -> Self {
        Self::start_with_prefix(replies, "").await
    }

    /// Like [`start`](Self::start), with a path prefix in the server URL.
    pub(crate) async fn start_with_prefix(
        replies: impl IntoIterator<Item = Reply>,
        prefix: &str,
    ) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(State::default());
        state.script.lock().unwrap().extend(replies);
        let accept_state = state.clone();
        let accept = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let state = accept_state.clone();
                tokio::spawn(async move {
                    let service = service_fn(move |req| handle(state.clone(), req));
                    // Errors are expected: Drop and Abort replies cut connections.
                    let _ = http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Self {
            url: format!("http://{addr}{prefix}").parse().unwrap(),
            state,
            accept,
        }
    }

    /// The server's URL.
    pub(crate) fn url(&self) -> url::Url {
        self.url.clone()
    }

    /// A client config for this server with client-go's defaults.
    pub(crate) fn config(&self) -> Config {
        Config::new(self.url())
    }

    /// The reply used once the script is exhausted (otherwise such a request fails the
    /// test with a 599).
    pub(crate) fn set_fallback(&self, reply: Reply) {
        *self.state.fallback.lock().unwrap() = Some(reply);
    }

    /// Every request so far.
    pub(crate) fn requests(&self) -> Vec<Recorded> {
        self.state.requests.lock().unwrap().clone()
    }

    /// The only request so far.
    pub(crate) fn single_request(&self) -> Recorded {
        let r = self.requests();
        assert_eq!(r.len(), 1, "expected exactly one request, got {r:#?}");
        r.into_iter().next().unwrap()
    }

    /// Replies not yet used.
    pub(crate) fn unused_replies(&self) -> usize {
        self.state.script.lock().unwrap().len()
    }
}

type Body = BoxBody<Bytes, io::Error>;

async fn handle(state: Arc<State>, req: Request<Incoming>) -> Result<Response<Body>, io::Error> {
    let (parts, body) = req.into_parts();
    let body = body.collect().await.map_err(io::Error::other)?.to_bytes();
    state.requests.lock().unwrap().push(Recorded {
        method: parts.method.to_string(),
        path: parts.uri.path().to_owned(),
        query: parts.uri.query().map(str::to_owned),
        headers: parts.headers,
        body,
    });
    let reply = state
        .script
        .lock()
        .unwrap()
        .pop_front()
        .or_else(|| state.fallback.lock().unwrap().clone())
        .unwrap_or_else(|| Reply::text(599, "the test server has no reply scripted"));
    match reply {
        Reply::Full {
            status,
            headers,
            body,
        } => Ok(response(
            status,
            &headers,
            Full::new(body).map_err(|e: Infallible| match e {}).boxed(),
        )),
        Reply::Chunks {
            status,
            headers,
            chunks,
            then,
        } => {
            let data = futures::stream::iter(chunks).then(|chunk| async move {
                // Give the connection a chance to flush each chunk on its own.
                tokio::task::yield_now().await;
                Ok::<_, io::Error>(Frame::data(chunk))
            });
            let tail = futures::stream::once(async move {
                match then {
                    AfterChunks::End => None,
                    AfterChunks::Abort => {
                        tokio::task::yield_now().await;
                        Some(Err(io::Error::other("connection cut by the test server")))
                    }
                    AfterChunks::Hang => futures::future::pending().await,
                }
            })
            .filter_map(|x| async move { x });
            Ok(response(
                status,
                &headers,
                BodyExt::boxed(StreamBody::new(data.chain(tail))),
            ))
        }
        Reply::Drop => Err(io::Error::other("connection dropped by the test server")),
        Reply::Hang => futures::future::pending().await,
    }
}

fn response(status: u16, headers: &[(&'static str, String)], body: Body) -> Response<Body> {
    let mut resp = Response::new(body);
    *resp.status_mut() = StatusCode::from_u16(status).unwrap();
    for (name, value) in headers {
        resp.headers_mut().insert(
            HeaderName::from_static(name),
            HeaderValue::from_str(value).unwrap(),
        );
    }
    resp
}

/// One call to the metrics hook.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum MetricEvent {
    Result {
        code: String,
        method: String,
        host: String,
    },
    Retry {
        code: String,
        method: String,
        host: String,
    },
    Latency {
        verb: String,
        host: String,
    },
    RateLimiter {
        verb: String,
        host: String,
        latency: Duration,
    },
}

/// A metrics provider that records every call.
#[derive(Debug, Default)]
pub(crate) struct RecordingMetrics {
    events: Mutex<Vec<MetricEvent>>,
}

impl RecordingMetrics {
    pub(crate) fn events(&self) -> Vec<MetricEvent> {
        self.events.lock().unwrap().clone()
    }

    /// The `code` labels of `rest_client_requests_total` increments, in order.
    pub(crate) fn result_codes(&self) -> Vec<String> {
        self.events()
            .into_iter()
            .filter_map(|e| match e {
                MetricEvent::Result { code, .. } => Some(code),
                _ => None,
            })
            .collect()
    }

    /// The `code` labels of `rest_client_request_retries_total` increments, in order.
    pub(crate) fn retry_codes(&self) -> Vec<String> {
        self.events()
            .into_iter()
            .filter_map(|e| match e {
                MetricEvent::Retry { code, .. } => Some(code),
                _ => None,
            })
            .collect()
    }

    /// The rate-limiter waits observed.
    pub(crate) fn rate_limiter_waits(&self) -> Vec<Duration> {
        self.events()
            .into_iter()
            .filter_map(|e| match e {
                MetricEvent::RateLimiter { latency, .. } => Some(latency),
                _ => None,
            })
            .collect()
    }

    fn push(&self, e: MetricEvent) {
        self.events.lock().unwrap().push(e);
    }
}

impl RestClientMetrics for RecordingMetrics {
    fn observe_request_result(&self, code: &str, method: &str, host: &str) {
        self.push(MetricEvent::Result {
            code: code.into(),
            method: method.into(),
            host: host.into(),
        });
    }

    fn observe_request_retry(&self, code: &str, method: &str, host: &str) {
        self.push(MetricEvent::Retry {
            code: code.into(),
            method: method.into(),
            host: host.into(),
        });
    }

    fn observe_request_latency(&self, verb: &str, host: &str, _latency: Duration) {
        self.push(MetricEvent::Latency {
            verb: verb.into(),
            host: host.into(),
        });
    }

    fn observe_rate_limiter_latency(&self, verb: &str, host: &str, latency: Duration) {
        self.push(MetricEvent::RateLimiter {
            verb: verb.into(),
            host: host.into(),
            latency,
        });
    }
}

/// What a [`RawServer`] does with one connection.
#[derive(Clone, Copy, Debug)]
pub(crate) enum RawReply {
    /// Read the request, then reset the connection (TCP RST).
    Reset,
    /// Read the request, then write these bytes and close.
    Bytes(&'static [u8]),
}

/// A TCP-level server for failures hyper cannot script, such as a connection reset. Each
/// connection gets the next reply; it counts connections.
pub(crate) struct RawServer {
    url: url::Url,
    connections: Arc<Mutex<usize>>,
    accept: JoinHandle<()>,
}

impl Drop for RawServer {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

impl RawServer {
    pub(crate) async fn start(replies: Vec<RawReply>) -> Self {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let connections = Arc::new(Mutex::new(0));
        let counter = connections.clone();
        let accept = tokio::spawn(async move {
            let mut replies = replies.into_iter();
            loop {
                let Ok((mut stream, _)) = listener.accept().await else {
                    return;
                };
                *counter.lock().unwrap() += 1;
                let reply = replies.next();
                // Read the request head (requests here have no body).
                let mut head = Vec::new();
                let mut buf = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                match reply {
                    Some(RawReply::Reset) | None => {
                        stream.set_zero_linger().unwrap();
                        drop(stream);
                    }
                    Some(RawReply::Bytes(bytes)) => {
                        let _ = stream.write_all(bytes).await;
                        let _ = stream.shutdown().await;
                    }
                }
            }
        });
        Self {
            url: format!("http://{addr}").parse().unwrap(),
            connections,
            accept,
        }
    }

    pub(crate) fn url(&self) -> url::Url {
        self.url.clone()
    }

    pub(crate) fn connections(&self) -> usize {
        *self.connections.lock().unwrap()
    }
}

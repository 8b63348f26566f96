//! When to send a request again: client-go's retry rules as a small pure state machine.
//!
//! An attempt is retried when
//!
//! * the server answered **429 or any 5xx with an integer `Retry-After` header**: the server
//!   promises the request was not acted on and says how long to wait; or
//! * the request never got a complete answer and the failure is one a retry can cure:
//!   for reads (`GET`), a reset connection, a connection closed early (the EOF family) or a
//!   lost HTTP/2 connection; for watches, the EOF family or a timeout. Such failures count
//!   as a synthetic 500 with `Retry-After: 1`. Writes are never retried after a transport
//!   failure: the server may have acted on them.
//!
//! At most `max_retries` retries follow the first attempt (client-go's default: 10). Before
//! each retry the caller sleeps the `Retry-After` delay (at most [`MAX_RETRY_AFTER`], 60 s)
//! and then takes a rate-limiter token.

use std::error::Error as StdError;
use std::io;
use std::time::Duration;

use http::{HeaderMap, StatusCode};

/// client-go's default `Request.MaxRetries`.
pub(crate) const DEFAULT_MAX_RETRIES: u32 = 10;

/// The delay used for retryable transport failures (client-go's synthetic `Retry-After: 1`).
const TRANSPORT_RETRY_AFTER: Duration = Duration::from_secs(1);

/// The longest a server's `Retry-After` is obeyed: a larger value is waited as this long.
/// Without a cap a broken or hostile server (`Retry-After: 86400`) could park a request, and
/// the worker waiting on it, for as long as it likes; API Priority and Fairness asks for one
/// second or so. (client-go sleeps whatever the header says; a request timeout, when set,
/// still bounds the whole request either way.)
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(60);

/// The header in which API Priority and Fairness names the flow schema that rejected a
/// request; quoted in the retry reason of a 429.
const FLOW_SCHEMA_UID_HEADER: &str = "X-Kubernetes-PF-FlowSchema-UID";

/// What one attempt produced, as far as the retry policy cares.
#[derive(Debug)]
pub(crate) enum AttemptResult<'a> {
    /// The server answered.
    Response {
        /// Its status.
        status: StatusCode,
        /// Its headers (`Retry-After`).
        headers: &'a HeaderMap,
    },
    /// No complete answer arrived.
    TransportError {
        /// Whether this kind of failure may be retried for this request.
        retryable: bool,
        /// The failure, for the retry reason.
        message: &'a str,
    },
}

/// The decision to retry: how long to wait first, and why (for logs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct RetryAfter {
    /// Sleep this long before taking a rate-limiter token.
    pub(crate) wait: Duration,
    /// The number of the retry, from 1.
    pub(crate) attempt: u32,
    /// Human-readable reason.
    pub(crate) reason: String,
}

/// Counts attempts of one request and decides whether another may follow.
#[derive(Clone, Debug)]
pub(crate) struct Retrier {
    max_retries: u32,
    attempts: u32,
}

impl Retrier {
    pub(crate) fn new(max_retries: u32) -> Self {
        Self {
            max_retries,
            attempts: 0,
        }
    }

    /// Records a failed attempt and says whether and when to retry.
    pub(crate) fn is_next_retry(&mut self, result: &AttemptResult<'_>) -> Option<RetryAfter> {
        self.attempts += 1;
        if self.attempts > self.max_retries {
            return None;
        }
        match *result {
            AttemptResult::TransportError { retryable, message } => {
                if !retryable {
                    return None;
                }
                let wait = TRANSPORT_RETRY_AFTER;
                Some(RetryAfter {
                    wait,
                    attempt: self.attempts,
                    reason: format!(
                        "retry {} after {}s: retryable transport error: {message}",
                        self.attempts,
                        wait.as_secs()
                    ),
                })
            }
            AttemptResult::Response { status, headers } => {
                let asked = check_wait(status, headers)?;
                let seconds = asked.min(MAX_RETRY_AFTER.as_secs());
                let cause = if status == StatusCode::TOO_MANY_REQUESTS {
                    let uid = headers
                        .get(FLOW_SCHEMA_UID_HEADER)
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or("");
                    format!("server-side throttling (HTTP 429), flow schema UID {uid:?}")
                } else {
                    format!("HTTP {}", status.as_u16())
                };
                Some(RetryAfter {
                    wait: Duration::from_secs(seconds),
                    attempt: self.attempts,
                    reason: format!("retry {} after {seconds}s: {cause}", self.attempts),
                })
            }
        }
    }
}

/// Whether a response asks to be retried: 429 or 5xx with an integer `Retry-After`.
fn check_wait(status: StatusCode, headers: &HeaderMap) -> Option<u64> {
    if status == StatusCode::TOO_MANY_REQUESTS || status.is_server_error() {
        retry_after_seconds(headers)
    } else {
        None
    }
}

/// The `Retry-After` header as whole seconds. Only the integer form counts (an HTTP date
/// does not); a negative value means "now".
pub(crate) fn retry_after_seconds(headers: &HeaderMap) -> Option<u64> {
    let v = headers.get(http::header::RETRY_AFTER)?.to_str().ok()?;
    let n: i64 = v.parse().ok()?;
    Some(u64::try_from(n).unwrap_or(0))
}

/// Which request a transport failure happened to; decides what may be retried.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RequestKind {
    /// A non-watch `GET` (get, list, discovery): idempotent.
    Read,
    /// Opening a watch.
    Watch,
    /// POST, PUT, PATCH, DELETE: never retried after a transport failure.
    Write,
}

/// A transport failure sorted into the families client-go's retry rules name. Rust's HTTP
/// stack reports these as `io::Error` kinds somewhere in the source chain, or only in the
/// message of a hyper/h2 error; both are inspected, the way apimachinery's
/// `IsProbableEOF` inspects Go error strings.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct TransportFailure {
    /// The peer reset the connection.
    pub(crate) connection_reset: bool,
    /// The connection closed before the answer was complete ("probable EOF").
    pub(crate) probable_eof: bool,
    /// The HTTP/2 connection stopped answering pings.
    pub(crate) http2_connection_lost: bool,
    /// Something timed out.
    pub(crate) timeout: bool,
}

/// Message fragments (lower case) of hyper and h2 errors that carry no `io::Error`.
const EOF_PHRASES: &[&str] = &[
    "connection closed before message completed",
    "end of file before message length reached",
    "unexpected eof",
    "broken pipe",
    // An HTTP/2 GOAWAY from the server.
    "connection error received",
];

impl TransportFailure {
    /// Classifies an error by walking its source chain.
    pub(crate) fn classify(err: &(dyn StdError + 'static)) -> Self {
        let mut f = Self::default();
        let mut cur = Some(err);
        while let Some(e) = cur {
            if let Some(io) = e.downcast_ref::<io::Error>() {
                match io.kind() {
                    io::ErrorKind::ConnectionReset => f.connection_reset = true,
                    io::ErrorKind::UnexpectedEof
                    | io::ErrorKind::BrokenPipe
                    | io::ErrorKind::ConnectionAborted
                    | io::ErrorKind::NotConnected => f.probable_eof = true,
                    io::ErrorKind::TimedOut => f.timeout = true,
                    _ => {}
                }
            }
            if let Some(r) = e.downcast_ref::<reqwest::Error>()
                && r.is_timeout()
            {
                f.timeout = true;
            }
            let msg = e.to_string().to_ascii_lowercase();
            if msg.contains("connection reset") {
                f.connection_reset = true;
            }
            if EOF_PHRASES.iter().any(|p| msg.contains(p)) {
                f.probable_eof = true;
            }
            if msg.contains("keep-alive timed out") {
                f.http2_connection_lost = true;
            }
            if msg.contains("timed out") {
                f.timeout = true;
            }
            cur = e.source();
        }
        // A reset connection is also an EOF for the watch rule.
        f.probable_eof |= f.connection_reset;
        f
    }

    /// Whether a request of `kind` failing this way may be retried.
    pub(crate) fn retryable_for(self, kind: RequestKind) -> bool {
        match kind {
            RequestKind::Read => {
                self.connection_reset || self.probable_eof || self.http2_connection_lost
            }
            RequestKind::Watch => self.probable_eof || self.timeout || self.http2_connection_lost,
            RequestKind::Write => false,
        }
    }

    /// Whether the failure means the connection simply ended (or timed out), which ends a
    /// running watch stream quietly instead of as an error, as client-go's stream watcher
    /// does.
    pub(crate) fn ends_watch_quietly(self) -> bool {
        self.probable_eof || self.timeout || self.http2_connection_lost
    }
}

#[cfg(test)]
mod tests {
    use std::fmt;

    use http::HeaderValue;

    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_static(v));
        }
        h
    }

    fn response(status: u16, h: &HeaderMap) -> AttemptResult<'_> {
        AttemptResult::Response {
            status: StatusCode::from_u16(status).unwrap(),
            headers: h,
        }
    }

    #[test]
    fn retry_after_waits_are_capped() {
        let long = headers(&[("retry-after", "86400")]);
        let mut r = Retrier::new(3);
        let retry = r.is_next_retry(&response(503, &long)).unwrap();
        assert_eq!(retry.wait, MAX_RETRY_AFTER);
        assert_eq!(retry.reason, "retry 1 after 60s: HTTP 503");
        let just = headers(&[("retry-after", "60")]);
        let retry = r.is_next_retry(&response(429, &just)).unwrap();
        assert_eq!(retry.wait, Duration::from_secs(60));
    }

    // Port of client-go TestIsNextRetry.
    #[test]
    fn is_next_retry() {
        let retry_after_1 = headers(&[("retry-after", "1")]);
        let throttled = headers(&[
            ("retry-after", "2"),
            ("x-kubernetes-pf-flowschema-uid", "fs-1"),
        ]);
        let unavailable = headers(&[("retry-after", "3")]);
        let none = HeaderMap::new();
        let fake = AttemptResult::TransportError {
            retryable: true,
            message: "fake error",
        };

        // zero maximum retry
        let mut r = Retrier::new(0);
        assert_eq!(r.is_next_retry(&response(500, &retry_after_1)), None);

        // server returned a retryable error
        let mut r = Retrier::new(3);
        assert_eq!(
            r.is_next_retry(&fake),
            Some(RetryAfter {
                wait: Duration::from_secs(1),
                attempt: 1,
                reason: "retry 1 after 1s: retryable transport error: fake error".into(),
            })
        );

        // server returned a retryable HTTP 429 response
        let mut r = Retrier::new(3);
        assert_eq!(
            r.is_next_retry(&response(429, &throttled)),
            Some(RetryAfter {
                wait: Duration::from_secs(2),
                attempt: 1,
                reason:
                    r#"retry 1 after 2s: server-side throttling (HTTP 429), flow schema UID "fs-1""#
                        .into(),
            })
        );

        // server returned a retryable HTTP 5xx response
        let mut r = Retrier::new(3);
        assert_eq!(
            r.is_next_retry(&response(503, &unavailable)),
            Some(RetryAfter {
                wait: Duration::from_secs(3),
                attempt: 1,
                reason: "retry 1 after 3s: HTTP 503".into(),
            })
        );

        // server returned a response without a Retry-After header
        let mut r = Retrier::new(1);
        assert_eq!(r.is_next_retry(&response(429, &none)), None);

        // a transport error that is not retryable
        let mut r = Retrier::new(3);
        assert_eq!(
            r.is_next_retry(&AttemptResult::TransportError {
                retryable: false,
                message: "connection refused",
            }),
            None
        );

        // all retries are exhausted
        let mut r = Retrier::new(3);
        let got: Vec<Option<u32>> = (0..4)
            .map(|_| r.is_next_retry(&fake).map(|ra| ra.attempt))
            .collect();
        assert_eq!(got, vec![Some(1), Some(2), Some(3), None]);
    }

    // Port of client-go TestCheckRetryHandles429And5xx's status table, at the policy level
    // (the wire test sends it through a server).
    #[test]
    fn check_retry_handles_429_and_5xx() {
        let h = headers(&[("retry-after", "0")]);
        for code in [429, 500, 501, 503, 504] {
            let mut r = Retrier::new(10);
            assert!(r.is_next_retry(&response(code, &h)).is_some(), "{code}");
        }
        // {3xx, Retry-After} and 4xx other than 429 are final.
        for code in [301, 400, 404, 409] {
            let mut r = Retrier::new(10);
            assert!(r.is_next_retry(&response(code, &h)).is_none(), "{code}");
        }
    }

    #[test]
    fn retry_after_forms() {
        assert_eq!(
            retry_after_seconds(&headers(&[("retry-after", "7")])),
            Some(7)
        );
        assert_eq!(
            retry_after_seconds(&headers(&[("retry-after", "0")])),
            Some(0)
        );
        assert_eq!(
            retry_after_seconds(&headers(&[("retry-after", "-3")])),
            Some(0)
        );
        assert_eq!(
            retry_after_seconds(&headers(&[(
                "retry-after",
                "Wed, 21 Oct 2015 07:28:00 GMT"
            )])),
            None
        );
        assert_eq!(
            retry_after_seconds(&headers(&[("retry-after", "1.5")])),
            None
        );
        assert_eq!(retry_after_seconds(&HeaderMap::new()), None);
    }

    /// An error with a message and an optional source, like hyper's.
    #[derive(Debug)]
    struct Wrapped(&'static str, Option<Box<dyn StdError + Send + Sync>>);
    impl fmt::Display for Wrapped {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(self.0)
        }
    }
    impl StdError for Wrapped {
        fn source(&self) -> Option<&(dyn StdError + 'static)> {
            self.1.as_deref().map(|e| e as &(dyn StdError + 'static))
        }
    }

    fn outer(source: impl StdError + Send + Sync + 'static) -> Wrapped {
        Wrapped("error sending request", Some(Box::new(source)))
    }

    // Port of client-go TestRetryableConditions' transport-error rows: which failures are
    // retried for a read (Do/DoRaw) and for a watch, with the Rust-side shape of each.
    #[test]
    fn retryable_conditions() {
        use RequestKind::{Read, Watch, Write};
        let cases: Vec<(&str, Wrapped, bool, bool)> = vec![
            (
                "connection reset",
                outer(io::Error::from(io::ErrorKind::ConnectionReset)),
                true,
                true,
            ),
            (
                "EOF",
                outer(Wrapped("connection closed before message completed", None)),
                true,
                true,
            ),
            (
                "unexpected EOF",
                outer(io::Error::from(io::ErrorKind::UnexpectedEof)),
                true,
                true,
            ),
            (
                "broken connection",
                outer(io::Error::from(io::ErrorKind::BrokenPipe)),
                true,
                true,
            ),
            (
                "GOAWAY",
                outer(Wrapped(
                    "http2 error",
                    Some(Box::new(Wrapped(
                        "connection error received: not a result of an error",
                        None,
                    ))),
                )),
                true,
                true,
            ),
            (
                "connection reset by peer text",
                outer(Wrapped("Connection reset by peer (os error 104)", None)),
                true,
                true,
            ),
            (
                "closed network connection",
                outer(io::Error::from(io::ErrorKind::ConnectionAborted)),
                true,
                true,
            ),
            (
                "http2 connection lost",
                outer(Wrapped(
                    "http2 error",
                    Some(Box::new(Wrapped("keep-alive timed out", None))),
                )),
                true,
                true,
            ),
            (
                "connection refused",
                outer(io::Error::from(io::ErrorKind::ConnectionRefused)),
                false,
                false,
            ),
            // Timeouts are retried by watch only.
            (
                "timeout",
                outer(io::Error::from(io::ErrorKind::TimedOut)),
                false,
                true,
            ),
            (
                "invalid certificate",
                outer(Wrapped("invalid peer certificate: UnknownIssuer", None)),
                false,
                false,
            ),
        ];
        for (name, err, read, watch) in cases {
            let f = TransportFailure::classify(&err);
            assert_eq!(f.retryable_for(Read), read, "{name} (read): {f:?}");
            assert_eq!(f.retryable_for(Watch), watch, "{name} (watch): {f:?}");
            assert!(!f.retryable_for(Write), "{name} (write)");
        }
    }

    // Port of client-go TestRequestWithRetry's transport rows at the policy level: a
    // retryable failure is retried once with max_retries 1, then given up.
    #[test]
    fn request_with_retry() {
        let eof = outer(io::Error::from(io::ErrorKind::UnexpectedEof));
        let f = TransportFailure::classify(&eof);
        let msg = eof.to_string();
        let result = AttemptResult::TransportError {
            retryable: f.retryable_for(RequestKind::Read),
            message: &msg,
        };
        let mut r = Retrier::new(1);
        assert!(r.is_next_retry(&result).is_some());
        assert!(r.is_next_retry(&result).is_none());
    }
}

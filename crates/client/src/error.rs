//! Errors from the client, with the API server's `Status` decoded into [`ApiError`].
//!
//! Classifiers follow apimachinery's `errors` package: a known `reason` in the Status decides;
//! when the reason is missing or unknown, the HTTP code decides. So a bare 404 from a proxy is
//! still "not found", but a 404 with reason `Gone` is not.

use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Status, StatusDetails};

use crate::resource::ResourceRef;

/// Any error from a client call.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The API server answered with a failure `Status` (or an HTTP error with no Status body).
    #[error(transparent)]
    Api(Box<ApiError>),
    /// The request never got an HTTP answer: connection refused or reset, TLS failure, DNS...
    #[error("{verb} {url}: {source}")]
    Transport {
        /// HTTP method.
        verb: String,
        /// Full request URL.
        url: String,
        /// The underlying failure.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The request did not finish within the configured timeout.
    #[error("{verb} {url}: timed out after {after:?}")]
    Timeout {
        /// HTTP method.
        verb: String,
        /// Full request URL.
        url: String,
        /// The timeout that expired.
        after: std::time::Duration,
    },
    /// A response body could not be decoded.
    #[error("decoding {what}: {source}")]
    Decode {
        /// What was being decoded, e.g. `Deployment from GET .../deployments/web`.
        what: String,
        /// The JSON error, with line and column.
        #[source]
        source: serde_json::Error,
    },
    /// A protobuf response body (see [`crate::protobuf`]) could not be decoded.
    #[error("decoding {what} (protobuf): {source}")]
    DecodeProtobuf {
        /// What was being decoded, e.g. `object of ADDED watch event`.
        what: String,
        /// The protobuf error.
        #[source]
        source: crate::protobuf::ProtobufError,
    },
    /// The client configuration or credentials are unusable.
    #[error(transparent)]
    Config(#[from] kctrl_config::ConfigError),
    /// The request cannot be sent as asked (for example, a namespaced get with no namespace).
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    /// A response body was larger than the client reads
    /// ([`HttpBackend::with_max_body_size`](crate::HttpBackend::with_max_body_size) for
    /// successful responses, [`MAX_ERROR_BODY_SIZE`](crate::MAX_ERROR_BODY_SIZE) for failures).
    #[error("{what}: the response body exceeds the limit of {limit} bytes")]
    BodyTooLarge {
        /// Which body, e.g. `body of the HTTP 200 response to GET https://.../pods`.
        what: String,
        /// The limit, in bytes.
        limit: usize,
    },
    /// The client-side rate limit cannot be built: the QPS is so small for its burst that
    /// refilling the token bucket would take a century or more.
    #[error(
        "QPS {qps:?} with burst {burst} is too small for the client-side rate limiter (a full \
         refill would take a century or more); use a larger QPS, or a negative QPS \
         to turn client-side rate limiting off"
    )]
    InvalidRateLimit {
        /// The configured QPS.
        qps: f32,
        /// The configured burst (after defaulting).
        burst: u32,
    },
    /// The request was retried and its last attempt failed too. Classifiers
    /// ([`Error::is_not_found`], [`Error::status`], ...) look through to `last`.
    #[error(
        "{last} (after {attempts} attempt{}){}",
        if *.attempts == 1 { "" } else { "s" },
        previous_suffix(.previous.as_deref())
    )]
    Retried {
        /// How many attempts were made.
        attempts: u32,
        /// The error of the last attempt.
        #[source]
        last: Box<Error>,
        /// The error of the attempt before it, when it was a different one.
        previous: Option<Box<Error>>,
    },
}

fn previous_suffix(previous: Option<&Error>) -> String {
    previous
        .map(|p| format!(" - error from a previous attempt: {p}"))
        .unwrap_or_default()
}

impl Error {
    /// The API error, if the server answered with one.
    pub fn api_error(&self) -> Option<&ApiError> {
        match self {
            Error::Api(e) => Some(e),
            Error::Retried { last, .. } => last.api_error(),
            _ => None,
        }
    }

    /// The server's `Status`, if it answered with one.
    pub fn status(&self) -> Option<&Status> {
        self.api_error().map(|e| &e.status)
    }

    /// 404 / reason `NotFound`.
    pub fn is_not_found(&self) -> bool {
        self.api_error().is_some_and(ApiError::is_not_found)
    }

    /// 409 / reason `Conflict`: a stale resourceVersion or failed precondition.
    pub fn is_conflict(&self) -> bool {
        self.api_error().is_some_and(ApiError::is_conflict)
    }

    /// Reason `AlreadyExists`: a create found the name taken.
    pub fn is_already_exists(&self) -> bool {
        self.api_error().is_some_and(ApiError::is_already_exists)
    }

    /// 410 / reason `Gone` or `Expired`: the requested resourceVersion was compacted.
    pub fn is_gone(&self) -> bool {
        self.api_error().is_some_and(ApiError::is_gone)
    }

    /// 422 / reason `Invalid`: the object failed validation.
    pub fn is_invalid(&self) -> bool {
        self.api_error().is_some_and(ApiError::is_invalid)
    }

    /// 403 / reason `Forbidden`.
    pub fn is_forbidden(&self) -> bool {
        self.api_error().is_some_and(ApiError::is_forbidden)
    }

    /// 401 / reason `Unauthorized`.
    pub fn is_unauthorized(&self) -> bool {
        self.api_error().is_some_and(ApiError::is_unauthorized)
    }

    /// 429 / reason `TooManyRequests`.
    pub fn is_too_many_requests(&self) -> bool {
        self.api_error().is_some_and(ApiError::is_too_many_requests)
    }

    /// Whether the error is a transport failure (no HTTP answer at all).
    pub fn is_transport(&self) -> bool {
        match self {
            Error::Transport { .. } | Error::Timeout { .. } => true,
            Error::Retried { last, .. } => last.is_transport(),
            _ => false,
        }
    }
}

impl From<ApiError> for Error {
    fn from(e: ApiError) -> Self {
        Error::Api(Box::new(e))
    }
}

/// A failure `Status` from the API server, with the HTTP code it came with.
#[derive(Clone, Debug, PartialEq)]
pub struct ApiError {
    /// HTTP status code of the response (or `status.code` for watch ERROR events).
    pub code: u16,
    /// The decoded Status; synthesised from the code and body when the server sent none.
    pub status: Status,
}

/// The reasons apimachinery knows; an unknown or empty reason falls back to the HTTP code.
const KNOWN_REASONS: &[&str] = &[
    "Unauthorized",
    "Forbidden",
    "NotFound",
    "AlreadyExists",
    "Conflict",
    "Gone",
    "Invalid",
    "ServerTimeout",
    "StoreReadError",
    "Timeout",
    "TooManyRequests",
    "BadRequest",
    "MethodNotAllowed",
    "NotAcceptable",
    "RequestEntityTooLarge",
    "UnsupportedMediaType",
    "InternalError",
    "Expired",
    "ServiceUnavailable",
];

impl ApiError {
    /// An error from a Status. The code is taken from the Status, else `http_code`.
    pub fn from_status(http_code: u16, status: Status) -> Self {
        let code = status
            .code
            .and_then(|c| u16::try_from(c).ok())
            .filter(|c| *c != 0)
            .unwrap_or(http_code);
        Self { code, status }
    }

    /// An error for a response whose body is not a Status: the body (truncated) becomes the
    /// message, the way client-go reports unexpected responses.
    pub fn from_body(http_code: u16, body: &[u8]) -> Self {
        const MAX: usize = 1024;
        let text = String::from_utf8_lossy(&body[..body.len().min(MAX)]);
        let message = if text.trim().is_empty() {
            format!("the server responded with HTTP {http_code} and no body")
        } else {
            format!(
                "the server responded with HTTP {http_code}: {}",
                text.trim()
            )
        };
        let status = Status {
            status: Some("Failure".to_owned()),
            code: Some(i32::from(http_code)),
            reason: Some(reason_for_code(http_code).to_owned()),
            message: Some(message),
            ..Default::default()
        };
        Self {
            code: http_code,
            status,
        }
    }

    /// The 404 for a request about a resource the server does not serve at all (rather than
    /// about one object that does not exist): a custom resource whose
    /// CustomResourceDefinition is not installed, an API the server's release lacks. The
    /// message names the resource and the likely cause, and ends with what the server said:
    ///
    /// ```
    /// use kctrl_client::{ApiError, ResourceRef, Scope};
    ///
    /// let foos = ResourceRef::new("samplecontroller.k8s.io", "v1alpha1", "foos", "Foo", Scope::Namespaced);
    /// let e = ApiError::resource_not_served(&foos, "404 page not found");
    /// assert_eq!(
    ///     e.to_string(),
    ///     "foos.samplecontroller.k8s.io: the server has no such resource - is its \
    ///      CustomResourceDefinition installed? (404 page not found)"
    /// );
    /// assert!(kctrl_client::Error::from(e).is_not_found());
    /// ```
    pub fn resource_not_served(resource: &ResourceRef, server_said: &str) -> Self {
        let hint = if is_builtin_group(&resource.group) {
            "is this API served by the server's Kubernetes release?"
        } else {
            "is its CustomResourceDefinition installed?"
        };
        let mut message = format!(
            "{}: the server has no such resource - {hint}",
            resource.qualified_name()
        );
        let said = server_said.trim();
        if !said.is_empty() {
            message.push_str(&format!(" ({said})"));
        }
        Self {
            code: 404,
            status: Status {
                status: Some("Failure".to_owned()),
                code: Some(404),
                reason: Some("NotFound".to_owned()),
                message: Some(message),
                details: Some(StatusDetails {
                    group: (!resource.group.is_empty()).then(|| resource.group.to_string()),
                    kind: Some(resource.plural.to_string()),
                    ..Default::default()
                }),
                ..Default::default()
            },
        }
    }

    /// Whether this 404 says the requested resource is not served at all: the server sent
    /// no Status (kube-apiserver's bare `404 page not found` for an API group it does not
    /// have), or its generic "the server could not find the requested resource" without an
    /// object's name (a group it has, without this resource).
    pub(crate) fn means_resource_not_served(&self) -> bool {
        if self.code != 404 || self.reason() != "NotFound" {
            return false;
        }
        let named = self
            .status
            .details
            .as_ref()
            .and_then(|d| d.name.as_deref())
            .is_some_and(|n| !n.is_empty());
        !named
            && (self
                .message()
                .starts_with("the server responded with HTTP 404")
                || self.message() == "the server could not find the requested resource")
    }

    /// The Status reason, or "" if none.
    pub fn reason(&self) -> &str {
        self.status.reason.as_deref().unwrap_or("")
    }

    /// The Status message, or "" if none.
    pub fn message(&self) -> &str {
        self.status.message.as_deref().unwrap_or("")
    }

    /// `details.retryAfterSeconds`, when the server suggested a delay.
    pub fn retry_after_seconds(&self) -> Option<u32> {
        self.status
            .details
            .as_ref()
            .and_then(|d| d.retry_after_seconds)
            .and_then(|s| u32::try_from(s).ok())
    }

    fn matches(&self, reason: &str, code: u16) -> bool {
        let r = self.reason();
        r == reason || (!KNOWN_REASONS.contains(&r) && self.code == code)
    }

    /// 404 / reason `NotFound`.
    pub fn is_not_found(&self) -> bool {
        self.matches("NotFound", 404)
    }

    /// 409 / reason `Conflict`.
    pub fn is_conflict(&self) -> bool {
        self.matches("Conflict", 409)
    }

    /// Reason `AlreadyExists` (there is no code fallback: 409 alone means Conflict).
    pub fn is_already_exists(&self) -> bool {
        self.reason() == "AlreadyExists"
    }

    /// 410 / reason `Gone` or `Expired`.
    pub fn is_gone(&self) -> bool {
        self.matches("Gone", 410) || self.reason() == "Expired"
    }

    /// 422 / reason `Invalid`.
    pub fn is_invalid(&self) -> bool {
        self.matches("Invalid", 422)
    }

    /// 403 / reason `Forbidden`.
    pub fn is_forbidden(&self) -> bool {
        self.matches("Forbidden", 403)
    }

    /// 401 / reason `Unauthorized`.
    pub fn is_unauthorized(&self) -> bool {
        self.matches("Unauthorized", 401)
    }

    /// 429 / reason `TooManyRequests`.
    pub fn is_too_many_requests(&self) -> bool {
        self.matches("TooManyRequests", 429)
    }
}

impl fmt::Display for ApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let msg = self.message();
        if msg.is_empty() {
            write!(f, "the server responded with HTTP {}", self.code)?;
            if !self.reason().is_empty() {
                write!(f, " ({})", self.reason())?;
            }
            Ok(())
        } else {
            f.write_str(msg)
        }
    }
}

impl std::error::Error for ApiError {}

/// The API groups Kubernetes serves itself (1.33 to 1.37); any other group is a custom
/// resource's or an aggregated API's.
fn is_builtin_group(group: &str) -> bool {
    const BUILTIN: &[&str] = &[
        "",
        "apps",
        "autoscaling",
        "batch",
        "policy",
        "admissionregistration.k8s.io",
        "apiextensions.k8s.io",
        "apiregistration.k8s.io",
        "authentication.k8s.io",
        "authorization.k8s.io",
        "certificates.k8s.io",
        "coordination.k8s.io",
        "discovery.k8s.io",
        "events.k8s.io",
        "flowcontrol.apiserver.k8s.io",
        "internal.apiserver.k8s.io",
        "networking.k8s.io",
        "node.k8s.io",
        "rbac.authorization.k8s.io",
        "resource.k8s.io",
        "scheduling.k8s.io",
        "storage.k8s.io",
        "storagemigration.k8s.io",
    ];
    BUILTIN.contains(&group)
}

/// The reason apimachinery assigns to an HTTP code when the body carries no Status.
fn reason_for_code(code: u16) -> &'static str {
    match code {
        400 => "BadRequest",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "NotFound",
        405 => "MethodNotAllowed",
        406 => "NotAcceptable",
        409 => "Conflict",
        410 => "Gone",
        413 => "RequestEntityTooLarge",
        415 => "UnsupportedMediaType",
        422 => "Invalid",
        429 => "TooManyRequests",
        500 => "InternalError",
        503 => "ServiceUnavailable",
        504 => "Timeout",
        _ => "",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(code: u16, reason: &str) -> Error {
        ApiError::from_status(
            code,
            Status {
                reason: (!reason.is_empty()).then(|| reason.to_owned()),
                ..Default::default()
            },
        )
        .into()
    }

    #[test]
    fn reason_decides_when_known() {
        assert!(err(404, "NotFound").is_not_found());
        // A known, different reason wins over the code.
        assert!(!err(404, "Gone").is_not_found());
        assert!(err(404, "Gone").is_gone());
        assert!(err(409, "AlreadyExists").is_already_exists());
        assert!(!err(409, "AlreadyExists").is_conflict());
        assert!(err(409, "Conflict").is_conflict());
        assert!(err(410, "Expired").is_gone());
        assert!(err(422, "Invalid").is_invalid());
        assert!(err(403, "Forbidden").is_forbidden());
        assert!(err(429, "TooManyRequests").is_too_many_requests());
    }

    #[test]
    fn code_decides_when_reason_missing_or_unknown() {
        assert!(err(404, "").is_not_found());
        assert!(err(404, "SomethingNew").is_not_found());
        assert!(err(410, "").is_gone());
        assert!(err(409, "").is_conflict());
        assert!(!err(409, "").is_already_exists());
        assert!(err(429, "").is_too_many_requests());
        assert!(!err(500, "").is_not_found());
    }

    #[test]
    fn status_code_overrides_http_code() {
        let e = ApiError::from_status(
            200,
            Status {
                code: Some(410),
                reason: Some("Expired".into()),
                message: Some("too old resource version: 1 (5)".into()),
                ..Default::default()
            },
        );
        assert_eq!(e.code, 410);
        assert_eq!(e.to_string(), "too old resource version: 1 (5)");
    }

    #[test]
    fn body_without_status_is_reported_with_code() {
        let e = ApiError::from_body(503, b"upstream connect error");
        assert_eq!(e.reason(), "ServiceUnavailable");
        assert!(e.to_string().contains("HTTP 503"));
        assert!(e.to_string().contains("upstream connect error"));
        let e = ApiError::from_body(404, b"");
        assert!(Error::from(e).is_not_found());
    }

    #[test]
    fn retried_errors_classify_by_their_last_attempt() {
        let e = Error::Retried {
            attempts: 3,
            last: Box::new(err(404, "NotFound")),
            previous: Some(Box::new(Error::InvalidRequest("first".into()))),
        };
        assert!(e.is_not_found());
        assert!(!e.is_transport());
        assert!(e.to_string().ends_with(
            "(after 3 attempts) - error from a previous attempt: invalid request: first"
        ));
    }

    #[test]
    fn a_resource_not_served_is_told_from_a_missing_object() {
        use crate::Scope;
        let bare = ApiError::from_body(404, b"404 page not found\n");
        assert!(bare.means_resource_not_served());
        let generic = ApiError::from_status(
            404,
            Status {
                reason: Some("NotFound".into()),
                message: Some("the server could not find the requested resource".into()),
                details: Some(StatusDetails::default()),
                ..Default::default()
            },
        );
        assert!(generic.means_resource_not_served());
        let object = ApiError::from_status(
            404,
            Status {
                reason: Some("NotFound".into()),
                message: Some("foos.samplecontroller.k8s.io \"a\" not found".into()),
                details: Some(StatusDetails {
                    name: Some("a".into()),
                    ..Default::default()
                }),
                ..Default::default()
            },
        );
        assert!(!object.means_resource_not_served());
        assert!(!ApiError::from_body(500, b"404 page not found").means_resource_not_served());

        let foos = ResourceRef::new(
            "samplecontroller.k8s.io",
            "v1alpha1",
            "foos",
            "Foo",
            Scope::Namespaced,
        );
        let e = ApiError::resource_not_served(&foos, bare.message());
        assert_eq!(
            e.to_string(),
            "foos.samplecontroller.k8s.io: the server has no such resource - is its \
             CustomResourceDefinition installed? (the server responded with HTTP 404: 404 page not found)"
        );
        assert_eq!(
            e.status.details.as_ref().unwrap().kind.as_deref(),
            Some("foos")
        );
        let jobs = ResourceRef::new("batch", "v2", "jobs", "Job", Scope::Namespaced);
        assert_eq!(
            ApiError::resource_not_served(&jobs, "").to_string(),
            "jobs.batch: the server has no such resource - is this API served by the server's Kubernetes release?"
        );
    }

    #[test]
    fn non_api_errors_are_not_classified() {
        let e = Error::InvalidRequest("x".into());
        assert!(!e.is_not_found());
        assert!(e.status().is_none());
        assert!(!e.is_transport());
    }
}

//! Answering one request: the health and metrics paths, and the reviews, decoded, checked
//! and handed to their handler.

use bytes::Bytes;
use futures::FutureExt as _;
use http::header::{CONTENT_TYPE, HeaderValue};
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use serde::de::DeserializeOwned;
use tracing::{debug, info, warn};

use super::{CONVERSION_PATH, State};
use crate::review::{
    ADMISSION_API_VERSION, AdmissionReview, CONVERSION_API_VERSION, ConversionResponse,
    ConversionReview,
};

/// A plain-text answer.
fn text(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

/// A JSON answer.
fn json<T: serde::Serialize>(body: &T) -> Response<Full<Bytes>> {
    match serde_json::to_vec(body) {
        Ok(bytes) => {
            let mut response = Response::new(Full::new(Bytes::from(bytes)));
            response
                .headers_mut()
                .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
            response
        }
        Err(e) => text(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("encoding the answer: {e}\n"),
        ),
    }
}

/// Answers one request by its method and path.
pub(super) async fn route(state: &State, request: Request<Incoming>) -> Response<Full<Bytes>> {
    let path = request.uri().path().to_owned();
    let method = request.method().clone();
    match (&method, path.as_str()) {
        (&Method::GET, "/healthz" | "/readyz") => text(StatusCode::OK, "ok".to_owned()),
        (&Method::GET, "/metrics") => match &state.registry {
            Some(registry) => {
                let mut body = String::new();
                match prometheus_client::encoding::text::encode(&mut body, registry) {
                    Ok(()) => {
                        let mut r = text(StatusCode::OK, body);
                        r.headers_mut().insert(
                            CONTENT_TYPE,
                            HeaderValue::from_static(
                                "application/openmetrics-text; version=1.0.0; charset=utf-8",
                            ),
                        );
                        r
                    }
                    Err(e) => text(
                        StatusCode::INTERNAL_SERVER_ERROR,
                        format!("encoding the metrics: {e}\n"),
                    ),
                }
            }
            None => text(
                StatusCode::NOT_FOUND,
                "the metrics are served elsewhere\n".to_owned(),
            ),
        },
        (&Method::POST, p)
            if state.admission.contains_key(p)
                || (p == CONVERSION_PATH && !state.conversions.is_empty()) =>
        {
            let _in_flight = state.metrics.start(p);
            let response = match tokio::time::timeout(
                state.request_timeout,
                review(state, p, request),
            )
            .await
            {
                Ok(r) => r,
                Err(_) => text(
                    StatusCode::SERVICE_UNAVAILABLE,
                    format!("no answer within {:?}\n", state.request_timeout),
                ),
            };
            state.metrics.answered(p, response.status().as_u16());
            response
        }
        (_, CONVERSION_PATH) if state.conversions.is_empty() => text(
            StatusCode::NOT_FOUND,
            format!("{CONVERSION_PATH} not found: this server converts no kind\n"),
        ),
        (_, p) if state.admission.contains_key(p) || p == CONVERSION_PATH => text(
            StatusCode::METHOD_NOT_ALLOWED,
            format!("{p} takes POST requests of the API server\n"),
        ),
        _ => text(
            StatusCode::NOT_FOUND,
            format!(
                "{path} not found; webhooks are at {}\n",
                state
                    .admission
                    .keys()
                    .map(String::as_str)
                    .chain((!state.conversions.is_empty()).then_some(CONVERSION_PATH))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ),
    }
}

/// Why a review request is refused before any handler sees it.
fn bad_request(path: &str, message: String) -> Response<Full<Bytes>> {
    warn!(webhook = %path, %message, "bad webhook request");
    text(StatusCode::BAD_REQUEST, format!("{message}\n"))
}

/// Decodes a review, or says what is wrong with it: not JSON, or another
/// kind or version than `kind` of `api_version` (`head` gives the review's).
fn decode<T: DeserializeOwned>(
    body: &[u8],
    kind: &str,
    api_version: &str,
    head: impl Fn(&T) -> (&String, &String),
) -> Result<T, String> {
    let review: T =
        serde_json::from_slice(body).map_err(|e| format!("decoding the {kind}: {e}"))?;
    let (got_kind, got_version) = head(&review);
    if got_kind != kind || got_version != api_version {
        let article = if kind.starts_with('A') { "an" } else { "a" };
        let field = if kind == "AdmissionReview" {
            "admissionReviewVersions"
        } else {
            "conversionReviewVersions"
        };
        return Err(format!(
            "expected {article} {kind} of {api_version}, got kind {got_kind:?} of apiVersion {got_version:?} ({field} must be [\"v1\"])"
        ));
    }
    Ok(review)
}

/// Reads, decodes and answers an admission or conversion review.
async fn review(state: &State, path: &str, request: Request<Incoming>) -> Response<Full<Bytes>> {
    let content_type = request
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    if content_type.split(';').next().map(str::trim) != Some("application/json") {
        return bad_request(
            path,
            format!("the content type is {content_type:?}; webhooks take application/json"),
        );
    }
    let body = match Limited::new(request.into_body(), state.max_body_bytes)
        .collect()
        .await
    {
        Ok(b) => b.to_bytes(),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => {
            return text(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!(
                    "the request body is larger than {} bytes\n",
                    state.max_body_bytes
                ),
            );
        }
        Err(e) => return bad_request(path, format!("reading the request body: {e}")),
    };
    if body.is_empty() {
        return bad_request(path, "the request body is empty".to_owned());
    }
    if path == CONVERSION_PATH {
        return conversion(state, path, &body);
    }
    let Some(webhook) = state.admission.get(path) else {
        return text(StatusCode::NOT_FOUND, format!("{path} not found\n"));
    };
    let review: AdmissionReview = match decode(
        &body,
        "AdmissionReview",
        ADMISSION_API_VERSION,
        |r: &AdmissionReview| (&r.kind, &r.api_version),
    ) {
        Ok(r) => r,
        Err(message) => return bad_request(path, message),
    };
    let Some(request) = review.request else {
        return bad_request(path, "the AdmissionReview has no request".to_owned());
    };
    // A panicking handler refuses the request (500) instead of dropping the connection.
    let handled = std::panic::AssertUnwindSafe(webhook.handler.handle(&request))
        .catch_unwind()
        .await;
    let mut response = handled.unwrap_or_else(|panic| {
        let why = panic_message(panic.as_ref());
        state.metrics.panicked();
        tracing::error!(
            webhook = %webhook.name,
            namespace = request.namespace.as_deref().unwrap_or_default(),
            name = request.name.as_deref().unwrap_or_default(),
            panic = %why,
            "the admission handler panicked"
        );
        crate::admission::errored(500, format!("the webhook's handler panicked: {why}"))
    });
    response.uid = request.uid.clone();
    let namespace = request.namespace.as_deref().unwrap_or_default();
    let name = request.name.as_deref().unwrap_or_default();
    debug!(
        webhook = %webhook.name,
        %namespace,
        %name,
        operation = request.operation.as_str(),
        allowed = response.allowed,
        patched = response.patch.is_some(),
        "admission request answered"
    );
    if !response.allowed {
        info!(
            webhook = %webhook.name,
            %namespace,
            %name,
            operation = request.operation.as_str(),
            message = response.status.as_ref().and_then(|s| s.message.as_deref()).unwrap_or_default(),
            "admission request refused"
        );
    }
    json(&AdmissionReview::answer(response))
}

/// The text of a panic's payload.
fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(no message)".to_owned())
}

/// Answers a conversion review.
fn conversion(state: &State, path: &str, body: &[u8]) -> Response<Full<Bytes>> {
    let review: ConversionReview = match decode(
        body,
        "ConversionReview",
        CONVERSION_API_VERSION,
        |r: &ConversionReview| (&r.kind, &r.api_version),
    ) {
        Ok(r) => r,
        Err(message) => return bad_request(path, message),
    };
    let Some(request) = review.request else {
        return bad_request(path, "the ConversionReview has no request".to_owned());
    };
    let (count, desired) = (request.objects.len(), request.desired_api_version.clone());
    let uid = request.uid.clone();
    let response = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        state.conversions.handle(request)
    }))
    .unwrap_or_else(|panic| {
        let why = panic_message(panic.as_ref());
        state.metrics.conversion_panicked();
        tracing::error!(panic = %why, "a conversion panicked");
        ConversionResponse::failure(uid, format!("the conversion panicked: {why}"))
    });
    debug!(objects = count, desired_api_version = %desired, result = ?response.result.status, "conversion request answered");
    json(&ConversionReview::answer(response))
}

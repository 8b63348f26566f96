//! What a response means: failure `Status` decoding and content-type checks.
//!
//! Only JSON is spoken: requests send `Accept: application/json`, and a watch whose
//! response is not JSON is refused. (Protobuf, which kube-controller-manager prefers for
//! built-in types, is out of scope.)

use http::{HeaderMap, StatusCode};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Status, StatusDetails};
use serde::Deserialize;

use super::retry::retry_after_seconds;
use crate::error::ApiError;

/// The only media type this client reads and writes.
pub(crate) const JSON: &str = "application/json";

/// The error for a non-2xx response: the body's `Status` if it is one, else a Status
/// synthesised from the code and body. A `Retry-After` header on a 429/5xx without a
/// Status is kept as `details.retryAfterSeconds`, as client-go does.
pub(crate) fn error_from_response(
    status: StatusCode,
    headers: &HeaderMap,
    body: &[u8],
) -> ApiError {
    let code = status.as_u16();
    if let Some(s) = decode_status(body) {
        return ApiError::from_status(code, s);
    }
    let mut err = ApiError::from_body(code, body);
    if (status == StatusCode::TOO_MANY_REQUESTS || status.is_server_error())
        && let Some(secs) = retry_after_seconds(headers)
    {
        err.status.details = Some(StatusDetails {
            retry_after_seconds: Some(i32::try_from(secs).unwrap_or(i32::MAX)),
            ..Default::default()
        });
    }
    err
}

/// The body as a `Status`, if it is one (`"kind": "Status"`).
fn decode_status(body: &[u8]) -> Option<Status> {
    #[derive(Deserialize)]
    struct Kind {
        kind: Option<String>,
    }
    let kind: Kind = serde_json::from_slice(body).ok()?;
    if kind.kind.as_deref() != Some("Status") {
        return None;
    }
    serde_json::from_slice(body).ok()
}

/// Checks that a watch response is a JSON stream: `application/json`, with or without
/// parameters such as `;stream=watch`. A missing Content-Type is taken as JSON, the type
/// that was asked for (client-go falls back to the request's content type too).
pub(crate) fn check_watch_content_type(headers: &HeaderMap) -> Result<(), String> {
    let Some(value) = headers.get(http::header::CONTENT_TYPE) else {
        return Ok(());
    };
    let text = String::from_utf8_lossy(value.as_bytes());
    let media = text.split(';').next().unwrap_or("").trim();
    if media.is_empty() || media.eq_ignore_ascii_case(JSON) {
        Ok(())
    } else {
        Err(format!(
            "the watch response has content type {text:?}; only {JSON} watch streams are supported"
        ))
    }
}

#[cfg(test)]
mod tests {
    use http::HeaderValue;

    use super::*;

    fn status_body(code: u16, reason: &str, message: &str) -> Vec<u8> {
        serde_json::to_vec(&serde_json::json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {},
            "status": "Failure", "message": message, "reason": reason, "code": code,
        }))
        .unwrap()
    }

    #[test]
    fn status_bodies_are_decoded() {
        let h = HeaderMap::new();
        let e = error_from_response(
            StatusCode::NOT_FOUND,
            &h,
            &status_body(404, "NotFound", r#"pods "x" not found"#),
        );
        assert_eq!(e.code, 404);
        assert!(e.is_not_found());
        assert_eq!(e.message(), r#"pods "x" not found"#);
        let e = error_from_response(
            StatusCode::CONFLICT,
            &h,
            &status_body(409, "AlreadyExists", "exists"),
        );
        assert!(e.is_already_exists());
        assert!(!e.is_conflict());
    }

    #[test]
    fn non_status_bodies_are_reported_with_the_code() {
        let mut h = HeaderMap::new();
        // A JSON object that is not a Status is not mistaken for one.
        let e = error_from_response(StatusCode::NOT_FOUND, &h, br#"{"kind":"Pod"}"#);
        assert!(e.is_not_found());
        assert!(e.message().contains(r#"{"kind":"Pod"}"#));
        let e = error_from_response(StatusCode::BAD_GATEWAY, &h, b"<html>bad gateway</html>");
        assert_eq!(e.code, 502);
        assert!(e.message().contains("bad gateway"));
        assert_eq!(e.retry_after_seconds(), None);
        h.insert("retry-after", HeaderValue::from_static("4"));
        let e = error_from_response(StatusCode::TOO_MANY_REQUESTS, &h, b"slow down");
        assert!(e.is_too_many_requests());
        assert_eq!(e.retry_after_seconds(), Some(4));
    }

    #[test]
    fn watch_content_types() {
        let mut h = HeaderMap::new();
        assert!(check_watch_content_type(&h).is_ok());
        for ok in [
            "application/json",
            "application/json;stream=watch",
            "Application/JSON; charset=utf-8",
        ] {
            h.insert("content-type", HeaderValue::from_static(ok));
            assert!(check_watch_content_type(&h).is_ok(), "{ok}");
        }
        for bad in [
            "foobar",
            "application/vnd.kubernetes.protobuf;stream=watch",
            "text/plain",
        ] {
            h.insert("content-type", HeaderValue::from_static(bad));
            let err = check_watch_content_type(&h).unwrap_err();
            assert!(err.contains(bad), "{err}");
        }
    }
}

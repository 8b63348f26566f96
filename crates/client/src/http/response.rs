//! What a response means: failure `Status` decoding and content-type checks.
//!
//! Requests send JSON. Answers are JSON, or protobuf where the request asked for it
//! ([`WireFormat::Protobuf`](crate::WireFormat)): failure Statuses are read in either
//! encoding, and a watch stream is accepted in protobuf only when protobuf was asked for.

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

/// The body as a `Status`, if it is one (`"kind": "Status"`), in JSON or protobuf.
fn decode_status(body: &[u8]) -> Option<Status> {
    if crate::protobuf::is_protobuf(body) {
        return crate::protobuf::decode_status(body);
    }
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

/// How a watch stream is framed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum StreamFormat {
    /// Concatenated JSON objects.
    Json,
    /// Protobuf messages, each after a 4-byte big-endian length.
    Protobuf,
}

/// The framing of a watch response from its Content-Type: `application/json` with or without
/// parameters such as `;stream=watch`, or `application/vnd.kubernetes.protobuf;stream=watch`
/// when protobuf was asked for. A missing Content-Type is taken as JSON, the type that was
/// asked for (client-go falls back to the request's content type too).
pub(crate) fn check_watch_content_type(
    headers: &HeaderMap,
    protobuf_asked: bool,
) -> Result<StreamFormat, String> {
    let Some(value) = headers.get(http::header::CONTENT_TYPE) else {
        return Ok(StreamFormat::Json);
    };
    let text = String::from_utf8_lossy(value.as_bytes());
    let media = text.split(';').next().unwrap_or("").trim();
    if media.is_empty() || media.eq_ignore_ascii_case(JSON) {
        Ok(StreamFormat::Json)
    } else if protobuf_asked && media.eq_ignore_ascii_case(crate::protobuf::PROTOBUF) {
        Ok(StreamFormat::Protobuf)
    } else {
        let wanted = if protobuf_asked {
            "JSON and protobuf"
        } else {
            "JSON"
        };
        Err(format!(
            "the watch response has content type {text:?}; only {wanted} watch streams are supported"
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
        assert_eq!(check_watch_content_type(&h, false), Ok(StreamFormat::Json));
        for ok in [
            "application/json",
            "application/json;stream=watch",
            "Application/JSON; charset=utf-8",
        ] {
            h.insert("content-type", HeaderValue::from_static(ok));
            assert_eq!(
                check_watch_content_type(&h, false),
                Ok(StreamFormat::Json),
                "{ok}"
            );
            assert_eq!(
                check_watch_content_type(&h, true),
                Ok(StreamFormat::Json),
                "{ok}"
            );
        }
        let pb = "application/vnd.kubernetes.protobuf;stream=watch";
        h.insert("content-type", HeaderValue::from_static(pb));
        assert_eq!(
            check_watch_content_type(&h, true),
            Ok(StreamFormat::Protobuf)
        );
        // Protobuf that nobody asked for is refused like any other type.
        for bad in ["foobar", pb, "text/plain"] {
            h.insert("content-type", HeaderValue::from_static(bad));
            let err = check_watch_content_type(&h, false).unwrap_err();
            assert!(err.contains(bad), "{err}");
        }
    }

    #[test]
    fn protobuf_status_bodies_are_decoded() {
        use prost::Message;
        // k8s\0, then an Unknown envelope {typeMeta {kind: Status}, raw: Status message}.
        #[derive(Message)]
        struct TypeMeta {
            #[prost(string, tag = "2")]
            kind: String,
        }
        #[derive(Message)]
        struct Unknown {
            #[prost(message, optional, tag = "1")]
            type_meta: Option<TypeMeta>,
            #[prost(bytes = "vec", tag = "2")]
            raw: Vec<u8>,
        }
        #[derive(Message)]
        struct StatusMessage {
            #[prost(string, tag = "3")]
            message: String,
            #[prost(string, tag = "4")]
            reason: String,
            #[prost(int32, tag = "6")]
            code: i32,
        }
        let raw = StatusMessage {
            message: "pods \"x\" not found".into(),
            reason: "NotFound".into(),
            code: 404,
        }
        .encode_to_vec();
        let mut body = b"k8s\0".to_vec();
        Unknown {
            type_meta: Some(TypeMeta {
                kind: "Status".into(),
            }),
            raw,
        }
        .encode(&mut body)
        .unwrap();
        let e = error_from_response(StatusCode::NOT_FOUND, &HeaderMap::new(), &body);
        assert!(e.is_not_found());
        assert_eq!(e.message(), "pods \"x\" not found");
    }
}

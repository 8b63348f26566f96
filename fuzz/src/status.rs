//! `status`: an error response body decoded into an [`ApiError`], as the HTTP backend does
//! for every non-2xx answer.
//!
//! The input is the body; it is decoded as the answer of several HTTP codes, with and
//! without a `Retry-After` header.
//!
//! Properties:
//! * never panics;
//! * (for bodies that are UTF-8 text) a body that is a `Status` (`"kind": "Status"`) is kept whole, and the error's code is the
//!   Status `code` when that is a valid non-zero one, else the HTTP code;
//! * any other body gives the HTTP code, a `Failure` Status and a message bounded in size
//!   however large the body (1 KiB of it at most);
//! * `Retry-After` is kept for 429 and 5xx answers without a Status;
//! * the classifiers (`is_not_found`, `is_conflict`, ...) exclude each other, and look the
//!   same through [`Error::Api`] and [`Error::Retried`];
//! * the error always renders to a non-empty message.

use http::{HeaderMap, HeaderValue, StatusCode};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Status;
use kctrl_client::fuzzing::error_from_response;
use kctrl_client::{ApiError, Error};

use crate::json::top_level_fields;

const CODES: [u16; 8] = [400, 404, 409, 410, 418, 422, 429, 503];

/// The property function.
pub fn check(data: &[u8]) {
    let as_status = decode_status(data);
    let is_text = std::str::from_utf8(data).is_ok();
    let mut retry_after = HeaderMap::new();
    retry_after.insert(http::header::RETRY_AFTER, HeaderValue::from_static("7"));
    for code in CODES {
        let status = StatusCode::from_u16(code).expect("valid code");
        for headers in [&HeaderMap::new(), &retry_after] {
            let err = error_from_response(status, headers, data);
            match &as_status {
                // Unknown fields are skipped without validating their UTF-8, so a body that
                // is not text may still be a Status the reference reading cannot see.
                _ if !is_text => {}
                Some(s) => {
                    assert_eq!(&err.status, s, "the Status body was altered");
                    let want = s
                        .code
                        .and_then(|c| u16::try_from(c).ok())
                        .filter(|c| *c != 0)
                        .unwrap_or(code);
                    assert_eq!(err.code, want);
                }
                None => {
                    assert_eq!(err.code, code);
                    assert_eq!(err.status.status.as_deref(), Some("Failure"));
                    assert_eq!(err.status.code, Some(i32::from(code)));
                    let message = err.message();
                    assert!(message.starts_with(&format!("the server responded with HTTP {code}")));
                    // 1 KiB of body, each byte at most a 3-byte replacement character.
                    assert!(message.len() <= 64 + 3 * 1024, "{} bytes", message.len());
                    let wants_retry = headers.contains_key(http::header::RETRY_AFTER)
                        && (code == 429 || code >= 500);
                    assert_eq!(err.retry_after_seconds(), wants_retry.then_some(7));
                }
            }
            check_classifiers(&err);
        }
    }
}

fn check_classifiers(err: &ApiError) {
    let classes = [
        err.is_not_found(),
        err.is_conflict(),
        err.is_already_exists(),
        err.is_gone(),
        err.is_invalid(),
        err.is_forbidden(),
        err.is_unauthorized(),
        err.is_too_many_requests(),
    ];
    assert!(
        classes.iter().filter(|c| **c).count() <= 1,
        "classifiers overlap for code {} reason {:?}: {classes:?}",
        err.code,
        err.reason()
    );
    assert!(!err.to_string().is_empty(), "empty message");
    let wrapped = Error::from(err.clone());
    let retried = Error::Retried {
        attempts: 3,
        last: Box::new(Error::from(err.clone())),
        previous: None,
    };
    for e in [&wrapped, &retried] {
        let through = [
            e.is_not_found(),
            e.is_conflict(),
            e.is_already_exists(),
            e.is_gone(),
            e.is_invalid(),
            e.is_forbidden(),
            e.is_unauthorized(),
            e.is_too_many_requests(),
        ];
        assert_eq!(through, classes, "{e}");
        assert_eq!(e.api_error(), Some(err));
    }
}

/// What the body means as a Status: an object with one `kind`, and that is `Status`.
fn decode_status(body: &[u8]) -> Option<Status> {
    let fields = top_level_fields(body)?;
    let [kind] = fields.get("kind")?.as_slice() else {
        return None;
    };
    if serde_json::from_str::<String>(kind.get()).ok()? != "Status" {
        return None;
    }
    serde_json::from_slice(body).ok()
}

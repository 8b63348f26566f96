//! The answers the gate sends instead of the endpoint's: 401, 403, 429, 500.

use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{
    CACHE_CONTROL, CONTENT_TYPE, HeaderValue, RETRY_AFTER, X_CONTENT_TYPE_OPTIONS,
};
use hyper::{Response, StatusCode};

use super::{AuthError, UserInfo};

/// Escapes what upstream's response writer escapes in messages (`&`, `<`, `>`).
fn sanitize(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

fn response(status: StatusCode, content_type: &'static str, body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    if status != StatusCode::UNAUTHORIZED {
        // As upstream's 403 and 500 answers.
        headers.insert(X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    }
    response
}

/// A `Status` object as the API server encodes it: compact, its fields in its order.
fn status_body(code: u16, reason: &str, message: &str, details: bool) -> String {
    let quoted = |text: &str| serde_json::Value::from(text).to_string();
    format!(
        "{{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{{}},\"status\":\"Failure\",\
         \"message\":{},\"reason\":{},{}\"code\":{code}}}\n",
        quoted(message),
        quoted(reason),
        if details { "\"details\":{}," } else { "" },
    )
}

/// The answer to a request that could not be authenticated.
pub(crate) fn unauthorized() -> Response<Full<Bytes>> {
    response(
        StatusCode::UNAUTHORIZED,
        "application/json",
        status_body(401, "Unauthorized", "Unauthorized", false),
    )
}

/// The answer to a request `user` may not make.
pub(crate) fn forbidden(
    user: &UserInfo,
    verb: &str,
    path: &str,
    reason: &str,
) -> Response<Full<Bytes>> {
    let mut message = sanitize(&format!(
        "forbidden: User {:?} cannot {verb} path {:?}",
        user.name, path
    ));
    if !reason.is_empty() {
        message.push_str(": ");
        message.push_str(reason);
    }
    response(
        StatusCode::FORBIDDEN,
        "application/json",
        status_body(403, "Forbidden", &message, true),
    )
}

/// The answer when authorization itself failed.
pub(crate) fn internal_error(request_uri: &str, error: &AuthError) -> Response<Full<Bytes>> {
    response(
        StatusCode::INTERNAL_SERVER_ERROR,
        "text/plain; charset=utf-8",
        sanitize(&format!(
            "Internal Server Error: {request_uri:?}: {error}\n"
        )),
    )
}

/// The answer to a request that would wait on a review while as many requests as allowed
/// wait already (as upstream's in-flight limit answers: plain text, retry after 1 s).
pub(crate) fn too_many_requests() -> Response<Full<Bytes>> {
    let mut answer = response(
        StatusCode::TOO_MANY_REQUESTS,
        "text/plain; charset=utf-8",
        "Too many requests, please try again later.\n".to_owned(),
    );
    answer
        .headers_mut()
        .insert(RETRY_AFTER, HeaderValue::from_static("1"));
    answer
}

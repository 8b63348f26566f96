//! Discovery: the server's version and the resources of one group/version.
//!
//! Both are plain GETs through the same flow control and retries as any other read.

use http::Method;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::APIResourceList;
use k8s_openapi::apimachinery::pkg::version::Info;
use serde::de::DeserializeOwned;

use super::retry::RequestKind;
use super::{HttpBackend, Prepared, url};
use crate::error::Error;

/// `GET /version`.
pub(super) async fn server_version(backend: &HttpBackend) -> Result<Info, Error> {
    get_json(backend, url::abs_url(&backend.base, &["version"])).await
}

/// `GET /api/v1` for `"v1"`, `GET /apis/{group}/{version}` otherwise. A group/version the
/// server does not serve answers 404, which is a not-found [`Error::Api`].
pub(super) async fn api_resources(
    backend: &HttpBackend,
    group_version: &str,
) -> Result<APIResourceList, Error> {
    get_json(
        backend,
        url::group_version_url(&backend.base, group_version)?,
    )
    .await
}

async fn get_json<T: DeserializeOwned>(backend: &HttpBackend, url: ::url::Url) -> Result<T, Error> {
    let p = Prepared::new(Method::GET, url, None, RequestKind::Read);
    let what = format!("response of GET {}", p.url_str);
    let body = backend.execute(p).await?;
    serde_json::from_slice(&body).map_err(|source| Error::Decode { what, source })
}

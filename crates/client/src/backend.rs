//! The seam between typed calls and whatever answers them.
//!
//! [`Backend`] is deliberately small and untyped: a request goes in as an [`ApiRequest`],
//! JSON comes out. [`HttpBackend`](crate::HttpBackend) talks to a real API server; an
//! in-memory fake implements the same trait so informers and controllers run unchanged in
//! tests, as client-go's fake clientset stands in for the real one.

use bytes::Bytes;
use futures::future::BoxFuture;
use futures::stream::BoxStream;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::APIResourceList;
use k8s_openapi::apimachinery::pkg::version::Info;

use crate::error::Error;
use crate::request::ApiRequest;

/// A stream of watch frames: each item is one complete JSON `WatchEvent`
/// (`{"type": ..., "object": ...}`). The stream ends when the server closes the watch.
pub type WatchFrames = BoxStream<'static, Result<Bytes, Error>>;

/// Carries out API requests. Implemented by the HTTP client and by in-memory fakes.
pub trait Backend: Send + Sync + 'static {
    /// Performs a non-watch request and returns the JSON body of a successful response.
    /// A failure Status becomes [`Error::Api`].
    fn call(&self, request: ApiRequest) -> BoxFuture<'_, Result<Bytes, Error>>;

    /// Opens a watch ([`Operation::Watch`](crate::Operation::Watch)) and returns its frames.
    fn watch(&self, request: ApiRequest) -> BoxFuture<'_, Result<WatchFrames, Error>>;

    /// The server's version (`GET /version`).
    fn server_version(&self) -> BoxFuture<'_, Result<Info, Error>>;

    /// The resources served for `group_version` (`"v1"`, `"apps/v1"`); a group/version the
    /// server does not serve is a not-found [`Error::Api`].
    fn api_resources<'a>(
        &'a self,
        group_version: &'a str,
    ) -> BoxFuture<'a, Result<APIResourceList, Error>>;
}

//! Entry points into crate-private decoders for the fuzz targets in `fuzz/` (feature
//! `fuzzing`, off by default; not a stable API).
//!
//! The fuzz targets drive the same code the HTTP backend runs on a response: the watch
//! framer that cuts a body into events, and the decoding of an error response into
//! [`ApiError`]. Nothing here adds behaviour; each item forwards to the real implementation.

use bytes::Bytes;
use http::{HeaderMap, StatusCode};

use crate::error::ApiError;
use crate::http::framing::JsonFramer;

/// The watch framer (`http/framing.rs`) behind a stable face for fuzzing.
#[derive(Debug)]
pub struct WatchFramer(JsonFramer);

impl WatchFramer {
    /// A framer that refuses frames longer than `max_frame_size` bytes.
    pub fn new(max_frame_size: usize) -> Self {
        Self(JsonFramer::new(max_frame_size))
    }

    /// A framer that also cuts `object.metadata.managedFields` out of each frame, as the
    /// HTTP backend's framer does for an `Api::without_managed_fields`.
    pub fn dropping_managed_fields(max_frame_size: usize) -> Self {
        Self(JsonFramer::new(max_frame_size).dropping_managed_fields(true))
    }

    /// Appends a chunk of the body.
    pub fn push(&mut self, chunk: &[u8]) {
        self.0.push(chunk);
    }

    /// The next complete frame, `None` when more input is needed, or the framing error
    /// (rendered) that ends the stream.
    pub fn next_frame(&mut self) -> Result<Option<Bytes>, String> {
        self.0.next_frame().map_err(|e| e.to_string())
    }

    /// Bytes of an incomplete frame still buffered.
    pub fn pending(&self) -> usize {
        self.0.pending()
    }
}

/// A watch event decoded without `object.metadata.managedFields`, as an informer of an
/// [`Api::without_managed_fields`](crate::Api::without_managed_fields) decodes it.
pub fn decode_event_without_managed_fields<K: serde::de::DeserializeOwned>(
    frame: &[u8],
) -> Result<crate::WatchEvent<K>, crate::Error> {
    crate::WatchEvent::decode(frame, true)
}

/// The error the HTTP backend builds for a non-2xx response with these headers and body.
pub fn error_from_response(status: StatusCode, headers: &HeaderMap, body: &[u8]) -> ApiError {
    crate::http::response::error_from_response(status, headers, body)
}

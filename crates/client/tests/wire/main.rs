//! Wire-level tests of `HttpBackend` against a local scripted HTTP/1.1 server.
//!
//! One test binary (modules below) keeps build time down. Tests use real time only where a
//! lower bound is asserted (rate limits, Retry-After) or where the server never answers
//! (timeouts); no test races a sleep against the code under test.

mod credentials;
mod discovery;
mod errors;
mod flow_control;
mod protobuf;
mod requests;
mod retries;
mod server;
mod watch;

use std::sync::Arc;

use kctrl_client::config::Config;
use kctrl_client::{Client, HttpBackend};

use crate::server::{RecordingMetrics, TestServer};

/// A backend with rate limiting off, so tests measure only what they mean to.
fn unlimited(server: &TestServer) -> HttpBackend {
    let mut config = server.config();
    config.qps = -1.0;
    HttpBackend::new(config).unwrap()
}

/// A client over `backend` with default namespace `default`.
fn client(backend: HttpBackend) -> Client {
    Client::new(backend, "default")
}

/// A backend for `config` recording its metrics.
fn recorded(config: Config) -> (HttpBackend, Arc<RecordingMetrics>) {
    let metrics = Arc::new(RecordingMetrics::default());
    let backend = HttpBackend::new(config)
        .unwrap()
        .with_metrics(metrics.clone());
    (backend, metrics)
}

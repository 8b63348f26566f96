//! The errors of building and starting a webhook server.

use std::net::SocketAddr;

use crate::certwatcher::CertError;

/// Why a webhook server could not be built or started.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The registrations contradict each other or are malformed; the message lists each
    /// problem and what to change.
    #[error("the webhook registrations are not usable: {0}")]
    Registration(String),
    /// The serving certificate or key could not be loaded.
    #[error(
        "{0} (give the server a certificate with .cert_dir(...) holding tls.crt and tls.key, or .tls_pem(...))"
    )]
    Certificate(#[from] CertError),
    /// The TLS configuration could not be made.
    #[error("configuring TLS: {0}")]
    Tls(String),
    /// The address could not be bound.
    #[error("binding {address}: {source} (pick another port with .port(...), 0 for any free one)")]
    Bind {
        /// The address.
        address: SocketAddr,
        /// The error.
        source: std::io::Error,
    },
}

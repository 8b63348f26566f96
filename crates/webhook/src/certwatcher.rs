//! The serving certificate, reloaded when its files change (controller-runtime's
//! `certwatcher`).
//!
//! cert-manager and similar tools rotate a webhook's certificate by rewriting `tls.crt` and
//! `tls.key` (in a Kubernetes Secret volume, by swapping a symlink). [`CertWatcher`] reads the
//! pair at start, then polls the files; a changed pair that parses and whose key matches the
//! certificate is used from the next TLS handshake on. A bad pair (half-written, mismatched,
//! unparsable) keeps the previous one and is logged, and is tried again on the next poll.
//! Polling rather than file notifications: it sees symlink swaps and replaced directories
//! alike, and reading two small files every few seconds costs nothing.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio_util::sync::CancellationToken;

/// Why a certificate and key could not be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CertError {
    /// A file could not be read.
    #[error("reading {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// The pair does not make a serving identity.
    #[error("the certificate {cert} and key {key} are not usable: {reason}")]
    Invalid {
        /// Where the certificate came from.
        cert: String,
        /// Where the key came from.
        key: String,
        /// What is wrong.
        reason: String,
    },
}

/// The certificate chain and key, parsed and checked to belong together.
fn certified_key(
    cert_pem: &[u8],
    key_pem: &[u8],
    cert: &str,
    key: &str,
) -> Result<CertifiedKey, CertError> {
    let invalid = |reason: String| CertError::Invalid {
        cert: cert.to_owned(),
        key: key.to_owned(),
        reason,
    };
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<_, _>>()
        .map_err(|e| invalid(format!("parsing the certificate PEM: {e}")))?;
    if chain.is_empty() {
        return Err(invalid(
            "the certificate file has no CERTIFICATE block".to_owned(),
        ));
    }
    let private = PrivateKeyDer::from_pem_slice(key_pem)
        .map_err(|e| invalid(format!("parsing the key PEM: {e}")))?;
    CertifiedKey::from_der(chain, private, &rustls::crypto::ring::default_provider())
        .map_err(|e| invalid(format!("{e}")))
}

/// The serving identity, from files it reloads or from memory. See the [module docs](self).
pub struct CertWatcher {
    /// `None` for an identity given in memory.
    files: Option<(PathBuf, PathBuf)>,
    current: RwLock<Arc<CertifiedKey>>,
    /// The bytes last read (valid or not), to notice changes and log a bad pair once.
    last: Mutex<(Vec<u8>, Vec<u8>)>,
}

impl fmt::Debug for CertWatcher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CertWatcher")
            .field("files", &self.files)
            .finish_non_exhaustive()
    }
}

fn read(path: &Path) -> Result<Vec<u8>, CertError> {
    std::fs::read(path).map_err(|source| CertError::Read {
        path: path.to_owned(),
        source,
    })
}

impl CertWatcher {
    /// Reads `cert` and `key` (PEM) now; fails if they are missing or not a matching pair.
    /// Call [`watch`](Self::watch) (the server does) to pick up changes.
    pub fn from_files(
        cert: impl Into<PathBuf>,
        key: impl Into<PathBuf>,
    ) -> Result<Self, CertError> {
        let (cert, key) = (cert.into(), key.into());
        let (c, k) = (read(&cert)?, read(&key)?);
        let identity = certified_key(
            &c,
            &k,
            &cert.display().to_string(),
            &key.display().to_string(),
        )?;
        Ok(CertWatcher {
            files: Some((cert, key)),
            current: RwLock::new(Arc::new(identity)),
            last: Mutex::new((c, k)),
        })
    }

    /// A fixed identity from PEM in memory (never reloaded).
    pub fn from_pem(cert_pem: &[u8], key_pem: &[u8]) -> Result<Self, CertError> {
        let identity = certified_key(cert_pem, key_pem, "(in memory)", "(in memory)")?;
        Ok(CertWatcher {
            files: None,
            current: RwLock::new(Arc::new(identity)),
            last: Mutex::new((cert_pem.to_vec(), key_pem.to_vec())),
        })
    }

    /// The identity new handshakes get.
    pub fn current(&self) -> Arc<CertifiedKey> {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Reads the files again: `Ok(true)` if they changed and the new pair is now served,
    /// `Ok(false)` if they are as last read, `Err` if they changed into something unusable
    /// (the previous identity stays). Always `Ok(false)` for an identity from memory.
    pub fn reload(&self) -> Result<bool, CertError> {
        let Some((cert, key)) = &self.files else {
            return Ok(false);
        };
        let (c, k) = (read(cert)?, read(key)?);
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        if last.0 == c && last.1 == k {
            return Ok(false);
        }
        let parsed = certified_key(
            &c,
            &k,
            &cert.display().to_string(),
            &key.display().to_string(),
        );
        // Remembered even when bad: the same bad pair is not reported again at every poll.
        *last = (c, k);
        let identity = parsed?;
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(identity);
        Ok(true)
    }

    /// Polls the files every `interval` until `cancel` fires, logging each change and each
    /// unusable pair. Returns at once for an identity from memory. A zero `interval` (which
    /// the server builder refuses) is taken as 10 s, with a warning.
    pub async fn watch(self: Arc<Self>, interval: Duration, cancel: CancellationToken) {
        let Some((cert, key)) = self.files.clone() else {
            return;
        };
        let interval = if interval.is_zero() {
            tracing::warn!(cert = %cert.display(), "a zero certificate poll interval; polling every 10 s");
            Duration::from_secs(10)
        } else {
            interval
        };
        let mut ticks = tokio::time::interval(interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ticks.tick().await;
        loop {
            tokio::select! {
                () = cancel.cancelled() => return,
                _ = ticks.tick() => {}
            }
            match self.reload() {
                Ok(true) => {
                    tracing::info!(cert = %cert.display(), key = %key.display(), "serving certificate reloaded")
                }
                Ok(false) => {}
                Err(e) => tracing::error!(
                    error = %e,
                    "the new serving certificate is not usable; still serving the previous one"
                ),
            }
        }
    }
}

impl ResolvesServerCert for CertWatcher {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }
}

#[cfg(test)]
mod tests;

//! Client certificates and the CAs they are verified against.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use rustls::client::danger::HandshakeSignatureValid;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::server::WebPkiClientVerifier;
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{DigitallySignedStruct, DistinguishedName, SignatureScheme};

use super::{AuthError, UserInfo};

/// `--client-ca-file`: the CAs client certificates are verified against, and what the TLS
/// server needs to ask for them.
#[derive(Clone)]
pub(crate) struct ClientCertificates {
    verifier: Arc<dyn ClientCertVerifier>,
}

impl std::fmt::Debug for ClientCertificates {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientCertificates").finish_non_exhaustive()
    }
}

impl ClientCertificates {
    /// The CAs of a PEM file (one certificate or more).
    pub(crate) fn from_pem_file(path: &Path) -> Result<Self, AuthError> {
        let fail = |reason: String| AuthError::ClientCa {
            path: path.display().to_string(),
            reason,
        };
        let certificates = CertificateDer::pem_file_iter(path)
            .map_err(|e| fail(e.to_string()))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| fail(e.to_string()))?;
        Self::from_certificates(certificates).map_err(fail)
    }

    /// The CAs of PEM text (`what` names its source in errors).
    pub(crate) fn from_pem(pem: &str, what: &str) -> Result<Self, String> {
        let certificates = CertificateDer::pem_slice_iter(pem.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("{what}: {e}"))?;
        Self::from_certificates(certificates).map_err(|e| format!("{what}: {e}"))
    }

    /// The CAs `certificates` (DER).
    pub(crate) fn from_certificates(
        certificates: Vec<CertificateDer<'static>>,
    ) -> Result<Self, String> {
        if certificates.is_empty() {
            return Err("holds no PEM certificate".to_owned());
        }
        let mut roots = rustls::RootCertStore::empty();
        for certificate in certificates {
            roots.add(certificate).map_err(|e| e.to_string())?;
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
            .allow_unauthenticated()
            .build()
            .map_err(|e| e.to_string())?;
        Ok(Self { verifier })
    }

    /// The verifier for the TLS server: asks for a client certificate naming these CAs,
    /// checks the handshake's signatures, and accepts any chain, which
    /// [`authenticate`](Self::authenticate) judges afterwards (as upstream's server asks for a
    /// certificate without verifying it in the handshake, so a bad one answers 401 rather
    /// than failing the connection).
    pub(crate) fn tls_verifier(&self) -> Arc<dyn ClientCertVerifier> {
        Arc::new(RequestClientCertificate {
            inner: self.verifier.clone(),
        })
    }

    /// The user of a presented chain (leaf first): `Ok(None)` when its subject has no common
    /// name.
    pub(crate) fn authenticate(
        &self,
        chain: &[CertificateDer<'static>],
    ) -> Result<Option<UserInfo>, AuthError> {
        let Some((leaf, intermediates)) = chain.split_first() else {
            return Ok(None);
        };
        self.verifier
            .verify_client_cert(leaf, intermediates, UnixTime::now())
            .map_err(|e| AuthError::BadClientCertificate(e.to_string()))?;
        let (_, parsed) = x509_parser::parse_x509_certificate(leaf)
            .map_err(|e| AuthError::BadClientCertificate(e.to_string()))?;
        let subject = parsed.subject();
        let Some(name) = subject
            .iter_common_name()
            .find_map(|cn| cn.as_str().ok())
            .filter(|cn| !cn.is_empty())
        else {
            return Ok(None);
        };
        let groups = subject
            .iter_organization()
            .filter_map(|o| o.as_str().ok())
            .map(str::to_owned)
            .collect();
        Ok(Some(UserInfo {
            name: name.to_owned(),
            uid: String::new(),
            groups,
            extra: BTreeMap::new(),
        }))
    }
}

/// Asks for a client certificate without requiring one, and leaves the chain to the
/// authenticator (see [`ClientCertificates::tls_verifier`]).
#[derive(Debug)]
struct RequestClientCertificate {
    inner: Arc<dyn ClientCertVerifier>,
}

impl ClientCertVerifier for RequestClientCertificate {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        false
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

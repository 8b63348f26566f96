//! TLS: what a [`Config`](crate::Config) says about trusting the server and proving the
//! client's identity, and the rustls client configuration built from it.
//!
//! Server verification, as in client-go:
//! - a kubeconfig CA (`certificate-authority[-data]`) replaces the system roots;
//! - without one, the operating system's trust store is used, through
//!   `rustls-platform-verifier` (already in the tree through reqwest; it reads the same stores
//!   Go's `crypto/x509` does, so corporate CAs installed on the machine keep working, which a
//!   bundled root list such as `webpki-roots` would not);
//! - `tls-server-name` verifies the certificate against that name instead of the URL's host,
//!   and is sent as SNI (as Go's `tls.Config.ServerName` is), so TLS routers that route on
//!   SNI and servers that pick their certificate by SNI see it. reqwest takes SNI from the
//!   request URL, so [`PreparedRequest::request`](crate::PreparedRequest::request) puts the
//!   name in the URL and the client resolves it to the server's host (the `Host` header then
//!   names it too, where Go sends the server URL's host). Not sent when it is an IP address
//!   (never sent as SNI) or when a proxy is used (the proxy would be asked for the name);
//!   then SNI is the server URL's host (none for an IP address);
//! - `insecure-skip-tls-verify` accepts any certificate but still checks that the server holds
//!   its key (handshake signatures), and may not be combined with a CA.
//!
//! The crypto provider is always rustls' `ring`, passed explicitly: the process-wide default
//! provider is never consulted. PEM is parsed with `rustls-pki-types`' [`PemObject`].

use std::fmt;
use std::sync::Arc;

use rustls::DigitallySignedStruct;
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};

use crate::error::ConfigError;
use crate::secret::Secret;

/// How to trust the server and how to prove who we are at the TLS layer.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct TlsConfig {
    /// PEM CA certificates to trust instead of the system's roots
    /// (`certificate-authority` or `certificate-authority-data`).
    pub ca_pem: Option<Vec<u8>>,
    /// Verify the server certificate against this name (`tls-server-name`).
    pub server_name: Option<String>,
    /// Accept any server certificate (`insecure-skip-tls-verify`). Only for development.
    pub insecure_skip_verify: bool,
    /// A client certificate and key (`client-certificate[-data]` + `client-key[-data]`).
    pub client_identity: Option<ClientIdentity>,
}

/// A PEM client certificate chain and its PEM private key.
#[derive(Clone, PartialEq, Eq)]
pub struct ClientIdentity {
    /// The certificate chain, leaf first (PEM).
    pub cert_pem: Vec<u8>,
    /// The private key (PEM: PKCS#8, PKCS#1 or SEC1).
    pub key_pem: Secret<Vec<u8>>,
}

impl fmt::Debug for TlsConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsConfig")
            .field("ca_pem", &self.ca_pem.as_ref().map(|p| ByteCount(p.len())))
            .field("server_name", &self.server_name)
            .field("insecure_skip_verify", &self.insecure_skip_verify)
            .field("client_identity", &self.client_identity)
            .finish()
    }
}

impl fmt::Debug for ClientIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientIdentity")
            .field("cert_pem", &ByteCount(self.cert_pem.len()))
            .field("key_pem", &self.key_pem)
            .finish()
    }
}

struct ByteCount(usize);

impl fmt::Debug for ByteCount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "<{} bytes>", self.0)
    }
}

/// What the server's certificate is checked against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ServerTrust {
    /// The TLS configuration's CA, the system roots, or nothing (insecure).
    Verify,
    /// The server is plain HTTP: no certificate will ever be checked, so do not require
    /// system roots to exist.
    NotUsed,
}

/// Builds the rustls client configuration for `tls`, presenting `identity` (which may differ
/// from `tls.client_identity` when an exec plugin supplies the certificate).
pub(crate) fn rustls_config(
    tls: &TlsConfig,
    identity: Option<&ClientIdentity>,
    trust: ServerTrust,
    alpn: &[&[u8]],
) -> Result<rustls::ClientConfig, ConfigError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = server_verifier(tls, trust, &provider)?;
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(ConfigError::Tls)?
        .dangerous()
        .with_custom_certificate_verifier(verifier);
    let mut config = match identity {
        Some(identity) => {
            let certs = parse_certificates(&identity.cert_pem, "client certificate")?;
            let key = parse_private_key(identity.key_pem.expose(), "client key")?;
            builder
                .with_client_auth_cert(certs, key)
                .map_err(ConfigError::Tls)?
        }
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Ok(config)
}

fn server_verifier(
    tls: &TlsConfig,
    trust: ServerTrust,
    provider: &Arc<CryptoProvider>,
) -> Result<Arc<dyn ServerCertVerifier>, ConfigError> {
    if tls.insecure_skip_verify {
        if tls.ca_pem.is_some() {
            return Err(ConfigError::InvalidConfig {
                entry: "TLS configuration".to_owned(),
                reason:
                    "a root certificate authority may not be combined with insecure-skip-tls-verify"
                        .to_owned(),
            });
        }
        return Ok(Arc::new(FixedVerdict {
            accept: true,
            algorithms: provider.signature_verification_algorithms,
        }));
    }
    let base: Arc<dyn ServerCertVerifier> = match (&tls.ca_pem, trust) {
        (Some(ca), _) => {
            let mut roots = rustls::RootCertStore::empty();
            let certs = parse_certificates(ca, "certificate authority")?;
            let (_, ignored) = roots.add_parsable_certificates(certs);
            if ignored > 0 {
                tracing::warn!(
                    ignored,
                    "some certificate authority certificates could not be used"
                );
            }
            if roots.is_empty() {
                return Err(ConfigError::InvalidPem {
                    what: "certificate authority".to_owned(),
                    reason: "no usable CA certificate found".to_owned(),
                });
            }
            WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                .build()
                .map_err(|e| ConfigError::Tls(rustls::Error::General(e.to_string())))?
        }
        (None, ServerTrust::Verify) => Arc::new(
            rustls_platform_verifier::Verifier::new(provider.clone()).map_err(ConfigError::Tls)?,
        ),
        (None, ServerTrust::NotUsed) => Arc::new(FixedVerdict {
            accept: false,
            algorithms: provider.signature_verification_algorithms,
        }),
    };
    match &tls.server_name {
        Some(name) if !name.is_empty() => {
            let name =
                ServerName::try_from(name.clone()).map_err(|_| ConfigError::InvalidConfig {
                    entry: "TLS configuration".to_owned(),
                    reason: format!("tls-server-name {name:?} is not a DNS name or an IP address"),
                })?;
            Ok(Arc::new(ServerNameOverride { inner: base, name }))
        }
        _ => Ok(base),
    }
}

/// Parses every certificate of a PEM bundle; zero certificates is an error.
pub(crate) fn parse_certificates(
    pem: &[u8],
    what: &str,
) -> Result<Vec<CertificateDer<'static>>, ConfigError> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| ConfigError::InvalidPem {
            what: what.to_owned(),
            reason: e.to_string(),
        })?;
    if certs.is_empty() {
        return Err(ConfigError::InvalidPem {
            what: what.to_owned(),
            reason: "no PEM certificate (-----BEGIN CERTIFICATE-----) found".to_owned(),
        });
    }
    Ok(certs)
}

/// Parses the first private key of a PEM document (PKCS#8, PKCS#1 or SEC1).
pub(crate) fn parse_private_key(
    pem: &[u8],
    what: &str,
) -> Result<PrivateKeyDer<'static>, ConfigError> {
    PrivateKeyDer::from_pem_slice(pem).map_err(|e| ConfigError::InvalidPem {
        what: what.to_owned(),
        reason: match e {
            rustls_pki_types::pem::Error::NoItemsFound => "no PEM private key found".to_owned(),
            // Other errors describe the structure, never the key bytes.
            other => other.to_string(),
        },
    })
}

/// Checks that a certificate chain and key are well-formed PEM and fit together well enough
/// for rustls to use them.
pub(crate) fn check_identity(identity: &ClientIdentity) -> Result<(), ConfigError> {
    parse_certificates(&identity.cert_pem, "client certificate")?;
    let key = parse_private_key(identity.key_pem.expose(), "client key")?;
    let provider = rustls::crypto::ring::default_provider();
    provider
        .key_provider
        .load_private_key(key)
        .map_err(|e| ConfigError::InvalidPem {
            what: "client key".to_owned(),
            reason: e.to_string(),
        })?;
    Ok(())
}

/// Verifies with `inner`, but against `name` instead of the host the client dialled.
#[derive(Debug)]
struct ServerNameOverride {
    inner: Arc<dyn ServerCertVerifier>,
    name: ServerName<'static>,
}

impl ServerCertVerifier for ServerNameOverride {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        self.inner
            .verify_server_cert(end_entity, intermediates, &self.name, ocsp_response, now)
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

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// A verifier whose verdict on the certificate is fixed; handshake signatures are still
/// checked, so the peer must hold the key of the certificate it shows.
///
/// * `accept: true` — `insecure-skip-tls-verify`: any certificate is accepted.
/// * `accept: false` — plain-http servers: TLS is never expected, so any certificate is refused.
#[derive(Debug)]
struct FixedVerdict {
    accept: bool,
    algorithms: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for FixedVerdict {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        if self.accept {
            Ok(ServerCertVerified::assertion())
        } else {
            Err(rustls::Error::General(
                "TLS is not configured for a plain-http server".to_owned(),
            ))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CA: &[u8] = include_bytes!("../tests/fixtures/ca.crt");
    const CLIENT_CERT: &[u8] = include_bytes!("../tests/fixtures/client.crt");
    const CLIENT_KEY: &[u8] = include_bytes!("../tests/fixtures/client.key");

    fn build(tls: &TlsConfig) -> Result<rustls::ClientConfig, ConfigError> {
        rustls_config(
            tls,
            tls.client_identity.as_ref(),
            ServerTrust::Verify,
            &[b"h2"],
        )
    }

    #[test]
    fn builds_with_ca_server_name_and_identity() {
        let tls = TlsConfig {
            ca_pem: Some(CA.to_vec()),
            server_name: Some("kubernetes.test".to_owned()),
            insecure_skip_verify: false,
            client_identity: Some(ClientIdentity {
                cert_pem: CLIENT_CERT.to_vec(),
                key_pem: Secret::new(CLIENT_KEY.to_vec()),
            }),
        };
        let config = build(&tls).unwrap();
        assert!(config.client_auth_cert_resolver.has_certs());
        assert_eq!(config.alpn_protocols, vec![b"h2".to_vec()]);
    }

    #[test]
    fn insecure_with_a_ca_is_rejected() {
        let tls = TlsConfig {
            ca_pem: Some(CA.to_vec()),
            insecure_skip_verify: true,
            ..TlsConfig::default()
        };
        assert!(matches!(
            build(&tls),
            Err(ConfigError::InvalidConfig { .. })
        ));
    }

    #[test]
    fn bad_pem_is_a_typed_error() {
        let tls = TlsConfig {
            ca_pem: Some(b"ca-data".to_vec()),
            ..TlsConfig::default()
        };
        let err = build(&tls).unwrap_err();
        assert!(matches!(err, ConfigError::InvalidPem { .. }), "{err:?}");
        assert!(err.to_string().contains("certificate authority"), "{err}");

        let identity = ClientIdentity {
            cert_pem: CLIENT_CERT.to_vec(),
            key_pem: Secret::new(
                b"-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n".to_vec(),
            ),
        };
        let err = check_identity(&identity).unwrap_err();
        assert!(err.to_string().starts_with("client key"), "{err}");

        let identity = ClientIdentity {
            cert_pem: b"cert-data".to_vec(),
            key_pem: Secret::new(CLIENT_KEY.to_vec()),
        };
        assert!(check_identity(&identity).is_err());
    }

    #[test]
    fn invalid_server_name_is_rejected() {
        let tls = TlsConfig {
            ca_pem: Some(CA.to_vec()),
            server_name: Some("not a name".to_owned()),
            ..TlsConfig::default()
        };
        assert!(matches!(
            build(&tls),
            Err(ConfigError::InvalidConfig { .. })
        ));
    }

    #[test]
    fn debug_shows_sizes_not_material() {
        let tls = TlsConfig {
            ca_pem: Some(CA.to_vec()),
            client_identity: Some(ClientIdentity {
                cert_pem: CLIENT_CERT.to_vec(),
                key_pem: Secret::new(CLIENT_KEY.to_vec()),
            }),
            ..TlsConfig::default()
        };
        let debug = format!("{tls:?}");
        assert!(
            debug.contains("bytes>") && debug.contains("<redacted>"),
            "{debug}"
        );
        assert!(!debug.contains("BEGIN"), "{debug}");
    }
}

//! Client certificates and the CAs they are verified against.
//!
//! The CAs come from `--client-ca-file`, or else from the key `client-ca-file` of the
//! ConfigMap kube-system/extension-apiserver-authentication, where the API server publishes
//! its own. Either is read again while the process runs, as kube-controller-manager's
//! dynamic CA providers do: the file every [`FILE_RELOAD_INTERVAL`], the ConfigMap every
//! [`CONFIGMAP_RELOAD_INTERVAL`]. New content replaces the CAs at once (a CA taken out stops
//! being trusted, for connections already open too: every request's chain is verified
//! against the CAs of that moment); content that cannot be read or parsed leaves the last good
//! CAs in place; a ConfigMap that could not be read at start is picked up once it can.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kctrl_client::{Api, Client};
use tracing::{debug, info, warn};

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
    /// The CAs of PEM text (one certificate or more; `what` names its source in errors).
    pub(crate) fn from_pem(pem: &[u8], what: &str) -> Result<Self, AuthError> {
        let fail = |reason: String| AuthError::ClientCa {
            what: what.to_owned(),
            reason,
        };
        let certificates = CertificateDer::pem_slice_iter(pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| fail(e.to_string()))?;
        Self::from_certificates(certificates).map_err(fail)
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

/// How often `--client-ca-file` is read again.
pub(crate) const FILE_RELOAD_INTERVAL: Duration = Duration::from_secs(10);
/// How often the API server's ConfigMap is read again.
pub(crate) const CONFIGMAP_RELOAD_INTERVAL: Duration = Duration::from_secs(30);

/// The ConfigMap where the API server publishes its client CA, and the key.
pub(crate) const AUTHENTICATION_CONFIGMAP: (&str, &str, &str) = (
    "kube-system",
    "extension-apiserver-authentication",
    "client-ca-file",
);

/// Where the client CAs are read from.
enum Source {
    /// `--client-ca-file`.
    File(PathBuf),
    /// [`AUTHENTICATION_CONFIGMAP`], through this client.
    ConfigMap(Client),
    /// Given once, never read again.
    #[cfg(test)]
    Fixed,
}

/// What was last read.
#[derive(Default)]
struct Loaded {
    /// The PEM content the CAs were parsed from.
    content: Vec<u8>,
    /// The CAs, once some were read.
    certificates: Option<ClientCertificates>,
    /// Bumped at each change of `certificates`.
    generation: u64,
    /// The last reload's error, so a lasting failure is warned about once.
    last_error: Option<String>,
}

/// The client CAs, read again periodically from their source (see the module docs).
pub(crate) struct ClientCa {
    source: Source,
    what: String,
    loaded: Mutex<Loaded>,
}

impl std::fmt::Debug for ClientCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientCa")
            .field("source", &self.what)
            .finish_non_exhaustive()
    }
}

impl ClientCa {
    /// The CAs of `--client-ca-file`: the file must be usable at start (as
    /// kube-controller-manager refuses to start otherwise); later it is read again.
    pub(crate) async fn from_file(path: &Path) -> Result<Arc<Self>, AuthError> {
        let ca = Arc::new(Self::new(
            Source::File(path.to_owned()),
            format!("--client-ca-file {}", path.display()),
        ));
        ca.reload().await?;
        ca.log_loaded();
        Ok(ca)
    }

    /// The CAs the API server publishes in [`AUTHENTICATION_CONFIGMAP`], read through
    /// `client`. A failure at start is logged; the ConfigMap is read again until it works.
    pub(crate) async fn from_configmap(client: Client) -> Arc<Self> {
        let (namespace, name, key) = AUTHENTICATION_CONFIGMAP;
        let ca = Arc::new(Self::new(
            Source::ConfigMap(client),
            format!("{key} of configmap {namespace}/{name}"),
        ));
        ca.reload_and_log().await;
        ca
    }

    /// CAs that never change.
    #[cfg(test)]
    pub(crate) fn fixed(certificates: ClientCertificates) -> Arc<Self> {
        let ca = Self::new(Source::Fixed, "fixed CAs".to_owned());
        {
            let mut loaded = ca.loaded.lock().unwrap_or_else(|p| p.into_inner());
            loaded.certificates = Some(certificates);
            loaded.generation = 1;
        }
        Arc::new(ca)
    }

    fn new(source: Source, what: String) -> Self {
        Self {
            source,
            what,
            loaded: Mutex::new(Loaded::default()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Loaded> {
        self.loaded.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The CAs of this moment, if any were read.
    pub(crate) fn current(&self) -> Option<ClientCertificates> {
        self.lock().certificates.clone()
    }

    /// The TLS server's verifier for the CAs of this moment (`None` before any were read:
    /// no client certificate is asked for), and their generation, which changes with them.
    pub(crate) fn tls_verifier(&self) -> (u64, Option<Arc<dyn ClientCertVerifier>>) {
        let loaded = self.lock();
        (
            loaded.generation,
            loaded
                .certificates
                .as_ref()
                .map(ClientCertificates::tls_verifier),
        )
    }

    /// Reads the source again: `Ok(true)` when the CAs changed, `Ok(false)` when the content
    /// is the same; on an error the CAs stay as they were.
    pub(crate) async fn reload(&self) -> Result<bool, AuthError> {
        let fail = |reason: String| AuthError::ClientCa {
            what: self.what.clone(),
            reason,
        };
        let content = match &self.source {
            Source::File(path) => std::fs::read(path).map_err(|e| fail(e.to_string()))?,
            Source::ConfigMap(client) => {
                let (namespace, name, key) = AUTHENTICATION_CONFIGMAP;
                let found = Api::<ConfigMap>::namespaced(client.clone(), namespace)
                    .get_opt(name)
                    .await
                    .map_err(|e| fail(e.to_string()))?
                    .ok_or_else(|| fail("the configmap does not exist".to_owned()))?;
                found
                    .data
                    .and_then(|mut data| data.remove(key))
                    .ok_or_else(|| fail(format!("the configmap has no key {key}")))?
                    .into_bytes()
            }
            #[cfg(test)]
            Source::Fixed => return Ok(false),
        };
        if content.iter().all(u8::is_ascii_whitespace) {
            return Err(fail("is empty".to_owned()));
        }
        if self.lock().content == content {
            return Ok(false);
        }
        let certificates = ClientCertificates::from_pem(&content, &self.what)?;
        let mut loaded = self.lock();
        loaded.content = content;
        loaded.certificates = Some(certificates);
        loaded.generation += 1;
        Ok(true)
    }

    /// [`reload`](Self::reload), logging what changed; a failure is warned about when it
    /// differs from the previous one.
    pub(crate) async fn reload_and_log(&self) {
        match self.reload().await {
            Ok(true) => {
                self.lock().last_error = None;
                self.log_loaded();
            }
            Ok(false) => self.lock().last_error = None,
            Err(e) => {
                let error = e.to_string();
                let (repeated, have) = {
                    let mut loaded = self.lock();
                    let repeated = loaded.last_error.as_deref() == Some(error.as_str());
                    loaded.last_error = Some(error);
                    (repeated, loaded.certificates.is_some())
                };
                let consequence = if have {
                    "the CAs read before stay in use"
                } else {
                    "client certificates are not used until it can be read"
                };
                if repeated {
                    debug!(error = %e, "reading the client CA failed again; {consequence}");
                } else {
                    warn!(error = %e, "reading the client CA failed; {consequence}");
                }
            }
        }
    }

    fn log_loaded(&self) {
        info!(
            "client certificates are verified against the CAs of {}",
            self.what
        );
    }

    /// Reads the source again every [`FILE_RELOAD_INTERVAL`] or
    /// [`CONFIGMAP_RELOAD_INTERVAL`], in a task that ends once the CAs are dropped.
    pub(crate) fn spawn_reloads(self: &Arc<Self>) {
        let interval = match &self.source {
            Source::File(_) => FILE_RELOAD_INTERVAL,
            Source::ConfigMap(_) => CONFIGMAP_RELOAD_INTERVAL,
            #[cfg(test)]
            Source::Fixed => return,
        };
        let ca: Weak<Self> = Arc::downgrade(self);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(interval).await;
                let Some(ca) = ca.upgrade() else { break };
                ca.reload_and_log().await;
            }
        });
    }
}

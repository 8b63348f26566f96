//! A local HTTPS test server (tokio-rustls + hyper) on 127.0.0.1 that answers every request
//! with what it saw: the Authorization and Impersonate-User headers, how many client
//! certificates the peer presented, the HTTP version, the SNI and the host it was asked for.

#![allow(dead_code, unreachable_pub)]

use std::convert::Infallible;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use rustls::server::WebPkiClientVerifier;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

pub fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

pub fn fixture_bytes(name: &str) -> Vec<u8> {
    std::fs::read(fixture(name)).unwrap()
}

/// Starts a server presenting `cert`/`key` (fixture names); with `client_ca`, it requires a
/// client certificate signed by that CA. Returns the port. The server lives as long as the
/// test's runtime.
pub async fn start_server(cert: &str, key: &str, client_ca: Option<&str>) -> u16 {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(fixture(cert))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_file(fixture(key)).unwrap();
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .unwrap();
    let builder = match client_ca {
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            for c in CertificateDer::pem_file_iter(fixture(ca)).unwrap() {
                roots.add(c.unwrap()).unwrap();
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .unwrap();
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let mut config = builder.with_single_cert(certs, key).unwrap();
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let acceptor = TlsAcceptor::from(Arc::new(config));

    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let client_certs = tls.get_ref().1.peer_certificates().map_or(0, <[_]>::len);
                let sni = tls.get_ref().1.server_name().unwrap_or("").to_owned();
                let service = service_fn(move |req: Request<Incoming>| {
                    let sni = sni.clone();
                    async move {
                        let header = |name: &str| {
                            req.headers()
                                .get(name)
                                .and_then(|v| v.to_str().ok())
                                .unwrap_or("")
                                .to_owned()
                        };
                        // HTTP/2 carries the host as :authority, HTTP/1.1 as a Host header.
                        let host = req
                            .uri()
                            .authority()
                            .map(|a| a.to_string())
                            .unwrap_or_else(|| header("host"));
                        let body = format!(
                            "auth={};as={};client-certs={client_certs};version={:?};sni={sni};host={host};",
                            header("authorization"),
                            header("impersonate-user"),
                            req.version()
                        );
                        Ok::<_, Infallible>(Response::new(Full::new(Bytes::from(body))))
                    }
                });
                let _ = auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(tls), service)
                    .await;
            });
        }
    });
    port
}

/// Sends GET / through `transport`, returning the server's description of the request.
pub async fn get(
    transport: &kctrl_config::Transport,
    url: &str,
) -> Result<String, Box<dyn std::error::Error + Send + Sync>> {
    let prepared = transport.prepare().await?;
    let response = prepared
        .request(http::Method::GET, url.parse()?)
        .send()
        .await?;
    Ok(response.error_for_status()?.text().await?)
}

/// An error and all its sources, joined.
pub fn chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

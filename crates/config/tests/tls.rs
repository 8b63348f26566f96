//! TLS against a local rustls server on 127.0.0.1: CA verification, tls-server-name,
//! client-certificate authentication, insecure-skip-tls-verify, and a kubeconfig end to end.

mod common;

use common::{chain, fixture, fixture_bytes, get, start_server};
use kctrl_config::{
    Auth, ClientIdentity, Config, ConfigOverrides, LoadingRules, Secret, Transport,
};

fn config(port: u16) -> Config {
    let mut config = Config::new(format!("https://127.0.0.1:{port}").parse().unwrap());
    config.auth = Auth::BearerToken(Secret::from("tls-token"));
    config
}

fn identity() -> ClientIdentity {
    ClientIdentity {
        cert_pem: fixture_bytes("client.crt"),
        key_pem: Secret::new(fixture_bytes("client.key")),
    }
}

async fn request(config: &Config, port: u16) -> Result<String, String> {
    let transport = Transport::new(config).map_err(|e| chain(&e))?;
    get(&transport, &format!("https://127.0.0.1:{port}/"))
        .await
        .map_err(|e| chain(&*e))
}

#[tokio::test]
async fn verifies_the_server_against_the_kubeconfig_ca() {
    let port = start_server("server.crt", "server.key", None).await;
    let mut c = config(port);
    c.tls.ca_pem = Some(fixture_bytes("ca.crt"));
    let body = request(&c, port).await.unwrap();
    assert!(body.contains("auth=Bearer tls-token"), "{body}");
    assert!(
        body.contains("version=HTTP/2.0"),
        "HTTP/2 negotiated by ALPN: {body}"
    );
    assert!(body.contains("client-certs=0"), "{body}");
}

#[tokio::test]
async fn fails_with_the_wrong_ca() {
    let port = start_server("server.crt", "server.key", None).await;
    let mut c = config(port);
    c.tls.ca_pem = Some(fixture_bytes("other-ca.crt"));
    let err = request(&c, port).await.unwrap_err();
    assert!(
        err.contains("UnknownIssuer") || err.contains("certificate"),
        "{err}"
    );
}

#[tokio::test]
async fn fails_without_a_ca_because_the_test_ca_is_not_a_system_root() {
    let port = start_server("server.crt", "server.key", None).await;
    // No kubeconfig CA: the operating system's roots are used, and they do not include the
    // test CA (or there are none at all, and building the transport fails).
    assert!(request(&config(port), port).await.is_err());
}

#[tokio::test]
async fn tls_server_name_is_used_for_verification() {
    // The certificate names only kubernetes.test, not 127.0.0.1.
    let port = start_server("named-server.crt", "named-server.key", None).await;
    let mut c = config(port);
    c.tls.ca_pem = Some(fixture_bytes("ca.crt"));
    let err = request(&c, port).await.unwrap_err();
    assert!(
        err.contains("NotValidForName") || err.contains("certificate"),
        "{err}"
    );

    c.tls.server_name = Some("kubernetes.test".to_owned());
    let body = request(&c, port).await.unwrap();
    assert!(body.contains("auth=Bearer tls-token"), "{body}");

    c.tls.server_name = Some("other.test".to_owned());
    assert!(request(&c, port).await.is_err());
}

// TLS routers route on SNI and servers choose their certificate by it: tls-server-name is
// sent, as client-go sends tls.Config.ServerName, while the connection still goes to the
// server URL's address.
#[tokio::test]
async fn tls_server_name_is_sent_as_sni() {
    let port = start_server("named-server.crt", "named-server.key", None).await;
    let mut c = config(port);
    c.tls.ca_pem = Some(fixture_bytes("ca.crt"));
    c.tls.server_name = Some("kubernetes.test".to_owned());
    let body = request(&c, port).await.unwrap();
    assert!(body.contains("sni=kubernetes.test;"), "{body}");
    assert!(body.contains("auth=Bearer tls-token"), "{body}");
    assert!(
        body.contains(&format!("host=kubernetes.test:{port};")),
        "{body}"
    );

    // Without it, the URL's host is the SNI: none for an IP address, the name otherwise.
    let port = start_server("server.crt", "server.key", None).await;
    let mut c = config(port);
    c.tls.ca_pem = Some(fixture_bytes("ca.crt"));
    let body = request(&c, port).await.unwrap();
    assert!(body.contains("sni=;"), "{body}");
    c.server = format!("https://localhost:{port}").parse().unwrap();
    let transport = Transport::new(&c).unwrap();
    let body = get(&transport, &format!("https://localhost:{port}/"))
        .await
        .unwrap();
    assert!(body.contains("sni=localhost;"), "{body}");
}

#[tokio::test]
async fn insecure_skip_tls_verify_accepts_an_unverifiable_server() {
    let port = start_server("named-server.crt", "named-server.key", None).await;
    let mut c = config(port);
    c.tls.insecure_skip_verify = true;
    let body = request(&c, port).await.unwrap();
    assert!(body.contains("auth=Bearer tls-token"), "{body}");
}

#[tokio::test]
async fn client_certificate_authentication() {
    let port = start_server("server.crt", "server.key", Some("ca.crt")).await;
    let mut c = config(port);
    c.auth = Auth::None;
    c.tls.ca_pem = Some(fixture_bytes("ca.crt"));
    // The server requires a client certificate.
    assert!(request(&c, port).await.is_err());

    c.tls.client_identity = Some(identity());
    let body = request(&c, port).await.unwrap();
    assert!(body.contains("client-certs=1"), "{body}");
    assert!(body.contains("auth=;"), "no Authorization header: {body}");
}

#[tokio::test]
async fn a_client_certificate_from_another_ca_is_refused() {
    // The server trusts only other-ca for clients; our client certificate is from ca.
    let port = start_server("server.crt", "server.key", Some("other-ca.crt")).await;
    let mut c = config(port);
    c.tls.ca_pem = Some(fixture_bytes("ca.crt"));
    c.tls.client_identity = Some(identity());
    assert!(request(&c, port).await.is_err());
}

#[tokio::test]
async fn a_kubeconfig_with_relative_paths_end_to_end() {
    let port = start_server("server.crt", "server.key", Some("ca.crt")).await;
    let dir = tempfile::tempdir().unwrap();
    let pki = dir.path().join("pki");
    std::fs::create_dir(&pki).unwrap();
    for name in ["ca.crt", "client.crt", "client.key"] {
        std::fs::copy(fixture(name), pki.join(name)).unwrap();
    }
    let kubeconfig = dir.path().join("config");
    std::fs::write(
        &kubeconfig,
        format!(
            r#"apiVersion: v1
kind: Config
current-context: local
clusters:
- name: local
  cluster:
    server: https://localhost:{port}
    certificate-authority: pki/ca.crt
users:
- name: alice
  user:
    client-certificate: pki/client.crt
    client-key: pki/client.key
    as: bob
contexts:
- name: local
  context: {{cluster: local, user: alice, namespace: team-a}}
"#
        ),
    )
    .unwrap();

    let rules = LoadingRules::explicit(&kubeconfig);
    let config = Config::from_kubeconfig(&rules, &ConfigOverrides::default()).unwrap();
    assert_eq!(config.default_namespace, "team-a");
    let transport = Transport::new(&config).unwrap();
    let body = get(&transport, &format!("https://localhost:{port}/"))
        .await
        .unwrap();
    assert!(body.contains("client-certs=1"), "{body}");
    assert!(body.contains("as=bob"), "impersonation header sent: {body}");
}

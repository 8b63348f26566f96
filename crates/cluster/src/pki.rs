//! The cluster's PKI, generated with the `openssl` command-line tool (no Rust crypto dependency):
//! one CA, a serving certificate for 127.0.0.1/localhost/kubernetes.default…, one client
//! certificate per identity, and the service-account signing key pair. EC P-256 keys throughout
//! (fast to generate; accepted by Go's and rustls' TLS stacks).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};
use base64::Engine as _;

/// A certificate and its private key (PEM files).
#[derive(Clone, Debug)]
pub struct CertPair {
    /// Certificate (PEM).
    pub cert: PathBuf,
    /// Private key (PEM, PKCS#8).
    pub key: PathBuf,
}

/// A client identity: its user name and groups, as the apiserver's x509 authenticator maps them
/// (CN -> user, O -> groups).
#[derive(Clone, Copy, Debug)]
pub struct Identity {
    /// File stem of the certificate and kubeconfig.
    pub file: &'static str,
    /// Common name: the Kubernetes user name.
    pub user: &'static str,
    /// Organisations: the Kubernetes groups.
    pub groups: &'static [&'static str],
}

/// Where every file of the PKI lives.
#[derive(Clone, Debug)]
pub struct Pki {
    /// `pki/` directory.
    pub dir: PathBuf,
}

const OPENSSL_CONFIG: &str = "\
[req]
distinguished_name = dn
prompt = no
[dn]
CN = unused
[ca]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign, digitalSignature
subjectKeyIdentifier = hash
[client]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = clientAuth
authorityKeyIdentifier = keyid
[server]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = serverAuth, clientAuth
authorityKeyIdentifier = keyid
subjectAltName = @alt_names
[alt_names]
IP.1 = 127.0.0.1
IP.2 = 10.0.0.1
DNS.1 = localhost
DNS.2 = kubernetes
DNS.3 = kubernetes.default
DNS.4 = kubernetes.default.svc
DNS.5 = kubernetes.default.svc.cluster.local
";

const EC_KEY: [&str; 4] = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"];

fn openssl(args: &[&str], what: &str) -> Result<()> {
    let out = Command::new("openssl").args(args).output().map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            anyhow::anyhow!(
                "the `openssl` command-line tool is needed to create the cluster's certificates; \
                 install it (Debian/Ubuntu: apt-get install openssl)"
            )
        } else {
            anyhow::Error::from(e).context("running openssl")
        }
    })?;
    if !out.status.success() {
        bail!(
            "openssl failed while {what}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// `/O=g1/O=g2/CN=user`.
fn subject(user: &str, groups: &[&str]) -> String {
    let mut s = String::new();
    for g in groups {
        s.push_str(&format!("/O={g}"));
    }
    s.push_str(&format!("/CN={user}"));
    s
}

impl Pki {
    /// Creates the CA, the serving certificate, one client certificate per identity and the
    /// service-account key pair under `dir`.
    pub fn generate(dir: &Path, cluster: &str, identities: &[Identity]) -> Result<Pki> {
        fs::create_dir_all(dir)?;
        let pki = Pki {
            dir: dir.to_path_buf(),
        };
        let cnf = dir.join("openssl.cnf");
        fs::write(&cnf, OPENSSL_CONFIG)?;
        let cnf = cnf.to_str().context("non-UTF-8 path")?;
        let ca = pki.ca();
        let (ca_cert, ca_key) = (path_str(&ca.cert)?, path_str(&ca.key)?);
        openssl(
            &[
                &[
                    "req",
                    "-x509",
                    "-config",
                    cnf,
                    "-extensions",
                    "ca",
                    "-nodes",
                ][..],
                &EC_KEY,
                &["-keyout", ca_key, "-out", ca_cert, "-days", "3650"],
                &["-subj", &format!("/CN=kctrl-{cluster}-ca")],
            ]
            .concat(),
            "creating the CA",
        )?;
        let serial = dir.join("ca.srl");
        let serial = path_str(&serial)?;
        let leaf = |stem: &str, subj: &str, ext: &str| -> Result<()> {
            let pair = pki.pair(stem);
            let csr = dir.join(format!("{stem}.csr"));
            let (cert, key, csr_s) = (path_str(&pair.cert)?, path_str(&pair.key)?, path_str(&csr)?);
            openssl(
                &[
                    &["req", "-new", "-config", cnf, "-nodes"][..],
                    &EC_KEY,
                    &["-keyout", key, "-out", csr_s, "-subj", subj],
                ]
                .concat(),
                &format!("creating the key of {stem}"),
            )?;
            openssl(
                &[
                    "x509",
                    "-req",
                    "-in",
                    csr_s,
                    "-CA",
                    ca_cert,
                    "-CAkey",
                    ca_key,
                    "-CAserial",
                    serial,
                    "-CAcreateserial",
                    "-days",
                    "3650",
                    "-extfile",
                    cnf,
                    "-extensions",
                    ext,
                    "-out",
                    cert,
                ],
                &format!("signing the certificate of {stem}"),
            )?;
            fs::remove_file(&csr)?;
            Ok(())
        };
        leaf("serving", "/CN=kube-apiserver", "server")?;
        for id in identities {
            leaf(id.file, &subject(id.user, id.groups), "client")?;
        }
        let (sa_key, sa_pub) = (dir.join("sa.key"), dir.join("sa.pub"));
        openssl(
            &[
                "genpkey",
                "-algorithm",
                "EC",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
                "-out",
                path_str(&sa_key)?,
            ],
            "creating the service-account signing key",
        )?;
        openssl(
            &[
                "pkey",
                "-in",
                path_str(&sa_key)?,
                "-pubout",
                "-out",
                path_str(&sa_pub)?,
            ],
            "extracting the service-account public key",
        )?;
        Ok(pki)
    }

    fn pair(&self, stem: &str) -> CertPair {
        CertPair {
            cert: self.dir.join(format!("{stem}.crt")),
            key: self.dir.join(format!("{stem}.key")),
        }
    }

    /// The cluster CA.
    pub fn ca(&self) -> CertPair {
        self.pair("ca")
    }

    /// Serving certificate of the apiserver (and of the other components' HTTPS endpoints).
    pub fn serving(&self) -> CertPair {
        self.pair("serving")
    }

    /// Client certificate of an identity.
    pub fn client(&self, id: &Identity) -> CertPair {
        self.pair(id.file)
    }

    /// Service-account token signing key (private).
    pub fn sa_key(&self) -> PathBuf {
        self.dir.join("sa.key")
    }

    /// Service-account token verification key (public).
    pub fn sa_pub(&self) -> PathBuf {
        self.dir.join("sa.pub")
    }
}

fn path_str(p: &Path) -> Result<&str> {
    p.to_str()
        .with_context(|| format!("non-UTF-8 path {}", p.display()))
}

/// A self-contained kubeconfig (certificates embedded as `*-data`) for `id`.
pub fn kubeconfig(pki: &Pki, cluster: &str, server: &str, id: &Identity) -> Result<String> {
    let b64 = |p: &Path| -> Result<String> {
        Ok(base64::engine::general_purpose::STANDARD
            .encode(fs::read(p).with_context(|| format!("reading {}", p.display()))?))
    };
    let pair = pki.client(id);
    let cluster_name = format!("kctrl-{cluster}");
    let context = if id.file == "admin" {
        cluster_name.clone()
    } else {
        format!("{cluster_name}-{}", id.file)
    };
    Ok(format!(
        "apiVersion: v1
kind: Config
clusters:
- name: {cluster_name}
  cluster:
    server: {server}
    certificate-authority-data: {ca}
users:
- name: {user}
  user:
    client-certificate-data: {cert}
    client-key-data: {key}
contexts:
- name: {context}
  context:
    cluster: {cluster_name}
    user: {user}
current-context: {context}
preferences: {{}}
",
        ca = b64(&pki.ca().cert)?,
        user = id.user,
        cert = b64(&pair.cert)?,
        key = b64(&pair.key)?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subjects_map_groups_to_organisations() {
        assert_eq!(
            subject(
                "system:serviceaccount:ns:sa",
                &["system:serviceaccounts", "system:serviceaccounts:ns"]
            ),
            "/O=system:serviceaccounts/O=system:serviceaccounts:ns/CN=system:serviceaccount:ns:sa"
        );
        assert_eq!(subject("kctrl-admin", &[]), "/CN=kctrl-admin");
    }

    #[test]
    fn generates_a_pki_and_kubeconfig() {
        if crate::toolchain::which("openssl").is_none() {
            eprintln!("openssl not installed; skipping");
            return;
        }
        let dir = std::env::temp_dir().join(format!("kctrl-pki-test-{}", std::process::id()));
        let id = Identity {
            file: "admin",
            user: "kctrl-admin",
            groups: &["system:masters"],
        };
        let pki = Pki::generate(&dir, "t", &[id]).unwrap();
        for f in [
            pki.ca().cert,
            pki.serving().key,
            pki.client(&id).cert,
            pki.sa_key(),
            pki.sa_pub(),
        ] {
            assert!(f.is_file(), "{}", f.display());
        }
        let text = String::from_utf8(
            Command::new("openssl")
                .args([
                    "x509",
                    "-noout",
                    "-subject",
                    "-ext",
                    "subjectAltName,extendedKeyUsage",
                    "-in",
                ])
                .arg(pki.serving().cert)
                .output()
                .unwrap()
                .stdout,
        )
        .unwrap();
        assert!(
            text.contains("IP Address:127.0.0.1") && text.contains("TLS Web Server Authentication"),
            "{text}"
        );
        let kc = kubeconfig(&pki, "t", "https://127.0.0.1:1", &id).unwrap();
        assert!(
            kc.contains("current-context: kctrl-t\n") && kc.contains("client-key-data: "),
            "{kc}"
        );
        fs::remove_dir_all(&dir).unwrap();
    }
}

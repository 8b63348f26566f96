//! Our `deployment-controller` as a child process of a test: started with its own HTTPS
//! identity and port, scraped over HTTPS, stopped with SIGTERM or killed with SIGKILL.
//!
//! The binary is the one `cargo xtask e2e` built, named by [`CONTROLLER_BINARY_ENV`]; under
//! [`TESTENV_ENV`](crate::TESTENV_ENV) without it, the one `kctrl-testenv` builds.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use tokio::process::{Child, Command};

/// Path of the `deployment-controller` executable (set by `cargo xtask e2e`).
pub const CONTROLLER_BINARY_ENV: &str = "KCTRL_E2E_CONTROLLER_BINARY";

/// The controller binary, or a panic naming the variable (`cargo xtask e2e` always sets it).
pub fn controller_binary() -> PathBuf {
    controller_binary_or_build().unwrap_or_else(|e| panic!("{e}"))
}

/// [`CONTROLLER_BINARY_ENV`]'s executable; without it, under [`TESTENV_ENV`](crate::TESTENV_ENV),
/// the one [`kctrl_testenv::build_deployment_controller`] builds (once per test binary:
/// `cargo build -p kctrl-deployment-controller`, seconds when up to date); else an error.
pub fn controller_binary_or_build() -> Result<PathBuf, String> {
    static BUILT: std::sync::OnceLock<Result<PathBuf, String>> = std::sync::OnceLock::new();
    if let Some(path) = std::env::var_os(CONTROLLER_BINARY_ENV) {
        return Ok(PathBuf::from(path));
    }
    if std::env::var_os(crate::TESTENV_ENV).is_none() {
        return Err(format!(
            "{CONTROLLER_BINARY_ENV} is not set; run the suite with `cargo xtask e2e`"
        ));
    }
    BUILT
        .get_or_init(|| kctrl_testenv::build_deployment_controller().map_err(|e| e.to_string()))
        .clone()
}

/// The `--authorization-always-allow-paths` [`ControllerProcess::start`] passes unless told
/// otherwise: kube-controller-manager's default plus /metrics.
pub const OPEN_PATHS: &str = "/healthz,/readyz,/livez,/metrics";

/// A running `deployment-controller`. Its output goes to a log file in the temporary directory,
/// removed on drop unless a panic is unwinding (then kept, and its path printed).
pub struct ControllerProcess {
    /// A name for logs and messages.
    pub name: String,
    child: Child,
    /// The loopback HTTPS port of its endpoints.
    pub port: u16,
    /// Its combined stdout and stderr.
    pub log: PathBuf,
    http: reqwest::Client,
    /// The serving certificate (PEM), for clients built later.
    server_cert: PathBuf,
    _dir: tempfile::TempDir,
}

fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("binding a free port");
    listener.local_addr().expect("reading the free port").port()
}

impl ControllerProcess {
    /// Starts the controller against `kubeconfig` with `args` (besides --kubeconfig,
    /// --secure-port and the TLS files, which this sets), and waits until /livez answers.
    ///
    /// Unless `args` set `--authorization-always-allow-paths`, /metrics is added to the
    /// paths served without a token ([`OPEN_PATHS`]): outside a cluster and without the
    /// review kubeconfigs, the controller would otherwise forbid it to the tests, as
    /// kube-controller-manager would.
    pub async fn start(name: &str, kubeconfig: &Path, args: &[&str]) -> Self {
        let dir = tempfile::tempdir().expect("creating a temporary directory");
        let certified = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned()])
            .expect("generating a test serving certificate");
        let cert = dir.path().join("tls.crt");
        let key = dir.path().join("tls.key");
        std::fs::write(&cert, certified.cert.pem()).expect("writing the certificate");
        std::fs::write(&key, certified.signing_key.serialize_pem()).expect("writing the key");
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(certified.cert.der().clone())
            .expect("trusting the test certificate");
        let tls = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
        let http = reqwest::Client::builder()
            .use_preconfigured_tls(tls)
            .timeout(Duration::from_secs(5))
            .build()
            .expect("building the HTTPS client");

        let port = free_port();
        let log = std::env::temp_dir().join(format!(
            "kctrl-e2e-{name}-{}-{port}.log",
            std::process::id()
        ));
        let out = std::fs::File::create(&log).expect("creating the controller log");
        let err = out.try_clone().expect("duplicating the log handle");
        let mut command = Command::new(controller_binary());
        command
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .arg("--secure-port")
            .arg(port.to_string())
            .arg("--tls-cert-file")
            .arg(&cert)
            .arg("--tls-private-key-file")
            .arg(&key)
            .args(
                (!args
                    .iter()
                    .any(|a| a.starts_with("--authorization-always-allow-paths")))
                .then(|| format!("--authorization-always-allow-paths={OPEN_PATHS}")),
            )
            .args(args)
            .env("RUST_LOG", "info,kctrl_deployment=debug")
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .kill_on_drop(true);
        let child = command
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", controller_binary().display()));
        let mut process = Self {
            name: name.to_owned(),
            child,
            port,
            log,
            http,
            server_cert: cert.clone(),
            _dir: dir,
        };
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            if process
                .get("/livez")
                .await
                .is_ok_and(|(code, _)| code == 200)
            {
                break;
            }
            if let Ok(Some(status)) = process.child.try_wait() {
                panic!(
                    "controller {name} exited with {status} before serving; log:\n{}",
                    process.log_text()
                );
            }
            if tokio::time::Instant::now() > deadline {
                panic!(
                    "controller {name} did not serve /livez within 30s; log:\n{}",
                    process.log_text()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        process
    }

    /// `GET https://127.0.0.1:<port><path>`: status and body.
    pub async fn get(&self, path: &str) -> Result<(u16, String), reqwest::Error> {
        self.get_as(path, None).await
    }

    /// `GET https://127.0.0.1:<port><path>` with `Authorization: Bearer <token>` when a
    /// token is given: status and body.
    pub async fn get_as(
        &self,
        path: &str,
        token: Option<&str>,
    ) -> Result<(u16, String), reqwest::Error> {
        let mut request = self
            .http
            .get(format!("https://127.0.0.1:{}{path}", self.port));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        let response = request.send().await?;
        let status = response.status().as_u16();
        Ok((status, response.text().await?))
    }

    /// `GET https://127.0.0.1:<port><path>` presenting the client certificate `cert_pem`
    /// (with its key `key_pem`) in the TLS handshake: status and body.
    pub async fn get_with_certificate(
        &self,
        path: &str,
        cert_pem: &[u8],
        key_pem: &[u8],
    ) -> Result<(u16, String), reqwest::Error> {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        let mut roots = rustls::RootCertStore::empty();
        for cert in
            CertificateDer::pem_file_iter(&self.server_cert).expect("the serving certificate")
        {
            roots
                .add(cert.expect("a PEM certificate"))
                .expect("trusting the serving certificate");
        }
        let chain = CertificateDer::pem_slice_iter(cert_pem)
            .collect::<Result<Vec<_>, _>>()
            .expect("a PEM client certificate");
        let key = PrivateKeyDer::from_pem_slice(key_pem).expect("a PEM private key");
        let tls = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, key)
        .expect("a usable client certificate");
        let http = reqwest::Client::builder()
            .use_preconfigured_tls(tls)
            .timeout(Duration::from_secs(5))
            .build()
            .expect("building the HTTPS client");
        let response = http
            .get(format!("https://127.0.0.1:{}{path}", self.port))
            .send()
            .await?;
        let status = response.status().as_u16();
        Ok((status, response.text().await?))
    }

    /// The scraped /metrics text (panics if it cannot be read).
    pub async fn metrics(&self) -> String {
        match self.get("/metrics").await {
            Ok((200, text)) => text,
            other => panic!("scraping {}'s /metrics: {other:?}", self.name),
        }
    }

    /// Everything the process logged so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id().expect("the controller is still running")
    }

    /// Whether the process has exited, and how.
    pub fn try_wait(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().expect("polling the controller")
    }

    /// SIGKILL, as `kill -9`, and reap it.
    pub async fn kill9(&mut self) {
        self.child.start_kill().expect("killing the controller");
        let _ = self.child.wait().await;
    }

    /// SIGTERM, then waits up to `timeout` for the exit status.
    pub async fn terminate(&mut self, timeout: Duration) -> std::process::ExitStatus {
        let pid = self.pid().to_string();
        let status = std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .expect("running kill -TERM");
        assert!(status.success(), "kill -TERM {pid} failed");
        match tokio::time::timeout(timeout, self.child.wait()).await {
            Ok(status) => status.expect("waiting for the controller"),
            Err(_) => panic!(
                "controller {} did not exit within {timeout:?} of SIGTERM; log:\n{}",
                self.name,
                self.log_text()
            ),
        }
    }
}

/// A test that passed leaves no log behind; one that panicked keeps it (the panic message
/// names the controller, this line the file).
impl Drop for ControllerProcess {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "controller {}'s log is kept: {}",
                self.name,
                self.log.display()
            );
        } else {
            let _ = std::fs::remove_file(&self.log);
        }
    }
}

/// The value of the first sample in `metrics` whose series and labels start with `prefix`
/// (e.g. `workqueue_adds_total{name="deployment"}`), if any.
pub fn sample(metrics: &str, prefix: &str) -> Option<f64> {
    metrics
        .lines()
        .filter(|l| !l.starts_with('#'))
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_are_found_by_prefix() {
        let text = "# HELP x X.\nworkqueue_adds_total{name=\"deployment\"} 7\nup 1\n";
        assert_eq!(
            sample(text, "workqueue_adds_total{name=\"deployment\"}"),
            Some(7.0)
        );
        assert_eq!(sample(text, "up"), Some(1.0));
        assert_eq!(sample(text, "down"), None);
    }
}

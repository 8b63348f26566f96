//! Credentials through [`Transport`]: exec credential plugins (token, client certificate,
//! caching until expiry, re-running after a 401, failures) with a shell-script fixture, and
//! token-file reloading. Time-dependent tests run on tokio's paused clock.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use common::{chain, fixture, fixture_bytes, get, start_server};
use kctrl_config::{
    Auth, Config, ConfigError, ExecApiVersion, ExecError, ExecInteractiveMode, ExecProvider,
    Secret, Transport,
};

/// A temporary directory wired to `exec-plugin.sh`.
struct Plugin {
    dir: tempfile::TempDir,
}

impl Plugin {
    fn new() -> Self {
        Self {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    fn counter(&self) -> PathBuf {
        self.dir.path().join("counter")
    }

    fn runs(&self) -> u32 {
        std::fs::read_to_string(self.counter())
            .map(|s| s.trim().parse().unwrap())
            .unwrap_or(0)
    }

    /// Sets what the plugin prints next.
    fn respond(&self, status: serde_json::Value) {
        let credential = serde_json::json!({
            "apiVersion": "client.authentication.k8s.io/v1",
            "kind": "ExecCredential",
            "status": status,
        });
        std::fs::write(self.response(), credential.to_string()).unwrap();
    }

    fn response(&self) -> PathBuf {
        self.dir.path().join("response.json")
    }

    fn provider(&self) -> ExecProvider {
        let mut p = ExecProvider::new("sh", ExecApiVersion::V1);
        p.args = vec![fixture("exec-plugin.sh").to_string_lossy().into_owned()];
        p.env = vec![
            env("PLUGIN_COUNTER", &self.counter()),
            env("PLUGIN_RESPONSE", &self.response()),
            env("PLUGIN_CAPTURE", self.dir.path()),
        ];
        p
    }
}

impl Plugin {
    /// A provider whose runs announce their number when they start and then wait for the
    /// gate to open; each answers with the token `run-<number>`.
    fn gated(&self) -> (ExecProvider, Gated) {
        let fifo = self.dir.path().join("started");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(made.success(), "mkfifo failed");
        // Read-write, so the pipe always has a writer and a read waits for a run instead of
        // seeing the end of the file.
        let started = tokio::net::unix::pipe::OpenOptions::new()
            .read_write(true)
            .open_receiver(&fifo)
            .unwrap();
        let gate = self.dir.path().join("gate");
        let mut provider = self.provider();
        provider.env.push(env("PLUGIN_STARTED", &fifo));
        provider.env.push(env("PLUGIN_GATE", &gate));
        provider
            .env
            .push(("PLUGIN_TOKEN".to_owned(), Secret::from("run-")));
        (
            provider,
            Gated {
                started: tokio::io::BufReader::new(started),
                gate,
            },
        )
    }
}

/// The controls of a gated plugin.
struct Gated {
    started: tokio::io::BufReader<tokio::net::unix::pipe::Receiver>,
    gate: PathBuf,
}

impl Gated {
    /// Waits until a run has started; returns its number.
    async fn started(&mut self) -> u32 {
        use tokio::io::AsyncBufReadExt as _;
        let mut line = String::new();
        self.started.read_line(&mut line).await.unwrap();
        line.trim().parse().unwrap()
    }

    /// Lets runs answer.
    fn open(&self) {
        std::fs::write(&self.gate, "").unwrap();
    }

    /// Makes the next runs wait.
    fn close(&self) {
        std::fs::remove_file(&self.gate).unwrap();
    }
}

fn env(name: &str, path: &Path) -> (String, Secret<String>) {
    (
        name.to_owned(),
        Secret::new(path.to_string_lossy().into_owned()),
    )
}

/// A configuration trusting the test CA (so no system trust store is needed).
fn exec_config(server: &str, provider: ExecProvider) -> Config {
    let mut config = Config::new(server.parse().unwrap());
    config.tls.ca_pem = Some(fixture_bytes("ca.crt"));
    config.auth = Auth::Exec(provider);
    config
}

async fn authorization(transport: &Transport) -> String {
    let prepared = transport.prepare().await.unwrap();
    prepared.headers()["authorization"]
        .to_str()
        .unwrap()
        .to_owned()
}

/// Tells `transport` the server rejected the credential it hands out now.
async fn reject_current(transport: &Transport) {
    let prepared = transport.prepare().await.unwrap();
    transport.invalidate_credentials(prepared.credential());
}

#[tokio::test]
async fn exec_token_is_cached_and_refreshed_after_invalidation() {
    let plugin = Plugin::new();
    plugin.respond(serde_json::json!({"token": "exec-token-1"}));
    let transport = Transport::new(&exec_config("https://127.0.0.1:1", plugin.provider())).unwrap();
    assert_eq!(plugin.runs(), 0, "nothing runs before the first request");

    assert_eq!(authorization(&transport).await, "Bearer exec-token-1");
    assert_eq!(authorization(&transport).await, "Bearer exec-token-1");
    assert_eq!(plugin.runs(), 1, "one run for two requests");

    plugin.respond(serde_json::json!({"token": "exec-token-2"}));
    reject_current(&transport).await;
    assert_eq!(authorization(&transport).await, "Bearer exec-token-2");
    assert_eq!(authorization(&transport).await, "Bearer exec-token-2");
    assert_eq!(plugin.runs(), 2);
}

#[tokio::test]
async fn concurrent_requests_share_one_plugin_run() {
    let plugin = Plugin::new();
    plugin.respond(serde_json::json!({"token": "shared"}));
    let transport = Transport::new(&exec_config("https://127.0.0.1:1", plugin.provider())).unwrap();
    let (a, b, c) = tokio::join!(
        authorization(&transport),
        authorization(&transport),
        authorization(&transport)
    );
    assert_eq!(
        [a, b, c],
        ["Bearer shared", "Bearer shared", "Bearer shared"]
    );
    assert_eq!(plugin.runs(), 1);
}

#[tokio::test]
async fn exec_token_is_cached_until_its_expiry() {
    let plugin = Plugin::new();
    let in_one_hour = jiff::Timestamp::now() + jiff::SignedDuration::from_hours(1);
    plugin.respond(serde_json::json!({
        "token": "expiring",
        "expirationTimestamp": in_one_hour.to_string(),
    }));
    let transport = Transport::new(&exec_config("https://127.0.0.1:1", plugin.provider())).unwrap();
    assert_eq!(authorization(&transport).await, "Bearer expiring");
    assert_eq!(authorization(&transport).await, "Bearer expiring");
    assert_eq!(plugin.runs(), 1, "valid for an hour");

    // A credential that expired already serves the request it was fetched for, and the next
    // request runs the plugin again.
    plugin.respond(serde_json::json!({
        "token": "expired",
        "expirationTimestamp": "2001-02-03T04:05:06Z",
    }));
    reject_current(&transport).await;
    assert_eq!(authorization(&transport).await, "Bearer expired");
    assert_eq!(plugin.runs(), 2);
    assert_eq!(authorization(&transport).await, "Bearer expired");
    assert_eq!(plugin.runs(), 3, "run again once expired");
}

// A laptop that slept past the expiry: the wall clock moved, the monotonic clock (here
// tokio's, paused meanwhile) did not. The expiry is a wall-clock time, so it counts.
#[tokio::test]
async fn exec_credential_expiry_follows_the_wall_clock() {
    let plugin = Plugin::new();
    let expiry = jiff::Timestamp::now() + jiff::SignedDuration::from_secs(1);
    plugin.respond(serde_json::json!({
        "token": "short-lived",
        "expirationTimestamp": expiry.to_string(),
    }));
    let transport = Transport::new(&exec_config("https://127.0.0.1:1", plugin.provider())).unwrap();
    assert_eq!(authorization(&transport).await, "Bearer short-lived");

    tokio::time::pause();
    let expiry = std::time::SystemTime::from(expiry);
    while let Ok(left) = expiry.duration_since(std::time::SystemTime::now()) {
        // Blocks until the wall clock is past the expiry; tokio's clock stands still.
        std::thread::sleep(left + Duration::from_millis(10));
    }
    // (The plugin runs with the clock live: a paused clock would jump to its time limit.)
    tokio::time::resume();

    plugin.respond(serde_json::json!({"token": "renewed"}));
    assert_eq!(authorization(&transport).await, "Bearer renewed");
    assert_eq!(plugin.runs(), 2);
}

// A plugin slower than the request's timeout (a cloud login): the request gives up, the
// plugin goes on, and the next request gets what that run produced instead of starting it
// again.
#[tokio::test]
async fn a_plugin_run_outlives_the_request_that_started_it() {
    let plugin = Plugin::new();
    let (provider, mut gated) = plugin.gated();
    let transport = Transport::new(&exec_config("https://127.0.0.1:1", provider)).unwrap();
    {
        let first = authorization(&transport);
        tokio::pin!(first);
        tokio::select! {
            run = gated.started() => assert_eq!(run, 1),
            _ = &mut first => panic!("the gated plugin answered"),
        }
        // The first request is dropped here, as its timeout would drop it.
    }
    gated.open();
    assert_eq!(authorization(&transport).await, "Bearer run-1");
    assert_eq!(plugin.runs(), 1);
}

// After a 401 the rejected credential is not handed out again while its replacement is
// being fetched, even when the request that started the fetch gives up.
#[tokio::test]
async fn a_rejected_credential_is_not_used_while_its_replacement_is_fetched() {
    let plugin = Plugin::new();
    let (provider, mut gated) = plugin.gated();
    let transport = Transport::new(&exec_config("https://127.0.0.1:1", provider)).unwrap();
    gated.open();
    let first = transport.prepare().await.unwrap();
    assert_eq!(gated.started().await, 1);
    gated.close();
    transport.invalidate_credentials(first.credential());
    {
        let second = authorization(&transport);
        tokio::pin!(second);
        tokio::select! {
            run = gated.started() => assert_eq!(run, 2),
            _ = &mut second => panic!("the gated plugin answered"),
        }
    }
    gated.open();
    assert_eq!(authorization(&transport).await, "Bearer run-2");
    assert_eq!(plugin.runs(), 2);
}

// Two requests in flight with the same credential both get a 401: the first renews it, the
// second (arriving after the renewal) must not run the plugin again.
#[tokio::test]
async fn a_401_to_credentials_already_replaced_runs_no_plugin() {
    let plugin = Plugin::new();
    let mut provider = plugin.provider();
    provider
        .env
        .push(("PLUGIN_TOKEN".to_owned(), Secret::from("run-")));
    let transport = Transport::new(&exec_config("https://127.0.0.1:1", provider)).unwrap();
    let a = transport.prepare().await.unwrap();
    let b = transport.prepare().await.unwrap();
    assert_eq!(a.headers()["authorization"], "Bearer run-1");
    assert_eq!(a.credential(), b.credential());

    transport.invalidate_credentials(a.credential());
    assert_eq!(authorization(&transport).await, "Bearer run-2");
    transport.invalidate_credentials(b.credential());
    assert_eq!(authorization(&transport).await, "Bearer run-2");
    assert_eq!(plugin.runs(), 2);
}

#[tokio::test]
async fn exec_client_certificate_is_presented_and_rotated() {
    let port = start_server("server.crt", "server.key", Some("ca.crt")).await;
    let plugin = Plugin::new();
    let cert = String::from_utf8(fixture_bytes("client.crt")).unwrap();
    let key = String::from_utf8(fixture_bytes("client.key")).unwrap();
    plugin.respond(serde_json::json!({"clientCertificateData": cert, "clientKeyData": key}));
    let server = format!("https://127.0.0.1:{port}");
    let config = exec_config(&server, plugin.provider());
    let transport = Transport::new(&config).unwrap();
    let url = format!("{server}/");

    let body = get(&transport, &url).await.unwrap();
    assert!(
        body.contains("client-certs=1") && body.contains("auth=;"),
        "{body}"
    );
    let body = get(&transport, &url).await.unwrap();
    assert!(body.contains("client-certs=1"), "{body}");
    assert_eq!(plugin.runs(), 1);

    reject_current(&transport).await;
    let body = get(&transport, &url).await.unwrap();
    assert!(body.contains("client-certs=1"), "{body}");
    assert_eq!(plugin.runs(), 2);

    // Without the plugin's certificate the server refuses the connection.
    let mut anonymous = config.clone();
    anonymous.auth = Auth::None;
    let err = get(&Transport::new(&anonymous).unwrap(), &url).await;
    assert!(err.is_err());
}

#[tokio::test]
async fn exec_info_describes_the_request_and_the_cluster() {
    let plugin = Plugin::new();
    plugin.respond(serde_json::json!({"token": "t"}));
    let mut provider = plugin.provider();
    provider.args.push("--flag=value".to_owned());
    provider.provide_cluster_info = true;
    provider.cluster_config = Some(serde_json::json!({"audience": "foo"}));
    let mut config = exec_config("https://10.0.0.1:6443", provider);
    config.tls.server_name = Some("kubernetes".to_owned());
    Transport::new(&config).unwrap().prepare().await.unwrap();

    let info: serde_json::Value =
        serde_json::from_slice(&std::fs::read(plugin.dir.path().join("exec-info.json")).unwrap())
            .unwrap();
    assert_eq!(
        info,
        serde_json::json!({
            "apiVersion": "client.authentication.k8s.io/v1",
            "kind": "ExecCredential",
            "spec": {
                "interactive": false,
                "cluster": {
                    "server": "https://10.0.0.1:6443",
                    "tls-server-name": "kubernetes",
                    "certificate-authority-data": BASE64.encode(fixture_bytes("ca.crt")),
                    "config": {"audience": "foo"},
                },
            },
        })
    );
    let args = std::fs::read_to_string(plugin.dir.path().join("args.txt")).unwrap();
    assert_eq!(args, "--flag=value\n");

    // Without provideClusterInfo the cluster is not described.
    let mut provider = plugin.provider();
    provider.provide_cluster_info = false;
    Transport::new(&exec_config("https://10.0.0.1:6443", provider))
        .unwrap()
        .prepare()
        .await
        .unwrap();
    let info: serde_json::Value =
        serde_json::from_slice(&std::fs::read(plugin.dir.path().join("exec-info.json")).unwrap())
            .unwrap();
    assert_eq!(info["spec"], serde_json::json!({"interactive": false}));
}

#[tokio::test]
async fn a_failing_plugin_reports_command_status_and_stderr() {
    let plugin = Plugin::new();
    let mut provider = plugin.provider();
    provider.env.push((
        "PLUGIN_FAIL".to_owned(),
        Secret::from("boom: no credentials for you"),
    ));
    let transport = Transport::new(&exec_config("https://127.0.0.1:1", provider)).unwrap();
    let err = transport.prepare().await.unwrap_err();
    match &err {
        ConfigError::Exec(ExecError::Failed {
            command,
            exit_code,
            stderr,
            ..
        }) => {
            assert_eq!(command, "sh");
            assert_eq!(*exit_code, Some(3));
            assert_eq!(stderr, "boom: no credentials for you");
        }
        other => panic!("unexpected {other:?}"),
    }
    let text = err.to_string();
    assert!(
        text.contains("\"sh\"")
            && text.contains("exit code 3")
            && text.contains("boom: no credentials"),
        "{text}"
    );
    // A failure is not cached: the next request runs the plugin again.
    assert!(transport.prepare().await.is_err());
    assert_eq!(plugin.runs(), 2);
}

#[tokio::test]
async fn a_missing_plugin_shows_the_install_hint() {
    let mut provider = ExecProvider::new("kctrl-test-no-such-plugin", ExecApiVersion::V1);
    provider.install_hint = Some("install it with: brew install no-such-plugin".to_owned());
    let err = Transport::new(&exec_config("https://127.0.0.1:1", provider))
        .unwrap()
        .prepare()
        .await
        .unwrap_err();
    assert!(
        matches!(err, ConfigError::Exec(ExecError::NotFound { .. })),
        "{err:?}"
    );
    let text = err.to_string();
    assert!(text.contains("kctrl-test-no-such-plugin"), "{text}");
    assert!(text.contains("brew install no-such-plugin"), "{text}");
}

#[tokio::test]
async fn bad_plugin_output_is_an_error() {
    let plugin = Plugin::new();
    std::fs::write(plugin.response(), "{\"kind\": \"ExecCredential\"}").unwrap();
    let err = Transport::new(&exec_config("https://127.0.0.1:1", plugin.provider()))
        .unwrap()
        .prepare()
        .await
        .unwrap_err();
    assert!(
        matches!(err, ConfigError::Exec(ExecError::InvalidOutput { .. })),
        "{}",
        chain(&err)
    );
}

#[tokio::test(start_paused = true)]
async fn a_hung_plugin_is_killed_at_its_time_limit() {
    let mut provider = ExecProvider::new("sleep", ExecApiVersion::V1);
    provider.args = vec!["600".to_owned()];
    provider.timeout = Duration::from_secs(5);
    // The paused clock jumps to the time limit as soon as the runtime is idle.
    let err = Transport::new(&exec_config("https://127.0.0.1:1", provider))
        .unwrap()
        .prepare()
        .await
        .unwrap_err();
    assert!(
        matches!(err, ConfigError::Exec(ExecError::Timeout { .. })),
        "{err:?}"
    );
}

#[tokio::test]
async fn interactive_plugins_are_refused() {
    let plugin = Plugin::new();
    let mut provider = plugin.provider();
    provider.interactive_mode = ExecInteractiveMode::Always;
    let err = Transport::new(&exec_config("https://127.0.0.1:1", provider))
        .unwrap()
        .prepare()
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            ConfigError::Exec(ExecError::InteractiveRequired { .. })
        ),
        "{err:?}"
    );
    assert_eq!(plugin.runs(), 0);
}

#[tokio::test(start_paused = true)]
async fn token_file_is_reread_every_minute_and_after_a_401() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("token");
    std::fs::write(&path, "first\n").unwrap();
    let mut config = Config::new("https://127.0.0.1:1".parse().unwrap());
    config.tls.ca_pem = Some(fixture_bytes("ca.crt"));
    config.auth = Auth::TokenFile {
        path: path.clone(),
        token: Some(Secret::from("initial")),
    };
    let transport = Transport::new(&config).unwrap();

    assert_eq!(authorization(&transport).await, "Bearer first");
    std::fs::write(&path, "second").unwrap();
    tokio::time::advance(Duration::from_secs(30)).await;
    assert_eq!(
        authorization(&transport).await,
        "Bearer first",
        "cached within the minute"
    );
    tokio::time::advance(Duration::from_secs(30)).await;
    assert_eq!(
        authorization(&transport).await,
        "Bearer second",
        "re-read after a minute"
    );

    std::fs::write(&path, "third").unwrap();
    assert_eq!(authorization(&transport).await, "Bearer second");
    reject_current(&transport).await;
    assert_eq!(
        authorization(&transport).await,
        "Bearer third",
        "re-read after a 401"
    );

    // An unreadable file keeps the last token.
    std::fs::remove_file(&path).unwrap();
    reject_current(&transport).await;
    assert_eq!(authorization(&transport).await, "Bearer third");
}

#[tokio::test]
async fn token_file_falls_back_to_the_configured_token() {
    let mut config = Config::new("https://127.0.0.1:1".parse().unwrap());
    config.tls.ca_pem = Some(fixture_bytes("ca.crt"));
    config.auth = Auth::TokenFile {
        path: "/nonexistent/kctrl/token".into(),
        token: Some(Secret::from("initial")),
    };
    let transport = Transport::new(&config).unwrap();
    assert_eq!(authorization(&transport).await, "Bearer initial");

    config.auth = Auth::TokenFile {
        path: "/nonexistent/kctrl/token".into(),
        token: None,
    };
    let err = Transport::new(&config)
        .unwrap()
        .prepare()
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("/nonexistent/kctrl/token"),
        "{err}"
    );
}

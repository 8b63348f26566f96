//! Proxies from the process environment, end to end. The environment is process-wide, so each
//! scenario runs in a child process of this binary (`harness = false`): the parent runs a fake
//! proxy on 127.0.0.1 that answers every request with `proxied`, starts the child with the
//! scenario's variables, and checks what reached the proxy; the child runs a server on
//! 127.0.0.1 answering `direct` and checks where its requests went.

use std::io::{BufRead as _, BufReader, Write as _};
use std::net::TcpListener;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kctrl_config::{Config, Transport};

const SCENARIO: &str = "KCTRL_PROXY_TEST_SCENARIO";
const PROXY: &str = "KCTRL_PROXY_TEST_PROXY";
/// A name that never resolves (RFC 6761): only a proxy can answer for it.
const UNRESOLVABLE: &str = "kctrl-proxy-test.invalid";

fn main() {
    match std::env::var(SCENARIO) {
        Ok(scenario) => child(&scenario),
        Err(_) => parent(),
    }
}

/// Each scenario: its environment, and the request lines the proxy must see.
fn parent() {
    type Scenario = (
        &'static str,
        &'static [&'static str],
        &'static [&'static str],
    );
    let scenarios: &[Scenario] = &[
        (
            "http-proxy",
            &["HTTP_PROXY", "HTTPS_PROXY"],
            &[
                "GET http://kctrl-proxy-test.invalid:",
                "GET http://127.0.0.1:",
            ],
        ),
        (
            "lower-case",
            &["http_proxy"],
            &["GET http://kctrl-proxy-test.invalid:"],
        ),
        ("all-proxy", &["ALL_PROXY", "all_proxy"], &[]),
        ("no-proxy", &["HTTP_PROXY"], &[]),
    ];
    for (scenario, variables, expected) in scenarios {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let proxy = format!("http://{}", listener.local_addr().unwrap());
        let seen = Arc::new(Mutex::new(Vec::new()));
        let recorder = seen.clone();
        std::thread::spawn(move || fake_proxy(listener, recorder));

        let mut child = Command::new(std::env::current_exe().unwrap());
        for name in [
            "HTTP_PROXY",
            "http_proxy",
            "HTTPS_PROXY",
            "https_proxy",
            "ALL_PROXY",
            "all_proxy",
            "NO_PROXY",
            "no_proxy",
            "REQUEST_METHOD",
        ] {
            child.env_remove(name);
        }
        for name in *variables {
            child.env(name, &proxy);
        }
        if *scenario == "no-proxy" {
            child.env("NO_PROXY", ".invalid");
        }
        let output = child
            .env(SCENARIO, scenario)
            .env(PROXY, &proxy)
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "scenario {scenario} failed:\n{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        let seen = seen.lock().unwrap().clone();
        assert_eq!(
            seen.len(),
            expected.len(),
            "scenario {scenario}: the proxy saw {seen:?}"
        );
        for (line, prefix) in seen.iter().zip(expected.iter()) {
            assert!(line.starts_with(prefix), "scenario {scenario}: {seen:?}");
        }
        println!("proxy_env scenario {scenario} ... ok");
    }
}

/// Answers every request with `proxied`, recording its request line.
fn fake_proxy(listener: TcpListener, seen: Arc<Mutex<Vec<String>>>) {
    for stream in listener.incoming() {
        let Ok(mut stream) = stream else { return };
        let mut reader = BufReader::new(stream.try_clone().unwrap());
        let mut request_line = String::new();
        if reader.read_line(&mut request_line).is_err() {
            continue;
        }
        loop {
            let mut line = String::new();
            match reader.read_line(&mut line) {
                Ok(0) | Err(_) => break,
                Ok(_) if line == "\r\n" => break,
                Ok(_) => {}
            }
        }
        seen.lock().unwrap().push(request_line.trim().to_owned());
        let _ = stream
            .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 7\r\nconnection: close\r\n\r\nproxied");
    }
}

fn child(scenario: &str) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let port = direct_server().await;
        let loopback = format!("http://127.0.0.1:{port}/");
        let localhost = format!("http://localhost:{port}/");
        let elsewhere = format!("http://{UNRESOLVABLE}:{port}/");
        let env_transport = Transport::new(&config(&loopback)).unwrap();

        // Loopback servers are reached directly whatever the environment says.
        assert_eq!(
            get(&env_transport, &loopback).await.as_deref(),
            Ok("direct")
        );
        assert_eq!(
            get(&env_transport, &localhost).await.as_deref(),
            Ok("direct")
        );

        match scenario {
            "http-proxy" | "lower-case" => {
                // Other hosts go through the environment's proxy.
                assert_eq!(
                    get(&env_transport, &elsewhere).await.as_deref(),
                    Ok("proxied")
                );
            }
            // ALL_PROXY is not read; NO_PROXY exempts the host: the request goes out
            // directly, and the name does not resolve.
            "all-proxy" | "no-proxy" => {
                let result = get(&env_transport, &elsewhere).await;
                assert!(result.is_err(), "{result:?}");
            }
            other => panic!("unknown scenario {other}"),
        }

        if scenario == "http-proxy" {
            // An explicit proxy-url carries every request, loopback included (client-go's
            // http.ProxyURL).
            let mut explicit = config(&loopback);
            explicit.proxy_url = Some(std::env::var(PROXY).unwrap().parse().unwrap());
            let transport = Transport::new(&explicit).unwrap();
            assert_eq!(get(&transport, &loopback).await.as_deref(), Ok("proxied"));
        }
    });
}

fn config(server: &str) -> Config {
    Config::new(server.parse().unwrap())
}

/// A server on 127.0.0.1 answering every request with `direct`; returns its port.
async fn direct_server() -> u16 {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let _ = stream
                    .write_all(
                        b"HTTP/1.1 200 OK\r\ncontent-length: 6\r\nconnection: close\r\n\r\ndirect",
                    )
                    .await;
            });
        }
    });
    port
}

/// GET `url` through `transport`: the body, or the error. A request the proxy would answer
/// is answered at once; the bound only ends a name lookup that takes long.
async fn get(transport: &Transport, url: &str) -> Result<String, String> {
    let prepared = transport.prepare().await.map_err(|e| e.to_string())?;
    let send = async {
        prepared
            .request(http::Method::GET, url.parse().unwrap())
            .send()
            .await
            .map_err(|e| format!("{e:?}"))?
            .text()
            .await
            .map_err(|e| e.to_string())
    };
    tokio::time::timeout(Duration::from_secs(20), send)
        .await
        .unwrap_or_else(|_| Err("no answer within 20 s".to_owned()))
}

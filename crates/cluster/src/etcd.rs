//! Talking to etcd's HTTP endpoints (health and the v3 JSON gateway) on loopback with a
//! minimal blocking HTTP/1.1 client (plain HTTP on 127.0.0.1; no extra crate, no etcdctl).
//!
//! Compaction: `POST /v3/kv/range` (count-only) reports the current revision in its header;
//! `POST /v3/kv/compaction {"revision": N, "physical": true}` compacts everything before it.
//! A Rust test can do the same two calls against `$KCTRL_ETCD_ENDPOINT`.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};

/// `http://127.0.0.1:2379` -> `127.0.0.1:2379`.
fn socket_addr(endpoint: &str) -> Result<SocketAddr> {
    endpoint
        .strip_prefix("http://")
        .unwrap_or(endpoint)
        .trim_end_matches('/')
        .parse()
        .with_context(|| format!("bad etcd endpoint {endpoint:?}"))
}

/// One request; returns the status code and the body (de-chunked).
pub fn request(
    endpoint: &str,
    method: &str,
    path: &str,
    body: Option<&str>,
) -> Result<(u16, String)> {
    let addr = socket_addr(endpoint)?;
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    let body = body.unwrap_or("");
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw)?;
    parse_response(&raw)
}

fn parse_response(raw: &[u8]) -> Result<(u16, String)> {
    let text = String::from_utf8_lossy(raw);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| anyhow!("malformed HTTP response"))?;
    let status: u16 = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| anyhow!("malformed HTTP status line: {head:?}"))?;
    let chunked = head.lines().any(|l| {
        l.to_ascii_lowercase().starts_with("transfer-encoding:")
            && l.to_ascii_lowercase().contains("chunked")
    });
    let body = if chunked {
        dechunk(body)?
    } else {
        body.to_owned()
    };
    Ok((status, body))
}

fn dechunk(mut body: &str) -> Result<String> {
    let mut out = String::new();
    loop {
        let (size_line, rest) = body
            .split_once("\r\n")
            .ok_or_else(|| anyhow!("bad chunk"))?;
        let size = usize::from_str_radix(size_line.split(';').next().unwrap_or("").trim(), 16)?;
        if size == 0 {
            return Ok(out);
        }
        out.push_str(rest.get(..size).ok_or_else(|| anyhow!("short chunk"))?);
        body = rest.get(size + 2..).unwrap_or("");
    }
}

/// Whether etcd answers `GET /health` with `"health":"true"`.
pub fn healthy(endpoint: &str) -> bool {
    matches!(request(endpoint, "GET", "/health", None), Ok((200, body)) if body.contains("\"health\":\"true\""))
}

fn post_json(endpoint: &str, path: &str, body: &str) -> Result<serde_json::Value> {
    let (status, text) = request(endpoint, "POST", path, Some(body))?;
    if status != 200 {
        bail!("etcd {path} answered {status}: {text}");
    }
    serde_json::from_str(&text).with_context(|| format!("etcd {path} answered non-JSON: {text}"))
}

/// int64 fields come back as JSON strings from the gateway.
fn int64(v: &serde_json::Value) -> Option<i64> {
    v.as_i64().or_else(|| v.as_str()?.parse().ok())
}

/// The current revision of the store.
pub fn current_revision(endpoint: &str) -> Result<i64> {
    // key "/" (base64 "Lw=="), count only: the header carries the store's revision.
    let v = post_json(
        endpoint,
        "/v3/kv/range",
        r#"{"key":"Lw==","count_only":true}"#,
    )?;
    int64(&v["header"]["revision"]).ok_or_else(|| anyhow!("no header.revision in {v}"))
}

/// Compacts etcd at its current revision (physically, i.e. waits until it is applied).
/// Returns the compacted revision. Watches and exact-revision reads older than it now fail.
///
/// Concurrent callers (tests running in parallel) may race: one that read an older revision
/// finds etcd already compacted past it by another. That is no failure — every revision up to
/// the one it read is compacted — so it is reported as success.
pub fn compact(endpoint: &str) -> Result<i64> {
    let revision = current_revision(endpoint)?;
    match post_json(
        endpoint,
        "/v3/kv/compaction",
        &format!(r#"{{"revision":"{revision}","physical":true}}"#),
    ) {
        Ok(_) => Ok(revision),
        Err(e) if already_compacted(&format!("{e:#}")) => Ok(revision),
        Err(e) => Err(e).with_context(|| format!("compacting etcd at revision {revision}")),
    }
}

/// Whether an etcd error says the revision asked for was compacted already.
fn already_compacted(message: &str) -> bool {
    message.contains("required revision has been compacted")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_plain_and_chunked_responses() {
        let plain = b"HTTP/1.1 200 OK\r\nContent-Length: 17\r\n\r\n{\"health\":\"true\"}";
        assert_eq!(
            parse_response(plain).unwrap(),
            (200, "{\"health\":\"true\"}".to_owned())
        );
        let chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4\r\n{\"a\"\r\n3\r\n:1}\r\n0\r\n\r\n";
        assert_eq!(
            parse_response(chunked).unwrap(),
            (200, "{\"a\":1}".to_owned())
        );
    }

    #[test]
    fn a_compaction_overtaken_by_another_is_no_error() {
        assert!(already_compacted(
            r#"etcd /v3/kv/compaction answered 400: {"code":11, "message":"etcdserver: mvcc: required revision has been compacted"}"#
        ));
        assert!(!already_compacted(
            "etcd /v3/kv/compaction answered 500: boom"
        ));
    }

    #[test]
    fn reads_int64_as_string_or_number() {
        assert_eq!(int64(&serde_json::json!("42")), Some(42));
        assert_eq!(int64(&serde_json::json!(42)), Some(42));
        assert_eq!(socket_addr("http://127.0.0.1:2379/").unwrap().port(), 2379);
    }
}

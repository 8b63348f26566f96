//! Downloading a release binary into the version-keyed cache, verified against its published
//! SHA-256 before anything can run it.
//!
//! A download goes to a partial file beside its destination (`.<name>.<url hash>.part`, in the
//! same directory so that the final rename is atomic). An interrupted transfer (a dropped
//! connection, a failed request) is continued from where it stopped with an HTTP `Range`
//! request; a server that answers the range with the whole file (200) is read from the start
//! again. Only once the whole file's digest equals the published one is it made executable
//! and renamed to its final name, with a record of where it came from (`.<name>.download`:
//! URL, checksum URL, version, archive, digest, time) beside it; a mismatch removes the file
//! and fails naming the URL and both digests. The final name therefore only ever holds a
//! complete, verified file.
//!
//! A binary recorded as downloaded is used only while its digest still equals the recorded
//! one and the record names what would be downloaded now: the same URL (so the same mirror),
//! version and archive ([`recorded`]). A moved etcd pin or another mirror downloads again.
//!
//! A URL's user-info (`https://user:token@mirror/…`) is used for the request only: every URL
//! shown, logged, recorded or returned is [`without_userinfo`].

use std::fs;
use std::io::{Read as _, Write as _};
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use reqwest::StatusCode;
use reqwest::header::{CONTENT_RANGE, RANGE};

use crate::Error;

/// How many times one file's transfer is tried (the first try included) before giving up.
const ATTEMPTS: u32 = 4;
/// The pause before the second try; doubled before each later one.
const FIRST_BACKOFF: Duration = Duration::from_millis(250);
/// A checksum file is small: anything larger is not one.
const MAX_CHECKSUM_FILE: usize = 1 << 20;

/// The HTTP client of the downloads: rustls with the ring provider and the operating system's
/// trust store (as kctrl's own clients), HTTP/1.1, redirects followed (release hosts redirect
/// to their CDNs), proxies from the usual environment variables unless `direct` (a mirror on
/// loopback must not be sent to `$HTTPS_PROXY`).
fn build_client(direct: bool) -> Result<reqwest::Client, Error> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = rustls_platform_verifier::Verifier::new(provider.clone())
        .map_err(|e| download_setup(format!("loading the system's trust store: {e}")))?;
    let mut tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| download_setup(e.to_string()))?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(verifier))
        .with_no_client_auth();
    tls.alpn_protocols = vec![b"http/1.1".to_vec()];
    let mut builder = reqwest::Client::builder()
        .tls_backend_preconfigured(tls)
        .http1_only()
        .connect_timeout(Duration::from_secs(30))
        // No overall timeout (a binary is 100 MiB); a stalled body fails the read instead.
        .read_timeout(Duration::from_secs(60))
        .user_agent(concat!("kctrl-testenv/", env!("CARGO_PKG_VERSION")));
    if direct {
        builder = builder.no_proxy();
    }
    builder.build().map_err(|e| download_setup(e.to_string()))
}

/// The client for downloads from the Internet (or a mirror elsewhere).
pub(crate) fn client() -> Result<reqwest::Client, Error> {
    build_client(false)
}

fn download_setup(reason: String) -> Error {
    Error::Download {
        url: "(none yet)".into(),
        reason: format!("setting up the HTTP client: {reason}"),
    }
}

/// The client for `url`: `shared` (from [`client`]), or one that bypasses proxies when the
/// host is loopback.
pub(crate) fn client_for(url: &str, shared: &reqwest::Client) -> Result<reqwest::Client, Error> {
    if is_loopback(url) {
        build_client(true)
    } else {
        Ok(shared.clone())
    }
}

/// Whether `url`'s host is this machine (`localhost` or a loopback address).
pub(crate) fn is_loopback(url: &str) -> bool {
    reqwest::Url::parse(url)
        .ok()
        .and_then(|u| u.host_str().map(str::to_owned))
        .is_some_and(|h| {
            h == "localhost"
                || h.trim_start_matches('[')
                    .trim_end_matches(']')
                    .parse::<std::net::IpAddr>()
                    .is_ok_and(|ip| ip.is_loopback())
        })
}

/// The SHA-256 of the file at `path`, in lower-case hex.
pub(crate) fn sha256_file(path: &Path) -> std::io::Result<String> {
    let mut file = fs::File::open(path)?;
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        ctx.update(&buf[..n]);
    }
    Ok(hex(ctx.finish().as_ref()))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Whether `s` is a SHA-256 digest in hex (either case).
fn is_digest(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// The digest a checksum file gives: with `name`, the line `<digest>  <name>` (or `*<name>`,
/// as `sha256sum -b` writes) of a list such as etcd's `SHA256SUMS`; without, the file's first
/// word (Kubernetes' `<binary>.sha256` holds the digest alone).
pub(crate) fn parse_checksum(text: &str, name: Option<&str>) -> Option<String> {
    let digest = match name {
        None => text.split_whitespace().next()?,
        Some(name) => text.lines().find_map(|line| {
            let mut words = line.split_whitespace();
            let digest = words.next()?;
            let file = words.next()?.trim_start_matches('*');
            (file == name).then_some(digest)
        })?,
    };
    is_digest(digest).then(|| digest.to_ascii_lowercase())
}

/// Fetches the checksum file at `url` and returns the digest it gives (see
/// [`parse_checksum`]).
pub(crate) async fn fetch_checksum(
    client: &reqwest::Client,
    url: &str,
    name: Option<&str>,
) -> Result<String, Error> {
    let failed = |reason: String| Error::Download {
        url: without_userinfo(url),
        reason,
    };
    let mut last = String::new();
    for attempt in 0..ATTEMPTS {
        if attempt > 0 {
            tokio::time::sleep(FIRST_BACKOFF * 2u32.pow(attempt - 1)).await;
        }
        let response = match client.get(url).send().await {
            Ok(r) => r,
            Err(e) => {
                last = scrub(&error_chain(&e), url);
                continue;
            }
        };
        let status = response.status();
        if !status.is_success() {
            last = format!("the server answered {status}");
            if status.is_server_error() {
                continue;
            }
            return Err(failed(last));
        }
        let body = match response.bytes().await {
            Ok(b) => b,
            Err(e) => {
                last = scrub(&error_chain(&e), url);
                continue;
            }
        };
        if body.len() > MAX_CHECKSUM_FILE {
            return Err(failed(format!(
                "{} bytes is too large for a checksum file",
                body.len()
            )));
        }
        let text = String::from_utf8_lossy(&body);
        return parse_checksum(&text, name).ok_or_else(|| {
            failed(match name {
                Some(name) => format!("it lists no SHA-256 digest for {name}"),
                None => "it does not hold a SHA-256 digest".to_owned(),
            })
        });
    }
    Err(failed(format!("{last} ({ATTEMPTS} tries)")))
}

/// `e` with its sources, which say what actually failed (reqwest's own message is generic).
fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// The partial file of a download of `url` to `dest`: beside it (same file system, so the
/// final rename is atomic), named after the URL so that a different file is never resumed.
pub(crate) fn partial_path(dest: &Path, url: &str) -> PathBuf {
    let name = dest
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    dest.with_file_name(format!(
        ".{name}.{:016x}.part",
        kctrl_client::sharding::hash_field(url)
    ))
}

/// `url` without its user-info (`https://user:token@host/…` -> `https://host/…`): what is
/// shown, logged and recorded of a URL.
pub(crate) fn without_userinfo(url: &str) -> String {
    match userinfo(url) {
        Some((start, userinfo)) => {
            format!("{}{}", &url[..start], &url[start + userinfo.len() + 1..])
        }
        None => url.to_owned(),
    }
}

/// Where `url`'s user-info starts and what it is (without the `@` that ends it).
fn userinfo(url: &str) -> Option<(usize, &str)> {
    let start = url.find("://")? + 3;
    let rest = &url[start..];
    let authority = &rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())];
    authority.rfind('@').map(|at| (start, &authority[..at]))
}

/// `text` (an error from a request to `url`) with `url`'s user-info removed wherever it
/// appears.
fn scrub(text: &str, url: &str) -> String {
    let mut clean = match userinfo(url) {
        Some((_, info)) => text
            .replace(url, &without_userinfo(url))
            .replace(&format!("{info}@"), ""),
        None => return text.to_owned(),
    };
    // The HTTP client shows the URL as it parsed it, with the user-info percent-encoded
    // (`tok=` becomes `tok%3D`): that form goes too.
    if let Ok(parsed) = reqwest::Url::parse(url) {
        let encoded = match parsed.password() {
            Some(password) => format!("{}:{password}@", parsed.username()),
            None => format!("{}@", parsed.username()),
        };
        if encoded != "@" {
            clean = clean.replace(&encoded, "");
        }
    }
    clean
}

/// `bytes <first>-<last>/<total>` of a `Content-Range` header (`total` may be `*`).
fn parse_content_range(value: &str) -> Option<(u64, u64, Option<u64>)> {
    let (range, total) = value.strip_prefix("bytes ")?.split_once('/')?;
    let (first, last) = range.split_once('-')?;
    let (first, last) = (first.trim().parse().ok()?, last.trim().parse().ok()?);
    let total = match total.trim() {
        "*" => None,
        t => Some(t.parse().ok()?),
    };
    (first <= last && total.is_none_or(|t| last < t)).then_some((first, last, total))
}

/// Downloads `url` to `dest` and checks that its SHA-256 is `expected` (hex), resuming an
/// interrupted transfer with a `Range` request (see the module documentation). On success
/// `dest` holds the verified file with `mode`; on failure it is untouched and no partial file
/// that failed verification is left behind.
pub(crate) async fn download_verified(
    client: &reqwest::Client,
    url: &str,
    expected: &str,
    dest: &Path,
    mode: u32,
) -> Result<(), Error> {
    let shown = without_userinfo(url);
    let partial = partial_path(dest, &shown);
    let failed = |reason: String| Error::Download {
        url: shown.clone(),
        reason,
    };
    let io = |context: String| {
        move |source: std::io::Error| Error::Io {
            context: context.clone(),
            source,
        }
    };
    let mut last = String::new();
    let mut attempt = 0;
    // A partial file of an earlier run whose bytes turn out wrong (or a body that ended early
    // without a length to tell) is dropped once and the download started from zero; a fresh
    // download that does not match is an error.
    let mut restarted_after_mismatch = false;
    // The file's length, once a response told it (Content-Length of a 200, or the total of a
    // Content-Range).
    let mut total_len: Option<u64> = None;
    loop {
        if attempt == ATTEMPTS {
            return Err(failed(format!("{last} ({ATTEMPTS} tries)")));
        }
        if attempt > 0 {
            tokio::time::sleep(FIRST_BACKOFF * 2u32.pow(attempt - 1)).await;
        }
        attempt += 1;
        let have = fs::metadata(&partial).map(|m| m.len()).unwrap_or(0);
        let mut request = client.get(url);
        if have > 0 {
            request = request.header(RANGE, format!("bytes={have}-"));
        }
        let mut response = match request.send().await {
            Ok(r) => r,
            Err(e) => {
                last = scrub(&error_chain(&e), url);
                continue;
            }
        };
        let status = response.status();
        // Where the file ends (when known) once this response's body is written.
        let part_end: Option<u64>;
        let mut file = match status {
            StatusCode::PARTIAL_CONTENT if have > 0 => {
                let range = response
                    .headers()
                    .get(CONTENT_RANGE)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("");
                // The continuation asked for, of a file of the length an earlier answer
                // gave (another length: another file).
                let continuation = parse_content_range(range).filter(|(first, _, total)| {
                    *first == have
                        && match (total, total_len) {
                            (Some(t), Some(known)) => *t == known,
                            _ => true,
                        }
                });
                let Some((_, range_last, total)) = continuation else {
                    // Not the continuation asked for: start over.
                    tracing::warn!(url = %shown, range, have, "unexpected Content-Range; restarting");
                    let _ = fs::remove_file(&partial);
                    last = format!(
                        "the server resumed with {range:?} instead of from byte {have}{}",
                        total_len.map_or(String::new(), |t| format!(" of {t}"))
                    );
                    total_len = None;
                    continue;
                };
                total_len = total.or(total_len);
                part_end = Some(range_last + 1);
                tracing::info!(url = %shown, from = have, "resuming the download");
                fs::OpenOptions::new()
                    .append(true)
                    .open(&partial)
                    .map_err(io(format!("opening {}", partial.display())))?
            }
            StatusCode::OK => {
                if have > 0 {
                    tracing::info!(url = %shown, "the server ignores Range; downloading from the start");
                }
                total_len = response.content_length();
                part_end = total_len;
                fs::File::create(&partial).map_err(io(format!("creating {}", partial.display())))?
            }
            StatusCode::RANGE_NOT_SATISFIABLE if have > 0 => {
                // The partial file may already be whole (the last try died after the body);
                // the digest decides.
                tracing::info!(url = %shown, have, "range not satisfiable; checking what is there");
                match verify_and_install_off_thread(&partial, expected, dest, mode).await {
                    Ok(()) => return Ok(()),
                    Err(_) => {
                        let _ = fs::remove_file(&partial);
                        last = "the server refused to resume and the partial file was wrong".into();
                        continue;
                    }
                }
            }
            s => {
                last = format!("the server answered {s}");
                if s.is_server_error() || s == StatusCode::TOO_MANY_REQUESTS {
                    continue;
                }
                return Err(failed(last));
            }
        };
        let resumed = status == StatusCode::PARTIAL_CONTENT;
        // Without a length, a body cut short looks complete: only the digest can tell.
        let unsized_body = response.content_length().is_none();
        // The body, chunk by chunk; a broken connection keeps what arrived for the next try.
        let mut received = 0u64;
        let body_ok = loop {
            match response.chunk().await {
                Ok(Some(bytes)) => {
                    file.write_all(&bytes)
                        .map_err(io(format!("writing {}", partial.display())))?;
                    received += bytes.len() as u64;
                }
                Ok(None) => break true,
                Err(e) => {
                    last = format!("the transfer broke: {}", scrub(&error_chain(&e), url));
                    break false;
                }
            }
        };
        file.sync_all()
            .map_err(io(format!("writing {}", partial.display())))?;
        drop(file);
        if !body_ok {
            tracing::warn!(url = %shown, reason = %last, "download interrupted; will resume");
            continue;
        }
        // A correct answer for a shorter range than asked (`bytes N-M/T` with M+1 < T): the
        // file is still partial, so ask for the rest. Progress was made, so this is no failed
        // try.
        let now = fs::metadata(&partial).map(|m| m.len()).unwrap_or(0);
        if let (Some(end), Some(total)) = (part_end, total_len)
            && end < total
            && now == end
            && received > 0
        {
            tracing::info!(url = %shown, have = now, total, "the server sent part of the rest; asking for more");
            attempt = 0;
            continue;
        }
        match verify_and_install_off_thread(&partial, expected, dest, mode).await {
            Ok(()) => return Ok(()),
            Err(VerifyError::Io(e)) => return Err(e),
            Err(VerifyError::Mismatch(actual)) => {
                let _ = fs::remove_file(&partial);
                if (resumed || unsized_body) && !restarted_after_mismatch {
                    tracing::warn!(
                        url = %shown,
                        resumed,
                        unsized_body,
                        "the file does not match (resumed from a stale part, or cut short \
                         without a length); downloading it again"
                    );
                    restarted_after_mismatch = true;
                    total_len = None;
                    attempt = 0;
                    continue;
                }
                return Err(Error::ChecksumMismatch {
                    url: shown,
                    expected: expected.to_owned(),
                    actual,
                });
            }
        }
    }
}

enum VerifyError {
    /// The digest of the file.
    Mismatch(String),
    Io(Error),
}

/// [`verify_and_install`] on a blocking thread (hashing 100 MiB takes a while).
async fn verify_and_install_off_thread(
    partial: &Path,
    expected: &str,
    dest: &Path,
    mode: u32,
) -> Result<(), VerifyError> {
    let (p, e, d) = (
        partial.to_path_buf(),
        expected.to_owned(),
        dest.to_path_buf(),
    );
    tokio::task::spawn_blocking(move || verify_and_install(&p, &e, &d, mode))
        .await
        .unwrap_or_else(|e| {
            Err(VerifyError::Io(Error::Io {
                context: format!("verifying {}", partial.display()),
                source: std::io::Error::other(e.to_string()),
            }))
        })
}

/// Checks `partial`'s digest against `expected`; when it matches, gives it `mode` and renames
/// it to `dest` (atomically: same directory).
fn verify_and_install(
    partial: &Path,
    expected: &str,
    dest: &Path,
    mode: u32,
) -> Result<(), VerifyError> {
    let io = |context: String| {
        move |source: std::io::Error| VerifyError::Io(Error::Io { context, source })
    };
    let actual = sha256_file(partial).map_err(io(format!("reading {}", partial.display())))?;
    if !actual.eq_ignore_ascii_case(expected) {
        return Err(VerifyError::Mismatch(actual));
    }
    fs::set_permissions(partial, fs::Permissions::from_mode(mode))
        .map_err(io(format!("making {} executable", partial.display())))?;
    fs::rename(partial, dest).map_err(io(format!(
        "renaming {} to {}",
        partial.display(),
        dest.display()
    )))?;
    Ok(())
}

/// What a download is of: written into its record, and compared with what would be
/// downloaded now before a recorded file is used again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Source {
    /// What is downloaded (the binary, or the archive it is taken from), without user-info.
    pub(crate) url: String,
    /// The checksum file it is verified against, without user-info.
    pub(crate) checksum_url: String,
    /// The version of what is downloaded: Kubernetes' (`v1.37.2`), or etcd's for etcd.
    pub(crate) version: String,
    /// The archive the binary is taken from (etcd's), if any.
    pub(crate) archive: Option<String>,
}

/// Where a downloaded binary came from, kept beside it as `.<name>.download`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Record {
    /// What was downloaded.
    pub(crate) source: Source,
    /// The SHA-256 of the binary as installed.
    pub(crate) sha256: String,
    /// When (RFC 3339, UTC).
    pub(crate) downloaded_at: String,
}

/// The record file of the binary at `binary`.
pub(crate) fn record_path(binary: &Path) -> PathBuf {
    let name = binary
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    binary.with_file_name(format!(".{name}.download"))
}

impl Record {
    fn to_text(&self) -> String {
        let s = &self.source;
        format!(
            "url {}\nchecksum-url {}\nversion {}\n{}sha256 {}\ndownloaded-at {}\n",
            without_userinfo(&s.url),
            without_userinfo(&s.checksum_url),
            s.version,
            s.archive
                .as_ref()
                .map_or(String::new(), |a| format!("archive {a}\n")),
            self.sha256,
            self.downloaded_at
        )
    }

    fn parse(text: &str) -> Option<Record> {
        let field = |key: &str| {
            text.lines().find_map(|l| {
                let (k, v) = l.split_once(' ')?;
                (k == key).then(|| v.trim().to_owned())
            })
        };
        Some(Record {
            source: Source {
                url: field("url")?,
                checksum_url: field("checksum-url")?,
                // A record of an older kctrl has no version: it is downloaded again.
                version: field("version")?,
                archive: field("archive"),
            },
            sha256: field("sha256").filter(|d| is_digest(d))?,
            downloaded_at: field("downloaded-at")?,
        })
    }

    /// Writes the record of `binary` (through a temporary file and a rename). The temporary
    /// file's name is its own (`.<name>.download.<pid>.tmp`): never the `.<name>.tmp` that the
    /// build writes its binary to.
    pub(crate) fn write(&self, binary: &Path) -> Result<(), Error> {
        let path = record_path(binary);
        let tmp = path.with_file_name(format!(
            "{}.{}.tmp",
            path.file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
            std::process::id()
        ));
        let write = || -> std::io::Result<()> {
            let mut f = fs::File::create(&tmp)?;
            f.write_all(self.to_text().as_bytes())?;
            f.sync_all()?;
            fs::rename(&tmp, &path)
        };
        write().map_err(|source| Error::Io {
            context: format!("writing {}", path.display()),
            source,
        })
    }
}

/// The record of the downloaded binary at `binary`, if it has one, it is a download of
/// `expected` (the same URL, version and archive: a moved pin or another mirror is not), and
/// the file's digest still equals the recorded one; otherwise `None`, with a warning when the
/// file was there but is not what is expected now.
pub(crate) fn recorded(binary: &Path, expected: &Source) -> Option<Record> {
    let record = Record::parse(&fs::read_to_string(record_path(binary)).ok()?)?;
    let expected = Source {
        url: without_userinfo(&expected.url),
        checksum_url: without_userinfo(&expected.checksum_url),
        ..expected.clone()
    };
    if record.source.url != expected.url
        || record.source.version != expected.version
        || record.source.archive != expected.archive
    {
        tracing::info!(
            binary = %binary.display(),
            recorded_url = %record.source.url,
            recorded_version = %record.source.version,
            expected_url = %expected.url,
            expected_version = %expected.version,
            "a cached download is of another version or mirror than expected now; not using it"
        );
        eprintln!(
            "kctrl-testenv: {} was downloaded from {} ({}), but {} ({}) is expected now; not \
             using it",
            binary.display(),
            record.source.url,
            record.source.version,
            expected.url,
            expected.version
        );
        return None;
    }
    let actual = sha256_file(binary).ok()?;
    if actual == record.sha256 {
        Some(record)
    } else {
        tracing::warn!(
            binary = %binary.display(),
            recorded = %record.sha256,
            actual = %actual,
            "a cached download no longer matches its recorded checksum; not using it"
        );
        eprintln!(
            "kctrl-testenv: {} no longer matches the SHA-256 recorded when it was downloaded \
             ({} recorded, {actual} now); not using it",
            binary.display(),
            record.sha256
        );
        None
    }
}

/// Extracts the member `member` of the gzip-compressed tar archive `archive` to `dest`
/// (through a temporary directory beside it, then a rename), with the system's `tar`.
pub(crate) fn extract_member(archive: &Path, member: &str, dest: &Path) -> Result<(), Error> {
    let dir = dest.with_file_name(format!(
        ".extract-{}-{}",
        std::process::id(),
        kctrl_client::sharding::hash_field(member)
    ));
    let _ = fs::remove_dir_all(&dir);
    let io = |context: String| move |source: std::io::Error| Error::Io { context, source };
    fs::create_dir_all(&dir).map_err(io(format!("creating {}", dir.display())))?;
    let result = (|| {
        let out = std::process::Command::new("tar")
            .arg("-xzf")
            .arg(archive)
            .arg("-C")
            .arg(&dir)
            .arg(member)
            .output()
            .map_err(io(
                "running tar (needed to unpack etcd's release archive)".into()
            ))?;
        if !out.status.success() {
            return Err(Error::Download {
                url: archive.display().to_string(),
                reason: format!(
                    "tar could not extract {member}: {}",
                    String::from_utf8_lossy(&out.stderr).trim()
                ),
            });
        }
        let extracted = dir.join(member);
        fs::set_permissions(&extracted, fs::Permissions::from_mode(0o755))
            .map_err(io(format!("making {} executable", extracted.display())))?;
        fs::rename(&extracted, dest).map_err(io(format!("renaming to {}", dest.display())))
    })();
    let _ = fs::remove_dir_all(&dir);
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checksum_files_of_both_shapes_are_read() {
        let d = "a".repeat(64);
        assert_eq!(parse_checksum(&format!("{d}\n"), None), Some(d.clone()));
        assert_eq!(
            parse_checksum(&format!("{d}  kube-apiserver\n"), None),
            Some(d.clone())
        );
        let e = "B".repeat(64);
        let sums =
            format!("{d}  etcd-v3.7.0-darwin-arm64.zip\n{e} *etcd-v3.7.0-linux-amd64.tar.gz\n");
        assert_eq!(
            parse_checksum(&sums, Some("etcd-v3.7.0-linux-amd64.tar.gz")),
            Some("b".repeat(64))
        );
        assert_eq!(
            parse_checksum(&sums, Some("etcd-v3.7.0-linux-arm64.tar.gz")),
            None
        );
        assert_eq!(parse_checksum("<html>not found</html>", None), None);
        assert_eq!(parse_checksum(&"a".repeat(63), None), None);
    }

    #[test]
    fn records_round_trip_and_detect_a_changed_binary() {
        let dir = std::env::temp_dir().join(format!("kctrl-testenv-record-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let bin = dir.join("kube-apiserver");
        fs::write(&bin, b"#!/bin/sh\necho hi\n").unwrap();
        let source = Source {
            url: "http://127.0.0.1:1/kube-apiserver".into(),
            checksum_url: "http://127.0.0.1:1/kube-apiserver.sha256".into(),
            version: "v1.37.2".into(),
            archive: None,
        };
        let record = Record {
            source: source.clone(),
            sha256: sha256_file(&bin).unwrap(),
            downloaded_at: "2026-11-30T09:00:00Z".into(),
        };
        record.write(&bin).unwrap();
        assert_eq!(record_path(&bin), dir.join(".kube-apiserver.download"));
        assert_eq!(recorded(&bin, &source), Some(record.clone()));
        // Another version or archive than expected now.
        let other = Source {
            version: "v1.37.3".into(),
            ..source.clone()
        };
        assert_eq!(recorded(&bin, &other), None);
        let archived = Source {
            archive: Some("etcd-v3.6.8-linux-amd64.tar.gz".into()),
            ..source.clone()
        };
        assert_eq!(recorded(&bin, &archived), None);
        fs::write(&bin, b"#!/bin/sh\necho changed\n").unwrap();
        assert_eq!(recorded(&bin, &source), None);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn partial_files_are_beside_the_destination_and_keyed_by_url() {
        let dest = Path::new("/c/k8s-v1.37.2/bin/kubectl");
        let a = partial_path(dest, "https://a/kubectl");
        let b = partial_path(dest, "https://b/kubectl");
        assert_eq!(a.parent(), dest.parent());
        assert!(
            a.file_name()
                .unwrap()
                .to_str()
                .unwrap()
                .starts_with(".kubectl.")
        );
        assert_ne!(a, b);
    }

    #[test]
    fn user_info_is_removed_from_urls_and_errors() {
        assert_eq!(
            without_userinfo("https://user:tok@en@mirror.example/a/b?c=d@e"),
            "https://mirror.example/a/b?c=d@e"
        );
        assert_eq!(
            without_userinfo("http://token@127.0.0.1:8080"),
            "http://127.0.0.1:8080"
        );
        assert_eq!(
            without_userinfo("https://dl.k8s.io/release/v1.37.2/x@y"),
            "https://dl.k8s.io/release/v1.37.2/x@y"
        );
        assert_eq!(without_userinfo("not a url"), "not a url");
        let url = "https://user:s3cret@mirror/kubectl";
        let text = format!(
            "error sending request for url ({url}): connecting to user:s3cret@mirror failed"
        );
        let clean = scrub(&text, url);
        assert!(!clean.contains("s3cret"), "{clean}");
        assert!(clean.contains("https://mirror/kubectl"), "{clean}");
        // A token with characters the URL parser percent-encodes, in the form the HTTP
        // client's errors show.
        let url = "https://ci:dG9rZW4=@mirror/kubectl";
        let shown = reqwest::Url::parse(url).unwrap().to_string();
        assert!(shown.contains("dG9rZW4%3D"), "{shown}");
        let clean = scrub(&format!("error sending request for url ({shown})"), url);
        assert!(!clean.contains("dG9rZW4"), "{clean}");
        assert!(clean.contains("https://mirror/kubectl"), "{clean}");
    }

    #[test]
    fn content_ranges_are_read_and_checked() {
        assert_eq!(
            parse_content_range("bytes 100-199/1000"),
            Some((100, 199, Some(1000)))
        );
        assert_eq!(
            parse_content_range("bytes 100-199/*"),
            Some((100, 199, None))
        );
        assert_eq!(parse_content_range("bytes 100-1000/1000"), None);
        assert_eq!(parse_content_range("bytes 200-100/1000"), None);
        assert_eq!(parse_content_range("bytes */1000"), None);
        assert_eq!(parse_content_range(""), None);
    }

    #[test]
    fn sha256_of_a_known_input() {
        let path = std::env::temp_dir().join(format!("kctrl-testenv-sha-{}", std::process::id()));
        fs::write(&path, b"abc").unwrap();
        assert_eq!(
            sha256_file(&path).unwrap(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        fs::remove_file(&path).unwrap();
    }
}

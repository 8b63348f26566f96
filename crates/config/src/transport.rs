//! [`Transport`]: the HTTP client and per-request credentials for one [`Config`] (client-go's
//! `transport.New` + `HTTPWrappersForConfig`).
//!
//! The REST layer calls [`Transport::prepare`] before every request and builds the request
//! with [`PreparedRequest::request`]; on HTTP 401 it hands the request's
//! [`CredentialId`] to [`Transport::invalidate_credentials`], so a rotated token file is
//! re-read and an exec plugin is run again before the next request, unless that already
//! happened since the rejected credential was taken.
//!
//! Connection defaults from client-go where reqwest can express them: connect timeout 30 s,
//! TCP keep-alive 30 s, at most 25 idle connections per host, HTTP/2 (negotiated by ALPN) with
//! a health-check ping after 30 s without traffic that fails the connection if unanswered for
//! 15 s. The environment knobs work as in client-go: `HTTP2_READ_IDLE_TIMEOUT_SECONDS` (0
//! disables the ping), `HTTP2_PING_TIMEOUT_SECONDS` (0 means the default, 15 s) and
//! `DISABLE_HTTP2` (any non-empty value); a malformed or negative number keeps the default,
//! with a warning. Not expressible:
//! the TLS handshake timeout (10 s in Go) is covered only by the connect timeout.
//!
//! Proxies as in client-go: a configured `proxy-url` carries every request; without one, the
//! environment's `HTTPS_PROXY` / `HTTP_PROXY` / `NO_PROXY` apply as Go's
//! `http.ProxyFromEnvironment` applies them (`localhost` and loopback addresses are never
//! proxied, `ALL_PROXY` is not read; the rules are listed at
//! [`Config::proxy_url`](crate::Config::proxy_url)). The environment is read when the
//! transport is built.
//!
//! `disable_compression` turns off every response decompression reqwest may have been built
//! with; without reqwest's compression features no compression is requested anyway.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use http::header::AUTHORIZATION;
use http::{HeaderMap, HeaderValue};

use crate::auth::exec::{ExecAuthenticator, ExecCluster, ExecCredentials};
use crate::auth::token_file::TokenFileSource;
use crate::auth::{Auth, basic_header, bearer_header};
use crate::config::Config;
use crate::error::ConfigError;
use crate::proxy::EnvProxy;
use crate::tls::{ClientIdentity, ServerTrust, TlsConfig, rustls_config};

/// Dial timeout (client-go: 30 s).
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// TCP keep-alive (client-go: 30 s).
pub const TCP_KEEPALIVE: Duration = Duration::from_secs(30);
/// Idle connections kept per host (client-go's `MaxIdleConnsPerHost`: 25).
pub const MAX_IDLE_PER_HOST: usize = 25;
/// HTTP/2 health-check ping after this long without frames (client-go's read-idle timeout).
pub const HTTP2_READ_IDLE_TIMEOUT: Duration = Duration::from_secs(30);
/// HTTP/2 ping answer deadline (client-go: 15 s).
pub const HTTP2_PING_TIMEOUT: Duration = Duration::from_secs(15);

/// The largest value the HTTP/2 environment knobs take (about 100 years): larger ones are cut
/// to it, so a timer never overflows the clock.
const MAX_ENV_SECONDS: u64 = 100 * 365 * 24 * 60 * 60;

/// The HTTP transport for one [`Config`]: the TLS-configured HTTP client and the
/// credentials to attach to each request. Cheap to clone (shared state).
#[derive(Clone)]
pub struct Transport {
    inner: Arc<Inner>,
}

struct Inner {
    /// The client for the configuration's own TLS identity.
    client: reqwest::Client,
    settings: ClientSettings,
    /// Impersonation headers, sent with every request.
    static_headers: HeaderMap,
    credentials: Credentials,
    /// The client built for the current exec-plugin certificate, with the run it came from.
    exec_client: std::sync::Mutex<Option<(u64, reqwest::Client)>>,
}

enum Credentials {
    None,
    Static(HeaderValue),
    TokenFile(TokenFileSource),
    Exec(Box<ExecAuthenticator>),
}

/// What every client of a transport shares; only the TLS identity differs.
struct ClientSettings {
    tls: TlsConfig,
    trust: ServerTrust,
    /// The configuration's `proxy-url`: every request goes through it.
    proxy: Option<url::Url>,
    /// Without one, the environment's proxies.
    env_proxy: Arc<EnvProxy>,
    /// `tls-server-name` sent as SNI (through the request URL), if it is.
    sni: Option<Arc<SniRewrite>>,
    user_agent: String,
    disable_compression: bool,
    http2: Http2Settings,
}

#[derive(Clone, Copy, Debug)]
struct Http2Settings {
    enabled: bool,
    read_idle: Option<Duration>,
    ping_timeout: Duration,
}

impl Http2Settings {
    fn from_env() -> Self {
        Self::from_lookup(|name| std::env::var_os(name))
    }

    /// The settings for an environment in which `lookup` finds variables.
    fn from_lookup(lookup: impl Fn(&str) -> Option<std::ffi::OsString>) -> Self {
        let seconds = |name: &str, default: Duration| match lookup(name) {
            Some(v) => match v.to_str() {
                Some(text) => match text.trim().parse::<u64>() {
                    Ok(s) => Duration::from_secs(s.min(MAX_ENV_SECONDS)),
                    Err(_) => {
                        tracing::warn!(variable = name, value = %text, "ignoring a malformed duration in seconds");
                        default
                    }
                },
                None => default,
            },
            None => default,
        };
        let read_idle = seconds("HTTP2_READ_IDLE_TIMEOUT_SECONDS", HTTP2_READ_IDLE_TIMEOUT);
        let ping_timeout = seconds("HTTP2_PING_TIMEOUT_SECONDS", HTTP2_PING_TIMEOUT);
        Self {
            enabled: lookup("DISABLE_HTTP2").is_none_or(|v| v.is_empty()),
            // 0 turns the health check off (client-go).
            read_idle: (!read_idle.is_zero()).then_some(read_idle),
            // 0 is not a usable deadline: Go's HTTP/2 transport reads it as its default.
            ping_timeout: if ping_timeout.is_zero() {
                HTTP2_PING_TIMEOUT
            } else {
                ping_timeout
            },
        }
    }
}

impl ClientSettings {
    fn build(&self, identity: Option<&ClientIdentity>) -> Result<reqwest::Client, ConfigError> {
        let alpn: &[&[u8]] = if self.http2.enabled {
            &[b"h2", b"http/1.1"]
        } else {
            &[b"http/1.1"]
        };
        let tls = rustls_config(&self.tls, identity, self.trust, alpn)?;
        let mut builder = reqwest::Client::builder();
        if let Some(sni) = &self.sni {
            builder = builder.dns_resolver(Arc::new(ServerNameResolver(sni.clone())));
        }
        let mut builder = builder
            .tls_backend_preconfigured(tls)
            .connect_timeout(CONNECT_TIMEOUT)
            .tcp_keepalive(TCP_KEEPALIVE)
            .pool_max_idle_per_host(MAX_IDLE_PER_HOST)
            .user_agent(self.user_agent.as_str());
        if self.http2.enabled {
            if let Some(idle) = self.http2.read_idle {
                builder = builder
                    .http2_keep_alive_interval(idle)
                    .http2_keep_alive_timeout(self.http2.ping_timeout)
                    .http2_keep_alive_while_idle(true);
            }
        } else {
            builder = builder.http1_only();
        }
        // reqwest's own reading of the environment (which honours ALL_PROXY and proxies
        // loopback servers) is never used.
        builder = builder.no_proxy();
        if let Some(proxy) = &self.proxy {
            // As client-go's `http.ProxyURL`: every request, loopback and NO_PROXY included.
            builder = builder
                .proxy(reqwest::Proxy::all(proxy.as_str()).map_err(ConfigError::HttpClient)?);
        } else if !self.env_proxy.is_empty() {
            let env = self.env_proxy.clone();
            let sni = self.sni.clone();
            builder = builder.proxy(reqwest::Proxy::custom(move |url| {
                env_proxy_for(&env, sni.as_deref(), url)
            }));
        }
        if self.disable_compression {
            builder = builder.no_gzip().no_brotli().no_deflate().no_zstd();
        }
        builder.build().map_err(ConfigError::HttpClient)
    }
}

impl Transport {
    /// Builds the transport for `config`: parses its certificates and keys, builds the HTTP
    /// client, and prepares its credentials. Nothing is read from disk or executed yet for
    /// token files and exec plugins: that happens on the first [`prepare`](Self::prepare).
    pub fn new(config: &Config) -> Result<Self, ConfigError> {
        Self::with_env_proxy(config, EnvProxy::from_env())
    }

    fn with_env_proxy(config: &Config, env_proxy: EnvProxy) -> Result<Self, ConfigError> {
        let settings = ClientSettings {
            tls: config.tls.clone(),
            trust: if config.is_https() {
                ServerTrust::Verify
            } else {
                ServerTrust::NotUsed
            },
            proxy: config.proxy_url.clone(),
            sni: SniRewrite::for_config(config, &env_proxy).map(Arc::new),
            env_proxy: Arc::new(env_proxy),
            user_agent: config.user_agent.clone().unwrap_or_else(default_user_agent),
            disable_compression: config.disable_compression,
            http2: Http2Settings::from_env(),
        };
        let client = settings.build(config.tls.client_identity.as_ref())?;
        let static_headers = match &config.impersonate {
            Some(imp) => imp.headers()?,
            None => HeaderMap::new(),
        };
        let credentials = match &config.auth {
            Auth::None => Credentials::None,
            Auth::BearerToken(token) => Credentials::Static(bearer_header(token.expose())?),
            Auth::Basic { username, password } => {
                Credentials::Static(basic_header(username, password.expose())?)
            }
            Auth::TokenFile { path, token } => {
                Credentials::TokenFile(TokenFileSource::new(path.clone(), token.clone()))
            }
            Auth::Exec(provider) => {
                let cluster = provider
                    .provide_cluster_info
                    .then(|| ExecCluster::for_config(config, provider));
                Credentials::Exec(Box::new(ExecAuthenticator::new(provider.clone(), cluster)))
            }
        };
        Ok(Self {
            inner: Arc::new(Inner {
                client,
                settings,
                static_headers,
                credentials,
                exec_client: std::sync::Mutex::new(None),
            }),
        })
    }

    /// What the next request needs: the HTTP client, the authentication headers, and which
    /// credential they carry.
    ///
    /// Reads a token file that is due for re-reading, waits for an exec plugin run when its
    /// credential is missing, expired or rejected (the run goes on if this future is
    /// dropped), and (when a plugin supplies a client certificate) uses a client presenting
    /// that certificate, built once per certificate.
    pub async fn prepare(&self) -> Result<PreparedRequest, ConfigError> {
        let inner = &*self.inner;
        let mut headers = inner.static_headers.clone();
        let (client, credential) = match &inner.credentials {
            Credentials::None => (inner.client.clone(), 0),
            Credentials::Static(value) => {
                headers.insert(AUTHORIZATION, value.clone());
                (inner.client.clone(), 0)
            }
            Credentials::TokenFile(source) => {
                let (token, generation) = source.token().await?;
                headers.insert(AUTHORIZATION, bearer_header(token.expose())?);
                (inner.client.clone(), generation)
            }
            Credentials::Exec(authenticator) => {
                let creds = authenticator.credentials().await?;
                if let Some(token) = &creds.token {
                    headers.insert(AUTHORIZATION, bearer_header(token.expose())?);
                }
                let client = match &creds.identity {
                    Some(_) => self.client_for(&creds)?,
                    None => inner.client.clone(),
                };
                (client, creds.generation)
            }
        };
        Ok(PreparedRequest {
            client,
            headers,
            credential: CredentialId(credential),
            sni: inner.settings.sni.clone(),
        })
    }

    /// Tells the transport the server answered 401 to a request that carried `rejected`.
    /// If that credential is still the current one, a token file is re-read and an exec
    /// plugin runs again before the next request; if it was already replaced (the 401 of a
    /// request that was in flight while the credential was renewed), nothing happens.
    pub fn invalidate_credentials(&self, rejected: CredentialId) {
        match &self.inner.credentials {
            Credentials::TokenFile(source) => {
                if source.invalidate(rejected.0) {
                    tracing::debug!(path = %source.path().display(), "credentials rejected: the token file will be re-read");
                } else {
                    tracing::debug!(path = %source.path().display(), "an older token was rejected: the file was read again since");
                }
            }
            Credentials::Exec(authenticator) => {
                if authenticator.invalidate(rejected.0) {
                    tracing::debug!("credentials rejected: the exec plugin will run again");
                } else {
                    tracing::debug!(
                        "older credentials were rejected: the exec plugin already replaced them"
                    );
                }
            }
            Credentials::None | Credentials::Static(_) => {}
        }
    }

    /// The client for an exec-plugin certificate, reused while the plugin's answer is.
    fn client_for(&self, creds: &ExecCredentials) -> Result<reqwest::Client, ConfigError> {
        let mut cached = self
            .inner
            .exec_client
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((generation, client)) = cached.as_ref()
            && *generation == creds.generation
        {
            return Ok(client.clone());
        }
        let client = self.inner.settings.build(creds.identity.as_ref())?;
        *cached = Some((creds.generation, client.clone()));
        Ok(client)
    }
}

/// Which credential a request carried, as [`Transport::prepare`] chose it: handed back to
/// [`Transport::invalidate_credentials`] when the server rejects it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CredentialId(u64);

/// What one request needs from a [`Transport`]: the client to send it with, the
/// authentication and impersonation headers, and the credential they carry.
#[derive(Clone)]
pub struct PreparedRequest {
    client: reqwest::Client,
    headers: HeaderMap,
    credential: CredentialId,
    sni: Option<Arc<SniRewrite>>,
}

impl PreparedRequest {
    /// A request to `url` with the authentication and impersonation headers attached. Add
    /// the request's own headers with [`RequestBuilder::headers`](reqwest::RequestBuilder::headers).
    ///
    /// With a `tls-server-name` that is sent as SNI, a URL on the configured server is sent
    /// with that name as its host (the TLS handshake takes SNI from it; the connection still
    /// goes to the server's address), so the `Host` header names it too.
    pub fn request(&self, method: http::Method, mut url: url::Url) -> reqwest::RequestBuilder {
        if let Some(sni) = &self.sni {
            sni.apply(&mut url);
        }
        self.client
            .request(method, url)
            .headers(self.headers.clone())
    }

    /// The authentication and impersonation headers.
    pub fn headers(&self) -> &HeaderMap {
        &self.headers
    }

    /// The credential the headers (or the client's certificate) carry.
    pub fn credential(&self) -> CredentialId {
        self.credential
    }
}

/// How `tls-server-name` reaches the server as SNI: reqwest takes SNI from the request URL's
/// host, so requests to the server name `name` in their URL, and [`ServerNameResolver`]
/// connects that name to the server's own host.
#[derive(Debug)]
struct SniRewrite {
    /// `tls-server-name`.
    name: String,
    /// The server URL's host and port.
    server_host: url::Host<String>,
    server_port: Option<u16>,
}

impl SniRewrite {
    /// The rewrite for `config`, when its `tls-server-name` is a DNS name other than the
    /// server's host (an IP address is never sent as SNI, in Go's TLS as in rustls) and no
    /// proxy is configured (a proxy would be asked to connect to the name instead of the
    /// server; SNI is then the server URL's host).
    fn for_config(config: &Config, env_proxy: &EnvProxy) -> Option<Self> {
        let name = config
            .tls
            .server_name
            .as_deref()
            .filter(|n| !n.is_empty())?;
        if !config.is_https() {
            return None;
        }
        let url::Host::Domain(domain) = url::Host::parse(name).ok()? else {
            return None;
        };
        let server_host = config.server.host()?.to_owned();
        if matches!(&server_host, url::Host::Domain(h) if h.eq_ignore_ascii_case(&domain)) {
            return None;
        }
        if config.proxy_url.is_some() || env_proxy.proxy_for(&config.server).is_some() {
            tracing::debug!(
                tls_server_name = name,
                "a proxy is configured: tls-server-name verifies the certificate but is not sent as SNI"
            );
            return None;
        }
        Some(Self {
            name: domain,
            server_host,
            server_port: config.server.port_or_known_default(),
        })
    }

    /// Whether `url` is a request to the server that [`apply`](Self::apply) rewrote.
    fn is_rewritten(&self, url: &url::Url) -> bool {
        url.scheme() == "https"
            && url
                .host_str()
                .is_some_and(|h| h.eq_ignore_ascii_case(&self.name))
            && url.port_or_known_default() == self.server_port
    }

    /// Puts the name in `url` if it points at the server.
    fn apply(&self, url: &mut url::Url) {
        let to_server = url.scheme() == "https"
            && url.host().is_some_and(|h| h.to_owned() == self.server_host)
            && url.port_or_known_default() == self.server_port;
        if to_server {
            // A domain that parsed as one is accepted by `set_host`.
            let _ = url.set_host(Some(&self.name));
        }
    }
}

/// The environment's proxy for a request to `url`, decided on the server's own URL: a URL
/// that [`SniRewrite`] pointed at `tls-server-name` goes to the server directly, as
/// [`SniRewrite::for_config`] found no proxy for the server (Go's rules look at the request
/// URL's host, never at the TLS server name).
fn env_proxy_for(env: &EnvProxy, sni: Option<&SniRewrite>, url: &url::Url) -> Option<url::Url> {
    if sni.is_some_and(|sni| sni.is_rewritten(url)) {
        return None;
    }
    env.proxy_for(url)
}

/// Resolves the `tls-server-name` of rewritten request URLs to the server's own addresses;
/// other names resolve as usual.
struct ServerNameResolver(Arc<SniRewrite>);

impl reqwest::dns::Resolve for ServerNameResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let host = if name.as_str().eq_ignore_ascii_case(&self.0.name) {
            match &self.0.server_host {
                url::Host::Domain(d) => d.clone(),
                url::Host::Ipv4(ip) => ip.to_string(),
                url::Host::Ipv6(ip) => ip.to_string(),
            }
        } else {
            name.as_str().to_owned()
        };
        Box::pin(async move {
            // The port is the URL's; the connector sets it.
            let addrs: Vec<std::net::SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            Ok(Box::new(addrs.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

impl fmt::Debug for PreparedRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Header names only: values carry credentials.
        f.debug_struct("PreparedRequest")
            .field("headers", &self.headers.keys().collect::<Vec<_>>())
            .field("credential", &self.credential)
            .finish_non_exhaustive()
    }
}

impl fmt::Debug for Transport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let credentials = match &self.inner.credentials {
            Credentials::None => "none",
            Credentials::Static(_) => "static",
            Credentials::TokenFile(_) => "token file",
            Credentials::Exec(_) => "exec plugin",
        };
        f.debug_struct("Transport")
            .field("credentials", &credentials)
            .field("impersonating", &!self.inner.static_headers.is_empty())
            .field("proxy", &self.inner.settings.proxy.is_some())
            .field("sni", &self.inner.settings.sni.as_ref().map(|s| &s.name))
            .field("http2", &self.inner.settings.http2)
            .finish_non_exhaustive()
    }
}

/// `<program>/<version> (<os>/<arch>) kctrl`, after client-go's
/// `<binary>/<version> (<os>/<arch>) kubernetes/<commit>`.
pub fn default_user_agent() -> String {
    let program = std::env::current_exe()
        .ok()
        .and_then(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()))
        .filter(|s| !s.is_empty() && s.is_ascii())
        .unwrap_or_else(|| "kctrl".to_owned());
    format!(
        "{program}/v{} ({}/{}) kctrl",
        env!("CARGO_PKG_VERSION"),
        std::env::consts::OS,
        std::env::consts::ARCH
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Secret;
    use crate::auth::Impersonation;

    fn config(server: &str) -> Config {
        Config::new(url::Url::parse(server).unwrap())
    }

    #[tokio::test]
    async fn static_credentials_and_impersonation_headers() {
        let mut c = config("https://127.0.0.1:6443");
        c.tls.ca_pem = Some(include_bytes!("../tests/fixtures/ca.crt").to_vec());
        c.auth = Auth::BearerToken(Secret::from("abc"));
        c.impersonate = Some(Impersonation {
            user: "bob".into(),
            groups: vec!["g".into()],
            ..Impersonation::default()
        });
        let t = Transport::new(&c).unwrap();
        let prepared = t.prepare().await.unwrap();
        let headers = prepared.headers();
        assert_eq!(headers[AUTHORIZATION], "Bearer abc");
        assert!(headers[AUTHORIZATION].is_sensitive());
        assert_eq!(headers["impersonate-user"], "bob");
        assert_eq!(headers["impersonate-group"], "g");

        c.auth = Auth::Basic {
            username: "u".into(),
            password: Secret::from("p"),
        };
        let prepared = Transport::new(&c).unwrap().prepare().await.unwrap();
        assert_eq!(prepared.headers()[AUTHORIZATION], "Basic dTpw");
        let debug = format!("{t:?}");
        assert!(!debug.contains("abc"), "{debug}");
    }

    #[tokio::test]
    async fn plain_http_needs_no_trust_store_and_sends_no_auth_when_none() {
        let t = Transport::new(&config("http://127.0.0.1:8080")).unwrap();
        let prepared = t.prepare().await.unwrap();
        assert!(prepared.headers().is_empty());
        t.invalidate_credentials(prepared.credential());
    }

    #[test]
    fn bad_pem_fails_at_construction() {
        let mut c = config("https://127.0.0.1:6443");
        c.tls.ca_pem = Some(b"ca-data".to_vec());
        assert!(matches!(
            Transport::new(&c),
            Err(ConfigError::InvalidPem { .. })
        ));
    }

    #[test]
    fn proxy_urls_are_accepted() {
        for proxy in [
            "http://proxy:3128",
            "https://proxy:443",
            "socks5://proxy:1080",
        ] {
            let mut c = config("http://127.0.0.1:8080");
            c.proxy_url = Some(url::Url::parse(proxy).unwrap());
            Transport::new(&c).unwrap();
        }
    }

    fn http2_with(vars: &[(&str, &str)]) -> Http2Settings {
        Http2Settings::from_lookup(|name| {
            vars.iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| std::ffi::OsString::from(v))
        })
    }

    #[test]
    fn http2_health_check_settings_follow_client_go() {
        let defaults = http2_with(&[]);
        assert!(defaults.enabled);
        assert_eq!(defaults.read_idle, Some(HTTP2_READ_IDLE_TIMEOUT));
        assert_eq!(defaults.ping_timeout, HTTP2_PING_TIMEOUT);

        let set = http2_with(&[
            ("HTTP2_READ_IDLE_TIMEOUT_SECONDS", "10"),
            ("HTTP2_PING_TIMEOUT_SECONDS", "3"),
        ]);
        assert_eq!(set.read_idle, Some(Duration::from_secs(10)));
        assert_eq!(set.ping_timeout, Duration::from_secs(3));

        // A read-idle timeout of 0 turns the health check off.
        assert_eq!(
            http2_with(&[("HTTP2_READ_IDLE_TIMEOUT_SECONDS", "0")]).read_idle,
            None
        );
        // A ping timeout of 0 is the default (15 s), not "fail every ping at once".
        assert_eq!(
            http2_with(&[("HTTP2_PING_TIMEOUT_SECONDS", "0")]).ping_timeout,
            HTTP2_PING_TIMEOUT
        );
        // Malformed and negative values keep the defaults.
        let bad = http2_with(&[
            ("HTTP2_READ_IDLE_TIMEOUT_SECONDS", "soon"),
            ("HTTP2_PING_TIMEOUT_SECONDS", "-1"),
        ]);
        assert_eq!(bad.read_idle, Some(HTTP2_READ_IDLE_TIMEOUT));
        assert_eq!(bad.ping_timeout, HTTP2_PING_TIMEOUT);

        assert!(!http2_with(&[("DISABLE_HTTP2", "1")]).enabled);
        assert!(http2_with(&[("DISABLE_HTTP2", "")]).enabled);
    }

    #[test]
    fn tls_server_name_is_sni_unless_a_proxy_carries_the_request() {
        let mut c = config("https://10.0.0.1:6443");
        c.tls.ca_pem = Some(include_bytes!("../tests/fixtures/ca.crt").to_vec());
        c.tls.server_name = Some("kubernetes.test".to_owned());
        let sni = |c: &Config, env: &[(&str, &str)]| {
            let env = EnvProxy::from_lookup(|name| {
                env.iter()
                    .find(|(n, _)| *n == name)
                    .map(|(_, v)| (*v).to_owned())
            });
            let t = Transport::with_env_proxy(c, env).unwrap();
            t.inner.settings.sni.as_ref().map(|s| s.name.clone())
        };
        assert_eq!(sni(&c, &[]).as_deref(), Some("kubernetes.test"));
        // The proxy would be asked to connect to the name instead of the server.
        assert_eq!(sni(&c, &[("HTTPS_PROXY", "proxy:3128")]), None);
        assert_eq!(
            sni(
                &c,
                &[("HTTPS_PROXY", "proxy:3128"), ("NO_PROXY", "10.0.0.0/8")]
            )
            .as_deref(),
            Some("kubernetes.test")
        );
        let mut explicit = c.clone();
        explicit.proxy_url = Some(url::Url::parse("http://proxy:3128").unwrap());
        assert_eq!(sni(&explicit, &[]), None);
        // An IP address is never SNI; the server's own name needs no rewriting.
        let mut ip = c.clone();
        ip.tls.server_name = Some("10.0.0.2".to_owned());
        assert_eq!(sni(&ip, &[]), None);
        let mut same = c.clone();
        same.server = url::Url::parse("https://Kubernetes.test:6443").unwrap();
        assert_eq!(sni(&same, &[]), None);
    }

    #[test]
    fn the_environment_proxy_is_decided_on_the_server_not_the_tls_server_name() {
        let env = EnvProxy::from_lookup(|name| match name {
            "HTTPS_PROXY" => Some("http://proxy.test:3128".to_owned()),
            "NO_PROXY" => Some("10.0.0.0/8,.corp.test".to_owned()),
            _ => None,
        });
        let decide = |server: &str, url: &str| {
            let mut c = config(server);
            c.tls.ca_pem = Some(include_bytes!("../tests/fixtures/ca.crt").to_vec());
            c.tls.server_name = Some("kubernetes.test".to_owned());
            let sni =
                SniRewrite::for_config(&c, &env).expect("SNI is sent: the server is not proxied");
            let mut url = url::Url::parse(url).unwrap();
            sni.apply(&mut url);
            assert_eq!(url.host_str(), Some("kubernetes.test"), "{url}");
            env_proxy_for(&env, Some(&sni), &url)
        };
        // The servers NO_PROXY exempts, and loopback, are reached directly after the rewrite.
        assert_eq!(
            decide("https://10.0.0.1:6443", "https://10.0.0.1:6443/api"),
            None
        );
        assert_eq!(
            decide("https://127.0.0.1:6443", "https://127.0.0.1:6443/api"),
            None
        );
        assert_eq!(
            decide("https://api.corp.test", "https://api.corp.test/api"),
            None
        );
        // Other hosts still follow the environment.
        let other = url::Url::parse("https://elsewhere.test/").unwrap();
        assert!(env_proxy_for(&env, None, &other).is_some());
    }

    #[test]
    fn default_user_agent_names_os_and_arch() {
        let ua = default_user_agent();
        assert!(
            ua.contains(std::env::consts::OS) && ua.ends_with(" kctrl"),
            "{ua}"
        );
        assert!(HeaderValue::from_str(&ua).is_ok());
    }
}

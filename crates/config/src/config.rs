//! [`Config`]: everything needed to reach and authenticate to one API server (client-go's
//! `rest.Config`), however it was obtained (kubeconfig, in-cluster, or code).

use std::fmt;
use std::time::Duration;

use crate::auth::{Auth, Impersonation};
use crate::tls::TlsConfig;

/// Connection settings for one API server, resolved from a kubeconfig, the in-cluster
/// environment or code. This is client-go's `rest.Config`.
///
/// `Debug` never prints secrets: tokens, passwords and keys are [`Secret`](crate::Secret)s,
/// certificate data is shown as a size, and passwords in URLs are masked.
#[derive(Clone, PartialEq)]
pub struct Config {
    /// Base URL of the API server, e.g. `https://127.0.0.1:6443`.
    pub server: url::Url,
    /// Namespace used when a request names none: `--namespace`, else the context's namespace,
    /// else (in a pod) the service account's namespace, else `default`.
    pub default_namespace: String,
    /// Sustained client-side request rate. Zero means client-go's default (5); negative disables limiting.
    pub qps: f32,
    /// Burst of the client-side rate limiter. Zero means client-go's default (10).
    pub burst: u32,
    /// Timeout of a whole non-watch request; `None` waits forever, and so do zero and a
    /// duration too large to be a point in time (such as `Duration::MAX`).
    pub timeout: Option<Duration>,
    /// User-Agent header; `None` uses a default naming this crate.
    pub user_agent: Option<String>,
    /// How to trust the server, and the client certificate to present.
    pub tls: TlsConfig,
    /// The request credential (bearer token, token file, basic auth or exec plugin).
    pub auth: Auth,
    /// Act as another user (`Impersonate-*` headers).
    pub impersonate: Option<Impersonation>,
    /// Send every request through this proxy (`proxy-url`: http, https or socks5), whatever
    /// the server's address and `NO_PROXY` say, as client-go does.
    ///
    /// When `None`, the environment applies, read as Go's `http.ProxyFromEnvironment` (which
    /// client-go uses) reads it:
    /// - `HTTPS_PROXY` (or `https_proxy`) for an `https://` server, `HTTP_PROXY` (or
    ///   `http_proxy`) for an `http://` one; `host:port` means `http://host:port`; `ALL_PROXY`
    ///   is not read;
    /// - `localhost` and loopback addresses (`127.0.0.0/8`, `::1`) are never proxied, so a
    ///   local cluster (kind, minikube, a test control plane) stays reachable in a proxied CI;
    /// - `NO_PROXY` (or `no_proxy`) lists exceptions: `*`, IP addresses, CIDR blocks, and
    ///   domains matching themselves and their subdomains (`.example.com` and `*.example.com`
    ///   only the subdomains), each optionally with a `:port`;
    /// - with `REQUEST_METHOD` set (a CGI program), `HTTP_PROXY` is ignored.
    pub proxy_url: Option<url::Url>,
    /// Do not ask for compressed responses (`disable-compression`).
    pub disable_compression: bool,
}

impl Config {
    /// A configuration for `server` with client-go's defaults and no credentials.
    pub fn new(server: url::Url) -> Self {
        Self {
            server,
            default_namespace: "default".to_owned(),
            qps: 0.0,
            burst: 0,
            timeout: None,
            user_agent: None,
            tls: TlsConfig::default(),
            auth: Auth::None,
            impersonate: None,
            proxy_url: None,
            disable_compression: false,
        }
    }

    /// Whether requests go over TLS. Credentials from a kubeconfig are only applied when
    /// they do (client-go's `IsConfigTransportTLS`).
    pub fn is_https(&self) -> bool {
        self.server.scheme() == "https"
    }
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Config")
            .field("server", &RedactedUrl(&self.server))
            .field("default_namespace", &self.default_namespace)
            .field("qps", &self.qps)
            .field("burst", &self.burst)
            .field("timeout", &self.timeout)
            .field("user_agent", &self.user_agent)
            .field("tls", &self.tls)
            .field("auth", &self.auth)
            .field("impersonate", &self.impersonate)
            .field("proxy_url", &self.proxy_url.as_ref().map(RedactedUrl))
            .field("disable_compression", &self.disable_compression)
            .finish()
    }
}

/// Prints a URL with its password replaced.
struct RedactedUrl<'a>(&'a url::Url);

impl fmt::Debug for RedactedUrl<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", redacted_url(self.0))
    }
}

/// `url` as text fit for logs and error messages: a password in its userinfo
/// (`https://user:secret@host`) is replaced by `redacted`, as Go's `URL.Redacted` does.
pub fn redacted_url(url: &url::Url) -> String {
    if url.password().is_some() {
        let mut url = url.clone();
        let _ = url.set_password(Some("redacted"));
        url.into()
    } else {
        url.as_str().to_owned()
    }
}

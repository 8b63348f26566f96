//! How to reach and authenticate to a Kubernetes API server.
//!
//! (Interface sketch: to be completed.)

use std::time::Duration;

/// Connection settings for one API server, resolved from a kubeconfig, the in-cluster
/// environment or code. This is client-go's `rest.Config`.
#[derive(Clone, Debug)]
pub struct Config {
    /// Base URL of the API server, e.g. `https://127.0.0.1:6443`.
    pub server: url::Url,
    /// Namespace used when a request names none.
    pub default_namespace: String,
    /// Sustained client-side request rate. Zero means client-go's default (5); negative disables limiting.
    pub qps: f32,
    /// Burst of the client-side rate limiter. Zero means client-go's default (10).
    pub burst: u32,
    /// Timeout of a whole non-watch request; `None` waits forever.
    pub timeout: Option<Duration>,
    /// User-Agent header; `None` uses a default naming this crate.
    pub user_agent: Option<String>,
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
        }
    }
}

/// Errors building a configuration or credentials.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The HTTP client could not be built.
    #[error("building the HTTP client: {0}")]
    HttpClient(#[source] reqwest::Error),
    /// The TLS configuration is not usable.
    #[error("TLS configuration: {0}")]
    Tls(#[source] rustls::Error),
}

/// The HTTP transport for one [`Config`]: the TLS-configured HTTP client and the
/// credentials to attach to each request.
#[derive(Clone, Debug)]
pub struct Transport {
    client: reqwest::Client,
}

impl Transport {
    /// Builds the transport for `config`.
    pub fn new(_config: &Config) -> Result<Self, ConfigError> {
        // Always hand reqwest a rustls config built with the ring provider explicitly:
        // reqwest is compiled without a bundled provider.
        let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
        let tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(ConfigError::Tls)?
            .with_root_certificates(rustls::RootCertStore::empty())
            .with_no_client_auth();
        let client = reqwest::Client::builder()
            .use_preconfigured_tls(tls)
            .build()
            .map_err(ConfigError::HttpClient)?;
        Ok(Self { client })
    }

    /// The HTTP client and the authentication headers for the next request.
    pub async fn prepare(&self) -> Result<(reqwest::Client, http::HeaderMap), ConfigError> {
        Ok((self.client.clone(), http::HeaderMap::new()))
    }

    /// Tells the transport the server answered 401, so cached credentials
    /// (exec plugins, token files) are refreshed before the next request.
    pub fn invalidate_credentials(&self) {}
}

//! Who the client is: the credential a [`Config`](crate::Config) carries, and how it becomes an
//! `Authorization` header for each request.
//!
//! - [`Auth::BearerToken`]: `Authorization: Bearer <token>`.
//! - [`Auth::TokenFile`]: the token is read from a file, re-read at most once a minute and
//!   right after [`Transport::invalidate_credentials`](crate::Transport::invalidate_credentials);
//!   when the file cannot be read the last token read is kept.
//! - [`Auth::Basic`]: `Authorization: Basic base64(user:password)`.
//! - [`Auth::Exec`]: an exec credential plugin supplies a token or a client certificate
//!   (see [`exec`]).
//!
//! Client certificates live in [`TlsConfig`](crate::TlsConfig) and impersonation in
//! [`Impersonation`]; both combine with any of these.

pub mod exec;
mod impersonation;
pub(crate) mod token_file;

use std::path::PathBuf;

use base64::Engine as _;
use http::HeaderValue;

pub use exec::{ExecApiVersion, ExecInteractiveMode, ExecProvider};
pub use impersonation::Impersonation;

use crate::error::ConfigError;
use crate::secret::Secret;

/// How requests are authenticated (besides a client certificate).
#[derive(Clone, Debug, Default, PartialEq)]
pub enum Auth {
    /// No credential (anonymous, or a client certificate alone).
    #[default]
    None,
    /// A static bearer token (`token`).
    BearerToken(Secret<String>),
    /// A bearer token read from a file (`tokenFile`, the in-cluster service account token).
    ///
    /// The file is re-read at most once a minute and after a 401; when it cannot be read, the
    /// last token read, or else `token`, is used. `token` is what was read when the
    /// configuration was resolved, or the kubeconfig's `token` when both are set (client-go
    /// uses the file's content whenever the file is readable).
    TokenFile {
        /// The token file.
        path: PathBuf,
        /// The token to use while the file cannot be read.
        token: Option<Secret<String>>,
    },
    /// HTTP basic authentication (`username` / `password`).
    Basic {
        /// The user name.
        username: String,
        /// The password.
        password: Secret<String>,
    },
    /// An exec credential plugin (`exec`).
    Exec(ExecProvider),
}

/// `Authorization: Bearer <token>`, marked sensitive.
pub(crate) fn bearer_header(token: &str) -> Result<HeaderValue, ConfigError> {
    sensitive_header(&format!("Bearer {token}"), "bearer token")
}

/// `Authorization: Basic base64(username:password)`, marked sensitive.
pub(crate) fn basic_header(username: &str, password: &str) -> Result<HeaderValue, ConfigError> {
    let encoded =
        base64::engine::general_purpose::STANDARD.encode(format!("{username}:{password}"));
    sensitive_header(&format!("Basic {encoded}"), "basic-auth credentials")
}

fn sensitive_header(value: &str, what: &str) -> Result<HeaderValue, ConfigError> {
    let mut value = HeaderValue::from_str(value).map_err(|_| ConfigError::InvalidHeader {
        what: what.to_owned(),
    })?;
    value.set_sensitive(true);
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers() {
        let v = bearer_header("abc").unwrap();
        assert_eq!(v, "Bearer abc");
        assert!(v.is_sensitive());
        // RFC 7617's example.
        let v = basic_header("Aladdin", "open sesame").unwrap();
        assert_eq!(v, "Basic QWxhZGRpbjpvcGVuIHNlc2FtZQ==");
        assert!(v.is_sensitive());
        let err = bearer_header("bad\ntoken").unwrap_err();
        assert!(!err.to_string().contains("bad"), "{err}");
    }
}

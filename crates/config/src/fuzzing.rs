//! Entry points into crate-private parsers for the fuzz targets in `fuzz/` (feature
//! `fuzzing`, off by default; not a stable API).
//!
//! Nothing here adds behaviour; each item forwards to the real implementation.

use std::time::SystemTime;

use crate::auth::ExecApiVersion;
use crate::error::ExecError;
use crate::secret::Secret;
use crate::tls::ClientIdentity;

/// What an exec credential plugin's stdout resolved to.
#[derive(Debug)]
pub struct ExecCredentialStatus {
    /// `status.token`, when non-empty.
    pub token: Option<Secret<String>>,
    /// `status.clientCertificateData` + `status.clientKeyData`, checked to be a usable pair.
    pub identity: Option<ClientIdentity>,
    /// `status.expirationTimestamp`.
    pub expires: Option<SystemTime>,
}

/// Parses an exec plugin's stdout exactly as the transport does after running `command`.
pub fn parse_exec_output(
    command: &str,
    api_version: ExecApiVersion,
    stdout: &[u8],
) -> Result<ExecCredentialStatus, ExecError> {
    crate::auth::exec::parse_output(command, api_version, stdout).map(|s| ExecCredentialStatus {
        token: s.token,
        identity: s.identity,
        expires: s.expires,
    })
}

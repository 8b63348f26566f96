//! How the reflector classifies errors (client-go's `isExpiredError`,
//! `isTooLargeResourceVersionError`, `isWatchErrorRetriable`, `apierrors.IsInternalError`).

use kctrl_client::Error;

/// 410: the requested resourceVersion was compacted (reason `Expired` or `Gone`).
pub(crate) fn is_expired(err: &Error) -> bool {
    err.is_gone()
}

/// The requested resourceVersion is newer than the server (or its watch cache) knows.
pub(crate) fn is_too_large_resource_version(err: &Error) -> bool {
    const MESSAGE: &str = "Too large resource version";
    let Some(api) = err.api_error() else {
        return false;
    };
    let causes = api
        .status
        .details
        .as_ref()
        .and_then(|d| d.causes.as_deref())
        .unwrap_or_default();
    if causes
        .iter()
        .any(|c| c.reason.as_deref() == Some("ResourceVersionTooLarge"))
    {
        return true;
    }
    // Servers before 1.18.6 said it only in a Timeout's cause message or message.
    let is_timeout = api.reason() == "Timeout" || (api.reason().is_empty() && api.code == 504);
    is_timeout
        && (causes.iter().any(|c| c.message.as_deref() == Some(MESSAGE))
            || api.message().contains(MESSAGE))
}

/// 500 / reason `InternalError`.
pub(crate) fn is_internal_error(err: &Error) -> bool {
    err.api_error()
        .is_some_and(|e| e.reason() == "InternalError" || (e.reason().is_empty() && e.code == 500))
}

/// The server is most likely only briefly unavailable: retrying the watch where it ended
/// beats relisting everything (connection refused, 429).
pub(crate) fn is_watch_error_retriable(err: &Error) -> bool {
    err.is_too_many_requests() || is_connection_refused(err)
}

/// Whether a transport error was caused by a refused connection.
pub(crate) fn is_connection_refused(err: &Error) -> bool {
    match err {
        Error::Transport { source, .. } => {
            let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(source.as_ref());
            while let Some(e) = cur {
                if let Some(io) = e.downcast_ref::<std::io::Error>()
                    && io.kind() == std::io::ErrorKind::ConnectionRefused
                {
                    return true;
                }
                cur = e.source();
            }
            false
        }
        Error::Retried { last, .. } => is_connection_refused(last),
        _ => false,
    }
}

//! A bearer token kept in a file that someone else rotates (the kubelet's projected service
//! account token, `tokenFile` in a kubeconfig).
//!
//! client-go re-reads such a file every minute. Here the file is re-read when the cached token
//! is a minute old ([`REFRESH_PERIOD`]) or after [`TokenFileSource::invalidate`] (a 401 to the
//! token last read; a 401 to a token read before that is ignored, as client-go resets only a
//! token older than the rejected request).
//! A failed read keeps the last good token (or the configured fallback) and is retried at the
//! next refresh. Time is tokio's clock, so tests can pause and advance it.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use crate::error::ConfigError;
use crate::secret::Secret;

/// How long a token read from a file is used before the file is read again.
pub(crate) const REFRESH_PERIOD: Duration = Duration::from_secs(60);

#[derive(Debug)]
pub(crate) struct TokenFileSource {
    path: PathBuf,
    fallback: Option<Secret<String>>,
    state: tokio::sync::Mutex<State>,
    stale: AtomicBool,
    /// How many times the file was read: the generation of the cached token.
    reads: AtomicU64,
}

#[derive(Debug, Default)]
struct State {
    token: Option<Secret<String>>,
    read_at: Option<Instant>,
}

impl TokenFileSource {
    pub(crate) fn new(path: PathBuf, fallback: Option<Secret<String>>) -> Self {
        Self {
            path,
            fallback,
            state: tokio::sync::Mutex::new(State::default()),
            stale: AtomicBool::new(false),
            reads: AtomicU64::new(0),
        }
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// The current token and its generation, reading the file if the cached one is old or
    /// was invalidated.
    pub(crate) async fn token(&self) -> Result<(Secret<String>, u64), ConfigError> {
        let mut state = self.state.lock().await;
        let now = Instant::now();
        let fresh = state
            .read_at
            .is_some_and(|at| now.saturating_duration_since(at) < REFRESH_PERIOD);
        if let Some(token) = &state.token
            && fresh
            && !self.stale.load(Ordering::Acquire)
        {
            return Ok((token.clone(), self.reads.load(Ordering::Acquire)));
        }

        let read = read_token(&self.path).await;
        // Only now is the invalidated token replaced (a read cut short changes nothing).
        self.stale.store(false, Ordering::Release);
        state.read_at = Some(now);
        let generation = self.reads.fetch_add(1, Ordering::AcqRel) + 1;
        match read {
            Ok(token) => {
                state.token = Some(token.clone());
                Ok((token, generation))
            }
            Err(err) => match state.token.clone().or_else(|| self.fallback.clone()) {
                Some(previous) => {
                    tracing::error!(error = %err, "unable to re-read the bearer token file; using the previous token");
                    state.token = Some(previous.clone());
                    Ok((previous, generation))
                }
                None => {
                    state.read_at = None;
                    Err(err)
                }
            },
        }
    }

    /// The server rejected the token of generation `generation`: unless the file was read
    /// again since, the next [`token`](Self::token) call re-reads it. Returns whether it will.
    pub(crate) fn invalidate(&self, generation: u64) -> bool {
        let current = self.reads.load(Ordering::Acquire) == generation;
        if current {
            self.stale.store(true, Ordering::Release);
        }
        current
    }
}

async fn read_token(path: &Path) -> Result<Secret<String>, ConfigError> {
    let read_error = |source| ConfigError::ReadFile {
        field: "bearer token file".to_owned(),
        path: path.to_owned(),
        source,
    };
    let text = tokio::fs::read_to_string(path).await.map_err(read_error)?;
    let token = text.trim();
    if token.is_empty() {
        return Err(read_error(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "the file is empty",
        )));
    }
    Ok(Secret::new(token.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn rereads_after_a_minute_or_invalidation() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        std::fs::write(&path, "one\n").unwrap();
        let source = TokenFileSource::new(path.clone(), None);

        assert_eq!(source.token().await.unwrap().0.expose(), "one");
        std::fs::write(&path, "two").unwrap();
        tokio::time::advance(Duration::from_secs(59)).await;
        assert_eq!(
            source.token().await.unwrap().0.expose(),
            "one",
            "cached within a minute"
        );
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(
            source.token().await.unwrap().0.expose(),
            "two",
            "re-read after a minute"
        );

        std::fs::write(&path, "three").unwrap();
        assert_eq!(source.token().await.unwrap().0.expose(), "two");
        source.invalidate(source.reads.load(Ordering::Acquire));
        assert_eq!(
            source.token().await.unwrap().0.expose(),
            "three",
            "re-read after invalidate"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn keeps_the_last_token_when_the_file_disappears() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        std::fs::write(&path, "good").unwrap();
        let source = TokenFileSource::new(path.clone(), None);
        assert_eq!(source.token().await.unwrap().0.expose(), "good");
        std::fs::remove_file(&path).unwrap();
        source.invalidate(source.reads.load(Ordering::Acquire));
        assert_eq!(source.token().await.unwrap().0.expose(), "good");
        std::fs::write(&path, "new").unwrap();
        tokio::time::advance(REFRESH_PERIOD).await;
        assert_eq!(source.token().await.unwrap().0.expose(), "new");
    }

    #[tokio::test]
    async fn missing_file_without_fallback_is_an_error_and_fallback_is_used() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("absent");
        let err = TokenFileSource::new(path.clone(), None)
            .token()
            .await
            .unwrap_err();
        assert!(err.to_string().contains("absent"), "{err}");
        let source = TokenFileSource::new(path, Some(Secret::from("fallback")));
        assert_eq!(source.token().await.unwrap().0.expose(), "fallback");

        let empty = dir.path().join("empty");
        std::fs::write(&empty, " \n").unwrap();
        let err = TokenFileSource::new(empty, None).token().await.unwrap_err();
        assert!(err.to_string().contains("empty"), "{err}");
    }
}

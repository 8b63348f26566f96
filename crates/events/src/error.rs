//! The crate's error type.

/// Errors from building or using the events pipeline.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An event type other than `Normal` or `Warning` was given.
    #[error("unsupported event type {0:?}: core/v1 events are either \"Normal\" or \"Warning\"")]
    InvalidEventType(String),
    /// A correlator or broadcaster option is out of range.
    #[error("invalid events option {option}: {reason}")]
    InvalidOption {
        /// The option's name, e.g. `CorrelatorOptions::qps`.
        option: &'static str,
        /// What is wrong with the value given.
        reason: String,
    },
    /// The broadcaster was shut down; it accepts no more events or watchers.
    #[error("the event broadcaster is shut down")]
    ShutDown,
    /// A watcher task was asked for outside a Tokio runtime.
    #[error("starting an event watcher needs a Tokio runtime: {0}")]
    NoRuntime(String),
}

//! Containing panics of user code the informer calls on its own task (transforms, index
//! functions, the watch error handler, metrics sinks), the way handler panics are contained:
//! the panic is caught, logged by the caller with what it was doing, and counted; the one
//! object (or call) it happened on is skipped, and the informer goes on.

use std::any::Any;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// A shared count of contained panics.
pub(crate) type PanicCounter = Arc<AtomicU64>;

/// The message of a panic payload (`&str` or `String`), as the panic hook prints it.
pub(crate) fn panic_message(payload: &(dyn Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-string panic payload".to_owned())
}

/// Runs `f`; if it panics, counts the panic in `panics` and returns its message.
///
/// `f` runs with its captures treated as unwind-safe: the callers only pass code that
/// writes nothing of the informer's state until it has returned (its result is applied
/// afterwards), so a panic leaves no half-made change behind.
pub(crate) fn contain<R>(panics: &AtomicU64, f: impl FnOnce() -> R) -> Result<R, String> {
    catch_unwind(AssertUnwindSafe(f)).map_err(|payload| {
        panics.fetch_add(1, Ordering::Relaxed);
        panic_message(payload.as_ref())
    })
}

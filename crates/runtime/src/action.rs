//! What a reconcile asks for next: [`Action`].

use std::time::Duration;

/// What happens to an object's key after a reconcile (or after its error policy).
///
/// | `Action` | the key | controller-runtime | kube-runtime |
/// |---|---|---|---|
/// | [`await_change`](Action::await_change) | forgotten until an event enqueues it | `Result{}` | `Action::await_change()` |
/// | [`requeue`](Action::requeue)`(d)` | failures forgotten, back after `d` | `Result{RequeueAfter: d}` | `Action::requeue(d)` |
/// | [`rate_limited`](Action::rate_limited) | back after the queue's limiter says (per-key backoff) | `Result{Requeue: true}` or an error | — |
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Action {
    next: Next,
}

/// The three choices, kept private so that more can be added.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Next {
    AwaitChange,
    After(Duration),
    RateLimited,
}

impl Action {
    /// Nothing more to do until the object (or one it owns or watches) changes.
    pub const fn await_change() -> Action {
        Action {
            next: Next::AwaitChange,
        }
    }

    /// Reconcile the object again after `after` (e.g. to poll something outside the cluster),
    /// or earlier if an event enqueues it. The key's failure count is reset.
    pub const fn requeue(after: Duration) -> Action {
        Action {
            next: Next::After(after),
        }
    }

    /// Reconcile the object again when the queue's rate limiter allows: per key, an
    /// exponential backoff (5 ms doubling up to 1000 s with the default limiter) under an
    /// overall token bucket. The default answer to an error; returned from a successful
    /// reconcile too (controller-runtime's `Requeue: true`), it keeps the key's failure count,
    /// so repeated requeues back off. Only [`await_change`](Action::await_change) and
    /// [`requeue`](Action::requeue) reset it.
    pub const fn rate_limited() -> Action {
        Action {
            next: Next::RateLimited,
        }
    }

    /// The delay of a [`requeue`](Action::requeue), if this is one.
    pub fn requeue_after(&self) -> Option<Duration> {
        match self.next {
            Next::After(d) => Some(d),
            _ => None,
        }
    }

    pub(crate) fn next(&self) -> Next {
        self.next
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constructors_say_what_they_do() {
        assert_eq!(Action::await_change().next(), Next::AwaitChange);
        assert_eq!(
            Action::requeue(Duration::from_secs(3)).requeue_after(),
            Some(Duration::from_secs(3))
        );
        assert_eq!(Action::rate_limited().next(), Next::RateLimited);
        assert_eq!(Action::rate_limited().requeue_after(), None);
    }
}

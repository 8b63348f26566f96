//! Ports of client-go's `util/workqueue` tests: one module per upstream `_test.go` file, one
//! test per upstream test, named after it in snake_case. Time-dependent tests run on Tokio's
//! paused clock (the upstream tests use a fake clock).

mod default_rate_limiters;
mod delaying_queue;
mod metrics;
mod parallelizer;
mod queue;
mod rate_limiting_queue;

/// Lets spawned tasks (the delaying queue's loop, workers) run until `condition` holds, without
/// moving a paused clock. Panics if it never holds.
pub(crate) async fn eventually(what: &str, condition: impl Fn() -> bool) {
    for _ in 0..1_000 {
        if condition() {
            return;
        }
        tokio::task::yield_now().await;
    }
    panic!("timed out waiting until {what}");
}

/// Lets spawned tasks run for a while, for checks that something does *not* happen.
pub(crate) async fn settle() {
    for _ in 0..100 {
        tokio::task::yield_now().await;
    }
}

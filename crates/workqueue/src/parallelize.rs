//! Running many independent pieces of work on a bounded number of workers, stopping early when
//! cancelled.
//!
//! Workers are Tokio tasks. That choice makes a piece an `async` block, so pieces that call an
//! API overlap while they wait, and CPU-bound pieces run in parallel on a multi-thread runtime.
//! The price is `'static` work: share data through an `Arc` rather than borrowing it. Dropping the
//! returned future aborts the workers (a piece in progress is cancelled at its next `.await`).

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

/// Calls `work(piece)` for every `piece` in `0..pieces`, on at most `workers` concurrent tasks,
/// and returns when all of them have finished.
///
/// Pieces are dealt out in chunks of `chunk_size` consecutive indices (0 is treated as 1); a
/// worker runs a chunk's pieces one after another. Before each piece the worker checks `cancel`:
/// once it is cancelled no new piece starts, while pieces already running finish. With
/// `workers == 0` nothing runs.
///
/// If a piece panics, the other workers still run to completion, then the panic is resumed
/// here.
///
/// ```
/// # #[tokio::main]
/// # async fn main() {
/// use std::sync::Arc;
/// use std::sync::atomic::{AtomicUsize, Ordering};
/// use kctrl_workqueue::parallelize_until;
/// use tokio_util::sync::CancellationToken;
///
/// let sum = Arc::new(AtomicUsize::new(0));
/// let total = Arc::clone(&sum);
/// parallelize_until(&CancellationToken::new(), 4, 100, 10, move |piece| {
///     let total = Arc::clone(&total);
///     async move {
///         total.fetch_add(piece, Ordering::Relaxed);
///     }
/// })
/// .await;
/// assert_eq!(sum.load(Ordering::Relaxed), (0..100).sum());
/// # }
/// ```
pub async fn parallelize_until<F, Fut>(
    cancel: &CancellationToken,
    workers: usize,
    pieces: usize,
    chunk_size: usize,
    work: F,
) where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    if pieces == 0 {
        return;
    }
    let chunk_size = chunk_size.max(1);
    let chunks = pieces.div_ceil(chunk_size);
    let workers = workers.min(chunks);

    let next_chunk = Arc::new(AtomicUsize::new(0));
    let work = Arc::new(work);
    let mut tasks = JoinSet::new();
    for _ in 0..workers {
        let next_chunk = Arc::clone(&next_chunk);
        let work = Arc::clone(&work);
        let cancel = cancel.clone();
        tasks.spawn(async move {
            loop {
                let chunk = next_chunk.fetch_add(1, Ordering::Relaxed);
                if chunk >= chunks {
                    return;
                }
                let start = chunk * chunk_size;
                for piece in start..(start + chunk_size).min(pieces) {
                    if cancel.is_cancelled() {
                        return;
                    }
                    work(piece).await;
                }
            }
        });
    }

    let mut panic = None;
    while let Some(result) = tasks.join_next().await {
        if let Err(error) = result
            && error.is_panic()
            && panic.is_none()
        {
            panic = Some(error.into_panic());
        }
    }
    if let Some(panic) = panic {
        std::panic::resume_unwind(panic);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    #[tokio::test]
    async fn cancellation_stops_new_pieces_but_not_the_running_one() {
        let cancel = CancellationToken::new();
        let ran = Arc::new(Mutex::new(Vec::new()));
        let (token, log) = (cancel.clone(), Arc::clone(&ran));
        parallelize_until(&cancel, 1, 100, 1, move |piece| {
            let (token, log) = (token.clone(), Arc::clone(&log));
            async move {
                if piece == 5 {
                    token.cancel();
                }
                tokio::task::yield_now().await;
                log.lock().unwrap().push(piece);
            }
        })
        .await;
        assert_eq!(*ran.lock().unwrap(), (0..=5).collect::<Vec<_>>());
    }

    #[tokio::test]
    async fn no_workers_or_no_pieces_run_nothing() {
        let count = Arc::new(AtomicUsize::new(0));
        for (workers, pieces) in [(0, 10), (4, 0)] {
            let counter = Arc::clone(&count);
            parallelize_until(&CancellationToken::new(), workers, pieces, 1, move |_| {
                let counter = Arc::clone(&counter);
                async move {
                    counter.fetch_add(1, Ordering::Relaxed);
                }
            })
            .await;
        }
        assert_eq!(count.load(Ordering::Relaxed), 0);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_panicking_piece_is_resumed_after_the_others_finish() {
        let count = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&count);
        let run = tokio::spawn(async move {
            parallelize_until(&CancellationToken::new(), 2, 10, 5, move |piece| {
                let counter = Arc::clone(&counter);
                async move {
                    assert_ne!(piece, 0, "piece zero fails");
                    counter.fetch_add(1, Ordering::Relaxed);
                }
            })
            .await;
        });
        let error = run.await.unwrap_err();
        assert!(error.is_panic());
        // The other worker's chunk (5..10) ran in full.
        assert!(count.load(Ordering::Relaxed) >= 5);
    }
}

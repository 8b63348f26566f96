//! Port of `parallelizer_test.go`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use kctrl_workqueue::parallelize_until;
use tokio_util::sync::CancellationToken;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_parallelize_until() {
    // (pieces, workers, chunk size)
    for (pieces, workers, chunk_size) in [
        (1000, 10, 1),
        (1000, 10, 10),
        (1000, 10, 100),
        (999, 10, 13),
    ] {
        let seen: Arc<Vec<AtomicU32>> = Arc::new((0..pieces).map(|_| AtomicU32::new(0)).collect());
        let visits = Arc::clone(&seen);
        parallelize_until(
            &CancellationToken::new(),
            workers,
            pieces,
            chunk_size,
            move |piece| {
                let visits = Arc::clone(&visits);
                async move {
                    visits[piece].fetch_add(1, Ordering::Relaxed);
                }
            },
        )
        .await;
        let counts: Vec<u32> = seen
            .iter()
            .map(|count| count.load(Ordering::Relaxed))
            .collect();
        assert_eq!(
            counts,
            vec![1; pieces],
            "pieces:{pieces},workers:{workers},chunkSize:{chunk_size}: bad number of visits"
        );
    }
}

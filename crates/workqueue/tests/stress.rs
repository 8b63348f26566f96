//! A randomized concurrency test of [`Queue`] with a checker of its invariants.
//!
//! Producers add random keys with random priorities (some awaiting between adds), workers get,
//! "work" (yield or spin a little), sometimes re-add the key they hold, and call `done`. The
//! checker verifies, per round:
//!
//! - **never concurrent**: no key is held by two workers at once;
//! - **stingy**: before any worker runs, adding every key many times leaves each queued once;
//! - **nothing lost / re-queue at done**: every add that returned before shutdown is followed by a
//!   `get` of that key that returned after the add started (an add while the key is processed
//!   must therefore be served again after `done`);
//! - **no extra work**: a key is never handed out more often than it was added;
//! - **drain**: after `shut_down_with_drain` and the workers seeing `None`, nothing is waiting or
//!   being processed, and a racing shutdown (producers still adding) leaves nothing stranded.
//!
//! The operation sequence of every task is fixed by a seed (printed on failure); thread
//! interleavings are not. Defaults keep `cargo test` fast; for a long run set
//! `KCTRL_WORKQUEUE_STRESS_ROUNDS` (default 12) and `KCTRL_WORKQUEUE_STRESS_ADDS` (adds per
//! producer and round, default 4000), e.g. 200 × 50,000 for about 35 million adds (7–12 s in a
//! release build here), and `KCTRL_WORKQUEUE_STRESS_SEED` to start from another seed.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::SeqCst;

use kctrl_workqueue::{Priority, Queue};

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .map(|value| {
            value
                .parse()
                .unwrap_or_else(|_| panic!("{name} must be a number, got {value:?}"))
        })
        .unwrap_or(default)
}

/// Per-key bookkeeping of the checker, all on one logical clock.
struct Keys {
    clock: AtomicU64,
    /// Held by a worker right now.
    held: Vec<AtomicBool>,
    /// Clock value at the start of the latest add that is known to have returned before
    /// shutdown (0: none).
    last_add_start: Vec<AtomicU64>,
    /// Clock value when the latest `get` of the key returned.
    last_get: Vec<AtomicU64>,
    /// Every add, also those after `stop` (shutdown may have ignored them, or not).
    all_adds: Vec<AtomicU64>,
    gets: Vec<AtomicU64>,
}

impl Keys {
    fn new(count: usize) -> Self {
        let zeros = || (0..count).map(|_| AtomicU64::new(0)).collect();
        Self {
            clock: AtomicU64::new(1),
            held: (0..count).map(|_| AtomicBool::new(false)).collect(),
            last_add_start: zeros(),
            last_get: zeros(),
            all_adds: zeros(),
            gets: zeros(),
        }
    }

    fn tick(&self) -> u64 {
        self.clock.fetch_add(1, SeqCst)
    }

    /// Adds `key` and records the add if it returned before `stop` was set. The main task sets
    /// `stop` just before it shuts the queue down, so a recorded add was accepted; deciding
    /// before the call instead would record adds that shutdown overtook.
    fn add(&self, queue: &Queue<u32>, key: u32, priority: Priority, stop: &AtomicBool) {
        let start = self.tick();
        queue.add_with_priority(key, priority);
        self.all_adds[key as usize].fetch_add(1, SeqCst);
        if !stop.load(SeqCst) {
            self.last_add_start[key as usize].fetch_max(start, SeqCst);
        }
    }
}

struct Round {
    seed: u64,
    keys: usize,
    producers: usize,
    workers: usize,
    adds_per_producer: u64,
    /// Shut down while producers still add (their adds after the call are not counted).
    racing_shutdown: bool,
}

async fn run_round(round: Round) {
    let Round {
        seed,
        keys: key_count,
        producers,
        workers,
        adds_per_producer,
        racing_shutdown,
    } = round;
    let queue = Queue::<u32>::new();
    let keys = Arc::new(Keys::new(key_count));
    let mut rng = fastrand::Rng::with_seed(seed);

    let stop_counting = Arc::new(AtomicBool::new(false));
    // Stingy: with no worker running, every key added many times is queued once.
    let preloaded = rng.usize(0..=key_count);
    for _ in 0..3 {
        for key in 0..preloaded as u32 {
            let priority = if rng.bool() {
                Priority::High
            } else {
                Priority::Low
            };
            keys.add(&queue, key, priority, &stop_counting);
        }
    }
    assert_eq!(queue.len(), preloaded, "seed {seed}: duplicates collapse");

    let worker_tasks: Vec<_> = (0..workers)
        .map(|w| {
            let queue = queue.clone();
            let keys = Arc::clone(&keys);
            let stop_counting = Arc::clone(&stop_counting);
            let mut rng = fastrand::Rng::with_seed(seed ^ (0x5eed_0000 + w as u64));
            tokio::spawn(async move {
                while let Some(key) = queue.get().await {
                    let k = key as usize;
                    let got = keys.tick();
                    assert!(
                        !keys.held[k].swap(true, SeqCst),
                        "seed {seed}: key {key} handed to two workers at once"
                    );
                    keys.last_get[k].fetch_max(got, SeqCst);
                    keys.gets[k].fetch_add(1, SeqCst);
                    match rng.u8(0..10) {
                        0..=3 => tokio::task::yield_now().await,
                        4..=5 => {
                            for _ in 0..rng.u32(0..200) {
                                std::hint::spin_loop();
                            }
                        }
                        _ => {}
                    }
                    if rng.u8(0..4) == 0 {
                        // Re-added while processing: must come back after done.
                        let priority = if rng.bool() {
                            Priority::High
                        } else {
                            Priority::Low
                        };
                        keys.add(&queue, key, priority, &stop_counting);
                    }
                    keys.held[k].store(false, SeqCst);
                    queue.done(&key);
                }
            })
        })
        .collect();

    let producer_tasks: Vec<_> = (0..producers)
        .map(|p| {
            let queue = queue.clone();
            let keys = Arc::clone(&keys);
            let stop_counting = Arc::clone(&stop_counting);
            let mut rng = fastrand::Rng::with_seed(seed ^ (0xadd0_0000 + p as u64));
            let awaits = rng.bool();
            tokio::spawn(async move {
                for _ in 0..adds_per_producer {
                    let key = rng.u32(0..key_count as u32);
                    let priority = if rng.u8(0..3) == 0 {
                        Priority::High
                    } else {
                        Priority::Low
                    };
                    keys.add(&queue, key, priority, &stop_counting);
                    if awaits && rng.u8(0..8) == 0 {
                        tokio::task::yield_now().await;
                    }
                }
            })
        })
        .collect();

    if racing_shutdown {
        for _ in 0..rng.u32(0..50) {
            tokio::task::yield_now().await;
        }
        // Adds from here on may be ignored; only those that returned before are checked.
        stop_counting.store(true, SeqCst);
        queue.shut_down_with_drain().await;
        for task in producer_tasks {
            task.await.expect("producer panicked");
        }
    } else {
        for task in producer_tasks {
            task.await.expect("producer panicked");
        }
        stop_counting.store(true, SeqCst);
        queue.shut_down_with_drain().await;
    }
    for task in worker_tasks {
        task.await
            .expect("worker panicked (see the assertion above)");
    }

    assert_eq!(queue.len(), 0, "seed {seed}: items stranded after shutdown");
    assert_eq!(
        queue.get().await,
        None,
        "seed {seed}: stays shut down and empty"
    );
    for key in 0..key_count {
        let added = keys.last_add_start[key].load(SeqCst);
        let got = keys.last_get[key].load(SeqCst);
        assert!(
            added == 0 || got > added,
            "seed {seed}: key {key} added at {added} but last handed out at {got}: lost"
        );
        // Stingy: each hand-out answers at least one add of its own. Adds after `stop` count
        // here too: on a loaded machine producers and workers may run many times between
        // `stop` and the shutdown taking effect.
        let adds = keys.all_adds[key].load(SeqCst);
        let gets = keys.gets[key].load(SeqCst);
        assert!(
            gets <= adds,
            "seed {seed}: key {key} handed out {gets} times for {adds} adds"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn randomized_concurrent_use_keeps_the_queue_invariants() {
    let rounds = env_or("KCTRL_WORKQUEUE_STRESS_ROUNDS", 12);
    let adds = env_or("KCTRL_WORKQUEUE_STRESS_ADDS", 4_000);
    let first_seed = env_or("KCTRL_WORKQUEUE_STRESS_SEED", 1);
    for seed in first_seed..first_seed + rounds {
        let mut rng = fastrand::Rng::with_seed(seed);
        let round = Round {
            seed,
            keys: [1, 4, 16, 64, 1024][rng.usize(0..5)],
            producers: rng.usize(1..=6),
            workers: rng.usize(1..=6),
            adds_per_producer: adds,
            racing_shutdown: rng.u8(0..3) == 0,
        };
        // A watchdog, not a timing assertion: a lost wake-up or a drain that never ends must
        // fail the test rather than hang it.
        tokio::time::timeout(std::time::Duration::from_secs(120), run_round(round))
            .await
            .unwrap_or_else(|_| panic!("seed {seed}: round hung (lost wake-up or drain)"));
    }
}

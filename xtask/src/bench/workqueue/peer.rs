//! The Rust peer of `cargo xtask bench workqueue`: the same workloads as
//! bench/workqueue-go/main.go, against kctrl-workqueue, printing one JSON object per line.
//!
//! Runs in a release build of xtask, on a multi-thread Tokio runtime with one worker per CPU
//! (the Go peer runs with GOMAXPROCS = CPUs). Producers and consumers are tasks, as they are
//! goroutines in Go; keys are `Arc<str>`, the closest thing to Go's immutable shared strings.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use kctrl_workqueue::{DelayingQueue, Item, Queue};
use tokio::time::Instant;

use super::Measurement;

/// Arguments of the hidden `cargo xtask bench workqueue-peer`.
#[derive(clap::Args)]
pub(crate) struct PeerArgs {
    /// Smaller workloads, for a smoke run.
    #[arg(long)]
    quick: bool,
    /// Only run workloads whose name (e.g. `throughput/2P2C/1000keys/1000adds`, `add_after`,
    /// `timer_lateness`) contains this; for profiling.
    #[arg(long, default_value = "")]
    only: String,
}

type Key = Arc<str>;

/// Same key shape as the Go peer.
fn key_strings(count: usize) -> impl Iterator<Item = String> {
    (0..count).map(|i| format!("namespace-{}/object-{}", i % 97, i))
}

fn key_names(count: usize) -> Vec<Key> {
    key_strings(count).map(Arc::from).collect()
}

/// Keys without reference counting, like Go strings: for the analysis of where time goes (the
/// strings are leaked, once per workload).
fn static_key_names(count: usize) -> Vec<&'static str> {
    key_strings(count)
        .map(|key| &*Box::leak(key.into_boxed_str()))
        .collect()
}

fn emit(measurement: Measurement) -> Result<()> {
    println!("{}", serde_json::to_string(&measurement)?);
    Ok(())
}

pub(crate) fn run(args: PeerArgs) -> Result<()> {
    let scale = if args.quick { 10 } else { 1 };
    let workers = std::thread::available_parallelism().map_or(2, |n| n.get());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()?;
    eprintln!("kctrl peer: {workers} Tokio workers");
    runtime.block_on(async {
        let selected = |name: &str| name.contains(&args.only);
        for (producers, consumers) in super::THREAD_MIXES {
            for (keys, adds) in super::KEY_MIXES {
                let name = format!("throughput/{producers}P{consumers}C/{keys}keys/{adds}adds");
                let total = super::TOTAL_ADDS / scale;
                let shape = (producers, consumers, adds, total);
                let key_set = Arc::new(key_names(keys));
                if selected(&name) {
                    throughput("throughput", AddBy::Value, shape, &key_set).await?;
                }
                if selected(&format!("add_ref-{name}")) {
                    throughput("throughput_add_ref", AddBy::Ref, shape, &key_set).await?;
                }
                if selected(&format!("static-{name}")) {
                    let key_set = Arc::new(static_key_names(keys));
                    throughput("throughput_static_str", AddBy::Value, shape, &key_set).await?;
                }
            }
        }
        if selected("controller") {
            controller(scale).await?;
        }
        if selected("add_after") {
            add_after(super::ADD_AFTER_ITEMS / scale).await?;
        }
        if selected("timer_lateness") {
            lateness(super::LATENESS_ITEMS / scale, super::LATENESS_SPREAD).await?;
        }
        Ok(())
    })
}

/// How producers hand keys to the queue.
#[derive(Clone, Copy)]
enum AddBy {
    /// `add(key.clone())`, like client-go's `Add(key)`.
    Value,
    /// `add_ref(&key)`: the queue clones only keys it keeps.
    Ref,
}

/// One round: `producers` tasks add `adds` items (key `i % keys.len()`), `consumers` tasks get
/// and finish items until the queue reports shutdown. Returns how many items were processed.
async fn throughput_round<K: Item + Sync>(
    add_by: AddBy,
    producers: usize,
    consumers: usize,
    adds: usize,
    keys: &Arc<Vec<K>>,
) -> usize {
    let queue = Queue::<K>::new();
    let consumer_tasks: Vec<_> = (0..consumers)
        .map(|_| {
            let queue = queue.clone();
            tokio::spawn(async move {
                let mut processed = 0;
                while let Some(item) = queue.get().await {
                    queue.done(&item);
                    processed += 1;
                }
                processed
            })
        })
        .collect();
    let producer_tasks: Vec<_> = (0..producers)
        .map(|producer| {
            let queue = queue.clone();
            let keys = Arc::clone(keys);
            tokio::spawn(async move {
                for i in (producer..adds).step_by(producers) {
                    let key = &keys[i % keys.len()];
                    match add_by {
                        AddBy::Value => queue.add(key.clone()),
                        AddBy::Ref => queue.add_ref(key),
                    }
                }
            })
        })
        .collect();
    for task in producer_tasks {
        task.await.expect("producer panicked");
    }
    queue.shut_down();
    let mut processed = 0;
    for task in consumer_tasks {
        processed += task.await.expect("consumer panicked");
    }
    processed
}

/// Measures one throughput workload; `shape` is (producers, consumers, adds per round, total
/// adds).
async fn throughput<K: Item + Sync>(
    workload: &str,
    add_by: AddBy,
    (producers, consumers, adds, total_adds): (usize, usize, usize, usize),
    keys: &Arc<Vec<K>>,
) -> Result<()> {
    let key_count = keys.len();
    let rounds = (total_adds / adds).max(1);
    throughput_round(add_by, producers, consumers, adds, keys).await; // warm-up
    let mut processed = 0;
    let start = Instant::now();
    for _ in 0..rounds {
        processed += throughput_round(add_by, producers, consumers, adds, keys).await;
    }
    let elapsed = start.elapsed();
    emit(Measurement {
        workload: workload.into(),
        producers,
        consumers,
        keys: key_count,
        adds,
        rounds,
        processed,
        elapsed_ns: elapsed.as_nanos() as u64,
        ops_per_sec: (adds * rounds) as f64 / elapsed.as_secs_f64(),
        ..Measurement::new("kctrl")
    })
}

/// The consumers' "little work per item": FNV-1a over the key, `WORK_ROUNDS` times, as in the
/// Go peer.
fn work(key: &str) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for _ in 0..super::WORK_ROUNDS {
        for byte in key.bytes() {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
    }
    hash
}

/// One round of the controller-shaped workload: producers yield after every add (informer
/// handlers await their next event), consumers do a little work per item.
async fn controller_round(
    producers: usize,
    consumers: usize,
    adds: usize,
    keys: &Arc<Vec<Key>>,
) -> usize {
    let queue = Queue::<Key>::new();
    let consumer_tasks: Vec<_> = (0..consumers)
        .map(|_| {
            let queue = queue.clone();
            tokio::spawn(async move {
                let mut processed = 0;
                let mut acc = 0u64;
                while let Some(item) = queue.get().await {
                    acc = acc.wrapping_add(work(&item));
                    queue.done(&item);
                    processed += 1;
                }
                std::hint::black_box(acc);
                processed
            })
        })
        .collect();
    let producer_tasks: Vec<_> = (0..producers)
        .map(|producer| {
            let queue = queue.clone();
            let keys = Arc::clone(keys);
            tokio::spawn(async move {
                for i in (producer..adds).step_by(producers) {
                    queue.add(keys[i % keys.len()].clone());
                    tokio::task::yield_now().await;
                }
            })
        })
        .collect();
    for task in producer_tasks {
        task.await.expect("producer panicked");
    }
    queue.shut_down();
    let mut processed = 0;
    for task in consumer_tasks {
        processed += task.await.expect("consumer panicked");
    }
    processed
}

async fn controller(scale: usize) -> Result<()> {
    let (producers, consumers, key_count, adds, total) = super::CONTROLLER_SHAPE;
    let keys = Arc::new(key_names(key_count));
    let rounds = (total / scale / adds).max(1);
    controller_round(producers, consumers, adds, &keys).await; // warm-up
    let mut processed = 0;
    let start = Instant::now();
    for _ in 0..rounds {
        processed += controller_round(producers, consumers, adds, &keys).await;
    }
    let elapsed = start.elapsed();
    emit(Measurement {
        workload: "controller".into(),
        producers,
        consumers,
        keys: key_count,
        adds,
        rounds,
        processed,
        elapsed_ns: elapsed.as_nanos() as u64,
        ops_per_sec: (adds * rounds) as f64 / elapsed.as_secs_f64(),
        ..Measurement::new("kctrl")
    })
}

async fn add_after(count: usize) -> Result<()> {
    let keys = key_names(count);
    let mut rng = fastrand::Rng::with_seed(1);
    let ten_minutes = 600_000_000_000u64;
    let delays: Vec<Duration> = (0..count)
        .map(|_| Duration::from_nanos(1 + rng.u64(..ten_minutes)))
        .collect();
    let queue = DelayingQueue::<Key>::new();
    let start = Instant::now();
    for (key, delay) in keys.into_iter().zip(delays) {
        queue.add_after(key, delay);
    }
    let elapsed = start.elapsed();
    queue.shut_down();
    emit(Measurement {
        workload: "add_after".into(),
        adds: count,
        elapsed_ns: elapsed.as_nanos() as u64,
        ns_per_op: elapsed.as_nanos() as f64 / count as f64,
        ..Measurement::new("kctrl")
    })
}

async fn lateness(count: usize, spread: Duration) -> Result<()> {
    let keys = key_names(count);
    let index: HashMap<Key, usize> = keys
        .iter()
        .enumerate()
        .map(|(i, key)| (Arc::clone(key), i))
        .collect();
    let mut rng = fastrand::Rng::with_seed(2);
    let delays: Vec<Duration> = (0..count)
        .map(|_| {
            Duration::from_millis(1) + Duration::from_nanos(rng.u64(..spread.as_nanos() as u64))
        })
        .collect();
    let queue = DelayingQueue::<Key>::new();
    let start = Instant::now();
    let mut ready_at = Vec::with_capacity(count);
    for (key, delay) in keys.iter().zip(&delays) {
        ready_at.push(Instant::now() + *delay);
        queue.add_after(Arc::clone(key), *delay);
    }
    let consumer = {
        let queue = queue.clone();
        tokio::spawn(async move {
            let mut late = Vec::with_capacity(count);
            while late.len() < count {
                let Some(item) = queue.get().await else { break };
                let now = Instant::now();
                late.push(
                    now.saturating_duration_since(ready_at[index[&item]])
                        .as_nanos() as u64,
                );
                queue.done(&item);
            }
            late
        })
    };
    let mut late = consumer.await?;
    let elapsed = start.elapsed();
    queue.shut_down();
    late.sort_unstable();
    emit(Measurement {
        workload: "timer_lateness".into(),
        adds: count,
        elapsed_ns: elapsed.as_nanos() as u64,
        p50_ns: late[late.len() / 2],
        p99_ns: late[late.len() * 99 / 100],
        ..Measurement::new("kctrl")
    })
}

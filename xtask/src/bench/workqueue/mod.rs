//! `cargo xtask bench workqueue`: kctrl-workqueue against client-go's util/workqueue.
//!
//! Two peer programs run the same workloads and print JSON lines ([`Measurement`]): the Go one in
//! bench/workqueue-go (client-go pinned in its go.mod) and the Rust one, [`peer`], a hidden
//! subcommand of a release build of xtask itself. The driver builds both, runs them alternately
//! several times (so that noise from other processes hits both alike), and reports medians with
//! [`report`].

pub(crate) mod peer;
mod report;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};

/// (producers, consumers) of the throughput workloads.
const THREAD_MIXES: [(usize, usize); 3] = [(1, 1), (2, 2), (8, 2)];
/// (distinct keys, adds per round) of the throughput workloads: every key once with 1k and 100k
/// keys, and heavy duplication (100k adds over 100 keys).
const KEY_MIXES: [(usize, usize); 3] = [(1_000, 1_000), (100_000, 100_000), (100, 100_000)];
/// Adds per throughput measurement (rounds = this / adds per round).
const TOTAL_ADDS: usize = 2_000_000;
/// The controller-shaped workload: (producers, consumers, distinct keys, adds per round, total
/// adds). Producers yield after every add, consumers do [`WORK_ROUNDS`] of hashing per item.
const CONTROLLER_SHAPE: (usize, usize, usize, usize, usize) = (2, 2, 1_000, 10_000, 200_000);
/// FNV-1a passes over the key per processed item in the controller-shaped workload (the Go peer
/// uses the same number).
const WORK_ROUNDS: usize = 16;
/// Items of the add_after cost measurement.
const ADD_AFTER_ITEMS: usize = 200_000;
/// Items of the timer lateness measurement, with delays of 1 ms + up to `LATENESS_SPREAD`.
const LATENESS_ITEMS: usize = 2_000;
const LATENESS_SPREAD: Duration = Duration::from_millis(200);

/// Arguments of `cargo xtask bench workqueue`.
#[derive(clap::Args)]
pub(crate) struct WorkqueueArgs {
    /// Smaller workloads and fewer repetitions: a smoke run, not numbers to publish.
    #[arg(long)]
    quick: bool,
    /// Runs of each peer (default 5, or 2 with --quick).
    #[arg(long)]
    reps: Option<usize>,
    /// Do not rewrite the report (docs/benchmarks/workqueue.md, or workqueue-busy.md with
    /// --background).
    #[arg(long)]
    no_doc: bool,
    /// Keep this many busy-looping processes at the lowest priority (`nice 19`) running for
    /// the whole run, so that no CPU ever idles: the busy-machine regime, reported in
    /// docs/benchmarks/workqueue-busy.md. Both programs run under the same load.
    #[arg(long, default_value_t = 0)]
    background: usize,
}

/// Busy-looping processes at `nice 19`, stopped when dropped.
struct BackgroundLoad(Vec<std::process::Child>);

impl BackgroundLoad {
    fn start(count: usize) -> Result<Self> {
        let mut load = Self(Vec::with_capacity(count));
        for _ in 0..count {
            let child = Command::new("nice")
                .args(["-n", "19", "sh", "-c", "while :; do :; done"])
                .stdin(std::process::Stdio::null())
                .spawn()
                .context("starting a background load process (`nice` and `sh` are needed)")?;
            load.0.push(child);
        }
        Ok(load)
    }
}

impl Drop for BackgroundLoad {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// One result line, as printed by both peers.
#[derive(Serialize, Deserialize, Clone, Debug, Default)]
pub(crate) struct Measurement {
    #[serde(rename = "impl")]
    implementation: String,
    workload: String,
    #[serde(default)]
    producers: usize,
    #[serde(default)]
    consumers: usize,
    #[serde(default)]
    keys: usize,
    #[serde(default)]
    adds: usize,
    #[serde(default)]
    rounds: usize,
    #[serde(default)]
    processed: usize,
    elapsed_ns: u64,
    #[serde(default)]
    ops_per_sec: f64,
    #[serde(default)]
    ns_per_op: f64,
    #[serde(default)]
    p50_ns: u64,
    #[serde(default)]
    p99_ns: u64,
}

impl Measurement {
    fn new(implementation: &str) -> Self {
        Self {
            implementation: implementation.into(),
            ..Self::default()
        }
    }
}

fn target_dir(root: &Path) -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), PathBuf::from)
}

pub(crate) fn run(args: WorkqueueArgs) -> Result<()> {
    let root = crate::workspace_root();
    let target = target_dir(&root);
    let reps = args.reps.unwrap_or(if args.quick { 2 } else { 5 }).max(1);

    let go_version = go_version()?;
    eprintln!("building the client-go peer ({go_version})…");
    let go_peer = build_go_peer(&root, &target)?;
    eprintln!("building the kctrl peer (release)…");
    let rust_peer = build_rust_peer(&root, &target)?;
    let machine = report::Machine::detect(&root, go_version)?;
    let background = BackgroundLoad::start(args.background)?;
    if args.background > 0 {
        eprintln!(
            "{} busy-looping process(es) at nice 19 run until the end",
            args.background
        );
        std::thread::sleep(Duration::from_secs(1));
    }

    let mut measurements = Vec::new();
    let mut loads = Vec::new();
    for rep in 1..=reps {
        eprintln!("repetition {rep}/{reps}: client-go");
        loads.push(format!("run {rep} client-go {}", load_average()));
        measurements.extend(run_peer(Command::new(&go_peer), args.quick)?);
        eprintln!("repetition {rep}/{reps}: kctrl");
        loads.push(format!("run {rep} kctrl {}", load_average()));
        let mut rust = Command::new(&rust_peer);
        rust.args(["bench", "workqueue-peer"]);
        measurements.extend(run_peer(rust, args.quick)?);
    }

    drop(background);
    let table = report::summarize(&measurements);
    println!("{}", report::text_table(&table));
    if !args.no_doc {
        let doc = root.join(if args.background > 0 {
            "docs/benchmarks/workqueue-busy.md"
        } else {
            "docs/benchmarks/workqueue.md"
        });
        std::fs::create_dir_all(doc.parent().expect("has a parent"))?;
        std::fs::write(
            &doc,
            report::markdown(&table, &machine, &loads, reps, args.quick, args.background),
        )
        .with_context(|| format!("writing {}", doc.display()))?;
        eprintln!("wrote {}", doc.display());
    }
    Ok(())
}

/// The 1, 5 and 15 minute load averages, e.g. `2.16 0.81 0.30`.
fn load_average() -> String {
    xtask_report::machine::load_average()
}

fn go_version() -> Result<String> {
    let output = Command::new("go").arg("version").output().map_err(|error| {
        anyhow::anyhow!(
            "`go` was not found on PATH ({error}). The client-go side of this benchmark is a Go \
             program (bench/workqueue-go); install Go 1.26 or newer and retry."
        )
    })?;
    if !output.status.success() {
        bail!(
            "`go version` failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&output.stdout).trim().to_string())
}

/// `nice -n 10 <program>` where `nice` exists: builds share the machine with other work.
fn niced(program: &str) -> Command {
    if Command::new("nice")
        .arg("true")
        .output()
        .is_ok_and(|out| out.status.success())
    {
        let mut command = Command::new("nice");
        command.args(["-n", "10", program]);
        command
    } else {
        Command::new(program)
    }
}

fn build_go_peer(root: &Path, target: &Path) -> Result<PathBuf> {
    let out = target.join("bench").join("workqueue-go");
    let status = niced("go")
        .args(["build", "-o"])
        .arg(&out)
        .arg(".")
        .current_dir(root.join("bench/workqueue-go"))
        .status()
        .context("running go build")?;
    if !status.success() {
        bail!("go build of bench/workqueue-go failed ({status})");
    }
    Ok(out)
}

fn build_rust_peer(root: &Path, target: &Path) -> Result<PathBuf> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = niced(&cargo)
        .args(["build", "--release", "--quiet", "-p", "xtask"])
        .current_dir(root)
        .status()
        .context("running cargo build")?;
    if !status.success() {
        bail!("release build of xtask failed ({status})");
    }
    Ok(target
        .join("release")
        .join(format!("xtask{}", std::env::consts::EXE_SUFFIX)))
}

fn run_peer(mut command: Command, quick: bool) -> Result<Vec<Measurement>> {
    if quick {
        command.arg("--quick");
    }
    let output = command
        .output()
        .with_context(|| format!("running {command:?}"))?;
    if !output.status.success() {
        bail!(
            "{command:?} failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
    }
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| {
            serde_json::from_str(line).with_context(|| format!("bad result line from peer: {line}"))
        })
        .collect()
}

/// Hand-written notes appended to the generated report: how the numbers come about. Numbers
/// quoted here were measured on the 2-CPU VM where the notes were written.
const ANALYSIS: &str = r#"
## Analysis

**This run, and the one before it.** This run was taken on a quiet machine (load average
about 1, the benchmark alone; see *Machine*), and it changes the picture of the previous report
(2026-11-24), taken at load 5 while a control plane and a controller benchmark shared the 2 CPUs.
Under that load client-go's contended rows ran at 1.3–2.1 M adds/s and ours at 2.3–4.0, so ours
led 1.7–2.1×; on a quiet machine client-go runs 2–3× faster (3.2–5.4) and ours does not gain
(2.6–3.7), so the contended distinct-key rows are 0.68–0.82× (8P/2C 100k keys: 1.37×). The queue
is bimodal the other way round from before: ahead of client-go when the machine is busy, behind
it when it is idle. A first quiet run the same hour gave the same rows within 0.1×. The
uncontended 100k-key row meets its 2× target (2.33×); the 1k-key row (1.17×) pays each round's
task start-up, wake-ups and a table grown from empty, which 1000 adds do not amortize.

**Design, in short.** One lock guards the queue's state, as in client-go, but the state is one
hash table of per-item flags (dirty / processing / lane) instead of two sets, probed once per
operation with a hash computed before the lock is taken; the two priority lanes are two ring
buffers inside the same lock and keep each item's hash, so `get` never rehashes. `get` is
`async`: when an item is waiting it returns without touching the wake-up machinery; otherwise it
parks on a `tokio::sync::Notify`, registered under the lock so no add is missed, and an add
notifies only when a getter is actually parked. The lock is `parking_lot`'s mutex (see
*Contention* below). `add_after` inserts into the delay heap under its own short lock; the
waiting loop is woken only when the earliest ready time changes.

**What the priority lanes cost.** Nothing measurable in these rows, which use only the high lane.
An add picks the ring buffer by a branch; a `get` while the low lane is empty pops the high lane
after one comparison. A waiting item that rises to the high lane leaves its low entry behind,
recognised as stale when popped by a ticket kept in what was padding in the item's slot, so the
slot did not grow and no ring buffer is searched. A callgrind count of the 1P/1C 100k-key row
gives 133 instructions per `get` against 109 for the single FIFO before lanes, about 1% of the
~870 instructions an item costs in all. Alternating runs of that queue and this one (before the
lock change, same workloads) agreed within their noise: main's queue was ahead by up to 10% in
some medians and behind in others.

**Contention.** Before this change the contended rows were bimodal: 2.2–2.9× client-go on a quiet
machine, 0.4–0.6× on a busy one (last committed report: 0.47×, 0.60×, 0.48×, 0.97× for the four
contended distinct-key rows). `std`'s futex mutex spins briefly and then sleeps the waiting OS
thread in the kernel; when the holder has been descheduled, that stops half of a 2-worker Tokio
runtime until the holder runs again. `parking_lot`'s mutex spins, then yields the CPU (so a
descheduled holder can finish), then parks; it is already in the dependency tree through
prometheus-client. In ten alternating runs of the throughput rows with each lock (load 3–3.7), the
medians stayed within noise and the slowest run of each contended row rose: 2P/2C 100 keys 12.3
vs 6.1 M adds/s, 8P/2C 100 keys 15.8 vs 8.2, 2P/2C 100k keys 2.71 vs 1.43, 8P/2C 100k keys 2.62
vs 1.50, 8P/2C 1k keys 4.37 vs 2.73, 2P/2C 1k keys 5.10 vs 3.76. In the previous report (load 5) the
four contended distinct-key rows were 1.74–2.11× with every run ≥ 1.24×; in this quiet run
0.68–1.37× (see the next paragraphs). (A full run of the lanes with `std`'s
mutex, earlier the same day at load 7–10, gave medians 2.85×, 3.05×, 2.50× and 0.71×.) Those
figures are all from busy machines; the lock was never compared on an idle one.

**Quiet machine: where the contended rows lose.** A profile of the 2P/2C 1k-key row (`perf
record -g`, idle machine): the queue's own functions (add, get, done, the table probe) take
about half of the samples, `parking_lot`'s slow lock path 7% with 4,600–8,000 `sched_yield`
calls per run, and the kernel's wake-up paths (`try_to_wake_up`, `finish_task_switch`) about a
quarter. `strace -c` counts about 15 eventfd writes and 15 `epoll_wait` returns per round of
1000 adds: Tokio waking an idle worker, parked in its I/O driver, for the tasks each round spawns
and joins and for consumers woken by an add. Go's idle processors spin looking for work before
they sleep, so its goroutine hand-offs rarely reach the kernel. Two changes were measured and
not kept: driving the rounds from a task on the runtime instead of from `block_on`'s thread
(29,000 fewer `futex` calls per run, throughput unchanged), and a bounded spin in `get` before
parking (32 × 32 pause instructions, polling with `try_lock`): +15–20% in the 2P/2C 100k-key
row, nothing in the 1k-key row, and it would burn the only thread of a one-thread runtime (the
deployment-controller's default). `std`'s mutex on the idle machine (three alternating pairs
of the throughput rows): 2P/2C 1k keys 1.96–2.22 M adds/s against 4.15–4.24 with
`parking_lot`'s, 2P/2C 100k keys 1.31–1.40 against 3.00–3.25, 8P/2C 1.1–2.0 against 3.1–4.0;
`parking_lot` stays. Not yet tried: a design whose `get` does not take the lock when an item
waits.

**Idle or busy: what decides the contended rows (2026-11-27, later).** Three more designs were
measured on the idle machine, each in a small harness that repeats this benchmark's rounds
(fresh queue, P producer and C consumer tasks, 2 Tokio workers, `Arc<str>` keys; M adds/s,
two runs each):

| variant | 2P/2C 1k | 2P/2C 100k | 8P/2C 1k | 8P/2C 100k | 1P/1C 1k | 1P/1C 100k |
|---|---:|---:|---:|---:|---:|---:|
| this queue | 3.53 / 3.43 | 2.36 / 2.50 | 3.43 / 3.49 | 3.14 / 2.91 | 6.23 / 6.03 | 8.24 / 8.74 |
| `spin`'s test-and-set mutex, yielding the CPU between tries | 3.01 / 2.98 | 2.07 / 2.20 | 3.10 / 3.10 | 2.50 / 2.42 | 6.47 / 6.38 | 7.87 / 8.47 |
| the same, and `get` yields to the scheduler 3 times before it parks | 3.15 / 2.95 | 1.97 / 2.05 | 2.95 / 3.02 | 2.24 / 2.18 | 7.34 / 7.06 | 7.28 / 7.24 |
| `parking_lot`, 32 `try_lock`s (pauses, then yields) before it may park | 3.25 / 3.28 | 2.41 / 2.03 | 3.37 / 3.27 | 2.77 / 2.66 | 5.92 / 5.61 | 7.11 / 6.97 |
| `async-channel` (lock-free MPMC; no dedup, no `done`) | 3.92 / 3.76 | 2.31 / 2.25 | 4.71 / 4.85 | 3.70 / 3.99 | 6.56 / 6.57 | 9.54 / 9.72 |

A fourth, per-item state in 8 shards (one lock each) with the waiting line under a lock of its
own held only for a push or pop (not kept), ran at 2.3-3.0 in the contended rows
against 3.2-9.8 for this queue in the same sitting, so it was not measured further. None of
them beats this queue where it loses, and a lock-free channel that does far less work
(nothing to deduplicate, no processing set) is no faster than this queue in the 2P/2C rows:
the data structure is not what the idle machine charges for. What it charges for shows when
the machine is *not* idle. The same binary, with busy-looping processes at `nice 19` beside it
(2P/2C, M adds/s, three runs each):

| background | this queue, 1k | this queue, 100k | `async-channel`, 1k | client-go, 1k | client-go, 100k |
|---|---:|---:|---:|---:|---:|
| none | 3.47 3.58 3.65 | 2.30 2.52 2.42 | 4.14 3.88 4.04 | 5.22 | 3.16 |
| 1 process | 5.77 6.97 5.76 | 5.01 3.94 6.82 | 6.32 6.03 6.57 | 5.07 | 3.14 |
| 2 processes | 2.25 2.02 2.82 | 6.44 6.14 5.85 | 3.32 2.43 3.42 | 5.00 | 3.18 |
| 3 processes | 1.20 2.41 1.97 | 4.49 4.07 4.72 | 2.56 3.82 3.27 | | |

client-go does not move; ours (and the channel) double when one background process keeps a
CPU from idling, and fall when more of them compete for the moments our threads sleep. Tokio
parks a worker thread as soon as it runs out of tasks and the mutex parks a waiter after a
short spin; on this VM a parked thread's CPU halts, and waking it costs far more than the
queue operation it waits for. Go's scheduler keeps a spinning thread looking for goroutines
before it sleeps, so its hand-offs rarely reach the kernel. `cargo xtask bench workqueue
--background N` runs the whole benchmark in that regime (it writes
docs/benchmarks/workqueue-busy.md; the tables here were measured by hand). Conclusion for the issue's contended targets (every row
≥ 1× in every run, distinct-key rows ≥ 1.5×): on this machine they depend on the runtime's
thread parking, which the queue cannot change; none of the designs above helps, and a
spinning getter would burn the single thread of the controller's runtime.

A sharded design was tried on the `workqueue` branch (64 shards of per-item state, one lock-free
FIFO per lane): it measured 0.70× in the 100k-distinct-key rows (its own report could not say
how much of that was cache misses and how much load), where this queue measures 1.74–2.11× here;
different runs and loads, so only roughly comparable. It was not merged; its lanes API, stress
test and bench row were kept and moved onto this queue.

**Throughput: what costs what.** On this class of VM an atomic read-modify-write costs about
12–15 ns (an `Arc<str>` clone+drop 25 ns). Both queues pay three lock round-trips per item (add,
get, done). client-go also pays seven set operations over two maps, goroutine park/unpark in
`Get`, and runs producers and consumers in parallel on two Ps, so the lock and the item's cache
lines move between cores for every operation. What shows up in the table:

- *Reference counting.* Items are `Arc<str>` (the realistic owned key; `String` measured slower),
  and every add of a key that is already queued costs a clone by the caller and a drop of the
  collapsed duplicate: two atomics Go strings do not pay. With two producers on two cores, keys
  allocated next to each other share cache lines, so those atomics also bounce between cores.
  Two reference columns show it: the *`&'static str`* column runs the identical queue with items
  that need no reference counting, and the *add_ref* column uses `Queue::add_ref(&key)`, which
  clones a key only when the queue keeps it, so a collapsed add touches no reference count.
- *Scheduling.* Tokio tasks are cooperative. A producer that adds in a tight loop keeps its worker
  until the loop ends, and a consumer it wakes waits in that worker's LIFO slot, so producer and
  consumer often run one after the other without contending. With 2 and 8 producers both workers
  run producers at once and the lock is contended.
- *Cache misses.* In the 100k-key rows the table (about 3 MB) no longer fits in cache, so each
  item's slot is a miss when added and again when handed out; client-go pays the same class of
  misses, in two maps. The 1P/1C 100k row sits near its target and the load decides which
  side: 2.33× here (runs 1.49–2.65×), 1.91× at load 5, 4.30× and 1.6× in earlier runs.

**Duplication rows: below target, and why.** A callgrind count of the 1P/1C 100-key row (where
almost every add collapses) gives about 268 instructions per `add(key.clone())`: ~68 to hash the
`Arc<str>` (foldhash, ~25-byte keys), ~160 in the locked section, including the table probe and a
`memcmp` of the key (std's `Arc` equality skips to a pointer comparison only for sized types, so
`Arc<str>` compares bytes even when both sides are the same allocation), and four atomic
read-modify-writes: the caller's clone, lock, unlock, and the drop of the collapsed duplicate.
client-go pays two (lock, unlock) and Go compares strings by pointer first. Nothing in the queue
removes the caller's clone and the drop of a duplicate it does not keep, and a lock-free "already
dirty" check would need either `unsafe` code (forbidden here) or trusting 64-bit hashes as
identity. Hence, with `add(key.clone())`: 1P/1C 1.04× (target 2×), 2P/2C 0.20× and 8P/2C 0.58×
(target 1×), where the two producers' reference counts on neighbouring keys bounce between the
CPUs. The same rows with `add_ref` are 1.52×, 0.45× and 1.39×, and with `&'static str` keys
1.98×, 0.42× and 1.16× (under load, in the previous report: 2.12×, 1.12×, 1.24× and 2.50×,
1.35×, 1.64×): the reference counting of the key type costs the 1P/1C row half its lead, and
on an idle machine the 2P/2C row loses to lock contention whatever the key type.
A caller that keeps its keys (an informer's store does) should use `add_ref`. Options tried and
not kept, because alternating runs showed no gain above the noise: a per-handle copy of the
hasher seeds with the lock on cache lines of its own.

**Controller shape: below target, and why.** Producers call `tokio::task::yield_now()` after each
add and consumers keep up (every add is processed: 10,000 items per round against 9,200–9,600
for client-go), so nearly every item costs a consumer park and wake-up. In Tokio a yielded
task is deferred; a worker with nothing else to run polls the I/O driver (an `epoll_wait` system
call) before resuming it, where Go's `Gosched` is a run-queue operation. `strace -c` of one kctrl
run (with `std`'s mutex) counted ~13,300 `epoll_wait` and ~600 `futex` calls (averaging 155 µs under load, i.e. worker
threads waiting for a CPU) for 210,000 adds. The queue's own work per item is a few hundred
nanoseconds of the ~2 µs each item takes; standalone runs at load ~7 (with `std`'s mutex) measured
0.90×, 0.88× and 0.35× for three consecutive pairs, the last one a slow mode of the runtime's thread wake-ups. This
row therefore measures Tokio's yield and wake-up path against Go's scheduler more than the queue;
it misses its target in this run (0.85×, runs 0.84–0.87×; 0.82× at load 5 before).

**add_after.** client-go hands every entry to its waiting goroutine through a channel (a
goroutine hand-off per call, blocking once 1000 are buffered); we insert into the heap inline,
deduplicating with the same hash table probe, and wake the loop only for a new earliest entry.

**Timer lateness.** Tokio's timer wheel ticks every millisecond and rounds deadlines up, so a Tokio
sleep ends 0–2 ms late (p99 ≈ 2 ms measured): alone it would miss the 1 ms target. The waiting
loop therefore also arms an alarm on one process-wide thread that sleeps on a condition variable
with a nanosecond timeout and wakes the loop at the ready time; the loop still decides what is due
by Tokio's clock, and its Tokio sleep stays as the fallback and is what tests on Tokio's paused
clock see. client-go's lateness comes from Go's timers plus its waiting goroutine's wake-up. The
alarm thread needs a CPU at the ready time: at load 5 it often waits for one (p99 2.8 ms in the
previous report); on this quiet run the p99 is 0.14 ms. This
work did not touch the delaying queue.
"#;

#[cfg(test)]
mod tests {
    use super::BackgroundLoad;

    #[test]
    fn background_load_runs_niced_until_dropped() {
        assert!(BackgroundLoad::start(0).unwrap().0.is_empty());
        let load = BackgroundLoad::start(1).unwrap();
        let pid = load.0[0].id();
        // `nice` sets the priority and then becomes `sh`: wait for the exec.
        let mut stat = String::new();
        for _ in 0..200 {
            stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
            if stat.contains("(sh)") {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert!(stat.contains("(sh)"), "{stat}");
        // Field 19 of /proc/PID/stat is the nice value (after the parenthesised command name).
        let after_name = &stat[stat.rfind(')').unwrap() + 2..];
        let nice: i32 = after_name.split(' ').nth(16).unwrap().parse().unwrap();
        assert_eq!(nice, 19, "{stat}");
        drop(load);
        let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok();
        assert!(state.is_none(), "still running after drop: {state:?}");
    }
}

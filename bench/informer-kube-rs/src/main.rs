//! kube-rs peer of `cargo xtask bench informer`: a `watcher` + `reflector` store on the pods of
//! one namespace. Protocol (same for the three peers): arguments
//! `<kubeconfig> <namespace> <expected pods> <none|transform|metadata|metadata-transform> <expected updates> <settle ms>`;
//! JSON lines on stdout: `synced` (time from starting the watch to a ready store, RSS), `steady`
//! (RSS after the settle time), then, after a line on stdin, `burst` (update events counted by
//! the handler and their first-to-last rate).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector;
use kube::core::PartialObjectMeta;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client, Config};
use tokio::io::AsyncBufReadExt;

/// (VmRSS, VmHWM) in bytes.
fn rss() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map_or(0, |kb| kb * 1024)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

#[tokio::main]
async fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 7 {
        bail!(
            "usage: {} <kubeconfig> <namespace> <pods> <transform|none> <updates> <settle-ms>",
            args[0]
        );
    }
    let (kubeconfig, namespace) = (&args[1], &args[2]);
    let expected: usize = args[3].parse().context("pods")?;
    let variant = match args[4].as_str() {
        "transform" => Variant::Full { transform: true },
        "none" => Variant::Full { transform: false },
        "metadata" => Variant::Metadata { transform: false },
        "metadata-transform" => Variant::Metadata { transform: true },
        other => {
            bail!("variant must be none, transform, metadata or metadata-transform, not {other}")
        }
    };
    let updates: u64 = args[5].parse().context("updates")?;
    let settle = Duration::from_millis(args[6].parse().context("settle-ms")?);

    let kubeconfig = kube::config::Kubeconfig::read_from(kubeconfig)?;
    let config = Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?;
    let client = Client::try_from(config)?;
    match variant {
        Variant::Metadata { transform } => {
            // An Api over PartialObjectMeta asks the server for metadata only.
            let api: Api<PartialObjectMeta<Pod>> = Api::namespaced(client, namespace);
            let (store, writer) = reflector::store::<PartialObjectMeta<Pod>>();
            let stream = watcher::watcher(api, watcher::Config::default())
                .default_backoff()
                .map(move |event| {
                    event.map(|e| {
                        if transform {
                            e.modify(|meta| meta.metadata.managed_fields = None)
                        } else {
                            e
                        }
                    })
                })
                .reflect(writer);
            measure(stream, store, expected, updates, settle).await
        }
        Variant::Full { transform } => {
            let api: Api<Pod> = Api::namespaced(client, namespace);
            let (store, writer) = reflector::store::<Pod>();
            let stream = watcher::watcher(api, watcher::Config::default())
                .default_backoff()
                .map(move |event| {
                    event.map(|e| {
                        if transform {
                            e.modify(|pod| pod.metadata.managed_fields = None)
                        } else {
                            e
                        }
                    })
                })
                .reflect(writer);
            measure(stream, store, expected, updates, settle).await
        }
    }
}

/// What is cached: whole Pods or their metadata alone, each optionally without managedFields.
#[derive(Clone, Copy)]
enum Variant {
    Full { transform: bool },
    Metadata { transform: bool },
}

/// Waits for the store, reports the sync and the steady RSS, then counts the update burst.
async fn measure<K, S>(
    stream: S,
    store: reflector::Store<K>,
    expected: usize,
    updates: u64,
    settle: Duration,
) -> Result<()>
where
    K: kube::Resource + Clone + Send + Sync + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone + Default,
    S: futures::Stream<Item = Result<Event<K>, watcher::Error>> + Send + 'static,
{
    let seen = Arc::new(AtomicU64::new(0));
    let first_ns = Arc::new(AtomicU64::new(0));
    let last_ns = Arc::new(AtomicU64::new(0));
    let counting = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let epoch = Instant::now();

    // The "handler": once counting, every `Apply` event is an update of a pod the store
    // already holds (what client-go calls OnUpdate): the burst only patches existing pods.
    let (h_seen, h_first, h_last, h_counting) = (
        seen.clone(),
        first_ns.clone(),
        last_ns.clone(),
        counting.clone(),
    );
    let handler = tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(event) = stream.next().await {
            if let Ok(Event::Apply(_)) = event {
                if h_counting.load(Ordering::Relaxed) {
                    let now = epoch.elapsed().as_nanos() as u64;
                    if h_seen.fetch_add(1, Ordering::Relaxed) == 0 {
                        h_first.store(now, Ordering::Relaxed);
                    }
                    h_last.store(now, Ordering::Relaxed);
                }
            }
        }
    });

    let start = Instant::now();
    store
        .wait_until_ready()
        .await
        .context("reflector writer dropped")?;
    let sync_ms = start.elapsed().as_secs_f64() * 1e3;
    let (rss_bytes, hwm_bytes) = rss();
    println!(
        "{}",
        serde_json::json!({"event": "synced", "sync_ms": sync_ms, "objects": store.len(), "expected": expected, "rss_bytes": rss_bytes, "hwm_bytes": hwm_bytes})
    );
    tokio::time::sleep(settle).await;
    let (rss_bytes, hwm_bytes) = rss();
    println!(
        "{}",
        serde_json::json!({"event": "steady", "objects": store.len(), "rss_bytes": rss_bytes, "hwm_bytes": hwm_bytes})
    );

    // Wait for the driver's go-ahead, then count the burst.
    let mut line = String::new();
    tokio::io::BufReader::new(tokio::io::stdin())
        .read_line(&mut line)
        .await?;
    if updates == 0 {
        return Ok(());
    }
    counting.store(true, Ordering::Relaxed);
    println!("{}", serde_json::json!({"event": "counting"}));
    let deadline = Instant::now() + Duration::from_secs(600);
    while seen.load(Ordering::Relaxed) < updates && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let n = seen.load(Ordering::Relaxed);
    let span = (last_ns.load(Ordering::Relaxed) - first_ns.load(Ordering::Relaxed)) as f64 / 1e9;
    let (rss_bytes, hwm_bytes) = rss();
    println!(
        "{}",
        serde_json::json!({"event": "burst", "updates": n, "span_ms": span * 1e3, "events_per_sec": if span > 0.0 { (n.saturating_sub(1)) as f64 / span } else { 0.0 }, "rss_bytes": rss_bytes, "hwm_bytes": hwm_bytes})
    );
    handler.abort();
    Ok(())
}

//! The kctrl side of `cargo xtask bench informer`: a [`SharedInformer`] on the pods of one
//! namespace, run by the driver as a hidden subcommand of a release build of xtask.
//!
//! Protocol (same for the three peers): arguments `<kubeconfig> <namespace> <expected pods>
//! <none|transform|view|view-protobuf|metadata|metadata-transform> <expected updates> <settle ms>`; JSON lines on stdout: `synced` (time from
//! starting the informer to `synced()`, RSS), `steady` (RSS after the settle time), then, after a
//! line on stdin, `counting`, and `burst` (update events counted by an `on_update` handler and
//! their first-to-last rate).

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use k8s_openapi::api::core::v1::Pod;
use kctrl_client::{Api, Client, PartialObjectMetadata};
use kctrl_config::Config;
use kctrl_deployment::pod_view::PodView;
use kctrl_informer::{EventHandlerFns, ListWatch, SharedInformer, SharedInformerOptions};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::Variant;

/// Arguments of the hidden `cargo xtask bench informer-peer`.
#[derive(clap::Args)]
pub(crate) struct PeerArgs {
    /// Kubeconfig of the cluster.
    kubeconfig: PathBuf,
    /// Namespace whose pods are watched.
    namespace: String,
    /// Pods the namespace holds (only echoed back).
    pods: usize,
    /// What is cached: `none`, `transform` (managedFields dropped), `view` (the Deployment
    /// controller's Pod view), `view-protobuf` (the same, decoded from protobuf) or
    /// `metadata` (PartialObjectMetadata) or `metadata-transform` (the same without
    /// managedFields).
    variant: Variant,
    /// Update events to wait for after the go-ahead on stdin; 0 exits after `steady`.
    updates: u64,
    /// Milliseconds between `synced` and `steady`.
    settle_ms: u64,
}

/// (VmRSS, VmHWM) of this process in bytes.
pub(crate) fn rss() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|line| line.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map_or(0, |kb| kb * 1024)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

pub(crate) fn run(args: PeerArgs) -> Result<()> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(peer(args))
}

async fn peer(args: PeerArgs) -> Result<()> {
    let mut config = Config::from_flags(Some(&args.kubeconfig), None, &Default::default())
        .context("loading the kubeconfig")?;
    // No client-side rate limit, as for the other peers.
    config.qps = -1.0;
    let client = Client::try_from_config(config)?;
    match args.variant {
        Variant::None | Variant::Transform => {
            let transform: Option<kctrl_informer::Transform<Pod>> =
                (args.variant == Variant::Transform).then(|| {
                    let drop_managed_fields: kctrl_informer::Transform<Pod> =
                        Arc::new(|mut pod: Pod| {
                            pod.metadata.managed_fields = None;
                            pod
                        });
                    drop_managed_fields
                });
            let informer = SharedInformer::new(
                ListWatch::new(Api::<Pod>::namespaced(client, &args.namespace)),
                SharedInformerOptions {
                    transform,
                    ..Default::default()
                },
            );
            measure(informer, &args).await
        }
        // What the Deployment controller caches of a Pod.
        Variant::View | Variant::ViewProtobuf => {
            let mut api = Api::<PodView>::namespaced(client, &args.namespace);
            if args.variant == Variant::ViewProtobuf {
                api = api.protobuf();
            }
            let informer =
                SharedInformer::new(ListWatch::new(api), SharedInformerOptions::default());
            measure(informer, &args).await
        }
        Variant::Metadata | Variant::MetadataTransform => {
            let mut api = Api::<PartialObjectMetadata<Pod>>::namespaced(client, &args.namespace);
            if args.variant == Variant::MetadataTransform {
                api = api.without_managed_fields();
            }
            let informer =
                SharedInformer::new(ListWatch::new(api), SharedInformerOptions::default());
            measure(informer, &args).await
        }
    }
}

/// Syncs `informer`, reports the sync and the steady RSS, then counts the update burst.
async fn measure<K>(informer: SharedInformer<K>, args: &PeerArgs) -> Result<()>
where
    K: k8s_openapi::ListableResource
        + k8s_openapi::Metadata<Ty: kctrl_client::ObjectMetaAccess>
        + Clone
        + Send
        + Sync
        + 'static,
{
    let counting = Arc::new(AtomicBool::new(false));
    let seen = Arc::new(AtomicU64::new(0));
    let first_ns = Arc::new(AtomicU64::new(0));
    let last_ns = Arc::new(AtomicU64::new(0));
    let epoch = Instant::now();
    let (h_counting, h_seen, h_first, h_last) = (
        counting.clone(),
        seen.clone(),
        first_ns.clone(),
        last_ns.clone(),
    );
    let _registration = informer.add_event_handler(EventHandlerFns::new().on_update(
        move |_old: &Arc<K>, _new: &Arc<K>| {
            if !h_counting.load(Ordering::Relaxed) {
                return;
            }
            let now = epoch.elapsed().as_nanos() as u64;
            if h_seen.fetch_add(1, Ordering::Relaxed) == 0 {
                h_first.store(now, Ordering::Relaxed);
            }
            h_last.store(now, Ordering::Relaxed);
        },
    ))?;

    let cancel = CancellationToken::new();
    let start = Instant::now();
    let task = informer.start(cancel.clone());
    if !informer.synced().await {
        anyhow::bail!("the informer stopped before it synced");
    }
    let sync_ms = start.elapsed().as_secs_f64() * 1e3;
    let (rss_bytes, hwm_bytes) = rss();
    println!(
        "{}",
        json!({"event": "synced", "sync_ms": sync_ms, "objects": informer.store().len(),
               "expected": args.pods, "rss_bytes": rss_bytes, "hwm_bytes": hwm_bytes})
    );
    tokio::time::sleep(Duration::from_millis(args.settle_ms)).await;
    let (rss_bytes, hwm_bytes) = rss();
    println!(
        "{}",
        json!({"event": "steady", "objects": informer.store().len(),
               "rss_bytes": rss_bytes, "hwm_bytes": hwm_bytes})
    );

    // Wait for the driver's go-ahead, then count the burst.
    tokio::task::spawn_blocking(|| {
        let mut line = String::new();
        std::io::stdin().read_line(&mut line)
    })
    .await??;
    if args.updates > 0 {
        counting.store(true, Ordering::Relaxed);
        println!("{}", json!({"event": "counting"}));
        let deadline = Instant::now() + Duration::from_secs(600);
        while seen.load(Ordering::Relaxed) < args.updates && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let n = seen.load(Ordering::Relaxed);
        let span =
            (last_ns.load(Ordering::Relaxed) - first_ns.load(Ordering::Relaxed)) as f64 / 1e9;
        let (rss_bytes, hwm_bytes) = rss();
        println!(
            "{}",
            json!({"event": "burst", "updates": n, "span_ms": span * 1e3,
                   "events_per_sec": if span > 0.0 { n.saturating_sub(1) as f64 / span } else { 0.0 },
                   "rss_bytes": rss_bytes, "hwm_bytes": hwm_bytes})
        );
    }
    cancel.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(5), task).await;
    Ok(())
}

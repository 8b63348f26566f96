//! A sharded controller of a custom resource: run several copies of this process, and each
//! reconciles the `Gadget`s of a part of the namespaces, caching only those (and their
//! ConfigMaps).
//!
//! Each `Gadget` gets a ConfigMap `<name>-gadget` holding its size, controlled by it, and a
//! status naming the replica that handled it. The replicas of group `gadgets` find each other
//! through Leases (`gadgets-<identity>`), split the namespaces' hash space between them, and
//! hand ranges over when one joins or leaves: the one losing a range finishes its reconciles
//! there first, the one gaining it starts once its caches hold the range. Sharding is by
//! namespace because the controller owns ConfigMaps: a ConfigMap is in its Gadget's namespace,
//! so in its shard.
//!
//! ```text
//! cargo run -p kctrl-runtime --example sharded -- crd | kubectl apply -f -
//! IDENTITY=a HTTP_ADDR=127.0.0.1:8081 cargo run -p kctrl-runtime --example sharded &
//! IDENTITY=b HTTP_ADDR=127.0.0.1:8082 cargo run -p kctrl-runtime --example sharded &
//! curl 127.0.0.1:8081/readyz    # 200 once replica a holds a range, 503 before
//! curl 127.0.0.1:8081/metrics   # shard_member_ranges, shard_handovers_total, ...
//! ```
//!
//! `IDENTITY` (the pod name, in a Deployment) must be unique per replica; `LEASE_NAMESPACE`
//! (default `default`) holds the Leases. kube-apiserver filters each replica's list and watch
//! with the `ShardedListAndWatch` feature gate on; without it the replicas filter what they
//! receive, with the same result in their caches. `tests/e2e/sharded_runtime.rs` runs three
//! replicas against a real API server.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kctrl_client::{Api, Client, CustomResource, PatchParams, ShardField};
use kctrl_controller_ref::Owner;
use kctrl_informer::SharedInformerFactory;
use kctrl_runtime::shard::{Sharding, ShardingError};
use kctrl_runtime::{Action, Controller, OwnWrites, Predicate, RunError};
use kctrl_shard::{PrometheusShardMetrics, ShardConfig};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

/// A Gadget asks for a ConfigMap holding its size.
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[resource(
    group = "e2e.kctrl.dev",
    version = "v1",
    kind = "Gadget",
    namespaced,
    status = "GadgetStatus"
)]
pub(crate) struct GadgetSpec {
    /// What the ConfigMap holds.
    pub(crate) size: i64,
}

/// What the controller reports.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct GadgetStatus {
    /// The replica (shard member identity) that reconciled this generation.
    pub(crate) handled_by: String,
    /// The generation the ConfigMap shows.
    pub(crate) observed_generation: i64,
}

/// The shard group of the replicas, and the field manager of their writes.
pub(crate) const GROUP: &str = "gadgets";

/// Why a reconcile failed.
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub(crate) struct Error(#[from] kctrl_client::Error);

/// What one replica's reconciles share.
pub(crate) struct Gadgets {
    /// Writes.
    pub(crate) client: Client,
    /// This replica's identity, written into the statuses.
    pub(crate) identity: String,
    /// Where the writes are recorded ([`Controller::own_writes`]).
    pub(crate) writes: OwnWrites,
    /// Every reconcile of this replica: the Gadget's key and generation, when it started and
    /// ended.
    pub(crate) reconciles: Mutex<Vec<Reconciled>>,
}

/// One reconcile, as [`Gadgets::reconciles`] records it.
#[allow(dead_code)] // Read by tests/e2e/sharded_runtime.rs, which includes this file.
#[derive(Clone, Debug)]
pub(crate) struct Reconciled {
    /// `namespace/name`.
    pub(crate) key: String,
    /// The Gadget's generation.
    pub(crate) generation: i64,
    /// When it started.
    pub(crate) started: tokio::time::Instant,
    /// When it ended.
    pub(crate) ended: tokio::time::Instant,
}

/// One Gadget: its ConfigMap, then its status.
pub(crate) async fn reconcile(g: Arc<Gadget>, ctx: Arc<Gadgets>) -> Result<Action, Error> {
    let started = tokio::time::Instant::now();
    let name = g.metadata.name.clone().unwrap_or_default();
    let ns = g.metadata.namespace.clone().unwrap_or_default();
    let generation = g.metadata.generation.unwrap_or_default();
    tracing::info!(namespace = %ns, name = %name, generation, replica = %ctx.identity, "reconciling");
    let apply = PatchParams::apply(GROUP).force();
    let cm = ConfigMap {
        metadata: ObjectMeta {
            name: Some(format!("{name}-gadget")),
            namespace: Some(ns.clone()),
            owner_references: Some(vec![Owner::of(g.as_ref()).controller_ref()]),
            ..Default::default()
        },
        data: Some(BTreeMap::from([("size".into(), g.spec.size.to_string())])),
        ..Default::default()
    };
    let written = Api::<ConfigMap>::namespaced(ctx.client.clone(), &ns)
        .apply(&apply, &cm)
        .await;
    ctx.writes.record(g.as_ref(), &cm, &written);
    written?;

    let mut status = Gadget::new(&name, g.spec.clone());
    status.metadata.namespace = Some(ns.clone());
    status.status = Some(GadgetStatus {
        handled_by: ctx.identity.clone(),
        observed_generation: generation,
    });
    let written = Api::<Gadget>::namespaced(ctx.client.clone(), &ns)
        .apply_status(&apply, &status)
        .await;
    ctx.writes.record(g.as_ref(), &status, &written);
    written?;
    ctx.reconciles
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(Reconciled {
            key: format!("{ns}/{name}"),
            generation,
            started,
            ended: tokio::time::Instant::now(),
        });
    Ok(Action::await_change())
}

/// Member `identity` of the group, its Lease in `lease_namespace`, sharding by namespace;
/// its metrics go to `metrics` if given.
pub(crate) fn sharding(
    client: &Client,
    lease_namespace: &str,
    identity: &str,
    metrics: Option<PrometheusShardMetrics>,
) -> Result<Sharding, ShardingError> {
    let mut config = ShardConfig::new(GROUP, lease_namespace, identity);
    if let Some(metrics) = metrics {
        config.metrics = Arc::new(metrics);
    }
    Sharding::new(client.clone(), config, ShardField::Namespace)
}

/// One replica: its factory (scoped to what `sharding` holds), its reconciles' context, and
/// the controller's run until `cancel`.
pub(crate) fn replica(
    client: &Client,
    sharding: Sharding,
    cancel: CancellationToken,
) -> (
    SharedInformerFactory,
    Arc<Gadgets>,
    impl Future<Output = Result<(), RunError>> + use<>,
) {
    let factory = SharedInformerFactory::builder(client.clone(), Duration::from_secs(3600))
        .shard_scope(sharding.scope())
        .build();
    let identity = sharding.member().config().identity.clone();
    let controller = Controller::<Gadget>::new(&factory)
        .owns::<ConfigMap>()
        .with_predicate(Predicate::generation_changed())
        .workers(2)
        .sharded(sharding);
    let ctx = Arc::new(Gadgets {
        client: client.clone(),
        identity,
        writes: controller.own_writes(),
        reconciles: Mutex::new(Vec::new()),
    });
    let run = controller.run(
        reconcile,
        |_g, _err, _ctx| Action::rate_limited(),
        ctx.clone(),
        cancel,
    );
    (factory, ctx, run)
}

/// `/readyz` (200 while the replica holds a range) and `/metrics` on `addr`, until `cancel`.
/// A minimal HTTP/1.1 responder, enough for probes and a scrape; a real controller would use
/// its HTTP server of choice.
async fn serve(
    addr: &str,
    sharding: Sharding,
    registry: Arc<prometheus_client::registry::Registry>,
    cancel: CancellationToken,
) -> std::io::Result<()> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind(addr).await?;
    loop {
        let (mut stream, _) = tokio::select! {
            accepted = listener.accept() => accepted?,
            () = cancel.cancelled() => return Ok(()),
        };
        let (sharding, registry) = (sharding.clone(), registry.clone());
        tokio::spawn(async move {
            let mut request = [0u8; 1024];
            let n = stream.read(&mut request).await.unwrap_or(0);
            let line = String::from_utf8_lossy(&request[..n]);
            let path = line.split_whitespace().nth(1).unwrap_or("/");
            let (status, body) = match path {
                "/readyz" => match sharding.ready_check() {
                    Ok(()) => ("200 OK", "ok\n".to_owned()),
                    Err(not_ready) => ("503 Service Unavailable", format!("{not_ready}\n")),
                },
                "/metrics" => {
                    let mut text = String::new();
                    match prometheus_client::encoding::text::encode(&mut text, &registry) {
                        Ok(()) => ("200 OK", text),
                        Err(e) => ("500 Internal Server Error", format!("{e}\n")),
                    }
                }
                _ => ("404 Not Found", "not found\n".to_owned()),
            };
            let response = format!(
                "HTTP/1.1 {status}\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = stream.write_all(response.as_bytes()).await;
        });
    }
}

/// Runs one replica until SIGTERM or Ctrl-C; `crd` prints the Gadget CRD instead.
#[allow(dead_code)] // tests/e2e/sharded_runtime.rs includes this file for its controller alone.
#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    if std::env::args().nth(1).as_deref() == Some("crd") {
        println!(
            "{}",
            serde_json::to_string_pretty(&<Gadget as kctrl_client::crd::CustomResourceExt>::crd())?
        );
        return Ok(());
    }
    let identity = std::env::var("IDENTITY")
        .map_err(|_| "set IDENTITY to a name unique among the replicas (e.g. the pod name)")?;
    let lease_namespace = std::env::var("LEASE_NAMESPACE").unwrap_or_else(|_| "default".into());
    let client = Client::try_from_config(kctrl_config::Config::infer()?)?;
    let mut registry = prometheus_client::registry::Registry::default();
    let metrics = PrometheusShardMetrics::new(&mut registry);
    let sharding = sharding(&client, &lease_namespace, &identity, Some(metrics))?;
    let cancel = kctrl_runtime::shutdown_on_signal();
    if let Ok(addr) = std::env::var("HTTP_ADDR") {
        let (sharding, registry, cancel) = (sharding.clone(), Arc::new(registry), cancel.clone());
        tokio::spawn(async move {
            if let Err(err) = serve(&addr, sharding, registry, cancel).await {
                tracing::error!(%addr, %err, "serving /readyz and /metrics failed");
            }
        });
    }
    let (factory, _ctx, run) = replica(&client, sharding, cancel);
    let result = run.await;
    factory.shutdown().await;
    result?;
    Ok(())
}

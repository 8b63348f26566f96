//! kube-rs peer of `cargo xtask bench runtime`: kube-runtime's `Controller` over the benchmark's
//! `Widget`s (group `bench.kctrl.dev`, installed by the driver from kctrl's derive) in one
//! namespace, owning ConfigMaps. Each reconcile server-side-applies the Widget's ConfigMap
//! (controller owner reference to the Widget) and then the Widget's status (`observedGeneration`),
//! both as field manager `kctrl-bench-runtime`, forced.
//!
//! Configuration `defaults`: `Controller::new(..).owns(..)` as they come. `lean`: the same
//! caches as the kctrl peer's, each held as kube's documentation recommends to reduce memory:
//! the Widgets' managedFields dropped before they reach the store (`watcher(..).modify(..)`
//! reflected into the store `Controller::for_stream` reads), the owned ConfigMaps watched as
//! metadata only (`owns_stream` of a watcher on `Api<PartialObjectMeta<ConfigMap>>`), their
//! managedFields dropped too and their metadata kept in a reflector's store: the listable
//! cache of the owned objects' metadata that the kctrl peer's `owns_metadata` keeps. (kube's
//! own example of `owns_stream` keeps no store: a controller that never lists what it owns
//! needs none; the benchmark compares the same caches.)
//!
//! Protocol (same for both peers): arguments `<kubeconfig> <namespace> <concurrency>
//! <configuration>`; a JSON line `started` once the controller runs; at end of stdin the controller stops taking new work,
//! finishes the reconciles in flight and the peer prints `done` (reconciles and failed ones).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::{self, Action, Controller};
use kube::api::PartialObjectMeta;
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{Api, Client, Config, CustomResource, Resource, ResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tokio::io::AsyncReadExt;

/// The field manager of every write.
const MANAGER: &str = "kctrl-bench-runtime";
/// The user agent the driver attributes this peer's requests by in the audit log.
const USER_AGENT: &str = "kctrl-bench-runtime/kube-rs";
/// Label of the ConfigMaps the Widgets own.
const CONFIG_MAP_LABEL: &str = "kctrl.bench/runtime";

/// The desired state of a Widget; the same fields as the driver's definition.
#[derive(CustomResource, Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "bench.kctrl.dev",
    version = "v1",
    kind = "Widget",
    namespaced,
    status = "WidgetStatus"
)]
#[serde(rename_all = "camelCase")]
struct WidgetSpec {
    /// Bumped by the driver's change to every Widget.
    revision: i64,
    /// Copied into the ConfigMap.
    payload: String,
}

/// What the controller reports back.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct WidgetStatus {
    observed_generation: i64,
    config_map: String,
}

struct Ctx {
    client: Client,
    reconciles: AtomicU64,
    failures: AtomicU64,
}

#[derive(Debug, thiserror::Error)]
enum Error {
    #[error(transparent)]
    Kube(#[from] kube::Error),
    #[error("the Widget has no {0}")]
    Missing(&'static str),
}

fn config_map(widget: &Widget) -> Result<ConfigMap, Error> {
    let name = widget.metadata.name.clone().ok_or(Error::Missing("name"))?;
    let uid = widget.metadata.uid.clone().ok_or(Error::Missing("uid"))?;
    Ok(ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            labels: Some([(CONFIG_MAP_LABEL.to_owned(), "true".to_owned())].into()),
            owner_references: Some(vec![OwnerReference {
                api_version: Widget::api_version(&()).into_owned(),
                kind: Widget::kind(&()).into_owned(),
                name,
                uid,
                controller: Some(true),
                block_owner_deletion: Some(true),
            }]),
            ..Default::default()
        },
        data: Some(
            [
                ("revision".to_owned(), widget.spec.revision.to_string()),
                ("payload".to_owned(), widget.spec.payload.clone()),
            ]
            .into(),
        ),
        ..Default::default()
    })
}

async fn reconcile(widget: Arc<Widget>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    ctx.reconciles.fetch_add(1, Ordering::Relaxed);
    let namespace = widget.namespace().ok_or(Error::Missing("namespace"))?;
    let name = widget.name_any();
    let params = PatchParams::apply(MANAGER).force();
    let cm = config_map(&widget)?;
    Api::<ConfigMap>::namespaced(ctx.client.clone(), &namespace)
        .patch(&name, &params, &Patch::Apply(&cm))
        .await?;
    let status = serde_json::json!({
        "apiVersion": Widget::api_version(&()),
        "kind": Widget::kind(&()),
        "metadata": {"name": name},
        "status": {
            "observedGeneration": widget.metadata.generation.unwrap_or(0),
            "configMap": name,
        },
    });
    Api::<Widget>::namespaced(ctx.client.clone(), &namespace)
        .patch_status(&name, &params, &Patch::Apply(&status))
        .await?;
    Ok(Action::await_change())
}

fn error_policy(_widget: Arc<Widget>, _error: &Error, ctx: Arc<Ctx>) -> Action {
    ctx.failures.fetch_add(1, Ordering::Relaxed);
    Action::requeue(Duration::from_secs(1))
}

#[tokio::main]
async fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 5 {
        bail!(
            "usage: {} <kubeconfig> <namespace> <concurrency> defaults|lean",
            args[0]
        );
    }
    let namespace = &args[2];
    let concurrency: u16 = args[3].parse().context("concurrency")?;
    let lean = match args[4].as_str() {
        "defaults" => false,
        "lean" => true,
        other => bail!("unknown configuration {other:?}: expected defaults or lean"),
    };
    let kubeconfig = kube::config::Kubeconfig::read_from(&args[1])?;
    let mut config = Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?;
    config.headers.push((
        http::header::USER_AGENT,
        http::HeaderValue::from_static(USER_AGENT),
    ));
    let client = Client::try_from(config)?;
    let ctx = Arc::new(Ctx {
        client: client.clone(),
        reconciles: AtomicU64::new(0),
        failures: AtomicU64::new(0),
    });
    let widgets = Api::<Widget>::namespaced(client.clone(), namespace);
    let config_map_metadata =
        Api::<PartialObjectMeta<ConfigMap>>::namespaced(client.clone(), namespace);
    let config_maps = Api::<ConfigMap>::namespaced(client, namespace);
    let end_of_stdin = async {
        let mut sink = Vec::new();
        let _ = tokio::io::stdin().read_to_end(&mut sink).await;
    };
    println!("{}", serde_json::json!({"event": "started"}));
    // The reader of `lean`'s ConfigMap metadata cache: what a reconcile would list the owned
    // objects through (kept as a kctrl reconcile keeps `cache::<..>()`; the store lives in the
    // writer either way).
    let mut _config_map_cache = None;
    let controller = if lean {
        let (reader, writer) = reflector::store();
        let widgets = reflector(
            writer,
            watcher(widgets, watcher::Config::default())
                .modify(|w| w.managed_fields_mut().clear()),
        )
        .applied_objects();
        let (config_map_reader, config_map_writer) = reflector::store();
        _config_map_cache = Some(config_map_reader);
        let config_map_metadata = reflector(
            config_map_writer,
            watcher(config_map_metadata, watcher::Config::default())
                .modify(|cm| cm.managed_fields_mut().clear()),
        )
        .touched_objects();
        Controller::for_stream(widgets, reader).owns_stream(config_map_metadata)
    } else {
        Controller::new(widgets, watcher::Config::default())
            .owns(config_maps, watcher::Config::default())
    };
    controller
        .with_config(controller::Config::default().concurrency(concurrency))
        .graceful_shutdown_on(end_of_stdin)
        .run(reconcile, error_policy, ctx.clone())
        .for_each(|_| futures::future::ready(()))
        .await;
    println!(
        "{}",
        serde_json::json!({
            "event": "done",
            "reconciles": ctx.reconciles.load(Ordering::Relaxed),
            "failures": ctx.failures.load(Ordering::Relaxed),
        })
    );
    Ok(())
}

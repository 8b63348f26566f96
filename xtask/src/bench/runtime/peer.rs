//! The kctrl side of `cargo xtask bench runtime`: kctrl-runtime's [`Controller`] over the
//! benchmark's [`Widget`]s in one namespace, owning ConfigMaps, run by the driver as a hidden
//! subcommand of a release build of xtask.
//!
//! Each reconcile server-side-applies the Widget's ConfigMap (controller owner reference to the
//! Widget) and then the Widget's status (`observedGeneration`), both as field manager
//! [`MANAGER`], forced: the same requests as bench/runtime-kube-rs.
//!
//! Protocol (same for both peers): arguments `<kubeconfig> <namespace> <concurrency>`; a JSON
//! line `started` once the controller runs; at end of stdin the controller stops taking new
//! work, finishes the reconciles in flight and the peer prints `done` (reconciles and failed
//! ones).

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{Context, Result};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kctrl_client::{Api, Client, CustomResource, Patch, PatchParams};
use kctrl_config::Config;
use kctrl_informer::SharedInformerFactory;
use kctrl_runtime::{Action, Controller};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;
use tokio_util::sync::CancellationToken;

/// The field manager of every write of both peers.
pub(crate) const MANAGER: &str = "kctrl-bench-runtime";
/// The user agent the driver attributes this peer's requests by in the audit log.
pub(crate) const USER_AGENT: &str = "kctrl-bench-runtime/kctrl";
/// `apiVersion` of [`Widget`].
pub(crate) const API_VERSION: &str = "bench.kctrl.dev/v1";
/// `kind` of [`Widget`].
pub(crate) const KIND: &str = "Widget";

/// The desired state of a Widget, the benchmark's custom resource. Its CRD, generated from this
/// type, is the one both peers reconcile; bench/runtime-kube-rs declares the same fields with
/// kube's derive.
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[resource(
    group = "bench.kctrl.dev",
    version = "v1",
    kind = "Widget",
    namespaced,
    status = "WidgetStatus"
)]
#[serde(rename_all = "camelCase")]
pub(crate) struct WidgetSpec {
    /// Bumped by the driver's change to every Widget.
    pub(crate) revision: i64,
    /// Copied into the ConfigMap.
    pub(crate) payload: String,
}

/// What the controller reports back.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct WidgetStatus {
    /// The generation the ConfigMap was applied for.
    pub(crate) observed_generation: i64,
    /// The ConfigMap's name.
    pub(crate) config_map: String,
}

/// Arguments of the hidden `cargo xtask bench runtime-peer`.
#[derive(clap::Args)]
pub(crate) struct PeerArgs {
    /// Kubeconfig of the cluster.
    kubeconfig: PathBuf,
    /// Namespace whose Widgets are reconciled.
    namespace: String,
    /// Reconciles at once.
    concurrency: usize,
}

struct Ctx {
    client: Client,
    reconciles: AtomicU64,
    failures: AtomicU64,
}

/// Why a reconcile failed.
#[derive(Debug, thiserror::Error)]
enum Error {
    #[error(transparent)]
    Api(#[from] kctrl_client::Error),
    #[error("the Widget has no {0}")]
    Missing(&'static str),
}

fn config_map(widget: &Widget) -> Result<ConfigMap, Error> {
    let name = widget.metadata.name.clone().ok_or(Error::Missing("name"))?;
    let uid = widget.metadata.uid.clone().ok_or(Error::Missing("uid"))?;
    Ok(ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            labels: Some([(super::CONFIG_MAP_LABEL.to_owned(), "true".to_owned())].into()),
            owner_references: Some(vec![OwnerReference {
                api_version: API_VERSION.to_owned(),
                kind: KIND.to_owned(),
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
    let namespace = widget
        .metadata
        .namespace
        .as_deref()
        .ok_or(Error::Missing("namespace"))?;
    let name = widget
        .metadata
        .name
        .as_deref()
        .ok_or(Error::Missing("name"))?;
    let params = PatchParams::apply(MANAGER).force();
    Api::<ConfigMap>::namespaced(ctx.client.clone(), namespace)
        .apply(&params, &config_map(&widget)?)
        .await?;
    let status = json!({
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": name},
        "status": {
            "observedGeneration": widget.metadata.generation.unwrap_or(0),
            "configMap": name,
        },
    });
    Api::<Widget>::namespaced(ctx.client.clone(), namespace)
        .patch_status(name, &params, &Patch::Apply(status))
        .await?;
    Ok(Action::await_change())
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
    // No client-side rate limit: kube-rs has none.
    config.qps = -1.0;
    config.user_agent = Some(USER_AGENT.to_owned());
    let client = Client::try_from_config(config)?;
    // No resync: kube-runtime has none.
    let factory = SharedInformerFactory::builder(client.clone(), Duration::ZERO)
        .namespace(&args.namespace)
        .build();
    let ctx = Arc::new(Ctx {
        client,
        reconciles: AtomicU64::new(0),
        failures: AtomicU64::new(0),
    });
    let cancel = CancellationToken::new();
    let end_of_stdin = cancel.clone();
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut std::io::stdin(), &mut std::io::sink());
        end_of_stdin.cancel();
    });
    println!("{}", json!({"event": "started"}));
    Controller::<Widget>::new(&factory)
        .owns::<ConfigMap>()
        .workers(args.concurrency)
        .run(
            reconcile,
            |_widget, _error, ctx: Arc<Ctx>| {
                ctx.failures.fetch_add(1, Ordering::Relaxed);
                Action::requeue(Duration::from_secs(1))
            },
            ctx.clone(),
            cancel,
        )
        .await?;
    factory.shutdown().await;
    println!(
        "{}",
        json!({
            "event": "done",
            "reconciles": ctx.reconciles.load(Ordering::Relaxed),
            "failures": ctx.failures.load(Ordering::Relaxed),
        })
    );
    Ok(())
}

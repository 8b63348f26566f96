//! The kctrl side of `cargo xtask bench runtime`: kctrl-runtime's [`Controller`] over the
//! benchmark's [`Widget`]s in one namespace, owning ConfigMaps. The binary of this crate is the
//! peer the driver runs (a release build of its own, as lean as a user's controller: the
//! kube-rs peer is a binary of its own too); the driver takes [`Widget`] and the constants from
//! the library.
//!
//! Each reconcile server-side-applies the Widget's ConfigMap (controller owner reference to the
//! Widget) and then the Widget's status (`observedGeneration`), both as field manager
//! [`MANAGER`], forced: the same requests as bench/runtime-kube-rs.
//!
//! Two configurations ([`Configuration`]): `defaults`, the runtime as it comes (full caches of
//! Widgets and ConfigMaps, managedFields kept); `lean`, what docs/writing-a-controller.md
//! recommends to a controller that does not read what it owns: managedFields skipped while
//! decoding (the factory's informers and the answers to writes), and the owned ConfigMaps
//! cached as metadata only.
//!
//! Protocol (same for both peers): arguments `<kubeconfig> <namespace> <concurrency>
//! <configuration>`; a JSON
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
pub const MANAGER: &str = "kctrl-bench-runtime";
/// The user agent the driver attributes this peer's requests by in the audit log.
pub const USER_AGENT: &str = "kctrl-bench-runtime/kctrl";
/// `apiVersion` of [`Widget`].
pub const API_VERSION: &str = "bench.kctrl.dev/v1";
/// `kind` of [`Widget`].
pub const KIND: &str = "Widget";

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
pub struct WidgetSpec {
    /// Bumped by the driver's change to every Widget.
    pub revision: i64,
    /// Copied into the ConfigMap.
    pub payload: String,
}

/// What the controller reports back.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WidgetStatus {
    /// The generation the ConfigMap was applied for.
    pub observed_generation: i64,
    /// The ConfigMap's name.
    pub config_map: String,
}

/// Label of the ConfigMaps the Widgets own (both peers set it).
pub const CONFIG_MAP_LABEL: &str = "kctrl.bench/runtime";

/// How the peer builds its controller (the same words for the kube-rs peer).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Configuration {
    /// Each library as it comes.
    Defaults,
    /// Each library as its documentation recommends for a controller that reads little:
    /// managedFields dropped, owned objects watched as metadata only.
    Lean,
}

impl Configuration {
    /// The word on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Defaults => "defaults",
            Self::Lean => "lean",
        }
    }
}

impl std::str::FromStr for Configuration {
    type Err = anyhow::Error;

    fn from_str(s: &str) -> Result<Self> {
        match s {
            "defaults" => Ok(Self::Defaults),
            "lean" => Ok(Self::Lean),
            other => anyhow::bail!("unknown configuration {other:?}: expected defaults or lean"),
        }
    }
}

/// Arguments of the peer: `<kubeconfig> <namespace> <concurrency> <configuration>`.
#[derive(Clone, Debug)]
pub struct PeerArgs {
    /// Kubeconfig of the cluster.
    pub kubeconfig: PathBuf,
    /// Namespace whose Widgets are reconciled.
    pub namespace: String,
    /// Reconciles at once.
    pub concurrency: usize,
    /// Defaults or lean.
    pub configuration: Configuration,
}

impl PeerArgs {
    /// Reads the three positional arguments (the program name already taken off).
    pub fn parse(mut args: impl Iterator<Item = String>) -> Result<Self> {
        let usage =
            "usage: kctrl-bench-runtime <kubeconfig> <namespace> <concurrency> defaults|lean";
        let (Some(kubeconfig), Some(namespace), Some(concurrency), Some(configuration), None) = (
            args.next(),
            args.next(),
            args.next(),
            args.next(),
            args.next(),
        ) else {
            anyhow::bail!("{usage}");
        };
        let concurrency = concurrency
            .parse()
            .with_context(|| format!("concurrency {concurrency:?} is not a number; {usage}"))?;
        Ok(Self {
            kubeconfig: kubeconfig.into(),
            namespace,
            concurrency,
            configuration: configuration.parse()?,
        })
    }
}

struct Ctx {
    client: Client,
    configuration: Configuration,
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
            labels: Some([(CONFIG_MAP_LABEL.to_owned(), "true".to_owned())].into()),
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
    let lean = ctx.configuration == Configuration::Lean;
    let mut config_maps = Api::<ConfigMap>::namespaced(ctx.client.clone(), namespace);
    let mut widgets = Api::<Widget>::namespaced(ctx.client.clone(), namespace);
    if lean {
        config_maps = config_maps.without_managed_fields();
        widgets = widgets.without_managed_fields();
    }
    config_maps.apply(&params, &config_map(&widget)?).await?;
    let status = json!({
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": name},
        "status": {
            "observedGeneration": widget.metadata.generation.unwrap_or(0),
            "configMap": name,
        },
    });
    widgets
        .patch_status(name, &params, &Patch::Apply(status))
        .await?;
    Ok(Action::await_change())
}

/// Runs the peer until its standard input ends (builds its own tokio runtime).
pub fn run(args: PeerArgs) -> Result<()> {
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
    let mut factory =
        SharedInformerFactory::builder(client.clone(), Duration::ZERO).namespace(&args.namespace);
    let lean = args.configuration == Configuration::Lean;
    if lean {
        factory = factory.without_managed_fields();
    }
    let factory = factory.build();
    let ctx = Arc::new(Ctx {
        client,
        configuration: args.configuration,
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
    let controller = Controller::<Widget>::new(&factory);
    let controller = if lean {
        controller.owns_metadata::<ConfigMap>()
    } else {
        controller.owns::<ConfigMap>()
    };
    controller
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

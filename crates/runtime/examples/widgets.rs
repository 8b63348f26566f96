//! Two controllers in one process, sharing the informers of one factory, both writing with
//! server-side apply:
//!
//! - **widgets** reconciles `Widget`s (a custom resource): it applies ConfigMap `<name>-color`,
//!   controlled by the Widget and holding its colour, then the Widget's status. Each write is
//!   recorded in the controller's [`OwnWrites`], so a Widget reconciled again before the
//!   caches show those writes waits for them instead of acting on the state before them.
//! - **labeller** reconciles the ConfigMaps a Widget controls and labels that Widget with the
//!   colour its ConfigMap holds (`widgets.example.com/color`), applying only that label under a
//!   field manager of its own.
//!
//! The ConfigMap informer that `widgets` needs for `owns` is the one `labeller` reconciles
//! from, and the Widget cache `labeller` reads is the one `widgets` reconciles from: one list
//! and one watch per resource for the process.
//!
//! `cargo run -p kctrl-runtime --example widgets` against the cluster `$KUBECONFIG` names;
//! `cargo run -p kctrl-runtime --example widgets -- crd | kubectl apply -f -` prints the CRD to
//! install first. `tests/e2e/runtime.rs` runs these controllers against a real API server.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kctrl_client::{Api, Client, CustomResource, PartialObjectMetadata, PatchParams};
use kctrl_controller_ref::{Owner, get_controller_of};
use kctrl_informer::{SharedInformerFactory, Store};
use kctrl_runtime::{Action, Controller, OwnWrites, Predicate, RunError};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

/// A Widget asks for a ConfigMap holding its colour.
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[resource(
    group = "e2e.kctrl.dev",
    version = "v1",
    kind = "Widget",
    namespaced,
    status = "WidgetStatus"
)]
pub(crate) struct WidgetSpec {
    /// The colour the ConfigMap holds.
    pub(crate) color: String,
}

/// What the widgets controller reports.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct WidgetStatus {
    /// The ConfigMap's name.
    pub(crate) config_map: String,
    /// The generation the ConfigMap shows.
    pub(crate) observed_generation: i64,
}

/// The field manager of the widgets controller.
pub(crate) const MANAGER: &str = "widget-controller";
/// The field manager of the labeller.
pub(crate) const LABELLER: &str = "widget-labeller";
/// The label the labeller puts on Widgets.
pub(crate) const COLOR_LABEL: &str = "widgets.example.com/color";

/// Why a reconcile failed.
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub(crate) struct Error(#[from] kctrl_client::Error);

/// What the widgets controller's reconciles share.
pub(crate) struct Widgets {
    /// Writes.
    pub(crate) client: Client,
    /// Where the writes are recorded ([`Controller::own_writes`]).
    pub(crate) writes: OwnWrites,
}

/// One Widget: its ConfigMap, then its status.
pub(crate) async fn reconcile_widget(w: Arc<Widget>, ctx: Arc<Widgets>) -> Result<Action, Error> {
    let name = w.metadata.name.clone().unwrap_or_default();
    let ns = w.metadata.namespace.clone().unwrap_or_default();
    let apply = PatchParams::apply(MANAGER).force();
    let cm = ConfigMap {
        metadata: ObjectMeta {
            name: Some(format!("{name}-color")),
            namespace: Some(ns.clone()),
            owner_references: Some(vec![Owner::of(w.as_ref()).controller_ref()]),
            ..Default::default()
        },
        data: Some(BTreeMap::from([("color".into(), w.spec.color.clone())])),
        ..Default::default()
    };
    let written = Api::<ConfigMap>::namespaced(ctx.client.clone(), &ns)
        .apply(&apply, &cm)
        .await;
    ctx.writes.record(w.as_ref(), &cm, &written);
    written?;

    let mut status = Widget::new(&name, w.spec.clone());
    status.metadata.namespace = Some(ns.clone());
    status.status = Some(WidgetStatus {
        config_map: format!("{name}-color"),
        observed_generation: w.metadata.generation.unwrap_or_default(),
    });
    let written = Api::<Widget>::namespaced(ctx.client.clone(), &ns)
        .apply_status(&apply, &status)
        .await;
    ctx.writes.record(w.as_ref(), &status, &written);
    written?;
    Ok(Action::await_change())
}

/// What the labeller's reconciles share.
pub(crate) struct Labeller {
    /// Writes.
    pub(crate) client: Client,
    /// The Widget cache (shared with the widgets controller).
    pub(crate) widgets: Store<Widget>,
}

/// One ConfigMap: if a Widget controls it, label that Widget with the ConfigMap's colour.
pub(crate) async fn reconcile_config_map(
    cm: Arc<ConfigMap>,
    ctx: Arc<Labeller>,
) -> Result<Action, Error> {
    let Some(owner) = get_controller_of(&cm.metadata).filter(|o| o.kind == "Widget") else {
        return Ok(Action::await_change());
    };
    let ns = cm.metadata.namespace.clone().unwrap_or_default();
    // Only the Widget the reference names (same UID), as the cache shows it.
    let Some(widget) = ctx
        .widgets
        .get_namespaced(&ns, &owner.name)
        .filter(|w| w.metadata.uid.as_deref() == Some(owner.uid.as_str()))
    else {
        return Ok(Action::await_change());
    };
    let color = cm.data.as_ref().and_then(|d| d.get("color")).cloned();
    let labels = widget.metadata.labels.as_ref();
    if color.is_none() || labels.and_then(|l| l.get(COLOR_LABEL)) == color.as_ref() {
        return Ok(Action::await_change());
    }
    let label = ObjectMeta {
        name: widget.metadata.name.clone(),
        labels: Some(BTreeMap::from([(
            COLOR_LABEL.to_owned(),
            color.unwrap_or_default(),
        )])),
        ..Default::default()
    };
    // A metadata-only handle: the patch carries the label alone.
    Api::<PartialObjectMetadata<Widget>>::namespaced(ctx.client.clone(), &ns)
        .apply_metadata(&PatchParams::apply(LABELLER).force(), &label)
        .await?;
    Ok(Action::await_change())
}

/// Both controllers on `factory`, until `cancel`.
pub(crate) fn run_both(
    factory: &SharedInformerFactory,
    client: Client,
    cancel: CancellationToken,
) -> impl Future<Output = Result<(), RunError>> + use<> {
    let widgets = Controller::<Widget>::new(factory)
        .owns::<ConfigMap>()
        // Labels and status do not change the generation: only spec changes reconcile.
        .with_predicate(Predicate::generation_changed())
        .workers(2);
    let widgets_ctx = Arc::new(Widgets {
        client: client.clone(),
        writes: widgets.own_writes(),
    });
    let widgets = widgets.run(
        reconcile_widget,
        |_w, _err, _ctx| Action::rate_limited(),
        widgets_ctx,
        cancel.clone(),
    );
    let labeller_ctx = Arc::new(Labeller {
        client,
        widgets: factory.informer::<Widget>().store().clone(),
    });
    let labeller = Controller::<ConfigMap>::new(factory).run(
        reconcile_config_map,
        |_cm, _err, _ctx| Action::rate_limited(),
        labeller_ctx,
        cancel,
    );
    async move {
        let (a, b) = tokio::join!(widgets, labeller);
        a.and(b)
    }
}

/// Runs both controllers until SIGTERM or Ctrl-C; `crd` prints the Widget CRD instead.
#[allow(dead_code)] // tests/e2e/runtime.rs includes this file for its controllers alone.
#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    if std::env::args().nth(1).as_deref() == Some("crd") {
        println!(
            "{}",
            serde_json::to_string_pretty(&<Widget as kctrl_client::crd::CustomResourceExt>::crd())?
        );
        return Ok(());
    }
    let client = Client::try_from_config(kctrl_config::Config::infer()?)?;
    let factory = SharedInformerFactory::new(client.clone(), Duration::from_secs(30));
    run_both(&factory, client, kctrl_runtime::shutdown_on_signal()).await?;
    factory.shutdown().await;
    Ok(())
}

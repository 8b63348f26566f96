//! docs/writing-a-controller.md as code: the guide's Widget (section 2), its reconcile
//! (section 3) and controller (section 4), and its in-memory test (section 5), which runs
//! here on the harness.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kctrl_client::{Api, Client, CustomResource, PatchParams, PostParams};
use kctrl_controller_ref::Owner;
use kctrl_harness::TestHarness;
use kctrl_runtime::{Action, Controller, Predicate};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

// ---- section 2: the resource ----

/// A Widget asks for a ConfigMap holding its colour.
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[resource(
    group = "example.com",
    version = "v1",
    kind = "Widget",
    namespaced,
    status = "WidgetStatus"
)]
pub struct WidgetSpec {
    /// The colour the ConfigMap holds.
    pub color: String,
}

/// What the controller made of a Widget.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WidgetStatus {
    /// The ConfigMap's name.
    pub config_map: String,
    /// The generation the status describes.
    pub observed_generation: i64,
}

// ---- section 3: reconcile ----

#[derive(Debug, thiserror::Error)]
#[error(transparent)]
struct Error(#[from] kctrl_client::Error);

const MANAGER: &str = "widget-controller";

async fn reconcile(w: Arc<Widget>, client: Arc<Client>) -> Result<Action, Error> {
    let name = w.metadata.name.clone().unwrap_or_default();
    let ns = w.metadata.namespace.clone().unwrap_or_default();
    // The Widget as controller owner: apiVersion, kind, name, uid, controller and
    // blockOwnerDeletion from the object itself (never a hand-built OwnerReference).
    let owner = Owner::of(w.as_ref()).controller_ref();
    let cm = ConfigMap {
        metadata: ObjectMeta {
            name: Some(format!("{name}-color")),
            owner_references: Some(vec![owner]),
            ..Default::default()
        },
        data: Some(BTreeMap::from([("color".into(), w.spec.color.clone())])),
        ..Default::default()
    };
    // Forced: fields this controller states are its own, whoever wrote them last.
    let apply = PatchParams::apply(MANAGER).force();
    Api::<ConfigMap>::namespaced((*client).clone(), &ns)
        .apply(&apply, &cm)
        .await?;

    let mut status = Widget::new(&name, w.spec.clone());
    status.status = Some(WidgetStatus {
        config_map: format!("{name}-color"),
        observed_generation: w.metadata.generation.unwrap_or_default(),
    });
    Api::<Widget>::namespaced((*client).clone(), &ns)
        .apply_status(&apply, &status)
        .await?;
    Ok(Action::await_change())
}

// ---- section 5: tests, in memory ----

#[tokio::test(start_paused = true)]
async fn widgets_get_their_config_map() -> Result<(), Box<dyn std::error::Error>> {
    let fake = kctrl_fake::FakeApi::new();
    fake.register_crd(&Widget::crd());
    let mut harness = TestHarness::with_fake(fake)?;

    // The controller of section 4, on the harness's factory.
    let controller = Controller::<Widget>::new(harness.factory())
        .owns::<ConfigMap>()
        .with_predicate(Predicate::generation_changed());
    harness.start(
        controller,
        reconcile,
        |_w, _err, _ctx| Action::rate_limited(),
        Arc::new(harness.client()),
    );

    let widgets: Api<Widget> = Api::namespaced(harness.client(), "shop");
    let created = widgets
        .create(
            &PostParams::default(),
            &Widget::new(
                "w",
                WidgetSpec {
                    color: "blue".into(),
                },
            ),
        )
        .await?;

    let cm = harness
        .wait_for_object::<ConfigMap>(Some("shop"), "w-color", "the Widget's ConfigMap", |cm| {
            cm.data.as_ref().is_some_and(|d| d["color"] == "blue")
        })
        .await?;
    let owner = &cm.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.uid.as_str()),
        ("Widget", created.metadata.uid.as_deref().unwrap())
    );
    harness
        .wait_for_object::<Widget>(Some("shop"), "w", "the status", |w| {
            w.status
                .as_ref()
                .is_some_and(|s| s.observed_generation == 1)
        })
        .await?;

    // A new colour reaches the ConfigMap, and the status follows the generation.
    let mut repainted = widgets.get("w").await?;
    repainted.spec.color = "red".into();
    widgets.update(&PostParams::default(), &repainted).await?;
    harness
        .wait_for_object::<ConfigMap>(Some("shop"), "w-color", "the new colour", |cm| {
            cm.data.as_ref().is_some_and(|d| d["color"] == "red")
        })
        .await?;
    let w = harness
        .wait_for_object::<Widget>(Some("shop"), "w", "the status of generation 2", |w| {
            w.status
                .as_ref()
                .is_some_and(|s| s.observed_generation == 2)
        })
        .await?;
    assert_eq!(w.status.unwrap().config_map, "w-color");

    harness.stop().await?;
    Ok(())
}

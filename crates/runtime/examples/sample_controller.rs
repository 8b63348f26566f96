//! Kubernetes' sample-controller (k8s.io/sample-controller) on kctrl-runtime: a `Foo` names a
//! Deployment and its replicas; the controller creates that Deployment (owned by the Foo),
//! keeps its replicas as the Foo says, refuses a Deployment of that name it does not own (a
//! Warning event `ErrResourceExists`), copies the Deployment's available replicas into the
//! Foo's status and records a `Synced` event. Deleting the Foo deletes the Deployment (garbage
//! collection by owner reference).
//!
//! `cargo run -p kctrl-runtime --example sample_controller` against the cluster `$KUBECONFIG`
//! names, after `cargo run -p kctrl-client --example crd | kubectl apply -f -`.
//! `tests/e2e/runtime.rs` runs this file's reconcile against a real API server.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::core::v1::{Container, PodSpec, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use kctrl_client::{Api, Client, CustomResource, PatchParams};
use kctrl_controller_ref::{Owner, is_controlled_by};
use kctrl_events::{EventRecorder, EventRecorderExt, EventType};
use kctrl_informer::{SharedInformerFactory, Store};
use kctrl_runtime::{Action, Controller};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// FooSpec is the spec for a Foo resource.
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[resource(
    group = "samplecontroller.k8s.io",
    version = "v1alpha1",
    kind = "Foo",
    namespaced,
    status = "FooStatus",
    // *.k8s.io groups are protected; sample-controller's CRD says this.
    annotation("api-approved.kubernetes.io", "unapproved, experimental-only")
)]
#[serde(rename_all = "camelCase")]
pub(crate) struct FooSpec {
    /// The Deployment to create.
    pub(crate) deployment_name: String,
    /// Its replicas.
    pub(crate) replicas: Option<i32>,
}

/// FooStatus is the status for a Foo resource.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct FooStatus {
    /// The Deployment's available replicas.
    pub(crate) available_replicas: i32,
}

/// The field manager of the controller's writes.
const MANAGER: &str = "sample-controller";

/// What every reconcile reads and writes with.
pub(crate) struct Ctx {
    /// Writes.
    pub(crate) client: Client,
    /// The Deployment cache (the informer `owns` shares).
    pub(crate) deployments: Store<Deployment>,
    /// Events on Foos.
    pub(crate) recorder: Arc<dyn EventRecorder>,
}

/// Why a reconcile failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Error {
    /// The API server refused a write.
    #[error(transparent)]
    Api(#[from] kctrl_client::Error),
    /// A Deployment of that name exists and is not this Foo's.
    #[error("Resource {0:?} already exists and is not managed by Foo")]
    NotOurs(String),
}

/// One Foo: its Deployment, then its status.
pub(crate) async fn reconcile(obj: Arc<Foo>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let ns = obj.metadata.namespace.as_deref().unwrap_or_default();
    let name = &obj.spec.deployment_name;
    if name.is_empty() {
        // The user must fix the Foo; retrying would not help.
        tracing::error!(foo = ?obj.metadata.name, "deployment name must be specified");
        return Ok(Action::await_change());
    }
    if let Some(d) = ctx.deployments.get_namespaced(ns, name)
        && !is_controlled_by(&d.metadata, &obj.metadata)
    {
        let err = Error::NotOurs(name.clone());
        let (warning, message) = (EventType::Warning, err.to_string());
        ctx.recorder
            .event_for(obj.as_ref(), warning, "ErrResourceExists", &message);
        return Err(err);
    }
    let apply = PatchParams::apply(MANAGER).force();
    let deployment = Api::<Deployment>::namespaced(ctx.client.clone(), ns)
        .apply(&apply, &new_deployment(&obj, Owner::of(obj.as_ref())))
        .await?;
    let mut status = Foo::new(
        obj.metadata.name.as_deref().unwrap_or_default(),
        obj.spec.clone(),
    );
    status.status = Some(FooStatus {
        available_replicas: deployment
            .status
            .and_then(|s| s.available_replicas)
            .unwrap_or(0),
    });
    Api::<Foo>::namespaced(ctx.client.clone(), ns)
        .apply_status(&apply, &status)
        .await?;
    ctx.recorder.event_for(
        obj.as_ref(),
        EventType::Normal,
        "Synced",
        "Foo synced successfully",
    );
    Ok(Action::await_change())
}

/// The Deployment a Foo asks for: nginx, labelled for the Foo, controlled by it.
fn new_deployment(obj: &Foo, owner: Owner) -> Deployment {
    let labels = BTreeMap::from([
        ("app".to_owned(), "nginx".to_owned()),
        ("controller".to_owned(), owner.name.clone()),
    ]);
    Deployment {
        metadata: ObjectMeta {
            name: Some(obj.spec.deployment_name.clone()),
            owner_references: Some(vec![owner.controller_ref()]),
            ..Default::default()
        },
        spec: DeploymentSpec {
            replicas: obj.spec.replicas,
            selector: LabelSelector {
                match_labels: Some(labels.clone()),
                ..Default::default()
            },
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels),
                    ..Default::default()
                }),
                spec: Some(PodSpec {
                    containers: vec![Container {
                        name: "nginx".into(),
                        image: Some("nginx:latest".into()),
                        ..Default::default()
                    }],
                    ..Default::default()
                }),
            },
            ..Default::default()
        },
        ..Default::default()
    }
}

/// Runs the controller until SIGTERM or Ctrl-C.
#[allow(dead_code)] // tests/e2e/runtime.rs includes this file for `reconcile` alone.
#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let client = Client::try_from_config(kctrl_config::Config::infer()?)?;
    let factory = SharedInformerFactory::new(client.clone(), Duration::from_secs(30));
    let broadcaster = kctrl_events::EventBroadcaster::new();
    broadcaster.start_recording_to_sink(kctrl_events::ApiEventSink::new(client.clone()))?;
    let ctx = Arc::new(Ctx {
        client,
        deployments: factory.informer::<Deployment>().store().clone(),
        recorder: Arc::new(broadcaster.new_recorder(kctrl_events::EventSource::new(MANAGER))),
    });
    Controller::<Foo>::new(&factory)
        .owns::<Deployment>()
        .workers(2)
        .run(
            reconcile,
            |_obj, _err, _ctx| Action::rate_limited(),
            ctx,
            kctrl_runtime::shutdown_on_signal(),
        )
        .await?;
    factory.shutdown().await;
    broadcaster.shutdown().await;
    Ok(())
}

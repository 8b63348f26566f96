//! Uses kctrl's library crates as a user's crate does, with the Kubernetes release chosen
//! here (k8s-openapi's `latest`), and checks what it sees: an in-memory API server, an
//! informer over it, a work queue, protobuf, the fields whose shape depends on the release,
//! and a custom resource from `#[derive(CustomResource)]`. Exits non-zero on the first check
//! that fails.

use std::time::Duration;

// The user's own k8s-openapi and the one kctrl re-exports are the same crate.
use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use kctrl_client::k8s_openapi::api::apps::v1::Deployment as ReExported;
use kctrl_client::protobuf::{FromProtobuf, ToProtobuf};
use kctrl_client::versioned::{K8S_API_VERSION, Versioned};
use kctrl_client::{Api, PostParams};
use kctrl_fake::FakeApi;
use kctrl_informer::SharedInformerFactory;
use kctrl_workqueue::Queue;
use tokio_util::sync::CancellationToken;

// A custom resource, with no serde or schemars dependency of this crate's own: the derive's
// output names them through kctrl-client, and the spec's own derives are pointed there too.
use kctrl_client::CustomResource;
use kctrl_client::schemars::JsonSchema;
use kctrl_client::serde::{Deserialize, Serialize};

/// FooSpec is the spec for a Foo resource.
#[derive(CustomResource, Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[resource(group = "samplecontroller.k8s.io", version = "v1alpha1", kind = "Foo", namespaced,
           status = "FooStatus")]
#[serde(crate = "kctrl_client::serde", rename_all = "camelCase")]
#[schemars(crate = "kctrl_client::schemars")]
struct FooSpec {
    deployment_name: String,
    replicas: Option<i32>,
}

/// FooStatus is the status for a Foo resource.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[serde(crate = "kctrl_client::serde", rename_all = "camelCase")]
#[schemars(crate = "kctrl_client::schemars")]
struct FooStatus {
    available_replicas: i32,
}

fn deployment(name: &str, replicas: i32) -> Deployment {
    let mut d = Deployment {
        spec: Versioned::from_value(DeploymentSpec::default()),
        ..Default::default()
    };
    d.metadata.name = Some(name.to_owned());
    d.metadata.namespace = Some("default".to_owned());
    d.spec.get_mut().replicas = Some(replicas);
    d
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), String> {
    // The release kctrl was compiled for is the one this crate selected.
    let expected = "1.37";
    if K8S_API_VERSION != expected {
        return Err(format!(
            "kctrl-client was built for Kubernetes {K8S_API_VERSION}, the consumer selected {expected}"
        ));
    }
    let same: ReExported = deployment("web", 3);

    // Protobuf, generated for every release, round-trips under this one.
    let bytes = same.to_protobuf().ok_or("no protobuf encoding")?;
    let back = Deployment::from_protobuf(&bytes).map_err(|e| e.to_string())?;
    if back != same {
        return Err(format!("protobuf round trip changed the object: {back:?}"));
    }

    // An informer over the in-memory API server sees what was created.
    let fake = FakeApi::new();
    Api::<Deployment>::namespaced(fake.client(), "default")
        .create(&PostParams::default(), &same)
        .await
        .map_err(|e| e.to_string())?;
    let factory = SharedInformerFactory::new(fake.client(), Duration::ZERO);
    let lister = factory.lister::<Deployment>();
    let cancel = CancellationToken::new();
    factory.start(&cancel);
    let synced = factory.wait_for_cache_sync(&cancel).await;
    if !synced.values().all(|s| *s) {
        return Err(format!("informers did not sync: {synced:?}"));
    }
    let cached = lister
        .namespaced("default")
        .get("web")
        .ok_or("the informer's cache has no default/web")?;
    if cached.spec.get().and_then(|s| s.replicas) != Some(3) {
        return Err(format!("cached replicas: {:?}", cached.spec.get()));
    }
    cancel.cancel();

    // The work queue hands the key out once.
    let queue: Queue<String> = Queue::new();
    queue.add("default/web".to_owned());
    queue.add("default/web".to_owned());
    if queue.len() != 1 {
        return Err(format!("queue length {} after adding one key twice", queue.len()));
    }

    // A custom resource, its CRD and the fake serving it.
    let crd = Foo::crd();
    if crd.metadata.name.as_deref() != Some("foos.samplecontroller.k8s.io") {
        return Err(format!("CRD name {:?}", crd.metadata.name));
    }
    fake.register_crd(&crd);
    let foo = Foo::new(
        "example-foo",
        FooSpec {
            deployment_name: "example-foo".into(),
            replicas: Some(1),
        },
    );
    let created = Api::<Foo>::namespaced(fake.client(), "default")
        .create(&PostParams::default(), &foo)
        .await
        .map_err(|e| e.to_string())?;
    if created.spec.replicas != Some(1) || created.status.is_some() {
        return Err(format!("created Foo: {created:?}"));
    }
    let stored = fake
        .get_value(&kctrl_client::ResourceRef::of::<Foo>(), Some("default"), "example-foo")
        .ok_or("the fake has no default/example-foo")?;
    if stored["kind"] != "Foo" || stored["apiVersion"] != "samplecontroller.k8s.io/v1alpha1" {
        return Err(format!("stored Foo without its type: {stored}"));
    }

    println!("kctrl-consumer: Kubernetes {K8S_API_VERSION}: all checks passed");
    Ok(())
}

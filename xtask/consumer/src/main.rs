//! Uses kctrl's library crates as a user's crate does, with the Kubernetes release chosen
//! here (k8s-openapi's `latest`), and checks what it sees: an in-memory API server, an
//! informer over it, a work queue, protobuf, and the fields whose shape depends on the release.
//! Exits non-zero on the first check that fails.

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

    println!("kctrl-consumer: Kubernetes {K8S_API_VERSION}: all checks passed");
    Ok(())
}

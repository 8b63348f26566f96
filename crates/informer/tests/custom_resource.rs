//! A derived custom resource in the informer machinery, on the in-memory API server: the
//! factory's informer, lister and metadata-only informer, a view of it, and a missing CRD
//! that the reflector keeps retrying until it is installed.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kctrl_client::{Api, CustomResource, PostParams};
use kctrl_fake::FakeApi;
use kctrl_informer::SharedInformerFactory;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

/// sample-controller's Foo.
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[resource(
    group = "samplecontroller.k8s.io",
    version = "v1alpha1",
    kind = "Foo",
    namespaced,
    status = "FooStatus",
    derive = "PartialEq"
)]
#[serde(rename_all = "camelCase")]
struct FooSpec {
    deployment_name: String,
    replicas: Option<i32>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct FooStatus {
    available_replicas: i32,
}

/// What a controller that only follows the Deployment names reads of a Foo.
#[derive(Clone, Debug, Deserialize)]
struct FooDeployment {
    metadata: ObjectMeta,
    spec: FooDeploymentSpec,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct FooDeploymentSpec {
    deployment_name: String,
}

kctrl_client::resource_view!(FooDeployment => Foo);

async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    for _ in 0..500 {
        if check() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("timed out waiting for {what}");
}

#[tokio::test]
async fn informers_listers_and_views_of_a_custom_resource() {
    let fake = FakeApi::new();
    fake.register_crd(&Foo::crd());
    let foos: Api<Foo> = Api::namespaced(fake.client(), "default");
    let created = foos
        .create(
            &PostParams::default(),
            &Foo::new(
                "example-foo",
                FooSpec {
                    deployment_name: "example-foo".into(),
                    replicas: Some(1),
                },
            ),
        )
        .await
        .unwrap();

    let factory = SharedInformerFactory::new(fake.client(), Duration::ZERO);
    let lister = factory.lister::<Foo>();
    let metadata = factory.metadata_lister::<Foo>();
    let view = factory.lister::<FooDeployment>();
    let cancel = CancellationToken::new();
    factory.start(&cancel);
    let synced = factory.wait_for_cache_sync(&cancel).await;
    assert_eq!(synced.len(), 3);
    assert!(synced.values().all(|s| *s), "{synced:?}");

    assert_eq!(
        lister.namespaced("default").get("example-foo").as_deref(),
        Some(&created)
    );
    let meta = metadata.namespaced("default").get("example-foo").unwrap();
    assert_eq!(meta.metadata.uid(), created.metadata.uid.as_deref());
    let v = view.namespaced("default").get("example-foo").unwrap();
    assert_eq!(v.spec.deployment_name, "example-foo");
    assert_eq!(v.metadata.name.as_deref(), Some("example-foo"));

    let mut changed = created.clone();
    changed.spec.deployment_name = "renamed".into();
    foos.update(&PostParams::default(), &changed).await.unwrap();
    eventually("the view to see the new name", || {
        view.namespaced("default")
            .get("example-foo")
            .is_some_and(|v| v.spec.deployment_name == "renamed")
    })
    .await;
    cancel.cancel();
    factory.shutdown().await;
}

#[tokio::test]
async fn an_informer_waits_for_a_missing_crd() {
    let fake = FakeApi::new();
    let factory = SharedInformerFactory::new(fake.client(), Duration::ZERO);
    let informer = factory.informer::<Foo>();
    let cancel = CancellationToken::new();
    factory.start(&cancel);
    // The list fails (404 naming the resource) and is retried with backoff.
    eventually("two list attempts", || {
        fake.actions().iter().filter(|a| a.verb() == "list").count() >= 2
    })
    .await;
    assert!(!informer.has_synced());
    fake.register_crd(&Foo::crd());
    let mut late = Foo::new(
        "late",
        FooSpec {
            deployment_name: "d".into(),
            replicas: None,
        },
    );
    late.metadata.namespace = Some("default".into());
    fake.add(&late).unwrap();
    let synced = tokio::time::timeout(
        Duration::from_secs(10),
        factory.wait_for_cache_sync(&cancel),
    )
    .await
    .expect("the informer syncs once the CRD exists");
    assert!(synced.values().all(|s| *s));
    assert_eq!(
        informer
            .lister()
            .list(&kctrl_client::labels::Selector::everything())
            .len(),
        1
    );
    cancel.cancel();
    factory.shutdown().await;
}

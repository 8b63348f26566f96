//! A derived custom resource served by the fake: the CRD's semantics (status subresource,
//! generation, selectable fields) and a missing CRD.

use futures::StreamExt;
use kctrl_client::{
    Api, CustomResource, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use kctrl_fake::FakeApi;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// sample-controller's Foo.
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[resource(
    group = "samplecontroller.k8s.io",
    version = "v1alpha1",
    kind = "Foo",
    namespaced,
    status = "FooStatus",
    selectable_field = ".spec.deploymentName",
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

/// A cluster-scoped resource without a status subresource.
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[resource(group = "example.com", version = "v1", kind = "Widget")]
struct WidgetSpec {
    size: i32,
}

fn foo(name: &str, deployment: &str) -> Foo {
    Foo::new(
        name,
        FooSpec {
            deployment_name: deployment.into(),
            replicas: Some(1),
        },
    )
}

#[tokio::test]
async fn a_missing_crd_is_named_and_a_registered_one_is_served() {
    let fake = FakeApi::new();
    let foos: Api<Foo> = Api::namespaced(fake.client(), "default");
    let err = foos.list(&ListParams::default()).await.unwrap_err();
    assert!(err.is_not_found());
    assert_eq!(
        err.to_string(),
        "foos.samplecontroller.k8s.io: the server has no such resource - is its \
         CustomResourceDefinition installed? (404 page not found)"
    );
    assert!(foos.watch(&WatchParams::default()).await.is_err());

    fake.register_crd(&Foo::crd());
    let created = foos
        .create(&PostParams::default(), &foo("example-foo", "example-foo"))
        .await
        .unwrap();
    assert_eq!(created.metadata.namespace.as_deref(), Some("default"));
    assert_eq!(created.metadata.generation, Some(1));
    assert_eq!(foos.get("example-foo").await.unwrap(), created);
    let list = foos.list(&ListParams::default()).await.unwrap();
    assert_eq!(list.items, std::slice::from_ref(&created));
    // The object as stored carries apiVersion and kind.
    let stored = fake
        .get_value(
            &kctrl_client::ResourceRef::of::<Foo>(),
            Some("default"),
            "example-foo",
        )
        .unwrap();
    assert_eq!(stored["apiVersion"], "samplecontroller.k8s.io/v1alpha1");
    assert_eq!(stored["kind"], "Foo");
}

#[tokio::test]
async fn status_goes_through_the_status_subresource() {
    let fake = FakeApi::new();
    fake.register_crd(&Foo::crd());
    let foos: Api<Foo> = Api::namespaced(fake.client(), "default");
    let mut f = foo("a", "a");
    // Create drops a status: the subresource owns it.
    f.status = Some(FooStatus {
        available_replicas: 9,
    });
    let created = foos.create(&PostParams::default(), &f).await.unwrap();
    assert_eq!(created.status, None);

    // A normal update ignores status; it changes spec and bumps the generation.
    let mut changed = created.clone();
    changed.spec.replicas = Some(3);
    changed.status = Some(FooStatus {
        available_replicas: 3,
    });
    let updated = foos.update(&PostParams::default(), &changed).await.unwrap();
    assert_eq!(updated.spec.replicas, Some(3));
    assert_eq!(updated.status, None);
    assert_eq!(updated.metadata.generation, Some(2));

    // update_status changes the status only.
    let mut status = updated.clone();
    status.status = Some(FooStatus {
        available_replicas: 3,
    });
    status.spec.replicas = Some(7);
    let written = foos
        .update_status(&PostParams::default(), &status)
        .await
        .unwrap();
    assert_eq!(written.status, status.status);
    assert_eq!(written.spec.replicas, Some(3));
    assert_eq!(written.metadata.generation, Some(2));

    // Merge patches work on custom resources.
    let patched = foos
        .patch(
            "a",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"replicas": 5}})),
        )
        .await
        .unwrap();
    assert_eq!(patched.spec.replicas, Some(5));
}

#[tokio::test]
async fn watches_and_selectable_fields() {
    let fake = FakeApi::new();
    fake.register_crd(&Foo::crd());
    let foos: Api<Foo> = Api::namespaced(fake.client(), "default");
    let mut events = foos
        .watch(&WatchParams {
            field_selector: Some("spec.deploymentName=web".into()),
            ..Default::default()
        })
        .await
        .unwrap();
    foos.create(&PostParams::default(), &foo("other", "db"))
        .await
        .unwrap();
    let web = foos
        .create(&PostParams::default(), &foo("web", "web"))
        .await
        .unwrap();
    match events.next().await {
        Some(Ok(WatchEvent::Added(f))) => assert_eq!(f, web),
        other => panic!("expected the web Foo to be added, got {other:?}"),
    }
    let selected = foos
        .list(&ListParams {
            field_selector: Some("spec.deploymentName=db".into()),
            ..Default::default()
        })
        .await
        .unwrap();
    let names: Vec<_> = selected
        .items
        .iter()
        .map(|f| f.metadata.name.clone().unwrap_or_default())
        .collect();
    assert_eq!(names, ["other"]);
}

#[tokio::test]
async fn without_a_status_subresource_status_is_an_ordinary_field() {
    let fake = FakeApi::new();
    fake.register_crd(&Widget::crd());
    let widgets: Api<Widget> = Api::all(fake.client());
    let created = widgets
        .create(
            &PostParams::default(),
            &Widget::new("w", WidgetSpec { size: 2 }),
        )
        .await
        .unwrap();
    assert_eq!(created.metadata.namespace, None);
    assert!(
        widgets
            .update_status(&PostParams::default(), &created)
            .await
            .unwrap_err()
            .is_not_found()
    );
    // add() seeds objects of registered or unregistered custom resources alike.
    let seeded = fake
        .add(&Widget::new("seeded", WidgetSpec { size: 4 }))
        .unwrap();
    assert_eq!(seeded.spec.size, 4);
    assert_eq!(fake.objects::<Widget>().len(), 2);
}

/// A resource with CEL validation rules, which the fake does not evaluate.
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[resource(group = "example.com", version = "v1", kind = "Span", namespaced)]
#[schemars(transform = kctrl_client::rule!("self.low <= self.high", message = "low must not exceed high"))]
struct SpanSpec {
    low: i32,
    #[schemars(transform = kctrl_client::rule!("self == oldSelf", reason = FieldValueForbidden))]
    high: i32,
}

#[tokio::test]
async fn a_crd_with_cel_rules_is_served_and_its_rules_are_not_evaluated() {
    let fake = FakeApi::new();
    let crd = Span::crd();
    let spec = &crd.spec.versions[0]
        .schema
        .as_ref()
        .and_then(|s| s.open_api_v3_schema.as_ref())
        .and_then(|s| s.properties.as_ref())
        .unwrap()["spec"];
    assert!(spec.x_kubernetes_validations.is_some());
    fake.register_crd(&crd);
    let spans: Api<Span> = Api::namespaced(fake.client(), "default");
    // Both would be refused by kube-apiserver (tests/e2e/cel.rs): the fake stores them, as
    // its crate docs say.
    let created = spans
        .create(
            &PostParams::default(),
            &Span::new("s", SpanSpec { low: 5, high: 1 }),
        )
        .await
        .unwrap();
    let mut changed = created.clone();
    changed.spec.high = 9;
    let replaced = spans
        .update(&PostParams::default(), &changed)
        .await
        .unwrap();
    assert_eq!(replaced.spec, SpanSpec { low: 5, high: 9 });
}

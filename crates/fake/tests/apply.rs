//! Server-side apply on the fake: the shared case table (which `tests/e2e/apply.rs` also
//! runs against a real kube-apiserver), then what only the fake needs to say about itself:
//! untracked objects, resets, dry runs, custom resources and the limits it reports.

mod apply_cases;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kctrl_client::{Api, DynamicObject, Patch, PatchParams, ResourceRef, Scope};
use kctrl_fake::FakeApi;
use serde_json::{Value, json};

#[tokio::test]
async fn the_shared_cases_hold_on_the_fake() {
    for (index, case) in apply_cases::cases().iter().enumerate() {
        let fake = FakeApi::new();
        let observed = apply_cases::run(&fake.client(), "default", index, case).await;
        apply_cases::check("kctrl-fake", case, &observed);
    }
}

fn configmaps(fake: &FakeApi) -> Api<ConfigMap> {
    Api::namespaced(fake.client(), "default")
}

fn apply_body(data: Value) -> Patch {
    Patch::Apply(
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}, "data": data}),
    )
}

fn managers(obj: &ConfigMap) -> Vec<(String, String)> {
    obj.metadata
        .managed_fields
        .iter()
        .flatten()
        .map(|m| {
            (
                m.manager.clone().unwrap_or_default(),
                m.operation.clone().unwrap_or_default(),
            )
        })
        .collect()
}

#[tokio::test]
async fn a_seeded_object_is_untracked() {
    // `add` stores the object as given, like client-go's tracker: no managers, so the
    // first apply makes its fields `before-first-apply`'s (the table's case of an object
    // reset to untracked shows the rest on both servers).
    let fake = FakeApi::new();
    fake.add(&ConfigMap {
        metadata: ObjectMeta {
            name: Some("cm".into()),
            namespace: Some("default".into()),
            ..Default::default()
        },
        data: Some([("x".to_owned(), "1".to_owned())].into()),
        ..Default::default()
    })
    .unwrap();
    let api = configmaps(&fake);
    let patched = api
        .patch(
            "cm",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"w": "0"}})),
        )
        .await
        .unwrap();
    assert!(patched.metadata.managed_fields.is_none());
    let applied = api
        .patch(
            "cm",
            &PatchParams::apply("ap"),
            &apply_body(json!({"x": "1", "n": "new"})),
        )
        .await
        .unwrap();
    assert_eq!(
        managers(&applied),
        [
            ("ap".to_owned(), "Apply".to_owned()),
            ("before-first-apply".to_owned(), "Update".to_owned())
        ]
    );
}

#[tokio::test]
async fn custom_resources_apply_with_atomic_lists() {
    let fake = FakeApi::new();
    let widgets = ResourceRef::new("example.com", "v1", "widgets", "Widget", Scope::Namespaced);
    fake.register(kctrl_fake::ResourceSpec::new(widgets.clone()));
    let api = Api::<DynamicObject>::namespaced_dynamic(fake.client(), "default", &widgets);
    let mut w = DynamicObject::new("w", &widgets);
    w.data
        .insert("spec".into(), json!({"items": [{"name": "a"}], "size": 1}));
    let created = api.apply(&PatchParams::apply("m1"), &w).await.unwrap();
    let fields = serde_json::to_value(&created.metadata.managed_fields).unwrap();
    // A custom resource's list is one field: the fake knows no schema for it.
    assert_eq!(
        fields[0]["fieldsV1"],
        json!({"f:spec": {"f:items": {}, "f:size": {}}})
    );
    assert!(
        created.data.get("status").is_none(),
        "custom resources get no status on create"
    );
    let mut other = DynamicObject::new("w", &widgets);
    other
        .data
        .insert("spec".into(), json!({"items": [{"name": "b"}]}));
    let err = api
        .apply(&PatchParams::apply("m2"), &other)
        .await
        .unwrap_err();
    assert!(err.is_conflict(), "{err}");
    assert!(err.to_string().contains(".spec.items"), "{err}");
}

#[tokio::test]
async fn what_the_fake_cannot_model_is_refused_with_the_reason() {
    let fake = FakeApi::new();
    // A container port without its protocol: the apiserver would default it.
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::namespaced(fake.client(), "default");
    let body = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
        "spec": {"template": {"spec": {"containers": [{"name": "c", "ports": [{"containerPort": 80}]}]}}}});
    let err = deployments
        .patch("d", &PatchParams::apply("m"), &Patch::Apply(body))
        .await
        .unwrap_err();
    let message = err.to_string();
    assert!(
        message.contains(r#".spec.template.spec.containers[name="c"].ports"#)
            && message.contains("protocol"),
        "{message}"
    );
    // Duplicate keys are refused as the apiserver refuses them.
    let body = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
        "spec": {"template": {"spec": {"containers": [{"name": "c"}, {"name": "c"}]}}}});
    let err = deployments
        .patch("d", &PatchParams::apply("m"), &Patch::Apply(body))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("duplicate entries"), "{err}");
}

#[tokio::test]
async fn applies_are_recorded_as_patch_actions() {
    let fake = FakeApi::new();
    configmaps(&fake)
        .patch(
            "cm",
            &PatchParams::apply("m").force(),
            &apply_body(json!({"x": "1"})),
        )
        .await
        .unwrap();
    let actions = fake.actions();
    assert_eq!(actions.len(), 1);
    assert_eq!(actions[0].verb(), "patch");
    assert!(matches!(actions[0].patch(), Some(Patch::Apply(_))));
    let kctrl_client::Operation::Patch { params, .. } = &actions[0].request().operation else {
        panic!("a patch");
    };
    assert_eq!(params, &PatchParams::apply("m").force());
}

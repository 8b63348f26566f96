//! A derived custom resource as an owner: sample-controller's Foo owning its Deployment.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kctrl_client::CustomResource;
use kctrl_controller_ref::{Owner, get_controller_of};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(CustomResource, Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[resource(
    group = "samplecontroller.k8s.io",
    version = "v1alpha1",
    kind = "Foo",
    namespaced
)]
#[serde(rename_all = "camelCase")]
struct FooSpec {
    deployment_name: String,
}

#[test]
fn a_custom_resource_owns_what_it_creates() {
    let mut foo = Foo::new(
        "example-foo",
        FooSpec {
            deployment_name: "example-foo".into(),
        },
    );
    foo.metadata.namespace = Some("default".into());
    foo.metadata.uid = Some("foo-uid".into());
    let owner = Owner::of(&foo);
    assert_eq!(owner.to_string(), "Foo default/example-foo");
    let deployment = Deployment {
        metadata: ObjectMeta {
            name: Some(foo.spec.deployment_name.clone()),
            namespace: Some("default".into()),
            owner_references: Some(vec![owner.controller_ref()]),
            ..Default::default()
        },
        ..Default::default()
    };
    let controller = get_controller_of(&deployment.metadata).expect("a controller reference");
    assert_eq!(controller.api_version, "samplecontroller.k8s.io/v1alpha1");
    assert_eq!(controller.kind, "Foo");
    assert_eq!(controller.uid, "foo-uid");
    assert_eq!(controller.block_owner_deletion, Some(true));
}

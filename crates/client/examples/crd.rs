//! Prints the CustomResourceDefinition of sample-controller's `Foo` as YAML, generated from
//! the Rust types below: `cargo run -p kctrl-client --example crd | kubectl apply -f -`.
//!
//! This file is the whole port of sample-controller's `types.go` and `crd.yaml`.

use kctrl_client::CustomResource;
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
    annotation(
        "api-approved.kubernetes.io",
        "unapproved, experimental-only; please get an approval from Kubernetes API reviewers if you're trying to develop a CRD in the *.k8s.io or *.kubernetes.io groups"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct FooSpec {
    /// The name of the Deployment the controller creates for this Foo.
    pub deployment_name: String,
    /// How many replicas that Deployment runs (1 to 10).
    #[schemars(range(min = 1, max = 10))]
    pub replicas: Option<i32>,
}

/// FooStatus is the status for a Foo resource.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FooStatus {
    /// How many of the Deployment's replicas are available.
    pub available_replicas: i32,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // try_crd: this example's types are structural everywhere; fail loudly if that changes.
    use kctrl_client::crd::CustomResourceExt;
    let crd = Foo::try_crd()?;
    print!("{}", serde_yaml_ng::to_string(&crd)?);
    Ok(())
}

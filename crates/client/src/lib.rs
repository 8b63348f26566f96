//! A typed Kubernetes REST client with client-go's flow control, retries and watch semantics.
//!
//! The data path:
//!
//! ```text
//! Api<K> (typed verbs) ──ApiRequest──▶ Backend ──▶ HttpBackend ──▶ kube-apiserver
//!                                          └──────▶ in-memory fake (tests)
//! ```
//!
//! * [`Api`] gives typed `get`, `list`, `watch`, `create`, `update`, `update_status`, `patch`,
//!   `apply` (server-side apply) and `delete` over any k8s-openapi resource, namespaced or
//!   cluster-wide.
//! * [`Backend`] is the seam: the HTTP backend talks to a real server; a fake answers from
//!   memory so informers and controllers are tested unchanged.
//! * [`Error`] decodes the server's `Status`; classify with [`Error::is_not_found`],
//!   [`Error::is_conflict`], [`Error::is_gone`] and friends.
//!
//! | client-go                         | kctrl-client                        |
//! |-----------------------------------|-------------------------------------|
//! | `rest.Config`                     | [`kctrl_config::Config`]            |
//! | `kubernetes.NewForConfig(cfg)`    | [`Client::try_from_config`]         |
//! | `rest.RESTClient`                 | [`HttpBackend`] (JSON; protobuf answers for [`Api::protobuf`]) |
//! | `tools/metrics` hooks             | [`RestClientMetrics`]               |
//! | component-base's `rest_client_*` Prometheus series | [`prometheus::PrometheusRestClientMetrics`] |
//! | `clientset.AppsV1().Deployments(ns)` | [`Api::<Deployment>::namespaced`] |
//! | `Get` / `List` / `Watch`          | [`Api::get`] / [`Api::list`] / [`Api::watch`] |
//! | `Create` / `Update` / `UpdateStatus` | [`Api::create`] / [`Api::update`] / [`Api::update_status`] |
//! | `Patch(types.StrategicMergePatchType, ...)` | [`Api::patch`] with [`Patch::Strategic`] |
//! | `Patch(ctx, name, types.ApplyPatchType, data, metav1.PatchOptions{FieldManager: "m", Force: &force})` | [`Api::patch`] with [`Patch::Apply`] and [`PatchParams::apply`]`("m")` (`.force()`) |
//! | `Apply(ctx, cfg, metav1.ApplyOptions{FieldManager: "m", Force: true})` / `ApplyStatus(...)` | [`Api::apply`] / [`Api::apply_status`] with [`PatchParams::apply`]`("m").force()`; metadata alone: [`Api::apply_metadata`] |
//! | `Delete(metav1.DeleteOptions{...})` | [`Api::delete`] with [`DeleteParams`] |
//! | `apierrors.IsNotFound(err)`       | [`Error::is_not_found`]             |
//! | `discovery.ServerVersion()`       | [`Client::server_version`]          |
//! | an informer transform that drops managedFields | [`Api::without_managed_fields`] (skipped while decoding) |
//! | `ContentType: application/vnd.kubernetes.protobuf` (kube-controller-manager's default) | [`Api::protobuf`] for types implementing [`protobuf::FromProtobuf`] (views; whole Deployments and ReplicaSets) |
//! | `dynamic.NewForConfig(cfg).Resource(gvr).Namespace(ns)` | [`Api::<DynamicObject>::namespaced_dynamic`](Api::namespaced_dynamic) / [`Api::all_dynamic`] |
//! | `unstructured.Unstructured` / `schema.GroupVersionResource` | [`DynamicObject`] / [`ResourceRef::new`] |
//! | code-generator's `+genclient` and `+k8s:deepcopy-gen`, the CRD YAML | `#[derive(CustomResource)]`, `Foo::crd()` ([`crd`]) |
//! | `k8s.io/utils/clock` (`PassiveClock`, `RealClock`, `testing.FakeClock`) | [`clock`] ([`clock::Clock`], [`clock::SystemClock`], [`clock::FakeClock`]) |
//! | `uuid.New().String()` (`k8s.io/apimachinery/pkg/util/uuid`) | [`uuid::new_v4`] |
//!
//! # Custom resources
//!
//! `#[derive(CustomResource)]` (feature `derive`, on by default) turns a spec struct into a
//! custom resource type that [`Api`] and everything built on it take like a k8s-openapi type,
//! and gives its CustomResourceDefinition, with a schema generated from the Rust types. The
//! [`crd`] module documents the attribute, what is generated and the schema rules.
//!
//! ```
//! # #[cfg(feature = "derive")] {
//! use kctrl_client::{Api, Client, CustomResource, ResourceRef};
//! use schemars::JsonSchema;
//! use serde::{Deserialize, Serialize};
//!
//! /// FooSpec is the spec for a Foo resource.
//! #[derive(CustomResource, Clone, Debug, Serialize, Deserialize, JsonSchema)]
//! #[resource(group = "samplecontroller.k8s.io", version = "v1alpha1", kind = "Foo",
//!            namespaced, status = "FooStatus")]
//! #[serde(rename_all = "camelCase")]
//! pub struct FooSpec {
//!     pub deployment_name: String,
//!     #[schemars(range(min = 1, max = 10))]
//!     pub replicas: Option<i32>,
//! }
//!
//! /// FooStatus is the status for a Foo resource.
//! #[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
//! #[serde(rename_all = "camelCase")]
//! pub struct FooStatus {
//!     pub available_replicas: i32,
//! }
//!
//! // sample-controller's example-foo.yaml is a Foo.
//! let yaml = r#"{"apiVersion": "samplecontroller.k8s.io/v1alpha1", "kind": "Foo",
//!     "metadata": {"name": "example-foo"},
//!     "spec": {"deploymentName": "example-foo", "replicas": 1}}"#;
//! let foo: Foo = serde_json::from_str(yaml).unwrap();
//! assert_eq!(foo.spec.replicas, Some(1));
//! assert_eq!(ResourceRef::of::<Foo>().qualified_name(), "foos.samplecontroller.k8s.io");
//!
//! // The CustomResourceDefinition to install, and the typed API once it is.
//! let crd = Foo::crd();
//! assert_eq!(crd.spec.names.list_kind.as_deref(), Some("FooList"));
//! async fn scale(client: Client, mut foo: Foo) -> Result<Foo, kctrl_client::Error> {
//!     let foos: Api<Foo> = Api::namespaced(client, "default");
//!     foo.spec.replicas = Some(3);
//!     foos.update(&Default::default(), &foo).await
//! }
//! # let _ = scale;
//! # }
//! ```

/// Runs `$body` with `$de` bound to a `serde_json::Deserializer` over `$bytes`.
///
/// Bytes that are UTF-8 (all the API server sends) are checked once, up front, and decoded as
/// text, where the decoder does not check each string again: checking 100-200 short strings
/// one call at a time cost 4% of the controller's instructions in its profile
/// (docs/benchmarks/controller.md). Anything else is decoded as bytes, as before, so a
/// string the target skips is still not checked and the result is the same either way.
macro_rules! with_json_deserializer {
    ($bytes:expr, |$de:ident| $body:expr) => {{
        let bytes: &[u8] = $bytes;
        match std::str::from_utf8(bytes) {
            Ok(text) => {
                let mut $de = serde_json::Deserializer::from_str(text);
                $body
            }
            Err(_) => {
                let mut $de = serde_json::Deserializer::from_slice(bytes);
                $body
            }
        }
    }};
}

mod api;
mod backend;
pub mod clock;
#[cfg(feature = "derive")]
pub mod crd;
#[cfg(feature = "derive")]
mod custom_resource;
pub mod dynamic;
mod error;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
mod http;
pub mod labels;
mod managed_fields;
mod metadata;
mod object_meta;
pub mod prometheus;
pub mod protobuf;
mod request;
mod resource;
mod resource_version;
pub mod sharding;
pub mod uuid;
pub mod versioned;
mod watch;

pub use api::{Api, Client, DeleteOutcome};
pub use backend::{Backend, WatchFrames};
pub use dynamic::{DynamicObject, DynamicScope};
pub use error::{ApiError, Error};
pub use http::{
    DEFAULT_MAX_BODY_SIZE, HttpBackend, MAX_ERROR_BODY_SIZE, MAX_RETRY_AFTER,
    NoopRestClientMetrics, RestClientMetrics,
};
/// The Kubernetes API types kctrl works with, as selected by the user: kctrl's crates select no
/// Kubernetes release themselves (see README.md, "Choosing the Kubernetes version"); a binary
/// depends on `k8s-openapi` with one version feature, and this is that same crate.
pub use k8s_openapi;
pub use kctrl_config as config;
pub use metadata::{PartialObjectMetadata, metadata_without_managed_fields};
pub use object_meta::{
    CompactManagedFieldsEntry, CompactObjectMeta, CompactOwnerReference, ObjectMetaAccess,
    StringMap,
};
pub use request::{
    ApiRequest, DeleteParams, ListParams, Operation, Patch, PatchParams, PostParams, Preconditions,
    PropagationPolicy, Representation, ResourceVersionMatch, WatchParams, WireFormat,
};
pub use resource::{ResourceRef, Scope};
pub use sharding::{
    HashRange, ShardField, ShardInfo, ShardSelector, ShardSelectorError, ShardedList, hash_field,
};
pub use watch::{Bookmark, INITIAL_EVENTS_END_ANNOTATION, WatchEvent};

/// `#[derive(CustomResource)]`: a custom resource type and its CustomResourceDefinition from
/// the spec struct; see the [`crd`] module for the attribute, what is generated and an
/// example.
#[cfg(feature = "derive")]
pub use kctrl_derive::CustomResource;
/// schemars 1, whose `JsonSchema` the spec and status types of a custom resource derive (the
/// same crate k8s-openapi implements it with).
#[cfg(feature = "derive")]
pub use schemars;
/// serde, as kctrl-client uses it: a crate that would rather not depend on serde itself can
/// derive its custom resources' spec and status through it
/// (`#[serde(crate = "kctrl_client::serde")]`).
#[cfg(feature = "derive")]
pub use serde;

/// What [`resource_view!`] and `#[derive(CustomResource)]` expand to refers to; not part of
/// the API.
#[doc(hidden)]
pub mod __private {
    pub use k8s_openapi;
    #[cfg(feature = "derive")]
    pub use schemars;
    pub use serde;

    /// The serde halves of a derived custom resource.
    #[cfg(feature = "derive")]
    pub mod custom_resource {
        pub use crate::custom_resource::{deserialize, serialize};
    }
}

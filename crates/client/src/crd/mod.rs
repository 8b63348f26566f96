//! Custom resources: typed Rust structs for them with `#[derive(CustomResource)]`, and their
//! CustomResourceDefinition generated from the Rust types.
//!
//! What client-go users get from code-generator (`+genclient`, `+k8s:deepcopy-gen`, the
//! typed clientset, informers and listers) and from controller-gen's CRD YAML, a Rust user gets
//! from one derive on the spec struct:
//!
//! ```
//! use kctrl_client::CustomResource;
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
//! // The generated resource type works wherever a k8s-openapi type does.
//! use k8s_openapi::{ListableResource, Resource};
//! assert_eq!(Foo::API_VERSION, "samplecontroller.k8s.io/v1alpha1");
//! assert_eq!(Foo::URL_PATH_SEGMENT, "foos");
//! assert_eq!(Foo::LIST_KIND, "FooList");
//!
//! // It is written with apiVersion and kind, as the API server requires.
//! let foo = Foo::new("example-foo", FooSpec { deployment_name: "example-foo".into(), replicas: Some(1) });
//! assert_eq!(
//!     serde_json::to_value(&foo).unwrap(),
//!     serde_json::json!({
//!         "apiVersion": "samplecontroller.k8s.io/v1alpha1", "kind": "Foo",
//!         "metadata": {"name": "example-foo"},
//!         "spec": {"deploymentName": "example-foo", "replicas": 1},
//!     })
//! );
//!
//! // And its CustomResourceDefinition comes from the same types.
//! let crd = Foo::crd();
//! assert_eq!(crd.metadata.name.as_deref(), Some("foos.samplecontroller.k8s.io"));
//! let version = &crd.spec.versions[0];
//! assert!(version.subresources.as_ref().unwrap().status.is_some());
//! let schema = version.schema.as_ref().unwrap().open_api_v3_schema.as_ref().unwrap();
//! let replicas = &schema.properties.as_ref().unwrap()["spec"].properties.as_ref().unwrap()["replicas"];
//! assert_eq!((replicas.minimum, replicas.maximum), (Some(1.0), Some(10.0)));
//! ```
//!
//! The spec and status types need `Serialize`, `Deserialize`, `JsonSchema`, `Clone` and
//! `Debug`. `JsonSchema` is schemars 1's (add `schemars = "1"` to your dependencies, or write
//! `#[schemars(crate = "kctrl_client::schemars")]` with the derive re-exported here as
//! [`schemars::JsonSchema`]); schemars' own attributes
//! (`#[schemars(range(min = 1))]`, `length`, `regex`, `transform = rule!(...)`) become
//! validations the API server enforces ([validation rules](#validation-rules-cel)). The derive's output itself names serde
//! and k8s-openapi only through kctrl-client.
//!
//! # `#[resource(...)]`
//!
//! | key | meaning | default |
//! |---|---|---|
//! | `group = "samplecontroller.k8s.io"` | the API group; a domain with at least one dot | required |
//! | `version = "v1alpha1"` | the API version | required |
//! | `kind = "Foo"` | the kind (CamelCase) | required |
//! | `struct_name = "FooV1"` | the generated struct's name (not the spec's) | the kind |
//! | `namespaced` | objects live in namespaces | cluster-scoped |
//! | `status = "FooStatus"` | the status type: a `status: Option<FooStatus>` field and the `status` subresource | no status |
//! | `plural = "foos"` | the name in URLs | kind in lowercase + `s` (no English rules: `Policy` → `policys`, set it) |
//! | `singular = "foo"` | | kind in lowercase |
//! | `shortname = "fo"` | `kubectl get fo`; repeatable | none |
//! | `category = "all"` | `kubectl get all`; repeatable | none |
//! | `printcolumn(name = "Replicas", type = "integer", json_path = ".spec.replicas")` | a `kubectl get` column; also `description`, `format`, `priority`; repeatable | none |
//! | `scale(spec_replicas_path = ".spec.replicas", status_replicas_path = ".status.replicas", label_selector_path = ".status.selector")` | the `scale` subresource (`kubectl scale`, autoscalers) | none |
//! | `selectable_field = ".spec.deploymentName"` | a field usable in field selectors; repeatable | none |
//! | `derive = "PartialEq"` | a further derive of the generated struct; repeatable (`Clone` and `Debug` always are) | none |
//! | `storage` | this version is the storage version when several are merged ([`VersionSet`]) | — |
//! | `served = false`, `deprecated`, `deprecation_warning = "..."` | the version's flags | served, not deprecated |
//! | `annotation("api-approved.kubernetes.io", "...")`, `label("k", "v")` | on the CustomResourceDefinition; repeatable | none |
//! | `crate = "::kctrl_client"` | where kctrl-client is, for a crate that renames it | `::kctrl_client` |
//!
//! Groups ending in `k8s.io` or `kubernetes.io` are reserved: the API server only creates
//! their CustomResourceDefinitions with the annotation `api-approved.kubernetes.io` (a URL of
//! the approved API review, or a text starting with `unapproved`), which `annotation(...)`
//! adds. A mistake the API server would refuse (a group without a dot, a plural with capitals,
//! an unknown printer-column type, a scale path outside `.spec`/`.status`) is a compile error
//! at the attribute, saying what to write instead:
//!
//! ```compile_fail
//! use kctrl_client::CustomResource;
//!
//! #[derive(CustomResource, Clone, Debug, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
//! // error: group "example" is not a valid API group for a custom resource: it must be a
//! // lowercase domain name with at least one dot, e.g. `samplecontroller.k8s.io` or `example.com`
//! #[resource(group = "example", version = "v1", kind = "Foo")]
//! struct FooSpec {}
//! ```
//!
//! A spec or status type without one of the derives it needs is an error naming the type:
//!
//! ```compile_fail,E0277
//! use kctrl_client::CustomResource;
//!
//! // error[E0277]: the trait bound `FooSpec: JsonSchema` is not satisfied
//! #[derive(CustomResource, Clone, Debug, serde::Serialize, serde::Deserialize)]
//! #[resource(group = "example.com", version = "v1", kind = "Foo")]
//! struct FooSpec {}
//! ```
//!
//! # What is generated
//!
//! For `kind = "Foo"` on `FooSpec`:
//!
//! * `struct Foo { pub metadata: ObjectMeta, pub spec: FooSpec, pub status: Option<FooStatus> }`
//!   (no `status` field without a status type), with the spec's visibility, deriving `Clone`,
//!   `Debug` and the `derive = ...` traits;
//! * `Foo::new(name, spec)` and `Foo::crd()`;
//! * k8s-openapi's `Resource` (`API_VERSION`, `GROUP`, `KIND`, `VERSION`,
//!   `URL_PATH_SEGMENT` = the plural, `Scope`), `ListableResource` (`LIST_KIND` = `FooList`)
//!   and `Metadata<Ty = ObjectMeta>`: so [`Api<Foo>`](crate::Api), informers, listers,
//!   [`PartialObjectMetadata<Foo>`](crate::PartialObjectMetadata), views
//!   ([`resource_view!`](crate::resource_view)), kctrl-controller-ref's `Owner::of` and
//!   kctrl-fake (after `FakeApi::register_crd(&Foo::crd())`) take it as they take a Deployment;
//! * serde's `Serialize`, always writing `apiVersion` and `kind`, and `Deserialize`, which
//!   refuses another `apiVersion` or `kind` naming the expected and the found one (an absent
//!   one is accepted, as k8s-openapi's types do);
//! * [`CustomResourceExt`], with the resource's names and flags in
//!   [`CustomResourceExt::DEFINITION`].
//!
//! # The schema
//!
//! The openAPIV3Schema is schemars' JSON Schema of the spec and status types made
//! *structural*, as the API server requires (rules and limits: [`structural_schema`]).
//! `Option<T>` fields are optional and nullable, so the `null` serde writes for `None` is
//! accepted by every write, server-side apply included, and stays `null`. Two exceptions,
//! where a `null` is pruned instead (on create and update; a server-side apply of it is
//! refused unless there is a default): a field with a default (`#[serde(default = ...)]`),
//! which then takes it, and the fields the `scale` subresource reads, which cannot be null;
//! mark those `#[serde(skip_serializing_if = "Option::is_none")]`. Maps are `additionalProperties`;
//! `serde_json::Value` and k8s-openapi's `RawExtension` preserve unknown fields;
//! `IntOrString` and `Quantity` are `x-kubernetes-int-or-string`; enums of unit variants
//! are string enums, enums of struct variants objects. Where a Rust type cannot be described
//! structurally (a recursive type, an enum mixing unit and struct variants, an untagged
//! string-or-object), [`crd`](CustomResourceExt::crd) accepts any value there instead and
//! [`try_crd`](CustomResourceExt::try_crd) reports each such place as an error.
//!
//! # Validation rules (CEL)
//!
//! A rule in `x-kubernetes-validations` is a CEL expression the API server evaluates on every
//! write: what the schema's keywords cannot say (one field against another, a value that may
//! not change). Write it as a schemars transform, `#[schemars(transform = rule!(...))]`, on a
//! struct (rules about several fields: `self` is the object) or on a field (`self` is the
//! field's value). It works on every node the schema gives a `type` (or that is
//! int-or-string): the spec, the status and every struct, list, map and scalar nested in
//! them, list items and map values included, and several rules may sit on one node. A node
//! without a type cannot carry a rule (CEL needs the type; the API server refuses the whole
//! definition, `unable to convert structural schema to CEL declarations`): rules on a
//! `serde_json::Value`, at the place a recursive type recurses or on an enum of mixed JSON
//! types are dropped and reported ([`try_crd`](CustomResourceExt::try_crd) refuses them;
//! write them on the enclosing struct).
//! [`rule!`](crate::rule) takes the expression and `message`, `message_expression`, `reason`
//! ([`Reason`]: `FieldValueInvalid`, the default, `FieldValueForbidden`, `FieldValueRequired`,
//! `FieldValueDuplicate`), `field_path` and `optional_old_self`, and checks at compile time
//! what it can (an empty rule or message, an unknown reason or key, a `field_path` starting
//! with neither `.` nor `[`, `optional_old_self` without `oldSelf`; white space around the
//! text is trimmed first, as the API server does); [`Rule`] is the same without the
//! compile-time check (for rules made at run time; the schema conversion then reports those
//! mistakes, and [`try_crd`](CustomResourceExt::try_crd) refuses them). Rules written by
//! hand, `#[schemars(extend("x-kubernetes-validations" = [...]))]`, may sit beside them on one
//! node: both are kept, the hand-written ones first.
//!
//! With `#[serde(flatten)]`, the rules on the flattened struct's type move to the struct it
//! is flattened into (several flattened structs' rules all do), `self` then being the outer
//! object. Two things do not work there: schemars ignores attributes on the flattened field
//! itself (a `transform` there is lost: put the rule on the type or the outer struct), and a
//! type flattened as an `Option<T>` leaves `T`'s fields optional in the outer object, where
//! a rule written for `T` (`self.a > 0`) fails every object without them (`no such key: a`):
//! such rules are dropped and reported. Write them on the outer struct, guarded with
//! `has()`: `rule!("!has(self.a) || self.a > 0")`.
//!
//! ```
//! use kctrl_client::{CustomResource, rule};
//! use schemars::JsonSchema;
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(CustomResource, Clone, Debug, Serialize, Deserialize, JsonSchema)]
//! #[resource(group = "example.com", version = "v1", kind = "Autoscaler", namespaced)]
//! #[serde(rename_all = "camelCase")]
//! // About several fields: on the struct.
//! #[schemars(transform = rule!("self.minReplicas <= self.maxReplicas",
//!     message = "minReplicas must not exceed maxReplicas", field_path = ".minReplicas"))]
//! pub struct AutoscalerSpec {
//!     pub min_replicas: i32,
//!     pub max_replicas: i32,
//!     // A transition rule: `oldSelf` is the value before the update.
//!     #[schemars(transform = rule!("self == oldSelf", message = "target is immutable",
//!         reason = FieldValueForbidden))]
//!     pub target: String,
//!     // The message computed from the value.
//!     #[schemars(transform = rule!("self % 10 == 0",
//!         message_expression = "'step must be a multiple of 10, not %d'.format([self])"))]
//!     pub step: Option<i64>,
//!     // Lists bounded for the cost budget (see below); the item type has its own rule.
//!     #[schemars(length(max = 16))]
//!     pub windows: Vec<Window>,
//! }
//!
//! #[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
//! #[schemars(transform = rule!("self.start < self.end", message = "a window must not end before it starts"))]
//! pub struct Window {
//!     pub start: i32,
//!     pub end: i32,
//! }
//!
//! use kctrl_client::crd::CustomResourceExt;
//! let crd = Autoscaler::try_crd().unwrap();
//! let schema = crd.spec.versions[0].schema.as_ref().unwrap().open_api_v3_schema.as_ref().unwrap();
//! let spec = &schema.properties.as_ref().unwrap()["spec"];
//! let rules = |node: &kctrl_client::k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::JSONSchemaProps| {
//!     node.x_kubernetes_validations.iter().flatten().map(|r| r.rule.clone()).collect::<Vec<_>>()
//! };
//! assert_eq!(rules(spec), ["self.minReplicas <= self.maxReplicas"]);
//! let props = spec.properties.as_ref().unwrap();
//! assert_eq!(rules(&props["target"]), ["self == oldSelf"]);
//! assert_eq!(props["target"].x_kubernetes_validations.as_ref().unwrap()[0].reason.as_deref(),
//!            Some("FieldValueForbidden"));
//! // A rule on an `Option` field stays on the (nullable) field.
//! assert_eq!(rules(&props["step"]), ["self % 10 == 0"]);
//! assert_eq!(props["step"].nullable, Some(true));
//! // The item type's rule is on the list's items.
//! let windows = &props["windows"];
//! assert_eq!(windows.max_items, Some(16));
//! use kctrl_client::k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::JSONSchemaPropsOrArray;
//! let Some(JSONSchemaPropsOrArray::Schema(item)) = &windows.items else { panic!() };
//! assert_eq!(rules(item), ["self.start < self.end"]);
//! ```
//!
//! What the API server does with them (`tests/e2e/cel.rs` checks each on kube-apiserver
//! v1.37.2):
//!
//! * A failing rule refuses the write with 422 `Invalid`, and the client's error names the
//!   place (the rule's node, or its `field_path`), the reason and the message, with the value
//!   for a scalar: `Autoscaler.example.com "a" is invalid: spec.minReplicas: Invalid value:
//!   minReplicas must not exceed maxReplicas`, `spec.step: Invalid value: 15: step must be a
//!   multiple of 10, not 15`, `spec.target: Forbidden: target is immutable`. Without a message
//!   it is `failed rule: <rule>`. Every failing rule of the object is listed.
//! * A transition rule (one using `oldSelf`) is only checked on updates, where the old value
//!   exists; with `optional_old_self = true` also on creates, `oldSelf` then being an
//!   optional (`oldSelf.hasValue()`, `oldSelf.value()`). Under a list that is not a map or set
//!   list (an atomic list, the default for a `Vec` of structs) there is no old value to
//!   compare with and the API server refuses the rule (`oldSelf cannot be used on the
//!   uncorrelatable portion of the schema`).
//! * A rule is not evaluated on a `null`: a rule on an `Option` field (nullable, see above)
//!   holds for `None`, so write the rule for the value it has when set.
//! * A rule whose CEL does not compile makes the API server refuse the whole
//!   CustomResourceDefinition with 422; the client's error names the place, the rule and the
//!   compiler's message: `spec.validation.openAPIV3Schema.properties[spec].properties[name]
//!   .x-kubernetes-validations[0].rule: Invalid value: {"Rule":"self.size( \u003e 1",...}:
//!   compilation failed: ERROR: <input>:1:12: Syntax error: ...` followed by the rule with a
//!   caret under the error.
//! * **Cost budget.** The API server estimates each rule's worst-case cost from the schema
//!   and refuses the definition when it is too high (`estimated rule cost exceeds budget by
//!   factor of ... (try simplifying the rule, or adding maxItems, maxProperties, and maxLength
//!   where arrays, maps, and strings are declared)`): a rule iterating over a list or a map,
//!   or calling a string function, on a list of unbounded length or strings of unbounded size
//!   is costed at the largest request the server takes. Bound them: `#[schemars(length(max =
//!   16))]` on a `Vec` gives `maxItems`, on a `String` `maxLength`, and
//!   `#[schemars(inner(length(max = 64)))]` bounds a `Vec<String>`'s items. On a map
//!   (`BTreeMap`, `HashMap`) `length` does nothing (schemars applies it to strings and
//!   arrays only): write `#[schemars(extend("maxProperties" = 16))]`. A
//!   `messageExpression` that converts with `string(x)` is costed as a string of any size and
//!   refused whatever the bounds: write `'not %d'.format([self])` instead.
//!
//! kctrl-fake does not evaluate rules (no CEL interpreter): it accepts the definition and
//! every object the rest of the schema accepts. Test rules against a real API server
//! (kctrl-testenv).
//!
//! # Embedded Kubernetes types keep their merge semantics
//!
//! A k8s-openapi type in a spec or status (a `PodSpec`, a `JobTemplateSpec`, a
//! `LabelSelector`, at any depth, also in an `Option`, a `Vec` or a map) gets the
//! `x-kubernetes-list-type`, `x-kubernetes-list-map-keys` and `x-kubernetes-map-type` that
//! upstream's OpenAPI gives it, so server-side apply merges it as it does in a Pod or a Job:
//! `containers`, `initContainers`, `volumes` and a container's `env` are maps keyed by
//! `name`, its `ports` by `containerPort` and `protocol`, `args` is atomic, a template's
//! `metadata.finalizers` a set, a `LabelSelector` an atomic map. Two field managers can then
//! each own a container of a custom resource instead of conflicting over the whole list.
//!
//! The facts come from a table generated from the OpenAPI v3 documents of the Kubernetes
//! release the local control plane runs (`k8s.io/kubernetes@v1.37.2`, `api/openapi-spec/v3`;
//! `cargo xtask gen-merge-semantics`, checked by `cargo xtask test`), and are added by the
//! type's schema name (`io.k8s.api.core.v1.PodSpec`, which k8s-openapi gives its types' schemas,
//! found through a schema generated with definitions before inlining). Only what upstream has is
//! added, never over a list or map type already there (yours, from `#[schemars(extend(...))]` or
//! `transform`), and only where the API server accepts it: a `map` list needs non-nullable object
//! items whose keys are required or defaulted, so an optional key takes upstream's default
//! (`protocol: TCP`, which the API server then fills in, as it does for a Pod's ports) and is
//! not nullable; a list whose key has none stays atomic (none in a pod template). A k8s-openapi
//! type that is `#[serde(flatten)]`ed into a struct of yours is not recognised, nor are your own
//! types, whatever their names.
//!
//! # Size
//!
//! Every doc comment becomes a `description`, and an embedded Kubernetes type brings its own:
//! a spec holding a `PodTemplateSpec` gives a 350 KiB CustomResourceDefinition (as JSON),
//! more than the 256 KiB of the `kubectl.kubernetes.io/last-applied-configuration`
//! annotation a client-side `kubectl apply -f` writes, which then fails. Install CRDs with
//! server-side apply (`kubectl apply --server-side -f crd.yaml`, or [`Api::apply`](crate::Api::apply)),
//! which keeps no such annotation, or cap the descriptions with [`cap_descriptions`]
//! (controller-gen's `maxDescLen`): that CRD is 156 KiB at 80 characters, 61 KiB at 0 (with the list
//! and map semantics above; measured by the `capped_descriptions_fit_a_client_side_apply` test's
//! CRD, Kubernetes 1.37 types).
//!
//! # Several versions
//!
//! Each version is a Rust type of its own (usually in modules `v1alpha1`, `v1`), each with
//! `#[derive(CustomResource)]` and the same group and kind. [`VersionSet`] merges their
//! definitions into one CustomResourceDefinition; exactly one of them says `storage`.

mod descriptions;
mod merge_semantics;
mod rules;
mod schema;

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceColumnDefinition, CustomResourceConversion, CustomResourceDefinition,
    CustomResourceDefinitionNames, CustomResourceDefinitionSpec, CustomResourceDefinitionVersion,
    CustomResourceSubresourceScale, CustomResourceSubresourceStatus, CustomResourceSubresources,
    CustomResourceValidation, JSONSchemaProps, SelectableField, WebhookClientConfig,
    WebhookConversion,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::{ListableResource, Metadata, Resource};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::resource::{ResourceRef, Scope};

pub use descriptions::cap_descriptions;
pub use rules::{Reason, Rule};
pub use schema::{Relaxed, structural_schema};

/// An additional printer column: what `kubectl get` shows besides the name and age.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PrinterColumn {
    /// The column's header.
    pub name: &'static str,
    /// `integer`, `number`, `string`, `boolean` or `date`.
    pub type_: &'static str,
    /// A JSON path into the object, e.g. `.spec.replicas`.
    pub json_path: &'static str,
    /// A description (`kubectl explain`).
    pub description: Option<&'static str>,
    /// An OpenAPI format for the value, e.g. `date-time`.
    pub format: Option<&'static str>,
    /// 0: shown by `kubectl get`; more: only with `-o wide`.
    pub priority: i32,
}

/// The `scale` subresource: where the replica counts and the selector are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Scale {
    /// The desired replicas, under `.spec`.
    pub spec_replicas_path: &'static str,
    /// The observed replicas, under `.status`.
    pub status_replicas_path: &'static str,
    /// The label selector, as a string, under `.spec` or `.status` (for autoscalers).
    pub label_selector_path: Option<&'static str>,
}

/// What `#[resource(...)]` says beyond k8s-openapi's `Resource` constants (group, version,
/// kind, plural and scope are there).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Definition {
    /// The singular name (`kubectl get foo`).
    pub singular: &'static str,
    /// Short names (`kubectl get fo`).
    pub short_names: &'static [&'static str],
    /// Categories (`kubectl get all`).
    pub categories: &'static [&'static str],
    /// Whether the type has a status, served through the `status` subresource.
    pub has_status: bool,
    /// Additional printer columns.
    pub printer_columns: &'static [PrinterColumn],
    /// The `scale` subresource, if any.
    pub scale: Option<Scale>,
    /// Fields usable in field selectors besides `metadata.name` and `metadata.namespace`.
    pub selectable_fields: &'static [&'static str],
    /// Whether this version is the storage version when several are merged.
    pub storage: bool,
    /// Whether this version is served.
    pub served: bool,
    /// Whether this version is deprecated.
    pub deprecated: bool,
    /// The warning the API server sends to clients of a deprecated version.
    pub deprecation_warning: Option<&'static str>,
    /// Annotations of the CustomResourceDefinition.
    pub annotations: &'static [(&'static str, &'static str)],
    /// Labels of the CustomResourceDefinition.
    pub labels: &'static [(&'static str, &'static str)],
}

/// The status type of a custom resource without one: it has no value, and its schema is never
/// used.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub enum NoStatus {}

/// A custom resource type, implemented by `#[derive(CustomResource)]`: its definition and the
/// CustomResourceDefinition made from it.
pub trait CustomResourceExt:
    Resource<Scope: 'static>
    + ListableResource
    + Metadata<Ty = ObjectMeta>
    + Serialize
    + DeserializeOwned
    + Clone
    + fmt::Debug
{
    /// The spec type.
    type Spec: schemars::JsonSchema;
    /// The status type ([`NoStatus`] when there is none).
    type Status: schemars::JsonSchema;
    /// Names and flags from `#[resource(...)]`.
    const DEFINITION: Definition;

    /// The CustomResourceDefinition serving this type, named `<plural>.<group>`, with one
    /// version (this one, the storage version) whose schema is generated from the spec and
    /// status types. Where a type cannot be described structurally the schema accepts any
    /// value (see the [module docs](self)); [`try_crd`](Self::try_crd) refuses that instead.
    fn crd() -> CustomResourceDefinition {
        build::<Self>().0
    }

    /// [`crd`](Self::crd), or an error listing each place where the schema would have to
    /// accept more than the Rust types do.
    fn try_crd() -> Result<CustomResourceDefinition, CrdError> {
        let (crd, relaxed) = build::<Self>();
        if relaxed.is_empty() {
            Ok(crd)
        } else {
            Err(CrdError::NotStructural {
                kind: Self::KIND.to_owned(),
                relaxed,
            })
        }
    }

    /// The CustomResourceDefinition's name: `<plural>.<group>`, e.g.
    /// `foos.samplecontroller.k8s.io`.
    fn crd_name() -> String {
        ResourceRef::of::<Self>().qualified_name()
    }
}

/// Why a CustomResourceDefinition could not be made.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CrdError {
    /// The Rust types cannot be described by a structural schema everywhere.
    #[error(
        "the schema of {kind} is not structural everywhere ({}); change the types there, or use crd(), which accepts any value at those places",
        relaxed.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")
    )]
    NotStructural {
        /// The kind.
        kind: String,
        /// The places, with what could not be expressed.
        relaxed: Vec<Relaxed>,
    },
    /// No version was given to a [`VersionSet`].
    #[error("a VersionSet needs at least one version: add one with .with::<T>()")]
    NoVersions,
    /// The versions disagree on something a CustomResourceDefinition has once.
    #[error("the versions of {kind} disagree on {what}: {detail}; make them the same")]
    Mismatch {
        /// The kind of the first version.
        kind: String,
        /// What differs: `group`, `kind`, `scope`...
        what: &'static str,
        /// Which versions have which values: `v1 has Namespaced, v2 has Cluster`.
        detail: String,
    },
    /// Two types declare the same version.
    #[error("version {version} of {kind} is given twice; each version is one Rust type")]
    DuplicateVersion {
        /// The kind.
        kind: String,
        /// The version.
        version: String,
    },
    /// Not exactly one version is the storage version.
    #[error(
        "exactly one version of {kind} must be the storage version, but {}: write `storage` in the #[resource(...)] of {}",
        if marked.is_empty() { "none is".to_owned() } else { format!("{} are ({})", marked.len(), marked.join(", ")) },
        if marked.is_empty() { format!("one of {}", versions.join(", ")) } else { "only one of them".to_owned() }
    )]
    Storage {
        /// The kind.
        kind: String,
        /// Every version.
        versions: Vec<String>,
        /// The versions marked `storage`.
        marked: Vec<String>,
    },
}

/// The schema node at a JSON path such as `.spec.replicas`, through object properties.
fn schema_at<'a>(root: &'a mut JSONSchemaProps, path: &str) -> Option<&'a mut JSONSchemaProps> {
    path.trim_start_matches('.')
        .split('.')
        .try_fold(root, |node, field| node.properties.as_mut()?.get_mut(field))
}

/// The CustomResourceDefinition of `K` and the places where its schema accepts more than `K`.
fn build<K: CustomResourceExt>() -> (CustomResourceDefinition, Vec<Relaxed>) {
    let d = K::DEFINITION;
    let (spec, mut relaxed) = structural_schema::<K::Spec>("spec");
    let mut properties = BTreeMap::from([("spec".to_owned(), spec)]);
    if d.has_status {
        let (status, more) = structural_schema::<K::Status>("status");
        relaxed.extend(more);
        properties.insert("status".to_owned(), status);
    }
    let mut root = JSONSchemaProps {
        type_: Some("object".to_owned()),
        properties: Some(properties),
        required: Some(vec!["spec".to_owned()]),
        ..Default::default()
    };
    if let Some(scale) = d.scale {
        // The scale subresource reads these fields and fails on a null (`<nil> is of the
        // type <nil>, expected int64`), where an absent field reads as 0: not nullable, so a
        // create or update prunes the null.
        let paths = [scale.spec_replicas_path, scale.status_replicas_path];
        for path in paths.into_iter().chain(scale.label_selector_path) {
            if let Some(node) = schema_at(&mut root, path) {
                node.nullable = None;
            }
        }
    }
    let strings = |v: &[&str]| -> Option<Vec<String>> {
        (!v.is_empty()).then(|| v.iter().map(|s| (*s).to_owned()).collect())
    };
    let pairs = |v: &[(&str, &str)]| -> Option<BTreeMap<String, String>> {
        (!v.is_empty()).then(|| {
            v.iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect()
        })
    };
    let subresources = (d.has_status || d.scale.is_some()).then(|| CustomResourceSubresources {
        status: d
            .has_status
            .then(|| CustomResourceSubresourceStatus(serde_json::json!({}))),
        scale: d.scale.map(|s| CustomResourceSubresourceScale {
            spec_replicas_path: s.spec_replicas_path.to_owned(),
            status_replicas_path: s.status_replicas_path.to_owned(),
            label_selector_path: s.label_selector_path.map(str::to_owned),
        }),
    });
    let columns: Vec<CustomResourceColumnDefinition> = d
        .printer_columns
        .iter()
        .map(|c| CustomResourceColumnDefinition {
            name: c.name.to_owned(),
            type_: c.type_.to_owned(),
            json_path: c.json_path.to_owned(),
            description: c.description.map(str::to_owned),
            format: c.format.map(str::to_owned),
            priority: (c.priority != 0).then_some(c.priority),
        })
        .collect();
    let version = CustomResourceDefinitionVersion {
        name: K::VERSION.to_owned(),
        served: d.served,
        // Alone, a version is the storage version; VersionSet decides among several.
        storage: true,
        deprecated: d.deprecated.then_some(true),
        deprecation_warning: d.deprecation_warning.map(str::to_owned),
        schema: Some(CustomResourceValidation {
            open_api_v3_schema: Some(root),
        }),
        subresources,
        additional_printer_columns: (!columns.is_empty()).then_some(columns),
        selectable_fields: (!d.selectable_fields.is_empty()).then(|| {
            d.selectable_fields
                .iter()
                .map(|p| SelectableField {
                    json_path: (*p).to_owned(),
                })
                .collect()
        }),
    };
    let r = ResourceRef::of::<K>();
    let crd = CustomResourceDefinition {
        metadata: ObjectMeta {
            name: Some(r.qualified_name()),
            annotations: pairs(d.annotations),
            labels: pairs(d.labels),
            ..Default::default()
        },
        spec: CustomResourceDefinitionSpec {
            group: K::GROUP.to_owned(),
            names: CustomResourceDefinitionNames {
                kind: K::KIND.to_owned(),
                list_kind: Some(K::LIST_KIND.to_owned()),
                plural: K::URL_PATH_SEGMENT.to_owned(),
                singular: Some(d.singular.to_owned()),
                short_names: strings(d.short_names),
                categories: strings(d.categories),
            },
            scope: match r.scope {
                Scope::Namespaced => "Namespaced",
                Scope::Cluster => "Cluster",
            }
            .to_owned(),
            versions: vec![version],
            conversion: None,
            preserve_unknown_fields: None,
        },
        status: None,
    };
    (crd, relaxed)
}

/// One CustomResourceDefinition from several versions of a kind, each its own Rust type.
///
/// The versions must agree on group, kind, plural, singular, short names, categories, scope,
/// annotations and labels; exactly one must be marked `storage` in its `#[resource(...)]`.
/// The versions are listed in the order given. Without a conversion webhook the API server
/// converts between versions by changing only `apiVersion` (`conversion: None`), so their
/// schemas must accept each other's objects.
///
/// ```
/// use kctrl_client::CustomResource;
/// use kctrl_client::crd::VersionSet;
/// use schemars::JsonSchema;
/// use serde::{Deserialize, Serialize};
///
/// mod v1alpha1 {
///     use super::*;
///     #[derive(CustomResource, Clone, Debug, Serialize, Deserialize, JsonSchema)]
///     #[resource(group = "example.com", version = "v1alpha1", kind = "Widget", namespaced)]
///     pub struct WidgetSpec { pub size: Option<i32> }
/// }
///
/// mod v1 {
///     use super::*;
///     #[derive(CustomResource, Clone, Debug, Serialize, Deserialize, JsonSchema)]
///     #[resource(group = "example.com", version = "v1", kind = "Widget", namespaced, storage)]
///     pub struct WidgetSpec { pub size: Option<i32>, pub color: Option<String> }
/// }
///
/// fn main() -> Result<(), kctrl_client::crd::CrdError> {
///     let crd = VersionSet::new().with::<v1alpha1::Widget>().with::<v1::Widget>().crd()?;
///     let versions: Vec<_> = crd.spec.versions.iter().map(|v| (v.name.as_str(), v.storage)).collect();
///     assert_eq!(versions, [("v1alpha1", false), ("v1", true)]);
///
///     // Without a storage version (or with two) it is an error saying which to mark.
///     let err = VersionSet::new().with::<v1alpha1::Widget>().crd().unwrap_err();
///     assert!(err.to_string().contains("write `storage` in the #[resource(...)] of one of v1alpha1"));
///     Ok(())
/// }
/// ```
#[derive(Default)]
pub struct VersionSet {
    versions: Vec<VersionEntry>,
    conversion: Option<CustomResourceConversion>,
}

struct VersionEntry {
    crd: Result<CustomResourceDefinition, CrdError>,
    storage: bool,
}

impl fmt::Debug for VersionSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.versions.iter().map(|v| {
                match &v.crd {
                    Ok(crd) => Cow::Owned(
                        crd.spec
                            .versions
                            .first()
                            .map(|v| v.name.clone())
                            .unwrap_or_default(),
                    ),
                    Err(_) => Cow::Borrowed("(error)"),
                }
            }))
            .finish()
    }
}

impl VersionSet {
    /// No versions yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds the version `K` (its schema as [`crd`](CustomResourceExt::crd) makes it).
    pub fn with<K: CustomResourceExt>(mut self) -> Self {
        self.versions.push(VersionEntry {
            crd: Ok(K::crd()),
            storage: K::DEFINITION.storage,
        });
        self
    }

    /// Adds the version `K`, failing at [`crd`](Self::crd) if its schema is not structural
    /// everywhere (as [`try_crd`](CustomResourceExt::try_crd)).
    pub fn with_strict<K: CustomResourceExt>(mut self) -> Self {
        self.versions.push(VersionEntry {
            crd: K::try_crd(),
            storage: K::DEFINITION.storage,
        });
        self
    }

    /// Converts between the versions with a conversion webhook (`spec.conversion` with
    /// `strategy: Webhook`, `conversionReviewVersions: ["v1"]`) called as `client_config`
    /// says (a Service or a URL ending in the webhook's path, e.g. `/convert`, and the CA
    /// bundle of its serving certificate). Without it the API server only rewrites
    /// `apiVersion` (`strategy: None`).
    ///
    /// ```
    /// # use kctrl_client::crd::VersionSet;
    /// use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    ///     ServiceReference, WebhookClientConfig,
    /// };
    /// # #[derive(kctrl_client::CustomResource, Clone, Debug, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
    /// # #[resource(group = "example.com", version = "v1", kind = "Widget", namespaced, storage)]
    /// # pub struct WidgetSpec {}
    /// let client_config = WebhookClientConfig {
    ///     service: Some(ServiceReference {
    ///         namespace: "widgets-system".into(),
    ///         name: "webhook".into(),
    ///         path: Some("/convert".into()),
    ///         port: None,
    ///     }),
    ///     ..Default::default()
    /// };
    /// let crd = VersionSet::new().with::<Widget>().webhook_conversion(client_config).crd().unwrap();
    /// let conversion = crd.spec.conversion.unwrap();
    /// assert_eq!(conversion.strategy, "Webhook");
    /// assert_eq!(conversion.webhook.unwrap().conversion_review_versions, ["v1"]);
    /// ```
    pub fn webhook_conversion(mut self, client_config: WebhookClientConfig) -> Self {
        self.conversion = Some(CustomResourceConversion {
            strategy: "Webhook".to_owned(),
            webhook: Some(WebhookConversion {
                client_config: Some(client_config),
                conversion_review_versions: vec!["v1".to_owned()],
            }),
        });
        self
    }

    /// The merged CustomResourceDefinition.
    pub fn crd(self) -> Result<CustomResourceDefinition, CrdError> {
        let conversion = self.conversion;
        let mut entries = Vec::with_capacity(self.versions.len());
        for v in self.versions {
            entries.push((v.crd?, v.storage));
        }
        let Some((first, _)) = entries.first() else {
            return Err(CrdError::NoVersions);
        };
        let kind = first.spec.names.kind.clone();
        let version_of = |c: &CustomResourceDefinition| {
            c.spec
                .versions
                .first()
                .map(|v| v.name.clone())
                .unwrap_or_default()
        };
        let first_version = version_of(first);
        let mut seen = Vec::new();
        for (crd, _) in &entries {
            let v = version_of(crd);
            let checks: [(&'static str, String, String); 6] = [
                ("group", first.spec.group.clone(), crd.spec.group.clone()),
                (
                    "kind",
                    first.spec.names.kind.clone(),
                    crd.spec.names.kind.clone(),
                ),
                (
                    "names (plural, singular, short names, categories)",
                    format!("{:?}", first.spec.names),
                    format!("{:?}", crd.spec.names),
                ),
                ("scope", first.spec.scope.clone(), crd.spec.scope.clone()),
                (
                    "annotations",
                    format!("{:?}", first.metadata.annotations),
                    format!("{:?}", crd.metadata.annotations),
                ),
                (
                    "labels",
                    format!("{:?}", first.metadata.labels),
                    format!("{:?}", crd.metadata.labels),
                ),
            ];
            for (what, a, b) in checks {
                if a != b {
                    return Err(CrdError::Mismatch {
                        kind: kind.clone(),
                        what,
                        detail: format!("{first_version} has {a}, {v} has {b}"),
                    });
                }
            }
            if seen.contains(&v) {
                return Err(CrdError::DuplicateVersion {
                    kind: kind.clone(),
                    version: v,
                });
            }
            seen.push(v);
        }
        let marked: Vec<String> = entries
            .iter()
            .filter(|(_, storage)| *storage)
            .map(|(c, _)| version_of(c))
            .collect();
        if marked.len() != 1 {
            return Err(CrdError::Storage {
                kind,
                versions: seen,
                marked,
            });
        }
        let mut iter = entries.into_iter();
        let (mut merged, storage) = iter.next().ok_or(CrdError::NoVersions)?;
        for v in &mut merged.spec.versions {
            v.storage = storage;
        }
        for (crd, storage) in iter {
            for mut v in crd.spec.versions {
                v.storage = storage;
                merged.spec.versions.push(v);
            }
        }
        merged.spec.conversion = conversion;
        Ok(merged)
    }
}

#[cfg(test)]
mod tests;

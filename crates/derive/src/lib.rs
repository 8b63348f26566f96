//! `#[derive(CustomResource)]`: a Kubernetes custom resource from its spec struct.
//!
//! Use it through kctrl-client, which re-exports it as `kctrl_client::CustomResource` (feature
//! `derive`, on by default) and holds what the generated code calls: its `crd` module
//! documents the attribute, the generated items and the schema rules with runnable examples.
//!
//! In short: on a spec struct `FooSpec` (with `Serialize`, `Deserialize`, `JsonSchema`,
//! `Clone` and `Debug`),
//!
//! ```text
//! #[derive(CustomResource)]
//! #[resource(group = "samplecontroller.k8s.io", version = "v1alpha1", kind = "Foo",
//!            namespaced, status = "FooStatus")]
//! ```
//!
//! generates `struct Foo { metadata: ObjectMeta, spec: FooSpec, status: Option<FooStatus> }`
//! with `Foo::new(name, spec)` and `Foo::crd()`, and implements k8s-openapi's `Resource`,
//! `ListableResource` and `Metadata`, serde's `Serialize` (writing `apiVersion` and `kind`)
//! and `Deserialize` (checking them), and kctrl-client's `crd::CustomResourceExt`.
//!
//! The keys of `#[resource(...)]`:
//!
//! | key | meaning |
//! |---|---|
//! | `group = "..."` | API group (required; a domain with a dot) |
//! | `version = "..."` | API version (required) |
//! | `kind = "..."` | kind, and the generated type's name (required) |
//! | `struct_name = "..."` | the generated type's name when it is not the kind |
//! | `namespaced` | namespaced; cluster-scoped without it |
//! | `status = "Type"` | status type; enables the `status` subresource |
//! | `plural = "..."` | URL name; default: the kind in lowercase + `s` |
//! | `singular = "..."` | default: the kind in lowercase |
//! | `shortname = "..."`, `category = "..."` | repeatable |
//! | `printcolumn(name, type, json_path, description, format, priority)` | repeatable |
//! | `scale(spec_replicas_path, status_replicas_path, label_selector_path)` | scale subresource |
//! | `selectable_field = ".spec.x"` | repeatable field selector |
//! | `derive = "Trait"` | repeatable extra derive for the generated type |
//! | `storage`, `served = false`, `deprecated`, `deprecation_warning = "..."` | version flags |
//! | `annotation("k", "v")`, `label("k", "v")` | on the CustomResourceDefinition |
//! | `crate = "path"` | kctrl-client's path; default `::kctrl_client` |

mod attrs;
mod expand;

/// Derives a Kubernetes custom resource type from its spec struct; see the [crate docs](crate)
/// and kctrl-client's `crd` module.
#[proc_macro_derive(CustomResource, attributes(resource))]
pub fn derive_custom_resource(input: proc_macro::TokenStream) -> proc_macro::TokenStream {
    let input = syn::parse_macro_input!(input as syn::DeriveInput);
    expand::expand(&input)
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}

//! Objects of any resource, named at run time: [`DynamicObject`] (client-go's
//! `unstructured.Unstructured` and dynamic client).
//!
//! Every other object type of this crate names its resource at compile time (k8s-openapi's
//! `Resource` constants, a [`resource_view!`](crate::resource_view)). A [`DynamicObject`]
//! does not: its [`Api`](crate::Api) is built from a [`ResourceRef`] known only at run time — a custom
//! resource found by discovery, a resource named on a command line — and from there it works
//! like any other `Api`, [`ListWatch`], reflector, informer and lister (`kctrl-informer` has a
//! `DynamicSharedInformerFactory` keyed by group/version/resource).
//!
//! How it fits the compile-time traits: `DynamicObject` implements k8s-openapi's `Resource`
//! and `ListableResource` with **empty** constants and the scope [`DynamicScope`]. Nothing
//! addresses a server through those constants: only [`Api::namespaced_dynamic`](crate::Api::namespaced_dynamic) and
//! [`Api::all_dynamic`](crate::Api::all_dynamic) build a usable `Api<DynamicObject>`, and one built the typed way
//! (`Api::<DynamicObject>::namespaced(..)`, which has no resource to address) fails every
//! call with [`Error::InvalidRequest`](crate::Error::InvalidRequest). Lists are decoded without k8s-openapi's
//! `apiVersion`/`kind` check (which would compare with the empty constants), and list items
//! get the `apiVersion` and `kind` of the resource, since the API server leaves them out of
//! the items of built-in lists.
//!
//! [`ListWatch`]: https://docs.rs/kctrl-informer
//!
//! ```no_run
//! # async fn demo(client: kctrl_client::Client) -> Result<(), kctrl_client::Error> {
//! use kctrl_client::{Api, DynamicObject, ListParams, PostParams, ResourceRef, Scope};
//! use serde_json::json;
//!
//! // A custom resource nobody wrote a Rust type for.
//! let crontabs = ResourceRef::new("stable.example.com", "v1", "crontabs", "CronTab", Scope::Namespaced);
//! let api = Api::<DynamicObject>::namespaced_dynamic(client, "default", &crontabs);
//!
//! let mut tab = DynamicObject::new("nightly", &crontabs);
//! tab.data.insert("spec".into(), json!({"cronSpec": "0 3 * * *", "image": "backup:1"}));
//! api.create(&PostParams::default(), &tab).await?;
//!
//! for got in api.list(&ListParams::default()).await?.items {
//!     assert_eq!(got.kind, "CronTab");
//!     println!("{:?}: {}", got.metadata.name, got.data["spec"]["cronSpec"]);
//! }
//! # Ok(()) }
//! ```
//!
//! kctrl-informer's `DynamicSharedInformerFactory` has the same, runnable against the fake
//! API server, with an informer.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ListMeta, ObjectMeta};
use k8s_openapi::{ListableResource, Metadata, Resource, ResourceScope};
use serde::{Deserialize, Serialize};

use crate::resource::ResourceRef;

/// The scope of [`DynamicObject`]'s compile-time `Resource` impl: the real scope is the
/// [`Scope`](crate::Scope) of the [`ResourceRef`] its `Api` was built with.
#[derive(Debug)]
pub struct DynamicScope {}

impl ResourceScope for DynamicScope {}

/// An object of any resource: `apiVersion`, `kind`, typed `metadata` and every other field
/// as JSON (client-go's `unstructured.Unstructured`).
///
/// Address it with [`Api::namespaced_dynamic`](crate::Api::namespaced_dynamic)(crate::Api::namespaced_dynamic) or
/// [`Api::all_dynamic`](crate::Api::all_dynamic); see the [module docs](self).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DynamicObject {
    /// `apiVersion`, e.g. `stable.example.com/v1`.
    #[serde(rename = "apiVersion", default)]
    pub api_version: String,
    /// `kind`, e.g. `CronTab`.
    #[serde(default)]
    pub kind: String,
    /// The object's metadata.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// Every other top-level field (`spec`, `status`, `data`, ...).
    #[serde(flatten)]
    pub data: serde_json::Map<String, serde_json::Value>,
}

impl DynamicObject {
    /// An empty object of `resource` called `name` (no namespace: the `Api`'s is used on
    /// create).
    pub fn new(name: impl Into<String>, resource: &ResourceRef) -> Self {
        Self {
            api_version: resource.api_version(),
            kind: resource.kind.to_string(),
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..ObjectMeta::default()
            },
            data: serde_json::Map::new(),
        }
    }

    /// Fills an empty `apiVersion` and `kind` from `resource` (list items arrive without).
    pub(crate) fn fill_type(&mut self, resource: &ResourceRef) {
        if self.api_version.is_empty() {
            self.api_version = resource.api_version();
        }
        if self.kind.is_empty() {
            self.kind = resource.kind.to_string();
        }
    }
}

/// Empty constants: a `DynamicObject`'s resource is the `Api`'s run-time [`ResourceRef`].
impl Resource for DynamicObject {
    const API_VERSION: &'static str = "";
    const GROUP: &'static str = "";
    const KIND: &'static str = "";
    const VERSION: &'static str = "";
    const URL_PATH_SEGMENT: &'static str = "";
    type Scope = DynamicScope;
}

impl ListableResource for DynamicObject {
    const LIST_KIND: &'static str = "";
}

impl Metadata for DynamicObject {
    type Ty = ObjectMeta;

    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// A list as the server sends it, without the type check of k8s-openapi's `List`.
#[derive(Deserialize)]
pub(crate) struct UncheckedList<K> {
    #[serde(default)]
    pub(crate) metadata: ListMeta,
    #[serde(default = "Vec::new")]
    pub(crate) items: Vec<K>,
}

/// Sets the type of list items that arrived without one; a no-op for other types.
pub(crate) fn fill_list_types<K: 'static>(items: &mut [K], resource: &ResourceRef) {
    for item in items {
        if let Some(obj) = (item as &mut dyn std::any::Any).downcast_mut::<DynamicObject>() {
            obj.fill_type(resource);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Scope;

    #[test]
    fn round_trips_every_field() {
        let json = serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a", "namespace": "ns", "resourceVersion": "7"},
            "data": {"k": "v"}, "immutable": true
        });
        let obj: DynamicObject = serde_json::from_value(json.clone()).unwrap();
        assert_eq!(obj.metadata.resource_version.as_deref(), Some("7"));
        assert_eq!(obj.data["data"]["k"], "v");
        assert_eq!(obj.data.len(), 2);
        assert_eq!(serde_json::to_value(&obj).unwrap(), json);
    }

    #[test]
    fn list_items_get_the_resource_type() {
        let r = ResourceRef::new("", "v1", "configmaps", "ConfigMap", Scope::Namespaced);
        let body = r#"{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":"9"},
            "items":[{"metadata":{"name":"a"}},{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"b"}}]}"#;
        let mut list: UncheckedList<DynamicObject> = serde_json::from_str(body).unwrap();
        fill_list_types(&mut list.items, &r);
        assert_eq!(list.metadata.resource_version.as_deref(), Some("9"));
        assert!(
            list.items
                .iter()
                .all(|o| o.api_version == "v1" && o.kind == "ConfigMap")
        );
    }
}

//! Reading less than whole objects: metadata-only reads and typed views.
//!
//! Two ways to keep a client (and an informer cache) from paying for fields nobody reads:
//!
//! * [`PartialObjectMetadata<K>`]: the API server sends only `metadata` (client-go's metadata
//!   client and `metadatainformer`). Any resource works, and the bytes never cross the wire.
//! * A **view**: a struct of your own holding only the fields you read, declared the view of a
//!   resource with [`resource_view!`](crate::resource_view). The server sends whole objects;
//!   the decoder skips every field the struct does not name while it parses, so skipped fields
//!   cost neither allocations nor memory.
//!
//! Both are read-only by construction: they do not implement `Serialize`, so the writes of
//! [`Api`](crate::Api) that send a whole object (`create`, `update`, `update_status`) do not
//! compile for them and cannot erase the fields they leave out. Patches and deletes work.
//!
//! ```
//! use k8s_openapi::api::core::v1::Pod;
//! use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
//! use serde::Deserialize;
//!
//! /// A Pod as a controller that only follows phases reads it.
//! #[derive(Clone, Debug, Deserialize)]
//! struct PodPhase {
//!     #[serde(deserialize_with = "kctrl_client::metadata_without_managed_fields")]
//!     metadata: ObjectMeta,
//!     #[serde(default)]
//!     status: Option<PodPhaseStatus>,
//! }
//!
//! #[derive(Clone, Debug, Deserialize)]
//! struct PodPhaseStatus {
//!     phase: Option<String>,
//! }
//!
//! kctrl_client::resource_view!(PodPhase => Pod);
//!
//! // The view decodes from a Pod's JSON and is addressed like a Pod.
//! let json = r#"{"apiVersion":"v1","kind":"Pod",
//!     "metadata":{"name":"web-1","namespace":"prod","managedFields":[{"manager":"kubectl"}]},
//!     "spec":{"containers":[{"name":"c","image":"nginx"}]},
//!     "status":{"phase":"Running","podIP":"10.0.0.7"}}"#;
//! let pod: PodPhase = serde_json::from_str(json).unwrap();
//! assert_eq!(pod.metadata.name.as_deref(), Some("web-1"));
//! assert!(pod.metadata.managed_fields.is_none());
//! assert_eq!(pod.status.unwrap().phase.as_deref(), Some("Running"));
//! assert_eq!(kctrl_client::ResourceRef::of::<PodPhase>().plural, "pods");
//! ```
//!
//! A view must name a resource; anything else does not compile:
//!
//! ```compile_fail
//! # use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
//! #[derive(serde::Deserialize)]
//! struct Orphan { metadata: ObjectMeta }
//! struct NotAResource;
//! kctrl_client::resource_view!(Orphan => NotAResource);
//! ```

use std::fmt;
use std::marker::PhantomData;

use k8s_openapi::{ListableResource, Metadata, Resource};
use serde::de::DeserializeSeed;
use serde::{Deserialize, Deserializer};

use crate::object_meta::CompactObjectMeta;
use crate::request::{Representation, WireFormat};

/// The `apiVersion` of `PartialObjectMetadata` and `PartialObjectMetadataList`.
const META_API_VERSION: &str = "meta.k8s.io/v1";
const PARTIAL_KIND: &str = "PartialObjectMetadata";
const PARTIAL_LIST_KIND: &str = "PartialObjectMetadataList";

/// Only the metadata of an object of resource `K` (`meta.k8s.io/v1` `PartialObjectMetadata`).
///
/// An [`Api<PartialObjectMetadata<K>>`](crate::Api) addresses `K`'s URLs but asks the server
/// for metadata alone, the way client-go's metadata client does
/// (`Accept: application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1`, and
/// `…as=PartialObjectMetadataList…` for lists). Everything in `metadata` is kept, including
/// `managedFields`, in a [`CompactObjectMeta`]: built for caches of many objects (a few hundred
/// bytes per object plus what it does not share with others), read through methods, and
/// [`to_object_meta`](CompactObjectMeta::to_object_meta) gives k8s-openapi's `ObjectMeta`.
///
/// ```no_run
/// # async fn demo(client: kctrl_client::Client) -> Result<(), kctrl_client::Error> {
/// use k8s_openapi::api::apps::v1::Deployment;
/// use kctrl_client::{Api, ListParams, PartialObjectMetadata};
///
/// use kctrl_client::ObjectMetaAccess;
///
/// let api = Api::<PartialObjectMetadata<Deployment>>::namespaced(client, "prod");
/// for d in api.list(&ListParams::default()).await?.items {
///     println!("{:?} at {:?}", d.metadata.name(), d.metadata.resource_version());
/// }
/// # Ok(()) }
/// ```
pub struct PartialObjectMetadata<K> {
    /// The object's metadata.
    pub metadata: CompactObjectMeta,
    _kind: PhantomData<fn() -> K>,
}

impl<K> PartialObjectMetadata<K> {
    /// Metadata of an object of resource `K`.
    pub fn new(metadata: CompactObjectMeta) -> Self {
        Self {
            metadata,
            _kind: PhantomData,
        }
    }
}

impl<K> Default for PartialObjectMetadata<K> {
    fn default() -> Self {
        Self::new(CompactObjectMeta::default())
    }
}

impl<K> Clone for PartialObjectMetadata<K> {
    fn clone(&self) -> Self {
        Self::new(self.metadata.clone())
    }
}

impl<K> PartialEq for PartialObjectMetadata<K> {
    fn eq(&self, other: &Self) -> bool {
        self.metadata == other.metadata
    }
}

impl<K: Resource> fmt::Debug for PartialObjectMetadata<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PartialObjectMetadata")
            .field("of", &K::KIND)
            .field("metadata", &self.metadata)
            .finish()
    }
}

/// The URL fields come from `K` (where to send the request); `API_VERSION`, `KIND` and
/// `LIST_KIND` are what the server answers with, which is what decoding checks.
impl<K: Resource> Resource for PartialObjectMetadata<K> {
    const API_VERSION: &'static str = META_API_VERSION;
    const GROUP: &'static str = K::GROUP;
    const KIND: &'static str = PARTIAL_KIND;
    const VERSION: &'static str = K::VERSION;
    const URL_PATH_SEGMENT: &'static str = K::URL_PATH_SEGMENT;
    type Scope = K::Scope;
}

impl<K: ListableResource> ListableResource for PartialObjectMetadata<K> {
    const LIST_KIND: &'static str = PARTIAL_LIST_KIND;
}

impl<K: Resource> Metadata for PartialObjectMetadata<K> {
    type Ty = CompactObjectMeta;

    fn metadata(&self) -> &CompactObjectMeta {
        &self.metadata
    }

    fn metadata_mut(&mut self) -> &mut CompactObjectMeta {
        &mut self.metadata
    }
}

impl<'de, K> Deserialize<'de> for PartialObjectMetadata<K> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        // `apiVersion` and `kind` are not checked: a server that ignores the `as=` request
        // answers with the full object, whose metadata is just as good.
        #[derive(Deserialize)]
        struct Wire {
            #[serde(default)]
            metadata: CompactObjectMeta,
        }
        crate::watch::from_object::<_, Wire>(deserializer).map(|w| Self::new(w.metadata))
    }
}

/// How an [`Api`](crate::Api) over `K` asks for its objects.
pub(crate) fn representation_of<K: Resource>() -> Representation {
    if K::API_VERSION == META_API_VERSION && K::KIND == PARTIAL_KIND {
        Representation::PartialObjectMetadata
    } else {
        Representation::Full
    }
}

/// The `Accept` header value that asks for `representation` in `wire` format in answer to
/// `verb`. Protobuf is asked for whole objects only; JSON stays acceptable.
pub(crate) fn accept_header(
    representation: Representation,
    wire: WireFormat,
    verb: &str,
) -> &'static str {
    match (representation, verb) {
        (Representation::Full, _) if wire == WireFormat::Protobuf => {
            "application/vnd.kubernetes.protobuf, application/json"
        }
        (Representation::Full, _) => "application/json",
        (Representation::PartialObjectMetadata, "list") => {
            "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1, application/json"
        }
        (Representation::PartialObjectMetadata, _) => {
            "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1, application/json"
        }
    }
}

/// Decodes an object's metadata while skipping `managedFields`, for a view's `metadata` field
/// (an `ObjectMeta` or a [`CompactObjectMeta`]):
/// `#[serde(deserialize_with = "kctrl_client::metadata_without_managed_fields")]`.
///
/// Server-side apply's field sets are usually the largest part of an object's metadata and
/// no controller reads them from a cache; skipped here, they are parsed past without being
/// allocated (nor checked: a malformed entry does not make the object undecodable). Every
/// other field of the metadata is kept.
pub fn metadata_without_managed_fields<'de, D, M>(deserializer: D) -> Result<M, D::Error>
where
    D: Deserializer<'de>,
    M: Deserialize<'de>,
{
    // The same skipping as `Api::without_managed_fields`, applied to this one value.
    crate::managed_fields::TrimSeed {
        inner: PhantomData::<M>,
        level: crate::managed_fields::Level::Metadata,
    }
    .deserialize(deserializer)
}

/// Declares a struct of yours the read-only view of a Kubernetes resource.
///
/// `resource_view!(View => Resource)` makes `View` address `Resource`'s URLs (same group,
/// version, plural, kind and scope), so `Api<View>`, `ListWatch<View>` and the informers and
/// listers of `kctrl-informer` work with it exactly as with the full type. `View` needs a field
/// `metadata: ObjectMeta` and `serde::Deserialize`; every field it does not declare is skipped
/// while decoding. `Resource` must be a listable k8s-openapi resource type (or another view),
/// or the macro does not compile. kctrl-informer's crate documentation shows a view cached
/// by an informer, end to end.
///
/// `resource_view!(View => Resource, metadata: CompactObjectMeta)` declares a view whose
/// `metadata` field is a [`CompactObjectMeta`](crate::CompactObjectMeta) instead: the
/// layout for a cache of many objects (kctrl-controller-ref's `PodView` uses it).
#[macro_export]
macro_rules! resource_view {
    ($view:ty => $resource:ty) => {
        $crate::resource_view!(
            $view => $resource,
            metadata: $crate::__private::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta
        );
    };
    ($view:ty => $resource:ty, metadata: $meta:ty) => {
        impl $crate::__private::k8s_openapi::Resource for $view {
            const API_VERSION: &'static str =
                <$resource as $crate::__private::k8s_openapi::Resource>::API_VERSION;
            const GROUP: &'static str =
                <$resource as $crate::__private::k8s_openapi::Resource>::GROUP;
            const KIND: &'static str =
                <$resource as $crate::__private::k8s_openapi::Resource>::KIND;
            const VERSION: &'static str =
                <$resource as $crate::__private::k8s_openapi::Resource>::VERSION;
            const URL_PATH_SEGMENT: &'static str =
                <$resource as $crate::__private::k8s_openapi::Resource>::URL_PATH_SEGMENT;
            type Scope = <$resource as $crate::__private::k8s_openapi::Resource>::Scope;
        }

        impl $crate::__private::k8s_openapi::ListableResource for $view {
            const LIST_KIND: &'static str =
                <$resource as $crate::__private::k8s_openapi::ListableResource>::LIST_KIND;
        }

        impl $crate::__private::k8s_openapi::Metadata for $view {
            type Ty = $meta;

            fn metadata(&self) -> &Self::Ty {
                &self.metadata
            }

            fn metadata_mut(&mut self) -> &mut Self::Ty {
                &mut self.metadata
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ResourceRef;
    use k8s_openapi::List;
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::core::v1::{Node, Pod};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    #[test]
    fn partial_metadata_addresses_the_viewed_resource() {
        let r = ResourceRef::of::<PartialObjectMetadata<Deployment>>();
        assert_eq!((r.group.as_ref(), r.version.as_ref()), ("apps", "v1"));
        assert_eq!(r.plural, "deployments");
        assert!(r.is_namespaced());
        assert!(!ResourceRef::of::<PartialObjectMetadata<Node>>().is_namespaced());
        assert_eq!(
            representation_of::<PartialObjectMetadata<Pod>>(),
            Representation::PartialObjectMetadata
        );
        assert_eq!(representation_of::<Pod>(), Representation::Full);
    }

    #[test]
    fn partial_metadata_list_decodes_as_the_server_sends_it() {
        let body = r#"{"kind":"PartialObjectMetadataList","apiVersion":"meta.k8s.io/v1",
            "metadata":{"resourceVersion":"42"},
            "items":[{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1",
                      "metadata":{"name":"a","namespace":"ns","labels":{"app":"web"}}}]}"#;
        let list: List<PartialObjectMetadata<Pod>> = serde_json::from_str(body).unwrap();
        assert_eq!(list.metadata.resource_version.as_deref(), Some("42"));
        assert_eq!(
            list.items[0].metadata.to_object_meta().name.as_deref(),
            Some("a")
        );
        assert_eq!(list.items[0].metadata.labels().get("app"), Some("web"));
        // An array is not an object, even one holding metadata.
        assert!(serde_json::from_str::<PartialObjectMetadata<Pod>>(r#"[{"name":"a"}]"#).is_err());
        // A PodList is not a PartialObjectMetadataList: the server ignored the request.
        let wrong = r#"{"kind":"PodList","apiVersion":"v1","metadata":{},"items":[]}"#;
        assert!(serde_json::from_str::<List<PartialObjectMetadata<Pod>>>(wrong).is_err());
    }

    #[test]
    fn accept_headers_follow_the_verb() {
        assert_eq!(
            accept_header(Representation::Full, WireFormat::Json, "list"),
            "application/json"
        );
        assert_eq!(
            accept_header(Representation::Full, WireFormat::Protobuf, "watch"),
            "application/vnd.kubernetes.protobuf, application/json"
        );
        assert!(
            accept_header(
                Representation::PartialObjectMetadata,
                WireFormat::Json,
                "list"
            )
            .starts_with("application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1")
        );
        assert!(
            accept_header(
                Representation::PartialObjectMetadata,
                WireFormat::Json,
                "watch"
            )
            .starts_with("application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1")
        );
    }

    #[test]
    fn without_managed_fields_keeps_every_other_field() {
        #[derive(Deserialize)]
        struct V {
            #[serde(deserialize_with = "metadata_without_managed_fields")]
            metadata: ObjectMeta,
        }
        let meta = serde_json::json!({
            "annotations": {"a": "1"},
            "creationTimestamp": "2026-01-02T03:04:05Z",
            "deletionGracePeriodSeconds": 30,
            "deletionTimestamp": "2026-01-02T03:05:05Z",
            "finalizers": ["f"],
            "generateName": "web-",
            "generation": 3,
            "labels": {"app": "web"},
            "managedFields": [{"manager": "kubectl", "operation": "Apply",
                               "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {}}}],
            "name": "web-1",
            "namespace": "prod",
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web",
                                 "uid": "u-rs", "controller": true}],
            "resourceVersion": "17",
            "selfLink": "/api/v1/namespaces/prod/pods/web-1",
            "uid": "u-1",
        });
        let v: V = serde_json::from_value(serde_json::json!({"metadata": meta})).unwrap();
        // Everything but managedFields survives: compare with the full decoder's result.
        let mut full: ObjectMeta = serde_json::from_value(meta).unwrap();
        assert!(full.managed_fields.take().is_some());
        assert_eq!(v.metadata, full);
    }
}

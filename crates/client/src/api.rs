//! Typed verbs over any k8s-openapi resource: [`Client`] and [`Api`].

use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;

use bytes::Bytes;
use futures::{Stream, StreamExt};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Status};
use k8s_openapi::apimachinery::pkg::version::Info;
use k8s_openapi::{List, ListableResource, Metadata, Resource};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::backend::Backend;
use crate::dynamic::{DynamicObject, UncheckedList, fill_list_types};
use crate::error::Error;
use crate::managed_fields::{self, Level};
use crate::metadata::PartialObjectMetadata;
use crate::object_meta::ObjectMetaAccess;
use crate::protobuf;
use crate::request::{
    ApiRequest, DeleteParams, ListParams, Operation, Patch, PatchParams, PostParams,
    Representation, WatchParams, WireFormat,
};
use crate::resource::{ResourceRef, Scope};
use crate::resource_version;
use crate::sharding::ShardedList;
use crate::watch::WatchEvent;

/// A handle to one API server (or fake). Cheap to clone; clones share the backend, its
/// connection pool and its rate limiter.
#[derive(Clone)]
pub struct Client {
    backend: Arc<dyn Backend>,
    default_namespace: Arc<str>,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("default_namespace", &self.default_namespace)
            .finish_non_exhaustive()
    }
}

impl Client {
    /// A client over any backend, e.g. an in-memory fake.
    pub fn new(backend: impl Backend, default_namespace: impl Into<String>) -> Self {
        Self::from_arc(Arc::new(backend), default_namespace)
    }

    /// A client over a shared backend.
    pub fn from_arc(backend: Arc<dyn Backend>, default_namespace: impl Into<String>) -> Self {
        Self {
            backend,
            default_namespace: Arc::from(default_namespace.into()),
        }
    }

    /// The namespace used by [`Api::default_namespaced`].
    pub fn default_namespace(&self) -> &str {
        &self.default_namespace
    }

    /// The backend requests go to.
    pub fn backend(&self) -> &Arc<dyn Backend> {
        &self.backend
    }

    /// The server's version (`GET /version`).
    pub async fn server_version(&self) -> Result<Info, Error> {
        self.backend.server_version().await
    }

    /// Whether the server serves `resource` (its group/version lists the plural name).
    pub async fn is_served(&self, resource: &ResourceRef) -> Result<bool, Error> {
        match self.backend.api_resources(&resource.api_version()).await {
            Ok(list) => Ok(list.resources.iter().any(|r| r.name == resource.plural)),
            Err(e) if e.is_not_found() => Ok(false),
            Err(e) => Err(e),
        }
    }
}

/// What a delete answered: the object (still present, e.g. waiting on finalizers or graceful
/// termination) or a success Status (gone at once).
#[derive(Clone, Debug, PartialEq)]
#[allow(
    clippy::large_enum_variant,
    reason = "K is usually as large as Status; boxing would only add an allocation"
)]
pub enum DeleteOutcome<K> {
    /// The object still exists, marked for deletion.
    Pending(K),
    /// The object is gone.
    Deleted(Status),
}

/// Typed access to one resource, in one namespace or across all.
///
/// ```no_run
/// # async fn demo(client: kctrl_client::Client) -> Result<(), kctrl_client::Error> {
/// use k8s_openapi::api::apps::v1::Deployment;
/// use kctrl_client::{Api, ListParams};
///
/// let deployments: Api<Deployment> = Api::namespaced(client, "default");
/// let list = deployments.list(&ListParams::default()).await?;
/// for d in &list.items {
///     println!("{}", d.metadata.name.as_deref().unwrap_or_default());
/// }
/// # Ok(()) }
/// ```
pub struct Api<K> {
    client: Client,
    namespace: Option<String>,
    resource: ResourceRef,
    representation: Representation,
    /// Skip `metadata.managedFields` when decoding responses and watch events.
    trim_managed_fields: bool,
    /// Ask for protobuf on reads and decode it with this (see [`Api::protobuf`]).
    protobuf: Option<protobuf::Decoder<K>>,
    /// Send created and updated objects in protobuf, encoded with this (see
    /// [`Api::protobuf_bodies`]).
    protobuf_bodies: Option<protobuf::Encoder<K>>,
    /// The resource was named at run time ([`DynamicObject`]): lists are decoded without
    /// k8s-openapi's type check and their items get the resource's type.
    dynamic: bool,
    _kind: PhantomData<fn() -> K>,
}

impl<K> Clone for Api<K> {
    fn clone(&self) -> Self {
        Self {
            client: self.client.clone(),
            namespace: self.namespace.clone(),
            resource: self.resource.clone(),
            representation: self.representation,
            trim_managed_fields: self.trim_managed_fields,
            protobuf: self.protobuf,
            protobuf_bodies: self.protobuf_bodies,
            dynamic: self.dynamic,
            _kind: PhantomData,
        }
    }
}

impl<K> fmt::Debug for Api<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Api")
            .field("resource", &self.resource.qualified_name())
            .field("namespace", &self.namespace)
            .finish()
    }
}

impl<K> Api<K>
where
    K: Resource + Metadata<Ty: ObjectMetaAccess> + DeserializeOwned + Send + 'static,
    K::Scope: 'static,
{
    /// Objects of a namespaced resource in `namespace`.
    pub fn namespaced(client: Client, namespace: impl Into<String>) -> Self {
        Self::with_namespace(client, Some(namespace.into()))
    }

    /// Objects in the client's default namespace.
    pub fn default_namespaced(client: Client) -> Self {
        let ns = client.default_namespace().to_owned();
        Self::with_namespace(client, Some(ns))
    }

    /// All namespaces for a namespaced resource, or the cluster for a cluster-scoped one.
    /// Calls naming one object then take the namespace from the object (create, update)
    /// or fail with [`Error::InvalidRequest`] (get, patch, delete of a namespaced resource).
    pub fn all(client: Client) -> Self {
        Self::with_namespace(client, None)
    }

    fn with_namespace(client: Client, namespace: Option<String>) -> Self {
        let resource = ResourceRef::of::<K>();
        let namespace = namespace.filter(|_| resource.scope == Scope::Namespaced);
        Self {
            client,
            namespace,
            resource,
            representation: crate::metadata::representation_of::<K>(),
            trim_managed_fields: false,
            protobuf: None,
            protobuf_bodies: None,
            dynamic: false,
            _kind: PhantomData,
        }
    }

    /// Fails a call on a handle without a resource to address: an `Api<DynamicObject>` built
    /// the typed way instead of with [`Api::namespaced_dynamic`] / [`Api::all_dynamic`].
    fn check_addressable(&self) -> Result<(), Error> {
        if self.resource.plural.is_empty() {
            return Err(Error::InvalidRequest(format!(
                "{} names no resource: build an Api<DynamicObject> with Api::namespaced_dynamic or Api::all_dynamic",
                std::any::type_name::<K>()
            )));
        }
        Ok(())
    }

    /// Decodes every object this handle receives (from get, list, watch and the answers to
    /// writes) without `metadata.managedFields`: the field is skipped while parsing, so
    /// neither the time to build it nor the memory to hold it is spent. This is what
    /// kube-controller-manager does for every informer (with a transform after decoding);
    /// a controller that never reads managedFields should do the same.
    ///
    /// Writing such an object back with [`update`](Self::update) keeps the server's
    /// managedFields as they were: the server reads an absent list as unchanged.
    ///
    /// ```no_run
    /// # async fn demo(client: kctrl_client::Client) -> Result<(), kctrl_client::Error> {
    /// use k8s_openapi::api::apps::v1::ReplicaSet;
    /// use kctrl_client::Api;
    ///
    /// let rs = Api::<ReplicaSet>::namespaced(client, "prod")
    ///     .without_managed_fields()
    ///     .get("web-5d4f")
    ///     .await?;
    /// assert!(rs.metadata.managed_fields.is_none());
    /// # Ok(()) }
    /// ```
    pub fn without_managed_fields(mut self) -> Self {
        self.trim_managed_fields = true;
        self
    }

    /// Asks the server for protobuf on reads (get, list, watch) and for the objects writes
    /// answer with (create, update, update_status, patch), and decodes them with `K`'s
    /// [`FromProtobuf`](protobuf::FromProtobuf), as kube-controller-manager talks protobuf to
    /// the API server. For views of built-in resources, skipping what the view does not read
    /// costs almost nothing in protobuf but a scan of every byte in JSON; for whole
    /// Deployments and ReplicaSets ([`protobuf::objects`]), decoding protobuf costs a
    /// fraction of decoding JSON. A JSON answer (a custom resource, a fake) is decoded from
    /// JSON as before. Request bodies stay JSON.
    pub fn protobuf(self) -> Self
    where
        K: protobuf::FromProtobuf,
    {
        self.with_protobuf_decoder(K::from_protobuf)
    }

    /// [`protobuf`](Self::protobuf) with the decoder given as a function, for code generic
    /// over `K` that was handed the decoder (an informer factory, say).
    pub fn with_protobuf_decoder(mut self, decoder: protobuf::Decoder<K>) -> Self {
        self.protobuf = Some(decoder);
        self
    }

    /// Sends the objects of creates and updates (of the object or its status) as protobuf,
    /// encoded with `K`'s [`ToProtobuf`](protobuf::ToProtobuf), as kube-controller-manager
    /// sends its writes: encoding protobuf costs a fraction of serializing JSON. An object the
    /// encoder cannot write (one carrying `managedFields`) goes as JSON. Patches and delete
    /// options stay JSON. Only for built-in resources, which the API server accepts in
    /// protobuf.
    pub fn protobuf_bodies(mut self) -> Self
    where
        K: protobuf::ToProtobuf,
    {
        self.protobuf_bodies = Some(K::to_protobuf);
        self
    }

    /// Whether reads ask for protobuf ([`protobuf`](Self::protobuf)).
    pub fn asks_for_protobuf(&self) -> bool {
        self.protobuf.is_some()
    }

    /// Whether [`without_managed_fields`](Self::without_managed_fields) is in effect.
    pub fn skips_managed_fields(&self) -> bool {
        self.trim_managed_fields
    }

    /// The resource this handle addresses.
    pub fn resource(&self) -> &ResourceRef {
        &self.resource
    }

    /// The namespace, or `None` for all namespaces / cluster scope.
    pub fn namespace(&self) -> Option<&str> {
        self.namespace.as_deref()
    }

    /// The client behind this handle.
    pub fn client(&self) -> &Client {
        &self.client
    }

    fn request(
        &self,
        namespace: Option<String>,
        subresource: Option<&str>,
        operation: Operation,
    ) -> ApiRequest {
        let read = matches!(
            operation,
            Operation::Get { .. } | Operation::List(_) | Operation::Watch(_)
        );
        let mut req = ApiRequest::new(
            self.resource.clone(),
            namespace,
            subresource.map(str::to_owned),
            operation,
        );
        req.representation = self.representation;
        req.drop_managed_fields = self.trim_managed_fields;
        if read && self.protobuf.is_some() {
            req.wire = WireFormat::Protobuf;
        }
        req
    }

    /// The namespace for a call naming one object.
    fn namespace_for(&self, verb: &str, name: &str) -> Result<Option<String>, Error> {
        match (&self.namespace, self.resource.scope) {
            (_, Scope::Cluster) => Ok(None),
            (Some(ns), Scope::Namespaced) => Ok(Some(ns.clone())),
            (None, Scope::Namespaced) => Err(Error::InvalidRequest(format!(
                "{verb} {} {name:?}: a namespace is required (this Api spans all namespaces)",
                self.resource.qualified_name()
            ))),
        }
    }

    /// The namespace for a call carrying an object: the handle's, else the object's.
    fn namespace_of_object(&self, verb: &str, obj: &K) -> Result<Option<String>, Error> {
        if self.resource.scope == Scope::Cluster {
            return Ok(None);
        }
        let from_obj = obj.metadata().namespace();
        match (&self.namespace, from_obj) {
            (Some(ns), Some(obj_ns)) if !obj_ns.is_empty() && obj_ns != ns => {
                Err(Error::InvalidRequest(format!(
                    "{verb} {}: the object's namespace {obj_ns:?} differs from the request's {ns:?}",
                    self.resource.qualified_name()
                )))
            }
            (Some(ns), _) => Ok(Some(ns.clone())),
            (None, Some(obj_ns)) if !obj_ns.is_empty() => Ok(Some(obj_ns.to_owned())),
            (None, _) => Err(Error::InvalidRequest(format!(
                "{verb} {}: the object has no namespace and this Api spans all namespaces",
                self.resource.qualified_name()
            ))),
        }
    }

    fn name_of(&self, verb: &str, obj: &K) -> Result<String, Error> {
        match obj.metadata().name() {
            Some(n) if !n.is_empty() => Ok(n.to_owned()),
            _ => Err(Error::InvalidRequest(format!(
                "{verb} {}: the object has no metadata.name",
                self.resource.qualified_name()
            ))),
        }
    }

    /// Sends a request whose answer is one object (`Level::Object`) or a list of them
    /// (`Level::List`), decoded whole or without managedFields as this handle is set.
    async fn send<T: DeserializeOwned>(&self, req: ApiRequest, level: Level) -> Result<T, Error> {
        self.send_with(req, |body| self.decode(body, level)).await
    }

    /// Sends a non-watch request and reads the answer with `decode`; a decode error names
    /// the request.
    async fn send_with<T>(
        &self,
        req: ApiRequest,
        decode: impl FnOnce(&[u8]) -> serde_json::Result<T>,
    ) -> Result<T, Error> {
        self.check_addressable()?;
        let what = Described::of(&req);
        let body = self.client.backend.call(req).await?;
        decode(&body).map_err(|source| Error::Decode {
            what: what.text(),
            source,
        })
    }

    /// Sends a write whose answer is the object written, asking for it in protobuf when this
    /// handle reads protobuf ([`protobuf`](Self::protobuf)), and decodes it as a read's.
    async fn write(&self, mut req: ApiRequest) -> Result<K, Error> {
        if self.protobuf.is_some() {
            req.wire = WireFormat::Protobuf;
        }
        self.read(req, Level::Object, protobuf::decode_object).await
    }

    /// Sends a read whose answer may be protobuf: decoded with `from_protobuf` and this
    /// handle's decoder when the server answered in protobuf, else as [`send`](Self::send).
    async fn read<T: DeserializeOwned>(
        &self,
        req: ApiRequest,
        level: Level,
        from_protobuf: fn(&Bytes, protobuf::Decoder<K>) -> Result<T, protobuf::ProtobufError>,
    ) -> Result<T, Error> {
        self.check_addressable()?;
        let what = Described::of(&req);
        let body = self.client.backend.call(req).await?;
        match self.protobuf {
            Some(decoder) if protobuf::is_protobuf(&body) => {
                from_protobuf(&body, decoder).map_err(|source| Error::DecodeProtobuf {
                    what: what.text(),
                    source,
                })
            }
            _ => self.decode(&body, level).map_err(|source| Error::Decode {
                what: what.text(),
                source,
            }),
        }
    }

    fn decode<T: DeserializeOwned>(&self, body: &[u8], level: Level) -> serde_json::Result<T> {
        if self.trim_managed_fields {
            managed_fields::from_slice(body, level)
        } else {
            with_json_deserializer!(body, |de| {
                let value = T::deserialize(&mut de)?;
                de.end()?;
                Ok(value)
            })
        }
    }

    /// Reads one object.
    pub async fn get(&self, name: &str) -> Result<K, Error> {
        let ns = self.namespace_for("get", name)?;
        self.read(
            self.request(
                ns,
                None,
                Operation::Get {
                    name: name.to_owned(),
                },
            ),
            Level::Object,
            protobuf::decode_object,
        )
        .await
    }

    /// Reads one object, mapping not-found to `None`.
    pub async fn get_opt(&self, name: &str) -> Result<Option<K>, Error> {
        match self.get(name).await {
            Ok(obj) => Ok(Some(obj)),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Patches an object: a merge, strategic merge or JSON patch, or a server-side apply
    /// ([`Patch::Apply`], for which [`apply`](Self::apply) is the typed way).
    ///
    /// Fails with [`Error::InvalidRequest`], before sending anything, when `params` do not
    /// fit `patch` (an apply without a field manager, [`force`](PatchParams::force) on
    /// another patch type) or an apply body is not an object naming its `apiVersion` and
    /// `kind`: the server would refuse all of these.
    pub async fn patch(&self, name: &str, params: &PatchParams, patch: &Patch) -> Result<K, Error> {
        self.patch_subresource(None, name, params, patch).await
    }

    /// Patches an object's status (the `status` subresource), as [`patch`](Self::patch).
    pub async fn patch_status(
        &self,
        name: &str,
        params: &PatchParams,
        patch: &Patch,
    ) -> Result<K, Error> {
        self.patch_subresource(Some("status"), name, params, patch)
            .await
    }

    async fn patch_subresource(
        &self,
        subresource: Option<&str>,
        name: &str,
        params: &PatchParams,
        patch: &Patch,
    ) -> Result<K, Error> {
        let ns = self.namespace_for("patch", name)?;
        let refuse = |why: String| {
            let sub = subresource.map(|s| format!("/{s}")).unwrap_or_default();
            Error::InvalidRequest(format!(
                "patch {}{sub} {name:?}: {why}",
                self.resource.qualified_name()
            ))
        };
        params.check(patch).map_err(refuse)?;
        patch.check_body().map_err(refuse)?;
        // A patch is always sent as JSON, also from a handle with `protobuf_bodies`.
        self.write(self.request(
            ns,
            subresource,
            Operation::Patch {
                name: name.to_owned(),
                patch: patch.clone(),
                params: params.clone(),
            },
        ))
        .await
    }

    /// Deletes an object.
    pub async fn delete(
        &self,
        name: &str,
        params: &DeleteParams,
    ) -> Result<DeleteOutcome<K>, Error> {
        let ns = self.namespace_for("delete", name)?;
        let req = self.request(
            ns,
            None,
            Operation::Delete {
                name: name.to_owned(),
                params: params.clone(),
            },
        );
        self.check_addressable()?;
        let what = Described::of(&req);
        let body = self.client.backend.call(req).await?;
        #[derive(serde::Deserialize)]
        struct Kind<'a> {
            #[serde(borrow, default)]
            kind: Option<&'a str>,
        }
        let decode = |source| Error::Decode {
            what: what.text(),
            source,
        };
        let kind: Kind<'_> = serde_json::from_slice(&body).map_err(decode)?;
        if kind.kind == Some("Status") && K::KIND != "Status" {
            Ok(DeleteOutcome::Deleted(
                serde_json::from_slice(&body).map_err(decode)?,
            ))
        } else {
            Ok(DeleteOutcome::Pending(
                self.decode(&body, Level::Object).map_err(decode)?,
            ))
        }
    }
}

/// Writes that send a whole object. Only types that serialize are writable: a view or
/// [`PartialObjectMetadata`](crate::PartialObjectMetadata), which hold part of an object,
/// cannot be sent back (it would erase the fields they leave out).
impl<K> Api<K>
where
    K: Resource + Metadata<Ty: ObjectMetaAccess> + Serialize + DeserializeOwned + Send + 'static,
    K::Scope: 'static,
{
    fn encode(&self, verb: &str, obj: &K) -> Result<Bytes, Error> {
        if let Some(message) = self.protobuf_bodies.and_then(|encode| encode(obj)) {
            return Ok(protobuf::enveloped(K::API_VERSION, K::KIND, &message));
        }
        serde_json::to_vec(obj)
            .map(Bytes::from)
            .map_err(|source| Error::Decode {
                what: format!("{} for {verb}", self.resource.kind),
                source,
            })
    }

    /// Server-side apply of `obj` by the field manager of `params`: the server merges the
    /// fields `obj` sets into the live object (creating it if it does not exist) and records
    /// the manager as the owner of exactly those fields (client-go's `Apply(ctx, cfg, opts)`).
    /// The name comes from `obj`, the namespace from this handle or else from `obj`.
    ///
    /// Build `obj` with **only the fields you own**. k8s-openapi's types leave unset
    /// (`None`) fields out when serialized, so a `ConfigMap` holding a name and the keys you
    /// manage claims just those. Fields a type marks required are always written, though:
    /// a typed `Deployment` whose spec is set (with Kubernetes 1.37's types, always) carries
    /// `spec.selector` and `spec.template`, empty if you left them so, and would claim them
    /// too. To own part of such an object (say, only the replicas), apply a JSON body with
    /// [`patch`](Self::patch) and [`Patch::Apply`], or a [`DynamicObject`]. Applying a whole object read from the server would claim every
    /// field it holds (and one carrying `metadata.managedFields` is refused by the server).
    ///
    /// A field you applied before and leave out now is removed, unless another manager owns
    /// it. When another manager owns a field you set to a different value, the server
    /// answers 409 Conflict ([`Error::is_conflict`]) naming it, e.g. `Apply failed with 1
    /// conflict: conflict with "other-manager": .spec.replicas`; [`PatchParams::force`]
    /// takes the field over instead.
    ///
    /// The body is always JSON (also from a [`protobuf_bodies`](Self::protobuf_bodies)
    /// handle). It carries `apiVersion` and `kind`: k8s-openapi's types write them; an empty
    /// one (a [`DynamicObject`] built without them) is filled in from this handle's resource.
    ///
    /// ```no_run
    /// # async fn demo(client: kctrl_client::Client) -> Result<(), kctrl_client::Error> {
    /// use k8s_openapi::api::apps::v1::Deployment;
    /// use k8s_openapi::api::core::v1::ConfigMap;
    /// use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    /// use kctrl_client::{Api, Patch, PatchParams};
    /// use serde_json::json;
    ///
    /// // A typed object with only the fields this controller owns.
    /// let settings = ConfigMap {
    ///     metadata: ObjectMeta { name: Some("settings".into()), ..Default::default() },
    ///     data: Some([("mode".to_owned(), "fast".to_owned())].into()),
    ///     ..Default::default()
    /// };
    /// let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), "prod");
    /// let applied = configmaps.apply(&PatchParams::apply("my-controller"), &settings).await?;
    /// let owners: Vec<_> = applied.metadata.managed_fields.iter().flatten()
    ///     .filter_map(|entry| entry.manager.as_deref())
    ///     .collect();
    /// assert!(owners.contains(&"my-controller"));
    ///
    /// // Part of a Deployment (its required selector and template left to their owner):
    /// // a JSON body, forced, as an autoscaler that must win would apply it.
    /// let scale = Patch::Apply(json!({
    ///     "apiVersion": "apps/v1", "kind": "Deployment",
    ///     "metadata": {"name": "web"},
    ///     "spec": {"replicas": 5},
    /// }));
    /// Api::<Deployment>::namespaced(client, "prod")
    ///     .patch("web", &PatchParams::apply("my-autoscaler").force(), &scale)
    ///     .await?;
    /// # Ok(()) }
    /// ```
    ///
    /// `kctrl-fake` answers applies too (with documented limits), so a reconciler that
    /// applies can be unit-tested without a cluster.
    pub async fn apply(&self, params: &PatchParams, obj: &K) -> Result<K, Error> {
        let (name, patch) = self.apply_patch("apply", obj)?;
        self.patch(&name, params, &patch).await
    }

    /// Server-side apply of `obj`'s status (the `status` subresource), as
    /// [`apply`](Self::apply): `obj` holds its name and the status fields the manager owns.
    /// The server ignores what the status subresource does not change (the spec, and for
    /// some kinds labels).
    pub async fn apply_status(&self, params: &PatchParams, obj: &K) -> Result<K, Error> {
        let (name, patch) = self.apply_patch("apply status", obj)?;
        self.patch_status(&name, params, &patch).await
    }

    /// The name and apply patch of `obj`, its empty `apiVersion` and `kind` filled in.
    fn apply_patch(&self, verb: &str, obj: &K) -> Result<(String, Patch), Error> {
        let name = self.name_of(verb, obj)?;
        let mut body = serde_json::to_value(obj).map_err(|source| Error::Decode {
            what: format!("{} for {verb}", self.resource.kind),
            source,
        })?;
        if let Some(fields) = body.as_object_mut() {
            for (field, value) in [
                ("apiVersion", self.resource.api_version()),
                ("kind", self.resource.kind.to_string()),
            ] {
                let slot = fields.entry(field).or_insert(serde_json::Value::Null);
                if slot.as_str().is_none_or(str::is_empty) {
                    *slot = value.into();
                }
            }
        }
        Ok((name, Patch::Apply(body)))
    }

    /// Creates an object.
    pub async fn create(&self, params: &PostParams, obj: &K) -> Result<K, Error> {
        self.write(self.create_request(params, obj)?).await
    }

    /// Creates an object, as [`create`](Self::create) does, but decodes only the metadata of
    /// the server's answer (name, namespace, UID, resourceVersion, ...; managedFields too
    /// unless the handle is [`without_managed_fields`](Self::without_managed_fields)): the
    /// rest, for a Pod its whole spec and status, is parsed past without being built. For a
    /// caller that needs no more than what identifies the object it created, such as a
    /// controller creating Pods from a template (kube-controller-manager's ReplicaSet
    /// controller reads the created Pod's name, for its log and event). The request body is
    /// the same; the answer is asked for in JSON even on a [`protobuf`](Self::protobuf)
    /// handle.
    ///
    /// ```
    /// # async fn demo(client: kctrl_client::Client) -> Result<(), kctrl_client::Error> {
    /// use k8s_openapi::api::core::v1::Pod;
    /// use kctrl_client::{Api, ObjectMetaAccess, PostParams};
    ///
    /// let pods = Api::<Pod>::namespaced(client, "prod").without_managed_fields();
    /// let mut pod = Pod::default();
    /// pod.metadata.generate_name = Some("web-".into());
    /// let created = pods.create_metadata(&PostParams::default(), &pod).await?;
    /// println!("created {:?}", created.metadata.name());
    /// # Ok(()) }
    /// ```
    pub async fn create_metadata(
        &self,
        params: &PostParams,
        obj: &K,
    ) -> Result<PartialObjectMetadata<K>, Error> {
        self.send(self.create_request(params, obj)?, Level::Object)
            .await
    }

    /// The request of a create of `obj`.
    fn create_request(&self, params: &PostParams, obj: &K) -> Result<ApiRequest, Error> {
        let ns = self.namespace_of_object("create", obj)?;
        let body = self.encode("create", obj)?;
        Ok(self.request(
            ns,
            None,
            Operation::Create {
                body,
                params: params.clone(),
            },
        ))
    }

    /// Replaces an object; the server rejects a stale `metadata.resourceVersion` with 409.
    pub async fn update(&self, params: &PostParams, obj: &K) -> Result<K, Error> {
        self.write(self.update_request(None, params, obj)?).await
    }

    /// Replaces an object's status (the `status` subresource).
    pub async fn update_status(&self, params: &PostParams, obj: &K) -> Result<K, Error> {
        self.write(self.update_request(Some("status"), params, obj)?)
            .await
    }

    /// Replaces an object's status, as [`update_status`](Self::update_status) does, but decodes
    /// only the metadata of the server's answer: for a caller that needs no more than the new
    /// `resourceVersion`, the rest of the answer (the whole spec, for a Deployment its pod
    /// template) is parsed past without being built. The request is the same.
    pub async fn update_status_metadata(
        &self,
        params: &PostParams,
        obj: &K,
    ) -> Result<ObjectMeta, Error> {
        /// An answer read for its metadata alone.
        #[derive(serde::Deserialize)]
        struct MetadataOf {
            #[serde(default)]
            metadata: ObjectMeta,
        }
        self.update_subresource::<MetadataOf>(Some("status"), params, obj)
            .await
            .map(|answer| answer.metadata)
    }

    /// Replaces an object's status, as [`update_status`](Self::update_status) does, and
    /// returns only the `metadata.resourceVersion` of the server's answer, read without
    /// decoding the rest of it (for a Deployment that is its pod template and its
    /// `managedFields`: about 2% of the Deployment controller's instructions when the
    /// answer was decoded). The request is the same.
    pub async fn update_status_version(
        &self,
        params: &PostParams,
        obj: &K,
    ) -> Result<String, Error> {
        use serde::de::Error as _;
        let req = self.update_request(Some("status"), params, obj)?;
        self.send_with(req, |body| {
            resource_version::read(body)?.ok_or_else(|| {
                serde_json::Error::custom("the answer has no metadata.resourceVersion")
            })
        })
        .await
    }

    async fn update_subresource<T: DeserializeOwned>(
        &self,
        subresource: Option<&str>,
        params: &PostParams,
        obj: &K,
    ) -> Result<T, Error> {
        let req = self.update_request(subresource, params, obj)?;
        self.send(req, Level::Object).await
    }

    /// The request of an update of `obj` (or of its `subresource`).
    fn update_request(
        &self,
        subresource: Option<&str>,
        params: &PostParams,
        obj: &K,
    ) -> Result<ApiRequest, Error> {
        let name = self.name_of("update", obj)?;
        let ns = self.namespace_of_object("update", obj)?;
        let body = self.encode("update", obj)?;
        Ok(self.request(
            ns,
            subresource,
            Operation::Update {
                name,
                body,
                params: params.clone(),
            },
        ))
    }
}

impl<K> Api<K>
where
    K: Resource
        + ListableResource
        + Metadata<Ty: ObjectMetaAccess>
        + DeserializeOwned
        + Send
        + 'static,
    K::Scope: 'static,
{
    /// Lists objects (one page when `params.limit` is set; see `metadata.continue`).
    pub async fn list(&self, params: &ListParams) -> Result<List<K>, Error> {
        Ok(self.list_inner(params, false).await?.list)
    }

    /// Lists objects as [`list`](Self::list) does, and returns beside the list its
    /// `metadata.shardInfo`, which says whether the server filtered it by
    /// [`ListParams::shard_selector`]: a kube-apiserver without the `ShardedListAndWatch`
    /// feature gate ignores the selector and returns every object, and no shardInfo.
    ///
    /// The shardInfo is read whatever Kubernetes release the k8s-openapi types were selected
    /// for (their `ListMeta` has the field from 1.36 on; with older types a JSON answer is
    /// read a second time for it, when a selector was sent).
    ///
    /// ```no_run
    /// # async fn demo(client: kctrl_client::Client) -> Result<(), Box<dyn std::error::Error>> {
    /// use k8s_openapi::api::core::v1::ConfigMap;
    /// use kctrl_client::{Api, ListParams, ShardSelector};
    ///
    /// let low: ShardSelector =
    ///     "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000')".parse()?;
    /// let params = ListParams { shard_selector: Some(low.clone()), ..Default::default() };
    /// let answer = Api::<ConfigMap>::all(client).list_sharded(&params).await?;
    /// let mine: Vec<ConfigMap> = if answer.server_filtered() {
    ///     answer.list.items
    /// } else {
    ///     // The server ignored the selector: keep our part ourselves.
    ///     answer.list.items.into_iter().filter(|cm| low.matches(&cm.metadata)).collect()
    /// };
    /// # let _ = mine; Ok(()) }
    /// ```
    pub async fn list_sharded(&self, params: &ListParams) -> Result<ShardedList<K>, Error> {
        self.list_inner(params, true).await
    }

    /// A list call; the shardInfo is looked for beyond the decoded `ListMeta` only when
    /// `want_shard_info` is set.
    async fn list_inner(
        &self,
        params: &ListParams,
        want_shard_info: bool,
    ) -> Result<ShardedList<K>, Error> {
        let req = self.request(
            self.namespace.clone(),
            None,
            Operation::List(params.clone()),
        );
        self.check_addressable()?;
        let what = Described::of(&req);
        let body = self.client.backend.call(req).await?;
        if let Some(decoder) = self.protobuf.filter(|_| protobuf::is_protobuf(&body)) {
            return protobuf::decode_sharded_list(&body, decoder).map_err(|source| {
                Error::DecodeProtobuf {
                    what: what.text(),
                    source,
                }
            });
        }
        let decode_error = |source| Error::Decode {
            what: what.text(),
            source,
        };
        let list = if self.dynamic {
            let mut list: UncheckedList<K> =
                self.decode(&body, Level::List).map_err(decode_error)?;
            fill_list_types(&mut list.items, &self.resource);
            List {
                items: list.items,
                metadata: list.metadata,
            }
        } else {
            self.decode(&body, Level::List).map_err(decode_error)?
        };
        let mut sharded = ShardedList::from_list(list);
        if cfg!(not(k8s_api_ge = "1.36"))
            && want_shard_info
            && sharded.shard_info.is_none()
            && params.shard_selector.is_some()
        {
            sharded.shard_info =
                crate::sharding::shard_info_from_json(&body).map_err(decode_error)?;
        }
        Ok(sharded)
    }

    /// Watches objects. The stream yields typed events until the server ends the watch;
    /// transport and decode failures are yielded as `Err` items.
    pub async fn watch(
        &self,
        params: &WatchParams,
    ) -> Result<impl Stream<Item = Result<WatchEvent<K>, Error>> + Send + 'static, Error> {
        self.check_addressable()?;
        let req = self.request(
            self.namespace.clone(),
            None,
            Operation::Watch(params.clone()),
        );
        let frames = self.client.backend.watch(req).await?;
        let trim = self.trim_managed_fields;
        let decoder = self.protobuf;
        Ok(frames.map(move |frame| {
            frame.and_then(|f| match decoder {
                // A JSON frame is an object; a protobuf one starts with the tag of its `type`.
                Some(decoder) if !matches!(f.first(), Some(b'{' | b'[')) => {
                    protobuf::decode_watch_event(f, decoder).map_err(|e| Error::DecodeProtobuf {
                        what: e.what,
                        source: e.source,
                    })
                }
                _ => WatchEvent::decode(&f, trim),
            })
        }))
    }
}

/// Server-side apply through a metadata-only handle.
impl<K> Api<PartialObjectMetadata<K>>
where
    K: Resource + 'static,
    K::Scope: 'static,
{
    /// Server-side apply of metadata alone (labels, annotations, finalizers, owner
    /// references) by the field manager of `params`, through a metadata-only handle: the
    /// body is `{"apiVersion": .., "kind": .., "metadata": metadata}` with `K`'s own
    /// apiVersion and kind (not `PartialObjectMetadata`'s), as the server requires; the name
    /// comes from `metadata`. The answer is the object's metadata, as every answer to this
    /// handle. Fields, ownership and conflicts work as in [`Api::apply`].
    ///
    /// ```no_run
    /// # async fn demo(client: kctrl_client::Client) -> Result<(), kctrl_client::Error> {
    /// use k8s_openapi::api::core::v1::ConfigMap;
    /// use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    /// use kctrl_client::{Api, PartialObjectMetadata, PatchParams};
    ///
    /// let api: Api<PartialObjectMetadata<ConfigMap>> = Api::namespaced(client, "prod");
    /// let labels = ObjectMeta {
    ///     name: Some("settings".into()),
    ///     labels: Some([("team".to_owned(), "web".to_owned())].into()),
    ///     ..Default::default()
    /// };
    /// let applied = api.apply_metadata(&PatchParams::apply("labeller"), &labels).await?;
    /// assert_eq!(applied.metadata.labels().get("team"), Some("web"));
    /// # Ok(()) }
    /// ```
    pub async fn apply_metadata(
        &self,
        params: &PatchParams,
        metadata: &ObjectMeta,
    ) -> Result<PartialObjectMetadata<K>, Error> {
        let name = match metadata.name.as_deref() {
            Some(n) if !n.is_empty() => n.to_owned(),
            _ => {
                return Err(Error::InvalidRequest(format!(
                    "apply metadata {}: the metadata has no name",
                    self.resource.qualified_name()
                )));
            }
        };
        let body = serde_json::json!({
            "apiVersion": K::API_VERSION,
            "kind": K::KIND,
            "metadata": metadata,
        });
        self.patch(&name, params, &Patch::Apply(body)).await
    }
}

/// Objects of a resource named at run time (client-go's dynamic client); see
/// [`DynamicObject`].
impl Api<DynamicObject> {
    /// Objects of `resource` in `namespace` (ignored for a cluster-scoped resource), as
    /// client-go's `dynamicClient.Resource(gvr).Namespace(ns)`.
    pub fn namespaced_dynamic(
        client: Client,
        namespace: impl Into<String>,
        resource: &ResourceRef,
    ) -> Self {
        Self::dynamic(client, Some(namespace.into()), resource)
    }

    /// Objects of `resource` in all namespaces, or at cluster scope (client-go's
    /// `dynamicClient.Resource(gvr)`).
    pub fn all_dynamic(client: Client, resource: &ResourceRef) -> Self {
        Self::dynamic(client, None, resource)
    }

    fn dynamic(client: Client, namespace: Option<String>, resource: &ResourceRef) -> Self {
        Self {
            client,
            namespace: namespace.filter(|_| resource.scope == Scope::Namespaced),
            resource: resource.clone(),
            representation: Representation::Full,
            trim_managed_fields: false,
            protobuf: None,
            protobuf_bodies: None,
            dynamic: true,
            _kind: PhantomData,
        }
    }
}

/// A short description of a request for error messages: `GET deployments.apps "web" in "default"`.
/// What a request was, kept for the message of a response that cannot be decoded; the text
/// is only written when that happens (formatting it for every request cost about 1% of the
/// Deployment controller's instructions).
struct Described {
    verb: &'static str,
    resource: ResourceRef,
    subresource: Option<String>,
    name: Option<String>,
    namespace: Option<String>,
}

impl Described {
    fn of(req: &ApiRequest) -> Self {
        Described {
            verb: req.verb(),
            resource: req.resource.clone(),
            subresource: req.subresource.clone(),
            name: req.name().map(str::to_owned),
            namespace: req.namespace.clone(),
        }
    }

    /// E.g. `UPDATE apps/replicasets/status "web-5d9c" in "default" response`.
    fn text(&self) -> String {
        let mut s = format!(
            "{} {}",
            self.verb.to_uppercase(),
            self.resource.qualified_name()
        );
        if let Some(sub) = &self.subresource {
            s.push('/');
            s.push_str(sub);
        }
        if let Some(name) = &self.name {
            s.push_str(&format!(" {name:?}"));
        }
        if let Some(ns) = &self.namespace {
            s.push_str(&format!(" in {ns:?}"));
        }
        s.push_str(" response");
        s
    }
}

//! An in-memory Kubernetes API server behind [`kctrl_client::Backend`], for controller tests.
//!
//! [`FakeApi`] is what client-go's fake clientset and `ObjectTracker` are to Go controller
//! authors: plug it into a [`Client`] and every [`Api<K>`](kctrl_client::Api), informer and
//! controller built on it runs unchanged, against objects held in memory.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use futures::StreamExt;
//! use k8s_openapi::api::apps::v1::Deployment;
//! use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
//! use kctrl_client::{Api, ListParams, PostParams, WatchEvent, WatchParams};
//! use kctrl_fake::{FakeApi, Reaction, errors};
//!
//! let fake = FakeApi::new();
//! let deployments: Api<Deployment> = Api::namespaced(fake.client(), "default");
//!
//! // Create: the fake assigns uid, creationTimestamp, resourceVersion and generation.
//! let web = Deployment {
//!     metadata: ObjectMeta { name: Some("web".into()), ..Default::default() },
//!     ..Default::default()
//! };
//! let created = deployments.create(&PostParams::default(), &web).await?;
//! assert_eq!(created.metadata.generation, Some(1));
//! assert!(created.metadata.uid.is_some());
//!
//! // List, then watch from the list's resourceVersion.
//! let list = deployments.list(&ListParams::default()).await?;
//! assert_eq!(list.items.len(), 1);
//! let mut events = deployments
//!     .watch(&WatchParams {
//!         resource_version: list.metadata.resource_version.clone(),
//!         ..Default::default()
//!     })
//!     .await?;
//! let mut changed = created.clone();
//! changed.metadata.labels = Some([("tier".to_owned(), "web".to_owned())].into());
//! deployments.update(&PostParams::default(), &changed).await?;
//! match events.next().await {
//!     Some(Ok(WatchEvent::Modified(d))) => assert!(d.metadata.labels.is_some()),
//!     other => panic!("unexpected {other:?}"),
//! }
//!
//! // Assert on what the code under test did.
//! let verbs: Vec<_> = fake.actions().iter().map(|a| a.verb()).collect();
//! assert_eq!(verbs, ["create", "list", "watch", "update"]);
//!
//! // Inject failures: every create of deployments now fails with a 500.
//! fake.prepend_reactor("create", "deployments", |_| {
//!     Reaction::Error(errors::internal_error("etcd is down"))
//! });
//! let err = deployments.create(&PostParams::default(), &web).await.unwrap_err();
//! assert_eq!(err.status().and_then(|s| s.code), Some(500));
//! # Ok(()) }
//! ```
//!
//! Server-side apply works as on a real API server, so a reconciler that applies can be
//! tested here, conflicts and ownership included:
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use k8s_openapi::api::core::v1::ConfigMap;
//! use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
//! use kctrl_client::{Api, PatchParams};
//! use kctrl_fake::FakeApi;
//!
//! let fake = FakeApi::new();
//! let configmaps: Api<ConfigMap> = Api::namespaced(fake.client(), "default");
//! // Only the fields a manager owns: the name and one key.
//! let settings = |mode: &str| ConfigMap {
//!     metadata: ObjectMeta { name: Some("settings".into()), ..Default::default() },
//!     data: Some([("mode".to_owned(), mode.to_owned())].into()),
//!     ..Default::default()
//! };
//!
//! // The first apply creates the object; its manager owns `.data.mode`.
//! configmaps.apply(&PatchParams::apply("reconciler"), &settings("fast")).await?;
//!
//! // Another manager setting the field otherwise conflicts, as on the apiserver...
//! let err = configmaps
//!     .apply(&PatchParams::apply("operator"), &settings("slow"))
//!     .await
//!     .unwrap_err();
//! assert!(err.is_conflict());
//! assert_eq!(
//!     err.status().and_then(|s| s.message.as_deref()),
//!     Some(r#"Apply failed with 1 conflict: conflict with "reconciler": .data.mode"#)
//! );
//!
//! // ...until it forces: the field changes hands, and `managedFields` says so.
//! let taken = configmaps
//!     .apply(&PatchParams::apply("operator").force(), &settings("slow"))
//!     .await?;
//! let owners: Vec<_> = taken.metadata.managed_fields.iter().flatten()
//!     .filter_map(|entry| entry.manager.as_deref())
//!     .collect();
//! assert_eq!(owners, ["operator"]);
//! # Ok(()) }
//! ```
//!
//! # What is modelled
//!
//! Each behaviour follows kube-apiserver (1.36) and its registry strategies; error `Status`es
//! have the apiserver's shape, reason, code and message, so [`Error::is_not_found`],
//! [`Error::is_conflict`] and friends classify them as they would real ones.
//!
//! * **Create**: `uid`, `creationTimestamp`, `resourceVersion`; `generateName` (5 characters
//!   from `bcdfghjklmnpqrstvwxz2456789`, retried on collision); `generation: 1` for types with
//!   generation semantics; status reset as the type's strategy does (Deployments and other
//!   workloads `{}`, Pods `{phase: Pending, qosClass}`, custom resources dropped); 409
//!   `AlreadyExists`; 422 when neither name nor generateName is given; 500 when a
//!   resourceVersion is set; namespace taken from the request, 400 on mismatch.
//! * **Update**: 409 `Conflict` on a stale `resourceVersion` (an empty one is an unconditional
//!   update for built-in types, 422 for custom resources); 409 when the body's `uid` differs;
//!   system metadata (`uid`, `creationTimestamp`, `generation`, `deletionTimestamp`) kept;
//!   the main resource ignores `status`, the `status` subresource ignores `spec` (Deployments
//!   also keep labels, Pods ownerReferences; custom resources change only status);
//!   `generation` bumped on spec changes (Deployments: spec or annotations; custom resources:
//!   anything but metadata and status); an update that changes nothing is not written (same
//!   resourceVersion, no watch event); removing the last finalizer of an object being
//!   deleted deletes it.
//! * **Patch**: JSON merge patch; strategic merge patch with the merge keys of common
//!   built-in lists (`metadata.ownerReferences` by uid including `$patch: delete`,
//!   `metadata.finalizers` as a set, containers/volumes/env by name, conditions by type,
//!   ports, ...), other lists replaced, `null` deleting map keys, `$patch`,
//!   `$deleteFromPrimitiveList` and `$setElementOrder` directives; RFC 6902 JSON patch
//!   (`add`, `remove`, `replace`, `move`, `copy`, `test`; failures are 422). A `uid` in the
//!   patch that differs from the object's is a 422 `metadata.uid: ... field is immutable`
//!   (so a controller's adopt/release patch for a recreated object fails like on a real
//!   server); duplicate ownerReferences are dropped; strategic merge of custom resources is 415.
//! * **Delete**: preconditions on uid and resourceVersion (409); objects with finalizers get
//!   `deletionTimestamp` and stay until the finalizers are removed; the answer is a success
//!   `Status` or, for the types whose registry returns it (Pods, Services, custom resources,
//!   ...), the deleted object.
//! * **List**: label selectors, field selectors on `metadata.name`, `metadata.namespace` and
//!   the type's field labels (e.g. `spec.nodeName` for Pods) with `=`, `==`, `!=`;
//!   `limit`/`continue` paging with an opaque token; `metadata.resourceVersion` is the global
//!   resourceVersion (one counter for all resources, like etcd's revision).
//! * **Watch**: from `resourceVersion` unset or `"0"` (synthetic ADDED events, then live), or
//!   from a resourceVersion (replay from a bounded event history, see
//!   [`FakeApi::with_history_limit`]; older than the history → an ERROR event `410 Expired`);
//!   streaming lists (`send_initial_events` → ADDED events and a bookmark annotated
//!   `k8s.io/initial-events-end`); selector filtering with the watch cache's transitions (an
//!   object that stops matching is DELETED for that watcher, one that starts matching is
//!   ADDED); `timeout_seconds`; test hooks [`FakeApi::send_bookmarks`],
//!   [`FakeApi::close_watches`] and [`FakeApi::compact`].
//! * **Server-side apply** ([`Patch::Apply`](kctrl_client::Patch::Apply),
//!   [`Api::apply`](kctrl_client::Api::apply); checked against kube-apiserver 1.37 by the
//!   cases the end-to-end suite runs on both): an apply creates the object when it is
//!   absent (through the status subresource it is 404); otherwise the configuration is
//!   merged into the live object. The manager then owns exactly the configuration's fields,
//!   recorded in `metadata.managedFields` as the apiserver records them (`operation: Apply`,
//!   `apiVersion`, `fieldsType: FieldsV1`, the fields in its `f:`/`k:`/`v:`/`.` notation,
//!   `time` when the apply changed the object, `subresource: status` for status applies).
//!   Fields it applied before and leaves out now are removed unless another manager owns
//!   them (an object nobody owns anything in any more goes whole). A field another manager
//!   owns that the apply would change is a 409 Conflict with the apiserver's message and
//!   `FieldManagerConflict` causes (`Apply failed with 1 conflict: conflict with "other":
//!   .spec.replicas`), unless `force` hands it over; applying the value a field already has
//!   shares it. What the endpoint's strategy resets is never owned (the status through the
//!   main resource; the spec, and a Deployment's labels, through the status subresource).
//!   The request is checked as the apiserver checks it: a field manager is required (422),
//!   `force` only goes with an apply (422), `apiVersion` and `kind` must be the resource's
//!   (400 `invalid object type`), the name must be the URL's (taken from it when absent),
//!   `managedFields` must not be sent (400), a stale `resourceVersion` is a 409; `dryRun`
//!   answers without storing; an apply that changes nothing is not written.
//! * **Field ownership of other writes**: a create, update or non-apply patch records an
//!   `Update` entry for its field manager (when it names none, `kctrl`, the name the
//!   apiserver takes from kctrl-client's User-Agent) owning what it added or changed, taken
//!   from whoever owned it; a removed field belongs to nobody. A write without
//!   `managedFields` (an object from an informer's cache) keeps them; `managedFields: [{}]`
//!   stops the tracking. Objects seeded with [`FakeApi::add`] carry the managedFields given
//!   (none by default) and, like objects the apiserver never tracked, stay untracked until
//!   an apply, which first records all their fields as owned by `before-first-apply`.
//! * **No CEL**: the validation rules of a CustomResourceDefinition
//!   (`x-kubernetes-validations`, e.g. from kctrl-client's `rule!`) are not evaluated.
//!   [`FakeApi::register_crd`] accepts a definition with rules, and every write the rest of
//!   the fake accepts is stored, also one kube-apiserver would refuse with `422 Invalid`
//!   (`spec.minReplicas: Invalid value: "object": ...`). Nor are a rule's form, its CEL or its
//!   cost checked (kube-apiserver refuses the definition itself then). Test what your rules
//!   refuse against a real API server (kctrl-testenv); test your controller here.
//! * **Schema, for apply**: the fake knows no OpenAPI schemas, only a small table.
//!   Objects are maps of fields, except label selectors (`spec.selector`, `labelSelector`,
//!   `namespaceSelector`, `podSelector`) and owner references, which are atomic (replaced
//!   and owned whole). Lists are atomic, except `metadata.finalizers` (a set),
//!   `metadata.ownerReferences` (keyed by `uid`) and, on built-in resources, containers,
//!   init and ephemeral containers (by `name`), their `ports` (by `containerPort` and
//!   `protocol`), `env` (by `name`) and `volumeMounts` (by `mountPath`), a pod's `volumes`
//!   and `imagePullSecrets` (by `name`), `status.conditions` (by `type`) and a Service's
//!   `spec.ports` (by `port` and `protocol`). A custom resource's own lists are atomic (a
//!   CRD's default without `x-kubernetes-list-type`).
//! * **Actions and reactors**: every call is recorded ([`FakeApi::actions`]); reactors
//!   ([`FakeApi::prepend_reactor`]) can fail a call, answer it, or let it through.
//! * **Discovery**: [`Backend::server_version`] reports v1.36.0; [`Backend::api_resources`]
//!   lists the registered resources (a built-in registry of common types, plus
//!   [`FakeApi::register`] and [`FakeApi::register_crd`]) with their `status` subresources.
//! * **Custom resources**: [`FakeApi::register_crd`] serves what a CustomResourceDefinition
//!   describes (e.g. `Foo::crd()` of a `#[derive(CustomResource)]` type), with CRD
//!   semantics; a resource nobody registered is a 404 naming it, as a real server without
//!   the CRD answers.
//!
//! # What is not modelled
//!
//! Admission (no namespace lifecycle: objects may be created in namespaces that do not exist;
//! no quota, webhooks or policies), defaulting beyond the fields above, validation (names,
//! labels, specs, immutable fields other than `metadata.uid`; of a custom resource's schema
//! only what it says about `null`, as kube-apiserver treats it: pruned or defaulted on
//! create, update and patch where not nullable, refused by a server-side apply, see
//! [`ResourceSpec::openapi_schema`]; a built-in type's `null` is accepted, and dropped by an
//! apply), the garbage collector (the
//! propagation policy is accepted and recorded but every delete behaves as `Background` with
//! no dependents deleted or orphaned; `Foreground` and `Orphan` add no finalizer), graceful
//! pod termination (pods without finalizers are deleted at once), namespace termination,
//! conversion between versions (each group/version is stored separately), subresources
//! other than `status` (`scale`, `eviction`, ... are 404), consistent snapshots for paged
//! lists (later pages show the current objects after the last key) and
//! `resourceVersionMatch=Exact` lists, and watches from a resourceVersion newer than the
//! current one (they simply wait for it).
//!
//! Of server-side apply and field ownership: keyed lists and atomic objects beyond the
//! table above (the fake handles such a list as atomic: an apply owns and replaces it
//! whole) and a CRD's `x-kubernetes-list-type`/`x-kubernetes-map-type`; key fields the
//! apiserver defaults (an item without its key, such as a container port without
//! `protocol`, is refused with a 400 saying so, where the apiserver would default it);
//! unions; fields the apiserver defaults, which it records as the creator's (the fake
//! defaults nothing, so a creator owns
//! only what it sent); the exact shape of `Update` entries for Go structs (the apiserver
//! marks a newly set struct with `.` only when the Go field is a pointer, the fake marks
//! every object a write adds, e.g. a created Deployment's `spec`; `Apply` entries are
//! exact); the cap of ten `Update` managers (`ancient-changes`); kubectl's
//! `last-applied-configuration` annotation; and the validation of managedFields a write
//! sets itself (taken as the starting point, as on the apiserver, when readable).

mod action;
mod apply;
pub mod errors;
mod fields;
mod managed;
mod metadata;
mod nulls;
mod patch;
pub use patch::json_patch;
mod registry;
mod select;
mod store;

use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt};
use k8s_openapi::Resource;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{APIResource, APIResourceList};
use k8s_openapi::apimachinery::pkg::version::Info;
use kctrl_client::{
    ApiRequest, Backend, Client, Error, Operation, ResourceRef, Scope, WatchFrames,
};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

pub use action::{Action, Reaction};
pub use registry::{GenerationPolicy, ResourceSpec};

use action::Reactor;
use store::State;

/// The default number of events kept for watches from an older resourceVersion.
pub const DEFAULT_HISTORY_LIMIT: usize = 10_000;

/// An in-memory API server. Cheap to clone: clones share the same objects, actions and
/// reactors. Use it as a backend with [`FakeApi::client`] or `Client::new(fake.clone(), ns)`.
#[derive(Clone)]
pub struct FakeApi {
    state: Arc<Mutex<State>>,
}

impl Default for FakeApi {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for FakeApi {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FakeApi")
            .field("resource_version", &self.resource_version())
            .finish_non_exhaustive()
    }
}

impl FakeApi {
    /// An empty API server keeping the last [`DEFAULT_HISTORY_LIMIT`] events for watches.
    pub fn new() -> Self {
        Self::with_history_limit(DEFAULT_HISTORY_LIMIT)
    }

    /// An empty API server keeping the last `events` events: a watch from a resourceVersion
    /// older than that gets `410 Expired`.
    pub fn with_history_limit(events: usize) -> Self {
        Self {
            state: Arc::new(Mutex::new(State::new(events))),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A client on this fake whose default namespace is `default`.
    pub fn client(&self) -> Client {
        Client::new(self.clone(), "default")
    }

    /// A client on this fake with the given default namespace.
    pub fn client_in(&self, namespace: impl Into<String>) -> Client {
        Client::new(self.clone(), namespace)
    }

    /// Serves another resource (typically a custom resource), or replaces the behaviour of a
    /// built-in one.
    pub fn register(&self, spec: ResourceSpec) {
        self.lock().register(spec);
    }

    /// Serves the custom resource a CustomResourceDefinition describes, as the API server
    /// does once the definition is created: every served version, with the `status`
    /// subresource where the version has it, its selectable fields as field labels, and its
    /// schema's say over a `null` in a written object ([`ResourceSpec::openapi_schema`]). Until
    /// then, requests for the resource fail as on a server without the definition (404, "is
    /// its CustomResourceDefinition installed?"). Its CEL validation rules
    /// (`x-kubernetes-validations`) are not evaluated: see the crate docs.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use kctrl_client::{Api, CustomResource, PostParams};
    /// use kctrl_fake::FakeApi;
    ///
    /// #[derive(CustomResource, Clone, Debug, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
    /// #[resource(group = "example.com", version = "v1", kind = "Widget", namespaced)]
    /// struct WidgetSpec {
    ///     size: i32,
    /// }
    ///
    /// let fake = FakeApi::new();
    /// let widgets: Api<Widget> = Api::namespaced(fake.client(), "default");
    /// let w = Widget::new("w", WidgetSpec { size: 1 });
    /// let err = widgets.create(&PostParams::default(), &w).await.unwrap_err();
    /// assert!(err.to_string().contains("is its CustomResourceDefinition installed?"));
    ///
    /// fake.register_crd(&Widget::crd());
    /// let created = widgets.create(&PostParams::default(), &w).await?;
    /// assert_eq!(created.metadata.generation, Some(1));
    /// # Ok(()) }
    /// ```
    pub fn register_crd(&self, crd: &CustomResourceDefinition) {
        let scope = if crd.spec.scope == "Namespaced" {
            Scope::Namespaced
        } else {
            Scope::Cluster
        };
        let mut st = self.lock();
        for v in crd.spec.versions.iter().filter(|v| v.served) {
            let resource = ResourceRef::new(
                crd.spec.group.clone(),
                v.name.clone(),
                crd.spec.names.plural.clone(),
                crd.spec.names.kind.clone(),
                scope,
            );
            let status = v.subresources.as_ref().is_some_and(|s| s.status.is_some());
            let mut spec = ResourceSpec::new(resource).status_subresource(status);
            for field in v.selectable_fields.iter().flatten() {
                spec = spec.field_label(field.json_path.trim_start_matches('.').to_owned());
            }
            if let Some(schema) = v.schema.as_ref().and_then(|s| s.open_api_v3_schema.clone()) {
                spec = spec.openapi_schema(schema);
            }
            st.register(spec);
        }
    }

    /// The current global resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.lock().resource_version()
    }

    // ---- the object tracker ----

    /// Seeds an object without recording an action or running reactors (client-go's
    /// `tracker.Add`). The object is stored as given, `status` and `generation` included; the
    /// fake fills in what the server always sets (`uid`, `creationTimestamp`,
    /// `resourceVersion`, `generation: 1` where the type has one). An existing object of
    /// the same name is replaced. Watchers see the change. Returns the stored object.
    ///
    /// Its `managedFields` are stored as given too; without them the object's changes are
    /// not tracked until a server-side apply (see the crate docs).
    pub fn add<K>(&self, obj: &K) -> Result<K, Error>
    where
        K: Resource + Serialize + DeserializeOwned,
        K::Scope: 'static,
    {
        let resource = ResourceRef::of::<K>();
        let value = serde_json::to_value(obj).map_err(|source| Error::Decode {
            what: format!("{} to seed", K::KIND),
            source,
        })?;
        let stored = self.add_value(&resource, value)?;
        decode(stored, K::KIND)
    }

    /// [`FakeApi::add`] for an untyped object of `resource`; registers the resource as a
    /// custom resource if it is not served yet.
    pub fn add_value(&self, resource: &ResourceRef, obj: Value) -> Result<Value, Error> {
        let mut st = self.lock();
        if !st.specs().any(|s| s.resource() == resource) {
            st.register(ResourceSpec::new(resource.clone()));
        }
        st.seed(resource, obj)
    }

    /// The stored object, if any (for assertions; not recorded as an action).
    pub fn object<K>(&self, namespace: Option<&str>, name: &str) -> Option<K>
    where
        K: Resource + DeserializeOwned,
        K::Scope: 'static,
    {
        let v = self
            .lock()
            .get_value(&ResourceRef::of::<K>(), namespace, name)?;
        serde_json::from_value(v).ok()
    }

    /// All stored objects of `K`, ordered by namespace and name.
    pub fn objects<K>(&self) -> Vec<K>
    where
        K: Resource + DeserializeOwned,
        K::Scope: 'static,
    {
        self.lock()
            .values(&ResourceRef::of::<K>())
            .into_iter()
            .filter_map(|v| serde_json::from_value(v).ok())
            .collect()
    }

    /// The stored JSON of one object.
    pub fn get_value(
        &self,
        resource: &ResourceRef,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<Value> {
        self.lock().get_value(resource, namespace, name)
    }

    // ---- actions and reactors ----

    /// The requests received so far, in order (discovery calls are not recorded).
    pub fn actions(&self) -> Vec<Action> {
        self.lock().actions.clone()
    }

    /// Forgets the recorded actions.
    pub fn clear_actions(&self) {
        self.lock().actions.clear();
    }

    /// Adds a reactor that runs before the ones added earlier and before the object
    /// tracker, for requests matching `verb` and `resource` (plural name or
    /// `plural/subresource`; `"*"` matches anything). The first reactor that does not
    /// answer [`Reaction::Continue`] decides the outcome.
    ///
    /// ```
    /// # use kctrl_fake::{FakeApi, Reaction, errors};
    /// # use std::sync::atomic::{AtomicUsize, Ordering};
    /// let fake = FakeApi::new();
    /// // Fail the second update of replicasets with a conflict.
    /// let n = AtomicUsize::new(0);
    /// fake.prepend_reactor("update", "replicasets", move |a| {
    ///     if n.fetch_add(1, Ordering::SeqCst) == 1 {
    ///         let name = a.name().unwrap_or_default();
    ///         Reaction::Error(errors::stale_update_conflict(a.resource(), &name))
    ///     } else {
    ///         Reaction::Continue
    ///     }
    /// });
    /// ```
    pub fn prepend_reactor<F>(&self, verb: &str, resource: &str, react: F)
    where
        F: Fn(&Action) -> Reaction + Send + Sync + 'static,
    {
        self.lock().reactors.insert(
            0,
            Reactor {
                verb: verb.to_owned(),
                resource: resource.to_owned(),
                react: Arc::new(react),
            },
        );
    }

    /// Removes every reactor.
    pub fn clear_reactors(&self) {
        self.lock().reactors.clear();
    }

    // ---- watch hooks ----

    /// Ends every open watch stream, as a dropped connection would.
    pub fn close_watches(&self) {
        self.lock().close_watches();
    }

    /// The number of open watches (handy to wait until an informer is watching).
    pub fn watcher_count(&self) -> usize {
        self.lock().watcher_count()
    }

    /// Sends a BOOKMARK at the current resourceVersion to every watch that allows them.
    pub fn send_bookmarks(&self) {
        self.lock().send_bookmarks();
    }

    /// Compacts the event history at `resource_version`: watches from it or older get
    /// `410 Expired`.
    pub fn compact(&self, resource_version: u64) {
        self.lock().compact(resource_version);
    }

    // ---- request handling ----

    /// Records the request and runs the matching reactors; `Some` when one answered.
    fn react(&self, req: &ApiRequest) -> Option<Reaction> {
        let action = Action::new(req.clone());
        let reactors = {
            let mut st = self.lock();
            st.actions.push(action.clone());
            st.reactors.clone()
        };
        reactors
            .iter()
            .filter(|r| {
                (r.verb == "*" || r.verb == req.verb())
                    && action::resource_matches(req, &r.resource)
            })
            .map(|r| (r.react)(&action))
            .find(|reaction| !matches!(reaction, Reaction::Continue))
    }

    fn execute(&self, req: ApiRequest) -> Result<Value, Error> {
        let ns = req.namespace.as_deref();
        let sub = req.subresource.as_deref();
        let r = &req.resource;
        let mut st = self.lock();
        match &req.operation {
            Operation::Get { name } => st.get(r, ns, name),
            Operation::List(p) => st.list(r, ns, p),
            Operation::Create { body, params } => {
                if sub.is_some() {
                    return Err(errors::resource_not_served());
                }
                st.create(r, ns, body, params)
            }
            Operation::Update { name, body, params } => st.update(r, ns, sub, name, body, params),
            Operation::Patch {
                name,
                patch,
                params,
            } => st.patch(r, ns, sub, name, patch, params),
            Operation::Delete { name, params } => st.delete(r, ns, name, params),
            Operation::Watch(_) => Err(Error::InvalidRequest(
                "a watch must go through Backend::watch".to_owned(),
            )),
        }
    }

    fn watch_frames(&self, req: ApiRequest) -> Result<WatchFrames, Error> {
        let Operation::Watch(params) = &req.operation else {
            return Err(Error::InvalidRequest(format!(
                "Backend::watch called with a {} request",
                req.verb()
            )));
        };
        let rx = self
            .lock()
            .watch(&req.resource, req.namespace.as_deref(), params)?;
        let frames = futures::stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|f| (Ok::<Bytes, Error>(f), rx))
        });
        Ok(match params.timeout_seconds {
            Some(t) => frames
                .take_until(tokio::time::sleep(Duration::from_secs(u64::from(t))))
                .boxed(),
            None => frames.boxed(),
        })
    }
}

fn decode<K: DeserializeOwned>(v: Value, kind: &str) -> Result<K, Error> {
    serde_json::from_value(v).map_err(|source| Error::Decode {
        what: format!("stored {kind}"),
        source,
    })
}

fn to_bytes(v: &Value) -> Bytes {
    Bytes::from(serde_json::to_vec(v).unwrap_or_default())
}

impl Backend for FakeApi {
    fn call(&self, request: ApiRequest) -> BoxFuture<'_, Result<Bytes, Error>> {
        async move {
            match self.react(&request) {
                Some(Reaction::Respond(v)) => Ok(to_bytes(&v)),
                Some(Reaction::Error(e)) => Err(e),
                Some(Reaction::Watch(_)) => Err(Error::InvalidRequest(
                    "a reactor answered a non-watch request with watch frames".to_owned(),
                )),
                Some(Reaction::Continue) | None => {
                    let representation = request.representation;
                    let verb = request.verb();
                    self.execute(request)
                        .map(|v| to_bytes(&metadata::convert(v, representation, verb)))
                }
            }
        }
        .boxed()
    }

    fn watch(&self, request: ApiRequest) -> BoxFuture<'_, Result<WatchFrames, Error>> {
        async move {
            match self.react(&request) {
                Some(Reaction::Watch(frames)) => Ok(frames),
                Some(Reaction::Error(e)) => Err(e),
                Some(Reaction::Respond(v)) => Ok(futures::stream::iter([Ok(to_bytes(&v))]).boxed()),
                Some(Reaction::Continue) | None => {
                    let representation = request.representation;
                    let frames = self.watch_frames(request)?;
                    Ok(metadata::convert_frames(frames, representation))
                }
            }
        }
        .boxed()
    }

    fn server_version(&self) -> BoxFuture<'_, Result<Info, Error>> {
        async move {
            Ok(Info {
                major: "1".to_owned(),
                minor: "36".to_owned(),
                git_version: "v1.36.0".to_owned(),
                git_commit: "0000000000000000000000000000000000000000".to_owned(),
                git_tree_state: "clean".to_owned(),
                build_date: "2026-04-22T00:00:00Z".to_owned(),
                go_version: "go1.26.2".to_owned(),
                compiler: "gc".to_owned(),
                platform: "linux/amd64".to_owned(),
                ..Default::default()
            })
        }
        .boxed()
    }

    fn api_resources<'a>(
        &'a self,
        group_version: &'a str,
    ) -> BoxFuture<'a, Result<APIResourceList, Error>> {
        async move {
            let st = self.lock();
            let mut specs: Vec<&ResourceSpec> = st
                .specs()
                .filter(|s| s.resource().api_version() == group_version)
                .collect();
            if specs.is_empty() {
                return Err(errors::resource_not_served());
            }
            specs.sort_by(|a, b| a.resource().plural.cmp(&b.resource().plural));
            let verbs = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
            let mut resources = Vec::new();
            for s in specs {
                let r = s.resource();
                let base = APIResource {
                    name: r.plural.to_string(),
                    singular_name: r.kind.to_lowercase(),
                    namespaced: r.is_namespaced(),
                    kind: r.kind.to_string(),
                    verbs: verbs(&[
                        "create",
                        "delete",
                        "deletecollection",
                        "get",
                        "list",
                        "patch",
                        "update",
                        "watch",
                    ]),
                    ..Default::default()
                };
                if s.has_status() {
                    let status = APIResource {
                        name: format!("{}/status", r.plural),
                        singular_name: String::new(),
                        verbs: verbs(&["get", "patch", "update"]),
                        ..base.clone()
                    };
                    resources.push(base);
                    resources.push(status);
                } else {
                    resources.push(base);
                }
            }
            Ok(APIResourceList {
                group_version: group_version.to_owned(),
                resources,
            })
        }
        .boxed()
    }
}

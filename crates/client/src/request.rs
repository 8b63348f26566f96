//! The semantic description of one API call, independent of HTTP.
//!
//! Typed [`Api`](crate::Api) methods build an [`ApiRequest`]; a [`Backend`](crate::Backend)
//! carries it out. The HTTP backend turns it into a URL, query and body; an in-memory fake
//! interprets it directly and can record it as an action for assertions, the way client-go's
//! fake clientset records actions.

use std::time::Duration;

use bytes::Bytes;

use crate::resource::ResourceRef;
use crate::sharding::ShardSelector;

/// One call against the Kubernetes API.
#[derive(Clone, Debug, PartialEq)]
pub struct ApiRequest {
    /// The resource addressed.
    pub resource: ResourceRef,
    /// Namespace, for namespaced resources; `None` means all namespaces (list and watch) or
    /// a cluster-scoped resource.
    pub namespace: Option<String>,
    /// Subresource such as `status` or `scale`.
    pub subresource: Option<String>,
    /// What to do.
    pub operation: Operation,
    /// The form the server is asked to answer in: whole objects, or only their metadata.
    pub representation: Representation,
    /// The encoding the server is asked to answer in.
    pub wire: WireFormat,
    /// The caller decodes the answer's objects without `metadata.managedFields`
    /// ([`Api::without_managed_fields`](crate::Api::without_managed_fields)), so a backend
    /// may drop them before decoding: the HTTP backend cuts them out of JSON watch events as
    /// it frames them. Nothing else may differ.
    pub drop_managed_fields: bool,
}

/// The encoding a client asks the server to answer in.
///
/// Requests always send JSON bodies; this is about answers. A server that cannot answer in
/// protobuf (custom resources, the in-memory fake) answers JSON, which is always accepted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum WireFormat {
    /// `Accept: application/json`.
    #[default]
    Json,
    /// `Accept: application/vnd.kubernetes.protobuf, application/json`, as kube-controller-manager
    /// asks for built-in resources (see [`crate::protobuf`]).
    Protobuf,
}

/// The form of the objects a read returns.
///
/// The API server converts any resource to `meta.k8s.io/v1` `PartialObjectMetadata` when the
/// client asks for it in its `Accept` header (client-go's metadata client does so): only
/// `metadata` crosses the wire, whatever the resource. Writes always send and receive whole
/// objects.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Representation {
    /// The resource's own kind, e.g. `Pod` and `PodList`.
    #[default]
    Full,
    /// `PartialObjectMetadata` (get, watch) and `PartialObjectMetadataList` (list).
    PartialObjectMetadata,
}

impl ApiRequest {
    /// A request for whole objects (the usual case).
    pub fn new(
        resource: ResourceRef,
        namespace: Option<String>,
        subresource: Option<String>,
        operation: Operation,
    ) -> Self {
        Self {
            resource,
            namespace,
            subresource,
            operation,
            representation: Representation::Full,
            wire: WireFormat::Json,
            drop_managed_fields: false,
        }
    }

    /// The verb as RBAC and audit logs name it (`get`, `list`, `watch`, `create`, ...).
    pub fn verb(&self) -> &'static str {
        self.operation.verb()
    }

    /// The object name the request addresses, if any.
    pub fn name(&self) -> Option<&str> {
        match &self.operation {
            Operation::Get { name }
            | Operation::Update { name, .. }
            | Operation::Patch { name, .. }
            | Operation::Delete { name, .. } => Some(name),
            Operation::List(_) | Operation::Watch(_) | Operation::Create { .. } => None,
        }
    }
}

/// The verb of an [`ApiRequest`] and its verb-specific parameters.
#[derive(Clone, Debug, PartialEq)]
pub enum Operation {
    /// Read one object.
    Get {
        /// Object name.
        name: String,
    },
    /// List objects.
    List(ListParams),
    /// Watch objects for changes.
    Watch(WatchParams),
    /// Create an object from a JSON body.
    Create {
        /// The serialized object.
        body: Bytes,
        /// Write options.
        params: PostParams,
    },
    /// Replace an object (optimistic concurrency by `metadata.resourceVersion`).
    Update {
        /// Object name.
        name: String,
        /// The serialized object.
        body: Bytes,
        /// Write options.
        params: PostParams,
    },
    /// Patch an object, or apply a configuration to it ([`Patch::Apply`]).
    Patch {
        /// Object name.
        name: String,
        /// The patch document and its type.
        patch: Patch,
        /// Patch options.
        params: PatchParams,
    },
    /// Delete an object.
    Delete {
        /// Object name.
        name: String,
        /// Delete options.
        params: DeleteParams,
    },
}

impl Operation {
    /// The verb as RBAC names it.
    pub fn verb(&self) -> &'static str {
        match self {
            Operation::Get { .. } => "get",
            Operation::List(_) => "list",
            Operation::Watch(_) => "watch",
            Operation::Create { .. } => "create",
            Operation::Update { .. } => "update",
            Operation::Patch { .. } => "patch",
            Operation::Delete { .. } => "delete",
        }
    }
}

/// How `resourceVersion` is interpreted by a list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResourceVersionMatch {
    /// Data at least as new as the given resourceVersion.
    NotOlderThan,
    /// Data at exactly the given resourceVersion.
    Exact,
}

impl ResourceVersionMatch {
    /// The value of the `resourceVersionMatch` query parameter.
    pub fn as_str(self) -> &'static str {
        match self {
            ResourceVersionMatch::NotOlderThan => "NotOlderThan",
            ResourceVersionMatch::Exact => "Exact",
        }
    }
}

/// Parameters of a list: selectors, paging and consistency.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ListParams {
    /// Label selector, e.g. `app=web,tier!=db`.
    pub label_selector: Option<String>,
    /// Field selector, e.g. `metadata.name=x`.
    pub field_selector: Option<String>,
    /// Page size; `None` lists everything in one response.
    pub limit: Option<u32>,
    /// Continue token from the previous page.
    pub continue_token: Option<String>,
    /// `resourceVersion`: `None` (or empty) is a consistent read, `"0"` any cached data.
    pub resource_version: Option<String>,
    /// How `resource_version` is matched.
    pub resource_version_match: Option<ResourceVersionMatch>,
    /// Server-side timeout of the call.
    pub timeout_seconds: Option<u32>,
    /// `shardSelector`: only objects whose UID or namespace hashes into the selector's ranges
    /// (server-side sharded list, KEP-5866). Needs the `ShardedListAndWatch` feature gate on
    /// kube-apiserver; a server without it ignores the parameter and lists everything, which
    /// [`Api::list_sharded`](crate::Api::list_sharded) tells apart.
    pub shard_selector: Option<ShardSelector>,
}

impl ListParams {
    /// Query parameters in the order the HTTP backend sends them.
    pub fn query_pairs(&self) -> Vec<(&'static str, String)> {
        let mut q = Vec::new();
        push_opt(&mut q, "labelSelector", &self.label_selector);
        push_opt(&mut q, "fieldSelector", &self.field_selector);
        if let Some(limit) = self.limit {
            q.push(("limit", limit.to_string()));
        }
        push_opt(&mut q, "continue", &self.continue_token);
        push_opt(&mut q, "resourceVersion", &self.resource_version);
        if let Some(m) = self.resource_version_match {
            q.push(("resourceVersionMatch", m.as_str().to_owned()));
        }
        if let Some(t) = self.timeout_seconds {
            q.push(("timeoutSeconds", t.to_string()));
        }
        if let Some(s) = &self.shard_selector {
            q.push(("shardSelector", s.to_string()));
        }
        q
    }
}

/// Parameters of a watch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WatchParams {
    /// Label selector.
    pub label_selector: Option<String>,
    /// Field selector.
    pub field_selector: Option<String>,
    /// Start after this resourceVersion; `None` or `"0"` starts with synthetic ADDED events.
    pub resource_version: Option<String>,
    /// `resourceVersionMatch`; the API requires `NotOlderThan` with `send_initial_events`.
    pub resource_version_match: Option<ResourceVersionMatch>,
    /// Ask for BOOKMARK events (default true, as client-go's reflector always does).
    pub allow_watch_bookmarks: bool,
    /// Server-side watch timeout; the stream ends cleanly afterwards. `Some(0)` is sent as
    /// is and the server reads it as its own default (a random 30–60 minutes on the
    /// apiserver), as `None` is.
    pub timeout_seconds: Option<u32>,
    /// Streaming list: send the current state as ADDED events, then a bookmark marking the
    /// end of the initial events.
    pub send_initial_events: bool,
    /// `shardSelector`: only events of objects whose UID or namespace hashes into the
    /// selector's ranges (see [`ListParams::shard_selector`]). A server without the
    /// `ShardedListAndWatch` feature gate ignores it and sends every event.
    pub shard_selector: Option<ShardSelector>,
}

impl Default for WatchParams {
    fn default() -> Self {
        Self {
            label_selector: None,
            field_selector: None,
            resource_version: None,
            resource_version_match: None,
            allow_watch_bookmarks: true,
            timeout_seconds: None,
            send_initial_events: false,
            shard_selector: None,
        }
    }
}

impl WatchParams {
    /// Query parameters in the order the HTTP backend sends them (`watch=1` included).
    pub fn query_pairs(&self) -> Vec<(&'static str, String)> {
        let mut q = vec![("watch", "1".to_owned())];
        push_opt(&mut q, "labelSelector", &self.label_selector);
        push_opt(&mut q, "fieldSelector", &self.field_selector);
        push_opt(&mut q, "resourceVersion", &self.resource_version);
        if let Some(m) = self.resource_version_match {
            q.push(("resourceVersionMatch", m.as_str().to_owned()));
        }
        if self.allow_watch_bookmarks {
            q.push(("allowWatchBookmarks", "true".to_owned()));
        }
        if let Some(t) = self.timeout_seconds {
            q.push(("timeoutSeconds", t.to_string()));
        }
        if self.send_initial_events {
            q.push(("sendInitialEvents", "true".to_owned()));
        }
        if let Some(s) = &self.shard_selector {
            q.push(("shardSelector", s.to_string()));
        }
        q
    }

    /// The client-side deadline for the watch: the server timeout plus a grace period of 5 s,
    /// if a timeout is set. There is none for `Some(0)`: the server then applies its own
    /// default, which the client does not know.
    pub fn client_deadline(&self) -> Option<Duration> {
        self.timeout_seconds
            .filter(|&t| t > 0)
            .map(|t| Duration::from_secs(u64::from(t)) + Duration::from_secs(5))
    }
}

/// Options of create and update (a patch has [`PatchParams`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PostParams {
    /// `fieldManager` recorded in managedFields.
    pub field_manager: Option<String>,
    /// Validate and default but do not persist (`dryRun=All`).
    pub dry_run: bool,
}

impl PostParams {
    /// Query parameters for these options.
    pub fn query_pairs(&self) -> Vec<(&'static str, String)> {
        let mut q = Vec::new();
        push_opt(&mut q, "fieldManager", &self.field_manager);
        if self.dry_run {
            q.push(("dryRun", "All".to_owned()));
        }
        q
    }
}

/// Options of a patch: the field manager, `force` (server-side apply only) and dry run.
///
/// A merge, strategic or JSON patch needs none of them (`PatchParams::default()`); a
/// server-side apply ([`Patch::Apply`]) needs a field manager, which
/// [`PatchParams::apply`] sets:
///
/// ```
/// use kctrl_client::PatchParams;
///
/// let params = PatchParams::apply("my-controller").force();
/// assert_eq!(
///     params.query_pairs(),
///     [("fieldManager", "my-controller".to_owned()), ("force", "true".to_owned())]
/// );
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PatchParams {
    /// `fieldManager`: who makes the change, recorded in `metadata.managedFields`. Required
    /// (non-empty) for [`Patch::Apply`], where it names the owner of the applied fields;
    /// for other patches the server takes the client's User-Agent when it is unset.
    pub field_manager: Option<String>,
    /// `force=true`: take ownership of fields another manager owns instead of failing with
    /// a 409 Conflict. Only valid for [`Patch::Apply`].
    pub force: bool,
    /// Validate and default but do not persist (`dryRun=All`).
    pub dry_run: bool,
}

impl PatchParams {
    /// Options of a server-side apply by `field_manager`, without force.
    pub fn apply(field_manager: impl Into<String>) -> Self {
        Self {
            field_manager: Some(field_manager.into()),
            ..Self::default()
        }
    }

    /// The same options with `force` set: the apply takes over fields other managers own
    /// (what a controller that must converge usually wants).
    pub fn force(mut self) -> Self {
        self.force = true;
        self
    }

    /// The same options with `dry_run` set.
    pub fn dry_run(mut self) -> Self {
        self.dry_run = true;
        self
    }

    /// Query parameters for these options.
    pub fn query_pairs(&self) -> Vec<(&'static str, String)> {
        let mut q = Vec::new();
        push_opt(&mut q, "fieldManager", &self.field_manager);
        if self.force {
            q.push(("force", "true".to_owned()));
        }
        if self.dry_run {
            q.push(("dryRun", "All".to_owned()));
        }
        q
    }

    /// Why these options cannot go with `patch`, if they cannot: an apply without a field
    /// manager, or `force` on a patch that is not an apply. The API server refuses both
    /// (422); [`Api`](crate::Api) checks before sending, so the mistake is named at once.
    pub(crate) fn check(&self, patch: &Patch) -> Result<(), String> {
        let manager = self.field_manager.as_deref().unwrap_or("");
        match patch {
            Patch::Apply(_) if manager.is_empty() => Err(format!(
                "a server-side apply needs a field manager, the name that will own the applied \
                 fields; {} (e.g. PatchParams::apply(\"my-controller\"))",
                if self.field_manager.is_none() {
                    "none is set"
                } else {
                    "it is empty"
                }
            )),
            Patch::Apply(_) => Ok(()),
            _ if self.force => Err(format!(
                "force is only valid for a server-side apply (Patch::Apply), not for a {}; \
                 unset PatchParams::force",
                patch.describe()
            )),
            _ => Ok(()),
        }
    }
}

/// A patch document with its type.
#[derive(Clone, Debug, PartialEq)]
pub enum Patch {
    /// RFC 7386 JSON merge patch (`application/merge-patch+json`).
    Merge(serde_json::Value),
    /// Kubernetes strategic merge patch (`application/strategic-merge-patch+json`); only for
    /// built-in types.
    Strategic(serde_json::Value),
    /// RFC 6902 JSON patch (`application/json-patch+json`): an array of operations.
    Json(serde_json::Value),
    /// Server-side apply (`application/apply-patch+yaml`; JSON is YAML, and it is sent as
    /// JSON): the configuration of the fields the field manager owns. It must be an object
    /// naming its `apiVersion` and `kind`; the server merges it into the live object (or
    /// creates the object), records the manager as owner of exactly these fields, removes
    /// fields the manager applied before and no longer does (unless another manager owns
    /// them), and fails with 409 Conflict when another manager owns a field this one sets to
    /// a different value, unless [`PatchParams::force`] is set. [`Api::apply`](crate::Api::apply)
    /// builds it from a typed object.
    Apply(serde_json::Value),
}

impl Patch {
    /// The request Content-Type of this patch type.
    pub fn content_type(&self) -> &'static str {
        match self {
            Patch::Merge(_) => "application/merge-patch+json",
            Patch::Strategic(_) => "application/strategic-merge-patch+json",
            Patch::Json(_) => "application/json-patch+json",
            Patch::Apply(_) => "application/apply-patch+yaml",
        }
    }

    /// The patch document.
    pub fn body(&self) -> &serde_json::Value {
        match self {
            Patch::Merge(v) | Patch::Strategic(v) | Patch::Json(v) | Patch::Apply(v) => v,
        }
    }

    /// What kind of patch this is, for messages: `merge patch`, `apply patch`, ...
    fn describe(&self) -> &'static str {
        match self {
            Patch::Merge(_) => "merge patch",
            Patch::Strategic(_) => "strategic merge patch",
            Patch::Json(_) => "JSON patch",
            Patch::Apply(_) => "apply patch",
        }
    }

    /// For an apply, why its body cannot be sent, if it cannot: it is not an object, or it
    /// lacks `apiVersion` or `kind` (which the server reads to know what is applied).
    pub(crate) fn check_body(&self) -> Result<(), String> {
        let Patch::Apply(body) = self else {
            return Ok(());
        };
        let Some(obj) = body.as_object() else {
            return Err(format!(
                "an apply patch must be a JSON object (the fields you own), not {}",
                json_kind(body)
            ));
        };
        for field in ["apiVersion", "kind"] {
            match obj.get(field) {
                Some(serde_json::Value::String(s)) if !s.is_empty() => {}
                _ => {
                    return Err(format!(
                        "the apply patch has no {field:?}: an applied object names its \
                         apiVersion and kind (k8s-openapi's types write both; set them on a \
                         DynamicObject or a hand-written JSON body, or use Api::apply)"
                    ));
                }
            }
        }
        Ok(())
    }
}

fn json_kind(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    }
}

/// What happens to dependents of a deleted object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PropagationPolicy {
    /// Dependents are orphaned.
    Orphan,
    /// Dependents are deleted in the background after the owner.
    Background,
    /// The owner stays (with a finalizer) until its dependents are deleted.
    Foreground,
}

impl PropagationPolicy {
    /// The wire value.
    pub fn as_str(self) -> &'static str {
        match self {
            PropagationPolicy::Orphan => "Orphan",
            PropagationPolicy::Background => "Background",
            PropagationPolicy::Foreground => "Foreground",
        }
    }
}

/// Preconditions a delete must meet; the server answers 409 Conflict otherwise.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Preconditions {
    /// The object's UID must be this.
    pub uid: Option<String>,
    /// The object's resourceVersion must be this.
    pub resource_version: Option<String>,
}

/// Options of a delete (the `DeleteOptions` body).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeleteParams {
    /// Preconditions on UID and resourceVersion.
    pub preconditions: Option<Preconditions>,
    /// Dependent propagation.
    pub propagation_policy: Option<PropagationPolicy>,
    /// Grace period for pods; `Some(0)` deletes at once.
    pub grace_period_seconds: Option<i64>,
    /// Validate but do not persist.
    pub dry_run: bool,
}

impl DeleteParams {
    /// Dependents are deleted by the garbage collector after the owner is gone
    /// (`propagationPolicy: Background`, kube-rs's `DeleteParams::background`).
    pub fn background() -> Self {
        Self::with_policy(PropagationPolicy::Background)
    }

    /// The owner stays, with the `foregroundDeletion` finalizer, until the garbage collector
    /// has deleted its blocking dependents (`propagationPolicy: Foreground`).
    pub fn foreground() -> Self {
        Self::with_policy(PropagationPolicy::Foreground)
    }

    /// Dependents are kept and lose their owner reference (`propagationPolicy: Orphan`).
    pub fn orphan() -> Self {
        Self::with_policy(PropagationPolicy::Orphan)
    }

    fn with_policy(policy: PropagationPolicy) -> Self {
        Self {
            propagation_policy: Some(policy),
            ..Self::default()
        }
    }

    /// The `DeleteOptions` object sent as the request body.
    pub fn to_body(&self) -> serde_json::Value {
        let mut body = serde_json::json!({"kind": "DeleteOptions", "apiVersion": "v1"});
        if let Some(p) = &self.preconditions {
            let mut pre = serde_json::Map::new();
            if let Some(uid) = &p.uid {
                pre.insert("uid".into(), uid.clone().into());
            }
            if let Some(rv) = &p.resource_version {
                pre.insert("resourceVersion".into(), rv.clone().into());
            }
            body["preconditions"] = pre.into();
        }
        if let Some(pp) = self.propagation_policy {
            body["propagationPolicy"] = pp.as_str().into();
        }
        if let Some(g) = self.grace_period_seconds {
            body["gracePeriodSeconds"] = g.into();
        }
        if self.dry_run {
            body["dryRun"] = serde_json::json!(["All"]);
        }
        body
    }
}

fn push_opt(q: &mut Vec<(&'static str, String)>, key: &'static str, value: &Option<String>) {
    if let Some(v) = value {
        q.push((key, v.clone()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watch_client_deadline_follows_the_server_timeout() {
        let with = |t| WatchParams {
            timeout_seconds: t,
            ..WatchParams::default()
        };
        assert_eq!(with(None).client_deadline(), None);
        assert_eq!(
            with(Some(60)).client_deadline(),
            Some(Duration::from_secs(65))
        );
        // The server reads 0 as "its own default" (minutes): the client must not cut the
        // watch after the 5 s grace period.
        assert_eq!(with(Some(0)).client_deadline(), None);
    }

    #[test]
    fn list_query_includes_only_set_fields() {
        let p = ListParams {
            label_selector: Some("app=web".into()),
            limit: Some(2),
            continue_token: Some("abc".into()),
            resource_version: Some("0".into()),
            resource_version_match: Some(ResourceVersionMatch::NotOlderThan),
            ..Default::default()
        };
        assert_eq!(
            p.query_pairs(),
            vec![
                ("labelSelector", "app=web".to_owned()),
                ("limit", "2".to_owned()),
                ("continue", "abc".to_owned()),
                ("resourceVersion", "0".to_owned()),
                ("resourceVersionMatch", "NotOlderThan".to_owned()),
            ]
        );
        assert!(ListParams::default().query_pairs().is_empty());
    }

    #[test]
    fn shard_selectors_are_sent_as_the_shard_selector_parameter() {
        let selector: ShardSelector =
            "shardRange(object.metadata.namespace, '0x8000000000000000', '0x10000000000000000')"
                .parse()
                .unwrap();
        let list = ListParams {
            shard_selector: Some(selector.clone()),
            ..Default::default()
        };
        assert_eq!(
            list.query_pairs(),
            [(
                "shardSelector",
                "shardRange(object.metadata.namespace, '0x8000000000000000', \
                 '0x10000000000000000')"
                    .to_owned()
            )]
        );
        let watch = WatchParams {
            shard_selector: Some(selector),
            ..Default::default()
        };
        assert!(watch.query_pairs().contains(&(
            "shardSelector",
            "shardRange(object.metadata.namespace, '0x8000000000000000', '0x10000000000000000')"
                .to_owned()
        )));
        assert!(
            !WatchParams::default()
                .query_pairs()
                .iter()
                .any(|(k, _)| *k == "shardSelector")
        );
    }

    #[test]
    fn watch_query_asks_for_bookmarks_by_default() {
        let q = WatchParams {
            resource_version: Some("42".into()),
            timeout_seconds: Some(300),
            ..Default::default()
        }
        .query_pairs();
        assert_eq!(q[0], ("watch", "1".to_owned()));
        assert!(q.contains(&("allowWatchBookmarks", "true".to_owned())));
        assert!(q.contains(&("timeoutSeconds", "300".to_owned())));
        assert!(!q.iter().any(|(k, _)| *k == "sendInitialEvents"));
    }

    #[test]
    fn delete_body_carries_preconditions_and_policy() {
        let body = DeleteParams {
            preconditions: Some(Preconditions {
                uid: Some("u1".into()),
                resource_version: None,
            }),
            propagation_policy: Some(PropagationPolicy::Foreground),
            ..Default::default()
        }
        .to_body();
        assert_eq!(body["preconditions"]["uid"], "u1");
        assert!(body["preconditions"].get("resourceVersion").is_none());
        assert_eq!(body["propagationPolicy"], "Foreground");
        assert_eq!(body["kind"], "DeleteOptions");
    }

    #[test]
    fn delete_policy_constructors_set_only_the_policy() {
        for (params, policy) in [
            (DeleteParams::background(), "Background"),
            (DeleteParams::foreground(), "Foreground"),
            (DeleteParams::orphan(), "Orphan"),
        ] {
            let body = params.to_body();
            assert_eq!(body["propagationPolicy"], policy);
            assert_eq!(
                body.as_object().map(|o| o.len()),
                Some(3),
                "kind, apiVersion and the policy only: {body}"
            );
        }
    }

    #[test]
    fn patch_params_query_and_checks() {
        assert!(PatchParams::default().query_pairs().is_empty());
        assert_eq!(
            PatchParams::apply("m").force().dry_run().query_pairs(),
            vec![
                ("fieldManager", "m".to_owned()),
                ("force", "true".to_owned()),
                ("dryRun", "All".to_owned()),
            ]
        );
        let apply = Patch::Apply(serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap"}));
        let merge = Patch::Merge(serde_json::json!({}));
        assert_eq!(apply.content_type(), "application/apply-patch+yaml");
        assert!(PatchParams::apply("m").check(&apply).is_ok());
        assert!(PatchParams::apply("m").force().check(&apply).is_ok());
        let none = PatchParams::default().check(&apply).unwrap_err();
        assert!(
            none.contains("needs a field manager") && none.contains("none is set"),
            "{none}"
        );
        let empty = PatchParams::apply("").check(&apply).unwrap_err();
        assert!(empty.contains("it is empty"), "{empty}");
        assert!(PatchParams::default().check(&merge).is_ok());
        assert!(PatchParams::apply("m").check(&merge).is_ok());
        let forced = PatchParams::default().force().check(&merge).unwrap_err();
        assert!(
            forced.contains("only valid for a server-side apply") && forced.contains("merge patch"),
            "{forced}"
        );
    }

    #[test]
    fn apply_bodies_must_name_their_type() {
        assert!(
            Patch::Apply(serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap"}))
                .check_body()
                .is_ok()
        );
        let err = Patch::Apply(serde_json::json!({"apiVersion": "v1"}))
            .check_body()
            .unwrap_err();
        assert!(err.contains("no \"kind\""), "{err}");
        let err = Patch::Apply(serde_json::json!({"apiVersion": "", "kind": "ConfigMap"}))
            .check_body()
            .unwrap_err();
        assert!(err.contains("no \"apiVersion\""), "{err}");
        let err = Patch::Apply(serde_json::json!([1]))
            .check_body()
            .unwrap_err();
        assert!(err.contains("not an array"), "{err}");
        // Other patches are not checked here: the server knows their rules.
        assert!(Patch::Merge(serde_json::json!([1])).check_body().is_ok());
    }
}

//! Which resources the fake serves and how the API server treats each of them.

use std::borrow::Cow;
use std::sync::Arc;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::JSONSchemaProps;
use kctrl_client::{ResourceRef, Scope};
use serde_json::{Value, json};

/// How `metadata.generation` is maintained, following each type's registry strategy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum GenerationPolicy {
    /// The resource has no generation (ConfigMaps, Secrets, Leases, ...).
    None,
    /// 1 on create, +1 on any change of `spec` (ReplicaSets, Pods, StatefulSets, Jobs, ...).
    Spec,
    /// 1 on create, +1 on a change of `spec` or `metadata.annotations` (Deployments).
    SpecAndAnnotations,
    /// 1 on create, +1 on a change of anything but `metadata` (and `status` when there is a
    /// status subresource): custom resources.
    AllButMetadata,
}

/// What the status subresource lets a writer change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum StatusUpdate {
    /// Only `status` (custom resources).
    OnlyStatus,
    /// Everything but `spec` and the listed `metadata` fields (built-in status strategies).
    KeepSpecAnd(&'static [&'static str]),
}

/// What create does with `status`.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum InitialStatus {
    /// Keep what the client sent.
    Keep,
    /// Drop it (custom resources with a status subresource).
    Remove,
    /// Replace it with this value (built-in strategies' `PrepareForCreate`).
    Set(Value),
    /// Pods: `{"phase": "Pending", "qosClass": ...}`.
    Pod,
}

/// A resource the fake serves, with the API-server behaviour that depends on its type.
///
/// [`ResourceSpec::new`] describes a custom resource (CRD semantics: generation on every
/// non-metadata change, a status subresource that only changes `status`, no strategic merge
/// patch, updates must carry a resourceVersion). The built-in registry covers the common
/// core, apps, batch, coordination, events, networking, policy, discovery and RBAC types.
#[derive(Clone, Debug, PartialEq)]
pub struct ResourceSpec {
    pub(crate) resource: ResourceRef,
    pub(crate) generation: GenerationPolicy,
    pub(crate) status: Option<StatusUpdate>,
    pub(crate) initial_status: InitialStatus,
    pub(crate) unconditional_update: bool,
    pub(crate) returns_deleted_object: bool,
    pub(crate) strategic_merge: bool,
    pub(crate) field_labels: Vec<Cow<'static, str>>,
    /// Whether server-side apply knows the keyed lists of built-in types here (custom
    /// resources: only `ObjectMeta`'s; their own lists are atomic).
    pub(crate) builtin_lists: bool,
    /// A custom resource's `openAPIV3Schema`, which decides what a `null` does (see
    /// `nulls.rs`); `None` for built-in types.
    pub(crate) schema: Option<Arc<JSONSchemaProps>>,
}

impl ResourceSpec {
    /// A custom resource served like a CRD with the status subresource enabled.
    pub fn new(resource: ResourceRef) -> Self {
        Self {
            resource,
            generation: GenerationPolicy::AllButMetadata,
            status: Some(StatusUpdate::OnlyStatus),
            initial_status: InitialStatus::Remove,
            unconditional_update: false,
            returns_deleted_object: true,
            strategic_merge: false,
            field_labels: Vec::new(),
            builtin_lists: false,
            schema: None,
        }
    }

    /// A built-in-like resource: no generation, no status subresource, unconditional
    /// updates allowed, strategic merge patch accepted.
    pub fn builtin(resource: ResourceRef) -> Self {
        Self {
            resource,
            generation: GenerationPolicy::None,
            status: None,
            initial_status: InitialStatus::Keep,
            unconditional_update: true,
            returns_deleted_object: false,
            strategic_merge: true,
            field_labels: Vec::new(),
            builtin_lists: true,
            schema: None,
        }
    }

    /// The resource described.
    pub fn resource(&self) -> &ResourceRef {
        &self.resource
    }

    /// Sets the generation policy.
    pub fn generation(mut self, policy: GenerationPolicy) -> Self {
        self.generation = policy;
        self
    }

    /// Enables or disables the `status` subresource. When disabled, create keeps `status`
    /// and update writes it like any other field.
    pub fn status_subresource(mut self, enabled: bool) -> Self {
        if enabled {
            if self.status.is_none() {
                self.status = Some(StatusUpdate::OnlyStatus);
            }
        } else {
            self.status = None;
            self.initial_status = InitialStatus::Keep;
        }
        self
    }

    /// Adds a field label usable in field selectors besides `metadata.name` and
    /// `metadata.namespace`, e.g. `spec.nodeName`; it is looked up as a dotted JSON path.
    pub fn field_label(mut self, label: impl Into<Cow<'static, str>>) -> Self {
        self.field_labels.push(label.into());
        self
    }

    /// Whether strategic merge patches are accepted (built-in types only, on a real server).
    pub fn strategic_merge(mut self, accepted: bool) -> Self {
        self.strategic_merge = accepted;
        self
    }

    /// Whether an update without `metadata.resourceVersion` is accepted.
    pub fn unconditional_update(mut self, allowed: bool) -> Self {
        self.unconditional_update = allowed;
        self
    }

    /// Whether delete answers with the deleted object (true for Pods, Services,
    /// custom resources ...) rather than a success `Status`.
    pub fn returns_deleted_object(mut self, yes: bool) -> Self {
        self.returns_deleted_object = yes;
        self
    }

    /// The custom resource's `openAPIV3Schema` (what
    /// [`FakeApi::register_crd`](crate::FakeApi::register_crd) takes from the CRD): with it,
    /// a `null` in a written object is treated as kube-apiserver does. Create, update and
    /// patch prune a `null` field that is not nullable (or give it the field's default); a
    /// server-side apply refuses it with a 422 (`spec.replicas in body must be of type
    /// integer: "null"`); a `null` kept (nullable field, array item) is refused where the
    /// schema has an `enum` or is not nullable. Nothing else of the schema is enforced, its
    /// CEL validation rules (`x-kubernetes-validations`) included.
    pub fn openapi_schema(mut self, schema: JSONSchemaProps) -> Self {
        self.schema = Some(Arc::new(schema));
        self
    }

    pub(crate) fn has_status(&self) -> bool {
        self.status.is_some()
    }

    /// The fields the strategy of an endpoint resets, which no write through it owns: the
    /// status on the main resource of a type with a status subresource; on the status
    /// subresource the spec and the metadata fields it keeps (Deployments' labels, ...).
    pub(crate) fn reset_fields(&self, status_subresource: bool) -> Vec<crate::fields::Path> {
        use crate::fields::path;
        match (&self.status, status_subresource) {
            (None, _) => Vec::new(),
            (Some(_), false) => vec![path(&["status"])],
            (Some(StatusUpdate::OnlyStatus), true) => vec![path(&["spec"])],
            (Some(StatusUpdate::KeepSpecAnd(kept)), true) => std::iter::once(path(&["spec"]))
                .chain(kept.iter().map(|f| path(&["metadata", f])))
                .collect(),
        }
    }
}

fn rr(
    group: &'static str,
    version: &'static str,
    plural: &'static str,
    kind: &'static str,
    scope: Scope,
) -> ResourceRef {
    ResourceRef {
        group: Cow::Borrowed(group),
        version: Cow::Borrowed(version),
        plural: Cow::Borrowed(plural),
        kind: Cow::Borrowed(kind),
        scope,
    }
}

/// The built-in registry.
pub(crate) fn builtins() -> Vec<ResourceSpec> {
    use GenerationPolicy as G;
    use Scope::{Cluster, Namespaced as Ns};
    let b = ResourceSpec::builtin;
    let workload = |r: ResourceRef| {
        let mut s = b(r).generation(G::Spec);
        s.status = Some(StatusUpdate::KeepSpecAnd(&[]));
        s.initial_status = InitialStatus::Set(json!({}));
        s
    };
    let with_status = |r: ResourceRef, initial: InitialStatus| {
        let mut s = b(r);
        s.status = Some(StatusUpdate::KeepSpecAnd(&[]));
        s.initial_status = initial;
        s
    };
    let mut deployments = workload(rr("apps", "v1", "deployments", "Deployment", Ns))
        .generation(G::SpecAndAnnotations);
    deployments.status = Some(StatusUpdate::KeepSpecAnd(&["labels"]));
    let mut pods = b(rr("", "v1", "pods", "Pod", Ns))
        .generation(G::Spec)
        .returns_deleted_object(true);
    pods.status = Some(StatusUpdate::KeepSpecAnd(&[
        "ownerReferences",
        "deletionTimestamp",
    ]));
    pods.initial_status = InitialStatus::Pod;
    for l in [
        "spec.nodeName",
        "spec.restartPolicy",
        "spec.schedulerName",
        "spec.serviceAccountName",
        "spec.hostNetwork",
        "status.phase",
        "status.podIP",
        "status.nominatedNodeName",
    ] {
        pods = pods.field_label(l);
    }
    let mut core_events = b(rr("", "v1", "events", "Event", Ns));
    for l in [
        "involvedObject.kind",
        "involvedObject.namespace",
        "involvedObject.name",
        "involvedObject.uid",
        "involvedObject.apiVersion",
        "involvedObject.resourceVersion",
        "involvedObject.fieldPath",
        "reason",
        "reportingComponent",
        "source",
        "type",
    ] {
        core_events = core_events.field_label(l);
    }
    vec![
        pods,
        b(rr("", "v1", "configmaps", "ConfigMap", Ns)),
        b(rr("", "v1", "secrets", "Secret", Ns)).field_label("type"),
        with_status(
            rr("", "v1", "services", "Service", Ns),
            InitialStatus::Set(json!({"loadBalancer": {}})),
        )
        .returns_deleted_object(true)
        .field_label("spec.clusterIP")
        .field_label("spec.type"),
        with_status(
            rr("", "v1", "namespaces", "Namespace", Cluster),
            InitialStatus::Set(json!({"phase": "Active"})),
        )
        .returns_deleted_object(true)
        .field_label("status.phase"),
        with_status(rr("", "v1", "nodes", "Node", Cluster), InitialStatus::Keep)
            .field_label("spec.unschedulable"),
        core_events,
        b(rr("", "v1", "serviceaccounts", "ServiceAccount", Ns)).returns_deleted_object(true),
        b(rr("", "v1", "endpoints", "Endpoints", Ns)),
        b(rr("", "v1", "podtemplates", "PodTemplate", Ns)).returns_deleted_object(true),
        with_status(
            rr(
                "",
                "v1",
                "persistentvolumeclaims",
                "PersistentVolumeClaim",
                Ns,
            ),
            InitialStatus::Keep,
        )
        .returns_deleted_object(true),
        with_status(
            rr("", "v1", "persistentvolumes", "PersistentVolume", Cluster),
            InitialStatus::Keep,
        )
        .returns_deleted_object(true),
        deployments,
        workload(rr("apps", "v1", "replicasets", "ReplicaSet", Ns)),
        workload(rr("apps", "v1", "statefulsets", "StatefulSet", Ns)),
        workload(rr("apps", "v1", "daemonsets", "DaemonSet", Ns)),
        b(rr(
            "apps",
            "v1",
            "controllerrevisions",
            "ControllerRevision",
            Ns,
        )),
        workload(rr("batch", "v1", "jobs", "Job", Ns)),
        workload(rr("batch", "v1", "cronjobs", "CronJob", Ns)),
        workload(rr(
            "policy",
            "v1",
            "poddisruptionbudgets",
            "PodDisruptionBudget",
            Ns,
        )),
        workload(rr("networking.k8s.io", "v1", "ingresses", "Ingress", Ns)),
        b(rr(
            "networking.k8s.io",
            "v1",
            "networkpolicies",
            "NetworkPolicy",
            Ns,
        ))
        .generation(G::Spec),
        b(rr("coordination.k8s.io", "v1", "leases", "Lease", Ns)),
        b(rr("events.k8s.io", "v1", "events", "Event", Ns))
            .field_label("reason")
            .field_label("type")
            .field_label("regarding.kind")
            .field_label("regarding.name")
            .field_label("regarding.namespace")
            .field_label("regarding.uid"),
        b(rr(
            "discovery.k8s.io",
            "v1",
            "endpointslices",
            "EndpointSlice",
            Ns,
        )),
        b(rr("rbac.authorization.k8s.io", "v1", "roles", "Role", Ns)),
        b(rr(
            "rbac.authorization.k8s.io",
            "v1",
            "rolebindings",
            "RoleBinding",
            Ns,
        )),
        b(rr(
            "rbac.authorization.k8s.io",
            "v1",
            "clusterroles",
            "ClusterRole",
            Cluster,
        )),
        b(rr(
            "rbac.authorization.k8s.io",
            "v1",
            "clusterrolebindings",
            "ClusterRoleBinding",
            Cluster,
        )),
    ]
}

/// The QoS class of a pod JSON, as `qos.GetPodQOS` computes it (simplified: requests
/// default to limits; only cpu and memory count).
pub(crate) fn pod_qos(pod: &Value) -> &'static str {
    let mut containers: Vec<&Value> = Vec::new();
    for field in ["containers", "initContainers"] {
        if let Some(Value::Array(cs)) = pod.pointer(&format!("/spec/{field}")) {
            containers.extend(cs);
        }
    }
    let mut any = false;
    let mut guaranteed = !containers.is_empty();
    for c in containers {
        let limits = c.pointer("/resources/limits");
        let requests = c.pointer("/resources/requests");
        for res in ["cpu", "memory"] {
            let l = limits.and_then(|m| m.get(res));
            let r = requests.and_then(|m| m.get(res)).or(l);
            if l.is_some() || r.is_some() {
                any = true;
            }
            if l.is_none() || r != l {
                guaranteed = false;
            }
        }
    }
    if !any {
        "BestEffort"
    } else if guaranteed {
        "Guaranteed"
    } else {
        "Burstable"
    }
}

//! The object tracker: objects, the global resourceVersion, event history and watchers.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;

use bytes::Bytes;
use k8s_openapi::jiff::Timestamp;
use kctrl_client::{
    DeleteParams, Error, ListParams, Patch, PatchParams, PostParams, PropagationPolicy,
    ResourceRef, ResourceVersionMatch, WatchParams,
};
use serde_json::{Map, Value, json};
use tokio::sync::mpsc;

use crate::action::{Action, Reactor};
use crate::apply::{self, ApplyError, Schema};
use crate::errors::{self, FieldError};
use crate::managed::{self, Manager};
use crate::nulls;
use crate::patch;
use crate::registry::{GenerationPolicy, InitialStatus, ResourceSpec, StatusUpdate, pod_qos};
use crate::select::Filter;

/// Storage key of a resource: group, version, plural.
pub(crate) type Key = (String, String, String);
type ObjKey = (String, String);

pub(crate) fn key_of(r: &ResourceRef) -> Key {
    (
        r.group.to_string(),
        r.version.to_string(),
        r.plural.to_string(),
    )
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum EventType {
    Added,
    Modified,
    Deleted,
}

struct HistoryEvent {
    rv: u64,
    key: Key,
    kind: EventType,
    obj: Arc<Value>,
    prev: Option<Arc<Value>>,
}

struct Watcher {
    key: Key,
    namespace: Option<String>,
    filter: Filter,
    bookmarks: bool,
    api_version: String,
    kind: String,
    tx: mpsc::UnboundedSender<Bytes>,
}

impl Watcher {
    /// The frame this watcher sees for an event, following the watch cache: an object that
    /// starts matching is ADDED, stops matching is DELETED (its previous state at the new RV).
    fn frame_for(&self, ev: &HistoryEvent) -> Option<Bytes> {
        if ev.key != self.key {
            return None;
        }
        if let Some(ns) = &self.namespace
            && meta_str(&ev.obj, "namespace").unwrap_or("") != ns
        {
            return None;
        }
        let cur = ev.kind != EventType::Deleted && self.filter.matches(&ev.obj);
        let old = match ev.kind {
            EventType::Deleted => self.filter.matches(&ev.obj),
            _ => ev.prev.as_deref().is_some_and(|p| self.filter.matches(p)),
        };
        match (cur, old) {
            (true, false) => Some(frame("ADDED", &ev.obj)),
            (true, true) => Some(frame("MODIFIED", &ev.obj)),
            (false, true) if ev.kind == EventType::Deleted => Some(frame("DELETED", &ev.obj)),
            (false, true) => {
                let mut prev = ev.prev.as_deref().cloned().unwrap_or(Value::Null);
                set_meta(&mut prev, "resourceVersion", ev.rv.to_string().into());
                Some(frame("DELETED", &prev))
            }
            (false, false) => None,
        }
    }

    fn bookmark(&self, rv: u64, initial_end: bool) -> Bytes {
        let mut metadata = json!({"resourceVersion": rv.to_string()});
        if initial_end {
            let mut annotations = Map::new();
            annotations.insert(
                kctrl_client::INITIAL_EVENTS_END_ANNOTATION.to_owned(),
                "true".into(),
            );
            metadata["annotations"] = Value::Object(annotations);
        }
        frame(
            "BOOKMARK",
            &json!({"kind": self.kind, "apiVersion": self.api_version, "metadata": metadata}),
        )
    }
}

pub(crate) fn frame(kind: &str, object: &Value) -> Bytes {
    let mut out = Vec::with_capacity(64);
    out.extend_from_slice(b"{\"type\":\"");
    out.extend_from_slice(kind.as_bytes());
    out.extend_from_slice(b"\",\"object\":");
    // Serializing a Value into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut out, object);
    out.push(b'}');
    Bytes::from(out)
}

pub(crate) struct State {
    rv: u64,
    specs: HashMap<Key, ResourceSpec>,
    objects: HashMap<Key, BTreeMap<ObjKey, Arc<Value>>>,
    history: VecDeque<HistoryEvent>,
    history_limit: usize,
    compacted: u64,
    watchers: Vec<Watcher>,
    pub(crate) actions: Vec<Action>,
    pub(crate) reactors: Vec<Reactor>,
}

fn meta_str<'a>(obj: &'a Value, field: &str) -> Option<&'a str> {
    obj.get("metadata")?.get(field)?.as_str()
}

fn meta_mut(obj: &mut Value) -> &mut Map<String, Value> {
    if !obj.is_object() {
        *obj = Value::Object(Map::new());
    }
    let Value::Object(o) = obj else {
        unreachable!("just made an object")
    };
    let m = o
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    if !m.is_object() {
        *m = Value::Object(Map::new());
    }
    match m {
        Value::Object(m) => m,
        _ => unreachable!("just made an object"),
    }
}

fn set_meta(obj: &mut Value, field: &str, value: Value) {
    meta_mut(obj).insert(field.to_owned(), value);
}

/// Copies `metadata.<field>` from `from` into `to`, removing it when `from` lacks it.
fn copy_meta(to: &mut Value, from: &Value, field: &str) {
    match from.get("metadata").and_then(|m| m.get(field)) {
        Some(v) => set_meta(to, field, v.clone()),
        None => {
            meta_mut(to).remove(field);
        }
    }
}

/// Copies the top-level `field` from `from` into `to`, removing it when `from` lacks it.
fn copy_field(to: &mut Value, from: &Value, field: &str) {
    let Value::Object(t) = to else { return };
    match from.get(field) {
        Some(v) => t.insert(field.to_owned(), v.clone()),
        None => t.remove(field),
    };
}

fn generation(obj: &Value) -> i64 {
    obj.pointer("/metadata/generation")
        .and_then(Value::as_i64)
        .unwrap_or(0)
}

/// The object without the fields that never count as a change.
fn without_rv(obj: &Value) -> Value {
    let mut o = obj.clone();
    meta_mut(&mut o).remove("resourceVersion");
    o
}

fn decode_body(body: &[u8]) -> Result<Value, Error> {
    match serde_json::from_slice::<Value>(body) {
        Ok(v @ Value::Object(_)) => Ok(v),
        Ok(_) => Err(errors::bad_request(
            "the body of the request is not a JSON object",
        )),
        Err(e) => Err(errors::bad_request(format!(
            "the body of the request could not be decoded: {e}"
        ))),
    }
}

/// `Deployment.apps` group and kind of a spec for Invalid/precondition errors.
fn group_kind(spec: &ResourceSpec) -> (&str, &str) {
    (&spec.resource.group, &spec.resource.kind)
}

impl State {
    pub(crate) fn new(history_limit: usize) -> Self {
        let mut specs = HashMap::new();
        for s in crate::registry::builtins() {
            specs.insert(key_of(&s.resource), s);
        }
        Self {
            rv: 1,
            specs,
            objects: HashMap::new(),
            history: VecDeque::new(),
            history_limit,
            compacted: 1,
            watchers: Vec::new(),
            actions: Vec::new(),
            reactors: Vec::new(),
        }
    }

    pub(crate) fn register(&mut self, spec: ResourceSpec) {
        self.specs.insert(key_of(&spec.resource), spec);
    }

    pub(crate) fn specs(&self) -> impl Iterator<Item = &ResourceSpec> {
        self.specs.values()
    }

    pub(crate) fn resource_version(&self) -> u64 {
        self.rv
    }

    fn spec(&self, r: &ResourceRef) -> Result<ResourceSpec, Error> {
        self.specs
            .get(&key_of(r))
            .cloned()
            .ok_or_else(|| errors::no_such_resource(r))
    }

    /// The namespace an object-addressing request works in.
    fn namespace(spec: &ResourceSpec, ns: Option<&str>) -> Result<String, Error> {
        if !spec.resource.is_namespaced() {
            return Ok(String::new());
        }
        match ns {
            Some(ns) if !ns.is_empty() => Ok(ns.to_owned()),
            _ => Err(errors::bad_request(format!(
                "a namespace is required for the namespaced resource {}",
                spec.resource.qualified_name()
            ))),
        }
    }

    fn stored(&self, spec: &ResourceSpec, ns: &str, name: &str) -> Option<Arc<Value>> {
        self.objects
            .get(&key_of(&spec.resource))?
            .get(&(ns.to_owned(), name.to_owned()))
            .cloned()
    }

    pub(crate) fn get_value(&self, r: &ResourceRef, ns: Option<&str>, name: &str) -> Option<Value> {
        let ns = if r.is_namespaced() {
            ns.unwrap_or("")
        } else {
            ""
        };
        self.objects
            .get(&key_of(r))?
            .get(&(ns.to_owned(), name.to_owned()))
            .map(|v| (**v).clone())
    }

    pub(crate) fn values(&self, r: &ResourceRef) -> Vec<Value> {
        self.objects
            .get(&key_of(r))
            .map(|m| m.values().map(|v| (**v).clone()).collect())
            .unwrap_or_default()
    }

    /// Stores a change under a new resourceVersion, records it and notifies watchers.
    fn commit(
        &mut self,
        spec: &ResourceSpec,
        kind: EventType,
        mut obj: Value,
        prev: Option<Arc<Value>>,
    ) -> Arc<Value> {
        self.rv += 1;
        let rv = self.rv;
        set_meta(&mut obj, "resourceVersion", rv.to_string().into());
        let obj = Arc::new(obj);
        let key = key_of(&spec.resource);
        let okey = (
            meta_str(&obj, "namespace").unwrap_or("").to_owned(),
            meta_str(&obj, "name").unwrap_or("").to_owned(),
        );
        let objects = self.objects.entry(key.clone()).or_default();
        if kind == EventType::Deleted {
            objects.remove(&okey);
        } else {
            objects.insert(okey, obj.clone());
        }
        let ev = HistoryEvent {
            rv,
            key,
            kind,
            obj: obj.clone(),
            prev,
        };
        self.watchers.retain(|w| match w.frame_for(&ev) {
            Some(f) => w.tx.send(f).is_ok(),
            None => !w.tx.is_closed(),
        });
        self.history.push_back(ev);
        while self.history.len() > self.history_limit {
            if let Some(old) = self.history.pop_front() {
                self.compacted = old.rv;
            }
        }
        obj
    }

    // ---- reads ----

    pub(crate) fn get(
        &self,
        r: &ResourceRef,
        ns: Option<&str>,
        name: &str,
    ) -> Result<Value, Error> {
        let spec = self.spec(r)?;
        let ns = Self::namespace(&spec, ns)?;
        self.stored(&spec, &ns, name)
            .map(|v| (*v).clone())
            .ok_or_else(|| errors::not_found(r, name))
    }

    pub(crate) fn list(
        &self,
        r: &ResourceRef,
        ns: Option<&str>,
        params: &ListParams,
    ) -> Result<Value, Error> {
        let spec = self.spec(r)?;
        let filter = Filter::parse(
            &spec,
            params.label_selector.as_deref(),
            params.field_selector.as_deref(),
        )?;
        let (list_rv, after) = match params.continue_token.as_deref().filter(|t| !t.is_empty()) {
            Some(token) => {
                let (rv, ns, name) = decode_continue(token).ok_or_else(|| {
                    errors::bad_request("continue key is not valid: malformed token")
                })?;
                (rv, Some((ns, name)))
            }
            None => (self.rv, None),
        };
        let ns = if spec.resource.is_namespaced() {
            ns.filter(|n| !n.is_empty())
        } else {
            None
        };
        let mut items = Vec::new();
        let mut remaining = 0usize;
        let mut last: Option<ObjKey> = None;
        let limit = params.limit.filter(|l| *l > 0).map(|l| l as usize);
        if let Some(objs) = self.objects.get(&key_of(r)) {
            for ((ons, oname), obj) in objs {
                if ns.is_some_and(|n| n != ons) {
                    continue;
                }
                if let Some((ans, aname)) = &after
                    && (ons, oname) <= (ans, aname)
                {
                    continue;
                }
                if !filter.matches(obj) {
                    continue;
                }
                if limit.is_some_and(|l| items.len() >= l) {
                    remaining += 1;
                    continue;
                }
                last = Some((ons.clone(), oname.clone()));
                items.push((**obj).clone());
            }
        }
        let mut metadata = json!({"resourceVersion": list_rv.to_string()});
        if remaining > 0
            && let Some((lns, lname)) = last
        {
            metadata["continue"] = encode_continue(list_rv, &lns, &lname).into();
            if filter.is_empty() {
                metadata["remainingItemCount"] = remaining.into();
            }
        }
        Ok(json!({
            "kind": format!("{}List", spec.resource.kind),
            "apiVersion": spec.resource.api_version(),
            "metadata": metadata,
            "items": items,
        }))
    }

    // ---- writes ----

    /// Stores an object as given (seeding), assigning what the server always sets.
    pub(crate) fn seed(&mut self, r: &ResourceRef, mut obj: Value) -> Result<Value, Error> {
        let spec = self.spec(r)?;
        if !obj.is_object() {
            return Err(errors::bad_request("the object is not a JSON object"));
        }
        let ns = meta_str(&obj, "namespace").map(str::to_owned);
        let ns = Self::namespace(&spec, ns.as_deref())?;
        let name = meta_str(&obj, "name").unwrap_or("").to_owned();
        if name.is_empty() {
            return Err(errors::bad_request("the object has no metadata.name"));
        }
        set_type(&spec, &mut obj);
        let m = meta_mut(&mut obj);
        if spec.resource.is_namespaced() {
            m.insert("namespace".into(), ns.clone().into());
        } else {
            m.remove("namespace");
        }
        m.entry("uid")
            .or_insert_with(|| kctrl_client::uuid::new_v4().into());
        m.entry("creationTimestamp").or_insert_with(|| now().into());
        if spec.generation != GenerationPolicy::None {
            m.entry("generation").or_insert_with(|| 1.into());
        }
        let prev = self.stored(&spec, &ns, &name);
        let kind = if prev.is_some() {
            EventType::Modified
        } else {
            EventType::Added
        };
        Ok((*self.commit(&spec, kind, obj, prev)).clone())
    }

    pub(crate) fn create(
        &mut self,
        r: &ResourceRef,
        ns: Option<&str>,
        body: &[u8],
        params: &PostParams,
    ) -> Result<Value, Error> {
        let spec = self.spec(r)?;
        let manager = field_manager(params.field_manager.as_deref(), "CreateOptions")?;
        let mut obj = decode_body(body)?;
        prune_written_nulls(&spec, &mut obj);
        self.create_object(&spec, ns, obj, params.dry_run, Tracking::Update(manager))
    }

    /// The common tail of create and of an apply that creates: names, system metadata,
    /// initial status, managers.
    fn create_object(
        &mut self,
        spec: &ResourceSpec,
        ns: Option<&str>,
        mut obj: Value,
        dry_run: bool,
        tracking: Tracking,
    ) -> Result<Value, Error> {
        let spec = spec.clone();
        let r = &spec.resource;
        let ns = Self::namespace(&spec, ns)?;
        check_namespace(&spec, &mut obj, &ns)?;
        if meta_str(&obj, "resourceVersion").is_some_and(|rv| !rv.is_empty()) {
            return Err(errors::internal_error(
                "resourceVersion should not be set on objects to be created",
            ));
        }
        let generate = meta_str(&obj, "generateName").unwrap_or("").to_owned();
        let mut name = meta_str(&obj, "name").unwrap_or("").to_owned();
        let (group, kind) = group_kind(&spec);
        if name.is_empty() && generate.is_empty() {
            return Err(errors::invalid(
                group,
                kind,
                "",
                &[FieldError::required(
                    "metadata.name",
                    "name or generateName is required",
                )],
            ));
        }
        let generated = name.is_empty();
        if generated {
            // The apiserver retries a generated name that collides (RetryGenerateName).
            for _ in 0..8 {
                name = generate_name(&generate);
                if self.stored(&spec, &ns, &name).is_none() {
                    break;
                }
            }
        }
        if self.stored(&spec, &ns, &name).is_some() {
            return Err(errors::already_exists(r, &name));
        }
        set_type(&spec, &mut obj);
        let m = meta_mut(&mut obj);
        m.insert("name".into(), name.into());
        m.insert("uid".into(), kctrl_client::uuid::new_v4().into());
        m.insert("creationTimestamp".into(), now().into());
        for f in [
            "resourceVersion",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "selfLink",
            "generation",
        ] {
            m.remove(f);
        }
        if spec.generation != GenerationPolicy::None {
            m.insert("generation".into(), 1.into());
        }
        if let Value::Object(o) = &mut obj {
            match &spec.initial_status {
                InitialStatus::Keep => {}
                InitialStatus::Remove => {
                    o.remove("status");
                }
                InitialStatus::Set(v) => {
                    o.insert("status".into(), v.clone());
                }
                InitialStatus::Pod => {
                    let qos = pod_qos(&Value::Object(o.clone()));
                    o.insert(
                        "status".into(),
                        json!({"phase": "Pending", "qosClass": qos}),
                    );
                }
            }
        }
        check_nulls(&spec, &obj)?;
        let managers = match tracking {
            Tracking::Update(manager) => writer(&spec, &manager, false).update(None, &obj),
            Tracking::Applied(managers) => Some(managers),
        };
        set_managers(&mut obj, None, managers);
        if dry_run {
            return Ok(obj);
        }
        Ok((*self.commit(&spec, EventType::Added, obj, None)).clone())
    }

    pub(crate) fn update(
        &mut self,
        r: &ResourceRef,
        ns: Option<&str>,
        subresource: Option<&str>,
        name: &str,
        body: &[u8],
        params: &PostParams,
    ) -> Result<Value, Error> {
        let spec = self.spec(r)?;
        let status = check_subresource(&spec, subresource)?;
        let manager = field_manager(params.field_manager.as_deref(), "UpdateOptions")?;
        let mut obj = decode_body(body)?;
        prune_written_nulls(&spec, &mut obj);
        let ns = Self::namespace(&spec, ns)?;
        check_namespace(&spec, &mut obj, &ns)?;
        check_name(&obj, name)?;
        let existing = self
            .stored(&spec, &ns, name)
            .ok_or_else(|| errors::not_found(r, name))?;
        // Preconditions from the object (its UID) are checked by storage first.
        if let Some(uid) = meta_str(&obj, "uid").filter(|u| !u.is_empty()) {
            let current = meta_str(&existing, "uid").unwrap_or("");
            if uid != current {
                return Err(errors::conflict(
                    r,
                    name,
                    &format!(
                        "StorageError: invalid object, Code: 4, Key: {}, ResourceVersion: 0, \
                         AdditionalErrorMsg: Precondition failed: UID in precondition: {uid}, \
                         UID in object meta: {current}",
                        storage_key(&spec, &ns, name)
                    ),
                ));
            }
        }
        self.write(
            &spec,
            existing,
            obj,
            status,
            params.dry_run,
            Tracking::Update(manager),
        )
    }

    pub(crate) fn patch(
        &mut self,
        r: &ResourceRef,
        ns: Option<&str>,
        subresource: Option<&str>,
        name: &str,
        patch: &Patch,
        params: &PatchParams,
    ) -> Result<Value, Error> {
        let spec = self.spec(r)?;
        let status = check_subresource(&spec, subresource)?;
        let manager = patch_field_manager(patch, params)?;
        if let Patch::Apply(config) = patch {
            return self.apply(&spec, ns, status, name, config, &manager, params);
        }
        if matches!(patch, Patch::Strategic(_)) && !spec.strategic_merge {
            return Err(errors::unsupported_patch_type());
        }
        let ns = Self::namespace(&spec, ns)?;
        let existing = self
            .stored(&spec, &ns, name)
            .ok_or_else(|| errors::not_found(r, name))?;
        let mut obj = (*existing).clone();
        match patch {
            Patch::Merge(p) => {
                if !p.is_object() {
                    return Err(errors::bad_request("a merge patch must be a JSON object"));
                }
                patch::merge(&mut obj, p);
            }
            Patch::Strategic(p) => {
                if !p.is_object() {
                    return Err(errors::bad_request(
                        "a strategic merge patch must be a JSON object",
                    ));
                }
                patch::strategic(&mut obj, p).map_err(errors::bad_request)?;
            }
            Patch::Json(ops) => {
                patch::json_patch(&mut obj, ops).map_err(errors::unprocessable)?;
            }
            Patch::Apply(_) => unreachable!("applies return above"),
        }
        if !obj.is_object() {
            return Err(errors::bad_request(
                "the patched object is not a JSON object",
            ));
        }
        check_namespace(&spec, &mut obj, &ns)?;
        check_name(&obj, name)?;
        prune_written_nulls(&spec, &mut obj);
        dedup_owner_references(&mut obj);
        check_uid_unchanged(&spec, &existing, &obj, name)?;
        self.write(
            &spec,
            existing,
            obj,
            status,
            params.dry_run,
            Tracking::Update(manager),
        )
    }

    /// A server-side apply: checks the configuration as the apiserver does, then merges it
    /// into the stored object (or creates the object) and records field ownership.
    #[allow(clippy::too_many_arguments, reason = "one request's parts")]
    fn apply(
        &mut self,
        spec: &ResourceSpec,
        ns: Option<&str>,
        status: bool,
        name: &str,
        config: &Value,
        manager: &str,
        params: &PatchParams,
    ) -> Result<Value, Error> {
        let Value::Object(_) = config else {
            return Err(errors::bad_request(
                "error decoding patch: an apply configuration must be a JSON object",
            ));
        };
        let mut config = config.clone();
        let api_version = config
            .get("apiVersion")
            .and_then(Value::as_str)
            .unwrap_or("");
        let kind = config.get("kind").and_then(Value::as_str).unwrap_or("");
        if api_version != spec.resource.api_version() || kind != spec.resource.kind {
            let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
            return Err(errors::bad_request(format!(
                "invalid object type: {group}/{version}, Kind={kind}"
            )));
        }
        if config
            .pointer("/metadata/managedFields")
            .is_some_and(|m| !m.is_null())
        {
            return Err(errors::bad_request("metadata.managedFields must be nil"));
        }
        match meta_str(&config, "name") {
            Some(n) if !n.is_empty() => check_name(&config, name)?,
            _ => set_meta(&mut config, "name", name.into()),
        }
        let ns = Self::namespace(spec, ns)?;
        check_namespace(spec, &mut config, &ns)?;
        let write = writer(spec, manager, status);
        let existing = self.stored(spec, &ns, name);
        if existing.is_none() && status {
            return Err(errors::not_found(&spec.resource, name));
        }
        let (mut obj, managers) = write
            .apply(existing.as_deref(), &config, params.force)
            .map_err(|e| match e {
                ApplyError::Conflicts(conflicts) => errors::apply_conflict(&conflicts),
                ApplyError::Invalid(why) => errors::bad_request(why),
                ApplyError::Internal(why) => {
                    errors::internal_error(&format!("failed to decode managed fields: {why}"))
                }
            })?;
        match &spec.schema {
            Some(schema) => nulls::prune_on_apply(&mut obj, schema),
            None if spec.builtin_lists && nulls::contains_null(&obj) => {
                nulls::decode_builtin(&mut obj, &spec.resource.kind)
            }
            // A custom resource served without its schema keeps what it was sent.
            None => {}
        }
        match existing {
            None => self.create_object(
                spec,
                Some(&ns),
                obj,
                params.dry_run,
                Tracking::Applied(managers),
            ),
            Some(existing) => {
                check_uid_unchanged(spec, &existing, &obj, name)?;
                self.write(
                    spec,
                    existing,
                    obj,
                    status,
                    params.dry_run,
                    Tracking::Applied(managers),
                )
            }
        }
    }

    /// The common tail of update and patch: optimistic concurrency, the strategy's field
    /// resets, generation, no-op detection, finalizer-driven deletion.
    fn write(
        &mut self,
        spec: &ResourceSpec,
        existing: Arc<Value>,
        mut obj: Value,
        status: bool,
        dry_run: bool,
        tracking: Tracking,
    ) -> Result<Value, Error> {
        let name = meta_str(&existing, "name").unwrap_or("").to_owned();
        let (group, kind) = group_kind(spec);
        match meta_str(&obj, "resourceVersion").filter(|v| !v.is_empty()) {
            None if !spec.unconditional_update => {
                return Err(errors::invalid(
                    group,
                    kind,
                    &name,
                    &[FieldError {
                        field: "metadata.resourceVersion".into(),
                        cause_type: "FieldValueInvalid".into(),
                        body: "Invalid value: 0x0: must be specified for an update".into(),
                    }],
                ));
            }
            Some(rv) if Some(rv) != meta_str(&existing, "resourceVersion") => {
                return Err(errors::stale_update_conflict(&spec.resource, &name));
            }
            _ => {}
        }
        set_type(spec, &mut obj);
        if status {
            match &spec.status {
                Some(StatusUpdate::OnlyStatus) | None => {
                    let mut next = (*existing).clone();
                    copy_field(&mut next, &obj, "status");
                    obj = next;
                }
                Some(StatusUpdate::KeepSpecAnd(fields)) => {
                    copy_field(&mut obj, &existing, "spec");
                    for f in *fields {
                        copy_meta(&mut obj, &existing, f);
                    }
                }
            }
        } else if spec.has_status() {
            copy_field(&mut obj, &existing, "status");
        }
        for f in [
            "uid",
            "creationTimestamp",
            "generation",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "namespace",
            "name",
        ] {
            copy_meta(&mut obj, &existing, f);
        }
        meta_mut(&mut obj).remove("selfLink");
        check_nulls(spec, &obj)?;
        let managers = match tracking {
            Tracking::Update(manager) => {
                writer(spec, &manager, status).update(Some(&existing), &obj)
            }
            Tracking::Applied(managers) => Some(managers),
        };
        set_managers(&mut obj, Some(&existing), managers);
        if !status && generation_changed(spec, &existing, &obj) {
            let g = generation(&existing) + 1;
            set_meta(&mut obj, "generation", g.into());
        }
        set_meta(
            &mut obj,
            "resourceVersion",
            existing
                .pointer("/metadata/resourceVersion")
                .cloned()
                .unwrap_or(Value::Null),
        );
        // The apiserver does not write an update that changes nothing.
        if without_rv(&obj) == without_rv(&existing) {
            return Ok((*existing).clone());
        }
        if dry_run {
            return Ok(obj);
        }
        let finalized = existing.pointer("/metadata/deletionTimestamp").is_some()
            && obj
                .pointer("/metadata/finalizers")
                .and_then(Value::as_array)
                .is_none_or(Vec::is_empty);
        let kind = if finalized {
            EventType::Deleted
        } else {
            EventType::Modified
        };
        Ok((*self.commit(spec, kind, obj, Some(existing))).clone())
    }

    pub(crate) fn delete(
        &mut self,
        r: &ResourceRef,
        ns: Option<&str>,
        name: &str,
        params: &DeleteParams,
    ) -> Result<Value, Error> {
        let spec = self.spec(r)?;
        let ns = Self::namespace(&spec, ns)?;
        let existing = self
            .stored(&spec, &ns, name)
            .ok_or_else(|| errors::not_found(r, name))?;
        let (group, kind) = group_kind(&spec);
        if let Some(p) = &params.preconditions {
            let uid = meta_str(&existing, "uid").unwrap_or("");
            let rv = meta_str(&existing, "resourceVersion").unwrap_or("");
            if let Some(want) = p.uid.as_deref().filter(|u| *u != uid) {
                return Err(errors::conflict_on(
                    group,
                    kind,
                    name,
                    &format!(
                        "the UID in the precondition ({want}) does not match the UID in record \
                         ({uid}). The object might have been deleted and then recreated"
                    ),
                ));
            }
            if let Some(want) = p.resource_version.as_deref().filter(|v| *v != rv) {
                return Err(errors::conflict_on(
                    group,
                    kind,
                    name,
                    &format!(
                        "the ResourceVersion in the precondition ({want}) does not match the \
                         ResourceVersion in record ({rv}). The object might have been modified"
                    ),
                ));
            }
        }
        // Propagation policies are accepted; without a garbage collector all behave as
        // Background with no dependents to collect.
        let _: Option<PropagationPolicy> = params.propagation_policy;
        let has_finalizers = existing
            .pointer("/metadata/finalizers")
            .and_then(Value::as_array)
            .is_some_and(|f| !f.is_empty());
        if has_finalizers {
            if existing.pointer("/metadata/deletionTimestamp").is_some() || params.dry_run {
                return Ok((*existing).clone());
            }
            let mut obj = (*existing).clone();
            set_meta(&mut obj, "deletionTimestamp", now().into());
            set_meta(&mut obj, "deletionGracePeriodSeconds", 0.into());
            let g = generation(&obj);
            if g > 0 {
                set_meta(&mut obj, "generation", (g + 1).into());
            }
            return Ok((*self.commit(&spec, EventType::Modified, obj, Some(existing))).clone());
        }
        let deleted = if params.dry_run {
            (*existing).clone()
        } else {
            let last = (*existing).clone();
            (*self.commit(&spec, EventType::Deleted, last, Some(existing.clone()))).clone()
        };
        if spec.returns_deleted_object {
            return Ok(deleted);
        }
        let mut details = json!({"name": name, "kind": spec.resource.plural});
        if !spec.resource.group.is_empty() {
            details["group"] = spec.resource.group.to_string().into();
        }
        if let Some(uid) = meta_str(&existing, "uid") {
            details["uid"] = uid.into();
        }
        Ok(json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Success",
            "details": details,
        }))
    }

    // ---- watch ----

    /// Opens a watch: queues the initial frames (or a 410 ERROR) and registers the watcher.
    pub(crate) fn watch(
        &mut self,
        r: &ResourceRef,
        ns: Option<&str>,
        params: &WatchParams,
    ) -> Result<mpsc::UnboundedReceiver<Bytes>, Error> {
        let spec = self.spec(r)?;
        let mut errs = Vec::new();
        if params.send_initial_events
            && params.resource_version_match != Some(ResourceVersionMatch::NotOlderThan)
        {
            errs.push(FieldError::forbidden(
                "resourceVersionMatch",
                "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
            ));
        }
        if let Some(m) = params.resource_version_match {
            if !params.send_initial_events {
                errs.push(FieldError::forbidden(
                    "resourceVersionMatch",
                    "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
                ));
            }
            if m != ResourceVersionMatch::NotOlderThan {
                errs.push(FieldError {
                    field: "resourceVersionMatch".into(),
                    cause_type: "FieldValueNotSupported".into(),
                    body: format!(
                        "Unsupported value: {:?}: supported values: \"NotOlderThan\"",
                        m.as_str()
                    ),
                });
            }
        }
        if !errs.is_empty() {
            return Err(errors::invalid("meta.k8s.io", "ListOptions", "", &errs));
        }
        let filter = Filter::parse(
            &spec,
            params.label_selector.as_deref(),
            params.field_selector.as_deref(),
        )?;
        let start = match params.resource_version.as_deref().filter(|v| !v.is_empty()) {
            None | Some("0") => None,
            Some(v) => Some(
                v.parse::<u64>()
                    .map_err(|_| errors::bad_request(format!("invalid resource version: {v:?}")))?,
            ),
        };
        let (tx, rx) = mpsc::unbounded_channel();
        let watcher = Watcher {
            key: key_of(r),
            namespace: if spec.resource.is_namespaced() {
                ns.filter(|n| !n.is_empty()).map(str::to_owned)
            } else {
                None
            },
            filter,
            bookmarks: params.allow_watch_bookmarks,
            api_version: spec.resource.api_version(),
            kind: spec.resource.kind.to_string(),
            tx,
        };
        let initial = params.send_initial_events || start.is_none();
        if initial {
            if let Some(objs) = self.objects.get(&watcher.key) {
                for ((ons, _), obj) in objs {
                    if watcher.namespace.as_ref().is_some_and(|n| n != ons) {
                        continue;
                    }
                    if watcher.filter.matches(obj) {
                        let _ = watcher.tx.send(frame("ADDED", obj));
                    }
                }
            }
            if params.send_initial_events && params.allow_watch_bookmarks {
                let _ = watcher.tx.send(watcher.bookmark(self.rv, true));
            }
        } else if let Some(from) = start {
            if from < self.compacted {
                let err = errors::expired(format!(
                    "too old resource version: {from} ({})",
                    self.compacted
                ));
                let _ = watcher.tx.send(frame("ERROR", &errors::status_json(&err)));
                return Ok(rx);
            }
            for ev in self.history.iter().filter(|e| e.rv > from) {
                if let Some(f) = watcher.frame_for(ev) {
                    let _ = watcher.tx.send(f);
                }
            }
        }
        self.watchers.push(watcher);
        Ok(rx)
    }

    pub(crate) fn close_watches(&mut self) {
        self.watchers.clear();
    }

    pub(crate) fn watcher_count(&mut self) -> usize {
        self.watchers.retain(|w| !w.tx.is_closed());
        self.watchers.len()
    }

    pub(crate) fn send_bookmarks(&mut self) {
        let rv = self.rv;
        self.watchers
            .retain(|w| !w.bookmarks || w.tx.send(w.bookmark(rv, false)).is_ok());
    }

    /// Forgets history at and below `rv`: watches from there get 410 Expired.
    pub(crate) fn compact(&mut self, rv: u64) {
        let rv = rv.min(self.rv);
        while self.history.front().is_some_and(|e| e.rv <= rv) {
            self.history.pop_front();
        }
        self.compacted = self.compacted.max(rv);
    }
}

/// Who a write records as owner of what it changes.
enum Tracking {
    /// A create, update or non-apply patch by this manager.
    Update(String),
    /// An apply, whose managers are already worked out.
    Applied(Vec<Manager>),
}

/// The manager the fake records for a write that names none: the apiserver takes the
/// first part of the User-Agent, which for kctrl-client is `kctrl`.
pub(crate) const DEFAULT_FIELD_MANAGER: &str = "kctrl";

/// The field manager of a create or update, checked as the apiserver checks it.
fn field_manager(manager: Option<&str>, options: &str) -> Result<String, Error> {
    match manager {
        Some(m) if m.len() > 128 => Err(errors::invalid(
            "meta.k8s.io",
            options,
            "",
            &[FieldError {
                field: "fieldManager".into(),
                cause_type: "FieldValueTooLong".into(),
                body: "Too long: may not be more than 128 bytes".into(),
            }],
        )),
        Some(m) if !m.is_empty() => Ok(m.to_owned()),
        _ => Ok(DEFAULT_FIELD_MANAGER.to_owned()),
    }
}

/// The field manager of a patch: required for an apply, `force` only for one.
fn patch_field_manager(patch: &Patch, params: &PatchParams) -> Result<String, Error> {
    let given = params.field_manager.as_deref().unwrap_or("");
    let refuse = |e: FieldError| errors::invalid("meta.k8s.io", "PatchOptions", "", &[e]);
    match patch {
        Patch::Apply(_) if given.is_empty() => Err(refuse(FieldError::required(
            "fieldManager",
            "is required for apply patch",
        ))),
        Patch::Apply(_) => field_manager(Some(given), "PatchOptions"),
        _ if params.force => Err(refuse(FieldError::forbidden(
            "force",
            "may not be specified for non-apply patch",
        ))),
        _ => field_manager(Some(given), "PatchOptions"),
    }
}

/// The field-ownership bookkeeping of a write through the main resource or its status.
fn writer(spec: &ResourceSpec, manager: &str, status: bool) -> apply::Write {
    apply::Write {
        schema: Schema {
            builtin: spec.builtin_lists,
        },
        manager: manager.to_owned(),
        api_version: spec.resource.api_version(),
        subresource: if status { "status" } else { "" },
        reset: spec.reset_fields(status),
        now: now(),
    }
}

/// Sets `metadata.managedFields` of `obj` to `managers` (`None`: not tracked). When they
/// are what `existing` records, its entries are kept as they are, so a write that changes
/// nothing stays a no-op.
fn set_managers(obj: &mut Value, existing: Option<&Value>, managers: Option<Vec<Manager>>) {
    let unchanged = match (&managers, existing) {
        (Some(m), Some(e)) => managed::read(e).ok().as_ref() == Some(m),
        (None, Some(e)) => e.pointer("/metadata/managedFields").is_none(),
        _ => false,
    };
    if unchanged {
        copy_meta(obj, existing.unwrap_or(&Value::Null), "managedFields");
        return;
    }
    match managers {
        Some(m) if !m.is_empty() => set_meta(obj, "managedFields", managed::to_json(&m)),
        _ => {
            meta_mut(obj).remove("managedFields");
        }
    }
}

/// What decoding a created, updated or patched custom resource does with its `null` fields
/// (see `nulls.rs`): pruned or defaulted as its schema says; [`check_nulls`] then validates
/// those left, once the strategy has reset what it resets. Built-in types keep them (Go
/// would drop them; the fake stores what it was sent).
fn prune_written_nulls(spec: &ResourceSpec, obj: &mut Value) {
    if let Some(schema) = &spec.schema {
        nulls::prune_on_write(obj, schema);
    }
}

/// A 422 naming each `null` of a custom resource's `obj` that its schema does not allow.
fn check_nulls(spec: &ResourceSpec, obj: &Value) -> Result<(), Error> {
    let Some(schema) = spec.schema.as_ref().filter(|_| nulls::contains_null(obj)) else {
        return Ok(());
    };
    let errs = nulls::errors(obj, schema);
    if errs.is_empty() {
        return Ok(());
    }
    let (group, kind) = group_kind(spec);
    Err(errors::invalid(
        group,
        kind,
        meta_str(obj, "name").unwrap_or(""),
        &errs,
    ))
}

/// Metadata validation of a patch or apply: the UID is immutable.
fn check_uid_unchanged(
    spec: &ResourceSpec,
    existing: &Value,
    obj: &Value,
    name: &str,
) -> Result<(), Error> {
    let new_uid = meta_str(obj, "uid").unwrap_or("");
    if !new_uid.is_empty() && Some(new_uid) != meta_str(existing, "uid") {
        let (group, kind) = group_kind(spec);
        return Err(errors::invalid(
            group,
            kind,
            name,
            &[FieldError::invalid_string(
                "metadata.uid",
                new_uid,
                "field is immutable",
            )],
        ));
    }
    Ok(())
}

fn check_subresource(spec: &ResourceSpec, subresource: Option<&str>) -> Result<bool, Error> {
    match subresource {
        None => Ok(false),
        Some("status") if spec.has_status() => Ok(true),
        Some(_) => Err(errors::resource_not_served()),
    }
}

fn check_namespace(spec: &ResourceSpec, obj: &mut Value, ns: &str) -> Result<(), Error> {
    if !spec.resource.is_namespaced() {
        meta_mut(obj).remove("namespace");
        return Ok(());
    }
    match meta_str(obj, "namespace") {
        Some(n) if !n.is_empty() && n != ns => Err(errors::bad_request(
            "the namespace of the provided object does not match the namespace sent on the request",
        )),
        _ => {
            set_meta(obj, "namespace", ns.into());
            Ok(())
        }
    }
}

fn check_name(obj: &Value, name: &str) -> Result<(), Error> {
    let obj_name = meta_str(obj, "name").unwrap_or("");
    if obj_name != name {
        return Err(errors::bad_request(format!(
            "the name of the object ({obj_name}) does not match the name on the URL ({name})"
        )));
    }
    Ok(())
}

fn set_type(spec: &ResourceSpec, obj: &mut Value) {
    if let Value::Object(o) = obj {
        o.insert("apiVersion".into(), spec.resource.api_version().into());
        o.insert("kind".into(), spec.resource.kind.to_string().into());
    }
}

fn storage_key(spec: &ResourceSpec, ns: &str, name: &str) -> String {
    let prefix = if spec.resource.group.is_empty()
        || spec.resource.group.ends_with(".k8s.io")
        || !spec.resource.group.contains('.')
    {
        spec.resource.plural.to_string()
    } else {
        format!("{}/{}", spec.resource.group, spec.resource.plural)
    };
    if ns.is_empty() {
        format!("/registry/{prefix}/{name}")
    } else {
        format!("/registry/{prefix}/{ns}/{name}")
    }
}

fn generation_changed(spec: &ResourceSpec, old: &Value, new: &Value) -> bool {
    match spec.generation {
        GenerationPolicy::None => false,
        GenerationPolicy::Spec => old.get("spec") != new.get("spec"),
        GenerationPolicy::SpecAndAnnotations => {
            old.get("spec") != new.get("spec")
                || old.pointer("/metadata/annotations") != new.pointer("/metadata/annotations")
        }
        GenerationPolicy::AllButMetadata => {
            let strip = |v: &Value| {
                let mut v = v.clone();
                if let Value::Object(o) = &mut v {
                    o.remove("metadata");
                    if spec.has_status() {
                        o.remove("status");
                    }
                }
                v
            };
            strip(old) != strip(new)
        }
    }
}

/// Drops ownerReferences repeating an earlier entry's uid, as the apiserver does on patch.
fn dedup_owner_references(obj: &mut Value) {
    if let Some(Value::Array(refs)) = obj.pointer_mut("/metadata/ownerReferences") {
        let mut seen = Vec::new();
        refs.retain(|r| {
            let uid = r.get("uid").cloned();
            if seen.contains(&uid) {
                false
            } else {
                seen.push(uid);
                true
            }
        });
    }
}

const NAME_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

fn generate_name(base: &str) -> String {
    // Names are at most 63 characters; the prefix is cut to leave room for the suffix.
    let mut prefix: String = base.chars().take(58).collect();
    for _ in 0..5 {
        prefix.push(char::from(
            NAME_ALPHABET[fastrand::usize(..NAME_ALPHABET.len())],
        ));
    }
    prefix
}

/// Now as RFC 3339 in UTC with second precision, as `metav1.Time` serializes.
pub(crate) fn now() -> String {
    rfc3339_seconds(Timestamp::now())
}

/// `t` as `metav1.Time` serializes it: UTC, whole seconds (the fraction is dropped), `Z`.
fn rfc3339_seconds(t: Timestamp) -> String {
    format!("{t:.0}")
}

fn encode_continue(rv: u64, ns: &str, name: &str) -> String {
    format!("{rv}\u{0}{ns}\u{0}{name}")
        .bytes()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn decode_continue(token: &str) -> Option<(u64, String, String)> {
    if !token.len().is_multiple_of(2) {
        return None;
    }
    let bytes: Option<Vec<u8>> = (0..token.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(token.get(i..i + 2)?, 16).ok())
        .collect();
    let text = String::from_utf8(bytes?).ok()?;
    let mut parts = text.split('\u{0}');
    let rv = parts.next()?.parse().ok()?;
    let ns = parts.next()?.to_owned();
    let name = parts.next()?.to_owned();
    Some((rv, ns, name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn continue_tokens_round_trip() {
        let t = encode_continue(42, "default", "web");
        assert_eq!(
            decode_continue(&t),
            Some((42, "default".into(), "web".into()))
        );
        assert_eq!(decode_continue("zz"), None);
    }

    #[test]
    fn generated_names_use_the_safe_alphabet() {
        let n = generate_name("web-");
        assert_eq!(n.len(), 9);
        assert!(n[4..].bytes().all(|b| NAME_ALPHABET.contains(&b)));
    }

    #[test]
    fn timestamps_are_rfc3339_seconds() {
        let t = now();
        assert_eq!(t.len(), 20, "{t}");
        assert!(t.ends_with('Z'));
        let at = |s: &str| s.parse::<Timestamp>().unwrap();
        assert_eq!(
            rfc3339_seconds(at("2026-11-28T08:51:35.999999999Z")),
            "2026-11-28T08:51:35Z",
            "the fraction is dropped, not rounded"
        );
        assert_eq!(
            rfc3339_seconds(at("2026-11-28T09:51:35+01:00")),
            "2026-11-28T08:51:35Z"
        );
        assert_eq!(
            rfc3339_seconds(at("1970-01-01T00:00:00Z")),
            "1970-01-01T00:00:00Z"
        );
        assert_eq!(
            rfc3339_seconds(at("2024-02-29T23:59:59Z")),
            "2024-02-29T23:59:59Z"
        );
    }

    #[test]
    fn timestamps_read_back_as_the_api_types_write_them() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
        let t: Timestamp = "2026-11-28T08:51:35.25Z".parse().unwrap();
        let written = serde_json::to_value(Time(t)).unwrap();
        assert_eq!(written, serde_json::Value::from(rfc3339_seconds(t)));
    }
}

//! Server-side apply and field ownership, on the stored JSON of objects.
//!
//! What kube-apiserver does with `metadata.managedFields`, reduced to what the fake can do
//! without the OpenAPI schema of each type:
//!
//! * **Apply** (`Write::apply`): the configuration is merged into the live object (its
//!   values win; objects merge key by key; lists merge as their type says, below). The
//!   applier then owns exactly the fields of the configuration. Fields it applied last time
//!   and leaves out now are removed from the object unless another manager owns them (an
//!   object nobody owns anything in any more goes whole). A field another manager owns that
//!   the apply changes is a conflict (409) unless forced, when it changes hands. A manager
//!   applying the value a field already has shares it, without conflict.
//! * **Update** (`Write::update`, for create, update and the other patches): the writer owns
//!   what it added or changed, and takes it from whoever owned it; a removed field is owned
//!   by nobody. An object without managers (seeded without them, or reset with
//!   `managedFields: [{}]`) stays untracked until an apply, which first records all of its
//!   fields as owned by `before-first-apply`, as the apiserver does.
//!
//! Schema knowledge is a small fixed table ([`Schema`]): every object is a map of fields
//! (except a few atomic ones, e.g. label selectors), and every list is atomic (replaced
//! whole, owned as one field) except the associative lists and sets named there. What the
//! table does not know, the fake treats as atomic; where that cannot give the apiserver's
//! answer (an item of a keyed list without its key, which the apiserver would default), it
//! refuses the apply with a message saying so.

use std::collections::BTreeSet;

use serde_json::{Map, Value, json};

use crate::fields::{self, Element, FieldSet, Path};
use crate::managed::{Manager, Operation};

/// The manager the apiserver records for the fields an object had before its first apply
/// (an object whose changes were not tracked).
pub(crate) const BEFORE_FIRST_APPLY: &str = "before-first-apply";

/// The schema path step standing for "an item of this list".
const ITEM: &str = "[]";

/// How a list merges and is owned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ListType {
    /// Replaced whole; owned as one field.
    Atomic,
    /// Items identified by these key fields, merged and owned one by one.
    Map(&'static [&'static str]),
    /// Scalars identified by value, merged and owned one by one.
    Set,
}

/// The list and object rules the fake knows: those of `ObjectMeta` for every resource, and
/// for built-in resources those of their common keyed lists and atomic selectors.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Schema {
    /// Whether the resource is a built-in one (custom resources get `ObjectMeta`'s rules
    /// only; their own lists are atomic).
    pub(crate) builtin: bool,
}

impl Schema {
    /// `at`: the field names from the root, with [`ITEM`] for each list item on the way.
    fn list_type(self, at: &[String]) -> ListType {
        let n = at.len();
        let last = at.last().map(String::as_str).unwrap_or("");
        if n == 2 && at[0] == "metadata" {
            match last {
                "ownerReferences" => return ListType::Map(&["uid"]),
                "finalizers" => return ListType::Set,
                _ => {}
            }
        }
        if !self.builtin {
            return ListType::Atomic;
        }
        let in_container = n >= 3
            && at[n - 2] == ITEM
            && matches!(
                at[n - 3].as_str(),
                "containers" | "initContainers" | "ephemeralContainers"
            );
        match last {
            "containers" | "initContainers" | "ephemeralContainers" => ListType::Map(&["name"]),
            "ports" if in_container => ListType::Map(&["containerPort", "protocol"]),
            "env" if in_container => ListType::Map(&["name"]),
            "volumeMounts" if in_container => ListType::Map(&["mountPath"]),
            "volumes" | "imagePullSecrets" if !in_container => ListType::Map(&["name"]),
            "conditions" if n >= 2 && at[n - 2] == "status" => ListType::Map(&["type"]),
            // A Service's ports.
            "ports" if n == 2 && at[0] == "spec" => ListType::Map(&["port", "protocol"]),
            _ => ListType::Atomic,
        }
    }

    /// Whether the object at `at` is atomic: replaced whole, owned as one field.
    fn atomic_object(self, at: &[String]) -> bool {
        if at.len() == 3 && at[0] == "metadata" && at[1] == "ownerReferences" {
            return true;
        }
        if !self.builtin {
            return false;
        }
        match at.last().map(String::as_str) {
            Some("selector") => at.len() == 2 && at[0] == "spec",
            Some("labelSelector" | "namespaceSelector" | "podSelector") => true,
            _ => false,
        }
    }

    /// The path step of a list item, or why it has none.
    fn item_element(self, kind: ListType, item: &Value) -> Result<Element, String> {
        match kind {
            ListType::Map(keys) => {
                let Some(fields) = item.as_object() else {
                    return Err("an item of a keyed list is not an object".to_owned());
                };
                let mut key = Map::new();
                for k in keys {
                    match fields.get(*k) {
                        Some(v) if !v.is_null() => {
                            key.insert((*k).to_owned(), v.clone());
                        }
                        _ => {
                            return Err(format!(
                                "an item has no {k:?}, one of the list's keys ({})",
                                keys.join(", ")
                            ));
                        }
                    }
                }
                Ok(Element::key(key))
            }
            ListType::Set if !item.is_object() && !item.is_array() && !item.is_null() => {
                Ok(Element::value(item))
            }
            ListType::Set => Err("an item of a set-like list is not a scalar".to_owned()),
            ListType::Atomic => Err("an atomic list has no item steps".to_owned()),
        }
    }

    /// The items of a non-atomic list with their steps (the first of duplicates), or `None`
    /// when one has no step (the list is then handled as atomic).
    fn index(self, kind: ListType, items: &[Value]) -> Option<Vec<(Element, &Value)>> {
        let mut seen = BTreeSet::new();
        let mut out = Vec::with_capacity(items.len());
        for item in items {
            let e = self.item_element(kind, item).ok()?;
            if seen.insert(e.clone()) {
                out.push((e, item));
            }
        }
        Some(out)
    }

    /// The fields `config` sets (the apiserver's field set of an applied configuration):
    /// every scalar, empty object, atomic list or object and list item.
    pub(crate) fn field_set(self, config: &Value) -> Result<FieldSet, String> {
        let mut out = FieldSet::new();
        self.collect(config, &mut Vec::new(), &mut Vec::new(), &mut out)?;
        Ok(out)
    }

    fn collect(
        self,
        v: &Value,
        at: &mut Vec<String>,
        path: &mut Path,
        out: &mut FieldSet,
    ) -> Result<(), String> {
        match v {
            // Applied, and owned, whatever then becomes of the value (see `nulls.rs`).
            Value::Null => {
                out.insert(path.clone());
                Ok(())
            }
            Value::Object(map) => {
                if !path.is_empty() && (map.is_empty() || self.atomic_object(at)) {
                    out.insert(path.clone());
                    return Ok(());
                }
                for (k, child) in map {
                    at.push(k.clone());
                    path.push(Element::field(k));
                    let r = self.collect(child, at, path, out);
                    path.pop();
                    at.pop();
                    r?;
                }
                Ok(())
            }
            Value::Array(items) => {
                let kind = self.list_type(at);
                if kind == ListType::Atomic {
                    out.insert(path.clone());
                    return Ok(());
                }
                let mut seen = BTreeSet::new();
                at.push(ITEM.to_owned());
                for item in items {
                    let step = self.item_element(kind, item).map_err(|why| {
                        let default = if matches!(kind, ListType::Map(keys) if keys.contains(&"protocol")) {
                            " (the apiserver defaults a missing protocol to TCP; kctrl-fake does not default, so set it)"
                        } else {
                            ""
                        };
                        format!("{}: {why}{default}", fields::display(path))
                    })?;
                    if !seen.insert(step.clone()) {
                        path.push(step);
                        let shown = fields::display(path);
                        path.pop();
                        at.pop();
                        return Err(format!("{shown}: duplicate entries in the list"));
                    }
                    path.push(step);
                    let r = self.collect(item, at, path, out);
                    out.insert(path.clone());
                    path.pop();
                    if let Err(e) = r {
                        at.pop();
                        return Err(e);
                    }
                }
                at.pop();
                Ok(())
            }
            _ => {
                out.insert(path.clone());
                Ok(())
            }
        }
    }

    /// What changed from `old` to `new`, as the apiserver compares objects: a field only
    /// in `new` is added (with every field under it), one only in `old` removed, a scalar
    /// (or atomic field) with another value modified. A `null` in `new` is a value; in
    /// `old` alone it counts as absent.
    pub(crate) fn compare(self, old: &Value, new: &Value) -> Comparison {
        let mut c = Comparison::default();
        self.compare_at(
            Some(old),
            Some(new),
            &mut Vec::new(),
            &mut Vec::new(),
            &mut c,
        );
        c
    }

    fn compare_at(
        self,
        old: Option<&Value>,
        new: Option<&Value>,
        at: &mut Vec<String>,
        path: &mut Path,
        c: &mut Comparison,
    ) {
        // A null written is a value, as structured-merge-diff compares it: it replaces a
        // value as a modification (a conflict with its owner) and adds a field that was not
        // there. A null in the old object alone counts as absent.
        if new.is_some_and(Value::is_null) {
            if !old.is_some_and(Value::is_null) {
                c.leaf(old, new, path);
            }
            return;
        }
        let old = old.filter(|v| !v.is_null());
        let shape = |v: &Value| match v {
            Value::Object(_) => 1,
            Value::Array(_) => 2,
            _ => 0,
        };
        let (Some(any), both_shapes) =
            (new.or(old), old.zip(new).map(|(o, n)| (shape(o), shape(n))))
        else {
            return;
        };
        if both_shapes.is_some_and(|(o, n)| o != n) {
            c.modified.insert(path.clone());
            return;
        }
        match any {
            Value::Object(_) => {
                let (o, n) = (
                    old.and_then(Value::as_object),
                    new.and_then(Value::as_object),
                );
                let empty = |m: Option<&Map<String, Value>>| m.is_none_or(Map::is_empty);
                if self.atomic_object(at) || (empty(o) && empty(n)) {
                    c.leaf(old, new, path);
                    return;
                }
                let mut keys: BTreeSet<&String> = BTreeSet::new();
                keys.extend(o.into_iter().flat_map(Map::keys));
                keys.extend(n.into_iter().flat_map(Map::keys));
                for k in keys {
                    at.push(k.clone());
                    path.push(Element::field(k));
                    self.compare_at(
                        o.and_then(|m| m.get(k)),
                        n.and_then(|m| m.get(k)),
                        at,
                        path,
                        c,
                    );
                    path.pop();
                    at.pop();
                }
                c.container(old, new, path);
            }
            Value::Array(_) => {
                let kind = self.list_type(at);
                let (o, n) = (
                    old.and_then(Value::as_array)
                        .map(Vec::as_slice)
                        .unwrap_or(&[]),
                    new.and_then(Value::as_array)
                        .map(Vec::as_slice)
                        .unwrap_or(&[]),
                );
                let indexed = (kind != ListType::Atomic && !(o.is_empty() && n.is_empty()))
                    .then(|| self.index(kind, o).zip(self.index(kind, n)))
                    .flatten();
                let Some((o, n)) = indexed else {
                    c.leaf(old, new, path);
                    return;
                };
                let mut steps: Vec<&Element> = o.iter().map(|(e, _)| e).collect();
                steps.extend(
                    n.iter()
                        .map(|(e, _)| e)
                        .filter(|e| !o.iter().any(|(x, _)| x == *e)),
                );
                at.push(ITEM.to_owned());
                for step in steps {
                    let (oi, ni) = (find_item(&o, step), find_item(&n, step));
                    path.push(step.clone());
                    self.compare_at(oi, ni, at, path, c);
                    path.pop();
                }
                at.pop();
                c.container(old, new, path);
            }
            _ => c.leaf(old, new, path),
        }
    }

    /// `config` merged into `live`: its values win, objects merge by field, keyed lists
    /// and sets by item (in the apiserver's order), atomic lists and objects are replaced.
    pub(crate) fn merge(self, live: &Value, config: &Value) -> Value {
        self.merge_at(live, config, &mut Vec::new())
    }

    fn merge_at(self, live: &Value, config: &Value, at: &mut Vec<String>) -> Value {
        match (live, config) {
            (Value::Object(l), Value::Object(c)) if !self.atomic_object(at) => {
                let mut out = l.clone();
                for (k, cv) in c {
                    at.push(k.clone());
                    let merged = match l.get(k) {
                        Some(lv) => self.merge_at(lv, cv, at),
                        None => cv.clone(),
                    };
                    at.pop();
                    out.insert(k.clone(), merged);
                }
                Value::Object(out)
            }
            (Value::Array(l), Value::Array(c)) => {
                let kind = self.list_type(at);
                if kind == ListType::Atomic {
                    return config.clone();
                }
                let (Some(l), Some(c)) = (self.index(kind, l), self.index(kind, c)) else {
                    return config.clone();
                };
                at.push(ITEM.to_owned());
                let merged = merge_items(&l, &c, |lv, cv| self.merge_at(lv, cv, at));
                at.pop();
                Value::Array(merged)
            }
            _ => config.clone(),
        }
    }
}

/// The items of two keyed lists merged in the apiserver's order: items `config` changes
/// come in its order, items only `live` has stay where they were.
fn merge_items(
    live: &[(Element, &Value)],
    config: &[(Element, &Value)],
    mut merge: impl FnMut(&Value, &Value) -> Value,
) -> Vec<Value> {
    let in_config = |e: &Element| config.iter().any(|(x, _)| x == e);
    let in_live = |e: &Element| live.iter().find(|(x, _)| x == e).map(|(_, v)| *v);
    let shared: Vec<&Element> = config
        .iter()
        .map(|(e, _)| e)
        .filter(|e| in_live(e).is_some())
        .collect();
    let mut next_shared = 0;
    let mut out = Vec::with_capacity(live.len().max(config.len()));
    let (mut li, mut ci) = (0, 0);
    while li < live.len() || ci < config.len() {
        if li < live.len() && ci < config.len() {
            let (le, lv) = &live[li];
            if *le == config[ci].0 {
                out.push(merge(lv, config[ci].1));
                li += 1;
                ci += 1;
                next_shared += 1;
                continue;
            }
            if in_config(le) && shared.get(next_shared).is_some_and(|s| *s != le) {
                // A shared item, but not the next one in the configuration's order.
                li += 1;
                continue;
            }
        }
        if li < live.len() && !in_config(&live[li].0) {
            out.push(live[li].1.clone());
            li += 1;
            continue;
        }
        if ci < config.len() {
            let (ce, cv) = &config[ci];
            out.push(match in_live(ce) {
                Some(lv) => merge(lv, cv),
                None => (*cv).clone(),
            });
            if shared.get(next_shared) == Some(&ce) {
                next_shared += 1;
            }
            ci += 1;
            continue;
        }
        // Only shared live items already merged remain.
        li += 1;
    }
    out
}

/// The item of an indexed list at `step`.
fn find_item<'v>(items: &[(Element, &'v Value)], step: &Element) -> Option<&'v Value> {
    items.iter().find(|(e, _)| e == step).map(|(_, v)| *v)
}

/// The difference between two versions of an object.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Comparison {
    pub(crate) added: FieldSet,
    pub(crate) modified: FieldSet,
    pub(crate) removed: FieldSet,
}

impl Comparison {
    fn leaf(&mut self, old: Option<&Value>, new: Option<&Value>, path: &Path) {
        match (old, new) {
            (None, Some(_)) => self.added.insert(path.clone()),
            (Some(_), None) => self.removed.insert(path.clone()),
            (Some(o), Some(n)) if o != n => self.modified.insert(path.clone()),
            _ => false,
        };
    }

    fn container(&mut self, old: Option<&Value>, new: Option<&Value>, path: &Path) {
        match (old, new) {
            (None, Some(_)) => self.added.insert(path.clone()),
            (Some(_), None) => self.removed.insert(path.clone()),
            _ => false,
        };
    }

    /// Without the fields under `roots` (those the endpoint's strategy resets).
    fn without(self, roots: &[Path]) -> Self {
        Self {
            added: fields::without_subtrees(&self.added, roots),
            modified: fields::without_subtrees(&self.modified, roots),
            removed: fields::without_subtrees(&self.removed, roots),
        }
    }

    /// Added or modified.
    fn changed(&self) -> FieldSet {
        self.added.union(&self.modified).cloned().collect()
    }
}

/// The fields no manager is recorded as owning: the object's identity and bookkeeping.
fn unowned() -> [Path; 12] {
    let p = fields::path;
    [
        p(&["apiVersion"]),
        p(&["kind"]),
        p(&["metadata"]),
        p(&["metadata", "name"]),
        p(&["metadata", "namespace"]),
        p(&["metadata", "creationTimestamp"]),
        p(&["metadata", "selfLink"]),
        p(&["metadata", "uid"]),
        p(&["metadata", "clusterName"]),
        p(&["metadata", "generation"]),
        p(&["metadata", "managedFields"]),
        p(&["metadata", "resourceVersion"]),
    ]
}

fn recordable(set: &FieldSet) -> FieldSet {
    let unowned = unowned();
    set.iter()
        .filter(|p| !unowned.contains(p))
        .cloned()
        .collect()
}

/// A conflict: a manager and the fields of its the apply would change.
pub(crate) type Conflict = (Manager, Vec<Path>);

/// Why an apply failed.
#[derive(Debug)]
pub(crate) enum ApplyError {
    /// Other managers own fields the apply changes (and it is not forced).
    Conflicts(Vec<Conflict>),
    /// The configuration cannot be applied (by the fake, or at all).
    Invalid(String),
    /// The stored managers cannot be read.
    Internal(String),
}

/// One write by one manager through one endpoint of a resource.
pub(crate) struct Write {
    pub(crate) schema: Schema,
    pub(crate) manager: String,
    /// The API version of the request (`v1`, `apps/v1`).
    pub(crate) api_version: String,
    /// `status`, or empty for the main resource.
    pub(crate) subresource: &'static str,
    /// The fields this endpoint's strategy resets (`status` on the main resource of a type
    /// with a status subresource, `spec` on the status subresource, ...): never owned.
    pub(crate) reset: Vec<Path>,
    /// The time recorded for managers that change the object.
    pub(crate) now: String,
}

impl Write {
    /// Applies `config` (an object naming its `apiVersion`, `kind` and name) to `live` (the
    /// stored object, `None` to create it): the merged object, without managedFields, and
    /// the managers to record.
    pub(crate) fn apply(
        &self,
        live: Option<&Value>,
        config: &Value,
        force: bool,
    ) -> Result<(Value, Vec<Manager>), ApplyError> {
        let applied = fields::without_subtrees(
            &self.schema.field_set(config).map_err(ApplyError::Invalid)?,
            &self.reset,
        );
        let claimed = recordable(&applied);
        let mine = Manager::new(
            &self.manager,
            Operation::Apply,
            &self.api_version,
            self.subresource,
        );
        let Some(live) = live else {
            let mut managers = Vec::new();
            if !claimed.is_empty() {
                managers.push(Manager {
                    time: Some(self.now.clone()),
                    fields: claimed,
                    ..mine
                });
            }
            return Ok((config.clone(), managers));
        };
        let mut managers = crate::managed::read(live).map_err(ApplyError::Internal)?;
        let current = without_managed_fields(live);
        if managers.is_empty() {
            // The apiserver makes an untracked object's fields someone's before applying.
            let fields = recordable(
                &self
                    .schema
                    .compare(&json!({}), &current)
                    .without(&self.reset)
                    .changed(),
            );
            if !fields.is_empty() {
                managers.push(Manager {
                    time: Some(self.now.clone()),
                    fields,
                    ..Manager::new(
                        BEFORE_FIRST_APPLY,
                        Operation::Update,
                        &self.api_version,
                        self.subresource,
                    )
                });
            }
        }
        let mut merged = self.schema.merge(&current, config);
        let me = managers.iter().position(|m| m.same_as(&mine));

        // Fields applied last time and not now go, unless someone (this apply included)
        // owns them.
        if let Some(last) = me.map(|i| &managers[i].fields).filter(|f| !f.is_empty()) {
            let mut owned = applied.clone();
            for (i, m) in managers.iter().enumerate() {
                if Some(i) != me {
                    owned.extend(m.fields.iter().cloned());
                }
            }
            let owned = fields::with_fields_on_the_way(&owned);
            let unowned = unowned();
            let mut gone: Vec<Path> = fields::with_fields_on_the_way(last)
                .into_iter()
                .filter(|p| !owned.contains(p) && !unowned.contains(p))
                .collect();
            // An object first: what lies under it goes with it.
            gone.sort_by_key(Vec::len);
            for p in &gone {
                remove(&mut merged, p);
            }
        }

        let diff = self.schema.compare(&current, &merged).without(&self.reset);
        let changed = diff.changed();
        let mut conflicts = Vec::new();
        for (i, m) in managers.iter().enumerate() {
            if Some(i) == me {
                continue;
            }
            let mut theirs: Vec<Path> = m.fields.intersection(&changed).cloned().collect();
            if !theirs.is_empty() {
                theirs.sort_by(fields::walk_order);
                conflicts.push((m.clone(), theirs));
            }
        }
        if !force && !conflicts.is_empty() {
            conflicts.sort_by_key(|(m, _)| m.identifier());
            return Err(ApplyError::Conflicts(conflicts));
        }
        for (i, m) in managers.iter_mut().enumerate() {
            if Some(i) != me {
                m.fields
                    .retain(|p| !changed.contains(p) && !diff.removed.contains(p));
            }
        }
        let object_changed = merged != current;
        match me {
            Some(i) => {
                let m = &mut managers[i];
                m.fields = claimed;
                m.api_version = self.api_version.clone();
                if object_changed {
                    m.time = Some(self.now.clone());
                }
            }
            None => managers.push(Manager {
                time: object_changed.then(|| self.now.clone()),
                fields: claimed,
                ..mine
            }),
        }
        managers.retain(|m| !m.fields.is_empty());
        Ok((merged, managers))
    }

    /// The managers after a create (`live` is `None`), update or non-apply patch that
    /// turns `live` into `new`; `None` when the object is not tracked (it has no managers,
    /// or `new` resets them with `managedFields: [{}]`).
    pub(crate) fn update(&self, live: Option<&Value>, new: &Value) -> Option<Vec<Manager>> {
        let mut managers = match live {
            None => Vec::new(),
            Some(live) => {
                if crate::managed::is_reset(new) {
                    return None;
                }
                // A main-resource write may set managedFields itself; otherwise, and when
                // what it sends cannot be read, the stored ones stand.
                let sent = (self.subresource.is_empty())
                    .then(|| crate::managed::read(new).ok())
                    .flatten()
                    .filter(|m| !m.is_empty());
                match sent.or_else(|| crate::managed::read(live).ok()) {
                    Some(m) if !m.is_empty() => m,
                    _ => return None,
                }
            }
        };
        let old = live
            .map(without_managed_fields)
            .unwrap_or_else(|| json!({}));
        let diff = self
            .schema
            .compare(&old, &without_managed_fields(new))
            .without(&self.reset);
        let changed = diff.changed();
        for m in &mut managers {
            m.fields
                .retain(|p| !changed.contains(p) && !diff.removed.contains(p));
        }
        let took = recordable(&changed);
        if !took.is_empty() {
            let mine = Manager::new(
                &self.manager,
                Operation::Update,
                &self.api_version,
                self.subresource,
            );
            match managers.iter_mut().find(|m| m.same_as(&mine)) {
                Some(m) => {
                    m.fields.extend(took);
                    m.time = Some(self.now.clone());
                }
                None => managers.push(Manager {
                    time: Some(self.now.clone()),
                    fields: took,
                    ..mine
                }),
            }
        }
        managers.retain(|m| !m.fields.is_empty());
        Some(managers)
    }
}

/// `obj` without `metadata.managedFields`.
pub(crate) fn without_managed_fields(obj: &Value) -> Value {
    let mut out = obj.clone();
    if let Some(Value::Object(meta)) = out.get_mut("metadata") {
        meta.remove("managedFields");
    }
    out
}

/// Removes the field or item at `path` from `v`, and every object or list that becomes
/// empty on the way (the apiserver drops them). Returns whether anything was removed.
pub(crate) fn remove(v: &mut Value, path: &[Element]) -> bool {
    let Some((first, rest)) = path.split_first() else {
        return false;
    };
    let child_gone = |child: &Value| match child {
        Value::Object(m) => m.is_empty(),
        Value::Array(a) => a.is_empty(),
        _ => false,
    };
    match v {
        Value::Object(map) => {
            let Element::Field(name) = first else {
                return false;
            };
            if rest.is_empty() {
                return map.remove(name).is_some();
            }
            let Some(child) = map.get_mut(name) else {
                return false;
            };
            let removed = remove(child, rest);
            if removed && child_gone(child) {
                map.remove(name);
            }
            removed
        }
        Value::Array(items) => {
            let Some(pos) = items
                .iter()
                .enumerate()
                .position(|(i, item)| first.names_item(i, item))
            else {
                return false;
            };
            if rest.is_empty() {
                items.remove(pos);
                return true;
            }
            let removed = remove(&mut items[pos], rest);
            if removed && child_gone(&items[pos]) {
                items.remove(pos);
            }
            removed
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::managed;
    use serde_json::json;

    const BUILTIN: Schema = Schema { builtin: true };

    fn write(manager: &str, subresource: &'static str, reset: Vec<Path>) -> Write {
        Write {
            schema: BUILTIN,
            manager: manager.to_owned(),
            api_version: "apps/v1".to_owned(),
            subresource,
            reset,
            now: "2026-01-01T00:00:00Z".to_owned(),
        }
    }

    fn deployment() -> Value {
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "labels": {"app": "web"}},
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {"spec": {"containers": [{
                    "name": "main", "image": "pause", "args": ["a"],
                    "ports": [{"containerPort": 80, "protocol": "TCP"}],
                }]}},
            },
        })
    }

    #[test]
    fn the_field_set_of_a_configuration_is_the_apiservers() {
        let set = recordable(&BUILTIN.field_set(&deployment()).unwrap());
        // As kube-apiserver 1.37 recorded the same apply: selectors and args atomic,
        // containers and ports keyed, items members.
        assert_eq!(
            fields::to_fields_v1(&set),
            json!({
                "f:metadata": {"f:labels": {"f:app": {}}},
                "f:spec": {"f:replicas": {}, "f:selector": {}, "f:template": {"f:spec": {"f:containers": {
                    "k:{\"name\":\"main\"}": {".": {}, "f:args": {}, "f:image": {}, "f:name": {},
                        "f:ports": {"k:{\"containerPort\":80,\"protocol\":\"TCP\"}": {
                            ".": {}, "f:containerPort": {}, "f:protocol": {}}}}}}}},
            })
        );
        // Custom resources know ObjectMeta's lists only.
        let custom = Schema { builtin: false };
        let set = custom
            .field_set(&json!({"metadata": {"finalizers": ["a"]}, "spec": {"containers": [{"name": "x"}]}}))
            .unwrap();
        assert_eq!(
            fields::to_fields_v1(&recordable(&set)),
            json!({"f:metadata": {"f:finalizers": {"v:\"a\"": {}}}, "f:spec": {"f:containers": {}}})
        );
    }

    #[test]
    fn keyed_lists_merge_in_the_apiservers_order() {
        let item = |n: &str, v: i64| json!({"name": n, "v": v});
        let live = json!({"spec": {"containers": [item("a", 1), item("b", 1), item("c", 1)]}});
        let config = json!({"spec": {"containers": [item("c", 2), item("d", 2), item("a", 2)]}});
        let merged = BUILTIN.merge(&live, &config);
        assert_eq!(
            merged["spec"]["containers"],
            json!([item("b", 1), item("c", 2), item("d", 2), item("a", 2)])
        );
        // An atomic list is replaced; objects merge by field.
        let merged = BUILTIN.merge(
            &json!({"args": [1, 2], "m": {"x": 1, "y": 1}}),
            &json!({"args": [3], "m": {"y": 2}}),
        );
        assert_eq!(merged, json!({"args": [3], "m": {"x": 1, "y": 2}}));
    }

    #[test]
    fn comparisons_mark_what_was_added_changed_and_removed() {
        let old = json!({"data": {"a": "1", "b": "1"}, "spec": {"containers": [{"name": "c", "image": "1"}]}});
        let new = json!({"data": {"a": "2"}, "metadata": {"labels": {"x": "y"}},
            "spec": {"containers": [{"name": "c", "image": "1"}, {"name": "d"}]}});
        let c = BUILTIN.compare(&old, &new);
        let shown = |s: &FieldSet| s.iter().map(|p| fields::display(p)).collect::<Vec<_>>();
        assert_eq!(shown(&c.modified), [".data.a"]);
        assert_eq!(shown(&c.removed), [".data.b"]);
        assert_eq!(
            shown(&c.added),
            [
                ".metadata",
                ".metadata.labels",
                ".metadata.labels.x",
                r#".spec.containers[name="d"]"#,
                r#".spec.containers[name="d"].name"#,
            ]
        );
    }

    #[test]
    fn removing_a_field_drops_what_it_leaves_empty() {
        let mut v = json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "env": [{"name": "E"}]}]}}}});
        let mut env = fields::path(&["spec", "template", "spec", "containers"]);
        env.push(Element::key(
            json!({"name": "c"}).as_object().unwrap().clone(),
        ));
        env.push(Element::field("env"));
        assert!(remove(&mut v, &env));
        assert_eq!(
            v,
            json!({"spec": {"template": {"spec": {"containers": [{"name": "c"}]}}}})
        );
        let mut v = json!({"metadata": {"name": "x", "labels": {"a": "1"}}});
        assert!(remove(&mut v, &fields::path(&["metadata", "labels", "a"])));
        assert_eq!(v, json!({"metadata": {"name": "x"}}));
        assert!(!remove(&mut v, &fields::path(&["metadata", "labels", "a"])));
    }

    #[test]
    fn an_update_takes_what_it_changes_from_everyone() {
        let created = write("creator", "", vec![])
            .update(None, &deployment())
            .unwrap();
        assert_eq!(created.len(), 1);
        assert!(
            created[0]
                .fields
                .contains(&fields::path(&["spec", "replicas"]))
        );
        assert!(
            !created[0]
                .fields
                .contains(&fields::path(&["metadata", "name"]))
        );
        let mut live = deployment();
        live["metadata"]["managedFields"] = managed::to_json(&created);
        let mut new = live.clone();
        new["spec"]["replicas"] = json!(3);
        new["status"] = json!({"replicas": 3});
        // The status is reset on the main resource: nobody owns it.
        let managers = write("scaler", "", vec![fields::path(&["status"])])
            .update(Some(&live), &new)
            .unwrap();
        let scaler = managers.iter().find(|m| m.manager == "scaler").unwrap();
        assert_eq!(scaler.fields, [fields::path(&["spec", "replicas"])].into());
        let creator = managers.iter().find(|m| m.manager == "creator").unwrap();
        assert!(
            !creator
                .fields
                .contains(&fields::path(&["spec", "replicas"]))
        );
        // Untracked objects stay so, unless the write itself sets managers (as it may).
        let untracked = deployment();
        let plain = without_managed_fields(&new);
        assert!(
            write("u", "", vec![])
                .update(Some(&untracked), &plain)
                .is_none()
        );
        assert!(
            write("u", "", vec![])
                .update(Some(&untracked), &new)
                .is_some()
        );
    }

    #[test]
    fn applies_conflict_share_and_prune() {
        let base = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}});
        let with = |data: Value| {
            let mut v = base.clone();
            v["data"] = data;
            v
        };
        let (obj, managers) = write("m1", "", vec![])
            .apply(None, &with(json!({"x": "1", "y": "2"})), false)
            .unwrap();
        let mut live = obj;
        live["metadata"]["managedFields"] = managed::to_json(&managers);
        match write("m2", "", vec![]).apply(Some(&live), &with(json!({"x": "9"})), false) {
            Err(ApplyError::Conflicts(c)) => {
                assert_eq!(c.len(), 1);
                assert_eq!(c[0].0.manager, "m1");
                assert_eq!(c[0].1, vec![fields::path(&["data", "x"])]);
            }
            other => panic!("expected a conflict, got {other:?}"),
        }
        // The same value is shared; the apply changes nothing, so its entry has no time.
        let (obj, managers) = write("m2", "", vec![])
            .apply(Some(&live), &with(json!({"x": "1"})), false)
            .unwrap();
        assert_eq!(obj, without_managed_fields(&live));
        let m2 = managers.iter().find(|m| m.manager == "m2").unwrap();
        assert_eq!(m2.time, None);
        // m1 leaves both out: x stays (m2 owns it), y goes.
        live["metadata"]["managedFields"] = managed::to_json(&managers);
        let (obj, managers) = write("m1", "", vec![])
            .apply(Some(&live), &base, false)
            .unwrap();
        assert_eq!(obj["data"], json!({"x": "1"}));
        assert_eq!(managers.len(), 1, "m1 owns nothing any more");
    }
}

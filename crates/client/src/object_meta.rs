//! Reading an object's metadata whatever type holds it, and a compact type to hold it in.
//!
//! The informer machinery needs four things from a cached object's metadata: its name and
//! namespace (the cache key), its resourceVersion and its labels (selectors). [`ObjectMetaAccess`]
//! names them, so a cache can hold any metadata type, as client-go's caches work on the
//! `metav1.Object` interface rather than on one struct.
//!
//! Two types implement it:
//!
//! * k8s-openapi's [`ObjectMeta`], the metadata of full objects and views;
//! * [`CompactObjectMeta`], what [`PartialObjectMetadata`](crate::PartialObjectMetadata) holds:
//!   every field of `ObjectMeta`, laid out for a cache of many objects. Labels and annotations
//!   are one sorted slice each instead of a B-tree (whose smallest node is over 500 bytes);
//!   each managed-fields entry keeps `fieldsV1` as the JSON text the server sent, as client-go
//!   keeps `FieldsV1.Raw`, instead of a tree of `serde_json::Value`s (about ten times its
//!   text's size); and the strings objects tend to share — namespaces, label and annotation
//!   pairs, owner references, managers and their field sets — are interned, so the Pods of
//!   one ReplicaSet, whose managed field sets are byte for byte equal, hold one copy of each.

use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::sync::{Arc, LazyLock, Mutex, PoisonError};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    FieldsV1, ManagedFieldsEntry, ObjectMeta, OwnerReference, Time,
};
use serde::de::{self, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;

use crate::watch::from_object;

/// What a cache reads from an object's metadata (the part of client-go's `metav1.Object`
/// its stores, indexers and listers use).
pub trait ObjectMetaAccess {
    /// `metadata.name`.
    fn name(&self) -> Option<&str>;
    /// `metadata.namespace`.
    fn namespace(&self) -> Option<&str>;
    /// `metadata.resourceVersion`.
    fn resource_version(&self) -> Option<&str>;
    /// The value of label `key`, if the object carries it.
    fn label(&self, key: &str) -> Option<&str>;
    /// `metadata.uid` (`None` where the type does not keep it).
    fn uid(&self) -> Option<&str> {
        None
    }
}

impl ObjectMetaAccess for ObjectMeta {
    fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }

    fn namespace(&self) -> Option<&str> {
        self.namespace.as_deref()
    }

    fn resource_version(&self) -> Option<&str> {
        self.resource_version.as_deref()
    }

    fn label(&self, key: &str) -> Option<&str> {
        self.labels.as_ref()?.get(key).map(String::as_str)
    }

    fn uid(&self) -> Option<&str> {
        self.uid.as_deref()
    }
}

// ---------------------------------------------------------------------------------------
// Interning

/// Strings shared by cached objects. An entry lives while an object holds it: the table is
/// swept of entries nobody else holds whenever it has doubled since the last sweep, so its
/// size stays within twice the number of distinct strings in use.
struct Interner {
    set: HashSet<Arc<str>>,
    sweep_at: usize,
}

const FIRST_SWEEP: usize = 1024;

static INTERNER: LazyLock<Mutex<Interner>> = LazyLock::new(|| {
    Mutex::new(Interner {
        set: HashSet::new(),
        sweep_at: FIRST_SWEEP,
    })
});

/// The shared copy of `s`.
fn intern(s: &str) -> Arc<str> {
    // The table holds only complete entries: a panic elsewhere cannot leave it torn.
    let mut table = INTERNER.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(shared) = table.set.get(s) {
        return Arc::clone(shared);
    }
    if table.set.len() >= table.sweep_at {
        table.set.retain(|e| Arc::strong_count(e) > 1);
        table.sweep_at = (table.set.len() * 2).max(FIRST_SWEEP);
    }
    let shared: Arc<str> = Arc::from(s);
    table.set.insert(Arc::clone(&shared));
    shared
}

/// An interned string as it is decoded (the empty string by default).
struct Interned(Arc<str>);

impl Default for Interned {
    fn default() -> Self {
        Interned(intern(""))
    }
}

impl<'de> Deserialize<'de> for Interned {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Interned;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Interned, E> {
                Ok(Interned(intern(s)))
            }
        }
        d.deserialize_str(V)
    }
}

/// `Option<Interned>`, with JSON `null` as absent.
fn opt_interned<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Arc<str>>, D::Error> {
    Ok(Option::<Interned>::deserialize(d)?.map(|i| i.0))
}

/// `Option<String>` as an exactly sized box, with JSON `null` as absent.
fn opt_boxed<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Box<str>>, D::Error> {
    Ok(Option::<String>::deserialize(d)?.map(String::into_boxed_str))
}

/// An interned string, with JSON `null` as the empty string.
fn interned_or_empty<'de, D: Deserializer<'de>>(d: D) -> Result<Arc<str>, D::Error> {
    Ok(Option::<Interned>::deserialize(d)?.unwrap_or_default().0)
}

/// The empty string, interned (a required string field that is missing).
fn empty_interned() -> Arc<str> {
    Interned::default().0
}

/// Any JSON value kept as its text, interned, with JSON `null` as absent.
fn opt_raw_interned<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Arc<str>>, D::Error> {
    Ok(Option::<Box<RawValue>>::deserialize(d)?.map(|raw| intern(raw.get())))
}

/// The field-by-field decoder serde derives for `T` (`#[serde(remote = "Self")]`, an inherent
/// `T::deserialize`), as a `Deserialize` type. Each compact type's own `Deserialize` wraps it
/// in [`from_object`], which admits only a JSON object: serde's derived decoder would also
/// read an array as the fields in order.
struct Derived<T>(T);

/// Types whose derived decoder [`Derived`] calls.
trait DerivedDecoder<'de>: Sized {
    fn derived<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error>;
}

impl<'de, T: DerivedDecoder<'de>> Deserialize<'de> for Derived<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        T::derived(d).map(Derived)
    }
}

macro_rules! derived_decoder {
    ($($ty:ty),*) => {$(
        impl<'de> DerivedDecoder<'de> for $ty {
            fn derived<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                <$ty>::deserialize(d)
            }
        }
    )*};
}
derived_decoder!(
    CompactManagedFieldsEntry,
    CompactOwnerReference,
    CompactObjectMeta
);

// ---------------------------------------------------------------------------------------
// String maps

/// Labels or annotations: key-value pairs sorted by key, in one slice.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct StringMap(Box<[(Arc<str>, Arc<str>)]>);

impl StringMap {
    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0
            .binary_search_by(|(k, _)| (**k).cmp(key))
            .ok()
            .map(|i| &*self.0[i].1)
    }

    /// The pairs, sorted by key.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(k, v)| (&**k, &**v))
    }

    /// The keys, sorted.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.0.iter().map(|(k, _)| &**k)
    }

    /// How many pairs there are.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The pairs as k8s-openapi holds them (`None` when there are none).
    pub fn to_btree_map(&self) -> Option<BTreeMap<String, String>> {
        (!self.is_empty()).then(|| {
            self.iter()
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect()
        })
    }

    fn from_pairs(mut pairs: Vec<(Arc<str>, Arc<str>)>) -> Self {
        // A key given twice keeps its last value, as decoding into a map does.
        pairs.reverse();
        pairs.sort_by(|a, b| a.0.cmp(&b.0)); // stable: the last given comes first
        pairs.dedup_by(|later, first| later.0 == first.0);
        Self(pairs.into_boxed_slice())
    }

    fn from_btree_map(map: Option<&BTreeMap<String, String>>) -> Self {
        map.map_or_else(Self::default, |m| {
            Self(m.iter().map(|(k, v)| (intern(k), intern(v))).collect())
        })
    }
}

impl fmt::Debug for StringMap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl<'de> Deserialize<'de> for StringMap {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = StringMap;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a map of strings to strings")
            }
            fn visit_unit<E: de::Error>(self) -> Result<StringMap, E> {
                Ok(StringMap::default())
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<StringMap, A::Error> {
                let mut pairs = Vec::with_capacity(map.size_hint().unwrap_or(0));
                while let Some((k, v)) = map.next_entry::<Interned, Interned>()? {
                    pairs.push((k.0, v.0));
                }
                Ok(StringMap::from_pairs(pairs))
            }
        }
        d.deserialize_any(V)
    }
}

// ---------------------------------------------------------------------------------------
// Managed fields

/// One `managedFields` entry, with `fieldsV1` kept as the JSON text the server sent.
#[derive(Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(remote = "Self", rename_all = "camelCase")]
pub struct CompactManagedFieldsEntry {
    #[serde(default, deserialize_with = "opt_interned")]
    api_version: Option<Arc<str>>,
    #[serde(default, deserialize_with = "opt_interned")]
    fields_type: Option<Arc<str>>,
    #[serde(default, rename = "fieldsV1", deserialize_with = "opt_raw_interned")]
    fields_v1: Option<Arc<str>>,
    #[serde(default, deserialize_with = "opt_interned")]
    manager: Option<Arc<str>>,
    #[serde(default, deserialize_with = "opt_interned")]
    operation: Option<Arc<str>>,
    #[serde(default, deserialize_with = "opt_interned")]
    subresource: Option<Arc<str>>,
    #[serde(default)]
    time: Option<Time>,
}

impl CompactManagedFieldsEntry {
    /// `apiVersion`: the version of the resource the field set is written in.
    pub fn api_version(&self) -> Option<&str> {
        self.api_version.as_deref()
    }

    /// `fieldsType` (`FieldsV1`).
    pub fn fields_type(&self) -> Option<&str> {
        self.fields_type.as_deref()
    }

    /// `fieldsV1` as JSON text (client-go's `FieldsV1.Raw`).
    pub fn fields_v1_json(&self) -> Option<&str> {
        self.fields_v1.as_deref()
    }

    /// `manager`: who owns the field set.
    pub fn manager(&self) -> Option<&str> {
        self.manager.as_deref()
    }

    /// `operation`: `Apply` or `Update`.
    pub fn operation(&self) -> Option<&str> {
        self.operation.as_deref()
    }

    /// `subresource`, e.g. `status`.
    pub fn subresource(&self) -> Option<&str> {
        self.subresource.as_deref()
    }

    /// `time`: when the field set last changed.
    pub fn time(&self) -> Option<&Time> {
        self.time.as_ref()
    }

    /// The entry as k8s-openapi holds it (`fieldsV1` parsed). A `fieldsV1` text that a
    /// `serde_json::Value` cannot hold (a number beyond f64, a lone surrogate escape: valid
    /// JSON text that Go's decoder and this type keep, but k8s-openapi's decoder refuses) reads
    /// back as `null`.
    pub fn to_managed_fields_entry(&self) -> ManagedFieldsEntry {
        ManagedFieldsEntry {
            api_version: self.api_version().map(str::to_owned),
            fields_type: self.fields_type().map(str::to_owned),
            fields_v1: self.fields_v1_json().map(|text| {
                FieldsV1(serde_json::from_str(text).unwrap_or(serde_json::Value::Null))
            }),
            manager: self.manager().map(str::to_owned),
            operation: self.operation().map(str::to_owned),
            subresource: self.subresource().map(str::to_owned),
            time: self.time.clone(),
        }
    }

    fn from_managed_fields_entry(e: &ManagedFieldsEntry) -> Self {
        let opt = |s: &Option<String>| s.as_deref().map(intern);
        Self {
            api_version: opt(&e.api_version),
            fields_type: opt(&e.fields_type),
            fields_v1: e.fields_v1.as_ref().map(|f| intern(&f.0.to_string())),
            manager: opt(&e.manager),
            operation: opt(&e.operation),
            subresource: opt(&e.subresource),
            time: e.time.clone(),
        }
    }
}

impl fmt::Debug for CompactManagedFieldsEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CompactManagedFieldsEntry")
            .field("manager", &self.manager())
            .field("operation", &self.operation())
            .field("api_version", &self.api_version())
            .field("subresource", &self.subresource())
            .field("time", &self.time)
            .field("fields_type", &self.fields_type())
            .field("fields_v1", &self.fields_v1_json())
            .finish()
    }
}

impl<'de> Deserialize<'de> for CompactManagedFieldsEntry {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        from_object::<D, Derived<Self>>(d).map(|w| w.0)
    }
}

// ---------------------------------------------------------------------------------------
// Owner references

/// An `ownerReferences` entry, its strings interned (the Pods of one ReplicaSet share it).
///
/// A required field missing or `null` reads as empty, as k8s-openapi reads it.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(remote = "Self", rename_all = "camelCase")]
pub struct CompactOwnerReference {
    #[serde(default = "empty_interned", deserialize_with = "interned_or_empty")]
    api_version: Arc<str>,
    #[serde(default = "empty_interned", deserialize_with = "interned_or_empty")]
    kind: Arc<str>,
    #[serde(default = "empty_interned", deserialize_with = "interned_or_empty")]
    name: Arc<str>,
    #[serde(default = "empty_interned", deserialize_with = "interned_or_empty")]
    uid: Arc<str>,
    #[serde(default)]
    controller: Option<bool>,
    #[serde(default)]
    block_owner_deletion: Option<bool>,
}

impl CompactOwnerReference {
    /// `apiVersion` of the owner.
    pub fn api_version(&self) -> &str {
        &self.api_version
    }

    /// `kind` of the owner.
    pub fn kind(&self) -> &str {
        &self.kind
    }

    /// `name` of the owner.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `uid` of the owner.
    pub fn uid(&self) -> &str {
        &self.uid
    }

    /// `controller`: whether the owner is the managing controller.
    pub fn controller(&self) -> Option<bool> {
        self.controller
    }

    /// `blockOwnerDeletion`.
    pub fn block_owner_deletion(&self) -> Option<bool> {
        self.block_owner_deletion
    }

    /// The reference as k8s-openapi holds it.
    pub fn to_owner_reference(&self) -> OwnerReference {
        OwnerReference {
            api_version: self.api_version().to_owned(),
            block_owner_deletion: self.block_owner_deletion,
            controller: self.controller,
            kind: self.kind().to_owned(),
            name: self.name().to_owned(),
            uid: self.uid().to_owned(),
        }
    }

    fn from_owner_reference(r: &OwnerReference) -> Self {
        Self {
            api_version: intern(&r.api_version),
            kind: intern(&r.kind),
            name: intern(&r.name),
            uid: intern(&r.uid),
            controller: r.controller,
            block_owner_deletion: r.block_owner_deletion,
        }
    }
}

impl fmt::Debug for CompactOwnerReference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CompactOwnerReference")
            .field("api_version", &self.api_version())
            .field("kind", &self.kind())
            .field("name", &self.name())
            .field("uid", &self.uid())
            .field("controller", &self.controller)
            .field("block_owner_deletion", &self.block_owner_deletion)
            .finish()
    }
}

impl<'de> Deserialize<'de> for CompactOwnerReference {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        from_object::<D, Derived<Self>>(d).map(|w| w.0)
    }
}

// ---------------------------------------------------------------------------------------
// The metadata

/// Every field of an object's `ObjectMeta`, held compactly for a cache of many objects:
/// what [`PartialObjectMetadata`](crate::PartialObjectMetadata) holds.
///
/// * Labels and annotations are one sorted slice each ([`StringMap`]) instead of a
///   `BTreeMap`, whose smallest node has room for 11 pairs (over 500 bytes).
/// * Each managed-fields entry keeps `fieldsV1` as the JSON text the server sent, as
///   client-go keeps `FieldsV1.Raw`, instead of a tree of `serde_json::Value`s (about ten
///   times its text's size).
/// * Strings that objects tend to share are interned (namespaces, label and annotation pairs,
///   owner references, managers and their field sets), so the Pods of one ReplicaSet, whose
///   field sets are equal byte for byte, hold one copy of each. Names, uids and
///   resourceVersions are each object's own. A shared string is freed once no object holds it.
///
/// Read-only: fields are read through methods, and [`to_object_meta`](Self::to_object_meta)
/// gives the k8s-openapi form.
///
/// ```
/// use kctrl_client::{CompactObjectMeta, ObjectMetaAccess};
///
/// let json = r#"{"name":"web-1","namespace":"prod","resourceVersion":"7",
///     "labels":{"tier":"web","app":"shop"},
///     "managedFields":[{"manager":"kubectl","operation":"Apply","apiVersion":"v1",
///         "fieldsType":"FieldsV1","fieldsV1":{"f:metadata":{"f:labels":{"f:app":{}}}}}]}"#;
/// let meta: CompactObjectMeta = serde_json::from_str(json).unwrap();
/// assert_eq!(meta.name(), Some("web-1"));
/// assert_eq!(meta.label("app"), Some("shop"));
/// assert_eq!(meta.labels().keys().collect::<Vec<_>>(), ["app", "tier"]);
/// let entry = &meta.managed_fields()[0];
/// assert_eq!(entry.manager(), Some("kubectl"));
/// assert_eq!(entry.fields_v1_json(), Some(r#"{"f:metadata":{"f:labels":{"f:app":{}}}}"#));
///
/// // The k8s-openapi form, when a full ObjectMeta is needed.
/// let full = meta.to_object_meta();
/// assert_eq!(full.labels.unwrap()["tier"], "web");
/// assert_eq!(full.managed_fields.unwrap()[0].fields_v1.as_ref().unwrap().0["f:metadata"]
///     ["f:labels"]["f:app"], serde_json::json!({}));
/// ```
///
/// A field given twice in one object is refused with serde's "duplicate field" error (the API
/// server never sends one; k8s-openapi's decoder would keep the last).
///
/// An empty list or map and an absent one are the same here (both read as empty, and
/// `to_object_meta` gives `None`), as they are to the API server.
#[derive(Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(remote = "Self", rename_all = "camelCase")]
pub struct CompactObjectMeta {
    #[serde(default, deserialize_with = "opt_boxed")]
    name: Option<Box<str>>,
    #[serde(default, deserialize_with = "opt_interned")]
    namespace: Option<Arc<str>>,
    #[serde(default, deserialize_with = "opt_boxed")]
    uid: Option<Box<str>>,
    #[serde(default, deserialize_with = "opt_boxed")]
    resource_version: Option<Box<str>>,
    #[serde(default, deserialize_with = "opt_interned")]
    generate_name: Option<Arc<str>>,
    #[serde(default, deserialize_with = "opt_boxed")]
    self_link: Option<Box<str>>,
    #[serde(default)]
    generation: Option<i64>,
    #[serde(default)]
    deletion_grace_period_seconds: Option<i64>,
    #[serde(default)]
    creation_timestamp: Option<Time>,
    #[serde(default)]
    deletion_timestamp: Option<Time>,
    #[serde(default)]
    labels: StringMap,
    #[serde(default)]
    annotations: StringMap,
    #[serde(default, deserialize_with = "boxed_seq")]
    owner_references: Box<[CompactOwnerReference]>,
    #[serde(default, deserialize_with = "boxed_interned_seq")]
    finalizers: Box<[Arc<str>]>,
    #[serde(default, deserialize_with = "boxed_seq")]
    managed_fields: Box<[CompactManagedFieldsEntry]>,
    // Anything else (a field added after 1.36) is skipped while parsing.
}

impl CompactObjectMeta {
    /// `uid`.
    pub fn uid(&self) -> Option<&str> {
        self.uid.as_deref()
    }

    /// `generateName`.
    pub fn generate_name(&self) -> Option<&str> {
        self.generate_name.as_deref()
    }

    /// `selfLink` (no longer set by API servers since 1.20).
    pub fn self_link(&self) -> Option<&str> {
        self.self_link.as_deref()
    }

    /// `generation`.
    pub fn generation(&self) -> Option<i64> {
        self.generation
    }

    /// `deletionGracePeriodSeconds`.
    pub fn deletion_grace_period_seconds(&self) -> Option<i64> {
        self.deletion_grace_period_seconds
    }

    /// `creationTimestamp`.
    pub fn creation_timestamp(&self) -> Option<&Time> {
        self.creation_timestamp.as_ref()
    }

    /// `deletionTimestamp`: set once the object is being deleted.
    pub fn deletion_timestamp(&self) -> Option<&Time> {
        self.deletion_timestamp.as_ref()
    }

    /// `labels`.
    pub fn labels(&self) -> &StringMap {
        &self.labels
    }

    /// `annotations`.
    pub fn annotations(&self) -> &StringMap {
        &self.annotations
    }

    /// `ownerReferences`.
    pub fn owner_references(&self) -> &[CompactOwnerReference] {
        &self.owner_references
    }

    /// The owner reference marked `controller: true`, if any.
    pub fn controller_ref(&self) -> Option<&CompactOwnerReference> {
        self.owner_references
            .iter()
            .find(|r| r.controller == Some(true))
    }

    /// `finalizers`.
    pub fn finalizers(&self) -> impl Iterator<Item = &str> {
        self.finalizers.iter().map(|f| &**f)
    }

    /// `managedFields`.
    pub fn managed_fields(&self) -> &[CompactManagedFieldsEntry] {
        &self.managed_fields
    }

    /// A copy without `managedFields` (an informer transform that drops them, as
    /// kube-controller-manager's informers do).
    pub fn without_managed_fields(mut self) -> Self {
        self.managed_fields = Box::default();
        self
    }

    /// Changes the metadata through k8s-openapi's type: `f` gets it as an [`ObjectMeta`],
    /// which is then laid out compactly again. Each call copies every field twice: meant for
    /// tests and occasional changes, not for a hot path.
    ///
    /// ```
    /// # use kctrl_client::CompactObjectMeta;
    /// let mut meta = CompactObjectMeta::default();
    /// meta.edit(|m| m.name = Some("web".into()));
    /// assert_eq!(meta.to_object_meta().name.as_deref(), Some("web"));
    /// ```
    pub fn edit(&mut self, f: impl FnOnce(&mut ObjectMeta)) {
        let mut meta = self.to_object_meta();
        f(&mut meta);
        *self = Self::from(&meta);
    }

    /// The metadata as k8s-openapi holds it.
    pub fn to_object_meta(&self) -> ObjectMeta {
        fn nonempty<T>(v: Vec<T>) -> Option<Vec<T>> {
            (!v.is_empty()).then_some(v)
        }
        ObjectMeta {
            annotations: self.annotations.to_btree_map(),
            creation_timestamp: self.creation_timestamp.clone(),
            deletion_grace_period_seconds: self.deletion_grace_period_seconds,
            deletion_timestamp: self.deletion_timestamp.clone(),
            finalizers: nonempty(self.finalizers().map(str::to_owned).collect()),
            generate_name: self.generate_name().map(str::to_owned),
            generation: self.generation,
            labels: self.labels.to_btree_map(),
            managed_fields: nonempty(
                self.managed_fields
                    .iter()
                    .map(CompactManagedFieldsEntry::to_managed_fields_entry)
                    .collect(),
            ),
            name: self.name.as_deref().map(str::to_owned),
            namespace: self.namespace.as_deref().map(str::to_owned),
            owner_references: nonempty(
                self.owner_references
                    .iter()
                    .map(CompactOwnerReference::to_owner_reference)
                    .collect(),
            ),
            resource_version: self.resource_version.as_deref().map(str::to_owned),
            self_link: self.self_link().map(str::to_owned),
            uid: self.uid().map(str::to_owned),
        }
    }
}

impl From<&ObjectMeta> for CompactObjectMeta {
    fn from(m: &ObjectMeta) -> Self {
        let boxed = |s: &Option<String>| s.as_deref().map(Box::from);
        Self {
            name: boxed(&m.name),
            namespace: m.namespace.as_deref().map(intern),
            uid: boxed(&m.uid),
            resource_version: boxed(&m.resource_version),
            generate_name: m.generate_name.as_deref().map(intern),
            self_link: boxed(&m.self_link),
            generation: m.generation,
            deletion_grace_period_seconds: m.deletion_grace_period_seconds,
            creation_timestamp: m.creation_timestamp.clone(),
            deletion_timestamp: m.deletion_timestamp.clone(),
            labels: StringMap::from_btree_map(m.labels.as_ref()),
            annotations: StringMap::from_btree_map(m.annotations.as_ref()),
            owner_references: m
                .owner_references
                .iter()
                .flatten()
                .map(CompactOwnerReference::from_owner_reference)
                .collect(),
            finalizers: m.finalizers.iter().flatten().map(|f| intern(f)).collect(),
            managed_fields: m
                .managed_fields
                .iter()
                .flatten()
                .map(CompactManagedFieldsEntry::from_managed_fields_entry)
                .collect(),
        }
    }
}

impl ObjectMetaAccess for CompactObjectMeta {
    fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }

    fn namespace(&self) -> Option<&str> {
        self.namespace.as_deref()
    }

    fn resource_version(&self) -> Option<&str> {
        self.resource_version.as_deref()
    }

    fn label(&self, key: &str) -> Option<&str> {
        self.labels.get(key)
    }

    fn uid(&self) -> Option<&str> {
        self.uid.as_deref()
    }
}

impl fmt::Debug for CompactObjectMeta {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut s = f.debug_struct("CompactObjectMeta");
        s.field("name", &self.name)
            .field("namespace", &self.namespace)
            .field("uid", &self.uid)
            .field("resource_version", &self.resource_version);
        if let Some(g) = &self.generate_name {
            s.field("generate_name", g);
        }
        if let Some(g) = self.generation {
            s.field("generation", &g);
        }
        if let Some(t) = &self.creation_timestamp {
            s.field("creation_timestamp", t);
        }
        if let Some(t) = &self.deletion_timestamp {
            s.field("deletion_timestamp", t);
        }
        if let Some(g) = self.deletion_grace_period_seconds {
            s.field("deletion_grace_period_seconds", &g);
        }
        if !self.labels.is_empty() {
            s.field("labels", &self.labels);
        }
        if !self.annotations.is_empty() {
            s.field("annotations", &self.annotations);
        }
        if !self.owner_references.is_empty() {
            s.field("owner_references", &self.owner_references);
        }
        if !self.finalizers.is_empty() {
            s.field("finalizers", &self.finalizers);
        }
        if !self.managed_fields.is_empty() {
            s.field("managed_fields", &self.managed_fields);
        }
        s.finish_non_exhaustive()
    }
}

/// A JSON array decoded into an exactly sized boxed slice; `null` reads as empty.
fn boxed_seq<'de, D, T>(d: D) -> Result<Box<[T]>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    struct V<T>(std::marker::PhantomData<T>);
    impl<'de, T: Deserialize<'de>> Visitor<'de> for V<T> {
        type Value = Box<[T]>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("an array")
        }
        fn visit_unit<E: de::Error>(self) -> Result<Box<[T]>, E> {
            Ok(Box::default())
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Box<[T]>, A::Error> {
            let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(64));
            while let Some(item) = seq.next_element()? {
                items.push(item);
            }
            Ok(items.into_boxed_slice())
        }
    }
    d.deserialize_any(V(std::marker::PhantomData))
}

fn boxed_interned_seq<'de, D: Deserializer<'de>>(d: D) -> Result<Box<[Arc<str>]>, D::Error> {
    Ok(boxed_seq::<D, Interned>(d)?
        .into_iter()
        .map(|i| i.0)
        .collect())
}

impl<'de> Deserialize<'de> for CompactObjectMeta {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        from_object::<D, Derived<Self>>(d).map(|w| w.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Metadata as a kube-apiserver 1.36 sends a ReplicaSet's Pod, with every field set.
    const POD_META: &str = r#"{
        "name": "web-7d9f8-abcde", "generateName": "web-7d9f8-", "namespace": "prod",
        "uid": "4f1c2a8e-0b8d-4c3e-9d55-1f5e2b8c7a10", "resourceVersion": "81237",
        "selfLink": "/api/v1/namespaces/prod/pods/web-7d9f8-abcde",
        "generation": 2, "deletionGracePeriodSeconds": 30,
        "creationTimestamp": "2026-11-27T08:00:00Z", "deletionTimestamp": "2026-11-27T09:00:00Z",
        "labels": {"app": "web", "pod-template-hash": "7d9f8"},
        "annotations": {"note": "x", "a.example.com/b": "\u00e9"},
        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-7d9f8",
            "uid": "0a7e", "controller": true, "blockOwnerDeletion": true}],
        "finalizers": ["example.com/hold"],
        "managedFields": [
            {"manager": "kube-controller-manager", "operation": "Update", "apiVersion": "v1",
             "time": "2026-11-27T08:00:00Z", "fieldsType": "FieldsV1",
             "fieldsV1": {"f:metadata": {"f:labels": {".": {}, "f:app": {}}}}},
            {"manager": "kubelet", "operation": "Update", "apiVersion": "v1",
             "time": "2026-11-27T08:00:05Z", "fieldsType": "FieldsV1", "subresource": "status",
             "fieldsV1": {"f:status": {"f:phase": {}}}}
        ],
        "someFieldFromTheFuture": {"x": [1, 2]}
    }"#;

    #[test]
    fn every_field_reads_back_as_k8s_openapi_decodes_it() {
        let compact: CompactObjectMeta = serde_json::from_str(POD_META).unwrap();
        let full: ObjectMeta = serde_json::from_str(POD_META).unwrap();
        assert_eq!(compact.to_object_meta(), full);
        // From k8s-openapi's form: the same but for fieldsV1's text, which is re-serialized.
        assert_eq!(CompactObjectMeta::from(&full).to_object_meta(), full);
        // A reference missing required fields, or with nulls in them, reads as k8s-openapi
        // reads it (empty strings).
        let partial = r#"{"ownerReferences":[{"kind":"ReplicaSet","name":null}]}"#;
        let compact_partial: CompactObjectMeta = serde_json::from_str(partial).unwrap();
        let full_partial: ObjectMeta = serde_json::from_str(partial).unwrap();
        assert_eq!(compact_partial.to_object_meta(), full_partial);
        assert_eq!(compact.name(), Some("web-7d9f8-abcde"));
        assert_eq!(compact.namespace(), Some("prod"));
        assert_eq!(compact.resource_version(), Some("81237"));
        assert_eq!(compact.label("pod-template-hash"), Some("7d9f8"));
        assert_eq!(compact.label("absent"), None);
        assert_eq!(compact.annotations().get("a.example.com/b"), Some("é"));
        assert_eq!(compact.controller_ref().unwrap().name(), "web-7d9f8");
        assert_eq!(
            compact.finalizers().collect::<Vec<_>>(),
            ["example.com/hold"]
        );
        let status = &compact.managed_fields()[1];
        assert_eq!(status.subresource(), Some("status"));
        assert_eq!(
            status.fields_v1_json(),
            Some(r#"{"f:status": {"f:phase": {}}}"#)
        );
    }

    #[test]
    fn absent_null_and_empty_read_alike() {
        for json in [
            r#"{"name":"a"}"#,
            r#"{"name":"a","labels":null,"annotations":{},"ownerReferences":null,
                "finalizers":[],"managedFields":null,"namespace":null}"#,
        ] {
            let m: CompactObjectMeta = serde_json::from_str(json).unwrap();
            assert!(m.labels().is_empty() && m.annotations().is_empty());
            assert!(m.owner_references().is_empty() && m.managed_fields().is_empty());
            assert_eq!(m.finalizers().count(), 0);
            assert_eq!(m.namespace(), None);
            assert_eq!(
                m.to_object_meta(),
                ObjectMeta {
                    name: Some("a".into()),
                    ..ObjectMeta::default()
                }
            );
        }
        let entry: CompactObjectMeta =
            serde_json::from_str(r#"{"managedFields":[{"manager":"m","fieldsV1":null}]}"#).unwrap();
        assert_eq!(entry.managed_fields()[0].fields_v1_json(), None);
    }

    #[test]
    fn field_sets_are_kept_as_text_even_where_a_value_tree_cannot_hold_them() {
        // Valid JSON that serde_json's Value refuses (Go's decoder keeps it as raw bytes).
        let json = r#"{"managedFields":[{"manager":"m","fieldsV1":{"f:x":1e400}}]}"#;
        assert!(serde_json::from_str::<ObjectMeta>(json).is_err());
        let compact: CompactObjectMeta = serde_json::from_str(json).unwrap();
        let entry = &compact.managed_fields()[0];
        assert_eq!(entry.fields_v1_json(), Some(r#"{"f:x":1e400}"#));
        let back = entry.to_managed_fields_entry();
        assert_eq!(back.fields_v1, Some(FieldsV1(serde_json::Value::Null)));
        assert_eq!(back.manager.as_deref(), Some("m"));
    }

    #[test]
    fn a_label_given_twice_keeps_its_last_value_as_a_map_does() {
        let json = r#"{"labels":{"b":"1","a":"2","b":"3"}}"#;
        let compact: CompactObjectMeta = serde_json::from_str(json).unwrap();
        let full: ObjectMeta = serde_json::from_str(json).unwrap();
        assert_eq!(compact.labels().get("b"), Some("3"));
        assert_eq!(
            compact.labels().iter().collect::<Vec<_>>(),
            [("a", "2"), ("b", "3")]
        );
        assert_eq!(compact.labels().to_btree_map(), full.labels);
    }

    #[test]
    fn wrong_types_are_refused_as_k8s_openapi_refuses_them() {
        for json in [
            r#"{"name":7}"#,
            r#"{"labels":{"a":null}}"#,
            r#"{"labels":["a"]}"#,
            r#"{"ownerReferences":[{"controller":"yes"}]}"#,
            r#"{"managedFields":{"manager":"m"}}"#,
            r#"{"creationTimestamp":"yesterday"}"#,
            // An array where an object belongs: serde's derived structs would read it as
            // the fields in order (found by fuzzing: `[]` decoded as empty metadata).
            r#"[]"#,
            r#"["web-1", "prod"]"#,
            r#"{"ownerReferences":[["apps/v1","ReplicaSet","web","u"]]}"#,
            r#"{"managedFields":[["v1","FieldsV1"]]}"#,
        ] {
            assert!(
                serde_json::from_str::<CompactObjectMeta>(json).is_err(),
                "{json} decoded"
            );
            assert!(serde_json::from_str::<ObjectMeta>(json).is_err(), "{json}");
        }
    }

    #[test]
    fn objects_with_equal_field_sets_share_one_copy() {
        let a: CompactObjectMeta = serde_json::from_str(POD_META).unwrap();
        let b: CompactObjectMeta =
            serde_json::from_str(&POD_META.replace("abcde", "fghij")).unwrap();
        let (fa, fb) = (&a.managed_fields[0], &b.managed_fields[0]);
        assert!(Arc::ptr_eq(
            fa.fields_v1.as_ref().unwrap(),
            fb.fields_v1.as_ref().unwrap()
        ));
        assert!(Arc::ptr_eq(
            &a.owner_references[0].uid,
            &b.owner_references[0].uid
        ));
        assert!(Arc::ptr_eq(&a.labels.0[0].1, &b.labels.0[0].1));
        assert!(Arc::ptr_eq(
            a.namespace.as_ref().unwrap(),
            b.namespace.as_ref().unwrap()
        ));
        // Names are each object's own.
        assert_ne!(a.name(), b.name());
    }

    #[test]
    fn the_interning_table_forgets_strings_no_object_holds() {
        let prefix = "the_interning_table_forgets";
        let held: Vec<Arc<str>> = (0..3 * FIRST_SWEEP)
            .map(|i| intern(&format!("{prefix}-{i}")))
            .collect();
        drop(held);
        // Enough fresh strings to pass the next sweep mark whatever other tests interned.
        let kept: Vec<Arc<str>> = (0..4 * FIRST_SWEEP)
            .map(|i| intern(&format!("{prefix}-kept-{i}")))
            .collect();
        let table = INTERNER.lock().unwrap();
        let dropped_left = (0..3 * FIRST_SWEEP)
            .filter(|i| table.set.contains(format!("{prefix}-{i}").as_str()))
            .count();
        assert_eq!(dropped_left, 0, "dropped strings stayed in the table");
        assert!(table.set.len() <= 2 * table.sweep_at.max(kept.len()));
        drop(table);
        assert!(kept.iter().all(|k| Arc::strong_count(k) >= 2));
    }

    #[test]
    fn selectors_match_compact_labels_as_they_match_maps() {
        use crate::labels::Selector;
        let compact: CompactObjectMeta = serde_json::from_str(POD_META).unwrap();
        let full: ObjectMeta = serde_json::from_str(POD_META).unwrap();
        for text in [
            "app=web",
            "app!=web",
            "app in (web,api),pod-template-hash",
            "!absent",
            "absent",
            "pod-template-hash notin (7d9f8)",
        ] {
            let s = Selector::parse(text).unwrap();
            assert_eq!(
                s.matches_meta(&compact),
                s.matches_opt(full.labels.as_ref()),
                "{text}"
            );
            assert_eq!(s.matches_meta(&compact), s.matches_meta(&full), "{text}");
        }
    }
}

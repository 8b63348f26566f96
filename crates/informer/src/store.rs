//! The thread-safe, indexed object cache (client-go's `ThreadSafeStore` + `Indexer`).
//!
//! Objects are held as `Arc<K>`: reads hand out shared references and never deep-copy.
//! Treat them as immutable; clone the inner value to modify it.
//!
//! Indices are maintained on every write: for each index, `value → set of keys`. An
//! update removes the object's old values before adding its new ones, and a value whose
//! set becomes empty is dropped, so short-lived, high-cardinality values (pod IPs, UIDs)
//! don't leak (kubernetes/kubernetes#84959). Keys are `Arc<str>` shared between the item
//! map and every index.
//!
//! The store tracks the resourceVersion it is current to (client-go 1.36 with
//! `AtomicFIFO`): a replace or bookmark sets it; so does every write carrying an object
//! (the object's own `metadata.resourceVersion`).
//!
//! An index function that panics on an object does not unwind through the store: the panic
//! is caught, logged (error level, with the object's key and the index's name) and counted,
//! and the object is held with no value in that index (it is still cached, and indexed by
//! the other indexes). Every index stays consistent with the items: an update or removal
//! recomputes the old values to remove them, and when the index function now panics on the
//! old state (one that is not deterministic), the key is looked for under every value of the
//! index and removed. Panics are counted once per index and write (an update that panics on
//! both the old and the new state counts once).

use kctrl_client::{ObjectMetaAccess, ShardSelector};
use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use k8s_openapi::Metadata;

use crate::contain::{PanicCounter, contain};
use crate::delta::ReflectorStore;
use crate::fifo::Transform;
use crate::keys::{ObjectKey, key_of};
use crate::metrics::{GaugeMetric, resource_version_metric_value};
use crate::shard::Reshard;

/// Name of the built-in index of objects by namespace.
pub const NAMESPACE_INDEX: &str = "namespace";

/// An index function: the index values of an object (e.g. its namespace, its owner's UID).
pub type IndexFn<K> = Arc<dyn Fn(&K) -> Vec<String> + Send + Sync>;

/// Errors from index operations.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum StoreError {
    /// The named index does not exist.
    #[error("index with name {0} does not exist")]
    NoSuchIndex(String),
    /// An index with this name already exists.
    #[error("indexer conflict: index {0} already exists")]
    IndexConflict(String),
}

/// The index function of [`NAMESPACE_INDEX`]: an object's namespace, none if cluster-scoped
/// (client-go's `MetaNamespaceIndexFunc`).
pub fn namespace_index_fn<K: Metadata<Ty: ObjectMetaAccess>>() -> IndexFn<K> {
    Arc::new(|o: &K| {
        o.metadata()
            .namespace()
            .filter(|n| !n.is_empty())
            .map(str::to_owned)
            .into_iter()
            .collect()
    })
}

type Hasher = foldhash::fast::RandomState;
type Key = Arc<str>;
/// One index: value → keys of the objects having that value.
type Index = HashMap<String, HashSet<Key, Hasher>, Hasher>;

/// What a replace changed, for a consumer that must tell handlers (client-go's
/// `processReplacedAllInfo`): deletions first, then every listed object in list order.
#[derive(Debug)]
pub struct ReplaceDiff<K> {
    /// Cached objects absent from the new list, as `(key, last known state)`, sorted by
    /// key. Their deletion was not observed (`DeletedObject::FinalStateUnknown`).
    pub deleted: Vec<(ObjectKey, Arc<K>)>,
    /// Every listed object in list order, with the object it replaced (`None`: added).
    pub replaced: Vec<(Option<Arc<K>>, Arc<K>)>,
}

struct Inner<K> {
    items: HashMap<Key, Arc<K>, Hasher>,
    indexers: HashMap<String, IndexFn<K>, Hasher>,
    indices: HashMap<String, Index, Hasher>,
    resource_version: String,
    transform: Option<Transform<K>>,
    /// `informer_store_resource_version`, set after every write that moves the
    /// resourceVersion.
    resource_version_metric: Option<Arc<dyn GaugeMetric>>,
    /// Index-function panics caught (each object skipped in that index).
    panics: PanicCounter,
}

/// The values of `obj` in index `name`; none if the index function panics (caught, logged
/// and counted in `panics`).
fn index_values<K: Metadata<Ty: ObjectMetaAccess>>(
    panics: &PanicCounter,
    name: &str,
    index_fn: &IndexFn<K>,
    obj: &K,
) -> Vec<String> {
    try_index_values(index_fn, obj).unwrap_or_else(|panic| {
        panics.fetch_add(1, Ordering::Relaxed);
        log_index_panic(name, obj, &panic);
        Vec::new()
    })
}

/// `index_fn(obj)`, or the message of its panic (neither counted nor logged).
fn try_index_values<K>(index_fn: &IndexFn<K>, obj: &K) -> Result<Vec<String>, String> {
    contain(&AtomicU64::new(0), || index_fn(obj))
}

fn log_index_panic<K: Metadata<Ty: ObjectMetaAccess>>(name: &str, obj: &K, panic: &str) {
    let meta = obj.metadata();
    tracing::error!(
        index = name,
        namespace = meta.namespace().unwrap_or_default(),
        name = meta.name().unwrap_or_default(),
        %panic,
        "an index function panicked; the object is cached without a value in this index"
    );
}

/// A thread-safe indexed cache of objects. Cheap to clone; clones share the cache.
pub struct Store<K> {
    inner: Arc<RwLock<Inner<K>>>,
}

impl<K> Clone for Store<K> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
        }
    }
}

impl<K> std::fmt::Debug for Store<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").finish_non_exhaustive()
    }
}

impl<K> Default for Store<K>
where
    K: Metadata<Ty: ObjectMetaAccess> + Send + Sync + 'static,
{
    fn default() -> Self {
        Self::new()
    }
}

fn object_rv<K: Metadata<Ty: ObjectMetaAccess>>(obj: &K) -> Option<&str> {
    obj.metadata().resource_version()
}

impl<K> Inner<K>
where
    K: Metadata<Ty: ObjectMetaAccess>,
{
    /// Moves `key` from the index values of `old` to those of `new`, for every index.
    ///
    /// The old values are computed again from `old`. If the index function panics on it now
    /// (it did not when `old` was indexed: a function that is not deterministic), `key` is
    /// removed from every value of the index instead, so no stale entry stays. A panic is
    /// counted once per index and change, whether on the old state, the new, or both.
    fn update_indices(&mut self, key: &Key, old: Option<&K>, new: Option<&K>) {
        for (name, index_fn) in &self.indexers {
            let old_values = old.map(|o| try_index_values(index_fn, o));
            let new_values = new.map(|o| try_index_values(index_fn, o));
            let panic = match (&old_values, &new_values) {
                (_, Some(Err(panic))) => new.map(|o| (o, panic)),
                (Some(Err(panic)), _) => old.map(|o| (o, panic)),
                _ => None,
            };
            if let Some((obj, panic)) = panic {
                self.panics.fetch_add(1, Ordering::Relaxed);
                log_index_panic(name, obj, panic);
            }
            let old_values = old_values.map(|v| v.map_err(|_| ()));
            let new_values = match new_values {
                Some(Ok(values)) => values,
                Some(Err(_)) | None => Vec::new(),
            };
            // Fast path: one value, unchanged (the common case, e.g. the namespace).
            if let Some(Ok(old_values)) = &old_values
                && old_values.len() == 1
                && new_values.len() == 1
                && old_values[0] == new_values[0]
            {
                continue;
            }
            // Every indexer has its index (built when the indexer was added).
            let Some(index) = self.indices.get_mut(name) else {
                continue;
            };
            match old_values {
                Some(Ok(values)) => remove_from_index(index, key, values),
                // The old values are unknown: look for the key everywhere.
                Some(Err(())) => index.retain(|_, keys| {
                    keys.remove(key);
                    !keys.is_empty()
                }),
                None => {}
            }
            for value in new_values {
                index.entry(value).or_default().insert(key.clone());
            }
        }
    }

    fn insert(&mut self, obj: Arc<K>) -> Option<Arc<K>> {
        let key: Key = key_of(obj.as_ref()).into();
        if let Some(rv) = object_rv(obj.as_ref()) {
            rv.clone_into(&mut self.resource_version);
        }
        let old = self.items.insert(key.clone(), obj.clone());
        self.update_indices(&key, old.as_deref(), Some(&obj));
        old
    }

    fn remove(&mut self, key: &str) -> Option<Arc<K>> {
        let (key, old) = self.items.remove_entry(key)?;
        self.update_indices(&key, Some(&old), None);
        Some(old)
    }

    fn remove_object(&mut self, obj: &K) -> Option<Arc<K>> {
        if let Some(rv) = object_rv(obj) {
            rv.clone_into(&mut self.resource_version);
        }
        self.remove(&key_of(obj))
    }

    /// Swaps in `objects` (a later duplicate key wins) and rebuilds every index;
    /// returns the previous items.
    fn replace(
        &mut self,
        objects: Vec<Arc<K>>,
        resource_version: String,
    ) -> HashMap<Key, Arc<K>, Hasher> {
        let mut items = HashMap::with_capacity_and_hasher(objects.len(), Hasher::default());
        for o in objects {
            items.insert(Key::from(key_of(o.as_ref())), o);
        }
        let old = std::mem::replace(&mut self.items, items);
        self.resource_version = resource_version;
        self.indices.clear();
        let names: Vec<String> = self.indexers.keys().cloned().collect();
        for name in names {
            self.build_index(&name);
        }
        old
    }

    fn replace_with_diff(&mut self, objects: Vec<Arc<K>>, rv: String) -> ReplaceDiff<K> {
        let listed = objects.clone();
        let mut old = self.replace(objects, rv);
        let replaced = listed
            .into_iter()
            .map(|new| (old.get(key_of(new.as_ref()).as_str()).cloned(), new))
            .collect();
        old.retain(|k, _| !self.items.contains_key(k));
        let mut deleted: Vec<_> = old.into_iter().map(|(k, o)| (k.to_string(), o)).collect();
        deleted.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        ReplaceDiff { deleted, replaced }
    }

    /// Sets `informer_store_resource_version`, if the store has it.
    fn publish_resource_version(&self) {
        if let Some(gauge) = &self.resource_version_metric
            && let Some(value) = resource_version_metric_value(&self.resource_version)
        {
            gauge.set(value);
        }
    }

    /// (Re)computes index `name` over every item.
    fn build_index(&mut self, name: &str) {
        let Some(index_fn) = self.indexers.get(name) else {
            return;
        };
        let mut index = Index::default();
        for (key, obj) in &self.items {
            for value in index_values(&self.panics, name, index_fn, obj) {
                index.entry(value).or_default().insert(key.clone());
            }
        }
        self.indices.insert(name.to_owned(), index);
    }

    /// The index `name` (every indexer has one: it is built when the indexer is added).
    fn index(&self, name: &str) -> Result<&Index, StoreError> {
        self.indices
            .get(name)
            .ok_or_else(|| StoreError::NoSuchIndex(name.to_owned()))
    }

    fn indexer(&self, name: &str) -> Result<&IndexFn<K>, StoreError> {
        self.indexers
            .get(name)
            .ok_or_else(|| StoreError::NoSuchIndex(name.to_owned()))
    }

    /// The objects under `keys`.
    fn objects<'a>(&'a self, keys: impl IntoIterator<Item = &'a Key>) -> Vec<Arc<K>> {
        keys.into_iter()
            .filter_map(|k| self.items.get(k).cloned())
            .collect()
    }
}

fn remove_from_index(index: &mut Index, key: &Key, values: Vec<String>) {
    for value in values {
        if let Some(keys) = index.get_mut(&value) {
            keys.remove(key);
            if keys.is_empty() {
                index.remove(&value);
            }
        }
    }
}

impl<K> Store<K>
where
    K: Metadata<Ty: ObjectMetaAccess> + Send + Sync + 'static,
{
    /// An empty store with the namespace index.
    pub fn new() -> Self {
        Self::with_indexers(std::iter::empty())
    }

    /// An empty store with the namespace index and `indexers` (an indexer named
    /// [`NAMESPACE_INDEX`] replaces the built-in one).
    pub fn with_indexers(indexers: impl IntoIterator<Item = (String, IndexFn<K>)>) -> Self {
        let mut inner = Inner {
            items: HashMap::default(),
            indexers: HashMap::default(),
            indices: HashMap::default(),
            resource_version: String::new(),
            transform: None,
            resource_version_metric: None,
            panics: PanicCounter::default(),
        };
        inner
            .indexers
            .insert(NAMESPACE_INDEX.to_owned(), namespace_index_fn());
        inner.indexers.extend(indexers);
        for name in inner.indexers.keys() {
            inner.indices.insert(name.clone(), Index::default());
        }
        Self {
            inner: Arc::new(RwLock::new(inner)),
        }
    }

    /// Transforms every object written through [`ReflectorStore`] (add, update, replace;
    /// not delete), for a reflector that fills this store directly (client-go's
    /// `WithTransformer`). Objects written with [`insert`](Self::insert) are stored as given.
    pub fn with_transform(self, transform: Transform<K>) -> Self {
        self.write().transform = Some(transform);
        self
    }

    /// Sets `metric` (client-go's `informer_store_resource_version`) to the store's
    /// resourceVersion (its 15 least significant digits, see
    /// [`resource_version_metric_value`]) now and after every write that moves it.
    pub fn with_resource_version_metric(self, metric: Arc<dyn GaugeMetric>) -> Self {
        {
            let mut inner = self.write();
            inner.resource_version_metric = Some(metric);
            inner.publish_resource_version();
        }
        self
    }

    /// How many times an index function panicked in this store (each time, the object was
    /// left out of that index; see the [module docs](self)).
    pub fn index_panics(&self) -> u64 {
        self.read()
            .panics
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    fn read(&self) -> RwLockReadGuard<'_, Inner<K>> {
        self.inner.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> RwLockWriteGuard<'_, Inner<K>> {
        self.inner.write().unwrap_or_else(|p| p.into_inner())
    }

    /// Adds more indexes and indexes the objects already cached; fails, adding none, if
    /// a name is taken (or given twice).
    pub fn add_indexers(
        &self,
        indexers: impl IntoIterator<Item = (String, IndexFn<K>)>,
    ) -> Result<(), StoreError> {
        let new: Vec<_> = indexers.into_iter().collect();
        let mut inner = self.write();
        let mut seen = HashSet::new();
        if let Some((name, _)) = new
            .iter()
            .find(|(n, _)| inner.indexers.contains_key(n) || !seen.insert(n))
        {
            return Err(StoreError::IndexConflict(name.clone()));
        }
        for (name, index_fn) in new {
            inner.indexers.insert(name.clone(), index_fn);
            inner.build_index(&name);
        }
        Ok(())
    }

    /// The names of the store's indexes, sorted.
    pub fn index_names(&self) -> Vec<String> {
        let mut names: Vec<_> = self.read().indexers.keys().cloned().collect();
        names.sort_unstable();
        names
    }

    /// Adds or replaces an object; returns the previous one under the same key.
    pub fn insert(&self, obj: Arc<K>) -> Option<Arc<K>> {
        let mut inner = self.write();
        let old = inner.insert(obj);
        inner.publish_resource_version();
        old
    }

    /// Removes the object with `key`; returns it if it was cached.
    pub fn remove(&self, key: &str) -> Option<Arc<K>> {
        self.write().remove(key)
    }

    /// Removes the object under `obj`'s key, recording `obj`'s resourceVersion (a watch
    /// DELETED event carries the object's final state); returns the cached one.
    pub fn remove_object(&self, obj: &K) -> Option<Arc<K>> {
        let mut inner = self.write();
        let old = inner.remove_object(obj);
        inner.publish_resource_version();
        old
    }

    /// Replaces the whole content and records `resource_version`. Every index is rebuilt.
    pub fn replace(&self, objects: Vec<Arc<K>>, resource_version: String) {
        let old = {
            let mut inner = self.write();
            let old = inner.replace(objects, resource_version);
            inner.publish_resource_version();
            old
        };
        drop(old); // outside the lock: the last references may be freed here
    }

    /// Like [`replace`](Self::replace), and returns what changed.
    pub fn replace_with_diff(
        &self,
        objects: Vec<Arc<K>>,
        resource_version: String,
    ) -> ReplaceDiff<K> {
        let mut inner = self.write();
        let diff = inner.replace_with_diff(objects, resource_version);
        inner.publish_resource_version();
        diff
    }

    /// Runs `f` with exclusive access to the store: every write in it happens under one
    /// write lock, so readers see all or none of them (client-go's `Transaction`, used
    /// with the queue's `pop_batch`). Returns what `f` returns.
    ///
    /// `f` must not call into this store (or a clone): that would deadlock. Keep handler
    /// calls outside; collect what they need from the transaction's return values.
    pub fn transaction<R>(&self, f: impl FnOnce(&mut StoreTxn<'_, K>) -> R) -> R {
        let mut guard = self.write();
        let out = f(&mut StoreTxn { inner: &mut guard });
        // Once per transaction, at its final resourceVersion (as client-go's batch).
        guard.publish_resource_version();
        out
    }

    /// Records the resourceVersion the cache is current to (after a bookmark or an event).
    pub fn set_resource_version(&self, resource_version: String) {
        let mut inner = self.write();
        inner.resource_version = resource_version;
        inner.publish_resource_version();
    }

    /// The resourceVersion the cache is current to: that of the last replace or bookmark,
    /// or of the last object written since (client-go's `LastStoreSyncResourceVersion`).
    pub fn resource_version(&self) -> String {
        self.read().resource_version.clone()
    }

    /// The object with `key` (`namespace/name` or `name`).
    pub fn get(&self, key: &str) -> Option<Arc<K>> {
        self.read().items.get(key).cloned()
    }

    /// The object `name` in `namespace` (empty for cluster-scoped).
    pub fn get_namespaced(&self, namespace: &str, name: &str) -> Option<Arc<K>> {
        if namespace.is_empty() {
            self.get(name)
        } else {
            self.get(&crate::keys::join_key(namespace, name))
        }
    }

    /// Whether an object with `key` is cached.
    pub fn contains_key(&self, key: &str) -> bool {
        self.read().items.contains_key(key)
    }

    /// Every cached object, in no particular order.
    pub fn list(&self) -> Vec<Arc<K>> {
        self.read().items.values().cloned().collect()
    }

    /// Every cached key, in no particular order.
    pub fn list_keys(&self) -> Vec<ObjectKey> {
        self.read().items.keys().map(|k| k.to_string()).collect()
    }

    /// Number of cached objects.
    pub fn len(&self) -> usize {
        self.read().items.len()
    }

    /// Whether the cache is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Objects sharing at least one value of index `index` with `obj` (client-go's
    /// `Index`), each once.
    pub fn index(&self, index: &str, obj: &K) -> Result<Vec<Arc<K>>, StoreError> {
        let inner = self.read();
        let values = inner.indexer(index)?(obj);
        let idx = inner.index(index)?;
        let mut sets = values.iter().filter_map(|v| idx.get(v));
        Ok(match values.len() {
            1 => sets.next().map(|s| inner.objects(s)).unwrap_or_default(),
            _ => {
                let union: HashSet<&Key, Hasher> = sets.flatten().collect();
                inner.objects(union)
            }
        })
    }

    /// Objects whose index `index` contains `value`.
    pub fn by_index(&self, index: &str, value: &str) -> Result<Vec<Arc<K>>, StoreError> {
        let inner = self.read();
        let keys = inner.index(index)?.get(value);
        Ok(keys.map(|s| inner.objects(s)).unwrap_or_default())
    }

    /// Keys (sorted) of objects whose index `index` contains `value`.
    pub fn index_keys(&self, index: &str, value: &str) -> Result<Vec<ObjectKey>, StoreError> {
        let inner = self.read();
        let mut keys: Vec<ObjectKey> = inner
            .index(index)?
            .get(value)
            .into_iter()
            .flatten()
            .map(|k| k.to_string())
            .collect();
        drop(inner);
        keys.sort_unstable();
        Ok(keys)
    }

    /// Every value the index `index` currently holds, sorted.
    pub fn list_index_func_values(&self, index: &str) -> Result<Vec<String>, StoreError> {
        let values: BTreeSet<String> = self.read().index(index)?.keys().cloned().collect();
        Ok(values.into_iter().collect())
    }

    /// Number of objects under each value of index `index` (for tests and diagnostics).
    pub fn index_value_counts(&self, index: &str) -> Result<HashMap<String, usize>, StoreError> {
        Ok(self
            .read()
            .index(index)?
            .iter()
            .map(|(v, keys)| (v.clone(), keys.len()))
            .collect())
    }

    /// Applies the transform, if any, to an object written through [`ReflectorStore`]: in
    /// place when the store holds the only reference (as a reflector's objects are), else to
    /// a copy.
    fn transform_shared(&self, obj: Arc<K>) -> Arc<K>
    where
        K: Clone,
    {
        let transform = self.read().transform.clone();
        match transform {
            Some(t) => Arc::new(t(Arc::unwrap_or_clone(obj))),
            None => obj,
        }
    }
}

/// Exclusive access to a [`Store`] inside [`Store::transaction`]. Writes take effect
/// immediately (reads in the same transaction see them) and become visible to other
/// readers together when the transaction ends.
pub struct StoreTxn<'a, K> {
    inner: &'a mut Inner<K>,
}

impl<K> std::fmt::Debug for StoreTxn<'_, K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreTxn").finish_non_exhaustive()
    }
}

impl<K> StoreTxn<'_, K>
where
    K: Metadata<Ty: ObjectMetaAccess>,
{
    /// The object with `key`.
    pub fn get(&self, key: &str) -> Option<&Arc<K>> {
        self.inner.items.get(key)
    }

    /// Adds or replaces an object; returns the previous one under the same key.
    pub fn insert(&mut self, obj: Arc<K>) -> Option<Arc<K>> {
        self.inner.insert(obj)
    }

    /// Removes the object with `key`; returns it if it was cached.
    pub fn remove(&mut self, key: &str) -> Option<Arc<K>> {
        self.inner.remove(key)
    }

    /// [`Store::remove_object`] inside the transaction.
    pub fn remove_object(&mut self, obj: &K) -> Option<Arc<K>> {
        self.inner.remove_object(obj)
    }

    /// [`Store::replace_with_diff`] inside the transaction.
    pub fn replace(&mut self, objects: Vec<Arc<K>>, resource_version: String) -> ReplaceDiff<K> {
        self.inner.replace_with_diff(objects, resource_version)
    }

    /// Removes every object `selector` does not select (by the hash of its UID or
    /// namespace); returns them with their keys, sorted by key.
    pub fn retain_selected(&mut self, selector: &ShardSelector) -> Vec<(ObjectKey, Arc<K>)> {
        let mut gone: Vec<(ObjectKey, Arc<K>)> = self
            .inner
            .items
            .iter()
            .filter(|(_, obj)| !selector.matches(obj.metadata()))
            .map(|(key, obj)| (key.to_string(), obj.clone()))
            .collect();
        gone.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        for (key, _) in &gone {
            self.inner.remove(key);
        }
        gone
    }

    /// Records the resourceVersion the cache is current to.
    pub fn set_resource_version(&mut self, resource_version: String) {
        self.inner.resource_version = resource_version;
    }

    /// Every cached object, in no particular order.
    pub fn list(&self) -> Vec<Arc<K>> {
        self.inner.items.values().cloned().collect()
    }

    /// Number of cached objects.
    pub fn len(&self) -> usize {
        self.inner.items.len()
    }

    /// Whether the cache is empty.
    pub fn is_empty(&self) -> bool {
        self.inner.items.is_empty()
    }
}

/// A reflector filling the store directly (kube-rs style, no handlers): events write
/// through, a list replaces, a bookmark records its resourceVersion, resync does nothing.
impl<K> ReflectorStore<K> for Store<K>
where
    K: Metadata<Ty: ObjectMetaAccess> + Clone + Send + Sync + 'static,
{
    fn add(&self, obj: Arc<K>) {
        self.insert(self.transform_shared(obj));
    }

    fn update(&self, obj: Arc<K>) {
        self.insert(self.transform_shared(obj));
    }

    fn delete(&self, obj: Arc<K>) {
        self.remove_object(&obj);
    }

    fn replace(&self, objects: Vec<Arc<K>>, resource_version: String) {
        self.replace_keeping(objects, Vec::new(), resource_version);
    }

    fn replace_keeping(
        &self,
        objects: Vec<Arc<K>>,
        kept: Vec<ObjectKey>,
        resource_version: String,
    ) {
        let mut objects: Vec<Arc<K>> = match self.read().transform.clone() {
            Some(t) => objects
                .into_iter()
                .map(|o| Arc::new(t(Arc::unwrap_or_clone(o))))
                .collect(),
            None => objects,
        };
        // Listed but not admitted: what the store holds for them stays.
        self.transaction(|txn| {
            objects.extend(kept.iter().filter_map(|k| txn.get(k).cloned()));
            txn.replace(objects, resource_version);
        });
    }

    fn reshard(&self, change: Reshard<K>) -> Result<(), Reshard<K>> {
        let Reshard {
            keep,
            objects,
            applied,
        } = change;
        let transform = self.read().transform.clone();
        let gone = self.transaction(|txn| {
            let gone = match &keep {
                Some(keep) => txn.retain_selected(keep),
                None => Vec::new(),
            };
            for obj in objects {
                let obj = match &transform {
                    Some(t) => Arc::new(t(Arc::unwrap_or_clone(obj))),
                    None => obj,
                };
                txn.insert(obj);
            }
            gone
        });
        drop(gone); // outside the lock
        applied.done();
        Ok(())
    }

    fn resync(&self) {}

    fn bookmark(&self, resource_version: String) {
        self.set_resource_version(resource_version);
    }
}

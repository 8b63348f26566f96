//! Typed, read-only views of a [`Store`] for controllers (client-go's listers).
//!
//! A [`Lister`] lists by label selector across namespaces or gets one object; its
//! [`namespaced`](Lister::namespaced) view does the same within one namespace, using the
//! store's namespace index. Results are the cached `Arc`s: never modify them in place.

use kctrl_client::ObjectMetaAccess;
use std::sync::Arc;

use k8s_openapi::Metadata;
use kctrl_client::labels::Selector;

use crate::store::{NAMESPACE_INDEX, Store};

/// Objects of `store` whose labels match `selector` (client-go's `ListAll`): none for
/// [`Selector::nothing`]; every object, without looking at labels, for
/// [`Selector::everything`].
pub fn list_all<K>(store: &Store<K>, selector: &Selector) -> Vec<Arc<K>>
where
    K: Metadata<Ty: ObjectMetaAccess> + Send + Sync + 'static,
{
    if selector.is_nothing() {
        return Vec::new();
    }
    filter_labels(store.list(), selector)
}

/// Objects of `store` in `namespace` whose labels match `selector` (client-go's
/// `ListAllByNamespace`). Uses the [`NAMESPACE_INDEX`], or scans every object if the store
/// has none. An empty `namespace` means all namespaces ([`list_all`]).
pub fn list_all_by_namespace<K>(
    store: &Store<K>,
    namespace: &str,
    selector: &Selector,
) -> Vec<Arc<K>>
where
    K: Metadata<Ty: ObjectMetaAccess> + Send + Sync + 'static,
{
    if selector.is_nothing() {
        return Vec::new();
    }
    if namespace.is_empty() {
        return list_all(store, selector);
    }
    match store.by_index(NAMESPACE_INDEX, namespace) {
        Ok(objects) => filter_labels(objects, selector),
        Err(_) => {
            tracing::debug!("no namespace index, listing {namespace} by a full scan");
            let mut objects = store.list();
            objects.retain(|o| o.metadata().namespace() == Some(namespace));
            filter_labels(objects, selector)
        }
    }
}

fn filter_labels<K>(mut objects: Vec<Arc<K>>, selector: &Selector) -> Vec<Arc<K>>
where
    K: Metadata<Ty: ObjectMetaAccess>,
{
    if !selector.is_everything() {
        objects.retain(|o| selector.matches_meta(o.metadata()));
    }
    objects
}

/// A read-only view of a [`Store`] (client-go's `GenericLister`). Cheap to clone.
pub struct Lister<K> {
    store: Store<K>,
}

impl<K> Clone for Lister<K> {
    fn clone(&self) -> Self {
        Self {
            store: self.store.clone(),
        }
    }
}

impl<K> std::fmt::Debug for Lister<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lister").finish_non_exhaustive()
    }
}

impl<K> Lister<K>
where
    K: Metadata<Ty: ObjectMetaAccess> + Send + Sync + 'static,
{
    /// A lister over `store`.
    pub fn new(store: Store<K>) -> Self {
        Self { store }
    }

    /// The underlying store (for index queries).
    pub fn store(&self) -> &Store<K> {
        &self.store
    }

    /// Objects in every namespace whose labels match `selector`.
    pub fn list(&self, selector: &Selector) -> Vec<Arc<K>> {
        list_all(&self.store, selector)
    }

    /// The object `name` in `namespace`; an empty `namespace` for a cluster-scoped object.
    pub fn get(&self, namespace: &str, name: &str) -> Option<Arc<K>> {
        self.store.get_namespaced(namespace, name)
    }

    /// The view of one namespace (an empty `namespace` lists all namespaces and gets
    /// cluster-scoped objects).
    pub fn namespaced(&self, namespace: &str) -> NamespacedLister<K> {
        NamespacedLister {
            store: self.store.clone(),
            namespace: namespace.to_owned(),
        }
    }
}

/// A read-only view of one namespace of a [`Store`] (client-go's `GenericNamespaceLister`).
pub struct NamespacedLister<K> {
    store: Store<K>,
    namespace: String,
}

impl<K> Clone for NamespacedLister<K> {
    fn clone(&self) -> Self {
        Self {
            store: self.store.clone(),
            namespace: self.namespace.clone(),
        }
    }
}

impl<K> std::fmt::Debug for NamespacedLister<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NamespacedLister")
            .field("namespace", &self.namespace)
            .finish_non_exhaustive()
    }
}

impl<K> NamespacedLister<K>
where
    K: Metadata<Ty: ObjectMetaAccess> + Send + Sync + 'static,
{
    /// The namespace this view lists.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// Objects in the namespace whose labels match `selector`.
    pub fn list(&self, selector: &Selector) -> Vec<Arc<K>> {
        list_all_by_namespace(&self.store, &self.namespace, selector)
    }

    /// The object `name` in the namespace.
    pub fn get(&self, name: &str) -> Option<Arc<K>> {
        self.store.get_namespaced(&self.namespace, name)
    }
}

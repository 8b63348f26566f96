//! What an informer calls when the cache changes: the [`ResourceEventHandler`] trait, a
//! closures-based implementation ([`EventHandlerFns`]) and a filtering wrapper
//! ([`FilteringHandler`]).
//!
//! Handlers receive shared `Arc`s of the cached objects: never mutate them (clone the inner
//! value to modify it). A handler should be quick, typically pushing a key into a work queue;
//! each handler runs on its own thread of notifications, so a slow one delays only itself.

use std::sync::Arc;

use crate::delta::DeletedObject;

/// Receives the notifications of one informer, in order (client-go's `ResourceEventHandler`).
///
/// The informer calls one handler sequentially, never concurrently with itself. A panic in a
/// handler is caught, logged and counted
/// ([`HandlerRegistration::handler_panics`](crate::HandlerRegistration::handler_panics)), and
/// that notification is dropped: it is not delivered again. Handlers that must not lose an
/// event should not panic (or should catch their own panics and re-queue the work).
pub trait ResourceEventHandler<K>: Send + Sync + 'static {
    /// An object appeared in the cache. `is_in_initial_list` is true when it came from the
    /// informer's first list, or from the cache replay a handler added late receives.
    fn on_add(&self, obj: &Arc<K>, is_in_initial_list: bool);

    /// An object changed. On a resync, `old` and `new` are the same object (same
    /// resourceVersion).
    fn on_update(&self, old: &Arc<K>, new: &Arc<K>);

    /// An object was deleted; see [`DeletedObject`] for deletions found by a relist.
    fn on_delete(&self, obj: &DeletedObject<K>);
}

impl<K, H> ResourceEventHandler<K> for Arc<H>
where
    H: ResourceEventHandler<K> + ?Sized,
{
    fn on_add(&self, obj: &Arc<K>, is_in_initial_list: bool) {
        (**self).on_add(obj, is_in_initial_list);
    }

    fn on_update(&self, old: &Arc<K>, new: &Arc<K>) {
        (**self).on_update(old, new);
    }

    fn on_delete(&self, obj: &DeletedObject<K>) {
        (**self).on_delete(obj);
    }
}

type AddFn<K> = Box<dyn Fn(&Arc<K>, bool) + Send + Sync>;
type UpdateFn<K> = Box<dyn Fn(&Arc<K>, &Arc<K>) + Send + Sync>;
type DeleteFn<K> = Box<dyn Fn(&DeletedObject<K>) + Send + Sync>;

/// A handler made of closures; a notification without a closure is ignored (client-go's
/// `ResourceEventHandlerDetailedFuncs`).
///
/// ```
/// use kctrl_informer::EventHandlerFns;
/// use k8s_openapi::api::core::v1::Pod;
///
/// let handler = EventHandlerFns::<Pod>::new()
///     .on_add(|pod, _initial| println!("added {:?}", pod.metadata.name))
///     .on_delete(|deleted| println!("deleted {:?}", deleted.object().metadata.name));
/// # let _ = handler;
/// ```
pub struct EventHandlerFns<K> {
    add: Option<AddFn<K>>,
    update: Option<UpdateFn<K>>,
    delete: Option<DeleteFn<K>>,
}

impl<K> Default for EventHandlerFns<K> {
    fn default() -> Self {
        Self {
            add: None,
            update: None,
            delete: None,
        }
    }
}

impl<K> std::fmt::Debug for EventHandlerFns<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventHandlerFns")
            .field("add", &self.add.is_some())
            .field("update", &self.update.is_some())
            .field("delete", &self.delete.is_some())
            .finish()
    }
}

impl<K> EventHandlerFns<K> {
    /// A handler that ignores every notification until closures are set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Calls `f(obj, is_in_initial_list)` on additions.
    pub fn on_add(mut self, f: impl Fn(&Arc<K>, bool) + Send + Sync + 'static) -> Self {
        self.add = Some(Box::new(f));
        self
    }

    /// Calls `f(old, new)` on updates.
    pub fn on_update(mut self, f: impl Fn(&Arc<K>, &Arc<K>) + Send + Sync + 'static) -> Self {
        self.update = Some(Box::new(f));
        self
    }

    /// Calls `f(deleted)` on deletions.
    pub fn on_delete(mut self, f: impl Fn(&DeletedObject<K>) + Send + Sync + 'static) -> Self {
        self.delete = Some(Box::new(f));
        self
    }
}

impl<K: 'static> ResourceEventHandler<K> for EventHandlerFns<K> {
    fn on_add(&self, obj: &Arc<K>, is_in_initial_list: bool) {
        if let Some(f) = &self.add {
            f(obj, is_in_initial_list);
        }
    }

    fn on_update(&self, old: &Arc<K>, new: &Arc<K>) {
        if let Some(f) = &self.update {
            f(old, new);
        }
    }

    fn on_delete(&self, obj: &DeletedObject<K>) {
        if let Some(f) = &self.delete {
            f(obj);
        }
    }
}

/// Passes to `inner` only the objects `filter` accepts (client-go's
/// `FilteringResourceEventHandler`).
///
/// An update is translated by which side passes: both → `on_update`; only the new object →
/// `on_add(new, false)` (it entered the filtered set); only the old one → `on_delete(old)`
/// (it left it); neither → nothing.
pub struct FilteringHandler<K, H> {
    filter: Box<dyn Fn(&K) -> bool + Send + Sync>,
    inner: H,
}

impl<K, H> std::fmt::Debug for FilteringHandler<K, H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FilteringHandler").finish_non_exhaustive()
    }
}

impl<K, H> FilteringHandler<K, H> {
    /// Wraps `inner` behind `filter`.
    pub fn new(filter: impl Fn(&K) -> bool + Send + Sync + 'static, inner: H) -> Self {
        Self {
            filter: Box::new(filter),
            inner,
        }
    }
}

impl<K, H> ResourceEventHandler<K> for FilteringHandler<K, H>
where
    K: 'static,
    H: ResourceEventHandler<K>,
{
    fn on_add(&self, obj: &Arc<K>, is_in_initial_list: bool) {
        if (self.filter)(obj) {
            self.inner.on_add(obj, is_in_initial_list);
        }
    }

    fn on_update(&self, old: &Arc<K>, new: &Arc<K>) {
        match ((self.filter)(old), (self.filter)(new)) {
            (true, true) => self.inner.on_update(old, new),
            (false, true) => self.inner.on_add(new, false),
            (true, false) => self.inner.on_delete(&DeletedObject::Known(old.clone())),
            (false, false) => {}
        }
    }

    fn on_delete(&self, obj: &DeletedObject<K>) {
        if (self.filter)(obj.object()) {
            self.inner.on_delete(obj);
        }
    }
}

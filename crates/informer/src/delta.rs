//! What flows from the reflector to the cache: the [`ReflectorStore`] seam and [`Delta`]s.

use std::sync::Arc;

use crate::keys::ObjectKey;
use crate::shard::Reshard;

/// Where a reflector writes what it lists and watches. Implemented by the in-order queue
/// (`fifo`) that feeds shared informers, and by [`Store`](crate::Store) for a reflector that
/// fills a cache directly.
///
/// Objects arrive already in the `Arc` they will be cached in: a reflector allocates each
/// decoded object once, so a list of thousands is never held as a contiguous run of inline
/// structs and nothing is moved again on its way to the cache. The `Arc`s a reflector hands
/// over are not shared with anything else.
pub trait ReflectorStore<K>: Send + Sync + 'static {
    /// A watch ADDED event.
    fn add(&self, obj: Arc<K>);
    /// A watch MODIFIED event.
    fn update(&self, obj: Arc<K>);
    /// A watch DELETED event (the object's last state).
    fn delete(&self, obj: Arc<K>);
    /// A complete list at `resource_version`: the new whole state. Objects absent from it
    /// were deleted while we were not watching.
    fn replace(&self, objects: Vec<Arc<K>>, resource_version: String);
    /// A complete list like [`replace`](Self::replace), except that the objects under `kept`
    /// were listed but could not be admitted (the transform panicked on them): they still
    /// exist, so the store keeps what it holds for them (no deletion is inferred) and only
    /// the other absent objects count as deleted. The default ignores `kept` and replaces.
    fn replace_keeping(
        &self,
        objects: Vec<Arc<K>>,
        kept: Vec<ObjectKey>,
        resource_version: String,
    ) {
        let _ = kept;
        self.replace(objects, resource_version);
    }
    /// The informer's shard selector changed ([`ShardScope`](crate::ShardScope)): drop the
    /// cached objects `change.keep` does not select, add `change.objects`, then call
    /// `change.applied.done()` once the cache reflects it. `Err(change)` when the store
    /// cannot (the default): the reflector then lists the whole new selection and
    /// [`replace`](Self::replace)s instead.
    fn reshard(&self, change: Reshard<K>) -> Result<(), Reshard<K>> {
        Err(change)
    }
    /// A periodic resync: re-deliver the cached state to handlers that asked for it.
    fn resync(&self);
    /// A BOOKMARK: nothing changed, but the store is now current up to `resource_version`.
    fn bookmark(&self, resource_version: String);
}

/// An object that was deleted, as handlers receive it.
#[derive(Debug)]
pub enum DeletedObject<K> {
    /// Seen deleted by a watch: this is the object's last state.
    Known(Arc<K>),
    /// Found missing by a relist: the deletion itself was never observed, so `last_known`
    /// is the last state the cache had (client-go's `DeletedFinalStateUnknown`).
    FinalStateUnknown {
        /// The object's cache key.
        key: ObjectKey,
        /// The last state the cache held.
        last_known: Arc<K>,
    },
}

impl<K> Clone for DeletedObject<K> {
    fn clone(&self) -> Self {
        match self {
            DeletedObject::Known(o) => DeletedObject::Known(o.clone()),
            DeletedObject::FinalStateUnknown { key, last_known } => {
                DeletedObject::FinalStateUnknown {
                    key: key.clone(),
                    last_known: last_known.clone(),
                }
            }
        }
    }
}

impl<K> DeletedObject<K> {
    /// The deleted object's last known state.
    pub fn object(&self) -> &Arc<K> {
        match self {
            DeletedObject::Known(o) => o,
            DeletedObject::FinalStateUnknown { last_known, .. } => last_known,
        }
    }

    /// Whether the deletion was inferred from a relist rather than observed.
    pub fn is_final_state_unknown(&self) -> bool {
        matches!(self, DeletedObject::FinalStateUnknown { .. })
    }
}

/// One entry of the in-order queue between the reflector and the cache (client-go's
/// `RealFIFO` with atomic events: a relist is one `ReplacedAll`, a resync one `SyncAll`).
#[derive(Debug)]
pub enum Delta<K> {
    /// Watch ADDED.
    Added(Arc<K>),
    /// Watch MODIFIED.
    Updated(Arc<K>),
    /// Watch DELETED.
    Deleted(Arc<K>),
    /// A full list: the consumer diffs it against the cache, emitting deletes
    /// (`FinalStateUnknown`), updates and adds.
    ReplacedAll {
        /// The listed objects (already transformed).
        objects: Vec<Arc<K>>,
        /// The list's resourceVersion.
        resource_version: String,
        /// Keys listed but not admitted (the transform panicked on them): the cache keeps
        /// what it holds for them rather than treating them as deleted.
        kept: Vec<ObjectKey>,
    },
    /// The shard selector changed: the consumer removes the cached objects `keep` does not
    /// select (`Delete(FinalStateUnknown)`), adds `objects` (listed in the ranges gained),
    /// then calls `applied.done()`.
    Resharded(Reshard<K>),
    /// A resync: re-deliver every cached object as an update to resyncing handlers.
    SyncAll,
    /// A bookmark's resourceVersion.
    Bookmark(String),
}

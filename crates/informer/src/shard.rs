//! Shard scopes: informers that cache one part of a resource, chosen by a
//! [`ShardSelector`] that can change while they run (server-side sharded list and watch,
//! KEP-5866).
//!
//! A [`ShardScope`] is a shared, changeable selector. Informers built over it
//! ([`ListWatch::shard`](crate::ListWatch::shard),
//! [`SharedInformerFactoryBuilder::shard_scope`](crate::SharedInformerFactoryBuilder::shard_scope))
//! list and watch with its selector, and follow it when it changes:
//!
//! * objects that leave the selected ranges leave the cache, and handlers see them deleted
//!   ([`DeletedObject::FinalStateUnknown`](crate::DeletedObject::FinalStateUnknown): they
//!   still exist, the informer just stopped following them);
//! * objects of the ranges gained are listed (only those ranges) and reach handlers as adds;
//! * objects that stay are not listed again, and handlers hear nothing about them.
//!
//! The server filters when kube-apiserver runs with the `ShardedListAndWatch` feature gate
//! (alpha, off by default: `--feature-gates=ShardedListAndWatch=true`). A server without it
//! ignores the selector and sends every object: the informer then filters on the client with
//! the same hash, so the cache holds the same objects, logs a warning once naming the
//! resource, and reports it ([`ShardFiltering::Client`], the
//! `kctrl_informer_shard_client_filtering` gauge); the network and the server's work are then
//! what they would be without sharding.
//!
//! A caller that widens its scope and must not act before the new objects are cached waits
//! with [`ShardScope::applied`]:
//!
//! ```no_run
//! # async fn demo(scope: kctrl_informer::ShardScope) -> Result<(), kctrl_client::ShardSelectorError> {
//! use kctrl_client::{HashRange, ShardField, ShardSelector};
//!
//! let all_of_it = ShardSelector::new(ShardField::Uid, [HashRange::FULL])?;
//! let generation = scope.set(Some(all_of_it));
//! scope.applied(generation).await; // every running informer of the scope caches it all
//! # Ok(()) }
//! ```

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};

use kctrl_client::ShardSelector;
use tokio::sync::watch;

/// How an informer's shard selector is applied.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ShardFiltering {
    /// No selector: the informer caches the whole resource.
    Unsharded,
    /// The server filters: only the selected objects cross the network. Also the state of
    /// a streaming list (watch-list), whose answer cannot say whether the server filtered,
    /// until an object outside the selector shows otherwise.
    Server,
    /// The server ignored the selector (no `ShardedListAndWatch` feature gate, or an older
    /// kube-apiserver): every object is received and the informer drops the others.
    Client,
}

/// What a scope holds: the selector and how many times it was set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ScopeState {
    pub(crate) generation: u64,
    pub(crate) selector: Option<ShardSelector>,
}

struct ScopeInner {
    state: watch::Sender<ScopeState>,
    /// Per running informer (reflector), the generation its cache reflects (0: none yet).
    members: Mutex<Members>,
    /// Bumped whenever a member registers, leaves or applies a generation.
    progress: watch::Sender<u64>,
}

#[derive(Default)]
struct Members {
    next_id: u64,
    applied: HashMap<u64, u64>,
}

/// A shard selector shared by informers, changeable at run time. Cheap to clone; clones are
/// the same scope. See the [module documentation](self).
#[derive(Clone)]
pub struct ShardScope {
    inner: Arc<ScopeInner>,
}

impl fmt::Debug for ShardScope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.inner.state.borrow().clone();
        f.debug_struct("ShardScope")
            .field("generation", &state.generation)
            .field("selector", &state.selector.map(|s| s.to_string()))
            .field("informers", &self.informers())
            .finish()
    }
}

impl ShardScope {
    /// A scope selecting `selector` (generation 1); `None` selects everything.
    pub fn new(selector: Option<ShardSelector>) -> Self {
        let (state, _) = watch::channel(ScopeState {
            generation: 1,
            selector,
        });
        let (progress, _) = watch::channel(0);
        Self {
            inner: Arc::new(ScopeInner {
                state,
                members: Mutex::new(Members::default()),
                progress,
            }),
        }
    }

    /// Changes the selector and returns the new generation, to wait for with
    /// [`applied`](Self::applied). Setting the selector the scope already holds changes
    /// nothing and returns the current generation.
    pub fn set(&self, selector: Option<ShardSelector>) -> u64 {
        let mut generation = 0;
        self.inner.state.send_if_modified(|st| {
            if st.selector == selector {
                generation = st.generation;
                return false;
            }
            st.generation += 1;
            st.selector = selector;
            generation = st.generation;
            true
        });
        generation
    }

    /// Whether `other` is this scope (a clone of it), not merely one holding the same
    /// selector.
    pub fn same_scope(&self, other: &ShardScope) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// The current selector; `None` selects everything.
    pub fn get(&self) -> Option<ShardSelector> {
        self.inner.state.borrow().selector.clone()
    }

    /// How many times the selector was set, counting the one it was created with (so 1 for
    /// a new scope).
    pub fn generation(&self) -> u64 {
        self.inner.state.borrow().generation
    }

    /// How many running informers follow the scope.
    pub fn informers(&self) -> usize {
        self.members().applied.len()
    }

    /// The oldest generation the caches of the scope's running informers reflect; `None`
    /// when no informer runs, `Some(0)` while one has not finished its first list.
    pub fn applied_generation(&self) -> Option<u64> {
        self.members().applied.values().min().copied()
    }

    /// Waits until every running informer of the scope has applied `generation` or a later
    /// one: the objects of the ranges it gained are in its cache (and on their way to its
    /// handlers), those of the ranges it lost are gone from it. An informer that is not
    /// running (not yet started, or stopped) is not waited for; one that cannot reach the
    /// server is, for as long as it cannot (bound the wait with a timeout if that matters).
    pub async fn applied(&self, generation: u64) {
        let mut progress = self.inner.progress.subscribe();
        loop {
            if self.applied_generation().is_none_or(|g| g >= generation) {
                return;
            }
            // The sender lives in `self`: `changed` cannot fail while we wait.
            if progress.changed().await.is_err() {
                return;
            }
        }
    }

    fn members(&self) -> MutexGuard<'_, Members> {
        self.inner.members.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers a running informer; it counts for [`applied`](Self::applied) until the
    /// returned member is dropped.
    pub(crate) fn register(&self) -> ScopeMember {
        let id = {
            let mut m = self.members();
            m.next_id += 1;
            let id = m.next_id;
            m.applied.insert(id, 0);
            id
        };
        self.inner.progress.send_modify(|n| *n += 1);
        ScopeMember {
            scope: self.clone(),
            id,
        }
    }
}

/// One reflector's membership of a scope.
pub(crate) struct ScopeMember {
    scope: ShardScope,
    id: u64,
}

impl ScopeMember {
    /// The scope's selector and generation now.
    pub(crate) fn current(&self) -> ScopeState {
        self.scope.inner.state.borrow().clone()
    }

    /// Completes once the scope's generation is no longer `generation`.
    pub(crate) fn changed_from(
        &self,
        generation: u64,
    ) -> impl std::future::Future<Output = ()> + Send + 'static {
        let mut rx = self.scope.inner.state.subscribe();
        async move {
            if rx.wait_for(|s| s.generation != generation).await.is_err() {
                // The scope outlives its members: unreachable; never complete rather than spin.
                std::future::pending::<()>().await;
            }
        }
    }

    /// A token that records, when [`done`](ShardApplied::done), that this member's cache
    /// reflects `generation`.
    pub(crate) fn token(&self, generation: u64) -> ShardApplied {
        ShardApplied {
            scope: self.scope.clone(),
            id: self.id,
            generation,
        }
    }
}

impl Drop for ScopeMember {
    fn drop(&mut self) {
        self.scope.members().applied.remove(&self.id);
        self.scope.inner.progress.send_modify(|n| *n += 1);
    }
}

/// Says, once a cache has taken in a shard change, that its informer applied the scope's
/// generation ([`ShardScope::applied`]). Carried by [`Reshard`] to whoever applies it.
pub struct ShardApplied {
    scope: ShardScope,
    id: u64,
    generation: u64,
}

impl fmt::Debug for ShardApplied {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ShardApplied")
            .field("generation", &self.generation)
            .finish_non_exhaustive()
    }
}

impl ShardApplied {
    /// The generation applied.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Records the generation as applied (the cache now reflects it). Dropping the token
    /// instead records nothing.
    pub fn done(self) {
        let mut members = self.scope.members();
        if let Some(g) = members.applied.get_mut(&self.id) {
            *g = (*g).max(self.generation);
        }
        drop(members);
        self.scope.inner.progress.send_modify(|n| *n += 1);
    }
}

/// A change of an informer's shard selector, as its reflector hands it to its
/// [`ReflectorStore`](crate::ReflectorStore): drop every cached object `keep` does not
/// select (telling handlers they were deleted), then add (or update) `objects`, the ones
/// listed in the ranges gained, and finally call [`ShardApplied::done`] on `applied`.
#[derive(Debug)]
pub struct Reshard<K> {
    /// The new selector; `None` keeps every cached object.
    pub keep: Option<ShardSelector>,
    /// The objects of the ranges gained, as listed.
    pub objects: Vec<Arc<K>>,
    /// To call once the cache reflects the change.
    pub applied: ShardApplied,
}

#[cfg(test)]
mod tests {
    use super::*;
    use kctrl_client::{HashRange, ShardField};

    fn half(low: bool) -> ShardSelector {
        let range = if low {
            HashRange::new(0, 1 << 63)
        } else {
            HashRange::new(1 << 63, 1 << 64)
        };
        ShardSelector::new(ShardField::Uid, [range.unwrap()]).unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn applied_waits_for_every_running_member() {
        let scope = ShardScope::new(Some(half(true)));
        assert_eq!(scope.generation(), 1);
        // Nobody runs: nothing to wait for.
        scope.applied(5).await;
        assert_eq!(scope.applied_generation(), None);

        let a = scope.register();
        let b = scope.register();
        assert_eq!(scope.informers(), 2);
        assert_eq!(scope.applied_generation(), Some(0));
        assert_eq!(a.current().selector, Some(half(true)));

        let change = tokio::spawn(a.changed_from(1));
        tokio::task::yield_now().await;
        assert!(!change.is_finished());
        let g = scope.set(Some(half(false)));
        assert_eq!(g, 2);
        assert_eq!(scope.set(Some(half(false))), 2, "the same selector again");
        change.await.unwrap();
        assert_eq!(a.current().generation, 2);

        let waiter = tokio::spawn({
            let scope = scope.clone();
            async move { scope.applied(2).await }
        });
        tokio::task::yield_now().await;
        a.token(2).done();
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished(), "b has not applied generation 2");
        // A token dropped unused records nothing.
        drop(b.token(2));
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        // A member leaving is no longer waited for.
        drop(b);
        waiter.await.unwrap();
        assert_eq!(scope.applied_generation(), Some(2));
        // An older token does not move a member back.
        a.token(1).done();
        assert_eq!(scope.applied_generation(), Some(2));
    }
}

//! Indexes of the shared caches, for the queries a reconcile makes: controller-runtime's
//! field indexer (`IndexField`, then `List(.., MatchingFields{..})`) on kctrl-informer's
//! store indexes.
//!
//! * [`Controller::index`](crate::Controller::index) declares an index on the cache of any
//!   resource (owned, watched, or only read); the controller then waits for that cache before
//!   its first reconcile.
//! * [`Controller::cache`](crate::Controller::cache) is the cache to keep in the reconcile's
//!   context and query with [`Store::by_index`].
//! * [`controlled_by`] finds the objects a reconciled object controls (as a Go controller
//!   lists a CronJob's Jobs by a `.metadata.controller` field index): with
//!   [`by_controller_uid`] declared as the index [`CONTROLLER_UID_INDEX`], in one lookup;
//!   without it, by a scan of the owner's namespace. The index costs memory per cached
//!   object, which is why [`Controller::owns`](crate::Controller::owns) does not add it.

use std::sync::Arc;

use k8s_openapi::Metadata;
use kctrl_client::ObjectMetaAccess;
use kctrl_informer::Store;
use kctrl_informer::store::NAMESPACE_INDEX;

use crate::handlers::OwnerRefs;

/// The name under which [`controlled_by`] looks for [`by_controller_uid`]:
/// `controller.index::<C>(CONTROLLER_UID_INDEX, by_controller_uid)`.
pub const CONTROLLER_UID_INDEX: &str = "kctrl.controller-uid";

/// An index function: the UID of an object's controller (its owner reference with
/// `controller: true`), if it has one.
pub fn by_controller_uid<C: Metadata<Ty: OwnerRefs>>(obj: &C) -> Vec<String> {
    obj.metadata()
        .controller_uid()
        .map(str::to_owned)
        .into_iter()
        .collect()
}

/// The objects of `cache` controlled by `owner` (an owner reference with `controller: true`
/// and `owner`'s UID) in `owner`'s namespace (anywhere, for a cluster-scoped owner): through
/// [`CONTROLLER_UID_INDEX`] when the cache has it, else by a scan of that namespace.
///
/// ```
/// use std::sync::Arc;
///
/// use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
/// use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
/// use kctrl_informer::Store;
/// use kctrl_runtime::index::controlled_by;
///
/// let web = Deployment {
///     metadata: ObjectMeta { name: Some("web".into()), uid: Some("u-web".into()), ..Default::default() },
///     ..Default::default()
/// };
/// let owned = ReplicaSet {
///     metadata: ObjectMeta {
///         name: Some("web-1".into()),
///         owner_references: Some(vec![OwnerReference {
///             api_version: "apps/v1".into(), kind: "Deployment".into(), name: "web".into(),
///             uid: "u-web".into(), controller: Some(true), ..Default::default()
///         }]),
///         ..Default::default()
///     },
///     ..Default::default()
/// };
/// let cache: Store<ReplicaSet> = Store::new();
/// cache.insert(Arc::new(owned));
/// let found = controlled_by(&cache, &web);
/// assert_eq!(found[0].metadata.name.as_deref(), Some("web-1"));
/// ```
pub fn controlled_by<C, O>(cache: &Store<C>, owner: &O) -> Vec<Arc<C>>
where
    C: Metadata<Ty: OwnerRefs> + Send + Sync + 'static,
    O: Metadata<Ty: ObjectMetaAccess>,
{
    let Some(uid) = owner.metadata().uid().filter(|u| !u.is_empty()) else {
        return Vec::new();
    };
    let namespace = owner.metadata().namespace().filter(|ns| !ns.is_empty());
    if let Ok(found) = cache.by_index(CONTROLLER_UID_INDEX, uid) {
        // A controller reference across namespaces is not valid: not the owner's.
        return found
            .into_iter()
            .filter(|c| namespace.is_none_or(|ns| c.metadata().namespace() == Some(ns)))
            .collect();
    }
    let candidates = match namespace {
        Some(ns) => cache.by_index(NAMESPACE_INDEX, ns).unwrap_or_default(),
        None => cache.list(),
    };
    candidates
        .into_iter()
        .filter(|c| by_controller_uid(c.as_ref()).iter().any(|u| u == uid))
        .collect()
}

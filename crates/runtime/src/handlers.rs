//! The informer handlers a [`Controller`](crate::Controller) registers: each turns a
//! notification into keys of the primary resource on the work queue.
//!
//! Lanes: objects from an informer's initial list and resyncs (an update with an unchanged
//! resourceVersion) go to the queue's low lane, live changes to the high lane, so a restart's
//! thousands of initial keys do not delay a change a user just made.

use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::{Metadata, Resource};
use kctrl_client::{CompactObjectMeta, ObjectMetaAccess, ResourceRef};
use kctrl_informer::{DeletedObject, ObjectKey, ResourceEventHandler, key_for, key_of};
use kctrl_workqueue::{Priority, RateLimitingQueue};

use crate::own_writes::OwnWrites;
use crate::predicate::Predicate;
use crate::shard::{GateCell, admits_key, admits_object};

/// The lane of an add.
fn add_lane(is_in_initial_list: bool) -> Priority {
    if is_in_initial_list {
        Priority::Low
    } else {
        Priority::High
    }
}

/// The lane of an update: a resync (same resourceVersion) is background work.
fn update_lane(old: &impl ObjectMetaAccess, new: &impl ObjectMetaAccess) -> Priority {
    if old.resource_version() == new.resource_version() {
        Priority::Low
    } else {
        Priority::High
    }
}

/// Enqueues the primary resource itself on adds and on updates its predicates pass.
pub(crate) struct PrimaryHandler<K> {
    pub(crate) queue: RateLimitingQueue<ObjectKey>,
    pub(crate) predicates: Vec<Predicate<K>>,
    /// A key waiting for its own writes passes the predicates: the update may be that write.
    pub(crate) own_writes: OwnWrites,
    /// Sharded: only objects whose bucket is active here are enqueued (those of a bucket
    /// that becomes active are enqueued then).
    pub(crate) shard: GateCell,
}

impl<K> ResourceEventHandler<K> for PrimaryHandler<K>
where
    K: Metadata<Ty = ObjectMeta> + Send + Sync + 'static,
{
    fn on_add(&self, obj: &Arc<K>, is_in_initial_list: bool) {
        if !admits_object(&self.shard, obj.metadata()) {
            return;
        }
        self.queue
            .add_with_priority(key_of(obj.as_ref()), add_lane(is_in_initial_list));
    }

    fn on_update(&self, old: &Arc<K>, new: &Arc<K>) {
        if !admits_object(&self.shard, new.metadata()) {
            return;
        }
        // The key is computed (and the waiting set looked at) only for an update the
        // predicates filter out while some key waits: the common paths stay as they were.
        let pass = self.predicates.iter().all(|p| p.matches(old, new));
        let key = if pass {
            key_of(new.as_ref())
        } else if self.own_writes.any_waiting() {
            let key = key_of(new.as_ref());
            if !self.own_writes.is_waiting(&key) {
                return;
            }
            key
        } else {
            return;
        };
        let lane = update_lane(old.metadata(), new.metadata());
        self.queue.add_with_priority(key, lane);
    }

    fn on_delete(&self, obj: &DeletedObject<K>) {
        // Nothing left to reconcile: cleanup that must run belongs in a finalizer, and what
        // the object owned goes with it (garbage collection by owner references). The records
        // of its own writes go too: no reconcile of the key would resolve them.
        if !self.own_writes.is_empty() {
            self.own_writes.forget(&key_of(obj.object().as_ref()));
        }
    }
}

/// The controller references the runtime reads from a cached object's metadata, to map an
/// owned object to its owner: implemented for k8s-openapi's `ObjectMeta` and kctrl-client's
/// `CompactObjectMeta` (see [`Watched`](crate::Watched)).
pub trait OwnerRefs: ObjectMetaAccess {
    /// The owner references that say `controller: true`: (apiVersion, kind, name); at most
    /// one in a valid object.
    fn controllers(&self) -> impl Iterator<Item = (&str, &str, &str)>;

    /// The UID of the first owner reference that says `controller: true`
    /// (apimachinery's `GetControllerOf`), if any.
    fn controller_uid(&self) -> Option<&str>;
}

impl OwnerRefs for ObjectMeta {
    fn controllers(&self) -> impl Iterator<Item = (&str, &str, &str)> {
        self.owner_references
            .iter()
            .flatten()
            .filter(|o| o.controller == Some(true))
            .map(|o| (o.api_version.as_str(), o.kind.as_str(), o.name.as_str()))
    }

    fn controller_uid(&self) -> Option<&str> {
        self.owner_references
            .iter()
            .flatten()
            .find(|o| o.controller == Some(true))
            .map(|o| o.uid.as_str())
    }
}

impl OwnerRefs for CompactObjectMeta {
    fn controllers(&self) -> impl Iterator<Item = (&str, &str, &str)> {
        self.owner_references()
            .iter()
            .filter(|o| o.controller() == Some(true))
            .map(|o| (o.api_version(), o.kind(), o.name()))
    }

    fn controller_uid(&self) -> Option<&str> {
        self.controller_ref().map(|o| o.uid())
    }
}

/// Who the primary resource is, to recognise it in owner references.
#[derive(Clone, Debug)]
pub(crate) struct PrimaryKind {
    group: &'static str,
    kind: &'static str,
    namespaced: bool,
}

impl PrimaryKind {
    pub(crate) fn of<K: Resource>() -> Self
    where
        K::Scope: 'static,
    {
        PrimaryKind {
            group: K::GROUP,
            kind: K::KIND,
            namespaced: ResourceRef::of::<K>().is_namespaced(),
        }
    }

    /// The primary's key named by `owner` as the controller of an object in `namespace`, if
    /// `owner` is a controller reference to the primary kind (group and kind; the version
    /// may be any the group serves).
    pub(crate) fn controller_key(
        &self,
        namespace: Option<&str>,
        (api_version, kind, name): (&str, &str, &str),
    ) -> Option<ObjectKey> {
        if kind != self.kind {
            return None;
        }
        let group = api_version
            .rsplit_once('/')
            .map_or("", |(group, _version)| group);
        if group != self.group {
            return None;
        }
        let namespace = if self.namespaced { namespace } else { None };
        Some(key_for(namespace, name))
    }

    fn key_of_owner(&self, meta: &impl OwnerRefs) -> Option<ObjectKey> {
        meta.controllers()
            .find_map(|o| self.controller_key(meta.namespace(), o))
    }
}

/// Enqueues the controller owner (of the primary kind) of an owned object.
pub(crate) struct OwnedHandler {
    pub(crate) queue: RateLimitingQueue<ObjectKey>,
    pub(crate) primary: PrimaryKind,
    /// Sharded: only keys whose bucket is active here are enqueued.
    pub(crate) shard: GateCell,
}

impl OwnedHandler {
    fn add(&self, key: ObjectKey, lane: Priority) {
        if admits_key(&self.shard, &key) {
            self.queue.add_with_priority(key, lane);
        }
    }
}

impl<C> ResourceEventHandler<C> for OwnedHandler
where
    C: Metadata<Ty: OwnerRefs> + Send + Sync + 'static,
{
    fn on_add(&self, obj: &Arc<C>, is_in_initial_list: bool) {
        if let Some(key) = self.primary.key_of_owner(obj.metadata()) {
            self.add(key, add_lane(is_in_initial_list));
        }
    }

    fn on_update(&self, old: &Arc<C>, new: &Arc<C>) {
        let lane = update_lane(old.metadata(), new.metadata());
        let new_owner = self.primary.key_of_owner(new.metadata());
        let old_owner = self.primary.key_of_owner(old.metadata());
        // An owner that let go of the object hears of it too.
        if old_owner.is_some() && old_owner != new_owner {
            self.add(old_owner.unwrap_or_default(), lane);
        }
        if let Some(key) = new_owner {
            self.add(key, lane);
        }
    }

    fn on_delete(&self, obj: &DeletedObject<C>) {
        // Tombstones included: the last known state names the owner.
        if let Some(key) = self.primary.key_of_owner(obj.object().metadata()) {
            self.add(key, Priority::High);
        }
    }
}

/// The mapping function of [`Controller::watches`](crate::Controller::watches).
pub(crate) type MapFn<W> = dyn Fn(&W) -> Vec<ObjectKey> + Send + Sync;

/// Enqueues the primary keys a user function maps a watched object to.
pub(crate) struct MappedHandler<W> {
    pub(crate) queue: RateLimitingQueue<ObjectKey>,
    pub(crate) map: Arc<MapFn<W>>,
    /// Sharded: only keys whose bucket is active here are enqueued.
    pub(crate) shard: GateCell,
}

impl<W> MappedHandler<W> {
    fn add(&self, key: ObjectKey, lane: Priority) {
        if admits_key(&self.shard, &key) {
            self.queue.add_with_priority(key, lane);
        }
    }
}

impl<W> ResourceEventHandler<W> for MappedHandler<W>
where
    W: Metadata<Ty: ObjectMetaAccess> + Send + Sync + 'static,
{
    fn on_add(&self, obj: &Arc<W>, is_in_initial_list: bool) {
        for key in (self.map)(obj) {
            self.add(key, add_lane(is_in_initial_list));
        }
    }

    fn on_update(&self, old: &Arc<W>, new: &Arc<W>) {
        let lane = update_lane(old.metadata(), new.metadata());
        let mut keys = (self.map)(old);
        keys.extend((self.map)(new));
        keys.sort();
        keys.dedup();
        for key in keys {
            self.add(key, lane);
        }
    }

    fn on_delete(&self, obj: &DeletedObject<W>) {
        for key in (self.map)(obj.object()) {
            self.add(key, Priority::High);
        }
    }
}

/// A handler that does nothing: registered for a cache the controller only reads (an
/// [`index`](crate::Controller::index)), so that it waits for that cache to sync.
pub(crate) struct NoEvents;

impl<K: Send + Sync + 'static> ResourceEventHandler<K> for NoEvents {
    fn on_add(&self, _obj: &Arc<K>, _is_in_initial_list: bool) {}
    fn on_update(&self, _old: &Arc<K>, _new: &Arc<K>) {}
    fn on_delete(&self, _obj: &DeletedObject<K>) {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
    use kctrl_workqueue::default_controller_rate_limiter;

    fn owner(api_version: &str, kind: &str, name: &str, controller: bool) -> OwnerReference {
        OwnerReference {
            api_version: api_version.into(),
            kind: kind.into(),
            name: name.into(),
            uid: "u".into(),
            controller: Some(controller),
            ..Default::default()
        }
    }

    #[test]
    fn controller_references_name_the_primary_by_group_and_kind() {
        let deployments = PrimaryKind::of::<Deployment>();
        let ns = Some("shop");
        let cases = [
            (
                owner("apps/v1", "Deployment", "web", true),
                Some("shop/web"),
            ),
            // Another version of the same group is the same resource.
            (
                owner("apps/v1beta2", "Deployment", "web", true),
                Some("shop/web"),
            ),
            // Not the controller, another group, another kind.
            (owner("apps/v1", "Deployment", "web", false), None),
            (owner("example.com/v1", "Deployment", "web", true), None),
            (owner("apps/v1", "StatefulSet", "web", true), None),
            // The core group has no slash.
            (owner("v1", "Deployment", "web", true), None),
        ];
        let owned_by = |o: &OwnerReference, ns: Option<&str>| ObjectMeta {
            namespace: ns.map(str::to_owned),
            owner_references: Some(vec![o.clone()]),
            ..Default::default()
        };
        for (o, want) in cases {
            let key = deployments.key_of_owner(&owned_by(&o, ns));
            assert_eq!(key.as_deref(), want, "{o:?}");
            // The same from a metadata-only object.
            let compact = kctrl_client::CompactObjectMeta::from(&owned_by(&o, ns));
            assert_eq!(deployments.key_of_owner(&compact), key, "{o:?}");
        }
        // A cluster-scoped primary is keyed without the owned object's namespace.
        let namespaces = PrimaryKind::of::<Namespace>();
        assert_eq!(
            namespaces
                .key_of_owner(&owned_by(&owner("v1", "Namespace", "shop", true), ns))
                .as_deref(),
            Some("shop")
        );
    }

    fn configmap(rv: &str, owners: Vec<OwnerReference>) -> Arc<ConfigMap> {
        Arc::new(ConfigMap {
            metadata: ObjectMeta {
                name: Some("settings".into()),
                namespace: Some("shop".into()),
                resource_version: Some(rv.into()),
                owner_references: Some(owners),
                ..Default::default()
            },
            ..Default::default()
        })
    }

    #[tokio::test]
    async fn owned_objects_enqueue_their_owner_in_the_right_lane() {
        let queue = RateLimitingQueue::new(default_controller_rate_limiter());
        let h = OwnedHandler {
            queue: queue.clone(),
            primary: PrimaryKind::of::<Deployment>(),
            shard: GateCell::default(),
        };
        let web = || vec![owner("apps/v1", "Deployment", "web", true)];
        let api = || vec![owner("apps/v1", "Deployment", "api", true)];
        h.on_add(&configmap("1", web()), true);
        assert_eq!(queue.as_queue().lane_len(Priority::Low), 1);
        // Released to another owner: both hear of it, live.
        h.on_update(&configmap("1", web()), &configmap("2", api()));
        assert_eq!(queue.as_queue().lane_len(Priority::High), 2);
        let mut got = Vec::new();
        while !queue.is_empty() {
            let k = queue.get().await.unwrap();
            queue.done(&k);
            got.push(k);
        }
        got.sort();
        assert_eq!(got, ["shop/api", "shop/web"]);
        // A tombstone names the owner too; an unowned object enqueues nothing.
        h.on_delete(&DeletedObject::FinalStateUnknown {
            key: "shop/settings".into(),
            last_known: configmap("3", web()),
        });
        h.on_add(&configmap("4", vec![]), false);
        assert_eq!(queue.len(), 1);
        assert_eq!(queue.get().await.as_deref(), Some("shop/web"));
    }

    #[tokio::test]
    async fn the_primary_passes_its_predicates_and_resyncs_go_low() {
        let queue = RateLimitingQueue::new(default_controller_rate_limiter());
        let h = PrimaryHandler::<ConfigMap> {
            queue: queue.clone(),
            predicates: vec![Predicate::resource_version_changed()],
            own_writes: OwnWrites::new(),
            shard: GateCell::default(),
        };
        h.on_update(&configmap("1", vec![]), &configmap("1", vec![]));
        assert!(queue.is_empty(), "a resync is filtered out");
        h.on_update(&configmap("1", vec![]), &configmap("2", vec![]));
        assert_eq!(queue.as_queue().lane_len(Priority::High), 1);
        let unfiltered = PrimaryHandler::<ConfigMap> {
            queue: queue.clone(),
            predicates: vec![],
            own_writes: OwnWrites::new(),
            shard: GateCell::default(),
        };
        let k = queue.get().await.unwrap();
        queue.done(&k);
        unfiltered.on_update(&configmap("2", vec![]), &configmap("2", vec![]));
        assert_eq!(queue.as_queue().lane_len(Priority::Low), 1);
    }

    /// An update of a key that waits for its own writes passes the predicates: it may be the
    /// write it waits for, which a generation predicate would filter out (a status write).
    #[tokio::test]
    async fn a_key_waiting_for_its_own_writes_passes_the_predicates() {
        let queue = RateLimitingQueue::new(default_controller_rate_limiter());
        let own_writes = OwnWrites::new();
        let cache: kctrl_informer::Store<ConfigMap> = kctrl_informer::Store::new();
        let client = kctrl_fake::FakeApi::new().client();
        own_writes.track(cache.clone(), move |ns| {
            kctrl_client::Api::namespaced(client.clone(), ns)
        });
        let h = PrimaryHandler::<ConfigMap> {
            queue: queue.clone(),
            predicates: vec![Predicate::generation_changed()],
            own_writes: own_writes.clone(),
            shard: GateCell::default(),
        };
        h.on_update(&configmap("1", vec![]), &configmap("2", vec![]));
        assert!(queue.is_empty(), "filtered: the generation did not change");

        // A status write of shop/settings, answered at "3"; the cache still holds "2".
        cache.insert(configmap("2", vec![]));
        let sent = (*configmap("2", vec![])).clone();
        let answer = (*configmap("3", vec![])).clone();
        own_writes.record_for_key("shop/settings", &sent, &Ok(answer));
        assert!(matches!(
            own_writes.ensure_ready("shop/settings").await,
            Ok(crate::own_writes::Readiness::Behind { .. })
        ));
        assert!(own_writes.is_waiting("shop/settings"));
        h.on_update(&configmap("2", vec![]), &configmap("3", vec![]));
        assert_eq!(queue.len(), 1, "the write the key waits for enqueues it");

        cache.insert(configmap("3", vec![]));
        assert!(matches!(
            own_writes.ensure_ready("shop/settings").await,
            Ok(crate::own_writes::Readiness::Ready)
        ));
        assert!(!own_writes.is_waiting("shop/settings"));
    }

    /// A deleted primary's records go with it, as the ReplicaSet controller deletes its
    /// expectations: a key whose object is gone is never reconciled to resolve them (a
    /// status write's event, filtered by a generation predicate, never enqueued it).
    #[tokio::test]
    async fn deleting_the_primary_forgets_its_own_writes() {
        let queue = RateLimitingQueue::new(default_controller_rate_limiter());
        let own_writes = OwnWrites::new();
        let cache: kctrl_informer::Store<ConfigMap> = kctrl_informer::Store::new();
        let client = kctrl_fake::FakeApi::new().client();
        own_writes.track(cache.clone(), move |ns| {
            kctrl_client::Api::namespaced(client.clone(), ns)
        });
        let h = PrimaryHandler::<ConfigMap> {
            queue: queue.clone(),
            predicates: vec![Predicate::generation_changed()],
            own_writes: own_writes.clone(),
            shard: GateCell::default(),
        };
        cache.insert(configmap("2", vec![]));
        let sent = (*configmap("2", vec![])).clone();
        own_writes.record_for_key(
            "shop/settings",
            &sent,
            &Ok((*configmap("3", vec![])).clone()),
        );
        assert_eq!(own_writes.len(), 1);
        h.on_update(&configmap("2", vec![]), &configmap("3", vec![]));
        cache.remove("shop/settings");
        h.on_delete(&DeletedObject::Known(configmap("3", vec![])));
        assert!(own_writes.is_empty(), "forgotten with the object");
        assert!(!own_writes.is_waiting("shop/settings"));
    }

    #[tokio::test]
    async fn mapped_objects_enqueue_what_the_function_says_once() {
        let queue = RateLimitingQueue::new(default_controller_rate_limiter());
        let h = MappedHandler::<ConfigMap> {
            queue: queue.clone(),
            map: Arc::new(|cm: &ConfigMap| {
                vec![format!(
                    "shop/{}",
                    cm.metadata.resource_version.as_deref().unwrap()
                )]
            }),
            shard: GateCell::default(),
        };
        h.on_update(&configmap("a", vec![]), &configmap("a", vec![]));
        assert_eq!(queue.len(), 1);
        h.on_update(&configmap("a", vec![]), &configmap("b", vec![]));
        assert_eq!(queue.len(), 2, "shop/a already queued, shop/b added");
    }
}

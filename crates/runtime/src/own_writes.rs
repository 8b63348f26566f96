//! Read your own writes: a reconcile never acts on a cache that does not show the writes the
//! previous reconciles of its key made.
//!
//! A reconcile reads the informer caches and writes through the API server. Its writes come
//! back into the caches through the watches a few milliseconds later (seconds when a watch is
//! slow or cut). A key reconciled again before that, because an event or a requeue came
//! first, computes from the state before its own write: it may create a second object where
//! the first is not cached yet, scale from a count it already changed, or write a status the
//! server refuses as a conflict. Kubernetes calls the remedy stale-controller mitigation
//! (KEP-5647); client-go leaves it to each controller, kube-runtime and controller-runtime do
//! not have it.
//!
//! [`OwnWrites`] records, per key of the reconciled resource, what each write told about the
//! caches; before a key is reconciled, [`OwnWrites::ensure_ready`] compares the records with
//! the caches and answers whether the reconcile may act:
//!
//! * an **update or apply** the API server answered produced a new resourceVersion: a cache
//!   holding a version below the written one is behind, a cache at or past it is not
//!   (resourceVersions are compared as numbers when both are well formed, as Kubernetes 1.35
//!   made them; so another writer's version between the one we replaced and ours is behind).
//!   Where versions do not compare, a cache holding the version the write was sent against
//!   (or the one the cache held when the answer came) is behind;
//! * a **create** made an object exist: a cache without it is behind;
//! * a **delete** ([`OwnWrites::record_delete`]) the API server answered with a Status made
//!   the object go: a cache still holding that object (the same UID, from the Status or from
//!   the cache when the delete was answered), at whatever version, is behind (a newer
//!   version is an update that came before the deletion); a cache holding another UID holds
//!   a new object of that name and is not. Where no UID is known, a cache holding a version
//!   the object had (or one our earlier writes made) is behind. A delete answered with the
//!   object itself (still present, marked for deletion, waiting on finalizers) is an update;
//! * a write whose **outcome is unknown** (no readable answer: a connection cut, a timeout, a
//!   5xx) may or may not have been applied: while the cache still holds what the write was sent
//!   against, one live read of the object tells;
//! * a record the caches have not caught up with after [`DEFAULT_VERIFY_AFTER`] is checked by
//!   a live read, so a record that can never be satisfied (an object deleted before its cache
//!   saw it) holds its key back for at most that long;
//! * every record **expires** [`DEFAULT_EXPIRE_AFTER`] (5 minutes) after its write, as
//!   client-go's expectations do: a key whose live reads keep failing (no `get` permission,
//!   an API server refusing) or whose cache stays behind then acts on the caches. Expired
//!   records are also swept out as new ones are added, so records of a key that is never
//!   checked again (its object deleted while its reconcile wrote) do not pile up: the table
//!   holds the writes of the last few minutes at most.
//!
//! A record goes away as soon as the cache shows the write (or anything after it), when the
//! key's object is gone (a [`Controller`](crate::Controller) forgets a key's records when its
//! object's deletion reaches the cache), when a live read shows the cache is current, or when
//! it expires. In a run without faults the mechanism costs no request: records come from
//! answers the reconcile receives anyway and are resolved by reading the caches.
//!
//! A [`Controller`](crate::Controller) checks every key before its reconcile, for the caches
//! of its resource and of every resource it [`owns`](crate::Controller::owns) or
//! [`watches`](crate::Controller::watches); a reconcile records its writes with
//! [`OwnWrites::record`] on the handle [`Controller::own_writes`](crate::Controller::own_writes)
//! gives. A key whose caches are behind is not reconciled; it runs again when the write's
//! event enqueues it, or after the time to the next live check. A key that may act gets its
//! object as cached after the check (which may have waited for a live read).
//!
//! [`WriteTable`] is the bookkeeping alone (no I/O, the time passed in), for controllers that
//! run their own loop.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;

use k8s_openapi::Metadata;
use kctrl_client::{Api, DeleteOutcome, ObjectMetaAccess};
use kctrl_informer::Store;
use serde::de::DeserializeOwned;
use tokio::time::Instant;
use tracing::{info, warn};

/// How long a key waits for the caches to show one of its own writes before a live read
/// checks whether they are really behind (the Deployment controller's bound).
pub const DEFAULT_VERIFY_AFTER: Duration = Duration::from_secs(30);

/// How long a record holds its key at most: past it the key acts on the caches, whatever they
/// show and whether or not a live read could tell (client-go's expectations expire after the
/// same time and the controller proceeds).
pub const DEFAULT_EXPIRE_AFTER: Duration = Duration::from_secs(5 * 60);

/// Expired records are swept out at most once per this fraction of the expiry time.
const SWEEP_FRACTION: u32 = 4;

/// A resource: its API group and plural name (`apps`, `replicasets`). The version does not
/// matter: every version of a resource is one set of objects, with one resourceVersion each;
/// and a metadata-only cache ([`kctrl_client::PartialObjectMetadata`]) of a resource is that
/// resource.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ResourceId {
    /// The API group, empty for the core group.
    pub group: &'static str,
    /// The plural name in URLs.
    pub plural: &'static str,
}

impl ResourceId {
    /// The resource of `K`.
    pub fn of<K: k8s_openapi::Resource>() -> Self {
        Self {
            group: K::GROUP,
            plural: K::URL_PATH_SEGMENT,
        }
    }
}

impl fmt::Display for ResourceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.group.is_empty() {
            f.write_str(self.plural)
        } else {
            write!(f, "{}.{}", self.plural, self.group)
        }
    }
}

/// One written object: its resource, namespace (empty when cluster-scoped) and name.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Target {
    /// The object's resource.
    pub resource: ResourceId,
    /// Its namespace; empty for a cluster-scoped object.
    pub namespace: String,
    /// Its name.
    pub name: String,
}

impl Target {
    /// The object `name` in `namespace` of `K`'s resource.
    pub fn of<K: k8s_openapi::Resource>(namespace: &str, name: &str) -> Self {
        Self {
            resource: ResourceId::of::<K>(),
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        }
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.namespace.is_empty() {
            write!(f, "{} {}", self.resource, self.name)
        } else {
            write!(f, "{} {}/{}", self.resource, self.namespace, self.name)
        }
    }
}

/// Compares two resourceVersions as Kubernetes 1.35+ defines them (decimal integers without
/// leading zeros); `None` when either is not of that form.
pub fn compare_resource_versions(a: &str, b: &str) -> Option<std::cmp::Ordering> {
    fn well_formed(s: &str) -> bool {
        !s.is_empty() && !s.starts_with('0') && s.bytes().all(|b| b.is_ascii_digit())
    }
    if !well_formed(a) || !well_formed(b) {
        return None;
    }
    Some(a.len().cmp(&b.len()).then_with(|| a.cmp(b)))
}

/// Whether a write that failed with `err` may still have been applied: no answer (transport,
/// timeout), a server error or a server-side timeout, or an answer that could not be read.
/// Refusals (conflicts, validation, not found, forbidden) were not applied.
pub fn outcome_unknown(err: &kctrl_client::Error) -> bool {
    use kctrl_client::Error as E;
    match err {
        E::Api(e) => e.code >= 500 || e.reason() == "Timeout",
        E::Retried { last, previous, .. } => {
            outcome_unknown(last) || previous.as_deref().is_some_and(outcome_unknown)
        }
        E::Transport { .. }
        | E::Timeout { .. }
        | E::Decode { .. }
        | E::DecodeProtobuf { .. }
        | E::BodyTooLarge { .. } => true,
        _ => false,
    }
}

/// A write whose answer was lost: it may or may not have been applied.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Unknown {
    /// An update sent against this resourceVersion.
    Update(String),
    /// A create.
    Create,
    /// A delete of the object the cache held at this resourceVersion.
    Delete(String),
}

/// What the writes of one object tell about its cache.
#[derive(Clone, Debug)]
struct Pending {
    /// resourceVersions a write of ours replaced: a cache holding one is behind.
    replaced: Vec<String>,
    /// The newest resourceVersion a write of ours produced: a cache below it is behind, one
    /// at or past it is current.
    written: Option<String>,
    /// We created the object: a cache without it is behind.
    created: bool,
    /// We deleted the object: a cache still holding it (a UID in `deleted_uids`; without
    /// one, at a version the delete replaced or an older one) is behind.
    deleted: bool,
    /// The UIDs of the objects of that name known gone (the one we deleted, and the one the
    /// cache held then): a cached object with one of them is behind (at whatever version),
    /// one with another UID is a new object of that name.
    deleted_uids: Vec<String>,
    /// The last write's outcome is unknown.
    unknown: Option<Unknown>,
    /// When the last write was answered (or failed), or the last live read showed the cache
    /// behind: the bound of [`WriteTable::verify_after`] counts from here.
    since: Instant,
    /// When the last write was answered (or failed): the record expires
    /// [`WriteTable::expire_after`] later.
    recorded: Instant,
}

impl Pending {
    fn new(now: Instant) -> Self {
        Self {
            replaced: Vec::new(),
            written: None,
            created: false,
            deleted: false,
            deleted_uids: Vec::new(),
            unknown: None,
            since: now,
            recorded: now,
        }
    }

    /// Whether a cache holding `cached` (`None`: the object is not cached) is known to be
    /// behind our writes.
    fn known_behind(&self, cached: Option<&Cached>) -> bool {
        let Some(cached) = cached else {
            return self.created;
        };
        let rv = cached.resource_version.as_str();
        if self.deleted {
            let uid = cached.uid.as_deref().filter(|u| !u.is_empty());
            if let (false, Some(uid)) = (self.deleted_uids.is_empty(), uid) {
                // The deleted object, at any version (an update that came before the
                // deletion), is behind; another UID is a new object of that name.
                return self.deleted_uids.iter().any(|u| u == uid);
            }
            return self
                .replaced
                .iter()
                .any(|r| r == rv || compare_resource_versions(rv, r).is_some_and(|o| o.is_le()));
        }
        // Below the written version is behind, whatever version it is: another writer's
        // write between the one we replaced and ours is not ours. Versions that do not compare
        // are behind only if a write of ours replaced them.
        match self
            .written
            .as_deref()
            .and_then(|w| compare_resource_versions(rv, w))
        {
            Some(order) => order.is_lt(),
            None => self.replaced.iter().any(|r| r == rv),
        }
    }

    /// Whether only a live read can tell whether the write of unknown outcome was applied:
    /// the cache holds what the write was sent against.
    fn needs_live_read(&self, cached: Option<&str>) -> bool {
        match (&self.unknown, cached) {
            (Some(Unknown::Update(sent) | Unknown::Delete(sent)), Some(rv)) => sent == rv,
            (Some(Unknown::Create), None) => true,
            _ => false,
        }
    }

    fn note_replaced(&mut self, rv: &str) {
        if !self.replaced.iter().any(|r| r == rv) {
            self.replaced.push(rv.to_owned());
        }
    }

    /// The object is gone on the server: a cache holding it (`uid`, when known; else at a
    /// version we know of) is behind.
    fn note_deleted(&mut self, cached: Option<&str>, uids: &[&str]) {
        self.unknown = None;
        self.created = false;
        self.deleted = true;
        // An empty UID (test fixtures) tells no object from another.
        for uid in uids.iter().filter(|u| !u.is_empty()) {
            if !self.deleted_uids.iter().any(|u| u == uid) {
                self.deleted_uids.push((*uid).to_owned());
            }
        }
        if let Some(w) = self.written.take() {
            self.note_replaced(&w);
        }
        if let Some(rv) = cached {
            self.note_replaced(rv);
        }
    }

    fn note_written(&mut self, written: Option<&str>) {
        let Some(w) = written else { return };
        let newer = match self.written.as_deref() {
            None => true,
            Some(old) => compare_resource_versions(w, old).is_none_or(|o| o.is_gt()),
        };
        if newer {
            self.written = Some(w.to_owned());
        }
    }
}

/// An object as a cache holds it, for [`WriteTable::check_cached`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cached {
    /// Its resourceVersion.
    pub resource_version: String,
    /// Its UID, when known: tells the object a delete of ours removed from a new object of
    /// the same name.
    pub uid: Option<String>,
}

impl Cached {
    /// An object cached at `resource_version`, its UID unknown.
    pub fn at(resource_version: impl Into<String>) -> Self {
        Self {
            resource_version: resource_version.into(),
            uid: None,
        }
    }
}

/// What a key's reconcile may do, given the caches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Check {
    /// The caches show every recorded write: act.
    Current,
    /// A cache is behind at least one write: do not act on it. The write's event enqueues the
    /// key again when the cache catches up; `retry_in` is when to look again if none comes
    /// (when the oldest record becomes due for a live read).
    Behind {
        /// How long until a record becomes due for a live read.
        retry_in: Duration,
    },
    /// Only the API server can tell for these objects: read each live,
    /// [`WriteTable::resolve`] it, then check again.
    Verify(Vec<Target>),
}

/// How a live read answered, for [`WriteTable::resolve`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Live<'a> {
    /// The object exists at this resourceVersion.
    At(&'a str),
    /// No such object.
    NotFound,
}

/// The bookkeeping of [`OwnWrites`] without the caches and the I/O: per key of the reconciled
/// resource, per written object, the records described in the [module
/// documentation](self). The time is passed in, so it tests with any clock.
#[derive(Debug)]
pub struct WriteTable {
    by_key: HashMap<String, HashMap<Target, Pending>>,
    verify_after: Duration,
    expire_after: Duration,
    /// When expired records were last swept out (see [`WriteTable::sweep`]).
    last_sweep: Option<Instant>,
}

impl Default for WriteTable {
    fn default() -> Self {
        Self::new(DEFAULT_VERIFY_AFTER)
    }
}

impl WriteTable {
    /// An empty table whose records are checked live after `verify_after` and expire after
    /// [`DEFAULT_EXPIRE_AFTER`].
    pub fn new(verify_after: Duration) -> Self {
        Self {
            by_key: HashMap::new(),
            verify_after,
            expire_after: DEFAULT_EXPIRE_AFTER,
            last_sweep: None,
        }
    }

    /// This table, with records that expire `expire_after` after their last write.
    #[must_use]
    pub fn with_expire_after(mut self, expire_after: Duration) -> Self {
        self.expire_after = expire_after;
        self
    }

    /// How long a record waits for its cache before a live read.
    pub fn verify_after(&self) -> Duration {
        self.verify_after
    }

    /// How long after its last write a record holds its key at most: then it is dropped and
    /// the key acts on the caches, even if no live read could tell whether they are current.
    pub fn expire_after(&self) -> Duration {
        self.expire_after
    }

    /// Drops every expired record, of every key. A key whose object is deleted while its
    /// reconcile writes, or that is never reconciled again, is not checked again: its records
    /// would stay forever. Called as records are added, at most once per quarter of
    /// [`expire_after`](Self::expire_after), so the table holds the writes of the last
    /// 1.25 × `expire_after` at most, for a cost of O(1) per write amortised.
    fn sweep(&mut self, now: Instant) {
        let due = self.last_sweep.is_none_or(|last| {
            now.saturating_duration_since(last) >= self.expire_after / SWEEP_FRACTION
        });
        if !due {
            return;
        }
        self.last_sweep = Some(now);
        let expire_after = self.expire_after;
        self.by_key.retain(|_, records| {
            records.retain(|_, p| now.saturating_duration_since(p.recorded) < expire_after);
            !records.is_empty()
        });
    }

    fn entry(&mut self, key: &str, target: &Target, now: Instant) -> &mut Pending {
        self.sweep(now);
        let pending = self
            .by_key
            .entry(key.to_owned())
            .or_default()
            .entry(target.clone())
            .or_insert_with(|| Pending::new(now));
        pending.since = now;
        pending.recorded = now;
        pending
    }

    /// An update (or patch, or apply) of `target` was applied and answered with `written`.
    /// `replaced` are the versions it replaced as far as the caller knows: the
    /// resourceVersion it was sent against, and the one the cache held. A write that did not
    /// change the object (`written` among them) leaves no record: no event will come for it.
    pub fn applied(
        &mut self,
        key: &str,
        target: &Target,
        replaced: &[&str],
        written: Option<&str>,
        now: Instant,
    ) {
        if replaced.is_empty() || written.is_some_and(|w| replaced.contains(&w)) {
            return;
        }
        let pending = self.entry(key, target, now);
        pending.unknown = None;
        pending.deleted = false;
        pending.deleted_uids.clear();
        for rv in replaced {
            pending.note_replaced(rv);
        }
        pending.note_written(written);
    }

    /// `target` was created (the API server answered, with `written` as its version).
    pub fn created(&mut self, key: &str, target: &Target, written: Option<&str>, now: Instant) {
        let pending = self.entry(key, target, now);
        pending.unknown = None;
        pending.deleted = false;
        pending.deleted_uids.clear();
        pending.created = true;
        pending.note_written(written);
    }

    /// `target` was deleted: the API server answered that it is gone. `cached` is the
    /// version the cache held (`None`: it did not hold the object), `uids` the UIDs known
    /// gone: the deleted object's (from the answer) and the cached object's. A cache still
    /// holding an object with one of them, at any version, is behind; one holding another UID
    /// holds a new object of that name. Without a UID, a cache holding the object at `cached`
    /// (or at a version our earlier writes made, or an older one) is behind. With no version
    /// to compare (the cache never held it, nor did we write it), nothing is recorded.
    pub fn deleted(
        &mut self,
        key: &str,
        target: &Target,
        cached: Option<&str>,
        uids: &[&str],
        now: Instant,
    ) {
        let known = self
            .by_key
            .get(key)
            .is_some_and(|records| records.contains_key(target));
        if cached.is_none() && !known {
            return;
        }
        let pending = self.entry(key, target, now);
        pending.note_deleted(cached, uids);
        if pending.replaced.is_empty() && pending.deleted_uids.is_empty() {
            self.remove(key, target);
        }
    }

    /// A delete of `target`, which the cache held at `cached`, got no readable answer.
    pub fn delete_unknown(&mut self, key: &str, target: &Target, cached: &str, now: Instant) {
        self.entry(key, target, now).unknown = Some(Unknown::Delete(cached.to_owned()));
    }

    fn remove(&mut self, key: &str, target: &Target) {
        if let Some(records) = self.by_key.get_mut(key) {
            records.remove(target);
            if records.is_empty() {
                self.by_key.remove(key);
            }
        }
    }

    /// An update of `target` sent against `sent` got no readable answer.
    pub fn update_unknown(&mut self, key: &str, target: &Target, sent: &str, now: Instant) {
        self.entry(key, target, now).unknown = Some(Unknown::Update(sent.to_owned()));
    }

    /// A create of `target` got no readable answer.
    pub fn create_unknown(&mut self, key: &str, target: &Target, now: Instant) {
        self.entry(key, target, now).unknown = Some(Unknown::Create);
    }

    /// Forgets everything about `key` (its object was deleted).
    pub fn forget(&mut self, key: &str) {
        self.by_key.remove(key);
    }

    /// Whether anything is recorded for `key`.
    pub fn is_tracking(&self, key: &str) -> bool {
        self.by_key.contains_key(key)
    }

    /// How many objects have records, over all keys.
    pub fn len(&self) -> usize {
        self.by_key.values().map(HashMap::len).sum()
    }

    /// Whether nothing is recorded.
    pub fn is_empty(&self) -> bool {
        self.by_key.is_empty()
    }

    /// How long until the first record of `key` expires (see
    /// [`expire_after`](Self::expire_after)); `None` when nothing is recorded for it.
    pub fn expires_in(&self, key: &str, now: Instant) -> Option<Duration> {
        self.by_key.get(key).and_then(|records| {
            records
                .values()
                .map(|p| {
                    self.expire_after
                        .saturating_sub(now.saturating_duration_since(p.recorded))
                })
                .min()
        })
    }

    /// Compares the records of `key` with the caches (`cached(target)`: the cached object's
    /// resourceVersion, `None` when it is not cached) and forgets those the caches have caught
    /// up with.
    pub fn check(
        &mut self,
        key: &str,
        cached: impl Fn(&Target) -> Option<String>,
        now: Instant,
    ) -> Check {
        self.check_with_stores(key, cached, |_| None, now)
    }

    /// Like [`check`](Self::check), also given how far each cache has read
    /// (`store(resource)`: the resourceVersion its informer is current to, client-go's
    /// `LastStoreSyncResourceVersion`). A cache that has read at or past a write's version
    /// shows that write even where it does not hold the object (a label or field selector, or
    /// another namespace, keeps it out): the record is done.
    pub fn check_with_stores(
        &mut self,
        key: &str,
        cached: impl Fn(&Target) -> Option<String>,
        store: impl Fn(&ResourceId) -> Option<String>,
        now: Instant,
    ) -> Check {
        self.check_cached(key, |t| cached(t).map(Cached::at), store, now)
    }

    /// Like [`check_with_stores`](Self::check_with_stores), given the cached objects' UIDs
    /// too (`cached(target)`), so that a cache holding an object a delete of ours removed is
    /// told from one holding a new object of that name.
    pub fn check_cached(
        &mut self,
        key: &str,
        cached: impl Fn(&Target) -> Option<Cached>,
        store: impl Fn(&ResourceId) -> Option<String>,
        now: Instant,
    ) -> Check {
        let Some(records) = self.by_key.get_mut(key) else {
            return Check::Current;
        };
        let verify_after = self.verify_after;
        let expire_after = self.expire_after;
        let mut verify = Vec::new();
        let mut retry_in: Option<Duration> = None;
        records.retain(|target, pending| {
            let age = now.saturating_duration_since(pending.recorded);
            if age >= expire_after {
                warn!(
                    key,
                    object = %target,
                    ?expire_after,
                    "the caches have not shown this write of the key for too long and no live read told otherwise; acting on the caches"
                );
                return false;
            }
            let expires_in = expire_after - age;
            if target.name.is_empty() {
                // A create with a generated name whose answer was lost: there is no name to
                // find in a cache or to read live. As client-go's expectations do for such a
                // create, the key waits for the bound (the object's add event, if it was
                // created, enqueues the key meanwhile), then acts on the caches.
                let waited = now.saturating_duration_since(pending.since);
                if waited >= verify_after {
                    return false;
                }
                let left = verify_after - waited;
                retry_in = Some(retry_in.map_or(left, |r| r.min(left)));
                return true;
            }
            let cached = cached(target);
            let rv = cached.as_ref().map(|c| c.resource_version.as_str());
            let read_past = pending.written.as_deref().is_some_and(|w| {
                store(&target.resource)
                    .is_some_and(|s| compare_resource_versions(&s, w).is_some_and(|o| o.is_ge()))
            });
            if read_past && pending.unknown.is_none() {
                return false;
            }
            let behind = pending.known_behind(cached.as_ref());
            if !behind && pending.needs_live_read(rv) {
                verify.push(target.clone());
                return true;
            }
            if !behind {
                return false;
            }
            let waited = now.saturating_duration_since(pending.since);
            if waited >= verify_after {
                verify.push(target.clone());
            } else {
                let left = (verify_after - waited).min(expires_in);
                retry_in = Some(retry_in.map_or(left, |r| r.min(left)));
            }
            true
        });
        if records.is_empty() {
            self.by_key.remove(key);
        }
        if !verify.is_empty() {
            verify.sort();
            return Check::Verify(verify);
        }
        match retry_in {
            Some(retry_in) => Check::Behind { retry_in },
            None => Check::Current,
        }
    }

    /// Records the live read of `target` that a [`Check::Verify`] asked for; `cached` is the
    /// cached resourceVersion as the check saw it. Afterwards a check does not ask for
    /// `target` again before the bound.
    pub fn resolve(
        &mut self,
        key: &str,
        target: &Target,
        cached: Option<&str>,
        live: Live<'_>,
        now: Instant,
    ) {
        let cached = cached.map(Cached::at);
        self.resolve_cached(key, target, cached.as_ref(), live, now);
    }

    /// [`resolve`](Self::resolve) with the cached object's UID as well: when the live read
    /// finds our delete applied, a cache holding that UID is behind at whatever version it
    /// shows next (another writer's update that came before the deletion).
    pub fn resolve_cached(
        &mut self,
        key: &str,
        target: &Target,
        cached: Option<&Cached>,
        live: Live<'_>,
        now: Instant,
    ) {
        let cached_uid = cached.and_then(|c| c.uid.as_deref());
        let cached = cached.map(|c| c.resource_version.as_str());
        let Some(records) = self.by_key.get_mut(key) else {
            return;
        };
        let Some(pending) = records.get_mut(target) else {
            return;
        };
        let deleting = pending.deleted || matches!(pending.unknown, Some(Unknown::Delete(_)));
        match live {
            Live::NotFound if deleting && cached.is_some() => {
                // Our delete was applied and the cache still holds the object: wait for the
                // deletion's event.
                let uids: Vec<&str> = cached_uid.into_iter().collect();
                pending.note_deleted(cached, &uids);
                pending.since = now;
            }
            // Gone: nothing of ours can be waited for (the cache drops it with the deletion's
            // event).
            Live::NotFound => {
                records.remove(target);
            }
            // The write of unknown outcome was not applied, or the cache already holds every
            // write of ours.
            Live::At(live_rv) if cached == Some(live_rv) => {
                records.remove(target);
            }
            Live::At(live_rv) => {
                // The server holds another version than the cache: the write was applied (or
                // someone else wrote since). Either way the cache is behind: wait again.
                pending.unknown = None;
                pending.deleted = false;
                pending.deleted_uids.clear();
                match cached {
                    Some(rv) => pending.note_replaced(rv),
                    None => pending.created = true,
                }
                pending.note_written(Some(live_rv));
                pending.since = now;
            }
        }
        if records.is_empty() {
            self.by_key.remove(key);
        }
    }
}

/// A live read of one object: its resourceVersion, `None` when it does not exist.
pub type LiveRead =
    Pin<Box<dyn Future<Output = Result<Option<String>, kctrl_client::Error>> + Send>>;

/// One cache [`OwnWrites`] compares with: the cached version of an object, and how to read it
/// live.
trait TrackedCache: Send + Sync {
    fn cached_version(&self, namespace: &str, name: &str) -> Option<String>;
    /// The cached object's version and UID.
    fn cached(&self, namespace: &str, name: &str) -> Option<Cached> {
        self.cached_version(namespace, name).map(Cached::at)
    }
    fn store_version(&self) -> String;
    fn read_live(&self, namespace: &str, name: &str) -> LiveRead;
}

/// How a tracked cache's objects are read live: an [`Api`] for a namespace.
type ApiFor<K> = Arc<dyn Fn(&str) -> Api<K> + Send + Sync>;

/// What [`OwnWrites::track`] can compare with: a typed object or its metadata alone.
pub trait Trackable:
    k8s_openapi::Resource<Scope: 'static>
    + Metadata<Ty: ObjectMetaAccess>
    + DeserializeOwned
    + Send
    + Sync
    + 'static
{
}

impl<K> Trackable for K where
    K: k8s_openapi::Resource<Scope: 'static>
        + Metadata<Ty: ObjectMetaAccess>
        + DeserializeOwned
        + Send
        + Sync
        + 'static
{
}

struct Tracked<K: Trackable> {
    store: Store<K>,
    api: ApiFor<K>,
}

impl<K: Trackable> TrackedCache for Tracked<K> {
    fn store_version(&self) -> String {
        self.store.resource_version()
    }

    fn cached_version(&self, namespace: &str, name: &str) -> Option<String> {
        self.cached(namespace, name).map(|c| c.resource_version)
    }

    fn cached(&self, namespace: &str, name: &str) -> Option<Cached> {
        let obj = if namespace.is_empty() {
            self.store.get(name)
        } else {
            self.store.get_namespaced(namespace, name)
        };
        obj.map(|o| Cached {
            resource_version: o
                .metadata()
                .resource_version()
                .unwrap_or_default()
                .to_owned(),
            uid: o.metadata().uid().map(str::to_owned),
        })
    }

    fn read_live(&self, namespace: &str, name: &str) -> LiveRead {
        let api = (self.api)(namespace);
        let name = name.to_owned();
        Box::pin(async move {
            let obj = api.get_opt(&name).await?;
            Ok(obj.map(|o| {
                o.metadata()
                    .resource_version()
                    .unwrap_or_default()
                    .to_owned()
            }))
        })
    }
}

/// The answer of [`OwnWrites::ensure_ready`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Readiness {
    /// The caches show every recorded write of the key: reconcile.
    Ready,
    /// A cache is behind: do not reconcile now. The write's event enqueues the key when the
    /// cache catches up; look again after `retry_in` if none comes.
    Behind {
        /// When a live read becomes due.
        retry_in: Duration,
    },
}

struct Inner {
    table: Mutex<WriteTable>,
    /// Keys last found [`Readiness::Behind`]: an update of such a key's object is let through
    /// the controller's predicates, since it may be the write the key waits for.
    waiting: Mutex<HashSet<String>>,
    /// How many keys `waiting` holds, read without its lock.
    waiting_len: AtomicUsize,
    caches: RwLock<HashMap<ResourceId, Arc<dyn TrackedCache>>>,
}

/// The writes of a controller's reconciles that its caches may not show yet, per key of the
/// reconciled resource (see the [module documentation](self)). Cheap to clone: clones share
/// one table.
///
/// ```
/// # use std::time::Duration;
/// use k8s_openapi::api::core::v1::ConfigMap;
/// use kctrl_informer::Store;
/// use kctrl_runtime::own_writes::{OwnWrites, Readiness};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// # let client = kctrl_fake::FakeApi::new().client();
/// let cache: Store<ConfigMap> = Store::new();
/// let writes = OwnWrites::new();
/// writes.track(cache.clone(), {
///     let client = client.clone();
///     move |ns| kctrl_client::Api::namespaced(client.clone(), ns)
/// });
/// // A reconcile of key "default/app" created ConfigMap default/app-config: what it sent,
/// // and the API server's answer.
/// let mut sent = ConfigMap::default();
/// sent.metadata.namespace = Some("default".into());
/// sent.metadata.name = Some("app-config".into());
/// let mut answer = sent.clone();
/// answer.metadata.resource_version = Some("42".into());
/// writes.record_for_key("default/app", &sent, &Ok(answer.clone()));
/// // The cache has not seen it yet: the key must wait.
/// assert!(matches!(writes.ensure_ready("default/app").await, Ok(Readiness::Behind { .. })));
/// cache.insert(std::sync::Arc::new(answer));
/// assert_eq!(writes.ensure_ready("default/app").await.unwrap(), Readiness::Ready);
/// # }
/// ```
#[derive(Clone)]
pub struct OwnWrites {
    inner: Arc<Inner>,
}

impl fmt::Debug for OwnWrites {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let resources: Vec<ResourceId> = self
            .inner
            .caches
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .keys()
            .copied()
            .collect();
        f.debug_struct("OwnWrites")
            .field("resources", &resources)
            .field("records", &self.table().len())
            .finish()
    }
}

impl Default for OwnWrites {
    fn default() -> Self {
        Self::new()
    }
}

impl OwnWrites {
    /// An empty table comparing with no cache yet, checked live after
    /// [`DEFAULT_VERIFY_AFTER`].
    pub fn new() -> Self {
        Self::with_verify_after(DEFAULT_VERIFY_AFTER)
    }

    /// Like [`new`](Self::new), with the time a record waits before a live read.
    pub fn with_verify_after(verify_after: Duration) -> Self {
        Self::with_bounds(verify_after, DEFAULT_EXPIRE_AFTER)
    }

    /// Like [`new`](Self::new), with the time a record waits before a live read and the time
    /// after which it expires (see [`WriteTable::expire_after`]).
    pub fn with_bounds(verify_after: Duration, expire_after: Duration) -> Self {
        Self {
            inner: Arc::new(Inner {
                table: Mutex::new(WriteTable::new(verify_after).with_expire_after(expire_after)),
                waiting: Mutex::new(HashSet::new()),
                waiting_len: AtomicUsize::new(0),
                caches: RwLock::new(HashMap::new()),
            }),
        }
    }

    /// Compares writes of `K` with `store`, and reads them live through `api(namespace)`
    /// (namespace empty for a cluster-scoped `K`). Writes of a resource without a cache here
    /// are not recorded: nothing would show them.
    pub fn track<K: Trackable>(
        &self,
        store: Store<K>,
        api: impl Fn(&str) -> Api<K> + Send + Sync + 'static,
    ) {
        let tracked: Arc<dyn TrackedCache> = Arc::new(Tracked {
            store,
            api: Arc::new(api),
        });
        self.track_cache(ResourceId::of::<K>(), tracked);
    }

    /// Compares writes of `resource` with `cache`.
    fn track_cache(&self, resource: ResourceId, cache: Arc<dyn TrackedCache>) {
        self.inner
            .caches
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(resource, cache);
    }

    /// Whether writes of `K` are compared with a cache.
    pub fn tracks<K: k8s_openapi::Resource>(&self) -> bool {
        self.cache(&ResourceId::of::<K>()).is_some()
    }

    fn cache(&self, resource: &ResourceId) -> Option<Arc<dyn TrackedCache>> {
        self.inner
            .caches
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(resource)
            .cloned()
    }

    fn table(&self) -> std::sync::MutexGuard<'_, WriteTable> {
        self.inner
            .table
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn cached(&self, target: &Target) -> Option<Cached> {
        self.cache(&target.resource)
            .and_then(|c| c.cached(&target.namespace, &target.name))
    }

    /// Records the outcome of a write of `sent` made by the reconcile of `owner` (the
    /// reconciled object): `result` is the API server's answer. `sent` names the object and,
    /// for an update with a precondition, carries the resourceVersion it was sent against;
    /// a create, a patch or an apply carries none, and the version the cache holds now counts
    /// as replaced. A refusal (conflict, validation, not found) records nothing. A create sent
    /// with only `generateName` is tracked under the name its answer carries; if the answer
    /// was lost, the owner's key waits up to the bound ([`DEFAULT_VERIFY_AFTER`]) and then acts
    /// on the caches, as client-go's expectations do for such a create.
    ///
    /// ```no_run
    /// # use std::sync::Arc;
    /// # use k8s_openapi::api::core::v1::ConfigMap;
    /// # use kctrl_client::{Api, PatchParams};
    /// # async fn demo(foo: Arc<ConfigMap>, api: Api<ConfigMap>, writes: kctrl_runtime::own_writes::OwnWrites) -> Result<(), kctrl_client::Error> {
    /// let mut desired = ConfigMap::default();
    /// desired.metadata.name = Some("foo-config".into());
    /// desired.metadata.namespace = Some("default".into());
    /// let answer = api.apply(&PatchParams::apply("foo-controller"), &desired).await;
    /// writes.record(&*foo, &desired, &answer);
    /// let _written = answer?;
    /// # Ok(()) }
    /// ```
    pub fn record<O, S, W>(&self, owner: &O, sent: &S, result: &Result<W, kctrl_client::Error>)
    where
        O: Metadata<Ty: ObjectMetaAccess>,
        S: Metadata<Ty: ObjectMetaAccess>,
        W: Trackable,
    {
        let meta = owner.metadata();
        let key = kctrl_informer::key_for(
            meta.namespace().filter(|ns| !ns.is_empty()),
            meta.name().unwrap_or(""),
        );
        self.record_for_key(&key, sent, result);
    }

    /// [`record`](Self::record) by the owner's queue key (`namespace/name`, or `name` for a
    /// cluster-scoped owner).
    pub fn record_for_key<S, W>(&self, key: &str, sent: &S, result: &Result<W, kctrl_client::Error>)
    where
        S: Metadata<Ty: ObjectMetaAccess>,
        W: Trackable,
    {
        let meta = sent.metadata();
        let mut target = Target::of::<W>(meta.namespace().unwrap_or(""), meta.name().unwrap_or(""));
        // The name of a generated object is known only from the answer.
        if let (Ok(written), true) = (result, target.name.is_empty()) {
            target = Target::of::<W>(
                written.metadata().namespace().unwrap_or(""),
                written.metadata().name().unwrap_or(""),
            );
        }
        let result = match result {
            Ok(written) => Ok(written.metadata().resource_version()),
            Err(err) => Err(err),
        };
        self.record_outcome(key, &target, meta.resource_version(), result);
    }

    /// Records a write's outcome from its parts: `sent` is the resourceVersion the write was
    /// sent against (`None` for a create, a patch or an apply), `result` the version the answer
    /// carries, or the error. For controllers whose writes return something other than the
    /// object (a status update that returns only the new version).
    pub fn record_outcome(
        &self,
        key: &str,
        target: &Target,
        sent: Option<&str>,
        result: Result<Option<&str>, &kctrl_client::Error>,
    ) {
        let Some(cache) = self.cache(&target.resource) else {
            return;
        };
        let cached = cache.cached_version(&target.namespace, &target.name);
        let now = Instant::now();
        let mut table = self.table();
        match result {
            Ok(written) => {
                let replaced: Vec<&str> = sent.into_iter().chain(cached.as_deref()).collect();
                if replaced.is_empty() {
                    table.created(key, target, written, now);
                } else {
                    table.applied(key, target, &replaced, written, now);
                }
            }
            Err(err) if outcome_unknown(err) => {
                info!(
                    key,
                    object = %target,
                    %err,
                    "a write got no usable answer and may have been applied; the next reconcile checks before acting"
                );
                match sent.or(cached.as_deref()) {
                    Some(sent) => table.update_unknown(key, target, sent, now),
                    None => table.create_unknown(key, target, now),
                }
            }
            Err(_) => {}
        }
    }

    /// Records the outcome of a delete of `namespace/name` (namespace empty for a
    /// cluster-scoped object) of `W` made by the reconcile of `owner`: `result` is the API
    /// server's answer. When it is a Status (the object is gone), the owner's key is not
    /// reconciled while the cache still holds that object (its UID, from the Status's details
    /// or the cached object; at any version: a newer one is an update that came before the
    /// deletion), so it does not act on an object it just deleted; an object of that name
    /// with another UID is a new one and does not hold the key. When the answer is the object
    /// (still present, marked for deletion, waiting on finalizers), it is recorded as an
    /// update: the key waits until the cache shows that version. A refusal (not found,
    /// conflict, forbidden) records nothing.
    ///
    /// ```no_run
    /// # use k8s_openapi::api::core::v1::ConfigMap;
    /// # use kctrl_client::{Api, DeleteParams};
    /// # async fn demo(foo: ConfigMap, api: Api<ConfigMap>, writes: kctrl_runtime::own_writes::OwnWrites) -> Result<(), kctrl_client::Error> {
    /// let answer = api.delete("foo-config", &DeleteParams::default()).await;
    /// writes.record_delete(&foo, "default", "foo-config", &answer);
    /// answer?;
    /// # Ok(()) }
    /// ```
    pub fn record_delete<O, W>(
        &self,
        owner: &O,
        namespace: &str,
        name: &str,
        result: &Result<DeleteOutcome<W>, kctrl_client::Error>,
    ) where
        O: Metadata<Ty: ObjectMetaAccess>,
        W: Trackable,
    {
        let meta = owner.metadata();
        let key = kctrl_informer::key_for(
            meta.namespace().filter(|ns| !ns.is_empty()),
            meta.name().unwrap_or(""),
        );
        self.record_delete_for_key(&key, namespace, name, result);
    }

    /// [`record_delete`](Self::record_delete) by the owner's queue key.
    pub fn record_delete_for_key<W: Trackable>(
        &self,
        key: &str,
        namespace: &str,
        name: &str,
        result: &Result<DeleteOutcome<W>, kctrl_client::Error>,
    ) {
        let target = Target::of::<W>(namespace, name);
        match result {
            // Still there, marked for deletion: an update of the object.
            Ok(DeleteOutcome::Pending(obj)) => {
                self.record_outcome(key, &target, None, Ok(obj.metadata().resource_version()))
            }
            Ok(DeleteOutcome::Deleted(status)) => {
                let uid = status.details.as_ref().and_then(|d| d.uid.as_deref());
                self.record_delete_outcome(key, &target, Ok(uid))
            }
            Err(err) => self.record_delete_outcome(key, &target, Err(err)),
        }
    }

    /// Records a delete's outcome from its parts: `Ok(uid)` when the API server answered that
    /// the object is gone (`uid`: the deleted object's UID, from the Status's details, when
    /// the answer carried it; otherwise the cached object's is used), or the error. (An answer
    /// carrying the object, still present and marked for deletion, is an update:
    /// [`record_outcome`](Self::record_outcome).)
    pub fn record_delete_outcome(
        &self,
        key: &str,
        target: &Target,
        result: Result<Option<&str>, &kctrl_client::Error>,
    ) {
        let Some(cache) = self.cache(&target.resource) else {
            return;
        };
        let cached = cache.cached(&target.namespace, &target.name);
        let now = Instant::now();
        let mut table = self.table();
        let cached_uid = cached.as_ref().and_then(|c| c.uid.as_deref());
        let cached = cached.as_ref().map(|c| c.resource_version.as_str());
        match (result, cached) {
            (Ok(uid), cached) => {
                // The cached object is the deleted one only if its UID agrees with the
                // answer's (the cache may already hold a new object of that name).
                let cached_uid = cached_uid.filter(|c| uid.is_none_or(|u| u == *c));
                let uids: Vec<&str> = uid.into_iter().chain(cached_uid).collect();
                table.deleted(key, target, cached, &uids, now);
            }
            (Err(err), Some(cached)) if outcome_unknown(err) => {
                info!(
                    key,
                    object = %target,
                    %err,
                    "a delete got no usable answer and may have been applied; the next reconcile checks before acting"
                );
                table.delete_unknown(key, target, cached, now);
            }
            (Err(_), _) => {}
        }
    }

    /// Forgets the records of `key` (its object is gone).
    pub fn forget(&self, key: &str) {
        self.table().forget(key);
        self.set_waiting(key, false);
    }

    /// Whether `key` was last found behind its writes and waits for a cache to catch up.
    pub fn is_waiting(&self, key: &str) -> bool {
        self.any_waiting() && self.waiting().contains(key)
    }

    /// Whether any key waits for a cache to catch up (no lock taken).
    pub fn any_waiting(&self) -> bool {
        self.inner.waiting_len.load(Ordering::Acquire) > 0
    }

    fn waiting(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.inner
            .waiting
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn set_waiting(&self, key: &str, waiting: bool) {
        if !waiting && !self.any_waiting() {
            return;
        }
        let mut set = self.waiting();
        if waiting {
            if !set.contains(key) {
                set.insert(key.to_owned());
            }
        } else {
            set.remove(key);
        }
        self.inner.waiting_len.store(set.len(), Ordering::Release);
    }

    /// How many objects have records, over all keys.
    pub fn len(&self) -> usize {
        self.table().len()
    }

    /// Whether nothing is recorded.
    pub fn is_empty(&self) -> bool {
        self.table().is_empty()
    }

    /// Compares the records of `key` with the caches, without any live read: a record due for
    /// one ([`Check::Verify`]) is returned as such for the caller to decide.
    pub fn check(&self, key: &str) -> Check {
        self.table().check_cached(
            key,
            |t| self.cached(t),
            |r| self.cache(r).map(|c| c.store_version()),
            Instant::now(),
        )
    }

    /// Whether the reconcile of `key` may act: compares its records with the caches, and reads
    /// live the objects only the API server can tell about (a write of unknown outcome, or a
    /// record its cache has not caught up with for the bound). A failed live read is returned:
    /// retry the key later, at the latest after [`expires_in`](Self::expires_in), when the
    /// record has expired and the key acts on the caches ([`DEFAULT_EXPIRE_AFTER`]).
    ///
    /// Read the reconciled object from its cache after this answered
    /// [`Readiness::Ready`]: the cache may have moved while it checked.
    pub async fn ensure_ready(&self, key: &str) -> Result<Readiness, kctrl_client::Error> {
        if !self.table().is_tracking(key) {
            self.set_waiting(key, false);
            return Ok(Readiness::Ready);
        }
        // Marked before the caches are read: an update that lands after the check read them
        // passes the predicates and enqueues the key, whatever the verdict.
        self.set_waiting(key, true);
        let readiness = self.ensure_ready_inner(key).await;
        if matches!(readiness, Ok(Readiness::Ready)) {
            self.set_waiting(key, false);
        }
        readiness
    }

    /// How long until the first record of `key` expires and the key acts on the caches
    /// whatever they show; `None` when nothing is recorded for it.
    pub fn expires_in(&self, key: &str) -> Option<Duration> {
        self.table().expires_in(key, Instant::now())
    }

    async fn ensure_ready_inner(&self, key: &str) -> Result<Readiness, kctrl_client::Error> {
        // Each round resolves every object it reads live, so a check after it asks for none
        // of them again: two rounds suffice; the bound only guards the loop.
        for _ in 0..3 {
            let targets = match self.check(key) {
                Check::Current => return Ok(Readiness::Ready),
                Check::Behind { retry_in } => return Ok(Readiness::Behind { retry_in }),
                Check::Verify(targets) => targets,
            };
            for target in targets {
                let Some(cache) = self.cache(&target.resource) else {
                    self.table()
                        .resolve(key, &target, None, Live::NotFound, Instant::now());
                    continue;
                };
                let cached_object = cache.cached(&target.namespace, &target.name);
                let cached = cached_object.as_ref().map(|c| c.resource_version.clone());
                let live = cache.read_live(&target.namespace, &target.name).await?;
                let answer = match &live {
                    Some(rv) => Live::At(rv),
                    None => Live::NotFound,
                };
                info!(
                    key,
                    object = %target,
                    cached = cached.as_deref().unwrap_or("<none>"),
                    live = live.as_deref().unwrap_or("<none>"),
                    behind = live.is_some() && live != cached,
                    "checked a write of unknown outcome (or long unseen) against the API server"
                );
                self.table().resolve_cached(
                    key,
                    &target,
                    cached_object.as_ref(),
                    answer,
                    Instant::now(),
                );
            }
        }
        warn!(key, "own-writes check did not settle; acting on the caches");
        Ok(Readiness::Ready)
    }
}

#[cfg(test)]
#[path = "own_writes_tests.rs"]
mod tests;

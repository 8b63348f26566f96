//! Sharded controllers: several replicas of one controller, each reconciling a part of the
//! objects ([`Controller::sharded`](crate::Controller::sharded)).
//!
//! A [`Sharding`] joins three things that must agree:
//!
//! - a [`ShardMember`] of `kctrl-shard`: the replica's Lease in the group, the buckets of
//!   the hash space it holds, and the guards that keep two replicas from reconciling one
//!   object at once;
//! - a [`ShardScope`] of `kctrl-informer`: the shard selector the informers of the
//!   controller's factory list and watch with, so that each replica caches only its range
//!   (filtered by the API server with the `ShardedListAndWatch` feature gate, on the client
//!   without it);
//! - the [`ShardField`] both hash: the objects' UID or their namespace.
//!
//! While the controller runs, the member's cache scope (the buckets it holds or is about to
//! hold) is written into the informers' scope; once every informer has applied it, the
//! member is told ([`ShardMember::confirm_cache_scope`]), and only then does a gained bucket
//! become active: its objects are in the cache before the first of them is reconciled.
//!
//! ```no_run
//! use std::sync::Arc;
//! use std::time::Duration;
//! use k8s_openapi::api::apps::v1::Deployment;
//! use kctrl_client::ShardField;
//! use kctrl_informer::SharedInformerFactory;
//! use kctrl_runtime::shard::Sharding;
//! use kctrl_runtime::{Action, Controller};
//! use kctrl_shard::ShardConfig;
//!
//! # #[derive(Debug, thiserror::Error)]
//! # #[error("failed")]
//! # struct Error;
//! # async fn reconcile(d: Arc<Deployment>, _ctx: Arc<()>) -> Result<Action, Error> { Ok(Action::await_change()) }
//! # async fn demo(client: kctrl_client::Client) -> Result<(), Box<dyn std::error::Error>> {
//! let pod = std::env::var("POD_NAME")?; // unique per replica
//! let sharding = Sharding::new(
//!     client.clone(),
//!     ShardConfig::new("deployments", "kube-system", pod),
//!     ShardField::Namespace,
//! )?;
//! // The factory caches what the member holds, and nothing else.
//! let factory = SharedInformerFactory::builder(client, Duration::from_secs(10 * 3600))
//!     .shard_scope(sharding.scope())
//!     .build();
//! Controller::<Deployment>::new(&factory)
//!     .sharded(sharding)
//!     .run(reconcile, |_d, _e, _ctx| Action::rate_limited(), Arc::new(()),
//!         kctrl_runtime::shutdown_on_signal())
//!     .await?;
//! factory.shutdown().await;
//! # Ok(()) }
//! ```
//!
//! Which field: by UID the objects spread evenly, but then every informer of the factory is
//! split by its *own* objects' UIDs, so the caches of owned or watched resources would not
//! hold the objects of the primaries held: a controller that [`owns`](crate::Controller::owns)
//! or [`watches`](crate::Controller::watches) anything must shard by namespace (an owned
//! object is in its owner's namespace, so in its owner's shard).
//! [`run`](crate::Controller::run) refuses the other combination. Cluster-scoped objects
//! have no namespace: they all hash the empty string, so they all land in one shard.
//!
//! One `Sharding` runs one controller, and its factory serves only controllers sharded with
//! it: every informer of the factory follows its scope.
//!
//! Readiness: [`Sharding::is_ready`] (or [`Sharding::ready_check`]) holds once the replica
//! has joined its group and holds what the split gives it, for `/readyz`. Metrics: set
//! [`ShardConfig::metrics`] to a [`PrometheusShardMetrics`](kctrl_shard::PrometheusShardMetrics)
//! for the ranges held, handovers, keys dropped and the time from a member change to the new
//! split being in force. `crates/runtime/examples/sharded.rs` serves both.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use kctrl_client::sharding::{HashRange, ShardField, ShardSelector, hash_field};
use kctrl_client::{Client, ObjectMetaAccess};
use kctrl_informer::{ObjectKey, ShardScope, SharedInformerFactory, Store, key_of, split_key};
use kctrl_shard::{ConfigError, ReconcileGuard, ShardConfig, ShardMember};
use kctrl_workqueue::{Priority, RateLimitingQueue};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info};

use crate::controller::Object;

/// A [`Sharding`] that cannot be built, or a sharded controller set up wrongly; every
/// variant names the mistake and the fix.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ShardingError {
    /// The member's configuration was refused.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The member was built with `confirm_cache_scope` off: its buckets would become active
    /// before their objects are cached.
    #[error(
        "shard member of group {group}: confirm_cache_scope is off, so its buckets would become \
         active before the informers cache their objects; set ShardConfig::confirm_cache_scope \
         to true, or build the Sharding with Sharding::new"
    )]
    CacheScopeNotConfirmed {
        /// The member's group.
        group: String,
    },
    /// The controller's factory has no shard scope: it would cache every object.
    #[error(
        "the informer factory has no shard scope: build it with \
         SharedInformerFactory::builder(..).shard_scope(sharding.scope())"
    )]
    FactoryNotScoped,
    /// The controller's factory follows another scope than the `Sharding`'s.
    #[error(
        "the informer factory follows another shard scope than this Sharding's: build it with \
         .shard_scope(sharding.scope()) of the Sharding given to Controller::sharded"
    )]
    OtherScope,
    /// Sharded by UID, the controller also owns or watches other resources, whose caches
    /// would be split by their own objects' UIDs.
    #[error(
        "sharded by object.metadata.uid, but the controller also owns or watches {resources}: \
         their informers would cache the objects of other shards' primaries and miss those of \
         this one's; shard by ShardField::Namespace"
    )]
    UidWithRelated {
        /// The kinds owned or watched.
        resources: String,
    },
    /// [`Controller::sharded`](crate::Controller::sharded) was called twice.
    #[error("Controller::sharded was called twice; a controller belongs to one shard group")]
    ShardedTwice,
    /// The `Sharding` already runs a controller.
    #[error(
        "the Sharding of shard group {group} already ran a controller; build one Sharding (and \
         one factory) per sharded controller"
    )]
    AlreadyUsed {
        /// The member's group.
        group: String,
    },
}

/// A replica's membership of a shard group, with the informer scope that follows it: give
/// [`scope`](Self::scope) to the factory's builder and the `Sharding` to
/// [`Controller::sharded`](crate::Controller::sharded). See the [module documentation](self).
#[derive(Clone)]
pub struct Sharding {
    member: ShardMember,
    field: ShardField,
    scope: ShardScope,
    used: Arc<AtomicBool>,
    activation_priority: Priority,
}

impl fmt::Debug for Sharding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sharding")
            .field("member", &self.member)
            .field("field", &self.field)
            .field("scope", &self.scope)
            .finish_non_exhaustive()
    }
}

/// The selector of a member that holds nothing: the single hash 0. A shard selector cannot
/// be empty (the API server has no way to say "nothing"), and no selector means everything;
/// an object whose field hashes to exactly 0 (one in 2^64) is cached but never reconciled.
fn nothing(field: ShardField) -> ShardSelector {
    // [0, 1) is a valid, non-empty range: neither call can fail, and the fallback (the
    // full range, caching more than needed, never less) is never taken.
    HashRange::new(0, 1)
        .and_then(|r| ShardSelector::new(field, [r]))
        .unwrap_or_else(|_| ShardSelector::full(field))
}

impl Sharding {
    /// Member `config` of its group, keeping its Lease in the API server `client` talks to,
    /// splitting objects by `field`. `config.confirm_cache_scope` is turned on: a bucket
    /// becomes active once the informers cache it.
    pub fn new(
        client: Client,
        mut config: ShardConfig,
        field: ShardField,
    ) -> Result<Self, ShardingError> {
        config.confirm_cache_scope = true;
        Self::with_member(ShardMember::new(client, config)?, field)
    }

    /// The lane [`drive`](Self::drive) enqueues the cached primaries of a bucket that
    /// became active in: [`Priority::Low`] by default, behind the events of the buckets
    /// already held (as the adds of an initial list); [`Priority::High`] for a controller
    /// that serves a single lane, first come first served.
    pub fn with_activation_priority(mut self, priority: Priority) -> Self {
        self.activation_priority = priority;
        self
    }

    /// The lane [`drive`](Self::drive) enqueues activations in.
    pub fn activation_priority(&self) -> Priority {
        self.activation_priority
    }

    /// A `Sharding` over a member built by hand (e.g. with its own
    /// [`LeaseStore`](kctrl_shard::LeaseStore)); it must have been configured with
    /// [`confirm_cache_scope`](ShardConfig::confirm_cache_scope) on, and must not run on
    /// its own: the controller runs it.
    pub fn with_member(member: ShardMember, field: ShardField) -> Result<Self, ShardingError> {
        if !member.config().confirm_cache_scope {
            return Err(ShardingError::CacheScopeNotConfirmed {
                group: member.config().group.clone(),
            });
        }
        let scope = ShardScope::new(Some(nothing(field)));
        Ok(Self {
            member,
            field,
            scope,
            used: Arc::new(AtomicBool::new(false)),
            activation_priority: Priority::Low,
        })
    }

    /// The informers' scope, for
    /// [`SharedInformerFactoryBuilder::shard_scope`](kctrl_informer::SharedInformerFactoryBuilder::shard_scope).
    /// It selects nothing until the member holds buckets.
    pub fn scope(&self) -> ShardScope {
        self.scope.clone()
    }

    /// The member: its [`status`](ShardMember::status), the buckets it holds.
    pub fn member(&self) -> &ShardMember {
        &self.member
    }

    /// The field objects are split by.
    pub fn field(&self) -> ShardField {
        self.field
    }

    /// Ready (for `/readyz`): the replica has joined its group and reconciles at least one
    /// bucket or holds every bucket the split gives it (possibly none: see
    /// [`ShardMember::is_ready`]).
    pub fn is_ready(&self) -> bool {
        self.member.is_ready()
    }

    /// [`is_ready`](Self::is_ready) as a check, for a health endpoint: `Err` says why not.
    pub fn ready_check(&self) -> Result<(), NotReady> {
        if self.is_ready() {
            return Ok(());
        }
        let status = self.member.status().borrow().clone();
        Err(NotReady {
            group: self.member.config().group.clone(),
            stopped: status.stopped,
            members: status.members.len(),
        })
    }

    /// Checks the setup of a controller about to run, and marks this `Sharding` used:
    /// `factory` must follow [`scope`](Self::scope), and a `Sharding` by UID must have no
    /// `related` kinds (resources other than the primary the controller caches). A
    /// [`Controller`](crate::Controller) calls it itself; a controller wired by hand calls
    /// it before [`drive`](Self::drive).
    pub fn prepare(
        &self,
        factory: &SharedInformerFactory,
        related: &[&'static str],
    ) -> Result<(), ShardingError> {
        match factory.shard_scope() {
            None => return Err(ShardingError::FactoryNotScoped),
            Some(s) if !s.same_scope(&self.scope) => return Err(ShardingError::OtherScope),
            Some(_) => {}
        }
        if self.field == ShardField::Uid && !related.is_empty() {
            return Err(ShardingError::UidWithRelated {
                resources: related.join(", "),
            });
        }
        if self.used.swap(true, Ordering::SeqCst) {
            return Err(ShardingError::AlreadyUsed {
                group: self.member.config().group.clone(),
            });
        }
        Ok(())
    }

    /// What the controller's handlers and workers ask.
    pub(crate) fn gate(&self) -> ShardGate {
        ShardGate {
            member: self.member.clone(),
            field: self.field,
        }
    }

    /// Runs the member until `cancel` (then it drains, releases and leaves), keeps the
    /// informers' scope on the member's cache scope, and enqueues the cached primaries of
    /// each bucket that becomes active (from `store`, into `queue`'s low lane, or the one
    /// [`with_activation_priority`](Self::with_activation_priority) set). Ends when
    /// the member's run ends.
    ///
    /// A [`Controller`](crate::Controller) calls it itself. A controller wired by hand calls
    /// it once its caches have synced, after [`prepare`](Self::prepare), and asks the
    /// [`member`](Self::member) for a guard before each reconcile: on `cancel`, the member
    /// releases a bucket only once its guards are dropped.
    pub async fn drive<K: Object>(
        &self,
        cancel: CancellationToken,
        queue: RateLimitingQueue<ObjectKey>,
        store: Store<K>,
    ) -> Result<(), kctrl_shard::RunError> {
        let gate = self.gate();
        tokio::select! {
            result = self.member.run(cancel) => result,
            never = follow_scope(&self.member, self.field, &self.scope) => match never {},
            never = enqueue_activations(&gate, &queue, &store, self.activation_priority) => match never {},
        }
    }
}

/// Why a sharded replica is not ready.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "shard group {group}: this replica has not joined, or holds no active range while the \
     split is not in force yet ({members} live member(s) seen{})",
    if *stopped { "; its membership has stopped" } else { "" }
)]
pub struct NotReady {
    /// The group.
    pub group: String,
    /// The member has stopped (its run ended).
    pub stopped: bool,
    /// How many live members it sees.
    pub members: usize,
}

/// Keeps `scope` on the member's cache scope and confirms each generation once the
/// informers applied it. Never returns.
async fn follow_scope(
    member: &ShardMember,
    field: ShardField,
    scope: &ShardScope,
) -> std::convert::Infallible {
    let mut status = member.status();
    loop {
        let (selector, generation) = member.cache_selector(field);
        let selector = selector.unwrap_or_else(|| nothing(field));
        debug!(group = %member.config().group, generation, %selector, "shard scope of the caches");
        let applied = scope.set(Some(selector));
        // A newer scope may come before this one is applied: set it at once (confirming the
        // newer generation covers the older).
        let changed = tokio::select! {
            () = scope.applied(applied) => {
                member.confirm_cache_scope(generation);
                None
            }
            changed = status.wait_for(|s| s.scope_generation > generation) => Some(changed.is_ok()),
        };
        let newer = match changed {
            Some(newer) => newer,
            None => status
                .wait_for(|s| s.scope_generation > generation)
                .await
                .is_ok(),
        };
        if !newer {
            // The member is gone (it outlives this future): never spin.
            return std::future::pending().await;
        }
    }
}

/// Enqueues, at each activation, the cached primaries of the buckets that became active.
/// Never returns.
async fn enqueue_activations<K: Object>(
    gate: &ShardGate,
    queue: &RateLimitingQueue<ObjectKey>,
    store: &Store<K>,
    priority: Priority,
) -> std::convert::Infallible {
    let mut activations = gate.member.activations();
    while let Some(buckets) = activations.next().await {
        let mut enqueued = 0usize;
        for obj in store.list() {
            if buckets.contains(gate.member.bucket_of(gate.hash_of(obj.metadata()))) {
                queue.add_with_priority(key_of(obj.as_ref()), priority);
                enqueued += 1;
            }
        }
        info!(group = %gate.member.config().group, buckets = buckets.len(), enqueued,
            "shard buckets became active: their cached objects are enqueued");
    }
    std::future::pending().await
}

/// What a sharded controller's handlers and workers ask: is this object's bucket active
/// here.
#[derive(Clone)]
pub(crate) struct ShardGate {
    pub(crate) member: ShardMember,
    pub(crate) field: ShardField,
}

/// What [`ShardGate::begin`] decided for a key.
pub(crate) enum Begin {
    /// Reconcile, holding the guard.
    Go(ReconcileGuard),
    /// Sharded by UID, the object is not cached: nothing to reconcile.
    NotCached,
    /// Its bucket is not active here.
    Dropped,
    /// Its bucket is active here but the Lease's renewal is late: come back later (the
    /// member either stops, and the process with it, or carries on and needs the key).
    Later,
}

impl ShardGate {
    /// The hash of an object's shard key.
    pub(crate) fn hash_of<M: ObjectMetaAccess + ?Sized>(&self, meta: &M) -> u64 {
        hash_field(self.field.value_of(meta).unwrap_or(""))
    }

    /// Whether an event of the primary `meta` should enqueue it: its bucket is active here.
    pub(crate) fn admits_object<M: ObjectMetaAccess + ?Sized>(&self, meta: &M) -> bool {
        self.member.holds(self.hash_of(meta))
    }

    /// Whether `key` (of a primary, from an owned or watched object) should be enqueued:
    /// sharded by namespace, its namespace's bucket is active here. Sharded by UID, the
    /// worker decides (no owned or watched resource is allowed then).
    pub(crate) fn admits_key(&self, key: &str) -> bool {
        match self.field {
            ShardField::Namespace => {
                let namespace = split_key(key).ok().and_then(|(ns, _)| ns).unwrap_or("");
                self.member.holds(hash_field(namespace))
            }
            ShardField::Uid => true,
        }
    }

    /// A guard for reconciling `key` (in `namespace`; `""` if cluster-scoped), if its bucket
    /// is active here.
    pub(crate) fn begin<K: Object>(&self, key: &str, namespace: &str, store: &Store<K>) -> Begin {
        let hash = match self.field {
            ShardField::Namespace => hash_field(namespace),
            ShardField::Uid => match store.get(key) {
                Some(obj) => self.hash_of(obj.metadata()),
                None => return Begin::NotCached,
            },
        };
        match self.member.try_begin(hash) {
            Some(guard) => Begin::Go(guard),
            None if self.member.holds(hash) => Begin::Later,
            None => Begin::Dropped,
        }
    }

    /// Whether `guard` covers `obj` (sharded by UID, an object deleted and created again
    /// under the same name while its key waited has another UID, maybe another bucket).
    pub(crate) fn covers<M: ObjectMetaAccess + ?Sized>(
        &self,
        guard: &ReconcileGuard,
        meta: &M,
    ) -> bool {
        self.member.bucket_of(self.hash_of(meta)) == guard.bucket()
    }
}

/// The gate of a controller, set once [`Controller::sharded`](crate::Controller::sharded) is
/// called; handlers registered before share it.
pub(crate) type GateCell = Arc<std::sync::OnceLock<ShardGate>>;

/// Whether a handler should enqueue an event of the primary `meta`.
pub(crate) fn admits_object<M: ObjectMetaAccess + ?Sized>(cell: &GateCell, meta: &M) -> bool {
    cell.get().is_none_or(|g| g.admits_object(meta))
}

/// Whether a handler should enqueue the primary `key`.
pub(crate) fn admits_key(cell: &GateCell, key: &str) -> bool {
    cell.get().is_none_or(|g| g.admits_key(key))
}

//! Where the election record lives: the [`ResourceLock`] seam and [`LeaseLock`], its
//! implementation on `coordination.k8s.io/v1` Leases.
//!
//! A lock caches the object it last read or wrote, so that an update is a compare-and-swap
//! on that object's resourceVersion: if anyone wrote the Lease meanwhile, the update fails
//! with a conflict instead of overwriting them.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;
use k8s_openapi::Resource;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kctrl_client::config::{Config, default_user_agent};
use kctrl_client::{Api, Client, PostParams};

use crate::error::{LockError, LockTypeError};
use crate::record::LeaderElectionRecord;

/// The only lock type left in Kubernetes (`--leader-elect-resource-lock=leases`).
pub const LEASES_LOCK_TYPE: &str = "leases";

/// The reason of the events a lock records.
pub const EVENT_REASON: &str = "LeaderElection";

/// The client configuration for a lock, derived from the process's (client-go's
/// `resourcelock.NewFromKubeconfig`): each request times out after half the renew deadline
/// (at least one second), so one stuck request cannot eat the whole deadline, and the
/// User-Agent gets the suffix `/leader-election`.
///
/// ```
/// use std::time::Duration;
/// use kctrl_client::config::Config;
///
/// let base = Config::new("https://127.0.0.1:6443".parse().unwrap());
/// let config = kctrl_leader_election::lock_client_config(&base, Duration::from_secs(10));
/// assert_eq!(config.timeout, Some(Duration::from_secs(5)));
/// assert!(config.user_agent.unwrap().ends_with("/leader-election"));
/// ```
pub fn lock_client_config(config: &Config, renew_deadline: Duration) -> Config {
    let mut config = config.clone();
    config.timeout = Some((renew_deadline / 2).max(Duration::from_secs(1)));
    config.user_agent = Some(format!("{}/leader-election", default_user_agent()));
    config
}

/// Storage for the election record (client-go's `resourcelock.Interface`).
///
/// Implementations keep the object they last read or wrote: [`update`](Self::update) writes
/// over that version and fails on a conflict, and must fail if neither
/// [`get`](Self::get) nor [`create`](Self::create) succeeded before.
pub trait ResourceLock: Send + Sync + 'static {
    /// Reads the record, with its [`raw`](LeaderElectionRecord::raw) bytes. A missing lock
    /// object is an error for which [`LockError::is_not_found`] holds.
    fn get(&self) -> BoxFuture<'_, Result<(LeaderElectionRecord, Vec<u8>), LockError>>;

    /// Creates the lock object holding `record`.
    fn create(&self, record: LeaderElectionRecord) -> BoxFuture<'_, Result<(), LockError>>;

    /// Replaces the record in the object last read or written.
    fn update(&self, record: LeaderElectionRecord) -> BoxFuture<'_, Result<(), LockError>>;

    /// Records an event `"<identity> <message>"` about the lock object, if the lock has an
    /// event hook.
    fn record_event(&self, message: &str);

    /// This candidate's identity, written as holder when it leads.
    fn identity(&self) -> &str;

    /// The lock for humans and logs: `namespace/name`.
    fn describe(&self) -> String;
}

/// One event a lock asks to record: reason [`EVENT_REASON`], type `Normal`, message
/// `"<identity> became leader"` or `"<identity> stopped leading"`, about the Lease.
#[derive(Clone, Debug, PartialEq)]
pub struct LeaderEvent {
    /// The Lease the event is about (`kind`, `apiVersion`, namespace, name, and `uid` /
    /// `resourceVersion` when the lock has read the object).
    pub regarding: ObjectReference,
    /// `Normal`.
    pub event_type: &'static str,
    /// [`EVENT_REASON`].
    pub reason: &'static str,
    /// `"<identity> <what happened>"`.
    pub message: String,
}

/// Receives a lock's events, e.g. to hand them to an event recorder. Closures
/// `Fn(LeaderEvent)` are hooks.
///
/// Called on the election's task: implementations should hand the event off without
/// blocking.
pub trait EventHook: Send + Sync + 'static {
    /// Records one event.
    fn record(&self, event: LeaderEvent);
}

impl<F> EventHook for F
where
    F: Fn(LeaderEvent) + Send + Sync + 'static,
{
    fn record(&self, event: LeaderEvent) {
        self(event)
    }
}

/// A [`ResourceLock`] on a `coordination.k8s.io/v1` Lease (client-go's `LeaseLock`).
///
/// ```
/// use kctrl_leader_election::LeaseLock;
///
/// let fake = kctrl_fake::FakeApi::new();
/// let lock = LeaseLock::new(fake.client(), "kube-system", "kube-controller-manager", "node-1_3f2a")
///     .with_labels([("app".to_owned(), "kcm".to_owned())].into());
/// # use kctrl_leader_election::ResourceLock;
/// assert_eq!(lock.describe(), "kube-system/kube-controller-manager");
/// ```
pub struct LeaseLock {
    api: Api<Lease>,
    namespace: String,
    name: String,
    identity: String,
    labels: Option<BTreeMap<String, String>>,
    events: Option<Arc<dyn EventHook>>,
    lease: Mutex<Option<Lease>>,
}

impl fmt::Debug for LeaseLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaseLock")
            .field("namespace", &self.namespace)
            .field("name", &self.name)
            .field("identity", &self.identity)
            .field("labels", &self.labels)
            .field("events", &self.events.is_some())
            .finish_non_exhaustive()
    }
}

impl LeaseLock {
    /// A lock on Lease `namespace/name` for the candidate `identity`.
    pub fn new(
        client: Client,
        namespace: impl Into<String>,
        name: impl Into<String>,
        identity: impl Into<String>,
    ) -> Self {
        let namespace = namespace.into();
        Self {
            api: Api::namespaced(client, namespace.clone()),
            namespace,
            name: name.into(),
            identity: identity.into(),
            labels: None,
            events: None,
            lease: Mutex::new(None),
        }
    }

    /// [`LeaseLock::new`] for a `--leader-elect-resource-lock` value: only `leases` is
    /// accepted; the retired lock types name their replacement.
    pub fn for_lock_type(
        lock_type: &str,
        client: Client,
        namespace: impl Into<String>,
        name: impl Into<String>,
        identity: impl Into<String>,
    ) -> Result<Self, LockTypeError> {
        match lock_type {
            LEASES_LOCK_TYPE => Ok(Self::new(client, namespace, name, identity)),
            "endpoints" | "configmaps" | "endpointsleases" | "configmapsleases" => {
                Err(LockTypeError::Removed {
                    lock_type: lock_type.to_owned(),
                })
            }
            _ => Err(LockTypeError::Invalid {
                lock_type: lock_type.to_owned(),
            }),
        }
    }

    /// Labels set on the Lease when it is created and merged into it on every update.
    pub fn with_labels(mut self, labels: BTreeMap<String, String>) -> Self {
        self.labels = Some(labels);
        self
    }

    /// Where `"became leader"` / `"stopped leading"` events go.
    pub fn with_event_hook(mut self, hook: impl EventHook) -> Self {
        self.events = Some(Arc::new(hook));
        self
    }

    /// The Lease's namespace.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The Lease's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The Lease as last read or written, if any.
    pub fn cached_lease(&self) -> Option<Lease> {
        self.cache().clone()
    }

    fn cache(&self) -> MutexGuard<'_, Option<Lease>> {
        self.lease.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn regarding(&self) -> ObjectReference {
        let cached = self.cache();
        let meta = cached.as_ref().map(|l| &l.metadata);
        ObjectReference {
            api_version: Some(Lease::API_VERSION.to_owned()),
            kind: Some(Lease::KIND.to_owned()),
            namespace: Some(self.namespace.clone()),
            name: Some(self.name.clone()),
            uid: meta.and_then(|m| m.uid.clone()),
            resource_version: meta.and_then(|m| m.resource_version.clone()),
            ..Default::default()
        }
    }
}

impl ResourceLock for LeaseLock {
    fn get(&self) -> BoxFuture<'_, Result<(LeaderElectionRecord, Vec<u8>), LockError>> {
        async move {
            let lease = self.api.get(&self.name).await?;
            let record = lease
                .spec
                .as_ref()
                .map(LeaderElectionRecord::from_lease_spec)
                .unwrap_or_default();
            *self.cache() = Some(lease);
            let raw = record.raw();
            Ok((record, raw))
        }
        .boxed()
    }

    fn create(&self, record: LeaderElectionRecord) -> BoxFuture<'_, Result<(), LockError>> {
        async move {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.name.clone()),
                    namespace: Some(self.namespace.clone()),
                    labels: self.labels.clone(),
                    ..Default::default()
                },
                spec: Some(record.to_lease_spec()),
            };
            let created = self.api.create(&PostParams::default(), &lease).await?;
            *self.cache() = Some(created);
            Ok(())
        }
        .boxed()
    }

    fn update(&self, record: LeaderElectionRecord) -> BoxFuture<'_, Result<(), LockError>> {
        async move {
            let lease = {
                let mut cached = self.cache();
                let Some(lease) = cached.as_mut() else {
                    return Err(LockError::NotInitialized {
                        lock: self.describe(),
                    });
                };
                lease.spec = Some(record.to_lease_spec());
                if let Some(labels) = &self.labels {
                    let on_lease = lease.metadata.labels.get_or_insert_with(BTreeMap::new);
                    on_lease.extend(labels.iter().map(|(k, v)| (k.clone(), v.clone())));
                }
                lease.clone()
            };
            let updated = self.api.update(&PostParams::default(), &lease).await?;
            *self.cache() = Some(updated);
            Ok(())
        }
        .boxed()
    }

    fn record_event(&self, message: &str) {
        let Some(hook) = &self.events else {
            return;
        };
        hook.record(LeaderEvent {
            regarding: self.regarding(),
            event_type: "Normal",
            reason: EVENT_REASON,
            message: format!("{} {message}", self.identity),
        });
    }

    fn identity(&self) -> &str {
        &self.identity
    }

    fn describe(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kctrl_fake::FakeApi;

    const NS: &str = "test-namespace";
    const NAME: &str = "test-name";
    const IDENTITY: &str = "test-identity";

    fn lock(fake: &FakeApi) -> LeaseLock {
        LeaseLock::new(fake.client(), NS, NAME, IDENTITY)
    }

    fn test_record() -> LeaderElectionRecord {
        let now = crate::record::to_micros(k8s_openapi::jiff::Timestamp::now());
        LeaderElectionRecord {
            holder_identity: IDENTITY.into(),
            lease_duration_seconds: 15,
            acquire_time: Some(now),
            renew_time: Some(now),
            leader_transitions: 1,
            preferred_holder: "preferred-holder".into(),
            strategy: "strategy".into(),
        }
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    // client-go resourcelock: TestGetError
    #[tokio::test]
    async fn get_of_a_missing_lease_is_not_found() {
        let fake = FakeApi::new();
        let err = lock(&fake).get().await.unwrap_err();
        assert!(err.is_not_found(), "{err}");
    }

    // client-go resourcelock: TestGet
    #[tokio::test]
    async fn get_returns_the_created_record_and_its_raw_bytes() {
        let fake = FakeApi::new();
        let lock = lock(&fake);
        let record = test_record();
        lock.create(record.clone()).await.unwrap();
        let (got, raw) = lock.get().await.unwrap();
        assert_eq!(got, record);
        assert_eq!(raw, record.raw());
        let _: serde_json::Value = serde_json::from_slice(&raw).expect("raw bytes are JSON");
    }

    // client-go resourcelock: TestRecordEventSuccess
    #[tokio::test]
    async fn record_event_prefixes_the_identity() {
        let fake = FakeApi::new();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let sink = seen.clone();
        let lock = lock(&fake).with_event_hook(move |e: LeaderEvent| sink.lock().unwrap().push(e));
        lock.create(test_record()).await.unwrap();
        lock.record_event("test event");
        let seen = seen.lock().unwrap();
        assert_eq!(seen.len(), 1);
        let e = &seen[0];
        assert_eq!(e.message, "test-identity test event");
        assert_eq!(e.reason, "LeaderElection");
        assert_eq!(e.event_type, "Normal");
        assert_eq!(e.regarding.kind.as_deref(), Some("Lease"));
        assert_eq!(
            e.regarding.api_version.as_deref(),
            Some("coordination.k8s.io/v1")
        );
        assert_eq!(e.regarding.namespace.as_deref(), Some(NS));
        assert_eq!(e.regarding.name.as_deref(), Some(NAME));
        assert!(e.regarding.uid.is_some());
    }

    // client-go resourcelock: TestRecordEventNilRecorder (and an event before any read,
    // which client-go cannot do without a cached lease)
    #[tokio::test]
    async fn record_event_without_hook_or_lease_is_harmless() {
        let fake = FakeApi::new();
        lock(&fake).record_event("should not panic");
        let seen = Arc::new(Mutex::new(Vec::new()));
        let sink = seen.clone();
        let lock = lock(&fake).with_event_hook(move |e: LeaderEvent| sink.lock().unwrap().push(e));
        lock.record_event("before any read");
        assert_eq!(seen.lock().unwrap()[0].regarding.uid, None);
    }

    // client-go resourcelock: TestCreateError
    #[tokio::test]
    async fn create_twice_is_already_exists() {
        let fake = FakeApi::new();
        let lock = lock(&fake);
        lock.create(test_record()).await.unwrap();
        let err = lock.create(test_record()).await.unwrap_err();
        assert!(
            matches!(&err, LockError::Api(e) if e.is_already_exists()),
            "{err}"
        );
    }

    // client-go resourcelock: TestUpdateError
    #[tokio::test]
    async fn update_before_get_or_create_fails_without_a_request() {
        let fake = FakeApi::new();
        let err = lock(&fake).update(test_record()).await.unwrap_err();
        assert!(matches!(err, LockError::NotInitialized { .. }), "{err}");
        assert_eq!(
            err.to_string(),
            "lease test-namespace/test-name not initialized, call get or create first"
        );
        assert!(fake.actions().is_empty());
    }

    // client-go resourcelock: TestDescribe
    #[test]
    fn describe_is_namespace_slash_name() {
        assert_eq!(lock(&FakeApi::new()).describe(), "test-namespace/test-name");
    }

    // client-go resourcelock: TestUpdateWithNilLabelsOnLease
    #[tokio::test]
    async fn update_adds_lock_labels_to_a_lease_without_labels() {
        let fake = FakeApi::new();
        let plain = lock(&fake);
        plain.create(test_record()).await.unwrap();
        let lock = lock(&fake).with_labels(labels(&[("custom-key", "custom-val")]));
        lock.get().await.unwrap();
        lock.update(test_record()).await.unwrap();
        let stored: Lease = fake.object(Some(NS), NAME).unwrap();
        assert_eq!(
            stored.metadata.labels,
            Some(labels(&[("custom-key", "custom-val")]))
        );
    }

    // client-go resourcelock: TestUpdateWithNilLabelsOnLeaseLock
    #[tokio::test]
    async fn update_without_lock_labels_keeps_the_lease_labels() {
        let fake = FakeApi::new();
        let labelled = lock(&fake).with_labels(labels(&[("custom-key", "custom-val")]));
        labelled.create(test_record()).await.unwrap();
        let lock = lock(&fake);
        lock.get().await.unwrap();
        lock.update(test_record()).await.unwrap();
        let stored: Lease = fake.object(Some(NS), NAME).unwrap();
        assert_eq!(
            stored.metadata.labels,
            Some(labels(&[("custom-key", "custom-val")]))
        );
    }

    // client-go resourcelock: TestLabelUpdate
    #[tokio::test]
    async fn update_merges_lock_labels_over_the_lease_labels() {
        let fake = FakeApi::new();
        let lock = lock(&fake).with_labels(labels(&[("custom-key", "custom-val")]));
        lock.create(test_record()).await.unwrap();
        assert_eq!(
            fake.object::<Lease>(Some(NS), NAME)
                .unwrap()
                .metadata
                .labels,
            Some(labels(&[("custom-key", "custom-val")]))
        );
        // Someone else relabels the Lease.
        let api: Api<Lease> = Api::namespaced(fake.client(), NS);
        let mut lease = lock.cached_lease().unwrap();
        lease.metadata.labels = Some(labels(&[
            ("custom-key", "new-custom-val"),
            ("custom-key-2", "custom-val-2"),
        ]));
        api.update(&PostParams::default(), &lease).await.unwrap();
        // The lock's next update restores its own label and keeps the foreign one.
        lock.get().await.unwrap();
        lock.update(test_record()).await.unwrap();
        assert_eq!(
            fake.object::<Lease>(Some(NS), NAME)
                .unwrap()
                .metadata
                .labels,
            Some(labels(&[
                ("custom-key", "custom-val"),
                ("custom-key-2", "custom-val-2")
            ]))
        );
    }

    #[tokio::test]
    async fn update_over_a_stale_lease_is_a_conflict() {
        let fake = FakeApi::new();
        let a = lock(&fake);
        let b = lock(&fake);
        a.create(test_record()).await.unwrap();
        b.get().await.unwrap();
        a.get().await.unwrap();
        let mut newer = test_record();
        newer.leader_transitions = 2;
        a.update(newer).await.unwrap();
        let err = b.update(test_record()).await.unwrap_err();
        assert!(err.is_conflict(), "{err}");
    }

    #[test]
    fn lock_client_timeout_is_half_the_renew_deadline_but_at_least_a_second() {
        let base = Config::new("https://127.0.0.1:6443".parse().unwrap());
        let c = lock_client_config(&base, Duration::from_secs(10));
        assert_eq!(c.timeout, Some(Duration::from_secs(5)));
        assert_eq!(
            c.user_agent,
            Some(format!("{}/leader-election", default_user_agent()))
        );
        let c = lock_client_config(&base, Duration::from_millis(1500));
        assert_eq!(c.timeout, Some(Duration::from_secs(1)));
        assert_eq!(c.server, base.server);
    }

    #[test]
    fn only_the_leases_lock_type_remains() {
        let client = FakeApi::new().client();
        assert!(LeaseLock::for_lock_type("leases", client.clone(), "ns", "n", "id").is_ok());
        let err =
            LeaseLock::for_lock_type("endpoints", client.clone(), "ns", "n", "id").unwrap_err();
        assert_eq!(
            err.to_string(),
            "endpoints lock is removed, migrate to leases"
        );
        let err = LeaseLock::for_lock_type("configmapsleases", client.clone(), "ns", "n", "id")
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "configmapsleases lock is removed, migrate to leases"
        );
        let err = LeaseLock::for_lock_type("locks", client, "ns", "n", "id").unwrap_err();
        assert_eq!(err.to_string(), "Invalid lock-type locks");
    }
}

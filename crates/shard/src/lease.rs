//! What a member's Lease says, and where the Leases live: [`MemberLease`] (a Lease as
//! read), [`LeaseWrite`] (what a member writes), the [`LeaseStore`] seam and
//! [`KubeLeaseStore`], its implementation on `coordination.k8s.io/v1` through
//! [`kctrl_client`].
//!
//! A member's Lease is `<group>-<identity>`, labelled [`GROUP_LABEL`]`=<group>`. Its spec is
//! a leader-election record held by the member (holder, duration, renew time); its
//! annotations carry what the sharding needs: the buckets the member claims
//! ([`BUCKETS_ANNOTATION`]), its bucket count ([`BUCKET_COUNT_ANNOTATION`]) and a token
//! drawn at random by each process ([`TOKEN_ANNOTATION`]), so that a member tells its own
//! writes from anyone else's, a restarted process with the same identity included.

use std::collections::BTreeMap;
use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kctrl_client::{Api, Client, DeleteParams, ListParams, PostParams, Preconditions};

use crate::buckets::{BucketSet, HASH_SPACE_END, MAX_BUCKET_COUNT};
use crate::error::StoreError;

/// The label naming a Lease's group.
pub const GROUP_LABEL: &str = "shard.kctrl.io/group";
/// The annotation listing the buckets a member claims (`0-3,7`).
pub const BUCKETS_ANNOTATION: &str = "shard.kctrl.io/buckets";
/// The annotation giving a member's bucket count.
pub const BUCKET_COUNT_ANNOTATION: &str = "shard.kctrl.io/bucket-count";
/// The annotation holding the writing process's random token.
pub const TOKEN_ANNOTATION: &str = "shard.kctrl.io/token";
/// The annotation another member sets when it found the Lease expired and cleared its
/// claims: its identity.
pub const EXPIRED_BY_ANNOTATION: &str = "shard.kctrl.io/expired-by";

/// A member's Lease as read from the store.
#[derive(Clone, Debug, PartialEq)]
pub struct MemberLease {
    /// The Lease's name.
    pub name: String,
    /// Its resourceVersion: changes at every write.
    pub resource_version: String,
    /// `spec.holderIdentity`: the member's identity.
    pub holder: String,
    /// The writing process's token; empty when absent.
    pub token: String,
    /// The member's bucket count; `None` when absent or not a valid count.
    pub bucket_count: Option<u32>,
    /// The claimed buckets; `None` when the annotation is unreadable.
    pub claims: Option<BucketSet>,
    /// Whether the buckets annotation is present and not blank.
    pub claims_something: bool,
    /// `spec.leaseDurationSeconds`, when positive.
    pub lease_duration: Option<Duration>,
    /// `spec.renewTime`, for humans (liveness never reads it).
    pub renew_time: Option<Timestamp>,
    /// Who cleared the claims of this Lease when it expired, if anyone.
    pub expired_by: Option<String>,
}

impl MemberLease {
    /// The hash ranges this member claims, or may claim: a Lease whose claims or bucket
    /// count cannot be read, yet says it claims something, claims the whole space as far as
    /// anyone else can tell.
    pub fn claimed_ranges(&self) -> Vec<(u64, u128)> {
        match (&self.claims, self.bucket_count) {
            (Some(claims), Some(count)) => claims.ranges(count),
            _ if self.claims_something => vec![(0, HASH_SPACE_END)],
            _ => Vec::new(),
        }
    }

    /// Whether it claims any hash.
    pub fn claims_any(&self) -> bool {
        !self.claimed_ranges().is_empty()
    }

    /// Whether it claims a hash in `[start, end)`.
    pub fn claims_range(&self, start: u64, end: u128) -> bool {
        self.claimed_ranges()
            .iter()
            .any(|&(s, e)| u128::from(s) < end && u128::from(start) < e)
    }

    /// Reads a Lease; `None` when it has no name or no resourceVersion.
    pub fn from_lease(lease: &Lease) -> Option<Self> {
        let name = lease.metadata.name.clone()?;
        let resource_version = lease.metadata.resource_version.clone()?;
        let annotations = lease.metadata.annotations.as_ref();
        let annotation = |key: &str| annotations.and_then(|a| a.get(key)).map(String::as_str);
        let spec = lease.spec.as_ref();
        let buckets = annotation(BUCKETS_ANNOTATION).unwrap_or("");
        Some(Self {
            name,
            resource_version,
            holder: spec
                .and_then(|s| s.holder_identity.clone())
                .unwrap_or_default(),
            token: annotation(TOKEN_ANNOTATION).unwrap_or("").to_owned(),
            bucket_count: annotation(BUCKET_COUNT_ANNOTATION)
                .and_then(|c| c.trim().parse::<u32>().ok())
                .filter(|c| c.is_power_of_two() && *c <= MAX_BUCKET_COUNT),
            claims: buckets.parse().ok(),
            claims_something: !buckets.trim().is_empty(),
            lease_duration: spec
                .and_then(|s| s.lease_duration_seconds)
                .and_then(|s| u64::try_from(s).ok())
                .filter(|&s| s > 0)
                .map(Duration::from_secs),
            renew_time: spec.and_then(|s| s.renew_time.as_ref()).map(|t| t.0),
            expired_by: annotation(EXPIRED_BY_ANNOTATION).map(str::to_owned),
        })
    }
}

/// What a member writes into its Lease, whole, at every renewal.
#[derive(Clone, Debug, PartialEq)]
pub struct LeaseWrite {
    /// The Lease's name.
    pub name: String,
    /// The group (its label).
    pub group: String,
    /// The member's identity (the holder).
    pub holder: String,
    /// The process's token.
    pub token: String,
    /// The bucket count.
    pub bucket_count: u32,
    /// The buckets claimed.
    pub claims: BucketSet,
    /// The lease duration, whole seconds.
    pub lease_duration: Duration,
    /// When the member started (`spec.acquireTime`).
    pub acquire_time: Timestamp,
    /// Now (`spec.renewTime`).
    pub renew_time: Timestamp,
    /// Set when a member clears the claims of another's expired Lease: its identity.
    pub expired_by: Option<String>,
}

impl LeaseWrite {
    /// The Lease object to send (without namespace or resourceVersion).
    pub fn to_lease(&self) -> Lease {
        let mut annotations = BTreeMap::from([
            (BUCKETS_ANNOTATION.to_owned(), self.claims.to_string()),
            (
                BUCKET_COUNT_ANNOTATION.to_owned(),
                self.bucket_count.to_string(),
            ),
            (TOKEN_ANNOTATION.to_owned(), self.token.clone()),
        ]);
        if let Some(by) = &self.expired_by {
            annotations.insert(EXPIRED_BY_ANNOTATION.to_owned(), by.clone());
        }
        let micros =
            |t: Timestamp| MicroTime(Timestamp::from_microsecond(t.as_microsecond()).unwrap_or(t));
        Lease {
            metadata: ObjectMeta {
                name: Some(self.name.clone()),
                labels: Some(BTreeMap::from([(
                    GROUP_LABEL.to_owned(),
                    self.group.clone(),
                )])),
                annotations: Some(annotations),
                ..Default::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(self.holder.clone()),
                lease_duration_seconds: Some(
                    i32::try_from(self.lease_duration.as_secs()).unwrap_or(i32::MAX),
                ),
                acquire_time: Some(micros(self.acquire_time)),
                renew_time: Some(micros(self.renew_time)),
                ..Default::default()
            }),
        }
    }

    /// Whether `lease` holds exactly what this write wrote (the resourceVersion aside).
    pub fn matches(&self, lease: &MemberLease) -> bool {
        lease.name == self.name
            && lease.holder == self.holder
            && lease.token == self.token
            && lease.bucket_count == Some(self.bucket_count)
            && lease.claims.as_ref() == Some(&self.claims)
            && lease.renew_time.map(|t| t.as_microsecond())
                == Some(self.renew_time.as_microsecond())
    }
}

/// Where a group's Leases live. [`KubeLeaseStore`] keeps them in the API server; tests
/// substitute their own.
///
/// Implementations must give the guarantees the handover relies on:
/// [`list`](Self::list) and [`get`](Self::get) are consistent reads (they reflect every
/// write that completed before they were sent), and [`update`](Self::update) and
/// [`delete`](Self::delete) apply only if the Lease is still at the given
/// resourceVersion, failing with [`StoreError::Conflict`] otherwise.
pub trait LeaseStore: Send + Sync + 'static {
    /// Every Lease of the group, read consistently.
    fn list(&self) -> BoxFuture<'_, Result<Vec<MemberLease>, StoreError>>;

    /// One Lease, read consistently.
    fn get<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<MemberLease, StoreError>>;

    /// Creates a Lease; [`StoreError::AlreadyExists`] if it exists.
    fn create<'a>(
        &'a self,
        lease: &'a LeaseWrite,
    ) -> BoxFuture<'a, Result<MemberLease, StoreError>>;

    /// Replaces a Lease at `resource_version`.
    fn update<'a>(
        &'a self,
        lease: &'a LeaseWrite,
        resource_version: &'a str,
    ) -> BoxFuture<'a, Result<MemberLease, StoreError>>;

    /// Deletes a Lease at `resource_version`.
    fn delete<'a>(
        &'a self,
        name: &'a str,
        resource_version: &'a str,
    ) -> BoxFuture<'a, Result<(), StoreError>>;
}

/// A [`LeaseStore`] on the API server's `coordination.k8s.io/v1` Leases of one namespace,
/// selecting a group's by label.
#[derive(Clone, Debug)]
pub struct KubeLeaseStore {
    api: Api<Lease>,
    group: String,
}

impl KubeLeaseStore {
    /// The Leases of `group` in `namespace`.
    pub fn new(client: Client, namespace: impl Into<String>, group: impl Into<String>) -> Self {
        Self {
            api: Api::namespaced(client, namespace.into()),
            group: group.into(),
        }
    }

    fn read(lease: &Lease) -> Result<MemberLease, StoreError> {
        MemberLease::from_lease(lease).ok_or_else(|| {
            StoreError::Other(
                format!(
                    "lease {:?} came back without a name or resourceVersion",
                    lease.metadata.name
                )
                .into(),
            )
        })
    }
}

fn classify(err: kctrl_client::Error, name: &str) -> StoreError {
    let name = name.to_owned();
    if err.is_conflict() {
        StoreError::Conflict { name }
    } else if err.is_not_found() {
        StoreError::NotFound { name }
    } else if err.is_already_exists() {
        StoreError::AlreadyExists { name }
    } else {
        StoreError::Api(err)
    }
}

impl LeaseStore for KubeLeaseStore {
    fn list(&self) -> BoxFuture<'_, Result<Vec<MemberLease>, StoreError>> {
        async move {
            // No resourceVersion: a consistent (quorum) read.
            let params = ListParams {
                label_selector: Some(format!("{GROUP_LABEL}={}", self.group)),
                ..Default::default()
            };
            let list = self.api.list(&params).await?;
            Ok(list
                .items
                .iter()
                .filter_map(MemberLease::from_lease)
                .collect())
        }
        .boxed()
    }

    fn get<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<MemberLease, StoreError>> {
        async move {
            let lease = self.api.get(name).await.map_err(|e| classify(e, name))?;
            Self::read(&lease)
        }
        .boxed()
    }

    fn create<'a>(
        &'a self,
        lease: &'a LeaseWrite,
    ) -> BoxFuture<'a, Result<MemberLease, StoreError>> {
        async move {
            let created = self
                .api
                .create(&PostParams::default(), &lease.to_lease())
                .await
                .map_err(|e| classify(e, &lease.name))?;
            Self::read(&created)
        }
        .boxed()
    }

    fn update<'a>(
        &'a self,
        lease: &'a LeaseWrite,
        resource_version: &'a str,
    ) -> BoxFuture<'a, Result<MemberLease, StoreError>> {
        async move {
            let mut object = lease.to_lease();
            object.metadata.resource_version = Some(resource_version.to_owned());
            let updated = self
                .api
                .update(&PostParams::default(), &object)
                .await
                .map_err(|e| classify(e, &lease.name))?;
            Self::read(&updated)
        }
        .boxed()
    }

    fn delete<'a>(
        &'a self,
        name: &'a str,
        resource_version: &'a str,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        async move {
            let params = DeleteParams {
                preconditions: Some(Preconditions {
                    uid: None,
                    resource_version: Some(resource_version.to_owned()),
                }),
                ..Default::default()
            };
            self.api
                .delete(name, &params)
                .await
                .map_err(|e| classify(e, name))?;
            Ok(())
        }
        .boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kctrl_fake::FakeApi;

    fn write(claims: &str) -> LeaseWrite {
        let now = Timestamp::from_second(1_800_000_000).unwrap();
        LeaseWrite {
            name: "g-a".into(),
            group: "g".into(),
            holder: "a".into(),
            token: "t1".into(),
            bucket_count: 8,
            claims: claims.parse().unwrap(),
            lease_duration: Duration::from_secs(15),
            acquire_time: now,
            renew_time: now,
            expired_by: None,
        }
    }

    #[tokio::test]
    async fn a_written_lease_reads_back_and_conditional_writes_conflict() {
        let fake = FakeApi::new();
        let store = KubeLeaseStore::new(fake.client(), "ns", "g");
        let created = store.create(&write("0-2")).await.unwrap();
        assert!(write("0-2").matches(&created));
        assert_eq!(created.claims, Some("0-2".parse().unwrap()));
        assert_eq!(created.bucket_count, Some(8));
        assert_eq!(created.lease_duration, Some(Duration::from_secs(15)));
        assert!(matches!(
            store.create(&write("0")).await,
            Err(StoreError::AlreadyExists { .. })
        ));

        let updated = store
            .update(&write("5"), &created.resource_version)
            .await
            .unwrap();
        assert_ne!(updated.resource_version, created.resource_version);
        let err = store
            .update(&write("6"), &created.resource_version)
            .await
            .unwrap_err();
        assert!(matches!(err, StoreError::Conflict { .. }), "{err}");
        assert!(err.is_definite());

        // Another group's Lease is not listed.
        let mut other = write("1");
        other.name = "h-a".into();
        other.group = "h".into();
        store.create(&other).await.unwrap();
        let listed = store.list().await.unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0], updated);

        let err = store
            .delete("g-a", &created.resource_version)
            .await
            .unwrap_err();
        assert!(matches!(err, StoreError::Conflict { .. }), "{err}");
        store
            .delete("g-a", &updated.resource_version)
            .await
            .unwrap();
        assert!(matches!(
            store.get("g-a").await,
            Err(StoreError::NotFound { .. })
        ));
    }

    #[test]
    fn unreadable_claims_claim_everything() {
        let mut lease = write("1").to_lease();
        lease.metadata.resource_version = Some("7".into());
        let read = MemberLease::from_lease(&lease).unwrap();
        assert_eq!(read.claimed_ranges(), vec![(1 << 61, 2 << 61)]);

        let annotations = lease.metadata.annotations.as_mut().unwrap();
        annotations.insert(BUCKETS_ANNOTATION.into(), "1,banana".into());
        let read = MemberLease::from_lease(&lease).unwrap();
        assert_eq!(read.claimed_ranges(), vec![(0, HASH_SPACE_END)]);

        let annotations = lease.metadata.annotations.as_mut().unwrap();
        annotations.insert(BUCKETS_ANNOTATION.into(), "1".into());
        annotations.insert(BUCKET_COUNT_ANNOTATION.into(), "48".into());
        let read = MemberLease::from_lease(&lease).unwrap();
        assert_eq!(read.bucket_count, None);
        assert!(read.claims_range(0, 1));

        let annotations = lease.metadata.annotations.as_mut().unwrap();
        annotations.insert(BUCKETS_ANNOTATION.into(), "".into());
        let read = MemberLease::from_lease(&lease).unwrap();
        assert!(!read.claims_any());
    }
}

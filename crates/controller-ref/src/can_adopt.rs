//! The adoption guard: one uncached look at the owner before the first adoption of a sync.
//!
//! The owner the controller syncs comes from an informer cache and may be stale: it may have
//! been deleted, or deleted and recreated under the same name. Adopting for a stale owner would
//! hand objects to a controller that no longer exists, so the first adoption asks the API
//! server directly. That read is expensive, so it happens at most once per
//! [`CanAdopt`] (one per sync), and only when an adoption is actually attempted.

use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex};

use futures::FutureExt;
use futures::future::BoxFuture;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::{Metadata, Resource};
use kctrl_client::Api;
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::OnceCell;

use crate::owner::{Owner, go_time_string};

/// Why adoptions are refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CanAdoptError {
    /// The fresh read of the owner failed, or found a different owner.
    #[error("can't recheck DeletionTimestamp: {0}")]
    Recheck(#[source] RecheckError),
    /// The fresh owner is being deleted.
    #[error("{namespace}/{name} has just been deleted at {}", go_time_string(.deleted_at))]
    BeingDeleted {
        /// The owner's namespace.
        namespace: String,
        /// The owner's name.
        name: String,
        /// The owner's `deletionTimestamp`.
        deleted_at: Time,
    },
    /// An earlier first call was cancelled while the check ran; build a new manager (as
    /// every sync does) to check again.
    #[error("the adoption check was cancelled before it finished")]
    Interrupted,
    /// A custom check refused.
    #[error(transparent)]
    Other(Box<dyn std::error::Error + Send + Sync>),
}

/// Why the fresh read of the owner did not produce it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RecheckError {
    /// The GET failed (NotFound when the owner is gone).
    #[error(transparent)]
    Get(#[from] kctrl_client::Error),
    /// An object of the owner's name exists but with another uid: the owner was deleted and
    /// recreated.
    #[error("original {kind} {namespace}/{name} is gone: got uid {got}, wanted {wanted}")]
    Replaced {
        /// The owner's kind.
        kind: String,
        /// The owner's namespace.
        namespace: String,
        /// The owner's name.
        name: String,
        /// The uid the API server has now.
        got: String,
        /// The uid of the owner being synced.
        wanted: String,
    },
}

type Check = Box<dyn FnOnce() -> BoxFuture<'static, Result<(), CanAdoptError>> + Send>;

/// A check run at most once, on the first adoption; its outcome (success or error) is kept
/// and answered to every later adoption (upstream's `CanAdoptFunc` behind a `sync.Once`).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use kctrl_controller_ref::{CanAdopt, CanAdoptError};
///
/// let can_adopt = CanAdopt::new(|| async {
///     Err(CanAdoptError::Other("owner is paused".into()))
/// });
/// assert!(!can_adopt.is_checked());
/// assert_eq!(can_adopt.check().await.unwrap_err().to_string(), "owner is paused");
/// assert!(can_adopt.is_checked());
/// # }
/// ```
pub struct CanAdopt {
    check: Mutex<Option<Check>>,
    outcome: OnceCell<Result<(), Arc<CanAdoptError>>>,
}

impl fmt::Debug for CanAdopt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CanAdopt")
            .field("outcome", &self.outcome.get())
            .finish_non_exhaustive()
    }
}

impl CanAdopt {
    /// Runs `check` before the first adoption.
    pub fn new<F, Fut>(check: F) -> Self
    where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = Result<(), CanAdoptError>> + Send + 'static,
    {
        Self {
            check: Mutex::new(Some(Box::new(move || check().boxed()))),
            outcome: OnceCell::new(),
        }
    }

    /// Allows every adoption without looking (upstream's nil `CanAdoptFunc`).
    pub fn always() -> Self {
        Self::new(|| async { Ok(()) })
    }

    /// Upstream's `RecheckDeletionTimestamp`: `get` reads the owner's latest metadata; a
    /// failed read refuses with "can't recheck DeletionTimestamp: ..." and a set
    /// `deletionTimestamp` with "ns/name has just been deleted at ...".
    pub fn recheck_deletion_timestamp<F, Fut>(get: F) -> Self
    where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = Result<ObjectMeta, RecheckError>> + Send + 'static,
    {
        Self::new(|| async move {
            let fresh = get().await.map_err(CanAdoptError::Recheck)?;
            match fresh.deletion_timestamp {
                Some(deleted_at) => Err(CanAdoptError::BeingDeleted {
                    namespace: fresh.namespace.unwrap_or_default(),
                    name: fresh.name.unwrap_or_default(),
                    deleted_at,
                }),
                None => Ok(()),
            }
        })
    }

    /// The recheck every workload controller builds: an uncached GET of `owner` through
    /// `api` (which must address the owner's namespace), refusing when the owner is gone,
    /// was recreated with another uid ("original Deployment ns/name is gone: got uid ...,
    /// wanted ...") or is being deleted.
    pub fn recheck_owner<K>(api: Api<K>, owner: &Owner) -> Self
    where
        K: Resource + Metadata<Ty = ObjectMeta> + Serialize + DeserializeOwned + Send + 'static,
        K::Scope: 'static,
    {
        let owner = owner.clone();
        Self::recheck_deletion_timestamp(move || async move {
            let fresh = api.get(&owner.name).await?;
            let meta = fresh.metadata();
            let got = meta.uid.as_deref().unwrap_or_default();
            if got != owner.uid {
                return Err(RecheckError::Replaced {
                    kind: owner.kind,
                    namespace: owner.namespace,
                    name: owner.name,
                    got: got.to_owned(),
                    wanted: owner.uid,
                });
            }
            Ok(meta.clone())
        })
    }

    /// The check's outcome, running it if this is the first call. Concurrent first callers
    /// wait for the one running check.
    pub async fn check(&self) -> Result<(), Arc<CanAdoptError>> {
        self.outcome
            .get_or_init(|| async {
                let check = self
                    .check
                    .lock()
                    .unwrap_or_else(|poisoned| poisoned.into_inner())
                    .take();
                match check {
                    Some(check) => check().await.map_err(Arc::new),
                    // A previous first call was dropped while its check ran: fail closed.
                    None => Err(Arc::new(CanAdoptError::Interrupted)),
                }
            })
            .await
            .clone()
    }

    /// Whether the check has run (and its outcome is kept).
    pub fn is_checked(&self) -> bool {
        self.outcome.initialized()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn being_deleted_error_text() {
        let can_adopt = CanAdopt::recheck_deletion_timestamp(|| async {
            Ok(ObjectMeta {
                namespace: Some("ns".into()),
                name: Some("web".into()),
                deletion_timestamp: Some(Time("2024-05-01T10:00:00Z".parse().unwrap())),
                ..Default::default()
            })
        });
        let err = can_adopt.check().await.unwrap_err();
        assert_eq!(
            err.to_string(),
            "ns/web has just been deleted at 2024-05-01 10:00:00 +0000 UTC"
        );
    }

    #[tokio::test]
    async fn replaced_owner_error_text() {
        let can_adopt = CanAdopt::recheck_deletion_timestamp(|| async {
            Err(RecheckError::Replaced {
                kind: "Deployment".into(),
                namespace: "ns".into(),
                name: "web".into(),
                got: "new".into(),
                wanted: "old".into(),
            })
        });
        let err = can_adopt.check().await.unwrap_err();
        assert_eq!(
            err.to_string(),
            "can't recheck DeletionTimestamp: original Deployment ns/web is gone: got uid new, \
             wanted old"
        );
    }
}

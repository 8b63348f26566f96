//! Errors of adopting and releasing one object, and of claiming a list.

use std::fmt;
use std::sync::Arc;

use crate::can_adopt::CanAdoptError;

/// Adopting or releasing one object failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OwnershipError {
    /// The adoption guard refused (the owner is gone, was recreated or is being deleted).
    #[error("can't adopt {kind} {namespace}/{name} ({uid}): {source}")]
    CannotAdopt {
        /// Kind of the object, e.g. `ReplicaSet`.
        kind: &'static str,
        /// The object's namespace.
        namespace: String,
        /// The object's name.
        name: String,
        /// The object's uid.
        uid: String,
        /// Why; the same error for every adoption of the sync.
        #[source]
        source: Arc<CanAdoptError>,
    },
    /// The adopt patch failed.
    #[error("adopting {kind} {namespace}/{name} for {owner}: {source}")]
    Adopt {
        /// Kind of the object.
        kind: &'static str,
        /// The object's namespace.
        namespace: String,
        /// The object's name.
        name: String,
        /// The owner, as `Kind namespace/name`.
        owner: String,
        /// The API error.
        #[source]
        source: kctrl_client::Error,
    },
    /// The release patch failed (other than NotFound or Invalid, which count as released).
    #[error("releasing {kind} {namespace}/{name} from {owner}: {source}")]
    Release {
        /// Kind of the object.
        kind: &'static str,
        /// The object's namespace.
        namespace: String,
        /// The object's name.
        name: String,
        /// The owner, as `Kind namespace/name`.
        owner: String,
        /// The API error.
        #[source]
        source: kctrl_client::Error,
    },
}

impl OwnershipError {
    /// Whether the API answered NotFound (the object is gone): a claim treats that as "not
    /// ours" rather than as a failure.
    pub fn is_not_found(&self) -> bool {
        match self {
            OwnershipError::Adopt { source, .. } | OwnershipError::Release { source, .. } => {
                source.is_not_found()
            }
            OwnershipError::CannotAdopt { .. } => false,
        }
    }

    /// The API error of a failed patch.
    pub fn api_error(&self) -> Option<&kctrl_client::Error> {
        match self {
            OwnershipError::Adopt { source, .. } | OwnershipError::Release { source, .. } => {
                Some(source)
            }
            OwnershipError::CannotAdopt { .. } => None,
        }
    }
}

/// Some objects of a list could not be adopted or released. The objects that were claimed
/// anyway are kept, as upstream returns both the claimed list and the aggregate error.
pub struct ClaimError<K> {
    /// The objects owned after the claim (those whose claim succeeded).
    pub claimed: Vec<Arc<K>>,
    /// One error per object whose claim failed, in list order.
    pub errors: Vec<OwnershipError>,
}

impl<K> fmt::Debug for ClaimError<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClaimError")
            .field("claimed", &self.claimed.len())
            .field("errors", &self.errors)
            .finish()
    }
}

/// Like apimachinery's aggregate error: one error prints alone, several as `[a, b]` with
/// repeated messages printed once.
impl<K> fmt::Display for ClaimError<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut seen: Vec<String> = Vec::new();
        for e in &self.errors {
            let msg = e.to_string();
            if !seen.contains(&msg) {
                seen.push(msg);
            }
        }
        match seen.as_slice() {
            [one] => f.write_str(one),
            all => write!(f, "[{}]", all.join(", ")),
        }
    }
}

/// The message already contains every error's message, so no `source` is reported; the
/// individual errors are in [`ClaimError::errors`].
impl<K> std::error::Error for ClaimError<K> {}

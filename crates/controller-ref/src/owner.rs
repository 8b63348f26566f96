//! Who claims: the owner's identity as the claim rules and the adopt patch need it, and how an
//! object names its controller.

use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use k8s_openapi::{Metadata, Resource};
use kctrl_client::{CompactObjectMeta, ObjectMetaAccess};

/// The controller that claims objects (a Deployment for its ReplicaSets, a ReplicaSet for its
/// Pods): the parts of its metadata the claim rules read, and its kind for the ownerReference
/// written on adoption.
///
/// Build it from the object the sync works on (usually the informer's cached copy); the
/// uncached recheck before the first adoption is [`CanAdopt`](crate::CanAdopt)'s job.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Owner {
    /// `apiVersion` of the owner, e.g. `apps/v1` (upstream's `GroupVersion().String()`).
    pub api_version: String,
    /// `kind` of the owner, e.g. `Deployment`.
    pub kind: String,
    /// The owner's namespace; empty for a cluster-scoped owner, which may claim objects in
    /// any namespace.
    pub namespace: String,
    /// The owner's name.
    pub name: String,
    /// The owner's uid: an object is ours when its controllerRef carries this uid.
    pub uid: String,
    /// The owner's `deletionTimestamp`: while set, nothing is adopted or released.
    pub deletion_timestamp: Option<Time>,
}

impl Owner {
    /// The owner described by a typed object: `apiVersion` and `kind` come from `K`.
    ///
    /// ```
    /// use k8s_openapi::api::apps::v1::Deployment;
    /// use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    /// use kctrl_controller_ref::Owner;
    ///
    /// let d = Deployment {
    ///     metadata: ObjectMeta {
    ///         name: Some("web".into()),
    ///         namespace: Some("default".into()),
    ///         uid: Some("d-uid".into()),
    ///         ..Default::default()
    ///     },
    ///     ..Default::default()
    /// };
    /// let owner = Owner::of(&d);
    /// assert_eq!((owner.api_version.as_str(), owner.kind.as_str()), ("apps/v1", "Deployment"));
    /// assert_eq!(owner.uid, "d-uid");
    /// ```
    pub fn of<K>(obj: &K) -> Self
    where
        K: Resource + Metadata<Ty = ObjectMeta>,
    {
        Self::from_meta(obj.metadata(), K::API_VERSION, K::KIND)
    }

    /// The owner described by its metadata and an explicit `apiVersion` and `kind`.
    pub fn from_meta(
        meta: &ObjectMeta,
        api_version: impl Into<String>,
        kind: impl Into<String>,
    ) -> Self {
        Self {
            api_version: api_version.into(),
            kind: kind.into(),
            namespace: meta.namespace.clone().unwrap_or_default(),
            name: meta.name.clone().unwrap_or_default(),
            uid: meta.uid.clone().unwrap_or_default(),
            deletion_timestamp: meta.deletion_timestamp.clone(),
        }
    }

    /// Whether the owner is being deleted (`deletionTimestamp` set).
    pub fn is_being_deleted(&self) -> bool {
        self.deletion_timestamp.is_some()
    }

    /// The ownerReference an adopted object gets: this owner as its controller, blocking the
    /// owner's foreground deletion (upstream's `metav1.NewControllerRef`).
    pub fn controller_ref(&self) -> OwnerReference {
        OwnerReference {
            api_version: self.api_version.clone(),
            kind: self.kind.clone(),
            name: self.name.clone(),
            uid: self.uid.clone(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        }
    }
}

/// `Kind namespace/name`, or `Kind name` for a cluster-scoped owner.
impl fmt::Display for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.namespace.is_empty() {
            write!(f, "{} {}", self.kind, self.name)
        } else {
            write!(f, "{} {}/{}", self.kind, self.namespace, self.name)
        }
    }
}

/// The object's controller: its first ownerReference with `controller: true`, if any
/// (apimachinery's `metav1.GetControllerOf`).
pub fn get_controller_of(meta: &ObjectMeta) -> Option<&OwnerReference> {
    meta.owner_references
        .as_deref()?
        .iter()
        .find(|r| r.controller == Some(true))
}

/// Whether the object's controller reference points at `owner`'s UID (apimachinery's
/// `metav1.IsControlledBy`), for objects of any type: pass both `metadata`s.
pub fn is_controlled_by(meta: &ObjectMeta, owner: &ObjectMeta) -> bool {
    match (get_controller_of(meta), owner.uid.as_deref()) {
        (Some(r), Some(uid)) => r.uid == uid,
        _ => false,
    }
}

/// What the claim rules read of an object's metadata, whichever type holds it: k8s-openapi's
/// [`ObjectMeta`] (whole objects) or kctrl-client's [`CompactObjectMeta`] (the Pod view
/// caches hold), besides the name, namespace, UID and labels of [`ObjectMetaAccess`].
///
/// Sealed: implemented for those two types only, both of which keep the UID the adopt and
/// release patches name (a type whose `uid()` fell back to `ObjectMetaAccess`'s default of
/// `None` would patch with an empty UID).
pub trait ClaimMeta: ObjectMetaAccess + sealed::Sealed {
    /// The UID its controller reference names, if it has one ([`get_controller_of`]).
    fn controller_uid(&self) -> Option<&str>;
    /// Whether `deletionTimestamp` is set.
    fn is_being_deleted(&self) -> bool;
}

mod sealed {
    /// Keeps [`ClaimMeta`](super::ClaimMeta) to the metadata types that keep a UID.
    pub trait Sealed {}
    impl Sealed for super::ObjectMeta {}
    impl Sealed for super::CompactObjectMeta {}
}

impl ClaimMeta for ObjectMeta {
    fn controller_uid(&self) -> Option<&str> {
        get_controller_of(self).map(|r| r.uid.as_str())
    }

    fn is_being_deleted(&self) -> bool {
        self.deletion_timestamp.is_some()
    }
}

impl ClaimMeta for CompactObjectMeta {
    fn controller_uid(&self) -> Option<&str> {
        self.controller_ref().map(|r| r.uid())
    }

    fn is_being_deleted(&self) -> bool {
        self.deletion_timestamp().is_some()
    }
}

/// `namespace/name` of an object, as upstream's `klog.KObj` prints it.
pub(crate) fn object_key(meta: &impl ObjectMetaAccess) -> (&str, &str) {
    (
        meta.namespace().unwrap_or_default(),
        meta.name().unwrap_or_default(),
    )
}

/// A `metav1.Time` as Go's `time.Time.String()` prints a UTC time:
/// `2024-05-01 10:00:00 +0000 UTC` (fractional seconds only when non-zero).
pub(crate) fn go_time_string(t: &Time) -> String {
    t.0.strftime("%Y-%m-%d %H:%M:%S%.f +0000 UTC").to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner_ref(uid: &str, controller: Option<bool>) -> OwnerReference {
        OwnerReference {
            uid: uid.into(),
            controller,
            ..Default::default()
        }
    }

    #[test]
    fn get_controller_of_picks_the_first_controller_ref() {
        let meta = ObjectMeta {
            owner_references: Some(vec![
                owner_ref("a", None),
                owner_ref("b", Some(false)),
                owner_ref("c", Some(true)),
                owner_ref("d", Some(true)),
            ]),
            ..Default::default()
        };
        assert_eq!(get_controller_of(&meta).map(|r| r.uid.as_str()), Some("c"));
        assert_eq!(get_controller_of(&ObjectMeta::default()), None);
    }

    #[test]
    fn go_time_string_matches_go_format() {
        let t = Time("2024-05-01T10:00:00Z".parse().unwrap());
        assert_eq!(go_time_string(&t), "2024-05-01 10:00:00 +0000 UTC");
        let t = Time("2024-05-01T10:00:00.5Z".parse().unwrap());
        assert_eq!(go_time_string(&t), "2024-05-01 10:00:00.5 +0000 UTC");
    }
}

//! The claim rules: which objects a controller keeps, adopts, releases or leaves alone.

use std::fmt;
use std::future::Future;
use std::sync::Arc;

use futures::future::BoxFuture;
use k8s_openapi::Metadata;
use k8s_openapi::api::apps::v1::ReplicaSet;
use kctrl_client::labels::Selector;
use serde_json::Value;

use crate::can_adopt::{CanAdopt, CanAdoptError};
use crate::control::{PodControl, ReplicaSetControl};
use crate::error::{ClaimError, OwnershipError};
use crate::owner::{ClaimMeta, Owner, object_key};
use crate::patch::{adopt_patch, release_patch};

/// What a claim does with one object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Decision {
    /// Ours and matching.
    Keep,
    /// Not ours, and nothing to write.
    Ignore,
    /// A matching orphan.
    Adopt,
    /// Ours but no longer matching.
    Release,
}

type PatchResult = Result<(), kctrl_client::Error>;

/// Claims objects for one owner during one sync (upstream's `BaseControllerRefManager` with
/// its ReplicaSet and Pod variants). `C` is the control that sends the patches:
/// [`ReplicaSetControl`] enables [`claim_replica_sets`](Self::claim_replica_sets),
/// [`PodControl`] enables [`claim_pods`](Self::claim_pods).
///
/// Build a new manager for every sync: its [`CanAdopt`] check runs at most once.
pub struct ControllerRefManager<C> {
    control: C,
    owner: Owner,
    selector: Selector,
    can_adopt: CanAdopt,
    finalizers: Vec<String>,
}

impl<C> fmt::Debug for ControllerRefManager<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ControllerRefManager")
            .field("owner", &self.owner)
            .field("selector", &self.selector)
            .field("can_adopt", &self.can_adopt)
            .field("finalizers", &self.finalizers)
            .finish_non_exhaustive()
    }
}

impl<C> ControllerRefManager<C> {
    /// A manager claiming for `owner` the objects `selector` matches (the owner's
    /// `spec.selector`), writing through `control`, adopting only once `can_adopt` allows it.
    pub fn new(control: C, owner: Owner, selector: Selector, can_adopt: CanAdopt) -> Self {
        Self {
            control,
            owner,
            selector,
            can_adopt,
            finalizers: Vec::new(),
        }
    }

    /// Finalizers added to adopted objects and removed from released ones (upstream offers
    /// this for Pods, e.g. the Job controller's tracking finalizer).
    pub fn with_finalizers<I>(mut self, finalizers: I) -> Self
    where
        I: IntoIterator,
        I::Item: Into<String>,
    {
        self.finalizers = finalizers.into_iter().map(Into::into).collect();
        self
    }

    /// The owner claims are made for.
    pub fn owner(&self) -> &Owner {
        &self.owner
    }

    /// The owner's selector.
    pub fn selector(&self) -> &Selector {
        &self.selector
    }

    /// The finalizers managed with ownership.
    pub fn finalizers(&self) -> &[String] {
        &self.finalizers
    }

    /// The control patches go through.
    pub fn control(&self) -> &C {
        &self.control
    }

    /// The adoption guard's outcome, running it on the first call (upstream's `CanAdopt`).
    pub async fn can_adopt(&self) -> Result<(), Arc<CanAdoptError>> {
        self.can_adopt.check().await
    }

    /// Decides one object, adopting or releasing it as needed (upstream's `ClaimObject`).
    /// Returns whether the owner now owns it.
    ///
    /// * Controlled by another owner: left alone (`false`).
    /// * Controlled by us: kept if `matches`; otherwise released (`false`), except while the
    ///   owner is being deleted, when nothing is written.
    /// * Orphan: adopted (`true`) if `matches`, the owner is not being deleted, the object is
    ///   not being deleted, and the object is in the owner's namespace (any namespace for a
    ///   cluster-scoped owner).
    ///
    /// An adopt or release answered NotFound means the object is gone: `false`, no error.
    pub async fn claim_object<'a, K, M, A, FA, R, FR>(
        &'a self,
        obj: &'a K,
        matches: M,
        adopt: A,
        release: R,
    ) -> Result<bool, OwnershipError>
    where
        K: Metadata<Ty: ClaimMeta>,
        M: FnOnce(&K) -> bool,
        A: FnOnce(&'a K) -> FA,
        FA: Future<Output = Result<(), OwnershipError>>,
        R: FnOnce(&'a K) -> FR,
        FR: Future<Output = Result<(), OwnershipError>>,
    {
        let outcome = match self.decide(obj.metadata(), || matches(obj)) {
            Decision::Keep => return Ok(true),
            Decision::Ignore => return Ok(false),
            Decision::Release => release(obj).await.map(|()| false),
            Decision::Adopt => adopt(obj).await.map(|()| true),
        };
        match outcome {
            Err(e) if e.is_not_found() => Ok(false),
            other => other,
        }
    }

    /// The claim rules, without I/O.
    fn decide(&self, meta: &impl ClaimMeta, matches: impl FnOnce() -> bool) -> Decision {
        if let Some(controller_uid) = meta.controller_uid() {
            if controller_uid != self.owner.uid {
                // Owned by someone else.
                return Decision::Ignore;
            }
            if matches() {
                // Keeping what we own writes nothing, so it is allowed while being deleted.
                return Decision::Keep;
            }
            if self.owner.is_being_deleted() {
                return Decision::Ignore;
            }
            return Decision::Release;
        }
        // An orphan.
        if self.owner.is_being_deleted() || !matches() {
            return Decision::Ignore;
        }
        if meta.is_being_deleted() {
            return Decision::Ignore;
        }
        if !self.owner.namespace.is_empty()
            && Some(self.owner.namespace.as_str()) != meta.namespace()
        {
            return Decision::Ignore;
        }
        Decision::Adopt
    }

    /// Claims each object in turn, collecting the owned ones and the errors.
    async fn claim_all<'a, K, M, A, FA, R, FR>(
        &'a self,
        objects: &'a [Arc<K>],
        matches: M,
        adopt: A,
        release: R,
    ) -> Result<Vec<Arc<K>>, ClaimError<K>>
    where
        K: Metadata<Ty: ClaimMeta>,
        M: Fn(&K) -> bool,
        A: Fn(&'a K) -> FA,
        FA: Future<Output = Result<(), OwnershipError>>,
        R: Fn(&'a K) -> FR,
        FR: Future<Output = Result<(), OwnershipError>>,
    {
        let mut claimed = Vec::new();
        let mut errors = Vec::new();
        for obj in objects {
            match self.claim_object(&**obj, &matches, &adopt, &release).await {
                Ok(true) => claimed.push(Arc::clone(obj)),
                Ok(false) => {}
                Err(e) => errors.push(e),
            }
        }
        if errors.is_empty() {
            Ok(claimed)
        } else {
            Err(ClaimError { claimed, errors })
        }
    }

    /// Checks [`CanAdopt`], then sends the adopt patch through `send`.
    async fn adopt_with<'a>(
        &'a self,
        kind: &'static str,
        meta: &'a impl ClaimMeta,
        send: impl FnOnce(&'a str, &'a str, Value) -> BoxFuture<'a, PatchResult>,
    ) -> Result<(), OwnershipError> {
        let (namespace, name) = object_key(meta);
        let uid = meta.uid().unwrap_or_default();
        if let Err(source) = self.can_adopt.check().await {
            return Err(OwnershipError::CannotAdopt {
                kind,
                namespace: namespace.to_owned(),
                name: name.to_owned(),
                uid: uid.to_owned(),
                source,
            });
        }
        tracing::debug!(
            namespace,
            name,
            kind,
            owner = %self.owner,
            "patching object to adopt it"
        );
        // The API server rejects the patch if another controller=true ownerReference exists.
        let patch = adopt_patch(&self.owner, uid, &self.finalizers);
        send(namespace, name, patch)
            .await
            .map_err(|source| OwnershipError::Adopt {
                kind,
                namespace: namespace.to_owned(),
                name: name.to_owned(),
                owner: self.owner.to_string(),
                source,
            })
    }

    /// Sends the release patch through `send`; NotFound (the object is gone) and Invalid
    /// (it has no ownerReferences any more, or was recreated with another uid) count as
    /// released.
    async fn release_with<'a>(
        &'a self,
        kind: &'static str,
        meta: &'a impl ClaimMeta,
        send: impl FnOnce(&'a str, &'a str, Value) -> BoxFuture<'a, PatchResult>,
    ) -> Result<(), OwnershipError> {
        let (namespace, name) = object_key(meta);
        let uid = meta.uid().unwrap_or_default();
        tracing::debug!(
            namespace,
            name,
            kind,
            owner = %self.owner,
            "patching object to remove its controllerRef"
        );
        let patch = release_patch(uid, &[self.owner.uid.as_str()], &self.finalizers);
        match send(namespace, name, patch).await {
            Ok(()) => Ok(()),
            Err(e) if e.is_not_found() || e.is_invalid() => {
                tracing::debug!(namespace, name, kind, error = %e, "object already released");
                Ok(())
            }
            Err(source) => Err(OwnershipError::Release {
                kind,
                namespace: namespace.to_owned(),
                name: name.to_owned(),
                owner: self.owner.to_string(),
                source,
            }),
        }
    }
}

impl<C: ReplicaSetControl> ControllerRefManager<C> {
    /// Claims ReplicaSets: adopts matching orphans, releases owned ones the selector no
    /// longer matches, and returns those owned afterwards (upstream's `ClaimReplicaSets`).
    /// On error the [`ClaimError`] still carries the claimed list.
    pub async fn claim_replica_sets(
        &self,
        sets: &[Arc<ReplicaSet>],
    ) -> Result<Vec<Arc<ReplicaSet>>, ClaimError<ReplicaSet>> {
        self.claim_all(
            sets,
            |rs: &ReplicaSet| self.selector.matches_opt(rs.metadata.labels.as_ref()),
            |rs| self.adopt_replica_set(rs),
            |rs| self.release_replica_set(rs),
        )
        .await
    }

    /// Makes the owner the ReplicaSet's controller, after [`CanAdopt`] allows it.
    pub async fn adopt_replica_set(&self, rs: &ReplicaSet) -> Result<(), OwnershipError> {
        self.adopt_with("ReplicaSet", &rs.metadata, |ns, name, patch| {
            self.control.patch_replica_set(ns, name, patch)
        })
        .await
    }

    /// Removes the owner's ownerReference from the ReplicaSet; NotFound and Invalid are
    /// ignored.
    pub async fn release_replica_set(&self, rs: &ReplicaSet) -> Result<(), OwnershipError> {
        self.release_with("ReplicaSet", &rs.metadata, |ns, name, patch| {
            self.control.patch_replica_set(ns, name, patch)
        })
        .await
    }
}

impl<C: PodControl> ControllerRefManager<C> {
    /// Claims Pods with the ReplicaSet rules (upstream's `ClaimPods` without filters). `P` is
    /// a `Pod`, or any view of one that keeps its metadata (a controller's cache may hold
    /// views of Pods rather than whole Pods).
    pub async fn claim_pods<P>(&self, pods: &[Arc<P>]) -> Result<Vec<Arc<P>>, ClaimError<P>>
    where
        P: Metadata<Ty: ClaimMeta>,
    {
        self.claim_pods_filtered(pods, |_| true).await
    }

    /// Claims Pods that match the selector and `filter` (upstream's `ClaimPods` with
    /// filters; the selector is checked first).
    pub async fn claim_pods_filtered<P>(
        &self,
        pods: &[Arc<P>],
        filter: impl Fn(&P) -> bool,
    ) -> Result<Vec<Arc<P>>, ClaimError<P>>
    where
        P: Metadata<Ty: ClaimMeta>,
    {
        self.claim_all(
            pods,
            |pod: &P| self.selector.matches_meta(pod.metadata()) && filter(pod),
            |pod| self.adopt_pod(pod),
            |pod| self.release_pod(pod),
        )
        .await
    }

    /// Makes the owner the Pod's controller (adding the manager's finalizers), after
    /// [`CanAdopt`] allows it.
    pub async fn adopt_pod<P>(&self, pod: &P) -> Result<(), OwnershipError>
    where
        P: Metadata<Ty: ClaimMeta>,
    {
        self.adopt_with("Pod", pod.metadata(), |ns, name, patch| {
            self.control.patch_pod(ns, name, patch)
        })
        .await
    }

    /// Removes the owner's ownerReference (and the manager's finalizers) from the Pod;
    /// NotFound and Invalid are ignored.
    pub async fn release_pod<P>(&self, pod: &P) -> Result<(), OwnershipError>
    where
        P: Metadata<Ty: ClaimMeta>,
    {
        self.release_with("Pod", pod.metadata(), |ns, name, patch| {
            self.control.patch_pod(ns, name, patch)
        })
        .await
    }
}

//! Controller ownership: which objects a controller owns, and the patches that adopt and
//! release them — kube-controller-manager's `ControllerRefManager`
//! (`pkg/controller/controller_ref_manager.go`) and the patch controls of `controller_utils.go`.
//!
//! A workload controller owns the objects whose *controllerRef* (the ownerReference with
//! `controller: true`) carries its uid. Each sync it lists candidates by namespace and
//! **claims** them with a fresh [`ControllerRefManager`]:
//!
//! | the object is…                                   | claim                                |
//! |--------------------------------------------------|--------------------------------------|
//! | controlled by another owner                      | ignored                              |
//! | controlled by us, selector matches               | kept                                 |
//! | controlled by us, selector no longer matches     | released (kept while we are deleted) |
//! | an orphan, matching, in our namespace            | adopted, after [`CanAdopt`] allows   |
//! | an orphan being deleted, or we are being deleted | ignored                              |
//!
//! Adoption and release are strategic-merge patches carrying the object's uid as a
//! precondition (see [`adopt_patch`] and [`release_patch`]). Before the first adoption of a
//! sync, [`CanAdopt`] rereads the owner from the API server (not the cache) once, and refuses
//! every adoption if the owner is gone, was recreated or is being deleted.
//!
//! Workload controllers that claim Pods read them through one shared view, [`pod_view::PodView`]
//! (the Pod fields the Deployment and ReplicaSet controllers read, with upstream's Pod helpers
//! such as `IsPodActive` as methods), so one process running several of them caches each Pod
//! once.
//!
//! The files follow the data: [`Owner`] (who claims) → [`CanAdopt`] (may it adopt?) →
//! [`ControllerRefManager`] (the rules) → the patch bodies → [`ReplicaSetControl`] /
//! [`PodControl`] (the writes).
//!
//! # Example
//!
//! A Deployment claims an orphan ReplicaSet and leaves one owned by another controller alone,
//! on the in-memory fake API:
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use std::collections::BTreeMap;
//! use std::sync::Arc;
//!
//! use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec, ReplicaSet};
//! use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
//! use kctrl_client::{Api, labels::Selector};
//! use kctrl_controller_ref::{
//!     CanAdopt, ControllerRefManager, Owner, RealReplicaSetControl, get_controller_of,
//! };
//! use kctrl_fake::FakeApi;
//!
//! let fake = FakeApi::new();
//! let app: BTreeMap<String, String> = [("app".to_owned(), "web".to_owned())].into();
//! let meta = |name: &str| ObjectMeta {
//!     name: Some(name.into()),
//!     namespace: Some("default".into()),
//!     labels: Some(app.clone()),
//!     ..Default::default()
//! };
//! let d = fake.add(&Deployment {
//!     metadata: meta("web"),
//!     spec: DeploymentSpec {
//!         selector: LabelSelector { match_labels: Some(app.clone()), ..Default::default() },
//!         ..Default::default()
//!     },
//!     ..Default::default()
//! })?;
//! let orphan = fake.add(&ReplicaSet { metadata: meta("web-1"), ..Default::default() })?;
//! let mut foreign = ReplicaSet { metadata: meta("web-2"), ..Default::default() };
//! foreign.metadata.owner_references = Some(vec![Owner {
//!     uid: "someone-else".into(),
//!     ..Owner::of(&d)
//! }
//! .controller_ref()]);
//! let foreign = fake.add(&foreign)?;
//!
//! // One manager per sync: the owner as synced, its selector, and an uncached recheck.
//! let owner = Owner::of(&d);
//! let selector = Selector::from_label_selector(&d.spec.selector)?;
//! let manager = ControllerRefManager::new(
//!     RealReplicaSetControl::new(fake.client()),
//!     owner.clone(),
//!     selector,
//!     CanAdopt::recheck_owner(Api::<Deployment>::namespaced(fake.client(), "default"), &owner),
//! );
//!
//! let claimed = manager
//!     .claim_replica_sets(&[Arc::new(orphan), Arc::new(foreign)])
//!     .await?;
//! assert_eq!(claimed.len(), 1);
//! let adopted: ReplicaSet = fake.object(Some("default"), "web-1").unwrap();
//! assert_eq!(get_controller_of(&adopted.metadata).unwrap().uid, owner.uid);
//!
//! // One uncached GET of the Deployment, then one PATCH.
//! let verbs: Vec<_> = fake.actions().iter().map(|a| a.verb()).collect();
//! assert_eq!(verbs, ["get", "patch"]);
//! # Ok(()) }
//! ```
//!
//! # Upstream names
//!
//! | kube-controller-manager (`pkg/controller`)          | kctrl-controller-ref                          |
//! |-----------------------------------------------------|-----------------------------------------------|
//! | `BaseControllerRefManager`, `ReplicaSetControllerRefManager`, `PodControllerRefManager` | [`ControllerRefManager`] |
//! | `NewReplicaSetControllerRefManager(...)`            | [`ControllerRefManager::new`] with a [`ReplicaSetControl`] |
//! | `NewPodControllerRefManager(..., finalizers...)`    | [`ControllerRefManager::new`] with a [`PodControl`], [`ControllerRefManager::with_finalizers`] |
//! | `ClaimObject`                                       | [`ControllerRefManager::claim_object`]        |
//! | `ClaimReplicaSets`                                  | [`ControllerRefManager::claim_replica_sets`]  |
//! | `ClaimPods(pods)` / `ClaimPods(pods, filters...)`   | [`ControllerRefManager::claim_pods`] / [`ControllerRefManager::claim_pods_filtered`] |
//! | `AdoptReplicaSet` / `ReleaseReplicaSet`             | [`ControllerRefManager::adopt_replica_set`] / [`ControllerRefManager::release_replica_set`] |
//! | `AdoptPod` / `ReleasePod`                           | [`ControllerRefManager::adopt_pod`] / [`ControllerRefManager::release_pod`] |
//! | `CanAdopt()`, `CanAdoptFunc`                        | [`ControllerRefManager::can_adopt`], [`CanAdopt`] |
//! | `RecheckDeletionTimestamp(getObject)`               | [`CanAdopt::recheck_deletion_timestamp`]      |
//! | the Deployment controller's `canAdoptFunc` (GET + uid check) | [`CanAdopt::recheck_owner`]          |
//! | `ownerRefControllerPatch`                           | [`adopt_patch`], [`adopt_patch_bytes`]        |
//! | `GenerateDeleteOwnerRefStrategicMergeBytes`         | [`release_patch`], [`release_patch_bytes`]    |
//! | `metav1.GetControllerOf`                            | [`get_controller_of`]                         |
//! | `metav1.NewControllerRef`                           | [`Owner::controller_ref`]                     |
//! | `RSControlInterface` / `RealRSControl`              | [`ReplicaSetControl`] / [`RealReplicaSetControl`] |
//! | `PodControlInterface.PatchPod` / `RealPodControl`   | [`PodControl`] / [`RealPodControl`]           |
//! | `([]*T, error)` with `utilerrors.NewAggregate`      | `Result<Vec<Arc<T>>, ClaimError<T>>` ([`ClaimError::claimed`] keeps the list) |

mod can_adopt;
mod control;
mod error;
mod manager;
mod owner;
mod patch;
pub mod pod_view;

pub use can_adopt::{CanAdopt, CanAdoptError, RecheckError};
pub use control::{PodControl, RealPodControl, RealReplicaSetControl, ReplicaSetControl};
pub use error::{ClaimError, OwnershipError};
pub use manager::ControllerRefManager;
pub use owner::{ClaimMeta, Owner, get_controller_of, is_controlled_by};
pub use patch::{adopt_patch, adopt_patch_bytes, release_patch, release_patch_bytes};
pub use pod_view::PodView;

//! Port of upstream's `pkg/controller/controller_ref_manager_test.go` (k8s.io/kubernetes
//! v1.36.5): `TestClaimPods` (9 cases) and `TestGeneratePatchBytesForDelete` (5 cases), one
//! test per case, named after it. The claims run against the in-memory fake API through the
//! real [`RealPodControl`], and besides upstream's checks (claimed list, number of patches,
//! each patch naming the controller uid and every finalizer) each case asserts the exact
//! patch bodies.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, ReplicationController};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use kctrl_client::Patch;
use kctrl_client::labels::Selector;
use kctrl_controller_ref::{
    CanAdopt, ControllerRefManager, Owner, RealPodControl, adopt_patch, release_patch,
    release_patch_bytes,
};
use kctrl_fake::FakeApi;
use serde_json::Value;

const CONTROLLER_UID: &str = "123";

fn production_label() -> BTreeMap<String, String> {
    [("type".to_owned(), "production".to_owned())].into()
}

fn test_label() -> BTreeMap<String, String> {
    [("type".to_owned(), "testing".to_owned())].into()
}

fn production_label_selector() -> Selector {
    Selector::from_map(&production_label()).unwrap()
}

fn now() -> Time {
    Time(k8s_openapi::jiff::Timestamp::now())
}

/// Upstream's test controller: a ReplicationController in `default` with the given uid.
fn controller(uid: &str) -> ReplicationController {
    ReplicationController {
        metadata: ObjectMeta {
            namespace: Some("default".into()),
            uid: (!uid.is_empty()).then(|| uid.to_owned()),
            ..Default::default()
        },
        ..Default::default()
    }
}

/// Upstream's `newPod`: namespace default, one container `foo/bar`, and a controllerRef of
/// kind `apps/v1 Fake` to `owner` when given.
fn new_pod(
    name: &str,
    labels: BTreeMap<String, String>,
    owner: Option<&ReplicationController>,
) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("default".into()),
            labels: Some(labels),
            owner_references: owner.map(|o| {
                vec![OwnerReference {
                    api_version: "apps/v1".into(),
                    kind: "Fake".into(),
                    name: o.metadata.name.clone().unwrap_or_default(),
                    uid: o.metadata.uid.clone().unwrap_or_default(),
                    controller: Some(true),
                    block_owner_deletion: Some(true),
                }]
            }),
            ..Default::default()
        },
        spec: Some(PodSpec {
            containers: vec![Container {
                image: Some("foo/bar".into()),
                ..Default::default()
            }],
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// What a patch should be: adopting or releasing the pod at this index of `pods`.
enum Expect {
    Adopt(usize),
    Release(usize),
}

struct Case {
    controller: ReplicationController,
    finalizers: Vec<&'static str>,
    pods: Vec<Pod>,
    /// Indices into `pods`.
    claimed: Vec<usize>,
    patches: Vec<Expect>,
}

impl Case {
    fn new(controller: ReplicationController, pods: Vec<Pod>) -> Self {
        Self {
            controller,
            finalizers: Vec::new(),
            pods,
            claimed: Vec::new(),
            patches: Vec::new(),
        }
    }

    fn claimed(mut self, claimed: Vec<usize>) -> Self {
        self.claimed = claimed;
        self
    }

    fn patches(mut self, patches: Vec<Expect>) -> Self {
        self.patches = patches;
        self
    }
}

/// The test loop of `TestClaimPods`, with exact patch bodies on top.
async fn run(case: Case) {
    let fake = FakeApi::new();
    // Seeded pods get uids, as from an informer; the patches carry them.
    let pods: Vec<Arc<Pod>> = case
        .pods
        .iter()
        .map(|p| Arc::new(fake.add(p).unwrap()))
        .collect();
    // `controllerKind := schema.GroupVersionKind{}` upstream.
    let owner = Owner::from_meta(&case.controller.metadata, "", "");
    let finalizers: Vec<String> = case.finalizers.iter().map(|f| f.to_string()).collect();
    let manager = ControllerRefManager::new(
        RealPodControl::new(fake.client()),
        owner.clone(),
        production_label_selector(),
        CanAdopt::new(|| async { Ok(()) }),
    )
    .with_finalizers(finalizers.clone());

    let claimed = manager.claim_pods(&pods).await.expect("Unexpected error");

    let want: Vec<Arc<Pod>> = case.claimed.iter().map(|&i| pods[i].clone()).collect();
    assert_eq!(claimed, want, "Claimed wrong pods");

    let actions = fake.actions();
    assert!(
        actions.iter().all(|a| a.matches("patch", "pods")),
        "only pod patches expected: {actions:?}"
    );
    assert_eq!(
        actions.len(),
        case.patches.len(),
        "ClaimPods issues {} patches, want {}",
        actions.len(),
        case.patches.len()
    );
    for (action, expect) in actions.iter().zip(&case.patches) {
        let Some(Patch::Strategic(body)) = action.patch() else {
            panic!("not a strategic merge patch: {action:?}");
        };
        let text = body.to_string();
        assert!(
            text.contains(&owner.uid),
            "Patch doesn't contain controller UID {}",
            owner.uid
        );
        for f in &finalizers {
            assert!(
                text.contains(f),
                "Patch doesn't contain finalizer {text}, {f:?}"
            );
        }
        let (i, want_body): (usize, Value) = match *expect {
            Expect::Adopt(i) => (i, adopt_patch(&owner, uid(&pods[i]), &finalizers)),
            Expect::Release(i) => (i, release_patch(uid(&pods[i]), &[&owner.uid], &finalizers)),
        };
        assert_eq!(action.name().as_deref(), pods[i].metadata.name.as_deref());
        assert_eq!(action.namespace(), pods[i].metadata.namespace.as_deref());
        assert_eq!(body, &want_body);
    }
}

fn uid(pod: &Pod) -> &str {
    pod.metadata.uid.as_deref().unwrap()
}

mod claim_pods {
    use super::*;

    #[tokio::test]
    async fn claim_pods_with_correct_label() {
        let controller = controller("");
        let pods = vec![
            new_pod("pod1", production_label(), None),
            new_pod("pod2", test_label(), None),
        ];
        run(Case::new(controller, pods)
            .claimed(vec![0])
            .patches(vec![Expect::Adopt(0)]))
        .await;
    }

    #[tokio::test]
    async fn controller_marked_for_deletion_can_not_claim_pods() {
        let mut controller = controller(CONTROLLER_UID);
        controller.metadata.deletion_timestamp = Some(now());
        let pods = vec![
            new_pod("pod1", production_label(), None),
            new_pod("pod2", production_label(), None),
        ];
        run(Case::new(controller, pods)).await;
    }

    #[tokio::test]
    async fn controller_marked_for_deletion_can_not_claim_new_pods() {
        let mut controller = controller(CONTROLLER_UID);
        controller.metadata.deletion_timestamp = Some(now());
        let pods = vec![
            new_pod("pod1", production_label(), Some(&controller)),
            new_pod("pod2", production_label(), None),
        ];
        run(Case::new(controller, pods).claimed(vec![0])).await;
    }

    #[tokio::test]
    async fn controller_can_not_claim_pods_owned_by_another_controller() {
        let controller1 = controller(CONTROLLER_UID);
        let controller2 = super::controller("AAAAA");
        let pods = vec![
            new_pod("pod1", production_label(), Some(&controller1)),
            new_pod("pod2", production_label(), Some(&controller2)),
        ];
        run(Case::new(controller1, pods).claimed(vec![0])).await;
    }

    #[tokio::test]
    async fn controller_releases_claimed_pods_when_selector_doesnt_match() {
        let controller = controller(CONTROLLER_UID);
        let pods = vec![
            new_pod("pod1", production_label(), Some(&controller)),
            new_pod("pod2", test_label(), Some(&controller)),
        ];
        run(Case::new(controller, pods)
            .claimed(vec![0])
            .patches(vec![Expect::Release(1)]))
        .await;
    }

    #[tokio::test]
    async fn controller_does_not_claim_orphaned_pods_marked_for_deletion() {
        let controller = controller(CONTROLLER_UID);
        let mut pod_to_delete1 = new_pod("pod1", production_label(), Some(&controller));
        let mut pod_to_delete2 = new_pod("pod2", production_label(), None);
        pod_to_delete1.metadata.deletion_timestamp = Some(now());
        pod_to_delete2.metadata.deletion_timestamp = Some(now());
        run(Case::new(controller, vec![pod_to_delete1, pod_to_delete2]).claimed(vec![0])).await;
    }

    #[tokio::test]
    async fn controller_claims_or_release_pods_according_to_selector_with_finalizers() {
        let controller = controller(CONTROLLER_UID);
        let pods = vec![
            new_pod("pod1", production_label(), Some(&controller)),
            new_pod("pod2", test_label(), Some(&controller)),
            new_pod("pod3", production_label(), None),
        ];
        let mut case = Case::new(controller, pods)
            .claimed(vec![0, 2])
            .patches(vec![Expect::Release(1), Expect::Adopt(2)]);
        case.finalizers = vec!["foo-finalizer", "bar-finalizer"];
        run(case).await;
    }

    #[tokio::test]
    async fn controller_does_not_claim_pods_of_different_namespace() {
        let controller = controller(CONTROLLER_UID);
        let pod1 = new_pod("pod1", production_label(), None);
        let mut pod2 = new_pod("pod2", production_label(), None);
        pod2.metadata.namespace = Some("fakens".into());
        run(Case::new(controller, vec![pod1, pod2])
            .claimed(vec![0])
            .patches(vec![Expect::Adopt(0)]))
        .await;
    }

    #[tokio::test]
    async fn cluster_scoped_controller_claims_pods_of_specified_namespace() {
        // Acts as a cluster-scoped controller.
        let mut controller = controller(CONTROLLER_UID);
        controller.metadata.namespace = Some(String::new());
        let pod1 = new_pod("pod1", production_label(), None);
        let mut pod2 = new_pod("pod2", production_label(), None);
        pod2.metadata.namespace = Some("fakens".into());
        run(Case::new(controller, vec![pod1, pod2])
            .claimed(vec![0, 1])
            .patches(vec![Expect::Adopt(0), Expect::Adopt(1)]))
        .await;
    }
}

mod generate_patch_bytes_for_delete {
    use super::*;

    fn check(owner_uids: &[&str], dependent_uid: &str, finalizers: &[&str], want: &str) {
        let finalizers: Vec<String> = finalizers.iter().map(|f| f.to_string()).collect();
        let got = release_patch_bytes(dependent_uid, owner_uids, &finalizers);
        assert_eq!(
            String::from_utf8(got).unwrap(),
            want,
            "generatePatchBytesForDelete()"
        );
    }

    #[test]
    fn check_the_structure_of_patch_bytes() {
        check(
            &["ss1"],
            "ss2",
            &[],
            r#"{"metadata":{"uid":"ss2","ownerReferences":[{"$patch":"delete","uid":"ss1"}]}}"#,
        );
    }

    #[test]
    fn check_if_parent_uid_is_escaped() {
        check(
            &[r#"ss1"hello"#],
            "ss2",
            &[],
            r#"{"metadata":{"uid":"ss2","ownerReferences":[{"$patch":"delete","uid":"ss1\"hello"}]}}"#,
        );
    }

    #[test]
    fn check_if_revision_uid_uid_is_escaped() {
        check(
            &["ss1"],
            r#"ss2"hello"#,
            &[],
            r#"{"metadata":{"uid":"ss2\"hello","ownerReferences":[{"$patch":"delete","uid":"ss1"}]}}"#,
        );
    }

    #[test]
    fn check_the_structure_of_patch_bytes_with_multiple_owners() {
        check(
            &["ss1", "ss2"],
            "ss2",
            &[],
            r#"{"metadata":{"uid":"ss2","ownerReferences":[{"$patch":"delete","uid":"ss1"},{"$patch":"delete","uid":"ss2"}]}}"#,
        );
    }

    #[test]
    fn check_the_structure_of_patch_bytes_with_a_finalizer_and_multiple_owners() {
        check(
            &["ss1", "ss2"],
            "ss2",
            &["f1"],
            r#"{"metadata":{"uid":"ss2","ownerReferences":[{"$patch":"delete","uid":"ss1"},{"$patch":"delete","uid":"ss2"}],"$deleteFromPrimitiveList/finalizers":["f1"]}}"#,
        );
    }
}

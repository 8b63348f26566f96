//! kctrl-replicaset's ReplicaSet controller against a real kube-apiserver, run in this process
//! on a plane whose kube-controller-manager runs no ReplicaSet controller of its own (see
//! `kctrl_e2e::cluster_without_replicaset_controller`): a ReplicaSet scaled 0 → 5 → 2 → 0
//! creates and deletes its Pods and reports them in its status (ready and available too: the
//! plane's KWOK nodes make Pods Running and Ready at once); an orphan Pod its selector matches
//! is adopted, and a Pod relabelled out of its selector is released and replaced.
//!
//! `cargo xtask e2e` runs it on a plane of its own once its cluster is torn down; by hand:
//! `KCTRL_E2E_TESTENV=1 cargo test -p kctrl-e2e --test replicaset`. The same with our
//! deployment-controller binary running both its controllers: `both_controllers.rs`.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::{ReplicaSet, ReplicaSetSpec, ReplicaSetStatus};
use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use kctrl_client::{Api, Client, ListParams, Patch, PatchParams, PostParams, WatchParams};
use kctrl_controller_ref::{PodView, get_controller_of};
use kctrl_e2e::{TestNamespace, eventually, labels};
use kctrl_events::RecordingEventRecorder;
use kctrl_informer::SharedInformerFactory;
use kctrl_replicaset::{Options, ReplicaSetController};
use serde_json::json;
use tokio_util::sync::CancellationToken;

const IMAGE: &str = "registry.k8s.io/pause:3.10";
/// Deadline of each step: a few Pods on KWOK nodes take seconds.
const TIMEOUT: Duration = Duration::from_secs(60);

/// A test's namespace, with the ReplicaSet controller running on an informer factory of
/// its own (limited to the namespace, Pods in protobuf as deployment-controller reads them).
struct Env {
    ns: TestNamespace,
    sets: Api<ReplicaSet>,
    pods: Api<Pod>,
    recorder: Arc<RecordingEventRecorder>,
    factory: SharedInformerFactory,
    cancel: CancellationToken,
    running: tokio::task::JoinHandle<Result<(), kctrl_runtime::RunError>>,
}

/// An [`Env`], or return from the test when there is no suitable cluster.
macro_rules! env {
    ($prefix:expr) => {{
        let Some(cluster) = kctrl_e2e::cluster_without_replicaset_controller() else {
            return;
        };
        Env::start(cluster.admin(), $prefix).await
    }};
}

impl Env {
    async fn start(client: Client, prefix: &str) -> Self {
        let ns = TestNamespace::create(&client, prefix).await;
        let factory = SharedInformerFactory::builder(client.clone(), Duration::from_secs(3600))
            .namespace(&ns.name)
            .protobuf::<PodView>()
            .build();
        let recorder = Arc::new(RecordingEventRecorder::new());
        let controller = ReplicaSetController::new(
            &factory,
            client.clone(),
            recorder.clone(),
            Options::default(),
        );
        let cancel = CancellationToken::new();
        let running = tokio::spawn(controller.run(cancel.clone()));
        Self {
            sets: Api::namespaced(client.clone(), &ns.name),
            pods: Api::namespaced(client, &ns.name),
            ns,
            recorder,
            factory,
            cancel,
            running,
        }
    }

    /// Stops the controller (in time and without error) and removes the namespace.
    async fn finish(self) {
        self.cancel.cancel();
        tokio::time::timeout(TIMEOUT, self.running)
            .await
            .expect("the controller stops in time")
            .unwrap()
            .unwrap();
        self.factory.shutdown().await;
        self.ns.delete().await;
    }

    async fn create(&self, name: &str, replicas: i32) -> ReplicaSet {
        let app = labels(&[("app", name)]);
        let rs = ReplicaSet {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            spec: ReplicaSetSpec {
                replicas: Some(replicas),
                selector: LabelSelector {
                    match_labels: Some(app.clone()),
                    ..Default::default()
                },
                template: Some(PodTemplateSpec {
                    metadata: Some(ObjectMeta {
                        labels: Some(app),
                        ..Default::default()
                    }),
                    spec: Some(pod_spec()),
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        self.sets
            .create(&PostParams::default(), &rs)
            .await
            .unwrap_or_else(|e| panic!("creating ReplicaSet {name}: {e}"))
    }

    async fn scale(&self, name: &str, replicas: i32) {
        self.sets
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"replicas": replicas}})),
            )
            .await
            .unwrap_or_else(|e| panic!("scaling {name} to {replicas}: {e}"));
    }

    async fn pods(&self) -> Vec<Pod> {
        self.pods.list(&ListParams::default()).await.unwrap().items
    }

    /// The live Pods `rs` controls (not being deleted), by name.
    async fn owned(&self, rs: &ReplicaSet) -> Vec<String> {
        let uid = rs.metadata.uid.as_deref();
        let mut names: Vec<String> = self
            .pods()
            .await
            .into_iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .filter(|p| get_controller_of(&p.metadata).map(|r| r.uid.as_str()) == uid)
            .filter_map(|p| p.metadata.name)
            .collect();
        names.sort();
        names
    }

    /// Waits until `rs` controls `n` live Pods, every Pod of the namespace is one of them or
    /// in `others`, and its status, of its latest generation, reports `n` replicas, all fully
    /// labelled, ready and available.
    async fn converged(&self, rs: &ReplicaSet, n: i32, others: &[&str]) -> Vec<String> {
        let name = rs.metadata.name.as_deref().unwrap();
        eventually(
            &format!("{name} with {n} ready Pods (namespace {})", self.ns.name),
            TIMEOUT,
            async || {
                let cur = self.sets.get(name).await.map_err(|e| e.to_string())?;
                let owned = self.owned(rs).await;
                let all: Vec<String> = self
                    .pods()
                    .await
                    .into_iter()
                    .filter_map(|p| p.metadata.name)
                    .filter(|p| !others.contains(&p.as_str()))
                    .collect();
                let status = cur.status.clone().unwrap_or_default();
                let want = ReplicaSetStatus {
                    replicas: n,
                    fully_labeled_replicas: Some(n),
                    ready_replicas: Some(n),
                    available_replicas: Some(n),
                    observed_generation: cur.metadata.generation,
                    ..status.clone()
                };
                let zero_is_none = |v: Option<i32>| v.filter(|v| *v != 0);
                let same = status.replicas == want.replicas
                    && zero_is_none(status.fully_labeled_replicas)
                        == zero_is_none(want.fully_labeled_replicas)
                    && zero_is_none(status.ready_replicas) == zero_is_none(want.ready_replicas)
                    && zero_is_none(status.available_replicas)
                        == zero_is_none(want.available_replicas)
                    && status.observed_generation == want.observed_generation;
                if owned.len() == n as usize && all.len() == n as usize && same {
                    Ok(owned)
                } else {
                    Err(format!("owned {owned:?}, all {all:?}, status {status:?}"))
                }
            },
        )
        .await
    }

    fn events(&self, prefix: &str) -> usize {
        self.recorder
            .strings()
            .iter()
            .filter(|e| e.starts_with(prefix))
            .count()
    }
}

fn pod_spec() -> PodSpec {
    PodSpec {
        containers: vec![Container {
            name: "pause".into(),
            image: Some(IMAGE.into()),
            ..Default::default()
        }],
        ..Default::default()
    }
}

#[tokio::test]
async fn a_replica_set_scales_its_pods_up_and_down_and_reports_them() {
    let env = env!("rs-scale");
    let rs = env.create("web", 0).await;
    env.converged(&rs, 0, &[]).await;

    env.scale("web", 5).await;
    let five = env.converged(&rs, 5, &[]).await;
    assert_eq!(five.len(), 5);
    assert!(five.iter().all(|p| p.starts_with("web-")), "{five:?}");
    assert_eq!(env.events("Normal SuccessfulCreate Created pod: web-"), 5);

    env.scale("web", 2).await;
    let two = env.converged(&rs, 2, &[]).await;
    assert!(two.iter().all(|p| five.contains(p)), "{two:?} of {five:?}");

    env.scale("web", 0).await;
    env.converged(&rs, 0, &[]).await;
    assert_eq!(env.events("Normal SuccessfulCreate"), 5);
    assert_eq!(env.events("Normal SuccessfulDelete Deleted pod: web-"), 5);
    env.finish().await;
}

#[tokio::test]
async fn an_orphan_is_adopted_and_a_relabelled_pod_released() {
    let env = env!("rs-claims");
    let rs = env.create("web", 2).await;
    let uid = rs.metadata.uid.clone().unwrap();
    let first = env.converged(&rs, 2, &[]).await;

    // An orphan the selector matches: adopted (then one of the three Pods goes, as the
    // ReplicaSet wants two). The adoption may be undone by the deletion at once: watch for it.
    let list = env.pods.list(&ListParams::default()).await.unwrap();
    let mut watch = env
        .pods
        .watch(&WatchParams {
            resource_version: list.metadata.resource_version.clone(),
            ..Default::default()
        })
        .await
        .unwrap()
        .boxed();
    let orphan = Pod {
        metadata: ObjectMeta {
            name: Some("orphan".into()),
            labels: Some(labels(&[("app", "web")])),
            ..Default::default()
        },
        spec: Some(pod_spec()),
        ..Default::default()
    };
    env.pods
        .create(&PostParams::default(), &orphan)
        .await
        .unwrap();
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    loop {
        let event = tokio::time::timeout_at(deadline, watch.next())
            .await
            .expect("the orphan is adopted in time")
            .expect("the watch goes on")
            .unwrap();
        if let kctrl_client::WatchEvent::Modified(p) | kctrl_client::WatchEvent::Deleted(p) = event
            && p.metadata.name.as_deref() == Some("orphan")
            && get_controller_of(&p.metadata)
                .is_some_and(|r| r.uid == uid && r.kind == "ReplicaSet")
        {
            break;
        }
    }
    drop(watch);
    env.converged(&rs, 2, &[]).await;
    assert_eq!(env.events("Normal SuccessfulDelete"), 1);

    // A Pod relabelled out of the selector: released (its controller reference removed, the
    // Pod kept) and replaced.
    let released = &first[0];
    env.pods
        .patch(
            released,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"app": "other"}}})),
        )
        .await
        .unwrap();
    let now = env.converged(&rs, 2, &[released]).await;
    assert!(!now.contains(released), "{now:?}");
    let kept = env.pods.get(released).await.unwrap();
    assert!(kept.metadata.deletion_timestamp.is_none());
    assert!(
        kept.metadata
            .owner_references
            .unwrap_or_default()
            .is_empty(),
        "the controller reference is removed"
    );

    // Scaled to zero, it deletes its own Pods and leaves the released one alone.
    env.scale("web", 0).await;
    env.converged(&rs, 0, &[released]).await;
    assert!(env.pods.get(released).await.is_ok());
    env.finish().await;
}

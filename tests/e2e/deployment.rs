//! Our deployment-controller against a real cluster (`cargo xtask e2e` starts it): the
//! kube-apiserver, kube-controller-manager's ReplicaSet controller and garbage collector, and
//! KWOK nodes on which pods become Running and Ready at once, except pods of an image that cannot
//! be pulled ([`BROKEN_IMAGE`]), which stay Pending as with a kubelet (docs/local-cluster.md).
//!
//! Every test runs in its own namespace and waits with deadlines, never fixed sleeps. Tests that
//! need the controller return early when `cargo xtask e2e` did not start one.

use std::collections::HashMap;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::{
    Deployment, DeploymentCondition, DeploymentSpec, DeploymentStrategy, ReplicaSet,
    ReplicaSetSpec, RollingUpdateDeployment,
};
use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kctrl_client::versioned::{Text, Versioned};
use kctrl_client::{
    Api, Client, DeleteParams, ListParams, Patch, PatchParams, PostParams, PropagationPolicy,
    WatchEvent, WatchParams,
};
use kctrl_e2e::{Cluster, TestNamespace, eventually, labels};
use serde_json::json;

const IMAGE_1: &str = "registry.k8s.io/pause:3.10";
const IMAGE_2: &str = "registry.k8s.io/pause:3.9";
const IMAGE_3: &str = "registry.k8s.io/pause:3.8";
const IMAGE_4: &str = "registry.k8s.io/pause:3.7";
const HASH_LABEL: &str = "pod-template-hash";
const REVISION: &str = "deployment.kubernetes.io/revision";
const REVISION_HISTORY: &str = "deployment.kubernetes.io/revision-history";
const DESIRED_REPLICAS: &str = "deployment.kubernetes.io/desired-replicas";
const MAX_REPLICAS: &str = "deployment.kubernetes.io/max-replicas";
/// An image no registry has: its pods stay Pending and never become available, with
/// ErrImagePull / ImagePullBackOff, on the local cluster's KWOK nodes as under a kubelet.
const BROKEN_IMAGE: &str = "nginx:404";
/// Pod annotation that holds a pod unready for a while on the local cluster's KWOK nodes.
const READY_AFTER: &str = "kctrl.dev/ready-after";
/// Annotation of the nodes KWOK manages.
const KWOK_NODE: &str = "kwok.x-k8s.io/node";
/// Deadline for a rollout of a few pods on KWOK nodes.
const TIMEOUT: Duration = Duration::from_secs(90);

/// The namespace and clients of one test.
struct Env {
    cluster: Cluster,
    ns: TestNamespace,
    deployments: Api<Deployment>,
    sets: Api<ReplicaSet>,
    pods: Api<Pod>,
}

/// An [`Env`], or return from the test when there is no cluster or no controller.
macro_rules! env {
    ($prefix:expr) => {{
        let Some(cluster) = kctrl_e2e::cluster_with_deployment_controller() else {
            return;
        };
        if cluster.deployment_controller_log.is_none() {
            eprintln!(
                "e2e: no deployment-controller runs against the cluster (run `cargo xtask e2e`); \
                 skipping"
            );
            return;
        }
        Env::new(cluster, $prefix).await
    }};
}

impl Env {
    async fn new(cluster: Cluster, prefix: &str) -> Self {
        let client: Client = cluster.admin();
        let ns = TestNamespace::create(&client, prefix).await;
        Self {
            deployments: Api::namespaced(client.clone(), &ns.name),
            sets: Api::namespaced(client.clone(), &ns.name),
            pods: Api::namespaced(client.clone(), &ns.name),
            cluster,
            ns,
        }
    }

    /// Where to look when something goes wrong.
    fn log_hint(&self) -> String {
        format!(
            "namespace {}, controller log {}",
            self.ns.name,
            self.cluster
                .deployment_controller_log
                .as_deref()
                .map(|p| p.display().to_string())
                .unwrap_or_default()
        )
    }

    async fn create(&self, d: &Deployment) -> Deployment {
        self.deployments
            .create(&PostParams::default(), d)
            .await
            .unwrap_or_else(|e| panic!("creating {:?}: {e}", d.metadata.name))
    }

    async fn get(&self, name: &str) -> Deployment {
        self.deployments.get(name).await.unwrap()
    }

    async fn patch(&self, name: &str, patch: Patch) -> Deployment {
        self.deployments
            .patch(name, &PatchParams::default(), &patch)
            .await
            .unwrap_or_else(|e| panic!("patching deployment {name}: {e}"))
    }

    async fn set_image(&self, name: &str, image: &str) -> Deployment {
        self.patch(
            name,
            Patch::Strategic(json!({"spec": {"template": {"spec": {
                "containers": [{"name": "main", "image": image}]
            }}}})),
        )
        .await
    }

    async fn all_sets(&self) -> Vec<ReplicaSet> {
        self.sets.list(&ListParams::default()).await.unwrap().items
    }

    /// ReplicaSets whose controllerRef is `d`, oldest revision first.
    async fn owned_sets(&self, d: &Deployment) -> Vec<ReplicaSet> {
        let uid = d.metadata.uid.clone();
        let mut sets: Vec<ReplicaSet> = self
            .all_sets()
            .await
            .into_iter()
            .filter(|rs| controller_uid(rs) == uid)
            .collect();
        sets.sort_by_key(|rs| revision(rs).unwrap_or(0));
        sets
    }

    /// Waits until `name` is complete (upstream's `DeploymentComplete`, at its latest generation).
    async fn wait_complete(&self, name: &str) -> Deployment {
        let what = format!("deployment {name} to complete ({})", self.log_hint());
        eventually(&what, TIMEOUT, || async {
            let d = self.get(name).await;
            if complete(&d) { Ok(d) } else { Err(d.status) }
        })
        .await
    }

    /// Waits until the controller has observed the latest generation of `name`.
    async fn wait_observed(&self, name: &str) -> Deployment {
        let what = format!("deployment {name} to be observed ({})", self.log_hint());
        eventually(&what, TIMEOUT, || async {
            let d = self.get(name).await;
            if observed(&d) { Ok(d) } else { Err(d.status) }
        })
        .await
    }
}

fn template(app: &str, image: &str) -> PodTemplateSpec {
    PodTemplateSpec {
        metadata: Some(ObjectMeta {
            labels: Some(labels(&[("app", app)])),
            ..Default::default()
        }),
        spec: Some(PodSpec {
            containers: vec![Container {
                name: "main".into(),
                image: Some(image.into()),
                ..Default::default()
            }],
            ..Default::default()
        }),
    }
}

/// A RollingUpdate Deployment `name` selecting and labelling its pods `app=<name>`.
fn deployment(name: &str, replicas: i32) -> Deployment {
    Deployment {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        spec: DeploymentSpec {
            replicas: Some(replicas),
            selector: LabelSelector {
                match_labels: Some(labels(&[("app", name)])),
                ..Default::default()
            },
            template: template(name, IMAGE_1),
            ..Default::default()
        },
        ..Default::default()
    }
}

fn rolling(d: &mut Deployment, max_surge: i32, max_unavailable: i32) {
    d.spec.get_mut().strategy = Some(DeploymentStrategy {
        type_: Some("RollingUpdate".into()),
        rolling_update: Some(RollingUpdateDeployment {
            max_surge: Some(IntOrString::Int(max_surge)),
            max_unavailable: Some(IntOrString::Int(max_unavailable)),
        }),
    });
}

fn spec(d: &Deployment) -> &DeploymentSpec {
    d.spec.get().unwrap()
}

fn name(meta: &ObjectMeta) -> &str {
    meta.name.as_deref().unwrap_or_default()
}

fn annotation<'a>(meta: &'a ObjectMeta, key: &str) -> Option<&'a str> {
    meta.annotations.as_ref()?.get(key).map(String::as_str)
}

fn label<'a>(meta: &'a ObjectMeta, key: &str) -> Option<&'a str> {
    meta.labels.as_ref()?.get(key).map(String::as_str)
}

fn revision(rs: &ReplicaSet) -> Option<i64> {
    annotation(&rs.metadata, REVISION)?.parse().ok()
}

fn controller_uid(rs: &ReplicaSet) -> Option<String> {
    rs.metadata
        .owner_references
        .as_ref()?
        .iter()
        .find(|r| r.controller == Some(true))
        .map(|r| r.uid.clone())
}

fn rs_spec(rs: &ReplicaSet) -> i32 {
    rs.spec.get().and_then(|s| s.replicas).unwrap_or(1)
}

fn rs_available(rs: &ReplicaSet) -> i32 {
    rs.status
        .as_ref()
        .and_then(|s| s.available_replicas)
        .unwrap_or(0)
}

fn rs_image(rs: &ReplicaSet) -> Option<&str> {
    rs.spec.get()?.template.as_ref()?.spec.as_ref()?.containers[0]
        .image
        .as_deref()
}

fn condition<'a>(d: &'a Deployment, type_: &str) -> Option<&'a DeploymentCondition> {
    d.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_.text() == type_)
}

/// `(status, reason)` of a condition.
fn cond(d: &Deployment, type_: &str) -> Option<(String, String)> {
    condition(d, type_).map(|c| {
        (
            c.status.text().to_owned(),
            c.reason.clone().unwrap_or_default(),
        )
    })
}

fn observed(d: &Deployment) -> bool {
    d.status.as_ref().and_then(|s| s.observed_generation) >= d.metadata.generation
}

/// Upstream's `DeploymentComplete` plus the generation check of `WaitForDeploymentComplete`.
fn complete(d: &Deployment) -> bool {
    let want = spec(d).replicas.unwrap_or(1);
    let Some(s) = d.status.as_ref() else {
        return false;
    };
    observed(d)
        && s.updated_replicas.unwrap_or(0) == want
        && s.replicas.unwrap_or(0) == want
        && s.available_replicas.unwrap_or(0) == want
}

fn owned_by(rs: &ReplicaSet, d: &Deployment) -> bool {
    controller_uid(rs) == d.metadata.uid
}

/// 1. Create → all replicas available, status and conditions right, the ReplicaSet named and
///    labelled as upstream names and labels it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_makes_all_replicas_available() {
    let env = env!("deploy-create");
    env.create(&deployment("web", 3)).await;
    let d = env.wait_complete("web").await;
    let s = d.status.as_ref().unwrap();
    assert_eq!(s.replicas, Some(3));
    assert_eq!(s.updated_replicas, Some(3));
    assert_eq!(s.ready_replicas, Some(3));
    assert_eq!(s.available_replicas, Some(3));
    assert_eq!(s.unavailable_replicas.unwrap_or(0), 0);
    assert_eq!(s.observed_generation, d.metadata.generation);
    assert_eq!(
        cond(&d, "Available"),
        Some(("True".into(), "MinimumReplicasAvailable".into()))
    );
    assert_eq!(
        cond(&d, "Progressing"),
        Some(("True".into(), "NewReplicaSetAvailable".into()))
    );
    assert_eq!(annotation(&d.metadata, REVISION), Some("1"));

    let sets = env.owned_sets(&d).await;
    assert_eq!(sets.len(), 1, "one ReplicaSet ({})", env.log_hint());
    let rs = &sets[0];
    let hash = label(&rs.metadata, HASH_LABEL)
        .expect("the ReplicaSet has the pod-template-hash label")
        .to_owned();
    assert!(!hash.is_empty());
    assert_eq!(name(&rs.metadata), format!("web-{hash}"));
    assert_eq!(annotation(&rs.metadata, REVISION), Some("1"));
    let rs_spec = rs.spec.get().unwrap();
    assert_eq!(rs_spec.replicas, Some(3));
    assert_eq!(
        rs_spec.selector.match_labels,
        Some(labels(&[("app", "web"), (HASH_LABEL, &hash)]))
    );
    let template_labels = rs_spec.template.as_ref().unwrap().metadata.as_ref();
    assert_eq!(
        template_labels.and_then(|m| label(m, HASH_LABEL)),
        Some(hash.as_str())
    );
    let pods = env.pods.list(&ListParams::default()).await.unwrap().items;
    assert_eq!(pods.len(), 3);
    assert!(
        pods.iter()
            .all(|p| label(&p.metadata, HASH_LABEL) == Some(hash.as_str()))
    );
    env.ns.delete().await;
}

/// Either stream of the rolling-update watch.
enum Seen {
    Set(Result<WatchEvent<ReplicaSet>, kctrl_client::Error>),
    Deployment(Result<WatchEvent<Deployment>, kctrl_client::Error>),
}

/// 2. Rolling update, 4 replicas, maxSurge 1, maxUnavailable 1, watched from before the change:
///    the ReplicaSets' spec replicas never sum to more than 5 (the controller only scales the new
///    ReplicaSet up within the surge, and old ones only down), and the availability the
///    controller publishes never drops below 3. (The pods' own counts may briefly exceed 5 while
///    the ReplicaSet controller deletes old pods, so that is not asserted.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rolling_update_respects_surge_and_unavailability() {
    let env = env!("deploy-rolling");
    let mut d = deployment("web", 4);
    rolling(&mut d, 1, 1);
    env.create(&d).await;
    let before = env.wait_complete("web").await;
    let old = env.owned_sets(&before).await;
    assert_eq!(old.len(), 1);
    let old_name = name(&old[0].metadata).to_owned();

    let rs_list = env.sets.list(&ListParams::default()).await.unwrap();
    let d_list = env.deployments.list(&ListParams::default()).await.unwrap();
    let rs_watch = env
        .sets
        .watch(&WatchParams {
            resource_version: rs_list.metadata.resource_version.clone(),
            ..Default::default()
        })
        .await
        .unwrap();
    let d_watch = env
        .deployments
        .watch(&WatchParams {
            resource_version: d_list.metadata.resource_version.clone(),
            ..Default::default()
        })
        .await
        .unwrap();
    let mut events = futures::stream::select(
        rs_watch.map(Seen::Set).boxed(),
        d_watch.map(Seen::Deployment).boxed(),
    );
    let mut sets: HashMap<String, ReplicaSet> = rs_list
        .items
        .into_iter()
        .map(|rs| (name(&rs.metadata).to_owned(), rs))
        .collect();

    env.set_image("web", IMAGE_2).await;

    let mut violations = Vec::new();
    let (mut max_spec_sum, mut min_available) = (0, i32::MAX);
    let mut done = false;
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    while !done {
        let event = tokio::time::timeout_at(deadline, events.next())
            .await
            .unwrap_or_else(|_| {
                panic!("rollout did not finish in {TIMEOUT:?} ({})", env.log_hint())
            })
            .expect("watch ended");
        match event {
            Seen::Set(ev) => {
                match ev.unwrap() {
                    WatchEvent::Added(rs) | WatchEvent::Modified(rs) => {
                        sets.insert(name(&rs.metadata).to_owned(), rs);
                    }
                    WatchEvent::Deleted(rs) => {
                        sets.remove(name(&rs.metadata));
                    }
                    WatchEvent::Bookmark(_) => continue,
                    WatchEvent::Error(e) => panic!("ReplicaSet watch error: {e:?}"),
                }
                let sum: i32 = sets.values().map(rs_spec).sum();
                max_spec_sum = max_spec_sum.max(sum);
                if sum > 5 {
                    let state: Vec<_> = sets
                        .values()
                        .map(|rs| (name(&rs.metadata).to_owned(), rs_spec(rs)))
                        .collect();
                    violations.push(format!("ReplicaSet specs sum to {sum} > 5: {state:?}"));
                }
            }
            Seen::Deployment(ev) => match ev.unwrap() {
                WatchEvent::Added(d) | WatchEvent::Modified(d) => {
                    let s = d.status.clone().unwrap_or_default();
                    let available = s.available_replicas.unwrap_or(0);
                    min_available = min_available.min(available);
                    if available < 3 {
                        violations.push(format!("published availableReplicas {available} < 3"));
                    }
                    done = d.metadata.generation == Some(2)
                        && complete(&d)
                        && sets.get(&old_name).is_some_and(|rs| rs_spec(rs) == 0);
                }
                WatchEvent::Deleted(_) => panic!("the deployment was deleted"),
                WatchEvent::Bookmark(_) => {}
                WatchEvent::Error(e) => panic!("Deployment watch error: {e:?}"),
            },
        }
    }
    assert!(
        violations.is_empty(),
        "{violations:#?} ({})",
        env.log_hint()
    );
    eprintln!(
        "rolling update: max spec sum {max_spec_sum}, min published available {min_available}"
    );

    let d = env.wait_complete("web").await;
    assert_eq!(annotation(&d.metadata, REVISION), Some("2"));
    let sets = env.owned_sets(&d).await;
    assert_eq!(sets.len(), 2);
    assert_eq!(name(&sets[0].metadata), old_name);
    assert_eq!(rs_spec(&sets[0]), 0);
    assert_eq!(revision(&sets[1]), Some(2));
    assert_eq!(rs_spec(&sets[1]), 4);
    assert_eq!(rs_image(&sets[1]), Some(IMAGE_2));
    env.ns.delete().await;
}

/// 3. Recreate: old and new pods never exist at the same time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recreate_never_runs_old_and_new_pods_together() {
    let env = env!("deploy-recreate");
    let mut d = deployment("web", 3);
    d.spec.get_mut().strategy = Some(DeploymentStrategy {
        type_: Some("Recreate".into()),
        rolling_update: None,
    });
    env.create(&d).await;
    let before = env.wait_complete("web").await;
    let old_hash = label(&env.owned_sets(&before).await[0].metadata, HASH_LABEL)
        .unwrap()
        .to_owned();

    let list = env.pods.list(&ListParams::default()).await.unwrap();
    let mut pods: HashMap<String, Pod> = list
        .items
        .into_iter()
        .map(|p| (name(&p.metadata).to_owned(), p))
        .collect();
    let mut watch = env
        .pods
        .watch(&WatchParams {
            resource_version: list.metadata.resource_version.clone(),
            ..Default::default()
        })
        .await
        .unwrap()
        .boxed();
    env.set_image("web", IMAGE_2).await;

    let is_live = |p: &Pod| {
        !matches!(
            p.status.as_ref().and_then(|s| s.phase.as_deref()),
            Some("Succeeded" | "Failed")
        )
    };
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    loop {
        let ev = tokio::time::timeout_at(deadline, watch.next())
            .await
            .unwrap_or_else(|_| panic!("recreate did not finish ({})", env.log_hint()))
            .expect("watch ended")
            .unwrap();
        match ev {
            WatchEvent::Added(p) | WatchEvent::Modified(p) => {
                pods.insert(name(&p.metadata).to_owned(), p);
            }
            WatchEvent::Deleted(p) => {
                pods.remove(name(&p.metadata));
            }
            WatchEvent::Bookmark(_) => continue,
            WatchEvent::Error(e) => panic!("pod watch error: {e:?}"),
        }
        let live: Vec<&Pod> = pods.values().filter(|p| is_live(p)).collect();
        let old = live
            .iter()
            .filter(|p| label(&p.metadata, HASH_LABEL) == Some(old_hash.as_str()))
            .count();
        let new = live.len() - old;
        assert!(
            old == 0 || new == 0,
            "{old} old and {new} new pods at once ({})",
            env.log_hint()
        );
        if old == 0 && new == 3 {
            break;
        }
    }
    let d = env.wait_complete("web").await;
    assert_eq!(annotation(&d.metadata, REVISION), Some("2"));
    env.ns.delete().await;
}

/// 4. Proportional scaling mid-rollout (upstream's "deployment should support proportional
///    scaling"): 10 replicas, maxSurge 3, maxUnavailable 2, a new template whose pods never
///    become available (an image that cannot be pulled, as upstream's `webserver:404`) → old 8 /
///    new 5; scaling to 30 → old 20 / new 13, annotations updated.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scaling_mid_rollout_is_proportional() {
    let env = env!("deploy-proportional");
    let mut d = deployment("web", 10);
    rolling(&mut d, 3, 2);
    env.create(&d).await;
    let d = env.wait_complete("web").await;
    let old_name = name(&env.owned_sets(&d).await[0].metadata).to_owned();
    env.set_image("web", BROKEN_IMAGE).await;

    let sizes = |sets: &[ReplicaSet]| -> Vec<(String, i32, i32)> {
        sets.iter()
            .map(|rs| (name(&rs.metadata).to_owned(), rs_spec(rs), rs_available(rs)))
            .collect()
    };
    let what = format!("old 8 (available) / new 5 ({})", env.log_hint());
    let new_name = eventually(&what, TIMEOUT, || async {
        let sets = env.owned_sets(&d).await;
        let state = sizes(&sets);
        match state.as_slice() {
            [(o, 8, 8), (n, 5, 0)] if *o == old_name => Ok(n.clone()),
            _ => Err(state),
        }
    })
    .await;

    env.patch("web", Patch::Merge(json!({"spec": {"replicas": 30}})))
        .await;
    let what = format!(
        "old 20 / new 13 with annotations 30/33 ({})",
        env.log_hint()
    );
    eventually(&what, TIMEOUT, || async {
        let sets = env.owned_sets(&d).await;
        let state: Vec<_> = sets
            .iter()
            .map(|rs| {
                (
                    name(&rs.metadata).to_owned(),
                    rs_spec(rs),
                    annotation(&rs.metadata, DESIRED_REPLICAS).map(str::to_owned),
                    annotation(&rs.metadata, MAX_REPLICAS).map(str::to_owned),
                )
            })
            .collect();
        let annotated = |s: &(String, i32, Option<String>, Option<String>)| {
            s.2.as_deref() == Some("30") && s.3.as_deref() == Some("33")
        };
        match state.as_slice() {
            [o, n]
                if o.0 == old_name
                    && o.1 == 20
                    && n.0 == new_name
                    && n.1 == 13
                    && annotated(o)
                    && annotated(n) =>
            {
                Ok(())
            }
            _ => Err(state),
        }
    })
    .await;
    env.ns.delete().await;
}

/// 5. Pause → template change → no new ReplicaSet → resume → rollout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_deployment_does_not_roll_out_until_resumed() {
    let env = env!("deploy-pause");
    env.create(&deployment("web", 2)).await;
    let d = env.wait_complete("web").await;
    env.patch("web", Patch::Merge(json!({"spec": {"paused": true}})))
        .await;
    let what = format!("Progressing reason DeploymentPaused ({})", env.log_hint());
    eventually(&what, TIMEOUT, || async {
        let d = env.get("web").await;
        let c = cond(&d, "Progressing");
        if observed(&d) && c.as_ref().is_some_and(|c| c.1 == "DeploymentPaused") {
            Ok(())
        } else {
            Err(c)
        }
    })
    .await;
    env.set_image("web", IMAGE_2).await;
    let paused = env.wait_observed("web").await;
    let sets = env.all_sets().await;
    assert_eq!(
        sets.len(),
        1,
        "no new ReplicaSet while paused ({})",
        env.log_hint()
    );
    assert_eq!(rs_image(&sets[0]), Some(IMAGE_1));
    assert_eq!(annotation(&paused.metadata, REVISION), Some("1"));

    env.patch("web", Patch::Merge(json!({"spec": {"paused": false}})))
        .await;
    let d2 = env.wait_complete("web").await;
    assert_eq!(annotation(&d2.metadata, REVISION), Some("2"));
    let sets = env.owned_sets(&d).await;
    assert_eq!(sets.len(), 2);
    assert_eq!(rs_spec(&sets[0]), 0);
    assert_eq!(rs_image(&sets[1]), Some(IMAGE_2));
    assert_eq!(
        cond(&d2, "Progressing"),
        Some(("True".into(), "NewReplicaSetAvailable".into()))
    );
    env.ns.delete().await;
}

/// 6. Rollback as `kubectl rollout undo` does it: the Deployment's template is replaced by the
///    previous ReplicaSet's (minus pod-template-hash), and that ReplicaSet is reused with a new
///    revision, remembering the old one in revision-history.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollback_reuses_the_old_replica_set() {
    let env = env!("deploy-rollback");
    env.create(&deployment("web", 2)).await;
    let d = env.wait_complete("web").await;
    let first = env.owned_sets(&d).await.remove(0);
    env.set_image("web", IMAGE_2).await;
    let d = env.wait_complete("web").await;
    assert_eq!(annotation(&d.metadata, REVISION), Some("2"));

    // kubectl's DeploymentRollbacker: template of the target revision without the hash label.
    let mut template = first.spec.get().unwrap().template.clone().unwrap();
    if let Some(l) = template.metadata.as_mut().and_then(|m| m.labels.as_mut()) {
        l.remove(HASH_LABEL);
    }
    env.patch(
        "web",
        Patch::Json(json!([{"op": "replace", "path": "/spec/template", "value": template}])),
    )
    .await;
    let d = env.wait_complete("web").await;
    let sets = env.owned_sets(&d).await;
    assert_eq!(
        annotation(&d.metadata, REVISION),
        Some("3"),
        "({})",
        env.log_hint()
    );
    assert_eq!(sets.len(), 2, "no new ReplicaSet: {sets:#?}");
    let reused = &sets[1];
    assert_eq!(reused.metadata.uid, first.metadata.uid);
    assert_eq!(annotation(&reused.metadata, REVISION), Some("3"));
    assert_eq!(annotation(&reused.metadata, REVISION_HISTORY), Some("1"));
    assert_eq!(rs_spec(reused), 2);
    assert_eq!(revision(&sets[0]), Some(2));
    assert_eq!(rs_spec(&sets[0]), 0);
    env.ns.delete().await;
}

/// 7. revisionHistoryLimit 1: after three more rollouts only the new and one old ReplicaSet
///    remain.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revision_history_limit_cleans_up_old_replica_sets() {
    let env = env!("deploy-history");
    let mut d = deployment("web", 1);
    d.spec.get_mut().revision_history_limit = Some(1);
    env.create(&d).await;
    let d = env.wait_complete("web").await;
    for image in [IMAGE_2, IMAGE_3, IMAGE_4] {
        env.set_image("web", image).await;
        env.wait_complete("web").await;
    }
    let what = format!("revisions 3 and 4 only ({})", env.log_hint());
    eventually(&what, TIMEOUT, || async {
        let revisions: Vec<_> = env.all_sets().await.iter().map(revision).collect();
        if revisions == [Some(3), Some(4)] || revisions == [Some(4), Some(3)] {
            Ok(())
        } else {
            Err(revisions)
        }
    })
    .await;
    let sets = env.owned_sets(&d).await;
    assert_eq!(rs_image(&sets[1]), Some(IMAGE_4));
    assert_eq!(rs_spec(&sets[0]), 0);
    env.ns.delete().await;
}

/// 8. An orphan ReplicaSet matching the selector is adopted; once its labels stop matching it
///    is released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn matching_orphan_is_adopted_and_released_when_labels_change() {
    let env = env!("deploy-adopt");
    env.create(&deployment("web", 2)).await;
    let d = env.wait_complete("web").await;
    let own = [("app", "web"), ("orphan", "yes")];
    let mut t = template("web", IMAGE_2);
    t.metadata.as_mut().unwrap().labels = Some(labels(&own));
    let orphan = ReplicaSet {
        metadata: ObjectMeta {
            name: Some("orphan".into()),
            labels: Some(labels(&own)),
            ..Default::default()
        },
        spec: ReplicaSetSpec {
            replicas: Some(0),
            selector: LabelSelector {
                match_labels: Some(labels(&own)),
                ..Default::default()
            },
            template: Some(t),
            ..Default::default()
        },
        ..Default::default()
    };
    env.sets
        .create(&PostParams::default(), &orphan)
        .await
        .unwrap();
    let what = format!("the orphan to be adopted ({})", env.log_hint());
    eventually(&what, TIMEOUT, || async {
        let rs = env.sets.get("orphan").await.unwrap();
        if owned_by(&rs, &d) {
            Ok(())
        } else {
            Err(rs.metadata.owner_references)
        }
    })
    .await;

    env.sets
        .patch(
            "orphan",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"app": "elsewhere"}}})),
        )
        .await
        .unwrap();
    let what = format!("the orphan to be released ({})", env.log_hint());
    eventually(&what, TIMEOUT, || async {
        let rs = env.sets.get("orphan").await.unwrap();
        if controller_uid(&rs).is_none() {
            Ok(())
        } else {
            Err(rs.metadata.owner_references)
        }
    })
    .await;
    let d = env.wait_complete("web").await;
    assert_eq!(env.owned_sets(&d).await.len(), 1);
    env.ns.delete().await;
}

/// 9. Deleting the Deployment cascades through the garbage collector to ReplicaSets and pods.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deletion_cascades_through_the_garbage_collector() {
    let env = env!("deploy-gc");
    env.create(&deployment("web", 3)).await;
    env.wait_complete("web").await;
    assert_eq!(env.all_sets().await.len(), 1);
    assert_eq!(
        env.pods
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .len(),
        3
    );
    env.deployments
        .delete(
            "web",
            &DeleteParams {
                propagation_policy: Some(PropagationPolicy::Background),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    eventually("ReplicaSets and pods to be collected", TIMEOUT, || async {
        let sets = env.all_sets().await.len();
        let pods = env
            .pods
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .len();
        let gone = env.deployments.get_opt("web").await.unwrap().is_none();
        if gone && sets == 0 && pods == 0 {
            Ok(())
        } else {
            Err((gone, sets, pods))
        }
    })
    .await;
    env.ns.delete().await;
}

/// 10. A ReplicaSet as upstream's controller would have left it (`<name>-<hash>` with the
///     pod-template-hash label, same template; upstream's hash differs from ours) is adopted
///     and reused, not duplicated.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_named_replica_set_is_adopted_and_reused() {
    let env = env!("deploy-upstream");
    // A hash in upstream's alphabet, as `rand.SafeEncodeString` produces.
    let hash = "5d8f9b6c4z";
    let sel = [("app", "web"), (HASH_LABEL, hash)];
    let mut t = template("web", IMAGE_1);
    t.metadata.as_mut().unwrap().labels = Some(labels(&sel));
    let upstream = ReplicaSet {
        metadata: ObjectMeta {
            name: Some(format!("web-{hash}")),
            labels: Some(labels(&sel)),
            ..Default::default()
        },
        spec: ReplicaSetSpec {
            replicas: Some(1),
            selector: LabelSelector {
                match_labels: Some(labels(&sel)),
                ..Default::default()
            },
            template: Some(t),
            ..Default::default()
        },
        ..Default::default()
    };
    let upstream = env
        .sets
        .create(&PostParams::default(), &upstream)
        .await
        .unwrap();
    env.create(&deployment("web", 3)).await;
    let d = env.wait_complete("web").await;
    let sets = env.all_sets().await;
    assert_eq!(
        sets.len(),
        1,
        "reused, not duplicated: {sets:#?} ({})",
        env.log_hint()
    );
    assert_eq!(sets[0].metadata.uid, upstream.metadata.uid);
    assert!(owned_by(&sets[0], &d));
    assert_eq!(rs_spec(&sets[0]), 3);
    assert_eq!(annotation(&sets[0].metadata, REVISION), Some("1"));
    assert_eq!(annotation(&d.metadata, REVISION), Some("1"));
    env.ns.delete().await;
}

/// 11. progressDeadlineSeconds exceeded while pods cannot become available (their image cannot be
///     pulled).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_deadline_exceeded_is_reported() {
    let env = env!("deploy-deadline");
    let mut d = deployment("web", 1);
    let s = d.spec.get_mut();
    s.progress_deadline_seconds = Some(10);
    s.template.spec.as_mut().unwrap().containers[0].image = Some(BROKEN_IMAGE.into());
    env.create(&d).await;
    let what = format!(
        "Progressing=False ProgressDeadlineExceeded ({})",
        env.log_hint()
    );
    let d = eventually(&what, Duration::from_secs(60), || async {
        let d = env.get("web").await;
        let c = cond(&d, "Progressing");
        if c == Some(("False".into(), "ProgressDeadlineExceeded".into())) {
            Ok(d)
        } else {
            Err(c)
        }
    })
    .await;
    assert_eq!(
        cond(&d, "Available"),
        Some(("False".into(), "MinimumReplicasUnavailable".into()))
    );
    assert_eq!(
        d.status.as_ref().unwrap().unavailable_replicas,
        Some(1),
        "({})",
        env.log_hint()
    );
    env.ns.delete().await;
}

/// 12. Two Deployments with the same selector keep their own ReplicaSets; scaling one does not
///     touch the other's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlapping_deployments_keep_their_own_replica_sets() {
    let env = env!("deploy-overlap");
    let mut a = deployment("a", 2);
    let mut b = deployment("b", 2);
    for (d, image) in [(&mut a, IMAGE_1), (&mut b, IMAGE_2)] {
        let s = d.spec.get_mut();
        s.selector.match_labels = Some(labels(&[("app", "shared")]));
        s.template = template("shared", image);
    }
    env.create(&a).await;
    env.create(&b).await;
    let a = env.wait_complete("a").await;
    let b = env.wait_complete("b").await;
    let (a_sets, b_sets) = (env.owned_sets(&a).await, env.owned_sets(&b).await);
    assert_eq!((a_sets.len(), b_sets.len()), (1, 1), "({})", env.log_hint());
    assert_eq!(env.all_sets().await.len(), 2);
    assert_eq!(rs_image(&a_sets[0]), Some(IMAGE_1));
    assert_eq!(rs_image(&b_sets[0]), Some(IMAGE_2));

    env.patch("a", Patch::Merge(json!({"spec": {"replicas": 4}})))
        .await;
    let a = env.wait_complete("a").await;
    let a_after = env.owned_sets(&a).await;
    assert_eq!(a_after.len(), 1);
    assert_eq!(a_after[0].metadata.uid, a_sets[0].metadata.uid);
    assert_eq!(rs_spec(&a_after[0]), 4);
    let b_after = env.owned_sets(&b).await;
    assert_eq!(b_after.len(), 1);
    assert_eq!(b_after[0].metadata.uid, b_sets[0].metadata.uid);
    assert_eq!(rs_spec(&b_after[0]), 2);
    assert!(complete(&env.get("b").await));
    env.ns.delete().await;
}

/// The deprecated rollback request annotation (extensions/v1beta1's `spec.rollbackTo`).
const ROLLBACK_TO: &str = "deprecated.deployment.rollback.to";
/// The annotation `kubectl rollout restart` sets on the pod template.
const RESTARTED_AT: &str = "kubectl.kubernetes.io/restartedAt";
/// kubectl's `--record` annotation, copied between Deployments and their ReplicaSets.
const CHANGE_CAUSE: &str = "kubernetes.io/change-cause";

/// One event about an object: `(type, reason, message)`.
type EventSeen = (String, String, String);

impl Env {
    /// Events about Deployment `name`: the Event objects in the namespace and the events our
    /// controller logged (its recorder may log them instead of writing them to the API).
    async fn events(&self, name: &str) -> Vec<EventSeen> {
        let api: Api<k8s_openapi::api::core::v1::Event> =
            Api::namespaced(self.cluster.admin(), &self.ns.name);
        let mut seen: Vec<EventSeen> = api
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|e| {
                e.involved_object.kind.as_deref() == Some("Deployment")
                    && e.involved_object.name.as_deref() == Some(name)
            })
            .map(|e| {
                (
                    e.type_.unwrap_or_default(),
                    e.reason.unwrap_or_default(),
                    e.message.unwrap_or_default(),
                )
            })
            .collect();
        if let Some(log) = &self.cluster.deployment_controller_log {
            let text = std::fs::read(log).unwrap_or_default();
            seen.extend(logged_events(
                &strip_ansi(&String::from_utf8_lossy(&text)),
                &self.ns.name,
                name,
            ));
        }
        seen
    }

    /// Waits until an event `(type, reason, message)` about Deployment `name` is seen.
    async fn wait_event(&self, name: &str, type_: &str, reason: &str, message: &str) {
        let what = format!(
            "event {type_} {reason} {message:?} on {name} ({})",
            self.log_hint()
        );
        eventually(&what, TIMEOUT, || async {
            let events = self.events(name).await;
            if events
                .iter()
                .any(|(t, r, m)| t == type_ && r == reason && m == message)
            {
                Ok(())
            } else {
                Err(events)
            }
        })
        .await
    }

    /// Sets the rollback annotation on `name` and waits until the controller has acted on it
    /// (the annotation is gone again); returns the Deployment as it was then.
    async fn request_rollback(&self, name: &str, revision: &str) -> Deployment {
        let requested = self
            .patch(
                name,
                Patch::Merge(json!({"metadata": {"annotations": {ROLLBACK_TO: revision}}})),
            )
            .await;
        assert_eq!(annotation(&requested.metadata, ROLLBACK_TO), Some(revision));
        let what = format!(
            "the {ROLLBACK_TO}={revision} annotation to be cleared ({})",
            self.log_hint()
        );
        eventually(&what, TIMEOUT, || async {
            let d = self.get(name).await;
            if annotation(&d.metadata, ROLLBACK_TO).is_none() {
                Ok(d)
            } else {
                Err(d.metadata.annotations)
            }
        })
        .await
    }

    /// Runs `kubectl -n <namespace> <args>` with the suite's admin kubeconfig; its stdout, or
    /// a panic with its stderr.
    async fn kubectl(&self, kubectl: &std::path::Path, args: &[&str]) -> String {
        let out = tokio::process::Command::new(kubectl)
            .arg("--kubeconfig")
            .arg(&self.cluster.kubeconfig)
            .args(["--namespace", &self.ns.name])
            .args(args)
            .kill_on_drop(true)
            .output()
            .await
            .unwrap_or_else(|e| panic!("running {}: {e}", kubectl.display()));
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "kubectl {args:?} failed ({}): stdout {stdout:?}, stderr {:?} ({})",
            out.status,
            String::from_utf8_lossy(&out.stderr),
            self.log_hint()
        );
        stdout
    }
}

/// `text` without ANSI escape sequences (`ESC [ ... <letter>`), as terminal-coloured logs
/// carry them.
fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Events in our controller's log about Deployment `namespace/name`: lines of the form
/// `<time> <LEVEL> <target>: event: <message> namespace="…" name="…" kind="Deployment"
/// reason="…"` (INFO for Normal, WARN for Warning).
fn logged_events(log: &str, namespace: &str, name: &str) -> Vec<EventSeen> {
    let ns_field = format!(" namespace={namespace:?} ");
    let name_field = format!(" name={name:?} ");
    log.lines()
        .filter_map(|line| {
            let (head, rest) = line.split_once(": event: ")?;
            let (message, fields) = rest.split_once(&ns_field)?;
            let fields = format!(" {fields} ");
            if !fields.contains(&name_field) || !fields.contains(" kind=\"Deployment\" ") {
                return None;
            }
            let reason = fields.split_once(" reason=\"")?.1.split_once('"')?.0;
            let type_ = if head.contains(" WARN ") {
                "Warning"
            } else {
                "Normal"
            };
            Some((type_.to_owned(), reason.to_owned(), message.to_owned()))
        })
        .collect()
}

fn template_image(d: &Deployment) -> Option<&str> {
    spec(d).template.spec.as_ref()?.containers[0]
        .image
        .as_deref()
}

fn template_annotation<'a>(rs: &'a ReplicaSet, key: &str) -> Option<&'a str> {
    annotation(rs.spec.get()?.template.as_ref()?.metadata.as_ref()?, key)
}

/// `(name, revision, spec replicas)` of each ReplicaSet, for messages and comparisons.
fn revisions(sets: &[ReplicaSet]) -> Vec<(String, Option<i64>, i32)> {
    sets.iter()
        .map(|rs| (name(&rs.metadata).to_owned(), revision(rs), rs_spec(rs)))
        .collect()
}

/// `(uid, revision, spec replicas)` of each ReplicaSet.
fn uid_revision_size(sets: &[ReplicaSet]) -> Vec<(Option<String>, Option<i64>, i32)> {
    sets.iter()
        .map(|rs| (rs.metadata.uid.clone(), revision(rs), rs_spec(rs)))
        .collect()
}

/// 13. Rollback through the deprecated `deprecated.deployment.rollback.to` annotation (upstream's
///     rollback.go): to a given revision, to revision 0 (the previous one), to the current
///     template and to an unknown revision. The target ReplicaSet's template (without
///     pod-template-hash) and annotations go back into the Deployment, the annotation is
///     removed in the same write, and the old ReplicaSet is reused under the next revision.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollback_to_annotation_restores_old_revisions() {
    let env = env!("deploy-rollback-to");
    let mut d = deployment("web", 2);
    d.metadata.annotations = Some(labels(&[(CHANGE_CAUSE, "create")]));
    env.create(&d).await;
    let d = env.wait_complete("web").await;
    for (image, cause) in [(IMAGE_2, "image 2"), (IMAGE_3, "image 3")] {
        env.patch(
            "web",
            Patch::Strategic(json!({
                "metadata": {"annotations": {CHANGE_CAUSE: cause}},
                "spec": {"template": {"spec": {"containers": [{"name": "main", "image": image}]}}}
            })),
        )
        .await;
        env.wait_complete("web").await;
    }
    let sets = env.owned_sets(&d).await;
    assert_eq!(
        sets.iter().map(revision).collect::<Vec<_>>(),
        [Some(1), Some(2), Some(3)],
        "({})",
        env.log_hint()
    );
    let uids: Vec<_> = sets.iter().map(|rs| rs.metadata.uid.clone()).collect();
    assert_eq!(annotation(&sets[0].metadata, CHANGE_CAUSE), Some("create"));

    // Revision 1: the first template and its change-cause come back; the first ReplicaSet
    // becomes revision 4.
    let rolled = env.request_rollback("web", "1").await;
    assert_eq!(
        template_image(&rolled),
        Some(IMAGE_1),
        "({})",
        env.log_hint()
    );
    assert_eq!(
        label(
            spec(&rolled).template.metadata.as_ref().unwrap(),
            HASH_LABEL
        ),
        None,
        "pod-template-hash is not copied into the Deployment"
    );
    assert_eq!(annotation(&rolled.metadata, CHANGE_CAUSE), Some("create"));
    let d = env.wait_complete("web").await;
    assert_eq!(annotation(&d.metadata, REVISION), Some("4"));
    let sets = env.owned_sets(&d).await;
    assert_eq!(
        uid_revision_size(&sets),
        [
            (uids[1].clone(), Some(2), 0),
            (uids[2].clone(), Some(3), 0),
            (uids[0].clone(), Some(4), 2),
        ],
        "the first ReplicaSet is reused as revision 4 ({})",
        env.log_hint()
    );
    assert_eq!(annotation(&sets[2].metadata, REVISION_HISTORY), Some("1"));
    assert_eq!(annotation(&sets[2].metadata, CHANGE_CAUSE), Some("create"));
    env.wait_event(
        "web",
        "Normal",
        "DeploymentRollback",
        "Rolled back deployment \"web\" to revision 1",
    )
    .await;

    // Revision 0: the previous revision, 3 (the highest but one of 2, 3 and 4), becomes 5.
    let rolled = env.request_rollback("web", "0").await;
    assert_eq!(
        template_image(&rolled),
        Some(IMAGE_3),
        "({})",
        env.log_hint()
    );
    assert_eq!(annotation(&rolled.metadata, CHANGE_CAUSE), Some("image 3"));
    let d = env.wait_complete("web").await;
    assert_eq!(annotation(&d.metadata, REVISION), Some("5"));
    let sets = env.owned_sets(&d).await;
    assert_eq!(
        uid_revision_size(&sets),
        [
            (uids[1].clone(), Some(2), 0),
            (uids[0].clone(), Some(4), 0),
            (uids[2].clone(), Some(5), 2),
        ],
        "({})",
        env.log_hint()
    );
    assert_eq!(annotation(&sets[2].metadata, REVISION_HISTORY), Some("3"));
    env.wait_event(
        "web",
        "Normal",
        "DeploymentRollback",
        "Rolled back deployment \"web\" to revision 3",
    )
    .await;

    // The current revision: nothing to roll back to; the annotation is still removed.
    let rolled = env.request_rollback("web", "5").await;
    assert_eq!(template_image(&rolled), Some(IMAGE_3));
    env.wait_event(
        "web",
        "Warning",
        "DeploymentRollbackTemplateUnchanged",
        "The rollback revision contains the same template as current deployment \"web\"",
    )
    .await;

    // An unknown revision: the annotation is removed, nothing else changes.
    let rolled = env.request_rollback("web", "42").await;
    assert_eq!(template_image(&rolled), Some(IMAGE_3));
    assert_eq!(annotation(&rolled.metadata, CHANGE_CAUSE), Some("image 3"));
    env.wait_event(
        "web",
        "Warning",
        "DeploymentRollbackRevisionNotFound",
        "Unable to find the revision to rollback to.",
    )
    .await;
    let d = env.wait_complete("web").await;
    assert_eq!(annotation(&d.metadata, REVISION), Some("5"));
    let after = env.owned_sets(&d).await;
    assert_eq!(
        uid_revision_size(&after),
        uid_revision_size(&sets),
        "no ReplicaSet changes revision or size ({})",
        env.log_hint()
    );
    assert_eq!(env.all_sets().await.len(), 3, "no ReplicaSet is created");
    env.ns.delete().await;
}

/// 14. Restart as `kubectl rollout restart` does it: a `kubectl.kubernetes.io/restartedAt`
///     pod-template annotation with the time in RFC 3339 → a new ReplicaSet under the next
///     revision carrying the annotation, the old one scaled to 0, every replica available.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_annotation_rolls_out_a_new_replica_set() {
    let env = env!("deploy-restart");
    let mut d = deployment("web", 3);
    rolling(&mut d, 1, 0);
    env.create(&d).await;
    let d = env.wait_complete("web").await;
    let old = env.owned_sets(&d).await.remove(0);
    let old_hash = label(&old.metadata, HASH_LABEL).unwrap().to_owned();

    // kubectl formats the time with Go's time.RFC3339: whole seconds.
    let at = k8s_openapi::jiff::Timestamp::now()
        .round(k8s_openapi::jiff::Unit::Second)
        .unwrap()
        .to_string();
    env.patch(
        "web",
        Patch::Strategic(json!({"spec": {"template": {"metadata": {
            "annotations": {RESTARTED_AT: at}
        }}}})),
    )
    .await;
    let d = env.wait_complete("web").await;
    assert_eq!(annotation(&d.metadata, REVISION), Some("2"));
    let s = d.status.as_ref().unwrap();
    assert_eq!(s.available_replicas, Some(3));
    assert_eq!(s.unavailable_replicas.unwrap_or(0), 0);
    let what = format!(
        "the old ReplicaSet at 0, the new at 3 available ({})",
        env.log_hint()
    );
    let sets = eventually(&what, TIMEOUT, || async {
        let sets = env.owned_sets(&d).await;
        match sets.as_slice() {
            [o, n]
                if o.metadata.uid == old.metadata.uid
                    && rs_spec(o) == 0
                    && rs_spec(n) == 3
                    && rs_available(n) == 3 =>
            {
                Ok(sets)
            }
            _ => Err(revisions(&sets)),
        }
    })
    .await;
    let new = &sets[1];
    assert_eq!(revision(new), Some(2));
    assert_eq!(template_annotation(new, RESTARTED_AT), Some(at.as_str()));
    assert_eq!(template_annotation(&sets[0], RESTARTED_AT), None);
    assert_eq!(rs_image(new), Some(IMAGE_1), "only the annotation changed");
    let new_hash = label(&new.metadata, HASH_LABEL).unwrap().to_owned();
    assert_ne!(new_hash, old_hash);
    assert_eq!(name(&new.metadata), format!("web-{new_hash}"));
    assert_eq!(
        cond(&d, "Progressing"),
        Some(("True".into(), "NewReplicaSetAvailable".into()))
    );
    env.ns.delete().await;
}

/// 15. The same restart through kubectl itself: `kubectl rollout restart`, then
///     `kubectl rollout status` until it reports success (it reads our status and conditions),
///     and `kubectl rollout history` listing both revisions (it reads our ReplicaSets'
///     revision annotations and controller references). Skipped when there is no kubectl.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_rollout_restart_status_and_history() {
    let env = env!("deploy-kubectl");
    let Some(kubectl) = env.cluster.kubectl_binary() else {
        eprintln!(
            "e2e: no kubectl found (set KCTRL_KUBECTL or put kubectl on PATH); skipping \
             kubectl rollout restart/status/history"
        );
        env.ns.delete().await;
        return;
    };
    env.create(&deployment("web", 2)).await;
    let d = env.wait_complete("web").await;
    let old = env.owned_sets(&d).await.remove(0);

    let out = env
        .kubectl(&kubectl, &["rollout", "restart", "deployment/web"])
        .await;
    assert_eq!(out.trim(), "deployment.apps/web restarted");
    let out = env
        .kubectl(
            &kubectl,
            &["rollout", "status", "deployment/web", "--timeout=90s"],
        )
        .await;
    assert_eq!(
        out.lines().last(),
        Some("deployment \"web\" successfully rolled out"),
        "kubectl rollout status printed {out:?}"
    );

    let d = env.wait_complete("web").await;
    assert_eq!(annotation(&d.metadata, REVISION), Some("2"));
    let sets = env.owned_sets(&d).await;
    assert_eq!(sets.len(), 2, "{:?} ({})", revisions(&sets), env.log_hint());
    assert_eq!(sets[0].metadata.uid, old.metadata.uid);
    assert_eq!(rs_spec(&sets[0]), 0);
    let new = &sets[1];
    assert_eq!(revision(new), Some(2));
    let at = template_annotation(new, RESTARTED_AT)
        .expect("kubectl set the restartedAt annotation")
        .to_owned();
    at.parse::<k8s_openapi::jiff::Timestamp>()
        .unwrap_or_else(|e| panic!("restartedAt {at:?} is not RFC 3339: {e}"));

    let out = env
        .kubectl(&kubectl, &["rollout", "history", "deployment/web"])
        .await;
    let listed: Vec<&str> = out
        .lines()
        .skip_while(|l| !l.starts_with("REVISION"))
        .skip(1)
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(
        listed,
        ["1", "2"],
        "kubectl rollout history printed {out:?}"
    );

    let out = env
        .kubectl(
            &kubectl,
            &["rollout", "history", "deployment/web", "--revision=2"],
        )
        .await;
    let new_hash = label(&new.metadata, HASH_LABEL).unwrap();
    for want in [
        "deployment.apps/web with revision #2".to_owned(),
        format!("pod-template-hash={new_hash}"),
        format!("{RESTARTED_AT}: {at}"),
    ] {
        assert!(
            out.contains(&want),
            "kubectl rollout history --revision=2 lacks {want:?}: {out:?}"
        );
    }
    env.ns.delete().await;
}

/// The waiting reason of the container of `p` that cannot pull [`BROKEN_IMAGE`], after checking
/// that `p` looks like a pod whose image a kubelet cannot pull: Pending, not ready, Ready and
/// ContainersReady False with reason ContainersNotReady. `Ok(None)` before any status arrived, and
/// while a real kubelet still creates the pod (`ContainerCreating`, before it tries the pull).
fn image_pull_failure(p: &Pod) -> Result<Option<String>, String> {
    let status = p.status.clone().unwrap_or_default();
    let Some(cs) = status.container_statuses.as_deref().and_then(<[_]>::first) else {
        return Ok(None);
    };
    let pod = name(&p.metadata);
    let check = |ok: bool, what: &str| {
        if ok {
            Ok(())
        } else {
            Err(format!("pod {pod}: {what}; status {status:?}"))
        }
    };
    check(status.phase.as_deref() == Some("Pending"), "not Pending")?;
    check(!cs.ready, "container ready")?;
    check(cs.started != Some(true), "container started")?;
    check(cs.image == BROKEN_IMAGE, "status of another image")?;
    for type_ in ["Ready", "ContainersReady"] {
        let c = status
            .conditions
            .iter()
            .flatten()
            .find(|c| c.type_ == type_);
        check(
            c.is_some_and(|c| {
                c.status == "False" && c.reason.as_deref() == Some("ContainersNotReady")
            }),
            &format!("{type_} is not False/ContainersNotReady"),
        )?;
    }
    let waiting = cs.state.as_ref().and_then(|s| s.waiting.as_ref());
    let reason = waiting.and_then(|w| w.reason.clone()).unwrap_or_default();
    if reason == "ContainerCreating" {
        // A real kubelet (kind) first creates the pod's sandbox; the pull comes after.
        return Ok(None);
    }
    check(
        reason == "ErrImagePull" || reason == "ImagePullBackOff",
        "container not waiting with ErrImagePull or ImagePullBackOff",
    )?;
    let message = waiting
        .and_then(|w| w.message.as_deref())
        .unwrap_or_default();
    check(
        message.contains(BROKEN_IMAGE),
        "waiting message does not name the image",
    )?;
    Ok(Some(reason))
}

/// 16. Pods of an image that cannot be pulled stay Pending and unready for good, their container
///     waiting with ErrImagePull and ImagePullBackOff in turn (a kubelet's image back-off), so
///     the Deployment never becomes available; a Deployment of a normal image beside it does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_of_an_unpullable_image_stay_pending_with_image_pull_errors() {
    let env = env!("deploy-unpullable");
    let mut broken = deployment("broken", 2);
    let s = broken.spec.get_mut();
    s.template.spec.as_mut().unwrap().containers[0].image = Some(BROKEN_IMAGE.into());
    env.create(&broken).await;
    env.create(&deployment("fine", 1)).await;

    // Watched for longer than the first back-off (10 s), so both reasons show up.
    const WATCHED: Duration = Duration::from_secs(20);
    let started = tokio::time::Instant::now();
    let selector = ListParams {
        label_selector: Some("app=broken".into()),
        ..Default::default()
    };
    let mut reasons: HashMap<String, Vec<String>> = HashMap::new();
    loop {
        let pods = env.pods.list(&selector).await.unwrap().items;
        for p in &pods {
            let reason =
                image_pull_failure(p).unwrap_or_else(|e| panic!("{e} ({})", env.log_hint()));
            if let Some(reason) = reason {
                let seen = reasons.entry(name(&p.metadata).to_owned()).or_default();
                if seen.last() != Some(&reason) {
                    seen.push(reason);
                }
            }
        }
        let alternated = |seen: &Vec<String>| {
            seen.len() >= 3 && seen[0] == "ErrImagePull" && seen[1] == "ImagePullBackOff"
        };
        if started.elapsed() >= WATCHED
            && pods.len() == 2
            && reasons.len() == 2
            && reasons.values().all(alternated)
        {
            break;
        }
        assert!(
            started.elapsed() < TIMEOUT,
            "after {TIMEOUT:?}: pods {} with waiting reasons {reasons:?}, expected two pods each \
             going ErrImagePull → ImagePullBackOff → ErrImagePull ({})",
            pods.len(),
            env.log_hint()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    eprintln!("waiting reasons seen: {reasons:?}");

    let d = env.wait_observed("broken").await;
    let s = d.status.as_ref().unwrap();
    assert_eq!(
        (
            s.replicas,
            s.available_replicas.unwrap_or(0),
            s.unavailable_replicas
        ),
        (Some(2), 0, Some(2)),
        "({})",
        env.log_hint()
    );
    assert_eq!(
        cond(&d, "Available"),
        Some(("False".into(), "MinimumReplicasUnavailable".into()))
    );

    // The same cluster makes a pod of a normal image Running and Ready.
    let fine = env.wait_complete("fine").await;
    assert_eq!(fine.status.as_ref().unwrap().ready_replicas, Some(1));
    let pods = env
        .pods
        .list(&ListParams {
            label_selector: Some("app=fine".into()),
            ..Default::default()
        })
        .await
        .unwrap()
        .items;
    assert_eq!(pods.len(), 1);
    let status = pods[0].status.as_ref().unwrap();
    assert_eq!(status.phase.as_deref(), Some("Running"));
    let ready = status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "Ready")
        .map(|c| c.status.as_str());
    assert_eq!(ready, Some("True"));
    assert!(
        status
            .container_statuses
            .iter()
            .flatten()
            .all(|c| c.ready && c.state.as_ref().is_some_and(|s| s.running.is_some()))
    );
    env.ns.delete().await;
}

/// Whether node `node` is one of the local cluster's KWOK nodes (where [`READY_AFTER`] works).
async fn is_kwok_node(env: &Env, node: &str) -> bool {
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(env.cluster.admin());
    let node = nodes.get(node).await.unwrap();
    annotation(&node.metadata, KWOK_NODE).is_some()
}

/// 17. The readiness delay of the local cluster ([`READY_AFTER`]): the pods run unready for that
///     long after their containers started, then become Ready; the rollout completes only then.
///     Skipped on clusters without KWOK nodes (a kubelet ignores the annotation).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ready_after_annotation_delays_readiness() {
    let env = env!("deploy-ready-after");
    const DELAY: i64 = 8;
    let mut d = deployment("slow", 2);
    let template = &mut d.spec.get_mut().template;
    template.metadata.as_mut().unwrap().annotations =
        Some(labels(&[(READY_AFTER, &format!("{DELAY}s"))]));
    env.create(&d).await;

    let selector = ListParams {
        label_selector: Some("app=slow".into()),
        ..Default::default()
    };
    let what = format!("two running pods of deployment slow ({})", env.log_hint());
    let pods = eventually(&what, TIMEOUT, || async {
        let pods = env.pods.list(&selector).await.unwrap().items;
        let running = pods
            .iter()
            .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
            .count();
        if running == 2 {
            Ok(pods)
        } else {
            Err(pods.len())
        }
    })
    .await;
    let node = pods[0]
        .spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .unwrap_or_default();
    if !is_kwok_node(&env, &node).await {
        eprintln!("e2e: node {node} is not a KWOK node; skipping the readiness-delay test");
        env.ns.delete().await;
        return;
    }
    // Seen as soon as they run (well within the delay): running, but not ready.
    for p in &pods {
        let status = p.status.as_ref().unwrap();
        let cs = &status.container_statuses.as_deref().unwrap_or_default()[0];
        assert!(
            !cs.ready && cs.state.as_ref().is_some_and(|s| s.running.is_some()),
            "{cs:?}"
        );
        let ready = status
            .conditions
            .iter()
            .flatten()
            .find(|c| c.type_ == "Ready")
            .map(|c| (c.status.as_str(), c.reason.as_deref()));
        assert_eq!(ready, Some(("False", Some("ContainersNotReady"))));
    }

    let d = env.wait_complete("slow").await;
    assert_eq!(d.status.as_ref().unwrap().ready_replicas, Some(2));
    for p in env.pods.list(&selector).await.unwrap().items {
        let status = p.status.unwrap_or_default();
        let cs = &status.container_statuses.unwrap_or_default()[0];
        assert!(cs.ready, "{cs:?}");
        let started = cs
            .state
            .as_ref()
            .and_then(|s| s.running.as_ref())
            .and_then(|r| r.started_at.as_ref())
            .expect("running since")
            .0;
        let ready_since = status
            .conditions
            .unwrap_or_default()
            .into_iter()
            .find(|c| c.type_ == "Ready" && c.status == "True")
            .and_then(|c| c.last_transition_time)
            .expect("Ready=True since")
            .0;
        let waited = ready_since.as_second() - started.as_second();
        // Whole seconds on both sides; KWOK rounds the deadline up.
        assert!(
            (DELAY..=DELAY + 3).contains(&waited),
            "pod {} became Ready {waited}s after its container started, expected about {DELAY}s",
            name(&p.metadata)
        );
    }
    env.ns.delete().await;
}

//! Our deployment-controller binary running both of its controllers
//! (`--controllers=*,replicaset-controller`) as its own identity with exactly `deploy/`'s RBAC,
//! on a plane whose kube-controller-manager runs neither a Deployment nor a ReplicaSet
//! controller (`kctrl_e2e::cluster_without_replicaset_controller`): a Deployment rolls out end
//! to end, its ReplicaSet's Pods created by our ReplicaSet controller (the plane's KWOK nodes
//! make them Running and Ready), then a new template rolls out, the old Pods deleted by ours.
//!
//! `cargo xtask e2e` runs it on a plane of its own once its cluster is torn down; by hand:
//! `KCTRL_E2E_TESTENV=1 cargo test -p kctrl-e2e --test both_controllers`.

use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{
    Deployment, DeploymentSpec, DeploymentStrategy, ReplicaSet, RollingUpdateDeployment,
};
use k8s_openapi::api::core::v1::{Container, Event, Pod, PodSpec, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kctrl_client::{Api, ListParams, Patch, PatchParams, PostParams};
use kctrl_controller_ref::get_controller_of;
use kctrl_e2e::process::{ControllerProcess, sample};
use kctrl_e2e::{TestNamespace, eventually, labels};
use serde_json::json;

const IMAGE_1: &str = "registry.k8s.io/pause:3.10";
const IMAGE_2: &str = "registry.k8s.io/pause:3.9";
/// Deadline of each step: a few Pods on KWOK nodes take seconds.
const TIMEOUT: Duration = Duration::from_secs(90);
/// The files of `deploy/` that grant the controller's identity its rights (all but the
/// controller's own Deployment).
const RBAC_FILES: &[&str] = &[
    "00-serviceaccount.yaml",
    "01-clusterrole.yaml",
    "02-clusterrolebinding.yaml",
    "03-role-leader-election.yaml",
    "04-rolebinding-leader-election.yaml",
    "06-clusterrolebinding-auth-delegator.yaml",
    "07-rolebinding-authentication-reader.yaml",
];

fn deployment(name: &str, replicas: i32) -> Deployment {
    let app = labels(&[("app", name)]);
    Deployment {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            ..Default::default()
        },
        spec: DeploymentSpec {
            replicas: Some(replicas),
            selector: LabelSelector {
                match_labels: Some(app.clone()),
                ..Default::default()
            },
            strategy: Some(DeploymentStrategy {
                type_: Some("RollingUpdate".to_owned()),
                rolling_update: Some(RollingUpdateDeployment {
                    max_surge: Some(IntOrString::Int(1)),
                    max_unavailable: Some(IntOrString::Int(0)),
                }),
            }),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(app),
                    ..Default::default()
                }),
                spec: Some(PodSpec {
                    containers: vec![Container {
                        name: "app".to_owned(),
                        image: Some(IMAGE_1.to_owned()),
                        ..Default::default()
                    }],
                    ..Default::default()
                }),
            },
            ..Default::default()
        },
        ..Default::default()
    }
}

/// `kubectl apply` of [`RBAC_FILES`] with the admin kubeconfig.
async fn apply_deploy_rbac(kubectl: &Path, admin: &Path) {
    let deploy = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy");
    let mut cmd = tokio::process::Command::new(kubectl);
    cmd.arg("--kubeconfig").arg(admin).arg("apply");
    for file in RBAC_FILES {
        cmd.arg("-f").arg(deploy.join(file));
    }
    let out = cmd.output().await.expect("running kubectl apply");
    assert!(
        out.status.success(),
        "kubectl apply of deploy/'s RBAC failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Waits until Deployment `name` reports `replicas` updated, available replicas of its
/// latest generation, and the namespace holds exactly that many live Pods, each with
/// `image`, each controlled by a ReplicaSet the Deployment controls; returns the Pods.
async fn rolled_out(
    deployments: &Api<Deployment>,
    sets: &Api<ReplicaSet>,
    pods: &Api<Pod>,
    name: &str,
    replicas: i32,
    image: &str,
) -> Vec<Pod> {
    eventually(
        &format!("{name} rolled out to {image}"),
        TIMEOUT,
        || async {
            let d = deployments.get(name).await.map_err(|e| e.to_string())?;
            let status = d.status.clone().unwrap_or_default();
            let complete = status.observed_generation == d.metadata.generation
                && status.updated_replicas == Some(replicas)
                && status.available_replicas == Some(replicas)
                && status.replicas == Some(replicas);
            let owned_sets: Vec<String> = sets
                .list(&ListParams::default())
                .await
                .map_err(|e| e.to_string())?
                .items
                .into_iter()
                .filter(|rs| {
                    get_controller_of(&rs.metadata).map(|r| &r.uid) == d.metadata.uid.as_ref()
                })
                .filter_map(|rs| rs.metadata.uid)
                .collect();
            let live: Vec<Pod> = pods
                .list(&ListParams::default())
                .await
                .map_err(|e| e.to_string())?
                .items
                .into_iter()
                .filter(|p| p.metadata.deletion_timestamp.is_none())
                .collect();
            let ours = live.iter().all(|p| {
                get_controller_of(&p.metadata)
                    .is_some_and(|r| r.kind == "ReplicaSet" && owned_sets.contains(&r.uid))
                    && p.spec
                        .as_ref()
                        .and_then(|s| s.containers[0].image.as_deref())
                        == Some(image)
            });
            if complete && live.len() == replicas as usize && ours {
                Ok(live)
            } else {
                Err(format!(
                    "status {status:?}; Pods {:?}",
                    live.iter()
                        .map(|p| p.metadata.name.clone().unwrap_or_default())
                        .collect::<Vec<_>>()
                ))
            }
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deployment_rolls_out_with_both_of_our_controllers() {
    let Some(cluster) = kctrl_e2e::cluster_without_replicaset_controller() else {
        return;
    };
    let identity = cluster
        .controller_kubeconfig
        .clone()
        .expect("the test plane has a controller identity");
    let kubectl = cluster.kubectl_binary().expect("the test plane's kubectl");
    apply_deploy_rbac(&kubectl, &cluster.kubeconfig).await;
    let mut controller = ControllerProcess::start(
        "both",
        &identity,
        &["--controllers=*,replicaset-controller"],
    )
    .await;

    let admin = cluster.admin();
    let ns = TestNamespace::create(&admin, "both").await;
    let deployments: Api<Deployment> = Api::namespaced(admin.clone(), &ns.name);
    let sets: Api<ReplicaSet> = Api::namespaced(admin.clone(), &ns.name);
    let pods: Api<Pod> = Api::namespaced(admin.clone(), &ns.name);
    deployments
        .create(&PostParams::default(), &deployment("web", 3))
        .await
        .expect("creating the Deployment");
    let first = rolled_out(&deployments, &sets, &pods, "web", 3, IMAGE_1).await;
    assert!(
        first.iter().all(|p| p
            .metadata
            .name
            .as_deref()
            .is_some_and(|n| n.starts_with("web-"))),
        "Pods named after their ReplicaSet"
    );

    // A new template: a second ReplicaSet scaled up by our Deployment controller, its Pods
    // created and the old ones deleted by our ReplicaSet controller.
    deployments
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Strategic(json!({"spec": {"template": {"spec": {
                "containers": [{"name": "app", "image": IMAGE_2}]
            }}}})),
        )
        .await
        .expect("changing the image");
    let second = rolled_out(&deployments, &sets, &pods, "web", 3, IMAGE_2).await;
    assert!(
        second
            .iter()
            .all(|p| !first.iter().any(|f| f.metadata.uid == p.metadata.uid)),
        "every Pod replaced"
    );

    // The Pods' creations and deletions are reported as kube-controller-manager's
    // ReplicaSet controller reports them.
    let events: Api<Event> = Api::namespaced(admin.clone(), &ns.name);
    eventually("the ReplicaSet controller's Events", TIMEOUT, || async {
        let list = events
            .list(&ListParams::default())
            .await
            .map_err(|e| e.to_string())?;
        let count = |reason: &str| {
            list.items
                .iter()
                .filter(|e| e.reason.as_deref() == Some(reason))
                .filter(|e| {
                    e.source.as_ref().and_then(|s| s.component.as_deref())
                        == Some("replicaset-controller")
                })
                .map(|e| e.count.unwrap_or(1))
                .sum::<i32>()
        };
        let (created, deleted) = (count("SuccessfulCreate"), count("SuccessfulDelete"));
        if created >= 6 && deleted >= 3 {
            Ok(())
        } else {
            Err(format!("{created} created, {deleted} deleted"))
        }
    })
    .await;

    // Both controllers of the process did the work.
    let metrics = controller.metrics().await;
    for name in ["deployment", "replicaset"] {
        let added = sample(
            &metrics,
            &format!(r#"workqueue_adds_total{{name="{name}"}}"#),
        );
        assert!(added > Some(0.0), "nothing queued for {name}:\n{metrics}");
    }
    let synced = sample(
        &metrics,
        r#"controller_runtime_reconcile_total{controller="replicaset",result="success"}"#,
    );
    assert!(
        synced > Some(0.0),
        "no successful ReplicaSet sync:\n{metrics}"
    );
    let log = controller.log_text();
    assert!(
        !log.contains("forbidden"),
        "deploy/'s RBAC refused something:\n{log}"
    );

    let status = controller.terminate(Duration::from_secs(30)).await;
    assert!(status.success(), "exit status {status}; log:\n{log}");
    ns.delete().await;
}

//! Our `deployment-controller` as an operator runs it: processes started by the tests (not by
//! `cargo xtask e2e`), with leader election, HTTPS endpoints and the RBAC of `deploy/`.
//!
//! * Two processes on one Lease; `kill -9` of the leader mid-rollout → the standby takes over
//!   within the lease's bound, and nothing is done twice.
//! * /healthz, /readyz and /metrics during a rollout; the controller's Events in the API.
//! * The controller identity bound to `deploy/`'s ClusterRole does everything; with the
//!   binding removed it logs a clear forbidden error, keeps running, and recovers when the
//!   binding returns.
//!
//! These tests run while no other deployment controller acts on the cluster, one at a time
//! (each holds [`SERIAL`]): two of them at once would be two controllers.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::apps::v1::{
    Deployment, DeploymentSpec, DeploymentStrategy, ReplicaSet, RollingUpdateDeployment,
};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Container, Event, PodSpec, PodTemplateSpec};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kctrl_client::versioned::Versioned;
use kctrl_client::{
    Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use kctrl_e2e::process::{ControllerProcess, sample};
use kctrl_e2e::{TestNamespace, eventually, labels, require_cluster};
use serde_json::json;

/// One test of this file at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const IMAGE_1: &str = "registry.k8s.io/pause:3.10";
const IMAGE_2: &str = "registry.k8s.io/pause:3.9";
const TIMEOUT: Duration = Duration::from_secs(120);

/// Defaults of --leader-elect-lease-duration and --leader-elect-retry-period.
const LEASE_DURATION: Duration = Duration::from_secs(15);
const RETRY_PERIOD: Duration = Duration::from_secs(2);

fn deployment(name: &str, replicas: i32, image: &str, min_ready_seconds: i32) -> Deployment {
    let app = labels(&[("app", name)]);
    Deployment {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            ..Default::default()
        },
        spec: DeploymentSpec {
            replicas: Some(replicas),
            min_ready_seconds: Some(min_ready_seconds),
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
                        image: Some(image.to_owned()),
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

/// Whether `d`'s rollout is complete: observed, all replicas updated and available, none old.
fn complete(d: &Deployment, replicas: i32) -> bool {
    let (Some(status), Some(generation)) = (&d.status, d.metadata.generation) else {
        return false;
    };
    status.observed_generation == Some(generation)
        && status.updated_replicas == Some(replicas)
        && status.available_replicas == Some(replicas)
        && status.replicas == Some(replicas)
}

async fn wait_complete(api: &Api<Deployment>, name: &str, replicas: i32, hint: &str) {
    eventually(&format!("{name} complete ({hint})"), TIMEOUT, || async {
        let d = api.get(name).await.map_err(|e| e.to_string())?;
        if complete(&d, replicas) {
            Ok(())
        } else {
            Err(format!("{:?}", d.status))
        }
    })
    .await;
}

async fn set_image(api: &Api<Deployment>, name: &str, image: &str) {
    let patch =
        json!({"spec": {"template": {"spec": {"containers": [{"name": "app", "image": image}]}}}});
    api.patch(name, &PatchParams::default(), &Patch::Strategic(patch))
        .await
        .unwrap_or_else(|e| panic!("changing {name}'s image: {e}"));
}

/// The holder of `ns/name`, if the Lease exists and is held.
async fn holder(leases: &Api<Lease>, name: &str) -> Option<String> {
    let lease = leases.get_opt(name).await.ok().flatten()?;
    lease
        .spec
        .and_then(|s| s.holder_identity)
        .filter(|h| !h.is_empty())
}

/// The `leader_election_master_status` sample of a process (1 leader, 0 standby).
fn master_status(metrics: &str) -> Option<f64> {
    sample(metrics, "leader_election_master_status")
}

/// The number of syncs a process has run (0 when it never started its workers).
fn syncs(metrics: &str) -> f64 {
    metrics
        .lines()
        .filter(|l| l.starts_with("deployment_controller_sync_duration_seconds_count"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// The ReplicaSets added, and each spec.replicas sum seen, in order.
type Observed = (BTreeSet<String>, Vec<i32>);

/// Watches the namespace's ReplicaSets from `resource_version` and records every ReplicaSet
/// added and every spec.replicas sum seen, until the returned task is aborted.
fn record_replica_sets(
    sets: Api<ReplicaSet>,
    resource_version: String,
) -> (Arc<Mutex<Observed>>, tokio::task::JoinHandle<()>) {
    let seen = Arc::new(Mutex::new((BTreeSet::new(), Vec::new())));
    let record = seen.clone();
    let task = tokio::spawn(async move {
        let mut current = std::collections::HashMap::<String, i32>::new();
        let params = WatchParams {
            resource_version: Some(resource_version),
            ..Default::default()
        };
        let mut stream = sets.watch(&params).await.expect("watching ReplicaSets");
        while let Some(event) = stream.next().await {
            let (rs, added) = match event {
                Ok(WatchEvent::Added(rs)) => (rs, true),
                Ok(WatchEvent::Modified(rs)) => (rs, false),
                Ok(WatchEvent::Deleted(rs)) => {
                    current.remove(rs.metadata.name.as_deref().unwrap_or(""));
                    continue;
                }
                Ok(_) => continue,
                Err(e) => panic!("watching ReplicaSets: {e}"),
            };
            let name = rs.metadata.name.clone().unwrap_or_default();
            let replicas = rs.spec.get().and_then(|s| s.replicas).unwrap_or(0);
            current.insert(name.clone(), replicas);
            let mut r = record.lock().unwrap();
            if added {
                r.0.insert(name);
            }
            r.1.push(current.values().sum());
        }
    });
    (seen, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standby_takes_over_after_kill_9_of_the_leader_without_double_acting() {
    let cluster = require_cluster!();
    let _serial = SERIAL.lock().await;
    let admin = cluster.admin();
    let ns = TestNamespace::create(&admin, "failover").await;
    let lock_args = [
        "--leader-elect-resource-namespace",
        ns.name.as_str(),
        "--leader-elect-resource-name",
        "failover",
    ];
    let mut a = ControllerProcess::start("a", &cluster.kubeconfig, &lock_args).await;
    let mut b = ControllerProcess::start("b", &cluster.kubeconfig, &lock_args).await;
    let leases: Api<Lease> = Api::namespaced(admin.clone(), &ns.name);

    // Exactly one leads.
    let (leader_is_a, first_holder) = eventually("one of the two to lead", TIMEOUT, || async {
        let (ma, mb) = (a.metrics().await, b.metrics().await);
        let holder = holder(&leases, "failover").await;
        match (master_status(&ma), master_status(&mb), holder) {
            (Some(x), Some(y), Some(h)) if x + y == 1.0 => Ok((x == 1.0, h)),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    let (leader, standby) = if leader_is_a {
        (&mut a, &mut b)
    } else {
        (&mut b, &mut a)
    };
    eprintln!(
        "leader {} ({first_holder}), standby {}",
        leader.name, standby.name
    );

    let deployments: Api<Deployment> = Api::namespaced(admin.clone(), &ns.name);
    let sets: Api<ReplicaSet> = Api::namespaced(admin.clone(), &ns.name);
    let replicas = 6;
    deployments
        .create(
            &PostParams::default(),
            &deployment("web", replicas, IMAGE_1, 2),
        )
        .await
        .expect("creating the Deployment");
    wait_complete(&deployments, "web", replicas, &leader.name).await;

    // The standby has not synced anything while the leader is alive.
    let standby_metrics = standby.metrics().await;
    assert_eq!(
        syncs(&standby_metrics),
        0.0,
        "the standby synced:\n{standby_metrics}"
    );
    assert_eq!(master_status(&standby_metrics), Some(0.0));

    // Roll out a new template; kill the leader once the new ReplicaSet has started to grow.
    let list = sets
        .list(&ListParams::default())
        .await
        .expect("listing ReplicaSets");
    let rv = list.metadata.resource_version.clone().unwrap_or_default();
    let initial: BTreeSet<String> = list
        .items
        .iter()
        .filter_map(|rs| rs.metadata.name.clone())
        .collect();
    assert_eq!(
        initial.len(),
        1,
        "one ReplicaSet before the rollout: {initial:?}"
    );
    let (seen, watcher) = record_replica_sets(sets.clone(), rv);
    set_image(&deployments, "web", IMAGE_2).await;
    eventually("the new ReplicaSet to have replicas", TIMEOUT, || async {
        let list = sets
            .list(&ListParams::default())
            .await
            .map_err(|e| e.to_string())?;
        let grown = list.items.iter().any(|rs| {
            !initial.contains(rs.metadata.name.as_deref().unwrap_or(""))
                && rs.spec.get().and_then(|s| s.replicas).unwrap_or(0) >= 1
        });
        if grown {
            Ok(())
        } else {
            Err("not yet".to_owned())
        }
    })
    .await;
    let d = deployments
        .get("web")
        .await
        .expect("reading the Deployment");
    assert!(
        !complete(&d, replicas),
        "the rollout finished before the kill; nothing to test"
    );
    leader.kill9().await;
    let killed = Instant::now();

    // The standby takes the lease: at most the lease duration after it last saw the record
    // change, plus its own retry period, each retry jittered by up to 1.2 × the period.
    let jittered_retry = RETRY_PERIOD.mul_f64(2.2);
    let bound = LEASE_DURATION + jittered_retry * 2 + Duration::from_secs(1);
    let new_holder = eventually("the standby to take the lease", bound, || async {
        match holder(&leases, "failover").await {
            Some(h) if h != first_holder => Ok(h),
            other => Err(other),
        }
    })
    .await;
    let takeover = killed.elapsed();
    eprintln!("takeover by {new_holder} {takeover:?} after kill -9 (bound {bound:?})");
    wait_complete(&deployments, "web", replicas, &standby.name).await;
    watcher.abort();

    // Nothing done twice: exactly one new ReplicaSet, and the surge bound held throughout.
    let (added, sums) = seen.lock().unwrap().clone();
    assert_eq!(
        added.len(),
        1,
        "ReplicaSets created during the rollout: {added:?}"
    );
    let max = sums.iter().copied().max().unwrap_or(0);
    assert!(
        max <= replicas + 1,
        "spec.replicas summed to {max} (> {replicas} + maxSurge 1): {sums:?}"
    );
    let after = standby.metrics().await;
    assert_eq!(master_status(&after), Some(1.0));
    assert!(syncs(&after) > 0.0);

    // SIGTERM: the survivor drains, releases the lease and exits 0.
    let status = standby.terminate(Duration::from_secs(30)).await;
    assert!(
        status.success(),
        "exit status {status}; log:\n{}",
        standby.log_text()
    );
    assert_eq!(
        holder(&leases, "failover").await,
        None,
        "the lease was not released on SIGTERM"
    );
    ns.delete().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpoints_metrics_and_events_during_a_rollout() {
    let cluster = require_cluster!();
    let _serial = SERIAL.lock().await;
    let admin = cluster.admin();
    let ns = TestNamespace::create(&admin, "endpoints").await;
    let mut c = ControllerProcess::start(
        "endpoints",
        &cluster.kubeconfig,
        &[
            "--leader-elect-resource-namespace",
            ns.name.as_str(),
            "--leader-elect-resource-name",
            "endpoints",
        ],
    )
    .await;
    eventually("/readyz ok", TIMEOUT, || async {
        match c.get("/readyz").await {
            Ok((200, body)) if body == "ok" => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    let (code, body) = c.get("/healthz?verbose").await.expect("GET /healthz");
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("[+]leaderElection ok"), "{body}");
    let before = c.metrics().await;
    let adds = |m: &str| sample(m, r#"workqueue_adds_total{name="deployment"}"#).unwrap_or(0.0);

    let deployments: Api<Deployment> = Api::namespaced(admin.clone(), &ns.name);
    deployments
        .create(&PostParams::default(), &deployment("web", 3, IMAGE_1, 0))
        .await
        .expect("creating the Deployment");
    wait_complete(&deployments, "web", 3, &c.name).await;
    set_image(&deployments, "web", IMAGE_2).await;
    wait_complete(&deployments, "web", 3, &c.name).await;

    let after = c.metrics().await;
    assert!(
        adds(&after) > adds(&before),
        "workqueue_adds_total did not move:\n{after}"
    );
    for series in [
        r#"workqueue_depth{name="deployment"}"#,
        r#"workqueue_work_duration_seconds_count{name="deployment"}"#,
        r#"workqueue_queue_duration_seconds_count{name="deployment"}"#,
        r#"workqueue_retries_total{name="deployment"}"#,
        "workqueue_unfinished_work_seconds",
        "workqueue_longest_running_processor_seconds",
        r#"rest_client_requests_total{code="201",method="POST""#,
        r#"rest_client_requests_total{code="200",method="PUT""#,
        "rest_client_request_duration_seconds_count",
        "leader_election_master_status",
        // client-go's informer series, named as kube-controller-manager names them.
        r#"informer_queued_items{name="kube-controller-manager",group="apps",version="v1",resource="deployments"}"#,
        r#"informer_processing_latency_seconds_count{name="kube-controller-manager",group="apps",version="v1",resource="replicasets"}"#,
        r#"informer_store_resource_version{name="kube-controller-manager",group="",version="v1",resource="pods"}"#,
    ] {
        assert!(
            sample(&after, series).is_some(),
            "{series} missing:\n{after}"
        );
    }
    let store_rv = |m: &str| {
        sample(
            m,
            r#"informer_store_resource_version{name="kube-controller-manager",group="apps",version="v1",resource="deployments"}"#,
        )
        .unwrap_or(0.0)
    };
    assert!(
        store_rv(&after) > store_rv(&before),
        "the Deployment cache's resourceVersion did not move:\n{after}"
    );
    assert!(syncs(&after) >= 2.0, "{after}");

    // The controller's Events: a scale-up of each ReplicaSet, from deployment-controller.
    let sets: Api<ReplicaSet> = Api::namespaced(admin.clone(), &ns.name);
    let names: Vec<String> = sets
        .list(&ListParams::default())
        .await
        .expect("listing ReplicaSets")
        .items
        .into_iter()
        .filter_map(|rs| rs.metadata.name)
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");
    let events: Api<Event> = Api::namespaced(admin.clone(), &ns.name);
    let messages = eventually("ScalingReplicaSet events", TIMEOUT, || async {
        let list = events
            .list(&ListParams::default())
            .await
            .map_err(|e| vec![(e.to_string(), String::new(), String::new())])?;
        let scaling: Vec<(String, String, String)> = list
            .items
            .iter()
            .filter(|e| e.reason.as_deref() == Some("ScalingReplicaSet"))
            .map(|e| {
                (
                    e.message.clone().unwrap_or_default(),
                    e.source
                        .as_ref()
                        .and_then(|s| s.component.clone())
                        .unwrap_or_default(),
                    e.involved_object.kind.clone().unwrap_or_default(),
                )
            })
            .collect();
        let scaled_up_each = names.iter().all(|rs| {
            scaling
                .iter()
                .any(|(m, _, _)| m.starts_with(&format!("Scaled up replica set {rs} from 0 to")))
        });
        if scaled_up_each {
            Ok(scaling)
        } else {
            Err(scaling)
        }
    })
    .await;
    for (message, component, kind) in &messages {
        assert_eq!(component, "deployment-controller", "{message}");
        assert_eq!(kind, "Deployment", "{message}");
    }
    assert!(
        messages
            .iter()
            .any(|(m, _, _)| m.starts_with("Scaled down replica set ")),
        "{messages:?}"
    );

    let status = c.terminate(Duration::from_secs(30)).await;
    assert!(
        status.success(),
        "exit status {status}; log:\n{}",
        c.log_text()
    );
    ns.delete().await;
}

/// The objects of `deploy/` the controller's identity needs (ClusterRole, its binding, the
/// leader-election Role and its binding), read from the repository.
fn deploy_file<T: serde::de::DeserializeOwned>(file: &str) -> T {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../deploy")
        .join(file);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    serde_yaml_ng::from_str(&text).unwrap_or_else(|e| panic!("parsing {}: {e}", path.display()))
}

/// Creates `object`, or replaces the existing one of the same name.
async fn apply<K>(api: &Api<K>, object: &K)
where
    K: k8s_openapi::Resource
        + k8s_openapi::Metadata<Ty = ObjectMeta>
        + serde::Serialize
        + serde::de::DeserializeOwned
        + Clone
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let name = object
        .metadata()
        .name
        .clone()
        .expect("deploy/ objects are named");
    match api.get_opt(&name).await.expect("reading an RBAC object") {
        None => {
            api.create(&PostParams::default(), object)
                .await
                .unwrap_or_else(|e| panic!("creating {name}: {e}"));
        }
        Some(existing) => {
            let mut replacement = object.clone();
            replacement.metadata_mut().resource_version =
                existing.metadata().resource_version.clone();
            api.update(&PostParams::default(), &replacement)
                .await
                .unwrap_or_else(|e| panic!("replacing {name}: {e}"));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deploy_rbac_suffices_and_a_removed_binding_is_survived() {
    let cluster = require_cluster!();
    let Some(identity) = cluster.controller_kubeconfig.clone() else {
        eprintln!("e2e: the cluster has no deployment-controller identity; skipping");
        return;
    };
    let _serial = SERIAL.lock().await;
    let admin = cluster.admin();
    let role: ClusterRole = deploy_file("01-clusterrole.yaml");
    let binding: ClusterRoleBinding = deploy_file("02-clusterrolebinding.yaml");
    let lease_role: Role = deploy_file("03-role-leader-election.yaml");
    let lease_binding: RoleBinding = deploy_file("04-rolebinding-leader-election.yaml");
    let lease_ns = lease_role
        .metadata
        .namespace
        .clone()
        .expect("the lease Role is namespaced");
    apply(&Api::<ClusterRole>::all(admin.clone()), &role).await;
    let bindings = Api::<ClusterRoleBinding>::all(admin.clone());
    apply(&bindings, &binding).await;
    apply(
        &Api::<Role>::namespaced(admin.clone(), &lease_ns),
        &lease_role,
    )
    .await;
    apply(
        &Api::<RoleBinding>::namespaced(admin.clone(), &lease_ns),
        &lease_binding,
    )
    .await;

    let ns = TestNamespace::create(&admin, "rbac").await;
    // deploy/'s Role lets the identity read and renew only the default Lease, so this test
    // uses it (the runner starts its own controller only after this file's tests).
    let lease_name = "kctrl-deployment-controller".to_owned();
    let mut c = ControllerProcess::start("rbac", &identity, &[]).await;
    let deployments: Api<Deployment> = Api::namespaced(admin.clone(), &ns.name);
    deployments
        .create(&PostParams::default(), &deployment("web", 2, IMAGE_1, 0))
        .await
        .expect("creating the Deployment");
    wait_complete(&deployments, "web", 2, &c.name).await;

    // Take the ClusterRole away: the controller must say what was refused, and keep going.
    let binding_name = binding.metadata.name.clone().expect("named binding");
    bindings
        .delete(&binding_name, &DeleteParams::default())
        .await
        .expect("deleting the ClusterRoleBinding");
    set_image(&deployments, "web", IMAGE_2).await;
    eventually(
        "a forbidden error naming the verb and resource in the log",
        TIMEOUT,
        || async {
            let log = c.log_text();
            let named = log.lines().any(|l| {
                l.contains("forbidden")
                    && l.contains("cannot")
                    && (l.contains("replicasets")
                        || l.contains("deployments")
                        || l.contains("pods"))
            });
            if named {
                Ok(())
            } else {
                Err(log.lines().rev().take(5).collect::<Vec<_>>().join("\n"))
            }
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        c.try_wait().is_none(),
        "the controller exited; log:\n{}",
        c.log_text()
    );
    let (code, body) = c.get("/healthz").await.expect("GET /healthz");
    assert_eq!(code, 200, "{body}");

    // Give it back: the rollout completes without a restart.
    apply(&bindings, &binding).await;
    wait_complete(&deployments, "web", 2, &c.name).await;
    let status = c.terminate(Duration::from_secs(30)).await;
    assert!(
        status.success(),
        "exit status {status}; log:\n{}",
        c.log_text()
    );
    let _ = Api::<Lease>::namespaced(admin.clone(), &lease_ns)
        .delete(&lease_name, &DeleteParams::default())
        .await;
    ns.delete().await;
}

/// The `deploy/` Deployment's arguments are all accepted by the binary's flag parser.
#[test]
fn deploy_manifest_arguments_are_accepted_by_the_binary() {
    let Some(binary) = std::env::var_os(kctrl_e2e::process::CONTROLLER_BINARY_ENV) else {
        return;
    };
    let d: Deployment = deploy_file("05-deployment.yaml");
    let spec = d.spec.into_value().expect("spec");
    let pod = spec.template.spec.expect("pod spec");
    let args = pod.containers[0].args.clone().unwrap_or_default();
    assert!(!args.is_empty());
    // `--help` after the manifest's arguments: the parser validates them all, then prints help.
    let out = std::process::Command::new(binary)
        .args(&args)
        .arg("--help")
        .output()
        .expect("running deployment-controller --help");
    assert!(
        out.status.success(),
        "deployment-controller rejected the manifest's arguments {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn losing_the_lease_stops_the_process_with_status_1() {
    let cluster = require_cluster!();
    let _serial = SERIAL.lock().await;
    let admin = cluster.admin();
    let ns = TestNamespace::create(&admin, "lost").await;
    let mut c = ControllerProcess::start(
        "lost",
        &cluster.kubeconfig,
        &[
            "--leader-elect-resource-namespace",
            ns.name.as_str(),
            "--leader-elect-resource-name",
            "lost",
            "--leader-elect-lease-duration",
            "4s",
            "--leader-elect-renew-deadline",
            "3s",
            "--leader-elect-retry-period",
            "500ms",
        ],
    )
    .await;
    eventually("the controller to lead", TIMEOUT, || async {
        match master_status(&c.metrics().await) {
            Some(1.0) => Ok(()),
            other => Err(other),
        }
    })
    .await;

    // Another holder takes the Lease behind the leader's back (as after a partition).
    let leases: Api<Lease> = Api::namespaced(admin.clone(), &ns.name);
    eventually("the Lease to be taken over", TIMEOUT, || async {
        let mut lease = leases.get("lost").await.map_err(|e| e.to_string())?;
        let spec = lease.spec.get_or_insert_with(Default::default);
        spec.holder_identity = Some("intruder".to_owned());
        spec.lease_duration_seconds = Some(600);
        spec.renew_time = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(
            k8s_openapi::jiff::Timestamp::now(),
        ));
        leases
            .update(&PostParams::default(), &lease)
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    })
    .await;
    let taken = Instant::now();

    // It cannot renew within the renew deadline (3 s): it must stop, at once and non-zero.
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = c.try_wait() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "the controller still runs 30 s after losing the Lease; log:\n{}",
            c.log_text()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    eprintln!(
        "exited {status} {:?} after the Lease was taken",
        taken.elapsed()
    );
    assert_eq!(status.code(), Some(1), "log:\n{}", c.log_text());
    assert!(
        c.log_text().contains("leaderelection lost"),
        "log:\n{}",
        c.log_text()
    );
    assert_eq!(holder(&leases, "lost").await.as_deref(), Some("intruder"));
    ns.delete().await;
}

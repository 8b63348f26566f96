//! The REST client against a real kube-apiserver: CRUD, subresources, patches, paging,
//! watches, error classification, client-side rate limiting and RBAC.

use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::apps::v1::{
    Deployment, DeploymentSpec, DeploymentStatus, ReplicaSet, ReplicaSetSpec,
};
use k8s_openapi::api::core::v1::{ConfigMap, Container, Pod, PodSpec, PodTemplateSpec, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use kctrl_client::versioned::Versioned;
use kctrl_client::{
    Api, DeleteOutcome, DeleteParams, ListParams, Patch, PatchParams, PostParams,
    ResourceVersionMatch, WatchEvent, WatchParams,
};
use kctrl_e2e::{TestNamespace, labels, require_cluster};

fn meta(name: &str, lbls: &[(&str, &str)]) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_owned()),
        labels: Some(labels(lbls)),
        ..Default::default()
    }
}

fn config_map(name: &str, lbls: &[(&str, &str)]) -> ConfigMap {
    ConfigMap {
        metadata: meta(name, lbls),
        data: Some(labels(&[("k", "v")])),
        ..Default::default()
    }
}

fn template(app: &str) -> PodTemplateSpec {
    PodTemplateSpec {
        metadata: Some(ObjectMeta {
            labels: Some(labels(&[("app", app)])),
            ..Default::default()
        }),
        spec: Some(PodSpec {
            containers: vec![Container {
                name: "main".into(),
                image: Some("registry.k8s.io/pause:3.10".into()),
                ..Default::default()
            }],
            ..Default::default()
        }),
    }
}

fn deployment(name: &str, replicas: i32) -> Deployment {
    Deployment {
        metadata: meta(name, &[("app", name)]),
        spec: DeploymentSpec {
            replicas: Some(replicas),
            selector: LabelSelector {
                match_labels: Some(labels(&[("app", name)])),
                ..Default::default()
            },
            template: template(name),
            ..Default::default()
        },
        ..Default::default()
    }
}

fn pp() -> PostParams {
    PostParams::default()
}

#[tokio::test]
async fn crud_deployments_replicasets_pods() {
    let cluster = require_cluster!();
    let client = cluster.admin();
    let ns = TestNamespace::create(&client, "client-crud").await;

    // Deployment: create, get, update, list, delete.
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns.name);
    let created = deployments
        .create(&pp(), &deployment("web", 0))
        .await
        .unwrap();
    assert!(created.metadata.uid.is_some());
    assert_eq!(created.metadata.generation, Some(1));
    let mut got = deployments.get("web").await.unwrap();
    assert_eq!(got.metadata.uid, created.metadata.uid);
    got.spec.get_mut().replicas = Some(2);
    let updated = deployments.update(&pp(), &got).await.unwrap();
    assert_eq!(updated.spec.get().unwrap().replicas, Some(2));
    assert_eq!(
        updated.metadata.generation,
        Some(2),
        "a spec change bumps generation"
    );
    let list = deployments.list(&ListParams::default()).await.unwrap();
    assert_eq!(list.items.len(), 1);
    deployments
        .delete("web", &DeleteParams::default())
        .await
        .unwrap();
    wait_gone(&deployments, "web").await;

    // ReplicaSet.
    let replicasets: Api<ReplicaSet> = Api::namespaced(client.clone(), &ns.name);
    let rs = ReplicaSet {
        metadata: meta("web-abc", &[("app", "rs")]),
        spec: ReplicaSetSpec {
            replicas: Some(0),
            selector: LabelSelector {
                match_labels: Some(labels(&[("app", "rs")])),
                ..Default::default()
            },
            template: Some(template("rs")),
            ..Default::default()
        },
        ..Default::default()
    };
    replicasets.create(&pp(), &rs).await.unwrap();
    // The ReplicaSet controller writes status concurrently: read-modify-write until our
    // update lands on the latest version, as client-go's RetryOnConflict does.
    let mut attempts = 0;
    let updated = loop {
        let mut got = replicasets.get("web-abc").await.unwrap();
        got.metadata.annotations = Some(labels(&[("note", "x")]));
        match replicasets.update(&pp(), &got).await {
            Err(e) if e.is_conflict() && attempts < 5 => attempts += 1,
            other => break other.unwrap(),
        }
    };
    assert_eq!(updated.metadata.annotations.unwrap()["note"], "x");
    replicasets
        .delete("web-abc", &DeleteParams::default())
        .await
        .unwrap();
    wait_gone(&replicasets, "web-abc").await;

    // Pod: graceful deletion first answers with the object, then it goes away.
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let pod = Pod {
        metadata: meta("lonely", &[("app", "pod")]),
        spec: template("pod").spec,
        ..Default::default()
    };
    pods.create(&pp(), &pod).await.unwrap();
    assert_eq!(
        pods.get("lonely").await.unwrap().metadata.name.as_deref(),
        Some("lonely")
    );
    let outcome = pods
        .delete(
            "lonely",
            &DeleteParams {
                grace_period_seconds: Some(0),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert!(matches!(
        outcome,
        DeleteOutcome::Pending(_) | DeleteOutcome::Deleted(_)
    ));
    wait_gone(&pods, "lonely").await;
    ns.delete().await;
}

async fn wait_gone<K>(api: &Api<K>, name: &str)
where
    K: k8s_openapi::Resource
        + k8s_openapi::Metadata<Ty = ObjectMeta>
        + serde::Serialize
        + serde::de::DeserializeOwned
        + Send
        + 'static,
    K::Scope: 'static,
{
    for _ in 0..100 {
        match api.get(name).await {
            Err(e) if e.is_not_found() => return,
            Err(e) => panic!("get {name}: {e}"),
            Ok(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
    panic!("{name} still exists after 10s");
}

#[tokio::test]
async fn status_subresource() {
    let cluster = require_cluster!();
    let client = cluster.admin();
    let ns = TestNamespace::create(&client, "client-status").await;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns.name);
    let mut d = deployments
        .create(&pp(), &deployment("st", 3))
        .await
        .unwrap();

    // A status write through the main resource is ignored.
    d.status = Some(DeploymentStatus {
        replicas: Some(7),
        ..Default::default()
    });
    let d = deployments.update(&pp(), &d).await.unwrap();
    assert_eq!(d.status.as_ref().and_then(|s| s.replicas), None);

    // Through the status subresource it sticks, and a spec change there is ignored.
    let mut d2 = d.clone();
    d2.status = Some(DeploymentStatus {
        replicas: Some(7),
        observed_generation: Some(1),
        ..Default::default()
    });
    d2.spec.get_mut().replicas = Some(9);
    let d2 = deployments.update_status(&pp(), &d2).await.unwrap();
    assert_eq!(d2.status.as_ref().unwrap().replicas, Some(7));
    assert_eq!(d2.spec.get().unwrap().replicas, Some(3));

    // patch_status too.
    let d3 = deployments
        .patch_status(
            "st",
            &PatchParams::default(),
            &Patch::Merge(
                serde_json::json!({"status": {"readyReplicas": 2, "availableReplicas": 2}}),
            ),
        )
        .await
        .unwrap();
    assert_eq!(d3.status.unwrap().available_replicas, Some(2));
    ns.delete().await;
}

#[tokio::test]
async fn strategic_merge_patch_adds_and_removes_owner_reference_by_uid() {
    let cluster = require_cluster!();
    let client = cluster.admin();
    let ns = TestNamespace::create(&client, "client-ownerref").await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns.name);
    let owner = cms.create(&pp(), &config_map("owner", &[])).await.unwrap();
    let other = cms
        .create(&pp(), &config_map("other-owner", &[]))
        .await
        .unwrap();
    cms.create(&pp(), &config_map("dependent", &[]))
        .await
        .unwrap();
    let uid = owner.metadata.uid.clone().unwrap();
    let other_uid = other.metadata.uid.clone().unwrap();

    // Adopt: the same body shape the ControllerRefManager sends.
    let adopt = |name: &str, uid: &str, controller: bool| {
        serde_json::json!({"metadata": {"ownerReferences": [{
            "apiVersion": "v1", "kind": "ConfigMap", "name": name, "uid": uid,
            "controller": controller, "blockOwnerDeletion": true}]}})
    };
    let body = adopt("owner", &uid, true);
    let patched = cms
        .patch(
            "dependent",
            &PatchParams::default(),
            &Patch::Strategic(body),
        )
        .await
        .unwrap();
    let refs = patched.metadata.owner_references.unwrap();
    assert_eq!(refs.len(), 1);
    assert_eq!(refs[0].uid, uid);
    assert_eq!(refs[0].controller, Some(true));

    // A second, non-controller reference merges by uid instead of replacing the list.
    let body = adopt("other-owner", &other_uid, false);
    let patched = cms
        .patch(
            "dependent",
            &PatchParams::default(),
            &Patch::Strategic(body),
        )
        .await
        .unwrap();
    assert_eq!(patched.metadata.owner_references.unwrap().len(), 2);

    // Release: delete one entry by uid with the $patch directive.
    let release = serde_json::json!({"metadata": {"ownerReferences": [
        {"$patch": "delete", "uid": uid}]}});
    let patched = cms
        .patch(
            "dependent",
            &PatchParams::default(),
            &Patch::Strategic(release),
        )
        .await
        .unwrap();
    let refs = patched.metadata.owner_references.unwrap();
    assert_eq!(refs.len(), 1);
    assert_eq!(refs[0].uid, other_uid);
    ns.delete().await;
}

#[tokio::test]
async fn paginated_list() {
    let cluster = require_cluster!();
    let client = cluster.admin();
    let ns = TestNamespace::create(&client, "client-paging").await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns.name);
    for i in 0..5 {
        cms.create(
            &pp(),
            &config_map(&format!("page-{i}"), &[("set", "paging")]),
        )
        .await
        .unwrap();
    }
    let mut params = ListParams {
        label_selector: Some("set=paging".into()),
        limit: Some(2),
        ..Default::default()
    };
    let mut pages = Vec::new();
    loop {
        let page = cms.list(&params).await.unwrap();
        pages.push(page.items.len());
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params.continue_token = Some(token),
            None => break,
        }
    }
    assert_eq!(pages, vec![2, 2, 1]);
    ns.delete().await;
}

#[tokio::test]
async fn watch_streaming_list_ends_with_bookmark() {
    let cluster = require_cluster!();
    let client = cluster.admin();
    let ns = TestNamespace::create(&client, "client-bookmark").await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns.name);
    for i in 0..3 {
        cms.create(&pp(), &config_map(&format!("b-{i}"), &[("set", "bm")]))
            .await
            .unwrap();
    }
    let params = WatchParams {
        label_selector: Some("set=bm".into()),
        send_initial_events: true,
        resource_version_match: Some(ResourceVersionMatch::NotOlderThan),
        resource_version: Some(String::new()),
        timeout_seconds: Some(30),
        ..Default::default()
    };
    let mut stream = Box::pin(cms.watch(&params).await.unwrap());
    let mut added = 0;
    let deadline = tokio::time::timeout(Duration::from_secs(20), async {
        while let Some(ev) = stream.next().await {
            match ev.unwrap() {
                WatchEvent::Added(_) => added += 1,
                WatchEvent::Bookmark(b) if b.is_initial_events_end() => {
                    assert!(!b.resource_version.is_empty());
                    return true;
                }
                WatchEvent::Bookmark(_) => {}
                other => panic!("unexpected event {other:?}"),
            }
        }
        false
    })
    .await;
    assert_eq!(deadline, Ok(true), "no initial-events-end bookmark");
    assert_eq!(added, 3);
    ns.delete().await;
}

#[tokio::test]
async fn watch_resumes_from_resource_version() {
    let cluster = require_cluster!();
    let client = cluster.admin();
    let ns = TestNamespace::create(&client, "client-resume").await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns.name);
    let first = cms
        .create(&pp(), &config_map("r-0", &[("set", "r")]))
        .await
        .unwrap();
    let rv = first.metadata.resource_version.clone().unwrap();
    cms.create(&pp(), &config_map("r-1", &[("set", "r")]))
        .await
        .unwrap();
    let mut second = cms.get("r-1").await.unwrap();
    second.data = Some(labels(&[("k", "changed")]));
    cms.update(&pp(), &second).await.unwrap();
    cms.delete("r-0", &DeleteParams::default()).await.unwrap();

    let params = WatchParams {
        label_selector: Some("set=r".into()),
        resource_version: Some(rv),
        timeout_seconds: Some(30),
        ..Default::default()
    };
    let mut stream = Box::pin(cms.watch(&params).await.unwrap());
    let mut seen = Vec::new();
    while seen.len() < 3 {
        let ev = tokio::time::timeout(Duration::from_secs(20), stream.next())
            .await
            .expect("watch event within 20s")
            .expect("watch open")
            .unwrap();
        match ev {
            WatchEvent::Added(c) => seen.push(format!("ADDED {}", c.metadata.name.unwrap())),
            WatchEvent::Modified(c) => seen.push(format!("MODIFIED {}", c.metadata.name.unwrap())),
            WatchEvent::Deleted(c) => seen.push(format!("DELETED {}", c.metadata.name.unwrap())),
            WatchEvent::Bookmark(_) => {}
            WatchEvent::Error(e) => panic!("watch error {e}"),
        }
    }
    // r-0's own creation is at the starting resourceVersion, so it is not replayed.
    assert_eq!(seen, vec!["ADDED r-1", "MODIFIED r-1", "DELETED r-0"]);
    ns.delete().await;
}

/// Whether a watch is refused with 410, either as the response or as its first event.
async fn watch_is_gone<K>(api: &Api<K>, params: &WatchParams) -> bool
where
    K: k8s_openapi::Resource
        + k8s_openapi::ListableResource
        + k8s_openapi::Metadata<Ty = ObjectMeta>
        + serde::Serialize
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + 'static,
    K::Scope: 'static,
{
    match api.watch(params).await {
        Err(e) => e.is_gone(),
        Ok(stream) => {
            let mut stream = Box::pin(stream);
            loop {
                match tokio::time::timeout(Duration::from_secs(10), stream.next()).await {
                    Ok(Some(Ok(WatchEvent::Error(e)))) => return e.is_gone(),
                    Ok(Some(Ok(WatchEvent::Bookmark(_)))) => continue,
                    other => {
                        eprintln!("watch was not refused: {other:?}");
                        return false;
                    }
                }
            }
        }
    }
}

#[tokio::test]
async fn gone_after_compaction() {
    let cluster = require_cluster!();
    if cluster.compact_command.is_none() {
        eprintln!("e2e: no compaction command for this cluster; skipping gone_after_compaction");
        return;
    }
    let client = cluster.admin();
    let ns = TestNamespace::create(&client, "client-gone").await;
    // The local e2e cluster serves ConfigMaps straight from etcd (no watch cache), so old
    // revisions disappear with compaction exactly as etcd compacts them.
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns.name);
    let first = cms
        .create(&pp(), &config_map("g-0", &[("set", "g")]))
        .await
        .unwrap();
    let old_rv = first.metadata.resource_version.clone().unwrap();
    // Compacting at the current revision keeps that revision itself, so write twice more:
    // the revision right after `old_rv` must be strictly older than the compaction point.
    cms.create(&pp(), &config_map("g-1", &[("set", "g")]))
        .await
        .unwrap();
    cms.create(&pp(), &config_map("g-2", &[("set", "g")]))
        .await
        .unwrap();

    // Before compaction the old revision is still readable.
    let exact = ListParams {
        resource_version: Some(old_rv.clone()),
        resource_version_match: Some(ResourceVersionMatch::Exact),
        ..Default::default()
    };
    cms.list(&exact)
        .await
        .expect("exact list before compaction");

    cluster.compact();
    let err = cms.list(&exact).await.unwrap_err();
    assert!(err.is_gone(), "expected 410 after compaction, got {err}");
    let params = WatchParams {
        resource_version: Some(old_rv),
        timeout_seconds: Some(10),
        ..Default::default()
    };
    assert!(
        watch_is_gone(&cms, &params).await,
        "a watch from a compacted revision must be 410"
    );
    ns.delete().await;
}

#[tokio::test]
async fn errors_conflict_not_found_already_exists() {
    let cluster = require_cluster!();
    let client = cluster.admin();
    let ns = TestNamespace::create(&client, "client-errors").await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns.name);

    let err = cms.get("nope").await.unwrap_err();
    assert!(err.is_not_found(), "{err}");
    assert!(
        err.to_string().contains("nope"),
        "message names the object: {err}"
    );
    assert!(cms.get_opt("nope").await.unwrap().is_none());

    let created = cms.create(&pp(), &config_map("c", &[])).await.unwrap();
    let err = cms.create(&pp(), &config_map("c", &[])).await.unwrap_err();
    assert!(err.is_already_exists(), "{err}");

    let mut fresh = created.clone();
    fresh.data = Some(labels(&[("k", "1")]));
    cms.update(&pp(), &fresh).await.unwrap();
    let mut stale = created;
    stale.data = Some(labels(&[("k", "2")]));
    let err = cms.update(&pp(), &stale).await.unwrap_err();
    assert!(err.is_conflict(), "{err}");

    let err = cms
        .delete(
            "c",
            &DeleteParams {
                preconditions: Some(kctrl_client::Preconditions {
                    uid: Some("not-the-uid".into()),
                    resource_version: None,
                }),
                ..Default::default()
            },
        )
        .await
        .unwrap_err();
    assert!(
        err.is_conflict(),
        "a failed uid precondition is a conflict: {err}"
    );

    let bad = ConfigMap {
        metadata: meta("Not_A_Valid_Name", &[]),
        ..Default::default()
    };
    let err = cms.create(&pp(), &bad).await.unwrap_err();
    assert!(err.is_invalid(), "{err}");
    ns.delete().await;
}

#[tokio::test]
async fn client_side_rate_limiter_is_observed() {
    let cluster = require_cluster!();
    let (qps, burst, n) = (5.0_f32, 2_u32, 8_u32);
    let client = cluster.admin_with(|c| {
        c.qps = qps;
        c.burst = burst;
    });
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let start = Instant::now();
    for _ in 0..n {
        let _ = cms.get_opt("kube-root-ca.crt").await.unwrap();
    }
    let elapsed = start.elapsed();
    let floor = Duration::from_secs_f32((n - burst) as f32 / qps);
    // Allow a little slack for timer granularity, never an upper bound.
    assert!(
        elapsed + Duration::from_millis(50) >= floor,
        "{n} requests at {qps} qps / burst {burst} took {elapsed:?}, expected at least {floor:?}"
    );
}

#[tokio::test]
async fn forbidden_for_the_controller_identity() {
    let cluster = require_cluster!();
    let Some(controller) = cluster.controller() else {
        eprintln!("e2e: no controller identity; skipping forbidden_for_the_controller_identity");
        return;
    };
    let secrets: Api<Secret> = Api::namespaced(controller, "kube-system");
    let err = secrets.list(&ListParams::default()).await.unwrap_err();
    assert!(err.is_forbidden(), "{err}");
    assert!(
        err.to_string().contains("secrets"),
        "message names the resource: {err}"
    );
}

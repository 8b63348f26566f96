//! CRUD, concurrency, generation, status and patch semantics through `kctrl_client::Api`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec, DeploymentStatus, ReplicaSet};
use k8s_openapi::api::core::v1::{ConfigMap, Container, Pod, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kctrl_client::versioned::Versioned;
use kctrl_client::{
    Api, DeleteOutcome, DeleteParams, ListParams, ObjectMetaAccess, Patch, PatchParams, PostParams,
    Preconditions, ResourceRef,
};
use kctrl_fake::{FakeApi, Reaction, ResourceSpec, errors};
use serde_json::json;

fn meta(name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        ..Default::default()
    }
}

fn labels(pairs: &[(&str, &str)]) -> Option<BTreeMap<String, String>> {
    Some(
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
    )
}

fn deployment(name: &str, replicas: i32) -> Deployment {
    Deployment {
        metadata: meta(name),
        spec: DeploymentSpec {
            replicas: Some(replicas),
            ..Default::default()
        },
        ..Default::default()
    }
}

fn pp() -> PostParams {
    PostParams::default()
}

#[tokio::test]
async fn deployment_crud_sets_server_fields() {
    let fake = FakeApi::new();
    let api: Api<Deployment> = Api::namespaced(fake.client(), "default");
    let mut d = deployment("web", 1);
    d.status = Some(DeploymentStatus {
        replicas: Some(7),
        ..Default::default()
    });
    let created = api.create(&pp(), &d).await.unwrap();
    assert_eq!(created.metadata.namespace.as_deref(), Some("default"));
    assert_eq!(created.metadata.generation, Some(1));
    assert!(
        created
            .metadata
            .uid
            .as_deref()
            .is_some_and(|u| u.len() == 36)
    );
    assert!(created.metadata.creation_timestamp.is_some());
    let rv: u64 = created
        .metadata
        .resource_version
        .as_deref()
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(rv, fake.resource_version());
    // The strategy resets status on create.
    assert_eq!(created.status, Some(DeploymentStatus::default()));

    let got = api.get("web").await.unwrap();
    assert_eq!(got, created);

    let mut changed = got.clone();
    changed.spec.get_mut().replicas = Some(3);
    let updated = api.update(&pp(), &changed).await.unwrap();
    assert_eq!(updated.metadata.generation, Some(2));
    let rv2: u64 = updated
        .metadata
        .resource_version
        .as_deref()
        .unwrap()
        .parse()
        .unwrap();
    assert!(rv2 > rv);

    match api.delete("web", &DeleteParams::default()).await.unwrap() {
        DeleteOutcome::Deleted(status) => {
            assert_eq!(status.status.as_deref(), Some("Success"));
            let d = status.details.unwrap();
            assert_eq!(d.kind.as_deref(), Some("deployments"));
            assert_eq!(d.group.as_deref(), Some("apps"));
        }
        other => panic!("unexpected {other:?}"),
    }
    let err = api.get("web").await.unwrap_err();
    assert!(err.is_not_found());
    let status = err.status().unwrap();
    assert_eq!(
        status.message.as_deref(),
        Some(r#"deployments.apps "web" not found"#)
    );
    assert_eq!(status.reason.as_deref(), Some("NotFound"));
    assert_eq!(status.code, Some(404));
    let details = status.details.as_ref().unwrap();
    assert_eq!(details.name.as_deref(), Some("web"));
    assert_eq!(details.group.as_deref(), Some("apps"));
    assert_eq!(details.kind.as_deref(), Some("deployments"));
}

#[tokio::test]
async fn pods_and_configmaps_crud() {
    let fake = FakeApi::new();
    let pods: Api<Pod> = Api::default_namespaced(fake.client_in("team"));
    let pod = Pod {
        metadata: meta("p"),
        spec: Some(PodSpec {
            containers: vec![Container {
                name: "c".into(),
                image: Some("nginx".into()),
                ..Default::default()
            }],
            ..Default::default()
        }),
        ..Default::default()
    };
    let created = pods.create(&pp(), &pod).await.unwrap();
    assert_eq!(created.metadata.namespace.as_deref(), Some("team"));
    let status = created.status.unwrap();
    assert_eq!(status.phase.as_deref(), Some("Pending"));
    assert_eq!(status.qos_class.as_deref(), Some("BestEffort"));
    // Pods' registry returns the deleted object.
    match pods.delete("p", &DeleteParams::default()).await.unwrap() {
        DeleteOutcome::Pending(p) => assert_eq!(p.metadata.name.as_deref(), Some("p")),
        other => panic!("unexpected {other:?}"),
    }
    assert!(pods.get_opt("p").await.unwrap().is_none());

    let cms: Api<ConfigMap> = Api::namespaced(fake.client(), "default");
    let cm = ConfigMap {
        metadata: meta("cfg"),
        data: Some([("k".to_owned(), "v".to_owned())].into()),
        ..Default::default()
    };
    let created = cms.create(&pp(), &cm).await.unwrap();
    assert_eq!(
        created.metadata.generation, None,
        "ConfigMaps have no generation"
    );
    let mut changed = created.clone();
    changed.data = Some([("k".to_owned(), "w".to_owned())].into());
    let updated = cms.update(&pp(), &changed).await.unwrap();
    assert_eq!(updated.data.unwrap()["k"], "w");
    let all: Api<ConfigMap> = Api::all(fake.client());
    assert_eq!(
        all.list(&ListParams::default()).await.unwrap().items.len(),
        1
    );
}

#[tokio::test]
async fn already_exists_and_stale_update_conflict() {
    let fake = FakeApi::new();
    let api: Api<Deployment> = Api::namespaced(fake.client(), "default");
    let created = api.create(&pp(), &deployment("web", 1)).await.unwrap();
    let err = api.create(&pp(), &deployment("web", 1)).await.unwrap_err();
    assert!(err.is_already_exists());
    assert!(!err.is_conflict());
    let s = err.status().unwrap();
    assert_eq!(s.code, Some(409));
    assert_eq!(
        s.message.as_deref(),
        Some(r#"deployments.apps "web" already exists"#)
    );

    let mut a = created.clone();
    a.spec.get_mut().replicas = Some(2);
    api.update(&pp(), &a).await.unwrap();
    let mut stale = created.clone();
    stale.spec.get_mut().replicas = Some(5);
    let err = api.update(&pp(), &stale).await.unwrap_err();
    assert!(err.is_conflict());
    assert_eq!(
        err.status().unwrap().message.as_deref(),
        Some(
            r#"Operation cannot be fulfilled on deployments.apps "web": the object has been modified; please apply your changes to the latest version and try again"#
        )
    );
    // An empty resourceVersion is an unconditional update for built-in types.
    stale.metadata.resource_version = None;
    let forced = api.update(&pp(), &stale).await.unwrap();
    assert_eq!(forced.spec.into_value().unwrap().replicas, Some(5));
    // Updating something missing is a 404.
    let err = api.update(&pp(), &deployment("nope", 1)).await.unwrap_err();
    assert!(err.is_not_found());
}

#[tokio::test]
async fn generation_bumps_on_spec_changes_only() {
    let fake = FakeApi::new();
    let api: Api<Deployment> = Api::namespaced(fake.client(), "default");
    let d = api.create(&pp(), &deployment("web", 1)).await.unwrap();
    let mut l = d.clone();
    l.metadata.labels = labels(&[("a", "b")]);
    let l = api.update(&pp(), &l).await.unwrap();
    assert_eq!(l.metadata.generation, Some(1), "labels do not bump");
    let mut a = l.clone();
    a.metadata.annotations = labels(&[("x", "y")]);
    let a = api.update(&pp(), &a).await.unwrap();
    assert_eq!(
        a.metadata.generation,
        Some(2),
        "Deployment annotations bump"
    );
    // A no-op update is not written.
    let same = api.update(&pp(), &a).await.unwrap();
    assert_eq!(same.metadata.resource_version, a.metadata.resource_version);

    let rsets: Api<ReplicaSet> = Api::namespaced(fake.client(), "default");
    let rs = rsets
        .create(
            &pp(),
            &ReplicaSet {
                metadata: meta("rs"),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(rs.metadata.generation, Some(1));
    let mut ann = rs.clone();
    ann.metadata.annotations = labels(&[("x", "y")]);
    let ann = rsets.update(&pp(), &ann).await.unwrap();
    assert_eq!(
        ann.metadata.generation,
        Some(1),
        "ReplicaSet annotations do not bump"
    );
    let patched = rsets
        .patch(
            "rs",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 4}})),
        )
        .await
        .unwrap();
    assert_eq!(patched.metadata.generation, Some(2));
}

#[tokio::test]
async fn status_subresource_semantics() {
    let fake = FakeApi::new();
    let api: Api<Deployment> = Api::namespaced(fake.client(), "default");
    let d = api.create(&pp(), &deployment("web", 1)).await.unwrap();

    // The main resource ignores status.
    let mut s = d.clone();
    s.status = Some(DeploymentStatus {
        replicas: Some(9),
        ..Default::default()
    });
    let after = api.update(&pp(), &s).await.unwrap();
    assert_eq!(after.status, Some(DeploymentStatus::default()));
    assert_eq!(
        after.metadata.resource_version, d.metadata.resource_version,
        "no-op"
    );

    // The status subresource ignores spec and labels, keeps status, never bumps generation.
    let mut s = after.clone();
    s.spec.get_mut().replicas = Some(42);
    s.metadata.labels = labels(&[("ignored", "yes")]);
    s.status = Some(DeploymentStatus {
        replicas: Some(1),
        observed_generation: Some(1),
        ..Default::default()
    });
    let st = api.update_status(&pp(), &s).await.unwrap();
    assert_eq!(st.spec.get().unwrap().replicas, Some(1));
    assert_eq!(st.metadata.labels, None);
    assert_eq!(st.status.as_ref().unwrap().replicas, Some(1));
    assert_eq!(st.metadata.generation, Some(1));

    let patched = api
        .patch_status(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"readyReplicas": 1}, "spec": {"replicas": 8}})),
        )
        .await
        .unwrap();
    assert_eq!(patched.status.unwrap().ready_replicas, Some(1));
    assert_eq!(patched.spec.into_value().unwrap().replicas, Some(1));

    // A stale status update conflicts too.
    let err = api.update_status(&pp(), &s).await.unwrap_err();
    assert!(err.is_conflict());

    // The same write answered with the metadata only: the new resourceVersion, as stored.
    let current = api.get("web").await.unwrap();
    let mut s = current.clone();
    s.status.as_mut().unwrap().replicas = Some(2);
    let meta = api.update_status_metadata(&pp(), &s).await.unwrap();
    let stored = api.get("web").await.unwrap();
    assert_ne!(meta.resource_version, current.metadata.resource_version);
    assert_eq!(meta.resource_version, stored.metadata.resource_version);
    assert_eq!(meta.name.as_deref(), Some("web"));
    assert_eq!(stored.status.unwrap().replicas, Some(2));
    let err = api.update_status_metadata(&pp(), &s).await.unwrap_err();
    assert!(err.is_conflict(), "stale: {err}");

    // And with the resourceVersion alone.
    let current = api.get("web").await.unwrap();
    let mut s = current.clone();
    s.status.as_mut().unwrap().replicas = Some(3);
    let version = api.update_status_version(&pp(), &s).await.unwrap();
    let stored = api.get("web").await.unwrap();
    assert_ne!(Some(&version), current.metadata.resource_version.as_ref());
    assert_eq!(Some(&version), stored.metadata.resource_version.as_ref());
    assert_eq!(stored.status.unwrap().replicas, Some(3));
    let err = api.update_status_version(&pp(), &s).await.unwrap_err();
    assert!(err.is_conflict(), "stale: {err}");
}

#[tokio::test]
async fn strategic_merge_adopt_and_release_owner_references() {
    let fake = FakeApi::new();
    let rsets: Api<ReplicaSet> = Api::namespaced(fake.client(), "default");
    let rs = rsets
        .create(
            &pp(),
            &ReplicaSet {
                metadata: meta("rs"),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let uid = rs.metadata.uid.clone().unwrap();
    let adopt = json!({"metadata": {"ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment",
        "name": "d", "uid": "u", "controller": true, "blockOwnerDeletion": true}], "uid": uid}});
    let adopted = rsets
        .patch(
            "rs",
            &PatchParams::default(),
            &Patch::Strategic(adopt.clone()),
        )
        .await
        .unwrap();
    let refs = adopted.metadata.owner_references.clone().unwrap();
    assert_eq!(refs.len(), 1);
    assert_eq!(refs[0].uid, "u");
    assert_eq!(refs[0].controller, Some(true));
    assert_eq!(adopted.metadata.generation, Some(1), "metadata only");

    // A second owner merges in by uid.
    let other = json!({"metadata": {"ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap",
        "name": "c", "uid": "u2"}]}});
    let two = rsets
        .patch("rs", &PatchParams::default(), &Patch::Strategic(other))
        .await
        .unwrap();
    assert_eq!(two.metadata.owner_references.unwrap().len(), 2);

    let release =
        json!({"metadata": {"ownerReferences": [{"$patch": "delete", "uid": "u"}], "uid": uid}});
    let released = rsets
        .patch(
            "rs",
            &PatchParams::default(),
            &Patch::Strategic(release.clone()),
        )
        .await
        .unwrap();
    let refs = released.metadata.owner_references.unwrap();
    assert_eq!(refs.len(), 1);
    assert_eq!(refs[0].uid, "u2");

    // The object was deleted and recreated: the uid no longer matches → 422 Invalid.
    rsets.delete("rs", &DeleteParams::default()).await.unwrap();
    rsets
        .create(
            &pp(),
            &ReplicaSet {
                metadata: meta("rs"),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let err = rsets
        .patch("rs", &PatchParams::default(), &Patch::Strategic(adopt))
        .await
        .unwrap_err();
    assert!(err.is_invalid(), "{err}");
    let s = err.status().unwrap();
    assert_eq!(
        s.message.as_deref(),
        Some(format!(r#"ReplicaSet.apps "rs" is invalid: metadata.uid: Invalid value: "{uid}": field is immutable"#).as_str())
    );
    let d = s.details.as_ref().unwrap();
    assert_eq!(d.kind.as_deref(), Some("ReplicaSet"));
    assert_eq!(
        d.causes.as_ref().unwrap()[0].field.as_deref(),
        Some("metadata.uid")
    );
    // Patching something missing is a 404.
    let err = rsets
        .patch("gone", &PatchParams::default(), &Patch::Strategic(release))
        .await
        .unwrap_err();
    assert!(err.is_not_found());
}

#[tokio::test]
async fn merge_and_json_patches() {
    let fake = FakeApi::new();
    let api: Api<Deployment> = Api::namespaced(fake.client(), "default");
    let mut d = deployment("web", 1);
    d.metadata.labels = labels(&[("a", "1"), ("b", "2")]);
    api.create(&pp(), &d).await.unwrap();
    let p = api
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"labels": {"a": null, "c": "3"}}, "spec": {"replicas": 2}}),
            ),
        )
        .await
        .unwrap();
    assert_eq!(p.metadata.labels, labels(&[("b", "2"), ("c", "3")]));
    assert_eq!(p.spec.into_value().unwrap().replicas, Some(2));
    assert_eq!(p.metadata.generation, Some(2));

    let p = api
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Json(json!([
                {"op": "test", "path": "/spec/replicas", "value": 2},
                {"op": "replace", "path": "/spec/replicas", "value": 5}
            ])),
        )
        .await
        .unwrap();
    assert_eq!(p.spec.into_value().unwrap().replicas, Some(5));
    let err = api
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Json(json!([{"op": "test", "path": "/spec/replicas", "value": 1}])),
        )
        .await
        .unwrap_err();
    assert!(err.is_invalid(), "{err}");

    // A patch carrying a stale resourceVersion is a conflict.
    let err = api
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"resourceVersion": "1"}})),
        )
        .await
        .unwrap_err();
    assert!(err.is_conflict());
}

#[tokio::test]
async fn custom_resources_reject_strategic_merge() {
    let fake = FakeApi::new();
    let widgets = ResourceRef {
        group: "example.com".into(),
        version: "v1".into(),
        plural: "widgets".into(),
        kind: "Widget".into(),
        scope: kctrl_client::Scope::Namespaced,
    };
    fake.register(ResourceSpec::new(widgets.clone()));
    let stored = fake
        .add_value(
            &widgets,
            json!({"metadata": {"name": "w", "namespace": "default"}, "spec": {"size": 1}}),
        )
        .unwrap();
    assert_eq!(stored["apiVersion"], "example.com/v1");
    assert_eq!(stored["metadata"]["generation"], 1);
    let req = kctrl_client::ApiRequest::new(
        widgets.clone(),
        Some("default".into()),
        None,
        kctrl_client::Operation::Patch {
            name: "w".into(),
            patch: Patch::Strategic(json!({"spec": {"size": 2}})),
            params: PatchParams::default(),
        },
    );
    use kctrl_client::Backend;
    let err = fake.call(req).await.unwrap_err();
    assert_eq!(err.status().unwrap().code, Some(415));
}

#[tokio::test]
async fn delete_preconditions_and_finalizers() {
    let fake = FakeApi::new();
    let api: Api<ConfigMap> = Api::namespaced(fake.client(), "default");
    let mut cm = ConfigMap {
        metadata: meta("cfg"),
        ..Default::default()
    };
    cm.metadata.finalizers = Some(vec!["example.com/keep".into()]);
    let created = api.create(&pp(), &cm).await.unwrap();

    let bad_uid = DeleteParams {
        preconditions: Some(Preconditions {
            uid: Some("other".into()),
            resource_version: None,
        }),
        ..Default::default()
    };
    let err = api.delete("cfg", &bad_uid).await.unwrap_err();
    assert!(err.is_conflict());
    assert_eq!(
        err.status().unwrap().message.as_deref(),
        Some(format!(
            r#"Operation cannot be fulfilled on ConfigMap "cfg": the UID in the precondition (other) does not match the UID in record ({}). The object might have been deleted and then recreated"#,
            created.metadata.uid.as_deref().unwrap()
        ).as_str())
    );
    let bad_rv = DeleteParams {
        preconditions: Some(Preconditions {
            uid: None,
            resource_version: Some("1".into()),
        }),
        ..Default::default()
    };
    assert!(api.delete("cfg", &bad_rv).await.unwrap_err().is_conflict());

    // With a finalizer the object stays, marked for deletion.
    match api.delete("cfg", &DeleteParams::default()).await.unwrap() {
        DeleteOutcome::Pending(cm) => assert!(cm.metadata.deletion_timestamp.is_some()),
        other => panic!("unexpected {other:?}"),
    }
    let mut marked = api.get("cfg").await.unwrap();
    marked.metadata.finalizers = None;
    api.update(&pp(), &marked).await.unwrap();
    assert!(api.get_opt("cfg").await.unwrap().is_none());
    assert!(
        api.delete("cfg", &DeleteParams::default())
            .await
            .unwrap_err()
            .is_not_found()
    );
}

#[tokio::test]
async fn generate_name_and_missing_name() {
    let fake = FakeApi::new();
    let api: Api<Pod> = Api::namespaced(fake.client(), "default");
    let pod = Pod {
        metadata: ObjectMeta {
            generate_name: Some("web-".into()),
            ..Default::default()
        },
        ..Default::default()
    };
    let a = api.create(&pp(), &pod).await.unwrap();
    let name = a.metadata.name.unwrap();
    assert_eq!(name.len(), 9);
    assert!(name.starts_with("web-"));
    assert!(
        name[4..]
            .chars()
            .all(|c| "bcdfghjklmnpqrstvwxz2456789".contains(c))
    );
    // The action records the request as sent: no name.
    assert_eq!(fake.actions()[0].name().as_deref(), None);

    // Created, the answer read for its metadata alone: the generated name and the version.
    let b = api
        .clone()
        .without_managed_fields()
        .create_metadata(&pp(), &pod)
        .await
        .unwrap();
    let stored = api.get(b.metadata.name().unwrap()).await.unwrap();
    assert_ne!(b.metadata.name(), Some(name.as_str()));
    assert_eq!(
        b.metadata.resource_version(),
        stored.metadata.resource_version.as_deref()
    );
    assert_eq!(b.metadata.uid(), stored.metadata.uid.as_deref());
    assert_eq!(b.metadata.namespace(), Some("default"));
    assert!(stored.metadata.managed_fields.is_some());
    assert!(b.metadata.managed_fields().is_empty());

    let err = api.create(&pp(), &Pod::default()).await.unwrap_err();
    assert!(err.is_invalid());
    assert_eq!(
        err.status().unwrap().message.as_deref(),
        Some(
            r#"Pod "" is invalid: metadata.name: Required value: name or generateName is required"#
        )
    );
}

#[tokio::test]
async fn paging_and_selectors() {
    let fake = FakeApi::new();
    let api: Api<ConfigMap> = Api::namespaced(fake.client(), "default");
    for i in 0..5 {
        let mut cm = ConfigMap {
            metadata: meta(&format!("cm-{i}")),
            ..Default::default()
        };
        cm.metadata.labels = labels(&[("parity", if i % 2 == 0 { "even" } else { "odd" })]);
        api.create(&pp(), &cm).await.unwrap();
    }
    fake.add(&ConfigMap {
        metadata: ObjectMeta {
            name: Some("elsewhere".into()),
            namespace: Some("other".into()),
            ..Default::default()
        },
        ..Default::default()
    })
    .unwrap();
    let mut names = Vec::new();
    let mut params = ListParams {
        limit: Some(2),
        ..Default::default()
    };
    let mut pages = 0;
    let mut rvs = Vec::new();
    loop {
        let page = api.list(&params).await.unwrap();
        pages += 1;
        rvs.push(page.metadata.resource_version.clone());
        names.extend(page.items.into_iter().map(|c| c.metadata.name.unwrap()));
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(c) => {
                if pages == 1 {
                    assert_eq!(page.metadata.remaining_item_count, Some(3));
                }
                params.continue_token = Some(c);
            }
            None => break,
        }
    }
    assert_eq!(pages, 3);
    assert_eq!(names, ["cm-0", "cm-1", "cm-2", "cm-3", "cm-4"]);
    assert!(
        rvs.windows(2).all(|w| w[0] == w[1]),
        "pages report the first page's RV"
    );

    let even = api
        .list(&ListParams {
            label_selector: Some("parity=even".into()),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(even.items.len(), 3);
    let set = api
        .list(&ListParams {
            label_selector: Some("parity in (odd),parity!=even".into()),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(set.items.len(), 2);
    let by_name = api
        .list(&ListParams {
            field_selector: Some("metadata.name!=cm-0".into()),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(by_name.items.len(), 4);
    let all: Api<ConfigMap> = Api::all(fake.client());
    let other = all
        .list(&ListParams {
            field_selector: Some("metadata.namespace==other".into()),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(other.items.len(), 1);
    assert_eq!(
        other.metadata.resource_version.as_deref(),
        Some(fake.resource_version().to_string().as_str())
    );
    let err = api
        .list(&ListParams {
            field_selector: Some("spec.nodeName=x".into()),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.status().unwrap().code, Some(400));
    assert_eq!(err.to_string(), "field label not supported: spec.nodeName");
    let err = api
        .list(&ListParams {
            label_selector: Some("a in (".into()),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.status().unwrap().code, Some(400));
}

#[tokio::test]
async fn actions_and_reactors() {
    let fake = FakeApi::new();
    let rsets: Api<ReplicaSet> = Api::namespaced(fake.client(), "default");
    let pods: Api<Pod> = Api::namespaced(fake.client(), "default");
    let rs = fake
        .add(&ReplicaSet {
            metadata: ObjectMeta {
                name: Some("rs".into()),
                namespace: Some("default".into()),
                ..Default::default()
            },
            ..Default::default()
        })
        .unwrap();
    assert!(fake.actions().is_empty(), "seeding is not an action");

    // Fail the second update of replicasets with a Conflict.
    let n = Arc::new(AtomicUsize::new(0));
    let seen = n.clone();
    fake.prepend_reactor("update", "replicasets", move |a| {
        if seen.fetch_add(1, Ordering::SeqCst) == 1 {
            Reaction::Error(errors::stale_update_conflict(
                a.resource(),
                &a.name().unwrap_or_default(),
            ))
        } else {
            Reaction::Continue
        }
    });
    // Every create of pods fails with a 500.
    fake.prepend_reactor("create", "pods", |_| {
        Reaction::Error(errors::internal_error("boom"))
    });

    let mut a = rs.clone();
    a.metadata.labels = labels(&[("x", "1")]);
    let a = rsets.update(&pp(), &a).await.unwrap();
    let mut b = a.clone();
    b.metadata.labels = labels(&[("x", "2")]);
    assert!(rsets.update(&pp(), &b).await.unwrap_err().is_conflict());
    rsets.update(&pp(), &b).await.unwrap();
    let err = pods
        .create(
            &pp(),
            &Pod {
                metadata: meta("p"),
                ..Default::default()
            },
        )
        .await
        .unwrap_err();
    assert_eq!(err.status().unwrap().code, Some(500));
    assert_eq!(err.to_string(), "Internal error occurred: boom");
    assert!(fake.objects::<Pod>().is_empty());

    // Custom responses.
    fake.prepend_reactor("get", "*", |a| {
        if a.name().as_deref() == Some("magic") {
            Reaction::Respond(
                json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "magic"}}),
            )
        } else {
            Reaction::Continue
        }
    });
    assert_eq!(
        pods.get("magic").await.unwrap().metadata.name.as_deref(),
        Some("magic")
    );

    let actions = fake.actions();
    let summary: Vec<(&str, &str, Option<String>)> = actions
        .iter()
        .map(|a| (a.verb(), a.resource().plural.as_ref(), a.name()))
        .collect();
    assert_eq!(
        summary,
        [
            ("update", "replicasets", Some("rs".to_owned())),
            ("update", "replicasets", Some("rs".to_owned())),
            ("update", "replicasets", Some("rs".to_owned())),
            ("create", "pods", Some("p".to_owned())),
            ("get", "pods", Some("magic".to_owned())),
        ]
    );
    assert!(actions[0].matches("update", "replicasets"));
    assert!(actions[0].matches("*", "*"));
    assert_eq!(actions[0].namespace(), Some("default"));
    let sent: ReplicaSet = actions[2].object_as().unwrap();
    assert_eq!(sent.metadata.labels, labels(&[("x", "2")]));
    fake.clear_actions();
    assert!(fake.actions().is_empty());
    fake.clear_reactors();
    assert!(pods.get("magic").await.unwrap_err().is_not_found());

    rsets
        .patch(
            "rs",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": null}})),
        )
        .await
        .unwrap();
    let action = &fake.actions()[1];
    assert_eq!(action.verb(), "patch");
    assert!(matches!(action.patch(), Some(Patch::Merge(_))));
}

#[tokio::test]
async fn discovery() {
    use kctrl_client::Backend;
    let fake = FakeApi::new();
    let client = fake.client();
    let v = client.server_version().await.unwrap();
    assert_eq!((v.major.as_str(), v.minor.as_str()), ("1", "36"));
    assert!(
        client
            .is_served(&ResourceRef::of::<Deployment>())
            .await
            .unwrap()
    );
    let apps = fake.api_resources("apps/v1").await.unwrap();
    assert!(
        apps.resources
            .iter()
            .any(|r| r.name == "deployments/status")
    );
    assert!(
        fake.api_resources("example.com/v1")
            .await
            .unwrap_err()
            .is_not_found()
    );
    let events = fake.api_resources("events.k8s.io/v1").await.unwrap();
    assert_eq!(events.resources[0].name, "events");
}

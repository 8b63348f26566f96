//! What goes on the wire for each verb: method, path, query, headers and body.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kctrl_client::{
    Api, Client, DeleteOutcome, DeleteParams, HttpBackend, ListParams, Patch, PatchParams,
    PostParams, Preconditions, PropagationPolicy, WatchParams,
};
use serde_json::json;

use crate::server::{Reply, TestServer};
use crate::{client, unlimited};

fn pod_json(name: &str, ns: &str) -> serde_json::Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns, "resourceVersion": "5"}})
}

fn deployment(name: &str, ns: Option<&str>) -> Deployment {
    Deployment {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: ns.map(str::to_owned),
            ..Default::default()
        },
        ..Default::default()
    }
}

fn deployment_json(name: &str) -> serde_json::Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": "ns", "resourceVersion": "6"}})
}

#[tokio::test]
async fn get_sends_accept_and_user_agent() {
    let server = TestServer::start([Reply::json(200, pod_json("p", "ns"))]).await;
    let pods: Api<Pod> = Api::namespaced(client(unlimited(&server)), "ns");
    let pod = pods.get("p").await.unwrap();
    assert_eq!(pod.metadata.name.as_deref(), Some("p"));

    let r = server.single_request();
    assert_eq!(r.method, "GET");
    assert_eq!(r.path_and_query(), "/api/v1/namespaces/ns/pods/p");
    assert_eq!(r.header("accept"), Some("application/json"));
    let ua = r.header("user-agent").unwrap();
    assert!(
        ua.starts_with(&format!("kctrl/{} (", env!("CARGO_PKG_VERSION"))),
        "{ua}"
    );
    assert!(ua.ends_with(')') && ua.contains('/'), "{ua}");
    assert_eq!(r.header("content-type"), None);
    assert!(r.body.is_empty());
}

#[tokio::test]
async fn configured_user_agent_is_used() {
    let server = TestServer::start([Reply::json(200, pod_json("p", "ns"))]).await;
    let mut config = server.config();
    config.user_agent = Some("my-controller/1.2".into());
    let pods: Api<Pod> = Api::namespaced(client(HttpBackend::new(config).unwrap()), "ns");
    pods.get("p").await.unwrap();
    assert_eq!(
        server.single_request().header("user-agent"),
        Some("my-controller/1.2")
    );
}

#[tokio::test]
async fn list_across_all_namespaces_with_params() {
    let server = TestServer::start([Reply::json(
        200,
        json!({"apiVersion": "apps/v1", "kind": "DeploymentList", "metadata": {"resourceVersion": "10", "continue": "next"}, "items": [deployment_json("a")]}),
    )])
    .await;
    let deployments: Api<Deployment> = Api::all(client(unlimited(&server)));
    let list = deployments
        .list(&ListParams {
            label_selector: Some("app in (web,api),tier!=db".into()),
            field_selector: Some("metadata.name=a".into()),
            limit: Some(50),
            continue_token: Some("tok/en+=".into()),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(list.items.len(), 1);
    assert_eq!(list.metadata.continue_.as_deref(), Some("next"));

    let r = server.single_request();
    assert_eq!(r.method, "GET");
    assert_eq!(r.path, "/apis/apps/v1/deployments");
    let query: Vec<(String, String)> = url::form_urlencoded::parse(r.query.unwrap().as_bytes())
        .into_owned()
        .collect();
    assert_eq!(
        query,
        vec![
            ("labelSelector".into(), "app in (web,api),tier!=db".into()),
            ("fieldSelector".into(), "metadata.name=a".into()),
            ("limit".into(), "50".into()),
            ("continue".into(), "tok/en+=".into()),
        ]
    );
}

#[tokio::test]
async fn cluster_scoped_get() {
    let server = TestServer::start([Reply::json(
        200,
        json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}}),
    )])
    .await;
    let nodes: Api<Node> = Api::all(client(unlimited(&server)));
    nodes.get("n1").await.unwrap();
    assert_eq!(server.single_request().path_and_query(), "/api/v1/nodes/n1");
}

#[tokio::test]
async fn create_posts_json_to_the_collection() {
    let server = TestServer::start([Reply::json(201, deployment_json("web"))]).await;
    let deployments: Api<Deployment> = Api::namespaced(client(unlimited(&server)), "ns");
    let created = deployments
        .create(
            &PostParams {
                field_manager: Some("kctrl-test".into()),
                dry_run: true,
            },
            &deployment("web", None),
        )
        .await
        .unwrap();
    assert_eq!(created.metadata.resource_version.as_deref(), Some("6"));

    let r = server.single_request();
    assert_eq!(r.method, "POST");
    assert_eq!(
        r.path_and_query(),
        "/apis/apps/v1/namespaces/ns/deployments?fieldManager=kctrl-test&dryRun=All"
    );
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert_eq!(r.header("accept"), Some("application/json"));
    assert_eq!(r.json()["metadata"]["name"], "web");
    assert_eq!(r.json()["kind"], "Deployment");
}

#[tokio::test]
async fn update_and_update_status_put_to_the_object() {
    let server = TestServer::start([
        Reply::json(200, deployment_json("web")),
        Reply::json(200, deployment_json("web")),
    ])
    .await;
    let deployments: Api<Deployment> = Api::namespaced(client(unlimited(&server)), "ns");
    let d = deployment("web", Some("ns"));
    deployments
        .update(&PostParams::default(), &d)
        .await
        .unwrap();
    deployments
        .update_status(&PostParams::default(), &d)
        .await
        .unwrap();

    let r = server.requests();
    assert_eq!(r[0].method, "PUT");
    assert_eq!(
        r[0].path_and_query(),
        "/apis/apps/v1/namespaces/ns/deployments/web"
    );
    assert_eq!(r[0].header("content-type"), Some("application/json"));
    assert_eq!(r[0].json()["metadata"]["name"], "web");
    assert_eq!(r[1].method, "PUT");
    assert_eq!(
        r[1].path_and_query(),
        "/apis/apps/v1/namespaces/ns/deployments/web/status"
    );
}

#[tokio::test]
async fn patch_sends_the_patch_type_as_content_type() {
    let patches = [
        (
            Patch::Merge(json!({"spec": {"replicas": 3}})),
            "application/merge-patch+json",
        ),
        (
            Patch::Strategic(json!({"spec": {"replicas": 3}})),
            "application/strategic-merge-patch+json",
        ),
        (
            Patch::Json(json!([{"op": "replace", "path": "/spec/replicas", "value": 3}])),
            "application/json-patch+json",
        ),
    ];
    let server = TestServer::start((0..4).map(|_| Reply::json(200, deployment_json("web")))).await;
    let deployments: Api<Deployment> = Api::namespaced(client(unlimited(&server)), "ns");
    let params = PatchParams {
        field_manager: Some("m".into()),
        ..Default::default()
    };
    for (patch, _) in &patches {
        deployments.patch("web", &params, patch).await.unwrap();
    }
    deployments
        .patch_status("web", &PatchParams::default(), &patches[0].0)
        .await
        .unwrap();

    let r = server.requests();
    for (i, (patch, content_type)) in patches.iter().enumerate() {
        assert_eq!(r[i].method, "PATCH");
        assert_eq!(
            r[i].path_and_query(),
            "/apis/apps/v1/namespaces/ns/deployments/web?fieldManager=m"
        );
        assert_eq!(r[i].header("content-type"), Some(*content_type));
        assert_eq!(&r[i].json(), patch.body());
    }
    assert_eq!(
        r[3].path_and_query(),
        "/apis/apps/v1/namespaces/ns/deployments/web/status"
    );
}

#[tokio::test]
async fn apply_sends_json_as_an_apply_patch_with_manager_and_force() {
    use k8s_openapi::api::core::v1::ConfigMap;
    use kctrl_client::{DynamicObject, PartialObjectMetadata, ResourceRef, Scope};

    let configmap_json = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "cm", "namespace": "ns", "resourceVersion": "7"}});
    let server = TestServer::start(
        (0..5)
            .map(|i| {
                if i < 2 {
                    Reply::json(200, deployment_json("web"))
                } else {
                    Reply::json(200, configmap_json.clone())
                }
            })
            .collect::<Vec<_>>(),
    )
    .await;
    let client = client(unlimited(&server));
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "ns");
    let web = deployment("web", None);
    deployments
        .apply(&PatchParams::apply("ctl").force(), &web)
        .await
        .unwrap();
    deployments
        .apply_status(&PatchParams::apply("ctl").dry_run(), &web)
        .await
        .unwrap();
    // A dynamic object without apiVersion and kind gets the handle's resource's.
    let resource = ResourceRef::new("", "v1", "configmaps", "ConfigMap", Scope::Namespaced);
    let dynamic = Api::<DynamicObject>::namespaced_dynamic(client.clone(), "ns", &resource);
    let mut object = DynamicObject::default();
    object.metadata.name = Some("cm".into());
    object.data.insert("data".into(), json!({"k": "v"}));
    dynamic
        .apply(&PatchParams::apply("ctl"), &object)
        .await
        .unwrap();
    // A metadata-only handle sends the resource's own apiVersion and kind.
    let metadata: Api<PartialObjectMetadata<ConfigMap>> = Api::namespaced(client.clone(), "ns");
    let labels = ObjectMeta {
        name: Some("cm".into()),
        labels: Some([("team".to_owned(), "web".to_owned())].into()),
        ..Default::default()
    };
    metadata
        .apply_metadata(&PatchParams::apply("ctl"), &labels)
        .await
        .unwrap();
    // A raw apply patch through patch().
    let raw =
        Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}}));
    Api::<ConfigMap>::namespaced(client, "ns")
        .patch("cm", &PatchParams::apply("ctl"), &raw)
        .await
        .unwrap();

    let r = server.requests();
    assert_eq!(r.len(), 5);
    for request in &r {
        assert_eq!(request.method, "PATCH");
        assert_eq!(
            request.header("content-type"),
            Some("application/apply-patch+yaml")
        );
    }
    assert_eq!(
        r[0].path_and_query(),
        "/apis/apps/v1/namespaces/ns/deployments/web?fieldManager=ctl&force=true"
    );
    assert_eq!(r[0].json(), serde_json::to_value(&web).unwrap());
    assert_eq!(r[0].json()["kind"], "Deployment");
    assert_eq!(
        r[1].path_and_query(),
        "/apis/apps/v1/namespaces/ns/deployments/web/status?fieldManager=ctl&dryRun=All"
    );
    assert_eq!(
        r[2].path_and_query(),
        "/api/v1/namespaces/ns/configmaps/cm?fieldManager=ctl"
    );
    assert_eq!(
        r[2].json(),
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}, "data": {"k": "v"}})
    );
    assert_eq!(
        r[3].json(),
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "cm", "labels": {"team": "web"}}})
    );
    assert!(
        r[3].header("accept")
            .is_some_and(|a| a.starts_with("application/json;as=PartialObjectMetadata;")),
        "{:?}",
        r[3].header("accept")
    );
    assert_eq!(&r[4].json(), raw.body());
}

#[tokio::test]
async fn patch_params_that_do_not_fit_the_patch_are_refused_before_sending() {
    let server = TestServer::start(Vec::<Reply>::new()).await;
    let deployments: Api<Deployment> = Api::namespaced(client(unlimited(&server)), "ns");
    let apply = Patch::Apply(json!({"apiVersion": "apps/v1", "kind": "Deployment"}));
    let refused = |e: kctrl_client::Error| match e {
        kctrl_client::Error::InvalidRequest(message) => message,
        other => panic!("expected InvalidRequest, got {other:?}"),
    };

    let e = refused(
        deployments
            .patch("web", &PatchParams::default(), &apply)
            .await
            .unwrap_err(),
    );
    assert!(
        e.starts_with("patch deployments.apps \"web\": a server-side apply needs a field manager"),
        "{e}"
    );
    let e = refused(
        deployments
            .patch_status("web", &PatchParams::apply(""), &apply)
            .await
            .unwrap_err(),
    );
    assert!(
        e.starts_with("patch deployments.apps/status \"web\""),
        "{e}"
    );
    assert!(e.contains("it is empty"), "{e}");
    let e = refused(
        deployments
            .apply(&PatchParams::default(), &deployment("web", None))
            .await
            .unwrap_err(),
    );
    assert!(e.contains("needs a field manager"), "{e}");
    let e = refused(
        deployments
            .patch(
                "web",
                &PatchParams::default().force(),
                &Patch::Merge(json!({})),
            )
            .await
            .unwrap_err(),
    );
    assert!(
        e.contains("force is only valid for a server-side apply"),
        "{e}"
    );
    let e = refused(
        deployments
            .patch(
                "web",
                &PatchParams::apply("m"),
                &Patch::Apply(json!({"metadata": {}})),
            )
            .await
            .unwrap_err(),
    );
    assert!(e.contains("has no \"apiVersion\""), "{e}");
    let e = refused(
        deployments
            .apply(&PatchParams::apply("m"), &deployment("", None))
            .await
            .unwrap_err(),
    );
    assert!(e.contains("no metadata.name"), "{e}");
    assert!(server.requests().is_empty(), "nothing was sent");
}

#[tokio::test]
async fn delete_sends_delete_options() {
    let server = TestServer::start([
        Reply::json(
            200,
            json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"}),
        ),
        Reply::json(200, pod_json("p", "ns")),
    ])
    .await;
    let pods: Api<Pod> = Api::namespaced(client(unlimited(&server)), "ns");
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: Some("u-1".into()),
            resource_version: Some("5".into()),
        }),
        propagation_policy: Some(PropagationPolicy::Background),
        grace_period_seconds: Some(0),
        dry_run: true,
    };
    assert!(matches!(
        pods.delete("p", &params).await.unwrap(),
        DeleteOutcome::Deleted(_)
    ));
    assert!(matches!(
        pods.delete("p", &DeleteParams::default()).await.unwrap(),
        DeleteOutcome::Pending(_)
    ));

    let r = server.requests();
    assert_eq!(r[0].method, "DELETE");
    assert_eq!(r[0].path_and_query(), "/api/v1/namespaces/ns/pods/p");
    assert_eq!(r[0].header("content-type"), Some("application/json"));
    assert_eq!(
        r[0].json(),
        json!({
            "kind": "DeleteOptions", "apiVersion": "v1",
            "preconditions": {"uid": "u-1", "resourceVersion": "5"},
            "propagationPolicy": "Background",
            "gracePeriodSeconds": 0,
            "dryRun": ["All"],
        })
    );
    assert_eq!(
        r[1].json(),
        json!({"kind": "DeleteOptions", "apiVersion": "v1"})
    );
}

#[tokio::test]
async fn watch_request_line() {
    let server = TestServer::start([Reply::watch(&[])]).await;
    let pods: Api<Pod> = Api::namespaced(client(unlimited(&server)), "ns");
    let _ = pods
        .watch(&WatchParams {
            label_selector: Some("app=web".into()),
            resource_version: Some("100".into()),
            timeout_seconds: Some(290),
            send_initial_events: false,
            ..Default::default()
        })
        .await
        .unwrap();
    let r = server.single_request();
    assert_eq!(r.method, "GET");
    assert_eq!(
        r.path_and_query(),
        "/api/v1/namespaces/ns/pods?watch=1&labelSelector=app%3Dweb&resourceVersion=100&allowWatchBookmarks=true&timeoutSeconds=290"
    );
    assert_eq!(r.header("accept"), Some("application/json"));
}

#[tokio::test]
async fn server_path_prefix_is_kept() {
    let server =
        TestServer::start_with_prefix([Reply::json(200, pod_json("p", "ns"))], "/k8s/clusters/c1")
            .await;
    let pods: Api<Pod> = Api::namespaced(client(unlimited(&server)), "ns");
    pods.get("p").await.unwrap();
    assert_eq!(
        server.single_request().path,
        "/k8s/clusters/c1/api/v1/namespaces/ns/pods/p"
    );
}

#[tokio::test]
async fn special_characters_are_percent_encoded() {
    let server = TestServer::start([
        Reply::json(200, pod_json("a b", "ns")),
        Reply::json(
            200,
            json!({"apiVersion": "v1", "kind": "PodList", "metadata": {}, "items": []}),
        ),
    ])
    .await;
    let pods: Api<Pod> = Api::namespaced(client(unlimited(&server)), "team a");
    pods.get("a b?c#d:e").await.unwrap();
    pods.list(&ListParams {
        field_selector: Some("status.phase!=Running&x=1".into()),
        ..Default::default()
    })
    .await
    .unwrap();
    let r = server.requests();
    assert_eq!(
        r[0].path,
        "/api/v1/namespaces/team%20a/pods/a%20b%3Fc%23d:e"
    );
    assert_eq!(r[0].query, None);
    assert_eq!(
        r[1].path_and_query(),
        "/api/v1/namespaces/team%20a/pods?fieldSelector=status.phase%21%3DRunning%26x%3D1"
    );
}

#[tokio::test]
async fn names_that_would_change_the_path_are_rejected_before_sending() {
    let server = TestServer::start([]).await;
    let pods: Api<Pod> = Api::namespaced(client(unlimited(&server)), "ns");
    for bad in ["..", "a/b", "100%"] {
        let err = pods.get(bad).await.unwrap_err();
        assert!(
            matches!(err, kctrl_client::Error::InvalidRequest(_)),
            "{bad}: {err}"
        );
    }
    assert!(server.requests().is_empty());
}

#[tokio::test]
async fn try_from_config_uses_the_default_namespace() {
    let server = TestServer::start([Reply::json(200, pod_json("p", "team-1"))]).await;
    let mut config = server.config();
    config.default_namespace = "team-1".into();
    let client = Client::try_from_config(config).unwrap();
    assert_eq!(client.default_namespace(), "team-1");
    Api::<Pod>::default_namespaced(client)
        .get("p")
        .await
        .unwrap();
    assert_eq!(
        server.single_request().path,
        "/api/v1/namespaces/team-1/pods/p"
    );
}

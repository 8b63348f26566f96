//! Custom resources from `#[derive(CustomResource)]` against a real kube-apiserver: the
//! generated CustomResourceDefinitions are accepted (sample-controller's Foo, a spec using
//! every schema construct the generator handles, two versions merged), objects round-trip
//! through `Api` and informers, the API server prunes and validates as the schema says,
//! status goes through the `status` subresource, sample-controller's `example-foo.yaml`
//! applies unchanged, a missing CRD is reported by name, and an embedded PodSpec's
//! containers merge by name in server-side apply (upstream's list semantics, which the
//! generator adds).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Container, PodSpec, PodTemplateSpec};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kctrl_client::crd::{CustomResourceExt, VersionSet};
use kctrl_client::{
    Api, Client, CustomResource, DeleteParams, DynamicObject, ListParams, PostParams, ResourceRef,
    WatchEvent, WatchParams,
};
use kctrl_e2e::{TestNamespace, install_crd, require_cluster, uninstall_crd, wait_until};
use kctrl_informer::SharedInformerFactory;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;
use tokio_util::sync::CancellationToken;

const TIMEOUT: Duration = Duration::from_secs(60);

/// sample-controller's `artifacts/examples/example-foo.yaml` (k8s.io/sample-controller), as
/// it is.
const EXAMPLE_FOO: &str = "apiVersion: samplecontroller.k8s.io/v1alpha1
kind: Foo
metadata:
  name: example-foo
spec:
  deploymentName: example-foo
  replicas: 1
";

/// FooSpec is the spec for a Foo resource.
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[resource(
    group = "samplecontroller.k8s.io",
    version = "v1alpha1",
    kind = "Foo",
    namespaced,
    status = "FooStatus",
    derive = "PartialEq",
    shortname = "fo",
    printcolumn(
        name = "Deployment",
        type = "string",
        json_path = ".spec.deploymentName"
    ),
    printcolumn(
        name = "Available",
        type = "integer",
        json_path = ".status.availableReplicas"
    ),
    scale(
        spec_replicas_path = ".spec.replicas",
        status_replicas_path = ".status.availableReplicas"
    ),
    selectable_field = ".spec.deploymentName",
    annotation(
        "api-approved.kubernetes.io",
        "unapproved, experimental-only; please get an approval from Kubernetes API reviewers if you're trying to develop a CRD in the *.k8s.io or *.kubernetes.io groups"
    )
)]
#[serde(rename_all = "camelCase")]
struct FooSpec {
    deployment_name: String,
    #[schemars(range(min = 1, max = 10))]
    replicas: Option<i32>,
}

/// FooStatus is the status for a Foo resource.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct FooStatus {
    available_replicas: i32,
}

/// A spec with every construct the schema generator handles.
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[resource(
    group = "e2e.kctrl.example.com",
    version = "v1",
    kind = "Shape",
    namespaced,
    status = "ShapeStatus",
    derive = "PartialEq"
)]
#[serde(rename_all = "camelCase")]
struct ShapeSpec {
    template: PodTemplateSpec,
    selector: LabelSelector,
    port: IntOrString,
    memory: Quantity,
    phase: Phase,
    #[serde(skip_serializing_if = "Option::is_none")]
    optional_phase: Option<Phase>,
    action: Action,
    probe: Probe,
    number_or_name: NumberOrName,
    labels: BTreeMap<String, String>,
    limits: HashMap<String, Vec<i64>>,
    tags: BTreeSet<String>,
    anything: serde_json::Value,
    extra: Extra,
    #[serde(default = "default_window")]
    window: Window,
    maybe: Vec<Option<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    note: Option<String>,
    ratio: f64,
    count: u32,
}

fn default_window() -> Window {
    Window {
        start: None,
        minutes: 30,
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
enum Phase {
    Pending,
    Running,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
enum Action {
    Scale { replicas: i32 },
    Restart(String),
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type")]
enum Probe {
    Http { path: String },
    Tcp { port: u16 },
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
enum NumberOrName {
    Number(i32),
    Name(String),
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
struct Extra {
    kept: String,
    #[serde(flatten)]
    rest: BTreeMap<String, serde_json::Value>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
struct Window {
    #[serde(skip_serializing_if = "Option::is_none")]
    start: Option<String>,
    minutes: i32,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
struct ShapeStatus {
    conditions: Vec<String>,
}

mod v1alpha1 {
    use super::*;

    /// An early version of Gizmo.
    #[derive(CustomResource, Clone, Debug, Serialize, Deserialize, JsonSchema)]
    #[resource(
        group = "e2e.kctrl.example.com",
        version = "v1alpha1",
        kind = "Gizmo",
        namespaced
    )]
    pub(super) struct GizmoSpec {
        pub(super) size: i32,
        pub(super) color: Option<String>,
    }
}

mod v1 {
    use super::*;

    /// The stored version of Gizmo.
    #[derive(CustomResource, Clone, Debug, Serialize, Deserialize, JsonSchema)]
    #[resource(
        group = "e2e.kctrl.example.com",
        version = "v1",
        kind = "Gizmo",
        namespaced,
        storage
    )]
    pub(super) struct GizmoSpec {
        pub(super) size: i32,
        pub(super) color: Option<String>,
    }
}

/// Waits until a list of `resource` fails as the resource is not served, and returns the
/// message.
async fn not_served_message(client: &Client, resource: &ResourceRef) -> String {
    let api = Api::<DynamicObject>::all_dynamic(client.clone(), resource);
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    loop {
        match api.list(&ListParams::default()).await {
            Err(e) if e.is_not_found() => return e.to_string(),
            other => assert!(
                tokio::time::Instant::now() < deadline,
                "{} is still served: {other:?}",
                resource.qualified_name()
            ),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn foo_spec(deployment: &str, replicas: i32) -> FooSpec {
    FooSpec {
        deployment_name: deployment.to_owned(),
        replicas: Some(replicas),
    }
}

#[tokio::test]
async fn sample_controller_foo_end_to_end() {
    let cluster = require_cluster!();
    let client = cluster.admin();
    let foos_ref = ResourceRef::of::<Foo>();
    let crd = Foo::try_crd().expect("Foo's schema is structural");
    uninstall_crd(&client, &Foo::crd_name()).await;

    // Before the CRD exists, a list names the resource and the likely cause.
    let message = not_served_message(&client, &foos_ref).await;
    assert!(
        message.starts_with(
            "foos.samplecontroller.k8s.io: the server has no such resource - is its \
             CustomResourceDefinition installed?"
        ),
        "{message}"
    );

    install_crd(&client, &crd, &foos_ref).await;
    let ns = TestNamespace::create(&client, "crd-foo").await;
    let foos: Api<Foo> = Api::namespaced(client.clone(), &ns.name);

    // An informer, a lister and a metadata-only informer of Foo.
    let factory = SharedInformerFactory::builder(client.clone(), Duration::ZERO)
        .namespace(ns.name.clone())
        .build();
    let lister = factory.lister::<Foo>();
    let metadata_lister = factory.metadata_lister::<Foo>();
    let cancel = CancellationToken::new();
    factory.start(&cancel);
    let synced = factory.wait_for_cache_sync(&cancel).await;
    assert!(synced.values().all(|s| *s), "{synced:?}");

    // example-foo.yaml, parsed into the typed Foo (its apiVersion and kind checked) and
    // created as it is.
    let mut example: Foo = serde_yaml_ng::from_str(EXAMPLE_FOO).unwrap();
    assert_eq!(example.spec, foo_spec("example-foo", 1));
    example.metadata.namespace = Some(ns.name.clone());
    let created = foos.create(&PostParams::default(), &example).await.unwrap();
    assert_eq!(created.spec, example.spec);
    assert_eq!(created.status, None);
    assert_eq!(created.metadata.generation, Some(1));

    // get, list and the caches.
    assert_eq!(foos.get("example-foo").await.unwrap(), created);
    let list = foos.list(&ListParams::default()).await.unwrap();
    assert_eq!(list.items, std::slice::from_ref(&created));
    wait_until("the informer to cache example-foo", TIMEOUT, || {
        lister.namespaced(&ns.name).get("example-foo").as_deref() == Some(&created)
    })
    .await;
    wait_until(
        "the metadata informer to cache example-foo",
        TIMEOUT,
        || {
            metadata_lister
                .namespaced(&ns.name)
                .get("example-foo")
                .is_some()
        },
    )
    .await;
    // The selectable field works as a field selector.
    let selected = foos
        .list(&ListParams {
            field_selector: Some("spec.deploymentName=example-foo".into()),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(selected.items.len(), 1);

    // watch: a spec change is a MODIFIED event with the new generation.
    let mut events = foos
        .watch(&WatchParams {
            resource_version: list.metadata.resource_version.clone(),
            ..Default::default()
        })
        .await
        .unwrap();
    let mut scaled = created.clone();
    scaled.spec.replicas = Some(3);
    let updated = foos.update(&PostParams::default(), &scaled).await.unwrap();
    assert_eq!(updated.metadata.generation, Some(2));
    match tokio::time::timeout(TIMEOUT, events.next()).await {
        Ok(Some(Ok(WatchEvent::Modified(f)))) => assert_eq!(f, updated),
        other => panic!("expected MODIFIED, got {other:?}"),
    }
    wait_until("the informer to see replicas 3", TIMEOUT, || {
        lister
            .namespaced(&ns.name)
            .get("example-foo")
            .is_some_and(|f| f.spec.replicas == Some(3))
    })
    .await;

    // Status goes through /status: update_status changes it (and not the spec)...
    let mut with_status = updated.clone();
    with_status.status = Some(FooStatus {
        available_replicas: 3,
    });
    with_status.spec.replicas = Some(9);
    let written = foos
        .update_status(&PostParams::default(), &with_status)
        .await
        .unwrap();
    assert_eq!(written.status, with_status.status);
    assert_eq!(written.spec.replicas, Some(3));
    assert_eq!(written.metadata.generation, Some(2));
    // ... and a normal update ignores it.
    let mut status_in_update = written.clone();
    status_in_update.status = Some(FooStatus {
        available_replicas: 0,
    });
    status_in_update.spec.replicas = Some(4);
    let after = foos
        .update(&PostParams::default(), &status_in_update)
        .await
        .unwrap();
    assert_eq!(after.spec.replicas, Some(4));
    assert_eq!(after.status, written.status);

    // Values the schema forbids are refused with the API server's message.
    let err = foos
        .create(
            &PostParams::default(),
            &Foo::new("too-many", foo_spec("d", 11)),
        )
        .await
        .unwrap_err();
    assert!(err.is_invalid(), "{err:?}");
    assert!(
        err.to_string()
            .contains("spec.replicas: Invalid value: 11: spec.replicas in body should be less than or equal to 10"),
        "{err}"
    );
    let dynamic = Api::<DynamicObject>::namespaced_dynamic(client.clone(), &ns.name, &foos_ref);
    let mut as_string = DynamicObject::new("replicas-as-string", &foos_ref);
    as_string.data.insert(
        "spec".into(),
        json!({"deploymentName": "d", "replicas": "two"}),
    );
    let err = dynamic
        .create(&PostParams::default(), &as_string)
        .await
        .unwrap_err();
    assert!(err.is_invalid(), "{err:?}");
    assert!(
        err.to_string().contains("spec.replicas")
            && err.to_string().contains("must be of type integer"),
        "{err}"
    );
    let mut no_name = DynamicObject::new("no-deployment-name", &foos_ref);
    no_name.data.insert("spec".into(), json!({"replicas": 1}));
    let err = dynamic
        .create(&PostParams::default(), &no_name)
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("spec.deploymentName: Required value"),
        "{err}"
    );

    // Unknown fields are pruned, as the schema says.
    let mut unknown = DynamicObject::new("with-unknown-fields", &foos_ref);
    unknown.data.insert(
        "spec".into(),
        json!({"deploymentName": "d", "replicas": 2, "color": "red"}),
    );
    unknown.data.insert("topLevel".into(), json!({"a": 1}));
    let stored = dynamic
        .create(&PostParams::default(), &unknown)
        .await
        .unwrap();
    assert_eq!(
        stored.data.get("spec"),
        Some(&json!({"deploymentName": "d", "replicas": 2}))
    );
    assert!(!stored.data.contains_key("topLevel"));
    let typed = foos.get("with-unknown-fields").await.unwrap();
    assert_eq!(typed.spec, foo_spec("d", 2));

    // kubectl apply -f example-foo.yaml, unchanged, in another namespace.
    if let Some(kubectl) = cluster.kubectl_binary() {
        let other = TestNamespace::create(&client, "crd-apply").await;
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("example-foo.yaml");
        std::fs::write(&file, EXAMPLE_FOO).unwrap();
        let out = tokio::process::Command::new(&kubectl)
            .arg("--kubeconfig")
            .arg(&cluster.kubeconfig)
            .args(["-n", &other.name, "apply", "-f"])
            .arg(&file)
            .output()
            .await
            .unwrap();
        assert!(
            out.status.success(),
            "kubectl apply: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let applied = Api::<Foo>::namespaced(client.clone(), &other.name)
            .get("example-foo")
            .await
            .unwrap();
        assert_eq!(applied.spec, foo_spec("example-foo", 1));
        // The short name and printer columns are kubectl's.
        let out = tokio::process::Command::new(&kubectl)
            .arg("--kubeconfig")
            .arg(&cluster.kubeconfig)
            .args(["-n", &other.name, "get", "fo"])
            .output()
            .await
            .unwrap();
        let table = String::from_utf8_lossy(&out.stdout);
        assert!(
            table.starts_with("NAME")
                && table.contains("DEPLOYMENT")
                && table.contains("AVAILABLE"),
            "{table}"
        );
        assert!(table.contains("example-foo"), "{table}");
        other.delete().await;
    } else {
        eprintln!(
            "e2e: no kubectl found (set KCTRL_KUBECTL); skipping kubectl apply of example-foo.yaml"
        );
    }

    // Deletion reaches the informer.
    foos.delete("example-foo", &DeleteParams::default())
        .await
        .unwrap();
    wait_until("the informer to drop example-foo", TIMEOUT, || {
        lister.namespaced(&ns.name).get("example-foo").is_none()
    })
    .await;

    cancel.cancel();
    factory.shutdown().await;
    ns.delete().await;
    // Cleanup: without its CRD the resource is reported missing again, by name.
    uninstall_crd(&client, &Foo::crd_name()).await;
    let message = not_served_message(&client, &foos_ref).await;
    assert!(
        message.contains("is its CustomResourceDefinition installed?"),
        "{message}"
    );
}

fn shape(name: &str) -> Shape {
    Shape::new(
        name,
        ShapeSpec {
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(BTreeMap::from([("app".to_owned(), "web".to_owned())])),
                    ..Default::default()
                }),
                spec: Some(PodSpec {
                    containers: vec![Container {
                        name: "web".into(),
                        image: Some("registry.k8s.io/pause:3.10".into()),
                        ..Default::default()
                    }],
                    ..Default::default()
                }),
            },
            selector: LabelSelector {
                match_labels: Some(BTreeMap::from([("app".to_owned(), "web".to_owned())])),
                ..Default::default()
            },
            port: IntOrString::String("http".into()),
            memory: Quantity("64Mi".into()),
            phase: Phase::Running,
            optional_phase: Some(Phase::Pending),
            action: Action::Scale { replicas: 2 },
            probe: Probe::Tcp { port: 8080 },
            number_or_name: NumberOrName::Number(7),
            labels: BTreeMap::from([("a".to_owned(), "b".to_owned())]),
            limits: HashMap::from([("cpu".to_owned(), vec![1, 2])]),
            tags: BTreeSet::from(["x".to_owned(), "y".to_owned()]),
            anything: json!({"nested": [1, "two", {"three": null}]}),
            extra: Extra {
                kept: "k".into(),
                rest: BTreeMap::from([("free".to_owned(), json!({"form": true}))]),
            },
            window: Window {
                start: Some("09:00".into()),
                minutes: 15,
            },
            maybe: vec![Some("a".into()), None],
            note: None,
            ratio: 0.5,
            count: 3,
        },
    )
}

#[tokio::test]
async fn every_schema_construct_is_accepted_and_round_trips() {
    let cluster = require_cluster!();
    let client = cluster.admin();
    let crd = Shape::try_crd().expect("Shape's schema is structural");
    // The API server has no warning about the schema (an unrecognized format, say).
    if let Some(kubectl) = cluster.kubectl_binary() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("shapes.yaml");
        std::fs::write(&file, serde_yaml_ng::to_string(&crd).unwrap()).unwrap();
        let out = tokio::process::Command::new(&kubectl)
            .arg("--kubeconfig")
            .arg(&cluster.kubeconfig)
            .args(["create", "--dry-run=server", "-f"])
            .arg(&file)
            .output()
            .await
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success(),
            "kubectl create --dry-run=server: {stderr}"
        );
        assert!(!stderr.contains("Warning"), "{stderr}");
    }
    install_crd(&client, &crd, &ResourceRef::of::<Shape>()).await;
    let ns = TestNamespace::create(&client, "crd-shape").await;
    let shapes: Api<Shape> = Api::namespaced(client.clone(), &ns.name);

    // Everything written is read back as it was: nothing the types hold is pruned.
    let mut s = shape("full");
    s.metadata.namespace = Some(ns.name.clone());
    let created = shapes.create(&PostParams::default(), &s).await.unwrap();
    assert_eq!(created.spec, s.spec);
    let mut other = shape("variants");
    other.spec.action = Action::Restart("now".into());
    other.spec.probe = Probe::Http {
        path: "/healthz".into(),
    };
    other.spec.number_or_name = NumberOrName::Name("seven".into());
    other.spec.port = IntOrString::Int(8080);
    other.spec.optional_phase = None;
    let created = shapes.create(&PostParams::default(), &other).await.unwrap();
    assert_eq!(created.spec, other.spec);

    // The schema is enforced where the types say so.
    let dynamic = Api::<DynamicObject>::namespaced_dynamic(
        client.clone(),
        &ns.name,
        &ResourceRef::of::<Shape>(),
    );
    let base = serde_json::to_value(shape("x")).unwrap();
    let refused = |patch: serde_json::Value, name: &str| {
        let mut obj = base.clone();
        obj["metadata"]["name"] = json!(name);
        for (k, v) in patch.as_object().unwrap() {
            obj["spec"][k] = v.clone();
        }
        serde_json::from_value::<DynamicObject>(obj).unwrap()
    };
    for (patch, name, message) in [
        (
            json!({"phase": "Stopped"}),
            "bad-phase",
            "spec.phase: Unsupported value: \"Stopped\"",
        ),
        (
            json!({"action": {"scale": {"replicas": 1}, "restart": "x"}}),
            "two-variants",
            "must validate one and only one schema (oneOf)",
        ),
        (
            json!({"tags": ["x", "x"]}),
            "duplicate-tags",
            "spec.tags[1]: Duplicate value: \"x\"",
        ),
        (
            json!({"count": -1}),
            "negative",
            "spec.count in body should be greater than or equal to 0",
        ),
        (json!({"port": true}), "bool-port", "spec.port"),
    ] {
        let err = dynamic
            .create(&PostParams::default(), &refused(patch, name))
            .await
            .unwrap_err();
        assert!(err.is_invalid(), "{name}: {err:?}");
        assert!(err.to_string().contains(message), "{name}: {err}");
    }

    // A default applies where a field is missing; a null for an Option (nullable) is kept
    // and reads back as None.
    let mut defaulted = refused(json!({}), "defaulted");
    defaulted
        .data
        .get_mut("spec")
        .unwrap()
        .as_object_mut()
        .unwrap()
        .remove("window");
    defaulted.data.get_mut("spec").unwrap()["optionalPhase"] = serde_json::Value::Null;
    dynamic
        .create(&PostParams::default(), &defaulted)
        .await
        .unwrap();
    let got = shapes.get("defaulted").await.unwrap();
    assert_eq!(got.spec.window, default_window());
    assert_eq!(got.spec.optional_phase, None);

    ns.delete().await;
    uninstall_crd(&client, &Shape::crd_name()).await;
}

#[tokio::test]
async fn versions_merged_into_one_crd_serve_each_other() {
    let cluster = require_cluster!();
    let client = cluster.admin();
    let crd = VersionSet::new()
        .with_strict::<v1alpha1::Gizmo>()
        .with_strict::<v1::Gizmo>()
        .crd()
        .unwrap();
    install_crd(&client, &crd, &ResourceRef::of::<v1::Gizmo>()).await;
    wait_until_served(&client, &ResourceRef::of::<v1alpha1::Gizmo>()).await;
    let ns = TestNamespace::create(&client, "crd-versions").await;
    let old: Api<v1alpha1::Gizmo> = Api::namespaced(client.clone(), &ns.name);
    let new: Api<v1::Gizmo> = Api::namespaced(client.clone(), &ns.name);
    old.create(
        &PostParams::default(),
        &v1alpha1::Gizmo::new(
            "g",
            v1alpha1::GizmoSpec {
                size: 2,
                color: Some("blue".into()),
            },
        ),
    )
    .await
    .unwrap();
    // Read at the other version: apiVersion converted by the API server, checked by ours.
    let read = new.get("g").await.unwrap();
    assert_eq!(
        (read.spec.size, read.spec.color.as_deref()),
        (2, Some("blue"))
    );
    let stored = Api::<CustomResourceDefinition>::all(client.clone())
        .get(&v1::Gizmo::crd_name())
        .await
        .unwrap();
    assert_eq!(
        stored.status.and_then(|s| s.stored_versions),
        Some(vec!["v1".to_owned()])
    );
    ns.delete().await;
    uninstall_crd(&client, &v1::Gizmo::crd_name()).await;
}

async fn wait_until_served(client: &Client, resource: &ResourceRef) {
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    while !client.is_served(resource).await.unwrap() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} is not served",
            resource.api_version()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A custom resource embedding a Pod's spec, whose lists merge as a Pod's do.
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[resource(
    group = "e2e.kctrl.example.com",
    version = "v1",
    kind = "PodHolder",
    namespaced
)]
struct PodHolderSpec {
    pod: PodSpec,
}

/// The `fieldsV1` of `manager`'s apply entry in `managedFields`.
fn applied_fields(obj: &PodHolder, manager: &str) -> serde_json::Value {
    let entries = obj.metadata.managed_fields.as_deref().unwrap_or_default();
    let entry = entries
        .iter()
        .find(|e| e.manager.as_deref() == Some(manager) && e.operation.as_deref() == Some("Apply"))
        .unwrap_or_else(|| panic!("no Apply entry of {manager} in {entries:?}"));
    entry
        .fields_v1
        .as_ref()
        .map(|f| f.0.clone())
        .unwrap_or_default()
}

#[tokio::test]
async fn embedded_containers_merge_by_name_in_server_side_apply() {
    let cluster = require_cluster!();
    let client = cluster.admin();
    let crd = PodHolder::try_crd().expect("PodHolder's schema is structural");
    install_crd(&client, &crd, &ResourceRef::of::<PodHolder>()).await;
    // The API server keeps the list semantics the generator gave the embedded PodSpec.
    let stored = Api::<CustomResourceDefinition>::all(client.clone())
        .get(&PodHolder::crd_name())
        .await
        .unwrap();
    let schema = stored.spec.versions[0]
        .schema
        .as_ref()
        .and_then(|s| s.open_api_v3_schema.as_ref())
        .unwrap();
    let containers = &schema.properties.as_ref().unwrap()["spec"]
        .properties
        .as_ref()
        .unwrap()["pod"]
        .properties
        .as_ref()
        .unwrap()["containers"];
    assert_eq!(containers.x_kubernetes_list_type.as_deref(), Some("map"));
    assert_eq!(
        containers.x_kubernetes_list_map_keys,
        Some(vec!["name".to_owned()])
    );

    let ns = TestNamespace::create(&client, "crd-merge").await;
    let holders: Api<PodHolder> = Api::namespaced(client.clone(), &ns.name);
    let container = |name: &str| Container {
        name: name.into(),
        image: Some("registry.k8s.io/pause:3.10".into()),
        ..Default::default()
    };
    // Manager A applies two containers; the first with a port, whose `protocol` (a map key
    // of `ports`) takes upstream's default.
    let mut first = container("one");
    first.ports = Some(vec![k8s_openapi::api::core::v1::ContainerPort {
        container_port: 80,
        ..Default::default()
    }]);
    let mut holder = PodHolder::new(
        "merge",
        PodHolderSpec {
            pod: PodSpec {
                containers: vec![first, container("two")],
                ..Default::default()
            },
        },
    );
    holder.metadata.namespace = Some(ns.name.clone());
    let applied = holders
        .apply(&kctrl_client::PatchParams::apply("manager-a"), &holder)
        .await
        .unwrap();
    assert_eq!(applied.spec.pod.containers.len(), 2);
    let port = &applied.spec.pod.containers[0].ports.as_deref().unwrap()[0];
    assert_eq!(port.protocol.as_deref(), Some("TCP"));

    // Manager B applies a field of the second container only, without force. A map list
    // merges it into that container (B co-owns its key and owns the new field); an atomic
    // list, owned whole by A, would answer 409 Conflict (or, forced, keep only "two").
    let change = json!({
        "apiVersion": "e2e.kctrl.example.com/v1",
        "kind": "PodHolder",
        "metadata": {"name": "merge", "namespace": ns.name},
        "spec": {"pod": {"containers": [{"name": "two", "workingDir": "/b"}]}},
    });
    let merged = holders
        .patch(
            "merge",
            &kctrl_client::PatchParams::apply("manager-b"),
            &kctrl_client::Patch::Apply(change),
        )
        .await
        .expect("a change to one container merges into the map list");
    let names: Vec<&str> = merged
        .spec
        .pod
        .containers
        .iter()
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(names, ["one", "two"], "both containers remain");
    let (one, two) = (
        &merged.spec.pod.containers[0],
        &merged.spec.pod.containers[1],
    );
    assert_eq!(one.working_dir, None);
    assert_eq!(one.ports, applied.spec.pod.containers[0].ports);
    assert_eq!(two.working_dir.as_deref(), Some("/b"));
    assert_eq!(two.image.as_deref(), Some("registry.k8s.io/pause:3.10"));
    // B owns exactly its field of container "two", by the container's key.
    let b = applied_fields(&merged, "manager-b");
    let two_fields = &b["f:spec"]["f:pod"]["f:containers"]["k:{\"name\":\"two\"}"];
    assert!(two_fields.get("f:workingDir").is_some(), "{b}");
    assert!(two_fields.get("f:image").is_none(), "{b}");
    assert!(
        b["f:spec"]["f:pod"]["f:containers"]
            .get("k:{\"name\":\"one\"}")
            .is_none(),
        "{b}"
    );
    // A's entry still covers both of its containers.
    let a = applied_fields(&merged, "manager-a");
    for key in ["k:{\"name\":\"one\"}", "k:{\"name\":\"two\"}"] {
        assert!(
            a["f:spec"]["f:pod"]["f:containers"].get(key).is_some(),
            "{a}"
        );
    }

    // A re-applies its configuration unchanged: B's field stays.
    let again = holders
        .apply(&kctrl_client::PatchParams::apply("manager-a"), &holder)
        .await
        .unwrap();
    assert_eq!(again.spec.pod.containers.len(), 2);
    assert_eq!(
        again.spec.pod.containers[1].working_dir.as_deref(),
        Some("/b")
    );

    ns.delete().await;
    uninstall_crd(&client, &PodHolder::crd_name()).await;
}

//! Whole objects in protobuf on the wire: what a handle built with `protobuf()` asks for on
//! writes, and how the generated decoders read the answer.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{ReplicaSet, ReplicaSetSpec, ReplicaSetStatus};
use k8s_openapi::api::core::v1::{Container, PodSpec, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use kctrl_client::protobuf::{MAGIC, PROTOBUF};
use kctrl_client::{Api, PatchParams, PostParams};
use serde_json::json;

use crate::server::{Reply, TestServer};
use crate::{client, unlimited};

/// A length-delimited field.
fn len(number: u32, value: &[u8]) -> Vec<u8> {
    let mut out = varint(u64::from(number << 3 | 2));
    out.extend(varint(value.len() as u64));
    out.extend_from_slice(value);
    out
}

/// A varint field.
fn int(number: u32, value: u64) -> Vec<u8> {
    let mut out = varint(u64::from(number << 3));
    out.extend(varint(value));
    out
}

fn varint(mut v: u64) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let byte = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(byte);
            return out;
        }
        out.push(byte | 0x80);
    }
}

fn labels_entry(number: u32, k: &str, v: &str) -> Vec<u8> {
    len(
        number,
        &[len(1, k.as_bytes()), len(2, v.as_bytes())].concat(),
    )
}

/// The `k8s\0`-enveloped protobuf of a ReplicaSet, written field by field as the API server
/// writes them: non-pointer fields always, zero or not.
fn replica_set_body() -> Vec<u8> {
    let metadata = [
        len(1, b"web-1"),
        len(2, b""),
        len(3, b"ns"),
        len(6, b"8"),
        int(7, 2),
        len(8, &[]), // the zero creationTimestamp
        labels_entry(11, "app", "web"),
        len(17, b"managed fields are skipped"),
    ]
    .concat();
    let template = [
        len(1, &labels_entry(11, "app", "web")),
        len(2, &len(2, &[len(1, b"c"), len(2, b"nginx")].concat())),
    ]
    .concat();
    let spec = [
        int(1, 3),
        len(2, &labels_entry(1, "app", "web")),
        len(3, &template),
        int(4, 0), // minReadySeconds, omitempty: absent from JSON
    ]
    .concat();
    let status = [int(1, 3), int(2, 0), int(3, 2)].concat();
    envelope(&[len(1, &metadata), len(2, &spec), len(3, &status)].concat())
}

fn envelope(object: &[u8]) -> Vec<u8> {
    let envelope = [
        len(1, &[len(1, b"apps/v1"), len(2, b"ReplicaSet")].concat()),
        len(2, object),
        len(3, b""),
        len(4, b""),
    ]
    .concat();
    [MAGIC.as_slice(), &envelope].concat()
}

fn expected() -> ReplicaSet {
    let app = || Some(BTreeMap::from([("app".to_owned(), "web".to_owned())]));
    ReplicaSet {
        metadata: ObjectMeta {
            name: Some("web-1".into()),
            namespace: Some("ns".into()),
            resource_version: Some("8".into()),
            generation: Some(2),
            labels: app(),
            ..Default::default()
        },
        spec: ReplicaSetSpec {
            replicas: Some(3),
            selector: LabelSelector {
                match_labels: app(),
                ..Default::default()
            },
            template: Some(PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: app(),
                    ..Default::default()
                }),
                spec: Some(PodSpec {
                    containers: vec![Container {
                        name: "c".into(),
                        image: Some("nginx".into()),
                        ..Default::default()
                    }],
                    ..Default::default()
                }),
            }),
            min_ready_seconds: None,
        },
        status: Some(ReplicaSetStatus {
            replicas: 3,
            observed_generation: Some(2),
            ..Default::default()
        }),
    }
}

#[tokio::test]
async fn writes_of_a_protobuf_handle_ask_for_protobuf_and_decode_it() {
    let server = TestServer::start([
        Reply::Full {
            status: 200,
            headers: vec![("content-type", PROTOBUF.to_owned())],
            body: replica_set_body().into(),
        },
        // A server that answers JSON anyway is read as JSON.
        Reply::json(
            200,
            json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
                   "metadata": {"name": "web-1", "namespace": "ns", "resourceVersion": "9"}}),
        ),
    ])
    .await;
    let api: Api<ReplicaSet> = Api::namespaced(client(unlimited(&server)), "ns").protobuf();
    let sent = expected();
    let answer = api.update(&PostParams::default(), &sent).await.unwrap();
    assert_eq!(answer, expected());
    let answer = api.update(&PostParams::default(), &sent).await.unwrap();
    assert_eq!(answer.metadata.resource_version.as_deref(), Some("9"));

    for request in server.requests() {
        assert_eq!(request.method, "PUT");
        let accept = request.header("accept").unwrap_or_default();
        assert!(accept.starts_with(PROTOBUF), "{accept}");
        assert_eq!(request.header("content-type"), Some("application/json"));
    }
}

#[tokio::test]
async fn a_malformed_protobuf_answer_is_an_error_naming_the_object() {
    // The spec claims 127 bytes; one follows.
    let body = envelope(&[len(1, &len(1, b"web-1")), vec![0x12, 0x7f, 0x08]].concat());
    let server = TestServer::start([Reply::Full {
        status: 200,
        headers: vec![("content-type", PROTOBUF.to_owned())],
        body: body.into(),
    }])
    .await;
    let api: Api<ReplicaSet> = Api::namespaced(client(unlimited(&server)), "ns").protobuf();
    let err = api.get("web-1").await.unwrap_err();
    let text = format!(
        "{err}: {}",
        std::error::Error::source(&err)
            .map(ToString::to_string)
            .unwrap_or_default()
    );
    assert!(
        text.contains("malformed protobuf ReplicaSet: at field 2"),
        "{text}"
    );
}

/// A Deployment and a ReplicaSet with every kind of field set (those of
/// `tests/e2e/protobuf.rs`), as a kube-apiserver 1.36 answered a GET of each in protobuf and in
/// JSON at one resourceVersion (tests/data/): the generated decoders must build what
/// k8s-openapi builds from the JSON, managedFields aside.
#[test]
fn captured_api_server_answers_decode_as_their_json() {
    fn check<K>(name: &str)
    where
        K: kctrl_client::protobuf::FromProtobuf
            + kctrl_client::protobuf::ToProtobuf
            + serde::de::DeserializeOwned
            + k8s_openapi::Metadata<Ty = ObjectMeta>
            + PartialEq
            + std::fmt::Debug,
    {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data");
        let pb = std::fs::read(dir.join(format!("{name}-maximal.pb"))).unwrap();
        let json = std::fs::read(dir.join(format!("{name}-maximal.json"))).unwrap();
        let mut from_json: K = serde_json::from_slice(&json).unwrap();
        assert!(from_json.metadata().managed_fields.is_some());
        from_json.metadata_mut().managed_fields = None;
        let from_pb: K = kctrl_client::protobuf::from_enveloped(&pb).unwrap();
        assert_eq!(from_pb, from_json, "{name}");
        // Written back to protobuf and read again: nothing lost.
        let message = from_pb.to_protobuf().expect("no managedFields to refuse");
        assert_eq!(
            K::from_protobuf(&message).unwrap(),
            from_json,
            "{name} round trip"
        );
    }
    check::<k8s_openapi::api::apps::v1::Deployment>("deployments");
    check::<ReplicaSet>("replicasets");
}

/// A decoded object is cached for as long as it exists, so its lists must not carry the spare
/// room of `Vec::push` (four elements for the first): the captured ReplicaSet's short lists
/// (one container, its command, ports, args, volume mounts...) are held at exactly their length.
#[test]
fn decoded_short_lists_take_no_spare_room() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data");
    let pb = std::fs::read(dir.join("replicasets-maximal.pb")).unwrap();
    let rs: ReplicaSet = kctrl_client::protobuf::from_enveloped(&pb).unwrap();
    fn exact<T>(what: &str, list: &Vec<T>) {
        assert!(!list.is_empty(), "the fixture has {what}");
        if list.len() <= 4 {
            assert_eq!(list.capacity(), list.len(), "{what}");
        }
    }
    let spec = rs.spec.template.as_ref().unwrap().spec.as_ref().unwrap();
    exact("containers", &spec.containers);
    exact("initContainers", spec.init_containers.as_ref().unwrap());
    let c = &spec.containers[0];
    exact("command", c.command.as_ref().unwrap());
    exact("args", c.args.as_ref().unwrap());
    exact("ports", c.ports.as_ref().unwrap());
    exact("volumeMounts", c.volume_mounts.as_ref().unwrap());
    exact(
        "supplementalGroups (packed integers)",
        spec.security_context
            .as_ref()
            .unwrap()
            .supplemental_groups
            .as_ref()
            .unwrap(),
    );
}

#[tokio::test]
async fn protobuf_bodies_send_created_and_updated_objects_in_protobuf() {
    let answer = || {
        Reply::json(
            200,
            json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
                   "metadata": {"name": "web-1", "namespace": "ns", "resourceVersion": "9"}}),
        )
    };
    let server = TestServer::start([answer(), answer(), answer()]).await;
    let api: Api<ReplicaSet> = Api::namespaced(client(unlimited(&server)), "ns").protobuf_bodies();
    let rs = expected();
    api.create(&PostParams::default(), &rs).await.unwrap();
    api.update_status(&PostParams::default(), &rs)
        .await
        .unwrap();
    // An object with managedFields is sent as JSON: the encoder does not write them.
    let mut with_managed = rs.clone();
    with_managed.metadata.managed_fields = Some(Vec::new());
    api.update(&PostParams::default(), &with_managed)
        .await
        .unwrap();

    let requests = server.requests();
    for request in &requests[..2] {
        assert_eq!(request.header("content-type"), Some(PROTOBUF));
        assert!(request.body.starts_with(MAGIC));
        let decoded: ReplicaSet = kctrl_client::protobuf::from_enveloped(&request.body).unwrap();
        assert_eq!(decoded, rs);
    }
    assert_eq!(requests[1].method, "PUT");
    assert!(requests[1].path_and_query().ends_with("/web-1/status"));
    assert_eq!(requests[2].header("content-type"), Some("application/json"));
    assert_eq!(requests[2].json()["metadata"]["managedFields"], json!([]));
}

#[tokio::test]
async fn applies_stay_json_on_a_protobuf_handle() {
    let answer = Reply::json(
        200,
        json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
               "metadata": {"name": "web-1", "namespace": "ns", "resourceVersion": "9"}}),
    );
    let server = TestServer::start([answer]).await;
    let api: Api<ReplicaSet> = Api::namespaced(client(unlimited(&server)), "ns")
        .protobuf()
        .protobuf_bodies();
    let rs = expected();
    api.apply(&PatchParams::apply("m"), &rs).await.unwrap();
    let request = server.single_request();
    assert_eq!(
        request.header("content-type"),
        Some("application/apply-patch+yaml")
    );
    assert_eq!(request.json(), serde_json::to_value(&rs).unwrap());
}

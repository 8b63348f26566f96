//! Whole Deployments and ReplicaSets read in protobuf (the generated decoders of
//! `kctrl_client::protobuf::objects`) against the same objects read in JSON, from a real
//! kube-apiserver: gets, lists, watch events and the answers of writes must decode to equal
//! values.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use kctrl_client::protobuf::{FromProtobuf, ProtobufError};
use kctrl_client::versioned::Versioned;
use kctrl_client::{Api, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use kctrl_e2e::{TestNamespace, require_cluster};
use serde_json::json;

/// Objects decoded from protobuf, so the test knows protobuf was really spoken.
static FROM_PROTOBUF: AtomicUsize = AtomicUsize::new(0);

fn counted<K: FromProtobuf>(message: &[u8]) -> Result<K, ProtobufError> {
    FROM_PROTOBUF.fetch_add(1, Ordering::Relaxed);
    K::from_protobuf(message)
}

/// A pod template that sets as many fields as the API server accepts without other objects
/// or feature gates: every kind of value the decoders handle (strings, integers, booleans,
/// lists of scalars and of messages, maps of strings and of quantities, int-or-strings,
/// inlined structs such as a volume's source and a probe's handler, optional structs left
/// empty) appears at least once.
fn template(app: &str) -> serde_json::Value {
    json!({
        "metadata": {
            "labels": {"app": app, "tier": "web"},
            "annotations": {"note": "maximal \"template\" \u{e9}"}
        },
        "spec": {
            "initContainers": [{
                "name": "sidecar",
                "image": "registry.k8s.io/pause:3.10",
                "restartPolicy": "Always",
                "resources": {}
            }],
            "containers": [{
                "name": "main",
                "image": "registry.k8s.io/pause:3.10",
                "command": ["/pause"],
                "args": ["-v", ""],
                "workingDir": "/srv",
                "ports": [
                    {"name": "http", "containerPort": 8080, "protocol": "TCP"},
                    {"containerPort": 53, "protocol": "UDP", "hostPort": 5353, "hostIP": "127.0.0.1"}
                ],
                "envFrom": [
                    {"prefix": "CM_", "configMapRef": {"name": "cm", "optional": true}},
                    {"secretRef": {"name": "secret"}}
                ],
                "env": [
                    {"name": "PLAIN", "value": "v"},
                    {"name": "EMPTY", "value": ""},
                    {"name": "POD", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}},
                    {"name": "MEM", "valueFrom": {"resourceFieldRef": {"containerName": "main", "resource": "requests.memory", "divisor": "1Mi"}}},
                    {"name": "CMK", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "k", "optional": false}}},
                    {"name": "SK", "valueFrom": {"secretKeyRef": {"name": "secret", "key": "k"}}}
                ],
                "resources": {
                    "limits": {"cpu": "500m", "memory": "128Mi"},
                    "requests": {"cpu": "250m", "memory": "64Mi"}
                },
                "resizePolicy": [{"resourceName": "cpu", "restartPolicy": "NotRequired"}],
                "volumeMounts": [
                    {"name": "scratch", "mountPath": "/scratch"},
                    {"name": "config", "mountPath": "/etc/config", "readOnly": true, "subPath": "sub"},
                    {"name": "projected", "mountPath": "/var/run/projected", "mountPropagation": "None"}
                ],
                "livenessProbe": {
                    "httpGet": {"path": "/healthz", "port": 8080, "scheme": "HTTP",
                                "httpHeaders": [{"name": "X-Probe", "value": "1"}]},
                    "initialDelaySeconds": 3, "timeoutSeconds": 2, "periodSeconds": 10,
                    "successThreshold": 1, "failureThreshold": 4, "terminationGracePeriodSeconds": 5
                },
                "readinessProbe": {"tcpSocket": {"port": "http"}, "periodSeconds": 5},
                "startupProbe": {"grpc": {"port": 9090, "service": "health"}},
                "lifecycle": {
                    "postStart": {"exec": {"command": ["true"]}},
                    "preStop": {"sleep": {"seconds": 2}}
                },
                "terminationMessagePath": "/dev/termination-log",
                "terminationMessagePolicy": "FallbackToLogsOnError",
                "imagePullPolicy": "IfNotPresent",
                "securityContext": {
                    "capabilities": {"add": ["NET_BIND_SERVICE"], "drop": ["ALL"]},
                    "privileged": false,
                    "seLinuxOptions": {"level": "s0:c1,c2", "role": "r", "type": "t", "user": "u"},
                    "runAsUser": 1000, "runAsGroup": 1000, "runAsNonRoot": true,
                    "readOnlyRootFilesystem": true, "allowPrivilegeEscalation": false,
                    "seccompProfile": {"type": "RuntimeDefault"},
                    "appArmorProfile": {"type": "RuntimeDefault"}
                },
                "stdin": true, "stdinOnce": true, "tty": true
            }],
            "volumes": [
                {"name": "scratch", "emptyDir": {"medium": "Memory", "sizeLimit": "1Gi"}},
                {"name": "empty", "emptyDir": {}},
                {"name": "config", "configMap": {"name": "cm", "defaultMode": 420, "optional": true,
                    "items": [{"key": "k", "path": "p", "mode": 256}]}},
                {"name": "secret", "secret": {"secretName": "secret", "optional": false}},
                {"name": "projected", "projected": {"defaultMode": 292, "sources": [
                    {"serviceAccountToken": {"audience": "api", "expirationSeconds": 3600, "path": "token"}},
                    {"downwardAPI": {"items": [
                        {"path": "name", "fieldRef": {"fieldPath": "metadata.name"}},
                        {"path": "cpu", "resourceFieldRef": {"containerName": "main", "resource": "limits.cpu", "divisor": "1m"}}
                    ]}},
                    {"configMap": {"name": "cm", "items": [{"key": "a", "path": "a"}]}}
                ]}},
                {"name": "host", "hostPath": {"path": "/var/tmp", "type": "DirectoryOrCreate"}},
                {"name": "nfs", "nfs": {"server": "nfs.example", "path": "/export", "readOnly": true}},
                {"name": "csi", "csi": {"driver": "csi.example.com", "readOnly": true,
                    "volumeAttributes": {"a": "b"}, "nodePublishSecretRef": {"name": "secret"}}},
                {"name": "ephemeral", "ephemeral": {"volumeClaimTemplate": {
                    "metadata": {"labels": {"claim": "yes"}},
                    "spec": {
                        "accessModes": ["ReadWriteOnce"],
                        "resources": {"requests": {"storage": "1Gi"}},
                        "storageClassName": "standard",
                        "volumeMode": "Filesystem",
                        "selector": {"matchExpressions": [{"key": "disk", "operator": "In", "values": ["ssd"]}]}
                    }
                }}}
            ],
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 45,
            "dnsPolicy": "None",
            "dnsConfig": {"nameservers": ["10.0.0.10"], "searches": ["svc.local"],
                          "options": [{"name": "ndots", "value": "2"}, {"name": "edns0"}]},
            "nodeSelector": {"disk": "ssd"},
            "serviceAccountName": "default",
            "automountServiceAccountToken": false,
            "shareProcessNamespace": true,
            "hostname": "web",
            "subdomain": "sub",
            "schedulerName": "default-scheduler",
            "enableServiceLinks": false,
            "securityContext": {
                "runAsUser": 1000, "runAsGroup": 3000, "runAsNonRoot": true,
                "supplementalGroups": [4000, 5000], "fsGroup": 2000,
                "fsGroupChangePolicy": "OnRootMismatch",
                "sysctls": [{"name": "kernel.shm_rmid_forced", "value": "0"}],
                "seccompProfile": {"type": "Localhost", "localhostProfile": "profiles/p.json"}
            },
            "imagePullSecrets": [{"name": "pull"}],
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{
                        "matchExpressions": [{"key": "zone", "operator": "In", "values": ["a", "b"]}],
                        "matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]
                    }]},
                    "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 10,
                        "preference": {"matchExpressions": [{"key": "fast", "operator": "Exists"}]}}]
                },
                "podAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": [{
                        "labelSelector": {"matchLabels": {"app": "db"}},
                        "topologyKey": "kubernetes.io/hostname",
                        "namespaces": ["other"]
                    }]
                },
                "podAntiAffinity": {
                    "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 50, "podAffinityTerm": {
                        "labelSelector": {"matchExpressions": [{"key": "app", "operator": "In", "values": [app]}]},
                        "topologyKey": "topology.kubernetes.io/zone",
                        "namespaceSelector": {}
                    }}]
                }
            },
            "tolerations": [
                {"key": "dedicated", "operator": "Equal", "value": "web", "effect": "NoExecute", "tolerationSeconds": 30},
                {"operator": "Exists"}
            ],
            "hostAliases": [{"ip": "127.0.0.2", "hostnames": ["alias.local"]}],
            "readinessGates": [{"conditionType": "example.com/ready"}],
            "topologySpreadConstraints": [{
                "maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": {"app": app}}, "minDomains": 2,
                "nodeAffinityPolicy": "Honor", "nodeTaintsPolicy": "Ignore"
            }],
            "os": {"name": "linux"}
        }
    })
}

fn maximal_deployment(name: &str) -> Deployment {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"app": name}, "annotations": {"a": "1", "empty": ""}},
        "spec": {
            "replicas": 0,
            "selector": {
                "matchLabels": {"app": name},
                "matchExpressions": [{"key": "tier", "operator": "In", "values": ["web"]}]
            },
            "template": template(name),
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": 1}},
            "minReadySeconds": 5,
            "revisionHistoryLimit": 3,
            "paused": true,
            "progressDeadlineSeconds": 120
        }
    }))
    .expect("a Deployment")
}

/// A ReplicaSet of its own labels (no Deployment adopts it), with no replicas, so no Pods.
fn maximal_replica_set(name: &str) -> ReplicaSet {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {
            "replicas": 0,
            "minReadySeconds": 7,
            "selector": {"matchLabels": {"app": name}},
            "template": template(name)
        }
    }))
    .expect("a ReplicaSet")
}

/// Reads `name` of `K` through both encodings, lists both ways, then watches both ways
/// while `change` is applied, and asserts every pair equal.
async fn same_either_way<K>(json: Api<K>, pb: Api<K>, name: &str, change: Patch)
where
    K: k8s_openapi::Resource
        + k8s_openapi::ListableResource
        + k8s_openapi::Metadata<Ty = k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta>
        + serde::de::DeserializeOwned
        + serde::Serialize
        + Clone
        + std::fmt::Debug
        + PartialEq
        + Send
        + Sync
        + 'static,
{
    assert!(pb.asks_for_protobuf() && !json.asks_for_protobuf());
    let before = FROM_PROTOBUF.load(Ordering::Relaxed);
    // Controllers may write the object between the two reads: read again until both saw
    // the same resourceVersion.
    let mut tries = 0;
    let lb = loop {
        tries += 1;
        assert!(
            tries <= 50,
            "{} {name}: no two reads at one resourceVersion",
            K::KIND
        );
        let (a, b) = (json.get(name).await.unwrap(), pb.get(name).await.unwrap());
        let (la, lb) = (
            json.list(&ListParams::default()).await.unwrap(),
            pb.list(&ListParams::default()).await.unwrap(),
        );
        if a.metadata().resource_version != b.metadata().resource_version
            || la.metadata.resource_version != lb.metadata.resource_version
        {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        }
        assert_eq!(a, b, "{} {name}: JSON and protobuf gets differ", K::KIND);
        assert_eq!(la.items, lb.items, "{}: lists differ", K::KIND);
        break lb;
    };
    assert!(
        FROM_PROTOBUF.load(Ordering::Relaxed) > before,
        "reads were decoded from protobuf"
    );

    let rv = lb.metadata.resource_version.clone();
    let params = WatchParams {
        resource_version: rv,
        timeout_seconds: Some(30),
        ..Default::default()
    };
    let mut wa = Box::pin(json.watch(&params).await.unwrap());
    let mut wb = Box::pin(pb.watch(&params).await.unwrap());
    json.patch(name, &PatchParams::default(), &change)
        .await
        .unwrap();
    let (ea, eb) = (next_modified(&mut wa).await, next_modified(&mut wb).await);
    assert_eq!(ea, eb, "{} {name}: watch events differ", K::KIND);

    // A write's answer, asked for in protobuf, against the same version read in JSON.
    let before = FROM_PROTOBUF.load(Ordering::Relaxed);
    let mut tries = 0;
    loop {
        tries += 1;
        assert!(
            tries <= 50,
            "{} {name}: no JSON read at the written version",
            K::KIND
        );
        let written = pb
            .patch(name, &PatchParams::default(), &touch(tries))
            .await
            .unwrap();
        let read = json.get(name).await.unwrap();
        if read.metadata().resource_version == written.metadata().resource_version {
            assert_eq!(
                read,
                written,
                "{} {name}: the write's answer differs",
                K::KIND
            );
            break;
        }
    }
    assert!(
        FROM_PROTOBUF.load(Ordering::Relaxed) > before,
        "the write's answer was protobuf"
    );
}

/// A patch that changes an annotation to `n`.
fn touch(n: usize) -> Patch {
    Patch::Merge(json!({"metadata": {"annotations": {"touched": n.to_string()}}}))
}

/// The object of the next MODIFIED event (bookmarks skipped).
async fn next_modified<K: std::fmt::Debug>(
    stream: &mut (impl futures::Stream<Item = Result<WatchEvent<K>, kctrl_client::Error>> + Unpin),
) -> K {
    let event = async {
        loop {
            match stream.next().await.expect("an event").unwrap() {
                WatchEvent::Modified(obj) => return obj,
                WatchEvent::Bookmark(_) => {}
                other => panic!("unexpected {other:?}"),
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(20), event)
        .await
        .expect("a MODIFIED event in time")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn whole_deployments_and_replica_sets_from_protobuf_equal_json() {
    let cluster = require_cluster!();
    let client = cluster.admin();
    let ns = TestNamespace::create(&client, "protobuf-objects").await;

    let deployments =
        Api::<Deployment>::namespaced(client.clone(), &ns.name).without_managed_fields();
    let created = deployments
        .create(&PostParams::default(), &maximal_deployment("maximal"))
        .await
        .unwrap();
    assert!(
        created
            .spec
            .into_value()
            .unwrap()
            .template
            .spec
            .unwrap()
            .volumes
            .unwrap()
            .len()
            >= 9
    );
    deployments
        .create(&PostParams::default(), &maximal_deployment("second"))
        .await
        .unwrap();
    same_either_way(
        deployments.clone(),
        deployments.clone().with_protobuf_decoder(counted::<Deployment>),
        "maximal",
        Patch::Merge(json!({"metadata": {"labels": {"changed": "yes"}},
            "spec": {"template": {"spec": {"containers": [{"name": "main", "image": "registry.k8s.io/pause:3.9"}]}}}})),
    )
    .await;

    let replica_sets =
        Api::<ReplicaSet>::namespaced(client.clone(), &ns.name).without_managed_fields();
    replica_sets
        .create(&PostParams::default(), &maximal_replica_set("maximal"))
        .await
        .unwrap();
    same_either_way(
        replica_sets.clone(),
        replica_sets
            .clone()
            .with_protobuf_decoder(counted::<ReplicaSet>),
        "maximal",
        Patch::Merge(
            json!({"metadata": {"annotations": {"x": "y"}}, "spec": {"minReadySeconds": 0}}),
        ),
    )
    .await;
    ns.delete().await;
}

/// The same objects created and updated with protobuf bodies: the API server stores what it
/// stores for their JSON.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_written_in_protobuf_equal_objects_written_in_json() {
    let cluster = require_cluster!();
    let client = cluster.admin();
    let ns = TestNamespace::create(&client, "protobuf-bodies").await;
    let json_d = Api::<Deployment>::namespaced(client.clone(), &ns.name).without_managed_fields();
    let pb_d = json_d.clone().protobuf_bodies();
    let json_rs = Api::<ReplicaSet>::namespaced(client.clone(), &ns.name).without_managed_fields();
    let pb_rs = json_rs.clone().protobuf_bodies();

    let a = json_d
        .create(&PostParams::default(), &maximal_deployment("by-json"))
        .await
        .unwrap();
    let b = pb_d
        .create(&PostParams::default(), &maximal_deployment("by-pb"))
        .await
        .unwrap();
    assert_eq!(comparable(a.clone()), comparable(b.clone()));
    // An update of spec and status each way.
    let change = |mut d: Deployment| {
        let spec = d.spec.get_mut();
        spec.template.spec.as_mut().unwrap().containers[0].image =
            Some("registry.k8s.io/pause:3.9".into());
        spec.paused = None;
        spec.min_ready_seconds = Some(0);
        d
    };
    let a = json_d
        .update(&PostParams::default(), &change(a))
        .await
        .unwrap();
    let b = pb_d
        .update(&PostParams::default(), &change(b))
        .await
        .unwrap();
    assert_eq!(comparable(a.clone()), comparable(b.clone()));
    let with_status = |mut d: Deployment| {
        d.status = Some(serde_json::from_value(json!({
            "observedGeneration": 2, "replicas": 0, "collisionCount": 1,
            "conditions": [{"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable",
                            "message": "m", "lastUpdateTime": "2026-01-02T03:04:05Z",
                            "lastTransitionTime": "2026-01-02T03:04:05Z"}]
        })).unwrap());
        d
    };
    let a = json_d
        .update_status(&PostParams::default(), &with_status(a))
        .await
        .unwrap();
    let b = pb_d
        .update_status(&PostParams::default(), &with_status(b))
        .await
        .unwrap();
    assert!(a.status.as_ref().unwrap().conditions.is_some());
    assert_eq!(comparable(a), comparable(b));

    let a = json_rs
        .create(&PostParams::default(), &maximal_replica_set("by-json"))
        .await
        .unwrap();
    let b = pb_rs
        .create(&PostParams::default(), &maximal_replica_set("by-pb"))
        .await
        .unwrap();
    assert_eq!(comparable(a), comparable(b));
    ns.delete().await;
}

/// What two objects written the same way share: all but identity, versions, times, and the
/// name the labels and selectors were built from.
fn comparable<K>(mut object: K) -> serde_json::Value
where
    K: k8s_openapi::Metadata<Ty = k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta>
        + serde::Serialize,
{
    *object.metadata_mut() = Default::default();
    anonymous(serde_json::to_value(object).unwrap())
}

/// `value` with the object names `by-json` and `by-pb` made one.
fn anonymous(value: serde_json::Value) -> serde_json::Value {
    let text = value
        .to_string()
        .replace("by-json", "NAME")
        .replace("by-pb", "NAME");
    serde_json::from_str(&text).unwrap()
}

//! Server-side apply cases, each a sequence of writes by named field managers with the
//! outcome every step must have: the object's fields, who owns what (`managedFields`), or
//! the failure (code, reason, message).
//!
//! One table, two servers: `crates/fake/tests/apply.rs` runs it against kctrl-fake, and
//! `tests/e2e/apply.rs` (which includes this file) against a real kube-apiserver, where it
//! also runs every case on a fake beside it and requires the two to observe the same. The
//! expectations were taken from kube-apiserver 1.37.
//!
//! Kept to what both can show alike: the fake does not default fields (the apiserver's
//! defaults are never compared) and records an updater's fields without knowing Go's
//! types, so updaters are only compared on ConfigMaps, whose fields are all maps.

#![allow(dead_code, reason = "each including test uses part of the table")]

use std::collections::BTreeSet;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kctrl_client::{
    Api, ApiRequest, Client, DynamicObject, Error, Operation, PartialObjectMetadata, Patch,
    PatchParams, PostParams, ResourceRef,
};
use serde_json::{Value, json};

/// The resource a case writes.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Kind {
    ConfigMap,
    Deployment,
}

impl Kind {
    fn resource(self) -> ResourceRef {
        match self {
            Kind::ConfigMap => ResourceRef::of::<ConfigMap>(),
            Kind::Deployment => ResourceRef::of::<Deployment>(),
        }
    }

    fn api_version(self) -> &'static str {
        match self {
            Kind::ConfigMap => "v1",
            Kind::Deployment => "apps/v1",
        }
    }

    fn kind(self) -> &'static str {
        match self {
            Kind::ConfigMap => "ConfigMap",
            Kind::Deployment => "Deployment",
        }
    }
}

/// Which handle an apply goes through.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Via {
    /// `Api<K>::apply` with the body decoded as the typed object.
    Typed,
    /// `Api<K>::patch` with `Patch::Apply` and the body as JSON.
    Json,
    /// `Api<DynamicObject>::apply`, the body without apiVersion and kind.
    Dynamic,
    /// `Api<PartialObjectMetadata<K>>::apply_metadata` with the body's metadata.
    Metadata,
}

/// What a step does. Bodies hold only the fields written; apiVersion, kind and
/// `metadata.name` are added.
#[derive(Clone, Debug)]
pub(crate) enum Action {
    /// A server-side apply of the main resource.
    Apply { body: Value, force: bool, via: Via },
    /// A server-side apply of the status subresource.
    ApplyStatus { body: Value },
    /// A server-side apply with `dryRun=All`: answered, not stored.
    DryRunApply { body: Value },
    /// A create.
    Create { body: Value },
    /// An update (PUT) of the object as read, without its managedFields (as an informer
    /// caches it), with `body` merged in.
    Update { body: Value },
    /// A JSON merge patch (by the client's default field manager when the step's is
    /// empty).
    MergePatch { body: Value },
    /// A patch sent through the backend as given, as `Api` would refuse to send it: the
    /// server's own checks answer. The body is sent as it is.
    Raw { patch: Patch, params: PatchParams },
}

/// What a step must end with.
#[derive(Clone, Debug)]
pub(crate) enum Expect {
    /// The write succeeded; the stored object then has these fields (JSON pointer and
    /// value, `None` for absent) and exactly these managers.
    Object {
        fields: Vec<(&'static str, Option<Value>)>,
        managers: Vec<Owner>,
    },
    /// The write succeeded without writing: the object kept its resourceVersion.
    Unchanged,
    /// The write failed with this code, reason and message.
    Failure {
        code: u16,
        reason: &'static str,
        message: &'static str,
    },
}

/// One `managedFields` entry as a step expects it.
#[derive(Clone, Debug)]
pub(crate) struct Owner {
    pub(crate) manager: &'static str,
    /// `Apply` or `Update`.
    pub(crate) operation: &'static str,
    /// `status`, or empty.
    pub(crate) subresource: &'static str,
    /// The exact `fieldsV1`.
    pub(crate) fields: Value,
    /// Whether the entry has a `time` (an applier whose apply changed nothing has none).
    pub(crate) timed: bool,
}

fn applier(manager: &'static str, fields: Value) -> Owner {
    Owner {
        manager,
        operation: "Apply",
        subresource: "",
        fields,
        timed: true,
    }
}

fn updater(manager: &'static str, fields: Value) -> Owner {
    Owner {
        operation: "Update",
        ..applier(manager, fields)
    }
}

/// One write by one field manager.
#[derive(Clone, Debug)]
pub(crate) struct Step {
    pub(crate) manager: &'static str,
    pub(crate) action: Action,
    pub(crate) expect: Expect,
}

/// A named sequence of writes to one object.
#[derive(Clone, Debug)]
pub(crate) struct Case {
    pub(crate) name: &'static str,
    pub(crate) kind: Kind,
    pub(crate) steps: Vec<Step>,
}

fn step(manager: &'static str, action: Action, expect: Expect) -> Step {
    Step {
        manager,
        action,
        expect,
    }
}

fn apply(body: Value) -> Action {
    Action::Apply {
        body,
        force: false,
        via: Via::Json,
    }
}

fn apply_typed(body: Value) -> Action {
    Action::Apply {
        body,
        force: false,
        via: Via::Typed,
    }
}

fn force(body: Value) -> Action {
    Action::Apply {
        body,
        force: true,
        via: Via::Json,
    }
}

fn object(fields: Vec<(&'static str, Option<Value>)>, managers: Vec<Owner>) -> Expect {
    Expect::Object { fields, managers }
}

fn conflict(message: &'static str) -> Expect {
    Expect::Failure {
        code: 409,
        reason: "Conflict",
        message,
    }
}

fn is(v: Value) -> Option<Value> {
    Some(v)
}

/// A Deployment's whole configuration, as its owner applies it.
fn full_deployment() -> Value {
    json!({
        "metadata": {"labels": {"app": "web"}},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{
                    "name": "main",
                    "image": "registry.k8s.io/pause:3.10",
                    "args": ["a", "b"],
                    "ports": [{"containerPort": 80, "protocol": "TCP"}],
                }]},
            },
        },
    })
}

/// The fields the owner of [`full_deployment`] holds, less `replicas` when another manager
/// took them.
fn full_deployment_fields(with_replicas: bool) -> Value {
    let mut fields = json!({
        "f:metadata": {"f:labels": {"f:app": {}}},
        "f:spec": {
            "f:replicas": {},
            "f:selector": {},
            "f:template": {
                "f:metadata": {"f:labels": {"f:app": {}}},
                "f:spec": {"f:containers": {"k:{\"name\":\"main\"}": {
                    ".": {}, "f:args": {}, "f:image": {}, "f:name": {},
                    "f:ports": {"k:{\"containerPort\":80,\"protocol\":\"TCP\"}": {
                        ".": {}, "f:containerPort": {}, "f:protocol": {}}},
                }}},
            },
        },
    });
    if !with_replicas {
        fields["f:spec"]
            .as_object_mut()
            .unwrap()
            .remove("f:replicas");
    }
    fields
}

/// The table.
pub(crate) fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "apply creates the object; fields a manager stops applying are removed",
            kind: Kind::ConfigMap,
            steps: vec![
                step(
                    "m1",
                    apply_typed(
                        json!({"metadata": {"labels": {"l": "1"}}, "data": {"x": "1", "y": "2"}}),
                    ),
                    object(
                        vec![
                            ("/data", is(json!({"x": "1", "y": "2"}))),
                            ("/metadata/labels/l", is(json!("1"))),
                        ],
                        vec![applier(
                            "m1",
                            json!({"f:data": {"f:x": {}, "f:y": {}}, "f:metadata": {"f:labels": {"f:l": {}}}}),
                        )],
                    ),
                ),
                step(
                    "m1",
                    apply_typed(json!({"data": {"x": "1"}})),
                    object(
                        vec![("/data", is(json!({"x": "1"}))), ("/metadata/labels", None)],
                        vec![applier("m1", json!({"f:data": {"f:x": {}}}))],
                    ),
                ),
            ],
        },
        Case {
            name: "a conflict names the owner; force takes the field over",
            kind: Kind::ConfigMap,
            steps: vec![
                step(
                    "m1",
                    apply(json!({"data": {"x": "1", "y": "2"}})),
                    object(
                        vec![],
                        vec![applier("m1", json!({"f:data": {"f:x": {}, "f:y": {}}}))],
                    ),
                ),
                step(
                    "m2",
                    apply(json!({"data": {"x": "9", "y": "8"}})),
                    conflict(
                        "Apply failed with 2 conflicts: conflicts with \"m1\":\n- .data.x\n- .data.y",
                    ),
                ),
                step(
                    "m2",
                    force(json!({"data": {"x": "9"}})),
                    object(
                        vec![("/data", is(json!({"x": "9", "y": "2"})))],
                        vec![
                            applier("m1", json!({"f:data": {"f:y": {}}})),
                            applier("m2", json!({"f:data": {"f:x": {}}})),
                        ],
                    ),
                ),
                step(
                    "m2",
                    apply(json!({"data": {"x": "9", "y": "8"}})),
                    conflict("Apply failed with 1 conflict: conflict with \"m1\": .data.y"),
                ),
                // Forced over its last field, m1 owns nothing and its entry goes.
                step(
                    "m2",
                    force(json!({"data": {"x": "9", "y": "8"}})),
                    object(
                        vec![("/data", is(json!({"x": "9", "y": "8"})))],
                        vec![applier("m2", json!({"f:data": {"f:x": {}, "f:y": {}}}))],
                    ),
                ),
            ],
        },
        Case {
            name: "applying the value a field has shares it; a shared field stays when one owner leaves",
            kind: Kind::ConfigMap,
            steps: vec![
                step(
                    "m1",
                    apply(json!({"data": {"x": "1", "y": "2"}})),
                    object(
                        vec![],
                        vec![applier("m1", json!({"f:data": {"f:x": {}, "f:y": {}}}))],
                    ),
                ),
                step(
                    "m2",
                    apply(json!({"data": {"x": "1"}})),
                    object(
                        vec![("/data", is(json!({"x": "1", "y": "2"})))],
                        vec![
                            applier("m1", json!({"f:data": {"f:x": {}, "f:y": {}}})),
                            // Its apply changed nothing: no time.
                            Owner {
                                timed: false,
                                ..applier("m2", json!({"f:data": {"f:x": {}}}))
                            },
                        ],
                    ),
                ),
                step(
                    "m1",
                    apply(json!({})),
                    object(
                        vec![("/data", is(json!({"x": "1"})))],
                        vec![Owner {
                            timed: false,
                            ..applier("m2", json!({"f:data": {"f:x": {}}}))
                        }],
                    ),
                ),
            ],
        },
        Case {
            name: "creators and updaters own what they wrote; an apply conflicts with them",
            kind: Kind::ConfigMap,
            steps: vec![
                step(
                    "creator",
                    Action::Create {
                        body: json!({"metadata": {"labels": {"l": "1"}}, "data": {"x": "1"}}),
                    },
                    object(
                        vec![],
                        vec![updater(
                            "creator",
                            json!({"f:data": {".": {}, "f:x": {}}, "f:metadata": {"f:labels": {".": {}, "f:l": {}}}}),
                        )],
                    ),
                ),
                step(
                    "ap",
                    apply(json!({"data": {"x": "2"}})),
                    conflict(
                        "Apply failed with 1 conflict: conflict with \"creator\" using v1: .data.x",
                    ),
                ),
                step(
                    "ap",
                    apply(json!({"data": {"x": "1", "n": "new"}})),
                    object(
                        vec![("/data", is(json!({"x": "1", "n": "new"})))],
                        vec![
                            updater(
                                "creator",
                                json!({"f:data": {".": {}, "f:x": {}}, "f:metadata": {"f:labels": {".": {}, "f:l": {}}}}),
                            ),
                            applier("ap", json!({"f:data": {"f:n": {}, "f:x": {}}})),
                        ],
                    ),
                ),
                // An update takes what it changes from everyone.
                step(
                    "editor",
                    Action::MergePatch {
                        body: json!({"data": {"x": "5"}}),
                    },
                    object(
                        vec![("/data/x", is(json!("5")))],
                        vec![
                            // Its `data` map stays its own, without the key it lost.
                            updater(
                                "creator",
                                json!({"f:data": {}, "f:metadata": {"f:labels": {".": {}, "f:l": {}}}}),
                            ),
                            applier("ap", json!({"f:data": {"f:n": {}}})),
                            updater("editor", json!({"f:data": {"f:x": {}}})),
                        ],
                    ),
                ),
                // A field another manager owns stays when the applier leaves it out.
                step(
                    "ap",
                    apply(json!({"data": {"n": "new"}})),
                    object(
                        vec![("/data", is(json!({"x": "5", "n": "new"})))],
                        vec![
                            // Its `data` map stays its own, without the key it lost.
                            updater(
                                "creator",
                                json!({"f:data": {}, "f:metadata": {"f:labels": {".": {}, "f:l": {}}}}),
                            ),
                            Owner {
                                timed: true,
                                ..applier("ap", json!({"f:data": {"f:n": {}}}))
                            },
                            updater("editor", json!({"f:data": {"f:x": {}}})),
                        ],
                    ),
                ),
            ],
        },
        Case {
            name: "metadata-only and dynamic handles apply like typed ones",
            kind: Kind::ConfigMap,
            steps: vec![
                step(
                    "labeller",
                    Action::Apply {
                        body: json!({"metadata": {"labels": {"team": "web"}}}),
                        force: false,
                        via: Via::Metadata,
                    },
                    object(
                        vec![("/metadata/labels", is(json!({"team": "web"})))],
                        vec![applier(
                            "labeller",
                            json!({"f:metadata": {"f:labels": {"f:team": {}}}}),
                        )],
                    ),
                ),
                step(
                    "dyn",
                    Action::Apply {
                        body: json!({"data": {"k": "v"}}),
                        force: false,
                        via: Via::Dynamic,
                    },
                    object(
                        vec![
                            ("/data/k", is(json!("v"))),
                            ("/metadata/labels/team", is(json!("web"))),
                        ],
                        vec![
                            applier(
                                "labeller",
                                json!({"f:metadata": {"f:labels": {"f:team": {}}}}),
                            ),
                            applier("dyn", json!({"f:data": {"f:k": {}}})),
                        ],
                    ),
                ),
            ],
        },
        Case {
            name: "an untracked object's fields become before-first-apply's at its first apply",
            kind: Kind::ConfigMap,
            steps: vec![
                step(
                    "creator",
                    Action::Create {
                        body: json!({"metadata": {"labels": {"l": "1"}}, "data": {"x": "1"}}),
                    },
                    object(
                        vec![],
                        vec![updater(
                            "creator",
                            json!({"f:data": {".": {}, "f:x": {}}, "f:metadata": {"f:labels": {".": {}, "f:l": {}}}}),
                        )],
                    ),
                ),
                // A list of empty entries stops the tracking.
                step(
                    "resetter",
                    Action::MergePatch {
                        body: json!({"metadata": {"managedFields": [{}]}}),
                    },
                    object(vec![], vec![]),
                ),
                // Updates of an untracked object stay untracked.
                step(
                    "u",
                    Action::MergePatch {
                        body: json!({"data": {"w": "0"}}),
                    },
                    object(vec![("/data", is(json!({"x": "1", "w": "0"})))], vec![]),
                ),
                step(
                    "ap",
                    apply(json!({"data": {"x": "2"}})),
                    conflict(
                        "Apply failed with 1 conflict: conflict with \"before-first-apply\" using v1: .data.x",
                    ),
                ),
                step(
                    "ap",
                    apply(json!({"data": {"x": "1", "n": "new"}})),
                    object(
                        vec![("/data", is(json!({"x": "1", "w": "0", "n": "new"})))],
                        vec![
                            updater(
                                "before-first-apply",
                                json!({"f:data": {".": {}, "f:w": {}, "f:x": {}}, "f:metadata": {"f:labels": {".": {}, "f:l": {}}}}),
                            ),
                            applier("ap", json!({"f:data": {"f:n": {}, "f:x": {}}})),
                        ],
                    ),
                ),
                // Without a field manager, the server names the writer after its
                // User-Agent: kctrl-client's is `kctrl/...`.
                step(
                    "",
                    Action::MergePatch {
                        body: json!({"data": {"v": "0"}}),
                    },
                    object(
                        vec![("/data/v", is(json!("0")))],
                        vec![
                            updater(
                                "before-first-apply",
                                json!({"f:data": {".": {}, "f:w": {}, "f:x": {}}, "f:metadata": {"f:labels": {".": {}, "f:l": {}}}}),
                            ),
                            applier("ap", json!({"f:data": {"f:n": {}, "f:x": {}}})),
                            updater("kctrl", json!({"f:data": {"f:v": {}}})),
                        ],
                    ),
                ),
            ],
        },
        Case {
            name: "an apply that changes nothing is not written; a dry run is not stored",
            kind: Kind::ConfigMap,
            steps: vec![
                step(
                    "m1",
                    apply(json!({"data": {"x": "1"}})),
                    object(vec![], vec![applier("m1", json!({"f:data": {"f:x": {}}}))]),
                ),
                step("m1", apply(json!({"data": {"x": "1"}})), Expect::Unchanged),
                step(
                    "m1",
                    Action::DryRunApply {
                        body: json!({"data": {"x": "2", "y": "3"}}),
                    },
                    object(
                        vec![("/data", is(json!({"x": "1"})))],
                        vec![applier("m1", json!({"f:data": {"f:x": {}}}))],
                    ),
                ),
                step("m1", apply(json!({"data": {"x": "1"}})), Expect::Unchanged),
                // An update that leaves managedFields out keeps them, and writes nothing
                // when nothing else changed either.
                step(
                    "writer",
                    Action::Update { body: json!({}) },
                    Expect::Unchanged,
                ),
                step(
                    "writer",
                    Action::Update {
                        body: json!({"data": {"x": "2"}}),
                    },
                    object(
                        vec![("/data", is(json!({"x": "2"})))],
                        vec![updater("writer", json!({"f:data": {"f:x": {}}}))],
                    ),
                ),
            ],
        },
        Case {
            name: "the apiserver's checks of an apply request",
            kind: Kind::ConfigMap,
            steps: vec![
                step(
                    "m1",
                    apply(json!({"data": {"x": "1"}})),
                    object(vec![], vec![applier("m1", json!({"f:data": {"f:x": {}}}))]),
                ),
                step(
                    "",
                    Action::Raw {
                        patch: Patch::Apply(
                            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "CASE"}}),
                        ),
                        params: PatchParams::default(),
                    },
                    Expect::Failure {
                        code: 422,
                        reason: "Invalid",
                        message: "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch",
                    },
                ),
                step(
                    "m1",
                    Action::Raw {
                        patch: Patch::Merge(json!({})),
                        params: PatchParams::apply("m1").force(),
                    },
                    Expect::Failure {
                        code: 422,
                        reason: "Invalid",
                        message: "PatchOptions.meta.k8s.io \"\" is invalid: force: Forbidden: may not be specified for non-apply patch",
                    },
                ),
                step(
                    "m1",
                    Action::Raw {
                        patch: Patch::Apply(
                            json!({"apiVersion": "v1", "metadata": {"name": "CASE"}}),
                        ),
                        params: PatchParams::apply("m1"),
                    },
                    Expect::Failure {
                        code: 400,
                        reason: "BadRequest",
                        message: "invalid object type: /v1, Kind=",
                    },
                ),
                step(
                    "m1",
                    Action::Raw {
                        patch: Patch::Apply(
                            json!({"apiVersion": "apps/v1", "kind": "ConfigMap", "metadata": {"name": "CASE"}}),
                        ),
                        params: PatchParams::apply("m1"),
                    },
                    Expect::Failure {
                        code: 400,
                        reason: "BadRequest",
                        message: "invalid object type: apps/v1, Kind=ConfigMap",
                    },
                ),
                step(
                    "m1",
                    Action::Raw {
                        patch: Patch::Apply(
                            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "other"}}),
                        ),
                        params: PatchParams::apply("m1"),
                    },
                    Expect::Failure {
                        code: 400,
                        reason: "BadRequest",
                        message: "the name of the object (other) does not match the name on the URL (CASE)",
                    },
                ),
                step(
                    "m1",
                    Action::Raw {
                        patch: Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap",
                            "metadata": {"name": "CASE", "managedFields": [{"manager": "q", "operation": "Apply"}]}})),
                        params: PatchParams::apply("m1"),
                    },
                    Expect::Failure {
                        code: 400,
                        reason: "BadRequest",
                        message: "metadata.managedFields must be nil",
                    },
                ),
                step(
                    "m1",
                    apply(json!({"metadata": {"resourceVersion": "1"}, "data": {"x": "2"}})),
                    conflict(
                        "Operation cannot be fulfilled on configmaps \"CASE\": the object has been modified; \
                         please apply your changes to the latest version and try again",
                    ),
                ),
                // A body without a name takes the URL's.
                step(
                    "m1",
                    Action::Raw {
                        patch: Patch::Apply(
                            json!({"apiVersion": "v1", "kind": "ConfigMap", "data": {"x": "3"}}),
                        ),
                        params: PatchParams::apply("m1"),
                    },
                    object(
                        vec![("/data/x", is(json!("3")))],
                        vec![applier("m1", json!({"f:data": {"f:x": {}}}))],
                    ),
                ),
            ],
        },
        Case {
            name: "a Deployment created by apply; another manager scales it",
            kind: Kind::Deployment,
            steps: vec![
                step(
                    "owner",
                    apply_typed({
                        let mut d = full_deployment();
                        // The main resource ignores the status.
                        d["status"] = json!({"replicas": 5});
                        d
                    }),
                    object(
                        vec![
                            ("/spec/replicas", is(json!(2))),
                            (
                                "/spec/template/spec/containers/0/args",
                                is(json!(["a", "b"])),
                            ),
                            ("/status/replicas", None),
                            ("/metadata/generation", is(json!(1))),
                        ],
                        vec![applier("owner", full_deployment_fields(true))],
                    ),
                ),
                step(
                    "scaler",
                    apply(json!({"spec": {"replicas": 3}})),
                    conflict(
                        "Apply failed with 1 conflict: conflict with \"owner\": .spec.replicas",
                    ),
                ),
                step(
                    "scaler",
                    force(json!({"spec": {"replicas": 3}})),
                    object(
                        vec![
                            ("/spec/replicas", is(json!(3))),
                            ("/metadata/generation", is(json!(2))),
                        ],
                        vec![
                            applier("owner", full_deployment_fields(false)),
                            applier("scaler", json!({"f:spec": {"f:replicas": {}}})),
                        ],
                    ),
                ),
                step(
                    "owner",
                    apply_typed(full_deployment()),
                    conflict(
                        "Apply failed with 1 conflict: conflict with \"scaler\": .spec.replicas",
                    ),
                ),
            ],
        },
        Case {
            name: "a Deployment's containers merge by name",
            kind: Kind::Deployment,
            steps: vec![
                step(
                    "owner",
                    apply_typed(full_deployment()),
                    object(vec![], vec![applier("owner", full_deployment_fields(true))]),
                ),
                step(
                    "sidecar",
                    apply(json!({"spec": {"template": {"spec": {"containers": [
                        {"name": "main", "env": [{"name": "E", "value": "1"}]},
                    ]}}}})),
                    object(
                        vec![
                            (
                                "/spec/template/spec/containers/0/image",
                                is(json!("registry.k8s.io/pause:3.10")),
                            ),
                            (
                                "/spec/template/spec/containers/0/env",
                                is(json!([{"name": "E", "value": "1"}])),
                            ),
                            ("/spec/template/spec/containers/1", None),
                        ],
                        vec![
                            applier("owner", full_deployment_fields(true)),
                            applier(
                                "sidecar",
                                json!({"f:spec": {"f:template": {"f:spec": {"f:containers": {
                                    "k:{\"name\":\"main\"}": {".": {}, "f:name": {},
                                        "f:env": {"k:{\"name\":\"E\"}": {".": {}, "f:name": {}, "f:value": {}}}},
                                }}}}}),
                            ),
                        ],
                    ),
                ),
                step(
                    "third",
                    apply(json!({
                        "metadata": {"labels": {"app": "other"}},
                        "spec": {"replicas": 9, "template": {"spec": {"containers": [
                            {"name": "main", "image": "x", "env": [{"name": "E", "value": "2"}]},
                        ]}}},
                    })),
                    conflict(
                        "Apply failed with 4 conflicts: conflicts with \"owner\":\n\
                         - .metadata.labels.app\n\
                         - .spec.replicas\n\
                         - .spec.template.spec.containers[name=\"main\"].image\n\
                         conflicts with \"sidecar\":\n\
                         - .spec.template.spec.containers[name=\"main\"].env[name=\"E\"].value",
                    ),
                ),
                // The sidecar stops applying its variable: nobody owns it, it goes.
                step(
                    "sidecar",
                    apply(
                        json!({"spec": {"template": {"spec": {"containers": [{"name": "main"}]}}}}),
                    ),
                    object(
                        vec![
                            ("/spec/template/spec/containers/0/env", None),
                            (
                                "/spec/template/spec/containers/0/image",
                                is(json!("registry.k8s.io/pause:3.10")),
                            ),
                        ],
                        vec![
                            applier("owner", full_deployment_fields(true)),
                            applier(
                                "sidecar",
                                json!({"f:spec": {"f:template": {"f:spec": {"f:containers": {
                                    "k:{\"name\":\"main\"}": {".": {}, "f:name": {}},
                                }}}}}),
                            ),
                        ],
                    ),
                ),
            ],
        },
        Case {
            name: "a Deployment's status is applied through its subresource",
            kind: Kind::Deployment,
            steps: vec![
                // A status apply does not create.
                step(
                    "statuser",
                    Action::ApplyStatus {
                        body: json!({"status": {"observedGeneration": 1}}),
                    },
                    Expect::Failure {
                        code: 404,
                        reason: "NotFound",
                        message: "deployments.apps \"CASE\" not found",
                    },
                ),
                step(
                    "owner",
                    apply_typed(full_deployment()),
                    object(vec![], vec![applier("owner", full_deployment_fields(true))]),
                ),
                // The status subresource ignores the spec and the labels.
                step(
                    "statuser",
                    Action::ApplyStatus {
                        body: json!({
                            "metadata": {"labels": {"x": "y"}, "annotations": {"a": "b"}},
                            "spec": {"replicas": 7},
                            "status": {"observedGeneration": 1, "conditions": [
                                {"type": "Available", "status": "True", "reason": "R"},
                            ]},
                        }),
                    },
                    object(
                        vec![
                            ("/status/observedGeneration", is(json!(1))),
                            ("/status/conditions/0/reason", is(json!("R"))),
                            ("/metadata/labels", is(json!({"app": "web"}))),
                            ("/metadata/annotations", is(json!({"a": "b"}))),
                            ("/spec/replicas", is(json!(2))),
                        ],
                        vec![
                            applier("owner", full_deployment_fields(true)),
                            Owner {
                                subresource: "status",
                                ..applier(
                                    "statuser",
                                    json!({
                                        "f:metadata": {"f:annotations": {"f:a": {}}},
                                        "f:status": {
                                            "f:conditions": {"k:{\"type\":\"Available\"}": {
                                                ".": {}, "f:reason": {}, "f:status": {}, "f:type": {}}},
                                            "f:observedGeneration": {},
                                        },
                                    }),
                                )
                            },
                        ],
                    ),
                ),
                step(
                    "other",
                    Action::ApplyStatus {
                        body: json!({"status": {"observedGeneration": 2}}),
                    },
                    conflict(
                        "Apply failed with 1 conflict: conflict with \"statuser\" with subresource \"status\": \
                         .status.observedGeneration",
                    ),
                ),
                // The main resource ignores the status: no conflict, no change, no owner.
                step(
                    "other",
                    apply(json!({"status": {"observedGeneration": 3}})),
                    object(
                        vec![("/status/observedGeneration", is(json!(1)))],
                        vec![
                            applier("owner", full_deployment_fields(true)),
                            Owner {
                                subresource: "status",
                                ..applier(
                                    "statuser",
                                    json!({
                                        "f:metadata": {"f:annotations": {"f:a": {}}},
                                        "f:status": {
                                            "f:conditions": {"k:{\"type\":\"Available\"}": {
                                                ".": {}, "f:reason": {}, "f:status": {}, "f:type": {}}},
                                            "f:observedGeneration": {},
                                        },
                                    }),
                                )
                            },
                        ],
                    ),
                ),
            ],
        },
    ]
}

/// The object name a case writes: its index in the table.
pub(crate) fn object_name(index: usize) -> String {
    format!("ssa-case-{index}")
}

/// What one step showed, limited to what the case compares.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Observed {
    /// The object after a successful write.
    Object {
        fields: Vec<(String, Option<Value>)>,
        /// (manager, operation, subresource, fieldsV1, has a time), sorted.
        managers: Vec<(String, String, String, Value, bool)>,
        /// Whether the step stored a new version (its resourceVersion changed).
        written: bool,
    },
    /// A failed write.
    Failure {
        code: u16,
        reason: String,
        message: String,
        /// Each cause's field and message.
        causes: BTreeSet<(String, String)>,
    },
}

/// Runs `case` against the server behind `client`, in `namespace`, and reports each step.
pub(crate) async fn run(
    client: &Client,
    namespace: &str,
    index: usize,
    case: &Case,
) -> Vec<Observed> {
    let name = object_name(index);
    let resource = case.kind.resource();
    let dynamic = Api::<DynamicObject>::namespaced_dynamic(client.clone(), namespace, &resource);
    let mut seen = Vec::new();
    let mut version: Option<Value> = None;
    for (i, step) in case.steps.iter().enumerate() {
        let what = format!("case {:?}, step {i} ({})", case.name, step.manager);
        let result = perform(client, namespace, &name, case.kind, step).await;
        seen.push(match result {
            Ok(()) => {
                let stored = dynamic
                    .get(&name)
                    .await
                    .unwrap_or_else(|e| panic!("{what}: reading the object back: {e}"));
                let stored = serde_json::to_value(stored).expect("a stored object is JSON");
                let now = stored.pointer("/metadata/resourceVersion").cloned();
                let written = now != version;
                version = now;
                observe_object(&stored, &step.expect, written)
            }
            Err(e) => {
                let Some(status) = e.status() else {
                    panic!("{what}: the write failed without an API status: {e}");
                };
                Observed::Failure {
                    code: status.code.and_then(|c| u16::try_from(c).ok()).unwrap_or(0),
                    reason: status.reason.clone().unwrap_or_default(),
                    message: status
                        .message
                        .clone()
                        .unwrap_or_default()
                        .replace(&name, "CASE"),
                    causes: status
                        .details
                        .iter()
                        .flat_map(|d| d.causes.iter().flatten())
                        .map(|c| {
                            (
                                c.field.clone().unwrap_or_default(),
                                c.message.clone().unwrap_or_default(),
                            )
                        })
                        .collect(),
                }
            }
        });
    }
    seen
}

/// `patch` merged into `target` as a JSON merge patch would (without deletions).
fn merge_into(target: &mut Value, patch: &Value) {
    match (target, patch) {
        (Value::Object(t), Value::Object(p)) => {
            for (k, v) in p {
                merge_into(t.entry(k.clone()).or_insert(Value::Null), v);
            }
        }
        (t, p) => *t = p.clone(),
    }
}

/// The body of a step with its type and name.
fn full_body(kind: Kind, name: &str, body: &Value) -> Value {
    let mut out = body.clone();
    out["apiVersion"] = kind.api_version().into();
    out["kind"] = kind.kind().into();
    if !out.get("metadata").is_some_and(Value::is_object) {
        out["metadata"] = json!({});
    }
    out["metadata"]["name"] = name.into();
    out
}

async fn perform(
    client: &Client,
    namespace: &str,
    name: &str,
    kind: Kind,
    step: &Step,
) -> Result<(), Error> {
    let params = PatchParams::apply(step.manager);
    let post = PostParams {
        field_manager: Some(step.manager.to_owned()),
        ..Default::default()
    };
    match &step.action {
        Action::Apply { body, force, via } => {
            let params = if *force { params.force() } else { params };
            let body = full_body(kind, name, body);
            match (via, kind) {
                (Via::Typed, Kind::ConfigMap) => {
                    let obj: ConfigMap = serde_json::from_value(body).expect("a ConfigMap");
                    Api::namespaced(client.clone(), namespace)
                        .apply(&params, &obj)
                        .await
                        .map(drop)
                }
                (Via::Typed, Kind::Deployment) => {
                    let obj: Deployment = serde_json::from_value(body).expect("a whole Deployment");
                    Api::namespaced(client.clone(), namespace)
                        .apply(&params, &obj)
                        .await
                        .map(drop)
                }
                (Via::Json, _) => {
                    let patch = Patch::Apply(body);
                    Api::<DynamicObject>::namespaced_dynamic(
                        client.clone(),
                        namespace,
                        &kind.resource(),
                    )
                    .patch(name, &params, &patch)
                    .await
                    .map(drop)
                }
                (Via::Dynamic, _) => {
                    let mut obj: DynamicObject = serde_json::from_value(body).expect("an object");
                    obj.api_version.clear();
                    obj.kind.clear();
                    Api::<DynamicObject>::namespaced_dynamic(
                        client.clone(),
                        namespace,
                        &kind.resource(),
                    )
                    .apply(&params, &obj)
                    .await
                    .map(drop)
                }
                (Via::Metadata, Kind::ConfigMap) => {
                    let meta: ObjectMeta =
                        serde_json::from_value(body["metadata"].clone()).expect("metadata");
                    Api::<PartialObjectMetadata<ConfigMap>>::namespaced(client.clone(), namespace)
                        .apply_metadata(&params, &meta)
                        .await
                        .map(drop)
                }
                (Via::Metadata, Kind::Deployment) => {
                    let meta: ObjectMeta =
                        serde_json::from_value(body["metadata"].clone()).expect("metadata");
                    Api::<PartialObjectMetadata<Deployment>>::namespaced(client.clone(), namespace)
                        .apply_metadata(&params, &meta)
                        .await
                        .map(drop)
                }
            }
        }
        Action::DryRunApply { body } => {
            let patch = Patch::Apply(full_body(kind, name, body));
            Api::<DynamicObject>::namespaced_dynamic(client.clone(), namespace, &kind.resource())
                .patch(name, &params.dry_run(), &patch)
                .await
                .map(drop)
        }
        Action::ApplyStatus { body } => match kind {
            Kind::Deployment => {
                let patch = Patch::Apply(full_body(kind, name, body));
                Api::<Deployment>::namespaced(client.clone(), namespace)
                    .patch_status(name, &params, &patch)
                    .await
                    .map(drop)
            }
            Kind::ConfigMap => panic!("ConfigMaps have no status subresource"),
        },
        Action::Create { body } => {
            let obj: DynamicObject =
                serde_json::from_value(full_body(kind, name, body)).expect("an object");
            Api::<DynamicObject>::namespaced_dynamic(client.clone(), namespace, &kind.resource())
                .create(&post, &obj)
                .await
                .map(drop)
        }
        Action::Update { body } => {
            let api = Api::<DynamicObject>::namespaced_dynamic(
                client.clone(),
                namespace,
                &kind.resource(),
            );
            let mut current = serde_json::to_value(api.get(name).await?).expect("JSON");
            current["metadata"]
                .as_object_mut()
                .expect("metadata")
                .remove("managedFields");
            merge_into(&mut current, body);
            let obj: DynamicObject = serde_json::from_value(current).expect("an object");
            api.update(&post, &obj).await.map(drop)
        }
        Action::MergePatch { body } => {
            Api::<DynamicObject>::namespaced_dynamic(client.clone(), namespace, &kind.resource())
                .patch(
                    name,
                    &PatchParams {
                        field_manager: Some(step.manager.to_owned()).filter(|m| !m.is_empty()),
                        ..Default::default()
                    },
                    &Patch::Merge(body.clone()),
                )
                .await
                .map(drop)
        }
        Action::Raw { patch, params } => {
            let patch = match patch {
                Patch::Apply(body) => Patch::Apply(
                    serde_json::from_str(&body.to_string().replace("CASE", name)).expect("JSON"),
                ),
                other => other.clone(),
            };
            let request = ApiRequest::new(
                kind.resource(),
                Some(namespace.to_owned()),
                None,
                Operation::Patch {
                    name: name.to_owned(),
                    patch,
                    params: params.clone(),
                },
            );
            client.backend().call(request).await.map(drop)
        }
    }
}

fn observe_object(stored: &Value, expect: &Expect, written: bool) -> Observed {
    let pointers: Vec<&str> = match expect {
        Expect::Object { fields, .. } => fields.iter().map(|(p, _)| *p).collect(),
        Expect::Unchanged | Expect::Failure { .. } => Vec::new(),
    };
    let mut managers: Vec<(String, String, String, Value, bool)> = stored
        .pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|entry| {
            let text = |f: &str| {
                entry
                    .get(f)
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_owned()
            };
            (
                text("manager"),
                text("operation"),
                text("subresource"),
                entry.get("fieldsV1").cloned().unwrap_or(Value::Null),
                entry.get("time").is_some(),
            )
        })
        .collect();
    managers.sort_by(|a, b| (&a.0, &a.1, &a.2).cmp(&(&b.0, &b.1, &b.2)));
    Observed::Object {
        fields: pointers
            .into_iter()
            .map(|p| (p.to_owned(), stored.pointer(p).cloned()))
            .collect(),
        managers,
        written,
    }
}

/// Checks what `server` showed for `case` against the table; panics naming the case, the
/// step and the difference.
pub(crate) fn check(server: &str, case: &Case, observed: &[Observed]) {
    assert_eq!(
        observed.len(),
        case.steps.len(),
        "{server}: case {:?}",
        case.name
    );
    for (i, (step, seen)) in case.steps.iter().zip(observed).enumerate() {
        let at = format!(
            "{server}: case {:?}, step {i} (manager {:?})",
            case.name, step.manager
        );
        match (&step.expect, seen) {
            (Expect::Unchanged, Observed::Object { written, .. }) => {
                assert!(!written, "{at}: the object was written again");
            }
            (
                Expect::Object { fields, managers },
                Observed::Object {
                    fields: got,
                    managers: got_managers,
                    ..
                },
            ) => {
                for ((pointer, want), (_, value)) in fields.iter().zip(got) {
                    assert_eq!(value, want, "{at}: field {pointer}");
                }
                let mut want: Vec<(String, String, String, Value, bool)> = managers
                    .iter()
                    .map(|o| {
                        (
                            o.manager.to_owned(),
                            o.operation.to_owned(),
                            o.subresource.to_owned(),
                            o.fields.clone(),
                            o.timed,
                        )
                    })
                    .collect();
                want.sort_by(|a, b| (&a.0, &a.1, &a.2).cmp(&(&b.0, &b.1, &b.2)));
                assert_eq!(
                    got_managers, &want,
                    "{at}: managedFields as (manager, operation, subresource, fieldsV1, timed)"
                );
            }
            (
                Expect::Failure {
                    code,
                    reason,
                    message,
                },
                Observed::Failure {
                    code: c,
                    reason: r,
                    message: m,
                    ..
                },
            ) => {
                assert_eq!(
                    (c, r.as_str(), m.as_str()),
                    (code, *reason, *message),
                    "{at}: failure"
                );
            }
            (want, got) => panic!("{at}: expected {want:?}, observed {got:?}"),
        }
    }
}

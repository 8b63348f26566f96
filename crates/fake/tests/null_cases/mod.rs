//! `null` in written objects: what a create, an update and a server-side apply do with it,
//! for a custom resource (by its schema: nullable or not, defaulted, typed or not, in an
//! array or a map) and for built-in types.
//!
//! One table, two servers: `crates/fake/tests/nulls.rs` runs it against kctrl-fake, and
//! `tests/e2e/nulls.rs` (which includes this file) against a real kube-apiserver and a fake
//! beside it, requiring the two to observe the same. The expectations were taken from
//! kube-apiserver v1.37.2. Also here: a custom resource derived with
//! `#[derive(CustomResource)]` whose every `Option` is `None`, written every way, which the
//! generated schema must let through.

#![allow(dead_code, reason = "each including test uses part of the table")]

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kctrl_client::crd::CustomResourceExt;
use kctrl_client::{
    Api, Client, CustomResource, DynamicObject, PatchParams, PostParams, ResourceRef, Scope,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// The group of the custom resources here.
pub(crate) const GROUP: &str = "nulls.kctrl.example.com";

/// A hand-written CRD whose spec has a field of each kind a `null` can meet.
pub(crate) fn nullish_crd() -> CustomResourceDefinition {
    serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("nullishes.{GROUP}")},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {"plural": "nullishes", "singular": "nullish", "kind": "Nullish", "listKind": "NullishList"},
            "versions": [{
                "name": "v1",
                "served": true,
                "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "properties": {
                    "status": {"type": "object", "properties": {"count": {"type": "integer"}}},
                    "spec": {"type": "object", "properties": {
                        "plain": {"type": "integer"},
                        "maybe": {"type": "integer", "nullable": true},
                        "defaulted": {"type": "integer", "default": 7},
                        "phase": {"type": "string", "enum": ["A", "B"]},
                        "optPhase": {"type": "string", "nullable": true, "allOf": [{"enum": ["A", "B"]}]},
                        "nullableEnum": {"type": "string", "nullable": true, "enum": ["A", "B"]},
                        "ios": {"x-kubernetes-int-or-string": true},
                        "free": {"x-kubernetes-preserve-unknown-fields": true},
                        "strs": {"type": "array", "items": {"type": "string"}},
                        "dstrs": {"type": "array", "items": {"type": "string", "default": "d"}},
                        "counts": {"type": "object", "additionalProperties": {"type": "integer"}}
                    }}}
                }}
            }]
        }
    }))
    .expect("the Nullish CRD is a CustomResourceDefinition")
}

/// The Nullish resource.
pub(crate) fn nullishes() -> ResourceRef {
    ResourceRef::new(GROUP, "v1", "nullishes", "Nullish", Scope::Namespaced)
}

/// A custom resource whose fields are all `Option`s (and a list and a map of them), as a
/// user writes one: `None` is sent as `null`, no `skip_serializing_if`.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[resource(
    group = "nulls.kctrl.example.com",
    version = "v1",
    kind = "Optional",
    namespaced
)]
#[serde(rename_all = "camelCase")]
pub(crate) struct OptionalSpec {
    #[schemars(range(min = 1, max = 10))]
    pub(crate) replicas: Option<i32>,
    pub(crate) phase: Option<Phase>,
    pub(crate) phases: Vec<Option<Phase>>,
    pub(crate) window: Option<Window>,
    pub(crate) labels: Option<BTreeMap<String, String>>,
    pub(crate) sizes: BTreeMap<String, Option<i64>>,
    pub(crate) port: Option<IntOrString>,
    pub(crate) anything: Option<Value>,
}

/// A unit-only enum.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub(crate) enum Phase {
    Pending,
    Running,
}

/// A nested object with an optional field of its own.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub(crate) struct Window {
    pub(crate) start: Option<String>,
    pub(crate) minutes: i32,
}

/// The write of a case.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Write {
    Create,
    /// A create of `{}` then an update (PUT) of the object read back with the body's spec.
    Update,
    /// A server-side apply by manager `nulls`.
    Apply,
}

/// What a case writes where.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Target {
    Nullish,
    Deployment,
    ConfigMap,
}

/// One write and what it must end with.
pub(crate) struct Case {
    pub(crate) name: &'static str,
    pub(crate) target: Target,
    /// Applied first by the manager `other`, when there is one.
    pub(crate) prior: Option<Value>,
    pub(crate) write: Write,
    /// The fields written besides apiVersion, kind and metadata.name.
    pub(crate) body: Value,
    pub(crate) expect: Outcome,
}

/// What a write ended with, as both servers can show it alike.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Outcome {
    /// Stored: the values at the case's pointers (`None`: absent), and the fields the
    /// applier `nulls` owns (`Value::Null` for a create or update).
    Stored {
        values: Vec<(&'static str, Option<Value>)>,
        owned: Value,
    },
    /// Refused with this code and message (the object's name replaced by `CASE`).
    Refused { code: u16, message: String },
}

fn stored(values: &[(&'static str, Option<Value>)], owned: Value) -> Outcome {
    Outcome::Stored {
        values: values.to_vec(),
        owned,
    }
}

fn refused(message: &str) -> Outcome {
    Outcome::Refused {
        code: 422,
        message: message.to_owned(),
    }
}

/// The table, from kube-apiserver v1.37.2.
pub(crate) fn cases() -> Vec<Case> {
    let not_type = |field: &str, t: &str| {
        format!(
            "spec.{field}: Invalid value: \"null\": spec.{field} in body must be of type {t}: \"null\""
        )
    };
    let invalid = |detail: String| format!("Nullish.{GROUP} \"CASE\" is invalid: {detail}");
    vec![
        Case {
            name: "a create prunes what is not nullable, defaults, keeps the nullable",
            target: Target::Nullish,
            prior: None,
            write: Write::Create,
            body: json!({"spec": {"plain": null, "maybe": null, "defaulted": null, "phase": null,
                "optPhase": null, "ios": null, "free": null, "counts": {"a": null, "b": 1}}}),
            expect: stored(
                &[(
                    "/spec",
                    Some(json!({"maybe": null, "defaulted": 7, "optPhase": null, "counts": {"b": 1}})),
                )],
                Value::Null,
            ),
        },
        Case {
            name: "an update prunes as a create does",
            target: Target::Nullish,
            prior: None,
            write: Write::Update,
            body: json!({"spec": {"plain": null, "maybe": null, "counts": {"a": null}}}),
            // Not the whole spec: the apiserver defaults the absent `defaulted`, the fake
            // does not.
            expect: stored(
                &[
                    ("/spec/plain", None),
                    ("/spec/maybe", Some(Value::Null)),
                    ("/spec/counts", Some(json!({}))),
                ],
                Value::Null,
            ),
        },
        Case {
            name: "a null array item is refused by a create",
            target: Target::Nullish,
            prior: None,
            write: Write::Create,
            body: json!({"spec": {"strs": ["x", null]}}),
            expect: refused(&invalid(
                "spec.strs[1]: Invalid value: \"null\": spec.strs[1] in body must be of type string: \"null\"".to_owned(),
            )),
        },
        Case {
            name: "a nullable enum refuses null",
            target: Target::Nullish,
            prior: None,
            write: Write::Create,
            body: json!({"spec": {"nullableEnum": null}}),
            expect: refused(&invalid(
                "spec.nullableEnum: Unsupported value: null: supported values: \"A\", \"B\"".to_owned(),
            )),
        },
        Case {
            name: "an apply keeps the nullable and defaults",
            target: Target::Nullish,
            prior: None,
            write: Write::Apply,
            body: json!({"spec": {"maybe": null, "defaulted": null, "optPhase": null, "free": null}}),
            expect: stored(
                &[(
                    "/spec",
                    Some(json!({"maybe": null, "defaulted": 7, "optPhase": null})),
                )],
                json!({"f:spec": {"f:defaulted": {}, "f:free": {}, "f:maybe": {}, "f:optPhase": {}}}),
            ),
        },
        Case {
            name: "an apply refuses null where the field is not nullable",
            target: Target::Nullish,
            prior: None,
            write: Write::Apply,
            body: json!({"spec": {"plain": null}}),
            expect: refused(&invalid(not_type("plain", "integer"))),
        },
        Case {
            name: "an apply refuses null for an int-or-string that is not nullable",
            target: Target::Nullish,
            prior: None,
            write: Write::Apply,
            body: json!({"spec": {"ios": null}}),
            expect: refused(&invalid(not_type("ios", "integer,string"))),
        },
        Case {
            name: "an apply refuses null for an enum that is not nullable, twice",
            target: Target::Nullish,
            prior: None,
            write: Write::Apply,
            body: json!({"spec": {"phase": null}}),
            expect: refused(&invalid(format!(
                "[{}, spec.phase: Unsupported value: null: supported values: \"A\", \"B\"]",
                not_type("phase", "string")
            ))),
        },
        Case {
            name: "an apply refuses a null map value that is not nullable",
            target: Target::Nullish,
            prior: None,
            write: Write::Apply,
            body: json!({"spec": {"counts": {"a": null}}}),
            expect: refused(&invalid(
                "spec.counts.a: Invalid value: \"null\": spec.counts.a in body must be of type integer: \"null\"".to_owned(),
            )),
        },
        Case {
            name: "a null item takes the items' default",
            target: Target::Nullish,
            prior: None,
            write: Write::Create,
            body: json!({"spec": {"dstrs": ["a", null]}}),
            expect: stored(&[("/spec/dstrs", Some(json!(["a", "d"])))], Value::Null),
        },
        Case {
            name: "an apply of the main resource ignores a null in status",
            target: Target::Nullish,
            prior: None,
            write: Write::Apply,
            body: json!({"spec": {"maybe": 1}, "status": {"count": null}}),
            expect: stored(
                &[("/spec/maybe", Some(json!(1))), ("/status", None)],
                json!({"f:spec": {"f:maybe": {}}}),
            ),
        },
        Case {
            name: "applying null to another manager's field is a conflict",
            target: Target::Nullish,
            prior: Some(json!({"spec": {"maybe": 5}})),
            write: Write::Apply,
            body: json!({"spec": {"maybe": null}}),
            expect: Outcome::Refused {
                code: 409,
                message: "Apply failed with 1 conflict: conflict with \"other\": .spec.maybe".to_owned(),
            },
        },
        Case {
            name: "a built-in type's apply owns a null field and drops it",
            target: Target::Deployment,
            prior: None,
            write: Write::Apply,
            body: json!({"spec": {"strategy": null, "selector": {"matchLabels": {"app": "n"}},
                "template": {"metadata": {"labels": {"app": "n"}},
                    "spec": {"containers": [{"name": "c", "image": "i", "args": null, "command": ["x", null]}]}}}}),
            expect: stored(
                &[
                    ("/spec/template/spec/containers/0/args", None),
                    ("/spec/template/spec/containers/0/command", Some(json!(["x", ""]))),
                ],
                json!({"f:spec": {"f:selector": {}, "f:strategy": {},
                    "f:template": {"f:metadata": {"f:labels": {"f:app": {}}},
                        "f:spec": {"f:containers": {"k:{\"name\":\"c\"}": {".": {}, "f:args": {}, "f:command": {}, "f:image": {}, "f:name": {}}}}}}}),
            ),
        },
        Case {
            name: "a built-in type's apply makes a null string of a map empty",
            target: Target::ConfigMap,
            prior: None,
            write: Write::Apply,
            body: json!({"data": {"x": null, "y": "1"}}),
            expect: stored(
                &[("/data", Some(json!({"x": "", "y": "1"})))],
                json!({"f:data": {"f:x": {}, "f:y": {}}}),
            ),
        },
    ]
}

fn resource(target: Target) -> ResourceRef {
    match target {
        Target::Nullish => nullishes(),
        Target::Deployment => ResourceRef::of::<Deployment>(),
        Target::ConfigMap => ResourceRef::of::<ConfigMap>(),
    }
}

/// The object of case `index`: the body with apiVersion, kind and name.
fn object(case: &Case, index: usize) -> DynamicObject {
    let r = resource(case.target);
    let mut obj = case.body.clone();
    obj["apiVersion"] = json!(r.api_version());
    obj["kind"] = json!(r.kind);
    obj["metadata"]["name"] = json!(name(index));
    serde_json::from_value(obj).expect("a case's body is an object")
}

fn name(index: usize) -> String {
    format!("null-case-{index}")
}

/// Runs case `index` in `namespace` and returns what it ended with.
pub(crate) async fn run(client: &Client, namespace: &str, index: usize, case: &Case) -> Outcome {
    let r = resource(case.target);
    let api = Api::<DynamicObject>::namespaced_dynamic(client.clone(), namespace, &r);
    let obj = object(case, index);
    if let Some(prior) = &case.prior {
        let mut first = prior.clone();
        first["apiVersion"] = json!(r.api_version());
        first["kind"] = json!(r.kind);
        first["metadata"] = json!({"name": name(index)});
        let first: DynamicObject =
            serde_json::from_value(first).expect("a prior body is an object");
        api.apply(&PatchParams::apply("other"), &first)
            .await
            .unwrap_or_else(|e| panic!("case {:?}: the prior apply: {e}", case.name));
    }
    let written = match case.write {
        Write::Create => api.create(&PostParams::default(), &obj).await,
        Write::Update => {
            let mut empty = object(case, index);
            empty.data.insert("spec".to_owned(), json!({}));
            let created = api
                .create(&PostParams::default(), &empty)
                .await
                .unwrap_or_else(|e| panic!("case {:?}: creating it empty: {e}", case.name));
            let mut next = obj.clone();
            next.metadata.resource_version = created.metadata.resource_version.clone();
            api.update(&PostParams::default(), &next).await
        }
        Write::Apply => api.apply(&PatchParams::apply("nulls"), &obj).await,
    };
    match written {
        Ok(_) => {
            let read = api
                .get(&name(index))
                .await
                .unwrap_or_else(|e| panic!("case {:?}: reading it back: {e}", case.name));
            let read = serde_json::to_value(read).expect("a stored object is JSON");
            let Outcome::Stored { values, .. } = &case.expect else {
                return Outcome::Stored {
                    values: vec![("/spec", read.pointer("/spec").cloned())],
                    owned: applied_fields(&read),
                };
            };
            Outcome::Stored {
                values: values
                    .iter()
                    .map(|(p, _)| (*p, read.pointer(p).cloned()))
                    .collect(),
                owned: applied_fields(&read),
            }
        }
        Err(e) => {
            let status = e
                .status()
                .unwrap_or_else(|| panic!("case {:?}: failed without a status: {e}", case.name));
            Outcome::Refused {
                code: status.code.and_then(|c| u16::try_from(c).ok()).unwrap_or(0),
                message: status
                    .message
                    .clone()
                    .unwrap_or_default()
                    .replace(&name(index), "CASE"),
            }
        }
    }
}

/// The `fieldsV1` of the applier `nulls`, `Value::Null` without one.
fn applied_fields(obj: &Value) -> Value {
    obj.pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .and_then(|all| {
            all.iter()
                .find(|m| m["manager"] == "nulls" && m["operation"] == "Apply")
        })
        .map_or(Value::Null, |m| m["fieldsV1"].clone())
}

/// Checks the outcomes of `cases()` observed on `server`.
pub(crate) fn check(server: &str, case: &Case, observed: &Outcome) {
    assert_eq!(
        observed, &case.expect,
        "{server}, case {:?}: observed (left) otherwise than expected (right)",
        case.name
    );
}

/// An `Optional` with every `Option` `None` (and a list and a map holding `None`s).
pub(crate) fn all_none(name: &str) -> Optional {
    let mut o = Optional::new(
        name,
        OptionalSpec {
            phases: vec![None, Some(Phase::Running)],
            sizes: BTreeMap::from([("a".to_owned(), None), ("b".to_owned(), Some(2))]),
            window: Some(Window {
                start: None,
                minutes: 5,
            }),
            ..OptionalSpec::default()
        },
    );
    o.metadata.name = Some(name.to_owned());
    o
}

/// Writes `all_none` objects by create, update and server-side apply through `Api<Optional>`
/// and returns each write's error, or what was read back when it differs from what was
/// written (`Ok(None)` when it is the same).
pub(crate) async fn write_optionals(
    client: &Client,
    namespace: &str,
) -> Vec<(&'static str, Result<Option<OptionalSpec>, String>)> {
    let api: Api<Optional> = Api::namespaced(client.clone(), namespace);
    let mut out = Vec::new();
    let back =
        |written: &OptionalSpec, read: Optional| (read.spec != *written).then_some(read.spec);
    let created = all_none("created");
    let r = api.create(&PostParams::default(), &created).await;
    let r = match r {
        Ok(_) => Ok(back(
            &created.spec,
            api.get("created")
                .await
                .map_err(|e| e.to_string())
                .expect("read back"),
        )),
        Err(e) => Err(e.to_string()),
    };
    out.push(("create", r));
    let applied = all_none("applied");
    let r = match api.apply(&PatchParams::apply("nulls"), &applied).await {
        Ok(_) => Ok(back(
            &applied.spec,
            api.get("applied").await.expect("read back"),
        )),
        Err(e) => Err(e.to_string()),
    };
    out.push(("apply", r));
    // An apply again after a value was set: back to None.
    let mut set = all_none("applied");
    set.spec.replicas = Some(3);
    set.spec.phase = Some(Phase::Pending);
    let r = match api.apply(&PatchParams::apply("nulls"), &set).await {
        Ok(_) => match api.apply(&PatchParams::apply("nulls"), &applied).await {
            Ok(_) => Ok(back(
                &applied.spec,
                api.get("applied").await.expect("read back"),
            )),
            Err(e) => Err(e.to_string()),
        },
        Err(e) => Err(e.to_string()),
    };
    out.push(("apply of values, then of None", r));
    let r = match api.get("created").await {
        Ok(mut current) => {
            current.spec.replicas = None;
            current.spec.port = None;
            match api.update(&PostParams::default(), &current).await {
                Ok(_) => Ok(back(
                    &current.spec,
                    api.get("created").await.expect("read back"),
                )),
                Err(e) => Err(e.to_string()),
            }
        }
        Err(e) => Err(e.to_string()),
    };
    out.push(("update", r));
    out
}

/// The CRD of `Optional`, as `#[derive(CustomResource)]` generates it.
pub(crate) fn optional_crd() -> CustomResourceDefinition {
    Optional::try_crd().expect("Optional's schema is structural")
}

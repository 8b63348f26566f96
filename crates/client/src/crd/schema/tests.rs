use std::collections::{BTreeMap, BTreeSet, HashMap};

use k8s_openapi::api::batch::v1::JobTemplateSpec;
use k8s_openapi::api::core::v1::{Container, PodSpec, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, Time};
use k8s_openapi::apimachinery::pkg::runtime::RawExtension;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::*;
use crate::crd::merge_semantics::{self, Placements};

/// The schema as JSON, checked against the API server's structural rules, and its
/// relaxations.
fn schema_of<T: JsonSchema>() -> (Value, Vec<Relaxed>) {
    let (props, relaxed) = structural_schema::<T>("spec");
    let v = serde_json::to_value(&props).unwrap();
    assert_structural(&v, "spec", false);
    (v, relaxed)
}

/// The API server's structural-schema rules (apiextensions-apiserver's
/// `schema.NewStructural` and `ValidateStructural`), as far as a generated schema can break
/// them.
fn assert_structural(v: &Value, path: &str, in_junctor: bool) {
    let o = v
        .as_object()
        .unwrap_or_else(|| panic!("{path}: not an object: {v}"));
    assert!(!o.contains_key("$ref"), "{path}: $ref");
    assert!(!o.contains_key("definitions"), "{path}: definitions");
    if in_junctor {
        for k in [
            "type",
            "description",
            "default",
            "nullable",
            "additionalProperties",
            "title",
        ] {
            assert!(!o.contains_key(k), "{path}: `{k}` inside a junctor");
        }
        for k in [
            "x-kubernetes-preserve-unknown-fields",
            "x-kubernetes-int-or-string",
        ] {
            assert!(!o.contains_key(k), "{path}: `{k}` inside a junctor");
        }
    } else {
        let open = o.get("x-kubernetes-int-or-string") == Some(&json!(true))
            || o.get("x-kubernetes-preserve-unknown-fields") == Some(&json!(true));
        match o.get("type") {
            Some(Value::String(t)) => assert!(
                ["object", "array", "string", "integer", "number", "boolean"].contains(&t.as_str()),
                "{path}: type {t}"
            ),
            Some(other) => panic!("{path}: type {other} is not one string"),
            None => assert!(open, "{path}: no type: {v}"),
        }
        if o.contains_key("x-kubernetes-int-or-string") {
            assert!(!o.contains_key("type"), "{path}: int-or-string with a type");
        }
    }
    assert!(
        !(o.contains_key("properties") && o.contains_key("additionalProperties")),
        "{path}: properties and additionalProperties"
    );
    assert_ne!(
        o.get("uniqueItems"),
        Some(&json!(true)),
        "{path}: uniqueItems"
    );
    if let Some(Value::Array(e)) = o.get("enum") {
        assert!(!e.iter().any(Value::is_null), "{path}: null in enum");
        // The API server checks a null against the node's enum, and refuses it.
        assert_ne!(
            o.get("nullable"),
            Some(&json!(true)),
            "{path}: a nullable enum would refuse null"
        );
    }
    assert_list_and_map_types(o, path);
    if let Some(Value::Object(props)) = o.get("properties") {
        for (k, p) in props {
            assert_structural(p, &format!("{path}.{k}"), in_junctor);
        }
    }
    if let Some(items) = o.get("items") {
        assert!(items.is_object(), "{path}: items is not one schema");
        assert_structural(items, &format!("{path}[*]"), in_junctor);
    }
    if let Some(ap) = o.get("additionalProperties")
        && ap.is_object()
    {
        assert_structural(ap, &format!("{path}.*"), in_junctor);
    }
    for j in ["allOf", "anyOf", "oneOf"] {
        if let Some(Value::Array(alts)) = o.get(j) {
            for a in alts {
                assert_structural(a, &format!("{path}/{j}"), true);
                // Every field a junctor names is also named outside it.
                if let Some(Value::Object(props)) = a.get("properties") {
                    for k in props.keys() {
                        assert!(
                            o["properties"].get(k).is_some(),
                            "{path}/{j}: {k} only inside"
                        );
                    }
                }
            }
        }
    }
    if let Some(not) = o.get("not") {
        assert_structural(not, &format!("{path}/not"), true);
    }
}

/// The API server's rules for `x-kubernetes-list-type`, `x-kubernetes-list-map-keys` and
/// `x-kubernetes-map-type` (apiextensions-apiserver's `ValidateCustomResourceDefinitionOpenAPISchema`
/// and `validateMapListKeysMapSet`).
fn assert_list_and_map_types(o: &serde_json::Map<String, Value>, path: &str) {
    if let Some(t) = o.get("x-kubernetes-map-type") {
        assert!(t == "atomic" || t == "granular", "{path}: map type {t}");
        assert_eq!(
            o.get("type"),
            Some(&json!("object")),
            "{path}: map type on a non-object"
        );
    }
    let keys = o.get("x-kubernetes-list-map-keys");
    let Some(list_type) = o.get("x-kubernetes-list-type") else {
        assert!(keys.is_none(), "{path}: map keys without a list type");
        return;
    };
    assert_eq!(
        o.get("type"),
        Some(&json!("array")),
        "{path}: list type on a non-array"
    );
    let items = &o["items"];
    match list_type.as_str() {
        Some("atomic") => assert!(keys.is_none(), "{path}: map keys on an atomic list"),
        Some("set") => {
            assert!(keys.is_none(), "{path}: map keys on a set");
            assert_ne!(
                items.get("nullable"),
                Some(&json!(true)),
                "{path}: nullable set items"
            );
            let t = items["type"].as_str().unwrap_or("");
            assert!(
                ["string", "integer", "number", "boolean"].contains(&t)
                    || (t == "object" && items["x-kubernetes-map-type"] == "atomic")
                    || (t == "array" && items["x-kubernetes-list-type"] == "atomic"),
                "{path}: set of {items}"
            );
        }
        Some("map") => {
            let keys = keys
                .and_then(Value::as_array)
                .filter(|k| !k.is_empty())
                .unwrap_or_else(|| panic!("{path}: a map list without keys"));
            assert_eq!(items["type"], "object", "{path}: map list of non-objects");
            assert_ne!(
                items.get("nullable"),
                Some(&json!(true)),
                "{path}: nullable map items"
            );
            let required = items["required"].as_array().cloned().unwrap_or_default();
            for k in keys {
                let name = k.as_str().unwrap();
                let key = items["properties"]
                    .get(name)
                    .unwrap_or_else(|| panic!("{path}: map key {name} is not an item property"));
                assert!(
                    !matches!(key["type"].as_str(), Some("array" | "object")),
                    "{path}: map key {name} is not a scalar"
                );
                assert!(
                    required.contains(k) || key.get("default").is_some(),
                    "{path}: map key {name} neither required nor defaulted"
                );
                assert_ne!(
                    key.get("nullable"),
                    Some(&json!(true)),
                    "{path}: nullable map key {name}"
                );
            }
        }
        other => panic!("{path}: list type {other:?}"),
    }
}

fn prop<'a>(v: &'a Value, name: &str) -> &'a Value {
    v["properties"]
        .get(name)
        .unwrap_or_else(|| panic!("no property {name} in {v}"))
}

#[derive(JsonSchema)]
#[allow(dead_code, reason = "only the schema is used")]
struct Options {
    required: String,
    optional: Option<String>,
    #[serde(default)]
    defaulted: u32,
    list_of_options: Vec<Option<i32>>,
    map_of_options: BTreeMap<String, Option<bool>>,
}

#[test]
fn option_is_not_required_and_nullable_wherever_it_is() {
    let (s, relaxed) = schema_of::<Options>();
    assert!(relaxed.is_empty(), "{relaxed:?}");
    assert_eq!(s["type"], "object");
    assert_eq!(
        s["required"],
        json!(["required", "list_of_options", "map_of_options"])
    );
    // A property too: a server-side apply of `null` to a non-nullable field is refused.
    assert_eq!(
        prop(&s, "optional"),
        &json!({"type": "string", "nullable": true})
    );
    assert_eq!(prop(&s, "list_of_options")["items"]["nullable"], true);
    assert_eq!(
        prop(&s, "map_of_options")["additionalProperties"]["nullable"],
        true
    );
    assert_eq!(
        prop(&s, "map_of_options")["additionalProperties"]["type"],
        "boolean"
    );
    // u32's "uint32" is no format the API server knows; its minimum stays.
    assert_eq!(
        prop(&s, "defaulted"),
        &json!({"type": "integer", "minimum": 0.0, "default": 0})
    );
}

/// A unit-only enum.
#[derive(JsonSchema, Serialize, Deserialize)]
#[allow(dead_code, reason = "only the schema is used")]
enum Phase {
    Pending,
    Running,
}

#[derive(JsonSchema)]
#[allow(dead_code, reason = "only the schema is used")]
enum External {
    Create { name: String },
    Delete(String),
    Patch(Inner),
}

#[derive(JsonSchema)]
#[serde(tag = "type")]
#[allow(dead_code, reason = "only the schema is used")]
enum Internal {
    Http { url: String },
    Tcp { port: u16 },
    Noop,
}

#[derive(JsonSchema)]
#[serde(tag = "kind", content = "value")]
#[allow(dead_code, reason = "only the schema is used")]
enum Adjacent {
    Size { bytes: i64 },
    Count { n: i64 },
}

#[derive(JsonSchema)]
#[serde(untagged)]
#[allow(dead_code, reason = "only the schema is used")]
enum NumberOrName {
    Number(i32),
    Name(String),
}

#[derive(JsonSchema, Default, Serialize, Deserialize)]
#[allow(dead_code, reason = "only the schema is used")]
struct Inner {
    y: Option<String>,
    z: i32,
}

#[derive(JsonSchema)]
#[allow(dead_code, reason = "only the schema is used")]
struct Enums {
    phase: Phase,
    optional_phase: Option<Phase>,
    phases: Vec<Phase>,
    external: External,
    internal: Internal,
    adjacent: Adjacent,
    number_or_name: NumberOrName,
}

#[test]
fn enums_become_string_enums_and_objects() {
    let (s, relaxed) = schema_of::<Enums>();
    assert!(relaxed.is_empty(), "{relaxed:?}");
    let phase = prop(&s, "phase");
    assert_eq!(phase["type"], "string");
    assert_eq!(phase["enum"], json!(["Pending", "Running"]));
    assert_eq!(phase["description"], "A unit-only enum.");
    // Nullable, with its values in `allOf`: the API server checks a null against the
    // node's `enum` (and refuses it) but not against the junctors.
    assert_eq!(
        prop(&s, "optional_phase"),
        &json!({
            "type": "string",
            "nullable": true,
            "description": "A unit-only enum.",
            "allOf": [{"enum": ["Pending", "Running"]}]
        })
    );
    assert_eq!(
        prop(&s, "phases")["items"]["enum"],
        json!(["Pending", "Running"])
    );

    // Externally tagged: one optional field per variant, exactly one given.
    let ext = prop(&s, "external");
    assert_eq!(ext["type"], "object");
    assert_eq!(prop(ext, "Create")["properties"]["name"]["type"], "string");
    assert_eq!(prop(ext, "Delete")["type"], "string");
    assert_eq!(prop(ext, "Patch")["properties"]["z"]["type"], "integer");
    assert!(ext.get("required").is_none());
    assert_eq!(
        ext["oneOf"],
        json!([{"required": ["Create"]}, {"required": ["Delete"]}, {"required": ["Patch"]}])
    );

    // Internally tagged: the tag's values as an enum, every variant's fields.
    let int = prop(&s, "internal");
    assert_eq!(prop(int, "type")["enum"], json!(["Http", "Tcp", "Noop"]));
    assert_eq!(int["required"], json!(["type"]));
    assert_eq!(prop(int, "url")["type"], "string");
    assert_eq!(prop(int, "port")["type"], "integer");
    assert!(int.get("oneOf").is_none());

    // Adjacently tagged with object contents: the tag enum and the merged content.
    let adj = prop(&s, "adjacent");
    assert_eq!(prop(adj, "kind")["enum"], json!(["Size", "Count"]));
    assert_eq!(prop(prop(adj, "value"), "bytes")["type"], "integer");
    assert_eq!(prop(prop(adj, "value"), "n")["type"], "integer");
    // serde ignores a field of another variant there: no oneOf refuses it.
    assert!(prop(adj, "value").get("oneOf").is_none());

    // Untagged integer-or-string.
    assert_eq!(
        prop(&s, "number_or_name"),
        &json!({"x-kubernetes-int-or-string": true})
    );
}

#[derive(JsonSchema)]
#[allow(dead_code, reason = "only the schema is used")]
enum Mixed {
    Off,
    Limit(u32),
}

#[derive(JsonSchema)]
#[serde(untagged)]
#[allow(dead_code, reason = "only the schema is used")]
enum StringOrObject {
    Name(String),
    Full(Inner),
}

#[derive(JsonSchema)]
#[allow(dead_code, reason = "only the schema is used")]
struct NotStructural {
    mixed: Mixed,
    string_or_object: StringOrObject,
    next: Option<Box<Node>>,
    pair: (i32, String),
}

#[derive(JsonSchema)]
#[allow(dead_code, reason = "only the schema is used")]
struct Node {
    value: i32,
    next: Option<Box<Node>>,
}

#[test]
fn what_cannot_be_structural_is_relaxed_and_reported() {
    let (s, relaxed) = schema_of::<NotStructural>();
    assert_eq!(
        prop(&s, "mixed"),
        &json!({"x-kubernetes-preserve-unknown-fields": true})
    );
    assert_eq!(
        prop(&s, "string_or_object"),
        &json!({"x-kubernetes-preserve-unknown-fields": true})
    );
    // The first level of a recursive type is inlined; where it recurses, anything goes.
    let next = prop(&s, "next");
    assert_eq!(prop(next, "value")["type"], "integer");
    assert_eq!(
        prop(next, "next"),
        &json!({"x-kubernetes-preserve-unknown-fields": true, "nullable": true})
    );
    let pair = prop(&s, "pair");
    assert_eq!(pair["type"], "array");
    assert_eq!(
        (pair["minItems"].as_i64(), pair["maxItems"].as_i64()),
        (Some(2), Some(2))
    );
    assert_eq!(
        pair["items"],
        json!({"x-kubernetes-preserve-unknown-fields": true})
    );

    let paths: Vec<&str> = relaxed.iter().map(|r| r.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "spec.mixed",
            "spec.next.next",
            "spec.pair[*]",
            "spec.string_or_object"
        ],
        "{relaxed:?}"
    );
    assert!(
        relaxed[0]
            .reason
            .contains("different JSON types (object, string)"),
        "{relaxed:?}"
    );
    assert!(
        relaxed[1].reason.contains("recursive type Node"),
        "{relaxed:?}"
    );
}

#[derive(JsonSchema)]
#[allow(dead_code, reason = "only the schema is used")]
struct Flattened {
    a: i32,
    #[serde(flatten)]
    inner: Inner,
}

#[derive(JsonSchema)]
#[allow(dead_code, reason = "only the schema is used")]
struct FlattenedMap {
    a: i32,
    #[serde(flatten)]
    rest: HashMap<String, Value>,
}

#[derive(JsonSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code, reason = "only the schema is used")]
struct Closed {
    a: i32,
}

#[derive(JsonSchema)]
#[allow(dead_code, reason = "only the schema is used")]
struct Shapes {
    flattened: Flattened,
    flattened_map: FlattenedMap,
    closed: Closed,
    labels: BTreeMap<String, String>,
    nested: HashMap<String, Vec<Inner>>,
    anything: Value,
    any_map: serde_json::Map<String, Value>,
    optional_anything: Option<Value>,
    tags: BTreeSet<String>,
    unique_objects: BTreeSet<Phase>,
    #[serde(default = "default_inner")]
    with_default: Inner,
    #[schemars(range(min = 1, max = 10))]
    replicas: i32,
    #[schemars(length(min = 1, max = 63), regex(pattern = r"^[a-z]+$"))]
    name: String,
    letter: char,
    ratio: f64,
}

fn default_inner() -> Inner {
    Inner { y: None, z: 3 }
}

#[test]
fn structs_maps_and_values() {
    let (s, relaxed) = schema_of::<Shapes>();
    assert!(relaxed.is_empty(), "{relaxed:?}");
    let flat = prop(&s, "flattened");
    assert_eq!(flat["required"], json!(["a", "z"]));
    assert!(flat["properties"].get("y").is_some());
    let flat_map = prop(&s, "flattened_map");
    assert_eq!(flat_map["x-kubernetes-preserve-unknown-fields"], true);
    assert_eq!(prop(flat_map, "a")["type"], "integer");
    assert!(prop(&s, "closed").get("additionalProperties").is_none());
    assert!(
        prop(&s, "closed")
            .get("x-kubernetes-preserve-unknown-fields")
            .is_none()
    );
    assert_eq!(
        prop(&s, "labels"),
        &json!({"type": "object", "additionalProperties": {"type": "string"}})
    );
    assert_eq!(
        prop(&s, "nested")["additionalProperties"]["items"]["properties"]["z"]["format"],
        "int32"
    );
    assert_eq!(
        prop(&s, "anything"),
        &json!({"x-kubernetes-preserve-unknown-fields": true})
    );
    // An `Option<Value>`: schemars gives it no `null` alternative (a Value accepts null),
    // but it is optional without a default, so its `None` must be accepted.
    assert_eq!(
        prop(&s, "optional_anything"),
        &json!({"x-kubernetes-preserve-unknown-fields": true, "nullable": true})
    );
    assert_eq!(
        prop(&s, "any_map"),
        &json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true})
    );
    assert_eq!(
        prop(&s, "tags"),
        &json!({"type": "array", "items": {"type": "string"}, "x-kubernetes-list-type": "set"})
    );
    // Enum values are scalars too.
    assert_eq!(prop(&s, "unique_objects")["x-kubernetes-list-type"], "set");
    // A default without its nulls.
    assert_eq!(prop(&s, "with_default")["default"], json!({"z": 3}));
    let replicas = prop(&s, "replicas");
    assert_eq!(
        (replicas["minimum"].as_f64(), replicas["maximum"].as_f64()),
        (Some(1.0), Some(10.0))
    );
    let name = prop(&s, "name");
    assert_eq!(name["pattern"], "^[a-z]+$");
    assert_eq!(
        (name["minLength"].as_i64(), name["maxLength"].as_i64()),
        (Some(1), Some(63))
    );
    assert_eq!(prop(&s, "letter")["maxLength"], 1);
    assert_eq!(
        prop(&s, "ratio"),
        &json!({"type": "number", "format": "double"})
    );
}

#[derive(JsonSchema)]
#[allow(dead_code, reason = "only the schema is used")]
struct Embedded {
    template: PodTemplateSpec,
    selector: LabelSelector,
    port: IntOrString,
    memory: Quantity,
    since: Option<Time>,
    raw: RawExtension,
}

#[test]
fn k8s_openapi_types_embed_structurally() {
    let (s, relaxed) = schema_of::<Embedded>();
    assert!(relaxed.is_empty(), "{relaxed:?}");
    let containers = &prop(prop(&s, "template"), "spec")["properties"]["containers"];
    assert_eq!(containers["type"], "array");
    assert_eq!(containers["items"]["properties"]["image"]["type"], "string");
    let resources = &containers["items"]["properties"]["resources"]["properties"]["limits"];
    assert_eq!(
        resources["additionalProperties"]["x-kubernetes-int-or-string"],
        true
    );
    assert_eq!(
        prop(prop(&s, "selector"), "matchLabels")["additionalProperties"]["type"],
        "string"
    );
    assert_eq!(prop(&s, "port")["x-kubernetes-int-or-string"], true);
    assert_eq!(prop(&s, "memory")["x-kubernetes-int-or-string"], true);
    assert_eq!(prop(&s, "since")["format"], "date-time");
    assert_eq!(
        prop(&s, "raw")["x-kubernetes-preserve-unknown-fields"],
        true
    );
    // Embedded metadata is an ordinary object: managedFields' fieldsV1 keeps its content.
    let fields_v1 = &prop(prop(&s, "template"), "metadata")["properties"]["managedFields"]["items"]
        ["properties"]["fieldsV1"];
    assert_eq!(fields_v1["x-kubernetes-preserve-unknown-fields"], true);
}

#[test]
fn raw_json_schema_keywords_are_translated() {
    let (s, relaxed) = structural_from_value(
        &json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "title": "Root",
            "type": "object",
            "properties": {
                "positive": {"type": "number", "exclusiveMinimum": 0},
                "either": {"type": ["integer", "string", "null"]},
                "three": {"type": ["integer", "string", "boolean"]},
                "constant": {"enum": ["only"]},
                "readonly": {"type": "string", "readOnly": true},
                "bytes": {"type": "string", "format": "binary"},
                "number_formatted": {"type": "string", "format": "int32"},
                "float": {"type": "number", "format": "float"},
                "patterned": {"type": "object", "patternProperties": {"^a": {"type": "string"}}},
                "negated": {"type": "string", "not": {"enum": ["x"]}},
                "mystery": {"type": "string", "x-unknown": 1},
                "both": {"allOf": [{"type": "string"}, {"type": "integer"}]},
                "validated": {
                    "type": "string",
                    "x-kubernetes-validations": [{"rule": "self.size() > 1", "message": "too short"}]
                }
            }
        }),
        "spec",
    );
    let v = serde_json::to_value(&s).unwrap();
    assert_structural(&v, "spec", false);
    assert!(v.get("title").is_none());
    assert_eq!(
        prop(&v, "positive"),
        &json!({"type": "number", "minimum": 0.0, "exclusiveMinimum": true})
    );
    assert_eq!(
        prop(&v, "either"),
        &json!({"x-kubernetes-int-or-string": true, "nullable": true})
    );
    assert_eq!(
        prop(&v, "constant"),
        &json!({"type": "string", "enum": ["only"]})
    );
    assert_eq!(prop(&v, "readonly"), &json!({"type": "string"}));
    // Formats the API server warns about ("unrecognized format") are left out.
    assert_eq!(prop(&v, "bytes"), &json!({"type": "string"}));
    assert_eq!(prop(&v, "number_formatted"), &json!({"type": "string"}));
    assert_eq!(
        prop(&v, "float"),
        &json!({"type": "number", "format": "float"})
    );
    assert_eq!(
        prop(&v, "validated")["x-kubernetes-validations"][0]["rule"],
        "self.size() > 1"
    );
    let reasons: Vec<String> = relaxed.iter().map(ToString::to_string).collect();
    assert_eq!(
        reasons,
        [
            "spec.both: must be both \"string\" and \"integer\": accepts any value instead",
            "spec.mystery: the keyword `x-unknown` is not OpenAPI v3's and is dropped",
            "spec.negated: `not` is dropped: the value is not checked against it",
            "spec.patterned: `patternProperties` has no place in a CRD schema and is dropped",
            "spec.three: a value of several types (boolean, integer, string): accepts any value instead",
        ]
    );
}

/// `Option`s of types that accept any JSON type, whose schemas schemars leaves without a
/// `null` alternative.
#[derive(JsonSchema, Serialize, Deserialize)]
#[allow(dead_code, reason = "only the schema is used")]
struct OpenOptions {
    port: Option<k8s_openapi::apimachinery::pkg::util::intstr::IntOrString>,
    required_port: k8s_openapi::apimachinery::pkg::util::intstr::IntOrString,
    #[serde(default = "default_port")]
    defaulted_port: Option<k8s_openapi::apimachinery::pkg::util::intstr::IntOrString>,
}

fn default_port() -> Option<k8s_openapi::apimachinery::pkg::util::intstr::IntOrString> {
    Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(80))
}

#[test]
fn open_options_are_nullable_unless_required_or_defaulted() {
    let (s, relaxed) = schema_of::<OpenOptions>();
    assert!(relaxed.is_empty(), "{relaxed:?}");
    assert_eq!(prop(&s, "port")["nullable"], true);
    assert_eq!(prop(&s, "port")["x-kubernetes-int-or-string"], true);
    assert!(prop(&s, "required_port").get("nullable").is_none());
    assert_eq!(prop(&s, "defaulted_port")["default"], 80);
    assert!(prop(&s, "defaulted_port").get("nullable").is_none());
}

fn three() -> Option<i32> {
    Some(3)
}

/// Variants whose fields are `Option`s in one and not in the other, and a defaulted
/// `Option`.
#[derive(JsonSchema, Serialize, Deserialize)]
#[allow(dead_code, reason = "only the schema is used")]
#[serde(tag = "kind")]
enum Tagged {
    One { x: Option<i32>, mode: Option<Phase> },
    Two { x: i32, mode: Phase },
}

#[derive(JsonSchema, Serialize, Deserialize)]
#[allow(dead_code, reason = "only the schema is used")]
struct MergedAndDefaulted {
    tagged: Tagged,
    #[serde(default = "three")]
    replicas: Option<i32>,
}

#[test]
fn merged_variants_keep_null_and_enum_and_a_default_beats_null() {
    let (s, relaxed) = schema_of::<MergedAndDefaulted>();
    assert!(relaxed.is_empty(), "{relaxed:?}");
    let tagged = prop(&s, "tagged");
    // An `Option` in one variant: the merged field accepts null.
    assert_eq!(
        prop(tagged, "x"),
        &json!({"type": "integer", "format": "int32", "nullable": true})
    );
    // And keeps its values, in `allOf` since it is nullable.
    assert_eq!(prop(tagged, "mode")["nullable"], true);
    assert_eq!(
        prop(tagged, "mode")["allOf"],
        json!([{"enum": ["Pending", "Running"]}])
    );
    // A default: not nullable, so that the API server replaces a null by it.
    assert_eq!(
        prop(&s, "replicas"),
        &json!({"type": "integer", "format": "int32", "default": 3})
    );
}

/// The node at `path` (`spec.pod.containers[*]`, as the converter writes paths) of a
/// structural schema whose root is `spec`.
fn node_at<'a>(schema: &'a Value, path: &str) -> &'a Value {
    let mut rest = path.strip_prefix("spec").unwrap();
    let mut node = schema;
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix("[*]") {
            node = &node["items"];
            rest = r;
        } else if let Some(r) = rest.strip_prefix(".*")
            && (r.is_empty() || r.starts_with(['.', '[']))
        {
            node = &node["additionalProperties"];
            rest = r;
        } else {
            let r = &rest[1..];
            let end = r.find(['.', '[']).unwrap_or(r.len());
            node = prop(node, &r[..end]);
            rest = &r[end..];
        }
    }
    node
}

/// Checks that every place where an upstream type sits in `T`'s schema carries exactly the
/// merge semantics the table gives that type; returns the places.
fn assert_upstream_semantics<T: JsonSchema>() -> Placements {
    let (s, relaxed) = schema_of::<T>();
    assert!(relaxed.is_empty(), "{relaxed:?}");
    let with_definitions = settings(false).into_generator().into_root_schema_for::<T>();
    let placed = merge_semantics::placements(with_definitions.as_value(), "spec");
    for (path, defs) in &placed {
        let node = node_at(&s, path);
        for name in defs {
            let def = merge_semantics::lookup(name).unwrap();
            assert_eq!(
                node.get("x-kubernetes-map-type").and_then(Value::as_str),
                def.map_type,
                "{path} ({name})"
            );
            for p in def.properties {
                let Some(child) = node["properties"].get(p.name) else {
                    continue;
                };
                let at = format!("{path}.{} ({name})", p.name);
                assert_eq!(
                    child.get("x-kubernetes-list-type").and_then(Value::as_str),
                    p.list_type,
                    "{at}"
                );
                let keys = child
                    .get("x-kubernetes-list-map-keys")
                    .cloned()
                    .unwrap_or(json!([]));
                assert_eq!(keys, json!(p.map_keys), "{at}");
                assert_eq!(
                    child.get("x-kubernetes-map-type").and_then(Value::as_str),
                    p.map_type,
                    "{at}"
                );
            }
        }
    }
    placed
}

#[derive(JsonSchema)]
#[serde(rename_all = "camelCase")]
#[allow(dead_code, reason = "only the schema is used")]
struct Workload {
    pod: PodSpec,
    job_template: JobTemplateSpec,
    maybe_pod: Option<PodSpec>,
    templates: Vec<PodTemplateSpec>,
    sidecars: BTreeMap<String, Container>,
}

#[test]
fn embedded_upstream_types_get_upstreams_list_and_map_types_at_every_depth() {
    let placed = assert_upstream_semantics::<Workload>();
    let pod_spec = "io.k8s.api.core.v1.PodSpec";
    for path in [
        "spec.pod",
        "spec.jobTemplate.spec.template.spec",
        "spec.maybePod",
        "spec.templates[*].spec",
    ] {
        assert!(
            placed.get(path).is_some_and(|d| d.contains(pod_spec)),
            "{path}: {placed:?}"
        );
    }
    assert!(placed["spec.sidecars.*"].contains("io.k8s.api.core.v1.Container"));

    let (s, _) = schema_of::<Workload>();
    let map_list = |path: &str, keys: Value| {
        let node = node_at(&s, path);
        assert_eq!(node["x-kubernetes-list-type"], "map", "{path}");
        assert_eq!(node["x-kubernetes-list-map-keys"], keys, "{path}");
    };
    for pod in [
        "spec.pod",
        "spec.jobTemplate.spec.template.spec",
        "spec.maybePod",
    ] {
        for list in [
            "containers",
            "initContainers",
            "ephemeralContainers",
            "volumes",
        ] {
            map_list(&format!("{pod}.{list}"), json!(["name"]));
        }
        map_list(
            &format!("{pod}.topologySpreadConstraints"),
            json!(["topologyKey", "whenUnsatisfiable"]),
        );
        for c in ["containers", "initContainers"] {
            let c = format!("{pod}.{c}[*]");
            map_list(&format!("{c}.ports"), json!(["containerPort", "protocol"]));
            map_list(&format!("{c}.env"), json!(["name"]));
            map_list(&format!("{c}.volumeMounts"), json!(["mountPath"]));
            assert_eq!(
                node_at(&s, &format!("{c}.args"))["x-kubernetes-list-type"],
                "atomic"
            );
            // The optional map key takes upstream's default and is not nullable.
            let protocol = node_at(&s, &format!("{c}.ports[*].protocol"));
            assert_eq!(protocol["default"], "TCP");
            assert_eq!(protocol.get("nullable"), None);
        }
        assert_eq!(
            node_at(&s, &format!("{pod}.tolerations"))["x-kubernetes-list-type"],
            "atomic"
        );
        assert_eq!(
            node_at(&s, &format!("{pod}.nodeSelector"))["x-kubernetes-map-type"],
            "atomic"
        );
    }
    map_list(
        "spec.sidecars.*.ports",
        json!(["containerPort", "protocol"]),
    );
    map_list("spec.templates[*].spec.containers", json!(["name"]));
    // The template's metadata and the Job's selector.
    let meta = "spec.jobTemplate.metadata";
    assert_eq!(
        node_at(&s, &format!("{meta}.finalizers"))["x-kubernetes-list-type"],
        "set"
    );
    map_list(&format!("{meta}.ownerReferences"), json!(["uid"]));
    let selector = node_at(&s, "spec.jobTemplate.spec.selector");
    assert_eq!(selector["x-kubernetes-map-type"], "atomic");
    assert_eq!(
        prop(selector, "matchExpressions")["x-kubernetes-list-type"],
        "atomic"
    );
    // Still nullable where the Rust type is an `Option`.
    assert_eq!(prop(&s, "maybePod")["nullable"], true);
}

#[test]
fn an_upstream_type_as_the_root_gets_its_semantics() {
    let placed = assert_upstream_semantics::<PodSpec>();
    assert!(placed["spec"].contains("io.k8s.api.core.v1.PodSpec"));
    let (s, _) = schema_of::<PodSpec>();
    assert_eq!(prop(&s, "containers")["x-kubernetes-list-type"], "map");
}

fn atomic_containers(schema: &mut schemars::Schema) {
    // Written for the inlined schema; the generator's pass with definitions sees a `$ref`.
    if let Some(containers) = schema
        .get_mut("properties")
        .and_then(|p| p.get_mut("containers"))
        .and_then(Value::as_object_mut)
    {
        containers.insert("x-kubernetes-list-type".into(), json!("atomic"));
    }
}

fn panicking_transform(schema: &mut schemars::Schema) {
    let props = schema.get_mut("properties").expect("an inlined schema");
    props["hostname"]
        .as_object_mut()
        .unwrap()
        .insert("maxLength".into(), json!(63));
}

#[derive(JsonSchema)]
#[allow(dead_code, reason = "only the schema is used")]
struct UserSet {
    #[schemars(transform = atomic_containers)]
    pod: PodSpec,
    #[schemars(extend("x-kubernetes-map-type" = "granular"))]
    selector: LabelSelector,
}

#[test]
fn a_list_or_map_type_the_user_set_is_kept() {
    let (s, relaxed) = schema_of::<UserSet>();
    assert!(relaxed.is_empty(), "{relaxed:?}");
    let pod = prop(&s, "pod");
    let containers = prop(pod, "containers");
    assert_eq!(containers["x-kubernetes-list-type"], "atomic");
    assert_eq!(containers.get("x-kubernetes-list-map-keys"), None);
    // The rest of the PodSpec still gets upstream's.
    assert_eq!(prop(pod, "initContainers")["x-kubernetes-list-type"], "map");
    assert_eq!(
        prop(&containers["items"], "ports")["x-kubernetes-list-type"],
        "map"
    );
    let selector = prop(&s, "selector");
    assert_eq!(selector["x-kubernetes-map-type"], "granular");
    assert_eq!(
        prop(selector, "matchExpressions")["x-kubernetes-list-type"],
        "atomic"
    );
}

#[derive(JsonSchema)]
#[allow(dead_code, reason = "only the schema is used")]
struct PanickingTransform {
    #[schemars(transform = panicking_transform)]
    pod: PodSpec,
}

#[test]
fn a_transform_that_expects_the_inlined_schema_still_gets_it() {
    // The pass with definitions panics in the transform (printed, caught): no merge
    // semantics, but the schema as before.
    let (s, relaxed) = schema_of::<PanickingTransform>();
    assert!(relaxed.is_empty(), "{relaxed:?}");
    let pod = prop(&s, "pod");
    assert_eq!(prop(pod, "hostname")["maxLength"], 63);
    assert_eq!(prop(pod, "containers").get("x-kubernetes-list-type"), None);
}

/// Types named and shaped like upstream's, but not k8s-openapi's.
mod lookalike {
    use super::*;

    #[derive(JsonSchema)]
    #[allow(dead_code, reason = "only the schema is used")]
    pub(super) struct Container {
        pub(super) name: String,
        pub(super) ports: Vec<ContainerPort>,
        pub(super) args: Vec<String>,
    }

    #[derive(JsonSchema)]
    #[serde(rename_all = "camelCase")]
    #[allow(dead_code, reason = "only the schema is used")]
    pub(super) struct ContainerPort {
        pub(super) container_port: i32,
        pub(super) protocol: Option<String>,
    }

    #[derive(JsonSchema)]
    #[serde(rename_all = "camelCase")]
    #[allow(dead_code, reason = "only the schema is used")]
    pub(super) struct PodSpec {
        pub(super) containers: Vec<Container>,
        pub(super) init_containers: Option<Vec<Container>>,
        pub(super) node_selector: BTreeMap<String, String>,
    }
}

fn has_merge_semantics(v: &Value) -> bool {
    match v {
        Value::Object(o) => {
            o.keys().any(|k| {
                [
                    "x-kubernetes-list-type",
                    "x-kubernetes-list-map-keys",
                    "x-kubernetes-map-type",
                ]
                .contains(&k.as_str())
            }) || o.values().any(has_merge_semantics)
        }
        Value::Array(a) => a.iter().any(has_merge_semantics),
        _ => false,
    }
}

#[test]
fn types_not_from_k8s_openapi_are_unchanged() {
    let (s, relaxed) = schema_of::<lookalike::PodSpec>();
    assert!(relaxed.is_empty(), "{relaxed:?}");
    assert!(!has_merge_semantics(&s), "{s}");
    // Exactly the schema without any placement.
    let inlined = settings(true)
        .into_generator()
        .into_root_schema_for::<lookalike::PodSpec>();
    let (plain, _) = structural_from_value(inlined.as_value(), "spec");
    assert_eq!(s, serde_json::to_value(&plain).unwrap());
    // The same for a spec with every other construct (no upstream type with any).
    let (options, _) = schema_of::<Options>();
    assert!(!has_merge_semantics(&options), "{options}");
}

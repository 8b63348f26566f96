//! From a schemars JSON Schema to a *structural* OpenAPI v3 schema, the only kind the API
//! server accepts in a CustomResourceDefinition (apiextensions.k8s.io/v1).
//!
//! The API server's rules, and what is done about each:
//!
//! * **No `$ref`, no definitions**: subschemas are generated inline. A recursive type cannot
//!   be inlined; the place where it recurses becomes `x-kubernetes-preserve-unknown-fields`
//!   (relaxed: not validated, nothing pruned).
//! * **A `type` on every node** (but int-or-string and preserve-unknown-fields nodes), and
//!   one type, not a list: `Option<T>` is `T` and simply not required; a node without a type
//!   gets the one its keywords imply, or preserves unknown fields when it accepts anything
//!   (`serde_json::Value`).
//! * **`nullable` wherever the Rust type accepts `null`**: an `Option` field (a property, an
//!   array item, a map value) is nullable, so that the `null` serde writes for `None` is
//!   accepted by every write. The API server prunes a `null` sent for a non-nullable field or
//!   map value on create, update and patch, but refuses it in a server-side apply (`must be
//!   of type integer: "null"`, measured on v1.37.2), and refuses a non-nullable `null` array
//!   item in every write. A nullable field keeps its `null` (read back as `None`). A field
//!   with a default is the exception: not nullable, so that the API server replaces a `null`
//!   by the default in every write (a nullable one would keep the `null`). A nullable enum's
//!   values move into `allOf: [{enum: [...]}]`: the API server checks a `null` against
//!   `enum` (and refuses it, `null` in the list or not) but skips the junctors for a `null`,
//!   so other values are still checked and the message still names the supported values.
//!   schemars gives an `Option` of a type that accepts any JSON value (`IntOrString`,
//!   `serde_json::Value`) no `null` alternative: such a property is made nullable when it is
//!   optional and has no default (which also catches a non-`Option` field with
//!   `#[serde(default, skip_serializing_if = ...)]`); as an array item or a map value it is
//!   not, so `Vec<Option<IntOrString>>` refuses a `None`.
//! * **No `type`, `description`, `default`, `nullable` or `additionalProperties` inside
//!   `allOf`/`anyOf`/`oneOf`/`not`, and every field named there also named outside**: enums
//!   are folded into one schema. Unit variants give a string `enum`; variants that are all
//!   objects (externally, internally or adjacently tagged) give an object with every
//!   variant's fields, and for externally tagged enums a `oneOf` of `required` lists keeps
//!   "exactly one variant"; integer-or-string variants give `x-kubernetes-int-or-string`.
//!   Variants of different JSON types (a unit variant beside a struct variant, an untagged
//!   string-or-object) cannot be said structurally: relaxed.
//! * **`properties` and `additionalProperties` are exclusive**: a struct with
//!   `#[serde(flatten)]` map keeps its named fields and preserves unknown fields;
//!   `deny_unknown_fields` (`additionalProperties: false`) is dropped, the API server prunes
//!   unknown fields anyway.
//! * **No `uniqueItems: true`**: a set of scalars becomes `x-kubernetes-list-type: set`.
//! * **List and map types where upstream has them**: a k8s-openapi type's node gets upstream's
//!   `x-kubernetes-list-type`, `x-kubernetes-list-map-keys` and `x-kubernetes-map-type`
//!   (from a table generated from upstream's OpenAPI v3 documents), within the API server's
//!   rules for them: a map list's keys are required or defaulted (an optional key takes
//!   upstream's default and is not nullable), its items not nullable; a set's items are
//!   non-nullable scalars; a type already there is kept. See the `crd` module docs.
//! * **Validation rules** (`x-kubernetes-validations`, written with `rule!` or by hand with
//!   `#[schemars(extend(...))]`) stay on their node; a field's rules and its type's add up
//!   (an `Option<T>` field's rules beside `T`'s), and so do those written by hand and by
//!   `rule!` on one node (by hand first). A malformed entry (no `rule`, an unknown `reason`
//!   or key, an empty message...) is dropped and reported; so are rules on a node left
//!   without a `type` (`serde_json::Value`, a recursion point, an enum of mixed JSON
//!   types: the API server refuses the whole definition for them, CEL needs the type), the
//!   rules of a type flattened as an `Option` (its fields are not required where they
//!   land), and rules on an enum's variants, which cannot survive the folding of the
//!   variants (put them on the enum).
//! * **`items` is one schema**: a tuple of one type is an array of it; of mixed types,
//!   relaxed.
//! * Keywords OpenAPI v3 does not have are dropped (`$schema`, `readOnly`, ...), a number
//!   `exclusiveMinimum` becomes `minimum` + `exclusiveMinimum: true`, formats the API server
//!   does not know for the node's type (`uint32`, `binary`, ...) are dropped (the minimum and
//!   maximum schemars writes for them stay), `null` leaves enums and defaults.

use std::collections::BTreeSet;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::JSONSchemaProps;
use schemars::JsonSchema;
use schemars::generate::SchemaSettings;
use schemars::transform::{
    ReplaceConstValue, ReplacePrefixItems, ReplaceUnevaluatedProperties, SetSingleExample,
};
use serde_json::{Map, Value, json};

use super::merge_semantics::{self, Placements};
use super::rules::{self, RULE_KEY_PREFIX, VALIDATIONS};

/// A place where the generated schema could not say what the Rust type accepts and accepts
/// more instead (`x-kubernetes-preserve-unknown-fields`, or a dropped keyword).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Relaxed {
    /// Where, as a path from the object's root: `spec.rules[*].action`.
    pub path: String,
    /// What could not be expressed and what was done instead.
    pub reason: String,
}

impl std::fmt::Display for Relaxed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.path, self.reason)
    }
}

/// The structural schema of `T` as the field `name` of a custom resource (`spec`, `status`),
/// and the places where it had to accept more than `T` does.
///
/// ```
/// use kctrl_client::crd::structural_schema;
///
/// #[derive(schemars::JsonSchema)]
/// struct Spec {
///     replicas: i32,
///     image: Option<String>,
/// }
///
/// let (schema, relaxed) = structural_schema::<Spec>("spec");
/// assert!(relaxed.is_empty());
/// assert_eq!(schema.type_.as_deref(), Some("object"));
/// assert_eq!(schema.required, Some(vec!["replicas".to_owned()]));
/// let image = &schema.properties.as_ref().unwrap()["image"];
/// assert_eq!(image.type_.as_deref(), Some("string"));
/// // `None` is written as `null`, which a nullable field accepts in every write.
/// assert_eq!(image.nullable, Some(true));
/// ```
pub fn structural_schema<T: JsonSchema>(name: &str) -> (JSONSchemaProps, Vec<Relaxed>) {
    // Once with definitions, to learn where embedded Kubernetes types sit (by their schema
    // names, which inlining loses), and once inlined, the schema itself: inlining is left to
    // schemars, whose attributes (validations on a field) see the inlined schema.
    // A user's `#[schemars(transform = ...)]` written for the inlined schema may not expect a
    // `$ref` there: should it panic, the schema is made without the merge semantics.
    let placed = std::panic::catch_unwind(|| {
        let with_definitions = settings(false).into_generator().into_root_schema_for::<T>();
        merge_semantics::placements(with_definitions.as_value(), name)
    })
    .unwrap_or_default();
    let root = settings(true).into_generator().into_root_schema_for::<T>();
    convert_root(root.as_value(), name, placed)
}

/// The generator's settings, with subschemas inlined or as definitions under `$defs`.
fn settings(inline: bool) -> SchemaSettings {
    SchemaSettings::openapi3().with(|s| {
        s.inline_subschemas = inline;
        // Where the transforms below reach them.
        s.definitions_path = "/$defs".into();
        s.meta_schema = None;
        // Not openapi3()'s `AddNullable` and `ReplaceBoolSchemas`: nulls (the root is
        // never nullable, a nullable enum keeps its values in `allOf`) and boolean
        // schemas are handled below.
        s.transforms = vec![
            Box::new(ReplaceUnevaluatedProperties::default()),
            Box::new(SetSingleExample::default()),
            Box::new(ReplaceConstValue::default()),
            Box::new(ReplacePrefixItems::default()),
        ];
    })
}

/// [`structural_schema`] of a JSON Schema given as a value (what schemars generated).
#[cfg(test)]
pub(crate) fn structural_from_value(root: &Value, name: &str) -> (JSONSchemaProps, Vec<Relaxed>) {
    convert_root(root, name, Placements::new())
}

/// The structural schema of `root`, with the merge semantics of the upstream types `placed`.
fn convert_root(root: &Value, name: &str, placed: Placements) -> (JSONSchemaProps, Vec<Relaxed>) {
    let mut c = Converter {
        relaxed: Vec::new(),
        placed,
    };
    let mut out = c.node(root, name, Place::Root);
    // The type's name, which schemars puts on the root only.
    out.remove("title");
    enums_of_nullables_to_all_of(&mut out);
    match serde_json::from_value::<JSONSchemaProps>(Value::Object(out)) {
        Ok(schema) => (schema, c.relaxed),
        Err(e) => {
            // Not expected: every keyword kept is one JSONSchemaProps has, with its type.
            c.relax(name, format!("the schema could not be represented ({e})"));
            (
                JSONSchemaProps {
                    x_kubernetes_preserve_unknown_fields: Some(true),
                    ..Default::default()
                },
                c.relaxed,
            )
        }
    }
}

/// Where a node sits, which decides whether it can be nullable.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Place {
    /// The root of the spec or status: an object, never `null`.
    Root,
    /// An object's field, an array item or a map value: nullable when the type accepts
    /// `null` (an `Option`).
    Nested,
}

/// Formats the API server recognises, by type (others draw a warning and are ignored).
const INTEGER_FORMATS: &[&str] = &["int32", "int64"];
const NUMBER_FORMATS: &[&str] = &["float", "double"];
const STRING_FORMATS: &[&str] = &[
    "byte",
    "password",
    "date",
    "date-time",
    "datetime",
    "duration",
    "bsonobjectid",
    "uri",
    "email",
    "hostname",
    "ipv4",
    "ipv6",
    "cidr",
    "mac",
    "uuid",
    "uuid3",
    "uuid4",
    "uuid5",
    "isbn",
    "isbn10",
    "isbn13",
    "creditcard",
    "ssn",
    "hexcolor",
    "rgbcolor",
];

/// Keywords copied as they are.
const KEPT: &[&str] = &[
    "description",
    "title",
    "pattern",
    "minLength",
    "maxLength",
    "minimum",
    "maximum",
    "multipleOf",
    "minItems",
    "maxItems",
    "minProperties",
    "maxProperties",
    "example",
    "externalDocs",
    "nullable",
    "x-kubernetes-embedded-resource",
    "x-kubernetes-int-or-string",
    "x-kubernetes-list-map-keys",
    "x-kubernetes-list-type",
    "x-kubernetes-map-type",
    "x-kubernetes-preserve-unknown-fields",
];

/// Keywords dropped without loss: annotations OpenAPI v3 schemas in a CRD do not have.
const DROPPED: &[&str] = &[
    "$schema",
    "$id",
    "$comment",
    "$defs",
    "definitions",
    "components",
    "readOnly",
    "writeOnly",
    "deprecated",
    "examples",
    "contentEncoding",
    "contentMediaType",
];

const PRESERVE: &str = "x-kubernetes-preserve-unknown-fields";
pub(super) const INT_OR_STRING: &str = "x-kubernetes-int-or-string";

fn preserve() -> Map<String, Value> {
    let mut m = Map::new();
    m.insert(PRESERVE.to_owned(), Value::Bool(true));
    m
}

pub(super) fn flag(m: &Map<String, Value>, key: &str) -> bool {
    m.get(key) == Some(&Value::Bool(true))
}

/// Whether a schema only accepts `null` (the `None` branch of an `Option`).
fn is_null_schema(v: &Value) -> bool {
    let Value::Object(o) = v else { return false };
    let only_null_enum = |key: &str| match o.get(key) {
        Some(Value::Array(a)) => !a.is_empty() && a.iter().all(Value::is_null),
        _ => false,
    };
    o.get("type") == Some(&json!("null"))
        || only_null_enum("enum")
        || o.get("const") == Some(&Value::Null)
}

/// Whether a raw schema is an object of exactly one field, required, and nothing else: a
/// variant of an externally tagged enum.
fn is_single_key_object(v: &Value) -> bool {
    let Value::Object(o) = v else { return false };
    let one_prop = o
        .get("properties")
        .and_then(Value::as_object)
        .filter(|p| p.len() == 1);
    let required = o.get("required").and_then(Value::as_array);
    match (one_prop, required) {
        (Some(p), Some(r)) => {
            o.get("additionalProperties") == Some(&Value::Bool(false))
                && r.len() == 1
                && r[0].as_str().is_some_and(|name| p.contains_key(name))
        }
        _ => false,
    }
}

/// The JSON type of a value, as a schema `type`.
fn type_of(v: &Value) -> Option<&'static str> {
    match v {
        Value::String(_) => Some("string"),
        Value::Bool(_) => Some("boolean"),
        Value::Number(n) if n.is_i64() || n.is_u64() => Some("integer"),
        Value::Number(_) => Some("number"),
        Value::Array(_) => Some("array"),
        Value::Object(_) => Some("object"),
        Value::Null => None,
    }
}

/// Moves the `enum` of every nullable node into `allOf: [{enum: [...]}]`, recursively: the
/// API server checks a null against a node's `enum` (and refuses it, `null` in the list or
/// not) but not against its junctors. Done last, so that merging variants sees plain enums.
fn enums_of_nullables_to_all_of(node: &mut Map<String, Value>) {
    if flag(node, "nullable")
        && let Some(values) = node.remove("enum")
    {
        // The converter folds every junctor into its node, so there is no `allOf` yet.
        node.insert("allOf".to_owned(), json!([{ "enum": values }]));
    }
    for (key, child) in node.iter_mut() {
        match (key.as_str(), child) {
            ("properties", Value::Object(props)) => {
                for prop in props.values_mut() {
                    if let Value::Object(p) = prop {
                        enums_of_nullables_to_all_of(p);
                    }
                }
            }
            ("items" | "additionalProperties", Value::Object(c)) => {
                enums_of_nullables_to_all_of(c);
            }
            _ => {}
        }
    }
}

/// Removes `null` members of objects, recursively (a default's nulls would be pruned, or
/// refused where the field is not nullable).
fn without_nulls(v: &Value) -> Value {
    match v {
        Value::Object(o) => Value::Object(
            o.iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), without_nulls(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(without_nulls).collect()),
        other => other.clone(),
    }
}

struct Converter {
    relaxed: Vec<Relaxed>,
    /// Where embedded upstream types sit, whose merge semantics their nodes get.
    placed: Placements,
}

impl Converter {
    fn relax(&mut self, path: &str, reason: impl Into<String>) {
        self.relaxed.push(Relaxed {
            path: path.to_owned(),
            reason: reason.into(),
        });
    }

    /// The well-formed entries of an `x-kubernetes-validations` list; each other one is
    /// dropped and reported.
    fn rules(&mut self, value: &Value, path: &str) -> Vec<Value> {
        let Value::Array(entries) = value else {
            self.relax(
                path,
                format!("`{VALIDATIONS}` must be a list of rules, not {value}: dropped"),
            );
            return Vec::new();
        };
        let mut kept = Vec::new();
        for entry in entries {
            match rules::entry_problem(entry) {
                None => kept.push(entry.clone()),
                Some(problem) => self.relax(path, format!("{problem}: this rule is dropped")),
            }
        }
        kept
    }

    /// The rules a [`Rule`](super::Rule) transform wrote on the raw node `o`, each under a
    /// key of its own (see its `Transform`), in the order they were written. A rule whose
    /// node's required fields are not all required here came through an
    /// `Option<T>` flattened with `#[serde(flatten)]` (or a defaulted flatten): written
    /// for `T`, it would fail every object without `T`'s fields, so it is dropped and
    /// reported; so is a malformed one.
    fn gathered_rules(&mut self, o: &Map<String, Value>, path: &str) -> Vec<Value> {
        let required: BTreeSet<&str> = o
            .get("required")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let mut kept = Vec::new();
        // A `Map` is ordered by key: the n in `x-kctrl-rule-<n>-` keeps a node's order.
        for (key, entry) in o.iter().filter(|(k, _)| k.starts_with(RULE_KEY_PREFIX)) {
            let Some(rule) = entry.get("rule") else {
                self.relax(
                    path,
                    format!("`{key}` is not a rule written by `rule!` ({entry}): dropped"),
                );
                continue;
            };
            if let Some(problem) = rules::entry_problem(rule) {
                self.relax(path, format!("{problem}: this rule is dropped"));
                continue;
            }
            let missing: Vec<&str> = entry
                .get("required")
                .and_then(Value::as_array)
                .map(|r| {
                    r.iter()
                        .filter_map(Value::as_str)
                        .filter(|f| !required.contains(f))
                        .collect()
                })
                .unwrap_or_default();
            if !missing.is_empty() {
                let text = rule.get("rule").and_then(Value::as_str).unwrap_or_default();
                self.relax(
                    path,
                    format!(
                        "the rule `{text}` was written on a type whose fields {} are required, \
                         but they are optional here (the type is flattened as an `Option` or \
                         with a default), where the API server would refuse every object \
                         without them (`no such key`): the rule is dropped; write it on the \
                         outer struct instead, guarding each field with `has(self.field)`",
                        missing.join(", ")
                    ),
                );
                continue;
            }
            kept.push(rule.clone());
        }
        kept
    }

    /// Reports `rules`, which sat on a node without a type and are dropped.
    fn drop_typeless_rules(&mut self, rules: Vec<Value>, path: &str) {
        if rules.is_empty() {
            return;
        }
        let texts: Vec<String> = rules
            .iter()
            .map(|r| {
                let text = r.get("rule").and_then(Value::as_str).unwrap_or_default();
                format!("`{text}`")
            })
            .collect();
        self.relax(
            path,
            format!(
                "validation rules on a node without a type (one that accepts any value) make \
                 the API server refuse the whole CustomResourceDefinition (unable to convert \
                 the schema to CEL declarations): {} dropped; put them on a typed node, e.g. \
                 the enclosing struct",
                texts.join(", ")
            ),
        );
    }

    /// The structural form of `v` at `place`.
    fn node(&mut self, v: &Value, path: &str, place: Place) -> Map<String, Value> {
        let (mut out, nullable) = self.convert(v, path);
        // A defaulted field stays non-nullable: the API server then replaces a null by the
        // default, in every write (a nullable field would keep the null).
        if nullable && place == Place::Nested && !out.contains_key("default") {
            out.insert("nullable".to_owned(), Value::Bool(true));
        }
        out
    }

    /// The structural form of `v`, and whether `v` also accepts `null`.
    fn convert(&mut self, v: &Value, path: &str) -> (Map<String, Value>, bool) {
        let o = match v {
            Value::Bool(true) => return (preserve(), false),
            Value::Object(o) => o,
            Value::Bool(false) => {
                self.relax(
                    path,
                    "a schema that accepts no value: accepts any value instead",
                );
                return (preserve(), false);
            }
            other => {
                self.relax(
                    path,
                    format!("not a schema ({other}): accepts any value instead"),
                );
                return (preserve(), false);
            }
        };
        if let Some(target) = o.get("$ref") {
            let name = target
                .as_str()
                .and_then(|t| t.rsplit('/').next())
                .unwrap_or("?");
            self.relax(
                path,
                format!(
                    "the recursive type {name} cannot be inlined: this field preserves unknown \
                     fields and is not validated"
                ),
            );
            let mut out = preserve();
            if let Some(d) = o.get("description") {
                out.insert("description".to_owned(), d.clone());
            }
            let mut dropped = o
                .get(VALIDATIONS)
                .map(|v| self.rules(v, path))
                .unwrap_or_default();
            dropped.extend(self.gathered_rules(o, path));
            self.drop_typeless_rules(dropped, path);
            return (out, false);
        }

        let mut out = Map::new();
        let mut nullable = false;
        // `additionalProperties: false`: an object that names every field it has.
        let mut closed = false;

        for (key, value) in o {
            let key = key.as_str();
            match key {
                "type" => match value {
                    Value::String(t) if t == "null" => nullable = true,
                    Value::String(_) => {
                        out.insert("type".to_owned(), value.clone());
                    }
                    Value::Array(types) => {
                        let mut names: BTreeSet<&str> = BTreeSet::new();
                        for t in types {
                            match t.as_str() {
                                Some("null") => nullable = true,
                                Some(t) => {
                                    names.insert(t);
                                }
                                None => {}
                            }
                        }
                        match names.len() {
                            0 => {}
                            1 => {
                                let t = names.iter().next().copied().unwrap_or_default();
                                out.insert("type".to_owned(), json!(t));
                            }
                            _ if names == BTreeSet::from(["integer", "string"]) => {
                                out.insert(INT_OR_STRING.to_owned(), Value::Bool(true));
                            }
                            _ => {
                                self.relax(
                                    path,
                                    format!(
                                        "a value of several types ({}): accepts any value instead",
                                        names.into_iter().collect::<Vec<_>>().join(", ")
                                    ),
                                );
                                out.insert(PRESERVE.to_owned(), Value::Bool(true));
                            }
                        }
                    }
                    _ => {}
                },
                "enum" => {
                    if let Value::Array(values) = value {
                        if values.iter().any(Value::is_null) {
                            nullable = true;
                        }
                        let kept: Vec<Value> =
                            values.iter().filter(|v| !v.is_null()).cloned().collect();
                        if !kept.is_empty() {
                            out.insert("enum".to_owned(), Value::Array(kept));
                        }
                    }
                }
                "format" => {
                    // Checked against the type once it is known (`finish`).
                    out.insert("format".to_owned(), value.clone());
                }
                "default" => {
                    if !value.is_null() {
                        out.insert("default".to_owned(), without_nulls(value));
                    }
                }
                "exclusiveMinimum" | "exclusiveMaximum" => {
                    let bound = if key == "exclusiveMinimum" {
                        "minimum"
                    } else {
                        "maximum"
                    };
                    match value {
                        Value::Number(_) => {
                            out.insert(bound.to_owned(), value.clone());
                            out.insert(key.to_owned(), Value::Bool(true));
                        }
                        Value::Bool(_) => {
                            out.insert(key.to_owned(), value.clone());
                        }
                        _ => {}
                    }
                }
                "required" => {
                    out.insert("required".to_owned(), value.clone());
                }
                "properties" => {
                    if let Value::Object(props) = value {
                        let required: BTreeSet<&str> = o
                            .get("required")
                            .and_then(Value::as_array)
                            .map(|r| r.iter().filter_map(Value::as_str).collect())
                            .unwrap_or_default();
                        let converted: Map<String, Value> = props
                            .iter()
                            .map(|(name, schema)| {
                                let mut child =
                                    self.node(schema, &format!("{path}.{name}"), Place::Nested);
                                // schemars leaves the schema of an `Option` of a type that
                                // accepts any JSON type (IntOrString, serde_json::Value) as
                                // it is, without the `null` alternative: such a field is
                                // optional and has no default.
                                let open = flag(&child, INT_OR_STRING) || flag(&child, PRESERVE);
                                if open
                                    && !required.contains(name.as_str())
                                    && !child.contains_key("default")
                                {
                                    child.insert("nullable".to_owned(), Value::Bool(true));
                                }
                                (name.clone(), Value::Object(child))
                            })
                            .collect();
                        out.insert("properties".to_owned(), Value::Object(converted));
                    }
                }
                "additionalProperties" => match value {
                    Value::Bool(false) => closed = true,
                    Value::Bool(true) => {
                        out.insert(PRESERVE.to_owned(), Value::Bool(true));
                    }
                    Value::Object(m) if m.is_empty() => {
                        out.insert(PRESERVE.to_owned(), Value::Bool(true));
                    }
                    schema => {
                        let child = self.node(schema, &format!("{path}.*"), Place::Nested);
                        out.insert("additionalProperties".to_owned(), Value::Object(child));
                    }
                },
                "items" => match value {
                    Value::Array(tuple) => {
                        let items: Vec<Map<String, Value>> = tuple
                            .iter()
                            .map(|s| self.node(s, &format!("{path}[*]"), Place::Nested))
                            .collect();
                        let first = items.first().cloned().unwrap_or_else(preserve);
                        if items.iter().all(|i| *i == first) {
                            out.insert("items".to_owned(), Value::Object(first));
                        } else {
                            self.relax(
                                &format!("{path}[*]"),
                                "a tuple of different types: its items accept any value",
                            );
                            out.insert("items".to_owned(), Value::Object(preserve()));
                        }
                    }
                    schema => {
                        let child = self.node(schema, &format!("{path}[*]"), Place::Nested);
                        out.insert("items".to_owned(), Value::Object(child));
                    }
                },
                VALIDATIONS => {
                    let rules = self.rules(value, path);
                    if !rules.is_empty() {
                        out.insert(VALIDATIONS.to_owned(), Value::Array(rules));
                    }
                }
                "uniqueItems" => {
                    if value == &Value::Bool(true) {
                        out.insert("uniqueItems".to_owned(), Value::Bool(true));
                    }
                }
                "allOf" | "anyOf" | "oneOf" => {}
                "not" => self.relax(
                    path,
                    "`not` is dropped: the value is not checked against it",
                ),
                "patternProperties"
                | "propertyNames"
                | "dependencies"
                | "dependentRequired"
                | "dependentSchemas"
                | "if"
                | "then"
                | "else"
                | "contains"
                | "additionalItems"
                | "unevaluatedItems"
                | "unevaluatedProperties" => self.relax(
                    path,
                    format!("`{key}` has no place in a CRD schema and is dropped"),
                ),
                k if KEPT.contains(&k) => {
                    out.insert(k.to_owned(), value.clone());
                }
                k if DROPPED.contains(&k) => {}
                // Gathered below, in order.
                k if k.starts_with(RULE_KEY_PREFIX) => {}
                k => self.relax(
                    path,
                    format!("the keyword `{k}` is not OpenAPI v3's and is dropped"),
                ),
            }
        }

        // The rules `rule!` wrote, after those written by hand.
        let gathered = self.gathered_rules(o, path);
        if !gathered.is_empty() {
            let list = out
                .entry(VALIDATIONS.to_owned())
                .or_insert_with(|| Value::Array(Vec::new()));
            if let Value::Array(list) = list {
                for r in gathered {
                    if !list.contains(&r) {
                        list.push(r);
                    }
                }
            }
        }

        // Junctors, folded into the node.
        if let Some(Value::Array(all)) = o.get("allOf") {
            for alt in all {
                let (m, n) = self.convert(alt, path);
                nullable |= n;
                out = self.merge_all(out, m, path);
            }
        }
        for junctor in ["anyOf", "oneOf"] {
            let Some(Value::Array(alts)) = o.get(junctor) else {
                continue;
            };
            let exclusive = alts
                .iter()
                .filter(|a| !is_null_schema(a))
                .all(is_single_key_object);
            let mut converted = Vec::new();
            for alt in alts {
                if is_null_schema(alt) {
                    nullable = true;
                    continue;
                }
                let (m, n) = self.convert(alt, path);
                nullable |= n;
                converted.push(m);
            }
            let merged = match converted.len() {
                0 => continue,
                1 => converted.pop().unwrap_or_default(),
                _ => self.merge_any(converted, path, exclusive),
            };
            out = self.merge_all(out, merged, path);
        }

        self.finish(&mut out, closed, path);
        if let Some(defs) = self.placed.get(path) {
            for def in defs.iter().filter_map(|d| merge_semantics::lookup(d)) {
                merge_semantics::apply(&mut out, def);
            }
        }
        (out, nullable)
    }

    /// Fills in the type, turns `uniqueItems` into a list type, and makes opaque objects keep
    /// their content.
    fn finish(&mut self, out: &mut Map<String, Value>, closed: bool, path: &str) {
        if let Some(format) = out.get("format").and_then(Value::as_str) {
            let known = match out.get("type").and_then(Value::as_str) {
                Some("integer") => INTEGER_FORMATS,
                Some("number") => NUMBER_FORMATS,
                Some("string") => STRING_FORMATS,
                _ => &[],
            };
            if !known.contains(&format) {
                out.remove("format");
            }
        }
        let open = flag(out, PRESERVE) || flag(out, INT_OR_STRING);
        if !out.contains_key("type") && !open {
            let inferred =
                if out.contains_key("properties") || out.contains_key("additionalProperties") {
                    Some("object")
                } else if out.contains_key("items") {
                    Some("array")
                } else if let Some(Value::Array(values)) = out.get("enum") {
                    let types: BTreeSet<&str> = values.iter().filter_map(type_of).collect();
                    (types.len() == 1).then(|| types.into_iter().next().unwrap_or_default())
                } else {
                    None
                };
            match inferred {
                Some(t) => {
                    out.insert("type".to_owned(), json!(t));
                }
                // Unconstrained: any JSON value (serde_json::Value).
                None => {
                    out.insert(PRESERVE.to_owned(), Value::Bool(true));
                }
            }
        }
        if out.remove("uniqueItems").is_some() {
            let scalar_items = matches!(
                out.get("items")
                    .and_then(|i| i.get("type"))
                    .and_then(Value::as_str),
                Some("string" | "integer" | "number" | "boolean")
            ) && !out
                .get("items")
                .is_some_and(|i| i.get("nullable") == Some(&Value::Bool(true)));
            if scalar_items && !out.contains_key("x-kubernetes-list-type") {
                out.insert("x-kubernetes-list-type".to_owned(), json!("set"));
            }
        }
        let is_object = out.get("type") == Some(&json!("object"));
        let has_props = out
            .get("properties")
            .is_some_and(|p| p.as_object().is_some_and(|p| !p.is_empty()));
        if is_object && has_props && out.contains_key("additionalProperties") {
            // Named fields beside a map (a flattened map): keep the fields, keep the rest.
            out.remove("additionalProperties");
            out.insert(PRESERVE.to_owned(), Value::Bool(true));
        }
        if is_object && !has_props && !out.contains_key("additionalProperties") && !closed {
            // An object of unknown shape (RawExtension, FieldsV1, `Map<String, Value>`):
            // pruning would empty it.
            out.insert(PRESERVE.to_owned(), Value::Bool(true));
        }
        if flag(out, INT_OR_STRING) {
            out.remove("type");
            out.remove(PRESERVE);
        } else if !out.contains_key("type")
            && let Some(Value::Array(rules)) = out.remove(VALIDATIONS)
        {
            // CEL needs the node's type: the API server refuses the whole definition.
            self.drop_typeless_rules(rules, path);
        }
    }

    /// Both schemas at once (`allOf`, or a single alternative folded into its node).
    fn merge_all(
        &mut self,
        mut a: Map<String, Value>,
        b: Map<String, Value>,
        path: &str,
    ) -> Map<String, Value> {
        for (key, bv) in b {
            match (key.as_str(), a.get_mut(&key)) {
                (_, None) => {
                    a.insert(key, bv);
                }
                ("properties", Some(Value::Object(ap))) => {
                    if let Value::Object(bp) = bv {
                        for (name, bs) in bp {
                            let merged = match (ap.remove(&name), bs) {
                                (Some(Value::Object(x)), Value::Object(y)) => {
                                    Value::Object(self.merge_all(x, y, &format!("{path}.{name}")))
                                }
                                (_, y) => y,
                            };
                            ap.insert(name, merged);
                        }
                    }
                }
                ("required", Some(Value::Array(ar))) => {
                    if let Value::Array(br) = bv {
                        for r in br {
                            if !ar.contains(&r) {
                                ar.push(r);
                            }
                        }
                    }
                }
                // Both the node's rules and its parts' hold (a field's rules and its
                // type's, through the `anyOf` of an `Option`).
                (VALIDATIONS, Some(Value::Array(ar))) => {
                    if let Value::Array(br) = bv {
                        for r in br {
                            if !ar.contains(&r) {
                                ar.push(r);
                            }
                        }
                    }
                }
                ("type", Some(at)) if *at != bv => {
                    self.relax(
                        path,
                        format!("must be both {at} and {bv}: accepts any value instead"),
                    );
                    a.remove("type");
                    a.insert(PRESERVE.to_owned(), Value::Bool(true));
                }
                // The node's own description, default... win over its parts'.
                _ => {}
            }
        }
        a
    }

    /// One of several schemas (an enum's variants), as one structural schema.
    ///
    /// `exclusive`: the variants are objects of one required field each and no other
    /// (`additionalProperties: false`), as serde writes an externally tagged enum.
    fn merge_any(
        &mut self,
        alts: Vec<Map<String, Value>>,
        path: &str,
        exclusive: bool,
    ) -> Map<String, Value> {
        // A field that is an `Option` in one variant accepts null in the merged schema.
        let nullable = alts.iter().any(|a| flag(a, "nullable"));
        let mut out = self.merge_any_values(alts, path, exclusive);
        // (A merged schema never has a default: nothing stops the null.)
        if nullable {
            out.insert("nullable".to_owned(), Value::Bool(true));
        }
        out
    }

    /// [`merge_any`](Self::merge_any) but for `nullable`.
    fn merge_any_values(
        &mut self,
        alts: Vec<Map<String, Value>>,
        path: &str,
        exclusive: bool,
    ) -> Map<String, Value> {
        if alts.iter().any(|a| a.contains_key(VALIDATIONS)) {
            self.relax(
                path,
                "validation rules on an enum's variants cannot be kept when the variants are \
                 folded into one schema: they are dropped; put them on the enum instead (with \
                 `self` the whole value)",
            );
        }
        if alts
            .iter()
            .any(|a| flag(a, PRESERVE) && !a.contains_key("type"))
        {
            return preserve();
        }
        let kinds: BTreeSet<String> = alts
            .iter()
            .map(|a| {
                if flag(a, INT_OR_STRING) {
                    "int-or-string".to_owned()
                } else {
                    a.get("type")
                        .and_then(Value::as_str)
                        .unwrap_or("?")
                        .to_owned()
                }
            })
            .collect();
        let kinds_ref: BTreeSet<&str> = kinds.iter().map(String::as_str).collect();
        if kinds_ref.len() == 1 {
            let kind = kinds_ref.into_iter().next().unwrap_or_default();
            return match kind {
                "object" => self.merge_objects(alts, path, exclusive),
                "array" => {
                    let items: Vec<Map<String, Value>> = alts
                        .iter()
                        .map(|a| {
                            a.get("items")
                                .and_then(Value::as_object)
                                .cloned()
                                .unwrap_or_else(preserve)
                        })
                        .collect();
                    let mut out = Map::new();
                    out.insert("type".to_owned(), json!("array"));
                    let merged = self.merge_any(items, &format!("{path}[*]"), false);
                    out.insert("items".to_owned(), Value::Object(merged));
                    out
                }
                "int-or-string" => {
                    let mut out = Map::new();
                    out.insert(INT_OR_STRING.to_owned(), Value::Bool(true));
                    out
                }
                scalar => merge_scalars(scalar, &alts),
            };
        }
        if kinds_ref
            .iter()
            .all(|k| matches!(*k, "integer" | "string" | "int-or-string"))
        {
            let mut out = Map::new();
            out.insert(INT_OR_STRING.to_owned(), Value::Bool(true));
            return out;
        }
        self.relax(
            path,
            format!(
                "variants of different JSON types ({}) cannot be described structurally: \
                 accepts any value instead",
                kinds.into_iter().collect::<Vec<_>>().join(", ")
            ),
        );
        preserve()
    }

    /// Object variants: every variant's fields, the ones all require required, and for
    /// externally tagged enums (`exclusive`, with different field names) a `oneOf` of
    /// `required` lists, so exactly one variant is given.
    fn merge_objects(
        &mut self,
        alts: Vec<Map<String, Value>>,
        path: &str,
        exclusive: bool,
    ) -> Map<String, Value> {
        let required_of = |a: &Map<String, Value>| -> Vec<String> {
            a.get("required")
                .and_then(Value::as_array)
                .map(|r| {
                    r.iter()
                        .filter_map(|s| s.as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default()
        };
        let props_of = |a: &Map<String, Value>| -> Map<String, Value> {
            a.get("properties")
                .and_then(Value::as_object)
                .cloned()
                .unwrap_or_default()
        };
        let externally_tagged = exclusive && {
            let mut names = BTreeSet::new();
            alts.iter().all(|a| {
                let props = props_of(a);
                let req = required_of(a);
                props.len() == 1
                    && req.len() == 1
                    && props.contains_key(&req[0])
                    && names.insert(req[0].clone())
            })
        };
        let mut props: Vec<(String, Vec<Map<String, Value>>)> = Vec::new();
        let mut required: Option<Vec<String>> = None;
        let mut maps = Vec::new();
        let mut keep_unknown = false;
        for a in &alts {
            for (name, schema) in props_of(a) {
                let schema = schema.as_object().cloned().unwrap_or_default();
                match props.iter_mut().find(|(n, _)| *n == name) {
                    Some((_, list)) => list.push(schema),
                    None => props.push((name, vec![schema])),
                }
            }
            let req = required_of(a);
            required = Some(match required {
                None => req,
                Some(r) => r.into_iter().filter(|x| req.contains(x)).collect(),
            });
            if let Some(Value::Object(m)) = a.get("additionalProperties") {
                maps.push(m.clone());
            }
            keep_unknown |= flag(a, PRESERVE);
        }
        let mut out = Map::new();
        out.insert("type".to_owned(), json!("object"));
        if !props.is_empty() {
            let merged: Map<String, Value> = props
                .into_iter()
                .map(|(name, schemas)| {
                    let sub = format!("{path}.{name}");
                    let schema = if schemas.iter().all(|s| *s == schemas[0]) {
                        schemas[0].clone()
                    } else {
                        self.merge_any(schemas, &sub, false)
                    };
                    (name, Value::Object(schema))
                })
                .collect();
            out.insert("properties".to_owned(), Value::Object(merged));
        }
        if let Some(r) = required.filter(|r| !r.is_empty()) {
            out.insert("required".to_owned(), json!(r));
        }
        if externally_tagged {
            let one_of: Vec<Value> = alts
                .iter()
                .map(|a| json!({ "required": required_of(a) }))
                .collect();
            out.insert("oneOf".to_owned(), Value::Array(one_of));
        }
        if !maps.is_empty() {
            if out.contains_key("properties") || maps.len() != alts.len() {
                keep_unknown = true;
            } else {
                let merged = self.merge_any(maps, &format!("{path}.*"), false);
                out.insert("additionalProperties".to_owned(), Value::Object(merged));
            }
        }
        if keep_unknown {
            out.insert(PRESERVE.to_owned(), Value::Bool(true));
        }
        out
    }
}

/// Variants of one scalar type: that type, with the union of their enums when every variant
/// has one (unit variants, internally tagged enums' tags).
fn merge_scalars(kind: &str, alts: &[Map<String, Value>]) -> Map<String, Value> {
    let mut out = Map::new();
    out.insert("type".to_owned(), json!(kind));
    if alts.iter().all(|a| a.contains_key("enum")) {
        let mut values: Vec<Value> = Vec::new();
        for a in alts {
            if let Some(Value::Array(vs)) = a.get("enum") {
                for v in vs {
                    if !values.contains(v) {
                        values.push(v.clone());
                    }
                }
            }
        }
        out.insert("enum".to_owned(), Value::Array(values));
    }
    // A format all variants share still holds.
    if let Some(f) = alts[0].get("format")
        && alts.iter().all(|a| a.get("format") == Some(f))
    {
        out.insert("format".to_owned(), f.clone());
    }
    out
}

#[cfg(test)]
mod tests;

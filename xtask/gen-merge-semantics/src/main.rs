//! `cargo xtask gen-merge-semantics` (this package's binary): writes the table of upstream's
//! merge semantics (crates/client/src/crd/merge_semantics/table.rs) that kctrl-client's CRD
//! generator gives the Kubernetes types a custom resource embeds.
//!
//! A package of its own, depending on none of the workspace's crates, so that it builds even
//! when the generated file no longer fits the code that uses it:
//! `cargo run -p xtask-gen-merge-semantics [-- --check]`.
//!
//! The facts come from the OpenAPI v3 documents the Kubernetes release publishes
//! (`api/openapi-spec/v3/*.json` of the k8s.io/kubernetes module in the Go module cache, the
//! release the local control plane runs, [`MODULE`]). For every definition
//! (`components.schemas`, named as k8s-openapi names its types' schemas:
//! `io.k8s.api.core.v1.PodSpec`), the table keeps:
//!
//! * per property, `x-kubernetes-list-type` (`atomic`, `set`, `map`), `x-kubernetes-list-map-keys`
//!   and `x-kubernetes-map-type` (`atomic`, `granular`);
//! * the definition's own `x-kubernetes-map-type` (`LabelSelector` is `atomic`);
//! * for a `map` list, the `default` of each key its item type does not require
//!   (`ContainerPort.protocol` defaults to `TCP`): a CustomResourceDefinition's map keys must
//!   be required or defaulted, so the CRD generator needs these to keep the list a map.
//!
//! Only definitions with at least one of these are written, sorted by name (the CRD generator
//! searches them). A definition that two documents describe differently stops the generator.
//!
//! Nothing is downloaded: the module must be in the Go module cache. `cargo xtask
//! gen-merge-semantics` puts it there first if it is not (through the local control plane's
//! build, which resolves k8s.io/kubernetes; a plain `go mod download` of that module fails on
//! its `replace`d staging modules).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};
use serde_json::Value;

#[path = "../../generated_file.rs"]
mod generated_file;
use generated_file::{rustfmt, workspace_root, write_or_check};

/// The module whose OpenAPI documents are read: the Kubernetes release the local control plane
/// runs by default (kctrl-cluster's `DEFAULT_RELEASE`).
pub const MODULE: &str = "k8s.io/kubernetes@v1.37.2";
/// Where the documents are inside the module.
const SPEC_DIR: &str = "api/openapi-spec/v3";
/// Where the table goes, from the workspace root.
const OUTPUT: &str = "crates/client/src/crd/merge_semantics/table.rs";

/// Command-line arguments.
#[derive(clap::Parser)]
#[command(
    name = "xtask-gen-merge-semantics",
    about = "Writes crates/client/src/crd/merge_semantics/table.rs"
)]
struct Args {
    /// Compare with the file in the tree instead of writing it; fail if they differ.
    #[arg(long)]
    check: bool,
}

fn main() -> Result<()> {
    let args = <Args as clap::Parser>::parse();
    let text = generate(&spec_dir()?)?;
    write_or_check(&workspace_root().join(OUTPUT), &text, args.check, &stale())
}

/// What a stale table is not: what the generator writes.
fn stale() -> String {
    format!("`cargo xtask gen-merge-semantics` writes from {MODULE}'s OpenAPI documents")
}

/// The OpenAPI v3 documents' directory in the Go module cache.
fn spec_dir() -> Result<PathBuf> {
    let out = Command::new("go")
        .args(["env", "GOMODCACHE"])
        .output()
        .context("running `go env GOMODCACHE` (the generator reads the Go module cache)")?;
    if !out.status.success() {
        bail!("`go env GOMODCACHE` failed");
    }
    let cache = PathBuf::from(String::from_utf8(out.stdout)?.trim());
    let dir = cache.join(MODULE).join(SPEC_DIR);
    if !dir.is_dir() {
        bail!(
            "{} is missing: {MODULE} is not in the Go module cache. `cargo xtask \
             gen-merge-semantics` fetches it (through `cargo xtask cluster build --kube-version \
             1.37`, which resolves the module as the local control plane's build does); \
             `go mod download {MODULE}` alone fails on the module's replaced staging modules",
            dir.display()
        );
    }
    Ok(dir)
}

/// The merge semantics of one property.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Property {
    list_type: Option<String>,
    map_keys: Vec<String>,
    /// (key, default as JSON) of the map keys the item type does not require.
    key_defaults: Vec<(String, String)>,
    map_type: Option<String>,
}

/// The merge semantics of one definition.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Definition {
    map_type: Option<String>,
    properties: BTreeMap<String, Property>,
}

/// The table's text, from the documents in `dir`.
fn generate(dir: &Path) -> Result<String> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    if files.is_empty() {
        bail!("no OpenAPI documents in {}", dir.display());
    }
    let mut documents = Vec::new();
    for file in &files {
        let text =
            std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
        let doc: Value =
            serde_json::from_str(&text).with_context(|| format!("parsing {}", file.display()))?;
        let name = file
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default()
            .to_owned();
        documents.push((name, doc));
    }
    let table = extract(&documents)?;
    rustfmt(&render(&table, files.len()))
}

/// Every definition's merge semantics, from `(file name, document)` pairs.
fn extract(documents: &[(String, Value)]) -> Result<BTreeMap<String, Definition>> {
    // All definitions first: a map list's item type may be described in another document.
    let mut schemas: BTreeMap<&str, (&str, &Value)> = BTreeMap::new();
    for (file, doc) in documents {
        let Some(Value::Object(defs)) = doc.pointer("/components/schemas") else {
            continue;
        };
        for (name, schema) in defs {
            schemas.entry(name).or_insert((file, schema));
        }
    }
    let mut table: BTreeMap<String, (String, Definition)> = BTreeMap::new();
    for (file, doc) in documents {
        let Some(Value::Object(defs)) = doc.pointer("/components/schemas") else {
            continue;
        };
        for (name, schema) in defs {
            let def = definition(name, schema, &schemas)?;
            match table.get(name) {
                Some((first, known)) if *known != def => bail!(
                    "{name}: {first} and {file} give it different merge semantics \
                     ({known:?} and {def:?})"
                ),
                Some(_) => {}
                None => {
                    table.insert(name.clone(), (file.clone(), def));
                }
            }
        }
    }
    Ok(table
        .into_iter()
        .filter(|(_, (_, d))| d.map_type.is_some() || !d.properties.is_empty())
        .map(|(name, (_, d))| (name, d))
        .collect())
}

fn string_of(v: Option<&Value>, what: &str) -> Result<Option<String>> {
    match v {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(other) => bail!("{what} is not a string: {other}"),
    }
}

/// The definition a schema refers to (`$ref`, or `allOf: [{$ref}]`).
fn referenced<'a>(
    schema: &Value,
    schemas: &BTreeMap<&str, (&'a str, &'a Value)>,
) -> Option<&'a Value> {
    let target = schema.get("$ref").or_else(|| {
        schema
            .get("allOf")
            .and_then(Value::as_array)
            .filter(|a| a.len() == 1)
            .and_then(|a| a[0].get("$ref"))
    })?;
    let name = target.as_str()?.rsplit('/').next()?;
    schemas.get(name).map(|(_, s)| *s)
}

fn definition(
    name: &str,
    schema: &Value,
    schemas: &BTreeMap<&str, (&str, &Value)>,
) -> Result<Definition> {
    let mut def = Definition {
        map_type: string_of(
            schema.get("x-kubernetes-map-type"),
            &format!("{name}: x-kubernetes-map-type"),
        )?,
        properties: BTreeMap::new(),
    };
    let Some(Value::Object(props)) = schema.get("properties") else {
        return Ok(def);
    };
    for (prop, s) in props {
        let what = format!("{name}.{prop}");
        let list_type = string_of(
            s.get("x-kubernetes-list-type"),
            &format!("{what}: x-kubernetes-list-type"),
        )?;
        let map_type = string_of(
            s.get("x-kubernetes-map-type"),
            &format!("{what}: x-kubernetes-map-type"),
        )?;
        let map_keys: Vec<String> = match s.get("x-kubernetes-list-map-keys") {
            None => Vec::new(),
            Some(Value::Array(keys)) => keys
                .iter()
                .map(|k| {
                    k.as_str()
                        .map(str::to_owned)
                        .with_context(|| format!("{what}: a map key that is not a string: {k}"))
                })
                .collect::<Result<_>>()?,
            Some(other) => bail!("{what}: x-kubernetes-list-map-keys is not a list: {other}"),
        };
        if list_type.is_none() && map_type.is_none() && map_keys.is_empty() {
            continue;
        }
        let is_map = list_type.as_deref() == Some("map");
        if is_map == map_keys.is_empty() {
            bail!("{what}: map keys {map_keys:?} with list type {list_type:?}");
        }
        let mut key_defaults = Vec::new();
        if !map_keys.is_empty() {
            let item = s
                .get("items")
                .and_then(|i| referenced(i, schemas).or(Some(i)))
                .with_context(|| format!("{what}: a map list without items"))?;
            let required: Vec<&str> = item
                .get("required")
                .and_then(Value::as_array)
                .map(|r| r.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            for key in &map_keys {
                if required.contains(&key.as_str()) {
                    continue;
                }
                if let Some(default) = item.pointer(&format!("/properties/{key}/default")) {
                    key_defaults.push((key.clone(), serde_json::to_string(default)?));
                }
            }
        }
        def.properties.insert(
            prop.clone(),
            Property {
                list_type,
                map_keys,
                key_defaults,
                map_type,
            },
        );
    }
    Ok(def)
}

/// `Some("x")` or `None` as Rust.
fn option(v: &Option<String>) -> String {
    match v {
        Some(s) => format!("Some({s:?})"),
        None => "None".to_owned(),
    }
}

fn render(table: &BTreeMap<String, Definition>, documents: usize) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "//! Generated by `cargo xtask gen-merge-semantics` from the {documents} OpenAPI v3 \
         documents of {MODULE} ({SPEC_DIR}); do not edit.\n//!\n//! The \
         `x-kubernetes-list-type`, `x-kubernetes-list-map-keys` and `x-kubernetes-map-type` of \
         every definition that has any, sorted by name; see the parent module.\n"
    );
    out.push_str("use super::{Definition, Property};\n\n");
    out.push_str("/// Every definition with merge semantics, sorted by name.\n");
    out.push_str("pub(super) static DEFINITIONS: &[Definition] = &[\n");
    for (name, def) in table {
        let _ = writeln!(
            out,
            "Definition {{ name: {name:?}, map_type: {}, properties: &[",
            option(&def.map_type)
        );
        for (prop, p) in &def.properties {
            let keys: Vec<String> = p.map_keys.iter().map(|k| format!("{k:?}")).collect();
            let defaults: Vec<String> = p
                .key_defaults
                .iter()
                .map(|(k, d)| format!("({k:?}, {d:?})"))
                .collect();
            let _ = writeln!(
                out,
                "Property {{ name: {prop:?}, list_type: {}, map_keys: &[{}], key_defaults: &[{}], \
                 map_type: {} }},",
                option(&p.list_type),
                keys.join(", "),
                defaults.join(", "),
                option(&p.map_type)
            );
        }
        out.push_str("]},\n");
    }
    out.push_str("];\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::generated_file::check;
    use serde_json::json;

    /// Two documents in upstream's shape: a pod-like spec with a map list whose item type is
    /// behind `allOf`, a set, an atomic list and an atomic map; an item type with an optional,
    /// defaulted key; a definition that is atomic as a whole; one with nothing to keep.
    fn documents() -> Vec<(String, Value)> {
        let core = json!({"components": {"schemas": {
            "io.k8s.api.core.v1.PodSpec": {"properties": {
                "containers": {
                    "items": {"allOf": [{"$ref": "#/components/schemas/io.k8s.api.core.v1.Container"}]},
                    "type": "array",
                    "x-kubernetes-list-map-keys": ["name"],
                    "x-kubernetes-list-type": "map",
                },
                "nodeSelector": {"type": "object", "x-kubernetes-map-type": "atomic"},
                "tolerations": {"type": "array", "x-kubernetes-list-type": "atomic"},
                "hostname": {"type": "string"},
            }},
            "io.k8s.api.core.v1.Container": {"required": ["name"], "properties": {
                "name": {"type": "string"},
                "ports": {
                    "items": {"$ref": "#/components/schemas/io.k8s.api.core.v1.ContainerPort"},
                    "type": "array",
                    "x-kubernetes-list-map-keys": ["containerPort", "protocol"],
                    "x-kubernetes-list-type": "map",
                },
                "args": {"type": "array", "x-kubernetes-list-type": "atomic"},
            }},
            "io.k8s.api.core.v1.ContainerPort": {"required": ["containerPort"], "properties": {
                "containerPort": {"type": "integer"},
                "protocol": {"type": "string", "default": "TCP"},
            }},
            "io.k8s.api.core.v1.NodeSelector": {"x-kubernetes-map-type": "atomic", "properties": {}},
            "io.k8s.api.core.v1.Plain": {"properties": {"a": {"type": "string"}}},
        }}});
        let batch = json!({"components": {"schemas": {
            "io.k8s.api.batch.v1.JobSpec": {"properties": {
                "values": {"type": "array", "items": {"type": "integer"}, "x-kubernetes-list-type": "set"},
            }},
            // Described again, identically.
            "io.k8s.api.core.v1.NodeSelector": {"x-kubernetes-map-type": "atomic", "properties": {}},
        }}});
        vec![("core.json".into(), core), ("batch.json".into(), batch)]
    }

    #[test]
    fn extracts_list_and_map_types_keys_and_key_defaults() {
        let table = extract(&documents()).unwrap();
        assert_eq!(
            table.keys().collect::<Vec<_>>(),
            [
                "io.k8s.api.batch.v1.JobSpec",
                "io.k8s.api.core.v1.Container",
                "io.k8s.api.core.v1.NodeSelector",
                "io.k8s.api.core.v1.PodSpec",
            ]
        );
        let pod = &table["io.k8s.api.core.v1.PodSpec"];
        assert_eq!(pod.map_type, None);
        assert_eq!(
            pod.properties.keys().collect::<Vec<_>>(),
            ["containers", "nodeSelector", "tolerations"]
        );
        let containers = &pod.properties["containers"];
        assert_eq!(containers.list_type.as_deref(), Some("map"));
        assert_eq!(containers.map_keys, ["name"]);
        // `name` is required by Container: no default needed.
        assert!(containers.key_defaults.is_empty());
        assert_eq!(
            pod.properties["nodeSelector"].map_type.as_deref(),
            Some("atomic")
        );
        let ports = &table["io.k8s.api.core.v1.Container"].properties["ports"];
        assert_eq!(ports.map_keys, ["containerPort", "protocol"]);
        assert_eq!(
            ports.key_defaults,
            [("protocol".to_owned(), "\"TCP\"".to_owned())]
        );
        assert_eq!(
            table["io.k8s.api.core.v1.NodeSelector"].map_type.as_deref(),
            Some("atomic")
        );
        assert_eq!(
            table["io.k8s.api.batch.v1.JobSpec"].properties["values"]
                .list_type
                .as_deref(),
            Some("set")
        );
    }

    #[test]
    fn a_definition_described_differently_twice_stops_the_generator() {
        let mut docs = documents();
        docs[1].1["components"]["schemas"]["io.k8s.api.core.v1.NodeSelector"]["x-kubernetes-map-type"] =
            json!("granular");
        let err = extract(&docs).unwrap_err().to_string();
        assert!(err.contains("io.k8s.api.core.v1.NodeSelector"), "{err}");
    }

    #[test]
    fn map_keys_without_a_map_list_stop_the_generator() {
        let mut docs = documents();
        docs[0].1["components"]["schemas"]["io.k8s.api.core.v1.PodSpec"]["properties"]["containers"]
            ["x-kubernetes-list-type"] = json!("atomic");
        assert!(extract(&docs).is_err());
    }

    #[test]
    fn the_rendered_table_is_rust_with_every_fact() {
        let table = extract(&documents()).unwrap();
        let text = render(&table, 2);
        assert!(text.contains(
            "Property { name: \"ports\", list_type: Some(\"map\"), map_keys: &[\"containerPort\", \
             \"protocol\"], key_defaults: &[(\"protocol\", \"\\\"TCP\\\"\")], map_type: None },"
        ));
        assert!(text.contains(
            "Definition { name: \"io.k8s.api.core.v1.NodeSelector\", map_type: Some(\"atomic\"), \
             properties: &["
        ));
        assert!(text.contains(MODULE));
    }

    #[test]
    fn check_fails_on_a_stale_file_and_passes_on_a_current_one() {
        let dir =
            std::env::temp_dir().join(format!("xtask-gen-merge-semantics-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("table.rs");
        let text = render(&extract(&documents()).unwrap(), 2);
        std::fs::write(&path, &text).unwrap();
        check(&path, &text, &stale()).unwrap();
        let old = text.replace("TCP", "UDP");
        assert_ne!(old, text);
        std::fs::write(&path, &old).unwrap();
        let err = check(&path, &text, &stale()).unwrap_err().to_string();
        assert!(err.contains("gen-merge-semantics"), "{err}");
        std::fs::remove_file(&path).unwrap();
        assert!(
            check(&path, &text, &stale()).is_err(),
            "a missing file is stale"
        );
        std::fs::remove_dir(&dir).unwrap();
    }
}

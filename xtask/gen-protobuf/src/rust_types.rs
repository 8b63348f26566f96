//! The Rust side: k8s-openapi's structs of a release in Cargo's registry, with each field's Rust name and type.

use super::*;

/// A Rust field's type, as k8s-openapi declares it.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum RustType {
    String,
    I32,
    I64,
    Bool,
    Vec(Box<RustType>),
    Map(Box<RustType>),
    Quantity,
    IntOrString,
    Time,
    /// A struct of k8s-openapi: its module path below the crate (`api::core::v1`) and name.
    Struct(String, String),
}

#[derive(Clone, Debug)]
pub(crate) struct RustField {
    pub(crate) name: String,
    pub(crate) optional: bool,
    pub(crate) ty: RustType,
}

pub(crate) struct RustTypes {
    pub(crate) root: PathBuf,
}

impl RustTypes {
    /// k8s-openapi's types of Kubernetes 1.`minor`.
    pub(crate) fn load(minor: u32) -> Result<Self> {
        let out = Command::new(env!("CARGO"))
            .args(["metadata", "--format-version", "1"])
            .current_dir(workspace_root())
            .output()
            .context("running `cargo metadata`")?;
        let meta: serde_json::Value = serde_json::from_slice(&out.stdout)?;
        let manifest = meta["packages"]
            .as_array()
            .and_then(|ps| ps.iter().find(|p| p["name"] == "k8s-openapi"))
            .and_then(|p| p["manifest_path"].as_str())
            .ok_or_else(|| anyhow!("k8s-openapi not in `cargo metadata`"))?;
        let root = Path::new(manifest)
            .parent()
            .expect("manifest in a dir")
            .join("src")
            .join(format!("v1_{minor}"));
        Ok(Self { root })
    }

    /// The version of k8s-openapi read, from its directory's name.
    pub(crate) fn crate_version(&self) -> String {
        self.root
            .parent()
            .and_then(Path::parent)
            .and_then(|p| p.file_name())
            .and_then(|n| n.to_str())
            .unwrap_or("k8s-openapi")
            .to_owned()
    }

    /// The fields of struct `name` in module `module` (`api::core::v1`), by JSON name.
    pub(crate) fn fields(&self, module: &str, name: &str) -> Result<BTreeMap<String, RustField>> {
        let dir = self.root.join(module.replace("::", "/"));
        let modrs = std::fs::read_to_string(dir.join("mod.rs"))?;
        let needle = format!("::{name};");
        let file = modrs
            .lines()
            .find(|l| l.starts_with("pub use self::") && l.ends_with(&needle))
            .and_then(|l| l.strip_prefix("pub use self::"))
            .and_then(|l| l.split("::").next())
            .ok_or_else(|| anyhow!("{module}::{name} not found in k8s-openapi"))?;
        let text = std::fs::read_to_string(dir.join(format!("{file}.rs")))?;
        let header = format!("pub struct {name} {{");
        let body = text
            .split(&header)
            .nth(1)
            .ok_or_else(|| anyhow!("struct {name} not in {file}.rs"))?;
        let body = &body[..body
            .find("\n}\n")
            .ok_or_else(|| anyhow!("end of struct {name}"))?];
        let mut by_rust = BTreeMap::new();
        for line in body.lines() {
            let Some(decl) = line.trim().strip_prefix("pub ") else {
                continue;
            };
            let (field, ty) = decl
                .split_once(": ")
                .ok_or_else(|| anyhow!("field line {line}"))?;
            let ty = ty.trim_end_matches(',');
            let (optional, ty) = match ty.strip_prefix("Option<") {
                Some(inner) => (true, inner.strip_suffix('>').expect("balanced")),
                None => (false, ty),
            };
            by_rust.insert(
                field.to_owned(),
                RustField {
                    name: field.to_owned(),
                    optional,
                    ty: parse_rust_type(ty)?,
                },
            );
        }
        let mut by_json = BTreeMap::new();
        for line in text.lines() {
            let t = line.trim();
            let Some((json, key)) = t.split_once("\" => Field::Key_") else {
                continue;
            };
            let json = json.trim_start_matches('"');
            let rust = key.trim_end_matches(',');
            if let Some(f) = by_rust.get(rust) {
                by_json.insert(json.to_owned(), f.clone());
            }
        }
        if by_json.len() != by_rust.len() {
            bail!("{module}::{name}: could not map every field to its JSON name");
        }
        Ok(by_json)
    }
}

pub(crate) fn parse_rust_type(ty: &str) -> Result<RustType> {
    Ok(match ty {
        "std::string::String" => RustType::String,
        "i32" => RustType::I32,
        "i64" => RustType::I64,
        "bool" => RustType::Bool,
        "crate::apimachinery::pkg::api::resource::Quantity" => RustType::Quantity,
        "crate::apimachinery::pkg::util::intstr::IntOrString" => RustType::IntOrString,
        "crate::apimachinery::pkg::apis::meta::v1::Time" => RustType::Time,
        _ => {
            if let Some(inner) = ty
                .strip_prefix("std::vec::Vec<")
                .and_then(|t| t.strip_suffix('>'))
            {
                RustType::Vec(Box::new(parse_rust_type(inner)?))
            } else if let Some(inner) = ty
                .strip_prefix("std::collections::BTreeMap<std::string::String, ")
                .and_then(|t| t.strip_suffix('>'))
            {
                RustType::Map(Box::new(parse_rust_type(inner)?))
            } else if let Some(path) = ty.strip_prefix("crate::") {
                let (module, name) = path.rsplit_once("::").ok_or_else(|| anyhow!("type {ty}"))?;
                RustType::Struct(module.to_owned(), name.to_owned())
            } else {
                bail!("Rust type {ty} is not supported by the generator")
            }
        }
    })
}

/// k8s-openapi's module of a Go package.
pub(crate) fn rust_module(package: &str) -> Result<&'static str> {
    Ok(match package {
        "apps/v1" => "api::apps::v1",
        "core/v1" => "api::core::v1",
        "meta/v1" => "apimachinery::pkg::apis::meta::v1",
        _ => bail!("no k8s-openapi module for Go package {package}"),
    })
}

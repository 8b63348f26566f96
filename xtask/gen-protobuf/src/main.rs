//! `cargo xtask gen-protobuf` (this package's binary): writes the protobuf decoders and
//! encoders of whole Deployments and ReplicaSets (crates/client/src/protobuf/objects.rs).
//!
//! A package of its own, depending on none of the workspace's crates, so that it builds even
//! when the generated file no longer fits the code that uses it:
//! `cargo run -p xtask-gen-protobuf [-- --check]`.
//!
//! Two sources are paired field by field, by JSON name:
//!
//! * the Go types of the Kubernetes release we target (k8s.io/api and k8s.io/apimachinery
//!   in the Go module cache): each field's protobuf number, whether it is a pointer, and
//!   its JSON tag (`omitempty`, `,inline`), which together say how a value that protobuf
//!   writes but JSON omits must be read;
//! * k8s-openapi's Rust types of the same release (in Cargo's registry): each field's Rust
//!   name and type, which say how the value is stored.
//!
//! The decoders fill k8s-openapi's types exactly as the JSON of the same object decodes
//! into them, so a cache fed from protobuf holds the same values as one fed from JSON. The
//! rules (see [`Field::assign`]): a pointer that protobuf sends is `Some`; a non-pointer
//! scalar tagged `omitempty` is `None` when zero (JSON leaves it out); a non-pointer scalar
//! without `omitempty` is `Some(zero)` even when absent (JSON always writes it); an empty
//! list or map is `None`; a zero `metav1.Time` is `None` (JSON writes `null`).
//!
//! A Go field that k8s-openapi does not have is skipped (listed in the output's header); a
//! Rust field that no Go field fills, or a type the generator does not know, stops it.
//!
//! The code is generated once for every Kubernetes release k8s-openapi supports ([`RELEASES`])
//! and written as one file: what all releases share is written as it is; a function, match
//! arm, statement or constructor field that only some releases have carries a `#[cfg]` on
//! [`CFG`], which kctrl-client's build script sets from the release the user selected in
//! k8s-openapi. So the crate compiles for whichever release its user picks.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, anyhow, bail};

/// The Kubernetes releases k8s-openapi 0.29 supports (1.MINOR), oldest first, each with the
/// version of k8s.io/api and k8s.io/apimachinery whose Go types are read for it (the newest
/// patch on the module proxy; for 1.36 and 1.37 the local control plane's). k8s-openapi has
/// one module of Rust types per release (`src/v1_MINOR`).
const RELEASES: &[(u32, &str)] = &[
    (33, "v0.33.13"),
    (34, "v0.34.13"),
    (35, "v0.35.10"),
    (36, "v0.36.5"),
    (37, "v0.37.2"),
];
/// The `cfg` the generated code is gated with: kctrl-client's build script sets
/// `k8s_api_ge = "1.N"` for every supported release N up to the one k8s-openapi was built for.
const CFG: &str = "k8s_api_ge";
/// Where the decoders go, from the workspace root.
const OUTPUT: &str = "crates/client/src/protobuf/objects.rs";
/// The types decoded whole: (Go package, type), each gets a `FromProtobuf` impl.
const ROOTS: &[(&str, &str)] = &[("apps/v1", "Deployment"), ("apps/v1", "ReplicaSet")];

/// Command-line arguments.
#[derive(clap::Parser)]
#[command(
    name = "xtask-gen-protobuf",
    about = "Writes crates/client/src/protobuf/objects.rs"
)]
struct Args {
    /// Compare with the file in the tree instead of writing it; fail if they differ.
    #[arg(long)]
    check: bool,
}

fn main() -> Result<()> {
    let args = <Args as clap::Parser>::parse();
    let root = workspace_root();
    let text = generate()?;
    let path = root.join(OUTPUT);
    if args.check {
        let old = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        if old != text {
            bail!(
                "{} is not what `cargo xtask gen-protobuf` writes from the current sources; run it",
                path.display()
            );
        }
        println!("{} is up to date", path.display());
        return Ok(());
    }
    std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    println!("wrote {}", path.display());
    Ok(())
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .and_then(Path::parent)
        .expect("xtask/gen-protobuf sits in the workspace")
        .to_path_buf()
}

/// The generated file's text.
fn generate() -> Result<String> {
    let mut releases = Vec::new();
    let mut crate_version = String::new();
    for &(minor, module_version) in RELEASES {
        let go = GoTypes::load(module_version)?;
        let rust = RustTypes::load(minor)?;
        crate_version = rust.crate_version();
        let generated = Generator {
            go,
            rust,
            done: BTreeSet::new(),
            queue: VecDeque::new(),
            skipped: Vec::new(),
        }
        .run()
        .with_context(|| format!("Kubernetes 1.{minor} ({module_version})"))?;
        releases.push((minor, generated));
    }
    rustfmt(&render(&releases, &crate_version)?)
}

/// `text` as `cargo fmt` would leave it.
fn rustfmt(text: &str) -> Result<String> {
    use std::io::Write as _;
    let mut child = Command::new("rustfmt")
        .args(["--edition", "2024", "--emit", "stdout"])
        .current_dir(workspace_root())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .context("running rustfmt")?;
    child
        .stdin
        .take()
        .expect("piped")
        .write_all(text.as_bytes())?;
    let out = child.wait_with_output()?;
    if !out.status.success() {
        bail!(
            "rustfmt refused the generated code:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8(out.stdout)?)
}

// ---------------------------------------------------------------------------------------
// Go side

/// A Go package of the types we read, by its path below the module.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct GoKey {
    package: String,
    name: String,
}

#[derive(Clone, Debug)]
struct GoField {
    /// The Go type as written (`*SecurityContext`, `[]Container`, `map[string]string`).
    ty: String,
    /// The package the type name is written in, for unqualified names.
    package: String,
    /// Import aliases of the file the field is declared in.
    imports: BTreeMap<String, String>,
    json: String,
    omitempty: bool,
    inline: bool,
    number: u32,
}

impl GoField {
    fn pointer(&self) -> bool {
        self.ty.starts_with('*')
    }

    /// The struct the field's value is, or holds a list or pointer of.
    fn element(&self) -> Result<GoKey> {
        let base = self
            .ty
            .trim_start_matches('*')
            .trim_start_matches("[]")
            .trim_start_matches('*');
        match base.split_once('.') {
            Some((alias, name)) => {
                let package = self
                    .imports
                    .get(alias)
                    .ok_or_else(|| anyhow!("import alias {alias} of {} not known", self.ty))?;
                Ok(GoKey {
                    package: package.clone(),
                    name: name.to_owned(),
                })
            }
            None => Ok(GoKey {
                package: self.package.clone(),
                name: base.to_owned(),
            }),
        }
    }
}

/// Module paths of the packages read, below the Go module cache.
const GO_PACKAGES: &[(&str, &str)] = &[
    ("apps/v1", "k8s.io/api@{v}/apps/v1"),
    ("core/v1", "k8s.io/api@{v}/core/v1"),
    ("meta/v1", "k8s.io/apimachinery@{v}/pkg/apis/meta/v1"),
];

struct GoTypes {
    structs: BTreeMap<GoKey, Vec<GoField>>,
}

impl GoTypes {
    fn load(version: &str) -> Result<Self> {
        let cache = go_mod_cache()?;
        let modules = [
            format!("k8s.io/api@{version}"),
            format!("k8s.io/apimachinery@{version}"),
        ];
        if modules.iter().any(|m| !cache.join(m).is_dir()) {
            // Fetched through the Go module proxy, as the control plane's build does.
            let status = Command::new("go")
                .args(["mod", "download"])
                .args(&modules)
                .status()
                .context("running `go mod download`")?;
            if !status.success() {
                bail!("`go mod download {}` failed", modules.join(" "));
            }
        }
        let mut structs = BTreeMap::new();
        for (package, dir) in GO_PACKAGES {
            let dir = cache.join(dir.replace("{v}", version));
            let mut files: Vec<_> = std::fs::read_dir(&dir)
                .with_context(|| format!("reading {}", dir.display()))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| {
                    let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
                    name.ends_with(".go")
                        && !name.ends_with("_test.go")
                        && !name.starts_with("zz_generated")
                        && !name.ends_with(".pb.go")
                })
                .collect();
            files.sort();
            for file in files {
                let text = std::fs::read_to_string(&file)?;
                parse_go_file(package, &text, &mut structs);
            }
        }
        Ok(Self { structs })
    }
}

fn go_mod_cache() -> Result<PathBuf> {
    let out = Command::new("go")
        .args(["env", "GOMODCACHE"])
        .output()
        .context("running `go env GOMODCACHE`")?;
    if !out.status.success() {
        bail!("`go env GOMODCACHE` failed");
    }
    Ok(PathBuf::from(String::from_utf8(out.stdout)?.trim()))
}

/// Maps Go import paths to our package names.
fn package_of_import(path: &str) -> Option<&'static str> {
    match path {
        "k8s.io/api/core/v1" => Some("core/v1"),
        "k8s.io/api/apps/v1" => Some("apps/v1"),
        "k8s.io/apimachinery/pkg/apis/meta/v1" => Some("meta/v1"),
        "k8s.io/apimachinery/pkg/api/resource" => Some("resource"),
        "k8s.io/apimachinery/pkg/util/intstr" => Some("intstr"),
        "k8s.io/apimachinery/pkg/types" => Some("types"),
        "k8s.io/apimachinery/pkg/runtime" => Some("runtime"),
        _ => None,
    }
}

fn parse_go_file(package: &str, text: &str, structs: &mut BTreeMap<GoKey, Vec<GoField>>) {
    let mut imports = BTreeMap::new();
    let mut lines = text.lines();
    let mut in_imports = false;
    while let Some(line) = lines.next() {
        let t = line.trim();
        if t.starts_with("import (") {
            in_imports = true;
            continue;
        }
        if in_imports {
            if t == ")" {
                in_imports = false;
                continue;
            }
            let (alias, path) = match t.split_once(' ') {
                Some((a, p)) => (a.to_owned(), p.trim_matches('"')),
                None => {
                    let p = t.trim_matches('"');
                    (p.rsplit('/').next().unwrap_or(p).to_owned(), p)
                }
            };
            if let Some(pkg) = package_of_import(path) {
                imports.insert(alias, pkg.to_owned());
            }
            continue;
        }
        let Some(rest) = line.strip_prefix("type ") else {
            continue;
        };
        let Some(name) = rest.strip_suffix(" struct {") else {
            continue;
        };
        let mut fields = Vec::new();
        for line in lines.by_ref() {
            if line == "}" {
                break;
            }
            let t = line.trim();
            if t.starts_with("//") || !t.contains('`') {
                continue;
            }
            let (decl, tag) = t.split_once('`').expect("checked");
            let tag = tag.trim_end_matches('`');
            let words: Vec<&str> = decl.split_whitespace().collect();
            let (ty, embedded) = match words.as_slice() {
                [_, ty] => (*ty, false),
                [ty] => (*ty, true),
                _ => continue,
            };
            let Some(json) = tag_value(tag, "json") else {
                continue;
            };
            let Some(proto) = tag_value(tag, "protobuf") else {
                continue;
            };
            let mut json_parts = json.split(',');
            let json_name = json_parts.next().unwrap_or("").to_owned();
            let options: Vec<&str> = json_parts.collect();
            // An embedded struct without a JSON name is inlined, whether its tag says
            // `json:",inline"` (up to 1.36) or `json:""` (1.37).
            let inline = options.contains(&"inline") || (embedded && json_name.is_empty());
            let Some(number) = proto.split(',').nth(1).and_then(|n| n.parse().ok()) else {
                continue;
            };
            fields.push(GoField {
                ty: ty.to_owned(),
                package: package.to_owned(),
                imports: imports.clone(),
                json: json_name,
                omitempty: options.contains(&"omitempty") || options.contains(&"omitzero"),
                inline,
                number,
            });
        }
        structs.insert(
            GoKey {
                package: package.to_owned(),
                name: name.to_owned(),
            },
            fields,
        );
    }
}

/// The value of `key:"…"` in a struct tag.
fn tag_value<'a>(tag: &'a str, key: &str) -> Option<&'a str> {
    let start = tag.find(&format!("{key}:\""))? + key.len() + 2;
    let end = tag[start..].find('"')?;
    Some(&tag[start..start + end])
}

// ---------------------------------------------------------------------------------------
// Rust side

/// A Rust field's type, as k8s-openapi declares it.
#[derive(Clone, Debug, PartialEq)]
enum RustType {
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
struct RustField {
    name: String,
    optional: bool,
    ty: RustType,
}

struct RustTypes {
    root: PathBuf,
}

impl RustTypes {
    /// k8s-openapi's types of Kubernetes 1.`minor`.
    fn load(minor: u32) -> Result<Self> {
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
    fn crate_version(&self) -> String {
        self.root
            .parent()
            .and_then(Path::parent)
            .and_then(|p| p.file_name())
            .and_then(|n| n.to_str())
            .unwrap_or("k8s-openapi")
            .to_owned()
    }

    /// The fields of struct `name` in module `module` (`api::core::v1`), by JSON name.
    fn fields(&self, module: &str, name: &str) -> Result<BTreeMap<String, RustField>> {
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

fn parse_rust_type(ty: &str) -> Result<RustType> {
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
fn rust_module(package: &str) -> Result<&'static str> {
    Ok(match package {
        "apps/v1" => "api::apps::v1",
        "core/v1" => "api::core::v1",
        "meta/v1" => "apimachinery::pkg::apis::meta::v1",
        _ => bail!("no k8s-openapi module for Go package {package}"),
    })
}

// ---------------------------------------------------------------------------------------
// Output

/// One function to write: the fields of Go struct `go` read into Rust struct `rust`
/// (the same type, or the struct a Go type is inlined into).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Job {
    go: GoKey,
    rust_module: String,
    rust_name: String,
}

impl Job {
    fn function(&self) -> String {
        let own = format!(
            "{}_{}",
            self.go.package.replace('/', "_"),
            snake(&self.go.name)
        );
        if self.go.name == self.rust_name {
            format!("merge_{own}")
        } else {
            format!("merge_{own}_into_{}", snake(&self.rust_name))
        }
    }
}

fn new_function(module: &str, name: &str) -> String {
    let short = module.rsplit("::").take(2).collect::<Vec<_>>();
    format!("new_{}_{}_{}", short[1], short[0], snake(name))
}

fn merge_function(module: &str, name: &str) -> String {
    let short = module.rsplit("::").take(2).collect::<Vec<_>>();
    format!("merge_{}_{}_{}", short[1], short[0], snake(name))
}

fn snake(name: &str) -> String {
    let chars: Vec<char> = name.chars().collect();
    let mut out = String::new();
    for (i, &c) in chars.iter().enumerate() {
        if c.is_ascii_uppercase() {
            let prev_lower = i > 0 && chars[i - 1].is_ascii_lowercase();
            let next_lower = chars.get(i + 1).is_some_and(|n| n.is_ascii_lowercase());
            let prev_upper = i > 0 && chars[i - 1].is_ascii_uppercase();
            if i > 0 && (prev_lower || (prev_upper && next_lower)) {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

fn rust_path(module: &str, name: &str) -> String {
    format!("k8s_openapi::{module}::{name}")
}

struct Generator {
    go: GoTypes,
    rust: RustTypes,
    done: BTreeSet<Job>,
    queue: VecDeque<Job>,
    skipped: Vec<String>,
}

/// What one struct's fields give: the decoder's match arms, the constructor's initial values,
/// the JSON names filled, and the encoder's statements by field number.
#[derive(Default)]
struct Emitted {
    arms: Vec<String>,
    inits: Vec<String>,
    filled: BTreeSet<String>,
    writes: Vec<(u32, String)>,
}

/// A Go field paired with the Rust field it fills.
struct Field<'a> {
    go: &'a GoField,
    rust: RustField,
}

/// The file's text: every release's items merged, each item and unit not all releases have
/// gated on the releases that have it.
fn render(releases: &[(u32, Generated)], crate_version: &str) -> Result<String> {
    let all: BTreeSet<u32> = releases.iter().map(|(m, _)| *m).collect();
    // Items in order (newest release's order, others' inserted where they stood), each with
    // its text per release.
    let mut items: Vec<(String, BTreeMap<u32, &Item>)> = Vec::new();
    let mut keys = Vec::new();
    for (minor, generated) in releases.iter().rev() {
        let order: Vec<&str> = generated.items.iter().map(|i| i.key.as_str()).collect();
        keys = merge_order(keys, *minor, &order);
        for item in &generated.items {
            match items.iter_mut().find(|(k, _)| *k == item.key) {
                Some((_, per)) => {
                    per.insert(*minor, item);
                }
                None => items.push((item.key.clone(), BTreeMap::from([(*minor, item)]))),
            }
        }
    }
    let mut body = String::new();
    for (key, _) in &keys {
        let per = &items.iter().find(|(k, _)| k == key).expect("merged").1;
        let present: BTreeSet<u32> = per.keys().copied().collect();
        let first = per.values().next().expect("present in a release");
        for item in per.values() {
            if item.head != first.head || item.tail != first.tail {
                bail!("{key} differs between releases in more than its fields");
            }
        }
        let mut units = Vec::new();
        for (minor, item) in per.iter().rev() {
            let order: Vec<&str> = item.units.iter().map(String::as_str).collect();
            units = merge_order(units, *minor, &order);
        }
        if let Some(cfg) = gate(&present, &all) {
            let _ = write!(body, "\n#[cfg({cfg})]");
        }
        match &first.constructor {
            Some(plain) if units.is_empty() => body.push_str(plain),
            _ => {
                body.push_str(&first.head);
                for (unit, minors) in &units {
                    if let Some(cfg) = gate(minors, &present) {
                        let _ = writeln!(body, "#[cfg({cfg})]");
                    }
                    body.push_str(unit);
                }
                body.push_str(&first.tail);
            }
        }
    }

    let mut out = String::new();
    let modules: Vec<&str> = RELEASES.iter().map(|(_, v)| *v).collect();
    let _ = write!(
        out,
        "// @generated by `cargo xtask gen-protobuf` from the Go types of k8s.io/api and\n\
         // k8s.io/apimachinery {} and the Rust types of {crate_version} (v1_{} to v1_{}).\n\
         // Do not edit: change xtask/gen-protobuf/src/main.rs and run `cargo xtask gen-protobuf`.\n//\n\
         // Code that only some Kubernetes releases have is gated on `{CFG}` (set by build.rs).\n//\n",
        modules.join(", "),
        all.first().expect("releases"),
        all.last().expect("releases"),
    );
    let mut skipped = Vec::new();
    for (minor, generated) in releases.iter().rev() {
        let order: Vec<&str> = generated.skipped.iter().map(String::as_str).collect();
        skipped = merge_order(skipped, *minor, &order);
    }
    if skipped.is_empty() {
        out.push_str("// Every Go field has a Rust field.\n");
    } else {
        out.push_str("// Go fields without a Rust field (skipped when read):\n");
        for (s, minors) in &skipped {
            match minors.len() == all.len() {
                true => {
                    let _ = writeln!(out, "// - {s}");
                }
                false => {
                    let list: Vec<String> = minors.iter().map(|m| format!("1.{m}")).collect();
                    let _ = writeln!(out, "// - {s}, in {}", list.join(", "));
                }
            }
        }
    }
    let helpers: BTreeSet<&str> = releases
        .iter()
        .flat_map(|(_, g)| g.helpers.iter().copied())
        .collect();
    let _ = write!(
        out,
        "\n//! Protobuf decoders of whole Deployments and ReplicaSets, into k8s-openapi's types.\n\
         //!\n\
         //! One `merge_*` function per Go struct reads its message field by field into the\n\
         //! k8s-openapi struct of the same name (a struct Go inlines, such as a volume's\n\
         //! source, into the struct that holds it). Values land as the same object's JSON\n\
         //! would put them: a zero value of a non-pointer field tagged `omitempty` is `None`,\n\
         //! an empty list or map is `None`, an empty `Time` is `None`; `managedFields` are\n\
         //! skipped. Fields a message carries that k8s-openapi lacks are skipped, as JSON's\n\
         //! decoder skips unknown members. The code covers every Kubernetes release\n\
         //! k8s-openapi supports; what a release lacks is compiled out.\n\
         \nuse super::wire::{{Reader, Writer, {}}};\n\
         use super::{{FromProtobuf, ProtobufError, ToProtobuf}};\n",
        helpers.into_iter().collect::<Vec<_>>().join(", ")
    );
    out.push_str(&body);
    Ok(out)
}

/// Merges the ordered `units` of release `minor` into `merged` (the units of newer releases,
/// each with the releases that have it): a unit already there gains `minor`; a new one is
/// inserted after the unit that precedes it in `units`.
fn merge_order(
    mut merged: Vec<(String, BTreeSet<u32>)>,
    minor: u32,
    units: &[&str],
) -> Vec<(String, BTreeSet<u32>)> {
    let mut at = 0;
    for unit in units {
        match merged.iter().position(|(u, _)| u == unit) {
            Some(i) => {
                merged[i].1.insert(minor);
                at = i + 1;
            }
            None => {
                merged.insert(at, ((*unit).to_owned(), BTreeSet::from([minor])));
                at += 1;
            }
        }
    }
    merged
}

/// The `cfg` predicate true exactly for the releases `some` out of `all` (both sets of minor
/// versions), or `None` when `some` is all of them. The newest release stands for every later
/// one and the oldest for every earlier one, so a field added in 1.35 is
/// `k8s_api_ge = "1.35"` and one removed in 1.36 is `not(k8s_api_ge = "1.36")`.
fn gate(some: &BTreeSet<u32>, all: &BTreeSet<u32>) -> Option<String> {
    if some == all {
        return None;
    }
    let (lo, hi) = (*all.first()?, *all.last()?);
    // Runs of consecutive releases of `all` that `some` holds.
    let mut runs: Vec<(u32, u32)> = Vec::new();
    let mut run: Option<(u32, u32)> = None;
    for m in all {
        match (some.contains(m), run) {
            (true, None) => run = Some((*m, *m)),
            (true, Some((a, _))) => run = Some((a, *m)),
            (false, Some(r)) => {
                runs.push(r);
                run = None;
            }
            (false, None) => {}
        }
    }
    runs.extend(run);
    let next = |b: u32| all.iter().copied().find(|m| *m > b);
    let preds: Vec<String> = runs
        .into_iter()
        .map(|(a, b)| {
            let mut parts = Vec::new();
            if a > lo {
                parts.push(format!("{CFG} = \"1.{a}\""));
            }
            if b < hi
                && let Some(n) = next(b)
            {
                parts.push(format!("not({CFG} = \"1.{n}\")"));
            }
            match parts.len() {
                1 => parts.remove(0),
                _ => format!("all({})", parts.join(", ")),
            }
        })
        .collect();
    Some(match preds.len() {
        0 => "any()".to_owned(),
        1 => preds[0].clone(),
        _ => format!("any({})", preds.join(", ")),
    })
}

/// One release's generated code, in pieces [`render`] can merge across releases.
struct Generated {
    /// Impls, constructors and functions, in the order they are written.
    items: Vec<Item>,
    /// Go fields without a Rust field.
    skipped: Vec<String>,
    /// The wire helpers the code calls.
    helpers: BTreeSet<&'static str>,
}

/// One item of the generated file (an impl or a function), named by `key`: a fixed `head`, the
/// `units` a release may or may not have (match arms, statements, constructor fields), each
/// on its own, and a fixed `tail`.
#[derive(Clone, Debug, PartialEq)]
struct Item {
    key: String,
    head: String,
    units: Vec<String>,
    tail: String,
    /// A constructor: written as `Default::default()` when no release has a unit.
    constructor: Option<String>,
}

impl Item {
    fn fixed(key: String, text: String) -> Self {
        Self {
            key,
            head: text,
            units: Vec::new(),
            tail: String::new(),
            constructor: None,
        }
    }
}

/// The wire helpers generated code may call (imported when any release calls them).
const HELPERS: &[&str] = &[
    "int_or_string",
    "nonzero",
    "push",
    "quantity",
    "time",
    "write_int_or_string",
    "write_quantity",
    "write_time",
];

impl Generator {
    fn run(mut self) -> Result<Generated> {
        let mut impls = Vec::new();
        let mut news = BTreeMap::new();
        for (package, name) in ROOTS {
            let module = rust_module(package)?;
            self.push(Job {
                go: GoKey {
                    package: (*package).into(),
                    name: (*name).into(),
                },
                rust_module: module.into(),
                rust_name: (*name).into(),
            });
            let path = rust_path(module, name);
            impls.push(Item::fixed(
                format!("impl {name}"),
                format!(
                    "\nimpl FromProtobuf for {path} {{\n    fn from_protobuf(message: &[u8]) -> Result<Self, ProtobufError> {{\n        let mut object = {new}();\n        {merge}(Reader::new(message, \"{name}\"), &mut object)?;\n        Ok(object)\n    }}\n}}\n\nimpl ToProtobuf for {path} {{\n    fn to_protobuf(&self) -> Option<Vec<u8>> {{\n        let mut w = Writer::default();\n        {encode}(self, &mut w);\n        w.finish()\n    }}\n}}\n",
                    new = new_function(module, name),
                    merge = merge_function(module, name),
                    encode = encode_name(&merge_function(module, name)),
                ),
            ));
        }
        let mut body = Vec::new();
        while let Some(job) = self.queue.pop_front() {
            body.extend(self.job(&job, &mut news)?);
        }
        let text = |items: &[Item]| -> String {
            items
                .iter()
                .map(|i| format!("{}{}{}", i.head, i.units.concat(), i.tail))
                .collect()
        };
        let (body_text, impls_text) = (text(&body), text(&impls));
        // Constructors: every struct a merge function fills, with the values JSON always writes.
        let mut constructors = Vec::new();
        for ((module, name), inits) in news {
            let path = rust_path(&module, &name);
            let f = new_function(&module, &name);
            if !body_text.contains(&format!("{f})"))
                && !body_text.contains(&format!("{f}()"))
                && !impls_text.contains(&format!("{f}()"))
            {
                continue;
            }
            constructors.push(Item {
                key: f.clone(),
                head: format!("\nfn {f}() -> {path} {{\n    {path} {{\n"),
                units: inits.iter().map(|i| format!("        {i},\n")).collect(),
                tail: "        ..Default::default()\n    }\n}\n".to_owned(),
                constructor: Some(format!(
                    "\nfn {f}() -> {path} {{\n    Default::default()\n}}\n"
                )),
            });
        }
        let helpers = HELPERS
            .iter()
            .copied()
            .filter(|h| body_text.contains(&format!("{h}(")))
            .collect();
        let mut items = impls;
        items.extend(constructors);
        items.extend(body);
        Ok(Generated {
            items,
            skipped: self.skipped,
            helpers,
        })
    }

    fn push(&mut self, job: Job) {
        if self.done.insert(job.clone()) {
            self.queue.push_back(job);
        }
    }

    /// The decoder and the encoder of one struct.
    fn job(
        &mut self,
        job: &Job,
        news: &mut BTreeMap<(String, String), Vec<String>>,
    ) -> Result<[Item; 2]> {
        let go_fields = self
            .go
            .structs
            .get(&job.go)
            .ok_or_else(|| anyhow!("Go struct {}.{} not found", job.go.package, job.go.name))?
            .clone();
        let rust_fields = self.rust.fields(&job.rust_module, &job.rust_name)?;
        let inlined = job.go.name != job.rust_name;
        let mut out = Emitted::default();
        self.fields(job, &go_fields, &rust_fields, &mut out)?;
        let Emitted {
            arms,
            mut inits,
            mut filled,
            mut writes,
        } = out;
        // Fields in ascending number, as Go's marshaller writes them.
        writes.sort_by_key(|(n, _)| *n);
        if inlined {
            // The struct it is inlined into checks its fields and sets their initial values.
            inits.clear();
            filled.extend(rust_fields.keys().cloned());
        }
        // Fields of inlined structs are filled by their own merge functions; count them too.
        for f in &go_fields {
            if f.inline {
                let inner = self
                    .go
                    .structs
                    .get(&f.element()?)
                    .cloned()
                    .unwrap_or_default();
                collect_inline(&self.go, &inner, &mut filled)?;
            }
        }
        for json in rust_fields.keys() {
            let allowed = job.rust_name == "ObjectMeta" && json == "managedFields";
            if !filled.contains(json) && !allowed {
                bail!(
                    "{}::{}: no Go field fills {json}",
                    job.rust_module,
                    job.rust_name
                );
            }
        }
        let key = (job.rust_module.clone(), job.rust_name.clone());
        news.entry(key).or_default().extend(inits);
        let path = rust_path(&job.rust_module, &job.rust_name);
        let merge = job.function();
        let encode = encode_name(&merge);
        let decoder = Item {
            key: merge.clone(),
            head: format!(
                "\n/// Reads Go's `{}.{}` into `{}`.\npub(super) fn {merge}(mut r: Reader<'_>, m: &mut {path}) -> Result<(), ProtobufError> {{\n    while let Some((field, wire)) = r.field()? {{\n        match field {{\n",
                job.go.package, job.go.name, job.rust_name,
            ),
            units: arms,
            tail: "            _ => r.skip(wire)?,\n        }\n    }\n    Ok(())\n}\n".to_owned(),
            constructor: None,
        };
        let encoder = Item {
            key: encode.clone(),
            head: format!(
                "\n/// Writes `{}` as Go's `{}.{}`.\nfn {encode}(m: &{path}, w: &mut Writer) {{\n",
                job.rust_name, job.go.package, job.go.name,
            ),
            units: writes
                .into_iter()
                .map(|(_, w)| format!("    {w}\n"))
                .collect(),
            tail: "}\n".to_owned(),
            constructor: None,
        };
        Ok([decoder, encoder])
    }

    fn fields(
        &mut self,
        job: &Job,
        go_fields: &[GoField],
        rust_fields: &BTreeMap<String, RustField>,
        out: &mut Emitted,
    ) -> Result<()> {
        let Emitted {
            arms,
            inits,
            filled,
            writes,
        } = out;
        for g in go_fields {
            if g.inline {
                let inner = g.element()?;
                let inner_job = Job {
                    go: inner.clone(),
                    rust_module: job.rust_module.clone(),
                    rust_name: job.rust_name.clone(),
                };
                arms.push(format!(
                    "            {} => {}(r.message(wire)?, m)?,\n",
                    g.number,
                    inner_job.function()
                ));
                writes.push((
                    g.number,
                    format!(
                        "w.message({}, |w| {}(m, w));",
                        g.number,
                        encode_name(&inner_job.function())
                    ),
                ));
                // The constructor also sets what the inlined struct's JSON always writes.
                let inner_fields = self
                    .go
                    .structs
                    .get(&inner)
                    .cloned()
                    .ok_or_else(|| anyhow!("inline {}", inner.name))?;
                for f in &inner_fields {
                    let init = rust_fields.get(&f.json).and_then(|r| {
                        Field {
                            go: f,
                            rust: r.clone(),
                        }
                        .init()
                    });
                    inits.extend(init);
                }
                self.push(inner_job);
                continue;
            }
            if job.rust_name == "ObjectMeta" && g.json == "managedFields" {
                arms.push(format!(
                    "            {} => r.skip(wire)?, // managedFields: not kept\n",
                    g.number
                ));
                // Not written either: an object that carries them is sent as JSON.
                writes.push((
                    g.number,
                    "if m.managed_fields.is_some() {\n        w.unsupported();\n    }".to_owned(),
                ));
                continue;
            }
            let Some(rust) = rust_fields.get(&g.json) else {
                self.skipped.push(format!(
                    "{}.{}.{} ({})",
                    job.go.package, job.go.name, g.json, g.number
                ));
                continue;
            };
            filled.insert(g.json.clone());
            let field = Field {
                go: g,
                rust: rust.clone(),
            };
            if let Some(init) = field.init() {
                inits.push(init);
            }
            let assign = self.assign(&field)?;
            arms.push(format!("            {} => {assign},\n", g.number));
            writes.push((g.number, write_statement(&field)?));
        }
        Ok(())
    }

    /// The statement that reads field `f` from `r` (its wire type in `wire`) into `m`.
    fn assign(&mut self, f: &Field<'_>) -> Result<String> {
        let name = &f.rust.name;
        let g = f.go;
        Ok(match &f.rust.ty {
            RustType::Vec(elem) => {
                let target = format!("&mut m.{name}");
                match **elem {
                    RustType::I32 | RustType::I64 if !f.rust.optional => {
                        bail!("required list of integers {}", g.json)
                    }
                    RustType::I32 => return Ok(format!("r.int32s(wire, {target})?")),
                    RustType::I64 => return Ok(format!("r.int64s(wire, {target})?")),
                    _ => {}
                }
                let value = self.value(elem, g)?;
                match **elem {
                    _ if f.rust.optional => format!("push({target}, {value})"),
                    _ => format!("m.{name}.push({value})"),
                }
            }
            RustType::Map(value) => {
                let read = match **value {
                    RustType::String => "|r, w| r.string(w)",
                    RustType::Quantity => "|r, w| quantity(r.message(w)?)",
                    _ => bail!("map of {value:?} in {} is not supported", g.json),
                };
                if !f.rust.optional {
                    bail!("required map {}", g.json);
                }
                format!(
                    "{{\n                let (k, v) = r.entry(wire, {read})?;\n                m.{name}.get_or_insert_with(Default::default).insert(k, v);\n            }}"
                )
            }
            RustType::Struct(module, ty) => {
                let merge = self.struct_job(module, ty, g)?;
                if f.rust.optional {
                    format!(
                        "{merge}(r.message(wire)?, m.{name}.get_or_insert_with({}))?",
                        new_function(module, ty)
                    )
                } else {
                    format!("{merge}(r.message(wire)?, &mut m.{name})?")
                }
            }
            RustType::Time => {
                if !f.rust.optional {
                    bail!("required time {}", g.json);
                }
                format!("m.{name} = time(r.message(wire)?)?")
            }
            scalar => {
                let value = self.value(scalar, g)?;
                if !f.rust.optional {
                    format!("m.{name} = {value}")
                } else if g.pointer()
                    || !g.omitempty
                    || matches!(scalar, RustType::Quantity | RustType::IntOrString)
                {
                    format!("m.{name} = Some({value})")
                } else {
                    match scalar {
                        RustType::String | RustType::I32 | RustType::I64 | RustType::Bool => {
                            format!("m.{name} = nonzero({value})")
                        }
                        other => bail!("omitempty {other:?} in {}", g.json),
                    }
                }
            }
        })
    }

    /// An expression reading one value of type `ty` (not a list or map).
    fn value(&mut self, ty: &RustType, g: &GoField) -> Result<String> {
        Ok(match ty {
            RustType::String => "r.string(wire)?".into(),
            RustType::I32 => "r.int32(wire)?".into(),
            RustType::I64 => "r.int64(wire)?".into(),
            RustType::Bool => "r.bool(wire)?".into(),
            RustType::Quantity => "quantity(r.message(wire)?)?".into(),
            RustType::IntOrString => "int_or_string(r.message(wire)?)?".into(),
            RustType::Struct(module, name) => {
                let merge = self.struct_job(module, name, g)?;
                format!(
                    "{{\n                let mut v = {}();\n                {merge}(r.message(wire)?, &mut v)?;\n                v\n            }}",
                    new_function(module, name)
                )
            }
            other => bail!("list of {other:?} in {} is not supported", g.json),
        })
    }

    /// Queues the merge function of a struct field's type; returns its name.
    fn struct_job(&mut self, module: &str, name: &str, g: &GoField) -> Result<String> {
        let go = g.element()?;
        if go.name != name {
            bail!(
                "Go type {} of field {} is not Rust's {name}",
                go.name,
                g.json
            );
        }
        let job = Job {
            go,
            rust_module: module.to_owned(),
            rust_name: name.to_owned(),
        };
        let f = job.function();
        self.push(job);
        Ok(f)
    }
}

/// The encoder's name of a merge function.
fn encode_name(merge: &str) -> String {
    merge.replacen("merge_", "encode_", 1)
}

/// The statement that writes field `f` of `m` to `w`: every value the Rust struct holds,
/// `None` left out (so what JSON leaves out, protobuf leaves out too).
fn write_statement(f: &Field<'_>) -> Result<String> {
    let n = f.go.number;
    let name = &f.rust.name;
    let one = |ty: &RustType, v: &str| -> Result<String> {
        // A copied scalar: `&m.x` read as `m.x`, a reference `v` as `*v`.
        let copied = v
            .strip_prefix('&')
            .map_or_else(|| format!("*{v}"), str::to_owned);
        Ok(match ty {
            RustType::String => format!("w.string({n}, {v})"),
            RustType::I32 => format!("w.int32({n}, {copied})"),
            RustType::I64 => format!("w.int64({n}, {copied})"),
            RustType::Bool => format!("w.bool({n}, {copied})"),
            RustType::Quantity => format!("write_quantity(w, {n}, {v})"),
            RustType::IntOrString => format!("write_int_or_string(w, {n}, {v})"),
            RustType::Time => format!("write_time(w, {n}, {v})"),
            RustType::Struct(module, ty) => format!(
                "w.message({n}, |w| {}({v}, w))",
                encode_name(&merge_function(module, ty))
            ),
            other => bail!("cannot write {other:?} of {}", f.go.json),
        })
    };
    Ok(match &f.rust.ty {
        RustType::Vec(elem) => {
            let list = if f.rust.optional {
                format!("m.{name}.iter().flatten()")
            } else {
                format!("&m.{name}")
            };
            format!("for v in {list} {{\n        {};\n    }}", one(elem, "v")?)
        }
        RustType::Map(value) => {
            let value = match **value {
                RustType::String => "w.string(2, v)".to_owned(),
                RustType::Quantity => "write_quantity(w, 2, v)".to_owned(),
                ref other => bail!("cannot write a map of {other:?}"),
            };
            format!(
                "for (k, v) in m.{name}.iter().flatten() {{\n        w.message({n}, |w| {{\n            w.string(1, k);\n            {value};\n        }});\n    }}"
            )
        }
        ty if f.rust.optional => {
            format!(
                "if let Some(v) = &m.{name} {{\n        {};\n    }}",
                one(ty, "v")?
            )
        }
        ty => format!("{};", one(ty, &format!("&m.{name}"))?),
    })
}

impl Field<'_> {
    /// The constructor's value for a field JSON always writes: a non-pointer scalar without
    /// `omitempty` (protobuf always writes it too, but an older server might not).
    fn init(&self) -> Option<String> {
        if !self.rust.optional || self.go.pointer() || self.go.omitempty {
            return None;
        }
        let zero = match self.rust.ty {
            RustType::String => "String::new()",
            RustType::I32 | RustType::I64 => "0",
            RustType::Bool => "false",
            _ => return None,
        };
        Some(format!("{}: Some({zero})", self.rust.name))
    }
}

/// The JSON names of the fields of an inlined struct (and of structs inlined in it).
fn collect_inline(go: &GoTypes, fields: &[GoField], out: &mut BTreeSet<String>) -> Result<()> {
    for f in fields {
        if f.inline {
            let inner = go.structs.get(&f.element()?).cloned().unwrap_or_default();
            collect_inline(go, &inner, out)?;
        } else {
            out.insert(f.json.clone());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(minors: &[u32]) -> BTreeSet<u32> {
        minors.iter().copied().collect()
    }

    #[test]
    fn gates_name_the_releases_that_have_the_code() {
        let all = set(&[33, 34, 35, 36, 37]);
        assert_eq!(gate(&all, &all), None);
        assert_eq!(
            gate(&set(&[35, 36, 37]), &all).as_deref(),
            Some("k8s_api_ge = \"1.35\"")
        );
        assert_eq!(
            gate(&set(&[33, 34]), &all).as_deref(),
            Some("not(k8s_api_ge = \"1.35\")")
        );
        assert_eq!(
            gate(&set(&[35]), &all).as_deref(),
            Some("all(k8s_api_ge = \"1.35\", not(k8s_api_ge = \"1.36\"))")
        );
        assert_eq!(
            gate(&set(&[33, 37]), &all).as_deref(),
            Some("any(not(k8s_api_ge = \"1.34\"), k8s_api_ge = \"1.37\")")
        );
        // Within an item present from 1.35 on, a unit of 1.36 and later needs only its lower
        // bound; the item's own gate covers the rest.
        assert_eq!(
            gate(&set(&[36, 37]), &set(&[35, 36, 37])).as_deref(),
            Some("k8s_api_ge = \"1.36\"")
        );
    }

    #[test]
    fn units_merge_in_order_with_their_releases() {
        // Newest first, as `render` merges them.
        let merged = merge_order(Vec::new(), 37, &["a", "b", "d"]);
        let merged = merge_order(merged, 36, &["a", "c", "d"]);
        let merged = merge_order(merged, 35, &["a", "b2", "c"]);
        let got: Vec<(&str, Vec<u32>)> = merged
            .iter()
            .map(|(u, m)| (u.as_str(), m.iter().copied().collect()))
            .collect();
        assert_eq!(
            got,
            vec![
                ("a", vec![35, 36, 37]),
                ("b2", vec![35]),
                ("c", vec![35, 36]),
                ("b", vec![37]),
                ("d", vec![36, 37]),
            ]
        );
    }

    #[test]
    fn embedded_structs_without_a_json_name_are_inlined() {
        // 1.37 writes `json:""` where earlier releases wrote `json:",inline"`.
        for tag in ["json:\",inline\"", "json:\"\""] {
            let go = format!(
                "package v1\n\ntype Volume struct {{\n\tName string `json:\"name\" protobuf:\"bytes,1,opt,name=name\"`\n\tVolumeSource `{tag} protobuf:\"bytes,2,opt,name=volumeSource\"`\n}}\n"
            );
            let mut structs = BTreeMap::new();
            parse_go_file("core/v1", &go, &mut structs);
            let fields = &structs[&GoKey {
                package: "core/v1".into(),
                name: "Volume".into(),
            }];
            assert!(!fields[0].inline);
            assert!(fields[1].inline, "{tag}");
        }
    }

    #[test]
    fn snake_case_of_go_names() {
        assert_eq!(snake("PodSpec"), "pod_spec");
        assert_eq!(
            snake("AWSElasticBlockStoreVolumeSource"),
            "aws_elastic_block_store_volume_source"
        );
        assert_eq!(snake("CSIVolumeSource"), "csi_volume_source");
        assert_eq!(snake("HTTPGetAction"), "http_get_action");
    }

    #[test]
    fn struct_tags_are_read() {
        let go = "package v1\n\nimport (\n\tmetav1 \"k8s.io/apimachinery/pkg/apis/meta/v1\"\n)\n\ntype Thing struct {\n\t// A comment with `backticks`.\n\tName string `json:\"name\" protobuf:\"bytes,1,opt,name=name\"`\n\tReplicas *int32 `json:\"replicas,omitempty\" protobuf:\"varint,2,opt,name=replicas\"`\n\tmetav1.ObjectMeta `json:\"metadata,omitempty\" protobuf:\"bytes,3,opt,name=metadata\"`\n\tSource `json:\",inline\" protobuf:\"bytes,4,opt,name=source\"`\n\tmetav1.TypeMeta `json:\",inline\"`\n}\n";
        let mut structs = BTreeMap::new();
        parse_go_file("core/v1", go, &mut structs);
        let fields = &structs[&GoKey {
            package: "core/v1".into(),
            name: "Thing".into(),
        }];
        assert_eq!(fields.len(), 4);
        assert_eq!(
            (
                fields[0].json.as_str(),
                fields[0].number,
                fields[0].omitempty
            ),
            ("name", 1, false)
        );
        assert!(fields[1].pointer() && fields[1].omitempty);
        assert_eq!(
            fields[2].element().unwrap(),
            GoKey {
                package: "meta/v1".into(),
                name: "ObjectMeta".into()
            }
        );
        assert!(fields[3].inline);
        assert_eq!(fields[3].element().unwrap().name, "Source");
    }
}

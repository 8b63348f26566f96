//! The Go side: the structs of k8s.io/api and k8s.io/apimachinery in the Go module cache, with each field's protobuf number, pointer-ness and JSON tag.

use super::*;

/// A Go package of the types we read, by its path below the module.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct GoKey {
    pub(crate) package: String,
    pub(crate) name: String,
}

#[derive(Clone, Debug)]
pub(crate) struct GoField {
    /// The Go type as written (`*SecurityContext`, `[]Container`, `map[string]string`).
    pub(crate) ty: String,
    /// The package the type name is written in, for unqualified names.
    pub(crate) package: String,
    /// Import aliases of the file the field is declared in.
    pub(crate) imports: BTreeMap<String, String>,
    pub(crate) json: String,
    pub(crate) omitempty: bool,
    pub(crate) inline: bool,
    pub(crate) number: u32,
}

impl GoField {
    pub(crate) fn pointer(&self) -> bool {
        self.ty.starts_with('*')
    }

    /// The struct the field's value is, or holds a list or pointer of.
    pub(crate) fn element(&self) -> Result<GoKey> {
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
pub(crate) const GO_PACKAGES: &[(&str, &str)] = &[
    ("apps/v1", "k8s.io/api@{v}/apps/v1"),
    ("core/v1", "k8s.io/api@{v}/core/v1"),
    ("meta/v1", "k8s.io/apimachinery@{v}/pkg/apis/meta/v1"),
];

pub(crate) struct GoTypes {
    pub(crate) structs: BTreeMap<GoKey, Vec<GoField>>,
}

impl GoTypes {
    pub(crate) fn load(version: &str) -> Result<Self> {
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

pub(crate) fn go_mod_cache() -> Result<PathBuf> {
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
pub(crate) fn package_of_import(path: &str) -> Option<&'static str> {
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

pub(crate) fn parse_go_file(
    package: &str,
    text: &str,
    structs: &mut BTreeMap<GoKey, Vec<GoField>>,
) {
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
pub(crate) fn tag_value<'a>(tag: &'a str, key: &str) -> Option<&'a str> {
    let start = tag.find(&format!("{key}:\""))? + key.len() + 2;
    let end = tag[start..].find('"')?;
    Some(&tag[start..start + end])
}

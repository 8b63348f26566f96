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

mod emit;
#[path = "../../generated_file.rs"]
mod generated_file;
mod go;
mod output;
mod rust_types;

use self::generated_file::{rustfmt, workspace_root, write_or_check};
use self::go::*;
use self::output::*;
use self::rust_types::*;

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
    let text = generate()?;
    write_or_check(
        &workspace_root().join(OUTPUT),
        &text,
        args.check,
        "`cargo xtask gen-protobuf` writes from the current sources",
    )
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

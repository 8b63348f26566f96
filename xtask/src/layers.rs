//! The layering of xtask, checked: the activities (`bench controller`, `chaos`, `diff`...) import
//! the layer crates (`xtask-contender`, `xtask-report`, `kctrl-cluster`), kctrl's libraries and
//! the crate's shared modules ([`SHARED`]), never each other; the layer crates depend on no
//! library crate of kctrl; and no source file of xtask grows past [`MAX_LINES`].
//!
//! An activity is a top-level module of xtask/src (a file or a directory), except for bench/,
//! whose subdirectories are one activity each (bench/mod.rs only registers their subcommands).
//! The command-line roots ([`ROOTS`]: main.rs, test.rs, bench/mod.rs) call the activities by
//! design and are not checked.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Modules of xtask every activity may use: `kind` is the kind-cluster provider (engine, node
/// and controller images, clusters) that `cargo xtask e2e --cluster kind` runs on, beside
/// being a command of its own.
const SHARED: &[&str] = &["kind", "kube", "workspace_root"];
/// Files that compose the activities into commands: main.rs (`cargo xtask <command>`), test.rs
/// (`cargo xtask test` runs several) and bench/mod.rs (`cargo xtask bench <target>`); and this
/// check itself, whose examples name activities.
const ROOTS: &[&str] = &["main.rs", "test.rs", "bench/mod.rs", "layers.rs"];
/// The most lines a source file of xtask and its layer crates may have.
const MAX_LINES: usize = 800;

/// The activity a file of xtask/src belongs to (`chaos`, `bench::controller`...) and how deep
/// below the activity's own module its module is (0 for chaos/mod.rs or e2e.rs, 1 for
/// chaos/proxy.rs). `None` for the roots and the shared modules.
fn activity_of(rel: &Path) -> Option<(String, usize)> {
    let text = rel.to_string_lossy().replace('\\', "/");
    if ROOTS.contains(&text.as_str()) {
        return None;
    }
    let mut parts: Vec<&str> = text.split('/').collect();
    let file = parts.pop()?;
    let stem = file.strip_suffix(".rs")?;
    // The module path of the file: `a/b/mod.rs` is `a::b`, `a/b/c.rs` is `a::b::c`.
    let mut module: Vec<&str> = parts.clone();
    if stem != "mod" {
        module.push(stem);
    }
    let root_len = if module.first() == Some(&"bench") {
        2
    } else {
        1
    };
    if module.len() < root_len || SHARED.contains(&module[0]) {
        return None;
    }
    Some((module[..root_len].join("::"), module.len() - root_len))
}

/// The references of `source` (a file of `activity`, `depth` modules below its root) that
/// leave the activity: `crate::<other activity>`, `crate::bench` from outside bench/'s own
/// activity, `crate::{..}` groups naming another activity, or `super` chains that climb out of
/// it.
fn violations(activity: &str, depth: usize, source: &str, activities: &[String]) -> Vec<String> {
    let own_top = activity.split("::").next().unwrap_or(activity);
    let leaves = |path: &str| -> bool {
        // `path` is what follows `crate::`.
        let segs: Vec<&str> = path.split("::").map(str::trim).collect();
        let Some(first) = segs.first() else {
            return false;
        };
        if SHARED.contains(first) {
            return false;
        }
        if *first == "bench" {
            // Only bench's own activity, by its full path.
            return !(own_top == "bench"
                && segs.len() >= 2
                && format!("bench::{}", segs[1]) == activity);
        }
        *first != own_top
            && activities
                .iter()
                .any(|a| a.split("::").next() == Some(first))
    };
    let mut found = Vec::new();
    // Inline modules (`mod tests { .. }`) add to the depth `super` may climb.
    let mut braces = 0usize;
    let mut inline: Vec<usize> = Vec::new();
    for (n, line) in source.lines().enumerate() {
        let code = line.split("//").next().unwrap_or("");
        let trimmed = code.trim_start();
        let opens_mod = (trimmed.starts_with("mod ")
            || trimmed.starts_with("pub mod ")
            || trimmed.starts_with("pub(crate) mod ")
            || trimmed.starts_with("pub(super) mod "))
            && trimmed.trim_end().ends_with('{');
        if opens_mod {
            inline.push(braces);
        }
        let mut rest = code;
        while let Some(at) = rest.find("crate::") {
            let after = &rest[at + "crate::".len()..];
            let bad = if let Some(group) = after.strip_prefix('{') {
                let group = group.split('}').next().unwrap_or("");
                group.split(',').any(|item| leaves(item.trim()))
            } else {
                let path: String = after
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
                    .collect();
                leaves(&path)
            };
            // `xtask_contender::...` and other crates' `crate::` in strings are not ours: only
            // a `crate::` at a word boundary counts.
            let boundary = rest[..at]
                .chars()
                .next_back()
                .is_none_or(|c| !(c.is_alphanumeric() || c == '_'));
            if bad && boundary {
                found.push(format!("line {}: {}", n + 1, line.trim()));
            }
            rest = after;
        }
        let mut rest = code;
        while let Some(at) = rest.find("super::") {
            let mut climbs = 0;
            let mut tail = &rest[at..];
            while let Some(t) = tail.strip_prefix("super::") {
                climbs += 1;
                tail = t;
            }
            if climbs > depth + inline.len() {
                found.push(format!("line {}: {}", n + 1, line.trim()));
            }
            rest = tail;
        }
        for c in code.chars() {
            match c {
                '{' => braces += 1,
                '}' => {
                    braces = braces.saturating_sub(1);
                    if inline.last().is_some_and(|open| *open == braces) {
                        inline.pop();
                    }
                }
                _ => {}
            }
        }
    }
    found
}

/// Every `.rs` file below `dir`, sorted.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// The activities of xtask/src and, for each, its files (relative path, depth, text).
fn activities(src: &Path) -> BTreeMap<String, Vec<(PathBuf, usize, String)>> {
    let mut by_activity: BTreeMap<String, Vec<(PathBuf, usize, String)>> = BTreeMap::new();
    for path in rust_files(src) {
        let rel = path.strip_prefix(src).unwrap().to_path_buf();
        if let Some((activity, depth)) = activity_of(&rel) {
            let text = std::fs::read_to_string(&path).unwrap();
            by_activity
                .entry(activity)
                .or_default()
                .push((rel, depth, text));
        }
    }
    by_activity
}

#[test]
fn activities_import_the_layers_never_each_other() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let by_activity = activities(&src);
    let names: Vec<String> = by_activity.keys().cloned().collect();
    for expected in ["bench::controller", "chaos", "conformance", "diff", "e2e"] {
        assert!(names.iter().any(|n| n == expected), "{names:?}");
    }
    let mut problems = Vec::new();
    for (activity, files) in &by_activity {
        for (rel, depth, text) in files {
            for v in violations(activity, *depth, text, &names) {
                problems.push(format!("{} ({activity}) {v}", rel.display()));
            }
        }
    }
    assert!(
        problems.is_empty(),
        "activities reach into each other (move what they share to xtask/contender, \
         xtask/report or a shared module):\n  {}",
        problems.join("\n  ")
    );
}

#[test]
fn the_check_finds_what_it_must() {
    let names: Vec<String> = [
        "bench::controller",
        "bench::informer",
        "chaos",
        "diff",
        "e2e",
    ]
    .map(String::from)
    .to_vec();
    let check =
        |activity: &str, depth: usize, text: &str| violations(activity, depth, text, &names);
    // Another activity, directly, in a group, or through bench/.
    assert_eq!(
        check("chaos", 0, "use crate::bench::controller::curl;").len(),
        1
    );
    assert_eq!(check("chaos", 0, "let _ = crate::e2e::grant(&x);").len(), 1);
    assert_eq!(check("diff", 1, "use crate::{chaos, kube};").len(), 1);
    assert_eq!(
        check("bench::informer", 0, "crate::bench::ensure_namespace(c)").len(),
        1
    );
    assert_eq!(
        check("bench::informer", 1, "use crate::bench::controller::parse;").len(),
        1
    );
    // Climbing out of the activity with `super`.
    assert_eq!(
        check("bench::controller", 1, "use super::super::command_output;").len(),
        1
    );
    assert_eq!(check("chaos", 0, "use super::run;").len(), 1);
    // What is allowed: itself, the shared modules, the layers, `super` within, tests' `super`.
    assert!(check("chaos", 1, "use crate::chaos::invariants::Checker;").is_empty());
    assert!(
        check(
            "bench::controller",
            1,
            "use crate::bench::controller::Phase;"
        )
        .is_empty()
    );
    assert!(
        check(
            "chaos",
            0,
            "crate::kube::ensure_namespace(); crate::workspace_root();"
        )
        .is_empty()
    );
    assert!(check("chaos", 0, "use xtask_contender::fresh; // not crate::diff").is_empty());
    assert!(check("chaos", 1, "use super::Run;").is_empty());
    assert!(check("chaos", 0, "mod tests {\n    use super::*;\n}\n").is_empty());
    assert_eq!(
        check(
            "chaos",
            0,
            "mod tests {\n    use super::*;\n}\nuse super::x;\n"
        )
        .len(),
        1
    );
    // Files map to their activity and depth.
    assert_eq!(
        activity_of(Path::new("bench/controller/lanes.rs")),
        Some(("bench::controller".into(), 1))
    );
    assert_eq!(activity_of(Path::new("e2e.rs")), Some(("e2e".into(), 0)));
    assert_eq!(
        activity_of(Path::new("chaos/mod.rs")),
        Some(("chaos".into(), 0))
    );
    assert_eq!(activity_of(Path::new("bench/mod.rs")), None);
    assert_eq!(activity_of(Path::new("kube.rs")), None);
}

#[test]
fn the_layer_crates_depend_on_no_kctrl_library() {
    let xtask = Path::new(env!("CARGO_MANIFEST_DIR"));
    for (krate, allowed) in [("contender", &["kctrl-cluster"][..]), ("report", &[][..])] {
        let manifest = std::fs::read_to_string(xtask.join(krate).join("Cargo.toml")).unwrap();
        let deps = manifest
            .split("[dependencies]")
            .nth(1)
            .unwrap_or("")
            .split("\n[")
            .next()
            .unwrap_or("");
        for line in deps.lines().map(str::trim) {
            let name = line.split(['.', ' ', '=']).next().unwrap_or("");
            if name.starts_with("kctrl-") || name.starts_with("xtask") || name == "k8s-openapi" {
                assert!(allowed.contains(&name), "xtask/{krate} depends on {name}");
            }
        }
    }
}

#[test]
fn no_source_file_is_over_the_limit() {
    let xtask = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut over = Vec::new();
    for path in rust_files(xtask) {
        let rel = path
            .strip_prefix(xtask)
            .unwrap()
            .to_string_lossy()
            .into_owned();
        if rel.starts_with("target/") {
            continue;
        }
        let lines = std::fs::read_to_string(&path).unwrap().lines().count();
        if lines > MAX_LINES {
            over.push(format!(
                "{rel}: {lines} lines (at most {MAX_LINES}: split it by job)"
            ));
        }
    }
    assert!(over.is_empty(), "{}", over.join("\n"));
}

//! The output: the jobs (one function per Go struct and Rust struct), the generator's state, and the file that merges every release's code under `#[cfg]`s.

use super::*;

/// One function to write: the fields of Go struct `go` read into Rust struct `rust`
/// (the same type, or the struct a Go type is inlined into).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Job {
    pub(crate) go: GoKey,
    pub(crate) rust_module: String,
    pub(crate) rust_name: String,
}

impl Job {
    pub(crate) fn function(&self) -> String {
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

pub(crate) fn new_function(module: &str, name: &str) -> String {
    let short = module.rsplit("::").take(2).collect::<Vec<_>>();
    format!("new_{}_{}_{}", short[1], short[0], snake(name))
}

pub(crate) fn merge_function(module: &str, name: &str) -> String {
    let short = module.rsplit("::").take(2).collect::<Vec<_>>();
    format!("merge_{}_{}_{}", short[1], short[0], snake(name))
}

pub(crate) fn snake(name: &str) -> String {
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

pub(crate) fn rust_path(module: &str, name: &str) -> String {
    format!("k8s_openapi::{module}::{name}")
}

pub(crate) struct Generator {
    pub(crate) go: GoTypes,
    pub(crate) rust: RustTypes,
    pub(crate) done: BTreeSet<Job>,
    pub(crate) queue: VecDeque<Job>,
    pub(crate) skipped: Vec<String>,
}

/// What one struct's fields give: the decoder's match arms, the constructor's initial values,
/// the JSON names filled, and the encoder's statements by field number.
#[derive(Default)]
pub(crate) struct Emitted {
    pub(crate) arms: Vec<String>,
    pub(crate) inits: Vec<String>,
    pub(crate) filled: BTreeSet<String>,
    pub(crate) writes: Vec<(u32, String)>,
}

/// A Go field paired with the Rust field it fills.
pub(crate) struct Field<'a> {
    pub(crate) go: &'a GoField,
    pub(crate) rust: RustField,
}

/// The file's text: every release's items merged, each item and unit not all releases have
/// gated on the releases that have it.
pub(crate) fn render(releases: &[(u32, Generated)], crate_version: &str) -> Result<String> {
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
pub(crate) fn merge_order(
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
pub(crate) fn gate(some: &BTreeSet<u32>, all: &BTreeSet<u32>) -> Option<String> {
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
pub(crate) struct Generated {
    /// Impls, constructors and functions, in the order they are written.
    pub(crate) items: Vec<Item>,
    /// Go fields without a Rust field.
    pub(crate) skipped: Vec<String>,
    /// The wire helpers the code calls.
    pub(crate) helpers: BTreeSet<&'static str>,
}

/// One item of the generated file (an impl or a function), named by `key`: a fixed `head`, the
/// `units` a release may or may not have (match arms, statements, constructor fields), each
/// on its own, and a fixed `tail`.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Item {
    pub(crate) key: String,
    pub(crate) head: String,
    pub(crate) units: Vec<String>,
    pub(crate) tail: String,
    /// A constructor: written as `Default::default()` when no release has a unit.
    pub(crate) constructor: Option<String>,
}

impl Item {
    pub(crate) fn fixed(key: String, text: String) -> Self {
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
pub(crate) const HELPERS: &[&str] = &[
    "int_or_string",
    "nonzero",
    "push",
    "quantity",
    "time",
    "write_int_or_string",
    "write_quantity",
    "write_time",
];

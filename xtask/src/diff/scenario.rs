//! The scenario files of `cargo xtask diff` (`tests/diff/scenarios/NN-name.yaml`).
//!
//! A scenario is a small YAML document: objects to create, then steps. Each step does one thing
//! (a `kubectl` command or objects to apply) in the scenario's namespace on both clusters, then
//! both clusters settle (every Deployment's `observedGeneration` caught up with its `generation`
//! and every ReplicaSet's, and nothing observable changed for a quiet period), optionally after
//! waiting for a condition of a Deployment or of a ReplicaSet without one. The file format:
//!
//! ```yaml
//! description: An image change rolls out a second ReplicaSet.
//! quiet: 3s               # optional: the quiet period of every step (default 3s)
//! manifests:              # created first (the step "create"), in this order
//!   - apiVersion: apps/v1
//!     kind: Deployment
//!     metadata: {name: web}
//!     spec: {...}
//! steps:
//!   - name: new image
//!     kubectl: [set, image, deployment/web, app=registry.k8s.io/pause:3.10]
//!   - name: stuck
//!     apply: {apiVersion: apps/v1, kind: Deployment, ...}   # one object or a list
//!     wait: {deployment: web, condition: Progressing, status: "False",
//!            reason: ProgressDeadlineExceeded, timeout: 60s}
//!     quiet: 5s
//!   - name: quota raised
//!     apply: {apiVersion: v1, kind: ResourceQuota, ...}
//!     wait: {replicaset: web, condition: ReplicaFailure, status: Absent}
//! ```
//!
//! A `wait` names either a `deployment` or a `replicaset` (one without a Deployment); status
//! `Absent` waits until the object shows no condition of that type. Pods a scenario creates
//! itself (fixed names) are observed one by one, so adoption, release and which pods a
//! scale-down deleted show by name.
//!
//! Objects carry no namespace (the runner puts each scenario in a namespace of its own), and
//! `kubectl` commands name no namespace, kubeconfig or context for the same reason.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use serde::Deserialize;
use serde_json::Value;

/// Default quiet period after each step.
pub(crate) const DEFAULT_QUIET: Duration = Duration::from_secs(3);
/// Default timeout of a step's `wait`.
const DEFAULT_WAIT_TIMEOUT: Duration = Duration::from_secs(90);

/// `kubectl` subcommands a step may run: the ones that change objects.
const KUBECTL_VERBS: &[&str] = &[
    "annotate", "apply", "create", "delete", "label", "patch", "rollout", "scale", "set",
];
/// Flags the runner owns (a step naming them would leave the scenario's namespace or cluster).
const RESERVED_FLAGS: &[&str] = &[
    "-n",
    "--namespace",
    "--kubeconfig",
    "--context",
    "--server",
    "-s",
    "--cluster",
    "--user",
    "-A",
    "--all-namespaces",
];

/// A parsed, validated scenario.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Scenario {
    /// The file name without `.yaml` (e.g. `01-create`): what `--scenario` selects and the
    /// report shows.
    pub(crate) name: String,
    /// One sentence on what it exercises.
    pub(crate) description: String,
    /// Steps in order; the first is `create` (the manifests).
    pub(crate) steps: Vec<Step>,
}

/// One step: an action, then the settle.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Step {
    /// A short label for the report.
    pub(crate) name: String,
    /// What it does.
    pub(crate) action: Action,
    /// A Deployment condition to wait for before the quiet period starts.
    pub(crate) wait: Option<Wait>,
    /// How long nothing observable may change before the step counts as settled.
    pub(crate) quiet: Duration,
}

/// What a step does on each cluster.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Action {
    /// `kubectl <args…>` in the scenario's namespace.
    Kubectl(Vec<String>),
    /// `kubectl apply` of these objects (JSON) in the scenario's namespace.
    Apply(Vec<Value>),
}

/// Waits until a Deployment's (or a ReplicaSet's) condition of `type` has `status` (and
/// `reason`, if given).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Wait {
    /// The Deployment, or with `replica_set` the ReplicaSet.
    pub(crate) object: String,
    /// Whether `object` is a ReplicaSet (without a Deployment).
    pub(crate) replica_set: bool,
    /// Condition type (`Progressing`, `Available`, `ReplicaFailure`).
    pub(crate) condition: String,
    /// `True`, `False` or `Unknown`; `Absent` for no condition of that type.
    pub(crate) status: String,
    /// The condition's reason, if it matters.
    pub(crate) reason: Option<String>,
    /// Give up (a failed scenario) after this long.
    pub(crate) timeout: Duration,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawScenario {
    description: String,
    #[serde(default)]
    quiet: Option<String>,
    manifests: Vec<serde_yaml_ng::Value>,
    #[serde(default)]
    steps: Vec<RawStep>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawStep {
    name: Option<String>,
    kubectl: Option<Vec<String>>,
    apply: Option<serde_yaml_ng::Value>,
    wait: Option<RawWait>,
    quiet: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWait {
    deployment: Option<String>,
    replicaset: Option<String>,
    condition: String,
    status: String,
    reason: Option<String>,
    timeout: Option<String>,
}

/// Parses a duration written as a number and a unit: `500ms`, `3s`, `2m`, `1m30s`.
pub(crate) fn parse_duration(text: &str) -> Result<Duration> {
    let t = text.trim();
    if t.is_empty() {
        bail!("empty duration");
    }
    let mut total = Duration::ZERO;
    let mut rest = t;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        if digits == 0 {
            bail!("duration {text:?}: expected a number at {rest:?} (e.g. 500ms, 3s, 1m30s)");
        }
        let n: u64 = rest[..digits]
            .parse()
            .with_context(|| format!("duration {text:?}: number too large"))?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let unit = &rest[..unit_len];
        rest = &rest[unit_len..];
        total += match unit {
            "ms" => Duration::from_millis(n),
            "s" => Duration::from_secs(n),
            "m" => Duration::from_secs(n * 60),
            "" => bail!("duration {text:?}: {n} has no unit (ms, s or m)"),
            other => bail!("duration {text:?}: unknown unit {other:?} (ms, s or m)"),
        };
    }
    Ok(total)
}

/// Converts YAML to JSON (objects with string keys only, as Kubernetes objects are).
fn to_json(value: serde_yaml_ng::Value) -> Result<Value> {
    let json = serde_json::to_value(&value).context("not representable as JSON")?;
    Ok(json)
}

/// Checks one object to apply: a mapping with `apiVersion`, `kind`, `metadata.name`, no
/// namespace.
fn check_object(object: &Value) -> Result<()> {
    let Some(map) = object.as_object() else {
        bail!("an object to apply must be a mapping, found {object}");
    };
    for key in ["apiVersion", "kind"] {
        if !map.get(key).is_some_and(Value::is_string) {
            bail!("object without {key}");
        }
    }
    let kind = map["kind"].as_str().unwrap_or_default();
    let Some(name) = object.pointer("/metadata/name").and_then(Value::as_str) else {
        bail!("{kind} without metadata.name (generated names would differ between clusters)");
    };
    if object.pointer("/metadata/namespace").is_some() {
        bail!("{kind} {name} names a namespace; the runner chooses it");
    }
    Ok(())
}

/// Checks a step's `kubectl` arguments.
fn check_kubectl(args: &[String]) -> Result<()> {
    let Some(verb) = args.first() else {
        bail!("`kubectl` needs at least a subcommand");
    };
    if !KUBECTL_VERBS.contains(&verb.as_str()) {
        bail!(
            "kubectl {verb}: not a subcommand a step may run (one of {})",
            KUBECTL_VERBS.join(", ")
        );
    }
    for a in args {
        let flag = a.split('=').next().unwrap_or(a);
        if RESERVED_FLAGS.contains(&flag) {
            bail!("kubectl {verb}: {flag} is set by the runner (each scenario has its namespace)");
        }
    }
    Ok(())
}

fn objects(value: serde_yaml_ng::Value) -> Result<Vec<Value>> {
    let list = match to_json(value)? {
        Value::Array(items) => items,
        single => vec![single],
    };
    if list.is_empty() {
        bail!("no object to apply");
    }
    for (i, o) in list.iter().enumerate() {
        check_object(o).with_context(|| format!("object {}", i + 1))?;
    }
    Ok(list)
}

/// Parses and checks the text of scenario `name`; errors name the step (number and name).
pub(crate) fn parse(name: &str, text: &str) -> Result<Scenario> {
    let raw: RawScenario = serde_yaml_ng::from_str(text).context("not a valid scenario")?;
    if raw.description.trim().is_empty() {
        bail!("empty description");
    }
    let default_quiet = match &raw.quiet {
        Some(q) => parse_duration(q).context("quiet")?,
        None => DEFAULT_QUIET,
    };
    let manifests = objects(serde_yaml_ng::Value::Sequence(raw.manifests))
        .context("manifests (step 0, create)")?;
    let mut steps = vec![Step {
        name: "create".to_owned(),
        action: Action::Apply(manifests),
        wait: None,
        quiet: default_quiet,
    }];
    for (i, s) in raw.steps.into_iter().enumerate() {
        let number = i + 1;
        let label = match &s.name {
            Some(n) => format!("step {number} ({n})"),
            None => format!("step {number}"),
        };
        let step = (|| -> Result<Step> {
            let Some(name) = s.name.filter(|n| !n.trim().is_empty()) else {
                bail!("no name");
            };
            let action = match (s.kubectl, s.apply) {
                (Some(args), None) => {
                    check_kubectl(&args)?;
                    Action::Kubectl(args)
                }
                (None, Some(value)) => Action::Apply(objects(value).context("apply")?),
                (None, None) => bail!("no action: give `kubectl` or `apply`"),
                (Some(_), Some(_)) => bail!("two actions: give either `kubectl` or `apply`"),
            };
            let wait = match s.wait {
                Some(w) => {
                    if !matches!(w.status.as_str(), "True" | "False" | "Unknown" | "Absent") {
                        bail!(
                            "wait: status {:?} is not True, False, Unknown or Absent \
                             (quote it in YAML)",
                            w.status
                        );
                    }
                    let (object, replica_set) = match (w.deployment, w.replicaset) {
                        (Some(d), None) => (d, false),
                        (None, Some(rs)) => (rs, true),
                        _ => bail!("wait: name either a `deployment` or a `replicaset`"),
                    };
                    Some(Wait {
                        object,
                        replica_set,
                        condition: w.condition,
                        status: w.status,
                        reason: w.reason,
                        timeout: match w.timeout {
                            Some(t) => parse_duration(&t).context("wait.timeout")?,
                            None => DEFAULT_WAIT_TIMEOUT,
                        },
                    })
                }
                None => None,
            };
            let quiet = match s.quiet {
                Some(q) => parse_duration(&q).context("quiet")?,
                None => default_quiet,
            };
            Ok(Step {
                name,
                action,
                wait,
                quiet,
            })
        })()
        .with_context(|| label.clone())?;
        steps.push(step);
    }
    Ok(Scenario {
        name: name.to_owned(),
        description: raw.description.trim().to_owned(),
        steps,
    })
}

/// Reads and parses one scenario file; errors name the file.
pub(crate) fn load(path: &Path) -> Result<Scenario> {
    let name = path
        .file_stem()
        .and_then(|s| s.to_str())
        .with_context(|| format!("{}: not a file name", path.display()))?;
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    parse(name, &text).with_context(|| format!("scenario {}", path.display()))
}

/// The scenario files of `dir` (`*.yaml`), sorted by name.
pub(crate) fn files(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    out.sort();
    Ok(out)
}

/// Loads every scenario of `dir`, or only those named in `only` (file stem, or the stem
/// without its `NN-` prefix). An unknown name is an error listing the known ones.
pub(crate) fn load_selected(dir: &Path, only: &[String]) -> Result<Vec<Scenario>> {
    let paths = files(dir)?;
    let stem = |p: &PathBuf| {
        p.file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default()
    };
    let matches = |p: &PathBuf, want: &str| {
        let s = stem(p);
        s == want || s.split_once('-').is_some_and(|(_, rest)| rest == want)
    };
    for want in only {
        if !paths.iter().any(|p| matches(p, want)) {
            bail!(
                "no scenario {want:?} in {}; known: {}",
                dir.display(),
                paths.iter().map(stem).collect::<Vec<_>>().join(", ")
            );
        }
    }
    paths
        .iter()
        .filter(|p| only.is_empty() || only.iter().any(|w| matches(p, w)))
        .map(|p| load(p))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
description: An image change.
quiet: 2s
manifests:
  - apiVersion: apps/v1
    kind: Deployment
    metadata: {name: web}
    spec: {replicas: 2}
steps:
  - name: new image
    kubectl: [set, image, deployment/web, app=x:2]
  - name: stuck
    apply:
      apiVersion: apps/v1
      kind: Deployment
      metadata: {name: web}
    wait: {deployment: web, condition: Progressing, status: "False", reason: ProgressDeadlineExceeded}
    quiet: 500ms
"#;

    #[test]
    fn a_scenario_parses_into_steps() {
        let s = parse("02-image", GOOD).unwrap();
        assert_eq!(s.name, "02-image");
        assert_eq!(s.description, "An image change.");
        assert_eq!(s.steps.len(), 3);
        assert_eq!(s.steps[0].name, "create");
        assert_eq!(s.steps[0].quiet, Duration::from_secs(2));
        let Action::Apply(objs) = &s.steps[0].action else {
            panic!("create applies")
        };
        assert_eq!(objs[0]["spec"]["replicas"], 2);
        assert_eq!(
            s.steps[1].action,
            Action::Kubectl(vec![
                "set".into(),
                "image".into(),
                "deployment/web".into(),
                "app=x:2".into()
            ])
        );
        assert_eq!(s.steps[1].quiet, Duration::from_secs(2));
        let w = s.steps[2].wait.as_ref().unwrap();
        assert_eq!(w.reason.as_deref(), Some("ProgressDeadlineExceeded"));
        assert_eq!(w.timeout, DEFAULT_WAIT_TIMEOUT);
        assert_eq!(s.steps[2].quiet, Duration::from_millis(500));
    }

    fn error(text: &str) -> String {
        format!("{:#}", parse("x", text).unwrap_err())
    }

    #[test]
    fn errors_name_the_step_and_the_problem() {
        let bad_verb = GOOD.replace("[set, image,", "[get, image,");
        let e = error(&bad_verb);
        assert!(
            e.contains("step 1 (new image)") && e.contains("kubectl get"),
            "{e}"
        );
        let ns = GOOD.replace("app=x:2]", "app=x:2, --namespace=other]");
        let e = error(&ns);
        assert!(
            e.contains("step 1 (new image)") && e.contains("--namespace"),
            "{e}"
        );
        let two = GOOD.replace("    quiet: 500ms", "    kubectl: [scale]");
        let e = error(&two);
        assert!(
            e.contains("step 2 (stuck)") && e.contains("two actions"),
            "{e}"
        );
        let status = GOOD.replace("status: \"False\"", "status: false");
        let e = error(&status);
        assert!(e.contains("step 2") && e.contains("quote it"), "{e}");
        let unit = GOOD.replace("500ms", "5 parsecs");
        let e = error(&unit);
        assert!(
            e.contains("step 2 (stuck)") && e.contains("unknown unit"),
            "{e}"
        );
        let ns_obj = GOOD.replace(
            "metadata: {name: web}\n    spec",
            "metadata: {name: web, namespace: a}\n    spec",
        );
        let e = error(&ns_obj);
        assert!(
            e.contains("manifests") && e.contains("names a namespace"),
            "{e}"
        );
        let unnamed = GOOD.replace("  - name: new image\n", "  - ");
        let e = error(&unnamed);
        assert!(e.contains("step 1") && e.contains("no name"), "{e}");
        let unknown = GOOD.replace("quiet: 2s", "quite: 2s");
        let e = error(&unknown);
        assert!(e.contains("unknown field `quite`"), "{e}");
        let nothing = "description: x\nmanifests: []\nsteps:\n  - name: a\n";
        let e = error(nothing);
        assert!(e.contains("no object to apply"), "{e}");
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("1m30s").unwrap(), Duration::from_secs(90));
        assert!(
            parse_duration("3")
                .unwrap_err()
                .to_string()
                .contains("no unit")
        );
        assert!(parse_duration("s").is_err());
        assert!(parse_duration("").is_err());
    }

    #[test]
    fn the_repository_scenarios_parse() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/diff/scenarios");
        let all = load_selected(&dir, &[]).unwrap();
        assert!(all.len() >= 20, "{} scenarios", all.len());
        let one = load_selected(&dir, &["create".to_owned()]).unwrap();
        assert_eq!(one.len(), 1);
        let e = load_selected(&dir, &["nope".to_owned()])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("no scenario \"nope\"") && e.contains("known:"),
            "{e}"
        );
    }
}

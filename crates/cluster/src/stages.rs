//! Our own KWOK stages for pods (`kwok-stages/*.yaml` next to this file), compiled into this crate and
//! written into each cluster's directory at `up`, where kwok reads them (`--config`).
//!
//! They replace KWOK's "fast" pod-ready stage so that pods behave like a kubelet's in the cases
//! tests need (documented in docs/local-cluster.md, "Pods that fail like real ones"):
//! * a pod with an image that cannot exist (tag `:404` / `:nonexistent`, or
//!   `kctrl-image-pull-failure` in the image) stays Pending and unready, its container waiting with
//!   ErrImagePull and ImagePullBackOff in turn, with a growing back-off;
//! * a pod annotated `kctrl.dev/ready-after: <duration>` runs unready for that long, then
//!   becomes Ready;
//! * every other pod becomes Running and Ready at once, as before.
//!
//! Being part of the binary (rather than of the build cache), they need no cache rebuild when
//! they change, and a cache built before they existed keeps working.

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

/// The stage files: name in the cluster directory, contents.
pub const STAGES: &[(&str, &str)] = &[
    ("pod-ready.yaml", include_str!("kwok-stages/pod-ready.yaml")),
    (
        "pod-image-pull-error.yaml",
        include_str!("kwok-stages/pod-image-pull-error.yaml"),
    ),
    (
        "pod-image-pull-backoff.yaml",
        include_str!("kwok-stages/pod-image-pull-backoff.yaml"),
    ),
    (
        "pod-running-unready.yaml",
        include_str!("kwok-stages/pod-running-unready.yaml"),
    ),
    (
        "pod-ready-after-delay.yaml",
        include_str!("kwok-stages/pod-ready-after-delay.yaml"),
    ),
];

/// Where the stage files of a cluster go: `<dir>/<file>` for each of [`STAGES`].
pub fn paths(dir: &Path) -> Vec<PathBuf> {
    STAGES.iter().map(|(name, _)| dir.join(name)).collect()
}

/// Writes [`STAGES`] into `dir` (created if needed) and returns their paths.
pub fn install(dir: &Path) -> Result<Vec<PathBuf>> {
    fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    for ((_, text), path) in STAGES.iter().zip(paths(dir)) {
        fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(paths(dir))
}

#[cfg(test)]
mod tests {
    use std::process::{Command, Stdio};

    use serde_yaml_ng::Value;

    use super::*;
    use crate::versions::KWOK_STAGE_FILES;

    /// Text in an image reference that makes the local cluster treat the image as unpullable.
    const UNPULLABLE_MARKER: &str = "kctrl-image-pull-failure";
    /// Pod annotation holding a duration for which a pod stays unready after its containers
    /// started.
    const READY_AFTER_ANNOTATION: &str = "kctrl.dev/ready-after";
    /// The key that tells pullable from unpullable images, as every stage spells it.
    const UNPULLABLE_KEY: &str = r#"[(.spec.initContainers // [])[], (.spec.containers // [])[] | .image // "" | test("(:(404|nonexistent)(@sha256:[0-9a-f]+)?$)|kctrl-image-pull-failure")] | any"#;
    /// The regular expression inside [`UNPULLABLE_KEY`], which the failure templates repeat.
    const UNPULLABLE_RE: &str =
        "(:(404|nonexistent)(@sha256:[0-9a-f]+)?$)|kctrl-image-pull-failure";
    /// The key that tells whether a container waits with ErrImagePull.
    const ERR_IMAGE_PULL_KEY: &str = r#"[(.status.initContainerStatuses // [])[], (.status.containerStatuses // [])[] | .state.waiting.reason // ""] | any(. == "ErrImagePull")"#;

    fn stage(file: &str) -> Value {
        let (_, text) = STAGES
            .iter()
            .find(|(name, _)| *name == file)
            .unwrap_or_else(|| panic!("no stage file {file}"));
        serde_yaml_ng::from_str(text).unwrap_or_else(|e| panic!("{file}: {e}"))
    }

    /// `(key, operator, values)` of each jq match expression.
    fn selector(file: &str) -> Vec<(String, String, Vec<String>)> {
        stage(file)["spec"]["selector"]["matchExpressions"]
            .as_sequence()
            .unwrap_or_else(|| panic!("{file}: no matchExpressions"))
            .iter()
            .map(|e| {
                let jq = &e["jq"];
                let values = jq["values"]
                    .as_sequence()
                    .map(|v| v.iter().map(|s| s.as_str().unwrap().to_owned()).collect())
                    .unwrap_or_default();
                (
                    jq["key"].as_str().unwrap().to_owned(),
                    jq["operator"].as_str().unwrap().to_owned(),
                    values,
                )
            })
            .collect()
    }

    /// The requirement on `key` in `file`'s selector, as `(operator, values)`.
    fn requirement(file: &str, key: &str) -> Option<(String, Vec<String>)> {
        selector(file)
            .into_iter()
            .find(|(k, _, _)| k == key)
            .map(|(_, op, values)| (op, values))
    }

    fn req(op: &str, values: &[&str]) -> Option<(String, Vec<String>)> {
        Some((
            op.to_owned(),
            values.iter().map(|v| (*v).to_owned()).collect(),
        ))
    }

    fn template(file: &str) -> String {
        let step = &stage(file)["spec"]["steps"][0]["patch"];
        assert_eq!(step["subresource"].as_str(), Some("status"), "{file}");
        assert_eq!(step["root"].as_str(), Some("status"), "{file}");
        step["template"].as_str().unwrap().to_owned()
    }

    #[test]
    fn every_file_is_a_pod_stage_of_ours() {
        let mut names = Vec::new();
        for (file, _) in STAGES {
            let s = stage(file);
            assert_eq!(s["apiVersion"].as_str(), Some("kwok.x-k8s.io/v1alpha1"));
            assert_eq!(s["kind"].as_str(), Some("Stage"));
            assert_eq!(s["spec"]["resourceRef"]["kind"].as_str(), Some("Pod"));
            assert_eq!(s["spec"]["resourceRef"]["apiGroup"].as_str(), Some("v1"));
            let name = s["metadata"]["name"].as_str().unwrap().to_owned();
            assert!(name.starts_with("kctrl-pod-"), "{file}: {name}");
            // Weights play no part: the selectors alone decide which stage applies.
            assert!(s["spec"]["weight"].is_null(), "{file}");
            assert_eq!(
                requirement(file, ".metadata.deletionTimestamp"),
                req("DoesNotExist", &[]),
                "{file}: deleted pods are KWOK's pod-delete stage's"
            );
            assert!(!template(file).is_empty());
            names.push(name);
        }
        names.sort();
        names.dedup();
        assert_eq!(names.len(), STAGES.len(), "stage names are unique");
    }

    #[test]
    fn kwoks_own_pod_ready_stage_is_no_longer_used() {
        assert!(
            !KWOK_STAGE_FILES
                .iter()
                .any(|f| f.ends_with("pod-ready.yaml")),
            "KWOK's pod-ready would make pods with unpullable images Ready"
        );
        for f in KWOK_STAGE_FILES {
            let base = Path::new(f).file_name().unwrap().to_str().unwrap();
            assert!(
                !STAGES.iter().any(|(name, _)| *name == base),
                "{base} would shadow a cached KWOK file"
            );
        }
    }

    /// Exactly one stage applies to a pending pod whatever its images and annotations: the image
    /// requirement is `In ['true']` in the failure stages and `NotIn ['true']` in the others, and
    /// the readiness-delay annotation splits the others.
    #[test]
    fn pending_pods_are_partitioned_by_image_and_annotation() {
        let unpullable = |file: &str| requirement(file, UNPULLABLE_KEY);
        for file in ["pod-image-pull-error.yaml", "pod-image-pull-backoff.yaml"] {
            assert_eq!(unpullable(file), req("In", &["true"]), "{file}");
            assert_eq!(requirement(file, ".status.phase"), req("In", &["Pending"]));
        }
        for file in [
            "pod-ready.yaml",
            "pod-running-unready.yaml",
            "pod-ready-after-delay.yaml",
        ] {
            assert_eq!(unpullable(file), req("NotIn", &["true"]), "{file}");
        }
        let ready_after = format!(".metadata.annotations[\"{READY_AFTER_ANNOTATION}\"]");
        assert_eq!(
            requirement("pod-ready.yaml", &ready_after),
            req("DoesNotExist", &[])
        );
        assert_eq!(
            requirement("pod-running-unready.yaml", &ready_after),
            req("Exists", &[])
        );
        for file in ["pod-ready.yaml", "pod-running-unready.yaml"] {
            assert_eq!(requirement(file, ".status.phase"), req("In", &["Pending"]));
            assert!(template(file).contains("phase: Running"), "{file}");
        }
        // The delayed Ready applies only to running pods that are not Ready yet, and makes them so.
        let file = "pod-ready-after-delay.yaml";
        assert_eq!(requirement(file, ".status.phase"), req("In", &["Running"]));
        assert_eq!(
            requirement(
                file,
                r#".status.conditions[]? | select(.type == "Ready") | .status"#
            ),
            req("NotIn", &["True"])
        );
        assert!(template(file).contains("status: \"True\""));
    }

    /// The two failure stages: complementary on the ErrImagePull state, each template leaving
    /// its own selector (so neither re-applies an unchanged status), identical otherwise.
    #[test]
    fn image_pull_failure_stages_alternate() {
        let (error, backoff) = ("pod-image-pull-error.yaml", "pod-image-pull-backoff.yaml");
        assert_eq!(
            requirement(error, ERR_IMAGE_PULL_KEY),
            req("NotIn", &["true"])
        );
        assert_eq!(
            requirement(backoff, ERR_IMAGE_PULL_KEY),
            req("In", &["true"])
        );
        let (te, tb) = (template(error), template(backoff));
        assert!(te.contains(r#"{{ $reason := "ErrImagePull" }}"#));
        assert!(tb.contains(r#"{{ $reason := "ImagePullBackOff" }}"#));
        assert_eq!(
            te.replacen(
                r#"{{ $reason := "ErrImagePull" }}"#,
                r#"{{ $reason := "ImagePullBackOff" }}"#,
                1
            ),
            tb,
            "the templates differ only in the waiting reason"
        );
        for t in [&te, &tb] {
            // The template decides per container with the selector's regular expression.
            assert!(t.contains(&format!("{{{{ $unpullable := {UNPULLABLE_RE:?} }}}}")));
            assert!(t.contains("phase: Pending"));
            assert!(t.contains("reason: ContainersNotReady"));
            // Timestamps are kept from the current status, so alternating changes only reasons.
            assert!(t.contains("or $status.startTime $now"));
            assert!(t.contains(r#"dig "state" "running" "startedAt" $now $o"#));
            assert!(t.contains("or ( get $since"));
        }
        assert!(
            UNPULLABLE_KEY.contains(UNPULLABLE_RE) && UNPULLABLE_RE.contains(UNPULLABLE_MARKER)
        );
        // A first failure after a second, then a back-off from the pod's age; two seconds of
        // ErrImagePull before each ImagePullBackOff.
        let delay = &stage(error)["spec"]["delay"];
        assert_eq!(delay["durationMilliseconds"].as_i64(), Some(1000));
        let expr = delay["durationFrom"]["jq"]["expression"].as_str().unwrap();
        assert!(
            expr.contains("ImagePullBackOff")
                && expr.contains("if . < 10 then 10 elif . > 300 then 300")
        );
        assert_eq!(
            stage(backoff)["spec"]["delay"]["durationMilliseconds"].as_i64(),
            Some(2000)
        );
        for (file, message) in [
            (error, "Error: ErrImagePull"),
            (backoff, "Error: ImagePullBackOff"),
        ] {
            let event = &stage(file)["spec"]["steps"][1]["event"];
            assert_eq!(event["type"].as_str(), Some("Warning"));
            assert_eq!(event["reason"].as_str(), Some("Failed"));
            assert_eq!(event["message"].as_str(), Some(message));
        }
    }

    /// Runs a jq program on `input`; `None` when no `jq` is installed. KWOK evaluates these with
    /// gojq, whose behaviour for the functions used here is the same.
    fn jq(program: &str, input: &serde_json::Value) -> Option<String> {
        let mut child = match Command::new("jq")
            .args(["-c", program])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
        {
            Ok(c) => c,
            Err(_) => return None,
        };
        use std::io::Write;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.to_string().as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "jq {program}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Some(String::from_utf8(out.stdout).unwrap().trim().to_owned())
    }

    #[test]
    fn selector_keys_classify_images_and_states() {
        let pod = |init: &[&str], containers: &[&str]| {
            let list = |images: &[&str]| {
                images
                    .iter()
                    .enumerate()
                    .map(|(i, image)| serde_json::json!({"name": format!("c{i}"), "image": image}))
                    .collect::<Vec<_>>()
            };
            serde_json::json!({"spec": {"initContainers": list(init), "containers": list(containers)}})
        };
        let cases: &[(&[&str], &[&str], bool)] = &[
            (&[], &["nginx:404"], true),
            (&[], &["registry.k8s.io/pause:nonexistent"], true),
            (&[], &["localhost:5000/app:404@sha256:0123abcd"], true),
            (&[], &["example.invalid/kctrl-image-pull-failure:v1"], true),
            (&["busybox:nonexistent"], &["nginx:1.27"], true),
            (&[], &["nginx:1.27", "sidecar:404"], true),
            (&[], &["nginx:1.27"], false),
            (&[], &["nginx"], false),
            (&[], &["nginx:4040"], false),
            (&[], &["registry:404/nginx:1"], false),
            (&[], &["nginx:404-fixed"], false),
        ];
        for (init, containers, unpullable) in cases {
            let Some(out) = jq(UNPULLABLE_KEY, &pod(init, containers)) else {
                eprintln!("jq is not installed; skipping the evaluation of the selector keys");
                return;
            };
            assert_eq!(out, unpullable.to_string(), "{init:?} {containers:?}");
        }
        // No spec lists at all (never the case for a real pod) is not an error.
        assert_eq!(jq(UNPULLABLE_KEY, &serde_json::json!({})).unwrap(), "false");
        let status = |reasons: &[&str]| {
            let statuses: Vec<_> = reasons
                .iter()
                .map(|r| serde_json::json!({"name": "c", "state": {"waiting": {"reason": r}}}))
                .collect();
            serde_json::json!({"status": {"containerStatuses": statuses}})
        };
        for (reasons, expected) in [
            (&[][..], "false"),
            (&["ImagePullBackOff"][..], "false"),
            (&["PodInitializing", "ErrImagePull"][..], "true"),
        ] {
            assert_eq!(jq(ERR_IMAGE_PULL_KEY, &status(reasons)).unwrap(), expected);
        }
        let running =
            serde_json::json!({"status": {"containerStatuses": [{"state": {"running": {}}}]}});
        assert_eq!(jq(ERR_IMAGE_PULL_KEY, &running).unwrap(), "false");
    }

    #[test]
    fn delays_are_computed_from_the_pod() {
        let back_off =
            stage("pod-image-pull-error.yaml")["spec"]["delay"]["durationFrom"]["jq"]["expression"]
                .as_str()
                .unwrap()
                .to_owned();
        let failing = |reason: &str, age: u64| {
            let started = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_secs()
                - age;
            serde_json::json!({"status": {
                "startTime": jq("todateiso8601", &serde_json::json!(started)).map(|s| s.trim_matches('"').to_owned()),
                "containerStatuses": [{"state": {"waiting": {"reason": reason}}}]
            }})
        };
        let Some(first) = jq(&back_off, &failing("ErrImagePull", 3)) else {
            eprintln!("jq is not installed; skipping the evaluation of the delays");
            return;
        };
        // No output: KWOK uses durationMilliseconds (the first pull fails after a second).
        assert_eq!(first, "");
        assert_eq!(
            jq(&back_off, &failing("ImagePullBackOff", 3)).unwrap(),
            "\"10s\""
        );
        let grown = jq(&back_off, &failing("ImagePullBackOff", 75)).unwrap();
        assert!(["\"75s\"", "\"76s\""].contains(&grown.as_str()), "{grown}");
        assert_eq!(
            jq(&back_off, &failing("ImagePullBackOff", 4000)).unwrap(),
            "\"300s\""
        );

        let ready_at = stage("pod-ready-after-delay.yaml")["spec"]["delay"]["durationFrom"]["jq"]
            ["expression"]
            .as_str()
            .unwrap()
            .to_owned();
        let pod = |after: Option<&str>| {
            serde_json::json!({
                "metadata": {"annotations": after.map(|a| serde_json::json!({READY_AFTER_ANNOTATION: a}))},
                "status": {"containerStatuses": [
                    {"state": {"running": {"startedAt": "2030-01-02T03:04:05Z"}}},
                    {"state": {"running": {"startedAt": "2030-01-02T03:04:00Z"}}}
                ]}
            })
        };
        for (after, expected) in [
            (Some("30s"), "\"2030-01-02T03:04:35Z\""),
            (Some("1m30s"), "\"2030-01-02T03:05:35Z\""),
            (Some("1.5s"), "\"2030-01-02T03:04:07Z\""),
            (Some("2h"), "\"2030-01-02T05:04:05Z\""),
            (Some("250ms"), "\"2030-01-02T03:04:06Z\""),
            // Not of our form: handed on, KWOK parses it as a Go duration (or ignores it).
            (Some("1m0.5us"), "\"1m0.5us\""),
            (None, ""),
        ] {
            assert_eq!(jq(&ready_at, &pod(after)).unwrap(), expected, "{after:?}");
        }
    }
}

//! The images the suite's pods run, which a real kubelet must find on its node: KWOK never
//! pulls, kind's kubelets do, and the project's machines have no registry. Every
//! `registry.k8s.io/pause:<version>` that `tests/` names is a name of our static pause image in
//! the node image (see `node_image.rs`); a unit test below fails when `tests/` names one that
//! is missing here. Tags that must *not* exist (`pause:404`, `pause:nonexistent`: the suite's
//! pull failures) are not versions and stay absent.

/// Repository of the pause images the suite runs.
pub(crate) const PAUSE_REPOSITORY: &str = "registry.k8s.io/pause";

/// Every pause version the suite (`tests/`) runs.
pub(crate) const SUITE_PAUSE_TAGS: &[&str] = &[
    "3.1", "3.2", "3.3", "3.4", "3.5", "3.6", "3.7", "3.8", "3.9", "3.10",
];

/// The full names of [`SUITE_PAUSE_TAGS`], except `release_pause` (kubeadm's sandbox image,
/// which the node image carries anyway).
pub(crate) fn extra_pause_images(release_pause: &str) -> Vec<String> {
    SUITE_PAUSE_TAGS
        .iter()
        .map(|t| format!("{PAUSE_REPOSITORY}:{t}"))
        .filter(|i| i != release_pause)
        .collect()
}

/// The pause versions named in `text`: `registry.k8s.io/pause:` followed by a dotted number.
#[cfg(test)]
fn pause_tags_in(text: &str) -> Vec<String> {
    let needle = format!("{PAUSE_REPOSITORY}:");
    let mut tags = Vec::new();
    for (i, _) in text.match_indices(&needle) {
        let rest = &text[i + needle.len()..];
        let tag: String = rest
            .chars()
            .take_while(|c| c.is_ascii_digit() || *c == '.')
            .collect();
        let tag = tag.trim_end_matches('.');
        let is_version = tag.contains('.')
            && tag.split('.').all(|p| !p.is_empty())
            // A dotted number followed by more name characters is no version (`3.9-rc`).
            && !rest[tag.len()..]
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
        if is_version && !tags.iter().any(|t| t == tag) {
            tags.push(tag.to_owned());
        }
    }
    tags
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                files(&p, out);
            } else {
                out.push(p);
            }
        }
    }

    #[test]
    fn every_pause_version_the_suite_runs_is_in_the_node_image() {
        let tests = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests");
        let mut all = Vec::new();
        files(&tests, &mut all);
        let mut seen = Vec::new();
        for f in all {
            let Ok(text) = std::fs::read_to_string(&f) else {
                continue;
            };
            for tag in pause_tags_in(&text) {
                assert!(
                    SUITE_PAUSE_TAGS.contains(&tag.as_str()),
                    "{} runs {PAUSE_REPOSITORY}:{tag}, which SUITE_PAUSE_TAGS lacks: a kind \
                     node could not start it",
                    f.display()
                );
                seen.push(tag);
            }
        }
        // The list stays tight: every tag is used somewhere.
        for t in SUITE_PAUSE_TAGS {
            assert!(seen.iter().any(|s| s == t), "{t} is used nowhere in tests/");
        }
    }

    #[test]
    fn versions_are_found_and_pull_failures_are_not() {
        let text = r#"image: registry.k8s.io/pause:3.10
            'app=registry.k8s.io/pause:404' "registry.k8s.io/pause:3.9";
            registry.k8s.io/pause:nonexistent registry.k8s.io/pause:3.8-rc registry.k8s.io/pause:3.10"#;
        assert_eq!(pause_tags_in(text), ["3.10", "3.9"]);
        assert!(
            !extra_pause_images("registry.k8s.io/pause:3.10")
                .contains(&"registry.k8s.io/pause:3.10".to_owned())
        );
        assert_eq!(extra_pause_images("registry.k8s.io/pause:3.10.2").len(), 10);
    }
}

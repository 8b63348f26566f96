//! `cargo xtask api-versions`: kctrl's library crates leave the Kubernetes release to their
//! user, and build for each one k8s-openapi supports.
//!
//! Three checks:
//!
//! 1. The rule (from `cargo metadata`): no library crate enables a k8s-openapi version
//!    feature in its normal dependencies, and every package of the workspace that selects
//!    one (binaries, tests, dev-dependencies) selects the same, so one build has one.
//! 2. The library crates compile against the oldest supported release (1.33), and with
//!    `--all` against every one; the workspace's own build covers the newest.
//! 3. xtask/consumer, a crate outside the workspace that depends on the library crates as a
//!    user's crate does and selects k8s-openapi's `latest`, builds and runs its checks.
//!
//! Builds go to `target/api-versions`, apart from the workspace's own so they do not
//! invalidate each other.

use std::process::Command;

use anyhow::{Context, Result, bail};

/// The Kubernetes releases k8s-openapi 0.29 supports (1.x minors), oldest first.
pub(crate) const RELEASES: &[u32] = &[33, 34, 35, 36, 37];

/// Arguments of `cargo xtask api-versions`.
#[derive(clap::Args, Default)]
pub(crate) struct ApiVersionsArgs {
    /// Check the library crates against every supported release, not only the oldest.
    #[arg(long)]
    all: bool,
}

pub(crate) fn run(args: ApiVersionsArgs) -> Result<()> {
    let root = crate::workspace_root();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let meta = Command::new(&cargo)
        .args(["metadata", "--format-version", "1", "--no-deps"])
        .current_dir(&root)
        .output()
        .context("running `cargo metadata`")?;
    if !meta.status.success() {
        bail!(
            "`cargo metadata` failed: {}",
            String::from_utf8_lossy(&meta.stderr)
        );
    }
    let meta: serde_json::Value = serde_json::from_slice(&meta.stdout)?;
    let packages = packages(&meta)?;
    let libraries = check_rule(&packages)?;
    eprintln!(
        "==> api-versions: {} library crates select no Kubernetes release: {}",
        libraries.len(),
        libraries.join(", ")
    );

    let target = root.join("target").join("api-versions");
    let releases: Vec<u32> = if args.all {
        RELEASES.to_vec()
    } else {
        vec![RELEASES[0]]
    };
    for minor in releases {
        let mut cmd = Command::new(&cargo);
        cmd.arg("check").arg("--target-dir").arg(&target);
        for lib in &libraries {
            cmd.args(["-p", lib]);
        }
        cmd.args(["--lib", "--features", &format!("k8s-openapi/v1_{minor}")]);
        run_step(
            cmd.current_dir(&root),
            &format!("library crates against Kubernetes 1.{minor}"),
        )?;
    }

    // The consumer resolves the workspace's locked versions, as far as they apply.
    let consumer = root.join("xtask").join("consumer");
    std::fs::copy(root.join("Cargo.lock"), consumer.join("Cargo.lock"))
        .context("copying Cargo.lock to xtask/consumer")?;
    let mut cmd = Command::new(&cargo);
    cmd.args(["run", "-q", "--manifest-path"])
        .arg(consumer.join("Cargo.toml"))
        .arg("--target-dir")
        .arg(&target);
    run_step(
        cmd.current_dir(&consumer),
        "xtask/consumer (k8s-openapi `latest`)",
    )
}

fn run_step(cmd: &mut Command, what: &str) -> Result<()> {
    eprintln!("==> api-versions: {what}");
    let started = std::time::Instant::now();
    let status = cmd
        .status()
        .with_context(|| format!("running cargo for {what}"))?;
    if !status.success() {
        bail!("{what}: cargo failed ({status})");
    }
    eprintln!(
        "==> api-versions: {what}: ok in {:.0} s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// What the rule looks at in one workspace package.
#[derive(Debug, PartialEq)]
struct Package {
    name: String,
    /// Has a library target, no binary, and is published: the kind of crate users depend on.
    library: bool,
    /// k8s-openapi version features in normal (and build) dependencies.
    selects: Vec<String>,
    /// k8s-openapi version features in dev-dependencies.
    dev_selects: Vec<String>,
    /// Depends on k8s-openapi at all.
    uses_openapi: bool,
}

fn is_version_feature(feature: &str) -> bool {
    feature == "latest" || feature == "earliest" || feature.starts_with("v1_")
}

fn packages(meta: &serde_json::Value) -> Result<Vec<Package>> {
    let list = meta["packages"]
        .as_array()
        .context("`cargo metadata` without packages")?;
    let mut out = Vec::new();
    for p in list {
        let name = p["name"].as_str().unwrap_or_default().to_owned();
        let kinds: Vec<&str> = p["targets"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|t| t["kind"].as_array().into_iter().flatten())
            .filter_map(|k| k.as_str())
            .collect();
        // `publish = false` (an empty list) marks the repository's own harnesses (tests/,
        // fuzz/), which no user depends on.
        let published = p["publish"].as_array().is_none_or(|r| !r.is_empty());
        let library = kinds.contains(&"lib") && !kinds.contains(&"bin") && published;
        let (mut selects, mut dev_selects, mut uses_openapi) = (Vec::new(), Vec::new(), false);
        for d in p["dependencies"].as_array().into_iter().flatten() {
            if d["name"] != "k8s-openapi" {
                continue;
            }
            uses_openapi = true;
            let features = d["features"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|f| f.as_str())
                .filter(|f| is_version_feature(f))
                .map(str::to_owned);
            match d["kind"].as_str() {
                Some("dev") => dev_selects.extend(features),
                _ => selects.extend(features),
            }
        }
        out.push(Package {
            name,
            library,
            selects,
            dev_selects,
            uses_openapi,
        });
    }
    Ok(out)
}

/// Checks the rule; returns the library crates that use k8s-openapi.
fn check_rule(packages: &[Package]) -> Result<Vec<String>> {
    let mut problems = Vec::new();
    let mut chosen = std::collections::BTreeMap::<&str, Vec<&str>>::new();
    for p in packages {
        if p.library && !p.selects.is_empty() {
            problems.push(format!(
                "library crate {} enables k8s-openapi's {} in its dependencies: a library must \
                 leave the Kubernetes release to its user (select it under [dev-dependencies])",
                p.name,
                p.selects.join(", ")
            ));
        }
        for f in p.selects.iter().chain(&p.dev_selects) {
            chosen.entry(f.as_str()).or_default().push(&p.name);
        }
    }
    if chosen.len() > 1 {
        let list: Vec<String> = chosen
            .iter()
            .map(|(f, who)| format!("{f} ({})", who.join(", ")))
            .collect();
        problems.push(format!(
            "the workspace selects more than one Kubernetes release: {}; select the same one everywhere",
            list.join("; ")
        ));
    }
    if !problems.is_empty() {
        bail!("{}", problems.join("\n"));
    }
    Ok(packages
        .iter()
        .filter(|p| p.library && p.uses_openapi)
        .map(|p| p.name.clone())
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn package(name: &str, library: bool, selects: &[&str], dev: &[&str]) -> Package {
        Package {
            name: name.into(),
            library,
            selects: selects.iter().map(|s| (*s).into()).collect(),
            dev_selects: dev.iter().map(|s| (*s).into()).collect(),
            uses_openapi: true,
        }
    }

    #[test]
    fn a_library_selecting_a_release_is_refused_by_name() {
        let err = check_rule(&[
            package("kctrl-client", true, &["v1_37"], &[]),
            package("deployment-controller", false, &["v1_37"], &[]),
        ])
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("library crate kctrl-client enables k8s-openapi's v1_37"),
            "{err}"
        );
    }

    #[test]
    fn two_releases_in_one_workspace_are_refused() {
        let err = check_rule(&[
            package("kctrl-client", true, &[], &["v1_36"]),
            package("deployment-controller", false, &["v1_37"], &[]),
        ])
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("v1_36 (kctrl-client); v1_37 (deployment-controller)"),
            "{err}"
        );
    }

    #[test]
    fn libraries_selecting_only_in_dev_dependencies_pass() {
        let libs = check_rule(&[
            package("kctrl-client", true, &[], &["v1_37"]),
            package("kctrl-workqueue", true, &[], &[]),
            package("deployment-controller", false, &["v1_37"], &[]),
        ])
        .unwrap();
        // kctrl-workqueue "uses" k8s-openapi in this table; the real one does not.
        assert_eq!(libs, ["kctrl-client", "kctrl-workqueue"]);
    }

    #[test]
    fn the_workspace_follows_the_rule() {
        let out = Command::new(env!("CARGO"))
            .args([
                "metadata",
                "--format-version",
                "1",
                "--no-deps",
                "--offline",
            ])
            .current_dir(crate::workspace_root())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let meta: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let libs = check_rule(&packages(&meta).unwrap()).unwrap();
        assert!(libs.contains(&"kctrl-client".to_owned()), "{libs:?}");
        assert!(libs.contains(&"kctrl-deployment".to_owned()), "{libs:?}");
    }
}

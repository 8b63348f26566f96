//! The node's binaries that are not part of the cached control plane, and the kind CLI: built
//! from upstream's Go modules (kubelet, kubeadm, kube-proxy of the cluster's release; CoreDNS;
//! kind itself) and with rustc (our static pause), each cached beside a recipe file that
//! names its inputs.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};
use kctrl_cluster::toolchain::{self, fmt_duration};
use kctrl_cluster::versions::{Binary, Release, Wrapper};

use super::node_image::{Dirs, KIND_VERSION, NODE_BINARIES, PAUSE_SOURCE, dirs};
use super::steps::run_logged;

/// The `go` command with the settings of the project's builds (low priority, static, the
/// local toolchain only).
pub(super) fn go(dir: &Path) -> Command {
    let go = std::env::var_os("KCTRL_GO").unwrap_or_else(|| "go".into());
    let mut cmd = Command::new("nice");
    cmd.arg("-n")
        .arg("10")
        .arg(go)
        .current_dir(dir)
        .env("GOTOOLCHAIN", "local")
        .env("CGO_ENABLED", "0");
    cmd
}

/// The wrapper module of the node binaries: the control plane's go.mod (same requirements
/// and staging replaces) with the node commands as its tools.
pub(super) fn node_go_mod(release: &Release) -> String {
    let base = Wrapper::Kubernetes.go_mod(release);
    let head = base.split("\ntool (").next().unwrap_or(&base);
    let mut out = head.replace("kctrl.local/kubernetesbin", "kctrl.local/kindnodebin");
    out.push_str("\ntool (\n");
    for b in NODE_BINARIES {
        out.push_str(&format!("\tk8s.io/kubernetes/cmd/{b}\n"));
    }
    out.push_str(")\n");
    out
}

/// Builds kubelet, kubeadm and kube-proxy of `release` unless built from the same recipe.
pub(super) fn build_node_binaries(dirs: &Dirs, release: &Release) -> Result<()> {
    let src = dirs.root.join("src").join("node");
    fs::create_dir_all(&src)?;
    fs::create_dir_all(dirs.root.join("bin"))?;
    let go_mod = node_go_mod(release);
    let recipe_of = |name: &str| {
        format!(
            "{name} k8s.io/kubernetes/cmd/{name} tags=selinux,notest ldflags={}\n{go_mod}",
            Binary::KubeApiserver.ldflags(release, "<build-date>")
        )
    };
    let missing: Vec<&str> = NODE_BINARIES
        .iter()
        .copied()
        .filter(|n| {
            !dirs.bin(n).is_file() || fs::read_to_string(dirs.recipe(n)).ok() != Some(recipe_of(n))
        })
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    let resolved = src.join(".resolved");
    if fs::read_to_string(&resolved).ok().as_deref() != Some(go_mod.as_str()) {
        fs::write(src.join("go.mod"), &go_mod)?;
        let _ = fs::remove_file(src.join("go.sum"));
        eprintln!(
            "  resolving k8s.io/kubernetes@{} for the node binaries (go mod tidy)",
            release.kubernetes
        );
        let mut cmd = go(&src);
        cmd.args(["mod", "tidy"]);
        run_logged(
            cmd,
            &dirs.log("tidy-node.log"),
            "go mod tidy (node binaries)",
        )?;
        fs::write(&resolved, &go_mod)?;
    }
    let date = toolchain::utc_now_rfc3339();
    for name in missing {
        eprintln!("  building {name} {} (go build)", release.kubernetes);
        let tmp = dirs.bin(&format!(".{name}.tmp"));
        let mut cmd = go(&src);
        cmd.args(["build", "-trimpath", "-tags", "selinux,notest", "-ldflags"])
            .arg(Binary::KubeApiserver.ldflags(release, &date))
            .arg("-o")
            .arg(&tmp)
            .arg(format!("k8s.io/kubernetes/cmd/{name}"));
        let took = run_logged(cmd, &dirs.log(&format!("build-{name}.log")), name)?;
        fs::rename(&tmp, dirs.bin(name))?;
        fs::write(dirs.recipe(name), recipe_of(name))?;
        eprintln!("    built {name} in {}", fmt_duration(took));
    }
    Ok(())
}

/// `go install module@version` into the kind bin directory as `name`, unless done already.
pub(super) fn go_install(dirs: &Dirs, name: &str, package: &str, version: &str) -> Result<PathBuf> {
    let recipe = format!("{package}@{version}\n");
    let dest = dirs.bin(name);
    if dest.is_file() && fs::read_to_string(dirs.recipe(name)).ok().as_deref() == Some(&recipe) {
        return Ok(dest);
    }
    let gobin = dirs.work().join(format!("gobin-{name}"));
    fs::create_dir_all(&gobin)?;
    fs::create_dir_all(dirs.root.join("bin"))?;
    eprintln!("  building {package}@{version} (go install)");
    let mut cmd = go(&dirs.root);
    cmd.env("GOBIN", &gobin)
        .arg("install")
        .arg(format!("{package}@{version}"));
    let took = run_logged(cmd, &dirs.log(&format!("build-{name}.log")), name)?;
    let built = fs::read_dir(&gobin)?
        .flatten()
        .map(|e| e.path())
        .next()
        .with_context(|| format!("go install {package}@{version} produced nothing"))?;
    fs::rename(&built, &dest)?;
    let _ = fs::remove_dir_all(&gobin);
    fs::write(dirs.recipe(name), recipe)?;
    eprintln!("    built {name} in {}", fmt_duration(took));
    Ok(dest)
}

/// kind's CLI ([`KIND_VERSION`]) built from the Go module proxy into the cache.
pub(crate) fn ensure_kind(release: &'static Release) -> Result<PathBuf> {
    let dirs = dirs(release)?;
    go_install(&dirs, "kind", "sigs.k8s.io/kind", KIND_VERSION)
}

/// The directory of kind's module source in the Go module cache (downloaded if needed).
pub(super) fn kind_module_dir(dirs: &Dirs) -> Result<PathBuf> {
    let out = go(&dirs.root)
        .args(["mod", "download", "-json"])
        .arg(format!("sigs.k8s.io/kind@{KIND_VERSION}"))
        .output()
        .context("go mod download sigs.k8s.io/kind")?;
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).with_context(|| {
        format!(
            "go mod download -json: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    })?;
    match v.get("Dir").and_then(|d| d.as_str()) {
        Some(d) => Ok(PathBuf::from(d)),
        None => bail!("go mod download sigs.k8s.io/kind@{KIND_VERSION}: {v}"),
    }
}

/// Our pause program, compiled statically with rustc.
pub(super) fn build_pause(dirs: &Dirs) -> Result<PathBuf> {
    let dest = dirs.bin("pause");
    let recipe = format!("rustc static\n{PAUSE_SOURCE}");
    if dest.is_file() && fs::read_to_string(dirs.recipe("pause")).ok().as_deref() == Some(&recipe) {
        return Ok(dest);
    }
    fs::create_dir_all(dirs.work())?;
    let src = dirs.work().join("pause.rs");
    fs::write(&src, PAUSE_SOURCE)?;
    let mut cmd = Command::new(std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into()));
    cmd.args([
        "--edition",
        "2021",
        "-C",
        "opt-level=s",
        "-C",
        "panic=abort",
        "-C",
        "strip=symbols",
        "-C",
        "target-feature=+crt-static",
        "-o",
    ])
    .arg(&dest)
    .arg(&src);
    run_logged(cmd, &dirs.log("build-pause.log"), "pause (rustc)")?;
    fs::write(dirs.recipe("pause"), recipe)?;
    Ok(dest)
}

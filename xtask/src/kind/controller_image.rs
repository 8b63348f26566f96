//! The controller's image without a registry: deploy/Containerfile needs registry base images
//! and crates.io inside the build, so offline the image is assembled from the host-built
//! binary (`cargo build --profile dist`) instead — with the shared libraries it links, the
//! host's CA certificates and a `nonroot` user 65532 — and the final stage's `LABEL`, `USER`,
//! `EXPOSE` and `ENTRYPOINT` instructions are taken from deploy/Containerfile itself, so both
//! recipes give the same user, entrypoint and labels.

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use kctrl_cluster::kind::{CONTAINERFILE, CONTROLLER_IMAGE};

use super::steps;

/// Where the binary goes in the image (the Containerfile's COPY destination).
const BINARY_IN_IMAGE: &str = "/usr/local/bin/deployment-controller";

/// The final stage's instructions that describe the image (not how it is built): `LABEL`
/// (with its continuation lines), `USER`, `EXPOSE`, `ENTRYPOINT`.
pub(crate) fn runtime_instructions(containerfile: &str) -> Result<Vec<String>> {
    let stages: Vec<&str> = containerfile.split("\nFROM ").collect();
    let last = stages.last().context("no FROM in the Containerfile")?;
    let mut out = Vec::new();
    let mut current: Option<String> = None;
    for line in last.lines() {
        if let Some(c) = current.as_mut() {
            c.push('\n');
            c.push_str(line);
            if !line.trim_end().ends_with('\\') {
                out.push(current.take().expect("set"));
            }
            continue;
        }
        let word = line.split_whitespace().next().unwrap_or("");
        if ["LABEL", "USER", "EXPOSE", "ENTRYPOINT"].contains(&word) {
            if line.trim_end().ends_with('\\') {
                current = Some(line.to_owned());
            } else {
                out.push(line.to_owned());
            }
        }
    }
    for needed in ["LABEL", "USER", "ENTRYPOINT"] {
        if !out.iter().any(|i| i.starts_with(needed)) {
            bail!("{CONTAINERFILE}'s final stage has no {needed} instruction");
        }
    }
    Ok(out)
}

/// The shared libraries `binary` loads (`ldd`), with the dynamic loader.
fn linked_libraries(binary: &Path) -> Result<Vec<PathBuf>> {
    let out = steps::output(&["ldd", &binary.display().to_string()])?;
    Ok(out
        .lines()
        .filter_map(|l| {
            let l = l.trim();
            let path = match l.split_once("=>") {
                Some((_, rest)) => rest.split_whitespace().next()?,
                None => l.split_whitespace().next()?,
            };
            path.starts_with('/').then(|| PathBuf::from(path))
        })
        .collect())
}

/// Builds [`CONTROLLER_IMAGE`] from `binary` (see the module docs).
pub(crate) fn assemble(binary: &Path, work: &Path) -> Result<()> {
    let ctx = work.join("controller-image");
    let _ = fs::remove_dir_all(&ctx);
    let root = ctx.join("root");
    fs::create_dir_all(root.join("usr/local/bin"))?;
    fs::copy(binary, root.join(BINARY_IN_IMAGE.trim_start_matches('/')))
        .with_context(|| format!("copying {}", binary.display()))?;
    for lib in linked_libraries(binary)? {
        let dest = root.join(lib.strip_prefix("/").unwrap_or(&lib));
        fs::create_dir_all(dest.parent().context("lib dir")?)?;
        // Follow symlinks: the file itself under the name the binary asks for.
        fs::copy(&lib, &dest).with_context(|| format!("copying {}", lib.display()))?;
    }
    let certs = Path::new("/etc/ssl/certs/ca-certificates.crt");
    if certs.is_file() {
        fs::create_dir_all(root.join("etc/ssl/certs"))?;
        fs::copy(certs, root.join("etc/ssl/certs/ca-certificates.crt"))?;
    }
    fs::create_dir_all(root.join("etc"))?;
    fs::write(
        root.join("etc/passwd"),
        "root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n",
    )?;
    fs::write(root.join("etc/group"), "root:x:0:\nnonroot:x:65532:\n")?;
    fs::create_dir_all(root.join("home/nonroot"))?;
    fs::create_dir_all(root.join("tmp"))?;
    let containerfile = fs::read_to_string(crate::workspace_root().join(CONTAINERFILE))?;
    let mut dockerfile = String::from("FROM scratch\nCOPY root/ /\n");
    for i in runtime_instructions(&containerfile)? {
        dockerfile.push_str(&i);
        dockerfile.push('\n');
    }
    fs::write(ctx.join("Dockerfile"), dockerfile)?;
    let out = std::process::Command::new("docker")
        .env("DOCKER_BUILDKIT", "0")
        .args(["build", "-q", "-t", CONTROLLER_IMAGE])
        .arg(&ctx)
        .output()
        .context("docker build")?;
    let _ = fs::remove_dir_all(&ctx);
    if !out.status.success() {
        bail!(
            "assembling {CONTROLLER_IMAGE} failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    // The image must run: the binary finds its libraries and answers --help as user 65532.
    let help = steps::output(&["docker", "run", "--rm", CONTROLLER_IMAGE, "--help"])?;
    if !help.contains("--leader-elect") {
        bail!(
            "{CONTROLLER_IMAGE} runs but its --help does not look like the controller's:\n{help}"
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn takes_the_runtime_instructions_of_the_real_containerfile() {
        let text = fs::read_to_string(crate::workspace_root().join(CONTAINERFILE)).unwrap();
        let got = runtime_instructions(&text).unwrap();
        let label = got.iter().find(|i| i.starts_with("LABEL")).unwrap();
        assert!(label.contains("org.opencontainers.image.title"), "{label}");
        assert!(label.contains("org.opencontainers.image.source"), "{label}");
        assert!(got.contains(&"USER 65532:65532".to_owned()), "{got:?}");
        assert!(
            got.iter()
                .any(|i| i.starts_with("ENTRYPOINT") && i.contains(BINARY_IN_IMAGE)),
            "{got:?}"
        );
        assert!(
            !got.iter()
                .any(|i| i.starts_with("COPY") || i.starts_with("RUN"))
        );
    }

    #[test]
    fn a_containerfile_without_a_user_is_refused() {
        let err =
            runtime_instructions("FROM a AS b\nRUN x\nFROM c\nLABEL a=b\nENTRYPOINT [\"/x\"]\n")
                .unwrap_err()
                .to_string();
        assert!(err.contains("no USER"), "{err}");
    }
}

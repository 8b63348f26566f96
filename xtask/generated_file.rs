//! What the code generators under xtask/ (gen-protobuf, gen-merge-semantics) share: where the
//! workspace is, formatting the generated text as `cargo fmt` would, and writing it or checking
//! that the tree already holds it. Each generator is a package of its own, built without the
//! workspace's crates, and includes this file with `#[path]`.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

/// The workspace root, two levels above the generator's package (`xtask/<generator>`).
pub(crate) fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .and_then(Path::parent)
        .expect("a generator sits in xtask/ of the workspace")
        .to_path_buf()
}

/// `text` as `cargo fmt` would leave it.
pub(crate) fn rustfmt(text: &str) -> Result<String> {
    use std::io::Write as _;
    let mut child = Command::new("rustfmt")
        .args(["--edition", "2024", "--emit", "stdout"])
        .current_dir(workspace_root())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .context("running rustfmt")?;
    child
        .stdin
        .take()
        .expect("piped")
        .write_all(text.as_bytes())?;
    let out = child.wait_with_output()?;
    if !out.status.success() {
        bail!(
            "rustfmt refused the generated code:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8(out.stdout)?)
}

/// Fails unless the file at `path` holds `text`; `stale` says what to run and from what.
pub(crate) fn check(path: &Path, text: &str, stale: &str) -> Result<()> {
    let old =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    if old != text {
        bail!("{} is not what {stale}; run it", path.display());
    }
    Ok(())
}

/// With `check`, [`check`]s `path` (and says it is up to date); otherwise writes `text` there.
pub(crate) fn write_or_check(path: &Path, text: &str, check_only: bool, stale: &str) -> Result<()> {
    if check_only {
        check(path, text, stale)?;
        println!("{} is up to date", path.display());
    } else {
        std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))?;
        println!("wrote {}", path.display());
    }
    Ok(())
}

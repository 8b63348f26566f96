//! The OCI runtime dockerd runs instead of runc on a host whose capability bounding set lacks
//! `CAP_SYS_RESOURCE`: runc cannot grant a capability the host does not have, so every
//! privileged container would fail (`unable to apply caps`). The wrapper removes that one
//! capability from the spec runc is given — the bundle's `config.json` for `create`/`run`,
//! the `--process` file for `exec` — and then becomes the real runc (exec, same arguments).
//!
//! It is this very xtask binary, copied to `<engine root>/bin/kctrl-runc` (a stable path: the
//! build output in target/ changes with every build) and recognised by that name in `main`.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result};

/// The file name the wrapper is installed under; `main` dispatches on it.
pub(crate) const WRAPPER_NAME: &str = "kctrl-runc";
/// The capability the host cannot grant.
const DROPPED: &str = "CAP_SYS_RESOURCE";

/// Copies the running binary to `<root>/bin/kctrl-runc` (replacing an older copy atomically)
/// and returns its path.
pub(crate) fn install(root: &Path) -> Result<PathBuf> {
    let me = std::env::current_exe().context("locating the xtask binary")?;
    let dest = root.join("bin").join(WRAPPER_NAME);
    let tmp = root.join("bin").join(format!(".{WRAPPER_NAME}.tmp"));
    std::fs::copy(&me, &tmp)
        .with_context(|| format!("copying {} to {}", me.display(), tmp.display()))?;
    std::fs::rename(&tmp, &dest)?;
    Ok(dest)
}

/// Whether this process was started as the wrapper.
pub(crate) fn invoked_as_wrapper() -> bool {
    std::env::args_os()
        .next()
        .and_then(|a| Path::new(&a).file_name().map(|n| n == WRAPPER_NAME))
        .unwrap_or(false)
}

/// The runc to become: `$KCTRL_REAL_RUNC`, else Debian's, else the first on PATH.
fn real_runc() -> PathBuf {
    if let Some(p) = std::env::var_os("KCTRL_REAL_RUNC") {
        return PathBuf::from(p);
    }
    ["/usr/sbin/runc", "/usr/bin/runc", "/usr/local/sbin/runc"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
        .unwrap_or_else(|| PathBuf::from("runc"))
}

/// The runc subcommand and the spec file it reads, from runc's arguments: `create`/`run` read
/// `<bundle>/config.json` (`--bundle`/`-b`, default the working directory), `exec` reads its
/// `--process`/`-p` file (none: the process comes from flags, nothing to edit).
pub(crate) fn spec_file(args: &[String], cwd: &Path) -> Option<PathBuf> {
    let value_of = |long: &str, short: &str| -> Option<String> {
        let mut it = args.iter();
        while let Some(a) = it.next() {
            if a == long || a == short {
                return it.next().cloned();
            }
            if let Some(v) = a.strip_prefix(&format!("{long}=")) {
                return Some(v.to_owned());
            }
        }
        None
    };
    // runc's global flags with a value (the subcommand is the first other bare word).
    const GLOBAL_WITH_VALUE: &[&str] = &["--root", "--log", "--log-format", "--criu", "--rootless"];
    let mut sub = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if GLOBAL_WITH_VALUE.contains(&a.as_str()) {
            it.next();
        } else if !a.starts_with('-') {
            sub = Some(a.as_str());
            break;
        }
    }
    match sub? {
        "create" | "run" => {
            let bundle = value_of("--bundle", "-b").map(PathBuf::from);
            Some(
                bundle
                    .unwrap_or_else(|| cwd.to_path_buf())
                    .join("config.json"),
            )
        }
        "exec" => value_of("--process", "-p").map(PathBuf::from),
        _ => None,
    }
}

/// Removes [`DROPPED`] from every capability list of a process object; returns whether it
/// changed anything.
pub(crate) fn drop_capability(process: &mut serde_json::Value) -> bool {
    let Some(caps) = process
        .get_mut("capabilities")
        .and_then(|c| c.as_object_mut())
    else {
        return false;
    };
    let mut changed = false;
    for list in caps.values_mut() {
        if let Some(items) = list.as_array_mut() {
            let before = items.len();
            items.retain(|c| c.as_str() != Some(DROPPED));
            changed |= items.len() != before;
        }
    }
    changed
}

/// Edits the spec file in place: a bundle's `config.json` holds the process under `process`,
/// an exec's process file is the process itself.
fn edit(path: &Path) -> Result<()> {
    let text = std::fs::read(path)?;
    let mut spec: serde_json::Value = serde_json::from_slice(&text)?;
    let changed = if spec.get("process").is_some() {
        drop_capability(spec.get_mut("process").expect("checked"))
    } else {
        drop_capability(&mut spec)
    };
    if changed {
        std::fs::write(path, serde_json::to_vec(&spec)?)?;
    }
    Ok(())
}

/// The wrapper's main: edit the spec, then exec the real runc with the same arguments. A spec
/// that cannot be edited is left as it is (runc then reports its own error).
pub(crate) fn main() -> ! {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
    if let Some(file) = spec_file(&args, &cwd)
        && let Err(e) = edit(&file)
    {
        eprintln!("{WRAPPER_NAME}: leaving {} as it is: {e:#}", file.display());
    }
    let err = Command::new(real_runc()).args(&args).exec();
    eprintln!("{WRAPPER_NAME}: cannot run runc: {err}");
    std::process::exit(127)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_owned).collect()
    }

    #[test]
    fn finds_the_spec_of_create_run_and_exec() {
        let cwd = Path::new("/work");
        assert_eq!(
            spec_file(
                &argv(
                    "--root /run/r --log /l.json --log-format json create --bundle /b/x --pid-file p id"
                ),
                cwd
            ),
            Some(PathBuf::from("/b/x/config.json"))
        );
        assert_eq!(
            spec_file(&argv("--systemd-cgroup run -d id"), cwd),
            Some(PathBuf::from("/work/config.json"))
        );
        assert_eq!(
            spec_file(&argv("create --bundle=/b id"), cwd),
            Some(PathBuf::from("/b/config.json"))
        );
        assert_eq!(
            spec_file(
                &argv("--root /r exec --process /tmp/p.json --detach id"),
                cwd
            ),
            Some(PathBuf::from("/tmp/p.json"))
        );
        assert_eq!(spec_file(&argv("--root /r exec id ls"), cwd), None);
        assert_eq!(spec_file(&argv("--root /r start id"), cwd), None);
        assert_eq!(spec_file(&argv("--root /r kill id 9"), cwd), None);
    }

    #[test]
    fn drops_only_the_missing_capability_from_every_set() {
        let mut process = serde_json::json!({
            "args": ["/sbin/init"],
            "capabilities": {
                "bounding": ["CAP_CHOWN", "CAP_SYS_RESOURCE", "CAP_SYS_ADMIN"],
                "effective": ["CAP_SYS_RESOURCE"],
                "permitted": ["CAP_SYS_ADMIN", "CAP_SYS_RESOURCE"],
                "inheritable": []
            }
        });
        assert!(drop_capability(&mut process));
        assert_eq!(
            process["capabilities"]["bounding"],
            serde_json::json!(["CAP_CHOWN", "CAP_SYS_ADMIN"])
        );
        assert_eq!(process["capabilities"]["effective"], serde_json::json!([]));
        assert_eq!(
            process["capabilities"]["permitted"],
            serde_json::json!(["CAP_SYS_ADMIN"])
        );
        assert!(!drop_capability(&mut process), "nothing left to drop");
    }

    #[test]
    fn edits_a_bundle_config_and_an_exec_process_file() {
        let dir = std::env::temp_dir().join(format!("kctrl-runc-wrapper-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let config = dir.join("config.json");
        std::fs::write(
            &config,
            r#"{"ociVersion":"1.0.2","process":{"capabilities":{"bounding":["CAP_SYS_RESOURCE","CAP_KILL"]}}}"#,
        )
        .unwrap();
        edit(&config).unwrap();
        let v: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&config).unwrap()).unwrap();
        assert_eq!(
            v["process"]["capabilities"]["bounding"],
            serde_json::json!(["CAP_KILL"])
        );
        assert_eq!(v["ociVersion"], "1.0.2");
        let proc_file = dir.join("process.json");
        std::fs::write(
            &proc_file,
            r#"{"args":["sh"],"capabilities":{"effective":["CAP_SYS_RESOURCE"]}}"#,
        )
        .unwrap();
        edit(&proc_file).unwrap();
        let v: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&proc_file).unwrap()).unwrap();
        assert_eq!(v["capabilities"]["effective"], serde_json::json!([]));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

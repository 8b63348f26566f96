//! deploy/'s RBAC for our controller's identity.

use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result, bail};

/// The objects of `deploy/` that give the controller's identity its permissions.
pub const DEPLOY_RBAC: &[&str] = &[
    "00-serviceaccount.yaml",
    "01-clusterrole.yaml",
    "02-clusterrolebinding.yaml",
    "03-role-leader-election.yaml",
    "04-rolebinding-leader-election.yaml",
    "06-clusterrolebinding-auth-delegator.yaml",
    "07-rolebinding-authentication-reader.yaml",
];

/// The repository's deploy/ directory (this crate is xtask/contender).
pub fn deploy_dir() -> std::path::PathBuf {
    let manifest_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest_dir
        .ancestors()
        .nth(2)
        .unwrap_or(manifest_dir)
        .join("deploy")
}

/// `kubectl apply` of [`DEPLOY_RBAC`] as the admin.
pub fn grant_deploy_rbac(kubectl: &Path, admin_kubeconfig: &Path) -> Result<()> {
    let deploy = deploy_dir();
    let mut argv = vec![
        kubectl.display().to_string(),
        "--kubeconfig".to_owned(),
        admin_kubeconfig.display().to_string(),
        "apply".to_owned(),
    ];
    for file in DEPLOY_RBAC {
        argv.push("-f".to_owned());
        argv.push(deploy.join(file).display().to_string());
    }
    eprintln!("==> granting the controller identity deploy/'s RBAC");
    run_command(&argv)
}

/// The sharded variant's files in deploy/sharded/, in the order they must be applied (the
/// member Leases' namespace before its Role).
pub const SHARDED_RBAC: &[&str] = &[
    "namespace.yaml",
    "role-shard-members.yaml",
    "rolebinding-shard-members.yaml",
];

/// [`grant_deploy_rbac`], then `kubectl apply` of [`SHARDED_RBAC`]: what a replica run with
/// `--shard-by` needs.
pub fn grant_sharded_rbac(kubectl: &Path, admin_kubeconfig: &Path) -> Result<()> {
    grant_deploy_rbac(kubectl, admin_kubeconfig)?;
    let sharded = deploy_dir().join("sharded");
    let mut argv = vec![
        kubectl.display().to_string(),
        "--kubeconfig".to_owned(),
        admin_kubeconfig.display().to_string(),
        "apply".to_owned(),
    ];
    for file in SHARDED_RBAC {
        argv.push("-f".to_owned());
        argv.push(sharded.join(file).display().to_string());
    }
    run_command(&argv)
}

/// Runs `argv` (program first), announced as `==> argv…`, its output passed through; fails
/// unless it exits 0.
pub fn run_command(argv: &[String]) -> Result<()> {
    eprintln!("==> {}", argv.join(" "));
    let (program, args) = argv.split_first().context("empty command")?;
    let status = Command::new(program)
        .args(args)
        .status()
        .with_context(|| format!("running {program}"))?;
    if !status.success() {
        bail!("{} failed ({status})", argv.join(" "));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_rbac_file_exists() {
        for file in DEPLOY_RBAC {
            assert!(deploy_dir().join(file).is_file(), "{file}");
        }
    }
}

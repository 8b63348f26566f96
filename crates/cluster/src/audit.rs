//! kube-apiserver's audit log on a local plane: a policy file and a log of JSON lines, one
//! event per request the policy selects, turned on through
//! [`UpOptions::apiserver_args`](crate::plane::UpOptions::apiserver_args).
//!
//! ```no_run
//! use kctrl_cluster::audit::{AuditLog, controller_writes_policy};
//! # fn demo(mut opts: kctrl_cluster::plane::UpOptions) -> anyhow::Result<()> {
//! let audit = AuditLog::new("target/chaos/sharded/audit");
//! audit.prepare(&controller_writes_policy("kube-system"))?;
//! opts.apiserver_args.extend(audit.apiserver_args());
//! let cluster = kctrl_cluster::plane::ensure_up(&opts)?;
//! // … later: every event so far.
//! let log = std::fs::read_to_string(audit.log_path())?;
//! # Ok(()) }
//! ```
//!
//! The log is written synchronously by the apiserver (the file backend's blocking mode) and
//! never rotated, so an event is in the file once the request's answer has been sent. An
//! apiserver restarted with the same flags appends to it.

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

/// Where one plane's audit policy and log live.
#[derive(Clone, Debug)]
pub struct AuditLog {
    dir: PathBuf,
}

impl AuditLog {
    /// The policy and log in `dir` (`policy.yaml`, `audit.log`).
    pub fn new(dir: impl Into<PathBuf>) -> AuditLog {
        AuditLog { dir: dir.into() }
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The policy file kube-apiserver reads.
    pub fn policy_path(&self) -> PathBuf {
        self.dir.join("policy.yaml")
    }

    /// The log kube-apiserver writes: one JSON event per line.
    pub fn log_path(&self) -> PathBuf {
        self.dir.join("audit.log")
    }

    /// Creates the directory, writes `policy` and removes the log of an earlier run.
    pub fn prepare(&self, policy: &str) -> Result<()> {
        fs::create_dir_all(&self.dir)
            .with_context(|| format!("creating {}", self.dir.display()))?;
        let policy_path = self.policy_path();
        fs::write(&policy_path, policy)
            .with_context(|| format!("writing {}", policy_path.display()))?;
        let log = self.log_path();
        match fs::remove_file(&log) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(anyhow::Error::new(e).context(format!("removing {}", log.display()))),
        }
    }

    /// The kube-apiserver flags: the policy, the log file, JSON, no rotation. The paths are
    /// made absolute: the apiserver does not run in the caller's directory.
    pub fn apiserver_args(&self) -> Vec<String> {
        let absolute = |p: PathBuf| {
            if p.is_absolute() {
                p
            } else {
                std::env::current_dir().map(|d| d.join(&p)).unwrap_or(p)
            }
        };
        vec![
            format!(
                "--audit-policy-file={}",
                absolute(self.policy_path()).display()
            ),
            format!("--audit-log-path={}", absolute(self.log_path()).display()),
            "--audit-log-format=json".to_owned(),
            "--audit-log-maxsize=0".to_owned(),
        ]
    }
}

/// The policy of a check of controller writes: every write (create, update, patch, delete)
/// of Deployments, ReplicaSets (and their status and scale) and Pods at `Metadata` level
/// (who, what, when, the answer's code), every write of a Lease in `lease_namespace` at
/// `RequestResponse` level (the Lease as written, so shard claims can be read back), once
/// each (at `ResponseComplete`); nothing else.
pub fn controller_writes_policy(lease_namespace: &str) -> String {
    format!(
        "apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [\"RequestReceived\", \"ResponseStarted\"]
rules:
- level: RequestResponse
  verbs: [\"create\", \"update\", \"patch\", \"delete\"]
  namespaces: [\"{lease_namespace}\"]
  resources:
  - group: coordination.k8s.io
    resources: [\"leases\"]
- level: Metadata
  verbs: [\"create\", \"update\", \"patch\", \"delete\", \"deletecollection\"]
  resources:
  - group: apps
    resources: [\"deployments\", \"deployments/status\", \"deployments/scale\", \"replicasets\", \
                \"replicasets/status\", \"replicasets/scale\"]
  - group: \"\"
    resources: [\"pods\"]
- level: None
"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_policy_logs_lease_bodies_and_controller_writes() {
        let policy = controller_writes_policy("kube-system");
        let doc: serde_json::Value = serde_yaml_ng::from_str(&policy).unwrap();
        let rules = doc["rules"].as_array().unwrap();
        assert_eq!(rules.len(), 3);
        assert_eq!(rules[0]["level"], "RequestResponse");
        assert_eq!(rules[0]["namespaces"][0], "kube-system");
        assert_eq!(rules[0]["resources"][0]["group"], "coordination.k8s.io");
        assert_eq!(rules[1]["level"], "Metadata");
        let apps = rules[1]["resources"][0]["resources"].as_array().unwrap();
        assert!(apps.iter().any(|r| r == "deployments/status"), "{apps:?}");
        assert!(apps.iter().any(|r| r == "replicasets"), "{apps:?}");
        assert_eq!(rules[1]["resources"][1]["resources"][0], "pods");
        assert_eq!(rules[2]["level"], "None");
        assert_eq!(doc["omitStages"].as_array().unwrap().len(), 2);
    }

    #[test]
    fn prepare_writes_the_policy_and_forgets_the_old_log() {
        let dir = std::env::temp_dir().join(format!("kctrl-audit-test-{}", std::process::id()));
        let audit = AuditLog::new(&dir);
        audit.prepare("policy one").unwrap();
        fs::write(audit.log_path(), "old\n").unwrap();
        audit.prepare("policy two").unwrap();
        assert_eq!(
            fs::read_to_string(audit.policy_path()).unwrap(),
            "policy two"
        );
        assert!(!audit.log_path().exists());
        let args = audit.apiserver_args();
        assert!(args[0].starts_with("--audit-policy-file=/"), "{args:?}");
        assert!(args[1].ends_with("audit.log"), "{args:?}");
        fs::remove_dir_all(&dir).unwrap();
    }
}

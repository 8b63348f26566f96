//! `cargo xtask kind up|down`: a kind cluster on our node image, without a registry.
//!
//! The cluster is the one `kctrl_cluster::kind::KindCluster` describes (one control-plane
//! node, two workers, kube-controller-manager without its Deployment controller) plus what the
//! offline node image needs:
//! * kind's default CNI (kindnetd) is off (`disableDefaultCNI`: its image cannot be built from
//!   the Go module proxy). Pod networking is static instead, set up once the nodes have their
//!   pod CIDRs: each node gets a `ptp` + `host-local` CNI configuration for its own CIDR (the
//!   plugins come from Debian's package in the node image) and a route to every other node's
//!   CIDR through that node's address on kind's network;
//! * kubelet accepts the host's cgroup v1 (`failCgroupV1: false`).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use kctrl_cluster::kind::{ApiServerVolume, KindCluster};
use kctrl_cluster::toolchain::{Cache, fmt_duration};
use kctrl_cluster::versions::{Binary, Release};

use super::steps::{self, run_logged};

/// Every cluster name of ours starts with this.
pub(crate) const NAME_PREFIX: &str = "kctrl-kind-";

/// A kind cluster of ours.
#[derive(Clone)]
pub(crate) struct Cluster {
    /// kind's cluster name.
    pub(crate) name: String,
    /// The kind binary.
    pub(crate) kind: PathBuf,
    /// Its admin kubeconfig (written by [`create`]).
    pub(crate) kubeconfig: PathBuf,
    /// The cached kubectl of the release.
    pub(crate) kubectl: PathBuf,
    /// Where its configuration and logs are written.
    pub(crate) dir: PathBuf,
}

/// Where the control-plane node (and its kube-apiserver) sees the audit policy.
const AUDIT_POLICY_DIR: &str = "/etc/kubernetes/kctrl-audit";
/// Where kube-apiserver writes the audit log, on the control-plane node.
const AUDIT_LOG_DIR: &str = "/var/log/kubernetes/kctrl-audit";

/// The audit policy of our clusters: the controller's service account's requests and every
/// request on its Lease (including those that fail authentication and so have no user) at
/// `Metadata` level, once each; nothing else, so the log stays small during the suite.
pub(crate) fn audit_policy() -> String {
    format!(
        "apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [\"RequestReceived\"]
rules:
- level: Metadata
  users: [\"system:serviceaccount:{ns}:{name}\"]
- level: Metadata
  namespaces: [\"{ns}\"]
  resources:
  - group: coordination.k8s.io
    resources: [\"leases\"]
    resourceNames: [\"{name}\"]
- level: None
",
        ns = kctrl_cluster::kind::CONTROLLER_NAMESPACE,
        name = kctrl_cluster::kind::CONTROLLER_NAME,
    )
}

/// The kind configuration: `KindCluster`'s with our node image, kube-apiserver's feature
/// gates `gates` (see `KindCluster::with_feature_gates`), no default CNI, a kubelet that runs
/// on cgroup v1, and kube-apiserver auditing by [`audit_policy`] (the policy file in
/// `audit_dir` on the host, mounted into the control-plane node).
pub(crate) fn config(
    name: &str,
    image: &str,
    release: &Release,
    gates: &[String],
    audit_dir: &Path,
) -> Result<String> {
    let mut cluster = KindCluster::new(name, release).with_feature_gates(gates)?;
    cluster.image = image.to_owned();
    cluster.apiserver_args.extend([
        (
            "audit-policy-file".to_owned(),
            format!("{AUDIT_POLICY_DIR}/policy.yaml"),
        ),
        (
            "audit-log-path".to_owned(),
            format!("{AUDIT_LOG_DIR}/audit.log"),
        ),
    ]);
    cluster.apiserver_volumes.extend([
        ApiServerVolume {
            name: "kctrl-audit-policy".to_owned(),
            host_path: AUDIT_POLICY_DIR.to_owned(),
            mount_path: AUDIT_POLICY_DIR.to_owned(),
            read_only: true,
            path_type: "Directory".to_owned(),
        },
        ApiServerVolume {
            name: "kctrl-audit-log".to_owned(),
            host_path: AUDIT_LOG_DIR.to_owned(),
            mount_path: AUDIT_LOG_DIR.to_owned(),
            read_only: false,
            path_type: "DirectoryOrCreate".to_owned(),
        },
    ]);
    let base = cluster.config();
    let with_kubelet = base.replacen(
        "kubeadmConfigPatches:\n",
        "kubeadmConfigPatches:\n- |\n  kind: KubeletConfiguration\n  failCgroupV1: false\n",
        1,
    );
    let with_audit = with_kubelet.replacen(
        &format!("- role: control-plane\n  image: {image}\n"),
        &format!(
            "- role: control-plane\n  image: {image}\n  extraMounts:\n  - hostPath: {}\n    \
             containerPath: {AUDIT_POLICY_DIR}\n    readOnly: true\n",
            audit_dir.display()
        ),
        1,
    );
    Ok(with_audit.replacen(
        "nodes:\n",
        "networking:\n  disableDefaultCNI: true\nnodes:\n",
        1,
    ))
}

impl Cluster {
    /// The cluster `name` of `release`, its files under `dir`.
    pub(crate) fn new(
        name: &str,
        kind: PathBuf,
        release: &'static Release,
        dir: &Path,
    ) -> Result<Cluster> {
        if !name.starts_with(NAME_PREFIX) {
            bail!("kind cluster names of ours start with {NAME_PREFIX:?} (got {name:?})");
        }
        Ok(Cluster {
            name: name.to_owned(),
            kind,
            kubeconfig: dir.join("kubeconfig"),
            kubectl: Cache::locate(release)?.binary(Binary::Kubectl),
            dir: dir.to_path_buf(),
        })
    }

    fn kind_args(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(&self.kind);
        cmd.args(args);
        cmd
    }

    /// Whether kind knows a cluster of this name.
    pub(crate) fn exists(&self) -> Result<bool> {
        let out = self
            .kind_args(&["get", "clusters"])
            .output()
            .context("kind get clusters")?;
        Ok(String::from_utf8_lossy(&out.stdout)
            .lines()
            .any(|l| l.trim() == self.name))
    }

    /// `kubectl --kubeconfig <ours> args…`, output returned.
    pub(crate) fn kubectl(&self, args: &[&str]) -> Result<String> {
        let kubectl = self.kubectl.display().to_string();
        let kubeconfig = format!("--kubeconfig={}", self.kubeconfig.display());
        let mut argv = vec![kubectl.as_str(), kubeconfig.as_str()];
        argv.extend_from_slice(args);
        steps::output(&argv)
    }

    /// Creates the cluster on `image`, kube-apiserver with the feature gates `gates` (see
    /// [`config`]), and sets up pod networking; on failure deletes whatever was created.
    pub(crate) fn create(&self, image: &str, release: &Release, gates: &[String]) -> Result<()> {
        if self.exists()? {
            bail!(
                "a kind cluster named {} already exists: delete it (`cargo xtask kind down --name {}`) \
                 or pick another --name",
                self.name,
                self.name
            );
        }
        fs::create_dir_all(&self.dir)?;
        let config_path = self.dir.join("kind.yaml");
        let audit_dir = self.dir.join("audit");
        fs::create_dir_all(&audit_dir)?;
        fs::write(audit_dir.join("policy.yaml"), audit_policy())?;
        let audit_dir = fs::canonicalize(&audit_dir)?;
        fs::write(
            &config_path,
            config(&self.name, image, release, gates, &audit_dir)?,
        )?;
        let started = Instant::now();
        eprintln!(
            "creating kind cluster {} (3 nodes, image {image})",
            self.name
        );
        let mut cmd = self.kind_args(&["create", "cluster", "--name", &self.name, "--config"]);
        cmd.arg(&config_path)
            .arg("--kubeconfig")
            .arg(&self.kubeconfig);
        let result = run_logged(
            cmd,
            &self.dir.join("kind-create.log"),
            "kind create cluster",
        )
        .and_then(|_| {
            eprintln!(
                "  nodes up in {}; pod networking",
                fmt_duration(started.elapsed())
            );
            self.pod_network()
        })
        .and_then(|_| {
            self.kubectl(&[
                "wait",
                "--for=condition=Ready",
                "node",
                "--all",
                "--timeout=300s",
            ])
            .map(|_| ())
        });
        if let Err(e) = result {
            eprintln!("cluster creation failed; deleting what was created");
            let _ = self.delete();
            return Err(e);
        }
        eprintln!(
            "cluster {} ready in {}",
            self.name,
            fmt_duration(started.elapsed())
        );
        Ok(())
    }

    /// kube-apiserver's audit log (JSON lines, one event per request of [`audit_policy`]),
    /// read inside the control-plane node.
    pub(crate) fn audit_log(&self) -> Result<String> {
        let node = format!("{}-control-plane", self.name);
        let path = format!("{AUDIT_LOG_DIR}/audit.log");
        steps::output(&["docker", "exec", &node, "cat", &path])
            .with_context(|| format!("reading the audit log {path} on {node}"))
    }

    /// The static pod network (see the module docs).
    fn pod_network(&self) -> Result<()> {
        let out = self
            .kind_args(&["get", "nodes", "--name", &self.name])
            .output()?;
        let nodes: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(str::to_owned)
            .collect();
        if nodes.is_empty() {
            bail!("kind lists no nodes of {}", self.name);
        }
        let mut routes = Vec::new();
        for node in &nodes {
            // kube-controller-manager's node IPAM assigns the CIDR shortly after the join.
            let deadline = Instant::now() + std::time::Duration::from_secs(120);
            let cidr = loop {
                let cidr =
                    self.kubectl(&["get", "node", node, "-o", "jsonpath={.spec.podCIDR}"])?;
                if !cidr.trim().is_empty() || Instant::now() > deadline {
                    break cidr;
                }
                std::thread::sleep(std::time::Duration::from_secs(1));
            };
            let ip = steps::output(&[
                "docker",
                "inspect",
                "-f",
                "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}",
                node,
            ])?;
            let (cidr, ip) = (cidr.trim().to_owned(), ip.trim().to_owned());
            if cidr.is_empty() || ip.is_empty() {
                bail!("node {node} has no pod CIDR ({cidr:?}) or address ({ip:?})");
            }
            routes.push((node.clone(), cidr, ip));
        }
        for (node, cidr, _) in &routes {
            let mut cmd = Command::new("docker");
            cmd.args([
                "exec",
                "-i",
                node,
                "sh",
                "-c",
                "mkdir -p /etc/cni/net.d && cat > /etc/cni/net.d/10-kctrl.conflist",
            ])
            .stdin(Stdio::piped());
            let mut child = cmd.spawn()?;
            {
                use std::io::Write;
                let mut stdin = child.stdin.take().context("stdin")?;
                stdin.write_all(cni_config(cidr).as_bytes())?;
            }
            if !child.wait()?.success() {
                bail!("writing the CNI configuration of {node} failed");
            }
            steps::run(&[
                "docker",
                "exec",
                node,
                "sysctl",
                "-qw",
                "net.ipv4.ip_forward=1",
            ])?;
            for (other, other_cidr, other_ip) in &routes {
                if other != node {
                    steps::run(&[
                        "docker", "exec", node, "ip", "route", "replace", other_cidr, "via",
                        other_ip,
                    ])?;
                }
            }
        }
        Ok(())
    }

    /// Deletes the cluster (kind removes its containers; its network is removed too when no
    /// other kind cluster uses it).
    pub(crate) fn delete(&self) -> Result<()> {
        let status = self
            .kind_args(&["delete", "cluster", "--name", &self.name])
            .status()
            .context("kind delete cluster")?;
        if !status.success() {
            bail!("kind delete cluster --name {} failed ({status})", self.name);
        }
        let others = self.kind_args(&["get", "clusters"]).output()?;
        if String::from_utf8_lossy(&others.stdout).trim().is_empty() {
            let _ = Command::new("docker")
                .args(["network", "rm", "kind"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
        Ok(())
    }
}

/// The CNI configuration of a node whose pods get addresses from `cidr`.
pub(crate) fn cni_config(cidr: &str) -> String {
    serde_json::json!({
        "cniVersion": "0.4.0",
        "name": "kctrl-static",
        "plugins": [
            {
                "type": "ptp",
                "ipMasq": false,
                "mtu": 1500,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{ "subnet": cidr }]],
                    "routes": [{ "dst": "0.0.0.0/0" }]
                }
            },
            { "type": "portmap", "capabilities": { "portMappings": true } }
        ]
    })
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use kctrl_cluster::versions::DEFAULT_RELEASE;

    fn gates() -> Vec<String> {
        kctrl_cluster::kind::KIND_FEATURE_GATES
            .iter()
            .map(|g| (*g).to_owned())
            .collect()
    }

    fn test_config(gates: &[String]) -> String {
        config(
            "kctrl-kind-t",
            "kctrl/kind-node:v1.37.2-abc",
            DEFAULT_RELEASE,
            gates,
            Path::new("/work/kind/audit"),
        )
        .unwrap()
    }

    #[test]
    fn the_apiserver_runs_with_the_feature_gates_beside_its_audit_flags() {
        let c = test_config(&gates());
        let v: serde_json::Value = serde_yaml_ng::from_str(&c).unwrap();
        let patch: serde_json::Value =
            serde_yaml_ng::from_str(v["kubeadmConfigPatches"][1].as_str().unwrap()).unwrap();
        assert_eq!(patch["kind"], "ClusterConfiguration", "{c}");
        let args = &patch["apiServer"]["extraArgs"];
        assert_eq!(args["feature-gates"], "ShardedListAndWatch=true", "{c}");
        assert_eq!(
            args["audit-policy-file"],
            "/etc/kubernetes/kctrl-audit/policy.yaml"
        );
        assert_eq!(
            patch["apiServer"]["extraVolumes"].as_array().unwrap().len(),
            2
        );
        // Without gates the flag is gone and the audit stays; a malformed gate is refused.
        let bare = test_config(&[]);
        assert!(!bare.contains("feature-gates"), "{bare}");
        assert!(bare.contains("audit-log-path"), "{bare}");
        let err = config(
            "kctrl-kind-t",
            "img",
            DEFAULT_RELEASE,
            &["ShardedListAndWatch".to_owned()],
            Path::new("/a"),
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("has no value"), "{err}");
    }

    #[test]
    fn the_config_runs_our_image_without_kindnetd_on_cgroup_v1() {
        let c = test_config(&gates());
        assert_eq!(
            c.matches("image: kctrl/kind-node:v1.37.2-abc\n").count(),
            3,
            "{c}"
        );
        assert!(
            c.contains("networking:\n  disableDefaultCNI: true\nnodes:\n"),
            "{c}"
        );
        assert!(c.contains("- |\n  kind: KubeletConfiguration\n  failCgroupV1: false\n- |\n  kind: ClusterConfiguration"), "{c}");
        assert!(c.contains("-deployment-controller"), "{c}");
    }

    #[test]
    fn the_apiserver_audits_the_controller_with_the_policy_mounted_from_the_host() {
        let c = test_config(&gates());
        // Only the control-plane node mounts the policy.
        assert_eq!(c.matches("extraMounts:").count(), 1, "{c}");
        assert!(
            c.contains(
                "- role: control-plane\n  image: kctrl/kind-node:v1.37.2-abc\n  extraMounts:\n  \
                 - hostPath: /work/kind/audit\n    containerPath: /etc/kubernetes/kctrl-audit\n"
            ),
            "{c}"
        );
        // The apiserver flags sit in the same ClusterConfiguration patch as the controllers.
        let cluster_configuration = c.split("kind: ClusterConfiguration\n").nth(1).unwrap();
        let cluster_configuration = cluster_configuration.split("\n- |").next().unwrap();
        for needle in [
            "audit-policy-file: \"/etc/kubernetes/kctrl-audit/policy.yaml\"",
            "audit-log-path: \"/var/log/kubernetes/kctrl-audit/audit.log\"",
            "feature-gates: \"ShardedListAndWatch=true\"",
            "controllers: ",
        ] {
            assert!(cluster_configuration.contains(needle), "{needle}: {c}");
        }
        // And the YAML is well formed: kind parses it, so must we.
        let v: serde_json::Value = serde_yaml_ng::from_str(&c).unwrap();
        assert_eq!(v["nodes"][0]["extraMounts"][0]["readOnly"], true);
    }

    #[test]
    fn the_audit_policy_logs_the_controllers_account_and_its_lease_only() {
        let p = audit_policy();
        assert!(
            p.contains(
                "users: [\"system:serviceaccount:kube-system:kctrl-deployment-controller\"]"
            ),
            "{p}"
        );
        assert!(
            p.contains("resourceNames: [\"kctrl-deployment-controller\"]"),
            "{p}"
        );
        assert!(p.trim_end().ends_with("- level: None"), "{p}");
    }

    #[test]
    fn each_node_allocates_from_its_own_cidr() {
        let v: serde_json::Value = serde_json::from_str(&cni_config("10.244.1.0/24")).unwrap();
        assert_eq!(
            v["plugins"][0]["ipam"]["ranges"][0][0]["subnet"],
            "10.244.1.0/24"
        );
        assert_eq!(v["plugins"][0]["type"], "ptp");
    }

    #[test]
    fn names_outside_our_prefix_are_refused() {
        let err = Cluster::new(
            "prod",
            PathBuf::from("kind"),
            DEFAULT_RELEASE,
            Path::new("/tmp"),
        )
        .err()
        .unwrap()
        .to_string();
        assert!(err.contains("kctrl-kind-"), "{err}");
    }
}

//! The kind path of `cargo xtask e2e --cluster kind` (users' machines with Docker or Podman; it
//! cannot run on the project's container-less machines): the cluster configuration, the
//! commands to create it, fetch its kubeconfig and delete it, and — for the in-cluster
//! controller — the commands that build our image, load it into the nodes, apply `deploy/`,
//! bootstrap the controller and hand its lease over to the Deployment's own pods.
//!
//! Facts the configuration relies on:
//! * The node image follows the selected release (`--kube-version`): for each supported minor,
//!   the default node image of the first kind release that defaults to it, pinned by digest
//!   (`Release::kind_node_image`: kind v0.32.0's `kindest/node:v1.36.1` for 1.36, kind
//!   v0.33.0's `kindest/node:v1.37.0` for 1.37; kind publishes node images for some patches
//!   only). For 1.36 and later nodes kind drives kubeadm with the v1beta4 API, where a
//!   component's `extraArgs` is a *list* of `{name, value}`. kind (v0.32.0+) converts the
//!   map-style `extraArgs` of a patch that names no `apiVersion` into that list, so the patch
//!   below deliberately omits `apiVersion` and stays valid for v1beta3 (map) as well.
//! * kube-apiserver runs with the `ShardedListAndWatch` feature gate on ([`KIND_FEATURE_GATES`],
//!   as `cargo xtask cluster up --feature-gates` does on the local plane), so the sharded
//!   variant of `deploy/sharded/` gets its lists and watches filtered by the server. kubeadm
//!   passes `extraArgs` through as flags; the gates go to kube-apiserver only, since another
//!   component refuses a gate it does not know.
//! * kubeadm starts kube-controller-manager with `--controllers=*,bootstrapsigner,tokencleaner`;
//!   an `extraArgs` entry replaces that flag as a whole, so both extra controllers are repeated
//!   and only the Deployment controller (canonical name `deployment-controller`) is removed.
//! * `kind load docker-image` always shells out to the `docker` CLI; with Podman the image is
//!   saved to an archive and loaded with `kind load image-archive`. Podman names a local build
//!   `localhost/<name>` unless the name carries a registry, while the nodes' containerd resolves
//!   `kctrl/deployment-controller:dev` as `docker.io/kctrl/deployment-controller:dev`, so the
//!   Podman build is tagged with that full name.
//!
//! Why a bootstrap Pod: with kube-controller-manager's Deployment controller disabled, nothing
//! creates the ReplicaSet of *our* Deployment until our controller runs. `deploy/bootstrap/`
//! holds a bare Pod (no controller owns it) running the same container with the same lease: it
//! becomes leader, creates the ReplicaSet of `kube-system/kctrl-deployment-controller`, and once
//! that Deployment has rolled out it is deleted; a Deployment pod takes the lease over. The
//! lease guarantees that only one of them reconciles at any time.

use std::path::{Path, PathBuf};

use anyhow::Result;

use super::plane::feature_gates_flag;
use super::versions::Release;
/// The controller-manager's `--controllers` value: kubeadm's default minus our controller.
pub const KIND_CONTROLLERS: &str = "*,bootstrapsigner,tokencleaner,-deployment-controller";
/// kube-apiserver's feature gates in the e2e cluster: server-side sharded lists and watches
/// (KEP-5866, alpha in 1.36 and 1.37), which the sharded variant of `deploy/sharded/` uses.
pub const KIND_FEATURE_GATES: &[&str] = &["ShardedListAndWatch=true"];
/// The namespace of the sharded variant's member Leases (`deploy/sharded/namespace.yaml`).
pub const SHARD_LEASE_NAMESPACE: &str = "kctrl-shards";
/// The shard group of `deploy/sharded/` (`--shard-group`), the value of the Leases'
/// [`SHARD_GROUP_LABEL`].
pub const SHARD_GROUP: &str = "deployment-controller";
/// The label naming a member Lease's group.
pub const SHARD_GROUP_LABEL: &str = "shard.kctrl.io/group";
/// The annotation of a member Lease listing the buckets it claims.
pub const SHARD_BUCKETS_ANNOTATION: &str = "shard.kctrl.io/buckets";
/// The sharded variant's manifests, in the order they are applied (the Namespace before what
/// lives in it; the Deployment before its bootstrap Pod).
pub const SHARDED_MANIFESTS: &[&str] = &[
    "deploy/sharded/namespace.yaml",
    "deploy/sharded/role-shard-members.yaml",
    "deploy/sharded/rolebinding-shard-members.yaml",
    "deploy/sharded/deployment.yaml",
    "deploy/sharded/bootstrap-pod.yaml",
];
/// The sharded variant's bootstrap Pod (deleted once its Deployment has rolled out).
pub const SHARDED_BOOTSTRAP_MANIFEST: &str = "deploy/sharded/bootstrap-pod.yaml";

/// The image `deploy/` runs (built from [`CONTAINERFILE`]).
pub const CONTROLLER_IMAGE: &str = "kctrl/deployment-controller:dev";
/// The container recipe, relative to the repository root (the build context).
pub const CONTAINERFILE: &str = "deploy/Containerfile";
/// The recipe's own ignore file (BuildKit finds it by name; Podman is given it explicitly).
pub const CONTAINERFILE_IGNORE: &str = "deploy/Containerfile.dockerignore";
/// The manifests `kubectl apply -f` installs (not recursive: `bootstrap/` is separate).
pub const MANIFEST_DIR: &str = "deploy";
/// The one-off bootstrap Pod (see the module docs).
pub const BOOTSTRAP_DIR: &str = "deploy/bootstrap";
/// Namespace of everything in `deploy/`.
pub const CONTROLLER_NAMESPACE: &str = "kube-system";
/// Name of our Deployment, ServiceAccount and leader-election Lease.
pub const CONTROLLER_NAME: &str = "kctrl-deployment-controller";
/// Name of the bootstrap Pod.
pub const BOOTSTRAP_POD: &str = "kctrl-deployment-controller-bootstrap";
/// Label selector matching the Deployment's pods and the bootstrap Pod (for their logs).
pub const CONTROLLER_POD_SELECTOR: &str = "app.kubernetes.io/name=kctrl-deployment-controller";
/// How long `kubectl rollout status` waits for our Deployment.
pub const ROLLOUT_TIMEOUT: &str = "5m";

/// A kind cluster to create.
#[derive(Clone, Debug)]
pub struct KindCluster {
    /// `kind --name`.
    pub name: String,
    /// Node image.
    pub image: String,
    /// Worker nodes besides the control-plane node.
    pub workers: usize,
    /// kube-apiserver's `--feature-gates` value (`Name=true,Other=false`), checked and
    /// normalised by [`KindCluster::with_feature_gates`]; `None` passes no such flag.
    feature_gates: Option<String>,
    /// Further kube-apiserver flags (name without dashes, value), after the feature gates.
    pub apiserver_args: Vec<(String, String)>,
    /// Host directories of the control-plane node mounted into kube-apiserver's static pod.
    pub apiserver_volumes: Vec<ApiServerVolume>,
}

/// A directory of the control-plane node that kube-apiserver's static pod mounts
/// (kubeadm's `apiServer.extraVolumes`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApiServerVolume {
    /// The volume's name in the pod.
    pub name: String,
    /// The path on the node.
    pub host_path: String,
    /// The path in kube-apiserver's container.
    pub mount_path: String,
    /// Mounted read-only.
    pub read_only: bool,
    /// kubelet's `hostPath` type (`Directory`, `DirectoryOrCreate`, …).
    pub path_type: String,
}

impl KindCluster {
    /// The default e2e cluster: one control plane, two workers, nodes of `release`'s minor,
    /// kube-apiserver with [`KIND_FEATURE_GATES`].
    pub fn new(name: &str, release: &Release) -> KindCluster {
        let gates: Vec<String> = KIND_FEATURE_GATES.iter().map(|g| (*g).to_owned()).collect();
        KindCluster {
            name: name.to_owned(),
            image: release.kind_node_image.to_owned(),
            workers: 2,
            feature_gates: feature_gates_value(&gates).expect("KIND_FEATURE_GATES are well-formed"),
            apiserver_args: Vec::new(),
            apiserver_volumes: Vec::new(),
        }
    }

    /// The same cluster with kube-apiserver's feature gates `gates` instead (each
    /// `Name=true|false`, or several joined with commas, as `cargo xtask cluster up
    /// --feature-gates` takes them; none passes no `--feature-gates`). A malformed entry is an
    /// error naming it.
    pub fn with_feature_gates(mut self, gates: &[String]) -> Result<KindCluster> {
        self.feature_gates = feature_gates_value(gates)?;
        Ok(self)
    }

    /// kube-apiserver's `--feature-gates` value, if any.
    pub fn feature_gates(&self) -> Option<&str> {
        self.feature_gates.as_deref()
    }

    /// The `kind.x-k8s.io/v1alpha4` Cluster configuration.
    pub fn config(&self) -> String {
        let mut nodes = format!("- role: control-plane\n  image: {}\n", self.image);
        for _ in 0..self.workers {
            nodes.push_str(&format!("- role: worker\n  image: {}\n", self.image));
        }
        format!(
            "kind: Cluster
apiVersion: kind.x-k8s.io/v1alpha4
name: {name}
kubeadmConfigPatches:
- |
  kind: ClusterConfiguration
{apiserver}  controllerManager:
    extraArgs:
      controllers: \"{KIND_CONTROLLERS}\"
nodes:
{nodes}",
            name = self.name,
            apiserver = self.apiserver_patch(),
        )
    }

    /// The `apiServer` part of the ClusterConfiguration patch (indented for it), empty when
    /// kube-apiserver keeps kubeadm's flags and volumes.
    fn apiserver_patch(&self) -> String {
        let args: Vec<(&str, &str)> = self
            .feature_gates
            .iter()
            .map(|g| ("feature-gates", g.as_str()))
            .chain(
                self.apiserver_args
                    .iter()
                    .map(|(n, v)| (n.as_str(), v.as_str())),
            )
            .collect();
        if args.is_empty() && self.apiserver_volumes.is_empty() {
            return String::new();
        }
        let mut out = "  apiServer:\n".to_owned();
        if !args.is_empty() {
            out.push_str("    extraArgs:\n");
            for (name, value) in args {
                out.push_str(&format!("      {name}: {}\n", yaml_string(value)));
            }
        }
        if !self.apiserver_volumes.is_empty() {
            out.push_str("    extraVolumes:\n");
            for v in &self.apiserver_volumes {
                out.push_str(&format!(
                    "    - name: {}\n      hostPath: {}\n      mountPath: {}\n",
                    yaml_string(&v.name),
                    yaml_string(&v.host_path),
                    yaml_string(&v.mount_path)
                ));
                if v.read_only {
                    out.push_str("      readOnly: true\n");
                }
                out.push_str(&format!("      pathType: {}\n", yaml_string(&v.path_type)));
            }
        }
        out
    }

    /// `kind create cluster …` (waits for the control plane to be Ready).
    pub fn create_command(&self, config_path: &Path) -> Vec<String> {
        argv(&[
            "kind",
            "create",
            "cluster",
            "--name",
            &self.name,
            "--config",
            &config_path.display().to_string(),
            "--wait",
            "5m",
        ])
    }

    /// `kind get kubeconfig …` (prints the admin kubeconfig on stdout).
    pub fn kubeconfig_command(&self) -> Vec<String> {
        argv(&["kind", "get", "kubeconfig", "--name", &self.name])
    }

    /// `kind delete cluster …`.
    pub fn delete_command(&self) -> Vec<String> {
        argv(&["kind", "delete", "cluster", "--name", &self.name])
    }

    /// One e2e run with the in-cluster controller, as lines of a shell script for display
    /// (`cargo xtask cluster kind-plan`): each line is a command's arguments, except lines
    /// whose first element is `#`, which are notes (where the suite runs, what is polled).
    /// The kubeconfig is written next to the configuration; paths are relative to the
    /// repository root. These are the commands `cargo xtask e2e --cluster kind` runs.
    pub fn plan(&self, config_path: &Path) -> Vec<Vec<String>> {
        let kubeconfig = config_path.with_file_name("kubeconfig");
        let work_dir = config_path.parent().unwrap_or(Path::new("")).to_path_buf();
        let ctl = InClusterController::new(self, Engine::Docker, Path::new(""), &work_dir)
            .with_kubeconfig(&kubeconfig);
        let podman = InClusterController::new(self, Engine::Podman, Path::new(""), &work_dir);
        let note = |text: &str| vec!["#".to_owned(), text.to_owned()];
        let mut lines = vec![note("1. build the controller image (Podman: see below)")];
        lines.push(ctl.build_image_command());
        lines.push(note("2. create the cluster and write its kubeconfig"));
        lines.push(self.create_command(config_path));
        let mut kubeconfig_line = self.kubeconfig_command();
        kubeconfig_line.extend([">".to_owned(), kubeconfig.display().to_string()]);
        lines.push(kubeconfig_line);
        lines.push(note("3. load the image into every node"));
        lines.extend(ctl.load_image_commands());
        lines.push(note(
            "4. the e2e targets that must not see a deployment controller run here \
             (cargo test -p kctrl-e2e --lib --test …, KCTRL_E2E_KUBECONFIG=<kubeconfig>)",
        ));
        lines.push(note(
            "5. install the controller, bootstrap it and wait for its rollout",
        ));
        lines.push(ctl.apply_command());
        lines.push(ctl.bootstrap_command());
        lines.push(ctl.rollout_status_command());
        lines.push(ctl.remove_bootstrap_command());
        lines.push(note(
            "6. poll until the lease holder is a pod of the Deployment (<pod name>_<suffix>)",
        ));
        lines.push(ctl.lease_holder_command());
        lines.push(note(
            "7. the e2e targets that need the controller run here \
             (KCTRL_E2E_DEPLOYMENT_CONTROLLER_LOG=<work dir>/deployment-controller.log)",
        ));
        lines.push(note(
            "8. collect the controller's logs into that file, then tear down",
        ));
        let mut logs_line = ctl.logs_command();
        logs_line.extend([">".to_owned(), ctl.log_path().display().to_string()]);
        lines.push(logs_line);
        lines.push(self.delete_command());
        lines.push(note("with Podman, steps 1 and 3 are instead:"));
        for cmd in std::iter::once(podman.build_image_command()).chain(podman.load_image_commands())
        {
            let mut line = vec!["#".to_owned()];
            line.extend(cmd);
            lines.push(line);
        }
        lines
    }
}

/// The container engine that builds our image.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Engine {
    /// Docker (BuildKit reads the recipe's own ignore file).
    Docker,
    /// Podman (kind's `load docker-image` cannot read its images, see the module docs).
    Podman,
}

impl Engine {
    /// The engine's command.
    pub fn program(self) -> &'static str {
        match self {
            Engine::Docker => "docker",
            Engine::Podman => "podman",
        }
    }

    /// The name the image is built under: with Podman, [`CONTROLLER_IMAGE`] qualified with the
    /// registry containerd resolves it to.
    pub fn image_name(self) -> String {
        match self {
            Engine::Docker => CONTROLLER_IMAGE.to_owned(),
            Engine::Podman => format!("docker.io/{CONTROLLER_IMAGE}"),
        }
    }
}

/// Our controller running inside a kind cluster from `deploy/`: the commands of each step.
#[derive(Clone, Debug)]
pub struct InClusterController {
    cluster: String,
    engine: Engine,
    /// The repository root (build context, base of `deploy/`); empty for relative paths.
    root: PathBuf,
    /// Where the image archive (Podman) and the collected logs go.
    work_dir: PathBuf,
    /// The admin kubeconfig kubectl uses; `None` leaves kubectl to its default.
    kubeconfig: Option<PathBuf>,
    /// The kubectl to run.
    kubectl: String,
}

impl InClusterController {
    /// The controller of `cluster`, built with `engine` from the repository at `root`.
    pub fn new(
        cluster: &KindCluster,
        engine: Engine,
        root: &Path,
        work_dir: &Path,
    ) -> InClusterController {
        InClusterController {
            cluster: cluster.name.clone(),
            engine,
            root: root.to_path_buf(),
            work_dir: work_dir.to_path_buf(),
            kubeconfig: None,
            kubectl: "kubectl".to_owned(),
        }
    }

    /// kubectl talks to the cluster through `kubeconfig`.
    pub fn with_kubeconfig(mut self, kubeconfig: &Path) -> InClusterController {
        self.kubeconfig = Some(kubeconfig.to_path_buf());
        self
    }

    /// Runs `kubectl` as `program` (e.g. `$KCTRL_KUBECTL`).
    pub fn with_kubectl(mut self, program: &str) -> InClusterController {
        program.clone_into(&mut self.kubectl);
        self
    }

    fn path(&self, relative: &str) -> String {
        self.root.join(relative).display().to_string()
    }

    /// A directory argument with a trailing `/`, so it reads as a directory.
    fn dir(&self, relative: &str) -> String {
        format!("{}/", self.path(relative))
    }

    /// Where the image is saved for `kind load image-archive` (Podman only).
    pub fn archive_path(&self) -> PathBuf {
        self.work_dir.join("deployment-controller-image.tar")
    }

    /// Where the controller's logs are collected after the suite.
    pub fn log_path(&self) -> PathBuf {
        self.work_dir.join("deployment-controller.log")
    }

    /// `docker build …` / `podman build …` of [`CONTAINERFILE`], with the repository root as
    /// the context.
    pub fn build_image_command(&self) -> Vec<String> {
        let mut cmd = argv(&[
            self.engine.program(),
            "build",
            "-f",
            &self.path(CONTAINERFILE),
        ]);
        if self.engine == Engine::Podman {
            cmd.extend(argv(&["--ignorefile", &self.path(CONTAINERFILE_IGNORE)]));
        }
        let context = if self.root.as_os_str().is_empty() {
            ".".to_owned()
        } else {
            self.root.display().to_string()
        };
        cmd.extend(argv(&["-t", &self.engine.image_name(), &context]));
        cmd
    }

    /// The commands that copy the image into every node of the cluster.
    pub fn load_image_commands(&self) -> Vec<Vec<String>> {
        match self.engine {
            Engine::Docker => vec![argv(&[
                "kind",
                "load",
                "docker-image",
                CONTROLLER_IMAGE,
                "--name",
                &self.cluster,
            ])],
            Engine::Podman => {
                let archive = self.archive_path().display().to_string();
                vec![
                    argv(&["podman", "save", "-o", &archive, &self.engine.image_name()]),
                    argv(&[
                        "kind",
                        "load",
                        "image-archive",
                        &archive,
                        "--name",
                        &self.cluster,
                    ]),
                ]
            }
        }
    }

    fn kubectl(&self, args: &[&str]) -> Vec<String> {
        let mut cmd = vec![self.kubectl.clone()];
        if let Some(k) = &self.kubeconfig {
            cmd.extend(["--kubeconfig".to_owned(), k.display().to_string()]);
        }
        cmd.extend(argv(args));
        cmd
    }

    /// `kubectl apply -f deploy/`: ServiceAccount, RBAC and the Deployment.
    pub fn apply_command(&self) -> Vec<String> {
        self.kubectl(&["apply", "-f", &self.dir(MANIFEST_DIR)])
    }

    /// `kubectl apply -f deploy/bootstrap/`: the bootstrap Pod.
    pub fn bootstrap_command(&self) -> Vec<String> {
        self.kubectl(&["apply", "-f", &self.dir(BOOTSTRAP_DIR)])
    }

    /// `kubectl rollout status` of our Deployment (all replicas updated and available).
    pub fn rollout_status_command(&self) -> Vec<String> {
        self.kubectl(&[
            "-n",
            CONTROLLER_NAMESPACE,
            "rollout",
            "status",
            &format!("deployment/{CONTROLLER_NAME}"),
            &format!("--timeout={ROLLOUT_TIMEOUT}"),
        ])
    }

    /// `kubectl delete -f deploy/bootstrap/` (waits until the Pod is gone).
    pub fn remove_bootstrap_command(&self) -> Vec<String> {
        self.kubectl(&["delete", "-f", &self.dir(BOOTSTRAP_DIR), "--wait=true"])
    }

    /// Prints the holder of our leader-election Lease.
    pub fn lease_holder_command(&self) -> Vec<String> {
        self.kubectl(&[
            "-n",
            CONTROLLER_NAMESPACE,
            "get",
            "lease",
            CONTROLLER_NAME,
            "-o",
            "jsonpath={.spec.holderIdentity}",
        ])
    }

    /// The logs of every controller pod still present, each line prefixed with its pod.
    pub fn logs_command(&self) -> Vec<String> {
        self.kubectl(&[
            "-n",
            CONTROLLER_NAMESPACE,
            "logs",
            "-l",
            CONTROLLER_POD_SELECTOR,
            "--all-containers",
            "--prefix",
            "--tail=-1",
        ])
    }

    /// What to show when the installation fails: the Deployment, its pods and their events.
    pub fn diagnostics_commands(&self) -> Vec<Vec<String>> {
        vec![
            self.kubectl(&[
                "-n",
                CONTROLLER_NAMESPACE,
                "get",
                "deployment,replicaset,pod,lease",
                "-o",
                "wide",
            ]),
            self.kubectl(&[
                "-n",
                CONTROLLER_NAMESPACE,
                "describe",
                "pod",
                "-l",
                CONTROLLER_POD_SELECTOR,
            ]),
        ]
    }
}

/// Whether a Lease `holderIdentity` (`<hostname>_<suffix>`) names one of our Deployment's pods
/// (pod name = hostname), not the bootstrap Pod and not nobody.
pub fn held_by_deployment_pod(holder: &str) -> bool {
    let host = holder.trim().split('_').next().unwrap_or("");
    host != BOOTSTRAP_POD
        && host
            .strip_prefix(CONTROLLER_NAME)
            .and_then(|rest| rest.strip_prefix('-'))
            .is_some_and(|rest| !rest.is_empty())
}

/// The value of kube-apiserver's `--feature-gates` for `gates` (see [`feature_gates_flag`]).
fn feature_gates_value(gates: &[String]) -> Result<Option<String>> {
    Ok(feature_gates_flag(gates)?.map(|flag| {
        flag.strip_prefix("--feature-gates=")
            .unwrap_or(&flag)
            .to_owned()
    }))
}

/// `s` as a double-quoted YAML string.
fn yaml_string(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

fn argv(args: &[&str]) -> Vec<String> {
    args.iter().map(|a| (*a).to_owned()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::versions::DEFAULT_RELEASE;

    #[test]
    fn config_disables_only_the_deployment_controller() {
        let c = KindCluster::new("kctrl-e2e", DEFAULT_RELEASE).config();
        assert!(
            c.starts_with("kind: Cluster\napiVersion: kind.x-k8s.io/v1alpha4\n"),
            "{c}"
        );
        assert!(c.contains("name: kctrl-e2e\n"));
        assert!(c.contains(
            "  controllerManager:\n    \
             extraArgs:\n      controllers: \"*,bootstrapsigner,tokencleaner,-deployment-controller\"\n"
        ));
        // The patch names no apiVersion, so kind applies it to whichever kubeadm API it uses
        // (and converts the map to v1beta4's name/value list).
        let patch = c
            .split("kubeadmConfigPatches:")
            .nth(1)
            .unwrap()
            .split("nodes:")
            .next()
            .unwrap();
        assert!(!patch.contains("apiVersion"), "{patch}");
    }

    /// The ClusterConfiguration patch of `config`, parsed.
    fn cluster_configuration(config: &str) -> serde_json::Value {
        let v: serde_json::Value = serde_yaml_ng::from_str(config).unwrap();
        let patch = v["kubeadmConfigPatches"][0].as_str().unwrap();
        serde_yaml_ng::from_str(patch).unwrap()
    }

    #[test]
    fn config_turns_the_sharded_list_and_watch_gate_on_for_kube_apiserver_only() {
        let k = KindCluster::new("kctrl-e2e", DEFAULT_RELEASE);
        assert_eq!(k.feature_gates(), Some("ShardedListAndWatch=true"));
        let c = k.config();
        assert!(
            c.contains(
                "  kind: ClusterConfiguration\n  apiServer:\n    extraArgs:\n      \
                 feature-gates: \"ShardedListAndWatch=true\"\n  controllerManager:\n"
            ),
            "{c}"
        );
        let patch = cluster_configuration(&c);
        assert_eq!(
            patch["apiServer"]["extraArgs"]["feature-gates"],
            "ShardedListAndWatch=true"
        );
        assert!(
            patch["controllerManager"]["extraArgs"]
                .get("feature-gates")
                .is_none(),
            "{c}"
        );
        assert_eq!(c.matches("feature-gates").count(), 1, "{c}");

        // Other gates replace it, normalised as for the local plane; none removes the flag.
        let other = KindCluster::new("e2e", DEFAULT_RELEASE)
            .with_feature_gates(&["ShardedListAndWatch=false, Other=true".to_owned()])
            .unwrap()
            .config();
        assert_eq!(
            cluster_configuration(&other)["apiServer"]["extraArgs"]["feature-gates"],
            "ShardedListAndWatch=false,Other=true"
        );
        let none = KindCluster::new("e2e", DEFAULT_RELEASE)
            .with_feature_gates(&[])
            .unwrap();
        assert_eq!(none.feature_gates(), None);
        assert!(!none.config().contains("apiServer"), "{}", none.config());
        let err = KindCluster::new("e2e", DEFAULT_RELEASE)
            .with_feature_gates(&["ShardedListAndWatch=on".to_owned()])
            .unwrap_err()
            .to_string();
        assert!(err.contains("ShardedListAndWatch=on"), "{err}");
    }

    #[test]
    fn apiserver_flags_and_volumes_join_the_gates_in_one_patch() {
        let mut k = KindCluster::new("e2e", DEFAULT_RELEASE);
        k.apiserver_args.push((
            "audit-log-path".to_owned(),
            "/var/log/a \"b\".log".to_owned(),
        ));
        k.apiserver_volumes.push(ApiServerVolume {
            name: "audit".to_owned(),
            host_path: "/etc/audit".to_owned(),
            mount_path: "/etc/audit".to_owned(),
            read_only: true,
            path_type: "Directory".to_owned(),
        });
        let c = k.config();
        assert_eq!(c.matches("apiServer:").count(), 1, "{c}");
        let patch = cluster_configuration(&c);
        let api = &patch["apiServer"];
        assert_eq!(
            api["extraArgs"]["feature-gates"],
            "ShardedListAndWatch=true"
        );
        assert_eq!(api["extraArgs"]["audit-log-path"], "/var/log/a \"b\".log");
        assert_eq!(api["extraVolumes"][0]["hostPath"], "/etc/audit");
        assert_eq!(api["extraVolumes"][0]["readOnly"], true);
        assert_eq!(api["extraVolumes"][0]["pathType"], "Directory");
        assert_eq!(
            patch["controllerManager"]["extraArgs"]["controllers"],
            KIND_CONTROLLERS
        );
    }

    #[test]
    fn config_lists_nodes_with_the_image_of_the_release() {
        let c = KindCluster::new("e2e", Release::exact("v1.36.5").unwrap()).config();
        assert_eq!(c.matches("- role: control-plane\n").count(), 1);
        assert_eq!(c.matches("- role: worker\n").count(), 2);
        assert_eq!(
            c.matches("  image: kindest/node:v1.36.1@sha256:3489c7674813ba5d8b1a9977baea8a6e553784dab7b84759d1014dbd78f7ebd5\n").count(),
            3
        );
        let c = KindCluster::new("e2e", Release::exact("v1.37.2").unwrap()).config();
        assert_eq!(
            c.matches("  image: kindest/node:v1.37.0@sha256:a1ed56cfb0e7b93589bdf97c8cd566405a265939e3620fc4f5de89adff580ae5\n").count(),
            3
        );
        assert!(!c.contains("v1.36"), "{c}");
        let single = KindCluster {
            workers: 0,
            ..KindCluster::new("e2e", DEFAULT_RELEASE)
        }
        .config();
        assert!(!single.contains("role: worker"));
    }

    #[test]
    fn commands() {
        let k = KindCluster::new("kctrl-e2e", DEFAULT_RELEASE);
        assert_eq!(
            k.create_command(Path::new("/tmp/kind.yaml")).join(" "),
            "kind create cluster --name kctrl-e2e --config /tmp/kind.yaml --wait 5m"
        );
        assert_eq!(
            k.kubeconfig_command().join(" "),
            "kind get kubeconfig --name kctrl-e2e"
        );
        assert_eq!(
            k.delete_command().join(" "),
            "kind delete cluster --name kctrl-e2e"
        );
    }

    fn docker_controller() -> InClusterController {
        InClusterController::new(
            &KindCluster::new("e2e", DEFAULT_RELEASE),
            Engine::Docker,
            Path::new("/repo"),
            Path::new("/repo/target/kctrl-kind/e2e"),
        )
        .with_kubeconfig(Path::new("/repo/target/kctrl-kind/e2e/kubeconfig"))
    }

    #[test]
    fn image_is_built_and_loaded_with_docker() {
        let c = docker_controller();
        assert_eq!(
            c.build_image_command().join(" "),
            "docker build -f /repo/deploy/Containerfile -t kctrl/deployment-controller:dev /repo"
        );
        let load: Vec<String> = c
            .load_image_commands()
            .iter()
            .map(|c| c.join(" "))
            .collect();
        assert_eq!(
            load,
            ["kind load docker-image kctrl/deployment-controller:dev --name e2e"]
        );
    }

    #[test]
    fn image_is_built_and_loaded_with_podman() {
        let c = InClusterController::new(
            &KindCluster::new("e2e", DEFAULT_RELEASE),
            Engine::Podman,
            Path::new("/repo"),
            Path::new("/w"),
        );
        assert_eq!(
            c.build_image_command().join(" "),
            "podman build -f /repo/deploy/Containerfile \
             --ignorefile /repo/deploy/Containerfile.dockerignore \
             -t docker.io/kctrl/deployment-controller:dev /repo"
        );
        let load: Vec<String> = c
            .load_image_commands()
            .iter()
            .map(|c| c.join(" "))
            .collect();
        assert_eq!(
            load,
            [
                "podman save -o /w/deployment-controller-image.tar \
                 docker.io/kctrl/deployment-controller:dev",
                "kind load image-archive /w/deployment-controller-image.tar --name e2e",
            ]
        );
    }

    #[test]
    fn kubectl_steps_install_bootstrap_and_hand_over() {
        let c = docker_controller();
        let k = "kubectl --kubeconfig /repo/target/kctrl-kind/e2e/kubeconfig";
        assert_eq!(
            c.apply_command().join(" "),
            format!("{k} apply -f /repo/deploy/")
        );
        assert_eq!(
            c.bootstrap_command().join(" "),
            format!("{k} apply -f /repo/deploy/bootstrap/")
        );
        assert_eq!(
            c.rollout_status_command().join(" "),
            format!(
                "{k} -n kube-system rollout status deployment/kctrl-deployment-controller \
                 --timeout=5m"
            )
        );
        assert_eq!(
            c.remove_bootstrap_command().join(" "),
            format!("{k} delete -f /repo/deploy/bootstrap/ --wait=true")
        );
        assert_eq!(
            c.lease_holder_command().join(" "),
            format!(
                "{k} -n kube-system get lease kctrl-deployment-controller \
                 -o jsonpath={{.spec.holderIdentity}}"
            )
        );
        assert_eq!(
            c.logs_command().join(" "),
            format!(
                "{k} -n kube-system logs -l app.kubernetes.io/name=kctrl-deployment-controller \
                 --all-containers --prefix --tail=-1"
            )
        );
        assert_eq!(
            c.log_path(),
            Path::new("/repo/target/kctrl-kind/e2e/deployment-controller.log")
        );
        // Without a kubeconfig kubectl uses its default; another kubectl can be chosen.
        let bare = InClusterController::new(
            &KindCluster::new("e2e", DEFAULT_RELEASE),
            Engine::Docker,
            Path::new(""),
            Path::new("w"),
        )
        .with_kubectl("/cache/kubectl");
        assert_eq!(
            bare.apply_command().join(" "),
            "/cache/kubectl apply -f deploy/"
        );
        assert_eq!(
            bare.build_image_command().join(" "),
            "docker build -f deploy/Containerfile -t kctrl/deployment-controller:dev ."
        );
        assert!(
            c.diagnostics_commands()
                .iter()
                .all(|d| d.join(" ").starts_with(&format!("{k} -n kube-system ")))
        );
    }

    #[test]
    fn the_lease_must_be_held_by_a_deployment_pod() {
        assert!(held_by_deployment_pod(
            "kctrl-deployment-controller-6d9f7c8b4-x2x7q_3f2a9c1e"
        ));
        assert!(held_by_deployment_pod(
            "kctrl-deployment-controller-6d9f7c8b4-x2x7q_3f2a9c1e\n"
        ));
        assert!(!held_by_deployment_pod(
            "kctrl-deployment-controller-bootstrap_3f2a9c1e"
        ));
        assert!(!held_by_deployment_pod(""));
        assert!(!held_by_deployment_pod("kctrl-deployment-controller_1"));
        assert!(!held_by_deployment_pod("other-host_1"));
    }

    #[test]
    fn plan_lists_the_exact_commands_in_order() {
        let k = KindCluster::new("kctrl-dev", DEFAULT_RELEASE);
        let plan = k.plan(Path::new("target/kctrl-kind/kind.yaml"));
        let commands: Vec<String> = plan
            .iter()
            .filter(|l| l[0] != "#")
            .map(|l| l.join(" "))
            .collect();
        let kc = "kubectl --kubeconfig target/kctrl-kind/kubeconfig";
        assert_eq!(
            commands,
            [
                "docker build -f deploy/Containerfile -t kctrl/deployment-controller:dev .".to_owned(),
                "kind create cluster --name kctrl-dev --config target/kctrl-kind/kind.yaml --wait 5m"
                    .to_owned(),
                "kind get kubeconfig --name kctrl-dev > target/kctrl-kind/kubeconfig".to_owned(),
                "kind load docker-image kctrl/deployment-controller:dev --name kctrl-dev".to_owned(),
                format!("{kc} apply -f deploy/"),
                format!("{kc} apply -f deploy/bootstrap/"),
                format!(
                    "{kc} -n kube-system rollout status deployment/kctrl-deployment-controller \
                     --timeout=5m"
                ),
                format!("{kc} delete -f deploy/bootstrap/ --wait=true"),
                format!(
                    "{kc} -n kube-system get lease kctrl-deployment-controller \
                     -o jsonpath={{.spec.holderIdentity}}"
                ),
                format!(
                    "{kc} -n kube-system logs -l app.kubernetes.io/name=kctrl-deployment-controller \
                     --all-containers --prefix --tail=-1 > target/kctrl-kind/deployment-controller.log"
                ),
                "kind delete cluster --name kctrl-dev".to_owned(),
            ]
        );
        // The Podman variants are shown as notes.
        let notes: Vec<String> = plan
            .iter()
            .filter(|l| l[0] == "#")
            .map(|l| l.join(" "))
            .collect();
        assert!(notes.iter().any(|n| n.starts_with(
            "# podman build -f deploy/Containerfile --ignorefile deploy/Containerfile.dockerignore"
        )));
        assert!(
            notes
                .iter()
                .any(|n| n.starts_with("# kind load image-archive"))
        );
    }
}

//! The kind path of the future `cargo xtask e2e --cluster kind` (users' machines with Docker or
//! Podman; it cannot run on the project's container-less machines): the cluster configuration
//! and the commands to create it, fetch its kubeconfig and delete it.
//!
//! Facts the configuration relies on:
//! * kind v0.32.0 is the first release whose default node image is Kubernetes 1.36
//!   (`kindest/node:v1.36.1`); for 1.36 nodes kind drives kubeadm with the v1beta4 API, where a
//!   component's `extraArgs` is a *list* of `{name, value}`. kind (v0.32.0+) converts the
//!   map-style `extraArgs` of a patch that names no `apiVersion` into that list, so the patch
//!   below deliberately omits `apiVersion` and stays valid for v1beta3 (map) as well.
//! * kubeadm starts kube-controller-manager with `--controllers=*,bootstrapsigner,tokencleaner`;
//!   an `extraArgs` entry replaces that flag as a whole, so both extra controllers are repeated
//!   and only the Deployment controller (canonical name `deployment-controller`) is removed.

use std::path::Path;

/// kind release whose default node image is Kubernetes 1.36.
pub(crate) const KIND_VERSION: &str = "v0.32.0";
/// Node image for Kubernetes 1.36 (kind's release notes list its digest; pin it with
/// `--image kindest/node:v1.36.1@sha256:…` when reproducibility matters).
pub(crate) const KIND_NODE_IMAGE: &str = "kindest/node:v1.36.1";
/// The controller-manager's `--controllers` value: kubeadm's default minus our controller.
pub(crate) const KIND_CONTROLLERS: &str = "*,bootstrapsigner,tokencleaner,-deployment-controller";

/// A kind cluster to create.
#[derive(Clone, Debug)]
pub(crate) struct KindCluster {
    /// `kind --name`.
    pub(crate) name: String,
    /// Node image.
    pub(crate) image: String,
    /// Worker nodes besides the control-plane node.
    pub(crate) workers: usize,
}

impl KindCluster {
    /// The default e2e cluster: one control plane, two workers, Kubernetes 1.36.
    pub(crate) fn new(name: &str) -> KindCluster {
        KindCluster {
            name: name.to_owned(),
            image: KIND_NODE_IMAGE.to_owned(),
            workers: 2,
        }
    }

    /// The `kind.x-k8s.io/v1alpha4` Cluster configuration.
    pub(crate) fn config(&self) -> String {
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
  controllerManager:
    extraArgs:
      controllers: \"{KIND_CONTROLLERS}\"
nodes:
{nodes}",
            name = self.name
        )
    }

    /// `kind create cluster …` (waits for the control plane to be Ready).
    pub(crate) fn create_command(&self, config_path: &Path) -> Vec<String> {
        vec![
            "kind".into(),
            "create".into(),
            "cluster".into(),
            "--name".into(),
            self.name.clone(),
            "--config".into(),
            config_path.display().to_string(),
            "--wait".into(),
            "5m".into(),
        ]
    }

    /// `kind get kubeconfig …` (prints the admin kubeconfig on stdout).
    pub(crate) fn kubeconfig_command(&self) -> Vec<String> {
        vec![
            "kind".into(),
            "get".into(),
            "kubeconfig".into(),
            "--name".into(),
            self.name.clone(),
        ]
    }

    /// `kind delete cluster …`.
    pub(crate) fn delete_command(&self) -> Vec<String> {
        vec![
            "kind".into(),
            "delete".into(),
            "cluster".into(),
            "--name".into(),
            self.name.clone(),
        ]
    }

    /// The commands of one e2e run, in order, for display (`kind-plan`).
    pub(crate) fn plan(&self, config_path: &Path) -> Vec<Vec<String>> {
        vec![
            self.create_command(config_path),
            self.kubeconfig_command(),
            self.delete_command(),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_disables_only_the_deployment_controller() {
        let c = KindCluster::new("kctrl-e2e").config();
        assert!(
            c.starts_with("kind: Cluster\napiVersion: kind.x-k8s.io/v1alpha4\n"),
            "{c}"
        );
        assert!(c.contains("name: kctrl-e2e\n"));
        assert!(c.contains(
            "kubeadmConfigPatches:\n- |\n  kind: ClusterConfiguration\n  controllerManager:\n    \
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

    #[test]
    fn config_lists_nodes_with_the_1_36_image() {
        let c = KindCluster::new("e2e").config();
        assert_eq!(c.matches("- role: control-plane\n").count(), 1);
        assert_eq!(c.matches("- role: worker\n").count(), 2);
        assert_eq!(c.matches("  image: kindest/node:v1.36.1\n").count(), 3);
        let single = KindCluster {
            workers: 0,
            ..KindCluster::new("e2e")
        }
        .config();
        assert!(!single.contains("role: worker"));
    }

    #[test]
    fn commands() {
        let k = KindCluster::new("kctrl-e2e");
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
        let plan = k.plan(Path::new("/tmp/kind.yaml"));
        assert_eq!(plan.len(), 3);
        assert_eq!(plan[0][1], "create");
        assert_eq!(plan[2][1], "delete");
    }
}

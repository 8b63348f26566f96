//! `cargo xtask kind …`: what `cargo xtask e2e --cluster kind` needs on a machine without a
//! running container engine or a registry: the engine itself ([`engine`], with its runtime
//! wrapper [`runc_wrapper`]) and the node image ([`node_image`]).

mod binaries;
pub(crate) mod cluster;
pub(crate) mod controller_image;
pub(crate) mod engine;
pub(crate) mod node_image;
pub(crate) mod runc_wrapper;
mod steps;
pub(crate) mod suite_images;

use anyhow::Result;

/// Arguments of `cargo xtask kind`.
#[derive(clap::Args)]
pub(crate) struct KindArgs {
    #[command(subcommand)]
    command: KindCommand,
}

#[derive(clap::Subcommand)]
enum KindCommand {
    /// A Docker daemon for kind where none runs but one can (root, Debian's docker.io).
    #[command(subcommand)]
    Engine(engine::EngineCommand),
    /// Build (or find cached) the node image of a release from the project's own builds.
    NodeImage {
        /// Kubernetes release (default: the newest supported).
        #[arg(long, default_value = "1.37")]
        kube_version: String,
        /// Build even if the cached image matches every input.
        #[arg(long)]
        rebuild: bool,
    },
    /// Build kind's CLI into the cache and print its path.
    Tool,
    /// Assemble the controller's image from the host-built binary (no registry needed).
    ControllerImage,
    /// Create a kind cluster on the offline node image (engine, kind and image as needed).
    Up {
        /// Cluster name (starts with `kctrl-kind-`).
        #[arg(long, default_value = "kctrl-kind-dev")]
        name: String,
        /// Kubernetes release (default: the newest supported).
        #[arg(long, default_value = "1.37")]
        kube_version: String,
        /// kube-apiserver feature gates (`Name=true|false`, comma-separated or repeated; as
        /// `cargo xtask cluster up --feature-gates`). Default: `ShardedListAndWatch=true`, as
        /// in `cargo xtask e2e --cluster kind`; `--feature-gates=` passes none.
        #[arg(long = "feature-gates", value_name = "GATES", default_values_t = default_gates())]
        feature_gates: Vec<String>,
    },
    /// Delete a kind cluster of ours.
    Down {
        /// Cluster name.
        #[arg(long, default_value = "kctrl-kind-dev")]
        name: String,
    },
}

/// kube-apiserver's feature gates in our kind clusters unless `kind up --feature-gates` says
/// otherwise.
fn default_gates() -> Vec<String> {
    kctrl_cluster::kind::KIND_FEATURE_GATES
        .iter()
        .map(|g| (*g).to_owned())
        .collect()
}

/// Where the files of cluster `name` go (configuration, kubeconfig, logs).
pub(crate) fn cluster_dir(name: &str) -> std::path::PathBuf {
    crate::workspace_root().join("target/kctrl-kind").join(name)
}

/// A container engine must answer to the `docker` CLI: ours or another.
pub(crate) fn require_engine() -> Result<()> {
    if engine::docker_answers().is_some() {
        return Ok(());
    }
    if let Some(podman) = engine::podman_answers() {
        anyhow::bail!(
            "{podman} answers, but `docker version` fails: the kind path of xtask drives the \
             `docker` CLI (node image, `docker exec` into the nodes, `kind load docker-image`); \
             install podman-docker so that `docker` runs Podman (not tried on the project's \
             machines), or start Docker: as root on a Debian-like host, `cargo xtask kind engine \
             up`"
        );
    }
    anyhow::bail!(
        "kind needs a container engine and none answers (`docker version` fails): start Docker, \
         or, as root on a Debian-like host, `cargo xtask kind engine up` (installs docker.io if \
         missing and starts it; `cargo xtask kind engine down` stops it)"
    )
}

/// Engine, kind, node image and cluster (kube-apiserver with the feature gates `gates`):
/// everything `kind up` and `e2e --cluster kind` need.
pub(crate) fn up(
    name: &str,
    release: &'static kctrl_cluster::versions::Release,
    gates: &[String],
) -> Result<cluster::Cluster> {
    // A malformed gate is refused before anything is built or started.
    kctrl_cluster::plane::feature_gates_flag(gates)?;
    require_engine()?;
    let kind = binaries::ensure_kind(release)?;
    let image = node_image::ensure(release, false)?;
    let c = cluster::Cluster::new(name, kind, release, &cluster_dir(name))?;
    c.create(&image.tag, release, gates)?;
    Ok(c)
}

/// Runs `cargo xtask kind …`.
pub(crate) fn run(args: KindArgs) -> Result<()> {
    match args.command {
        KindCommand::Engine(cmd) => engine::run(cmd),
        KindCommand::NodeImage {
            kube_version,
            rebuild,
        } => {
            let release = kctrl_cluster::versions::Release::parse(&kube_version)?;
            let image = node_image::ensure(release, rebuild)?;
            match image.built_in {
                Some(d) => println!(
                    "{} (built in {})",
                    image.tag,
                    kctrl_cluster::toolchain::fmt_duration(d)
                ),
                None => println!("{} (cached)", image.tag),
            }
            Ok(())
        }
        KindCommand::Up {
            name,
            kube_version,
            feature_gates,
        } => {
            let release = kctrl_cluster::versions::Release::parse(&kube_version)?;
            let c = up(&name, release, &feature_gates)?;
            println!(
                "cluster {} is up; KUBECONFIG={}",
                c.name,
                c.kubeconfig.display()
            );
            Ok(())
        }
        KindCommand::Down { name } => {
            require_engine()?;
            let release = kctrl_cluster::versions::DEFAULT_RELEASE;
            let kind = binaries::ensure_kind(release)?;
            let c = cluster::Cluster::new(&name, kind, release, &cluster_dir(&name))?;
            if c.exists()? {
                c.delete()?;
                println!("deleted kind cluster {name}");
            } else {
                println!("no kind cluster named {name}");
            }
            Ok(())
        }
        KindCommand::ControllerImage => {
            require_engine()?;
            controller_image_offline()?;
            println!("{}", kctrl_cluster::kind::CONTROLLER_IMAGE);
            Ok(())
        }
        KindCommand::Tool => {
            let release = kctrl_cluster::versions::DEFAULT_RELEASE;
            println!("{}", binaries::ensure_kind(release)?.display());
            Ok(())
        }
    }
}

/// Builds the controller (`--profile dist`) and assembles its image from the binary.
pub(crate) fn controller_image_offline() -> Result<()> {
    let binary = xtask_contender::supervisor::build_dist()?;
    let work = crate::workspace_root().join("target/kctrl-kind");
    std::fs::create_dir_all(&work)?;
    controller_image::assemble(&binary, &work)
}

/// The kind cluster name of `name`: ours all start with [`cluster::NAME_PREFIX`].
pub(crate) fn cluster_name(name: &str) -> String {
    if name.starts_with(cluster::NAME_PREFIX) {
        name.to_owned()
    } else {
        format!("{}{name}", cluster::NAME_PREFIX)
    }
}

/// `argv` with a leading `kind` replaced by the kind binary we built.
pub(crate) fn with_our_kind(mut argv: Vec<String>, kind: &std::path::Path) -> Vec<String> {
    if argv.first().is_some_and(|a| a == "kind") {
        argv[0] = kind.display().to_string();
    }
    argv
}

/// The controller's image for the cluster: deploy/Containerfile when a registry answers,
/// else assembled from the host-built binary.
pub(crate) fn controller_image(containerfile_build: &[String]) -> Result<()> {
    if engine::registry_reachable() {
        eprintln!("==> {}", containerfile_build.join(" "));
        let (program, args) = containerfile_build
            .split_first()
            .ok_or_else(|| anyhow::anyhow!("empty build command"))?;
        let status = std::process::Command::new(program).args(args).status()?;
        anyhow::ensure!(
            status.success(),
            "building the controller image failed ({status})"
        );
        Ok(())
    } else {
        eprintln!(
            "==> no registry answers: assembling the controller image from the host-built binary"
        );
        controller_image_offline()
    }
}

/// The cluster of `cargo xtask e2e --cluster kind`: engine check, kind and the node image
/// built as needed, the cluster created (its kubeconfig at `<dir>/kubeconfig`), kube-apiserver
/// with `kctrl_cluster::kind::KIND_FEATURE_GATES` (the sharded scenario relies on the server
/// filtering each replica's lists and watches).
pub(crate) fn e2e_cluster(
    name: &str,
    release: &'static kctrl_cluster::versions::Release,
) -> Result<cluster::Cluster> {
    up(name, release, &default_gates())
}

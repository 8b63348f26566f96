//! `cargo xtask kind node-image`: a kind node image for the selected release built without a
//! registry, from what the project builds from upstream's Go modules.
//!
//! * Binaries: the cached control plane (`cargo xtask cluster build`: kube-apiserver,
//!   kube-controller-manager, kube-scheduler, kubectl, etcd) plus kubelet, kubeadm and
//!   kube-proxy of the same k8s.io/kubernetes version (a wrapper module of their own), CoreDNS
//!   at the version kubeadm of that release deploys, and our static `pause`
//!   (`xtask/kind-pause/pause.rs`, built with rustc).
//! * Base: a Debian `minbase` root file system from the configured apt mirror (debootstrap)
//!   with systemd, containerd and runc, the CNI plugins and the networking tools, plus the
//!   files of kind's own base image (entrypoint, containerd configuration, kubelet units),
//!   taken from the kind module of [`KIND_VERSION`] in the Go module cache.
//! * Images inside the node: one per component, each a `FROM scratch` image with its binary
//!   (kube-proxy on the base file system, for iptables), tagged with the names kubeadm of that
//!   release asks for (`kubeadm config images list`), imported into the node's containerd.
//!
//! kind's own `kind build node-image` is not used: it insists on the kindnetd and
//! local-path-provisioner images of its release, and kindnetd's module is not on the Go module
//! proxy. The cluster runs without kind's default CNI instead (see `cluster.rs`).
//!
//! Cached: the image's tag carries a hash of every input (binary recipes, package list, base
//! edits, pause source, kind version); a changed input builds a new image. The Go outputs live
//! in `<release cache>/kind/bin`, debootstrap's downloads in `<cache base>/debootstrap`.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use kctrl_cluster::toolchain::{self, Cache, fmt_duration};
use kctrl_cluster::versions::{Binary, Release};

use super::binaries::{build_node_binaries, build_pause, go_install, kind_module_dir};
use super::steps::{self, fnv_hex, run_logged};

/// The kind release whose CLI and base-image files are used.
pub(crate) const KIND_VERSION: &str = "v0.32.0";
/// The Debian release of the base file system.
const DEBIAN_SUITE: &str = "bookworm";
/// Packages of the base file system (kind's base image list without the storage extras, with
/// Debian's containerd, runc and CNI plugins instead of upstream builds).
const BASE_PACKAGES: &[&str] = &[
    "systemd",
    "systemd-sysv",
    "dbus",
    "conntrack",
    "iptables",
    "nftables",
    "iproute2",
    "ethtool",
    "util-linux",
    "mount",
    "kmod",
    "libseccomp2",
    "pigz",
    "bash",
    "ca-certificates",
    "procps",
    // kind's scripts (the product-files hook of every container) parse JSON with it.
    "jq",
    "containerd",
    "runc",
    "containernetworking-plugins",
];
/// CNI plugins the node offers in `/opt/cni/bin` (from Debian's package).
const CNI_PLUGINS: &[&str] = &["host-local", "loopback", "ptp", "portmap", "bridge"];
/// Our pause program's source (compiled into the pause image).
pub(super) const PAUSE_SOURCE: &str = include_str!("../../kind-pause/pause.rs");
/// Repository of our node images.
pub(crate) const NODE_REPOSITORY: &str = "kctrl/kind-node";

/// The node binaries built from k8s.io/kubernetes beside the cached control plane.
pub(super) const NODE_BINARIES: &[&str] = &["kubelet", "kubeadm", "kube-proxy"];

/// Where the kind artefacts of one release live.
pub(super) struct Dirs {
    pub(super) root: PathBuf,
}

impl Dirs {
    pub(super) fn bin(&self, name: &str) -> PathBuf {
        self.root.join("bin").join(name)
    }
    pub(super) fn recipe(&self, name: &str) -> PathBuf {
        self.root.join("bin").join(format!(".{name}.recipe"))
    }
    pub(super) fn log(&self, name: &str) -> PathBuf {
        self.root.join("logs").join(name)
    }
    pub(super) fn work(&self) -> PathBuf {
        self.root.join("work")
    }
}

/// The outcome of [`ensure`].
pub(crate) struct NodeImage {
    /// The image's tag (`kctrl/kind-node:v1.37.2-<hash>`).
    pub(crate) tag: String,
    /// How long building took, `None` when the cached image served.
    pub(crate) built_in: Option<Duration>,
}

pub(super) fn dirs(release: &'static Release) -> Result<Dirs> {
    Ok(Dirs {
        root: Cache::locate(release)?.root.join("kind"),
    })
}

/// The images kubeadm of `release` deploys (`kubeadm config images list`).
fn kubeadm_images(kubeadm: &Path, release: &Release) -> Result<Vec<String>> {
    let out = steps::output(&[
        &kubeadm.display().to_string(),
        "config",
        "images",
        "list",
        "--kubernetes-version",
        release.kubernetes,
    ])?;
    Ok(out
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect())
}

/// The tag of the image whose repository ends with `/name`.
fn image_named<'a>(images: &'a [String], name: &str) -> Result<&'a str> {
    images
        .iter()
        .find(|i| {
            i.rsplit_once(':')
                .is_some_and(|(repo, _)| repo.rsplit('/').next() == Some(name))
        })
        .map(String::as_str)
        .with_context(|| format!("kubeadm lists no {name} image: {images:?}"))
}

/// The inputs the node image depends on (its tag carries their hash).
fn inputs_text(dirs: &Dirs, release: &Release, images: &[String]) -> String {
    let mut text = format!(
        "kind {KIND_VERSION}\ndebian {DEBIAN_SUITE} {}\ncni {}\nimages {} {}\nbase-edits {}\n",
        BASE_PACKAGES.join(","),
        CNI_PLUGINS.join(","),
        images.join(","),
        super::suite_images::SUITE_PAUSE_TAGS.join(","),
        BASE_EDITS_VERSION
    );
    for b in Binary::ALL {
        text.push_str(&b.recipe(release));
        text.push('\n');
    }
    for name in ["kubelet", "kubeadm", "kube-proxy", "coredns", "pause"] {
        text.push_str(&fs::read_to_string(dirs.recipe(name)).unwrap_or_default());
    }
    text
}

/// Bumped whenever [`prepare_rootfs`] changes what it does to the file system.
const BASE_EDITS_VERSION: u32 = 1;

/// Whether docker has `image`.
fn image_exists(image: &str) -> bool {
    Command::new("docker")
        .args(["image", "inspect", image])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Builds (or finds) the node image of `release`.
pub(crate) fn ensure(release: &'static Release, rebuild: bool) -> Result<NodeImage> {
    let started = Instant::now();
    let dirs = dirs(release)?;
    fs::create_dir_all(dirs.root.join("logs"))?;
    let cache = Cache::locate(release)?;
    if !cache.missing().is_empty() {
        eprintln!("building the control plane of {} first", release.kubernetes);
        toolchain::ensure_built(&cache)?;
    }
    eprintln!(
        "[{}] node binaries of {}",
        fmt_duration(started.elapsed()),
        release.kubernetes
    );
    build_node_binaries(&dirs, release)?;
    let images = kubeadm_images(&dirs.bin("kubeadm"), release)?;
    let coredns_tag = image_named(&images, "coredns")?;
    let coredns_version = coredns_tag
        .rsplit_once(':')
        .map(|(_, v)| v)
        .unwrap_or_default();
    go_install(
        &dirs,
        "coredns",
        "github.com/coredns/coredns",
        coredns_version,
    )?;
    build_pause(&dirs)?;
    let hash = fnv_hex(&inputs_text(&dirs, release, &images));
    let tag = format!("{NODE_REPOSITORY}:{}-{}", release.kubernetes, &hash[..12]);
    if !rebuild && image_exists(&tag) {
        eprintln!("node image {tag} is up to date");
        return Ok(NodeImage {
            tag,
            built_in: None,
        });
    }
    eprintln!(
        "[{}] building node image {tag}",
        fmt_duration(started.elapsed())
    );
    let work = dirs.work();
    let _ = fs::remove_dir_all(&work);
    fs::create_dir_all(&work)?;
    let result = build_image(&dirs, &cache, release, &images, &tag, &hash, started);
    // The work directory holds a whole root file system: never leave it behind.
    let _ = fs::remove_dir_all(&work);
    result?;
    let took = started.elapsed();
    eprintln!("node image {tag} built in {}", fmt_duration(took));
    Ok(NodeImage {
        tag,
        built_in: Some(took),
    })
}

fn build_image(
    dirs: &Dirs,
    cache: &Cache,
    release: &Release,
    images: &[String],
    tag: &str,
    hash: &str,
    started: Instant,
) -> Result<()> {
    let work = dirs.work();
    let rootfs = work.join("rootfs");
    // 1. The base file system.
    if super::engine::process_on_path("debootstrap").is_none() {
        super::engine::apt_install(&["debootstrap"])?;
    }
    let deb_cache = cache
        .root
        .parent()
        .unwrap_or(&cache.root)
        .join("debootstrap");
    fs::create_dir_all(&deb_cache)?;
    let mirror = std::env::var("KCTRL_DEBIAN_MIRROR")
        .unwrap_or_else(|_| "http://deb.debian.org/debian".to_owned());
    eprintln!(
        "[{}] debootstrap {DEBIAN_SUITE} (minbase + {} packages) from {mirror}",
        fmt_duration(started.elapsed()),
        BASE_PACKAGES.len()
    );
    let mut cmd =
        Command::new(super::engine::process_on_path("debootstrap").context("debootstrap")?);
    cmd.arg("--variant=minbase")
        .arg(format!("--cache-dir={}", deb_cache.display()))
        .arg(format!("--include={}", BASE_PACKAGES.join(",")))
        .arg(DEBIAN_SUITE)
        .arg(&rootfs)
        .arg(&mirror);
    run_logged(cmd, &dirs.log("debootstrap.log"), "debootstrap").context(
        "building the base file system (the node image cannot be built without the Debian mirror)",
    )?;
    eprintln!(
        "[{}] kind {KIND_VERSION}'s base files and our edits",
        fmt_duration(started.elapsed())
    );
    let kind_dir = kind_module_dir(dirs)?;
    let pause_tag = image_named(images, "pause")?;
    prepare_rootfs(&rootfs, &kind_dir.join("images/base/files"), pause_tag)?;
    for (name, from) in [
        ("kubeadm", dirs.bin("kubeadm")),
        ("kubelet", dirs.bin("kubelet")),
        ("kubectl", cache.binary(Binary::Kubectl)),
    ] {
        install_file(&from, &rootfs.join("usr/bin").join(name), 0o755)?;
    }
    fs::create_dir_all(rootfs.join("kind"))?;
    fs::write(rootfs.join("kind/version"), release.kubernetes)?;
    // 2. The root file system as an image.
    let rootfs_image = format!("kctrl/kind-rootfs:{hash}");
    eprintln!(
        "[{}] importing the root file system",
        fmt_duration(started.elapsed())
    );
    import_dir(&rootfs, &rootfs_image)?;
    let _ = fs::remove_dir_all(&rootfs);
    // 3. The component images.
    eprintln!(
        "[{}] component images: {}",
        fmt_duration(started.elapsed()),
        images.join(" ")
    );
    let mut built = Vec::new();
    for image in images {
        let name = image
            .rsplit_once(':')
            .map(|(r, _)| r.rsplit('/').next().unwrap_or(r))
            .unwrap_or(image);
        let (binary, entry, from) = match name {
            "kube-apiserver" => (
                cache.binary(Binary::KubeApiserver),
                "/usr/local/bin/kube-apiserver",
                "scratch",
            ),
            "kube-controller-manager" => (
                cache.binary(Binary::KubeControllerManager),
                "/usr/local/bin/kube-controller-manager",
                "scratch",
            ),
            "kube-scheduler" => (
                cache.binary(Binary::KubeScheduler),
                "/usr/local/bin/kube-scheduler",
                "scratch",
            ),
            "kube-proxy" => (
                dirs.bin("kube-proxy"),
                "/usr/local/bin/kube-proxy",
                rootfs_image.as_str(),
            ),
            "etcd" => (cache.binary(Binary::Etcd), "/usr/local/bin/etcd", "scratch"),
            "coredns" => (dirs.bin("coredns"), "/coredns", "scratch"),
            "pause" => (dirs.bin("pause"), "/pause", "scratch"),
            other => bail!("kubeadm asks for an image this build does not make: {other} ({image})"),
        };
        component_image(&work, image, &binary, entry, from)?;
        built.push(image.clone());
        if name == "pause" {
            // The suite's pause versions, as names of the same image (`suite_images.rs`).
            for extra in super::suite_images::extra_pause_images(image) {
                steps::run(&["docker", "tag", image, &extra])?;
                built.push(extra);
            }
        }
    }
    let archive = work.join("images.tar");
    let mut save = vec!["docker", "save", "-o"];
    let archive_s = archive.display().to_string();
    save.push(&archive_s);
    save.extend(built.iter().map(String::as_str));
    steps::run(&save)?;
    // 4. Import them into the node's containerd, commit, set the stop signal.
    eprintln!(
        "[{}] loading the images into the node's containerd",
        fmt_duration(started.elapsed())
    );
    let builder = format!("kctrl-kind-build-{}", &hash[..12]);
    let _ = Command::new("docker")
        .args(["rm", "-f", &builder])
        .stderr(Stdio::null())
        .stdout(Stdio::null())
        .status();
    steps::output(&[
        "docker",
        "run",
        "-d",
        "--name",
        &builder,
        "--entrypoint",
        "sleep",
        "--security-opt",
        "seccomp=unconfined",
        &rootfs_image,
        "infinity",
    ])?;
    let result = (|| -> Result<()> {
        steps::run(&[
            "docker",
            "exec",
            &builder,
            "sh",
            "-c",
            "nohup containerd >/var/log/containerd-build.log 2>&1 &",
        ])?;
        let deadline = Instant::now() + Duration::from_secs(60);
        while steps::output(&["docker", "exec", &builder, "ctr", "version"]).is_err() {
            if Instant::now() > deadline {
                let log = steps::output(&[
                    "docker",
                    "exec",
                    &builder,
                    "cat",
                    "/var/log/containerd-build.log",
                ])
                .unwrap_or_default();
                bail!("containerd in the build container did not start:\n{log}");
            }
            std::thread::sleep(Duration::from_millis(500));
        }
        let status = Command::new("docker")
            .args([
                "exec",
                "-i",
                &builder,
                "ctr",
                "--namespace=k8s.io",
                "images",
                "import",
                "--label=io.cri-containerd.pinned=pinned",
                "--no-unpack",
                "-",
            ])
            .stdin(fs::File::open(&archive)?)
            .status()?;
        if !status.success() {
            bail!("ctr images import in the build container failed ({status})");
        }
        let listed = steps::output(&[
            "docker",
            "exec",
            &builder,
            "ctr",
            "--namespace=k8s.io",
            "images",
            "list",
            "-q",
        ])?;
        for image in &built {
            if !listed.lines().any(|l| l.trim() == image) {
                bail!("{image} is missing from the node's containerd after the import:\n{listed}");
            }
        }
        steps::run(&["docker", "exec", &builder, "pkill", "containerd"])?;
        std::thread::sleep(Duration::from_secs(2));
        let committed = format!("kctrl/kind-committed:{hash}");
        steps::output(&[
            "docker",
            "commit",
            "--change",
            r#"ENTRYPOINT [ "/usr/local/bin/entrypoint", "/sbin/init" ]"#,
            "--change",
            "ENV container=docker",
            &builder,
            &committed,
        ])?;
        let ctx = work.join("final");
        fs::create_dir_all(&ctx)?;
        fs::write(
            ctx.join("Dockerfile"),
            format!("FROM {committed}\nSTOPSIGNAL SIGRTMIN+3\n"),
        )?;
        docker_build(&ctx, tag)?;
        let _ = Command::new("docker")
            .args(["rmi", &committed])
            .stdout(Stdio::null())
            .status();
        Ok(())
    })();
    let _ = Command::new("docker")
        .args(["rm", "-f", "-v", &builder])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    for image in built
        .iter()
        .map(String::as_str)
        .chain([rootfs_image.as_str()])
    {
        let _ = Command::new("docker")
            .args(["rmi", image])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
    result
}

/// `docker build` with the classic builder (no BuildKit: nothing to pull, no frontend image).
fn docker_build(context: &Path, tag: &str) -> Result<()> {
    let mut cmd = Command::new("docker");
    cmd.env("DOCKER_BUILDKIT", "0")
        .args(["build", "-q", "-t", tag])
        .arg(context);
    let out = cmd.output().context("docker build")?;
    if !out.status.success() {
        bail!(
            "docker build -t {tag} {} failed: {}",
            context.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// One component image: `binary` at `entry` on `from` (`scratch` or an image), `PATH` set.
fn component_image(work: &Path, tag: &str, binary: &Path, entry: &str, from: &str) -> Result<()> {
    let ctx = work.join("ctx").join(fnv_hex(tag));
    fs::create_dir_all(&ctx)?;
    let file = Path::new(entry)
        .file_name()
        .context("entry")?
        .to_string_lossy()
        .into_owned();
    install_file(binary, &ctx.join(&file), 0o755)?;
    fs::write(
        ctx.join("Dockerfile"),
        format!(
            "FROM {from}\nCOPY {file} {entry}\nENV PATH=/usr/local/bin:/usr/local/sbin:/usr/bin:/usr/sbin:/bin:/sbin\n\
             ENTRYPOINT [\"{entry}\"]\n"
        ),
    )?;
    docker_build(&ctx, tag)?;
    let _ = fs::remove_dir_all(&ctx);
    Ok(())
}

/// Copies `from` to `to` with `mode`.
fn install_file(from: &Path, to: &Path, mode: u32) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    if let Some(d) = to.parent() {
        fs::create_dir_all(d)?;
    }
    let _ = fs::remove_file(to);
    fs::copy(from, to)
        .with_context(|| format!("copying {} to {}", from.display(), to.display()))?;
    fs::set_permissions(to, fs::Permissions::from_mode(mode))?;
    Ok(())
}

/// Copies a directory tree (files get `mode`).
fn copy_tree(from: &Path, to: &Path, mode: u32) -> Result<()> {
    for entry in fs::read_dir(from).with_context(|| format!("reading {}", from.display()))? {
        let entry = entry?;
        let dest = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            fs::create_dir_all(&dest)?;
            copy_tree(&entry.path(), &dest, mode)?;
        } else {
            install_file(&entry.path(), &dest, mode)?;
        }
    }
    Ok(())
}

/// Removes the files in `dir` whose name passes `pick`.
fn remove_in(dir: &Path, pick: impl Fn(&str) -> bool) {
    if let Ok(rd) = fs::read_dir(dir) {
        for e in rd.flatten() {
            if pick(&e.file_name().to_string_lossy()) {
                let _ = fs::remove_file(e.path());
            }
        }
    }
}

/// What kind's base image adds to the Debian file system, done to `rootfs` (see the module
/// docs), plus what this host needs: `restrict_oom_score_adj` (a negative OOM score cannot be
/// set without CAP_SYS_RESOURCE) and the pause image kubeadm of the release names.
fn prepare_rootfs(rootfs: &Path, kind_files: &Path, pause_image: &str) -> Result<()> {
    copy_tree(
        &kind_files.join("usr/local/bin"),
        &rootfs.join("usr/local/bin"),
        0o755,
    )?;
    copy_tree(&kind_files.join("kind"), &rootfs.join("kind"), 0o644)?;
    copy_tree(
        &kind_files.join("kind/bin"),
        &rootfs.join("kind/bin"),
        0o755,
    )?;
    copy_tree(&kind_files.join("etc"), &rootfs.join("etc"), 0o644)?;
    // Services kind's nodes do without.
    let sd = rootfs.join("lib/systemd/system");
    remove_in(&sd.join("sysinit.target.wants"), |n| {
        n == "systemd-tmpfiles-setup.service"
    });
    remove_in(&sd.join("multi-user.target.wants"), |_| true);
    remove_in(&sd.join("local-fs.target.wants"), |_| true);
    remove_in(&sd.join("sockets.target.wants"), |n| {
        n.contains("udev") || n.contains("initctl")
    });
    remove_in(&sd.join("basic.target.wants"), |_| true);
    if let Ok(rd) = fs::read_dir(rootfs.join("etc/systemd/system")) {
        for e in rd.flatten() {
            if e.file_name().to_string_lossy().ends_with(".wants") {
                remove_in(&e.path(), |_| true);
            }
        }
    }
    let mut journald = fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(rootfs.join("etc/systemd/journald.conf"))?;
    writeln!(journald, "ReadKMsg=no")?;
    let root = rootfs.display().to_string();
    steps::run(&[
        "systemctl",
        &format!("--root={root}"),
        "enable",
        "kubelet.service",
        "containerd.service",
        "undo-mount-hacks.service",
    ])?;
    steps::run(&[
        "systemctl",
        &format!("--root={root}"),
        "mask",
        "systemd-binfmt.service",
    ])?;
    fs::create_dir_all(rootfs.join("etc/kubernetes/manifests"))?;
    // Debian's containerd and runc where kind's units and scripts expect upstream's builds.
    fs::create_dir_all(rootfs.join("usr/local/sbin"))?;
    for (link, target) in [
        ("usr/local/bin/containerd", "/usr/bin/containerd"),
        ("usr/local/bin/ctr", "/usr/bin/ctr"),
        (
            "usr/local/bin/containerd-shim-runc-v2",
            "/usr/bin/containerd-shim-runc-v2",
        ),
        ("usr/local/sbin/runc", "/usr/sbin/runc"),
    ] {
        let _ = fs::remove_file(rootfs.join(link));
        std::os::unix::fs::symlink(target, rootfs.join(link))?;
    }
    for plugin in CNI_PLUGINS {
        install_file(
            &rootfs.join("usr/lib/cni").join(plugin),
            &rootfs.join("opt/cni/bin").join(plugin),
            0o755,
        )?;
    }
    // containerd's base spec, as kind's base image makes it: the product-files hook, no rlimits.
    let spec = steps::output(&["chroot", &root, "ctr", "oci", "spec"])?;
    fs::write(
        rootfs.join("etc/containerd/cri-base.json"),
        cri_base_spec(&spec)?,
    )?;
    let config_path = rootfs.join("etc/containerd/config.toml");
    let config = fs::read_to_string(&config_path)?;
    fs::write(&config_path, containerd_config(&config, pause_image))?;
    Ok(())
}

/// containerd's default spec with kind's createContainer hook and without rlimits.
pub(crate) fn cri_base_spec(default_spec: &str) -> Result<String> {
    let mut v: serde_json::Value =
        serde_json::from_str(default_spec).context("ctr oci spec output")?;
    if let Some(p) = v.get_mut("process").and_then(|p| p.as_object_mut()) {
        p.remove("rlimits");
    }
    let hooks = v
        .as_object_mut()
        .context("spec is not an object")?
        .entry("hooks")
        .or_insert_with(|| serde_json::json!({}));
    let list = hooks
        .as_object_mut()
        .context("hooks")?
        .entry("createContainer")
        .or_insert_with(|| serde_json::json!([]));
    list.as_array_mut()
        .context("createContainer")?
        .push(serde_json::json!({"path": "/kind/bin/mount-product-files.sh"}));
    Ok(serde_json::to_string_pretty(&v)?)
}

/// kind's containerd configuration with the release's pause image and OOM scores restricted.
pub(crate) fn containerd_config(config: &str, pause_image: &str) -> String {
    config
        .lines()
        .map(|l| {
            let t = l.trim_start();
            let indent = &l[..l.len() - t.len()];
            if t.starts_with("sandbox_image") {
                format!("{indent}sandbox_image = \"{pause_image}\"")
            } else if t.starts_with("restrict_oom_score_adj") {
                format!("{indent}restrict_oom_score_adj = true")
            } else {
                l.to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
        + "\n"
}

/// `tar -C dir -c . | docker import - tag` with kind's entrypoint.
fn import_dir(dir: &Path, tag: &str) -> Result<()> {
    let mut tar = Command::new("tar")
        .arg("-C")
        .arg(dir)
        .args(["--numeric-owner", "-cf", "-", "."])
        .stdout(Stdio::piped())
        .spawn()
        .context("tar")?;
    let status = Command::new("docker")
        .args([
            "import",
            "--change",
            r#"ENTRYPOINT [ "/usr/local/bin/entrypoint", "/sbin/init" ]"#,
            "--change",
            "ENV container=docker",
            "-",
            tag,
        ])
        .stdin(tar.stdout.take().context("tar stdout")?)
        .stdout(Stdio::null())
        .status()
        .context("docker import")?;
    let tar_status = tar.wait()?;
    if !status.success() || !tar_status.success() {
        bail!(
            "importing {} as {tag} failed (tar {tar_status}, docker import {status})",
            dir.display()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use kctrl_cluster::versions::DEFAULT_RELEASE;

    #[test]
    fn the_node_wrapper_is_the_control_plane_wrapper_with_the_node_tools() {
        let m = super::super::binaries::node_go_mod(DEFAULT_RELEASE);
        assert!(m.contains("module kctrl.local/kindnodebin"), "{m}");
        assert!(m.contains(&format!(
            "require k8s.io/kubernetes {}",
            DEFAULT_RELEASE.kubernetes
        )));
        assert!(m.contains("\tk8s.io/kubelet => k8s.io/kubelet "), "{m}");
        assert!(m.contains("\tk8s.io/kubernetes/cmd/kubelet\n\tk8s.io/kubernetes/cmd/kubeadm\n\tk8s.io/kubernetes/cmd/kube-proxy\n)"), "{m}");
        assert!(!m.contains("cmd/kube-apiserver"), "{m}");
    }

    #[test]
    fn kubeadm_images_are_found_by_name() {
        let images: Vec<String> = [
            "registry.k8s.io/kube-apiserver:v1.37.2",
            "registry.k8s.io/coredns/coredns:v1.14.6",
            "registry.k8s.io/pause:3.10.2",
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
        assert_eq!(
            image_named(&images, "coredns").unwrap(),
            "registry.k8s.io/coredns/coredns:v1.14.6"
        );
        assert_eq!(
            image_named(&images, "pause").unwrap(),
            "registry.k8s.io/pause:3.10.2"
        );
        assert!(image_named(&images, "etcd").is_err());
    }

    #[test]
    fn containerd_gets_the_release_pause_and_restricted_oom_scores() {
        let cfg = "[plugins.\"io.containerd.grpc.v1.cri\"]\n  sandbox_image = \"registry.k8s.io/pause:3.10\"\n  restrict_oom_score_adj = false\n";
        let out = containerd_config(cfg, "registry.k8s.io/pause:3.10.2");
        assert!(
            out.contains("  sandbox_image = \"registry.k8s.io/pause:3.10.2\"\n"),
            "{out}"
        );
        assert!(out.contains("  restrict_oom_score_adj = true\n"), "{out}");
    }

    #[test]
    fn the_base_spec_gets_the_hook_and_loses_rlimits() {
        let spec = r#"{"process":{"rlimits":[{"type":"RLIMIT_NOFILE"}],"args":[]},"hooks":{}}"#;
        let v: serde_json::Value = serde_json::from_str(&cri_base_spec(spec).unwrap()).unwrap();
        assert!(v["process"].get("rlimits").is_none());
        assert_eq!(
            v["hooks"]["createContainer"][0]["path"],
            "/kind/bin/mount-product-files.sh"
        );
    }
}

//! A real plane from a `KUBEBUILDER_ASSETS` directory (setup-envtest's layout) made of the
//! cached real binaries: etcd, kube-apiserver and kubectl come from that directory, and
//! kube-controller-manager, which it lacks, from the cache. Like `controller.rs`, this starts
//! real processes and runs only with `KCTRL_TESTENV_E2E` set; the plane runs in a child process
//! of this test binary, whose environment names the directory (a test cannot change its own
//! process's environment without affecting the others).

use std::io::Write as _;
use std::os::unix::fs::symlink;
use std::process::Command;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use kctrl_client::{Api, PostParams};
use kctrl_cluster::toolchain::Cache;
use kctrl_cluster::versions::{Binary, DEFAULT_RELEASE};
use kctrl_testenv::{BinarySource, KUBEBUILDER_ASSETS_ENV, TestEnv};

const RUN_ENV: &str = "KCTRL_TESTENV_E2E";
/// Set in the child.
const CHILD_ENV: &str = "KCTRL_TESTENV_ASSETS_CHILD";

#[tokio::test]
async fn a_plane_starts_from_a_kubebuilder_assets_directory() {
    const NAME: &str = "a_plane_starts_from_a_kubebuilder_assets_directory";
    if std::env::var_os(CHILD_ENV).is_some() {
        return child().await;
    }
    if std::env::var_os(RUN_ENV).is_none() {
        let _ = writeln!(
            std::io::stderr(),
            "kctrl-testenv: {NAME} skipped: {RUN_ENV} is not set (`cargo xtask e2e` runs it)"
        );
        return;
    }
    let cache = Cache::locate(DEFAULT_RELEASE).unwrap();
    for b in [
        Binary::Etcd,
        Binary::KubeApiserver,
        Binary::Kubectl,
        Binary::KubeControllerManager,
    ] {
        assert!(
            cache.is_built(b),
            "{} is not built in {}: run `cargo xtask cluster build`",
            b.file_name(),
            cache.root.display()
        );
    }
    // setup-envtest's layout: the binaries directly in the directory. It stays in cargo's
    // scratch directory of integration tests, at the same path every run, so the plane's link
    // directory in the cache (keyed by the targets) is reused rather than left dangling.
    let assets_dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("kubebuilder-assets");
    let _ = std::fs::remove_dir_all(&assets_dir);
    std::fs::create_dir_all(&assets_dir).unwrap();
    for b in [Binary::Etcd, Binary::KubeApiserver, Binary::Kubectl] {
        symlink(cache.binary(b), assets_dir.join(b.file_name())).unwrap();
    }
    let out = Command::new(std::env::current_exe().unwrap())
        .args([NAME, "--exact", "--nocapture"])
        .env(CHILD_ENV, "1")
        .env(KUBEBUILDER_ASSETS_ENV, &assets_dir)
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("1 passed"), "{text}");
    // The log says which version runs and where it came from.
    assert!(
        text.contains(&format!(
            "kctrl-testenv: Kubernetes {} (kube-apiserver {}",
            DEFAULT_RELEASE.kubernetes,
            assets_dir.join("kube-apiserver").display()
        )),
        "{text}"
    );
}

/// In the child: `$KUBEBUILDER_ASSETS` names the directory.
async fn child() {
    let dir = std::path::PathBuf::from(std::env::var_os(KUBEBUILDER_ASSETS_ENV).unwrap());
    let env = TestEnv::builder()
        .controller_manager(true)
        .start()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    for b in env.binaries() {
        match b.name {
            "etcd" | "kube-apiserver" | "kubectl" => {
                assert_eq!(b.source, BinarySource::Assets { dir: dir.clone() }, "{b:?}");
                assert_eq!(b.path, dir.join(b.name));
            }
            "kube-controller-manager" => assert_eq!(b.source, BinarySource::Built, "{b:?}"),
            other => panic!("unexpected binary {other}"),
        }
    }
    assert_eq!(env.binaries().len(), 4);
    assert_eq!(env.kubernetes_version(), DEFAULT_RELEASE.kubernetes);
    let client = env.client().unwrap();
    let version = client.server_version().await.unwrap();
    assert_eq!(version.git_version, DEFAULT_RELEASE.kubernetes);
    // kube-controller-manager (from the cache) works against the apiserver from the assets:
    // it gives a new namespace its `default` ServiceAccount.
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let mut ns = Namespace::default();
    ns.metadata.name = Some("assets-e2e".into());
    namespaces
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
    let accounts: Api<ServiceAccount> = Api::namespaced(client, "assets-e2e");
    let t0 = Instant::now();
    while accounts.get_opt("default").await.unwrap().is_none() {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "no default ServiceAccount after 60 s; logs in {}",
            env.logs_dir().display()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    // kubectl from the assets talks to it too.
    let out = Command::new(env.kubectl())
        .arg("--kubeconfig")
        .arg(env.kubeconfig_path())
        .args(["get", "namespace", "assets-e2e", "-o", "name"])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "namespace/assets-e2e"
    );
    env.stop().unwrap();
}

/// Set in the children of the next test: which case they play.
const CASE_ENV: &str = "KCTRL_TESTENV_ASSETS_CASE";

/// One case of the next test: its name, the assets directory, extra variables.
type Case<'a> = (&'a str, &'a std::path::Path, &'a [(&'a str, &'a str)]);

/// What goes wrong with the user's binaries is reported through the public API, as read from
/// the environment: a component the assets directory lacks (nothing else has it), a release
/// kctrl does not support, a per-binary override naming nothing, a malformed download setting,
/// a variable set but empty.
/// Needs no plane (nothing starts), so it runs in every `cargo test`.
#[tokio::test]
async fn problems_with_the_users_binaries_are_named() {
    const NAME: &str = "problems_with_the_users_binaries_are_named";
    if let Ok(case) = std::env::var(CASE_ENV) {
        let dir = std::env::var(KUBEBUILDER_ASSETS_ENV).unwrap_or_default();
        let err = TestEnv::builder()
            .controller_manager(true)
            .start()
            .await
            .map(|_| ())
            .unwrap_err();
        let message = err.to_string();
        match case.as_str() {
            "lacks-kcm" => {
                let kctrl_testenv::Error::NotBuilt {
                    missing, looked_in, ..
                } = &err
                else {
                    panic!("{err}");
                };
                assert_eq!(missing, "kube-controller-manager");
                assert!(looked_in.contains(&dir), "{looked_in}");
                let build = format!(
                    "cargo xtask cluster build --kube-version {}",
                    DEFAULT_RELEASE.kubernetes
                );
                for option in [
                    "KUBEBUILDER_ASSETS",
                    "TEST_ASSET_<NAME>",
                    "KCTRL_TESTENV_DOWNLOAD=1",
                    build.as_str(),
                    "build_if_missing(true)",
                ] {
                    assert!(message.contains(option), "{option}: {message}");
                }
            }
            "too-old" => {
                assert!(
                    matches!(err, kctrl_testenv::Error::UnsupportedVersion(_)),
                    "{err}"
                );
                assert!(
                    message.contains("v1.30.2") && message.contains(&dir),
                    "{message}"
                );
            }
            "no-such-override" => {
                assert!(matches!(err, kctrl_testenv::Error::Assets(_)), "{err}");
                assert!(
                    message.contains("TEST_ASSET_KUBE_APISERVER") && message.contains("/nowhere"),
                    "{message}"
                );
            }
            "empty-override" | "empty-assets" => {
                let var = if case == "empty-override" {
                    "$TEST_ASSET_KUBE_APISERVER"
                } else {
                    "$KUBEBUILDER_ASSETS"
                };
                assert!(matches!(err, kctrl_testenv::Error::Assets(_)), "{err}");
                assert!(
                    message.contains(var) && message.contains("set but empty"),
                    "{message}"
                );
            }
            "bad-download-setting" => {
                assert!(matches!(err, kctrl_testenv::Error::Assets(_)), "{err}");
                assert!(message.contains("KCTRL_TESTENV_DOWNLOAD"), "{message}");
            }
            other => panic!("unknown case {other}"),
        }
        return;
    }
    let scratch = tempfile::tempdir().unwrap();
    let fake_assets = |name: &str, version: &str| {
        let dir = scratch.path().join(name);
        std::fs::create_dir_all(&dir).unwrap();
        for b in ["etcd", "kube-apiserver", "kubectl"] {
            let path = dir.join(b);
            std::fs::write(&path, format!("#!/bin/sh\necho \"Kubernetes {version}\"\n")).unwrap();
            use std::os::unix::fs::PermissionsExt as _;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        dir
    };
    let current = fake_assets("current", DEFAULT_RELEASE.kubernetes);
    let old = fake_assets("old", "v1.30.2");
    let empty_cache = scratch.path().join("empty-cache");
    let cases: [Case<'_>; 6] = [
        ("lacks-kcm", &current, &[]),
        ("too-old", &old, &[]),
        (
            "no-such-override",
            &current,
            &[("TEST_ASSET_KUBE_APISERVER", "/nowhere/kube-apiserver")],
        ),
        (
            "bad-download-setting",
            &current,
            &[("KCTRL_TESTENV_DOWNLOAD", "maybe")],
        ),
        // Set but empty: an error naming the variable (envtest, too, takes a set variable
        // as the answer), not a silent fall-through to the next source.
        (
            "empty-override",
            &current,
            &[("TEST_ASSET_KUBE_APISERVER", "")],
        ),
        ("empty-assets", &current, &[("KUBEBUILDER_ASSETS", "")]),
    ];
    for (case, assets, extra) in cases {
        let mut cmd = Command::new(std::env::current_exe().unwrap());
        cmd.args([NAME, "--exact", "--nocapture"])
            .env(CASE_ENV, case)
            .env(KUBEBUILDER_ASSETS_ENV, assets)
            .env("KCTRL_CACHE_DIR", &empty_cache);
        for var in [
            "KCTRL_KUBE_VERSION",
            "KCTRL_TESTENV_DOWNLOAD",
            "TEST_ASSET_ETCD",
            "TEST_ASSET_KUBE_APISERVER",
            "TEST_ASSET_KUBECTL",
            "TEST_ASSET_KUBE_CONTROLLER_MANAGER",
        ] {
            cmd.env_remove(var);
        }
        for (k, v) in extra {
            cmd.env(k, v);
        }
        let out = cmd.output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{case}: {text}");
        assert!(text.contains("1 passed"), "{case}: {text}");
    }
}

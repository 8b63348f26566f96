//! The sources of the binaries, against a local mirror and fake binaries (shell scripts that
//! answer `--version` like the real ones): nothing is downloaded from the Internet and no
//! plane is started.

use std::fs;
use std::os::unix::fs::PermissionsExt as _;

use super::*;
use crate::download::partial_path;
use crate::test_mirror::{Behaviour, Mirror};

/// A fake binary: answers `--version` as Kubernetes' do, padded to about `size` bytes so that
/// transfers come in several pieces.
fn fake(version: &str, size: usize) -> Vec<u8> {
    let mut s = format!("#!/bin/sh\necho \"Kubernetes {version}\"\n");
    let line = "# padding padding padding padding padding padding padding padding\n";
    while s.len() < size {
        s.push_str(line);
    }
    s.into_bytes()
}

fn sha256(bytes: &[u8]) -> String {
    ring::digest::digest(&ring::digest::SHA256, bytes)
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn write_exe(path: &Path, bytes: &[u8]) {
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, bytes).unwrap();
    fs::set_permissions(path, fs::Permissions::from_mode(0o755)).unwrap();
}

fn inputs(base: &Path, wanted: &[Binary]) -> Inputs {
    Inputs {
        asked: None,
        overrides: Vec::new(),
        assets: None,
        download: false,
        build: false,
        // Nothing listens on port 9 (discard) of loopback here; only the mirror tests set it.
        kubernetes_url: "http://127.0.0.1:9".into(),
        etcd_url: "http://127.0.0.1:9".into(),
        cache_base: base.to_path_buf(),
        wanted: wanted.to_vec(),
    }
}

fn arch() -> &'static str {
    release_arch().expect("tests run on amd64 or arm64")
}

/// The mirror path of a Kubernetes binary of `version`.
fn k8s_path(version: &str, name: &str) -> String {
    format!("/{version}/bin/linux/{}/{name}", arch())
}

/// Serves `name` of `version` and its `.sha256` (with `digest`, or the right one).
fn serve_k8s(mirror: &Mirror, version: &str, name: &str, body: &[u8], digest: Option<&str>) {
    let path = k8s_path(version, name);
    mirror.put(&path, body.to_vec());
    let digest = digest.map_or_else(|| sha256(body), str::to_owned);
    mirror.put(&format!("{path}.sha256"), digest);
}

/// Serves etcd's release archive holding `etcd` and its `SHA256SUMS`.
fn serve_etcd(mirror: &Mirror, etcd: &str, etcd_body: &[u8], scratch: &Path) {
    let top = format!("etcd-{etcd}-linux-{}", arch());
    write_exe(&scratch.join(&top).join("etcd"), etcd_body);
    fs::write(scratch.join(&top).join("README.md"), "etcd").unwrap();
    let archive = scratch.join(format!("{top}.tar.gz"));
    let status = Command::new("tar")
        .arg("-czf")
        .arg(&archive)
        .arg("-C")
        .arg(scratch)
        .arg(&top)
        .status()
        .unwrap();
    assert!(status.success());
    let bytes = fs::read(&archive).unwrap();
    mirror.put(
        &format!("/{etcd}/SHA256SUMS"),
        format!(
            "{}  etcd-{etcd}-darwin-arm64.zip\n{}  {top}.tar.gz\n",
            "0".repeat(64),
            sha256(&bytes)
        ),
    );
    mirror.put(&format!("/{etcd}/{top}.tar.gz"), bytes);
}

/// No partial, temporary or extraction file is left in `dir`.
fn assert_no_leftovers(dir: &Path) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        assert!(
            !name.ends_with(".part") && !name.ends_with(".tmp") && !name.starts_with(".extract-"),
            "left behind: {}",
            e.path().display()
        );
    }
}

#[test]
fn versions_are_read_as_kubernetes_prints_them() {
    let v = parse_version("Kubernetes v1.37.2\n").unwrap();
    assert_eq!((v.text.as_str(), v.minor), ("v1.37.2", 37));
    assert_eq!(parse_version("Kubernetes v1.34.0-rc.1").unwrap().minor, 34);
    assert_eq!(parse_version("etcd Version: 3.6.8"), None);
    assert_eq!(parse_version("Kubernetes v1.x"), None);
    assert_eq!(
        override_variable(Binary::KubeApiserver),
        "TEST_ASSET_KUBE_APISERVER"
    );
    assert_eq!(override_variable(Binary::Etcd), "TEST_ASSET_ETCD");
    assert_eq!(
        override_variable(Binary::KubeControllerManager),
        "TEST_ASSET_KUBE_CONTROLLER_MANAGER"
    );
}

#[tokio::test]
async fn a_good_download_is_verified_recorded_and_used_again_from_the_cache() {
    let tmp = tempfile::tempdir().unwrap();
    let base = tmp.path().join("cache");
    let mirror = Mirror::start();
    let r = DEFAULT_RELEASE;
    let apiserver = fake(r.kubernetes, 300_000);
    let kubectl = fake(r.kubernetes, 1_000);
    let etcd = fake("v0-etcd", 50_000);
    serve_k8s(&mirror, r.kubernetes, "kube-apiserver", &apiserver, None);
    serve_k8s(&mirror, r.kubernetes, "kubectl", &kubectl, None);
    serve_etcd(&mirror, r.etcd, &etcd, &tmp.path().join("scratch"));
    let wanted = [Binary::Etcd, Binary::KubeApiserver, Binary::Kubectl];
    let mut inp = inputs(&base, &wanted);
    inp.download = true;
    inp.kubernetes_url = format!("{}/", mirror.url);
    inp.etcd_url = mirror.url.clone();

    let resolved = resolve(inp.clone()).await.unwrap();
    let cache = Cache::under(&base, r);
    assert_eq!(
        resolved.binaries.root, cache.root,
        "all in the release's cache"
    );
    assert_eq!(resolved.binaries.kubernetes_version, r.kubernetes);
    for (b, body) in [
        (Binary::KubeApiserver, &apiserver),
        (Binary::Kubectl, &kubectl),
        (Binary::Etcd, &etcd),
    ] {
        let path = cache.binary(b);
        assert_eq!(&fs::read(&path).unwrap(), body, "{}", b.file_name());
        let mode = fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o111, 0o111, "{} is executable", b.file_name());
        let origin = resolved
            .origins
            .iter()
            .find(|o| o.name == b.file_name())
            .unwrap();
        let BinarySource::Downloaded {
            url,
            sha256: digest,
        } = &origin.source
        else {
            panic!("{origin:?}");
        };
        assert_eq!(*digest, sha256(body));
        assert!(url.starts_with(&mirror.url), "{url}");
        // The record says where it came from.
        let record = fs::read_to_string(download::record_path(&path)).unwrap();
        assert!(
            record.contains(url.as_str()) && record.contains(digest.as_str()),
            "{record}"
        );
    }
    let etcd_origin = resolved.origins.iter().find(|o| o.name == "etcd").unwrap();
    assert!(
        matches!(&etcd_origin.source, BinarySource::Downloaded { url, .. } if url.ends_with(".tar.gz"))
    );
    assert_no_leftovers(&cache.bin_dir());
    assert!(
        !cache
            .root
            .join("downloads")
            .join(format!("etcd-{}-linux-{}.tar.gz", r.etcd, arch()))
            .exists(),
        "the archive is removed once etcd is out of it"
    );

    // Later runs use the cached downloads without the network (downloads now off, the mirror
    // forgets everything).
    let before = mirror
        .requests(&k8s_path(r.kubernetes, "kube-apiserver"))
        .len();
    inp.download = false;
    let again = resolve(inp.clone()).await.unwrap();
    assert!(
        again
            .origins
            .iter()
            .all(|o| matches!(o.source, BinarySource::Downloaded { .. }))
    );
    assert_eq!(
        mirror
            .requests(&k8s_path(r.kubernetes, "kube-apiserver"))
            .len(),
        before
    );

    // A cached binary whose digest changed is not used.
    fs::write(cache.binary(Binary::KubeApiserver), fake(r.kubernetes, 10)).unwrap();
    let err = resolve(inp.clone()).await.unwrap_err();
    assert!(
        matches!(&err, Error::NotBuilt { missing, .. } if missing == "kube-apiserver"),
        "{err}"
    );
    // …and downloading again replaces it.
    inp.download = true;
    resolve(inp).await.unwrap();
    assert_eq!(
        fs::read(cache.binary(Binary::KubeApiserver)).unwrap(),
        apiserver
    );
}

#[tokio::test]
async fn a_bad_checksum_is_refused_and_nothing_is_left_behind() {
    let tmp = tempfile::tempdir().unwrap();
    let base = tmp.path().join("cache");
    let mirror = Mirror::start();
    let r = DEFAULT_RELEASE;
    let wrong = "f".repeat(64);
    let body = fake(r.kubernetes, 100_000);
    serve_k8s(&mirror, r.kubernetes, "kubectl", &body, Some(&wrong));
    let mut inp = inputs(&base, &[Binary::Kubectl]);
    inp.download = true;
    inp.kubernetes_url = mirror.url.clone();
    let err = resolve(inp).await.unwrap_err();
    let Error::ChecksumMismatch {
        url,
        expected,
        actual,
    } = &err
    else {
        panic!("{err}");
    };
    assert_eq!(
        *url,
        format!("{}{}", mirror.url, k8s_path(r.kubernetes, "kubectl"))
    );
    assert_eq!(*expected, wrong);
    assert_eq!(*actual, sha256(&body));
    let message = err.to_string();
    assert!(
        message.contains(url.as_str())
            && message.contains(&wrong)
            && message.contains(actual.as_str()),
        "{message}"
    );
    let bin = Cache::under(&base, r).bin_dir();
    assert!(!bin.join("kubectl").exists());
    assert!(!download::record_path(&bin.join("kubectl")).exists());
    assert_no_leftovers(&bin);
}

#[tokio::test]
async fn a_missing_checksum_file_is_an_error_naming_its_url() {
    let tmp = tempfile::tempdir().unwrap();
    let mirror = Mirror::start();
    let r = DEFAULT_RELEASE;
    mirror.put(&k8s_path(r.kubernetes, "kubectl"), fake(r.kubernetes, 10));
    let mut inp = inputs(tmp.path(), &[Binary::Kubectl]);
    inp.download = true;
    inp.kubernetes_url = mirror.url.clone();
    let err = resolve(inp).await.unwrap_err();
    assert!(
        matches!(&err, Error::Download { url, reason } if url.ends_with("kubectl.sha256") && reason.contains("404")),
        "{err}"
    );
    assert!(!Cache::under(tmp.path(), r).binary(Binary::Kubectl).exists());
}

/// Downloads `body` to a fresh destination with a partial file of `have` bytes in place.
async fn download_with_partial(
    behaviour: Behaviour,
    have: usize,
    partial_bytes: Option<&[u8]>,
) -> (
    Result<(), Error>,
    Vec<Option<String>>,
    Vec<u8>,
    tempfile::TempDir,
) {
    let tmp = tempfile::tempdir().unwrap();
    let mirror = Mirror::start();
    let body = fake("v1.37.2", 400_000);
    mirror.put("/kube-apiserver", body.clone());
    mirror.behave("/kube-apiserver", behaviour);
    let url = format!("{}/kube-apiserver", mirror.url);
    let dest = tmp.path().join("kube-apiserver");
    if have > 0 {
        let bytes = partial_bytes.map_or_else(|| body[..have].to_vec(), <[u8]>::to_vec);
        fs::write(partial_path(&dest, &url), bytes).unwrap();
    }
    let client = download::client_for(&url, &download::client().unwrap()).unwrap();
    let result = download::download_verified(&client, &url, &sha256(&body), &dest, 0o755).await;
    (result, mirror.requests("/kube-apiserver"), body, tmp)
}

#[tokio::test]
async fn a_partial_download_is_resumed_where_the_server_supports_range() {
    let behaviour = Behaviour {
        honour_range: true,
        ..Default::default()
    };
    let (result, requests, body, tmp) = download_with_partial(behaviour, 123_456, None).await;
    result.unwrap();
    assert_eq!(
        requests,
        [Some("bytes=123456-".to_owned())],
        "one ranged request"
    );
    assert_eq!(fs::read(tmp.path().join("kube-apiserver")).unwrap(), body);
    assert_no_leftovers(tmp.path());
}

#[tokio::test]
async fn a_partial_download_is_restarted_where_the_server_ignores_range() {
    let (result, requests, body, tmp) =
        download_with_partial(Behaviour::default(), 123_456, None).await;
    result.unwrap();
    assert_eq!(requests.len(), 1);
    // The whole file came again and replaced the partial one (not appended to it).
    assert_eq!(fs::read(tmp.path().join("kube-apiserver")).unwrap(), body);
    assert_no_leftovers(tmp.path());
}

#[tokio::test]
async fn a_stale_partial_file_that_does_not_match_is_dropped_and_downloaded_again() {
    let behaviour = Behaviour {
        honour_range: true,
        ..Default::default()
    };
    let junk = vec![b'x'; 1000];
    let (result, requests, body, tmp) = download_with_partial(behaviour, 1000, Some(&junk)).await;
    result.unwrap();
    assert_eq!(requests, [Some("bytes=1000-".to_owned()), None]);
    assert_eq!(fs::read(tmp.path().join("kube-apiserver")).unwrap(), body);
}

#[tokio::test]
async fn a_connection_dropped_mid_body_is_resumed() {
    let behaviour = Behaviour {
        honour_range: true,
        drop_after: Some((100_000, 2)),
        ..Default::default()
    };
    let (result, requests, body, tmp) = download_with_partial(behaviour, 0, None).await;
    result.unwrap();
    assert_eq!(
        requests,
        [
            None,
            Some("bytes=100000-".to_owned()),
            Some("bytes=200000-".to_owned())
        ],
        "each try continues where the last one broke"
    );
    assert_eq!(fs::read(tmp.path().join("kube-apiserver")).unwrap(), body);
    assert_no_leftovers(tmp.path());
}

#[tokio::test]
async fn a_connection_dropped_mid_body_without_range_support_starts_over() {
    let behaviour = Behaviour {
        honour_range: false,
        drop_after: Some((100_000, 1)),
        ..Default::default()
    };
    let (result, requests, body, tmp) = download_with_partial(behaviour, 0, None).await;
    result.unwrap();
    assert_eq!(requests, [None, Some("bytes=100000-".to_owned())]);
    assert_eq!(fs::read(tmp.path().join("kube-apiserver")).unwrap(), body);
}

#[tokio::test]
async fn a_download_that_keeps_breaking_fails_and_installs_nothing() {
    let behaviour = Behaviour {
        honour_range: false,
        drop_after: Some((50_000, 100)),
        ..Default::default()
    };
    let (result, requests, _, tmp) = download_with_partial(behaviour, 0, None).await;
    let err = result.unwrap_err();
    assert!(
        matches!(&err, Error::Download { reason, .. } if reason.contains("broke")),
        "{err}"
    );
    assert_eq!(requests.len(), 4, "every try was made");
    // Never a half-written binary under the final name; the partial file stays for a later
    // run to resume.
    assert!(!tmp.path().join("kube-apiserver").exists());
}

/// An assets directory in setup-envtest's layout with fake binaries of `version`.
fn assets_dir(root: &Path, version: &str) -> PathBuf {
    let dir = root.join("assets");
    for name in ["etcd", "kube-apiserver", "kubectl"] {
        write_exe(&dir.join(name), &fake(version, 10));
    }
    dir
}

#[tokio::test]
async fn kubebuilder_assets_are_used_and_their_version_runs() {
    let tmp = tempfile::tempdir().unwrap();
    let base = tmp.path().join("cache");
    let dir = assets_dir(tmp.path(), "v1.36.1");
    let mut inp = inputs(
        &base,
        &[Binary::Etcd, Binary::KubeApiserver, Binary::Kubectl],
    );
    inp.assets = Some((dir.clone(), "$KUBEBUILDER_ASSETS".into()));
    let resolved = resolve(inp).await.unwrap();
    assert_eq!(resolved.binaries.kubernetes_version, "v1.36.1");
    assert_eq!(resolved.binaries.release.minor, 36);
    for o in &resolved.origins {
        assert_eq!(o.source, BinarySource::Assets { dir: dir.clone() });
        assert_eq!(o.path, dir.join(o.name));
        // The plane runs them through links that resolve to the user's files.
        let link = resolved.binaries.root.join("bin").join(o.name);
        assert_eq!(
            fs::canonicalize(&link).unwrap(),
            fs::canonicalize(&o.path).unwrap()
        );
    }
    assert!(
        resolved
            .binaries
            .root
            .starts_with(base.join("testenv-bins"))
    );
    // The same binaries again: the same link directory.
    let mut inp2 = inputs(
        &base,
        &[Binary::Etcd, Binary::KubeApiserver, Binary::Kubectl],
    );
    inp2.assets = Some((dir.clone(), "$KUBEBUILDER_ASSETS".into()));
    assert_eq!(
        resolve(inp2).await.unwrap().binaries.root,
        resolved.binaries.root
    );
    // Once the assets directory is gone, its link directory is removed when another is made.
    fs::remove_dir_all(&dir).unwrap();
    let other = assets_dir(&tmp.path().join("second"), "v1.36.1");
    let mut inp3 = inputs(
        &base,
        &[Binary::Etcd, Binary::KubeApiserver, Binary::Kubectl],
    );
    inp3.assets = Some((other, "$KUBEBUILDER_ASSETS".into()));
    let third = resolve(inp3).await.unwrap();
    assert!(third.binaries.root.is_dir());
    assert!(
        !resolved.binaries.root.exists(),
        "the dangling link directory is pruned"
    );
}

#[tokio::test]
async fn a_per_binary_override_wins_and_a_missing_one_is_named() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = assets_dir(tmp.path(), "v1.37.2");
    let other = tmp.path().join("other-apiserver");
    write_exe(&other, &fake("v1.37.2", 10));
    let mut inp = inputs(
        tmp.path(),
        &[Binary::Etcd, Binary::KubeApiserver, Binary::Kubectl],
    );
    inp.assets = Some((dir.clone(), "$KUBEBUILDER_ASSETS".into()));
    inp.overrides = vec![(
        Binary::KubeApiserver,
        "TEST_ASSET_KUBE_APISERVER".into(),
        other.clone(),
    )];
    let resolved = resolve(inp.clone()).await.unwrap();
    let apiserver = resolved
        .origins
        .iter()
        .find(|o| o.name == "kube-apiserver")
        .unwrap();
    assert_eq!(apiserver.path, other);
    assert_eq!(
        apiserver.source,
        BinarySource::Override {
            variable: "TEST_ASSET_KUBE_APISERVER".into()
        }
    );
    inp.overrides[0].2 = tmp.path().join("nowhere");
    let err = resolve(inp).await.unwrap_err();
    assert!(matches!(err, Error::Assets(_)), "{err}");
    assert!(
        err.to_string().contains("TEST_ASSET_KUBE_APISERVER")
            && err.to_string().contains("nowhere"),
        "{err}"
    );
}

#[tokio::test]
async fn a_component_the_assets_lack_comes_from_the_cache_or_is_named() {
    let tmp = tempfile::tempdir().unwrap();
    let base = tmp.path().join("cache");
    let r = DEFAULT_RELEASE;
    let dir = assets_dir(tmp.path(), r.kubernetes);
    let wanted = [
        Binary::Etcd,
        Binary::KubeApiserver,
        Binary::KubeControllerManager,
        Binary::Kubectl,
    ];
    let mut inp = inputs(&base, &wanted);
    inp.assets = Some((dir.clone(), "$KUBEBUILDER_ASSETS".into()));
    // Neither in the assets nor in the cache, and neither downloads nor builds allowed.
    let err = resolve(inp.clone()).await.unwrap_err();
    let Error::NotBuilt {
        missing, looked_in, ..
    } = &err
    else {
        panic!("{err}");
    };
    assert_eq!(missing, "kube-controller-manager");
    assert!(looked_in.contains(dir.to_str().unwrap()), "{looked_in}");
    let message = err.to_string();
    for option in [
        "KUBEBUILDER_ASSETS",
        "KCTRL_TESTENV_DOWNLOAD=1",
        "cargo xtask cluster build",
        "build_if_missing(true)",
    ] {
        assert!(message.contains(option), "{option}: {message}");
    }
    // A build of it in the release's cache is used (the rest still from the assets).
    let cache = Cache::under(&base, r);
    write_exe(
        &cache.binary(Binary::KubeControllerManager),
        &fake(r.kubernetes, 10),
    );
    fs::write(
        cache.bin_dir().join(".kube-controller-manager.recipe"),
        Binary::KubeControllerManager.recipe(r),
    )
    .unwrap();
    let resolved = resolve(inp.clone()).await.unwrap();
    let kcm = resolved
        .origins
        .iter()
        .find(|o| o.name == "kube-controller-manager")
        .unwrap();
    assert_eq!(kcm.source, BinarySource::Built);
    assert_eq!(
        fs::canonicalize(resolved.binaries.root.join("bin/kube-controller-manager")).unwrap(),
        fs::canonicalize(cache.binary(Binary::KubeControllerManager)).unwrap()
    );
    assert_eq!(
        resolved
            .origins
            .iter()
            .filter(|o| matches!(o.source, BinarySource::Assets { .. }))
            .count(),
        3
    );
}

#[tokio::test]
async fn a_component_the_assets_lack_is_downloaded_at_their_version() {
    let tmp = tempfile::tempdir().unwrap();
    let base = tmp.path().join("cache");
    let mirror = Mirror::start();
    // A release kctrl does not pin: its kube-scheduler comes from the mirror at that version.
    let dir = assets_dir(tmp.path(), "v1.35.4");
    let scheduler = fake("v1.35.4", 20_000);
    serve_k8s(&mirror, "v1.35.4", "kube-scheduler", &scheduler, None);
    let mut inp = inputs(
        &base,
        &[
            Binary::Etcd,
            Binary::KubeApiserver,
            Binary::KubeScheduler,
            Binary::Kubectl,
        ],
    );
    inp.assets = Some((dir, "$KUBEBUILDER_ASSETS".into()));
    let err = resolve(inp.clone()).await.unwrap_err();
    assert!(matches!(err, Error::Assets(_)), "{err}");
    assert!(
        err.to_string().contains("kube-scheduler")
            && err.to_string().contains("KCTRL_TESTENV_DOWNLOAD=1"),
        "{err}"
    );
    inp.download = true;
    inp.kubernetes_url = mirror.url.clone();
    let resolved = resolve(inp).await.unwrap();
    assert_eq!(resolved.binaries.kubernetes_version, "v1.35.4");
    let s = resolved
        .origins
        .iter()
        .find(|o| o.name == "kube-scheduler")
        .unwrap();
    assert!(
        matches!(&s.source, BinarySource::Downloaded { url, .. } if url.contains("/v1.35.4/")),
        "{s:?}"
    );
    assert_eq!(s.path, base.join("k8s-v1.35.4/bin/kube-scheduler"));
}

#[tokio::test]
async fn an_unsupported_or_unexpected_version_is_refused_naming_it() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = assets_dir(tmp.path(), "v1.31.4");
    let mut inp = inputs(
        tmp.path(),
        &[Binary::Etcd, Binary::KubeApiserver, Binary::Kubectl],
    );
    inp.assets = Some((dir, "$KUBEBUILDER_ASSETS".into()));
    let err = resolve(inp.clone()).await.unwrap_err();
    assert!(matches!(err, Error::UnsupportedVersion(_)), "{err}");
    assert!(
        err.to_string().contains("v1.31.4") && err.to_string().contains("1.33 to 1.37"),
        "{err}"
    );

    let dir = assets_dir(&tmp.path().join("b"), "v1.37.2");
    inp.assets = Some((dir, "$KUBEBUILDER_ASSETS".into()));
    inp.asked = Some((
        Release::parse("1.36").unwrap(),
        "kube_version(\"1.36\")".into(),
    ));
    let err = resolve(inp.clone()).await.unwrap_err();
    assert!(matches!(err, Error::UnsupportedVersion(_)), "{err}");
    assert!(
        err.to_string().contains("v1.37.2") && err.to_string().contains("kube_version(\"1.36\")"),
        "{err}"
    );

    // Not a Kubernetes binary at all.
    let junk = tmp.path().join("c/assets");
    for name in ["etcd", "kube-apiserver", "kubectl"] {
        write_exe(&junk.join(name), b"#!/bin/sh\necho hello\n");
    }
    inp.assets = Some((junk, "$KUBEBUILDER_ASSETS".into()));
    inp.asked = None;
    let err = resolve(inp.clone()).await.unwrap_err();
    assert!(
        matches!(err, Error::Assets(_)) && err.to_string().contains("hello"),
        "{err}"
    );

    inp.assets = Some((tmp.path().join("absent"), "$KUBEBUILDER_ASSETS".into()));
    let err = resolve(inp).await.unwrap_err();
    assert!(
        matches!(err, Error::Assets(_)) && err.to_string().contains("not a directory"),
        "{err}"
    );
}

#[tokio::test]
async fn for_another_patch_a_download_of_that_patch_is_preferred_to_the_pinned_build() {
    let tmp = tempfile::tempdir().unwrap();
    let base = tmp.path().join("cache");
    let r = DEFAULT_RELEASE;
    let patch = format!("v1.{}.0", r.minor);
    assert_ne!(patch, r.kubernetes, "the pinned patch is not .0");
    let dir = assets_dir(tmp.path(), &patch);
    // kctrl's build of the pinned patch…
    let cache = Cache::under(&base, r);
    write_exe(
        &cache.binary(Binary::KubeControllerManager),
        &fake(r.kubernetes, 10),
    );
    fs::write(
        cache.bin_dir().join(".kube-controller-manager.recipe"),
        Binary::KubeControllerManager.recipe(r),
    )
    .unwrap();
    // …and a recorded download of the assets' patch.
    let downloaded = base.join(format!("k8s-{patch}/bin/kube-controller-manager"));
    let body = fake(&patch, 10);
    write_exe(&downloaded, &body);
    // (Recorded as a download from the mirror `inputs` names, as resolving expects.)
    let url = format!(
        "http://127.0.0.1:9{}",
        k8s_path(&patch, "kube-controller-manager")
    );
    Record {
        source: download::Source {
            checksum_url: format!("{url}.sha256"),
            url,
            version: patch.clone(),
            archive: None,
        },
        sha256: sha256(&body),
        downloaded_at: "2026-11-30T09:00:00Z".into(),
    }
    .write(&downloaded)
    .unwrap();
    let wanted = [
        Binary::Etcd,
        Binary::KubeApiserver,
        Binary::KubeControllerManager,
        Binary::Kubectl,
    ];
    let mut inp = inputs(&base, &wanted);
    inp.assets = Some((dir, "$KUBEBUILDER_ASSETS".into()));
    let kcm = |r: &Resolved| {
        r.origins
            .iter()
            .find(|o| o.name == "kube-controller-manager")
            .cloned()
            .unwrap()
    };
    let resolved = resolve(inp.clone()).await.unwrap();
    assert_eq!(resolved.binaries.kubernetes_version, patch);
    assert_eq!(kcm(&resolved).path, downloaded);
    assert!(matches!(
        kcm(&resolved).source,
        BinarySource::Downloaded { .. }
    ));
    // Without it, the pinned build of the same minor.
    fs::remove_file(&downloaded).unwrap();
    let resolved = resolve(inp).await.unwrap();
    assert_eq!(kcm(&resolved).source, BinarySource::Built);
    assert_eq!(
        kcm(&resolved).path,
        cache.binary(Binary::KubeControllerManager)
    );
}

/// A build that compiles nothing: fake binaries of the cache's release, with their recipes.
fn fake_build(cache: &Cache, wanted: &[Binary]) -> Result<(), Error> {
    for &b in wanted {
        write_exe(&cache.binary(b), &fake(cache.release.kubernetes, 10));
        fs::write(
            cache.bin_dir().join(format!(".{}.recipe", b.file_name())),
            b.recipe(cache.release),
        )
        .unwrap();
    }
    Ok(())
}

const PLANE: [Binary; 3] = [Binary::Etcd, Binary::KubeApiserver, Binary::Kubectl];

#[tokio::test]
async fn overrides_whose_file_names_differ_are_the_files_that_run() {
    let tmp = tempfile::tempdir().unwrap();
    let base = tmp.path().join("cache");
    let bin = tmp.path().join("x/bin");
    let custom = |b: Binary| bin.join(format!("{}-custom", b.file_name()));
    let mut inp = inputs(&base, &PLANE);
    for b in PLANE {
        write_exe(&custom(b), &fake(DEFAULT_RELEASE.kubernetes, 10));
        // Files of the canonical names beside them, which must not run.
        write_exe(&bin.join(b.file_name()), b"#!/bin/sh\necho decoy\n");
        inp.overrides.push((b, override_variable(b), custom(b)));
    }
    let resolved = resolve(inp).await.unwrap();
    assert_ne!(resolved.binaries.root, tmp.path().join("x"));
    for b in PLANE {
        let link = resolved.binaries.root.join("bin").join(b.file_name());
        assert_eq!(
            fs::canonicalize(&link).unwrap(),
            fs::canonicalize(custom(b)).unwrap(),
            "{}",
            b.file_name()
        );
    }
}

/// `path` (absolute) as a path relative to the current directory.
fn relative_to_cwd(path: &Path) -> PathBuf {
    let cwd = std::env::current_dir().unwrap();
    let mut rel = PathBuf::new();
    for _ in cwd.components().skip(1) {
        rel.push("..");
    }
    rel.join(path.strip_prefix("/").unwrap())
}

#[tokio::test]
async fn a_relative_cache_directory_gives_links_that_resolve() {
    let tmp = tempfile::tempdir().unwrap();
    let absolute_base = tmp.path().join("cache");
    let base = relative_to_cwd(&absolute_base);
    let r = DEFAULT_RELEASE;
    let dir = assets_dir(tmp.path(), r.kubernetes);
    let cache = Cache::under(&absolute_base, r);
    fake_build(&cache, &[Binary::KubeControllerManager]).unwrap();
    let mut inp = inputs(
        &base,
        &[
            Binary::Etcd,
            Binary::KubeApiserver,
            Binary::KubeControllerManager,
            Binary::Kubectl,
        ],
    );
    inp.assets = Some((dir, "$KUBEBUILDER_ASSETS".into()));
    let resolved = resolve(inp).await.unwrap();
    assert!(
        resolved.binaries.root.is_absolute(),
        "{}",
        resolved.binaries.root.display()
    );
    let link = resolved.binaries.root.join("bin/kube-controller-manager");
    let target = fs::read_link(&link).unwrap();
    assert!(target.is_absolute(), "{}", target.display());
    assert_eq!(
        fs::canonicalize(&link).unwrap(),
        fs::canonicalize(cache.binary(Binary::KubeControllerManager)).unwrap()
    );
}

#[tokio::test]
async fn a_recorded_download_of_another_mirror_or_etcd_is_not_used() {
    let tmp = tempfile::tempdir().unwrap();
    let base = tmp.path().join("cache");
    let r = DEFAULT_RELEASE;
    let (first, second) = (Mirror::start(), Mirror::start());
    let kubectl = fake(r.kubernetes, 1_000);
    let etcd = fake("v0-etcd", 1_000);
    for (i, m) in [&first, &second].into_iter().enumerate() {
        serve_k8s(m, r.kubernetes, "kubectl", &kubectl, None);
        serve_etcd(m, r.etcd, &etcd, &tmp.path().join(format!("scratch-{i}")));
    }
    let mut inp = inputs(&base, &[Binary::Etcd, Binary::Kubectl]);
    inp.download = true;
    inp.kubernetes_url = first.url.clone();
    inp.etcd_url = first.url.clone();
    resolve(inp.clone()).await.unwrap();
    // The same mirror, downloads off: from the cache.
    inp.download = false;
    resolve(inp.clone()).await.unwrap();
    // Another mirror: the records name the first one, so the files are not used…
    inp.kubernetes_url = second.url.clone();
    inp.etcd_url = second.url.clone();
    let err = resolve(inp.clone()).await.unwrap_err();
    assert!(
        matches!(&err, Error::NotBuilt { missing, .. } if missing == "etcd, kubectl"),
        "{err}"
    );
    // …but replaced by downloads from the new one when allowed.
    inp.download = true;
    let resolved = resolve(inp.clone()).await.unwrap();
    for o in &resolved.origins {
        assert!(
            matches!(&o.source, BinarySource::Downloaded { url, .. } if url.starts_with(&second.url)),
            "{o:?}"
        );
    }
    // A recorded etcd of another etcd release (the pin moved since) is not used either.
    let record = download::record_path(&Cache::under(&base, r).binary(Binary::Etcd));
    let text = fs::read_to_string(&record).unwrap();
    assert!(text.contains(r.etcd), "{text}");
    fs::write(&record, text.replace(r.etcd, "v3.0.0")).unwrap();
    inp.download = false;
    let err = resolve(inp).await.unwrap_err();
    assert!(
        matches!(&err, Error::NotBuilt { missing, .. } if missing == "etcd"),
        "{err}"
    );
}

#[test]
fn a_version_check_reads_more_output_than_a_pipe_holds() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("kube-apiserver");
    write_exe(
        &path,
        b"#!/bin/sh\nhead -c 300000 /dev/zero | tr '\\0' x >&2\n\
          head -c 300000 /dev/zero | tr '\\0' x\necho\necho 'Kubernetes v1.37.2'\n",
    );
    let v = binary_version_within(&path, Duration::from_secs(10)).unwrap();
    assert_eq!(v.text, "v1.37.2");
}

/// Whether process `pid` runs (a zombie does not).
fn alive(pid: u32) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            stat.rsplit_once(") ")
                .and_then(|(_, rest)| rest.chars().next())
                != Some('Z')
        }
        Err(_) => false,
    }
}

#[test]
fn a_version_check_that_hangs_is_killed_with_its_children() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("kube-apiserver");
    let pid_file = tmp.path().join("child.pid");
    write_exe(
        &path,
        format!(
            "#!/bin/sh\nsleep 300 &\necho $! > {}\nwait\n",
            pid_file.display()
        )
        .as_bytes(),
    );
    let t0 = Instant::now();
    let err = binary_version_within(&path, Duration::from_millis(500)).unwrap_err();
    assert!(err.to_string().contains("did not answer"), "{err}");
    assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());
    let pid: u32 = fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while alive(pid) {
        assert!(
            Instant::now() < deadline,
            "the wrapper's child {pid} still runs"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[tokio::test]
async fn a_failed_download_falls_back_to_the_allowed_build() {
    let tmp = tempfile::tempdir().unwrap();
    let mirror = Mirror::start();
    let r = DEFAULT_RELEASE;
    let mut inp = inputs(
        &tmp.path().join("cache"),
        &[Binary::KubeControllerManager, Binary::Kubectl],
    );
    inp.download = true;
    inp.build = true;
    // The mirror has nothing: every download fails (404).
    inp.kubernetes_url = mirror.url.clone();
    let resolved = resolve_with(inp, fake_build).await.unwrap();
    for o in &resolved.origins {
        assert_eq!(o.source, BinarySource::Built, "{o:?}");
    }
    assert!(
        !mirror
            .requests(&k8s_path(r.kubernetes, "kube-controller-manager.sha256"))
            .is_empty(),
        "the download was tried first"
    );
}

#[tokio::test]
async fn a_version_that_is_no_published_release_is_not_downloaded() {
    let tmp = tempfile::tempdir().unwrap();
    let mirror = Mirror::start();
    let dir = assets_dir(tmp.path(), "v1.37.2-dirty");
    // etcd, which the assets lack, is of the version kctrl pins: that one is downloaded.
    fs::remove_file(dir.join("etcd")).unwrap();
    let r = DEFAULT_RELEASE;
    serve_etcd(
        &mirror,
        r.etcd,
        &fake("v0-etcd", 1_000),
        &tmp.path().join("scratch"),
    );
    let mut inp = inputs(
        &tmp.path().join("cache"),
        &[
            Binary::Etcd,
            Binary::KubeApiserver,
            Binary::KubeScheduler,
            Binary::Kubectl,
        ],
    );
    inp.assets = Some((dir, "$KUBEBUILDER_ASSETS".into()));
    inp.download = true;
    inp.kubernetes_url = mirror.url.clone();
    inp.etcd_url = mirror.url.clone();
    let err = resolve(inp).await.unwrap_err();
    assert!(
        matches!(&err, Error::Assets(m) if m.contains("lacks kube-scheduler ")),
        "only kube-scheduler is missing: {err}"
    );
    let message = err.to_string();
    assert!(
        message.contains("v1.37.2-dirty") && message.contains("not a published release"),
        "{message}"
    );
    assert!(
        mirror
            .requests(&k8s_path("v1.37.2-dirty", "kube-scheduler.sha256"))
            .is_empty()
    );
}

#[tokio::test]
async fn for_another_patch_the_missing_error_offers_the_pinned_build() {
    let tmp = tempfile::tempdir().unwrap();
    let base = tmp.path().join("cache");
    let r = DEFAULT_RELEASE;
    let patch = format!("v1.{}.0", r.minor);
    let dir = assets_dir(tmp.path(), &patch);
    let mut inp = inputs(
        &base,
        &[
            Binary::Etcd,
            Binary::KubeApiserver,
            Binary::KubeControllerManager,
            Binary::Kubectl,
        ],
    );
    inp.assets = Some((dir, "$KUBEBUILDER_ASSETS".into()));
    let message = resolve(inp).await.unwrap_err().to_string();
    let build = format!("cargo xtask cluster build --kube-version {}", r.kubernetes);
    let pinned = Cache::under(&base, r).root.display().to_string();
    let exact = base.join(format!("k8s-{patch}")).display().to_string();
    for part in [
        "kube-controller-manager",
        "build_if_missing(true)",
        "KCTRL_TESTENV_DOWNLOAD=1",
        build.as_str(),
        pinned.as_str(),
        exact.as_str(),
    ] {
        assert!(message.contains(part), "{part}: {message}");
    }
}

#[tokio::test]
async fn credentials_in_a_mirror_url_are_never_shown_or_recorded() {
    let tmp = tempfile::tempdir().unwrap();
    let mirror = Mirror::start();
    let r = DEFAULT_RELEASE;
    let body = fake(r.kubernetes, 1_000);
    serve_k8s(&mirror, r.kubernetes, "kubectl", &body, None);
    serve_k8s(
        &mirror,
        r.kubernetes,
        "kube-scheduler",
        &body,
        Some(&"f".repeat(64)),
    );
    let secret_url = mirror.url.replacen("http://", "http://user:s3cret@", 1);
    let with = |dir: &str, b: Binary| {
        let mut inp = inputs(&tmp.path().join(dir), &[b]);
        inp.download = true;
        inp.kubernetes_url = secret_url.clone();
        inp
    };
    let resolved = resolve(with("a", Binary::Kubectl)).await.unwrap();
    let o = &resolved.origins[0];
    assert!(
        matches!(&o.source, BinarySource::Downloaded { url, .. } if url.starts_with(&mirror.url)),
        "{o:?}"
    );
    let record = fs::read_to_string(download::record_path(&o.path)).unwrap();
    assert!(!record.contains("s3cret"), "{record}");
    // Used again from the cache with the same URL.
    let mut again = with("a", Binary::Kubectl);
    again.download = false;
    resolve(again).await.unwrap();
    // Nor in errors: a wrong digest, a missing file.
    let err = resolve(with("b", Binary::KubeScheduler)).await.unwrap_err();
    assert!(matches!(err, Error::ChecksumMismatch { .. }), "{err}");
    assert!(!format!("{err} {err:?}").contains("s3cret"), "{err:?}");
    let err = resolve(with("c", Binary::KubeControllerManager))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Download { .. }), "{err}");
    assert!(!format!("{err} {err:?}").contains("s3cret"), "{err:?}");
}

#[test]
fn only_versions_of_published_releases_are_downloadable() {
    for yes in [
        "v1.37.2",
        "v1.37.0-rc.1",
        "v1.38.0-alpha.3",
        "v1.36.0-beta.0",
    ] {
        assert!(is_published_release(yes), "{yes}");
    }
    for no in [
        "v1.37.2-dirty",
        "v1.37.2+k3s1",
        "v1.37.0-alpha.1.123+abcdef",
        "v1.37",
        "v1.37.x",
        "v2.0.0",
        "1.37.2",
        "v1.37.0-rc.",
    ] {
        assert!(!is_published_release(no), "{no}");
    }
}

#[test]
fn a_version_with_unexpected_characters_is_refused() {
    assert_eq!(parse_version("Kubernetes v1.37.2;rm"), None);
    assert_eq!(parse_version("Kubernetes v1.37.2/../../x"), None);
    assert_eq!(parse_version("Kubernetes v1.37.2\u{1b}[0m"), None);
    for ok in ["v1.37.2+k3s1", "v1.37.2-dirty", "v1.37.0-rc.1", "v1.37.2"] {
        assert_eq!(
            parse_version(&format!("Kubernetes {ok}")).map(|v| v.text),
            Some(ok.to_owned())
        );
    }
}

#[test]
fn writing_a_record_leaves_the_build_s_temporary_file_alone() {
    let tmp = tempfile::tempdir().unwrap();
    let bin = tmp.path().join("kube-apiserver");
    fs::write(&bin, b"x").unwrap();
    // What `go build` writes before renaming it to kube-apiserver.
    let go_tmp = tmp.path().join(".kube-apiserver.tmp");
    fs::write(&go_tmp, b"go build output").unwrap();
    Record {
        source: download::Source {
            url: "http://mirror/kube-apiserver".into(),
            checksum_url: "http://mirror/kube-apiserver.sha256".into(),
            version: "v1.37.2".into(),
            archive: None,
        },
        sha256: sha256(b"x"),
        downloaded_at: "2026-11-30T09:00:00Z".into(),
    }
    .write(&bin)
    .unwrap();
    assert_eq!(fs::read(&go_tmp).unwrap(), b"go build output");
}

#[tokio::test]
async fn a_short_partial_answer_is_continued_not_restarted() {
    let behaviour = Behaviour {
        honour_range: true,
        max_range_len: Some(100_000),
        ..Default::default()
    };
    let (result, requests, body, tmp) = download_with_partial(behaviour, 123_456, None).await;
    result.unwrap();
    assert_eq!(
        requests,
        [
            Some("bytes=123456-".to_owned()),
            Some("bytes=223456-".to_owned()),
            Some("bytes=323456-".to_owned())
        ]
    );
    assert_eq!(fs::read(tmp.path().join("kube-apiserver")).unwrap(), body);
    assert_no_leftovers(tmp.path());
}

#[tokio::test]
async fn a_body_cut_short_without_a_length_is_downloaded_again() {
    let behaviour = Behaviour {
        drop_after: Some((100_000, 1)),
        no_length: true,
        ..Default::default()
    };
    let (result, requests, body, tmp) = download_with_partial(behaviour, 0, None).await;
    result.unwrap();
    assert_eq!(requests, [None, None]);
    assert_eq!(fs::read(tmp.path().join("kube-apiserver")).unwrap(), body);
}

#[test]
fn plain_http_from_another_machine_is_warned_about_once_per_host() {
    let mut warned = Vec::new();
    assert!(warn_if_plain_http("http://mirror.example/a", &mut warned));
    assert!(!warn_if_plain_http("http://mirror.example/b", &mut warned));
    assert!(!warn_if_plain_http(
        "https://dl.k8s.io/release/x",
        &mut warned
    ));
    assert!(!warn_if_plain_http("http://127.0.0.1:8080/x", &mut warned));
    assert!(!warn_if_plain_http("http://localhost/x", &mut warned));
    assert!(warn_if_plain_http(
        "http://user:s3cret@other.example:8080/x",
        &mut warned
    ));
    assert_eq!(warned, ["mirror.example", "other.example:8080"]);
}

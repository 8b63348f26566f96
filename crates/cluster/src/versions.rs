//! The supported Kubernetes releases with everything pinned along with each (etcd, KWOK, the
//! staging modules, Go versions, kind's node image), the binaries built from them and the Go
//! wrapper modules that build them.
//!
//! Nothing here is Go source: the `go.mod` texts are generated at build time into the cache
//! directory of the selected release (see `toolchain.rs`), never into the repository.

use anyhow::{Result, bail};

/// `gitMajor` for the version ldflags (every supported release is 1.x).
pub const K8S_MAJOR: &str = "1";

/// The variable that selects the release where a command takes `--kube-version`.
pub const KUBE_VERSION_ENV: &str = "KCTRL_KUBE_VERSION";

/// One Kubernetes release the local control plane can run, with everything pinned along with
/// it. The go.mod texts and ldflags built from it are generated at build time into that
/// release's own cache directory (see `toolchain.rs`).
#[derive(Debug, PartialEq, Eq)]
pub struct Release {
    /// The k8s.io/kubernetes module version, and what `/version` reports (`v1.37.2`).
    pub kubernetes: &'static str,
    /// Minor version (`gitMinor`; `--kube-version 1.<minor>` picks this release).
    pub minor: u32,
    /// The published version of every staging module that matches [`Release::kubernetes`].
    pub staging: &'static str,
    /// Staging modules that k8s.io/kubernetes's go.mod maps to `./staging/...`, which is not
    /// part of the module zip, so the wrapper replaces each with its published version.
    pub staging_modules: &'static [&'static str],
    /// The `go` line of k8s.io/kubernetes's go.mod, mirrored by the wrapper (the main module's
    /// `go`/`godebug` lines decide the GODEBUG defaults).
    pub go: &'static str,
    /// The `godebug default=` value of that go.mod.
    pub godebug: &'static str,
    /// The etcd release paired with it (kubeadm's `DefaultEtcdVersion` and
    /// `build/dependencies.yaml` of the same k8s.io/kubernetes version).
    pub etcd: &'static str,
    /// The `go` line of go.etcd.io/etcd/server/v3's go.mod at [`Release::etcd`].
    pub etcd_go: &'static str,
    /// KWOK release.
    pub kwok: &'static str,
    /// The `go` line of sigs.k8s.io/kwok's go.mod at [`Release::kwok`].
    pub kwok_go: &'static str,
    /// Oldest Go minor version (1.x) able to build all of the above.
    pub go_min_minor: u32,
    /// The package upstream's e2e main imports to print API objects as YAML in failure
    /// messages (it moved between releases); linked into `e2e.test` as upstream does.
    pub e2e_format_package: &'static str,
    /// The kind release whose default node image is this minor (the `cargo xtask e2e
    /// --cluster kind` path).
    pub kind: &'static str,
    /// That kind release's default node image for this minor, pinned by digest (kind publishes
    /// node images for some patches only, so the patch may differ from
    /// [`Release::kubernetes`]).
    pub kind_node_image: &'static str,
}

/// Staging modules of k8s.io/kubernetes 1.36 and 1.37: the two go.mod files list the same 33
/// `=> ./staging/...` replaces.
const STAGING_MODULES_1_36_AND_1_37: &[&str] = &[
    "api",
    "apiextensions-apiserver",
    "apimachinery",
    "apiserver",
    "cli-runtime",
    "client-go",
    "cloud-provider",
    "cluster-bootstrap",
    "code-generator",
    "component-base",
    "component-helpers",
    "controller-manager",
    "cri-api",
    "cri-client",
    "cri-streaming",
    "csi-translation-lib",
    "dynamic-resource-allocation",
    "endpointslice",
    "externaljwt",
    "kms",
    "kube-aggregator",
    "kube-controller-manager",
    "kube-proxy",
    "kube-scheduler",
    "kubectl",
    "kubelet",
    "metrics",
    "mount-utils",
    "pod-security-admission",
    "sample-apiserver",
    "sample-cli-plugin",
    "sample-controller",
    "streaming",
];

/// Every supported release, newest first; the first is the default.
pub static RELEASES: &[Release] = &[
    // Newest v1.37 patch on the module proxy. etcd 3.7.0 (go 1.26) as dependencies.yaml and
    // kubeadm say; KWOK v0.8.0, the newest release, is built against the 1.36 libraries and
    // works against a 1.37 apiserver. kind v0.33.0 is the first release defaulting to 1.37.
    Release {
        kubernetes: "v1.37.2",
        minor: 37,
        staging: "v0.37.2",
        staging_modules: STAGING_MODULES_1_36_AND_1_37,
        go: "1.26.0",
        godebug: "go1.26",
        etcd: "v3.7.0",
        etcd_go: "1.26",
        kwok: "v0.8.0",
        kwok_go: "1.26.0",
        go_min_minor: 26,
        e2e_format_package: "k8s.io/kubernetes/test/utils/ktesting/format",
        kind: "v0.33.0",
        kind_node_image: "kindest/node:v1.37.0@sha256:\
                          a1ed56cfb0e7b93589bdf97c8cd566405a265939e3620fc4f5de89adff580ae5",
    },
    // Newest v1.36 patch on the module proxy (`go list -m k8s.io/kubernetes@v1.36.6`: not
    // available). etcd 3.6.8 (go 1.24.0); kind v0.32.0 is the first release defaulting to 1.36.
    Release {
        kubernetes: "v1.36.5",
        minor: 36,
        staging: "v0.36.5",
        staging_modules: STAGING_MODULES_1_36_AND_1_37,
        go: "1.26.0",
        godebug: "go1.26",
        etcd: "v3.6.8",
        etcd_go: "1.24.0",
        kwok: "v0.8.0",
        kwok_go: "1.26.0",
        go_min_minor: 26,
        e2e_format_package: "k8s.io/kubernetes/test/utils/format",
        kind: "v0.32.0",
        kind_node_image: "kindest/node:v1.36.1@sha256:\
                          3489c7674813ba5d8b1a9977baea8a6e553784dab7b84759d1014dbd78f7ebd5",
    },
];

/// The release used when none is selected.
pub static DEFAULT_RELEASE: &Release = &RELEASES[0];

impl Release {
    /// The release whose Kubernetes version is exactly `version` (`v1.37.2`), as recorded in
    /// a cluster's state file.
    pub fn exact(version: &str) -> Option<&'static Release> {
        RELEASES.iter().find(|r| r.kubernetes == version)
    }

    /// The release a user named: `1.37`, `1.37.2` or `v1.37.2` (a minor alone picks our
    /// pinned patch). Anything else, or a release we do not pin, is refused with the list of
    /// supported ones.
    pub fn parse(text: &str) -> Result<&'static Release> {
        let trimmed = text.trim();
        let bare = trimmed.strip_prefix('v').unwrap_or(trimmed);
        let parts: Vec<&str> = bare.split('.').collect();
        let numeric = parts
            .iter()
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
        if !numeric || !(2..=3).contains(&parts.len()) {
            bail!(
                "{text:?} is not a Kubernetes version: write 1.<minor> or 1.<minor>.<patch>, with \
                 or without a leading v (e.g. 1.{0} or v1.{0}.{1}); supported: {2}",
                DEFAULT_RELEASE.minor,
                DEFAULT_RELEASE.patch(),
                supported_list()
            );
        }
        let (major, minor) = (parts[0], parts[1].parse::<u32>().ok());
        let found = RELEASES
            .iter()
            .find(|r| major == K8S_MAJOR && minor == Some(r.minor));
        let Some(release) = found else {
            bail!(
                "Kubernetes {bare} is not supported by the local control plane; supported: {}",
                supported_list()
            );
        };
        if let Some(patch) = parts.get(2)
            && patch.parse::<u32>().ok() != Some(release.patch())
        {
            bail!(
                "Kubernetes v{bare} is not supported: for 1.{} the local control plane pins {} \
                 (write 1.{} to get it); supported: {}",
                release.minor,
                release.kubernetes,
                release.minor,
                supported_list()
            );
        }
        Ok(release)
    }

    /// `1.37`.
    pub fn minor_name(&self) -> String {
        format!("{K8S_MAJOR}.{}", self.minor)
    }

    /// The patch number of [`Release::kubernetes`].
    pub fn patch(&self) -> u32 {
        self.kubernetes
            .rsplit('.')
            .next()
            .and_then(|p| p.parse().ok())
            .expect("release versions are v1.<minor>.<patch>")
    }
}

/// `v1.37.2 (default), v1.36.5`.
pub fn supported_list() -> String {
    RELEASES
        .iter()
        .map(|r| {
            if std::ptr::eq(r, DEFAULT_RELEASE) {
                format!("{} (default)", r.kubernetes)
            } else {
                r.kubernetes.to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// KWOK stage files (paths inside the sigs.k8s.io/kwok module) used as they are: nodes become
/// Ready and keep a lease, Job pods complete, deleted pods go away immediately (what `kwokctl`
/// configures by default). KWOK's pod-ready stage is replaced by ours (see `stages.rs`), which
/// leaves pods with unpullable images Pending; a cache built when it was listed here still holds
/// it, unused.
pub const KWOK_STAGE_FILES: &[&str] = &[
    "kustomize/stage/node/fast/node-initialize.yaml",
    "kustomize/stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
    "kustomize/stage/pod/fast/pod-complete.yaml",
    "kustomize/stage/pod/fast/pod-delete.yaml",
];

/// One Go wrapper module; each builds one or more binaries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wrapper {
    /// k8s.io/kubernetes with the staging replaces.
    Kubernetes,
    /// go.etcd.io/etcd/server/v3 (its root package is etcd's `main`).
    Etcd,
    /// sigs.k8s.io/kwok.
    Kwok,
    /// Upstream's e2e test binary (`e2e.test`): the [`Wrapper::Kubernetes`] requires and
    /// replaces plus one generated `_test.go` (see [`e2e_test_file`]); `cargo xtask conformance`.
    E2e,
}

impl Wrapper {
    /// Directory name under `<cache>/src/`.
    pub fn dir_name(self) -> &'static str {
        match self {
            Wrapper::Kubernetes => "kubernetes",
            Wrapper::Etcd => "etcd",
            Wrapper::Kwok => "kwok",
            Wrapper::E2e => "e2e",
        }
    }

    /// The upstream module this wrapper requires, with its version in `release`.
    pub fn upstream(self, release: &Release) -> (&'static str, &'static str) {
        match self {
            Wrapper::Kubernetes | Wrapper::E2e => ("k8s.io/kubernetes", release.kubernetes),
            Wrapper::Etcd => ("go.etcd.io/etcd/server/v3", release.etcd),
            Wrapper::Kwok => ("sigs.k8s.io/kwok", release.kwok),
        }
    }

    /// The generated `go.mod` text for `release`.
    pub fn go_mod(self, release: &Release) -> String {
        let (module, version) = self.upstream(release);
        let mut out = format!(
            "// Generated by `cargo xtask cluster`; throw-away wrapper, not part of the repository.\n\
             module kctrl.local/{}bin\n\n",
            self.dir_name()
        );
        // The `go`/`godebug` lines of the main module decide the GODEBUG defaults, so they
        // mirror the upstream module's own go.mod.
        match self {
            Wrapper::Kubernetes | Wrapper::E2e => out.push_str(&format!(
                "go {}\n\ngodebug default={}\n\n",
                release.go, release.godebug
            )),
            Wrapper::Etcd => out.push_str(&format!("go {}\n\n", release.etcd_go)),
            Wrapper::Kwok => out.push_str(&format!("go {}\n\n", release.kwok_go)),
        }
        out.push_str(&format!("require {module} {version}\n"));
        if matches!(self, Wrapper::Kubernetes | Wrapper::E2e) {
            out.push_str("\nreplace (\n");
            for m in release.staging_modules {
                out.push_str(&format!("\tk8s.io/{m} => k8s.io/{m} {}\n", release.staging));
            }
            out.push_str(")\n");
        }
        let tools: Vec<&str> = Binary::ALL
            .iter()
            .filter(|b| b.wrapper() == self)
            .map(|b| b.package())
            .collect();
        if !tools.is_empty() {
            out.push_str("\ntool (\n");
            for package in tools {
                out.push_str(&format!("\t{package}\n"));
            }
            out.push_str(")\n");
        }
        out
    }

    /// Source files generated next to the go.mod (before `go mod tidy`, which keeps only the
    /// requirements they import), as (file name, text).
    pub fn files(self, release: &Release) -> Vec<(&'static str, String)> {
        match self {
            Wrapper::E2e => vec![("conformance_test.go", e2e_test_file(release))],
            _ => Vec::new(),
        }
    }
}

/// File name of upstream's e2e test binary in `<cache>/bin`.
pub const E2E_TEST_BINARY: &str = "e2e.test";

/// `go test -c` flags of [`E2E_TEST_BINARY`] (besides `-o`): no vet (nothing of ours to check),
/// upstream's build tags, trimmed paths and the Kubernetes binaries' version ldflags.
pub fn e2e_test_build_args(release: &Release, build_date: &str) -> Vec<String> {
    vec![
        "test".to_owned(),
        "-c".to_owned(),
        "-vet=off".to_owned(),
        "-trimpath".to_owned(),
        "-tags".to_owned(),
        Binary::KubeApiserver.build_tags().to_owned(),
        "-ldflags".to_owned(),
        Binary::KubeApiserver.ldflags(release, build_date),
    ]
}

/// What [`E2E_TEST_BINARY`] is built from; a different recipe means "rebuild".
pub fn e2e_test_recipe(release: &Release) -> String {
    let (module, version) = Wrapper::E2e.upstream(release);
    let mut recipe = format!(
        "{E2E_TEST_BINARY} {module}@{version} {:?}",
        e2e_test_build_args(release, "<build-date>")
    );
    // The generated test file decides which specs are compiled in.
    for (name, text) in Wrapper::E2e.files(release) {
        recipe.push_str(&format!(" {name}:{:016x}", fnv1a(text.as_bytes())));
    }
    recipe
}

/// 64-bit FNV-1a (a stable content fingerprint for recipes; not for security).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The one Go file of the [`Wrapper::E2e`] module for `release`: `E2E_TEST_TEMPLATE` with
/// the release's YAML-formatting package.
pub fn e2e_test_file(release: &Release) -> String {
    E2E_TEST_TEMPLATE.replace(E2E_FORMAT_PLACEHOLDER, release.e2e_format_package)
}

/// Where [`E2E_TEST_TEMPLATE`] names [`Release::e2e_format_package`].
const E2E_FORMAT_PLACEHOLDER: &str = "{format-package}";

/// A test main that links upstream's e2e framework with only the `apps` specs (where the
/// Deployment specs live) and runs them. Written into the cache at build time; it is the glue
/// a `go test -c` needs, not product code.
const E2E_TEST_TEMPLATE: &str = r#"// Generated by `cargo xtask conformance`; throw-away, not part of the repository.

package conformance

import (
	"flag"
	"os"
	"strings"
	"testing"

	e2esuite "k8s.io/kubernetes/test/e2e"
	"k8s.io/kubernetes/test/e2e/framework"
	"k8s.io/kubernetes/test/e2e/framework/config"
	"k8s.io/kubernetes/test/e2e/framework/testfiles"

	conformancefs "k8s.io/kubernetes/test/conformance/testdata"
	manifestsfs "k8s.io/kubernetes/test/e2e/testing-manifests"
	fixturesfs "k8s.io/kubernetes/test/fixtures"

	// The specs: only sig-apps (Deployment, ReplicaSet, ...).
	_ "k8s.io/kubernetes/test/e2e/apps"
	_ "k8s.io/kubernetes/test/e2e/feature"

	// Framework extensions the full suite links in as well.
	_ "k8s.io/kubernetes/test/e2e/framework/debug/init"
	_ "k8s.io/kubernetes/test/e2e/framework/metrics/init"
	_ "k8s.io/kubernetes/test/e2e/framework/node/init"
	_ "{format-package}"
)

func TestMain(m *testing.M) {
	config.CopyFlags(config.Flags, flag.CommandLine)
	framework.RegisterCommonFlags(flag.CommandLine)
	framework.RegisterClusterFlags(flag.CommandLine)
	flag.Parse()
	if flag.NArg() > 0 {
		os.Stderr.WriteString("unexpected arguments: " + strings.Join(flag.Args(), " ") + "\n")
		os.Exit(2)
	}
	for _, fs := range []testfiles.FileSource{
		manifestsfs.GetE2ETestingManifestsFS(),
		fixturesfs.GetTestFixturesFS(),
		conformancefs.GetConformanceTestdataFS(),
	} {
		testfiles.AddFileSource(fs)
	}
	framework.AfterReadingAllFlags(&framework.TestContext)
	os.Exit(m.Run())
}

func TestDeploymentConformance(t *testing.T) {
	e2esuite.RunE2ETests(t)
}
"#;

/// A binary of the local control plane.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Binary {
    /// etcd server.
    Etcd,
    /// kube-apiserver.
    KubeApiserver,
    /// kube-controller-manager.
    KubeControllerManager,
    /// kube-scheduler.
    KubeScheduler,
    /// kubectl of the same release (xtask's own client; never a kubectl from PATH).
    Kubectl,
    /// KWOK controller.
    Kwok,
}

impl Binary {
    /// Build order: etcd first (smallest), then the Kubernetes binaries, then KWOK.
    pub const ALL: [Binary; 6] = [
        Binary::Etcd,
        Binary::KubeApiserver,
        Binary::KubeControllerManager,
        Binary::KubeScheduler,
        Binary::Kubectl,
        Binary::Kwok,
    ];

    /// File name in `<cache>/bin`.
    pub fn file_name(self) -> &'static str {
        match self {
            Binary::Etcd => "etcd",
            Binary::KubeApiserver => "kube-apiserver",
            Binary::KubeControllerManager => "kube-controller-manager",
            Binary::KubeScheduler => "kube-scheduler",
            Binary::Kubectl => "kubectl",
            Binary::Kwok => "kwok",
        }
    }

    /// The wrapper module that builds it.
    pub fn wrapper(self) -> Wrapper {
        match self {
            Binary::Etcd => Wrapper::Etcd,
            Binary::Kwok => Wrapper::Kwok,
            _ => Wrapper::Kubernetes,
        }
    }

    /// The Go main package.
    pub fn package(self) -> &'static str {
        match self {
            Binary::Etcd => "go.etcd.io/etcd/server/v3",
            Binary::KubeApiserver => "k8s.io/kubernetes/cmd/kube-apiserver",
            Binary::KubeControllerManager => "k8s.io/kubernetes/cmd/kube-controller-manager",
            Binary::KubeScheduler => "k8s.io/kubernetes/cmd/kube-scheduler",
            Binary::Kubectl => "k8s.io/kubernetes/cmd/kubectl",
            Binary::Kwok => "sigs.k8s.io/kwok/cmd/kwok",
        }
    }

    /// The recipe recorded next to the binary built for `release`; a different recipe means
    /// "rebuild".
    pub fn recipe(self, release: &Release) -> String {
        let (module, version) = self.wrapper().upstream(release);
        format!(
            "{} {} {module}@{version} tags={:?} ldflags={:?}",
            self.file_name(),
            self.package(),
            self.build_tags(),
            self.ldflags(release, "<build-date>")
        )
    }

    /// `go build -tags` (upstream builds the Kubernetes binaries with `selinux,notest`).
    pub fn build_tags(self) -> &'static str {
        match self.wrapper() {
            Wrapper::Kubernetes => "selinux,notest",
            _ => "",
        }
    }

    /// `go build -ldflags` for `release`; `build_date` is RFC 3339 UTC.
    pub fn ldflags(self, release: &Release, build_date: &str) -> String {
        let mut flags = String::from("-s -w");
        if self.wrapper() == Wrapper::Kubernetes {
            // Without these, /version reports v0.0.0-master+$Format:%H$. The module proxy does
            // not say which commit a version was cut from, so gitCommit is left empty.
            for pkg in [
                "k8s.io/component-base/version",
                "k8s.io/client-go/pkg/version",
            ] {
                flags.push_str(&format!(
                    " -X {pkg}.gitVersion={} -X {pkg}.gitMajor={K8S_MAJOR} \
                     -X {pkg}.gitMinor={} -X {pkg}.gitTreeState=clean \
                     -X {pkg}.gitCommit= -X {pkg}.buildDate={build_date}",
                    release.kubernetes, release.minor
                ));
            }
        }
        flags
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn release(version: &str) -> &'static Release {
        Release::exact(version).unwrap()
    }

    #[test]
    fn versions_are_accepted_with_or_without_v_and_patch() {
        let (v137, v136) = (release("v1.37.2"), release("v1.36.5"));
        assert!(std::ptr::eq(DEFAULT_RELEASE, v137));
        for text in ["1.37", "1.37.2", "v1.37.2", "v1.37", " 1.37 "] {
            assert!(std::ptr::eq(Release::parse(text).unwrap(), v137), "{text}");
        }
        for text in ["1.36", "1.36.5", "v1.36.5"] {
            assert!(std::ptr::eq(Release::parse(text).unwrap(), v136), "{text}");
        }
        assert_eq!((v137.patch(), v136.patch()), (2, 5));
    }

    #[test]
    fn unsupported_versions_are_refused_by_name_with_the_supported_list() {
        let err = |text: &str| format!("{:#}", Release::parse(text).unwrap_err());
        assert_eq!(supported_list(), "v1.37.2 (default), v1.36.5");
        let old = err("1.35");
        assert!(old.contains("Kubernetes 1.35 is not supported"), "{old}");
        assert!(
            old.contains("supported: v1.37.2 (default), v1.36.5"),
            "{old}"
        );
        assert!(err("2.37").contains("Kubernetes 2.37 is not supported"));
        let patch = err("v1.37.1");
        assert!(patch.contains("v1.37.1 is not supported"), "{patch}");
        assert!(
            patch.contains("pins v1.37.2 (write 1.37 to get it)"),
            "{patch}"
        );
        assert!(err("1.36.6").contains("pins v1.36.5"));
        for bad in [
            "",
            "v",
            "1",
            "1.37.2.1",
            "1.x",
            "1..2",
            "latest",
            "1.37-rc.0",
            "+1.37",
        ] {
            let e = err(bad);
            assert!(e.contains("is not a Kubernetes version"), "{bad:?}: {e}");
            assert!(e.contains("e.g. 1.37 or v1.37.2"), "{bad:?}: {e}");
            assert!(e.contains("v1.36.5"), "{bad:?}: {e}");
        }
    }

    #[test]
    fn every_release_is_consistent() {
        for (i, r) in RELEASES.iter().enumerate() {
            let patch = r.patch();
            assert_eq!(r.kubernetes, format!("v1.{}.{patch}", r.minor));
            assert_eq!(r.staging, format!("v0.{}.{patch}", r.minor));
            assert_eq!(r.staging_modules.len(), 33, "{}", r.kubernetes);
            // The node image is kind's for the same minor, pinned by digest.
            let (tag, digest) = r.kind_node_image.split_once("@sha256:").unwrap();
            assert!(
                tag.starts_with(&format!("kindest/node:v1.{}.", r.minor)),
                "{tag}"
            );
            assert_eq!(digest.len(), 64);
            assert!(digest.bytes().all(|b| b.is_ascii_hexdigit()), "{digest}");
            assert!(
                r.e2e_format_package
                    .starts_with("k8s.io/kubernetes/test/utils/")
            );
            // One release per minor, newest first.
            if let Some(older) = RELEASES.get(i + 1) {
                assert!(older.minor < r.minor);
            }
            assert!(std::ptr::eq(Release::exact(r.kubernetes).unwrap(), r));
        }
        assert!(
            Release::exact("1.37.2").is_none(),
            "state files record the v form"
        );
    }

    #[test]
    fn kubernetes_wrapper_follows_the_release() {
        for r in RELEASES {
            let go_mod = Wrapper::Kubernetes.go_mod(r);
            assert!(go_mod.contains(&format!("require k8s.io/kubernetes {}\n", r.kubernetes)));
            assert!(
                go_mod.contains("\ngo 1.26.0\n\ngodebug default=go1.26\n"),
                "{go_mod}"
            );
            for m in r.staging_modules {
                assert!(
                    go_mod.contains(&format!("\tk8s.io/{m} => k8s.io/{m} {}\n", r.staging)),
                    "{m}"
                );
            }
            assert!(go_mod.contains("\tk8s.io/kubernetes/cmd/kubectl\n"));
            assert!(!go_mod.contains("go.etcd.io/etcd/server/v3"));
            // Nothing of the other release leaks in.
            for other in RELEASES.iter().filter(|o| o.minor != r.minor) {
                assert!(!go_mod.contains(other.staging), "{go_mod}");
                assert!(!go_mod.contains(other.kubernetes), "{go_mod}");
            }
        }
    }

    #[test]
    fn etcd_and_kwok_wrappers_follow_the_release() {
        let header = "// Generated by `cargo xtask cluster`; throw-away wrapper, not part of the \
                      repository.\n";
        assert_eq!(
            Wrapper::Etcd.go_mod(release("v1.37.2")),
            format!(
                "{header}module kctrl.local/etcdbin\n\ngo 1.26\n\n\
                 require go.etcd.io/etcd/server/v3 v3.7.0\n\ntool (\n\tgo.etcd.io/etcd/server/v3\n)\n"
            )
        );
        assert_eq!(
            Wrapper::Etcd.go_mod(release("v1.36.5")),
            format!(
                "{header}module kctrl.local/etcdbin\n\ngo 1.24.0\n\n\
                 require go.etcd.io/etcd/server/v3 v3.6.8\n\ntool (\n\tgo.etcd.io/etcd/server/v3\n)\n"
            )
        );
        for r in RELEASES {
            let kwok = Wrapper::Kwok.go_mod(r);
            assert!(
                kwok.contains("\ngo 1.26.0\n\nrequire sigs.k8s.io/kwok v0.8.0\n"),
                "{kwok}"
            );
            assert!(kwok.contains("\tsigs.k8s.io/kwok/cmd/kwok\n"));
            for w in [Wrapper::Etcd, Wrapper::Kwok] {
                assert!(!w.go_mod(r).contains("replace"));
                assert!(w.files(r).is_empty());
            }
        }
    }

    #[test]
    fn e2e_wrapper_is_the_kubernetes_wrapper_without_tools_plus_one_test_file() {
        for r in RELEASES {
            let go_mod = Wrapper::E2e.go_mod(r);
            let kubernetes = Wrapper::Kubernetes.go_mod(r);
            assert!(go_mod.contains("module kctrl.local/e2ebin\n"));
            assert!(!go_mod.contains("tool"), "{go_mod}");
            let body = |m: &str| {
                m[m.find("go 1.").unwrap()..m.find("\ntool").unwrap_or(m.len())].to_owned()
            };
            assert_eq!(body(&go_mod), body(&kubernetes));
            let files = Wrapper::E2e.files(r);
            assert_eq!(files.len(), 1);
            assert!(files[0].0.ends_with("_test.go"));
            assert!(files[0].1.contains("\"k8s.io/kubernetes/test/e2e/apps\""));
            assert!(files[0].1.contains("RunE2ETests(t)"));
            assert!(!files[0].1.contains(E2E_FORMAT_PLACEHOLDER));
            assert!(Wrapper::Kubernetes.files(r).is_empty());
        }
        // The YAML-formatting package moved under ktesting in 1.37.
        let (new, old) = (
            e2e_test_file(release("v1.37.2")),
            e2e_test_file(release("v1.36.5")),
        );
        assert!(new.contains("\t_ \"k8s.io/kubernetes/test/utils/ktesting/format\"\n"));
        assert!(!new.contains("\"k8s.io/kubernetes/test/utils/format\""));
        assert!(old.contains("\t_ \"k8s.io/kubernetes/test/utils/format\"\n"));
    }

    #[test]
    fn e2e_test_recipe_tracks_the_release_flags_and_the_test_file() {
        for r in RELEASES {
            let args = e2e_test_build_args(r, "2026-01-01T00:00:00Z");
            assert_eq!(args[..3], ["test", "-c", "-vet=off"]);
            assert!(args.contains(&"selinux,notest".to_owned()));
            let version = format!("k8s.io/component-base/version.gitVersion={}", r.kubernetes);
            assert!(args.iter().any(|a| a.contains(&version)), "{args:?}");
            let recipe = e2e_test_recipe(r);
            assert!(
                recipe.starts_with(&format!("e2e.test k8s.io/kubernetes@{} ", r.kubernetes)),
                "{recipe}"
            );
            assert!(recipe.contains(&format!(
                "conformance_test.go:{:016x}",
                fnv1a(e2e_test_file(r).as_bytes())
            )));
        }
        assert_ne!(
            e2e_test_recipe(release("v1.37.2")),
            e2e_test_recipe(release("v1.36.5"))
        );
        assert_ne!(fnv1a(b"a"), fnv1a(b"b"));
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
    }

    #[test]
    fn version_ldflags_and_recipes_follow_the_release() {
        let r = release("v1.37.2");
        let flags = Binary::KubeApiserver.ldflags(r, "2026-01-01T00:00:00Z");
        assert!(flags.contains("-X k8s.io/component-base/version.gitVersion=v1.37.2"));
        assert!(flags.contains("-X k8s.io/client-go/pkg/version.gitMajor=1"));
        assert!(flags.contains("-X k8s.io/client-go/pkg/version.gitMinor=37"));
        assert!(
            Binary::Kubectl
                .ldflags(release("v1.36.5"), "x")
                .contains("version.gitMinor=36 ")
        );
        assert_eq!(Binary::Etcd.ldflags(r, "x"), "-s -w");
        // A recipe names the module version, so releases differ except where they pin the
        // same KWOK (each release's cache directory keeps its own build anyway).
        for b in Binary::ALL {
            let (new, old) = (b.recipe(r), b.recipe(release("v1.36.5")));
            assert_eq!(new == old, b == Binary::Kwok, "{b:?}");
            assert!(new.contains(b.package()));
        }
        assert!(
            Binary::Etcd
                .recipe(r)
                .contains("go.etcd.io/etcd/server/v3@v3.7.0 ")
        );
    }
}

//! Command-line options shared by every command that starts a local control plane.

use kctrl_cluster::versions::{DEFAULT_RELEASE, KUBE_VERSION_ENV, Release};

/// `--kube-version` (or [`KUBE_VERSION_ENV`]) of every command that starts a local control
/// plane.
#[derive(clap::Args, Clone, Copy, Debug)]
pub struct KubeVersionArg {
    /// Kubernetes release of the local control plane: 1.37 or 1.36, also as 1.37.2 or
    /// v1.37.2 (a minor alone picks the pinned patch). Supported: v1.37.2 (default), v1.36.5.
    #[arg(
        long = "kube-version",
        env = KUBE_VERSION_ENV,
        value_name = "VERSION",
        value_parser = parse_kube_version,
        default_value = DEFAULT_RELEASE.kubernetes,
    )]
    pub release: &'static Release,
}

/// clap's parser of [`KubeVersionArg`].
fn parse_kube_version(text: &str) -> std::result::Result<&'static Release, String> {
    Release::parse(text).map_err(|e| format!("{e:#} (from --kube-version or {KUBE_VERSION_ENV})"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kube_version_option_defaults_parses_and_refuses() {
        use clap::{CommandFactory, Parser};
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            kube: KubeVersionArg,
        }
        // The variable would override the default; this test's process does not set it.
        if std::env::var_os(KUBE_VERSION_ENV).is_none() {
            let cli = Cli::try_parse_from(["x"]).unwrap();
            assert!(std::ptr::eq(cli.kube.release, DEFAULT_RELEASE));
        }
        let cli = Cli::try_parse_from(["x", "--kube-version", "1.36"]).unwrap();
        assert_eq!(cli.kube.release.kubernetes, "v1.36.5");
        let cli = Cli::try_parse_from(["x", "--kube-version=v1.37.2"]).unwrap();
        assert_eq!(cli.kube.release.kubernetes, "v1.37.2");
        let err = Cli::try_parse_from(["x", "--kube-version", "1.34"])
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("Kubernetes 1.34 is not supported"), "{err}");
        assert!(err.contains("v1.37.2 (default), v1.36.5"), "{err}");
        assert!(err.contains(KUBE_VERSION_ENV), "{err}");
        // The help names every supported release and the default.
        let help = Cli::command().render_long_help().to_string();
        assert!(
            help.contains(&kctrl_cluster::versions::supported_list()),
            "{help}"
        );
        assert!(help.contains(KUBE_VERSION_ENV), "{help}");
    }
}

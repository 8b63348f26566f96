//! Command-line flags, named and defaulted as kube-controller-manager's where they apply.

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use kctrl_client::sharding::ShardField;
use kctrl_deployment_controller::duration::parse_go_duration;

/// The Kubernetes Deployment controller, standalone (kube-controller-manager's
/// deployment-controller).
///
/// Flags follow kube-controller-manager where they apply. With --leader-elect (the default)
/// only the instance holding the Lease reconciles; the others wait. With --shard-by every
/// instance reconciles its own share of the namespaces instead. Stops on SIGTERM or SIGINT
/// after the syncs in flight finish (within 20s at most); exits non-zero if it loses the
/// lease (or, sharded, cannot renew its member Lease in time).
#[derive(Debug, Parser)]
#[command(name = "deployment-controller", version)]
pub(crate) struct Flags {
    /// Path to a kubeconfig file. Without it (and without --master), the in-cluster service
    /// account is used, then $KUBECONFIG / ~/.kube/config.
    #[arg(long, value_name = "PATH")]
    pub(crate) kubeconfig: Option<PathBuf>,

    /// The address of the Kubernetes API server (overrides any value in the kubeconfig).
    #[arg(long, value_name = "URL")]
    pub(crate) master: Option<String>,

    /// The number of Deployments allowed to sync concurrently.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) concurrent_deployment_syncs: u32,

    /// The number of ReplicaSets allowed to sync concurrently (with the ReplicaSet controller
    /// enabled, see --controllers).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) concurrent_replicaset_syncs: u32,

    /// A list of controllers to enable, as kube-controller-manager's flag: '*' enables the
    /// on-by-default controllers, 'foo' enables the controller named foo, '-foo' disables it;
    /// the first entry naming a controller decides. All controllers: deployment-controller
    /// (alias deployment), replicaset-controller (alias replicaset). Disabled by default:
    /// replicaset-controller (kube-controller-manager usually runs its own; run ours only
    /// where it runs none, e.g. with its --controllers=*,-deployment-controller,-replicaset-controller).
    #[arg(long, value_delimiter = ',', default_value = "*", value_name = "NAMES",
          value_parser = parse_controller_entry, allow_hyphen_values = true)]
    pub(crate) controllers: Vec<String>,

    /// Threads of the async runtime that runs the informers, the syncs and the API client.
    /// One is the cheapest in CPU: the controller's pace is set by the API client's QPS, and
    /// a second thread mostly adds wake-ups between threads (about a quarter of the
    /// CPU-seconds of a rollout, docs/benchmarks/controller.md). More help only when one
    /// thread is saturated, e.g. decoding the initial lists of a very large cluster.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub(crate) runtime_threads: u16,

    /// Queries per second to use while talking with the API server.
    #[arg(long, default_value_t = 20.0)]
    pub(crate) kube_api_qps: f32,

    /// Burst to use while talking with the API server.
    #[arg(long, default_value_t = 30)]
    pub(crate) kube_api_burst: u32,

    /// Content type of the API server's answers to the informers (Pods, ReplicaSets,
    /// Deployments): application/vnd.kubernetes.protobuf (kube-controller-manager's default)
    /// or application/json. Requests, and the answers to writes, are JSON.
    #[arg(long, default_value = kctrl_client::protobuf::PROTOBUF,
          value_parser = [kctrl_client::protobuf::PROTOBUF, "application/json"])]
    pub(crate) kube_api_content_type: String,

    /// Serve Deployments changed by live events before those queued by the initial list or a
    /// resync (two work-queue lanes; the low lane still gets a bounded share). false: one FIFO
    /// lane, as kube-controller-manager's queue.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL",
          num_args = 0..=1, default_missing_value = "true")]
    pub(crate) priority_lanes: bool,

    /// Start a leader election client and gain leadership before reconciling. Enable it
    /// whenever more than one instance may run.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL",
          num_args = 0..=1, default_missing_value = "true")]
    pub(crate) leader_elect: bool,

    /// How long a standby waits, after it last saw the lease change, before it may take
    /// over (a Go duration such as 15s or 1m30s). Must be a whole number of seconds, at
    /// least 1s: the Lease records it in seconds.
    #[arg(long, default_value = "15s", value_parser = parse_lease_duration, value_name = "DURATION")]
    pub(crate) leader_elect_lease_duration: Duration,

    /// How long the leader keeps trying to renew before it gives up leading. Must be shorter
    /// than the lease duration.
    #[arg(long, default_value = "10s", value_parser = parse_go_duration, value_name = "DURATION")]
    pub(crate) leader_elect_renew_deadline: Duration,

    /// How long clients wait between attempts to acquire or renew the lease.
    #[arg(long, default_value = "2s", value_parser = parse_go_duration, value_name = "DURATION")]
    pub(crate) leader_elect_retry_period: Duration,

    /// The kind of lock object used for leader election. Only `leases` exists.
    #[arg(long, default_value = "leases", value_parser = ["leases"])]
    pub(crate) leader_elect_resource_lock: String,

    /// The name of the Lease used for leader election. Differs from kube-controller-manager's
    /// own lease on purpose: both run side by side.
    #[arg(long, default_value = "kctrl-deployment-controller")]
    pub(crate) leader_elect_resource_name: String,

    /// The namespace of the Lease used for leader election.
    #[arg(long, default_value = "kube-system")]
    pub(crate) leader_elect_resource_namespace: String,

    /// Run as one of several active replicas, each reconciling the Deployments of the
    /// namespaces whose hash falls in its share: `namespace` is the only value (a Deployment,
    /// its ReplicaSets and its Pods must be in one shard, and only their namespace is common
    /// to them). Replaces leader election: --leader-elect is ignored. The replicas find each
    /// other through Leases (--shard-group, --shard-lease-namespace) timed by the
    /// --leader-elect-lease-duration, --leader-elect-renew-deadline and
    /// --leader-elect-retry-period flags. Each caches only its share when the API server has
    /// the ShardedListAndWatch feature gate on, everything otherwise.
    #[arg(long, value_parser = parse_shard_by, value_name = "FIELD")]
    pub(crate) shard_by: Option<ShardField>,

    /// The shard group: the replicas that split the Deployments between them. Names their
    /// Leases (`<group>-<identity>`) and labels them. A DNS-1123 label.
    #[arg(long, default_value = "deployment-controller", value_name = "NAME")]
    pub(crate) shard_group: String,

    /// The namespace of the shard group's Leases. Defaults to
    /// --leader-elect-resource-namespace.
    #[arg(long, value_name = "NAMESPACE")]
    pub(crate) shard_lease_namespace: Option<String>,

    /// The address /healthz, /livez, /readyz and /metrics are served on. Loopback by default;
    /// the in-cluster manifest sets 0.0.0.0 so the kubelet's probes reach it.
    #[arg(long, default_value = "127.0.0.1", value_name = "IP")]
    pub(crate) bind_address: IpAddr,

    /// The port to serve HTTPS on (0 turns serving off).
    #[arg(long, default_value_t = 10257, value_name = "PORT")]
    pub(crate) secure_port: u16,

    /// PEM certificate (chain) to serve HTTPS with. Without it (and --tls-private-key-file),
    /// a self-signed certificate is generated in memory at start.
    #[arg(long, value_name = "PATH", requires = "tls_private_key_file")]
    pub(crate) tls_cert_file: Option<PathBuf>,

    /// PEM private key matching --tls-cert-file.
    #[arg(long, value_name = "PATH", requires = "tls_cert_file")]
    pub(crate) tls_private_key_file: Option<PathBuf>,

    /// kubeconfig file pointing at the 'core' Kubernetes API server with enough rights to
    /// create tokenreviews.authentication.k8s.io (kube-controller-manager's flag). Without
    /// it, the in-cluster ServiceAccount is used; outside a cluster, bearer tokens are not
    /// reviewed and every request to the endpoints is anonymous.
    #[arg(long, value_name = "PATH")]
    pub(crate) authentication_kubeconfig: Option<PathBuf>,

    /// How long answers of the TokenReview API (authenticated or not) are cached. 0 turns
    /// the cache off.
    #[arg(long, default_value = "10s", value_parser = parse_go_duration, value_name = "DURATION")]
    pub(crate) authentication_token_webhook_cache_ttl: Duration,

    /// PEM bundle of the CAs that sign client certificates: a client certificate presented
    /// to the endpoints and signed by one of them authenticates its common name as the user
    /// and its organizations as the groups (kube-controller-manager's flag).
    #[arg(long, value_name = "PATH")]
    pub(crate) client_ca_file: Option<PathBuf>,

    /// Without --client-ca-file, do not look the client CA up in the ConfigMap
    /// kube-system/extension-apiserver-authentication (key client-ca-file) with the
    /// authentication client; client certificates are then not used.
    #[arg(long, default_value_t = false, action = clap::ArgAction::Set, value_name = "BOOL",
          num_args = 0..=1, default_missing_value = "true")]
    pub(crate) authentication_skip_lookup: bool,

    /// kubeconfig file pointing at the 'core' Kubernetes API server with enough rights to
    /// create subjectaccessreviews.authorization.k8s.io (kube-controller-manager's flag).
    /// Without it, the in-cluster ServiceAccount is used; outside a cluster, every request
    /// not allowed by --authorization-always-allow-paths (or from system:masters) is
    /// forbidden.
    #[arg(long, value_name = "PATH")]
    pub(crate) authorization_kubeconfig: Option<PathBuf>,

    /// How long 'authorized' answers of the SubjectAccessReview API are cached. 0 turns the
    /// cache off.
    #[arg(long, default_value = "10s", value_parser = parse_go_duration, value_name = "DURATION")]
    pub(crate) authorization_webhook_cache_authorized_ttl: Duration,

    /// How long 'unauthorized' answers of the SubjectAccessReview API are cached. 0 turns
    /// the cache off.
    #[arg(long, default_value = "10s", value_parser = parse_go_duration, value_name = "DURATION")]
    pub(crate) authorization_webhook_cache_unauthorized_ttl: Duration,

    /// HTTP paths served to anyone without asking the API server (comma-separated, or the
    /// flag repeated; an entry ending in * is a prefix). Authentication still applies: a
    /// bearer token that does not authenticate is refused on these paths too.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "/healthz,/readyz,/livez",
        value_name = "PATHS"
    )]
    pub(crate) authorization_always_allow_paths: Vec<String>,

    /// Also serve /debug/cache: the key and resourceVersion of every object in the informer
    /// caches, one per line (for fault-injection tests that compare the caches with a fresh
    /// list). Off by default: the listing names objects (it is authorized as any other
    /// path, with a SubjectAccessReview of `get` on /debug/cache).
    #[arg(long)]
    pub(crate) debug_cache_endpoint: bool,

    /// Log verbosity, as klog's: 0–2 info, 3–4 debug, 5 and above trace. RUST_LOG, when set,
    /// takes precedence.
    #[arg(short = 'v', long = "v", default_value_t = 0, value_name = "LEVEL")]
    pub(crate) verbosity: u8,
}

/// The controllers this binary runs, by kube-controller-manager's name, with their aliases and
/// whether `*` enables them.
pub(crate) const CONTROLLERS: &[(&str, &str, bool)] = &[
    ("deployment-controller", "deployment", true),
    ("replicaset-controller", "replicaset", false),
];

/// One entry of `--controllers`: `*`, or a known controller name or alias, optionally with a
/// leading `-`; returned with the alias replaced by the controller's name.
fn parse_controller_entry(entry: &str) -> Result<String, String> {
    let entry = entry.trim();
    if entry == "*" {
        return Ok(entry.to_owned());
    }
    let (minus, name) = match entry.strip_prefix('-') {
        Some(name) => ("-", name),
        None => ("", entry),
    };
    match CONTROLLERS
        .iter()
        .find(|(canonical, alias, _)| name == *canonical || name == *alias)
    {
        Some((canonical, _, _)) => Ok(format!("{minus}{canonical}")),
        None => Err(format!(
            "{name:?} is not in the list of known controllers: {}",
            CONTROLLERS
                .iter()
                .map(|(c, a, _)| format!("{c} (alias {a})"))
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}

/// Which controllers run, from `--controllers`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Enabled {
    /// The Deployment controller.
    pub(crate) deployment: bool,
    /// The ReplicaSet controller.
    pub(crate) replicaset: bool,
}

impl Flags {
    /// The controllers `--controllers` enables, decided as kube-controller-manager decides
    /// (`IsControllerEnabled`): the first entry naming a controller, else `*` for the
    /// on-by-default ones. A list that enables none is an error.
    pub(crate) fn enabled_controllers(&self) -> Result<Enabled, String> {
        let enabled = |name: &str, by_default: bool| {
            let mut star = false;
            for entry in &self.controllers {
                if entry == name {
                    return true;
                }
                if entry.strip_prefix('-') == Some(name) {
                    return false;
                }
                star |= entry == "*";
            }
            star && by_default
        };
        let is = |name: &str| {
            CONTROLLERS
                .iter()
                .find(|(c, _, _)| *c == name)
                .is_some_and(|(c, _, by_default)| enabled(c, *by_default))
        };
        let e = Enabled {
            deployment: is("deployment-controller"),
            replicaset: is("replicaset-controller"),
        };
        if !e.deployment && !e.replicaset {
            return Err(format!(
                "--controllers={} enables no controller; name one of deployment-controller, \
                 replicaset-controller (or '*' for the deployment-controller)",
                self.controllers.join(",")
            ));
        }
        Ok(e)
    }

    /// `--shard-by` with the controllers `enabled`: only the deployment-controller can be
    /// sharded; a ReplicaSet controller in every replica would fight over every ReplicaSet.
    pub(crate) fn check_sharding(&self, enabled: Enabled) -> Result<(), String> {
        if self.shard_by.is_some() && enabled.replicaset {
            return Err(
                "--shard-by shards the deployment-controller only; the replicaset-controller \
                 has no sharding yet, and one in each replica would fight over every \
                 ReplicaSet: run it unsharded in a process of its own \
                 (--controllers=replicaset-controller), or drop it from --controllers here"
                    .to_owned(),
            );
        }
        Ok(())
    }

    /// The namespace of the shard group's Leases: `--shard-lease-namespace`, else
    /// `--leader-elect-resource-namespace`.
    pub(crate) fn shard_lease_namespace(&self) -> &str {
        self.shard_lease_namespace
            .as_deref()
            .unwrap_or(&self.leader_elect_resource_namespace)
    }

    /// `--authorization-always-allow-paths` without empty entries (an empty value is an empty
    /// list, as pflag's string slices read it).
    pub(crate) fn always_allow_paths(&self) -> Vec<String> {
        self.authorization_always_allow_paths
            .iter()
            .filter(|p| !p.is_empty())
            .cloned()
            .collect()
    }
}

/// A lease duration: a Go duration that is a whole number of seconds, at least one (the
/// Lease stores `leaseDurationSeconds`, so 500ms or 1.5s could only be written truncated).
pub(crate) fn parse_lease_duration(text: &str) -> Result<Duration, String> {
    let d = parse_go_duration(text)?;
    if d < Duration::from_secs(1) || d.subsec_nanos() != 0 {
        return Err(format!(
            "{text:?} is not a whole number of seconds of at least 1s; the Lease records its \
             duration in whole seconds (e.g. 15s, 1m)"
        ));
    }
    Ok(d)
}

/// `--shard-by`: only `namespace` keeps a Deployment with its ReplicaSets and Pods.
pub(crate) fn parse_shard_by(text: &str) -> Result<ShardField, String> {
    match text {
        "namespace" => Ok(ShardField::Namespace),
        "uid" => Err(
            "\"uid\" cannot shard the Deployment controller: a Deployment's ReplicaSets and Pods \
             have UIDs of their own that hash into other shards, so a replica would not cache \
             the objects its Deployments own; use --shard-by=namespace (a Deployment, its \
             ReplicaSets and its Pods share their namespace)"
                .to_owned(),
        ),
        other => Err(format!(
            "{other:?} is not a shard field of the Deployment controller; the only one is \
             \"namespace\""
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_match_kube_controller_manager() {
        let flags = Flags::try_parse_from(["deployment-controller"]).unwrap();
        assert_eq!(flags.concurrent_deployment_syncs, 5);
        assert_eq!(flags.concurrent_replicaset_syncs, 5);
        assert_eq!(flags.controllers, ["*"]);
        assert_eq!(flags.kube_api_qps, 20.0);
        assert_eq!(flags.kube_api_burst, 30);
        assert_eq!(
            flags.kube_api_content_type,
            "application/vnd.kubernetes.protobuf"
        );
        assert!(Flags::try_parse_from(["d", "--kube-api-content-type=application/json"]).is_ok());
        let err = Flags::try_parse_from(["d", "--kube-api-content-type=application/yaml"])
            .unwrap_err()
            .to_string();
        assert!(err.contains("application/yaml"), "{err}");
        assert!(flags.leader_elect);
        assert!(flags.priority_lanes);
        assert!(
            !Flags::try_parse_from(["d", "--priority-lanes=false"])
                .unwrap()
                .priority_lanes
        );
        assert_eq!(flags.leader_elect_lease_duration, Duration::from_secs(15));
        assert_eq!(flags.leader_elect_renew_deadline, Duration::from_secs(10));
        assert_eq!(flags.leader_elect_retry_period, Duration::from_secs(2));
        assert_eq!(flags.leader_elect_resource_lock, "leases");
        assert_eq!(flags.leader_elect_resource_namespace, "kube-system");
        assert_eq!(flags.secure_port, 10257);
        assert_eq!(flags.bind_address.to_string(), "127.0.0.1");
        assert!(!flags.debug_cache_endpoint);
        assert_eq!(flags.runtime_threads, 1);
        assert_eq!(flags.authentication_kubeconfig, None);
        assert_eq!(flags.authorization_kubeconfig, None);
        assert_eq!(flags.client_ca_file, None);
        assert!(!flags.authentication_skip_lookup);
        assert!(
            Flags::try_parse_from(["d", "--authentication-skip-lookup"])
                .unwrap()
                .authentication_skip_lookup
        );
        for ttl in [
            flags.authentication_token_webhook_cache_ttl,
            flags.authorization_webhook_cache_authorized_ttl,
            flags.authorization_webhook_cache_unauthorized_ttl,
        ] {
            assert_eq!(ttl, Duration::from_secs(10));
        }
        assert_eq!(
            flags.authorization_always_allow_paths,
            ["/healthz", "/readyz", "/livez"]
        );
        assert_eq!(flags.shard_by, None);
        assert_eq!(flags.shard_group, "deployment-controller");
        assert_eq!(flags.shard_lease_namespace(), "kube-system");
        let threads = Flags::try_parse_from(["d", "--runtime-threads=4"]).unwrap();
        assert_eq!(threads.runtime_threads, 4);
    }

    #[test]
    fn always_allow_paths_are_a_comma_list_as_kcm_reads_it() {
        let parse = |args: &[&str]| {
            Flags::try_parse_from(std::iter::once("d").chain(args.iter().copied()))
                .unwrap()
                .authorization_always_allow_paths
        };
        assert_eq!(
            parse(&["--authorization-always-allow-paths=/healthz,/metrics"]),
            ["/healthz", "/metrics"]
        );
        // Repeated: the values add up, and replace the default.
        assert_eq!(
            parse(&[
                "--authorization-always-allow-paths=/healthz",
                "--authorization-always-allow-paths",
                "/debug/*"
            ]),
            ["/healthz", "/debug/*"]
        );
        // An empty value is an empty list, as pflag reads it: no path is always allowed.
        let none = Flags::try_parse_from(["d", "--authorization-always-allow-paths="]).unwrap();
        assert!(none.always_allow_paths().is_empty(), "{none:?}");
        let ttl =
            Flags::try_parse_from(["d", "--authorization-webhook-cache-authorized-ttl=0"]).unwrap();
        assert_eq!(
            ttl.authorization_webhook_cache_authorized_ttl,
            Duration::ZERO
        );
    }

    #[test]
    fn lease_durations_are_whole_seconds() {
        assert_eq!(parse_lease_duration("1s"), Ok(Duration::from_secs(1)));
        assert_eq!(parse_lease_duration("1m"), Ok(Duration::from_secs(60)));
        assert_eq!(parse_lease_duration("1500ms").map_err(|_| ()), Err(()));
        let err = Flags::try_parse_from([
            "deployment-controller",
            "--leader-elect-lease-duration=500ms",
        ])
        .unwrap_err()
        .to_string();
        assert!(err.contains("leader-elect-lease-duration"), "{err}");
        assert!(
            err.contains("whole number of seconds of at least 1s"),
            "{err}"
        );
    }

    #[test]
    fn leader_elect_takes_an_explicit_value_as_kcm_does() {
        let off = Flags::try_parse_from(["deployment-controller", "--leader-elect=false"]).unwrap();
        assert!(!off.leader_elect);
        let on = Flags::try_parse_from(["deployment-controller", "--leader-elect"]).unwrap();
        assert!(on.leader_elect);
    }

    #[test]
    fn bad_values_are_refused_with_the_flag_named() {
        for args in [
            vec!["--leader-elect-resource-lock", "endpoints"],
            vec!["--leader-elect-lease-duration", "15"],
            vec!["--leader-elect-lease-duration", "500ms"],
            vec!["--leader-elect-lease-duration", "1500ms"],
            vec!["--leader-elect-lease-duration", "0"],
            vec!["--concurrent-deployment-syncs", "0"],
            vec!["--concurrent-replicaset-syncs", "0"],
            vec!["--controllers", "*,statefulset"],
            vec!["--runtime-threads", "0"],
            vec!["--runtime-threads", "many"],
            vec!["--tls-cert-file", "/x.pem"],
            vec!["--bind-address", "localhost"],
        ] {
            let flag = args[0];
            let err = Flags::try_parse_from(std::iter::once("deployment-controller").chain(args))
                .unwrap_err()
                .to_string();
            let named = flag.trim_start_matches("--");
            assert!(
                err.contains(named) || err.contains("tls-private-key-file"),
                "{flag}: {err}"
            );
        }
    }

    fn enabled(list: &str) -> Result<Enabled, String> {
        let separate = Flags::try_parse_from(["deployment-controller", "--controllers", list])
            .map_err(|e| e.to_string())?
            .enabled_controllers();
        let joined =
            Flags::try_parse_from(["deployment-controller", &format!("--controllers={list}")])
                .map_err(|e| e.to_string())?
                .enabled_controllers();
        assert_eq!(separate, joined, "{list}");
        joined
    }

    #[test]
    fn controllers_are_chosen_as_kube_controller_manager_chooses() {
        let both = Enabled {
            deployment: true,
            replicaset: true,
        };
        let deployment = Enabled {
            deployment: true,
            replicaset: false,
        };
        let replicaset = Enabled {
            deployment: false,
            replicaset: true,
        };
        let default = Flags::try_parse_from(["deployment-controller"]).unwrap();
        assert_eq!(default.enabled_controllers(), Ok(deployment));
        for (list, want) in [
            ("*", deployment),
            ("*,replicaset-controller", both),
            ("deployment-controller,replicaset-controller", both),
            ("deployment,replicaset", both),
            ("replicaset-controller", replicaset),
            ("*,-deployment-controller,replicaset", replicaset),
            ("*,-replicaset-controller", deployment),
            // The first entry naming a controller decides.
            ("replicaset,-replicaset,*", both),
            ("-replicaset,replicaset,*", deployment),
        ] {
            assert_eq!(enabled(list), Ok(want), "{list}");
        }
    }

    #[test]
    fn unknown_or_no_controllers_are_refused() {
        let err = enabled("*,statefulset").unwrap_err();
        assert!(
            err.contains("\"statefulset\" is not in the list of known controllers"),
            "{err}"
        );
        assert!(
            err.contains("deployment-controller (alias deployment)"),
            "{err}"
        );
        assert!(
            err.contains("replicaset-controller (alias replicaset)"),
            "{err}"
        );
        let err = enabled("-deployment-controller").unwrap_err();
        assert!(err.contains("enables no controller"), "{err}");
        assert!(enabled("*,-deployment").is_err());
    }

    #[test]
    fn sharding_refuses_the_replicaset_controller_by_name() {
        let parse = |args: &[&str]| {
            let flags = Flags::try_parse_from(args).unwrap();
            let enabled = flags.enabled_controllers().unwrap();
            flags.check_sharding(enabled)
        };
        assert_eq!(parse(&["d", "--shard-by=namespace"]), Ok(()));
        assert_eq!(
            parse(&["d", "--controllers=*,replicaset-controller"]),
            Ok(())
        );
        let err = parse(&[
            "d",
            "--shard-by=namespace",
            "--controllers=*,replicaset-controller",
        ])
        .unwrap_err();
        assert!(
            err.contains("replicaset-controller has no sharding"),
            "{err}"
        );
    }

    #[test]
    fn shard_by_takes_namespace_only_and_says_why_not_uid() {
        let sharded = Flags::try_parse_from(["d", "--shard-by=namespace"]).unwrap();
        assert_eq!(sharded.shard_by, Some(ShardField::Namespace));
        let uid = Flags::try_parse_from(["d", "--shard-by=uid"])
            .unwrap_err()
            .to_string();
        assert!(uid.contains("shard-by"), "{uid}");
        assert!(uid.contains("ReplicaSets and Pods"), "{uid}");
        assert!(uid.contains("use --shard-by=namespace"), "{uid}");
        let other = Flags::try_parse_from(["d", "--shard-by=name"])
            .unwrap_err()
            .to_string();
        assert!(other.contains("the only one is \"namespace\""), "{other}");
    }

    #[test]
    fn the_shard_lease_namespace_follows_the_leader_election_one() {
        let moved =
            Flags::try_parse_from(["d", "--leader-elect-resource-namespace=controllers"]).unwrap();
        assert_eq!(moved.shard_lease_namespace(), "controllers");
        let own = Flags::try_parse_from([
            "d",
            "--leader-elect-resource-namespace=controllers",
            "--shard-lease-namespace=shards",
            "--shard-group=web-deployments",
        ])
        .unwrap();
        assert_eq!(own.shard_lease_namespace(), "shards");
        assert_eq!(own.shard_group, "web-deployments");
    }
}

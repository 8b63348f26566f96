//! `deployment-controller`: kube-controller-manager's Deployment controller as a standalone
//! process, built on the kctrl crates.
//!
//! It runs the controllers `--controllers` enables, with kube-controller-manager's syntax and
//! names: the Deployment controller (`deployment-controller`, on by default), which watches
//! Deployments, ReplicaSets and Pods and reconciles each Deployment with
//! `--concurrent-deployment-syncs` workers, and the ReplicaSet controller
//! (`replicaset-controller`, off unless named), which reconciles each ReplicaSet with
//! `--concurrent-replicaset-syncs` workers. Both share one informer factory (one watch and
//! cache per resource; Pods as one shared view), one leader election and one set of endpoints
//! and metrics. Run it against a cluster whose kube-controller-manager runs none of the
//! controllers it runs, e.g. `--controllers=*,-deployment-controller` for the default.
//!
//! One instance reconciles at a time (leader election), or, with `--shard-by=namespace`,
//! every instance reconciles the namespaces of its own share of the hash space
//! (kctrl-shard's membership, in place of leader election).
//!
//! Modules: [`flags`] (the command line), [`metrics`] (the Prometheus registry), [`serve`]
//! (/healthz, /livez, /readyz, /metrics over HTTPS), [`auth`] (their delegated
//! authentication and authorization).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Parser;
use futures::FutureExt;
use futures::future::BoxFuture;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use kctrl_client::sharding::ShardField;
use kctrl_client::{Api, Client, HttpBackend, ListParams, ResourceRef};
use kctrl_config::{Config, ConfigOverrides, InClusterConfig};
use kctrl_deployment::pod_view::PodView;
use kctrl_deployment::wiring::{DeploymentControllerRunner, RunError, RunnerOptions};
use kctrl_events::{ApiEventSink, EventBroadcaster, EventRecorder, EventSource, EventType};
use kctrl_informer::{ReflectorOptions, SharedInformerFactory};
use kctrl_leader_election::{
    DEFAULT_HEALTHZ_TIMEOUT, HEALTHZ_NAME, HealthzAdaptor, LeaderCallbacks, LeaderElectionConfig,
    LeaderElector, LeaderEvent, LeaseLock, PrometheusLeaderMetrics, lock_client_config,
};
use kctrl_replicaset::{ReplicaSetController, ReplicaSetMetrics};
use kctrl_runtime::shard::Sharding;
use kctrl_shard::{PrometheusShardMetrics, ShardConfig};
use prometheus_client::registry::Registry;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};
use tracing_subscriber::EnvFilter;

mod auth;
mod flags;
mod metrics;
mod serve;

/// The process allocates through mimalloc unless built without the default `mimalloc` feature:
/// every watch event, request and sync allocates and frees short-lived buffers, and mimalloc's
/// per-thread free lists make that cheaper than glibc's malloc (docs/benchmarks/controller.md
/// has the side-by-side figures).
#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use flags::Flags;

/// Informer resync period: kube-controller-manager's `--min-resync-period` default (12h; it
/// randomises between 12h and 24h, this uses the lower bound).
const RESYNC_PERIOD: Duration = Duration::from_secs(12 * 60 * 60);

fn init_logging(verbosity: u8) {
    let level = match verbosity {
        0..=2 => "info",
        3..=4 => "debug",
        _ => "trace",
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(level));
    // Colours only on a terminal: container runtimes and log files get plain text.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stdout());
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .init();
}

/// Checks that apps/v1 deployments is served and can be listed, with a message naming what
/// went wrong (the server, or the verb and resource refused).
async fn check_deployments_served(client: &Client, server: &str) -> anyhow::Result<()> {
    let explain = |e: kctrl_client::Error, verb: &str, what: &str| -> anyhow::Error {
        let context = if e.is_transport() {
            format!("cannot reach the API server at {server}")
        } else if e.is_forbidden() {
            format!(
                "forbidden: the API server at {server} refused {verb} on {what}; the controller \
                 needs get/list/watch/update on deployments.apps, update on \
                 deployments.apps/status, get/list/watch/create/update/patch/delete on \
                 replicasets.apps, get/list/watch on pods and create/patch on events"
            )
        } else if e.is_unauthorized() {
            format!("unauthorized: the API server at {server} rejected the credentials")
        } else {
            format!("{verb} {what} on the API server at {server}")
        };
        anyhow::Error::new(e).context(context)
    };
    let resource = ResourceRef::of::<Deployment>();
    match client.is_served(&resource).await {
        Ok(true) => {}
        Ok(false) => bail!("the API server at {server} does not serve apps/v1 deployments"),
        Err(e) => {
            return Err(explain(
                e,
                "get",
                "the apps/v1 API discovery (/apis/apps/v1)",
            ));
        }
    }
    let params = ListParams {
        limit: Some(1),
        ..Default::default()
    };
    Api::<Deployment>::all(client.clone())
        .list(&params)
        .await
        .map_err(|e| explain(e, "list", "deployments.apps at the cluster scope"))?;
    Ok(())
}

/// How long to wait between checks while the API server forbids what the controller needs.
const FORBIDDEN_RETRY: Duration = Duration::from_secs(10);

/// [`check_deployments_served`] until it passes: a refusal (403) is logged with what was
/// refused and retried every [`FORBIDDEN_RETRY`] (RBAC may be granted later); any other
/// failure ends the start. Returns `Ok(false)` when `cancel` fires first.
async fn wait_for_deployments_served(
    client: &Client,
    server: &str,
    cancel: &CancellationToken,
) -> anyhow::Result<bool> {
    loop {
        let Err(e) = check_deployments_served(client, server).await else {
            return Ok(true);
        };
        let forbidden = e
            .downcast_ref::<kctrl_client::Error>()
            .is_some_and(kctrl_client::Error::is_forbidden);
        if !forbidden {
            return Err(e);
        }
        error!("{e:#}; retrying in {}s", FORBIDDEN_RETRY.as_secs());
        tokio::select! {
            () = cancel.cancelled() => return Ok(false),
            () = tokio::time::sleep(FORBIDDEN_RETRY) => {}
        }
    }
}

/// Cancels `cancel` on the first SIGTERM or SIGINT.
async fn cancel_on_signal(cancel: CancellationToken) -> anyhow::Result<()> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("installing the SIGTERM handler")?;
    tokio::select! {
        _ = term.recv() => info!("received SIGTERM; finishing in-flight syncs"),
        r = tokio::signal::ctrl_c() => {
            r.context("waiting for SIGINT")?;
            info!("received SIGINT; finishing in-flight syncs");
        }
        () = cancel.cancelled() => {}
    }
    cancel.cancel();
    Ok(())
}

/// `<host name>_<random UUID>`, the form kube-controller-manager's leader identities take.
fn leader_identity() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "unknown-host".to_owned());
    format!("{host}_{}", kctrl_client::uuid::new_v4())
}

/// A shard member's identity: `<host name>-<random UUID>`, leader election's identity made
/// fit for a Lease name (`<group>-<identity>`): lowercase letters, digits and '-'.
fn shard_identity() -> String {
    shard_identity_of(&leader_identity())
}

/// [`shard_identity`] from a leader identity (`<host>_<uuid>`).
fn shard_identity_of(leader: &str) -> String {
    let (host, uuid) = leader.rsplit_once('_').unwrap_or(("", leader));
    let mut host: String = host
        .chars()
        .map(|c| {
            let c = c.to_ascii_lowercase();
            if c.is_ascii_lowercase() || c.is_ascii_digit() {
                c
            } else {
                '-'
            }
        })
        .collect();
    // No leading, trailing or doubled '-', at most 63 characters.
    while host.contains("--") {
        host = host.replace("--", "-");
    }
    let host: String = host.trim_matches('-').chars().take(63).collect();
    let host = host.trim_end_matches('-');
    if host.is_empty() {
        format!("replica-{uuid}")
    } else {
        format!("{host}-{uuid}")
    }
}

/// The User-Agent of a sharded replica: the controller's, with the member's identity, so
/// that the API server's audit log tells the replicas' requests apart.
fn sharded_user_agent(identity: &str) -> String {
    format!(
        "deployment-controller/{} (shard {identity})",
        env!("CARGO_PKG_VERSION")
    )
}

/// The bound on each non-watch API request (retries included), unless the loaded
/// configuration carries one. kube-controller-manager has no flag for it and sets none; without one a response
/// whose body stalls would hold a worker forever. Watches are not bounded by it (they end
/// on the server's timeout), and leader election uses its own, shorter bound.
const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

/// The API client of the controller (flags applied), and its configuration.
fn client_config(flags: &Flags) -> anyhow::Result<Config> {
    HttpBackend::check_rate_limit(flags.kube_api_qps, flags.kube_api_burst).map_err(|e| {
        anyhow::anyhow!(
            "--kube-api-qps {} with --kube-api-burst {}: {e}",
            flags.kube_api_qps,
            flags.kube_api_burst
        )
    })?;
    let mut config = Config::from_flags(
        flags.kubeconfig.as_deref(),
        flags.master.as_deref(),
        &ConfigOverrides::default(),
    )
    .context("loading the client configuration (--kubeconfig, --master)")?;
    config.timeout = config
        .timeout
        .filter(|t| !t.is_zero())
        .or(Some(DEFAULT_REQUEST_TIMEOUT));
    config.qps = flags.kube_api_qps;
    config.burst = flags.kube_api_burst;
    config.user_agent = Some(format!(
        "deployment-controller/{}",
        env!("CARGO_PKG_VERSION")
    ));
    Ok(config)
}

/// The client of delegated authentication or authorization (`flag` names which): the
/// kubeconfig the flag gives, else the in-cluster ServiceAccount, else none — as
/// kube-controller-manager, for which both kubeconfigs are optional. A kubeconfig that was
/// given but cannot be loaded is an error; a broken in-cluster configuration is logged and
/// leaves the client out.
fn review_client(
    kubeconfig: Option<&std::path::Path>,
    flag: &str,
    rest_metrics: &Arc<dyn kctrl_client::RestClientMetrics>,
) -> anyhow::Result<Option<Client>> {
    let mut config = match kubeconfig {
        Some(path) => Config::from_flags(Some(path), None, &ConfigOverrides::default())
            .with_context(|| format!("loading --{flag} {}", path.display()))?,
        None => {
            let in_cluster = InClusterConfig::from_env();
            if !in_cluster.is_possible() {
                return Ok(None);
            }
            match in_cluster.config() {
                Ok(config) => config,
                Err(e) => {
                    warn!(error = %e, "reading the in-cluster configuration for delegated {flag} failed");
                    return Ok(None);
                }
            }
        }
    };
    // As upstream: a high client-side limit (the reviews gate the endpoints, not the
    // controller's work) and a 10 s bound per request.
    config.qps = 200.0;
    config.burst = 400;
    config.timeout = Some(auth::REVIEW_TIMEOUT);
    config.user_agent = Some(format!(
        "deployment-controller/{}",
        env!("CARGO_PKG_VERSION")
    ));
    let backend = HttpBackend::new(config)
        .with_context(|| format!("building the client of --{flag}"))?
        .with_metrics(rest_metrics.clone());
    Ok(Some(Client::new(backend, "default")))
}

/// The gate of the endpoints, from the `--authentication-*` / `--authorization-*` flags.
async fn endpoint_gate(
    flags: &Flags,
    registry: &mut Registry,
    rest_metrics: &Arc<dyn kctrl_client::RestClientMetrics>,
) -> anyhow::Result<auth::Gate> {
    let authn = review_client(
        flags.authentication_kubeconfig.as_deref(),
        "authentication-kubeconfig",
        rest_metrics,
    )?;
    let authz = review_client(
        flags.authorization_kubeconfig.as_deref(),
        "authorization-kubeconfig",
        rest_metrics,
    )?;
    if authn.is_none() {
        warn!(
            "no --authentication-kubeconfig and not in a cluster: bearer tokens are not reviewed, \
             every request to the endpoints is anonymous"
        );
    }
    if authz.is_none() {
        warn!(
            "no --authorization-kubeconfig and not in a cluster: only \
             --authorization-always-allow-paths are served"
        );
    }
    // As kube-controller-manager: --client-ca-file must be usable at start; the ConfigMap
    // is looked up until it can be read. Either is read again while the process runs.
    let client_certificates = match (&flags.client_ca_file, &authn) {
        (Some(path), _) => Some(auth::ClientCa::from_file(path).await?),
        (None, _) if flags.authentication_skip_lookup => None,
        (None, Some(client)) => Some(auth::ClientCa::from_configmap(client.clone()).await),
        (None, None) => {
            warn!(
                "no --authentication-kubeconfig and not in a cluster to look up the client CA \
                 in configmap kube-system/extension-apiserver-authentication: client \
                 certificates are not used"
            );
            None
        }
    };
    if let Some(ca) = &client_certificates {
        ca.spawn_reloads();
    }
    let options = auth::GateOptions {
        review_tokens: authn.is_some(),
        review_access: authz.is_some(),
        token_cache_ttl: flags.authentication_token_webhook_cache_ttl,
        authorized_ttl: flags.authorization_webhook_cache_authorized_ttl,
        unauthorized_ttl: flags.authorization_webhook_cache_unauthorized_ttl,
        always_allow: auth::AlwaysAllowPaths::parse(&flags.always_allow_paths())?,
        client_certificates,
    };
    let metrics = auth::ReviewMetrics::register(registry);
    Ok(auth::Gate::new(
        options,
        Arc::new(auth::ApiReviews::new(authn, authz, metrics)),
    ))
}

/// The `/debug/cache` listing of the factory's Deployment, ReplicaSet and Pod caches.
fn cache_dump(factory: SharedInformerFactory) -> serve::CacheDump {
    fn lines<K>(resource: &str, store: &kctrl_informer::Store<K>, out: &mut Vec<String>)
    where
        K: k8s_openapi::Metadata<Ty: kctrl_client::ObjectMetaAccess> + Send + Sync + 'static,
    {
        use kctrl_client::ObjectMetaAccess;
        for obj in store.list() {
            let m = obj.metadata();
            out.push(format!(
                "{resource} {}/{} {}",
                m.namespace().unwrap_or(""),
                m.name().unwrap_or(""),
                m.resource_version().unwrap_or("")
            ));
        }
    }
    Arc::new(move || {
        let mut out = Vec::new();
        lines(
            "deployments",
            factory.informer::<Deployment>().store(),
            &mut out,
        );
        lines(
            "replicasets",
            factory.informer::<ReplicaSet>().store(),
            &mut out,
        );
        lines("pods", factory.informer::<PodView>().store(), &mut out);
        out.sort();
        let mut text = out.join("\n");
        text.push('\n');
        text
    })
}

/// The API clients of the process, one per user as kube-controller-manager has them: each
/// waits on a token bucket of its own (`--kube-api-qps`, `--kube-api-burst`) and names its
/// user in the `User-Agent` (`<agent>/<name>`), over one connection pool and one set of
/// credentials. So the Deployment and the ReplicaSet controllers in one process each spend
/// the API budget each would have in kube-controller-manager, and neither waits behind the
/// informers' lists.
struct ControllerClients {
    /// The shared informers' lists and watches, and the check at start that Deployments are
    /// served (`shared-informers`).
    informers: Client,
    /// The Deployment controller's writes and events (`deployment-controller`), and the
    /// leader election's events (kube-controller-manager writes those through a client of
    /// its own, `kube-controller-manager`, with the same source name).
    deployment: Client,
    /// The ReplicaSet controller's writes and events (`replicaset-controller`).
    replicaset: Client,
}

impl ControllerClients {
    /// The names kube-controller-manager gives these clients (`ClientOrDie(name)`).
    const NAMES: [&str; 3] = [
        "shared-informers",
        "deployment-controller",
        kctrl_replicaset::EVENT_SOURCE_COMPONENT,
    ];

    fn new(root: &HttpBackend, namespace: &str) -> anyhow::Result<Self> {
        let [informers, deployment, replicaset] =
            Self::backends(root)?.map(|backend| Client::new(backend, namespace.to_owned()));
        Ok(Self {
            informers,
            deployment,
            replicaset,
        })
    }

    fn backends(root: &HttpBackend) -> anyhow::Result<[HttpBackend; 3]> {
        let sibling = |name: &str| {
            root.named_sibling(name)
                .with_context(|| format!("building the {name} client"))
        };
        let [a, b, c] = Self::NAMES;
        Ok([sibling(a)?, sibling(b)?, sibling(c)?])
    }
}

/// The configuration of the leader election's client: the lock's (a timeout of half the
/// renew deadline), named `<user agent>/leader-election` as the process's other clients are.
fn leader_election_config(config: &Config, flags: &Flags) -> Config {
    let mut lock = lock_client_config(config, flags.leader_elect_renew_deadline);
    if let Some(agent) = &config.user_agent {
        lock.user_agent = Some(format!("{agent}/leader-election"));
    }
    lock
}

/// A broadcaster of events that logs them at debug and writes them through `client`.
fn event_broadcaster(client: &Client) -> anyhow::Result<EventBroadcaster> {
    let broadcaster = EventBroadcaster::new();
    broadcaster
        .start_logging(tracing::Level::DEBUG)
        .context("starting event logging")?;
    broadcaster
        .start_recording_to_sink(ApiEventSink::new(client.clone()))
        .context("starting the event sink")?;
    Ok(broadcaster)
}

/// The informer factory of the controller's caches.
fn informer_factory(
    client: Client,
    metrics: &metrics::Metrics,
    content_type: &str,
    shard: Option<&Sharding>,
) -> SharedInformerFactory {
    // As kube-controller-manager's informers, ours cache objects without managedFields; here
    // they are skipped while decoding rather than dropped after. They are named as
    // kube-controller-manager names its informers, so their `informer_*` series carry the
    // same labels. The Pod informer caches a view of each Pod; every informer reads protobuf
    // unless JSON was asked for (whole ReplicaSets and Deployments through the decoders
    // generated from upstream's types, which fill k8s-openapi's types as JSON would).
    // Objects are cached as decoded, not re-packed: Pod views from protobuf are built at
    // their size, and re-packing ReplicaSets and Deployments saved 4% of their bytes for 2.8%
    // of the controller's instructions (docs/benchmarks/controller.md).
    let factory = SharedInformerFactory::builder(client, RESYNC_PERIOD)
        .without_managed_fields()
        .reflector_options(ReflectorOptions {
            compact_objects: false,
            ..ReflectorOptions::default()
        })
        .metrics(metrics::INFORMER_NAME, metrics.informers.clone());
    // Sharded, every informer caches the namespaces of the buckets the member holds.
    let factory = match shard {
        Some(sharding) => factory.shard_scope(sharding.scope()),
        None => factory,
    };
    if content_type == kctrl_client::protobuf::PROTOBUF {
        factory
            .protobuf::<PodView>()
            .protobuf::<ReplicaSet>()
            .protobuf::<Deployment>()
            .build()
    } else {
        factory.build()
    }
}

async fn run(flags: Flags) -> anyhow::Result<()> {
    let enabled = flags.enabled_controllers().map_err(anyhow::Error::msg)?;
    flags.check_sharding(enabled).map_err(anyhow::Error::msg)?;
    let mut config = client_config(&flags)?;
    // Sharded: this replica's member identity, also in the User-Agent of its requests.
    let shard_identity = flags.shard_by.map(|_| shard_identity());
    if let Some(identity) = &shard_identity {
        config.user_agent = Some(sharded_user_agent(identity));
    }
    let server = kctrl_config::redacted_url(&config.server);
    let namespace = config.default_namespace.clone();

    let mut registry = Registry::default();
    let metrics = metrics::register(&mut registry);
    let rest_metrics: Arc<dyn kctrl_client::RestClientMetrics> =
        Arc::new(metrics.rest_client.clone());
    let backend = HttpBackend::new(config.clone())
        .context("building the API client")?
        .with_metrics(rest_metrics.clone());
    let clients = ControllerClients::new(&backend, &namespace)?;
    if flags.shard_by.is_some() && flags.leader_elect {
        info!("--shard-by is set: shard membership replaces leader election");
    }
    let leader_metrics = (flags.leader_elect && flags.shard_by.is_none())
        .then(|| PrometheusLeaderMetrics::new(&mut registry));
    let shard = match (flags.shard_by, &shard_identity) {
        (Some(field), Some(identity)) => Some(shard_member(
            &flags,
            field,
            identity,
            &config,
            &rest_metrics,
            &mut registry,
        )?),
        _ => None,
    };

    let cancel = CancellationToken::new();
    let signals = tokio::spawn(cancel_on_signal(cancel.clone()));
    // The bound on the whole shutdown, from the signal (or from an error ending the run).
    let hard_stop = tokio::spawn({
        let cancel = cancel.clone();
        async move {
            cancel.cancelled().await;
            tokio::time::sleep(SHUTDOWN_TIMEOUT).await;
            error!("shutdown did not finish within {SHUTDOWN_TIMEOUT:?}; exiting");
            eprintln!("deployment-controller: shutdown did not finish within {SHUTDOWN_TIMEOUT:?}");
            std::process::exit(1);
        }
    });

    // Events: written to the API (core/v1, as kube-controller-manager's recorders do) and
    // logged at debug; as there, each controller has a broadcaster writing through its own
    // client.
    let broadcaster = event_broadcaster(&clients.deployment)?;
    let recorder = Arc::new(broadcaster.new_recorder(EventSource::new("deployment-controller")));

    let factory = informer_factory(
        clients.informers.clone(),
        &metrics,
        &flags.kube_api_content_type,
        shard.as_ref(),
    );
    metrics::register_handler_panics(&mut registry, {
        let factory = factory.clone();
        move || factory.handler_panics()
    });
    let options = RunnerOptions {
        queue_metrics: Some(Arc::new(metrics.workqueue.clone())),
        sync_observer: Some(metrics.sync_observer.clone()),
        single_lane: !flags.priority_lanes,
        shard: shard.clone(),
    };
    let runner = match enabled.deployment {
        true => Some(Arc::new(
            DeploymentControllerRunner::with_options(
                clients.deployment.clone(),
                &factory,
                recorder.clone(),
                options,
            )
            .context("registering the informer handlers")?,
        )),
        false => None,
    };
    // The ReplicaSet controller on the same factory: its ReplicaSet and Pod informers are the
    // Deployment controller's (the same types), so each is watched and cached once.
    let replica_set_events = match enabled.replicaset {
        true => Some(event_broadcaster(&clients.replicaset)?),
        false => None,
    };
    let replica_sets = replica_set_events.as_ref().map(|broadcaster| {
        let recorder = Arc::new(
            broadcaster.new_recorder(EventSource::new(kctrl_replicaset::EVENT_SOURCE_COMPONENT)),
        );
        ReplicaSetController::new(
            &factory,
            clients.replicaset.clone(),
            recorder,
            kctrl_replicaset::Options {
                concurrent_syncs: usize::try_from(flags.concurrent_replicaset_syncs).unwrap_or(1),
                queue_metrics: Some(Arc::new(metrics.workqueue.clone())),
                controller_metrics: Some(kctrl_runtime::metrics::ControllerMetrics::new(
                    &mut registry,
                )),
                metrics: Some(ReplicaSetMetrics::new(&mut registry)),
                ..kctrl_replicaset::Options::default()
            },
        )
    });
    info!(
        deployment = enabled.deployment,
        replicaset = enabled.replicaset,
        "controllers enabled"
    );

    // The election (built now so that the endpoints can report on it; run below).
    let watchdog = HealthzAdaptor::new(DEFAULT_HEALTHZ_TIMEOUT);
    let elector = match leader_metrics {
        None => None,
        Some(leader_metrics) => {
            let lock_client = Client::new(
                HttpBackend::new(leader_election_config(&config, &flags))
                    .context("building the leader election client")?
                    .with_metrics(rest_metrics.clone()),
                namespace.clone(),
            );
            let events = recorder.clone();
            let lock = LeaseLock::for_lock_type(
                &flags.leader_elect_resource_lock,
                lock_client,
                flags.leader_elect_resource_namespace.clone(),
                flags.leader_elect_resource_name.clone(),
                leader_identity(),
            )
            .context("--leader-elect-resource-lock")?
            .with_event_hook(move |e: LeaderEvent| {
                let type_ = if e.event_type == "Warning" {
                    EventType::Warning
                } else {
                    EventType::Normal
                };
                events.event(&e.regarding, type_, e.reason, &e.message);
            });
            Some((lock, leader_metrics))
        }
    };

    let serving = CancellationToken::new();
    let leading = Arc::new(AtomicBool::new(false));
    if flags.secure_port != 0 {
        let deployment_synced = runner.as_ref().map(|r| r.caches_synced_flag());
        let replicaset_informers = replica_sets.as_ref().map(|_| {
            (
                factory.informer::<ReplicaSet>(),
                factory.informer::<PodView>(),
            )
        });
        let synced = move || {
            deployment_synced
                .as_ref()
                .is_none_or(|s| s.load(Ordering::Acquire))
                && replicaset_informers
                    .as_ref()
                    .is_none_or(|(rs, pods)| rs.has_synced() && pods.has_synced())
        };
        let leads = leading.clone();
        let election = elector.is_some();
        let ready: serve::Check = Arc::new(move || {
            if synced() {
                Ok(())
            } else if election && !leads.load(Ordering::Acquire) {
                // A standby has nothing to sync: it is ready to take over.
                Ok(())
            } else {
                Err(
                    "the caches of the enabled controllers (Deployments, ReplicaSets, Pods) have \
                     not synced yet"
                        .to_owned(),
                )
            }
        });
        let mut readyz = vec![("caches-synced", ready)];
        if let Some(sharding) = &shard {
            let sharding = sharding.clone();
            let holds: serve::Check =
                Arc::new(move || sharding.ready_check().map_err(|e| e.to_string()));
            readyz.push(("shard-range", holds));
        }
        let mut healthz = Vec::new();
        if elector.is_some() {
            let watchdog = watchdog.clone();
            let check: serve::Check = Arc::new(move || watchdog.check().map_err(|e| e.to_string()));
            healthz.push((HEALTHZ_NAME, check));
        }
        let gate = endpoint_gate(&flags, &mut registry, &rest_metrics).await?;
        let endpoints = serve::Endpoints {
            healthz,
            readyz,
            gate: Arc::new(gate),
            registry: Arc::new(registry),
            cache_dump: flags
                .debug_cache_endpoint
                .then(|| cache_dump(factory.clone())),
        };
        let (chain, key) = serve::load_or_generate_identity(
            flags.tls_cert_file.as_deref(),
            flags.tls_private_key_file.as_deref(),
            flags.bind_address,
        )?;
        serve::start(
            SocketAddr::new(flags.bind_address, flags.secure_port),
            chain,
            key,
            endpoints,
            serving.clone(),
        )
        .await?;
    }

    let result = async {
        if !wait_for_deployments_served(&clients.informers, &server, &cancel).await? {
            return Ok(());
        }
        info!(
            server,
            "API server serves apps/v1 deployments and lets us list them"
        );
        let workers = usize::try_from(flags.concurrent_deployment_syncs).unwrap_or(1);
        if let Some(member) = shard.as_ref().map(Sharding::member) {
            info!(
                group = %member.config().group,
                namespace = %member.config().namespace,
                lease = member.lease_name(),
                "sharded by namespace: joining the shard group"
            );
        }
        let both = (runner.is_some() && replica_sets.is_some()).then(|| factory.clone());
        let work = controllers(runner.map(|r| (r, workers)), replica_sets, both);
        match elector {
            None => finish_within(work(cancel.clone()), &cancel, shard.is_some()).await,
            Some((lock, leader_metrics)) => {
                let mut election =
                    LeaderElectionConfig::new(LeaderCallbacks::new(|_| async {}, || {}));
                election.lease_duration = flags.leader_elect_lease_duration;
                election.renew_deadline = flags.leader_elect_renew_deadline;
                election.retry_period = flags.leader_elect_retry_period;
                election.name = flags.leader_elect_resource_name.clone();
                election.release_on_cancel = true;
                election.watchdog = Some(watchdog.clone());
                election.metrics = Arc::new(leader_metrics);
                run_with_leader_election(
                    lock,
                    election,
                    work,
                    leading,
                    &cancel,
                    exit_on_lost_lease(),
                )
                .await
            }
        }
    }
    .await;

    cancel.cancel();
    if tokio::time::timeout(FINAL_STEP_TIMEOUT, factory.shutdown())
        .await
        .is_err()
    {
        warn!("timed out stopping the informers");
    }
    let events = async {
        match &replica_set_events {
            Some(replica_sets) => tokio::join!(broadcaster.shutdown(), replica_sets.shutdown()).0,
            None => broadcaster.shutdown().await,
        }
    };
    if tokio::time::timeout(FINAL_STEP_TIMEOUT, events)
        .await
        .is_err()
    {
        warn!("timed out writing the queued events");
    }
    hard_stop.abort();
    serving.cancel();
    if let Ok(Err(e)) = signals.await {
        error!(%e, "signal handling failed");
    }
    result
}

/// The shard membership of a replica started with `--shard-by`: its Lease, in the group's
/// namespace, written through a client of its own (bounded by the renew deadline, as leader
/// election's), timed by the `--leader-elect-*` durations, its metrics on `registry`, and
/// the scope its informers follow.
fn shard_member(
    flags: &Flags,
    field: ShardField,
    identity: &str,
    config: &Config,
    rest_metrics: &Arc<dyn kctrl_client::RestClientMetrics>,
    registry: &mut Registry,
) -> anyhow::Result<Sharding> {
    // The only field flags.rs lets through.
    if field != ShardField::Namespace {
        bail!("--shard-by: the Deployment controller shards by namespace only");
    }
    let mut lease_config = lock_client_config(config, flags.leader_elect_renew_deadline);
    lease_config.user_agent = Some(format!("{} shard-member", sharded_user_agent(identity)));
    let lease_client = Client::new(
        HttpBackend::new(lease_config)
            .context("building the shard member's client")?
            .with_metrics(rest_metrics.clone()),
        flags.shard_lease_namespace().to_owned(),
    );
    let mut shard = ShardConfig::new(
        flags.shard_group.clone(),
        flags.shard_lease_namespace(),
        identity,
    );
    shard.lease_duration = flags.leader_elect_lease_duration;
    shard.renew_deadline = flags.leader_elect_renew_deadline;
    shard.retry_period = flags.leader_elect_retry_period;
    shard.metrics = Arc::new(PrometheusShardMetrics::new(registry));
    Sharding::new(lease_client, shard, field).context(
        "configuring the shard member (--shard-group, --shard-lease-namespace, \
         --leader-elect-lease-duration, --leader-elect-renew-deadline, \
         --leader-elect-retry-period)",
    )
}

/// Runs the controller until `cancel` fires and its in-flight syncs finish.
async fn run_controller(
    runner: &DeploymentControllerRunner,
    workers: usize,
    cancel: &CancellationToken,
) -> anyhow::Result<()> {
    match runner.run(workers, cancel).await {
        Ok(()) => Ok(()),
        // Cancelled while waiting for the caches: a normal shutdown.
        Err(RunError::CachesNotSynced) if cancel.is_cancelled() => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// What runs while leading: started with a token that tells it to stop, it completes once
/// its work in flight has finished.
type LeaderWork =
    Arc<dyn Fn(CancellationToken) -> BoxFuture<'static, anyhow::Result<()>> + Send + Sync>;

/// The Deployment controller with `workers` workers, as the work of a leader.
#[cfg(test)]
fn deployment_controller(runner: Arc<DeploymentControllerRunner>, workers: usize) -> LeaderWork {
    controllers(Some((runner, workers)), None, None)
}

/// The enabled controllers (the Deployment controller's runner with its number of workers,
/// the ReplicaSet controller), run side by side as the work of a leader: either ending by
/// itself (an error) stops the other, so that a leader never runs half of its controllers;
/// the first error is returned once both have finished. The ReplicaSet controller runs once
/// per process (a second start is an error; the binary exits when it stops leading).
///
/// `shared` is the informer factory of both, when both run: its informers (the ReplicaSet
/// and Pod ones serve both controllers) are started to run until its shutdown, so that the
/// first controller to finish does not stop the caches under the other's syncs still in
/// flight (the Deployment runner would stop the informers it started when it returns).
fn controllers(
    deployment: Option<(Arc<DeploymentControllerRunner>, usize)>,
    replica_sets: Option<ReplicaSetController>,
    shared: Option<SharedInformerFactory>,
) -> LeaderWork {
    let with_replica_sets = replica_sets.is_some();
    let replica_sets = Arc::new(std::sync::Mutex::new(replica_sets));
    Arc::new(move |stop: CancellationToken| {
        let deployment = deployment.clone();
        let shared = shared.clone();
        let replica_sets = replica_sets
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        async move {
            if with_replica_sets && replica_sets.is_none() {
                bail!("the ReplicaSet controller was started twice");
            }
            if let Some(factory) = &shared {
                factory.start_until_shutdown();
            }
            let all = stop.child_token();
            let deployments = async {
                let Some((runner, workers)) = &deployment else {
                    return Ok(());
                };
                let result = run_controller(runner, *workers, &all).await;
                all.cancel();
                result
            };
            let replica_sets = async {
                let Some(controller) = replica_sets else {
                    return Ok(());
                };
                let result = match controller.run(all.clone()).await {
                    Ok(()) => Ok(()),
                    Err(kctrl_runtime::RunError::CachesNotSynced { .. }) if all.is_cancelled() => {
                        Ok(())
                    }
                    Err(e) => Err(anyhow::Error::new(e)),
                };
                all.cancel();
                result
            };
            let (deployments, replica_sets) = tokio::join!(deployments, replica_sets);
            deployments.and(replica_sets)
        }
        .boxed()
    })
}

/// How long the whole shutdown may take after SIGTERM/SIGINT (syncs in flight, releasing
/// the lease, writing queued events); past it the process exits with status 1. deploy/ gives
/// the pod `terminationGracePeriodSeconds: 30`, so this ends 10 s before the kubelet's
/// SIGKILL.
const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(20);

/// Of [`SHUTDOWN_TIMEOUT`], how long the syncs in flight may take. If they take longer the
/// lease is not released (a sync may still write as leader): it expires after
/// `--leader-elect-lease-duration` and the process exits with status 1. Sharded, the same
/// holds for the shard buckets of the syncs still in flight.
const IN_FLIGHT_SYNC_TIMEOUT: Duration = Duration::from_secs(10);

/// How long the informers get to stop, and the queued events to be written, at the end.
const FINAL_STEP_TIMEOUT: Duration = Duration::from_secs(4);

/// Runs `work` (the controllers, without leader election) to its end; once `shutdown` has
/// fired it gets [`IN_FLIGHT_SYNC_TIMEOUT`] to finish, as a leader does. Past that the work is
/// dropped and an error returned (the process exits with status 1). Sharded, dropping the work
/// stops the member's renewals without releasing the buckets still held (those with a sync
/// in flight; the others were released as the shutdown began): other replicas take them
/// over once this replica's Lease has expired, as after a crash.
async fn finish_within(
    work: impl Future<Output = anyhow::Result<()>>,
    shutdown: &CancellationToken,
    sharded: bool,
) -> anyhow::Result<()> {
    tokio::pin!(work);
    tokio::select! {
        result = &mut work => return result,
        () = shutdown.cancelled() => {}
    }
    match tokio::time::timeout(IN_FLIGHT_SYNC_TIMEOUT, work).await {
        Ok(result) => result,
        Err(_) if sharded => bail!(
            "the syncs in flight, or the release of the shard buckets after them, did not \
             finish within {IN_FLIGHT_SYNC_TIMEOUT:?} of the shutdown; exiting with the buckets \
             still held: other replicas take them over once this replica's Lease expires"
        ),
        Err(_) => bail!(
            "the syncs in flight did not finish within {IN_FLIGHT_SYNC_TIMEOUT:?} of the shutdown"
        ),
    }
}

/// What to do when the lease is lost while the controller may still write: in the binary,
/// exit with status 1 at once, as kube-controller-manager does.
type OnLostLease = Arc<dyn Fn(&str) + Send + Sync>;

fn exit_on_lost_lease() -> OnLostLease {
    Arc::new(|lease: &str| {
        error!(lease, "leaderelection lost");
        eprintln!("deployment-controller: leaderelection lost ({lease})");
        std::process::exit(1);
    })
}

/// Campaigns for the lease and runs `controller` while leading.
///
/// On SIGTERM/SIGINT (`shutdown`): the controller takes no new keys and finishes its
/// in-flight syncs (at most [`IN_FLIGHT_SYNC_TIMEOUT`]), and only then is the election
/// cancelled and (with `election.release_on_cancel`) the lease released, so a successor
/// never overlaps with a sync of ours. A signal that comes while the lease is still being
/// acquired stops the campaign; if that acquisition succeeds all the same, the controller it
/// started (told to stop at once) is waited for in the same way before the release.
///
/// Losing the lease while the controller runs, during the shutdown too, calls `on_lost` (the
/// binary exits with status 1, as kube-controller-manager does). The elector runs without
/// `release_on_cancel`, so it never releases the lease by itself when leadership ends; the
/// release is done here, once the controller has finished, and it reads the lease afresh and
/// writes it only if it still names this candidate (a lease taken over meanwhile is left
/// alone). The end of leadership that this function brings about itself (after a normal
/// shutdown or a controller that returned) is never reported as a lost lease.
///
/// A controller that returns by itself while leading (an error) ends the election too, and
/// its error is returned, instead of a lease renewed by a replica that does nothing. A
/// controller task that panics ends the election with an error and leaves the lease to
/// expire (after `lease_duration`) instead of releasing it: the panic skipped the
/// controller's own shutdown, so work it spawned (a sync in flight) may still be writing.
async fn run_with_leader_election(
    lock: LeaseLock,
    mut election: LeaderElectionConfig,
    controller: LeaderWork,
    leading: Arc<AtomicBool>,
    shutdown: &CancellationToken,
    on_lost: OnLostLease,
) -> anyhow::Result<()> {
    let (done_tx, mut done_rx) = tokio::sync::oneshot::channel::<anyhow::Result<()>>();
    // The elector would release the lease as soon as leadership ends, syncs in flight or
    // not; the release is done below, once the controller has finished.
    let release = std::mem::replace(&mut election.release_on_cancel, false);
    let lease_duration = election.lease_duration;
    // Moved into the task of the (one) leadership term when it starts, so that a panic
    // there drops it and `done_rx` fails instead of waiting forever.
    let done_tx = Arc::new(std::sync::Mutex::new(Some(done_tx)));
    // Cancelled before this function cancels the election itself: from then on the end of
    // the leader scope is ours, not a lost lease.
    let stepping_down = CancellationToken::new();
    let on_shutdown = shutdown.clone();
    let on_stepping_down = stepping_down.clone();
    let lease = format!("{}/{}", lock.namespace(), lock.name());
    let lost_lease = lease.clone();
    let started_leading = leading.clone();
    let released_lease = lease.clone();
    election.callbacks = LeaderCallbacks::new(
        move |leader_scope: CancellationToken| {
            let done_tx = done_tx.lock().unwrap_or_else(|e| e.into_inner()).take();
            let controller = controller.clone();
            let shutdown = on_shutdown.clone();
            let stepping_down = on_stepping_down.clone();
            let lease = lost_lease.clone();
            let on_lost = on_lost.clone();
            started_leading.store(true, Ordering::Release);
            async move {
                let Some(done_tx) = done_tx else {
                    error!(
                        lease,
                        "a second leadership term in one election; not starting"
                    );
                    return;
                };
                info!(lease, "became leader; starting the controller");
                let stop = CancellationToken::new();
                // The controller's workers are told to stop however this task ends (a panic
                // included).
                let _stop_on_exit = stop.clone().drop_guard();
                // Armed until the controller has finished: until then the lease may only
                // end by being lost (our own release comes after). Aborted when this task
                // ends, a panic included.
                let watch = AbortOnDrop(tokio::spawn(watch_leadership(
                    lease,
                    shutdown,
                    stepping_down,
                    leader_scope,
                    stop.clone(),
                    on_lost,
                )));
                let result = controller(stop.clone()).await;
                drop(watch);
                let _ = done_tx.send(result);
            }
        },
        || {},
    )
    .on_new_leader(move |holder| info!(lease, holder, "new leader observed"));
    let elector = LeaderElector::new(lock, election).context("configuring leader election")?;
    let election_cancel = CancellationToken::new();
    let mut campaign = Some(tokio::spawn({
        let elector = elector.clone();
        let election_cancel = election_cancel.clone();
        async move { elector.run(election_cancel).await }
    }));
    info!(identity = elector.identity(), "campaigning for the lease");
    let returned = tokio::select! {
        () = shutdown.cancelled() => None,
        done = &mut done_rx => Some(done),
    };
    // What the controller ended with, when it ran: wait for it (when we led) before the
    // release.
    let done = match returned {
        Some(done) => {
            warn!(lease = %released_lease, "the controller stopped while leading; ending the election");
            Some(done)
        }
        None => {
            if !leading.load(Ordering::Acquire) {
                // Stop campaigning. An acquisition already under way may still succeed and
                // start the controller; that is seen once the campaign has ended.
                stepping_down.cancel();
                election_cancel.cancel();
                end_campaign(&mut campaign).await;
            }
            if leading.load(Ordering::Acquire) {
                if let Ok(done) = tokio::time::timeout(IN_FLIGHT_SYNC_TIMEOUT, &mut done_rx).await {
                    Some(done)
                } else {
                    // Not released: a sync may still write. The lease expires on its own.
                    error!(lease = %released_lease,
                        "the syncs in flight did not finish within {IN_FLIGHT_SYNC_TIMEOUT:?}");
                    if let Some(campaign) = campaign.take() {
                        campaign.abort();
                    }
                    bail!(
                        "the syncs in flight did not finish within {IN_FLIGHT_SYNC_TIMEOUT:?}; \
                         exiting without releasing the lease {released_lease}"
                    );
                }
            } else {
                None
            }
        }
    };
    stepping_down.cancel();
    election_cancel.cancel();
    end_campaign(&mut campaign).await;
    match done {
        // The controller's task panicked: whatever it spawned may still run.
        Some(Err(_)) => bail!(
            "the controller panicked while leading; the lease {released_lease} is not released \
             (a sync may still be writing) and expires within {lease_duration:?}"
        ),
        // The controller finished, or never started: nothing of ours writes any more.
        Some(Ok(result)) => {
            if release {
                elector.release().await;
            }
            result
        }
        None => {
            if release {
                elector.release().await;
            }
            Ok(())
        }
    }
}

/// Stops the controller (`stop`) when the process shuts down or leadership ends, and calls
/// `on_lost` when leadership ends while the controller may still write, unless
/// `stepping_down` (our own end of the election) came first.
async fn watch_leadership(
    lease: String,
    shutdown: CancellationToken,
    stepping_down: CancellationToken,
    leader_scope: CancellationToken,
    stop: CancellationToken,
    on_lost: OnLostLease,
) {
    // Biased: `stepping_down` is cancelled before the election is, so when both fired it is
    // seen first.
    tokio::select! {
        biased;
        () = stepping_down.cancelled() => {
            stop.cancel();
            return;
        }
        () = shutdown.cancelled() => stop.cancel(),
        () = leader_scope.cancelled() => {
            stop.cancel();
            on_lost(&lease);
            return;
        }
    }
    tokio::select! {
        biased;
        () = stepping_down.cancelled() => {}
        () = leader_scope.cancelled() => {
            warn!(lease, "lease lost while the syncs in flight were finishing");
            on_lost(&lease);
        }
    }
}

/// Waits for the election task to end, once.
async fn end_campaign(campaign: &mut Option<tokio::task::JoinHandle<()>>) {
    if let Some(campaign) = campaign.take()
        && let Err(e) = campaign.await
    {
        error!(%e, "the leader election task ended abnormally");
    }
}

/// Aborts a task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

fn main() -> std::process::ExitCode {
    let flags = Flags::parse();
    init_logging(flags.verbosity);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(usize::from(flags.runtime_threads))
        .enable_all()
        .build();
    let result = match runtime {
        Ok(runtime) => runtime.block_on(run(flags)),
        Err(e) => Err(anyhow::Error::new(e).context("starting the async runtime")),
    };
    match result {
        Ok(()) => {
            info!("deployment controller stopped");
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            error!("{e:#}");
            eprintln!("deployment-controller: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The user a client certificate `chain` authenticates against the CAs of `ca` now.
    fn ca_user(
        ca: &auth::ClientCa,
        chain: &[rustls_pki_types::CertificateDer<'static>],
    ) -> Option<String> {
        ca.current()?
            .authenticate(chain)
            .ok()
            .flatten()
            .map(|u| u.name)
    }

    // Without --client-ca-file the client CA is looked up where the API server publishes it:
    // missing at start (no ConfigMap, no key), it is picked up once there; a changed CA
    // replaces the old one; content that cannot be used leaves the last good CAs.
    #[tokio::test(start_paused = true)]
    async fn the_client_ca_configmap_is_read_until_it_can_be_and_again_after() {
        use k8s_openapi::api::core::v1::ConfigMap;
        let (first_pem, first) = test_ca("first CA");
        let (second_pem, second) = test_ca("second CA");
        let (alice, bob) = (client_chain(&first, "alice"), client_chain(&second, "bob"));
        let fake = kctrl_fake::FakeApi::new();
        let client = fake.client();
        let ca = auth::ClientCa::from_configmap(client.clone()).await;
        assert!(ca.current().is_none());
        assert!(ca.tls_verifier().1.is_none());
        ca.spawn_reloads();
        let (namespace, name, key) = auth::AUTHENTICATION_CONFIGMAP;
        let configmaps = Api::<ConfigMap>::namespaced(client.clone(), namespace);
        let with = |data: &[(&str, &str)]| ConfigMap {
            metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                name: Some(name.to_owned()),
                namespace: Some(namespace.to_owned()),
                ..Default::default()
            },
            data: Some(
                data.iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect(),
            ),
            ..Default::default()
        };
        let params = kctrl_client::PostParams::default();
        configmaps
            .create(&params, &with(&[("other", "x")]))
            .await
            .unwrap();
        tokio::time::sleep(auth::CONFIGMAP_RELOAD_INTERVAL + Duration::from_secs(1)).await;
        assert!(ca.current().is_none());
        configmaps
            .update(&params, &with(&[(key, &first_pem)]))
            .await
            .unwrap();
        tokio::time::sleep(auth::CONFIGMAP_RELOAD_INTERVAL).await;
        assert_eq!(ca_user(&ca, &alice).as_deref(), Some("alice"));
        let (generation, verifier) = ca.tls_verifier();
        assert!(verifier.is_some());
        configmaps
            .update(&params, &with(&[(key, "not a certificate")]))
            .await
            .unwrap();
        tokio::time::sleep(auth::CONFIGMAP_RELOAD_INTERVAL).await;
        assert_eq!(ca_user(&ca, &alice).as_deref(), Some("alice"));
        assert_eq!(ca.tls_verifier().0, generation);
        configmaps
            .update(&params, &with(&[(key, &second_pem)]))
            .await
            .unwrap();
        tokio::time::sleep(auth::CONFIGMAP_RELOAD_INTERVAL).await;
        assert_eq!(ca_user(&ca, &alice), None);
        assert_eq!(ca_user(&ca, &bob).as_deref(), Some("bob"));
        assert!(ca.tls_verifier().0 > generation);
        configmaps.delete(name, &Default::default()).await.unwrap();
        tokio::time::sleep(auth::CONFIGMAP_RELOAD_INTERVAL).await;
        assert_eq!(ca_user(&ca, &bob).as_deref(), Some("bob"));
    }

    /// A CA (its PEM) and what signs with it.
    fn test_ca(name: &str) -> (String, rcgen::Issuer<'static, rcgen::KeyPair>) {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        (cert.pem(), rcgen::Issuer::new(params, key))
    }

    /// A client certificate of `ca` for the user `cn`.
    fn client_chain(
        ca: &rcgen::Issuer<'static, rcgen::KeyPair>,
        cn: &str,
    ) -> Vec<rustls_pki_types::CertificateDer<'static>> {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name = rcgen::DistinguishedName::new();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, cn);
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
        let key = rcgen::KeyPair::generate().unwrap();
        vec![params.signed_by(&key, ca).unwrap().der().clone()]
    }

    /// The user `gate` authenticates from a client certificate `chain`, or why not.
    async fn certificate_user(
        gate: &auth::Gate,
        chain: &[rustls_pki_types::CertificateDer<'static>],
    ) -> Result<String, String> {
        match gate.authenticate(&hyper::HeaderMap::new(), chain).await {
            Ok(Some(user)) => Ok(user.name),
            Ok(None) => Err("anonymous".to_owned()),
            Err(e) => Err(e.to_string()),
        }
    }

    // --client-ca-file is read again while the process runs: a CA taken out of the file
    // stops being trusted, a CA added starts being trusted, and a file that cannot be used
    // for a while leaves the last good CAs in place.
    #[tokio::test(start_paused = true)]
    async fn the_client_ca_file_is_reloaded() {
        let (first_pem, first) = test_ca("first CA");
        let (second_pem, second) = test_ca("second CA");
        let (third_pem, third) = test_ca("third CA");
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("client-ca.crt");
        std::fs::write(&file, format!("{first_pem}{second_pem}")).unwrap();
        let flags = flags(&[
            "--client-ca-file",
            file.to_str().unwrap(),
            "--authentication-skip-lookup",
        ]);
        let mut registry = Registry::default();
        let rest_metrics: Arc<dyn kctrl_client::RestClientMetrics> =
            Arc::new(metrics::register(&mut Registry::default()).rest_client);
        let gate = endpoint_gate(&flags, &mut registry, &rest_metrics)
            .await
            .unwrap();
        let (alice, bob, carol) = (
            client_chain(&first, "alice"),
            client_chain(&second, "bob"),
            client_chain(&third, "carol"),
        );
        assert_eq!(
            certificate_user(&gate, &alice).await.as_deref(),
            Ok("alice")
        );
        assert_eq!(certificate_user(&gate, &bob).await.as_deref(), Ok("bob"));
        assert!(certificate_user(&gate, &carol).await.is_err());

        std::fs::write(&file, format!("{first_pem}{third_pem}")).unwrap();
        tokio::time::sleep(auth::FILE_RELOAD_INTERVAL + Duration::from_secs(1)).await;
        assert_eq!(
            certificate_user(&gate, &alice).await.as_deref(),
            Ok("alice")
        );
        let refused = certificate_user(&gate, &bob).await.unwrap_err();
        assert!(
            refused.contains("verifying the client certificate"),
            "{refused}"
        );
        assert_eq!(
            certificate_user(&gate, &carol).await.as_deref(),
            Ok("carol")
        );

        // Mid-rotation the file is empty, then gone: the last good CAs stay.
        std::fs::write(&file, "").unwrap();
        tokio::time::sleep(auth::FILE_RELOAD_INTERVAL + Duration::from_secs(1)).await;
        std::fs::remove_file(&file).unwrap();
        tokio::time::sleep(auth::FILE_RELOAD_INTERVAL + Duration::from_secs(1)).await;
        assert_eq!(
            certificate_user(&gate, &carol).await.as_deref(),
            Ok("carol")
        );
        std::fs::write(&file, &second_pem).unwrap();
        tokio::time::sleep(auth::FILE_RELOAD_INTERVAL + Duration::from_secs(1)).await;
        assert_eq!(certificate_user(&gate, &bob).await.as_deref(), Ok("bob"));
        assert!(certificate_user(&gate, &carol).await.is_err());
    }

    fn flags(args: &[&str]) -> Flags {
        Flags::try_parse_from(
            [
                "deployment-controller",
                "--master",
                "https://127.0.0.1:6443",
            ]
            .iter()
            .chain(args),
        )
        .unwrap()
    }

    #[test]
    fn a_qps_too_small_for_the_limiter_is_refused_with_the_flag_named() {
        let err = client_config(&flags(&["--kube-api-qps=1e-30"])).unwrap_err();
        let text = format!("{err:#}");
        assert!(text.contains("--kube-api-qps"), "{text}");
        assert!(text.contains("too small"), "{text}");
        assert!(client_config(&flags(&["--kube-api-qps=0.5"])).is_ok());
        assert!(client_config(&flags(&["--kube-api-qps=-1"])).is_ok());
    }

    #[test]
    fn api_requests_get_a_default_timeout() {
        let config = client_config(&flags(&[])).unwrap();
        assert_eq!(config.timeout, Some(DEFAULT_REQUEST_TIMEOUT));
    }

    fn web_deployment() -> Deployment {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {
                "replicas": 1,
                "strategy": {
                    "type": "RollingUpdate",
                    "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}
                },
                "revisionHistoryLimit": 10,
                "progressDeadlineSeconds": 600,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{"name": "c", "image": "nginx"}]}
                }
            }
        }))
        .unwrap()
    }

    /// The Deployment controller on `client` (its informer factory returned for shutdown).
    fn test_controller(client: Client) -> (LeaderWork, SharedInformerFactory) {
        let factory = SharedInformerFactory::new(client.clone(), Duration::ZERO);
        let recorder = Arc::new(kctrl_deployment::events::RecordingEventRecorder::new());
        let runner = Arc::new(DeploymentControllerRunner::new(client, &factory, recorder).unwrap());
        (deployment_controller(runner, 1), factory)
    }

    // SIGTERM arrives while a sync is in flight, then the lease renewals fail: the lost-lease
    // exit must still fire (the sync still writes as leader), not be disarmed by the signal.
    #[tokio::test(start_paused = true)]
    async fn losing_the_lease_while_in_flight_syncs_finish_still_ends_the_process() {
        use kctrl_fake::{FakeApi, Reaction, errors};

        let fake = FakeApi::new();
        let (client, entered, proceed) = hold_first(&fake, "create", "replicasets");
        let (controller, factory) = test_controller(client);
        let (lost_tx, mut lost_rx) = tokio::sync::mpsc::unbounded_channel::<String>();
        let on_lost: OnLostLease = Arc::new(move |lease: &str| {
            let _ = lost_tx.send(lease.to_owned());
        });
        let (shutdown, leading, run) = spawn_election(fake.client(), controller, on_lost);
        Api::<Deployment>::namespaced(fake.client(), "default")
            .create(&Default::default(), &web_deployment())
            .await
            .unwrap();
        tokio::time::timeout(Duration::from_secs(60), entered)
            .await
            .expect("the sync starts")
            .unwrap();
        assert!(leading.load(Ordering::Acquire));

        shutdown.cancel();
        fake.prepend_reactor("update", "leases", |_| {
            Reaction::Error(errors::internal_error("etcd is down"))
        });
        let lost = tokio::time::timeout(Duration::from_secs(60), lost_rx.recv())
            .await
            .expect("the lease is lost within the renew deadline");
        assert_eq!(lost.as_deref(), Some("kube-system/lease"));

        proceed.send(()).unwrap();
        let _ = tokio::time::timeout(Duration::from_secs(60), run)
            .await
            .expect("returns once the sync finished");
        factory.shutdown().await;
    }

    // The renewals fail while a sync is in flight: the lease must not be released before
    // that sync has finished (a successor would sync beside it), only after.
    #[tokio::test(start_paused = true)]
    async fn a_lost_lease_is_not_released_while_a_sync_is_in_flight() {
        use kctrl_fake::{FakeApi, Reaction, errors};

        let fake = FakeApi::new();
        let (client, entered, proceed) = hold_first(&fake, "create", "replicasets");
        let (controller, factory) = test_controller(client);
        let sync_done = Arc::new(AtomicBool::new(false));
        let refuse_renewals = Arc::new(AtomicBool::new(false));
        fake.prepend_reactor("update", "leases", {
            let refuse = refuse_renewals.clone();
            move |action| {
                let lease: k8s_openapi::api::coordination::v1::Lease = action.object_as().unwrap();
                let releasing = lease
                    .spec
                    .and_then(|s| s.holder_identity)
                    .unwrap_or_default()
                    .is_empty();
                if !releasing && refuse.load(Ordering::SeqCst) {
                    Reaction::Error(errors::internal_error("etcd is slow"))
                } else {
                    Reaction::Continue
                }
            }
        });
        // Prepended after: sees every update first, the releases included.
        let releases = record_releases(&fake, sync_done.clone());
        let (lost_tx, mut lost_rx) = tokio::sync::mpsc::unbounded_channel::<String>();
        let on_lost: OnLostLease = Arc::new(move |lease: &str| {
            let _ = lost_tx.send(lease.to_owned());
        });
        let (_shutdown, _leading, mut run) = spawn_election(fake.client(), controller, on_lost);
        Api::<Deployment>::namespaced(fake.client(), "default")
            .create(&Default::default(), &web_deployment())
            .await
            .unwrap();
        tokio::time::timeout(Duration::from_secs(60), entered)
            .await
            .expect("the sync starts")
            .unwrap();

        refuse_renewals.store(true, Ordering::SeqCst);
        let lost = tokio::time::timeout(Duration::from_secs(60), lost_rx.recv())
            .await
            .expect("the lease is lost within the renew deadline");
        assert_eq!(lost.as_deref(), Some("kube-system/lease"));
        // The sync goes on for longer than the lease lasts: the lease must not be released
        // meanwhile (an elector releasing on cancel does so at once).
        let early = tokio::time::timeout(Duration::from_secs(30), &mut run).await;
        assert!(early.is_err(), "returned while the sync ran: {early:?}");
        assert!(
            releases.lock().unwrap().is_empty(),
            "the lease was released while the sync was in flight"
        );

        sync_done.store(true, Ordering::SeqCst);
        proceed.send(()).unwrap();
        tokio::time::timeout(Duration::from_secs(60), run)
            .await
            .expect("returns once the sync finished")
            .unwrap()
            .unwrap();
        assert_eq!(
            *releases.lock().unwrap(),
            [true],
            "released once the sync finished"
        );
        factory.shutdown().await;
    }

    /// A backend on a fake API that holds the first request with `verb` on `plural` until the
    /// test lets it through: `entered` fires when it arrives, sending on `proceed` lets it
    /// reach the fake. Everything else goes straight to the fake.
    #[derive(Clone)]
    struct Held {
        fake: kctrl_fake::FakeApi,
        verb: &'static str,
        plural: &'static str,
        gate: HeldGate,
    }

    type HeldGate = Arc<
        std::sync::Mutex<
            Option<(
                tokio::sync::oneshot::Sender<()>,
                tokio::sync::oneshot::Receiver<()>,
            )>,
        >,
    >;

    /// A client holding the first `verb` on `plural` (see [`Held`]), with the receiver that
    /// fires when that request arrives and the sender that lets it through.
    fn hold_first(
        fake: &kctrl_fake::FakeApi,
        verb: &'static str,
        plural: &'static str,
    ) -> (
        Client,
        tokio::sync::oneshot::Receiver<()>,
        tokio::sync::oneshot::Sender<()>,
    ) {
        let (entered_tx, entered_rx) = tokio::sync::oneshot::channel();
        let (proceed_tx, proceed_rx) = tokio::sync::oneshot::channel();
        let held = Held {
            fake: fake.clone(),
            verb,
            plural,
            gate: Arc::new(std::sync::Mutex::new(Some((entered_tx, proceed_rx)))),
        };
        (Client::new(held, "default"), entered_rx, proceed_tx)
    }

    impl kctrl_client::Backend for Held {
        fn call(
            &self,
            request: kctrl_client::ApiRequest,
        ) -> BoxFuture<'_, Result<bytes::Bytes, kctrl_client::Error>> {
            async move {
                if request.verb() == self.verb && request.resource.plural == self.plural {
                    let gate = self.gate.lock().unwrap().take();
                    if let Some((entered, proceed)) = gate {
                        let _ = entered.send(());
                        let _ = proceed.await;
                    }
                }
                self.fake.call(request).await
            }
            .boxed()
        }

        fn watch(
            &self,
            request: kctrl_client::ApiRequest,
        ) -> BoxFuture<'_, Result<kctrl_client::WatchFrames, kctrl_client::Error>> {
            self.fake.watch(request)
        }

        fn server_version(
            &self,
        ) -> BoxFuture<'_, Result<k8s_openapi::apimachinery::pkg::version::Info, kctrl_client::Error>>
        {
            self.fake.server_version()
        }

        fn api_resources<'a>(
            &'a self,
            group_version: &'a str,
        ) -> BoxFuture<
            'a,
            Result<
                k8s_openapi::apimachinery::pkg::apis::meta::v1::APIResourceList,
                kctrl_client::Error,
            >,
        > {
            self.fake.api_resources(group_version)
        }
    }

    /// The lease `kube-system/lease` for the candidate `me`, through `client`.
    /// `run_with_leader_election` of `controller` on a task, with the test election over
    /// `client`'s Lease: the shutdown token, the leading flag and the task.
    fn spawn_election(
        client: Client,
        controller: LeaderWork,
        on_lost: OnLostLease,
    ) -> (
        CancellationToken,
        Arc<AtomicBool>,
        tokio::task::JoinHandle<anyhow::Result<()>>,
    ) {
        let shutdown = CancellationToken::new();
        let leading = Arc::new(AtomicBool::new(false));
        let run = tokio::spawn({
            let (shutdown, leading) = (shutdown.clone(), leading.clone());
            async move {
                let lock = test_lock(client);
                run_with_leader_election(
                    lock,
                    test_election(),
                    controller,
                    leading,
                    &shutdown,
                    on_lost,
                )
                .await
            }
        });
        (shutdown, leading, run)
    }

    fn test_lock(client: Client) -> LeaseLock {
        LeaseLock::for_lock_type(
            "leases",
            client,
            "kube-system".to_owned(),
            "lease".to_owned(),
            "me".to_owned(),
        )
        .unwrap()
    }

    /// kube-controller-manager's default timings, releasing on cancel as the binary asks.
    fn test_election() -> LeaderElectionConfig {
        let mut election = LeaderElectionConfig::new(LeaderCallbacks::new(|_| async {}, || {}));
        election.lease_duration = Duration::from_secs(15);
        election.renew_deadline = Duration::from_secs(10);
        election.retry_period = Duration::from_secs(2);
        election.release_on_cancel = true;
        election
    }

    /// The lease as the fake API holds it.
    fn stored_lease(fake: &kctrl_fake::FakeApi) -> k8s_openapi::api::coordination::v1::Lease {
        fake.object(Some("kube-system"), "lease")
            .expect("the lease exists")
    }

    /// An `on_lost` that records the leases it was called for.
    fn recording_on_lost() -> (OnLostLease, Arc<std::sync::Mutex<Vec<String>>>) {
        let lost = Arc::new(std::sync::Mutex::new(Vec::new()));
        let on_lost: OnLostLease = {
            let lost = lost.clone();
            Arc::new(move |lease: &str| lost.lock().unwrap().push(lease.to_owned()))
        };
        (on_lost, lost)
    }

    /// Records, for each write of the lease with an empty holder (a release), whether
    /// `finished` was set by then.
    fn record_releases(
        fake: &kctrl_fake::FakeApi,
        finished: Arc<AtomicBool>,
    ) -> Arc<std::sync::Mutex<Vec<bool>>> {
        let releases = Arc::new(std::sync::Mutex::new(Vec::new()));
        fake.prepend_reactor("update", "leases", {
            let releases = releases.clone();
            move |action| {
                let lease: k8s_openapi::api::coordination::v1::Lease = action.object_as().unwrap();
                if lease
                    .spec
                    .and_then(|s| s.holder_identity)
                    .unwrap_or_default()
                    .is_empty()
                {
                    releases
                        .lock()
                        .unwrap()
                        .push(finished.load(Ordering::SeqCst));
                }
                kctrl_fake::Reaction::Continue
            }
        });
        releases
    }

    // The controller panics while leading: the election must end (no replica renewing a
    // lease for a controller that no longer runs) with an error, and the lease must not be
    // released (the panic skipped the controller's shutdown, so its workers may still be
    // syncing): it expires on its own.
    #[tokio::test(start_paused = true)]
    async fn a_controller_that_panics_ends_the_election_without_releasing_the_lease() {
        let fake = kctrl_fake::FakeApi::new();
        let releases = record_releases(&fake, Arc::new(AtomicBool::new(false)));
        let (on_lost, lost) = recording_on_lost();
        let controller: LeaderWork = Arc::new(|_stop: CancellationToken| {
            async {
                tokio::task::yield_now().await;
                panic!("the controller broke");
            }
            .boxed()
        });
        let (_shutdown, leading, run) = spawn_election(fake.client(), controller, on_lost);
        // At once: well before a renewal would be due.
        let result = tokio::time::timeout(Duration::from_secs(1), run)
            .await
            .expect("the election ends when the controller panics")
            .unwrap();
        let err = result.expect_err("a panicked controller is a failure");
        assert!(format!("{err:#}").contains("panicked"), "{err:#}");
        assert!(leading.load(Ordering::Acquire));
        let held = stored_lease(&fake);
        assert_eq!(
            held.spec
                .as_ref()
                .and_then(|s| s.holder_identity.as_deref()),
            Some("me"),
            "the lease was released"
        );
        assert!(releases.lock().unwrap().is_empty());
        // Nobody renews it any more: it expires.
        tokio::time::sleep(Duration::from_secs(30)).await;
        assert_eq!(
            stored_lease(&fake).metadata.resource_version,
            held.metadata.resource_version,
            "the lease is still renewed"
        );
        assert!(
            lost.lock().unwrap().is_empty(),
            "{:?}",
            lost.lock().unwrap()
        );
    }

    // SIGTERM arrives while the lease is being acquired (not leading yet), and that
    // acquisition still succeeds: the controller it starts must be waited for before the
    // lease is released, and the normal shutdown must not be reported as a lost lease.
    #[tokio::test(start_paused = true)]
    async fn a_shutdown_racing_the_acquisition_waits_for_the_controller_and_is_no_loss() {
        let fake = kctrl_fake::FakeApi::new();
        let (client, entered, proceed) = hold_first(&fake, "create", "leases");
        let finished = Arc::new(AtomicBool::new(false));
        let releases = record_releases(&fake, finished.clone());
        let (on_lost, lost) = recording_on_lost();
        let (started_tx, started_rx) = tokio::sync::oneshot::channel::<()>();
        let (finish_tx, finish_rx) = tokio::sync::oneshot::channel::<()>();
        let channels = Arc::new(std::sync::Mutex::new(Some((started_tx, finish_rx))));
        let controller: LeaderWork = {
            let finished = finished.clone();
            Arc::new(move |stop: CancellationToken| {
                let channels = channels.lock().unwrap().take();
                let finished = finished.clone();
                async move {
                    let (started, finish) = channels.expect("one leadership term");
                    stop.cancelled().await;
                    let _ = started.send(());
                    // Syncs in flight finishing.
                    let _ = finish.await;
                    finished.store(true, Ordering::SeqCst);
                    Ok(())
                }
                .boxed()
            })
        };
        let (shutdown, leading, mut run) = spawn_election(client, controller, on_lost);
        tokio::time::timeout(Duration::from_secs(60), entered)
            .await
            .expect("the campaign creates the lease")
            .unwrap();
        assert!(!leading.load(Ordering::Acquire));
        // The signal, and the acquisition completing, at once.
        shutdown.cancel();
        proceed.send(()).unwrap();
        tokio::time::timeout(Duration::from_secs(60), started_rx)
            .await
            .expect("the acquired term starts the controller, told to stop")
            .unwrap();
        assert!(leading.load(Ordering::Acquire));
        // Its syncs take a while: nothing may release the lease meanwhile.
        let early = tokio::time::timeout(Duration::from_secs(5), &mut run).await;
        assert!(
            early.is_err(),
            "returned before the controller finished: {early:?}"
        );
        assert!(
            releases.lock().unwrap().is_empty(),
            "the lease was released while the controller ran"
        );
        finish_tx.send(()).unwrap();
        let result = tokio::time::timeout(Duration::from_secs(60), run)
            .await
            .expect("returns once the controller finished")
            .unwrap();
        assert!(result.is_ok(), "{result:?}");
        assert_eq!(*releases.lock().unwrap(), [true], "released once, after");
        assert!(
            lost.lock().unwrap().is_empty(),
            "a normal shutdown was reported as a lost lease: {:?}",
            lost.lock().unwrap()
        );
    }

    // Both controllers share the ReplicaSet and Pod informers. The Deployment controller,
    // with nothing in flight, ends first on a stop; the ReplicaSet controller still waits for
    // a Pod create: its caches must stay current meanwhile (they stopped with the Deployment
    // runner when it had started them).
    #[tokio::test(start_paused = true)]
    async fn the_informers_both_controllers_share_outlive_the_first_to_stop() {
        use k8s_openapi::api::apps::v1::ReplicaSet;
        let fake = kctrl_fake::FakeApi::new();
        let (client, entered, proceed) = hold_first(&fake, "create", "pods");
        let factory = SharedInformerFactory::new(client.clone(), Duration::ZERO);
        let recorder = Arc::new(kctrl_deployment::events::RecordingEventRecorder::new());
        let runner = Arc::new(
            DeploymentControllerRunner::new(client.clone(), &factory, recorder.clone()).unwrap(),
        );
        let replica_sets = ReplicaSetController::new(
            &factory,
            client,
            recorder,
            kctrl_replicaset::Options::default(),
        );
        let work = controllers(
            Some((runner.clone(), 1)),
            Some(replica_sets),
            Some(factory.clone()),
        );
        let stop = CancellationToken::new();
        let run = tokio::spawn(work(stop.clone()));
        let rs = |name: &str| -> ReplicaSet {
            serde_json::from_value(serde_json::json!({
                "apiVersion": "apps/v1", "kind": "ReplicaSet",
                "metadata": {"name": name, "namespace": "default"},
                "spec": {
                    "replicas": 1,
                    "selector": {"matchLabels": {"app": name}},
                    "template": {
                        "metadata": {"labels": {"app": name}},
                        "spec": {"containers": [{"name": "c", "image": "nginx"}]}
                    }
                }
            }))
            .unwrap()
        };
        let api = Api::<ReplicaSet>::namespaced(fake.client(), "default");
        api.create(&Default::default(), &rs("web")).await.unwrap();
        tokio::time::timeout(Duration::from_secs(60), entered)
            .await
            .expect("the ReplicaSet controller creates a Pod")
            .unwrap();
        stop.cancel();
        // The Deployment controller has returned by now; the ReplicaSet one still waits.
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(!run.is_finished());
        api.create(&Default::default(), &rs("late")).await.unwrap();
        let store = factory.informer::<ReplicaSet>().store().clone();
        let mut cached = false;
        for _ in 0..50 {
            if store.get("default/late").is_some() {
                cached = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(
            cached,
            "the ReplicaSet cache stopped with the Deployment controller"
        );
        proceed.send(()).unwrap();
        let result = tokio::time::timeout(Duration::from_secs(60), run)
            .await
            .expect("both controllers end")
            .unwrap();
        assert!(result.is_ok(), "{result:?}");
        factory.shutdown().await;
    }

    // Without leader election the controllers get IN_FLIGHT_SYNC_TIMEOUT after the signal,
    // as a leader does, and the process then exits 1 (sharded: naming the buckets left to
    // expire); work that ends in time is not cut short.
    #[tokio::test(start_paused = true)]
    async fn without_an_election_the_syncs_in_flight_get_a_bounded_time() {
        let shutdown = CancellationToken::new();
        let started = tokio::time::Instant::now();
        let stuck = tokio::spawn({
            let shutdown = shutdown.clone();
            async move { finish_within(std::future::pending(), &shutdown, true).await }
        });
        tokio::time::sleep(Duration::from_secs(30)).await;
        assert!(!stuck.is_finished(), "timed out before any shutdown");
        shutdown.cancel();
        let err = stuck.await.unwrap().unwrap_err().to_string();
        assert_eq!(
            started.elapsed(),
            Duration::from_secs(30) + IN_FLIGHT_SYNC_TIMEOUT
        );
        assert!(err.contains("shard buckets"), "{err}");

        let shutdown = CancellationToken::new();
        shutdown.cancel();
        let slow_but_in_time = async {
            tokio::time::sleep(IN_FLIGHT_SYNC_TIMEOUT / 2).await;
            Ok(())
        };
        finish_within(slow_but_in_time, &shutdown, true)
            .await
            .unwrap();
    }

    /// The binary's informers publish client-go's `informer_*` series under
    /// kube-controller-manager's informer name, one set per cached resource.
    #[tokio::test]
    async fn informers_publish_their_series_on_the_registry() {
        let fake = kctrl_fake::FakeApi::new();
        fake.add(&web_deployment()).unwrap();
        let mut registry = Registry::default();
        let metrics = metrics::register(&mut registry);
        let factory = informer_factory(
            fake.client(),
            &metrics,
            kctrl_client::protobuf::PROTOBUF,
            None,
        );
        let recorder = Arc::new(kctrl_deployment::events::RecordingEventRecorder::new());
        let _runner = DeploymentControllerRunner::new(fake.client(), &factory, recorder).unwrap();
        let cancel = CancellationToken::new();
        factory.start(&cancel);
        let synced = factory.wait_for_cache_sync(&cancel).await;
        assert_eq!(synced.len(), 3, "{synced:?}");
        assert!(synced.values().all(|s| *s), "{synced:?}");
        let rv = factory.informer::<Deployment>().store().resource_version();
        assert!(rv.parse::<u64>().unwrap() > 0, "{rv}");
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        for (group, resource) in [
            ("apps", "deployments"),
            ("apps", "replicasets"),
            ("", "pods"),
        ] {
            let labels = format!(
                r#"{{name="kube-controller-manager",group="{group}",version="v1",resource="{resource}"}}"#
            );
            for series in [
                "informer_queued_items",
                "informer_processing_latency_seconds_count",
                "informer_store_resource_version",
            ] {
                assert!(
                    text.contains(&format!("{series}{labels}")),
                    "{series}{labels}:\n{text}"
                );
            }
        }
        assert!(
            text.contains(&format!(
                r#"informer_store_resource_version{{name="kube-controller-manager",group="apps",version="v1",resource="deployments"}} {rv}"#
            )),
            "{text}"
        );
        cancel.cancel();
        factory.shutdown().await;
    }

    #[test]
    fn shard_identities_make_lease_names() {
        let uuid = "0f8fad5b-d9cb-469f-a165-70867728950e";
        assert_eq!(
            shard_identity_of(&format!("web-7d9f_{uuid}")),
            format!("web-7d9f-{uuid}")
        );
        assert_eq!(
            shard_identity_of(&format!("Build_Host.example.COM_{uuid}")),
            format!("build-host-example-com-{uuid}")
        );
        assert_eq!(
            shard_identity_of(&format!("--_{uuid}")),
            format!("replica-{uuid}")
        );
        let long = "h".repeat(100);
        let id = shard_identity_of(&format!("{long}_{uuid}"));
        assert_eq!(id, format!("{}-{uuid}", "h".repeat(63)));
        for identity in [shard_identity(), shard_identity_of(&format!("a.-b_{uuid}"))] {
            let config = ShardConfig::new("deployment-controller", "kube-system", &identity);
            assert_eq!(config.validate(), Ok(()), "{identity}");
        }
        let ua = sharded_user_agent("web-1");
        assert!(ua.starts_with("deployment-controller/"), "{ua}");
        assert!(ua.ends_with(" (shard web-1)"), "{ua}");
    }

    #[test]
    fn leader_identities_are_host_and_uuid_and_unique() {
        let a = leader_identity();
        let b = leader_identity();
        assert_ne!(a, b);
        let (host, uuid) = a.rsplit_once('_').unwrap();
        assert!(!host.is_empty());
        let groups: Vec<&str> = uuid.split('-').collect();
        assert_eq!(
            groups.iter().map(|g| g.len()).collect::<Vec<_>>(),
            [8, 4, 4, 4, 12]
        );
        assert!(groups[2].starts_with('4'), "{uuid}");
        assert!(matches!(&groups[3][..1], "8" | "9" | "a" | "b"), "{uuid}");
    }

    // As kube-controller-manager: a client per controller and one for the informers, each
    // named in its user agent and limited by its own bucket at the flags' QPS and burst.
    #[test]
    fn each_controller_and_the_informers_have_a_client_of_their_own() {
        let flags = flags(&["--kube-api-qps", "40", "--kube-api-burst", "60"]);
        let root = HttpBackend::new(client_config(&flags).unwrap()).unwrap();
        let backends = ControllerClients::backends(&root).unwrap();
        let agents: Vec<&str> = backends.iter().map(|b| b.user_agent().unwrap()).collect();
        let base = format!("deployment-controller/{}", env!("CARGO_PKG_VERSION"));
        assert_eq!(root.user_agent(), Some(&*base));
        let lock = leader_election_config(&client_config(&flags).unwrap(), &flags);
        assert_eq!(lock.user_agent, Some(format!("{base}/leader-election")));
        assert_eq!(
            agents,
            [
                format!("{base}/shared-informers"),
                format!("{base}/deployment-controller"),
                format!("{base}/replicaset-controller"),
            ]
        );
        for backend in &backends {
            assert_eq!(backend.rate_limit(), Some((40.0, 60)));
        }
    }
}

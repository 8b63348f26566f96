//! `deployment-controller`: kube-controller-manager's Deployment controller as a standalone
//! process, built on the kctrl crates.
//!
//! It watches Deployments, ReplicaSets and Pods, and reconciles each Deployment with
//! `--concurrent-deployment-syncs` workers, as kube-controller-manager does. Run it against a
//! cluster whose kube-controller-manager has `--controllers=*,-deployment-controller`.
//!
//! Modules: [`flags`] (the command line), [`metrics`] (the Prometheus registry), [`serve`]
//! (/healthz, /livez, /readyz, /metrics over HTTPS).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Parser;
use k8s_openapi::api::apps::v1::Deployment;
use kctrl_client::{Api, Client, HttpBackend, ListParams, ResourceRef};
use kctrl_config::{Config, ConfigOverrides};
use kctrl_deployment::wiring::{DeploymentControllerRunner, RunError, RunnerOptions};
use kctrl_events::{ApiEventSink, EventBroadcaster, EventSource};
use kctrl_informer::SharedInformerFactory;
use prometheus_client::registry::Registry;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};
use tracing_subscriber::EnvFilter;

mod flags;
mod metrics;
mod serve;

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

async fn run(flags: Flags) -> anyhow::Result<()> {
    let mut config = Config::from_flags(
        flags.kubeconfig.as_deref(),
        flags.master.as_deref(),
        &ConfigOverrides::default(),
    )
    .context("loading the client configuration (--kubeconfig, --master)")?;
    config.qps = flags.kube_api_qps;
    config.burst = flags.kube_api_burst;
    config.user_agent = Some(format!(
        "deployment-controller/{}",
        env!("CARGO_PKG_VERSION")
    ));
    let server = config.server.to_string();
    let namespace = config.default_namespace.clone();

    let mut registry = Registry::default();
    let metrics = metrics::register(&mut registry);
    let backend = HttpBackend::new(config)
        .context("building the API client")?
        .with_metrics(Arc::new(metrics.rest_client.clone()));
    let client = Client::new(backend, namespace);
    let cancel = CancellationToken::new();
    let signals = tokio::spawn(cancel_on_signal(cancel.clone()));
    if !wait_for_deployments_served(&client, &server, &cancel).await? {
        return Ok(());
    }
    info!(
        server,
        "API server serves apps/v1 deployments and lets us list them"
    );
    let serving = CancellationToken::new();

    let factory = SharedInformerFactory::new(client.clone(), RESYNC_PERIOD);
    let options = RunnerOptions {
        queue_metrics: Some(Arc::new(metrics.workqueue.clone())),
        sync_observer: Some(metrics.sync_observer.clone()),
    };
    // Events: written to the API (core/v1, as kube-controller-manager's recorder does) and
    // logged at debug.
    let broadcaster = EventBroadcaster::new();
    broadcaster
        .start_logging(tracing::Level::DEBUG)
        .context("starting event logging")?;
    broadcaster
        .start_recording_to_sink(ApiEventSink::new(client.clone()))
        .context("starting the event sink")?;
    let recorder = Arc::new(broadcaster.new_recorder(EventSource::new("deployment-controller")));
    let runner = DeploymentControllerRunner::with_options(client, &factory, recorder, options)
        .context("registering the informer handlers")?;

    if flags.secure_port != 0 {
        let synced = runner.caches_synced_flag();
        let caches_synced: serve::Check = Arc::new(move || {
            if synced.load(Ordering::Acquire) {
                Ok(())
            } else {
                Err("the Deployment, ReplicaSet and Pod caches have not synced yet".to_owned())
            }
        });
        let endpoints = serve::Endpoints {
            healthz: Vec::new(),
            readyz: vec![("caches-synced", caches_synced)],
            registry: Arc::new(registry),
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

    let workers = usize::try_from(flags.concurrent_deployment_syncs).unwrap_or(1);
    let result = runner.run(workers, &cancel).await;
    let stopped_by_signal = cancel.is_cancelled();
    cancel.cancel();
    factory.shutdown().await;
    if tokio::time::timeout(Duration::from_secs(10), broadcaster.shutdown())
        .await
        .is_err()
    {
        warn!("timed out writing the queued events");
    }
    serving.cancel();
    if let Ok(Err(e)) = signals.await {
        error!(%e, "signal handling failed");
    }
    match result {
        Ok(()) => Ok(()),
        // Cancelled while waiting for the caches: a normal shutdown.
        Err(RunError::CachesNotSynced) if stopped_by_signal => Ok(()),
        Err(e) => Err(e.into()),
    }
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let flags = Flags::parse();
    init_logging(flags.verbosity);
    match run(flags).await {
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

//! `deployment-controller`: kube-controller-manager's Deployment controller as a standalone
//! process, built on the kctrl crates.
//!
//! It watches Deployments, ReplicaSets and Pods, and reconciles each Deployment with
//! `--concurrent-deployment-syncs` workers, as kube-controller-manager does. Run it against a
//! cluster whose kube-controller-manager has `--controllers=*,-deployment-controller`.
//!
//! Not yet: events are only logged (no Event objects are written to the API), and there is no
//! leader election, no serving of /healthz or /metrics.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Parser;
use k8s_openapi::api::apps::v1::Deployment;
use kctrl_client::{Api, Client, ListParams, ResourceRef};
use kctrl_config::{Config, ConfigOverrides};
use kctrl_deployment::events::TracingEventRecorder;
use kctrl_deployment::wiring::{DeploymentControllerRunner, RunError};
use kctrl_informer::SharedInformerFactory;
use tokio_util::sync::CancellationToken;
use tracing::{error, info};
use tracing_subscriber::EnvFilter;

/// Informer resync period: kube-controller-manager's `--min-resync-period` default (12h; it
/// randomises between 12h and 24h, this uses the lower bound).
const RESYNC_PERIOD: Duration = Duration::from_secs(12 * 60 * 60);

/// The Kubernetes Deployment controller, standalone (kube-controller-manager's
/// deployment-controller).
///
/// Flags follow kube-controller-manager where they apply. Events are only logged for now
/// (writing Event objects to the API comes later). Stops on SIGTERM or SIGINT after the syncs
/// in flight finish.
#[derive(Debug, Parser)]
#[command(name = "deployment-controller", version)]
struct Flags {
    /// Path to a kubeconfig file. Without it (and without --master), the in-cluster service
    /// account is used, then $KUBECONFIG / ~/.kube/config.
    #[arg(long, value_name = "PATH")]
    kubeconfig: Option<PathBuf>,

    /// The address of the Kubernetes API server (overrides any value in the kubeconfig).
    #[arg(long, value_name = "URL")]
    master: Option<String>,

    /// The number of Deployments allowed to sync concurrently.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..))]
    concurrent_deployment_syncs: u32,

    /// Queries per second to use while talking with the API server.
    #[arg(long, default_value_t = 20.0)]
    kube_api_qps: f32,

    /// Burst to use while talking with the API server.
    #[arg(long, default_value_t = 30)]
    kube_api_burst: u32,

    /// Log verbosity, as klog's: 0–2 info, 3–4 debug, 5 and above trace. RUST_LOG, when set,
    /// takes precedence.
    #[arg(short = 'v', long = "v", default_value_t = 0, value_name = "LEVEL")]
    verbosity: u8,
}

fn init_logging(verbosity: u8) {
    let level = match verbosity {
        0..=2 => "info",
        3..=4 => "debug",
        _ => "trace",
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(level));
    tracing_subscriber::fmt().with_env_filter(filter).init();
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
                 replicasets.apps and get/list/watch on pods"
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
    let client = Client::try_from_config(config).context("building the API client")?;
    check_deployments_served(&client, &server).await?;
    info!(
        server,
        "API server serves apps/v1 deployments and lets us list them"
    );

    let cancel = CancellationToken::new();
    let signals = tokio::spawn(cancel_on_signal(cancel.clone()));

    let factory = SharedInformerFactory::new(client.clone(), RESYNC_PERIOD);
    let runner = DeploymentControllerRunner::new(client, &factory, Arc::new(TracingEventRecorder))
        .context("registering the informer handlers")?;
    let workers = usize::try_from(flags.concurrent_deployment_syncs).unwrap_or(1);
    let result = runner.run(workers, &cancel).await;
    let stopped_by_signal = cancel.is_cancelled();
    cancel.cancel();
    factory.shutdown().await;
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

//! `cargo xtask demo [--keep] [--name N]`: the local control plane, our deployment-controller and
//! a live rolling update.
//!
//! Steps: `cluster up` (builds the control plane on a cold cache; its kube-controller-manager
//! runs neither its Deployment nor its ReplicaSet controller), build and start the
//! deployment-controller with its ReplicaSet controller too
//! (`--controllers=*,replicaset-controller`: ours scale the ReplicaSets and create and delete
//! their Pods), create Deployment `demo/web` (6 × pause:3.10, RollingUpdate maxSurge 2
//! / maxUnavailable 1, minReadySeconds 2), wait until it is rolled out, switch the image to
//! pause:3.9 and print the ReplicaSets' spec/ready/available as they change until the rollout
//! completes, as `kubectl rollout status` words it. ReplicaSets and the Deployment are watched
//! (not polled), so every change is recorded with the time it arrived; the recording becomes
//! `target/demo/rollout.svg` (see [`svg`]). Without `--keep` the controller and the cluster are
//! stopped at the end, also on failure and, through a small watcher process, on Ctrl-C.

mod svg;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use futures::{Stream, StreamExt};
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::Namespace;
use kctrl_client::versioned::{Text, Versioned};
use kctrl_client::{
    Api, Client, DeleteParams, ListParams, Patch, PatchParams, PostParams, PropagationPolicy,
    WatchEvent, WatchParams,
};
use kctrl_config::Config;

use kctrl_cluster::plane::{self, ClusterInfo, UpOptions};
use kctrl_cluster::process;
use xtask_contender::args::KubeVersionArg;
use xtask_contender::fresh::FreshCluster;
use xtask_contender::supervisor::{self, ControllerProcess};

use self::svg::{ConditionChange, Marker, RsSample, Timeline};

const NAMESPACE: &str = "demo";
const DEPLOYMENT: &str = "web";
const REPLICAS: i32 = 6;
const IMAGE_BEFORE: &str = "registry.k8s.io/pause:3.10";
const IMAGE_AFTER: &str = "registry.k8s.io/pause:3.9";
/// How long each phase (initial rollout, image update) may take.
const PHASE_TIMEOUT: Duration = Duration::from_secs(180);

/// Arguments of `cargo xtask demo`.
#[derive(clap::Args)]
pub(crate) struct DemoArgs {
    /// Leave the cluster and the controller running afterwards (prints how to use them).
    #[arg(long)]
    keep: bool,
    /// Name of the local cluster (state in target/kctrl-cluster/<name>).
    #[arg(long, default_value = "demo")]
    name: String,
    /// Kubernetes release of the local control plane.
    #[command(flatten)]
    kube: KubeVersionArg,
}

pub(crate) fn run(args: DemoArgs) -> Result<()> {
    let started = Instant::now();
    let info = plane::ensure_up(&UpOptions {
        name: args.name.clone(),
        nodes: 3,
        apiserver_args: Vec::new(),
        feature_gates: Vec::new(),
        scheduler_args: Vec::new(),
        controller_manager_args: Vec::new(),
        deployment_controller: false,
        // Ours runs the ReplicaSets too.
        replicaset_controller: false,
        release: args.kube.release,
    })?;
    // From here on the cluster is ours to stop (unless --keep), whatever happens.
    let pid_file = controller_log(&info).with_extension("pid");
    let cluster = FreshCluster::adopt(info.clone(), (!args.keep).then_some(pid_file.as_path()));
    let result = demo(&info, started);
    match result {
        Ok(Some(controller)) if args.keep => {
            print_keep_help(&info, &args.name, &controller);
            // Leave the process running: no Drop (which would kill it).
            std::mem::forget(controller);
            Ok(())
        }
        Ok(controller) => {
            let stopped = controller.map_or(Ok(()), ControllerProcess::stop);
            stopped.and(cluster.down())
        }
        Err(e) => {
            if args.keep {
                eprintln!(
                    "==> --keep: cluster '{}' left running (cargo xtask cluster down --name {})",
                    args.name, args.name
                );
            } else {
                let _ = cluster.down();
            }
            Err(e)
        }
    }
}

/// Builds and starts the controller, runs the rollout and writes the SVG. Returns the running
/// controller (the caller stops or keeps it); any error stops it through `Drop`.
fn demo(info: &ClusterInfo, started: Instant) -> Result<Option<ControllerProcess>> {
    let binary = supervisor::build()?;
    let log = controller_log(info);
    // A controller left running by `--keep` would fight the new one.
    if let Some(old) = process::read_pid_file(&log.with_extension("pid"))
        && old.is_ours_and_running(&binary)
    {
        eprintln!(
            "==> stopping the deployment-controller of an earlier --keep run (pid {})",
            old.pid
        );
        process::stop_all(&[old], &[], Duration::from_secs(15))?;
    }
    // As an operator would run it: its own identity, with exactly deploy/'s RBAC.
    xtask_contender::rbac::grant_deploy_rbac(&info.kubectl, &info.admin_kubeconfig)?;
    let controller = supervisor::start(
        &binary,
        &info.controller_kubeconfig,
        &log,
        &[
            "--v",
            "2",
            "--secure-port",
            "0",
            xtask_contender::WITH_REPLICASET_CONTROLLER,
        ],
    )?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("building the tokio runtime")?;
    let timeline = runtime.block_on(rollout(&info.admin_kubeconfig))?;
    let svg_path = PathBuf::from("target/demo/rollout.svg");
    std::fs::create_dir_all("target/demo").context("creating target/demo")?;
    std::fs::write(&svg_path, svg::render(&timeline))
        .with_context(|| format!("writing {}", svg_path.display()))?;
    let abs = std::fs::canonicalize(&svg_path).unwrap_or(svg_path);
    println!();
    println!(
        "timeline ({} ReplicaSet samples, {} condition changes): {}",
        timeline.samples.len(),
        timeline.conditions.len(),
        abs.display()
    );
    println!(
        "demo took {:.1}s (controller log: {})",
        started.elapsed().as_secs_f64(),
        controller.log_path().display()
    );
    Ok(Some(controller))
}

fn controller_log(info: &ClusterInfo) -> PathBuf {
    info.dir.join("logs").join("deployment-controller.log")
}

fn print_keep_help(info: &ClusterInfo, name: &str, controller: &ControllerProcess) {
    let pid_file = controller.log_path().with_extension("pid");
    println!();
    println!(
        "--keep: cluster '{name}' and the deployment-controller (Deployments and ReplicaSets) \
         keep running."
    );
    println!("  export KUBECONFIG={}", info.admin_kubeconfig.display());
    println!(
        "  {} -n {NAMESPACE} get deployments,replicasets,pods",
        info.kubectl.display()
    );
    println!(
        "  {} -n {NAMESPACE} set image deployment/{DEPLOYMENT} pause={IMAGE_BEFORE}",
        info.kubectl.display()
    );
    println!(
        "  {} -n {NAMESPACE} rollout status deployment/{DEPLOYMENT}",
        info.kubectl.display()
    );
    println!("  controller log: {}", controller.log_path().display());
    println!(
        "stop: kill \"$(cut -d' ' -f1 {})\"; cargo xtask cluster down --name {name}",
        pid_file.display()
    );
}

fn deployment_manifest() -> Result<Deployment> {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": DEPLOYMENT, "namespace": NAMESPACE, "labels": {"app": DEPLOYMENT}},
        "spec": {
            "replicas": REPLICAS,
            "minReadySeconds": 2,
            "selector": {"matchLabels": {"app": DEPLOYMENT}},
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": 2, "maxUnavailable": 1}
            },
            "template": {
                "metadata": {"labels": {"app": DEPLOYMENT}},
                "spec": {"containers": [{"name": "pause", "image": IMAGE_BEFORE}]}
            }
        }
    }))
    .context("building the sample Deployment")
}

type EventStream<K> =
    Pin<Box<dyn Stream<Item = Result<WatchEvent<K>, kctrl_client::Error>> + Send>>;

/// What the watches have seen so far, and the recording.
struct Recorder {
    start: Instant,
    /// Latest (spec, ready, available, image) per ReplicaSet of the current Deployment.
    rs: BTreeMap<String, (i32, i32, i32, String)>,
    /// Creation order of the ReplicaSets (old first).
    rs_order: Vec<String>,
    deployment: Option<Deployment>,
    /// Latest (status, reason) per condition type.
    conditions: BTreeMap<String, (String, String)>,
    last_status_line: String,
    timeline: Timeline,
}

impl Recorder {
    fn now(&self) -> f64 {
        self.start.elapsed().as_secs_f64()
    }

    fn on_deployment(&mut self, d: Deployment) {
        let t = self.now();
        for c in d
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .into_iter()
            .flatten()
        {
            let now = (
                c.status.text().to_owned(),
                c.reason.clone().unwrap_or_default(),
            );
            let kind = c.type_.text();
            if self.conditions.get(kind) != Some(&now) {
                println!("  {t:6.2}s  condition {kind}={} ({})", now.0, now.1);
                self.timeline.conditions.push(ConditionChange {
                    t,
                    kind: kind.to_owned(),
                    status: now.0.clone(),
                    reason: now.1.clone(),
                });
                self.conditions.insert(kind.to_owned(), now);
            }
        }
        self.deployment = Some(d);
        let line = rollout_status(self.deployment.as_ref());
        if line != self.last_status_line {
            println!("  {t:6.2}s  {line}");
            self.last_status_line = line;
        }
    }

    fn on_replicaset(&mut self, rs: ReplicaSet, deleted: bool) {
        let Some(d_uid) = self
            .deployment
            .as_ref()
            .and_then(|d| d.metadata.uid.clone())
        else {
            return;
        };
        let owned = rs
            .metadata
            .owner_references
            .iter()
            .flatten()
            .any(|o| o.uid == d_uid && o.controller == Some(true));
        let Some(name) = rs.metadata.name.clone() else {
            return;
        };
        if !owned {
            return;
        }
        let spec = rs.spec.get().and_then(|s| s.replicas).unwrap_or(1);
        let status = rs.status.as_ref();
        let ready = status.and_then(|s| s.ready_replicas).unwrap_or(0);
        let available = status.and_then(|s| s.available_replicas).unwrap_or(0);
        let image = rs
            .spec
            .get()
            .and_then(|s| s.template.as_ref())
            .and_then(|t| t.spec.as_ref())
            .and_then(|p| p.containers.first())
            .and_then(|c| c.image.clone())
            .unwrap_or_default();
        let (spec, ready, available) = if deleted {
            (0, 0, 0)
        } else {
            (spec, ready, available)
        };
        let now = (spec, ready, available, image.clone());
        if self.rs.get(&name) == Some(&now) {
            return;
        }
        if !self.rs_order.contains(&name) {
            self.rs_order.push(name.clone());
            let short = image.rsplit('/').next().unwrap_or(&image).to_owned();
            self.timeline
                .rs_labels
                .push((name.clone(), format!("{name} ({short})")));
        }
        self.rs.insert(name.clone(), now);
        let t = self.now();
        self.timeline.samples.push(RsSample {
            t,
            rs: name,
            spec,
            ready,
            available,
        });
        let mut line = format!("  {t:6.2}s ");
        for n in &self.rs_order {
            let (s, r, a, img) = &self.rs[n];
            let short = img.rsplit('/').next().unwrap_or(img);
            line.push_str(&format!("  {n} [{short}] {s}/{r}/{a}"));
        }
        println!("{line}");
    }
}

/// kubectl's `rollout status` message for a Deployment (kubectl/pkg/polymorphichelpers/
/// rollout_status.go, DeploymentStatusViewer).
fn rollout_status(d: Option<&Deployment>) -> String {
    let Some(d) = d else {
        return "Waiting for deployment to be created...".to_owned();
    };
    let name = d.metadata.name.as_deref().unwrap_or_default();
    let generation = d.metadata.generation.unwrap_or(0);
    let Some(status) = d.status.as_ref() else {
        return "Waiting for deployment spec update to be observed...".to_owned();
    };
    if generation > status.observed_generation.unwrap_or(0) {
        return "Waiting for deployment spec update to be observed...".to_owned();
    }
    if let Some(c) = status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_.text() == "Progressing")
        && c.reason.as_deref() == Some("ProgressDeadlineExceeded")
    {
        return format!("deployment {name:?} exceeded its progress deadline");
    }
    let want = d.spec.get().and_then(|s| s.replicas).unwrap_or(1);
    let updated = status.updated_replicas.unwrap_or(0);
    let replicas = status.replicas.unwrap_or(0);
    let available = status.available_replicas.unwrap_or(0);
    if updated < want {
        format!(
            "Waiting for deployment {name:?} rollout to finish: {updated} out of {want} new replicas have been updated..."
        )
    } else if replicas > updated {
        format!(
            "Waiting for deployment {name:?} rollout to finish: {} old replicas are pending termination...",
            replicas - updated
        )
    } else if available < updated {
        format!(
            "Waiting for deployment {name:?} rollout to finish: {available} of {updated} updated replicas are available..."
        )
    } else {
        format!("deployment {name:?} successfully rolled out")
    }
}

struct Watches {
    deployments: Api<Deployment>,
    replicasets: Api<ReplicaSet>,
    d_stream: EventStream<Deployment>,
    rs_stream: EventStream<ReplicaSet>,
    d_rv: String,
    rs_rv: String,
}

fn d_params(rv: &str) -> WatchParams {
    WatchParams {
        field_selector: Some(format!("metadata.name={DEPLOYMENT}")),
        resource_version: Some(rv.to_owned()),
        ..Default::default()
    }
}

fn rs_params(rv: &str) -> WatchParams {
    WatchParams {
        label_selector: Some(format!("app={DEPLOYMENT}")),
        resource_version: Some(rv.to_owned()),
        ..Default::default()
    }
}

impl Watches {
    async fn start(client: &Client) -> Result<Watches> {
        let deployments = Api::<Deployment>::namespaced(client.clone(), NAMESPACE);
        let replicasets = Api::<ReplicaSet>::namespaced(client.clone(), NAMESPACE);
        let d_rv = deployments
            .list(&ListParams::default())
            .await?
            .metadata
            .resource_version
            .unwrap_or_default();
        let rs_rv = replicasets
            .list(&ListParams::default())
            .await?
            .metadata
            .resource_version
            .unwrap_or_default();
        let d_stream = Box::pin(deployments.watch(&d_params(&d_rv)).await?);
        let rs_stream = Box::pin(replicasets.watch(&rs_params(&rs_rv)).await?);
        Ok(Watches {
            deployments,
            replicasets,
            d_stream,
            rs_stream,
            d_rv,
            rs_rv,
        })
    }

    /// Feeds events into `rec` until `done(rec)` holds, or fails after `timeout`.
    async fn until(
        &mut self,
        rec: &mut Recorder,
        timeout: Duration,
        what: &str,
        done: impl Fn(&Recorder) -> bool,
    ) -> Result<()> {
        let deadline = tokio::time::Instant::now() + timeout;
        while !done(rec) {
            tokio::select! {
                ev = self.d_stream.next() => match ev {
                    Some(Ok(WatchEvent::Added(d) | WatchEvent::Modified(d))) => {
                        self.d_rv = d.metadata.resource_version.clone().unwrap_or_default();
                        rec.on_deployment(d);
                    }
                    Some(Ok(WatchEvent::Bookmark(b))) => self.d_rv = b.resource_version,
                    Some(Ok(WatchEvent::Deleted(_))) => bail!("deployment {DEPLOYMENT} was deleted"),
                    Some(Ok(WatchEvent::Error(e))) => bail!("deployment watch: {e:?}"),
                    Some(Err(e)) => return Err(e).context("watching the deployment"),
                    None => self.d_stream = Box::pin(self.deployments.watch(&d_params(&self.d_rv)).await?),
                },
                ev = self.rs_stream.next() => match ev {
                    Some(Ok(WatchEvent::Added(rs) | WatchEvent::Modified(rs))) => {
                        self.rs_rv = rs.metadata.resource_version.clone().unwrap_or_default();
                        rec.on_replicaset(rs, false);
                    }
                    Some(Ok(WatchEvent::Deleted(rs))) => {
                        self.rs_rv = rs.metadata.resource_version.clone().unwrap_or_default();
                        rec.on_replicaset(rs, true);
                    }
                    Some(Ok(WatchEvent::Bookmark(b))) => self.rs_rv = b.resource_version,
                    Some(Ok(WatchEvent::Error(e))) => bail!("replicaset watch: {e:?}"),
                    Some(Err(e)) => return Err(e).context("watching replicasets"),
                    None => self.rs_stream = Box::pin(self.replicasets.watch(&rs_params(&self.rs_rv)).await?),
                },
                () = tokio::time::sleep_until(deadline) => {
                    bail!("timed out after {timeout:?} waiting for {what}; last status: {}", rec.last_status_line);
                }
            }
        }
        Ok(())
    }
}

fn rolled_out(rec: &Recorder, min_generation: i64) -> bool {
    rec.deployment
        .as_ref()
        .is_some_and(|d| d.metadata.generation.unwrap_or(0) >= min_generation)
        && rec.last_status_line.ends_with("successfully rolled out")
}

/// Creates the Deployment, waits for it, updates its image and records the rollout.
async fn rollout(kubeconfig: &Path) -> Result<Timeline> {
    let config = Config::from_flags(Some(kubeconfig), None, &Default::default())
        .with_context(|| format!("loading {}", kubeconfig.display()))?;
    let client = Client::try_from_config(config).context("building the API client")?;
    let pp = PostParams {
        field_manager: Some("kctrl-demo".to_owned()),
        ..Default::default()
    };

    let namespaces = Api::<Namespace>::all(client.clone());
    let ns: Namespace = serde_json::from_value(
        serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}),
    )?;
    match namespaces.create(&pp, &ns).await {
        Ok(_) => {}
        Err(e) if e.is_already_exists() => {}
        Err(e) => return Err(e).context("creating namespace demo"),
    }
    let deployments = Api::<Deployment>::namespaced(client.clone(), NAMESPACE);
    // A kept cluster may still have the Deployment of an earlier run: start afresh.
    if deployments.get_opt(DEPLOYMENT).await?.is_some() {
        eprintln!("==> deleting {NAMESPACE}/{DEPLOYMENT} left by an earlier run");
        let dp = DeleteParams {
            propagation_policy: Some(PropagationPolicy::Foreground),
            ..Default::default()
        };
        deployments.delete(DEPLOYMENT, &dp).await?;
        let deadline = Instant::now() + Duration::from_secs(60);
        while deployments.get_opt(DEPLOYMENT).await?.is_some() {
            if Instant::now() > deadline {
                bail!("{NAMESPACE}/{DEPLOYMENT} of an earlier run was not deleted within 60s");
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    let mut watches = Watches::start(&client).await?;
    let mut rec = Recorder {
        start: Instant::now(),
        rs: BTreeMap::new(),
        rs_order: Vec::new(),
        deployment: None,
        conditions: BTreeMap::new(),
        last_status_line: String::new(),
        timeline: Timeline {
            title: format!(
                "Deployment {NAMESPACE}/{DEPLOYMENT}: rolling update pause:3.10 → pause:3.9"
            ),
            subtitle: format!(
                "{REPLICAS} replicas, RollingUpdate maxSurge 2 / maxUnavailable 1, minReadySeconds 2; \
                 solid: spec.replicas, dashed: availableReplicas"
            ),
            ..Default::default()
        },
    };

    println!(
        "==> creating deployment {NAMESPACE}/{DEPLOYMENT}: {REPLICAS} × {IMAGE_BEFORE}, \
         RollingUpdate maxSurge 2 / maxUnavailable 1, minReadySeconds 2"
    );
    println!("     time   ReplicaSet [image] spec/ready/available, and the Deployment's status");
    let created = deployments.create(&pp, &deployment_manifest()?).await?;
    rec.timeline.markers.push(Marker {
        t: rec.now(),
        label: "created".to_owned(),
    });
    rec.on_deployment(created);
    watches
        .until(&mut rec, PHASE_TIMEOUT, "the first rollout", |r| {
            rolled_out(r, 1)
        })
        .await?;

    println!("==> changing the image to {IMAGE_AFTER}");
    let patch = Patch::Strategic(serde_json::json!({
        "spec": {"template": {"spec": {"containers": [{"name": "pause", "image": IMAGE_AFTER}]}}}
    }));
    let t = rec.now();
    let patch_params = PatchParams {
        field_manager: pp.field_manager.clone(),
        ..Default::default()
    };
    let patched = deployments.patch(DEPLOYMENT, &patch_params, &patch).await?;
    let generation = patched.metadata.generation.unwrap_or(0);
    rec.timeline.markers.push(Marker {
        t,
        label: "image → pause:3.9".to_owned(),
    });
    rec.on_deployment(patched);
    watches
        .until(&mut rec, PHASE_TIMEOUT, "the rolling update", |r| {
            rolled_out(r, generation)
        })
        .await?;
    let done_at = rec.now();
    rec.timeline.markers.push(Marker {
        t: done_at,
        label: "rolled out".to_owned(),
    });
    // A short tail so late status updates (old ReplicaSet's counts reaching 0) are drawn.
    let tail = Duration::from_millis(2500);
    let _ = tokio::time::timeout(tail, watches.until(&mut rec, tail, "the tail", |_| false)).await;
    rec.timeline.end = rec.now();
    Ok(rec.timeline)
}

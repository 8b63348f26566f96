//! The independent watch of `cargo xtask chaos`: plain list and watch requests (no informer)
//! for the Deployments, ReplicaSets and Pods of the run, straight to the API server (not
//! through the fault proxy the controller talks through), feeding [`Checker`] one change at
//! a time.
//!
//! Each resource is listed, then watched from the list's resourceVersion. A watch that ends
//! (server timeout) or breaks (transport error, apiserver killed or stopped) is resumed from
//! the last resourceVersion seen; a 410 Gone (etcd compacted past it) is answered with a
//! relist, which replaces the resource's whole state in the checker at once.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::{ListableResource, Metadata, Resource};
use kctrl_client::versioned::Versioned;
use kctrl_client::{Api, Client, ListParams, WatchEvent, WatchParams};
use serde::de::DeserializeOwned;
use tokio_util::sync::CancellationToken;

use super::invariants::{
    Change, Checker, DeploymentView, IntOrPercent, POD_TEMPLATE_HASH, PodView, ReplicaSetView,
    Strategy,
};

/// The label every object of a chaos run carries (on Deployments and their pod templates).
pub(crate) const RUN_LABEL: &str = "chaos.kctrl.dev/run";
/// The label naming a pod's Deployment (on the pod templates).
pub(crate) const DEPLOYMENT_LABEL: &str = "chaos.kctrl.dev/deployment";

/// What the watch went through.
#[derive(Default, Debug)]
pub(crate) struct WatchStats {
    /// Lists (the first of each resource included).
    pub(crate) lists: AtomicU64,
    /// 410 Gone answers (each followed by a relist).
    pub(crate) gone: AtomicU64,
    /// Watches that broke or could not be opened.
    pub(crate) broken: AtomicU64,
    /// Watches that ended without an error (the server's timeout, or a connection closed
    /// cleanly).
    pub(crate) ended: AtomicU64,
}

/// A resource the watch follows, and how its objects become checker changes.
trait Observed:
    Resource
    + ListableResource
    + Metadata<Ty = k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta>
    + DeserializeOwned
    + Clone
    + Send
    + Sync
    + 'static
{
    fn upsert(&self) -> Change;
    fn deleted(&self) -> Change;
    fn replace(all: &[Self]) -> Change;
}

fn ns_name(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> (String, String) {
    (
        meta.namespace.clone().unwrap_or_default(),
        meta.name.clone().unwrap_or_default(),
    )
}

/// The checker's view of a Deployment.
pub(crate) fn deployment_view(d: &Deployment) -> DeploymentView {
    let (namespace, name) = ns_name(&d.metadata);
    let spec = d.spec.clone().into_value().unwrap_or_default();
    let replicas = spec.replicas.unwrap_or(1);
    let strategy = spec.strategy.unwrap_or_default();
    let strategy = if strategy.type_.as_deref() == Some("Recreate") {
        Strategy::Recreate
    } else {
        let ru = strategy.rolling_update.unwrap_or_default();
        let read = |v: Option<k8s_openapi::apimachinery::pkg::util::intstr::IntOrString>| {
            v.and_then(|v| IntOrPercent::from_json(&serde_json::to_value(v).ok()?))
                .unwrap_or(IntOrPercent::Percent(25))
        };
        Strategy::rolling(&read(ru.max_surge), &read(ru.max_unavailable), replicas)
    };
    DeploymentView {
        namespace,
        name,
        uid: d.metadata.uid.clone().unwrap_or_default(),
        replicas,
        strategy,
    }
}

/// The checker's view of a ReplicaSet.
pub(crate) fn replica_set_view(rs: &ReplicaSet) -> ReplicaSetView {
    let (namespace, name) = ns_name(&rs.metadata);
    let spec = rs.spec.clone().into_value().unwrap_or_default();
    let mut template = serde_json::to_value(&spec.template).unwrap_or_default();
    if let Some(labels) = template
        .pointer_mut("/metadata/labels")
        .and_then(|l| l.as_object_mut())
    {
        labels.remove(POD_TEMPLATE_HASH);
    }
    ReplicaSetView {
        namespace,
        name,
        uid: rs.metadata.uid.clone().unwrap_or_default(),
        controller_uid: rs
            .metadata
            .owner_references
            .iter()
            .flatten()
            .find(|o| o.controller == Some(true))
            .map(|o| o.uid.clone()),
        // serde_json's maps are sorted: equal templates serialize equally.
        template: template.to_string(),
        replicas: spec.replicas.unwrap_or(1),
        available: rs
            .status
            .as_ref()
            .and_then(|s| s.available_replicas)
            .unwrap_or(0),
    }
}

/// The checker's view of a Pod.
pub(crate) fn pod_view(p: &Pod) -> PodView {
    let (namespace, name) = ns_name(&p.metadata);
    let label = |k: &str| p.metadata.labels.as_ref().and_then(|l| l.get(k)).cloned();
    let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
    PodView {
        namespace,
        name,
        deployment: label(DEPLOYMENT_LABEL),
        hash: label(POD_TEMPLATE_HASH),
        live: !matches!(phase, Some("Succeeded" | "Failed")),
        uid: p.metadata.uid.clone().unwrap_or_default(),
        controllers: p
            .metadata
            .owner_references
            .iter()
            .flatten()
            .filter(|o| o.controller == Some(true))
            .map(|o| o.uid.clone())
            .collect(),
        terminating: p.metadata.deletion_timestamp.is_some(),
    }
}

impl Observed for Deployment {
    fn upsert(&self) -> Change {
        Change::Deployment(deployment_view(self))
    }
    fn deleted(&self) -> Change {
        let (ns, n) = ns_name(&self.metadata);
        Change::DeploymentDeleted(ns, n)
    }
    fn replace(all: &[Self]) -> Change {
        Change::Deployments(all.iter().map(deployment_view).collect())
    }
}

impl Observed for ReplicaSet {
    fn upsert(&self) -> Change {
        Change::ReplicaSet(replica_set_view(self))
    }
    fn deleted(&self) -> Change {
        let (ns, n) = ns_name(&self.metadata);
        Change::ReplicaSetDeleted(ns, n)
    }
    fn replace(all: &[Self]) -> Change {
        Change::ReplicaSets(all.iter().map(replica_set_view).collect())
    }
}

impl Observed for Pod {
    fn upsert(&self) -> Change {
        Change::Pod(pod_view(self))
    }
    fn deleted(&self) -> Change {
        let (ns, n) = ns_name(&self.metadata);
        Change::PodDeleted(ns, n)
    }
    fn replace(all: &[Self]) -> Change {
        Change::Pods(all.iter().map(pod_view).collect())
    }
}

/// Starts the three watches of run `run_id`; they feed `checker` until `cancel` fires. Returns
/// once each resource has been listed once.
pub(crate) async fn start(
    client: Client,
    run_id: &str,
    checker: Arc<Mutex<Checker>>,
    stats: Arc<WatchStats>,
    cancel: CancellationToken,
) -> Vec<tokio::task::JoinHandle<()>> {
    let selector = format!("{RUN_LABEL}={run_id}");
    let mut tasks = Vec::new();
    let mut ready = Vec::new();
    macro_rules! follow {
        ($k:ty) => {{
            let (tx, rx) = tokio::sync::oneshot::channel();
            ready.push(rx);
            tasks.push(tokio::spawn(follow::<$k>(
                Api::<$k>::all(client.clone()),
                selector.clone(),
                checker.clone(),
                stats.clone(),
                cancel.clone(),
                tx,
            )));
        }};
    }
    follow!(Deployment);
    follow!(ReplicaSet);
    follow!(Pod);
    for r in ready {
        let _ = r.await;
    }
    tasks
}

/// List, then watch from the list's resourceVersion, forever (see the module documentation).
async fn follow<K: Observed>(
    api: Api<K>,
    selector: String,
    checker: Arc<Mutex<Checker>>,
    stats: Arc<WatchStats>,
    cancel: CancellationToken,
    listed: tokio::sync::oneshot::Sender<()>,
) {
    let mut listed = Some(listed);
    let mut rv: Option<String> = None;
    let pause = Duration::from_millis(500);
    while !cancel.is_cancelled() {
        let resume_from = match rv.clone() {
            Some(rv) => rv,
            None => {
                let params = ListParams {
                    label_selector: Some(selector.clone()),
                    ..Default::default()
                };
                let list = tokio::select! {
                    () = cancel.cancelled() => return,
                    l = api.list(&params) => l,
                };
                match list {
                    Ok(list) => {
                        stats.lists.fetch_add(1, Ordering::Relaxed);
                        checker
                            .lock()
                            .expect("checker lock")
                            .apply(K::replace(&list.items));
                        if let Some(tx) = listed.take() {
                            let _ = tx.send(());
                        }
                        let v = list.metadata.resource_version.unwrap_or_default();
                        rv = Some(v.clone());
                        v
                    }
                    Err(_) => {
                        tokio::time::sleep(pause).await;
                        continue;
                    }
                }
            }
        };
        let params = WatchParams {
            label_selector: Some(selector.clone()),
            resource_version: Some(resume_from),
            timeout_seconds: Some(60 + fastrand::u32(0..60)),
            ..Default::default()
        };
        let stream = tokio::select! {
            () = cancel.cancelled() => return,
            s = api.watch(&params) => s,
        };
        let mut stream = match stream {
            Ok(s) => Box::pin(s),
            Err(e) => {
                stats.broken.fetch_add(1, Ordering::Relaxed);
                if e.is_gone() {
                    stats.gone.fetch_add(1, Ordering::Relaxed);
                    rv = None;
                }
                tokio::time::sleep(pause).await;
                continue;
            }
        };
        loop {
            let next = tokio::select! {
                () = cancel.cancelled() => return,
                n = stream.next() => n,
            };
            match next {
                Some(Ok(WatchEvent::Added(o) | WatchEvent::Modified(o))) => {
                    rv = o.metadata().resource_version.clone().or(rv);
                    checker.lock().expect("checker lock").apply(o.upsert());
                }
                Some(Ok(WatchEvent::Deleted(o))) => {
                    rv = o.metadata().resource_version.clone().or(rv);
                    checker.lock().expect("checker lock").apply(o.deleted());
                }
                Some(Ok(WatchEvent::Bookmark(b))) => rv = Some(b.resource_version),
                Some(Ok(WatchEvent::Error(e))) => {
                    stats.broken.fetch_add(1, Ordering::Relaxed);
                    if e.is_gone() {
                        stats.gone.fetch_add(1, Ordering::Relaxed);
                        rv = None;
                    }
                    break;
                }
                Some(Err(_)) => {
                    stats.broken.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(pause).await;
                    break;
                }
                // The server's timeout: resume.
                None => {
                    stats.ended.fetch_add(1, Ordering::Relaxed);
                    break;
                }
            }
        }
    }
}

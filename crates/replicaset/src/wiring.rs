//! The running controller: kctrl-runtime's [`Controller`] over ReplicaSets, with the Pod and
//! ReplicaSet handlers that keep the expectations and wake the right ReplicaSets.

use std::sync::Arc;

use k8s_openapi::api::apps::v1::ReplicaSet;
use kctrl_client::Client;
use kctrl_events::EventRecorder;
use kctrl_informer::{
    DeletedObject, ObjectKey, ResourceEventHandler, SharedInformerFactory, key_of,
};
use kctrl_runtime::metrics::ControllerMetrics;
use kctrl_runtime::{Action, Controller, RunError};
use kctrl_workqueue::{
    MetricsProvider, Priority, RateLimitingQueue, default_controller_rate_limiter,
};
use tokio_util::sync::CancellationToken;

use crate::controller::{BURST_REPLICAS, Enqueue, ReplicaSetSync, SyncError};
use crate::metrics::ReplicaSetMetrics;
use crate::pod_view::PodView;

/// The controller's name: its work queue's, its metrics' `controller` label and its logs'.
pub const CONTROLLER_NAME: &str = "replicaset";

/// The source component of the controller's Events in kube-controller-manager: give
/// [`ReplicaSetController::new`] a recorder with this source.
pub const EVENT_SOURCE_COMPONENT: &str = "replicaset-controller";

/// How many ReplicaSets are synced at once by default (kube-controller-manager's
/// `--concurrent-replicaset-syncs`).
pub const DEFAULT_CONCURRENT_SYNCS: usize = 5;

/// How the controller runs.
#[derive(Clone)]
pub struct Options {
    /// How many ReplicaSets are synced at once (default [`DEFAULT_CONCURRENT_SYNCS`]).
    pub concurrent_syncs: usize,
    /// How many Pods one sync creates or deletes at most (default [`BURST_REPLICAS`]).
    pub burst_replicas: usize,
    /// Receives the `replicaset` work queue's metrics (`workqueue_*`).
    pub queue_metrics: Option<Arc<dyn MetricsProvider>>,
    /// Records the `controller_runtime_reconcile_*` metrics.
    pub controller_metrics: Option<ControllerMetrics>,
    /// Records the controller's own metrics (`replicaset_controller_*`).
    pub metrics: Option<ReplicaSetMetrics>,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            concurrent_syncs: DEFAULT_CONCURRENT_SYNCS,
            burst_replicas: BURST_REPLICAS,
            queue_metrics: None,
            controller_metrics: None,
            metrics: None,
        }
    }
}

impl std::fmt::Debug for Options {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Options")
            .field("concurrent_syncs", &self.concurrent_syncs)
            .field("burst_replicas", &self.burst_replicas)
            .field("queue_metrics", &self.queue_metrics.is_some())
            .field("controller_metrics", &self.controller_metrics.is_some())
            .field("metrics", &self.metrics.is_some())
            .finish()
    }
}

/// The ReplicaSet controller, ready to run: the ReplicaSet and Pod informers of a
/// [`SharedInformerFactory`] with the controller's handlers, the `replicaset` work queue and
/// its workers.
pub struct ReplicaSetController {
    controller: Controller<ReplicaSet>,
    sync: Arc<ReplicaSetSync>,
}

impl std::fmt::Debug for ReplicaSetController {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReplicaSetController")
            .field("controller", &self.controller)
            .finish_non_exhaustive()
    }
}

impl ReplicaSetController {
    /// Registers the controller's handlers on `factory`'s ReplicaSet and Pod informers (the
    /// Pod informer caches [`PodView`]s) and prepares its queue. Writes go through `client`,
    /// Events to `recorder`. Must be called inside a Tokio runtime.
    pub fn new(
        factory: &SharedInformerFactory,
        client: Client,
        recorder: Arc<dyn EventRecorder>,
        options: Options,
    ) -> Self {
        let controller = Controller::<ReplicaSet>::with_queue(
            factory,
            CONTROLLER_NAME,
            default_controller_rate_limiter(),
            options.queue_metrics,
        );
        let pods = factory.informer::<PodView>().store().clone();
        let sync = Arc::new(
            ReplicaSetSync::new(
                client,
                controller.store().clone(),
                pods,
                recorder,
                controller.own_writes(),
                options.burst_replicas,
            )
            .with_metrics(options.metrics),
        );
        let handlers = Arc::new(Handlers {
            sync: sync.clone(),
            queue: controller.queue().clone(),
        });
        let mut controller = controller
            .watches_with::<ReplicaSet>(handlers.clone())
            .watches_with::<PodView>(handlers)
            .workers(options.concurrent_syncs);
        if let Some(metrics) = options.controller_metrics {
            controller = controller.metrics(metrics);
        }
        Self { controller, sync }
    }

    /// The work queue (e.g. to watch its length).
    pub fn queue(&self) -> &RateLimitingQueue<ObjectKey> {
        self.controller.queue()
    }

    /// Runs until `cancel` fires: starts the factory's informers, waits for the ReplicaSet and
    /// Pod caches, then syncs ReplicaSets with the configured number of workers (see
    /// [`Controller::run`] for the shutdown). A failed sync is retried rate-limited, without
    /// limit, as upstream's.
    pub async fn run(self, cancel: CancellationToken) -> Result<(), RunError> {
        self.controller
            .run(
                reconcile,
                |_rs, _err: &SyncError, _sync| Action::rate_limited(),
                self.sync,
                cancel,
            )
            .await
    }
}

/// One sync, as the runtime calls it.
async fn reconcile(rs: Arc<ReplicaSet>, sync: Arc<ReplicaSetSync>) -> Result<Action, SyncError> {
    let outcome = sync.sync_replica_set(&key_of(rs.as_ref())).await?;
    Ok(match outcome.requeue_after {
        Some(after) => Action::requeue(after),
        None => Action::await_change(),
    })
}

/// The controller's informer handlers: the rules of [`ReplicaSetSync`]'s `on_*` functions,
/// applied to the queue.
struct Handlers {
    sync: Arc<ReplicaSetSync>,
    queue: RateLimitingQueue<ObjectKey>,
}

impl Handlers {
    fn enqueue(&self, keys: Vec<Enqueue>, lane: Priority) {
        for Enqueue { key, after } in keys {
            match after {
                Some(after) => self.queue.add_after(key, after),
                None => self.queue.add_with_priority(key, lane),
            }
        }
    }
}

/// The runtime's own handler enqueues every added and updated ReplicaSet; these handlers keep
/// the expectations of ReplicaSets deleted or recreated.
impl ResourceEventHandler<ReplicaSet> for Handlers {
    fn on_add(&self, _rs: &Arc<ReplicaSet>, _is_in_initial_list: bool) {}

    fn on_update(&self, old: &Arc<ReplicaSet>, cur: &Arc<ReplicaSet>) {
        self.sync.on_replica_set_update(old, cur);
    }

    fn on_delete(&self, deleted: &DeletedObject<ReplicaSet>) {
        // Nothing to sync: the runtime skips a key whose object is gone.
        self.sync.on_replica_set_delete(deleted.object());
    }
}

impl ResourceEventHandler<PodView> for Handlers {
    fn on_add(&self, pod: &Arc<PodView>, is_in_initial_list: bool) {
        let lane = if is_in_initial_list {
            Priority::Low
        } else {
            Priority::High
        };
        self.enqueue(self.sync.on_pod_add(pod), lane);
    }

    fn on_update(&self, old: &Arc<PodView>, cur: &Arc<PodView>) {
        self.enqueue(self.sync.on_pod_update(old, cur), Priority::High);
    }

    fn on_delete(&self, deleted: &DeletedObject<PodView>) {
        self.enqueue(self.sync.on_pod_delete(deleted.object()), Priority::High);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use k8s_openapi::api::apps::v1::ReplicaSetSpec;
    use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, PodTemplateSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
    use kctrl_client::{Api, DeleteParams, PostParams};
    use kctrl_events::RecordingEventRecorder;
    use kctrl_fake::FakeApi;

    use super::*;

    fn web(replicas: i32) -> ReplicaSet {
        let labels = [("app".to_owned(), "web".to_owned())].into_iter().collect();
        ReplicaSet {
            metadata: ObjectMeta {
                name: Some("web".into()),
                namespace: Some("default".into()),
                ..Default::default()
            },
            spec: ReplicaSetSpec {
                replicas: Some(replicas),
                selector: LabelSelector {
                    match_labels: Some(labels),
                    ..Default::default()
                },
                template: Some(PodTemplateSpec {
                    metadata: Some(ObjectMeta {
                        labels: Some([("app".to_owned(), "web".to_owned())].into()),
                        ..Default::default()
                    }),
                    spec: Some(PodSpec {
                        containers: vec![Container {
                            name: "web".into(),
                            image: Some("nginx".into()),
                            ..Default::default()
                        }],
                        ..Default::default()
                    }),
                }),
                ..Default::default()
            },
            status: None,
        }
    }

    async fn eventually(what: &str, mut check: impl AsyncFnMut() -> bool) {
        for _ in 0..500 {
            if check().await {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("timed out waiting for {what}");
    }

    /// Upstream's TestWatchControllers and TestWatchPods, end to end on the fake API: a
    /// ReplicaSet created through the API is synced (its Pods created, its status written),
    /// and a Pod deleted through the API wakes it to replace the Pod.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn test_watch_controllers_and_pods() {
        let fake = FakeApi::new();
        let factory = SharedInformerFactory::new(fake.client(), Duration::ZERO);
        let recorder = Arc::new(RecordingEventRecorder::new());
        let controller = ReplicaSetController::new(
            &factory,
            fake.client(),
            recorder.clone(),
            Options::default(),
        );
        let cancel = CancellationToken::new();
        let run = tokio::spawn(controller.run(cancel.clone()));

        let rss: Api<ReplicaSet> = Api::namespaced(fake.client(), "default");
        let pods: Api<Pod> = Api::namespaced(fake.client(), "default");
        rss.create(&PostParams::default(), &web(2)).await.unwrap();
        eventually("two Pods and the status", async || {
            let rs = rss.get("web").await.unwrap();
            fake.objects::<Pod>().len() == 2
                && rs
                    .status
                    .is_some_and(|s| s.replicas == 2 && s.observed_generation == Some(1))
        })
        .await;
        let first = fake.objects::<Pod>();
        assert!(
            first
                .iter()
                .all(|p| p.metadata.generate_name.as_deref() == Some("web-"))
        );

        let doomed = first[0].metadata.name.clone().unwrap();
        pods.delete(&doomed, &DeleteParams::default())
            .await
            .unwrap();
        eventually("a replacement Pod", async || {
            let now = fake.objects::<Pod>();
            now.len() == 2
                && now
                    .iter()
                    .all(|p| p.metadata.name.as_deref() != Some(&doomed))
        })
        .await;
        // The event follows the create's answer: wait for it, then check no other create
        // came.
        let created = || {
            recorder
                .strings()
                .iter()
                .filter(|e| e.starts_with("Normal SuccessfulCreate Created pod: web-"))
                .count()
        };
        eventually("three creations reported", async || created() >= 3).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(created(), 3, "{:?}", recorder.strings());
        assert_eq!(fake.objects::<Pod>().len(), 2);

        cancel.cancel();
        run.await.unwrap().unwrap();
        factory.shutdown().await;
    }
}

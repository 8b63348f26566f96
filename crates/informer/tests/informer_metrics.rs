//! client-go's informer metrics (`informer_queued_items`,
//! `informer_processing_latency_seconds`, `informer_store_resource_version`): what the queue,
//! the cache and a named informer record, that unnamed informers record nothing, and how a
//! named factory labels its informers. On tokio's paused clock.

mod reflector_fakes;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kctrl_client::ResourceRef;
use kctrl_informer::metrics::{
    GaugeMetric, HistogramMetric, InformerId, InformerMetrics, InformerMetricsProvider,
};
use kctrl_informer::{
    Fifo, ReflectorStore, SharedInformer, SharedInformerFactory, SharedInformerOptions, Store,
};
use reflector_fakes::*;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// Every value a metric was given, in order.
#[derive(Default)]
struct Recorded(Mutex<Vec<f64>>);

impl Recorded {
    fn values(&self) -> Vec<f64> {
        self.0.lock().unwrap().clone()
    }
}

impl GaugeMetric for Recorded {
    fn set(&self, value: f64) {
        self.0.lock().unwrap().push(value);
    }
}

impl HistogramMetric for Recorded {
    fn observe(&self, value: f64) {
        self.0.lock().unwrap().push(value);
    }
}

/// A provider handing out recording metrics, remembering which informer asked for which.
#[derive(Default)]
struct RecordingProvider {
    created: Mutex<Vec<(&'static str, InformerId, Arc<Recorded>)>>,
}

impl RecordingProvider {
    fn make(&self, what: &'static str, id: &InformerId) -> Arc<Recorded> {
        let m = Arc::new(Recorded::default());
        self.created
            .lock()
            .unwrap()
            .push((what, id.clone(), m.clone()));
        m
    }

    fn get(&self, what: &str, resource: &str) -> Arc<Recorded> {
        self.created
            .lock()
            .unwrap()
            .iter()
            .find(|(w, id, _)| *w == what && id.resource == resource)
            .map(|(_, _, m)| m.clone())
            .unwrap_or_else(|| panic!("no {what} metric for {resource}"))
    }

    fn ids(&self) -> Vec<(&'static str, InformerId)> {
        self.created
            .lock()
            .unwrap()
            .iter()
            .map(|(w, id, _)| (*w, id.clone()))
            .collect()
    }
}

impl InformerMetricsProvider for RecordingProvider {
    fn new_queued_items_metric(&self, id: &InformerId) -> Arc<dyn GaugeMetric> {
        self.make("queued", id)
    }
    fn new_processing_latency_metric(&self, id: &InformerId) -> Arc<dyn HistogramMetric> {
        self.make("latency", id)
    }
    fn new_store_resource_version_metric(&self, id: &InformerId) -> Arc<dyn GaugeMetric> {
        self.make("rv", id)
    }
}

#[test]
fn queue_length_is_set_after_every_push_and_pop() {
    let gauge = Arc::new(Recorded::default());
    let fifo = Fifo::<Pod>::with_queued_items_metric(None, Some(gauge.clone()));
    fifo.replace(vec![Arc::new(pod("a", "1"))], "1".into());
    fifo.add(Arc::new(pod("b", "2")));
    fifo.update(Arc::new(pod("b", "3")));
    assert_eq!(gauge.values(), [1.0, 2.0, 3.0]);
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    rt.block_on(async {
        // A replace is popped alone; then one batch per distinct object.
        fifo.pop_batch(10, |_, _| ()).await.unwrap();
        assert_eq!(gauge.values(), [1.0, 2.0, 3.0, 2.0]);
        fifo.pop_batch(10, |_, _| ()).await.unwrap();
        fifo.pop(|_, _| ()).await.unwrap();
    });
    assert_eq!(gauge.values(), [1.0, 2.0, 3.0, 2.0, 1.0, 0.0]);
    fifo.resync();
    fifo.bookmark("4".into());
    assert_eq!(gauge.values(), [1.0, 2.0, 3.0, 2.0, 1.0, 0.0, 1.0, 2.0]);
}

#[test]
fn store_resource_version_follows_every_write() {
    let gauge = Arc::new(Recorded::default());
    let store = Store::<Pod>::new().with_resource_version_metric(gauge.clone());
    assert_eq!(
        gauge.values(),
        [0.0],
        "the empty store's resourceVersion, at once"
    );
    store.replace(vec![Arc::new(pod("a", "7"))], "10".into());
    store.insert(Arc::new(pod("b", "12")));
    store.remove_object(&pod("a", "13"));
    // Not a number: the gauge keeps its value (client-go ignores the parse error).
    store.set_resource_version("not-a-number".into());
    // Only the last 15 digits count, so the value stays exact as a float.
    store.set_resource_version("123456789012345678".into());
    // A transaction publishes once, at its final resourceVersion.
    store.transaction(|txn| {
        txn.insert(Arc::new(pod("c", "20")));
        txn.insert(Arc::new(pod("d", "21")));
    });
    assert_eq!(
        gauge.values(),
        [0.0, 10.0, 12.0, 13.0, 456789012345678.0, 21.0]
    );
}

fn named(provider: &Arc<RecordingProvider>) -> SharedInformerOptions<Pod> {
    SharedInformerOptions {
        reflector: options(false),
        metrics: Some(InformerMetrics::new(
            InformerId::new("test", &ResourceRef::of::<Pod>()),
            provider.clone(),
        )),
        ..Default::default()
    }
}

#[tokio::test(start_paused = true)]
async fn named_informer_publishes_queue_latency_and_resource_version() {
    let (tx, mut watchers) = mpsc::unbounded_channel();
    let lw = ScriptedLw::new(
        |_| Ok(pod_list("10", None, vec![pod("a", "4"), pod("b", "10")])),
        move |_| {
            let (fw, stream) = fake_watch();
            let _ = tx.send(fw);
            Ok(stream)
        },
    );
    let provider = Arc::new(RecordingProvider::default());
    let informer = SharedInformer::from_arc(lw.clone(), named(&provider));
    assert_eq!(
        provider.ids(),
        ["rv", "queued", "latency"].map(|w| (
            w,
            InformerId {
                name: "test".into(),
                group: String::new(),
                version: "v1".into(),
                resource: "pods".into(),
            }
        ))
    );
    let cancel = CancellationToken::new();
    let task = informer.start(cancel.clone());
    let fw = watchers.recv().await.unwrap();
    assert!(informer.synced().await);
    fw.add(pod("c", "11"));
    fw.modify(pod("a", "12"));
    fw.bookmark("15");
    fw.drained().await;
    tokio::time::sleep(Duration::from_millis(10)).await;

    let rv = provider.get("rv", "pods").values();
    assert_eq!(rv.first(), Some(&0.0));
    assert_eq!(rv.last(), Some(&15.0), "{rv:?}");
    // The list's, then each event's or batch's (the two events may form one transaction).
    assert_eq!(rv.get(1), Some(&10.0), "{rv:?}");
    assert!(rv.windows(2).all(|w| w[0] <= w[1]), "{rv:?}");
    assert!(
        rv.iter().all(|v| [0.0, 10.0, 11.0, 12.0, 15.0].contains(v)),
        "{rv:?}"
    );

    let queued = provider.get("queued", "pods").values();
    assert_eq!(queued.last(), Some(&0.0), "drained: {queued:?}");
    assert!(queued.iter().all(|v| (0.0..=4.0).contains(v)), "{queued:?}");
    // One push and one pop per delta at least: the replace, two events, the bookmark.
    assert!(queued.len() >= 2 * 2, "{queued:?}");

    // One observation per processed batch: nothing advanced the paused clock inside one.
    let latency = provider.get("latency", "pods").values();
    assert!(!latency.is_empty() && latency.len() <= 4, "{latency:?}");
    assert!(latency.iter().all(|v| *v == 0.0), "{latency:?}");

    cancel.cancel();
    task.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn named_factory_labels_each_resource_once() {
    let fake = kctrl_fake::FakeApi::new();
    let provider = Arc::new(RecordingProvider::default());
    let factory = SharedInformerFactory::builder(fake.client(), Duration::ZERO)
        .metrics("kube-controller-manager", provider.clone())
        .build();
    let _pods = factory.informer::<Pod>();
    // A second informer of the same resource publishes nothing (client-go: a duplicate
    // registration).
    let _pod_metadata = factory.metadata_informer::<Pod>();
    let _deployments = factory.informer::<Deployment>();
    let resources: Vec<(&str, String, String, String)> = provider
        .ids()
        .into_iter()
        .map(|(w, id)| {
            assert_eq!(id.name, "kube-controller-manager");
            (w, id.group, id.version, id.resource)
        })
        .collect();
    let s = String::from;
    assert_eq!(
        resources,
        [
            ("rv", s(""), s("v1"), s("pods")),
            ("queued", s(""), s("v1"), s("pods")),
            ("latency", s(""), s("v1"), s("pods")),
            ("rv", s("apps"), s("v1"), s("deployments")),
            ("queued", s("apps"), s("v1"), s("deployments")),
            ("latency", s("apps"), s("v1"), s("deployments")),
        ]
    );

    // An unnamed factory's informers never reach a provider (there is none to reach); they
    // run as usual.
    let plain = SharedInformerFactory::new(fake.client(), Duration::ZERO);
    let _ = plain.informer::<Pod>();
    let cancel = CancellationToken::new();
    factory.start(&cancel);
    plain.start(&cancel);
    assert!(
        factory
            .wait_for_cache_sync(&cancel)
            .await
            .values()
            .all(|s| *s)
    );
    assert!(
        plain
            .wait_for_cache_sync(&cancel)
            .await
            .values()
            .all(|s| *s)
    );
    assert_eq!(provider.ids().len(), 6);
    let rv = provider.get("rv", "deployments").values();
    assert!(rv.len() >= 2, "the initial list set it: {rv:?}");
    cancel.cancel();
    factory.shutdown().await;
    plain.shutdown().await;
}

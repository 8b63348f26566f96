//! The controller runtime against a real kube-apiserver: a controller of a custom resource
//! (`Widget`) that owns a ConfigMap per Widget, written with server-side apply, and the
//! Widget's status; a deleted ConfigMap is put back (the owned delete enqueues its owner), a
//! spec change reaches the ConfigMap, and a second controller in the same process shares the
//! factory's ConfigMap informer.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kctrl_client::crd::CustomResourceExt;
use kctrl_client::{Api, Client, DeleteParams, PatchParams, PostParams, ResourceRef};
use kctrl_e2e::{
    TestNamespace, eventually, install_crd, require_cluster, uninstall_crd, wait_until,
};
use kctrl_informer::SharedInformerFactory;
use kctrl_runtime::{Action, Controller};
use tokio_util::sync::CancellationToken;

const TIMEOUT: Duration = Duration::from_secs(60);
/// Both tests install and remove the Widget CRD: one at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The widgets example's two controllers (and its Widget resource), compiled into this test.
#[path = "../../crates/runtime/examples/widgets.rs"]
mod widgets;
use widgets::{COLOR_LABEL, Error, MANAGER, Widget, WidgetSpec};

/// A test's namespace with an informer factory of its own, and the CRD of `K` installed.
struct Setup {
    client: Client,
    ns: TestNamespace,
    factory: SharedInformerFactory,
    cancel: CancellationToken,
    crd: String,
}

impl Setup {
    async fn new<K: CustomResourceExt>(client: Client, prefix: &str) -> Setup {
        install_crd(&client, &K::crd(), &ResourceRef::of::<K>()).await;
        let ns = TestNamespace::create(&client, prefix).await;
        let factory = SharedInformerFactory::builder(client.clone(), Duration::from_secs(3600))
            .namespace(&ns.name)
            .build();
        Setup {
            client,
            ns,
            factory,
            cancel: CancellationToken::new(),
            crd: K::crd_name(),
        }
    }

    /// Stops the controllers (which must stop in time and without error), then removes the
    /// namespace and the CRD.
    async fn finish(self, running: tokio::task::JoinHandle<Result<(), kctrl_runtime::RunError>>) {
        self.cancel.cancel();
        tokio::time::timeout(TIMEOUT, running)
            .await
            .expect("the controllers stop in time")
            .unwrap()
            .unwrap();
        self.factory.shutdown().await;
        self.cleanup().await;
    }

    /// Removes the namespace and the CRD.
    async fn cleanup(self) {
        self.ns.delete().await;
        uninstall_crd(&self.client, &self.crd).await;
    }
}

#[tokio::test]
async fn a_custom_resource_controller_owns_its_config_maps() {
    let cluster = require_cluster!();
    let _serial = SERIAL.lock().await;
    let setup = Setup::new::<Widget>(cluster.admin(), "runtime").await;
    let (client, ns, factory, cancel) = (&setup.client, &setup.ns, &setup.factory, &setup.cancel);
    let running = tokio::spawn(widgets::run_both(factory, client.clone(), cancel.clone()));

    let widgets: Api<Widget> = Api::namespaced(client.clone(), &ns.name);
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns.name);
    let created = widgets
        .create(
            &PostParams::default(),
            &Widget::new(
                "w1",
                WidgetSpec {
                    color: "blue".into(),
                },
            ),
        )
        .await
        .unwrap();

    let color = |cm: &ConfigMap| cm.data.as_ref().and_then(|d| d.get("color").cloned());
    let cm = eventually("the ConfigMap of w1", TIMEOUT, || async {
        configmaps.get("w1-color").await
    })
    .await;
    assert_eq!(color(&cm).as_deref(), Some("blue"));
    let owner = &cm.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(owner.uid, created.metadata.uid.clone().unwrap());
    assert_eq!(owner.controller, Some(true));
    let managers: Vec<_> = cm
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter_map(|m| m.manager.clone())
        .collect();
    assert_eq!(managers, [MANAGER]);
    eventually("w1's status", TIMEOUT, || async {
        let w = widgets.get("w1").await.map_err(|e| e.to_string())?;
        match w.status {
            Some(s) if s.config_map == "w1-color" && s.observed_generation == 1 => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;

    // Deleted by someone: the owned delete enqueues w1, which applies it again.
    let first_uid = cm.metadata.uid.clone();
    configmaps
        .delete("w1-color", &DeleteParams::default())
        .await
        .unwrap();
    eventually("w1-color put back", TIMEOUT, || async {
        match configmaps.get("w1-color").await {
            Ok(cm) if cm.metadata.uid != first_uid => Ok(cm),
            other => Err(format!("{other:?}")),
        }
    })
    .await;

    // A spec change (a new generation) reaches the ConfigMap.
    let mut w = widgets.get("w1").await.unwrap();
    w.spec.color = "green".into();
    widgets.update(&PostParams::default(), &w).await.unwrap();
    eventually("w1-color green", TIMEOUT, || async {
        let cm = configmaps
            .get("w1-color")
            .await
            .map_err(|e| e.to_string())?;
        match color(&cm).as_deref() {
            Some("green") => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;

    // The labeller, on the same ConfigMap and Widget informers, labelled w1 with its colour,
    // and only that label is its field manager's.
    eventually("w1 labelled green", TIMEOUT, || async {
        let w = widgets.get("w1").await.map_err(|e| e.to_string())?;
        let label = w
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(COLOR_LABEL).cloned());
        match label.as_deref() {
            Some("green") => Ok(w),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    let cm = configmaps.get("w1-color").await.unwrap();
    assert_eq!(color(&cm).as_deref(), Some("green"));

    setup.finish(running).await;
}

/// Owned ConfigMaps from a metadata-only informer on a real API server: the cache holds their
/// metadata alone, a deleted one enqueues its Widget and is put back, and the reconcile's
/// recorded writes are compared with that cache.
#[tokio::test]
async fn owned_config_maps_through_a_metadata_only_informer() {
    let cluster = require_cluster!();
    let _serial = SERIAL.lock().await;
    let setup = Setup::new::<Widget>(cluster.admin(), "runtime-meta").await;
    let (client, ns, factory, cancel) = (&setup.client, &setup.ns, &setup.factory, &setup.cancel);
    let controller = Controller::<Widget>::new(factory).owns_metadata::<ConfigMap>();
    let ctx = Arc::new(widgets::Widgets {
        client: client.clone(),
        writes: controller.own_writes(),
    });
    let writes = ctx.writes.clone();
    let running = tokio::spawn(controller.run(
        widgets::reconcile_widget,
        |_w, _e: &Error, _ctx| Action::rate_limited(),
        ctx,
        cancel.clone(),
    ));
    let widgets: Api<Widget> = Api::namespaced(client.clone(), &ns.name);
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns.name);
    widgets
        .create(
            &PostParams::default(),
            &Widget::new(
                "w3",
                WidgetSpec {
                    color: "red".into(),
                },
            ),
        )
        .await
        .unwrap();
    let first = eventually("the ConfigMap of w3", TIMEOUT, || async {
        configmaps.get("w3-color").await
    })
    .await;
    let cached = factory.metadata_informer::<ConfigMap>().store().clone();
    wait_until("w3-color in the metadata cache", TIMEOUT, || {
        cached.get_namespaced(&ns.name, "w3-color").is_some()
    })
    .await;
    configmaps
        .delete("w3-color", &DeleteParams::default())
        .await
        .unwrap();
    eventually("w3-color put back", TIMEOUT, || async {
        match configmaps.get("w3-color").await {
            Ok(cm) if cm.metadata.uid != first.metadata.uid => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    // Every recorded write is shown by the caches once the controller has settled.
    wait_until("the caches show every recorded write", TIMEOUT, || {
        writes.is_empty()
            || matches!(
                writes.check(&format!("{}/w3", ns.name)),
                kctrl_runtime::own_writes::Check::Current
            )
    })
    .await;
    setup.finish(running).await;
}

const FINALIZER: &str = "e2e.kctrl.dev/cleanup";

#[tokio::test]
async fn a_finalizer_holds_deletion_until_cleanup() {
    use kctrl_runtime::finalizer::{Event, FinalizerError, finalizer};

    let cluster = require_cluster!();
    let _serial = SERIAL.lock().await;
    let setup = Setup::new::<Widget>(cluster.admin(), "runtime-fin").await;
    let (client, ns, factory, cancel) = (&setup.client, &setup.ns, &setup.factory, &setup.cancel);
    // What the callback saw, in order.
    let log = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let seen = log.clone();
    let c = client.clone();
    let run = Controller::<Widget>::new(factory).run(
        move |w, _ctx: Arc<()>| {
            let (c, seen) = (c.clone(), seen.clone());
            async move {
                finalizer(&c, FINALIZER, w, |event| async move {
                    let what = match event {
                        Event::Apply(w) => format!("apply {}", w.spec.color),
                        Event::Cleanup(w) => format!("cleanup {}", w.spec.color),
                    };
                    seen.lock().unwrap().push(what);
                    Ok::<_, Error>(Action::await_change())
                })
                .await
            }
        },
        |_w, _e: &FinalizerError<Error>, _ctx| Action::rate_limited(),
        Arc::new(()),
        cancel.clone(),
    );
    let running = tokio::spawn(run);

    let widgets: Api<Widget> = Api::namespaced(client.clone(), &ns.name);
    widgets
        .create(
            &PostParams::default(),
            &Widget::new(
                "w2",
                WidgetSpec {
                    color: "red".into(),
                },
            ),
        )
        .await
        .unwrap();
    eventually("the finalizer on w2", TIMEOUT, || async {
        let w = widgets.get("w2").await.map_err(|e| e.to_string())?;
        match w.metadata.finalizers.as_deref() {
            Some([f]) if f == FINALIZER => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    widgets
        .delete("w2", &DeleteParams::default())
        .await
        .unwrap();
    eventually("w2 gone after its cleanup", TIMEOUT, || async {
        match widgets.get_opt("w2").await {
            Ok(None) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    let log = log.lock().unwrap().clone();
    assert_eq!(
        log.first().map(String::as_str),
        Some("apply red"),
        "{log:?}"
    );
    assert_eq!(
        log.last().map(String::as_str),
        Some("cleanup red"),
        "{log:?}"
    );
    assert_eq!(
        log.iter().filter(|l| l.starts_with("cleanup")).count(),
        1,
        "{log:?}"
    );

    setup.finish(running).await;
}

/// The example's controller, compiled into this test.
#[path = "../../crates/runtime/examples/sample_controller.rs"]
mod sample_controller;

#[tokio::test]
async fn the_sample_controller_example_does_what_sample_controller_does() {
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::core::v1::Event;
    use sample_controller::{Ctx, Foo, FooSpec};

    let cluster = require_cluster!();
    let _serial = SERIAL.lock().await;
    let setup = Setup::new::<Foo>(cluster.admin(), "sample").await;
    let (client, ns, factory, cancel) = (&setup.client, &setup.ns, &setup.factory, &setup.cancel);
    let broadcaster = kctrl_events::EventBroadcaster::new();
    broadcaster
        .start_recording_to_sink(kctrl_events::ApiEventSink::new(client.clone()))
        .unwrap();
    let ctx = Arc::new(Ctx {
        client: client.clone(),
        deployments: factory.informer::<Deployment>().store().clone(),
        recorder: Arc::new(
            broadcaster.new_recorder(kctrl_events::EventSource::new("sample-controller")),
        ),
    });
    let running = tokio::spawn(Controller::<Foo>::new(factory).owns::<Deployment>().run(
        sample_controller::reconcile,
        |_f, _e, _ctx| Action::rate_limited(),
        ctx,
        cancel.clone(),
    ));

    let foos: Api<Foo> = Api::namespaced(client.clone(), &ns.name);
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns.name);
    let spec = |name: &str, replicas| FooSpec {
        deployment_name: name.into(),
        replicas: Some(replicas),
    };
    let foo = foos
        .create(
            &PostParams::default(),
            &Foo::new("example-foo", spec("example-foo", 1)),
        )
        .await
        .unwrap();
    let d = eventually("the Deployment of example-foo", TIMEOUT, || async {
        deployments.get("example-foo").await
    })
    .await;
    assert_eq!(d.spec.replicas, Some(1));
    let controller = kctrl_controller_ref::get_controller_of(&d.metadata).unwrap();
    assert_eq!(
        (controller.kind.as_str(), controller.uid.clone()),
        ("Foo", foo.metadata.uid.clone().unwrap())
    );
    eventually("example-foo's status", TIMEOUT, || async {
        let f = foos.get("example-foo").await.map_err(|e| e.to_string())?;
        f.status.ok_or_else(|| "no status".to_owned())
    })
    .await;

    // The Foo's replicas reach the Deployment.
    let mut f = foos.get("example-foo").await.unwrap();
    f.spec.replicas = Some(3);
    foos.update(&PostParams::default(), &f).await.unwrap();
    eventually("3 replicas", TIMEOUT, || async {
        let d = deployments
            .get("example-foo")
            .await
            .map_err(|e| e.to_string())?;
        (d.spec.replicas == Some(3))
            .then_some(())
            .ok_or(format!("{:?}", d.spec.replicas))
    })
    .await;

    // A Deployment of that name owned by nobody: refused, with a Warning event on the Foo.
    let stranger = Deployment {
        metadata: ObjectMeta {
            name: Some("stranger".into()),
            ..Default::default()
        },
        ..d.clone()
    };
    let mut stranger = stranger;
    stranger.metadata.owner_references = None;
    stranger.metadata.resource_version = None;
    stranger.metadata.uid = None;
    stranger.metadata.managed_fields = None;
    stranger.metadata.creation_timestamp = None;
    stranger.status = None;
    deployments
        .create(&PostParams::default(), &stranger)
        .await
        .unwrap();
    foos.create(
        &PostParams::default(),
        &Foo::new("other-foo", spec("stranger", 1)),
    )
    .await
    .unwrap();
    let events: Api<Event> = Api::namespaced(client.clone(), &ns.name);
    eventually("ErrResourceExists on other-foo", TIMEOUT, || async {
        let list = events
            .list(&kctrl_client::ListParams::default())
            .await
            .map_err(|e| e.to_string())?;
        list.items
            .into_iter()
            .find(|e| {
                e.reason.as_deref() == Some("ErrResourceExists")
                    && e.involved_object.name.as_deref() == Some("other-foo")
            })
            .map(|e| e.message)
            .ok_or("no event yet".to_owned())
    })
    .await
    .filter(|m| m == "Resource \"stranger\" already exists and is not managed by Foo")
    .expect("the refusal's message");
    let untouched = deployments.get("stranger").await.unwrap();
    assert!(untouched.metadata.owner_references.is_none());

    setup.finish(running).await;
    broadcaster.shutdown().await;
}

#[tokio::test]
async fn leader_elected_replicas_hand_over_on_a_real_lease() {
    use kctrl_leader_election::{LeaderElectionConfig, LeaseLock};
    use std::sync::atomic::AtomicUsize;

    let cluster = require_cluster!();
    let _serial = SERIAL.lock().await;
    let setup = Setup::new::<Widget>(cluster.admin(), "runtime-le").await;
    let (client, ns) = (&setup.client, &setup.ns);
    Api::<Widget>::namespaced(client.clone(), &ns.name)
        .create(
            &PostParams::default(),
            &Widget::new(
                "w3",
                WidgetSpec {
                    color: "teal".into(),
                },
            ),
        )
        .await
        .unwrap();
    let fast = |c: &mut LeaderElectionConfig| {
        c.lease_duration = Duration::from_secs(4);
        c.renew_deadline = Duration::from_secs(2);
        c.retry_period = Duration::from_millis(200);
    };
    // Each replica with a factory of its own, as two processes would have.
    let replica = |identity: &str| {
        let factory = SharedInformerFactory::builder(client.clone(), Duration::from_secs(3600))
            .namespace(&ns.name)
            .build();
        let count = Arc::new(AtomicUsize::new(0));
        let counter = count.clone();
        let cancel = CancellationToken::new();
        let lock = LeaseLock::new(client.clone(), &ns.name, "widgets", identity);
        let task = tokio::spawn(Controller::<Widget>::new(&factory).run_leader_elected(
            lock,
            fast,
            move |_w, _ctx: Arc<()>| {
                let counter = counter.clone();
                async move {
                    counter.fetch_add(1, Ordering::SeqCst);
                    Ok::<_, Error>(Action::await_change())
                }
            },
            |_w, _e, _ctx| Action::rate_limited(),
            Arc::new(()),
            cancel.clone(),
        ));
        (factory, count, cancel, task)
    };
    let (fa, a, cancel_a, task_a) = replica("replica-a");
    eventually("replica-a reconciles", TIMEOUT, || async {
        (a.load(Ordering::SeqCst) > 0).then_some(()).ok_or(())
    })
    .await;
    let (fb, b, cancel_b, task_b) = replica("replica-b");
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(b.load(Ordering::SeqCst), 0, "the standby reconciled");
    let lease =
        Api::<k8s_openapi::api::coordination::v1::Lease>::namespaced(client.clone(), &ns.name)
            .get("widgets")
            .await
            .unwrap();
    assert_eq!(
        lease.spec.and_then(|s| s.holder_identity).as_deref(),
        Some("replica-a")
    );

    // replica-a shuts down: it releases the Lease after its controller stopped, and
    // replica-b takes over before the 4 s lease would have run out.
    cancel_a.cancel();
    task_a.await.unwrap().unwrap();
    let released = tokio::time::Instant::now();
    eventually("replica-b reconciles", TIMEOUT, || async {
        (b.load(Ordering::SeqCst) > 0).then_some(()).ok_or(())
    })
    .await;
    assert!(
        released.elapsed() < Duration::from_secs(4),
        "{:?}",
        released.elapsed()
    );
    cancel_b.cancel();
    task_b.await.unwrap().unwrap();
    fa.shutdown().await;
    fb.shutdown().await;
    setup.cleanup().await;
}

/// What the counting reconcile saw, and the handle its writes are recorded on.
struct Counting {
    client: Client,
    writes: Option<kctrl_runtime::OwnWrites>,
    seen: std::sync::Mutex<Vec<u32>>,
}

const COUNT_TO: u32 = 25;

/// Counts ConfigMap `counter`'s `data.count` up by one per reconcile, from what the cache
/// shows, and asks to run again at once until it reaches [`COUNT_TO`]: every run right after a
/// write, the moment a stale cache shows.
async fn count_up(cm: Arc<ConfigMap>, ctx: Arc<Counting>) -> Result<Action, Error> {
    // The namespace's other ConfigMaps (kube-root-ca.crt) are not ours to count in.
    if cm.metadata.name.as_deref() != Some("counter") {
        return Ok(Action::await_change());
    }
    let count: u32 = cm
        .data
        .as_ref()
        .and_then(|d| d.get("count"))
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    ctx.seen.lock().unwrap().push(count);
    if count >= COUNT_TO {
        return Ok(Action::await_change());
    }
    let ns = cm.metadata.namespace.clone().unwrap_or_default();
    let sent = ConfigMap {
        metadata: ObjectMeta {
            name: cm.metadata.name.clone(),
            namespace: Some(ns.clone()),
            ..Default::default()
        },
        data: Some(BTreeMap::from([("count".into(), (count + 1).to_string())])),
        ..Default::default()
    };
    let answer = Api::<ConfigMap>::namespaced(ctx.client.clone(), &ns)
        .apply(&PatchParams::apply("counter").force(), &sent)
        .await;
    if let Some(writes) = &ctx.writes {
        writes.record(&*cm, &sent, &answer);
    }
    answer?;
    Ok(Action::requeue(Duration::ZERO))
}

/// Runs the counting controller until the count reaches [`COUNT_TO`]; returns the counts its
/// reconciles saw.
async fn count_with(client: &Client, read_own_writes: bool) -> Vec<u32> {
    let ns = TestNamespace::create(client, "own-writes").await;
    let factory = SharedInformerFactory::builder(client.clone(), Duration::from_secs(3600))
        .namespace(&ns.name)
        .build();
    let controller = Controller::<ConfigMap>::new(&factory);
    let ctx = Arc::new(Counting {
        client: client.clone(),
        writes: read_own_writes.then(|| controller.own_writes()),
        seen: Default::default(),
    });
    let cancel = CancellationToken::new();
    let running = tokio::spawn(controller.run(
        count_up,
        |_cm, _err: &Error, _ctx| Action::rate_limited(),
        ctx.clone(),
        cancel.clone(),
    ));
    let mut counter = ConfigMap::default();
    counter.metadata.name = Some("counter".into());
    Api::<ConfigMap>::namespaced(client.clone(), &ns.name)
        .create(&PostParams::default(), &counter)
        .await
        .unwrap();
    wait_until("the count reaches its end", TIMEOUT, || {
        ctx.seen.lock().unwrap().contains(&COUNT_TO)
    })
    .await;
    cancel.cancel();
    tokio::time::timeout(TIMEOUT, running)
        .await
        .expect("the controller stops in time")
        .unwrap()
        .unwrap();
    factory.shutdown().await;
    ns.delete().await;
    ctx.seen.lock().unwrap().clone()
}

/// With its writes recorded, a reconcile that runs again right after its own write never sees
/// the cache from before it: the counts it saw are 0, 1, 2, ... each exactly once. (Without,
/// on the same apiserver, runs read the count they had just replaced and wrote it again:
/// `KCTRL_E2E_OWN_WRITES_CONTROL=1` prints such a run.)
#[tokio::test]
async fn a_reconcile_reads_its_own_writes() {
    let cluster = require_cluster!();
    let seen = count_with(&cluster.admin(), true).await;
    // Each count below the end is seen exactly once: a reconcile that read the count it had
    // just replaced would see (and write) it twice. The end may be seen again: the event of
    // the last write can enqueue the key after a reconcile already read it from the cache.
    let below_end: Vec<u32> = seen.iter().copied().filter(|c| *c < COUNT_TO).collect();
    let want: Vec<u32> = (0..COUNT_TO).collect();
    assert_eq!(
        below_end, want,
        "every reconcile saw the previous one's write: {seen:?}"
    );
    assert!(seen.iter().all(|c| *c <= COUNT_TO), "{seen:?}");
    if std::env::var_os("KCTRL_E2E_OWN_WRITES_CONTROL").is_some() {
        let without = count_with(&cluster.admin(), false).await;
        eprintln!(
            "without recording: {} reconciles for {} writes: {without:?}",
            without.len(),
            COUNT_TO
        );
    }
}

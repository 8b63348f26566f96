//! The harness itself: what a timeout reports, a controller that stops early, requeues on the
//! paused clock, a controller that never idles, and a stop that leaves no task behind.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kctrl_client::{Api, Client, PatchParams, PostParams};
use kctrl_events::{EventRecorder, EventType, Recorder};
use kctrl_harness::{HarnessError, TestHarness};
use kctrl_runtime::{Action, Controller};

struct Ctx {
    client: Client,
    recorder: Recorder,
    requeue: Option<Duration>,
    count: AtomicU32,
}

/// Counts its reconciles of a Deployment in ConfigMap `<name>-count` and records a `Counted`
/// event about the Deployment.
async fn count(d: Arc<Deployment>, ctx: Arc<Ctx>) -> Result<Action, kctrl_client::Error> {
    let n = ctx.count.fetch_add(1, Ordering::SeqCst) + 1;
    let name = d.metadata.name.clone().unwrap_or_default();
    let cm = ConfigMap {
        metadata: ObjectMeta {
            name: Some(format!("{name}-count")),
            ..Default::default()
        },
        data: Some(BTreeMap::from([("count".to_owned(), n.to_string())])),
        ..Default::default()
    };
    Api::<ConfigMap>::namespaced(ctx.client.clone(), "default")
        .apply(&PatchParams::apply("counter"), &cm)
        .await?;
    ctx.recorder.event(
        &kctrl_events::object_reference(&*d),
        EventType::Normal,
        "Counted",
        &format!("count {n}"),
    );
    Ok(ctx.requeue.map_or(Action::await_change(), Action::requeue))
}

fn deployment(name: &str) -> Deployment {
    Deployment {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("default".into()),
            ..Default::default()
        },
        ..Default::default()
    }
}

/// A harness running `count` with `requeue`, and Deployment `default/app` created.
async fn counting(requeue: Option<Duration>, timeout: Duration) -> TestHarness {
    let mut h = TestHarness::new().unwrap().timeout(timeout);
    let controller = Controller::<Deployment>::new(h.factory());
    let ctx = Arc::new(Ctx {
        client: h.client(),
        recorder: h.event_recorder(&controller),
        requeue,
        count: AtomicU32::new(0),
    });
    h.start(
        controller,
        count,
        |_d, _err, _ctx| Action::rate_limited(),
        ctx,
    );
    Api::<Deployment>::namespaced(h.client(), "default")
        .create(&PostParams::default(), &deployment("app"))
        .await
        .unwrap();
    h
}

fn count_of(cm: &ConfigMap) -> Option<&str> {
    cm.data
        .as_ref()
        .and_then(|d| d.get("count"))
        .map(String::as_str)
}

#[tokio::test(start_paused = true)]
async fn a_timeout_shows_the_object_as_last_seen_and_the_events() {
    let h = counting(None, Duration::from_secs(2)).await;
    // Nothing requeues: the count stays at 1.
    let err = h
        .wait_for_object::<ConfigMap>(Some("default"), "app-count", "a second count", |cm| {
            count_of(cm) == Some("2")
        })
        .await
        .unwrap_err();
    assert!(matches!(err, HarnessError::Timeout { .. }), "{err}");
    let text = err.to_string();
    for part in [
        "timed out after 2s waiting for a second count (ConfigMap default/app-count); last seen: {",
        r#""data":{"count":"1"}"#,
        "events recorded: Normal Counted count 1",
    ] {
        assert!(text.contains(part), "{part:?} not in {text}");
    }
    // A wait for an object that never appears says so.
    let err = h
        .wait_for_object::<ConfigMap>(Some("default"), "nope", "nope", |_| true)
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("last seen: no ConfigMap default/nope"),
        "{err}"
    );
    h.stop().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn requeues_run_on_the_paused_clock_without_real_waiting() {
    let started = std::time::Instant::now();
    let virtual_start = tokio::time::Instant::now();
    let h = counting(Some(Duration::from_secs(600)), Duration::from_secs(3600)).await;
    let cm = h
        .wait_for_object::<ConfigMap>(Some("default"), "app-count", "four counts", |cm| {
            count_of(cm) == Some("4")
        })
        .await
        .unwrap();
    assert_eq!(count_of(&cm), Some("4"));
    // Three requeues of ten minutes each passed on Tokio's clock...
    assert!(virtual_start.elapsed() >= Duration::from_secs(1800));
    // ...in far less real time.
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
    let counted: Vec<String> = h
        .wait_until("four Counted events", |h| {
            let events = h.events();
            if events.len() >= 4 {
                Ok(events.iter().map(|e| e.message.clone()).collect())
            } else {
                Err(format!("{} events", events.len()))
            }
        })
        .await
        .unwrap();
    assert_eq!(counted[..4], ["count 1", "count 2", "count 3", "count 4"]);
    assert_eq!(
        h.events()[0].object.name.as_deref(),
        Some("app"),
        "the event is about the Deployment"
    );
    h.stop().await.unwrap();
}

/// Reconciles ConfigMaps by writing the ConfigMap itself: every write enqueues it again.
async fn rewrite(cm: Arc<ConfigMap>, client: Arc<Client>) -> Result<Action, kctrl_client::Error> {
    let mut next = (*cm).clone();
    let data = next.data.get_or_insert_default();
    let n = data
        .get("n")
        .and_then(|n| n.parse::<u64>().ok())
        .unwrap_or(0);
    data.insert("n".into(), (n + 1).to_string());
    let ns = cm.metadata.namespace.clone().unwrap_or_default();
    Api::<ConfigMap>::namespaced((*client).clone(), &ns)
        .update(&PostParams::default(), &next)
        .await?;
    Ok(Action::await_change())
}

#[tokio::test(start_paused = true)]
async fn a_controller_that_never_idles_still_times_out_in_real_time() {
    let mut h = TestHarness::new().unwrap().timeout(Duration::from_secs(2));
    let controller = Controller::<ConfigMap>::new(h.factory());
    h.start(
        controller,
        rewrite,
        |_cm, _err, _ctx| Action::rate_limited(),
        Arc::new(h.client()),
    );
    let cm = ConfigMap {
        metadata: ObjectMeta {
            name: Some("loop".into()),
            namespace: Some("default".into()),
            ..Default::default()
        },
        ..Default::default()
    };
    Api::<ConfigMap>::namespaced(h.client(), "default")
        .create(&PostParams::default(), &cm)
        .await
        .unwrap();
    let started = std::time::Instant::now();
    let err = h
        .wait_for_object::<ConfigMap>(Some("default"), "loop", "a quiet ConfigMap", |_| false)
        .await
        .unwrap_err();
    assert!(matches!(err, HarnessError::Timeout { .. }), "{err}");
    assert!(started.elapsed() < Duration::from_secs(10));
    // The last state seen shows the loop's progress.
    assert!(err.to_string().contains(r#""data":{"n":""#), "{err}");
    h.stop().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_controller_that_returns_fails_the_wait_at_once() {
    let mut h = TestHarness::new().unwrap();
    let controller = Controller::<Deployment>::new(h.factory());
    let ctx = Arc::new(Ctx {
        client: h.client(),
        recorder: h.event_recorder(&controller),
        requeue: None,
        count: AtomicU32::new(0),
    });
    // On a factory that has shut down, `run` returns an error instead of waiting.
    h.factory().shutdown().await;
    h.start(
        controller,
        count,
        |_d, _err, _ctx| Action::rate_limited(),
        ctx,
    );
    let before = tokio::time::Instant::now();
    let err = h
        .wait_for_object::<ConfigMap>(Some("default"), "app-count", "a count", |_| true)
        .await
        .unwrap_err();
    assert!(matches!(err, HarnessError::Stopped { .. }), "{err}");
    assert!(
        err.to_string()
            .starts_with("controller deployment stopped while waiting for a count"),
        "{err}"
    );
    assert!(before.elapsed() < Duration::from_secs(1));
    // stop reports the controller's error too.
    let err = h.stop().await.unwrap_err();
    assert!(matches!(err, HarnessError::Run { .. }), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_leaves_no_task_behind() {
    let metrics = tokio::runtime::Handle::current().metrics();
    let before = metrics.num_alive_tasks();
    let h = counting(None, Duration::from_secs(30)).await;
    h.wait_for_object::<ConfigMap>(Some("default"), "app-count", "a count", |cm| {
        count_of(cm) == Some("1")
    })
    .await
    .unwrap();
    assert!(metrics.num_alive_tasks() > before);
    h.stop().await.unwrap();
    // A task is counted until its future is dropped, a moment after it completes.
    for _ in 0..100 {
        if metrics.num_alive_tasks() == before {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(metrics.num_alive_tasks(), before);
}

/// Sets a flag when dropped: tells whether a reconcile's future was dropped (its task
/// aborted) or still lives.
struct DropFlag(Arc<std::sync::atomic::AtomicBool>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

#[tokio::test(start_paused = true)]
async fn a_stop_cut_short_still_aborts_the_controllers() {
    let mut h = TestHarness::new().unwrap();
    // Waits for its reconciles without limit once cancelled.
    let controller = Controller::<Deployment>::new(h.factory()).shutdown_timeout(Duration::MAX);
    let dropped = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let started = Arc::new(AtomicU32::new(0));
    let ctx = Arc::new((dropped.clone(), started.clone()));
    h.start(
        controller,
        |_d: Arc<Deployment>, ctx: Arc<(Arc<std::sync::atomic::AtomicBool>, Arc<AtomicU32>)>| async move {
            let _flag = DropFlag(ctx.0.clone());
            ctx.1.fetch_add(1, Ordering::SeqCst);
            // A reconcile that never ends.
            std::future::pending::<()>().await;
            Ok::<_, kctrl_client::Error>(Action::await_change())
        },
        |_d, _err, _ctx| Action::rate_limited(),
        ctx,
    );
    Api::<Deployment>::namespaced(h.client(), "default")
        .create(&PostParams::default(), &deployment("app"))
        .await
        .unwrap();
    h.wait_until("the reconcile to start", |_| {
        if started.load(Ordering::SeqCst) > 0 {
            Ok(())
        } else {
            Err("not started".to_owned())
        }
    })
    .await
    .unwrap();
    // The stop waits for the reconcile for ever: the timeout cuts it short.
    let cut = tokio::time::timeout(Duration::from_secs(5), h.stop()).await;
    assert!(cut.is_err(), "the stop should not finish: {cut:?}");
    // The harness, dropped with the stop, aborted the controller: its reconcile is gone.
    for _ in 0..100 {
        if dropped.load(Ordering::SeqCst) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(dropped.load(Ordering::SeqCst), "the reconcile still runs");
}

#[tokio::test(start_paused = true)]
async fn reconcile_panics_show_in_a_timeout_and_fail_stop() {
    let mut h = TestHarness::new().unwrap().timeout(Duration::from_secs(60));
    let controller = Controller::<Deployment>::new(h.factory());
    h.start(
        controller,
        |d: Arc<Deployment>, _ctx: Arc<()>| async move {
            if d.metadata.name.as_deref() == Some("app") {
                panic!(
                    "no replicas in {}",
                    d.metadata.name.as_deref().unwrap_or_default()
                );
            }
            Ok::<_, kctrl_client::Error>(Action::await_change())
        },
        |_d, _err, _ctx| Action::rate_limited(),
        Arc::new(()),
    );
    Api::<Deployment>::namespaced(h.client(), "default")
        .create(&PostParams::default(), &deployment("app"))
        .await
        .unwrap();
    let err = h
        .wait_for_object::<ConfigMap>(Some("default"), "app-count", "a count", |_| true)
        .await
        .unwrap_err();
    let HarnessError::Timeout { panics, .. } = &err else {
        panic!("{err}");
    };
    assert!(!panics.is_empty(), "{err}");
    assert!(
        err.to_string()
            .contains("reconciles panicked: deployment: default/app: no replicas in app"),
        "{err}"
    );
    assert_eq!(h.panics()[0], "deployment: default/app: no replicas in app");
    // The controller caught them and ended cleanly; stop still fails.
    let err = h.stop().await.unwrap_err();
    assert!(matches!(err, HarnessError::Panicked { .. }), "{err}");
    assert!(
        err.to_string()
            .contains("of controller deployment panicked: default/app: no replicas in app"),
        "{err}"
    );
}

#[tokio::test(start_paused = true)]
async fn an_unlimited_timeout_has_no_deadline() {
    let h = TestHarness::new().unwrap().timeout(Duration::MAX);
    let mut checks = 0;
    h.wait_until("a third check", |_| {
        checks += 1;
        if checks >= 3 {
            Ok(())
        } else {
            Err(format!("{checks} checks"))
        }
    })
    .await
    .unwrap();
    h.stop().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_timeout_counts_the_events_the_broadcaster_dropped() {
    let h = TestHarness::new().unwrap().timeout(Duration::from_secs(1));
    let recorder = h
        .broadcaster()
        .new_recorder(kctrl_events::EventSource::new("burst"));
    let object = kctrl_events::object_reference(&deployment("app"));
    // On this single-threaded runtime the harness's watcher cannot run until we yield: its
    // queue takes MAX_QUEUED_EVENTS, the rest are dropped.
    let extra = 5;
    for i in 0..kctrl_events::MAX_QUEUED_EVENTS + extra {
        recorder.event(&object, EventType::Normal, "Burst", &i.to_string());
    }
    let err = h
        .wait_until("nothing", |_| Err::<(), _>("never".to_owned()))
        .await
        .unwrap_err();
    let HarnessError::Timeout { dropped_events, .. } = &err else {
        panic!("{err}");
    };
    assert_eq!(*dropped_events, extra as u64);
    assert!(
        err.to_string()
            .ends_with("; 5 events dropped by the broadcaster (not in the list)"),
        "{err}"
    );
    h.stop().await.unwrap();
}

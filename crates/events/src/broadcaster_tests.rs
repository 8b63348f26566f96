//! Ports of client-go's `event_test.go` (TestEventf, TestEventfNoNamespace,
//! TestMultiSinkCache, TestLotsOfEvents, the shutdown tests) and the broadcaster's own
//! guarantees: never blocking, counting drops, draining on shutdown.

use std::sync::atomic::{AtomicU32, AtomicUsize};

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{EventSource as ApiEventSource, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use tokio::sync::mpsc::UnboundedReceiver;

use super::*;
use crate::FakeClock;
use crate::event::object_reference;
use crate::sink::SinkError;
use crate::test_support::{FnSink, MemorySink, Op, validate_event};

fn pod(uid: &str, namespace: Option<&str>) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some("foo".into()),
            namespace: namespace.map(Into::into),
            uid: Some(uid.into()),
            ..Default::default()
        },
        ..Default::default()
    }
}

fn with_field_path(mut r: ObjectReference, path: &str) -> ObjectReference {
    r.field_path = Some(path.into());
    r
}

/// The event upstream's tables expect: name prefix `foo`, source `eventTest`.
fn expected(
    namespace: &str,
    object: &ObjectReference,
    reason: &str,
    message: &str,
    count: i32,
) -> Event {
    Event {
        metadata: ObjectMeta {
            name: Some("foo".into()),
            namespace: Some(namespace.into()),
            ..Default::default()
        },
        involved_object: object.clone(),
        reason: Some(reason.into()),
        message: Some(message.into()),
        source: Some(ApiEventSource {
            component: Some("eventTest".into()),
            host: None,
        }),
        reporting_component: Some("eventTest".into()),
        count: Some(count),
        type_: Some("Normal".into()),
        ..Default::default()
    }
}

struct Item {
    object: ObjectReference,
    reason: &'static str,
    message: String,
    expect: Event,
    expect_patch: bool,
}

/// The seven-step table of TestEventf and TestMultiSinkCache.
fn eventf_table() -> Vec<Item> {
    let r1 = with_field_path(
        object_reference(&pod("bar", Some("baz"))),
        "spec.containers[2]",
    );
    let r2 = with_field_path(
        object_reference(&pod("differentUid", Some("baz"))),
        "spec.containers[3]",
    );
    let p1 = object_reference(&pod("bar", Some("baz")));
    let msg = "some verbose message: 1";
    let other = "some other verbose message: 1";
    let item = |object: &ObjectReference, reason, message: &str, count, expect_patch| Item {
        object: object.clone(),
        reason,
        message: message.to_owned(),
        expect: expected("baz", object, reason, message, count),
        expect_patch,
    };
    vec![
        item(&r1, "Started", msg, 1, false),
        item(&p1, "Killed", other, 1, false),
        item(&r1, "Started", msg, 2, true),
        item(&r2, "Started", msg, 1, false),
        item(&r1, "Started", msg, 3, true),
        item(&r2, "Stopped", msg, 1, false),
        item(&r2, "Stopped", msg, 2, true),
    ]
}

fn test_broadcaster() -> EventBroadcaster {
    EventBroadcaster::with_options(BroadcasterOptions {
        sleep_duration: Duration::ZERO,
        ..Default::default()
    })
    .unwrap()
}

fn test_recorder(b: &EventBroadcaster) -> (Recorder, Arc<FakeClock>) {
    let clock = Arc::new(FakeClock::new(Timestamp::now()));
    let recorder = b
        .new_recorder(EventSource::new("eventTest"))
        .with_clock(clock.clone());
    (recorder, clock)
}

async fn expect_write(rx: &mut UnboundedReceiver<(Op, Event)>, what: &str, item: &Item) -> Event {
    let (op, event) = rx.recv().await.expect("the sink stopped");
    let want = if item.expect_patch {
        Op::Patched
    } else {
        Op::Created
    };
    assert_eq!(op, want, "{what}");
    validate_event(what, &event, &item.expect);
    event
}

// TestEventf: creates, patches, and a log watcher seeing every event.
#[tokio::test]
async fn eventf_creates_and_patches_and_logs() {
    let b = test_broadcaster();
    let (sink, mut writes) = MemorySink::new();
    b.start_recording_to_sink(sink).unwrap();
    let (recorder, clock) = test_recorder(&b);
    for (i, item) in eventf_table().into_iter().enumerate() {
        clock.step(Duration::from_secs(1));
        // A fresh log watcher per item, as upstream starts one per table entry.
        let (log_tx, mut log_rx) = tokio::sync::mpsc::unbounded_channel();
        let logger = b
            .start_event_watcher(move |e| {
                let _ = log_tx.send(e.clone());
            })
            .unwrap();
        let logging = b.start_logging(Level::INFO).unwrap();
        recorder.event(&item.object, EventType::Normal, item.reason, &item.message);
        let logged = log_rx.recv().await.unwrap();
        assert_eq!(logged.involved_object, item.object, "item {i}");
        assert_eq!(logged.reason.as_deref(), Some(item.reason), "item {i}");
        assert_eq!(logged.message.as_deref(), Some(item.message.as_str()));
        expect_write(&mut writes, &format!("item {i}"), &item).await;
        logger.stop();
        logging.stop();
        logger.stopped().await;
        logging.stopped().await;
    }
    b.shutdown().await;
}

// TestEventfNoNamespace: an object without a namespace gets its event in "default".
#[tokio::test]
async fn event_about_an_object_without_namespace_goes_to_default() {
    let b = test_broadcaster();
    let (sink, mut writes) = MemorySink::new();
    b.start_recording_to_sink(sink).unwrap();
    let (recorder, clock) = test_recorder(&b);
    clock.step(Duration::from_secs(1));
    let object = with_field_path(object_reference(&pod("bar", None)), "spec.containers[2]");
    assert_eq!(object.namespace, None);
    let item = Item {
        object: object.clone(),
        reason: "Started",
        message: "some verbose message: 1".into(),
        expect: expected("default", &object, "Started", "some verbose message: 1", 1),
        expect_patch: false,
    };
    recorder.event(&object, EventType::Normal, item.reason, &item.message);
    expect_write(&mut writes, "no namespace", &item).await;
    b.shutdown().await;
}

// TestMultiSinkCache: a second sink starts with a clean correlator.
#[tokio::test]
async fn each_sink_has_its_own_correlation_cache() {
    let b = test_broadcaster();
    let (recorder, clock) = test_recorder(&b);
    let (sink1, mut writes1) = MemorySink::new();
    let w1 = b.start_recording_to_sink(sink1).unwrap();
    for (i, item) in eventf_table().into_iter().enumerate() {
        clock.step(Duration::from_secs(1));
        recorder.event(&item.object, EventType::Normal, item.reason, &item.message);
        expect_write(&mut writes1, &format!("sink 1, item {i}"), &item).await;
    }
    w1.stop();
    w1.stopped().await;
    assert!(w1.is_stopped());

    let (sink2, mut writes2) = MemorySink::new();
    let _w2 = b.start_recording_to_sink(sink2).unwrap();
    for (i, item) in eventf_table().into_iter().enumerate() {
        clock.step(Duration::from_secs(1));
        recorder.event(&item.object, EventType::Normal, item.reason, &item.message);
        expect_write(&mut writes2, &format!("sink 2, item {i}"), &item).await;
    }
    // The stopped sink saw none of the second round.
    assert!(writes1.try_recv().is_err());
    b.shutdown().await;
}

// TestLotsOfEvents: 1000 events, each failing four times, all reach both watchers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lots_of_events_are_all_delivered_and_retried() {
    let b = test_broadcaster();
    let attempts: Arc<Vec<AtomicU32>> =
        Arc::new((0..MAX_QUEUED_EVENTS).map(|_| AtomicU32::new(0)).collect());
    let (written_tx, mut written) = tokio::sync::mpsc::unbounded_channel();
    let seen = attempts.clone();
    let sink = FnSink {
        create: Box::new(move |e| {
            let n: usize = e.message.as_deref().unwrap_or("").parse().unwrap();
            if seen[n].fetch_add(1, Ordering::SeqCst) + 1 < 5 {
                return Err(SinkError::Failed("fake error".into()));
            }
            let _ = written_tx.send(n);
            Ok(e.clone())
        }),
        ..Default::default()
    };
    b.start_recording_to_sink(sink).unwrap();
    let logged = Arc::new(AtomicUsize::new(0));
    let count = logged.clone();
    b.start_event_watcher(move |_| {
        count.fetch_add(1, Ordering::SeqCst);
    })
    .unwrap();
    let recorder = b.new_recorder(EventSource::new("eventTest"));
    let mut tasks = Vec::new();
    for i in 0..MAX_QUEUED_EVENTS {
        let recorder = recorder.clone();
        tasks.push(tokio::spawn(async move {
            // A distinct object avoids the spam filter, a distinct reason aggregation.
            let object = ObjectReference {
                kind: Some("Pod".into()),
                name: Some(format!("foo-{i}")),
                namespace: Some("baz".into()),
                uid: Some("bar".into()),
                api_version: Some("version".into()),
                ..Default::default()
            };
            recorder.event(
                &object,
                EventType::Normal,
                &format!("Reason-{i}"),
                &i.to_string(),
            );
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let mut got = vec![false; MAX_QUEUED_EVENTS];
    for _ in 0..MAX_QUEUED_EVENTS {
        got[written.recv().await.unwrap()] = true;
    }
    assert!(got.iter().all(|g| *g));
    for (i, a) in attempts.iter().enumerate() {
        assert_eq!(a.load(Ordering::SeqCst), 5, "event {i}");
    }
    b.shutdown().await;
    assert_eq!(logged.load(Ordering::SeqCst), MAX_QUEUED_EVENTS);
    assert_eq!(b.dropped_events(), 0);
}

#[tokio::test]
async fn a_full_queue_drops_and_counts_without_blocking() {
    let b = EventBroadcaster::with_options(BroadcasterOptions {
        queue_length: 3,
        ..Default::default()
    })
    .unwrap();
    let handled = Arc::new(AtomicUsize::new(0));
    let count = handled.clone();
    let watcher = b
        .start_event_watcher(move |_| {
            count.fetch_add(1, Ordering::SeqCst);
        })
        .unwrap();
    let recorder = b.new_recorder(EventSource::new("eventTest"));
    let object = object_reference(&pod("u", Some("ns")));
    // On this single-threaded runtime the watcher cannot run until we yield: three events fit
    // in its queue, the other seven are dropped, and every call returns at once.
    for i in 0..10 {
        recorder.event(&object, EventType::Warning, "Burst", &format!("{i}"));
    }
    assert_eq!(b.dropped_events(), 7);
    b.shutdown().await;
    assert!(watcher.is_stopped());
    assert_eq!(
        handled.load(Ordering::SeqCst),
        3,
        "queued events are drained"
    );
}

// TestBroadcasterShutdown / TestStartEventWatcherExitsOnDirectShutdown.
#[tokio::test]
async fn shutdown_stops_every_watcher_and_refuses_more() {
    let b = test_broadcaster();
    let logging = b.start_logging(Level::DEBUG).unwrap();
    let (sink, _writes) = MemorySink::new();
    let sinking = b.start_recording_to_sink(sink).unwrap();
    b.shutdown().await;
    assert!(b.is_shut_down());
    assert!(logging.is_stopped() && sinking.is_stopped());
    assert!(matches!(b.start_logging(Level::INFO), Err(Error::ShutDown)));
    // Recording after shutdown is refused quietly, never a panic.
    let recorder = b.new_recorder(EventSource::new("late"));
    recorder.event(
        &object_reference(&pod("u", Some("ns"))),
        EventType::Normal,
        "Late",
        "too late",
    );
    assert!(matches!(
        b.shared.publish(Event::default()),
        Err(Error::ShutDown)
    ));
    // A second shutdown is harmless.
    b.shutdown().await;
}

// WithContext: cancelling the given token shuts the broadcaster down.
#[tokio::test]
async fn cancelling_the_given_token_shuts_down() {
    let token = CancellationToken::new();
    let b = EventBroadcaster::with_options(BroadcasterOptions {
        cancellation: Some(token.clone()),
        ..Default::default()
    })
    .unwrap();
    let w = b.start_logging(Level::INFO).unwrap();
    token.cancel();
    w.stopped().await;
    assert!(b.is_shut_down());
    assert!(matches!(
        b.start_event_watcher(|_| {}),
        Err(Error::ShutDown)
    ));
}

// TestNonRacyShutdown: events recorded concurrently, then shutdown.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recording_concurrently_then_shutting_down_is_safe() {
    let b = test_broadcaster();
    let handled = Arc::new(AtomicUsize::new(0));
    let count = handled.clone();
    b.start_event_watcher(move |_| {
        count.fetch_add(1, Ordering::SeqCst);
    })
    .unwrap();
    let (recorder, _) = test_recorder(&b);
    let tasks: Vec<_> = (0..100)
        .map(|_| {
            let r = recorder.clone();
            tokio::spawn(async move {
                r.event(
                    &ObjectReference::default(),
                    EventType::Normal,
                    "Started",
                    "blah",
                );
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    b.shutdown().await;
    assert_eq!(handled.load(Ordering::SeqCst), 100);
}

#[tokio::test(start_paused = true)]
async fn shutdown_cuts_retry_sleeps_short() {
    let b = EventBroadcaster::new();
    let attempts = Arc::new(AtomicU32::new(0));
    let seen = attempts.clone();
    let (tried_tx, mut tried) = tokio::sync::mpsc::unbounded_channel();
    let sink = FnSink {
        create: Box::new(move |_| {
            seen.fetch_add(1, Ordering::SeqCst);
            let _ = tried_tx.send(());
            Err(SinkError::Failed("connection refused".into()))
        }),
        ..Default::default()
    };
    let w = b.start_recording_to_sink(sink).unwrap();
    let recorder = b.new_recorder(EventSource::new("eventTest"));
    recorder.event(
        &object_reference(&pod("u", Some("ns"))),
        EventType::Normal,
        "Started",
        "x",
    );
    tried.recv().await.unwrap();
    let before = tokio::time::Instant::now();
    b.shutdown().await;
    assert!(w.is_stopped());
    assert!(attempts.load(Ordering::SeqCst) <= 2);
    assert!(before.elapsed() < DEFAULT_SLEEP_DURATION);
}

#[test]
fn starting_a_watcher_outside_a_runtime_is_an_error() {
    let b = EventBroadcaster::new();
    let err = b.start_logging(Level::INFO).unwrap_err();
    assert!(matches!(err, Error::NoRuntime(_)), "{err}");
    // Recording needs no runtime and does not block.
    b.new_recorder(EventSource::new("x")).event(
        &ObjectReference::default(),
        EventType::Normal,
        "R",
        "m",
    );
}

#[test]
fn invalid_options_are_named() {
    let err = EventBroadcaster::with_options(BroadcasterOptions {
        queue_length: 0,
        ..Default::default()
    })
    .unwrap_err();
    assert!(err.to_string().contains("queue_length"), "{err}");
    let err = EventBroadcaster::with_options(BroadcasterOptions {
        correlator: CorrelatorOptions {
            qps: -1.0,
            ..Default::default()
        },
        ..Default::default()
    })
    .unwrap_err();
    assert!(err.to_string().contains("qps"), "{err}");
}

#[tokio::test]
async fn annotated_events_carry_their_annotations() {
    let b = test_broadcaster();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    b.start_event_watcher(move |e| {
        let _ = tx.send(e.clone());
    })
    .unwrap();
    let recorder = b.new_recorder(EventSource::new("eventTest").with_host("node-1"));
    recorder.annotated_event(
        &object_reference(&pod("u", Some("ns"))),
        [("key".to_owned(), "value".to_owned())].into(),
        EventType::Warning,
        "Odd",
        "odd thing",
    );
    let e = rx.recv().await.unwrap();
    assert_eq!(e.metadata.annotations.unwrap()["key"], "value");
    assert_eq!(e.type_.as_deref(), Some("Warning"));
    assert_eq!(e.reporting_instance.as_deref(), Some("node-1"));
    assert_eq!(recorder.source().host, "node-1");
    b.shutdown().await;
}

#[tokio::test]
async fn writes_through_the_api_sink_to_the_fake() {
    use kctrl_fake::FakeApi;
    let fake = FakeApi::new();
    let b = EventBroadcaster::new();
    b.start_recording_to_sink(crate::ApiEventSink::new(fake.client()))
        .unwrap();
    let (recorder, clock) = test_recorder(&b);
    let object = object_reference(&pod("u1", Some("ns")));
    for _ in 0..4 {
        clock.step(Duration::from_secs(1));
        recorder.event(&object, EventType::Normal, "Started", "started container");
    }
    b.shutdown().await;
    let events: Vec<Event> = fake.objects();
    assert_eq!(events.len(), 1);
    let e = &events[0];
    assert_eq!(e.count, Some(4));
    assert_eq!(e.metadata.namespace.as_deref(), Some("ns"));
    assert_eq!(e.involved_object, object);
    assert!(e.first_timestamp < e.last_timestamp);
}

//! The writer's retry policy (upstream's `TestWriteEventError`, `TestUpdateExpiredEvent`,
//! `TestCancelEvent`) and [`ApiEventSink`] against the fake API server.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    ObjectMeta, Status, StatusCause, StatusDetails, Time,
};
use kctrl_client::{Api, ApiError, DeleteParams};
use kctrl_fake::{FakeApi, Reaction, errors};

use super::*;
use crate::IntervalClock;
use crate::correlator::CorrelatorOptions;
use crate::test_support::FnSink;

fn correlator() -> EventCorrelator {
    EventCorrelator::with_options(CorrelatorOptions {
        clock: Some(Arc::new(IntervalClock::new(
            Timestamp::now(),
            Duration::from_secs(1),
        ))),
        ..Default::default()
    })
    .unwrap()
}

fn writer<S: EventSink>(sink: S, correlator: EventCorrelator) -> SinkWriter<S> {
    SinkWriter {
        sink,
        correlator,
        sleep: DEFAULT_SLEEP_DURATION,
        cancel: CancellationToken::new(),
    }
}

fn status_error(code: u16, reason: &str) -> SinkError {
    SinkError::Rejected(Box::new(ApiError::from_status(
        code,
        Status {
            code: Some(i32::from(code)),
            reason: Some(reason.into()),
            ..Default::default()
        },
    )))
}

// TestWriteEventError: how often each kind of failure is tried.
#[tokio::test(start_paused = true)]
async fn write_errors_are_retried_by_kind() {
    type MakeErr = fn() -> SinkError;
    let cases: [(&str, u32, u32, MakeErr); 5] = [
        ("give up on a request that cannot be built", 1000, 1, || {
            SinkError::InvalidRequest("bad".into())
        }),
        ("give up on a status error", 1000, 1, || {
            status_error(500, "InternalError")
        }),
        ("retry an unexpected answer", 1000, 12, || {
            SinkError::Failed("unexpected object".into())
        }),
        ("retry a transport error", 1000, 12, || {
            SinkError::Failed("a weird error".into())
        }),
        ("succeed eventually", 2, 2, || {
            SinkError::Failed("a weird error".into())
        }),
    ];
    // One correlator for all cases, as upstream: the event has no count, so it is always
    // created, never patched.
    let mut correlator = Some(correlator());
    for (what, times_to_fail, wanted, make_err) in cases {
        let attempts = Arc::new(AtomicU32::new(0));
        let seen = attempts.clone();
        let sink = FnSink {
            create: Box::new(move |e| {
                let n = seen.fetch_add(1, Ordering::SeqCst) + 1;
                if n < times_to_fail {
                    Err(make_err())
                } else {
                    Ok(e.clone())
                }
            }),
            ..Default::default()
        };
        let mut w = writer(sink, correlator.take().unwrap());
        let started = tokio::time::Instant::now();
        w.record(&Event::default()).await;
        assert_eq!(attempts.load(Ordering::SeqCst), wanted, "{what}");
        let slept = started.elapsed();
        if wanted == 12 {
            // A random first pause below 10 s, then ten pauses of 10 s.
            assert!(
                slept >= Duration::from_secs(100) && slept < Duration::from_secs(110),
                "{what}: slept {slept:?}"
            );
        }
        if wanted == 1 {
            assert_eq!(slept, Duration::ZERO, "{what}");
        }
        correlator = Some(w.correlator);
    }
}

// TestUpdateExpiredEvent: a repeat whose event is gone is created again, without its
// resourceVersion.
#[tokio::test(start_paused = true)]
async fn patch_of_a_missing_event_falls_back_to_create() {
    let created = Arc::new(std::sync::Mutex::new(None::<Event>));
    let keep = created.clone();
    let sink = FnSink {
        patch: Box::new(|_, _| Err(status_error(404, "NotFound"))),
        create: Box::new(move |e| {
            *keep.lock().unwrap() = Some(e.clone());
            Ok(e.clone())
        }),
    };
    let mut w = writer(sink, correlator());
    let event = Event {
        metadata: ObjectMeta {
            resource_version: Some("updated-resource-version".into()),
            ..Default::default()
        },
        count: Some(2),
        ..Default::default()
    };
    w.record(&event).await;
    let created = created
        .lock()
        .unwrap()
        .clone()
        .expect("event was not created");
    assert_eq!(created.metadata.resource_version, None);
    assert_eq!(created.count, Some(2));
}

#[tokio::test(start_paused = true)]
async fn patch_rejected_otherwise_is_not_followed_by_create() {
    let creates = Arc::new(AtomicU32::new(0));
    let patches = Arc::new(AtomicU32::new(0));
    let (c, p) = (creates.clone(), patches.clone());
    let sink = FnSink {
        patch: Box::new(move |_, _| {
            p.fetch_add(1, Ordering::SeqCst);
            Err(status_error(422, "Invalid"))
        }),
        create: Box::new(move |e| {
            c.fetch_add(1, Ordering::SeqCst);
            Ok(e.clone())
        }),
    };
    let mut w = writer(sink, correlator());
    w.record(&Event {
        count: Some(3),
        ..Default::default()
    })
    .await;
    assert_eq!(patches.load(Ordering::SeqCst), 1);
    assert_eq!(creates.load(Ordering::SeqCst), 0);
}

// TestCancelEvent: after shutdown an event gets exactly one try.
#[tokio::test(start_paused = true)]
async fn after_cancellation_an_event_is_tried_once() {
    let attempts = Arc::new(AtomicU32::new(0));
    let seen = attempts.clone();
    let sink = FnSink {
        create: Box::new(move |_| {
            seen.fetch_add(1, Ordering::SeqCst);
            Err(SinkError::Failed("unexpected object".into()))
        }),
        ..Default::default()
    };
    let mut w = writer(sink, correlator());
    w.cancel.cancel();
    w.record(&Event::default()).await;
    assert_eq!(attempts.load(Ordering::SeqCst), 1);
}

#[tokio::test(start_paused = true)]
async fn already_exists_and_namespace_terminating_are_not_retried() {
    let terminating = SinkError::Rejected(Box::new(ApiError::from_status(
        403,
        Status {
            code: Some(403),
            reason: Some("Forbidden".into()),
            details: Some(StatusDetails {
                causes: Some(vec![StatusCause {
                    reason: Some(NAMESPACE_TERMINATING_CAUSE.into()),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        },
    )));
    assert!(terminating.is_namespace_terminating());
    assert!(!terminating.is_retryable());
    assert!(status_error(409, "AlreadyExists").is_already_exists());
    for err in [terminating, status_error(409, "AlreadyExists")] {
        let attempts = Arc::new(AtomicU32::new(0));
        let seen = attempts.clone();
        let err = Arc::new(std::sync::Mutex::new(Some(err)));
        let sink = FnSink {
            create: Box::new(move |e| {
                seen.fetch_add(1, Ordering::SeqCst);
                match err.lock().unwrap().take() {
                    Some(err) => Err(err),
                    None => Ok(e.clone()),
                }
            }),
            ..Default::default()
        };
        let mut w = writer(sink, correlator());
        w.record(&Event::default()).await;
        assert_eq!(attempts.load(Ordering::SeqCst), 1);
    }
}

#[test]
fn client_errors_are_classified() {
    let api: SinkError = kctrl_client::Error::from(ApiError::from_status(
        404,
        Status {
            reason: Some("NotFound".into()),
            ..Default::default()
        },
    ))
    .into();
    assert!(api.is_not_found());
    assert!(!api.is_retryable());
    let retried: SinkError = kctrl_client::Error::Retried {
        attempts: 3,
        last: Box::new(errors::internal_error("etcd")),
        previous: None,
    }
    .into();
    assert!(matches!(retried, SinkError::Rejected(_)), "{retried:?}");
    let invalid: SinkError = kctrl_client::Error::InvalidRequest("no namespace".into()).into();
    assert!(matches!(invalid, SinkError::InvalidRequest(_)));
    let transport: SinkError = kctrl_client::Error::Transport {
        verb: "POST".into(),
        url: "https://127.0.0.1:6443/api/v1/namespaces/ns/events".into(),
        source: "connection refused".into(),
    }
    .into();
    assert!(transport.is_retryable());
    assert!(
        transport.to_string().contains("connection refused"),
        "{transport}"
    );
}

fn pod_event(name: &str, message: &str) -> Event {
    let now = Timestamp::from_second(1_700_000_000).unwrap();
    Event {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("ns".into()),
            ..Default::default()
        },
        involved_object: k8s_openapi::api::core::v1::ObjectReference {
            kind: Some("Pod".into()),
            name: Some("p".into()),
            namespace: Some("ns".into()),
            ..Default::default()
        },
        reason: Some("Started".into()),
        message: Some(message.into()),
        type_: Some("Normal".into()),
        count: Some(1),
        first_timestamp: Some(Time(now)),
        last_timestamp: Some(Time(now)),
        ..Default::default()
    }
}

#[tokio::test(start_paused = true)]
async fn api_sink_creates_then_patches_repeats_on_the_fake() {
    let fake = FakeApi::new();
    let mut w = writer(ApiEventSink::new(fake.client()), correlator());
    for i in 0..3 {
        // Each occurrence gets a fresh name, as the recorder makes one per event.
        w.record(&pod_event(&format!("p.{i}"), "hello")).await;
    }
    let stored: Vec<Event> = fake.objects();
    assert_eq!(stored.len(), 1);
    assert_eq!(stored[0].metadata.name.as_deref(), Some("p.0"));
    assert_eq!(stored[0].count, Some(3));
    let verbs: Vec<_> = fake.actions().iter().map(|a| a.verb()).collect();
    assert_eq!(verbs, ["create", "patch", "patch"]);
    let patch = fake.actions()[2].patch().cloned().expect("a patch");
    assert_eq!(
        patch.content_type(),
        "application/strategic-merge-patch+json"
    );
    let keys: Vec<_> = patch.body().as_object().unwrap().keys().cloned().collect();
    assert_eq!(keys, ["count", "lastTimestamp", "message"]);
}

#[tokio::test(start_paused = true)]
async fn api_sink_recreates_a_deleted_event() {
    let fake = FakeApi::new();
    let mut w = writer(ApiEventSink::new(fake.client()), correlator());
    w.record(&pod_event("p.0", "hello")).await;
    Api::<Event>::namespaced(fake.client(), "ns")
        .delete("p.0", &DeleteParams::default())
        .await
        .unwrap();
    w.record(&pod_event("p.1", "hello")).await;
    let verbs: Vec<_> = fake.actions().iter().map(|a| a.verb()).collect();
    assert_eq!(verbs, ["create", "delete", "patch", "create"]);
    let stored: Vec<Event> = fake.objects();
    assert_eq!(stored.len(), 1);
    assert_eq!(stored[0].metadata.name.as_deref(), Some("p.0"));
    assert_eq!(stored[0].count, Some(2));
    // The state was updated from the re-created event: the next repeat patches it.
    w.record(&pod_event("p.2", "hello")).await;
    assert_eq!(fake.objects::<Event>()[0].count, Some(3));
}

#[tokio::test(start_paused = true)]
async fn api_sink_retries_transport_errors_and_not_server_errors() {
    let fake = FakeApi::new();
    let failures = Arc::new(AtomicU32::new(0));
    let seen = failures.clone();
    fake.prepend_reactor("create", "events", move |a| match a.name().as_deref() {
        Some("flaky.0") if seen.fetch_add(1, Ordering::SeqCst) < 2 => {
            Reaction::Error(kctrl_client::Error::Transport {
                verb: "POST".into(),
                url: "https://127.0.0.1/api/v1/namespaces/ns/events".into(),
                source: "connection reset".into(),
            })
        }
        Some("broken.0") => Reaction::Error(errors::internal_error("etcd is down")),
        _ => Reaction::Continue,
    });
    let mut w = writer(ApiEventSink::new(fake.client()), correlator());
    let started = tokio::time::Instant::now();
    w.record(&pod_event("flaky.0", "one")).await;
    assert!(
        started.elapsed() >= Duration::from_secs(10),
        "second pause is 10 s"
    );
    let mut broken = pod_event("broken.0", "two");
    broken.involved_object.name = Some("q".into());
    w.record(&broken).await;
    let creates: Vec<_> = fake
        .actions()
        .iter()
        .filter(|a| a.verb() == "create")
        .map(|a| a.name().unwrap_or_default())
        .collect();
    assert_eq!(creates, ["flaky.0", "flaky.0", "flaky.0", "broken.0"]);
    let names: Vec<_> = fake
        .objects::<Event>()
        .into_iter()
        .filter_map(|e| e.metadata.name)
        .collect();
    assert_eq!(names, ["flaky.0"]);
}

#[tokio::test]
async fn api_sink_names_what_is_missing() {
    let sink = ApiEventSink::new(FakeApi::new().client());
    let mut e = pod_event("p.0", "x");
    e.metadata.namespace = None;
    let err = sink.create(&e).await.unwrap_err();
    assert!(matches!(err, SinkError::InvalidRequest(_)), "{err:?}");
    assert!(err.to_string().contains("metadata.namespace"), "{err}");
    let mut e = pod_event("p.0", "x");
    e.metadata.name = None;
    let err = sink.patch(&e, &serde_json::json!({})).await.unwrap_err();
    assert!(err.to_string().contains("metadata.name"), "{err}");
}

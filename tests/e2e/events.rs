//! kctrl-events against a real kube-apiserver: Events written through [`ApiEventSink`] are
//! stored with the fields the recorder set; identical events become one Event whose count the
//! writer patches; more than ten similar events about one object are folded into a
//! "(combined from similar events)" aggregate; a repeat of a deleted Event re-creates it.

use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Event, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kctrl_client::{Api, Client, DeleteParams, ListParams, PostParams};
use kctrl_e2e::{TestNamespace, require_cluster};
use kctrl_events::{
    ApiEventSink, EventBroadcaster, EventRecorder, EventSource, EventType, Recorder,
    object_reference,
};

const COMPONENT: &str = "kctrl-e2e-events";
const HOST: &str = "e2e-host";

/// A ConfigMap to hang events on; returns its reference (with uid and resourceVersion).
async fn subject(client: &Client, ns: &str, name: &str) -> ObjectReference {
    let cm = ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        ..Default::default()
    };
    let created = Api::<ConfigMap>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &cm)
        .await
        .unwrap_or_else(|e| panic!("creating configmap {ns}/{name}: {e}"));
    object_reference(&created)
}

fn start(client: &Client) -> (EventBroadcaster, Recorder) {
    let broadcaster = EventBroadcaster::new();
    broadcaster
        .start_recording_to_sink(ApiEventSink::new(client.clone()))
        .expect("starting the sink");
    let recorder = broadcaster.new_recorder(EventSource::new(COMPONENT).with_host(HOST));
    (broadcaster, recorder)
}

/// Our events in `ns` about the object named `about`.
async fn events_about(client: &Client, ns: &str, about: &str) -> Vec<Event> {
    let list = Api::<Event>::namespaced(client.clone(), ns)
        .list(&ListParams {
            field_selector: Some(format!("involvedObject.name={about}")),
            ..Default::default()
        })
        .await
        .unwrap_or_else(|e| panic!("listing events in {ns}: {e}"));
    list.items
        .into_iter()
        .filter(|e| e.source.as_ref().and_then(|s| s.component.as_deref()) == Some(COMPONENT))
        .collect()
}

/// Polls until `done` holds for the events about `about`, or fails after 30 s.
async fn wait_for_events(
    client: &Client,
    ns: &str,
    about: &str,
    what: &str,
    done: impl Fn(&[Event]) -> bool,
) -> Vec<Event> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let events = events_about(client, ns, about).await;
        if done(&events) {
            return events;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}; events now: {events:#?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn event_sink_stores_the_recorders_fields() {
    let cluster = require_cluster!();
    let client = cluster.admin();
    let ns = TestNamespace::create(&client, "events-fields").await;
    let object = subject(&client, &ns.name, "settings").await;
    let (broadcaster, recorder) = start(&client);

    recorder.event(
        &object,
        EventType::Warning,
        "Checked",
        "the settings look odd",
    );

    let events =
        wait_for_events(&client, &ns.name, "settings", "one event", |e| e.len() == 1).await;
    let e = &events[0];
    assert_eq!(e.type_.as_deref(), Some("Warning"));
    assert_eq!(e.reason.as_deref(), Some("Checked"));
    assert_eq!(e.message.as_deref(), Some("the settings look odd"));
    assert_eq!(e.count, Some(1));
    assert_eq!(e.metadata.namespace.as_deref(), Some(ns.name.as_str()));
    let name = e.metadata.name.clone().unwrap_or_default();
    assert!(name.starts_with("settings."), "{name}");
    let involved = &e.involved_object;
    assert_eq!(involved.kind.as_deref(), Some("ConfigMap"));
    assert_eq!(involved.api_version.as_deref(), Some("v1"));
    assert_eq!(involved.name.as_deref(), Some("settings"));
    assert_eq!(involved.namespace.as_deref(), Some(ns.name.as_str()));
    assert_eq!(involved.uid, object.uid);
    let source = e.source.clone().unwrap_or_default();
    assert_eq!(source.component.as_deref(), Some(COMPONENT));
    assert_eq!(source.host.as_deref(), Some(HOST));
    assert_eq!(e.reporting_component.as_deref(), Some(COMPONENT));
    assert_eq!(e.reporting_instance.as_deref(), Some(HOST));
    assert!(e.first_timestamp.is_some());
    assert_eq!(e.first_timestamp, e.last_timestamp);

    broadcaster.shutdown().await;
    ns.delete().await;
}

#[tokio::test]
async fn event_sink_patches_the_count_of_identical_events() {
    let cluster = require_cluster!();
    let client = cluster.admin();
    let ns = TestNamespace::create(&client, "events-count").await;
    let object = subject(&client, &ns.name, "counted").await;
    let (broadcaster, recorder) = start(&client);

    const N: i32 = 8;
    for _ in 0..N {
        recorder.event(&object, EventType::Normal, "Repeated", "same thing again");
    }
    let events = wait_for_events(&client, &ns.name, "counted", "count to reach N", |e| {
        e.iter().any(|e| e.count == Some(N))
    })
    .await;
    assert_eq!(events.len(), 1, "repeats patch one Event: {events:#?}");
    assert_eq!(events[0].message.as_deref(), Some("same thing again"));
    assert!(events[0].first_timestamp <= events[0].last_timestamp);

    // A repeat after the Event was deleted creates it again, with the next count.
    let name = events[0].metadata.name.clone().unwrap_or_default();
    Api::<Event>::namespaced(client.clone(), &ns.name)
        .delete(&name, &DeleteParams::default())
        .await
        .unwrap_or_else(|e| panic!("deleting event {name}: {e}"));
    recorder.event(&object, EventType::Normal, "Repeated", "same thing again");
    let events = wait_for_events(&client, &ns.name, "counted", "the re-created event", |e| {
        e.len() == 1
    })
    .await;
    assert_eq!(events[0].metadata.name.as_deref(), Some(name.as_str()));
    assert_eq!(events[0].count, Some(N + 1));

    broadcaster.shutdown().await;
    ns.delete().await;
}

#[tokio::test]
async fn event_sink_combines_many_similar_events() {
    let cluster = require_cluster!();
    let client = cluster.admin();
    let ns = TestNamespace::create(&client, "events-aggregate").await;
    let object = subject(&client, &ns.name, "flapping").await;
    let (broadcaster, recorder) = start(&client);

    // Twelve messages for one object and reason: the first nine are stored as they are; from
    // the tenth on they fold into one aggregate event, counted.
    for i in 0..12 {
        recorder.event(
            &object,
            EventType::Warning,
            "Flapping",
            &format!("state changed to {i}"),
        );
    }
    let combined = |e: &Event| {
        e.message
            .as_deref()
            .is_some_and(|m| m.starts_with("(combined from similar events): "))
    };
    let events = wait_for_events(&client, &ns.name, "flapping", "the aggregate", |es| {
        es.iter().any(|e| combined(e) && e.count == Some(3))
    })
    .await;
    let (aggregates, singles): (Vec<_>, Vec<_>) = events.iter().partition(|e| combined(e));
    assert_eq!(aggregates.len(), 1, "{events:#?}");
    let aggregate = aggregates[0];
    assert_eq!(
        aggregate.message.as_deref(),
        Some("(combined from similar events): state changed to 11")
    );
    assert_eq!(aggregate.reason.as_deref(), Some("Flapping"));
    assert_eq!(aggregate.type_.as_deref(), Some("Warning"));
    assert_eq!(aggregate.involved_object.uid, object.uid);
    let mut messages: Vec<_> = singles.iter().filter_map(|e| e.message.clone()).collect();
    messages.sort();
    let expected: Vec<_> = (0..9).map(|i| format!("state changed to {i}")).collect();
    assert_eq!(messages, expected);

    broadcaster.shutdown().await;
    ns.delete().await;
}

//! Ports of client-go's `events_cache_test.go`.

use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Event;

use super::*;
use crate::test_support::{make_event, object_ref, validate_event, with_count};
use crate::{FakeClock, IntervalClock};

fn correlate(c: &mut EventCorrelator, e: &Event) -> Correlation {
    c.correlate(e)
}

// TestEventAggregatorByReasonFunc.
#[test]
fn aggregator_groups_events_that_differ_only_by_message() {
    let e1 = make_event(
        "end-of-world",
        "it was fun",
        object_ref("Pod", "pod1", "other"),
    );
    let e2 = make_event(
        "end-of-world",
        "it was awful",
        object_ref("Pod", "pod1", "other"),
    );
    let e3 = make_event(
        "nevermind",
        "it was a bug",
        object_ref("Pod", "pod1", "other"),
    );
    let (agg1, local1) = aggregate_by_reason(&e1);
    let (agg2, local2) = aggregate_by_reason(&e2);
    let (agg3, _) = aggregate_by_reason(&e3);
    assert_eq!(agg1, agg2);
    assert_ne!(local1, local2);
    assert_ne!(agg1, agg3);
}

// TestEventAggregatorByReasonMessageFunc.
#[test]
fn aggregate_message_has_the_upstream_prefix() {
    let e = make_event(
        "end-of-world",
        "it was fun",
        object_ref("Pod", "pod1", "other"),
    );
    assert_eq!(
        aggregate_by_reason_message(&e),
        "(combined from similar events): it was fun"
    );
}

fn similar_events(n: usize, template: &Event, prefix: &str) -> Vec<Event> {
    (0..n)
        .map(|i| {
            let mut e = template.clone();
            let msg = e.message.clone().unwrap_or_default();
            e.message = Some(format!("{prefix}-{i}-{msg}"));
            e
        })
        .collect()
}

fn unique_events(n: usize) -> Vec<Event> {
    (0..n)
        .map(|i| {
            make_event(
                &format!("reason-{i}"),
                &format!("message-{i}"),
                object_ref("Pod", &format!("pod-{i}"), &format!("ns-{i}")),
            )
        })
        .collect()
}

struct Scenario {
    name: &'static str,
    previous: Vec<Event>,
    new: Event,
    expected: Option<Event>,
    interval_seconds: u64,
}

// TestEventCorrelator: its nine scenarios.
#[test]
fn correlator_scenarios() {
    let first = make_event("first", "i am first", object_ref("Pod", "my-pod", "my-ns"));
    let duplicate = make_event(
        "duplicate",
        "me again",
        object_ref("Pod", "my-pod", "my-ns"),
    );
    let unique = make_event("unique", "snowflake", object_ref("Pod", "my-pod", "my-ns"));
    let mut similar = make_event(
        "similar",
        "similar message",
        object_ref("Pod", "my-pod", "my-ns"),
    );
    similar.involved_object.field_path = Some("spec.containers{container1}".into());
    let aggregate = make_event(
        "similar",
        &aggregate_by_reason_message(&similar),
        similar.involved_object.clone(),
    );
    let mut other_container = similar.clone();
    other_container.involved_object.field_path = Some("spec.containers{container2}".into());
    let prefix = similar.message.clone().unwrap_or_default();
    let max = DEFAULT_AGGREGATE_MAX_EVENTS;

    let scenarios = vec![
        Scenario {
            name: "create-a-single-event",
            previous: vec![],
            new: first.clone(),
            expected: Some(with_count(first.clone(), 1)),
            interval_seconds: 5,
        },
        Scenario {
            name: "the-same-event-should-just-count",
            previous: vec![duplicate.clone()],
            new: duplicate.clone(),
            expected: Some(with_count(duplicate.clone(), 2)),
            interval_seconds: 5,
        },
        Scenario {
            name: "the-same-event-should-just-count-even-if-more-than-aggregate",
            previous: vec![duplicate.clone(); max],
            new: duplicate.clone(),
            expected: Some(with_count(duplicate.clone(), max as i32 + 1)),
            interval_seconds: 30,
        },
        Scenario {
            name: "the-same-event-is-spam-if-happens-too-frequently",
            previous: vec![duplicate.clone(); DEFAULT_SPAM_BURST as usize + 1],
            new: duplicate.clone(),
            expected: None,
            interval_seconds: 1,
        },
        Scenario {
            name: "create-many-unique-events",
            previous: unique_events(30),
            new: unique.clone(),
            expected: Some(with_count(unique.clone(), 1)),
            interval_seconds: 5,
        },
        Scenario {
            name: "similar-events-should-aggregate-event",
            previous: similar_events(max - 1, &similar, &prefix),
            new: similar.clone(),
            expected: Some(with_count(aggregate.clone(), 1)),
            interval_seconds: 5,
        },
        Scenario {
            name: "similar-events-many-times-should-count-the-aggregate",
            previous: similar_events(max, &similar, &prefix),
            new: similar.clone(),
            expected: Some(with_count(aggregate.clone(), 2)),
            interval_seconds: 5,
        },
        Scenario {
            name: "events-from-different-containers-do-not-aggregate",
            previous: vec![other_container.clone()],
            new: similar.clone(),
            expected: Some(with_count(similar.clone(), 1)),
            interval_seconds: 5,
        },
        Scenario {
            name: "similar-events-whose-interval-is-greater-than-aggregate-interval-do-not-aggregate",
            previous: similar_events(max - 1, &similar, &prefix),
            new: similar.clone(),
            expected: Some(with_count(similar.clone(), 1)),
            interval_seconds: DEFAULT_AGGREGATE_INTERVAL.as_secs(),
        },
    ];

    for sc in scenarios {
        let clock = Arc::new(IntervalClock::new(
            Timestamp::now(),
            Duration::from_secs(sc.interval_seconds),
        ));
        let mut c = EventCorrelator::with_options(CorrelatorOptions {
            clock: Some(clock.clone()),
            ..Default::default()
        })
        .unwrap();
        for mut e in sc.previous {
            let now = Time(clock.now());
            e.first_timestamp = Some(now.clone());
            e.last_timestamp = Some(now);
            if let Correlation::Write { event, .. } = correlate(&mut c, &e) {
                c.update_state(&event);
            }
        }
        let mut new = sc.new;
        let now = Time(clock.now());
        new.first_timestamp = Some(now.clone());
        new.last_timestamp = Some(now);
        match (correlate(&mut c, &new), sc.expected) {
            (Correlation::Skip, None) => {}
            (Correlation::Write { event, .. }, Some(expected)) => {
                validate_event(sc.name, &event, &expected);
            }
            (got, expected) => panic!("{}: got {got:?}, expected {expected:?}", sc.name),
        }
    }
}

// TestEventSpamFilter.
#[test]
fn spam_filter_with_default_and_custom_keys() {
    let by_object_and_reason: SpamKeyFn = Arc::new(|e: &Event| {
        let o = &e.involved_object;
        let src = e.source.clone().unwrap_or_default();
        [
            src.component.unwrap_or_default(),
            src.host.unwrap_or_default(),
            o.kind.clone().unwrap_or_default(),
            o.namespace.clone().unwrap_or_default(),
            o.name.clone().unwrap_or_default(),
            o.uid.clone().unwrap_or_default(),
            o.api_version.clone().unwrap_or_default(),
            e.reason.clone().unwrap_or_default(),
        ]
        .join("/")
    });
    let original = make_event(
        "original",
        "i am first",
        object_ref("Pod", "my-pod", "my-ns"),
    );
    let different_reason = make_event(
        "duplicate",
        "me again",
        object_ref("Pod", "my-pod", "my-ns"),
    );
    let spam = make_event("original", "me again", object_ref("Pod", "my-pod", "my-ns"));
    let cases: Vec<(&str, Event, bool, Option<SpamKeyFn>)> = vec![
        (
            "same object is spam with the default key",
            different_reason.clone(),
            true,
            None,
        ),
        (
            "different reason is not spam with a reason-aware key",
            different_reason.clone(),
            false,
            Some(by_object_and_reason.clone()),
        ),
        (
            "same reason, other message is spam with a reason-aware key",
            spam,
            true,
            Some(by_object_and_reason),
        ),
    ];
    for (what, new, expect_skip, key_fn) in cases {
        let clock = Arc::new(IntervalClock::new(Timestamp::now(), Duration::from_secs(1)));
        let mut c = EventCorrelator::with_options(CorrelatorOptions {
            clock: Some(clock),
            spam_key_fn: key_fn,
            burst_size: 1,
            ..Default::default()
        })
        .unwrap();
        if let Correlation::Write { event, .. } = c.correlate(&original) {
            c.update_state(&event);
        }
        match c.correlate(&new) {
            Correlation::Skip => assert!(expect_skip, "{what}: skipped"),
            Correlation::Write { event, .. } => {
                assert!(!expect_skip, "{what}: not skipped");
                validate_event(what, &event, &new);
            }
        }
    }
}

#[test]
fn spam_bucket_refills_one_token_per_300_seconds() {
    let clock = Arc::new(FakeClock::new(Timestamp::now()));
    let mut c = EventCorrelator::with_options(CorrelatorOptions {
        clock: Some(clock.clone()),
        ..Default::default()
    })
    .unwrap();
    let base = make_event("r", "m", object_ref("Pod", "p", "ns"));
    // 25 distinct messages (different reasons avoid aggregation) pass, the 26th is spam.
    for i in 0..25 {
        let mut e = base.clone();
        e.reason = Some(format!("r{i}"));
        assert!(
            matches!(c.correlate(&e), Correlation::Write { .. }),
            "event {i}"
        );
    }
    assert_eq!(c.correlate(&base), Correlation::Skip);
    clock.step(Duration::from_secs(299));
    assert_eq!(c.correlate(&base), Correlation::Skip);
    clock.step(Duration::from_secs(1));
    assert!(matches!(c.correlate(&base), Correlation::Write { .. }));
    assert_eq!(c.correlate(&base), Correlation::Skip);
}

#[test]
fn repeats_carry_a_patch_of_count_last_timestamp_and_message() {
    let clock = Arc::new(FakeClock::new(
        Timestamp::from_second(1_700_000_000).unwrap(),
    ));
    let mut c = EventCorrelator::with_options(CorrelatorOptions {
        clock: Some(clock.clone()),
        ..Default::default()
    })
    .unwrap();
    let mut e = make_event("r", "hello", object_ref("Pod", "p", "ns"));
    e.metadata.name = Some("p.1".into());
    e.metadata.namespace = Some("ns".into());
    let Correlation::Write { event, patch } = c.correlate(&e) else {
        panic!("first event skipped")
    };
    assert_eq!(patch, None);
    let mut stored = event.clone();
    stored.metadata.resource_version = Some("42".into());
    c.update_state(&stored);

    let mut again = e.clone();
    again.metadata.name = Some("p.2".into());
    let later = Timestamp::from_second(1_700_000_060).unwrap();
    again.last_timestamp = Some(Time(later));
    let Correlation::Write { event, patch } = c.correlate(&again) else {
        panic!("repeat skipped")
    };
    assert_eq!(event.metadata.name.as_deref(), Some("p.1"));
    assert_eq!(event.metadata.resource_version.as_deref(), Some("42"));
    assert_eq!(event.first_timestamp, e.first_timestamp);
    assert_eq!(event.count, Some(2));
    assert_eq!(
        patch,
        Some(serde_json::json!({
            "count": 2,
            "lastTimestamp": "2023-11-14T22:14:20Z",
            "message": "hello",
        }))
    );
}

#[test]
fn aggregation_folds_new_messages_but_counts_known_ones() {
    let clock = Arc::new(IntervalClock::new(Timestamp::now(), Duration::from_secs(1)));
    let mut c = EventCorrelator::with_options(CorrelatorOptions {
        clock: Some(clock),
        burst_size: 1000,
        ..Default::default()
    })
    .unwrap();
    let base = make_event("Flap", "m", object_ref("Pod", "p", "ns"));
    let msg = |i: usize| {
        let mut e = base.clone();
        e.message = Some(format!("message {i}"));
        e
    };
    let mut written = Vec::new();
    for i in 0..12 {
        match c.correlate(&msg(i)) {
            Correlation::Write { event, .. } => {
                c.update_state(&event);
                written.push(event);
            }
            Correlation::Skip => panic!("skipped {i}"),
        }
    }
    let messages: Vec<_> = written.iter().map(|e| e.message.clone().unwrap()).collect();
    assert_eq!(
        messages[..9],
        (0..9).map(|i| format!("message {i}")).collect::<Vec<_>>()[..]
    );
    for (i, e) in written.iter().enumerate().skip(9) {
        assert_eq!(
            e.message.as_deref(),
            Some(format!("(combined from similar events): message {i}").as_str())
        );
        assert_eq!(e.count, Some(i as i32 - 8), "aggregate count at {i}");
    }
}

#[test]
fn aggregation_forgets_a_random_known_message_like_upstreams_pop_any() {
    // With max_events = 2: "a" goes out alone, "b" reaches the threshold and is folded, and
    // one of the two keys is forgotten at random. A repeated "a" then goes out on its own
    // event if "a" was kept, or is folded if it was forgotten: over many groups, both.
    let (mut alone, mut folded) = (0, 0);
    for _ in 0..200 {
        let mut c = EventCorrelator::with_options(CorrelatorOptions {
            burst_size: 1000,
            max_events: 2,
            ..Default::default()
        })
        .unwrap();
        let base = make_event("Flap", "a", object_ref("Pod", "p", "ns"));
        let with = |m: &str| {
            let mut e = base.clone();
            e.message = Some(m.to_owned());
            e
        };
        let mut send = |m: &str| match c.correlate(&with(m)) {
            Correlation::Write { event, .. } => {
                c.update_state(&event);
                event.message.unwrap_or_default()
            }
            Correlation::Skip => panic!("skipped {m}"),
        };
        assert_eq!(send("a"), "a");
        assert_eq!(send("b"), "(combined from similar events): b");
        match send("a").as_str() {
            "a" => alone += 1,
            "(combined from similar events): a" => folded += 1,
            other => panic!("unexpected {other}"),
        }
    }
    assert!(alone > 0 && folded > 0, "alone {alone}, folded {folded}");
}

#[test]
fn invalid_qps_is_rejected_with_the_option_named() {
    for qps in [-1.0, f64::NAN, f64::INFINITY] {
        let err = EventCorrelator::with_options(CorrelatorOptions {
            qps,
            ..Default::default()
        })
        .unwrap_err();
        assert!(
            matches!(
                err,
                Error::InvalidOption {
                    option: "CorrelatorOptions::qps",
                    ..
                }
            ),
            "{err}"
        );
    }
}

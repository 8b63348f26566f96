//! Ports of client-go's `tools/cache/reflector_test.go`, on tokio's paused clock.
//!
//! Where upstream drives an unexported piece directly (`r.watch`, `handleWatch`,
//! `resyncChan`), the port drives the same code through `list_and_watch` with a scripted
//! lister-watcher and observes what upstream checks: which calls were made, whether the
//! watch stream was stopped (dropped), the round's result and the timing. Not ported:
//! `TestGetTypeDescriptionFromObject`, `TestGetExpectedGVKFromObject` and
//! `TestIsUnsupportedTableObject` check Go's runtime type inspection of `runtime.Object`
//! (unstructured GVKs, Table objects), which the typed decoder here does not have;
//! `TestReflectorReplacesStoreOnUnsafeDelete` and `TestReflectorListExtract` are about
//! DeltaFIFO and `meta.ExtractList`, absent by design (the RealFIFO and typed lists).

mod reflector_fakes;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Pod, PodSpec};
use kctrl_client::{Error, ListParams, WatchParams};
use kctrl_informer::{BackoffOptions, Reflector, ReflectorOptions};
use reflector_fakes::*;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

type PodReflector = Reflector<k8s_openapi::api::core::v1::Pod>;

fn reflector(
    lw: &Arc<ScriptedLw>,
    store: &Arc<RecordingStore>,
    opts: ReflectorOptions,
) -> PodReflector {
    Reflector::new(lw.clone(), store.clone(), opts)
}

/// A watch function handing each new watch's producer to the test.
fn watch_via(
    tx: mpsc::UnboundedSender<FakeWatcher>,
) -> impl FnMut(
    &WatchParams,
) -> Result<kctrl_informer::EventStream<k8s_openapi::api::core::v1::Pod>, Error>
+ Send
+ 'static {
    move |_| {
        let (fw, stream) = fake_watch();
        let _ = tx.send(fw);
        Ok(stream)
    }
}

/// A watch function that cancels the round once the reflector starts watching (the list
/// is what the test is about) and returns a watch that stays open.
fn cancel_on_watch(
    cancel: &Arc<Mutex<CancellationToken>>,
) -> impl FnMut(
    &WatchParams,
) -> Result<kctrl_informer::EventStream<k8s_openapi::api::core::v1::Pod>, Error>
+ Send
+ 'static {
    let cancel = cancel.clone();
    let mut keep = Vec::new();
    move |_| {
        cancel.lock().unwrap().cancel();
        let (fw, stream) = fake_watch();
        keep.push(fw);
        Ok(stream)
    }
}

fn fresh(cancel: &Arc<Mutex<CancellationToken>>) -> CancellationToken {
    let t = CancellationToken::new();
    *cancel.lock().unwrap() = t.clone();
    t
}

#[tokio::test(start_paused = true)]
async fn close_watch_channel_on_error() {
    let (tx, mut watchers) = mpsc::unbounded_channel();
    let lw = ScriptedLw::new(|_| Ok(pod_list("1", None, vec![])), watch_via(tx));
    let store = RecordingStore::new();
    let r = reflector(&lw, &store, options(false));
    let cancel = CancellationToken::new();
    let task = tokio::spawn({
        let r = r.clone();
        let cancel = cancel.clone();
        async move { r.list_and_watch(&cancel).await }
    });
    let fw = watchers.recv().await.unwrap();
    fw.error(internal_error());
    task.await
        .unwrap()
        .expect("a watch ending with an error is not a round error");
    assert!(fw.is_closed(), "watch left open after an ERROR event");
    assert_eq!(lw.watches().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn run_until() {
    let (tx, mut watchers) = mpsc::unbounded_channel();
    let lw = ScriptedLw::new(|_| Ok(pod_list("1", None, vec![])), watch_via(tx));
    let store = RecordingStore::new();
    let r = reflector(&lw, &store, options(false));
    let cancel = CancellationToken::new();
    let task = tokio::spawn({
        let r = r.clone();
        let cancel = cancel.clone();
        async move { r.run(cancel).await }
    });
    let fw = watchers.recv().await.unwrap();
    fw.add(pod("bar", "2"));
    store.wait_ops(2).await;
    cancel.cancel();
    task.await.unwrap();
    assert!(
        fw.is_closed(),
        "watch left open after stopping the reflector"
    );
    assert_eq!(store.items(), pairs(&[("bar", "2")]));
}

/// Listed and watched objects reach the store re-packed: no list in them keeps the spare
/// capacity a decoder's growth leaves behind. With `compact_objects` off they are stored as
/// decoded.
#[tokio::test(start_paused = true)]
async fn objects_are_stored_without_spare_capacity() {
    assert_eq!(stored_container_capacity(true).await, [1, 1]);
    assert_eq!(stored_container_capacity(false).await, [16, 16]);
}

/// The capacity of the containers list of a listed and a watched Pod as stored, each
/// decoded with room for 16.
async fn stored_container_capacity(compact_objects: bool) -> [usize; 2] {
    fn roomy(name: &str, rv: &str) -> Pod {
        let mut containers = Vec::with_capacity(16);
        containers.push(Container {
            name: "app".into(),
            ..Default::default()
        });
        Pod {
            spec: Some(PodSpec {
                containers,
                ..Default::default()
            }),
            ..pod(name, rv)
        }
    }
    let (tx, mut watchers) = mpsc::unbounded_channel();
    let lw = ScriptedLw::new(
        |_| Ok(pod_list("1", None, vec![roomy("listed", "1")])),
        watch_via(tx),
    );
    let store = RecordingStore::new();
    let r = reflector(
        &lw,
        &store,
        ReflectorOptions {
            compact_objects,
            ..options(false)
        },
    );
    let cancel = CancellationToken::new();
    let task = tokio::spawn({
        let r = r.clone();
        let cancel = cancel.clone();
        async move { r.run(cancel).await }
    });
    let fw = watchers.recv().await.unwrap();
    fw.add(roomy("watched", "2"));
    store.wait_ops(2).await;
    cancel.cancel();
    task.await.unwrap();
    ["listed", "watched"].map(|name| {
        store
            .inspect(name, |p| p.spec.as_ref().unwrap().containers.capacity())
            .unwrap_or_else(|| panic!("{name} not stored"))
    })
}

#[tokio::test(start_paused = true)]
async fn reflector_watch_handler() {
    let cancel = Arc::new(Mutex::new(CancellationToken::new()));
    let (tx, mut watchers) = mpsc::unbounded_channel();
    let mut first = Some(watch_via(tx));
    let mut then = cancel_on_watch(&cancel);
    let lw = ScriptedLw::new(
        |_| Ok(pod_list("1", None, vec![pod("foo", "1"), pod("bar", "1")])),
        move |p| match first.take() {
            Some(mut f) => f(p),
            None => then(p),
        },
    );
    let store = RecordingStore::new();
    let r = reflector(&lw, &store, options(false));
    let token = fresh(&cancel);
    let task = tokio::spawn({
        let r = r.clone();
        async move { r.list_and_watch(&token).await }
    });
    let fw = watchers.recv().await.unwrap();
    fw.delete(pod("foo", "30"));
    fw.modify(pod("bar", "55"));
    fw.add(pod("baz", "32"));
    fw.drained().await;
    drop(fw);
    task.await.unwrap().unwrap();

    assert_eq!(store.items(), pairs(&[("bar", "55"), ("baz", "32")]));
    assert_eq!(r.last_sync_resource_version(), "32");
    // The ended watch is resumed from the last event's RV, without a relist.
    let watches = lw.watches();
    assert_eq!(watches.len(), 2);
    assert_eq!(watches[1].resource_version.as_deref(), Some("32"));
    assert_eq!(lw.lists().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn reflector_stop_watch() {
    let lw = ScriptedLw::new(|_| Ok(pod_list("1", None, vec![])), |_| Ok(fake_watch().1));
    let store = RecordingStore::new();
    let r = reflector(&lw, &store, options(false));
    let cancel = CancellationToken::new();
    cancel.cancel();
    r.list_and_watch(&cancel).await.unwrap();
    assert!(lw.calls().is_empty());
    assert!(store.ops().is_empty());
}

#[tokio::test(start_paused = true)]
async fn reflector_list_and_watch_use_watch_list_enabled() {
    let (tx, mut watchers) = mpsc::unbounded_channel();
    let lw = ScriptedLw::new(
        |_| Err(Error::InvalidRequest("no list expected".into())),
        watch_via(tx),
    );
    let store = RecordingStore::new();
    let r = reflector(&lw, &store, options(true));
    let cancel = CancellationToken::new();
    let task = tokio::spawn({
        let (r, cancel) = (r.clone(), cancel.clone());
        async move { r.list_and_watch(&cancel).await }
    });
    let fw = watchers.recv().await.unwrap();
    fw.add(pod("foo", "1"));
    fw.send(end_bookmark("1", "true"));
    fw.modify(pod("foo", "2"));
    for (i, n) in ["bar", "baz", "qux", "zoo"].iter().enumerate() {
        fw.add(pod(n, &(i + 3).to_string()));
    }
    store.wait_ops(6).await;
    cancel.cancel();
    task.await.unwrap().unwrap();

    assert_eq!(
        store.ops(),
        vec![
            Op::Replace(pairs(&[("foo", "1")]), "1".into()),
            Op::Update("foo".into(), "2".into()),
            Op::Add("bar".into(), "3".into()),
            Op::Add("baz".into(), "4".into()),
            Op::Add("qux".into(), "5".into()),
            Op::Add("zoo".into(), "6".into()),
        ]
    );
    let watches = lw.watches();
    assert_eq!(watches.len(), 1);
    assert!(watches[0].timeout_seconds.is_some());
    assert_eq!(
        WatchParams {
            timeout_seconds: None,
            ..watches[0].clone()
        },
        WatchParams {
            resource_version: None,
            resource_version_match: Some(kctrl_client::ResourceVersionMatch::NotOlderThan),
            send_initial_events: true,
            allow_watch_bookmarks: true,
            ..Default::default()
        }
    );
    assert!(lw.lists().is_empty());
}

#[tokio::test(start_paused = true)]
async fn reflector_list_and_watch_use_watch_list_disabled() {
    let (tx, mut watchers) = mpsc::unbounded_channel();
    let lw = ScriptedLw::new(
        |_| Ok(pod_list("1", None, vec![pod("foo", "1")])),
        watch_via(tx),
    );
    let store = RecordingStore::new();
    let r = reflector(&lw, &store, options(false));
    let cancel = CancellationToken::new();
    let task = tokio::spawn({
        let (r, cancel) = (r.clone(), cancel.clone());
        async move { r.list_and_watch(&cancel).await }
    });
    let fw = watchers.recv().await.unwrap();
    fw.modify(pod("foo", "2"));
    for (i, n) in ["bar", "baz", "qux", "zoo"].iter().enumerate() {
        fw.add(pod(n, &(i + 3).to_string()));
    }
    store.wait_ops(6).await;
    cancel.cancel();
    task.await.unwrap().unwrap();

    assert_eq!(
        store.items(),
        pairs(&[
            ("bar", "3"),
            ("baz", "4"),
            ("foo", "2"),
            ("qux", "5"),
            ("zoo", "6")
        ])
    );
    assert_eq!(
        lw.lists(),
        vec![ListParams {
            resource_version: Some("0".into()),
            limit: Some(500),
            ..Default::default()
        }]
    );
    let watches = lw.watches();
    assert_eq!(watches.len(), 1);
    assert_eq!(
        WatchParams {
            timeout_seconds: None,
            ..watches[0].clone()
        },
        WatchParams {
            resource_version: Some("1".into()),
            allow_watch_bookmarks: true,
            ..Default::default()
        }
    );
}

#[tokio::test(start_paused = true)]
async fn reflector_list_and_watch_with_errors() {
    struct Row {
        list: Result<Vec<(&'static str, &'static str)>, &'static str>,
        list_rv: &'static str,
        events: Vec<(&'static str, &'static str, &'static str)>,
        watch_err: Option<&'static str>,
    }
    let rows = vec![
        Row {
            list: Ok(vec![]),
            list_rv: "1",
            events: vec![("add", "foo", "2"), ("add", "bar", "3")],
            watch_err: None,
        },
        Row {
            list: Ok(vec![("foo", "2"), ("bar", "3")]),
            list_rv: "3",
            events: vec![("del", "foo", "4"), ("add", "qux", "5")],
            watch_err: None,
        },
        Row {
            list: Err("a list error"),
            list_rv: "",
            events: vec![],
            watch_err: None,
        },
        Row {
            list: Ok(vec![("bar", "3"), ("qux", "5")]),
            list_rv: "5",
            events: vec![],
            watch_err: Some("a watch error"),
        },
        Row {
            list: Ok(vec![("bar", "3"), ("qux", "5")]),
            list_rv: "5",
            events: vec![("add", "baz", "6")],
            watch_err: None,
        },
        Row {
            list: Ok(vec![("bar", "3"), ("qux", "5"), ("baz", "6")]),
            list_rv: "6",
            events: vec![],
            watch_err: None,
        },
    ];
    let store = RecordingStore::new();
    for (line, row) in rows.into_iter().enumerate() {
        if let Ok(items) = &row.list {
            // The list is what the store holds at this point.
            let mut expected = pairs(items);
            expected.sort();
            assert_eq!(store.items(), expected, "row {line}");
        }
        let cancel = CancellationToken::new();
        let list = row.list.clone();
        let list_rv = row.list_rv;
        let events = row.events.clone();
        let mut watch_err = row.watch_err;
        let mut first = true;
        let c = cancel.clone();
        let mut keep = Vec::new();
        let lw = ScriptedLw::new(
            move |_| match &list {
                Ok(items) => Ok(pod_list(
                    list_rv,
                    None,
                    items.iter().map(|(n, rv)| pod(n, rv)).collect(),
                )),
                Err(msg) => Err(Error::InvalidRequest((*msg).into())),
            },
            move |_| {
                if let Some(msg) = watch_err.take() {
                    return Err(Error::InvalidRequest(msg.into()));
                }
                if !first {
                    c.cancel();
                    let (fw, s) = fake_watch();
                    keep.push(fw);
                    return Ok(s);
                }
                first = false;
                let (fw, s) = fake_watch();
                for (kind, n, rv) in &events {
                    match *kind {
                        "add" => fw.add(pod(n, rv)),
                        _ => fw.delete(pod(n, rv)),
                    }
                }
                if events.is_empty() {
                    c.cancel();
                    keep.push(fw);
                }
                Ok(s)
            },
        );
        let r = reflector(&lw, &store, options(false));
        let result = r.list_and_watch(&cancel).await;
        match (row.list, row.watch_err) {
            (Err(msg), _) | (_, Some(msg)) => {
                let err = result.expect_err("round error expected");
                assert!(err.to_string().contains(msg), "row {line}: {err}");
            }
            _ => result.unwrap_or_else(|e| panic!("row {line}: {e}")),
        }
    }
}

async fn conn_refused_backoff(fails: usize, backoff: BackoffOptions) -> Duration {
    let left = Arc::new(AtomicUsize::new(fails));
    let cancel = CancellationToken::new();
    let c = cancel.clone();
    let mut keep = Vec::new();
    let lw = ScriptedLw::new(
        |_| Ok(pod_list("1", None, vec![])),
        move |_| {
            if left.load(Ordering::SeqCst) > 0 {
                left.fetch_sub(1, Ordering::SeqCst);
                return Err(connection_refused());
            }
            c.cancel();
            let (fw, s) = fake_watch();
            keep.push(fw);
            Ok(s)
        },
    );
    let store = RecordingStore::new();
    let r = reflector(
        &lw,
        &store,
        ReflectorOptions {
            backoff,
            ..options(false)
        },
    );
    let start = Instant::now();
    r.list_and_watch(&cancel).await.unwrap();
    assert_eq!(lw.watches().len(), fails + 1);
    assert_eq!(lw.lists().len(), 1, "connection refused must not relist");
    start.elapsed()
}

#[tokio::test(start_paused = true)]
async fn reflector_list_and_watch_init_conn_backoff() {
    let backoff = |jitter| BackoffOptions {
        initial: Duration::from_millis(1),
        factor: 2.0,
        jitter,
        cap: Duration::from_millis(50),
        reset_after: Duration::from_millis(100),
    };
    // Not reaching the cap: grows exponentially, 1+2+4+8+16 ms.
    assert_eq!(
        conn_refused_backoff(5, backoff(0.0)).await,
        Duration::from_millis(31)
    );
    // Reaching the cap: flattens at 50 ms, 63 + 34×50 ms.
    assert_eq!(
        conn_refused_backoff(40, backoff(0.0)).await,
        Duration::from_millis(1763)
    );
    // With jitter each delay is up to twice as long. Tokio's timer fires on whole
    // milliseconds, rounding each jittered sleep up, so the sum can reach twice exactly.
    let d = conn_refused_backoff(5, backoff(1.0)).await;
    assert!(
        d >= Duration::from_millis(31) && d <= Duration::from_millis(62),
        "{d:?}"
    );
    let d = conn_refused_backoff(40, backoff(1.0)).await;
    assert!(
        d >= Duration::from_millis(1763) && d <= Duration::from_millis(3526),
        "{d:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn backoff_on_too_many_requests() {
    let n = AtomicUsize::new(0);
    let lw = ScriptedLw::new(
        |_| Ok(pod_list("1", None, vec![])),
        move |_| match n.fetch_add(1, Ordering::SeqCst) {
            0 => Err(too_many_requests()),
            1 => Ok(watch_of(vec![kctrl_client::WatchEvent::Error(
                too_many_requests().api_error().unwrap().clone(),
            )])),
            _ => Ok(closed_watch()),
        },
    );
    let store = RecordingStore::new();
    let r = reflector(&lw, &store, options(false));
    let start = Instant::now();
    r.list_and_watch(&CancellationToken::new()).await.unwrap();
    // Two backoffs (800 ms, 1.6 s): one for the rejected watch, one for the 429 ERROR event;
    // the third watch closes at once without events (a very short watch) and ends the round.
    assert_eq!(start.elapsed(), Duration::from_millis(2400));
    assert_eq!(lw.watches().len(), 3);
}

#[tokio::test(start_paused = true)]
async fn no_relist_on_too_many_requests() {
    let n = AtomicUsize::new(0);
    let lw = ScriptedLw::new(
        |_| Ok(pod_list("1", None, vec![])),
        move |_| {
            if n.fetch_add(1, Ordering::SeqCst) < 4 {
                Err(too_many_requests())
            } else {
                Ok(closed_watch())
            }
        },
    );
    let store = RecordingStore::new();
    let r = reflector(&lw, &store, options(false));
    let start = Instant::now();
    r.list_and_watch(&CancellationToken::new()).await.unwrap();
    assert_eq!(lw.lists().len(), 1);
    assert_eq!(lw.watches().len(), 5);
    assert_eq!(
        start.elapsed(),
        Duration::from_millis(800 + 1600 + 3200 + 6400)
    );
}

#[tokio::test(start_paused = true)]
async fn retry_internal_error() {
    for (name, max, rewind_at, want_retries) in [
        ("retries off", Duration::ZERO, 0, 0),
        ("retries on, all calls fail", Duration::from_secs(30), 0, 31),
        (
            "retries on, one call successful",
            Duration::from_secs(30),
            10,
            40,
        ),
    ] {
        let lw = ScriptedLw::new(
            |_| Ok(pod_list("1", None, vec![])),
            |_| {
                Ok(watch_of(vec![kctrl_client::WatchEvent::Error(
                    internal_error(),
                )]))
            },
        );
        // Each watch takes a second to fail; the `rewind_at`-th also a minute more, which
        // resets the retry window.
        lw.set_watch_delay(move |n| {
            Duration::from_secs(1)
                + if n == rewind_at {
                    Duration::from_secs(60)
                } else {
                    Duration::ZERO
                }
        });
        let store = RecordingStore::new();
        let r = reflector(
            &lw,
            &store,
            ReflectorOptions {
                max_internal_error_retry_duration: max,
                ..options(false)
            },
        );
        r.list_and_watch(&CancellationToken::new()).await.unwrap();
        assert_eq!(lw.watches().len() - 1, want_retries, "{name}");
        assert_eq!(lw.lists().len(), 1, "{name}");
    }
}

#[tokio::test(start_paused = true)]
async fn reflector_resync() {
    let cancel = CancellationToken::new();
    let resyncs = Arc::new(AtomicUsize::new(0));
    let store = RecordingStore::new();
    store.on_op({
        let (cancel, resyncs) = (cancel.clone(), resyncs.clone());
        move |op| {
            if *op == Op::Resync && resyncs.fetch_add(1, Ordering::SeqCst) + 1 == 2 {
                cancel.cancel();
            }
        }
    });
    let mut keep = Vec::new();
    let lw = ScriptedLw::new(
        |_| Ok(pod_list("0", None, vec![])),
        move |_| {
            let (fw, s) = fake_watch();
            keep.push(fw);
            Ok(s)
        },
    );
    let r = reflector(
        &lw,
        &store,
        ReflectorOptions {
            resync_period: Duration::from_millis(1),
            ..options(false)
        },
    );
    r.list_and_watch(&cancel).await.unwrap();
    assert_eq!(resyncs.load(Ordering::SeqCst), 2);
}

/// The resync timer keeps its period while watch events arrive in between: an event every
/// second does not move it (resyncs at 10, 20 and 30 s over 35 s), and each resync comes
/// in its place among the events.
#[tokio::test(start_paused = true)]
async fn reflector_resync_keeps_its_period_while_events_arrive() {
    let cancel = CancellationToken::new();
    let store = RecordingStore::new();
    let (tx, mut rx) = mpsc::unbounded_channel();
    let lw = ScriptedLw::new(
        |_| Ok(pod_list("1", None, vec![])),
        move |_| {
            let (fw, s) = fake_watch();
            tx.send(fw).unwrap();
            Ok(s)
        },
    );
    let r = reflector(
        &lw,
        &store,
        ReflectorOptions {
            resync_period: Duration::from_secs(10),
            ..options(false)
        },
    );
    let start = Instant::now();
    let task = tokio::spawn({
        let (r, cancel) = (r.clone(), cancel.clone());
        async move { r.list_and_watch(&cancel).await }
    });
    let fw = rx.recv().await.unwrap();
    for second in 1..=35u64 {
        tokio::time::sleep_until(start + Duration::from_millis(second * 1000 + 500)).await;
        fw.add(pod(&format!("p{second}"), &(second + 1).to_string()));
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    cancel.cancel();
    task.await.unwrap().unwrap();
    let ops = store.ops();
    let resyncs: Vec<usize> = ops
        .iter()
        .enumerate()
        .filter(|(_, op)| **op == Op::Resync)
        .map(|(i, _)| i)
        .collect();
    // Ops: the list's replace, then one add per event; a resync at 10 s follows the 9 events
    // sent by then (at 1.5 s ... 9.5 s).
    let adds_before = |i: usize| {
        ops[..i]
            .iter()
            .filter(|op| matches!(op, Op::Add(..)))
            .count()
    };
    assert_eq!(
        resyncs.iter().map(|&i| adds_before(i)).collect::<Vec<_>>(),
        vec![9, 19, 29],
        "{ops:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn reflector_resync_respects_should_resync() {
    let cancel = CancellationToken::new();
    let asked = Arc::new(AtomicUsize::new(0));
    let store = RecordingStore::new();
    let mut keep = Vec::new();
    let lw = ScriptedLw::new(
        |_| Ok(pod_list("1", None, vec![])),
        move |_| {
            let (fw, s) = fake_watch();
            keep.push(fw);
            Ok(s)
        },
    );
    let r = reflector(
        &lw,
        &store,
        ReflectorOptions {
            resync_period: Duration::from_secs(1),
            should_resync: Some(Arc::new({
                let asked = asked.clone();
                move || asked.fetch_add(1, Ordering::SeqCst) % 2 == 1
            })),
            ..options(false)
        },
    );
    let task = tokio::spawn({
        let (r, cancel) = (r.clone(), cancel.clone());
        async move { r.list_and_watch(&cancel).await }
    });
    tokio::time::sleep(Duration::from_millis(4500)).await;
    cancel.cancel();
    task.await.unwrap().unwrap();
    assert_eq!(asked.load(Ordering::SeqCst), 4);
    assert_eq!(store.ops().iter().filter(|o| **o == Op::Resync).count(), 2);
}

/// 10 pods in pages of 4 at RV 10 (continue tokens C1, C2).
fn paged_pods(p: &ListParams) -> Result<k8s_openapi::List<k8s_openapi::api::core::v1::Pod>, Error> {
    let all = pods(0..10);
    Ok(match p.continue_token.as_deref() {
        None => pod_list("10", Some("C1"), all[0..4].to_vec()),
        Some("C1") => pod_list("10", Some("C2"), all[4..8].to_vec()),
        Some("C2") => pod_list("10", None, all[8..10].to_vec()),
        Some(other) => panic!("unrecognized continue {other}"),
    })
}

#[tokio::test(start_paused = true)]
async fn reflector_watch_list_page_size() {
    let cancel = Arc::new(Mutex::new(CancellationToken::new()));
    let lw = ScriptedLw::new(paged_pods, cancel_on_watch(&cancel));
    let store = RecordingStore::new();
    let r = reflector(
        &lw,
        &store,
        ReflectorOptions {
            page_size: Some(4),
            ..options(false)
        },
    );
    // First list at "0", then a relist at "10": both paged by 4 as configured.
    for _ in 0..2 {
        r.list_and_watch(&fresh(&cancel)).await.unwrap();
        assert_eq!(store.len(), 10);
    }
    let lists = lw.lists();
    assert_eq!(lists.len(), 6);
    assert!(lists.iter().all(|p| p.limit == Some(4)), "{lists:?}");
    assert_eq!(lw.list_rvs(), ["0", "", "", "10", "", ""]);
    assert_eq!(lists[1].continue_token.as_deref(), Some("C1"));
    assert_eq!(lists[2].continue_token.as_deref(), Some("C2"));
}

#[tokio::test(start_paused = true)]
async fn reflector_not_paginating_not_consistent_reads() {
    let cancel = Arc::new(Mutex::new(CancellationToken::new()));
    let lw = ScriptedLw::new(
        |_| Ok(pod_list("10", None, pods(0..10))),
        cancel_on_watch(&cancel),
    );
    let store = RecordingStore::new();
    let r = reflector(&lw, &store, options(false));
    r.list_and_watch(&fresh(&cancel)).await.unwrap();
    r.list_and_watch(&fresh(&cancel)).await.unwrap();
    assert_eq!(store.len(), 10);
    let lists = lw.lists();
    assert_eq!(lists[1].resource_version.as_deref(), Some("10"));
    assert_eq!(lists[1].limit, None, "a relist at a given RV must not page");
}

#[tokio::test(start_paused = true)]
async fn reflector_paginating_non_consistent_reads_if_watch_cache_disabled() {
    let cancel = Arc::new(Mutex::new(CancellationToken::new()));
    let lw = ScriptedLw::new(paged_pods, cancel_on_watch(&cancel));
    let store = RecordingStore::new();
    let r = reflector(&lw, &store, options(false));
    // The first list at "0" comes back paginated: the watch cache is off, keep paging.
    r.list_and_watch(&fresh(&cancel)).await.unwrap();
    assert_eq!(store.len(), 10);
    r.list_and_watch(&fresh(&cancel)).await.unwrap();
    assert_eq!(store.len(), 10);
    let lists = lw.lists();
    assert_eq!(lists.len(), 6);
    assert!(lists.iter().all(|p| p.limit == Some(500)), "{lists:?}");
    assert_eq!(lw.list_rvs(), ["0", "", "", "10", "", ""]);
}

#[tokio::test(start_paused = true)]
async fn reflector_resync_with_resource_version() {
    let cancel = Arc::new(Mutex::new(CancellationToken::new()));
    let lw = ScriptedLw::new(
        |p| match p.resource_version.as_deref() {
            Some("0") => Ok(pod_list("10", None, pods(0..4))),
            Some("10") => Ok(pod_list("11", None, pods(0..8))),
            other => panic!("unrecognized RV {other:?}"),
        },
        cancel_on_watch(&cancel),
    );
    let store = RecordingStore::new();
    let r = reflector(&lw, &store, options(false));
    r.list_and_watch(&fresh(&cancel)).await.unwrap();
    assert_eq!(store.len(), 4);
    r.list_and_watch(&fresh(&cancel)).await.unwrap();
    assert_eq!(store.len(), 8);
    assert_eq!(lw.list_rvs(), ["0", "10"]);
}

#[tokio::test(start_paused = true)]
async fn reflector_expired_exact_resource_version() {
    let cancel = Arc::new(Mutex::new(CancellationToken::new()));
    let lw = ScriptedLw::new(
        |p| match p.resource_version.as_deref() {
            Some("0") => Ok(pod_list("10", None, pods(0..4))),
            Some("10") => Err(expired(
                "The resourceVersion for the provided watch is too old.",
            )),
            None => Ok(pod_list("11", None, pods(0..8))),
            other => panic!("unrecognized RV {other:?}"),
        },
        cancel_on_watch(&cancel),
    );
    let store = RecordingStore::new();
    let r = reflector(&lw, &store, options(false));
    r.list_and_watch(&fresh(&cancel)).await.unwrap();
    assert_eq!(store.len(), 4);
    r.list_and_watch(&fresh(&cancel)).await.unwrap();
    assert_eq!(store.len(), 8);
    assert_eq!(lw.list_rvs(), ["0", "10", ""]);
}

#[tokio::test(start_paused = true)]
async fn reflector_full_list_if_expired() {
    let cancel = Arc::new(Mutex::new(CancellationToken::new()));
    let lw = ScriptedLw::new(
        |p| {
            let key = (
                p.resource_version.as_deref(),
                p.continue_token.as_deref(),
                p.limit,
            );
            match key {
                (Some("0"), None, Some(4)) => Ok(pod_list("10", None, pods(0..4))),
                (Some("10"), None, Some(4)) => Ok(pod_list("11", Some("C1"), pods(0..4))),
                (None, Some("C1"), Some(4)) => Err(expired(
                    "The resourceVersion for the provided watch is too old.",
                )),
                (Some("10"), None, None) => Ok(pod_list("11", None, pods(0..8))),
                other => Err(Error::InvalidRequest(format!("unexpected list {other:?}"))),
            }
        },
        cancel_on_watch(&cancel),
    );
    let store = RecordingStore::new();
    let r = reflector(
        &lw,
        &store,
        ReflectorOptions {
            page_size: Some(4),
            ..options(false)
        },
    );
    r.list_and_watch(&fresh(&cancel)).await.unwrap();
    assert_eq!(store.len(), 4);
    // The relist's second page expired: one full list at the same RV instead.
    r.list_and_watch(&fresh(&cancel)).await.unwrap();
    assert_eq!(store.len(), 8);
    assert_eq!(lw.list_rvs(), ["0", "10", "", "10"]);
    assert_eq!(r.last_sync_resource_version(), "11");
}

#[tokio::test(start_paused = true)]
async fn reflector_full_list_if_too_large() {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Status, StatusCause, StatusDetails};
    let timeout = |message: &str, cause: Option<StatusCause>| -> Error {
        kctrl_client::ApiError::from_status(
            504,
            Status {
                code: Some(504),
                reason: Some("Timeout".into()),
                message: Some(message.into()),
                details: Some(StatusDetails {
                    causes: cause.map(|c| vec![c]),
                    retry_after_seconds: Some(1),
                    ..Default::default()
                }),
                ..Default::default()
            },
        )
        .into()
    };
    let cancel = Arc::new(Mutex::new(CancellationToken::new()));
    let mut version = 30;
    let lw = ScriptedLw::new(
        move |p| match p.resource_version.as_deref() {
            Some("0") => Ok(pod_list("20", None, vec![])),
            // The error formats of current servers, 1.17.0–1.18.5, and older.
            Some("20") => Err(timeout(
                "Timeout: Too large resource version: 20, current: 10",
                Some(StatusCause {
                    reason: Some("ResourceVersionTooLarge".into()),
                    message: Some("Too large resource version".into()),
                    ..Default::default()
                }),
            )),
            Some("30") => Err(timeout(
                "too large resource version",
                Some(StatusCause {
                    message: Some("Too large resource version".into()),
                    ..Default::default()
                }),
            )),
            Some("40") => Err(timeout("Too large resource version", None)),
            None => {
                let rv = version.to_string();
                version += 10;
                Ok(pod_list(&rv, None, vec![]))
            }
            other => Err(Error::InvalidRequest(format!(
                "unexpected list at {other:?}"
            ))),
        },
        cancel_on_watch(&cancel),
    );
    let store = RecordingStore::new();
    let r = reflector(&lw, &store, options(false));
    for _ in 0..4 {
        r.list_and_watch(&fresh(&cancel)).await.unwrap();
    }
    assert_eq!(lw.list_rvs(), ["0", "20", "", "30", "", "40", ""]);
}

#[tokio::test(start_paused = true)]
async fn watch_timeout() {
    for (name, min, expected_min) in [
        ("no timeout", None, 5 * 60),
        (
            "small timeout not honored",
            Some(Duration::from_secs(1)),
            5 * 60,
        ),
        ("30m timeout", Some(Duration::from_secs(30 * 60)), 30 * 60),
    ] {
        let cancel = Arc::new(Mutex::new(CancellationToken::new()));
        let lw = ScriptedLw::new(
            |_| Ok(pod_list("10", None, vec![])),
            cancel_on_watch(&cancel),
        );
        let store = RecordingStore::new();
        let mut opts = options(false);
        if let Some(min) = min {
            opts.min_watch_timeout = min;
        }
        let r = reflector(&lw, &store, opts);
        r.list_and_watch(&fresh(&cancel)).await.unwrap();
        let got = lw.watches()[0].timeout_seconds.expect("a watch timeout");
        assert!(
            (expected_min..=2 * expected_min).contains(&got),
            "{name}: {got} not in [{expected_min}, {}]",
            2 * expected_min
        );
    }
}

#[tokio::test(start_paused = true)]
async fn reflector_resource_version_update() {
    let cancel = Arc::new(Mutex::new(CancellationToken::new()));
    let (tx, mut watchers) = mpsc::unbounded_channel();
    let mut first = Some(watch_via(tx));
    let mut then = cancel_on_watch(&cancel);
    let lw = ScriptedLw::new(
        |_| Ok(pod_list("10", None, vec![])),
        move |p| match first.take() {
            Some(mut f) => f(p),
            None => then(p),
        },
    );
    let store = RecordingStore::new();
    let r = reflector(&lw, &store, options(false));
    store.probe({
        let r = r.clone();
        move || r.last_sync_resource_version()
    });
    let token = fresh(&cancel);
    let task = tokio::spawn({
        let r = r.clone();
        async move { r.list_and_watch(&token).await }
    });
    let fw = watchers.recv().await.unwrap();
    fw.add(pod("", "10"));
    fw.modify(pod("", "20"));
    fw.bookmark("30");
    fw.delete(pod("", "40"));
    fw.drained().await;
    drop(fw);
    task.await.unwrap().unwrap();
    // The RV seen by each store call is the previous event's; the last one resumes the watch.
    let probed = store.probed();
    assert_eq!(probed, ["", "10", "10", "20", "30"]);
    let mut updates = probed[2..].to_vec();
    updates.push(lw.watches()[1].resource_version.clone().unwrap());
    assert_eq!(updates, ["10", "20", "30", "40"]);
}

#[tokio::test(start_paused = true)]
async fn watch_started_at_rv_zero_does_not_propagate_synthetic_added_rvs() {
    let (tx, mut watchers) = mpsc::unbounded_channel();
    // A list answering RV "0" makes the watch start at "0": synthetic ADDED events follow.
    let lw = ScriptedLw::new(|_| Ok(pod_list("0", None, vec![])), watch_via(tx));
    let store = RecordingStore::new();
    let r = reflector(&lw, &store, options(false));
    let cancel = CancellationToken::new();
    let task = tokio::spawn({
        let (r, cancel) = (r.clone(), cancel.clone());
        async move { r.list_and_watch(&cancel).await }
    });
    let fw = watchers.recv().await.unwrap();
    fw.add(pod("a", "7"));
    fw.add(pod("b", "5"));
    fw.drained().await;
    assert_eq!(r.last_sync_resource_version(), "0");
    fw.modify(pod("b", "9"));
    fw.add(pod("c", "10"));
    fw.drained().await;
    assert_eq!(r.last_sync_resource_version(), "10");
    cancel.cancel();
    task.await.unwrap().unwrap();
}

// A BOOKMARK without a resourceVersion carries nothing to resume from: it must neither
// reset the last synced version nor reach the store.
#[tokio::test(start_paused = true)]
async fn bookmark_without_resource_version_is_ignored() {
    let (tx, mut watchers) = mpsc::unbounded_channel();
    let lw = ScriptedLw::new(|_| Ok(pod_list("5", None, vec![])), watch_via(tx));
    let store = RecordingStore::new();
    let r = reflector(&lw, &store, options(false));
    let cancel = CancellationToken::new();
    let task = tokio::spawn({
        let (r, cancel) = (r.clone(), cancel.clone());
        async move { r.run(cancel).await }
    });
    let fw = watchers.recv().await.unwrap();
    fw.add(pod("a", "10"));
    fw.bookmark("");
    fw.drained().await;
    assert_eq!(r.last_sync_resource_version(), "10");
    assert!(
        !store.ops().iter().any(|op| matches!(op, Op::Bookmark(_))),
        "{:?}",
        store.ops()
    );
    // The next watch resumes from the last real version.
    drop(fw);
    let _next = watchers.recv().await.unwrap();
    cancel.cancel();
    task.await.unwrap();
    assert_eq!(lw.watches()[1].resource_version.as_deref(), Some("10"));
}

#[tokio::test(start_paused = true)]
async fn watch_expired_relists_from_last_resource_version() {
    let (tx, mut watchers) = mpsc::unbounded_channel();
    let lw = ScriptedLw::new(|_| Ok(pod_list("5", None, vec![])), watch_via(tx));
    let store = RecordingStore::new();
    let r = reflector(&lw, &store, options(false));
    let cancel = CancellationToken::new();
    let task = tokio::spawn({
        let (r, cancel) = (r.clone(), cancel.clone());
        async move { r.run(cancel).await }
    });
    let fw = watchers.recv().await.unwrap();
    fw.add(pod("a", "8"));
    fw.error(match expired("too old resource version: 8 (20)") {
        Error::Api(e) => *e,
        _ => unreachable!(),
    });
    // After the 800 ms backoff, the next round relists at the last RV, not consistently.
    let _next = watchers.recv().await.unwrap();
    cancel.cancel();
    task.await.unwrap();
    assert_eq!(lw.list_rvs(), ["0", "8"]);
}

#[tokio::test(start_paused = true)]
async fn run_reports_round_errors_and_backs_off() {
    let errors = Arc::new(Mutex::new(Vec::new()));
    let cancel = CancellationToken::new();
    let lists = Arc::new(AtomicUsize::new(0));
    let lw = ScriptedLw::new(
        {
            let (lists, cancel) = (lists.clone(), cancel.clone());
            move |_| {
                if lists.fetch_add(1, Ordering::SeqCst) == 3 {
                    cancel.cancel();
                }
                Err(api_error(403, "Forbidden", "pods is forbidden"))
            }
        },
        |_| Ok(closed_watch()),
    );
    let store = RecordingStore::new();
    let r = reflector(
        &lw,
        &store,
        ReflectorOptions {
            watch_error_handler: Some(Arc::new({
                let errors = errors.clone();
                move |e: &Error| errors.lock().unwrap().push(e.to_string())
            })),
            ..options(false)
        },
    );
    let start = Instant::now();
    r.run(cancel).await;
    // Four failed rounds (the fourth list cancels), with growing delays between them.
    assert_eq!(errors.lock().unwrap().len(), 4);
    assert!(errors.lock().unwrap()[0].contains("forbidden"));
    assert_eq!(start.elapsed(), Duration::from_millis(800 + 1600 + 3200));
}

/// A transform that marks each pod once (panicking if it sees a mark: applied twice) and
/// counts its calls.
fn marking_transform(calls: Arc<AtomicUsize>) -> kctrl_informer::Transform<Pod> {
    Arc::new(move |mut p: Pod| {
        calls.fetch_add(1, Ordering::SeqCst);
        let labels = p.metadata.labels.get_or_insert_with(Default::default);
        assert!(
            labels.insert("transformed".into(), "yes".into()).is_none(),
            "transformed twice: {:?}",
            p.metadata.name
        );
        p
    })
}

fn is_marked(p: &Pod) -> bool {
    p.metadata
        .labels
        .as_ref()
        .is_some_and(|l| l.get("transformed").is_some_and(|v| v == "yes"))
}

/// `Reflector::with_transform` hands the store only transformed objects, on the paged list
/// and streaming list paths and for watch events afterwards.
#[tokio::test(start_paused = true)]
async fn reflector_transforms_before_the_store() {
    for use_watch_list in [false, true] {
        let (tx, mut watchers) = mpsc::unbounded_channel();
        let lw = ScriptedLw::new(
            |p: &ListParams| {
                Ok(match p.continue_token.as_deref() {
                    None => pod_list("2", Some("next"), vec![pod("bar", "1")]),
                    Some(_) => pod_list("2", None, vec![pod("foo", "2")]),
                })
            },
            watch_via(tx),
        );
        let store = RecordingStore::new();
        let calls = Arc::new(AtomicUsize::new(0));
        let r: PodReflector = Reflector::with_transform(
            lw.clone(),
            store.clone(),
            ReflectorOptions {
                page_size: Some(1),
                ..options(use_watch_list)
            },
            Some(marking_transform(calls.clone())),
        );
        let cancel = CancellationToken::new();
        let task = tokio::spawn({
            let (r, cancel) = (r.clone(), cancel.clone());
            async move { r.list_and_watch(&cancel).await }
        });
        let fw = watchers.recv().await.unwrap();
        if use_watch_list {
            fw.add(pod("bar", "1"));
            fw.add(pod("gone", "2"));
            fw.delete(pod("gone", "3"));
            fw.add(pod("foo", "2"));
            fw.send(end_bookmark("3", "true"));
        }
        fw.modify(pod("foo", "4"));
        fw.add(pod("baz", "5"));
        store.wait_ops(3).await;
        cancel.cancel();
        task.await.unwrap().unwrap();

        assert!(
            matches!(&store.ops()[0], Op::Replace(items, _) if items.len() == 2),
            "{:?}",
            store.ops()
        );
        assert_eq!(
            store.items(),
            pairs(&[("bar", "1"), ("baz", "5"), ("foo", "4")])
        );
        for name in ["bar", "baz", "foo"] {
            assert!(is_marked(&store.get(name).unwrap()), "{name} untransformed");
        }
        let decoded = if use_watch_list { 6 } else { 4 };
        assert_eq!(
            calls.load(Ordering::SeqCst),
            decoded,
            "watch list: {use_watch_list}"
        );
        if !use_watch_list {
            assert_eq!(lw.lists().len(), 2, "paged");
        }
    }
}

/// client-go `TestReflectorResyncChan`: with a resync period of 1 ms the store is asked to
/// resync 1 ms after the watch starts (upstream: the timer channel fires, well before the
/// test's timeout).
#[tokio::test(start_paused = true)]
async fn reflector_resync_chan() {
    let cancel = CancellationToken::new();
    let first_resync = Arc::new(Mutex::new(None));
    let store = RecordingStore::new();
    store.on_op({
        let (cancel, first) = (cancel.clone(), first_resync.clone());
        move |op| {
            if *op == Op::Resync {
                first.lock().unwrap().get_or_insert(Instant::now());
                cancel.cancel();
            }
        }
    });
    let watch_started = Arc::new(Mutex::new(None));
    let mut keep = Vec::new();
    let lw = ScriptedLw::new(|_| Ok(pod_list("0", None, vec![])), {
        let started = watch_started.clone();
        move |_| {
            *started.lock().unwrap() = Some(Instant::now());
            let (fw, s) = fake_watch();
            keep.push(fw);
            Ok(s)
        }
    });
    let r = reflector(
        &lw,
        &store,
        ReflectorOptions {
            resync_period: Duration::from_millis(1),
            ..options(false)
        },
    );
    tokio::time::timeout(Duration::from_secs(30), r.list_and_watch(&cancel))
        .await
        .expect("the resync fired")
        .unwrap();
    let fired = first_resync.lock().unwrap().expect("a resync");
    let started = watch_started.lock().unwrap().expect("a watch");
    assert_eq!(fired - started, Duration::from_millis(1));
}

/// When a watch round is stopped or its stream ends (client-go's
/// `TestReflectorWatchStopped{Before,After}`, `TestReflectorHandleWatchStopped{Before,After}`
/// and `TestReflectorHandleWatchResultChanClosed{Before,After}`).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Ending {
    /// The token is cancelled before the round starts: no list, no watch.
    CancelledBeforeRound,
    /// The token is cancelled as the watch is handed over, before it is read.
    CancelledBeforeWatching,
    /// The token is cancelled 10 ms into the watch.
    CancelledWhileWatching,
    /// The watch stream has ended before it is read.
    ClosedBeforeWatching,
    /// The watch stream ends 10 ms into the watch, without an event.
    ClosedWhileWatching,
}

#[tokio::test(start_paused = true)]
async fn reflector_watch_and_handle_watch_stopped_or_closed() {
    struct Case {
        ending: Ending,
        /// Watch calls made.
        watches: usize,
        /// How long the round ran.
        took: Duration,
    }
    let ms = Duration::from_millis;
    let cases = [
        Case {
            ending: Ending::CancelledBeforeRound,
            watches: 0,
            took: ms(0),
        },
        Case {
            ending: Ending::CancelledBeforeWatching,
            watches: 1,
            took: ms(0),
        },
        Case {
            ending: Ending::CancelledWhileWatching,
            watches: 1,
            took: ms(10),
        },
        Case {
            ending: Ending::ClosedBeforeWatching,
            watches: 1,
            took: ms(0),
        },
        Case {
            ending: Ending::ClosedWhileWatching,
            watches: 1,
            took: ms(10),
        },
    ];
    for case in cases {
        let ending = case.ending;
        let cancel = CancellationToken::new();
        let streams: Arc<Mutex<Vec<FakeWatcher>>> = Arc::default();
        let lw = ScriptedLw::new(|_| Ok(pod_list("1", None, vec![])), {
            let (cancel, streams) = (cancel.clone(), streams.clone());
            move |_| {
                let (fw, stream) = fake_watch();
                streams.lock().unwrap().push(fw.clone());
                match ending {
                    Ending::CancelledBeforeRound => panic!("watch called after cancel"),
                    Ending::CancelledBeforeWatching => cancel.cancel(),
                    Ending::CancelledWhileWatching => {
                        let cancel = cancel.clone();
                        tokio::spawn(async move {
                            tokio::time::sleep(Duration::from_millis(10)).await;
                            cancel.cancel();
                        });
                    }
                    // Upstream's producer closes the channel; here the producer is dropped.
                    Ending::ClosedBeforeWatching | Ending::ClosedWhileWatching => {
                        let producer = streams.lock().unwrap().pop().expect("pushed above");
                        let delay = if ending == Ending::ClosedWhileWatching {
                            10
                        } else {
                            0
                        };
                        tokio::spawn(async move {
                            tokio::time::sleep(Duration::from_millis(delay)).await;
                            drop(producer);
                        });
                    }
                }
                Ok(stream)
            }
        });
        if ending == Ending::CancelledBeforeRound {
            cancel.cancel();
        }
        let store = RecordingStore::new();
        let r = reflector(&lw, &store, options(false));
        let start = Instant::now();
        let result = r.list_and_watch(&cancel).await;
        // A stopped round, or a watch that closed at once (client-go's VeryShortWatchError,
        // logged by `watch`): the round ends without an error.
        result.unwrap_or_else(|e| panic!("{ending:?}: {e}"));
        let took = start.elapsed();
        // A watch ending without events that soon is very short (client-go's
        // VeryShortWatchError): the round ends, with no re-watch and no relist.
        assert_eq!(lw.watches().len(), case.watches, "{ending:?}");
        assert_eq!(took, case.took, "{ending:?}");
        // Every watch the reflector opened and the test still feeds was stopped (its
        // stream dropped).
        for fw in streams.lock().unwrap().iter() {
            assert!(fw.is_closed(), "{ending:?}: watch left open");
        }
        let lists = if ending == Ending::CancelledBeforeRound {
            0
        } else {
            1
        };
        assert_eq!(lw.lists().len(), lists, "{ending:?}");
    }
}

/// client-go `TestNewReflectorWithCustomBackoff`: the backoff between refused watch
/// connections follows the options (default: 800 ms doubling, with jitter; custom: 10 ms
/// doubling to a 100 ms cap, no jitter, so five failures wait 10+20+40+80+100 ms).
#[tokio::test(start_paused = true)]
async fn new_reflector_with_custom_backoff() {
    struct Case {
        name: &'static str,
        backoff: BackoffOptions,
        conn_fails: usize,
        lower: Duration,
        upper: Duration,
    }
    let cases = [
        Case {
            name: "default backoff",
            backoff: BackoffOptions::default(),
            conn_fails: 2,
            // 800 ms + 1.6 s, each up to twice as long with jitter.
            lower: Duration::from_millis(2400),
            upper: Duration::from_secs(10),
        },
        Case {
            name: "custom backoff",
            backoff: BackoffOptions {
                initial: Duration::from_millis(10),
                factor: 2.0,
                jitter: 0.0,
                cap: Duration::from_millis(100),
                ..BackoffOptions::default()
            },
            conn_fails: 5,
            lower: Duration::from_millis(250),
            upper: Duration::from_millis(300),
        },
    ];
    for case in cases {
        let took = conn_refused_backoff(case.conn_fails, case.backoff).await;
        assert!(
            took >= case.lower && took <= case.upper,
            "{}: {took:?} not in [{:?}, {:?}]",
            case.name,
            case.lower,
            case.upper
        );
    }
}

//! Ports of client-go's `tools/cache/reflector_watchlist_test.go` (`TestWatchList`): the
//! streaming list, its fallback to a list, and what follows it.

mod reflector_fakes;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kctrl_client::{Error, ListParams, ResourceVersionMatch, WatchParams};
use kctrl_informer::{EventStream, Reflector};
use reflector_fakes::*;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// The parameters of a streaming list (timeout aside).
fn streaming() -> WatchParams {
    WatchParams {
        resource_version: None,
        resource_version_match: Some(ResourceVersionMatch::NotOlderThan),
        send_initial_events: true,
        allow_watch_bookmarks: true,
        ..Default::default()
    }
}

/// The parameters of a plain watch from `rv` (timeout aside).
fn plain(rv: &str) -> WatchParams {
    WatchParams {
        resource_version: Some(rv.into()),
        allow_watch_bookmarks: true,
        ..Default::default()
    }
}

fn first_list() -> ListParams {
    ListParams {
        resource_version: Some("0".into()),
        limit: Some(500),
        ..Default::default()
    }
}

/// The recorded calls, each watch checked for a timeout and then compared without it.
fn calls_without_timeouts(lw: &ScriptedLw) -> Vec<Call> {
    lw.calls()
        .into_iter()
        .map(|c| match c {
            Call::Watch(w) => {
                assert!(w.timeout_seconds.is_some(), "watch without timeout: {w:?}");
                Call::Watch(WatchParams {
                    timeout_seconds: None,
                    ..w
                })
            }
            list => list,
        })
        .collect()
}

type WatchResult = Result<EventStream<Pod>, Error>;

/// A lister-watcher whose watches, unless `predicate` rejects them, are fed by the test.
struct Harness {
    lw: Arc<ScriptedLw>,
    store: Arc<RecordingStore>,
    reflector: Reflector<Pod>,
    watchers: mpsc::UnboundedReceiver<FakeWatcher>,
    cancel: CancellationToken,
}

fn harness(
    use_watch_list: bool,
    list: Option<k8s_openapi::List<Pod>>,
    mut predicate: impl FnMut(&WatchParams) -> Option<Error> + Send + 'static,
) -> Harness {
    let (tx, watchers) = mpsc::unbounded_channel();
    let lw = ScriptedLw::new(
        move |_| {
            list.clone()
                .ok_or_else(|| Error::InvalidRequest("not implemented".into()))
        },
        move |p| -> WatchResult {
            if let Some(e) = predicate(p) {
                return Err(e);
            }
            let (fw, stream) = fake_watch();
            let _ = tx.send(fw);
            Ok(stream)
        },
    );
    let store = RecordingStore::new();
    let reflector = Reflector::new(lw.clone(), store.clone(), options(use_watch_list));
    Harness {
        lw,
        store,
        reflector,
        watchers,
        cancel: CancellationToken::new(),
    }
}

impl Harness {
    fn start(&self) -> JoinHandle<Result<(), Error>> {
        let (r, cancel) = (self.reflector.clone(), self.cancel.clone());
        tokio::spawn(async move { r.list_and_watch(&cancel).await })
    }

    async fn next_watch(&mut self) -> FakeWatcher {
        self.watchers.recv().await.expect("a watch")
    }

    /// Stops the round once `fw`'s events were consumed, and returns the round's result.
    async fn stop_after(
        &self,
        fw: &FakeWatcher,
        task: JoinHandle<Result<(), Error>>,
    ) -> Result<(), Error> {
        fw.drained().await;
        self.cancel.cancel();
        task.await.unwrap()
    }
}

#[tokio::test(start_paused = true)]
async fn watch_list_not_synced_without_end_bookmark() {
    let mut h = harness(true, None, |_| None);
    let task = h.start();
    let fw = h.next_watch().await;
    fw.add(pod("p1", "1"));
    h.stop_after(&fw, task).await.unwrap();
    assert_eq!(calls_without_timeouts(&h.lw), [Call::Watch(streaming())]);
    assert!(h.store.ops().is_empty());
    assert_eq!(h.reflector.last_sync_resource_version(), "");
}

#[tokio::test(start_paused = true)]
async fn watch_list_disabled_uses_list_and_watch() {
    let mut h = harness(
        false,
        Some(pod_list("1", None, vec![pod("p1", "1")])),
        |_| None,
    );
    let task = h.start();
    let fw = h.next_watch().await;
    h.stop_after(&fw, task).await.unwrap();
    assert_eq!(
        calls_without_timeouts(&h.lw),
        [Call::List(first_list()), Call::Watch(plain("1"))]
    );
    assert_eq!(h.store.items(), pairs(&[("p1", "1")]));
}

async fn fallback_case(reject: fn() -> Error) -> Harness {
    let mut h = harness(
        true,
        Some(pod_list("1", None, vec![pod("p1", "1")])),
        move |p| p.send_initial_events.then(reject),
    );
    let task = h.start();
    let fw = h.next_watch().await;
    fw.add(pod("p2", "2"));
    h.stop_after(&fw, task).await.unwrap();
    assert_eq!(
        calls_without_timeouts(&h.lw),
        [
            Call::Watch(streaming()),
            Call::List(first_list()),
            Call::Watch(plain("1")),
        ]
    );
    assert_eq!(h.store.items(), pairs(&[("p1", "1"), ("p2", "2")]));
    h
}

#[tokio::test(start_paused = true)]
async fn watch_list_any_other_error_than_invalid_forces_fallback() {
    let h = fallback_case(|| Error::InvalidRequest("dummy error".into())).await;
    assert!(h.reflector.uses_watch_list());
}

/// A server that rejects `sendInitialEvents` (400/422: an old apiserver during a rolling
/// upgrade) makes that round list instead; the next round tries a streaming list again, as
/// client-go's reflector does (it never turns streaming lists off).
#[tokio::test(start_paused = true)]
async fn watch_list_rejected_falls_back_to_a_list_for_that_round_only() {
    for reject in [
        (|| api_error(422, "Invalid", "streaming is not allowed")) as fn() -> Error,
        || api_error(400, "BadRequest", "sendInitialEvents is not supported"),
    ] {
        let mut h = fallback_case(reject).await;
        assert!(h.reflector.uses_watch_list());
        // The next round streams again, from the last RV seen (p2's); rejected again, it
        // lists from there.
        h.cancel = CancellationToken::new();
        let task = h.start();
        let fw = h.next_watch().await;
        h.stop_after(&fw, task).await.unwrap();
        let calls = calls_without_timeouts(&h.lw);
        assert_eq!(
            calls[3..],
            [
                Call::Watch(WatchParams {
                    resource_version: Some("2".into()),
                    ..streaming()
                }),
                Call::List(ListParams {
                    resource_version: Some("2".into()),
                    ..Default::default()
                }),
                Call::Watch(plain("1")),
            ]
        );
    }
}

#[tokio::test(start_paused = true)]
async fn watch_list_synced_after_end_bookmark() {
    let mut h = harness(true, None, |_| None);
    let task = h.start();
    let fw = h.next_watch().await;
    fw.add(pod("p1", "1"));
    fw.add(pod("p2", "2"));
    fw.send(end_bookmark("2", "true"));
    h.stop_after(&fw, task).await.unwrap();
    assert_eq!(calls_without_timeouts(&h.lw), [Call::Watch(streaming())]);
    assert_eq!(
        h.store.ops(),
        [Op::Replace(pairs(&[("p1", "1"), ("p2", "2")]), "2".into())]
    );
    assert_eq!(h.reflector.last_sync_resource_version(), "2");
}

#[tokio::test(start_paused = true)]
async fn watch_list_updates_and_deletes_during_streaming() {
    let mut h = harness(true, None, |_| None);
    let task = h.start();
    let fw = h.next_watch().await;
    fw.add(pod("p1", "1"));
    fw.add(pod("p2", "2"));
    let mut p1 = pod("p1", "3");
    p1.spec = Some(k8s_openapi::api::core::v1::PodSpec {
        active_deadline_seconds: Some(12),
        ..Default::default()
    });
    fw.modify(p1.clone());
    fw.add(pod("p3", "4"));
    fw.delete(pod("p3", "5"));
    fw.send(end_bookmark("5", "true"));
    h.stop_after(&fw, task).await.unwrap();
    assert_eq!(calls_without_timeouts(&h.lw), [Call::Watch(streaming())]);
    assert_eq!(h.store.items(), pairs(&[("p1", "3"), ("p2", "2")]));
    assert_eq!(h.store.get("p1"), Some(p1));
}

#[tokio::test(start_paused = true)]
async fn watch_list_retries_429() {
    let n = AtomicUsize::new(0);
    let mut h = harness(true, None, move |_| {
        (n.fetch_add(1, Ordering::SeqCst) < 2).then(too_many_requests)
    });
    let start = Instant::now();
    let task = h.start();
    let fw = h.next_watch().await;
    assert_eq!(start.elapsed(), Duration::from_millis(800 + 1600));
    fw.add(pod("p1", "1"));
    fw.send(end_bookmark("2", "true"));
    h.stop_after(&fw, task).await.unwrap();
    assert_eq!(
        calls_without_timeouts(&h.lw),
        [
            Call::Watch(streaming()),
            Call::Watch(streaming()),
            Call::Watch(streaming())
        ]
    );
    assert_eq!(h.store.items(), pairs(&[("p1", "1")]));
}

#[tokio::test(start_paused = true)]
async fn watch_list_stopped_before_sync_starts_a_new_watch_list() {
    let mut h = harness(true, None, |_| None);
    let task = h.start();
    let fw = h.next_watch().await;
    fw.add(pod("p1", "1"));
    fw.drained().await;
    drop(fw);
    let fw = h.next_watch().await;
    fw.add(pod("p1", "1"));
    fw.send(end_bookmark("1", "true"));
    h.stop_after(&fw, task).await.unwrap();
    assert_eq!(
        calls_without_timeouts(&h.lw),
        [Call::Watch(streaming()), Call::Watch(streaming())]
    );
    assert_eq!(h.store.items(), pairs(&[("p1", "1")]));
}

#[tokio::test(start_paused = true)]
async fn watch_list_stopped_after_sync_starts_a_plain_watch() {
    let mut h = harness(true, None, |_| None);
    let task = h.start();
    let fw = h.next_watch().await;
    fw.add(pod("p1", "1"));
    fw.add(pod("p2", "2"));
    fw.send(end_bookmark("2", "true"));
    fw.add(pod("p3", "3"));
    fw.drained().await;
    drop(fw);
    let fw = h.next_watch().await;
    fw.add(pod("p4", "4"));
    h.stop_after(&fw, task).await.unwrap();
    assert_eq!(
        calls_without_timeouts(&h.lw),
        [Call::Watch(streaming()), Call::Watch(plain("3"))]
    );
    assert_eq!(
        h.store.items(),
        pairs(&[("p1", "1"), ("p2", "2"), ("p3", "3"), ("p4", "4")])
    );
}

#[tokio::test(start_paused = true)]
async fn watch_list_expired_established_watcher_returns_error() {
    let n = Arc::new(AtomicUsize::new(0));
    let mut h = harness(true, None, {
        let n = n.clone();
        move |_| (n.fetch_add(1, Ordering::SeqCst) + 1 == 2).then(|| expired("rv already expired"))
    });
    let task = h.start();
    let fw = h.next_watch().await;
    fw.add(pod("p1", "1"));
    fw.send(end_bookmark("2", "true"));
    fw.add(pod("p3", "3"));
    fw.drained().await;
    drop(fw);
    let err = task
        .await
        .unwrap()
        .expect_err("an expired watch start ends the round");
    assert_eq!(err.to_string(), "rv already expired");
    assert_eq!(
        calls_without_timeouts(&h.lw),
        [Call::Watch(streaming()), Call::Watch(plain("3"))]
    );
    assert_eq!(h.store.items(), pairs(&[("p1", "1"), ("p3", "3")]));
}

#[tokio::test(start_paused = true)]
async fn watch_list_checks_the_initial_events_end_annotation_value() {
    let mut h = harness(true, None, |_| None);
    let task = h.start();
    let fw = h.next_watch().await;
    fw.add(pod("p1", "1"));
    fw.add(pod("p2", "2"));
    fw.send(end_bookmark("2", "false"));
    h.stop_after(&fw, task).await.unwrap();
    assert_eq!(calls_without_timeouts(&h.lw), [Call::Watch(streaming())]);
    assert!(h.store.ops().is_empty());
}

#[tokio::test(start_paused = true)]
async fn watch_list_expired_resource_version_retries_with_a_consistent_read() {
    // Synced once at RV 2, the next round streams from 2; that RV is gone, so the streaming
    // list is retried at once from "" (most recent).
    let n = Arc::new(AtomicUsize::new(0));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let mut h = harness(true, None, {
        let (n, seen) = (n.clone(), seen.clone());
        move |p| {
            seen.lock().unwrap().push(p.resource_version.clone());
            (n.fetch_add(1, Ordering::SeqCst) == 1)
                .then(|| expired("too old resource version: 2 (9)"))
        }
    });
    let task = h.start();
    let fw = h.next_watch().await;
    fw.add(pod("p1", "1"));
    fw.send(end_bookmark("2", "true"));
    h.stop_after(&fw, task).await.unwrap();

    h.cancel = CancellationToken::new();
    let task = h.start();
    let fw = h.next_watch().await;
    fw.add(pod("p9", "9"));
    fw.send(end_bookmark("9", "true"));
    h.stop_after(&fw, task).await.unwrap();
    assert_eq!(*seen.lock().unwrap(), [None, Some("2".into()), None]);
    assert_eq!(h.store.items(), pairs(&[("p9", "9")]));
    assert!(h.lw.lists().is_empty());
}

/// Found by the dynamic informer tests: a streaming list refused with 410 even as a
/// consistent read used to be retried at once, forever; with a lister-watcher that answers
/// at once the reflector then spun without ever yielding (a current-thread runtime hung).
/// Now a refused consistent read ends the streaming attempt and the round lists instead.
#[tokio::test(start_paused = true)]
async fn watch_list_expired_consistent_read_falls_back_to_a_list() {
    let streaming_refused = Arc::new(AtomicUsize::new(0));
    let mut h = harness(true, Some(pod_list("5", None, vec![pod("p5", "5")])), {
        let refused = streaming_refused.clone();
        move |p| {
            p.send_initial_events.then(|| {
                // Bounded, so that the old behaviour fails this test instead of hanging.
                if refused.fetch_add(1, Ordering::SeqCst) >= 50 {
                    return Error::InvalidRequest("spun".into());
                }
                expired("too old resource version")
            })
        }
    });
    let task = h.start();
    let fw = tokio::time::timeout(Duration::from_secs(60), h.next_watch())
        .await
        .expect("the round reaches a plain watch");
    assert_eq!(streaming_refused.load(Ordering::SeqCst), 1);
    assert_eq!(h.lw.lists().len(), 1);
    assert_eq!(h.store.items(), pairs(&[("p5", "5")]));
    h.stop_after(&fw, task).await.unwrap();
    assert_eq!(
        h.lw.watches()
            .iter()
            .map(|w| (w.send_initial_events, w.resource_version.clone()))
            .collect::<Vec<_>>(),
        [(true, None), (false, Some("5".into()))]
    );
}

/// client-go `TestWatchListResourceVersion`: the resourceVersion a streaming list syncs to is
/// taken only from an event other than ADDED (the end bookmark); a stream stopped before it
/// leaves the reflector unsynced, and the store untouched.
#[tokio::test(start_paused = true)]
async fn watch_list_resource_version() {
    struct Scenario {
        name: &'static str,
        events: Vec<kctrl_client::WatchEvent<Pod>>,
        expected: &'static str,
    }
    let scenarios = [
        Scenario {
            name: "empty resource version",
            events: vec![],
            expected: "",
        },
        Scenario {
            name: "empty resource version without bookmark event",
            events: vec![kctrl_client::WatchEvent::Added(pod("p1", "1"))],
            expected: "",
        },
        Scenario {
            name: "non empty resource version with bookmark event and initial events annotation",
            events: vec![
                kctrl_client::WatchEvent::Added(pod("p1", "1")),
                end_bookmark("2", "true"),
            ],
            expected: "2",
        },
    ];
    for s in scenarios {
        let mut h = harness(true, None, |_| None);
        let task = h.start();
        let fw = h.next_watch().await;
        for e in s.events {
            fw.send(e);
        }
        h.stop_after(&fw, task).await.unwrap();
        assert_eq!(
            h.reflector.last_sync_resource_version(),
            s.expected,
            "{}",
            s.name
        );
        let replaced = h
            .store
            .ops()
            .iter()
            .any(|op| matches!(op, Op::Replace(_, rv) if rv == s.expected));
        assert_eq!(replaced, !s.expected.is_empty(), "{}", s.name);
    }
}

/// The reflector's log lines, captured for one test (on its thread).
#[derive(Clone, Default)]
struct Logs(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Logs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Logs {
    fn capture(&self) -> tracing::subscriber::DefaultGuard {
        let logs = self.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || logs.clone())
            .with_ansi(false)
            .without_time()
            .with_max_level(tracing::Level::WARN)
            .finish();
        tracing::subscriber::set_default(subscriber)
    }

    /// The warnings about the missing end bookmark so far.
    fn waiting(&self) -> Vec<String> {
        String::from_utf8(self.0.lock().unwrap().clone())
            .unwrap()
            .lines()
            .filter(|l| l.contains("awaiting the bookmark ending the initial events"))
            .map(str::to_owned)
            .collect()
    }
}

/// client-go `TestInitialEventsEndBookmarkTicker`: while a streaming list waits for its end
/// bookmark, a warning every 10 s — "no events received yet" (with the time since the
/// watch started) until an event arrives, then "still awaiting" (with the time since the
/// last event) once 10 s pass without one. Nothing once the bookmark arrived, and nothing
/// for a plain watch (upstream's no-op ticker).
#[tokio::test(start_paused = true)]
async fn initial_events_end_bookmark_ticker() {
    let logs = Logs::default();
    let _guard = logs.capture();
    let at = |start: Instant, ms: u64| start + Duration::from_millis(ms);

    let mut h = harness(true, None, |_| None);
    let start = Instant::now();
    let task = h.start();
    let fw = h.next_watch().await;
    tokio::time::sleep_until(at(start, 9_999)).await;
    assert!(logs.waiting().is_empty(), "{:?}", logs.waiting());
    tokio::time::sleep_until(at(start, 10_001)).await;
    tokio::time::sleep_until(at(start, 20_001)).await;
    let w = logs.waiting();
    assert_eq!(w.len(), 2, "{w:?}");
    assert!(
        w[0].contains("no events received yet") && w[0].contains("waited=10s"),
        "{w:?}"
    );
    assert!(
        w[1].contains("no events received yet") && w[1].contains("waited=20s"),
        "{w:?}"
    );

    // An event at 20 s: the next warning comes 10 s after it, about the last event.
    fw.add(pod("p1", "1"));
    fw.drained().await;
    tokio::time::sleep_until(at(start, 29_999)).await;
    assert_eq!(logs.waiting().len(), 2);
    tokio::time::sleep_until(at(start, 30_002)).await;
    tokio::time::sleep_until(at(start, 40_002)).await;
    let w = logs.waiting();
    assert_eq!(w.len(), 4, "{w:?}");
    assert!(
        w[2].contains("still awaiting") && w[2].contains("since_last_event=10s"),
        "{w:?}"
    );
    assert!(
        w[3].contains("events=1") && w[3].contains("since_last_event=20s"),
        "{w:?}"
    );

    // The end bookmark stops the warnings; the stream goes on as the watch.
    fw.send(end_bookmark("2", "true"));
    fw.drained().await;
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(logs.waiting().len(), 4);
    h.stop_after(&fw, task).await.unwrap();

    // A plain watch never warns.
    let mut h = harness(false, Some(pod_list("1", None, vec![])), |_| None);
    let task = h.start();
    let fw = h.next_watch().await;
    tokio::time::sleep(Duration::from_secs(60)).await;
    h.stop_after(&fw, task).await.unwrap();
    assert_eq!(logs.waiting().len(), 4);
}

/// A streaming list whose transform panics on an object keeps what the store held for it:
/// the object still exists, so it is not dropped from the cache as if deleted.
#[tokio::test(start_paused = true)]
async fn watch_list_keeps_the_cached_object_the_transform_panicked_on() {
    let (tx, mut watchers) = mpsc::unbounded_channel();
    let lw = ScriptedLw::new(
        |_| Err(Error::InvalidRequest("not implemented".into())),
        move |_| -> WatchResult {
            let (fw, stream) = fake_watch();
            let _ = tx.send(fw);
            Ok(stream)
        },
    );
    let store = kctrl_informer::Store::<Pod>::new();
    store.insert(Arc::new(pod("p1", "1")));
    let explode: kctrl_informer::Transform<Pod> = Arc::new(|p: Pod| {
        assert!(
            !p.metadata
                .labels
                .as_ref()
                .is_some_and(|l| l.contains_key("explode")),
            "explode"
        );
        p
    });
    let reflector = Reflector::with_transform(
        lw.clone(),
        Arc::new(store.clone()),
        options(true),
        Some(explode),
    );
    let cancel = CancellationToken::new();
    let task = tokio::spawn({
        let (r, cancel) = (reflector.clone(), cancel.clone());
        async move { r.list_and_watch(&cancel).await }
    });
    let fw = watchers.recv().await.expect("a watch");
    let mut p1 = pod("p1", "2");
    p1.metadata.labels = Some([("explode".to_owned(), String::new())].into());
    fw.add(p1);
    fw.add(pod("p2", "3"));
    fw.send(end_bookmark("3", "true"));
    fw.drained().await;
    cancel.cancel();
    task.await.unwrap().unwrap();
    let mut cached: Vec<_> = store
        .list()
        .iter()
        .map(|p| {
            (
                p.metadata.name.clone().unwrap_or_default(),
                p.metadata.resource_version.clone().unwrap_or_default(),
            )
        })
        .collect();
    cached.sort();
    assert_eq!(
        cached,
        [
            ("p1".to_owned(), "1".to_owned()),
            ("p2".to_owned(), "3".to_owned())
        ]
    );
}

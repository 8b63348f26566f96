//! Watch semantics: replay, 410, selector transitions, streaming lists, bookmarks, hooks.

use std::collections::BTreeMap;
use std::time::Duration;

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kctrl_client::{
    Api, DeleteParams, Error, ListParams, PostParams, ResourceVersionMatch, WatchEvent, WatchParams,
};
use kctrl_fake::FakeApi;

fn cm(name: &str, app: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some(BTreeMap::from([("app".to_owned(), app.to_owned())])),
            ..Default::default()
        },
        ..Default::default()
    }
}

async fn next<S>(s: &mut S) -> WatchEvent<ConfigMap>
where
    S: Stream<Item = Result<WatchEvent<ConfigMap>, Error>> + Unpin,
{
    tokio::time::timeout(Duration::from_secs(5), s.next())
        .await
        .expect("no event within 5s")
        .expect("stream ended")
        .expect("event error")
}

fn name(e: &WatchEvent<ConfigMap>) -> (&'static str, String) {
    match e {
        WatchEvent::Added(c) => ("ADDED", c.metadata.name.clone().unwrap()),
        WatchEvent::Modified(c) => ("MODIFIED", c.metadata.name.clone().unwrap()),
        WatchEvent::Deleted(c) => ("DELETED", c.metadata.name.clone().unwrap()),
        WatchEvent::Bookmark(b) => ("BOOKMARK", b.resource_version.clone()),
        WatchEvent::Error(e) => ("ERROR", e.to_string()),
    }
}

fn from(rv: &str) -> WatchParams {
    WatchParams {
        resource_version: Some(rv.to_owned()),
        ..Default::default()
    }
}

#[tokio::test]
async fn watch_from_resource_version_replays_later_events() {
    let fake = FakeApi::new();
    let api: Api<ConfigMap> = Api::namespaced(fake.client(), "default");
    let a = api
        .create(&PostParams::default(), &cm("a", "x"))
        .await
        .unwrap();
    let rv = a.metadata.resource_version.clone().unwrap();
    api.create(&PostParams::default(), &cm("b", "x"))
        .await
        .unwrap();
    let mut a2 = a.clone();
    a2.data = Some(BTreeMap::from([("k".to_owned(), "v".to_owned())]));
    api.update(&PostParams::default(), &a2).await.unwrap();
    api.delete("b", &DeleteParams::default()).await.unwrap();

    let mut w = Box::pin(api.watch(&from(&rv)).await.unwrap());
    assert_eq!(name(&next(&mut w).await), ("ADDED", "b".into()));
    assert_eq!(name(&next(&mut w).await), ("MODIFIED", "a".into()));
    match next(&mut w).await {
        WatchEvent::Deleted(c) => {
            // The last state at the deletion's resourceVersion.
            assert_eq!(
                c.metadata.resource_version,
                Some(fake.resource_version().to_string())
            );
        }
        other => panic!("unexpected {other:?}"),
    }
    // Then live.
    api.create(&PostParams::default(), &cm("c", "x"))
        .await
        .unwrap();
    assert_eq!(name(&next(&mut w).await), ("ADDED", "c".into()));

    // Unset / "0": synthetic ADDED for current objects, then live.
    let mut w0 = Box::pin(api.watch(&from("0")).await.unwrap());
    assert_eq!(name(&next(&mut w0).await), ("ADDED", "a".into()));
    assert_eq!(name(&next(&mut w0).await), ("ADDED", "c".into()));
}

#[tokio::test]
async fn watch_from_a_compacted_resource_version_is_410() {
    let fake = FakeApi::with_history_limit(2);
    let api: Api<ConfigMap> = Api::namespaced(fake.client(), "default");
    let first = api
        .create(&PostParams::default(), &cm("a", "x"))
        .await
        .unwrap();
    for n in ["b", "c", "d"] {
        api.create(&PostParams::default(), &cm(n, "x"))
            .await
            .unwrap();
    }
    let rv = first.metadata.resource_version.unwrap();
    let mut w = Box::pin(api.watch(&from(&rv)).await.unwrap());
    match next(&mut w).await {
        WatchEvent::Error(e) => {
            assert_eq!(e.code, 410);
            assert!(e.is_gone());
            assert_eq!(e.reason(), "Expired");
            assert!(
                e.message()
                    .starts_with(&format!("too old resource version: {rv} (")),
                "{e}"
            );
        }
        other => panic!("unexpected {other:?}"),
    }
    assert!(w.next().await.is_none(), "the stream ends after the error");

    // Explicit compaction.
    let fake = FakeApi::new();
    let api: Api<ConfigMap> = Api::namespaced(fake.client(), "default");
    let a = api
        .create(&PostParams::default(), &cm("a", "x"))
        .await
        .unwrap();
    api.create(&PostParams::default(), &cm("b", "x"))
        .await
        .unwrap();
    fake.compact(fake.resource_version());
    let mut w = Box::pin(
        api.watch(&from(a.metadata.resource_version.as_deref().unwrap()))
            .await
            .unwrap(),
    );
    assert!(matches!(next(&mut w).await, WatchEvent::Error(e) if e.code == 410));
    // Watching from the compaction point itself is fine.
    let mut ok = Box::pin(
        api.watch(&from(&fake.resource_version().to_string()))
            .await
            .unwrap(),
    );
    api.create(&PostParams::default(), &cm("c", "x"))
        .await
        .unwrap();
    assert_eq!(name(&next(&mut ok).await), ("ADDED", "c".into()));
}

#[tokio::test]
async fn selector_transitions_become_added_and_deleted() {
    let fake = FakeApi::new();
    let api: Api<ConfigMap> = Api::namespaced(fake.client(), "default");
    let start = fake.resource_version().to_string();
    let mut w = Box::pin(
        api.watch(&WatchParams {
            label_selector: Some("app=web".into()),
            resource_version: Some(start),
            ..Default::default()
        })
        .await
        .unwrap(),
    );
    let other = api
        .create(&PostParams::default(), &cm("a", "db"))
        .await
        .unwrap();
    // Starts matching → ADDED.
    let mut m = other.clone();
    m.metadata.labels = Some(BTreeMap::from([("app".to_owned(), "web".to_owned())]));
    let m = api.update(&PostParams::default(), &m).await.unwrap();
    assert_eq!(name(&next(&mut w).await), ("ADDED", "a".into()));
    // Still matching → MODIFIED.
    let mut m2 = m.clone();
    m2.data = Some(BTreeMap::from([("k".to_owned(), "v".to_owned())]));
    let m2 = api.update(&PostParams::default(), &m2).await.unwrap();
    assert_eq!(name(&next(&mut w).await), ("MODIFIED", "a".into()));
    // Stops matching → DELETED with the previous state at the new resourceVersion.
    let mut gone = m2.clone();
    gone.metadata.labels = None;
    let gone = api.update(&PostParams::default(), &gone).await.unwrap();
    match next(&mut w).await {
        WatchEvent::Deleted(c) => {
            assert_eq!(c.metadata.labels.unwrap()["app"], "web");
            assert_eq!(c.metadata.resource_version, gone.metadata.resource_version);
        }
        other => panic!("unexpected {other:?}"),
    }
    // Field selectors filter too.
    let mut by_name = Box::pin(
        api.watch(&WatchParams {
            field_selector: Some("metadata.name=z".into()),
            ..Default::default()
        })
        .await
        .unwrap(),
    );
    api.create(&PostParams::default(), &cm("y", "web"))
        .await
        .unwrap();
    api.create(&PostParams::default(), &cm("z", "web"))
        .await
        .unwrap();
    assert_eq!(name(&next(&mut by_name).await), ("ADDED", "z".into()));
}

#[tokio::test]
async fn streaming_list_ends_initial_events_with_a_bookmark() {
    let fake = FakeApi::new();
    let api: Api<ConfigMap> = Api::namespaced(fake.client(), "default");
    api.create(&PostParams::default(), &cm("a", "x"))
        .await
        .unwrap();
    api.create(&PostParams::default(), &cm("b", "x"))
        .await
        .unwrap();
    let mut w = Box::pin(
        api.watch(&WatchParams {
            send_initial_events: true,
            resource_version_match: Some(ResourceVersionMatch::NotOlderThan),
            ..Default::default()
        })
        .await
        .unwrap(),
    );
    assert_eq!(name(&next(&mut w).await), ("ADDED", "a".into()));
    assert_eq!(name(&next(&mut w).await), ("ADDED", "b".into()));
    match next(&mut w).await {
        WatchEvent::Bookmark(b) => {
            assert!(b.is_initial_events_end());
            assert_eq!(b.resource_version, fake.resource_version().to_string());
        }
        other => panic!("unexpected {other:?}"),
    }
    // Bookmarks on demand.
    fake.send_bookmarks();
    match next(&mut w).await {
        WatchEvent::Bookmark(b) => assert!(!b.is_initial_events_end()),
        other => panic!("unexpected {other:?}"),
    }
    // sendInitialEvents without resourceVersionMatch is invalid, as on the apiserver.
    let err = api
        .watch(&WatchParams {
            send_initial_events: true,
            ..Default::default()
        })
        .await
        .err()
        .unwrap();
    assert!(err.is_invalid());
    assert_eq!(
        err.to_string(),
        r#"ListOptions.meta.k8s.io "" is invalid: resourceVersionMatch: Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan"#
    );
}

#[tokio::test]
async fn close_watches_and_timeouts_end_streams() {
    let fake = FakeApi::new();
    let api: Api<ConfigMap> = Api::namespaced(fake.client(), "default");
    let mut w = Box::pin(api.watch(&WatchParams::default()).await.unwrap());
    assert_eq!(fake.watcher_count(), 1);
    fake.close_watches();
    assert!(w.next().await.is_none());
    assert_eq!(fake.watcher_count(), 0);

    tokio::time::pause();
    let mut t = Box::pin(
        api.watch(&WatchParams {
            timeout_seconds: Some(30),
            ..Default::default()
        })
        .await
        .unwrap(),
    );
    let ended = tokio::time::timeout(Duration::from_secs(60), t.next()).await;
    assert!(
        matches!(ended, Ok(None)),
        "the stream ends at the server timeout"
    );
    drop(t);

    // Dropped receivers are forgotten.
    let w2 = api.watch(&WatchParams::default()).await.unwrap();
    drop(w2);
    assert_eq!(fake.watcher_count(), 0);
}

#[tokio::test]
async fn watch_in_one_namespace_and_across_all() {
    let fake = FakeApi::new();
    let default: Api<ConfigMap> = Api::namespaced(fake.client(), "default");
    let other: Api<ConfigMap> = Api::namespaced(fake.client(), "other");
    let all: Api<ConfigMap> = Api::all(fake.client());
    let mut wd = Box::pin(default.watch(&WatchParams::default()).await.unwrap());
    let mut wa = Box::pin(all.watch(&WatchParams::default()).await.unwrap());
    other
        .create(&PostParams::default(), &cm("o", "x"))
        .await
        .unwrap();
    default
        .create(&PostParams::default(), &cm("d", "x"))
        .await
        .unwrap();
    assert_eq!(name(&next(&mut wd).await), ("ADDED", "d".into()));
    assert_eq!(name(&next(&mut wa).await), ("ADDED", "o".into()));
    assert_eq!(name(&next(&mut wa).await), ("ADDED", "d".into()));
    // A list/watch pair sees every change exactly once (the reflector's pattern).
    let list = all.list(&ListParams::default()).await.unwrap();
    let mut w = Box::pin(
        all.watch(&from(list.metadata.resource_version.as_deref().unwrap()))
            .await
            .unwrap(),
    );
    default.delete("d", &DeleteParams::default()).await.unwrap();
    assert_eq!(name(&next(&mut w).await), ("DELETED", "d".into()));
}

use std::sync::Arc;

use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::ConfigMap;
use kctrl_client::{Api, DeleteParams, PostParams};
use kctrl_fake::FakeApi;

use super::*;

const K: &str = "default/web";
const VERIFY_AFTER: Duration = DEFAULT_VERIFY_AFTER;

fn rs(name: &str) -> Target {
    Target::of::<ReplicaSet>("default", name)
}

fn cache<'a>(entries: &'a [(&'a str, &'a str)]) -> impl Fn(&Target) -> Option<String> + 'a {
    move |t| {
        entries
            .iter()
            .find(|(n, _)| *n == t.name)
            .map(|(_, rv)| (*rv).to_owned())
    }
}

#[test]
fn resource_versions_compare_as_numbers_when_well_formed() {
    use std::cmp::Ordering::*;
    let cases = [
        ("9", "10", Some(Less)),
        ("10", "10", Some(Equal)),
        ("100", "99", Some(Greater)),
        ("010", "10", None),
        ("", "1", None),
        ("1a", "1", None),
        ("0", "1", None),
    ];
    for (a, b, want) in cases {
        assert_eq!(compare_resource_versions(a, b), want, "{a} vs {b}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_lost_create_with_a_generated_name_waits_for_the_bound_without_a_live_read() {
    let now = Instant::now();
    let mut w = WriteTable::default();
    // `record` of a create sent with only generateName, whose answer was lost.
    w.create_unknown(K, &rs(""), now);
    // Nothing to find by name: never a live read of an empty name, only the wait.
    assert_eq!(
        w.check(K, cache(&[("web-x1", "5")]), now + Duration::from_secs(10)),
        Check::Behind {
            retry_in: VERIFY_AFTER - Duration::from_secs(10)
        }
    );
    assert_eq!(w.check(K, cache(&[]), now + VERIFY_AFTER), Check::Current);
    assert!(!w.is_tracking(K), "past the bound: forgotten");
}

#[tokio::test(start_paused = true)]
async fn an_applied_update_holds_until_the_cache_moves_past_the_replaced_version() {
    let now = Instant::now();
    let mut w = WriteTable::default();
    w.applied(K, &rs("web-a"), &["10"], Some("11"), now);
    assert_eq!(
        w.check(K, cache(&[("web-a", "10")]), now + Duration::from_secs(1)),
        Check::Behind {
            retry_in: VERIFY_AFTER - Duration::from_secs(1)
        }
    );
    assert_eq!(w.check(K, cache(&[("web-a", "11")]), now), Check::Current);
    assert!(!w.is_tracking(K), "caught up: forgotten");
}

#[tokio::test(start_paused = true)]
async fn a_chain_of_writes_is_behind_at_every_replaced_version() {
    let now = Instant::now();
    let mut w = WriteTable::default();
    w.applied(K, &rs("web-a"), &["10"], Some("11"), now);
    w.applied(K, &rs("web-a"), &["11"], Some("12"), now);
    for rv in ["10", "11"] {
        assert!(matches!(
            w.check(K, cache(&[("web-a", rv)]), now),
            Check::Behind { .. }
        ));
    }
    // Someone else's later write counts as caught up too.
    assert_eq!(w.check(K, cache(&[("web-a", "15")]), now), Check::Current);
}

#[tokio::test(start_paused = true)]
async fn a_cache_at_or_past_the_written_version_is_current_even_if_it_was_replaced() {
    let now = Instant::now();
    let mut w = WriteTable::default();
    // An apply without precondition: the cache held 12 when the answer (11) came, e.g.
    // because someone else wrote right after us and that event arrived first.
    w.applied(K, &rs("web-a"), &["12"], Some("11"), now);
    assert_eq!(w.check(K, cache(&[("web-a", "12")]), now), Check::Current);
}

#[tokio::test(start_paused = true)]
async fn a_no_op_write_leaves_no_record() {
    let now = Instant::now();
    let mut w = WriteTable::default();
    w.applied(K, &rs("web-a"), &["10"], Some("10"), now);
    w.applied(K, &rs("web-a"), &[], Some("10"), now);
    assert!(!w.is_tracking(K));
    assert!(w.is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_cache_that_read_past_the_write_shows_it_even_without_the_object() {
    let now = Instant::now();
    let mut w = WriteTable::default();
    // Created, but outside what the cache holds (a selector): the object never appears.
    w.created(K, &rs("web-b"), Some("30"), now);
    let store = |rv: &'static str| move |_: &ResourceId| Some(rv.to_owned());
    assert!(matches!(
        w.check_with_stores(K, cache(&[]), store("29"), now),
        Check::Behind { .. }
    ));
    assert_eq!(
        w.check_with_stores(K, cache(&[]), store("30"), now),
        Check::Current
    );
    // A write of unknown outcome has no version to compare: the store does not settle it.
    w.update_unknown(K, &rs("web-a"), "10", now);
    assert_eq!(
        w.check_with_stores(K, cache(&[("web-a", "10")]), store("99"), now),
        Check::Verify(vec![rs("web-a")])
    );
}

#[tokio::test(start_paused = true)]
async fn a_create_holds_until_the_cache_has_the_object() {
    let now = Instant::now();
    let mut w = WriteTable::default();
    w.created(K, &rs("web-b"), Some("3"), now);
    assert!(matches!(w.check(K, cache(&[]), now), Check::Behind { .. }));
    assert_eq!(w.check(K, cache(&[("web-b", "3")]), now), Check::Current);
    assert_eq!(w.len(), 0);
}

#[tokio::test(start_paused = true)]
async fn an_unknown_update_is_verified_only_while_the_cache_holds_what_it_was_sent_against() {
    let now = Instant::now();
    let mut w = WriteTable::default();
    w.update_unknown(K, &rs("web-a"), "10", now);
    assert_eq!(
        w.check(K, cache(&[("web-a", "10")]), now),
        Check::Verify(vec![rs("web-a")])
    );
    // The cache moved on: whatever happened, it is newer than what the write was sent against.
    assert_eq!(w.check(K, cache(&[("web-a", "12")]), now), Check::Current);
}

#[tokio::test(start_paused = true)]
async fn a_live_read_tells_applied_from_not_applied() {
    let now = Instant::now();
    let mut w = WriteTable::default();
    w.update_unknown(K, &rs("web-a"), "10", now);
    w.resolve(K, &rs("web-a"), Some("10"), Live::At("11"), now);
    assert!(matches!(
        w.check(K, cache(&[("web-a", "10")]), now),
        Check::Behind { .. }
    ));
    assert_eq!(w.check(K, cache(&[("web-a", "11")]), now), Check::Current);

    w.update_unknown(K, &rs("web-a"), "11", now);
    w.resolve(K, &rs("web-a"), Some("11"), Live::At("11"), now);
    assert!(!w.is_tracking(K), "not applied: the cache is current");
}

#[tokio::test(start_paused = true)]
async fn an_unknown_create_is_verified_while_the_cache_lacks_the_object() {
    let now = Instant::now();
    let mut w = WriteTable::default();
    w.create_unknown(K, &rs("web-b"), now);
    assert_eq!(
        w.check(K, cache(&[]), now),
        Check::Verify(vec![rs("web-b")])
    );
    w.resolve(K, &rs("web-b"), None, Live::At("7"), now);
    assert!(matches!(w.check(K, cache(&[]), now), Check::Behind { .. }));
    w.resolve(K, &rs("web-b"), None, Live::NotFound, now);
    assert_eq!(w.check(K, cache(&[]), now), Check::Current);
}

#[tokio::test(start_paused = true)]
async fn a_record_the_cache_never_satisfies_is_verified_after_the_bound() {
    let now = Instant::now();
    let mut w = WriteTable::default();
    w.created(K, &rs("web-b"), None, now);
    let later = now + VERIFY_AFTER;
    assert_eq!(
        w.check(K, cache(&[]), later),
        Check::Verify(vec![rs("web-b")])
    );
    // Still on the server, still not cached: wait again, for the same bound.
    w.resolve(K, &rs("web-b"), None, Live::At("7"), later);
    assert_eq!(
        w.check(K, cache(&[]), later),
        Check::Behind {
            retry_in: VERIFY_AFTER
        }
    );
    // Deleted before the cache saw it: forgotten.
    w.resolve(K, &rs("web-b"), None, Live::NotFound, later + VERIFY_AFTER);
    assert!(!w.is_tracking(K));
}

#[tokio::test(start_paused = true)]
async fn records_are_per_key_and_per_resource_and_forgotten_with_the_key() {
    let now = Instant::now();
    let mut w = WriteTable::default();
    w.created(K, &rs("web-b"), None, now);
    // The same name in another resource is another object.
    w.created(K, &Target::of::<ConfigMap>("default", "web-b"), None, now);
    w.created("default/api", &rs("api-b"), None, now);
    assert_eq!(w.len(), 3);
    assert_eq!(w.check("default/other", cache(&[]), now), Check::Current);
    let only_rs =
        |t: &Target| (t.resource == ResourceId::of::<ReplicaSet>()).then(|| "1".to_owned());
    assert!(
        matches!(w.check(K, only_rs, now), Check::Behind { .. }),
        "the ConfigMap is still missing"
    );
    w.forget(K);
    assert!(!w.is_tracking(K));
    assert_eq!(w.len(), 1);
}

/// `OwnWrites` over a real cache and the in-memory API server.
fn tracked(fake: &FakeApi) -> (OwnWrites, Store<ConfigMap>) {
    let store: Store<ConfigMap> = Store::new();
    let writes = OwnWrites::new();
    let client = fake.client();
    writes.track(store.clone(), move |ns| Api::namespaced(client.clone(), ns));
    (writes, store)
}

fn config_map(name: &str) -> ConfigMap {
    let mut cm = ConfigMap::default();
    cm.metadata.namespace = Some("default".into());
    cm.metadata.name = Some(name.into());
    cm
}

#[tokio::test(start_paused = true)]
async fn writes_recorded_from_answers_wait_for_the_cache() {
    let fake = FakeApi::new();
    let (writes, store) = tracked(&fake);
    let api: Api<ConfigMap> = Api::namespaced(fake.client(), "default");

    let sent = config_map("app");
    let created = api.create(&PostParams::default(), &sent).await;
    writes.record_for_key(K, &sent, &created);
    let created = created.unwrap();
    assert!(matches!(
        writes.ensure_ready(K).await.unwrap(),
        Readiness::Behind { .. }
    ));
    store.insert(Arc::new(created.clone()));
    assert_eq!(writes.ensure_ready(K).await.unwrap(), Readiness::Ready);
    assert!(writes.is_empty());

    // An update against the cached version: behind while the cache holds that version.
    let mut changed = created.clone();
    changed.data = Some([("k".to_owned(), "v".to_owned())].into());
    let updated = api.update(&PostParams::default(), &changed).await;
    writes.record_for_key(K, &changed, &updated);
    assert!(matches!(
        writes.ensure_ready(K).await.unwrap(),
        Readiness::Behind { .. }
    ));
    store.insert(Arc::new(updated.unwrap()));
    assert_eq!(writes.ensure_ready(K).await.unwrap(), Readiness::Ready);

    // A refused write (a conflict: stale resourceVersion) records nothing.
    let refused = api.update(&PostParams::default(), &changed).await;
    assert!(refused.is_err());
    writes.record_for_key(K, &changed, &refused);
    assert!(writes.is_empty());

    // Writes of a resource without a cache here are not recorded.
    let other = ReplicaSet::default();
    writes.record_for_key(K, &other, &Ok(other.clone()));
    assert!(writes.is_empty());
    assert!(writes.tracks::<ConfigMap>() && !writes.tracks::<ReplicaSet>());
}

#[tokio::test(start_paused = true)]
async fn a_record_never_satisfied_is_read_live_after_the_bound() {
    let fake = FakeApi::new();
    let (writes, store) = tracked(&fake);
    let api: Api<ConfigMap> = Api::namespaced(fake.client(), "default");
    let sent = config_map("app");
    let created = api.create(&PostParams::default(), &sent).await;
    writes.record_for_key(K, &sent, &created);
    let Readiness::Behind { retry_in } = writes.ensure_ready(K).await.unwrap() else {
        panic!("behind");
    };
    assert_eq!(retry_in, DEFAULT_VERIFY_AFTER);
    fake.clear_actions();

    // The object is deleted before the cache ever saw it: after the bound one live read
    // shows it gone, and the key may act.
    api.delete("app", &kctrl_client::DeleteParams::default())
        .await
        .unwrap();
    fake.clear_actions();
    tokio::time::advance(DEFAULT_VERIFY_AFTER).await;
    assert_eq!(writes.ensure_ready(K).await.unwrap(), Readiness::Ready);
    let reads: Vec<&str> = fake.actions().iter().map(|a| a.verb()).collect();
    assert_eq!(reads, ["get"], "one live read");
    assert!(store.is_empty() && writes.is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_lost_answer_is_settled_by_one_live_read() {
    let fake = FakeApi::new();
    let (writes, store) = tracked(&fake);
    let api: Api<ConfigMap> = Api::namespaced(fake.client(), "default");
    let current = api
        .create(&PostParams::default(), &config_map("app"))
        .await
        .unwrap();
    store.insert(Arc::new(current.clone()));

    // The update is applied but its answer is lost (a 503 after the fact).
    let mut changed = current.clone();
    changed.data = Some([("k".to_owned(), "v".to_owned())].into());
    let applied = api.update(&PostParams::default(), &changed).await.unwrap();
    let lost: Result<ConfigMap, kctrl_client::Error> = Err(kctrl_client::Error::Api(Box::new(
        kctrl_client::ApiError::from_body(503, b"the answer was lost"),
    )));
    writes.record_for_key(K, &changed, &lost);
    fake.clear_actions();
    // The cache still holds what it was sent against: a live read shows the write applied.
    assert!(matches!(
        writes.ensure_ready(K).await.unwrap(),
        Readiness::Behind { .. }
    ));
    assert_eq!(fake.actions().len(), 1);
    store.insert(Arc::new(applied));
    assert_eq!(writes.ensure_ready(K).await.unwrap(), Readiness::Ready);
    assert_eq!(fake.actions().len(), 1, "no second live read");
}

/// Server-side apply with a second writer of the object: the cache holds 100, another writer
/// makes 105, our apply answers 110, and the event of 105 arrives first. The cache is below
/// what we wrote: behind, although 105 is no version our write replaced.
#[tokio::test(start_paused = true)]
async fn a_cache_between_the_replaced_and_the_written_version_is_behind() {
    let now = Instant::now();
    let mut w = WriteTable::default();
    w.applied(K, &rs("web-a"), &["100"], Some("110"), now);
    assert!(matches!(
        w.check(K, cache(&[("web-a", "105")]), now),
        Check::Behind { .. }
    ));
    assert!(w.is_tracking(K), "still waiting for 110");
    assert_eq!(w.check(K, cache(&[("web-a", "110")]), now), Check::Current);
}

/// A key whose live read keeps failing (no `get` permission) acts once its record is five
/// minutes old, as client-go's expectations expire.
#[tokio::test(start_paused = true)]
async fn a_live_read_that_keeps_failing_holds_the_key_for_five_minutes_at_most() {
    let fake = FakeApi::new();
    let (writes, store) = tracked(&fake);
    let api: Api<ConfigMap> = Api::namespaced(fake.client(), "default");
    let sent = config_map("app");
    let created = api.create(&PostParams::default(), &sent).await;
    writes.record_for_key(K, &sent, &created);
    fake.prepend_reactor("get", "configmaps", |_| {
        kctrl_fake::Reaction::Error(kctrl_client::Error::Api(Box::new(
            kctrl_client::ApiError::from_body(403, b"configmaps is forbidden"),
        )))
    });
    // The cache never shows the create (its watch is broken, say): due for a live read,
    // which fails, again and again.
    tokio::time::advance(DEFAULT_VERIFY_AFTER).await;
    assert!(writes.ensure_ready(K).await.is_err());
    tokio::time::advance(Duration::from_secs(240)).await;
    assert!(writes.ensure_ready(K).await.is_err());
    tokio::time::advance(Duration::from_secs(30)).await;
    assert_eq!(writes.ensure_ready(K).await.unwrap(), Readiness::Ready);
    assert!(writes.is_empty() && store.is_empty());
}

/// A cache of ConfigMaps whose informer delivers an update right after the own-writes check
/// has read the cache (its last read is of the store's version): the update lands between
/// the verdict and the end of the check.
struct RacingCache {
    store: Store<ConfigMap>,
    after_read: Mutex<Option<Box<dyn FnOnce() + Send>>>,
}

impl TrackedCache for RacingCache {
    fn cached_version(&self, namespace: &str, name: &str) -> Option<String> {
        self.store
            .get_namespaced(namespace, name)
            .and_then(|o| o.metadata.resource_version.clone())
    }

    /// The check's last read of the cache.
    fn store_version(&self) -> String {
        let rv = self.store.resource_version();
        let deliver = self.after_read.lock().unwrap().take();
        if let Some(deliver) = deliver {
            deliver();
        }
        rv
    }

    fn read_live(&self, _namespace: &str, _name: &str) -> LiveRead {
        Box::pin(async { panic!("no live read expected") })
    }
}

fn config_map_at(name: &str, rv: &str) -> Arc<ConfigMap> {
    let mut cm = config_map(name);
    cm.metadata.resource_version = Some(rv.into());
    Arc::new(cm)
}

/// The status write of a key is answered at 3 while the cache holds 2; its update event (which
/// a generation predicate filters out) arrives just after the check found the key behind. It
/// must still enqueue the key: the cache is current, nothing else would wake the key before
/// the bound.
#[tokio::test(start_paused = true)]
async fn an_update_landing_right_after_a_behind_verdict_enqueues_the_key() {
    use kctrl_informer::ResourceEventHandler;
    use kctrl_workqueue::{RateLimitingQueue, default_controller_rate_limiter};

    let key = "default/app";
    let store: Store<ConfigMap> = Store::new();
    store.insert(config_map_at("app", "2"));
    let racing = Arc::new(RacingCache {
        store: store.clone(),
        after_read: Mutex::new(None),
    });
    let writes = OwnWrites::new();
    writes.track_cache(ResourceId::of::<ConfigMap>(), racing.clone());
    let queue = RateLimitingQueue::new(default_controller_rate_limiter());
    let handler = Arc::new(crate::handlers::PrimaryHandler::<ConfigMap> {
        queue: queue.clone(),
        predicates: vec![crate::Predicate::generation_changed()],
        own_writes: writes.clone(),
        shard: crate::shard::GateCell::default(),
    });
    let sent = (*config_map_at("app", "2")).clone();
    let answer = (*config_map_at("app", "3")).clone();
    writes.record_for_key(key, &sent, &Ok(answer));

    *racing.after_read.lock().unwrap() = Some(Box::new({
        let store = store.clone();
        let handler = handler.clone();
        move || {
            let old = store.insert(config_map_at("app", "3")).unwrap();
            handler.on_update(&old, &config_map_at("app", "3"));
        }
    }));
    assert!(matches!(
        writes.ensure_ready(key).await.unwrap(),
        Readiness::Behind { .. }
    ));
    assert_eq!(
        queue.len(),
        1,
        "the update of the write the key waits for enqueues it"
    );
    assert_eq!(writes.ensure_ready(key).await.unwrap(), Readiness::Ready);
}

/// A reconcile deletes an owned object: until the deletion's event reaches the cache, the key
/// is not reconciled (it would act on the object it just deleted).
#[tokio::test(start_paused = true)]
async fn a_delete_holds_until_the_cache_no_longer_holds_the_object() {
    let fake = FakeApi::new();
    let (writes, store) = tracked(&fake);
    let api: Api<ConfigMap> = Api::namespaced(fake.client(), "default");
    let created = api
        .create(&PostParams::default(), &config_map("app"))
        .await
        .unwrap();
    store.insert(Arc::new(created.clone()));
    let answer = api.delete("app", &DeleteParams::default()).await;
    assert!(matches!(answer, Ok(DeleteOutcome::Deleted(_))));
    writes.record_delete_for_key(K, "default", "app", &answer);
    assert!(matches!(
        writes.ensure_ready(K).await.unwrap(),
        Readiness::Behind { .. }
    ));
    store.remove("default/app");
    assert_eq!(writes.ensure_ready(K).await.unwrap(), Readiness::Ready);
    assert!(writes.is_empty());

    // A delete the cache never held the object of leaves nothing to wait for.
    let gone = api.delete("app", &DeleteParams::default()).await;
    writes.record_delete_for_key(K, "default", "app", &gone);
    let answer: Result<DeleteOutcome<ConfigMap>, _> = Ok(DeleteOutcome::Deleted(
        k8s_openapi::apimachinery::pkg::apis::meta::v1::Status::default(),
    ));
    writes.record_delete_for_key(K, "default", "other", &answer);
    assert!(writes.is_empty());
}

/// A delete that waits on a finalizer answers with the object, marked for deletion: the
/// cache is current once it shows that version.
#[tokio::test(start_paused = true)]
async fn a_delete_waiting_on_a_finalizer_holds_until_the_cache_shows_the_marked_object() {
    let fake = FakeApi::new();
    let (writes, store) = tracked(&fake);
    let api: Api<ConfigMap> = Api::namespaced(fake.client(), "default");
    let mut sent = config_map("app");
    sent.metadata.finalizers = Some(vec!["example.com/cleanup".into()]);
    let created = api.create(&PostParams::default(), &sent).await.unwrap();
    store.insert(Arc::new(created.clone()));
    let answer = api.delete("app", &DeleteParams::default()).await;
    let Ok(DeleteOutcome::Pending(marked)) = &answer else {
        panic!("a finalizer keeps the object: {answer:?}");
    };
    let marked = marked.clone();
    writes.record_delete_for_key(K, "default", "app", &answer);
    assert!(matches!(
        writes.ensure_ready(K).await.unwrap(),
        Readiness::Behind { .. }
    ));
    store.insert(Arc::new(marked));
    assert_eq!(writes.ensure_ready(K).await.unwrap(), Readiness::Ready);
}

#[tokio::test(start_paused = true)]
async fn a_deleted_object_is_behind_at_the_versions_we_knew_and_current_when_recreated() {
    let now = Instant::now();
    let mut w = WriteTable::default();
    // Updated from 10 to 11, then deleted while the cache held 10.
    w.applied(K, &rs("web-a"), &["10"], Some("11"), now);
    w.deleted(K, &rs("web-a"), Some("10"), &[], now);
    for rv in ["10", "11"] {
        assert!(
            matches!(
                w.check(K, cache(&[("web-a", rv)]), now),
                Check::Behind { .. }
            ),
            "a cache holding {rv} has not seen the delete"
        );
    }
    // A new object of that name, created since, is not ours to wait for.
    assert_eq!(w.check(K, cache(&[("web-a", "20")]), now), Check::Current);

    w.deleted(K, &rs("web-a"), Some("20"), &[], now);
    assert_eq!(w.check(K, cache(&[]), now), Check::Current);
    assert!(!w.is_tracking(K));

    // A create then a delete before the cache saw either: the cache must not show the
    // created object (at 30) as current.
    w.created(K, &rs("web-b"), Some("30"), now);
    w.deleted(K, &rs("web-b"), None, &[], now);
    assert!(matches!(
        w.check(K, cache(&[("web-b", "30")]), now),
        Check::Behind { .. }
    ));
    assert_eq!(w.check(K, cache(&[]), now), Check::Current);
}

#[tokio::test(start_paused = true)]
async fn a_delete_of_unknown_outcome_is_settled_by_a_live_read() {
    let now = Instant::now();
    let mut w = WriteTable::default();
    w.delete_unknown(K, &rs("web-a"), "10", now);
    assert_eq!(
        w.check(K, cache(&[("web-a", "10")]), now),
        Check::Verify(vec![rs("web-a")])
    );
    // Gone on the server, still cached: applied, the cache is behind.
    w.resolve(K, &rs("web-a"), Some("10"), Live::NotFound, now);
    assert!(matches!(
        w.check(K, cache(&[("web-a", "10")]), now),
        Check::Behind { .. }
    ));
    assert_eq!(w.check(K, cache(&[]), now), Check::Current);

    // Still there at the cached version: not applied.
    w.delete_unknown(K, &rs("web-a"), "10", now);
    w.resolve(K, &rs("web-a"), Some("10"), Live::At("10"), now);
    assert!(!w.is_tracking(K));
}

/// A delete of unknown outcome that a live read finds applied: the cached object's UID is
/// behind at any version (another writer's update that came before the deletion), a new
/// object of that name is not.
#[tokio::test(start_paused = true)]
async fn a_delete_found_applied_by_a_live_read_holds_the_deleted_uid_at_any_version() {
    let now = Instant::now();
    let mut w = WriteTable::default();
    let at = |rv: &str, uid: &str| Cached {
        resource_version: rv.to_owned(),
        uid: Some(uid.to_owned()),
    };
    w.delete_unknown(K, &rs("web-a"), "10", now);
    w.resolve_cached(K, &rs("web-a"), Some(&at("10", "u1")), Live::NotFound, now);
    let check = |w: &mut WriteTable, cached: Option<Cached>| {
        w.check_cached(K, |_| cached.clone(), |_| None, now)
    };
    assert!(matches!(
        check(&mut w, Some(at("11", "u1"))),
        Check::Behind { .. }
    ));
    assert_eq!(check(&mut w, Some(at("12", "u2"))), Check::Current);
}

/// A Status answer's UID decides which object was deleted: a cache already holding a new
/// object of that name (another UID) is current, and an empty UID identifies nothing.
#[tokio::test(start_paused = true)]
async fn the_deleted_uid_is_the_answer_s_and_empty_uids_identify_nothing() {
    let now = Instant::now();
    let mut w = WriteTable::default();
    let at = |rv: &str, uid: &str| Cached {
        resource_version: rv.to_owned(),
        uid: Some(uid.to_owned()),
    };
    w.deleted(K, &rs("web-a"), Some("10"), &["", "u1"], now);
    let check = |w: &mut WriteTable, cached: Option<Cached>| {
        w.check_cached(K, |_| cached.clone(), |_| None, now)
    };
    assert!(matches!(
        check(&mut w, Some(at("11", "u1"))),
        Check::Behind { .. }
    ));
    assert_eq!(check(&mut w, Some(at("12", ""))), Check::Current);
}

/// Every record expires after five minutes, whatever the caches show: the key then acts.
#[tokio::test(start_paused = true)]
async fn records_expire_five_minutes_after_their_write() {
    let now = Instant::now();
    let mut w = WriteTable::default();
    w.created(K, &rs("web-b"), Some("3"), now);
    assert_eq!(w.expires_in(K, now), Some(DEFAULT_EXPIRE_AFTER));
    // A live read showing the cache behind makes the record wait again, not live longer.
    let later = now + DEFAULT_EXPIRE_AFTER - Duration::from_secs(10);
    w.resolve(K, &rs("web-b"), None, Live::At("3"), later);
    assert_eq!(
        w.check(K, cache(&[]), later),
        Check::Behind {
            retry_in: Duration::from_secs(10)
        }
    );
    assert_eq!(
        w.check(K, cache(&[]), now + DEFAULT_EXPIRE_AFTER),
        Check::Current
    );
    assert_eq!(w.expires_in(K, now), None);
}

/// Another writer updates an owned object (its event not cached yet), then a reconcile
/// deletes it and the API server answers with a Status. The update's event reaches the cache
/// before the deletion's: the cache holds the deleted object at a newer version, which is an
/// update that came before the delete, not a sign the cache saw it. The key waits until the
/// object is gone from the cache; a new object of that name (another UID) is current.
#[tokio::test(start_paused = true)]
async fn a_deleted_object_cached_at_a_newer_version_is_still_behind() {
    let fake = FakeApi::new();
    let (writes, store) = tracked(&fake);
    let api: Api<ConfigMap> = Api::namespaced(fake.client(), "default");
    let created = api
        .create(&PostParams::default(), &config_map("app"))
        .await
        .unwrap();
    store.insert(Arc::new(created.clone()));
    let mut other = created.clone();
    other.data = Some([("by".to_owned(), "someone else".to_owned())].into());
    let updated = api.update(&PostParams::default(), &other).await.unwrap();
    let answer = api.delete("app", &DeleteParams::default()).await;
    let Ok(DeleteOutcome::Deleted(status)) = &answer else {
        panic!("deleted at once: {answer:?}");
    };
    assert_eq!(
        status.details.as_ref().and_then(|d| d.uid.as_deref()),
        created.metadata.uid.as_deref()
    );
    writes.record_delete_for_key(K, "default", "app", &answer);
    assert!(matches!(
        writes.ensure_ready(K).await.unwrap(),
        Readiness::Behind { .. }
    ));
    // The other writer's update arrives first.
    store.insert(Arc::new(updated.clone()));
    assert!(
        matches!(
            writes.ensure_ready(K).await.unwrap(),
            Readiness::Behind { .. }
        ),
        "the cache still shows the deleted object"
    );
    store.remove("default/app");
    assert_eq!(writes.ensure_ready(K).await.unwrap(), Readiness::Ready);
    assert!(writes.is_empty());

    // An answer without the UID: the cached object's is the deleted one.
    let recreated = api
        .create(&PostParams::default(), &config_map("app"))
        .await
        .unwrap();
    store.insert(Arc::new(recreated.clone()));
    let bare: Result<DeleteOutcome<ConfigMap>, _> = Ok(DeleteOutcome::Deleted(
        k8s_openapi::apimachinery::pkg::apis::meta::v1::Status::default(),
    ));
    writes.record_delete_for_key(K, "default", "app", &bare);
    let mut newer = recreated.clone();
    newer.metadata.resource_version = Some("999999".into());
    store.insert(Arc::new(newer));
    assert!(matches!(
        writes.ensure_ready(K).await.unwrap(),
        Readiness::Behind { .. }
    ));
    // A new object of that name, another UID: current.
    let mut third = recreated.clone();
    third.metadata.uid = Some("another-uid".into());
    store.insert(Arc::new(third));
    assert_eq!(writes.ensure_ready(K).await.unwrap(), Readiness::Ready);
    assert!(writes.is_empty());
}

/// The records of a key that is never checked again (its object was deleted while its
/// reconcile wrote) are swept out once expired, as other writes are recorded: the table holds
/// the writes of the last few minutes, not every write ever made.
#[tokio::test(start_paused = true)]
async fn expired_records_of_keys_never_checked_again_are_swept_out() {
    let start = Instant::now();
    let mut w = WriteTable::default();
    for i in 0..100 {
        w.update_unknown(&format!("default/gone-{i}"), &rs("web"), "10", start);
    }
    assert_eq!(w.len(), 100);
    // Within the expiry, nothing goes.
    let before_expiry = start + DEFAULT_EXPIRE_AFTER - Duration::from_secs(1);
    w.created(K, &rs("web-a"), Some("3"), before_expiry);
    assert_eq!(w.len(), 101);
    // Past it, the next record sweeps the expired ones out, those of the live key stay.
    let later = start + DEFAULT_EXPIRE_AFTER + DEFAULT_EXPIRE_AFTER / SWEEP_FRACTION;
    w.created(K, &rs("web-b"), Some("4"), later);
    assert_eq!(w.len(), 2, "only the last five minutes' writes stay");
    assert!(!w.is_tracking("default/gone-0"));
    assert!(w.is_tracking(K));
}

use std::sync::Arc;

use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::ConfigMap;
use kctrl_client::{Api, PostParams};
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

//! One key through `process`: what the reconcile gets after the own-writes check, and how a
//! requeue is filed.

use std::sync::Mutex;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use kctrl_client::{Api, PostParams};
use kctrl_fake::{FakeApi, Reaction};
use kctrl_workqueue::default_controller_rate_limiter;

use super::*;
use crate::own_writes::Target;

#[derive(Debug, thiserror::Error)]
#[error("reconcile failed")]
struct Failed;

const KEY: &str = "shop/web";

fn deployment(rv: Option<&str>) -> Deployment {
    let mut d = Deployment::default();
    d.metadata.namespace = Some("shop".into());
    d.metadata.name = Some("web".into());
    d.metadata.resource_version = rv.map(str::to_owned);
    d
}

/// What the workers share, with a reconcile answering `answer` and noting the
/// resourceVersion it was given in `seen`.
#[allow(clippy::type_complexity)]
fn shared(
    store: Store<Deployment>,
    own_writes: OwnWrites,
    answer: fn() -> Result<Action, Failed>,
    seen: Arc<Mutex<Vec<String>>>,
) -> Shared<
    Deployment,
    (),
    impl Fn(Arc<Deployment>, Arc<()>) -> std::future::Ready<Result<Action, Failed>>
    + Send
    + Sync
    + 'static,
    impl Fn(Arc<Deployment>, &Failed, Arc<()>) -> Action + Send + Sync + 'static,
> {
    Shared {
        name: "deployment".into(),
        queue: RateLimitingQueue::new(default_controller_rate_limiter()),
        store,
        reconcile: move |d: Arc<Deployment>, _ctx: Arc<()>| {
            let rv = d.metadata.resource_version.clone().unwrap_or_default();
            seen.lock().unwrap().push(rv);
            std::future::ready(answer())
        },
        error_policy: |_d: Arc<Deployment>, _err: &Failed, _ctx: Arc<()>| Action::rate_limited(),
        ctx: Arc::new(()),
        max_retries: None,
        metrics: None,
        own_writes,
        in_flight: std::sync::atomic::AtomicUsize::new(0),
        shard: None,
    }
}

/// `Ok(Action::rate_limited())` (controller-runtime's `Requeue: true`) keeps the key's
/// failures: each requeue waits longer. A plain success forgets them.
#[tokio::test(start_paused = true)]
async fn a_rate_limited_requeue_backs_off_per_key() {
    let store = Store::new();
    store.insert(Arc::new(deployment(Some("5"))));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = shared(
        store.clone(),
        OwnWrites::new(),
        || Ok(Action::rate_limited()),
        seen.clone(),
    );
    let key: ObjectKey = KEY.into();
    for n in 1..=3 {
        process(&s, &key).await;
        assert_eq!(s.queue.num_requeues(&key), n, "requeue {n} counts");
    }
    let s = shared(store, OwnWrites::new(), || Ok(Action::await_change()), seen);
    s.queue.add_rate_limited(key.clone());
    process(&s, &key).await;
    assert_eq!(s.queue.num_requeues(&key), 0, "a success forgets");
}

/// The own-writes check reads the primary live (its last write's answer was lost); meanwhile
/// the write's event reaches the cache. The reconcile gets the object the check waited for,
/// not the one cached before it.
#[tokio::test(start_paused = true)]
async fn the_reconcile_gets_the_object_as_cached_after_the_own_writes_check() {
    let fake = FakeApi::new();
    let api: Api<Deployment> = Api::namespaced(fake.client(), "shop");
    let before = api
        .create(&PostParams::default(), &deployment(None))
        .await
        .unwrap();
    let store = Store::new();
    store.insert(Arc::new(before.clone()));
    // The reconcile's update was applied, but its answer was lost.
    let mut changed = before.clone();
    changed.metadata.labels = Some([("v".to_owned(), "2".to_owned())].into());
    let after = api.update(&PostParams::default(), &changed).await.unwrap();
    let own_writes = OwnWrites::new();
    own_writes.track(store.clone(), {
        let client = fake.client();
        move |ns| Api::namespaced(client.clone(), ns)
    });
    let lost = kctrl_client::Error::Api(Box::new(kctrl_client::ApiError::from_body(
        503,
        b"the answer was lost",
    )));
    own_writes.record_outcome(
        KEY,
        &Target::of::<Deployment>("shop", "web"),
        before.metadata.resource_version.as_deref(),
        Err(&lost),
    );
    // The write's event reaches the cache while the check reads the object live.
    fake.prepend_reactor("get", "deployments", {
        let store = store.clone();
        let after = after.clone();
        move |_| {
            store.insert(Arc::new(after.clone()));
            Reaction::Continue
        }
    });
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = shared(
        store,
        own_writes,
        || Ok(Action::await_change()),
        seen.clone(),
    );
    process(&s, &KEY.into()).await;
    assert_eq!(
        *seen.lock().unwrap(),
        [after.metadata.resource_version.unwrap()],
        "reconciled the object the check waited for"
    );
}

/// A key whose own-writes live read keeps failing (no `get` permission) is retried at the
/// latest when its record expires, however long its backoff has grown; then it reconciles.
#[tokio::test(start_paused = true)]
async fn a_key_whose_live_read_keeps_failing_reconciles_when_its_record_expires() {
    let fake = FakeApi::new();
    let api: Api<Deployment> = Api::namespaced(fake.client(), "shop");
    let created = api
        .create(&PostParams::default(), &deployment(None))
        .await
        .unwrap();
    let store = Store::new();
    store.insert(Arc::new(created.clone()));
    let own_writes = OwnWrites::new();
    own_writes.track(store.clone(), {
        let client = fake.client();
        move |ns| Api::namespaced(client.clone(), ns)
    });
    // An update applied whose answer was lost: only a live read can tell.
    let lost = kctrl_client::Error::Api(Box::new(kctrl_client::ApiError::from_body(
        503,
        b"the answer was lost",
    )));
    own_writes.record_outcome(
        KEY,
        &Target::of::<Deployment>("shop", "web"),
        created.metadata.resource_version.as_deref(),
        Err(&lost),
    );
    fake.prepend_reactor("get", "deployments", |_| {
        Reaction::Error(kctrl_client::Error::Api(Box::new(
            kctrl_client::ApiError::from_body(403, b"deployments is forbidden"),
        )))
    });
    let seen = Arc::new(Mutex::new(Vec::new()));
    let mut s = shared(
        store,
        own_writes,
        || Ok(Action::await_change()),
        seen.clone(),
    );
    // A backoff already longer than the expiry.
    let long = Duration::from_secs(1000);
    s.queue = RateLimitingQueue::new(kctrl_workqueue::ItemExponentialFailureRateLimiter::new(
        long, long,
    ));
    let key: ObjectKey = KEY.into();
    process(&s, &key).await;
    assert!(seen.lock().unwrap().is_empty(), "the live read failed");
    let next = tokio::time::timeout(
        crate::own_writes::DEFAULT_EXPIRE_AFTER + Duration::from_secs(1),
        s.queue.get(),
    )
    .await
    .expect("retried when the record expires, before the backoff");
    assert_eq!(next.as_deref(), Some(KEY));
    process(&s, &key).await;
    s.queue.done(&key);
    assert_eq!(seen.lock().unwrap().len(), 1, "reconciled on the caches");
}

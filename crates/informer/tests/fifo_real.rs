//! Ports of client-go's `the_real_fifo_test.go`, atomic mode (the 1.36 default): a replace
//! is one `ReplacedAll`, a resync one `SyncAll`, bookmarks are queued.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kctrl_informer::fifo::{DEFAULT_BATCH_SIZE, Fifo, Transform};
use kctrl_informer::{Delta, ReflectorStore, Store};

fn obj(name: &str, val: u64) -> Arc<ConfigMap> {
    Arc::new(ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("ns".into()),
            ..Default::default()
        },
        data: Some(BTreeMap::from([("val".into(), val.to_string())])),
        ..Default::default()
    })
}

fn val(o: &ConfigMap) -> u64 {
    o.data.as_ref().unwrap()["val"].parse().unwrap()
}

fn name(o: &ConfigMap) -> &str {
    o.metadata.name.as_deref().unwrap()
}

/// A delta as a short string: `A:foo=1`, `U:…`, `D:…`, `RA@rv[foo=1,…]`, `SyncAll`, `BM@rv`.
fn describe(d: &Delta<ConfigMap>) -> String {
    let one = |o: &ConfigMap| format!("{}={}", name(o), val(o));
    match d {
        Delta::Added(o) => format!("A:{}", one(o)),
        Delta::Updated(o) => format!("U:{}", one(o)),
        Delta::Deleted(o) => format!("D:{}", one(o)),
        Delta::ReplacedAll {
            objects,
            resource_version,
            ..
        } => {
            let objs: Vec<_> = objects.iter().map(|o| one(o)).collect();
            format!("RA@{resource_version}[{}]", objs.join(","))
        }
        Delta::Resharded(r) => {
            let objs: Vec<_> = r.objects.iter().map(|o| one(o)).collect();
            format!("RS[{}]", objs.join(","))
        }
        Delta::SyncAll => "SyncAll".into(),
        Delta::Bookmark(rv) => format!("BM@{rv}"),
    }
}

/// Something done to a queue in a table case.
type Action = fn(&Fifo<ConfigMap>);

/// Pops everything queued (without waiting), describing each delta.
async fn drain(f: &Fifo<ConfigMap>) -> Vec<String> {
    let mut out = Vec::new();
    while !f.is_empty() {
        out.push(f.pop(|d, _| describe(&d)).await.unwrap());
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_real_fifo_basic() {
    let f: Fifo<ConfigMap> = Fifo::new(None);
    const AMOUNT: u64 = 500;
    let producers: Vec<_> = ["a", "b"]
        .into_iter()
        .map(|prefix| {
            let f = f.clone();
            std::thread::spawn(move || {
                for i in 0..AMOUNT {
                    f.add(obj(&format!("{prefix}{i}"), i + 1));
                }
            })
        })
        .collect();
    let mut last = BTreeMap::from([('a', 0), ('b', 0)]);
    for _ in 0..AMOUNT * 2 {
        let (producer, v) = f
            .pop(|d, _| match d {
                Delta::Added(o) => (name(&o).chars().next().unwrap(), val(&o)),
                other => panic!("unexpected {}", describe(&other)),
            })
            .await
            .unwrap();
        let prev = last.insert(producer, v).unwrap();
        assert!(
            v > prev,
            "{producer}: got {v} out of order, last was {prev}"
        );
    }
    for p in producers {
        p.join().unwrap();
    }
    assert!(f.is_empty());
}

/// Every event is kept, in order: nothing collapses per key (unlike DeltaFIFO).
#[tokio::test]
async fn test_real_fifo_add_update_keeps_every_event() {
    let f: Fifo<ConfigMap> = Fifo::new(None);
    f.add(obj("foo", 10));
    f.update(obj("foo", 12));
    f.delete(obj("foo", 15));
    f.add(obj("foo", 16));
    assert_eq!(f.len(), 4);
    assert_eq!(
        drain(&f).await,
        ["A:foo=10", "U:foo=12", "D:foo=15", "A:foo=16"]
    );
}

#[tokio::test]
async fn test_real_fifo_transformer() {
    // Counts its calls on each object in the object itself ("xfrm" annotation).
    let calls = Arc::new(AtomicUsize::new(0));
    let transform: Transform<ConfigMap> = {
        let calls = calls.clone();
        Arc::new(move |mut o: ConfigMap| {
            calls.fetch_add(1, Ordering::SeqCst);
            let ann = o.metadata.annotations.get_or_insert_default();
            let n: u32 = ann.get("xfrm").map_or(0, |v| v.parse().unwrap());
            ann.insert("xfrm".into(), (n + 1).to_string());
            o
        })
    };
    let f = Fifo::new(Some(transform));
    f.add(obj("foo", 10));
    f.add(obj("bar", 11));
    f.update(obj("foo", 12));
    f.delete(obj("foo", 15));
    f.replace(vec![obj("bar", 11)], "20".into());
    f.add(obj("bar", 16));
    f.replace(vec![], "30".into());
    f.resync();
    f.bookmark("40".into());
    assert_eq!(calls.load(Ordering::SeqCst), 6, "once per object");

    let mut seen = Vec::new();
    while !f.is_empty() {
        f.pop(|d, _| {
            let objs: Vec<Arc<ConfigMap>> = match &d {
                Delta::Added(o) | Delta::Updated(o) | Delta::Deleted(o) => vec![o.clone()],
                Delta::ReplacedAll { objects, .. } => objects.clone(),
                Delta::Resharded(r) => r.objects.clone(),
                Delta::SyncAll | Delta::Bookmark(_) => vec![],
            };
            for o in objs {
                let ann = o.metadata.annotations.as_ref().expect("transformed");
                assert_eq!(ann["xfrm"], "1", "{} transformed once", describe(&d));
            }
            seen.push(describe(&d));
        })
        .await
        .unwrap();
    }
    assert_eq!(
        seen,
        [
            "A:foo=10",
            "A:bar=11",
            "U:foo=12",
            "D:foo=15",
            "RA@20[bar=11]",
            "A:bar=16",
            "RA@30[]",
            "SyncAll",
            "BM@40",
        ]
    );
}

#[tokio::test]
async fn test_real_fifo_replace_atomic() {
    let cases: [(&str, Action, &[&str]); 4] = [
        (
            "base replace",
            |f| f.replace(vec![], "123".into()),
            &["RA@123[]"],
        ),
        (
            "added object stays queued before an atomic replace",
            |f| {
                f.add(obj("foo", 2));
                f.replace(vec![], "123".into());
            },
            &["A:foo=2", "RA@123[]"],
        ),
        (
            "multiple replaces run in order",
            |f| {
                f.add(obj("foo", 2));
                f.replace(vec![obj("foo", 2)], "10".into());
                f.replace(vec![obj("foo", 2)], "20".into());
                f.replace(vec![], "56".into());
            },
            &["A:foo=2", "RA@10[foo=2]", "RA@20[foo=2]", "RA@56[]"],
        ),
        (
            "bookmark is not part of the replace",
            |f| {
                f.bookmark("123".into());
                f.replace(vec![], "1234".into());
            },
            &["BM@123", "RA@1234[]"],
        ),
    ];
    for (case, ops, expected) in cases {
        let f = Fifo::new(None);
        ops(&f);
        assert_eq!(drain(&f).await, expected, "{case}");
        assert!(f.is_empty(), "{case}: no extra deltas");
    }
}

#[tokio::test(start_paused = true)]
async fn test_real_fifo_replace_atomic_pop() {
    let f = Fifo::new(None);
    f.add(obj("foo", 10));
    f.replace(vec![obj("foo", 15)], "20".into());
    assert_eq!(f.pop(|d, _| describe(&d)).await.unwrap(), "A:foo=10");
    assert_eq!(f.pop(|d, _| describe(&d)).await.unwrap(), "RA@20[foo=15]");
    // Nothing else: a further pop waits (the paused clock advances the timeout at once).
    let more = tokio::time::timeout(Duration::from_millis(50), f.pop(|d, _| describe(&d))).await;
    assert!(more.is_err(), "got an unexpected second value: {more:?}");
    assert!(f.is_empty(), "item did not get removed");
    f.close();
    assert_eq!(f.pop(|d, _| describe(&d)).await, None);
}

#[tokio::test]
async fn test_real_fifo_resync_atomic() {
    let f = Fifo::new(None);
    f.resync();
    assert_eq!(drain(&f).await, ["SyncAll"], "base resync");

    let f = Fifo::new(None);
    f.add(obj("foo", 2));
    f.resync();
    assert_eq!(
        drain(&f).await,
        ["A:foo=2", "SyncAll"],
        "added object stays before"
    );
}

/// client-go's table, in atomic mode: a replace is ONE delta, so an empty first replace
/// is synced only once its `ReplacedAll` is processed (not immediately), and two listed
/// objects take one pop, not two.
#[tokio::test]
async fn test_real_fifo_has_synced() {
    let replace_ab: Action = |f| f.replace(vec![obj("a", 1), obj("b", 2)], "0".into());
    let cases: Vec<(Vec<Action>, usize, bool)> = vec![
        // (actions, then pops, expected has_synced)
        (vec![], 0, false),
        (vec![|f| f.add(obj("a", 1))], 0, true),
        (vec![|f| f.update(obj("a", 1))], 0, true),
        (vec![|f| f.delete(obj("a", 1))], 0, true),
        (vec![|f| f.replace(vec![], "0".into())], 0, false),
        (vec![|f| f.replace(vec![], "0".into())], 1, true),
        (vec![replace_ab], 0, false),
        (vec![replace_ab], 1, true),
        // Duplicates in a list (a broken apiserver) are still one delta.
        (
            vec![|f| f.replace(vec![obj("a", 1), obj("a", 2)], "0".into())],
            1,
            true,
        ),
        // An event before the first replace: synced at once.
        (vec![|f| f.add(obj("a", 1)), replace_ab], 0, true),
        // Whatever is queued before the first replace is part of the initial population.
        (vec![|f| f.resync(), replace_ab], 1, false),
        (vec![|f| f.resync(), replace_ab], 2, true),
        (vec![|f| f.bookmark("1".into()), replace_ab], 1, false),
        (vec![|f| f.bookmark("1".into()), replace_ab], 2, true),
        // Resync or bookmark alone does not populate.
        (vec![|f| f.resync()], 1, false),
        (vec![|f| f.bookmark("1".into())], 1, false),
        // A second replace changes nothing.
        (vec![replace_ab, replace_ab], 1, true),
    ];
    for (i, (actions, pops, expected)) in cases.into_iter().enumerate() {
        let f = Fifo::new(None);
        for action in actions {
            action(&f);
        }
        for _ in 0..pops {
            f.pop(|_, _| ()).await.unwrap();
        }
        assert_eq!(f.has_synced(), expected, "case {i}");
    }
}

/// The initial list counts as processed only after `process` returned; deltas popped
/// before that are "in the initial list", later ones are not.
#[tokio::test]
async fn test_real_fifo_has_synced_after_processing() {
    let f = Fifo::new(None);
    f.resync();
    f.replace(vec![obj("a", 1)], "1".into());
    f.add(obj("b", 2));
    let mut flags = Vec::new();
    for _ in 0..3 {
        let (initial, synced_during) = f.pop(|_, initial| (initial, f.has_synced())).await.unwrap();
        flags.push((initial, synced_during, f.has_synced()));
    }
    assert_eq!(
        flags,
        [
            (true, false, false), // SyncAll
            (true, false, true),  // ReplacedAll: synced once processed
            (false, true, true),  // A:b
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn test_real_fifo_synced_waits_without_polling() {
    let f: Fifo<ConfigMap> = Fifo::new(None);
    let waiter = tokio::spawn({
        let f = f.clone();
        async move { f.synced().await }
    });
    f.replace(vec![obj("a", 1)], "1".into());
    tokio::task::yield_now().await;
    assert!(!waiter.is_finished());
    f.pop(|_, _| ()).await.unwrap();
    assert!(
        tokio::time::timeout(Duration::from_secs(1), waiter)
            .await
            .expect("synced() returned")
            .unwrap()
    );
    assert!(f.synced().await, "already synced: returns at once");

    // Closed before syncing: false, not a hang.
    let f: Fifo<ConfigMap> = Fifo::new(None);
    f.replace(vec![], "1".into());
    let waiter = tokio::spawn({
        let f = f.clone();
        async move { f.synced().await }
    });
    f.close();
    assert!(
        !tokio::time::timeout(Duration::from_secs(1), waiter)
            .await
            .expect("synced() returned")
            .unwrap()
    );
}

#[tokio::test(start_paused = true)]
async fn test_real_fifo_pop_should_unblock_when_closed() {
    let f: Fifo<ConfigMap> = Fifo::new(None);
    let jobs: Vec<_> = (0..10)
        .map(|_| {
            let f = f.clone();
            tokio::spawn(async move { f.pop(|_, _| ()).await })
        })
        .collect();
    tokio::task::yield_now().await;
    assert!(!f.is_closed());
    f.close();
    assert!(f.is_closed());
    for job in jobs {
        let popped = tokio::time::timeout(Duration::from_millis(500), job)
            .await
            .expect("timed out waiting for pop to return after close")
            .unwrap();
        assert_eq!(popped, None);
    }
    let batch = f.pop_batch(10, |b, _| b.len()).await;
    assert_eq!(batch, None);
}

#[tokio::test]
async fn test_real_fifo_close_drains_queued_items_first() {
    let f = Fifo::new(None);
    f.add(obj("a", 1));
    f.add(obj("b", 2));
    f.close();
    assert_eq!(f.pop(|d, _| describe(&d)).await.as_deref(), Some("A:a=1"));
    assert_eq!(
        f.pop_batch(10, |b, _| b.iter().map(describe).collect::<Vec<_>>())
            .await
            .unwrap(),
        ["A:b=2"]
    );
    assert_eq!(f.pop(|d, _| describe(&d)).await, None);
}

/// client-go's `TestRealFIFO_PopMultipleDeltaInBatch` cases, mapped to atomic mode (the
/// initial list is one `ReplacedAll`, popped alone), plus the unbatchable deltas.
#[tokio::test]
async fn test_real_fifo_pop_multiple_delta_in_batch() {
    const UNLIMITED: usize = 999_999;
    let u = |n: &str| obj(n, 5);
    // (case, initial list, then actions, max batch, expected batches)
    type Case = (
        &'static str,
        Vec<Arc<ConfigMap>>,
        Vec<Action>,
        usize,
        Batches,
    );
    type Batches = Vec<Vec<&'static str>>;
    let cases: Vec<Case> = vec![
        (
            "non-split: pop unique items",
            vec![],
            vec![
                |f| f.update(obj("foo1", 5)),
                |f| f.update(obj("foo2", 5)),
                |f| f.update(obj("foo3", 5)),
            ],
            UNLIMITED,
            vec![vec!["U:foo1=5", "U:foo2=5", "U:foo3=5"]],
        ),
        (
            "split due to initial list",
            vec![u("foo1"), u("foo2")],
            vec![|f| f.update(obj("foo3", 5)), |f| f.update(obj("foo4", 5))],
            2,
            vec![vec!["RA@123[foo1=5,foo2=5]"], vec!["U:foo3=5", "U:foo4=5"]],
        ),
        (
            "split due to non-unique#1: one item updated twice",
            vec![u("foo1")],
            vec![|f| f.update(obj("foo1", 5)), |f| f.update(obj("foo1", 5))],
            UNLIMITED,
            vec![vec!["RA@123[foo1=5]"], vec!["U:foo1=5"], vec!["U:foo1=5"]],
        ),
        (
            "split due to non-unique#2: duplicate at the end",
            vec![],
            vec![
                |f| f.update(obj("foo1", 5)),
                |f| f.update(obj("foo2", 5)),
                |f| f.update(obj("foo3", 5)),
                |f| f.update(obj("foo3", 5)),
            ],
            UNLIMITED,
            vec![vec!["U:foo1=5", "U:foo2=5", "U:foo3=5"], vec!["U:foo3=5"]],
        ),
        (
            "split due to non-unique#3: duplicate in the middle",
            vec![],
            vec![
                |f| f.update(obj("foo1", 5)),
                |f| f.update(obj("foo2", 5)),
                |f| f.delete(obj("foo1", 5)),
                |f| f.update(obj("foo3", 5)),
            ],
            UNLIMITED,
            vec![vec!["U:foo1=5", "U:foo2=5"], vec!["D:foo1=5", "U:foo3=5"]],
        ),
        (
            "split due to batch size#2: non-initial deltas",
            vec![],
            vec![
                |f| f.update(obj("foo1", 5)),
                |f| f.update(obj("foo2", 5)),
                |f| f.update(obj("foo3", 5)),
            ],
            2,
            vec![vec!["U:foo1=5", "U:foo2=5"], vec!["U:foo3=5"]],
        ),
        (
            "split due to batch size#3: initial list then an update",
            vec![u("foo1"), u("foo2"), u("foo3")],
            vec![|f| f.update(obj("foo4", 5))],
            2,
            vec![vec!["RA@123[foo1=5,foo2=5,foo3=5]"], vec!["U:foo4=5"]],
        ),
        (
            "unbatchable deltas come alone",
            vec![],
            vec![
                |f| f.add(obj("foo1", 5)),
                |f| f.resync(),
                |f| f.bookmark("7".into()),
                |f| f.add(obj("foo2", 5)),
                |f| f.replace(vec![], "8".into()),
                |f| f.add(obj("foo3", 5)),
            ],
            UNLIMITED,
            vec![
                vec!["A:foo1=5"],
                vec!["SyncAll"],
                vec!["BM@7"],
                vec!["A:foo2=5"],
                vec!["RA@8[]"],
                vec!["A:foo3=5"],
            ],
        ),
        (
            "max 0 pops one",
            vec![],
            vec![|f| f.update(obj("foo1", 5)), |f| f.update(obj("foo2", 5))],
            0,
            vec![vec!["U:foo1=5"], vec!["U:foo2=5"]],
        ),
    ];
    for (case, initial, actions, max, expected) in cases {
        let f = Fifo::new(None);
        if !initial.is_empty() {
            f.replace(initial, "123".into());
        }
        for action in actions {
            action(&f);
        }
        let mut batches = Vec::new();
        while !f.is_empty() {
            let batch = f
                .pop_batch(max, |b, _| b.iter().map(describe).collect::<Vec<_>>())
                .await
                .unwrap();
            batches.push(batch);
        }
        assert_eq!(batches, expected, "{case}");
    }
}

/// A batch never crosses the end of the initial population, so all its deltas share one
/// `is_in_initial_list`.
#[tokio::test]
async fn test_real_fifo_pop_batch_stops_at_initial_population() {
    let f = Fifo::new(None);
    f.resync();
    f.replace(vec![obj("a", 1)], "1".into());
    f.add(obj("b", 1));
    f.add(obj("c", 1));
    let mut got = Vec::new();
    while !f.is_empty() {
        got.push(
            f.pop_batch(DEFAULT_BATCH_SIZE, |b, initial| (b.len(), initial))
                .await
                .unwrap(),
        );
    }
    assert_eq!(got, [(1, true), (1, true), (2, false)]);
    assert!(f.has_synced());
}

/// The consumer side end to end: batches applied to a store in one transaction each,
/// a relist diffed against the cache.
#[tokio::test]
async fn fifo_feeds_store_through_transactions() {
    let f = Fifo::new(None);
    let store: Store<ConfigMap> = Store::new();
    f.replace(vec![obj("a", 1), obj("b", 1)], "10".into());
    f.update(obj("a", 2));
    f.delete(obj("b", 1));
    f.add(obj("c", 1));
    f.replace(vec![obj("c", 2), obj("d", 1)], "20".into());
    f.close();

    let mut events = Vec::new();
    while let Some(batch_events) = f
        .pop_batch(DEFAULT_BATCH_SIZE, |batch, _| {
            store.transaction(|txn| {
                let mut ev = Vec::new();
                for d in batch {
                    match d {
                        Delta::Added(o) | Delta::Updated(o) => {
                            let n = format!("{}={}", name(&o), val(&o));
                            match txn.insert(o) {
                                Some(_) => ev.push(format!("update {n}")),
                                None => ev.push(format!("add {n}")),
                            }
                        }
                        Delta::Deleted(o) => {
                            txn.remove_object(&o);
                            ev.push(format!("delete {}", name(&o)));
                        }
                        Delta::ReplacedAll {
                            objects,
                            resource_version,
                            ..
                        } => {
                            let diff = txn.replace(objects, resource_version);
                            for (key, _) in diff.deleted {
                                ev.push(format!("delete-unknown {key}"));
                            }
                            for (old, new) in diff.replaced {
                                let n = format!("{}={}", name(&new), val(&new));
                                ev.push(match old {
                                    Some(_) => format!("update {n}"),
                                    None => format!("add {n}"),
                                });
                            }
                        }
                        // Only a reflector with a shard scope queues these.
                        Delta::Resharded(_) | Delta::SyncAll => {}
                        Delta::Bookmark(rv) => txn.set_resource_version(rv),
                    }
                }
                ev
            })
        })
        .await
    {
        events.extend(batch_events);
    }
    assert_eq!(
        events,
        [
            "add a=1",
            "add b=1",
            "update a=2",
            "delete b",
            "add c=1",
            "delete-unknown ns/a",
            "update c=2",
            "add d=1",
        ]
    );
    let mut keys = store.list_keys();
    keys.sort();
    assert_eq!(keys, ["ns/c", "ns/d"]);
    assert_eq!(store.resource_version(), "20");
}

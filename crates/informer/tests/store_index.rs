//! Ports of client-go's `store_test.go`, `thread_safe_store_test.go`, `index_test.go` and
//! `listers_test.go`, on our `Store` (objects are ConfigMaps; a test's "val" is a label).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kctrl_client::labels::Selector;
use kctrl_informer::store::{IndexFn, NAMESPACE_INDEX, StoreError};
use kctrl_informer::{Lister, ReflectorStore, Store, Transform};

fn cm(ns: Option<&str>, name: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: ns.map(Into::into),
            ..Default::default()
        },
        ..Default::default()
    }
}

/// client-go's `testStoreObject{id, val}`: keyed by `id`, indexed by `val`.
fn mk(id: &str, val: &str) -> ConfigMap {
    let mut o = cm(None, id);
    o.metadata.labels = Some(BTreeMap::from([("val".into(), val.into())]));
    o
}

fn val_of(o: &ConfigMap) -> &str {
    &o.metadata.labels.as_ref().unwrap()["val"]
}

fn with_rv(name: &str, rv: Option<&str>) -> ConfigMap {
    let mut o = cm(None, name);
    o.metadata.resource_version = rv.map(Into::into);
    o
}

/// Index function: the comma-separated values of annotation `users` (or of the name when
/// there is no such annotation — client-go's string objects indexed by themselves).
fn comma_values() -> IndexFn<ConfigMap> {
    Arc::new(|o: &ConfigMap| {
        let src = o
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("users"))
            .cloned()
            .unwrap_or_else(|| o.metadata.name.clone().unwrap());
        src.split(',').map(str::to_owned).collect()
    })
}

fn by_val() -> IndexFn<ConfigMap> {
    Arc::new(|o: &ConfigMap| vec![val_of(o).to_owned()])
}

fn with_users(name: &str, users: &str) -> ConfigMap {
    let mut o = cm(None, name);
    o.metadata.annotations = Some(BTreeMap::from([("users".into(), users.into())]));
    o
}

fn vals(objs: &[Arc<ConfigMap>]) -> BTreeSet<String> {
    objs.iter().map(|o| val_of(o).to_owned()).collect()
}

fn names(objs: &[Arc<ConfigMap>]) -> BTreeSet<String> {
    objs.iter()
        .map(|o| o.metadata.name.clone().unwrap())
        .collect()
}

fn set(items: &[&str]) -> BTreeSet<String> {
    items.iter().map(|s| s.to_string()).collect()
}

/// client-go's `doTestStore`, through the reflector-facing API (add/update/delete/replace).
fn do_test_store(store: &Store<ConfigMap>) {
    store.add(Arc::new(mk("foo", "bar")));
    assert_eq!(val_of(&store.get("foo").expect("inserted item")), "bar");
    store.update(Arc::new(mk("foo", "baz")));
    assert_eq!(val_of(&store.get("foo").expect("updated item")), "baz");
    store.delete(Arc::new(mk("foo", "")));
    assert!(store.get("foo").is_none(), "found deleted item");

    store.add(Arc::new(mk("a", "b")));
    store.add(Arc::new(mk("c", "d")));
    store.add(Arc::new(mk("e", "e")));
    assert_eq!(vals(&store.list()), set(&["b", "d", "e"]));
    assert_eq!(store.len(), 3);

    ReflectorStore::replace(
        store,
        vec![Arc::new(mk("foo", "foo")), Arc::new(mk("bar", "bar"))],
        "0".into(),
    );
    assert_eq!(vals(&store.list()), set(&["foo", "bar"]));
    assert_eq!(store.len(), 2);
    assert_eq!(store.resource_version(), "0");
}

#[test]
fn test_cache() {
    do_test_store(&Store::new());
}

#[test]
fn test_cache_with_transformer() {
    let called = Arc::new(AtomicBool::new(false));
    let transform: Transform<ConfigMap> = {
        let called = called.clone();
        Arc::new(move |mut o: ConfigMap| {
            called.store(true, Ordering::SeqCst);
            o.metadata.managed_fields = None;
            o.metadata
                .annotations
                .get_or_insert_default()
                .insert("transformed".into(), "yes".into());
            o
        })
    };
    let store = Store::new().with_transform(transform);
    do_test_store(&store);
    assert!(called.load(Ordering::SeqCst), "transformer was not called");
    assert!(
        store
            .list()
            .iter()
            .all(|o| o.metadata.annotations.as_ref().unwrap()["transformed"] == "yes")
    );
}

#[test]
fn test_index() {
    let store = Store::with_indexers([("by_val".to_owned(), by_val())]);
    store.insert(Arc::new(mk("a", "b")));
    store.insert(Arc::new(mk("c", "b")));
    store.insert(Arc::new(mk("e", "f")));
    store.insert(Arc::new(mk("g", "h")));
    let expected = [("b", &["a", "c"][..]), ("f", &["e"]), ("h", &["g"])];
    for (value, ids) in expected {
        let found = store.index("by_val", &mk("", value)).unwrap();
        assert_eq!(names(&found), set(ids), "index {value}");
        assert_eq!(names(&store.by_index("by_val", value).unwrap()), set(ids));
        assert_eq!(store.index_keys("by_val", value).unwrap(), ids);
    }
    assert_eq!(
        store.index("nope", &mk("", "b")).unwrap_err(),
        StoreError::NoSuchIndex("nope".into())
    );
    assert_eq!(
        store.by_index("nope", "b").unwrap_err().to_string(),
        "index with name nope does not exist"
    );
}

#[test]
fn test_thread_safe_store_delete_removes_empty_sets_from_index() {
    let store = Store::with_indexers([("testIndexer".to_owned(), comma_values())]);
    store.insert(Arc::new(cm(None, "testKey")));
    let counts = store.index_value_counts("testIndexer").unwrap();
    assert_eq!(counts.get("testKey"), Some(&1), "initial assumption");
    store.remove("testKey");
    let counts = store.index_value_counts("testIndexer").unwrap();
    assert!(!counts.contains_key("testKey"), "empty set not deleted");
    assert!(
        store
            .list_index_func_values("testIndexer")
            .unwrap()
            .is_empty()
    );
}

#[test]
fn test_thread_safe_store_add_keeps_non_empty_set_post_delete_from_index() {
    let same: IndexFn<ConfigMap> = Arc::new(|_| vec!["testIndex".to_owned()]);
    let store = Store::with_indexers([("testIndexer".to_owned(), same)]);
    store.insert(Arc::new(cm(None, "retain")));
    store.insert(Arc::new(cm(None, "delete")));
    let count = |s: &Store<ConfigMap>| {
        s.index_value_counts("testIndexer")
            .unwrap()
            .get("testIndex")
            .copied()
    };
    assert_eq!(count(&store), Some(2), "initial assumption");
    store.remove("delete");
    assert_eq!(
        count(&store),
        Some(1),
        "set erroneously deleted or wrong length"
    );
}

#[test]
fn test_thread_safe_store_indexing_functions_with_multiple_values() {
    let store = Store::with_indexers([("testIndexer".to_owned(), comma_values())]);
    let put = |key: &str, values: &str| {
        store.insert(Arc::new(with_users(key, values)));
    };
    let check = |value: &str, expected: &[&str]| {
        assert_eq!(
            store.index_keys("testIndexer", value).unwrap(),
            expected,
            "keys under {value}"
        );
    };
    put("key1", "foo");
    put("key2", "bar");
    check("foo", &["key1"]);
    check("bar", &["key2"]);

    put("key2", "foo,bar");
    check("foo", &["key1", "key2"]);
    check("bar", &["key2"]);

    put("key1", "foo,bar");
    check("foo", &["key1", "key2"]);
    check("bar", &["key1", "key2"]);

    put("key3", "foo,bar,baz");
    check("foo", &["key1", "key2", "key3"]);
    check("bar", &["key1", "key2", "key3"]);
    check("baz", &["key3"]);

    put("key1", "foo");
    check("foo", &["key1", "key2", "key3"]);
    check("bar", &["key2", "key3"]);
    check("baz", &["key3"]);

    put("key2", "bar");
    check("foo", &["key1", "key3"]);
    check("bar", &["key2", "key3"]);
    check("baz", &["key3"]);

    store.remove("key1");
    check("foo", &["key3"]);
    check("bar", &["key2", "key3"]);
    check("baz", &["key3"]);

    store.remove("key3");
    check("foo", &[]);
    check("bar", &["key2"]);
    check("baz", &[]);
    assert_eq!(
        store.list_index_func_values("testIndexer").unwrap(),
        ["bar"]
    );
}

#[test]
fn test_thread_safe_store_rv() {
    // Initial state.
    let store: Store<ConfigMap> = Store::new();
    assert_eq!(store.resource_version(), "");

    // Add, update and delete.
    store.insert(Arc::new(with_rv("key1", Some("10"))));
    assert_eq!(store.resource_version(), "10");
    store.insert(Arc::new(with_rv("key3", Some("10"))));
    assert_eq!(store.resource_version(), "10", "same RV");
    store.insert(Arc::new(with_rv("key4", Some("20"))));
    assert_eq!(store.resource_version(), "20");
    store.remove_object(&with_rv("key4", Some("30")));
    assert_eq!(store.resource_version(), "30", "deletion with a newer RV");
    store.insert(Arc::new(with_rv("key5", None)));
    assert_eq!(store.resource_version(), "30", "object without an RV");
    store.insert(Arc::new(with_rv("key6", Some("40"))));
    assert_eq!(store.resource_version(), "40");
    store.remove("key6");
    assert_eq!(store.resource_version(), "40", "delete by key only");
    store.transaction(|txn| {
        txn.insert(Arc::new(with_rv("key9", Some("40"))));
        txn.insert(Arc::new(with_rv("key10", Some("30"))));
        txn.insert(Arc::new(with_rv("key11", Some("50"))));
    });
    assert_eq!(store.resource_version(), "50", "after transaction");

    // Replace.
    let store: Store<ConfigMap> = Store::new();
    store.insert(Arc::new(with_rv("key1", Some("10"))));
    store.replace(
        vec![
            Arc::new(with_rv("key3", Some("40"))),
            Arc::new(with_rv("key2", Some("30"))),
        ],
        "50".into(),
    );
    assert_eq!(store.resource_version(), "50");

    // Delete.
    let store: Store<ConfigMap> = Store::new();
    store.insert(Arc::new(with_rv("key1", Some("10"))));
    store.delete(Arc::new(with_rv("key1", Some("20"))));
    assert_eq!(store.resource_version(), "20");
    assert!(store.is_empty());

    // Bookmark.
    store.bookmark("60".into());
    assert_eq!(store.resource_version(), "60");
}

#[test]
fn test_get_index_func_values() {
    let foo_label: IndexFn<ConfigMap> =
        Arc::new(|o: &ConfigMap| vec![o.metadata.labels.as_ref().unwrap()["foo"].clone()]);
    let store = Store::with_indexers([("testmodes".to_owned(), foo_label)]);
    for (name, foo) in [("one", "bar"), ("two", "bar"), ("tre", "biz")] {
        let mut o = cm(None, name);
        o.metadata.labels = Some(BTreeMap::from([("foo".into(), foo.into())]));
        store.insert(Arc::new(o));
    }
    assert_eq!(
        store.list_index_func_values("testmodes").unwrap(),
        ["bar", "biz"]
    );
}

#[test]
fn test_multi_index_keys() {
    let store = Store::with_indexers([("byUser".to_owned(), comma_values())]);
    store.insert(Arc::new(with_users("one", "ernie,bert")));
    store.insert(Arc::new(with_users("two", "bert,oscar")));
    store.insert(Arc::new(with_users("tre", "ernie,elmo")));
    let expected = [
        ("ernie", &["one", "tre"][..]),
        ("bert", &["one", "two"]),
        ("elmo", &["tre"]),
        ("oscar", &["two"]),
        ("elmo1", &[]),
    ];
    for (user, pods) in expected {
        assert_eq!(
            names(&store.by_index("byUser", user).unwrap()),
            set(pods),
            "{user}"
        );
    }
    // Index() is the union over the object's values, each object once.
    assert_eq!(
        names(
            &store
                .index("byUser", &with_users("x", "ernie,bert"))
                .unwrap()
        ),
        set(&["one", "two", "tre"])
    );
    assert_eq!(
        store
            .index("byUser", &with_users("x", "ernie,bert"))
            .unwrap()
            .len(),
        3
    );

    store.remove("tre");
    assert_eq!(
        names(&store.by_index("byUser", "ernie").unwrap()),
        set(&["one"])
    );
    assert!(store.by_index("byUser", "elmo").unwrap().is_empty());

    store.insert(Arc::new(with_users("two", "oscar")));
    assert_eq!(
        names(&store.by_index("byUser", "bert").unwrap()),
        set(&["one"])
    );
}

#[test]
fn add_indexers_indexes_existing_items() {
    let store: Store<ConfigMap> = Store::new();
    store.insert(Arc::new(mk("a", "x")));
    store.insert(Arc::new(mk("b", "y")));
    store
        .add_indexers([("by_val".to_owned(), by_val())])
        .unwrap();
    assert_eq!(store.index_keys("by_val", "x").unwrap(), ["a"]);
    store.insert(Arc::new(mk("c", "x")));
    assert_eq!(store.index_keys("by_val", "x").unwrap(), ["a", "c"]);
    assert_eq!(
        store.add_indexers([("by_val".to_owned(), by_val())]),
        Err(StoreError::IndexConflict("by_val".into()))
    );
    assert_eq!(
        store.add_indexers([("n".to_owned(), by_val()), ("n".to_owned(), by_val())]),
        Err(StoreError::IndexConflict("n".into()))
    );
    assert_eq!(store.index_names(), ["by_val", NAMESPACE_INDEX]);
}

#[test]
fn namespace_index_and_replace_rebuilds_indices() {
    let store: Store<ConfigMap> = Store::new();
    store.insert(Arc::new(cm(Some("a"), "x")));
    store.insert(Arc::new(cm(Some("b"), "y")));
    store.insert(Arc::new(cm(None, "cluster")));
    assert_eq!(store.index_keys(NAMESPACE_INDEX, "a").unwrap(), ["a/x"]);
    assert_eq!(
        store.list_index_func_values(NAMESPACE_INDEX).unwrap(),
        ["a", "b"]
    );
    assert_eq!(
        store
            .get_namespaced("a", "x")
            .unwrap()
            .metadata
            .name
            .as_deref(),
        Some("x")
    );
    assert!(store.get_namespaced("", "cluster").is_some());

    let diff = store.replace_with_diff(
        vec![Arc::new(cm(Some("b"), "y")), Arc::new(cm(Some("c"), "z"))],
        "5".into(),
    );
    let deleted: Vec<_> = diff.deleted.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(deleted, ["a/x", "cluster"]);
    let replaced: Vec<_> = diff
        .replaced
        .iter()
        .map(|(old, new)| (old.is_some(), new.metadata.name.clone().unwrap()))
        .collect();
    assert_eq!(replaced, [(true, "y".to_owned()), (false, "z".to_owned())]);
    assert_eq!(
        store.list_index_func_values(NAMESPACE_INDEX).unwrap(),
        ["b", "c"]
    );
    assert!(store.index_keys(NAMESPACE_INDEX, "a").unwrap().is_empty());
}

#[test]
fn reads_share_objects() {
    let store: Store<ConfigMap> = Store::new();
    let obj = Arc::new(cm(Some("a"), "x"));
    assert!(store.insert(obj.clone()).is_none());
    assert!(Arc::ptr_eq(&store.get("a/x").unwrap(), &obj));
    assert!(Arc::ptr_eq(&store.list()[0], &obj));
    assert!(Arc::ptr_eq(
        &store.by_index(NAMESPACE_INDEX, "a").unwrap()[0],
        &obj
    ));
    let old = store.insert(Arc::new(cm(Some("a"), "x"))).unwrap();
    assert!(Arc::ptr_eq(&old, &obj));
}

/// Readers never see half a transaction.
#[test]
fn transaction_is_atomic_for_readers() {
    let store: Store<ConfigMap> = Store::new();
    let reader = {
        let store = store.clone();
        std::thread::spawn(move || {
            for _ in 0..2000 {
                let n = store.len();
                assert!(
                    n.is_multiple_of(10),
                    "saw a partial transaction: {n} objects"
                );
            }
        })
    };
    for round in 0..50 {
        store.transaction(|txn| {
            for i in 0..10 {
                txn.insert(Arc::new(cm(Some("ns"), &format!("o{round}-{i}"))));
            }
        });
    }
    reader.join().unwrap();
    assert_eq!(store.len(), 500);
}

/// client-go's `TestListAll` (sizes scaled down 10×; the cases are the same).
#[test]
fn test_list_all() {
    let cases = [
        (
            "subset match",
            10_000,
            1_000,
            Some("match"),
            Selector::parse("match=true").unwrap(),
            1_000,
        ),
        (
            "all match",
            100_000,
            0,
            None,
            Selector::everything(),
            100_000,
        ),
        (
            "no match",
            100_000,
            0,
            Some("nomatch"),
            Selector::parse("match=true").unwrap(),
            0,
        ),
        (
            "nothing",
            1_000,
            1_000,
            Some("match"),
            Selector::nothing(),
            0,
        ),
    ];
    for (case, num_objects, num_matching, label, selector, expected) in cases {
        let store: Store<ConfigMap> = Store::new();
        for i in 0..num_objects {
            let mut o = cm(None, &format!("obj-{i}"));
            if let (true, Some(l)) = (i < num_matching, label) {
                o.metadata.labels = Some(BTreeMap::from([(l.to_owned(), "true".to_owned())]));
            }
            store.insert(Arc::new(o));
        }
        let lister = Lister::new(store);
        assert_eq!(lister.list(&selector).len(), expected, "{case}");
    }
}

#[test]
fn lister_by_namespace() {
    let labelled = |ns: &str, name: &str, app: &str| {
        let mut o = cm(Some(ns), name);
        o.metadata.labels = Some(BTreeMap::from([("app".into(), app.into())]));
        Arc::new(o)
    };
    let store: Store<ConfigMap> = Store::new();
    store.insert(labelled("a", "x", "web"));
    store.insert(labelled("a", "y", "db"));
    store.insert(labelled("b", "x", "web"));
    let lister = Lister::new(store.clone());
    let web = Selector::parse("app=web").unwrap();

    let in_a = lister.namespaced("a");
    assert_eq!(in_a.namespace(), "a");
    assert_eq!(names(&in_a.list(&Selector::everything())), set(&["x", "y"]));
    assert_eq!(names(&in_a.list(&web)), set(&["x"]));
    assert!(in_a.list(&Selector::nothing()).is_empty());
    assert_eq!(
        in_a.get("y").unwrap().metadata.labels.as_ref().unwrap()["app"],
        "db"
    );
    assert!(in_a.get("missing").is_none());
    assert!(lister.get("b", "x").is_some());
    assert!(lister.get("b", "y").is_none());
    assert_eq!(lister.list(&web).len(), 2);
    // An empty namespace lists every namespace.
    assert_eq!(lister.namespaced("").list(&web).len(), 2);
}

/// An index function that stops working (it panics on an object it indexed before) leaves
/// no stale entry behind: the key is removed from the value it was indexed under. A change
/// it panics on counts as one panic, not one per state it looked at.
#[test]
fn index_function_that_starts_panicking_leaves_no_stale_entry() {
    let broken = Arc::new(AtomicBool::new(false));
    let flag = broken.clone();
    let by_val: IndexFn<ConfigMap> = Arc::new(move |o: &ConfigMap| {
        assert!(!flag.load(Ordering::SeqCst), "the index is broken");
        vec![val_of(o).to_owned()]
    });
    let store = Store::with_indexers([("by_val".to_owned(), by_val)]);
    store.insert(Arc::new(mk("a", "x")));
    assert_eq!(store.index_keys("by_val", "x").unwrap(), ["a"]);
    broken.store(true, Ordering::SeqCst);
    store.insert(Arc::new(mk("a", "y")));
    assert!(
        store.index_keys("by_val", "x").unwrap().is_empty(),
        "stale entry: {:?}",
        store.index_keys("by_val", "x")
    );
    assert!(store.index_keys("by_val", "y").unwrap().is_empty());
    assert_eq!(store.index_panics(), 1, "one change, one panic");
    // Deleting it panics on the old state once more: one more panic, nothing left over.
    store.remove("a");
    assert_eq!(store.index_panics(), 2);
    assert!(store.list_index_func_values("by_val").unwrap().is_empty());
}

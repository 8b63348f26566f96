//! Shard selectors against a kube-apiserver with the `ShardedListAndWatch` feature gate on
//! (a `kctrl-testenv` plane of this binary's own, `KCTRL_E2E_TESTENV=1`; `cargo xtask e2e`
//! runs it so): the server's selection is the one our hash computes, for UIDs and namespaces,
//! one range or several; complementary selectors split the objects without overlap; lists
//! echo the selector in their shardInfo; watches deliver only the selected objects' events;
//! informers with a shard scope let the server filter and follow scope changes; a selector the
//! server refuses fails with its message, and our parser refuses it too, naming the fix.

use std::collections::BTreeSet;
use std::process::Command;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::{ReplicaSet, ReplicaSetSpec};
use k8s_openapi::api::core::v1::{ConfigMap, Container, PodSpec, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use kctrl_client::{
    Api, DeleteParams, HashRange, ListParams, Patch, PatchParams, PostParams, ShardField,
    ShardInfo, ShardSelector, ShardSelectorError, WatchEvent, WatchParams, hash_field,
};
use kctrl_e2e::{Cluster, TestNamespace, rand_suffix};
use kctrl_informer::ShardFiltering;

#[path = "sharding_common.rs"]
mod common;

use common::{Fixture, TIMEOUT, assert_same, key, names_across_quarters, partitions, selector};

/// The gates of this binary's plane.
const GATES: &str = "ShardedListAndWatch=true";

/// This binary's plane, with [`GATES`]; returns from the test without one.
macro_rules! require_gated_cluster {
    () => {
        match kctrl_e2e::cluster_with_feature_gates(GATES) {
            Some(c) => c,
            None => return,
        }
    };
}

fn keys(items: &[ConfigMap]) -> BTreeSet<String> {
    items.iter().map(key).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_servers_selection_is_our_hashs() {
    let cluster = require_gated_cluster!();
    let client = cluster.admin_with(|c| c.qps = -1.0);
    let fixture = Fixture::create(&client, 200).await;
    let api = Api::<ConfigMap>::all(client.clone());
    let everything = fixture.expected(None);
    assert_eq!(everything.len(), 200);
    let params = |sel: &ShardSelector| ListParams {
        label_selector: Some(fixture.label_selector.clone()),
        shard_selector: Some(sel.clone()),
        ..Default::default()
    };
    let unfiltered = api
        .list_sharded(&ListParams {
            label_selector: Some(fixture.label_selector.clone()),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(unfiltered.shard_info, None, "no selector, no shardInfo");
    assert_eq!(keys(&unfiltered.list.items), everything);

    for field in [ShardField::Uid, ShardField::Namespace] {
        let full = ShardSelector::full(field);
        let answer = api.list_sharded(&params(&full)).await.unwrap();
        assert_eq!(keys(&answer.list.items), everything, "{full}");
        assert!(answer.server_filtered(), "{full}");
        for partition in partitions(field) {
            let mut union = BTreeSet::new();
            for sel in &partition {
                let answer = api.list_sharded(&params(sel)).await.unwrap();
                assert_eq!(
                    answer.shard_info,
                    Some(ShardInfo {
                        selector: sel.to_string()
                    }),
                    "the list echoes its selector"
                );
                let got = keys(&answer.list.items);
                assert_same(
                    &got,
                    &fixture.expected(Some(sel)),
                    &format!("{sel}: the server's selection is the one our hash computes"),
                );
                // Every quarter of the namespace space holds two of the namespaces; the
                // UIDs are random.
                if field == ShardField::Uid || sel.ranges().len() == 1 {
                    assert!(
                        !got.is_empty() && got.len() < everything.len(),
                        "{sel} selects some objects, not all: {}",
                        got.len()
                    );
                }
                assert!(union.is_disjoint(&got), "{sel} overlaps another part");
                union.extend(got);
            }
            assert_eq!(union, everything, "the parts together select everything");
        }
    }

    // Page by page.
    let several = selector(ShardField::Uid, &[(0, 1), (3, 5), (7, 8)], 8);
    let want = fixture.expected(Some(&several));
    let mut paged = BTreeSet::new();
    let mut page = ListParams {
        limit: Some(17),
        ..params(&several)
    };
    let mut pages = 0;
    loop {
        let answer = api.list_sharded(&page).await.unwrap();
        assert!(answer.server_filtered(), "page {pages}");
        assert!(answer.list.items.len() <= 17);
        paged.extend(keys(&answer.list.items));
        pages += 1;
        match answer.list.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(c) => page.continue_token = Some(c),
            None => break,
        }
    }
    assert_eq!(paged, want, "paged");
    assert!(pages > 1);

    // In one namespace, a namespace selector selects all of it or nothing.
    let low = selector(ShardField::Namespace, &[(0, 1)], 2);
    for ns in &fixture.namespaces {
        let answer = Api::<ConfigMap>::namespaced(client.clone(), &ns.name)
            .list_sharded(&params(&low))
            .await
            .unwrap();
        let theirs: BTreeSet<String> = everything
            .iter()
            .filter(|k| k.starts_with(&format!("{}/", ns.name)))
            .cloned()
            .collect();
        let want = if low.matches_value(&ns.name) {
            theirs
        } else {
            BTreeSet::new()
        };
        assert_eq!(keys(&answer.list.items), want, "{}", ns.name);
    }

    // In protobuf (ReplicaSets: ConfigMaps are read in JSON only), the shardInfo too.
    let replica_sets: Vec<ReplicaSet> = futures::stream::iter(0..24)
        .map(|i| {
            let ns = &fixture.namespaces[i % fixture.namespaces.len()].name;
            let api = Api::<ReplicaSet>::namespaced(client.clone(), ns);
            async move {
                api.create(&PostParams::default(), &replica_set(&format!("rs-{i:02}")))
                    .await
                    .unwrap()
            }
        })
        .buffer_unordered(8)
        .collect()
        .await;
    let api = Api::<ReplicaSet>::all(client.clone());
    for sel in &partitions(ShardField::Uid)[0] {
        let want: BTreeSet<String> = replica_sets
            .iter()
            .filter(|rs| sel.matches(&rs.metadata))
            .map(|rs| rs.metadata.uid.clone().unwrap())
            .collect();
        let params = ListParams {
            label_selector: Some("e2e-sharding=replicasets".into()),
            shard_selector: Some(sel.clone()),
            ..Default::default()
        };
        for (wire, api) in [("JSON", api.clone()), ("protobuf", api.clone().protobuf())] {
            let answer = api.list_sharded(&params).await.unwrap();
            assert_eq!(
                answer.shard_info.map(|i| i.selector),
                Some(sel.to_string()),
                "{wire}"
            );
            let got: BTreeSet<String> = answer
                .list
                .items
                .iter()
                .filter(|rs| {
                    fixture
                        .namespaces
                        .iter()
                        .any(|ns| Some(&ns.name) == rs.metadata.namespace.as_ref())
                })
                .map(|rs| rs.metadata.uid.clone().unwrap())
                .collect();
            assert_eq!(got, want, "{wire}: {sel}");
        }
    }
    fixture.delete().await;
}

/// A ReplicaSet of no replicas labelled `e2e-sharding=replicasets`.
fn replica_set(name: &str) -> ReplicaSet {
    let labels = kctrl_e2e::labels(&[(common::LABEL, "replicasets")]);
    ReplicaSet {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            labels: Some(labels.clone()),
            ..Default::default()
        },
        spec: ReplicaSetSpec {
            replicas: Some(0),
            selector: LabelSelector {
                match_labels: Some(labels.clone()),
                ..Default::default()
            },
            template: Some(PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels),
                    ..Default::default()
                }),
                spec: Some(PodSpec {
                    containers: vec![Container {
                        name: "c".into(),
                        image: Some("registry.k8s.io/pause:3.10".into()),
                        ..Default::default()
                    }],
                    ..Default::default()
                }),
            }),
            ..Default::default()
        },
        ..Default::default()
    }
}

/// Reads `watch` until `want`'s last event arrived and returns what arrived (bookmarks
/// aside): the server sends events in order, so anything it should not have sent before that
/// is there too.
async fn events_until(
    watch: &mut (
             impl futures::Stream<Item = Result<WatchEvent<ConfigMap>, kctrl_client::Error>> + Unpin
         ),
    want: &[String],
) -> Vec<String> {
    let mut got = Vec::new();
    tokio::time::timeout(TIMEOUT, async {
        while got.last() != want.last() {
            let event = watch.next().await.expect("the watch ended early").unwrap();
            got.push(match event {
                WatchEvent::Added(cm) => format!("ADDED {}", key(&cm)),
                WatchEvent::Modified(cm) => format!("MODIFIED {}", key(&cm)),
                WatchEvent::Deleted(cm) => format!("DELETED {}", key(&cm)),
                WatchEvent::Bookmark(_) => continue,
                WatchEvent::Error(e) => panic!("watch error: {e:?}"),
            });
        }
    })
    .await
    .unwrap_or_else(|_| panic!("timed out waiting for {want:?}; got {got:?}"));
    got
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watches_deliver_only_selected_events() {
    let cluster = require_gated_cluster!();
    let client = cluster.admin_with(|c| c.qps = -1.0);

    // By UID, in one namespace: 30 objects created, changed and deleted, then one more
    // created until one is selected, which ends the expected events.
    let ns = TestNamespace::create(&client, "shard-watch").await;
    let api = Api::<ConfigMap>::namespaced(client.clone(), &ns.name);
    let low = selector(ShardField::Uid, &[(0, 1)], 2);
    let rv = api
        .list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let mut watch = api
        .watch(&WatchParams {
            resource_version: Some(rv),
            shard_selector: Some(low.clone()),
            ..Default::default()
        })
        .await
        .unwrap()
        .boxed();
    let creator = common::Fixture {
        client: client.clone(),
        label_selector: format!("{}=watch", common::LABEL),
        namespaces: Vec::new(),
        objects: Vec::new(),
    };
    let (mut want, mut selected) = (Vec::new(), BTreeSet::new());
    for i in 0..30 {
        let cm = creator
            .create_object(ns.name.clone(), format!("cm-{i:02}"))
            .await;
        if low.matches(&cm.metadata) {
            selected.insert(cm.metadata.name.clone().unwrap());
        }
    }
    assert!(
        !selected.is_empty() && selected.len() < 30,
        "some of the objects are selected, not all: {selected:?}"
    );
    let ours = |verb: &str| {
        selected
            .iter()
            .map(|n| format!("{verb} {}/{n}", ns.name))
            .collect::<Vec<_>>()
    };
    want.extend(ours("ADDED"));
    for i in 0..30 {
        let patch = Patch::Merge(serde_json::json!({"data": {"v": "changed"}}));
        api.patch(&format!("cm-{i:02}"), &PatchParams::default(), &patch)
            .await
            .unwrap();
    }
    want.extend(ours("MODIFIED"));
    for i in 0..30 {
        api.delete(&format!("cm-{i:02}"), &DeleteParams::default())
            .await
            .unwrap();
    }
    want.extend(ours("DELETED"));
    for i in 0.. {
        let cm = creator
            .create_object(ns.name.clone(), format!("last-{i:02}"))
            .await;
        if low.matches(&cm.metadata) {
            want.push(format!("ADDED {}", key(&cm)));
            break;
        }
    }
    assert_eq!(events_until(&mut watch, &want).await, want, "{low}");
    drop(watch);
    ns.delete().await;

    // By namespace, across namespaces: one in the selected half, one not; objects created in
    // both, the last in the selected one.
    let run = format!("{:08x}", rand_suffix());
    let low = selector(ShardField::Namespace, &[(0, 1)], 2);
    let names = names_across_quarters(&format!("shard-watch-{run}"), 1);
    let (inside, outside): (Vec<String>, Vec<String>) =
        names.into_iter().partition(|n| low.matches_value(n));
    let inside = TestNamespace::create_named(&client, &inside[0]).await;
    let outside = TestNamespace::create_named(&client, &outside[0]).await;
    let label_selector = format!("{}={run}", common::LABEL);
    let objects = Fixture {
        label_selector: label_selector.clone(),
        ..creator
    };
    let all = Api::<ConfigMap>::all(client.clone());
    let rv = all
        .list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let mut watch = all
        .watch(&WatchParams {
            label_selector: Some(label_selector),
            resource_version: Some(rv),
            shard_selector: Some(low.clone()),
            ..Default::default()
        })
        .await
        .unwrap()
        .boxed();
    let mut want = Vec::new();
    for i in 0..10 {
        for ns in [&outside, &inside] {
            let cm = objects
                .create_object(ns.name.clone(), format!("cm-{i:02}"))
                .await;
            if ns.name == inside.name {
                want.push(format!("ADDED {}", key(&cm)));
            }
        }
    }
    assert_eq!(events_until(&mut watch, &want).await, want, "{low}");
    drop(watch);
    inside.delete().await;
    outside.delete().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn informers_let_the_server_filter_and_follow_scope_changes() {
    let cluster = require_gated_cluster!();
    let client = cluster.admin_with(|c| c.qps = -1.0);
    common::informers_follow_a_changing_scope(client, ShardFiltering::Server).await;
}

/// `s` with every byte but the unreserved ones percent-encoded, for a query.
fn percent_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                char::from(b).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// `kubectl get --raw` of the ConfigMaps in every namespace with `shardSelector=selector`,
/// logging the response's status (`-v=6`): (success, stdout, stderr).
fn raw_list(cluster: &Cluster, selector: &str) -> (bool, String, String) {
    let kubectl = cluster
        .kubectl_binary()
        .expect("the test environment's kubectl");
    let out = Command::new(&kubectl)
        .arg("--kubeconfig")
        .arg(&cluster.kubeconfig)
        .args(["get", "-v=6", "--raw"])
        .arg(format!(
            "/api/v1/configmaps?limit=1&shardSelector={}",
            percent_encode(selector)
        ))
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", kubectl.display()));
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_selector_the_server_refuses_is_refused_locally_naming_the_fix() {
    let cluster = require_gated_cluster!();
    // Bounds must have 16 hex digits: '0x0' is refused by the apiserver...
    let short = "shardRange(object.metadata.uid, '0x0', '0x8000000000000000')";
    let (ok, _, stderr) = raw_list(&cluster, short);
    assert!(!ok, "the apiserver accepted {short}");
    assert!(
        stderr.contains(
            "Error from server: invalid shard selector: hexStart must be a 0x-prefixed 16-digit \
             hex value, got \"0x0\" (did you mean \"0x0000000000000000\"?)"
        ),
        "the apiserver's message: {stderr}"
    );
    // As an internal error (the selector is parsed in the storage layer, past validation).
    assert!(
        stderr.contains(r#"status="500 Internal Server Error""#),
        "{stderr}"
    );
    // ... and by our parser, before any request, with the bound to write instead.
    let err = short.parse::<ShardSelector>().unwrap_err();
    assert!(
        matches!(
            err,
            ShardSelectorError::Bound {
                which: "hexStart",
                ..
            }
        ),
        "{err:?}"
    );
    let message = err.to_string();
    assert!(
        message.contains("must be a 0x-prefixed 16-digit hex value")
            && message.contains("did you mean '0x0000000000000000'"),
        "{message}"
    );
    // The fix it names is accepted by both.
    let fixed = "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000')";
    let (ok, stdout, stderr) = raw_list(&cluster, fixed);
    assert!(ok, "{fixed}: {stderr}");
    let list: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(list["metadata"]["shardInfo"]["selector"], fixed);
    let parsed: ShardSelector = fixed.parse().unwrap();
    assert_eq!(
        parsed,
        ShardSelector::new(ShardField::Uid, [HashRange::new(0, 1 << 63).unwrap()]).unwrap()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespaces_differing_only_at_their_end_share_a_shard() {
    let cluster = require_gated_cluster!();
    let client = cluster.admin_with(|c| c.qps = -1.0);
    // ns-00 … ns-29 (this binary's plane is its own: the names are free): FNV-1a carries the
    // last bytes of a value into its low bits only, so their hashes share the top byte, 0x7e,
    // and even 64 equal shards put every one of them on the same one (docs/sharding.md).
    let names: Vec<String> = (0..30).map(|i| format!("ns-{i:02}")).collect();
    assert!(names.iter().all(|n| hash_field(n) >> 56 == 0x7e));
    let run = format!("{:08x}", rand_suffix());
    let fixture = Fixture {
        client: client.clone(),
        label_selector: format!("{}={run}", common::LABEL),
        namespaces: futures::stream::iter(&names)
            .map(|n| TestNamespace::create_named(&client, n))
            .buffered(8)
            .collect()
            .await,
        objects: Vec::new(),
    };
    let objects: Vec<ConfigMap> = futures::stream::iter(&names)
        .map(|n| fixture.create_object(n.clone(), "cm".to_owned()))
        .buffered(8)
        .collect()
        .await;
    let everything = keys(&objects);
    let api = Api::<ConfigMap>::all(client.clone());
    let mut shards_used = 0;
    for shard in 0..64 {
        let sel = selector(ShardField::Namespace, &[(shard, shard + 1)], 64);
        let got = keys(
            &api.list(&ListParams {
                label_selector: Some(fixture.label_selector.clone()),
                shard_selector: Some(sel),
                ..Default::default()
            })
            .await
            .unwrap()
            .items,
        );
        if !got.is_empty() {
            assert_eq!(got, everything, "shard {shard} of 64 holds all or none");
            assert_eq!(shard, 0x7e >> 2, "the shard of the top bits 0x7e");
            shards_used += 1;
        }
    }
    assert_eq!(shards_used, 1);
    fixture.delete().await;
}

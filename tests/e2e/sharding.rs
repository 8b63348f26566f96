//! Shard selectors against a kube-apiserver without the `ShardedListAndWatch` feature gate
//! (its default): the server ignores the selector, says nothing of it, and informers with a
//! shard scope filter on the client, caching the same objects as the server would have sent
//! them and following scope changes the same way. `sharding_gate.rs` runs the same informers
//! with the gate on.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::ConfigMap;
use kctrl_client::{Api, Client, ListParams, ShardField};
use kctrl_e2e::require_cluster;
use kctrl_informer::ShardFiltering;

#[path = "sharding_common.rs"]
mod common;

use common::{Fixture, key, selector};

/// Whether the cluster filters by shard selectors (the gate is on), after saying so: these
/// tests are about a server without the gate. A list with a selector says it, objects or not.
async fn gate_is_on(client: &Client) -> bool {
    let probe = ListParams {
        limit: Some(1),
        shard_selector: Some(selector(ShardField::Uid, &[(0, 1)], 2)),
        ..Default::default()
    };
    let answer = Api::<ConfigMap>::all(client.clone())
        .list_sharded(&probe)
        .await
        .unwrap();
    if answer.shard_info.is_some() {
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr(),
            "e2e: this cluster's kube-apiserver filters by shard selectors \
             (ShardedListAndWatch is on); skipping a test of a server without the gate"
        );
    }
    answer.shard_info.is_some()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_ignore_the_selector_and_carry_no_shard_info() {
    let cluster = require_cluster!();
    let client = cluster.admin_with(|c| c.qps = -1.0);
    if gate_is_on(&client).await {
        return;
    }
    let fixture = Fixture::create(&client, 40).await;
    let api = Api::<ConfigMap>::all(client.clone());
    let everything = fixture.expected(None);
    for field in [ShardField::Uid, ShardField::Namespace] {
        for sel in common::partitions(field).into_iter().flatten() {
            let params = ListParams {
                label_selector: Some(fixture.label_selector.clone()),
                shard_selector: Some(sel.clone()),
                ..Default::default()
            };
            let answer = api.list_sharded(&params).await.unwrap();
            assert_eq!(answer.shard_info, None, "{sel}");
            assert!(!answer.server_filtered());
            let got: BTreeSet<String> = answer.list.items.iter().map(key).collect();
            assert_eq!(got, everything, "{sel}: the server sends everything");
        }
    }
    fixture.delete().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn informers_filter_on_the_client_and_follow_scope_changes() {
    let cluster = require_cluster!();
    let client = cluster.admin_with(|c| c.qps = -1.0);
    if gate_is_on(&client).await {
        return;
    }
    common::informers_follow_a_changing_scope(client, ShardFiltering::Client).await;
}

//! The work-queue lanes the Deployment handlers choose: initial-list adds and resyncs go to the
//! low lane, live events to the high lane, so a changed Deployment overtakes the initial sync.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use kctrl_informer::{ResourceEventHandler, Store};
use kctrl_workqueue::{Priority, RateLimitingQueue, default_controller_rate_limiter};

use super::{EnqueueHandlers, lane_for_add, lane_for_update};
use crate::fixtures::new_deployment;

fn deployment(name: &str, resource_version: &str) -> Arc<Deployment> {
    let selector = BTreeMap::from([("app".to_string(), name.to_string())]);
    let mut d = new_deployment(name, 1, None, None, None, Some(selector));
    d.metadata.resource_version = Some(resource_version.to_string());
    Arc::new(d)
}

fn handlers(queue: &RateLimitingQueue<String>) -> EnqueueHandlers {
    EnqueueHandlers::new(
        queue.clone(),
        Store::<Deployment>::new(),
        Store::<ReplicaSet>::new(),
    )
}

#[test]
fn lanes_of_adds_and_updates() {
    assert_eq!(lane_for_add(true), Priority::Low);
    assert_eq!(lane_for_add(false), Priority::High);
    let d = deployment("web", "1");
    assert_eq!(lane_for_update(&d, &d), Priority::Low, "resync");
    assert_eq!(
        lane_for_update(&d, &deployment("web", "2")),
        Priority::High,
        "a real change"
    );
}

#[tokio::test(start_paused = true)]
async fn a_changed_deployment_overtakes_the_initial_list() {
    let queue = RateLimitingQueue::new(default_controller_rate_limiter());
    let handlers = handlers(&queue);
    let listed: Vec<_> = (0..20)
        .map(|i| deployment(&format!("listed-{i}"), "1"))
        .collect();
    for d in &listed {
        ResourceEventHandler::<Deployment>::on_add(&handlers, d, true);
    }
    // A resync of one listed Deployment stays low; a user's change to another goes high.
    ResourceEventHandler::<Deployment>::on_update(&handlers, &listed[3], &listed[3]);
    ResourceEventHandler::<Deployment>::on_update(
        &handlers,
        &listed[17],
        &deployment("listed-17", "2"),
    );
    assert_eq!(queue.len(), 20, "one entry per key");
    let first = queue.get().await.unwrap();
    assert_eq!(
        first,
        format!(
            "{}/listed-17",
            listed[17].metadata.namespace.as_deref().unwrap()
        )
    );
    queue.done(&first);
    let second = queue.get().await.unwrap();
    assert!(
        second.ends_with("/listed-0"),
        "then the initial list, in order: {second}"
    );
    queue.shut_down();
}

#[tokio::test(start_paused = true)]
async fn a_deployment_created_after_the_initial_list_is_high() {
    let queue = RateLimitingQueue::new(default_controller_rate_limiter());
    let handlers = handlers(&queue);
    ResourceEventHandler::<Deployment>::on_add(&handlers, &deployment("old", "1"), true);
    ResourceEventHandler::<Deployment>::on_add(&handlers, &deployment("new", "5"), false);
    let first = queue.get().await.unwrap();
    assert!(first.ends_with("/new"), "{first}");
    queue.shut_down();
}

#[tokio::test(start_paused = true)]
async fn without_lanes_keys_are_served_first_come_first_served() {
    let queue = RateLimitingQueue::new(default_controller_rate_limiter());
    let handlers = handlers(&queue).with_priority_lanes(false);
    let listed: Vec<_> = (0..5)
        .map(|i| deployment(&format!("listed-{i}"), "1"))
        .collect();
    for d in &listed {
        ResourceEventHandler::<Deployment>::on_add(&handlers, d, true);
    }
    ResourceEventHandler::<Deployment>::on_update(
        &handlers,
        &listed[3],
        &deployment("listed-3", "2"),
    );
    ResourceEventHandler::<Deployment>::on_add(&handlers, &deployment("new", "5"), false);
    let mut order = Vec::new();
    while !queue.is_empty() {
        let key = queue.get().await.unwrap();
        queue.done(&key);
        order.push(key.rsplit('/').next().unwrap().to_owned());
    }
    assert_eq!(
        order,
        [
            "listed-0", "listed-1", "listed-2", "listed-3", "listed-4", "new"
        ]
    );
    queue.shut_down();
}

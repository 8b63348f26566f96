//! The checker's unit tests: synthetic event sequences.

use super::*;

const NS: &str = "chaos-0";

fn rolling(name: &str, replicas: i32, surge: i32, unavailable: i32) -> Change {
    Change::Deployment(DeploymentView {
        namespace: NS.into(),
        name: name.into(),
        uid: format!("uid-{name}"),
        replicas,
        strategy: Strategy::rolling(
            &IntOrPercent::Int(surge),
            &IntOrPercent::Int(unavailable),
            replicas,
        ),
    })
}

fn recreate(name: &str, replicas: i32) -> Change {
    Change::Deployment(DeploymentView {
        namespace: NS.into(),
        name: name.into(),
        uid: format!("uid-{name}"),
        replicas,
        strategy: Strategy::Recreate,
    })
}

fn rs(deploy: &str, hash: &str, replicas: i32, available: i32) -> ReplicaSetView {
    ReplicaSetView {
        namespace: NS.into(),
        name: format!("{deploy}-{hash}"),
        uid: format!("uid-{deploy}-{hash}"),
        controller_uid: Some(format!("uid-{deploy}")),
        template: format!("{{\"image\":\"{hash}\"}}"),
        replicas,
        available,
    }
}

fn pod(deploy: &str, hash: &str, i: u32, live: bool) -> Change {
    Change::Pod(PodView {
        namespace: NS.into(),
        name: format!("{deploy}-{hash}-{i}"),
        deployment: Some(deploy.into()),
        hash: Some(hash.into()),
        live,
        uid: format!("uid-{deploy}-{hash}-{i}"),
        controllers: vec![format!("uid-{deploy}-{hash}")],
        terminating: false,
    })
}

fn run(changes: Vec<Change>) -> Vec<Violation> {
    let mut c = Checker::default();
    for ch in changes {
        c.apply(ch);
    }
    c.violations().to_vec()
}

fn kinds(v: &[Violation]) -> Vec<Invariant> {
    v.iter().map(|v| v.invariant).collect()
}

/// A rolling update of 3 replicas, maxSurge 1, maxUnavailable 1, done by the book.
fn good_rollout() -> Vec<Change> {
    vec![
        rolling("web", 3, 1, 1),
        Change::ReplicaSet(rs("web", "a", 3, 0)),
        Change::ReplicaSet(rs("web", "a", 3, 3)),
        // Rollout: new RS up by surge + unavailable headroom, old down by 1.
        Change::ReplicaSet(rs("web", "b", 1, 0)),
        Change::ReplicaSet(rs("web", "a", 2, 3)),
        Change::ReplicaSet(rs("web", "a", 2, 2)),
        Change::ReplicaSet(rs("web", "b", 2, 0)),
        Change::ReplicaSet(rs("web", "b", 2, 2)),
        Change::ReplicaSet(rs("web", "a", 0, 2)),
        Change::ReplicaSet(rs("web", "a", 0, 0)),
        Change::ReplicaSet(rs("web", "b", 3, 2)),
        Change::ReplicaSet(rs("web", "b", 3, 3)),
    ]
}

#[test]
fn a_rollout_within_bounds_passes() {
    assert_eq!(run(good_rollout()), []);
}

#[test]
fn surge_beyond_max_surge_is_flagged_once_per_episode() {
    let mut changes = good_rollout();
    // The new RS asks for 2 while the old still asks for 3: 5 > 3 + 1.
    changes.insert(4, Change::ReplicaSet(rs("web", "b", 2, 0)));
    changes.insert(5, Change::ReplicaSet(rs("web", "b", 2, 1)));
    let v = run(changes);
    assert_eq!(kinds(&v), [Invariant::MaxSurge], "{v:?}");
    assert_eq!(v[0].deployment, "chaos-0/web");
    assert_eq!(v[0].event, 5);
    assert!(v[0].detail.contains("total 5 > replicas 3 + maxSurge 1"));
}

#[test]
fn availability_below_the_bound_is_flagged_after_it_was_reached() {
    let v = run(vec![
        rolling("web", 4, 1, 1),
        // Nothing available at creation: not a violation.
        Change::ReplicaSet(rs("web", "a", 4, 0)),
        Change::ReplicaSet(rs("web", "a", 4, 2)),
        Change::ReplicaSet(rs("web", "a", 4, 4)),
        // The old RS is scaled down by 2 while the new one has nothing available: 2 < 3.
        Change::ReplicaSet(rs("web", "b", 1, 0)),
        Change::ReplicaSet(rs("web", "a", 2, 2)),
        Change::ReplicaSet(rs("web", "b", 1, 1)),
        // Back to 3 (ends the episode), then down again: a second episode.
        Change::ReplicaSet(rs("web", "a", 1, 1)),
    ]);
    assert_eq!(
        kinds(&v),
        [Invariant::MaxUnavailable, Invariant::MaxUnavailable]
    );
    assert_eq!(v[0].event, 6);
    assert_eq!(v[1].event, 8);
}

#[test]
fn equal_templates_are_flagged() {
    let mut twin = rs("web", "b", 1, 0);
    twin.template = rs("web", "a", 0, 0).template;
    let v = run(vec![
        rolling("web", 3, 1, 1),
        Change::ReplicaSet(rs("web", "a", 3, 3)),
        Change::ReplicaSet(twin),
    ]);
    assert_eq!(kinds(&v), [Invariant::DuplicateTemplate]);
    assert!(v[0].detail.contains("web-a and web-b"), "{}", v[0].detail);
}

#[test]
fn replica_sets_of_other_deployments_do_not_count() {
    let mut foreign = rs("db", "a", 3, 3);
    foreign.template = rs("web", "a", 0, 0).template;
    let mut orphan = rs("web", "c", 9, 0);
    orphan.controller_uid = None;
    let v = run(vec![
        rolling("web", 3, 1, 1),
        rolling("db", 3, 1, 1),
        Change::ReplicaSet(rs("web", "a", 3, 3)),
        Change::ReplicaSet(foreign),
        Change::ReplicaSet(orphan),
    ]);
    assert_eq!(v, []);
}

#[test]
fn a_relist_is_checked_whole_not_object_by_object() {
    // Before the outage: old RS at 3. After it: old at 0, new at 3. Applied one object at a
    // time in the wrong order the intermediate view would be 6 > 4; as one replacement it
    // is fine.
    let v = run(vec![
        rolling("web", 3, 1, 1),
        Change::ReplicaSet(rs("web", "a", 3, 3)),
        Change::ReplicaSets(vec![rs("web", "a", 0, 0), rs("web", "b", 3, 3)]),
    ]);
    assert_eq!(v, []);
    // A relist whose state does break a bound is flagged.
    let v = run(vec![
        rolling("web", 3, 1, 1),
        Change::ReplicaSets(vec![rs("web", "a", 3, 3), rs("web", "b", 3, 0)]),
    ]);
    assert_eq!(kinds(&v), [Invariant::MaxSurge]);
}

#[test]
fn recreate_with_old_and_new_pods_at_once_is_flagged() {
    let v = run(vec![
        recreate("job", 2),
        pod("job", "a", 0, true),
        pod("job", "a", 1, true),
        // Old pods terminating (still live) when a new one appears.
        pod("job", "b", 0, true),
    ]);
    assert_eq!(kinds(&v), [Invariant::RecreateOverlap]);
    assert!(v[0].detail.contains("a, b"), "{}", v[0].detail);
}

#[test]
fn recreate_done_right_passes() {
    let v = run(vec![
        recreate("job", 2),
        pod("job", "a", 0, true),
        pod("job", "a", 1, true),
        Change::PodDeleted(NS.into(), "job-a-0".into()),
        // A finished old pod does not count.
        pod("job", "a", 1, false),
        pod("job", "b", 0, true),
        pod("job", "b", 1, true),
        Change::PodDeleted(NS.into(), "job-a-1".into()),
    ]);
    assert_eq!(v, []);
    // Recreate has no surge or availability bounds.
    let v = run(vec![
        recreate("job", 2),
        Change::ReplicaSet(rs("job", "a", 2, 2)),
        Change::ReplicaSet(rs("job", "a", 0, 0)),
        Change::ReplicaSet(rs("job", "b", 2, 0)),
    ]);
    assert_eq!(v, []);
}

#[test]
fn a_recreated_deployment_is_a_new_one() {
    let mut again = rolling("web", 3, 1, 1);
    if let Change::Deployment(d) = &mut again {
        d.uid = "uid-web-2".into();
    }
    let mut fresh = rs("web", "b", 3, 0);
    fresh.controller_uid = Some("uid-web-2".into());
    let v = run(vec![
        rolling("web", 3, 1, 1),
        Change::ReplicaSet(rs("web", "a", 3, 3)),
        Change::DeploymentDeleted(NS.into(), "web".into()),
        Change::ReplicaSetDeleted(NS.into(), "web-a".into()),
        again,
        // The new Deployment has not reached its bound yet: nothing available is fine.
        Change::ReplicaSet(fresh),
    ]);
    assert_eq!(v, []);
}

#[test]
fn bounds_are_resolved_like_the_api() {
    let p = |s: &str| IntOrPercent::from_json(&serde_json::json!(s)).unwrap();
    assert_eq!(
        Strategy::rolling(&p("25%"), &p("25%"), 10),
        Strategy::Rolling {
            max_surge: 3,
            max_unavailable: 2
        }
    );
    assert_eq!(
        Strategy::rolling(&IntOrPercent::Int(0), &p("0%"), 10),
        Strategy::Rolling {
            max_surge: 0,
            max_unavailable: 1
        }
    );
    assert_eq!(
        IntOrPercent::from_json(&serde_json::json!(2)),
        Some(IntOrPercent::Int(2))
    );
    assert_eq!(IntOrPercent::from_json(&serde_json::json!("x%")), None);
}

fn owned_pod(deploy: &str, hash: &str, i: u32, controllers: &[&str]) -> PodView {
    PodView {
        namespace: NS.into(),
        name: format!("{deploy}-{hash}-{i}"),
        deployment: Some(deploy.into()),
        hash: Some(hash.into()),
        live: true,
        uid: format!("uid-{deploy}-{hash}-{i}"),
        controllers: controllers.iter().map(|c| c.to_string()).collect(),
        terminating: false,
    }
}

/// Runs `changes`, then judges every peak (as the end of a run does).
fn run_settled(changes: Vec<Change>) -> Vec<Violation> {
    let mut c = Checker::default();
    for ch in changes {
        c.apply(ch);
    }
    c.settle(std::time::Instant::now());
    c.violations().to_vec()
}

/// A scale-down of the old ReplicaSet and a scale-up of the new one whose Pods come and go
/// in the "wrong" order: one Pod above replicas + maxSurge for a moment, each ReplicaSet
/// within what it asked for.
fn rollout_with_late_delete() -> Vec<Change> {
    let mut changes = vec![
        rolling("web", 3, 1, 1),
        Change::ReplicaSet(rs("web", "a", 3, 0)),
        pod("web", "a", 0, true),
        pod("web", "a", 1, true),
        pod("web", "a", 2, true),
        Change::ReplicaSet(rs("web", "a", 3, 3)),
        Change::ReplicaSet(rs("web", "b", 1, 0)),
        pod("web", "b", 0, true),
        Change::ReplicaSet(rs("web", "a", 2, 3)),
        Change::ReplicaSet(rs("web", "b", 2, 0)),
        // The new ReplicaSet's second Pod before the old one's Pod is deleted: 5 active.
        pod("web", "b", 1, true),
    ];
    let mut going = owned_pod("web", "a", 2, &["uid-web-a"]);
    going.terminating = true;
    changes.push(Change::Pod(going));
    changes.push(Change::PodDeleted(NS.into(), "web-a-2".into()));
    changes
}

#[test]
fn pods_above_the_deployments_surge_are_not_a_violation_if_each_replica_set_is_within() {
    let mut c = Checker::default();
    for ch in rollout_with_late_delete() {
        c.apply(ch);
    }
    c.settle(std::time::Instant::now());
    assert_eq!(c.violations(), []);
    let summary = c.pod_summary();
    assert!(
        summary.contains("1 episodes, at most +1 (the first of chaos-0/web after event 11)"),
        "{summary}"
    );
    assert!(summary.contains("at most 3 active Pods"), "{summary}");
}

#[test]
fn a_replica_set_with_more_pods_than_it_asked_for_is_flagged() {
    let mut changes = rollout_with_late_delete();
    // A duplicate create: the new ReplicaSet asked for 2 and has 3.
    changes.push(pod("web", "b", 2, true));
    let v = run_settled(changes);
    assert_eq!(kinds(&v), [Invariant::ReplicaSetPods], "{v:?}");
    assert_eq!(v[0].deployment, "chaos-0/web-b");
    assert!(v[0].detail.contains("3 active Pods"), "{}", v[0].detail);
    assert!(
        v[0].detail.contains("spec.replicas it had, 2"),
        "{}",
        v[0].detail
    );
    assert_eq!(v[0].event, 14);
}

#[test]
fn a_scale_up_seen_after_its_pods_is_not_a_violation() {
    // The Pod stream runs ahead of the ReplicaSet stream: the third Pod before spec 3.
    let v = run_settled(vec![
        rolling("web", 3, 1, 1),
        Change::ReplicaSet(rs("web", "a", 2, 0)),
        pod("web", "a", 0, true),
        pod("web", "a", 1, true),
        pod("web", "a", 2, true),
        Change::ReplicaSet(rs("web", "a", 3, 0)),
    ]);
    assert_eq!(v, []);
    // Peaks younger than the cutoff wait for it.
    let mut c = Checker::default();
    let before = std::time::Instant::now();
    for ch in [
        Change::ReplicaSet(rs("web", "a", 1, 0)),
        pod("web", "a", 0, true),
        pod("web", "a", 1, true),
    ] {
        c.apply(ch);
    }
    c.settle(before);
    assert_eq!(c.violations(), []);
    c.settle(std::time::Instant::now());
    assert_eq!(kinds(c.violations()), [Invariant::ReplicaSetPods]);
    // Named by the ReplicaSet stream, though its Pods came first.
    let mut c = Checker::default();
    for ch in [
        pod("web", "a", 0, true),
        pod("web", "a", 1, true),
        Change::ReplicaSet(rs("web", "a", 1, 0)),
    ] {
        c.apply(ch);
    }
    c.settle(std::time::Instant::now());
    assert_eq!(c.violations()[0].deployment, "chaos-0/web-a");
}

#[test]
fn terminating_and_finished_pods_do_not_count_for_a_replica_set() {
    let mut going = owned_pod("web", "a", 0, &["uid-web-a"]);
    going.terminating = true;
    let v = run_settled(vec![
        Change::ReplicaSet(rs("web", "a", 1, 0)),
        pod("web", "a", 0, true),
        Change::Pod(going),
        pod("web", "a", 1, true),
        pod("web", "a", 1, false),
        pod("web", "a", 2, true),
    ]);
    assert_eq!(v, []);
    // A ReplicaSet the ReplicaSet stream never showed is not judged.
    let v = run_settled(vec![pod("web", "z", 0, true), pod("web", "z", 1, true)]);
    assert_eq!(v, []);
}

#[test]
fn a_pod_moving_between_replica_sets_without_being_an_orphan_is_flagged() {
    let v = run(vec![
        Change::Pod(owned_pod("web", "a", 0, &["uid-web-a"])),
        Change::Pod(owned_pod("web", "a", 0, &["uid-web-b"])),
        // Still there: one episode.
        Change::Pod(owned_pod("web", "a", 0, &["uid-web-b"])),
    ]);
    assert_eq!(kinds(&v), [Invariant::PodOwner], "{v:?}");
    assert_eq!(v[0].deployment, "chaos-0/web-a-0");
    assert!(
        v[0].detail.contains("from uid-web-a to uid-web-b"),
        "{}",
        v[0].detail
    );
    let v = run(vec![Change::Pod(owned_pod(
        "web",
        "a",
        0,
        &["uid-web-a", "uid-web-b"],
    ))]);
    assert_eq!(kinds(&v), [Invariant::PodOwner]);
}

#[test]
fn release_then_adoption_and_relists_are_not_a_move() {
    let mut c = Checker::default();
    for ch in [
        Change::Pod(owned_pod("web", "a", 0, &["uid-web-a"])),
        Change::Pod(owned_pod("web", "a", 0, &[])),
        Change::Pod(owned_pod("web", "a", 0, &["uid-web-b"])),
        // A relist may hide an orphan state: not judged.
        Change::Pods(vec![owned_pod("web", "a", 0, &["uid-web-a"])]),
        // A new Pod of the same name is another UID.
        Change::PodDeleted(NS.into(), "web-a-0".into()),
        Change::Pod(PodView {
            uid: "uid-other".into(),
            ..owned_pod("web", "a", 0, &["uid-web-b"])
        }),
    ] {
        c.apply(ch);
    }
    assert_eq!(c.violations(), []);
    assert!(
        c.pod_summary().contains("2 adoptions or releases"),
        "{}",
        c.pod_summary()
    );
}

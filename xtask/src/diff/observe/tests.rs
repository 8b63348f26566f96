//! Tests of the observation and its normalisation.

use super::*;

fn rs(name: &str, hash: &str, revision: &str, owner: Option<&str>, replicas: i64) -> Value {
    let mut v = json!({
        "kind": "ReplicaSet",
        "metadata": {
            "name": name, "uid": "u-1", "resourceVersion": "77", "generation": 1,
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "labels": {"app": "web", "pod-template-hash": hash},
            "annotations": {"deployment.kubernetes.io/revision": revision},
        },
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"pod-template-hash": hash}},
                 "template": {"metadata": {"labels": {"pod-template-hash": hash}}}},
        "status": {"replicas": replicas, "observedGeneration": 1},
    });
    if let Some(o) = owner {
        v["metadata"]["ownerReferences"] =
            json!([{"kind": "Deployment", "name": o, "uid": "x", "controller": true}]);
    }
    v
}

fn deploy(message: &str) -> Value {
    json!({
        "kind": "Deployment",
        "metadata": {"name": "web", "generation": 2, "uid": "d",
                     "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}",
                                     "deployment.kubernetes.io/revision": "2"}},
        "spec": {"replicas": 2, "template": {"metadata": {"annotations":
            {"kubectl.kubernetes.io/restartedAt": "2026-11-26T13:00:00Z"}}}},
        "status": {"observedGeneration": 2, "conditions": [
            {"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable",
             "lastUpdateTime": "t1", "lastTransitionTime": "t2", "message": "ok"},
            {"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable",
             "lastUpdateTime": "t3", "message": message}]},
    })
}

fn list(items: Vec<Value>) -> Value {
    json!({ "items": items })
}

#[test]
fn generated_names_and_hashes_get_the_same_labels_on_both_clusters() {
    // The same rollout with different hash functions.
    let up = list(vec![
        deploy("ReplicaSet \"web-7d9f8c6b5\" has successfully progressed."),
        rs("web-7d9f8c6b5", "7d9f8c6b5", "2", Some("web"), 2),
        rs("web-55c4d9bb4", "55c4d9bb4", "1", Some("web"), 0),
    ]);
    let ours = list(vec![
        deploy("ReplicaSet \"web-bx2v8\" has successfully progressed."),
        rs("web-q9zz4", "q9zz4", "1", Some("web"), 0),
        rs("web-bx2v8", "bx2v8", "2", Some("web"), 2),
    ]);
    let (mut n_up, mut n_ours) = (Names::default(), Names::default());
    let a = Observation::from_list(&up, &mut n_up);
    let b = Observation::from_list(&ours, &mut n_ours);
    assert_eq!(a, b);
    let d = &a.0["deployments"]["web"];
    let rs2 = &d["replicaSets"]["<web:rs2>"];
    assert_eq!(rs2["labels"]["pod-template-hash"], "<web:hash2>");
    assert_eq!(rs2["spec"]["replicas"], 2);
    assert_eq!(
        d["status"]["conditions"]["Progressing"]["message"],
        "ReplicaSet \"<web:rs2>\" has successfully progressed."
    );
    assert_eq!(
        d["status"]["conditionOrder"],
        json!(["Available", "Progressing"])
    );
    // Volatile fields are gone.
    let text = a.0.to_string();
    for gone in [
        "uid",
        "resourceVersion",
        "lastUpdateTime",
        "last-applied",
        "13:00:00",
    ] {
        assert!(!text.contains(gone), "{gone} in {text}");
    }
    assert_eq!(
        d["spec"]["template"]["metadata"]["annotations"][RESTARTED_AT],
        "<time>"
    );
    assert!(a.generations_observed());
    assert!(a.has_condition(
        false,
        "web",
        "Progressing",
        "True",
        Some("NewReplicaSetAvailable")
    ));
    assert!(!a.has_condition(false, "web", "Progressing", "False", None));
    assert!(a.has_condition(false, "web", "ReplicaFailure", "Absent", None));
    assert!(!a.has_condition(false, "web", "Progressing", "Absent", None));
    assert!(!a.has_condition(true, "web", "Progressing", "Absent", None));

    // A later ReplicaSet continues the count; an orphan keeps its label after release.
    let later = list(vec![
        rs("web-q9zz4", "q9zz4", "3", None, 0),
        rs("web-hh4k2", "hh4k2", "4", Some("web"), 1),
    ]);
    let c = Observation::from_list(&later, &mut n_ours);
    assert!(c.0["replicaSetsWithoutDeployment"]["<web:rs1>"].is_object());
    // Its owner is gone from the list, so it counts as without a Deployment too.
    assert!(c.0["replicaSetsWithoutDeployment"]["<web:rs3>"].is_object());
    assert!(c.0["deployments"].as_object().unwrap().is_empty());
}

#[test]
fn events_are_attached_to_their_deployment_with_names_replaced() {
    let mut names = Names::default();
    let mut obs = Observation::from_list(
        &list(vec![
            deploy("m"),
            rs("web-abc12", "abc12", "1", Some("web"), 1),
        ]),
        &mut names,
    );
    let events = [
        json!({"involvedObject": {"kind": "Deployment", "name": "web"}, "type": "Normal",
               "metadata": {"uid": "a"},
               "reason": "ScalingReplicaSet", "count": 2, "source": {"component": "deployment-controller"},
               "message": "Scaled up replica set web-abc12 from 0 to 1"}),
        // The same event seen again with a higher count, and an event of its own.
        json!({"involvedObject": {"kind": "Deployment", "name": "web"}, "type": "Normal",
               "metadata": {"uid": "a"},
               "reason": "ScalingReplicaSet", "count": 3, "source": {"component": "deployment-controller"},
               "message": "Scaled up replica set web-abc12 from 0 to 1"}),
        json!({"involvedObject": {"kind": "Deployment", "name": "web"}, "type": "Normal",
               "metadata": {"uid": "b"},
               "reason": "ScalingReplicaSet", "reportingComponent": "deployment-controller",
               "message": "Scaled up replica set web-abc12 from 0 to 1"}),
        json!({"involvedObject": {"kind": "ReplicaSet", "name": "web-abc12"}, "type": "Normal",
               "reason": "SuccessfulCreate", "message": "x"}),
        json!({"involvedObject": {"kind": "Deployment", "name": "gone"}, "type": "Normal",
               "reason": "R", "message": "m"}),
        // An aggregate seen with two messages: both count.
        json!({"involvedObject": {"kind": "Deployment", "name": "web"}, "type": "Normal",
               "metadata": {"uid": "c"},
               "reason": "ScalingReplicaSet", "count": 4, "source": {"component": "c"},
               "message": "(combined from similar events): Scaled down replica set web-abc12 from 3 to 2"}),
        json!({"involvedObject": {"kind": "Deployment", "name": "web"}, "type": "Normal",
               "metadata": {"uid": "c"},
               "reason": "ScalingReplicaSet", "count": 5, "source": {"component": "c"},
               "message": "(combined from similar events): Scaled down replica set web-abc12 from 2 to 1"}),
    ];
    obs.add_events(&events, &names);
    assert_eq!(
        obs.0["deployments"]["web"]["events"],
        json!({
            "Normal ScalingReplicaSet from deployment-controller: Scaled up replica set <web:rs1> from 0 to 1": 4,
            "Normal ScalingReplicaSet from c: Scaled down replica set <web:rs1> from 3 to 2": 4,
            "Normal ScalingReplicaSet from c: Scaled down replica set <web:rs1> from 2 to 1": 5,
        })
    );
    assert_eq!(
        obs.0["eventsOfDeletedDeployments"]["gone"],
        json!({"Normal R from : m": 1})
    );
    obs.add_rollout("web", "history", "REVISION\n1 web-abc12\n", &names);
    assert_eq!(
        obs.0["deployments"]["web"]["rollout history"],
        "REVISION\n1 <web:rs1>"
    );
}

#[test]
fn pod_names_lose_their_random_suffix() {
    let mut names = Names::default();
    names.learn(&[&rs("web-abc12", "abc12", "1", None, 1)]);
    assert_eq!(
        names.apply("pods \"web-abc12-x7k2p\" is forbidden; web-abc12-toolong stays"),
        "pods \"<web:rs1>-<pod>\" is forbidden; <web:rs1>-toolong stays"
    );
    assert_eq!(pod_suffixes("<other>-x7k2p, a>-b"), "<other>-x7k2p, a>-b");
}

#[test]
fn pods_are_counted_by_owner_and_state() {
    let mut names = Names::default();
    let pod = |owner: &str, ready: &str, deleting: bool| {
        let mut p = json!({"kind": "Pod", "metadata": {"name": format!("{owner}-zzzzz"),
            "generateName": format!("{owner}-"),
            "ownerReferences": [{"kind": "ReplicaSet", "name": owner, "controller": true}]},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": ready}]}});
        if deleting {
            p["metadata"]["deletionTimestamp"] = json!("t");
        }
        p
    };
    let obs = Observation::from_list(
        &list(vec![
            rs("web-abc12", "abc12", "1", None, 2),
            pod("web-abc12", "True", false),
            pod("web-abc12", "True", false),
            pod("web-abc12", "False", true),
        ]),
        &mut names,
    );
    assert_eq!(
        obs.0["pods"],
        json!({"ReplicaSet <web:rs1>, Running, ready": 2, "ReplicaSet <web:rs1>, Running, deleting": 1})
    );
}

/// A bare ReplicaSet (no pod-template-hash) of `replicas`, its status caught up or not.
fn bare_rs(name: &str, generation: i64, observed: i64) -> Value {
    json!({
        "kind": "ReplicaSet",
        "metadata": {"name": name, "generation": generation, "labels": {"app": "web"}},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}}},
        "status": {"replicas": 2, "observedGeneration": observed, "conditions": [
            {"type": "ReplicaFailure", "status": "True", "reason": "FailedCreate",
             "lastTransitionTime": "t", "message": "pods \"web-k2x9q\" is forbidden: quota"}]},
    })
}

#[test]
fn bare_replicasets_keep_their_names_and_their_pods_lose_the_random_suffix() {
    let mut names = Names::default();
    let obs = Observation::from_list(&list(vec![bare_rs("web", 2, 1)]), &mut names);
    let rs = &obs.0["replicaSetsWithoutDeployment"]["web"];
    assert_eq!(
        rs["status"]["conditions"]["ReplicaFailure"]["message"],
        "pods \"web-<pod>\" is forbidden: quota"
    );
    // Not caught up: the settle waits for bare ReplicaSets too.
    assert!(!obs.generations_observed());
    assert!(obs.has_condition(true, "web", "ReplicaFailure", "True", Some("FailedCreate")));
    assert!(!obs.has_condition(true, "web", "ReplicaFailure", "Absent", None));
    assert!(obs.has_condition(true, "web", "Available", "Absent", None));
    let caught_up = Observation::from_list(&list(vec![bare_rs("web", 2, 2)]), &mut names);
    // A scenario's ReplicaSet with a pod-template-hash label of its own choosing.
    names.learn(&[
        &json!({"kind": "ReplicaSet", "metadata": {"name": "orphan-old",
        "labels": {"app": "web", "pod-template-hash": "custom"}}}),
    ]);
    assert_eq!(
        names.apply("Created pod: orphan-old-hdh4n"),
        "Created pod: orphan-old-<pod>"
    );
    assert!(caught_up.generations_observed());
    // Only whole words with a five-character suffix.
    assert_eq!(
        names
            .apply("Created pod: web-abc12; Deleted pod: web-abc12, xweb-abc12, web-abc123, web-1"),
        "Created pod: web-<pod>; Deleted pod: web-<pod>, xweb-abc12, web-abc123, web-1"
    );
}

#[test]
fn pods_the_scenario_named_are_shown_one_by_one() {
    let mut names = Names::default();
    let pod = |name: &str, generated: bool, owner: Option<&str>, phase: &str| {
        let mut p = json!({"kind": "Pod",
            "metadata": {"name": name, "labels": {"app": "web"}},
            "status": {"phase": phase, "conditions": [{"type": "Ready", "status": "True"}]}});
        if generated {
            p["metadata"]["generateName"] = json!("web-");
        }
        if let Some(o) = owner {
            p["metadata"]["ownerReferences"] = json!([{"kind": "ReplicaSet", "name": o,
                "uid": "u", "controller": true, "blockOwnerDeletion": true}]);
        }
        p
    };
    let obs = Observation::from_list(
        &list(vec![
            bare_rs("web", 1, 1),
            pod("web-x7k2p", true, Some("web"), "Running"),
            pod("loose-1", false, Some("web"), "Running"),
            pod("doomed", false, Some("web"), "Failed"),
            pod("stranger", false, None, "Running"),
        ]),
        &mut names,
    );
    assert_eq!(obs.0["pods"], json!({"ReplicaSet web, Running, ready": 1}));
    let named = &obs.0["namedPods"];
    assert_eq!(named["loose-1"]["owner"], "ReplicaSet web");
    assert_eq!(named["doomed"]["phase"], "Failed");
    assert_eq!(named["stranger"]["owner"], "no owner");
    assert_eq!(named["stranger"]["ownerReferences"], json!([]));
    assert_eq!(named["loose-1"]["labels"], json!({"app": "web"}));
    assert!(!named.to_string().contains("\"u\""), "no uids: {named}");
}

#[test]
fn replicaset_events_go_to_their_replicaset() {
    let mut names = Names::default();
    let mut obs = Observation::from_list(
        &list(vec![
            deploy("m"),
            rs("web-abc12", "abc12", "1", Some("web"), 1),
            bare_rs("solo", 1, 1),
        ]),
        &mut names,
    );
    let event = |name: &str, message: &str| {
        json!({"involvedObject": {"kind": "ReplicaSet", "name": name}, "type": "Normal",
               "metadata": {"uid": message}, "reason": "SuccessfulCreate",
               "source": {"component": "replicaset-controller"}, "message": message})
    };
    obs.add_events(
        &[
            event("web-abc12", "Created pod: web-abc12-q8k2z"),
            event("solo", "Created pod: solo-7hh2k"),
            event("gone", "Deleted pod: gone-aaaaa"),
        ],
        &names,
    );
    assert_eq!(
        obs.0["deployments"]["web"]["replicaSets"]["<web:rs1>"]["events"],
        json!({"Normal SuccessfulCreate from replicaset-controller: Created pod: <web:rs1>-<pod>": 1})
    );
    assert_eq!(
        obs.0["replicaSetsWithoutDeployment"]["solo"]["events"],
        json!({"Normal SuccessfulCreate from replicaset-controller: Created pod: solo-<pod>": 1})
    );
    assert_eq!(
        obs.0["eventsOfDeletedReplicaSets"]["gone"],
        json!({"Normal SuccessfulCreate from replicaset-controller: Deleted pod: gone-aaaaa": 1})
    );
}

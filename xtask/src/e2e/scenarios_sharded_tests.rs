//! Unit tests of the sharded kind scenario's parsing and checks.
use super::*;

const POD_A: &str = "kctrl-deployment-controller-7c9d5b8f4-abcde";
const POD_B: &str = "kctrl-deployment-controller-7c9d5b8f4-fghij";
const UUID: &str = "3f2a9c1e-0b1d-4c2e-8f3a-1234567890ab";

fn lease(pod: &str, buckets: &str) -> MemberLease {
    MemberLease {
        name: format!("deployment-controller-{pod}-{UUID}"),
        holder: format!("{pod}-{UUID}"),
        claims: buckets.parse().map_err(|_| buckets.to_owned()),
        expired_by: None,
        being_deleted: false,
    }
}

fn pods(names: &[&str]) -> Vec<String> {
    names.iter().map(|n| (*n).to_owned()).collect()
}

#[test]
fn a_holder_is_matched_to_its_pod_by_name_and_uuid() {
    let running = pods(&[POD_A, POD_B]);
    assert_eq!(
        pod_of(&format!("{POD_A}-{UUID}"), &running).map(String::as_str),
        Some(POD_A)
    );
    // A pod whose name is a prefix of another's is not mistaken for it.
    let short = pods(&["kctrl-deployment-controller-7c9d5b8f4"]);
    assert_eq!(pod_of(&format!("{POD_A}-{UUID}"), &short), None);
    assert_eq!(
        pod_of("kctrl-deployment-controller-bootstrap-x", &running),
        None
    );
    assert_eq!(pod_of("", &running), None);
}

#[test]
fn the_split_is_complete_only_with_every_bucket_claimed_once_by_live_members() {
    let members = [lease(POD_A, "0-31"), lease(POD_B, "32-63")];
    let s = Split::of(&members, &pods(&[POD_A, POD_B]));
    assert!(s.covered() && s.complete(2), "{}", s.describe());
    assert!(!s.complete(3));
    assert_eq!(s.holder_of(40), Some(POD_B));

    // A gap: named.
    let s = Split::of(
        &[lease(POD_A, "0-31"), lease(POD_B, "33-63")],
        &pods(&[POD_A, POD_B]),
    );
    assert!(!s.covered());
    assert!(
        s.describe()
            .contains("buckets 32 claimed by no live member"),
        "{}",
        s.describe()
    );

    // An overlap: named with both Leases.
    let s = Split::of(
        &[lease(POD_A, "0-32"), lease(POD_B, "32-63")],
        &pods(&[POD_A, POD_B]),
    );
    assert!(!s.covered());
    assert_eq!(s.overlaps.keys().copied().collect::<Vec<_>>(), [32]);
    assert!(
        s.describe().contains("bucket 32 claimed by"),
        "{}",
        s.describe()
    );

    // The claims of a pod that is gone do not count, and keep the split incomplete.
    let s = Split::of(&[lease(POD_A, "0-63"), lease(POD_B, "")], &pods(&[POD_B]));
    assert!(!s.covered());
    assert_eq!(s.missing.len(), 64);
    assert!(
        s.describe()
            .contains("of no running member still claims buckets 0-63")
    );

    // A cleared Lease (expired-by, no claims) of a gone pod is no member and no fault.
    let cleared = MemberLease {
        expired_by: Some("x".to_owned()),
        ..lease(POD_A, "")
    };
    let s = Split::of(&[cleared, lease(POD_B, "0-63")], &pods(&[POD_B]));
    assert!(s.complete(1), "{}", s.describe());

    // An unreadable annotation is a fault.
    let s = Split::of(
        &[lease(POD_B, "0-63"), lease(POD_A, "zz")],
        &pods(&[POD_A, POD_B]),
    );
    assert!(!s.covered());
    assert!(
        s.describe()
            .contains("unreadable buckets annotation \"zz\"")
    );
}

#[test]
fn member_leases_are_read_from_kubectl_json() {
    let json = format!(
        r#"{{"items":[
          {{"metadata":{{"name":"deployment-controller-{POD_A}-{UUID}",
             "annotations":{{"shard.kctrl.io/buckets":"0-20,40","shard.kctrl.io/expired-by":""}}}},
           "spec":{{"holderIdentity":"{POD_A}-{UUID}"}}}},
          {{"metadata":{{"name":"old","deletionTimestamp":"2026-11-29T10:00:00Z",
             "annotations":{{"shard.kctrl.io/expired-by":"b"}}}},"spec":{{}}}}]}}"#
    );
    let m = parse_members(&json).unwrap();
    assert_eq!(m.len(), 2);
    assert_eq!(m[0].holder, format!("{POD_A}-{UUID}"));
    assert_eq!(m[0].claims.as_ref().unwrap().len(), 22);
    assert_eq!(m[0].expired_by, None);
    assert!(!m[0].being_deleted);
    assert!(m[1].claims.as_ref().unwrap().is_empty());
    assert_eq!(m[1].expired_by.as_deref(), Some("b"));
    assert!(m[1].being_deleted);
    assert!(parse_members("{}").is_err());
}

#[test]
fn deployments_are_complete_only_with_their_generation_rolled_out() {
    let json = r#"{"items":[
      {"metadata":{"namespace":"a","name":"app-0","uid":"u0","generation":2},
       "spec":{"replicas":2},
       "status":{"observedGeneration":2,"replicas":2,"updatedReplicas":2,"availableReplicas":2}},
      {"metadata":{"namespace":"a","name":"app-1","uid":"u1","generation":2},
       "spec":{"replicas":2},
       "status":{"observedGeneration":2,"replicas":3,"updatedReplicas":2,"availableReplicas":2}},
      {"metadata":{"namespace":"b","name":"app-0","uid":"u2","generation":2},
       "spec":{"replicas":2},
       "status":{"observedGeneration":1,"replicas":2,"updatedReplicas":2,"availableReplicas":2}}]}"#;
    let d = parse_deployments(json).unwrap();
    assert_eq!(
        d.iter().map(|d| d.complete).collect::<Vec<_>>(),
        [true, false, false]
    );
    assert!(
        d[2].status.contains("generation 2 observed 1"),
        "{}",
        d[2].status
    );
}

#[test]
fn one_replica_set_per_template_revision() {
    let json = r#"{"items":[
      {"metadata":{"name":"app-0-1","ownerReferences":[{"uid":"u0","controller":true}]},
       "spec":{"template":{"metadata":{"annotations":{"kctrl.io/e2e-revision":"1"}}}}},
      {"metadata":{"name":"app-0-2","ownerReferences":[{"uid":"u0","controller":true}]},
       "spec":{"template":{"metadata":{"annotations":{"kctrl.io/e2e-revision":"2"}}}}},
      {"metadata":{"name":"orphan"},"spec":{}}]}"#;
    let sets = replica_sets_by_owner(json).unwrap();
    assert_eq!(sets.len(), 1);
    let revisions = ["1".to_owned(), "2".to_owned()];
    assert_eq!(replica_set_fault(&sets["u0"], &revisions), None);
    let duplicate = [
        ("1".to_owned(), "x".to_owned()),
        ("2".to_owned(), "y".to_owned()),
        ("2".to_owned(), "z".to_owned()),
    ];
    assert_eq!(
        replica_set_fault(&duplicate, &revisions).unwrap(),
        "2 ReplicaSets of revision 2: y, z"
    );
    assert_eq!(
        replica_set_fault(&duplicate[..1], &revisions).unwrap(),
        "no ReplicaSet of revision 2"
    );
    let stray = [
        ("1".to_owned(), "x".to_owned()),
        ("".to_owned(), "w".to_owned()),
    ];
    assert!(
        replica_set_fault(&stray, &revisions[..1])
            .unwrap()
            .contains("ReplicaSets of no revision written (\"\"): w")
    );
}

#[test]
fn the_workload_annotates_each_template_with_its_revision() {
    let ns = ["abc123-shard".to_owned(), "xyz789-shard".to_owned()];
    let m = workload_manifest(&ns, 2);
    let docs: Vec<Value> = m
        .split("---\n")
        .filter(|d| !d.trim().is_empty())
        .map(|d| serde_yaml_ng::from_str(d).unwrap())
        .collect();
    assert_eq!(docs.len(), ns.len() * (1 + DEPLOYMENTS_PER_NAMESPACE));
    let deployments: Vec<&Value> = docs.iter().filter(|d| d["kind"] == "Deployment").collect();
    assert_eq!(deployments.len(), 4);
    for d in deployments {
        assert_eq!(
            d["spec"]["template"]["metadata"]["annotations"][REVISION_ANNOTATION],
            "2"
        );
        assert_eq!(d["metadata"]["labels"][WORKLOAD_LABEL], WORKLOAD_VALUE);
    }
}

#[test]
fn the_manifests_are_deploy_sharded_and_the_lease_constants_match_them() {
    let root = crate::workspace_root();
    for m in SHARDED_MANIFESTS {
        assert!(root.join(m).is_file(), "{m}");
    }
    let deployment = std::fs::read_to_string(root.join("deploy/sharded/deployment.yaml")).unwrap();
    assert!(deployment.contains(&format!("--shard-lease-namespace={SHARD_LEASE_NAMESPACE}")));
    assert!(deployment.contains(&format!("--shard-group={SHARD_GROUP}")));
    assert!(deployment.contains(&format!("replicas: {REPLICAS}")));
    assert!(deployment.contains("app.kubernetes.io/component: controller"));
    assert_eq!(SHARD_GROUP_LABEL, kctrl_shard::GROUP_LABEL);
    assert_eq!(SHARD_BUCKETS_ANNOTATION, kctrl_shard::BUCKETS_ANNOTATION);
}

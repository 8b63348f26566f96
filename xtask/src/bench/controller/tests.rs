//! Unit tests of `bench controller`'s arguments, workload and process handling.

use super::*;
use kctrl_client::versioned::Versioned;

#[test]
fn audit_policy_records_only_the_two_controller_identities() {
    let policy: serde_yaml_ng::Value = serde_yaml_ng::from_str(&audit_policy()).unwrap();
    assert_eq!(policy["kind"], "Policy");
    assert_eq!(policy["apiVersion"], "audit.k8s.io/v1");
    let rules = policy["rules"].as_sequence().unwrap();
    assert_eq!(rules.len(), 2);
    assert_eq!(rules[0]["level"], "Metadata");
    let users: Vec<&str> = rules[0]["users"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|u| u.as_str().unwrap())
        .collect();
    assert_eq!(users, [OURS_USER, UPSTREAM_USER, UPSTREAM_REPLICASET_USER]);
    assert_eq!(rules[1]["level"], "None");
    let omitted = policy["omitStages"].as_sequence().unwrap();
    assert!(omitted.iter().any(|s| s == "ResponseStarted"));
}

#[test]
fn sides_alternate_by_round() {
    assert_eq!(Side::order(0), [Side::Ours, Side::Upstream]);
    assert_eq!(Side::order(1), [Side::Upstream, Side::Ours]);
    assert_eq!(Side::order(2), [Side::Ours, Side::Upstream]);
}

#[test]
fn phases_are_named_by_letter_and_kept_in_round_order() {
    let letters = |s: &str| s.split(',').map(str::to_owned).collect::<Vec<_>>();
    assert_eq!(round_phases(&[], false).unwrap(), Phase::ROUND.to_vec());
    assert_eq!(round_phases(&[], true).unwrap(), Phase::ROUND[..3].to_vec());
    assert_eq!(
        round_phases(&letters("c,a,a"), false).unwrap(),
        [Phase::Create, Phase::ScaleMidRollout]
    );
    assert_eq!(
        round_phases(&letters("f,a,c"), false).unwrap(),
        [Phase::Create, Phase::ScaleMidRollout, Phase::Recreate]
    );
    let unknown = round_phases(&letters("a,g"), false).unwrap_err();
    assert!(unknown.to_string().contains("\"g\""), "{unknown}");
    let at_rest = round_phases(&letters("a,e"), false).unwrap_err();
    assert!(at_rest.to_string().contains("alone"), "{at_rest}");
    let without_a = round_phases(&letters("b"), false).unwrap_err();
    assert!(without_a.to_string().contains("include a"), "{without_a}");
}

#[test]
fn arguments_parse() {
    use clap::Parser;
    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        args: ControllerArgs,
    }
    let cli = Cli::try_parse_from([
        "x",
        "--deployments",
        "100,500",
        "--at-rest",
        "0",
        "--rounds",
        "2",
    ])
    .unwrap();
    assert_eq!(cli.args.deployments, [100, 500]);
    assert_eq!(cli.args.at_rest, [0]);
    assert_eq!(cli.args.rounds, Some(2));
    assert_eq!(cli.args.name, "bench-controller");
    assert!(Cli::try_parse_from(["x", "--deployments", "many"]).is_err());
}

#[test]
fn workload_objects() {
    let d = deployment(7).unwrap();
    assert_eq!(d.metadata.name.as_deref(), Some("d-0007"));
    let spec = d.spec.into_value().unwrap();
    assert_eq!(spec.replicas, Some(REPLICAS));
    assert_eq!(
        spec.selector.match_labels.unwrap()["app"],
        "d-0007".to_string()
    );
    let patch = image_patch("b");
    assert_eq!(
        patch["spec"]["template"]["spec"]["containers"][0]["image"],
        "registry.k8s.io/pause:b"
    );
}

/// An environment whose "cluster" is a scratch directory and whose controller is `ours`.
fn scratch_env(name: &str, ours: &str) -> (PathBuf, Env) {
    use std::os::unix::fs::PermissionsExt;
    let dir = std::env::temp_dir().join(format!(
        "kctrl-bench-controller-{name}-{}",
        std::process::id()
    ));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(dir.join("bin")).unwrap();
    fs::create_dir_all(dir.join("bench/logs")).unwrap();
    let binary = dir.join("bin/deployment-controller");
    fs::write(&binary, format!("#!/bin/sh\n{ours}\n")).unwrap();
    fs::set_permissions(&binary, fs::Permissions::from_mode(0o755)).unwrap();
    let cluster = dir.join("cluster");
    let env = Env {
        measured: Measured::Deployment,
        ours: binary,
        ours_env: Vec::new(),
        kcm: PathBuf::from("/nonexistent/kube-controller-manager"),
        info: ClusterInfo {
            name: name.to_owned(),
            dir: cluster.clone(),
            admin_kubeconfig: cluster.join("kubeconfig/admin.kubeconfig"),
            controller_kubeconfig: cluster.join("kubeconfig/deployment-controller.kubeconfig"),
            apiserver_url: "https://127.0.0.1:1".into(),
            etcd_endpoint: "http://127.0.0.1:2".into(),
            kubectl: PathBuf::from("kubectl"),
            kubernetes_version: "v1.36.5".into(),
        },
        dir: dir.join("bench"),
        audit_log: dir.join("bench/audit.log"),
        ticks_per_second: 100,
        callgrind: false,
        phases: Phase::ROUND.to_vec(),
        phase_timeout: Duration::from_secs(10),
        peak_reset_works: std::sync::atomic::AtomicBool::new(true),
        nodes: 3,
        replicas: REPLICAS,
        qps: QPS,
    };
    (dir, env)
}

#[test]
fn a_second_controller_is_refused_and_a_stopped_one_is_gone() {
    let (dir, env) = scratch_env(
        "alone",
        "trap 'exit 0' TERM\necho 'INFO Caches are synced for deployment'\nwhile :; do sleep 0.1; done",
    );
    ensure_no_deployment_controller(&env).unwrap();
    let mut first = start(&env, Side::Ours, "t1", QPS).unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let synced = runtime
        .block_on(first.wait_synced(Duration::from_secs(10)))
        .unwrap();
    assert!(synced < 10.0);
    let log = fs::read_to_string(&first.log).unwrap_or_default();
    assert!(log.contains("Caches are synced"), "{log}");
    // The process is found by its command line (it names the cluster's kubeconfig).
    let running = xtask_contender::fresh::deployment_controllers(&env.info.dir);
    assert_eq!(running.len(), 1, "{running:?}");
    assert_eq!(running[0].0, first.pid());
    let err = start(&env, Side::Ours, "t2", QPS)
        .err()
        .expect("a second controller must be refused")
        .to_string();
    assert!(err.contains("already runs"), "{err}");
    let (cpu, memory) = first.usage().unwrap();
    assert!(memory.rss > 0 && memory.peak >= memory.rss);
    assert!(cpu.seconds(100) >= 0.0);
    first.reset_peak(&env);
    let pid = first.pid();
    first.stop(&env).unwrap();
    assert!(!Path::new(&format!("/proc/{pid}")).exists());
    ensure_no_deployment_controller(&env).unwrap();
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_controller_that_exits_before_syncing_is_an_error_naming_its_log() {
    let (dir, env) = scratch_env("early", "echo 'cannot reach the API server'; exit 1");
    let mut c = start(&env, Side::Ours, "t", QPS).unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let err = runtime
        .block_on(c.wait_synced(Duration::from_secs(10)))
        .unwrap_err()
        .to_string();
    assert!(err.contains("exited"), "{err}");
    assert!(err.contains("cannot reach the API server"), "{err}");
    c.stop(&env).unwrap();
    fs::remove_dir_all(&dir).unwrap();
}

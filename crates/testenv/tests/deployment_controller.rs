//! `TestEnvBuilder::deployment_controller`: our deployment-controller rolls a Deployment out on
//! the plane as its only Deployment controller, and stops with it.
//!
//! Like `controller.rs`, this starts real processes and runs only with `KCTRL_TESTENV_E2E` set
//! (`cargo xtask e2e` sets it). The executable is built first when needed (`build_if_missing`:
//! in this checkout, `cargo build -p kctrl-deployment-controller`).

use std::io::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::core::v1::{Container, Namespace, PodSpec, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use kctrl_client::{Api, PostParams};
use kctrl_testenv::TestEnv;

const RUN_ENV: &str = "KCTRL_TESTENV_E2E";

fn enabled(test: &str) -> bool {
    if std::env::var_os(RUN_ENV).is_some() {
        return true;
    }
    let _ = writeln!(
        std::io::stderr(),
        "kctrl-testenv: {test} skipped: {RUN_ENV} is not set (`cargo xtask e2e` runs it)"
    );
    false
}

/// Processes whose command line mentions `dir`.
fn processes_of(dir: &Path) -> Vec<String> {
    let marker = dir.display().to_string();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().parse::<u32>().is_ok())
        .filter_map(|e| {
            let raw = std::fs::read(e.path().join("cmdline")).ok()?;
            let cmd = String::from_utf8_lossy(&raw).replace('\0', " ");
            cmd.contains(&marker).then_some(cmd)
        })
        .collect()
}

fn deployment(name: &str, replicas: i32) -> Deployment {
    let labels: std::collections::BTreeMap<String, String> =
        [("app".to_owned(), name.to_owned())].into();
    Deployment {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            ..Default::default()
        },
        spec: DeploymentSpec {
            replicas: Some(replicas),
            selector: LabelSelector {
                match_labels: Some(labels.clone()),
                ..Default::default()
            },
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels),
                    ..Default::default()
                }),
                spec: Some(PodSpec {
                    containers: vec![Container {
                        name: "app".to_owned(),
                        image: Some("registry.k8s.io/pause:3.10".to_owned()),
                        ..Default::default()
                    }],
                    ..Default::default()
                }),
            },
            ..Default::default()
        },
        ..Default::default()
    }
}

#[tokio::test]
async fn our_deployment_controller_rolls_out_a_deployment_and_stops_with_the_plane() {
    if !enabled("our_deployment_controller_rolls_out_a_deployment_and_stops_with_the_plane") {
        return;
    }
    let env = TestEnv::builder()
        .controller_manager(true)
        .kwok_nodes(1)
        .deployment_controller(true)
        .build_if_missing(true)
        .start()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let log = env
        .deployment_controller_log()
        .expect("a log of the controller")
        .to_path_buf();
    assert!(log.is_file(), "{}", log.display());
    // Ours, and only ours: kube-controller-manager runs without its Deployment controller.
    let controllers: Vec<String> = processes_of(env.dir())
        .into_iter()
        .filter(|c| c.contains("deployment-controller --kubeconfig"))
        .collect();
    assert_eq!(controllers.len(), 1, "{controllers:?}");
    assert!(
        processes_of(env.dir())
            .iter()
            .any(|c| c.contains("kube-controller-manager") && c.contains("-deployment")),
        "{:?}",
        processes_of(env.dir())
    );

    let client = env.client().unwrap();
    let ns = "rollout";
    Api::<Namespace>::all(client.clone())
        .create(
            &PostParams::default(),
            &Namespace {
                metadata: ObjectMeta {
                    name: Some(ns.to_owned()),
                    ..Default::default()
                },
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let api: Api<Deployment> = Api::namespaced(client, ns);
    // The namespace's default ServiceAccount (which pods need) comes from
    // kube-controller-manager a moment after the namespace: the controller retries meanwhile.
    api.create(&PostParams::default(), &deployment("web", 2))
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let d = api.get("web").await.unwrap();
        let available = d.status.and_then(|s| s.available_replicas).unwrap_or(0);
        if available == 2 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "web has {available} of 2 replicas available after 90 s; controller log {}",
            log.display()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    let dir = env.dir().to_path_buf();
    env.stop().unwrap();
    assert!(processes_of(&dir).is_empty(), "{:?}", processes_of(&dir));
    assert!(!dir.exists(), "{} is still there", dir.display());
}

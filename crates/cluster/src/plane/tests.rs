//! Unit tests of the plane: names, ports, command lines, stage files, state files.

use super::start::nodes_manifest;
use super::*;

/// A cluster `t` under `/x` with the cache at `/c`, for the command-line tests.
fn fixture() -> (Layout, Pki, Cache, Ports) {
    (
        Layout {
            dir: PathBuf::from("/x/target/kctrl-cluster/t"),
        },
        Pki {
            dir: PathBuf::from("/x/pki"),
        },
        Cache {
            root: PathBuf::from("/c"),
            release: crate::versions::DEFAULT_RELEASE,
        },
        Ports {
            etcd_client: 1,
            etcd_peer: 2,
            apiserver: 3,
            controller_manager: 4,
            scheduler: 5,
            kwok: 6,
        },
    )
}

#[test]
fn names_are_validated() {
    assert!(validate_name("dev").is_ok());
    assert!(validate_name("e2e-1").is_ok());
    for bad in ["", "-x", "Dev", "a/b", "a b", &"x".repeat(41)] {
        assert!(validate_name(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn ports_are_distinct() {
    let p = Ports::allocate().unwrap();
    let mut all = [
        p.etcd_client,
        p.etcd_peer,
        p.apiserver,
        p.controller_manager,
        p.scheduler,
        p.kwok,
    ];
    all.sort_unstable();
    assert!(all.windows(2).all(|w| w[0] != w[1]), "{all:?}");
}

#[test]
fn controller_manager_runs_without_the_deployment_controller() {
    let (layout, pki, cache, ports) = fixture();
    let kcm = args(
        Component::ControllerManager,
        &layout,
        &pki,
        &ports,
        &cache,
        "t",
    );
    assert!(kcm.contains(&"--controllers=*,-deployment-controller".to_owned()));
    assert!(!crate::process::runs_deployment_controller(
        &std::iter::once("kube-controller-manager".to_owned())
            .chain(kcm.iter().cloned())
            .collect::<Vec<_>>()
    ));
    // The upstream baseline: the same flags, with the Deployment controller on.
    let upstream = with_controllers(kcm.clone(), true, true);
    assert_eq!(upstream.len(), kcm.len());
    assert!(upstream.contains(&"--controllers=*".to_owned()));
    assert!(crate::process::runs_deployment_controller(
        &std::iter::once("kube-controller-manager".to_owned())
            .chain(upstream)
            .collect::<Vec<_>>()
    ));
    // Ours for both: kube-controller-manager without either.
    let neither = with_controllers(kcm.clone(), false, false);
    assert!(
        neither
            .contains(&"--controllers=*,-deployment-controller,-replicaset-controller".to_owned())
    );
    assert_eq!(
        with_controllers(neither, false, true),
        kcm,
        "the flag is replaced, not added"
    );
    let api = args(Component::Apiserver, &layout, &pki, &ports, &cache, "t");
    assert!(api.contains(&"--authorization-mode=Node,RBAC".to_owned()));
    assert!(api.contains(&"--bind-address=127.0.0.1".to_owned()));
    // Every component's command line names the cluster directory (stray detection relies on it).
    for c in Component::ALL {
        assert!(
            args(c, &layout, &pki, &ports, &cache, "t")
                .iter()
                .any(|a| a.contains("/x/")),
            "{c:?}"
        );
    }
}

#[test]
fn kwok_reads_the_cached_node_stages_and_our_pod_stages() {
    let (layout, pki, cache, ports) = fixture();
    let kwok = args(Component::Kwok, &layout, &pki, &ports, &cache, "t");
    let configs: Vec<&str> = kwok
        .iter()
        .filter_map(|a| a.strip_prefix("--config="))
        .collect();
    assert_eq!(configs.len(), 1, "{kwok:?}");
    let files: Vec<&str> = configs[0].split(',').collect();
    let ours = "/x/target/kctrl-cluster/t/manifests/kwok-stages";
    assert_eq!(
        files,
        [
            "/c/share/kwok-stages/node-initialize.yaml",
            "/c/share/kwok-stages/node-heartbeat-with-lease.yaml",
            "/c/share/kwok-stages/pod-complete.yaml",
            "/c/share/kwok-stages/pod-delete.yaml",
            &format!("{ours}/pod-ready.yaml"),
            &format!("{ours}/pod-image-pull-error.yaml"),
            &format!("{ours}/pod-image-pull-backoff.yaml"),
            &format!("{ours}/pod-running-unready.yaml"),
            &format!("{ours}/pod-ready-after-delay.yaml"),
        ]
    );
}

#[test]
fn our_stage_files_are_installed_with_their_contents() {
    let dir = std::env::temp_dir().join(format!("kctrl-stages-test-{}", std::process::id()));
    let paths = stages::install(&dir.join("kwok-stages")).unwrap();
    assert_eq!(paths.len(), stages::STAGES.len());
    for ((_, text), path) in stages::STAGES.iter().zip(&paths) {
        assert_eq!(fs::read_to_string(path).unwrap(), *text);
    }
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn node_manifest_has_the_kwok_annotation() {
    let m = nodes_manifest(3);
    assert_eq!(m.matches("kind: Node").count(), 3);
    assert_eq!(m.matches("kwok.x-k8s.io/node: fake").count(), 3);
    assert!(m.contains("name: kwok-node-2"));
}

/// The state file of a cluster `dev` of Kubernetes `version` with its cache at `/c`.
fn state(version: &str) -> State {
    State {
        name: "dev".into(),
        kubernetes: version.into(),
        etcd: "v3.6.8".into(),
        kwok: "v0.8.0".into(),
        cache_dir: PathBuf::from("/c"),
        nodes: 3,
        ports: Ports {
            etcd_client: 2379,
            etcd_peer: 2380,
            apiserver: 6443,
            controller_manager: 1,
            scheduler: 2,
            kwok: 3,
        },
        started_at: String::new(),
        apiserver_args: Vec::new(),
        feature_gates: Vec::new(),
        scheduler_args: Vec::new(),
        controller_manager_args: Vec::new(),
        deployment_controller: false,
        replicaset_controller: true,
    }
}

#[test]
fn a_state_from_before_the_replicaset_option_is_of_a_plane_that_runs_it() {
    let mut json = serde_json::to_value(state("v1.37.2")).unwrap();
    json.as_object_mut()
        .unwrap()
        .remove("replicaset_controller");
    let old: State = serde_json::from_value(json).unwrap();
    assert!(old.replicaset_controller && !old.deployment_controller);
}

#[test]
fn env_lists_both_kubeconfigs_the_etcd_endpoint_and_the_running_release() {
    let layout = Layout {
        dir: PathBuf::from("/t/dev"),
    };
    // Whatever release a new `up` would pick, the env describes what runs.
    let vars = ClusterInfo::from_state(&layout, &state("v1.36.5")).env_vars();
    let get = |k: &str| {
        vars.iter()
            .find(|(n, _)| *n == k)
            .map(|(_, v)| v.clone())
            .unwrap()
    };
    assert_eq!(get("KUBECONFIG"), "/t/dev/kubeconfig/admin.kubeconfig");
    assert_eq!(
        get("KCTRL_CONTROLLER_KUBECONFIG"),
        "/t/dev/kubeconfig/deployment-controller.kubeconfig"
    );
    assert_eq!(get("KCTRL_ETCD_ENDPOINT"), "http://127.0.0.1:2379");
    assert_eq!(get("KCTRL_APISERVER"), "https://127.0.0.1:6443");
    assert_eq!(get("KCTRL_K8S_VERSION"), "v1.36.5");
    assert_eq!(get("KCTRL_KUBECTL"), "/c/bin/kubectl");
}

#[test]
fn a_cluster_runs_from_the_cache_its_state_file_names() {
    for r in crate::versions::RELEASES {
        let cache = state_cache("dev", &state(r.kubernetes)).unwrap();
        assert_eq!(cache.root, PathBuf::from("/c"));
        assert!(std::ptr::eq(cache.release, r));
    }
    let err = format!("{:#}", state_cache("dev", &state("v1.35.0")).unwrap_err());
    assert!(err.contains("runs Kubernetes v1.35.0"), "{err}");
    assert!(err.contains(&supported_list()), "{err}");
    assert!(err.contains("cargo xtask cluster down --name dev"), "{err}");
    // Processes are recognised by the binaries of the state's cache first, then by those of
    // every supported release (a lost state file); each directory once.
    let roots = cache_roots(Some(&state("v1.35.0")));
    assert_eq!(roots[0], PathBuf::from("/c"));
    let all = Cache::all().unwrap();
    assert_eq!(roots.len(), 1 + all.len());
    assert!(all.iter().all(|c| roots.contains(&c.root)));
    assert_eq!(cache_roots(None).len(), all.len());
}

#[test]
fn start_in_refuses_an_unbuilt_cache_before_touching_the_directory() {
    let base = std::env::temp_dir().join(format!("kctrl-start-in-{}", std::process::id()));
    let cache = Cache::under(&base.join("cache"), crate::versions::DEFAULT_RELEASE);
    let layout = Layout::at(base.join("plane"));
    let opts = UpOptions {
        name: "t".into(),
        nodes: 1,
        apiserver_args: Vec::new(),
        feature_gates: Vec::new(),
        scheduler_args: Vec::new(),
        controller_manager_args: Vec::new(),
        deployment_controller: false,
        replicaset_controller: true,
        release: crate::versions::DEFAULT_RELEASE,
    };
    let err = start_in(
        &layout,
        &cache,
        &opts,
        &[Component::Etcd, Component::Apiserver],
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("are not built in"), "{err}");
    assert!(err.contains("kube-apiserver"), "{err}");
    assert!(!layout.dir.exists());
    let err = start_in(
        &layout,
        &cache,
        &UpOptions {
            nodes: 0,
            ..opts.clone()
        },
        &Component::ALL,
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("at least one node"), "{err}");
    let err = start_in(
        &layout,
        &cache,
        &UpOptions {
            name: "A b".into(),
            ..opts
        },
        &[],
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("invalid cluster name"), "{err}");
}

#[test]
fn stop_stops_attached_processes_and_ignores_stale_records() {
    let dir = std::env::temp_dir().join(format!("kctrl-cluster-attached-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    let layout = Layout::at(&dir);
    fs::create_dir_all(dir.join("run")).unwrap();
    fs::create_dir_all(layout.logs()).unwrap();
    let pid_file = layout.attached_pid_file("sleeper");
    assert!(pid_file.starts_with(dir.join("run")));
    let (mut child, rec) = process::spawn(
        Path::new("/bin/sleep"),
        &["30".to_owned()],
        &layout.logs().join("sleeper.log"),
        &pid_file,
    )
    .unwrap();
    assert!(rec.is_running());
    // A record of a process that cannot exist (above Linux's largest pid): ignored.
    fs::write(layout.attached_pid_file("stale"), "4194305 1\n").unwrap();
    assert!(
        !process::read_pid_file(&layout.attached_pid_file("stale"))
            .unwrap()
            .is_running()
    );

    assert_eq!(stop(&layout).unwrap(), 1);
    // Reaped by us, its parent: it exited on SIGTERM.
    let status = child.wait().unwrap();
    assert!(!status.success());
    assert!(!rec.is_running());
    assert!(!dir.join("run").exists(), "runtime state removed");
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn feature_gates_become_one_apiserver_flag() {
    let gates =
        |g: &[&str]| feature_gates_flag(&g.iter().map(|s| s.to_string()).collect::<Vec<_>>());
    assert_eq!(gates(&[]).unwrap(), None);
    assert_eq!(
        gates(&["ShardedListAndWatch=true"]).unwrap().as_deref(),
        Some("--feature-gates=ShardedListAndWatch=true")
    );
    // Comma-joined and repeated entries merge; the last value of a gate wins.
    assert_eq!(
        gates(&["A=true, B=false", "A=false", ""])
            .unwrap()
            .as_deref(),
        Some("--feature-gates=B=false,A=false")
    );
    for (bad, names) in [
        ("ShardedListAndWatch", "has no value"),
        ("ShardedListAndWatch=yes", "must be true or false"),
        ("=true", "is not a gate name"),
        ("--feature-gates=A=true", "is not a gate name"),
    ] {
        let err = gates(&[bad]).unwrap_err().to_string();
        assert!(err.contains(names) && err.contains(bad), "{bad}: {err}");
    }
    // Before the extra flags, so an explicit flag of the user still comes last.
    assert_eq!(
        apiserver_extra_args(&["X=true".into()], &["--v=4".into()]).unwrap(),
        ["--feature-gates=X=true", "--v=4"]
    );
}

#[test]
fn start_in_refuses_malformed_feature_gates() {
    let base = std::env::temp_dir().join(format!("kctrl-gates-{}", std::process::id()));
    let cache = Cache::under(&base.join("cache"), crate::versions::DEFAULT_RELEASE);
    let layout = Layout::at(base.join("plane"));
    let opts = UpOptions {
        name: "t".into(),
        nodes: 1,
        apiserver_args: Vec::new(),
        feature_gates: vec!["ShardedListAndWatch=on".into()],
        scheduler_args: Vec::new(),
        controller_manager_args: Vec::new(),
        deployment_controller: false,
        replicaset_controller: true,
        release: crate::versions::DEFAULT_RELEASE,
    };
    let err = start_in(
        &layout,
        &cache,
        &opts,
        &[Component::Etcd, Component::Apiserver],
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("ShardedListAndWatch=on"), "{err}");
    assert!(!layout.dir.exists());
}

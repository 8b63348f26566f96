//! Starting a plane: the components' command lines, launching them in order and waiting until
//! each serves, the fake nodes and the controller's ServiceAccount.

use super::*;

/// A component started by this `up`, kept to notice early exits.
pub(super) struct Started {
    pub(super) component: Component,
    pub(super) child: Child,
    pub(super) log: PathBuf,
}

pub(super) fn check_alive(started: &mut [Started]) -> Result<()> {
    for s in started.iter_mut() {
        if let Some(status) = s.child.try_wait()? {
            bail!(
                "{} exited during start-up ({status}).\nLog: {}\n--- last lines ---\n{}",
                s.component.name(),
                s.log.display(),
                process::tail(&s.log, 25)
            );
        }
    }
    Ok(())
}

/// Polls `probe` until it returns true, failing early when a started component exits and on
/// `timeout` (naming `blame`'s log).
pub(super) fn wait_for(
    what: &str,
    timeout: Duration,
    started: &mut [Started],
    blame: Component,
    layout: &Layout,
    mut probe: impl FnMut() -> bool,
) -> Result<()> {
    let t0 = Instant::now();
    loop {
        check_alive(started)?;
        if probe() {
            eprintln!("  {what} ({})", fmt_duration(t0.elapsed()));
            return Ok(());
        }
        if t0.elapsed() > timeout {
            let log = layout.log(blame);
            bail!(
                "timed out after {} waiting for {what}; {} may be unhealthy.\nLog: {}\n--- last lines ---\n{}",
                fmt_duration(timeout),
                blame.name(),
                log.display(),
                process::tail(&log, 25)
            );
        }
        thread::sleep(Duration::from_millis(250));
    }
}

/// Starts the `components` of a plane (etcd and kube-apiserver always; the others as listed)
/// into `layout`, which is wiped first, and waits until it is usable.
pub(super) fn start(
    layout: &Layout,
    cache: &Cache,
    kubernetes_version: &str,
    opts: &UpOptions,
    components: &[Component],
) -> Result<ClusterInfo> {
    let name = &opts.name;
    let runs = |c: Component| components.contains(&c);
    if layout.dir.exists() {
        fs::remove_dir_all(&layout.dir)
            .with_context(|| format!("removing {}", layout.dir.display()))?;
    }
    for d in [
        layout.logs(),
        layout.run(),
        layout.manifests(),
        layout.dir.join("kubeconfig"),
    ] {
        fs::create_dir_all(&d)?;
    }
    stages::install(&layout.kwok_stages())?;
    let ports = Ports::allocate()?;
    let pki = Pki::generate(&layout.pki(), name, &IDENTITIES)?;
    let server = format!("https://127.0.0.1:{}", ports.apiserver);
    for id in &IDENTITIES {
        fs::write(
            layout.kubeconfig(id),
            pki::kubeconfig(&pki, name, &server, id)?,
        )?;
    }
    let state = State {
        name: name.clone(),
        kubernetes: kubernetes_version.to_owned(),
        etcd: cache.release.etcd.to_owned(),
        kwok: cache.release.kwok.to_owned(),
        cache_dir: cache.root.clone(),
        nodes: opts.nodes,
        apiserver_args: opts.apiserver_args.clone(),
        feature_gates: opts.feature_gates.clone(),
        controller_manager_args: opts.controller_manager_args.clone(),
        scheduler_args: opts.scheduler_args.clone(),
        deployment_controller: opts.deployment_controller,
        replicaset_controller: opts.replicaset_controller,
        ports,
        started_at: crate::toolchain::utc_now_rfc3339(),
    };
    // Written before anything starts, so `down` finds a half-started cluster after a crash.
    fs::write(layout.state(), serde_json::to_string_pretty(&state)?)?;
    let info = ClusterInfo::from_state(layout, &state);
    let admin = Kubectl {
        bin: info.kubectl.clone(),
        kubeconfig: info.admin_kubeconfig.clone(),
    };
    let mut started: Vec<Started> = Vec::new();
    let launch = |c: Component, started: &mut Vec<Started>| -> Result<()> {
        let mut args = args(c, layout, &pki, &ports, cache, name);
        if c == Component::Apiserver {
            args.extend(apiserver_extra_args(
                &opts.feature_gates,
                &opts.apiserver_args,
            )?);
        }
        if c == Component::ControllerManager {
            args = with_controllers(args, opts.deployment_controller, opts.replicaset_controller);
            args.extend(opts.controller_manager_args.iter().cloned());
        }
        if c == Component::Scheduler {
            args.extend(opts.scheduler_args.iter().cloned());
        }
        let log = layout.log(c);
        let (child, ProcRecord { pid, .. }) =
            process::spawn(&cache.binary(c.binary()), &args, &log, &layout.pid_file(c))?;
        eprintln!(
            "  started {} (pid {pid}, 127.0.0.1:{}), log: {}",
            c.name(),
            c.port(&ports),
            log.display()
        );
        started.push(Started {
            component: c,
            child,
            log,
        });
        Ok(())
    };

    launch(Component::Etcd, &mut started)?;
    let etcd_endpoint = info.etcd_endpoint.clone();
    wait_for(
        "etcd is healthy",
        Duration::from_secs(60),
        &mut started,
        Component::Etcd,
        layout,
        || etcd::healthy(&etcd_endpoint),
    )?;

    launch(Component::Apiserver, &mut started)?;
    wait_for(
        "kube-apiserver is ready (/readyz)",
        Duration::from_secs(180),
        &mut started,
        Component::Apiserver,
        layout,
        || admin.ok(&["get", "--raw", "/readyz"]),
    )?;
    let version: serde_json::Value =
        serde_json::from_str(&admin.run(&["get", "--raw", "/version"], None)?)?;
    let git_version = version["gitVersion"].as_str().unwrap_or("?").to_owned();
    if git_version != kubernetes_version {
        bail!(
            "kube-apiserver reports version {git_version}, expected {kubernetes_version} \
             (version ldflags missing?)"
        );
    }

    let others: Vec<Component> = [
        Component::ControllerManager,
        Component::Scheduler,
        Component::Kwok,
    ]
    .into_iter()
    .filter(|c| runs(*c))
    .collect();
    for c in &others {
        launch(*c, &mut started)?;
    }
    for c in &others {
        let port = c.port(&ports);
        wait_for(
            &format!("{} is serving", c.name()),
            Duration::from_secs(120),
            &mut started,
            *c,
            layout,
            || port_open(port),
        )?;
    }

    if runs(Component::Kwok) {
        let nodes = nodes_manifest(opts.nodes);
        let nodes_file = layout.manifests().join("nodes.yaml");
        fs::write(&nodes_file, &nodes)?;
        admin.run(&["apply", "-f", "-"], Some(&nodes))?;
    }
    let identity = identity_manifest();
    fs::write(layout.manifests().join("identity.yaml"), &identity)?;
    admin.run(&["apply", "-f", "-"], Some(&identity))?;

    if runs(Component::Kwok) {
        wait_for(
            &format!("{} KWOK node(s) are Ready", opts.nodes),
            Duration::from_secs(120),
            &mut started,
            Component::Kwok,
            layout,
            || ready_nodes(&admin).is_ok_and(|n| n >= opts.nodes),
        )?;
    }
    // The ServiceAccount controller of kube-controller-manager creates it.
    if runs(Component::ControllerManager) {
        wait_for(
            "the default ServiceAccount exists",
            Duration::from_secs(120),
            &mut started,
            Component::ControllerManager,
            layout,
            || {
                admin.ok(&[
                    "-n",
                    "default",
                    "get",
                    "serviceaccount",
                    "default",
                    "-o",
                    "name",
                ])
            },
        )?;
    }
    check_alive(&mut started)?;
    Ok(info)
}

/// Number of nodes whose Ready condition is True.
pub(super) fn ready_nodes(kubectl: &Kubectl) -> Result<usize> {
    let list: serde_json::Value =
        serde_json::from_str(&kubectl.run(&["get", "nodes", "-o", "json"], None)?)?;
    let items = list["items"]
        .as_array()
        .ok_or_else(|| anyhow!("no items in node list"))?;
    Ok(items
        .iter()
        .filter(|n| {
            n["status"]["conditions"].as_array().is_some_and(|cs| {
                cs.iter()
                    .any(|c| c["type"] == "Ready" && c["status"] == "True")
            })
        })
        .count())
}

/// Command-line flags of each component.
pub(super) fn args(
    c: Component,
    layout: &Layout,
    pki: &Pki,
    ports: &Ports,
    cache: &Cache,
    name: &str,
) -> Vec<String> {
    let p = |p: &Path| p.display().to_string();
    let serving = pki.serving();
    let kc = |id: &Identity| p(&layout.kubeconfig(id));
    match c {
        Component::Etcd => vec![
            format!("--name=kctrl-{name}"),
            format!("--data-dir={}", p(&layout.dir.join("etcd-data"))),
            format!(
                "--listen-client-urls=http://127.0.0.1:{}",
                ports.etcd_client
            ),
            format!(
                "--advertise-client-urls=http://127.0.0.1:{}",
                ports.etcd_client
            ),
            format!("--listen-peer-urls=http://127.0.0.1:{}", ports.etcd_peer),
            format!(
                "--initial-advertise-peer-urls=http://127.0.0.1:{}",
                ports.etcd_peer
            ),
            format!(
                "--initial-cluster=kctrl-{name}=http://127.0.0.1:{}",
                ports.etcd_peer
            ),
            "--initial-cluster-state=new".into(),
            // Throw-away test data: no fsync (much faster on shared disks).
            "--unsafe-no-fsync=true".into(),
            // Room for the benchmarks' largest states (150,000 Pods and their revisions between
            // compactions come near etcd's default 2 GiB quota, past which it refuses writes).
            "--quota-backend-bytes=8589934592".into(),
        ],
        Component::Apiserver => vec![
            format!("--etcd-servers=http://127.0.0.1:{}", ports.etcd_client),
            "--bind-address=127.0.0.1".into(),
            // Explicit, so start-up never depends on a default route.
            "--advertise-address=127.0.0.1".into(),
            format!("--secure-port={}", ports.apiserver),
            format!("--tls-cert-file={}", p(&serving.cert)),
            format!("--tls-private-key-file={}", p(&serving.key)),
            format!("--client-ca-file={}", p(&pki.ca().cert)),
            "--authorization-mode=Node,RBAC".into(),
            format!("--service-cluster-ip-range={SERVICE_CIDR}"),
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local".into(),
            format!("--service-account-key-file={}", p(&pki.sa_pub())),
            format!("--service-account-signing-key-file={}", p(&pki.sa_key())),
            "--allow-privileged=true".into(),
            // The `kubernetes` Endpoints would point at 127.0.0.1, which validation rejects.
            "--endpoint-reconciler-type=none".into(),
            "--profiling=false".into(),
        ],
        Component::ControllerManager => vec![
            format!("--kubeconfig={}", kc(&KCM)),
            format!("--authentication-kubeconfig={}", kc(&KCM)),
            format!("--authorization-kubeconfig={}", kc(&KCM)),
            "--bind-address=127.0.0.1".into(),
            format!("--secure-port={}", ports.controller_manager),
            format!("--tls-cert-file={}", p(&serving.cert)),
            format!("--tls-private-key-file={}", p(&serving.key)),
            "--leader-elect=false".into(),
            // Everything that is on by default except the Deployment controller (ours replaces
            // it); the ReplicaSet controller and the garbage collector stay on (the options
            // of `start` change this, see `with_controllers`).
            controllers_flag(false, true),
            // Each controller acts as its own ServiceAccount, as in kubeadm clusters.
            "--use-service-account-credentials=true".into(),
            format!("--service-account-private-key-file={}", p(&pki.sa_key())),
            format!("--root-ca-file={}", p(&pki.ca().cert)),
            format!("--cluster-signing-cert-file={}", p(&pki.ca().cert)),
            format!("--cluster-signing-key-file={}", p(&pki.ca().key)),
            format!("--cluster-name=kctrl-{name}"),
            "--profiling=false".into(),
        ],
        Component::Scheduler => vec![
            format!("--kubeconfig={}", kc(&SCHEDULER)),
            format!("--authentication-kubeconfig={}", kc(&SCHEDULER)),
            format!("--authorization-kubeconfig={}", kc(&SCHEDULER)),
            "--bind-address=127.0.0.1".into(),
            format!("--secure-port={}", ports.scheduler),
            format!("--tls-cert-file={}", p(&serving.cert)),
            format!("--tls-private-key-file={}", p(&serving.key)),
            "--leader-elect=false".into(),
            "--profiling=false".into(),
        ],
        Component::Kwok => vec![
            format!("--kubeconfig={}", kc(&KWOK)),
            // KWOK's node and pod-complete/pod-delete stages from the cache, then ours.
            format!(
                "--config={}",
                cache
                    .kwok_stage_files()
                    .iter()
                    .chain(&stages::paths(&layout.kwok_stages()))
                    .map(|f| p(f))
                    .collect::<Vec<_>>()
                    .join(",")
            ),
            "--manage-all-nodes=false".into(),
            format!("--manage-nodes-with-annotation-selector={KWOK_NODE_ANNOTATION}=fake"),
            "--node-ip=127.0.0.1".into(),
            format!("--node-port={}", ports.kwok),
            format!("--server-address=127.0.0.1:{}", ports.kwok),
            format!("--tls-cert-file={}", p(&serving.cert)),
            format!("--tls-private-key-file={}", p(&serving.key)),
            format!("--cidr={POD_CIDR}"),
            "--node-lease-duration-seconds=40".into(),
        ],
    }
}

/// kube-controller-manager's `--controllers` flag: everything on by default, but its
/// Deployment controller unless `deployment` and its ReplicaSet controller unless
/// `replicaset`.
pub(super) fn controllers_flag(deployment: bool, replicaset: bool) -> String {
    let mut flag = "--controllers=*".to_owned();
    if !deployment {
        flag.push_str(",-deployment-controller");
    }
    if !replicaset {
        flag.push_str(",-replicaset-controller");
    }
    flag
}

/// kube-controller-manager's flags `args` with its `--controllers` flag set by
/// [`controllers_flag`].
pub(super) fn with_controllers(
    args: Vec<String>,
    deployment: bool,
    replicaset: bool,
) -> Vec<String> {
    args.into_iter()
        .map(|a| {
            if a.starts_with("--controllers=") {
                controllers_flag(deployment, replicaset)
            } else {
                a
            }
        })
        .collect()
}

/// Fake nodes managed by KWOK (our own manifest: the annotation KWOK selects on, capacity for
/// plenty of pods, no taints).
pub(super) fn nodes_manifest(count: usize) -> String {
    let mut out = String::new();
    for i in 0..count {
        out.push_str(&format!(
            "---
apiVersion: v1
kind: Node
metadata:
  name: kwok-node-{i}
  annotations:
    {KWOK_NODE_ANNOTATION}: fake
    node.alpha.kubernetes.io/ttl: \"0\"
  labels:
    kubernetes.io/hostname: kwok-node-{i}
    kubernetes.io/os: linux
    kubernetes.io/arch: amd64
    type: kwok
status:
  allocatable:
    cpu: \"32\"
    memory: 256Gi
    pods: \"110\"
  capacity:
    cpu: \"32\"
    memory: 256Gi
    pods: \"110\"
"
        ));
    }
    out
}

/// The controller's ServiceAccount object (its client certificate already authenticates as
/// this ServiceAccount; the object exists so RBAC bindings and in-cluster runs can refer to it).
pub(super) fn identity_manifest() -> String {
    format!(
        "apiVersion: v1
kind: ServiceAccount
metadata:
  name: {CONTROLLER_SA_NAME}
  namespace: {CONTROLLER_SA_NAMESPACE}
  labels:
    app.kubernetes.io/part-of: kctrl
"
    )
}

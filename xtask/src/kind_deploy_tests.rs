//! Checks of the in-cluster artefacts in `deploy/`: the RBAC rules against upstream's bootstrap
//! policy, the Deployment's flags against the binary's, the bootstrap Pod against the
//! Deployment, and the container recipe against the workspace. (Here rather than in
//! `kctrl-cluster`, beside the constants it checks, because it reads the workspace's files and
//! parses them with kctrl's types.)

use std::collections::BTreeSet;
use std::path::PathBuf;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Container, Pod, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding};
use kctrl_client::versioned::Versioned;
use serde::de::DeserializeOwned;

use kctrl_cluster::kind::{
    BOOTSTRAP_DIR, BOOTSTRAP_POD, CONTAINERFILE, CONTAINERFILE_IGNORE, CONTROLLER_IMAGE,
    CONTROLLER_NAME, CONTROLLER_NAMESPACE, CONTROLLER_POD_SELECTOR, MANIFEST_DIR,
};

/// The flags of the `deployment-controller` binary (kube-controller-manager's names), without
/// dashes. The short `-v` is `v` too.
const BINARY_FLAGS: &[&str] = &[
    "kubeconfig",
    "master",
    "concurrent-deployment-syncs",
    "kube-api-qps",
    "kube-api-burst",
    "v",
    "leader-elect",
    "leader-elect-lease-duration",
    "leader-elect-renew-deadline",
    "leader-elect-retry-period",
    "leader-elect-resource-lock",
    "leader-elect-resource-name",
    "leader-elect-resource-namespace",
    "bind-address",
    "secure-port",
    "tls-cert-file",
    "tls-private-key-file",
    "authentication-kubeconfig",
    "authentication-token-webhook-cache-ttl",
    "authorization-kubeconfig",
    "authorization-webhook-cache-authorized-ttl",
    "authorization-webhook-cache-unauthorized-ttl",
    "authorization-always-allow-paths",
    "client-ca-file",
    "authentication-skip-lookup",
    "shard-by",
    "shard-group",
    "shard-lease-namespace",
];

/// Flags whose value is a boolean: `--flag` alone is complete, a value needs `=`.
const BOOL_FLAGS: &[&str] = &["leader-elect", "authentication-skip-lookup"];

fn read(relative: &str) -> String {
    let path = crate::workspace_root().join(relative);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

fn object<T: DeserializeOwned>(relative: &str) -> T {
    serde_yaml_ng::from_str(&read(relative))
        .unwrap_or_else(|e| panic!("{relative} is not the expected object: {e}"))
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

fn rule(groups: &[&str], resources: &[&str], verbs: &[&str]) -> PolicyRule {
    PolicyRule {
        api_groups: Some(strings(groups)),
        resources: Some(strings(resources)),
        verbs: strings(verbs),
        ..PolicyRule::default()
    }
}

#[test]
fn every_manifest_is_one_object_in_kube_system_or_cluster_scoped() {
    // Except the sharded variant's member Leases' Role and binding, in their own namespace.
    let lease_namespace = "kctrl-shards";
    let sharded = format!("{MANIFEST_DIR}/sharded");
    let mut files: Vec<PathBuf> = [MANIFEST_DIR, BOOTSTRAP_DIR, sharded.as_str()]
        .iter()
        .flat_map(|dir| std::fs::read_dir(crate::workspace_root().join(dir)).unwrap())
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml" || e == "yml"))
        .collect();
    files.sort();
    assert_eq!(files.len(), 14, "{files:?}");
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        // `kubectl apply -f` accepts several documents per file; we keep one per file.
        assert!(!text.contains("\n---"), "{}", file.display());
        let value: serde_json::Value = serde_yaml_ng::from_str(&text).unwrap();
        let kind = value["kind"].as_str().unwrap();
        let namespace = value["metadata"]["namespace"].as_str();
        match kind {
            "ClusterRole" | "ClusterRoleBinding" | "Namespace" => {
                assert_eq!(namespace, None, "{kind}");
            }
            "Role" | "RoleBinding"
                if file.ends_with("sharded/role-shard-members.yaml")
                    || file.ends_with("sharded/rolebinding-shard-members.yaml") =>
            {
                assert_eq!(namespace, Some(lease_namespace), "{kind}");
            }
            _ => assert_eq!(namespace, Some(CONTROLLER_NAMESPACE), "{kind}"),
        }
        assert_eq!(
            value["metadata"]["labels"]["app.kubernetes.io/name"],
            CONTROLLER_NAME,
            "{}",
            file.display()
        );
    }
}

#[test]
fn cluster_role_has_exactly_upstreams_deployment_and_replicaset_controller_rules() {
    // Kubernetes 1.36 and 1.37 (the same rules), system:controller:deployment-controller
    // (bootstrap controller policy), in upstream's order; the last rule is upstream's shared
    // events rule.
    let upstream = vec![
        rule(
            &["extensions", "apps"],
            &["deployments"],
            &["get", "list", "watch", "update"],
        ),
        rule(
            &["extensions", "apps"],
            &["deployments/status"],
            &["update"],
        ),
        rule(
            &["extensions", "apps"],
            &["deployments/finalizers"],
            &["update"],
        ),
        rule(
            &["apps", "extensions"],
            &["replicasets"],
            &[
                "get", "list", "watch", "create", "update", "patch", "delete",
            ],
        ),
        rule(&[""], &["pods"], &["get", "list", "watch", "update"]),
        rule(
            &["", "events.k8s.io"],
            &["events"],
            &["create", "update", "patch"],
        ),
        // system:controller:replicaset-controller, but its events rule (the same as above).
        rule(
            &["apps", "extensions"],
            &["replicasets"],
            &["get", "list", "watch", "update"],
        ),
        rule(
            &["apps", "extensions"],
            &["replicasets/status"],
            &["update"],
        ),
        rule(
            &["apps", "extensions"],
            &["replicasets/finalizers"],
            &["update"],
        ),
        rule(
            &[""],
            &["pods"],
            &["list", "watch", "patch", "create", "delete"],
        ),
    ];
    let role: ClusterRole = object("deploy/01-clusterrole.yaml");
    assert_eq!(
        role.metadata.name.as_deref(),
        Some("kctrl:deployment-controller")
    );
    assert_eq!(role.aggregation_rule, None);
    assert_eq!(role.rules.unwrap_or_default(), upstream);
}

#[test]
fn bindings_grant_the_roles_to_our_service_account() {
    let sa: ServiceAccount = object("deploy/00-serviceaccount.yaml");
    assert_eq!(sa.metadata.name.as_deref(), Some(CONTROLLER_NAME));
    let subject = |subjects: Option<Vec<k8s_openapi::api::rbac::v1::Subject>>| {
        let subjects = subjects.unwrap_or_default();
        assert_eq!(subjects.len(), 1);
        let s = &subjects[0];
        (s.kind.clone(), s.name.clone(), s.namespace.clone())
    };
    let ours = (
        "ServiceAccount".to_owned(),
        CONTROLLER_NAME.to_owned(),
        Some(CONTROLLER_NAMESPACE.to_owned()),
    );

    let crb: ClusterRoleBinding = object("deploy/02-clusterrolebinding.yaml");
    assert_eq!(crb.role_ref.kind, "ClusterRole");
    assert_eq!(crb.role_ref.name, "kctrl:deployment-controller");
    assert_eq!(
        crb.role_ref.api_group.as_deref(),
        Some("rbac.authorization.k8s.io")
    );
    assert_eq!(subject(crb.subjects), ours);

    let role: Role = object("deploy/03-role-leader-election.yaml");
    assert_eq!(
        role.metadata.name.as_deref(),
        Some("kctrl:deployment-controller:leader-election")
    );
    // create cannot be limited by name; get and update only for our Lease.
    let mut named = rule(&["coordination.k8s.io"], &["leases"], &["get", "update"]);
    named.resource_names = Some(strings(&[CONTROLLER_NAME]));
    assert_eq!(
        role.rules.unwrap_or_default(),
        vec![
            rule(&["coordination.k8s.io"], &["leases"], &["create"]),
            named
        ]
    );

    let rb: RoleBinding = object("deploy/04-rolebinding-leader-election.yaml");
    assert_eq!(rb.role_ref.kind, "Role");
    assert_eq!(
        rb.role_ref.name,
        "kctrl:deployment-controller:leader-election"
    );
    assert_eq!(subject(rb.subjects), ours);

    // Delegated authentication and authorization of the endpoints: TokenReviews and
    // SubjectAccessReviews, through the bootstrap role kube-apiserver keeps for that.
    let delegator: ClusterRoleBinding = object("deploy/06-clusterrolebinding-auth-delegator.yaml");
    assert_eq!(delegator.role_ref.kind, "ClusterRole");
    assert_eq!(delegator.role_ref.name, "system:auth-delegator");
    assert_eq!(
        delegator.role_ref.api_group.as_deref(),
        Some("rbac.authorization.k8s.io")
    );
    assert_eq!(subject(delegator.subjects), ours);

    // Reading the client CA the API server publishes (kube-system/extension-apiserver-
    // authentication), through the bootstrap Role kube-apiserver keeps for that.
    let reader: RoleBinding = object("deploy/07-rolebinding-authentication-reader.yaml");
    assert_eq!(
        reader.metadata.namespace.as_deref(),
        Some(CONTROLLER_NAMESPACE)
    );
    assert_eq!(reader.role_ref.kind, "Role");
    assert_eq!(
        reader.role_ref.name,
        "extension-apiserver-authentication-reader"
    );
    assert_eq!(subject(reader.subjects), ours);
}

/// The flag names in `args` (`--name=value`, `--name value`, `-v=2`, `-v 2`), or what is not
/// a flag of the binary.
fn flag_names(args: &[String]) -> Result<Vec<String>, String> {
    let mut names = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let arg = &args[i];
        let body = arg
            .strip_prefix("--")
            .or_else(|| arg.strip_prefix('-'))
            .ok_or_else(|| format!("{arg:?} is not a flag"))?;
        let (name, inline_value) = match body.split_once('=') {
            Some((n, _)) => (n, true),
            None => (body, false),
        };
        if arg.starts_with('-') && !arg.starts_with("--") && name != "v" {
            return Err(format!("{arg:?}: the only short flag is -v"));
        }
        if !BINARY_FLAGS.contains(&name) {
            return Err(format!("--{name} is not a flag of deployment-controller"));
        }
        if !inline_value && !BOOL_FLAGS.contains(&name) {
            // The value is the next argument.
            i += 1;
            if args.get(i).is_none_or(|v| v.starts_with('-')) {
                return Err(format!("--{name} has no value"));
            }
        }
        names.push(name.to_owned());
        i += 1;
    }
    Ok(names)
}

#[test]
fn flag_names_are_parsed_and_checked() {
    let ok = |args: &[&str]| flag_names(&strings(args));
    assert_eq!(
        ok(&[
            "--leader-elect",
            "--v=2",
            "-v",
            "3",
            "--secure-port",
            "10257"
        ])
        .unwrap(),
        ["leader-elect", "v", "v", "secure-port"]
    );
    assert!(ok(&["--leader-elect-resource-lock=leases"]).is_ok());
    assert!(
        ok(&["--controllers=*"])
            .unwrap_err()
            .contains("--controllers")
    );
    assert!(ok(&["--secure-port"]).unwrap_err().contains("no value"));
    assert!(ok(&["-x=1"]).unwrap_err().contains("short"));
    assert!(ok(&["10257"]).unwrap_err().contains("not a flag"));
}

fn deployment() -> Deployment {
    object("deploy/05-deployment.yaml")
}

fn the_container(containers: &[Container]) -> &Container {
    assert_eq!(containers.len(), 1);
    &containers[0]
}

#[test]
fn deployment_runs_two_leader_elected_replicas_with_known_flags() {
    let d = deployment();
    assert_eq!(d.metadata.name.as_deref(), Some(CONTROLLER_NAME));
    let spec = d.spec.into_value().unwrap();
    assert_eq!(spec.replicas, Some(2));
    let rolling = spec.strategy.unwrap().rolling_update.unwrap();
    // Never below two ready pods while the controller rolls itself out.
    assert_eq!(
        rolling.max_unavailable,
        Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(0))
    );
    let selector = spec.selector.match_labels.unwrap();
    let template_labels = spec.template.metadata.unwrap().labels.unwrap();
    assert!(
        selector
            .iter()
            .all(|(k, v)| template_labels.get(k) == Some(v))
    );
    let (key, value) = CONTROLLER_POD_SELECTOR.split_once('=').unwrap();
    assert_eq!(template_labels.get(key).map(String::as_str), Some(value));

    let pod = spec.template.spec.unwrap();
    assert_eq!(pod.service_account_name.as_deref(), Some(CONTROLLER_NAME));
    assert_eq!(
        pod.priority_class_name.as_deref(),
        Some("system-cluster-critical")
    );
    let c = the_container(&pod.containers);
    assert_eq!(c.image.as_deref(), Some(CONTROLLER_IMAGE));
    assert_eq!(c.command, None, "the image's ENTRYPOINT is the binary");
    let args = c.args.clone().unwrap_or_default();
    let names = flag_names(&args).unwrap_or_else(|e| panic!("{e} in {args:?}"));
    let unique: BTreeSet<&String> = names.iter().collect();
    assert_eq!(unique.len(), names.len(), "a flag is repeated: {names:?}");
    for expected in [
        "--leader-elect=true",
        "--leader-elect-resource-lock=leases",
        "--leader-elect-resource-namespace=kube-system",
        "--leader-elect-resource-name=kctrl-deployment-controller",
        "--bind-address=0.0.0.0",
        "--secure-port=10257",
    ] {
        assert!(args.iter().any(|a| a == expected), "{expected} in {args:?}");
    }
}

#[test]
fn deployment_probes_resources_and_security_context() {
    let pod = deployment()
        .spec
        .into_value()
        .unwrap()
        .template
        .spec
        .unwrap();
    let c = the_container(&pod.containers);
    let ports = c.ports.clone().unwrap_or_default();
    assert_eq!(ports.len(), 1);
    assert_eq!(ports[0].container_port, 10257);
    assert_eq!(ports[0].name.as_deref(), Some("https"));
    for (probe, path) in [
        (c.liveness_probe.as_ref(), "/healthz"),
        (c.readiness_probe.as_ref(), "/readyz"),
    ] {
        let get = probe.unwrap().http_get.as_ref().unwrap();
        assert_eq!(get.path.as_deref(), Some(path));
        assert_eq!(get.scheme.as_deref(), Some("HTTPS"));
        assert_eq!(
            get.port,
            k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String("https".into())
        );
    }
    let resources = c.resources.as_ref().unwrap();
    for key in ["cpu", "memory"] {
        assert!(resources.requests.as_ref().unwrap().contains_key(key));
        assert!(resources.limits.as_ref().unwrap().contains_key(key));
    }
    let pod_sc = pod.security_context.as_ref().unwrap();
    assert_eq!(pod_sc.run_as_non_root, Some(true));
    let sc = c.security_context.as_ref().unwrap();
    assert_eq!(sc.read_only_root_filesystem, Some(true));
    assert_eq!(sc.allow_privilege_escalation, Some(false));
    assert_eq!(
        sc.capabilities.as_ref().unwrap().drop,
        Some(strings(&["ALL"]))
    );
    // The user the image declares.
    let user = containerfile_user();
    assert_eq!(pod_sc.run_as_user, Some(user.0));
    assert_eq!(pod_sc.run_as_group, Some(user.1));
}

#[test]
fn bootstrap_pod_runs_the_same_container_outside_the_deployment() {
    let pod: Pod = object("deploy/bootstrap/pod.yaml");
    assert_eq!(pod.metadata.name.as_deref(), Some(BOOTSTRAP_POD));
    assert_eq!(pod.metadata.owner_references, None);
    let d = deployment().spec.into_value().unwrap();
    let template = d.template.spec.unwrap();
    let spec = pod.spec.unwrap();
    assert_eq!(
        the_container(&spec.containers),
        the_container(&template.containers)
    );
    assert_eq!(spec.service_account_name, template.service_account_name);
    assert_eq!(spec.security_context, template.security_context);
    assert_eq!(spec.priority_class_name, template.priority_class_name);
    // The Deployment's ReplicaSet must not adopt it, but its logs are collected with the
    // others.
    let labels = pod.metadata.labels.unwrap();
    let selector = d.selector.match_labels.unwrap();
    assert!(
        selector.iter().any(|(k, v)| labels.get(k) != Some(v)),
        "{labels:?} is matched by {selector:?}"
    );
    let (key, value) = CONTROLLER_POD_SELECTOR.split_once('=').unwrap();
    assert_eq!(labels.get(key).map(String::as_str), Some(value));
}

fn sharded_deployment() -> Deployment {
    object("deploy/sharded/deployment.yaml")
}

#[test]
fn the_sharded_deployment_runs_three_members_with_the_same_container_otherwise() {
    let sharded = sharded_deployment();
    assert_eq!(sharded.metadata.name.as_deref(), Some(CONTROLLER_NAME));
    let spec = sharded.spec.into_value().unwrap();
    assert_eq!(spec.replicas, Some(3));
    let plain = deployment().spec.into_value().unwrap();
    assert_eq!(spec.selector, plain.selector);
    assert_eq!(spec.strategy, plain.strategy);
    let (pod, plain_pod) = (spec.template.spec.unwrap(), plain.template.spec.unwrap());
    assert_eq!(pod.service_account_name, plain_pod.service_account_name);
    assert_eq!(pod.security_context, plain_pod.security_context);
    let (c, plain_c) = (
        the_container(&pod.containers),
        the_container(&plain_pod.containers),
    );
    let args = c.args.clone().unwrap_or_default();
    let names = flag_names(&args).unwrap_or_else(|e| panic!("{e} in {args:?}"));
    assert!(
        !names.iter().any(|n| n.starts_with("leader-elect")),
        "{names:?}"
    );
    for expected in [
        "--shard-by=namespace",
        "--shard-group=deployment-controller",
        "--shard-lease-namespace=kctrl-shards",
    ] {
        assert!(args.iter().any(|a| a == expected), "{expected} in {args:?}");
    }
    // Everything but the flags of leader election and sharding is the same.
    let rest = |args: &[String]| -> Vec<String> {
        args.iter()
            .filter(|a| !a.starts_with("--leader-elect") && !a.starts_with("--shard-"))
            .cloned()
            .collect()
    };
    assert_eq!(
        rest(&args),
        rest(plain_c.args.as_deref().unwrap_or_default())
    );
    let mut same = c.clone();
    same.args = plain_c.args.clone();
    assert_eq!(&same, plain_c);
    // Its bootstrap Pod runs that container, outside the Deployment's selector.
    let bootstrap: Pod = object("deploy/sharded/bootstrap-pod.yaml");
    assert_eq!(bootstrap.metadata.owner_references, None);
    let bootstrap_spec = bootstrap.spec.unwrap();
    assert_eq!(the_container(&bootstrap_spec.containers), c);
    let labels = bootstrap.metadata.labels.unwrap();
    let selector = spec.selector.match_labels.unwrap();
    assert!(selector.iter().any(|(k, v)| labels.get(k) != Some(v)));
}

// The members' Role grants its verbs on every Lease of its namespace (their names are random):
// a namespace of their own, not kube-system, where it would reach kube-controller-manager's
// and kube-scheduler's leader-election Leases. The members list, never watch.
#[test]
fn the_members_may_manage_the_groups_leases_in_their_own_namespace() {
    let namespace: k8s_openapi::api::core::v1::Namespace = object("deploy/sharded/namespace.yaml");
    let lease_namespace = namespace.metadata.name.unwrap();
    assert_ne!(lease_namespace, CONTROLLER_NAMESPACE);
    for file in [
        "deploy/sharded/deployment.yaml",
        "deploy/sharded/bootstrap-pod.yaml",
    ] {
        let text = read(file);
        assert!(
            text.contains(&format!("--shard-lease-namespace={lease_namespace}")),
            "{file} does not put the Leases in {lease_namespace}"
        );
    }
    let role: Role = object("deploy/sharded/role-shard-members.yaml");
    assert_eq!(
        role.metadata.namespace.as_deref(),
        Some(lease_namespace.as_str())
    );
    assert_eq!(
        role.rules.unwrap_or_default(),
        vec![rule(
            &["coordination.k8s.io"],
            &["leases"],
            &["get", "list", "create", "update", "delete"]
        )]
    );
    let rb: RoleBinding = object("deploy/sharded/rolebinding-shard-members.yaml");
    assert_eq!(
        rb.metadata.namespace.as_deref(),
        Some(lease_namespace.as_str())
    );
    assert_eq!(rb.role_ref.kind, "Role");
    assert_eq!(rb.role_ref.name, role.metadata.name.unwrap());
    let subjects = rb.subjects.unwrap_or_default();
    assert_eq!(subjects.len(), 1);
    assert_eq!(subjects[0].kind, "ServiceAccount");
    assert_eq!(subjects[0].name, CONTROLLER_NAME);
    assert_eq!(subjects[0].namespace.as_deref(), Some(CONTROLLER_NAMESPACE));
}

/// `[package] name` and the `[[bin]] name`s of a Cargo manifest.
fn package_and_bins(manifest: &str) -> (String, Vec<String>) {
    let mut package = String::new();
    let mut bins = Vec::new();
    let mut section = "";
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            section = line;
        } else if let Some((key, value)) = line.split_once('=')
            && key.trim() == "name"
        {
            let value = value.trim().trim_matches('"').to_owned();
            match section {
                "[package]" => package = value,
                "[[bin]]" => bins.push(value),
                _ => {}
            }
        }
    }
    (package, bins)
}

/// The value of `key = "…"` in `section` of a TOML file.
fn toml_string(text: &str, section: &str, key: &str) -> Option<String> {
    let mut current = "";
    for line in text.lines().map(str::trim) {
        if line.starts_with('[') {
            current = line;
        } else if current == section
            && let Some((k, v)) = line.split_once('=')
            && k.trim() == key
        {
            return Some(v.trim().trim_matches('"').to_owned());
        }
    }
    None
}

/// The Rust release the project builds with: `rust-toolchain(.toml)`'s channel if there is
/// one, else the workspace's `rust-version`.
fn project_rust_version() -> String {
    for file in ["rust-toolchain.toml", "rust-toolchain"] {
        if let Ok(text) = std::fs::read_to_string(crate::workspace_root().join(file)) {
            return toml_string(&text, "[toolchain]", "channel")
                .unwrap_or_else(|| text.trim().to_owned());
        }
    }
    toml_string(&read("Cargo.toml"), "[workspace.package]", "rust-version")
        .expect("rust-version in [workspace.package]")
}

/// The numeric `USER uid:gid` of the recipe's last stage.
fn containerfile_user() -> (i64, i64) {
    let recipe = read(CONTAINERFILE);
    let user = recipe
        .lines()
        .filter_map(|l| l.strip_prefix("USER "))
        .next_back()
        .expect("a USER instruction");
    let (uid, gid) = user.trim().split_once(':').expect("USER uid:gid");
    (uid.parse().unwrap(), gid.parse().unwrap())
}

#[test]
fn containerfile_builds_the_binary_with_the_projects_rust() {
    let recipe = read(CONTAINERFILE);
    let (package, bins) = package_and_bins(&read("crates/deployment-controller/Cargo.toml"));
    assert_eq!(package, "kctrl-deployment-controller");
    assert_eq!(bins, ["deployment-controller"]);
    let binary = &bins[0];

    let rust = project_rust_version();
    assert!(
        recipe.contains(&format!("\nARG RUST_VERSION={rust}\n")),
        "the recipe's Rust must be {rust}"
    );
    let froms: Vec<&str> = recipe.lines().filter(|l| l.starts_with("FROM ")).collect();
    assert_eq!(froms.len(), 3, "{froms:?}");
    for builder in &froms[..2] {
        assert!(
            builder.starts_with("FROM docker.io/library/rust:${RUST_VERSION}-"),
            "{builder}"
        );
    }
    // Both builds (dependency layer and final) name the package and the binary, the shipping
    // profile (release with whole-program optimisation), with the lock file as it is.
    let build = format!("cargo build --profile dist --locked -p {package} --bin {binary}");
    assert_eq!(recipe.matches(&build).count(), 2, "{build}");
    // The dependency layer comes before the real sources.
    let first_build = recipe.find(&build).unwrap();
    let sources = recipe.find("\nCOPY . .\nRUN find").unwrap();
    assert!(first_build < sources);
    assert!(recipe.contains(&format!("cp target/dist/{binary} /{binary}\n")));

    let runtime = recipe.split(froms[2]).nth(1).unwrap();
    assert!(runtime.contains(&format!(
        "COPY --from=builder /{binary} /usr/local/bin/{binary}\n"
    )));
    assert!(runtime.contains(&format!("ENTRYPOINT [\"/usr/local/bin/{binary}\"]\n")));
    let (uid, gid) = containerfile_user();
    assert!(uid != 0 && gid != 0, "the image must not run as root");
    assert!(runtime.contains("EXPOSE 10257\n"));
}

#[test]
fn containerfile_context_leaves_out_build_outputs() {
    let ignore = read(CONTAINERFILE_IGNORE);
    let patterns: Vec<&str> = ignore
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    for needed in ["target", ".git"] {
        assert!(patterns.contains(&needed), "{needed} in {patterns:?}");
    }
    // Nothing a workspace member needs to build is left out.
    for pattern in &patterns {
        assert!(
            !["crates", "xtask", "tests", "Cargo.toml", "Cargo.lock"].contains(pattern),
            "{pattern}"
        );
    }
}

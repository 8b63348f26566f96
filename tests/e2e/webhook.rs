//! kctrl-webhook's examples on a real kube-apiserver: the kubebuilder tutorial's CronJob with
//! its defaulting and validating webhooks, and a Widget served at two versions with a
//! conversion webhook; the webhooks registered by kctrl-testenv's `install`, the server on
//! 127.0.0.1.
//!
//! The API server must reach 127.0.0.1 of this machine: true of `cargo xtask e2e`'s local
//! cluster and of `KCTRL_E2E_TESTENV=1` (processes on this host), not of a kind cluster (in a
//! container); there the tests print why and skip.

use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use kctrl_client::{Api, Client, PostParams, ResourceRef};
use kctrl_e2e::{TestNamespace, eventually, install_crd, require_cluster, uninstall_crd};
use kctrl_testenv::webhook::InstalledWebhooks;
use kctrl_webhook::{
    AdmissionRequest, Defaulter, Denied, ServerBuilder, Validator, Warnings, Webhook,
};

#[path = "../../crates/webhook/examples/cronjob.rs"]
mod cronjob;
#[path = "../../crates/webhook/examples/widget.rs"]
mod widget;

use cronjob::{ConcurrencyPolicy, CronJob, CronJobSpec};

const TIMEOUT: Duration = Duration::from_secs(60);

/// Registers `server` (and the conversion of `crds`), or `None` after printing why when the
/// API server of a cluster we did not start cannot reach this machine's loopback.
async fn install(
    client: &Client,
    server: ServerBuilder,
    crds: Vec<CustomResourceDefinition>,
) -> Option<InstalledWebhooks> {
    match kctrl_testenv::webhook::install(client, server, crds).await {
        Ok(installed) => Some(installed),
        Err(e @ kctrl_testenv::Error::Webhook(_))
            if std::env::var_os(kctrl_e2e::KUBECONFIG_ENV).is_some() =>
        {
            use std::io::Write;
            let _ = writeln!(
                std::io::stderr(),
                "e2e webhook: skipping: this cluster's API server does not call a webhook on \
                 127.0.0.1 of the test's machine (a kind cluster's runs in a container): {e}"
            );
            None
        }
        Err(e) => panic!("installing the webhooks: {e}"),
    }
}

/// Refuses ConfigMaps holding the key `forbidden` (403) and warns about those holding `risky`,
/// in the test's namespace: the plain shapes, next to the CronJob's field errors.
struct ConfigMapPolicy;

impl Validator<ConfigMap> for ConfigMapPolicy {
    async fn validate_create(
        &self,
        _: &AdmissionRequest,
        cm: &ConfigMap,
    ) -> Result<Warnings, Denied> {
        let data = cm.data.clone().unwrap_or_default();
        if data.contains_key("forbidden") {
            return Err(Denied::forbidden(
                "the key \"forbidden\" is not allowed in this namespace",
            ));
        }
        Ok(data
            .contains_key("risky")
            .then(|| "the key \"risky\" will be refused next release".to_owned())
            .into_iter()
            .collect())
    }

    async fn validate_update(
        &self,
        r: &AdmissionRequest,
        _: &ConfigMap,
        new: &ConfigMap,
    ) -> Result<Warnings, Denied> {
        self.validate_create(r, new).await
    }
}

/// A ConfigMap as a Rust type that knows only `metadata` and `data`: not `binaryData`, not
/// `immutable`. A defaulter of it must not drop them.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
struct NarrowConfigMap {
    metadata: ObjectMeta,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    data: Option<std::collections::BTreeMap<String, String>>,
}

impl k8s_openapi::Resource for NarrowConfigMap {
    const API_VERSION: &'static str = "v1";
    const GROUP: &'static str = "";
    const KIND: &'static str = "ConfigMap";
    const VERSION: &'static str = "v1";
    const URL_PATH_SEGMENT: &'static str = "configmaps";
    type Scope = k8s_openapi::NamespaceResourceScope;
}

/// Labels every ConfigMap of the test's namespace, through the narrow type.
struct Labeller;

impl Defaulter<NarrowConfigMap> for Labeller {
    async fn set_defaults(
        &self,
        _: &AdmissionRequest,
        cm: &mut NarrowConfigMap,
    ) -> Result<(), Denied> {
        cm.metadata
            .labels
            .get_or_insert_with(Default::default)
            .insert("webhook.kctrl.dev/seen".into(), "true".into());
        cm.data
            .get_or_insert_with(Default::default)
            .entry("defaulted".into())
            .or_insert_with(|| "yes".into());
        Ok(())
    }
}

fn cronjob(name: &str, schedule: &str) -> CronJob {
    let mut c = CronJob::new(
        name,
        CronJobSpec {
            schedule: schedule.to_owned(),
            starting_deadline_seconds: None,
            concurrency_policy: None,
            suspend: None,
            job_template: serde_json::from_value(serde_json::json!({
                "spec": {"template": {"spec": {"restartPolicy": "OnFailure", "containers": [{"name": "hello", "image": "busybox:1.36", "args": ["date"]}]}}}
            }))
            .unwrap(),
            successful_jobs_history_limit: None,
            failed_jobs_history_limit: None,
        },
    );
    c.metadata.namespace = None;
    c
}

/// Runs kubectl with `stdin`; (success, stdout, stderr). The suite's kubectl (that of the
/// cluster's release, `$KCTRL_KUBECTL` or the test plane's) must exist: a missing one fails
/// the test rather than skipping what it checks.
fn kubectl(cluster: &kctrl_e2e::Cluster, args: &[&str], stdin: &str) -> (bool, String, String) {
    use std::io::Write;
    let binary = cluster.kubectl_binary().expect(
        "no kubectl: set KCTRL_KUBECTL to the kubectl of the cluster's release (cargo xtask e2e \
         and KCTRL_E2E_TESTENV=1 provide one)",
    );
    let mut child = std::process::Command::new(binary)
        .arg("--kubeconfig")
        .arg(&cluster.kubeconfig)
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("starting kubectl");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cronjob_defaults_and_validation_through_the_api_server() {
    let cluster = require_cluster!();
    let client = cluster.admin();
    let crd = cronjob::crd();
    install_crd(&client, &crd, &ResourceRef::of::<CronJob>()).await;
    let ns = TestNamespace::create(&client, "webhook-cronjob").await;
    let in_ns = LabelSelector {
        match_labels: Some([("kubernetes.io/metadata.name".to_owned(), ns.name.clone())].into()),
        ..LabelSelector::default()
    };
    let server = cronjob::server()
        .webhook(
            Webhook::validating::<ConfigMap, _>(ConfigMapPolicy).namespace_selector(in_ns.clone()),
        )
        .webhook(Webhook::defaulting::<NarrowConfigMap, _>(Labeller).namespace_selector(in_ns));
    let Some(installed) = install(&client, server, Vec::new()).await else {
        ns.delete().await;
        uninstall_crd(&client, crd.metadata.name.as_deref().unwrap()).await;
        return;
    };
    let cronjobs: Api<CronJob> = Api::namespaced(client.clone(), &ns.name);

    // Defaults are set on create, by the JSON patch of the mutating webhook.
    let created = cronjobs
        .create(&PostParams::default(), &cronjob("hello", "*/1 * * * *"))
        .await
        .unwrap();
    assert_eq!(
        created.spec.concurrency_policy,
        Some(ConcurrencyPolicy::Allow)
    );
    assert_eq!(created.spec.suspend, Some(false));
    assert_eq!(created.spec.successful_jobs_history_limit, Some(3));
    assert_eq!(created.spec.failed_jobs_history_limit, Some(1));
    // What was set stays as it was.
    let mut own = cronjob("own-limits", "0 0 * * *");
    own.spec.concurrency_policy = Some(ConcurrencyPolicy::Forbid);
    own.spec.successful_jobs_history_limit = Some(10);
    let created = cronjobs.create(&PostParams::default(), &own).await.unwrap();
    assert_eq!(
        created.spec.concurrency_policy,
        Some(ConcurrencyPolicy::Forbid)
    );
    assert_eq!(created.spec.successful_jobs_history_limit, Some(10));
    assert_eq!(created.spec.failed_jobs_history_limit, Some(1));

    // An invalid schedule: 422 Invalid, the handler's message after the API server's prefix,
    // the cause with its field.
    let err = cronjobs
        .create(
            &PostParams::default(),
            &cronjob("bad-schedule", "every minute"),
        )
        .await
        .unwrap_err();
    let api = err.api_error().unwrap_or_else(|| panic!("{err}"));
    assert_eq!(api.code, 422, "{api:?}");
    assert_eq!(api.status.reason.as_deref(), Some("Invalid"));
    assert_eq!(
        api.status.message.as_deref(),
        Some(
            "admission webhook \"vcronjob-v1.kb.io\" denied the request: CronJob.batch.tutorial.kubebuilder.io \"bad-schedule\" is invalid: spec.schedule: Invalid value: \"every minute\": a schedule has 5 fields (minute hour day-of-month month day-of-week), this one has 2"
        )
    );
    let details = api.status.details.as_ref().unwrap();
    assert_eq!(
        (
            details.name.as_deref(),
            details.group.as_deref(),
            details.kind.as_deref()
        ),
        (
            Some("bad-schedule"),
            Some("batch.tutorial.kubebuilder.io"),
            Some("CronJob")
        )
    );
    let cause = &details.causes.as_ref().unwrap()[0];
    assert_eq!(
        (cause.field.as_deref(), cause.reason.as_deref()),
        (Some("spec.schedule"), Some("FieldValueInvalid"))
    );

    // A name longer than 52 characters.
    let long = "a".repeat(53);
    let err = cronjobs
        .create(&PostParams::default(), &cronjob(&long, "0 0 * * *"))
        .await
        .unwrap_err();
    let api = err.api_error().unwrap();
    assert_eq!(api.code, 422);
    assert!(api.status.message.as_deref().unwrap().ends_with("metadata.name: Invalid value: \"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\": must be no more than 52 characters"), "{api:?}");

    // An update is checked too.
    let mut hello = cronjobs.get("hello").await.unwrap();
    hello.spec.schedule = "61 * * * *".to_owned();
    let err = cronjobs
        .update(&PostParams::default(), &hello)
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("minute field \\\"61\\\": 61 is out of range 0-59")
            || err
                .to_string()
                .contains("minute field \"61\": 61 is out of range 0-59"),
        "{err}"
    );

    // The plain 403 shape, and warnings.
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns.name);
    let cm = |name: &str, key: &str| ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            ..ObjectMeta::default()
        },
        data: Some([(key.to_owned(), "1".to_owned())].into()),
        ..ConfigMap::default()
    };
    let err = configmaps
        .create(&PostParams::default(), &cm("refused", "forbidden"))
        .await
        .unwrap_err();
    let api = err.api_error().unwrap();
    assert_eq!(api.code, 403, "{api:?}");
    assert_eq!(api.status.reason.as_deref(), Some("Forbidden"));
    assert_eq!(
        api.status.message.as_deref(),
        Some(
            "admission webhook \"vconfigmap-v1.kb.io\" denied the request: the key \"forbidden\" is not allowed in this namespace"
        )
    );
    configmaps
        .create(&PostParams::default(), &cm("fine", "data"))
        .await
        .unwrap();
    // The defaulter's type knows neither binaryData nor immutable: both are kept, since the
    // patch holds only what the handler changed.
    let mut full = cm("full", "data");
    full.binary_data = Some([("blob".to_owned(), k8s_openapi::ByteString(vec![0, 1, 2]))].into());
    full.immutable = Some(true);
    let created = configmaps
        .create(&PostParams::default(), &full)
        .await
        .unwrap();
    assert_eq!(created.binary_data, full.binary_data);
    assert_eq!(created.immutable, Some(true));
    assert_eq!(
        created.metadata.labels.unwrap()["webhook.kctrl.dev/seen"],
        "true"
    );
    assert_eq!(
        created.data.unwrap(),
        [
            ("data".to_owned(), "1".to_owned()),
            ("defaulted".to_owned(), "yes".to_owned())
        ]
        .into()
    );

    // kubectl prints the handler's message, and the warnings.
    let manifest = |name: &str, schedule: &str| {
        serde_json::json!({
            "apiVersion": "batch.tutorial.kubebuilder.io/v1", "kind": "CronJob",
            "metadata": {"name": name, "namespace": ns.name},
            "spec": {"schedule": schedule, "jobTemplate": {"spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}}}}},
        })
        .to_string()
    };
    {
        let (ok, _, stderr) = kubectl(
            &cluster,
            &["create", "-f", "-"],
            &manifest("by-kubectl", "* * *"),
        );
        assert!(!ok);
        // kubectl prints an Invalid status from its causes (not its message): the kind, the
        // name and each field error as the handler wrote it.
        assert_eq!(
            stderr.trim_end(),
            "The CronJob \"by-kubectl\" is invalid: spec.schedule: Invalid value: \"* * *\": a schedule has 5 fields (minute hour day-of-month month day-of-week), this one has 3"
        );
        let risky = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "risky", "namespace": ns.name}, "data": {"risky": "1"}}).to_string();
        let (ok, _, stderr) = kubectl(&cluster, &["create", "-f", "-"], &risky);
        assert!(ok, "{stderr}");
        assert!(
            stderr.contains("Warning: the key \"risky\" will be refused next release"),
            "{stderr}"
        );
        let (ok, stdout, stderr) = kubectl(
            &cluster,
            &[
                "create",
                "-f",
                "-",
                "-o",
                "jsonpath={.spec.concurrencyPolicy} {.spec.suspend} {.spec.successfulJobsHistoryLimit} {.spec.failedJobsHistoryLimit}",
            ],
            &manifest("by-kubectl", "0 * * * *"),
        );
        assert!(ok, "{stderr}");
        assert_eq!(stdout, "Allow false 3 1");
    }

    let metrics = installed.server().unwrap().metrics();
    assert!(metrics.requests("/mutate-batch-tutorial-kubebuilder-io-v1-cronjob", 200) >= 2);
    assert!(metrics.requests("/validate-batch-tutorial-kubebuilder-io-v1-cronjob", 200) >= 4);
    installed.uninstall().await.unwrap();
    ns.delete().await;
    uninstall_crd(&client, crd.metadata.name.as_deref().unwrap()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn widgets_convert_between_versions_and_migrate_to_a_new_storage_version() {
    let cluster = require_cluster!();
    let client = cluster.admin();
    let crd = widget::crd(None).unwrap();
    let crd_name = crd.metadata.name.clone().unwrap();
    install_crd(&client, &crd, &ResourceRef::of::<widget::v1::Widget>()).await;
    let Some(installed) = install(&client, widget::server(), vec![crd.clone()]).await else {
        uninstall_crd(&client, &crd_name).await;
        return;
    };
    let conversions = || {
        installed
            .server()
            .unwrap()
            .metrics()
            .requests("/convert", 200)
    };
    let ns = TestNamespace::create(&client, "webhook-widget").await;
    let v1: Api<widget::v1::Widget> = Api::namespaced(client.clone(), &ns.name);
    let v2: Api<widget::v2::Widget> = Api::namespaced(client.clone(), &ns.name);

    // Written at v1 (the storage version), read at v2: converted by the webhook.
    v1.create(
        &PostParams::default(),
        &widget::v1::Widget::new("small", widget::v1::WidgetSpec { size: "3x4".into() }),
    )
    .await
    .unwrap();
    // `install` returned once the API server called /convert: no retry needed (without the
    // conversion it would only rewrite apiVersion, and v2 could not decode the object).
    let small = v2.get("small").await.unwrap();
    assert_eq!(
        small.spec,
        widget::v2::WidgetSpec {
            width: 3,
            height: 4
        }
    );
    // Written at v2, stored at v1, read at both.
    v2.create(
        &PostParams::default(),
        &widget::v2::Widget::new(
            "big",
            widget::v2::WidgetSpec {
                width: 30,
                height: 40,
            },
        ),
    )
    .await
    .unwrap();
    assert_eq!(v1.get("big").await.unwrap().spec.size, "30x40");
    assert_eq!(
        v2.get("big").await.unwrap().spec,
        widget::v2::WidgetSpec {
            width: 30,
            height: 40
        }
    );
    let listed: Vec<_> = v2
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|w| (w.metadata.name.unwrap(), w.spec.width))
        .collect();
    assert_eq!(listed, [("big".to_owned(), 30), ("small".to_owned(), 3)]);
    // Stored at v1, a read at v2 needs a conversion.
    let before = conversions();
    v2.get("small").await.unwrap();
    assert!(
        conversions() > before,
        "a read at v2 of an object stored at v1 calls /convert"
    );
    // A bad v1 object is accepted (written at the storage version, nothing to convert), but
    // the conversion refuses it, with its message, when it is read at v2.
    let err = v1
        .create(
            &PostParams::default(),
            &widget::v1::Widget::new(
                "odd",
                widget::v1::WidgetSpec {
                    size: "large".into(),
                },
            ),
        )
        .await;
    err.unwrap();
    let err = v2.get("odd").await.unwrap_err().to_string();
    assert!(
        err.contains("spec.size \\\"large\\\" is not <width>x<height>")
            || err.contains("spec.size \"large\" is not <width>x<height>"),
        "{err}"
    );
    v1.delete("odd", &Default::default()).await.unwrap();

    // Switch the storage version to v2, then migrate: read each object and write it back.
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let mut current = crds.get(&crd_name).await.unwrap();
    for v in &mut current.spec.versions {
        v.storage = v.name == "v2";
    }
    crds.update(&PostParams::default(), &current).await.unwrap();
    eventually("objects stored at v2 after migration", TIMEOUT, || async {
        for name in ["small", "big"] {
            let w = v2.get(name).await.map_err(|e| e.to_string())?;
            v2.update(&PostParams::default(), &w)
                .await
                .map_err(|e| e.to_string())?;
        }
        // Stored at v2: reading at v2 converts nothing (reads at v1 still do).
        let before = conversions();
        for name in ["small", "big"] {
            v2.get(name).await.map_err(|e| e.to_string())?;
        }
        let after = conversions();
        if after == before {
            Ok(())
        } else {
            Err(format!("{} conversions for reads at v2", after - before))
        }
    })
    .await;
    let before = conversions();
    assert_eq!(v1.get("small").await.unwrap().spec.size, "3x4");
    assert!(
        conversions() > before,
        "a read at v1 of an object stored at v2 calls /convert"
    );
    let stored = crds
        .get(&crd_name)
        .await
        .unwrap()
        .status
        .unwrap()
        .stored_versions
        .unwrap_or_default();
    assert!(stored.contains(&"v2".to_owned()), "{stored:?}");
    // Every object migrated: v1 can leave status.storedVersions.
    let mut current = crds.get(&crd_name).await.unwrap();
    current.status.as_mut().unwrap().stored_versions = Some(vec!["v2".to_owned()]);
    crds.update_status(&PostParams::default(), &current)
        .await
        .unwrap();

    installed.uninstall().await.unwrap();
    // The conversion is the CRD's own again (none: install_crd created it without one), so
    // with the server gone an object still reads at the version it is not stored at (v1
    // now), only its apiVersion changed.
    let restored = crds.get(&crd_name).await.unwrap().spec.conversion;
    assert_eq!(
        restored.as_ref().map(|c| c.strategy.as_str()),
        Some("None"),
        "{restored:?}"
    );
    let resource = ResourceRef::of::<widget::v1::Widget>();
    let small =
        Api::<kctrl_client::DynamicObject>::namespaced_dynamic(client.clone(), &ns.name, &resource)
            .get("small")
            .await
            .unwrap();
    assert_eq!(small.api_version, "webhook.kctrl.dev/v1");
    // Not converted: the stored v2 fields, pruned by v1's schema (which knows only size).
    assert_eq!(
        small.data["spec"],
        serde_json::json!({}),
        "{:?}",
        small.data
    );
    // A second installation converting the CRD while another is live is refused.
    let installed = install(&client, widget::server(), vec![crd.clone()])
        .await
        .unwrap();
    let err = kctrl_testenv::webhook::install(&client, widget::server(), vec![crd.clone()])
        .await
        .expect_err("a second installation converting the Widget CRD was accepted")
        .to_string();
    assert!(
        err.contains(&format!(
            "the conversion of the CRD {crd_name} is already pointed at the webhook server of the installation {}",
            installed.configuration_name()
        )),
        "{err}"
    );

    installed.uninstall().await.unwrap();
    ns.delete().await;
    uninstall_crd(&client, &crd_name).await;
}

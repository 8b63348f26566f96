//! A small controller tested against a real API server with `kctrl-testenv`: for each
//! `Greeting` (a custom resource defined below with `#[derive(CustomResource)]`) it keeps a
//! ConfigMap `<name>-greeting` holding the greeting's message, owned by the greeting. An
//! informer feeds a rate-limited work queue; a worker reads the cache and applies the
//! ConfigMap (server-side apply).
//!
//! These tests start real etcd and kube-apiserver processes from the cached build, so, like the
//! project's other tests against a real API server (`tests/`), they run only when asked:
//! `cargo xtask e2e` sets `KCTRL_TESTENV_E2E=1` and runs them. Without it each test prints one
//! line saying it was skipped. With it and no cached build they fail, with the message naming
//! the command that builds it.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kctrl_client::{Api, Client, CustomResource, DeleteParams, PatchParams, PostParams};
use kctrl_informer::{EventHandlerFns, SharedInformerFactory, key_of, split_key};
use kctrl_testenv::{Error, TestEnv};
use kctrl_workqueue::{RateLimitingQueue, default_controller_rate_limiter};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

/// The variable that turns these tests on.
const RUN_ENV: &str = "KCTRL_TESTENV_E2E";

const TIMEOUT: Duration = Duration::from_secs(30);

/// Whether to run; prints why not (to the real stderr: the harness captures `eprintln!`).
fn enabled(test: &str) -> bool {
    if std::env::var_os(RUN_ENV).is_some() {
        return true;
    }
    let _ = writeln!(
        std::io::stderr(),
        "kctrl-testenv: {test} skipped: {RUN_ENV} is not set (it starts etcd and kube-apiserver \
         from the cached build; `cargo xtask e2e` runs it)"
    );
    false
}

/// A greeting; the controller writes its message into a ConfigMap.
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[resource(
    group = "testenv.kctrl.example.com",
    version = "v1",
    kind = "Greeting",
    namespaced
)]
struct GreetingSpec {
    message: String,
}

/// The controller's field manager.
const MANAGER: &str = "greeting-controller";

/// The ConfigMap of greeting `name`.
fn configmap_name(greeting: &str) -> String {
    format!("{greeting}-greeting")
}

/// Starts the controller; it runs until `cancel` is cancelled.
async fn run_controller(client: Client, cancel: CancellationToken) {
    let factory = SharedInformerFactory::new(client.clone(), Duration::ZERO);
    let greetings = factory.informer::<Greeting>();
    let lister = factory.lister::<Greeting>();
    let queue = RateLimitingQueue::<String>::new(default_controller_rate_limiter());
    let (on_add, on_update) = (queue.clone(), queue.clone());
    greetings
        .add_event_handler(
            EventHandlerFns::new()
                .on_add(move |g: &Arc<Greeting>, _initial| on_add.add(key_of(g.as_ref())))
                .on_update(move |_old, new: &Arc<Greeting>| on_update.add(key_of(new.as_ref()))),
        )
        .expect("registering the handler");
    factory.start(&cancel);
    if !factory
        .wait_for_cache_sync(&cancel)
        .await
        .values()
        .all(|s| *s)
    {
        return;
    }
    let stopper = queue.clone();
    let stop = cancel.clone();
    tokio::spawn(async move {
        stop.cancelled().await;
        stopper.shut_down();
    });
    while let Some(key) = queue.get().await {
        let (ns, name) = split_key(&key).expect("keys of namespaced objects");
        let ns = ns.unwrap_or_default().to_owned();
        // Deleted greetings need nothing: the garbage collector removes what they own.
        let result = match lister.get(&ns, name) {
            Some(g) => reconcile(&client, &g).await,
            None => Ok(()),
        };
        match result {
            Ok(()) => queue.forget(&key),
            Err(_) => queue.add_rate_limited(key.clone()),
        }
        queue.done(&key);
    }
    factory.shutdown().await;
}

/// Applies the ConfigMap of greeting `g`.
async fn reconcile(client: &Client, g: &Greeting) -> Result<(), kctrl_client::Error> {
    let ns = g.metadata.namespace.clone().unwrap_or_default();
    let name = g.metadata.name.clone().unwrap_or_default();
    let cm = ConfigMap {
        metadata: ObjectMeta {
            name: Some(configmap_name(&name)),
            owner_references: Some(vec![OwnerReference {
                api_version: "testenv.kctrl.example.com/v1".into(),
                kind: "Greeting".into(),
                name,
                uid: g.metadata.uid.clone().unwrap_or_default(),
                controller: Some(true),
                block_owner_deletion: Some(true),
            }]),
            ..Default::default()
        },
        data: Some(BTreeMap::from([(
            "message".to_owned(),
            g.spec.message.clone(),
        )])),
        ..Default::default()
    };
    Api::<ConfigMap>::namespaced(client.clone(), &ns)
        .apply(&PatchParams::apply(MANAGER).force(), &cm)
        .await
        .map(|_| ())
}

/// Polls the ConfigMap of `greeting` until its message is `want`.
async fn wait_for_message(cms: &Api<ConfigMap>, greeting: &str, want: &str) {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let got = cms.get_opt(&configmap_name(greeting)).await.unwrap();
        let message = got
            .as_ref()
            .and_then(|cm| cm.data.as_ref()?.get("message").cloned());
        if message.as_deref() == Some(want) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the ConfigMap of {greeting} has message {message:?}, not {want:?}, after {TIMEOUT:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn the_controller_keeps_a_configmap_per_greeting() {
    if !enabled("the_controller_keeps_a_configmap_per_greeting") {
        return;
    }
    let t0 = Instant::now();
    let env = TestEnv::builder()
        .crds([Greeting::crd()])
        .start()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let _ = writeln!(
        std::io::stderr(),
        "kctrl-testenv: {} up in {:.1?} (with the CRD: {:.1?}), in {}",
        env.kubernetes_version(),
        env.started_in(),
        t0.elapsed(),
        env.dir().display()
    );
    assert!(env.apiserver_url().starts_with("https://127.0.0.1:"));
    let client = env.client().unwrap();
    let ns = "greetings";
    Api::<Namespace>::all(client.clone())
        .create(
            &PostParams::default(),
            &Namespace {
                metadata: ObjectMeta {
                    name: Some(ns.into()),
                    ..Default::default()
                },
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let greetings: Api<Greeting> = Api::namespaced(client.clone(), ns);
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), ns);

    // One greeting exists before the controller starts (initial list), one comes after (watch).
    greetings
        .create(
            &PostParams::default(),
            &Greeting::new(
                "early",
                GreetingSpec {
                    message: "hello".into(),
                },
            ),
        )
        .await
        .unwrap();
    let cancel = CancellationToken::new();
    let controller = tokio::spawn(run_controller(env.client().unwrap(), cancel.clone()));
    wait_for_message(&cms, "early", "hello").await;
    greetings
        .create(
            &PostParams::default(),
            &Greeting::new(
                "late",
                GreetingSpec {
                    message: "bonjour".into(),
                },
            ),
        )
        .await
        .unwrap();
    wait_for_message(&cms, "late", "bonjour").await;

    // A change of the spec reaches the ConfigMap.
    let mut early = greetings.get("early").await.unwrap();
    early.spec.message = "hello again".into();
    greetings
        .update(&PostParams::default(), &early)
        .await
        .unwrap();
    wait_for_message(&cms, "early", "hello again").await;

    // The ConfigMap is owned by its greeting, as the controller's owner reference says.
    let cm = cms.get(&configmap_name("early")).await.unwrap();
    let owner = &cm.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(owner.uid, early.metadata.uid.clone().unwrap());
    assert_eq!(owner.controller, Some(true));

    cancel.cancel();
    controller.await.unwrap();
    greetings
        .delete("late", &DeleteParams::default())
        .await
        .unwrap();

    // Dropping the environment stops every process and removes its directory.
    let dir = env.dir().to_owned();
    let kubectl = env.kubectl().to_owned();
    let kubeconfig = env.kubeconfig_path().to_owned();
    drop(env);
    assert!(!dir.exists(), "{} is still there", dir.display());
    let reachable = std::process::Command::new(kubectl)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(["get", "--raw", "/readyz", "--request-timeout=2s"])
        .output()
        .unwrap();
    assert!(!reachable.status.success(), "the apiserver still answers");
}

/// The environment shared by the tests of this binary: started once, the same for every call.
#[tokio::test]
async fn the_shared_environment_is_started_once() {
    if !enabled("the_shared_environment_is_started_once") {
        return;
    }
    let a = TestEnv::shared().await.unwrap_or_else(|e| panic!("{e}"));
    let b = TestEnv::shared().await.unwrap();
    assert!(std::ptr::eq(a, b));
    let version = a.client().unwrap().server_version().await.unwrap();
    assert_eq!(version.git_version, a.kubernetes_version());
    // Asking for another configuration is refused, naming both.
    let err = TestEnv::builder()
        .controller_manager(true)
        .shared()
        .await
        .unwrap_err();
    assert!(matches!(err, Error::SharedMismatch { .. }), "{err}");
    assert!(
        err.to_string().contains("kube-controller-manager on"),
        "{err}"
    );
}

/// Without a cached build, the error names the command that makes one; a bad
/// `KCTRL_KUBE_VERSION` is refused naming the variable.
#[tokio::test]
async fn a_missing_build_names_the_command_that_makes_it() {
    const NAME: &str = "a_missing_build_names_the_command_that_makes_it";
    // Needs no plane: the child processes point the cache somewhere empty, or ask for a
    // release that does not exist, through their environment (which a test cannot change in
    // its own process without affecting the others).
    match std::env::var("KCTRL_TESTENV_MISSING_BUILD_CHILD").as_deref() {
        Ok("missing") => {
            let err = TestEnv::start().await.unwrap_err();
            assert!(matches!(err, Error::NotBuilt { .. }), "{err}");
            let message = err.to_string();
            assert!(
                message.contains("`cargo xtask cluster build --kube-version v1."),
                "{message}"
            );
            assert!(message.contains("kube-apiserver"), "{message}");
            assert!(message.contains("build_if_missing(true)"), "{message}");
            // An unsupported version is refused before anything else.
            let err = TestEnv::builder().kube_version("1.20").unwrap_err();
            assert!(matches!(err, Error::UnsupportedVersion(_)), "{err}");
            return;
        }
        Ok("bad-version") => {
            let err = TestEnv::start().await.unwrap_err();
            assert!(matches!(err, Error::UnsupportedVersion(_)), "{err}");
            assert!(err.to_string().contains("KCTRL_KUBE_VERSION"), "{err}");
            return;
        }
        _ => {}
    }
    let empty = std::env::temp_dir().join(format!("kctrl-testenv-empty-{}", std::process::id()));
    for (case, var, value) in [
        ("missing", "KCTRL_CACHE_DIR", empty.to_str().unwrap()),
        ("bad-version", "KCTRL_KUBE_VERSION", "1.20"),
    ] {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([NAME, "--exact", "--nocapture"])
            .env("KCTRL_TESTENV_MISSING_BUILD_CHILD", case)
            .env(var, value)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{case}: {text}");
        assert!(text.contains("1 passed"), "{case}: {text}");
    }
}

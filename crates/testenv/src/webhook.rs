//! A test's webhook server, started on loopback and registered with the API server, as
//! envtest's `WebhookInstallOptions` does.
//!
//! [`install`] (and [`TestEnv::install_webhooks`](crate::TestEnv::install_webhooks)) generates a
//! CA and a serving certificate for `127.0.0.1` (per call), starts the test's
//! [`kctrl_webhook::ServerBuilder`] with them on `127.0.0.1:0`, creates its
//! `MutatingWebhookConfiguration` and `ValidatingWebhookConfiguration` with a URL
//! `clientConfig` and the CA bundle, points the conversion of the given CRDs (those of kinds the
//! server converts) at its `/convert`, and returns once the API server calls the admission
//! webhooks: two probe webhooks (a mutating and a validating one, for ConfigMaps carrying a
//! label of this installation only, failure policy `Ignore`) are added to the
//! configurations, and a dry-run create of such a ConfigMap is repeated until both were
//! called. The API server reads configurations and CRDs through its informers, so for a
//! moment after they are written it still calls the old ones (or none).
//!
//! When it points CRDs' conversion at the server, it also waits until the API server calls the
//! server's `/convert`, through a probe CRD of its own updated after them (see
//! `conversion_probe.rs`: a CRD's conversion is only called for an object of it, and
//! `install` knows none of the test's). That CRD, `conversionprobes.testenv.kctrl.dev`, stays
//! in the API server afterwards, without objects.
//!
//! Each CRD whose conversion it points at the server has its previous `spec.conversion`
//! remembered, and written back by [`InstalledWebhooks::uninstall`] (and when `install`
//! fails), so objects of the CRD stay readable at every version once the server is gone. One
//! CRD (one object of the API server, by UID) is converted by one live installation at a
//! time: a second `install` converting it fails, naming the first, until that one is
//! uninstalled or dropped.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceConversion, CustomResourceDefinition,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use kctrl_client::{Api, Client, DeleteParams, PostParams};
use kctrl_webhook::{
    AdmissionRequest, ClientConfig, Defaulter, Denied, FailurePolicy, Operation, RunningServer,
    ServerBuilder, Validator, Warnings, Webhook,
};
use tokio_util::sync::CancellationToken;

use crate::Error;

mod conversion_probe;

/// The label the probe ConfigMaps carry; its value names one installation.
const PROBE_LABEL: &str = "kctrl-testenv/webhook-probe";

/// How long [`install`] waits for the API server to call the webhooks.
const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// Counts the calls of a probe webhook, allowing everything.
#[derive(Clone, Default)]
struct Probe(Arc<AtomicUsize>);

impl Defaulter<ConfigMap> for Probe {
    async fn set_defaults(&self, _: &AdmissionRequest, _: &mut ConfigMap) -> Result<(), Denied> {
        self.0.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

impl Validator<ConfigMap> for Probe {
    async fn validate_create(
        &self,
        _: &AdmissionRequest,
        _: &ConfigMap,
    ) -> Result<Warnings, Denied> {
        self.0.fetch_add(1, Ordering::Relaxed);
        Ok(Vec::new())
    }

    async fn validate_update(
        &self,
        _: &AdmissionRequest,
        _: &ConfigMap,
        _: &ConfigMap,
    ) -> Result<Warnings, Denied> {
        Ok(Vec::new())
    }
}

/// A CA and a serving certificate it signed for `127.0.0.1` and `localhost`: (CA PEM, cert
/// PEM, key PEM).
fn certificates() -> Result<(String, String, String), Error> {
    let fail =
        |e: rcgen::Error| Error::Webhook(format!("generating the webhook's certificates: {e}"));
    let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).map_err(fail)?;
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca.key_usages = vec![
        rcgen::KeyUsagePurpose::KeyCertSign,
        rcgen::KeyUsagePurpose::DigitalSignature,
    ];
    ca.distinguished_name
        .push(rcgen::DnType::CommonName, "kctrl-testenv-webhook-ca");
    let ca_key = rcgen::KeyPair::generate().map_err(fail)?;
    let ca_pem = ca.self_signed(&ca_key).map_err(fail)?.pem();
    let issuer = rcgen::Issuer::new(ca, ca_key);
    let mut serving = rcgen::CertificateParams::new(vec!["localhost".to_owned()]).map_err(fail)?;
    serving.subject_alt_names.push(rcgen::SanType::IpAddress(
        std::net::Ipv4Addr::LOCALHOST.into(),
    ));
    serving
        .distinguished_name
        .push(rcgen::DnType::CommonName, "kctrl-testenv-webhook");
    let key = rcgen::KeyPair::generate().map_err(fail)?;
    let cert = serving.signed_by(&key, &issuer).map_err(fail)?;
    Ok((ca_pem, cert.pem(), key.serialize_pem()))
}

/// The CRDs (by UID) whose conversion a live installation points at its server, with the
/// installation's name.
static CONVERTING: std::sync::Mutex<std::collections::BTreeMap<String, String>> =
    std::sync::Mutex::new(std::collections::BTreeMap::new());

fn converting() -> std::sync::MutexGuard<'static, std::collections::BTreeMap<String, String>> {
    CONVERTING.lock().unwrap_or_else(|e| e.into_inner())
}

/// A CRD whose conversion an installation changed, and what it was before.
#[derive(Debug)]
struct TouchedCrd {
    name: String,
    uid: String,
    previous: Option<CustomResourceConversion>,
}

/// A test's webhook server, running and registered; see the [module docs](self).
///
/// [`uninstall`](Self::uninstall) deletes the configurations, gives the CRDs back their
/// previous conversion and stops the server. Dropping it stops the server and lets another
/// installation convert its CRDs, but changes nothing in the API server (that needs an
/// `await`): the configurations stay, and with failure policy `Fail` they then refuse the
/// requests they match, and the CRDs' conversion still names the stopped server, so reading
/// their objects at another version than the stored one fails. A test sharing its
/// environment should uninstall.
#[derive(Debug)]
pub struct InstalledWebhooks {
    server: Option<RunningServer>,
    cancel: CancellationToken,
    client_config: ClientConfig,
    ca_pem: String,
    name: String,
    client: Client,
    touched: Vec<TouchedCrd>,
}

impl InstalledWebhooks {
    /// The server's address on loopback.
    pub fn local_addr(&self) -> std::net::SocketAddr {
        self.server
            .as_ref()
            .map(RunningServer::local_addr)
            .unwrap_or_else(|| std::net::SocketAddr::from(([127, 0, 0, 1], 0)))
    }

    /// The running server (its metrics and certificates).
    pub fn server(&self) -> Option<&RunningServer> {
        self.server.as_ref()
    }

    /// How the API server reaches the server (a URL on loopback, with the CA bundle).
    pub fn client_config(&self) -> &ClientConfig {
        &self.client_config
    }

    /// The CA that signed the serving certificate (PEM).
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// The name of both configurations.
    pub fn configuration_name(&self) -> &str {
        &self.name
    }

    /// Deletes the configurations, gives each CRD whose conversion it changed its previous
    /// conversion back, then stops the server and waits until it has. Every step is tried
    /// even when one fails; the first failure is returned.
    pub async fn uninstall(mut self) -> Result<(), Error> {
        let params = DeleteParams::default();
        let mut first_error = None;
        let mut failed = |e: Error| {
            tracing::warn!(installation = %self.name, error = %e, "uninstalling webhooks");
            first_error.get_or_insert(e);
        };
        let mutating: Api<MutatingWebhookConfiguration> = Api::all(self.client.clone());
        if let Err(e) = mutating.delete(&self.name, &params).await
            && !e.is_not_found()
        {
            failed(e.into());
        }
        let validating: Api<ValidatingWebhookConfiguration> = Api::all(self.client.clone());
        if let Err(e) = validating.delete(&self.name, &params).await
            && !e.is_not_found()
        {
            failed(e.into());
        }
        for touched in std::mem::take(&mut self.touched) {
            if let Err(e) = restore_conversion(&self.client, &touched).await {
                failed(e);
            }
            converting().remove(&touched.uid);
        }
        self.cancel.cancel();
        if let Some(server) = self.server.take() {
            server.stopped().await;
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

impl Drop for InstalledWebhooks {
    fn drop(&mut self) {
        self.cancel.cancel();
        let mut converting = converting();
        for touched in &self.touched {
            converting.remove(&touched.uid);
        }
    }
}

/// Writes `touched`'s previous conversion back into its CRD, if the CRD is still the one
/// changed (same UID).
async fn restore_conversion(client: &Client, touched: &TouchedCrd) -> Result<(), Error> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    loop {
        let Some(mut crd) = api.get_opt(&touched.name).await? else {
            return Ok(());
        };
        if crd.metadata.uid.as_deref() != Some(touched.uid.as_str()) {
            return Ok(());
        }
        crd.spec.conversion = touched.previous.clone();
        match api.update(&PostParams::default(), &crd).await {
            Ok(_) => {
                tracing::debug!(crd = %touched.name, "conversion restored");
                return Ok(());
            }
            Err(e) if e.is_conflict() => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

/// Starts `server` on `127.0.0.1:0` with a fresh CA and serving certificate, registers it with
/// the API server `client` talks to, points the conversion of those of `crds` whose kinds it
/// converts at it, and waits until the API server calls its admission webhooks. See the
/// [module docs](self).
pub async fn install(
    client: &Client,
    server: ServerBuilder,
    crds: impl IntoIterator<Item = CustomResourceDefinition>,
) -> Result<InstalledWebhooks, Error> {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let name = format!(
        "kctrl-testenv-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    );
    let (ca_pem, cert_pem, key_pem) = certificates()?;
    let (mutated, validated) = (Probe::default(), Probe::default());
    let selector = LabelSelector {
        match_labels: Some([(PROBE_LABEL.to_owned(), name.clone())].into()),
        ..LabelSelector::default()
    };
    let probe = |w: Webhook, path: &str, webhook_name: &str| {
        w.path(path)
            .name(webhook_name)
            .operations([Operation::Create])
            .failure_policy(FailurePolicy::Ignore)
            .object_selector(selector.clone())
    };
    let server = server
        .webhook(probe(
            Webhook::defaulting::<ConfigMap, _>(mutated.clone()),
            "/kctrl-testenv-probe-mutate",
            "probe-mutate.testenv.kctrl.dev",
        ))
        .webhook(probe(
            Webhook::validating::<ConfigMap, _>(validated.clone()),
            "/kctrl-testenv-probe-validate",
            "probe-validate.testenv.kctrl.dev",
        ))
        .conversion(conversion_probe::conversion())
        .host(std::net::Ipv4Addr::LOCALHOST.into())
        .port(0)
        .tls_pem(cert_pem, key_pem)
        .build()
        .map_err(|e| Error::Webhook(e.to_string()))?;
    let cancel = CancellationToken::new();
    let running = server
        .start(cancel.clone())
        .await
        .map_err(|e| Error::Webhook(e.to_string()))?;
    let config = ClientConfig::url(format!("https://127.0.0.1:{}", running.local_addr().port()))
        .ca_bundle(ca_pem.clone());
    let mut installed = InstalledWebhooks {
        server: Some(running),
        cancel,
        client_config: config.clone(),
        ca_pem: ca_pem.clone(),
        name: name.clone(),
        client: client.clone(),
        touched: Vec::new(),
    };
    // Recorded straight into `installed`, so that a cancelled or panicking install (its future
    // dropped half-way) still releases its CRDs' reservations when `installed` is dropped.
    let touched = &mut installed.touched;
    let running = installed.server.as_ref();
    let registered = async {
        if let Some(m) = server.mutating_configuration(&name, &config) {
            Api::<MutatingWebhookConfiguration>::all(client.clone())
                .create(&PostParams::default(), &m)
                .await?;
        }
        if let Some(v) = server.validating_configuration(&name, &config) {
            Api::<ValidatingWebhookConfiguration>::all(client.clone())
                .create(&PostParams::default(), &v)
                .await?;
        }
        let converted = server.converted_kinds();
        let mut conversions = false;
        for mut crd in crds {
            let ours = converted
                .iter()
                .any(|(g, k)| *g == crd.spec.group && *k == crd.spec.names.kind);
            if ours {
                crd.spec.conversion = Some(kctrl_webhook::configuration::crd_conversion(&config));
                point_conversion(client, &crd, &name, touched).await?;
                conversions = true;
            }
            crate::crd::install(client, crd, READY_TIMEOUT).await?;
        }
        wait_until_called(client, &name, &mutated, &validated).await?;
        if conversions && let Some(running) = running {
            conversion_probe::wait_until_called(client, &name, &config, running, READY_TIMEOUT)
                .await?;
        }
        Ok(())
    }
    .await;
    match registered {
        Ok(()) => Ok(installed),
        Err(e) => {
            // What was created goes; the error is the one to report.
            let _ = installed.uninstall().await;
            Err(e)
        }
    }
}

/// Creates `crd`, or gives the existing one `crd`'s conversion, for the installation `name`:
/// the CRD is recorded in `touched` with its previous conversion, or refused when another
/// live installation converts it.
async fn point_conversion(
    client: &Client,
    crd: &CustomResourceDefinition,
    name: &str,
    touched: &mut Vec<TouchedCrd>,
) -> Result<(), Error> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd_name = crd.metadata.name.clone().unwrap_or_default();
    let reserve = |uid: &str| {
        let mut converting = converting();
        match converting.get(uid) {
            Some(other) if other != name => Err(Error::Webhook(format!(
                "the conversion of the CRD {crd_name} is already pointed at the webhook server \
                 of the installation {other}, which is still live; two installations \
                 converting one CRD would override each other: uninstall (or drop) {other} \
                 first"
            ))),
            _ => {
                converting.insert(uid.to_owned(), name.to_owned());
                Ok(())
            }
        }
    };
    let existing = loop {
        match api.get_opt(&crd_name).await? {
            Some(existing) => break existing,
            None => match api.create(&PostParams::default(), crd).await {
                Ok(created) => {
                    let uid = created.metadata.uid.clone().unwrap_or_default();
                    reserve(&uid)?;
                    // Created here: without a conversion of its own, which is `None`.
                    touched.push(TouchedCrd {
                        name: crd_name,
                        uid,
                        previous: None,
                    });
                    return Ok(());
                }
                Err(e) if e.is_already_exists() => continue,
                Err(e) => return Err(e.into()),
            },
        }
    };
    let uid = existing.metadata.uid.clone().unwrap_or_default();
    reserve(&uid)?;
    touched.push(TouchedCrd {
        name: crd_name,
        uid,
        previous: existing.spec.conversion.clone(),
    });
    set_conversion(client, crd).await
}

/// Creates `crd`, or gives the existing one `crd`'s conversion.
async fn set_conversion(client: &Client, crd: &CustomResourceDefinition) -> Result<(), Error> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let name = crd.metadata.name.clone().unwrap_or_default();
    loop {
        match api.get_opt(&name).await? {
            None => match api.create(&PostParams::default(), crd).await {
                Ok(_) => return Ok(()),
                Err(e) if e.is_already_exists() => continue,
                Err(e) => return Err(e.into()),
            },
            Some(mut existing) => {
                existing.spec.conversion = crd.spec.conversion.clone();
                match api.update(&PostParams::default(), &existing).await {
                    Ok(_) => return Ok(()),
                    Err(e) if e.is_conflict() => continue,
                    Err(e) => return Err(e.into()),
                }
            }
        }
    }
}

/// Dry-run creates of a probe ConfigMap until the API server has called both probes.
async fn wait_until_called(
    client: &Client,
    name: &str,
    mutated: &Probe,
    validated: &Probe,
) -> Result<(), Error> {
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let probe = ConfigMap {
        metadata: ObjectMeta {
            name: Some(format!("{name}-probe")),
            labels: Some([(PROBE_LABEL.to_owned(), name.to_owned())].into()),
            ..ObjectMeta::default()
        },
        ..ConfigMap::default()
    };
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let deadline = tokio::time::Instant::now() + READY_TIMEOUT;
    loop {
        configmaps.create(&dry_run, &probe).await?;
        let calls = (
            mutated.0.load(Ordering::Relaxed),
            validated.0.load(Ordering::Relaxed),
        );
        if calls.0 > 0 && calls.1 > 0 {
            return Ok(());
        }
        if tokio::time::Instant::now() > deadline {
            return Err(Error::Webhook(format!(
                "the API server did not call the webhooks of {name} within {READY_TIMEOUT:?} \
                 (mutating probe called {} times, validating {}): can it reach 127.0.0.1 of \
                 this machine? (an API server in a container or VM cannot)",
                calls.0, calls.1
            )));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinitionSpec;
    use kctrl_client::ResourceRef;
    use kctrl_fake::{FakeApi, Reaction, ResourceSpec, errors};

    use super::*;
    use kctrl_webhook::WebhookServer;

    /// A fake API server serving the configurations and CRDs, holding a validating
    /// configuration named `name` and the CRD `widgets.example.com` with a webhook conversion.
    fn fake(name: &str) -> FakeApi {
        let fake = FakeApi::new();
        for resource in [
            ResourceRef::of::<MutatingWebhookConfiguration>(),
            ResourceRef::of::<ValidatingWebhookConfiguration>(),
            ResourceRef::of::<CustomResourceDefinition>(),
        ] {
            fake.register(ResourceSpec::builtin(resource));
        }
        fake.add(&ValidatingWebhookConfiguration {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                ..ObjectMeta::default()
            },
            webhooks: None,
        })
        .unwrap();
        fake.add(&CustomResourceDefinition {
            metadata: ObjectMeta {
                name: Some("widgets.example.com".to_owned()),
                ..ObjectMeta::default()
            },
            spec: CustomResourceDefinitionSpec {
                group: "example.com".to_owned(),
                conversion: Some(kctrl_webhook::configuration::crd_conversion(
                    &ClientConfig::url("https://127.0.0.1:1"),
                )),
                ..CustomResourceDefinitionSpec::default()
            },
            status: None,
        })
        .unwrap();
        fake
    }

    fn installed(fake: &FakeApi, name: &str, touched: Vec<TouchedCrd>) -> InstalledWebhooks {
        InstalledWebhooks {
            server: None,
            cancel: CancellationToken::new(),
            client_config: ClientConfig::url("https://127.0.0.1:1"),
            ca_pem: String::new(),
            name: name.to_owned(),
            client: fake.client(),
            touched,
        }
    }

    fn crd(fake: &FakeApi) -> CustomResourceDefinition {
        fake.object(None, "widgets.example.com").unwrap()
    }

    #[tokio::test]
    async fn uninstall_tries_every_step_and_reports_the_first_failure() {
        let name = "kctrl-testenv-uninstall";
        let fake = fake(name);
        // The mutating configuration cannot be deleted (not a 404: a server error).
        fake.prepend_reactor("delete", "mutatingwebhookconfigurations", |_| {
            Reaction::Error(errors::internal_error("etcd is down"))
        });
        let uid = crd(&fake).metadata.uid.unwrap();
        converting().insert(uid.clone(), name.to_owned());
        let touched = TouchedCrd {
            name: "widgets.example.com".to_owned(),
            uid: uid.clone(),
            previous: None,
        };
        let err = installed(&fake, name, vec![touched])
            .uninstall()
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains("etcd is down"), "{err}");
        // The rest was done all the same.
        assert!(
            fake.object::<ValidatingWebhookConfiguration>(None, name)
                .is_none(),
            "the validating configuration is left"
        );
        assert_eq!(crd(&fake).spec.conversion, None);
        assert!(!converting().contains_key(&uid));
    }

    /// An install whose future is dropped half-way (a test's timeout around it, a panic)
    /// releases the CRDs it had reserved: the next installation may convert them.
    #[tokio::test]
    async fn a_cancelled_install_releases_its_crds() {
        let fake = fake("unused");
        let probe = conversion_probe::crd(&ClientConfig::url("https://127.0.0.1:3"));
        let probe_name = probe.metadata.name.clone().unwrap();
        // The probe's CRD is one the server converts, so the install reserves it; the fake
        // calls no webhook, so the install then waits until the timeout drops it.
        let client = fake.client();
        let install = install(&client, WebhookServer::builder(), [probe]);
        let dropped = tokio::time::timeout(Duration::from_secs(3), install).await;
        assert!(dropped.is_err(), "the install finished: {dropped:?}");
        let uid = fake
            .object::<CustomResourceDefinition>(None, &probe_name)
            .and_then(|crd| crd.metadata.uid)
            .expect("the install created the probe's CRD");
        assert!(
            !converting().contains_key(&uid),
            "the CRD is still reserved by the dropped install"
        );
    }

    #[tokio::test]
    async fn a_crd_is_converted_by_one_live_installation() {
        let fake = fake("unused");
        let client = fake.client();
        let mut wanted = crd(&fake);
        wanted.spec.conversion = Some(kctrl_webhook::configuration::crd_conversion(
            &ClientConfig::url("https://127.0.0.1:2"),
        ));
        let previous = crd(&fake).spec.conversion;
        let mut first = Vec::new();
        point_conversion(&client, &wanted, "first", &mut first)
            .await
            .unwrap();
        assert_eq!(first.len(), 1);
        assert_eq!(first[0].previous, previous);
        assert_eq!(crd(&fake).spec.conversion, wanted.spec.conversion);
        let mut second = Vec::new();
        let err = point_conversion(&client, &wanted, "second", &mut second)
            .await
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(
                "the conversion of the CRD widgets.example.com is already pointed at the \
                 webhook server of the installation first"
            ),
            "{err}"
        );
        assert!(second.is_empty());
        // Dropping the first frees the CRD (and changes nothing in the API server).
        drop(installed(&fake, "first", first));
        assert_eq!(crd(&fake).spec.conversion, wanted.spec.conversion);
        let mut third = Vec::new();
        let mut again = wanted.clone();
        again.spec.conversion = Some(kctrl_webhook::configuration::crd_conversion(
            &ClientConfig::url("https://127.0.0.1:3"),
        ));
        point_conversion(&client, &again, "third", &mut third)
            .await
            .unwrap();
        assert_eq!(crd(&fake).spec.conversion, again.spec.conversion);
        // Uninstalling gives back what the third found: the first's, never restored.
        installed(&fake, "third", third).uninstall().await.unwrap();
        assert_eq!(crd(&fake).spec.conversion, wanted.spec.conversion);
    }
}

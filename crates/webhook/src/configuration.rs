//! The objects that register webhooks with the API server, made from the server's
//! registrations: `MutatingWebhookConfiguration`, `ValidatingWebhookConfiguration` and a
//! custom resource's conversion `clientConfig`.
//!
//! Each webhook becomes one entry with its rule (operations, API group, version, resource),
//! `sideEffects: None`, `admissionReviewVersions: ["v1"]`, its failure policy and timeout, and
//! a `clientConfig` pointing at the webhook's path: on a Service (in the cluster) or at a URL
//! (outside it, e.g. a test's server on loopback), with the CA bundle that signed the serving
//! certificate.
//!
//! ```
//! use k8s_openapi::api::core::v1::Pod;
//! use kctrl_webhook::{ClientConfig, Webhook, WebhookServer};
//! # use kctrl_webhook::{AdmissionRequest, Denied, Defaulter};
//! # struct NoOp;
//! # impl Defaulter<Pod> for NoOp {
//! #     async fn set_defaults(&self, _: &AdmissionRequest, _: &mut Pod) -> Result<(), Denied> { Ok(()) }
//! # }
//! # let cert = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
//! # let (cert_pem, key_pem) = (cert.cert.pem(), cert.signing_key.serialize_pem());
//! let server = WebhookServer::builder()
//!     .webhook(Webhook::defaulting::<Pod, _>(NoOp))
//!     .tls_pem(cert_pem.clone(), key_pem)
//!     .build()?;
//! let client = ClientConfig::service("webhook-system", "webhook-service").ca_bundle(cert_pem);
//! let config = server.mutating_configuration("pod-defaults", &client).unwrap();
//! let webhook = &config.webhooks.as_ref().unwrap()[0];
//! assert_eq!(webhook.name, "mpod-v1.kb.io");
//! let service = webhook.client_config.service.as_ref().unwrap();
//! assert_eq!(service.path.as_deref(), Some("/mutate--v1-pod"));
//! assert_eq!(webhook.side_effects, "None");
//! # Ok::<(), kctrl_webhook::Error>(())
//! ```

use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1 as admission;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1 as apiextensions;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::server::CONVERSION_PATH;
use crate::webhook::{Webhook, WebhookType};

#[derive(Clone, Debug, PartialEq, Eq)]
enum Target {
    Url(String),
    Service {
        namespace: String,
        name: String,
        port: Option<i32>,
    },
}

/// How the API server reaches the webhook server, and the CA it trusts for it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientConfig {
    target: Target,
    ca_bundle: Option<Vec<u8>>,
}

impl ClientConfig {
    /// At the base URL `https://host:port` (each webhook's path is appended); for a server
    /// outside the cluster.
    pub fn url(base: impl Into<String>) -> Self {
        ClientConfig {
            target: Target::Url(base.into().trim_end_matches('/').to_owned()),
            ca_bundle: None,
        }
    }

    /// Through the Service `namespace`/`name` (port 443 unless [`port`](Self::port) says
    /// otherwise).
    pub fn service(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        ClientConfig {
            target: Target::Service {
                namespace: namespace.into(),
                name: name.into(),
                port: None,
            },
            ca_bundle: None,
        }
    }

    /// The Service's port.
    pub fn port(mut self, port: i32) -> Self {
        if let Target::Service { port: p, .. } = &mut self.target {
            *p = Some(port);
        }
        self
    }

    /// The PEM bundle of the CA(s) that signed the serving certificate; without one the API
    /// server trusts its own system roots.
    pub fn ca_bundle(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.ca_bundle = Some(pem.into());
        self
    }

    /// The admissionregistration/v1 `clientConfig` for `path`.
    pub fn admission(&self, path: &str) -> admission::WebhookClientConfig {
        let ca_bundle = self.ca_bundle.clone().map(ByteString);
        match &self.target {
            Target::Url(base) => admission::WebhookClientConfig {
                url: Some(format!("{base}{path}")),
                ca_bundle,
                service: None,
            },
            Target::Service {
                namespace,
                name,
                port,
            } => admission::WebhookClientConfig {
                url: None,
                ca_bundle,
                service: Some(admission::ServiceReference {
                    namespace: namespace.clone(),
                    name: name.clone(),
                    path: Some(path.to_owned()),
                    port: *port,
                }),
            },
        }
    }

    /// The apiextensions/v1 `clientConfig` of a CRD's conversion webhook (`/convert`).
    pub fn conversion(&self) -> apiextensions::WebhookClientConfig {
        let admission = self.admission(CONVERSION_PATH);
        apiextensions::WebhookClientConfig {
            url: admission.url,
            ca_bundle: admission.ca_bundle,
            service: admission.service.map(|s| apiextensions::ServiceReference {
                namespace: s.namespace,
                name: s.name,
                path: s.path,
                port: s.port,
            }),
        }
    }
}

fn rules(w: &Webhook) -> Vec<admission::RuleWithOperations> {
    vec![admission::RuleWithOperations {
        api_groups: Some(vec![w.rule.group.clone()]),
        api_versions: Some(vec![w.rule.version.clone()]),
        operations: Some(
            w.rule
                .operations
                .iter()
                .map(|o| o.as_str().to_owned())
                .collect(),
        ),
        resources: Some(vec![w.rule.resource.clone()]),
        scope: None,
    }]
}

/// A configuration of type `$config` named `$name` holding a `$entry` for each webhook of
/// `$webhooks` of type `$type_` (the two configurations' webhooks have the same fields, but for
/// the mutating one's reinvocation policy, left unset).
macro_rules! configuration {
    ($config:ident, $entry:ident, $type_:expr, $name:expr, $webhooks:expr, $client:expr) => {
        admission::$config {
            metadata: ObjectMeta {
                name: Some($name.to_owned()),
                ..ObjectMeta::default()
            },
            webhooks: Some(
                $webhooks
                    .iter()
                    .filter(|w| w.type_ == $type_)
                    .map(|w| admission::$entry {
                        name: w.name.clone(),
                        admission_review_versions: vec!["v1".to_owned()],
                        client_config: $client.admission(&w.path),
                        failure_policy: Some(w.failure_policy.as_str().to_owned()),
                        rules: Some(rules(w)),
                        side_effects: "None".to_owned(),
                        timeout_seconds: w.timeout_seconds,
                        namespace_selector: w.namespace_selector.clone(),
                        object_selector: w.object_selector.clone(),
                        ..admission::$entry::default()
                    })
                    .collect(),
            ),
        }
    };
}

/// The `MutatingWebhookConfiguration` named `name` with an entry for each mutating webhook of
/// `webhooks`.
pub fn mutating(
    name: &str,
    webhooks: &[Webhook],
    client: &ClientConfig,
) -> admission::MutatingWebhookConfiguration {
    configuration!(
        MutatingWebhookConfiguration,
        MutatingWebhook,
        WebhookType::Mutating,
        name,
        webhooks,
        client
    )
}

/// The `ValidatingWebhookConfiguration` named `name` with an entry for each validating
/// webhook of `webhooks`.
pub fn validating(
    name: &str,
    webhooks: &[Webhook],
    client: &ClientConfig,
) -> admission::ValidatingWebhookConfiguration {
    configuration!(
        ValidatingWebhookConfiguration,
        ValidatingWebhook,
        WebhookType::Validating,
        name,
        webhooks,
        client
    )
}

/// A CRD's `spec.conversion` with `strategy: Webhook`, calling the server's `/convert` as
/// `client` says, with `conversionReviewVersions: ["v1"]`.
pub fn crd_conversion(client: &ClientConfig) -> apiextensions::CustomResourceConversion {
    apiextensions::CustomResourceConversion {
        strategy: "Webhook".to_owned(),
        webhook: Some(apiextensions::WebhookConversion {
            client_config: Some(client.conversion()),
            conversion_review_versions: vec!["v1".to_owned()],
        }),
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ConfigMap;
    use serde_json::json;

    use super::*;
    use crate::admission::{Validator, Warnings};
    use crate::denial::Denied;
    use crate::review::{AdmissionRequest, Operation};
    use crate::webhook::FailurePolicy;

    struct Allow;

    impl Validator<ConfigMap> for Allow {
        async fn validate_create(
            &self,
            _: &AdmissionRequest,
            _: &ConfigMap,
        ) -> Result<Warnings, Denied> {
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

    #[test]
    fn validating_configuration_with_a_url_and_a_ca_bundle() {
        let hooks = [Webhook::validating::<ConfigMap, _>(Allow)
            .operations([Operation::Create, Operation::Delete])
            .failure_policy(FailurePolicy::Ignore)
            .timeout_seconds(5)];
        let client = ClientConfig::url("https://127.0.0.1:9443/").ca_bundle("PEM");
        let config = validating("cm", &hooks, &client);
        assert_eq!(
            serde_json::to_value(&config).unwrap(),
            json!({
                "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
                "metadata": {"name": "cm"},
                "webhooks": [{
                    "name": "vconfigmap-v1.kb.io",
                    "admissionReviewVersions": ["v1"],
                    "clientConfig": {"url": "https://127.0.0.1:9443/validate--v1-configmap", "caBundle": "UEVN"},
                    "failurePolicy": "Ignore",
                    "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "DELETE"], "resources": ["configmaps"]}],
                    "sideEffects": "None",
                    "timeoutSeconds": 5,
                }],
            })
        );
        // No mutating webhook among them: an empty list.
        assert_eq!(mutating("cm", &hooks, &client).webhooks, Some(Vec::new()));
    }

    #[test]
    fn service_client_configs_for_admission_and_conversion() {
        let client = ClientConfig::service("system", "webhook").port(8443);
        let admission = client.admission("/mutate-x");
        let service = admission.service.unwrap();
        assert_eq!(
            (
                service.namespace.as_str(),
                service.name.as_str(),
                service.path.as_deref(),
                service.port
            ),
            ("system", "webhook", Some("/mutate-x"), Some(8443))
        );
        assert!(admission.url.is_none() && admission.ca_bundle.is_none());
        let conversion = crd_conversion(&client);
        assert_eq!(conversion.strategy, "Webhook");
        let webhook = conversion.webhook.unwrap();
        assert_eq!(webhook.conversion_review_versions, ["v1"]);
        assert_eq!(
            webhook
                .client_config
                .unwrap()
                .service
                .unwrap()
                .path
                .as_deref(),
            Some("/convert")
        );
    }
}

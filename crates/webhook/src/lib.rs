//! Admission and conversion webhooks: the HTTPS server the Kubernetes API server calls before
//! it stores an object (to set defaults, to refuse it) and when it converts a custom resource
//! between versions.
//!
//! You write typed handlers for a resource `K` (a k8s-openapi type or a
//! `#[derive(CustomResource)]` type); the crate decodes the API server's reviews, calls them,
//! and answers with the shapes the API server and `kubectl` expect:
//!
//! * a [`Defaulter`] changes a `&mut K`; the answer is a JSON patch of exactly that change
//!   ([`patch`]), so fields the Rust type does not know are never dropped;
//! * a [`Validator`] sees creates, updates (old and new) and deletes, and allows (with
//!   [`Warnings`] or not) or refuses: [`Denied::forbidden`] (`403`, the handler's message) or
//!   [`Denied::invalid`] (`422` with a cause per [`FieldError`], as apimachinery's
//!   `field.ErrorList`);
//! * a [`Conversion`] converts between versions of a custom resource, hub and spoke.
//!
//! ```no_run
//! use k8s_openapi::api::core::v1::Pod;
//! use kctrl_webhook::{AdmissionRequest, Defaulter, Denied, FieldError, Validator, Warnings};
//! use kctrl_webhook::{Webhook, WebhookServer};
//! use tokio_util::sync::CancellationToken;
//!
//! struct PodPolicy;
//!
//! impl Defaulter<Pod> for PodPolicy {
//!     async fn set_defaults(&self, _: &AdmissionRequest, pod: &mut Pod) -> Result<(), Denied> {
//!         let labels = pod.metadata.labels.get_or_insert_with(Default::default);
//!         labels.entry("team".into()).or_insert_with(|| "unknown".into());
//!         Ok(())
//!     }
//! }
//!
//! impl Validator<Pod> for PodPolicy {
//!     async fn validate_create(&self, _: &AdmissionRequest, pod: &Pod) -> Result<Warnings, Denied> {
//!         if pod.spec.as_ref().is_some_and(|s| s.host_network == Some(true)) {
//!             return Err(Denied::invalid(vec![FieldError::forbidden(
//!                 "spec.hostNetwork",
//!                 "pods of this cluster may not use the host's network",
//!             )]));
//!         }
//!         Ok(Vec::new())
//!     }
//!     async fn validate_update(&self, r: &AdmissionRequest, _: &Pod, new: &Pod) -> Result<Warnings, Denied> {
//!         self.validate_create(r, new).await
//!     }
//! }
//!
//! # async fn run() -> Result<(), kctrl_webhook::Error> {
//! let cancel = CancellationToken::new();
//! let server = WebhookServer::builder()
//!     .webhook(Webhook::defaulting::<Pod, _>(PodPolicy))   // at /mutate--v1-pod
//!     .webhook(Webhook::validating::<Pod, _>(PodPolicy))   // at /validate--v1-pod
//!     .build()?;                                           // tls.crt, tls.key of the cert dir
//! let running = server.start(cancel.clone()).await?;       // :9443
//! running.stopped().await;                                 // until `cancel` fires
//! # Ok(()) }
//! ```
//!
//! The [`WebhookServer`] also makes the objects that register its webhooks:
//! [`WebhookServer::mutating_configuration`], [`WebhookServer::validating_configuration`] and
//! [`configuration::crd_conversion`] (a CRD's `spec.conversion`), pointing at a Service or a
//! URL with a CA bundle ([`ClientConfig`]). `kctrl-testenv` starts a test's server on loopback
//! and registers it with its API server (`TestEnv::install_webhooks`).
//!
//! # controller-runtime and kctrl-webhook
//!
//! | controller-runtime | kctrl-webhook |
//! |---|---|
//! | `webhook.NewServer(webhook.Options{Port, CertDir, CertName, KeyName})` | [`WebhookServer::builder`]`().port(..).cert_dir(..).cert_names(..)` |
//! | `Server.Register(path, handler)` | [`ServerBuilder::webhook`] (kubebuilder's path by default, [`Webhook::path`] to change it) |
//! | `ctrl.NewWebhookManagedBy(mgr).For(obj).WithDefaulter(d).WithValidator(v)` | [`Webhook::defaulting`], [`Webhook::validating`] |
//! | `admission.CustomDefaulter` (`Default(ctx, obj) error`) | [`Defaulter`] (`set_defaults`; not `default`, which `Default` has) |
//! | `admission.CustomValidator` (`ValidateCreate/Update/Delete` → `(Warnings, error)`) | [`Validator`] → `Result<`[`Warnings`]`, `[`Denied`]`>` |
//! | `admission.Denied(msg)`, `apierrors.NewForbidden` | [`Denied::forbidden`] |
//! | `apierrors.NewInvalid(gk, name, field.ErrorList)` | [`Denied::invalid`] with [`FieldError`]s |
//! | `admission.PatchResponseFromRaw` | [`patch::diff`] (against the raw object, not a re-serialization) |
//! | `admissionv1.AdmissionReview`, `apiextensionsv1.ConversionReview` | [`AdmissionReview`], [`ConversionReview`] |
//! | `conversion.Hub`, `conversion.Convertible` (`ConvertTo`/`ConvertFrom`) | [`Conversion`]`::<Hub>::new().spoke::<V>()`, [`Spoke`] (`to_hub`/`from_hub`) |
//! | `/convert` | [`server::CONVERSION_PATH`] |
//! | `certwatcher.CertWatcher` | [`CertWatcher`] |
//! | `controller_runtime_webhook_requests_total`, `_latency_seconds`, `_requests_in_flight`, `_panics_total`, `controller_runtime_conversion_webhook_panics_total` | [`metrics::WebhookMetrics`] |
//! | envtest's `WebhookInstallOptions` | `kctrl_testenv::TestEnv::install_webhooks` |
//! | `+kubebuilder:webhook` markers → `manifests.yaml` | [`WebhookServer::mutating_configuration`], [`WebhookServer::validating_configuration`] |

#![forbid(unsafe_code)]

pub mod admission;
pub mod certwatcher;
pub mod configuration;
pub mod conversion;
pub mod denial;
mod error;
pub mod metrics;
pub mod patch;
pub mod review;
pub mod server;
#[cfg(test)]
mod test_widgets;
pub mod webhook;

pub use admission::{Defaulter, Validator, Warnings};
pub use certwatcher::{CertError, CertWatcher};
pub use configuration::ClientConfig;
pub use conversion::{Conversion, ConversionError, Spoke};
pub use denial::{Denied, FieldError, FieldErrorType};
pub use error::Error;
pub use review::{
    AdmissionRequest, AdmissionResponse, AdmissionReview, ConversionRequest, ConversionResponse,
    ConversionReview, Operation, Status,
};
pub use server::{RunningServer, ServerBuilder, WebhookServer};
pub use webhook::{FailurePolicy, Webhook, WebhookType};

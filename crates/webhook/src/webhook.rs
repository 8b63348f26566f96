//! One admission webhook: a typed handler and what the API server needs to know to call it
//! (path, name, the operations and resource it applies to, failure policy, timeout).
//!
//! Defaults follow kubebuilder's scaffolding: the path is
//! `/mutate-<group with dots as dashes>-<version>-<kind in lowercase>` (or `/validate-...`),
//! the name `m<kind>-<version>.kb.io` (or `v...`), operations `CREATE` and `UPDATE`, failure
//! policy `Fail`, side effects `None`.

use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;

use k8s_openapi::Resource;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::admission::{
    AdmissionHandler, Defaulter, DefaultingHandler, ValidatingHandler, Validator,
};
use crate::review::Operation;

/// Mutating (defaulting) or validating.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WebhookType {
    /// Called first, may change the object (a `MutatingWebhookConfiguration`).
    Mutating,
    /// Called after every mutation, allows or refuses (a `ValidatingWebhookConfiguration`).
    Validating,
}

/// What the API server does when the webhook cannot be called or fails.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum FailurePolicy {
    /// Refuse the request (the default).
    #[default]
    Fail,
    /// Let the request through as if the webhook had allowed it.
    Ignore,
}

impl FailurePolicy {
    /// `Fail` or `Ignore`.
    pub fn as_str(self) -> &'static str {
        match self {
            FailurePolicy::Fail => "Fail",
            FailurePolicy::Ignore => "Ignore",
        }
    }
}

/// The resource and operations a webhook applies to (one rule of its configuration).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    /// The API group (`""` for the core group).
    pub group: String,
    /// The version.
    pub version: String,
    /// The resource (plural), e.g. `cronjobs`.
    pub resource: String,
    /// The operations.
    pub operations: Vec<Operation>,
}

/// One admission webhook, made by [`Webhook::defaulting`] or [`Webhook::validating`] and
/// registered with the [`ServerBuilder`](crate::ServerBuilder).
#[derive(Clone)]
pub struct Webhook {
    pub(crate) type_: WebhookType,
    pub(crate) path: String,
    pub(crate) name: String,
    pub(crate) rule: Rule,
    pub(crate) failure_policy: FailurePolicy,
    pub(crate) timeout_seconds: Option<i32>,
    pub(crate) namespace_selector: Option<LabelSelector>,
    pub(crate) object_selector: Option<LabelSelector>,
    pub(crate) handler: Arc<dyn AdmissionHandler>,
}

impl fmt::Debug for Webhook {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Webhook")
            .field("type", &self.type_)
            .field("path", &self.path)
            .field("name", &self.name)
            .field("rule", &self.rule)
            .field("failure_policy", &self.failure_policy)
            .field("timeout_seconds", &self.timeout_seconds)
            .finish_non_exhaustive()
    }
}

/// controller-runtime's path: `/<verb>-<group with dots as dashes>-<version>-<kind lowercase>`,
/// `verb` `mutate` or `validate` (the core group is empty: `/mutate--v1-pod`).
pub fn default_path<K: Resource>(type_: WebhookType) -> String {
    let verb = match type_ {
        WebhookType::Mutating => "mutate",
        WebhookType::Validating => "validate",
    };
    let group = K::GROUP.replace('.', "-");
    format!(
        "/{verb}-{group}-{}-{}",
        K::VERSION,
        K::KIND.to_ascii_lowercase()
    )
}

impl Webhook {
    fn new<K: Resource>(type_: WebhookType, handler: Arc<dyn AdmissionHandler>) -> Self {
        let prefix = match type_ {
            WebhookType::Mutating => 'm',
            WebhookType::Validating => 'v',
        };
        Webhook {
            type_,
            path: default_path::<K>(type_),
            name: format!(
                "{prefix}{}-{}.kb.io",
                K::KIND.to_ascii_lowercase(),
                K::VERSION
            ),
            rule: Rule {
                group: K::GROUP.to_owned(),
                version: K::VERSION.to_owned(),
                resource: K::URL_PATH_SEGMENT.to_owned(),
                operations: vec![Operation::Create, Operation::Update],
            },
            failure_policy: FailurePolicy::Fail,
            timeout_seconds: None,
            namespace_selector: None,
            object_selector: None,
            handler,
        }
    }

    /// A mutating webhook that sets defaults on `K` with `defaulter`.
    pub fn defaulting<K, D>(defaulter: D) -> Self
    where
        K: Resource + Serialize + DeserializeOwned + Send + Sync + 'static,
        D: Defaulter<K>,
    {
        Self::new::<K>(
            WebhookType::Mutating,
            Arc::new(DefaultingHandler {
                defaulter,
                kind: PhantomData,
            }),
        )
    }

    /// A validating webhook that checks `K` with `validator`.
    pub fn validating<K, V>(validator: V) -> Self
    where
        K: Resource + DeserializeOwned + Send + Sync + 'static,
        V: Validator<K>,
    {
        Self::new::<K>(
            WebhookType::Validating,
            Arc::new(ValidatingHandler {
                validator,
                kind: PhantomData,
            }),
        )
    }

    /// Serve it at `path` (must start with `/`) instead of kubebuilder's.
    pub fn path(mut self, path: impl Into<String>) -> Self {
        self.path = path.into();
        self
    }

    /// Name it `name` in its configuration (a domain name of three or more labels, e.g.
    /// `mcronjob-v1.kb.io`), instead of the default.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// Apply to these operations instead of `CREATE` and `UPDATE` (add `DELETE` for
    /// [`Validator::validate_delete`]).
    pub fn operations(mut self, operations: impl IntoIterator<Item = Operation>) -> Self {
        self.rule.operations = operations.into_iter().collect();
        self
    }

    /// What the API server does when the webhook fails ([`FailurePolicy::Fail`] by default).
    pub fn failure_policy(mut self, policy: FailurePolicy) -> Self {
        self.failure_policy = policy;
        self
    }

    /// How long the API server waits for an answer, 1 to 30 s (its default: 10).
    pub fn timeout_seconds(mut self, seconds: i32) -> Self {
        self.timeout_seconds = Some(seconds);
        self
    }

    /// Only for objects in namespaces whose labels match.
    pub fn namespace_selector(mut self, selector: LabelSelector) -> Self {
        self.namespace_selector = Some(selector);
        self
    }

    /// Only for objects whose labels match.
    pub fn object_selector(mut self, selector: LabelSelector) -> Self {
        self.object_selector = Some(selector);
        self
    }

    /// Mutating or validating.
    pub fn webhook_type(&self) -> WebhookType {
        self.type_
    }

    /// The path it is served at.
    pub fn served_path(&self) -> &str {
        &self.path
    }

    /// Its name in its configuration.
    pub fn webhook_name(&self) -> &str {
        &self.name
    }

    /// The resource and operations it applies to.
    pub fn rule(&self) -> &Rule {
        &self.rule
    }
}

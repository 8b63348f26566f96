//! Typed admission handlers: a [`Defaulter`] changes a `&mut K` and is answered with a JSON
//! patch of its change; a [`Validator`] looks at creates, updates and deletes of `K` and
//! allows them (with warnings or not) or refuses them with a [`Denied`].
//!
//! `K` is any type that is a Kubernetes resource and (de)serializes as one: k8s-openapi's
//! types and `#[derive(CustomResource)]` types alike.

use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;

use base64::Engine as _;
use k8s_openapi::Resource;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::denial::Denied;
use crate::patch;
use crate::review::{AdmissionRequest, AdmissionResponse, Operation, Status};

/// Warnings returned to the client with an allowed (or refused) request.
pub type Warnings = Vec<String>;

/// A future that can be sent between threads, boxed.
pub(crate) type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Sets defaults on objects of `K` before they are stored (a mutating webhook; controller-runtime's
/// `CustomDefaulter`).
///
/// The handler changes the object in place; the webhook answers with a JSON patch of exactly
/// that change (see [`patch`](mod@crate::patch)), so fields the Rust type does not know are kept.
/// An `Err` refuses the request (see [`Denied`]).
pub trait Defaulter<K>: Send + Sync + 'static {
    /// Sets the defaults of `object`; `request` says who asks and what for.
    fn set_defaults(
        &self,
        request: &AdmissionRequest,
        object: &mut K,
    ) -> impl Future<Output = Result<(), Denied>> + Send;
}

/// Checks creates, updates and deletes of `K` (a validating webhook; controller-runtime's
/// `CustomValidator`). Each answers `Ok(warnings)` to allow (the warnings, usually none, are
/// shown to the client) or `Err(Denied)` to refuse.
pub trait Validator<K>: Send + Sync + 'static {
    /// A create of `object`.
    fn validate_create(
        &self,
        request: &AdmissionRequest,
        object: &K,
    ) -> impl Future<Output = Result<Warnings, Denied>> + Send;

    /// An update from `old` to `new`.
    fn validate_update(
        &self,
        request: &AdmissionRequest,
        old: &K,
        new: &K,
    ) -> impl Future<Output = Result<Warnings, Denied>> + Send;

    /// A delete of `old`; allowed unless overridden (and only called when the webhook's
    /// operations include `DELETE`).
    fn validate_delete(
        &self,
        request: &AdmissionRequest,
        old: &K,
    ) -> impl Future<Output = Result<Warnings, Denied>> + Send {
        let _ = (request, old);
        async { Ok(Vec::new()) }
    }
}

/// What the server calls: an admission request in, the response out (uid not yet set).
pub(crate) trait AdmissionHandler: Send + Sync {
    fn handle<'a>(&'a self, request: &'a AdmissionRequest) -> BoxFuture<'a, AdmissionResponse>;
}

/// An allowed response with `code: 200`, as controller-runtime completes every response.
pub(crate) fn allowed(warnings: Warnings) -> AdmissionResponse {
    AdmissionResponse {
        allowed: true,
        status: Some(Status {
            code: Some(200),
            ..Status::default()
        }),
        warnings: (!warnings.is_empty()).then_some(warnings),
        ..AdmissionResponse::default()
    }
}

/// A refusal because the request could not be handled (`code` 400 for a bad object, 500 for
/// a failure of ours), with `message`.
pub(crate) fn errored(code: i32, message: String) -> AdmissionResponse {
    AdmissionResponse {
        allowed: false,
        status: Some(Status {
            code: Some(code),
            message: Some(message),
            ..Status::default()
        }),
        ..AdmissionResponse::default()
    }
}

/// The response refusing with `denied`, for the object of `request`.
fn denied<K: Resource>(request: &AdmissionRequest, denied: &Denied) -> AdmissionResponse {
    let name = request.name.clone().unwrap_or_else(|| {
        request
            .object
            .as_ref()
            .and_then(|o| o.pointer("/metadata/name"))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    });
    AdmissionResponse {
        allowed: false,
        status: Some(denied.to_status(K::GROUP, K::KIND, &name)),
        warnings: (!denied.warnings().is_empty()).then(|| denied.warnings().to_vec()),
        ..AdmissionResponse::default()
    }
}

/// Decodes `raw` as a `K`, or the 400 response saying why not (boxed: a response is large).
fn decode<K: Resource + DeserializeOwned>(
    raw: Option<&Value>,
    which: &str,
) -> Result<K, Box<AdmissionResponse>> {
    let raw = raw.ok_or_else(|| {
        Box::new(errored(
            400,
            format!(
                "the admission request has no {which}; a {} webhook needs it",
                K::KIND
            ),
        ))
    })?;
    K::deserialize(raw).map_err(|e| {
        Box::new(errored(
            400,
            format!(
                "decoding the {which} as {} {}: {e}",
                K::API_VERSION,
                K::KIND
            ),
        ))
    })
}

/// A [`Defaulter`] of `K` as an [`AdmissionHandler`].
pub(crate) struct DefaultingHandler<K, D> {
    pub(crate) defaulter: D,
    pub(crate) kind: PhantomData<fn() -> K>,
}

impl<K, D> AdmissionHandler for DefaultingHandler<K, D>
where
    K: Resource + Serialize + DeserializeOwned + Send + Sync + 'static,
    D: Defaulter<K>,
{
    fn handle<'a>(&'a self, request: &'a AdmissionRequest) -> BoxFuture<'a, AdmissionResponse> {
        Box::pin(async move {
            let raw = match request.operation {
                Operation::Create | Operation::Update => request.object.as_ref(),
                // Nothing to default on a delete or connect.
                Operation::Delete | Operation::Connect => return allowed(Vec::new()),
            };
            let mut object: K = match decode(raw, "object") {
                Ok(o) => o,
                Err(response) => return *response,
            };
            let encode = |o: &K| {
                serde_json::to_value(o)
                    .map_err(|e| format!("encoding the {} as JSON: {e}", K::KIND))
            };
            let before = match encode(&object) {
                Ok(v) => v,
                Err(message) => return errored(500, message),
            };
            if let Err(d) = self.defaulter.set_defaults(request, &mut object).await {
                return denied::<K>(request, &d);
            }
            let after = match encode(&object) {
                Ok(v) => v,
                Err(message) => return errored(500, message),
            };
            let ops = patch::diff(raw.unwrap_or(&Value::Null), &before, &after);
            let mut response = allowed(Vec::new());
            if !ops.is_empty() {
                match serde_json::to_vec(&ops) {
                    Ok(bytes) => {
                        response.patch =
                            Some(base64::engine::general_purpose::STANDARD.encode(bytes));
                        response.patch_type = Some("JSONPatch".to_owned());
                    }
                    Err(e) => return errored(500, format!("encoding the patch: {e}")),
                }
            }
            response
        })
    }
}

/// A [`Validator`] of `K` as an [`AdmissionHandler`].
pub(crate) struct ValidatingHandler<K, V> {
    pub(crate) validator: V,
    pub(crate) kind: PhantomData<fn() -> K>,
}

impl<K, V> AdmissionHandler for ValidatingHandler<K, V>
where
    K: Resource + DeserializeOwned + Send + Sync + 'static,
    V: Validator<K>,
{
    fn handle<'a>(&'a self, request: &'a AdmissionRequest) -> BoxFuture<'a, AdmissionResponse> {
        Box::pin(async move {
            let verdict = match request.operation {
                Operation::Create => match decode::<K>(request.object.as_ref(), "object") {
                    Ok(o) => self.validator.validate_create(request, &o).await,
                    Err(response) => return *response,
                },
                Operation::Update => {
                    let new = match decode::<K>(request.object.as_ref(), "object") {
                        Ok(o) => o,
                        Err(response) => return *response,
                    };
                    match decode::<K>(request.old_object.as_ref(), "oldObject") {
                        Ok(old) => self.validator.validate_update(request, &old, &new).await,
                        Err(response) => return *response,
                    }
                }
                Operation::Delete => match decode::<K>(request.old_object.as_ref(), "oldObject") {
                    Ok(o) => self.validator.validate_delete(request, &o).await,
                    Err(response) => return *response,
                },
                Operation::Connect => Ok(Vec::new()),
            };
            match verdict {
                Ok(warnings) => allowed(warnings),
                Err(d) => denied::<K>(request, &d),
            }
        })
    }
}

#[cfg(test)]
mod tests;

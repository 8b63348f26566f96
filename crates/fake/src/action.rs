//! Recorded actions and reactors, the analogue of client-go's `testing` package.

use std::fmt;
use std::sync::Arc;

use kctrl_client::{ApiRequest, Error, Operation, Patch, ResourceRef, WatchFrames};
use serde_json::Value;

/// One request the fake received, recorded for assertions (client-go's `Action`).
#[derive(Clone, Debug, PartialEq)]
pub struct Action {
    request: ApiRequest,
}

impl Action {
    pub(crate) fn new(request: ApiRequest) -> Self {
        Self { request }
    }

    /// The full request.
    pub fn request(&self) -> &ApiRequest {
        &self.request
    }

    /// `get`, `list`, `watch`, `create`, `update`, `patch` or `delete`.
    pub fn verb(&self) -> &'static str {
        self.request.verb()
    }

    /// The resource addressed.
    pub fn resource(&self) -> &ResourceRef {
        &self.request.resource
    }

    /// The namespace, if any.
    pub fn namespace(&self) -> Option<&str> {
        self.request.namespace.as_deref()
    }

    /// The subresource (`status`), if any.
    pub fn subresource(&self) -> Option<&str> {
        self.request.subresource.as_deref()
    }

    /// The object name: from the URL, or for a create the body's `metadata.name` (empty when
    /// the server is to generate it).
    pub fn name(&self) -> Option<String> {
        match &self.request.operation {
            Operation::Create { .. } => self.object().and_then(|o| {
                o.pointer("/metadata/name")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
            }),
            _ => self.request.name().map(str::to_owned),
        }
    }

    /// The object sent by a create or update, decoded.
    pub fn object(&self) -> Option<Value> {
        match &self.request.operation {
            Operation::Create { body, .. } | Operation::Update { body, .. } => {
                serde_json::from_slice(body).ok()
            }
            _ => None,
        }
    }

    /// The object sent by a create or update, decoded as `K`.
    pub fn object_as<K: serde::de::DeserializeOwned>(&self) -> Option<K> {
        self.object().and_then(|v| serde_json::from_value(v).ok())
    }

    /// The patch of a patch action.
    pub fn patch(&self) -> Option<&Patch> {
        match &self.request.operation {
            Operation::Patch { patch, .. } => Some(patch),
            _ => None,
        }
    }

    /// Whether the action has this verb and resource (plural name, or `plural/subresource`);
    /// `"*"` matches anything, as client-go's `Matches`.
    pub fn matches(&self, verb: &str, resource: &str) -> bool {
        (verb == "*" || verb == self.verb()) && resource_matches(&self.request, resource)
    }
}

pub(crate) fn resource_matches(req: &ApiRequest, resource: &str) -> bool {
    if resource == "*" || resource == req.resource.plural {
        return true;
    }
    match (&req.subresource, resource.split_once('/')) {
        (Some(sub), Some((plural, s))) => plural == req.resource.plural && s == sub,
        _ => false,
    }
}

/// What a reactor decides for a request.
#[non_exhaustive]
pub enum Reaction {
    /// Not handled: the next reactor, or finally the object tracker, answers.
    Continue,
    /// Answer with this JSON body (for a delete, a `Status` or the object; for a watch, a
    /// single frame `{"type": .., "object": ..}`).
    Respond(Value),
    /// Fail with this error (build API errors with [`crate::errors`]).
    Error(Error),
    /// Answer a watch with these frames instead of the tracker's.
    Watch(WatchFrames),
}

impl fmt::Debug for Reaction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reaction::Continue => f.write_str("Continue"),
            Reaction::Respond(v) => f.debug_tuple("Respond").field(v).finish(),
            Reaction::Error(e) => f.debug_tuple("Error").field(e).finish(),
            Reaction::Watch(_) => f.write_str("Watch(..)"),
        }
    }
}

impl From<Error> for Reaction {
    fn from(e: Error) -> Self {
        Reaction::Error(e)
    }
}

pub(crate) type ReactorFn = dyn Fn(&Action) -> Reaction + Send + Sync;

#[derive(Clone)]
pub(crate) struct Reactor {
    pub(crate) verb: String,
    pub(crate) resource: String,
    pub(crate) react: Arc<ReactorFn>,
}

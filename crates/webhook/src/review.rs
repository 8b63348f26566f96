//! The wire types the API server sends to webhooks and expects back: `AdmissionReview`
//! (`admission.k8s.io/v1`) and `ConversionReview` (`apiextensions.k8s.io/v1`), with the
//! `metav1.Status` they carry. k8s-openapi has neither review.
//!
//! The objects inside a review stay [`serde_json::Value`]s: a webhook decodes them into its
//! own type, and the defaulting patch is computed against the JSON exactly as received.

use std::collections::BTreeMap;

use k8s_openapi::api::authentication::v1::UserInfo;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A list that may come as `null`, as Go writes a nil slice.
fn null_as_empty<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<Value>, D::Error> {
    Ok(Option::<Vec<Value>>::deserialize(d)?.unwrap_or_default())
}

/// `admission.k8s.io/v1`, the only version served (`admissionReviewVersions: ["v1"]`).
pub const ADMISSION_API_VERSION: &str = "admission.k8s.io/v1";
/// `apiextensions.k8s.io/v1`, the only version served (`conversionReviewVersions: ["v1"]`).
pub const CONVERSION_API_VERSION: &str = "apiextensions.k8s.io/v1";

/// A group, version and kind, as `AdmissionRequest.kind` names them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupVersionKind {
    /// The API group; empty for the core group.
    #[serde(default)]
    pub group: String,
    /// The version, e.g. `v1`.
    pub version: String,
    /// The kind, e.g. `CronJob`.
    pub kind: String,
}

/// A group, version and resource (plural), as `AdmissionRequest.resource` names them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupVersionResource {
    /// The API group; empty for the core group.
    #[serde(default)]
    pub group: String,
    /// The version, e.g. `v1`.
    pub version: String,
    /// The resource, e.g. `cronjobs`.
    pub resource: String,
}

/// What the request does to the object.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Operation {
    /// A create (also the creation through a server-side apply).
    Create,
    /// An update or patch.
    Update,
    /// A delete.
    Delete,
    /// A connect (exec, attach, port-forward, proxy).
    Connect,
}

impl Operation {
    /// The name the API server uses, `CREATE`, `UPDATE`, `DELETE` or `CONNECT`.
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Create => "CREATE",
            Operation::Update => "UPDATE",
            Operation::Delete => "DELETE",
            Operation::Connect => "CONNECT",
        }
    }
}

/// `admission.k8s.io/v1` `AdmissionReview`: a request from the API server, or the answer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AdmissionReview {
    /// `admission.k8s.io/v1`.
    pub api_version: String,
    /// `AdmissionReview`.
    pub kind: String,
    /// The request (set by the API server).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<AdmissionRequest>,
    /// The answer (set by the webhook).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response: Option<AdmissionResponse>,
}

impl AdmissionReview {
    /// A review carrying `response`, as a webhook answers.
    pub fn answer(response: AdmissionResponse) -> Self {
        AdmissionReview {
            api_version: ADMISSION_API_VERSION.to_owned(),
            kind: "AdmissionReview".to_owned(),
            request: None,
            response: Some(response),
        }
    }
}

/// The request of an [`AdmissionReview`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AdmissionRequest {
    /// Identifies this call; the response must echo it.
    pub uid: String,
    /// The kind of the object as the webhook's rule matched it.
    pub kind: GroupVersionKind,
    /// The resource as the webhook's rule matched it.
    pub resource: GroupVersionResource,
    /// The subresource, e.g. `status`, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sub_resource: Option<String>,
    /// The kind the client asked for (differs from `kind` under `matchPolicy: Equivalent`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_kind: Option<GroupVersionKind>,
    /// The resource the client asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_resource: Option<GroupVersionResource>,
    /// The subresource the client asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_sub_resource: Option<String>,
    /// The object's name; may be empty on create (`generateName`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The object's namespace, for namespaced resources.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// What the request does.
    pub operation: Operation,
    /// Who asked.
    pub user_info: UserInfo,
    /// The object after the request (create, update); `None` on delete.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object: Option<Value>,
    /// The object before the request (update, delete); `None` on create.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub old_object: Option<Value>,
    /// Whether the request is a dry run (a webhook with side effects must not make them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dry_run: Option<bool>,
    /// The options of the operation (`CreateOptions`, `UpdateOptions`, `DeleteOptions`...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub options: Option<Value>,
}

/// The response of an [`AdmissionReview`].
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AdmissionResponse {
    /// The request's uid, echoed.
    pub uid: String,
    /// Whether the request may go on.
    pub allowed: bool,
    /// Why it was refused (code, reason, message, details), or `code: 200` when allowed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<Status>,
    /// A JSON patch (RFC 6902), base64-encoded on the wire as Go's `[]byte` is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub patch: Option<String>,
    /// `JSONPatch` when there is a patch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub patch_type: Option<String>,
    /// Annotations added to the audit event of the request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audit_annotations: Option<BTreeMap<String, String>>,
    /// Warnings returned to the client (`kubectl` prints them as `Warning: ...`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warnings: Option<Vec<String>>,
}

/// `metav1.Status`, as admission and conversion responses carry it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Status {
    /// `Success` or `Failure`; admission denials from controller-runtime leave it empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    /// A human-readable description; what `kubectl` prints after the API server's prefix.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// A machine-readable reason: `Forbidden`, `Invalid`, `BadRequest`...
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// More about the reason: the object and the causes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<StatusDetails>,
    /// The HTTP status code the API server answers the client with (for a denial).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<i32>,
}

/// `metav1.StatusDetails`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusDetails {
    /// The object's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The object's API group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// The object's kind.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// The object's uid.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
    /// Each cause: one per field error.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub causes: Vec<StatusCause>,
    /// When to retry, for some reasons.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after_seconds: Option<i32>,
}

/// `metav1.StatusCause`: one field error.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusCause {
    /// The cause type, e.g. `FieldValueInvalid`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// What is wrong, e.g. `Invalid value: "x": not a cron expression`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The field's path, e.g. `spec.schedule`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
}

/// `apiextensions.k8s.io/v1` `ConversionReview`: a request from the API server, or the answer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConversionReview {
    /// `apiextensions.k8s.io/v1`.
    pub api_version: String,
    /// `ConversionReview`.
    pub kind: String,
    /// The request (set by the API server).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<ConversionRequest>,
    /// The answer (set by the webhook).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response: Option<ConversionResponse>,
}

impl ConversionReview {
    /// A review carrying `response`, as a webhook answers.
    pub fn answer(response: ConversionResponse) -> Self {
        ConversionReview {
            api_version: CONVERSION_API_VERSION.to_owned(),
            kind: "ConversionReview".to_owned(),
            request: None,
            response: Some(response),
        }
    }
}

/// The request of a [`ConversionReview`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConversionRequest {
    /// Identifies this call; the response must echo it.
    pub uid: String,
    /// The version to convert every object to, e.g. `example.com/v2`.
    #[serde(rename = "desiredAPIVersion")]
    pub desired_api_version: String,
    /// The objects to convert, each with its own `apiVersion`.
    #[serde(default, deserialize_with = "null_as_empty")]
    pub objects: Vec<Value>,
}

/// The response of a [`ConversionReview`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConversionResponse {
    /// The request's uid, echoed.
    #[serde(default)]
    pub uid: String,
    /// The converted objects, in the order of the request; empty on failure (the API server
    /// sends `null` in the empty response of its request).
    #[serde(default, deserialize_with = "null_as_empty")]
    pub converted_objects: Vec<Value>,
    /// `status: Success`, or `status: Failure` with a message.
    #[serde(default)]
    pub result: Status,
}

impl ConversionResponse {
    /// Every object converted.
    pub fn success(uid: String, converted_objects: Vec<Value>) -> Self {
        ConversionResponse {
            uid,
            converted_objects,
            result: Status {
                status: Some("Success".to_owned()),
                ..Status::default()
            },
        }
    }

    /// The conversion failed; `message` says why (the API server passes it on to the client).
    pub fn failure(uid: String, message: String) -> Self {
        ConversionResponse {
            uid,
            converted_objects: Vec::new(),
            result: Status {
                status: Some("Failure".to_owned()),
                message: Some(message),
                ..Status::default()
            },
        }
    }
}

#[cfg(test)]
mod tests;

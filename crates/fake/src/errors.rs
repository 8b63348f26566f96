//! Failure `Status` values shaped exactly like kube-apiserver's (apimachinery's `errors.NewX`),
//! for the fake itself and for reactors that inject errors.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Status, StatusCause, StatusDetails};
use kctrl_client::{ApiError, Error, ResourceRef};

fn status(code: u16, reason: &str, message: String, details: Option<StatusDetails>) -> Error {
    Error::from(ApiError::from_status(
        code,
        Status {
            status: Some("Failure".to_owned()),
            code: Some(i32::from(code)),
            reason: Some(reason.to_owned()),
            message: Some(message),
            details,
            ..Default::default()
        },
    ))
}

fn details(group: &str, kind: &str, name: &str) -> Option<StatusDetails> {
    Some(StatusDetails {
        group: (!group.is_empty()).then(|| group.to_owned()),
        kind: (!kind.is_empty()).then(|| kind.to_owned()),
        name: (!name.is_empty()).then(|| name.to_owned()),
        ..Default::default()
    })
}

/// `group_resource.String()`: `deployments.apps`, or `pods` for the core group.
fn qualified(group: &str, resource: &str) -> String {
    if group.is_empty() {
        resource.to_owned()
    } else {
        format!("{resource}.{group}")
    }
}

/// 404 NotFound: `deployments.apps "web" not found`.
pub fn not_found(resource: &ResourceRef, name: &str) -> Error {
    status(
        404,
        "NotFound",
        format!("{} {name:?} not found", resource.qualified_name()),
        details(&resource.group, &resource.plural, name),
    )
}

/// 404 for a path the server does not serve (unknown resource or subresource).
pub fn resource_not_served() -> Error {
    status(
        404,
        "NotFound",
        "the server could not find the requested resource".to_owned(),
        Some(StatusDetails::default()),
    )
}

/// 404 for a resource the server does not serve at all, as kctrl-client reports
/// kube-apiserver's answer for it: `foos.samplecontroller.k8s.io: the server has no such
/// resource - is its CustomResourceDefinition installed? (404 page not found)`.
pub fn no_such_resource(resource: &ResourceRef) -> Error {
    Error::from(ApiError::resource_not_served(
        resource,
        "404 page not found",
    ))
}

/// 409 AlreadyExists: `deployments.apps "web" already exists`.
pub fn already_exists(resource: &ResourceRef, name: &str) -> Error {
    status(
        409,
        "AlreadyExists",
        format!("{} {name:?} already exists", resource.qualified_name()),
        details(&resource.group, &resource.plural, name),
    )
}

/// 409 Conflict: `Operation cannot be fulfilled on deployments.apps "web": <cause>`.
pub fn conflict(resource: &ResourceRef, name: &str, cause: &str) -> Error {
    conflict_on(&resource.group, &resource.plural, name, cause)
}

/// The optimistic-concurrency failure of an update with a stale resourceVersion.
pub fn stale_update_conflict(resource: &ResourceRef, name: &str) -> Error {
    conflict(
        resource,
        name,
        "the object has been modified; please apply your changes to the latest version and try again",
    )
}

pub(crate) fn conflict_on(group: &str, resource: &str, name: &str, cause: &str) -> Error {
    status(
        409,
        "Conflict",
        format!(
            "Operation cannot be fulfilled on {} {name:?}: {cause}",
            qualified(group, resource)
        ),
        details(group, resource, name),
    )
}

/// One field error of a 422 Invalid: field path, error type (`FieldValueInvalid`,
/// `FieldValueRequired`, `FieldValueForbidden`, ...) and the body after the field name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    /// The field path, e.g. `metadata.uid`.
    pub field: String,
    /// The cause type, e.g. `FieldValueInvalid`.
    pub cause_type: String,
    /// The message without the field, e.g. `Invalid value: "x": field is immutable`.
    pub body: String,
}

impl FieldError {
    /// `field.Invalid(path, "value", detail)` for a string value.
    pub fn invalid_string(field: &str, value: &str, detail: &str) -> Self {
        Self {
            field: field.to_owned(),
            cause_type: "FieldValueInvalid".to_owned(),
            body: format!("Invalid value: {value:?}: {detail}"),
        }
    }

    /// `field.Required(path, detail)`.
    pub fn required(field: &str, detail: &str) -> Self {
        Self {
            field: field.to_owned(),
            cause_type: "FieldValueRequired".to_owned(),
            body: if detail.is_empty() {
                "Required value".to_owned()
            } else {
                format!("Required value: {detail}")
            },
        }
    }

    /// `field.Forbidden(path, detail)`.
    pub fn forbidden(field: &str, detail: &str) -> Self {
        Self {
            field: field.to_owned(),
            cause_type: "FieldValueForbidden".to_owned(),
            body: format!("Forbidden: {detail}"),
        }
    }
}

/// 422 Invalid: `Deployment.apps "web" is invalid: metadata.uid: Invalid value: ...`.
/// `group`/`kind` name the kind (not the resource), as `errors.NewInvalid` does.
pub fn invalid(group: &str, kind: &str, name: &str, errors: &[FieldError]) -> Error {
    let mut d = details(group, kind, name).unwrap_or_default();
    d.causes = Some(
        errors
            .iter()
            .map(|e| StatusCause {
                field: Some(e.field.clone()),
                message: Some(e.body.clone()),
                reason: Some(e.cause_type.clone()),
            })
            .collect(),
    );
    let all: Vec<String> = errors
        .iter()
        .map(|e| format!("{}: {}", e.field, e.body))
        .collect();
    let agg = match all.len() {
        0 => String::new(),
        1 => format!(": {}", all[0]),
        _ => format!(": [{}]", all.join(", ")),
    };
    status(
        422,
        "Invalid",
        format!("{} {name:?} is invalid{agg}", qualified(group, kind)),
        Some(d),
    )
}

/// 409 Conflict of a server-side apply that would change fields other managers own:
/// `Apply failed with 1 conflict: conflict with "other-manager": .spec.replicas`, each
/// field also a `FieldManagerConflict` cause, as the apiserver reports it.
pub(crate) fn apply_conflict(conflicts: &[crate::apply::Conflict]) -> Error {
    let total: usize = conflicts.iter().map(|(_, paths)| paths.len()).sum();
    let message = match conflicts {
        [(manager, paths)] if paths.len() == 1 => format!(
            "Apply failed with 1 conflict: conflict with {}: {}",
            manager.describe(),
            crate::fields::display(&paths[0])
        ),
        _ => {
            let mut lines = Vec::new();
            for (manager, paths) in conflicts {
                lines.push(format!("conflicts with {}:", manager.describe()));
                lines.extend(
                    paths
                        .iter()
                        .map(|p| format!("- {}", crate::fields::display(p))),
                );
            }
            format!("Apply failed with {total} conflicts: {}", lines.join("\n"))
        }
    };
    let causes = conflicts
        .iter()
        .flat_map(|(manager, paths)| {
            paths.iter().map(move |p| StatusCause {
                reason: Some("FieldManagerConflict".to_owned()),
                message: Some(format!("conflict with {}", manager.describe())),
                field: Some(crate::fields::display(p)),
            })
        })
        .collect();
    status(
        409,
        "Conflict",
        message,
        Some(StatusDetails {
            causes: Some(causes),
            ..Default::default()
        }),
    )
}

/// 400 BadRequest with a message.
pub fn bad_request(message: impl Into<String>) -> Error {
    status(400, "BadRequest", message.into(), None)
}

/// 422 Invalid with only a message, as `errors.NewGenericServerResponse(422, ...)` builds
/// for a JSON patch that cannot be applied.
pub(crate) fn unprocessable(message: String) -> Error {
    status(422, "Invalid", message, Some(StatusDetails::default()))
}

/// 410 Expired (`errors.NewResourceExpired`), as a watch or list from a compacted
/// resourceVersion gets.
pub fn expired(message: impl Into<String>) -> Error {
    status(410, "Expired", message.into(), None)
}

/// 500 InternalError: `Internal error occurred: <cause>`.
pub fn internal_error(cause: &str) -> Error {
    status(
        500,
        "InternalError",
        format!("Internal error occurred: {cause}"),
        Some(StatusDetails {
            causes: Some(vec![StatusCause {
                message: Some(cause.to_owned()),
                ..Default::default()
            }]),
            ..Default::default()
        }),
    )
}

/// 429 TooManyRequests with a retry-after hint, as API Priority and Fairness answers.
pub fn too_many_requests(retry_after_seconds: u32) -> Error {
    status(
        429,
        "TooManyRequests",
        "Too many requests, please try again later.".to_owned(),
        Some(StatusDetails {
            retry_after_seconds: i32::try_from(retry_after_seconds).ok(),
            ..Default::default()
        }),
    )
}

/// 415 UnsupportedMediaType, as a strategic merge patch of a custom resource gets.
pub(crate) fn unsupported_patch_type() -> Error {
    status(
        415,
        "UnsupportedMediaType",
        "the body of the request was in an unknown format - accepted media types include: \
         application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"
            .to_owned(),
        None,
    )
}

/// The `Status` object of a watch ERROR event or a failed call, as JSON.
pub(crate) fn status_json(err: &Error) -> serde_json::Value {
    let mut v = match err.status() {
        Some(s) => serde_json::to_value(s).unwrap_or_default(),
        None => serde_json::json!({"status": "Failure", "message": err.to_string()}),
    };
    v["kind"] = "Status".into();
    v["apiVersion"] = "v1".into();
    if v.get("metadata").is_none() {
        v["metadata"] = serde_json::json!({});
    }
    v
}

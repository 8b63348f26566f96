//! How a webhook refuses a request, and the `metav1.Status` each refusal becomes.
//!
//! Two shapes, as controller-runtime answers them:
//!
//! * [`Denied::forbidden`]: `403 Forbidden` with the handler's message;
//! * [`Denied::invalid`]: `422 Invalid` with one `details.causes` entry per [`FieldError`],
//!   the message apimachinery's `NewInvalid` writes (`CronJob.batch.tutorial.kubebuilder.io
//!   "nightly" is invalid: spec.schedule: Invalid value: "x": ...`).
//!
//! The API server prefixes the message with `admission webhook "<name>" denied the request: `
//! and answers the client with the status's code, so `kubectl` prints the handler's words.

use std::fmt;

use serde_json::Value;

use crate::review::{Status, StatusCause, StatusDetails};

/// The kind of a [`FieldError`], as apimachinery's `field.ErrorType` names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FieldErrorType {
    /// A value that is not allowed (`Invalid value`).
    Invalid,
    /// A value that is missing (`Required value`).
    Required,
    /// A field that must not be set here (`Forbidden`).
    Forbidden,
    /// A value outside a fixed set (`Unsupported value`).
    NotSupported,
    /// A value given twice where it must be unique (`Duplicate value`).
    Duplicate,
    /// A value that is too long (`Too long`).
    TooLong,
    /// A value that refers to something that does not exist (`Not found`).
    NotFound,
}

impl FieldErrorType {
    /// The cause type of `details.causes[].reason`, e.g. `FieldValueInvalid`.
    pub fn cause_type(self) -> &'static str {
        match self {
            FieldErrorType::Invalid => "FieldValueInvalid",
            FieldErrorType::Required => "FieldValueRequired",
            FieldErrorType::Forbidden => "FieldValueForbidden",
            FieldErrorType::NotSupported => "FieldValueNotSupported",
            FieldErrorType::Duplicate => "FieldValueDuplicate",
            FieldErrorType::TooLong => "FieldValueTooLong",
            FieldErrorType::NotFound => "FieldValueNotFound",
        }
    }

    /// The words starting the message, e.g. `Invalid value`.
    pub fn words(self) -> &'static str {
        match self {
            FieldErrorType::Invalid => "Invalid value",
            FieldErrorType::Required => "Required value",
            FieldErrorType::Forbidden => "Forbidden",
            FieldErrorType::NotSupported => "Unsupported value",
            FieldErrorType::Duplicate => "Duplicate value",
            FieldErrorType::TooLong => "Too long",
            FieldErrorType::NotFound => "Not found",
        }
    }

    /// Whether the message shows the offending value (not for these four, as apimachinery).
    fn shows_value(self) -> bool {
        !matches!(
            self,
            FieldErrorType::Required | FieldErrorType::Forbidden | FieldErrorType::TooLong
        )
    }
}

/// One field's error, as apimachinery's `field.Error`.
#[derive(Clone, Debug, PartialEq)]
pub struct FieldError {
    /// What is wrong.
    pub type_: FieldErrorType,
    /// The field's path, e.g. `spec.schedule` or `metadata.name`.
    pub field: String,
    /// The offending value, shown in the message where the type shows one.
    pub value: Option<Value>,
    /// Why, in words (may be empty).
    pub detail: String,
}

impl FieldError {
    /// `field` holds `value`, which is not allowed: `detail` says why.
    pub fn invalid(
        field: impl Into<String>,
        value: impl Into<Value>,
        detail: impl Into<String>,
    ) -> Self {
        FieldError {
            type_: FieldErrorType::Invalid,
            field: field.into(),
            value: Some(value.into()),
            detail: detail.into(),
        }
    }

    /// `field` is missing.
    pub fn required(field: impl Into<String>, detail: impl Into<String>) -> Self {
        FieldError {
            type_: FieldErrorType::Required,
            field: field.into(),
            value: None,
            detail: detail.into(),
        }
    }

    /// `field` must not be set (or changed) here.
    pub fn forbidden(field: impl Into<String>, detail: impl Into<String>) -> Self {
        FieldError {
            type_: FieldErrorType::Forbidden,
            field: field.into(),
            value: None,
            detail: detail.into(),
        }
    }

    /// `field` holds `value`, which is not one of `supported`.
    pub fn not_supported(
        field: impl Into<String>,
        value: impl Into<Value>,
        supported: &[&str],
    ) -> Self {
        FieldError {
            type_: FieldErrorType::NotSupported,
            field: field.into(),
            value: Some(value.into()),
            detail: format!(
                "supported values: {}",
                supported
                    .iter()
                    .map(|s| format!("{s:?}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
    }

    /// `field` is longer than `max` characters.
    pub fn too_long(field: impl Into<String>, max: usize) -> Self {
        FieldError {
            type_: FieldErrorType::TooLong,
            field: field.into(),
            value: None,
            detail: format!(
                "may not be more than {max} {}",
                if max == 1 { "byte" } else { "bytes" }
            ),
        }
    }

    /// The message without the field, e.g. `Invalid value: "x": not a cron expression`
    /// (`details.causes[].message`).
    pub fn body(&self) -> String {
        let mut s = self.type_.words().to_owned();
        if self.type_.shows_value()
            && let Some(v) = &self.value
        {
            s.push_str(": ");
            match v {
                // Quoted, as Go's %q.
                Value::String(text) => s.push_str(&format!("{text:?}")),
                other => s.push_str(&other.to_string()),
            }
        }
        if !self.detail.is_empty() {
            s.push_str(": ");
            s.push_str(&self.detail);
        }
        s
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.body())
    }
}

#[derive(Clone, Debug, PartialEq)]
enum Shape {
    Forbidden(String),
    Invalid(Vec<FieldError>),
    Status(Box<Status>),
}

/// A refusal: the request does not go on. See the [module docs](self) for the shapes.
#[derive(Clone, Debug, PartialEq)]
pub struct Denied {
    shape: Shape,
    warnings: Vec<String>,
}

impl Denied {
    /// `403 Forbidden` with `message`.
    pub fn forbidden(message: impl Into<String>) -> Self {
        Denied {
            shape: Shape::Forbidden(message.into()),
            warnings: Vec::new(),
        }
    }

    /// `422 Invalid` listing `errors`, each as a cause (the object's kind and name are taken
    /// from the request).
    pub fn invalid(errors: Vec<FieldError>) -> Self {
        Denied {
            shape: Shape::Invalid(errors),
            warnings: Vec::new(),
        }
    }

    /// The given status as it is (its code should be 400 or more; the API server makes it
    /// 400 otherwise).
    pub fn status(status: Status) -> Self {
        Denied {
            shape: Shape::Status(Box::new(status)),
            warnings: Vec::new(),
        }
    }

    /// Warnings to return with the refusal.
    pub fn with_warnings(mut self, warnings: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.warnings.extend(warnings.into_iter().map(Into::into));
        self
    }

    /// The warnings.
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// The status of the response, for an object of `group`/`kind` named `name`.
    pub fn to_status(&self, group: &str, kind: &str, name: &str) -> Status {
        match &self.shape {
            Shape::Forbidden(message) => Status {
                code: Some(403),
                reason: Some("Forbidden".to_owned()),
                message: (!message.is_empty()).then(|| message.clone()),
                ..Status::default()
            },
            Shape::Invalid(errors) => {
                let qualified = if group.is_empty() {
                    kind.to_owned()
                } else {
                    format!("{kind}.{group}")
                };
                let message = match errors.as_slice() {
                    [] => format!("{qualified} {name:?} is invalid"),
                    [one] => format!("{qualified} {name:?} is invalid: {one}"),
                    many => format!(
                        "{qualified} {name:?} is invalid: [{}]",
                        many.iter()
                            .map(ToString::to_string)
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                };
                Status {
                    status: Some("Failure".to_owned()),
                    code: Some(422),
                    reason: Some("Invalid".to_owned()),
                    message: Some(message),
                    details: Some(StatusDetails {
                        name: Some(name.to_owned()),
                        group: Some(group.to_owned()),
                        kind: Some(kind.to_owned()),
                        causes: errors
                            .iter()
                            .map(|e| StatusCause {
                                reason: Some(e.type_.cause_type().to_owned()),
                                message: Some(e.body()),
                                field: Some(e.field.clone()),
                            })
                            .collect(),
                        ..StatusDetails::default()
                    }),
                }
            }
            Shape::Status(status) => (**status).clone(),
        }
    }
}

impl fmt::Display for Denied {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.shape {
            Shape::Forbidden(m) => f.write_str(m),
            Shape::Invalid(errors) => {
                let text: Vec<String> = errors.iter().map(ToString::to_string).collect();
                f.write_str(&text.join(", "))
            }
            Shape::Status(s) => f.write_str(s.message.as_deref().unwrap_or("denied")),
        }
    }
}

impl std::error::Error for Denied {}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn forbidden_is_403_with_the_message() {
        let s = Denied::forbidden("no").to_status("g.io", "K", "n");
        assert_eq!(
            serde_json::to_value(&s).unwrap(),
            json!({"code": 403, "reason": "Forbidden", "message": "no"})
        );
    }

    #[test]
    fn invalid_is_422_with_causes_and_apimachinerys_message() {
        let one = Denied::invalid(vec![FieldError::invalid(
            "spec.schedule",
            "x y",
            "not a cron expression",
        )]);
        let s = one.to_status("batch.tutorial.kubebuilder.io", "CronJob", "nightly");
        assert_eq!(
            serde_json::to_value(&s).unwrap(),
            json!({
                "status": "Failure", "code": 422, "reason": "Invalid",
                "message": "CronJob.batch.tutorial.kubebuilder.io \"nightly\" is invalid: spec.schedule: Invalid value: \"x y\": not a cron expression",
                "details": {"name": "nightly", "group": "batch.tutorial.kubebuilder.io", "kind": "CronJob",
                    "causes": [{"reason": "FieldValueInvalid", "message": "Invalid value: \"x y\": not a cron expression", "field": "spec.schedule"}]},
            })
        );
        let two = Denied::invalid(vec![
            FieldError::too_long("metadata.name", 52),
            FieldError::required("spec.schedule", ""),
            FieldError::invalid("spec.n", 3, "must be even"),
        ]);
        let s = two.to_status("", "Pod", "p");
        assert_eq!(
            s.message.as_deref(),
            Some(
                "Pod \"p\" is invalid: [metadata.name: Too long: may not be more than 52 bytes, spec.schedule: Required value, spec.n: Invalid value: 3: must be even]"
            )
        );
        assert_eq!(s.details.unwrap().causes.len(), 3);
    }

    #[test]
    fn not_supported_lists_the_values() {
        let e = FieldError::not_supported(
            "spec.concurrencyPolicy",
            "Sometimes",
            &["Allow", "Forbid", "Replace"],
        );
        assert_eq!(
            e.to_string(),
            "spec.concurrencyPolicy: Unsupported value: \"Sometimes\": supported values: \"Allow\", \"Forbid\", \"Replace\""
        );
    }
}

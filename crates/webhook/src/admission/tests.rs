use base64::Engine as _;
use kctrl_client::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::*;
use crate::denial::FieldError;
use crate::webhook::Webhook;

#[derive(CustomResource, Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[resource(group = "example.com", version = "v1", kind = "Thing", namespaced)]
#[serde(rename_all = "camelCase")]
struct ThingSpec {
    size: Option<i32>,
    mode: Option<String>,
}

struct Defaults;

impl Defaulter<Thing> for Defaults {
    async fn set_defaults(&self, _: &AdmissionRequest, t: &mut Thing) -> Result<(), Denied> {
        if t.spec.mode.as_deref() == Some("refuse") {
            return Err(Denied::forbidden("mode refuse is refused"));
        }
        t.spec.size.get_or_insert(3);
        t.metadata
            .labels
            .get_or_insert_with(Default::default)
            .insert("example.com/defaulted".into(), "true".into());
        Ok(())
    }
}

struct Rules;

impl Validator<Thing> for Rules {
    async fn validate_create(&self, _: &AdmissionRequest, t: &Thing) -> Result<Warnings, Denied> {
        match t.spec.size {
            Some(n) if n < 0 => Err(Denied::invalid(vec![FieldError::invalid(
                "spec.size",
                n,
                "must not be negative",
            )])),
            Some(n) if n > 100 => Ok(vec![format!("size {n} is large")]),
            _ => Ok(Vec::new()),
        }
    }

    async fn validate_update(
        &self,
        _: &AdmissionRequest,
        old: &Thing,
        new: &Thing,
    ) -> Result<Warnings, Denied> {
        if old.spec.mode != new.spec.mode {
            return Err(Denied::forbidden("spec.mode is immutable").with_warnings(["ask an admin"]));
        }
        Ok(Vec::new())
    }
}

fn request(
    operation: &str,
    object: Option<serde_json::Value>,
    old: Option<serde_json::Value>,
) -> AdmissionRequest {
    let mut r = json!({
        "uid": "0c9fd2b4-3b68-4b0e-9d51-6f0a4c1d2e3f",
        "kind": {"group": "example.com", "version": "v1", "kind": "Thing"},
        "resource": {"group": "example.com", "version": "v1", "resource": "things"},
        "name": "t1", "namespace": "default", "operation": operation,
        "userInfo": {"username": "admin"},
    });
    if let Some(o) = object {
        r["object"] = o;
    }
    if let Some(o) = old {
        r["oldObject"] = o;
    }
    serde_json::from_value(r).unwrap()
}

fn decoded_patch(response: &AdmissionResponse) -> serde_json::Value {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(response.patch.as_deref().expect("a patch"))
        .unwrap();
    serde_json::from_slice(&bytes).unwrap()
}

#[tokio::test]
async fn defaulting_patches_only_what_changed_and_keeps_unknown_fields() {
    let hook = Webhook::defaulting::<Thing, _>(Defaults);
    let raw = json!({
        "apiVersion": "example.com/v1", "kind": "Thing",
        "metadata": {"name": "t1", "namespace": "default"},
        "spec": {"mode": "fast", "addedInV2": {"x": 1}},
    });
    let response = hook
        .handler
        .handle(&request("CREATE", Some(raw), None))
        .await;
    assert!(response.allowed);
    assert_eq!(response.patch_type.as_deref(), Some("JSONPatch"));
    assert_eq!(response.status.as_ref().and_then(|s| s.code), Some(200));
    assert_eq!(
        decoded_patch(&response),
        json!([
            {"op": "add", "path": "/metadata/labels", "value": {"example.com/defaulted": "true"}},
            {"op": "add", "path": "/spec/size", "value": 3},
        ])
    );
}

#[tokio::test]
async fn defaulting_without_a_change_has_no_patch_and_may_deny() {
    let hook = Webhook::defaulting::<Thing, _>(Defaults);
    let raw = json!({
        "apiVersion": "example.com/v1", "kind": "Thing",
        "metadata": {"name": "t1", "labels": {"example.com/defaulted": "true"}},
        "spec": {"size": 5},
    });
    let response = hook
        .handler
        .handle(&request("UPDATE", Some(raw.clone()), Some(raw)))
        .await;
    assert!(response.allowed);
    assert!(response.patch.is_none() && response.patch_type.is_none());

    let raw = json!({"apiVersion": "example.com/v1", "kind": "Thing", "metadata": {"name": "t1"}, "spec": {"mode": "refuse"}});
    let response = hook
        .handler
        .handle(&request("CREATE", Some(raw), None))
        .await;
    assert!(!response.allowed);
    assert_eq!(
        serde_json::to_value(response.status).unwrap(),
        json!({"code": 403, "reason": "Forbidden", "message": "mode refuse is refused"})
    );
}

#[tokio::test]
async fn objects_that_do_not_decode_are_refused_with_400() {
    let hook = Webhook::defaulting::<Thing, _>(Defaults);
    let raw = json!({"apiVersion": "example.com/v1", "kind": "Thing", "metadata": {"name": "t1"}, "spec": {"size": "three"}});
    let response = hook
        .handler
        .handle(&request("CREATE", Some(raw), None))
        .await;
    assert!(!response.allowed);
    let status = response.status.unwrap();
    assert_eq!(status.code, Some(400));
    assert!(
        status
            .message
            .unwrap()
            .starts_with("decoding the object as example.com/v1 Thing: ")
    );

    let validate = Webhook::validating::<Thing, _>(Rules);
    let response = validate
        .handler
        .handle(&request("UPDATE", Some(json!({"spec": {}})), None))
        .await;
    assert_eq!(
        response.status.unwrap().message.as_deref(),
        Some("the admission request has no oldObject; a Thing webhook needs it")
    );
}

#[tokio::test]
async fn validation_allows_warns_and_denies_in_both_shapes() {
    let hook = Webhook::validating::<Thing, _>(Rules);
    let thing = |size: i32, mode: &str| json!({"apiVersion": "example.com/v1", "kind": "Thing", "metadata": {"name": "t1"}, "spec": {"size": size, "mode": mode}});

    let ok = hook
        .handler
        .handle(&request("CREATE", Some(thing(1, "a")), None))
        .await;
    assert!(ok.allowed && ok.warnings.is_none() && ok.patch.is_none());

    let warned = hook
        .handler
        .handle(&request("CREATE", Some(thing(101, "a")), None))
        .await;
    assert!(warned.allowed);
    assert_eq!(warned.warnings, Some(vec!["size 101 is large".to_owned()]));

    let invalid = hook
        .handler
        .handle(&request("CREATE", Some(thing(-1, "a")), None))
        .await;
    assert!(!invalid.allowed);
    assert_eq!(
        serde_json::to_value(invalid.status).unwrap(),
        json!({
            "status": "Failure", "code": 422, "reason": "Invalid",
            "message": "Thing.example.com \"t1\" is invalid: spec.size: Invalid value: -1: must not be negative",
            "details": {"name": "t1", "group": "example.com", "kind": "Thing",
                "causes": [{"reason": "FieldValueInvalid", "message": "Invalid value: -1: must not be negative", "field": "spec.size"}]},
        })
    );

    let forbidden = hook
        .handler
        .handle(&request("UPDATE", Some(thing(1, "b")), Some(thing(1, "a"))))
        .await;
    assert!(!forbidden.allowed);
    assert_eq!(forbidden.status.unwrap().code, Some(403));
    assert_eq!(forbidden.warnings, Some(vec!["ask an admin".to_owned()]));

    // Deletes are allowed by default.
    let deleted = hook
        .handler
        .handle(&request("DELETE", None, Some(thing(1, "a"))))
        .await;
    assert!(deleted.allowed);
}

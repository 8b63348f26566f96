//! The types against bodies kube-apiserver v1.37.2 sent to the webhooks of
//! `tests/e2e/webhook.rs` (captured from that run, in `testdata/`).

use serde_json::{Value, json};

use super::*;

const CREATE: &str = include_str!("testdata/admission-create.json");
const UPDATE: &str = include_str!("testdata/admission-update.json");
const TO_V2: &str = include_str!("testdata/conversion-to-v2.json");
const TO_V1: &str = include_str!("testdata/conversion-to-v1.json");

/// `v` without `null` members, which the types leave out when they write.
fn without_nulls(v: Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.into_iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k, without_nulls(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.into_iter().map(without_nulls).collect()),
        other => other,
    }
}

#[test]
fn admission_requests_decode_and_encode_back_unchanged() {
    for body in [CREATE, UPDATE] {
        let review: AdmissionReview = serde_json::from_str(body).unwrap();
        assert_eq!(
            (review.api_version.as_str(), review.kind.as_str()),
            (ADMISSION_API_VERSION, "AdmissionReview")
        );
        assert!(review.response.is_none());
        // Every field the API server sent is known: written back, the body is the same.
        assert_eq!(
            serde_json::to_value(&review).unwrap(),
            without_nulls(serde_json::from_str(body).unwrap())
        );
    }
}

#[test]
fn admission_request_fields() {
    let create = serde_json::from_str::<AdmissionReview>(CREATE)
        .unwrap()
        .request
        .unwrap();
    assert_eq!(create.operation, Operation::Create);
    assert_eq!(
        create.kind,
        GroupVersionKind {
            group: "batch.tutorial.kubebuilder.io".into(),
            version: "v1".into(),
            kind: "CronJob".into()
        }
    );
    assert_eq!(create.resource.resource, "cronjobs");
    assert_eq!(create.request_kind.as_ref(), Some(&create.kind));
    assert_eq!(create.name.as_deref(), Some("own-limits"));
    assert_eq!(create.user_info.username.as_deref(), Some("kctrl-admin"));
    assert_eq!(create.dry_run, Some(false));
    assert!(create.old_object.is_none(), "null on create");
    assert_eq!(create.options.as_ref().unwrap()["kind"], "CreateOptions");
    assert_eq!(
        create.object.as_ref().unwrap()["spec"]["schedule"],
        "0 0 * * *"
    );

    let update = serde_json::from_str::<AdmissionReview>(UPDATE)
        .unwrap()
        .request
        .unwrap();
    assert_eq!(update.operation, Operation::Update);
    assert!(update.object.is_some() && update.old_object.is_some());
    assert_eq!(update.options.as_ref().unwrap()["kind"], "UpdateOptions");
}

#[test]
fn conversion_requests_decode_with_the_servers_empty_response() {
    for (body, desired, from) in [
        (TO_V2, "webhook.kctrl.dev/v2", "webhook.kctrl.dev/v1"),
        (TO_V1, "webhook.kctrl.dev/v1", "webhook.kctrl.dev/v2"),
    ] {
        let review: ConversionReview = serde_json::from_str(body).unwrap();
        assert_eq!(
            (review.api_version.as_str(), review.kind.as_str()),
            (CONVERSION_API_VERSION, "ConversionReview")
        );
        let request = review.request.unwrap();
        assert_eq!(request.desired_api_version, desired);
        assert_eq!(request.objects.len(), 1);
        assert_eq!(request.objects[0]["apiVersion"], from);
        // The API server fills `response` with an empty one: `convertedObjects: null`.
        let response = review.response.unwrap();
        assert!(response.converted_objects.is_empty() && response.uid.is_empty());
        let raw: Value = serde_json::from_str(body).unwrap();
        assert_eq!(serde_json::to_value(&request).unwrap(), raw["request"]);
    }
}

#[test]
fn answers_have_the_shape_the_api_server_reads() {
    let answer = AdmissionReview::answer(AdmissionResponse {
        uid: "u".into(),
        allowed: true,
        patch: Some("W10=".into()),
        patch_type: Some("JSONPatch".into()),
        warnings: Some(vec!["w".into()]),
        ..AdmissionResponse::default()
    });
    assert_eq!(
        serde_json::to_value(&answer).unwrap(),
        json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
               "response": {"uid": "u", "allowed": true, "patch": "W10=", "patchType": "JSONPatch", "warnings": ["w"]}})
    );
    let failed = ConversionReview::answer(ConversionResponse::failure("u".into(), "no".into()));
    assert_eq!(
        serde_json::to_value(&failed).unwrap(),
        json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
               "response": {"uid": "u", "convertedObjects": [], "result": {"status": "Failure", "message": "no"}}})
    );
}

//! `watch_event`: [`WatchEvent::from_frame`] on arbitrary frames.
//!
//! Properties:
//! * never panics, decoding into `Pod`, `Deployment` or any JSON value;
//! * for frames that are UTF-8 text (unknown fields are skipped without validating their
//!   UTF-8, so the reference reading applies to text only):
//! * it agrees with a reference reading of the envelope: a frame that is not one JSON object
//!   is refused; one without exactly one `type` and one `object` is refused; `type` must be
//!   one of the five event types; for ADDED, MODIFIED and DELETED the event carries exactly
//!   the JSON of `object`;
//! * a BOOKMARK carries `object.metadata.resourceVersion`; an ERROR carries the Status of
//!   `object` and a non-zero code;
//! * the order of `type` and `object` in the envelope does not change the result.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Status;
use kctrl_client::WatchEvent;
use serde_json::Value;
use serde_json::value::RawValue;

use crate::json::{nesting, skipped_unchecked, top_level_fields};

/// The property function.
pub fn check(data: &[u8]) {
    let _ = WatchEvent::<Pod>::from_frame(data);
    let _ = WatchEvent::<Deployment>::from_frame(data);
    let got = WatchEvent::<Value>::from_frame(data);
    if std::str::from_utf8(data).is_err() {
        // serde_json skips unknown fields without validating their UTF-8 (Go's decoder
        // accepts them too, substituting U+FFFD), so the reference reading below, which
        // needs text, does not apply; only the absence of panics is checked.
        return;
    }

    let Some(fields) = top_level_fields(data) else {
        assert!(
            got.is_err(),
            "accepted a frame that is not one JSON object: {got:?}"
        );
        return;
    };
    let types: Vec<&RawValue> = fields.get("type").cloned().unwrap_or_default();
    let objects: Vec<&RawValue> = fields.get("object").cloned().unwrap_or_default();
    let ([type_raw], [object_raw]) = (types.as_slice(), objects.as_slice()) else {
        assert!(
            got.is_err(),
            "accepted {} type and {} object fields: {got:?}",
            types.len(),
            objects.len()
        );
        return;
    };
    let type_name: Option<String> = serde_json::from_str(type_raw.get()).ok();
    let known = ["ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR"];
    let Some(type_name) = type_name.filter(|t| known.contains(&t.as_str())) else {
        assert!(got.is_err(), "accepted type {}: {got:?}", type_raw.get());
        return;
    };
    // serde_json limits nesting to 128 levels counted from the envelope; an object close to
    // that limit decodes or not depending on where it sits, which no server produces.
    let deep = nesting(object_raw.get()) >= 100;
    let object: Result<Value, _> = serde_json::from_str(object_raw.get());
    match (type_name.as_str(), &got) {
        ("ADDED", Ok(WatchEvent::Added(v)))
        | ("MODIFIED", Ok(WatchEvent::Modified(v)))
        | ("DELETED", Ok(WatchEvent::Deleted(v))) => {
            assert_eq!(Some(v), object.as_ref().ok(), "object differs");
        }
        ("ADDED" | "MODIFIED" | "DELETED", Err(e)) => {
            // A refused object must be one serde_json cannot read as a value either (e.g. a
            // number out of range, which the envelope's raw reading lets through).
            assert!(
                deep || object.is_err(),
                "refused a valid {type_name} event: {e}"
            );
        }
        ("BOOKMARK", Ok(WatchEvent::Bookmark(b))) => {
            // A bookmark is read for its resourceVersion only; the rest of the object is
            // skipped unchecked, as Go's decoder skips it. serde_json refuses some of what it
            // skips when asked for a whole value: a UTF-16 surrogate escape without its pair
            // (Go substitutes U+FFFD) or a number beyond f64. The reference has no reading then.
            let object = match object {
                Ok(object) => object,
                Err(e) if skipped_unchecked(&e) => return,
                Err(e) => panic!("accepted a bookmark whose object is not JSON: {e}"),
            };
            let rv = object
                .pointer("/metadata/resourceVersion")
                .and_then(Value::as_str)
                .unwrap_or("");
            assert_eq!(b.resource_version, rv);
        }
        ("ERROR", Ok(WatchEvent::Error(e))) => {
            let status: Status =
                serde_json::from_str(object_raw.get()).expect("a Status was decoded");
            assert_eq!(e.status, status);
            assert_ne!(e.code, 0);
        }
        ("BOOKMARK" | "ERROR", Err(_)) => {}
        (t, got) => panic!("type {t} decoded as {got:?}"),
    }

    if !deep {
        for reordered in [
            format!(
                r#"{{"object":{},"type":{}}}"#,
                object_raw.get(),
                type_raw.get()
            ),
            format!(
                r#"{{"type":{},"object":{}}}"#,
                type_raw.get(),
                object_raw.get()
            ),
        ] {
            let again = WatchEvent::<Value>::from_frame(reordered.as_bytes());
            match (&got, &again) {
                (Ok(a), Ok(b)) => assert_eq!(a, b, "{reordered}"),
                (Err(_), Err(_)) => {}
                _ => panic!("{reordered}: {again:?}, but the original frame gave {got:?}"),
            }
        }
    }
}

//! `object_meta`: metadata decoded into `kctrl_client::CompactObjectMeta`, what a
//! metadata-only informer caches, against k8s-openapi's `ObjectMeta` as the reference.
//!
//! Properties:
//! * never panics;
//! * whatever `ObjectMeta` refuses, the compact form refuses, but for a `fieldsV1` that a
//!   `serde_json::Value` cannot hold (a number beyond f64, a lone surrogate escape), which the
//!   compact form keeps as text, as Go's decoder keeps `FieldsV1.Raw`;
//! * whatever both accept reads back equal: `to_object_meta()` is the reference's value
//!   (with an empty list or map read as absent, as the compact form keeps no difference);
//!   name, namespace, resourceVersion and every label agree through `ObjectMetaAccess`;
//! * the compact form refuses what the reference accepts only for a field given twice in one
//!   object (k8s-openapi keeps the last), and says so.
//!
//! The input is also wrapped as a `PartialObjectMetadata` list item, the way the API server
//! sends it, so the path through `PartialObjectMetadata`'s decoder is fuzzed too.

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kctrl_client::{CompactObjectMeta, ObjectMetaAccess, PartialObjectMetadata};

use crate::json::skipped_unchecked;

/// The property function.
pub fn check(data: &[u8]) {
    let compact = serde_json::from_slice::<CompactObjectMeta>(data);
    let reference = serde_json::from_slice::<ObjectMeta>(data);
    match (&compact, reference) {
        (Ok(c), Ok(r)) => agree(c, &r),
        // ObjectMeta holds fieldsV1 as a `serde_json::Value`, which cannot hold a number
        // beyond f64 or a lone surrogate escape; the compact form keeps the text, as Go keeps
        // `FieldsV1.Raw`, and Go's decoder accepts both.
        (Ok(c), Err(e)) if skipped_unchecked(&e) => assert!(
            c.managed_fields().iter().any(|m| m
                .fields_v1_json()
                .is_some_and(|t| serde_json::from_str::<serde_json::Value>(t).is_err())),
            "accepted what ObjectMeta refuses ({e}), outside fieldsV1: {c:?}"
        ),
        (Ok(c), Err(e)) => panic!("accepted what ObjectMeta refuses ({e}): {c:?}"),
        (Err(e), Ok(_)) => assert!(
            e.to_string().contains("duplicate field"),
            "refused what ObjectMeta accepts: {e}"
        ),
        (Err(_), Err(_)) => {}
    }

    // The same bytes as an object's metadata in a PartialObjectMetadata answer: only for one
    // JSON value, as the wrapper would otherwise absorb what follows it (`{…},"x":1`).
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if serde_json::from_str::<serde::de::IgnoredAny>(text).is_err() {
        return;
    }
    let wrapped = format!(
        r#"{{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":{text}}}"#
    );
    let partial = serde_json::from_str::<PartialObjectMetadata<Pod>>(&wrapped);
    match (partial, &compact) {
        (Ok(p), Ok(c)) => assert_eq!(&p.metadata, c),
        (Err(_), Err(_)) => {}
        // A text with something after its value decodes alone but not wrapped.
        (Err(_), Ok(_)) => {
            assert!(serde_json::from_str::<serde::de::IgnoredAny>(&wrapped).is_err())
        }
        (Ok(p), Err(e)) => panic!("decoded wrapped but not alone ({e}): {:?}", p.metadata),
    }
}

/// Both readings of one input hold the same metadata.
fn agree(compact: &CompactObjectMeta, reference: &ObjectMeta) {
    assert_eq!(compact.to_object_meta(), normalized(reference.clone()));
    assert_eq!(compact.name(), reference.name.as_deref());
    assert_eq!(compact.namespace(), reference.namespace.as_deref());
    assert_eq!(
        compact.resource_version(),
        reference.resource_version.as_deref()
    );
    for (key, value) in reference.labels.iter().flatten() {
        assert_eq!(compact.label(key), Some(value.as_str()), "label {key:?}");
    }
    assert_eq!(
        compact.labels().len(),
        reference.labels.as_ref().map_or(0, |l| l.len())
    );
}

/// `meta` with empty lists and maps as absent, as the compact form reads them back.
fn normalized(mut meta: ObjectMeta) -> ObjectMeta {
    fn none_if_empty<T: Default + PartialEq>(field: &mut Option<T>) {
        if field.as_ref().is_some_and(|v| *v == T::default()) {
            *field = None;
        }
    }
    none_if_empty(&mut meta.labels);
    none_if_empty(&mut meta.annotations);
    none_if_empty(&mut meta.finalizers);
    none_if_empty(&mut meta.owner_references);
    none_if_empty(&mut meta.managed_fields);
    meta
}

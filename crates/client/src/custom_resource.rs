//! The serde halves of what `#[derive(CustomResource)]` generates: a custom resource is written
//! with its `apiVersion` and `kind`, and read back only if they are its own.
//!
//! The generated `Serialize` and `Deserialize` impls call these two functions (through
//! `__private`), so the logic is written and tested once, here.

use std::fmt;
use std::marker::PhantomData;

use k8s_openapi::Resource;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::de::{self, DeserializeOwned, IgnoredAny, MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Writes `apiVersion`, `kind`, `metadata`, `spec` and, when there is one, `status` (a
/// custom resource without them is refused by the API server: "Object 'Kind' is missing").
pub fn serialize<K, S, Spec, Status>(
    serializer: S,
    metadata: &ObjectMeta,
    spec: &Spec,
    status: Option<&Status>,
) -> Result<S::Ok, S::Error>
where
    K: Resource,
    S: Serializer,
    Spec: Serialize,
    Status: Serialize,
{
    let mut map = serializer.serialize_map(Some(4 + usize::from(status.is_some())))?;
    map.serialize_entry("apiVersion", K::API_VERSION)?;
    map.serialize_entry("kind", K::KIND)?;
    map.serialize_entry("metadata", metadata)?;
    map.serialize_entry("spec", spec)?;
    if let Some(status) = status {
        map.serialize_entry("status", status)?;
    }
    map.end()
}

/// Reads `metadata`, `spec` and `status` of a `K`; `apiVersion` and `kind`, when present,
/// must be `K`'s (a list item may leave them out), and other fields are ignored. A `null`
/// status is no status.
pub fn deserialize<'de, K, Spec, Status, D>(
    deserializer: D,
) -> Result<(ObjectMeta, Spec, Option<Status>), D::Error>
where
    K: Resource,
    Spec: DeserializeOwned,
    Status: DeserializeOwned,
    D: Deserializer<'de>,
{
    deserializer.deserialize_map(ObjectVisitor::<K, Spec, Status>(PhantomData))
}

/// The types a visitor decodes, without holding any.
type Types<K, Spec, Status> = PhantomData<fn() -> (K, Spec, Status)>;

struct ObjectVisitor<K, Spec, Status>(Types<K, Spec, Status>);

impl<'de, K, Spec, Status> Visitor<'de> for ObjectVisitor<K, Spec, Status>
where
    K: Resource,
    Spec: DeserializeOwned,
    Status: DeserializeOwned,
{
    type Value = (ObjectMeta, Spec, Option<Status>);

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "a {} object ({})", K::KIND, K::API_VERSION)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut metadata: Option<ObjectMeta> = None;
        let mut spec: Option<Spec> = None;
        let mut status: Option<Option<Status>> = None;
        while let Some(key) = map.next_key::<Key>()? {
            match key {
                Key::ApiVersion => {
                    let found: String = map.next_value()?;
                    if found != K::API_VERSION {
                        return Err(de::Error::custom(format_args!(
                            "expected apiVersion {:?} for {}, found {found:?}",
                            K::API_VERSION,
                            K::KIND
                        )));
                    }
                }
                Key::Kind => {
                    let found: String = map.next_value()?;
                    if found != K::KIND {
                        return Err(de::Error::custom(format_args!(
                            "expected kind {:?} ({}), found {found:?}",
                            K::KIND,
                            K::API_VERSION
                        )));
                    }
                }
                Key::Metadata => {
                    if metadata.is_some() {
                        return Err(de::Error::duplicate_field("metadata"));
                    }
                    metadata = Some(map.next_value()?);
                }
                Key::Spec => {
                    if spec.is_some() {
                        return Err(de::Error::duplicate_field("spec"));
                    }
                    spec = Some(map.next_value()?);
                }
                Key::Status => {
                    if status.is_some() {
                        return Err(de::Error::duplicate_field("status"));
                    }
                    status = Some(map.next_value()?);
                }
                Key::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        let spec = spec
            .ok_or_else(|| de::Error::custom(format_args!("{} object without a spec", K::KIND)))?;
        Ok((metadata.unwrap_or_default(), spec, status.flatten()))
    }
}

/// A top-level key of an object, read without allocating.
enum Key {
    ApiVersion,
    Kind,
    Metadata,
    Spec,
    Status,
    Other,
}

impl<'de> Deserialize<'de> for Key {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Key;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a field name")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Key, E> {
                Ok(match s {
                    "apiVersion" => Key::ApiVersion,
                    "kind" => Key::Kind,
                    "metadata" => Key::Metadata,
                    "spec" => Key::Spec,
                    "status" => Key::Status,
                    _ => Key::Other,
                })
            }
        }
        d.deserialize_identifier(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A resource written by hand the way the derive writes it, to test the two functions
    /// without the macro (the macro's own output is tested in tests/derive.rs).
    #[derive(Debug, PartialEq)]
    struct Widget {
        metadata: ObjectMeta,
        spec: WidgetSpec,
        status: Option<WidgetStatus>,
    }

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct WidgetSpec {
        size: u32,
    }

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct WidgetStatus {
        ready: bool,
    }

    impl Resource for Widget {
        const API_VERSION: &'static str = "example.com/v1";
        const GROUP: &'static str = "example.com";
        const KIND: &'static str = "Widget";
        const VERSION: &'static str = "v1";
        const URL_PATH_SEGMENT: &'static str = "widgets";
        type Scope = k8s_openapi::NamespaceResourceScope;
    }

    impl Serialize for Widget {
        fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            serialize::<Self, _, _, _>(s, &self.metadata, &self.spec, self.status.as_ref())
        }
    }

    impl<'de> Deserialize<'de> for Widget {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            let (metadata, spec, status) = deserialize::<Self, WidgetSpec, WidgetStatus, D>(d)?;
            Ok(Self {
                metadata,
                spec,
                status,
            })
        }
    }

    fn widget(status: Option<WidgetStatus>) -> Widget {
        Widget {
            metadata: ObjectMeta {
                name: Some("w".into()),
                ..Default::default()
            },
            spec: WidgetSpec { size: 3 },
            status,
        }
    }

    #[test]
    fn writes_api_version_and_kind_first() {
        let text = serde_json::to_string(&widget(None)).unwrap();
        assert_eq!(
            text,
            r#"{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"w"},"spec":{"size":3}}"#
        );
        let with_status = serde_json::to_value(widget(Some(WidgetStatus { ready: true }))).unwrap();
        assert_eq!(with_status["status"], json!({"ready": true}));
    }

    #[test]
    fn round_trips() {
        for w in [widget(None), widget(Some(WidgetStatus { ready: false }))] {
            let back: Widget = serde_json::from_value(serde_json::to_value(&w).unwrap()).unwrap();
            assert_eq!(back, w);
        }
    }

    #[test]
    fn wrong_kind_or_api_version_names_expected_and_found() {
        let err = serde_json::from_value::<Widget>(json!({
            "apiVersion": "example.com/v1", "kind": "Gadget", "spec": {"size": 1}
        }))
        .unwrap_err()
        .to_string();
        assert!(
            err.contains(r#"expected kind "Widget" (example.com/v1), found "Gadget""#),
            "{err}"
        );
        let err = serde_json::from_value::<Widget>(json!({
            "apiVersion": "example.com/v2", "kind": "Widget", "spec": {"size": 1}
        }))
        .unwrap_err()
        .to_string();
        assert!(
            err.contains(
                r#"expected apiVersion "example.com/v1" for Widget, found "example.com/v2""#
            ),
            "{err}"
        );
    }

    #[test]
    fn absent_type_fields_unknown_fields_and_null_status_are_accepted() {
        let w: Widget = serde_json::from_value(json!({
            "metadata": {"name": "w"}, "spec": {"size": 3}, "status": null, "extra": [1, 2]
        }))
        .unwrap();
        assert_eq!(w, widget(None));
        // No metadata at all is empty metadata.
        let w: Widget = serde_json::from_value(json!({"spec": {"size": 3}})).unwrap();
        assert_eq!(w.metadata, ObjectMeta::default());
    }

    #[test]
    fn a_spec_is_required_and_fields_come_once() {
        let err = serde_json::from_value::<Widget>(json!({"metadata": {}}))
            .unwrap_err()
            .to_string();
        assert!(err.contains("Widget object without a spec"), "{err}");
        let err = serde_json::from_str::<Widget>(r#"{"spec":{"size":1},"spec":{"size":2}}"#)
            .unwrap_err()
            .to_string();
        assert!(err.contains("duplicate field `spec`"), "{err}");
        assert!(serde_json::from_str::<Widget>(r#"[{"size":1}]"#).is_err());
    }
}

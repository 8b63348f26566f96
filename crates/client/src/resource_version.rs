//! Reading `metadata.resourceVersion` out of an object's JSON without decoding the rest.
//!
//! A caller that writes an object and needs nothing of the answer but its new
//! resourceVersion (the Deployment controller's status updates) would otherwise parse the
//! whole answer: a Deployment's pod template and its `managedFields`, some 25 thousand
//! instructions per answer, to read one string near its start. The reader here walks the
//! top-level members, skipping those before `metadata` (`kind`, `apiVersion`), walks
//! `metadata` up to `resourceVersion`, and stops there. The rest of the answer is not
//! looked at: a success answer of the API server is well-formed, and nothing of it is kept.

use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};

/// The message of the error that ends the walk once the value is found; it never leaves
/// this module.
const FOUND: &str = "kctrl: resourceVersion found";

/// `metadata.resourceVersion` of the JSON object in `body`: `Ok(None)` when the object has
/// no metadata or no resourceVersion, an error when the text up to it is not a JSON object
/// or `resourceVersion` is not a string. Were a member repeated, the first would count (a
/// full decoder keeps the last); the API server never repeats one.
pub(crate) fn read(body: &[u8]) -> Result<Option<String>, serde_json::Error> {
    let mut found = None;
    let mut de = serde_json::Deserializer::from_slice(body);
    let walked = de.deserialize_map(Top { found: &mut found });
    match (walked, found) {
        (_, Some(version)) => Ok(Some(version)),
        (Err(e), None) => Err(e),
        (Ok(()), None) => {
            de.end()?;
            Ok(None)
        }
    }
}

/// The top-level object: only `metadata` is entered.
struct Top<'a> {
    found: &'a mut Option<String>,
}

impl<'de> Visitor<'de> for Top<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key::<Key>()? {
            if key == Key::Metadata {
                map.next_value_seed(Metadata {
                    found: &mut *self.found,
                })?;
                if self.found.is_some() {
                    return Err(de::Error::custom(FOUND));
                }
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(())
    }
}

/// The `metadata` object: read up to `resourceVersion`.
struct Metadata<'a> {
    found: &'a mut Option<String>,
}

impl<'de> DeserializeSeed<'de> for Metadata<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Metadata<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the object's metadata")
    }

    /// `"metadata": null` has no resourceVersion.
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key::<Key>()? {
            if key == Key::ResourceVersion {
                *self.found = Some(map.next_value()?);
                // Ends the walk; `read` sees the value and drops this error.
                return Err(de::Error::custom(FOUND));
            }
            map.next_value::<IgnoredAny>()?;
        }
        Ok(())
    }
}

/// A member name, as far as the walk cares.
#[derive(PartialEq, serde::Deserialize)]
#[serde(field_identifier, rename_all = "camelCase")]
enum Key {
    Metadata,
    ResourceVersion,
    #[serde(other)]
    Other,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_version_is_read_from_metadata() {
        let body = br#"{"kind":"Deployment","apiVersion":"apps/v1","metadata":{"name":"web","namespace":"default","uid":"u","resourceVersion":"4711","generation":3,"managedFields":[{"manager":"m"}]},"spec":{"replicas":2},"status":{}}"#;
        assert_eq!(read(body).unwrap().as_deref(), Some("4711"));
    }

    #[test]
    fn members_may_come_in_any_order_and_nested_names_do_not_count() {
        let body = br#"{"spec":{"metadata":{"resourceVersion":"nested"},"resourceVersion":"top"},"resourceVersion":"not-metadata","metadata":{"labels":{"resourceVersion":"label"},"resourceVersion":"9"}}"#;
        assert_eq!(read(body).unwrap().as_deref(), Some("9"));
    }

    #[test]
    fn escaped_names_and_values_are_read() {
        let body = br#"{"meta\u0064ata":{"resource\u0056ersion":"1\u0032"}}"#;
        assert_eq!(read(body).unwrap().as_deref(), Some("12"));
    }

    #[test]
    fn what_follows_the_version_is_not_read() {
        // The walk stops at the value: a tail the walk never reaches does not matter.
        let body = br#"{"metadata":{"resourceVersion":"5"},"spec": this is not JSON"#;
        assert_eq!(read(body).unwrap().as_deref(), Some("5"));
    }

    #[test]
    fn an_object_without_a_version_is_none() {
        assert_eq!(
            read(br#"{"metadata":{"name":"x"},"spec":{}}"#).unwrap(),
            None
        );
        assert_eq!(read(br#"{"metadata":null}"#).unwrap(), None);
        assert_eq!(read(br#"{}"#).unwrap(), None);
    }

    #[test]
    fn malformed_input_before_the_version_is_an_error() {
        for body in [
            &br#"[1,2]"#[..],
            br#"{"metadata":{"resourceVersion":5}}"#,
            br#"{"metadata":{"name":"x","#,
            br#"{"metadata":{}} trailing"#,
            b"",
        ] {
            let err = read(body).unwrap_err().to_string();
            assert!(!err.contains(FOUND), "{err}");
        }
    }
}

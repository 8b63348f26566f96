//! Decoding objects without `metadata.managedFields`, for any object type.
//!
//! `managedFields` is the API server's server-side-apply bookkeeping: one entry per field
//! manager, each with a JSON tree of the fields it owns. It is often the largest part of an
//! object's metadata, and controllers never read it. kube-controller-manager drops it from
//! every informer cache with a transform, after decoding; [`Api::without_managed_fields`]
//! drops it *while* decoding, so neither the parse into a tree of values nor the memory for
//! it is ever spent.
//!
//! The mechanism is a wrapper around the JSON deserializer that watches the path being
//! decoded: in an object, the value of `metadata` is decoded by a map access that skips the
//! key `managedFields` (with [`IgnoredAny`], which allocates nothing); in a list, the same
//! applies to each element of `items`. Everything else reaches the target type's own
//! `Deserialize` unchanged, so it works for k8s-openapi types and user-defined views alike.
//!
//! Watches go one step further: the HTTP backend's watch framer, which scans every byte of
//! an event anyway to find where it ends, also notes where the event's
//! `object.metadata.managedFields` member lies and hands the decoder the event without it
//! (see `http/framing.rs`). Skipping the member token by token while decoding was the
//! largest single cost of the Deployment controller (8.5% of its instructions; two separate
//! scans to find it first cost as much as they saved). The decoder still skips whatever the
//! framer did not cut.
//!
//! Writing such an object back is safe: an update whose `metadata.managedFields` is absent
//! leaves the server's record as it was (the server treats a missing list as "unchanged",
//! only an explicit empty list resets it).
//!
//! [`Api::without_managed_fields`]: crate::Api::without_managed_fields

use std::fmt;

use serde::de::value::{BorrowedStrDeserializer, StringDeserializer};
use serde::de::{
    self, DeserializeOwned, DeserializeSeed, Deserializer, EnumAccess, IgnoredAny, MapAccess,
    SeqAccess, Visitor,
};

/// Where in a document the wrapper is, which decides what it does with map keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Level {
    /// A list object: each element of its `items` is an [`Level::Object`].
    List,
    /// The `items` array of a list.
    Items,
    /// An object: its `metadata` is a [`Level::Metadata`].
    Object,
    /// An `ObjectMeta`: the `managedFields` entry is skipped.
    Metadata,
}

/// What to do with a map entry at a level.
enum Rule {
    /// Decode the value unchanged.
    Keep,
    /// Decode the value at this level.
    Descend(Level),
    /// Skip the entry.
    Skip,
}

impl Level {
    fn rule(self, key: &str) -> Rule {
        match (self, key) {
            (Level::List, "items") => Rule::Descend(Level::Items),
            (Level::Object, "metadata") => Rule::Descend(Level::Metadata),
            (Level::Metadata, "managedFields") => Rule::Skip,
            _ => Rule::Keep,
        }
    }
}

/// Decodes `T` from JSON, skipping `managedFields` at the positions `level` names.
pub(crate) fn from_slice<T: DeserializeOwned>(
    bytes: &[u8],
    level: Level,
) -> Result<T, serde_json::Error> {
    with_json_deserializer!(bytes, |de| {
        let value = T::deserialize(Trim {
            inner: &mut de,
            level,
        })?;
        de.end()?;
        Ok(value)
    })
}

/// A seed that decodes its target at a level (used for a watch event's object).
pub(crate) struct TrimSeed<S> {
    pub(crate) inner: S,
    pub(crate) level: Level,
}

impl<'de, S: DeserializeSeed<'de>> DeserializeSeed<'de> for TrimSeed<S> {
    type Value = S::Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<S::Value, D::Error> {
        self.inner.deserialize(Trim {
            inner: d,
            level: self.level,
        })
    }
}

/// The deserializer wrapper: every request goes to the inner deserializer, with the visitor
/// wrapped so that maps (and, for `items`, sequences) are seen through [`TrimMap`] /
/// [`TrimSeq`].
struct Trim<D> {
    inner: D,
    level: Level,
}

macro_rules! forward_deserialize {
    ($($method:ident($($arg:ident: $ty:ty),*);)*) => {$(
        fn $method<V: Visitor<'de>>(self, $($arg: $ty,)* visitor: V) -> Result<V::Value, D::Error> {
            self.inner.$method($($arg,)* TrimVisitor { inner: visitor, level: self.level })
        }
    )*};
}

impl<'de, D: Deserializer<'de>> Deserializer<'de> for Trim<D> {
    type Error = D::Error;

    forward_deserialize! {
        deserialize_any();
        deserialize_bool();
        deserialize_i8();
        deserialize_i16();
        deserialize_i32();
        deserialize_i64();
        deserialize_i128();
        deserialize_u8();
        deserialize_u16();
        deserialize_u32();
        deserialize_u64();
        deserialize_u128();
        deserialize_f32();
        deserialize_f64();
        deserialize_char();
        deserialize_str();
        deserialize_string();
        deserialize_bytes();
        deserialize_byte_buf();
        deserialize_option();
        deserialize_unit();
        deserialize_unit_struct(name: &'static str);
        deserialize_newtype_struct(name: &'static str);
        deserialize_seq();
        deserialize_tuple(len: usize);
        deserialize_tuple_struct(name: &'static str, len: usize);
        deserialize_map();
        deserialize_struct(name: &'static str, fields: &'static [&'static str]);
        deserialize_enum(name: &'static str, variants: &'static [&'static str]);
        deserialize_identifier();
        deserialize_ignored_any();
    }

    fn is_human_readable(&self) -> bool {
        self.inner.is_human_readable()
    }
}

/// The visitor wrapper: forwards everything, wrapping the map or sequence access.
struct TrimVisitor<V> {
    inner: V,
    level: Level,
}

macro_rules! forward_visit {
    ($($method:ident($ty:ty);)*) => {$(
        fn $method<E: de::Error>(self, v: $ty) -> Result<V::Value, E> {
            self.inner.$method(v)
        }
    )*};
}

impl<'de, V: Visitor<'de>> Visitor<'de> for TrimVisitor<V> {
    type Value = V::Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner.expecting(f)
    }

    forward_visit! {
        visit_bool(bool);
        visit_i8(i8);
        visit_i16(i16);
        visit_i32(i32);
        visit_i64(i64);
        visit_i128(i128);
        visit_u8(u8);
        visit_u16(u16);
        visit_u32(u32);
        visit_u64(u64);
        visit_u128(u128);
        visit_f32(f32);
        visit_f64(f64);
        visit_char(char);
        visit_str(&str);
        visit_borrowed_str(&'de str);
        visit_string(String);
        visit_bytes(&[u8]);
        visit_borrowed_bytes(&'de [u8]);
        visit_byte_buf(Vec<u8>);
    }

    fn visit_none<E: de::Error>(self) -> Result<V::Value, E> {
        self.inner.visit_none()
    }

    fn visit_unit<E: de::Error>(self) -> Result<V::Value, E> {
        self.inner.visit_unit()
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<V::Value, D::Error> {
        self.inner.visit_some(Trim {
            inner: d,
            level: self.level,
        })
    }

    fn visit_newtype_struct<D: Deserializer<'de>>(self, d: D) -> Result<V::Value, D::Error> {
        self.inner.visit_newtype_struct(Trim {
            inner: d,
            level: self.level,
        })
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<V::Value, A::Error> {
        if self.level == Level::Items {
            self.inner.visit_seq(TrimSeq { inner: seq })
        } else {
            self.inner.visit_seq(seq)
        }
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<V::Value, A::Error> {
        if self.level == Level::Items {
            return self.inner.visit_map(map);
        }
        self.inner.visit_map(TrimMap {
            inner: map,
            level: self.level,
            next: None,
        })
    }

    fn visit_enum<A: EnumAccess<'de>>(self, data: A) -> Result<V::Value, A::Error> {
        self.inner.visit_enum(data)
    }
}

/// A list's `items`: every element is an object.
struct TrimSeq<A> {
    inner: A,
}

impl<'de, A: SeqAccess<'de>> SeqAccess<'de> for TrimSeq<A> {
    type Error = A::Error;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, A::Error> {
        self.inner.next_element_seed(TrimSeed {
            inner: seed,
            level: Level::Object,
        })
    }

    fn size_hint(&self) -> Option<usize> {
        self.inner.size_hint()
    }
}

/// A map whose keys are read here first, to skip or descend by the level's rule; the key is
/// then handed to the target's key decoder as a string.
struct TrimMap<A> {
    inner: A,
    level: Level,
    /// The level the value of the key just returned is decoded at, if any.
    next: Option<Level>,
}

impl<'de, A: MapAccess<'de>> MapAccess<'de> for TrimMap<A> {
    type Error = A::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, A::Error> {
        loop {
            let Some(key) = self.inner.next_key::<Key<'de>>()? else {
                return Ok(None);
            };
            match self.level.rule(key.as_str()) {
                Rule::Skip => {
                    self.inner.next_value::<IgnoredAny>()?;
                    continue;
                }
                Rule::Keep => self.next = None,
                Rule::Descend(level) => self.next = Some(level),
            }
            return match key {
                Key::Borrowed(s) => seed.deserialize(BorrowedStrDeserializer::new(s)),
                Key::Owned(s) => seed.deserialize(StringDeserializer::new(s)),
            }
            .map(Some);
        }
    }

    fn next_value_seed<T: DeserializeSeed<'de>>(&mut self, seed: T) -> Result<T::Value, A::Error> {
        match self.next.take() {
            Some(level) => self.inner.next_value_seed(TrimSeed { inner: seed, level }),
            None => self.inner.next_value_seed(seed),
        }
    }

    fn size_hint(&self) -> Option<usize> {
        self.inner.size_hint()
    }
}

/// A map key, borrowed from the input when it holds no escapes.
enum Key<'de> {
    Borrowed(&'de str),
    Owned(String),
}

impl Key<'_> {
    fn as_str(&self) -> &str {
        match self {
            Key::Borrowed(s) => s,
            Key::Owned(s) => s,
        }
    }
}

impl<'de> de::Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a field name")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Key<'de>, E> {
                Ok(Key::Borrowed(v))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Key<'de>, E> {
                Ok(Key::Owned(v.to_owned()))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Key<'de>, E> {
                Ok(Key::Owned(v))
            }
        }
        d.deserialize_str(KeyVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::List;
    use k8s_openapi::api::apps::v1::ReplicaSet;
    use k8s_openapi::api::core::v1::Pod;
    use serde::Deserialize;

    /// A ReplicaSet as the API server writes it: managedFields first, every kind of field.
    const RS: &str = r#"{"apiVersion":"apps/v1","kind":"ReplicaSet","metadata":{
        "managedFields":[{"manager":"kube-controller-manager","operation":"Update","apiVersion":"apps/v1",
          "time":"2026-01-01T00:00:00Z","fieldsType":"FieldsV1",
          "fieldsV1":{"f:metadata":{"f:labels":{".":{},"f:app":{}}},"f:spec":{"f:replicas":{}}}}],
        "name":"web-5d4f","namespace":"prod","uid":"u-1","resourceVersion":"42","generation":3,
        "labels":{"app":"web","pod-template-hash":"5d4f"},
        "annotations":{"deployment.kubernetes.io/revision":"2","note":"has \"quotes\" and \\ escapes"},
        "ownerReferences":[{"apiVersion":"apps/v1","kind":"Deployment","name":"web","uid":"d-1","controller":true,"blockOwnerDeletion":true}],
        "creationTimestamp":"2026-01-01T00:00:00Z"},
      "spec":{"replicas":3,"minReadySeconds":5,"selector":{"matchLabels":{"app":"web","pod-template-hash":"5d4f"}},
        "template":{"metadata":{"labels":{"app":"web","pod-template-hash":"5d4f"}},
          "spec":{"containers":[{"name":"web","image":"nginx:1.27","ports":[{"containerPort":80}]}]}}},
      "status":{"replicas":3,"readyReplicas":3,"availableReplicas":3,"observedGeneration":3}}"#;

    fn full_without_managed_fields<T: DeserializeOwned>(json: &str) -> T {
        let mut value: serde_json::Value = serde_json::from_str(json).unwrap();
        strip(&mut value);
        serde_json::from_value(value).unwrap()
    }

    /// Removes every `managedFields` key under a `metadata` key (reference implementation).
    fn strip(v: &mut serde_json::Value) {
        match v {
            serde_json::Value::Object(map) => {
                if let Some(serde_json::Value::Object(meta)) = map.get_mut("metadata") {
                    meta.remove("managedFields");
                }
                for (_, child) in map.iter_mut() {
                    strip(child);
                }
            }
            serde_json::Value::Array(items) => items.iter_mut().for_each(strip),
            _ => {}
        }
    }

    #[test]
    fn an_object_is_decoded_exactly_as_the_full_decoder_minus_managed_fields() {
        let full: ReplicaSet = serde_json::from_str(RS).unwrap();
        assert!(
            full.metadata.managed_fields.is_some(),
            "the fixture has them"
        );
        let trimmed: ReplicaSet = from_slice(RS.as_bytes(), Level::Object).unwrap();
        assert_eq!(trimmed.metadata.managed_fields, None);
        assert_eq!(trimmed, full_without_managed_fields::<ReplicaSet>(RS));
        // Escaped keys and values survive (the key takes the owned path).
        let escaped = RS.replace(r#""namespace":"#, r#""namesp\u0061ce":"#);
        let trimmed: ReplicaSet = from_slice(escaped.as_bytes(), Level::Object).unwrap();
        assert_eq!(trimmed.metadata.namespace.as_deref(), Some("prod"));
        assert_eq!(
            trimmed.metadata.annotations.unwrap()["note"],
            r#"has "quotes" and \ escapes"#
        );
    }

    #[test]
    fn only_the_objects_own_metadata_is_trimmed() {
        // A pod template's metadata is not the object's: nothing there is touched, and a
        // `managedFields` key elsewhere (here, an annotation) stays.
        let json = r#"{"metadata":{"name":"p","annotations":{"managedFields":"kept"},
            "managedFields":[{"manager":"m"}]},"spec":{"containers":[]}}"#;
        let pod: Pod = from_slice(json.as_bytes(), Level::Object).unwrap();
        assert_eq!(pod.metadata.managed_fields, None);
        assert_eq!(pod.metadata.annotations.unwrap()["managedFields"], "kept");
    }

    #[test]
    fn a_list_has_every_items_metadata_trimmed() {
        let json = format!(
            r#"{{"apiVersion":"apps/v1","kind":"ReplicaSetList","metadata":{{"resourceVersion":"9"}},"items":[{RS},{RS}]}}"#
        );
        let full: List<ReplicaSet> = serde_json::from_str(&json).unwrap();
        let trimmed: List<ReplicaSet> = from_slice(json.as_bytes(), Level::List).unwrap();
        assert_eq!(trimmed.items.len(), 2);
        assert_eq!(trimmed.metadata, full.metadata);
        for (t, mut f) in trimmed.items.into_iter().zip(full.items) {
            assert!(f.metadata.managed_fields.take().is_some());
            assert_eq!(t, f);
        }
    }

    #[test]
    fn user_views_and_options_work_through_the_wrapper() {
        #[derive(Deserialize, Debug, PartialEq)]
        struct View {
            metadata: Option<Meta>,
            #[serde(default)]
            spec: Option<serde_json::Value>,
        }
        #[derive(Deserialize, Debug, PartialEq)]
        #[serde(rename_all = "camelCase")]
        struct Meta {
            name: String,
            managed_fields: Option<serde_json::Value>,
        }
        let v: View = from_slice(RS.as_bytes(), Level::Object).unwrap();
        let meta = v.metadata.unwrap();
        assert_eq!(meta.name, "web-5d4f");
        assert_eq!(
            meta.managed_fields, None,
            "skipped even when the view asks for it"
        );
        assert!(v.spec.is_some());
    }

    #[test]
    fn errors_and_trailing_bytes_are_reported() {
        let err =
            from_slice::<ReplicaSet>(br#"{"metadata":{"name":5}}"#, Level::Object).unwrap_err();
        assert!(err.to_string().contains("invalid type"), "{err}");
        let err = from_slice::<ReplicaSet>(b"{} x", Level::Object).unwrap_err();
        assert!(err.to_string().contains("trailing"), "{err}");
        // A malformed managedFields is still JSON the skipper must get through correctly.
        let err = from_slice::<ReplicaSet>(br#"{"metadata":{"managedFields":[}}"#, Level::Object)
            .unwrap_err();
        assert!(err.is_syntax(), "{err}");
    }
}

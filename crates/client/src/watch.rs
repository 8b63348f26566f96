//! Typed watch events decoded from the frames a [`Backend`](crate::Backend) yields.

use std::collections::BTreeMap;

use std::fmt;
use std::marker::PhantomData;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Status;
use serde::de::{self, DeserializeOwned, DeserializeSeed, IgnoredAny, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;

use crate::error::{ApiError, Error};
use crate::managed_fields::{Level, TrimSeed};

/// The annotation on the bookmark that ends a streaming list's initial events.
pub const INITIAL_EVENTS_END_ANNOTATION: &str = "k8s.io/initial-events-end";

/// One event of a watch.
#[derive(Clone, Debug, PartialEq)]
#[allow(
    clippy::large_enum_variant,
    reason = "objects are usually larger than ApiError; boxing would add an allocation per event"
)]
pub enum WatchEvent<K> {
    /// An object was created (or, at the start of a watch, already existed).
    Added(K),
    /// An object changed.
    Modified(K),
    /// An object was deleted; this is its last state.
    Deleted(K),
    /// The server's progress marker: no object, only a resourceVersion to resume from.
    Bookmark(Bookmark),
    /// The server ended the watch with an error Status, e.g. 410 Expired after compaction.
    Error(ApiError),
}

/// The content of a BOOKMARK event.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Bookmark {
    /// The resourceVersion a new watch can resume from.
    pub resource_version: String,
    /// Bookmark annotations (see [`INITIAL_EVENTS_END_ANNOTATION`]).
    pub annotations: BTreeMap<String, String>,
}

impl Bookmark {
    /// Whether this bookmark marks the end of a streaming list's initial events.
    pub fn is_initial_events_end(&self) -> bool {
        self.annotations
            .get(INITIAL_EVENTS_END_ANNOTATION)
            .is_some_and(|v| v == "true")
    }
}

#[derive(Deserialize)]
struct BookmarkObject {
    #[serde(deserialize_with = "from_object")]
    metadata: BookmarkMeta,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct BookmarkMeta {
    #[serde(default)]
    resource_version: String,
    #[serde(default)]
    annotations: Option<BTreeMap<String, String>>,
}

/// Reads `T` from a JSON object only. serde's derived structs also accept an array, taking
/// its elements as the fields in declaration order (so `[["12"]]` would read as a bookmark
/// at resourceVersion 12); Go's decoder refuses an array where an object belongs, and so does
/// this.
pub(crate) fn from_object<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
) -> Result<T, D::Error> {
    struct ObjectOnly<T>(PhantomData<T>);
    impl<'de, T: Deserialize<'de>> Visitor<'de> for ObjectOnly<T> {
        type Value = T;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a JSON object")
        }
        fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
            T::deserialize(de::value::MapAccessDeserializer::new(map))
        }
    }
    d.deserialize_map(ObjectOnly(PhantomData))
}

/// The event types a frame can carry.
#[derive(Clone, Copy)]
enum Kind {
    Added,
    Modified,
    Deleted,
    Bookmark,
    Error,
}

impl Kind {
    fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "ADDED" => Kind::Added,
            "MODIFIED" => Kind::Modified,
            "DELETED" => Kind::Deleted,
            "BOOKMARK" => Kind::Bookmark,
            "ERROR" => Kind::Error,
            _ => return None,
        })
    }

    /// What a failure to decode this event's object is reported as.
    fn object_description(self) -> &'static str {
        match self {
            Kind::Added => "object of ADDED watch event",
            Kind::Modified => "object of MODIFIED watch event",
            Kind::Deleted => "object of DELETED watch event",
            Kind::Bookmark => "object of BOOKMARK watch event",
            Kind::Error => "Status of ERROR watch event",
        }
    }
}

/// How far decoding a frame got, so a failure can name the part that was wrong.
enum Progress {
    /// Reading the envelope (`type`, `object`).
    Envelope,
    /// Decoding the object of an event of this type.
    Object(Kind),
    /// The type is not one of the five known ones.
    UnknownType(String),
}

/// Decodes a frame in one pass: the API server writes `type` before `object`, so the object
/// is decoded straight into its final type from the frame's bytes. Should `object` come
/// first, it is kept as a borrowed raw slice and decoded once the type is known.
struct FrameVisitor<'p, K> {
    progress: &'p mut Progress,
    /// Skip the object's `metadata.managedFields` while decoding it.
    trim: bool,
    _object: PhantomData<fn() -> K>,
}

impl<'de, K: DeserializeOwned> Visitor<'de> for FrameVisitor<'_, K> {
    type Value = WatchEvent<K>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a watch event object with \"type\" and \"object\"")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut kind: Option<Kind> = None;
        let mut event: Option<WatchEvent<K>> = None;
        let mut deferred: Option<&'de RawValue> = None;
        while let Some(field) = map.next_key::<Field>()? {
            match field {
                Field::Type => {
                    if kind.is_some() || matches!(self.progress, Progress::UnknownType(_)) {
                        return Err(de::Error::duplicate_field("type"));
                    }
                    let name: String = map.next_value()?;
                    match Kind::parse(&name) {
                        Some(k) => kind = Some(k),
                        None => *self.progress = Progress::UnknownType(name),
                    }
                }
                Field::Object => {
                    if event.is_some() || deferred.is_some() {
                        return Err(de::Error::duplicate_field("object"));
                    }
                    match kind {
                        Some(k) => {
                            *self.progress = Progress::Object(k);
                            event = Some(map.next_value_seed(ObjectSeed::<K>::new(k, self.trim))?);
                            *self.progress = Progress::Envelope;
                        }
                        None => deferred = Some(map.next_value()?),
                    }
                }
                Field::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        if matches!(self.progress, Progress::UnknownType(_)) {
            return Err(de::Error::custom("unknown watch event type"));
        }
        let kind = kind.ok_or_else(|| de::Error::missing_field("type"))?;
        if let Some(event) = event {
            return Ok(event);
        }
        let raw = deferred.ok_or_else(|| de::Error::missing_field("object"))?;
        *self.progress = Progress::Object(kind);
        let mut de = serde_json::Deserializer::from_str(raw.get());
        let event = ObjectSeed::<K>::new(kind, self.trim)
            .deserialize(&mut de)
            .map_err(de::Error::custom)?;
        *self.progress = Progress::Envelope;
        Ok(event)
    }
}

/// The envelope's field names.
#[derive(Deserialize)]
#[serde(field_identifier, rename_all = "lowercase")]
enum Field {
    Type,
    Object,
    #[serde(other)]
    Other,
}

/// Decodes an event's object according to the event's type.
struct ObjectSeed<K> {
    kind: Kind,
    trim: bool,
    _object: PhantomData<fn() -> K>,
}

impl<K> ObjectSeed<K> {
    fn new(kind: Kind, trim: bool) -> Self {
        Self {
            kind,
            trim,
            _object: PhantomData,
        }
    }
}

/// Decodes an event's object: the whole of it, or without `metadata.managedFields`.
struct Body<K> {
    trim: bool,
    _object: PhantomData<fn() -> K>,
}

impl<'de, K: DeserializeOwned> DeserializeSeed<'de> for Body<K> {
    type Value = K;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<K, D::Error> {
        if self.trim {
            TrimSeed {
                inner: PhantomData::<K>,
                level: Level::Object,
            }
            .deserialize(d)
        } else {
            K::deserialize(d)
        }
    }
}

impl<'de, K: DeserializeOwned> DeserializeSeed<'de> for ObjectSeed<K> {
    type Value = WatchEvent<K>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        let body = Body::<K> {
            trim: self.trim,
            _object: PhantomData,
        };
        Ok(match self.kind {
            Kind::Added => WatchEvent::Added(body.deserialize(d)?),
            Kind::Modified => WatchEvent::Modified(body.deserialize(d)?),
            Kind::Deleted => WatchEvent::Deleted(body.deserialize(d)?),
            Kind::Bookmark => {
                let b: BookmarkObject = from_object(d)?;
                WatchEvent::Bookmark(Bookmark {
                    resource_version: b.metadata.resource_version,
                    annotations: b.metadata.annotations.unwrap_or_default(),
                })
            }
            Kind::Error => WatchEvent::Error(ApiError::from_status(500, Status::deserialize(d)?)),
        })
    }
}

impl<K: DeserializeOwned> WatchEvent<K> {
    /// Decodes one frame. An unknown event type is an error naming it, as in client-go.
    ///
    /// The object is decoded directly from the frame's bytes into `K` (no intermediate
    /// value, one pass over the frame).
    pub fn from_frame(frame: &[u8]) -> Result<Self, Error> {
        Self::decode(frame, false)
    }

    /// Decodes one frame; with `trim`, the object's `metadata.managedFields` is skipped
    /// (see [`Api::without_managed_fields`](crate::Api::without_managed_fields)).
    pub(crate) fn decode(frame: &[u8], trim: bool) -> Result<Self, Error> {
        let mut progress = Progress::Envelope;
        let decoded = with_json_deserializer!(frame, |de| de
            .deserialize_map(FrameVisitor::<K> {
                progress: &mut progress,
                trim,
                _object: PhantomData,
            })
            .and_then(|event| de.end().map(|()| event)));
        decoded.map_err(|source| match progress {
            Progress::Envelope => Error::Decode {
                what: "watch event".to_owned(),
                source,
            },
            Progress::Object(kind) => Error::Decode {
                what: kind.object_description().to_owned(),
                source,
            },
            Progress::UnknownType(other) => Error::Decode {
                what: format!("watch event type {other:?}"),
                source: de::Error::custom("expected ADDED, MODIFIED, DELETED, BOOKMARK or ERROR"),
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;

    #[test]
    fn bytes_that_are_not_utf8_decode_as_before() {
        // Text is checked once and decoded as text; other bytes are decoded as bytes, where a
        // skipped field's string is not checked (as Go's decoder accepts it) and a kept one is.
        let event = |extra: &[u8], name: &[u8]| {
            let mut frame = br#"{"type":"ADDED","object":{"metadata":{"name":""#.to_vec();
            frame.extend_from_slice(name);
            frame.extend_from_slice(br#""},"unknownField":""#);
            frame.extend_from_slice(extra);
            frame.extend_from_slice(br#""}}"#);
            frame
        };
        for trim in [false, true] {
            let text = WatchEvent::<Pod>::decode(&event(b"ok", b"a"), trim).unwrap();
            let skipped_bad = WatchEvent::<Pod>::decode(&event(b"\xff\xfe", b"a"), trim).unwrap();
            assert_eq!(text, skipped_bad);
            let WatchEvent::Added(pod) = skipped_bad else {
                panic!("{skipped_bad:?}")
            };
            assert_eq!(pod.metadata.name.as_deref(), Some("a"));
            let err = WatchEvent::<Pod>::decode(&event(b"ok", b"\xff"), trim).unwrap_err();
            assert!(
                err.to_string().contains("invalid unicode code point"),
                "{err}"
            );
        }
    }

    #[test]
    fn decodes_each_event_type() {
        let added: WatchEvent<Pod> = WatchEvent::from_frame(
            br#"{"type":"ADDED","object":{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a","resourceVersion":"5"}}}"#,
        )
        .unwrap();
        match added {
            WatchEvent::Added(p) => assert_eq!(p.metadata.name.as_deref(), Some("a")),
            other => panic!("unexpected {other:?}"),
        }
        let bm: WatchEvent<Pod> = WatchEvent::from_frame(
            br#"{"type":"BOOKMARK","object":{"kind":"Pod","apiVersion":"v1","metadata":{"resourceVersion":"12","annotations":{"k8s.io/initial-events-end":"true"}}}}"#,
        )
        .unwrap();
        match bm {
            WatchEvent::Bookmark(b) => {
                assert_eq!(b.resource_version, "12");
                assert!(b.is_initial_events_end());
            }
            other => panic!("unexpected {other:?}"),
        }
        let gone: WatchEvent<Pod> = WatchEvent::from_frame(
            br#"{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","status":"Failure","message":"too old resource version: 1 (20)","reason":"Expired","code":410}}"#,
        )
        .unwrap();
        match gone {
            WatchEvent::Error(e) => {
                assert_eq!(e.code, 410);
                assert!(e.is_gone());
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    /// Found by fuzzing (fuzz/regressions/watch_event/bookmark-object-is-an-array): serde's
    /// derived structs read an array as their fields in order, so a bookmark whose object
    /// (or metadata) was an array decoded with its first string as the resourceVersion.
    #[test]
    fn a_bookmark_whose_object_or_metadata_is_not_an_object_is_refused() {
        for frame in [
            &br#"{"type":"BOOKMARK","object":[["12"]]}"#[..],
            br#"{"type":"BOOKMARK","object":{"metadata":["12"]}}"#,
            br#"{"type":"BOOKMARK","object":{"metadata":"12"}}"#,
            br#"{"type":"BOOKMARK","object":[]}"#,
        ] {
            let err = WatchEvent::<Pod>::from_frame(frame).unwrap_err();
            assert!(
                err.to_string().contains("BOOKMARK"),
                "{}: {err}",
                String::from_utf8_lossy(frame)
            );
        }
        // Objects in any field order still read.
        let ok = WatchEvent::<Pod>::from_frame(
            br#"{"object":{"metadata":{"annotations":{},"resourceVersion":"9"},"kind":"Pod"},"type":"BOOKMARK"}"#,
        )
        .unwrap();
        assert_eq!(
            ok,
            WatchEvent::Bookmark(Bookmark {
                resource_version: "9".into(),
                annotations: BTreeMap::new(),
            })
        );
    }

    #[test]
    fn unknown_type_is_an_error_naming_it() {
        let err = WatchEvent::<Pod>::from_frame(br#"{"type":"CHANGED","object":{}}"#).unwrap_err();
        assert!(err.to_string().contains("CHANGED"), "{err}");
    }

    #[test]
    fn bad_object_is_a_decode_error() {
        let err = WatchEvent::<Pod>::from_frame(br#"{"type":"ADDED","object":{"metadata":5}}"#)
            .unwrap_err();
        assert!(matches!(err, Error::Decode { .. }));
        assert!(err.to_string().contains("ADDED"));
    }

    #[test]
    fn object_before_type_is_decoded_once_the_type_is_known() {
        let ev: WatchEvent<Pod> = WatchEvent::from_frame(
            br#"{"object":{"metadata":{"name":"b","resourceVersion":"7"}},"type":"MODIFIED"}"#,
        )
        .unwrap();
        match ev {
            WatchEvent::Modified(p) => {
                assert_eq!(p.metadata.name.as_deref(), Some("b"));
                assert_eq!(p.metadata.resource_version.as_deref(), Some("7"));
            }
            other => panic!("unexpected {other:?}"),
        }
        let err = WatchEvent::<Pod>::from_frame(br#"{"object":{"metadata":[]},"type":"DELETED"}"#)
            .unwrap_err();
        assert!(err.to_string().contains("DELETED"), "{err}");
    }

    #[test]
    fn envelope_errors_are_reported_as_such() {
        for frame in [
            &br#"{"object":{}}"#[..],
            br#"{"type":"ADDED"}"#,
            br#"{"type":"ADDED","type":"ADDED","object":{}}"#,
            br#"{"type":"ADDED","object":{}} x"#,
            br#"[1]"#,
        ] {
            let err = WatchEvent::<Pod>::from_frame(frame).unwrap_err();
            match &err {
                Error::Decode { what, .. } => assert_eq!(what, "watch event", "{err}"),
                other => panic!("unexpected {other:?}"),
            }
        }
    }
}

//! Typed watch events decoded from the frames a [`Backend`](crate::Backend) yields.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::value::RawValue;

use crate::error::{ApiError, Error};

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
struct RawFrame<'a> {
    #[serde(rename = "type")]
    kind: &'a str,
    #[serde(borrow)]
    object: &'a RawValue,
}

#[derive(Deserialize)]
struct BookmarkObject {
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

impl<K: DeserializeOwned> WatchEvent<K> {
    /// Decodes one frame. An unknown event type is an error naming it, as in client-go.
    pub fn from_frame(frame: &[u8]) -> Result<Self, Error> {
        let decode_err = |what: &str, source| Error::Decode {
            what: what.to_owned(),
            source,
        };
        let raw: RawFrame<'_> =
            serde_json::from_slice(frame).map_err(|e| decode_err("watch event", e))?;
        let object = |what: &str| -> Result<K, Error> {
            serde_json::from_str(raw.object.get()).map_err(|e| decode_err(what, e))
        };
        Ok(match raw.kind {
            "ADDED" => WatchEvent::Added(object("object of ADDED watch event")?),
            "MODIFIED" => WatchEvent::Modified(object("object of MODIFIED watch event")?),
            "DELETED" => WatchEvent::Deleted(object("object of DELETED watch event")?),
            "BOOKMARK" => {
                let b: BookmarkObject = serde_json::from_str(raw.object.get())
                    .map_err(|e| decode_err("object of BOOKMARK watch event", e))?;
                WatchEvent::Bookmark(Bookmark {
                    resource_version: b.metadata.resource_version,
                    annotations: b.metadata.annotations.unwrap_or_default(),
                })
            }
            "ERROR" => {
                let status = serde_json::from_str(raw.object.get())
                    .map_err(|e| decode_err("Status of ERROR watch event", e))?;
                WatchEvent::Error(ApiError::from_status(500, status))
            }
            other => {
                return Err(Error::Decode {
                    what: format!("watch event type {other:?}"),
                    source: serde::de::Error::custom(
                        "expected ADDED, MODIFIED, DELETED, BOOKMARK or ERROR",
                    ),
                });
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;

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
}

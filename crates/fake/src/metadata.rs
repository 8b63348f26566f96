//! Answers in the `PartialObjectMetadata` form, as the API server gives them to a client that
//! asks for it (see [`Representation`]).

use bytes::Bytes;
use futures::StreamExt;
use kctrl_client::{Representation, WatchFrames};
use serde_json::{Map, Value, json};

const META_API_VERSION: &str = "meta.k8s.io/v1";

/// Converts a response body: an object to `PartialObjectMetadata`, a list to
/// `PartialObjectMetadataList`. A `Status` (e.g. from a delete) is left as it is, as the
/// server does.
pub(crate) fn convert(v: Value, representation: Representation, verb: &str) -> Value {
    if representation == Representation::Full || v.get("kind") == Some(&json!("Status")) {
        return v;
    }
    if verb == "list" {
        let Value::Object(mut list) = v else { return v };
        let items = match list.remove("items") {
            Some(Value::Array(items)) => items.into_iter().map(partial).collect(),
            _ => Vec::new(),
        };
        json!({
            "kind": "PartialObjectMetadataList",
            "apiVersion": META_API_VERSION,
            "metadata": list.remove("metadata").unwrap_or_else(|| json!({})),
            "items": items,
        })
    } else {
        partial(v)
    }
}

/// Converts the object of every ADDED, MODIFIED, DELETED and BOOKMARK frame.
pub(crate) fn convert_frames(frames: WatchFrames, representation: Representation) -> WatchFrames {
    if representation == Representation::Full {
        return frames;
    }
    frames
        .map(|frame| {
            frame.map(|bytes| {
                let Ok(Value::Object(mut event)) = serde_json::from_slice::<Value>(&bytes) else {
                    return bytes;
                };
                if event.get("type") == Some(&json!("ERROR")) {
                    return bytes;
                }
                if let Some(object) = event.remove("object") {
                    event.insert("object".into(), partial(object));
                }
                Bytes::from(serde_json::to_vec(&Value::Object(event)).unwrap_or_default())
            })
        })
        .boxed()
}

fn partial(object: Value) -> Value {
    let metadata = match object {
        Value::Object(mut o) => o.remove("metadata").unwrap_or_else(|| json!({})),
        _ => Value::Object(Map::new()),
    };
    json!({
        "kind": "PartialObjectMetadata",
        "apiVersion": META_API_VERSION,
        "metadata": metadata,
    })
}

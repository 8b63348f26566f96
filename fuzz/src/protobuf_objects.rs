//! `protobuf_objects`: a protobuf message decoded as a whole ReplicaSet and as a whole
//! Deployment by the generated decoders (`kctrl_client::protobuf::objects`), as the
//! controller's informers decode every watch event and list item.
//!
//! The input is the object's message (what the API server wraps in its `k8s\0` envelope).
//!
//! Properties:
//! * never panics, whatever the bytes (truncated fields, wrong wire types, huge lengths,
//!   deep nesting within the input's size, invalid UTF-8, out-of-range times);
//! * an error renders to a message naming the object's type;
//! * a decoded object survives a JSON round trip unchanged: what the decoders build is a
//!   value k8s-openapi's own JSON would build (no zero time, no value JSON cannot carry),
//!   which is what the controller writes back;
//! * decoding is deterministic;
//! * a decoded object written back to protobuf (the generated encoders, which the
//!   controller's writes use) reads back equal.

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use kctrl_client::protobuf::{FromProtobuf, ToProtobuf};

/// The property function.
pub fn check(data: &[u8]) {
    check_as::<ReplicaSet>(data, "ReplicaSet");
    check_as::<Deployment>(data, "Deployment");
}

fn check_as<K>(data: &[u8], kind: &str)
where
    K: FromProtobuf
        + ToProtobuf
        + serde::Serialize
        + serde::de::DeserializeOwned
        + PartialEq
        + std::fmt::Debug,
{
    match K::from_protobuf(data) {
        Ok(object) => {
            let json = serde_json::to_vec(&object).expect("a decoded object serializes");
            let back: K = serde_json::from_slice(&json).expect("its JSON decodes");
            assert_eq!(back, object, "the JSON round trip changed the {kind}");
            let again = K::from_protobuf(data).expect("a second decode succeeds too");
            assert_eq!(again, object, "decoding is not deterministic");
            let written = object
                .to_protobuf()
                .expect("a decoded object has no managedFields to refuse");
            let reread = K::from_protobuf(&written).expect("what was written reads back");
            assert_eq!(reread, object, "the protobuf round trip changed the {kind}");
        }
        Err(err) => {
            let message = err.to_string();
            assert!(message.contains(kind), "{message:?} does not name {kind}");
        }
    }
}

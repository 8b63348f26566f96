//! Kubernetes' protobuf wire format: views that read few fields of built-in resources, and
//! whole Deployments and ReplicaSets.
//!
//! kube-controller-manager talks protobuf (`application/vnd.kubernetes.protobuf`) to the API
//! server for built-in resources. For a *view* ([`resource_view!`](crate::resource_view)) the
//! format matters most: a JSON parser must scan every byte of the fields it skips (a Pod's
//! spec and most of its status), while a protobuf decoder skips a length-delimited field in
//! one step. For whole objects it matters too: decoding a ReplicaSet from protobuf costs a
//! fraction of decoding its JSON (field numbers instead of names, no escapes, no number
//! parsing). An [`Api`](crate::Api) built with [`protobuf`](crate::Api::protobuf) asks for
//! protobuf on reads (get, list, watch) and for the answers of writes, and decodes them with
//! the type's [`FromProtobuf`]; a server that answers JSON instead (custom resources, the
//! in-memory fake) is decoded as before, so the choice never breaks a client.
//!
//! What crosses the wire (apimachinery's protobuf serializer):
//!
//! * an object or a list: the 4 bytes `k8s\0`, then an `Unknown` envelope whose `raw` field
//!   holds the object's message (`Pod`, `PodList`, a `Status` for failures);
//! * a watch (`application/vnd.kubernetes.protobuf;stream=watch`): frames of a 4-byte
//!   big-endian length and a `WatchEvent` message (no envelope), whose object is an enveloped
//!   object as above.
//!
//! Field numbers are those of upstream's `generated.proto` files. A view reads the fields it
//! keeps with a [`MessageReader`] and steps over the rest
//! ([`MessageReader::object_meta`] reads `ObjectMeta` with the generated decoder), or
//! declares the messages it decodes with [prost](https://docs.rs/prost)'s derive, which
//! skips the fields a message does not declare ([`ObjectMetaMessage`] is every field of
//! `ObjectMeta` but `managedFields`, for such views to embed; simpler to write, slower: each
//! string goes through prost's generic merge, and the message converts afterwards). Whole [`Deployment`]s and [`ReplicaSet`]s
//! implement [`FromProtobuf`] through [`objects`], decoders generated from upstream's Go
//! types (`cargo xtask gen-protobuf`) that fill k8s-openapi's types exactly as the same
//! object's JSON does (and, like
//! [`Api::without_managed_fields`](crate::Api::without_managed_fields), leave
//! `managedFields` out). They are generated for every Kubernetes release k8s-openapi
//! supports (1.33 to 1.37) and compile for the one the user selected: fields a release lacks
//! are compiled out (`cfg(k8s_api_ge = "1.N")`, set by the crate's build script) and, in a
//! message from a newer server, skipped as unknown.
//!
//! [`Deployment`]: k8s_openapi::api::apps::v1::Deployment
//! [`ReplicaSet`]: k8s_openapi::api::apps::v1::ReplicaSet
//!
//! ```
//! use k8s_openapi::api::core::v1::Pod;
//! use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
//! use kctrl_client::protobuf::{FromProtobuf, ObjectMetaMessage};
//! use prost::Message;
//!
//! /// A Pod as a controller that follows phases reads it, from JSON or protobuf.
//! #[derive(Clone, Debug, serde::Deserialize)]
//! struct PodPhase {
//!     #[serde(deserialize_with = "kctrl_client::metadata_without_managed_fields")]
//!     metadata: ObjectMeta,
//!     #[serde(default)]
//!     status: Option<PodPhaseStatus>,
//! }
//! #[derive(Clone, Debug, serde::Deserialize)]
//! struct PodPhaseStatus {
//!     phase: Option<String>,
//! }
//! kctrl_client::resource_view!(PodPhase => Pod);
//!
//! // The same fields as upstream's `Pod` and `PodStatus` messages, by number.
//! #[derive(Message)]
//! struct PodMessage {
//!     #[prost(message, optional, tag = "1")]
//!     metadata: Option<ObjectMetaMessage>,
//!     #[prost(message, optional, tag = "3")]
//!     status: Option<PodStatusMessage>,
//! }
//! #[derive(Message)]
//! struct PodStatusMessage {
//!     #[prost(string, optional, tag = "1")]
//!     phase: Option<String>,
//! }
//!
//! impl FromProtobuf for PodPhase {
//!     fn from_protobuf(message: &[u8]) -> Result<Self, kctrl_client::protobuf::ProtobufError> {
//!         let pod = PodMessage::decode(message)?;
//!         Ok(PodPhase {
//!             metadata: pod.metadata.unwrap_or_default().into(),
//!             status: pod.status.map(|s| PodPhaseStatus {
//!                 phase: kctrl_client::protobuf::non_empty(s.phase),
//!             }),
//!         })
//!     }
//! }
//!
//! // Then: Api::<PodPhase>::all(client).protobuf()
//! let bytes = PodMessage {
//!     metadata: Some(ObjectMetaMessage { name: Some("web-1".into()), ..Default::default() }),
//!     status: Some(PodStatusMessage { phase: Some("Running".into()) }),
//! }
//! .encode_to_vec();
//! let pod = PodPhase::from_protobuf(&bytes).unwrap();
//! assert_eq!(pod.metadata.name.as_deref(), Some("web-1"));
//! assert_eq!(pod.status.unwrap().phase.as_deref(), Some("Running"));
//! ```

use std::collections::BTreeMap;

use bytes::Bytes;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    ListMeta, ObjectMeta, OwnerReference, Status, StatusCause, StatusDetails, Time,
};
use k8s_openapi::{List, ListableResource};
use prost::{DecodeError, Message};

use crate::error::ApiError;
use crate::sharding::{ShardInfo, ShardedList};
use crate::watch::{Bookmark, WatchEvent};

pub mod objects;
mod wire;

/// The media type of Kubernetes' protobuf encoding.
pub const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";

/// The bytes every protobuf-encoded object or list starts with.
pub const MAGIC: &[u8; 4] = b"k8s\0";

/// A type that can be decoded from the protobuf message of its resource's objects.
///
/// `message` is the object's own message (a `Pod`, say), without the `k8s\0` prefix and
/// envelope, which the client removes. Implement it with a [`MessageReader`] (fastest) or a
/// prost message that declares only the fields the type reads; see the [module docs](self)
/// for an example.
pub trait FromProtobuf: Sized {
    /// Decodes one object from its message.
    fn from_protobuf(message: &[u8]) -> Result<Self, ProtobufError>;
}

/// A type that can be written as the protobuf message of its resource's objects, for request
/// bodies ([`Api::protobuf_bodies`](crate::Api::protobuf_bodies)).
pub trait ToProtobuf {
    /// The object's own message (the client adds the `k8s\0` prefix and envelope), or `None`
    /// when the object holds something the encoder does not write (then it is sent as JSON).
    fn to_protobuf(&self) -> Option<Vec<u8>>;
}

/// How an [`Api`](crate::Api) encodes one object as protobuf: `K::to_protobuf`.
pub type Encoder<K> = fn(&K) -> Option<Vec<u8>>;

/// `message` enveloped as the API server expects a protobuf request body: `k8s\0`, then an
/// `Unknown` whose type is `api_version`/`kind` and whose `raw` is the message.
pub(crate) fn enveloped(api_version: &str, kind: &str, message: &[u8]) -> Bytes {
    let mut w = wire::Writer::with_prefix(MAGIC, message.len() + 64);
    w.message(1, |w| {
        w.string(1, api_version);
        w.string(2, kind);
    });
    w.bytes(2, message);
    w.string(3, "");
    w.string(4, "");
    Bytes::from(w.into_inner())
}

/// Why a protobuf answer could not be decoded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProtobufError {
    /// A message is malformed or does not match the declared fields.
    #[error(transparent)]
    Message(#[from] DecodeError),
    /// The body does not start with the `k8s\0` prefix of an encoded object.
    #[error("missing the k8s\\0 prefix of a protobuf object")]
    MissingPrefix,
    /// The envelope says the object is compressed or otherwise encoded.
    #[error("unsupported content encoding {0:?} of a protobuf object")]
    ContentEncoding(String),
    /// A message of a whole object (one of the [`objects`] decoders) is malformed: `field` is
    /// the number of the innermost field read when the fault was found.
    #[error("malformed protobuf {message}: at field {field}: {reason}")]
    Malformed {
        /// The object's type.
        message: &'static str,
        /// The field number being read.
        field: u32,
        /// What was wrong.
        reason: &'static str,
    },
    /// A watch event's type is none of ADDED, MODIFIED, DELETED, BOOKMARK, ERROR.
    #[error("unknown watch event type {0:?}")]
    UnknownEventType(String),
}

/// The wire type of a protobuf field, as [`MessageReader::next_field`] reports it; pass it back
/// to the method that reads or skips the field.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WireType(u8);

/// Reads one protobuf message field by field, straight from its bytes: the fast way to write a
/// view's [`FromProtobuf`] (no intermediate message structs, no copies of skipped fields).
///
/// ```
/// use kctrl_client::protobuf::{MessageReader, ProtobufError};
///
/// /// Field 1 of a message, a string, and nothing else.
/// fn first_string(message: &[u8]) -> Result<Option<String>, ProtobufError> {
///     let mut r = MessageReader::new(message, "Example");
///     let mut found = None;
///     while let Some((field, wire)) = r.next_field()? {
///         match field {
///             1 => found = Some(r.string(wire)?),
///             _ => r.skip(wire)?,
///         }
///     }
///     Ok(found)
/// }
///
/// // Field 1, length-delimited (0x0a), 2 bytes; then field 2, a varint (0x10).
/// assert_eq!(first_string(b"\x0a\x02hi\x10\x07").unwrap().as_deref(), Some("hi"));
/// assert!(first_string(b"\x0a\x09hi").is_err());
/// ```
#[derive(Debug)]
pub struct MessageReader<'a>(wire::Reader<'a>);

impl<'a> MessageReader<'a> {
    /// A reader of `message`, part of an object of type `object` (named in errors).
    pub fn new(message: &'a [u8], object: &'static str) -> Self {
        Self(wire::Reader::new(message, object))
    }

    /// The next field's number and wire type; `None` at the end of the message.
    pub fn next_field(&mut self) -> Result<Option<(u32, WireType)>, ProtobufError> {
        Ok(self.0.field()?.map(|(field, wire)| (field, WireType(wire))))
    }

    /// The current field as a string (checked to be UTF-8).
    pub fn string(&mut self, wire: WireType) -> Result<String, ProtobufError> {
        self.0.string(wire.0)
    }

    /// The current field as an embedded message.
    pub fn message(&mut self, wire: WireType) -> Result<MessageReader<'a>, ProtobufError> {
        self.0.message(wire.0).map(MessageReader)
    }

    /// The current field as an `ObjectMeta`, merged into `meta` as the same object's JSON
    /// would fill it (empty strings and collections `None`); `managedFields` are skipped.
    pub fn object_meta(
        &mut self,
        wire: WireType,
        meta: &mut ObjectMeta,
    ) -> Result<(), ProtobufError> {
        objects::merge_meta_v1_object_meta(self.0.message(wire.0)?, meta)
    }

    /// The current field as an `int32`.
    pub fn int32(&mut self, wire: WireType) -> Result<i32, ProtobufError> {
        self.0.int32(wire.0)
    }

    /// The current field as an `int64`.
    pub fn int64(&mut self, wire: WireType) -> Result<i64, ProtobufError> {
        self.0.int64(wire.0)
    }

    /// The current field as a `bool`.
    pub fn bool(&mut self, wire: WireType) -> Result<bool, ProtobufError> {
        self.0.bool(wire.0)
    }

    /// The current field as a `metav1.Time`, as the same object's JSON would hold it: to the
    /// second, and `None` for the zero time (an empty message).
    pub fn time(&mut self, wire: WireType) -> Result<Option<Time>, ProtobufError> {
        wire::time(self.0.message(wire.0)?)
    }

    /// Steps over the current field.
    pub fn skip(&mut self, wire: WireType) -> Result<(), ProtobufError> {
        self.0.skip(wire.0)
    }
}

/// How an [`Api`](crate::Api) decodes one object from protobuf: `K::from_protobuf`.
pub type Decoder<K> = fn(&[u8]) -> Result<K, ProtobufError>;

/// Whether a response body is protobuf (starts with [`MAGIC`]) rather than JSON.
pub fn is_protobuf(body: &[u8]) -> bool {
    body.starts_with(MAGIC)
}

/// `None` for an empty string: protobuf writes empty strings that JSON omits.
pub fn non_empty(s: Option<String>) -> Option<String> {
    s.filter(|s| !s.is_empty())
}

/// Appends `value` to a list being decoded, growing a short list one element at a time.
///
/// A decoder meets a repeated field's elements one by one, so `Vec::push` would give the
/// first element room for four (the standard library's smallest capacity), and a cached
/// object would carry the spare room for as long as it is cached: most lists in Kubernetes
/// objects hold one element (an owner reference, a container, a Ready condition), and on the
/// ReplicaSet controller's Pods and ReplicaSets the spare room was a sixth of their heap.
/// Lists of up to four elements are therefore sized exactly; longer ones grow by doubling
/// as `Vec::push` does. Use it in a [`FromProtobuf`] implementation for the lists of a view.
pub fn push<T>(list: &mut Vec<T>, value: T) {
    if list.len() == list.capacity() && list.len() < SHORT_LIST {
        list.reserve_exact(1);
    }
    list.push(value);
}

/// Lists up to this length are decoded at exactly their length (see [`push`]).
const SHORT_LIST: usize = 4;

fn non_empty_map(m: BTreeMap<String, String>) -> Option<BTreeMap<String, String>> {
    (!m.is_empty()).then_some(m)
}

fn non_empty_vec<T>(v: Vec<T>) -> Option<Vec<T>> {
    (!v.is_empty()).then_some(v)
}

/// `metav1.TypeMeta`.
#[derive(Clone, PartialEq, Message)]
struct TypeMetaMessage {
    #[prost(string, optional, tag = "1")]
    api_version: Option<String>,
    #[prost(string, optional, tag = "2")]
    kind: Option<String>,
}

/// `runtime.Unknown`, the envelope after the magic bytes.
#[derive(Clone, PartialEq, Message)]
struct Envelope {
    #[prost(message, optional, tag = "1")]
    type_meta: Option<TypeMetaMessage>,
    #[prost(bytes = "bytes", optional, tag = "2")]
    raw: Option<Bytes>,
    #[prost(string, optional, tag = "3")]
    content_encoding: Option<String>,
    #[prost(string, optional, tag = "4")]
    content_type: Option<String>,
}

/// Any `…List` message: `metadata` (1) and `items` (2), the items kept undecoded.
#[derive(Clone, PartialEq, Message)]
struct ListMessage {
    #[prost(message, optional, tag = "1")]
    metadata: Option<ListMetaMessage>,
    #[prost(bytes = "bytes", repeated, tag = "2")]
    items: Vec<Bytes>,
}

/// `metav1.ListMeta`.
#[derive(Clone, PartialEq, Message)]
struct ListMetaMessage {
    #[prost(string, optional, tag = "1")]
    self_link: Option<String>,
    #[prost(string, optional, tag = "2")]
    resource_version: Option<String>,
    #[prost(string, optional, tag = "3")]
    r#continue: Option<String>,
    #[prost(int64, optional, tag = "4")]
    remaining_item_count: Option<i64>,
    #[prost(message, optional, tag = "5")]
    shard_info: Option<ShardInfoMessage>,
}

/// `metav1.ShardInfo`.
#[derive(Clone, PartialEq, Message)]
struct ShardInfoMessage {
    #[prost(string, optional, tag = "1")]
    selector: Option<String>,
}

impl From<ShardInfoMessage> for ShardInfo {
    fn from(m: ShardInfoMessage) -> Self {
        ShardInfo {
            selector: m.selector.unwrap_or_default(),
        }
    }
}

impl From<ListMetaMessage> for ListMeta {
    fn from(m: ListMetaMessage) -> Self {
        ListMeta {
            continue_: non_empty(m.r#continue),
            remaining_item_count: m.remaining_item_count,
            resource_version: non_empty(m.resource_version),
            self_link: non_empty(m.self_link),
            // k8s-openapi's ListMeta has the field from its 1.36 types on; for older ones
            // the shardInfo is read by `decode_sharded_list` alone.
            #[cfg(k8s_api_ge = "1.36")]
            shard_info: m.shard_info.map(|info| {
                k8s_openapi::apimachinery::pkg::apis::meta::v1::ShardInfo {
                    selector: info.selector.unwrap_or_default(),
                }
            }),
        }
    }
}

/// `metav1.WatchEvent`.
#[derive(Clone, PartialEq, Message)]
struct WatchEventMessage {
    #[prost(string, optional, tag = "1")]
    r#type: Option<String>,
    #[prost(message, optional, tag = "2")]
    object: Option<RawExtension>,
}

/// `runtime.RawExtension`.
#[derive(Clone, PartialEq, Message)]
struct RawExtension {
    #[prost(bytes = "bytes", optional, tag = "1")]
    raw: Option<Bytes>,
}

/// `metav1.Time`: seconds and nanoseconds since the Unix epoch.
#[derive(Clone, Copy, PartialEq, Eq, Message)]
pub struct TimeMessage {
    /// Seconds since the epoch.
    #[prost(int64, optional, tag = "1")]
    pub seconds: Option<i64>,
    /// Nanoseconds within the second (the API server sends none).
    #[prost(int32, optional, tag = "2")]
    pub nanos: Option<i32>,
}

impl TimeMessage {
    /// The time, or `None` for the zero time (which JSON writes as `null`) or one out of
    /// range.
    pub fn to_time(self) -> Option<Time> {
        let (seconds, nanos) = (self.seconds.unwrap_or(0), self.nanos.unwrap_or(0));
        if seconds == 0 && nanos == 0 {
            return None;
        }
        k8s_openapi::jiff::Timestamp::new(seconds, nanos)
            .ok()
            .map(Time)
    }
}

/// `metav1.OwnerReference`.
#[derive(Clone, PartialEq, Message)]
pub struct OwnerReferenceMessage {
    /// `kind`.
    #[prost(string, optional, tag = "1")]
    pub kind: Option<String>,
    /// `name`.
    #[prost(string, optional, tag = "3")]
    pub name: Option<String>,
    /// `uid`.
    #[prost(string, optional, tag = "4")]
    pub uid: Option<String>,
    /// `apiVersion`.
    #[prost(string, optional, tag = "5")]
    pub api_version: Option<String>,
    /// `controller`.
    #[prost(bool, optional, tag = "6")]
    pub controller: Option<bool>,
    /// `blockOwnerDeletion`.
    #[prost(bool, optional, tag = "7")]
    pub block_owner_deletion: Option<bool>,
}

impl From<OwnerReferenceMessage> for OwnerReference {
    fn from(m: OwnerReferenceMessage) -> Self {
        OwnerReference {
            api_version: m.api_version.unwrap_or_default(),
            block_owner_deletion: m.block_owner_deletion,
            controller: m.controller,
            kind: m.kind.unwrap_or_default(),
            name: m.name.unwrap_or_default(),
            uid: m.uid.unwrap_or_default(),
        }
    }
}

/// `metav1.ObjectMeta` without `managedFields` (field 17, which prost skips as undeclared).
///
/// Converts into k8s-openapi's [`ObjectMeta`] exactly as the same object's JSON decodes:
/// the empty strings, zero generation, zero creation time and empty collections that
/// protobuf writes and JSON omits become `None`.
#[derive(Clone, PartialEq, Message)]
pub struct ObjectMetaMessage {
    /// `name`.
    #[prost(string, optional, tag = "1")]
    pub name: Option<String>,
    /// `generateName`.
    #[prost(string, optional, tag = "2")]
    pub generate_name: Option<String>,
    /// `namespace`.
    #[prost(string, optional, tag = "3")]
    pub namespace: Option<String>,
    /// `selfLink`.
    #[prost(string, optional, tag = "4")]
    pub self_link: Option<String>,
    /// `uid`.
    #[prost(string, optional, tag = "5")]
    pub uid: Option<String>,
    /// `resourceVersion`.
    #[prost(string, optional, tag = "6")]
    pub resource_version: Option<String>,
    /// `generation`.
    #[prost(int64, optional, tag = "7")]
    pub generation: Option<i64>,
    /// `creationTimestamp`.
    #[prost(message, optional, tag = "8")]
    pub creation_timestamp: Option<TimeMessage>,
    /// `deletionTimestamp`.
    #[prost(message, optional, tag = "9")]
    pub deletion_timestamp: Option<TimeMessage>,
    /// `deletionGracePeriodSeconds`.
    #[prost(int64, optional, tag = "10")]
    pub deletion_grace_period_seconds: Option<i64>,
    /// `labels`.
    #[prost(btree_map = "string, string", tag = "11")]
    pub labels: BTreeMap<String, String>,
    /// `annotations`.
    #[prost(btree_map = "string, string", tag = "12")]
    pub annotations: BTreeMap<String, String>,
    /// `ownerReferences`.
    #[prost(message, repeated, tag = "13")]
    pub owner_references: Vec<OwnerReferenceMessage>,
    /// `finalizers`.
    #[prost(string, repeated, tag = "14")]
    pub finalizers: Vec<String>,
}

impl From<ObjectMetaMessage> for ObjectMeta {
    fn from(m: ObjectMetaMessage) -> Self {
        ObjectMeta {
            annotations: non_empty_map(m.annotations),
            creation_timestamp: m.creation_timestamp.and_then(TimeMessage::to_time),
            deletion_grace_period_seconds: m.deletion_grace_period_seconds,
            deletion_timestamp: m.deletion_timestamp.and_then(TimeMessage::to_time),
            finalizers: non_empty_vec(m.finalizers),
            generate_name: non_empty(m.generate_name),
            generation: m.generation.filter(|g| *g != 0),
            labels: non_empty_map(m.labels),
            managed_fields: None,
            name: non_empty(m.name),
            namespace: non_empty(m.namespace),
            owner_references: non_empty_vec(
                m.owner_references.into_iter().map(Into::into).collect(),
            ),
            resource_version: non_empty(m.resource_version),
            self_link: non_empty(m.self_link),
            uid: non_empty(m.uid),
        }
    }
}

/// Any object's message read for its metadata alone (field 1 of every Kubernetes kind).
#[derive(Clone, PartialEq, Message)]
struct MetadataOnly {
    #[prost(message, optional, tag = "1")]
    metadata: Option<ObjectMetaMessage>,
}

/// `metav1.Status`.
#[derive(Clone, PartialEq, Message)]
struct StatusMessage {
    #[prost(message, optional, tag = "1")]
    metadata: Option<ListMetaMessage>,
    #[prost(string, optional, tag = "2")]
    status: Option<String>,
    #[prost(string, optional, tag = "3")]
    message: Option<String>,
    #[prost(string, optional, tag = "4")]
    reason: Option<String>,
    #[prost(message, optional, tag = "5")]
    details: Option<StatusDetailsMessage>,
    #[prost(int32, optional, tag = "6")]
    code: Option<i32>,
}

/// `metav1.StatusDetails`.
#[derive(Clone, PartialEq, Message)]
struct StatusDetailsMessage {
    #[prost(string, optional, tag = "1")]
    name: Option<String>,
    #[prost(string, optional, tag = "2")]
    group: Option<String>,
    #[prost(string, optional, tag = "3")]
    kind: Option<String>,
    #[prost(message, repeated, tag = "4")]
    causes: Vec<StatusCauseMessage>,
    #[prost(int32, optional, tag = "5")]
    retry_after_seconds: Option<i32>,
    #[prost(string, optional, tag = "6")]
    uid: Option<String>,
}

/// `metav1.StatusCause`.
#[derive(Clone, PartialEq, Message)]
struct StatusCauseMessage {
    #[prost(string, optional, tag = "1")]
    reason: Option<String>,
    #[prost(string, optional, tag = "2")]
    message: Option<String>,
    #[prost(string, optional, tag = "3")]
    field: Option<String>,
}

impl From<StatusMessage> for Status {
    fn from(m: StatusMessage) -> Self {
        Status {
            code: m.code.filter(|c| *c != 0),
            details: m.details.map(|d| StatusDetails {
                causes: non_empty_vec(
                    d.causes
                        .into_iter()
                        .map(|c| StatusCause {
                            field: non_empty(c.field),
                            message: non_empty(c.message),
                            reason: non_empty(c.reason),
                        })
                        .collect(),
                ),
                group: non_empty(d.group),
                kind: non_empty(d.kind),
                name: non_empty(d.name),
                retry_after_seconds: d.retry_after_seconds.filter(|s| *s != 0),
                uid: non_empty(d.uid),
            }),
            message: non_empty(m.message),
            metadata: m.metadata.map(Into::into).unwrap_or_default(),
            reason: non_empty(m.reason),
            status: non_empty(m.status),
        }
    }
}

/// The message inside an enveloped body (`k8s\0` + `Unknown`).
fn unwrap(body: &Bytes) -> Result<Bytes, ProtobufError> {
    Ok(open(body)?.raw.unwrap_or_default())
}

/// The envelope of a protobuf body: checks the `k8s\0` prefix and that the content is not
/// encoded (the API server never compresses it; an encoding is refused rather than misread).
fn open(body: &Bytes) -> Result<Envelope, ProtobufError> {
    if !is_protobuf(body) {
        return Err(ProtobufError::MissingPrefix);
    }
    let envelope = Envelope::decode(body.slice(MAGIC.len()..))?;
    if let Some(encoding) = envelope.content_encoding.as_ref().filter(|e| !e.is_empty()) {
        return Err(ProtobufError::ContentEncoding(encoding.clone()));
    }
    Ok(envelope)
}

/// Decodes one object as the API server sends it in protobuf (`k8s\0`, the envelope, the
/// object's message), e.g. the body of a GET.
pub fn from_enveloped<K: FromProtobuf>(body: &[u8]) -> Result<K, ProtobufError> {
    decode_object(&Bytes::copy_from_slice(body), K::from_protobuf)
}

/// Decodes an enveloped object.
pub(crate) fn decode_object<K>(body: &Bytes, decode: Decoder<K>) -> Result<K, ProtobufError> {
    decode(&unwrap(body)?)
}

/// Decodes an enveloped list, each item with `decode`, with its `metadata.shardInfo`.
pub(crate) fn decode_sharded_list<K: ListableResource>(
    body: &Bytes,
    decode: Decoder<K>,
) -> Result<ShardedList<K>, ProtobufError> {
    let (items, metadata) = decode_message_items(body, decode)?;
    let shard_info = metadata
        .as_ref()
        .and_then(|m| m.shard_info.clone())
        .map(Into::into);
    Ok(ShardedList {
        list: List {
            items,
            metadata: metadata.map(Into::into).unwrap_or_default(),
        },
        shard_info,
    })
}

/// The items and metadata of an enveloped list.
#[cfg(test)]
fn decode_items<K>(body: &Bytes, decode: Decoder<K>) -> Result<(Vec<K>, ListMeta), ProtobufError> {
    let (items, metadata) = decode_message_items(body, decode)?;
    Ok((items, metadata.map(Into::into).unwrap_or_default()))
}

/// The items and metadata message of an enveloped list.
fn decode_message_items<K>(
    body: &Bytes,
    decode: Decoder<K>,
) -> Result<(Vec<K>, Option<ListMetaMessage>), ProtobufError> {
    let list = ListMessage::decode(unwrap(body)?)?;
    let items = list
        .items
        .iter()
        .map(|item| decode(item))
        .collect::<Result<Vec<_>, _>>()?;
    Ok((items, list.metadata))
}

/// The failure `Status` of a protobuf error response, if the body is one.
pub(crate) fn decode_status(body: &[u8]) -> Option<Status> {
    if !is_protobuf(body) {
        return None;
    }
    let envelope = open(&Bytes::copy_from_slice(body)).ok()?;
    if envelope.type_meta.and_then(|t| t.kind).as_deref() != Some("Status") {
        return None;
    }
    StatusMessage::decode(envelope.raw.unwrap_or_default())
        .ok()
        .map(Into::into)
}

/// Why a protobuf watch frame could not be decoded, and which part was wrong.
#[derive(Debug)]
pub(crate) struct FrameError {
    /// The part: `watch event`, `object of ADDED watch event`...
    pub(crate) what: String,
    pub(crate) source: ProtobufError,
}

/// Decodes one frame of a protobuf watch (a `WatchEvent` message).
pub(crate) fn decode_watch_event<K>(
    frame: Bytes,
    decode: Decoder<K>,
) -> Result<WatchEvent<K>, FrameError> {
    let envelope_error = |source| FrameError {
        what: "watch event".to_owned(),
        source,
    };
    let event = WatchEventMessage::decode(frame).map_err(|e| envelope_error(e.into()))?;
    let kind = event.r#type.unwrap_or_default();
    let raw = event.object.and_then(|o| o.raw).unwrap_or_default();
    if !matches!(
        kind.as_str(),
        "ADDED" | "MODIFIED" | "DELETED" | "BOOKMARK" | "ERROR"
    ) {
        return Err(envelope_error(ProtobufError::UnknownEventType(kind)));
    }
    let object_error = |source: ProtobufError| FrameError {
        what: match kind.as_str() {
            "ERROR" => "Status of ERROR watch event".to_owned(),
            k => format!("object of {k} watch event"),
        },
        source,
    };
    let message = unwrap(&raw).map_err(object_error)?;
    let decoded = |m: &[u8]| decode(m).map_err(object_error);
    Ok(match kind.as_str() {
        "ADDED" => WatchEvent::Added(decoded(&message)?),
        "MODIFIED" => WatchEvent::Modified(decoded(&message)?),
        "DELETED" => WatchEvent::Deleted(decoded(&message)?),
        "BOOKMARK" => {
            let meta = MetadataOnly::decode(message)
                .map_err(|e| object_error(e.into()))?
                .metadata
                .unwrap_or_default();
            WatchEvent::Bookmark(Bookmark {
                resource_version: meta.resource_version.unwrap_or_default(),
                annotations: meta.annotations,
            })
        }
        _ => {
            let status = StatusMessage::decode(message).map_err(|e| object_error(e.into()))?;
            WatchEvent::Error(ApiError::from_status(500, status.into()))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A view of Pods for the tests: name and phase.
    #[derive(Debug, PartialEq)]
    struct Phase {
        meta: ObjectMeta,
        phase: Option<String>,
    }

    #[derive(Message)]
    struct PodMessage {
        #[prost(message, optional, tag = "1")]
        metadata: Option<ObjectMetaMessage>,
        #[prost(message, optional, tag = "3")]
        status: Option<PodStatusMessage>,
    }

    #[derive(Message)]
    struct PodStatusMessage {
        #[prost(string, optional, tag = "1")]
        phase: Option<String>,
    }

    fn phase(message: &[u8]) -> Result<Phase, ProtobufError> {
        let pod = PodMessage::decode(message)?;
        Ok(Phase {
            meta: pod.metadata.unwrap_or_default().into(),
            phase: pod.status.and_then(|s| non_empty(s.phase)),
        })
    }

    fn envelope(kind: &str, raw: Vec<u8>) -> Bytes {
        let mut out = MAGIC.to_vec();
        Envelope {
            type_meta: Some(TypeMetaMessage {
                api_version: Some("v1".into()),
                kind: Some(kind.into()),
            }),
            raw: Some(raw.into()),
            content_encoding: Some(String::new()),
            content_type: Some(String::new()),
        }
        .encode(&mut out)
        .unwrap();
        out.into()
    }

    fn pod(name: &str, phase: &str) -> Vec<u8> {
        PodMessage {
            metadata: Some(ObjectMetaMessage {
                name: Some(name.into()),
                namespace: Some("prod".into()),
                generation: Some(0),
                generate_name: Some(String::new()),
                creation_timestamp: Some(TimeMessage {
                    seconds: Some(1_764_000_000),
                    nanos: None,
                }),
                ..Default::default()
            }),
            status: Some(PodStatusMessage {
                phase: Some(phase.into()),
            }),
        }
        .encode_to_vec()
    }

    #[test]
    fn empty_values_protobuf_writes_become_absent_as_in_json() {
        let p = decode_object(&envelope("Pod", pod("web-1", "Running")), phase).unwrap();
        assert_eq!(p.meta.name.as_deref(), Some("web-1"));
        assert_eq!(p.meta.generate_name, None);
        assert_eq!(p.meta.generation, None);
        assert_eq!(p.meta.labels, None);
        assert_eq!(
            p.meta.creation_timestamp.unwrap().0.as_second(),
            1_764_000_000
        );
        assert_eq!(p.phase.as_deref(), Some("Running"));
    }

    #[test]
    fn lists_decode_every_item_and_the_list_metadata() {
        let list = ListMessage {
            metadata: Some(ListMetaMessage {
                resource_version: Some("42".into()),
                r#continue: Some(String::new()),
                ..Default::default()
            }),
            items: vec![pod("a", "Pending").into(), pod("b", "Running").into()],
        }
        .encode_to_vec();
        let (items, meta) = decode_items(&envelope("PodList", list), phase).unwrap();
        assert_eq!(meta.resource_version.as_deref(), Some("42"));
        assert_eq!(meta.continue_, None);
        let names: Vec<_> = items.iter().map(|p| p.meta.name.clone().unwrap()).collect();
        assert_eq!(names, ["a", "b"]);
    }

    #[test]
    fn sharded_lists_carry_their_shard_info() {
        let selector =
            "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000')";
        let list = |shard_info| {
            ListMessage {
                metadata: Some(ListMetaMessage {
                    resource_version: Some("42".into()),
                    shard_info,
                    ..Default::default()
                }),
                items: vec![Bytes::new()],
            }
            .encode_to_vec()
        };
        let filtered = list(Some(ShardInfoMessage {
            selector: Some(selector.into()),
        }));
        type Deployment = k8s_openapi::api::apps::v1::Deployment;
        let decode = <Deployment as FromProtobuf>::from_protobuf;
        let sharded =
            decode_sharded_list::<Deployment>(&envelope("DeploymentList", filtered), decode)
                .unwrap();
        assert_eq!(sharded.shard_info.unwrap().selector, selector);
        assert_eq!(sharded.list.items.len(), 1);
        assert_eq!(
            sharded
                .list
                .metadata
                .shard_info
                .map(|i| i.selector)
                .as_deref(),
            Some(selector)
        );
        let plain =
            decode_sharded_list::<Deployment>(&envelope("DeploymentList", list(None)), decode)
                .unwrap();
        assert!(!plain.server_filtered());
        assert_eq!(plain.list.metadata.resource_version.as_deref(), Some("42"));
    }

    fn frame(kind: &str, object: Bytes) -> Bytes {
        WatchEventMessage {
            r#type: Some(kind.into()),
            object: Some(RawExtension { raw: Some(object) }),
        }
        .encode_to_vec()
        .into()
    }

    #[test]
    fn watch_events_of_every_type() {
        let added = decode_watch_event(frame("ADDED", envelope("Pod", pod("a", "Pending"))), phase);
        assert!(matches!(added, Ok(WatchEvent::Added(p)) if p.phase.as_deref() == Some("Pending")));
        let bookmark = MetadataOnly {
            metadata: Some(ObjectMetaMessage {
                resource_version: Some("77".into()),
                annotations: [(
                    crate::INITIAL_EVENTS_END_ANNOTATION.to_owned(),
                    "true".to_owned(),
                )]
                .into(),
                ..Default::default()
            }),
        }
        .encode_to_vec();
        match decode_watch_event(frame("BOOKMARK", envelope("Pod", bookmark)), phase) {
            Ok(WatchEvent::Bookmark(b)) => {
                assert_eq!(b.resource_version, "77");
                assert!(b.is_initial_events_end());
            }
            other => panic!("expected a bookmark, got {other:?}"),
        }
        let gone = StatusMessage {
            status: Some("Failure".into()),
            message: Some("too old resource version: 1 (5)".into()),
            reason: Some("Expired".into()),
            code: Some(410),
            ..Default::default()
        }
        .encode_to_vec();
        match decode_watch_event(frame("ERROR", envelope("Status", gone)), phase) {
            Ok(WatchEvent::Error(e)) => {
                assert_eq!(e.code, 410);
                assert_eq!(e.status.reason.as_deref(), Some("Expired"));
            }
            other => panic!("expected an error event, got {other:?}"),
        }
    }

    #[test]
    fn bad_frames_name_the_part_that_is_wrong() {
        let unknown = decode_watch_event(frame("RENAMED", envelope("Pod", pod("a", "x"))), phase);
        let err = unknown.unwrap_err();
        assert_eq!(err.what, "watch event");
        assert!(err.source.to_string().contains("RENAMED"), "{}", err.source);

        let no_magic = decode_watch_event(frame("ADDED", Bytes::from_static(b"{}")), phase);
        assert_eq!(no_magic.unwrap_err().what, "object of ADDED watch event");

        let truncated = pod("a", "Running");
        let cut = envelope("Pod", truncated[..truncated.len() - 3].to_vec());
        assert_eq!(
            decode_watch_event(frame("MODIFIED", cut), phase)
                .unwrap_err()
                .what,
            "object of MODIFIED watch event"
        );
        assert_eq!(
            decode_watch_event(Bytes::from_static(&[0xff, 0xff]), phase)
                .unwrap_err()
                .what,
            "watch event"
        );
    }

    #[test]
    fn status_bodies_decode_and_other_bodies_do_not() {
        let body = envelope(
            "Status",
            StatusMessage {
                status: Some("Failure".into()),
                reason: Some("NotFound".into()),
                code: Some(404),
                details: Some(StatusDetailsMessage {
                    name: Some("web".into()),
                    kind: Some("pods".into()),
                    ..Default::default()
                }),
                ..Default::default()
            }
            .encode_to_vec(),
        );
        let status = decode_status(&body).unwrap();
        assert_eq!(status.code, Some(404));
        assert_eq!(status.details.unwrap().name.as_deref(), Some("web"));
        assert!(decode_status(&envelope("Pod", pod("a", "b"))).is_none());
        assert!(decode_status(b"{\"kind\":\"Status\"}").is_none());
    }

    #[test]
    fn the_message_reader_reads_numbers_booleans_and_times() {
        // int32 -1 (sign-extended), int64 300, bool true, a Time, the zero Time, a string.
        let mut message = vec![0x08];
        message.extend_from_slice(&[0xff; 9]);
        message.push(0x01);
        message.extend_from_slice(b"\x10\xac\x02\x18\x01");
        message.extend_from_slice(&[0x22, 0x07, 0x08, 0x80, 0xc2, 0xd7, 0x2a, 0x10]);
        message.push(0x05);
        message.extend_from_slice(b"\x2a\x00\x32\x01x");
        let mut r = MessageReader::new(&message, "Example");
        let (field, wire) = r.next_field().unwrap().unwrap();
        assert_eq!(field, 1);
        assert_eq!(r.int32(wire).unwrap(), -1);
        let (_, wire) = r.next_field().unwrap().unwrap();
        assert_eq!(r.int64(wire).unwrap(), 300);
        let (_, wire) = r.next_field().unwrap().unwrap();
        assert!(r.bool(wire).unwrap());
        let (_, wire) = r.next_field().unwrap().unwrap();
        // Nanoseconds are dropped, as apimachinery's Time has none in JSON.
        assert_eq!(
            r.time(wire).unwrap(),
            Some(Time(
                k8s_openapi::jiff::Timestamp::from_second(89_514_240).unwrap()
            ))
        );
        let (_, wire) = r.next_field().unwrap().unwrap();
        assert_eq!(r.time(wire).unwrap(), None);
        // A string is not a number.
        let (_, wire) = r.next_field().unwrap().unwrap();
        assert!(r.int32(wire).is_err());
    }
}

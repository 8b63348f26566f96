//! Conversion between the versions of a custom resource, hub and spoke (controller-runtime's
//! `conversion.Hub` / `Convertible`): one version is the hub; every other version, a spoke,
//! converts to the hub and back. Any version then converts to any other through the hub, with
//! two conversions per spoke instead of one per pair.
//!
//! ```
//! use kctrl_webhook::conversion::{Conversion, ConversionError, Spoke};
//!
//! mod v1 {
//! #   use kctrl_client::CustomResource;
//! #   use schemars::JsonSchema;
//! #   use serde::{Deserialize, Serialize};
//!     #[derive(CustomResource, Clone, Debug, Serialize, Deserialize, JsonSchema)]
//!     #[resource(group = "example.com", version = "v1", kind = "Widget", namespaced)]
//!     pub struct WidgetSpec { pub size: String } // "3x4"
//! }
//! mod v2 {
//! #   use kctrl_client::CustomResource;
//! #   use schemars::JsonSchema;
//! #   use serde::{Deserialize, Serialize};
//!     #[derive(CustomResource, Clone, Debug, Serialize, Deserialize, JsonSchema)]
//!     #[resource(group = "example.com", version = "v2", kind = "Widget", namespaced, storage)]
//!     pub struct WidgetSpec { pub width: i32, pub height: i32 }
//! }
//!
//! impl Spoke<v2::Widget> for v1::Widget {
//!     fn to_hub(self) -> Result<v2::Widget, ConversionError> {
//!         let (w, h) = self.spec.size.split_once('x').ok_or_else(|| ConversionError::new("size is not WxH"))?;
//!         let parse = |s: &str| s.parse().map_err(|_| ConversionError::new(format!("{s:?} is not a number")));
//!         Ok(v2::Widget { metadata: self.metadata, spec: v2::WidgetSpec { width: parse(w)?, height: parse(h)? } })
//!     }
//!     fn from_hub(hub: v2::Widget) -> Result<Self, ConversionError> {
//!         let size = format!("{}x{}", hub.spec.width, hub.spec.height);
//!         Ok(v1::Widget { metadata: hub.metadata, spec: v1::WidgetSpec { size } })
//!     }
//! }
//!
//! # fn main() {
//! let conversion = Conversion::<v2::Widget>::new().spoke::<v1::Widget>();
//! let v1_widget = serde_json::json!({
//!     "apiVersion": "example.com/v1", "kind": "Widget",
//!     "metadata": {"name": "w"}, "spec": {"size": "3x4"},
//! });
//! let v2_widget = conversion.convert(v1_widget, "example.com/v2").unwrap();
//! assert_eq!(v2_widget["spec"], serde_json::json!({"width": 3, "height": 4}));
//! # }
//! ```

use std::collections::BTreeMap;
use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;

use k8s_openapi::Resource;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::review::{ConversionRequest, ConversionResponse};

/// Why an object could not be converted; the message reaches the client that asked for it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ConversionError(String);

impl ConversionError {
    /// An error saying `message`.
    pub fn new(message: impl Into<String>) -> Self {
        ConversionError(message.into())
    }
}

/// A version that converts to and from the hub `H`.
pub trait Spoke<H>: Sized {
    /// This version as the hub.
    fn to_hub(self) -> Result<H, ConversionError>;
    /// The hub as this version.
    fn from_hub(hub: H) -> Result<Self, ConversionError>;
}

/// A JSON object of one version to the hub's JSON, or back.
type Step = Arc<dyn Fn(Value) -> Result<Value, ConversionError> + Send + Sync>;

/// How one version converts.
#[derive(Clone)]
struct Version {
    /// `None` for the hub.
    to_hub: Option<Step>,
    from_hub: Option<Step>,
}

/// The conversions of one kind: the hub `H` and its spokes. See the [module docs](self).
pub struct Conversion<H> {
    kind: KindConversion,
    hub: PhantomData<fn() -> H>,
}

impl<H> Clone for Conversion<H> {
    fn clone(&self) -> Self {
        Conversion {
            kind: self.kind.clone(),
            hub: PhantomData,
        }
    }
}

impl<H> fmt::Debug for Conversion<H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.kind.fmt(f)
    }
}

impl<H> Default for Conversion<H>
where
    H: Resource + Serialize + DeserializeOwned + 'static,
{
    fn default() -> Self {
        Self::new()
    }
}

impl<H> Conversion<H>
where
    H: Resource + Serialize + DeserializeOwned + 'static,
{
    /// The conversions of `H`'s kind, `H` the hub, without spokes yet.
    pub fn new() -> Self {
        Conversion {
            kind: KindConversion {
                group: H::GROUP,
                kind: H::KIND,
                hub: H::VERSION,
                versions: BTreeMap::from([(
                    H::VERSION,
                    Version {
                        to_hub: None,
                        from_hub: None,
                    },
                )]),
                errors: Vec::new(),
            },
            hub: PhantomData,
        }
    }

    /// Adds the spoke `S`. A spoke of another group or kind, or of a version already
    /// registered, is an error the server builder reports.
    pub fn spoke<S>(mut self) -> Self
    where
        S: Spoke<H> + Resource + Serialize + DeserializeOwned + 'static,
    {
        let k = &mut self.kind;
        if (S::GROUP, S::KIND) != (k.group, k.kind) {
            k.errors.push(format!(
                "spoke {} {} is not of the hub's group and kind, {} {}",
                S::API_VERSION,
                S::KIND,
                k.group,
                k.kind
            ));
            return self;
        }
        if k.versions.contains_key(S::VERSION) {
            k.errors.push(format!(
                "version {} of {} is registered twice",
                S::VERSION,
                k.kind
            ));
            return self;
        }
        let to_hub: Step = Arc::new(|v| encode(&decode::<S>(v)?.to_hub()?));
        let from_hub: Step = Arc::new(|v| encode(&S::from_hub(decode::<H>(v)?)?));
        k.versions.insert(
            S::VERSION,
            Version {
                to_hub: Some(to_hub),
                from_hub: Some(from_hub),
            },
        );
        self
    }

    /// The API group.
    pub fn group(&self) -> &'static str {
        self.kind.group
    }

    /// The kind.
    pub fn kind(&self) -> &'static str {
        self.kind.kind
    }

    /// The registered versions, the hub's among them.
    pub fn versions(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.kind.versions.keys().copied()
    }

    /// `object` (of this kind, any registered version) at `desired_api_version`
    /// (`<group>/<version>`). The result's `apiVersion` is `desired_api_version`: set when the
    /// spoke's type serialized none, an error naming it when it serialized another.
    pub fn convert(
        &self,
        object: Value,
        desired_api_version: &str,
    ) -> Result<Value, ConversionError> {
        self.kind.convert(object, desired_api_version)
    }

    /// Without the hub's type, as the server keeps it.
    pub(crate) fn erase(self) -> KindConversion {
        self.kind
    }
}

/// A [`Conversion`] without its hub's type.
#[derive(Clone)]
pub(crate) struct KindConversion {
    group: &'static str,
    kind: &'static str,
    hub: &'static str,
    versions: BTreeMap<&'static str, Version>,
    /// Mistakes in the registration, reported when the server is built.
    errors: Vec<String>,
}

impl fmt::Debug for KindConversion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Conversion")
            .field("group", &self.group)
            .field("kind", &self.kind)
            .field("hub", &self.hub)
            .field("versions", &self.versions.keys().collect::<Vec<_>>())
            .finish()
    }
}

/// Decodes a `T` from JSON, naming the version on failure.
fn decode<T: Resource + DeserializeOwned>(value: Value) -> Result<T, ConversionError> {
    serde_json::from_value(value).map_err(|e| {
        ConversionError::new(format!("decoding the object as {}: {e}", T::API_VERSION))
    })
}

/// Encodes a `T` as JSON.
fn encode<T: Resource + Serialize>(object: &T) -> Result<Value, ConversionError> {
    serde_json::to_value(object)
        .map_err(|e| ConversionError::new(format!("encoding the {} object: {e}", T::API_VERSION)))
}

impl KindConversion {
    /// The API group.
    pub(crate) fn group(&self) -> &'static str {
        self.group
    }

    /// The kind.
    pub(crate) fn kind(&self) -> &'static str {
        self.kind
    }

    /// The registration's mistakes, if any.
    pub(crate) fn errors(&self) -> &[String] {
        &self.errors
    }

    /// `object` (of this kind, any registered version) at `desired_api_version`.
    fn convert(&self, object: Value, desired_api_version: &str) -> Result<Value, ConversionError> {
        let api_version = object
            .get("apiVersion")
            .and_then(Value::as_str)
            .ok_or_else(|| ConversionError::new("the object has no apiVersion"))?
            .to_owned();
        let kind = object
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let (from_group, from) = split_api_version(&api_version);
        let (to_group, to) = split_api_version(desired_api_version);
        if from_group != self.group || kind != self.kind {
            return Err(ConversionError::new(format!(
                "this conversion converts {}.{}, not {kind} of apiVersion {api_version}",
                self.kind, self.group
            )));
        }
        if to_group != self.group {
            return Err(ConversionError::new(format!(
                "cannot convert {kind} of {api_version} to {desired_api_version}: another API group"
            )));
        }
        if from == to {
            return Ok(object);
        }
        let version = |v: &str| {
            self.versions.get(v).ok_or_else(|| {
                ConversionError::new(format!(
                    "version {v} of {}.{} is not registered for conversion (registered: {})",
                    self.kind,
                    self.group,
                    self.versions.keys().copied().collect::<Vec<_>>().join(", ")
                ))
            })
        };
        let (source, target) = (version(from)?, version(to)?);
        let hub = match &source.to_hub {
            Some(step) => step(object)?,
            None => object,
        };
        let mut converted = match &target.from_hub {
            Some(step) => step(hub)?,
            None => hub,
        };
        // The API server wants each object at exactly the version it asked for: one the
        // type serialized without an apiVersion gets it, one with another is a bug of the
        // conversion, refused rather than passed on.
        let Some(fields) = converted.as_object_mut() else {
            return Err(ConversionError::new(format!(
                "the conversion to {desired_api_version} did not produce a JSON object"
            )));
        };
        match fields.get("apiVersion") {
            None | Some(Value::Null) => {
                fields.insert("apiVersion".to_owned(), desired_api_version.into());
            }
            Some(Value::String(got)) if got == desired_api_version => {}
            Some(got) => {
                return Err(ConversionError::new(format!(
                    "the conversion to {desired_api_version} produced an object of apiVersion \
                     {got}; its from_hub (or the type's serialization) must give \
                     {desired_api_version}"
                )));
            }
        }
        // Likewise its kind: a type that serializes no apiVersion usually serializes no kind
        // either, and the API server refuses an object whose kind is missing or another.
        match fields.get("kind") {
            None | Some(Value::Null) => {
                fields.insert("kind".to_owned(), self.kind.into());
            }
            Some(Value::String(got)) if got == self.kind => {}
            Some(got) => {
                return Err(ConversionError::new(format!(
                    "the conversion to {desired_api_version} produced an object of kind {got}; \
                     its from_hub (or the type's serialization) must give kind {}",
                    self.kind
                )));
            }
        }
        Ok(converted)
    }
}

/// `group/version` split; the core group (`v1`) is the empty group.
fn split_api_version(api_version: &str) -> (&str, &str) {
    api_version.rsplit_once('/').unwrap_or(("", api_version))
}

/// The conversions of every registered kind, answering conversion requests.
#[derive(Clone, Debug, Default)]
pub(crate) struct Converters {
    kinds: Vec<KindConversion>,
}

impl Converters {
    pub(crate) fn add(&mut self, conversion: KindConversion) {
        self.kinds.push(conversion);
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.kinds.is_empty()
    }

    pub(crate) fn kinds(&self) -> &[KindConversion] {
        &self.kinds
    }

    /// Converts every object of `request`, or fails the whole request naming the first
    /// object that could not be converted.
    pub(crate) fn handle(&self, request: ConversionRequest) -> ConversionResponse {
        let mut converted = Vec::with_capacity(request.objects.len());
        for object in request.objects {
            let api_version = object
                .get("apiVersion")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            let kind = object
                .get("kind")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            let name = object
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            let (group, _) = split_api_version(&api_version);
            let Some(conversion) = self
                .kinds
                .iter()
                .find(|c| c.group == group && c.kind == kind)
            else {
                let message = format!(
                    "no conversion is registered for kind {kind:?} of group {group:?} (object {name:?}); registered: {}",
                    self.kinds
                        .iter()
                        .map(|c| format!("{}.{}", c.kind, c.group))
                        .collect::<Vec<_>>()
                        .join(", ")
                );
                tracing::warn!(%kind, %group, %name, "conversion refused: kind not registered");
                return ConversionResponse::failure(request.uid, message);
            };
            match conversion.convert(object, &request.desired_api_version) {
                Ok(o) => converted.push(o),
                Err(e) => {
                    tracing::warn!(%kind, %name, error = %e, "conversion failed");
                    return ConversionResponse::failure(
                        request.uid,
                        format!(
                            "converting {kind} {name:?} to {}: {e}",
                            request.desired_api_version
                        ),
                    );
                }
            }
        }
        ConversionResponse::success(request.uid, converted)
    }
}

#[cfg(test)]
mod tests;

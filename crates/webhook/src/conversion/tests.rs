use kctrl_client::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::*;

use crate::test_widgets::{v1, v2};

mod v3 {
    use super::*;
    #[derive(CustomResource, Clone, Debug, Serialize, Deserialize, JsonSchema)]
    #[resource(
        group = "webhook.kctrl.dev",
        version = "v3",
        kind = "Widget",
        namespaced
    )]
    pub(crate) struct WidgetSpec {
        pub(crate) area: i32,
    }
}

mod other {
    use super::*;
    #[derive(CustomResource, Clone, Debug, Serialize, Deserialize, JsonSchema)]
    #[resource(
        group = "other.example.com",
        version = "v1",
        kind = "Gadget",
        namespaced
    )]
    pub(crate) struct GadgetSpec {
        pub(crate) size: String,
    }
}

impl Spoke<v2::Widget> for v3::Widget {
    fn to_hub(self) -> Result<v2::Widget, ConversionError> {
        Ok(v2::Widget {
            metadata: self.metadata,
            spec: v2::WidgetSpec {
                width: self.spec.area,
                height: 1,
            },
        })
    }
    fn from_hub(hub: v2::Widget) -> Result<Self, ConversionError> {
        Ok(v3::Widget {
            metadata: hub.metadata,
            spec: v3::WidgetSpec {
                area: hub.spec.width * hub.spec.height,
            },
        })
    }
}

impl Spoke<v2::Widget> for other::Gadget {
    fn to_hub(self) -> Result<v2::Widget, ConversionError> {
        Err(ConversionError::new("never"))
    }
    fn from_hub(_: v2::Widget) -> Result<Self, ConversionError> {
        Err(ConversionError::new("never"))
    }
}

fn converters() -> Converters {
    let mut c = Converters::default();
    c.add(
        Conversion::<v2::Widget>::new()
            .spoke::<v1::Widget>()
            .spoke::<v3::Widget>()
            .erase(),
    );
    c
}

fn widget(version: &str, spec: serde_json::Value) -> serde_json::Value {
    json!({"apiVersion": format!("webhook.kctrl.dev/{version}"), "kind": "Widget",
           "metadata": {"name": "w", "namespace": "default", "uid": "u1", "labels": {"a": "b"}}, "spec": spec})
}

#[test]
fn spoke_to_spoke_goes_through_the_hub_keeping_metadata() {
    let response = converters().handle(ConversionRequest {
        uid: "abc".into(),
        desired_api_version: "webhook.kctrl.dev/v3".into(),
        objects: vec![
            widget("v1", json!({"size": "3x4"})),
            widget("v2", json!({"width": 2, "height": 5})),
            widget("v3", json!({"area": 7})),
        ],
    });
    assert_eq!(response.uid, "abc");
    assert_eq!(response.result.status.as_deref(), Some("Success"));
    assert_eq!(
        response.converted_objects,
        [
            widget("v3", json!({"area": 12})),
            widget("v3", json!({"area": 10})),
            widget("v3", json!({"area": 7}))
        ]
    );
    let back = converters().handle(ConversionRequest {
        uid: "abc".into(),
        desired_api_version: "webhook.kctrl.dev/v1".into(),
        objects: vec![widget("v2", json!({"width": 2, "height": 5}))],
    });
    assert_eq!(
        back.converted_objects,
        [widget("v1", json!({"size": "2x5"}))]
    );
}

#[test]
fn failures_name_the_object_kind_and_version() {
    let fail = |objects: Vec<serde_json::Value>, desired: &str| {
        let r = converters().handle(ConversionRequest {
            uid: "u".into(),
            desired_api_version: desired.into(),
            objects,
        });
        assert_eq!(r.result.status.as_deref(), Some("Failure"));
        assert!(r.converted_objects.is_empty());
        r.result.message.unwrap()
    };
    let m = fail(
        vec![widget("v1", json!({"size": "big"}))],
        "webhook.kctrl.dev/v2",
    );
    assert_eq!(
        m,
        "converting Widget \"w\" to webhook.kctrl.dev/v2: size \"big\" is not WxH"
    );
    let m = fail(vec![widget("v9", json!({}))], "webhook.kctrl.dev/v2");
    assert_eq!(
        m,
        "converting Widget \"w\" to webhook.kctrl.dev/v2: version v9 of Widget.webhook.kctrl.dev is not registered for conversion (registered: v1, v2, v3)"
    );
    let m = fail(
        vec![widget("v1", json!({"size": "1x1"}))],
        "webhook.kctrl.dev/v7",
    );
    assert!(
        m.contains("version v7 of Widget.webhook.kctrl.dev is not registered"),
        "{m}"
    );
    let m = fail(
        vec![
            json!({"apiVersion": "other.example.com/v1", "kind": "Gadget", "metadata": {"name": "g"}}),
        ],
        "other.example.com/v2",
    );
    assert_eq!(
        m,
        "no conversion is registered for kind \"Gadget\" of group \"other.example.com\" (object \"g\"); registered: Widget.webhook.kctrl.dev"
    );
    let m = fail(
        vec![widget("v1", json!({"size": "1x1"}))],
        "other.example.com/v1",
    );
    assert!(m.contains("another API group"), "{m}");
}

#[test]
fn registration_mistakes_are_collected() {
    let c = Conversion::<v2::Widget>::new()
        .spoke::<v1::Widget>()
        .spoke::<v1::Widget>()
        .spoke::<other::Gadget>();
    let k = c.erase();
    assert_eq!(k.errors().len(), 2, "{:?}", k.errors());
    assert!(k.errors()[0].contains("registered twice"));
    assert!(k.errors()[1].contains("not of the hub's group and kind"));
}

/// A v1 Widget as a type that writes whatever apiVersion it is given (none when `None`).
#[derive(Clone, Debug, Serialize, Deserialize)]
struct LooseV1 {
    #[serde(rename = "apiVersion", skip_serializing_if = "Option::is_none")]
    api_version: Option<String>,
    kind: String,
    metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    spec: serde_json::Value,
}

impl k8s_openapi::Resource for LooseV1 {
    const API_VERSION: &'static str = "webhook.kctrl.dev/v1";
    const GROUP: &'static str = "webhook.kctrl.dev";
    const KIND: &'static str = "Widget";
    const VERSION: &'static str = "v1";
    const URL_PATH_SEGMENT: &'static str = "widgets";
    type Scope = k8s_openapi::NamespaceResourceScope;
}

/// What `from_hub` puts in `apiVersion`, per test.
static LOOSE_API_VERSION: std::sync::Mutex<Option<&'static str>> = std::sync::Mutex::new(None);

impl Spoke<v2::Widget> for LooseV1 {
    fn to_hub(self) -> Result<v2::Widget, ConversionError> {
        Err(ConversionError::new("not used"))
    }
    fn from_hub(hub: v2::Widget) -> Result<Self, ConversionError> {
        Ok(LooseV1 {
            api_version: LOOSE_API_VERSION.lock().unwrap().map(str::to_owned),
            kind: "Widget".to_owned(),
            metadata: hub.metadata,
            spec: json!({"size": format!("{}x{}", hub.spec.width, hub.spec.height)}),
        })
    }
}

#[test]
fn converted_objects_are_at_the_desired_api_version_or_refused() {
    let conversion = Conversion::<v2::Widget>::new().spoke::<LooseV1>();
    let hub = widget("v2", json!({"width": 3, "height": 4}));
    // Without an apiVersion of its own: given the desired one.
    *LOOSE_API_VERSION.lock().unwrap() = None;
    let converted = conversion
        .convert(hub.clone(), "webhook.kctrl.dev/v1")
        .unwrap();
    assert_eq!(converted["apiVersion"], "webhook.kctrl.dev/v1");
    assert_eq!(converted["spec"], json!({"size": "3x4"}));
    // With another one: refused, naming it.
    *LOOSE_API_VERSION.lock().unwrap() = Some("webhook.kctrl.dev/v2");
    let err = conversion
        .convert(hub, "webhook.kctrl.dev/v1")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(
            "the conversion to webhook.kctrl.dev/v1 produced an object of apiVersion \"webhook.kctrl.dev/v2\""
        ),
        "{err}"
    );
}

/// A v1 Widget as a type that serializes only metadata and spec, unless a kind is given.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct BareV1 {
    #[serde(skip_serializing_if = "Option::is_none")]
    kind: Option<String>,
    metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    spec: serde_json::Value,
}

impl k8s_openapi::Resource for BareV1 {
    const API_VERSION: &'static str = "webhook.kctrl.dev/v1";
    const GROUP: &'static str = "webhook.kctrl.dev";
    const KIND: &'static str = "Widget";
    const VERSION: &'static str = "v1";
    const URL_PATH_SEGMENT: &'static str = "widgets";
    type Scope = k8s_openapi::NamespaceResourceScope;
}

/// What `from_hub` puts in `kind`, per test.
static BARE_KIND: std::sync::Mutex<Option<&'static str>> = std::sync::Mutex::new(None);

impl Spoke<v2::Widget> for BareV1 {
    fn to_hub(self) -> Result<v2::Widget, ConversionError> {
        Err(ConversionError::new("not used"))
    }
    fn from_hub(hub: v2::Widget) -> Result<Self, ConversionError> {
        Ok(BareV1 {
            kind: BARE_KIND.lock().unwrap().map(str::to_owned),
            metadata: hub.metadata,
            spec: json!({"size": format!("{}x{}", hub.spec.width, hub.spec.height)}),
        })
    }
}

#[test]
fn converted_objects_get_the_kind_or_are_refused_for_another() {
    let mut converters = Converters::default();
    converters.add(Conversion::<v2::Widget>::new().spoke::<BareV1>().erase());
    let request = || ConversionRequest {
        uid: "k1".into(),
        desired_api_version: "webhook.kctrl.dev/v1".into(),
        objects: vec![widget("v2", json!({"width": 3, "height": 4}))],
    };
    // Only metadata and spec serialized: given the desired apiVersion and the kind.
    *BARE_KIND.lock().unwrap() = None;
    let response = converters.handle(request());
    assert_eq!(
        response.result.status.as_deref(),
        Some("Success"),
        "{:?}",
        response.result.message
    );
    assert_eq!(
        response.converted_objects,
        [widget("v1", json!({"size": "3x4"}))]
    );
    // Another kind: the review fails, naming it.
    *BARE_KIND.lock().unwrap() = Some("Gadget");
    let response = converters.handle(request());
    assert_eq!(response.result.status.as_deref(), Some("Failure"));
    let message = response.result.message.unwrap_or_default();
    assert!(
        message.contains("produced an object of kind \"Gadget\"")
            && message.contains("must give kind Widget"),
        "{message}"
    );
    assert!(response.converted_objects.is_empty());
}

//! Waiting until the API server calls a test's conversion webhook.
//!
//! A CRD's conversion is only called for an object of that CRD, and [`install`](super::install)
//! knows none. So it uses a CRD of its own, `conversionprobes.testenv.kctrl.dev` (v1 stored,
//! v2 served, any content), converted by the same server: once its conversion, pointed at the
//! server after the test's CRDs were, is called for a probe object read at v2, the API server
//! reaches the server's `/convert` and has seen the CRD updates made before. The probe CRD is
//! shared by the installations against one API server, one at a time (a lock of the process);
//! its probe objects are deleted after use, so a stopped server behind it is never called.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, CustomResourceDefinitionNames, CustomResourceDefinitionSpec,
    CustomResourceDefinitionVersion, CustomResourceValidation, JSONSchemaProps,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kctrl_client::{Api, Client, DeleteParams, DynamicObject, PostParams, ResourceRef, Scope};
use kctrl_webhook::{ClientConfig, Conversion, ConversionError, RunningServer, Spoke};
use serde::{Deserialize, Serialize};

use crate::Error;

const GROUP: &str = "testenv.kctrl.dev";
const KIND: &str = "ConversionProbe";
const PLURAL: &str = "conversionprobes";

/// A probe object at v1 (the stored version): only its metadata.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(super) struct ProbeV1 {
    #[serde(rename = "apiVersion")]
    api_version: String,
    kind: String,
    metadata: ObjectMeta,
}

/// A probe object at v2, the hub.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(super) struct ProbeV2 {
    #[serde(rename = "apiVersion")]
    api_version: String,
    kind: String,
    metadata: ObjectMeta,
}

macro_rules! probe_resource {
    ($ty:ty, $version:literal) => {
        impl k8s_openapi::Resource for $ty {
            const API_VERSION: &'static str = concat!("testenv.kctrl.dev/", $version);
            const GROUP: &'static str = GROUP;
            const KIND: &'static str = KIND;
            const VERSION: &'static str = $version;
            const URL_PATH_SEGMENT: &'static str = PLURAL;
            type Scope = k8s_openapi::NamespaceResourceScope;
        }
    };
}
probe_resource!(ProbeV1, "v1");
probe_resource!(ProbeV2, "v2");

impl Spoke<ProbeV2> for ProbeV1 {
    fn to_hub(self) -> Result<ProbeV2, ConversionError> {
        Ok(ProbeV2 {
            api_version: <ProbeV2 as k8s_openapi::Resource>::API_VERSION.to_owned(),
            kind: self.kind,
            metadata: self.metadata,
        })
    }

    fn from_hub(hub: ProbeV2) -> Result<Self, ConversionError> {
        Ok(ProbeV1 {
            api_version: <ProbeV1 as k8s_openapi::Resource>::API_VERSION.to_owned(),
            kind: hub.kind,
            metadata: hub.metadata,
        })
    }
}

/// The probe's conversions, for the server.
pub(super) fn conversion() -> Conversion<ProbeV2> {
    Conversion::<ProbeV2>::new().spoke::<ProbeV1>()
}

/// The probe CRD, converted as `client` says.
pub(super) fn crd(client: &ClientConfig) -> CustomResourceDefinition {
    let version = |name: &str, storage: bool| CustomResourceDefinitionVersion {
        name: name.to_owned(),
        served: true,
        storage,
        schema: Some(CustomResourceValidation {
            open_api_v3_schema: Some(JSONSchemaProps {
                type_: Some("object".to_owned()),
                x_kubernetes_preserve_unknown_fields: Some(true),
                ..JSONSchemaProps::default()
            }),
        }),
        ..CustomResourceDefinitionVersion::default()
    };
    CustomResourceDefinition {
        metadata: ObjectMeta {
            name: Some(format!("{PLURAL}.{GROUP}")),
            ..ObjectMeta::default()
        },
        spec: CustomResourceDefinitionSpec {
            group: GROUP.to_owned(),
            names: CustomResourceDefinitionNames {
                kind: KIND.to_owned(),
                list_kind: Some(format!("{KIND}List")),
                plural: PLURAL.to_owned(),
                singular: Some("conversionprobe".to_owned()),
                ..CustomResourceDefinitionNames::default()
            },
            scope: "Namespaced".to_owned(),
            versions: vec![version("v1", true), version("v2", false)],
            conversion: Some(kctrl_webhook::configuration::crd_conversion(client)),
            preserve_unknown_fields: None,
        },
        status: None,
    }
}

fn resource(version: &str) -> ResourceRef {
    ResourceRef::new(GROUP, version.to_owned(), PLURAL, KIND, Scope::Namespaced)
}

/// Points the probe CRD at `server` and waits (up to `timeout`) until reading a probe object
/// at v2 makes the API server call the server's `/convert`.
pub(super) async fn wait_until_called(
    client: &Client,
    name: &str,
    config: &ClientConfig,
    server: &RunningServer,
    timeout: std::time::Duration,
) -> Result<(), Error> {
    /// One installation at a time points the shared probe CRD at its server.
    static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    let _turn = ONE_AT_A_TIME.lock().await;
    let crd = crd(config);
    super::set_conversion(client, &crd).await?;
    crate::crd::install(client, crd, timeout).await?;
    let v1 = Api::<DynamicObject>::namespaced_dynamic(client.clone(), "default", &resource("v1"));
    let v2 = Api::<DynamicObject>::namespaced_dynamic(client.clone(), "default", &resource("v2"));
    let probe_name = format!("{name}-conversion");
    let probe = DynamicObject {
        api_version: format!("{GROUP}/v1"),
        kind: KIND.to_owned(),
        metadata: ObjectMeta {
            name: Some(probe_name.clone()),
            ..ObjectMeta::default()
        },
        data: serde_json::Map::new(),
    };
    if let Err(e) = v1.create(&PostParams::default(), &probe).await
        && !e.is_already_exists()
    {
        return Err(e.into());
    }
    let deadline = tokio::time::Instant::now() + timeout;
    let called = loop {
        let before = server
            .metrics()
            .requests(kctrl_webhook::server::CONVERSION_PATH, 200);
        // Until the API server uses the new conversion, it may also fail (it called the
        // previous installation's server, gone now): both are retried.
        let read = v2.get(&probe_name).await;
        let after = server
            .metrics()
            .requests(kctrl_webhook::server::CONVERSION_PATH, 200);
        if read.is_ok() && after > before {
            break Ok(());
        }
        if tokio::time::Instant::now() > deadline {
            break Err(Error::Webhook(format!(
                "the API server did not call the conversion webhook of {name} within \
                 {timeout:?} (last read of the probe at v2: {}): can it reach 127.0.0.1 of \
                 this machine?",
                match &read {
                    Ok(_) => "answered without calling it".to_owned(),
                    Err(e) => e.to_string(),
                }
            )));
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    // No probe object stays behind for a stopped server to be asked about.
    let _ = v1.delete(&probe_name, &DeleteParams::default()).await;
    called
}

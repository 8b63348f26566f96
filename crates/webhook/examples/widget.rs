//! A custom resource served at two versions whose schemas differ, converted by a webhook:
//!
//! - `widgets.webhook.kctrl.dev/v1`: `spec.size`, a string `"<width>x<height>"` (`"3x4"`);
//! - `widgets.webhook.kctrl.dev/v2`: `spec.width` and `spec.height`, integers.
//!
//! v2 is the hub; v1 converts to it and back ([`Spoke`]). The API server calls `/convert`
//! whenever an object is read or written at a version other than the one it is stored at.
//! v1 starts as the storage version; switching the CRD's storage version to v2 and writing
//! each object back migrates them.
//!
//! `cargo run -p kctrl-webhook --example widget -- crd` prints the CRD (its conversion points
//! at the Service `widgets-system/widget-webhook`); without arguments it serves on `:9443`
//! with `tls.crt` and `tls.key` from `$CERT_DIR` until stopped. `tests/e2e/webhook.rs` runs the
//! conversions on a real API server.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kctrl_client::crd::{CrdError, VersionSet};
use kctrl_webhook::{
    ClientConfig, Conversion, ConversionError, ServerBuilder, Spoke, WebhookServer,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The first version: the size as one string.
pub(crate) mod v1 {
    use super::*;
    use kctrl_client::CustomResource;

    /// A widget's size, as `<width>x<height>`.
    #[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
    #[resource(
        group = "webhook.kctrl.dev",
        version = "v1",
        kind = "Widget",
        namespaced,
        storage,
        derive = "PartialEq"
    )]
    pub(crate) struct WidgetSpec {
        /// `<width>x<height>`, e.g. `3x4`.
        pub(crate) size: String,
    }
}

/// The second version, the hub: width and height apart.
pub(crate) mod v2 {
    use super::*;
    use kctrl_client::CustomResource;

    /// A widget's width and height.
    #[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
    #[resource(
        group = "webhook.kctrl.dev",
        version = "v2",
        kind = "Widget",
        namespaced,
        derive = "PartialEq"
    )]
    pub(crate) struct WidgetSpec {
        /// The width.
        pub(crate) width: i32,
        /// The height.
        pub(crate) height: i32,
    }
}

impl Spoke<v2::Widget> for v1::Widget {
    fn to_hub(self) -> Result<v2::Widget, ConversionError> {
        let size = &self.spec.size;
        let bad = || {
            ConversionError::new(format!(
                "spec.size {size:?} is not <width>x<height>, e.g. 3x4"
            ))
        };
        let (w, h) = size.split_once('x').ok_or_else(bad)?;
        let (width, height) = (
            w.trim().parse().map_err(|_| bad())?,
            h.trim().parse().map_err(|_| bad())?,
        );
        Ok(v2::Widget {
            metadata: self.metadata,
            spec: v2::WidgetSpec { width, height },
        })
    }

    fn from_hub(hub: v2::Widget) -> Result<Self, ConversionError> {
        Ok(v1::Widget {
            metadata: hub.metadata,
            spec: v1::WidgetSpec {
                size: format!("{}x{}", hub.spec.width, hub.spec.height),
            },
        })
    }
}

/// The conversions: v2 the hub, v1 its spoke.
pub(crate) fn conversion() -> Conversion<v2::Widget> {
    Conversion::<v2::Widget>::new().spoke::<v1::Widget>()
}

/// The server converting widgets at `/convert`.
pub(crate) fn server() -> ServerBuilder {
    WebhookServer::builder().conversion(conversion())
}

/// The CRD with both versions, v1 stored, converted by the webhook `client` reaches (without
/// one, `strategy: None`: for kctrl-testenv, which points it at the test's server).
pub(crate) fn crd(client: Option<&ClientConfig>) -> Result<CustomResourceDefinition, CrdError> {
    let versions = VersionSet::new().with::<v1::Widget>().with::<v2::Widget>();
    match client {
        Some(c) => versions.webhook_conversion(c.conversion()).crd(),
        None => versions.crd(),
    }
}

#[allow(dead_code)] // tests/e2e/webhook.rs includes this file for its types and conversion alone.
#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    if std::env::args().nth(1).as_deref() == Some("crd") {
        let client = ClientConfig::service("widgets-system", "widget-webhook");
        println!("{}", serde_json::to_string_pretty(&crd(Some(&client))?)?);
        return Ok(());
    }
    let mut builder = server();
    if let Some(dir) = std::env::var_os("CERT_DIR") {
        builder = builder.cert_dir(dir);
    }
    // Never cancelled: serves until the process is stopped.
    let running = builder
        .build()?
        .start(tokio_util::sync::CancellationToken::new())
        .await?;
    println!("serving on {}", running.local_addr());
    running.stopped().await;
    Ok(())
}

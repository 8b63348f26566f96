//! A Widget at two versions for the tests: v1 `spec.size` ("3x4"), v2 (the hub)
//! `spec.width` and `spec.height`, the shapes of `examples/widget.rs` and of the
//! ConversionReviews captured in `review/testdata/`.

use kctrl_client::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::conversion::{ConversionError, Spoke};

pub(crate) mod v1 {
    use super::*;

    #[derive(CustomResource, Clone, Debug, Serialize, Deserialize, JsonSchema)]
    #[resource(
        group = "webhook.kctrl.dev",
        version = "v1",
        kind = "Widget",
        namespaced
    )]
    pub(crate) struct WidgetSpec {
        pub(crate) size: String,
    }
}

pub(crate) mod v2 {
    use super::*;

    #[derive(CustomResource, Clone, Debug, Serialize, Deserialize, JsonSchema)]
    #[resource(
        group = "webhook.kctrl.dev",
        version = "v2",
        kind = "Widget",
        namespaced,
        storage
    )]
    pub(crate) struct WidgetSpec {
        pub(crate) width: i32,
        pub(crate) height: i32,
    }
}

impl Spoke<v2::Widget> for v1::Widget {
    fn to_hub(self) -> Result<v2::Widget, ConversionError> {
        let size = &self.spec.size;
        let (w, h) = size
            .split_once('x')
            .ok_or_else(|| ConversionError::new(format!("size {size:?} is not WxH")))?;
        let n = |s: &str| {
            s.parse::<i32>()
                .map_err(|e| ConversionError::new(format!("{s:?}: {e}")))
        };
        Ok(v2::Widget {
            metadata: self.metadata,
            spec: v2::WidgetSpec {
                width: n(w)?,
                height: n(h)?,
            },
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

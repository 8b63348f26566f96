//! Fields whose Rust type depends on the Kubernetes release selected in k8s-openapi.
//!
//! kctrl's library crates compile for every release k8s-openapi supports (1.33 to 1.37); the
//! release is the choice of the binary at the end of the dependency graph. A few fields
//! change shape between releases in k8s-openapi: from 1.37 on, the `spec` of a Deployment,
//! ReplicaSet, StatefulSet and DaemonSet is required (`DeploymentSpec`, not
//! `Option<DeploymentSpec>`), and so are the `type` and `status` of their conditions
//! (`Option<String>` before, `String` in 1.37 — the other way round). Code that must build
//! for every release reads and writes such fields through the two traits here. A spec is
//! built with [`Versioned::from_value`]; a condition's text with `.into()`, which turns a
//! `String` into either a `String` or an `Option<String>`:
//!
//! ```
//! use k8s_openapi::api::apps::v1::{Deployment, DeploymentCondition, DeploymentSpec};
//! use kctrl_client::versioned::{Text, Versioned};
//!
//! let mut d = Deployment {
//!     spec: Versioned::from_value(DeploymentSpec { replicas: Some(3), ..Default::default() }),
//!     ..Default::default()
//! };
//! assert_eq!(d.spec.get().and_then(|s| s.replicas), Some(3));
//! d.spec.get_mut().paused = Some(true);
//!
//! let c = DeploymentCondition {
//!     type_: "Available".to_owned().into(),
//!     status: "True".to_owned().into(),
//!     ..Default::default()
//! };
//! assert_eq!((c.type_.text(), c.status.text()), ("Available", "True"));
//! ```
//!
//! Code that targets one release only can ignore this module and use the fields directly.

/// The Kubernetes release k8s-openapi was built for in this build (`"1.37"`, say): the one
/// selected by the binary's version feature.
pub const K8S_API_VERSION: &str = env!("KCTRL_K8S_API_VERSION");

/// A field k8s-openapi declares as `T` in some Kubernetes releases and as `Option<T>` in
/// others (a workload's `spec`): implemented for both shapes.
pub trait Versioned<T> {
    /// The value, `None` only where the field is optional and unset.
    fn get(&self) -> Option<&T>;
    /// The value, set to `T::default()` first where the field is optional and unset (as
    /// `Option::get_or_insert_default`).
    fn get_mut(&mut self) -> &mut T;
    /// The value, consuming the field.
    fn into_value(self) -> Option<T>;
    /// The field holding `value`.
    fn from_value(value: T) -> Self;
}

impl<T: Default> Versioned<T> for Option<T> {
    fn get(&self) -> Option<&T> {
        self.as_ref()
    }
    fn get_mut(&mut self) -> &mut T {
        self.get_or_insert_default()
    }
    fn into_value(self) -> Option<T> {
        self
    }
    fn from_value(value: T) -> Self {
        Some(value)
    }
}

/// `Versioned<T>` for a required field of type `T`.
macro_rules! required {
    ($($ty:path),* $(,)?) => {$(
        impl Versioned<$ty> for $ty {
            fn get(&self) -> Option<&$ty> {
                Some(self)
            }
            fn get_mut(&mut self) -> &mut $ty {
                self
            }
            fn into_value(self) -> Option<$ty> {
                Some(self)
            }
            fn from_value(value: $ty) -> Self {
                value
            }
        }
    )*};
}

required!(
    k8s_openapi::api::apps::v1::DeploymentSpec,
    k8s_openapi::api::apps::v1::ReplicaSetSpec,
    k8s_openapi::api::apps::v1::StatefulSetSpec,
    k8s_openapi::api::apps::v1::DaemonSetSpec,
);

/// A string field k8s-openapi declares as `String` in some Kubernetes releases and as
/// `Option<String>` in others (a workload condition's `type` and `status`).
pub trait Text {
    /// The text; `""` where the field is optional and unset (what the API server's JSON
    /// leaves out is the empty string).
    fn text(&self) -> &str;
}

impl Text for String {
    fn text(&self) -> &str {
        self
    }
}

impl Text for Option<String> {
    fn text(&self) -> &str {
        self.as_deref().unwrap_or_default()
    }
}

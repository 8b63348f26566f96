//! Which API resource a request is about: group, version, plural name and scope.
//!
//! [`ResourceRef`] is the untyped description the [`Backend`](crate::Backend) works with. It
//! is derived from a k8s-openapi type with [`ResourceRef::of`], so typed code never spells
//! paths by hand.

use std::borrow::Cow;

/// Whether objects of a resource live in a namespace or at cluster scope.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Scope {
    /// Objects live in a namespace (Pods, Deployments, ...).
    Namespaced,
    /// Objects are cluster-wide (Nodes, Namespaces, ...).
    Cluster,
}

/// A Kubernetes API resource: `group/version`, plural name, kind and scope.
///
/// ```
/// use k8s_openapi::api::apps::v1::Deployment;
/// use kctrl_client::{ResourceRef, Scope};
///
/// let r = ResourceRef::of::<Deployment>();
/// assert_eq!(r.group, "apps");
/// assert_eq!(r.version, "v1");
/// assert_eq!(r.plural, "deployments");
/// assert_eq!(r.api_version(), "apps/v1");
/// assert_eq!(r.scope, Scope::Namespaced);
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ResourceRef {
    /// API group; empty for the core group.
    pub group: Cow<'static, str>,
    /// API version within the group, e.g. `v1`.
    pub version: Cow<'static, str>,
    /// Plural resource name used in URLs, e.g. `deployments`.
    pub plural: Cow<'static, str>,
    /// Kind of the objects, e.g. `Deployment`.
    pub kind: Cow<'static, str>,
    /// Namespaced or cluster-scoped.
    pub scope: Scope,
}

impl ResourceRef {
    /// A resource named at run time (for [`DynamicObject`](crate::DynamicObject)s): group
    /// (empty for the core group), version, plural, kind and scope.
    ///
    /// ```
    /// use kctrl_client::{ResourceRef, Scope};
    ///
    /// let r = ResourceRef::new("stable.example.com", "v1", "crontabs", "CronTab", Scope::Namespaced);
    /// assert_eq!(r.api_version(), "stable.example.com/v1");
    /// assert_eq!(r.qualified_name(), "crontabs.stable.example.com");
    /// ```
    pub fn new(
        group: impl Into<String>,
        version: impl Into<String>,
        plural: impl Into<String>,
        kind: impl Into<String>,
        scope: Scope,
    ) -> Self {
        Self {
            group: Cow::Owned(group.into()),
            version: Cow::Owned(version.into()),
            plural: Cow::Owned(plural.into()),
            kind: Cow::Owned(kind.into()),
            scope,
        }
    }

    /// The resource of the k8s-openapi type `K`.
    pub fn of<K>() -> Self
    where
        K: k8s_openapi::Resource,
        K::Scope: 'static,
    {
        let scope = if std::any::TypeId::of::<K::Scope>()
            == std::any::TypeId::of::<k8s_openapi::NamespaceResourceScope>()
        {
            Scope::Namespaced
        } else {
            Scope::Cluster
        };
        Self {
            group: Cow::Borrowed(K::GROUP),
            version: Cow::Borrowed(K::VERSION),
            plural: Cow::Borrowed(K::URL_PATH_SEGMENT),
            kind: Cow::Borrowed(K::KIND),
            scope,
        }
    }

    /// `group/version`, or just `version` for the core group (the `apiVersion` field).
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_string()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// Whether objects of this resource live in namespaces.
    pub fn is_namespaced(&self) -> bool {
        self.scope == Scope::Namespaced
    }

    /// The resource's name as RBAC and error messages spell it: `deployments.apps`, or `pods`.
    pub fn qualified_name(&self) -> String {
        if self.group.is_empty() {
            self.plural.to_string()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Node, Pod};

    #[test]
    fn core_group_resources() {
        let pods = ResourceRef::of::<Pod>();
        assert_eq!(pods.api_version(), "v1");
        assert_eq!(pods.qualified_name(), "pods");
        assert!(pods.is_namespaced());
        let nodes = ResourceRef::of::<Node>();
        assert_eq!(nodes.scope, Scope::Cluster);
        assert_eq!(nodes.kind, "Node");
    }
}

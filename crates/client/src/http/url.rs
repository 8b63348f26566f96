//! Request URLs: where an [`ApiRequest`] goes on the wire.
//!
//! Pure functions over the server's base URL, so every path rule is table-tested without a
//! server. The layout is the API server's:
//!
//! ```text
//! {base}/api/v1[/namespaces/{ns}]/{plural}[/{name}[/{subresource}]]          core group
//! {base}/apis/{group}/{version}[/namespaces/{ns}]/{plural}[/{name}[/{sub}]]  named groups
//! ```
//!
//! A base URL with a path (a proxy such as `https://rancher/k8s/clusters/c1`) keeps it.
//! Every segment is percent-encoded; like client-go, names that cannot be a path segment
//! (`.`, `..`, or containing `/` or `%`) are rejected rather than silently escaped.

use url::Url;

use crate::error::Error;
use crate::request::{ApiRequest, Operation};

/// The URL of `request`, including its query.
pub(crate) fn request_url(base: &Url, request: &ApiRequest) -> Result<Url, Error> {
    let resource = &request.resource;
    let mut segments: Vec<&str> = group_version_segments(&resource.group, &resource.version);
    if resource.is_namespaced()
        && let Some(ns) = request.namespace.as_deref().filter(|ns| !ns.is_empty())
    {
        check_segment("namespace", ns)?;
        segments.extend(["namespaces", ns]);
    }
    segments.push(&resource.plural);
    if let Some(name) = request.name() {
        if name.is_empty() {
            return Err(Error::InvalidRequest(format!(
                "{} {}: the resource name may not be empty",
                request.verb(),
                resource.qualified_name()
            )));
        }
        check_segment("name", name)?;
        segments.push(name);
    }
    if let Some(sub) = request.subresource.as_deref() {
        if request.name().is_none() {
            return Err(Error::InvalidRequest(format!(
                "{} {}/{sub}: a subresource needs an object name",
                request.verb(),
                resource.qualified_name()
            )));
        }
        check_segment("subresource", sub)?;
        segments.push(sub);
    }
    let query = match &request.operation {
        Operation::Get { .. } | Operation::Delete { .. } => Vec::new(),
        Operation::List(p) => p.query_pairs(),
        Operation::Watch(p) => p.query_pairs(),
        Operation::Create { params, .. } | Operation::Update { params, .. } => params.query_pairs(),
        Operation::Patch { params, .. } => params.query_pairs(),
    };
    Ok(join(base, &segments, &query))
}

/// The discovery URL of a group/version: `/api/v1` for `"v1"`, `/apis/{g}/{v}` otherwise.
pub(crate) fn group_version_url(base: &Url, group_version: &str) -> Result<Url, Error> {
    let (group, version) = match group_version.split_once('/') {
        Some((g, v)) => (g, v),
        None => ("", group_version),
    };
    for (what, s) in [("group", group), ("version", version)] {
        if !(what == "group" && s.is_empty()) {
            check_segment(what, s)?;
        }
    }
    if version.is_empty() {
        return Err(Error::InvalidRequest(format!(
            "group/version {group_version:?} has no version"
        )));
    }
    Ok(join(base, &group_version_segments(group, version), &[]))
}

/// `base` followed by fixed path segments, e.g. `["version"]`.
pub(crate) fn abs_url(base: &Url, segments: &[&str]) -> Url {
    join(base, segments, &[])
}

fn group_version_segments<'a>(group: &'a str, version: &'a str) -> Vec<&'a str> {
    if group.is_empty() {
        vec!["api", version]
    } else {
        vec!["apis", group, version]
    }
}

/// Appends percent-encoded `segments` to the base path and sets the query.
fn join(base: &Url, segments: &[&str], query: &[(&'static str, String)]) -> Url {
    let mut url = base.clone();
    url.set_fragment(None);
    url.set_query(None);
    {
        // The base was checked to be a hierarchical http(s) URL in HttpBackend::new.
        let mut path = url
            .path_segments_mut()
            .expect("http(s) URLs always have a path");
        path.pop_if_empty();
        path.extend(segments);
    }
    if !query.is_empty() {
        url.query_pairs_mut()
            .extend_pairs(query.iter().map(|(k, v)| (*k, v.as_str())));
    }
    url
}

/// Rejects values that would change the path's meaning (client-go's
/// `IsValidPathSegmentName`).
fn check_segment(what: &str, value: &str) -> Result<(), Error> {
    let problem = if value == "." || value == ".." {
        Some(format!("may not be {value:?}"))
    } else if value.contains('/') {
        Some("may not contain '/'".to_owned())
    } else if value.contains('%') {
        Some("may not contain '%'".to_owned())
    } else {
        None
    };
    match problem {
        Some(p) => Err(Error::InvalidRequest(format!("{what} {value:?} {p}"))),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;

    use bytes::Bytes;
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::core::v1::{Namespace, Node, Pod};

    use super::*;
    use crate::request::{
        DeleteParams, ListParams, Patch, PatchParams, PostParams, ResourceVersionMatch, WatchParams,
    };
    use crate::resource::ResourceRef;

    fn base(s: &str) -> Url {
        Url::parse(s).unwrap()
    }

    fn req(resource: ResourceRef, ns: Option<&str>, op: Operation) -> ApiRequest {
        ApiRequest::new(resource, ns.map(str::to_owned), None, op)
    }

    fn get(name: &str) -> Operation {
        Operation::Get {
            name: name.to_owned(),
        }
    }

    #[test]
    fn paths_per_scope_and_group() {
        let b = base("https://example.com:6443");
        let cases: Vec<(ApiRequest, &str)> = vec![
            (
                req(ResourceRef::of::<Pod>(), Some("default"), get("p")),
                "https://example.com:6443/api/v1/namespaces/default/pods/p",
            ),
            (
                req(
                    ResourceRef::of::<Pod>(),
                    None,
                    Operation::List(ListParams::default()),
                ),
                "https://example.com:6443/api/v1/pods",
            ),
            (
                req(
                    ResourceRef::of::<Deployment>(),
                    Some("kube-system"),
                    Operation::List(ListParams::default()),
                ),
                "https://example.com:6443/apis/apps/v1/namespaces/kube-system/deployments",
            ),
            (
                req(ResourceRef::of::<Node>(), None, get("n1")),
                "https://example.com:6443/api/v1/nodes/n1",
            ),
            // A namespace on a cluster-scoped resource is ignored.
            (
                req(ResourceRef::of::<Node>(), Some("default"), get("n1")),
                "https://example.com:6443/api/v1/nodes/n1",
            ),
            (
                req(ResourceRef::of::<Namespace>(), None, get("kube-system")),
                "https://example.com:6443/api/v1/namespaces/kube-system",
            ),
            // An empty namespace means all namespaces, as in client-go.
            (
                req(
                    ResourceRef::of::<Pod>(),
                    Some(""),
                    Operation::List(ListParams::default()),
                ),
                "https://example.com:6443/api/v1/pods",
            ),
        ];
        for (r, want) in cases {
            assert_eq!(request_url(&b, &r).unwrap().as_str(), want, "{r:?}");
        }
    }

    #[test]
    fn subresource_follows_name() {
        let mut r = req(
            ResourceRef::of::<Deployment>(),
            Some("ns"),
            Operation::Update {
                name: "web".into(),
                body: Bytes::new(),
                params: PostParams::default(),
            },
        );
        r.subresource = Some("status".into());
        assert_eq!(
            request_url(&base("http://h"), &r).unwrap().as_str(),
            "http://h/apis/apps/v1/namespaces/ns/deployments/web/status"
        );
        let mut create = req(
            ResourceRef::of::<Pod>(),
            Some("ns"),
            Operation::Create {
                body: Bytes::new(),
                params: PostParams::default(),
            },
        );
        create.subresource = Some("status".into());
        assert!(matches!(
            request_url(&base("http://h"), &create),
            Err(Error::InvalidRequest(_))
        ));
    }

    #[test]
    fn base_path_prefix_is_kept() {
        for b in [
            "https://rancher.example/k8s/clusters/c1",
            "https://rancher.example/k8s/clusters/c1/",
        ] {
            let r = req(ResourceRef::of::<Pod>(), Some("default"), get("p"));
            assert_eq!(
                request_url(&base(b), &r).unwrap().as_str(),
                "https://rancher.example/k8s/clusters/c1/api/v1/namespaces/default/pods/p"
            );
        }
        assert_eq!(
            abs_url(&base("http://h/prefix/"), &["version"]).as_str(),
            "http://h/prefix/version"
        );
    }

    #[test]
    fn segments_and_query_are_percent_encoded() {
        let r = req(ResourceRef::of::<Pod>(), Some("team a"), get("x?y#z"));
        assert_eq!(
            request_url(&base("http://h"), &r).unwrap().as_str(),
            "http://h/api/v1/namespaces/team%20a/pods/x%3Fy%23z"
        );
        let list = req(
            ResourceRef::of::<Pod>(),
            None,
            Operation::List(ListParams {
                label_selector: Some("app in (a,b),tier!=db".into()),
                field_selector: Some("spec.nodeName=n&1".into()),
                limit: Some(5),
                resource_version: Some("0".into()),
                resource_version_match: Some(ResourceVersionMatch::NotOlderThan),
                ..Default::default()
            }),
        );
        let url = request_url(&base("http://h"), &list).unwrap();
        assert_eq!(
            url.query(),
            Some(
                "labelSelector=app+in+%28a%2Cb%29%2Ctier%21%3Ddb&fieldSelector=spec.nodeName%3Dn%261\
                 &limit=5&resourceVersion=0&resourceVersionMatch=NotOlderThan"
            )
        );
        // Round trip: the server decodes what we meant.
        let pairs: Vec<(String, String)> = url.query_pairs().into_owned().collect();
        assert_eq!(pairs[0].1, "app in (a,b),tier!=db");
        assert_eq!(pairs[1].1, "spec.nodeName=n&1");
    }

    // Port of client-go TestInvalidSegments.
    #[test]
    fn invalid_segments() {
        for bad in [".", "..", "a/b", "a%b"] {
            let r = req(ResourceRef::of::<Pod>(), Some("default"), get(bad));
            let err = request_url(&base("http://h"), &r).unwrap_err();
            assert!(matches!(err, Error::InvalidRequest(_)), "{bad}: {err}");
            let r = req(ResourceRef::of::<Pod>(), Some(bad), get("ok"));
            assert!(
                request_url(&base("http://h"), &r).is_err(),
                "namespace {bad}"
            );
        }
        let r = req(ResourceRef::of::<Pod>(), Some("default"), get(""));
        assert!(request_url(&base("http://h"), &r).is_err());
    }

    #[test]
    fn query_per_verb() {
        let b = base("http://h");
        let watch = req(
            ResourceRef::of::<Pod>(),
            Some("ns"),
            Operation::Watch(WatchParams {
                resource_version: Some("7".into()),
                timeout_seconds: Some(30),
                ..Default::default()
            }),
        );
        assert_eq!(
            request_url(&b, &watch).unwrap().as_str(),
            "http://h/api/v1/namespaces/ns/pods?watch=1&resourceVersion=7&allowWatchBookmarks=true&timeoutSeconds=30"
        );
        let post = PatchParams {
            field_manager: Some("kctrl".into()),
            dry_run: true,
            force: false,
        };
        let patch = req(
            ResourceRef::of::<Pod>(),
            Some("ns"),
            Operation::Patch {
                name: "p".into(),
                patch: Patch::Merge(serde_json::json!({})),
                params: post,
            },
        );
        assert_eq!(
            request_url(&b, &patch).unwrap().as_str(),
            "http://h/api/v1/namespaces/ns/pods/p?fieldManager=kctrl&dryRun=All"
        );
        let delete = req(
            ResourceRef::of::<Pod>(),
            Some("ns"),
            Operation::Delete {
                name: "p".into(),
                params: DeleteParams {
                    dry_run: true,
                    ..Default::default()
                },
            },
        );
        // Delete options travel in the body.
        assert_eq!(
            request_url(&b, &delete).unwrap().as_str(),
            "http://h/api/v1/namespaces/ns/pods/p"
        );
    }

    #[test]
    fn custom_resources_use_their_group() {
        let r = ResourceRef {
            group: Cow::Borrowed("example.com"),
            version: Cow::Borrowed("v1alpha1"),
            plural: Cow::Borrowed("widgets"),
            kind: Cow::Borrowed("Widget"),
            scope: crate::resource::Scope::Namespaced,
        };
        let r = req(r, Some("ns"), get("w"));
        assert_eq!(
            request_url(&base("http://h"), &r).unwrap().as_str(),
            "http://h/apis/example.com/v1alpha1/namespaces/ns/widgets/w"
        );
    }

    #[test]
    fn discovery_urls() {
        let b = base("http://h/p");
        assert_eq!(
            group_version_url(&b, "v1").unwrap().as_str(),
            "http://h/p/api/v1"
        );
        assert_eq!(
            group_version_url(&b, "apps/v1").unwrap().as_str(),
            "http://h/p/apis/apps/v1"
        );
        assert!(group_version_url(&b, "apps/").is_err());
        assert!(group_version_url(&b, "a/../v1").is_err());
    }
}

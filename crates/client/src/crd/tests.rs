//! The derive's output, compiled: inside this crate the generated code reaches kctrl-client
//! as `crate` (`crate = "crate"`).

use k8s_openapi::{List, ListableResource, Metadata, Resource};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::*;
use crate::{CustomResource, PartialObjectMetadata, ResourceRef, Scope};

/// FooSpec is the spec for a Foo resource.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[resource(
    group = "samplecontroller.k8s.io",
    version = "v1alpha1",
    kind = "Foo",
    namespaced,
    status = "FooStatus",
    derive = "PartialEq",
    derive = "Default",
    shortname = "fo",
    category = "samples",
    printcolumn(
        name = "Deployment",
        type = "string",
        json_path = ".spec.deploymentName"
    ),
    printcolumn(
        name = "Available",
        type = "integer",
        json_path = ".status.availableReplicas",
        description = "available replicas",
        priority = 1
    ),
    scale(
        spec_replicas_path = ".spec.replicas",
        status_replicas_path = ".status.availableReplicas"
    ),
    selectable_field = ".spec.deploymentName",
    annotation("api-approved.kubernetes.io", "unapproved, testing only"),
    label("app.kubernetes.io/part-of", "kctrl"),
    crate = "crate"
)]
#[serde(rename_all = "camelCase")]
pub(super) struct FooSpec {
    deployment_name: String,
    #[schemars(range(min = 1, max = 10))]
    replicas: Option<i32>,
}

/// FooStatus is the status for a Foo resource.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(super) struct FooStatus {
    available_replicas: i32,
}

/// A cluster-scoped resource without status.
#[derive(CustomResource, Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[resource(
    group = "example.com",
    version = "v1",
    kind = "Policy",
    plural = "policies",
    crate = "crate"
)]
struct PolicySpec {
    rules: Vec<String>,
}

fn foo() -> Foo {
    let mut f = Foo::new(
        "example-foo",
        FooSpec {
            deployment_name: "example-foo".into(),
            replicas: Some(1),
        },
    );
    f.metadata.namespace = Some("default".into());
    f
}

#[test]
fn the_trait_constants_are_the_resources() {
    assert_eq!(Foo::API_VERSION, "samplecontroller.k8s.io/v1alpha1");
    assert_eq!(Foo::GROUP, "samplecontroller.k8s.io");
    assert_eq!(Foo::VERSION, "v1alpha1");
    assert_eq!(Foo::KIND, "Foo");
    assert_eq!(Foo::URL_PATH_SEGMENT, "foos");
    assert_eq!(Foo::LIST_KIND, "FooList");
    assert_eq!(ResourceRef::of::<Foo>().scope, Scope::Namespaced);
    assert_eq!(Foo::crd_name(), "foos.samplecontroller.k8s.io");
    assert_eq!(ResourceRef::of::<Policy>().scope, Scope::Cluster);
    assert_eq!(Policy::URL_PATH_SEGMENT, "policies");
    assert_eq!(Policy::LIST_KIND, "PolicyList");
    // Metadata<Ty = ObjectMeta>, as controller-ref's Owner::of needs.
    let mut f = foo();
    f.metadata_mut().uid = Some("u".into());
    assert_eq!(f.metadata().uid.as_deref(), Some("u"));
    // Requested derives.
    assert_eq!(Foo::default().metadata, ObjectMeta::default());
    assert_eq!(f.clone(), f);
}

#[test]
fn serde_round_trip_writes_api_version_and_kind() {
    let mut f = foo();
    assert_eq!(
        serde_json::to_value(&f).unwrap(),
        json!({
            "apiVersion": "samplecontroller.k8s.io/v1alpha1",
            "kind": "Foo",
            "metadata": {"name": "example-foo", "namespace": "default"},
            "spec": {"deploymentName": "example-foo", "replicas": 1},
        })
    );
    f.status = Some(FooStatus {
        available_replicas: 1,
    });
    let v = serde_json::to_value(&f).unwrap();
    assert_eq!(v["status"], json!({"availableReplicas": 1}));
    assert_eq!(serde_json::from_value::<Foo>(v).unwrap(), f);
    // No status field without a status type.
    let p = Policy::new("p", PolicySpec { rules: vec![] });
    let v = serde_json::to_value(&p).unwrap();
    assert_eq!(
        v,
        json!({"apiVersion": "example.com/v1", "kind": "Policy", "metadata": {"name": "p"}, "spec": {"rules": []}})
    );
    // ... and a status sent by someone else is ignored.
    let mut with_status = v.clone();
    with_status["status"] = json!({"anything": 1});
    assert_eq!(
        serde_json::from_value::<Policy>(with_status)
            .unwrap()
            .spec
            .rules,
        Vec::<String>::new()
    );
}

#[test]
fn another_kind_or_version_is_refused_by_name() {
    let mut v = serde_json::to_value(foo()).unwrap();
    v["kind"] = json!("Bar");
    let err = serde_json::from_value::<Foo>(v.clone())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(r#"expected kind "Foo" (samplecontroller.k8s.io/v1alpha1), found "Bar""#),
        "{err}"
    );
    v["kind"] = json!("Foo");
    v["apiVersion"] = json!("samplecontroller.k8s.io/v1");
    let err = serde_json::from_value::<Foo>(v).unwrap_err().to_string();
    assert!(err.contains(r#"expected apiVersion "samplecontroller.k8s.io/v1alpha1" for Foo, found "samplecontroller.k8s.io/v1""#), "{err}");
}

#[test]
fn lists_partial_metadata_and_views_work() {
    let body = json!({
        "apiVersion": "samplecontroller.k8s.io/v1alpha1", "kind": "FooList",
        "metadata": {"resourceVersion": "7"},
        "items": [serde_json::to_value(foo()).unwrap()],
    });
    let list: List<Foo> = serde_json::from_value(body).unwrap();
    assert_eq!(list.items, [foo()]);
    assert_eq!(
        ResourceRef::of::<PartialObjectMetadata<Foo>>().plural,
        "foos"
    );

    #[derive(Clone, Debug, Deserialize)]
    struct FooName {
        metadata: ObjectMeta,
    }
    crate::resource_view!(FooName => Foo);
    let view: FooName = serde_json::from_value(serde_json::to_value(foo()).unwrap()).unwrap();
    assert_eq!(view.metadata.name.as_deref(), Some("example-foo"));
    assert_eq!(ResourceRef::of::<FooName>(), ResourceRef::of::<Foo>());
}

#[test]
fn the_crd_says_everything_the_attribute_does() {
    let crd = Foo::try_crd().unwrap();
    assert_eq!(crd, Foo::crd());
    assert_eq!(
        crd.metadata.name.as_deref(),
        Some("foos.samplecontroller.k8s.io")
    );
    assert_eq!(
        crd.metadata.annotations.as_ref().unwrap()["api-approved.kubernetes.io"],
        "unapproved, testing only"
    );
    assert_eq!(
        crd.metadata.labels.as_ref().unwrap()["app.kubernetes.io/part-of"],
        "kctrl"
    );
    let s = &crd.spec;
    assert_eq!(s.group, "samplecontroller.k8s.io");
    assert_eq!(s.scope, "Namespaced");
    assert_eq!(s.names.kind, "Foo");
    assert_eq!(s.names.list_kind.as_deref(), Some("FooList"));
    assert_eq!(s.names.plural, "foos");
    assert_eq!(s.names.singular.as_deref(), Some("foo"));
    assert_eq!(s.names.short_names, Some(vec!["fo".to_owned()]));
    assert_eq!(s.names.categories, Some(vec!["samples".to_owned()]));
    assert_eq!(s.versions.len(), 1);
    let v = &s.versions[0];
    assert_eq!(v.name, "v1alpha1");
    assert!(v.served && v.storage);
    let sub = v.subresources.as_ref().unwrap();
    assert_eq!(sub.status.as_ref().unwrap().0, json!({}));
    let scale = sub.scale.as_ref().unwrap();
    assert_eq!(scale.spec_replicas_path, ".spec.replicas");
    assert_eq!(scale.status_replicas_path, ".status.availableReplicas");
    let columns = v.additional_printer_columns.as_ref().unwrap();
    assert_eq!(columns.len(), 2);
    assert_eq!(
        (columns[1].name.as_str(), columns[1].type_.as_str()),
        ("Available", "integer")
    );
    assert_eq!(columns[1].priority, Some(1));
    assert_eq!(columns[0].priority, None);
    assert_eq!(
        v.selectable_fields.as_ref().unwrap()[0].json_path,
        ".spec.deploymentName"
    );
    let schema = serde_json::to_value(
        v.schema
            .as_ref()
            .unwrap()
            .open_api_v3_schema
            .as_ref()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(
        schema,
        json!({
            "type": "object",
            "required": ["spec"],
            "properties": {
                "spec": {
                    "description": "FooSpec is the spec for a Foo resource.",
                    "type": "object",
                    "required": ["deploymentName"],
                    "properties": {
                        "deploymentName": {"type": "string"},
                        // Not nullable: the scale subresource reads it and cannot read a null.
                        "replicas": {"type": "integer", "format": "int32", "minimum": 1.0, "maximum": 10.0},
                    },
                },
                "status": {
                    "description": "FooStatus is the status for a Foo resource.",
                    "type": "object",
                    "required": ["availableReplicas"],
                    "properties": {"availableReplicas": {"type": "integer", "format": "int32"}},
                },
            },
        })
    );

    let policy = Policy::crd();
    assert_eq!(policy.spec.scope, "Cluster");
    assert!(policy.spec.versions[0].subresources.is_none());
    let root = policy.spec.versions[0]
        .schema
        .as_ref()
        .unwrap()
        .open_api_v3_schema
        .as_ref()
        .unwrap();
    assert_eq!(
        root.properties.as_ref().unwrap().keys().collect::<Vec<_>>(),
        ["spec"]
    );
}

#[derive(CustomResource, Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[resource(group = "example.com", version = "v1", kind = "Tree", crate = "crate")]
struct TreeSpec {
    root: TreeNode,
}

#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
struct TreeNode {
    children: Vec<TreeNode>,
}

#[test]
fn try_crd_refuses_what_crd_relaxes() {
    let err = Tree::try_crd().unwrap_err();
    assert!(
        matches!(&err, CrdError::NotStructural { kind, relaxed } if kind == "Tree" && relaxed.len() == 1)
    );
    assert!(
        err.to_string().starts_with("the schema of Tree is not structural everywhere (spec.root.children[*]: the recursive type TreeNode"),
        "{err}"
    );
    // crd() still gives a CRD the API server accepts.
    let crd = Tree::crd();
    let spec = &crd.spec.versions[0]
        .schema
        .as_ref()
        .unwrap()
        .open_api_v3_schema
        .as_ref()
        .unwrap()
        .properties
        .as_ref()
        .unwrap()["spec"];
    let children = &spec.properties.as_ref().unwrap()["root"]
        .properties
        .as_ref()
        .unwrap()["children"];
    assert_eq!(children.type_.as_deref(), Some("array"));
}

mod v1 {
    use super::*;

    #[derive(CustomResource, Clone, Debug, Serialize, Deserialize, JsonSchema)]
    #[resource(
        group = "example.com",
        version = "v1",
        kind = "Widget",
        namespaced,
        storage,
        status = "WidgetStatus",
        crate = "crate"
    )]
    pub(super) struct WidgetSpec {
        pub(super) size: i32,
    }

    #[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
    pub(super) struct WidgetStatus {
        pub(super) ready: bool,
    }

    #[derive(CustomResource, Clone, Debug, Serialize, Deserialize, JsonSchema)]
    #[resource(
        group = "example.com",
        version = "v1",
        kind = "Gadget",
        namespaced,
        storage,
        crate = "crate"
    )]
    pub(super) struct GadgetSpec {}
}

mod v2 {
    use super::*;

    #[derive(CustomResource, Clone, Debug, Serialize, Deserialize, JsonSchema)]
    #[resource(
        group = "example.com",
        version = "v2",
        kind = "Widget",
        namespaced,
        status = "super::v1::WidgetStatus",
        printcolumn(name = "Size", type = "integer", json_path = ".spec.size"),
        crate = "crate"
    )]
    pub(super) struct WidgetSpec {
        pub(super) size: i32,
        pub(super) color: Option<String>,
    }

    #[derive(CustomResource, Clone, Debug, Serialize, Deserialize, JsonSchema)]
    #[resource(
        group = "example.com",
        version = "v2",
        kind = "Widget",
        struct_name = "StoredWidget",
        namespaced,
        storage,
        served = false,
        deprecated,
        deprecation_warning = "use v1",
        crate = "crate"
    )]
    pub(super) struct StoredWidgetSpec {
        pub(super) size: i32,
    }

    #[derive(CustomResource, Clone, Debug, Serialize, Deserialize, JsonSchema)]
    #[resource(
        group = "example.com",
        version = "v2",
        kind = "Widget",
        struct_name = "ClusterWidget",
        crate = "crate"
    )]
    pub(super) struct ClusterWidgetSpec {}
}

mod v3 {
    use super::*;

    #[derive(CustomResource, Clone, Debug, Serialize, Deserialize, JsonSchema)]
    #[resource(
        group = "example.com",
        version = "v3",
        kind = "Widget",
        namespaced,
        shortname = "wd",
        crate = "crate"
    )]
    pub(super) struct WidgetSpec {}
}

#[test]
fn versions_merge_into_one_crd_with_one_storage_version() {
    let crd = VersionSet::new()
        .with::<v1::Widget>()
        .with::<v2::Widget>()
        .crd()
        .unwrap();
    let versions: Vec<(&str, bool)> = crd
        .spec
        .versions
        .iter()
        .map(|v| (v.name.as_str(), v.storage))
        .collect();
    assert_eq!(versions, [("v1", true), ("v2", false)]);
    assert_eq!(crd.metadata.name.as_deref(), Some("widgets.example.com"));
    // Each version keeps its own schema and columns.
    let v2 = &crd.spec.versions[1];
    assert!(v2.additional_printer_columns.is_some());
    assert!(crd.spec.versions[0].additional_printer_columns.is_none());
    let spec2 = &v2
        .schema
        .as_ref()
        .unwrap()
        .open_api_v3_schema
        .as_ref()
        .unwrap()
        .properties
        .as_ref()
        .unwrap()["spec"];
    assert!(spec2.properties.as_ref().unwrap().contains_key("color"));

    let flags = VersionSet::new().with::<v2::StoredWidget>().crd().unwrap();
    let v = &flags.spec.versions[0];
    assert!(!v.served && v.storage && v.deprecated == Some(true));
    assert_eq!(v.deprecation_warning.as_deref(), Some("use v1"));
}

#[test]
fn version_set_errors_say_what_to_change() {
    let err = VersionSet::new().crd().unwrap_err();
    assert_eq!(err, CrdError::NoVersions);

    let err = VersionSet::new()
        .with::<v2::Widget>()
        .with::<v3::Widget>()
        .crd()
        .unwrap_err();
    assert!(
        matches!(&err, CrdError::Mismatch { what, .. } if what.starts_with("names")),
        "{err}"
    );

    let err = VersionSet::new()
        .with::<v2::Widget>()
        .with::<v1::Widget>()
        .with::<v2::StoredWidget>()
        .crd()
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "version v2 of Widget is given twice; each version is one Rust type"
    );

    let err = VersionSet::new()
        .with::<v1::Widget>()
        .with::<v2::ClusterWidget>()
        .crd()
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "the versions of Widget disagree on scope: v1 has Namespaced, v2 has Cluster; make them the same"
    );

    let err = VersionSet::new()
        .with::<v1::Widget>()
        .with::<v1::Gadget>()
        .crd()
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("disagree on kind: v1 has Widget, v1 has Gadget"),
        "{err}"
    );

    let err = VersionSet::new().with::<v2::Widget>().crd().unwrap_err();
    assert_eq!(
        err.to_string(),
        "exactly one version of Widget must be the storage version, but none is: write `storage` in the #[resource(...)] of one of v2"
    );
    let err = VersionSet::new()
        .with::<v1::Widget>()
        .with::<v2::StoredWidget>()
        .crd()
        .unwrap_err();
    assert!(
        err.to_string().contains(
            "but 2 are (v1, v2): write `storage` in the #[resource(...)] of only one of them"
        ),
        "{err}"
    );

    let err = VersionSet::new()
        .with::<v1::Widget>()
        .with_strict::<Tree>()
        .crd()
        .unwrap_err();
    assert!(matches!(err, CrdError::NotStructural { .. }));
}

/// A spec embedding a Pod template, as a CronJob's Job template does.
#[derive(CustomResource, Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[resource(
    group = "example.com",
    version = "v1",
    kind = "Runner",
    namespaced,
    crate = "crate"
)]
struct RunnerSpec {
    /// The Pods it runs.
    template: k8s_openapi::api::core::v1::PodTemplateSpec,
}

#[test]
fn capped_descriptions_fit_a_client_side_apply() {
    let size = |crd: &CustomResourceDefinition| serde_json::to_vec(crd).unwrap().len();
    let full = Runner::crd();
    let mut none = full.clone();
    crate::crd::cap_descriptions(&mut none, 0);
    let mut short = full.clone();
    crate::crd::cap_descriptions(&mut short, 80);
    // kubectl's last-applied-configuration annotation holds at most 256 KiB.
    assert!(size(&full) > 256 * 1024, "{}", size(&full));
    assert!(size(&none) < 256 * 1024 / 2, "{}", size(&none));
    assert!(size(&short) < size(&full), "{}", size(&short));
    assert!(
        !serde_json::to_string(&none)
            .unwrap()
            .contains("\"description\"")
    );
}

mod cel {
    //! Validation rules written with `rule!` / `Rule`, through the structural conversion.

    use std::collections::BTreeMap;

    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
        JSONSchemaProps, JSONSchemaPropsOrArray, JSONSchemaPropsOrBool,
    };
    use schemars::JsonSchema;
    use serde::{Deserialize, Serialize};

    use crate::crd::{CrdError, CustomResourceExt, Reason, Rule, structural_schema};
    use crate::{CustomResource, rule};

    #[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
    #[schemars(transform = rule!("self.low <= self.high", message = "low must not exceed high"))]
    struct Band {
        low: i32,
        high: i32,
    }

    #[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
    #[serde(rename_all = "camelCase")]
    #[schemars(transform = rule!("!has(self.band) || self.band.high <= 100", reason = FieldValueForbidden))]
    struct Spec {
        // A field rule on an Option of a type with its own rule: both hold.
        #[schemars(transform = rule!("self.high - self.low >= 1", message = "band too narrow"))]
        band: Option<Band>,
        // Items and map values carry their type's rule; the list and the map their own.
        #[schemars(length(max = 8))]
        #[schemars(transform = rule!("self.all(b, b.low >= 0)", message = "no negative band"))]
        bands: Vec<Band>,
        #[schemars(transform = rule!("size(self) <= 4"))]
        by_name: BTreeMap<String, Band>,
        // A transition rule on a scalar Option.
        #[schemars(transform = Rule::new("self == oldSelf").message("zone is immutable"))]
        zone: Option<String>,
    }

    fn rules(node: &JSONSchemaProps) -> Vec<(String, Option<String>)> {
        node.x_kubernetes_validations
            .iter()
            .flatten()
            .map(|r| (r.rule.clone(), r.message.clone()))
            .collect()
    }

    fn r(rule: &str, message: Option<&str>) -> (String, Option<String>) {
        (rule.to_owned(), message.map(str::to_owned))
    }

    #[test]
    fn rules_land_on_their_nodes_through_options_lists_and_maps() {
        let (spec, relaxed) = structural_schema::<Spec>("spec");
        assert!(relaxed.is_empty(), "{relaxed:?}");
        assert_eq!(
            rules(&spec),
            [r("!has(self.band) || self.band.high <= 100", None)]
        );
        assert_eq!(
            spec.x_kubernetes_validations.as_ref().unwrap()[0]
                .reason
                .as_deref(),
            Some(Reason::FieldValueForbidden.as_str())
        );
        let props = spec.properties.as_ref().unwrap();
        let band = &props["band"];
        assert_eq!(band.nullable, Some(true));
        assert_eq!(band.type_.as_deref(), Some("object"));
        assert_eq!(
            rules(band),
            [
                r("self.low <= self.high", Some("low must not exceed high")),
                r("self.high - self.low >= 1", Some("band too narrow")),
            ]
        );
        let bands = &props["bands"];
        assert_eq!(bands.max_items, Some(8));
        assert_eq!(
            rules(bands),
            [r("self.all(b, b.low >= 0)", Some("no negative band"))]
        );
        let Some(JSONSchemaPropsOrArray::Schema(item)) = &bands.items else {
            panic!("{bands:?}")
        };
        assert_eq!(
            rules(item),
            [r("self.low <= self.high", Some("low must not exceed high"))]
        );
        let by_name = &props["byName"];
        assert_eq!(rules(by_name), [r("size(self) <= 4", None)]);
        let Some(JSONSchemaPropsOrBool::Schema(value)) = &by_name.additional_properties else {
            panic!("{by_name:?}")
        };
        assert_eq!(
            rules(value),
            [r("self.low <= self.high", Some("low must not exceed high"))]
        );
        let zone = &props["zone"];
        assert_eq!(
            (zone.type_.as_deref(), zone.nullable),
            (Some("string"), Some(true))
        );
        assert_eq!(
            rules(zone),
            [r("self == oldSelf", Some("zone is immutable"))]
        );
    }

    #[derive(CustomResource, Clone, Debug, Serialize, Deserialize, JsonSchema)]
    #[resource(
        group = "example.com",
        version = "v1",
        kind = "Gadget",
        crate = "crate"
    )]
    struct GadgetSpec {
        // Written by hand, with a reason the API server does not know, and a good one.
        #[schemars(extend("x-kubernetes-validations" = [
            {"rule": "self > 0", "reason": "FieldValueTooLarge"},
            {"rule": "self < 10"},
        ]))]
        size: i32,
        // Made at run time, with a form the API server refuses.
        #[schemars(transform = Rule::new("self != ''").optional_old_self(true))]
        name: String,
    }

    #[test]
    fn malformed_rules_are_refused_by_try_crd_and_dropped_by_crd() {
        let err = Gadget::try_crd().unwrap_err();
        let CrdError::NotStructural { relaxed, .. } = &err else {
            panic!("{err}");
        };
        let places: Vec<&str> = relaxed.iter().map(|r| r.path.as_str()).collect();
        assert_eq!(places, ["spec.name", "spec.size"]);
        let text = err.to_string();
        assert!(
            text.contains("unknown reason `FieldValueTooLarge` in rule `self > 0`"),
            "{text}"
        );
        assert!(
            text.contains("optionalOldSelf is only for transition rules"),
            "{text}"
        );
        let crd = Gadget::crd();
        let schema = crd.spec.versions[0]
            .schema
            .as_ref()
            .unwrap()
            .open_api_v3_schema
            .as_ref()
            .unwrap();
        let props = schema.properties.as_ref().unwrap()["spec"]
            .properties
            .clone()
            .unwrap();
        assert_eq!(rules(&props["size"]), [r("self < 10", None)]);
        assert_eq!(props["name"].x_kubernetes_validations, None);
    }

    #[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
    #[serde(tag = "kind")]
    #[schemars(transform = rule!("self.kind != 'Disk' || self.size > 0"))]
    enum Volume {
        Disk {
            size: i32,
        },
        #[schemars(transform = rule!("self.path != '/'"))]
        Host {
            path: String,
        },
    }

    #[test]
    fn rules_on_enum_variants_are_reported_and_the_enums_kept() {
        let (schema, relaxed) = structural_schema::<Volume>("spec");
        assert_eq!(
            rules(&schema),
            [r("self.kind != 'Disk' || self.size > 0", None)]
        );
        assert_eq!(relaxed.len(), 1, "{relaxed:?}");
        assert!(
            relaxed[0].reason.contains("put them on the enum"),
            "{relaxed:?}"
        );
    }
    /// A node of every kind that ends up without a `type`, each with a rule.
    #[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
    struct Typeless {
        #[schemars(transform = rule!("has(self.x)"))]
        anything: serde_json::Value,
        #[schemars(transform = rule!("self.size() > 0"))]
        mixed: Mixed,
        #[schemars(transform = rule!("size(self) < 3"))]
        next: Option<Box<Typeless>>,
        // int-or-string has no type either, but CEL takes it.
        #[schemars(transform = rule!("type(self) == int || self.endsWith('%')"))]
        surge: k8s_openapi::apimachinery::pkg::util::intstr::IntOrString,
    }

    #[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
    #[serde(untagged)]
    enum Mixed {
        Name(String),
        Parts { a: i32 },
    }

    #[test]
    fn rules_on_nodes_without_a_type_are_dropped_and_reported() {
        let (schema, relaxed) = structural_schema::<Typeless>("spec");
        let props = schema.properties.unwrap();
        for name in ["anything", "mixed", "next"] {
            assert_eq!(props[name].x_kubernetes_validations, None, "{name}");
            assert_eq!(props[name].type_, None, "{name}");
            let reported = relaxed.iter().find(|r| {
                r.path == format!("spec.{name}")
                    && r.reason
                        .contains("validation rules on a node without a type")
            });
            assert!(reported.is_some(), "{name}: {relaxed:?}");
        }
        assert!(
            relaxed.iter().any(|r| r.reason.contains("`has(self.x)`")),
            "{relaxed:?}"
        );
        assert_eq!(
            rules(&props["surge"]),
            [r("type(self) == int || self.endsWith('%')", None)]
        );
    }

    #[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
    #[schemars(transform = rule!("self.a > 0"))]
    struct FlatA {
        a: i32,
    }

    #[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
    #[schemars(transform = rule!("self.b > 0"))]
    #[schemars(transform = rule!("self.b < 100"))]
    struct FlatB {
        b: i32,
    }

    #[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
    #[schemars(transform = rule!("self.c > 0"))]
    #[schemars(extend("x-kubernetes-validations" = [{"rule": "self.c < 10"}]))]
    struct TwoFlattened {
        #[serde(flatten)]
        a: FlatA,
        #[serde(flatten)]
        b: FlatB,
        c: i32,
    }

    #[test]
    fn the_rules_of_every_flattened_struct_survive() {
        let (schema, relaxed) = structural_schema::<TwoFlattened>("spec");
        assert!(relaxed.is_empty(), "{relaxed:?}");
        let mut got: Vec<String> = rules(&schema).into_iter().map(|(r, _)| r).collect();
        // The hand-written rule comes first; the others in an order of their keys.
        assert_eq!(got[0], "self.c < 10");
        got.sort();
        assert_eq!(
            got,
            [
                "self.a > 0",
                "self.b < 100",
                "self.b > 0",
                "self.c < 10",
                "self.c > 0"
            ]
        );
    }

    #[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
    struct OptionallyFlattened {
        #[serde(flatten)]
        a: Option<FlatA>,
        c: i32,
    }

    #[test]
    fn the_rules_of_a_type_flattened_as_an_option_are_reported() {
        let (schema, relaxed) = structural_schema::<OptionallyFlattened>("spec");
        assert_eq!(schema.x_kubernetes_validations, None);
        assert_eq!(relaxed.len(), 1, "{relaxed:?}");
        assert!(
            relaxed[0].reason.contains("fields a are required")
                && relaxed[0].reason.contains("has(self.field)"),
            "{relaxed:?}"
        );
    }

    #[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
    #[schemars(transform = Rule::new("self.a > 0").field_path("['a']"))]
    struct Bracketed {
        a: i32,
    }

    #[test]
    fn a_field_path_in_array_notation_is_kept() {
        let (schema, relaxed) = structural_schema::<Bracketed>("spec");
        assert!(relaxed.is_empty(), "{relaxed:?}");
        let rules = schema.x_kubernetes_validations.unwrap();
        assert_eq!(rules[0].field_path.as_deref(), Some("['a']"));
    }
}

//! CEL validation rules written with `rule!` against a real kube-apiserver: a rule on the
//! spec struct (several fields), a field rule with message and reason, a transition rule
//! (an immutable field), a `messageExpression`, a rule on a list's item type, a rule on an
//! `Option` field that holds for `None`, `optionalOldSelf` on creates; a rule whose CEL does
//! not compile refused with its text; the cost budget on unbounded lists and maps and the
//! bounds that satisfy it (`maxProperties` through `extend` for a map); rules on nodes
//! without a type refused by the API server, so dropped by the conversion; a rule about an
//! optionally flattened type with `has()` guards; a field path in array notation, rule and
//! message text trimmed of line breaks, a message of white space refused; optionalOldSelf
//! false without oldSelf refused. kctrl-fake accepts the same definition (and, evaluating no CEL, the objects
//! the rules refuse: documented in its crate docs).

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kctrl_client::crd::CustomResourceExt;
use kctrl_client::{Api, Client, CustomResource, PostParams, ResourceRef, rule};
use kctrl_e2e::{TestNamespace, install_crd, require_cluster, uninstall_crd};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A range of replicas with rules on every level.
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[resource(
    group = "cel.e2e.kctrl.dev",
    version = "v1",
    kind = "Range",
    namespaced
)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = rule!("self.minReplicas <= self.maxReplicas",
    message = "minReplicas must not exceed maxReplicas", field_path = ".minReplicas"))]
struct RangeSpec {
    min_replicas: i32,
    max_replicas: i32,
    #[schemars(transform = rule!("self == oldSelf", message = "target is immutable",
        reason = FieldValueForbidden))]
    target: String,
    #[schemars(transform = rule!("self % 10 == 0",
        message_expression = "'step must be a multiple of 10, not %d'.format([self])"))]
    step: Option<i64>,
    #[schemars(length(max = 63))]
    #[schemars(transform = rule!("oldSelf.hasValue() || self == 'new'",
        message = "a label starts as 'new'", optional_old_self = true))]
    #[schemars(transform = rule!("self.size() > 0", message = "label must not be empty"))]
    label: Option<String>,
    #[schemars(length(max = 4))]
    windows: Vec<Window>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(transform = rule!("self.start < self.end", message = "a window must end after it starts"))]
struct Window {
    start: i32,
    end: i32,
}

fn range(name: &str, min: i32, max: i32) -> Range {
    Range::new(
        name,
        RangeSpec {
            min_replicas: min,
            max_replicas: max,
            target: "web".into(),
            step: None,
            label: None,
            windows: vec![],
        },
    )
}

/// The error text of a write the API server refuses (its `Status` message).
async fn refused<T: std::fmt::Debug>(
    what: &str,
    result: impl Future<Output = Result<T, kctrl_client::Error>>,
) -> String {
    match result.await {
        Ok(v) => panic!("{what}: accepted, but a rule should refuse it: {v:?}"),
        Err(e) => {
            eprintln!("{what}: {e}");
            assert_eq!(e.status().and_then(|s| s.code), Some(422), "{what}: {e}");
            e.to_string()
        }
    }
}

#[tokio::test]
async fn the_api_server_enforces_the_rules() {
    let cluster = require_cluster!();
    let client = cluster.admin();
    let crd = Range::try_crd().expect("Range's schema has no malformed rule");
    install_crd(&client, &crd, &ResourceRef::of::<Range>()).await;
    let ns = TestNamespace::create(&client, "cel").await;
    let ranges: Api<Range> = Api::namespaced(client.clone(), &ns.name);
    let pp = PostParams::default();

    // Valid, `None`s written as `null`: a rule is not evaluated on a null.
    let created = ranges.create(&pp, &range("ok", 1, 3)).await.unwrap();
    assert_eq!(created.spec.step, None);

    // The struct's rule, reported at its fieldPath with its message.
    let text = refused("min > max", ranges.create(&pp, &range("bad", 5, 3))).await;
    assert!(
        text.contains("spec.minReplicas: Invalid value: minReplicas must not exceed maxReplicas"),
        "{text}"
    );
    assert!(
        text.contains(r#"Range.cel.e2e.kctrl.dev "bad" is invalid"#),
        "{text}"
    );

    // A transition rule with a reason: on update only.
    let mut moved = created.clone();
    moved.spec.target = "db".into();
    let text = refused("target changed", ranges.update(&pp, &moved)).await;
    assert!(
        text.contains("spec.target: Forbidden: target is immutable"),
        "{text}"
    );

    // The message computed by messageExpression.
    let mut stepped = created.clone();
    stepped.spec.step = Some(15);
    let text = refused("step 15", ranges.update(&pp, &stepped)).await;
    assert!(
        text.contains("spec.step: Invalid value: 15: step must be a multiple of 10, not 15"),
        "{text}"
    );
    stepped.spec.step = Some(20);
    let stepped = ranges.update(&pp, &stepped).await.unwrap();

    // The item type's rule, at the item.
    let mut windowed = stepped.clone();
    windowed.spec.windows = vec![Window { start: 1, end: 2 }, Window { start: 4, end: 3 }];
    let text = refused("window 4..3", ranges.update(&pp, &windowed)).await;
    assert!(
        text.contains("spec.windows[1]: Invalid value: a window must end after it starts"),
        "{text}"
    );

    // optionalOldSelf: evaluated on create too (oldSelf without a value); the second rule
    // of the field holds beside it; on updates the first no longer asks for 'new'.
    let mut labelled = range("labelled", 1, 1);
    labelled.spec.label = Some(String::new());
    let text = refused("empty label", ranges.create(&pp, &labelled)).await;
    // Both rules of the field fail (no old value: the first asks for 'new').
    assert!(
        text.contains(r#"spec.label: Invalid value: "": label must not be empty"#),
        "{text}"
    );
    labelled.spec.label = Some("blue".into());
    let text = refused("label blue at create", ranges.create(&pp, &labelled)).await;
    assert!(text.contains("a label starts as 'new'"), "{text}");
    labelled.spec.label = Some("new".into());
    let mut labelled = ranges.create(&pp, &labelled).await.unwrap();
    labelled.spec.label = Some("blue".into());
    ranges.update(&pp, &labelled).await.unwrap();

    // kctrl-fake serves the same definition and stores what the schema allows; it evaluates
    // no rule (its crate docs say so), so it takes the object the API server refused.
    let fake = kctrl_fake::FakeApi::new();
    fake.register_crd(&crd);
    let fake_ranges: Api<Range> = Api::namespaced(fake.client(), "default");
    fake_ranges.create(&pp, &range("ok", 1, 3)).await.unwrap();
    fake_ranges.create(&pp, &range("bad", 5, 3)).await.unwrap();

    ns.delete().await;
    uninstall_crd(&client, &Range::crd_name()).await;
}

#[derive(CustomResource, Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[resource(
    group = "cel.e2e.kctrl.dev",
    version = "v1",
    kind = "Broken",
    namespaced
)]
#[serde(rename_all = "camelCase")]
struct BrokenSpec {
    #[schemars(transform = rule!("self.size( > 1", message = "never compiles"))]
    name: String,
}

/// Creates `crd` and returns the API server's refusal.
async fn crd_refused(client: &Client, crd: &CustomResourceDefinition) -> String {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let name = crd.metadata.name.clone().unwrap_or_default();
    match crds.create(&PostParams::default(), crd).await {
        Ok(_) => {
            uninstall_crd(client, &name).await;
            panic!("{name} was accepted");
        }
        Err(e) => {
            eprintln!("{name}: {e}");
            assert_eq!(e.status().and_then(|s| s.code), Some(422), "{e}");
            e.to_string()
        }
    }
}

#[tokio::test]
async fn a_rule_that_does_not_compile_is_refused_with_its_text() {
    let cluster = require_cluster!();
    let client = cluster.admin();
    let text = crd_refused(&client, &Broken::crd()).await;
    for part in [
        "brokens.cel.e2e.kctrl.dev",
        "spec.validation.openAPIV3Schema.properties[spec].properties[name].x-kubernetes-validations[0].rule",
        "self.size( > 1",
        "compilation failed",
    ] {
        assert!(text.contains(part), "{part:?} not in {text}");
    }
}

#[tokio::test]
async fn optional_old_self_without_old_self_is_refused() {
    let cluster = require_cluster!();
    let client = cluster.admin();
    // What rule!(..., optional_old_self = true) refuses at compile time, written by hand.
    let mut crd = Broken::crd();
    let schema = crd.spec.versions[0]
        .schema
        .as_mut()
        .and_then(|s| s.open_api_v3_schema.as_mut())
        .unwrap();
    let name = schema.properties.as_mut().unwrap().get_mut("spec").unwrap();
    let name = name.properties.as_mut().unwrap().get_mut("name").unwrap();
    let rules = name.x_kubernetes_validations.as_mut().unwrap();
    rules[0].rule = "self.size() > 1".into();
    rules[0].optional_old_self = Some(true);
    let text = crd_refused(&client, &crd).await;
    assert!(text.contains("optionalOldSelf"), "{text}");
}

#[derive(CustomResource, Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[resource(
    group = "cel.e2e.kctrl.dev",
    version = "v1",
    kind = "Pinned",
    namespaced
)]
struct PinnedSpec {
    // An atomic list (the default): its items have no old value to compare with.
    #[schemars(length(max = 4))]
    pins: Vec<Pin>,
}

#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
struct Pin {
    #[schemars(length(max = 16))]
    #[schemars(transform = rule!("self == oldSelf", message = "a pin is immutable"))]
    name: String,
}

#[tokio::test]
async fn transition_rules_need_an_old_value_to_compare_with() {
    let cluster = require_cluster!();
    let client = cluster.admin();
    let text = crd_refused(&client, &Pinned::crd()).await;
    for part in [
        "properties[pins].items.properties[name].x-kubernetes-validations[0].rule",
        "oldSelf cannot be used on the uncorrelatable portion of the schema",
    ] {
        assert!(text.contains(part), "{part:?} not in {text}");
    }
}

/// A messageExpression converting a number with `string()` is costed as a string of any size.
#[derive(CustomResource, Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[resource(
    group = "cel.e2e.kctrl.dev",
    version = "v1",
    kind = "Costly",
    namespaced
)]
struct CostlySpec {
    #[schemars(range(max = 1000))]
    #[schemars(transform = rule!("self % 10 == 0",
        message_expression = "'step must be a multiple of 10, not ' + string(self)"))]
    step: i64,
}

#[tokio::test]
async fn string_conversions_in_message_expressions_exceed_the_budget() {
    let cluster = require_cluster!();
    let client = cluster.admin();
    let text = crd_refused(&client, &Costly::crd()).await;
    assert!(
        text.contains("properties[step].x-kubernetes-validations[0].messageExpression: Forbidden: estimated messageExpression cost exceeds budget"),
        "{text}"
    );
}

#[derive(CustomResource, Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[resource(
    group = "cel.e2e.kctrl.dev",
    version = "v1",
    kind = "Unbounded",
    namespaced
)]
struct UnboundedSpec {
    #[schemars(transform = rule!("self.all(x, x.matches('^[a-z]+$'))"))]
    names: Vec<String>,
}

#[derive(CustomResource, Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[resource(
    group = "cel.e2e.kctrl.dev",
    version = "v1",
    kind = "Bounded",
    namespaced
)]
struct BoundedSpec {
    #[schemars(length(max = 16), inner(length(max = 64)))]
    #[schemars(transform = rule!("self.all(x, x.matches('^[a-z]+$'))"))]
    names: Vec<String>,
}

#[tokio::test]
async fn the_cost_budget_needs_bounded_lists() {
    let cluster = require_cluster!();
    let client = cluster.admin();
    let text = crd_refused(&client, &Unbounded::crd()).await;
    assert!(
        text.contains("estimated rule cost exceeds budget"),
        "{text}"
    );
    assert!(
        text.contains("try simplifying the rule, or adding maxItems, maxProperties, and maxLength"),
        "{text}"
    );

    let crd = Bounded::try_crd().unwrap();
    install_crd(&client, &crd, &ResourceRef::of::<Bounded>()).await;
    let ns = TestNamespace::create(&client, "cel-bounded").await;
    let bounded: Api<Bounded> = Api::namespaced(client.clone(), &ns.name);
    let ok = Bounded::new(
        "ok",
        BoundedSpec {
            names: vec!["abc".into()],
        },
    );
    bounded.create(&PostParams::default(), &ok).await.unwrap();
    let bad = Bounded::new(
        "bad",
        BoundedSpec {
            names: vec!["ABC".into()],
        },
    );
    let text = refused("upper case", bounded.create(&PostParams::default(), &bad)).await;
    assert!(
        text.contains("failed rule: self.all(x, x.matches('^[a-z]+$'))"),
        "{text}"
    );
    ns.delete().await;
    uninstall_crd(&client, &Bounded::crd_name()).await;
}

/// Rules on nodes without a `type`: the API server refuses a definition with any of them, so
/// the conversion drops and reports them.
#[derive(CustomResource, Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[resource(
    group = "cel.e2e.kctrl.dev",
    version = "v1",
    kind = "Loose",
    namespaced
)]
struct LooseSpec {
    #[schemars(transform = rule!("has(self.x)"))]
    anything: serde_json::Value,
    #[schemars(transform = rule!("size(self) > 0"))]
    mixed: Mixed,
    next: Option<Box<Node>>,
}

#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
enum Mixed {
    Name(String),
    Parts { a: i32 },
}

#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
struct Node {
    value: i32,
    // The recursion point.
    #[schemars(transform = rule!("size(self) < 3"))]
    next: Option<Box<Node>>,
}

#[tokio::test]
async fn rules_on_typeless_nodes_are_dropped_and_the_crd_accepted() {
    let cluster = require_cluster!();
    let client = cluster.admin();
    let err = Loose::try_crd().unwrap_err().to_string();
    for place in ["spec.anything", "spec.mixed", "spec.next.next"] {
        assert!(
            err.contains(&format!(
                "{place}: validation rules on a node without a type"
            )),
            "{place} not reported: {err}"
        );
    }
    // The same rule kept by hand on the Value: the whole definition is refused.
    let mut kept = Loose::crd();
    let spec = kept.spec.versions[0]
        .schema
        .as_mut()
        .and_then(|s| s.open_api_v3_schema.as_mut())
        .and_then(|s| s.properties.as_mut())
        .and_then(|p| p.get_mut("spec"))
        .unwrap();
    let anything = spec
        .properties
        .as_mut()
        .unwrap()
        .get_mut("anything")
        .unwrap();
    assert_eq!(anything.type_, None);
    anything.x_kubernetes_validations = Some(vec![rule!("has(self.x)").to_validation_rule()]);
    let text = crd_refused(&client, &kept).await;
    assert!(
        text.contains("unable to convert structural schema to CEL declarations"),
        "{text}"
    );
    // What crd() makes, without them, is accepted.
    let crd = Loose::crd();
    install_crd(&client, &crd, &ResourceRef::of::<Loose>()).await;
    uninstall_crd(&client, &Loose::crd_name()).await;
}

/// A type flattened as an `Option`: its rules land where its fields are optional.
#[derive(CustomResource, Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[resource(group = "cel.e2e.kctrl.dev", version = "v1", kind = "Flat", namespaced)]
// The documented workaround: on the outer struct, guarded with has().
#[schemars(transform = rule!("!has(self.low) || !has(self.high) || self.low <= self.high",
    message = "low must not exceed high"))]
struct FlatSpec {
    #[serde(flatten)]
    limits: Option<Limits>,
    name: String,
}

#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
struct Limits {
    low: i32,
    high: i32,
}

#[tokio::test]
async fn a_rule_about_an_optionally_flattened_type_needs_has_guards() {
    let cluster = require_cluster!();
    let client = cluster.admin();
    let flat = |name: &str, limits: Option<Limits>| {
        Flat::new(
            name,
            FlatSpec {
                limits,
                name: "x".into(),
            },
        )
    };
    // Unguarded, as the rule on `Limits` would land: an object without limits is refused.
    let mut unguarded = Flat::try_crd().unwrap();
    let spec = unguarded.spec.versions[0]
        .schema
        .as_mut()
        .and_then(|s| s.open_api_v3_schema.as_mut())
        .and_then(|s| s.properties.as_mut())
        .and_then(|p| p.get_mut("spec"))
        .unwrap();
    spec.x_kubernetes_validations = Some(vec![rule!("self.low <= self.high").to_validation_rule()]);
    install_crd(&client, &unguarded, &ResourceRef::of::<Flat>()).await;
    let ns = TestNamespace::create(&client, "cel-flat").await;
    let flats: Api<Flat> = Api::namespaced(client.clone(), &ns.name);
    let pp = PostParams::default();
    let text = refused(
        "no limits, unguarded",
        flats.create(&pp, &flat("none", None)),
    )
    .await;
    assert!(text.contains("no such key: low"), "{text}");

    // Guarded: without limits accepted, with bad limits refused.
    let crd = Flat::try_crd().unwrap();
    install_crd(&client, &crd, &ResourceRef::of::<Flat>()).await;
    flats.create(&pp, &flat("none", None)).await.unwrap();
    flats
        .create(&pp, &flat("ok", Some(Limits { low: 1, high: 2 })))
        .await
        .unwrap();
    let text = refused(
        "low > high",
        flats.create(&pp, &flat("bad", Some(Limits { low: 3, high: 2 }))),
    )
    .await;
    assert!(text.contains("low must not exceed high"), "{text}");
    ns.delete().await;
    uninstall_crd(&client, &Flat::crd_name()).await;
}

/// A field path in array notation, rules and messages with line breaks around them, a
/// message of white space. (In CEL a dot in a field's name is written `__dot__`.)
#[derive(CustomResource, Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[resource(
    group = "cel.e2e.kctrl.dev",
    version = "v1",
    kind = "Surge",
    namespaced
)]
#[schemars(transform = rule!("self.max__dot__surge <= self.limit\n",
    message = "\n  max.surge must not exceed limit\n", field_path = "['max.surge']"))]
struct SurgeSpec {
    #[serde(rename = "max.surge")]
    max_surge: i32,
    limit: i32,
}

#[tokio::test]
async fn array_notation_field_paths_and_trimmed_text_are_accepted() {
    let cluster = require_cluster!();
    let client = cluster.admin();
    let crd = Surge::try_crd().unwrap();
    install_crd(&client, &crd, &ResourceRef::of::<Surge>()).await;
    let ns = TestNamespace::create(&client, "cel-surge").await;
    let surges: Api<Surge> = Api::namespaced(client.clone(), &ns.name);
    let pp = PostParams::default();
    let surge = |name: &str, max_surge| {
        Surge::new(
            name,
            SurgeSpec {
                max_surge,
                limit: 2,
            },
        )
    };
    surges.create(&pp, &surge("ok", 1)).await.unwrap();
    let text = refused("surge 3", surges.create(&pp, &surge("bad", 3))).await;
    assert!(
        text.contains("spec.max.surge: Invalid value: max.surge must not exceed limit"),
        "{text}"
    );
    ns.delete().await;
    uninstall_crd(&client, &Surge::crd_name()).await;

    // A message of Unicode white space (no-break space) is blank to the API server.
    let mut blank = crd.clone();
    blank.spec.versions[0]
        .schema
        .as_mut()
        .and_then(|s| s.open_api_v3_schema.as_mut())
        .and_then(|s| s.properties.as_mut())
        .and_then(|p| p.get_mut("spec"))
        .and_then(|s| s.x_kubernetes_validations.as_mut())
        .unwrap()[0]
        .message = Some("\u{a0}".into());
    let text = crd_refused(&client, &blank).await;
    assert!(text.contains("must be non-empty if specified"), "{text}");
}

#[tokio::test]
async fn optional_old_self_false_without_old_self_is_refused() {
    let cluster = require_cluster!();
    let client = cluster.admin();
    // What rule!(..., optional_old_self = false) refuses at compile time, written by hand.
    let mut crd = Broken::crd();
    let schema = crd.spec.versions[0]
        .schema
        .as_mut()
        .and_then(|s| s.open_api_v3_schema.as_mut())
        .unwrap();
    let name = schema.properties.as_mut().unwrap().get_mut("spec").unwrap();
    let name = name.properties.as_mut().unwrap().get_mut("name").unwrap();
    let rules = name.x_kubernetes_validations.as_mut().unwrap();
    rules[0].rule = "self.size() > 1".into();
    rules[0].optional_old_self = Some(false);
    let text = crd_refused(&client, &crd).await;
    assert!(
        text.contains("may not be set if oldSelf is not used in rule"),
        "{text}"
    );
}

#[derive(CustomResource, Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[resource(
    group = "cel.e2e.kctrl.dev",
    version = "v1",
    kind = "UnboundedMap",
    namespaced
)]
struct UnboundedMapSpec {
    // schemars' length does nothing on a map.
    #[schemars(length(max = 16))]
    #[schemars(transform = rule!("self.all(a, self.all(b, a == b || self[a] != self[b]))",
        message = "counts must differ"))]
    counts: std::collections::BTreeMap<String, i64>,
}

#[derive(CustomResource, Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[resource(
    group = "cel.e2e.kctrl.dev",
    version = "v1",
    kind = "BoundedMap",
    namespaced
)]
struct BoundedMapSpec {
    #[schemars(extend("maxProperties" = 16))]
    #[schemars(transform = rule!("self.all(a, self.all(b, a == b || self[a] != self[b]))",
        message = "counts must differ"))]
    counts: std::collections::BTreeMap<String, i64>,
}

#[tokio::test]
async fn the_cost_budget_needs_bounded_maps() {
    let cluster = require_cluster!();
    let client = cluster.admin();
    let unbounded = UnboundedMap::try_crd().unwrap();
    let counts = |crd: &CustomResourceDefinition| {
        crd.spec.versions[0]
            .schema
            .as_ref()
            .and_then(|s| s.open_api_v3_schema.as_ref())
            .and_then(|s| s.properties.as_ref())
            .map(|p| p["spec"].properties.as_ref().unwrap()["counts"].clone())
            .unwrap()
    };
    assert_eq!(counts(&unbounded).max_properties, None);
    let text = crd_refused(&client, &unbounded).await;
    assert!(
        text.contains("estimated rule cost exceeds budget"),
        "{text}"
    );

    let crd = BoundedMap::try_crd().unwrap();
    assert_eq!(counts(&crd).max_properties, Some(16));
    install_crd(&client, &crd, &ResourceRef::of::<BoundedMap>()).await;
    let ns = TestNamespace::create(&client, "cel-map").await;
    let maps: Api<BoundedMap> = Api::namespaced(client.clone(), &ns.name);
    let pp = PostParams::default();
    let map = |name: &str, v: i64| {
        BoundedMap::new(
            name,
            BoundedMapSpec {
                counts: [("a".to_owned(), 1), ("b".to_owned(), v)].into(),
            },
        )
    };
    maps.create(&pp, &map("ok", 2)).await.unwrap();
    let text = refused("equal counts", maps.create(&pp, &map("bad", 1))).await;
    assert!(
        text.contains("spec.counts: Invalid value: counts must differ"),
        "{text}"
    );
    ns.delete().await;
    uninstall_crd(&client, &BoundedMap::crd_name()).await;
}

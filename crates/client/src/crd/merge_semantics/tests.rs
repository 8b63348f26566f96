use serde_json::json;

use super::*;

#[test]
fn the_table_is_sorted_and_holds_the_pod_template() {
    for pair in table::DEFINITIONS.windows(2) {
        assert!(
            pair[0].name < pair[1].name,
            "{} before {}",
            pair[0].name,
            pair[1].name
        );
    }
    for def in table::DEFINITIONS {
        assert!(def.name.starts_with("io.k8s."), "{}", def.name);
        for pair in def.properties.windows(2) {
            assert!(pair[0].name < pair[1].name, "{}", def.name);
        }
        for p in def.properties {
            assert_eq!(
                p.list_type == Some("map"),
                !p.map_keys.is_empty(),
                "{}.{}",
                def.name,
                p.name
            );
        }
    }
    let pod = lookup("io.k8s.api.core.v1.PodSpec").unwrap();
    let containers = pod
        .properties
        .iter()
        .find(|p| p.name == "containers")
        .unwrap();
    assert_eq!(containers.list_type, Some("map"));
    assert_eq!(containers.map_keys, ["name"]);
    let container = lookup("io.k8s.api.core.v1.Container").unwrap();
    let ports = container
        .properties
        .iter()
        .find(|p| p.name == "ports")
        .unwrap();
    assert_eq!(ports.map_keys, ["containerPort", "protocol"]);
    assert_eq!(ports.key_defaults, [("protocol", "\"TCP\"")]);
    assert_eq!(
        lookup("io.k8s.apimachinery.pkg.apis.meta.v1.LabelSelector")
            .unwrap()
            .map_type,
        Some("atomic")
    );
    assert!(lookup("io.k8s.api.core.v1.NoSuchThing").is_none());
    assert!(lookup("example.com.v1.PodSpec").is_none());
}

#[test]
fn placements_follow_refs_in_place_but_not_into_recursion() {
    let root = json!({
        "title": "Spec",
        "type": "object",
        "properties": {
            "pod": {"$ref": "#/$defs/io.k8s.api.core.v1.PodSpec", "description": "mine"},
            "nodes": {"type": "array", "items": {"$ref": "#/$defs/Node"}},
            "byName": {"type": "object", "additionalProperties": {"$ref": "#/$defs/io.k8s.api.core.v1.Container"}},
            "plain": {"$ref": "#/$defs/Plain"},
        },
        "$defs": {
            "io.k8s.api.core.v1.PodSpec": {"type": "object", "properties": {
                "containers": {"type": "array", "items": {"$ref": "#/$defs/io.k8s.api.core.v1.Container"}},
            }},
            "io.k8s.api.core.v1.Container": {"type": "object", "properties": {"name": {"type": "string"}}},
            "Node": {"type": "object", "properties": {
                "child": {"$ref": "#/$defs/Node"},
                "pod": {"anyOf": [{"$ref": "#/$defs/io.k8s.api.core.v1.PodSpec"}, {"type": "null"}]},
            }},
            "Plain": {"type": "object", "properties": {"containers": {"type": "array"}}},
        },
    });
    let placed = placements(&root, "spec");
    let got: Vec<(&str, Vec<&str>)> = placed
        .iter()
        .map(|(path, defs)| (path.as_str(), defs.iter().copied().collect()))
        .collect();
    let pod = vec!["io.k8s.api.core.v1.PodSpec"];
    let container = vec!["io.k8s.api.core.v1.Container"];
    assert_eq!(
        got,
        [
            ("spec.byName.*", container.clone()),
            ("spec.nodes[*].pod", pod.clone()),
            ("spec.nodes[*].pod.containers[*]", container.clone()),
            ("spec.pod", pod),
            ("spec.pod.containers[*]", container),
        ]
    );
}

#[test]
fn a_root_of_an_upstream_type_is_placed_by_its_title() {
    let root = json!({"title": "io.k8s.api.core.v1.PodSpec", "type": "object"});
    let placed = placements(&root, "status");
    assert_eq!(
        placed["status"].iter().copied().collect::<Vec<_>>(),
        ["io.k8s.api.core.v1.PodSpec"]
    );
}

#[test]
fn ref_names_are_unescaped() {
    assert_eq!(
        ref_name("io.k8s.api.core.v1.PodSpec"),
        "io.k8s.api.core.v1.PodSpec"
    );
    assert_eq!(ref_name("a~1b~0c%20d"), "a/b~c d");
    assert_eq!(ref_name("100%"), "100%");
    assert_eq!(ref_name("%zz"), "%zz");
}

fn object(v: Value) -> Map<String, Value> {
    v.as_object().unwrap().clone()
}

const PORTS: Property = Property {
    name: "ports",
    list_type: Some("map"),
    map_keys: &["containerPort", "protocol"],
    key_defaults: &[("protocol", "\"TCP\"")],
    map_type: None,
};

fn ports_node() -> Map<String, Value> {
    object(
        json!({"type": "object", "properties": {"ports": {"type": "array", "items": {
            "type": "object",
            "required": ["containerPort"],
            "properties": {
                "containerPort": {"type": "integer"},
                "protocol": {"type": "string", "nullable": true},
                "name": {"type": "string", "nullable": true},
            },
        }}}}),
    )
}

#[test]
fn a_map_list_gets_its_keys_and_an_optional_key_upstreams_default() {
    let def = Definition {
        name: "test",
        map_type: Some("atomic"),
        properties: &[PORTS],
    };
    let mut node = ports_node();
    apply(&mut node, &def);
    assert_eq!(node["x-kubernetes-map-type"], "atomic");
    let ports = &node["properties"]["ports"];
    assert_eq!(ports["x-kubernetes-list-type"], "map");
    assert_eq!(
        ports["x-kubernetes-list-map-keys"],
        json!(["containerPort", "protocol"])
    );
    let protocol = &ports["items"]["properties"]["protocol"];
    assert_eq!(protocol["default"], "TCP");
    assert_eq!(protocol.get("nullable"), None);
    // Not a key: left as it was.
    assert_eq!(ports["items"]["properties"]["name"]["nullable"], true);
}

#[test]
fn a_map_list_the_schema_cannot_hold_stays_atomic() {
    // An optional key without a default upstream.
    const NO_DEFAULT: Property = Property {
        key_defaults: &[],
        ..PORTS
    };
    // A key the items do not have.
    const MISSING: Property = Property {
        map_keys: &["containerPort", "hostIP"],
        ..PORTS
    };
    let cases: [&'static [Property]; 2] = [&[NO_DEFAULT], &[MISSING]];
    for properties in cases {
        let def = Definition {
            name: "test",
            map_type: None,
            properties,
        };
        let mut node = ports_node();
        apply(&mut node, &def);
        assert_eq!(node, ports_node(), "{properties:?}");
    }
    // Nullable items.
    let def = Definition {
        name: "test",
        map_type: None,
        properties: &[PORTS],
    };
    let mut node = ports_node();
    node["properties"]["ports"]["items"]["nullable"] = json!(true);
    let before = node.clone();
    apply(&mut node, &def);
    assert_eq!(node, before);
}

#[test]
fn what_is_there_already_is_kept() {
    let def = Definition {
        name: "test",
        map_type: Some("atomic"),
        properties: &[
            PORTS,
            Property {
                name: "labels",
                list_type: None,
                map_keys: &[],
                key_defaults: &[],
                map_type: Some("atomic"),
            },
        ],
    };
    let mut node = ports_node();
    node.insert("x-kubernetes-map-type".into(), json!("granular"));
    node["properties"]["ports"]["x-kubernetes-list-type"] = json!("atomic");
    node["properties"]["labels"] = json!({"type": "object", "x-kubernetes-map-type": "granular", "additionalProperties": {"type": "string"}});
    let before = node.clone();
    apply(&mut node, &def);
    assert_eq!(node, before);
}

#[test]
fn sets_and_atomic_lists_and_map_types_only_where_their_type_allows() {
    let def = Definition {
        name: "test",
        map_type: Some("atomic"),
        properties: &[
            Property {
                name: "args",
                list_type: Some("atomic"),
                map_keys: &[],
                key_defaults: &[],
                map_type: None,
            },
            Property {
                name: "finalizers",
                list_type: Some("set"),
                map_keys: &[],
                key_defaults: &[],
                map_type: None,
            },
            Property {
                name: "nullables",
                list_type: Some("set"),
                map_keys: &[],
                key_defaults: &[],
                map_type: None,
            },
            Property {
                name: "open",
                list_type: Some("atomic"),
                map_keys: &[],
                key_defaults: &[],
                map_type: Some("atomic"),
            },
        ],
    };
    let mut node = object(json!({"type": "object", "properties": {
        "args": {"type": "array", "items": {"type": "string"}},
        "finalizers": {"type": "array", "items": {"type": "string"}},
        "nullables": {"type": "array", "items": {"type": "string", "nullable": true}},
        "open": {"x-kubernetes-preserve-unknown-fields": true},
    }}));
    apply(&mut node, &def);
    let props = &node["properties"];
    assert_eq!(props["args"]["x-kubernetes-list-type"], "atomic");
    assert_eq!(props["finalizers"]["x-kubernetes-list-type"], "set");
    assert_eq!(props["nullables"].get("x-kubernetes-list-type"), None);
    assert_eq!(
        props["open"],
        json!({"x-kubernetes-preserve-unknown-fields": true})
    );
    // An object without a type (preserving unknown fields) gets no map type either.
    let mut open = object(json!({"x-kubernetes-preserve-unknown-fields": true}));
    apply(&mut open, &def);
    assert_eq!(open.get("x-kubernetes-map-type"), None);
}

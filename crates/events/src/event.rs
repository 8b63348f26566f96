//! Building a core/v1 `Event` the way client-go's recorder does: its name, namespace,
//! timestamps, count, source and reporting fields.

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Event, EventSource as ApiEventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::{Metadata, Resource};

use crate::recorder::EventType;

/// The namespace an event goes to when the object it is about has none (cluster-scoped
/// objects): `metav1.NamespaceDefault`.
pub const DEFAULT_NAMESPACE: &str = "default";

/// Who records events (core/v1 `EventSource`): the component, e.g. `deployment-controller`,
/// and optionally the host it runs on. They become the event's `source` and its
/// `reportingComponent` / `reportingInstance`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct EventSource {
    /// The component, e.g. `deployment-controller`.
    pub component: String,
    /// The host or instance name; empty when not reported.
    pub host: String,
}

impl EventSource {
    /// A source with a component and no host.
    pub fn new(component: impl Into<String>) -> Self {
        Self {
            component: component.into(),
            host: String::new(),
        }
    }

    /// The same source on `host`.
    pub fn with_host(mut self, host: impl Into<String>) -> Self {
        self.host = host.into();
        self
    }

    fn to_api(&self) -> ApiEventSource {
        ApiEventSource {
            component: non_empty(&self.component),
            host: non_empty(&self.host),
        }
    }
}

fn non_empty(s: &str) -> Option<String> {
    (!s.is_empty()).then(|| s.to_owned())
}

/// A reference to `obj` for [`crate::EventRecorder::event`] (client-go's
/// `reference.GetReference`): its apiVersion, kind, namespace, name, uid and
/// resourceVersion.
pub fn object_reference<K>(obj: &K) -> ObjectReference
where
    K: Resource + Metadata<Ty = ObjectMeta>,
{
    let meta = obj.metadata();
    ObjectReference {
        api_version: Some(K::API_VERSION.to_owned()),
        kind: Some(K::KIND.to_owned()),
        namespace: meta.namespace.clone().filter(|ns| !ns.is_empty()),
        name: meta.name.clone(),
        uid: meta.uid.clone(),
        resource_version: meta.resource_version.clone(),
        field_path: None,
    }
}

/// Builds the event a recorder publishes: name `<object name>.<hex unix nanos>`, the
/// object's namespace (or `default`), count 1, first = last timestamp = `now`, the source,
/// and the reporting component and instance taken from it.
pub(crate) fn make_event(
    object: &ObjectReference,
    annotations: Option<BTreeMap<String, String>>,
    type_: EventType,
    reason: &str,
    message: &str,
    source: &EventSource,
    now: Timestamp,
) -> Event {
    let namespace = object
        .namespace
        .as_deref()
        .filter(|ns| !ns.is_empty())
        .unwrap_or(DEFAULT_NAMESPACE);
    let ref_name = object.name.as_deref().unwrap_or("");
    Event {
        metadata: ObjectMeta {
            name: Some(generate_event_name(ref_name, unix_nanos(now))),
            namespace: Some(namespace.to_owned()),
            annotations: annotations.filter(|a| !a.is_empty()),
            ..Default::default()
        },
        involved_object: object.clone(),
        reason: Some(reason.to_owned()),
        message: Some(message.to_owned()),
        first_timestamp: Some(Time(now)),
        last_timestamp: Some(Time(now)),
        count: Some(1),
        type_: Some(type_.as_str().to_owned()),
        source: Some(source.to_api()),
        reporting_component: non_empty(&source.component),
        reporting_instance: non_empty(&source.host),
        ..Default::default()
    }
}

/// Nanoseconds since the Unix epoch, clamped to `i64` as Go's `UnixNano`.
pub(crate) fn unix_nanos(t: Timestamp) -> i64 {
    i64::try_from(t.as_nanosecond()).unwrap_or(if t.as_nanosecond() < 0 {
        i64::MIN
    } else {
        i64::MAX
    })
}

/// `<ref_name>.<unix_nanos in lowercase hex>`, or a random UUID when that is not a valid
/// object name (a DNS subdomain: the referenced object's name may not be one).
pub fn generate_event_name(ref_name: &str, unix_nanos: i64) -> String {
    let name = format!("{ref_name}.{}", hex(unix_nanos));
    if is_dns_subdomain(&name) {
        name
    } else {
        kctrl_client::uuid::new_v4()
    }
}

/// Lowercase hex of a signed number, with a leading `-` for negative ones (as Go's `%x`).
pub(crate) fn hex(n: i64) -> String {
    if n < 0 {
        format!("-{:x}", n.unsigned_abs())
    } else {
        format!("{n:x}")
    }
}

/// Whether `name` is a DNS-1123 subdomain: at most 253 characters of dot-separated labels,
/// each of lowercase letters, digits and `-`, starting and ending with a letter or digit.
pub fn is_dns_subdomain(name: &str) -> bool {
    let alnum = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            let bytes = label.as_bytes();
            match (bytes.first(), bytes.last()) {
                (Some(&first), Some(&last)) => {
                    alnum(first) && alnum(last) && bytes.iter().all(|&b| alnum(b) || b == b'-')
                }
                _ => false,
            }
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    // TestGenerateEventName.
    #[test]
    fn generate_event_name_uses_hex_nanos_or_a_valid_fallback() {
        let ts = 105_999_103_295_324_396_i64;
        assert_eq!(
            generate_event_name("test-pod", ts),
            "test-pod.178959f726d80ec"
        );
        for bad in [
            "x".repeat(300),
            "test.POD".to_owned(),
            "test.pod/invalid!chars?".to_owned(),
            "--test.pod/invalid!chars?".to_owned(),
        ] {
            let name = generate_event_name(&bad, ts);
            assert!(is_dns_subdomain(&name), "{bad:?} gave invalid {name:?}");
            assert_eq!(name.len(), 36, "{name}");
            assert_eq!(&name[14..15], "4", "version nibble of {name}");
        }
        // Two fallbacks differ.
        assert_ne!(generate_event_name("A", ts), generate_event_name("A", ts));
    }

    #[test]
    fn dns_subdomain_rules() {
        assert!(is_dns_subdomain("a"));
        assert!(is_dns_subdomain("web-1.abc"));
        assert!(!is_dns_subdomain(""));
        assert!(!is_dns_subdomain("a..b"));
        assert!(!is_dns_subdomain("-a"));
        assert!(!is_dns_subdomain("a-"));
        assert!(!is_dns_subdomain("a.b."));
        assert!(!is_dns_subdomain("A"));
        assert!(is_dns_subdomain(&"a".repeat(253)));
        assert!(!is_dns_subdomain(&"a".repeat(254)));
    }

    #[test]
    fn hex_formats_like_go() {
        assert_eq!(hex(255), "ff");
        assert_eq!(hex(-255), "-ff");
        assert_eq!(hex(i64::MIN), "-8000000000000000");
    }

    #[test]
    fn make_event_fills_every_field_like_the_recorder() {
        let now = Timestamp::from_nanosecond(1_700_000_000_123_456_789).unwrap();
        let object = ObjectReference {
            kind: Some("Pod".into()),
            name: Some("foo".into()),
            uid: Some("bar".into()),
            api_version: Some("v1".into()),
            ..Default::default()
        };
        let source = EventSource::new("eventTest").with_host("node-1");
        let e = make_event(
            &object,
            Some([("a".to_owned(), "b".to_owned())].into()),
            EventType::Warning,
            "Failed",
            "it broke",
            &source,
            now,
        );
        assert_eq!(
            e.metadata.name.as_deref(),
            Some(format!("foo.{:x}", 1_700_000_000_123_456_789_i64).as_str())
        );
        assert_eq!(e.metadata.namespace.as_deref(), Some("default"));
        assert_eq!(e.metadata.annotations.unwrap()["a"], "b");
        assert_eq!(e.involved_object, object);
        assert_eq!(e.count, Some(1));
        assert_eq!(e.first_timestamp, Some(Time(now)));
        assert_eq!(e.last_timestamp, Some(Time(now)));
        assert_eq!(e.type_.as_deref(), Some("Warning"));
        assert_eq!(e.reason.as_deref(), Some("Failed"));
        assert_eq!(e.message.as_deref(), Some("it broke"));
        let src = e.source.unwrap();
        assert_eq!(src.component.as_deref(), Some("eventTest"));
        assert_eq!(src.host.as_deref(), Some("node-1"));
        assert_eq!(e.reporting_component.as_deref(), Some("eventTest"));
        assert_eq!(e.reporting_instance.as_deref(), Some("node-1"));
    }

    #[test]
    fn object_reference_of_a_typed_object() {
        use k8s_openapi::api::apps::v1::Deployment;
        let d = Deployment {
            metadata: ObjectMeta {
                name: Some("web".into()),
                namespace: Some("prod".into()),
                uid: Some("u1".into()),
                resource_version: Some("7".into()),
                ..Default::default()
            },
            ..Default::default()
        };
        let r = object_reference(&d);
        assert_eq!(r.api_version.as_deref(), Some("apps/v1"));
        assert_eq!(r.kind.as_deref(), Some("Deployment"));
        assert_eq!(r.namespace.as_deref(), Some("prod"));
        assert_eq!(r.name.as_deref(), Some("web"));
        assert_eq!(r.uid.as_deref(), Some("u1"));
        assert_eq!(r.resource_version.as_deref(), Some("7"));
    }
}

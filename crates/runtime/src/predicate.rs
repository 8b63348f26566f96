//! Which updates of the primary resource enqueue it: [`Predicate`].
//!
//! A controller without predicates reconciles on every update, resyncs included. Predicates
//! given to [`Controller::with_predicate`](crate::Controller::with_predicate) must all pass
//! for an update to enqueue; [`Predicate::or`] combines alternatives. Creations and
//! deletions are not filtered (controller-runtime's `GenerationChangedPredicate` passes them
//! too).

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use k8s_openapi::Metadata;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

type UpdateFn<K> = dyn Fn(&K, &K) -> bool + Send + Sync;

/// A test on an update `(old, new)` of an object: true lets it enqueue the object.
pub struct Predicate<K> {
    test: Arc<UpdateFn<K>>,
    name: &'static str,
}

impl<K> Clone for Predicate<K> {
    fn clone(&self) -> Self {
        Predicate {
            test: self.test.clone(),
            name: self.name,
        }
    }
}

impl<K> fmt::Debug for Predicate<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Predicate").field(&self.name).finish()
    }
}

fn meta<K: Metadata<Ty = ObjectMeta>>(k: &K) -> &ObjectMeta {
    k.metadata()
}

fn map_or_empty(m: &Option<BTreeMap<String, String>>) -> Option<&BTreeMap<String, String>> {
    m.as_ref().filter(|m| !m.is_empty())
}

impl<K: Metadata<Ty = ObjectMeta> + 'static> Predicate<K> {
    /// A predicate of your own.
    pub fn new(test: impl Fn(&K, &K) -> bool + Send + Sync + 'static) -> Self {
        Predicate {
            test: Arc::new(test),
            name: "custom",
        }
    }

    /// `metadata.generation` changed: the spec changed, not only the status or metadata
    /// (controller-runtime's `GenerationChangedPredicate`). Resources without a generation
    /// never pass an update.
    pub fn generation_changed() -> Self {
        Predicate {
            test: Arc::new(|old: &K, new: &K| meta(old).generation != meta(new).generation),
            name: "generation_changed",
        }
    }

    /// The labels changed (`LabelChangedPredicate`).
    pub fn labels_changed() -> Self {
        Predicate {
            test: Arc::new(|old: &K, new: &K| {
                map_or_empty(&meta(old).labels) != map_or_empty(&meta(new).labels)
            }),
            name: "labels_changed",
        }
    }

    /// The annotations changed (`AnnotationChangedPredicate`).
    pub fn annotations_changed() -> Self {
        Predicate {
            test: Arc::new(|old: &K, new: &K| {
                map_or_empty(&meta(old).annotations) != map_or_empty(&meta(new).annotations)
            }),
            name: "annotations_changed",
        }
    }

    /// The resourceVersion changed: anything changed; a resync (the same object delivered
    /// again) does not pass (`ResourceVersionChangedPredicate`).
    pub fn resource_version_changed() -> Self {
        Predicate {
            test: Arc::new(|old: &K, new: &K| {
                meta(old).resource_version != meta(new).resource_version
            }),
            name: "resource_version_changed",
        }
    }

    /// Passes when this or `other` passes.
    pub fn or(self, other: Predicate<K>) -> Self {
        let (a, b) = (self.test, other.test);
        Predicate {
            test: Arc::new(move |old: &K, new: &K| a(old, new) || b(old, new)),
            name: "or",
        }
    }

    /// Whether the update `old` → `new` passes.
    pub fn matches(&self, old: &K, new: &K) -> bool {
        (self.test)(old, new)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;

    fn cm(generation: i64, rv: &str, label: Option<&str>, annotation: Option<&str>) -> ConfigMap {
        let one = |v: Option<&str>| v.map(|v| BTreeMap::from([("k".to_owned(), v.to_owned())]));
        ConfigMap {
            metadata: ObjectMeta {
                generation: Some(generation),
                resource_version: Some(rv.into()),
                labels: one(label),
                annotations: one(annotation),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[test]
    fn each_predicate_sees_only_its_change() {
        let base = cm(1, "10", Some("a"), Some("x"));
        type Case = (&'static str, ConfigMap, [bool; 4]);
        // [generation, labels, annotations, resourceVersion]
        let cases: [Case; 5] = [
            (
                "resync",
                cm(1, "10", Some("a"), Some("x")),
                [false, false, false, false],
            ),
            (
                "status only",
                cm(1, "11", Some("a"), Some("x")),
                [false, false, false, true],
            ),
            (
                "spec",
                cm(2, "11", Some("a"), Some("x")),
                [true, false, false, true],
            ),
            (
                "label",
                cm(1, "11", Some("b"), Some("x")),
                [false, true, false, true],
            ),
            (
                "annotation removed",
                cm(1, "11", Some("a"), None),
                [false, false, true, true],
            ),
        ];
        let preds = [
            Predicate::<ConfigMap>::generation_changed(),
            Predicate::labels_changed(),
            Predicate::annotations_changed(),
            Predicate::resource_version_changed(),
        ];
        for (name, new, want) in cases {
            let got: Vec<bool> = preds.iter().map(|p| p.matches(&base, &new)).collect();
            assert_eq!(got, want, "{name}");
        }
    }

    #[test]
    fn an_empty_map_is_no_map() {
        let mut a = cm(1, "1", None, None);
        let b = a.clone();
        a.metadata.labels = Some(BTreeMap::new());
        assert!(!Predicate::labels_changed().matches(&a, &b));
    }

    #[test]
    fn or_passes_if_either_does() {
        let p = Predicate::<ConfigMap>::generation_changed().or(Predicate::labels_changed());
        let base = cm(1, "1", Some("a"), None);
        assert!(p.matches(&base, &cm(2, "2", Some("a"), None)));
        assert!(p.matches(&base, &cm(1, "2", Some("b"), None)));
        assert!(!p.matches(&base, &cm(1, "2", Some("a"), Some("n"))));
        let custom = Predicate::<ConfigMap>::new(|_, n| n.data.is_some());
        assert!(!custom.matches(&base, &base));
        assert_eq!(format!("{custom:?}"), "Predicate(\"custom\")");
    }
}

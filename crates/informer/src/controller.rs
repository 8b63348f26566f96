//! The processing loop: pops deltas from the [`Fifo`], applies them to the [`Store`] and
//! says which notifications handlers get (client-go's `controller.processLoop`,
//! `processDeltas`, `processDeltasInBatch` and `processReplacedAllInfo`).
//!
//! [`apply`] is the pure part: deltas in, store written (in one transaction per batch),
//! notifications out. Handlers are called by the caller afterwards, so the store always
//! reflects at least what a handler is told.

use kctrl_client::ObjectMetaAccess;
use std::sync::Arc;

use k8s_openapi::Metadata;

use crate::delta::{DeletedObject, Delta};
use crate::fifo::{DEFAULT_BATCH_SIZE, Fifo};
use crate::processor::Notification;
use crate::store::Store;

/// Pops batches from `fifo` and hands them to `process(deltas, is_in_initial_list)` until the
/// queue is closed and drained.
pub(crate) async fn process_loop<K>(fifo: &Fifo<K>, mut process: impl FnMut(Vec<Delta<K>>, bool))
where
    K: Metadata<Ty: ObjectMetaAccess>,
{
    while fifo
        .pop_batch(DEFAULT_BATCH_SIZE, &mut process)
        .await
        .is_some()
    {}
}

/// Applies `deltas` to `store` in one transaction and returns the notifications they
/// produce, in order:
///
/// * `Added` / `Updated`: insert; `Update(old, new)` if the key was cached, else
///   `Add(new, is_in_initial_list)`.
/// * `Deleted`: remove; `Delete(Known(obj))` with the object the watch reported.
/// * `ReplacedAll`: replace the whole store; `Delete(FinalStateUnknown)` for every cached key
///   missing from the list (sorted by key), then `Update` or `Add` for each listed object in
///   list order.
/// * `Resharded`: remove every cached object the new selector does not select,
///   `Delete(FinalStateUnknown)` for each (sorted by key), then `Update` or `Add` for each
///   object listed in the ranges gained; its `applied` token is completed once the store
///   holds the change.
/// * `SyncAll`: `Update(obj, obj)` for every cached object (a resync).
/// * `Bookmark`: only records the resourceVersion.
pub(crate) fn apply<K>(
    store: &Store<K>,
    deltas: Vec<Delta<K>>,
    is_in_initial_list: bool,
) -> Vec<Notification<K>>
where
    K: Metadata<Ty: ObjectMetaAccess> + Send + Sync + 'static,
{
    let mut out = Vec::with_capacity(deltas.len());
    let add_or_update = |old: Option<Arc<K>>, new: Arc<K>| match old {
        Some(old) => Notification::Update { old, new },
        None => Notification::Add {
            obj: new,
            is_in_initial_list,
        },
    };
    // Dropped after the transaction, outside the store's lock: the last references to
    // replaced objects may be freed here.
    let mut garbage = Vec::new();
    let mut applied = Vec::new();
    store.transaction(|txn| {
        for delta in deltas {
            match delta {
                Delta::Added(obj) | Delta::Updated(obj) => {
                    let old = txn.insert(obj.clone());
                    out.push(add_or_update(old, obj));
                }
                Delta::Deleted(obj) => {
                    garbage.extend(txn.remove_object(&obj));
                    out.push(Notification::Delete(DeletedObject::Known(obj)));
                }
                Delta::ReplacedAll {
                    mut objects,
                    resource_version,
                    kept,
                } => {
                    // Listed but not admitted: still there, so what the cache holds stays
                    // (and nobody is told anything about it).
                    let kept_cached: Vec<Arc<K>> =
                        kept.iter().filter_map(|k| txn.get(k).cloned()).collect();
                    objects.extend(kept_cached.iter().cloned());
                    let diff = txn.replace(objects, resource_version);
                    out.extend(diff.deleted.into_iter().map(|(key, last_known)| {
                        Notification::Delete(DeletedObject::FinalStateUnknown { key, last_known })
                    }));
                    out.extend(
                        diff.replaced
                            .into_iter()
                            .filter(|(_, new)| !kept_cached.iter().any(|k| Arc::ptr_eq(k, new)))
                            .map(|(old, new)| add_or_update(old, new)),
                    );
                }
                Delta::Resharded(change) => {
                    if let Some(keep) = &change.keep {
                        out.extend(txn.retain_selected(keep).into_iter().map(
                            |(key, last_known)| {
                                Notification::Delete(DeletedObject::FinalStateUnknown {
                                    key,
                                    last_known,
                                })
                            },
                        ));
                    }
                    for obj in change.objects {
                        let old = txn.insert(obj.clone());
                        out.push(add_or_update(old, obj));
                    }
                    applied.push(change.applied);
                }
                Delta::SyncAll => {
                    out.extend(txn.list().into_iter().map(|obj| Notification::Update {
                        old: obj.clone(),
                        new: obj,
                    }));
                }
                Delta::Bookmark(rv) => txn.set_resource_version(rv),
            }
        }
    });
    drop(garbage);
    // The store now reflects the change (its handlers are told next, in order).
    for token in applied {
        token.done();
    }
    out
}

/// Whether a notification is a resync: an update that did not change the resourceVersion
/// (a periodic resync, or a relist of an unchanged object). Resyncs go only to handlers
/// whose resync period is due (client-go's `sharedIndexInformer.OnUpdate`).
pub(crate) fn is_resync<K>(n: &Notification<K>) -> bool
where
    K: Metadata<Ty: ObjectMetaAccess>,
{
    match n {
        Notification::Update { old, new } => {
            old.metadata().resource_version() == new.metadata().resource_version()
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::Pod;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use std::collections::BTreeMap;

    use super::*;
    use crate::keys::key_of;

    fn pod(name: &str, rv: &str) -> Arc<Pod> {
        Arc::new(Pod {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                namespace: Some("default".to_owned()),
                resource_version: Some(rv.to_owned()),
                ..Default::default()
            },
            ..Default::default()
        })
    }

    fn labelled(name: &str, rv: &str, ver: &str) -> Arc<Pod> {
        let mut p = (*pod(name, rv)).clone();
        p.metadata.labels = Some(BTreeMap::from([("ver".to_owned(), ver.to_owned())]));
        Arc::new(p)
    }

    /// (action, key, event resourceVersion) for each notification.
    fn history(notes: &[Notification<Pod>]) -> Vec<(&'static str, String, String)> {
        let rv = |p: &Pod| p.metadata.resource_version.clone().unwrap_or_default();
        notes
            .iter()
            .map(|n| match n {
                Notification::Add { obj, .. } => ("add", key_of(obj.as_ref()), rv(obj)),
                Notification::Update { new, .. } => ("update", key_of(new.as_ref()), rv(new)),
                Notification::Delete(d) => {
                    let key = match d {
                        DeletedObject::FinalStateUnknown { key, .. } => key.clone(),
                        DeletedObject::Known(o) => key_of(o.as_ref()),
                    };
                    ("delete", key, rv(d.object()))
                }
            })
            .collect()
    }

    fn h(action: &'static str, key: &str, rv: &str) -> (&'static str, String, String) {
        (action, key.to_owned(), rv.to_owned())
    }

    /// client-go `TestReplaceEvents` (atomic mode): what a relist tells handlers and leaves
    /// in the store.
    #[test]
    fn test_replace_events() {
        struct Case {
            name: &'static str,
            initial: Vec<Arc<Pod>>,
            replaced: Vec<Arc<Pod>>,
            rv: &'static str,
            expected: Vec<(&'static str, String, String)>,
        }
        let cases = vec![
            Case {
                name: "Create with no initial objects",
                initial: vec![],
                replaced: vec![pod("pod-1", "1")],
                rv: "1",
                expected: vec![h("add", "default/pod-1", "1")],
            },
            Case {
                name: "Delete all objects",
                initial: vec![pod("pod-1", "1"), pod("pod-3", "2")],
                replaced: vec![],
                rv: "2",
                expected: vec![
                    h("delete", "default/pod-1", "1"),
                    h("delete", "default/pod-3", "2"),
                ],
            },
            Case {
                name: "Create, update, delete",
                initial: vec![
                    pod("pod-1", "1"),
                    labelled("pod-2", "2", "1"),
                    pod("pod-3", "3"),
                ],
                replaced: vec![
                    pod("pod-1", "4"),
                    labelled("pod-2", "5", "2"),
                    pod("pod-4", "6"),
                ],
                rv: "6",
                expected: vec![
                    h("delete", "default/pod-3", "3"),
                    h("update", "default/pod-1", "4"),
                    h("update", "default/pod-2", "5"),
                    h("add", "default/pod-4", "6"),
                ],
            },
        ];
        for case in cases {
            let store = Store::<Pod>::new();
            let n = case.initial.len();
            let setup = apply(
                &store,
                case.initial.into_iter().map(Delta::Added).collect(),
                false,
            );
            assert_eq!(setup.len(), n, "{}", case.name);
            let notes = apply(
                &store,
                vec![Delta::ReplacedAll {
                    objects: case.replaced.clone(),
                    resource_version: case.rv.to_owned(),
                    kept: Vec::new(),
                }],
                false,
            );
            assert_eq!(history(&notes), case.expected, "{}", case.name);
            let mut items = store.list();
            items.sort_by_key(|p| key_of(p.as_ref()));
            assert_eq!(items, case.replaced, "{}", case.name);
            assert_eq!(store.resource_version(), case.rv, "{}", case.name);
        }
    }

    #[test]
    fn deltas_map_to_notifications() {
        let store = Store::<Pod>::new();
        let notes = apply(
            &store,
            vec![
                Delta::Added(pod("a", "1")),
                Delta::Updated(pod("a", "2")),
                Delta::Added(pod("b", "3")),
                Delta::Deleted(pod("b", "4")),
            ],
            true,
        );
        assert_eq!(
            history(&notes),
            vec![
                h("add", "default/a", "1"),
                h("update", "default/a", "2"),
                h("add", "default/b", "3"),
                h("delete", "default/b", "4"),
            ]
        );
        assert!(matches!(
            notes[0],
            Notification::Add {
                is_in_initial_list: true,
                ..
            }
        ));
        assert!(!is_resync(&notes[1]));
        assert_eq!(store.list_keys(), vec!["default/a".to_owned()]);

        let notes = apply(&store, vec![Delta::SyncAll], false);
        assert_eq!(history(&notes), vec![h("update", "default/a", "2")]);
        assert!(
            is_resync(&notes[0]),
            "a resync update keeps the resourceVersion"
        );

        let notes = apply(&store, vec![Delta::Bookmark("9".to_owned())], false);
        assert!(notes.is_empty());
        assert_eq!(store.resource_version(), "9");
    }
}

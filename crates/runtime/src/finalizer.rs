//! Cleanup before deletion: [`finalizer`] adds a finalizer to an object on first sight, runs
//! the cleanup once the object is being deleted, and removes the finalizer after it, so the
//! API server deletes the object only when the cleanup is done.
//!
//! ```no_run
//! use std::sync::Arc;
//! use k8s_openapi::api::core::v1::ConfigMap;
//! use kctrl_client::Client;
//! use kctrl_runtime::finalizer::{Event, FinalizerError, finalizer};
//! use kctrl_runtime::Action;
//!
//! #[derive(Debug, thiserror::Error)]
//! #[error("the bucket service said no")]
//! struct BucketError;
//!
//! async fn reconcile(cm: Arc<ConfigMap>, client: Arc<Client>) -> Result<Action, FinalizerError<BucketError>> {
//!     finalizer(&client, "example.com/bucket", cm, |event| async move {
//!         match event {
//!             Event::Apply(_cm) => { /* make the bucket exist */ }
//!             Event::Cleanup(_cm) => { /* delete the bucket */ }
//!         }
//!         Ok(Action::await_change())
//!     })
//!     .await
//! }
//! ```
//!
//! The finalizer list is written with JSON patches that test what they rely on, so a write
//! based on a stale copy fails (and the key is retried with a fresher one) instead of dropping
//! a finalizer someone else added meanwhile: adding tests the object's resourceVersion;
//! removing (after the cleanup, which may itself have written the object) tests that the
//! finalizer is still at its index in `metadata.finalizers`, then removes that entry, as
//! kube-runtime does.

use std::error::Error as StdError;
use std::future::Future;
use std::sync::Arc;

use kctrl_client::{Api, Client, Patch, PatchParams, ResourceRef};
use serde_json::json;

use crate::action::Action;
use crate::controller::Object;

/// What [`finalizer`] asks of its callback.
#[derive(Debug)]
pub enum Event<K> {
    /// The object lives (and carries the finalizer): make the world match it.
    Apply(Arc<K>),
    /// The object is being deleted: clean up. When this succeeds the finalizer is removed
    /// and the API server finishes the deletion; when it fails it is tried again.
    Cleanup(Arc<K>),
}

/// Why [`finalizer`] failed.
#[derive(Debug, thiserror::Error)]
pub enum FinalizerError<E: StdError + 'static> {
    /// The callback failed on [`Event::Apply`].
    #[error("reconciling: {0}")]
    Apply(#[source] E),
    /// The callback failed on [`Event::Cleanup`]; the finalizer stays.
    #[error("cleaning up before deletion: {0}")]
    Cleanup(#[source] E),
    /// Writing the finalizer list failed (e.g. a conflict with another writer: retried).
    #[error("{action} finalizer {finalizer} on {object}: {source}")]
    Patch {
        /// `adding` or `removing`.
        action: &'static str,
        /// The finalizer.
        finalizer: String,
        /// `namespace/name` of the object.
        object: String,
        /// The API error.
        #[source]
        source: kctrl_client::Error,
    },
    /// The object has no name or no resourceVersion: not an object read from the API server.
    #[error(
        "finalizer {finalizer}: the object has no {missing}; pass one read from the API server or a cache"
    )]
    NotStored {
        /// The finalizer.
        finalizer: String,
        /// `name` or `resourceVersion`.
        missing: &'static str,
    },
}

/// Runs `reconcile` behind finalizer `name` (e.g. `example.com/cleanup`, a qualified name):
///
/// | the object | what happens |
/// |---|---|
/// | alive, without the finalizer | the finalizer is added, then `Apply` with the updated object |
/// | alive, with it | `Apply` |
/// | being deleted, with it | `Cleanup`; on success the finalizer is removed |
/// | being deleted, without it | nothing ([`Action::await_change`]): not ours to finish |
pub async fn finalizer<K, E, F, Fut>(
    client: &Client,
    name: &str,
    obj: Arc<K>,
    reconcile: F,
) -> Result<Action, FinalizerError<E>>
where
    K: Object,
    E: StdError + 'static,
    F: FnOnce(Event<K>) -> Fut,
    Fut: Future<Output = Result<Action, E>>,
{
    let meta = obj.metadata();
    let finalizers = meta.finalizers.clone().unwrap_or_default();
    let has = finalizers.iter().any(|f| f == name);
    let deleting = meta.deletion_timestamp.is_some();
    match (deleting, has) {
        (false, true) => reconcile(Event::Apply(obj))
            .await
            .map_err(FinalizerError::Apply),
        (true, false) => Ok(Action::await_change()),
        (false, false) => {
            let mut wanted = finalizers;
            wanted.push(name.to_owned());
            let updated = write_finalizers(client, obj.as_ref(), name, "adding", wanted).await?;
            reconcile(Event::Apply(Arc::new(updated)))
                .await
                .map_err(FinalizerError::Apply)
        }
        (true, true) => {
            let index = finalizers
                .iter()
                .position(|f| f == name)
                .unwrap_or_default();
            let action = reconcile(Event::Cleanup(obj.clone()))
                .await
                .map_err(FinalizerError::Cleanup)?;
            // The cleanup may have written the object itself: the removal tests the
            // finalizer's place in the list, not the resourceVersion of the copy from before.
            let path = format!("/metadata/finalizers/{index}");
            let patch = Patch::Json(json!([
                {"op": "test", "path": path, "value": name},
                {"op": "remove", "path": path},
            ]));
            patch_finalizers(client, obj.as_ref(), name, "removing", patch).await?;
            Ok(action)
        }
    }
}

/// Replaces `metadata.finalizers` of `obj` with `wanted`, if `obj` is still current.
async fn write_finalizers<K: Object, E: StdError + 'static>(
    client: &Client,
    obj: &K,
    finalizer: &str,
    action: &'static str,
    wanted: Vec<String>,
) -> Result<K, FinalizerError<E>> {
    let not_stored = |missing| FinalizerError::NotStored {
        finalizer: finalizer.to_owned(),
        missing,
    };
    let meta = obj.metadata();
    if meta.name.is_none() {
        return Err(not_stored("name"));
    }
    let rv = meta
        .resource_version
        .as_deref()
        .ok_or_else(|| not_stored("resourceVersion"))?;
    let patch = Patch::Json(json!([
        {"op": "test", "path": "/metadata/resourceVersion", "value": rv},
        {"op": "add", "path": "/metadata/finalizers", "value": wanted},
    ]));
    patch_finalizers(client, obj, finalizer, action, patch).await
}

/// Sends `patch` (a JSON patch of `metadata.finalizers`) for `obj`.
async fn patch_finalizers<K: Object, E: StdError + 'static>(
    client: &Client,
    obj: &K,
    finalizer: &str,
    action: &'static str,
    patch: Patch,
) -> Result<K, FinalizerError<E>> {
    let meta = obj.metadata();
    let name = meta
        .name
        .as_deref()
        .ok_or_else(|| FinalizerError::NotStored {
            finalizer: finalizer.to_owned(),
            missing: "name",
        })?;
    let namespace = meta.namespace.as_deref().unwrap_or("");
    let api: Api<K> = if ResourceRef::of::<K>().is_namespaced() {
        Api::namespaced(client.clone(), namespace)
    } else {
        Api::all(client.clone())
    };
    api.patch(name, &PatchParams::default(), &patch)
        .await
        .map_err(|source| FinalizerError::Patch {
            action,
            finalizer: finalizer.to_owned(),
            object: kctrl_informer::key_for(Some(namespace), name),
            source,
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use kctrl_client::{DeleteParams, PostParams};
    use kctrl_fake::FakeApi;
    use std::sync::Mutex;

    const F: &str = "example.com/cleanup";

    #[derive(Debug, thiserror::Error)]
    #[error("asked to fail")]
    struct Failed;

    async fn run(
        client: &Client,
        cm: ConfigMap,
        seen: &Mutex<Vec<&'static str>>,
        fail: bool,
    ) -> Result<Action, FinalizerError<Failed>> {
        finalizer(client, F, Arc::new(cm), |event| async move {
            let (what, obj) = match &event {
                Event::Apply(o) => ("apply", o),
                Event::Cleanup(o) => ("cleanup", o),
            };
            assert!(
                obj.metadata.finalizers.iter().flatten().any(|f| f == F),
                "{what} sees its finalizer"
            );
            seen.lock().unwrap().push(what);
            if fail {
                Err(Failed)
            } else {
                Ok(Action::await_change())
            }
        })
        .await
    }

    #[tokio::test]
    async fn added_on_first_sight_removed_after_cleanup() {
        let fake = FakeApi::new();
        let client = fake.client();
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), "ns");
        let created = api
            .create(
                &PostParams::default(),
                &ConfigMap {
                    metadata: ObjectMeta {
                        name: Some("c".into()),
                        finalizers: Some(vec!["someone.else/keep".into()]),
                        ..Default::default()
                    },
                    ..Default::default()
                },
            )
            .await
            .unwrap();
        let seen = Mutex::new(Vec::new());

        // First sight: added beside the other one, then applied.
        run(&client, created.clone(), &seen, false).await.unwrap();
        let live = api.get("c").await.unwrap();
        assert_eq!(
            live.metadata.finalizers.clone().unwrap(),
            ["someone.else/keep", F]
        );
        // A stale copy cannot write: the resourceVersion test fails.
        let mut stale = created.clone();
        stale.metadata.finalizers = None;
        let err = run(&client, stale, &seen, false).await.unwrap_err();
        assert!(
            err.to_string()
                .starts_with("adding finalizer example.com/cleanup on ns/c:"),
            "{err}"
        );
        // Alive with it: applied, nothing written.
        run(&client, live.clone(), &seen, false).await.unwrap();
        assert_eq!(
            api.get("c").await.unwrap().metadata.resource_version,
            live.metadata.resource_version
        );

        // Deleted: the object stays while finalizers remain.
        api.delete("c", &DeleteParams::default()).await.unwrap();
        let deleting = api.get("c").await.unwrap();
        assert!(deleting.metadata.deletion_timestamp.is_some());
        // A failed cleanup keeps the finalizer.
        let err = run(&client, deleting.clone(), &seen, true)
            .await
            .unwrap_err();
        assert!(matches!(err, FinalizerError::Cleanup(Failed)), "{err}");
        assert_eq!(
            api.get("c")
                .await
                .unwrap()
                .metadata
                .finalizers
                .unwrap()
                .len(),
            2
        );
        // A successful one removes ours only.
        run(&client, deleting, &seen, false).await.unwrap();
        let after = api.get("c").await.unwrap();
        assert_eq!(
            after.metadata.finalizers.clone().unwrap(),
            ["someone.else/keep"]
        );
        // Being deleted without ours: nothing to do.
        run(&client, after, &seen, false).await.unwrap();
        assert_eq!(
            *seen.lock().unwrap(),
            ["apply", "apply", "cleanup", "cleanup"]
        );
    }

    /// A cleanup that writes the object (a status, an annotation) does not make the removal
    /// fail: the removal tests that the finalizer is still where it was, not that the object
    /// is unchanged, so the cleanup runs once.
    #[tokio::test]
    async fn a_cleanup_that_writes_the_object_runs_once() {
        let fake = FakeApi::new();
        let client = fake.client();
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), "ns");
        let cm = ConfigMap {
            metadata: ObjectMeta {
                name: Some("c".into()),
                finalizers: Some(vec![F.into(), "someone.else/keep".into()]),
                ..Default::default()
            },
            ..Default::default()
        };
        api.create(&PostParams::default(), &cm).await.unwrap();
        api.delete("c", &DeleteParams::default()).await.unwrap();
        let deleting = api.get("c").await.unwrap();
        let cleanups = Mutex::new(0);
        let result = finalizer(&client, F, Arc::new(deleting), |event| {
            let api = api.clone();
            let cleanups = &cleanups;
            async move {
                assert!(matches!(event, Event::Cleanup(_)));
                *cleanups.lock().unwrap() += 1;
                let note = Patch::Merge(json!({"metadata": {"annotations": {"cleaned": "yes"}}}));
                api.patch("c", &PatchParams::default(), &note).await?;
                Ok::<_, kctrl_client::Error>(Action::await_change())
            }
        })
        .await;
        assert!(result.is_ok(), "{result:?}");
        assert_eq!(*cleanups.lock().unwrap(), 1);
        let after = api.get("c").await.unwrap();
        assert_eq!(after.metadata.finalizers.unwrap(), ["someone.else/keep"]);
        assert_eq!(after.metadata.annotations.unwrap()["cleaned"], "yes");
    }

    /// The removal refuses a list where the finalizer moved (someone rewrote the list since
    /// the copy was read): the key is retried with a fresh copy instead of removing another
    /// finalizer.
    #[tokio::test]
    async fn the_removal_tests_the_place_of_the_finalizer() {
        let fake = FakeApi::new();
        let client = fake.client();
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), "ns");
        let cm = ConfigMap {
            metadata: ObjectMeta {
                name: Some("c".into()),
                finalizers: Some(vec!["a.example/first".into(), F.into()]),
                ..Default::default()
            },
            ..Default::default()
        };
        api.create(&PostParams::default(), &cm).await.unwrap();
        api.delete("c", &DeleteParams::default()).await.unwrap();
        let stale = api.get("c").await.unwrap();
        // Another controller removes its finalizer: ours moves to index 0.
        let drop_first = Patch::Json(json!([{"op": "remove", "path": "/metadata/finalizers/0"}]));
        api.patch("c", &PatchParams::default(), &drop_first)
            .await
            .unwrap();
        let seen = Mutex::new(Vec::new());
        let err = run(&client, stale, &seen, false).await.unwrap_err();
        assert!(
            err.to_string()
                .starts_with("removing finalizer example.com/cleanup on ns/c:"),
            "{err}"
        );
        assert_eq!(
            api.get("c").await.unwrap().metadata.finalizers.unwrap(),
            [F]
        );
        // With the fresh copy it goes.
        let fresh = api.get("c").await.unwrap();
        run(&client, fresh, &seen, false).await.unwrap();
        assert!(
            api.get("c").await.is_err(),
            "deleted once the last finalizer went"
        );
    }

    #[tokio::test]
    async fn an_object_not_from_the_server_is_refused_by_name() {
        let fake = FakeApi::new();
        let seen = Mutex::new(Vec::new());
        let err = run(&fake.client(), ConfigMap::default(), &seen, false)
            .await
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "finalizer example.com/cleanup: the object has no name; pass one read from the API server or a cache"
        );
        assert!(seen.lock().unwrap().is_empty());
    }
}
